/* coordinator/planner/plan: the strategy driver end to end: every strategy on a small
 * heterogeneous cluster, the plan JSON keys, --microbatches auto and the trace, the bubble and
 * the optimizer step through the driver, umpipe's simulated figures, replication the runtime
 * can run, measured all-reduce speeds, one-line errors for impossible requests, and
 * pipedream's own block order on a branching graph (stages holding exactly its states' blocks,
 * figures over those blocks). Memory fit through the driver: test_planner_plan_memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/planner/plan.h"

#define DATA SC_TEST_DATA_DIR "/planner/"

static void load(plan_profile **p, plan_cluster **c, const char *prof, const char *cl)
{
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_profile_load(p, prof, &err), SC_OK);
    assert_int_equal(plan_cluster_load(c, cl, &err), SC_OK);
}

static void test_all_strategies_json(void **state)
{
    (void)state;
    plan_profile *p;
    plan_cluster *c;
    load(&p, &c, DATA "tiny.json", DATA "cluster2.json");
    plan_request req = {.profile = p, .cluster = c, .batch = 16, .schedule = PLAN_SCHED_1F1B};
    plan_result r[PLAN_STRAT_COUNT];
    sc_err err;
    for (int s = 0; s < PLAN_STRAT_COUNT; s++) {
        sc_err_clear(&err);
        sc_status rc = plan_run(&req, (plan_strategy)s, &r[s], &err);
        if (rc != SC_OK)
            print_error("%s: %s\n", plan_strategy_name((plan_strategy)s), err.msg);
        assert_int_equal(rc, SC_OK);
        assert_true(r[s].ok);
        assert_true(r[s].iteration_time_s > 0 && isfinite(r[s].iteration_time_s));
        assert_true(r[s].lower_bound_s <= r[s].bottleneck_s * (1 + 1e-12));
        assert_true(r[s].bubble_fraction >= 0 && r[s].bubble_fraction < 1);
        assert_true(r[s].search_time_s >= 0);
    }
    /* hetero (exact on this small cluster) is at least as fast as any single-device-per-stage
     * plan: on the simulated iteration, which it minimises; the bottleneck is per micro-batch,
     * and the two may pick different micro-batch sizes */
    assert_int_equal(r[PLAN_STRAT_HETERO].part->search, PLAN_SEARCH_EXACT);
    assert_true(r[PLAN_STRAT_HETERO].iteration_time_s <=
                r[PLAN_STRAT_EXHAUSTIVE].iteration_time_s * 1.01);
    FILE *f = tmpfile();
    assert_int_equal(plan_write_json(f, &req, r, PLAN_STRAT_COUNT, &err), SC_OK);
    rewind(f);
    json_error_t jerr;
    json_t *root = json_loadf(f, 0, &jerr);
    fclose(f);
    if (root == NULL)
        print_error("%s at %d:%d\n", jerr.text, jerr.line, jerr.column);
    assert_non_null(root);
    json_t *plans = json_object_get(root, "plans");
    assert_int_equal(json_array_size(plans), PLAN_STRAT_COUNT);
    const char *keys[] = {"strategy",
                          "objective_s",
                          "bottleneck_s",
                          "iteration_time_s",
                          "throughput_samples_per_s",
                          "bubble_fraction",
                          "lower_bound_s",
                          "lower_bound_replicated_s",
                          "search_time_s",
                          "stages",
                          "microbatches",
                          NULL};
    for (size_t i = 0; i < json_array_size(plans); i++) {
        json_t *pl = json_array_get(plans, i);
        for (int k = 0; keys[k]; k++)
            assert_non_null(json_object_get(pl, keys[k]));
        json_t *stages = json_object_get(pl, "stages");
        int next = 0;
        for (size_t s = 0; s < json_array_size(stages); s++) {
            json_t *st = json_array_get(stages, s);
            assert_int_equal(json_integer_value(json_object_get(st, "first_block")), next);
            next = (int)json_integer_value(json_object_get(st, "last_block")) + 1;
            assert_int_equal(json_array_size(json_object_get(st, "devices")),
                             json_integer_value(json_object_get(st, "replicas")));
            assert_non_null(json_object_get(st, "compute_s"));
            assert_non_null(json_object_get(st, "peak_memory_bytes"));
        }
        assert_int_equal(next, 4);
        assert_non_null(json_object_get(json_object_get(pl, "microbatches"), "count"));
    }
    /* umpipe reports its per-stage sizes */
    json_t *um = json_array_get(plans, PLAN_STRAT_UMPIPE);
    assert_string_equal(json_string_value(json_object_get(um, "strategy")), "umpipe");
    assert_true(json_is_array(json_object_get(json_object_get(um, "microbatches"), "sizes")));
    json_decref(root);
    for (int s = 0; s < PLAN_STRAT_COUNT; s++)
        plan_result_free(&r[s]);
    plan_profile_destroy(&p);
    plan_cluster_destroy(&c);
}

