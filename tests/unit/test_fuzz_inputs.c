/*
 * Hostile input, mutated: every parser that reads text from outside (job specs, model specs,
 * profiles in both formats, cluster files, hwloc XML, and the plan and job a worker receives in
 * AssignStage) gets thousands of deterministic mutations of a valid document, and what it
 * accepts is driven further (the planner runs every strategy on an accepted profile or cluster;
 * an accepted topology is turned into a cluster; an accepted assignment builds a stage runner). The
 * demands: no crash, no leak, no undefined behaviour (the sanitizer build runs this too), a refusal
 * always carries a message, and an accepted plan has finite figures over stages that tile the
 * model.
 *
 * STAGECRAFT_FUZZ_ITERS (default 1500) sets the mutations per target and STAGECRAFT_FUZZ_SEED
 * (default 1) the seed, STAGECRAFT_FUZZ_ONLY a test name pattern ("test_topology"); a failure
 * prints the seed, the iteration and the input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/jobspec.h"
#include "coordinator/planner/plan.h"
#include "kernels/model.h"
#include "topology/topo.h"
#include "topology/topo_cluster.h"
#include "worker/trainer.h"

#define FUZZ_CAP 65536

typedef struct {
    uint64_t s;
} fuzz_rng;

static uint64_t rng_next(fuzz_rng *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 2685821657736338717ull;
}

static size_t rng_below(fuzz_rng *r, size_t n)
{
    return n ? (size_t)(rng_next(r) % n) : 0;
}

/* Values that sit on the edges of what parsers check: zero, negatives, overflow of int32,
 * int64 and double, denormals, wrong types, deep nesting, NUL escapes. */
static const char *const edge_tokens[] = {"0",
                                          "-1",
                                          "1",
                                          "3",
                                          "0.5",
                                          "-0",
                                          "1e308",
                                          "-1e308",
                                          "1e309",
                                          "1e-320",
                                          "2147483647",
                                          "2147483648",
                                          "-2147483649",
                                          "4294967296",
                                          "9223372036854775807",
                                          "18446744073709551616",
                                          "65536",
                                          "1e9",
                                          "NaN",
                                          "\"\"",
                                          "\"x\"",
                                          "\"\\u0000\"",
                                          "null",
                                          "true",
                                          "[]",
                                          "{}",
                                          "[[[[[[[[[[[[[[[[",
                                          "\"auto\"",
                                          "\"gpt\"",
                                          "\"vgg\"",
                                          "\"mlp\"",
                                          "\"cuda:7\"",
                                          "\"../../etc\"",
                                          "--",
                                          "\t",
                                          "\n",
                                          ";",
                                          ",",
                                          "[1.0; 2.0]",
                                          "=",
                                          "node1"};

static int is_num_char(char c)
{
    return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+';
}

/* Replaces [at, at+n) of buf (length *len) with rep; keeps the result under FUZZ_CAP. */
static void splice(char *buf, size_t *len, size_t at, size_t n, const char *rep, size_t rn)
{
    if (at > *len)
        at = *len;
    if (n > *len - at)
        n = *len - at;
    if (*len - n + rn >= FUZZ_CAP)
        return;
    memmove(buf + at + rn, buf + at + n, *len - at - n);
    memcpy(buf + at, rep, rn);
    *len = *len - n + rn;
}

/* One mutation: a number or a string replaced by an edge value, a byte changed, a span deleted
 * or doubled, the text cut short, or an edge value inserted. */
