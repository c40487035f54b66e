/*
 * plan_sim: a discrete-event player for validated action lists.
 *
 * Each stage advances through its list while it can; a receive whose send has not been
 * played yet stops the stage until a later sweep. Because every action's start depends only on
 * its stage's previous action and on one send, sweeping stages in a loop reaches the same
 * times as a priority-queue simulation, and a sweep without progress is a deadlock.
 * Stages that share processors (plan_sim_run_shared) break that: a compute's duration depends on
 * which other computes of its group overlap it, so that path advances one simulated clock from
 * event to event (a compute starting or finishing), re-rating a group's computes at each.
 */
#include "coordinator/planner/plan_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* Per-entry times, (S, U) each, for action lists whose units differ in size from stage to
 * stage (sizes per stage played on shared processors): they replace the stage costs scaled by
 * the units' fractions. */
typedef struct sim_unit_times {
    const double *fwd, *bwd;       /* compute of stage i's unit u */
    const double *send_f, *send_b; /* stage i's send of unit u downstream / upstream */
} sim_unit_times;

typedef struct sim_state {
    int S, U;
    /* Lanes: the copies of every stage, stage after stage; without copies lane i is stage i. A
     * lane runs its stage's list restricted to its units (u % r == its copy). */
    int N;
    const int *reps;          /* (S) copies of each stage; NULL: one each */
    int *lane_stage;          /* (N) */
    int *lane0;               /* (S) each stage's first lane */
    const plan_action **acts; /* (N) each lane's list */
    int *n_acts;              /* (N) */
    plan_action *own;         /* the copies' restricted lists, one allocation; NULL unreplicated */
    const sim_unit_times *ut; /* NULL: stage costs x unit fractions */
    double *arr_f, *arr_b;    /* (S, U) arrival of the send from stage s; NAN until played */
    double *bend;             /* (S, U) backward end */
    int *link_base;           /* (S) first link of each cut; a cut has one per pair of copies */
    double *link_f, *link_b;
    double *clock, *inflight, *busy, *peak; /* (N) */
    int *cursor;                            /* (N) */
    /* the copies' OPT barrier (their all-reduce): opt_n, the OPTs a lane has arrived at, opt_t
     * when it arrived at the last, opt_at while it waits there; rel_n / rel_t (S): the last OPT
     * every copy of the stage reached, and when the last of them did */
    int *opt_n, *rel_n;
    double *opt_t, *rel_t;
    char *opt_at;
    int remaining; /* actions not yet played, over every lane */
    double eff;    /* slice efficiency, in (0, 1] */
    plan_sim_result *r;
    int cap_events;
} sim_state;

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

static int add_event(sim_state *st, int lane, int kind, int unit, double start, double dur)
{
    return add_event_copy(st, lane, 0, kind, unit, start, dur);
}

/* A compute event of lane l: its stage's trace lane, its copy. */
static int add_lane_event(sim_state *st, int l, int kind, int unit, double start, double dur)
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

static void finish_flushed(plan_sim_result *out, const double *dev_busy, int n_dev, double end)
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

static void sim_state_free(sim_state *st)
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

/* Allocates the per-lane and per-unit state of playing `s` and the result's arrays; arrivals
 * start as NAN (not sent yet). On error everything allocated is freed by the caller's
 * sim_state_free and plan_sim_result_free. */
static sc_status sim_state_init(sim_state *st, const plan_schedule *s, double slice_efficiency,
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

static void sim_finish(const plan_schedule *s, const plan_sim_stage *stages, int n_micro,
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
        finish_flushed(out, st->busy, st->N, end);
    }
}

/* The rules both players share. A receive: the arrival of its send, NAN while that send has not
 * been played; the lane's clock moves to it. Unit u comes from copy u % r of the neighbour. */
static double recv_arrival(const sim_state *st, int l, const plan_action *a)
{
    int i = st->lane_stage[l];
    return a->kind == PLAN_ACT_RECV_F ? st->arr_f[(size_t)(i - 1) * st->U + a->unit]
                                      : st->arr_b[(size_t)(i + 1) * st->U + a->unit];
}

/* A send at the lane's clock queues on the link of its cut, direction and pair of copies (one
 * transfer at a time) and sets its arrival. Returns -1 when the event cannot be recorded. */