static void test_bubble_through_driver(void **state)
{
    (void)state;
    sc_err err;
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_new(&p, 8, &err), SC_OK);
    for (int l = 0; l < 8; l++) {
        p->blocks[l].forward_s = 1;
        p->blocks[l].backward_s = 2;
    }
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_new_uniform(&c, 4, 1e9, 0, &err), SC_OK);
    for (int k = 0; k < 2; k++) {
        plan_request req = {.profile = p,
                            .cluster = c,
                            .batch = 8,
                            .microbatches = 8,
                            .schedule = k ? PLAN_SCHED_GPIPE : PLAN_SCHED_1F1B};
        plan_result r;
        assert_int_equal(plan_run(&req, PLAN_STRAT_UNIFORM, &r, &err), SC_OK);
        assert_int_equal(r.part->n_stages, 4);
        assert_int_equal(r.n_micro, 8);
        /* 2 blocks of (1 + 2) s per stage per micro-batch of 1 sample */
        assert_float_equal(r.iteration_time_s, (8 + 4 - 1) * 6.0, 1e-9);
        assert_float_equal(r.bubble_fraction, 3.0 / 11, 1e-12);
        assert_float_equal(r.throughput_samples_per_s, 8 / 66.0, 1e-12);
        assert_float_equal(r.bottleneck_s, 6.0, 1e-12);
        assert_float_equal(r.lower_bound_s, 6.0, 1e-12);
        plan_result_free(&r);
    }
    plan_profile_destroy(&p);
    plan_cluster_destroy(&c);
}

/* umpipe's figures come from the event simulator playing the sizes it found: it has a trace,
 * it is never slower than GPipe's best equal split, and the optimizer step (equal on every
 * stage here) adds exactly one step to the search's own objective, which leaves it out; on
 * devices that share processors the simulation shares them. */
static void test_umpipe_simulated(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_new(&p, 8, &err), SC_OK);
    for (int l = 0; l < 8; l++) {
        p->blocks[l].forward_s = 1;
        p->blocks[l].backward_s = 2;
        p->blocks[l].optimizer_s = 0.5;
    }
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_new_uniform(&c, 4, 1e9, 0, &err), SC_OK);
    plan_request req = {.profile = p,
                        .cluster = c,
                        .batch = 8,
                        .microbatches = 8,
                        .schedule = PLAN_SCHED_GPIPE,
                        .record_trace = 1};
    plan_result r;
    assert_int_equal(plan_run(&req, PLAN_STRAT_UMPIPE, &r, &err), SC_OK);
    assert_int_equal(r.part->n_stages, 4);
    /* GPipe with 8 micro-batches of one sample: (8 + 4 - 1) x 6 s */
    assert_true(r.objective_s <= 66.0 + 1e-9);
    assert_float_equal(r.iteration_time_s, r.objective_s + 1.0, 1e-12);
    assert_true(r.sim.n_events > 0);
    int opt_steps = 0;
    for (int e = 0; e < r.sim.n_events; e++)
        opt_steps += r.sim.events[e].kind == PLAN_ACT_OPT;
    assert_int_equal(opt_steps, 4);
    assert_true(r.bubble_fraction >= 0 && r.bubble_fraction < 1);
    /* the stage figures are at the plan's mean entry size, batch / entries (times linear in
     * the size: entries x stage time = the stage's time for the whole batch) */
    assert_true(r.n_micro >= 1);
    assert_float_equal(r.micro_size, 8.0 / r.n_micro, 1e-12);
    for (int s = 0; s < r.part->n_stages; s++) {
        double whole = 0;
        for (int l = r.part->first[s]; l <= r.part->last[s]; l++) {
            double f, b;
            plan_profile_block_time(p, l, 8, 8, &f, &b);
            whole += f + b;
        }
        assert_float_equal(r.compute_s[s] * r.n_micro, whole, 1e-9 * whole);
    }
    /* with a fixed cost per entry the search takes fewer, larger entries than the one-sample
     * micro-batches minmax partitioned at: the figures follow the plan's sizes */
    const char *overhead =
        "{\"format\": \"stagecraft-profile\", \"version\": 1, \"microbatch_size\": 1, "
        "\"blocks\": [{\"name\": \"a\", \"forward_s\": 1, \"backward_s\": 2, "
        "\"activation_bytes\": 1, \"by_microbatch_size\": [{\"size\": 1, \"forward_s\": 1, "
        "\"backward_s\": 2}, {\"size\": 8, \"forward_s\": 1.7, \"backward_s\": 3.4}]}, "
        "{\"name\": \"b\", \"forward_s\": 1, \"backward_s\": 2, \"activation_bytes\": 1, "
        "\"by_microbatch_size\": [{\"size\": 1, \"forward_s\": 1, \"backward_s\": 2}, "
        "{\"size\": 8, \"forward_s\": 1.7, \"backward_s\": 3.4}]}]}";
    plan_profile *po = NULL;
    assert_int_equal(
        plan_profile_parse_json(&po, "overhead.json", overhead, strlen(overhead), &err), SC_OK);
    plan_request ro = {
        .profile = po, .cluster = c, .batch = 8, .microbatches = 8, .schedule = PLAN_SCHED_GPIPE};
    plan_result rr;
    assert_int_equal(plan_run(&ro, PLAN_STRAT_UMPIPE, &rr, &err), SC_OK);
    assert_true(rr.n_micro < 8);
    for (int s = 0; s < rr.part->n_stages; s++) {
        double at = 0;
        for (int l = rr.part->first[s]; l <= rr.part->last[s]; l++) {
            double f, b;
            plan_profile_block_time(po, l, 8.0 / rr.n_micro, 8, &f, &b);
            at += f + b;
        }
        assert_float_equal(rr.compute_s[s], at, 1e-9 * at);
    }
    plan_result_free(&rr);
    plan_profile_destroy(&po);
    char path[] = "/tmp/sc_umpipe_traceXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(plan_write_trace(&r, path, &err), SC_OK);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    unlink(path);
    assert_non_null(root);
    assert_true(json_array_size(json_object_get(root, "traceEvents")) > (size_t)r.sim.n_events);
    json_decref(root);
    plan_result_free(&r);
    /* The 4 devices sharing one processor (compute_slots 1): the figures come from the shared
     * simulation, where that processor is never idle (no transfers here), so the iteration is
     * all the work, 4 stages x 8 samples x 6 s plus 4 steps of 1 s, whatever sizes the search
     * chose (the times are linear in the size). */
    c->servers[0].compute_slots = 1;
    req.record_trace = 0;
    assert_int_equal(plan_run(&req, PLAN_STRAT_UMPIPE, &r, &err), SC_OK);
    assert_float_equal(r.iteration_time_s, 4 * 8 * 6 + 4, 1e-9);
    assert_true(r.objective_s <= 66.0 + 1e-9); /* the search itself gives stages their own */
    plan_result_free(&r);
    plan_profile_destroy(&p);
    plan_cluster_destroy(&c);
}

