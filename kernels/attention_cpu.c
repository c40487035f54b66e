/*
 * Causal multi-head self-attention on the CPU: the reference (the specification of attention.cu,
 * fixed order of additions) and the fast path (each head's products on the BLAS, its softmax
 * rows with a vector exp; with several threads, whole heads in parallel on a one-thread BLAS;
 * the reference when the build has no BLAS). Rows of att above the diagonal are stored as zeros, so
 * att is a plain (T,T) matrix per head.
 */
#include "kernels/attention.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/threads_cpu.h"
#include "kernels/vec_cpu.h"

#ifdef SC_HAVE_BLAS
#include <cblas.h>
#endif

size_t kn_attention_workspace_floats(int B, int T, int C, int NH, int on_gpu)
{
    if (!on_gpu)
        return (size_t)T * T; /* d(att) of one head: a row in the reference, all in the fast path */
    /* q, k, v, y/dy and dq, dk, dv in (B,NH,T,hs) layout, plus d(att) (B,NH,T,T) */
    return 7 * (size_t)B * T * C + (size_t)B * NH * T * T;
}

void kn_attention_forward_cpu(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++)
                        s += q[i] * k[i];
                    s *= scale;
                    a[t2] = s;
                    if (s > maxv)
                        maxv = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = expf(a[t2] - maxv);
                    sum += a[t2];
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 < T; t2++)
                    a[t2] = t2 <= t ? a[t2] * inv : 0.0f;
                float *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++)
                    o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    float w = a[t2];
                    for (int i = 0; i < hs; i++)
                        o[i] += w * v[i];
                }
            }
        }
    }
}

void kn_attention_backward_cpu(float *dqkv, float *ws, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH)
{
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    float *datt = ws;
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof *dqkv);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *d = dout + ((size_t)b * T + t) * C + h * hs;
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
                /* out = att @ v: gradients of att's row and of v */
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    float *dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        s += v[i] * d[i];
                        dv[i] += a[t2] * d[i];
                    }
                    datt[t2] = s;
                }
                /* softmax backward: dpre = a * (datt - sum(a * datt)) */
                float dot = 0.0f;
                for (int t2 = 0; t2 <= t; t2++)
                    dot += a[t2] * datt[t2];
                for (int t2 = 0; t2 <= t; t2++) {
                    float dpre = a[t2] * (datt[t2] - dot) * scale;
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    float *dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dpre * k[i];
                        dk[i] += dpre * q[i];
                    }
                }
            }
        }
    }
}

/* --- fast path: the four products of each head on the BLAS ---------------------------------- */

#ifdef SC_HAVE_BLAS
/* One head's (T,T) rows: softmax rows in the forward, the softmax gradient in the
 * backward. */
typedef struct {
    float *g;       /* forward: the scores, turned into probabilities; backward: d(att) */
    const float *a; /* backward: the probabilities */
    float scale;
    int T;
} rows_args;

/* rows [t0, t1): row t keeps t2 <= t (softmax of the scores), the rest 0 */
KN_VECTOR_CLONES
static void softmax_rows(void *p, size_t t0, size_t t1)
{
    const rows_args *r = p;
    int T = r->T;
    for (int t = (int)t0; t < (int)t1; t++) {
        float *a = r->g + (size_t)t * T;
        float maxv = kn_row_max(a, t + 1);
        float sum = kn_exp_shifted(a, a, t + 1, maxv);
        float inv = 1.0f / sum;
        for (int t2 = 0; t2 <= t; t2++)
            a[t2] *= inv;
        for (int t2 = t + 1; t2 < T; t2++)
            a[t2] = 0.0f;
    }
}

/* rows [t0, t1): g = a (g - sum(a g)) scale for t2 <= t, 0 above the diagonal */
KN_VECTOR_CLONES
static void softmax_grad_rows(void *p, size_t t0, size_t t1)
{
    const rows_args *r = p;
    int T = r->T;
    for (int t = (int)t0; t < (int)t1; t++) {
        const float *ar = r->a + (size_t)t * T;
        float *gr = r->g + (size_t)t * T;
        float dot = 0.0f;
        for (int t2 = 0; t2 <= t; t2++)
            dot += ar[t2] * gr[t2];
        for (int t2 = 0; t2 <= t; t2++)
            gr[t2] = ar[t2] * (gr[t2] - dot) * r->scale;
        for (int t2 = t + 1; t2 < T; t2++)
            gr[t2] = 0.0f;
    }
}

/* The heads of a batch, (b, h) pairs. With one thread they run in turn, each product on the
 * BLAS. With several they run on the pool, whole heads per range with the BLAS on one thread: a
 * head's products are too small to split well between threads (OpenBLAS would, at 2 threads, for
 * every one of them), and heads are independent. Forward: a range's pairs in turn, softmax rows
 * in place. */
typedef struct {
    float *out, *att, *dqkv, *ws;
    const float *qkv, *dout, *att_in;
    int T, C, NH;
    size_t pairs, slices; /* backward: B NH heads over `slices` workspaces of (T,T) */
} heads_args;