static int play_send(sim_state *st, const plan_schedule *s, const plan_sim_stage *stages, int l,
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

static int is_compute(int kind)
{
    return kind == PLAN_ACT_F || kind == PLAN_ACT_B || kind == PLAN_ACT_OPT;
}

/* The copies' barrier at an OPT (their all-reduce): lane l, whose next action is an OPT, may
 * start it once every copy of its stage has reached that OPT, at the latest of their arrivals
 * (its clock moves there). Returns 1 when it may, 0 while it waits (its arrival is recorded
 * once; *arrived is set when this call recorded it). A lone copy passes at once. */
static int opt_pass(sim_state *st, int l, int *arrived)
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
 * micro-batch until its B). PipeDream updates an unreplicated stage's weights after every
 * minibatch's backward; a replicated one's copies at their OPTs, one per round. */
static double start_compute(sim_state *st, const plan_schedule *s, const plan_sim_stage *c, int l,
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
    sc_status rc = sim_state_init(&st, s, slice_efficiency, out, err);
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
                    if (play_send(&st, s, stages, l, a, record_events) != 0)
                        goto nomem;
                } else if (is_compute(a->kind)) {
                    if (a->kind == PLAN_ACT_OPT && !opt_pass(&st, l, &progress))
                        goto blocked;
                    double start = st.clock[l];
                    double dur = start_compute(&st, s, &stages[i], l, a);
                    st.clock[l] = start + dur;
                    st.busy[l] += dur;
                    if (a->kind == PLAN_ACT_B)
                        st.bend[(size_t)i * U + u] = st.clock[l];
                    if (record_events && add_lane_event(&st, l, a->kind, u, start, dur) != 0)
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
    sim_finish(s, stages, n_micro, &st, NULL, out);
    goto done;
nomem:
    rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory recording simulation events");
done:
    sim_state_free(&st);
    if (rc != SC_OK)
        plan_sim_result_free(out);
    return rc;
}

/* ---------------------------------------------------------------- shared processors */

/* A compute in progress in the event-driven loop: `rem_s` of its own duration was left at
 * `anchor_s`, and it has progressed at `rate` since. Re-anchoring only when the rate changes
 * keeps a compute that never slowed down at exactly start + duration, as the sweep has it. */
typedef struct shared_run {
    int active;
    int stretched; /* its rate fell below 1 at some point */
    int kind, unit;
    double start_s, dur_s, anchor_s, rem_s, rate;
} shared_run;

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
            if (play_send(st, s, stages, l, a, record) != 0)
                return -1;
        } else if (is_compute(a->kind)) {
            if (a->kind == PLAN_ACT_OPT && !opt_pass(st, l, &played))
                return played;
            /* how many of a group compute at once decides their rates, so a compute joins only
             * when the loop's clock reaches its start */
            if (st->clock[l] > t)
                return played;
            double dur = start_compute(st, s, &stages[i], l, a);
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
            if (record && add_lane_event(st, l, a->kind, u, st->clock[l], 0) != 0)
                return -1;
        }
        st->cursor[l]++;
        st->remaining--;
        played = 1;
    }
    return played;
}

/* `n` entries: the stages, or with copies the lanes (every copy of every stage, stage after
 * stage). */
static sc_status share_check(const plan_sim_share *sh, int n, int copies, int *grouped, sc_err *err)
{
    const char *what = copies ? "copy (lane)" : "stage";
    *grouped = 0;
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

/* The event-driven loop of plan_sim_run_shared over a checked share with a group, the costs
 * from `stages` or, where ut is not NULL, the per-entry times. */
static sc_status shared_play(const plan_schedule *s, const plan_sim_stage *stages, int n_micro,
                             double slice_efficiency, const plan_sim_share *share,
                             const sim_unit_times *ut, int record_events, plan_sim_result *out,
                             sc_err *err)
{
    int S = s->n_stages;
    sim_state st;
    shared_run *run = NULL;
    double *stretch = calloc((size_t)S * (size_t)s->n_units, sizeof *stretch);
    int *busy_n = calloc((size_t)share->n_groups, sizeof *busy_n);
    sc_status rc = sim_state_init(&st, s, slice_efficiency, out, err);
    st.ut = ut;
    if (rc != SC_OK)
        goto done;
    int N = st.N;
    run = calloc((size_t)N, sizeof *run);
    if (!run || !stretch || !busy_n) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory simulating %d shared stages", S);
        goto done;
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
            if (r->active) {
                int g = share->group[l];
                double rate = g >= 0 && busy_n[g] > share->capacity[g]
                                  ? (double)share->capacity[g] / busy_n[g]
                                  : 1.0;
                if (rate != r->rate) {
                    r->rem_s -= r->rate * (t - r->anchor_s);
                    if (r->rem_s < 0)
                        r->rem_s = 0;
                    r->anchor_s = t;
                    r->rate = rate;
                    r->stretched |= rate < 1;
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
            if (record_events && add_lane_event(&st, l, r->kind, r->unit, r->start_s, dur) != 0)
                goto nomem;
            r->active = 0;
            st.cursor[l]++;
            st.remaining--;
        }
    }
    sim_finish(s, stages, n_micro, &st, stretch, out);
    goto done;
nomem:
    rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory recording simulation events");
done:
    sim_state_free(&st);
    free(run);
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
        SC_CHECK(share_check(share, n, s->replicas != NULL, &grouped, err));
    }
    if (!grouped)
        return plan_sim_run(s, stages, n_micro, slice_efficiency, record_events, out, err);
    return shared_play(s, stages, n_micro, slice_efficiency, share, NULL, record_events, out, err);
}

