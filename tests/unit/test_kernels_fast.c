/*
 * kernels fast path: the CPU fast kernels (BLAS products, threaded and vectorised elementwise
 * kernels) against the reference kernels, op by op and for whole training steps, within a stated
 * tolerance (they add in another order, so not bit for bit); the spec's "cpu_kernels" choice
 * reaching a stage's context; the thread count and its errors, the count on a thread other than
 * the one that set it, and a forked child computing on threads of its own. Without BLAS in the
 * build the fast products are the reference's, and a stage runs the reference throughout.
 *
 * Tolerance: every element within TOL * (1 + the largest magnitude of its tensor), TOL = 2e-5
 * for one op (sums of at most a few hundred float products), 1e-4 for a whole training step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/conv2d.h"
#include "kernels/crossentropy.h"
#include "kernels/device.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/model.h"
#include "kernels/optim.h"
#include "kernels/stage.h"
#include "kernels/threads_cpu.h"

#define OP_TOL 2e-5
#define STEP_TOL 1e-4

static uint64_t rng_state = 1234;

static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) / 8388608.0 - 1.0);
}

static float *rnd(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

static float *copy_of(const float *src, size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    memcpy(p, src, n * sizeof *p);
    return p;
}

/* every element of `got` within tol * (1 + max |want|) of `want` */
static void assert_close(const float *got, const float *want, size_t n, double tol,
                         const char *what)
{
    double scale = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)want[i]));
    double bound = tol * (1.0 + scale);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= bound)) {
            fprintf(stderr, "%s: element %zu is %.9g, reference %.9g (bound %.3g)\n", what, i,
                    (double)got[i], (double)want[i], bound);
            fail();
        }
    }
}

/* Odd sizes on purpose: the BLAS's edge cases, not only its whole blocks. */
static void linear_case(int N, int IC, int OC, bool bias)
{
    float *x = rnd((size_t)N * IC), *w = rnd((size_t)OC * IC), *b = bias ? rnd(OC) : NULL;
    float *d = rnd((size_t)N * OC);
    float *o_ref = rnd((size_t)N * OC), *o_fast = rnd((size_t)N * OC);
    kn_linear_forward_cpu(o_ref, x, w, b, N, IC, OC);
    kn_linear_forward_fast(o_fast, x, w, b, N, IC, OC);
    assert_close(o_fast, o_ref, (size_t)N * OC, OP_TOL, "linear forward");

    float *dx_ref = rnd((size_t)N * IC), *dx_fast = rnd((size_t)N * IC);
    kn_linear_backward_input_cpu(dx_ref, d, w, N, IC, OC);
    kn_linear_backward_input_fast(dx_fast, d, w, N, IC, OC);
    assert_close(dx_fast, dx_ref, (size_t)N * IC, OP_TOL, "linear input gradient");

    /* the weight gradient accumulates: start both from the same nonzero values */
    float *dw_ref = rnd((size_t)OC * IC), *dw_fast = copy_of(dw_ref, (size_t)OC * IC);
    float *db_ref = bias ? rnd(OC) : NULL, *db_fast = bias ? copy_of(db_ref, OC) : NULL;
    kn_linear_backward_weight_cpu(dw_ref, db_ref, d, x, N, IC, OC);
    kn_linear_backward_weight_fast(dw_fast, db_fast, d, x, N, IC, OC);
    assert_close(dw_fast, dw_ref, (size_t)OC * IC, OP_TOL, "linear weight gradient");
    if (bias)
        assert_close(db_fast, db_ref, OC, OP_TOL, "linear bias gradient");
    free(x), free(w), free(b), free(d), free(o_ref), free(o_fast), free(dx_ref), free(dx_fast);
    free(dw_ref), free(dw_fast), free(db_ref), free(db_fast);
}

static void test_linear_fast(void **state)
{
    (void)state;
    linear_case(1, 1, 1, true);
    linear_case(7, 13, 5, true);
    linear_case(33, 64, 96, false);
    linear_case(64, 200, 129, true);
}

