/* coordinator/planner/plan_schedule + plan_sim: schedules against hand-computed timelines,
 * the pipeline bubble (p-1)/(m+p-1), stash counts, link serialisation, validation failures
 * and the Chrome trace; per-stage micro-batch sizes against a hand-computed timeline, against
 * GPipe when the sizes are equal, and against the genetic search's recurrence; stages sharing
 * processors against hand-computed timelines and a closed form for GPipe, and against the
 * unshared simulator, bit for bit, when no group holds more computes than its capacity. */
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

#include "coordinator/planner/plan_ga.h"
#include "coordinator/planner/plan_schedule.h"
#include "coordinator/planner/plan_sim.h"

/* Builds and validates schedule k, then plays it: plan_sim_run when sh is NULL, else
 * plan_sim_run_shared with sh, at slice efficiency eff. */
static plan_sim_result play(plan_sched_kind k, int p, int m, int sliced, const plan_sim_stage *st,
                            const plan_sim_share *sh, double eff, int record)
{
    plan_schedule *s = NULL;
    plan_sim_result r;
    sc_err err;
    sc_err_clear(&err);
    int units = k == PLAN_SCHED_PIPEDREAM ? 8 * p : m;
    assert_int_equal(plan_schedule_build(&s, k, p, units, sliced, &err), SC_OK);
    assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
    if (sh == NULL)
        assert_int_equal(plan_sim_run(s, st, m, eff, record, &r, &err), SC_OK);
    else
        assert_int_equal(plan_sim_run_shared(s, st, m, eff, sh, record, &r, &err), SC_OK);
    plan_schedule_destroy(&s);
    return r;
}

static plan_sim_result run(plan_sched_kind k, int p, int m, int sliced, const plan_sim_stage *st,
                           int record)
{
    return play(k, p, m, sliced, st, NULL, 1.0, record);
}

static void equal_stages(plan_sim_stage *st, int p, double f, double b)
{
    for (int i = 0; i < p; i++) {
        memset(&st[i], 0, sizeof st[i]);
        st[i].fwd_s = f;
        st[i].bwd_s = b;
    }
}

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

/* ---- sizes per stage ---- */

/* Tables (S, B+1) from per-sample costs: linear in the size unless `bend` adds x^2 * bend. */
static void sized_tables(int S, int B, const double *f, const double *b, const double *c,
                         double bend, double *ft, double *bt, double *ct)
{
    for (int i = 0; i < S; i++)
        for (int x = 0; x <= B; x++) {
            ft[i * (B + 1) + x] = f[i] * x + bend * x * x;
            bt[i * (B + 1) + x] = b[i] * x + bend * x * x;
            ct[i * (B + 1) + x] = c[i] * x;
        }
}

/* The simulator's input for rows x, y (S, K) over tables ft, bt, ct (S, B+1) and steps opt. */
static plan_sim_sized sized_input(int S, int B, int K, const int *x, const int *y, const double *ft,
                                  const double *bt, const double *ct, const double *opt)
{
    return (plan_sim_sized){.n_stages = S,
                            .batch = B,
                            .max_entries = K,
                            .fwd_sizes = x,
                            .bwd_sizes = y,
                            .fwd_s = ft,
                            .bwd_s = bt,
                            .comm_s = ct,
                            .opt_s = opt};
}