/* ---------------------------------------------------------------- sizes per stage */

/* Entries of one row: positive sizes up to the first zero, checked to lie in 1..batch and to
 * sum to the batch. Returns the count, or -1 with err set. */
static int sized_row(const plan_sim_sized *in, const int *row, int stage, const char *what,
                     sc_err *err)
{
    int n = 0;
    long long total = 0;
    for (; n < in->max_entries && row[n] != 0; n++) {
        if (row[n] < 1 || row[n] > in->batch) {
            SC_ERRF(err, SC_ERR_INVALID,
                    "stage %d %s sizes: entry %d is %d samples; each must be 1 to the batch (%d)",
                    stage, what, n, row[n], in->batch);
            return -1;
        }
        total += row[n];
    }
    if (n == 0 || total != in->batch) {
        SC_ERRF(err, SC_ERR_INVALID,
                "stage %d %s sizes sum to %lld samples over %d entries; they must sum to the "
                "batch (%d)",
                stage, what, total, n, in->batch);
        return -1;
    }
    return n;
}

/* Every stage's rows checked (sized_row), their entry counts (nf, nb) and prefix sums (pf, pb:
 * (S, K+1), from 0). Returns SC_ERR_INVALID with err set at the first bad row. */
static sc_status sized_rows(const plan_sim_sized *in, int *pf, int *pb, int *nf, int *nb,
                            sc_err *err)
{
    int K = in->max_entries;
    for (int i = 0; i < in->n_stages; i++) {
        const int *x = in->fwd_sizes + (size_t)i * K, *y = in->bwd_sizes + (size_t)i * K;
        nf[i] = sized_row(in, x, i, "forward", err);
        nb[i] = nf[i] < 0 ? -1 : sized_row(in, y, i, "backward", err);
        if (nf[i] < 0 || nb[i] < 0)
            return SC_ERR_INVALID;
        int *p = pf + (size_t)i * (K + 1), *q = pb + (size_t)i * (K + 1);
        p[0] = q[0] = 0;
        for (int j = 0; j < nf[i]; j++)
            p[j + 1] = p[j] + x[j];
        for (int j = 0; j < nb[i]; j++)
            q[j + 1] = q[j] + y[j];
    }
    return SC_OK;
}

