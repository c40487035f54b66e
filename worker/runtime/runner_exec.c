/*
 * rt runner, the synchronous executor: rt_runner_step runs one iteration of this copy's action
 * list (receive, forward, send, ..., backward, OPT) for gpipe, 1f1b, sliced and unequal, with
 * copies and with sizes per stage; a pipedream runner's step goes to runner_pipedream.c.
 * Not here: building the action list (schedule.c, runner_plan.c), the update at OPT
 * (runner_update.c), the transports (runner_connect.c).
 * Invariant: a micro-batch mb lives in activation slot (mb / replicas) % slots from its F to its
 * B (mb / replicas numbers this replica's own micro-batches consecutively); in-order schedules
 * never hold more than `slots` consecutive ones, so slots never collide, and slot_mb[] checks it
 * on every F and B. Re-sliced boundaries (sizes per stage): the samples received from a neighbour
 * this iteration always form a prefix [0, prev_off[prev_got]) of the batch (messages are taken in
 * the neighbour's order), and a micro-batch runs only once that prefix covers it. A backward
 * cut (bsplit) runs entries, not micro-batches, in its backward actions; forward micro-batch k
 * stays in its slot until the entries run so far cover all its samples, so every gather finds
 * its sources' slots holding them.
 */
#include "worker/runtime/runner_internal.h"

#include <string.h>

#include "common/sc_clock.h"
#include "kernels/device.h"
#include "kernels/stage.h"
#include "worker/data/data.h"
#include "worker/runtime/schedule.h"
#include "worker/transport/transport.h"

/* Sizes per stage: takes the neighbour's messages, in its micro-batch order, into the gather
 * buffer `all` (`elem_bytes` per sample) until the received prefix reaches sample `end`, then
 * copies this stage's samples [begin, end) into `dst`. A message whose size is not the one the
 * neighbour list promises means the list is not that stage's real cut. */
static sc_status gather(rt_runner *r, rt_msg_kind kind, uint64_t step, const int *off, int *got,
                        unsigned char *all, size_t elem_bytes, int begin, int end, void *dst,
                        double *wait_s, sc_err *err)
{
    bool act = kind == RT_MSG_ACTIVATION;
    const char *what = act ? "prev_sizes" : r->next_bw_given ? "next_backward_sizes" : "next_sizes";
    /* gradients come in the next stage's backward cut, its forward cut unless it has its own */
    const char *theirs = act || !r->next_bw_given ? "microbatch_sizes" : "backward_sizes";
    const char *hint = act || r->next_bw_given
                           ? ""
                           : "; when that stage has backward_sizes of its own, give them as "
                             "next_backward_sizes";
    int from = act ? r->s - 1 : r->s + 1;
    double t0 = sc_clock_now_s();
    while (off[*got] < end) {
        int k = *got;
        size_t at = (size_t)off[k] * elem_bytes, bytes = (size_t)(off[k + 1] - off[k]) * elem_bytes;
        sc_err local;
        sc_err_clear(&local);
        sc_status rc = rt_transport_recv(tr_dir(r, kind == RT_MSG_GRADIENT), kind, step, k,
                                         all + at, bytes, &local);
        if (rc == SC_ERR_INVALID)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner stage %d: %s %d of stage %d is not the %d samples %s says: "
                           "%s must equal stage %d's %s%s (%s)",
                           r->s, act ? "micro-batch" : "backward entry", k, from,
                           off[k + 1] - off[k], what, what, from, theirs, hint, local.msg);
        if (rc != SC_OK)
            return SC_ERRF(err, rc, "%s", local.msg);
        (*got)++;
    }
    *wait_s += sc_clock_now_s() - t0;
    memcpy(dst, all + (size_t)begin * elem_bytes, (size_t)(end - begin) * elem_bytes);
    return SC_OK;
}

/* The forward of the synchronous schedules: the input from the data (first stage), the host
 * buffer or, crossing its boundary in device memory, in_dev; the last stage's targets from the
 * data. */
static sc_status stage_forward(rt_runner *r, int slot, int n, sc_err *err)
{
    const int32_t *tgt = r->last ? r->tgt_buf : NULL;
    if (!r->dev_prev)
        return kn_stage_forward_host(r->st, slot, r->in_buf, tgt, n, err);
    if (r->last) {
        SC_CHECK(kn_ctx_upload(kn_stage_ctx(r->st), r->tgt_dev, r->tgt_buf,
                               (size_t)n * (size_t)r->tps * sizeof(int32_t), err));
        tgt = r->tgt_dev;
    }
    return kn_stage_forward(r->st, slot, r->in_dev, tgt, n, err);
}

