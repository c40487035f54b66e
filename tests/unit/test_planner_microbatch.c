/* coordinator/planner/plan_microbatch: the closed-form count, the alpha/beta fit and the
 * candidate counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "coordinator/planner/plan_microbatch.h"

#define DATA SC_TEST_DATA_DIR "/planner/"

static void test_closed_form(void **state)
{
    (void)state;
    /* m* = sqrt((p-1) beta B / alpha) = sqrt(3 * 0.5 * 64 / 1.5) = 8 */
    assert_float_equal(plan_microbatch_closed_form(1.5, 0.5, 64, 4), 8.0, 1e-12);
    /* it minimises (m+p-1)(alpha + beta B/m) */
    double a = 0.2, b = 0.01;
    int B = 256, p = 6;
    double ms = plan_microbatch_closed_form(a, b, B, p);
    double tm = (ms + p - 1) * (a + b * B / ms);
    assert_true(tm <= (ms * 1.1 + p - 1) * (a + b * B / (ms * 1.1)));
    assert_true(tm <= (ms / 1.1 + p - 1) * (a + b * B / (ms / 1.1)));
    /* no fixed cost: as many micro-batches as samples up to a 1% bubble, 99 (p-1); one
     * stage: one micro-batch */
    assert_float_equal(plan_microbatch_closed_form(0, 1, 32, 4), 32, 0);
    assert_float_equal(plan_microbatch_closed_form(0, 1, 65536, 4), 297, 0);
    assert_float_equal(plan_microbatch_closed_form(1, 1, 32, 1), 1, 0);
    /* a tiny fixed cost: the same cap; clamped to the batch */
    assert_float_equal(plan_microbatch_closed_form(1e-9, 1, 1 << 20, 8), 693, 0);
    assert_float_equal(plan_microbatch_closed_form(1e-9, 1, 16, 8), 16, 0);
    double m = plan_microbatch_closed_form(0, 1, 1 << 20, 5);
    assert_true((5 - 1) / (m + 5 - 1) <= 0.01 + 1e-12);
}

static void test_fit(void **state)
{
    (void)state;
    plan_profile *p = NULL;
    sc_err err;
    assert_int_equal(plan_profile_load(&p, DATA "tiny.json", &err), SC_OK);
    double a, b;
    /* embed measured at 1 (0.0012) and 4 (0.003): t = 0.0006 + 0.0006 M */
    plan_microbatch_fit(p, 0, 0, 16, &a, &b);
    assert_float_equal(a, 0.0006, 1e-12);
    assert_float_equal(b, 0.0006, 1e-12);
    /* linear blocks: no fixed cost */
    plan_profile_destroy(&p);
    assert_int_equal(plan_profile_new(&p, 2, &err), SC_OK);
    p->blocks[0].forward_s = 1;
    p->blocks[1].backward_s = 2;
    plan_microbatch_fit(p, 0, 1, 8, &a, &b);
    assert_float_equal(a, 0, 1e-12);
    assert_float_equal(b, 3, 1e-12);
    plan_profile_destroy(&p);
}

static void test_candidates(void **state)
{
    (void)state;
    int c[PLAN_MB_MAX_CANDIDATES];
    int n = plan_microbatch_candidates(64, 8, 4, 64, c);
    /* divisors of 64 that are >= 4: 4 8 16 32 64 */
    assert_int_equal(n, 5);
    assert_int_equal(c[0], 4);
    assert_int_equal(c[4], 64);
    n = plan_microbatch_candidates(12, 3, 1, 12, c);
    assert_int_equal(n, 6);
    for (int i = 0; i < n; i++)
        assert_int_equal(12 % c[i], 0);
    /* min count above the batch: fall back to every divisor */
    n = plan_microbatch_candidates(6, 2, 8, 0, c);
    assert_int_equal(n, 4);
    /* many divisors: the nearest to m* are kept */
    n = plan_microbatch_candidates(720720, 100, 1, 720720, c);
    assert_int_equal(n, PLAN_MB_MAX_CANDIDATES);
    for (int i = 0; i < n; i++)
        assert_true(c[i] > 10 && c[i] < 1000);
    /* at most max_count: 4 stages propose no more than 99 * 3 = 297 (4 8 ... 256 of 65536) */
    assert_int_equal(plan_microbatch_most(4), 297);
    assert_int_equal(plan_microbatch_most(1), 1);
    n = plan_microbatch_candidates(65536, 297, 4, plan_microbatch_most(4), c);
    assert_int_equal(n, 7);
    assert_int_equal(c[0], 4);
    assert_int_equal(c[6], 256);
    /* smaller micro-batches: the next divisor at least twice the count, else the batch */
    assert_int_equal(plan_microbatch_smaller(4096, 64), 128);
    assert_int_equal(plan_microbatch_smaller(96, 20), 48);
    assert_int_equal(plan_microbatch_smaller(97, 2), 97);
    assert_int_equal(plan_microbatch_smaller(64, 64), 64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_closed_form),
        cmocka_unit_test(test_fit),
        cmocka_unit_test(test_candidates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
