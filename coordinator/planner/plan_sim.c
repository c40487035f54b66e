/*
 * plan_sim: the simulator's state, the rules of playing one action, and the sweep player
 * (plan_sim_run).
 *
 * Each stage advances through its list while it can; a receive whose send has not been
 * played yet stops the stage until a later sweep. Because every action's start depends only on
 * its stage's previous action and on one send, sweeping stages in a loop reaches the same
 * times as a priority-queue simulation, and a sweep without progress is a deadlock.
 * Does not play stages that share processors (plan_sim_shared.c: a compute's duration depends
 * on which other computes of its group overlap it, so that path advances one simulated clock
 * from event to event), per-stage sizes (plan_sim_sized.c) or write traces (plan_sim_trace.c);
 * those players build on the state and rules here (plan_sim_internal.h).
 * Invariant: a lane's clock only moves forward, and an action's times are final once played.
 */
#include "coordinator/planner/plan_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_sim_internal.h"

void plan_sim_result_free(plan_sim_result *r)
{
    if (r == NULL)
        return;
    free(r->busy_s);
    free(r->idle_s);
    free(r->peak_inflight);
    free(r->events);
    memset(r, 0, sizeof *r);
}

static double unit_scale(double frac, double eff)
{
    return frac < 1.0 ? frac / eff : frac;
}

static int copies_of(const sim_state *st, int stage)
{
    return st->reps != NULL ? st->reps[stage] : 1;
}

static int add_event_copy(sim_state *st, int lane, int copy, int kind, int unit, double start,
                          double dur)
{
    plan_sim_result *r = st->r;
    if (r->n_events == st->cap_events) {
        int cap = st->cap_events ? 2 * st->cap_events : 1024;
        plan_sim_event *ne = realloc(r->events, (size_t)cap * sizeof *ne);
        if (ne == NULL)
            return -1;
        r->events = ne;
        st->cap_events = cap;
    }
    plan_sim_event *e = &r->events[r->n_events++];
    e->lane = lane;
    e->kind = kind;
    e->unit = unit;
    e->start_s = start;
    e->dur_s = dur;
    e->copy = copy;
    return 0;
}

int plan_sim_add_event(sim_state *st, int lane, int kind, int unit, double start, double dur)
{
    return add_event_copy(st, lane, 0, kind, unit, start, dur);
}

int plan_sim_add_lane_event(sim_state *st, int l, int kind, int unit, double start, double dur)
{
    int i = st->lane_stage[l];
    return add_event_copy(st, i, l - st->lane0[i], kind, unit, start, dur);
}

/* The per-lane figures summed into the result's per-stage ones (busy: the mean over the copies,
 * peak: the most any copy held), then, for a schedule that ends with a flush, the iteration:
 * it ends with the last action, each stage idles for the rest of it. The bubble is over every
 * device (lane). */
static void sum_lanes(const sim_state *st, plan_sim_result *out)
{
    for (int i = 0; i < st->S; i++) {
        int r = copies_of(st, i);
        double busy = 0, peak = 0;
        for (int l = st->lane0[i]; l < st->lane0[i] + r; l++) {
            busy += st->busy[l];
            peak = st->peak[l] > peak ? st->peak[l] : peak;
        }
        out->busy_s[i] = busy / r;
        out->peak_inflight[i] = peak;
    }
}

void plan_sim_finish_flushed(plan_sim_result *out, const double *dev_busy, int n_dev, double end)
{
    int S = out->n_stages;
    out->iteration_s = end;
    double busy = 0;
    for (int l = 0; l < n_dev; l++)
        busy += dev_busy[l];
    for (int i = 0; i < S; i++)
        out->idle_s[i] = end - out->busy_s[i];
    out->bubble_fraction = end > 0 ? 1 - busy / (n_dev * end) : 0;
    if (out->bubble_fraction < 0 && out->bubble_fraction > -1e-12)
        out->bubble_fraction = 0;
}

void plan_sim_state_free(sim_state *st)
{
    free(st->lane_stage);
    free(st->lane0);
    free(st->acts);
    free(st->n_acts);
    free(st->own);
    free(st->arr_f);
    free(st->arr_b);
    free(st->bend);
    free(st->link_base);
    free(st->link_f);
    free(st->link_b);
    free(st->clock);
    free(st->inflight);
    free(st->busy);
    free(st->peak);
    free(st->cursor);
    free(st->opt_n);
    free(st->rel_n);
    free(st->opt_t);
    free(st->rel_t);
    free(st->opt_at);
    memset(st, 0, sizeof *st);
}

