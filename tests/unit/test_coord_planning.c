/* coordinator/planning: the cluster document built from the workers' hardware reports, and
 * compute_slots where workers share processors (CPU workers beyond the host's cores, CUDA
 * workers on fewer GPUs than workers), which the planner's simulator then shares among the
 * stages that compute at once; each server's NIC bandwidth, measured links before reported
 * figures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan.h"
#include "coordinator/planning.h"

#define PROFILE                                                                                    \
    "{\"format\": \"stagecraft-profile\", \"version\": 1, \"model\": \"m\", "                      \
    "\"microbatch_size\": 1, \"blocks\": ["                                                        \
    "{\"name\": \"b0\", \"forward_s\": 1, \"backward_s\": 2, \"activation_bytes\": 0, "            \
    "\"parameter_bytes\": 4},"                                                                     \
    "{\"name\": \"b1\", \"forward_s\": 1, \"backward_s\": 2, \"activation_bytes\": 0, "            \
    "\"parameter_bytes\": 4},"                                                                     \
    "{\"name\": \"b2\", \"forward_s\": 1, \"backward_s\": 2, \"activation_bytes\": 0, "            \
    "\"parameter_bytes\": 4},"                                                                     \
    "{\"name\": \"b3\", \"forward_s\": 1, \"backward_s\": 2, \"activation_bytes\": 0, "            \
    "\"parameter_bytes\": 4}]}"

typedef struct {
    Stagecraft__HardwareReport hw[8];
    Stagecraft__Device dev[8];
    Stagecraft__Device *devp[8];
    coord_plan_worker w[8];
    char id[8][8];
} fleet;

/* Worker i on `host`, driving `kind` device `index` ("cuda": bus id by index), with `cores`. */
static void add(fleet *f, int i, const char *host, const char *kind, int index, uint32_t cores)
{
    static const char *const bus[] = {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"};
    stagecraft__device__init(&f->dev[i]);
    f->dev[i].kind = (char *)kind;
    f->dev[i].name = (char *)(strcmp(kind, "cuda") == 0 ? "gpu" : "cpu");
    f->dev[i].index = (uint32_t)index;
    f->dev[i].pci_bus_id = (char *)(strcmp(kind, "cuda") == 0 ? bus[index % 3] : "");
    f->dev[i].memory_bytes = 1ull << 30;
    f->devp[i] = &f->dev[i];
    stagecraft__hardware_report__init(&f->hw[i]);
    f->hw[i].hostname = (char *)host;
    f->hw[i].n_devices = 1;
    f->hw[i].devices = &f->devp[i];
    f->hw[i].cpu_cores = cores;
    snprintf(f->id[i], sizeof f->id[i], "w%d", i);
    f->w[i] = (coord_plan_worker){.id = f->id[i], .hw = &f->hw[i], .profile_json = PROFILE};
}

/* compute_slots of each server of the document (0 when absent), into slots[]; returns the
 * number of servers. */
static int slots_of(const fleet *f, int n, int *slots)
{
    char *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_cluster_json(f->w, (size_t)n, &doc, &err), SC_OK);
    json_error_t jerr;
    json_t *root = json_loads(doc, 0, &jerr);
    assert_non_null(root);
    json_t *servers = json_object_get(root, "servers");
    int ns = (int)json_array_size(servers);
    for (int v = 0; v < ns; v++)
        slots[v] =
            (int)json_integer_value(json_object_get(json_array_get(servers, v), "compute_slots"));
    /* the planner reads what the coordinator writes */
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_parse(&c, "cluster", doc, strlen(doc), &err), SC_OK);
    assert_int_equal(c->n_servers, ns);
    for (int v = 0; v < ns; v++)
        assert_int_equal(c->servers[v].compute_slots, slots[v]);
    plan_cluster_destroy(&c);
    json_decref(root);
    free(doc);
    return ns;
}

