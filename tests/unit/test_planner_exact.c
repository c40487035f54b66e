/* coordinator/planner/plan_partition_exact and hetero's use of it, on the uneven instances of
 * plan_instance_uneven (4-10 blocks on 2-3 servers of 2-8 devices in all, 3 device types,
 * links from 1 Gbit/s, memory limits on most types) with 4 to 32 micro-batches of one sample:
 *   - on the instances of at most 4 devices, under 1f1b, zb1 and gpipe in turn, the exact
 *     search's iteration equals a brute force written here (every ordered choice of alike
 *     device groups by id, every cut, memory checked, every plan simulated, nothing pruned),
 *     and hetero's plan through plan_run is that figure;
 *   - on 500 instances (250 in debug builds, where the simulator runs some ten times slower),
 *     hetero through plan_run is within 1% of exhaustive's simulated iteration, succeeds
 *     wherever exhaustive does, and says its search was exact on every instance its budget
 *     covers (all of these). */
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
#include "coordinator/planner/plan_partition_internal.h"
#include "coordinator/planner/plan_sim.h"

#ifdef NDEBUG
#define N_INSTANCES 500
#else
#define N_INSTANCES 250
#endif

static int micro_of(uint64_t seed)
{
    static const int m[4] = {4, 8, 16, 32};
    return m[seed % 4];
}

/* the schedule the brute-force comparison plans seed with: 1f1b, zb1 and gpipe in turn */
static plan_sched_kind sched_of(uint64_t seed)
{
    static const plan_sched_kind k[3] = {PLAN_SCHED_1F1B, PLAN_SCHED_ZB1, PLAN_SCHED_GPIPE};
    return k[(seed / 4) % 3];
}

typedef struct brute {
    const plan_search_cfg *cfg;
    int L, D, S_max;
    int used;
    int first[8], last[8], mask[8];
    plan_partition *p;
    plan_sim_stage st[8];
    double best;
    long plans;
} brute;

static int alike(const plan_cluster *cl, int mask)
{
    int d0 = -1;
    for (int d = 0; d < cl->n_devices; d++)
        if (mask & (1 << d)) {
            if (d0 < 0)
                d0 = d;
            else if (cl->devices[d].type != cl->devices[d0].type ||
                     cl->devices[d].server != cl->devices[d0].server)
                return 0;
        }
    return 1;
}

static void brute_rec(brute *b, int s, int start)
{
    const plan_cluster *cl = b->cfg->cost->cluster;
    if (start == b->L) {
        plan_partition_clear(b->p);
        for (int x = 0; x < s; x++) {
            int ids[8], n = 0;
            for (int d = 0; d < b->D; d++)
                if (b->mask[x] & (1 << d))
                    ids[n++] = d;
            plan_partition_push(b->p, b->first[x], b->last[x], ids, n);
        }
        if (plan_partition_check_memory(b->cfg, b->p, NULL) != SC_OK)
            return;
        double it;
        sc_err err;
        assert_int_equal(plan_search_simulate(b->cfg, b->p, b->st, &it, &err), SC_OK);
        b->plans++;
        b->best = it < b->best ? it : b->best;
        return;
    }
    if (s == b->S_max || s >= 8) /* at most 8 stages: the arrays' room */
        return;
    for (int mask = 1; mask < (1 << b->D); mask++) {
        int n = __builtin_popcount((unsigned)mask);
        if ((mask & b->used) || !alike(cl, mask) ||
            !plan_replicas_runnable(b->cfg->sched, b->cfg->n_micro, n))
            continue;
        for (int end = start; end < b->L; end++) {
            b->first[s] = start;
            b->last[s] = end;
            b->mask[s] = mask;
            b->used |= mask;
            brute_rec(b, s + 1, end + 1);
            b->used &= ~mask;
        }
    }
}

static void instance(uint64_t seed, plan_profile **p, plan_cluster **c)
{
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_instance_uneven(seed, p, c, &err), SC_OK);
}