/* The lanes of `s`: one per stage, or, when s->replicas has copies, one per copy with its stage's
 * list restricted to its units (OPTs kept), and the links of every pair of copies across a cut.
 * Returns -1 out of memory. */
static int sim_lanes(sim_state *st, const plan_schedule *s)
{
    int S = s->n_stages;
    st->reps = s->replicas;
    st->N = 0;
    for (int i = 0; i < S; i++)
        st->N += copies_of(st, i);
    int N = st->N, links = 0;
    st->lane_stage = malloc((size_t)N * sizeof *st->lane_stage);
    st->lane0 = malloc((size_t)S * sizeof *st->lane0);
    st->acts = malloc((size_t)N * sizeof *st->acts);
    st->n_acts = calloc((size_t)N, sizeof *st->n_acts);
    st->link_base = malloc((size_t)S * sizeof *st->link_base);
    if (!st->lane_stage || !st->lane0 || !st->acts || !st->n_acts || !st->link_base)
        return -1;
    size_t total = 0;
    for (int i = 0, l = 0; i < S; i++) {
        st->lane0[i] = l;
        st->link_base[i] = links;
        links += i + 1 < S ? copies_of(st, i) * copies_of(st, i + 1) : 0;
        for (int k = 0; k < copies_of(st, i); k++, l++)
            st->lane_stage[l] = i;
        if (st->reps != NULL)
            total += (size_t)s->n_actions[i];
    }
    if (st->reps == NULL) {
        for (int i = 0; i < S; i++) {
            st->acts[i] = s->actions[i];
            st->n_acts[i] = s->n_actions[i];
        }
    } else {
        /* each action goes to one copy, an OPT to all of them */
        size_t opts = 0;
        for (int i = 0; i < S; i++)
            for (int a = 0; a < s->n_actions[i]; a++)
                opts += s->actions[i][a].kind == PLAN_ACT_OPT ? (size_t)copies_of(st, i) : 0;
        st->own = malloc((total + opts + 1) * sizeof *st->own);
        if (st->own == NULL)
            return -1;
        plan_action *at = st->own;
        for (int l = 0; l < N; l++) {
            int i = st->lane_stage[l], r = copies_of(st, i), k = l - st->lane0[i];
            st->acts[l] = at;
            for (int a = 0; a < s->n_actions[i]; a++) {
                const plan_action *x = &s->actions[i][a];
                if (x->kind == PLAN_ACT_OPT || x->unit % r == k)
                    *at++ = *x;
            }
            st->n_acts[l] = (int)(at - st->acts[l]);
        }
    }
    st->link_f = calloc((size_t)links + 1, sizeof(double));
    st->link_b = calloc((size_t)links + 1, sizeof(double));
    return st->link_f && st->link_b ? 0 : -1;
}

sc_status plan_sim_state_init(sim_state *st, const plan_schedule *s, double slice_efficiency,
                              plan_sim_result *out, sc_err *err)
{
    int S = s->n_stages, U = s->n_units;
    memset(st, 0, sizeof *st);
    memset(out, 0, sizeof *out);
    st->S = S;
    st->U = U;
    st->r = out;
    st->eff = slice_efficiency > 0 && slice_efficiency <= 1 ? slice_efficiency : 1;
    if (sim_lanes(st, s) != 0)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory simulating %d stages x %d units", S, U);
    int N = st->N;
    for (int l = 0; l < N; l++)
        st->remaining += st->n_acts[l];
    size_t su = (size_t)S * (size_t)U;
    st->arr_f = malloc(su * sizeof(double));
    st->arr_b = malloc(su * sizeof(double));
    st->bend = calloc(su, sizeof(double));
    st->clock = calloc((size_t)N, sizeof(double));
    st->inflight = calloc((size_t)N, sizeof(double));
    st->busy = calloc((size_t)N, sizeof(double));
    st->peak = calloc((size_t)N, sizeof(double));
    st->cursor = calloc((size_t)N, sizeof(int));
    st->opt_n = calloc((size_t)N, sizeof(int));
    st->opt_t = calloc((size_t)N, sizeof(double));
    st->opt_at = calloc((size_t)N, 1);
    st->rel_n = calloc((size_t)S, sizeof(int));
    st->rel_t = calloc((size_t)S, sizeof(double));
    out->n_stages = S;
    out->busy_s = calloc((size_t)S, sizeof(double));
    out->idle_s = calloc((size_t)S, sizeof(double));
    out->peak_inflight = calloc((size_t)S, sizeof(double));
    if (!st->arr_f || !st->arr_b || !st->bend || !st->clock || !st->inflight || !st->busy ||
        !st->peak || !st->cursor || !st->opt_n || !st->opt_t || !st->opt_at || !st->rel_n ||
        !st->rel_t || !out->busy_s || !out->idle_s || !out->peak_inflight)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory simulating %d stages x %d units", S, U);
    for (size_t i = 0; i < su; i++)
        st->arr_f[i] = st->arr_b[i] = NAN;
    return SC_OK;
}