static void test_sized_hand_computed(void **state)
{
    (void)state;
    /* 2 stages, batch 4. Stage 0 cuts the forward [1, 3] and the backward [2, 2]; stage 1 the
     * forward [2, 2] and the backward [4]. f(x) = x, b(x) = 2x, transfers 0.5 s a sample.
     * fwd 0: F0 0-1 (send 1-1.5), F1 1-4 (send 4-5.5)
     * fwd 1: both entries need upstream entry 1 (prefix 4 >= 2): F0 5.5-7.5, F1 7.5-9.5
     * bwd 1: B0 9.5-17.5, gradient 17.5-19.5
     * bwd 0: from its forward end (4), waits for 19.5: B0 19.5-23.5, B1 23.5-27.5
     * opt: stage 0 1 s (27.5-28.5), stage 1 0.5 s (17.5-18) */
    enum { S = 2, B = 4, K = 3 };
    double f[S] = {1, 1}, b[S] = {2, 2}, c[S] = {0.5, 0};
    double ft[S * (B + 1)], bt[S * (B + 1)], ct[S * (B + 1)], opt[S] = {1, 0.5};
    sized_tables(S, B, f, b, c, 0, ft, bt, ct);
    int x[S * K] = {1, 3, 0, 2, 2, 0}, y[S * K] = {2, 2, 0, 4, 0, 0};
    plan_sim_sized in = sized_input(S, B, K, x, y, ft, bt, ct, opt);
    plan_sim_result r;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_sized(&in, 1, &r, &err), SC_OK);
    assert_float_equal(r.iteration_s, 28.5, 1e-12);
    assert_float_equal(r.busy_s[0], 1 + 3 + 4 + 4 + 1, 1e-12);
    assert_float_equal(r.busy_s[1], 2 + 2 + 8 + 0.5, 1e-12);
    assert_float_equal(r.idle_s[1], 28.5 - 12.5, 1e-12);
    assert_float_equal(r.bubble_fraction, 1 - 25.5 / 57.0, 1e-12);
    assert_float_equal(r.peak_inflight[0], 2, 0);
    /* 4 forwards, 3 backwards, 2 activation and 1 gradient transfers, 2 optimizer steps */
    assert_int_equal(r.n_events, 12);
    int seen = 0;
    for (int e = 0; e < r.n_events; e++) {
        const plan_sim_event *ev = &r.events[e];
        if (ev->lane == 1 && ev->kind == PLAN_ACT_F && ev->unit == 0) {
            assert_float_equal(ev->start_s, 5.5, 1e-12); /* waited for upstream entry 1 */
            seen++;
        }
        if (ev->lane == 0 && ev->kind == PLAN_ACT_B && ev->unit == 1) {
            assert_float_equal(ev->start_s, 23.5, 1e-12);
            seen++;
        }
        if (ev->lane == S + 1 && ev->kind == PLAN_ACT_SEND_B) { /* link 1->0 */
            assert_float_equal(ev->start_s, 17.5, 1e-12);
            assert_float_equal(ev->dur_s, 2, 1e-12);
            seen++;
        }
    }
    assert_int_equal(seen, 3);
    plan_sim_result_free(&r);
}

/* Equal sizes everywhere are GPipe: the same iteration time and busy times as the action-list
 * simulator, links included. */
static void test_sized_equal_is_gpipe(void **state)
{
    (void)state;
    enum { S = 4, M = 6, MB = 3, B = M * MB, K = 8 };
    double f[S] = {1.0, 0.7, 1.3, 0.9}, b[S] = {2.0, 1.1, 2.4, 1.5}, c[S] = {0.2, 0.5, 0.1, 0};
    double ft[S * (B + 1)], bt[S * (B + 1)], ct[S * (B + 1)], opt[S] = {0.3, 0.2, 0.4, 0.1};
    sized_tables(S, B, f, b, c, 0, ft, bt, ct);
    int x[S * K] = {0};
    for (int i = 0; i < S; i++)
        for (int j = 0; j < M; j++)
            x[i * K + j] = MB;
    plan_sim_sized in = sized_input(S, B, K, x, x, ft, bt, ct, opt);
    plan_sim_result r, g;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_sized(&in, 0, &r, &err), SC_OK);
    plan_sim_stage st[S];
    for (int i = 0; i < S; i++) {
        memset(&st[i], 0, sizeof st[i]);
        st[i].fwd_s = f[i] * MB;
        st[i].bwd_s = b[i] * MB;
        st[i].opt_s = opt[i];
        st[i].send_fwd_s = c[i] * MB;
        st[i].send_bwd_s = c[i] * MB; /* the gradient back across cut i */
    }
    g = run(PLAN_SCHED_GPIPE, S, M, 0, st, 0);
    assert_float_equal(r.iteration_s, g.iteration_s, 1e-9 * g.iteration_s);
    assert_float_equal(r.bubble_fraction, g.bubble_fraction, 1e-9);
    for (int i = 0; i < S; i++) {
        assert_float_equal(r.busy_s[i], g.busy_s[i], 1e-9);
        assert_float_equal(r.peak_inflight[i], g.peak_inflight[i], 0);
    }
    plan_sim_result_free(&r);
    plan_sim_result_free(&g);
}

