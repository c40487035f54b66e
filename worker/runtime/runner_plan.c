/*
 * rt runner, planning (at rt_runner_new): the micro-batches actually run (the sliced warm-up's
 * halves), every stage's copies and this copy's action list with its dry-run checks (pipedream's
 * warm-up and slots included), the neighbours' cuts and the backward cut of sizes per stage, and
 * the host buffers sized by them.
 * Not here: the schedules themselves (schedule.c), running the plan (runner_exec.c,
 * runner_pipedream.c), the transports (runner_connect.c).
 * Invariant: micro-batch i covers samples [mb_off[i], mb_off[i] + mb_size[i]) of the batch and
 * the micro-batches tile it in order; every neighbour cut planned here tiles it too (prefix
 * offsets ending at batch_size), or rt_runner_new fails naming the list.
 */
#include "worker/runtime/runner_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "worker/runtime/schedule.h"

/* Every stage's copy count: cfg stage_replicas (checked against the three counts the stage was
 * given), or those three with 1 for the other stages. */
static sc_status plan_stage_replicas(rt_runner *r, const rt_runner_cfg *c, sc_err *err)
{
    r->stage_reps = calloc((size_t)r->p, sizeof *r->stage_reps);
    SC_ALLOC_CHECK(r->stage_reps, err);
    for (int st = 0; st < r->p; st++) {
        int known = st == r->s       ? r->nrep
                    : st == r->s - 1 ? r->nrep_prev
                    : st == r->s + 1 ? r->nrep_next
                                     : 1;
        if (c->stage_replicas == NULL) {
            r->stage_reps[st] = known;
            continue;
        }
        int given = c->stage_replicas[st];
        if (given < 1)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner stage %d: stage_replicas[%d] = %d; valid: >= 1 copies", r->s, st,
                           given);
        if (st >= r->s - 1 && st <= r->s + 1 && given != known)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner stage %d: stage_replicas[%d] = %d; valid: equal to %s (%d)",
                           r->s, st, given,
                           st == r->s       ? "replicas"
                           : st == r->s - 1 ? "prev_replicas"
                                            : "next_replicas",
                           known);
        r->stage_reps[st] = given;
    }
    return SC_OK;
}

/* pipedream (1F1B-RR, see rt_schedule_pipedream_warmup): the warm-up and slots of this stage,
 * and, when any stage has copies, the checks that its stream cannot deadlock nor outgrow them. */
static sc_status plan_pipedream(rt_runner *r, sc_err *err)
{
    /* Rounds of a stage's r copies must not straddle steps: a step then ends with whole rounds
     * on every stage (the last stage's copies complete theirs within the step, so each reports
     * the step's loss), and a flush leaves no round half done. */
    long long lcm = 1; /* of the copy counts; stops growing past 2^30, where no m reaches */
    bool any = false;
    for (int st = 0; st < r->p; st++) {
        long long a = lcm, b = r->stage_reps[st];
        while (b != 0) {
            long long t = a % b;
            a = b;
            b = t;
        }
        if (lcm <= 1ll << 30)
            lcm = lcm / a * r->stage_reps[st];
        any = any || r->stage_reps[st] > 1;
    }
    if (r->m % lcm != 0) {
        char list[160] = "";
        for (int st = 0, at = 0; st < r->p && at < (int)sizeof list - 16; st++)
            at += snprintf(list + at, sizeof list - (size_t)at, "%s%d", st ? ", " : "",
                           r->stage_reps[st]);
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: schedule \"pipedream\" with stage copies [%s] needs "
                       "microbatches to be a multiple of every stage's copies, so that rounds "
                       "of copies never straddle steps; got %d; valid: %lld, %lld, ...",
                       r->s, list, r->m, lcm, 2 * lcm);
    }
    r->pd_warm = rt_schedule_pipedream_warmup(r->p, r->stage_reps, r->s);
    r->slots = rt_schedule_pipedream_slots(r->p, r->stage_reps, r->s);
    r->own_mbs = r->m / r->nrep;
    for (int j = r->rep; j < r->m; j += r->nrep)
        r->own_samples += r->mb_size[j];
    if (!any)
        return SC_OK; /* the textbook stream: stage s keeps p-s minibatches */
    /* Dry runs of the whole job's copies over streams of 1, 2, ... steps and their drains, long
     * enough to pass the fill of stage 0 (W_0 < all copies) and some rounds of steady state. */
    int total = 0;
    for (int st = 0; st < r->p; st++)
        total += r->stage_reps[st];
    sc_status rc = SC_OK;
    for (int len = r->m; rc == SC_OK; len += r->m) {
        rt_schedule *ps = NULL;
        rt_action *acts = NULL;
        int n = 0, slots = 0;
        rc = rt_schedule_new_pipedream(&ps, r->p, r->stage_reps, len, err);
        if (rc == SC_OK)
            rc = rt_schedule_validate_replicas(ps, NULL, err);
        if (rc == SC_OK)
            rc = rt_schedule_restrict(ps, r->s, r->nrep, r->rep, &acts, &n, &slots, err);
        if (rc == SC_OK && slots > r->slots)
            rc = SC_ERRF(err, SC_ERR_INTERNAL,
                         "runner stage %d copy %d: the pipedream stream of %d minibatches holds "
                         "%d in flight, more than its %d slots",
                         r->s, r->rep, len, slots, r->slots);
        free(acts);
        rt_schedule_destroy(&ps);
        if (len >= 2 * total + 2 * lcm)
            break;
    }
    return rc;
}

