/*
 * kernels on the GPU: every op's CUDA launcher against the CPU reference on fresh random inputs,
 * within atol + rtol*|ref| (fp32: 1e-5 / 1e-4 unless a test says why it needs more), then whole
 * models (loss, gradients, one optimizer step) against the CPU, and a backward over samples
 * gathered from several slots (kn_stage_gather) against a direct one, and the split backward
 * (B then W) against the fused one. Every test skips without a
 * CUDA device, so the suite passes on machines that have the toolkit but no GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/conv2d.h"
#include "kernels/crossentropy.h"
#include "kernels/device.h"
#include "kernels/device_impl.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/model.h"
#include "kernels/optim.h"
#include "kernels/profile.h"
#include "kernels/stage.h"

static kn_ctx *ctx;      /* fp32 context, NULL without a device */
static kn_ctx *ctx_tf32; /* TF32 allowed */
static const double ATOL = 1e-5, RTOL = 1e-4;

#define NEED_GPU()                                                                                 \
    do {                                                                                           \
        if (ctx == NULL)                                                                           \
            skip();                                                                                \
    } while (0)

static int setup(void **state)
{
    (void)state;
    if (kn_cuda_device_count() == 0)
        return 0;
    kn_device dev = {KN_DEV_CUDA, 0};
    sc_err err;
    sc_err_clear(&err);
    if (kn_ctx_new(&ctx, dev, KN_PREC_FP32, &err) != SC_OK ||
        kn_ctx_new(&ctx_tf32, dev, KN_PREC_TF32, &err) != SC_OK) {
        fprintf(stderr, "cannot open cuda:0: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kn_ctx_destroy(&ctx);
    kn_ctx_destroy(&ctx_tf32);
    return 0;
}

static uint64_t rng = 2024;

static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / 8388608.0 - 1.0);
}

static float *hrand(size_t n, float scale)
{
    float *p = malloc(n * sizeof *p + 4);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand() * scale;
    return p;
}

static float *hzero(size_t n)
{
    float *p = calloc(n + 1, sizeof *p);
    assert_non_null(p);
    return p;
}

static void *dcopy(const void *h, size_t bytes)
{
    void *d = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_ctx_alloc(ctx, bytes, &d, &err), SC_OK);
    assert_int_equal(kn_ctx_upload(ctx, d, h, bytes, &err), SC_OK);
    return d;
}

#define DF(h, n) ((float *)dcopy((h), (n) * sizeof(float)))

/* zero-filled device floats (kn_ctx_alloc clears) */
static float *dzero(size_t n)
{
    void *d = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_ctx_alloc(ctx, n * sizeof(float), &d, &err), SC_OK);
    return d;
}

static void dfree(void *d)
{
    kn_ctx_free(ctx, d);
}

/* downloads `dev` and compares it with `ref` elementwise */
static void expect_close_tol(const char *what, const float *dev, const float *ref, size_t n,
                             double atol, double rtol)
{
    float *h = hzero(n);
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_ctx_sync(ctx, &err), SC_OK);
    assert_int_equal(kn_ctx_download(ctx, h, dev, n * sizeof *h, &err), SC_OK);
    for (size_t i = 0; i < n; i++) {
        if (!(fabs((double)h[i] - ref[i]) <= atol + rtol * fabs(ref[i]))) {
            fprintf(stderr, "%s[%zu]: gpu %.8g, cpu %.8g\n", what, i, (double)h[i], (double)ref[i]);
            free(h);
            fail();
        }
    }
    free(h);
}

static void expect_close(const char *what, const float *dev, const float *ref, size_t n)
{
    expect_close_tol(what, dev, ref, n, ATOL, RTOL);
}

/* --- ops ------------------------------------------------------------------------------------ */

static void test_embedding_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    int B = 3, T = 7, C = 33, V = 17;
    int32_t tok[21];
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)(fabsf(frand()) * (V - 1));
    float *wte = hrand((size_t)V * C, 1), *wpe = hrand((size_t)T * C, 1);
    float *out = hzero((size_t)B * T * C), *dout = hrand((size_t)B * T * C, 1);
    float *dwte = hzero((size_t)V * C), *dwpe = hzero((size_t)T * C);
    kn_embedding_forward_cpu(out, tok, wte, wpe, B, T, C);
    kn_embedding_backward_cpu(dwte, dwpe, dout, tok, B, T, C);
    int32_t *dtok = dcopy(tok, sizeof tok);
    float *dwte_ = DF(wte, (size_t)V * C), *dwpe_ = DF(wpe, (size_t)T * C);
    float *dout_ = DF(dout, (size_t)B * T * C), *o = DF(out, (size_t)B * T * C);
    float *gte = dzero((size_t)V * C), *gpe = dzero((size_t)T * C);
    assert_int_equal(kn_embedding_forward_cuda(ctx, o, dtok, dwte_, dwpe_, B, T, C, V), 0);
    expect_close("out", o, out, (size_t)B * T * C);
    assert_int_equal(kn_embedding_backward_cuda(ctx, gte, gpe, dout_, dtok, B, T, C, V), 0);
    expect_close("dwte", gte, dwte, (size_t)V * C);
    expect_close("dwpe", gpe, dwpe, (size_t)T * C);
    dfree(dtok), dfree(dwte_), dfree(dwpe_), dfree(dout_), dfree(o), dfree(gte), dfree(gpe);
    free(wte), free(wpe), free(out), free(dout), free(dwte), free(dwpe);
}

