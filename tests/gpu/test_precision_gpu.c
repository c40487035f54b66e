/*
 * bf16 and fp16 on the GPU against the CPU's emulation of the same numerics (products on 16-bit
 * operands, fp32 accumulation): a whole model's loss and gradients agree within the rounding of
 * one 16-bit operand, far closer than either is to fp32; the 16-bit attention keeps the stash's
 * per-sample layout (a gathered backward equals a direct one); TF32 and fp32 stay as they were.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/device.h"
#include "kernels/model.h"
#include "kernels/precision.h"
#include "kernels/stage.h"

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (kn_cuda_device_count() == 0)                                                           \
            skip();                                                                                \
    } while (0)

static const char gpt[] = "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", "
                          "\"vocab\": 50, \"seq_len\": 16, \"layers\": 2, \"width\": 64, "
                          "\"heads\": 4}";
static const char vgg[] = "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"vgg\", "
                          "\"config\": \"vgg11\", \"image\": [3, 32, 32], \"classes\": 5, "
                          "\"width_divisor\": 16}";

typedef struct {
    kn_model *m;
    void *in;
    int32_t *tgt;
    int n;
} batch;

static void batch_make(batch *b, const char *text, int n)
{
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_model_parse(&b->m, "model.json", text, strlen(text), &err), SC_OK);
    const kn_block *b0 = kn_model_block(b->m, 0);
    int tps = kn_model_targets_per_sample(b->m);
    b->n = n;
    b->in = malloc(b0->in_floats * n * 4);
    b->tgt = malloc((size_t)tps * n * 4);
    uint64_t r = 7;
    for (size_t i = 0; i < b0->in_floats * n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        if (b0->in_tokens)
            ((int32_t *)b->in)[i] = (int32_t)((r >> 33) % (uint64_t)b0->V);
        else
            ((float *)b->in)[i] = (float)((r >> 40) / 8388608.0 - 1.0);
    }
    for (int i = 0; i < tps * n; i++)
        b->tgt[i] = (i * 7 + 3) % kn_model_classes(b->m);
}

static void batch_free(batch *b)
{
    free(b->in);
    free(b->tgt);
    kn_model_destroy(&b->m);
}

/* one forward + backward of the batch in `prec` on `dev`: loss, and the gradients (malloc'd) */
static float *grads_of(batch *b, kn_device dev, kn_precision prec, float *loss, size_t *np)
{
    sc_err err;
    sc_err_clear(&err);
    kn_stage_cfg cfg = kn_stage_cfg_default(0, kn_model_block_count(b->m) - 1, dev, b->n);
    cfg.precision = prec;
    kn_stage *st = NULL;
    assert_int_equal(kn_stage_new_cfg(&st, b->m, &cfg, &err), SC_OK);
    assert_int_equal(kn_stage_forward_host(st, 0, b->in, b->tgt, b->n, &err), SC_OK);
    assert_int_equal(kn_stage_loss(st, 0, loss, &err), SC_OK);
    assert_int_equal(kn_stage_backward(st, 0, NULL, &err), SC_OK);
    *np = kn_stage_param_count(st);
    float *g = malloc(*np * 4);
    assert_int_equal(kn_stage_grads_to_host(st, g, &err), SC_OK);
    kn_stage_destroy(&st);
    return g;
}

/* |a - b| / |b| over the whole vector */
static double rel_l2(const float *a, const float *b, size_t n)
{
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        d2 += d * d;
        r2 += (double)b[i] * b[i];
    }
    return sqrt(d2 / (r2 > 0 ? r2 : 1));
}

/* grad_units: how many 16-bit roundings the gradients may differ by, relative (a max-pool's
 * choice between two close inputs flips with a rounding and moves a whole gradient) */
