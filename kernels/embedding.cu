/* Embedding, CUDA: one thread per output element; the token-table gradient by atomics. */
#include "kernels/cuda_common.cuh"
#include "kernels/embedding.h"

__device__ static int clamp_id(int32_t id, int V)
{
    return id < 0 ? 0 : (id >= V ? V - 1 : id);
}

__global__ static void emb_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe,
                               int B, int T, int C, int V)
{
    size_t n = (size_t)B * T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t bt = i / C;
        int c = (int)(i % C), t = (int)(bt % T);
        out[i] = wte[(size_t)clamp_id(tok[bt], V) * C + c] + wpe[(size_t)t * C + c];
    }
}

/* dwpe[t,c] += sum over b: one thread per (t, c), deterministic */
__global__ static void emb_bwd_pos(float *dwpe, const float *dout, int B, int T, int C)
{
    size_t n = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++)
            s += dout[(size_t)b * n + i];
        dwpe[i] += s;
    }
}

__global__ static void emb_bwd_tok(float *dwte, const float *dout, const int32_t *tok, int B, int T,
                                   int C, int V)
{
    size_t n = (size_t)B * T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t bt = i / C;
        atomicAdd(&dwte[(size_t)clamp_id(tok[bt], V) * C + i % C], dout[i]);
    }
}

extern "C" int kn_embedding_forward_cuda(kn_ctx *ctx, float *out, const int32_t *tokens,
                                         const float *wte, const float *wpe, int B, int T, int C,
                                         int V)
{
    size_t n = (size_t)B * T * C;
    emb_fwd<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(out, tokens, wte, wpe, B, T, C, V);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_embedding_backward_cuda(kn_ctx *ctx, float *dwte, float *dwpe, const float *dout,
                                          const int32_t *tokens, int B, int T, int C, int V)
{
    size_t n = (size_t)B * T * C;
    emb_bwd_pos<<<kn_blocks((size_t)T * C, 256), 256, 0, kn_stream(ctx)>>>(dwpe, dout, B, T, C);
    KN_LAUNCH_CHECK();
    emb_bwd_tok<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(dwte, dout, tokens, B, T, C, V);
    KN_LAUNCH_CHECK();
    return 0;
}