static void test_layernorm_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    int N = 37, C = 70;
    size_t n = (size_t)N * C;
    float *x = hrand(n, 2), *w = hrand(C, 1), *b = hrand(C, 1), *dout = hrand(n, 1);
    float *out = hzero(n), *mean = hzero(N), *rstd = hzero(N);
    float *dx = hrand(n, 1), *dw = hrand(C, 1), *db = hrand(C, 1); /* accumulate onto these */
    float *x_ = DF(x, n), *w_ = DF(w, C), *b_ = DF(b, C), *dout_ = DF(dout, n);
    float *out_ = DF(out, n), *mean_ = DF(mean, N), *rstd_ = DF(rstd, N);
    float *dx_ = DF(dx, n), *dw_ = DF(dw, C), *db_ = DF(db, C);
    kn_layernorm_forward_cpu(out, mean, rstd, x, w, b, N, C);
    kn_layernorm_backward_cpu(dx, dw, db, dout, x, w, mean, rstd, N, C);
    assert_int_equal(kn_layernorm_forward_cuda(ctx, out_, mean_, rstd_, x_, w_, b_, N, C), 0);
    expect_close("out", out_, out, n);
    expect_close("rstd", rstd_, rstd, N);
    assert_int_equal(
        kn_layernorm_backward_cuda(ctx, dx_, dw_, db_, dout_, x_, w_, mean_, rstd_, N, C), 0);
    expect_close("dx", dx_, dx, n);
    expect_close("dw", dw_, dw, C);
    expect_close("db", db_, db, C);
    dfree(x_), dfree(w_), dfree(b_), dfree(dout_), dfree(out_), dfree(mean_), dfree(rstd_);
    dfree(dx_), dfree(dw_), dfree(db_);
    free(x), free(w), free(b), free(dout), free(out), free(mean), free(rstd), free(dx), free(dw);
    free(db);
}

static void linear_case(kn_ctx *c, double atol, double rtol)
{
    int N = 45, IC = 67, OC = 29;
    float *x = hrand((size_t)N * IC, 1), *w = hrand((size_t)OC * IC, 0.3f), *b = hrand(OC, 1);
    float *dout = hrand((size_t)N * OC, 1), *out = hzero((size_t)N * OC);
    float *dx = hzero((size_t)N * IC), *dw = hrand((size_t)OC * IC, 1), *db = hrand(OC, 1);
    float *x_ = DF(x, (size_t)N * IC), *w_ = DF(w, (size_t)OC * IC), *b_ = DF(b, OC);
    float *dout_ = DF(dout, (size_t)N * OC), *out_ = DF(out, (size_t)N * OC);
    float *dx_ = DF(dx, (size_t)N * IC), *dw_ = DF(dw, (size_t)OC * IC), *db_ = DF(db, OC);
    kn_linear_forward_cpu(out, x, w, b, N, IC, OC);
    kn_linear_backward_input_cpu(dx, dout, w, N, IC, OC);
    kn_linear_backward_weight_cpu(dw, db, dout, x, N, IC, OC);
    assert_int_equal(kn_linear_forward_cuda(c, out_, x_, w_, b_, N, IC, OC), 0);
    assert_int_equal(kn_linear_backward_input_cuda(c, dx_, dout_, w_, N, IC, OC), 0);
    assert_int_equal(kn_linear_backward_weight_cuda(c, dw_, db_, dout_, x_, N, IC, OC), 0);
    /* the comparisons read through `ctx`'s stream: wait for `c`'s work first */
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_ctx_sync(c, &err), SC_OK);
    expect_close_tol("out", out_, out, (size_t)N * OC, atol, rtol);
    expect_close_tol("dx", dx_, dx, (size_t)N * IC, atol, rtol);
    expect_close_tol("dw", dw_, dw, (size_t)OC * IC, atol, rtol);
    expect_close_tol("db", db_, db, OC, atol, rtol);
    dfree(x_), dfree(w_), dfree(b_), dfree(dout_), dfree(out_), dfree(dx_), dfree(dw_), dfree(db_);
    free(x), free(w), free(b), free(dout), free(out), free(dx), free(dw), free(db);
}

static void test_linear_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    linear_case(ctx, ATOL, RTOL);
    /* TF32 keeps 10 mantissa bits: ~1e-3 relative per product, sums of ~67 terms */
    linear_case(ctx_tf32, 2e-2, 1e-2);
}