/* The profile's optimizer_s is one step per iteration after each stage's last backward: on equal
 * stages the first stage finishes last, so the iteration grows by its step alone. */
static void test_optimizer_step_counted(void **state)
{
    (void)state;
    sc_err err;
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_new(&p, 8, &err), SC_OK);
    for (int l = 0; l < 8; l++) {
        p->blocks[l].forward_s = 1;
        p->blocks[l].backward_s = 2;
        p->blocks[l].optimizer_s = 0.5;
    }
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_new_uniform(&c, 4, 1e9, 0, &err), SC_OK);
    for (int k = 0; k < 2; k++) {
        plan_request req = {.profile = p,
                            .cluster = c,
                            .batch = 8,
                            .microbatches = 8,
                            .schedule = k ? PLAN_SCHED_GPIPE : PLAN_SCHED_1F1B};
        plan_result r;
        assert_int_equal(plan_run(&req, PLAN_STRAT_UNIFORM, &r, &err), SC_OK);
        assert_int_equal(r.part->n_stages, 4);
        /* (m + p - 1) x 6 s of pipeline, then the first stage's 2 x 0.5 s step */
        assert_float_equal(r.iteration_time_s, (8 + 4 - 1) * 6.0 + 1.0, 1e-9);
        plan_result_free(&r);
    }
    plan_profile_destroy(&p);
    plan_cluster_destroy(&c);
}

static void test_auto_microbatches_and_trace(void **state)
{
    (void)state;
    plan_profile *p;
    plan_cluster *c;
    load(&p, &c, DATA "tiny.json", DATA "cluster2.json");
    plan_request req = {
        .profile = p, .cluster = c, .batch = 32, .schedule = PLAN_SCHED_1F1B, .record_trace = 1};
    plan_result r;
    sc_err err;
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &r, &err), SC_OK);
    assert_true(r.n_sweep > 0);
    /* the chosen count is the fastest of the sweep that fits */
    int found = 0;
    for (int i = 0; i < r.n_sweep; i++) {
        assert_int_equal(32 % r.sweep_count[i], 0);
        if (r.sweep_count[i] == r.n_micro) {
            found = 1;
            assert_float_equal(r.sweep_iter_s[i], r.iteration_time_s, 1e-12);
        }
        if (r.sweep_fits[i])
            assert_true(r.iteration_time_s <= r.sweep_iter_s[i] * (1 + 1e-12));
    }
    assert_true(found);
    assert_true(r.sim.n_events > 0);
    char path[] = "/tmp/test_planner_trace_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(plan_write_trace(&r, path, &err), SC_OK);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    assert_non_null(root);
    assert_true(json_array_size(json_object_get(root, "traceEvents")) > (size_t)r.sim.n_events);
    json_decref(root);
    unlink(path);
    plan_result_free(&r);
    /* sliced picks how many warm-up micro-batches to halve */
    req.schedule = PLAN_SCHED_SLICED;
    req.microbatches = 8;
    req.record_trace = 0;
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &r, &err), SC_OK);
    assert_true(r.sliced >= 0 && r.sliced < r.part->n_stages + 1);
    assert_true(r.sliced > 0); /* halving shortens the fill here */
    plan_result_free(&r);
    /* micro-batches of one sample cannot be halved: none is sliced */
    req.microbatches = 32;
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &r, &err), SC_OK);
    assert_int_equal(r.n_micro, 32);
    assert_int_equal(r.sliced, 0);
    plan_result_free(&r);
    req.microbatches = 8;
    req.schedule = PLAN_SCHED_PIPEDREAM;
    assert_int_equal(plan_run(&req, PLAN_STRAT_HETERO, &r, &err), SC_OK);
    assert_true(r.iteration_time_s > 0);
    plan_result_free(&r);
    plan_profile_destroy(&p);
    plan_cluster_destroy(&c);
}