static void attention_case(int B, int T, int C, int NH)
{
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = rnd(nqkv), *d = rnd(nout);
    float *o_ref = rnd(nout), *o_fast = rnd(nout), *a_ref = rnd(natt), *a_fast = rnd(natt);
    kn_attention_forward_cpu(o_ref, a_ref, qkv, B, T, C, NH);
    kn_attention_forward_fast(o_fast, a_fast, qkv, B, T, C, NH);
    assert_close(a_fast, a_ref, natt, OP_TOL, "attention probabilities");
    assert_close(o_fast, o_ref, nout, OP_TOL, "attention output");
    for (size_t i = 0; i < natt; i++) /* the causal half is exactly zero in both */
        if (a_ref[i] == 0.0f)
            assert_true(a_fast[i] == 0.0f);

    float *ws = rnd(kn_attention_workspace_floats(B, T, C, NH, 0));
    float *g_ref = rnd(nqkv), *g_fast = rnd(nqkv);
    kn_attention_backward_cpu(g_ref, ws, d, qkv, a_ref, B, T, C, NH);
    kn_attention_backward_fast(g_fast, ws, d, qkv, a_ref, B, T, C, NH);
    assert_close(g_fast, g_ref, nqkv, OP_TOL, "attention gradient");
    free(qkv), free(d), free(o_ref), free(o_fast), free(a_ref), free(a_fast), free(ws);
    free(g_ref), free(g_fast);
}

static void test_attention_fast(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    /* one thread: each head's products on the BLAS in turn; three: whole heads in parallel
     * (6 heads over 3 workspaces, 2 over 2, 8 over 3: a workspace serving heads j, j + 3, ...) */
    for (int threads = 1; threads <= 3; threads += 2) {
        assert_int_equal(kn_cpu_set_threads(threads, "threads", &err), SC_OK);
        attention_case(1, 1, 4, 1);
        attention_case(2, 7, 12, 3);
        attention_case(1, 33, 64, 2);
        attention_case(2, 33, 64, 4);
    }
    assert_int_equal(kn_cpu_set_threads(0, "threads", &err), SC_OK);
}

static void conv_case(int B, kn_conv2d_shape s)
{
    int ho = kn_conv2d_out_h(&s), wo = kn_conv2d_out_w(&s);
    size_t nin = (size_t)B * s.cin * s.h * s.w, nout = (size_t)B * s.cout * ho * wo;
    size_t nw = (size_t)s.cout * s.cin * s.k * s.k;
    float *x = rnd(nin), *w = rnd(nw), *b = rnd(s.cout), *d = rnd(nout);
    float *col = rnd(kn_conv2d_col_floats(&s));
    float *o_ref = rnd(nout), *o_fast = rnd(nout);
    kn_conv2d_forward_cpu(o_ref, col, x, w, b, B, &s);
    kn_conv2d_forward_fast(o_fast, col, x, w, b, B, &s);
    assert_close(o_fast, o_ref, nout, OP_TOL, "conv2d forward");
    float *dx_ref = rnd(nin), *dx_fast = rnd(nin);
    kn_conv2d_backward_input_cpu(dx_ref, col, d, w, B, &s);
    kn_conv2d_backward_input_fast(dx_fast, col, d, w, B, &s);
    assert_close(dx_fast, dx_ref, nin, OP_TOL, "conv2d input gradient");
    float *dw_ref = rnd(nw), *dw_fast = copy_of(dw_ref, nw);
    float *db_ref = rnd(s.cout), *db_fast = copy_of(db_ref, s.cout);
    kn_conv2d_backward_weight_cpu(dw_ref, db_ref, col, d, x, B, &s);
    kn_conv2d_backward_weight_fast(dw_fast, db_fast, col, d, x, B, &s);
    assert_close(dw_fast, dw_ref, nw, OP_TOL, "conv2d weight gradient");
    assert_close(db_fast, db_ref, s.cout, OP_TOL, "conv2d bias gradient");
    free(x), free(w), free(b), free(d), free(col), free(o_ref), free(o_fast), free(dx_ref);
    free(dx_fast), free(dw_ref), free(dw_fast), free(db_ref), free(db_fast);
}

static void test_conv2d_fast(void **state)
{
    (void)state;
    conv_case(2, (kn_conv2d_shape){3, 9, 7, 5, 3, 1, 1});
    conv_case(1, (kn_conv2d_shape){4, 8, 8, 6, 3, 2, 0});
}

/* Elementwise kernels at the sizes of a real step, so that several threads share them (the
 * test runs them with 3 threads, the pool's case whatever the machine). */
