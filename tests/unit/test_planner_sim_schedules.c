/* coordinator/planner/plan_schedule + plan_sim, one device per stage: schedules against
 * hand-computed timelines, the pipeline bubble (p-1)/(m+p-1), stash counts, link serialisation,
 * validation failures and the Chrome trace; replicated stages played copy by copy against
 * hand-computed iterations and an independent replay of the runtime's copies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_schedule.h"
#include "coordinator/planner/plan_sim.h"
#include "planner_sim_harness.h"

static void test_bubble_equal_stages(void **state)
{
    (void)state;
    plan_sim_stage st[8];
    const int ps[] = {1, 2, 3, 4, 8}, ms[] = {1, 2, 4, 8, 16};
    for (int a = 0; a < 5; a++)
        for (int c = 0; c < 5; c++) {
            int p = ps[a], m = ms[c];
            equal_stages(st, p, 1.0, 2.0);
            double want = (double)(p - 1) / (m + p - 1);
            plan_sim_result g = run(PLAN_SCHED_GPIPE, p, m, 0, st, 0);
            assert_float_equal(g.iteration_s, (m + p - 1) * 3.0, 1e-9);
            assert_float_equal(g.bubble_fraction, want, 1e-12);
            for (int s = 0; s < p; s++) {
                assert_float_equal(g.peak_inflight[s], m, 0);
                assert_float_equal(g.busy_s[s], 3.0 * m, 1e-9);
            }
            plan_sim_result_free(&g);
            if (m < p)
                continue;
            plan_sim_result o = run(PLAN_SCHED_1F1B, p, m, 0, st, 0);
            assert_float_equal(o.iteration_s, (m + p - 1) * 3.0, 1e-9);
            assert_float_equal(o.bubble_fraction, want, 1e-12);
            /* 1F1B stashes at most min(p - s, m) micro-batches */
            for (int s = 0; s < p; s++)
                assert_float_equal(o.peak_inflight[s], p - s < m ? p - s : m, 0);
            plan_sim_result_free(&o);
        }
}

static void test_links_hand_computed(void **state)
{
    (void)state;
    plan_sim_stage st[2] = {{.fwd_s = 1, .bwd_s = 1, .send_fwd_s = 0.5, .send_bwd_s = 0.5},
                            {.fwd_s = 1, .bwd_s = 1}};
    /* F0 [0,1], arrives 1.5, F0 [1.5,2.5], B0 [2.5,3.5], grad arrives 4, B0 [4,5] */
    plan_sim_result r = run(PLAN_SCHED_GPIPE, 2, 1, 0, st, 0);
    assert_float_equal(r.iteration_s, 5.0, 1e-12);
    plan_sim_result_free(&r);
    /* transfers slower than compute queue on the link: one at a time.
     * acts: [1,3] [3,5]; stage 1: F [3,4] [5,6], B [6,7] [7,8]; grads [7,9] [9,11];
     * stage 0: B [9,10] [11,12] */
    st[0].send_fwd_s = st[0].send_bwd_s = 2;
    r = run(PLAN_SCHED_GPIPE, 2, 2, 0, st, 1);
    assert_float_equal(r.iteration_s, 12.0, 1e-12);
    assert_float_equal(r.busy_s[0], 4.0, 1e-12);
    assert_float_equal(r.idle_s[1], 8.0, 1e-12);
    plan_sim_result_free(&r);
    /* optimizer step at the flush */
    st[0].send_fwd_s = st[0].send_bwd_s = 0;
    st[0].opt_s = st[1].opt_s = 0.25;
    r = run(PLAN_SCHED_GPIPE, 2, 1, 0, st, 0);
    assert_float_equal(r.iteration_s, 4.25, 1e-12);
    plan_sim_result_free(&r);
}