static void mutate(char *buf, size_t *len, fuzz_rng *r)
{
    const char *tok = edge_tokens[rng_below(r, sizeof edge_tokens / sizeof *edge_tokens)];
    size_t at = rng_below(r, *len + 1);
    switch (rng_below(r, 8)) {
    case 0:
    case 1: { /* the number at or after `at` */
        while (at < *len && !(buf[at] >= '0' && buf[at] <= '9'))
            at++;
        if (at == *len)
            break;
        while (at > 0 && is_num_char(buf[at - 1]))
            at--;
        size_t end = at;
        while (end < *len && is_num_char(buf[end]))
            end++;
        splice(buf, len, at, end - at, tok, strlen(tok));
        break;
    }
    case 2: { /* the string (quoted) at or after `at`, quotes included */
        while (at < *len && buf[at] != '"')
            at++;
        if (at == *len)
            break;
        size_t end = at + 1;
        while (end < *len && buf[end] != '"')
            end++;
        if (end < *len)
            end++;
        splice(buf, len, at, end - at, tok, strlen(tok));
        break;
    }
    case 3:
        if (*len > 0)
            buf[rng_below(r, *len)] = (char)rng_below(r, 256);
        break;
    case 4:
        splice(buf, len, at, 1 + rng_below(r, 16), "", 0);
        break;
    case 5: { /* a span doubled */
        size_t n = 1 + rng_below(r, 64);
        if (at + n > *len)
            n = *len - at;
        char tmp[64];
        memcpy(tmp, buf + at, n);
        splice(buf, len, at, 0, tmp, n);
        break;
    }
    case 6:
        *len = at;
        break;
    default:
        splice(buf, len, at, 0, tok, strlen(tok));
        break;
    }
}

/* Structure-aware mutation of a JSON document: one value somewhere in the tree is replaced by
 * an edge value, or a member / element is dropped or doubled. The result stays valid JSON, so
 * it reaches the checks behind the syntax. */
static const char *const edge_json[] = {"0",
                                        "-1",
                                        "1",
                                        "2",
                                        "0.5",
                                        "1e308",
                                        "-1e308",
                                        "1e-320",
                                        "2147483648",
                                        "-2147483649",
                                        "9223372036854775807",
                                        "1e19",
                                        "65536",
                                        "\"\"",
                                        "\"x\"",
                                        "\"gpt\"",
                                        "\"auto\"",
                                        "null",
                                        "true",
                                        "[]",
                                        "{}",
                                        "[0]",
                                        "[1, 2]",
                                        "[\"M\", 3]",
                                        "{\"size\": 0}"};

static json_t *pick_value(json_t *root, fuzz_rng *r, json_t **parent, const char **key,
                          size_t *index)
{
    json_t *cur = root;
    *parent = NULL;
    for (int depth = 0; depth < 8; depth++) {
        size_t n = json_is_object(cur)  ? json_object_size(cur)
                   : json_is_array(cur) ? json_array_size(cur)
                                        : 0;
        if (n == 0 || (depth > 0 && rng_below(r, 3) == 0))
            break;
        size_t pick = rng_below(r, n);
        *parent = cur;
        if (json_is_object(cur)) {
            void *it = json_object_iter(cur);
            for (size_t k = 0; k < pick; k++)
                it = json_object_iter_next(cur, it);
            *key = json_object_iter_key(it);
            cur = json_object_iter_value(it);
        } else {
            *index = pick;
            cur = json_array_get(cur, pick);
        }
    }
    return cur;
}

