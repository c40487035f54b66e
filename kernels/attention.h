/*
 * Causal multi-head self-attention over a packed qkv tensor (B,T,3C): q = qkv[..., 0:C],
 * k = qkv[..., C:2C], v = qkv[..., 2C:3C], each split into NH heads of C/NH channels.
 * att[b,h,t,t2] = softmax over t2 <= t of q.k / sqrt(hs) (zero for t2 > t); out = att @ v.
 * The forward stashes att for the backward. Workspaces are scratch owned by the caller, sized
 * by kn_attention_workspace_floats() (the CUDA path needs much more than the CPU path).
 */
#ifndef KN_ATTENTION_H
#define KN_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/device_impl.h"
#include "kernels/gpu_fn.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t kn_attention_workspace_floats(int B, int T, int C, int NH, int on_gpu);

/* out (B,T,C); att (B,NH,T,T); qkv (B,T,3C) */
void kn_attention_forward_cpu(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH);
/* dqkv (B,T,3C) = gradient (overwritten); ws: kn_attention_workspace_floats(.., 0) floats */
void kn_attention_backward_cpu(float *dqkv, float *ws, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH);
/* The same on the BLAS, results within rounding of the above (the reference without BLAS). */
void kn_attention_forward_fast(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH);
void kn_attention_backward_fast(float *dqkv, float *ws, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH);

#ifdef SC_HAVE_CUDA
KN_GPU_FN(int, kn_attention_forward_cuda,
          (kn_ctx *ctx, float *out, float *att, float *ws, const float *qkv, int B, int T, int C,
           int NH));
KN_GPU_FN(int, kn_attention_backward_cuda,
          (kn_ctx *ctx, float *dqkv, float *ws, const float *dout, const float *qkv,
           const float *att, int B, int T, int C, int NH));
#endif

#ifdef __cplusplus
}
#endif

#endif /* KN_ATTENTION_H */
