/*
 * kernels ops: every op's CPU reference against central finite differences of a random linear
 * objective L = sum(out * r), evaluated in double, on tiny sizes; optimizers against hand-worked
 * updates.
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
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/optim.h"

static uint64_t rng_state = 42;

static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) / 8388608.0 - 1.0);
}

static float *rnd(size_t n, float scale)
{
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand() * scale;
    return p;
}

static float *zeros(size_t n)
{
    float *p = calloc(n, sizeof *p);
    assert_non_null(p);
    return p;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

/* The op under test: recomputes its output from the current inputs, returns sum(out * r). */
typedef double (*objective_fn)(void *op);

static void check_grad(const char *what, float *x, size_t n, const float *grad, objective_fn f,
                       void *op)
{
    const float eps = 1e-3f;
    for (size_t i = 0; i < n; i++) {
        float saved = x[i];
        x[i] = saved + eps;
        double lp = f(op);
        x[i] = saved - eps;
        double lm = f(op);
        x[i] = saved;
        double fd = (lp - lm) / (2.0 * eps);
        double tol = 2e-3 + 2e-2 * fabs(fd);
        if (fabs(fd - grad[i]) > tol) {
            fprintf(stderr, "%s[%zu]: analytic %.6g, finite difference %.6g\n", what, i,
                    (double)grad[i], fd);
            fail();
        }
    }
}

/* --- embedding -------------------------------------------------------------------------- */

typedef struct {
    int B, T, C, V;
    int32_t *tok;
    float *wte, *wpe, *out, *r;
} emb_op;

static double emb_obj(void *p)
{
    emb_op *o = p;
    kn_embedding_forward_cpu(o->out, o->tok, o->wte, o->wpe, o->B, o->T, o->C);
    return dot(o->out, o->r, (size_t)o->B * o->T * o->C);
}

static void test_embedding(void **state)
{
    (void)state;
    emb_op o = {2, 3, 4, 5, NULL, NULL, NULL, NULL, NULL};
    int32_t tok[6] = {1, 4, 1, 0, 3, 1}; /* a repeated id exercises accumulation */
    o.tok = tok;
    size_t n = (size_t)o.B * o.T * o.C;
    o.wte = rnd((size_t)o.V * o.C, 1);
    o.wpe = rnd((size_t)o.T * o.C, 1);
    o.out = zeros(n);
    o.r = rnd(n, 1);
    float *dwte = zeros((size_t)o.V * o.C), *dwpe = zeros((size_t)o.T * o.C);
    emb_obj(&o);
    assert_true(o.out[5] == o.wte[4 * 4 + 1] + o.wpe[1 * 4 + 1]); /* b0 t1 c1 */
    kn_embedding_backward_cpu(dwte, dwpe, o.r, tok, o.B, o.T, o.C);
    check_grad("dwte", o.wte, (size_t)o.V * o.C, dwte, emb_obj, &o);
    check_grad("dwpe", o.wpe, (size_t)o.T * o.C, dwpe, emb_obj, &o);
    free(o.wte), free(o.wpe), free(o.out), free(o.r), free(dwte), free(dwpe);
}

/* --- layernorm ------------------------------------------------------------------------------ */

typedef struct {
    int N, C;
    float *x, *w, *b, *out, *mean, *rstd, *r;
} ln_op;

static double ln_obj(void *p)
{
    ln_op *o = p;
    kn_layernorm_forward_cpu(o->out, o->mean, o->rstd, o->x, o->w, o->b, o->N, o->C);
    return dot(o->out, o->r, (size_t)o->N * o->C);
}

