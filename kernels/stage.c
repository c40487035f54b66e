/*
 * kn stage: memory layout and the forward/backward walk over a block range.
 *
 * Slot layout (one per micro-batch in flight, `slot_bytes` apart in one arena):
 *   [input copy][targets][block first: stash, output][block first+1: stash, output]...
 * each part sized for the capacity; a smaller micro-batch uses the front of each part.
 * The optional gather slot (cfg.gather_microbatch) follows the regular ones with the same
 * layout for its own capacity, so its part offsets differ (tgt_off[1], stash_off / out_off of
 * layout 1).
 * Backward ping-pongs between two gradient buffers sized for the widest block boundary, so a
 * block's dout and din never alias.
 */
#include "kernels/stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/activation.h"
#include "kernels/block.h"
#include "kernels/device_impl.h"

struct kn_stage {
    const kn_model *model;
    kn_stage_cfg cfg;
    kn_ctx *ctx;
    int nb;
    const kn_block **blocks;
    size_t *poff; /* parameter offset of each block in the stage's range */
    size_t nparams;
    /* Parameters before the first block that learns (cfg.frozen_blocks): gradients and
     * optimizer state are kept only from there on, nlearn of them (opt: per state array). */
    size_t learn_off, nlearn;
    float *params, *grads, *opt;
    double *norms; /* CUDA: nb doubles on the device for kn_stage_grad_sq_norms */
    char *arena;
    size_t slot_bytes; /* a regular slot; the gather slot (if any) comes after the last one */
    int nslots;        /* cfg.slots, plus one with a gather slot */
    /* Part offsets in bytes from a slot's start, per layout l: 0 the regular slots (capacity
     * cfg.microbatch), 1 the gather slot (cfg.gather_microbatch). The input copy is at 0. */
    size_t tgt_off[2];
    size_t *stash_off, *out_off; /* [2 * nb]: block i of layout l at [l * nb + i] */
    size_t *wst_off;             /* [2 * nb] the same for the W stashes (cfg.split_backward) */
    float *gbuf[2];
    float *ws;
    size_t ws_floats, gbuf_floats;
    const float *grad_in;
    int grad_in_n;
    int *slot_n;    /* samples of the slot's last forward; 0 = none yet */
    bool *slot_due; /* the slot's forward still awaits its backward (its B when split) */
    bool *slot_wdue; /* split backward: the slot's B has run, its W not yet */
    int tps;        /* targets per sample */
    int t;          /* optimizer steps taken */
    int frozen;     /* leading blocks without gradients or updates */
    float loss_scale;
    float *host_losses;
    size_t mem_bytes;
    /* CUDA AdamW: the learning tensors' table for one launch over all of them (optim.h), made
     * for `adamw_frozen` leading frozen blocks (-1: none made; 0 tensors: not contiguous) */
    void *adamw_segs;
    int adamw_nseg, adamw_frozen;
    size_t adamw_first, adamw_n; /* the learning range it covers */
};

kn_stage_cfg kn_stage_cfg_default(int first_block, int last_block, kn_device device, int microbatch)
{
    kn_stage_cfg c;
    memset(&c, 0, sizeof c);
    c.first_block = first_block;
    c.last_block = last_block;
    c.device = device;
    c.microbatch = microbatch;
    c.slots = 1;
    c.gather_microbatch = 0;
    c.precision = KN_PREC_FP32;
    c.optim = kn_optim_adamw_default();
    return c;
}

