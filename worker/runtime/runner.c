/*
 * rt runner, lifecycle: checks the configuration, builds a stage (model, schedule and action
 * list, buffers, data source, transports) in rt_runner_new, frees it in rt_runner_destroy, and
 * rt_runner_abort. The contract is runner.h; runner_internal.h lists the runner's files.
 * Not here: choosing the plan, talking to the coordinator (the worker agent does both); running
 * iterations (runner_exec.c, runner_pipedream.c); planning micro-batches, copies and cuts
 * (runner_plan.c); opening and connecting transports (runner_connect.c); checkpoints
 * (runner_checkpoint.c).
 * Invariant: rt_runner_new returns a runner whose slots are all free and whose slot count is
 * within the schedule's bound, or frees everything it made (rt_runner_destroy accepts a runner
 * built half-way).
 */
#include "worker/runtime/runner.h"
#include "worker/runtime/runner_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/sc_json.h"
#include "common/sc_util.h"
#include "kernels/device.h"
#include "kernels/model.h"
#include "kernels/optim.h"
#include "kernels/stage.h"
#include "worker/data/data.h"
#include "worker/runtime/schedule.h"
#include "worker/transport/allreduce.h"
#include "worker/transport/transport.h"

rt_runner_cfg rt_runner_cfg_default(void)
{
    rt_runner_cfg c;
    memset(&c, 0, sizeof c);
    c.n_stages = 1;
    c.schedule = "gpipe";
    c.batch_size = 8;
    c.microbatches = 1;
    c.seed = 1;
    c.data_kind = "synthetic";
    c.optimizer = "adamw";
    c.lr = 3e-4;
    c.momentum = 0.9;
    c.device = "cpu";
    c.transport = "zmq";
    c.bind_endpoint = "tcp://127.0.0.1:0";
    c.timeout_ms = 30000;
    c.sliced_warmup = -1;
    c.replicas = 1;
    c.replica = 0;
    c.prev_replicas = 1;
    c.next_replicas = 1;
    return c;
}

void rt_runner_destroy(rt_runner **rp)
{
    if (rp == NULL || *rp == NULL)
        return;
    rt_runner *r = *rp;
    rt_allreduce_destroy(&r->ar);
    rt_transport_destroy(&r->tr);
    rt_transport_destroy(&r->tr_next);
    for (int k = 0; r->link_prev != NULL && k < r->nrep_prev; k++)
        rt_transport_destroy(&r->link_prev[k]);
    for (int k = 0; r->link_next != NULL && k < r->nrep_next; k++)
        rt_transport_destroy(&r->link_next[k]);
    for (int k = 0; r->link_peer != NULL && k < r->nrep; k++)
        rt_transport_destroy(&r->link_peer[k]);
    free(r->link_prev);
    free(r->link_next);
    free(r->link_peer);
    free(r->acts);
    free(r->stage_reps);
    free(r->prev_off);
    free(r->next_off);
    free(r->bw_off);
    free(r->bw_mb);
    free(r->ranges);
    free(r->in_all);
    free(r->gout_all);
    free(r->red_in);
    free(r->red_sum);
    rt_data_destroy(&r->data);
    rt_schedule_destroy(&r->sched);
    if (r->st != NULL) {
        kn_ctx *ctx = kn_stage_ctx(r->st);
        kn_ctx_free(ctx, r->in_dev);
        kn_ctx_free(ctx, r->tgt_dev);
        kn_ctx_free(ctx, r->gin_dev);
        kn_ctx_free(ctx, r->gout_dev);
        kn_ctx_host_free(ctx, r->in_buf);
        kn_ctx_host_free(ctx, r->out_buf);
        kn_ctx_host_free(ctx, r->gout_buf);
        kn_ctx_host_free(ctx, r->gin_buf);
    }
    kn_stage_destroy(&r->st);
    kn_model_destroy(&r->model);
    free(r->slot_mb);
    free(r->mb_size);
    free(r->timed);
    free(r->mb_off);
    free(r->tgt_buf);
    free(r->params);
    free(r->grads);
    free(r->state);
    free(r->norms);
    for (int i = 0; r->stash != NULL && i < r->slots; i++)
        free(r->stash[i]);
    free(r->stash);
    free(r->stash_ver);
    free(r->ver_fwd);
    free(r->stash_g);
    free(r->events);
    free(r->tie_own);
    free(r->tie_peer);
    rt_timeline_destroy(&r->tl);
    free(r);
    *rp = NULL;
}

