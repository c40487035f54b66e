/* coordinator/planner/plan_partition: every strategy against brute force or hand-computed
 * optima: minmax == brute force on random chains (and, with memory limits that bind, on
 * unequal devices under every schedule), exhaustive == minmax on one server, hetero
 * within 1% of exhaustive on random heterogeneous clusters, PipeDream's objective on a small
 * chain and on hand-made branching graphs (antichain states), memory as a hard limit, and the
 * lower bound below every plan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_antichain.h"
#include "coordinator/planner/plan_partition.h"
#include "coordinator/planner/plan_sim.h"

static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct inst {
    plan_profile *prof;
    plan_cluster *cl;
    plan_cost *cost;
    plan_partition *part;
    plan_search_cfg cfg;
} inst;

static plan_profile *random_chain(int L)
{
    plan_profile *p = NULL;
    sc_err err;
    assert_int_equal(plan_profile_new(&p, L, &err), SC_OK);
    for (int l = 0; l < L; l++) {
        p->blocks[l].forward_s = 0.1 + urand();
        p->blocks[l].backward_s = 2 * p->blocks[l].forward_s * (0.5 + urand());
        p->blocks[l].activation_bytes = urand() < 0.3 ? 1e9 * urand() : 1e6 * urand();
        p->blocks[l].parameter_bytes = 1e6 * urand();
        p->blocks[l].stash_bytes = p->blocks[l].activation_bytes;
    }
    return p;
}

static void inst_init(inst *x, plan_profile *p, plan_cluster *c)
{
    sc_err err;
    memset(x, 0, sizeof *x);
    x->prof = p;
    x->cl = c;
    assert_int_equal(plan_cost_new(&x->cost, p, c, 1, 8, &err), SC_OK);
    assert_int_equal(plan_partition_new(&x->part, p->n_blocks, c->n_devices, &err), SC_OK);
    x->cfg.cost = x->cost;
    x->cfg.ref_cost = x->cost;
    x->cfg.sched = PLAN_SCHED_1F1B;
    x->cfg.n_micro = 8;
}

static void inst_free(inst *x)
{
    plan_partition_destroy(&x->part);
    plan_cost_destroy(&x->cost);
    plan_cluster_destroy(&x->cl);
    plan_profile_destroy(&x->prof);
}

/* Stages cover the chain in order, each device used once. */
static void assert_valid(const inst *x, const plan_partition *p)
{
    assert_true(p->n_stages >= 1);
    assert_int_equal(p->first[0], 0);
    assert_int_equal(p->last[p->n_stages - 1], x->prof->n_blocks - 1);
    char used[256] = {0};
    for (int s = 0; s < p->n_stages; s++) {
        assert_true(p->first[s] <= p->last[s]);
        if (s > 0)
            assert_int_equal(p->first[s], p->last[s - 1] + 1);
        assert_true(p->n_dev[s] >= 1);
        for (int i = 0; i < p->n_dev[s]; i++) {
            int d = p->devs[p->dev_start[s] + i];
            assert_true(d >= 0 && d < x->cl->n_devices);
            if (d < 0 || d >= (int)sizeof used)
                fail_msg("device id %d out of range", d);
            assert_false(used[d]);
            used[d] = 1;
        }
    }
}

/* Brute force over every composition into S <= D stages on devices 0..S-1 in order. */
static double brute_in_order(const inst *x)
{
    int L = x->prof->n_blocks, D = x->cl->n_devices;
    double best = HUGE_VAL;
    plan_partition *p = NULL;
    sc_err err;
    assert_int_equal(plan_partition_new(&p, L, D, &err), SC_OK);
    for (unsigned mask = 0; mask < (1u << (L - 1)); mask++) {
        int cuts = __builtin_popcount(mask);
        if (cuts + 1 > D)
            continue;
        plan_partition_clear(p);
        int first = 0, s = 0;
        for (int l = 0; l < L; l++)
            if (l == L - 1 || (mask >> l & 1)) {
                plan_partition_push(p, first, l, &s, 1);
                s++;
                first = l + 1;
            }
        double v = plan_partition_bottleneck(x->cost, p);
        best = v < best ? v : best;
    }
    plan_partition_destroy(&p);
    return best;
}

static void test_minmax_matches_brute_force(void **state)
{
    (void)state;
    sc_err err;
    for (int trial = 0; trial < 300; trial++) {
        int L = 1 + (int)(urand() * 10), D = 1 + (int)(urand() * 5);
        plan_cluster *c = NULL;
        if (trial % 2 == 0) {
            assert_int_equal(plan_cluster_new_uniform(&c, D, 1e9 + 1e10 * urand(), 0, &err), SC_OK);
        } else {
            /* unequal devices in a fixed order, two servers */
            int t0, t1;
            assert_int_equal(plan_cluster_new_empty(&c, &err), SC_OK);
            assert_int_equal(plan_cluster_add_type(c, "a", 0.3 + 2 * urand(), 0, &t0, &err), SC_OK);
            assert_int_equal(plan_cluster_add_type(c, "b", 0.3 + 2 * urand(), 0, &t1, &err), SC_OK);
            int types[8];
            for (int i = 0; i < D; i++)
                types[i] = urand() < 0.5 ? t0 : t1;
            int n0 = D / 2;
            if (n0 > 0)
                assert_int_equal(plan_cluster_add_server(c, "s0", 1e10, 1e9, types, n0, &err),
                                 SC_OK);
            assert_int_equal(plan_cluster_add_server(c, "s1", 5e9, 2e9, types + n0, D - n0, &err),
                             SC_OK);
        }
        inst x;
        inst_init(&x, random_chain(L), c);
        assert_int_equal(plan_partition_minmax(&x.cfg, x.part, &err), SC_OK);
        assert_valid(&x, x.part);
        double want = brute_in_order(&x);
        assert_float_equal(x.part->objective_s, want, 1e-12 * want);
        assert_float_equal(plan_partition_bottleneck(x.cost, x.part), want, 1e-12 * want);
        /* nothing beats the lower bound */
        assert_true(plan_lower_bound(x.cost) <= want * (1 + 1e-12));
        inst_free(&x);
    }
}

/* The least bottleneck over every composition into d <= max_d stages on devices 0..d-1 in
 * order that fits memory with its own stage count (plan_partition_check_memory); *fewest: the
 * fewest stages that reach it. HUGE_VAL when none fits. */