/* 0 when the text is not JSON (the caller then mutates bytes instead). */
static int mutate_tree(char *buf, size_t *len, fuzz_rng *r)
{
    json_t *root = json_loadb(buf, *len, 0, NULL);
    if (root == NULL)
        return 0;
    json_t *parent;
    const char *key = NULL;
    size_t index = 0;
    json_t *val = pick_value(root, r, &parent, &key, &index);
    static const double scale[] = {0, 0.001, 0.5, 2, 7, 1000, 1e6};
    if (json_is_number(val) && rng_below(r, 2) == 0) {
        /* a plausible neighbour: same type, another magnitude */
        double k = scale[rng_below(r, sizeof scale / sizeof *scale)];
        if (json_is_integer(val))
            json_integer_set(val, (json_int_t)((double)json_integer_value(val) * k));
        else
            json_real_set(val, json_real_value(val) * k);
    } else if (parent != NULL) {
        const char *lit = edge_json[rng_below(r, sizeof edge_json / sizeof *edge_json)];
        json_t *v = json_loads(lit, JSON_DECODE_ANY, NULL);
        int op = (int)rng_below(r, 4);
        if (json_is_object(parent)) {
            if (op == 0)
                json_object_del(parent, key);
            else
                json_object_set_new(parent, key, v), v = NULL;
        } else if (op == 0) {
            json_array_remove(parent, index);
        } else if (op == 1) {
            json_array_append(parent, json_array_get(parent, index));
        } else {
            json_array_set_new(parent, index, v), v = NULL;
        }
        json_decref(v);
    }
    char *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (out == NULL)
        return 0;
    size_t n = strlen(out);
    if (n < FUZZ_CAP) {
        memcpy(buf, out, n);
        *len = n;
    }
    free(out);
    return 1;
}

typedef void (*fuzz_target)(const char *text, size_t len);

static unsigned long fuzz_iters(void)
{
    const char *s = getenv("STAGECRAFT_FUZZ_ITERS");
    long v = s ? strtol(s, NULL, 10) : 0;
    return v > 0 ? (unsigned long)v : 1500;
}

static uint64_t fuzz_seed(void)
{
    const char *s = getenv("STAGECRAFT_FUZZ_SEED");
    unsigned long long v = s ? strtoull(s, NULL, 10) : 0;
    return v ? (uint64_t)v : 1;
}

/* The input being tried, for the failure report. */
static const char *cur_text;
static size_t cur_len;
static unsigned long cur_iter;

/* Inputs accepted by the current target: a campaign that accepts none tests only the refusals. */
static unsigned long n_accepted;

static void report_input(void)
{
    fprintf(stderr, "fuzz: seed %llu, iteration %lu, input (%zu bytes):\n%.*s\n",
            (unsigned long long)fuzz_seed(), cur_iter, cur_len, (int)cur_len, cur_text);
}

/* A refusal must say what was wrong. */
static void check_refusal(sc_status rc, const sc_err *err)
{
    if (rc != SC_OK && err->msg[0] == '\0') {
        report_input();
        fail_msg("status %s without a message", sc_status_str(rc));
    }
}

static void run_fuzz(const char *seed_text, fuzz_target target)
{
    static char buf[FUZZ_CAP + 1];
    size_t n0 = strlen(seed_text);
    assert_true(n0 < FUZZ_CAP);
    fuzz_rng r = {fuzz_seed() * 0x9E3779B97F4A7C15ull ^ n0};
    unsigned long iters = fuzz_iters();
    n_accepted = 0;
    cur_text = seed_text;
    cur_len = n0;
    target(seed_text, n0); /* the valid document itself */
    assert_int_equal(n_accepted, 1);
    const char *stop = getenv("STAGECRAFT_FUZZ_STOP"); /* bisecting: run only the first N */
    if (stop != NULL && strtoul(stop, NULL, 10) > 0 && strtoul(stop, NULL, 10) < iters)
        iters = strtoul(stop, NULL, 10);
    for (unsigned long i = 0; i < iters; i++) {
        size_t len = n0;
        memcpy(buf, seed_text, n0);
        int k = 1 + (int)rng_below(&r, 3);
        /* JSON documents: two thirds of the inputs mutated as trees, the rest as bytes */
        int tree = seed_text[0] == '{' && rng_below(&r, 3) != 0;
        for (int m = 0; m < k; m++) {
            buf[len] = '\0';
            if (!tree || !mutate_tree(buf, &len, &r))
                mutate(buf, &len, &r);
        }
        buf[len] = '\0';
        cur_text = buf;
        cur_len = len;
        cur_iter = i;
        target(buf, len);
    }
    fprintf(stderr, "fuzz: %lu mutations, %lu accepted and driven further\n", iters,
            n_accepted - 1);
    /* the mutations must leave some documents valid, or the deeper paths go untested */
    assert_true(n_accepted > 1);
}