static sc_status parse_model(const char *json, kn_model **out, sc_err *err)
{
    if (json == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "runner: no model document given");
    sc_jdoc *doc = NULL;
    SC_CHECK(sc_jdoc_parse(&doc, "model", json, strlen(json), err));
    sc_jnode root = sc_jdoc_root(doc);
    sc_status rc = kn_model_from_node(out, &root, err);
    sc_jdoc_destroy(&doc);
    return rc;
}

static sc_status parse_optim(const rt_runner_cfg *c, kn_optim_cfg *o, sc_err *err)
{
    if (c->optimizer != NULL && strcmp(c->optimizer, "adamw") == 0)
        *o = kn_optim_adamw_default();
    else if (c->optimizer != NULL && strcmp(c->optimizer, "sgd") == 0)
        *o = kn_optim_sgd_default();
    else
        return SC_ERRF(err, SC_ERR_INVALID,
                       "optimizer.kind: unknown \"%s\"; valid: \"adamw\", "
                       "\"sgd\"",
                       c->optimizer != NULL ? c->optimizer : "(null)");
    if (!(c->lr > 0.0) || c->weight_decay < 0.0 || c->momentum < 0.0 || c->momentum >= 1.0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "optimizer: lr must be > 0 (got %g), weight_decay "
                       ">= 0 (got %g), momentum in [0, 1) (got %g)",
                       c->lr, c->weight_decay, c->momentum);
    o->lr = (float)c->lr;
    o->weight_decay = (float)c->weight_decay;
    if (o->kind == KN_OPT_SGD)
        o->momentum = (float)c->momentum;
    return SC_OK;
}

static sc_status check_layout(const rt_runner_cfg *c, int nblocks, sc_err *err)
{
    if (c->n_stages < 1 || c->stage < 0 || c->stage >= c->n_stages)
        return SC_ERRF(err, SC_ERR_INVALID, "runner: stage %d of %d stages; valid: 0..n_stages-1",
                       c->stage, c->n_stages);
    if (c->first_block < 0 || c->last_block < c->first_block || c->last_block >= nblocks)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: blocks [%d, %d]; the model has blocks 0..%d (first <= last)",
                       c->first_block, c->last_block, nblocks - 1);
    if (c->stage == 0 && c->first_block != 0)
        return SC_ERRF(err, SC_ERR_INVALID, "runner: stage 0 must start at block 0, not %d",
                       c->first_block);
    if (c->stage == c->n_stages - 1 && c->last_block != nblocks - 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: the last stage must end at the model's last block %d, not %d",
                       nblocks - 1, c->last_block);
    if (c->microbatches < 1 || c->batch_size < 1 ||
        (c->microbatch_sizes == NULL && c->batch_size % c->microbatches != 0))
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: batch_size %d must be a positive multiple of microbatches %d "
                       "(or give microbatch_sizes)",
                       c->batch_size, c->microbatches);
    if (c->timeout_ms <= 0)
        return SC_ERRF(err, SC_ERR_INVALID, "runner: timeout_ms must be > 0, got %d",
                       c->timeout_ms);
    if (c->replicas < 1 || c->replica < 0 || c->replica >= c->replicas)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: replica %d of replicas %d; valid: replicas >= 1, replica "
                       "0..replicas-1",
                       c->replica, c->replicas);
    if (c->prev_replicas < 1 || c->next_replicas < 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: prev_replicas %d, next_replicas %d; each must be >= 1 (1 when "
                       "the neighbour is not replicated or absent)",
                       c->prev_replicas, c->next_replicas);
    return SC_OK;
}

