/*
 * bench_kernels: CPU figures of the layer library — GFLOP/s of the reference matmul (forward,
 * input-gradient and weight-gradient products) and the time, tokens/s and GFLOP/s of a small GPT
 * training step (forward, backward, AdamW) on one thread.
 *
 * usage: bench_kernels [--model SPEC] [--batch N] [--steps N]
 * Without --model, a GPT of 4 layers, width 128, 4 heads, sequence 64, vocabulary 256.
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

static void bench_matmul(int N, int IC, int OC)
{
    float *x = rnd((size_t)N * IC), *w = rnd((size_t)OC * IC), *b = rnd(OC);
    float *out = rnd((size_t)N * OC), *dx = rnd((size_t)N * IC), *dw = rnd((size_t)OC * IC);
    double flops = 2.0 * N * IC * OC;
    int reps = 3;
    double t0 = sc_clock_now_s();
    for (int r = 0; r < reps; r++)
        kn_linear_forward_cpu(out, x, w, b, N, IC, OC);
    double t1 = sc_clock_now_s();
    for (int r = 0; r < reps; r++)
        kn_linear_backward_input_cpu(dx, out, w, N, IC, OC);
    double t2 = sc_clock_now_s();
    for (int r = 0; r < reps; r++)
        kn_linear_backward_weight_cpu(dw, b, out, x, N, IC, OC);
    double t3 = sc_clock_now_s();
    printf("matmul %dx%d @ %dx%d^T: forward %.2f GFLOP/s, input-grad %.2f GFLOP/s, "
           "weight-grad %.2f GFLOP/s\n",
           N, IC, OC, IC, reps * flops / (t1 - t0) * 1e-9, reps * flops / (t2 - t1) * 1e-9,
           reps * flops / (t3 - t2) * 1e-9);
    free(x), free(w), free(b), free(out), free(dx), free(dw);
}

int main(int argc, char **argv)
{
    const char *spec = NULL;
    int64_t batch = 4, steps = 5;
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
        } else {
            goto usage;
        }
    }
    bench_matmul(256, 768, 768);
    bench_matmul(512, 128, 512);

    kn_model *m = NULL;
    sc_status rc = spec ? kn_model_load(&m, spec, &err)
                        : kn_model_parse(&m, "built-in", default_gpt, strlen(default_gpt), &err);
    if (rc != SC_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        return 2;
    }
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
    double best = 1e30;
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
    }
    double flops = kn_model_train_flops_per_sample(m) * batch;
    printf("%s (%zu parameters), batch %d: best step %.1f ms over %d, %.2f GFLOP/s",
           kn_model_name(m), kn_model_param_count(m), (int)batch, best * 1e3, (int)steps,
           flops / best * 1e-9);
    if (b0->in_tokens)
        printf(", %.0f tokens/s", (double)nin / best);
    printf(", last loss %.4f\n", loss);
    free(in);
    free(tgt);
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
    return 0;
usage:
    fprintf(stderr, "usage: bench_kernels [--model SPEC] [--batch N] [--steps N]\n%s\n", err.msg);
    return 2;
}
