/*
 * Conv2d and MaxPool2d, CUDA: per sample im2col + cuBLAS GEMM (the CPU's column layout), col2im
 * as a gather (one thread per input pixel, no atomics); max pool one thread per output with the
 * same first-maximum rule as the CPU.
 */
#include <math.h>

#include "kernels/conv2d.h"
#include "kernels/cuda_common.cuh"

__global__ static void im2col_k(float *col, const float *x, kn_conv2d_shape s, int ho, int wo)
{
    size_t P = (size_t)ho * wo, n = (size_t)s.cin * s.k * s.k * P;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int p = (int)(i % P);
        int r = (int)(i / P);
        int kx = r % s.k, ky = (r / s.k) % s.k, c = r / (s.k * s.k);
        int oy = p / wo, ox = p % wo;
        int iy = oy * s.stride - s.pad + ky, ix = ox * s.stride - s.pad + kx;
        bool inside = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
        col[i] = inside ? x[((size_t)c * s.h + iy) * s.w + ix] : 0.0f;
    }
}

__global__ static void col2im_k(float *dx, const float *col, kn_conv2d_shape s, int ho, int wo)
{
    size_t P = (size_t)ho * wo, n = (size_t)s.cin * s.h * s.w;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int ix = (int)(i % s.w), iy = (int)((i / s.w) % s.h), c = (int)(i / ((size_t)s.w * s.h));
        float acc = 0.0f;
        for (int ky = 0; ky < s.k; ky++) {
            int ny = iy + s.pad - ky;
            if (ny < 0 || ny % s.stride != 0 || ny / s.stride >= ho)
                continue;
            int oy = ny / s.stride;
            for (int kx = 0; kx < s.k; kx++) {
                int nx = ix + s.pad - kx;
                if (nx < 0 || nx % s.stride != 0 || nx / s.stride >= wo)
                    continue;
                int ox = nx / s.stride;
                acc += col[(((size_t)c * s.k + ky) * s.k + kx) * P + (size_t)oy * wo + ox];
            }
        }
        dx[i] = acc;
    }
}

/* out (B, cout, P) += b[cout] */
__global__ static void chan_bias_add(float *out, const float *b, size_t n, int cout, size_t P)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] += b[(i / P) % cout];
}

/* db[co] += sum over samples and positions: one block per channel */
__global__ static void chan_bias_grad(float *db, const float *dout, int B, int cout, size_t P)
{
    __shared__ float sh[32];
    int co = blockIdx.x;
    float s = 0.0f;
    for (int b = 0; b < B; b++) {
        const float *d = dout + ((size_t)b * cout + co) * P;
        for (size_t p = threadIdx.x; p < P; p += blockDim.x)
            s += d[p];
    }
    s = kn_block_sum(s, sh);
    if (threadIdx.x == 0)
        db[co] += s;
}

extern "C" int kn_conv2d_forward_cuda(kn_ctx *ctx, float *out, float *col, const float *inp,
                                      const float *w, const float *b, int B,
                                      const kn_conv2d_shape *s)
{
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    int P = ho * wo, R = s->cin * s->k * s->k;
    const float one = 1.0f, zero = 0.0f;
    cudaStream_t st = kn_stream(ctx);
    for (int n = 0; n < B; n++) {
        im2col_k<<<kn_blocks((size_t)R * P, 256), 256, 0, st>>>(
            col, inp + (size_t)n * s->cin * s->h * s->w, *s, ho, wo);
        KN_LAUNCH_CHECK();
        /* out_n^T (P x cout) = col^T (P x R) . W^T (R x cout) */
        KN_GEMM_TRY(kn_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, P, s->cout, R, &one,
                                  col, P, w, R, &zero, out + (size_t)n * s->cout * P, P));
    }
    size_t total = (size_t)B * s->cout * P;
    chan_bias_add<<<kn_blocks(total, 256), 256, 0, st>>>(out, b, total, s->cout, P);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_conv2d_backward_input_cuda(kn_ctx *ctx, float *dinp, float *col,
                                             const float *dout, const float *w, int B,
                                             const kn_conv2d_shape *s)
{
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    int P = ho * wo, R = s->cin * s->k * s->k;
    const float one = 1.0f, zero = 0.0f;
    cudaStream_t st = kn_stream(ctx);
    for (int n = 0; n < B; n++) {
        /* dcol^T (P x R) = dout_n^T (P x cout) . W (cout x R) */
        KN_GEMM_TRY(kn_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, P, R, s->cout, &one,
                                  dout + (size_t)n * s->cout * P, P, w, R, &zero, col, P));
        size_t nx = (size_t)s->cin * s->h * s->w;
        col2im_k<<<kn_blocks(nx, 256), 256, 0, st>>>(dinp + (size_t)n * nx, col, *s, ho, wo);
        KN_LAUNCH_CHECK();
    }
    return 0;
}

