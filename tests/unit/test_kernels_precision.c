/*
 * kn precision on the CPU: the bf16 / fp16 roundings (ties to even, overflow, subnormals, NaN),
 * the 16-bit codes, names and the choice for "auto", the emulated products (a linear layer
 * in bf16 equals fp32 on rounded operands), and training: a small GPT's loss after 300 AdamW
 * steps in bf16 and fp16 within 2% of fp32's.
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
#include "kernels/linear.h"
#include "kernels/model.h"
#include "kernels/precision.h"
#include "kernels/products_cpu.h"
#include "kernels/stage.h"

static void test_round_bf16(void **state)
{
    (void)state;
    assert_true(kn_round_bf16(1.0f) == 1.0f);
    assert_true(kn_round_bf16(-2.5f) == -2.5f);
    /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1) */
    assert_true(kn_round_bf16(1.0f + 0x1p-8f) == 1.0f);
    /* 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to the even one */
    assert_true(kn_round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);
    assert_true(kn_round_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
    assert_int_equal(kn_bf16_bits(1.0f), 0x3f80);
    assert_true(isinf(kn_round_bf16(INFINITY)));
    assert_true(isnan(kn_round_bf16(NAN)));
    /* the largest float rounds up to infinity, as the hardware's conversion does */
    assert_true(isinf(kn_round_bf16(3.4028235e38f)));
}