static void elementwise_cases(void)
{
    size_t n = 3 * 16384 + 5; /* several ranges and a tail */
    float *x = rnd(n), *d = rnd(n), *ref = rnd(n), *fast = rnd(n);
    for (size_t i = 0; i < n; i++)
        x[i] *= 6.0f; /* GELU over [-6, 6): both saturated ends */
    kn_gelu_forward_cpu(ref, x, n);
    kn_gelu_forward_fast(fast, x, n);
    assert_close(fast, ref, n, OP_TOL, "gelu forward");
    kn_gelu_backward_cpu(ref, x, d, n);
    kn_gelu_backward_fast(fast, x, d, n);
    assert_close(fast, ref, n, OP_TOL, "gelu backward");
    kn_residual_forward_cpu(ref, x, d, n);
    kn_residual_forward_fast(fast, x, d, n);
    assert_memory_equal(fast, ref, n * sizeof *ref); /* the reference's own loop */

    /* AdamW: the reference's loop on each range, so the same bits */
    float *p1 = rnd(n), *p2 = copy_of(p1, n), *m1 = rnd(n), *m2 = copy_of(m1, n);
    float *v1 = rnd(n), *v2;
    for (size_t i = 0; i < n; i++)
        v1[i] = fabsf(v1[i]);
    v2 = copy_of(v1, n);
    kn_adamw_step_cpu(p1, d, m1, v1, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 3);
    kn_adamw_step_fast(p2, d, m2, v2, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 3);
    assert_memory_equal(p2, p1, n * sizeof *p1);
    assert_memory_equal(m2, m1, n * sizeof *m1);
    assert_memory_equal(v2, v1, n * sizeof *v1);
    free(x), free(d), free(ref), free(fast), free(p1), free(p2), free(m1), free(m2), free(v1);
    free(v2);

    /* LayerNorm: rows of an odd width, the input gradient and parameter gradients accumulate */
    int N = 301, C = 77;
    size_t nc = (size_t)N * C;
    float *in = rnd(nc), *w = rnd(C), *b = rnd(C), *dout = rnd(nc);
    float *o1 = rnd(nc), *o2 = rnd(nc), *mean1 = rnd(N), *mean2 = rnd(N), *rs1 = rnd(N);
    float *rs2 = rnd(N);
    kn_layernorm_forward_cpu(o1, mean1, rs1, in, w, b, N, C);
    kn_layernorm_forward_fast(o2, mean2, rs2, in, w, b, N, C);
    assert_close(o2, o1, nc, OP_TOL, "layernorm forward");
    assert_close(mean2, mean1, N, OP_TOL, "layernorm mean");
    assert_close(rs2, rs1, N, OP_TOL, "layernorm rstd");
    float *dx1 = rnd(nc), *dx2 = copy_of(dx1, nc), *dw1 = rnd(C), *dw2 = copy_of(dw1, C);
    float *db1 = rnd(C), *db2 = copy_of(db1, C);
    kn_layernorm_backward_cpu(dx1, dw1, db1, dout, in, w, mean1, rs1, N, C);
    kn_layernorm_backward_fast(dx2, dw2, db2, dout, in, w, mean1, rs1, N, C);
    assert_close(dx2, dx1, nc, OP_TOL, "layernorm input gradient");
    assert_close(dw2, dw1, C, 1e-4, "layernorm weight gradient"); /* sums of 301 terms */
    assert_close(db2, db1, C, 1e-4, "layernorm bias gradient");
    free(in), free(w), free(b), free(dout), free(o1), free(o2), free(mean1), free(mean2);
    free(rs1), free(rs2), free(dx1), free(dx2), free(dw1), free(dw2), free(db1), free(db2);

    /* cross-entropy: logits spread wide (probabilities that underflow), aliasing as block.c */
    int V = 1031;
    N = 37;
    size_t nv = (size_t)N * V;
    float *z1 = rnd(nv), *z2, *l1 = rnd(N), *l2 = rnd(N), *g1 = rnd(nv), *g2 = rnd(nv);
    int32_t *tg = malloc((size_t)N * sizeof *tg);
    assert_non_null(tg);
    for (size_t i = 0; i < nv; i++)
        z1[i] *= 40.0f;
    for (int i = 0; i < N; i++)
        tg[i] = (int32_t)((i * 389) % V);
    z2 = copy_of(z1, nv);
    kn_crossentropy_forward_cpu(l1, z1, z1, tg, N, V);
    kn_crossentropy_forward_fast(l2, z2, z2, tg, N, V);
    assert_close(l2, l1, N, OP_TOL, "cross-entropy losses");
    assert_close(z2, z1, nv, OP_TOL, "cross-entropy probabilities");
    kn_crossentropy_backward_cpu(g1, z1, tg, 0.25f, N, V);
    kn_crossentropy_backward_fast(g2, z1, tg, 0.25f, N, V);
    assert_memory_equal(g2, g1, nv * sizeof *g1);
    free(z1), free(z2), free(l1), free(l2), free(g1), free(g2), free(tg);
}