static void test_pipedream_steady_state(void **state)
{
    (void)state;
    plan_sim_stage st[3];
    equal_stages(st, 3, 1, 2);
    plan_sim_result r = run(PLAN_SCHED_PIPEDREAM, 3, 10, 0, st, 0);
    /* no flush: one minibatch per max(f + b) */
    assert_float_equal(r.steady_s, 3.0, 1e-9);
    assert_float_equal(r.iteration_s, 30.0, 1e-9);
    assert_float_equal(r.bubble_fraction, 0.0, 1e-9);
    plan_sim_result_free(&r);
    st[1].fwd_s = 2;
    st[1].bwd_s = 3;
    r = run(PLAN_SCHED_PIPEDREAM, 3, 10, 0, st, 0);
    assert_float_equal(r.steady_s, 5.0, 1e-9);
    assert_float_equal(r.bubble_fraction, 1 - (3 + 5 + 3) / (3 * 5.0), 1e-9);
    plan_sim_result_free(&r);
    plan_schedule *s = NULL;
    sc_err err;
    assert_int_equal(plan_schedule_build(&s, PLAN_SCHED_PIPEDREAM, 4, 8, 0, &err), SC_OK);
    assert_int_equal(s->weight_versions, 3);
    plan_schedule_destroy(&s);
}

static void test_sliced_warmup(void **state)
{
    (void)state;
    plan_sim_stage st[4];
    equal_stages(st, 4, 1, 1);
    plan_sim_result base = run(PLAN_SCHED_1F1B, 4, 4, 0, st, 0);
    plan_sim_result none = run(PLAN_SCHED_SLICED, 4, 4, 0, st, 0);
    assert_float_equal(none.iteration_s, base.iteration_s, 1e-12);
    /* halves let downstream stages start after half a forward */
    plan_sim_result one = run(PLAN_SCHED_SLICED, 4, 4, 1, st, 0);
    assert_true(one.iteration_s < base.iteration_s - 1e-9);
    plan_schedule *s = NULL;
    sc_err err;
    assert_int_equal(plan_schedule_build(&s, PLAN_SCHED_SLICED, 4, 4, 2, &err), SC_OK);
    assert_int_equal(s->n_units, 6);
    assert_true(s->frac[0] == 0.5 && s->frac[3] == 0.5 && s->frac[4] == 1.0);
    plan_schedule_destroy(&s);
    plan_sim_result_free(&base);
    plan_sim_result_free(&none);
    plan_sim_result_free(&one);
}

static plan_schedule *hand(int stages, int units)
{
    plan_schedule *s = NULL;
    sc_err err;
    assert_int_equal(plan_schedule_new(&s, stages, units, &err), SC_OK);
    return s;
}

static void expect_invalid(plan_schedule *s, const char *needle)
{
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_schedule_validate(s, &err), SC_ERR_INVALID);
    if (strstr(err.msg, needle) == NULL)
        print_error("message: %s\n", err.msg);
    assert_non_null(strstr(err.msg, needle));
    plan_schedule_destroy(&s);
}

static void test_validation(void **state)
{
    (void)state;
    sc_err err;
    /* backward before forward */
    plan_schedule *s = hand(1, 1);
    plan_schedule_push(s, 0, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_F, 0, &err);
    expect_invalid(s, "before its forward");
    /* a missing backward */
    s = hand(1, 2);
    plan_schedule_push(s, 0, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_F, 1, &err);
    expect_invalid(s, "unit 1 lacks its backward");
    /* a send with no matching receive */
    s = hand(2, 1);
    plan_schedule_push(s, 0, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_SEND_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_RECV_B, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_SEND_B, 0, &err);
    expect_invalid(s, "do not match");
    /* both stages wait for each other */
    s = hand(2, 1);
    plan_schedule_push(s, 0, PLAN_ACT_RECV_B, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_SEND_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_RECV_F, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_SEND_B, 0, &err);
    expect_invalid(s, "deadlock");
    /* every generated schedule is valid */
    for (int k = 0; k < PLAN_SCHED_COUNT; k++)
        for (int p = 1; p <= 5; p++)
            for (int m = 1; m <= 7; m++) {
                assert_int_equal(plan_schedule_build(&s, (plan_sched_kind)k, p, m,
                                                     k == PLAN_SCHED_SLICED ? m / 2 : 0, &err),
                                 SC_OK);
                assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
                plan_schedule_destroy(&s);
            }
    assert_int_equal(plan_schedule_build(&s, PLAN_SCHED_GPIPE, 2, 0, 0, &err), SC_ERR_INVALID);
    assert_int_equal(plan_sched_parse("1f1b"), PLAN_SCHED_1F1B);
    assert_int_equal(plan_sched_parse("zero"), -1);
}