static void test_elementwise_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    size_t n = 1000;
    float *x = hrand(n, 3), *y = hrand(n, 1), *d = hrand(n, 1), *ref = hzero(n);
    float *x_ = DF(x, n), *y_ = DF(y, n), *d_ = DF(d, n), *o_ = DF(ref, n);
    kn_gelu_forward_cpu(ref, x, n);
    assert_int_equal(kn_gelu_forward_cuda(ctx, o_, x_, n), 0);
    expect_close("gelu", o_, ref, n);
    kn_gelu_backward_cpu(ref, x, d, n);
    assert_int_equal(kn_gelu_backward_cuda(ctx, o_, x_, d_, n), 0);
    expect_close("dgelu", o_, ref, n);
    kn_relu_forward_cpu(ref, x, n);
    assert_int_equal(kn_relu_forward_cuda(ctx, o_, x_, n), 0);
    expect_close("relu", o_, ref, n);
    kn_relu_backward_cpu(ref, x, d, n);
    assert_int_equal(kn_relu_backward_cuda(ctx, o_, x_, d_, n), 0);
    expect_close("drelu", o_, ref, n);
    kn_residual_forward_cpu(ref, x, y, n);
    assert_int_equal(kn_residual_forward_cuda(ctx, o_, x_, y_, n), 0);
    expect_close("add", o_, ref, n);
    memcpy(ref, y, n * sizeof *ref);
    kn_residual_backward_cpu(ref, NULL, d, n);
    assert_int_equal(kn_residual_backward_cuda(ctx, y_, NULL, d_, n), 0);
    expect_close("dadd", y_, ref, n);
    dfree(x_), dfree(y_), dfree(d_), dfree(o_);
    free(x), free(y), free(d), free(ref);
}

static void test_attention_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    int B = 2, T = 37, C = 48, NH = 3; /* T not a multiple of 32: partial warps in the rows */
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = hrand(nqkv, 1), *dout = hrand(nout, 1), *out = hzero(nout), *att = hzero(natt);
    float *dqkv = hzero(nqkv), *cws = hzero(kn_attention_workspace_floats(B, T, C, NH, 0));
    kn_attention_forward_cpu(out, att, qkv, B, T, C, NH);
    kn_attention_backward_cpu(dqkv, cws, dout, qkv, att, B, T, C, NH);
    size_t nws = kn_attention_workspace_floats(B, T, C, NH, 1);
    float *ws_ = dzero(nws), *qkv_ = DF(qkv, nqkv), *dout_ = DF(dout, nout);
    float *out_ = DF(out, nout), *att_ = DF(att, natt), *dqkv_ = DF(dqkv, nqkv);
    assert_int_equal(kn_attention_forward_cuda(ctx, out_, att_, ws_, qkv_, B, T, C, NH), 0);
    expect_close("att", att_, att, natt);
    expect_close("out", out_, out, nout);
    assert_int_equal(kn_attention_backward_cuda(ctx, dqkv_, ws_, dout_, qkv_, att_, B, T, C, NH),
                     0);
    expect_close("dqkv", dqkv_, dqkv, nqkv);
    dfree(ws_), dfree(qkv_), dfree(dout_), dfree(out_), dfree(att_), dfree(dqkv_);
    free(qkv), free(dout), free(out), free(att), free(dqkv), free(cws);
}

static void test_crossentropy_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    int N = 9, V = 1000;
    size_t n = (size_t)N * V;
    float *logits = hrand(n, 4), *probs = hzero(n), *losses = hzero(N), *dl = hzero(n);
    int32_t tgt[9];
    for (int i = 0; i < N; i++)
        tgt[i] = (int32_t)(i * 97 % V);
    kn_crossentropy_forward_cpu(losses, probs, logits, tgt, N, V);
    kn_crossentropy_backward_cpu(dl, probs, tgt, 1.0f / N, N, V);
    float *z_ = DF(logits, n), *l_ = DF(losses, N);
    int32_t *t_ = dcopy(tgt, sizeof tgt);
    /* in place, as the model runs it: probs overwrite the logits, dlogits the probs */
    assert_int_equal(kn_crossentropy_forward_cuda(ctx, l_, z_, z_, t_, N, V), 0);
    expect_close("losses", l_, losses, N);
    expect_close("probs", z_, probs, n);
    assert_int_equal(kn_crossentropy_backward_cuda(ctx, z_, z_, t_, 1.0f / N, N, V), 0);
    expect_close("dlogits", z_, dl, n);
    dfree(z_), dfree(l_), dfree(t_);
    free(logits), free(probs), free(losses), free(dl);
}

