/*
 * kn stage: a contiguous range of a model's blocks on one device, with its parameters,
 * gradients, optimizer state and activation arena. This is what a worker's runtime drives:
 *
 *   kn_stage_forward(st, slot, input, targets, n)   input  -> output
 *   kn_stage_backward(st, slot, grad_output)        grad_output -> grad_input, grads +=
 *   kn_stage_step(st)                               optimizer step; kn_stage_zero_grads()
 *
 * Memory: one allocation each for parameters, gradients and optimizer state, and one arena for
 * activations sized at creation from the blocks and the micro-batch capacity: `slots` micro-
 * batches may be in flight (forwarded, not yet backwarded) at once, each in its own slot. No
 * allocation happens after kn_stage_new(). Invariant: a stage over blocks [a, b] holds exactly
 * the parameters the whole model holds for those blocks, initialised from the model's seed.
 *
 * A backward may also run over other samples than one forward's: kn_stage_gather() assembles,
 * in a gather slot, what a forward over sample ranges of several slots would have left there
 * (UMPIPE's backward cut, which need not match the forward cut). This relies on every block's
 * forward treating samples independently (no batch statistics) and on every part of a slot
 * being sample-major per segment (see kn_block_stash_segments in block.h); both hold for every
 * block kind of kernels/model.h.
 *
 * Pointers named "device" live on the stage's device (host memory for the CPU). Calls on one
 * stage come from one thread (the device's compute thread).
 */
#ifndef KN_STAGE_H
#define KN_STAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "kernels/device.h"
#include "kernels/model.h"
#include "kernels/optim.h"

typedef struct kn_stage kn_stage;

typedef struct {
    int first_block, last_block; /* inclusive, 0-based */
    kn_device device;
    int microbatch;  /* capacity: samples per micro-batch (>= 1) */
    int slots;       /* micro-batches in flight (>= 1) */
    /* 0 (default): none. Else one more slot, index `slots`, for kn_stage_gather, holding up to
     * this many samples (it may exceed `microbatch`: a backward entry that spans several
     * forwards). Scratch and gradient buffers are sized for the larger of the two capacities. */
    int gather_microbatch;
    kn_precision precision; /* precision.h: never AUTO (fp32 by default) */
    /* Each slot also keeps its blocks' W stashes (kn_block_wstash_floats per sample), so its
     * backward may run as kn_stage_backward_input then kn_stage_backward_weight (zb1). B then
     * reuses parts of the slot's stash for W, so kn_stage_gather is refused on such a stage. */
    bool split_backward;
    /* The stage's first blocks frozen from the start (kn_stage_set_frozen_blocks): no gradient
     * or optimizer memory is allocated for them, and the stage cannot thaw them (0: none). */
    int frozen_blocks;
    kn_optim_cfg optim;
} kn_stage_cfg;

/* Defaults: one slot, no gather slot, fp32, AdamW defaults. */
kn_stage_cfg kn_stage_cfg_default(int first_block, int last_block, kn_device device,
                                  int microbatch);

/* `model` is borrowed and must outlive the stage. A bad block range or capacity is
 * SC_ERR_INVALID; memory that does not fit is SC_ERR_NOMEM / SC_ERR_TOO_LARGE. */
sc_status kn_stage_new_cfg(kn_stage **out, const kn_model *model, const kn_stage_cfg *cfg,
                           sc_err *err);
/* kn_stage_new_cfg with kn_stage_cfg_default(first_block, last_block, device, microbatch). */
sc_status kn_stage_new(kn_stage **out, const kn_model *model, int first_block, int last_block,
                       kn_device device, int microbatch, sc_err *err);
void kn_stage_destroy(kn_stage **st);

int kn_stage_first_block(const kn_stage *st);
int kn_stage_last_block(const kn_stage *st);
kn_ctx *kn_stage_ctx(kn_stage *st);
size_t kn_stage_param_count(const kn_stage *st);
/* Per sample: input elements (int32 tokens when kn_stage_input_is_tokens, else floats) and
 * output floats (per-position losses when the stage ends with the loss block). */
size_t kn_stage_input_per_sample(const kn_stage *st);
bool kn_stage_input_is_tokens(const kn_stage *st);
size_t kn_stage_output_per_sample(const kn_stage *st);
bool kn_stage_has_loss(const kn_stage *st);
/* Bytes of the parameter, gradient, optimizer and activation allocations. */
size_t kn_stage_memory_bytes(const kn_stage *st);

