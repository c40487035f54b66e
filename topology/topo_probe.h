/*
 * topo_probe: short measurements of the host (memory copy bandwidth, single-precision matmul
 * rate), used where no better figure exists: a CPU-only worker's speed, the host side of
 * transfers.
 *
 * What it does not do: no GPU work (topo_cuda.h), no long benchmarks: each probe runs for
 * well under a second so a worker can run them at start-up.
 *
 * Key invariant: a probe only measures; its result is a rate (> 0) or an error, never a guess.
 */
#ifndef SC_TOPO_PROBE_H
#define SC_TOPO_PROBE_H

#include <stddef.h>

#include "common/sc_status.h"

/* Copies a `bytes`-sized buffer `reps` times and returns the best rate, counting the bytes
 * read and written (bytes * 2 per copy). Errors: SC_ERR_NOMEM, SC_ERR_INVALID (bytes == 0). */
sc_status topo_probe_host_copy(size_t bytes, int reps, double *bytes_per_s, sc_err *err);

/* Multiplies two n x n single-precision matrices with a cache-blocked loop (one thread) and
 * returns the best rate over `reps` runs, as 2 n^3 / time. Errors: SC_ERR_NOMEM,
 * SC_ERR_INVALID (n < 8). The result C is checked against a few dot products so a broken loop
 * reports SC_ERR_INTERNAL instead of a rate. */
sc_status topo_probe_cpu_gemm(int n, int reps, double *gflops, sc_err *err);

/* The blocked product itself, exposed for the tests: C(n x n) = A(n x n) * B(n x n),
 * row-major. */
void topo_probe_sgemm(int n, const float *a, const float *b, float *c);

#endif /* SC_TOPO_PROBE_H */