static void test_elementwise_fast(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    elementwise_cases(); /* the default threads */
    assert_int_equal(kn_cpu_set_threads(3, "threads", &err), SC_OK);
    elementwise_cases();
    assert_int_equal(kn_cpu_set_threads(1, "threads", &err), SC_OK);
    elementwise_cases();
    assert_int_equal(kn_cpu_set_threads(0, "threads", &err), SC_OK);
}

/* --- whole training steps ------------------------------------------------------------------- */

static kn_model *model_from(const char *text)
{
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = kn_model_parse(&m, "model.json", text, strlen(text), &err);
    if (rc != SC_OK)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, SC_OK);
    return m;
}

/* One forward, backward and AdamW step of the whole model on a fixed batch of n samples;
 * returns the loss, the gradients and the updated parameters (malloc'd). */
static float train_step(const kn_model *m, int n, float **grads, float **params)
{
    sc_err err;
    sc_err_clear(&err);
    kn_stage *st = NULL;
    assert_int_equal(
        kn_stage_new(&st, m, 0, kn_model_block_count(m) - 1, (kn_device){KN_DEV_CPU, 0}, n, &err),
        SC_OK);
    const kn_block *b0 = kn_model_block(m, 0);
    size_t nin = b0->in_floats * (size_t)n, ntg = (size_t)kn_model_targets_per_sample(m) * n;
    void *in = malloc(nin * 4);
    int32_t *tg = malloc(ntg * 4);
    assert_non_null(in);
    assert_non_null(tg);
    uint64_t r = 99;
    for (size_t i = 0; i < nin; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        if (b0->in_tokens)
            ((int32_t *)in)[i] = (int32_t)((r >> 33) % (uint64_t)b0->V);
        else
            ((float *)in)[i] = (float)((r >> 33) % 2001) / 1000.0f - 1.0f;
    }
    for (size_t i = 0; i < ntg; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        tg[i] = (int32_t)((r >> 33) % (uint64_t)kn_model_classes(m));
    }
    float loss;
    assert_int_equal(kn_stage_forward_host(st, 0, in, tg, n, &err), SC_OK);
    assert_int_equal(kn_stage_loss(st, 0, &loss, &err), SC_OK);
    assert_int_equal(kn_stage_backward_host(st, 0, NULL, &err), SC_OK);
    size_t np = kn_stage_param_count(st);
    *grads = copy_of(kn_stage_grads_device(st), np);
    assert_int_equal(kn_stage_step(st, &err), SC_OK);
    *params = copy_of(kn_stage_params_device(st), np);
    kn_stage_destroy(&st);
    free(in);
    free(tg);
    return loss;
}

static void step_case(const char *fast_spec, const char *reference_spec, int n)
{
    kn_model *mf = model_from(fast_spec), *mr = model_from(reference_spec);
    assert_false(kn_model_cpu_reference(mf));
    assert_true(kn_model_cpu_reference(mr));
    size_t np = kn_model_param_count(mf);
    float *gf, *pf, *gr, *pr;
    float lf = train_step(mf, n, &gf, &pf), lr = train_step(mr, n, &gr, &pr);
    assert_close(&lf, &lr, 1, STEP_TOL, "loss");
    assert_close(gf, gr, np, STEP_TOL, "gradients");
    /* AdamW's first step moves each weight by about lr * sign(g): compare the updates where
     * the gradient is clearly nonzero (near zero the sign itself is rounding) */
    for (size_t i = 0; i < np; i++)
        if (fabsf(gr[i]) > 1e-3f)
            assert_true(fabsf(pf[i] - pr[i]) <= 1e-5f);
    free(gf), free(pf), free(gr), free(pr);
    kn_model_destroy(&mf);
    kn_model_destroy(&mr);
}