static size_t align_up(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* Part offsets of layout l for slots of `cap` samples; returns the slot's bytes. */
static size_t layout_slot(kn_stage *st, int l, size_t cap)
{
    size_t off = align_up(st->blocks[0]->in_floats * cap * 4); /* the input copy */
    st->tgt_off[l] = off;
    off += align_up((size_t)st->tps * cap * 4);
    for (int i = 0; i < st->nb; i++) {
        st->stash_off[(size_t)l * st->nb + i] = off;
        off += align_up(st->blocks[i]->stash_floats * cap * 4);
        st->out_off[(size_t)l * st->nb + i] = off;
        off += align_up(st->blocks[i]->out_floats * cap * 4);
        st->wst_off[(size_t)l * st->nb + i] = off;
        if (st->cfg.split_backward)
            off += align_up(kn_block_wstash_floats(st->blocks[i]) * cap * 4);
    }
    return off;
}

static sc_status alloc_floats(kn_stage *st, size_t n, float **out, sc_err *err)
{
    void *p;
    SC_CHECK(kn_ctx_alloc(st->ctx, n * sizeof(float), &p, err));
    st->mem_bytes += n * sizeof(float);
    *out = p;
    return SC_OK;
}

/* Block i's gradients (i >= cfg.frozen_blocks: the frozen blocks before keep none). */
static float *grad_of(const kn_stage *st, int i)
{
    return st->grads + (st->poff[i] - st->learn_off);
}

sc_status kn_stage_new_cfg(kn_stage **out, const kn_model *model, const kn_stage_cfg *cfg,
                           sc_err *err)
{
    *out = NULL;
    int nblocks = kn_model_block_count(model);
    if (cfg->first_block < 0 || cfg->last_block >= nblocks || cfg->first_block > cfg->last_block)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "stage blocks [%d, %d] are not a range inside the model's %d blocks "
                       "(valid: 0 <= first <= last <= %d)",
                       cfg->first_block, cfg->last_block, nblocks, nblocks - 1);
    if (cfg->microbatch < 1 || cfg->microbatch > (1 << 20) || cfg->slots < 1 || cfg->slots > 1024)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "stage micro-batch %d / slots %d out of range (valid: 1..1048576 / 1..1024)",
                       cfg->microbatch, cfg->slots);
    if (cfg->gather_microbatch < 0 || cfg->gather_microbatch > (1 << 20))
        return SC_ERRF(err, SC_ERR_INVALID,
                       "stage gather_microbatch %d out of range (valid: 0 for no gather slot, or "
                       "1..1048576)",
                       cfg->gather_microbatch);
    kn_stage *st = calloc(1, sizeof *st);
    SC_ALLOC_CHECK(st, err);
    sc_status rc;
    st->model = model;
    st->cfg = *cfg;
    st->nb = cfg->last_block - cfg->first_block + 1;
    st->tps = kn_model_targets_per_sample(model);
    st->blocks = calloc(st->nb, sizeof *st->blocks);
    st->poff = calloc(st->nb, sizeof *st->poff);
    st->nslots = cfg->slots + (cfg->gather_microbatch > 0 ? 1 : 0);
    st->stash_off = calloc(2 * (size_t)st->nb, sizeof *st->stash_off);
    st->out_off = calloc(2 * (size_t)st->nb, sizeof *st->out_off);
    st->wst_off = calloc(2 * (size_t)st->nb, sizeof *st->wst_off);
    st->slot_wdue = calloc(st->nslots, sizeof *st->slot_wdue);
    st->slot_n = calloc(st->nslots, sizeof *st->slot_n);
    st->slot_due = calloc(st->nslots, sizeof *st->slot_due);
    if (!st->blocks || !st->poff || !st->stash_off || !st->out_off || !st->wst_off || !st->slot_n ||
        !st->slot_due || !st->slot_wdue) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory creating a stage");
        goto fail;
    }
    SC_CHECK_GOTO(kn_ctx_new(&st->ctx, cfg->device, cfg->precision, err), fail);
    kn_ctx_set_cpu_kernels(st->ctx, kn_model_cpu_reference(model) ? KN_CPU_KERNELS_REFERENCE
                                                                  : KN_CPU_KERNELS_FAST);
    bool gpu = cfg->device.kind == KN_DEV_CUDA;
    /* scratch and gradient buffers serve the largest micro-batch of any slot */
    size_t cap = (size_t)(cfg->gather_microbatch > cfg->microbatch ? cfg->gather_microbatch
                                                                   : cfg->microbatch);
    for (int i = 0; i < st->nb; i++) {
        const kn_block *b = kn_model_block(model, cfg->first_block + i);
        st->blocks[i] = b;
        st->poff[i] = st->nparams;
        st->nparams += b->params;
        size_t ws = kn_block_ws_floats(b, (int)cap, gpu);
        if (ws > st->ws_floats)
            st->ws_floats = ws;
        size_t g = (b->in_floats > b->out_floats ? b->in_floats : b->out_floats) * cap;
        if (g > st->gbuf_floats)
            st->gbuf_floats = g;
    }
    st->slot_bytes = layout_slot(st, 0, (size_t)cfg->microbatch);
    size_t gather_bytes =
        cfg->gather_microbatch > 0 ? layout_slot(st, 1, (size_t)cfg->gather_microbatch) : 0;
    st->host_losses =
        malloc(kn_model_block(model, cfg->last_block)->out_floats * cap * sizeof(float));
    if (st->host_losses == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory creating a stage");
        goto fail;
    }
    if (cfg->frozen_blocks < 0 || cfg->frozen_blocks > st->nb) {
        rc = SC_ERRF(err, SC_ERR_INVALID, "cannot freeze %d blocks of a %d-block stage",
                     cfg->frozen_blocks, st->nb);
        goto fail;
    }
    st->frozen = cfg->frozen_blocks;
    st->learn_off = st->frozen < st->nb ? st->poff[st->frozen] : st->nparams;
    st->nlearn = st->nparams - st->learn_off;
    size_t nopt = st->nlearn * (size_t)kn_optim_state_per_param(cfg->optim.kind);
    SC_CHECK_GOTO(alloc_floats(st, st->nparams, &st->params, err), fail);
    SC_CHECK_GOTO(alloc_floats(st, st->nlearn, &st->grads, err), fail);
    SC_CHECK_GOTO(alloc_floats(st, nopt, &st->opt, err), fail);
    SC_CHECK_GOTO(alloc_floats(st, st->gbuf_floats, &st->gbuf[0], err), fail);
    SC_CHECK_GOTO(alloc_floats(st, st->gbuf_floats, &st->gbuf[1], err), fail);
    SC_CHECK_GOTO(alloc_floats(st, st->ws_floats, &st->ws, err), fail);
    if (gpu) {
        void *norms;
        SC_CHECK_GOTO(kn_ctx_alloc(st->ctx, (size_t)st->nb * sizeof(double), &norms, err), fail);
        st->norms = norms;
    }
    void *arena;
    size_t arena_bytes = st->slot_bytes * cfg->slots + gather_bytes;
    SC_CHECK_GOTO(kn_ctx_alloc(st->ctx, arena_bytes, &arena, err), fail);
    st->arena = arena;
    st->mem_bytes += arena_bytes;

    /* initial parameters, block by block on the host: from the model's seed or its checkpoint */
    float *host = malloc(st->nparams * sizeof *host + 1);
    if (host == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory initialising %zu parameters", st->nparams);
        goto fail;
    }
    for (int i = 0; i < st->nb && rc == SC_OK; i++)
        rc = kn_model_fill_block(model, cfg->first_block + i, host + st->poff[i], err);
    if (rc == SC_OK)
        rc = kn_ctx_upload(st->ctx, st->params, host, st->nparams * sizeof *host, err);
    free(host);
    if (rc != SC_OK)
        goto fail;
    *out = st;
    return SC_OK;
