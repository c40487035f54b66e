/* coordinator/jobs_stall: the bound past which a running job without a new step is re-planned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include "coordinator/jobs_internal.h"

static void test_bound(void **state)
{
    (void)state;
    /* fast iterations: the floor */
    assert_true(coord_jobs_stall_bound_s(0.001, 0.002, true) == COORD_STALL_MIN_S);
    /* slow ones: 20 of the longer of predicted and measured */
    assert_true(coord_jobs_stall_bound_s(3.0, 2.0, true) == COORD_STALL_ITERATIONS * 3.0);
    assert_true(coord_jobs_stall_bound_s(2.0, 4.0, true) == COORD_STALL_ITERATIONS * 4.0);
    /* before the first step: more, for connecting and taking state over */
    assert_true(coord_jobs_stall_bound_s(0.001, 0, false) ==
                COORD_STALL_MIN_S + COORD_STALL_START_S);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_bound)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
