/*
 * Embedding: token + position. out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:].
 * The CPU version is the specification; the CUDA version (embedding.cu) is held to it.
 * Backward accumulates (+=) into the weight gradients and produces no input gradient (tokens
 * are not differentiable). Token ids must lie in [0, V): the caller checks them on the CPU; the
 * CUDA kernel clamps out-of-range ids instead of reading out of bounds.
 */
#ifndef KN_EMBEDDING_H
#define KN_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/device_impl.h"
#include "kernels/gpu_fn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (B,T,C); tokens (B,T); wte (V,C); wpe (T,C) */
void kn_embedding_forward_cpu(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                              int B, int T, int C);
/* dwte (V,C) +=, dwpe (T,C) += ; dout (B,T,C) */
void kn_embedding_backward_cpu(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                               int B, int T, int C);

#ifdef SC_HAVE_CUDA
KN_GPU_FN(int, kn_embedding_forward_cuda,
          (kn_ctx *ctx, float *out, const int32_t *tokens, const float *wte, const float *wpe,
           int B, int T, int C, int V));
KN_GPU_FN(int, kn_embedding_backward_cuda,
          (kn_ctx *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B,
           int T, int C, int V));
#endif

#ifdef __cplusplus
}
#endif

#endif /* KN_EMBEDDING_H */
