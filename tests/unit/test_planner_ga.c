/* coordinator/planner/plan_ga: the UMPIPE recurrence against hand-computed times, the batched
 * evaluator bit-identical to the one-by-one one on every code path this machine runs (portable,
 * and AVX2 where the CPU has it: random, shared, unpacked, full, capped and very large rows,
 * populations shaped for each branch of the AVX2 pass), the search identical both ways and
 * never worse than the best equal split it starts from. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_ga.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct prob {
    plan_ga_problem p;
    double *f, *b, *c;
    int *cap;
} prob;

/* Stage i: time alpha_i + beta_i * x per entry, transfer gamma_i * x. */
static void prob_init(prob *q, int S, int B, int K, int random)
{
    int W = B + 1;
    q->f = calloc((size_t)S * W, sizeof(double));
    q->b = calloc((size_t)S * W, sizeof(double));
    q->c = calloc((size_t)S * W, sizeof(double));
    q->cap = calloc((size_t)S, sizeof(int));
    for (int i = 0; i < S; i++) {
        double a = random ? 0.05 * urand() : 0, be = random ? 0.2 + urand() : 1;
        double g = random ? 0.3 * urand() : 0;
        for (int x = 1; x <= B; x++) {
            q->f[i * W + x] = a + be * x;
            q->b[i * W + x] = 2 * (a + be * x);
            q->c[i * W + x] = g * x;
        }
        q->cap[i] = B;
    }
    q->p = (plan_ga_problem){.n_stages = S,
                             .batch = B,
                             .max_entries = K,
                             .fwd_s = q->f,
                             .bwd_s = q->b,
                             .comm_s = q->c,
                             .max_size = q->cap};
}

static void prob_free(prob *q)
{
    free(q->f), free(q->b), free(q->c), free(q->cap);
}

static void test_equal_split_hand_computed(void **state)
{
    (void)state;
    prob q;
    /* 3 stages, f(x) = x, b(x) = 2x, no transfers: equal split of 8 into 4 entries of 2 is
     * GPipe with m = 4, p = 3: (m + p - 1) * (f + b) of one entry = 6 * 6 = 36 */
    prob_init(&q, 3, 8, 8, 0);
    int x[24], y[24];
    for (int i = 0; i < 3; i++)
        plan_ga_equal_split(&q.p, 4, x + i * 8);
    memcpy(y, x, sizeof x);
    assert_int_equal(x[0], 2);
    assert_int_equal(x[4], 0);
    assert_float_equal(plan_ga_eval_one(&q.p, x, y), 36.0, 1e-12);
    /* one entry of 8: (1 + 2) stages... 3 * 8 forward + 3 * 16 backward = 72 */
    for (int i = 0; i < 3; i++)
        plan_ga_equal_split(&q.p, 1, x + i * 8);
    memcpy(y, x, sizeof x);
    assert_float_equal(plan_ga_eval_one(&q.p, x, y), 72.0, 1e-12);
    /* stage 1 with entries {4, 4} after stage 0's {2, 2, 2, 2}: its first entry waits for
     * stage 0's second entry (samples 0-3) at t = 4 */
    for (int i = 0; i < 3; i++)
        plan_ga_equal_split(&q.p, 4, x + i * 8);
    plan_ga_equal_split(&q.p, 2, x + 8);
    memcpy(y, x, sizeof x);
    /* forward: s0 ends 2,4,6,8; s1 [4,8] [8,12]; s2 needs 2 samples: ready at 8 -> 8..10,
     * needs 4: ready 8 -> 10..12, needs 6: ready 12 -> 12..14, 14..16.
     * backward mirrors with 2x: s2 16..20..24..28..32; s1 {4,4}: needs 4 samples of s2's
     * gradients (ready 20) -> 20..28, needs 8 (32) -> 32..40; s0 {2,2,2,2}: entries need
     * 2 and 4 samples (ready 28): 28..32..36; 6 and 8 (ready 40): 40..44..48 */
    assert_float_equal(plan_ga_eval_one(&q.p, x, y), 48.0, 1e-12);
    /* memory penalty: an entry above the cap costs more than any feasible plan */
    q.cap[1] = 3;
    assert_true(plan_ga_eval_one(&q.p, x, y) > 2 * 48.0);
    prob_free(&q);
}

