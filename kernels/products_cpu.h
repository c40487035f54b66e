/*
 * The CPU's matrix products in the context's precision (precision.h): the linear layer, the
 * GPT attention and the convolution as the blocks call them on a CPU context. fp32 and tf32
 * call the fast or the reference kernel (kn_ctx_set_cpu_kernels) directly. bf16 and fp16 round
 * the products' operands first, into copies (the parameters and the stashed activations stay
 * fp32), then run the same fp32 kernel: the roundings the GPU's 16-bit tensor cores make, with
 * fp32 accumulation. Bias gradients are column sums of the unrounded output gradient, as on the
 * GPU. The attention also rounds its stashed probabilities, which the GPU keeps in 16 bits.
 * Each returns SC_ERR_NOMEM when the copies do not fit.
 */
#ifndef KN_PRODUCTS_CPU_H
#define KN_PRODUCTS_CPU_H

#include "common/sc_status.h"
#include "kernels/conv2d.h"
#include "kernels/device_impl.h"

sc_status kn_cpu_linear_forward(const kn_ctx *c, float *out, const float *inp, const float *w,
                                const float *b, int N, int IC, int OC, sc_err *err);
sc_status kn_cpu_linear_backward_input(const kn_ctx *c, float *dinp, const float *dout,
                                       const float *w, int N, int IC, int OC, sc_err *err);
sc_status kn_cpu_linear_backward_weight(const kn_ctx *c, float *dw, float *db, const float *dout,
                                        const float *inp, int N, int IC, int OC, sc_err *err);

sc_status kn_cpu_attention_forward(const kn_ctx *c, float *out, float *att, const float *qkv, int B,
                                   int T, int C, int NH, sc_err *err);
sc_status kn_cpu_attention_backward(const kn_ctx *c, float *dqkv, float *ws, const float *dout,
                                    const float *qkv, const float *att, int B, int T, int C, int NH,
                                    sc_err *err);

sc_status kn_cpu_conv2d_forward(const kn_ctx *c, float *out, float *col, const float *inp,
                                const float *w, const float *b, int B, const kn_conv2d_shape *s,
                                sc_err *err);
sc_status kn_cpu_conv2d_backward_input(const kn_ctx *c, float *dinp, float *col, const float *dout,
                                       const float *w, int B, const kn_conv2d_shape *s,
                                       sc_err *err);
sc_status kn_cpu_conv2d_backward_weight(const kn_ctx *c, float *dw, float *db, float *col,
                                        const float *dout, const float *inp, int B,
                                        const kn_conv2d_shape *s, sc_err *err);

#endif /* KN_PRODUCTS_CPU_H */
