/*
 * Conv2d (im2col + GEMM, one sample at a time) and MaxPool2d on the CPU: the reference, the
 * specification of conv2d.cu, and the fast path (the GEMM on the BLAS). Column layout: col[(c*K +
 * ky)*K + kx][oy*Wo + ox], so the convolution of one sample is out (cout, Ho*Wo) = w (cout,
 * cin*K*K) @ col.
 */
#include "kernels/conv2d.h"

#include <math.h>
#include <string.h>

#include "kernels/threads_cpu.h"
#include "kernels/vec_cpu.h"

#ifdef SC_HAVE_BLAS
#include <cblas.h>
#endif

size_t kn_conv2d_col_floats(const kn_conv2d_shape *s)
{
    return (size_t)s->cin * s->k * s->k * kn_conv2d_out_h(s) * kn_conv2d_out_w(s);
}

/* The column entry (r, p) goes to col[r * rs + p * ps]: (P, 1) is the layout above, (1, R) its
 * transpose. */
static void im2col_strided(float *col, const float *x, const kn_conv2d_shape *s, int ho, int wo,
                           size_t rs, size_t ps)
{
    int K = s->k;
    for (int c = 0; c < s->cin; c++) {
        for (int ky = 0; ky < K; ky++) {
            for (int kx = 0; kx < K; kx++) {
                float *row = col + (((size_t)c * K + ky) * K + kx) * rs;
                for (int oy = 0; oy < ho; oy++) {
                    int iy = oy * s->stride - s->pad + ky;
                    for (int ox = 0; ox < wo; ox++) {
                        int ix = ox * s->stride - s->pad + kx;
                        int inside = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w;
                        row[(size_t)(oy * wo + ox) * ps] =
                            inside ? x[((size_t)c * s->h + iy) * s->w + ix] : 0.0f;
                    }
                }
            }
        }
    }
}

static void im2col(float *col, const float *x, const kn_conv2d_shape *s, int ho, int wo)
{
    im2col_strided(col, x, s, ho, wo, (size_t)ho * wo, 1);
}

/* dx (cin,h,w) = sum of the column entries that read each input pixel */
static void col2im(float *dx, const float *col, const kn_conv2d_shape *s, int ho, int wo)
{
    int K = s->k;
    memset(dx, 0, (size_t)s->cin * s->h * s->w * sizeof *dx);
    for (int c = 0; c < s->cin; c++) {
        for (int ky = 0; ky < K; ky++) {
            for (int kx = 0; kx < K; kx++) {
                const float *row = col + (((size_t)c * K + ky) * K + kx) * ho * wo;
                for (int oy = 0; oy < ho; oy++) {
                    int iy = oy * s->stride - s->pad + ky;
                    if (iy < 0 || iy >= s->h)
                        continue;
                    for (int ox = 0; ox < wo; ox++) {
                        int ix = ox * s->stride - s->pad + kx;
                        if (ix >= 0 && ix < s->w)
                            dx[((size_t)c * s->h + iy) * s->w + ix] += row[oy * wo + ox];
                    }
                }
            }
        }
    }
}

/* Each output element: its bias, then w[co][r] col[r][p] added for r = 0, 1, ... in order
 * (blocked two output rows and four r at a time, the order kept: vec_cpu.h). */
KN_VECTOR_CLONES
void kn_conv2d_forward_cpu(float *out, float *col, const float *inp, const float *w, const float *b,
                           int B, const kn_conv2d_shape *s)
{
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    size_t P = (size_t)ho * wo, R = (size_t)s->cin * s->k * s->k;
    for (int n = 0; n < B; n++) {
        im2col(col, inp + (size_t)n * s->cin * s->h * s->w, s, ho, wo);
        float *o = out + (size_t)n * s->cout * P;
        for (int co = 0; co < s->cout; co++)
            for (size_t p = 0; p < P; p++)
                o[co * P + p] = b[co];
        int co = 0;
        for (; co + 2 <= s->cout; co += 2) {
            float *o0 = o + co * P, *o1 = o0 + P;
            const float *w0 = w + co * R, *w1 = w0 + R;
            size_t r = 0;
            for (; r + 4 <= R; r += 4) {
                const float *c0 = col + r * P;
                add4x2(o0, o1, c0, c0 + P, c0 + 2 * P, c0 + 3 * P, w0 + r, w1 + r, (int)P);
            }
            for (; r < R; r++) {
                add1(o0, col + r * P, w0[r], (int)P);
                add1(o1, col + r * P, w1[r], (int)P);
            }
        }
        for (; co < s->cout; co++)
            for (size_t r = 0; r < R; r++)
                add1(o + co * P, col + r * P, w[co * R + r], (int)P);
    }
}