static void test_layernorm(void **state)
{
    (void)state;
    ln_op o = {3, 8, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t n = (size_t)o.N * o.C;
    o.x = rnd(n, 2);
    o.w = rnd(o.C, 1);
    o.b = rnd(o.C, 1);
    o.out = zeros(n);
    o.mean = zeros(o.N);
    o.rstd = zeros(o.N);
    o.r = rnd(n, 1);
    ln_obj(&o);
    /* normalised rows: mean 0 and variance 1 before the affine part */
    double m = 0;
    for (int c = 0; c < o.C; c++)
        m += (o.out[c] - o.b[c]) / o.w[c];
    assert_true(fabs(m / o.C) < 1e-4);
    float *dx = zeros(n), *dw = zeros(o.C), *db = zeros(o.C);
    kn_layernorm_backward_cpu(dx, dw, db, o.r, o.x, o.w, o.mean, o.rstd, o.N, o.C);
    check_grad("dx", o.x, n, dx, ln_obj, &o);
    check_grad("dw", o.w, o.C, dw, ln_obj, &o);
    check_grad("db", o.b, o.C, db, ln_obj, &o);
    free(o.x), free(o.w), free(o.b), free(o.out), free(o.mean), free(o.rstd), free(o.r);
    free(dx), free(dw), free(db);
}

/* --- linear --------------------------------------------------------------------------------- */

typedef struct {
    int N, IC, OC;
    float *x, *w, *b, *out, *r;
} lin_op;

static double lin_obj(void *p)
{
    lin_op *o = p;
    kn_linear_forward_cpu(o->out, o->x, o->w, o->b, o->N, o->IC, o->OC);
    return dot(o->out, o->r, (size_t)o->N * o->OC);
}

static void test_linear(void **state)
{
    (void)state;
    lin_op o = {5, 6, 7, NULL, NULL, NULL, NULL, NULL}; /* N=5: the 4-row tile and a tail */
    o.x = rnd((size_t)o.N * o.IC, 1);
    o.w = rnd((size_t)o.OC * o.IC, 1);
    o.b = rnd(o.OC, 1);
    o.out = zeros((size_t)o.N * o.OC);
    o.r = rnd((size_t)o.N * o.OC, 1);
    lin_obj(&o);
    double ref = o.b[2];
    for (int i = 0; i < o.IC; i++)
        ref += (double)o.x[4 * o.IC + i] * o.w[2 * o.IC + i];
    assert_true(fabs(o.out[4 * o.OC + 2] - ref) < 1e-5);
    float *dx = zeros((size_t)o.N * o.IC), *dw = zeros((size_t)o.OC * o.IC), *db = zeros(o.OC);
    kn_linear_backward_input_cpu(dx, o.r, o.w, o.N, o.IC, o.OC);
    kn_linear_backward_weight_cpu(dw, db, o.r, o.x, o.N, o.IC, o.OC);
    check_grad("dx", o.x, (size_t)o.N * o.IC, dx, lin_obj, &o);
    check_grad("dw", o.w, (size_t)o.OC * o.IC, dw, lin_obj, &o);
    check_grad("db", o.b, o.OC, db, lin_obj, &o);
    /* the weight gradient accumulates: a second call doubles it */
    float first = dw[3];
    kn_linear_backward_weight_cpu(dw, db, o.r, o.x, o.N, o.IC, o.OC);
    assert_true(fabs(dw[3] - 2 * first) < 1e-5);
    free(o.x), free(o.w), free(o.b), free(o.out), free(o.r), free(dx), free(dw), free(db);
}

/* --- elementwise ---------------------------------------------------------------------------- */

typedef struct {
    size_t n;
    int relu;
    float *x, *out, *r;
} act_op;

static double act_obj(void *p)
{
    act_op *o = p;
    if (o->relu)
        kn_relu_forward_cpu(o->out, o->x, o->n);
    else
        kn_gelu_forward_cpu(o->out, o->x, o->n);
    return dot(o->out, o->r, o->n);
}

/* The matmuls' order of additions, written as plainly as possible: the blocked, vectorised
 * kernels must give exactly these bits whatever the shape (blocks of four inputs, rows of four
 * terms, eight-float chunks and the tails of each). */
static float spec_dot(const float *a, const float *b, int n)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += a[i + k] * b[i + k];
    float t = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (; i < n; i++)
        t += a[i] * b[i];
    return t;
}