static void test_round_fp16(void **state)
{
    (void)state;
    assert_int_equal(kn_fp16_bits(1.0f), 0x3c00);
    assert_int_equal(kn_fp16_bits(-2.0f), 0xc000);
    assert_int_equal(kn_fp16_bits(65504.0f), 0x7bff);
    assert_int_equal(kn_fp16_bits(65519.0f), 0x7bff); /* below the halfway point: the largest */
    assert_int_equal(kn_fp16_bits(65520.0f), 0x7c00); /* and from it: infinity */
    assert_int_equal(kn_fp16_bits(0x1p-24f), 0x0001); /* the smallest subnormal */
    assert_int_equal(kn_fp16_bits(0x1p-25f), 0x0000); /* half of it: ties to even, zero */
    assert_int_equal(kn_fp16_bits(3 * 0x1p-25f), 0x0002);
    assert_int_equal(kn_fp16_bits(0x1p-14f), 0x0400);                  /* the smallest normal */
    assert_true(kn_round_fp16(1.0f + 0x1p-11f) == 1.0f);               /* a tie: even */
    assert_true(kn_round_fp16(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f); /* a tie: even */
    assert_true(isnan(kn_round_fp16(NAN)));
    assert_true(kn_round_fp16(-INFINITY) == -INFINITY);
    /* every half value decodes and encodes back to itself */
    for (uint32_t h = 0; h < 0x10000; h++) {
        float x = kn_fp16_from_bits((uint16_t)h);
        if (isnan(x))
            continue;
        if (kn_fp16_bits(x) != h)
            fail_msg("half 0x%04x -> %g -> 0x%04x", h, x, kn_fp16_bits(x));
    }
}

/* the 16-bit codes of rounded values decode to exactly those values */
static void test_bits(void **state)
{
    (void)state;
    float x[5] = {1.0f, -0.333333f, 1e-3f, 12345.678f, 0.0f};
    for (int i = 0; i < 5; i++) {
        float b = kn_round_bf16(x[i]), h = kn_round_fp16(x[i]);
        assert_true(kn_bf16_from_bits(kn_bf16_bits(b)) == b);
        assert_true(kn_fp16_from_bits(kn_fp16_bits(h)) == h);
        assert_true(kn_bf16_from_bits(kn_bf16_bits(x[i])) == b);
        assert_true(kn_fp16_from_bits(kn_fp16_bits(x[i])) == h);
    }
}

static void test_names(void **state)
{
    (void)state;
    kn_precision p;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_precision_parse("bf16", "precision", &p, &err), SC_OK);
    assert_int_equal(p, KN_PREC_BF16);
    assert_int_equal(kn_precision_parse("auto", "precision", &p, &err), SC_OK);
    assert_int_equal(p, KN_PREC_AUTO);
    assert_int_equal(kn_precision_parse("bfloat16", "--precision", &p, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--precision: unknown precision 'bfloat16'"));
    assert_non_null(strstr(err.msg, "bf16, fp16, tf32, fp32"));
    assert_int_equal(kn_precision_resolve(KN_PREC_AUTO, 2, true), KN_PREC_BF16);
    assert_int_equal(kn_precision_resolve(KN_PREC_AUTO, 2, false), KN_PREC_FP16);
    assert_int_equal(kn_precision_resolve(KN_PREC_AUTO, 0, true), KN_PREC_FP32);
    assert_int_equal(kn_precision_resolve(KN_PREC_TF32, 0, true), KN_PREC_TF32);
    kn_ctx *c = NULL;
    assert_int_equal(kn_ctx_new(&c, (kn_device){KN_DEV_CPU, 0}, KN_PREC_AUTO, &err),
                     SC_ERR_INVALID);
    assert_null(c);
}

/* a bf16 linear layer on a CPU context: exactly the fp32 reference on rounded x and w, with the
 * bias unrounded; its weight gradient likewise, its bias gradient from the unrounded dout */
static void test_linear_emulated(void **state)
{
    (void)state;
    enum { N = 5, IC = 7, OC = 3 };
    float x[N * IC], w[OC * IC], b[OC], dout[N * OC];
    for (int i = 0; i < N * IC; i++)
        x[i] = sinf(0.37f * (float)i) * 1.7f;
    for (int i = 0; i < OC * IC; i++)
        w[i] = cosf(0.23f * (float)i) * 0.9f;
    for (int i = 0; i < OC; i++)
        b[i] = 0.1f * (float)i + 0.0123456f;
    for (int i = 0; i < N * OC; i++)
        dout[i] = sinf(0.11f * (float)i + 1.0f) * 0.0371f;
    float xr[N * IC], wr[OC * IC], dr[N * OC];
    kn_round_copy(KN_PREC_BF16, xr, x, N * IC);
    kn_round_copy(KN_PREC_BF16, wr, w, OC * IC);
    kn_round_copy(KN_PREC_BF16, dr, dout, N * OC);
    float want[N * OC], dw_want[OC * IC] = {0}, db_want[OC] = {0};
    kn_linear_forward_cpu(want, xr, wr, b, N, IC, OC);
    kn_linear_backward_weight_cpu(dw_want, NULL, dr, xr, N, IC, OC);
    for (int r = 0; r < N; r++)
        for (int j = 0; j < OC; j++)
            db_want[j] += dout[r * OC + j];
    kn_ctx *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_ctx_new(&c, (kn_device){KN_DEV_CPU, 0}, KN_PREC_BF16, &err), SC_OK);
    kn_ctx_set_cpu_kernels(c, KN_CPU_KERNELS_REFERENCE);
    assert_int_equal(kn_ctx_precision(c), KN_PREC_BF16);
    float got[N * OC], dw[OC * IC] = {0}, db[OC] = {0};
    assert_int_equal(kn_cpu_linear_forward(c, got, x, w, b, N, IC, OC, &err), SC_OK);
    assert_int_equal(kn_cpu_linear_backward_weight(c, dw, db, dout, x, N, IC, OC, &err), SC_OK);
    assert_memory_equal(got, want, sizeof got);
    assert_memory_equal(dw, dw_want, sizeof dw);
    assert_memory_equal(db, db_want, sizeof db);
    /* the inputs themselves are left as they were (the stash stays fp32) */
    assert_true(x[1] == sinf(0.37f) * 1.7f);
    kn_ctx_destroy(&c);
    /* and the plain fp32 result differs: the rounding is real */
    float plain[N * OC];
    kn_linear_forward_cpu(plain, x, w, b, N, IC, OC);
    assert_memory_not_equal(plain, want, sizeof plain);
}

/* steps of AdamW on a GPT whose next token is the previous plus 0..3 (irreducible loss ln 4):
 * the mean loss of the last 20 steps */
static double train(kn_precision prec, int steps)
{
    static const char text[] = "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": "
                               "\"gpt\", \"vocab\": 32, \"seq_len\": 16, \"layers\": 2, "
                               "\"width\": 32, \"heads\": 2, \"seed\": 5}";
    enum { B = 8, T = 16, V = 32 };
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_model_parse(&m, "model.json", text, strlen(text), &err), SC_OK);
    kn_stage_cfg cfg =
        kn_stage_cfg_default(0, kn_model_block_count(m) - 1, (kn_device){KN_DEV_CPU, 0}, B);
    cfg.precision = prec;
    cfg.optim.lr = 3e-3f;
    kn_stage *st = NULL;
    assert_int_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_OK);
    int32_t tok[B * T], tgt[B * T];
    uint64_t r = 99;
    double tail = 0;
    for (int s = 0; s < steps; s++) {
        for (int b = 0; b < B; b++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            int x = (int)((r >> 33) % V);
            for (int t = 0; t < T; t++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                int nx = (x + (int)((r >> 33) % 4)) % V;
                tok[b * T + t] = x;
                tgt[b * T + t] = nx;
                x = nx;
            }
        }
        float loss;
        assert_int_equal(kn_stage_forward_host(st, 0, tok, tgt, B, &err), SC_OK);
        assert_int_equal(kn_stage_loss(st, 0, &loss, &err), SC_OK);
        assert_int_equal(kn_stage_zero_grads(st, &err), SC_OK);
        assert_int_equal(kn_stage_backward(st, 0, NULL, &err), SC_OK);
        assert_int_equal(kn_stage_step(st, &err), SC_OK);
        if (s >= steps - 20)
            tail += loss / 20.0;
    }
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
    return tail;
}

/* a VGG in bf16 on the CPU: the convolutions' products on rounded operands (their bias gradients
 * from the unrounded output gradient): the loss within a bf16 rounding or two of fp32's, the
 * gradients near fp32's but not equal (a max-pool whose window's two largest inputs are close
 * may pick the other one after a rounding, which moves a whole gradient: 12% relative seen, 6%
 * in fp16, so the bound is loose) */
