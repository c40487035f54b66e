/*
 * Elementwise ops: GELU (tanh approximation, as GPT-2), ReLU, residual add.
 * Every function allows its output to alias an input of the same shape (pure elementwise).
 * ReLU's backward uses the forward *output* (out > 0), so no pre-activation needs stashing.
 */
#ifndef KN_ACTIVATION_H
#define KN_ACTIVATION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/device_impl.h"
#include "kernels/gpu_fn.h"

#ifdef __cplusplus
extern "C" {
#endif

void kn_gelu_forward_cpu(float *out, const float *inp, size_t n);
/* dinp = gelu'(inp) * dout; element by element, so dinp may be inp or dout (in place) */
void kn_gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n);
void kn_relu_forward_cpu(float *out, const float *inp, size_t n);
/* dinp = (out > 0) * dout */
void kn_relu_backward_cpu(float *dinp, const float *out, const float *dout, size_t n);
/* out = a + b */
void kn_residual_forward_cpu(float *out, const float *a, const float *b, size_t n);
/* da += dout; db += dout (either may be NULL) */
void kn_residual_backward_cpu(float *da, float *db, const float *dout, size_t n);
/* The fast path (elementwise_fast_cpu.c): threaded; GELU vectorised, within rounding of the
 * reference; the residual add the reference's bits. */
void kn_gelu_forward_fast(float *out, const float *inp, size_t n);
void kn_gelu_backward_fast(float *dinp, const float *inp, const float *dout, size_t n);
void kn_residual_forward_fast(float *out, const float *a, const float *b, size_t n);

#ifdef SC_HAVE_CUDA
KN_GPU_FN(int, kn_gelu_forward_cuda, (kn_ctx *ctx, float *out, const float *inp, size_t n));
KN_GPU_FN(int, kn_gelu_backward_cuda,
          (kn_ctx *ctx, float *dinp, const float *inp, const float *dout, size_t n));
KN_GPU_FN(int, kn_relu_forward_cuda, (kn_ctx *ctx, float *out, const float *inp, size_t n));
KN_GPU_FN(int, kn_relu_backward_cuda,
          (kn_ctx *ctx, float *dinp, const float *out, const float *dout, size_t n));
KN_GPU_FN(int, kn_residual_forward_cuda,
          (kn_ctx *ctx, float *out, const float *a, const float *b, size_t n));
KN_GPU_FN(int, kn_residual_backward_cuda,
          (kn_ctx *ctx, float *da, float *db, const float *dout, size_t n));
#endif

#ifdef __cplusplus
}
#endif

#endif /* KN_ACTIVATION_H */
