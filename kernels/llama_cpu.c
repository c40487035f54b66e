/* Llama ops, CPU reference (the specification; see llama.h). Sums over a row in float, in index
 * order, as the other reference kernels do. */
#include "kernels/llama.h"

#include <math.h>
#include <string.h>

void kn_tok_embed_forward_cpu(float *out, const int32_t *tokens, const float *wte, int N, int C)
{
    for (int r = 0; r < N; r++)
        memcpy(out + (size_t)r * C, wte + (size_t)tokens[r] * C, (size_t)C * sizeof(float));
}

void kn_tok_embed_backward_cpu(float *dwte, const float *dout, const int32_t *tokens, int N, int C)
{
    for (int r = 0; r < N; r++) {
        float *d = dwte + (size_t)tokens[r] * C;
        const float *g = dout + (size_t)r * C;
        for (int c = 0; c < C; c++)
            d[c] += g[c];
    }
}

void kn_rmsnorm_forward_cpu(float *out, float *rstd, const float *x, const float *w, int N, int C,
                            float eps)
{
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++)
            ss += xr[c] * xr[c];
        float s = 1.0f / sqrtf(ss / (float)C + eps);
        for (int c = 0; c < C; c++)
            out[(size_t)r * C + c] = xr[c] * s * w[c];
        rstd[r] = s;
    }
}

void kn_rmsnorm_backward_cpu(float *dx, float *dw, const float *dout, const float *x,
                             const float *w, const float *rstd, int N, int C)
{
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * C, *dr = dout + (size_t)r * C;
        float s = rstd[r], dot = 0.0f;
        for (int c = 0; c < C; c++) {
            dot += dr[c] * w[c] * xr[c];
            dw[c] += dr[c] * xr[c] * s;
        }
        /* d/dx of x*s*w with s = (mean(x^2)+eps)^-1/2: s*w*dy - x * s^3 * mean(w*dy*x) */
        float k = dot / (float)C * s * s * s;
        for (int c = 0; c < C; c++)
            dx[(size_t)r * C + c] = dr[c] * w[c] * s - xr[c] * k;
    }
}

void kn_rope_cpu(float *x, int N, int T, int H, int D, float theta, int inverse)
{
    int half = D / 2;
    for (int r = 0; r < N; r++) {
        float pos = (float)(r % T);
        for (int i = 0; i < half; i++) {
            /* as transformers: inv_freq = 1 / theta^(2i/D) and the angle in float */
            float inv = 1.0f / powf(theta, (float)(2 * i) / (float)D);
            float a = pos * inv, cs = cosf(a), sn = inverse ? -sinf(a) : sinf(a);
            for (int h = 0; h < H; h++) {
                float *p = x + (size_t)r * H * D + (size_t)h * D;
                float x0 = p[i], x1 = p[i + half];
                p[i] = x0 * cs - x1 * sn;
                p[i + half] = x1 * cs + x0 * sn;
            }
        }
    }
}

void kn_swiglu_forward_cpu(float *h, const float *gate, const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], sg = 1.0f / (1.0f + expf(-g));
        h[i] = g * sg * up[i];
    }
}

void kn_swiglu_backward_cpu(float *dgate, float *dup, const float *dh, const float *gate,
                            const float *up, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], sg = 1.0f / (1.0f + expf(-g)), d = dh[i];
        dup[i] = d * g * sg;
        dgate[i] = d * up[i] * sg * (1.0f + g * (1.0f - sg));
    }
}

void kn_gqa_forward_cpu(float *y, float *att, const float *q, const float *k, const float *v, int B,
                        int T, int NH, int NKV, int D)
{
    int group = NH / NKV;
    size_t qs = (size_t)NH * D, ks = (size_t)NKV * D;
    float scale = 1.0f / sqrtf((float)D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kh = h / group;
            for (int t = 0; t < T; t++) {
                const float *qr = q + ((size_t)b * T + t) * qs + (size_t)h * D;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float mx = -INFINITY;
                for (int u = 0; u <= t; u++) {
                    const float *kr = k + ((size_t)b * T + u) * ks + (size_t)kh * D;
                    float s = 0.0f;
                    for (int e = 0; e < D; e++)
                        s += qr[e] * kr[e];
                    a[u] = s * scale;
                    mx = a[u] > mx ? a[u] : mx;
                }
                float sum = 0.0f;
                for (int u = 0; u <= t; u++) {
                    a[u] = expf(a[u] - mx);
                    sum += a[u];
                }
                for (int u = 0; u <= t; u++)
                    a[u] /= sum;
                for (int u = t + 1; u < T; u++)
                    a[u] = 0.0f;
                float *yr = y + ((size_t)b * T + t) * qs + (size_t)h * D;
                for (int e = 0; e < D; e++)
                    yr[e] = 0.0f;
                for (int u = 0; u <= t; u++) {
                    const float *vr = v + ((size_t)b * T + u) * ks + (size_t)kh * D;
                    for (int e = 0; e < D; e++)
                        yr[e] += a[u] * vr[e];
                }
            }
        }
}

void kn_gqa_backward_cpu(float *dq, float *dk, float *dv, float *scratch, const float *dy,
                         const float *q, const float *k, const float *v, const float *att, int B,
                         int T, int NH, int NKV, int D)
{
    int group = NH / NKV;
    size_t qs = (size_t)NH * D, ks = (size_t)NKV * D;
    float scale = 1.0f / sqrtf((float)D);
    memset(dq, 0, (size_t)B * T * qs * sizeof(float));
    memset(dk, 0, (size_t)B * T * ks * sizeof(float));
    memset(dv, 0, (size_t)B * T * ks * sizeof(float));
    float *da = scratch;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kh = h / group;
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *dyr = dy + ((size_t)b * T + t) * qs + (size_t)h * D;
                const float *qr = q + ((size_t)b * T + t) * qs + (size_t)h * D;
                float *dqr = dq + ((size_t)b * T + t) * qs + (size_t)h * D;
                float dot = 0.0f;
                for (int u = 0; u <= t; u++) {
                    const float *vr = v + ((size_t)b * T + u) * ks + (size_t)kh * D;
                    float *dvr = dv + ((size_t)b * T + u) * ks + (size_t)kh * D;
                    float s = 0.0f;
                    for (int e = 0; e < D; e++) {
                        s += dyr[e] * vr[e];
                        dvr[e] += a[u] * dyr[e];
                    }
                    da[u] = s;
                    dot += a[u] * s;
                }
                for (int u = 0; u <= t; u++) {
                    float ds = a[u] * (da[u] - dot) * scale;
                    const float *kr = k + ((size_t)b * T + u) * ks + (size_t)kh * D;
                    float *dkr = dk + ((size_t)b * T + u) * ks + (size_t)kh * D;
                    for (int e = 0; e < D; e++) {
                        dqr[e] += ds * kr[e];
                        dkr[e] += ds * qr[e];
                    }
                }
            }
        }
}