/* ------------------------------------------------------------------ planner, driven */

static const char profile_json[] =
    "{\"format\": \"stagecraft-profile\", \"version\": 1, \"model\": \"m\", "
    "\"reference_device\": \"ref\", \"microbatch_size\": 4,\n \"blocks\": [\n"
    "  {\"name\": \"embed\", \"forward_s\": 0.001, \"backward_s\": 0.002, "
    "\"activation_bytes\": 4096, \"parameter_bytes\": 1000, \"stash_bytes\": 8192, "
    "\"optimizer_s\": 0.0001,\n"
    "   \"by_microbatch_size\": [{\"size\": 1, \"forward_s\": 0.0004, \"backward_s\": 0.0008},\n"
    "                          {\"size\": 4, \"forward_s\": 0.001, \"backward_s\": 0.002}]},\n"
    "  {\"name\": \"h0\", \"forward_s\": 0.003, \"backward_s\": 0.006, \"activation_bytes\": 4096, "
    "\"parameter_bytes\": 2000},\n"
    "  {\"name\": \"h1\", \"forward_s\": 0.003, \"backward_s\": 0.006, \"activation_bytes\": 2048, "
    "\"parameter_bytes\": 2000},\n"
    "  {\"name\": \"head\", \"forward_s\": 0.002, \"backward_s\": 0.003, \"activation_bytes\": 16, "
    "\"parameter_bytes\": 500}\n]}\n";

static const char profile_graph[] =
    "node1 -- Input -- forward_compute_time=50.000, backward_compute_time=0.000, "
    "activation_size=100.0, parameter_size=0.000\n"
    "node2 -- Conv2d(3, 8) -- forward_compute_time=1.000, backward_compute_time=2.000, "
    "activation_size=1000.0, parameter_size=400.000\n"
    "node3 -- Linear(a, b) -- forward_compute_time=2.000, backward_compute_time=3.000, "
    "activation_size=[10.0; 20.0], parameter_size=40.000\n"
    "node4 -- Add -- forward_compute_time=0.500, backward_compute_time=0.500, "
    "activation_size=7.0, parameter_size=0.000\n"
    "node5 -- ReLU -- forward_compute_time=0.700, backward_compute_time=0.900, "
    "activation_size=3.0, parameter_size=0.000\n"
    "\tnode1 -- node2\n\tnode2 -- node3\n  node2 -- node4\n\tnode3 -- node4\n\tnode4 -- node5\n";

static const char cluster_json[] =
    "{\"format\": \"stagecraft-cluster\", \"version\": 1,\n \"device_types\": {\n"
    "   \"fast\": {\"relative_speed\": 2.0, \"memory_bytes\": 40e9,\n"
    "            \"block_times\": {\"head\": {\"forward_s\": 0.0001, \"backward_s\": 0.0002}}},\n"
    "   \"slow\": {\"relative_speed\": 0.5, \"memory_bytes\": 16e9}},\n"
    " \"servers\": [\n"
    "   {\"name\": \"s0\", \"devices\": [\"fast\", \"fast\"],\n"
    "    \"intra_bandwidth_bytes_per_s\": 300e9, \"nic_bandwidth_bytes_per_s\": 12.5e9},\n"
    "   {\"name\": \"s1\", \"devices\": [\"slow\", \"slow\"],\n"
    "    \"intra_bandwidth_bytes_per_s\": 16e9, \"nic_bandwidth_bytes_per_s\": 10e9}]}\n";

static int finite_nonneg(double v)
{
    return isfinite(v) && v >= 0;
}

/* Every strategy on (profile, cluster): a refusal has a message; a plan has finite figures and
 * stages that tile the blocks in order. */