static void random_individual(const plan_ga_problem *p, int *x)
{
    int K = p->max_entries;
    for (int i = 0; i < p->n_stages; i++) {
        int n = 1 + (int)(urand() * K), left = p->batch, j = 0;
        if (n > p->batch)
            n = p->batch;
        for (; j < n - 1; j++) {
            int most = left - (n - 1 - j);
            int v = 1 + (int)(urand() * (most < 1 ? 1 : most));
            if (v > most)
                v = most;
            x[i * K + j] = v;
            left -= v;
        }
        x[i * K + j++] = left;
        for (; j < K; j++)
            x[i * K + j] = 0;
    }
}

/* Evaluates N individuals both ways, the batched pass on path k, and asserts bit-identical
 * times. */
static void check_batch_with(const plan_ga_problem *p, const int *x, const int *y, int N,
                             plan_ga_kernel k)
{
    int S = p->n_stages, K = p->max_entries;
    plan_ga_batch *b = NULL;
    sc_err err;
    assert_int_equal(plan_ga_batch_new(&b, p, N, &err), SC_OK);
    assert_int_equal(plan_ga_batch_use_kernel(b, k), 1);
    assert_int_equal(plan_ga_batch_kernel(b), k);
    double *t = calloc((size_t)N, sizeof(double));
    for (int n = 0; n < N; n++)
        plan_ga_batch_set(b, n, x + (size_t)n * S * K, y + (size_t)n * S * K);
    /* the storage the search breeds into is the one that was set */
    assert_memory_equal(plan_ga_batch_individual(b, N - 1), x + (size_t)(N - 1) * S * K,
                        (size_t)S * K * sizeof(int));
    plan_ga_eval_batch(p, b, N, t);
    for (int n = 0; n < N; n++) {
        double one = plan_ga_eval_one(p, x + (size_t)n * S * K, y + (size_t)n * S * K);
        assert_true(isfinite(one));
        assert_true(t[n] == one); /* same operations in the same order: bit-identical */
    }
    /* a shorter evaluation (a partial last block) gives the same first times */
    double *t2 = calloc((size_t)N, sizeof(double));
    plan_ga_eval_batch(p, b, N - 1, t2);
    for (int n = 0; n < N - 1; n++)
        assert_true(t2[n] == t[n]);
    free(t), free(t2);
    plan_ga_batch_destroy(&b);
}

/* The batched pass's code paths this machine runs: portable always, AVX2 where it can. */
static int kernels(plan_ga_kernel k[2])
{
    int n = 0;
    k[n++] = PLAN_GA_KERNEL_PORTABLE;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2"))
        k[n++] = PLAN_GA_KERNEL_AVX2;
#endif
    return n;
}

/* Evaluates N individuals one by one and with each code path of the batched pass, and asserts
 * bit-identical times. */
static void check_batch(const plan_ga_problem *p, const int *x, const int *y, int N)
{
    plan_ga_kernel k[2];
    for (int c = 0, nk = kernels(k); c < nk; c++)
        check_batch_with(p, x, y, N, k[c]);
}

static void test_batch_matches_one_by_one(void **state)
{
    (void)state;
    for (int trial = 0; trial < 40; trial++) {
        prob q;
        int S = 1 + (int)(urand() * 6), B = 1 + (int)(urand() * 80), K = 1 + (int)(urand() * 40);
        if (trial % 8 == 0)
            K = 64; /* the largest rows */
        prob_init(&q, S, B, K, 1);
        for (int i = 0; i < S; i++)
            q.cap[i] = urand() < 0.3 ? B / 2 + 1 : B;
        q.p.opt_s = trial % 2 ? 0.01 : 0;
        int N = 1 + (int)(urand() * 41);
        int *x = calloc((size_t)N * S * K, sizeof(int)),
            *y = calloc((size_t)N * S * K, sizeof(int));
        for (int n = 0; n < N; n++) {
            random_individual(&q.p, x + n * S * K);
            random_individual(&q.p, y + n * S * K);
            /* some individuals share rows, as crossover makes them */
            if (n > 0 && urand() < 0.3)
                memcpy(x + n * S * K, x + (n - 1) * S * K, (size_t)K * sizeof(int));
        }
        check_batch(&q.p, x, y, N);
        free(x), free(y);
        prob_free(&q);
    }
}

/* Rows that are not packed (a zero before later entries: both evaluators stop at it), and a
 * batch too large for the batched pass's 16-bit prefix sums (it falls back per individual). */
