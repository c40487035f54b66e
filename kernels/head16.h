/*
 * A language-model head (a linear layer into the vocabulary, then softmax cross-entropy) on a
 * GPU in bf16 / fp16, as PyTorch's autocast runs it:
 * - forward: the logits come out of the product in 16 bits (rounded from its fp32 sums), and the
 *   softmax reads them so (half the bytes of fp32 logits, read twice);
 * - backward: the gradient of the logits is written once, in 16 bits, and both products (input
 *   and weight gradients) read it as it is, where the fp32 way writes (N, V) floats and converts
 *   them to 16 bits once per product. The products round that operand to the same 16 bits
 *   either way.
 * Both keep their 16-bit (N, V) matrices with rows kn_head16_ld(V) apart, a multiple of 64: an
 * odd vocabulary (GPT-2's 50,257) would leave cuBLAS rows it cannot load aligned, several times
 * slower. The CPU's emulation rounds the logits the same way (block.c).
 * For block.c and block_llama.c (kernels/ only).
 */
#ifndef KN_HEAD16_H
#define KN_HEAD16_H

#include <stdbool.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "kernels/device_impl.h"

/* Whether this path runs: a CUDA context in bf16 or fp16. */
bool kn_head16_applies(const kn_ctx *c);

/* The row stride of the 16-bit (N, V) matrices: V rounded up to a multiple of 64. N rows of it
 * fit in the head's workspace of N*V floats. */
int kn_head16_ld(int V);

/* The forward: logits16 (scratch for N rows of kn_head16_ld(V) 16-bit values) = x (N,C) w^T
 * (V,C) rounded to 16 bits; probs (N,V, fp32) their softmax and losses (N) the cross-entropy
 * against the targets. */
sc_status kn_head16_forward(kn_ctx *c, const char *block, float *losses, float *probs,
                            void *logits16, const float *x, const float *w, const int32_t *targets,
                            int N, int C, int V, sc_err *err);

/* The head's backward products: the input gradient dx (N,C) when `input`, dw (V,C) += when
 * `weight`, from probs (N,V), the targets (N), x (N,C, the head's normalized input) and w (V,C).
 * dlogits16 is scratch for N rows of ld 16-bit values (ld >= V: kn_head16_ld(V), or V where
 * the caller has no room for more). `block` names the block in errors. */
sc_status kn_head16_backward(kn_ctx *c, const char *block, bool input, bool weight, float *dx,
                             float *dw, void *dlogits16, int ld, const float *probs,
                             const int32_t *targets, float dloss, const float *x, const float *w,
                             int N, int C, int V, sc_err *err);

#endif /* KN_HEAD16_H */