static void conv_case(int B, kn_conv2d_shape s)
{
    int ho = kn_conv2d_out_h(&s), wo = kn_conv2d_out_w(&s);
    size_t nx = (size_t)B * s.cin * s.h * s.w, nw = (size_t)s.cout * s.cin * s.k * s.k;
    size_t no = (size_t)B * s.cout * ho * wo, ncol = kn_conv2d_col_floats(&s);
    float *x = hrand(nx, 1), *w = hrand(nw, 1), *b = hrand(s.cout, 1), *dout = hrand(no, 1);
    float *out = hzero(no), *col = hzero(ncol), *dx = hzero(nx), *dw = hrand(nw, 1);
    float *db = hrand(s.cout, 1);
    float *x_ = DF(x, nx), *w_ = DF(w, nw), *b_ = DF(b, s.cout), *dout_ = DF(dout, no);
    float *out_ = DF(out, no), *col_ = DF(col, ncol), *dx_ = DF(dx, nx), *dw_ = DF(dw, nw);
    float *db_ = DF(db, s.cout);
    kn_conv2d_forward_cpu(out, col, x, w, b, B, &s);
    kn_conv2d_backward_input_cpu(dx, col, dout, w, B, &s);
    kn_conv2d_backward_weight_cpu(dw, db, col, dout, x, B, &s);
    assert_int_equal(kn_conv2d_forward_cuda(ctx, out_, col_, x_, w_, b_, B, &s), 0);
    assert_int_equal(kn_conv2d_backward_input_cuda(ctx, dx_, col_, dout_, w_, B, &s), 0);
    assert_int_equal(kn_conv2d_backward_weight_cuda(ctx, dw_, db_, col_, dout_, x_, B, &s), 0);
    expect_close("out", out_, out, no);
    expect_close("dx", dx_, dx, nx);
    expect_close("dw", dw_, dw, nw);
    expect_close("db", db_, db, s.cout);
    dfree(x_), dfree(w_), dfree(b_), dfree(dout_), dfree(out_), dfree(col_), dfree(dx_);
    dfree(dw_), dfree(db_);
    free(x), free(w), free(b), free(dout), free(out), free(col), free(dx), free(dw), free(db);
}

static void test_conv_pool_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    kn_conv2d_shape a = {3, 12, 12, 5, 3, 1, 1}, b = {2, 9, 7, 4, 3, 2, 1},
                    c = {2, 6, 6, 3, 2, 1, 0};
    conv_case(2, a);
    conv_case(3, b);
    conv_case(1, c);
    int B = 2, C = 3, H = 8, W = 6;
    size_t nx = (size_t)B * C * H * W, no = (size_t)B * C * (H / 2) * (W / 2);
    float *x = hrand(nx, 1), *d = hrand(no, 1), *out = hzero(no), *dx = hzero(nx);
    x[1] = x[0]; /* a tie: both sides must pick the first */
    kn_maxpool2d_forward_cpu(out, x, B, C, H, W, 2, 2);
    kn_maxpool2d_backward_cpu(dx, d, x, B, C, H, W, 2, 2);
    float *x_ = DF(x, nx), *d_ = DF(d, no), *o_ = dzero(no), *dx_ = dzero(nx);
    assert_int_equal(kn_maxpool2d_forward_cuda(ctx, o_, x_, B, C, H, W, 2, 2), 0);
    assert_int_equal(kn_maxpool2d_backward_cuda(ctx, dx_, d_, x_, B, C, H, W, 2, 2), 0);
    expect_close("pool", o_, out, no);
    expect_close("dpool", dx_, dx, nx);
    dfree(x_), dfree(d_), dfree(o_), dfree(dx_);
    free(x), free(d), free(out), free(dx);
}

static void test_optim_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    size_t n = 777;
    float *p = hrand(n, 1), *g = hrand(n, 1), *m = hzero(n), *v = hzero(n);
    float *p_ = DF(p, n), *g_ = DF(g, n), *m_ = DF(m, n), *v_ = DF(v, n);
    for (int t = 1; t <= 3; t++) {
        kn_adamw_step_cpu(p, g, m, v, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, t);
        assert_int_equal(
            kn_adamw_step_cuda(ctx, p_, g_, m_, v_, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, t), 0);
    }
    expect_close("adamw p", p_, p, n);
    expect_close("adamw v", v_, v, n);
    for (int t = 1; t <= 3; t++) {
        kn_sgd_step_cpu(p, g, m, n, 0.05f, 0.9f, 1e-3f);
        assert_int_equal(kn_sgd_step_cuda(ctx, p_, g_, m_, n, 0.05f, 0.9f, 1e-3f), 0);
    }
    expect_close("sgd p", p_, p, n);
    /* gradient sums of squares: added into a device double, in another order than the CPU */
    sc_err err;
    sc_err_clear(&err);
    void *sum_;
    assert_int_equal(kn_ctx_alloc(ctx, sizeof(double), &sum_, &err), SC_OK);
    const size_t sizes[] = {1, 31, 777, 1000003};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t ns = sizes[k];
        float *x = hrand(ns, 1), *x_ = DF(x, ns);
        double got = -1, want = kn_sq_sum_cpu(x, ns);
        assert_int_equal(kn_ctx_zero(ctx, sum_, sizeof(double), &err), SC_OK);
        assert_int_equal(kn_sq_sum_add_cuda(ctx, x_, ns, (double *)sum_), 0);
        assert_int_equal(kn_sq_sum_add_cuda(ctx, x_, 0, (double *)sum_), 0); /* adds nothing */
        assert_int_equal(kn_ctx_download(ctx, &got, sum_, sizeof got, &err), SC_OK);
        if (!(fabs(got - want) <= 1e-12 * want))
            fail_msg("sum of squares of %zu floats: %.17g on the GPU, %.17g on the CPU", ns, got,
                     want);
        dfree(x_);
        free(x);
    }
    kn_ctx_free(ctx, sum_);
    dfree(p_), dfree(g_), dfree(m_), dfree(v_);
    free(p), free(g), free(m), free(v);
}

