/*
 * 2-D convolution (NCHW, square kernel K, stride, zero padding) by im2col + GEMM, one sample
 * at a time so the column buffer stays Cin*K*K*Ho*Wo floats whatever the batch.
 * Backward: input gradient (overwrites dinp) and weight gradient (accumulates) kept separate.
 * MaxPool2d (square window K, stride S, no padding): ties go to the first element of the window
 * in row-major order, on the CPU and the GPU alike; backward recomputes the argmax from the
 * input, so nothing is stashed. Flatten is a view: NCHW is already row-major per sample, so a
 * (B,C,H,W) tensor *is* the (B,C*H*W) matrix and no op runs.
 */
#ifndef KN_CONV2D_H
#define KN_CONV2D_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/device_impl.h"
#include "kernels/gpu_fn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int cin, h, w; /* input channels and size */
    int cout, k, stride, pad;
} kn_conv2d_shape;

static inline int kn_conv2d_out_h(const kn_conv2d_shape *s)
{
    return (s->h + 2 * s->pad - s->k) / s->stride + 1;
}

static inline int kn_conv2d_out_w(const kn_conv2d_shape *s)
{
    return (s->w + 2 * s->pad - s->k) / s->stride + 1;
}
/* column buffer, floats: cin*k*k*out_h*out_w */
size_t kn_conv2d_col_floats(const kn_conv2d_shape *s);

/* out (B,cout,Ho,Wo); inp (B,cin,h,w); w (cout,cin,k,k); b (cout); col: scratch */
void kn_conv2d_forward_cpu(float *out, float *col, const float *inp, const float *w, const float *b,
                           int B, const kn_conv2d_shape *s);
/* dinp (B,cin,h,w) = gradient (overwritten) */
void kn_conv2d_backward_input_cpu(float *dinp, float *col, const float *dout, const float *w, int B,
                                  const kn_conv2d_shape *s);
/* dw += , db += */
void kn_conv2d_backward_weight_cpu(float *dw, float *db, float *col, const float *dout,
                                   const float *inp, int B, const kn_conv2d_shape *s);
/* The same three with the GEMM on the BLAS: within rounding of the above, not bit for bit (the
 * reference itself when the build has no BLAS). */
void kn_conv2d_forward_fast(float *out, float *col, const float *inp, const float *w,
                            const float *b, int B, const kn_conv2d_shape *s);
void kn_conv2d_backward_input_fast(float *dinp, float *col, const float *dout, const float *w,
                                   int B, const kn_conv2d_shape *s);
void kn_conv2d_backward_weight_fast(float *dw, float *db, float *col, const float *dout,
                                    const float *inp, int B, const kn_conv2d_shape *s);

/* out (B,C,Ho,Wo) with Ho = (H-K)/S+1 */
void kn_maxpool2d_forward_cpu(float *out, const float *inp, int B, int C, int H, int W, int K,
                              int S);
/* dinp (B,C,H,W) = gradient (overwritten) */
void kn_maxpool2d_backward_cpu(float *dinp, const float *dout, const float *inp, int B, int C,
                               int H, int W, int K, int S);

#ifdef SC_HAVE_CUDA
KN_GPU_FN(int, kn_conv2d_forward_cuda,
          (kn_ctx *ctx, float *out, float *col, const float *inp, const float *w, const float *b,
           int B, const kn_conv2d_shape *s));
KN_GPU_FN(int, kn_conv2d_backward_input_cuda,
          (kn_ctx *ctx, float *dinp, float *col, const float *dout, const float *w, int B,
           const kn_conv2d_shape *s));
KN_GPU_FN(int, kn_conv2d_backward_weight_cuda,
          (kn_ctx *ctx, float *dw, float *db, float *col, const float *dout, const float *inp,
           int B, const kn_conv2d_shape *s));
KN_GPU_FN(int, kn_maxpool2d_forward_cuda,
          (kn_ctx *ctx, float *out, const float *inp, int B, int C, int H, int W, int K, int S));
KN_GPU_FN(int, kn_maxpool2d_backward_cuda,
          (kn_ctx *ctx, float *dinp, const float *dout, const float *inp, int B, int C, int H,
           int W, int K, int S));
#endif

#ifdef __cplusplus
}
#endif

#endif /* KN_CONV2D_H */