static void test_trace(void **state)
{
    (void)state;
    plan_sim_stage st[2] = {{.fwd_s = 1, .bwd_s = 1, .send_fwd_s = 0.5, .send_bwd_s = 0.5},
                            {.fwd_s = 1, .bwd_s = 1}};
    plan_sim_result r = run(PLAN_SCHED_1F1B, 2, 3, 0, st, 1);
    /* 6 compute actions and the optimizer step per stage + 3 transfers each way */
    assert_int_equal(r.n_events, 2 * 7 + 2 * 3);
    FILE *f = tmpfile();
    assert_non_null(f);
    sc_err err;
    assert_int_equal(plan_sim_write_trace(&r, f, NULL, &err), SC_OK);
    long len = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)len + 1);
    assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    assert_non_null(root);
    json_t *ev = json_object_get(root, "traceEvents");
    assert_true(json_is_array(ev));
    int complete = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") == 0)
            complete++;
    }
    assert_int_equal(complete, r.n_events);
    json_decref(root);
    free(text);
    plan_sim_result_free(&r);
}

/* ---- replicated stages: every copy on its own ---- */

/* An independent replay of the runtime's copies, for flushed schedules (gpipe, 1f1b): copy k of
 * stage s runs its own micro-batches u = k, k + r_s, ... in the order the stage's list has them
 * (gpipe: every forward, then every backward; 1f1b: the first W_s forwards, then one forward /
 * one backward, then the drain, W_s = r_s floor((R_s - 1) / r_s) capped at m), each with the
 * whole micro-batch's time. Micro-batch u's activation goes from copy u % r_s to copy
 * u % r_{s+1} after its forward, its gradient back after its backward, over a link per pair of
 * copies that carries one transfer at a time in its sender's order; the copies of a stage start
 * their optimizer step together once the last of them is done. Computed by walking each copy's
 * own sequence of F and B, pulling the times of the others' sends it needs on demand. */
#define RP_MAX_STAGES 4
#define RP_MAX_COPIES 4
#define RP_MAX_M 32
typedef struct {
    int p, m, gpipe;
    const int *reps;
    const plan_sim_stage *st;
    /* per stage, copy: the sequence of (backward?, unit) and how far it has been walked */
    int seq[RP_MAX_STAGES][RP_MAX_COPIES][2 * RP_MAX_M][2];
    int len[RP_MAX_STAGES][RP_MAX_COPIES], at[RP_MAX_STAGES][RP_MAX_COPIES];
    double clock[RP_MAX_STAGES][RP_MAX_COPIES];
    double link_f[RP_MAX_STAGES][RP_MAX_COPIES][RP_MAX_COPIES];
    double link_b[RP_MAX_STAGES][RP_MAX_COPIES][RP_MAX_COPIES];
    double fwd_arr[RP_MAX_STAGES][RP_MAX_M], bwd_arr[RP_MAX_STAGES][RP_MAX_M]; /* -1: not yet */
} replay;

static void rp_step(replay *x, int s, int k);

/* When the activation (bwd 0) or gradient (bwd 1) of unit u sent by stage s arrives. */
static double rp_arrival(replay *x, int s, int u, int bwd)
{
    double *a = bwd ? &x->bwd_arr[s][u] : &x->fwd_arr[s][u];
    int k = u % x->reps[s];
    while (*a < 0)
        rp_step(x, s, k);
    return *a;
}

/* Walks one more compute of copy k of stage s. */
static void rp_step(replay *x, int s, int k)
{
    int i = x->at[s][k]++;
    assert_true(i < x->len[s][k]);
    int bwd = x->seq[s][k][i][0], u = x->seq[s][k][i][1];
    double t = x->clock[s][k];
    if (!bwd && s > 0) {
        double a = rp_arrival(x, s - 1, u, 0);
        t = a > t ? a : t;
    }
    if (bwd && s + 1 < x->p) {
        double a = rp_arrival(x, s + 1, u, 1);
        t = a > t ? a : t;
    }
    t += bwd ? x->st[s].bwd_s : x->st[s].fwd_s;
    x->clock[s][k] = t;
    int to = bwd ? s - 1 : s + 1;
    if (to < 0 || to >= x->p) {
        (bwd ? x->bwd_arr : x->fwd_arr)[s][u] = t;
        return;
    }
    int j = u % x->reps[to];
    double *link = bwd ? &x->link_b[s][k][j] : &x->link_f[s][k][j];
    double go = *link > t ? *link : t;
    *link = go + (bwd ? x->st[s - 1].send_bwd_s : x->st[s].send_fwd_s);
    (bwd ? x->bwd_arr : x->fwd_arr)[s][u] = *link;
}