/* --- whole models ------------------------------------------------------------------------- */

/* Compares gradients. `strict`: every entry within tolerance. Otherwise (ReLU and max-pool
 * kinks: a pre-activation within rounding of zero may switch sides between the devices and
 * move a few entries) at least 99.5% of the entries, and the whole vector within 1e-3 relative
 * L2 distance. */
static void expect_grads_close(const float *gc, const float *gg, size_t np, int strict)
{
    size_t bad = 0;
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < np; i++) {
        double d = (double)gc[i] - gg[i];
        d2 += d * d;
        r2 += (double)gc[i] * gc[i];
        if (!(fabs(d) <= 1e-4 + 1e-3 * fabs(gc[i]))) {
            if (strict || bad < 5)
                fprintf(stderr, "grad[%zu]: gpu %g cpu %g\n", i, gg[i], gc[i]);
            bad++;
        }
    }
    if (strict)
        assert_int_equal(bad, 0);
    assert_true(bad <= np / 200);
    assert_true(sqrt(d2) <= 1e-3 * sqrt(r2) + 1e-6);
}

static void model_case(const char *text, int n, int strict)
{
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_model_parse(&m, "model.json", text, strlen(text), &err), SC_OK);
    int nb = kn_model_block_count(m);
    kn_device cpu = {KN_DEV_CPU, 0}, gpu = {KN_DEV_CUDA, 0};
    kn_stage *sc = NULL, *sg = NULL;
    /* SGD: its update is linear in the gradient, so rounding differences stay small (AdamW's
     * normalised step turns a gradient that is zero up to rounding, such as the key bias of
     * attention, into +-lr with a device-dependent sign; the AdamW kernel is checked alone) */
    kn_stage_cfg cfg = kn_stage_cfg_default(0, nb - 1, cpu, n);
    cfg.optim = kn_optim_sgd_default();
    cfg.optim.lr = 0.05f;
    assert_int_equal(kn_stage_new_cfg(&sc, m, &cfg, &err), SC_OK);
    cfg.device = gpu;
    assert_int_equal(kn_stage_new_cfg(&sg, m, &cfg, &err), SC_OK);
    const kn_block *b0 = kn_model_block(m, 0);
    void *in = malloc(b0->in_floats * n * 4);
    int32_t *tgt = malloc((size_t)kn_model_targets_per_sample(m) * n * 4);
    for (size_t i = 0; i < b0->in_floats * n; i++) {
        if (b0->in_tokens)
            ((int32_t *)in)[i] = (int32_t)(i * 7 % (size_t)b0->V);
        else
            ((float *)in)[i] = frand();
    }
    for (int i = 0; i < kn_model_targets_per_sample(m) * n; i++)
        tgt[i] = i % kn_model_classes(m);
    size_t np = kn_stage_param_count(sc);
    float *pc = malloc(np * 4), *pg = malloc(np * 4), *gc = malloc(np * 4), *gg = malloc(np * 4);
    /* identical initial weights on both devices */
    assert_int_equal(kn_stage_params_to_host(sc, pc, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(sg, pg, &err), SC_OK);
    assert_memory_equal(pc, pg, np * 4);
    float lc, lg;
    for (int step = 0; step < 2; step++) {
        assert_int_equal(kn_stage_forward_host(sc, 0, in, tgt, n, &err), SC_OK);
        assert_int_equal(kn_stage_forward_host(sg, 0, in, tgt, n, &err), SC_OK);
        assert_int_equal(kn_stage_loss(sc, 0, &lc, &err), SC_OK);
        assert_int_equal(kn_stage_loss(sg, 0, &lg, &err), SC_OK);
        assert_true(fabs(lc - lg) <= 1e-5 + 1e-4 * fabs(lc));
        assert_int_equal(kn_stage_zero_grads(sc, &err), SC_OK);
        assert_int_equal(kn_stage_zero_grads(sg, &err), SC_OK);
        assert_int_equal(kn_stage_backward(sc, 0, NULL, &err), SC_OK);
        assert_int_equal(kn_stage_backward(sg, 0, NULL, &err), SC_OK);
        assert_int_equal(kn_stage_grads_to_host(sc, gc, &err), SC_OK);
        assert_int_equal(kn_stage_grads_to_host(sg, gg, &err), SC_OK);
        /* whole-model gradients chain a dozen ops: a looser absolute floor than one op */
        expect_grads_close(gc, gg, np, strict);
        /* the GPU's per-block norms (summed on the device) are those of its own gradients */
        int nb = kn_stage_last_block(sg) - kn_stage_first_block(sg) + 1;
        double norms[64];
        assert_true(nb <= 64);
        assert_int_equal(kn_stage_grad_sq_norms(sg, norms, &err), SC_OK);
        size_t off = 0;
        for (int i = 0; i < nb; i++) {
            size_t bp = kn_model_block(m, kn_stage_first_block(sg) + i)->params;
            double want = kn_sq_sum_cpu(gg + off, bp);
            if (!(fabs(norms[i] - want) <= 1e-12 * want))
                fail_msg("block %d: gradient norm %.17g on the GPU, %.17g from its gradients", i,
                         norms[i], want);
            off += bp;
        }
        assert_int_equal(kn_stage_step(sc, &err), SC_OK);
        assert_int_equal(kn_stage_step(sg, &err), SC_OK);
    }
    assert_int_equal(kn_stage_params_to_host(sc, pc, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(sg, pg, &err), SC_OK);
    expect_grads_close(pc, pg, np, strict); /* the same tolerance, on the stepped weights */
    free(in), free(tgt), free(pc), free(pg), free(gc), free(gg);
    kn_stage_destroy(&sc);
    kn_stage_destroy(&sg);
    kn_model_destroy(&m);
}

static void test_models_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    model_case("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", "
               "\"vocab\": 50, \"seq_len\": 12, \"layers\": 2, \"width\": 32, \"heads\": 4}",
               3, 1);
    model_case("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", "
               "\"vocab\": 50, \"seq_len\": 12, \"layers\": 1, \"width\": 32, \"heads\": 4, "
               "\"split_blocks\": true}",
               2, 1);
    model_case("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"vgg\", "
               "\"config\": \"vgg11\", \"image\": [3, 32, 32], \"classes\": 5, "
               "\"width_divisor\": 16}",
               2, 0);
    model_case("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"mlp\", "
               "\"sizes\": [20, 30, 7]}",
               4, 1);
}