static unsigned rnd_next(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

/* A random row of at most k positive sizes summing to B. */
static void rnd_row(unsigned *seed, int B, int k, int *row)
{
    int n = 1 + (int)(rnd_next(seed) % (unsigned)(k < B ? k : B)), left = B;
    for (int j = 0; j < k; j++)
        row[j] = 0;
    for (int j = 0; j < n; j++) {
        int rest = n - j - 1;
        int most = left - rest;
        int v = j == n - 1 ? left : 1 + (int)(rnd_next(seed) % (unsigned)most);
        row[j] = v;
        left -= v;
    }
}

/* The event simulator and the genetic search's recurrence (plan_ga_eval_one) agree exactly on
 * random instances: unequal rows, non-linear tables, one optimizer step for all stages. */
/* A random instance of sizes per stage: tables, rows (forward x, backward y), optimizer steps
 * (all o) and memory caps (the batch), each allocated; rnd_sized_free frees them. */
typedef struct rnd_sized {
    int S, B, K;
    double o;
    double *ft, *bt, *ct, *opt;
    int *x, *y, *cap;
} rnd_sized;

static rnd_sized rnd_sized_new(unsigned *seed)
{
    rnd_sized z = {.S = 1 + (int)(rnd_next(seed) % 6),
                   .B = 1 + (int)(rnd_next(seed) % 40),
                   .K = 1 + (int)(rnd_next(seed) % 10)};
    int S = z.S, B = z.B, K = z.K;
    size_t W = (size_t)B + 1;
    z.ft = calloc((size_t)S * W, sizeof(double));
    z.bt = calloc((size_t)S * W, sizeof(double));
    z.ct = calloc((size_t)S * W, sizeof(double));
    z.opt = calloc((size_t)S, sizeof(double));
    z.x = calloc((size_t)S * K, sizeof(int));
    z.y = calloc((size_t)S * K, sizeof(int));
    z.cap = calloc((size_t)S, sizeof(int));
    assert_true(z.ft && z.bt && z.ct && z.opt && z.x && z.y && z.cap);
    z.o = (rnd_next(seed) % 100) / 50.0;
    for (int i = 0; i < S; i++) {
        double a = 0.05 + (rnd_next(seed) % 100) / 100.0;
        for (int v = 1; v <= B; v++) {
            z.ft[i * W + v] = a + (rnd_next(seed) % 1000) / 997.0 * v;
            z.bt[i * W + v] = 2 * a + (rnd_next(seed) % 1000) / 331.0 * v;
            z.ct[i * W + v] = i + 1 < S ? (rnd_next(seed) % 1000) / 1999.0 * v : 0;
        }
        rnd_row(seed, B, K, z.x + i * K);
        rnd_row(seed, B, K, z.y + i * K);
        z.opt[i] = z.o;
        z.cap[i] = B;
    }
    return z;
}

static void rnd_sized_free(rnd_sized *z)
{
    free(z->ft), free(z->bt), free(z->ct), free(z->opt), free(z->x), free(z->y), free(z->cap);
}

static plan_sim_sized rnd_sized_input(const rnd_sized *z)
{
    return sized_input(z->S, z->B, z->K, z->x, z->y, z->ft, z->bt, z->ct, z->opt);
}

static void test_sized_matches_recurrence(void **state)
{
    (void)state;
    unsigned seed = 12345;
    for (int trial = 0; trial < 300; trial++) {
        rnd_sized z = rnd_sized_new(&seed);
        plan_ga_problem p = {.n_stages = z.S,
                             .batch = z.B,
                             .max_entries = z.K,
                             .fwd_s = z.ft,
                             .bwd_s = z.bt,
                             .comm_s = z.ct,
                             .max_size = z.cap,
                             .opt_s = z.o};
        plan_sim_sized in = rnd_sized_input(&z);
        plan_sim_result r;
        sc_err err;
        sc_err_clear(&err);
        assert_int_equal(plan_sim_run_sized(&in, trial % 2, &r, &err), SC_OK);
        double want = plan_ga_eval_one(&p, z.x, z.y);
        if (r.iteration_s != want)
            fail_msg("trial %d (S %d, B %d, K %d): simulator %.17g, recurrence %.17g", trial, z.S,
                     z.B, z.K, r.iteration_s, want);
        plan_sim_result_free(&r);
        rnd_sized_free(&z);
    }
}

static void expect_sized_error(const int *x, const int *y, const char *needle)
{
    enum { S = 2, B = 4, K = 3 };
    double f[S] = {1, 1}, b[S] = {2, 2}, c[S] = {0.5, 0};
    double ft[S * (B + 1)], bt[S * (B + 1)], ct[S * (B + 1)];
    sized_tables(S, B, f, b, c, 0, ft, bt, ct);
    plan_sim_sized in = sized_input(S, B, K, x, y, ft, bt, ct, NULL);
    plan_sim_result r;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_sized(&in, 1, &r, &err), SC_ERR_INVALID);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
    assert_null(r.busy_s);
    assert_null(r.events);
}

static void test_sized_bad_rows(void **state)
{
    (void)state;
    const int good[6] = {1, 3, 0, 2, 2, 0};
    const int short_sum[6] = {1, 3, 0, 2, 1, 0};
    const int empty[6] = {0, 0, 0, 4, 0, 0};
    const int too_big[6] = {1, 3, 0, 5, 0, 0};
    const int negative[6] = {1, 3, 0, 6, -2, 0};
    expect_sized_error(short_sum, good, "stage 1 forward sizes sum to 3 samples");
    expect_sized_error(good, empty, "stage 0 backward sizes sum to 0 samples over 0 entries");
    expect_sized_error(too_big, good, "stage 1 forward sizes: entry 0 is 5 samples");
    expect_sized_error(good, negative, "stage 1 backward sizes: entry 0 is 6 samples");
}

/* ---------------------------------------------------------------- shared processors */