static void fwd_heads(void *p, size_t i0, size_t i1)
{
    const heads_args *x = p;
    int T = x->T, C = x->C, NH = x->NH, hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (size_t i = i0; i < i1; i++) {
        size_t b = i / (size_t)NH, h = i % (size_t)NH;
        const float *q = x->qkv + b * T * ld + h * hs, *k = q + C, *v = q + 2 * C;
        float *a = x->att + i * T * T;
        /* scores (T,T) = scale q k^T, all of it: the causal half is what the rows keep */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, ld, k, ld, 0.0f, a,
                    T);
        rows_args rows = {a, NULL, 0.0f, T};
        /* on the pool when this runs outside it (one head, or one thread); inside it, inline */
        kn_cpu_parallel_for((size_t)T, 4096 / (size_t)T + 1, softmax_rows, &rows);
        /* out (T,hs) = att v */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, ld, 0.0f,
                    x->out + b * T * C + h * hs, C);
    }
}

/* Backward: slice j of the workspace serves heads j, j + slices, ...; a range runs its slices one
 * after the other, so no two threads share a slice however the pool cuts [0, slices). */
static void bwd_heads(void *p, size_t j0, size_t j1)
{
    const heads_args *x = p;
    int T = x->T, C = x->C, NH = x->NH, hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (size_t j = j0; j < j1; j++) {
        float *g = x->ws + j * T * T; /* (T,T): d(att), then d(scores) */
        for (size_t i = j; i < x->pairs; i += x->slices) {
            size_t b = i / (size_t)NH, h = i % (size_t)NH;
            const float *q = x->qkv + b * T * ld + h * hs, *k = q + C, *v = q + 2 * C;
            const float *a = x->att_in + i * T * T;
            const float *d = x->dout + b * T * C + h * hs;
            float *dq = x->dqkv + b * T * ld + h * hs, *dk = dq + C, *dv = dq + 2 * C;
            /* d(att) (T,T) = dout v^T; dv (T,hs) = att^T dout */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, d, C, v, ld, 0.0f,
                        g, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, d, C, 0.0f,
                        dv, ld);
            /* softmax backward, row by row, with the score scale folded in; above the diagonal
             * att is 0, so is the gradient */
            rows_args rows = {g, a, scale, T};
            kn_cpu_parallel_for((size_t)T, 4096 / (size_t)T + 1, softmax_grad_rows, &rows);
            /* dq (T,hs) = g k; dk (T,hs) = g^T q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, g, T, k, ld,
                        0.0f, dq, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, g, T, q, ld, 0.0f,
                        dk, ld);
        }
    }
}

/* The calling thread's workspace of the heads' slices, grown to `floats` (kept for its next
 * call, freed when the thread ends); NULL when it cannot grow. */
typedef struct {
    float *p;
    size_t cap;
} slices_buf;

static pthread_key_t slices_key;
static pthread_once_t slices_once = PTHREAD_ONCE_INIT;
static bool slices_key_ok;

static void slices_free(void *v)
{
    slices_buf *b = v;
    free(b->p);
    free(b);
}

static void slices_init(void)
{
    slices_key_ok = pthread_key_create(&slices_key, slices_free) == 0;
}

static float *slices_get(size_t floats)
{
    pthread_once(&slices_once, slices_init);
    if (!slices_key_ok)
        return NULL;
    slices_buf *b = pthread_getspecific(slices_key);
    if (b == NULL) {
        b = calloc(1, sizeof *b);
        if (b == NULL)
            return NULL;
        if (pthread_setspecific(slices_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    if (b->cap < floats) {
        float *p = realloc(b->p, floats * sizeof *p);
        if (p == NULL)
            return NULL;
        b->p = p;
        b->cap = floats;
    }
    return b->p;
}
#endif

void kn_attention_forward_fast(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH)
{
#ifdef SC_HAVE_BLAS
    heads_args x = {.out = out, .att = att, .qkv = qkv, .T = T, .C = C, .NH = NH};
    size_t pairs = (size_t)B * NH;
    kn_cpu_blas_use_threads();
    if (kn_cpu_threads() > 1 && pairs > 1) {
        int n = kn_cpu_blas_serial_begin();
        kn_cpu_parallel_for(pairs, 1, fwd_heads, &x);
        kn_cpu_blas_serial_end(n);
    } else {
        fwd_heads(&x, 0, pairs); /* each product on the BLAS's threads */
    }
#else
    kn_attention_forward_cpu(out, att, qkv, B, T, C, NH);
#endif
}

void kn_attention_backward_fast(float *dqkv, float *ws, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH)
{
#ifdef SC_HAVE_BLAS
    size_t pairs = (size_t)B * NH, slices = (size_t)kn_cpu_threads();
    if (slices > pairs)
        slices = pairs;
    float *sws = slices > 1 ? slices_get(slices * T * T) : NULL;
    kn_cpu_blas_use_threads();
    heads_args x = {.dqkv = dqkv, .ws = sws, .qkv = qkv, .dout = dout, .att_in = att};
    x.T = T, x.C = C, x.NH = NH, x.pairs = pairs, x.slices = slices;
    if (sws != NULL) {
        int n = kn_cpu_blas_serial_begin();
        kn_cpu_parallel_for(slices, 1, bwd_heads, &x);
        kn_cpu_blas_serial_end(n);
    } else { /* one slice, the caller's: head after head, each product on the BLAS's threads */
        x.ws = ws, x.slices = 1;
        bwd_heads(&x, 0, 1);
    }
#else
    kn_attention_backward_cpu(dqkv, ws, dout, qkv, att, B, T, C, NH);
#endif
}