static void test_linear_order(void **state)
{
    (void)state;
    const int shapes[][3] = {{1, 1, 1}, {3, 7, 5}, {4, 8, 4}, {5, 13, 9}, {9, 33, 6}, {16, 40, 12}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int N = shapes[k][0], IC = shapes[k][1], OC = shapes[k][2];
        float *x = rnd((size_t)N * IC, 1), *w = rnd((size_t)OC * IC, 1), *b = rnd((size_t)OC, 1);
        float *d = rnd((size_t)N * OC, 1), *dw0 = rnd((size_t)OC * IC, 1);
        float *out = zeros((size_t)N * OC), *want = zeros((size_t)N * OC);
        float *dx = zeros((size_t)N * IC), *dxw = zeros((size_t)N * IC);
        float *dw = zeros((size_t)OC * IC), *dww = zeros((size_t)OC * IC);
        float *db = zeros((size_t)OC), *dbw = zeros((size_t)OC);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < OC; j++)
                want[n * OC + j] = spec_dot(x + n * IC, w + j * IC, IC) + b[j];
        for (int n = 0; n < N; n++)
            for (int i = 0; i < IC; i++) {
                float t = 0.0f;
                for (int o = 0; o < OC; o++)
                    t += d[n * OC + o] * w[o * IC + i];
                dxw[n * IC + i] = t;
            }
        for (int o = 0; o < OC; o++) {
            for (int i = 0; i < IC; i++) {
                float t = dw0[o * IC + i];
                for (int n = 0; n < N; n++)
                    t += d[n * OC + o] * x[n * IC + i];
                dww[o * IC + i] = t;
            }
            float sb = 0.0f;
            for (int n = 0; n < N; n++)
                sb += d[n * OC + o];
            dbw[o] = sb;
        }
        kn_linear_forward_cpu(out, x, w, b, N, IC, OC);
        kn_linear_backward_input_cpu(dx, d, w, N, IC, OC);
        memcpy(dw, dw0, (size_t)OC * IC * sizeof *dw);
        kn_linear_backward_weight_cpu(dw, db, d, x, N, IC, OC);
        assert_memory_equal(out, want, (size_t)N * OC * sizeof *out);
        assert_memory_equal(dx, dxw, (size_t)N * IC * sizeof *dx);
        assert_memory_equal(dw, dww, (size_t)OC * IC * sizeof *dw);
        assert_memory_equal(db, dbw, (size_t)OC * sizeof *db);
        free(x), free(w), free(b), free(d), free(dw0), free(out), free(want);
        free(dx), free(dxw), free(dw), free(dww), free(db), free(dbw);
    }
}

static void test_gelu(void **state)
{
    (void)state;
    act_op o = {16, 0, rnd(16, 3), zeros(16), rnd(16, 1)};
    act_obj(&o);
    float *dx = zeros(o.n);
    kn_gelu_backward_cpu(dx, o.x, o.r, o.n);
    check_grad("dx", o.x, o.n, dx, act_obj, &o);
    float one = 1.0f, g;
    kn_gelu_forward_cpu(&g, &one, 1);
    assert_true(fabs(g - 0.841192f) < 1e-5); /* tanh-approximate GELU(1) */
    free(o.x), free(o.out), free(o.r), free(dx);
}

static void test_relu(void **state)
{
    (void)state;
    act_op o = {16, 1, rnd(16, 3), zeros(16), rnd(16, 1)};
    for (size_t i = 0; i < o.n; i++) /* keep the kink out of the finite-difference stencil */
        if (fabsf(o.x[i]) < 0.1f)
            o.x[i] = 0.5f;
    act_obj(&o);
    float *dx = zeros(o.n);
    kn_relu_backward_cpu(dx, o.out, o.r, o.n);
    check_grad("dx", o.x, o.n, dx, act_obj, &o);
    free(o.x), free(o.out), free(o.r), free(dx);
}

static void test_residual(void **state)
{
    (void)state;
    float a[3] = {1, 2, 3}, b[3] = {10, 20, 30}, out[3], da[3] = {1, 1, 1}, db[3] = {0};
    float dout[3] = {0.5f, -1, 2};
    kn_residual_forward_cpu(out, a, b, 3);
    assert_true(out[0] == 11 && out[1] == 22 && out[2] == 33);
    kn_residual_backward_cpu(da, db, dout, 3);
    assert_true(da[0] == 1.5f && da[1] == 0 && da[2] == 3);
    assert_true(db[0] == 0.5f && db[1] == -1 && db[2] == 2);
}

/* --- attention ------------------------------------------------------------------------------ */

typedef struct {
    int B, T, C, NH;
    float *qkv, *att, *out, *r;
} att_op;

static double att_obj(void *p)
{
    att_op *o = p;
    kn_attention_forward_cpu(o->out, o->att, o->qkv, o->B, o->T, o->C, o->NH);
    return dot(o->out, o->r, (size_t)o->B * o->T * o->C);
}

