/* coordinator/plan_replay: a job's plan played again with its stages' compute scaled and with
 * what training measured of its transfers and its copies' all-reduce, as a ratio against the
 * plan's own iteration time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <math.h>

#include "coordinator/plan_replay.h"

/* One stage on two copies (the compute_s of a micro-batch shared by them: each copy's takes
 * 0.02 s, two of the four each), planned at 0.05 s an iteration. */
static const char one_stage[] =
    "{\"schedule\": \"1f1b\", \"iteration_time_s\": 0.05, \"microbatches\": {\"count\": 4}, "
    "\"stages\": [{\"first_block\": 0, \"last_block\": 3, \"devices\": [0, 1], \"replicas\": 2, "
    "\"compute_s\": 0.01, \"allreduce_s\": 0.006}]}";

/* Two stages of one copy each. */
static const char two_stages[] =
    "{\"schedule\": \"gpipe\", \"iteration_time_s\": 0.1, \"microbatches\": {\"count\": 2}, "
    "\"stages\": [{\"first_block\": 0, \"last_block\": 1, \"devices\": [0], \"replicas\": 1, "
    "\"compute_s\": 0.01}, {\"first_block\": 2, \"last_block\": 3, \"devices\": [1], "
    "\"replicas\": 1, \"compute_s\": 0.01}]}";

static void test_replay_reduce(void **state)
{
    (void)state;
    double planned_r[1] = {0.006}, now_r[1] = {0.006};
    coord_replay_costs as_planned = {NULL, NULL, planned_r}, now = {NULL, NULL, now_r};
    /* as planned: the plan's own time */
    double same = coord_plan_replay_costs_s(one_stage, NULL, &as_planned, &now);
    assert_true(fabs(same - 0.05) < 1e-12);
    /* the all-reduce measured at 0.0167 s: the copies' compute (2 x 0.02 s) then it, once */
    now_r[0] = 0.0167;
    double slow = coord_plan_replay_costs_s(one_stage, NULL, &as_planned, &now);
    assert_true(fabs(slow - 0.05 * (0.04 + 0.0167) / (0.04 + 0.006)) < 1e-9);
    /* with the compute measured 1.5x too */
    double factor[1] = {1.5};
    double both = coord_plan_replay_costs_s(one_stage, factor, &as_planned, &now);
    assert_true(fabs(both - 0.05 * (0.06 + 0.0167) / (0.04 + 0.006)) < 1e-9);
    /* none given: compute alone, as before */
    assert_true(fabs(coord_plan_replay_scaled_s(one_stage, factor) - 0.05 * 1.5) < 1e-9);
    /* stages of one copy reduce nothing, whatever the arrays say */
    double pr2[2] = {0.5, 0.5}, nr2[2] = {2.0, 2.0};
    coord_replay_costs p2 = {NULL, NULL, pr2}, n2 = {NULL, NULL, nr2};
    assert_true(fabs(coord_plan_replay_costs_s(two_stages, NULL, &p2, &n2) - 0.1) < 1e-12);
    /* a plan that cannot be replayed: 0 */
    assert_true(coord_plan_replay_costs_s("{\"stages\": []}", NULL, &p2, &n2) == 0);
    assert_true(coord_plan_replay_costs_s("not json", NULL, NULL, NULL) == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_reduce),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