static void expect_error(plan_request *req, plan_strategy s, const char *needle)
{
    plan_result r;
    sc_err err;
    sc_err_clear(&err);
    assert_int_not_equal(plan_run(req, s, &r, &err), SC_OK);
    if (strstr(err.msg, needle) == NULL)
        print_error("message: %s\n", err.msg);
    assert_non_null(strstr(err.msg, needle));
    assert_null(strchr(err.msg, '\n'));
    plan_result_free(&r);
}

/* One heavy block and three light ones on 8 equal devices: replication pays, so hetero and
 * pipedream replicate wherever the micro-batch count lets them. Block a's time per micro-batch
 * has a fixed part (by_microbatch_size), and every minibatch of the pipedream schedule
 * all-reduces the copies' 1e7-byte weights, so fewer micro-batches simulate faster. */
static const char *const heavy_first =
    "{\"format\": \"stagecraft-profile\", \"version\": 1, \"model\": \"heavy\","
    " \"microbatch_size\": 1, \"blocks\": ["
    "{\"name\": \"a\", \"forward_s\": 0.03, \"backward_s\": 0.06, \"activation_bytes\": 1000,"
    " \"parameter_bytes\": 1e7, \"by_microbatch_size\": [{\"size\": 1, \"forward_s\": 0.03,"
    " \"backward_s\": 0.06}, {\"size\": 8, \"forward_s\": 0.06, \"backward_s\": 0.12}]},"
    "{\"name\": \"b\", \"forward_s\": 0.01, \"backward_s\": 0.02, \"activation_bytes\": 1000,"
    " \"parameter_bytes\": 1e7},"
    "{\"name\": \"c\", \"forward_s\": 0.01, \"backward_s\": 0.02, \"activation_bytes\": 1000,"
    " \"parameter_bytes\": 1e7},"
    "{\"name\": \"d\", \"forward_s\": 0.01, \"backward_s\": 0.02, \"activation_bytes\": 1000,"
    " \"parameter_bytes\": 1e7}]}";

static int most_replicas(const plan_partition *p)
{
    int most = 1;
    for (int s = 0; s < p->n_stages; s++)
        most = p->n_dev[s] > most ? p->n_dev[s] : most;
    return most;
}

/* No strategy emits a plan the runtime refuses (docs/design/runtime.md, "Replicated stages"): with
 * gpipe, 1f1b and sliced a stage has at most as many copies as micro-batches, with pipedream
 * the count is a multiple of every stage's copies; a batch of one sample is never replicated
 * (and then no bottleneck is below the lower bound, which assumes no copies). */