static void test_compute_slots(void **state)
{
    (void)state;
    fleet f;
    int slots[8];
    /* 4 CPU workers on 2 cores share them */
    for (int i = 0; i < 4; i++)
        add(&f, i, "a", "cpu", 0, 2);
    assert_int_equal(slots_of(&f, 4, slots), 1);
    assert_int_equal(slots[0], 2);
    /* 2 CPU workers on 4 cores: a core each, nothing shared */
    for (int i = 0; i < 2; i++)
        add(&f, i, "a", "cpu", 0, 4);
    assert_int_equal(slots_of(&f, 2, slots), 1);
    assert_int_equal(slots[0], 0);
    /* 3 CUDA workers on one GPU share it; on host b two workers on two GPUs do not */
    for (int i = 0; i < 3; i++)
        add(&f, i, "a", "cuda", 0, 64);
    add(&f, 3, "b", "cuda", 0, 64);
    add(&f, 4, "b", "cuda", 1, 64);
    assert_int_equal(slots_of(&f, 5, slots), 2);
    assert_int_equal(slots[0], 1);
    assert_int_equal(slots[1], 0);
    /* a host of CPU workers beyond its cores next to one within them */
    for (int i = 0; i < 3; i++)
        add(&f, i, "a", "cpu", 0, 1);
    add(&f, 3, "b", "cpu", 0, 8);
    assert_int_equal(slots_of(&f, 4, slots), 2);
    assert_int_equal(slots[0], 1);
    assert_int_equal(slots[1], 0);
}

/* A profile of four blocks whose forward and backward take `scale` and 2 * `scale` seconds. */
static char *profile_scaled(double scale)
{
    json_t *blocks = json_array();
    for (int b = 0; b < 4; b++)
        json_array_append_new(blocks,
                              json_pack("{s:s#, s:f, s:f, s:i, s:i}", "name", "b0b1b2b3" + 2 * b,
                                        (int)2, "forward_s", scale, "backward_s", 2 * scale,
                                        "activation_bytes", 0, "parameter_bytes", 4));
    json_t *doc = json_pack("{s:s, s:i, s:s, s:i, s:o}", "format", "stagecraft-profile", "version",
                            1, "model", "m", "microbatch_size", 1, "blocks", blocks);
    char *s = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    return s;
}

/* Workers of one device name are one type only when their measured speeds agree (within 5%):
 * a slow CPU worker registered first does not make the fast ones look slow, and each type
 * carries its own speed and block times. */
static void test_types_by_measured_speed(void **state)
{
    (void)state;
    fleet f;
    static const double scale[] = {3.0, 1.0, 1.03, 2.95, 1.5};
    char *profiles[5];
    for (int i = 0; i < 5; i++) {
        add(&f, i, i < 2 ? "a" : "b", "cpu", 0, 8);
        profiles[i] = profile_scaled(scale[i]);
        f.w[i].profile_json = profiles[i];
    }
    char *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_cluster_json(f.w, 5, &doc, &err), SC_OK);
    json_error_t jerr;
    json_t *root = json_loads(doc, 0, &jerr);
    assert_non_null(root);
    json_t *types = json_object_get(root, "device_types");
    assert_int_equal(json_object_size(types), 3);
    /* w0 (the reference) and w3 agree; w1 and w2 agree; w4 is a type of its own */
    static const char *const want[] = {"cpu", "cpu@w1", "cpu@w1", "cpu", "cpu@w4"};
    json_t *servers = json_object_get(root, "servers");
    for (int i = 0; i < 5; i++) {
        json_t *devs = json_object_get(json_array_get(servers, i < 2 ? 0 : 1), "devices");
        assert_string_equal(json_string_value(json_array_get(devs, i < 2 ? i : i - 2)), want[i]);
    }
    assert_float_equal(
        json_number_value(json_object_get(json_object_get(types, "cpu"), "relative_speed")), 1.0,
        1e-12);
    assert_float_equal(
        json_number_value(json_object_get(json_object_get(types, "cpu@w1"), "relative_speed")), 3.0,
        1e-12);
    assert_float_equal(
        json_number_value(json_object_get(json_object_get(types, "cpu@w4"), "relative_speed")), 2.0,
        1e-12);
    json_t *bt =
        json_object_get(json_object_get(json_object_get(types, "cpu@w4"), "block_times"), "b2");
    assert_float_equal(json_number_value(json_object_get(bt, "backward_s")), 3.0, 1e-12);
    /* the planner reads the types and gives the fast device its block times */
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_parse(&c, "cluster", doc, strlen(doc), &err), SC_OK);
    plan_cluster_destroy(&c);
    json_decref(root);
    free(doc);
    for (int i = 0; i < 5; i++)
        free(profiles[i]);
}