fail:
    kn_stage_destroy(&st);
    return rc;
}

sc_status kn_stage_new(kn_stage **out, const kn_model *model, int first_block, int last_block,
                       kn_device device, int microbatch, sc_err *err)
{
    kn_stage_cfg cfg = kn_stage_cfg_default(first_block, last_block, device, microbatch);
    return kn_stage_new_cfg(out, model, &cfg, err);
}

void kn_stage_destroy(kn_stage **p)
{
    if (p == NULL || *p == NULL)
        return;
    kn_stage *st = *p;
    if (st->ctx != NULL) {
        kn_ctx_free(st->ctx, st->params);
        kn_ctx_free(st->ctx, st->grads);
        kn_ctx_free(st->ctx, st->opt);
        kn_ctx_free(st->ctx, st->gbuf[0]);
        kn_ctx_free(st->ctx, st->gbuf[1]);
        kn_ctx_free(st->ctx, st->ws);
        kn_ctx_free(st->ctx, st->norms);
        kn_ctx_free(st->ctx, st->arena);
        kn_ctx_free(st->ctx, st->adamw_segs);
        kn_ctx_destroy(&st->ctx);
    }
    free(st->blocks);
    free(st->poff);
    free(st->stash_off);
    free(st->out_off);
    free(st->wst_off);
    free(st->slot_n);
    free(st->slot_due);
    free(st->slot_wdue);
    free(st->host_losses);
    free(st);
    *p = NULL;
}

int kn_stage_first_block(const kn_stage *st)
{
    return st->cfg.first_block;
}

int kn_stage_last_block(const kn_stage *st)
{
    return st->cfg.last_block;
}

kn_ctx *kn_stage_ctx(kn_stage *st)
{
    return st->ctx;
}

size_t kn_stage_param_count(const kn_stage *st)
{
    return st->nparams;
}

size_t kn_stage_input_per_sample(const kn_stage *st)
{
    return st->blocks[0]->in_floats;
}

bool kn_stage_input_is_tokens(const kn_stage *st)
{
    return st->blocks[0]->in_tokens;
}

size_t kn_stage_output_per_sample(const kn_stage *st)
{
    return st->blocks[st->nb - 1]->out_floats;
}

bool kn_stage_has_loss(const kn_stage *st)
{
    return st->blocks[st->nb - 1]->has_loss;
}

size_t kn_stage_memory_bytes(const kn_stage *st)
{
    return st->mem_bytes;
}

/* The gather slot, index cfg.slots, starts right after the regular ones. */
static char *slot_base(const kn_stage *st, int slot)
{
    return st->arena + (size_t)slot * st->slot_bytes;
}

static int slot_layout(const kn_stage *st, int slot)
{
    return slot < st->cfg.slots ? 0 : 1;
}

static int slot_capacity(const kn_stage *st, int slot)
{
    return slot < st->cfg.slots ? st->cfg.microbatch : st->cfg.gather_microbatch;
}

static char *slot_input(const kn_stage *st, int slot)
{
    return slot_base(st, slot);
}

static char *slot_targets(const kn_stage *st, int slot)
{
    return slot_base(st, slot) + st->tgt_off[slot_layout(st, slot)];
}

static float *slot_stash(const kn_stage *st, int slot, int block)
{
    return (float *)(slot_base(st, slot) +
                     st->stash_off[(size_t)slot_layout(st, slot) * st->nb + block]);
}

static float *slot_output(const kn_stage *st, int slot, int block)
{
    return (float *)(slot_base(st, slot) +
                     st->out_off[(size_t)slot_layout(st, slot) * st->nb + block]);
}

static float *slot_wstash(const kn_stage *st, int slot, int block)
{
    return (float *)(slot_base(st, slot) +
                     st->wst_off[(size_t)slot_layout(st, slot) * st->nb + block]);
}

static sc_status check_slot(const kn_stage *st, int slot, sc_err *err)
{
    if (slot < 0 || slot >= st->nslots)
        return SC_ERRF(err, SC_ERR_INVALID, "slot %d out of range (the stage has %d)", slot,
                       st->nslots);
    return SC_OK;
}

static sc_status check_ids(const int32_t *ids, size_t n, int limit, const char *what, sc_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= limit)
            return SC_ERRF(err, SC_ERR_INVALID, "%s[%zu] = %d is out of range (valid: 0..%d)", what,
                           i, (int)ids[i], limit - 1);
    return SC_OK;
}

/* Range checks of host-visible ids; the CUDA kernels clamp instead of trusting them. */
static sc_status check_host_inputs(const kn_stage *st, const void *input, const int32_t *targets,
                                   int n, sc_err *err)
{
    if (kn_stage_input_is_tokens(st))
        SC_CHECK(
            check_ids(input, (size_t)n * st->blocks[0]->in_floats, st->blocks[0]->V, "token", err));
    if (kn_stage_has_loss(st)) {
        if (targets == NULL)
            return SC_ERRF(err, SC_ERR_INVALID, "the stage ends with the loss: targets needed");
        SC_CHECK(
            check_ids(targets, (size_t)n * st->tps, kn_model_classes(st->model), "target", err));
    }
    return SC_OK;
}