static void plan_all(const plan_profile *prof, const plan_cluster *cl)
{
    static const plan_sched_kind scheds[] = {PLAN_SCHED_1F1B, PLAN_SCHED_GPIPE,
                                             PLAN_SCHED_PIPEDREAM, PLAN_SCHED_SLICED};
    plan_request req = {.profile = prof,
                        .cluster = cl,
                        .schedule = scheds[cur_iter % 4],
                        .exhaustive_limit = 20000};
    for (int s = 0; s < PLAN_STRAT_COUNT; s++) {
        plan_result res;
        sc_err err;
        sc_err_clear(&err);
        sc_status rc = plan_run(&req, (plan_strategy)s, &res, &err);
        check_refusal(rc, &err);
        if (rc == SC_OK && res.ok) {
            const plan_partition *p = res.part;
            int ok = p != NULL && p->n_stages >= 1 && finite_nonneg(res.iteration_time_s) &&
                     finite_nonneg(res.bottleneck_s) && finite_nonneg(res.lower_bound_s) &&
                     res.n_micro >= 1;
            for (int st = 0; ok && st < p->n_stages; st++)
                ok = p->first[st] == (st == 0 ? 0 : p->last[st - 1] + 1) &&
                     p->last[st] >= p->first[st] && p->n_dev[st] >= 1 &&
                     finite_nonneg(res.compute_s[st]);
            if (ok)
                ok = p->last[p->n_stages - 1] == prof->n_blocks - 1;
            if (!ok) {
                report_input();
                fail_msg("strategy %s: a plan with non-finite figures or stages that do not tile",
                         plan_strategy_name((plan_strategy)s));
            }
        } else if (rc == SC_OK && res.error[0] == '\0') {
            report_input();
            fail_msg("strategy %s gave no plan and no reason",
                     plan_strategy_name((plan_strategy)s));
        }
        plan_result_free(&res);
    }
}

static plan_cluster *fixed_cluster(void)
{
    plan_cluster *c = NULL;
    sc_err err;
    assert_int_equal(
        plan_cluster_parse(&c, "cluster.json", cluster_json, strlen(cluster_json), &err), SC_OK);
    return c;
}

static void target_profile_json(const char *text, size_t len)
{
    plan_profile *p = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = plan_profile_parse_json(&p, "profile.json", text, len, &err);
    check_refusal(rc, &err);
    if (rc == SC_OK) {
        n_accepted++;
        plan_cluster *c = fixed_cluster();
        plan_all(p, c);
        plan_cluster_destroy(&c);
    }
    plan_profile_destroy(&p);
}

static void target_profile_graph(const char *text, size_t len)
{
    plan_profile *p = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = plan_profile_parse_graph(&p, "graph.txt", text, &err); /* NUL-terminated */
    (void)len;
    check_refusal(rc, &err);
    if (rc == SC_OK) {
        n_accepted++;
        plan_cluster *c = NULL;
        assert_int_equal(plan_cluster_new_uniform(&c, 3, 1e9, 16e9, &err), SC_OK);
        plan_all(p, c);
        plan_cluster_destroy(&c);
    }
    plan_profile_destroy(&p);
}

static void target_cluster(const char *text, size_t len)
{
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = plan_cluster_parse(&c, "cluster.json", text, len, &err);
    check_refusal(rc, &err);
    if (rc == SC_OK) {
        n_accepted++;
        plan_profile *p = NULL;
        assert_int_equal(
            plan_profile_parse_json(&p, "profile.json", profile_json, strlen(profile_json), &err),
            SC_OK);
        plan_all(p, c);
        plan_profile_destroy(&p);
    }
    plan_cluster_destroy(&c);
}

static void test_profile_json(void **state)
{
    (void)state;
    run_fuzz(profile_json, target_profile_json);
}

static void test_profile_graph(void **state)
{
    (void)state;
    run_fuzz(profile_graph, target_profile_graph);
}

static void test_cluster(void **state)
{
    (void)state;
    run_fuzz(cluster_json, target_cluster);
}

/* ------------------------------------------------------------------ job and model specs */