#define GPT(kernels)                                                                               \
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", \"vocab\": 37, "        \
    "\"seq_len\": 19, \"layers\": 2, \"width\": 24, \"heads\": 3" kernels "}"
#define VGG(kernels)                                                                               \
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"vgg\", \"config\": "           \
    "\"vgg11\", \"image\": [3, 32, 32], \"classes\": 5, \"width_divisor\": 16" kernels "}"

static void test_training_step_fast(void **state)
{
    (void)state;
    step_case(GPT(""), GPT(", \"cpu_kernels\": \"reference\""), 3);
    step_case(GPT(", \"cpu_kernels\": \"fast\""), GPT(", \"cpu_kernels\": \"reference\""), 1);
    step_case(VGG(""), VGG(", \"cpu_kernels\": \"reference\""), 2);
}

/* Two stages of one process computing at the same time (as a worker's profiler beside its
 * runner, or the stages of a one-process pipeline): the BLAS called from two threads and the
 * pool refused to the second caller give the same bits as the same steps run one after the
 * other (the fast path is deterministic for given shapes and threads). */
typedef struct {
    const kn_model *m;
    int n;
    float loss, *grads, *params;
} step_job;

static void *step_thread(void *p)
{
    step_job *j = p;
    for (int r = 0; r < 3; r++) { /* long enough to overlap */
        free(j->grads);
        free(j->params);
        j->grads = j->params = NULL;
        j->loss = train_step(j->m, j->n, &j->grads, &j->params);
    }
    return NULL;
}

static void test_concurrent_stages(void **state)
{
    (void)state;
    kn_model *m = model_from(GPT(""));
    size_t np = kn_model_param_count(m);
    step_job seq = {m, 3, 0, NULL, NULL}, par[2] = {{m, 3, 0, NULL, NULL}, {m, 3, 0, NULL, NULL}};
    step_thread(&seq);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, step_thread, &par[i]), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_true(par[i].loss == seq.loss);
        assert_memory_equal(par[i].grads, seq.grads, np * sizeof(float));
        assert_memory_equal(par[i].params, seq.params, np * sizeof(float));
        free(par[i].grads);
        free(par[i].params);
    }
    free(seq.grads);
    free(seq.params);
    kn_model_destroy(&m);
}

/* The spec's choice reaches the stage's context; a bad value names the valid ones. */
static void test_cpu_kernels_choice(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    kn_model *m = model_from(GPT(", \"cpu_kernels\": \"reference\""));
    kn_stage *st = NULL;
    assert_int_equal(kn_stage_new(&st, m, 0, 1, (kn_device){KN_DEV_CPU, 0}, 2, &err), SC_OK);
    assert_int_equal(kn_ctx_cpu_kernels(kn_stage_ctx(st)), KN_CPU_KERNELS_REFERENCE);
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
    m = model_from(GPT(""));
    assert_int_equal(kn_stage_new(&st, m, 0, 1, (kn_device){KN_DEV_CPU, 0}, 2, &err), SC_OK);
    assert_int_equal(kn_ctx_cpu_kernels(kn_stage_ctx(st)),
                     kn_built_with_blas() ? KN_CPU_KERNELS_FAST : KN_CPU_KERNELS_REFERENCE);
    kn_stage_destroy(&st);
    kn_model_destroy(&m);

    const char *bad = GPT(", \"cpu_kernels\": \"blas\"");
    assert_int_equal(kn_model_parse(&m, "model.json", bad, strlen(bad), &err), SC_ERR_INVALID);
    assert_null(m);
    assert_non_null(strstr(err.msg, "cpu_kernels"));
    assert_non_null(strstr(err.msg, "reference"));
}