static sc_status run_forward(kn_stage *st, int slot, int n, sc_err *err)
{
    const void *in = slot_input(st, slot);
    const int32_t *tgt = (const int32_t *)slot_targets(st, slot);
    for (int i = 0; i < st->nb; i++) {
        float *outp = slot_output(st, slot, i);
        float *stash = slot_stash(st, slot, i);
        SC_CHECK(kn_block_forward(st->ctx, st->blocks[i], st->params + st->poff[i], in, outp, stash,
                                  tgt, st->ws, n, err));
        in = outp;
    }
    st->slot_n[slot] = n;
    st->slot_due[slot] = true;
    st->slot_wdue[slot] = false; /* a pending W of the slot's former forward is dropped */
    return SC_OK;
}

static sc_status forward_common(kn_stage *st, int slot, const void *input, const int32_t *targets,
                                int n, bool host, sc_err *err)
{
    SC_CHECK(check_slot(st, slot, err));
    if (n < 1 || n > slot_capacity(st, slot))
        return SC_ERRF(err, SC_ERR_INVALID, "micro-batch of %d samples in slot %d (valid: 1..%d)",
                       n, slot, slot_capacity(st, slot));
    if (host || st->cfg.device.kind == KN_DEV_CPU)
        SC_CHECK(check_host_inputs(st, input, targets, n, err));
    char *in = slot_input(st, slot), *tgt = slot_targets(st, slot);
    size_t in_bytes = (size_t)n * st->blocks[0]->in_floats * 4;
    size_t tgt_bytes = (size_t)n * st->tps * 4;
    if (host) {
        SC_CHECK(kn_ctx_upload(st->ctx, in, input, in_bytes, err));
        if (kn_stage_has_loss(st))
            SC_CHECK(kn_ctx_upload(st->ctx, tgt, targets, tgt_bytes, err));
    } else {
        SC_CHECK(kn_ctx_copy(st->ctx, in, input, in_bytes, err));
        if (kn_stage_has_loss(st)) {
            if (targets == NULL)
                return SC_ERRF(err, SC_ERR_INVALID, "the stage ends with the loss: targets needed");
            SC_CHECK(kn_ctx_copy(st->ctx, tgt, targets, tgt_bytes, err));
        }
    }
    return run_forward(st, slot, n, err);
}

sc_status kn_stage_forward(kn_stage *st, int slot, const void *input, const int32_t *targets, int n,
                           sc_err *err)
{
    return forward_common(st, slot, input, targets, n, false, err);
}

sc_status kn_stage_forward_host(kn_stage *st, int slot, const void *input, const int32_t *targets,
                                int n, sc_err *err)
{
    return forward_common(st, slot, input, targets, n, true, err);
}

const float *kn_stage_output(const kn_stage *st, int slot)
{
    return slot_output(st, slot, st->nb - 1);
}

sc_status kn_stage_output_to_host(kn_stage *st, int slot, float *host, sc_err *err)
{
    SC_CHECK(check_slot(st, slot, err));
    size_t n = (size_t)st->slot_n[slot] * kn_stage_output_per_sample(st);
    return kn_ctx_download(st->ctx, host, kn_stage_output(st, slot), n * sizeof(float), err);
}

sc_status kn_stage_loss(kn_stage *st, int slot, float *loss, sc_err *err)
{
    SC_CHECK(check_slot(st, slot, err));
    if (!kn_stage_has_loss(st))
        return SC_ERRF(err, SC_ERR_PRECONDITION, "stage [%d, %d] does not end with the loss",
                       st->cfg.first_block, st->cfg.last_block);
    size_t n = (size_t)st->slot_n[slot] * kn_stage_output_per_sample(st);
    if (n == 0)
        return SC_ERRF(err, SC_ERR_PRECONDITION, "slot %d holds no forward", slot);
    SC_CHECK(kn_stage_output_to_host(st, slot, st->host_losses, err));
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += st->host_losses[i];
    *loss = (float)(sum / (double)n);
    return SC_OK;
}

void kn_stage_set_loss_scale(kn_stage *st, float per_position)
{
    st->loss_scale = per_position;
}

/* The backward walk over the blocks, last to first, running `part` of each (block.h). */
static sc_status backward_walk(kn_stage *st, int slot, kn_bwd_part part, const float *grad_output,
                               sc_err *err)
{
    SC_CHECK(check_slot(st, slot, err));
    int n = st->slot_n[slot];
    bool split = part != KN_BWD_FULL;
    if (split && !st->cfg.split_backward)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "split backward on a stage created without cfg.split_backward");
    if (part == KN_BWD_WEIGHT ? !st->slot_wdue[slot] : !st->slot_due[slot])
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "%s of slot %d, which holds no forward awaiting one",
                       part == KN_BWD_WEIGHT ? "weight gradient (W)" : "backward", slot);
    if (part != KN_BWD_WEIGHT && !kn_stage_has_loss(st) && grad_output == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "backward needs the gradient of the stage's output");
    const int32_t *tgt = (const int32_t *)slot_targets(st, slot);
    float dloss = st->loss_scale > 0.0f ? st->loss_scale : 1.0f / (float)((size_t)n * st->tps);
    const float *dout = grad_output;
    int cur = 0;
    for (int i = st->nb - 1; i >= st->frozen; i--) {
        const void *in = i == 0 ? (const void *)slot_input(st, slot)
                                : (const void *)slot_output(st, slot, i - 1);
        bool model_input = st->cfg.first_block + i == 0;
        float *din = model_input || part == KN_BWD_WEIGHT ? NULL : st->gbuf[cur];
        SC_CHECK(kn_block_backward_part(
            st->ctx, st->blocks[i], part, st->params + st->poff[i], grad_of(st, i), in,
            slot_stash(st, slot, i), slot_output(st, slot, i), dout, din,
            split ? slot_wstash(st, slot, i) : NULL, tgt, st->ws, n, dloss, err));
        dout = din;
        cur ^= 1;
    }
    if (part == KN_BWD_WEIGHT) {
        st->slot_wdue[slot] = false;
        return SC_OK;
    }
    /* with a frozen prefix nothing upstream wants the input gradient */
    st->grad_in = st->frozen > 0 ? NULL : dout;
    st->grad_in_n = n;
    st->slot_due[slot] = false;
    st->slot_wdue[slot] = split;
    return SC_OK;
}

