/*
 * Linear layer on the CPU. The fast path (end of the file) is three BLAS products (sgemm); the
 * rest of this file is the reference, plain loops with the inner loop unit-stride. Every output
 * keeps one fixed order of additions, so the results do not depend on how the loops are blocked or
 * on the vector width the compiler picks; that order is the specification of linear.cu's products
 * up to rounding:
 *   forward      out[n][j] = dot8(x_n, w_j) + b_j: eight partial sums over i = k mod 8, added
 *                pairwise at the end, then the tail;
 *   input grad   dx[n][i] = sum over o = 0, 1, ... of d[n][o] w[o][i], added in that order;
 *   weight grad  dw[o][i] += sum over n = 0, 1, ... of d[n][o] x[n][i], in that order, and
 *                db[o] the same over d[n][o].
 * Blocking: the forward takes four inputs at a time against each weight row (the row is read
 * once for four dot products); the gradients add four terms of their sums per pass over two
 * rows at once (the four rows they read serve both).
 * The inner loops go eight elements at a time (explicit vectors in the forward), a shape the
 * compiler turns into vector instructions at any optimisation level.
 * On x86-64 the functions are also built for AVX2 and chosen at load time (target_clones):
 * eight floats per vector instead of four, the same operations in the same order (C11 does not
 * fuse a multiply and an add), so the same bits on every machine.
 */
#include "kernels/linear.h"

#include <string.h>

#include "kernels/threads_cpu.h"
#include "kernels/vec_cpu.h"

#ifdef SC_HAVE_BLAS
#include <cblas.h>
#endif

/* The end of a dot8: its eight partial sums, added pairwise, then the tail from i. */
static inline float dot8_finish(const float s[8], const float *a, const float *b, int i, int n)
{
    float t = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (; i < n; i++)
        t += a[i] * b[i];
    return t;
}

/* One dot product in the reference order. */
static inline float dot8(const float *a, const float *b, int n)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += a[i + k] * b[i + k];
    return dot8_finish(s, a, b, i, n);
}

KN_VECTOR_CLONES
void kn_linear_forward_cpu(float *out, const float *inp, const float *w, const float *b, int N,
                           int IC, int OC)
{
    int n = 0;
    for (; n + 4 <= N; n += 4) {
        const float *x0 = inp + (size_t)n * IC, *x1 = x0 + IC, *x2 = x1 + IC, *x3 = x2 + IC;
        for (int j = 0; j < OC; j++) {
            /* four dot products with weight row j, each in dot8's order: lane k of a vector
             * is partial sum k */
            const float *wr = w + (size_t)j * IC;
            kn_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            int i = 0;
            for (; i + 8 <= IC; i += 8) {
                kn_v8 wv, v0, v1, v2, v3;
                V8_LOAD(wv, wr + i);
                V8_LOAD(v0, x0 + i);
                V8_LOAD(v1, x1 + i);
                V8_LOAD(v2, x2 + i);
                V8_LOAD(v3, x3 + i);
                a0 += v0 * wv;
                a1 += v1 * wv;
                a2 += v2 * wv;
                a3 += v3 * wv;
            }
            float s0[8], s1[8], s2[8], s3[8];
            memcpy(s0, &a0, sizeof s0);
            memcpy(s1, &a1, sizeof s1);
            memcpy(s2, &a2, sizeof s2);
            memcpy(s3, &a3, sizeof s3);
            float bj = b ? b[j] : 0.0f;
            out[(size_t)n * OC + j] = dot8_finish(s0, x0, wr, i, IC) + bj;
            out[(size_t)(n + 1) * OC + j] = dot8_finish(s1, x1, wr, i, IC) + bj;
            out[(size_t)(n + 2) * OC + j] = dot8_finish(s2, x2, wr, i, IC) + bj;
            out[(size_t)(n + 3) * OC + j] = dot8_finish(s3, x3, wr, i, IC) + bj;
        }
    }
    for (; n < N; n++) {
        const float *x = inp + (size_t)n * IC;
        float *o = out + (size_t)n * OC;
        for (int j = 0; j < OC; j++)
            o[j] = dot8(x, w + (size_t)j * IC, IC) + (b ? b[j] : 0.0f);
    }
}