/* The backward of `slot` with the received output gradient (host or, dev_next, gout_dev): the
 * whole of it, or under zb1 its input part (B), the W coming later (RT_ACT_W). */
static sc_status stage_backward(rt_runner *r, int slot, sc_err *err)
{
    bool split = r->sched != NULL && r->sched->kind == RT_SCHED_ZB1;
    const float *g = r->last ? NULL : r->dev_next ? r->gout_dev : r->gout_buf;
    bool host = r->last || !r->dev_next;
    if (split)
        return host ? kn_stage_backward_input_host(r->st, slot, g, err)
                    : kn_stage_backward_input(r->st, slot, g, err);
    return host ? kn_stage_backward_host(r->st, slot, g, err)
                : kn_stage_backward(r->st, slot, g, err);
}

/* Backward cut: entry j over samples [a, b), its output gradient in gout_buf. An entry that is
 * exactly forward micro-batch k runs on k's slot; any other first has its samples' activations
 * gathered from the slots of the forwards it overlaps into the gather slot. Afterwards every
 * forward whose samples are all backwarded (entries run in ascending order) frees its slot. */
static sc_status backward_entry(rt_runner *r, int j, int *inflight, sc_err *err)
{
    int a = r->bw_off[j], b = r->bw_off[j + 1], k = r->bw_mb[j], slot;
    if (k >= 0) {
        slot = slot_of(r, k);
        if (r->slot_mb[slot] != k)
            return slot_error(r, "backward", k, err);
    } else {
        int n = 0;
        for (int f = 0; f < r->m; f++) {
            int fa = r->mb_off[f], fb = fa + r->mb_size[f];
            if (fb <= a || fa >= b)
                continue;
            if (r->slot_mb[slot_of(r, f)] != f)
                return slot_error(r, "gather for a backward", f, err);
            int lo = fa > a ? fa : a, hi = fb < b ? fb : b;
            r->ranges[n++] = (kn_stage_range){slot_of(r, f), lo - fa, hi - lo};
        }
        slot = r->slots; /* the stage's gather slot */
        SC_CHECK(kn_stage_gather(r->st, slot, r->ranges, n, err));
    }
    SC_CHECK(stage_backward(r, slot, err));
    for (int f = 0; f < r->m; f++) {
        if (r->slot_mb[slot_of(r, f)] == f && r->mb_off[f] + r->mb_size[f] <= b) {
            r->slot_mb[slot_of(r, f)] = -1;
            --*inflight;
        }
    }
    return SC_OK;
}

static bool is_backward(rt_action_kind kind)
{
    return kind == RT_ACT_RECV_B || kind == RT_ACT_B || kind == RT_ACT_SEND_B;
}

static rt_tl_kind timeline_kind(rt_action_kind kind)
{
    switch (kind) {
    case RT_ACT_RECV_F:
        return RT_TL_RECV_ACTIVATION;
    case RT_ACT_F:
        return RT_TL_FORWARD;
    case RT_ACT_SEND_F:
        return RT_TL_SEND_ACTIVATION;
    case RT_ACT_RECV_B:
        return RT_TL_RECV_GRADIENT;
    case RT_ACT_B:
        return RT_TL_BACKWARD;
    case RT_ACT_SEND_B:
        return RT_TL_SEND_GRADIENT;
    case RT_ACT_W:
        return RT_TL_WEIGHT_GRADIENT;
    case RT_ACT_OPT:
        break;
    }
    return RT_TL_OPTIMIZER;
}

static bool is_compute(rt_action_kind k)
{
    return k == RT_ACT_F || k == RT_ACT_B || k == RT_ACT_W || k == RT_ACT_OPT;
}

/* GPU stages: the mark that opens (a == NULL) or closes (the action a) an action's compute on
 * the stage's stream; nothing elsewhere */
