/*
 * bench_kernels: CPU figures of the layer library — GFLOP/s of the linear layer's three products
 * (forward, input gradient, weight gradient) on the fast path and the reference, beside the
 * BLAS's own sgemm on the same shape, and the time, tokens/s and GFLOP/s of a training step
 * (forward, backward, AdamW) of a model.
 *
 * usage: bench_kernels [--model SPEC] [--batch N] [--steps N] [--threads N]
 *                      [--kernels fast|reference] [--no-matmul]
 * Without --model, a GPT of 4 layers, width 128, 4 heads, sequence 64, vocabulary 256.
 * --threads: the CPU threads (default: the cores of this process's affinity mask / cgroup).
 * --kernels: what the training step runs (default fast; the matmul lines show both).
 * The last line, "step_ms=... mean_ms=... tokens_per_s=..." (best step; mean of the steps after
 * the first), is for scripts (bench_cpu_vs_torch.sh).
 * Prints figures; asserts nothing. Build in Release for meaningful numbers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "kernels/linear.h"
#include "kernels/model.h"
#include "kernels/stage.h"
#include "kernels/threads_cpu.h"

#ifdef SC_HAVE_BLAS
#include <cblas.h>
#endif

static const char default_gpt[] =
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", \"name\": "
    "\"gpt-bench\", "
    "\"vocab\": 256, \"seq_len\": 64, \"layers\": 4, \"width\": 128, \"heads\": 4}";

static float *rnd(size_t n)
{
    float *p = malloc(n * sizeof *p);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    uint64_t s = 99;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((s >> 40) / 8388608.0 - 1.0);
    }
    return p;
}

typedef void (*fwd_fn)(float *, const float *, const float *, const float *, int, int, int);
typedef void (*bwdi_fn)(float *, const float *, const float *, int, int, int);
typedef void (*bwdw_fn)(float *, float *, const float *, const float *, int, int, int);

/* best of `reps` timings of each product, in GFLOP/s */
static void time_linear(fwd_fn fwd, bwdi_fn bwdi, bwdw_fn bwdw, int N, int IC, int OC, int reps,
                        double gflops[3])
{
    float *x = rnd((size_t)N * IC), *w = rnd((size_t)OC * IC), *b = rnd(OC);
    float *out = rnd((size_t)N * OC), *dx = rnd((size_t)N * IC), *dw = rnd((size_t)OC * IC);
    double flops = 2.0 * N * IC * OC, best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; r < reps; r++) {
        double t0 = sc_clock_now_s();
        fwd(out, x, w, b, N, IC, OC);
        double t1 = sc_clock_now_s();
        bwdi(dx, out, w, N, IC, OC);
        double t2 = sc_clock_now_s();
        bwdw(dw, b, out, x, N, IC, OC);
        double t3 = sc_clock_now_s();
        best[0] = t1 - t0 < best[0] ? t1 - t0 : best[0];
        best[1] = t2 - t1 < best[1] ? t2 - t1 : best[1];
        best[2] = t3 - t2 < best[2] ? t3 - t2 : best[2];
    }
    for (int i = 0; i < 3; i++)
        gflops[i] = flops / best[i] * 1e-9;
    free(x), free(w), free(b), free(out), free(dx), free(dw);
}

static void bench_matmul(int N, int IC, int OC)
{
    double ref[3], fast[3];
    time_linear(kn_linear_forward_cpu, kn_linear_backward_input_cpu, kn_linear_backward_weight_cpu,
                N, IC, OC, 3, ref);
    time_linear(kn_linear_forward_fast, kn_linear_backward_input_fast,
                kn_linear_backward_weight_fast, N, IC, OC, 10, fast);
    printf("matmul %dx%d @ %dx%d^T, GFLOP/s (forward, input-grad, weight-grad): "
           "fast %.1f %.1f %.1f; reference %.1f %.1f %.1f",
           N, IC, OC, IC, fast[0], fast[1], fast[2], ref[0], ref[1], ref[2]);
#ifdef SC_HAVE_BLAS
    /* the BLAS's own figure: the forward's product alone (no bias), timed turn about with the
     * layer's forward so that both see the same machine load */
    float *x = rnd((size_t)N * IC), *w = rnd((size_t)OC * IC), *b = rnd(OC);
    float *out = rnd((size_t)N * OC);
    double best = 1e30, layer = 1e30;
    for (int r = 0; r < 20; r++) {
        double t0 = sc_clock_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, x, IC, w, IC, 0.0f,
                    out, OC);
        double t1 = sc_clock_now_s();
        kn_linear_forward_fast(out, x, w, b, N, IC, OC);
        double t2 = sc_clock_now_s();
        best = t1 - t0 < best ? t1 - t0 : best;
        layer = t2 - t1 < layer ? t2 - t1 : layer;
    }
    double f = 2.0 * N * IC * OC * 1e-9;
    printf("; sgemm alone %.1f, layer forward %.1f beside it (%.0f%%)", f / best, f / layer,
           100.0 * best / layer);
    free(x), free(w), free(b), free(out);