static void test_vgg_emulated(void **state)
{
    (void)state;
    static const char text[] = "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": "
                               "\"vgg\", \"config\": \"vgg11\", \"image\": [3, 32, 32], "
                               "\"classes\": 5, \"width_divisor\": 16}";
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_model_parse(&m, "model.json", text, strlen(text), &err), SC_OK);
    enum { N = 3 };
    const kn_block *b0 = kn_model_block(m, 0);
    float *in = malloc(b0->in_floats * N * sizeof *in);
    for (size_t i = 0; i < b0->in_floats * N; i++)
        in[i] = sinf(0.013f * (float)i);
    int32_t tgt[N] = {1, 4, 2};
    float *g[2] = {NULL, NULL}, loss[2];
    size_t np = 0;
    for (int k = 0; k < 2; k++) {
        kn_stage_cfg cfg =
            kn_stage_cfg_default(0, kn_model_block_count(m) - 1, (kn_device){KN_DEV_CPU, 0}, N);
        cfg.precision = k == 0 ? KN_PREC_FP32 : KN_PREC_BF16;
        kn_stage *st = NULL;
        assert_int_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_OK);
        assert_int_equal(kn_stage_forward_host(st, 0, in, tgt, N, &err), SC_OK);
        assert_int_equal(kn_stage_loss(st, 0, &loss[k], &err), SC_OK);
        assert_int_equal(kn_stage_backward(st, 0, NULL, &err), SC_OK);
        np = kn_stage_param_count(st);
        g[k] = malloc(np * sizeof *g[k]);
        assert_int_equal(kn_stage_grads_to_host(st, g[k], &err), SC_OK);
        kn_stage_destroy(&st);
    }
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < np; i++) {
        d2 += ((double)g[1][i] - g[0][i]) * ((double)g[1][i] - g[0][i]);
        r2 += (double)g[0][i] * g[0][i];
    }
    fprintf(stderr, "vgg bf16 vs fp32: loss %.6f vs %.6f, gradients %.3g relative\n", loss[1],
            loss[0], sqrt(d2 / r2));
    assert_true(fabsf(loss[1] - loss[0]) <= 0x1p-7f * loss[0]);
    assert_true(d2 > 0 && sqrt(d2 / r2) < 0.3);
    free(g[0]);
    free(g[1]);
    free(in);
    kn_model_destroy(&m);
}

static void test_training_loss(void **state)
{
    (void)state;
    double fp32 = train(KN_PREC_FP32, 300), bf16 = train(KN_PREC_BF16, 300),
           fp16 = train(KN_PREC_FP16, 300);
    fprintf(stderr, "loss after 300 steps: fp32 %.4f, bf16 %.4f, fp16 %.4f (ln 4 = %.4f)\n", fp32,
            bf16, fp16, log(4.0));
    assert_true(fp32 < 0.75 * log(32.0)); /* it learned: well under a uniform guess */
    assert_true(fabs(bf16 - fp32) <= 0.02 * fp32);
    assert_true(fabs(fp16 - fp32) <= 0.02 * fp32);
    assert_true(bf16 != fp32); /* the emulation changed the arithmetic */
}

/* the wire's bulk conversions give the bits of the one-value ones, specials included, and
 * widen back exactly */
static void test_pack16(void **state)
{
    (void)state;
    enum { N = 4096 };
    static float src[N], back[N];
    static uint16_t packed[N];
    const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                0xffc00001u, 0x7f800001u, 0x00000001u, 0x3f808000u, 0x3f818000u,
                                0x477ff000u, 0x477fefffu, 0x33800000u, 0x7f7fffffu};
    uint64_t r = 11;
    for (int i = 0; i < N; i++) {
        uint32_t u;
        if (i < (int)(sizeof special / sizeof special[0])) {
            u = special[i];
        } else {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            u = (uint32_t)(r >> 32);
        }
        memcpy(&src[i], &u, sizeof u);
    }
    kn_precision precs[] = {KN_PREC_BF16, KN_PREC_FP16};
    for (int p = 0; p < 2; p++) {
        kn_pack16(precs[p], packed, src, N);
        kn_unpack16(precs[p], back, packed, N);
        for (int i = 0; i < N; i++) {
            uint16_t want = precs[p] == KN_PREC_BF16 ? kn_bf16_bits(src[i]) : kn_fp16_bits(src[i]);
            assert_int_equal(packed[i], want);
            float w = precs[p] == KN_PREC_BF16 ? kn_bf16_from_bits(want) : kn_fp16_from_bits(want);
            assert_memory_equal(&back[i], &w, sizeof w);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_bf16),   cmocka_unit_test(test_round_fp16),
        cmocka_unit_test(test_bits),         cmocka_unit_test(test_pack16),
        cmocka_unit_test(test_names),        cmocka_unit_test(test_linear_emulated),
        cmocka_unit_test(test_vgg_emulated), cmocka_unit_test(test_training_loss),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