static void test_replication_runtime_runs(void **state)
{
    (void)state;
    plan_profile *p;
    plan_cluster *c;
    sc_err err;
    assert_int_equal(
        plan_profile_parse_json(&p, "heavy.json", heavy_first, strlen(heavy_first), &err), SC_OK);
    assert_int_equal(plan_cluster_new_uniform(&c, 8, 1e10, 0, &err), SC_OK);
    const plan_sched_kind kinds[] = {PLAN_SCHED_GPIPE, PLAN_SCHED_1F1B, PLAN_SCHED_SLICED,
                                     PLAN_SCHED_PIPEDREAM};
    const int batches[] = {1, 8, 12};
    int replicated = 0, below = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (size_t b = 0; b < sizeof batches / sizeof *batches; b++)
            for (int m = 0; m <= batches[b]; m++) {
                if (m > 0 && batches[b] % m != 0)
                    continue;
                plan_request req = {.profile = p,
                                    .cluster = c,
                                    .batch = batches[b],
                                    .microbatches = m,
                                    .schedule = kinds[k]};
                for (int s = 0; s < PLAN_STRAT_COUNT; s++) {
                    plan_result r;
                    sc_err_clear(&err);
                    assert_int_equal(plan_run(&req, (plan_strategy)s, &r, &err), SC_OK);
                    assert_true(r.ok);
                    if (m > 0 && s != PLAN_STRAT_UMPIPE) /* umpipe: entries of its own */
                        assert_int_equal(r.n_micro, m);
                    if (!plan_partition_runnable(r.part, kinds[k], r.n_micro))
                        fail_msg("%s, schedule %s, batch %d, --microbatches %d: a stage of %d "
                                 "copies with %d micro-batches",
                                 plan_strategy_name((plan_strategy)s), plan_sched_name(kinds[k]),
                                 batches[b], m, most_replicas(r.part), r.n_micro);
                    if (batches[b] == 1)
                        assert_int_equal(most_replicas(r.part), 1);
                    /* each bound holds for the plans it is for: a device per stage, or any */
                    assert_true(r.lower_bound_replicated_s <= r.lower_bound_s);
                    assert_true(r.bottleneck_s >= r.lower_bound_replicated_s * (1 - 1e-12));
                    if (most_replicas(r.part) == 1)
                        assert_true(r.bottleneck_s >= r.lower_bound_s * (1 - 1e-12));
                    else
                        below |= r.bottleneck_s < r.lower_bound_s;
                    replicated |= most_replicas(r.part) > 1;
                    plan_result_free(&r);
                }
            }
    assert_true(replicated); /* the rule limits replication, it does not forbid it */
    /* copies of the heavy first block take it below the bound of a device per stage */
    assert_true(below);

    /* --microbatches auto under pipedream: a partition searched at the closed form's count
     * replicates, while one micro-batch (one optimizer step) simulates faster; searched again
     * at one, nothing is replicated */
    plan_cluster_destroy(&c);
    assert_int_equal(plan_cluster_new_uniform(&c, 4, 1e10, 0, &err), SC_OK);
    plan_request req = {.profile = p, .cluster = c, .batch = 4, .schedule = PLAN_SCHED_PIPEDREAM};
    plan_result r;
    assert_int_equal(plan_run(&req, PLAN_STRAT_PIPEDREAM, &r, &err), SC_OK);
    assert_int_equal(r.n_micro, 1);
    assert_int_equal(most_replicas(r.part), 1);
    assert_non_null(strstr(r.note, "searched again at 1 micro-batches"));
    /* the sweep was of the first partition, whose copies one micro-batch cannot run */
    int found = 0;
    for (int i = 0; i < r.n_sweep; i++)
        if (r.sweep_count[i] == 1) {
            found = 1;
            assert_false(r.sweep_runnable[i]);
        }
    assert_true(found);
    plan_result_free(&r);
    plan_profile_destroy(&p);
    plan_cluster_destroy(&c);
}

/* A server's measured all-reduce speed (reduce_bandwidth_bytes_per_s) is what the copies' all-
 * reduce is charged at when below its bandwidths: cheap, two copies of one stage win; measured
 * slow, a two-stage pipeline does. The plan says what it charged (stages[].allreduce_s). */
static const char reduce_profile[] =
    "{\"format\": \"stagecraft-profile\", \"version\": 1, \"model\": \"r\", "
    "\"reference_device\": \"ref\", \"microbatch_size\": 2, \"blocks\": ["
    "{\"name\": \"b0\", \"forward_s\": 0.01, \"backward_s\": 0.02, \"activation_bytes\": 1e5, "
    "\"parameter_bytes\": 4e6},"
    "{\"name\": \"b1\", \"forward_s\": 0.01, \"backward_s\": 0.02, \"activation_bytes\": 1e5, "
    "\"parameter_bytes\": 4e6},"
    "{\"name\": \"b2\", \"forward_s\": 0.01, \"backward_s\": 0.02, \"activation_bytes\": 1e5, "
    "\"parameter_bytes\": 4e6},"
    "{\"name\": \"b3\", \"forward_s\": 0.01, \"backward_s\": 0.02, \"activation_bytes\": 1e5, "
    "\"parameter_bytes\": 4e6}]}";

static plan_result plan_with_reduce(const plan_profile *p, const char *reduce_key, sc_status *rc,
                                    sc_err *err)
{
    char text[512];
    snprintf(text, sizeof text,
             "{\"format\": \"stagecraft-cluster\", \"version\": 1, \"device_types\": {\"ref\": "
             "{\"relative_speed\": 1}}, \"servers\": [{\"name\": \"h\", \"devices\": [\"ref\", "
             "\"ref\"], \"intra_bandwidth_bytes_per_s\": 1e10, \"nic_bandwidth_bytes_per_s\": "
             "1e10%s}]}",
             reduce_key);
    plan_cluster *c = NULL;
    plan_result r;
    memset(&r, 0, sizeof r);
    sc_err_clear(err);
    *rc = plan_cluster_parse(&c, "reduce.json", text, strlen(text), err);
    if (*rc != SC_OK)
        return r;
    plan_request req = {
        .profile = p, .cluster = c, .batch = 8, .microbatches = 4, .schedule = PLAN_SCHED_1F1B};
    *rc = plan_run(&req, PLAN_STRAT_HETERO, &r, err);
    plan_cluster_destroy(&c);
    return r;
}