static double replay_iteration(int gpipe, int p, int m, const int *reps, const plan_sim_stage *st)
{
    replay *x = calloc(1, sizeof *x);
    assert_non_null(x);
    x->p = p;
    x->m = m;
    x->gpipe = gpipe;
    x->reps = reps;
    x->st = st;
    for (int s = 0; s < p; s++)
        for (int u = 0; u < m; u++)
            x->fwd_arr[s][u] = x->bwd_arr[s][u] = -1;
    for (int s = 0; s < p; s++) {
        int after = 0;
        for (int j = s; j < p; j++)
            after += reps[j];
        int w = gpipe ? m : reps[s] * ((after - 1) / reps[s]);
        w = w < m ? w : m;
        /* the stage's order of F and B, each appended to its copy's sequence */
        int order[2 * RP_MAX_M][2], n = 0, f = 0, b = 0;
        for (; f < w; f++, n++)
            order[n][0] = 0, order[n][1] = f;
        while (f < m) {
            order[n][0] = 0, order[n++][1] = f++;
            order[n][0] = 1, order[n++][1] = b++;
        }
        while (b < m)
            order[n][0] = 1, order[n++][1] = b++;
        for (int i = 0; i < n; i++) {
            int k = order[i][1] % reps[s];
            memcpy(x->seq[s][k][x->len[s][k]++], order[i], sizeof order[i]);
        }
    }
    double end = 0;
    for (int s = 0; s < p; s++) {
        double last = 0;
        for (int k = 0; k < reps[s]; k++) {
            while (x->at[s][k] < x->len[s][k])
                rp_step(x, s, k);
            last = x->clock[s][k] > last ? x->clock[s][k] : last;
        }
        end = last + st[s].opt_s > end ? last + st[s].opt_s : end;
    }
    free(x);
    return end;
}

static plan_sim_result play_replicated(plan_sched_kind k, int p, int m, const int *reps,
                                       const plan_sim_stage *st, int record)
{
    plan_schedule *s = NULL;
    plan_sim_result r;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_schedule_build_replicated(&s, k, p, m, 0, reps, &err), SC_OK);
    assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
    if (plan_sim_run(s, st, m, 1.0, record, &r, &err) != SC_OK)
        print_error("%s\n", err.msg);
    plan_schedule_destroy(&s);
    return r;
}

/* Two stages, the replicated one with r times the other's work (forward r f, backward 2 r f on
 * each copy; f and 2 f on the other), no transfers, no optimizer step, worked out by hand.
 * First stage replicated, m = r: its copies run one forward each at once (r f), the second
 * stage then runs r forwards and r backwards (gpipe) or r forward-backward pairs (1f1b: W_1 = 0;
 * W_0 = r = m, all forwards first), the last gradient arrives at 2 r f + 2 r f (gpipe) or
 * r f + 3 r f (1f1b), and its copy's backward takes 2 r f more: 6 r f either way. m = 4r: the
 * second stage is never starved after the first r f and is busy 12 r f, the last backward on a
 * copy of the first takes 2 r f more: 15 r f for both (gpipe: the second stage's forwards end at
 * 5 r f; each copy's backwards run back to back from its first gradient, the last copy's from
 * 7 r f - 2 f + 2 f r). The simulator used to play the replicated stage as one taking f per
 * micro-batch: (m + 1) 3 f, 25-44% short at m = r. */