static const char job_json[] =
    "{\"format\": \"stagecraft-job\", \"version\": 1, \"name\": \"gpt-demo\",\n"
    " \"model\": {\"kind\": \"gpt\", \"vocab\": 256, \"seq_len\": 64, \"layers\": 4,\n"
    "           \"width\": 128, \"heads\": 4},\n"
    " \"data\": {\"kind\": \"text\", \"path\": \"/usr/share/common-licenses/GPL-3\"},\n"
    " \"batch_size\": 16, \"microbatches\": \"auto\", \"schedule\": \"auto\",\n"
    " \"strategy\": \"hetero\", \"workers\": 4, \"steps\": 200, \"seed\": 1, \"stages\": 3,\n"
    " \"optimizer\": {\"kind\": \"sgd\", \"lr\": 3e-4, \"weight_decay\": 0.0, \"momentum\": 0.9},\n"
    " \"checkpoint_every\": 50}\n";

static void target_job(const char *text, size_t len)
{
    coord_jobspec spec;
    memset(&spec, 0, sizeof spec);
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = coord_jobspec_parse("job.json", text, len, &spec, &err);
    check_refusal(rc, &err);
    n_accepted += rc == SC_OK;
    if (rc == SC_OK && (spec.batch_size < 1 || spec.steps < 1 || spec.model_json == NULL)) {
        report_input();
        fail_msg("accepted a job with batch %d, steps %llu", (int)spec.batch_size,
                 (unsigned long long)spec.steps);
    }
    coord_jobspec_clear(&spec);
}

static void test_job(void **state)
{
    (void)state;
    run_fuzz(job_json, target_job);
}

/* ------------------------------------------------------------------ a worker's assignment */

/* What a worker receives in AssignStage besides the model: the plan (here: stage 1 of 3 of a
 * umpipe plan with per-stage forward and backward sizes, and of a pipedream and a sliced plan
 * whose middle stage has two copies) and the job spec, each mutated while the other stays valid.
 * The worker must build its stage runner or refuse with a message; nothing else. */
static const char assign_model[] =
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", \"vocab\": 32, "
    "\"seq_len\": 4, \"layers\": 2, \"width\": 8, \"heads\": 2}";
static const char assign_job[] =
    "{\"format\": \"stagecraft-job\", \"version\": 1, \"batch_size\": 8, \"seed\": 3,\n"
    " \"data\": {\"kind\": \"synthetic\"},\n"
    " \"optimizer\": {\"kind\": \"sgd\", \"lr\": 0.01, \"weight_decay\": 0.0, \"momentum\": 0.9}}";
static const char *const assign_plans[] = {
    "{\"strategy\": \"umpipe\", \"schedule\": \"unequal\", \"batch\": 8,\n"
    " \"stages\": [{\"first_block\": 0, \"last_block\": 0, \"devices\": [0]},\n"
    "            {\"first_block\": 1, \"last_block\": 2, \"devices\": [1]},\n"
    "            {\"first_block\": 3, \"last_block\": 3, \"devices\": [2]}],\n"
    " \"microbatches\": {\"count\": 3, \"sizes\": [[2, 2, 4], [4, 1, 3], [8]],\n"
    "                  \"backward_sizes\": [[4, 4], [1, 2, 5], [2, 6]]}}",
    "{\"strategy\": \"pipedream\", \"schedule\": \"pipedream\", \"batch\": 8,\n"
    " \"stages\": [{\"first_block\": 0, \"last_block\": 0, \"devices\": [0]},\n"
    "            {\"first_block\": 1, \"last_block\": 2, \"devices\": [1, 2]},\n"
    "            {\"first_block\": 3, \"last_block\": 3, \"devices\": [3]}],\n"
    " \"microbatches\": {\"count\": 4, \"size\": 2}}",
    "{\"strategy\": \"hetero\", \"schedule\": \"sliced\", \"batch\": 8,\n"
    " \"stages\": [{\"first_block\": 0, \"last_block\": 0, \"devices\": [0]},\n"
    "            {\"first_block\": 1, \"last_block\": 2, \"devices\": [1, 2]},\n"
    "            {\"first_block\": 3, \"last_block\": 3, \"devices\": [3]}],\n"
    " \"microbatches\": {\"count\": 4, \"size\": 2, \"sliced\": 1}}",
};
static const char *assign_plan_fixed; /* the plan while the job is mutated */

