/*
 * Llama ops, CPU reference (llama_cpu.c; the specification, with transformers' LlamaModel
 * semantics): token embedding without positions, RMSNorm, rotary position embeddings (the
 * rotate-half layout, angles computed in float as transformers does), the SwiGLU gate and
 * causal attention with grouped key/value heads. The projections are the linear op (linear.h).
 * CUDA (llama.cu): the same ops on a context's stream (0 or a CUDA error code), simple kernels
 * in a fixed order of additions (the token-table gradient by atomics, as embedding.cu); the
 * attention backward needs B*NH*T*T floats of scratch (`ds`).
 *
 * Shapes: N rows of C channels (N = B*T, row r at position r % T); q (N, NH*D), k and v
 * (N, NKV*D), head h reading key/value head h / (NH / NKV); att (B, NH, T, T) probabilities.
 * Backward functions overwrite their input gradients and add (+=) into weight gradients unless
 * said otherwise.
 */
#ifndef KN_LLAMA_H
#define KN_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/device_impl.h"
#include "kernels/gpu_fn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (B*T, C) = wte[tokens] */
void kn_tok_embed_forward_cpu(float *out, const int32_t *tokens, const float *wte, int N, int C);
/* dwte[tokens[r]] += dout[r] */
void kn_tok_embed_backward_cpu(float *dwte, const float *dout, const int32_t *tokens, int N, int C);

/* out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) (kept per row) */
void kn_rmsnorm_forward_cpu(float *out, float *rstd, const float *x, const float *w, int N, int C,
                            float eps);
/* dx (overwritten), dw (+=) */
void kn_rmsnorm_backward_cpu(float *dx, float *dw, const float *dout, const float *x,
                             const float *w, const float *rstd, int N, int C);

/* In place on (N, H*D): each head's pairs (i, i + D/2) rotated by angle pos * theta^(-2i/D).
 * `inverse`: the transposed rotation (the backward). */
void kn_rope_cpu(float *x, int N, int T, int H, int D, float theta, int inverse);

/* h = silu(gate) * up, elementwise over n */
void kn_swiglu_forward_cpu(float *h, const float *gate, const float *up, size_t n);
/* dgate, dup (overwritten) from dh */
void kn_swiglu_backward_cpu(float *dgate, float *dup, const float *dh, const float *gate,
                            const float *up, size_t n);

/* y (N, NH*D), att (B, NH, T, T) from q, k, v; scale 1/sqrt(D), causal */
void kn_gqa_forward_cpu(float *y, float *att, const float *q, const float *k, const float *v, int B,
                        int T, int NH, int NKV, int D);
/* dq, dk, dv overwritten; scratch: T floats */
void kn_gqa_backward_cpu(float *dq, float *dk, float *dv, float *scratch, const float *dy,
                         const float *q, const float *k, const float *v, const float *att, int B,
                         int T, int NH, int NKV, int D);

#ifdef SC_HAVE_CUDA
KN_GPU_FN(int, kn_tok_embed_forward_cuda,
          (kn_ctx *ctx, float *out, const int32_t *tokens, const float *wte, int N, int C, int V));
KN_GPU_FN(int, kn_tok_embed_backward_cuda,
          (kn_ctx *ctx, float *dwte, const float *dout, const int32_t *tokens, int N, int C,
           int V));
KN_GPU_FN(int, kn_rmsnorm_forward_cuda,
          (kn_ctx *ctx, float *out, float *rstd, const float *x, const float *w, int N, int C,
           float eps));
KN_GPU_FN(int, kn_rmsnorm_backward_cuda,
          (kn_ctx *ctx, float *dx, float *dw, const float *dout, const float *x, const float *w,
           const float *rstd, int N, int C));
KN_GPU_FN(int, kn_rope_cuda,
          (kn_ctx *ctx, float *x, int N, int T, int H, int D, float theta, int inverse));
KN_GPU_FN(int, kn_swiglu_forward_cuda,
          (kn_ctx *ctx, float *h, const float *gate, const float *up, size_t n));
KN_GPU_FN(int, kn_swiglu_backward_cuda,
          (kn_ctx *ctx, float *dgate, float *dup, const float *dh, const float *gate,
           const float *up, size_t n));
KN_GPU_FN(int, kn_gqa_forward_cuda,
          (kn_ctx *ctx, float *y, float *att, const float *q, const float *k, const float *v, int B,
           int T, int NH, int NKV, int D));
KN_GPU_FN(int, kn_gqa_backward_cuda,
          (kn_ctx *ctx, float *dq, float *dk, float *dv, float *ds, const float *dy, const float *q,
           const float *k, const float *v, const float *att, int B, int T, int NH, int NKV, int D));
#endif

#ifdef __cplusplus
}
#endif

#endif /* KN_LLAMA_H */