KN_VECTOR_CLONES
void kn_conv2d_backward_input_cpu(float *dinp, float *col, const float *dout, const float *w, int B,
                                  const kn_conv2d_shape *s)
{
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    size_t P = (size_t)ho * wo, R = (size_t)s->cin * s->k * s->k;
    for (int n = 0; n < B; n++) {
        const float *d = dout + (size_t)n * s->cout * P;
        /* dcol (R,P) = w^T (R,cout) @ dout (cout,P): each element adds w[co][r] d[co][p] for
         * co = 0, 1, ... in order (blocked four co and two rows r at a time, the order kept) */
        memset(col, 0, R * P * sizeof *col);
        int co = 0;
        for (; co + 4 <= s->cout; co += 4) {
            const float *d0 = d + co * P;
            size_t r = 0;
            for (; r + 2 <= R; r += 2) {
                float a[4], bb[4];
                for (int q = 0; q < 4; q++) {
                    a[q] = w[(co + q) * R + r];
                    bb[q] = w[(co + q) * R + r + 1];
                }
                add4x2(col + r * P, col + (r + 1) * P, d0, d0 + P, d0 + 2 * P, d0 + 3 * P, a, bb,
                       (int)P);
            }
            for (; r < R; r++)
                for (int q = 0; q < 4; q++)
                    add1(col + r * P, d0 + q * P, w[(co + q) * R + r], (int)P);
        }
        for (; co < s->cout; co++)
            for (size_t r = 0; r < R; r++)
                add1(col + r * P, d + co * P, w[co * R + r], (int)P);
        col2im(dinp + (size_t)n * s->cin * s->h * s->w, col, s, ho, wo);
    }
}

/* dw[co][r] += sum over p = 0, 1, ... of d[co][p] col[r][p], added in that order from 0, then
 * to dw; db[co] += the sum of d[co][p] in order. The column is built transposed (p, r), so that
 * eight consecutive r are one vector: lane k is the sum of entry r + k, each in the order above,
 * four output channels at a time. */
KN_VECTOR_CLONES
void kn_conv2d_backward_weight_cpu(float *dw, float *db, float *col, const float *dout,
                                   const float *inp, int B, const kn_conv2d_shape *s)
{
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    size_t P = (size_t)ho * wo, R = (size_t)s->cin * s->k * s->k;
    for (int n = 0; n < B; n++) {
        im2col_strided(col, inp + (size_t)n * s->cin * s->h * s->w, s, ho, wo, 1, R);
        const float *d = dout + (size_t)n * s->cout * P;
        for (int co = 0; co < s->cout; co++) {
            float sb = 0.0f;
            for (size_t p = 0; p < P; p++)
                sb += d[co * P + p];
            db[co] += sb;
        }
        int co = 0;
        for (; co + 4 <= s->cout; co += 4) {
            const float *d0 = d + co * P, *d1 = d0 + P, *d2 = d1 + P, *d3 = d2 + P;
            size_t r = 0;
            for (; r + 8 <= R; r += 8) {
                kn_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                for (size_t p = 0; p < P; p++) {
                    kn_v8 cv;
                    V8_LOAD(cv, col + p * R + r);
                    a0 += cv * d0[p];
                    a1 += cv * d1[p];
                    a2 += cv * d2[p];
                    a3 += cv * d3[p];
                }
                float f[4][8];
                memcpy(f[0], &a0, sizeof f[0]);
                memcpy(f[1], &a1, sizeof f[1]);
                memcpy(f[2], &a2, sizeof f[2]);
                memcpy(f[3], &a3, sizeof f[3]);
                for (int q = 0; q < 4; q++)
                    for (int k = 0; k < 8; k++)
                        dw[(co + q) * R + r + k] += f[q][k];
            }
            for (; r < R; r++)
                for (int q = 0; q < 4; q++) {
                    float acc = 0.0f;
                    for (size_t p = 0; p < P; p++)
                        acc += d[(co + q) * P + p] * col[p * R + r];
                    dw[(co + q) * R + r] += acc;
                }
        }
        for (; co < s->cout; co++)
            for (size_t r = 0; r < R; r++) {
                float acc = 0.0f;
                for (size_t p = 0; p < P; p++)
                    acc += d[co * P + p] * col[p * R + r];
                dw[co * R + r] += acc;
            }
    }
}

/* --- fast path: each sample's product on the BLAS (the reference when the build has none) ---- */

