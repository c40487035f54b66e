/* The stage limit (plan_request.max_stages: a job's "stages", `stagecraft plan --stages`) across
 * coordinator/planner's strategies. On clusters of 4, 6 and 8 devices of three speeds over two
 * or three servers, a limit of 1, 2 and 3 gives every strategy's plan at most that many stages,
 * under each synchronous schedule for hetero; pipedream, whose DP picks the stage count itself,
 * either stays within the limit or refuses, naming the "stages" key. hetero under a limit
 * against exhaustive under the same limit on the small two-server instances of
 * test_planner_hetero.c (plan_instance_two_server, 300 seeds): its simulated iteration within
 * 1% and its DP's bottleneck no worse. A capped hetero on one server of equal devices uses
 * copies, so more devices than stages. */
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

/* 12 blocks of uneven cost, activations and weights (the same on every run). */
static plan_profile *chain_profile(void)
{
    sc_err err;
    sc_err_clear(&err);
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_new(&p, 12, &err), SC_OK);
    for (int l = 0; l < 12; l++) {
        plan_block *b = &p->blocks[l];
        b->forward_s = 1e-3 * (1 + (l * 7) % 5);
        b->backward_s = 2 * b->forward_s;
        b->activation_bytes = 1e5 * (1 + (l * 3) % 4);
        b->stash_bytes = b->activation_bytes;
        b->parameter_bytes = 1e6 * (1 + (l * 5) % 3);
    }
    return p;
}

/* n devices (4, 6 or 8) of three types (speeds 1, 0.6, 0.25) over servers of at most 4
 * (2 + 2, 4 + 2, 4 + 4), links of 1e10 B/s inside a server and NICs of 1e9. */
static plan_cluster *mixed_cluster(int n)
{
    sc_err err;
    sc_err_clear(&err);
    plan_cluster *c = NULL;
    int t[3], types[4];
    assert_int_equal(plan_cluster_new_empty(&c, &err), SC_OK);
    assert_int_equal(plan_cluster_add_type(c, "fast", 1.0, 0, &t[0], &err), SC_OK);
    assert_int_equal(plan_cluster_add_type(c, "mid", 0.6, 0, &t[1], &err), SC_OK);
    assert_int_equal(plan_cluster_add_type(c, "slow", 0.25, 0, &t[2], &err), SC_OK);
    int first = n == 4 ? 2 : 4, d = 0;
    for (int s = 0; d < n; s++) {
        int nd = s == 0 ? first : n - d;
        for (int i = 0; i < nd; i++)
            types[i] = t[(d + i) * 2 % 3];
        assert_int_equal(plan_cluster_add_server(c, s ? "s1" : "s0", 1e10, 1e9, types, nd, &err),
                         SC_OK);
        d += nd;
    }
    assert_int_equal(c->n_devices, n);
    return c;
}

static void test_every_strategy_within_the_limit(void **state)
{
    (void)state;
    plan_profile *p = chain_profile();
    for (int n = 4; n <= 8; n += 2) {
        plan_cluster *c = mixed_cluster(n);
        for (int limit = 1; limit <= 3; limit++)
            for (int s = 0; s < PLAN_STRAT_COUNT; s++) {
                plan_request req = {.profile = p,
                                    .cluster = c,
                                    .batch = 32,
                                    .microbatches = 8,
                                    .max_stages = limit,
                                    .schedule = PLAN_SCHED_1F1B};
                plan_result r;
                sc_err err;
                sc_err_clear(&err);
                sc_status rc = plan_run(&req, (plan_strategy)s, &r, &err);
                if (s == PLAN_STRAT_PIPEDREAM && rc != SC_OK) {
                    /* refused: names the key and the limit */
                    assert_int_equal(rc, SC_ERR_INVALID);
                    assert_false(r.ok);
                    assert_non_null(strstr(r.error, "\"stages\""));
                    char lim[48];
                    snprintf(lim, sizeof lim, "stage limit of %d", limit);
                    assert_non_null(strstr(r.error, lim));
                    plan_result_free(&r);
                    continue;
                }
                if (rc != SC_OK)
                    print_error("%s, %d devices, limit %d: %s\n",
                                plan_strategy_name((plan_strategy)s), n, limit, err.msg);
                assert_int_equal(rc, SC_OK);
                assert_true(r.ok);
                assert_true(r.part->n_stages >= 1);
                assert_true(r.part->n_stages <= limit);
                plan_result_free(&r);
            }
        /* hetero under every synchronous schedule and auto micro-batches */
        const plan_sched_kind scheds[] = {PLAN_SCHED_GPIPE, PLAN_SCHED_1F1B, PLAN_SCHED_SLICED,
                                          PLAN_SCHED_ZB1};
        for (int limit = 1; limit <= 3; limit++)
            for (int k = 0; k < 4; k++) {
                plan_request req = {.profile = p,
                                    .cluster = c,
                                    .batch = 32,
                                    .max_stages = limit,
                                    .schedule = scheds[k]};
                plan_result r;
                sc_err err;
                sc_err_clear(&err);
                assert_int_equal(plan_run(&req, PLAN_STRAT_HETERO, &r, &err), SC_OK);
                assert_true(r.part->n_stages <= limit);
                plan_result_free(&r);
            }
        plan_cluster_destroy(&c);
    }
    plan_profile_destroy(&p);
}