/* The synchronous lists: gpipe, 1f1b or zb1 (with the configured deferral caps) over r->m
 * micro-batches, or sliced (r->halved > 0). */
static sc_status new_schedule(rt_runner *r, const rt_runner_cfg *c, rt_schedule_kind skind,
                              sc_err *err)
{
    if (r->halved > 0)
        return rt_schedule_new_sliced(&r->sched, r->p, r->m, r->halved, r->stage_reps, err);
    if (skind == RT_SCHED_ZB1)
        return rt_schedule_new_zb1(&r->sched, r->p, r->m, r->stage_reps, c->zb1_defer, err);
    return rt_schedule_new_replicated(&r->sched, skind, r->p, r->m, r->stage_reps, err);
}

/* The schedule and, for replicated stages, the restricted action list and its checks. The runner
 * knows the replica counts of its own stage and its two neighbours, and of the others when given
 * stage_replicas (else it takes them as unreplicated; the plan's whole vector can be checked with
 * rt_schedule_validate_replicas). 1f1b's warm-up counts the copies of every later stage
 * (rt_schedule_new_replicated), so a replicated 1f1b or sliced stage with stages beyond its next
 * one needs the vector. */
sc_status rt_runner_plan_replicas(rt_runner *r, const rt_runner_cfg *c, rt_schedule_kind skind,
                                  sc_err *err)
{
    r->nrep = c->replicas;
    r->rep = c->replica;
    r->nrep_prev = r->first ? 1 : c->prev_replicas;
    r->nrep_next = r->last ? 1 : c->next_replicas;
    r->group = r->nrep > 1 || r->nrep_prev > 1 || r->nrep_next > 1;
    SC_CHECK(plan_stage_replicas(r, c, err));
    if (r->pipedream) {
        SC_CHECK(rt_schedule_new(&r->sched, skind, r->p, r->m, err));
        return plan_pipedream(r, err);
    }
    if (r->group && (skind == RT_SCHED_1F1B || skind == RT_SCHED_ZB1) &&
        c->stage_replicas == NULL && r->s + 2 < r->p)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d of %d: schedule \"%s\" with replicated stages (replicas "
                       "%d, prev_replicas %d, next_replicas %d) needs stage_replicas, the copies "
                       "of every stage: its warm-up counts the copies of stages %d..%d; valid: "
                       "the plan's [n_stages] vector, the same for every runner",
                       r->s, r->p, c->schedule != NULL ? c->schedule : "1f1b", r->nrep,
                       r->nrep_prev, r->nrep_next, r->s, r->p - 1);
    if (!r->group) {
        /* the copies of stages further on still set the warm-up (1, 1, 4: stage 0 warms up
         * with 5 forwards) */
        SC_CHECK(new_schedule(r, c, skind, err));
        r->own_mbs = r->m;
        r->own_samples = r->batch;
        r->slots = r->sched->slots[r->s];
        return SC_OK;
    }
    /* sliced is 1f1b over the micro-batches with the first k cut in halves: each half is a
     * micro-batch of its own here (r->m counts them), routed round-robin like any other */
    int most = r->nrep > r->nrep_prev ? r->nrep : r->nrep_prev;
    most = r->nrep_next > most ? r->nrep_next : most;
    if (most > r->m)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: %d replicas (stage %d: replicas %d, prev_replicas %d, "
                       "next_replicas %d) but only %d micro-batches; every replica needs one: "
                       "microbatches >= replicas",
                       most, r->s, r->nrep, r->nrep_prev, r->nrep_next, r->m);
    SC_CHECK(new_schedule(r, c, skind, err));
    SC_CHECK(rt_schedule_validate_replicas(r->sched, r->stage_reps, err));
    SC_CHECK(
        rt_schedule_restrict(r->sched, r->s, r->nrep, r->rep, &r->acts, &r->nacts, &r->slots, err));
    for (int j = r->rep; j < r->m; j += r->nrep) {
        r->own_mbs++;
        r->own_samples += r->mb_size[j];
    }
    return SC_OK;
}

