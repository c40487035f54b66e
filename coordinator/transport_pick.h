/*
 * coord transport pick: which data-plane transport a job's stages use, from the job spec's
 * "transport" key and the hardware reports of the workers the plan put on each stage.
 * nccl can carry a stage boundary when both stages run unreplicated on CUDA devices of workers
 * whose reports offer it (HardwareReport.nccl: a CUDA + NCCL build) and are not the same GPU
 * (NCCL refuses two ranks of one communicator on one device); zmq carries anything.
 * The choice is per boundary: "auto" (the default) gives nccl to every boundary that can take
 * it and zmq to the others (so CPU-only jobs stay on zmq); "zmq" gives zmq everywhere; "nccl"
 * requires every boundary to take it, else it is an error naming the first that cannot. A
 * stage whose boundaries differ holds one transport per direction (the runner's
 * transport_next). Replicated stages route their messages over zmq, so a boundary next to a
 * replicated stage (its own two stages or their other neighbours) stays zmq; the copies of such
 * a stage all-reduce their gradients over NCCL when all are on distinct GPUs of NCCL workers
 * (and the spec does not say "zmq"), else in host memory.
 * Pure functions (no registry, no I/O), so the rules are unit-tested.
 */
#ifndef COORD_TRANSPORT_PICK_H
#define COORD_TRANSPORT_PICK_H

#include <stdbool.h>
#include <stddef.h>

#include "common/sc_status.h"

/* Where one stage runs, as the coordinator knows it from the worker's hardware report. */
typedef struct {
    const char *host;       /* hostname ("" when unknown) */
    bool cuda;              /* the worker drives a CUDA device */
    int device;             /* its index on the host */
    const char *pci_bus_id; /* "" when unknown */
    bool nccl;              /* the worker offers the nccl transport */
    int replicas;           /* copies of the stage (>= 1) */
} coord_stage_site;

/* Whether the boundary between stages a and b (a before b) can use nccl; when not, `why`
 * (why_size bytes, may be NULL) says which condition fails. */
bool coord_boundary_nccl_ok(const coord_stage_site *a, const coord_stage_site *b, char *why,
                            size_t why_size);

/* Whether the n copies of a replicated stage (each copy's site; their `replicas` is not read)
 * can all-reduce their gradients over NCCL on their GPUs: n >= 2, every copy on a CUDA device
 * of a worker that offers nccl, no two on the same GPU. When not, `why` (why_size bytes, may be
 * NULL) says which condition fails; they then all-reduce in host memory. */
bool coord_replicas_nccl_ok(const coord_stage_site *copies, size_t n, char *why, size_t why_size);

/* The transport of each of the n-1 boundaries of `n` stages into kinds[] ("zmq" or "nccl",
 * static strings; kinds[b] is between stages b and b+1) by `pref` ("auto", "zmq", "nccl"; NULL
 * means "auto"). An unknown pref is SC_ERR_INVALID; "nccl" that some boundary cannot take is
 * SC_ERR_UNSUPPORTED naming the boundary and the reason. n < 2 fills nothing. */
sc_status coord_transport_pick(const char *pref, const coord_stage_site *sites, size_t n,
                               const char **kinds, sc_err *err);

/* Stage s's transports from the boundaries' kinds: *transport for its previous boundary (its
 * next one for stage 0), *transport_next for its next boundary when that differs, else "".
 * A single stage gets "zmq" and "". */
void coord_transport_of_stage(const char *const *kinds, size_t n, size_t s, const char **transport,
                              const char **transport_next);

#endif /* COORD_TRANSPORT_PICK_H */
