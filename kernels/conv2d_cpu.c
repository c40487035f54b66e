/*
 * Conv2d (im2col + GEMM, one sample at a time) and MaxPool2d: CPU reference, the specification
 * of conv2d.cu. Column layout: col[(c*K + ky)*K + kx][oy*Wo + ox], so the convolution of one
 * sample is out (cout, Ho*Wo) = w (cout, cin*K*K) @ col.
 */
#include "kernels/conv2d.h"

#include <math.h>
#include <string.h>

int kn_conv2d_out_h(const kn_conv2d_shape *s)
{
    return (s->h + 2 * s->pad - s->k) / s->stride + 1;
}

int kn_conv2d_out_w(const kn_conv2d_shape *s)
{
    return (s->w + 2 * s->pad - s->k) / s->stride + 1;
}

size_t kn_conv2d_col_floats(const kn_conv2d_shape *s)
{
    return (size_t)s->cin * s->k * s->k * kn_conv2d_out_h(s) * kn_conv2d_out_w(s);
}

static void im2col(float *col, const float *x, const kn_conv2d_shape *s, int ho, int wo)
{
    int K = s->k;
    for (int c = 0; c < s->cin; c++) {
        for (int ky = 0; ky < K; ky++) {
            for (int kx = 0; kx < K; kx++) {
                float *row = col + (((size_t)c * K + ky) * K + kx) * ho * wo;
                for (int oy = 0; oy < ho; oy++) {
                    int iy = oy * s->stride - s->pad + ky;
                    for (int ox = 0; ox < wo; ox++) {
                        int ix = ox * s->stride - s->pad + kx;
                        int inside = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w;
                        row[oy * wo + ox] = inside ? x[((size_t)c * s->h + iy) * s->w + ix] : 0.0f;
                    }
                }
            }
        }
    }
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

void kn_conv2d_forward_cpu(float *out, float *col, const float *inp, const float *w, const float *b,
                           int B, const kn_conv2d_shape *s)
{
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    size_t P = (size_t)ho * wo, R = (size_t)s->cin * s->k * s->k;
    for (int n = 0; n < B; n++) {
        im2col(col, inp + (size_t)n * s->cin * s->h * s->w, s, ho, wo);
        float *o = out + (size_t)n * s->cout * P;
        for (int co = 0; co < s->cout; co++) {
            float *orow = o + co * P;
            for (size_t p = 0; p < P; p++)
                orow[p] = b[co];
            const float *wr = w + co * R;
            for (size_t r = 0; r < R; r++) {
                float wv = wr[r];
                const float *crow = col + r * P;
                for (size_t p = 0; p < P; p++)
                    orow[p] += wv * crow[p];
            }
        }
    }
}

void kn_conv2d_backward_input_cpu(float *dinp, float *col, const float *dout, const float *w, int B,
                                  const kn_conv2d_shape *s)
{
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    size_t P = (size_t)ho * wo, R = (size_t)s->cin * s->k * s->k;
    for (int n = 0; n < B; n++) {
        const float *d = dout + (size_t)n * s->cout * P;
        /* dcol (R,P) = w^T (R,cout) @ dout (cout,P) */
        memset(col, 0, R * P * sizeof *col);
        for (int co = 0; co < s->cout; co++) {
            const float *drow = d + co * P;
            const float *wr = w + co * R;
            for (size_t r = 0; r < R; r++) {
                float wv = wr[r];
                float *crow = col + r * P;
                for (size_t p = 0; p < P; p++)
                    crow[p] += wv * drow[p];
            }
        }
        col2im(dinp + (size_t)n * s->cin * s->h * s->w, col, s, ho, wo);
    }
}

void kn_conv2d_backward_weight_cpu(float *dw, float *db, float *col, const float *dout,
                                   const float *inp, int B, const kn_conv2d_shape *s)
{
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    size_t P = (size_t)ho * wo, R = (size_t)s->cin * s->k * s->k;
    for (int n = 0; n < B; n++) {
        im2col(col, inp + (size_t)n * s->cin * s->h * s->w, s, ho, wo);
        const float *d = dout + (size_t)n * s->cout * P;
        for (int co = 0; co < s->cout; co++) {
            const float *drow = d + co * P;
            float sb = 0.0f;
            for (size_t p = 0; p < P; p++)
                sb += drow[p];
            db[co] += sb;
            float *dwr = dw + co * R;
            for (size_t r = 0; r < R; r++) {
                const float *crow = col + r * P;
                float acc = 0.0f;
                for (size_t p = 0; p < P; p++)
                    acc += drow[p] * crow[p];
                dwr[r] += acc;
            }
        }
    }
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