static plan_sim_result run_shared(plan_sched_kind k, int p, int m, int sliced,
                                  const plan_sim_stage *st, const plan_sim_share *sh, int record)
{
    return play(k, p, m, sliced, st, sh, 0.9, record);
}

static const plan_sim_event *find_event(const plan_sim_result *r, int lane, int kind, int unit)
{
    for (int e = 0; e < r->n_events; e++)
        if (r->events[e].lane == lane && r->events[e].kind == kind && r->events[e].unit == unit)
            return &r->events[e];
    fail_msg("no event lane %d kind %d unit %d", lane, kind, unit);
    return NULL;
}

static void test_shared_hand_computed(void **state)
{
    (void)state;
    plan_sim_stage st[4];
    equal_stages(st, 2, 1, 1);
    const int group2[2] = {0, 0}, one[1] = {1};
    plan_sim_share sh = {.n_groups = 1, .group = group2, .capacity = one};
    /* GPipe, 2 stages on 1 processor, 2 micro-batches: F0 of stage 0 alone [0,1]; F1 of stage 0
     * and F0 of stage 1 at half rate [1,3]; F1 of stage 1 alone [3,4]; its first backward alone
     * [4,5]; then both stages' backwards at half rate [5,7]; stage 0's last alone [7,8]. The
     * processor never idles: 8 s of work in 8 s, against 6 s on two devices. */
    plan_sim_result r = run_shared(PLAN_SCHED_GPIPE, 2, 2, 0, st, &sh, 1);
    assert_float_equal(r.iteration_s, 8.0, 1e-12);
    const plan_sim_event *a = find_event(&r, 0, PLAN_ACT_F, 1);
    const plan_sim_event *b = find_event(&r, 1, PLAN_ACT_F, 0);
    assert_float_equal(a->start_s, 1.0, 1e-12);
    assert_float_equal(a->dur_s, 2.0, 1e-12);
    assert_float_equal(b->start_s, 1.0, 1e-12);
    assert_float_equal(b->dur_s, 2.0, 1e-12);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_F, 1)->dur_s, 1.0, 1e-12);
    /* busy time is the stretched compute: 1 + 2 + 2 + 1 on stage 0, 2 + 1 + 1 + 2 on stage 1 */
    assert_float_equal(r.busy_s[0], 6.0, 1e-12);
    assert_float_equal(r.busy_s[1], 6.0, 1e-12);
    assert_float_equal(r.idle_s[0], 2.0, 1e-12);
    plan_sim_result_free(&r);

    /* Weights: the same pipeline on 2 processors, stage 0 a stage of 2 copies (weight 2). F1 of
     * stage 0 and F0 of stage 1 overlap with 3 processors' worth of work on 2: each at 2/3,
     * [1, 2.5]; without weights they fit the 2 processors and take 1 s each. */
    const int w21[2] = {2, 1}, two2[1] = {2};
    plan_sim_share shw = {.n_groups = 1, .group = group2, .capacity = two2, .weight = w21};
    r = run_shared(PLAN_SCHED_GPIPE, 2, 2, 0, st, &shw, 1);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_F, 1)->dur_s, 1.5, 1e-12);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_F, 0)->dur_s, 1.5, 1e-12);
    plan_sim_result_free(&r);
    shw.weight = NULL;
    r = run_shared(PLAN_SCHED_GPIPE, 2, 2, 0, st, &shw, 1);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_F, 1)->dur_s, 1.0, 1e-12);
    plan_sim_result_free(&r);

    /* GPipe with p equal stages on c processors, no links: micro-batch j runs on stage s in the
     * wave slot k = s + j of each direction, every stage of a slot starts together, so a slot
     * with w stages takes f * max(1, w / c) forward and b * max(1, w / c) backward, where
     * w = min(k + 1, p, m, m + p - 1 - k). 4 stages on 2 processors: */
    const int group4[4] = {0, 0, 0, 0}, two[1] = {2};
    plan_sim_share sh4 = {.n_groups = 1, .group = group4, .capacity = two};
    const int ms[] = {1, 2, 4, 8};
    const double want_slots[] = {4, 5, 9, 17}; /* sum of max(1, w / 2) over the m + 3 slots */
    equal_stages(st, 4, 1, 2);
    for (int i = 0; i < 4; i++) {
        double slots = 0;
        for (int k = 0; k < ms[i] + 3; k++) {
            int w = k + 1;
            w = w < 4 ? w : 4;
            w = w < ms[i] ? w : ms[i];
            w = w < ms[i] + 3 - k ? w : ms[i] + 3 - k;
            slots += w > 2 ? w / 2.0 : 1.0;
        }
        assert_float_equal(slots, want_slots[i], 0);
        r = run_shared(PLAN_SCHED_GPIPE, 4, ms[i], 0, st, &sh4, 0);
        assert_float_equal(r.iteration_s, 3.0 * want_slots[i], 1e-9);
        /* every stage computes 3 s per micro-batch at rate 1 or stretched */
        for (int s = 0; s < 4; s++)
            assert_true(r.busy_s[s] >= 3.0 * ms[i] - 1e-9);
        plan_sim_result_free(&r);
    }
}