static void test_batch_edge_rows(void **state)
{
    (void)state;
    prob q;
    int S = 3, B = 12, K = 6, N = 9;
    prob_init(&q, S, B, K, 1);
    int *x = calloc((size_t)N * S * K, sizeof(int)), *y = calloc((size_t)N * S * K, sizeof(int));
    for (int n = 0; n < N; n++) {
        random_individual(&q.p, x + n * S * K);
        random_individual(&q.p, y + n * S * K);
    }
    int holed[6] = {3, 0, 4, 5, 0, 0};
    memcpy(x + 1 * S * K + K, holed, sizeof holed);
    memcpy(y + 4 * S * K, holed, sizeof holed);
    check_batch(&q.p, x, y, N);
    free(x), free(y);
    prob_free(&q);

    /* B = 40000: prefix sums do not fit 16 bits */
    S = 2, B = 40000, K = 4, N = 5;
    prob_init(&q, S, B, K, 1);
    x = calloc((size_t)N * S * K, sizeof(int));
    y = calloc((size_t)N * S * K, sizeof(int));
    for (int n = 0; n < N; n++) {
        random_individual(&q.p, x + n * S * K);
        random_individual(&q.p, y + n * S * K);
    }
    check_batch(&q.p, x, y, N);
    free(x), free(y);
    prob_free(&q);
}

/* The code-path switch: AUTO picks the fastest path the CPU runs, the portable one is always
 * there, AVX2 only where the CPU has it, and a refused switch changes nothing. */
static void test_kernel_choice(void **state)
{
    (void)state;
    prob q;
    prob_init(&q, 2, 8, 4, 0);
    plan_ga_batch *b = NULL;
    sc_err err;
    assert_int_equal(plan_ga_batch_new(&b, &q.p, 3, &err), SC_OK);
    plan_ga_kernel k[2];
    int nk = kernels(k);
    assert_int_equal(plan_ga_batch_kernel(b), k[nk - 1]);
    assert_int_equal(plan_ga_batch_use_kernel(b, PLAN_GA_KERNEL_PORTABLE), 1);
    assert_int_equal(plan_ga_batch_kernel(b), PLAN_GA_KERNEL_PORTABLE);
    assert_int_equal(plan_ga_batch_use_kernel(b, PLAN_GA_KERNEL_AVX2), nk == 2);
    assert_int_equal(plan_ga_batch_kernel(b), k[nk - 1]);
    assert_int_equal(plan_ga_batch_use_kernel(b, PLAN_GA_KERNEL_PORTABLE), 1);
    assert_int_equal(plan_ga_batch_use_kernel(b, PLAN_GA_KERNEL_AUTO), 1);
    assert_int_equal(plan_ga_batch_kernel(b), k[nk - 1]);
    assert_string_equal(plan_ga_kernel_name(PLAN_GA_KERNEL_PORTABLE), "portable");
    assert_string_equal(plan_ga_kernel_name(PLAN_GA_KERNEL_AVX2), "avx2");
    plan_ga_batch_destroy(&b);
    prob_free(&q);
}

enum { SHAPE_EQUAL, SHAPE_SHIFTED, SHAPE_RANDOM, SHAPE_FULL };

/* N individuals of one shape: SHAPE_EQUAL every row split into m entries; SHAPE_SHIFTED
 * individual n's forward row on stage i into 1 + (n + i) % K entries, its backward row into
 * one more (as the benchmark's mixed population); SHAPE_RANDOM random rows; SHAPE_FULL every
 * row K entries, but every third individual's K - 1. */
static void shaped(const plan_ga_problem *p, int shape, int m, int N, int *x, int *y)
{
    int S = p->n_stages, K = p->max_entries;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < 2; c++) {
            int *r = (c ? y : x) + (size_t)n * S * K;
            if (shape == SHAPE_RANDOM) {
                random_individual(p, r);
                continue;
            }
            for (int i = 0; i < S; i++) {
                int e = shape == SHAPE_EQUAL     ? m
                        : shape == SHAPE_SHIFTED ? 1 + (n + i + c) % K
                                                 : K - (n % 3 == 0);
                plan_ga_equal_split(p, e, r + i * K);
            }
        }
}

static void check_shape(int S, int B, int K, int N, int shape, int m, int cap)
{
    prob q;
    prob_init(&q, S, B, K, 1);
    for (int i = 0; i < S; i++)
        q.cap[i] = cap;
    q.p.opt_s = 0.003;
    int *x = calloc((size_t)N * S * K, sizeof(int)), *y = calloc((size_t)N * S * K, sizeof(int));
    shaped(&q.p, shape, m, N, x, y);
    check_batch(&q.p, x, y, N);
    free(x), free(y);
    prob_free(&q);
}

/* Populations shaped for each branch of the AVX2 pass, checked on every path: groups whose
 * rows are all alike or whose counts move by one from stage to stage (the wait counts start
 * from the lowest count so far), counts that wrap around or are random (every upstream end
 * compared), partial last groups, rows that fill all 64 entries, row lengths around the
 * 16-entry blocks, and caps that most entries exceed. */