static void test_measured_reduce_bandwidth(void **state)
{
    (void)state;
    plan_profile *p;
    sc_err err;
    sc_status rc;
    assert_int_equal(
        plan_profile_parse_json(&p, "reduce.json", reduce_profile, strlen(reduce_profile), &err),
        SC_OK);
    /* unmeasured: one stage on both devices, its 16 MB all-reduced at 1e10 B/s */
    plan_result r = plan_with_reduce(p, "", &rc, &err);
    assert_int_equal(rc, SC_OK);
    assert_int_equal(r.part->n_stages, 1);
    assert_int_equal(r.part->n_dev[0], 2);
    assert_float_equal(r.allreduce_s[0], 4.0 * 16e6 / (2 * 1e10), 1e-12);
    plan_result_free(&r);
    /* measured faster than the bandwidth: the bandwidth still bounds it */
    r = plan_with_reduce(p, ", \"reduce_bandwidth_bytes_per_s\": 1e11", &rc, &err);
    assert_int_equal(rc, SC_OK);
    assert_int_equal(r.part->n_stages, 1);
    assert_float_equal(r.allreduce_s[0], 4.0 * 16e6 / (2 * 1e10), 1e-12);
    plan_result_free(&r);
    /* measured at 1e8 B/s: 0.32 s an iteration would cost, so two stages, nothing to reduce */
    r = plan_with_reduce(p, ", \"reduce_bandwidth_bytes_per_s\": 1e8", &rc, &err);
    assert_int_equal(rc, SC_OK);
    assert_int_equal(r.part->n_stages, 2);
    assert_int_equal(r.part->n_dev[0] + r.part->n_dev[1], 2);
    assert_float_equal(r.allreduce_s[0] + r.allreduce_s[1], 0, 0);
    plan_result_free(&r);
    /* a bad figure names the key */
    r = plan_with_reduce(p, ", \"reduce_bandwidth_bytes_per_s\": -5", &rc, &err);
    assert_int_equal(rc, SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "reduce_bandwidth_bytes_per_s"));
    plan_profile_destroy(&p);
}

static void test_bad_requests(void **state)
{
    (void)state;
    plan_profile *p;
    plan_cluster *c;
    load(&p, &c, DATA "tiny.json", DATA "cluster2.json");
    plan_request req = {.profile = p, .cluster = c, .batch = 16, .microbatches = 3};
    expect_error(&req, PLAN_STRAT_MINMAX, "--microbatches 3");
    req.microbatches = 0;
    req.max_stages = 9;
    expect_error(&req, PLAN_STRAT_MINMAX, "more stages than the 5 devices");
    plan_cluster_destroy(&c);
    sc_err err;
    assert_int_equal(plan_cluster_load(&c, DATA "small_memory.json", &err), SC_OK);
    req.cluster = c;
    req.max_stages = 0;
    expect_error(&req, PLAN_STRAT_HETERO, "more than any device");
    plan_profile_destroy(&p);
    plan_cluster_destroy(&c);

    /* the default batch, 2 x devices x microbatch_size, no longer overflows an int (UBSan
     * reported it) and a batch past PLAN_MAX_BATCH is refused rather than simulated for
     * minutes */
    const char *big = "{\"format\": \"stagecraft-profile\", \"version\": 1,"
                      " \"microbatch_size\": 16777216, \"blocks\": [{\"name\": \"a\","
                      " \"forward_s\": 1, \"backward_s\": 1, \"activation_bytes\": 1}]}";
    sc_err_clear(&err);
    assert_int_equal(plan_profile_parse_json(&p, "big.json", big, strlen(big), &err), SC_OK);
    assert_int_equal(plan_cluster_new_uniform(&c, 1024, 1e9, 0, &err), SC_OK);
    plan_request big_req = {.profile = p, .cluster = c};
    assert_true(plan_request_default_batch(&big_req) == 2 * 1024 * (int64_t)16777216);
    expect_error(&big_req, PLAN_STRAT_UNIFORM, "give --batch");
    big_req.batch = PLAN_MAX_BATCH + 1;
    expect_error(&big_req, PLAN_STRAT_UNIFORM, "--batch");
    plan_profile_destroy(&p);
    plan_cluster_destroy(&c);
}