static double brute_in_order_fit(const inst *x, int max_d, int *fewest)
{
    int L = x->prof->n_blocks;
    double best = HUGE_VAL;
    plan_partition *p = NULL;
    sc_err err;
    assert_int_equal(plan_partition_new(&p, L, x->cl->n_devices, &err), SC_OK);
    *fewest = 0;
    for (unsigned mask = 0; mask < (1u << (L - 1)); mask++) {
        int d = __builtin_popcount(mask) + 1;
        if (d > max_d)
            continue;
        plan_partition_clear(p);
        int first = 0, s = 0;
        for (int l = 0; l < L; l++)
            if (l == L - 1 || (mask >> l & 1)) {
                plan_partition_push(p, first, l, &s, 1);
                s++;
                first = l + 1;
            }
        if (plan_partition_check_memory(&x->cfg, p, &err) != SC_OK)
            continue;
        double v = plan_partition_bottleneck(x->cost, p);
        if (v < best || (v == best && d < *fewest)) {
            best = v;
            *fewest = d;
        }
    }
    plan_partition_destroy(&p);
    return best;
}

/* minmax on unequal devices whose memory binds: every stage count, schedule and stage cap,
 * and block times drawn from few values so that plans tie; the fewest devices win a tie. */
static void test_minmax_memory_matches_brute_force(void **state)
{
    (void)state;
    sc_err err;
    const plan_sched_kind kinds[] = {PLAN_SCHED_GPIPE, PLAN_SCHED_1F1B, PLAN_SCHED_PIPEDREAM,
                                     PLAN_SCHED_SLICED};
    int solved = 0, bound_by_memory = 0;
    for (int trial = 0; trial < 600; trial++) {
        int L = 1 + (int)(urand() * 10), D = 1 + (int)(urand() * 6), coarse = trial % 3 == 0;
        plan_profile *p = random_chain(L);
        double need = 0;
        for (int l = 0; l < L; l++) {
            if (coarse) {
                p->blocks[l].forward_s = 1 + (int)(urand() * 3);
                p->blocks[l].backward_s = 2 * p->blocks[l].forward_s;
                p->blocks[l].activation_bytes = 1e6 * (1 + (int)(urand() * 2));
                p->blocks[l].stash_bytes = p->blocks[l].activation_bytes;
            }
            need += PLAN_PARAM_COPIES * p->blocks[l].parameter_bytes + p->blocks[l].stash_bytes;
        }
        plan_cluster *c = NULL;
        assert_int_equal(plan_cluster_new_empty(&c, &err), SC_OK);
        int types[8], n_types = 1 + (int)(urand() * 3);
        const char *names[] = {"a", "b", "c"};
        for (int t = 0; t < n_types; t++) {
            /* one to nine fair shares of the model with one micro-batch stashed */
            double mem = urand() < 0.1 ? 0 : need / D * (1 + 8 * urand());
            assert_int_equal(
                plan_cluster_add_type(c, names[t], coarse ? 1 : 0.3 + 2 * urand(), mem, NULL, &err),
                SC_OK);
        }
        for (int i = 0; i < D; i++)
            types[i] = (int)(urand() * n_types);
        int n0 = (int)(urand() * D);
        if (n0 > 0)
            assert_int_equal(plan_cluster_add_server(c, "s0", 1e10, 1e9, types, n0, &err), SC_OK);
        assert_int_equal(plan_cluster_add_server(c, "s1", 5e9, 2e9, types + n0, D - n0, &err),
                         SC_OK);
        inst x;
        inst_init(&x, p, c);
        x.cfg.sched = kinds[trial % 4];
        x.cfg.n_micro = 1 + (int)(urand() * 8);
        x.cfg.max_stages = urand() < 0.25 ? 1 + (int)(urand() * D) : 0;
        int max_d = x.cfg.max_stages > 0 ? x.cfg.max_stages : D, fewest;
        double want = brute_in_order_fit(&x, max_d, &fewest);
        /* the same instance without memory limits, to count the trials where memory binds */
        double free_best = brute_in_order(&x);
        sc_err_clear(&err);
        sc_status rc = plan_partition_minmax(&x.cfg, x.part, &err);
        if (!isfinite(want)) {
            assert_int_equal(rc, SC_ERR_TOO_LARGE);
            assert_true(x.part->no_fit);
        } else {
            assert_int_equal(rc, SC_OK);
            assert_valid(&x, x.part);
            assert_int_equal(plan_partition_check_memory(&x.cfg, x.part, &err), SC_OK);
            assert_true(x.part->objective_s == want);
            assert_true(plan_partition_bottleneck(x.cost, x.part) == want);
            assert_int_equal(x.part->n_stages, fewest);
            solved++;
            bound_by_memory += max_d == D && want > free_best;
        }
        inst_free(&x);
    }
    /* the instances exercise what they are for */
    assert_true(solved >= 350);
    assert_true(bound_by_memory >= 40);
}

static void test_exhaustive_and_baselines(void **state)
{
    (void)state;
    sc_err err;
    for (int trial = 0; trial < 60; trial++) {
        int L = 2 + (int)(urand() * 7), D = 1 + (int)(urand() * 4);
        plan_cluster *c = NULL;
        assert_int_equal(plan_cluster_new_uniform(&c, D, 1e9 + 1e10 * urand(), 0, &err), SC_OK);
        inst x;
        inst_init(&x, random_chain(L), c);
        assert_int_equal(plan_partition_minmax(&x.cfg, x.part, &err), SC_OK);
        double mm = x.part->objective_s;
        /* one server, one device type: the order does not matter, so exhaustive == minmax */
        assert_int_equal(plan_partition_exhaustive(&x.cfg, x.part, &err), SC_OK);
        assert_valid(&x, x.part);
        assert_float_equal(x.part->objective_s, mm, 1e-12 * mm);
        assert_int_equal(plan_partition_uniform(&x.cfg, x.part, &err), SC_OK);
        assert_valid(&x, x.part);
        assert_true(x.part->objective_s >= mm * (1 - 1e-12));
        assert_int_equal(plan_partition_blockpartition(&x.cfg, x.part, &err), SC_OK);
        assert_valid(&x, x.part);
        assert_true(x.part->objective_s >= mm * (1 - 1e-12));
        assert_int_equal(plan_partition_autopipe(&x.cfg, x.part, &err), SC_OK);
        assert_valid(&x, x.part);
        assert_true(isfinite(x.part->objective_s));
        assert_int_equal(plan_partition_hetero(&x.cfg, x.part, &err), SC_OK);
        assert_valid(&x, x.part);
        assert_true(x.part->objective_s <= mm * (1 + 1e-9));
        inst_free(&x);
    }
}