sc_status plan_sim_run_sized(const plan_sim_sized *in, int record_events, plan_sim_result *out,
                             sc_err *err)
{
    int S = in->n_stages, K = in->max_entries;
    size_t W = (size_t)in->batch + 1;
    sim_state st = {.S = S, .r = out};
    sc_status rc = SC_OK;
    memset(out, 0, sizeof *out);
    if (S < 1 || K < 1 || in->batch < 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "sizes per stage: needs stages, entries and batch >= 1, got %d, %d, %d", S,
                       K, in->batch);
    /* (S, K) arrival of each entry's send across its cut (forward: after stage i; backward:
     * before stage i), prefix sums (S, K+1), entry counts, last forward end */
    double *arr_f = malloc((size_t)S * (size_t)K * sizeof(double));
    double *arr_b = malloc((size_t)S * (size_t)K * sizeof(double));
    int *pf = malloc((size_t)S * (size_t)(K + 1) * sizeof(int));
    int *pb = malloc((size_t)S * (size_t)(K + 1) * sizeof(int));
    int *nf = malloc((size_t)S * sizeof(int)), *nb = malloc((size_t)S * sizeof(int));
    double *fend = malloc((size_t)S * sizeof(double));
    out->n_stages = S;
    out->busy_s = calloc((size_t)S, sizeof(double));
    out->idle_s = calloc((size_t)S, sizeof(double));
    out->peak_inflight = calloc((size_t)S, sizeof(double));
    if (!arr_f || !arr_b || !pf || !pb || !nf || !nb || !fend || !out->busy_s || !out->idle_s ||
        !out->peak_inflight) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory simulating %d stages x %d entries", S, K);
        goto done;
    }
    SC_CHECK_GOTO(sized_rows(in, pf, pb, nf, nb, err), done);
    for (int i = 0; i < S; i++)
        out->peak_inflight[i] = nf[i];

    /* Forward, stage by stage: every input of stage i comes from stage i-1, already played. */
    for (int i = 0; i < S; i++) {
        const int *x = in->fwd_sizes + (size_t)i * K;
        const int *p = pf + (size_t)i * (K + 1);
        const int *up = i > 0 ? pf + (size_t)(i - 1) * (K + 1) : NULL;
        const double *ft = in->fwd_s + (size_t)i * W, *ct = in->comm_s + (size_t)i * W;
        double clock = 0, link = 0;
        int k = 0;
        for (int j = 0; j < nf[i]; j++) {
            if (i > 0) {
                /* the first upstream entry whose prefix covers this entry's samples */
                while (k < nf[i - 1] - 1 && up[k + 1] < p[j + 1])
                    k++;
                double ready = arr_f[(size_t)(i - 1) * K + k];
                clock = clock > ready ? clock : ready;
            }
            double start = clock, dur = ft[x[j]];
            clock = start + dur;
            out->busy_s[i] += dur;
            if (record_events && add_event(&st, i, PLAN_ACT_F, j, start, dur) != 0)
                goto nomem;
            if (i + 1 < S) {
                double t0 = link > clock ? link : clock, d = ct[x[j]];
                link = t0 + d;
                arr_f[(size_t)i * K + j] = link;
                if (record_events && d > 0 &&
                    add_event(&st, S + 2 * i, PLAN_ACT_SEND_F, j, t0, d) != 0)
                    goto nomem;
            }
        }
        fend[i] = clock;
    }
    /* Backward, from the last stage: a stage starts after its own last forward. */
    double end = 0;
    for (int i = S - 1; i >= 0; i--) {
        const int *y = in->bwd_sizes + (size_t)i * K;
        const int *q = pb + (size_t)i * (K + 1);
        const int *dn = i + 1 < S ? pb + (size_t)(i + 1) * (K + 1) : NULL;
        const double *bt = in->bwd_s + (size_t)i * W;
        const double *ct = i > 0 ? in->comm_s + (size_t)(i - 1) * W : NULL;
        double clock = fend[i], link = 0;
        int k = 0;
        for (int j = 0; j < nb[i]; j++) {
            if (i < S - 1) {
                while (k < nb[i + 1] - 1 && dn[k + 1] < q[j + 1])
                    k++;
                double ready = arr_b[(size_t)(i + 1) * K + k];
                clock = clock > ready ? clock : ready;
            }
            double start = clock, dur = bt[y[j]];
            clock = start + dur;
            out->busy_s[i] += dur;
            if (record_events && add_event(&st, i, PLAN_ACT_B, j, start, dur) != 0)
                goto nomem;
            if (ct != NULL) {
                double t0 = link > clock ? link : clock, d = ct[y[j]];
                link = t0 + d;
                arr_b[(size_t)i * K + j] = link;
                if (record_events && d > 0 &&
                    add_event(&st, S + 2 * (i - 1) + 1, PLAN_ACT_SEND_B, j, t0, d) != 0)
                    goto nomem;
            }
        }
        double opt = in->opt_s != NULL ? in->opt_s[i] : 0;
        if (opt > 0) {
            if (record_events && add_event(&st, i, PLAN_ACT_OPT, -1, clock, opt) != 0)
                goto nomem;
            out->busy_s[i] += opt;
        }
        clock += opt;
        end = clock > end ? clock : end;
    }
    finish_flushed(out, out->busy_s, S, end);
    goto done;