/* A worker's trainer built from an AssignStage of stage 1 of 3 carrying `plan` and `job`. */
static sc_status assign_new(const char *plan, const char *job, wk_trainer **t, sc_err *err)
{
    Stagecraft__AssignStageRequest req = STAGECRAFT__ASSIGN_STAGE_REQUEST__INIT;
    req.job_id = "job-fuzz";
    req.stage = 1;
    req.n_stages = 3;
    req.first_block = 1;
    req.last_block = 2;
    req.model_json = (char *)assign_model;
    req.plan_json = (char *)plan;
    req.job_json = (char *)job;
    req.transport = "zmq";
    req.transport_next = "";
    sc_err_clear(err);
    return wk_trainer_new(t, &req, "cpu", "127.0.0.1", "/nonexistent", NULL, err);
}

static void assign_try(const char *plan, const char *job)
{
    wk_trainer *t = NULL;
    sc_err err;
    sc_status rc = assign_new(plan, job, &t, &err);
    check_refusal(rc, &err);
    n_accepted += rc == SC_OK;
    if (rc == SC_OK && (t == NULL || wk_trainer_endpoint(t)[0] == '\0')) {
        report_input();
        fail_msg("accepted an assignment without a runner endpoint");
    }
    wk_trainer_destroy(&t);
}

static void target_assign_plan(const char *text, size_t len)
{
    (void)len; /* the request carries C strings: a mutated NUL ends the text there */
    assign_try(text, assign_job);
}

static void target_assign_job(const char *text, size_t len)
{
    (void)len;
    assign_try(assign_plan_fixed, text);
}

/* Numbers out of range are refused by name, never converted (a double past INT_MAX cast to int
 * is undefined; a size of 2^32 + 2 truncated to int would be 2). */
static void expect_assign_refused(const char *plan, const char *job, const char *needle)
{
    wk_trainer *t = NULL;
    sc_err err;
    assert_int_equal(assign_new(plan, job, &t, &err), SC_ERR_INVALID);
    assert_null(t);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("refusal \"%s\" lacks \"%s\"", err.msg, needle);
}

static void target_start_run(const char *text, size_t len)
{
    (void)len;
    uint64_t run = wk_start_run(text); /* never crashes; any value is a whole number */
    n_accepted += run != 0;
    if (run > 9007199254740992ull) {
        report_input();
        fail_msg("run %llu past 2^53", (unsigned long long)run);
    }
}

/* The run a START payload names, stamped on the error that refuses it; 0 for none. */
static void test_start_run(void **state)
{
    (void)state;
    assert_int_equal(wk_start_run("{\"steps\": 10, \"run\": 1763971200000123}"),
                     1763971200000123ull);
    assert_int_equal(wk_start_run("{\"steps\": 10}"), 0);
    assert_int_equal(wk_start_run("{\"run\": -3}"), 0);
    assert_int_equal(wk_start_run("{\"run\": 2.5}"), 0);
    assert_int_equal(wk_start_run("{\"run\": \"7\"}"), 0);
    assert_int_equal(wk_start_run("[7]"), 0);
    assert_int_equal(wk_start_run("{\"run\": 7"), 0);
    assert_int_equal(wk_start_run(NULL), 0);
    run_fuzz("{\"stage_endpoints\": [\"tcp://127.0.0.1:1\"], \"steps\": 10, \"run\": 42}",
             target_start_run);
}

