/*
 * LayerNorm, CUDA: one warp per row for the forward and the input gradient; the gain and bias
 * gradients are column sums over row chunks, added with atomics.
 */
#include "kernels/cuda_common.cuh"
#include "kernels/layernorm.h"

__global__ static void ln_fwd(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += x[c];
    float m = kn_warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        v += d * d;
    }
    float r = rsqrtf(kn_warp_sum(v) / C + 1e-5f);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32)
        o[c] = (x[c] - m) * r * w[c] + b[c];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

__global__ static void ln_bwd_input(float *dinp, const float *dout, const float *inp,
                                    const float *w, const float *mean, const float *rstd, int N,
                                    int C)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const float *d = dout + (size_t)row * C, *x = inp + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float m = mean[row], r = rstd[row];
    float a = 0.0f, bsum = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * r, dn = w[c] * d[c];
        a += dn;
        bsum += dn * norm;
    }
    a = kn_warp_sum(a) / C;
    bsum = kn_warp_sum(bsum) / C;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * r, dn = w[c] * d[c];
        dx[c] += (dn - a - norm * bsum) * r;
    }
}

__global__ static void ln_bwd_params(float *dw, float *db, const float *dout, const float *inp,
                                     const float *mean, const float *rstd, int N, int C, int rows)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    if (c >= C || r0 >= N)
        return;
    float sw = 0.0f, sb = 0.0f;
    for (int r = r0; r < r1; r++) {
        float d = dout[(size_t)r * C + c];
        sw += (inp[(size_t)r * C + c] - mean[r]) * rstd[r] * d;
        sb += d;
    }
    atomicAdd(&dw[c], sw);
    atomicAdd(&db[c], sb);
}

extern "C" int kn_layernorm_forward_cuda(kn_ctx *ctx, float *out, float *mean, float *rstd,
                                         const float *inp, const float *w, const float *b, int N,
                                         int C)
{
    if (N <= 0)
        return 0;
    ln_fwd<<<(N + 7) / 8, 256, 0, kn_stream(ctx)>>>(out, mean, rstd, inp, w, b, N, C);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_layernorm_backward_cuda(kn_ctx *ctx, float *dinp, float *dw, float *db,
                                          const float *dout, const float *inp, const float *w,
                                          const float *mean, const float *rstd, int N, int C)
{
    if (N <= 0)
        return 0;
    if (dinp != NULL) {
        ln_bwd_input<<<(N + 7) / 8, 256, 0, kn_stream(ctx)>>>(dinp, dout, inp, w, mean, rstd, N, C);
        KN_LAUNCH_CHECK();
    }
    if (dw == NULL)
        return 0;
    int rows = kn_row_chunk(N);
    dim3 grid((C + 255) / 256, (N + rows - 1) / rows);
    ln_bwd_params<<<grid, 256, 0, kn_stream(ctx)>>>(dw, db, dout, inp, mean, rstd, N, C, rows);
    KN_LAUNCH_CHECK();
    return 0;
}