/* Forward of `n` samples into `slot` (n up to the slot's capacity: microbatch, or
 * gather_microbatch for the gather slot). `input` (device) holds n samples; it is
 * copied, so the caller may reuse it at once. `targets` (device, n * targets-per-sample int32)
 * is required when the stage has the loss block, else ignored (may be NULL). */
sc_status kn_stage_forward(kn_stage *st, int slot, const void *input, const int32_t *targets, int n,
                           sc_err *err);
/* Same from host memory; token ids and targets are range-checked first (SC_ERR_INVALID). */
sc_status kn_stage_forward_host(kn_stage *st, int slot, const void *input, const int32_t *targets,
                                int n, sc_err *err);
/* Output of the slot's last forward (device; n * output-per-sample floats); it stays readable
 * after the backward, until the slot's next forward. */
const float *kn_stage_output(const kn_stage *st, int slot);
sc_status kn_stage_output_to_host(kn_stage *st, int slot, float *host, sc_err *err);
/* Mean of the per-position losses of the slot's last forward (stages with the loss block). */
sc_status kn_stage_loss(kn_stage *st, int slot, float *loss, sc_err *err);

/* Scale of the loss gradient per position: by default 1 / (positions of the micro-batch), the
 * gradient of the mean. With M micro-batches of a batch, set 1 / (positions of the batch) so
 * accumulated gradients are those of the batch mean. 0 restores the default. */
void kn_stage_set_loss_scale(kn_stage *st, float per_position);

/* Backward of the slot's forward. `grad_output` (device, n * output floats) is ignored for a
 * stage that ends with the loss block (may be NULL). Gradients accumulate (+=). The input
 * gradient is then at kn_stage_grad_input() until the next backward (NULL for a stage that
 * starts at block 0: the model's input needs none). */
sc_status kn_stage_backward(kn_stage *st, int slot, const float *grad_output, sc_err *err);
sc_status kn_stage_backward_host(kn_stage *st, int slot, const float *grad_output, sc_err *err);

/* The same backward in two parts (cfg.split_backward, else SC_ERR_PRECONDITION): the input part
 * (B) computes the input gradient, as kn_stage_backward does, and keeps in the slot what the
 * weight part needs; the weight part (W), any time later, adds the parameter gradients. B then
 * W adds exactly what kn_stage_backward adds (bit for bit: the same kernel calls on the same
 * values, block.h). Between them the slot is busy: the runtime must not forward into it (a
 * forward would drop the pending W), but other slots' B and W may run in any order. W of a slot
 * whose B has not run is SC_ERR_PRECONDITION. */
sc_status kn_stage_backward_input(kn_stage *st, int slot, const float *grad_output, sc_err *err);
sc_status kn_stage_backward_input_host(kn_stage *st, int slot, const float *grad_output,
                                       sc_err *err);
sc_status kn_stage_backward_weight(kn_stage *st, int slot, sc_err *err);

/* Samples [first, first + n) of the forward that `slot` holds (counted within that forward). */
typedef struct {
    int slot;
    int first;
    int n;
} kn_stage_range;

/* Makes slot `dst` hold what one forward over the concatenation of `ranges` (in the order
 * given) would have left there, so kn_stage_backward(dst) then runs the backward of exactly
 * those samples: the input copy, the targets (stages ending with the loss), every block's stash
 * and output are copied sample range by sample range from the source slots, on the device in
 * stream order (kn_ctx_copy; memcpy on the CPU). Nothing is recomputed, so the result is the
 * forwards' own values. The sources are left as they are (a backward reads a slot without
 * changing it), so several gathers may read one slot, whether or not its backward has run.
 * `dst` is usually the gather slot (cfg.gather_microbatch) but may be any slot other than the
 * sources; a former forward in it is overwritten. SC_ERR_INVALID: a slot out of range, no
 * ranges, a source that is `dst`, a range outside its slot's forward, more samples than dst's
 * capacity. */
sc_status kn_stage_gather(kn_stage *st, int dst, const kn_stage_range *ranges, int n_ranges,
                          sc_err *err);
const float *kn_stage_grad_input(const kn_stage *st);
sc_status kn_stage_grad_input_to_host(kn_stage *st, float *host, sc_err *err);