static sc_status runner_init(rt_runner *r, const rt_runner_cfg *c, sc_err *err)
{
    SC_CHECK(parse_model(c->model_json, &r->model, err));
    SC_CHECK(check_layout(c, kn_model_block_count(r->model), err));
    rt_schedule_kind skind = RT_SCHED_1F1B;
    bool sliced = c->schedule != NULL && strcmp(c->schedule, "sliced") == 0;
    bool unequal = c->schedule != NULL && strcmp(c->schedule, "unequal") == 0;
    r->pipedream = c->schedule != NULL && strcmp(c->schedule, "pipedream") == 0;
    if (unequal)
        skind = RT_SCHED_GPIPE; /* fill-drain over this stage's own sizes */
    else if (!sliced && !r->pipedream)
        SC_CHECK(rt_schedule_kind_parse(c->schedule, "schedule", &skind, err));
    SC_CHECK(parse_optim(c, &r->optim, err));
    kn_device dev;
    SC_CHECK(kn_device_parse(c->device != NULL ? c->device : "cpu", "device", &dev, err));
    r->p = c->n_stages;
    r->s = c->stage;
    r->first = r->s == 0;
    r->last = r->s == r->p - 1;
    r->first_block = c->first_block;
    r->last_block = c->last_block;
    r->nb = c->last_block - c->first_block + 1;
    r->batch = c->batch_size;
    SC_CHECK(rt_runner_plan_microbatches(r, c, sliced, err));
    SC_CHECK(rt_runner_plan_reslice(r, c, unequal, err));
    r->extra_f_s = c->extra_forward_s;
    r->extra_b_s = c->extra_backward_s;
    r->extra_o_s = c->extra_optimizer_s;

    SC_CHECK(rt_runner_plan_replicas(r, c, skind, err));
    if (r->bsplit)
        SC_CHECK(rt_runner_plan_backward_actions(r, err));
    /* pipedream: the stream crosses steps: W_s / r_s + 1 (p-s unreplicated) whatever m;
     * plan_pipedream's dry runs checked a copy never holds more */
    int bound = r->halved > 0
                    ? rt_schedule_sliced_slots_bound(r->p, r->stage_reps, r->s, r->m, r->halved)
                : skind == RT_SCHED_ZB1 && !r->pipedream
                    ? rt_schedule_zb1_slots_bound(r->p, r->stage_reps, r->s, r->m, c->zb1_defer)
                    : rt_schedule_slots_bound(r->pipedream ? RT_SCHED_PIPEDREAM : skind, r->p,
                                              r->stage_reps, r->s, r->m);
    if (r->slots > bound)
        return SC_ERRF(err, SC_ERR_INTERNAL,
                       "schedule %s needs %d activation slots on stage %d, "
                       "more than its bound %d",
                       rt_schedule_kind_name(skind), r->slots, r->s, bound);

    kn_stage_cfg scfg = kn_stage_cfg_default(c->first_block, c->last_block, dev, r->Mcap);
    scfg.slots = r->slots;
    scfg.split_backward = skind == RT_SCHED_ZB1 && !r->pipedream && r->halved == 0;
    scfg.gather_microbatch = r->gather_cap; /* one more slot, counted in the stage's memory */
    scfg.optim = r->optim;
    scfg.precision = KN_PREC_FP32;
    if (c->precision != NULL) {
        SC_CHECK(kn_precision_parse(c->precision, "runner: precision", &scfg.precision, err));
        if (scfg.precision == KN_PREC_AUTO)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner: precision auto must be resolved by the plan; valid: bf16, "
                           "fp16, tf32, fp32");
    }
    if (c->frozen_blocks < 0 || c->frozen_blocks >= kn_model_block_count(r->model))
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: %d frozen blocks of a %d-block model; valid: 0 to %d (the last "
                       "block always learns)",
                       c->frozen_blocks, kn_model_block_count(r->model),
                       kn_model_block_count(r->model) - 1);
    if (c->frozen_blocks > 0 && r->pipedream)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "runner: frozen blocks need a schedule that flushes every step, not "
                       "pipedream");
    /* the stage's share of the prefix: no gradient or optimizer memory for it */
    int local = c->frozen_blocks - c->first_block;
    scfg.frozen_blocks = local < 0 ? 0 : local > r->nb ? r->nb : local;
    SC_CHECK(kn_stage_new_cfg(&r->st, r->model, &scfg, err));
    /* a GPU stage times its compute on the GPU (runner_exec.c); pipedream's steps stay
     * host-timed */
    r->gpu_timed = dev.kind == KN_DEV_CUDA && !r->pipedream;
    r->frozen_all = c->frozen_blocks > c->last_block;
    r->grad_norms = !c->skip_grad_norms;
    r->grad_upstream = !r->first && c->first_block > c->frozen_blocks;
    r->in_elems = kn_stage_input_per_sample(r->st);
    r->in_tokens = kn_stage_input_is_tokens(r->st);
    r->out_elems = kn_stage_output_per_sample(r->st);
    r->tps = kn_model_targets_per_sample(r->model);
    r->np = kn_stage_param_count(r->st);
    r->nstate = r->np * (size_t)kn_optim_state_per_param(r->optim.kind);
    SC_CHECK(rt_runner_alloc_buffers(r, err));
    if (r->resliced) {
        r->in_all = r->first ? NULL : calloc((size_t)r->batch * r->in_elems + 1, 4);
        r->gout_all = r->last ? NULL : calloc((size_t)r->batch * r->out_elems + 1, sizeof(float));
        if ((!r->first && r->in_all == NULL) || (!r->last && r->gout_all == NULL))
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory allocating the re-slicing buffers");
    }
    if (r->pipedream)
        SC_CHECK(rt_runner_alloc_stash(r, err));
    /* room for one call's events: an action is one event (OPT two: all-reduce and step); a
     * pipedream step runs at most 2m + slots + p passes of at most five events each */
    int acts = r->group || r->bsplit ? r->nacts : r->sched->count[r->s];
    /* a quarter more entries than iterations: pipedream flushes are entries of their own */
    SC_CHECK(rt_timeline_new(&r->tl, RT_TIMELINE_ITERATIONS + RT_TIMELINE_ITERATIONS / 4,
                             acts + 8 + (r->pipedream ? 5 * (2 * r->m + r->slots + r->p) : 0),
                             err));
    SC_CHECK(kn_stage_params_to_host(r->st, r->params, err));
    /* pipedream steps per micro-batch, so each loss is its own micro-batch's mean (the default) */
    if (r->last && !r->pipedream)
        kn_stage_set_loss_scale(r->st, 1.0f / (float)((size_t)r->batch * (size_t)r->tps));
    SC_CHECK(rt_runner_scale_setup(r, c, err)); /* fp16: the loss scale on top of that */

    if (r->first || r->last) {
        rt_data_cfg dc;
        memset(&dc, 0, sizeof dc);
        SC_CHECK(rt_data_kind_parse(c->data_kind, "data.kind", &dc.kind, err));
        const kn_block *b0 = kn_model_block(r->model, 0);
        dc.path = c->data_path;
        dc.seed = c->seed;
        dc.inputs_are_tokens = b0->in_tokens;
        dc.input_elems = b0->in_floats;
        dc.targets_per_sample = r->tps;
        dc.classes = kn_model_classes(r->model);
        SC_CHECK(rt_data_new(&r->data, &dc, err));
    }
    if (r->group) {
        r->red_in = malloc(r->np * sizeof(float) + sizeof(double) + 1);
        r->red_sum = malloc(r->np * sizeof(float) + 1);
        r->link_prev = calloc((size_t)r->nrep_prev, sizeof *r->link_prev);
        r->link_next = calloc((size_t)r->nrep_next, sizeof *r->link_next);
        r->link_peer = calloc((size_t)r->nrep, sizeof *r->link_peer);
        if (!r->red_in || !r->red_sum || !r->link_prev || !r->link_next || !r->link_peer)
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory allocating replica buffers");
    }
    SC_CHECK(rt_runner_tie_setup(r, c, err));
    if (r->p > 1 || r->nrep > 1) {
        SC_CHECK(rt_runner_open_transports(r, c, dev, err));
        SC_CHECK(rt_runner_device_boundaries(r, c, dev, err));
    }
    return rt_runner_open_reduce(r, c, dev, err);
}