/* CFS-capped lanes (plan_sim_share.quota): a compute after an idle spell runs at full speed
 * until the bucket of q P (1 - q) is spent, so it takes P (1 - q) less than its sustained time;
 * back to back, the sustained time. */
static void test_quota_hand_computed(void **state)
{
    (void)state;
    plan_sim_stage st[2];
    const int none[2] = {-1, -1}, zero_cap[1] = {1};
    const double half[2] = {0.5, 0.5}, period[2] = {1.0, 1.0};
    /* one stage at q 0.5, P 1 s (bucket 0.25 s), GPipe over 2 micro-batches of F 2 s, B 4 s
     * sustained: F0 runs 0.5 s at full speed (1 s of its sustained time) and the rest at the
     * quota: 1.5 s; F1, B1, B0 follow at once: 2, 4 and 4 s. 11.5 s against 12. */
    equal_stages(st, 1, 2, 4);
    plan_sim_share sh = {.n_groups = 0,
                         .group = none,
                         .capacity = zero_cap,
                         .quota = half,
                         .quota_period_s = period};
    plan_sim_result r = run_shared(PLAN_SCHED_GPIPE, 1, 2, 0, st, &sh, 1);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_F, 0)->dur_s, 1.5, 1e-12);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_F, 1)->dur_s, 2.0, 1e-12);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_B, 0)->dur_s, 4.0, 1e-12);
    assert_float_equal(r.iteration_s, 11.5, 1e-12);
    plan_sim_result_free(&r);

    /* two stages of F 1 s, B 1 s, one micro-batch; only stage 1 capped (q 0.5, P 1 s). Its F0
     * starts at 1 s with a full bucket (it waited since 0) and ends with it at 1.5 s; its B0
     * has no tokens left: [1.5, 2.5]; stage 0's B0 [2.5, 3.5]. */
    const double second[2] = {0, 0.5};
    equal_stages(st, 2, 1, 1);
    sh.quota = second;
    r = run_shared(PLAN_SCHED_GPIPE, 2, 1, 0, st, &sh, 1);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_F, 0)->start_s, 1.0, 1e-12);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_F, 0)->dur_s, 0.5, 1e-12);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_B, 0)->dur_s, 1.0, 1e-12);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_F, 0)->dur_s, 1.0, 1e-12); /* uncapped */
    assert_float_equal(r.iteration_s, 3.5, 1e-12);
    plan_sim_result_free(&r);

    /* a compute shorter than the bucket holds runs at full speed throughout: F 0.2 s sustained
     * at q 0.5 takes 0.1 s, spending 0.05 s of the 0.25 s bucket */
    equal_stages(st, 2, 0.2, 1);
    r = run_shared(PLAN_SCHED_GPIPE, 2, 1, 0, st, &sh, 1);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_F, 0)->dur_s, 0.1, 1e-12);
    /* B0 then starts with 0.2 s of tokens: full speed for 0.4 s (0.8 s sustained), then 0.2 s */
    assert_float_equal(find_event(&r, 1, PLAN_ACT_B, 0)->dur_s, 0.6, 1e-12);
    plan_sim_result_free(&r);

    /* no quota anywhere (all 0) and no groups: plan_sim_run's figures, bit for bit */
    const double zeros[2] = {0, 0};
    sh.quota = zeros;
    equal_stages(st, 2, 1, 2);
    plan_sim_result a = run_shared(PLAN_SCHED_1F1B, 2, 4, 0, st, &sh, 0);
    plan_sim_result b = play(PLAN_SCHED_1F1B, 2, 4, 0, st, NULL, 0.9, 0);
    assert_true(a.iteration_s == b.iteration_s);
    plan_sim_result_free(&a);
    plan_sim_result_free(&b);

    /* a share outside (0, 1) or a period <= 0: refused, naming the lane */
    const double bad[2] = {0.5, 1.5};
    sh.quota = bad;
    plan_schedule *sc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_schedule_build(&sc, PLAN_SCHED_GPIPE, 2, 2, 0, &err), SC_OK);
    assert_int_equal(plan_sim_run_shared(sc, st, 2, 1.0, &sh, 0, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stage 1 has share 1.5"));
    const double no_period[2] = {1.0, 0};
    sh.quota = half;
    sh.quota_period_s = no_period;
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_shared(sc, st, 2, 1.0, &sh, 0, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "period of 0 s"));
    plan_schedule_destroy(&sc);
}

/* Two results hold the same numbers bit for bit, and the same events in any order. */
static int event_cmp(const void *x, const void *y)
{
    const plan_sim_event *a = x, *b = y;
    if (a->lane != b->lane)
        return a->lane < b->lane ? -1 : 1;
    if (a->start_s != b->start_s)
        return a->start_s < b->start_s ? -1 : 1;
    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    return a->unit < b->unit ? -1 : a->unit > b->unit;
}

