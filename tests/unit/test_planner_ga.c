/* coordinator/planner/plan_ga: the UMPIPE recurrence against hand-computed times, the batched
 * evaluator against the one-by-one one, and the search never worse than the best equal split
 * it starts from. */
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

static void test_batch_matches_one_by_one(void **state)
{
    (void)state;
    for (int trial = 0; trial < 20; trial++) {
        prob q;
        int S = 1 + (int)(urand() * 5), B = 4 + (int)(urand() * 60), K = 1 + (int)(urand() * 16);
        prob_init(&q, S, B, K, 1);
        for (int i = 0; i < S; i++)
            q.cap[i] = urand() < 0.2 ? B / 2 + 1 : B;
        int N = 37;
        plan_ga_batch *b = NULL;
        sc_err err;
        assert_int_equal(plan_ga_batch_new(&b, &q.p, N, &err), SC_OK);
        int *x = calloc((size_t)N * S * K, sizeof(int)),
            *y = calloc((size_t)N * S * K, sizeof(int));
        double *t = calloc((size_t)N, sizeof(double));
        for (int n = 0; n < N; n++) {
            random_individual(&q.p, x + n * S * K);
            random_individual(&q.p, y + n * S * K);
            plan_ga_batch_set(b, n, x + n * S * K, y + n * S * K);
        }
        plan_ga_eval_batch(&q.p, b, N, t);
        for (int n = 0; n < N; n++) {
            double one = plan_ga_eval_one(&q.p, x + n * S * K, y + n * S * K);
            assert_float_equal(t[n], one, 1e-12 * one);
        }
        free(x), free(y), free(t);
        plan_ga_batch_destroy(&b);
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
        assert_float_equal(r.best_equal_s, best, 1e-12 * best);
        assert_true(r.time_s <= best * (1 + 1e-12));
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_split_hand_computed),
        cmocka_unit_test(test_batch_matches_one_by_one),
        cmocka_unit_test(test_search_never_worse_than_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