/* The iteration time and per-stage figures once every action has been played. `stretch_s`
 * (NULL: none) is, per stage and unit (S, U), the time its computes ran longer than their own
 * durations because of shared processors; pipedream's steady-state busy time adds the mean over
 * the units of the window its period is measured on. */
static double window_mean(const double *x, int a, int b)
{
    double sum = 0;
    for (int u = a + 1; u <= b; u++)
        sum += x[u];
    return sum / (b - a);
}

void plan_sim_finish(const plan_schedule *s, const plan_sim_stage *stages, int n_micro,
                     const sim_state *st, const double *stretch_s, plan_sim_result *out)
{
    int S = s->n_stages, U = s->n_units;
    double end = 0;
    for (int l = 0; l < st->N; l++)
        if (st->clock[l] > end)
            end = st->clock[l];
    sum_lanes(st, out);
    if (s->kind == PLAN_SCHED_PIPEDREAM && U >= 2) {
        /* measure between the fill and the drain, where one minibatch leaves per period (the
         * drain of W_0 < all copies minibatches left out) */
        int a = U / 4, b = U - st->N - 1;
        if (b <= a) {
            a = 0;
            b = U - 1;
        }
        /* copies finish their rounds together: whole rounds of every stage in the window */
        int whole = 1;
        for (int i = 0; i < S && whole <= U; i++) {
            int x = whole, y = copies_of(st, i);
            while (y != 0) {
                int t = x % y;
                x = y;
                y = t;
            }
            whole = whole / x * copies_of(st, i);
        }
        if (b - a >= whole)
            b -= (b - a) % whole;
        out->steady_s = (st->bend[b] - st->bend[a]) / (b - a);
        out->iteration_s = out->steady_s * n_micro;
        /* a copy runs 1/r of the minibatches (and of the rounds' optimizer steps) */
        double busy = 0;
        for (int i = 0; i < S; i++)
            busy += stages[i].fwd_s + stages[i].bwd_s + stages[i].opt_s +
                    (stretch_s ? window_mean(stretch_s + (size_t)i * U, a, b) : 0);
        out->bubble_fraction = out->steady_s > 0 ? 1 - busy / (st->N * out->steady_s) : 0;
        for (int i = 0; i < S; i++) {
            double bs = (stages[i].fwd_s + stages[i].bwd_s + stages[i].opt_s +
                         (stretch_s ? window_mean(stretch_s + (size_t)i * U, a, b) : 0)) /
                        copies_of(st, i) * n_micro;
            out->busy_s[i] = bs;
            out->idle_s[i] = out->iteration_s - bs;
        }
        if (out->bubble_fraction < 0 && out->bubble_fraction > -1e-12)
            out->bubble_fraction = 0;
    } else {
        plan_sim_finish_flushed(out, st->busy, st->N, end);
    }
}

int plan_sim_play_send(sim_state *st, const plan_schedule *s, const plan_sim_stage *stages, int l,
                       const plan_action *a, int record)
{
    int i = st->lane_stage[l];
    int fwd = a->kind == PLAN_ACT_SEND_F, cut = fwd ? i : i - 1, u = a->unit;
    int pair = 0;
    if (st->reps != NULL) {
        int below = st->reps[cut + 1];
        pair = (u % st->reps[cut]) * below + u % below;
    }
    double *link =
        fwd ? &st->link_f[st->link_base[cut] + pair] : &st->link_b[st->link_base[cut] + pair];
    double t0 = st->clock[l] > *link ? st->clock[l] : *link;
    double d = st->ut != NULL
                   ? (fwd ? st->ut->send_f : st->ut->send_b)[(size_t)i * st->U + u]
                   : (fwd ? stages[i].send_fwd_s : stages[i - 1].send_bwd_s) * s->frac[u];
    *link = t0 + d;
    (fwd ? st->arr_f : st->arr_b)[(size_t)i * st->U + u] = t0 + d;
    if (record && d > 0 && add_event_copy(st, st->S + 2 * cut + !fwd, pair, a->kind, u, t0, d) != 0)
        return -1;
    return 0;
}

