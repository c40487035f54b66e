/*
 * Causal multi-head self-attention on the CPU: the reference (the specification of attention.cu,
 * fixed order of additions) and the fast path (each head's four products on the BLAS, its
 * softmax rows on the process's threads with a vector exp; the reference when the build has no
 * BLAS). Rows of att above the diagonal are stored as zeros, so att
 * is a plain (T,T) matrix per head.
 */
#include "kernels/attention.h"

#include <math.h>
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
/* One head's (T,T) rows, for the pool: softmax rows in the forward, the softmax gradient in the
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
#endif

void kn_attention_forward_fast(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH)
{
#ifdef SC_HAVE_BLAS
    int hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * ld + h * hs, *k = q + C, *v = q + 2 * C;
            float *a = att + ((size_t)b * NH + h) * T * T;
            /* scores (T,T) = scale q k^T, all of it: the causal half is what the rows keep */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, ld, k, ld,
                        0.0f, a, T);
            rows_args rows = {a, NULL, 0.0f, T};
            kn_cpu_parallel_for((size_t)T, 4096 / (size_t)T + 1, softmax_rows, &rows);
            /* out (T,hs) = att v */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, ld,
                        0.0f, out + (size_t)b * T * C + h * hs, C);
        }
    }
#else
    kn_attention_forward_cpu(out, att, qkv, B, T, C, NH);
#endif
}

void kn_attention_backward_fast(float *dqkv, float *ws, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH)
{
#ifdef SC_HAVE_BLAS
    int hs = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    float *g = ws; /* (T,T): d(att), then d(scores) */
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * ld + h * hs, *k = q + C, *v = q + 2 * C;
            const float *a = att + ((size_t)b * NH + h) * T * T;
            const float *d = dout + (size_t)b * T * C + h * hs;
            float *dq = dqkv + (size_t)b * T * ld + h * hs, *dk = dq + C, *dv = dq + 2 * C;
            /* d(att) (T,T) = dout v^T; dv (T,hs) = att^T dout */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, d, C, v, ld, 0.0f,
                        g, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, d, C, 0.0f,
                        dv, ld);
            /* softmax backward, row by row, with the score scale folded in; above the
             * diagonal att is 0, so is the gradient */
            rows_args rows = {g, a, scale, T};
            kn_cpu_parallel_for((size_t)T, 4096 / (size_t)T + 1, softmax_grad_rows, &rows);
            /* dq (T,hs) = g k; dk (T,hs) = g^T q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, g, T, k, ld,
                        0.0f, dq, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, g, T, q, ld, 0.0f,
                        dk, ld);
        }
    }
#else
    kn_attention_backward_cpu(dqkv, ws, dout, qkv, att, B, T, C, NH);
#endif
}
