/*
 * Softmax cross-entropy, CUDA. Forward: one block per row; a single pass keeps a running
 * maximum and the sum of exponentials rescaled to it (online softmax), a second writes the
 * probabilities, so the (N, V) logits are read twice, not three times. Backward: a 2-D grid
 * (columns, rows), so no thread divides a 64-bit index; the 16-bit variant writes the gradient
 * of the logits straight in the context's bf16 / fp16, which the head's two products then read
 * without converting it (half the bytes written, no second pass). Same formulas as the CPU
 * reference.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "kernels/crossentropy.h"
#include "kernels/cuda_common.cuh"

__device__ static int clamp_target(int32_t t, int V)
{
    return t < 0 ? 0 : (t >= V ? V - 1 : t);
}

__device__ __forceinline__ float in_f(float x)
{
    return x;
}
__device__ __forceinline__ float in_f(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}
__device__ __forceinline__ float in_f(__half x)
{
    return __half2float(x);
}

/* one block per row; the logits of row r at r * ld (fp32, or 16-bit from the head's product) */
template <typename L>
__global__ static void ce_fwd(float *losses, float *probs, const L *logits, size_t ld,
                              const int32_t *targets, int V)
{
    __shared__ float shm[32], shs[32];
    __shared__ float zt, row_m, row_s;
    int row = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int nwarps = blockDim.x / 32;
    const L *z = logits + (size_t)row * ld;
    float *p = probs + (size_t)row * V;
    int t = clamp_target(targets[row], V);
    if (threadIdx.x == 0)
        zt = in_f(z[t]); /* read before probs (which may alias logits) is written */
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        kn_lse_add(m, s, in_f(z[j]));
    }
    kn_warp_lse(m, s);
    if (lane == 0) {
        shm[warp] = m;
        shs[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? shm[lane] : -INFINITY;
        s = lane < nwarps ? shs[lane] : 0.0f;
        kn_warp_lse(m, s);
        if (lane == 0) {
            row_m = m;
            row_s = s;
        }
    }
    __syncthreads(); /* zt, row_m, row_s are visible; every read of z above precedes the writes */
    m = row_m;
    float inv = 1.0f / row_s;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        p[j] = expf(in_f(z[j]) - m) * inv;
    if (threadIdx.x == 0)
        losses[row] = logf(row_s) - (zt - m);
}

template <typename H> __device__ __forceinline__ H out_as(float x);
template <> __device__ __forceinline__ float out_as<float>(float x)
{
    return x;
}
template <> __device__ __forceinline__ __nv_bfloat16 out_as<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half out_as<__half>(float x)
{
    return __float2half_rn(x);
}

#define CE_COLS_PER_THREAD 4

/* grid (column chunks, rows): each thread writes CE_COLS_PER_THREAD columns of its rows */
template <typename H>
__global__ static void ce_bwd(H *dlogits, size_t ld, const float *probs, const int32_t *targets,
                              float dloss, int N, int V)
{
    int chunk = blockDim.x * CE_COLS_PER_THREAD;
    for (int row = blockIdx.y; row < N; row += gridDim.y) {
        int t = clamp_target(targets[row], V);
        const float *p = probs + (size_t)row * V;
        H *d = dlogits + (size_t)row * ld;
        for (int j = blockIdx.x * chunk + threadIdx.x, k = 0; k < CE_COLS_PER_THREAD && j < (int)ld;
             k++, j += blockDim.x) /* zeros in the padding past V (linear.h's products read it) */
            d[j] = out_as<H>(j < V ? (p[j] - (j == t ? 1.0f : 0.0f)) * dloss : 0.0f);
    }
}

template <typename H>
static int ce_bwd_launch(kn_ctx *ctx, H *dlogits, size_t ld, const float *probs,
                         const int32_t *targets, float dloss, int N, int V)
{
    if (N <= 0 || V <= 0)
        return 0;
    unsigned threads = 256, chunk = threads * CE_COLS_PER_THREAD;
    dim3 grid((unsigned)((ld + chunk - 1) / chunk), (unsigned)(N < 65535 ? N : 65535));
    ce_bwd<H><<<grid, threads, 0, kn_stream(ctx)>>>(dlogits, ld, probs, targets, dloss, N, V);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_crossentropy_forward_cuda(kn_ctx *ctx, float *losses, float *probs,
                                            const float *logits, const int32_t *targets, int N,
                                            int V)
{
    if (N <= 0)
        return 0;
    ce_fwd<float><<<N, 512, 0, kn_stream(ctx)>>>(losses, probs, logits, (size_t)V, targets, V);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_crossentropy_backward_cuda(kn_ctx *ctx, float *dlogits, const float *probs,
                                             const int32_t *targets, float dloss, int N, int V)
{
    return ce_bwd_launch<float>(ctx, dlogits, (size_t)V, probs, targets, dloss, N, V);
}

extern "C" int kn_crossentropy_forward_half_cuda(kn_ctx *ctx, float *losses, float *probs,
                                                 const void *logits16, int ld,
                                                 const int32_t *targets, int N, int V)
{
    if (N <= 0)
        return 0;
    cudaStream_t s = kn_stream(ctx);
    if (ctx->prec == KN_PREC_BF16)
        ce_fwd<__nv_bfloat16><<<N, 512, 0, s>>>(losses, probs, (const __nv_bfloat16 *)logits16,
                                                (size_t)ld, targets, V);
    else if (ctx->prec == KN_PREC_FP16)
        ce_fwd<__half>
            <<<N, 512, 0, s>>>(losses, probs, (const __half *)logits16, (size_t)ld, targets, V);
    else
        return (int)cudaErrorInvalidValue;
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_crossentropy_backward_half_cuda(kn_ctx *ctx, void *dlogits, int ld,
                                                  const float *probs, const int32_t *targets,
                                                  float dloss, int N, int V)
{
    if (ctx->prec == KN_PREC_BF16)
        return ce_bwd_launch<__nv_bfloat16>(ctx, (__nv_bfloat16 *)dlogits, (size_t)ld, probs,
                                            targets, dloss, N, V);
    if (ctx->prec == KN_PREC_FP16)
        return ce_bwd_launch<__half>(ctx, (__half *)dlogits, (size_t)ld, probs, targets, dloss, N,
                                     V);
    return (int)cudaErrorInvalidValue; /* only a bf16 / fp16 context has a 16-bit gradient */
}