int plan_sim_opt_pass(sim_state *st, int l, int *arrived)
{
    int i = st->lane_stage[l], r = copies_of(st, i);
    if (r == 1)
        return 1;
    if (!st->opt_at[l]) {
        st->opt_at[l] = 1;
        st->opt_n[l]++;
        st->opt_t[l] = st->clock[l];
        *arrived = 1;
    }
    int n = st->opt_n[l];
    if (st->rel_n[i] < n) {
        double t = 0;
        for (int j = st->lane0[i]; j < st->lane0[i] + r; j++) {
            if (st->opt_n[j] < n)
                return 0;
            t = st->opt_t[j] > t ? st->opt_t[j] : t;
        }
        st->rel_n[i] = n;
        st->rel_t[i] = t;
    }
    st->opt_at[l] = 0;
    if (st->rel_t[i] > st->clock[l])
        st->clock[l] = st->rel_t[i];
    return 1;
}

/* A compute's own duration, and its effect on the lane's stash count (F holds its share of a
 * micro-batch until its B, under zb1 until its W). PipeDream updates an unreplicated stage's
 * weights after every minibatch's backward; a replicated one's copies at their OPTs, one per round.
 */
double plan_sim_start_compute(sim_state *st, const plan_schedule *s, const plan_sim_stage *c, int l,
                              const plan_action *a)
{
    int u = a->unit, i = st->lane_stage[l];
    double k = u >= 0 ? unit_scale(s->frac[u], st->eff) : 1;
    if (a->kind == PLAN_ACT_F) {
        st->inflight[l] += s->frac[u];
        if (st->inflight[l] > st->peak[l])
            st->peak[l] = st->inflight[l];
        return st->ut != NULL ? st->ut->fwd[(size_t)i * st->U + u] : c->fwd_s * k;
    }
    if (a->kind == PLAN_ACT_B && s->kind == PLAN_SCHED_ZB1) /* the input gradient alone */
        return (c->bwd_s - c->wgrad_s) * k;
    if (a->kind == PLAN_ACT_W) { /* the weight gradient: the unit's inputs are let go */
        st->inflight[l] -= s->frac[u];
        return c->wgrad_s * k;
    }
    if (a->kind == PLAN_ACT_B) {
        st->inflight[l] -= s->frac[u];
        if (st->ut != NULL)
            return st->ut->bwd[(size_t)i * st->U + u];
        return c->bwd_s * k +
               (s->kind == PLAN_SCHED_PIPEDREAM && copies_of(st, i) == 1 ? c->opt_s : 0);
    }
    return c->opt_s;
}

sc_status plan_sim_run(const plan_schedule *s, const plan_sim_stage *stages, int n_micro,
                       double slice_efficiency, int record_events, plan_sim_result *out,
                       sc_err *err)
{
    int U = s->n_units;
    sim_state st;
    sc_status rc = plan_sim_state_init(&st, s, slice_efficiency, out, err);
    if (rc != SC_OK)
        goto done;
    while (st.remaining > 0) {
        int progress = 0;
        for (int l = 0; l < st.N; l++) {
            int i = st.lane_stage[l];
            while (st.cursor[l] < st.n_acts[l]) {
                const plan_action *a = &st.acts[l][st.cursor[l]];
                int u = a->unit;
                if (a->kind == PLAN_ACT_RECV_F || a->kind == PLAN_ACT_RECV_B) {
                    double t = recv_arrival(&st, l, a);
                    if (isnan(t))
                        goto blocked;
                    if (t > st.clock[l])
                        st.clock[l] = t;
                } else if (a->kind == PLAN_ACT_SEND_F || a->kind == PLAN_ACT_SEND_B) {
                    if (plan_sim_play_send(&st, s, stages, l, a, record_events) != 0)
                        goto nomem;
                } else if (is_compute(a->kind)) {
                    if (a->kind == PLAN_ACT_OPT && !plan_sim_opt_pass(&st, l, &progress))
                        goto blocked;
                    double start = st.clock[l];
                    double dur = plan_sim_start_compute(&st, s, &stages[i], l, a);
                    st.clock[l] = start + dur;
                    st.busy[l] += dur;
                    if (a->kind == PLAN_ACT_B)
                        st.bend[(size_t)i * U + u] = st.clock[l];
                    if (record_events &&
                        plan_sim_add_lane_event(&st, l, a->kind, u, start, dur) != 0)
                        goto nomem;
                }
                st.cursor[l]++;
                st.remaining--;
                progress = 1;
            }
        blocked:;
        }
        if (!progress) {
            rc = SC_ERRF(err, SC_ERR_INVALID, "simulation deadlocked with %d actions left",
                         st.remaining);
            goto done;
        }
    }
    plan_sim_finish(s, stages, n_micro, &st, NULL, out);
    goto done;
nomem:
    rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory recording simulation events");
done:
    plan_sim_state_free(&st);
    if (rc != SC_OK)
        plan_sim_result_free(out);
    return rc;
}