static void half_case(const char *text, kn_precision prec, double grad_units)
{
    batch b;
    batch_make(&b, text, 4);
    kn_device cpu = {KN_DEV_CPU, 0}, gpu = {KN_DEV_CUDA, 0};
    float l_cpu, l_gpu, l_ref;
    size_t np;
    float *g_cpu = grads_of(&b, cpu, prec, &l_cpu, &np);
    float *g_gpu = grads_of(&b, gpu, prec, &l_gpu, &np);
    float *g_ref = grads_of(&b, cpu, KN_PREC_FP32, &l_ref, &np);
    double d_emul = rel_l2(g_gpu, g_cpu, np), d_fp32 = rel_l2(g_gpu, g_ref, np);
    fprintf(stderr,
            "%s: loss gpu %.6f, cpu emulated %.6f, fp32 %.6f; gradients: gpu vs emulated %.3g, "
            "gpu vs fp32 %.3g\n",
            kn_precision_name(prec), l_gpu, l_cpu, l_ref, d_emul, d_fp32);
    /* the GPU rounds what the emulation rounds: agreement within a few 16-bit roundings */
    double unit = prec == KN_PREC_BF16 ? 0x1p-8 : 0x1p-11;
    assert_true(fabs(l_gpu - l_cpu) <= 4 * unit * fabs(l_cpu));
    assert_true(d_emul <= grad_units * unit);
    /* and it is not fp32 (the products really ran on 16-bit operands) */
    assert_true(d_fp32 > 0.05 * unit);
    free(g_cpu);
    free(g_gpu);
    free(g_ref);
    batch_free(&b);
}

static void test_gpt_half(void **state)
{
    (void)state;
    NEED_GPU();
    half_case(gpt, KN_PREC_BF16, 8);
    half_case(gpt, KN_PREC_FP16, 8);
}

static void test_vgg_half(void **state)
{
    (void)state;
    NEED_GPU();
    half_case(vgg, KN_PREC_BF16, 80);
}

/* the 16-bit probabilities sit in each sample's fp32 slot: a backward gathered from three
 * forwards equals the direct one */
static void test_gather_bf16(void **state)
{
    (void)state;
    NEED_GPU();
    batch b;
    batch_make(&b, gpt, 6);
    sc_err err;
    sc_err_clear(&err);
    kn_device gpu = {KN_DEV_CUDA, 0};
    int nb = kn_model_block_count(b.m), tps = kn_model_targets_per_sample(b.m);
    size_t in_ps = kn_model_block(b.m, 0)->in_floats;
    kn_stage_cfg cfg = kn_stage_cfg_default(0, nb - 1, gpu, 3);
    cfg.precision = KN_PREC_BF16;
    cfg.slots = 3;
    cfg.gather_microbatch = 4;
    kn_stage *st = NULL, *ref = NULL;
    assert_int_equal(kn_stage_new_cfg(&st, b.m, &cfg, &err), SC_OK);
    cfg = kn_stage_cfg_default(0, nb - 1, gpu, 4);
    cfg.precision = KN_PREC_BF16;
    assert_int_equal(kn_stage_new_cfg(&ref, b.m, &cfg, &err), SC_OK);
    const int off[] = {0, 2, 5, 6};
    for (int k = 0; k < 3; k++)
        assert_int_equal(kn_stage_forward_host(st, k, (char *)b.in + off[k] * in_ps * 4,
                                               b.tgt + off[k] * tps, off[k + 1] - off[k], &err),
                         SC_OK);
    const kn_stage_range span[] = {{0, 1, 1}, {1, 0, 3}};
    assert_int_equal(kn_stage_gather(st, 3, span, 2, &err), SC_OK);
    assert_int_equal(kn_stage_backward(st, 3, NULL, &err), SC_OK);
    assert_int_equal(kn_stage_forward_host(ref, 0, (char *)b.in + in_ps * 4, b.tgt + tps, 4, &err),
                     SC_OK);
    assert_int_equal(kn_stage_backward(ref, 0, NULL, &err), SC_OK);
    size_t np = kn_stage_param_count(st);
    float *g = malloc(np * 4), *gr = malloc(np * 4);
    assert_int_equal(kn_stage_grads_to_host(st, g, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(ref, gr, &err), SC_OK);
    double d = rel_l2(g, gr, np);
    fprintf(stderr, "bf16 gathered backward vs direct: %.3g\n", d);
    assert_true(d <= 1e-2);
    free(g);
    free(gr);
    kn_stage_destroy(&st);
    kn_stage_destroy(&ref);
    batch_free(&b);
}

/* a context refuses "auto": a job resolves it first */
static void test_ctx_refuses_auto(void **state)
{
    (void)state;
    NEED_GPU();
    kn_ctx *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_ctx_new(&c, (kn_device){KN_DEV_CUDA, 0}, KN_PREC_AUTO, &err),
                     SC_ERR_INVALID);
    assert_null(c);
    assert_true(kn_device_has_bf16((kn_device){KN_DEV_CUDA, 0}) ||
                kn_device_has_bf16((kn_device){KN_DEV_CPU, 0}));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_half),
        cmocka_unit_test(test_vgg_half),
        cmocka_unit_test(test_gather_bf16),
        cmocka_unit_test(test_ctx_refuses_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