/* ---- pipedream's own block order on a branching graph ----
 * Two branches joined: A -> X1 -> X2 -> J, A -> Y1 -> Y2 -> J, J -> T, Input0 feeding A; the
 * profile's (Kahn) order is Input0, A, X1, X2, Y1, Y2, J, T = node1..node8. Work (forward +
 * backward, ms): A 18, X1 16, X2 18, Y1 8, Y2 4, J 2, T 4, total 70; parameters (1e9 bytes)
 * A 1, X1 2, X2 3, Y1 4, Y2 5, J 6, T 7; outputs of 100, 10, 20, 30, 40, 50, 60 bytes.
 * On 3 GPUs at 1e11 B/s a replica costs at least 1e9 / 1e11 s = 10 ms of all-reduce and
 * transfers take nanoseconds, so the plan is three single-device stages over nested states
 * D1 < D2. By hand over every pair: {A, Y1} 26 | {X1, Y2} 20 | {X2, J, T} 24 gives 26 ms;
 * the next best take 28 ms ({A} | {X1, Y1} | rest, {A, Y1} | {X1} | rest); cuts at prefixes of
 * the profile's order reach only 34 ms. Neither D1 = {A, Y1} nor D2 = {A, X1, Y1, Y2} is a
 * prefix of it: the plan's order is Input0, A, Y1 | X1, Y2 | X2, J, T. */
static const char *const two_branches =
    "node1 -- Input0 -- forward_compute_time=0, backward_compute_time=0, activation_size=0, "
    "parameter_size=0\n"
    "node2 -- A -- forward_compute_time=9, backward_compute_time=9, activation_size=100, "
    "parameter_size=1e9\n"
    "node3 -- X1 -- forward_compute_time=8, backward_compute_time=8, activation_size=10, "
    "parameter_size=2e9\n"
    "node4 -- X2 -- forward_compute_time=9, backward_compute_time=9, activation_size=20, "
    "parameter_size=3e9\n"
    "node5 -- Y1 -- forward_compute_time=4, backward_compute_time=4, activation_size=30, "
    "parameter_size=4e9\n"
    "node6 -- Y2 -- forward_compute_time=2, backward_compute_time=2, activation_size=40, "
    "parameter_size=5e9\n"
    "node7 -- J -- forward_compute_time=1, backward_compute_time=1, activation_size=50, "
    "parameter_size=6e9\n"
    "node8 -- T -- forward_compute_time=2, backward_compute_time=2, activation_size=60, "
    "parameter_size=7e9\n"
    "\tnode1 -- node2\n\tnode2 -- node3\n\tnode3 -- node4\n\tnode2 -- node5\n"
    "\tnode5 -- node6\n\tnode4 -- node7\n\tnode6 -- node7\n\tnode7 -- node8\n";

/* Runs req and writes the results' JSON; returns the parsed document. */
static json_t *plans_json(const plan_request *req, const plan_result *r, int n)
{
    sc_err err;
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(plan_write_json(f, req, r, n, &err), SC_OK);
    rewind(f);
    json_error_t jerr;
    json_t *root = json_loadf(f, 0, &jerr);
    fclose(f);
    if (root == NULL)
        print_error("%s at %d:%d\n", jerr.text, jerr.line, jerr.column);
    assert_non_null(root);
    return root;
}

static int name_pos(json_t *order, const char *name)
{
    for (size_t i = 0; i < json_array_size(order); i++)
        if (strcmp(json_string_value(json_array_get(order, i)), name) == 0)
            return (int)i;
    return -1;
}

