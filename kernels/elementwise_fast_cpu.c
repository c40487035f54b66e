/*
 * The CPU fast path's elementwise kernels: GELU, residual add, LayerNorm, softmax cross-entropy
 * and AdamW, each cut into ranges that run on the process's threads (kn_cpu_parallel_for), GELU
 * and the softmax on eight-float vectors with a vector exp (vec_cpu.h: V8_EXP). Results agree with
 * the references (activation_cpu.c, layernorm_cpu.c, crossentropy_cpu.c, optim_cpu.c) to rounding:
 * the vector exp differs from expf in the last bits, row sums go in eight partial sums, and the
 * LayerNorm parameter gradients are summed column by column. The residual add and AdamW run the
 * references' own loops on each range, so their bits are the references'.
 * Not here: which path runs (block.c and stage.c ask the context), the matrix products (BLAS).
 */
#include <math.h>
#include <string.h>

#include "kernels/activation.h"
#include "kernels/crossentropy.h"
#include "kernels/layernorm.h"
#include "kernels/optim.h"
#include "kernels/threads_cpu.h"
#include "kernels/vec_cpu.h"

/* elements (or, for the row kernels, floats of rows) below which a range is not worth a thread */
#define GRAIN 16384

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

static inline float tanh_by_exp(float u) /* the reference's form, for the tails */
{
    return 1.0f - 2.0f / (1.0f + expf(2.0f * u));
}

/* --- GELU ------------------------------------------------------------------------------------ */

typedef struct {
    float *out;
    const float *inp, *dout;
} gelu_args;