/* pipedream on one server of 4 equal devices joined by 1e9 B/s, where its DP pipelines the
 * chain (copies would all-reduce megabytes of weights over the slow link): with a limit of 1
 * it refuses, naming the strategy, the key and those that honour it; without one it plans as
 * before. */
static void test_pipedream_refusal_names_the_key(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    plan_profile *p = chain_profile();
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_new_uniform(&c, 4, 1e9, 0, &err), SC_OK);
    plan_request req = {
        .profile = p, .cluster = c, .batch = 32, .microbatches = 8, .schedule = PLAN_SCHED_1F1B};
    plan_result r;
    assert_int_equal(plan_run(&req, PLAN_STRAT_PIPEDREAM, &r, &err), SC_OK);
    int unlimited = r.part->n_stages;
    plan_result_free(&r);
    req.max_stages = 1;
    assert_true(unlimited > 1);
    assert_int_equal(plan_run(&req, PLAN_STRAT_PIPEDREAM, &r, &err), SC_ERR_INVALID);
    assert_false(r.ok);
    assert_non_null(strstr(r.error, "pipedream"));
    assert_non_null(strstr(r.error, "\"stages\""));
    assert_non_null(strstr(r.error, "hetero"));
    plan_result_free(&r);
    /* a limit its plan keeps to changes nothing */
    req.max_stages = unlimited;
    assert_int_equal(plan_run(&req, PLAN_STRAT_PIPEDREAM, &r, &err), SC_OK);
    assert_int_equal(r.part->n_stages, unlimited);
    plan_result_free(&r);
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* hetero capped at 2 stages on 8 equal devices keeps them busy with copies, and is no slower
 * than minmax under the same cap (2 devices, one a stage). */
static void test_capped_hetero_replicates(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    plan_profile *p = chain_profile();
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_new_uniform(&c, 8, 1e11, 0, &err), SC_OK);
    plan_request req = {.profile = p,
                        .cluster = c,
                        .batch = 64,
                        .microbatches = 16,
                        .max_stages = 2,
                        .schedule = PLAN_SCHED_1F1B};
    plan_result he, mm;
    assert_int_equal(plan_run(&req, PLAN_STRAT_HETERO, &he, &err), SC_OK);
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &mm, &err), SC_OK);
    assert_true(he.part->n_stages <= 2);
    assert_true(he.part->n_devs > he.part->n_stages);
    assert_true(he.iteration_time_s <= mm.iteration_time_s * (1 + 1e-9));
    plan_result_free(&he);
    plan_result_free(&mm);
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* A limit with memory a hard limit: four blocks of 100-byte stashes on devices of 1000 bytes
 * (test_planner_plan_memory.c's fill-drain instance); capped at 2 stages hetero fits under 1F1B. */
static void test_capped_hetero_fits_memory(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_new(&p, 4, &err), SC_OK);
    for (int l = 0; l < 4; l++) {
        p->blocks[l].forward_s = 1;
        p->blocks[l].backward_s = 2;
        p->blocks[l].activation_bytes = 10;
        p->blocks[l].stash_bytes = 100;
    }
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_new_uniform(&c, 4, 1e9, 1000, &err), SC_OK);
    plan_request req = {.profile = p,
                        .cluster = c,
                        .batch = 8,
                        .microbatches = 8,
                        .max_stages = 2,
                        .schedule = PLAN_SCHED_1F1B};
    plan_result r;
    assert_int_equal(plan_run(&req, PLAN_STRAT_HETERO, &r, &err), SC_OK);
    assert_true(r.ok && r.fits_memory);
    assert_true(r.part->n_stages <= 2);
    for (int s = 0; s < r.part->n_stages; s++)
        assert_true(r.peak_memory_bytes[s] <= 1000);
    plan_result_free(&r);
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