static void test_replicated_by_hand(void **state)
{
    (void)state;
    const double f = 0.01;
    for (int r = 2; r <= 4; r *= 2) {
        const int reps[] = {r, 1};
        plan_sim_stage st[2] = {{.fwd_s = r * f, .bwd_s = 2 * r * f}, {.fwd_s = f, .bwd_s = 2 * f}};
        for (int k = 0; k < 2; k++) {
            plan_sched_kind kind = k ? PLAN_SCHED_1F1B : PLAN_SCHED_GPIPE;
            plan_sim_result a = play_replicated(kind, 2, r, reps, st, 0);
            assert_float_equal(a.iteration_s, 6 * r * f, 1e-12);
            assert_float_equal(a.peak_inflight[0], 1, 0);
            plan_sim_result_free(&a);
            plan_sim_result b = play_replicated(kind, 2, 4 * r, reps, st, 1);
            assert_float_equal(b.iteration_s, 15 * r * f, 1e-12);
            /* a copy holds its four (gpipe) or W_0 / r + 1 = 2 (1f1b) */
            assert_float_equal(b.peak_inflight[0], k ? 2 : 4, 0);
            assert_float_equal(b.peak_inflight[1], k ? 1 : 4 * r, 0);
            /* busy: per copy of the first stage 4 (r f + 2 r f), the second 4 r x 3 f */
            assert_float_equal(b.busy_s[0], 12 * r * f, 1e-12);
            assert_float_equal(b.busy_s[1], 12 * r * f, 1e-12);
            assert_float_equal(b.bubble_fraction, 1 - 12.0 / 15, 1e-12);
            /* every copy has a lane of its own in the events */
            int seen[4] = {0};
            for (int e = 0; e < b.n_events; e++)
                if (b.events[e].lane == 0 && b.events[e].kind == PLAN_ACT_F) {
                    assert_int_equal(b.events[e].copy, b.events[e].unit % r);
                    seen[b.events[e].copy]++;
                }
            for (int c = 0; c < r; c++)
                assert_int_equal(seen[c], 4);
            plan_sim_result_free(&b);
            /* with an optimizer step (the all-reduce in it) the copies start it together, when
             * the last of them is done */
            st[0].opt_s = 0.005;
            b = play_replicated(kind, 2, 4 * r, reps, st, 1);
            assert_float_equal(b.iteration_s, 15 * r * f + 0.005, 1e-12);
            int opts = 0;
            for (int e = 0; e < b.n_events; e++)
                if (b.events[e].lane == 0 && b.events[e].kind == PLAN_ACT_OPT) {
                    assert_float_equal(b.events[e].start_s, 15 * r * f, 1e-12);
                    opts++;
                }
            assert_int_equal(opts, r);
            plan_sim_result_free(&b);
            st[0].opt_s = 0;
        }
    }
}

static double rnd(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return ((*seed >> 8) & 0xffff) / 65536.0;
}

/* The simulator against the independent replay on random instances: 1 to 3 stages of 1 to 3
 * copies, m from the most copies to 4 times it, random compute, transfer and optimizer times,
 * gpipe and 1f1b: the same iteration. Unreplicated instances are among them. */
static void test_replicated_replay(void **state)
{
    (void)state;
    unsigned seed = 11;
    for (int trial = 0; trial < 400; trial++) {
        int p = 1 + (int)(rnd(&seed) * 3), reps[3], most = 1;
        plan_sim_stage st[3];
        for (int s = 0; s < p; s++) {
            reps[s] = 1 + (int)(rnd(&seed) * 3);
            most = reps[s] > most ? reps[s] : most;
            st[s] = (plan_sim_stage){.fwd_s = 0.1 + rnd(&seed),
                                     .bwd_s = 0.1 + 2 * rnd(&seed),
                                     .opt_s = rnd(&seed) * 0.3,
                                     .send_fwd_s = rnd(&seed) * 0.2,
                                     .send_bwd_s = rnd(&seed) * 0.2};
        }
        int m = most + (int)(rnd(&seed) * 3 * most + 0.5);
        for (int k = 0; k < 2; k++) {
            plan_sim_result a =
                play_replicated(k ? PLAN_SCHED_1F1B : PLAN_SCHED_GPIPE, p, m, reps, st, 0);
            double want = replay_iteration(!k, p, m, reps, st);
            if (fabs(a.iteration_s - want) > 1e-9 * want)
                print_error("trial %d kind %d p %d m %d reps %d %d %d: %.12g vs %.12g\n", trial, k,
                            p, m, reps[0], reps[1], reps[2], a.iteration_s, want);
            assert_true(fabs(a.iteration_s - want) <= 1e-9 * want);
            plan_sim_result_free(&a);
        }
    }
}

/* Copies on shared processors: the share is per copy (lane); with a processor for every copy
 * the figures are the unshared ones bit for bit, with one for all the iteration is at least all
 * the work done one compute at a time. */