static void test_attention(void **state)
{
    (void)state;
    att_op o = {2, 4, 6, 2, NULL, NULL, NULL, NULL};
    size_t nqkv = (size_t)o.B * o.T * 3 * o.C, nout = (size_t)o.B * o.T * o.C;
    o.qkv = rnd(nqkv, 1);
    o.att = zeros((size_t)o.B * o.NH * o.T * o.T);
    o.out = zeros(nout);
    o.r = rnd(nout, 1);
    att_obj(&o);
    /* causal: row t sums to 1 over t2 <= t, zero after; the first position copies its v */
    for (int t = 0; t < o.T; t++) {
        double s = 0;
        for (int t2 = 0; t2 < o.T; t2++) {
            s += o.att[t * o.T + t2];
            if (t2 > t)
                assert_true(o.att[t * o.T + t2] == 0.0f);
        }
        assert_true(fabs(s - 1.0) < 1e-5);
    }
    assert_true(fabs(o.out[0] - o.qkv[2 * o.C]) < 1e-6);
    float *dqkv = zeros(nqkv), *ws = zeros(kn_attention_workspace_floats(o.B, o.T, o.C, o.NH, 0));
    kn_attention_backward_cpu(dqkv, ws, o.r, o.qkv, o.att, o.B, o.T, o.C, o.NH);
    check_grad("dqkv", o.qkv, nqkv, dqkv, att_obj, &o);
    free(o.qkv), free(o.att), free(o.out), free(o.r), free(dqkv), free(ws);
}

/* --- cross-entropy ---------------------------------------------------------------------- */

typedef struct {
    int N, V;
    const int32_t *tgt;
    float *logits, *probs, *losses;
    float dloss;
} ce_op;

static double ce_obj(void *p)
{
    ce_op *o = p;
    kn_crossentropy_forward_cpu(o->losses, o->probs, o->logits, o->tgt, o->N, o->V);
    double s = 0;
    for (int i = 0; i < o->N; i++)
        s += o->losses[i];
    return s * o->dloss;
}

static void test_crossentropy(void **state)
{
    (void)state;
    int32_t tgt[3] = {0, 4, 2};
    ce_op o = {3, 5, tgt, rnd(15, 2), zeros(15), zeros(3), 1.0f / 3};
    double l = ce_obj(&o);
    double lse = 0;
    for (int j = 0; j < 5; j++)
        lse += exp(o.logits[j]);
    assert_true(fabs(o.losses[0] - (log(lse) - o.logits[0])) < 1e-5);
    assert_true(l > 0);
    float *dlogits = zeros(15);
    kn_crossentropy_backward_cpu(dlogits, o.probs, tgt, o.dloss, o.N, o.V);
    check_grad("dlogits", o.logits, 15, dlogits, ce_obj, &o);
    /* probs may alias logits (the model computes them in place) */
    ce_obj(&o); /* the finite differences left perturbed probs behind */
    float *inplace = malloc(15 * sizeof *inplace), loss_ip[3];
    memcpy(inplace, o.logits, 15 * sizeof *inplace);
    kn_crossentropy_forward_cpu(loss_ip, inplace, inplace, tgt, o.N, o.V);
    assert_memory_equal(inplace, o.probs, 15 * sizeof *inplace);
    assert_memory_equal(loss_ip, o.losses, 3 * sizeof *inplace);
    free(inplace);
    /* huge logits stay finite (the loss is computed from the logits, not from log p) */
    float big[2] = {0.0f, 200.0f}, pb[2], lb;
    int32_t t0 = 0;
    kn_crossentropy_forward_cpu(&lb, pb, big, &t0, 1, 2);
    assert_true(isfinite(lb) && fabs(lb - 200.0f) < 1e-3);
    free(o.logits), free(o.probs), free(o.losses), free(dlogits);
}

/* --- conv2d and maxpool --------------------------------------------------------------------- */

typedef struct {
    int B;
    kn_conv2d_shape s;
    float *x, *w, *b, *out, *col, *r;
} conv_op;

static size_t conv_out_n(const conv_op *o)
{
    return (size_t)o->B * o->s.cout * kn_conv2d_out_h(&o->s) * kn_conv2d_out_w(&o->s);
}

static double conv_obj(void *p)
{
    conv_op *o = p;
    kn_conv2d_forward_cpu(o->out, o->col, o->x, o->w, o->b, o->B, &o->s);
    return dot(o->out, o->r, conv_out_n(o));
}