static void test_capped_hetero_within_one_percent_of_exhaustive(void **state)
{
    (void)state;
    double worst = 0;
    int runs = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        plan_profile *p = NULL;
        plan_cluster *c = NULL;
        sc_err err;
        sc_err_clear(&err);
        assert_int_equal(plan_instance_two_server(seed, &p, &c, &err), SC_OK);
        plan_cost *cost = NULL;
        assert_int_equal(plan_cost_new(&cost, p, c, 1, 256, &err), SC_OK);
        for (int limit = 1; limit <= 3 && limit <= c->n_devices; limit++) {
            plan_request req = {.profile = p,
                                .cluster = c,
                                .batch = 256,
                                .microbatches = 256,
                                .max_stages = limit,
                                .schedule = PLAN_SCHED_1F1B};
            plan_result he, ex;
            assert_int_equal(plan_run(&req, PLAN_STRAT_HETERO, &he, &err), SC_OK);
            assert_int_equal(plan_run(&req, PLAN_STRAT_EXHAUSTIVE, &ex, &err), SC_OK);
            assert_true(he.part->n_stages <= limit && ex.part->n_stages <= limit);
            double ratio = he.iteration_time_s / ex.iteration_time_s;
            worst = ratio > worst ? ratio : worst;
            runs++;
            if (ratio > 1.01)
                print_error("seed %d, limit %d: hetero %d stages, %.6g s; exhaustive %d stages, "
                            "%.6g s\n",
                            (int)seed, limit, he.part->n_stages, he.iteration_time_s,
                            ex.part->n_stages, ex.iteration_time_s);
            assert_true(ratio <= 1.01);
            plan_result_free(&he);
            plan_result_free(&ex);

            /* the DPs alone, on the objective exhaustive minimises, under the same limit */
            plan_partition *a = NULL, *b = NULL;
            assert_int_equal(plan_partition_new(&a, p->n_blocks, c->n_devices, &err), SC_OK);
            assert_int_equal(plan_partition_new(&b, p->n_blocks, c->n_devices, &err), SC_OK);
            plan_search_cfg cfg = {.cost = cost,
                                   .ref_cost = cost,
                                   .sched = PLAN_SCHED_1F1B,
                                   .n_micro = 256,
                                   .max_stages = limit};
            assert_int_equal(plan_partition_hetero(&cfg, a, &err), SC_OK);
            assert_int_equal(plan_partition_exhaustive(&cfg, b, &err), SC_OK);
            assert_true(a->n_stages <= limit);
            assert_true(plan_partition_bottleneck(cost, a) <=
                        plan_partition_bottleneck(cost, b) * (1 + 1e-9));
            plan_partition_destroy(&a);
            plan_partition_destroy(&b);
        }
        plan_cost_destroy(&cost);
        plan_cluster_destroy(&c);
        plan_profile_destroy(&p);
    }
    print_message("worst capped hetero / exhaustive iteration over %d runs: %.4f\n", runs, worst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_strategy_within_the_limit),
        cmocka_unit_test(test_pipedream_refusal_names_the_key),
        cmocka_unit_test(test_capped_hetero_replicates),
        cmocka_unit_test(test_capped_hetero_fits_memory),
        cmocka_unit_test(test_capped_hetero_within_one_percent_of_exhaustive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
