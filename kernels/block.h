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

/* What a stage holding the block allocates for it besides its parameters, their state and its
 * activation slots, for micro-batches of B: its workspace, the stage's two gradient buffers at
 * its size, and on a GPU in bf16 / fp16 the 16-bit copies of its largest product's operands
 * (linear.cu's scratch; 0 for Llama blocks, whose products are not counted yet). Bytes. */
size_t kn_block_scratch_bytes(const kn_block *blk, int B, bool gpu, kn_precision prec);

/* Most segments a block's stash has (kn_block_stash_segments). */
#define KN_STASH_SEGMENTS_MAX 16

/* The layout of the stash of B samples: *n_segments consecutive segments, segment k holding
 * per_sample[k] floats of each of the B samples, sample-major ((B, per_sample[k])), so segment k
 * starts at B * (per_sample[0] + ... + per_sample[k-1]). The per-sample sizes sum to
 * blk->stash_floats; a block without a stash has none. The stash as a whole is therefore not
 * sample-major when a block keeps several tensors (the GPT blocks): copying samples between
 * stashes of different B goes segment by segment (kn_stage_gather). The input, the targets and
 * every block's output are sample-major as a whole ((B, in_floats), (B, out_floats)). */
void kn_block_stash_segments(const kn_block *blk, size_t per_sample[KN_STASH_SEGMENTS_MAX],
                             int *n_segments);

sc_status kn_block_forward(kn_ctx *c, const kn_block *blk, const float *params, const void *in,
                           float *out, float *stash, const int32_t *targets, float *ws, int B,
                           sc_err *err);

/* dloss: gradient of the loss for every per-position loss (blocks with has_loss; dout unused) */
sc_status kn_block_backward(kn_ctx *c, const kn_block *blk, const float *params, float *grads,
                            const void *in, const float *stash, const float *out, const float *dout,
                            float *din, const int32_t *targets, float *ws, int B, float dloss,
                            sc_err *err);

/* The parts of a block's backward, for schedules that split it (zb1): B, the input gradient,
 * on the pipeline's critical path, and W, the parameter gradients, deferred. KN_BWD_INPUT then
 * KN_BWD_WEIGHT on the same slot adds to `grads` exactly what KN_BWD_FULL adds (the same op
 * calls on the same values, so bit for bit on every kernel set): what W reads that B computes
 * (the output gradients of the parameterised ops) is kept in the block's W stash, `wst`,
 * kn_block_wstash_floats() floats per sample, written by B and read by W; the rest of what W
 * reads (the input, stash, output, targets) stays in the slot until W has run, and gradients
 * W can recompute from it elementwise (cross-entropy's) are recomputed instead of kept. B
 * writes what W reads over stash parts only B reads where they are large enough (a GPT block's
 * qkv and pre-GELU activations become their gradients, its attention probabilities and a
 * layer's stashed MLP input its output gradients), so after B the stash no longer holds the
 * forward's, and a GPT layer's W stash is empty (NH * T >= C): a slot under zb1 is the size of
 * the fused backward's. Cheap weight gradients whose inputs W would otherwise keep run in B:
 * LayerNorm's (dln and the LayerNorm input would outlive B) and the embedding's (no input
 * gradient: its whole backward).
 * KN_BWD_WEIGHT neither reads `dout` nor writes `din`; KN_BWD_FULL ignores `wst` (may be NULL).
 * A block kind without a split of its own would run its full backward as B and nothing as W
 * (every kind of model.h has a real split). */
typedef enum {
    KN_BWD_FULL = 0,
    KN_BWD_INPUT,  /* B */
    KN_BWD_WEIGHT, /* W */
} kn_bwd_part;

/* Per sample (the W stash of B samples is sample-major: B * this many floats). */
size_t kn_block_wstash_floats(const kn_block *blk);

sc_status kn_block_backward_part(kn_ctx *c, const kn_block *blk, kn_bwd_part part,
                                 const float *params, float *grads, const void *in,
                                 const float *stash, const float *out, const float *dout,
                                 float *din, float *wst, const int32_t *targets, float *ws, int B,
                                 float dloss, sc_err *err);

#endif /* KN_BLOCK_H */
