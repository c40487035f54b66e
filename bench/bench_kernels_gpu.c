/*
 * bench_kernels_gpu: GPT-2 124M training step on one GPU (12 layers, width 768, 12 heads,
 * sequence 1024, vocabulary 50257): step time, tokens/s and MFU, with FLOPs per token
 * 6N + 6*L*C*T over the device's peak; and the largest matmul of the step alone (cuBLAS) as a
 * fraction of that peak.
 *
 * usage: bench_kernels_gpu [--device cuda:N] [--batch N] [--steps N]
 *                          [--precision fp32|tf32|bf16|fp16] [--fp32] [--peak-tflops X]
 *                          [--model SPEC]
 * The precision is TF32 unless named (--fp32: --precision fp32); the default peak is the dense
 * figure of an H100 SXM for it (TF32 495, bf16 and fp16 989, fp32 67 TFLOP/s); pass
 * --peak-tflops for another device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "kernels/device.h"
#include "kernels/device_impl.h"
#include "kernels/linear.h"
#include "kernels/model.h"
#include "kernels/stage.h"

static const char gpt2_124m[] =
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", \"name\": "
    "\"gpt2-124M\", "
    "\"vocab\": 50257, \"seq_len\": 1024, \"layers\": 12, \"width\": 768, \"heads\": 12}";

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        if ((expr) != SC_OK) {                                                                     \
            fprintf(stderr, "bench_kernels_gpu: %s\n", err.msg);                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    const char *devs = "cuda:0", *spec = NULL;
    int64_t batch = 8, steps = 10;
    double peak_tflops = 0.0;
    kn_precision prec = KN_PREC_TF32;
    sc_err err;
    sc_err_clear(&err);
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--fp32") == 0)
            prec = KN_PREC_FP32;
        else if (strcmp(argv[i], "--precision") == 0 && v)
            TRY(kn_precision_parse(argv[++i], "--precision", &prec, &err));
        else if (strcmp(argv[i], "--device") == 0 && v)
            devs = argv[++i];
        else if (strcmp(argv[i], "--model") == 0 && v)
            spec = argv[++i];
        else if (strcmp(argv[i], "--batch") == 0 && v)
            TRY(sc_parse_int64(argv[++i], 1, 1024, "--batch", &batch, &err));
        else if (strcmp(argv[i], "--steps") == 0 && v)
            TRY(sc_parse_int64(argv[++i], 1, 100000, "--steps", &steps, &err));
        else if (strcmp(argv[i], "--peak-tflops") == 0 && v)
            TRY(sc_parse_double(argv[++i], 1e-3, 1e6, "--peak-tflops", &peak_tflops, &err));
        else {
            fprintf(stderr, "usage: bench_kernels_gpu [--device cuda:N] [--batch N] [--steps N] "
                            "[--precision fp32|tf32|bf16|fp16] [--fp32] [--peak-tflops X] "
                            "[--model SPEC]\n");
            return 2;
        }
    }
    kn_device dev;
    TRY(kn_device_parse(devs, "--device", &dev, &err));
    prec = kn_precision_resolve(prec, 1, kn_device_has_bf16(dev));
    if (peak_tflops == 0.0)
        peak_tflops = prec == KN_PREC_FP32 ? 67.0 : prec == KN_PREC_TF32 ? 495.0 : 989.0;
    kn_model *m = NULL;
    if (spec)
        TRY(kn_model_load(&m, spec, &err));
    else
        TRY(kn_model_parse(&m, "built-in", gpt2_124m, strlen(gpt2_124m), &err));
    char name[128];
    kn_device_name(dev, name, sizeof name);

    kn_stage_cfg cfg = kn_stage_cfg_default(0, kn_model_block_count(m) - 1, dev, (int)batch);
    cfg.precision = prec;
    kn_stage *st = NULL;
    TRY(kn_stage_new_cfg(&st, m, &cfg, &err));
    kn_ctx *ctx = kn_stage_ctx(st);
    const kn_block *b0 = kn_model_block(m, 0);
    size_t nin = b0->in_floats * batch, ntgt = (size_t)kn_model_targets_per_sample(m) * batch;
    int32_t *tok = malloc(nin * 4), *tgt = malloc(ntgt * 4);
    float *fin = (float *)tok;
    for (size_t i = 0; i < nin; i++) {
        if (b0->in_tokens)
            tok[i] = (int32_t)((i * 7919) % (size_t)b0->V);
        else
            fin[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    }
    for (size_t i = 0; i < ntgt; i++)
        tgt[i] = (int32_t)((i * 104729) % (size_t)kn_model_classes(m));

    double total = 0, best = 1e30;
    float loss = 0;
    for (int s = 0; s < steps + 2; s++) { /* two warm-up steps */
        double dt;
        TRY(kn_ctx_time_begin(ctx, &err));
        TRY(kn_stage_forward_host(st, 0, tok, tgt, (int)batch, &err));
        TRY(kn_stage_zero_grads(st, &err));
        TRY(kn_stage_backward(st, 0, NULL, &err));
        TRY(kn_stage_step(st, &err));
        TRY(kn_ctx_time_end(ctx, &dt, &err));
        TRY(kn_stage_loss(st, 0, &loss, &err));
        if (s >= 2) {
            total += dt;
            if (dt < best)
                best = dt;
        }
    }
    double mean = total / steps;
    double flops = kn_model_train_flops_per_sample(m) * batch;
    double tokens = b0->in_tokens ? (double)nin : (double)batch;
    printf("%s on %s (%s), %zu parameters, batch %d\n", kn_model_name(m), name,
           kn_precision_name(prec), kn_model_param_count(m), (int)batch);
    printf("step: mean %.2f ms, best %.2f ms over %d steps; %.0f tokens/s; %.1f TFLOP/s; "
           "MFU %.1f%% of %.0f TFLOP/s; loss %.4f\n",
           mean * 1e3, best * 1e3, (int)steps, tokens / mean, flops / mean * 1e-12,
           100.0 * flops / mean / (peak_tflops * 1e12), peak_tflops, loss);

    /* the step's largest matmul alone: the MLP expansion, (B*T, C) x (C, 4C) */
    if (b0->in_tokens) {
        int N = (int)(batch * b0->T), C = b0->C;
        void *x, *w, *o;
        TRY(kn_ctx_alloc(ctx, (size_t)N * C * 4, &x, &err));
        TRY(kn_ctx_alloc(ctx, (size_t)4 * C * C * 4, &w, &err));
        TRY(kn_ctx_alloc(ctx, (size_t)N * 4 * C * 4, &o, &err));
        double dt, mm = 2.0 * N * C * 4.0 * C;
        kn_linear_forward_cuda(ctx, o, x, w, NULL, N, C, 4 * C); /* warm-up */
        TRY(kn_ctx_time_begin(ctx, &err));
        for (int r = 0; r < 20; r++)
            if (kn_linear_forward_cuda(ctx, o, x, w, NULL, N, C, 4 * C) != 0)
                return 1;
        TRY(kn_ctx_time_end(ctx, &dt, &err));
        printf("matmul %dx%d @ %dx%d (cuBLAS): %.1f TFLOP/s, %.1f%% of peak\n", N, C, C, 4 * C,
               20 * mm / dt * 1e-12, 100.0 * 20 * mm / dt / (peak_tflops * 1e12));
        kn_ctx_free(ctx, x);
        kn_ctx_free(ctx, w);
        kn_ctx_free(ctx, o);
    }
    free(tok);
    free(tgt);
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
    return 0;
}
