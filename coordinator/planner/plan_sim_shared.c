/*
 * plan_sim_shared: plan_sim_run_shared, the event-driven player for stages that share
 * processors.
 *
 * A compute's duration depends on which other computes of its group overlap it, so this
 * player advances one simulated clock from event to event (a compute starting or finishing)
 * and re-rates a group's computes at each; receives, sends, links and the copies' barriers
 * follow the sweep's rules (plan_sim_internal.h). Does not build action lists: per-stage sizes
 * come through plan_sim_sized.c, which hands its lists to plan_sim_shared_play.
 * Invariant: a compute that ran at full rate throughout keeps its own duration bit for bit, so
 * a run where no group holds more computes than its capacity gives plan_sim_run's figures.
 */
#include "coordinator/planner/plan_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_sim_internal.h"

/* A compute in progress in the event-driven loop: `rem_s` of its own duration was left at
 * `anchor_s`, and it has progressed at `rate` since. Re-anchoring only when the rate changes
 * keeps a compute that never slowed down at exactly start + duration, as the sweep has it. */
typedef struct shared_run {
    int active;
    int stretched; /* its rate fell below 1 at some point */
    int kind, unit;
    double start_s, dur_s, anchor_s, rem_s, rate;
} shared_run;

/* A CFS-capped lane's token bucket (plan_sim_share.quota): `tokens` seconds at `at_s`, filling
 * at q while the lane does not compute and changing at q - cpu while it does, `cpu` being the
 * processor share its compute got (1 at full speed, q when the bucket is empty). */
typedef struct shared_quota {
    double q, cap, tokens, at_s, cpu;
} shared_quota;

/* The bucket brought forward to t; a level within a hair of 0 is 0 (the drain's end is an
 * event, met up to rounding). */
static void quota_advance(shared_quota *b, int computing, double t)
{
    double dt = t - b->at_s;
    if (dt > 0) {
        b->tokens += (computing ? b->q - b->cpu : b->q) * dt;
        b->tokens = b->tokens > b->cap ? b->cap : b->tokens < 0 ? 0 : b->tokens;
    }
    if (b->tokens <= b->cap * 1e-9)
        b->tokens = 0;
    b->at_s = t;
}

static double shared_end(const shared_run *r)
{
    return r->anchor_s + r->rem_s / r->rate;
}

/* Plays lane l's actions at simulated time t until it starts a compute, reaches a compute that
 * may start only later (a receive or the copies' barrier moved its clock past t), meets a
 * receive whose send has not been played or a barrier its copies have not all reached, or runs
 * out. Receives, sends, links and barriers follow the sweep's rules. Returns 1 when it played,
 * started or arrived at anything, 0 when not, -1 out of memory. */
static int shared_advance(sim_state *st, const plan_schedule *s, const plan_sim_stage *stages,
                          int record, int l, double t, shared_run *run)
{
    int U = st->U, played = 0, i = st->lane_stage[l];
    while (!run[l].active && st->cursor[l] < st->n_acts[l]) {
        const plan_action *a = &st->acts[l][st->cursor[l]];
        int u = a->unit;
        if (a->kind == PLAN_ACT_RECV_F || a->kind == PLAN_ACT_RECV_B) {
            double at = recv_arrival(st, l, a);
            if (isnan(at))
                return played;
            if (at > st->clock[l])
                st->clock[l] = at;
        } else if (a->kind == PLAN_ACT_SEND_F || a->kind == PLAN_ACT_SEND_B) {
            if (plan_sim_play_send(st, s, stages, l, a, record) != 0)
                return -1;
        } else if (is_compute(a->kind)) {
            if (a->kind == PLAN_ACT_OPT && !plan_sim_opt_pass(st, l, &played))
                return played;
            /* how many of a group compute at once decides their rates, so a compute joins only
             * when the loop's clock reaches its start */
            if (st->clock[l] > t)
                return played;
            double dur = plan_sim_start_compute(st, s, &stages[i], l, a);
            if (dur > 0) {
                run[l] = (shared_run){.active = 1,
                                      .kind = a->kind,
                                      .unit = u,
                                      .start_s = st->clock[l],
                                      .dur_s = dur,
                                      .anchor_s = st->clock[l],
                                      .rem_s = dur,
                                      .rate = 1};
                return 1;
            }
            /* nothing to share: done at once, as the sweep records it */
            if (a->kind == PLAN_ACT_B)
                st->bend[(size_t)i * U + u] = st->clock[l];
            if (record && plan_sim_add_lane_event(st, l, a->kind, u, st->clock[l], 0) != 0)
                return -1;
        }
        st->cursor[l]++;
        st->remaining--;
        played = 1;
    }
    return played;
}