nomem:
    rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory recording simulation events");
done:
    free(arr_f);
    free(arr_b);
    free(pf);
    free(pb);
    free(nf);
    free(nb);
    free(fend);
    if (rc != SC_OK)
        plan_sim_result_free(out);
    return rc;
}

/* Appends to stage i the receives that bring it every sample of an entry whose prefix sum is
 * `reach`: the neighbour's entries (n_up of them, prefix sums pu) from *next, the first not yet
 * received, up to the first whose prefix sum reaches `reach`; none when that one came already. */
static sc_status push_receives(plan_schedule *s, int i, plan_act_kind kind, const int *pu, int n_up,
                               int reach, int *next, sc_err *err)
{
    while (*next < n_up && (*next == 0 || pu[*next] < reach)) {
        SC_CHECK(plan_schedule_push(s, i, kind, *next, err));
        ++*next;
    }
    return SC_OK;
}

sc_status plan_sim_run_sized_shared(const plan_sim_sized *in, const plan_sim_share *share,
                                    int record_events, plan_sim_result *out, sc_err *err)
{
    int S = in->n_stages, K = in->max_entries, grouped = 0;
    memset(out, 0, sizeof *out);
    if (share != NULL && S >= 1)
        SC_CHECK(share_check(share, S, 0, &grouped, err));
    if (!grouped)
        return plan_sim_run_sized(in, record_events, out, err);
    if (K < 1 || in->batch < 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "sizes per stage: needs stages, entries and batch >= 1, got %d, %d, %d", S,
                       K, in->batch);
    size_t W = (size_t)in->batch + 1, SK = (size_t)S * (size_t)K;
    plan_schedule *s = NULL;
    double *t = calloc(4 * SK, sizeof(double));
    int *pf = malloc((size_t)S * (size_t)(K + 1) * sizeof(int));
    int *pb = malloc((size_t)S * (size_t)(K + 1) * sizeof(int));
    int *nf = malloc((size_t)S * sizeof(int)), *nb = malloc((size_t)S * sizeof(int));
    plan_sim_stage *stages = calloc((size_t)S, sizeof *stages);
    sc_status rc = SC_OK;
    if (!t || !pf || !pb || !nf || !nb || !stages) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory simulating %d stages x %d entries", S, K);
        goto done;
    }
    /* each entry's times, as plan_sim_run_sized reads them */
    SC_CHECK_GOTO(sized_rows(in, pf, pb, nf, nb, err), done);
    for (int i = 0; i < S; i++) {
        const int *x = in->fwd_sizes + (size_t)i * K, *y = in->bwd_sizes + (size_t)i * K;
        for (int j = 0; j < nf[i]; j++) {
            t[(size_t)i * K + j] = in->fwd_s[(size_t)i * W + x[j]];
            if (i + 1 < S)
                t[2 * SK + (size_t)i * K + j] = in->comm_s[(size_t)i * W + x[j]];
        }
        for (int j = 0; j < nb[i]; j++) {
            t[SK + (size_t)i * K + j] = in->bwd_s[(size_t)i * W + y[j]];
            if (i > 0)
                t[3 * SK + (size_t)i * K + j] = in->comm_s[(size_t)(i - 1) * W + y[j]];
        }
        stages[i].opt_s = in->opt_s != NULL ? in->opt_s[i] : 0;
    }
    /* The fill-drain lists: each entry first receives the neighbour's entries that complete its
     * samples (the links deliver them in order, so the clock reaches the last one's arrival,
     * the wait of plan_sim_run_sized), computes, and sends; the optimizer step last. */
    SC_CHECK_GOTO(plan_schedule_new(&s, S, K, err), done);
    for (int i = 0; i < S; i++) {
        const int *p = pf + (size_t)i * (K + 1), *q = pb + (size_t)i * (K + 1);
        int next = 0;
        for (int j = 0; j < nf[i]; j++) {
            if (i > 0)
                SC_CHECK_GOTO(push_receives(s, i, PLAN_ACT_RECV_F, pf + (size_t)(i - 1) * (K + 1),
                                            nf[i - 1], p[j + 1], &next, err),
                              done);
            SC_CHECK_GOTO(plan_schedule_push(s, i, PLAN_ACT_F, j, err), done);
            if (i + 1 < S)
                SC_CHECK_GOTO(plan_schedule_push(s, i, PLAN_ACT_SEND_F, j, err), done);
        }
        next = 0;
        for (int j = 0; j < nb[i]; j++) {
            if (i + 1 < S)
                SC_CHECK_GOTO(push_receives(s, i, PLAN_ACT_RECV_B, pb + (size_t)(i + 1) * (K + 1),
                                            nb[i + 1], q[j + 1], &next, err),
                              done);
            SC_CHECK_GOTO(plan_schedule_push(s, i, PLAN_ACT_B, j, err), done);
            if (i > 0)
                SC_CHECK_GOTO(plan_schedule_push(s, i, PLAN_ACT_SEND_B, j, err), done);
        }
        if (stages[i].opt_s > 0)
            SC_CHECK_GOTO(plan_schedule_push(s, i, PLAN_ACT_OPT, -1, err), done);
    }
    sim_unit_times ut = {.fwd = t, .bwd = t + SK, .send_f = t + 2 * SK, .send_b = t + 3 * SK};
    rc = shared_play(s, stages, 1, 1.0, share, &ut, record_events, out, err);
