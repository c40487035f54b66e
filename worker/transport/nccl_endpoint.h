/*
 * nccl endpoints: how a stage's nccl transport publishes the ids of its communicators, as text
 * that travels like any other endpoint. Usable in every build (CPU-only ones too), for the
 * coordinator and tests; transport.h includes this header.
 * Not here: the transport itself (transport_nccl.c, CUDA + NCCL builds only).
 * Invariant: rt_nccl_endpoint_parse accepts exactly what rt_nccl_endpoint_format writes, and
 * never writes the ids on an error.
 */
#ifndef RT_NCCL_ENDPOINT_H
#define RT_NCCL_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/sc_status.h"

/* A bound nccl endpoint is "nccl://v1/<A>/<G>" where A and G are the NCCL unique ids (256 lower
 * hex digits each) of the two communicators between this stage and the next one (A carries
 * activations forward, G gradients back; this stage is rank 0 of both, the next stage rank 1),
 * or "nccl://v1/-" for a stage with no next stage. "v1" versions the format. */
#define RT_NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

/* True when `ep` starts with "nccl://". */
bool rt_endpoint_is_nccl(const char *ep);
/* Writes the endpoint of ids (a, g), or of no ids when both are NULL, into buf[size]
 * (>= RT_ENDPOINT_MAX is always enough). SC_ERR_INVALID when it does not fit. */
sc_status rt_nccl_endpoint_format(const unsigned char *a, const unsigned char *g, char *buf,
                                  size_t size, sc_err *err);
/* Parses an endpoint written by rt_nccl_endpoint_format. *has_ids false for "nccl://v1/-" (a and
 * g untouched). Anything else (another version, a wrong length, a non-hex digit) is
 * SC_ERR_INVALID naming what was wrong and the expected form. */
sc_status rt_nccl_endpoint_parse(const char *ep, bool *has_ids, unsigned char *a, unsigned char *g,
                                 sc_err *err);

/* Hex of an NCCL unique id (RT_NCCL_ID_BYTES bytes, 2 * RT_NCCL_ID_BYTES lower-case digits, no
 * terminator) and back: rt_hex_get decodes exactly that many digits at s, -1 (with the offset
 * of the first bad character in *bad_at) when one is not a hex digit, else 0. The replicas'
 * all-reduce endpoint (allreduce.c) codes its id the same way. */
void rt_hex_put(const unsigned char *id, char *out);
int rt_hex_get(const char *s, unsigned char *id, size_t *bad_at);

#endif /* RT_NCCL_ENDPOINT_H */