static void test_exact_equals_brute_force(void **state)
{
    (void)state;
    int checked = 0;
    long plans = 0;
    for (uint64_t seed = 1; checked < 60; seed++) {
        plan_profile *p = NULL;
        plan_cluster *c = NULL;
        instance(seed, &p, &c);
        if (c->n_devices > 4) {
            plan_cluster_destroy(&c);
            plan_profile_destroy(&p);
            continue;
        }
        int m = micro_of(seed);
        sc_err err;
        plan_cost *cost = NULL;
        assert_int_equal(plan_cost_new(&cost, p, c, 1, m, &err), SC_OK);
        plan_search_cfg cfg = {.cost = cost,
                               .ref_cost = cost,
                               .sched = sched_of(seed),
                               .n_micro = m,
                               .select_by_sim = 1};
        brute b = {.cfg = &cfg, .L = p->n_blocks, .D = c->n_devices, .best = HUGE_VAL};
        b.S_max = b.D < b.L ? b.D : b.L;
        assert_int_equal(plan_partition_new(&b.p, b.L, b.D, &err), SC_OK);
        brute_rec(&b, 0, 0);
        plans += b.plans;

        plan_partition *out = NULL;
        assert_int_equal(plan_partition_new(&out, b.L, b.D, &err), SC_OK);
        double it = 0;
        int done = 0, cut = 0;
        assert_int_equal(plan_partition_exact(&cfg, 0, HUGE_VAL, out, &it, &done, &cut, &err),
                         SC_OK);
        assert_int_equal(done, 1);
        if (!isfinite(b.best)) {
            assert_false(isfinite(it));
        } else {
            if (fabs(it - b.best) > 1e-9 * b.best)
                print_error("seed %d: exact %.9g s, brute force %.9g s\n", (int)seed, it, b.best);
            assert_true(fabs(it - b.best) <= 1e-9 * b.best);
            plan_request req = {.profile = p,
                                .cluster = c,
                                .batch = m,
                                .microbatches = m,
                                .schedule = sched_of(seed)};
            plan_result he;
            assert_int_equal(plan_run(&req, PLAN_STRAT_HETERO, &he, &err), SC_OK);
            assert_int_equal(he.part->search, PLAN_SEARCH_EXACT);
            assert_true(fabs(he.iteration_time_s - b.best) <= 1e-9 * b.best);
            plan_result_free(&he);
        }
        checked++;
        plan_partition_destroy(&out);
        plan_partition_destroy(&b.p);
        plan_cost_destroy(&cost);
        plan_cluster_destroy(&c);
        plan_profile_destroy(&p);
    }
    print_message("exact = brute force on %d instances (%ld plans simulated)\n", checked, plans);
}

static void test_hetero_within_one_percent_of_exhaustive(void **state)
{
    (void)state;
    double worst = 0;
    int compared = 0, neither = 0, exact = 0;
    for (uint64_t seed = 1; seed <= N_INSTANCES; seed++) {
        plan_profile *p = NULL;
        plan_cluster *c = NULL;
        instance(seed, &p, &c);
        int m = micro_of(seed);
        plan_request req = {
            .profile = p, .cluster = c, .batch = m, .microbatches = m, .schedule = PLAN_SCHED_1F1B};
        plan_result he, ex;
        sc_err e1, e2;
        sc_status rh = plan_run(&req, PLAN_STRAT_HETERO, &he, &e1);
        sc_status rx = plan_run(&req, PLAN_STRAT_EXHAUSTIVE, &ex, &e2);
        if (rx == SC_OK && rh != SC_OK)
            print_error("seed %d: exhaustive fits, hetero: %s\n", (int)seed, e1.msg);
        assert_true(rx != SC_OK || rh == SC_OK);
        if (rh == SC_OK) {
            exact += he.part->search == PLAN_SEARCH_EXACT;
            assert_int_equal(he.part->search, PLAN_SEARCH_EXACT);
        }
        if (rx == SC_OK) {
            double ratio = he.iteration_time_s / ex.iteration_time_s;
            worst = ratio > worst ? ratio : worst;
            if (ratio > 1.01)
                print_error("seed %d: hetero %.6g s, exhaustive %.6g s\n", (int)seed,
                            he.iteration_time_s, ex.iteration_time_s);
            assert_true(ratio <= 1.01);
            compared++;
        } else if (rh != SC_OK) {
            neither++;
        }
        plan_result_free(&he);
        plan_result_free(&ex);
        plan_cluster_destroy(&c);
        plan_profile_destroy(&p);
    }
    print_message("hetero / exhaustive over %d instances: worst %.4f (%d fit neither; hetero "
                  "exact on %d)\n",
                  compared, worst, neither, exact);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_equals_brute_force),
        cmocka_unit_test(test_hetero_within_one_percent_of_exhaustive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