/* A worker's CFS quota (its report's cpu_quota_fraction and period) goes into its type's
 * cpu_quota, which the planner reads; workers of equal speed under other quotas are other
 * types (the same work paces differently after a wait), under the same quota one type. */
static void test_types_by_quota(void **state)
{
    (void)state;
    fleet f;
    for (int i = 0; i < 4; i++)
        add(&f, i, "a", "cpu", 0, 8);
    f.dev[1].cpu_quota_fraction = f.dev[2].cpu_quota_fraction = 0.25;
    f.dev[1].cpu_quota_period_s = f.dev[2].cpu_quota_period_s = 0.005;
    f.dev[3].cpu_quota_fraction = 0.25;
    f.dev[3].cpu_quota_period_s = 0.02;
    char *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_cluster_json(f.w, 4, &doc, &err), SC_OK);
    json_t *root = json_loads(doc, 0, NULL);
    assert_non_null(root);
    json_t *types = json_object_get(root, "device_types");
    assert_int_equal(json_object_size(types), 3);
    json_t *devs = json_object_get(json_array_get(json_object_get(root, "servers"), 0), "devices");
    static const char *const want[] = {"cpu", "cpu@w1", "cpu@w1", "cpu@w3"};
    for (int i = 0; i < 4; i++)
        assert_string_equal(json_string_value(json_array_get(devs, (size_t)i)), want[i]);
    assert_null(json_object_get(json_object_get(types, "cpu"), "cpu_quota"));
    json_t *q = json_object_get(json_object_get(types, "cpu@w3"), "cpu_quota");
    assert_float_equal(json_number_value(json_object_get(q, "fraction")), 0.25, 1e-12);
    assert_float_equal(json_number_value(json_object_get(q, "period_s")), 0.02, 1e-12);
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_parse(&c, "cluster", doc, strlen(doc), &err), SC_OK);
    int seen = 0;
    for (int t = 0; t < c->n_types; t++) {
        if (strcmp(c->types[t].name, "cpu") == 0) {
            assert_true(c->types[t].quota_fraction == 0);
            seen++;
        } else if (strcmp(c->types[t].name, "cpu@w1") == 0) {
            assert_float_equal(c->types[t].quota_fraction, 0.25, 1e-12);
            assert_float_equal(c->types[t].quota_period_s, 0.005, 1e-12);
            seen++;
        }
    }
    assert_int_equal(seen, 2);
    plan_cluster_destroy(&c);
    json_decref(root);
    free(doc);
    /* a cluster file's quota out of range is refused, naming the key */
    const char *bad = "{\"format\": \"stagecraft-cluster\", \"version\": 1, \"device_types\": "
                      "{\"cpu\": {\"relative_speed\": 1, \"cpu_quota\": {\"fraction\": 0, "
                      "\"period_s\": 0.01}}}, \"servers\": [{\"name\": \"a\", \"devices\": "
                      "[\"cpu\"], \"intra_bandwidth_bytes_per_s\": 1e9, "
                      "\"nic_bandwidth_bytes_per_s\": 1e9}]}";
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_parse(&c, "cluster", bad, strlen(bad), &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "fraction"));
}

/* A CPU worker's measured transport rate (bytes per CPU second) times the cores its quota gives
 * (at most one) caps its server's bandwidths; a worker without the figure caps nothing. */