sc_status plan_sim_share_check(const plan_sim_share *sh, int n, int copies, int *grouped,
                               sc_err *err)
{
    const char *what = copies ? "copy (lane)" : "stage";
    *grouped = 0;
    for (int i = 0; sh->quota != NULL && i < n; i++) {
        double q = sh->quota[i], p = sh->quota_period_s != NULL ? sh->quota_period_s[i] : 0;
        if (q == 0)
            continue;
        if (!(q > 0 && q < 1) || !(p > 0 && isfinite(p)))
            return SC_ERRF(err, SC_ERR_INVALID,
                           "CPU quota: %s %d has share %g over a period of %g s; valid: a share "
                           "in (0, 1) over a period > 0, or a share of 0 (no quota)",
                           what, i, q, p);
        *grouped = 1;
    }
    for (int g = 0; g < sh->n_groups; g++)
        if (sh->capacity[g] < 1)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "shared processors: group %d has capacity %d; it must be >= 1", g,
                           sh->capacity[g]);
    for (int i = 0; i < n; i++) {
        if (sh->group[i] < -1 || sh->group[i] >= sh->n_groups)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "shared processors: %s %d is in group %d; valid: -1 (own device) "
                           "or 0 to %d",
                           what, i, sh->group[i], sh->n_groups - 1);
        if (sh->weight != NULL && sh->weight[i] < 1)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "shared processors: %s %d has weight %d; it must be >= 1", what, i,
                           sh->weight[i]);
        *grouped |= sh->group[i] >= 0;
    }
    return SC_OK;
}

