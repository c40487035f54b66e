/* coordinator/planner/plan_partition_hetero against exhaustive on small uneven clusters across
 * two servers, the class where hetero used to pick a device order by its DP value alone: 5 to
 * 9 blocks, 3 device types (one fast, one at 0.5-0.7 and one at 0.2-0.3 of its speed), 2
 * servers of 1 or 2 devices, intra-server links of 1e10 or 5e10 B/s and NICs of 1e9 or 3e9 B/s,
 * 256 micro-batches of one sample. On every seeded instance: the plan hetero picks by
 * simulation is within 1% of exhaustive's simulated iteration (both through plan_run), and
 * hetero's DP alone (no simulation) reaches a bottleneck no worse than exhaustive's, whose
 * plans it covers on clusters this small. bench_planner --hetero runs thousands of seeds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan.h"
#include "coordinator/planner/plan_instance.h"

/* The instance of one seed (plan_instance.h): 5-9 blocks on two servers of 1-2 devices of 3
 * types. */
static void two_server_instance(uint64_t seed, plan_profile **prof, plan_cluster **cl)
{
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_instance_two_server(seed, prof, cl, &err), SC_OK);
}

static void test_hetero_within_one_percent_of_exhaustive(void **state)
{
    (void)state;
    double worst = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        plan_profile *p = NULL;
        plan_cluster *c = NULL;
        two_server_instance(seed, &p, &c);
        plan_request req = {.profile = p,
                            .cluster = c,
                            .batch = 256,
                            .microbatches = 256,
                            .schedule = PLAN_SCHED_1F1B};
        plan_result he, ex;
        sc_err err;
        assert_int_equal(plan_run(&req, PLAN_STRAT_HETERO, &he, &err), SC_OK);
        assert_int_equal(plan_run(&req, PLAN_STRAT_EXHAUSTIVE, &ex, &err), SC_OK);
        double ratio = he.iteration_time_s / ex.iteration_time_s;
        worst = ratio > worst ? ratio : worst;
        if (ratio > 1.01)
            print_error("seed %d: hetero %d stages, %.6g s; exhaustive %d stages, %.6g s\n",
                        (int)seed, he.part->n_stages, he.iteration_time_s, ex.part->n_stages,
                        ex.iteration_time_s);
        assert_true(ratio <= 1.01);
        plan_result_free(&he);
        plan_result_free(&ex);

        /* the DPs alone, on the objective exhaustive minimises */
        plan_cost *cost = NULL;
        plan_partition *a = NULL, *b = NULL;
        assert_int_equal(plan_cost_new(&cost, p, c, 1, 256, &err), SC_OK);
        assert_int_equal(plan_partition_new(&a, p->n_blocks, c->n_devices, &err), SC_OK);
        assert_int_equal(plan_partition_new(&b, p->n_blocks, c->n_devices, &err), SC_OK);
        plan_search_cfg cfg = {
            .cost = cost, .ref_cost = cost, .sched = PLAN_SCHED_1F1B, .n_micro = 256};
        assert_int_equal(plan_partition_hetero(&cfg, a, &err), SC_OK);
        assert_int_equal(plan_partition_exhaustive(&cfg, b, &err), SC_OK);
        assert_true(plan_partition_bottleneck(cost, a) <=
                    plan_partition_bottleneck(cost, b) * (1 + 1e-9));
        plan_partition_destroy(&a);
        plan_partition_destroy(&b);
        plan_cost_destroy(&cost);
        plan_cluster_destroy(&c);
        plan_profile_destroy(&p);
    }
    print_message("worst hetero / exhaustive iteration over 300 seeds: %.4f\n", worst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hetero_within_one_percent_of_exhaustive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