static void test_batch_shapes(void **state)
{
    (void)state;
    check_shape(5, 64, 32, 48, SHAPE_EQUAL, 16, 64);
    check_shape(4, 40, 8, 33, SHAPE_EQUAL, 5, 40);
    check_shape(6, 96, 32, 70, SHAPE_SHIFTED, 0, 96);
    check_shape(3, 200, 64, 19, SHAPE_FULL, 0, 200);
    check_shape(2, 128, 16, 17, SHAPE_FULL, 0, 128);
    int Ks[] = {1, 15, 16, 17, 31, 32, 33, 48, 63, 64};
    for (size_t k = 0; k < sizeof Ks / sizeof Ks[0]; k++)
        check_shape(4, 150, Ks[k], 37, SHAPE_RANDOM, 0, 150);
    /* most entries over the cap; a cap of 0; a negative one */
    check_shape(4, 120, 24, 40, SHAPE_RANDOM, 0, 30);
    check_shape(3, 60, 12, 21, SHAPE_SHIFTED, 0, 0);
    check_shape(3, 60, 12, 21, SHAPE_RANDOM, 0, -7);
}

/* Prefix sums past the int16 range in some lanes of a group and not in others: just those
 * individuals go to the scalar evaluator, on every path. */
static void test_batch_wide_lanes(void **state)
{
    (void)state;
    prob q;
    int S = 3, B = 40000, K = 8, N = 21;
    prob_init(&q, S, B, K, 1);
    int *x = calloc((size_t)N * S * K, sizeof(int)), *y = calloc((size_t)N * S * K, sizeof(int));
    for (int n = 0; n < N; n++) {
        random_individual(&q.p, x + n * S * K);
        random_individual(&q.p, y + n * S * K);
        if (n % 2) /* rows summing to 1000: these stay in the batched pass */
            for (int c = 0; c < 2; c++)
                for (int i = 0; i < S; i++) {
                    int *r = (c ? y : x) + (size_t)n * S * K + i * K;
                    for (int j = 0; j < K; j++)
                        r[j] = j < 1 + (n + i) % K ? 1000 / (1 + (n + i) % K) : 0;
                }
        if (n % 5 == 0) /* one entry of 30000 and one of 2767: the sum is just 32767 */
            for (int j = 0; j < K; j++)
                x[n * S * K + K + j] = j == 0 ? 30000 : j == 1 ? 2767 : 0;
    }
    check_batch(&q.p, x, y, N);
    free(x), free(y);
    prob_free(&q);
}

/* The search gives the same result whether it evaluates with the batched pass or one by one. */
static void test_search_same_both_ways(void **state)
{
    (void)state;
    for (int trial = 0; trial < 4; trial++) {
        prob q;
        int S = 2 + trial, B = 16 + 11 * trial, K = 12;
        prob_init(&q, S, B, K, 1);
        q.cap[0] = B / 3 + 1;
        plan_ga_result r[2];
        sc_err err;
        for (int k = 0; k < 2; k++) {
            plan_ga_cfg cfg = {
                .population = 29, .generations = 25, .seed = 3 + trial, .one_by_one = k};
            assert_int_equal(plan_ga_run(&q.p, &cfg, &r[k], &err), SC_OK);
        }
        assert_true(r[0].time_s == r[1].time_s);
        assert_int_equal(r[0].evaluated, r[1].evaluated);
        assert_memory_equal(r[0].x, r[1].x, (size_t)S * K * sizeof(int));
        assert_memory_equal(r[0].y, r[1].y, (size_t)S * K * sizeof(int));
        plan_ga_result_free(&r[0]);
        plan_ga_result_free(&r[1]);
        prob_free(&q);
    }
}

/* One stage whose times are linear in the size: every split takes the same time up to rounding,
 * so the search must return the best equal split itself (forward and backward alike), not one
 * of the mutants that tie it. */
static void test_search_tie_is_equal_split(void **state)
{
    (void)state;
    for (int B = 5; B <= 40; B += 7) {
        prob q;
        int K = 16;
        prob_init(&q, 1, B, K, 0);
        for (int x = 1; x <= B; x++) { /* inexact products: sums of unlike splits round apart */
            q.f[x] = 0.0131 * x;
            q.b[x] = 0.0297 * x;
        }
        plan_ga_cfg cfg = {.population = 24, .generations = 30, .seed = (uint64_t)B};
        plan_ga_result r;
        sc_err err;
        assert_int_equal(plan_ga_run(&q.p, &cfg, &r, &err), SC_OK);
        assert_true(r.best_equal_m >= 1 && r.best_equal_m <= (K < B ? K : B));
        int want[16];
        plan_ga_equal_split(&q.p, r.best_equal_m, want);
        assert_memory_equal(r.x, want, sizeof want);
        assert_memory_equal(r.y, want, sizeof want);
        assert_true(r.time_s == r.best_equal_s);
        plan_ga_result_free(&r);
        prob_free(&q);
    }
}

