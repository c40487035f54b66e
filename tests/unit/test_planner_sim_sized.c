/* coordinator/planner/plan_sim with micro-batch sizes per stage (plan_sim_run_sized and
 * plan_sim_run_sized_shared): against a hand-computed timeline, against GPipe when the sizes are
 * equal, against the genetic search's recurrence on random instances, on shared processors by
 * hand and bit for bit without contention, and bad rows refused with the entry named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_ga.h"
#include "coordinator/planner/plan_schedule.h"
#include "coordinator/planner/plan_sim.h"
#include "planner_sim_harness.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sized_hand_computed),
        cmocka_unit_test(test_sized_equal_is_gpipe),
        cmocka_unit_test(test_sized_matches_recurrence),
        cmocka_unit_test(test_sized_bad_rows),
        cmocka_unit_test(test_sized_shared_hand_computed),
        cmocka_unit_test(test_sized_shared_without_contention),
        cmocka_unit_test(test_sized_shared_invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