/* Identical blocks whose costs differ in the last bits (prefix sums of 0.001 + 0.002): the
 * normalisation must not stretch rounding into the whole range; they split evenly. */
static void test_blockpartition_identical_blocks(void **state)
{
    (void)state;
    sc_err err;
    const int sizes[] = {4, 12, 1000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int L = sizes[k];
        plan_profile *p = NULL;
        assert_int_equal(plan_profile_new(&p, L, &err), SC_OK);
        for (int l = 0; l < L; l++) {
            p->blocks[l].forward_s = 0.001;
            p->blocks[l].backward_s = 0.002;
            p->blocks[l].activation_bytes = 1e3;
            p->blocks[l].stash_bytes = 1e3;
        }
        plan_cluster *c = NULL;
        assert_int_equal(plan_cluster_new_uniform(&c, 2, 1e9, 0, &err), SC_OK);
        inst x;
        inst_init(&x, p, c);
        assert_int_equal(plan_partition_blockpartition(&x.cfg, x.part, &err), SC_OK);
        assert_valid(&x, x.part);
        assert_int_equal(x.part->n_stages, 2);
        assert_int_equal(x.part->last[0], L / 2 - 1);
        inst_free(&x);
    }
}

static void test_hetero_near_exhaustive(void **state)
{
    (void)state;
    sc_err err;
    for (int trial = 0; trial < 120; trial++) {
        int L = 2 + (int)(urand() * 7);
        plan_cluster *c = NULL;
        int t[3];
        assert_int_equal(plan_cluster_new_empty(&c, &err), SC_OK);
        for (int i = 0; i < 3; i++) {
            char name[16];
            snprintf(name, sizeof name, "t%d", i);
            assert_int_equal(plan_cluster_add_type(c, name, 0.2 + 2 * urand(), 0, &t[i], &err),
                             SC_OK);
        }
        int ns = 1 + (int)(urand() * 2);
        for (int s = 0; s < ns; s++) {
            int nd = 1 + (int)(urand() * 2.5), types[4];
            for (int i = 0; i < nd; i++)
                types[i] = t[(int)(urand() * 3)];
            char name[16];
            snprintf(name, sizeof name, "s%d", s);
            assert_int_equal(plan_cluster_add_server(c, name, 1e9 + 2e10 * urand(),
                                                     1e8 + 2e9 * urand(), types, nd, &err),
                             SC_OK);
        }
        inst x;
        inst_init(&x, random_chain(L), c);
        assert_int_equal(plan_partition_exhaustive(&x.cfg, x.part, &err), SC_OK);
        double ex = x.part->objective_s;
        assert_float_equal(plan_partition_bottleneck(x.cost, x.part), ex, 1e-12 * ex);
        assert_int_equal(plan_partition_hetero(&x.cfg, x.part, &err), SC_OK);
        assert_valid(&x, x.part);
        double he = plan_partition_bottleneck(x.cost, x.part);
        if (he > 1.01 * ex)
            print_error("trial %d: hetero %g exhaustive %g\n", trial, he, ex);
        assert_true(he <= 1.01 * ex);
        inst_free(&x);
    }
}

static void test_memory_is_a_hard_limit(void **state)
{
    (void)state;
    sc_err err;
    for (int D = 3; D <= 5; D++) {
        plan_profile *p = NULL;
        assert_int_equal(plan_profile_new(&p, 4, &err), SC_OK);
        for (int l = 0; l < 4; l++) {
            p->blocks[l].forward_s = l == 0 ? 10 : 0.01; /* compute alone wants 2 stages */
            p->blocks[l].parameter_bytes = 100;
        }
        plan_cluster *c = NULL;
        /* 4 copies x 100 bytes fit, two blocks do not: one block per device */
        assert_int_equal(plan_cluster_new_uniform(&c, D, 1e9, 450, &err), SC_OK);
        inst x;
        inst_init(&x, p, c);
        sc_status want = D >= 4 ? SC_OK : SC_ERR_TOO_LARGE;
        sc_err_clear(&err);
        assert_int_equal(plan_partition_minmax(&x.cfg, x.part, &err), want);
        if (want == SC_OK) {
            assert_int_equal(x.part->n_stages, 4);
            assert_int_equal(plan_partition_check_memory(&x.cfg, x.part, &err), SC_OK);
        } else {
            assert_non_null(strstr(err.msg, "memory"));
        }
        sc_err_clear(&err);
        assert_int_equal(plan_partition_hetero(&x.cfg, x.part, &err), want);
        if (want == SC_OK) {
            assert_int_equal(x.part->n_stages, 4);
            assert_int_equal(plan_partition_check_memory(&x.cfg, x.part, &err), SC_OK);
        }
        sc_err_clear(&err);
        assert_int_equal(plan_partition_exhaustive(&x.cfg, x.part, &err), want);
        /* uniform ignores memory: the check reports it */
        assert_int_equal(plan_partition_uniform(&x.cfg, x.part, &err), SC_OK);
        inst_free(&x);
    }
}

static void test_pipedream_objective(void **state)
{
    (void)state;
    sc_err err;
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_new(&p, 3, &err), SC_OK);
    p->blocks[0].forward_s = 3;
    p->blocks[1].forward_s = 1;
    p->blocks[2].forward_s = 1;
    p->blocks[0].parameter_bytes = 1e9;
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_new_uniform(&c, 3, 1e10, 0, &err), SC_OK);
    inst x;
    inst_init(&x, p, c);
    assert_int_equal(plan_partition_pipedream(&x.cfg, x.part, &err), SC_OK);
    /* best: everything data-parallel on 3 machines, (5 + 4*2*1e9/(1e10*3)) / 3 */
    assert_float_equal(x.part->objective_s, (5 + 8e9 / 3e10) / 3, 1e-12);
    assert_int_equal(x.part->n_stages, 1);
    assert_int_equal(x.part->n_dev[0], 3);
    /* with a costly activation after block 0 nothing changes; with heavy weights the
     * replicated stage loses to a pipeline: block 0 on 2 replicas, 1-2 on one machine */
    x.prof->blocks[0].parameter_bytes = 3e10;
    plan_cost_destroy(&x.cost);
    assert_int_equal(plan_cost_new(&x.cost, x.prof, c, 1, 8, &err), SC_OK);
    x.cfg.cost = x.cfg.ref_cost = x.cost;
    assert_int_equal(plan_partition_pipedream(&x.cfg, x.part, &err), SC_OK);
    /* all on 3: (5 + 8*3e10/3e10)/3 = 4.33; {0} on 2: (3 + 4*3e10/2e10)/2 = 4.5;
     * {0} alone on 1 then {1,2} on 2 replicas: max(3, 1) = 3; {0},{1},{2}: 3 */
    assert_float_equal(x.part->objective_s, 3.0, 1e-12);
    assert_valid(&x, x.part);
    inst_free(&x);
}