/* kn_stage_gather on the device: forwards of samples [0, 2), [2, 5), [5, 6) in three slots, then
 * the backward of [1, 5) assembled in the gather slot by device-to-device copies, against a
 * direct forward + backward of [1, 5) on the same device (cuBLAS may pick other algorithms for
 * other batch shapes, hence the model tolerance rather than equality). */
static void gather_case(const char *text, int strict)
{
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_model_parse(&m, "model.json", text, strlen(text), &err), SC_OK);
    int nb = kn_model_block_count(m);
    kn_device gpu = {KN_DEV_CUDA, 0};
    kn_stage_cfg cfg = kn_stage_cfg_default(0, nb - 1, gpu, 3);
    cfg.slots = 3;
    cfg.gather_microbatch = 4;
    kn_stage *st = NULL, *ref = NULL;
    assert_int_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_OK);
    cfg = kn_stage_cfg_default(0, nb - 1, gpu, 4);
    assert_int_equal(kn_stage_new_cfg(&ref, m, &cfg, &err), SC_OK);
    const kn_block *b0 = kn_model_block(m, 0);
    size_t in_ps = b0->in_floats;
    int tps = kn_model_targets_per_sample(m);
    void *in = malloc(in_ps * 6 * 4);
    int32_t *tgt = malloc((size_t)tps * 6 * 4);
    for (size_t i = 0; i < in_ps * 6; i++) {
        if (b0->in_tokens)
            ((int32_t *)in)[i] = (int32_t)(i * 7 % (size_t)b0->V);
        else
            ((float *)in)[i] = frand();
    }
    for (int i = 0; i < tps * 6; i++)
        tgt[i] = i % kn_model_classes(m);
    const int off[] = {0, 2, 5, 6};
    for (int k = 0; k < 3; k++)
        assert_int_equal(kn_stage_forward_host(st, k, (char *)in + off[k] * in_ps * 4,
                                               tgt + off[k] * tps, off[k + 1] - off[k], &err),
                         SC_OK);
    const kn_stage_range span[] = {{0, 1, 1}, {1, 0, 3}};
    assert_int_equal(kn_stage_gather(st, 3, span, 2, &err), SC_OK);
    assert_int_equal(kn_stage_backward(st, 3, NULL, &err), SC_OK);
    assert_int_equal(kn_stage_forward_host(ref, 0, (char *)in + in_ps * 4, tgt + tps, 4, &err),
                     SC_OK);
    assert_int_equal(kn_stage_backward(ref, 0, NULL, &err), SC_OK);
    float lg, lr;
    assert_int_equal(kn_stage_loss(st, 3, &lg, &err), SC_OK);
    assert_int_equal(kn_stage_loss(ref, 0, &lr, &err), SC_OK);
    assert_true(fabs(lg - lr) <= 1e-5 + 1e-4 * fabs(lr));
    size_t np = kn_stage_param_count(st);
    float *g = malloc(np * 4), *gr = malloc(np * 4);
    assert_int_equal(kn_stage_grads_to_host(st, g, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(ref, gr, &err), SC_OK);
    expect_grads_close(gr, g, np, strict);
    free(in), free(tgt), free(g), free(gr);
    kn_stage_destroy(&st);
    kn_stage_destroy(&ref);
    kn_model_destroy(&m);
}