done:
    plan_schedule_destroy(&s);
    free(t);
    free(pf);
    free(pb);
    free(nf);
    free(nb);
    free(stages);
    return rc;
}

sc_status plan_sim_write_trace(const plan_sim_result *r, FILE *f, const char *const *names,
                               sc_err *err)
{
    static const char *const kinds[] = {"F", "B", "act", "", "grad", "", "opt"};
    int S = r->n_stages;
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    for (int i = 0; i < S; i++)
        fprintf(f,
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                "\"args\": {\"name\": \"stage %d%s%s\"}},\n",
                i, i, names ? " " : "", names ? names[i] : "");
    for (int i = 0; i + 1 < S; i++) {
        fprintf(f,
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                "\"args\": {\"name\": \"link %d->%d\"}},\n",
                S + 2 * i, i, i + 1);
        fprintf(f,
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                "\"args\": {\"name\": \"link %d->%d\"}},\n",
                S + 2 * i + 1, i + 1, i);
    }
    /* copies past the first (of a stage, or pairs of copies on a link) get lanes of their own
     * after the links, named the first time they appear */
    int *seen = NULL, n_seen = 0, cap_seen = 0;
    for (int e = 0; e < r->n_events; e++) {
        const plan_sim_event *ev = &r->events[e];
        int tid = ev->lane;
        if (ev->copy > 0) {
            tid = 3 * S + ev->lane * 4096 + ev->copy;
            int known = 0;
            for (int j = 0; j < n_seen && !known; j++)
                known = seen[j] == tid;
            if (!known) {
                if (n_seen == cap_seen) {
                    int cap = cap_seen ? 2 * cap_seen : 16;
                    int *ns = realloc(seen, (size_t)cap * sizeof *ns);
                    if (ns == NULL) {
                        free(seen);
                        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the trace");
                    }
                    seen = ns;
                    cap_seen = cap;
                }
                seen[n_seen++] = tid;
                if (ev->lane < S)
                    fprintf(f,
                            "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                            "\"args\": {\"name\": \"stage %d%s%s copy %d\"}},\n",
                            tid, ev->lane, names ? " " : "", names ? names[ev->lane] : "",
                            ev->copy);
                else
                    fprintf(f,
                            "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                            "\"args\": {\"name\": \"link %d->%d pair %d\"}},\n",
                            tid, (ev->lane - S) / 2 + (ev->lane - S) % 2,
                            (ev->lane - S) / 2 + 1 - (ev->lane - S) % 2, ev->copy);
            }
        }
        const char *k = ev->kind >= 0 && ev->kind <= PLAN_ACT_OPT ? kinds[ev->kind] : "?";
        fprintf(f,
                "{\"name\": \"%s%s%d\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, "
                "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"unit\": %d}},\n",
                k, ev->unit >= 0 ? " " : "", ev->unit >= 0 ? ev->unit : 0, k, tid,
                ev->start_s * 1e6, ev->dur_s * 1e6, ev->unit);
    }
    free(seen);
    fprintf(f,
            "{\"name\": \"iteration\", \"ph\": \"i\", \"s\": \"g\", \"pid\": 0, \"tid\": 0, "
            "\"ts\": %.3f}\n]}\n",
            r->iteration_s * 1e6);
    if (ferror(f))
        return SC_ERRF(err, SC_ERR_IO, "writing the trace failed");
    return SC_OK;
}