#endif
    printf("\n");
}

int main(int argc, char **argv)
{
    const char *spec = NULL;
    int64_t batch = 4, steps = 5, threads = 0;
    bool reference = false, matmul = true;
    sc_err err;
    sc_err_clear(&err);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            spec = argv[++i];
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            if (sc_parse_int64(argv[++i], 1, 4096, "--batch", &batch, &err) != SC_OK)
                goto usage;
        } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            if (sc_parse_int64(argv[++i], 1, 100000, "--steps", &steps, &err) != SC_OK)
                goto usage;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            if (sc_parse_int64(argv[++i], 0, KN_CPU_THREADS_MAX, "--threads", &threads, &err) !=
                SC_OK)
                goto usage;
        } else if (strcmp(argv[i], "--kernels") == 0 && i + 1 < argc) {
            const char *k = argv[++i];
            if (strcmp(k, "fast") != 0 && strcmp(k, "reference") != 0) {
                SC_ERRF(&err, SC_ERR_INVALID, "--kernels: '%s'; valid: fast, reference", k);
                goto usage;
            }
            reference = strcmp(k, "reference") == 0;
        } else if (strcmp(argv[i], "--no-matmul") == 0) {
            matmul = false;
        } else {
            goto usage;
        }
    }
    if (kn_cpu_set_threads((int)threads, "--threads", &err) != SC_OK)
        goto usage;
    printf("CPU threads: %d (%d cores available); BLAS: %s\n", kn_cpu_threads(),
           kn_cpu_cores_available(), kn_built_with_blas() ? "OpenBLAS" : "none (reference only)");
    if (matmul) {
        bench_matmul(256, 768, 768);
        bench_matmul(512, 128, 512);
    }

    kn_model *m = NULL;
    sc_status rc = spec ? kn_model_load(&m, spec, &err)
                        : kn_model_parse(&m, "built-in", default_gpt, strlen(default_gpt), &err);
    if (rc != SC_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        return 2;
    }
    kn_model_set_cpu_reference(m, reference);
    kn_device cpu = {KN_DEV_CPU, 0};
    kn_stage *st = NULL;
    if (kn_stage_new(&st, m, 0, kn_model_block_count(m) - 1, cpu, (int)batch, &err) != SC_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        kn_model_destroy(&m);
        return 1;
    }
    const kn_block *b0 = kn_model_block(m, 0);
    size_t nin = b0->in_floats * batch, ntgt = (size_t)kn_model_targets_per_sample(m) * batch;
    void *in = rnd(nin);
    int32_t *tgt = malloc(ntgt * sizeof *tgt);
    for (size_t i = 0; i < nin; i++)
        if (b0->in_tokens)
            ((int32_t *)in)[i] = (int32_t)(i * 31 % (size_t)b0->V);
    for (size_t i = 0; i < ntgt; i++)
        tgt[i] = (int32_t)(i * 17 % (size_t)kn_model_classes(m));
    double best = 1e30, after_first = 0; /* the mean leaves out the first step's warm-up */
    float loss = 0;
    for (int s = 0; s < steps; s++) {
        double t0 = sc_clock_now_s();
        if (kn_stage_forward_host(st, 0, in, tgt, (int)batch, &err) != SC_OK ||
            kn_stage_loss(st, 0, &loss, &err) != SC_OK || kn_stage_zero_grads(st, &err) ||
            kn_stage_backward(st, 0, NULL, &err) || kn_stage_step(st, &err)) {
            fprintf(stderr, "bench_kernels: %s\n", err.msg);
            return 1;
        }
        double dt = sc_clock_now_s() - t0;
        if (dt < best)
            best = dt;
        if (s > 0)
            after_first += dt;
    }
    double mean = steps > 1 ? after_first / (double)(steps - 1) : best;
    double flops = kn_model_train_flops_per_sample(m) * batch;
    printf("%s (%zu parameters), batch %d, %s kernels: best step %.1f ms over %d, %.2f GFLOP/s",
           kn_model_name(m), kn_model_param_count(m), (int)batch, reference ? "reference" : "fast",
           best * 1e3, (int)steps, flops / best * 1e-9);
    if (b0->in_tokens)
        printf(", %.0f tokens/s", (double)nin / best);
    printf(", last loss %.4f\n", loss);
    printf("step_ms=%.3f mean_ms=%.3f tokens_per_s=%.1f params=%zu\n", best * 1e3, mean * 1e3,
           b0->in_tokens ? (double)nin / best : 0.0, kn_model_param_count(m));
    free(in);
    free(tgt);
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
    return 0;
usage:
    fprintf(stderr,
            "usage: bench_kernels [--model SPEC] [--batch N] [--steps N] [--threads N]\n"
            "                     [--kernels fast|reference] [--no-matmul]\n%s\n",
            err.msg);
    return 2;
}