static void assert_same_result(plan_sim_result *a, plan_sim_result *b)
{
    assert_int_equal(a->n_stages, b->n_stages);
    assert_true(a->iteration_s == b->iteration_s);
    assert_true(a->steady_s == b->steady_s);
    assert_true(a->bubble_fraction == b->bubble_fraction);
    size_t n = (size_t)a->n_stages * sizeof(double);
    assert_memory_equal(a->busy_s, b->busy_s, n);
    assert_memory_equal(a->idle_s, b->idle_s, n);
    assert_memory_equal(a->peak_inflight, b->peak_inflight, n);
    assert_int_equal(a->n_events, b->n_events);
    qsort(a->events, (size_t)a->n_events, sizeof *a->events, event_cmp);
    qsort(b->events, (size_t)b->n_events, sizeof *b->events, event_cmp);
    for (int e = 0; e < a->n_events; e++) {
        assert_int_equal(event_cmp(&a->events[e], &b->events[e]), 0);
        assert_true(a->events[e].dur_s == b->events[e].dur_s);
    }
}

static void test_shared_without_contention_is_unshared(void **state)
{
    (void)state;
    /* unequal stages and links, so that stages overlap at odd times */
    plan_sim_stage st[4] = {
        {.fwd_s = 1.3, .bwd_s = 2.1, .opt_s = 0.4, .send_fwd_s = 0.3, .send_bwd_s = 0.2},
        {.fwd_s = 0.7, .bwd_s = 1.9, .opt_s = 0.1, .send_fwd_s = 0.6, .send_bwd_s = 0.5},
        {.fwd_s = 1.1, .bwd_s = 0.8, .opt_s = 0.3, .send_fwd_s = 0.1, .send_bwd_s = 0.7},
        {.fwd_s = 0.9, .bwd_s = 1.7, .opt_s = 0.2}};
    const int all[4] = {0, 0, 0, 0}, singles[4] = {0, -1, 1, 2}, none[4] = {-1, -1, -1, -1};
    const int cap4[1] = {4}, cap9[1] = {9}, ones[3] = {1, 1, 1};
    const plan_sim_share shares[] = {
        {.n_groups = 1, .group = all, .capacity = cap4},     /* capacity = stages */
        {.n_groups = 1, .group = all, .capacity = cap9},     /* more than enough */
        {.n_groups = 3, .group = singles, .capacity = ones}, /* groups of one stage */
        {.n_groups = 1, .group = none, .capacity = cap4},    /* nobody grouped: the sweep */
    };
    const plan_sched_kind kinds[] = {PLAN_SCHED_GPIPE, PLAN_SCHED_1F1B, PLAN_SCHED_PIPEDREAM,
                                     PLAN_SCHED_SLICED};
    for (int x = 0; x < 4; x++)
        for (int k = 0; k < 4; k++)
            for (int p = 1; p <= 4; p++) {
                plan_schedule *s = NULL;
                sc_err err;
                int m = 8, units = kinds[k] == PLAN_SCHED_PIPEDREAM ? 8 * p : m;
                assert_int_equal(plan_schedule_build(&s, kinds[k], p, units,
                                                     kinds[k] == PLAN_SCHED_SLICED, &err),
                                 SC_OK);
                assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
                plan_sim_result a, b;
                plan_sim_share sh = shares[x];
                assert_int_equal(plan_sim_run(s, st, m, 0.9, 1, &a, &err), SC_OK);
                assert_int_equal(plan_sim_run_shared(s, st, m, 0.9, &sh, 1, &b, &err), SC_OK);
                assert_same_result(&a, &b);
                plan_sim_result_free(&a);
                plan_sim_result_free(&b);
                if (x == 0) {
                    assert_int_equal(plan_sim_run_shared(s, st, m, 0.9, NULL, 1, &b, &err), SC_OK);
                    assert_int_equal(plan_sim_run(s, st, m, 0.9, 1, &a, &err), SC_OK);
                    assert_same_result(&a, &b);
                    plan_sim_result_free(&a);
                    plan_sim_result_free(&b);
                }
                plan_schedule_destroy(&s);
            }
}