static void test_gather_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    gather_case("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", "
                "\"vocab\": 50, \"seq_len\": 12, \"layers\": 2, \"width\": 32, \"heads\": 4}",
                1);
    gather_case("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", "
                "\"vocab\": 50, \"seq_len\": 12, \"layers\": 1, \"width\": 32, \"heads\": 4, "
                "\"split_blocks\": true}",
                1);
    gather_case("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"vgg\", "
                "\"config\": \"vgg11\", \"image\": [3, 32, 32], \"classes\": 5, "
                "\"width_divisor\": 16}",
                0);
}

/* The split backward on the device: two micro-batches in two slots, their backwards fused on one
 * stage and as B B W W on another with the same weights. The same launches on the same values,
 * but the parameter-gradient reductions of LayerNorm and cuBLAS may add in another order from
 * one launch to the next, hence the model tolerance rather than equality. */
static void split_case(const char *text, int strict)
{
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_model_parse(&m, "model.json", text, strlen(text), &err), SC_OK);
    int nb = kn_model_block_count(m), n = 3;
    kn_stage_cfg cfg = kn_stage_cfg_default(0, nb - 1, (kn_device){KN_DEV_CUDA, 0}, n);
    cfg.slots = 2;
    kn_stage *fused = NULL, *split = NULL;
    assert_int_equal(kn_stage_new_cfg(&fused, m, &cfg, &err), SC_OK);
    cfg.split_backward = true;
    assert_int_equal(kn_stage_new_cfg(&split, m, &cfg, &err), SC_OK);
    const kn_block *b0 = kn_model_block(m, 0);
    int tps = kn_model_targets_per_sample(m);
    void *in = malloc(b0->in_floats * 2 * n * 4);
    int32_t *tgt = malloc((size_t)tps * 2 * n * 4);
    for (size_t i = 0; i < b0->in_floats * 2 * n; i++) {
        if (b0->in_tokens)
            ((int32_t *)in)[i] = (int32_t)(i * 7 % (size_t)b0->V);
        else
            ((float *)in)[i] = frand();
    }
    for (int i = 0; i < tps * 2 * n; i++)
        tgt[i] = i % kn_model_classes(m);
    for (int k = 0; k < 2; k++) {
        const char *x = (const char *)in + (size_t)k * n * b0->in_floats * 4;
        assert_int_equal(kn_stage_forward_host(fused, k, x, tgt + k * n * tps, n, &err), SC_OK);
        assert_int_equal(kn_stage_forward_host(split, k, x, tgt + k * n * tps, n, &err), SC_OK);
    }
    for (int k = 0; k < 2; k++) {
        assert_int_equal(kn_stage_backward(fused, k, NULL, &err), SC_OK);
        assert_int_equal(kn_stage_backward_input(split, k, NULL, &err), SC_OK);
    }
    for (int k = 0; k < 2; k++)
        assert_int_equal(kn_stage_backward_weight(split, k, &err), SC_OK);
    size_t np = kn_stage_param_count(fused);
    float *gf = malloc(np * 4), *gs = malloc(np * 4);
    assert_int_equal(kn_stage_grads_to_host(fused, gf, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(split, gs, &err), SC_OK);
    expect_grads_close(gf, gs, np, strict);
    free(in), free(tgt), free(gf), free(gs);
    kn_stage_destroy(&fused);
    kn_stage_destroy(&split);
    kn_model_destroy(&m);
}

static void test_split_backward_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    split_case("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", "
               "\"vocab\": 50, \"seq_len\": 12, \"layers\": 2, \"width\": 32, \"heads\": 4}",
               1);
    split_case("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", "
               "\"vocab\": 50, \"seq_len\": 12, \"layers\": 1, \"width\": 32, \"heads\": 4, "
               "\"split_blocks\": true}",
               1);
    split_case("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"vgg\", "
               "\"config\": \"vgg11\", \"image\": [3, 32, 32], \"classes\": 5, "
               "\"width_divisor\": 16}",
               1);
    split_case("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"mlp\", "
               "\"sizes\": [20, 30, 7]}",
               1);
}