extern "C" int kn_conv2d_backward_weight_cuda(kn_ctx *ctx, float *dw, float *db, float *col,
                                              const float *dout, const float *inp, int B,
                                              const kn_conv2d_shape *s)
{
    int ho = kn_conv2d_out_h(s), wo = kn_conv2d_out_w(s);
    int P = ho * wo, R = s->cin * s->k * s->k;
    const float one = 1.0f;
    cudaStream_t st = kn_stream(ctx);
    for (int n = 0; n < B; n++) {
        im2col_k<<<kn_blocks((size_t)R * P, 256), 256, 0, st>>>(
            col, inp + (size_t)n * s->cin * s->h * s->w, *s, ho, wo);
        KN_LAUNCH_CHECK();
        /* dW^T (R x cout) += col (R x P) . dout_n^T (P x cout) */
        KN_GEMM_TRY(kn_gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, R, s->cout, P, &one,
                                  col, P, dout + (size_t)n * s->cout * P, P, &one, dw, R));
    }
    chan_bias_grad<<<s->cout, 256, 0, st>>>(db, dout, B, s->cout, (size_t)P);
    KN_LAUNCH_CHECK();
    return 0;
}

__device__ static int pool_argmax(const float *x, int W, int oy, int ox, int K, int S)
{
    int best = (oy * S) * W + ox * S;
    for (int ky = 0; ky < K; ky++)
        for (int kx = 0; kx < K; kx++) {
            int idx = (oy * S + ky) * W + ox * S + kx;
            if (x[idx] > x[best])
                best = idx;
        }
    return best;
}

__global__ static void pool_fwd(float *out, const float *inp, int BC, int H, int W, int K, int S,
                                int ho, int wo)
{
    size_t n = (size_t)BC * ho * wo;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int ox = (int)(i % wo), oy = (int)((i / wo) % ho);
        size_t bc = i / ((size_t)wo * ho);
        const float *x = inp + bc * H * W;
        out[i] = x[pool_argmax(x, W, oy, ox, K, S)];
    }
}

__global__ static void pool_bwd(float *dinp, const float *dout, const float *inp, int BC, int H,
                                int W, int K, int S, int ho, int wo)
{
    size_t n = (size_t)BC * ho * wo;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int ox = (int)(i % wo), oy = (int)((i / wo) % ho);
        size_t bc = i / ((size_t)wo * ho);
        const float *x = inp + bc * H * W;
        /* windows overlap when S < K: atomics keep every contribution */
        atomicAdd(&dinp[bc * H * W + pool_argmax(x, W, oy, ox, K, S)], dout[i]);
    }
}

extern "C" int kn_maxpool2d_forward_cuda(kn_ctx *ctx, float *out, const float *inp, int B, int C,
                                         int H, int W, int K, int S)
{
    int ho = (H - K) / S + 1, wo = (W - K) / S + 1;
    size_t n = (size_t)B * C * ho * wo;
    pool_fwd<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(out, inp, B * C, H, W, K, S, ho, wo);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_maxpool2d_backward_cuda(kn_ctx *ctx, float *dinp, const float *dout,
                                          const float *inp, int B, int C, int H, int W, int K,
                                          int S)
{
    int ho = (H - K) / S + 1, wo = (W - K) / S + 1;
    size_t n = (size_t)B * C * ho * wo;
    KN_CUDA_TRY(cudaMemsetAsync(dinp, 0, (size_t)B * C * H * W * sizeof(float), kn_stream(ctx)));
    pool_bwd<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(dinp, dout, inp, B * C, H, W, K, S, ho,
                                                            wo);
    KN_LAUNCH_CHECK();
    return 0;
}
