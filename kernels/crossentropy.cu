/*
 * Softmax cross-entropy, CUDA: one block per row for the forward (block max and sum), an
 * elementwise kernel for the fused backward. Same formulas as the CPU reference.
 */
#include <math.h>

#include "kernels/crossentropy.h"
#include "kernels/cuda_common.cuh"

__device__ static int clamp_target(int32_t t, int V)
{
    return t < 0 ? 0 : (t >= V ? V - 1 : t);
}

__global__ static void ce_fwd(float *losses, float *probs, const float *logits,
                              const int32_t *targets, int V)
{
    __shared__ float sh[32];
    __shared__ float zt;
    int row = blockIdx.x;
    const float *z = logits + (size_t)row * V;
    float *p = probs + (size_t)row * V;
    int t = clamp_target(targets[row], V);
    if (threadIdx.x == 0)
        zt = z[t]; /* read before probs (which may alias logits) is written */
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        m = fmaxf(m, z[j]);
    m = kn_block_max(m, sh);
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        s += expf(z[j] - m);
    s = kn_block_sum(s, sh);
    __syncthreads(); /* zt is visible, and every read of z precedes the writes below */
    float inv = 1.0f / s;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        p[j] = expf(z[j] - m) * inv;
    if (threadIdx.x == 0)
        losses[row] = logf(s) - (zt - m);
}

__global__ static void ce_bwd(float *dlogits, const float *probs, const int32_t *targets,
                              float dloss, int N, int V)
{
    size_t n = (size_t)N * V;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(i % V);
        int t = clamp_target(targets[i / V], V);
        dlogits[i] = (probs[i] - (j == t ? 1.0f : 0.0f)) * dloss;
    }
}

extern "C" int kn_crossentropy_forward_cuda(kn_ctx *ctx, float *losses, float *probs,
                                            const float *logits, const int32_t *targets, int N,
                                            int V)
{
    ce_fwd<<<N, 256, 0, kn_stream(ctx)>>>(losses, probs, logits, targets, V);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_crossentropy_backward_cuda(kn_ctx *ctx, float *dlogits, const float *probs,
                                             const int32_t *targets, float dloss, int N, int V)
{
    size_t n = (size_t)N * V;
    ce_bwd<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(dlogits, probs, targets, dloss, N, V);
    KN_LAUNCH_CHECK();
    return 0;
}