static void test_assignment(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof assign_plans / sizeof *assign_plans; i++) {
        run_fuzz(assign_plans[i], target_assign_plan);
        assign_plan_fixed = assign_plans[i];
        run_fuzz(assign_job, target_assign_job);
    }
    static const char big_count[] =
        "{\"schedule\": \"1f1b\", \"stages\": [], \"microbatches\": {\"count\": 1e300}}";
    expect_assign_refused(big_count, assign_job, "microbatches.count");
    static const char neg_seed[] = "{\"batch_size\": 8, \"seed\": -4}";
    expect_assign_refused(assign_plans[1], neg_seed, "seed");
    static const char wide_size[] =
        "{\"schedule\": \"unequal\", \"stages\": [], \"microbatches\": {\"count\": 2, "
        "\"sizes\": [[8], [4294967298, 6], [8]]}}";
    expect_assign_refused(wide_size, assign_job, "microbatch_sizes[0] = -1");
    static const char deep_slice[] =
        "{\"schedule\": \"sliced\", \"stages\": [], \"microbatches\": {\"count\": 4, "
        "\"sliced\": 5}}";
    expect_assign_refused(deep_slice, assign_job, "microbatches.sliced");
}

static const char *const model_docs[] = {
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", \"name\": \"g\", "
    "\"vocab\": 64, \"seq_len\": 16, \"layers\": 2, \"width\": 32, \"heads\": 4, "
    "\"split_blocks\": true, \"seed\": 5}",
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"vgg\", "
    "\"config\": \"vgg11\", \"image\": [3, 32, 32], \"classes\": 10, \"width_divisor\": 16}",
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"mlp\", "
    "\"sizes\": [6, 10, 8, 3]}",
};

static void target_model(const char *text, size_t len)
{
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = kn_model_parse(&m, "model.json", text, len, &err);
    check_refusal(rc, &err);
    n_accepted += rc == SC_OK;
    if (rc == SC_OK && (kn_model_block_count(m) < 1 || kn_model_param_count(m) == 0)) {
        report_input();
        fail_msg("accepted a model with %d blocks and %zu parameters", kn_model_block_count(m),
                 kn_model_param_count(m));
    }
    kn_model_destroy(&m);
}

static void test_models(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof model_docs / sizeof *model_docs; i++)
        run_fuzz(model_docs[i], target_model);
}

/* ------------------------------------------------------------------ hwloc XML */

static void target_topology(const char *text, size_t len)
{
    topo_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.xml_buffer = text;
    cfg.xml_len = len;
    cfg.hostname = "fuzz";
    topo_server *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = topo_server_new(&s, &cfg, &err);
    check_refusal(rc, &err);
    if (rc == SC_OK) {
        n_accepted++;
        topo_cluster *c = NULL;
        char *json = NULL;
        assert_int_equal(topo_cluster_new(&c, &err), SC_OK);
        rc = topo_cluster_add(c, s, &err);
        check_refusal(rc, &err);
        if (rc == SC_OK) {
            rc = topo_cluster_to_json(c, &json, &err);
            check_refusal(rc, &err);
        }
        free(json);
        topo_cluster_destroy(&c);
    }
    topo_server_destroy(&s);
}

static void test_topology(void **state)
{
    (void)state;
    char *xml = NULL;
    size_t len = 0;
    sc_err err;
    assert_int_equal(
        sc_file_read(SC_TEST_DATA_DIR "/topology/gpu_server.xml", 1 << 20, &xml, &len, &err),
        SC_OK);
    run_fuzz(xml, target_topology);
    free(xml);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_json), cmocka_unit_test(test_profile_graph),
        cmocka_unit_test(test_cluster),      cmocka_unit_test(test_job),
        cmocka_unit_test(test_models),       cmocka_unit_test(test_topology),
        cmocka_unit_test(test_assignment),   cmocka_unit_test(test_start_run),
    };
    const char *only = getenv("STAGECRAFT_FUZZ_ONLY");
    if (only != NULL && *only != '\0')
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