void kn_conv2d_forward_fast(float *out, float *col, const float *inp, const float *w,
                            const float *b, int B, const kn_conv2d_shape *s)
{
#ifdef SC_HAVE_BLAS
    kn_cpu_blas_use_threads();
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    int P = ho * wo, R = s->cin * s->k * s->k;
    for (int n = 0; n < B; n++) {
        im2col(col, inp + (size_t)n * s->cin * s->h * s->w, s, ho, wo);
        float *o = out + (size_t)n * s->cout * P;
        for (int co = 0; co < s->cout; co++)
            for (int p = 0; p < P; p++)
                o[(size_t)co * P + p] = b[co];
        /* out (cout,P) += w (cout,R) col (R,P) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->cout, P, R, 1.0f, w, R, col, P,
                    1.0f, o, P);
    }
#else
    kn_conv2d_forward_cpu(out, col, inp, w, b, B, s);
#endif
}

void kn_conv2d_backward_input_fast(float *dinp, float *col, const float *dout, const float *w,
                                   int B, const kn_conv2d_shape *s)
{
#ifdef SC_HAVE_BLAS
    kn_cpu_blas_use_threads();
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    int P = ho * wo, R = s->cin * s->k * s->k;
    for (int n = 0; n < B; n++) {
        /* dcol (R,P) = w^T (R,cout) dout (cout,P) */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R, P, s->cout, 1.0f, w, R,
                    dout + (size_t)n * s->cout * P, P, 0.0f, col, P);
        col2im(dinp + (size_t)n * s->cin * s->h * s->w, col, s, ho, wo);
    }
#else
    kn_conv2d_backward_input_cpu(dinp, col, dout, w, B, s);
#endif
}

void kn_conv2d_backward_weight_fast(float *dw, float *db, float *col, const float *dout,
                                    const float *inp, int B, const kn_conv2d_shape *s)
{
#ifdef SC_HAVE_BLAS
    kn_cpu_blas_use_threads();
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    int P = ho * wo, R = s->cin * s->k * s->k;
    for (int n = 0; n < B; n++) {
        im2col(col, inp + (size_t)n * s->cin * s->h * s->w, s, ho, wo);
        const float *d = dout + (size_t)n * s->cout * P;
        for (int co = 0; co < s->cout; co++) {
            float sb = 0.0f;
            for (int p = 0; p < P; p++)
                sb += d[(size_t)co * P + p];
            db[co] += sb;
        }
        /* dw (cout,R) += dout (cout,P) col^T (P,R) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->cout, R, P, 1.0f, d, P, col, P,
                    1.0f, dw, R);
    }
#else
    kn_conv2d_backward_weight_cpu(dw, db, col, dout, inp, B, s);
#endif
}

void kn_maxpool2d_forward_cpu(float *out, const float *inp, int B, int C, int H, int W, int K,
                              int S)
{
    int ho = (H - K) / S + 1, wo = (W - K) / S + 1;
    for (size_t bc = 0; bc < (size_t)B * C; bc++) {
        const float *x = inp + bc * H * W;
        float *o = out + bc * ho * wo;
        for (int oy = 0; oy < ho; oy++) {
            for (int ox = 0; ox < wo; ox++) {
                float m = -INFINITY;
                for (int ky = 0; ky < K; ky++)
                    for (int kx = 0; kx < K; kx++) {
                        float v = x[(oy * S + ky) * W + ox * S + kx];
                        if (v > m)
                            m = v;
                    }
                o[oy * wo + ox] = m;
            }
        }
    }
}

void kn_maxpool2d_backward_cpu(float *dinp, const float *dout, const float *inp, int B, int C,
                               int H, int W, int K, int S)
{
    int ho = (H - K) / S + 1, wo = (W - K) / S + 1;
    memset(dinp, 0, (size_t)B * C * H * W * sizeof *dinp);
    for (size_t bc = 0; bc < (size_t)B * C; bc++) {
        const float *x = inp + bc * H * W;
        float *dx = dinp + bc * H * W;
        const float *d = dout + bc * ho * wo;
        for (int oy = 0; oy < ho; oy++) {
            for (int ox = 0; ox < wo; ox++) {
                /* first maximum in row-major window order: strict '>' keeps the earliest */
                int best = (oy * S) * W + ox * S;
                for (int ky = 0; ky < K; ky++)
                    for (int kx = 0; kx < K; kx++) {
                        int idx = (oy * S + ky) * W + ox * S + kx;
                        if (x[idx] > x[best])
                            best = idx;
                    }
                dx[best] += d[oy * wo + ox];
            }
        }
    }
}