sc_status kn_stage_zero_grads(kn_stage *st, sc_err *err);
/* grads *= a (every learnable gradient): fp16's loss scale taken out before the step. */
sc_status kn_stage_scale_grads(kn_stage *st, float a, sc_err *err);
/* One optimizer step over all parameters with the stage's optimizer config (lr may be changed
 * between steps with kn_stage_set_lr). Weight decay applies to matrices only. */
sc_status kn_stage_step(kn_stage *st, sc_err *err);
/* A model with a tied tensor (kn_model_tie): kn_stage_step first gives both copies the sum of
 * their gradients when the stage holds both. When it holds only one, this says where (offset and
 * count in the stage's flat parameters, as kn_stage_grads_to_host lays them out) and returns
 * true: the caller adds the other stage's gradient of that tensor into it before the step. */
bool kn_stage_tie_part(const kn_stage *st, size_t *offset, size_t *count);
void kn_stage_set_lr(kn_stage *st, float lr);

/* Freezing (a frozen prefix of the model): the stage's first `count` blocks (cfg.frozen_blocks
 * to block count) get no gradients and no optimizer updates, and backward stops before them; the
 * stage then yields no input gradient (kn_stage_grad_input is NULL), as the blocks before it are
 * frozen too. Gradients already accumulated for those blocks are left as they are. */
sc_status kn_stage_set_frozen_blocks(kn_stage *st, int count, sc_err *err);
int kn_stage_frozen_blocks(const kn_stage *st);

/* Parameters / gradients as one flat array in block order (host copies; the gradients of blocks
 * frozen from the start, cfg.frozen_blocks, read as zeros and are not written). */
sc_status kn_stage_params_to_host(kn_stage *st, float *host, sc_err *err);
sc_status kn_stage_params_from_host(kn_stage *st, const float *host, sc_err *err);
sc_status kn_stage_grads_to_host(kn_stage *st, float *host, sc_err *err);
/* Replaces the gradients (an all-reduce's result, say). */
sc_status kn_stage_grads_from_host(kn_stage *st, const float *host, sc_err *err);
/* The optimizer state (kn_stage_opt_state_count floats: AdamW's m then v, each in parameter
 * order; SGD's velocity; zeros, not written, for blocks frozen from the start) and the count of
 * steps taken (AdamW's bias correction), for checkpoints kept by the caller. */
size_t kn_stage_opt_state_count(const kn_stage *st);
sc_status kn_stage_opt_state_to_host(kn_stage *st, float *host, sc_err *err);
sc_status kn_stage_opt_state_from_host(kn_stage *st, const float *host, sc_err *err);
uint64_t kn_stage_step_count(const kn_stage *st);
sc_status kn_stage_set_step_count(kn_stage *st, uint64_t steps, sc_err *err);

/* The one contiguous parameter and gradient allocations (device, block order), for transports:
 * all-reduce of the gradients of a replicated stage, broadcast or stashing of weights. The
 * parameters are kn_stage_param_count floats; the gradients kn_stage_grad_count, those of the
 * blocks after the ones frozen from the start. Valid for the stage's lifetime; write them only
 * between steps. */
float *kn_stage_params_device(kn_stage *st);
float *kn_stage_grads_device(kn_stage *st);
size_t kn_stage_grad_count(const kn_stage *st);
kn_optim_kind kn_stage_optim_kind(const kn_stage *st);

/* Squared L2 norm of each block's gradient (kn_stage_last_block - kn_stage_first_block + 1
 * values, each square added in double: kn_sq_sum_cpu), the per-layer statistic the freezing
 * policy reads. On a GPU the sums run on the device and only the values come back. */
sc_status kn_stage_grad_sq_norms(kn_stage *st, double *per_block, sc_err *err);

/* Parameter file: a small header (magic, block range, count, optimizer kind and step) then the
 * parameters and the optimizer state, so a resumed stage continues exactly. Loading checks
 * that the file was saved from the same block range with the same parameter count; the
 * optimizer state is restored when the stage uses the same optimizer, else left fresh. */
sc_status kn_stage_save(kn_stage *st, const char *path, sc_err *err);
sc_status kn_stage_load(kn_stage *st, const char *path, sc_err *err);

#endif /* KN_STAGE_H */