/* Replicas the runtime runs: a stage of r copies needs r <= m micro-batches under the
 * synchronous schedules and m a multiple of r under pipedream (docs/design/runtime.md). */
static void test_replicas_runnable(void **state)
{
    (void)state;
    const plan_sched_kind sync[] = {PLAN_SCHED_GPIPE, PLAN_SCHED_1F1B, PLAN_SCHED_SLICED};
    for (size_t k = 0; k < sizeof sync / sizeof *sync; k++)
        for (int m = 0; m <= 12; m++)
            for (int r = 1; r <= 12; r++)
                assert_int_equal(plan_replicas_runnable(sync[k], m, r), r == 1 || r <= m);
    for (int m = 0; m <= 12; m++)
        for (int r = 1; r <= 12; r++)
            assert_int_equal(plan_replicas_runnable(PLAN_SCHED_PIPEDREAM, m, r),
                             r == 1 || (m >= 1 && m % r == 0));
}

/* Blocks of 3, 1 and 1 s with no weights and no activations: unconstrained, PipeDream and hetero
 * run everything as one stage on all devices. With too few micro-batches for that many copies
 * they must replicate only as far as the runtime runs; devices may stay idle. */
static plan_profile *heavy_first(void)
{
    plan_profile *p = NULL;
    sc_err err;
    assert_int_equal(plan_profile_new(&p, 3, &err), SC_OK);
    p->blocks[0].forward_s = 3;
    p->blocks[1].forward_s = 1;
    p->blocks[2].forward_s = 1;
    return p;
}

static void expect_runnable(const plan_partition *p, plan_sched_kind k, int m)
{
    for (int s = 0; s < p->n_stages; s++)
        if (!plan_replicas_runnable(k, m, p->n_dev[s]))
            fail_msg("stage %d has %d replicas, which the runtime does not run with %d "
                     "micro-batches (schedule %d)",
                     s, p->n_dev[s], m, (int)k);
    assert_true(plan_partition_runnable(p, k, m));
}

static void test_replication_within_runtime_rules(void **state)
{
    (void)state;
    sc_err err;
    /* Best bottlenecks by hand for m = 1..4, synchronous schedules then pipedream. r copies of
     * all blocks take 5 / r; block 0 on r copies next to blocks 1-2 on r' take max(3/r, 2/r');
     * blocks 0-1 on r next to block 2 on r' take max(4/r, 1/r'). One server of 3 devices:
     * r <= 1: 3 (one block a stage); r <= 2: 2 ([2, 1]); r = 3: 5/3 (all on 3). Two servers of
     * 2 devices: PipeDream's copies are r1 per server times r2 servers (1, 2 or 4): 1.5 with 2
     * ([2, 2]), 1.25 with 4; hetero keeps a stage on one server (at most 2 copies). */
    static const double want_pd[2][2][4] = {{{3, 2, 5.0 / 3, 5.0 / 3}, {3, 2, 5.0 / 3, 2}},
                                            {{3, 1.5, 1.5, 1.25}, {3, 1.5, 3, 1.25}}};
    static const double want_he[2][2][4] = {{{3, 2, 5.0 / 3, 5.0 / 3}, {3, 2, 5.0 / 3, 2}},
                                            {{3, 1.5, 1.5, 1.5}, {3, 1.5, 3, 1.5}}};
    for (int shape = 0; shape < 2; shape++) {
        plan_cluster *c = NULL;
        if (shape == 0) {
            assert_int_equal(plan_cluster_new_uniform(&c, 3, 1e10, 0, &err), SC_OK);
        } else {
            int t, types[2];
            assert_int_equal(plan_cluster_new_empty(&c, &err), SC_OK);
            assert_int_equal(plan_cluster_add_type(c, "gpu", 1, 0, &t, &err), SC_OK);
            types[0] = types[1] = t;
            assert_int_equal(plan_cluster_add_server(c, "s0", 1e11, 1e10, types, 2, &err), SC_OK);
            assert_int_equal(plan_cluster_add_server(c, "s1", 1e11, 1e10, types, 2, &err), SC_OK);
        }
        int D = c->n_devices;
        inst x;
        inst_init(&x, heavy_first(), c);
        /* unconstrained (m = 8): PipeDream runs all 5 s of work on every device */
        assert_int_equal(plan_partition_pipedream(&x.cfg, x.part, &err), SC_OK);
        assert_float_equal(x.part->objective_s, 5.0 / D, 1e-12);
        assert_int_equal(x.part->n_stages, 1);
        assert_int_equal(x.part->n_dev[0], D);
        const plan_sched_kind kinds[] = {PLAN_SCHED_GPIPE, PLAN_SCHED_1F1B, PLAN_SCHED_SLICED,
                                         PLAN_SCHED_PIPEDREAM};
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
            for (int m = 1; m <= 4; m++) {
                int pd_sched = kinds[k] == PLAN_SCHED_PIPEDREAM;
                x.cfg.sched = kinds[k];
                x.cfg.n_micro = m;
                sc_err_clear(&err);
                assert_int_equal(plan_partition_pipedream(&x.cfg, x.part, &err), SC_OK);
                assert_valid(&x, x.part);
                expect_runnable(x.part, kinds[k], m);
                double want = want_pd[shape][pd_sched][m - 1];
                if (fabs(x.part->objective_s - want) > 1e-12)
                    fail_msg("2 servers %d, schedule %d, m = %d: pipedream %.6g, expected %.6g",
                             shape, (int)kinds[k], m, x.part->objective_s, want);
                assert_int_equal(plan_partition_hetero(&x.cfg, x.part, &err), SC_OK);
                assert_valid(&x, x.part);
                expect_runnable(x.part, kinds[k], m);
                want = want_he[shape][pd_sched][m - 1];
                double he = plan_partition_bottleneck(x.cost, x.part);
                if (fabs(he - want) > 1e-9 * want)
                    fail_msg("2 servers %d, schedule %d, m = %d: hetero %.6g, expected %.6g", shape,
                             (int)kinds[k], m, he, want);
            }
        inst_free(&x);
    }
}