static void test_cpu_transport_caps(void **state)
{
    (void)state;
    fleet f;
    add(&f, 0, "a", "cpu", 0, 8);
    add(&f, 1, "a", "cpu", 0, 8);
    add(&f, 2, "b", "cpu", 0, 8);
    add(&f, 3, "c", "cpu", 0, 8);
    for (int i = 0; i < 4; i++) {
        f.hw[i].intra_bandwidth_bytes_per_s = 20e9;
        f.hw[i].nic_bandwidth_bytes_per_s = 1.25e9;
        f.dev[i].cpu_threads = 2;
    }
    f.dev[0].transport_bytes_per_cpu_s = 2e9; /* no quota: one core's worth, 2e9 */
    f.dev[1].transport_bytes_per_cpu_s = 2e9; /* 0.1 of its 2 threads: 0.2 cores, 4e8 */
    f.dev[1].cpu_quota_fraction = 0.1;
    f.dev[1].cpu_quota_period_s = 0.005;
    f.dev[2].transport_bytes_per_cpu_s = 1e10; /* above the NIC: the NIC stays */
    /* worker 3: not measured (an older worker): nothing capped */
    char *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_cluster_json(f.w, 4, &doc, &err), SC_OK);
    json_t *root = json_loads(doc, 0, NULL);
    assert_non_null(root);
    json_t *servers = json_object_get(root, "servers");
    static const double intra[] = {4e8, 1e10, 20e9}, nic[] = {4e8, 1.25e9, 1.25e9};
    for (size_t v = 0; v < 3; v++) {
        json_t *srv = json_array_get(servers, v);
        assert_float_equal(json_number_value(json_object_get(srv, "intra_bandwidth_bytes_per_s")),
                           intra[v], 1e-3);
        assert_float_equal(json_number_value(json_object_get(srv, "nic_bandwidth_bytes_per_s")),
                           nic[v], 1e-3);
    }
    json_decref(root);
    free(doc);
}

/* The planner's prediction for 4 stages that share 2 processors is slower than with a device
 * each, and no faster than the work spread over the 2 processors. */
static void test_shared_prediction(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "{\"format\": \"stagecraft-cluster\", \"version\": 1, \"device_types\": {\"cpu\": "
        "{\"relative_speed\": 1}}, \"servers\": [{\"name\": \"a\", \"devices\": [\"cpu\", "
        "\"cpu\", \"cpu\", \"cpu\"], \"intra_bandwidth_bytes_per_s\": 1e12, "
        "\"nic_bandwidth_bytes_per_s\": 1e12}]}",
        "{\"format\": \"stagecraft-cluster\", \"version\": 1, \"device_types\": {\"cpu\": "
        "{\"relative_speed\": 1}}, \"servers\": [{\"name\": \"a\", \"devices\": [\"cpu\", "
        "\"cpu\", \"cpu\", \"cpu\"], \"intra_bandwidth_bytes_per_s\": 1e12, "
        "\"nic_bandwidth_bytes_per_s\": 1e12, \"compute_slots\": 2}]}",
    };
    sc_err err;
    sc_err_clear(&err);
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_parse_json(&p, "profile", PROFILE, strlen(PROFILE), &err), SC_OK);
    double t[2];
    for (int k = 0; k < 2; k++) {
        plan_cluster *c = NULL;
        assert_int_equal(plan_cluster_parse(&c, "cluster", docs[k], strlen(docs[k]), &err), SC_OK);
        plan_request req = {.profile = p,
                            .cluster = c,
                            .batch = 8,
                            .microbatches = 8,
                            .schedule = PLAN_SCHED_GPIPE};
        plan_result r;
        assert_int_equal(plan_run(&req, PLAN_STRAT_UNIFORM, &r, &err), SC_OK);
        assert_int_equal(r.part->n_stages, 4);
        t[k] = r.iteration_time_s;
        plan_result_free(&r);
        plan_cluster_destroy(&c);
    }
    /* a device each: (8 + 4 - 1) x 3 s; shared: at least all 96 s of work over 2 processors */
    assert_float_equal(t[0], 33.0, 1e-9);
    assert_true(t[1] > t[0] + 1.0);
    assert_true(t[1] >= 96.0 / 2 - 1e-9);
    /* every strategy's plan but umpipe's is simulated with the sharing, replicated stages
     * weighing their copies: none beats the work over the 2 processors, and hetero (which picks by
     * simulation) is no slower than the 4-stage uniform plan */
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_parse(&c, "cluster", docs[1], strlen(docs[1]), &err), SC_OK);
    plan_request req = {
        .profile = p, .cluster = c, .batch = 8, .microbatches = 8, .schedule = PLAN_SCHED_1F1B};
    for (int k = 0; k < PLAN_STRAT_COUNT; k++) {
        if (k == PLAN_STRAT_UMPIPE)
            continue; /* its per-stage-size simulation has no shared processors (formats.md) */
        plan_result r;
        sc_err_clear(&err);
        assert_int_equal(plan_run(&req, (plan_strategy)k, &r, &err), SC_OK);
        if (!(r.iteration_time_s >= 96.0 / 2 - 1e-9))
            fail_msg("%s: %.6g s on 2 shared processors, below the work's 48 s",
                     plan_strategy_name((plan_strategy)k), r.iteration_time_s);
        if (k == PLAN_STRAT_HETERO)
            assert_true(r.iteration_time_s <= t[1] * (1 + 1e-9) + 1e-9 || r.iteration_time_s <= 0);
        plan_result_free(&r);
    }
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* coord_plan_job's plan for `spec` on the first n workers of `f`, parsed; the caller
 * json_decref()s it. */
