/* coordinator/freezing: the decision on two intervals' gradient norms, and the intervals closed
 * from per-stage reports. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/freezing.h"
#include "coordinator/planning.h"

static void test_decide(void **state)
{
    (void)state;
    double tau;
    /* changes r = 0.1, 0.2, 0.5, 0.05, 0.8: the median is 0.2; the prefix ends before block 1 */
    const double before[] = {10, 10, 10, 10, 10}, now[] = {9, 12, 5, 9.5, 2};
    assert_int_equal(coord_freezing_decide(before, now, 5, 0, 50, 0, &tau), 1);
    assert_true(fabs(tau - 0.2) < 1e-12);
    /* a low percentile freezes nothing: the first block is at the threshold */
    assert_int_equal(coord_freezing_decide(before, now, 5, 0, 10, 0, &tau), 0);
    assert_true(fabs(tau - 0.07) < 1e-12); /* between 0.05 and 0.1 */
    /* a high one freezes up to the block that changes most of those before it */
    assert_int_equal(coord_freezing_decide(before, now, 5, 0, 90, 0, &tau), 4);
    /* tau is capped: a block still changing by 20% has not converged, whatever the others do */
    assert_int_equal(coord_freezing_decide(before, now, 5, 0, 90, 0.15, &tau), 1);
    assert_true(fabs(tau - 0.15) < 1e-12);
    assert_int_equal(coord_freezing_decide(before, now, 5, 0, 50, 0.05, &tau), 0);
    /* only the blocks after the frozen prefix count: from block 2, r = 0.5, 0.05, 0.8 */
    assert_int_equal(coord_freezing_decide(before, now, 5, 2, 50, 0, &tau), 2);
    assert_true(fabs(tau - 0.5) < 1e-12);
    /* blocks without parameters (norm 0) join a prefix that reaches past them (block 0), stop
     * none, and are left out where the prefix stops after them (block 2): r = 0.01, 0.02, 0.5 */
    const double b2[] = {0, 10, 0, 10, 10}, n2[] = {0, 9.9, 0, 9.8, 5};
    assert_int_equal(coord_freezing_decide(b2, n2, 5, 0, 50, 0, &tau), 2);
    assert_true(fabs(tau - 0.02) < 1e-12);
    /* but alone they are no freeze */
    const double b3[] = {0, 10, 10}, n3[] = {0, 1, 9.9};
    assert_int_equal(coord_freezing_decide(b3, n3, 3, 0, 50, 0, &tau), 0);
    /* one learning block left never freezes */
    const double b4[] = {10, 10}, n4[] = {10, 10};
    assert_int_equal(coord_freezing_decide(b4, n4, 2, 1, 50, 0, &tau), 1);
}

/* Two stages of blocks 0-1 and 2-3 report every step; intervals of 10 steps. */
static void test_intervals(void **state)
{
    (void)state;
    coord_freezing *all = NULL;
    assert_int_equal(coord_freezing_start(&all, "job-1", 10, 50, 0.1, 4, 0), 0);
    char why[512] = "";
    for (uint64_t step = 1; step <= 30; step++) {
        /* block 0's norm settles after the first interval; the others keep falling */
        double g0 = step <= 10 ? 4.0 : 2.0, g = 100.0 / (double)step;
        double first[2] = {g0 * g0, g * g}, second[2] = {g * g, g * g};
        coord_freezing_observe(all, "job-1", 0, first, 2, step);
        coord_freezing_observe(all, "job-1", 2, second, 2, step);
        int want = coord_freezing_close(all, "job-1", step, why, sizeof why);
        if (step < 20) {
            assert_int_equal(want, 0); /* the first interval has nothing to compare with */
        } else if (step == 30) {
            /* interval 2 -> 3: block 0 unchanged (r = 0), the others fall by ~37% */
            assert_int_equal(want, 1);
            assert_non_null(strstr(why, "freezing blocks 0-0"));
            assert_non_null(strstr(why, "over steps 21-30"));
        }
    }
    /* nothing is frozen until the move is decided; then only further */
    assert_int_equal(coord_freezing_frozen(all, "job-1"), 0);
    coord_freezing_set(all, "job-1", 1);
    assert_int_equal(coord_freezing_frozen(all, "job-1"), 1);
    coord_freezing_set(all, "job-1", 0);
    assert_int_equal(coord_freezing_frozen(all, "job-1"), 1);
    coord_freezing_set(all, "job-1", 4); /* never the whole model */
    assert_int_equal(coord_freezing_frozen(all, "job-1"), 1);
    /* a restarted coordinator's start keeps the larger prefix of the last plan */
    assert_int_equal(coord_freezing_start(&all, "job-1", 10, 50, 0.1, 4, 2), 2);
    /* bad norms are left out, not summed */
    double bad[2] = {NAN, -1};
    coord_freezing_observe(all, "job-1", 2, bad, 2, 31);
    assert_int_equal(coord_freezing_frozen(all, "job-2"), 0);
    coord_freezing_drop(&all, "job-1");
    assert_int_equal(coord_freezing_frozen(all, "job-1"), 0);
    coord_freezing_free(&all);
    assert_null(all);
}

/* A plan made with frozen blocks sees them without backward or optimizer time. */
static void test_profile_frozen(void **state)
{
    (void)state;
    const char *prof = "{\"blocks\": [{\"name\": \"a\", \"forward_s\": 1, \"backward_s\": 2, "
                       "\"optimizer_s\": 0.5, \"by_microbatch_size\": [{\"size\": 1, "
                       "\"forward_s\": 1, \"backward_s\": 2}]}, {\"name\": \"b\", "
                       "\"forward_s\": 1, \"backward_s\": 2}]}";
    char *out = coord_profile_frozen(prof, 1);
    assert_non_null(out);
    assert_string_equal(out, "{\"blocks\":[{\"name\":\"a\",\"forward_s\":1,\"backward_s\":0.0,"
                             "\"optimizer_s\":0.0,\"by_microbatch_size\":[{\"size\":1,"
                             "\"forward_s\":1,\"backward_s\":0.0}]},{\"name\":\"b\","
                             "\"forward_s\":1,\"backward_s\":2}]}");
    free(out);
    assert_null(coord_profile_frozen("not json", 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decide),
        cmocka_unit_test(test_intervals),
        cmocka_unit_test(test_profile_frozen),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