/* A whole stage's AdamW step on the GPU (one launch over every learning tensor, each with its
 * own weight decay) against the CPU's per-tensor steps: after two steps from the same weights
 * and gradients, every weight moved by what the CPU moved it, within what rounding of the
 * normalised step allows (a gradient that is zero up to rounding may step the other way) */
static void test_adamw_stage_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    const char *text = "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", "
                       "\"vocab\": 50, \"seq_len\": 12, \"layers\": 2, \"width\": 32, "
                       "\"heads\": 4}";
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_model_parse(&m, "model.json", text, strlen(text), &err), SC_OK);
    int nb = kn_model_block_count(m), n = 3;
    kn_stage_cfg cfg = kn_stage_cfg_default(0, nb - 1, (kn_device){KN_DEV_CPU, 0}, n);
    cfg.optim.lr = 1e-3f;
    cfg.optim.weight_decay = 0.1f;
    kn_stage *sc = NULL, *sg = NULL;
    assert_int_equal(kn_stage_new_cfg(&sc, m, &cfg, &err), SC_OK);
    cfg.device = (kn_device){KN_DEV_CUDA, 0};
    assert_int_equal(kn_stage_new_cfg(&sg, m, &cfg, &err), SC_OK);
    int32_t tok[36], tgt[36];
    for (int i = 0; i < 36; i++) {
        tok[i] = (i * 7) % 50;
        tgt[i] = (i * 11 + 3) % 50;
    }
    size_t np = kn_stage_param_count(sc);
    float *p0 = malloc(np * 4), *pc = malloc(np * 4), *pg = malloc(np * 4);
    assert_int_equal(kn_stage_params_to_host(sc, p0, &err), SC_OK);
    for (int step = 0; step < 2; step++) {
        kn_stage *both[2] = {sc, sg};
        for (int k = 0; k < 2; k++) {
            assert_int_equal(kn_stage_zero_grads(both[k], &err), SC_OK);
            assert_int_equal(kn_stage_forward_host(both[k], 0, tok, tgt, n, &err), SC_OK);
            assert_int_equal(kn_stage_backward(both[k], 0, NULL, &err), SC_OK);
            assert_int_equal(kn_stage_step(both[k], &err), SC_OK);
        }
    }
    assert_int_equal(kn_stage_params_to_host(sc, pc, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(sg, pg, &err), SC_OK);
    size_t far = 0, moved = 0;
    for (size_t i = 0; i < np; i++) {
        double dc = (double)pc[i] - p0[i], dg = (double)pg[i] - p0[i];
        assert_true(fabs(dg) <= 2 * 1e-3 * (1.0 + 1e-3) + 2 * 1e-3 * 0.1 * fabs(p0[i]) + 1e-6);
        if (fabs(dc - dg) > 1e-4 + 0.05 * fabs(dc))
            far++;
        moved += dg != 0.0;
    }
    fprintf(stderr, "AdamW stage on the GPU: %zu of %zu weights moved, %zu far from the CPU's\n",
            moved, np, far);
    assert_true(moved > np / 2);
    assert_true(far <= np / 100);
    free(p0), free(pc), free(pg);
    kn_stage_destroy(&sc);
    kn_stage_destroy(&sg);
    kn_model_destroy(&m);
}

static void test_profile_gpu(void **state)
{
    (void)state;
    NEED_GPU();
    const char *text = "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", "
                       "\"vocab\": 64, \"seq_len\": 16, \"layers\": 1, \"width\": 32, "
                       "\"heads\": 2, \"split_blocks\": true}";
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_model_parse(&m, "model.json", text, strlen(text), &err), SC_OK);
    kn_profile_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.device.kind = KN_DEV_CUDA;
    cfg.sizes[0] = 1;
    cfg.sizes[1] = 4;
    cfg.nsizes = 2;
    cfg.warmup = 1;
    cfg.repeats = 3;
    kn_profile_block blocks[4];
    assert_int_equal(kn_profile_run(m, &cfg, blocks, &err), SC_OK);
    for (int i = 0; i < 4; i++)
        for (int s = 0; s < 2; s++) /* event timings of real work are positive */
            assert_true(blocks[i].points[s].forward_s > 0 && blocks[i].points[s].backward_s > 0);
    kn_model_destroy(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding_gpu), cmocka_unit_test(test_layernorm_gpu),
        cmocka_unit_test(test_linear_gpu),    cmocka_unit_test(test_elementwise_gpu),
        cmocka_unit_test(test_attention_gpu), cmocka_unit_test(test_crossentropy_gpu),
        cmocka_unit_test(test_conv_pool_gpu), cmocka_unit_test(test_optim_gpu),
        cmocka_unit_test(test_models_gpu),    cmocka_unit_test(test_gather_gpu),
        cmocka_unit_test(test_profile_gpu),   cmocka_unit_test(test_split_backward_gpu),
        cmocka_unit_test(test_adamw_stage_gpu),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