static json_t *plan_of(const coord_jobspec *spec, const fleet *f, int n)
{
    char *plan = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_plan_job(spec, f->w, (size_t)n, 0, &plan, &err), SC_OK);
    json_error_t jerr;
    json_t *root = json_loads(plan, 0, &jerr);
    assert_non_null(root);
    free(plan);
    return root;
}

/* A job the runtime cannot replicate (one sample a batch: one micro-batch) gets the strategy's
 * own plan without copies, not a replicated plan that the coordinator would have to replace. */
static void test_no_replicas_for_one_sample(void **state)
{
    (void)state;
    fleet f;
    for (int i = 0; i < 8; i++)
        add(&f, i, "a", "cpu", 0, 64);
    const char *strategies[] = {"hetero", "pipedream"};
    const char *schedules[] = {"1f1b", "gpipe", "pipedream"};
    for (size_t k = 0; k < 2; k++)
        for (size_t j = 0; j < 3; j++) {
            coord_jobspec spec;
            memset(&spec, 0, sizeof spec);
            spec.batch_size = 1;
            snprintf(spec.schedule, sizeof spec.schedule, "%s", schedules[j]);
            snprintf(spec.strategy, sizeof spec.strategy, "%s", strategies[k]);
            json_t *root = plan_of(&spec, &f, 8);
            assert_string_equal(json_string_value(json_object_get(root, "strategy")),
                                strategies[k]);
            const char *note = json_string_value(json_object_get(root, "note"));
            assert_true(note == NULL || strstr(note, "cannot run") == NULL);
            assert_int_equal(
                json_integer_value(json_object_get(json_object_get(root, "microbatches"), "count")),
                1);
            size_t i;
            json_t *st;
            json_array_foreach(json_object_get(root, "stages"), i, st)
                assert_int_equal(json_array_size(json_object_get(st, "devices")), 1);
            json_decref(root);
        }
}

/* A model whose embedding and head are tied relays their gradients between its end stages after
 * each stage's copies all-reduce (worker/runtime/runner_tie.c), so its strategy's replicated
 * plan stands: the same plan as the job untied, with no note. */
static void test_replicas_for_tied_model(void **state)
{
    (void)state;
    /* the first block's parameters are costly to all-reduce, the others' are not: hetero keeps
     * the first block on one worker and replicates the rest */
    static const char *const profile =
        "{\"format\": \"stagecraft-profile\", \"version\": 1, \"model\": \"m\", "
        "\"microbatch_size\": 1, \"blocks\": ["
        "{\"name\": \"b0\", \"forward_s\": 0.001, \"backward_s\": 0.002, \"activation_bytes\": 0, "
        "\"parameter_bytes\": 100000000},"
        "{\"name\": \"b1\", \"forward_s\": 0.001, \"backward_s\": 0.002, \"activation_bytes\": 0, "
        "\"parameter_bytes\": 4},"
        "{\"name\": \"b2\", \"forward_s\": 0.001, \"backward_s\": 0.002, \"activation_bytes\": 0, "
        "\"parameter_bytes\": 4},"
        "{\"name\": \"b3\", \"forward_s\": 0.001, \"backward_s\": 0.002, \"activation_bytes\": 0, "
        "\"parameter_bytes\": 4}]}";
    fleet f;
    for (int i = 0; i < 8; i++) {
        add(&f, i, "a", "cpu", 0, 64);
        f.w[i].profile_json = profile;
    }
    char *plans[2];
    for (int tied = 0; tied < 2; tied++) {
        coord_jobspec spec;
        memset(&spec, 0, sizeof spec);
        spec.batch_size = 8;
        spec.tied = tied;
        snprintf(spec.schedule, sizeof spec.schedule, "1f1b");
        snprintf(spec.strategy, sizeof spec.strategy, "hetero");
        json_t *root = plan_of(&spec, &f, 8);
        size_t i, most = 0, stages = json_array_size(json_object_get(root, "stages"));
        json_t *st;
        json_array_foreach(json_object_get(root, "stages"), i, st)
        {
            size_t r = json_array_size(json_object_get(st, "devices"));
            most = r > most ? r : most;
        }
        assert_true(most > 1 && stages > 1); /* replicated stages of a pipeline */
        assert_null(json_object_get(root, "note"));
        plans[tied] = json_dumps(json_object_get(root, "stages"), JSON_COMPACT | JSON_SORT_KEYS);
        assert_non_null(plans[tied]);
        json_decref(root);
    }
    assert_string_equal(plans[1], plans[0]);
    free(plans[0]);
    free(plans[1]);
}

