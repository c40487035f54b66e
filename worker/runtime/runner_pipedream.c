/*
 * rt runner, pipedream: the asynchronous stream of minibatches and its weight stashes.
 * pipedream does not run the action list: its stream of minibatches crosses steps
 * (rt_runner_pd_step, rt_runner_flush). Its counters pd_fwd / pd_bwd walk the whole stage's
 * stream (every copy's minibatches, g on copy g % replicas); a copy runs the F and B of its own,
 * and every copy runs the OPT (all-reduce and update) after the backward of each round's last
 * minibatch, so all copies pass the same OPTs and hold the same weights between calls.
 * Not here: the plan of the warm-up and slots and its dry runs (runner_plan.c), the update
 * (runner_update.c), the synchronous schedules (runner_exec.c).
 * Invariant: own minibatch g lives in slot (g / replicas) % slots from its F to its B, and its
 * backward runs on the weights stashed at its forward (stash[slot], version stash_ver[slot]); the
 * update always goes to the newest weights (params).
 */
#include "worker/runtime/runner_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "kernels/stage.h"
#include "worker/data/data.h"
#include "worker/transport/transport.h"

sc_status rt_runner_alloc_stash(rt_runner *r, sc_err *err)
{
    r->stash = calloc((size_t)r->slots, sizeof *r->stash);
    r->stash_ver = calloc((size_t)r->slots, sizeof *r->stash_ver);
    r->ver_fwd = calloc((size_t)r->m, sizeof *r->ver_fwd);
    r->stash_g = calloc((size_t)r->slots, sizeof *r->stash_g);
    /* a step runs at most m forwards and m backwards, a flush at most `slots` backwards */
    r->events = calloc((size_t)(2 * r->m + r->slots + r->p), sizeof *r->events);
    if (r->stash == NULL || r->stash_ver == NULL || r->ver_fwd == NULL || r->stash_g == NULL ||
        r->events == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory allocating weight stashes");
    for (int i = 0; i < r->slots; i++) {
        r->stash[i] = malloc(r->np * sizeof **r->stash + 1);
        if (r->stash[i] == NULL)
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory allocating weight stashes");
    }
    return SC_OK;
}

static void pd_event(rt_runner *r, bool backward, uint64_t g, uint64_t version)
{
    rt_pd_event *e = &r->events[r->n_events++];
    e->backward = backward;
    e->step = pd_step_of(r, g);
    e->mb = (int)(g % (uint64_t)r->m);
    e->version = version;
    e->inflight = pd_inflight(r);
}

/* This copy's slot of its own minibatch g. */
static int pd_slot(const rt_runner *r, uint64_t g)
{
    return (int)((g / (uint64_t)r->nrep) % (uint64_t)r->slots);
}

/* The stage's next forward, minibatch pd_fwd: another copy's passes by; an own one is received,
 * run with the newest weights (stashed for its backward) and sent. */
static sc_status pd_forward(rt_runner *r, rt_report *rep, double *loss_sum, sc_err *err)
{
    uint64_t g = r->pd_fwd, step = pd_step_of(r, g);
    int mb = (int)(g % (uint64_t)r->m), slot = pd_slot(r, g);
    if (g % (uint64_t)r->nrep != (uint64_t)r->rep) {
        r->ver_fwd[mb] = UINT64_MAX; /* run by copy g % nrep */
        r->pd_fwd++;
        return SC_OK;
    }
    size_t M = (size_t)r->mb_size[mb];
    uint64_t t0_ns, t1_ns;
    double t0 = rt_now(&t0_ns);
    if (!r->first) {
        SC_CHECK(rt_transport_recv(tr_dir(r, false), RT_MSG_ACTIVATION, step, mb, r->in_buf,
                                   M * r->in_elems * 4, err));
        rep->wait_s += sc_clock_now_s() - t0;
    }
    double t1 = rt_now(&t1_ns);
    if (!r->first)
        rt_timeline_add(r->tl, RT_TL_RECV_ACTIVATION, mb, step, t0_ns, t1_ns);
    if (r->slot_mb[slot] != -1)
        return slot_error(r, "forward", mb, err);
    if (r->first || r->last)
        SC_CHECK(rt_data_batch(r->data, step, r->mb_off[mb], (int)M, r->first ? r->in_buf : NULL,
                               r->last ? r->tgt_buf : NULL, err));
    /* The device holds the newest weights: after an own backward on stashed ones, the round's
     * OPT (which uploads the newest) always comes before the copy's next forward. */
    SC_CHECK(
        kn_stage_forward_host(r->st, slot, r->in_buf, r->last ? r->tgt_buf : NULL, (int)M, err));
    r->slot_mb[slot] = mb;
    r->stash_g[slot] = g;
    /* the weights this forward used, for its backward */
    memcpy(r->stash[slot], r->params, r->np * sizeof *r->params);
    r->stash_ver[slot] = kn_stage_step_count(r->st);
    r->ver_fwd[mb] = kn_stage_step_count(r->st);
    r->pd_fwd++;
    r->pd_own_f++;
    if (pd_inflight(r) > rep->max_inflight)
        rep->max_inflight = pd_inflight(r);
    if (r->last) {
        float l = 0.0f;
        SC_CHECK(kn_stage_loss(r->st, slot, &l, err));
        /* with copies, the round's all-reduce adds up the copies' losses */
        if (r->nrep > 1)
            r->pd_loss_own += (double)l * (double)M;
        else
            *loss_sum += (double)l * (double)M;
    }
    rt_runner_extra_compute(r->extra_f_s * (double)M);
    rep->forward_s += rt_now(&t0_ns) - t1;
    rt_timeline_add(r->tl, RT_TL_FORWARD, mb, step, t1_ns, t0_ns);
    pd_event(r, false, g, kn_stage_step_count(r->st));
    if (!r->last) {
        SC_CHECK(kn_stage_output_to_host(r->st, slot, r->out_buf, err));
        SC_CHECK(rt_runner_send_routed(r, RT_MSG_ACTIVATION, step, mb, r->out_buf,
                                       M * r->out_elems * sizeof(float), err));
        rt_timeline_add(r->tl, RT_TL_SEND_ACTIVATION, mb, step, t0_ns, sc_clock_now_ns());
    }
    return SC_OK;
}

/* The stage's next backward, minibatch pd_bwd. An own one is received, run with the weights
 * stashed at its forward and sent; its gradient waits in r->grads for the round's end. After a
 * round's last minibatch every copy runs the OPT: the copies' all-reduce (mean of the round's r
 * gradients; none unreplicated), then the same update of the newest weights on each. */
static sc_status pd_backward(rt_runner *r, rt_report *rep, double *loss_sum, sc_err *err)
{
    uint64_t k = r->pd_bwd, step = pd_step_of(r, k);
    int mb = (int)(k % (uint64_t)r->m);
    if (k % (uint64_t)r->nrep == (uint64_t)r->rep) {
        int slot = pd_slot(r, k);
        size_t M = (size_t)r->mb_size[mb];
        uint64_t t0_ns, t1_ns;
        double t0 = rt_now(&t0_ns);
        if (!r->last) {
            SC_CHECK(rt_transport_recv(tr_dir(r, true), RT_MSG_GRADIENT, step, mb, r->gout_buf,
                                       M * r->out_elems * sizeof(float), err));
            rep->wait_s += sc_clock_now_s() - t0;
        }
        double t1 = rt_now(&t1_ns);
        if (!r->last)
            rt_timeline_add(r->tl, RT_TL_RECV_GRADIENT, mb, step, t0_ns, t1_ns);
        if (r->slot_mb[slot] != mb || r->stash_g[slot] != k)
            return slot_error(r, "backward", mb, err);
        SC_CHECK(kn_stage_zero_grads(r->st, err));
        if (r->stash_ver[slot] !=
            kn_stage_step_count(r->st)) { /* newer weights since: back to the stashed ones */
            SC_CHECK(kn_stage_params_from_host(r->st, r->stash[slot], err));
            r->pd_stash_loaded = true;
        }
        SC_CHECK(kn_stage_backward_host(r->st, slot, r->last ? NULL : r->gout_buf, err));
        r->slot_mb[slot] = -1;
        r->pd_own_b++;
        if (!r->first)
            SC_CHECK(kn_stage_grad_input_to_host(r->st, r->gin_buf, err));
        rt_runner_extra_compute(r->extra_b_s * (double)M);
        rep->backward_s += rt_now(&t0_ns) - t1;
        rt_timeline_add(r->tl, RT_TL_BACKWARD, mb, step, t1_ns, t0_ns);
        r->pd_bwd++;
        pd_event(r, true, k, r->stash_ver[slot]);
        rep->backwards++;
        if (!r->first) {
            SC_CHECK(rt_runner_send_routed(r, RT_MSG_GRADIENT, step, mb, r->gin_buf,
                                           M * r->in_elems * sizeof(float), err));
            rt_timeline_add(r->tl, RT_TL_SEND_GRADIENT, mb, step, t0_ns, sc_clock_now_ns());
        }
    } else {
        r->pd_bwd++;
    }
    if (k % (uint64_t)r->nrep != (uint64_t)(r->nrep - 1))
        return SC_OK; /* the round goes on */
    uint64_t t2_ns;
    double t2 = rt_now(&t2_ns);
    if (r->nrep > 1) {
        /* m is a multiple of nrep, so the round's minibatches are micro-batches
         * mb - nrep + 1 .. mb of one step */
        SC_CHECK(
            rt_runner_reduce_copies(r, step, -1 - (mb - r->nrep + 1), true, &r->pd_loss_own, err));
        *loss_sum += r->pd_loss_own;
        r->pd_loss_own = 0.0;
        rep->wait_s += sc_clock_now_s() - t2; /* counted as waiting, not as the optimizer */
        uint64_t reduce_ns = t2_ns;
        t2 = rt_now(&t2_ns);
        rt_timeline_add(r->tl, RT_TL_ALLREDUCE, -1, step, reduce_ns, t2_ns);
    }
    /* the update is of the newest weights, not of the stash the backward ran on */
    if (r->pd_stash_loaded) {
        SC_CHECK(kn_stage_params_from_host(r->st, r->params, err));
        r->pd_stash_loaded = false;
    }
    SC_CHECK(rt_runner_optimizer_apply(r, err));
    uint64_t end_ns;
    rep->optimizer_s += rt_now(&end_ns) - t2;
    rt_timeline_add(r->tl, RT_TL_OPTIMIZER, -1, step, t2_ns, end_ns);
    return SC_OK;
}

static void pd_finish(rt_runner *r, rt_report *rep, double t0)
{
    rep->iteration_s = sc_clock_now_s() - t0;
    rep->busy_s = rep->forward_s + rep->backward_s + rep->optimizer_s;
    rep->weight_version_forward = r->ver_fwd;
    rep->events = r->events;
    rep->n_events = r->n_events;
    rep->inflight_end = pd_inflight(r);
    rep->slots = r->slots;
    rep->n_blocks = r->nb;
    rep->grad_sq_norms = r->grad_norms ? r->norms : NULL;
}

/* One step of the stream: the stage's m forwards of `step` (this copy's own run, the others'
 * pass by), each followed by the backwards the warm-up allows (the stage's backward of k after
 * its forward of k + pd_warm). */
sc_status rt_runner_pd_step(rt_runner *r, uint64_t step, rt_report *rep, sc_err *err)
{
    double t0 = sc_clock_now_s();
    if (r->pd_fwd == r->pd_bwd) { /* empty: a new fill starts at this step */
        r->pd_base = step;
        r->pd_fwd = r->pd_bwd = r->pd_own_f = r->pd_own_b = 0;
    }
    bool filling = r->pd_own_b == 0;
    uint64_t w = (uint64_t)r->pd_warm;
    double loss_sum = 0.0;
    r->n_events = 0;
    for (int j = 0; j < r->m; j++) {
        SC_CHECK(pd_forward(r, rep, &loss_sum, err));
        while (r->pd_fwd - r->pd_bwd > w) {
            if (filling && r->pd_own_b == 0 && r->pd_bwd % (uint64_t)r->nrep == (uint64_t)r->rep)
                rep->warmup_s = sc_clock_now_s() - t0;
            SC_CHECK(pd_backward(r, rep, &loss_sum, err));
        }
    }
    if (filling && r->pd_own_b == 0)
        rep->warmup_s = sc_clock_now_s() - t0; /* still filling (m small against the warm-up) */
    /* checked every step, as the synchronous schedules check theirs */
    if (rep->max_inflight > r->slots)
        return SC_ERRF(err, SC_ERR_INTERNAL, "runner stage %d: %d minibatches in flight, %d slots",
                       r->s, rep->max_inflight, r->slots);
    pd_finish(r, rep, t0);
    rep->samples_per_s = rep->iteration_s > 0.0 ? (double)r->own_samples / rep->iteration_s : 0.0;
    rep->has_loss = r->last;
    rep->loss = r->last ? loss_sum / (double)r->batch : 0.0;
    rep->microbatches = r->own_mbs;
    return SC_OK;
}

void rt_runner_pd_reset(rt_runner *r)
{
    r->pd_base = r->pd_fwd = r->pd_bwd = r->pd_own_f = r->pd_own_b = 0;
    r->pd_loss_own = 0.0;
    r->pd_stash_loaded = false;
}

sc_status rt_runner_flush(rt_runner *r, rt_report *report, sc_err *err)
{
    rt_report rep;
    memset(&rep, 0, sizeof rep);
    if (!r->pipedream) {
        if (report != NULL)
            *report = rep;
        return SC_OK;
    }
    if (r->broken)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "runner stage %d: an earlier step failed; load a checkpoint first", r->s);
    double t0 = sc_clock_now_s();
    r->n_events = 0;
    rep.step = r->pd_fwd > 0 ? pd_step_of(r, r->pd_fwd - 1) : 0;
    rt_timeline_begin(r->tl, rep.step); /* an entry of its own under the last step's number */
    /* whole rounds (m is a multiple of the copies): the last backward closes the last round */
    double loss_sum = 0.0;
    sc_status rc = SC_OK;
    while (rc == SC_OK && r->pd_bwd < r->pd_fwd)
        rc = pd_backward(r, &rep, &loss_sum, err);
    if (rc != SC_OK) {
        r->broken = true;
        return rc;
    }
    pd_finish(r, &rep, t0);
    rt_timeline_commit(r->tl);
    rep.weight_version_forward = NULL; /* no forwards ran */
    rt_runner_pd_reset(r);
    if (report != NULL)
        *report = rep;
    return SC_OK;
}