sc_status rt_runner_alloc_buffers(rt_runner *r, sc_err *err)
{
    /* forwards use the first three, backwards (their own cut) the gradients */
    size_t M = (size_t)r->Mcap, MB = (size_t)(r->Bcap > r->Mcap ? r->Bcap : r->Mcap);
    r->slot_mb = malloc((size_t)r->slots * sizeof *r->slot_mb);
    /* the transfers' buffers in the stage's host memory (page-locked for a GPU stage: its
     * copies to and from the device need no staging) */
    kn_ctx *ctx = kn_stage_ctx(r->st);
    void *in = NULL, *out = NULL, *gout = NULL, *gin = NULL;
    SC_CHECK(kn_ctx_host_alloc(ctx, (M * r->in_elems + 1) * 4, &in, err));
    r->in_buf = in;
    SC_CHECK(kn_ctx_host_alloc(ctx, (M * r->out_elems + 1) * sizeof *r->out_buf, &out, err));
    r->out_buf = out;
    SC_CHECK(kn_ctx_host_alloc(ctx, (MB * r->out_elems + 1) * sizeof *r->gout_buf, &gout, err));
    r->gout_buf = gout;
    SC_CHECK(kn_ctx_host_alloc(ctx, (MB * r->in_elems + 1) * sizeof *r->gin_buf, &gin, err));
    r->gin_buf = gin;
    r->tgt_buf = calloc(M * (size_t)r->tps + 1, sizeof *r->tgt_buf);
    r->params = calloc(r->np + 1, sizeof *r->params);
    /* with room after the gradients for the loss sum the copies' all-reduce sends with them */
    r->grads = calloc(r->np + 1 + sizeof(double) / sizeof(float), sizeof *r->grads);
    r->state = calloc(r->nstate + 1, sizeof *r->state);
    r->norms = calloc((size_t)r->nb, sizeof *r->norms);
    if (!r->slot_mb || !r->in_buf || !r->tgt_buf || !r->out_buf || !r->gout_buf || !r->gin_buf ||
        !r->params || !r->grads || !r->state || !r->norms)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory allocating the runner's host buffers");
    for (int i = 0; i < r->slots; i++)
        r->slot_mb[i] = -1;
    r->gin_mb = -1;
    return SC_OK;
}

/* Sizes and offsets of the micro-batches actually run: the configured ones, with the first k cut
 * in halves for the sliced schedule. Sample identities do not change: micro-batch i covers samples
 * [mb_off[i], mb_off[i] + mb_size[i]) of the batch whatever the cut. */
