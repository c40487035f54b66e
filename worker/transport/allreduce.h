/*
 * rt allreduce: the gradient all-reduce of a replicated stage's copies when every copy runs on
 * a GPU of its own: one NCCL communicator of the copies (rank = copy), ncclAllReduce over the
 * stage's device gradients in place, so the gradients never leave the GPUs. Copies on CPUs, or
 * sharing a GPU (NCCL refuses two ranks of one communicator on one device), all-reduce in host
 * memory over their data-plane transport instead (the runner's host path).
 *
 * Setup, as the data-plane endpoints travel: copy 0 creates the communicator's NCCL unique id
 * when it is made and publishes it as an endpoint, "nccl-reduce://v1/<256 hex digits>", which the
 * runner joins to its data endpoint ("tcp://H:P|nccl-reduce://v1/..."); every copy then connects
 * with that endpoint (a collective: each waits at most timeout_ms for the others to join).
 *
 * Results: NCCL's sum (or average) in its own order of additions, the same bits on every copy,
 * so the copies' parameters stay identical; not the host path's bits (which adds in copy order).
 *
 * Never hanging: the communicator is non-blocking and every wait polls with a deadline of
 * timeout_ms (SC_ERR_TIMEOUT; SC_ERR_UNAVAILABLE when NCCL reports an error, as when a copy's
 * process died; SC_ERR_CANCELLED after rt_allreduce_abort); after any of them the communicator
 * is aborted and the object only reports that error again.
 * Builds without CUDA + NCCL: rt_allreduce_new is SC_ERR_UNSUPPORTED; the endpoint functions
 * work in every build (the coordinator and tests use them).
 * Threading: one user thread; rt_allreduce_abort from any.
 */
#ifndef RT_ALLREDUCE_H
#define RT_ALLREDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

#define RT_REDUCE_SCHEME "nccl-reduce://"

typedef struct {
    int device;     /* this copy's CUDA device ordinal (cuda:N) */
    int ranks;      /* copies of the stage, >= 2 */
    int rank;       /* this copy, 0..ranks-1 */
    int timeout_ms; /* longest wait of a join or an all-reduce, > 0 */
} rt_allreduce_cfg;

typedef struct rt_allreduce rt_allreduce;

/* SC_ERR_INVALID naming the field when ranks < 2, rank is outside 0..ranks-1 or timeout_ms <= 0
 * (rt_allreduce_new checks it first, in every build). */
sc_status rt_allreduce_cfg_check(const rt_allreduce_cfg *cfg, sc_err *err);

/* Checks the configuration and the device; rank 0 creates the unique id. SC_ERR_INVALID for a
 * bad count, rank or timeout; SC_ERR_UNSUPPORTED without CUDA + NCCL in the build or without a
 * visible device; SC_ERR_INVALID for a device that does not exist; SC_ERR_NCCL when NCCL cannot
 * make an id. */
sc_status rt_allreduce_new(rt_allreduce **out, const rt_allreduce_cfg *cfg, sc_err *err);
/* Frees everything, aborting a communicator whose operations did not complete. Accepts NULL. */
void rt_allreduce_destroy(rt_allreduce **a);

/* Copy 0's endpoint (the id, for the others to join); "" on other copies. */
const char *rt_allreduce_endpoint(const rt_allreduce *a);

/* Joins the communicator: `rank0_endpoint` is copy 0's endpoint (copy 0 passes its own). */
sc_status rt_allreduce_connect(rt_allreduce *a, const char *rank0_endpoint, sc_err *err);

/* Every copy calls it with its own `n` floats of device memory at `dev_grads` (fully written:
 * the caller's streams synchronized) and its host `*scalar`: on return dev_grads holds the sum
 * over the copies (their mean when `mean`) and *scalar the sum of the copies' scalars (a loss
 * sum, say). */
sc_status rt_allreduce_run(rt_allreduce *a, float *dev_grads, size_t n, bool mean, double *scalar,
                           sc_err *err);

/* After a successful rt_allreduce_run: every copy's clock when it called it (its gradients
 * complete), by rank, into ready_ns[0..max-1]; returns how many (0 before a run, after a failed
 * one, or without the GPU backend). The host all-reduce's messages carry the same stamps. */
int rt_allreduce_ready(const rt_allreduce *a, uint64_t *ready_ns, int max);

/* Makes waits return SC_ERR_CANCELLED from now on. Thread-safe. */
void rt_allreduce_abort(rt_allreduce *a);

/* ---- endpoints (every build) ---- */
/* Writes "nccl-reduce://v1/<hex of id>" (RT_NCCL_ID_BYTES bytes) into buf[size]. */
sc_status rt_reduce_endpoint_format(const unsigned char *id, char *buf, size_t size, sc_err *err);
/* Parses an endpoint written by rt_reduce_endpoint_format into id[RT_NCCL_ID_BYTES]; anything
 * else is SC_ERR_INVALID naming what was wrong and the expected form. */
sc_status rt_reduce_endpoint_parse(const char *ep, unsigned char *id, sc_err *err);

#endif /* RT_ALLREDUCE_H */