/* The same rule on a branching graph (PipeDream's antichain states), flat and on two levels:
 * a diamond of 6 ms of work and no weights runs on every device unconstrained; with one
 * micro-batch nothing is replicated, with two at most 2 copies a stage. */
static void test_replication_rules_on_graph(void **state)
{
    (void)state;
    const char *text = "node1 -- Input0 -- forward_compute_time=0, backward_compute_time=0, "
                       "activation_size=0, parameter_size=0\n"
                       "node2 -- A -- forward_compute_time=3, backward_compute_time=0, "
                       "activation_size=1, parameter_size=0\n"
                       "node3 -- X -- forward_compute_time=1, backward_compute_time=0, "
                       "activation_size=1, parameter_size=0\n"
                       "node4 -- Y -- forward_compute_time=1, backward_compute_time=0, "
                       "activation_size=1, parameter_size=0\n"
                       "node5 -- D -- forward_compute_time=1, backward_compute_time=0, "
                       "activation_size=1, parameter_size=0\n"
                       "\tnode1 -- node2\n\tnode2 -- node3\n\tnode2 -- node4\n"
                       "\tnode3 -- node5\n\tnode4 -- node5\n";
    sc_err err;
    for (int shape = 0; shape < 2; shape++) {
        plan_profile *p = NULL;
        assert_int_equal(plan_profile_parse_graph(&p, "diamond.txt", text, &err), SC_OK);
        plan_cluster *c = NULL;
        if (shape == 0) {
            assert_int_equal(plan_cluster_new_uniform(&c, 4, 1e12, 0, &err), SC_OK);
        } else {
            int t, types[2];
            assert_int_equal(plan_cluster_new_empty(&c, &err), SC_OK);
            assert_int_equal(plan_cluster_add_type(c, "gpu", 1, 0, &t, &err), SC_OK);
            types[0] = types[1] = t;
            assert_int_equal(plan_cluster_add_server(c, "s0", 1e12, 1e12, types, 2, &err), SC_OK);
            assert_int_equal(plan_cluster_add_server(c, "s1", 1e12, 1e12, types, 2, &err), SC_OK);
        }
        inst x;
        memset(&x, 0, sizeof x);
        x.prof = p;
        x.cl = c;
        /* graph.txt times are for the whole batch: samples == batch keeps them */
        assert_int_equal(plan_cost_new(&x.cost, p, c, 8, 8, &err), SC_OK);
        assert_int_equal(plan_partition_new(&x.part, p->n_blocks, c->n_devices, &err), SC_OK);
        x.cfg = (plan_search_cfg){
            .cost = x.cost, .ref_cost = x.cost, .sched = PLAN_SCHED_1F1B, .n_micro = 8};
        assert_int_equal(plan_partition_pipedream(&x.cfg, x.part, &err), SC_OK);
        assert_int_equal(x.part->n_stages, 1);
        assert_int_equal(x.part->n_dev[0], 4);
        assert_float_equal(x.part->objective_s, 0.006 / 4, 1e-12);
        const plan_sched_kind kinds[] = {PLAN_SCHED_1F1B, PLAN_SCHED_PIPEDREAM};
        for (size_t k = 0; k < 2; k++)
            for (int m = 1; m <= 3; m++) {
                x.cfg.sched = kinds[k];
                x.cfg.n_micro = m;
                sc_err_clear(&err);
                assert_int_equal(plan_partition_pipedream(&x.cfg, x.part, &err), SC_OK);
                assert_valid(&x, x.part);
                expect_runnable(x.part, kinds[k], m);
                /* A alone is the largest stage without copies: 3 ms */
                if (m == 1)
                    assert_float_equal(x.part->objective_s, 0.003, 1e-12);
                assert_true(x.part->objective_s >= 0.006 / 4 * (1 - 1e-12));
            }
        inst_free(&x);
    }
}

static void test_exhaustive_refuses_large(void **state)
{
    (void)state;
    sc_err err;
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_new_uniform(&c, 12, 1e9, 0, &err), SC_OK);
    inst x;
    inst_init(&x, random_chain(40), c);
    sc_err_clear(&err);
    assert_int_equal(plan_partition_exhaustive(&x.cfg, x.part, &err), SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "exhaustive"));
    assert_non_null(strstr(err.msg, "limit"));
    inst_free(&x);
    /* past the largest double (sum over S of C(199, S-1) 4096! / (4096-S)! is about 2.2e720):
     * a finite count, not "inf" */
    assert_int_equal(plan_cluster_new_uniform(&c, 4096, 1e9, 0, &err), SC_OK);
    inst_init(&x, random_chain(200), c);
    sc_err_clear(&err);
    assert_int_equal(plan_partition_exhaustive(&x.cfg, x.part, &err), SC_ERR_TOO_LARGE);
    if (strstr(err.msg, "give more than 10^720 candidate plans") == NULL)
        fail_msg("%s", err.msg);
    assert_null(strstr(err.msg, "inf"));
    inst_free(&x);
}