static sc_status gpu_mark(rt_runner *r, const rt_action *a, uint64_t step, sc_err *err)
{
    if (!r->gpu_timed)
        return SC_OK;
    if (r->n_timed >= r->max_timed)
        return SC_ERRF(err, SC_ERR_INTERNAL, "runner stage %d: more than %d timed actions", r->s,
                       r->max_timed);
    SC_CHECK(kn_ctx_mark(kn_stage_ctx(r->st), 1 + 2 * r->n_timed + (a != NULL ? 1 : 0), err));
    if (a != NULL)
        r->timed[r->n_timed++] = (rt_gpu_timed){(uint8_t)timeline_kind(a->kind), a->mb, step};
    return SC_OK;
}

/* Opens a GPU stage's iteration: mark 0, waited for, pins the marks to the host clock. */
static sc_status gpu_timed_begin(rt_runner *r, sc_err *err)
{
    r->n_timed = 0;
    if (!r->gpu_timed)
        return SC_OK;
    kn_ctx *c = kn_stage_ctx(r->st);
    /* room for every compute action of an iteration: F, B (or a backward entry) and W per
     * micro-batch, and the optimizer step */
    int need = 4 * r->m + 8;
    if (r->max_timed < need) {
        rt_gpu_timed *t = realloc(r->timed, (size_t)need * sizeof *t);
        SC_ALLOC_CHECK(t, err);
        r->timed = t;
        SC_CHECK(kn_ctx_marks(c, 1 + 2 * need, err));
        r->max_timed = need;
    }
    SC_CHECK(kn_ctx_mark(c, 0, err));
    return kn_ctx_mark_sync(c, 0, &r->timed_origin_ns, err);
}

/* Closes it: waits for the last compute, puts each timed action on the timeline at its GPU
 * start and end, and makes the report's compute seconds the GPU's. */
static sc_status gpu_timed_end(rt_runner *r, rt_report *rep, sc_err *err)
{
    if (!r->gpu_timed || r->n_timed == 0)
        return SC_OK;
    kn_ctx *c = kn_stage_ctx(r->st);
    uint64_t seen_ns;
    SC_CHECK(kn_ctx_mark_sync(c, 2 * r->n_timed, &seen_ns, err));
    rep->forward_s = rep->backward_s = rep->wgrad_s = rep->optimizer_s = 0.0;
    for (int k = 0; k < r->n_timed; k++) {
        double s0, s1;
        SC_CHECK(kn_ctx_mark_elapsed(c, 0, 1 + 2 * k, &s0, err));
        SC_CHECK(kn_ctx_mark_elapsed(c, 0, 2 + 2 * k, &s1, err));
        const rt_gpu_timed *t = &r->timed[k];
        double d = s1 - s0;
        if (t->kind == RT_TL_FORWARD)
            rep->forward_s += d;
        else if (t->kind == RT_TL_OPTIMIZER)
            rep->optimizer_s += d;
        else
            rep->backward_s += d; /* B and W together: the backward's time */
        if (t->kind == RT_TL_WEIGHT_GRADIENT)
            rep->wgrad_s += d;
        rt_timeline_add(r->tl, (rt_tl_kind)t->kind, t->mb, t->step,
                        r->timed_origin_ns + (uint64_t)(s0 * 1e9),
                        r->timed_origin_ns + (uint64_t)(s1 * 1e9));
    }
    return SC_OK;
}

/* Runs one action; a successful one is recorded on the timeline (the OPT of copies as the
 * all-reduce and the optimizer step), from the clock read that starts its report figures. */