/* A job naming zb1 gets a zb1 plan the workers run: copies of a stage at most the
 * micro-batches (each copy runs one at least), the split's W share stated. */
static void test_zb1_job(void **state)
{
    (void)state;
    fleet f;
    for (int i = 0; i < 4; i++)
        add(&f, i, "a", "cpu", 0, 64);
    coord_jobspec spec;
    memset(&spec, 0, sizeof spec);
    spec.batch_size = 16;
    snprintf(spec.schedule, sizeof spec.schedule, "zb1");
    snprintf(spec.strategy, sizeof spec.strategy, "hetero");
    json_t *root = plan_of(&spec, &f, 4);
    assert_string_equal(json_string_value(json_object_get(root, "schedule")), "zb1");
    assert_non_null(json_object_get(root, "backward_split"));
    json_int_t m =
        json_integer_value(json_object_get(json_object_get(root, "microbatches"), "count"));
    size_t i;
    json_t *st;
    json_array_foreach(json_object_get(root, "stages"), i, st)
    {
        size_t r = json_array_size(json_object_get(st, "devices"));
        assert_true(r >= 1 && (json_int_t)r <= m);
        /* the W the stage may defer within 1f1b's peak memory, which its workers read */
        assert_true(json_is_integer(json_object_get(st, "deferred_w")));
        assert_true(json_integer_value(json_object_get(st, "deferred_w")) >= 0);
    }
    json_decref(root);
}

/* A profile of four equal blocks (forward 1 s, backward 2 s a sample) whose backward is W for
 * `w` of its 2 s, each of `pb` parameter bytes (200000000: a device of 1 GiB holds one block
 * with its gradient and optimizer state, so a pipeline of four stages). */
#define PROFILE_W(w, pb)                                                                           \
    "{\"format\": \"stagecraft-profile\", \"version\": 1, \"model\": \"m\", "                      \
    "\"microbatch_size\": 1, \"blocks\": ["                                                        \
    "{\"name\": \"b0\", \"forward_s\": 1, \"backward_s\": 2, \"wgrad_s\": " w ", "                 \
    "\"activation_bytes\": 0, \"parameter_bytes\": " pb "},"                                       \
    "{\"name\": \"b1\", \"forward_s\": 1, \"backward_s\": 2, \"wgrad_s\": " w ", "                 \
    "\"activation_bytes\": 0, \"parameter_bytes\": " pb "},"                                       \
    "{\"name\": \"b2\", \"forward_s\": 1, \"backward_s\": 2, \"wgrad_s\": " w ", "                 \
    "\"activation_bytes\": 0, \"parameter_bytes\": " pb "},"                                       \
    "{\"name\": \"b3\", \"forward_s\": 1, \"backward_s\": 2, \"wgrad_s\": " w ", "                 \
    "\"activation_bytes\": 0, \"parameter_bytes\": " pb "}]}"

/* The plan of a job with schedule auto on `n` CPU workers of `profile`; the caller
 * json_decref()s it. */
static json_t *auto_plan(const char *profile, int n)
{
    fleet f;
    for (int i = 0; i < n; i++) {
        add(&f, i, "a", "cpu", 0, 64);
        f.w[i].profile_json = profile;
    }
    coord_jobspec spec;
    memset(&spec, 0, sizeof spec);
    spec.batch_size = 16;
    snprintf(spec.schedule, sizeof spec.schedule, "auto");
    snprintf(spec.strategy, sizeof spec.strategy, "hetero");
    return plan_of(&spec, &f, n);
}