static void test_shared_links(void **state)
{
    (void)state;
    sc_err err;
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_new(&p, 4, &err), SC_OK);
    for (int l = 0; l < 4; l++)
        p->blocks[l].activation_bytes = 1e9;
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_load(&c, SC_TEST_DATA_DIR "/planner/cluster_links.json", &err),
                     SC_OK);
    inst x;
    inst_init(&x, p, c);
    /* stages in device order 0 1 2 3: only the cut 1 -> 2 crosses the two PCIe uplinks */
    for (int s = 0; s < 4; s++)
        plan_partition_push(x.part, s, s, &s, 1);
    assert_float_equal(plan_partition_contention(x.cost, x.part), 2e9 / 16e9, 1e-12);
    assert_float_equal(plan_partition_bottleneck(x.cost, x.part), 2e9 / 16e9, 1e-12);
    /* order 0 2 1 3: all three cuts cross both uplinks, which then carry three transfers */
    plan_partition_clear(x.part);
    const int order[4] = {0, 2, 1, 3};
    for (int s = 0; s < 4; s++)
        plan_partition_push(x.part, s, s, &order[s], 1);
    assert_float_equal(plan_partition_contention(x.cost, x.part), 6e9 / 16e9, 1e-12);
    assert_float_equal(plan_partition_bottleneck(x.cost, x.part), 6e9 / 16e9, 1e-12);
    /* the searches see it: exhaustive and hetero avoid the crossing orders */
    /* 0.1 s per block: four stages (0.125 s with one uplink crossing) beat fewer (>= 0.2 s) */
    for (int l = 0; l < 4; l++)
        p->blocks[l].forward_s = 0.1;
    plan_cost_destroy(&x.cost);
    assert_int_equal(plan_cost_new(&x.cost, p, c, 1, 8, &err), SC_OK);
    x.cfg.cost = x.cfg.ref_cost = x.cost;
    assert_int_equal(plan_partition_exhaustive(&x.cfg, x.part, &err), SC_OK);
    double ex = x.part->objective_s;
    assert_float_equal(plan_partition_bottleneck(x.cost, x.part), ex, 1e-12);
    assert_float_equal(ex, 2e9 / 16e9, 1e-12);
    assert_int_equal(plan_partition_hetero(&x.cfg, x.part, &err), SC_OK);
    assert_valid(&x, x.part);
    assert_true(plan_partition_bottleneck(x.cost, x.part) <= 1.01 * ex);
    inst_free(&x);
}

/* ---- pipedream on branching graph.txt profiles: antichain states ----
 * Both fixtures have the diamond  A -> X, A -> Y, X -> D, Y -> D  (Input0 feeds A and is
 * zeroed; linear order Input0, A, X, Y, D). Its antichain states, as closures, numbered by
 * size then discovery: s0 {A}, s1 {A,X}, s2 {A,Y}, s3 {A,X,Y}, s4 {A,X,Y,D}; s1 and s2 are
 * incomparable, every other pair is ordered. PipeDream's output size of a state is the sum of
 * its augmented antichain's outputs: s0 A; s1 A+X (A still feeds Y); s2 A+Y; s3 A+X+Y
 * (A is kept: for antichain node X, A's edge to Y leaves X's ancestors), s4 D. */

#define DATA SC_TEST_DATA_DIR "/planner/"

typedef struct dag_inst {
    plan_profile *prof;
    plan_cluster *cl;
    plan_cost *cost;
    plan_partition *part;
    plan_search_cfg cfg;
} dag_inst;

static void dag_init(dag_inst *x, const char *path, int gpus, double bw)
{
    sc_err err;
    memset(x, 0, sizeof *x);
    sc_err_clear(&err);
    assert_int_equal(plan_profile_load(&x->prof, path, &err), SC_OK);
    assert_int_equal(plan_cluster_new_uniform(&x->cl, gpus, bw, 0, &err), SC_OK);
    /* graph.txt times describe the whole batch: samples == batch keeps them as they are */
    assert_int_equal(plan_cost_new(&x->cost, x->prof, x->cl, 8, 8, &err), SC_OK);
    assert_int_equal(plan_partition_new(&x->part, x->prof->n_blocks, gpus, &err), SC_OK);
    x->cfg.cost = x->cfg.ref_cost = x->cost;
    x->cfg.sched = PLAN_SCHED_1F1B;
    x->cfg.n_micro = 8;
}

static void dag_free(dag_inst *x)
{
    plan_partition_destroy(&x->part);
    plan_cost_destroy(&x->cost);
    plan_cluster_destroy(&x->cl);
    plan_profile_destroy(&x->prof);
}

static void test_antichain_states(void **state)
{
    (void)state;
    dag_inst x;
    dag_init(&x, DATA "branch_shared.graph.txt", 2, 1e9);
    /* per-block weights: work = position, params = 0, output = 10^position */
    double work[5] = {0, 1, 2, 3, 4}, params[5] = {0}, act[5] = {1, 10, 100, 1000, 10000};
    plan_antichain *a = NULL;
    sc_err err;
    assert_int_equal(plan_antichain_new(&a, x.prof, work, params, act, 100, &err), SC_OK);
    assert_int_equal(a->n_states, 5);
    const int size[5] = {1, 2, 2, 3, 4};
    const double out[5] = {10, 110, 1010, 1110, 10000};
    const double wsum[5] = {1, 3, 4, 6, 10};
    for (int s = 0; s < 5; s++) {
        assert_int_equal(a->size[s], size[s]);
        assert_float_equal(a->out_bytes[s], out[s], 0);
        assert_float_equal(a->work_s[s], wsum[s], 0);
        assert_false(plan_antichain_has(a, s, 0)); /* the Input block is in no state */
    }
    assert_true(plan_antichain_has(a, 1, 2) && !plan_antichain_has(a, 1, 3));
    assert_true(plan_antichain_has(a, 2, 3) && !plan_antichain_has(a, 2, 2));
    for (int k = 0; k < 5; k++)
        for (int j = 0; j < 5; j++) {
            int want = k < j && !(k == 1 && j == 2);
            assert_int_equal(plan_antichain_precedes(a, k, j), want);
        }
    plan_antichain_destroy(&a);
    assert_null(a);
    /* two components: the states grown from the first source never hold the second one */
    const char *two = "node1 -- A -- forward_compute_time=1, backward_compute_time=1, "
                      "activation_size=1, parameter_size=0\n"
                      "node2 -- B -- forward_compute_time=1, backward_compute_time=1, "
                      "activation_size=1, parameter_size=0\n"
                      "node3 -- C -- forward_compute_time=1, backward_compute_time=1, "
                      "activation_size=1, parameter_size=0\n"
                      "node4 -- D -- forward_compute_time=1, backward_compute_time=1, "
                      "activation_size=1, parameter_size=0\n"
                      "\tnode1 -- node2\n\tnode3 -- node4\n";
    plan_profile *p2 = NULL;
    sc_err_clear(&err);
    assert_int_equal(plan_profile_parse_graph(&p2, "two.txt", two, &err), SC_OK);
    assert_int_equal(plan_antichain_new(&a, p2, work, params, act, 100, &err), SC_ERR_INVALID);
    assert_null(a);
    assert_non_null(strstr(err.msg, "2 of 4 blocks cannot be reached"));
    plan_profile_destroy(&p2);
    /* past the cap: a one-line error naming the profile and the cap */
    sc_err_clear(&err);
    assert_int_equal(plan_antichain_new(&a, x.prof, work, params, act, 4, &err), SC_ERR_TOO_LARGE);
    assert_null(a);
    assert_non_null(strstr(err.msg, "branch_shared.graph.txt"));
    assert_non_null(strstr(err.msg, "more than 4 antichain states"));
    dag_free(&x);
}