static void test_shared_contention_bounds(void **state)
{
    (void)state;
    /* 1F1B and PipeDream, 4 stages on 1 or 2 processors: never faster than on a device each,
     * never faster than the work divided by the processors, busy time stretched. */
    plan_sim_stage st[4];
    equal_stages(st, 4, 1, 2);
    const int all[4] = {0, 0, 0, 0};
    for (int c = 1; c <= 2; c++) {
        plan_sim_share sh = {.n_groups = 1, .group = all, .capacity = &c};
        plan_sim_result base = run(PLAN_SCHED_1F1B, 4, 8, 0, st, 0);
        plan_sim_result r = run_shared(PLAN_SCHED_1F1B, 4, 8, 0, st, &sh, 0);
        assert_true(r.iteration_s >= base.iteration_s - 1e-9);
        assert_true(r.iteration_s >= 4 * 8 * 3.0 / c - 1e-9);
        for (int s = 0; s < 4; s++)
            assert_true(r.busy_s[s] >= 8 * 3.0 - 1e-9);
        plan_sim_result_free(&base);
        plan_sim_result_free(&r);
        /* PipeDream's steady state: 4 stages each 3 s per minibatch on c processors */
        r = run_shared(PLAN_SCHED_PIPEDREAM, 4, 10, 0, st, &sh, 0);
        assert_float_equal(r.steady_s, 4 * 3.0 / c, 1e-9);
        assert_float_equal(r.bubble_fraction, 0.0, 1e-9);
        plan_sim_result_free(&r);
    }
}

static void test_shared_invalid(void **state)
{
    (void)state;
    plan_schedule *s = NULL;
    plan_sim_stage st[2];
    plan_sim_result r;
    sc_err err;
    equal_stages(st, 2, 1, 1);
    assert_int_equal(plan_schedule_build(&s, PLAN_SCHED_GPIPE, 2, 2, 0, &err), SC_OK);
    const int bad_group[2] = {0, 1}, good_group[2] = {0, 0}, zero[1] = {0}, one[1] = {1};
    plan_sim_share sh = {.n_groups = 1, .group = bad_group, .capacity = one};
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_shared(s, st, 2, 1.0, &sh, 0, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stage 1 is in group 1"));
    sh = (plan_sim_share){.n_groups = 1, .group = good_group, .capacity = zero};
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_shared(s, st, 2, 1.0, &sh, 0, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "group 0 has capacity 0"));
    const int no_weight[2] = {1, 0};
    sh = (plan_sim_share){.n_groups = 1, .group = good_group, .capacity = one, .weight = no_weight};
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_shared(s, st, 2, 1.0, &sh, 0, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stage 1 has weight 0"));
    plan_schedule_destroy(&s);
}

/* Sizes per stage on shared processors, hand-computed. 2 stages, batch 2, every row [1, 1],
 * f(x) = x, b(x) = 2x, no transfers, one processor for both stages.
 * F0.0 0-1 alone; F0.1 and F1.0 from 1, at half speed, to 3; F1.1 3-4; B1.0 4-6;
 * B1.1 and B0.0 from 6 at half speed to 10; B0.1 10-12. Each stage computes 1 + 1 + 2 + 2 s,
 * of which 1 s and 2 s at half speed: 9 s busy each. Unshared: F1 ends 3, B1 3-7, B0 5-9. */
static void test_sized_shared_hand_computed(void **state)
{
    (void)state;
    enum { S = 2, B = 2, K = 2 };
    double f[S] = {1, 1}, b[S] = {2, 2}, c[S] = {0, 0};
    double ft[S * (B + 1)], bt[S * (B + 1)], ct[S * (B + 1)];
    sized_tables(S, B, f, b, c, 0, ft, bt, ct);
    int x[S * K] = {1, 1, 1, 1};
    plan_sim_sized in = sized_input(S, B, K, x, x, ft, bt, ct, NULL);
    const int both[S] = {0, 0}, one[1] = {1};
    plan_sim_share sh = {.n_groups = 1, .group = both, .capacity = one};
    plan_sim_result r;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_sized_shared(&in, &sh, 1, &r, &err), SC_OK);
    assert_float_equal(r.iteration_s, 12, 1e-12);
    assert_float_equal(r.busy_s[0], 9, 1e-12);
    assert_float_equal(r.busy_s[1], 9, 1e-12);
    assert_float_equal(r.bubble_fraction, 1 - 18.0 / 24, 1e-12);
    assert_float_equal(r.peak_inflight[0], 2, 0);
    int seen = 0;
    for (int e = 0; e < r.n_events; e++) {
        const plan_sim_event *ev = &r.events[e];
        if (ev->lane == 0 && ev->kind == PLAN_ACT_B && ev->unit == 0) { /* shared 6-10 */
            assert_float_equal(ev->start_s, 6, 1e-12);
            assert_float_equal(ev->dur_s, 4, 1e-12);
            seen++;
        }
        if (ev->lane == 1 && ev->kind == PLAN_ACT_F && ev->unit == 1) { /* alone 3-4 */
            assert_float_equal(ev->start_s, 3, 1e-12);
            assert_float_equal(ev->dur_s, 1, 1e-12);
            seen++;
        }
    }
    assert_int_equal(seen, 2);
    plan_sim_result_free(&r);
    /* two processors: no contention, the recurrence's 9 s */
    const int two[1] = {2};
    sh.capacity = two;
    assert_int_equal(plan_sim_run_sized_shared(&in, &sh, 0, &r, &err), SC_OK);
    assert_float_equal(r.iteration_s, 9, 1e-12);
    plan_sim_result_free(&r);
}