sc_status kn_stage_backward(kn_stage *st, int slot, const float *grad_output, sc_err *err)
{
    return backward_walk(st, slot, KN_BWD_FULL, grad_output, err);
}

sc_status kn_stage_backward_input(kn_stage *st, int slot, const float *grad_output, sc_err *err)
{
    return backward_walk(st, slot, KN_BWD_INPUT, grad_output, err);
}

sc_status kn_stage_backward_weight(kn_stage *st, int slot, sc_err *err)
{
    return backward_walk(st, slot, KN_BWD_WEIGHT, NULL, err);
}

/* Copies samples [first, first + n) of part `part` of slot src (laid out for src_n samples) to
 * samples [at, at + n) of the same part of dst (laid out for dst_n samples). A part is a list
 * of segments, each sample-major for the slot's sample count (kn_block_stash_segments); the
 * input, the targets and the outputs are one segment. */
static sc_status gather_part(kn_stage *st, char *dst, int dst_n, int at, const char *src, int src_n,
                             int first, int n, const size_t *seg, int nseg, sc_err *err)
{
    size_t before = 0; /* bytes per sample of the segments before this one */
    for (int k = 0; k < nseg; k++) {
        size_t ps = seg[k] * 4;
        SC_CHECK(kn_ctx_copy(st->ctx, dst + before * (size_t)dst_n + ps * (size_t)at,
                             src + before * (size_t)src_n + ps * (size_t)first, ps * (size_t)n,
                             err));
        before += ps;
    }
    return SC_OK;
}

sc_status kn_stage_gather(kn_stage *st, int dst, const kn_stage_range *ranges, int n_ranges,
                          sc_err *err)
{
    SC_CHECK(check_slot(st, dst, err));
    if (st->cfg.split_backward) /* B reuses parts of a slot's stash for W (block.h) */
        return SC_ERRF(err, SC_ERR_INVALID,
                       "gather into slot %d: the stage splits its backward (split_backward), "
                       "whose B overwrites parts of the slots' stashes; gather needs a stage "
                       "without it",
                       dst);
    if (n_ranges < 1 || ranges == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "gather into slot %d: no sample ranges given", dst);
    int total = 0;
    for (int r = 0; r < n_ranges; r++) {
        const kn_stage_range *g = &ranges[r];
        SC_CHECK(check_slot(st, g->slot, err));
        if (g->slot == dst)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "gather into slot %d: range %d reads the slot itself; the sources "
                           "must be other slots",
                           dst, r);
        if (g->n < 1 || g->first < 0 || g->first + g->n > st->slot_n[g->slot])
            return SC_ERRF(err, SC_ERR_INVALID,
                           "gather into slot %d: range %d is samples [%d, %d) of slot %d, which "
                           "holds a forward of %d; valid: 0 <= first, n >= 1, first + n <= %d",
                           dst, r, g->first, g->first + g->n, g->slot, st->slot_n[g->slot],
                           st->slot_n[g->slot]);
        total += g->n;
        if (total > slot_capacity(st, dst))
            return SC_ERRF(err, SC_ERR_INVALID,
                           "gather into slot %d: more than its capacity of %d samples", dst,
                           slot_capacity(st, dst));
    }
    size_t one[1];
    for (int r = 0, at = 0; r < n_ranges; at += ranges[r].n, r++) {
        int src = ranges[r].slot, src_n = st->slot_n[src], first = ranges[r].first;
        int n = ranges[r].n;
        one[0] = st->blocks[0]->in_floats;
        SC_CHECK(gather_part(st, slot_input(st, dst), total, at, slot_input(st, src), src_n, first,
                             n, one, 1, err));
        if (kn_stage_has_loss(st)) {
            one[0] = (size_t)st->tps;
            SC_CHECK(gather_part(st, slot_targets(st, dst), total, at, slot_targets(st, src), src_n,
                                 first, n, one, 1, err));
        }
        for (int i = 0; i < st->nb; i++) {
            size_t seg[KN_STASH_SEGMENTS_MAX], sum = 0;
            int nseg = 0;
            kn_block_stash_segments(st->blocks[i], seg, &nseg);
            for (int k = 0; k < nseg; k++)
                sum += seg[k];
            if (sum != st->blocks[i]->stash_floats)
                return SC_ERRF(err, SC_ERR_INTERNAL,
                               "gather: block %s stashes %zu floats per sample but its segments "
                               "add up to %zu",
                               st->blocks[i]->name, st->blocks[i]->stash_floats, sum);
            SC_CHECK(gather_part(st, (char *)slot_stash(st, dst, i), total, at,
                                 (const char *)slot_stash(st, src, i), src_n, first, n, seg, nseg,
                                 err));
            one[0] = st->blocks[i]->out_floats;
            SC_CHECK(gather_part(st, (char *)slot_output(st, dst, i), total, at,
                                 (const char *)slot_output(st, src, i), src_n, first, n, one, 1,
                                 err));
        }
    }
    st->slot_n[dst] = total;
    st->slot_due[dst] = true;
    st->slot_wdue[dst] = false;
    return SC_OK;
}