static void test_threads(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    int cores = kn_cpu_cores_available();
    assert_true(cores >= 1 && cores <= KN_CPU_THREADS_MAX);
    assert_int_equal(kn_cpu_threads(), cores); /* the default, nothing set yet */
    assert_int_equal(kn_cpu_set_threads(3, "--threads", &err), SC_OK);
    assert_int_equal(kn_cpu_threads(), 3);
    /* results stay within tolerance whatever the thread count */
    linear_case(64, 200, 129, true);
    attention_case(2, 33, 64, 4);
    assert_int_equal(kn_cpu_set_threads(0, "--threads", &err), SC_OK);
    assert_int_equal(kn_cpu_threads(), cores);
    assert_int_equal(kn_cpu_set_threads(-1, "--threads", &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--threads"));
    assert_non_null(strstr(err.msg, "valid: 1 to 1024"));
    assert_int_equal(kn_cpu_set_threads(KN_CPU_THREADS_MAX + 1, "--threads", &err), SC_ERR_INVALID);
    assert_int_equal(kn_cpu_threads(), cores); /* unchanged by the refusals */
}

/* A thread other than the one that set the count runs the BLAS with the count set: OpenBLAS's
 * OpenMP variant would otherwise take the thread's OpenMP default (every core). */
typedef struct {
    int blas_threads;
} product_job;

static void *product_thread(void *p)
{
    product_job *j = p;
    float *x = rnd(64 * 200), *w = rnd(129 * 200), *o = rnd(64 * 129);
    kn_linear_forward_fast(o, x, w, NULL, 64, 200, 129);
    j->blas_threads = kn_cpu_blas_threads();
    free(x), free(w), free(o);
    return NULL;
}

static void test_threads_on_other_thread(void **state)
{
    (void)state;
    if (!kn_built_with_blas())
        skip();
    sc_err err;
    sc_err_clear(&err);
    for (int n = 1; n <= 2; n++) {
        assert_int_equal(kn_cpu_set_threads(n, "--threads", &err), SC_OK);
        product_job j = {0};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, product_thread, &j), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        assert_int_equal(j.blas_threads, n);
    }
    assert_int_equal(kn_cpu_set_threads(0, "--threads", &err), SC_OK);
}

/* A process that forks without exec after computing on several threads: the child computes on
 * its own threads (the parent's, pool or OpenMP's, are not in it) and gets the same results. */
static void fill_squares(void *arg, size_t begin, size_t end)
{
    float *v = arg;
    for (size_t i = begin; i < end; i++)
        v[i] = (float)(i % 1000) * (float)(i % 1000);
}

static int child_computes(void) /* 0 when every result is right */
{
    size_t n = 1 << 20;
    float *v = calloc(n, sizeof *v);
    if (v == NULL)
        return 1;
    kn_cpu_parallel_for(n, 1024, fill_squares, v);
    for (size_t i = 0; i < n; i++)
        if (v[i] != (float)(i % 1000) * (float)(i % 1000)) {
            free(v);
            return 2;
        }
    free(v);
    int N = 64, IC = 200, OC = 129;
    float *x = rnd((size_t)N * IC), *w = rnd((size_t)OC * IC), *o1 = rnd((size_t)N * OC),
          *o2 = rnd((size_t)N * OC);
    kn_linear_forward_cpu(o1, x, w, NULL, N, IC, OC);
    kn_linear_forward_fast(o2, x, w, NULL, N, IC, OC);
    int rc = 0;
    for (size_t i = 0; i < (size_t)N * OC && rc == 0; i++)
        if (!(fabsf(o2[i] - o1[i]) <= 1e-3f * (1.0f + fabsf(o1[i]))))
            rc = 3;
    free(x), free(w), free(o1), free(o2);
    return rc;
}

static void test_fork_after_computing(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_cpu_set_threads(2, "--threads", &err), SC_OK);
    assert_int_equal(child_computes(), 0); /* the parent's threads are running now */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(120); /* a child stuck waiting for threads that are not there dies, and fails */
        _exit(child_computes());
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status))
        fprintf(stderr, "fork child: ended by signal %d\n", WTERMSIG(status));
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(child_computes(), 0); /* and the parent's threads still work */
    assert_int_equal(kn_cpu_set_threads(0, "--threads", &err), SC_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads), /* first: it checks the default before any setting */
        cmocka_unit_test(test_linear_fast),
        cmocka_unit_test(test_attention_fast),
        cmocka_unit_test(test_conv2d_fast),
        cmocka_unit_test(test_elementwise_fast),
        cmocka_unit_test(test_training_step_fast),
        cmocka_unit_test(test_cpu_kernels_choice),
        cmocka_unit_test(test_concurrent_stages),
        cmocka_unit_test(test_threads_on_other_thread),
        cmocka_unit_test(test_fork_after_computing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