static sc_status run_action(rt_runner *r, uint64_t step, const rt_action *a, rt_report *rep,
                            int *inflight, double *loss_sum, sc_err *err)
{
    /* the samples [off, off + M) of the action's micro-batch, or of its backward entry */
    bool entry = r->bsplit && is_backward(a->kind);
    int off = a->mb < 0 ? 0 : entry ? r->bw_off[a->mb] : r->mb_off[a->mb];
    size_t M = a->mb < 0 ? 0
               : entry   ? (size_t)(r->bw_off[a->mb + 1] - off)
                         : (size_t)r->mb_size[a->mb];
    size_t in_bytes = M * r->in_elems * 4, out_bytes = M * r->out_elems * sizeof(float);
    int mb = a->mb, slot = mb >= 0 && !entry ? slot_of(r, mb) : -1;
    uint64_t t0_ns;
    double t0 = rt_now(&t0_ns), cpu0 = is_compute(a->kind) ? sc_clock_thread_cpu_s() : 0;
    switch (a->kind) {
    case RT_ACT_RECV_F:
        if (r->resliced) {
            SC_CHECK(gather(r, RT_MSG_ACTIVATION, step, r->prev_off, &r->prev_got, r->in_all,
                            r->in_elems * 4, off, off + (int)M, r->in_buf, &rep->wait_s, err));
            break;
        }
        if (r->dev_prev) /* the previous forward's copy out of in_dev has run */
            SC_CHECK(kn_ctx_sync(kn_stage_ctx(r->st), err));
        SC_CHECK(rt_transport_recv(tr_dir(r, false), RT_MSG_ACTIVATION, step, mb,
                                   r->dev_prev ? r->in_dev : r->in_buf, in_bytes, err));
        rep->wait_s += sc_clock_now_s() - t0;
        break;
    case RT_ACT_F:
        if (r->slot_mb[slot] != -1)
            return slot_error(r, "forward", mb, err);
        if (r->first || r->last)
            SC_CHECK(rt_data_batch(r->data, step, r->mb_off[mb], (int)M,
                                   r->first ? r->in_buf : NULL, r->last ? r->tgt_buf : NULL, err));
        SC_CHECK(gpu_mark(r, NULL, step, err));
        SC_CHECK(stage_forward(r, slot, (int)M, err));
        SC_CHECK(gpu_mark(r, a, step, err));
        r->slot_mb[slot] = mb;
        if (++*inflight > rep->max_inflight)
            rep->max_inflight = *inflight;
        if (r->last) {
            float l = 0.0f;
            SC_CHECK(kn_stage_loss(r->st, slot, &l, err));
            *loss_sum += (double)l * (double)M; /* per-sample weight: sizes may differ */
        }
        rt_runner_extra_compute(r->extra_f_s * (double)M);
        rep->forward_s += sc_clock_now_s() - t0;
        break;
    case RT_ACT_SEND_F:
        if (r->slot_mb[slot] != mb)
            return slot_error(r, "send of the output", mb, err);
        if (r->dev_next) { /* straight from the slot, once the forward has written it */
            SC_CHECK(kn_ctx_sync(kn_stage_ctx(r->st), err));
            SC_CHECK(rt_runner_send_routed(r, RT_MSG_ACTIVATION, step, mb,
                                           kn_stage_output(r->st, slot), out_bytes, err));
            break;
        }
        SC_CHECK(kn_stage_output_to_host(r->st, slot, r->out_buf, err));
        SC_CHECK(rt_runner_send_routed(r, RT_MSG_ACTIVATION, step, mb, r->out_buf, out_bytes, err));
        break;
    case RT_ACT_RECV_B:
        if (r->frozen_all)
            break; /* frozen downstream too: no gradient comes */
        if (r->resliced) {
            SC_CHECK(gather(r, RT_MSG_GRADIENT, step, r->next_off, &r->next_got,
                            (unsigned char *)r->gout_all, r->out_elems * sizeof(float), off,
                            off + (int)M, r->gout_buf, &rep->wait_s, err));
            break;
        }
        if (r->dev_next) /* the previous backward has read gout_dev */
            SC_CHECK(kn_ctx_sync(kn_stage_ctx(r->st), err));
        SC_CHECK(rt_transport_recv(tr_dir(r, true), RT_MSG_GRADIENT, step, mb,
                                   r->dev_next ? (void *)r->gout_dev : r->gout_buf, out_bytes,
                                   err));
        rep->wait_s += sc_clock_now_s() - t0;
        break;
    case RT_ACT_B:
        SC_CHECK(gpu_mark(r, NULL, step, err));
        if (entry) {
            SC_CHECK(backward_entry(r, mb, inflight, err));
        } else {
            if (r->slot_mb[slot] != mb)
                return slot_error(r, "backward", mb, err);
            SC_CHECK(stage_backward(r, slot, err));
            if (r->sched->kind != RT_SCHED_ZB1) { /* zb1: the slot is held until its W */
                r->slot_mb[slot] = -1;
                --*inflight;
            }
        }
        SC_CHECK(gpu_mark(r, a, step, err));
        if (r->grad_upstream) {
            /* The stage keeps only the latest input gradient: take it now. */
            if (r->dev_prev)
                SC_CHECK(kn_ctx_copy(kn_stage_ctx(r->st), r->gin_dev, kn_stage_grad_input(r->st),
                                     M * r->in_elems * sizeof(float), err));
            else
                SC_CHECK(kn_stage_grad_input_to_host(r->st, r->gin_buf, err));
            r->gin_mb = mb;
        }
        /* zb1: the added backward seconds split as the planner assumes (plan_partition.h) */
        rt_runner_extra_compute(r->extra_b_s * (double)M *
                                (r->sched->kind == RT_SCHED_ZB1 ? 0.5 : 1.0));
        rep->backward_s += sc_clock_now_s() - t0;
        break;
    case RT_ACT_W:
        if (r->slot_mb[slot] != mb)
            return slot_error(r, "weight gradient", mb, err);
        SC_CHECK(gpu_mark(r, NULL, step, err));
        SC_CHECK(kn_stage_backward_weight(r->st, slot, err));
        SC_CHECK(gpu_mark(r, a, step, err));
        r->slot_mb[slot] = -1;
        --*inflight;
        rt_runner_extra_compute(r->extra_b_s * (double)M * 0.5);
        double w_s = sc_clock_now_s() - t0; /* one reading: W's share never exceeds the total */
        rep->backward_s += w_s;             /* B and W together: the backward's time */
        rep->wgrad_s += w_s;
        break;
    case RT_ACT_SEND_B:
        if (!r->grad_upstream)
            break; /* the stage upstream is frozen: it wants no gradient */
        if (r->gin_mb != mb)
            return SC_ERRF(err, SC_ERR_INTERNAL,
                           "runner stage %d: SEND_B of micro-batch %d "
                           "after the backward of %d",
                           r->s, mb, r->gin_mb);
        if (r->dev_prev) /* the copy into gin_dev has run */
            SC_CHECK(kn_ctx_sync(kn_stage_ctx(r->st), err));
        SC_CHECK(rt_runner_send_routed(r, RT_MSG_GRADIENT, step, mb,
                                       r->dev_prev ? (const void *)r->gin_dev : r->gin_buf,
                                       M * r->in_elems * sizeof(float), err));
        break;
    case RT_ACT_OPT:
        if (r->nrep > 1 && !(r->frozen_all && !r->last)) { /* the copies' summed gradient */
            SC_CHECK(rt_runner_reduce_copies(r, step, -1, false, loss_sum, err));
            rep->wait_s += sc_clock_now_s() - t0; /* counted as waiting, not as the optimizer */
            uint64_t reduced_ns = t0_ns;
            t0 = rt_now(&t0_ns);
            cpu0 = sc_clock_thread_cpu_s();
            rt_timeline_add(r->tl, RT_TL_ALLREDUCE, -1, step, reduced_ns, t0_ns);
        }
        SC_CHECK(rt_runner_tie_exchange(r, step, err));
        bool skip = false; /* fp16: an overflow on some stage skips the update everywhere */
        SC_CHECK(rt_runner_scale_agree(r, step, &skip, err));
        SC_CHECK(gpu_mark(r, NULL, step, err));
        if (!skip)
            SC_CHECK(rt_runner_optimizer_apply(r, err));
        SC_CHECK(gpu_mark(r, a, step, err));
        rep->optimizer_s += sc_clock_now_s() - t0;
        break;
    }
    if (is_compute(a->kind))
        rep->busy_cpu_s += sc_clock_thread_cpu_s() - cpu0;
    if (!(r->gpu_timed && is_compute(a->kind))) /* else at the iteration's end, GPU-timed */
        rt_timeline_add(r->tl, timeline_kind(a->kind), mb, step, t0_ns, sc_clock_now_ns());
    return SC_OK;
}

