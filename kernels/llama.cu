/*
 * Llama ops, CUDA (the same arithmetic as llama_cpu.c): simple kernels, one thread per output
 * element or per row, every reduction in a fixed order, so results do not depend on scheduling.
 * The attention is the plain O(T^2) loop per query row, meant for correctness, not speed.
 */
#include "kernels/cuda_common.cuh"
#include "kernels/llama.h"

#define GRID_LOOP(i, n)                                                                            \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

__global__ static void tok_fwd(float *out, const int32_t *tok, const float *wte, int N, int C,
                               int V)
{
    GRID_LOOP(i, (size_t)N * C)
    {
        int id = tok[i / C];
        id = id < 0 ? 0 : (id >= V ? V - 1 : id);
        out[i] = wte[(size_t)id * C + i % C];
    }
}

__global__ static void tok_bwd(float *dwte, const float *dout, const int32_t *tok, int N, int C,
                               int V)
{
    GRID_LOOP(i, (size_t)N * C)
    {
        int id = tok[i / C];
        id = id < 0 ? 0 : (id >= V ? V - 1 : id);
        atomicAdd(&dwte[(size_t)id * C + i % C], dout[i]);
    }
}

/* one thread per row: the row's sum in index order, as the CPU reference */
__global__ static void rms_fwd(float *out, float *rstd, const float *x, const float *w, int N,
                               int C, float eps)
{
    GRID_LOOP(r, (size_t)N)
    {
        const float *xr = x + r * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++)
            ss += xr[c] * xr[c];
        float s = 1.0f / sqrtf(ss / (float)C + eps);
        for (int c = 0; c < C; c++)
            out[r * C + c] = xr[c] * s * w[c];
        rstd[r] = s;
    }
}

__global__ static void rms_bwd_x(float *dx, const float *dout, const float *x, const float *w,
                                 const float *rstd, int N, int C)
{
    GRID_LOOP(r, (size_t)N)
    {
        const float *xr = x + r * C, *dr = dout + r * C;
        float s = rstd[r], dot = 0.0f;
        for (int c = 0; c < C; c++)
            dot += dr[c] * w[c] * xr[c];
        float k = dot / (float)C * s * s * s;
        for (int c = 0; c < C; c++)
            dx[r * C + c] = dr[c] * w[c] * s - xr[c] * k;
    }
}

/* one thread per channel, rows in order */
__global__ static void rms_bwd_w(float *dw, const float *dout, const float *x, const float *rstd,
                                 int N, int C)
{
    GRID_LOOP(c, (size_t)C)
    {
        float acc = 0.0f;
        for (int r = 0; r < N; r++)
            acc += dout[(size_t)r * C + c] * x[(size_t)r * C + c] * rstd[r];
        dw[c] += acc;
    }
}

__global__ static void rope(float *x, int N, int T, int H, int D, float theta, int inverse)
{
    int half = D / 2;
    GRID_LOOP(k, (size_t)N * H * half)
    {
        int i = (int)(k % half);
        size_t rh = k / half;
        int h = (int)(rh % H);
        size_t r = rh / H;
        float inv = 1.0f / powf(theta, (float)(2 * i) / (float)D);
        float a = (float)(r % T) * inv, cs = cosf(a), sn = inverse ? -sinf(a) : sinf(a);
        float *p = x + r * H * D + (size_t)h * D;
        float x0 = p[i], x1 = p[i + half];
        p[i] = x0 * cs - x1 * sn;
        p[i + half] = x1 * cs + x0 * sn;
    }
}

__global__ static void swiglu_fwd(float *h, const float *gate, const float *up, size_t n)
{
    GRID_LOOP(i, n)
    {
        float g = gate[i], sg = 1.0f / (1.0f + expf(-g));
        h[i] = g * sg * up[i];
    }
}