static void conv_case(int B, kn_conv2d_shape s)
{
    conv_op o = {B, s, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t nx = (size_t)B * s.cin * s.h * s.w, nw = (size_t)s.cout * s.cin * s.k * s.k;
    size_t nout = conv_out_n(&o);
    o.x = rnd(nx, 1);
    o.w = rnd(nw, 1);
    o.b = rnd(s.cout, 1);
    o.out = zeros(nout);
    o.col = zeros(kn_conv2d_col_floats(&s));
    o.r = rnd(nout, 1);
    conv_obj(&o);
    /* one output by the definition: out[0, co=1, 0, 0] */
    double ref = o.b[1];
    for (int c = 0; c < s.cin; c++)
        for (int ky = 0; ky < s.k; ky++)
            for (int kx = 0; kx < s.k; kx++) {
                int iy = ky - s.pad, ix = kx - s.pad;
                if (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w)
                    ref += (double)o.w[((1 * s.cin + c) * s.k + ky) * s.k + kx] *
                           o.x[(c * s.h + iy) * s.w + ix];
            }
    int P = kn_conv2d_out_h(&s) * kn_conv2d_out_w(&s);
    assert_true(fabs(o.out[1 * P] - ref) < 1e-5);
    float *dx = zeros(nx), *dw = zeros(nw), *db = zeros(s.cout);
    kn_conv2d_backward_input_cpu(dx, o.col, o.r, o.w, B, &s);
    kn_conv2d_backward_weight_cpu(dw, db, o.col, o.r, o.x, B, &s);
    check_grad("dx", o.x, nx, dx, conv_obj, &o);
    check_grad("dw", o.w, nw, dw, conv_obj, &o);
    check_grad("db", o.b, s.cout, db, conv_obj, &o);
    free(o.x), free(o.w), free(o.b), free(o.out), free(o.col), free(o.r);
    free(dx), free(dw), free(db);
}

static void test_conv2d(void **state)
{
    (void)state;
    kn_conv2d_shape a = {2, 5, 5, 3, 3, 1, 1}; /* VGG-style 3x3, stride 1, pad 1 */
    kn_conv2d_shape b = {2, 6, 5, 2, 3, 2, 1}; /* stride 2, odd width */
    kn_conv2d_shape c = {1, 4, 4, 2, 2, 1, 0}; /* even kernel, no padding */
    assert_int_equal(kn_conv2d_out_h(&b), 3);
    assert_int_equal(kn_conv2d_out_w(&b), 3);
    conv_case(2, a);
    conv_case(2, b);
    conv_case(1, c);
}

/* The input pixel a column entry (r, p) reads, 0 outside the image (padding). */
static float conv_tap(const float *x, const kn_conv2d_shape *s, int r, int p)
{
    int K = s->k, wo = kn_conv2d_out_w(s);
    int c = r / (K * K), ky = r / K % K, kx = r % K, oy = p / wo, ox = p % wo;
    int iy = oy * s->stride - s->pad + ky, ix = ox * s->stride - s->pad + kx;
    return iy >= 0 && iy < s->h && ix >= 0 && ix < s->w ? x[(c * s->h + iy) * s->w + ix] : 0.0f;
}

/* Conv2d's order of additions written plainly, per output element: the bias, then w[co][r]
 * times the tap for r = (c K + ky) K + kx ascending; per weight: the sum over positions p
 * ascending from 0, then added to dw. The blocked, vectorised kernel gives exactly these bits,
 * on shapes that reach its blocks and tails (channels not a multiple of 4, R not of 8). */
static void test_conv2d_order(void **state)
{
    (void)state;
    const kn_conv2d_shape shapes[] = {
        {3, 7, 6, 5, 3, 1, 1}, {2, 9, 7, 9, 3, 2, 1}, {4, 5, 5, 8, 2, 1, 0}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const kn_conv2d_shape *s = &shapes[k];
        int B = 2, P = kn_conv2d_out_h(s) * kn_conv2d_out_w(s), R = s->cin * s->k * s->k;
        size_t nx = (size_t)B * s->cin * s->h * s->w, no = (size_t)B * s->cout * P;
        float *x = rnd(nx, 1), *w = rnd((size_t)s->cout * R, 1), *b = rnd((size_t)s->cout, 1);
        float *d = rnd(no, 1), *dw0 = rnd((size_t)s->cout * R, 1), *db0 = rnd((size_t)s->cout, 1);
        float *out = zeros(no), *want = zeros(no), *col = zeros(kn_conv2d_col_floats(s));
        float *dw = zeros((size_t)s->cout * R), *dww = zeros((size_t)s->cout * R);
        float *db = zeros((size_t)s->cout), *dbw = zeros((size_t)s->cout);
        for (int n = 0; n < B; n++) {
            const float *xn = x + (size_t)n * s->cin * s->h * s->w;
            for (int co = 0; co < s->cout; co++)
                for (int p = 0; p < P; p++) {
                    float t = b[co];
                    for (int r = 0; r < R; r++)
                        t += w[co * R + r] * conv_tap(xn, s, r, p);
                    want[((size_t)n * s->cout + co) * P + p] = t;
                }
        }
        memcpy(dww, dw0, (size_t)s->cout * R * sizeof *dww);
        memcpy(dbw, db0, (size_t)s->cout * sizeof *dbw);
        for (int n = 0; n < B; n++) {
            const float *xn = x + (size_t)n * s->cin * s->h * s->w;
            const float *dn = d + (size_t)n * s->cout * P;
            for (int co = 0; co < s->cout; co++) {
                float sb = 0.0f;
                for (int p = 0; p < P; p++)
                    sb += dn[co * P + p];
                dbw[co] += sb;
                for (int r = 0; r < R; r++) {
                    float acc = 0.0f;
                    for (int p = 0; p < P; p++)
                        acc += dn[co * P + p] * conv_tap(xn, s, r, p);
                    dww[co * R + r] += acc;
                }
            }
        }
        kn_conv2d_forward_cpu(out, col, x, w, b, B, s);
        memcpy(dw, dw0, (size_t)s->cout * R * sizeof *dw);
        memcpy(db, db0, (size_t)s->cout * sizeof *db);
        kn_conv2d_backward_weight_cpu(dw, db, col, d, x, B, s);
        assert_memory_equal(out, want, no * sizeof *out);
        assert_memory_equal(dw, dww, (size_t)s->cout * R * sizeof *dw);
        assert_memory_equal(db, dbw, (size_t)s->cout * sizeof *db);
        free(x), free(w), free(b), free(d), free(dw0), free(db0), free(out), free(want);
        free(col), free(dw), free(dww), free(db), free(dbw);
    }
}

typedef struct {
    float *x, *out, *r;
} pool_op;

static double pool_obj(void *p)
{
    pool_op *o = p;
    kn_maxpool2d_forward_cpu(o->out, o->x, 2, 2, 4, 6, 2, 2);
    return dot(o->out, o->r, 2 * 2 * 2 * 3);
}

static void test_maxpool2d(void **state)
{
    (void)state;
    size_t nx = 2 * 2 * 4 * 6, nout = 2 * 2 * 2 * 3;
    pool_op o = {zeros(nx), zeros(nout), rnd(nout, 1)};
    /* distinct values at least 0.01 apart, shuffled, so no window has a near-tie */
    for (size_t i = 0; i < nx; i++)
        o.x[i] = (float)((i * 37) % nx) * 0.01f;
    pool_obj(&o);
    assert_true(o.out[0] == fmaxf(fmaxf(o.x[0], o.x[1]), fmaxf(o.x[6], o.x[7])));
    float *dx = zeros(nx);
    kn_maxpool2d_backward_cpu(dx, o.r, o.x, 2, 2, 4, 6, 2, 2);
    check_grad("dx", o.x, nx, dx, pool_obj, &o);
    /* ties go to the first element of the window */
    float tie[4] = {1, 1, 1, 1}, d = 1, dtie[4], m;
    kn_maxpool2d_forward_cpu(&m, tie, 1, 1, 2, 2, 2, 2);
    kn_maxpool2d_backward_cpu(dtie, &d, tie, 1, 1, 2, 2, 2, 2);
    assert_true(m == 1 && dtie[0] == 1 && dtie[1] == 0 && dtie[2] == 0 && dtie[3] == 0);
    free(o.x), free(o.out), free(o.r), free(dx);
}

/* --- optimizers ------------------------------------------------------------------------- */

static void test_sgd(void **state)
{
    (void)state;
    float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, 0.25f}, v[2] = {0, 0};
    kn_sgd_step_cpu(p, g, v, 2, 0.1f, 0.9f, 0.01f);
    /* v = g + wd*p = 0.51; p = 1 - 0.1*0.51 */
    assert_true(fabs(v[0] - 0.51f) < 1e-6 && fabs(p[0] - 0.949f) < 1e-6);
    kn_sgd_step_cpu(p, g, v, 2, 0.1f, 0.9f, 0.01f);
    /* v = 0.9*0.51 + 0.5 + 0.01*0.949 */
    float v2 = 0.9f * 0.51f + 0.5f + 0.01f * 0.949f;
    assert_true(fabs(v[0] - v2) < 1e-6 && fabs(p[0] - (0.949f - 0.1f * v2)) < 1e-6);
}