sc_status rt_runner_plan_microbatches(rt_runner *r, const rt_runner_cfg *c, bool sliced,
                                      sc_err *err)
{
    int m = c->microbatches, k = 0;
    if (sliced) {
        k = c->sliced_warmup < 0 ? c->n_stages - 1 : c->sliced_warmup;
        if (k > m)
            k = m;
    }
    r->m = m + k;
    r->halved = k;
    r->mb_size = calloc((size_t)r->m, sizeof *r->mb_size);
    r->mb_off = calloc((size_t)r->m, sizeof *r->mb_off);
    if (r->mb_size == NULL || r->mb_off == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory planning micro-batches");
    int64_t total = 0;
    int n = 0;
    for (int i = 0; i < m; i++) {
        int size = c->microbatch_sizes != NULL ? c->microbatch_sizes[i] : c->batch_size / m;
        if (size < 1 || size > c->batch_size)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner: microbatch_sizes[%d] = %d; each size must be in [1, "
                           "batch_size %d]",
                           i, size, c->batch_size);
        if (i < k && size < 2)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner: sliced warm-up cannot halve micro-batch %d of %d sample; use "
                           "sliced_warmup < %d",
                           i, size, i + 1);
        int parts = i < k ? 2 : 1;
        for (int part = 0; part < parts; part++) {
            int piece = parts == 1 ? size : part == 0 ? size / 2 : size - size / 2;
            r->mb_size[n] = piece;
            r->mb_off[n] = (int)total;
            total += piece;
            if (piece > r->Mcap)
                r->Mcap = piece;
            n++;
        }
    }
    if (total != c->batch_size)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: microbatch_sizes sum to %lld, batch_size is %d", (long long)total,
                       c->batch_size);
    return SC_OK;
}

/* One neighbour's cut (`sizes`, NULL: the same as this stage's) as prefix offsets in *off. */
static sc_status plan_neighbour(rt_runner *r, const char *what, const int *sizes, int n, int **off,
                                int *count, sc_err *err)
{
    if (sizes == NULL) {
        n = r->m;
        sizes = r->mb_size;
    } else if (n < 1 || n > r->batch) {
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: n_%s %d; valid: 1..batch_size %d (one size per "
                       "entry of that cut)",
                       r->s, what, n, r->batch);
    }
    *off = calloc((size_t)n + 1, sizeof **off);
    SC_ALLOC_CHECK(*off, err);
    int64_t total = 0;
    for (int k = 0; k < n; k++) {
        if (sizes[k] < 1 || sizes[k] > r->batch)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner stage %d: %s[%d] = %d; each size must be in [1, batch_size %d]",
                           r->s, what, k, sizes[k], r->batch);
        (*off)[k] = (int)total;
        total += sizes[k];
        if (total > r->batch)
            break;
    }
    if (total != r->batch)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: %s sum to %s%lld, batch_size is %d; a stage's sizes "
                       "must cover the batch exactly",
                       r->s, what, total > r->batch ? "more than " : "", (long long)total,
                       r->batch);
    (*off)[n] = (int)total;
    *count = n;
    return SC_OK;
}

/* The backward cut: which entries coincide with a forward micro-batch and which are gathered
 * (the largest of those sizes the gather slot). */
static sc_status plan_backward(rt_runner *r, const rt_runner_cfg *c, sc_err *err)
{
    r->Bcap = r->Mcap;
    if (c->backward_sizes == NULL)
        return SC_OK;
    SC_CHECK(plan_neighbour(r, "backward_sizes", c->backward_sizes, c->n_backward_sizes, &r->bw_off,
                            &r->nbw, err));
    r->bsplit = r->nbw != r->m;
    for (int j = 0; j < r->nbw && !r->bsplit; j++)
        r->bsplit = r->bw_off[j] != r->mb_off[j];
    if (!r->bsplit)
        return SC_OK; /* the forward cut again: nothing changes */
    r->bw_mb = calloc((size_t)r->nbw, sizeof *r->bw_mb);
    r->ranges = calloc((size_t)r->m, sizeof *r->ranges);
    SC_ALLOC_CHECK(r->bw_mb, err);
    SC_ALLOC_CHECK(r->ranges, err);
    r->Bcap = 0;
    for (int j = 0, k = 0; j < r->nbw; j++) {
        int a = r->bw_off[j], b = r->bw_off[j + 1];
        while (r->mb_off[k] + r->mb_size[k] <= a) /* the forward holding sample a */
            k++;
        bool same = r->mb_off[k] == a && r->mb_off[k] + r->mb_size[k] == b;
        r->bw_mb[j] = same ? k : -1;
        if (!same && b - a > r->gather_cap)
            r->gather_cap = b - a;
        if (b - a > r->Bcap)
            r->Bcap = b - a;
    }
    return SC_OK;
}

