/*
 * The backward of a language-model head (a linear layer into the vocabulary, then softmax
 * cross-entropy) on a GPU in bf16 / fp16: the gradient of the logits is written once, in 16
 * bits, and both products (input and weight gradients) read it as it is. The fp32 way writes
 * (N, V) floats and converts them to 16 bits twice, once per product: for GPT-2's 50,257-word
 * vocabulary that is most of the head's time. The numbers are the same: the products round
 * their operands to the same 16 bits either way. For block.c and block_llama.c (kernels/ only).
 */
#ifndef KN_HEAD16_H
#define KN_HEAD16_H

#include <stdbool.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "kernels/device_impl.h"

/* Whether this path runs: a CUDA context in bf16 or fp16. */
bool kn_head16_applies(const kn_ctx *c);

/* The head's backward products: the input gradient dx (N,C) when `input`, dw (V,C) += when
 * `weight`, from probs (N,V), the targets (N), x (N,C, the head's normalized input) and w (V,C).
 * dlogits16 is scratch for N*V 16-bit values (half the bytes of the fp32 gradient). `block`
 * names the block in errors. */
sc_status kn_head16_backward(kn_ctx *c, const char *block, bool input, bool weight, float *dx,
                             float *dw, void *dlogits16, const float *probs, const int32_t *targets,
                             float dloss, const float *x, const float *w, int N, int C, int V,
                             sc_err *err);

#endif /* KN_HEAD16_H */