sc_status plan_sim_shared_play(const plan_schedule *s, const plan_sim_stage *stages, int n_micro,
                               double slice_efficiency, const plan_sim_share *share,
                               const sim_unit_times *ut, int record_events, plan_sim_result *out,
                               sc_err *err)
{
    int S = s->n_stages;
    sim_state st;
    shared_run *run = NULL;
    shared_quota *bucket = NULL;
    double *stretch = calloc((size_t)S * (size_t)s->n_units, sizeof *stretch);
    int *busy_n = calloc((size_t)share->n_groups + 1, sizeof *busy_n);
    sc_status rc = plan_sim_state_init(&st, s, slice_efficiency, out, err);
    st.ut = ut;
    if (rc != SC_OK)
        goto done;
    int N = st.N;
    run = calloc((size_t)N, sizeof *run);
    bucket = calloc((size_t)N, sizeof *bucket);
    if (!run || !stretch || !busy_n || !bucket) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory simulating %d shared stages", S);
        goto done;
    }
    /* capped lanes start with a full bucket: before the iteration the stage waited for it */
    for (int l = 0; share->quota != NULL && l < N; l++)
        if (share->quota[l] > 0) {
            double q = share->quota[l];
            bucket[l] = (shared_quota){.q = q,
                                       .cap = q * share->quota_period_s[l] * (1 - q),
                                       .tokens = q * share->quota_period_s[l] * (1 - q),
                                       .cpu = 1};
        }
    double t = 0;
    for (;;) {
        /* everything that can happen at t: a send may unblock a receive on a lane already
         * visited, hence the repeat */
        int progress;
        do {
            progress = 0;
            for (int l = 0; l < N; l++) {
                int p = shared_advance(&st, s, stages, record_events, l, t, run);
                if (p < 0)
                    goto nomem;
                progress |= p;
            }
        } while (progress);
        if (st.remaining == 0)
            break;
        memset(busy_n, 0, (size_t)share->n_groups * sizeof *busy_n);
        for (int l = 0; l < N; l++)
            if (run[l].active && share->group[l] >= 0)
                busy_n[share->group[l]] += share->weight != NULL ? share->weight[l] : 1;
        double next = INFINITY;
        for (int l = 0; l < N; l++) {
            shared_run *r = &run[l];
            shared_quota *b = &bucket[l];
            if (r->active) {
                int g = share->group[l];
                double rate = g >= 0 && busy_n[g] > share->capacity[g]
                                  ? (double)share->capacity[g] / busy_n[g]
                                  : 1.0;
                if (b->q > 0) {
                    /* processor share `rate`, held to q once the bucket is empty; the lane's
                     * times are sustained ones (full-speed time / q), so progress is cpu / q */
                    b->cpu = b->tokens > 0 || rate <= b->q ? rate : b->q;
                    if (b->tokens > 0 && b->cpu > b->q) { /* the bucket's end is an event */
                        double empty = t + b->tokens / (b->cpu - b->q);
                        next = empty < next ? empty : next;
                    }
                    rate = b->cpu / b->q;
                }
                if (rate != r->rate) {
                    r->rem_s -= r->rate * (t - r->anchor_s);
                    if (r->rem_s < 0)
                        r->rem_s = 0;
                    r->anchor_s = t;
                    r->rate = rate;
                    r->stretched |= rate != 1;
                }
                double e = shared_end(r);
                next = e < next ? e : next;
            } else if (st.cursor[l] < st.n_acts[l] && is_compute(st.acts[l][st.cursor[l]].kind) &&
                       st.clock[l] > t) {
                next = st.clock[l] < next ? st.clock[l] : next;
            }
        }
        if (next == INFINITY) {
            rc = SC_ERRF(err, SC_ERR_INVALID, "simulation deadlocked with %d actions left",
                         st.remaining);
            goto done;
        }
        t = next;
        /* the buckets up to t, each lane computing or not as it did since the last event */
        for (int l = 0; l < N; l++)
            if (bucket[l].q > 0)
                quota_advance(&bucket[l], run[l].active, t);
        for (int l = 0; l < N; l++) {
            shared_run *r = &run[l];
            if (!r->active || shared_end(r) > t)
                continue;
            int i = st.lane_stage[l];
            /* unstretched: its own duration, bit for bit the sweep's */
            double dur = r->stretched ? t - r->start_s : r->dur_s;
            st.clock[l] = r->stretched ? t : r->start_s + r->dur_s;
            st.busy[l] += dur;
            if (r->unit >= 0)
                stretch[(size_t)i * st.U + r->unit] += dur - r->dur_s;
            if (r->kind == PLAN_ACT_B)
                st.bend[(size_t)i * st.U + r->unit] = st.clock[l];
            if (record_events &&
                plan_sim_add_lane_event(&st, l, r->kind, r->unit, r->start_s, dur) != 0)
                goto nomem;
            r->active = 0;
            st.cursor[l]++;
            st.remaining--;
        }
    }
    plan_sim_finish(s, stages, n_micro, &st, stretch, out);
    goto done;
nomem:
    rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory recording simulation events");
done:
    plan_sim_state_free(&st);
    free(run);
    free(bucket);
    free(stretch);
    free(busy_n);
    if (rc != SC_OK)
        plan_sim_result_free(out);
    return rc;
}

sc_status plan_sim_run_shared(const plan_schedule *s, const plan_sim_stage *stages, int n_micro,
                              double slice_efficiency, const plan_sim_share *share,
                              int record_events, plan_sim_result *out, sc_err *err)
{
    int grouped = 0;
    if (share != NULL) {
        int n = 0;
        for (int i = 0; i < s->n_stages; i++)
            n += s->replicas != NULL ? s->replicas[i] : 1;
        memset(out, 0, sizeof *out);
        SC_CHECK(plan_sim_share_check(share, n, s->replicas != NULL, &grouped, err));
    }
    if (!grouped)
        return plan_sim_run(s, stages, n_micro, slice_efficiency, record_events, out, err);
    return plan_sim_shared_play(s, stages, n_micro, slice_efficiency, share, NULL, record_events,
                                out, err);
}