static void test_pipedream_block_order(void **state)
{
    (void)state;
    plan_profile *p = NULL;
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_profile_parse_graph(&p, "two.graph.txt", two_branches, &err), SC_OK);
    assert_int_equal(plan_cluster_new_uniform(&c, 3, 1e11, 80e9, &err), SC_OK);
    /* one micro-batch of the whole batch: the plan's times are the profile's own, so the
     * stage times are PipeDream's */
    plan_request req = {.profile = p,
                        .cluster = c,
                        .batch = 8,
                        .microbatches = 1,
                        .schedule = PLAN_SCHED_1F1B,
                        .record_trace = 1};
    plan_result r[2];
    assert_int_equal(plan_run(&req, PLAN_STRAT_PIPEDREAM, &r[0], &err), SC_OK);
    const plan_partition *pt = r[0].part;
    assert_float_equal(r[0].objective_s, 0.026, 1e-12);
    assert_int_equal(pt->n_stages, 3);
    const int order[8] = {0, 1, 4, 2, 5, 3, 6, 7};
    assert_non_null(pt->order);
    assert_int_equal(pt->n_order, 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(pt->order[i], order[i]);
    /* each stage holds exactly the blocks of its state minus the previous one */
    const char *stage_nodes[3][4] = {{"node1", "node2", "node5", NULL},
                                     {"node3", "node6", NULL},
                                     {"node4", "node7", "node8", NULL}};
    const double compute[3] = {0.026, 0.020, 0.024};
    /* 4 x parameters + the outputs stashed (one micro-batch in flight) */
    const double memory[3] = {4 * 5e9 + 130, 4 * 7e9 + 50, 4 * 16e9 + 130};
    int next = 0;
    double slowest = 0;
    for (int s = 0; s < 3; s++) {
        assert_int_equal(pt->first[s], next);
        assert_int_equal(pt->n_dev[s], 1);
        int k = 0;
        for (int i = pt->first[s]; i <= pt->last[s]; i++, k++) {
            assert_non_null(stage_nodes[s][k]);
            assert_string_equal(p->blocks[pt->order[i]].name, stage_nodes[s][k]);
        }
        assert_null(stage_nodes[s][k]);
        next = pt->last[s] + 1;
        assert_float_equal(r[0].compute_s[s], compute[s], 1e-12);
        assert_float_equal(r[0].sim.busy_s[s], compute[s], 1e-12);
        assert_float_equal(r[0].peak_memory_bytes[s], memory[s], 1e-3);
        slowest = r[0].compute_s[s] > slowest ? r[0].compute_s[s] : slowest;
    }
    assert_int_equal(next, 8);
    assert_float_equal(slowest, r[0].objective_s, 1e-12);
    /* the cuts carry 130 and 50 bytes: nanoseconds, so the bottleneck is the first stage */
    assert_float_equal(r[0].bottleneck_s, 0.026, 1e-12);
    assert_true(r[0].fits_memory);
    assert_string_equal(r[0].note, "");
    /* the profile itself keeps its order, so another plan of the same run starts from it */
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &r[1], &err), SC_OK);
    assert_null(r[1].part->order);
    assert_string_equal(p->blocks[2].name, "node3");
    json_t *root = plans_json(&req, r, 2);
    json_t *pd = json_array_get(json_object_get(root, "plans"), 0);
    json_t *mm = json_array_get(json_object_get(root, "plans"), 1);
    assert_null(json_object_get(mm, "block_order"));
    assert_null(json_object_get(pd, "note"));
    json_t *bo = json_object_get(pd, "block_order");
    assert_int_equal(json_array_size(bo), 8);
    const char *names[8] = {"node1", "node2", "node5", "node3", "node6", "node4", "node7", "node8"};
    for (int i = 0; i < 8; i++)
        assert_string_equal(json_string_value(json_array_get(bo, (size_t)i)), names[i]);
    /* a topological order of the file's edges */
    const char *edges[8][2] = {{"node1", "node2"}, {"node2", "node3"}, {"node3", "node4"},
                               {"node2", "node5"}, {"node5", "node6"}, {"node4", "node7"},
                               {"node6", "node7"}, {"node7", "node8"}};
    for (int e = 0; e < 8; e++) {
        int a = name_pos(bo, edges[e][0]), b = name_pos(bo, edges[e][1]);
        assert_true(a >= 0 && b >= 0 && a < b);
    }
    json_t *st = json_object_get(pd, "stages");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(st, 1), "first_block")), 3);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(st, 1), "last_block")), 4);
    json_decref(root);
    plan_result_free(&r[0]);
    plan_result_free(&r[1]);
    plan_profile_destroy(&p);
    plan_cluster_destroy(&c);
}

static void test_pipedream_chain_has_no_block_order(void **state)
{
    (void)state;
    /* a graph.txt whose DAG is a path: its states are the prefixes, the order stands */
    const char *text = "node1 -- Input0 -- forward_compute_time=0, backward_compute_time=0, "
                       "activation_size=0, parameter_size=0\n"
                       "node2 -- A -- forward_compute_time=3, backward_compute_time=3, "
                       "activation_size=1, parameter_size=1\n"
                       "node3 -- B -- forward_compute_time=1, backward_compute_time=1, "
                       "activation_size=1, parameter_size=1\n"
                       "node4 -- C -- forward_compute_time=2, backward_compute_time=2, "
                       "activation_size=1, parameter_size=1\n"
                       "\tnode1 -- node2\n\tnode2 -- node3\n\tnode3 -- node4\n";
    plan_profile *p = NULL;
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_profile_parse_graph(&p, "chain.graph.txt", text, &err), SC_OK);
    assert_int_equal(plan_cluster_new_uniform(&c, 2, 1e9, 0, &err), SC_OK);
    plan_request req = {.profile = p, .cluster = c, .batch = 8, .schedule = PLAN_SCHED_1F1B};
    plan_result r;
    assert_int_equal(plan_run(&req, PLAN_STRAT_PIPEDREAM, &r, &err), SC_OK);
    assert_null(r.part->order);
    json_t *root = plans_json(&req, &r, 1);
    json_t *pl = json_array_get(json_object_get(root, "plans"), 0);
    assert_non_null(json_object_get(pl, "stages"));
    assert_null(json_object_get(pl, "block_order"));
    json_decref(root);
    plan_result_free(&r);
    plan_profile_destroy(&p);
    plan_cluster_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_strategies_json),
        cmocka_unit_test(test_bubble_through_driver),
        cmocka_unit_test(test_umpipe_simulated),
        cmocka_unit_test(test_optimizer_step_counted),
        cmocka_unit_test(test_auto_microbatches_and_trace),
        cmocka_unit_test(test_replication_runtime_runs),
        cmocka_unit_test(test_measured_reduce_bandwidth),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_pipedream_block_order),
        cmocka_unit_test(test_pipedream_chain_has_no_block_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