KN_VECTOR_CLONES
void kn_linear_backward_input_cpu(float *dinp, const float *dout, const float *w, int N, int IC,
                                  int OC)
{
    int n = 0;
    for (; n + 2 <= N; n += 2) { /* two rows of dx share each pass over four weight rows */
        float *dx0 = dinp + (size_t)n * IC, *dx1 = dx0 + IC;
        const float *d0 = dout + (size_t)n * OC, *d1 = d0 + OC;
        memset(dx0, 0, 2 * (size_t)IC * sizeof *dx0);
        int o = 0;
        for (; o + 4 <= OC; o += 4) {
            const float *w0 = w + (size_t)o * IC;
            add4x2(dx0, dx1, w0, w0 + IC, w0 + 2 * (size_t)IC, w0 + 3 * (size_t)IC, d0 + o, d1 + o,
                   IC);
        }
        for (; o < OC; o++) {
            add1(dx0, w + (size_t)o * IC, d0[o], IC);
            add1(dx1, w + (size_t)o * IC, d1[o], IC);
        }
    }
    for (; n < N; n++) {
        float *dx = dinp + (size_t)n * IC;
        const float *d = dout + (size_t)n * OC;
        memset(dx, 0, (size_t)IC * sizeof *dx);
        for (int o = 0; o < OC; o++) /* the odd row: one term per pass, the same order */
            add1(dx, w + (size_t)o * IC, d[o], IC);
    }
}

KN_VECTOR_CLONES
void kn_linear_backward_weight_cpu(float *dw, float *db, const float *dout, const float *inp, int N,
                                   int IC, int OC)
{
    int o = 0;
    for (; o + 2 <= OC; o += 2) { /* two rows of dw share each pass over four input rows */
        float *dw0 = dw + (size_t)o * IC, *dw1 = dw0 + IC;
        float s0 = 0.0f, s1 = 0.0f;
        int n = 0;
        for (; n + 4 <= N; n += 4) {
            float a[4], b[4];
            for (int q = 0; q < 4; q++) {
                a[q] = dout[(size_t)(n + q) * OC + o];
                b[q] = dout[(size_t)(n + q) * OC + o + 1];
                s0 += a[q];
                s1 += b[q];
            }
            const float *x0 = inp + (size_t)n * IC;
            add4x2(dw0, dw1, x0, x0 + IC, x0 + 2 * (size_t)IC, x0 + 3 * (size_t)IC, a, b, IC);
        }
        for (; n < N; n++) {
            float a = dout[(size_t)n * OC + o], b = dout[(size_t)n * OC + o + 1];
            s0 += a;
            s1 += b;
            add1(dw0, inp + (size_t)n * IC, a, IC);
            add1(dw1, inp + (size_t)n * IC, b, IC);
        }
        if (db) {
            db[o] += s0;
            db[o + 1] += s1;
        }
    }
    for (; o < OC; o++) {
        float *dwr = dw + (size_t)o * IC;
        float sb = 0.0f;
        for (int n = 0; n < N; n++) { /* the odd row: one term per pass, the same order */
            float g = dout[(size_t)n * OC + o];
            sb += g;
            add1(dwr, inp + (size_t)n * IC, g, IC);
        }
        if (db)
            db[o] += sb;
    }
}

/* --- fast path: the products on the BLAS (the reference above when the build has none) ------- */

void kn_linear_forward_fast(float *out, const float *inp, const float *w, const float *b, int N,
                            int IC, int OC)
{
#ifdef SC_HAVE_BLAS
    kn_cpu_blas_use_threads();
    float beta = 0.0f;
    if (b != NULL) { /* the bias first, then the product added to it */
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * OC, b, (size_t)OC * sizeof *out);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC, beta, out,
                OC);
#else
    kn_linear_forward_cpu(out, inp, w, b, N, IC, OC);
#endif
}

void kn_linear_backward_input_fast(float *dinp, const float *dout, const float *w, int N, int IC,
                                   int OC)
{
#ifdef SC_HAVE_BLAS
    kn_cpu_blas_use_threads();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC, 0.0f,
                dinp, IC);
#else
    kn_linear_backward_input_cpu(dinp, dout, w, N, IC, OC);
#endif
}

void kn_linear_backward_weight_fast(float *dw, float *db, const float *dout, const float *inp,
                                    int N, int IC, int OC)
{
#ifdef SC_HAVE_BLAS
    kn_cpu_blas_use_threads();
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f,
                dw, IC);
    if (db != NULL)
        for (int n = 0; n < N; n++) {
            const float *d = dout + (size_t)n * OC;
            for (int o = 0; o < OC; o++)
                db[o] += d[o];
        }
#else
    kn_linear_backward_weight_cpu(dw, db, dout, inp, N, IC, OC);
#endif
}
