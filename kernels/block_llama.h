/*
 * kn llama blocks (internal to kernels/): forward and backward of the Llama block kinds
 * (KN_BLOCK_TOK_EMBED, KN_BLOCK_LLAMA_LAYER, KN_BLOCK_LLAMA_HEAD) composed from the linear,
 * cross-entropy and Llama ops; block.c sends those kinds here. Same memory contract as block.h,
 * on the CPU and on CUDA devices.
 */
#ifndef KN_BLOCK_LLAMA_H
#define KN_BLOCK_LLAMA_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/device_impl.h"
#include "kernels/model.h"

size_t kn_llama_ws_floats(const kn_block *blk, int B, bool gpu);
/* Appends the per-sample stash segments (see kn_block_stash_segments). */
void kn_llama_stash_segments(const kn_block *blk, size_t *per_sample, int *n);
/* Per-sample stash floats of a layer and of a head (the builder's stash_floats). */
size_t kn_llama_layer_stash(int T, int C, int NH, int NKV, int D, int FF);
size_t kn_llama_head_stash(int T, int C, int V);

sc_status kn_llama_forward(kn_ctx *c, const kn_block *blk, const float *params, const void *in,
                           float *out, float *stash, const int32_t *targets, float *ws, int B,
                           sc_err *err);
sc_status kn_llama_backward(kn_ctx *c, const kn_block *blk, const float *params, float *grads,
                            const void *in, const float *stash, const float *dout, float *din,
                            const int32_t *targets, float *ws, int B, float dloss, sc_err *err);

#endif /* KN_BLOCK_LLAMA_H */
