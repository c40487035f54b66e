/*
 * topo_probe: host memory copy bandwidth and a blocked single-precision matmul rate. See
 * topo_probe.h. Single-threaded on purpose: the figures compare machines per core-set the
 * worker runs on, and a probe must not disturb other processes for long.
 */
#include "topology/topo_probe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"

/* Keeps the compiler from dropping a copy whose result is never read. */
static volatile unsigned char probe_sink;

sc_status topo_probe_host_copy(size_t bytes, int reps, double *bytes_per_s, sc_err *err)
{
    *bytes_per_s = 0;
    if (bytes == 0 || reps < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "host copy probe: need bytes > 0 and reps >= 1");
    unsigned char *src = malloc(bytes), *dst = malloc(bytes);
    if (src == NULL || dst == NULL) {
        free(src);
        free(dst);
        return SC_ERRF(err, SC_ERR_NOMEM, "host copy probe: cannot allocate 2 x %zu bytes", bytes);
    }
    /* Touch every page first so the timed copies do not measure page faults. */
    memset(src, 1, bytes);
    memset(dst, 0, bytes);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        src[(size_t)r % bytes] = (unsigned char)r;
        double t0 = sc_clock_now_s();
        memcpy(dst, src, bytes);
        double dt = sc_clock_now_s() - t0;
        probe_sink = dst[(size_t)r % bytes];
        if (dt > 0) {
            double rate = 2.0 * (double)bytes / dt;
            if (rate > best)
                best = rate;
        }
    }
    free(src);
    free(dst);
    if (best <= 0)
        return SC_ERRF(err, SC_ERR_INTERNAL, "host copy probe: clock did not advance");
    *bytes_per_s = best;
    return SC_OK;
}

enum { PROBE_BLOCK = 64 };

void topo_probe_sgemm(int n, const float *a, const float *b, float *c)
{
    memset(c, 0, sizeof(float) * (size_t)n * (size_t)n);
    /* i-k-j order inside blocks: the innermost loop streams rows of B and C, which the
     * compiler vectorises; the blocks keep those rows in cache. */
    for (int i0 = 0; i0 < n; i0 += PROBE_BLOCK) {
        int i1 = i0 + PROBE_BLOCK < n ? i0 + PROBE_BLOCK : n;
        for (int k0 = 0; k0 < n; k0 += PROBE_BLOCK) {
            int k1 = k0 + PROBE_BLOCK < n ? k0 + PROBE_BLOCK : n;
            for (int j0 = 0; j0 < n; j0 += PROBE_BLOCK) {
                int j1 = j0 + PROBE_BLOCK < n ? j0 + PROBE_BLOCK : n;
                for (int i = i0; i < i1; i++) {
                    float *crow = c + (size_t)i * n;
                    for (int k = k0; k < k1; k++) {
                        float aik = a[(size_t)i * n + k];
                        const float *brow = b + (size_t)k * n;
                        for (int j = j0; j < j1; j++)
                            crow[j] += aik * brow[j];
                    }
                }
            }
        }
    }
}

sc_status topo_probe_cpu_gemm(int n, int reps, double *gflops, sc_err *err)
{
    *gflops = 0;
    if (n < 8 || n > 8192 || reps < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "cpu gemm probe: need 8 <= n <= 8192, reps >= 1");
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float));
    float *c = malloc(nn * sizeof(float));
    sc_status rc = SC_OK;
    if (a == NULL || b == NULL || c == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "cpu gemm probe: cannot allocate 3 x %d^2 floats", n);
        goto out;
    }
    /* Small integers keep every product exact in float, so the check below is exact too. */
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((i * 7 + 3) % 5) - 2.0f;
        b[i] = (float)((i * 11 + 1) % 7) - 3.0f;
    }
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = sc_clock_now_s();
        topo_probe_sgemm(n, a, b, c);
        double dt = sc_clock_now_s() - t0;
        if (dt > 0) {
            double rate = 2.0 * (double)n * n * n / dt / 1e9;
            if (rate > best)
                best = rate;
        }
    }
    for (int t = 0; t < 4; t++) {
        int i = (t * 37) % n, j = (t * 53 + 5) % n;
        double want = 0;
        for (int k = 0; k < n; k++)
            want += (double)a[(size_t)i * n + k] * b[(size_t)k * n + j];
        if (fabs(want - c[(size_t)i * n + j]) > 0.5) {
            rc = SC_ERRF(err, SC_ERR_INTERNAL, "cpu gemm probe: wrong product at (%d, %d)", i, j);
            goto out;
        }
    }
    if (best <= 0) {
        rc = SC_ERRF(err, SC_ERR_INTERNAL, "cpu gemm probe: clock did not advance");
        goto out;
    }
    *gflops = best;
out:
    free(a);
    free(b);
    free(c);
    return rc;
}