/* The step's transfer figures: from the stage's transports (rt_link_sample) and of the copies'
 * all-reduce (rt_reduce_sample). */
static void take_links(rt_runner *r, rt_report *rep)
{
    rep->reduce = r->reduced;
    memset(&r->reduced, 0, sizeof r->reduced);
    rt_transport *trs[2] = {r->tr, r->tr_next};
    for (int i = 0; i < 2; i++)
        if (trs[i] != NULL)
            rep->n_links += (int)rt_transport_link_take(trs[i], rep->links + rep->n_links,
                                                        (size_t)(RT_LINK_MAX - rep->n_links));
}

sc_status rt_runner_step(rt_runner *r, uint64_t step, rt_report *report, sc_err *err)
{
    if (r->broken)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "runner stage %d: an earlier step failed; load "
                       "a checkpoint first",
                       r->s);
    rt_report rep;
    memset(&rep, 0, sizeof rep);
    rep.step = step;
    if (r->pipedream) {
        if (r->pd_fwd != r->pd_bwd && step != pd_step_of(r, r->pd_fwd))
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner stage %d: pipedream step %llu while %d minibatches are in "
                           "flight; valid: the next step %llu (or call rt_runner_flush first)",
                           r->s, (unsigned long long)step, pd_inflight(r),
                           (unsigned long long)pd_step_of(r, r->pd_fwd));
        rt_timeline_begin(r->tl, step);
        sc_status rc = rt_runner_pd_step(r, step, &rep, err);
        if (rc == SC_OK)
            rt_timeline_commit(r->tl);
        if (rc != SC_OK) { /* the stream is partial (messages taken, updates made) */
            r->broken = true;
            for (int i = 0; i < r->slots; i++)
                r->slot_mb[i] = -1;
        }
        take_links(r, &rep);
        if (rc == SC_OK && report != NULL)
            *report = rep;
        return rc;
    }
    double t0 = sc_clock_now_s();
    rt_timeline_begin(r->tl, step);
    sc_status rc = gpu_timed_begin(r, err);
    if (rc == SC_OK)
        rc = kn_stage_zero_grads(r->st, err);
    int inflight = 0;
    double loss_sum = 0.0;
    r->prev_got = 0;
    r->next_got = 0;
    bool own_list = r->group || r->bsplit;
    const rt_action *acts = own_list ? r->acts : r->sched->actions[r->s];
    int nacts = own_list ? r->nacts : r->sched->count[r->s];
    for (int i = 0; rc == SC_OK && i < nacts; i++)
        rc = run_action(r, step, &acts[i], &rep, &inflight, &loss_sum, err);
    if (rc == SC_OK && rep.max_inflight > r->slots)
        rc = SC_ERRF(err, SC_ERR_INTERNAL, "runner stage %d: %d micro-batches in flight, %d slots",
                     r->s, rep.max_inflight, r->slots);
    /* a backward cut frees forward slots by sample coverage: all must be free at the end */
    if (rc == SC_OK && r->bsplit && inflight != 0)
        rc = SC_ERRF(err, SC_ERR_INTERNAL,
                     "runner stage %d: %d forward micro-batches still held after the backwards",
                     r->s, inflight);
    /* every neighbour message of the iteration was taken: none is left for the next one */
    if (rc == SC_OK && r->resliced &&
        ((!r->first && r->prev_got != r->n_prev) ||
         (!r->last && !r->frozen_all && r->next_got != r->n_next)))
        rc = SC_ERRF(err, SC_ERR_INTERNAL,
                     "runner stage %d: took %d of %d activations and %d of %d gradients", r->s,
                     r->prev_got, r->n_prev, r->next_got, r->n_next);
    if (rc == SC_OK)
        rc = gpu_timed_end(r, &rep, err);
    if (rc != SC_OK) {
        r->broken = true;
        for (int i = 0; i < r->slots; i++)
            r->slot_mb[i] = -1;
        return rc;
    }
    rep.iteration_s = sc_clock_now_s() - t0;
    rep.busy_s = rep.forward_s + rep.backward_s + rep.optimizer_s;
    rep.memory_bytes =
        kn_stage_memory_bytes(r->st) + kn_ctx_scratch_bytes(kn_stage_ctx(r->st));
    rep.samples_per_s = rep.iteration_s > 0.0 ? (double)r->own_samples / rep.iteration_s : 0.0;
    rep.has_loss = r->last;
    rep.loss = r->last ? loss_sum / (double)r->batch : 0.0;
    rep.microbatches = r->own_mbs;
    rep.slots = r->slots + (r->gather_cap > 0 ? 1 : 0);
    rep.n_blocks = r->nb;
    /* a skipped step's norms are the overflow's: nothing for the freezing policy to read */
    rep.grad_sq_norms = r->grad_norms && !r->scale_skipped ? r->norms : NULL;
    rep.loss_scale = r->scaling ? r->scale : 0.0f;
    rep.skipped = r->scale_skipped;
    rep.skipped_steps = r->scale_skips;
    rt_timeline_commit(r->tl);
    take_links(r, &rep);
    if (report != NULL)
        *report = rep;
    return SC_OK;
}