static void test_pipedream_shared_output(void **state)
{
    (void)state;
    /* branch_shared, 2 GPUs at 1e9 B/s. Work (ms): A 1, X 2, Y 1.5, D 5.5, total 10; states'
     * work: s0 1, s1 3, s2 2.5, s3 4.5. Outputs: A 2e6, X = Y = D = 1e6 bytes; D holds 1e7
     * parameter bytes. Two stages split after state k cost max(work(k), 10 - work(k),
     * 2 out(k) / bw):  s0 max(1, 9, 4) = 9;  s1 max(3, 7, 6) = 7;  s2 max(2.5, 7.5, 6) = 7.5;
     * s3 max(4.5, 5.5, 8) = 8 (A's output is counted at s3 as PipeDream does). One stage on
     * 2 replicas: (10 + 4 * 1e7 / (2 * 1e9) s) / 2 = 15. Optimum: 7 ms, cut after s1 = {A,X},
     * a prefix of the linear order. (A chain DP over the linear order would find 5.5 ms at
     * {A,X,Y}, counting only X's and Y's outputs there.) */
    dag_inst x;
    sc_err err;
    dag_init(&x, DATA "branch_shared.graph.txt", 2, 1e9);
    assert_int_equal(plan_partition_pipedream(&x.cfg, x.part, &err), SC_OK);
    assert_float_equal(x.part->objective_s, 0.007, 1e-12);
    assert_int_equal(x.part->n_stages, 2);
    assert_int_equal(x.part->first[0], 0);
    assert_int_equal(x.part->last[0], 2); /* Input0, A, X */
    assert_int_equal(x.part->last[1], 4); /* Y, D */
    assert_int_equal(x.part->n_dev[0], 1);
    assert_int_equal(x.part->n_dev[1], 1);
    assert_string_equal(x.part->note, "");
    assert_null(x.part->order); /* the cut is a prefix: the profile's own order stands */
    dag_free(&x);
}