KN_VECTOR_CLONES
static void gelu_fwd_range(void *p, size_t b, size_t e)
{
    const gelu_args *a = p;
    size_t i = b;
    for (; i + 8 <= e; i += 8) {
        kn_v8 x, y;
        V8_LOAD(x, a->inp + i);
        kn_v8 u = GELU_SCALE * (x + 0.044715f * x * x * x);
        kn_v8 e2u;
        V8_EXP(e2u, 2.0f * u);
        kn_v8 th = 1.0f - 2.0f / (1.0f + e2u);
        y = 0.5f * x * (1.0f + th);
        V8_STORE(a->out + i, y);
    }
    for (; i < e; i++) {
        float x = a->inp[i];
        a->out[i] = 0.5f * x * (1.0f + tanh_by_exp(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

KN_VECTOR_CLONES
static void gelu_bwd_range(void *p, size_t b, size_t e)
{
    const gelu_args *a = p;
    size_t i = b;
    for (; i + 8 <= e; i += 8) {
        kn_v8 x, d, y;
        V8_LOAD(x, a->inp + i);
        V8_LOAD(d, a->dout + i);
        kn_v8 u = GELU_SCALE * (x + 0.044715f * x * x * x);
        kn_v8 e2u;
        V8_EXP(e2u, 2.0f * u);
        kn_v8 th = 1.0f - 2.0f / (1.0f + e2u);
        kn_v8 sech2 = 1.0f - th * th;
        y = (0.5f * (1.0f + th) +
             0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x)) *
            d;
        V8_STORE(a->out + i, y);
    }
    for (; i < e; i++) {
        float x = a->inp[i];
        float th = tanh_by_exp(GELU_SCALE * (x + 0.044715f * x * x * x));
        float grad = 0.5f * (1.0f + th) +
                     0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        a->out[i] = grad * a->dout[i];
    }
}

void kn_gelu_forward_fast(float *out, const float *inp, size_t n)
{
    gelu_args a = {out, inp, NULL};
    kn_cpu_parallel_for(n, GRAIN, gelu_fwd_range, &a);
}

void kn_gelu_backward_fast(float *dinp, const float *inp, const float *dout, size_t n)
{
    gelu_args a = {dinp, inp, dout};
    kn_cpu_parallel_for(n, GRAIN, gelu_bwd_range, &a);
}

/* --- residual add ----------------------------------------------------------------------------- */

typedef struct {
    float *out;
    const float *a, *b;
} add_args;

static void add_range(void *p, size_t b, size_t e)
{
    const add_args *a = p;
    kn_residual_forward_cpu(a->out + b, a->a + b, a->b + b, e - b);
}

void kn_residual_forward_fast(float *out, const float *a, const float *b, size_t n)
{
    add_args args = {out, a, b};
    kn_cpu_parallel_for(n, GRAIN, add_range, &args);
}

/* --- LayerNorm -------------------------------------------------------------------------------- */

/* sum of x[0..n) in eight partial sums, added pairwise, then the tail */
static inline float row_sum(const float *x, int n)
{
    kn_v8 s = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        kn_v8 v;
        V8_LOAD(v, x + i);
        s += v;
    }
    float t = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (; i < n; i++)
        t += x[i];
    return t;
}

typedef struct {
    float *out, *mean, *rstd, *dw, *db;
    const float *inp, *w, *b, *dout;
    const float *cmean, *crstd;
    int N, C;
} ln_args;

KN_VECTOR_CLONES
static void ln_fwd_rows(void *p, size_t r0, size_t r1)
{
    const ln_args *a = p;
    int C = a->C;
    for (size_t r = r0; r < r1; r++) {
        const float *x = a->inp + r * C;
        float *o = a->out + r * C;
        float m = row_sum(x, C) / C;
        kn_v8 acc = {0};
        int c = 0;
        for (; c + 8 <= C; c += 8) {
            kn_v8 v;
            V8_LOAD(v, x + c);
            v -= m;
            acc += v * v;
        }
        float var =
            ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        for (; c < C; c++)
            var += (x[c] - m) * (x[c] - m);
        float s = 1.0f / sqrtf(var / C + 1e-5f);
        for (c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * a->w[c] + a->b[c];
        a->mean[r] = m;
        a->rstd[r] = s;
    }
}

void kn_layernorm_forward_fast(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C)
{
    ln_args a = {
        .out = out, .mean = mean, .rstd = rstd, .inp = inp, .w = w, .b = b, .N = N, .C = C};
    kn_cpu_parallel_for((size_t)N, GRAIN / (size_t)(C > 0 ? C : 1) + 1, ln_fwd_rows, &a);
}

/* the input gradient, row by row */
KN_VECTOR_CLONES
static void ln_bwd_rows(void *p, size_t r0, size_t r1)
{
    const ln_args *a = p;
    int C = a->C;
    for (size_t r = r0; r < r1; r++) {
        const float *d = a->dout + r * C, *x = a->inp + r * C, *w = a->w;
        float *dx = a->out + r * C;
        float m = a->cmean[r], s = a->crstd[r];
        float dm = 0.0f, dnm = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s, dnorm = w[c] * d[c];
            dm += dnorm;
            dnm += dnorm * norm;
        }
        dm /= C;
        dnm /= C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            dx[c] += (w[c] * d[c] - dm - norm * dnm) * s;
        }
    }
}

/* the parameter gradients, a range of columns over all rows */
KN_VECTOR_CLONES
static void ln_bwd_cols(void *p, size_t c0, size_t c1)
{
    const ln_args *a = p;
    size_t C = (size_t)a->C;
    for (int r = 0; r < a->N; r++) {
        const float *d = a->dout + r * C, *x = a->inp + r * C;
        float m = a->cmean[r], s = a->crstd[r];
        for (size_t c = c0; c < c1; c++) {
            a->db[c] += d[c];
            a->dw[c] += (x[c] - m) * s * d[c];
        }
    }
}

void kn_layernorm_backward_fast(float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C)
{
    ln_args a = {.out = dinp,
                 .dw = dw,
                 .db = db,
                 .inp = inp,
                 .w = w,
                 .dout = dout,
                 .cmean = mean,
                 .crstd = rstd,
                 .N = N,
                 .C = C};
    size_t per = (size_t)(C > 0 ? C : 1);
    if (dinp != NULL)
        kn_cpu_parallel_for((size_t)N, GRAIN / per + 1, ln_bwd_rows, &a);
    /* columns in ranges of whole cache lines, when the rows are many enough to share */
    if (dw != NULL)
        kn_cpu_parallel_for((size_t)C, (size_t)N * C >= GRAIN ? 16 : (size_t)C + 1, ln_bwd_cols,
                            &a);
}

/* --- softmax cross-entropy -------------------------------------------------------------------- */

typedef struct {
    float *losses, *probs, *dlogits;
    const float *logits, *cprobs;
    const int32_t *targets;
    float dloss;
    int V;
} ce_args;

KN_VECTOR_CLONES
static void ce_fwd_rows(void *p, size_t r0, size_t r1)
{
    const ce_args *a = p;
    int V = a->V;
    for (size_t r = r0; r < r1; r++) {
        const float *z = a->logits + r * V;
        float *pr = a->probs + r * V;
        float zt = z[a->targets[r]]; /* before probs (which may alias logits) overwrite it */
        float maxv = kn_row_max(z, V);
        float sum = kn_exp_shifted(pr, z, V, maxv);
        float inv = 1.0f / sum;
        for (int j = 0; j < V; j++)
            pr[j] *= inv;
        a->losses[r] = logf(sum) - (zt - maxv);
    }
}

static void ce_bwd_rows(void *p, size_t r0, size_t r1)
{
    const ce_args *a = p;
    size_t V = (size_t)a->V;
    for (size_t r = r0; r < r1; r++) {
        const float *pr = a->cprobs + r * V;
        float *d = a->dlogits + r * V;
        for (size_t j = 0; j < V; j++)
            d[j] = pr[j] * a->dloss;
        d[a->targets[r]] = (pr[a->targets[r]] - 1.0f) * a->dloss;
    }
}

void kn_crossentropy_forward_fast(float *losses, float *probs, const float *logits,
                                  const int32_t *targets, int N, int V)
{
    ce_args a = {.losses = losses, .probs = probs, .logits = logits, .targets = targets, .V = V};
    kn_cpu_parallel_for((size_t)N, GRAIN / (size_t)(V > 0 ? V : 1) + 1, ce_fwd_rows, &a);
}

void kn_crossentropy_backward_fast(float *dlogits, const float *probs, const int32_t *targets,
                                   float dloss, int N, int V)
{
    ce_args a = {.dlogits = dlogits, .cprobs = probs, .targets = targets, .dloss = dloss, .V = V};
    kn_cpu_parallel_for((size_t)N, GRAIN / (size_t)(V > 0 ? V : 1) + 1, ce_bwd_rows, &a);
}

/* --- AdamW ------------------------------------------------------------------------------------ */

typedef struct {
    float *p, *m, *v;
    const float *g;
    float lr, beta1, beta2, eps, wd;
    int t;
} adamw_args;

static void adamw_range(void *p, size_t b, size_t e)
{
    const adamw_args *a = p;
    kn_adamw_step_cpu(a->p + b, a->g + b, a->m + b, a->v + b, e - b, a->lr, a->beta1, a->beta2,
                      a->eps, a->wd, a->t);
}

void kn_adamw_step_fast(float *p, const float *g, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float wd, int t)
{
    adamw_args a = {p, m, v, g, lr, beta1, beta2, eps, wd, t};
    kn_cpu_parallel_for(n, 4 * GRAIN, adamw_range, &a);
}
