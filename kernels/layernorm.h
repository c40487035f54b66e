/*
 * LayerNorm over the last dimension: out = (x - mean) * rstd * w + b, eps = 1e-5.
 * Forward saves mean and rstd per row for the backward. Backward *accumulates* into dinp, dw and
 * db (+=), so a residual gradient can be placed in dinp first. Either part may be left out, for
 * a schedule that runs them at different times: dinp NULL computes only dw and db, dw and db
 * NULL only dinp; each part is then the same arithmetic in the same order as in the full call.
 */
#ifndef KN_LAYERNORM_H
#define KN_LAYERNORM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/device_impl.h"
#include "kernels/gpu_fn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (N,C), mean (N), rstd (N); inp (N,C); w, b (C) */
void kn_layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
/* dinp (N,C) +=, dw (C) +=, db (C) += */
void kn_layernorm_backward_cpu(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);
/* The fast path (elementwise_fast_cpu.c): rows, and the parameter gradients' columns, on the
 * process's threads; within rounding of the reference. */
void kn_layernorm_forward_fast(float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C);
void kn_layernorm_backward_fast(float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C);

#ifdef SC_HAVE_CUDA
KN_GPU_FN(int, kn_layernorm_forward_cuda,
          (kn_ctx *ctx, float *out, float *mean, float *rstd, const float *inp, const float *w,
           const float *b, int N, int C));
KN_GPU_FN(int, kn_layernorm_backward_cuda,
          (kn_ctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
           const float *w, const float *mean, const float *rstd, int N, int C));
#endif

#ifdef __cplusplus
}
#endif

#endif /* KN_LAYERNORM_H */