static void test_pipedream_non_prefix_cut(void **state)
{
    (void)state;
    /* branch_cut, 3 GPUs at 1e12 B/s, outputs of 1 byte (transfers ~1e-12 s), every block
     * 1e10 parameter bytes (a replica pair costs >= 4e10 / 2e12 s = 20 ms: never worth it).
     * Work (ms): A 1, X 3.5, Y 2.5, D 3. Three stages along s2 {A,Y} | s3 (+X) | s4 (+D):
     * max(3.5, 3.5, 3) = 3.5 ms, the optimum (through s1: {A,X} 4.5; from s0: A | X+Y or
     * A | Y | X+D, both > 5). A chain DP over Input0, A, X, Y, D can reach only 4.5 ms.
     * {A,Y} is not a prefix of the linear order (Input0, A, X, Y, D = blocks 0..4): the plan
     * takes the order Input0, A, Y, X, D, where the stages are blocks 0..2 = {Input0, A, Y},
     * 3 = {X}, 4 = {D}, exactly PipeDream's. */
    dag_inst x;
    sc_err err;
    dag_init(&x, DATA "branch_cut.graph.txt", 3, 1e12);
    assert_int_equal(plan_partition_pipedream(&x.cfg, x.part, &err), SC_OK);
    assert_float_equal(x.part->objective_s, 0.0035, 1e-12);
    assert_int_equal(x.part->n_stages, 3);
    assert_int_equal(x.part->last[0], 2);
    assert_int_equal(x.part->first[1], 3);
    assert_int_equal(x.part->last[1], 3);
    assert_int_equal(x.part->first[2], 4);
    assert_int_equal(x.part->last[2], 4);
    const int order[5] = {0, 1, 3, 2, 4};
    assert_non_null(x.part->order);
    assert_int_equal(x.part->n_order, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(x.part->order[i], order[i]);
    assert_string_equal(x.part->note, "");
    /* a partition with an order starts clean again */
    plan_partition_clear(x.part);
    assert_null(x.part->order);
    assert_int_equal(x.part->n_order, 0);
    dag_free(&x);
}

static void test_pipedream_chain_graph_unchanged(void **state)
{
    (void)state;
    /* a graph.txt whose DAG is a path takes the chain DP: the same plan as the same blocks
     * given without edges (a synthetic chain) */
    const char *text = "node1 -- Input0 -- forward_compute_time=0, backward_compute_time=0, "
                       "activation_size=0, parameter_size=0\n"
                       "node2 -- A -- forward_compute_time=3000, backward_compute_time=0, "
                       "activation_size=1, parameter_size=1e9\n"
                       "node3 -- B -- forward_compute_time=1000, backward_compute_time=0, "
                       "activation_size=1, parameter_size=0\n"
                       "node4 -- C -- forward_compute_time=1000, backward_compute_time=0, "
                       "activation_size=1, parameter_size=0\n"
                       "\tnode1 -- node2\n\tnode2 -- node3\n\tnode3 -- node4\n";
    plan_profile *p = NULL;
    sc_err err;
    assert_int_equal(plan_profile_parse_graph(&p, "chain.txt", text, &err), SC_OK);
    assert_non_null(p->pred_start);
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_new_uniform(&c, 3, 1e10, 0, &err), SC_OK);
    plan_cost *cost = NULL;
    assert_int_equal(plan_cost_new(&cost, p, c, 8, 8, &err), SC_OK);
    plan_partition *part = NULL;
    assert_int_equal(plan_partition_new(&part, p->n_blocks, 3, &err), SC_OK);
    plan_search_cfg cfg = {.cost = cost, .ref_cost = cost, .sched = PLAN_SCHED_1F1B, .n_micro = 8};
    assert_int_equal(plan_partition_pipedream(&cfg, part, &err), SC_OK);
    /* as in test_pipedream_objective: (5 + 4*2*1e9/(1e10*3)) / 3 on one 3-way stage */
    assert_float_equal(part->objective_s, (5 + 8e9 / 3e10) / 3, 1e-12);
    assert_int_equal(part->n_stages, 1);
    assert_null(part->order);
    plan_partition_destroy(&part);
    plan_cost_destroy(&cost);
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* The sliced schedule's stash counts: halves lower the last stage's and can raise the first's
 * (more units in flight); no halves is the 1F1B count. */
static void test_sliced_stash_count(void **state)
{
    (void)state;
    for (int S = 1; S <= 4; S++)
        for (int s = 0; s < S; s++)
            for (int m = 1; m <= 6; m++)
                assert_true(fabs(plan_stash_count_sliced(S, s, m, 0) -
                                 plan_stash_count(PLAN_SCHED_1F1B, S, s, m)) < 1e-12);
    assert_true(fabs(plan_stash_count_sliced(2, 1, 1, 1) - 0.5) < 1e-12);
    assert_true(fabs(plan_stash_count_sliced(2, 0, 1, 1) - 1.0) < 1e-12);
    assert_true(fabs(plan_stash_count_sliced(2, 0, 3, 1) - 2.5) < 1e-12);
    assert_true(fabs(plan_stash_count_sliced(3, 0, 2, 2) - 2.0) < 1e-12);
    assert_true(fabs(plan_stash_count_sliced(3, 1, 4, 2) - 2.5) < 1e-12);
}

/* A copy's stash and weight versions under replicated stages, by hand (two stages, the first as
 * 4 copies, m = 8: W_0 = 4, a copy keeps 2) and against the simulator's most in flight on a
 * copy when it plays the lists with every copy (1 to 3 stages of 1 to 3 copies): equal for
 * gpipe, 1f1b and pipedream, and a bound for sliced (equal for an unreplicated stage). */
static void test_copy_stash_count(void **state)
{
    (void)state;
    assert_true(plan_stash_count_copy(PLAN_SCHED_1F1B, 5, 4, 8) == 2);
    assert_true(plan_stash_count_copy(PLAN_SCHED_1F1B, 1, 1, 8) == 1);
    assert_true(plan_stash_count_copy(PLAN_SCHED_1F1B, 5, 1, 8) == 5);
    assert_true(plan_stash_count_copy(PLAN_SCHED_1F1B, 5, 1, 3) == 3);
    assert_true(plan_stash_count_copy(PLAN_SCHED_1F1B, 5, 4, 4) == 1);
    assert_true(plan_stash_count_copy(PLAN_SCHED_GPIPE, 5, 4, 8) == 2);
    assert_true(plan_stash_count_copy(PLAN_SCHED_GPIPE, 5, 4, 9) == 3);
    assert_true(plan_stash_count_copy(PLAN_SCHED_PIPEDREAM, 5, 4, 2) == 2);
    assert_true(plan_stash_count_copy(PLAN_SCHED_PIPEDREAM, 7, 1, 2) == 7);
    assert_int_equal(plan_weight_versions(PLAN_SCHED_PIPEDREAM, 5, 4), 1);
    assert_int_equal(plan_weight_versions(PLAN_SCHED_PIPEDREAM, 4, 1), 3);
    assert_int_equal(plan_weight_versions(PLAN_SCHED_1F1B, 5, 4), 0);
    sc_err err;
    sc_err_clear(&err);
    for (int p = 1; p <= 3; p++) {
        int reps[3];
        int combos = p == 1 ? 3 : p == 2 ? 9 : 27; /* every vector of 1 to 3 copies */
        for (int c = 0; c < combos; c++) {
            int most = 1, x = c;
            for (int s = 0; s < 3; s++, x /= 3) {
                reps[s] = 1 + x % 3;
                most = s < p && reps[s] > most ? reps[s] : most;
            }
            plan_sim_stage st[3];
            for (int s = 0; s < p; s++)
                st[s] = (plan_sim_stage){.fwd_s = 0.1 * (s + 1), .bwd_s = 0.2, .opt_s = 0.01};
            for (int k = 0; k < 4; k++) {
                plan_sched_kind kind = (plan_sched_kind)k;
                for (int m = most; m <= 3 * most; m++) {
                    int sliced = kind == PLAN_SCHED_SLICED ? (m < p - 1 ? m : p - 1) : 0;
                    int units = kind == PLAN_SCHED_PIPEDREAM ? 8 * (m + 9) : m;
                    plan_schedule *sch = NULL;
                    plan_sim_result r;
                    assert_int_equal(
                        plan_schedule_build_replicated(&sch, kind, p, units, sliced, reps, &err),
                        SC_OK);
                    assert_int_equal(plan_sim_run(sch, st, m, 0.9, 0, &r, &err), SC_OK);
                    for (int s = 0; s < p; s++) {
                        int after = 0;
                        for (int j = s; j < p; j++)
                            after += reps[j];
                        if (kind == PLAN_SCHED_SLICED) {
                            double bound = plan_stash_count_sliced_copy(after, reps[s], m, sliced);
                            assert_true(r.peak_inflight[s] <= bound + 1e-12);
                            if (reps[s] == 1 || sliced == 0)
                                assert_true(fabs(r.peak_inflight[s] - bound) < 1e-12);
                        } else {
                            double want = plan_stash_count_copy(kind, after, reps[s], m);
                            if (fabs(r.peak_inflight[s] - want) > 1e-12)
                                print_error("%s p %d reps %d %d %d m %d stage %d: %g vs %g\n",
                                            plan_sched_name(kind), p, reps[0], reps[1], reps[2], m,
                                            s, r.peak_inflight[s], want);
                            assert_true(fabs(r.peak_inflight[s] - want) < 1e-12);
                        }
                    }
                    plan_sim_result_free(&r);
                    plan_schedule_destroy(&sch);
                }
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minmax_matches_brute_force),
        cmocka_unit_test(test_minmax_memory_matches_brute_force),
        cmocka_unit_test(test_exhaustive_and_baselines),
        cmocka_unit_test(test_blockpartition_identical_blocks),
        cmocka_unit_test(test_hetero_near_exhaustive),
        cmocka_unit_test(test_memory_is_a_hard_limit),
        cmocka_unit_test(test_pipedream_objective),
        cmocka_unit_test(test_replicas_runnable),
        cmocka_unit_test(test_copy_stash_count),
        cmocka_unit_test(test_replication_within_runtime_rules),
        cmocka_unit_test(test_replication_rules_on_graph),
        cmocka_unit_test(test_exhaustive_refuses_large),
        cmocka_unit_test(test_shared_links),
        cmocka_unit_test(test_antichain_states),
        cmocka_unit_test(test_pipedream_shared_output),
        cmocka_unit_test(test_pipedream_non_prefix_cut),
        cmocka_unit_test(test_pipedream_chain_graph_unchanged),
        cmocka_unit_test(test_sliced_stash_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
