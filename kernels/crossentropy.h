/*
 * Softmax cross-entropy fused with the gradient of the logits.
 * Forward: probs = softmax(logits) row by row, losses[i] = -log probs[i, targets[i]].
 * Backward: dlogits = (probs - onehot(targets)) * dloss, with one dloss for every row (the
 * caller's loss scale: 1/rows for a mean). probs may alias logits, dlogits may alias probs.
 * Targets must lie in [0, V) (checked by the caller; the CUDA kernel clamps).
 */
#ifndef KN_CROSSENTROPY_H
#define KN_CROSSENTROPY_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/device_impl.h"
#include "kernels/gpu_fn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* losses (N); probs (N,V); logits (N,V); targets (N) */
void kn_crossentropy_forward_cpu(float *losses, float *probs, const float *logits,
                                 const int32_t *targets, int N, int V);
/* dlogits (N,V) = (probs - onehot) * dloss */
void kn_crossentropy_backward_cpu(float *dlogits, const float *probs, const int32_t *targets,
                                  float dloss, int N, int V);
/* The fast path (elementwise_fast_cpu.c): rows on the process's threads, a vector exp; within
 * rounding of the reference. */
void kn_crossentropy_forward_fast(float *losses, float *probs, const float *logits,
                                  const int32_t *targets, int N, int V);
void kn_crossentropy_backward_fast(float *dlogits, const float *probs, const int32_t *targets,
                                   float dloss, int N, int V);

#ifdef SC_HAVE_CUDA
KN_GPU_FN(int, kn_crossentropy_forward_cuda,
          (kn_ctx *ctx, float *losses, float *probs, const float *logits, const int32_t *targets,
           int N, int V));
KN_GPU_FN(int, kn_crossentropy_backward_cuda,
          (kn_ctx *ctx, float *dlogits, const float *probs, const int32_t *targets, float dloss,
           int N, int V));
/* The head's 16-bit pair in a bf16 / fp16 context (others get cudaErrorInvalidValue): the
 * forward from logits already rounded to the context's 16 bits (row r at r * ld, ld >= V), as
 * PyTorch's autocast computes them; the gradient written in those 16 bits (row r at r * ld,
 * rounded to nearest even from the fp32 gradient above), as the 16-bit products would round it
 * (kn_linear_*_half_cuda then take it as is). probs and losses stay fp32. */
KN_GPU_FN(int, kn_crossentropy_forward_half_cuda,
          (kn_ctx *ctx, float *losses, float *probs, const void *logits16, int ld,
           const int32_t *targets, int N, int V));
KN_GPU_FN(int, kn_crossentropy_backward_half_cuda,
          (kn_ctx *ctx, void *dlogits16, int ld, const float *probs, const int32_t *targets,
           float dloss, int N, int V));
#endif

#ifdef __cplusplus
}
#endif

#endif /* KN_CROSSENTROPY_H */
