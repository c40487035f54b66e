/*
 * Linear layer: out = inp @ w^T + b. The backward is two separate products so that a pipeline
 * schedule may run them at different times: the input gradient (overwrites dinp) and the weight
 * gradient (accumulates into dw and db, so micro-batches add up).
 * On the GPU the products go to cuBLAS (TF32 tensor cores when the context allows it).
 */
#ifndef KN_LINEAR_H
#define KN_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/device_impl.h"
#include "kernels/gpu_fn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (N,OC); inp (N,IC); w (OC,IC); b (OC) or NULL */
void kn_linear_forward_cpu(float *out, const float *inp, const float *w, const float *b, int N,
                           int IC, int OC);
/* dinp (N,IC) = dout (N,OC) @ w (OC,IC) */
void kn_linear_backward_input_cpu(float *dinp, const float *dout, const float *w, int N, int IC,
                                  int OC);
/* dw (OC,IC) += dout^T @ inp; db (OC) += column sums of dout (db may be NULL) */
void kn_linear_backward_weight_cpu(float *dw, float *db, const float *dout, const float *inp, int N,
                                   int IC, int OC);
/* The same three on the BLAS: results within rounding of the reference above, but not in its
 * order of additions (so not bit for bit; without BLAS in the build, they are the reference). */
void kn_linear_forward_fast(float *out, const float *inp, const float *w, const float *b, int N,
                            int IC, int OC);
void kn_linear_backward_input_fast(float *dinp, const float *dout, const float *w, int N, int IC,
                                   int OC);
void kn_linear_backward_weight_fast(float *dw, float *db, const float *dout, const float *inp,
                                    int N, int IC, int OC);

#ifdef SC_HAVE_CUDA
KN_GPU_FN(int, kn_linear_forward_cuda,
          (kn_ctx *ctx, float *out, const float *inp, const float *w, const float *b, int N, int IC,
           int OC));
KN_GPU_FN(int, kn_linear_backward_input_cuda,
          (kn_ctx *ctx, float *dinp, const float *dout, const float *w, int N, int IC, int OC));
KN_GPU_FN(int, kn_linear_backward_weight_cuda,
          (kn_ctx *ctx, float *dw, float *db, const float *dout, const float *inp, int N, int IC,
           int OC));
/* Both backward products at once (kn_linear_backward_input_cuda, then _weight_cuda): in bf16 /
 * fp16, dout is converted to 16 bits once for the two. */
KN_GPU_FN(int, kn_linear_backward_cuda,
          (kn_ctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
           const float *w, int N, int IC, int OC));
/* The head's products in a bf16 / fp16 context (other precisions, or ldo / ldd under OC, get
 * cudaErrorInvalidValue), with 16-bit rows padded to a stride that is a multiple of 8 (GPT-2's
 * vocabulary of 50,257 would leave every dimension cuBLAS sees odd, and its kernels unaligned
 * and several times slower):
 * - forward: out16 (N rows, ldo apart) = inp w^T rounded to the context's 16 bits; the columns
 *   from OC to ldo hold zeros;
 * - backward: from an output gradient dout16 (N rows, ldd apart) already in those 16 bits
 *   (kn_crossentropy_backward_half_cuda writes it so), whose columns from OC to ldd must be
 *   zeros; only w or inp is converted. No bias. */
KN_GPU_FN(int, kn_linear_forward_half_out_cuda,
          (kn_ctx *ctx, void *out16, int ldo, const float *inp, const float *w, int N, int IC,
           int OC));
KN_GPU_FN(int, kn_linear_backward_input_half_cuda,
          (kn_ctx *ctx, float *dinp, const void *dout16, int ldd, const float *w, int N, int IC,
           int OC));
KN_GPU_FN(int, kn_linear_backward_weight_half_cuda,
          (kn_ctx *ctx, float *dw, const void *dout16, int ldd, const float *inp, int N, int IC,
           int OC));
#endif

#ifdef __cplusplus
}
#endif

#endif /* KN_LINEAR_H */