static void test_replicated_shared(void **state)
{
    (void)state;
    const int reps[] = {2, 1};
    plan_sim_stage st[2] = {{.fwd_s = 0.02, .bwd_s = 0.04, .opt_s = 0.01, .send_fwd_s = 0.003},
                            {.fwd_s = 0.01, .bwd_s = 0.02, .opt_s = 0.01, .send_bwd_s = 0.002}};
    int group[3] = {0, 0, 0}, cap = 3;
    plan_sim_share sh = {.n_groups = 1, .group = group, .capacity = &cap};
    plan_schedule *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    for (int k = 0; k < 3; k++) {
        plan_sched_kind kind = k == 0   ? PLAN_SCHED_GPIPE
                               : k == 1 ? PLAN_SCHED_1F1B
                                        : PLAN_SCHED_PIPEDREAM;
        int units = kind == PLAN_SCHED_PIPEDREAM ? 24 : 6;
        assert_int_equal(plan_schedule_build_replicated(&s, kind, 2, units, 0, reps, &err), SC_OK);
        plan_sim_result a, b, c;
        cap = 3;
        assert_int_equal(plan_sim_run(s, st, 6, 1.0, 0, &a, &err), SC_OK);
        assert_int_equal(plan_sim_run_shared(s, st, 6, 1.0, &sh, 0, &b, &err), SC_OK);
        assert_true(a.iteration_s == b.iteration_s);
        assert_true(a.busy_s[0] == b.busy_s[0] && a.busy_s[1] == b.busy_s[1]);
        cap = 1;
        assert_int_equal(plan_sim_run_shared(s, st, 6, 1.0, &sh, 0, &c, &err), SC_OK);
        if (kind != PLAN_SCHED_PIPEDREAM)
            assert_true(c.iteration_s >= 6 * (0.06 + 0.03) + 2 * 0.01 + 0.01 - 1e-12);
        assert_true(c.iteration_s > a.iteration_s);
        plan_sim_result_free(&a);
        plan_sim_result_free(&b);
        plan_sim_result_free(&c);
        plan_schedule_destroy(&s);
    }
    /* the share is checked per copy: three entries here */
    group[2] = 1;
    plan_sim_result d;
    assert_int_equal(plan_schedule_build_replicated(&s, PLAN_SCHED_1F1B, 2, 6, 0, reps, &err),
                     SC_OK);
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_shared(s, st, 6, 1.0, &sh, 0, &d, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "copy (lane) 2 is in group 1"));
    plan_schedule_destroy(&s);
}

/* pipedream with copies: the lists (warm-up W_s, an OPT after each round of r_s backwards)
 * simulate without deadlock; two stages of r and 1 copies with r times the work are balanced,
 * so the steady state is the unreplicated stage's time per minibatch (f + b + its step). */
static void test_replicated_pipedream(void **state)
{
    (void)state;
    const double f = 0.01;
    for (int r = 1; r <= 4; r++) {
        const int reps[] = {r, 1};
        plan_sim_stage st[2] = {{.fwd_s = r * f, .bwd_s = 2 * r * f, .opt_s = 0},
                                {.fwd_s = f, .bwd_s = 2 * f, .opt_s = 0}};
        plan_schedule *s = NULL;
        plan_sim_result res;
        sc_err err;
        sc_err_clear(&err);
        assert_int_equal(
            plan_schedule_build_replicated(&s, PLAN_SCHED_PIPEDREAM, 2, 48, 0, reps, &err), SC_OK);
        assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
        assert_int_equal(plan_sim_run(s, st, 8, 1.0, 0, &res, &err), SC_OK);
        if (fabs(res.steady_s - 3 * f) > 1e-9)
            print_error("r %d: steady %.9g\n", r, res.steady_s);
        assert_float_equal(res.steady_s, 3 * f, 1e-9);
        assert_float_equal(res.iteration_s, 8 * 3 * f, 1e-9);
        assert_float_equal(res.peak_inflight[0], 2, 0); /* W_0 / r + 1 */
        plan_sim_result_free(&res);
        plan_schedule_destroy(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bubble_equal_stages),
        cmocka_unit_test(test_links_hand_computed),
        cmocka_unit_test(test_pipedream_steady_state),
        cmocka_unit_test(test_sliced_warmup),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_trace),
        cmocka_unit_test(test_replicated_by_hand),
        cmocka_unit_test(test_replicated_replay),
        cmocka_unit_test(test_replicated_pipedream),
        cmocka_unit_test(test_replicated_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