sc_status rt_runner_new(rt_runner **out, const rt_runner_cfg *cfg, sc_err *err)
{
    *out = NULL;
    rt_runner *r = calloc(1, sizeof *r);
    SC_ALLOC_CHECK(r, err);
    sc_status rc = runner_init(r, cfg, err);
    if (rc != SC_OK) {
        rt_runner_destroy(&r);
        return rc;
    }
    *out = r;
    return SC_OK;
}

rt_timeline *rt_runner_timeline(rt_runner *r)
{
    return r->tl;
}

const char *rt_runner_endpoint(const rt_runner *r)
{
    return r->endpoint;
}

void rt_runner_abort(rt_runner *r)
{
    rt_allreduce_abort(r->ar);
    if (r->tr != NULL)
        rt_transport_abort(r->tr);
    if (r->tr_next != NULL)
        rt_transport_abort(r->tr_next);
    for (int k = 0; r->link_prev != NULL && k < r->nrep_prev; k++)
        if (r->link_prev[k] != NULL)
            rt_transport_abort(r->link_prev[k]);
    for (int k = 0; r->link_next != NULL && k < r->nrep_next; k++)
        if (r->link_next[k] != NULL)
            rt_transport_abort(r->link_next[k]);
    for (int k = 0; r->link_peer != NULL && k < r->nrep; k++)
        if (r->link_peer[k] != NULL)
            rt_transport_abort(r->link_peer[k]);
}

const struct kn_model *rt_runner_model(const rt_runner *r)
{
    return r->model;
}

int rt_runner_first_block(const rt_runner *r)
{
    return r->first_block;
}

int rt_runner_last_block(const rt_runner *r)
{
    return r->last_block;
}
