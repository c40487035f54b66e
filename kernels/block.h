/*
 * kn block (internal to kernels/): forward and backward of one model block on an execution
 * context, composed from the ops. Used by stage.c and profile.c; not part of the public API.
 *
 * Memory is the caller's: `stash` holds blk->stash_floats * B floats kept from forward to
 * backward; `ws` is scratch of kn_block_ws_floats() floats, free to reuse between calls.
 * Backward adds (+=) into `grads` and overwrites `din` (NULL when the block's input is tokens).
 */
#ifndef KN_BLOCK_H
#define KN_BLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/device_impl.h"
#include "kernels/model.h"

size_t kn_block_ws_floats(const kn_block *blk, int B, bool gpu);

sc_status kn_block_forward(kn_ctx *c, const kn_block *blk, const float *params, const void *in,
                           float *out, float *stash, const int32_t *targets, float *ws, int B,
                           sc_err *err);

/* dloss: gradient of the loss for every per-position loss (blocks with has_loss; dout unused) */
sc_status kn_block_backward(kn_ctx *c, const kn_block *blk, const float *params, float *grads,
                            const void *in, const float *stash, const float *out, const float *dout,
                            float *din, const int32_t *targets, float *ws, int B, float dloss,
                            sc_err *err);

#endif /* KN_BLOCK_H */