/* Sizes per stage: checks the neighbours' lists and the backward cut, and allocates the gather
 * buffers' offsets. */
sc_status rt_runner_plan_reslice(rt_runner *r, const rt_runner_cfg *c, bool unequal, sc_err *err)
{
    r->resliced = c->prev_sizes != NULL || c->next_sizes != NULL || c->backward_sizes != NULL ||
                  c->next_backward_sizes != NULL;
    if (!r->resliced)
        return SC_OK;
    if (r->first && c->prev_sizes != NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: stage 0 has no previous stage; prev_sizes must be NULL");
    if (r->last && c->next_sizes != NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: stage %d is the last stage; next_sizes must be NULL", r->s);
    if (r->last && c->next_backward_sizes != NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: stage %d is the last stage; next_backward_sizes must be NULL",
                       r->s);
    if (!unequal && (c->schedule == NULL || strcmp(c->schedule, "gpipe") != 0))
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "runner: sizes per stage (prev_sizes / next_sizes / backward_sizes / "
                       "next_backward_sizes) with schedule \"%s\"; valid: \"gpipe\", "
                       "\"unequal\" (fill-drain)",
                       c->schedule != NULL ? c->schedule : "(null)");
    if (c->replicas != 1 || (!r->first && c->prev_replicas != 1) ||
        (!r->last && c->next_replicas != 1))
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "runner: sizes per stage (prev_sizes / next_sizes / backward_sizes / "
                       "next_backward_sizes) with replicated stages (replicas %d, prev_replicas "
                       "%d, next_replicas %d); valid: all 1",
                       c->replicas, c->prev_replicas, c->next_replicas);
    if (!r->first)
        SC_CHECK(plan_neighbour(r, "prev_sizes", c->prev_sizes, c->n_prev_sizes, &r->prev_off,
                                &r->n_prev, err));
    if (!r->last) {
        /* next_off is the cut of the gradients received: the next stage's backward cut */
        SC_CHECK(plan_neighbour(r, "next_sizes", c->next_sizes, c->n_next_sizes, &r->next_off,
                                &r->n_next, err));
        if (c->next_backward_sizes != NULL) {
            free(r->next_off);
            r->next_off = NULL;
            SC_CHECK(plan_neighbour(r, "next_backward_sizes", c->next_backward_sizes,
                                    c->n_next_backward_sizes, &r->next_off, &r->n_next, err));
        }
    }
    r->next_bw_given = c->next_backward_sizes != NULL;
    return plan_backward(r, c, err);
}

/* Backward cut: the stage's gpipe forwards in their order, then its backward entries ascending,
 * each received (the gradients of its samples, from the next stage's own cut), run and sent,
 * then the optimizer step. As with the forward cuts, a receive waits only for the next stage's
 * backwards, which wait only for stages further down, so nothing deadlocks. */
sc_status rt_runner_plan_backward_actions(rt_runner *r, sc_err *err)
{
    const rt_action *fwd = r->sched->actions[r->s];
    int n = r->sched->count[r->s];
    r->acts = malloc(((size_t)n + 3 * (size_t)r->nbw + 1) * sizeof *r->acts);
    SC_ALLOC_CHECK(r->acts, err);
    int c = 0;
    for (int i = 0; i < n; i++)
        if (fwd[i].kind == RT_ACT_RECV_F || fwd[i].kind == RT_ACT_F || fwd[i].kind == RT_ACT_SEND_F)
            r->acts[c++] = fwd[i];
    for (int j = 0; j < r->nbw; j++) {
        if (!r->last)
            r->acts[c++] = (rt_action){RT_ACT_RECV_B, j};
        r->acts[c++] = (rt_action){RT_ACT_B, j};
        if (!r->first)
            r->acts[c++] = (rt_action){RT_ACT_SEND_B, j};
    }
    r->acts[c++] = (rt_action){RT_ACT_OPT, -1};
    r->nacts = c;
    return SC_OK;
}