static void test_adamw(void **state)
{
    (void)state;
    float p[2] = {1.0f, -1.0f}, g[2] = {0.2f, -0.4f}, m[2] = {0}, v[2] = {0};
    kn_adamw_step_cpu(p, g, m, v, 2, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
    /* step 1: m_hat = g, v_hat = g^2, so the update is lr * (sign(g) + wd * p) */
    assert_true(fabs(p[0] - (1.0f - 0.01f * (1.0f + 0.1f))) < 1e-6);
    assert_true(fabs(p[1] - (-1.0f - 0.01f * (-1.0f - 0.1f))) < 1e-6);
    assert_true(fabs(m[0] - 0.02f) < 1e-6 && fabs(v[1] - 0.00016f) < 1e-8);
    kn_optim_cfg d = kn_optim_adamw_default();
    assert_int_equal(d.kind, KN_OPT_ADAMW);
    assert_int_equal(kn_optim_state_per_param(KN_OPT_ADAMW), 2);
    assert_int_equal(kn_optim_state_per_param(KN_OPT_SGD), 1);
}

/* The optimizers run their loops eight elements at a time in vectors: every element must still
 * get exactly the formula's operations in its order, as written plainly here (the tail after
 * the last eight, zero gradients and large ones included), over several steps. */
static void test_optimizer_order(void **state)
{
    (void)state;
    enum { N = 1003, STEPS = 6 };
    float *p = malloc(4 * N * sizeof(float)), *q = malloc(4 * N * sizeof(float));
    float *g = malloc(N * sizeof(float));
    assert_non_null(p);
    assert_non_null(q);
    assert_non_null(g);
    for (int i = 0; i < N; i++)
        p[i] = frand();
    memset(p + N, 0, 3 * N * sizeof(float));
    memcpy(q, p, 4 * N * sizeof(float));
    float *pm = p + N, *pv = p + 2 * N, *qm = q + N, *qv = q + 2 * N;
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++)
            g[i] = i % 97 == 0 ? 0.0f : frand() * (t % 2 ? 1e-3f : 30.0f);
        kn_adamw_step_cpu(p, g, pm, pv, N, lr, b1, b2, eps, wd, t);
        float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
        for (int i = 0; i < N; i++) {
            qm[i] = b1 * qm[i] + (1.0f - b1) * g[i];
            qv[i] = b2 * qv[i] + (1.0f - b2) * g[i] * g[i];
            float mhat = qm[i] / c1, vhat = qv[i] / c2;
            q[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * q[i]);
        }
        assert_memory_equal(p, q, 3 * N * sizeof(float));
    }
    /* SGD with momentum on the same parameters, velocity in the fourth block */
    float *sv = p + 3 * N, *tv = q + 3 * N;
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++)
            g[i] = frand();
        kn_sgd_step_cpu(p, g, sv, N, 0.05f, 0.9f, 1e-3f);
        for (int i = 0; i < N; i++) {
            float grad = g[i] + 1e-3f * q[i];
            tv[i] = 0.9f * tv[i] + grad;
            q[i] -= 0.05f * tv[i];
        }
        assert_memory_equal(p, q, 4 * N * sizeof(float));
    }
    free(p);
    free(q);
    free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_linear_order),
        cmocka_unit_test(test_optimizer_order),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_relu),
        cmocka_unit_test(test_residual),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_conv2d_order),
        cmocka_unit_test(test_maxpool2d),
        cmocka_unit_test(test_sgd),
        cmocka_unit_test(test_adamw),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