static const char *sched_of(json_t *plan)
{
    return json_string_value(json_object_get(plan, "schedule"));
}

/* schedule auto takes the fastest predicted schedule: zb1 on a pipeline whose backward is half
 * W (its idle time is (p-1)(F+B-W) against 1f1b's (p-1)(F+B+W)), with the pick stated in the
 * note; not zb1 on one worker (one stage, nothing to gain: a tie keeps 1f1b) nor where W takes no
 * time (zb1's lists are 1f1b's then, so no faster). */
static void test_auto_picks_zb1_where_it_wins(void **state)
{
    (void)state;
    json_t *p = auto_plan(PROFILE_W("1", "200000000"), 4);
    assert_string_equal(sched_of(p), "zb1");
    assert_true(json_array_size(json_object_get(p, "stages")) > 1);
    assert_non_null(json_object_get(p, "backward_split"));
    assert_non_null(strstr(json_string_value(json_object_get(p, "note")), "auto: zb1"));
    double zb1_s = json_number_value(json_object_get(p, "iteration_time_s"));
    json_decref(p);

    p = auto_plan(PROFILE_W("1", "4"), 1);
    assert_string_equal(sched_of(p), "1f1b");
    assert_int_equal(json_array_size(json_object_get(p, "stages")), 1);
    json_decref(p);

    p = auto_plan(PROFILE_W("0", "200000000"), 4);
    assert_string_equal(sched_of(p), "1f1b");
    assert_true(json_number_value(json_object_get(p, "iteration_time_s")) > zb1_s);
    json_decref(p);
}

/* A server's NIC figure is the least measured link of its workers, marked "measured"; with no
 * measurement the hardware report's figure stays ("nic"), or 10 GbE is assumed ("assumed"). */
static void test_measured_links(void **state)
{
    (void)state;
    fleet f;
    add(&f, 0, "a", "cpu", 0, 8);
    add(&f, 1, "a", "cpu", 0, 8);
    add(&f, 2, "b", "cpu", 0, 8);
    add(&f, 3, "c", "cpu", 0, 8);
    add(&f, 4, "d", "cpu", 0, 8);
    add(&f, 5, "d", "cpu", 0, 8);
    f.hw[0].nic_bandwidth_bytes_per_s = f.hw[1].nic_bandwidth_bytes_per_s = 1.25e10;
    f.w[0].link_bytes_per_s = 2e8;
    f.w[1].link_bytes_per_s = 1.2e8;         /* a: the lesser of its two workers */
    f.hw[3].nic_bandwidth_bytes_per_s = 5e9; /* c: reported, not measured (a failed probe) */
    f.w[5].link_bytes_per_s = 1.25e6;        /* d: one of two measured */
    static const double want_bw[] = {1.2e8, 1.25e9, 5e9, 1.25e6};
    static const char *const want_src[] = {"measured", "assumed", "nic", "measured"};
    char *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_cluster_json(f.w, 6, &doc, &err), SC_OK);
    json_t *root = json_loads(doc, 0, NULL);
    json_t *servers = json_object_get(root, "servers");
    assert_int_equal(json_array_size(servers), 4);
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_parse(&c, "cluster", doc, strlen(doc), &err), SC_OK);
    for (size_t v = 0; v < 4; v++) {
        json_t *srv = json_array_get(servers, v);
        assert_true(json_number_value(json_object_get(srv, "nic_bandwidth_bytes_per_s")) ==
                    want_bw[v]);
        assert_string_equal(json_string_value(json_object_get(srv, "nic_bandwidth_source")),
                            want_src[v]);
        assert_true(c->servers[v].nic_bw_bytes_per_s == want_bw[v]); /* what the planner uses */
    }
    plan_cluster_destroy(&c);
    json_decref(root);
    free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compute_slots),
        cmocka_unit_test(test_types_by_measured_speed),
        cmocka_unit_test(test_types_by_quota),
        cmocka_unit_test(test_cpu_transport_caps),
        cmocka_unit_test(test_shared_prediction),
        cmocka_unit_test(test_no_replicas_for_one_sample),
        cmocka_unit_test(test_replicas_for_tied_model),
        cmocka_unit_test(test_zb1_job),
        cmocka_unit_test(test_measured_links),
        cmocka_unit_test(test_auto_picks_zb1_where_it_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