static sc_status backward_host(kn_stage *st, int slot, kn_bwd_part part, const float *grad_output,
                               sc_err *err)
{
    if (grad_output == NULL || kn_stage_has_loss(st))
        return backward_walk(st, slot, part, NULL, err);
    SC_CHECK(check_slot(st, slot, err));
    /* stage the host gradient in the second ping-pong buffer: the last block writes the first */
    size_t n = (size_t)st->slot_n[slot] * kn_stage_output_per_sample(st);
    SC_CHECK(kn_ctx_upload(st->ctx, st->gbuf[1], grad_output, n * sizeof(float), err));
    return backward_walk(st, slot, part, st->gbuf[1], err);
}

sc_status kn_stage_backward_host(kn_stage *st, int slot, const float *grad_output, sc_err *err)
{
    return backward_host(st, slot, KN_BWD_FULL, grad_output, err);
}

sc_status kn_stage_backward_input_host(kn_stage *st, int slot, const float *grad_output,
                                       sc_err *err)
{
    return backward_host(st, slot, KN_BWD_INPUT, grad_output, err);
}

const float *kn_stage_grad_input(const kn_stage *st)
{
    return st->grad_in;
}

sc_status kn_stage_grad_input_to_host(kn_stage *st, float *host, sc_err *err)
{
    if (st->grad_in == NULL)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "no input gradient (the stage starts the model, or no backward ran)");
    size_t n = (size_t)st->grad_in_n * kn_stage_input_per_sample(st);
    return kn_ctx_download(st->ctx, host, st->grad_in, n * sizeof(float), err);
}

sc_status kn_stage_zero_grads(kn_stage *st, sc_err *err)
{
    return kn_ctx_zero(st->ctx, st->grads, st->nlearn * sizeof(float), err);
}

sc_status kn_stage_scale_grads(kn_stage *st, float a, sc_err *err)
{
#ifdef SC_HAVE_CUDA
    if (st->cfg.device.kind == KN_DEV_CUDA) {
        int rc = kn_cuda_enter(st->ctx);
        if (rc == 0)
            rc = kn_scale_cuda(st->ctx, st->grads, st->nlearn, a);
        if (rc != 0)
            return SC_ERRF(err, SC_ERR_CUDA, "scaling the gradients: %s",
                           kn_cuda_error_string(rc));
        return SC_OK;
    }
#endif
    (void)err;
    for (size_t i = 0; i < st->nlearn; i++)
        st->grads[i] *= a;
    return SC_OK;
}

void kn_stage_set_lr(kn_stage *st, float lr)
{
    st->cfg.optim.lr = lr;
}

/* Where copy k (0, 1) of the model's tied tensor lies in the stage's flat parameters: false
 * when the stage does not hold that copy. */
static bool tie_copy(const kn_stage *st, int k, size_t *offset, size_t *count)
{
    kn_model_tie tie;
    if (!kn_model_get_tie(st->model, &tie))
        return false;
    int i = tie.block[k] - st->cfg.first_block;
    if (i < 0 || i >= st->nb)
        return false;
    const kn_tensor *tn = &st->blocks[i]->tensors[tie.tensor[k]];
    *offset = st->poff[i] + tn->offset;
    *count = tn->count;
    return true;
}

bool kn_stage_tie_part(const kn_stage *st, size_t *offset, size_t *count)
{
    size_t o[2], n[2];
    bool has0 = tie_copy(st, 0, &o[0], &n[0]), has1 = tie_copy(st, 1, &o[1], &n[1]);
    if (has0 == has1)
        return false;
    *offset = has0 ? o[0] : o[1];
    *count = has0 ? n[0] : n[1];
    return true;
}

/* Both copies of the tied tensor here: each gets the sum of their gradients (kn_model_tie). */
static sc_status tie_sum(kn_stage *st, sc_err *err)
{
    size_t o0, o1, n;
    if (!tie_copy(st, 0, &o0, &n) || !tie_copy(st, 1, &o1, &n))
        return SC_OK;
    if (o0 < st->learn_off || o1 < st->learn_off)
        return SC_OK; /* a copy in a frozen block keeps no gradient (jobs refuse freezing these) */
    float *a = st->grads + (o0 - st->learn_off), *b = st->grads + (o1 - st->learn_off);
#ifdef SC_HAVE_CUDA
    if (st->cfg.device.kind == KN_DEV_CUDA) {
        int rc = kn_residual_forward_cuda(st->ctx, a, a, b, n);
        if (rc != 0)
            return SC_ERRF(err, SC_ERR_CUDA, "tied gradient sum: %s", kn_cuda_error_string(rc));
        return kn_ctx_copy(st->ctx, b, a, n * sizeof(float), err);
    }
#endif
    (void)err;
    for (size_t j = 0; j < n; j++)
        a[j] = b[j] = a[j] + b[j];
    return SC_OK;
}