__global__ static void swiglu_bwd(float *dgate, float *dup, const float *dh, const float *gate,
                                  const float *up, size_t n)
{
    GRID_LOOP(i, n)
    {
        float g = gate[i], sg = 1.0f / (1.0f + expf(-g)), d = dh[i];
        dup[i] = d * g * sg;
        dgate[i] = d * up[i] * sg * (1.0f + g * (1.0f - sg));
    }
}

/* one thread per (b, h, t) query row */
__global__ static void gqa_fwd(float *y, float *att, const float *q, const float *k, const float *v,
                               int B, int T, int NH, int NKV, int D)
{
    int group = NH / NKV;
    size_t qs = (size_t)NH * D, ks = (size_t)NKV * D;
    float scale = 1.0f / sqrtf((float)D);
    GRID_LOOP(row, (size_t)B * NH * T)
    {
        int t = (int)(row % T), h = (int)((row / T) % NH), b = (int)(row / ((size_t)T * NH));
        int kh = h / group;
        const float *qr = q + ((size_t)b * T + t) * qs + (size_t)h * D;
        float *a = att + row * T;
        float mx = -INFINITY;
        for (int u = 0; u <= t; u++) {
            const float *kr = k + ((size_t)b * T + u) * ks + (size_t)kh * D;
            float s = 0.0f;
            for (int e = 0; e < D; e++)
                s += qr[e] * kr[e];
            a[u] = s * scale;
            mx = fmaxf(mx, a[u]);
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
        for (int e = 0; e < D; e++) {
            float acc = 0.0f;
            for (int u = 0; u <= t; u++)
                acc += a[u] * v[((size_t)b * T + u) * ks + (size_t)kh * D + e];
            yr[e] = acc;
        }
    }
}

/* per query row: ds = softmax backward (scaled), kept in `ds` (B, NH, T, T), and dq */
__global__ static void gqa_bwd_q(float *dq, float *ds, const float *dy, const float *k,
                                 const float *v, const float *att, int B, int T, int NH, int NKV,
                                 int D)
{
    int group = NH / NKV;
    size_t qs = (size_t)NH * D, ks = (size_t)NKV * D;
    float scale = 1.0f / sqrtf((float)D);
    GRID_LOOP(row, (size_t)B * NH * T)
    {
        int t = (int)(row % T), h = (int)((row / T) % NH), b = (int)(row / ((size_t)T * NH));
        int kh = h / group;
        const float *a = att + row * T, *dyr = dy + ((size_t)b * T + t) * qs + (size_t)h * D;
        float *d = ds + row * T;
        float dot = 0.0f;
        for (int u = 0; u <= t; u++) {
            const float *vr = v + ((size_t)b * T + u) * ks + (size_t)kh * D;
            float s = 0.0f;
            for (int e = 0; e < D; e++)
                s += dyr[e] * vr[e];
            d[u] = s;
            dot += a[u] * s;
        }
        for (int u = 0; u <= t; u++)
            d[u] = a[u] * (d[u] - dot) * scale;
        float *dqr = dq + ((size_t)b * T + t) * qs + (size_t)h * D;
        for (int e = 0; e < D; e++) {
            float acc = 0.0f;
            for (int u = 0; u <= t; u++)
                acc += d[u] * k[((size_t)b * T + u) * ks + (size_t)kh * D + e];
            dqr[e] = acc;
        }
    }
}

/* per (b, kv head, u, e): the sums over the group's heads and the later queries */
__global__ static void gqa_bwd_kv(float *dk, float *dv, const float *ds, const float *dy,
                                  const float *q, const float *att, int B, int T, int NH, int NKV,
                                  int D)
{
    int group = NH / NKV;
    size_t qs = (size_t)NH * D, ks = (size_t)NKV * D;
    GRID_LOOP(i, (size_t)B * T * ks)
    {
        int e = (int)(i % D), kh = (int)((i / D) % NKV);
        size_t bu = i / ks;
        int u = (int)(bu % T), b = (int)(bu / T);
        float sk = 0.0f, sv = 0.0f;
        for (int h = kh * group; h < (kh + 1) * group; h++)
            for (int t = u; t < T; t++) {
                size_t at = (((size_t)b * NH + h) * T + t) * T + u;
                size_t qi = ((size_t)b * T + t) * qs + (size_t)h * D + e;
                sk += ds[at] * q[qi];
                sv += att[at] * dy[qi];
            }
        dk[i] = sk;
        dv[i] = sv;
    }
}

extern "C" int kn_tok_embed_forward_cuda(kn_ctx *ctx, float *out, const int32_t *tokens,
                                         const float *wte, int N, int C, int V)
{
    tok_fwd<<<kn_blocks((size_t)N * C, 256), 256, 0, kn_stream(ctx)>>>(out, tokens, wte, N, C, V);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_tok_embed_backward_cuda(kn_ctx *ctx, float *dwte, const float *dout,
                                          const int32_t *tokens, int N, int C, int V)
{
    tok_bwd<<<kn_blocks((size_t)N * C, 256), 256, 0, kn_stream(ctx)>>>(dwte, dout, tokens, N, C, V);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_rmsnorm_forward_cuda(kn_ctx *ctx, float *out, float *rstd, const float *x,
                                       const float *w, int N, int C, float eps)
{
    rms_fwd<<<kn_blocks((size_t)N, 128), 128, 0, kn_stream(ctx)>>>(out, rstd, x, w, N, C, eps);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_rmsnorm_backward_cuda(kn_ctx *ctx, float *dx, float *dw, const float *dout,
                                        const float *x, const float *w, const float *rstd, int N,
                                        int C)
{
    rms_bwd_x<<<kn_blocks((size_t)N, 128), 128, 0, kn_stream(ctx)>>>(dx, dout, x, w, rstd, N, C);
    KN_LAUNCH_CHECK();
    rms_bwd_w<<<kn_blocks((size_t)C, 128), 128, 0, kn_stream(ctx)>>>(dw, dout, x, rstd, N, C);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_rope_cuda(kn_ctx *ctx, float *x, int N, int T, int H, int D, float theta,
                            int inverse)
{
    size_t n = (size_t)N * H * (D / 2);
    rope<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(x, N, T, H, D, theta, inverse);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_swiglu_forward_cuda(kn_ctx *ctx, float *h, const float *gate, const float *up,
                                      size_t n)
{
    swiglu_fwd<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(h, gate, up, n);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_swiglu_backward_cuda(kn_ctx *ctx, float *dgate, float *dup, const float *dh,
                                       const float *gate, const float *up, size_t n)
{
    swiglu_bwd<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(dgate, dup, dh, gate, up, n);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_gqa_forward_cuda(kn_ctx *ctx, float *y, float *att, const float *q,
                                   const float *k, const float *v, int B, int T, int NH, int NKV,
                                   int D)
{
    size_t rows = (size_t)B * NH * T;
    gqa_fwd<<<kn_blocks(rows, 64), 64, 0, kn_stream(ctx)>>>(y, att, q, k, v, B, T, NH, NKV, D);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_gqa_backward_cuda(kn_ctx *ctx, float *dq, float *dk, float *dv, float *ds,
                                    const float *dy, const float *q, const float *k, const float *v,
                                    const float *att, int B, int T, int NH, int NKV, int D)
{
    size_t rows = (size_t)B * NH * T, kv = (size_t)B * T * NKV * D;
    gqa_bwd_q<<<kn_blocks(rows, 64), 64, 0, kn_stream(ctx)>>>(dq, ds, dy, k, v, att, B, T, NH, NKV,
                                                              D);
    KN_LAUNCH_CHECK();
    gqa_bwd_kv<<<kn_blocks(kv, 128), 128, 0, kn_stream(ctx)>>>(dk, dv, ds, dy, q, att, B, T, NH,
                                                               NKV, D);
    KN_LAUNCH_CHECK();
    return 0;
}