/* Without contention (a group as large as the stages, groups of one, no group, no share) the
 * shared player of sizes per stage gives plan_sim_run_sized's figures and events bit for bit,
 * on random rows and tables; with one processor for all, never less than that. */
static void test_sized_shared_without_contention(void **state)
{
    (void)state;
    unsigned seed = 777;
    for (int trial = 0; trial < 200; trial++) {
        rnd_sized z = rnd_sized_new(&seed);
        plan_sim_sized in = rnd_sized_input(&z);
        int all[6], own[6], none[6], ones[6], stages[1] = {z.S}, one[1] = {1};
        for (int i = 0; i < z.S; i++) {
            all[i] = 0;
            own[i] = i;
            none[i] = -1;
            ones[i] = 1;
        }
        const plan_sim_share shares[] = {
            {.n_groups = 1, .group = all, .capacity = stages},  /* capacity = stages */
            {.n_groups = z.S, .group = own, .capacity = ones},  /* groups of one */
            {.n_groups = 1, .group = none, .capacity = stages}, /* nobody grouped */
        };
        plan_sim_result a, b;
        sc_err err;
        sc_err_clear(&err);
        assert_int_equal(plan_sim_run_sized(&in, 1, &a, &err), SC_OK);
        for (int k = 0; k < 4; k++) { /* the three shares, then none at all */
            assert_int_equal(plan_sim_run_sized_shared(&in, k < 3 ? &shares[k] : NULL, 1, &b, &err),
                             SC_OK);
            assert_same_result(&a, &b);
            plan_sim_result_free(&b);
        }
        /* one processor for every stage: stretched, never faster */
        plan_sim_share tight = {.n_groups = 1, .group = all, .capacity = one};
        assert_int_equal(plan_sim_run_sized_shared(&in, &tight, 0, &b, &err), SC_OK);
        assert_true(b.iteration_s >= a.iteration_s * (1 - 1e-12));
        double work = 0;
        for (int i = 0; i < z.S; i++)
            work += a.busy_s[i];
        assert_true(b.iteration_s >= work * (1 - 1e-12)); /* one processor does all the work */
        plan_sim_result_free(&b);
        plan_sim_result_free(&a);
        rnd_sized_free(&z);
    }
}

static void test_sized_shared_invalid(void **state)
{
    (void)state;
    enum { S = 2, B = 4, K = 3 };
    double f[S] = {1, 1}, b[S] = {2, 2}, c[S] = {0.5, 0};
    double ft[S * (B + 1)], bt[S * (B + 1)], ct[S * (B + 1)];
    sized_tables(S, B, f, b, c, 0, ft, bt, ct);
    int x[S * K] = {1, 3, 0, 2, 2, 0}, y[S * K] = {2, 1, 0, 4, 0, 0};
    plan_sim_sized in = sized_input(S, B, K, x, y, ft, bt, ct, NULL);
    const int both[S] = {0, 0}, bad[S] = {0, 2}, one[1] = {1};
    plan_sim_share sh = {.n_groups = 1, .group = both, .capacity = one};
    plan_sim_result r;
    sc_err err;
    sc_err_clear(&err);
    /* stage 0's backward row sums to 3, not 4 */
    assert_int_equal(plan_sim_run_sized_shared(&in, &sh, 1, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stage 0 backward sizes sum to 3"));
    assert_null(r.busy_s);
    y[1] = 2;
    sh.group = bad;
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_sized_shared(&in, &sh, 1, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stage 1 is in group 2"));
    sh.group = both;
    assert_int_equal(plan_sim_run_sized_shared(&in, &sh, 1, &r, &err), SC_OK);
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
        cmocka_unit_test(test_sized_hand_computed),
        cmocka_unit_test(test_sized_equal_is_gpipe),
        cmocka_unit_test(test_sized_matches_recurrence),
        cmocka_unit_test(test_sized_bad_rows),
        cmocka_unit_test(test_shared_hand_computed),
        cmocka_unit_test(test_shared_without_contention_is_unshared),
        cmocka_unit_test(test_shared_contention_bounds),
        cmocka_unit_test(test_shared_invalid),
        cmocka_unit_test(test_sized_shared_hand_computed),
        cmocka_unit_test(test_sized_shared_without_contention),
        cmocka_unit_test(test_sized_shared_invalid),
        cmocka_unit_test(test_replicated_by_hand),
        cmocka_unit_test(test_replicated_replay),
        cmocka_unit_test(test_replicated_pipedream),
        cmocka_unit_test(test_replicated_shared),
        cmocka_unit_test(test_quota_hand_computed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