#ifdef SC_HAVE_CUDA
/* The segment table of the learning tensors (blocks frozen..nb-1) for kn_adamw_multi_cuda, made
 * on the first step and again after a freeze: *first gets the offset (in the learning range) of
 * the first tensor, *n the values covered; nseg 0 when the tensors are not laid end to end or
 * too many (the caller steps them one by one). */
static sc_status adamw_table(kn_stage *st, size_t *first, size_t *n, sc_err *err)
{
    if (st->adamw_frozen == st->frozen && st->adamw_segs != NULL) { /* made already */
        *first = st->adamw_first;
        *n = st->adamw_n;
        return SC_OK;
    }
    size_t base = 0, next = 0;
    int nseg = 0;
    for (int i = st->frozen; i < st->nb; i++)
        nseg += st->blocks[i]->ntensors;
    uint64_t *starts = malloc(kn_adamw_segs_bytes(nseg > 0 ? nseg : 1));
    SC_ALLOC_CHECK(starts, err);
    float *decays = (float *)(starts + nseg);
    int k = 0;
    bool ok = nseg > 0 && nseg <= KN_ADAMW_SEGS_MAX;
    for (int i = st->frozen; ok && i < st->nb; i++)
        for (int j = 0; ok && j < st->blocks[i]->ntensors; j++) {
            const kn_tensor *tn = &st->blocks[i]->tensors[j];
            size_t lo = st->poff[i] + tn->offset - st->learn_off;
            if (k == 0)
                base = next = lo;
            ok = lo == next;
            starts[k] = lo - base;
            decays[k] = tn->decay ? st->cfg.optim.weight_decay : 0.0f;
            next = lo + tn->count;
            k++;
        }
    *first = st->adamw_first = base;
    *n = st->adamw_n = next - base;
    sc_status rc = SC_OK;
    kn_ctx_free(st->ctx, st->adamw_segs);
    st->adamw_segs = NULL;
    st->adamw_nseg = 0;
    st->adamw_frozen = st->frozen;
    if (ok) {
        rc = kn_ctx_alloc(st->ctx, kn_adamw_segs_bytes(nseg), &st->adamw_segs, err);
        if (rc == SC_OK)
            rc = kn_ctx_upload(st->ctx, st->adamw_segs, starts, kn_adamw_segs_bytes(nseg), err);
        if (rc == SC_OK)
            st->adamw_nseg = nseg;
    }
    free(starts);
    return rc;
}
#endif

sc_status kn_stage_step(kn_stage *st, sc_err *err)
{
    const kn_optim_cfg *o = &st->cfg.optim;
#ifdef SC_HAVE_CUDA
    if (st->cfg.device.kind == KN_DEV_CUDA) {
        int rc = kn_cuda_enter(st->ctx);
        if (rc != 0)
            return SC_ERRF(err, SC_ERR_CUDA, "optimizer step: selecting cuda:%d: %s",
                           st->cfg.device.index, kn_cuda_error_string(rc));
    }
#endif
    SC_CHECK(tie_sum(st, err));
    st->t++;
#ifdef SC_HAVE_CUDA
    /* AdamW on a GPU: one launch over every learning tensor when they lie end to end */
    if (st->cfg.device.kind == KN_DEV_CUDA && o->kind == KN_OPT_ADAMW && st->frozen < st->nb) {
        size_t first = 0, n = 0;
        SC_CHECK(adamw_table(st, &first, &n, err));
        if (st->adamw_nseg > 0) {
            int rc = kn_adamw_multi_cuda(st->ctx, st->params + st->learn_off + first,
                                         st->grads + first, st->opt + first,
                                         st->opt + st->nlearn + first, n, st->adamw_segs,
                                         st->adamw_nseg, o->lr, o->beta1, o->beta2, o->eps, st->t);
            if (rc != 0)
                return SC_ERRF(err, SC_ERR_CUDA, "optimizer step (%d tensors): %s",
                               st->adamw_nseg, kn_cuda_error_string(rc));
            return SC_OK;
        }
    }
#endif
    for (int i = st->frozen; i < st->nb; i++) {
        const kn_block *b = st->blocks[i];
        for (int k = 0; k < b->ntensors; k++) {
            const kn_tensor *tn = &b->tensors[k];
            size_t off = st->poff[i] + tn->offset;
            size_t lo = off - st->learn_off; /* i >= frozen >= cfg.frozen_blocks */
            float *p = st->params + off, *g = st->grads + lo;
            float wd = tn->decay ? o->weight_decay : 0.0f;
            int rc = 0;
            if (o->kind == KN_OPT_ADAMW) {
                float *m = st->opt + lo, *v = st->opt + st->nlearn + lo;
#ifdef SC_HAVE_CUDA
                if (st->cfg.device.kind == KN_DEV_CUDA)
                    rc = kn_adamw_step_cuda(st->ctx, p, g, m, v, tn->count, o->lr, o->beta1,
                                            o->beta2, o->eps, wd, st->t);
                else
#endif
                    (st->ctx->cpu_fast ? kn_adamw_step_fast : kn_adamw_step_cpu)(
                        p, g, m, v, tn->count, o->lr, o->beta1, o->beta2, o->eps, wd, st->t);
            } else {
                float *v = st->opt + lo;
#ifdef SC_HAVE_CUDA
                if (st->cfg.device.kind == KN_DEV_CUDA)
                    rc = kn_sgd_step_cuda(st->ctx, p, g, v, tn->count, o->lr, o->momentum, wd);
                else
#endif
                    kn_sgd_step_cpu(p, g, v, tn->count, o->lr, o->momentum, wd);
            }
            if (rc != 0) {
#ifdef SC_HAVE_CUDA
                return SC_ERRF(err, SC_ERR_CUDA, "optimizer step (%s.%s): %s", b->name, tn->name,
                               kn_cuda_error_string(rc));
#endif
            }
        }
    }
    (void)err;
    return SC_OK;
}