static void test_search_never_worse_than_equal(void **state)
{
    (void)state;
    for (int trial = 0; trial < 12; trial++) {
        prob q;
        int S = 2 + (int)(urand() * 4), B = 8 + (int)(urand() * 56);
        prob_init(&q, S, B, 16, 1);
        plan_ga_cfg cfg = {.population = 32, .generations = 40, .seed = 1 + trial};
        plan_ga_result r;
        sc_err err;
        assert_int_equal(plan_ga_run(&q.p, &cfg, &r, &err), SC_OK);
        /* the best equal split, computed here independently */
        int K = 16, lim = K < B ? K : B;
        int *x = calloc((size_t)S * K, sizeof(int)), *y = calloc((size_t)S * K, sizeof(int));
        double best = HUGE_VAL;
        for (int m = 1; m <= lim; m++) {
            for (int i = 0; i < S; i++)
                plan_ga_equal_split(&q.p, m, x + i * K);
            memcpy(y, x, (size_t)S * K * sizeof(int));
            double v = plan_ga_eval_one(&q.p, x, y);
            best = v < best ? v : best;
        }
        /* the fewest entries among equal splits within rounding (1e-9) of the fastest */
        assert_true(r.best_equal_s >= best && r.best_equal_s <= best * (1 + 2e-9));
        assert_true(r.time_s <= r.best_equal_s);
        /* the result is a valid individual whose time is what was reported */
        for (int i = 0; i < S; i++) {
            int sx = 0, sy = 0;
            for (int j = 0; j < K; j++) {
                sx += r.x[i * K + j];
                sy += r.y[i * K + j];
            }
            assert_int_equal(sx, B);
            assert_int_equal(sy, B);
        }
        assert_float_equal(plan_ga_eval_one(&q.p, r.x, r.y), r.time_s, 1e-12 * r.time_s);
        assert_true(isfinite(r.greedy_s) && isfinite(r.uniform_s));
        assert_true(r.evaluated >= 32 * 41);
        free(x), free(y);
        plan_ga_result_free(&r);
        prob_free(&q);
    }
}

/* The gather slot the runtime needs for a stage's backward cut: the largest backward entry
 * that is not exactly one forward entry. */
static void test_gather_size(void **state)
{
    (void)state;
    enum { K = 6 };
    const int x[K] = {2, 2, 4, 0, 0, 0};
    const int same[K] = {2, 2, 4, 0, 0, 0};   /* the forward cut itself */
    const int spans[K] = {4, 4, 0, 0, 0, 0};  /* [0,4) spans two forwards; [4,8) is the third */
    const int splits[K] = {2, 2, 1, 3, 0, 0}; /* the third forward split in 1 + 3 */
    const int whole[K] = {8, 0, 0, 0, 0, 0};
    const int shifted[K] = {1, 2, 2, 3, 0, 0}; /* shifted: no entry matches a forward one */
    assert_int_equal(plan_ga_gather_size(x, same, K), 0);
    assert_int_equal(plan_ga_gather_size(x, spans, K), 4);
    assert_int_equal(plan_ga_gather_size(x, splits, K), 3);
    assert_int_equal(plan_ga_gather_size(x, whole, K), 8);
    assert_int_equal(plan_ga_gather_size(x, shifted, K), 3);
    /* a full row: no slot past the end is read */
    const int xf[K] = {1, 1, 1, 1, 1, 3}, yf[K] = {1, 1, 1, 1, 1, 3};
    assert_int_equal(plan_ga_gather_size(xf, yf, K), 0);
    const int yg[K] = {1, 1, 1, 1, 4, 0};
    assert_int_equal(plan_ga_gather_size(xf, yg, K), 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_split_hand_computed),
        cmocka_unit_test(test_batch_matches_one_by_one),
        cmocka_unit_test(test_batch_edge_rows),
        cmocka_unit_test(test_kernel_choice),
        cmocka_unit_test(test_batch_shapes),
        cmocka_unit_test(test_batch_wide_lanes),
        cmocka_unit_test(test_search_same_both_ways),
        cmocka_unit_test(test_search_never_worse_than_equal),
        cmocka_unit_test(test_search_tie_is_equal_split),
        cmocka_unit_test(test_gather_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