sc_status kn_stage_set_frozen_blocks(kn_stage *st, int count, sc_err *err)
{
    if (count < 0 || count > st->nb)
        return SC_ERRF(err, SC_ERR_INVALID, "cannot freeze %d blocks of a %d-block stage", count,
                       st->nb);
    if (count < st->cfg.frozen_blocks)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "cannot freeze %d blocks of a stage made with %d frozen: they keep no "
                       "gradients or optimizer state; valid: %d to %d",
                       count, st->cfg.frozen_blocks, st->cfg.frozen_blocks, st->nb);
    st->frozen = count;
    return SC_OK;
}

int kn_stage_frozen_blocks(const kn_stage *st)
{
    return st->frozen;
}

sc_status kn_stage_params_to_host(kn_stage *st, float *host, sc_err *err)
{
    return kn_ctx_download(st->ctx, host, st->params, st->nparams * sizeof(float), err);
}

sc_status kn_stage_params_from_host(kn_stage *st, const float *host, sc_err *err)
{
    return kn_ctx_upload(st->ctx, st->params, host, st->nparams * sizeof(float), err);
}

sc_status kn_stage_grads_to_host(kn_stage *st, float *host, sc_err *err)
{
    memset(host, 0, st->learn_off * sizeof(float)); /* frozen: no gradient */
    return kn_ctx_download(st->ctx, host + st->learn_off, st->grads, st->nlearn * sizeof(float),
                           err);
}

sc_status kn_stage_grads_from_host(kn_stage *st, const float *host, sc_err *err)
{
    return kn_ctx_upload(st->ctx, st->grads, host + st->learn_off, st->nlearn * sizeof(float), err);
}

static size_t opt_floats(const kn_stage *st);

/* Each optimizer state array k is nparams floats on the host, nlearn on the device. */
sc_status kn_stage_opt_state_to_host(kn_stage *st, float *host, sc_err *err)
{
    for (int k = 0; k < kn_optim_state_per_param(st->cfg.optim.kind); k++) {
        float *h = host + (size_t)k * st->nparams;
        memset(h, 0, st->learn_off * sizeof(float)); /* frozen: no state kept */
        SC_CHECK(kn_ctx_download(st->ctx, h + st->learn_off, st->opt + (size_t)k * st->nlearn,
                                 st->nlearn * sizeof(float), err));
    }
    return SC_OK;
}

sc_status kn_stage_opt_state_from_host(kn_stage *st, const float *host, sc_err *err)
{
    for (int k = 0; k < kn_optim_state_per_param(st->cfg.optim.kind); k++)
        SC_CHECK(kn_ctx_upload(st->ctx, st->opt + (size_t)k * st->nlearn,
                               host + (size_t)k * st->nparams + st->learn_off,
                               st->nlearn * sizeof(float), err));
    return SC_OK;
}

size_t kn_stage_opt_state_count(const kn_stage *st)
{
    return opt_floats(st);
}

uint64_t kn_stage_step_count(const kn_stage *st)
{
    return (uint64_t)st->t;
}

sc_status kn_stage_set_step_count(kn_stage *st, uint64_t steps, sc_err *err)
{
    if (steps > (uint64_t)INT32_MAX)
        return SC_ERRF(err, SC_ERR_INVALID, "optimizer step count %llu too large (at most %d)",
                       (unsigned long long)steps, INT32_MAX);
    st->t = (int)steps;
    return SC_OK;
}

float *kn_stage_params_device(kn_stage *st)
{
    return st->params;
}

float *kn_stage_grads_device(kn_stage *st)
{
    return st->grads;
}

size_t kn_stage_grad_count(const kn_stage *st)
{
    return st->nlearn;
}

kn_optim_kind kn_stage_optim_kind(const kn_stage *st)
{
    return st->cfg.optim.kind;
}

sc_status kn_stage_grad_sq_norms(kn_stage *st, double *per_block, sc_err *err)
{
#ifdef SC_HAVE_CUDA
    if (st->cfg.device.kind == KN_DEV_CUDA) {
        /* on the device: nb doubles come back, not the gradients */
        SC_CHECK(kn_ctx_zero(st->ctx, st->norms, (size_t)st->nb * sizeof(double), err));
        for (int i = 0; i < st->nb; i++) {
            if (i < st->cfg.frozen_blocks)
                continue; /* no gradient kept: 0 */
            int rc =
                kn_sq_sum_add_cuda(st->ctx, grad_of(st, i), st->blocks[i]->params, st->norms + i);
            if (rc != 0)
                return SC_ERRF(err, SC_ERR_CUDA, "gradient norms (%s): %s", st->blocks[i]->name,
                               kn_cuda_error_string(rc));
        }
        return kn_ctx_download(st->ctx, per_block, st->norms, (size_t)st->nb * sizeof(double), err);
    }
#endif
    (void)err;
    for (int i = 0; i < st->nb; i++)
        per_block[i] =
            i < st->cfg.frozen_blocks ? 0.0 : kn_sq_sum_cpu(grad_of(st, i), st->blocks[i]->params);
    return SC_OK;
}

static size_t opt_floats(const kn_stage *st)
{
    return st->nparams * (size_t)kn_optim_state_per_param(st->cfg.optim.kind);
}
