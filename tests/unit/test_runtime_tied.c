/* worker/runtime/runner with a tied tensor (a GPT-2 checkpoint with tie_word_embeddings): a 2-
 * and a 3-stage pipeline, the embedding in the first stage and the head in the last, end every
 * step where one stage holding both ends, bit for bit (gpipe, 1f1b and zb1; zmq and local links;
 * sliced within rounding), and the two copies stay identical; with replicated stages (the ends,
 * and one between them) every copy of both end stages holds the same tied tensor and the job
 * equals one stage within the all-reduce's rounding; set-ups the relay does not serve are
 * refused; the stages' checkpoints export (runtime/export_hf) to a folder that reads back as the
 * trained weights. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <math.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sc_json.h"
#include "kernels/hf_model.h"
#include "kernels/model.h"
#include "worker/runtime/export_hf.h"
#include "worker/runtime/runner.h"

static char g_dir[64];
static char g_model[256];

/* A GPT-2 checkpoint: a "gpt" model exported, then marked tied (its head reads the embedding;
 * the exported lm_head.weight is then ignored). */
static int setup(void **state)
{
    (void)state;
    static const char spec[] = "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": "
                               "\"gpt\", \"vocab\": 64, \"seq_len\": 8, \"layers\": 2, "
                               "\"width\": 16, \"heads\": 2, \"seed\": 5}";
    sc_err err;
    sc_err_clear(&err);
    kn_model *m = NULL;
    if (kn_model_parse(&m, "gpt.json", spec, strlen(spec), &err) != SC_OK)
        return -1;
    int nb = kn_model_block_count(m);
    float *bp[8];
    for (int i = 0; i < nb; i++) {
        bp[i] = malloc(kn_model_block(m, i)->params * sizeof(float));
        kn_model_init_block(m, i, bp[i]);
    }
    strcpy(g_dir, "/tmp/rt_tied_XXXXXX");
    if (mkdtemp(g_dir) == NULL)
        return -1;
    sc_status rc = kn_hf_export(m, (const float *const *)bp, g_dir, &err);
    for (int i = 0; i < nb; i++)
        free(bp[i]);
    kn_model_destroy(&m);
    if (rc != SC_OK)
        return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", g_dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    json_object_set_new(cfg, "tie_word_embeddings", json_true());
    json_dump_file(cfg, path, JSON_INDENT(2));
    json_decref(cfg);
    snprintf(g_model, sizeof g_model,
             "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"hf\", \"path\": "
             "\"%s\", \"cpu_kernels\": \"reference\"}",
             g_dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

enum { NB = 4 }; /* embed, layer0, layer1, head */
static int g_microbatches = 2;

static rt_runner_cfg cfg_for(int stages, int s, const char *schedule, const char *transport)
{
    static const int cut[4][4] = {{0}, {0, 4}, {0, 2, 4}, {0, 1, 3, 4}};
    rt_runner_cfg c = rt_runner_cfg_default();
    c.model_json = g_model;
    c.n_stages = stages;
    c.stage = s;
    c.first_block = cut[stages][s];
    c.last_block = cut[stages][s + 1] - 1;
    c.schedule = schedule;
    c.batch_size = 4;
    c.microbatches = g_microbatches;
    c.seed = 3;
    c.data_kind = "synthetic";
    c.optimizer = "adamw";
    c.lr = 0.01;
    c.weight_decay = 0.01;
    c.transport = transport;
    c.bind_endpoint = strcmp(transport, "local") == 0 ? "local://" : "tcp://127.0.0.1:0";
    c.timeout_ms = 20000;
    return c;
}

typedef struct {
    rt_runner *r;
    int steps;
    sc_status rc;
    sc_err err;
} job;

static void *run(void *arg)
{
    job *j = arg;
    rt_report rep;
    sc_err_clear(&j->err);
    j->rc = SC_OK;
    for (int i = 0; i < j->steps && j->rc == SC_OK; i++)
        j->rc = rt_runner_step(j->r, (uint64_t)i + 1, &rep, &j->err);
    return NULL;
}

/* Trains `stages` stages for `steps` steps; returns all parameters in block order. */
static float *train(int stages, const char *schedule, const char *transport, int steps,
                    const char *save_dir, size_t *count)
{
    rt_runner *rn[3] = {0};
    sc_err err;
    sc_err_clear(&err);
    for (int s = 0; s < stages; s++) {
        rt_runner_cfg c = cfg_for(stages, s, schedule, transport);
        sc_status rc = rt_runner_new(&rn[s], &c, &err);
        if (rc != SC_OK)
            print_error("stage %d: %s\n", s, err.msg);
        assert_int_equal(rc, SC_OK);
    }
    for (int s = 0; stages > 1 && s < stages; s++) {
        const char *prev = s > 0 ? rt_runner_endpoint(rn[s - 1]) : NULL;
        const char *next = s < stages - 1 ? rt_runner_endpoint(rn[s + 1]) : NULL;
        assert_int_equal(rt_runner_connect(rn[s], prev, next, &err), SC_OK);
    }
    pthread_t th[3];
    job jobs[3];
    for (int s = 0; s < stages; s++) {
        jobs[s] = (job){.r = rn[s], .steps = steps};
        assert_int_equal(pthread_create(&th[s], NULL, run, &jobs[s]), 0);
    }
    for (int s = 0; s < stages; s++)
        pthread_join(th[s], NULL);
    size_t total = 0;
    for (int s = 0; s < stages; s++) {
        if (jobs[s].rc != SC_OK)
            print_error("stage %d: %s\n", s, jobs[s].err.msg);
        assert_int_equal(jobs[s].rc, SC_OK);
        total += rt_runner_param_count(rn[s]);
    }
    float *all = malloc(total * sizeof *all);
    size_t off = 0;
    for (int s = 0; s < stages; s++) {
        assert_int_equal(rt_runner_params_to_host(rn[s], all + off, &err), SC_OK);
        off += rt_runner_param_count(rn[s]);
        if (save_dir != NULL)
            assert_int_equal(rt_runner_save(rn[s], save_dir, (uint64_t)steps, &err), SC_OK);
        rt_runner_destroy(&rn[s]);
    }
    *count = total;
    return all;
}

/* where the two copies lie in the flat parameters */
static void tie_offsets(size_t *a, size_t *b, size_t *n)
{
    sc_jdoc *doc = NULL;
    sc_err err;
    assert_int_equal(sc_jdoc_parse(&doc, "m", g_model, strlen(g_model), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc);
    kn_model *m = NULL;
    assert_int_equal(kn_model_from_node(&m, &root, &err), SC_OK);
    kn_model_tie tie;
    assert_true(kn_model_get_tie(m, &tie));
    size_t off = 0;
    for (int i = 0; i < tie.block[1]; i++)
        off += kn_model_block(m, i)->params;
    *a = kn_model_block(m, 0)->tensors[tie.tensor[0]].offset;
    *b = off + kn_model_block(m, tie.block[1])->tensors[tie.tensor[1]].offset;
    *n = kn_model_block(m, 0)->tensors[tie.tensor[0]].count;
    kn_model_destroy(&m);
    sc_jdoc_destroy(&doc);
}

static void test_pipeline_equals_one_stage(void **state)
{
    (void)state;
    size_t a, b, n, n1, nk;
    tie_offsets(&a, &b, &n);
    float *one = train(1, "gpipe", "zmq", 3, NULL, &n1);
    assert_memory_equal(one + a, one + b, n * sizeof(float));
    static const struct {
        int stages;
        const char *schedule, *transport;
    } cases[] = {{2, "gpipe", "zmq"}, {3, "1f1b", "zmq"}, {3, "gpipe", "local"}, {3, "zb1", "zmq"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float *p = train(cases[k].stages, cases[k].schedule, cases[k].transport, 3, NULL, &nk);
        assert_int_equal(nk, n1);
        assert_memory_equal(p + a, p + b, n * sizeof(float)); /* the copies agree */
        assert_memory_equal(p, one, n1 * sizeof(float));      /* and equal one stage */
        free(p);
    }
    /* sliced: its warm-up micro-batches run as halves, so the gradients are summed in another
     * order than one stage's: the copies agree bit for bit, the values within rounding */
    float *p = train(3, "sliced", "zmq", 3, NULL, &nk);
    assert_int_equal(nk, n1);
    assert_memory_equal(p + a, p + b, n * sizeof(float));
    for (size_t i = 0; i < n1; i++)
        if (fabsf(p[i] - one[i]) > 1e-5f * (1.0f + fabsf(one[i])))
            fail_msg("sliced: parameter %zu is %.9g, one stage's %.9g", i, p[i], one[i]);
    free(p);
    free(one);
}

/* A 3-stage run's checkpoints exported (rt_export_hf) read back as the trained parameters, bit
 * for bit; a stage's file missing is refused naming the step. */
static void test_export_from_checkpoints(void **state)
{
    (void)state;
    char ck[128], out[128], spec[400];
    snprintf(ck, sizeof ck, "%s/ckpt", g_dir);
    snprintf(out, sizeof out, "%s/export", g_dir);
    assert_int_equal(mkdir(ck, 0755), 0);
    size_t n;
    float *p = train(3, "gpipe", "zmq", 2, ck, &n);
    sc_jdoc *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "m", g_model, strlen(g_model), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc);
    kn_model *m = NULL;
    assert_int_equal(kn_model_from_node(&m, &root, &err), SC_OK);
    sc_jdoc_destroy(&doc);
    uint64_t step = 0;
    sc_status rc = rt_export_hf(m, ck, 0, out, &step, &err);
    if (rc != SC_OK)
        print_error("%s\n", err.msg);
    assert_int_equal(rc, SC_OK);
    assert_int_equal(step, 2);
    snprintf(spec, sizeof spec,
             "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": "
             "\"hf\", \"path\": \"%s\"}",
             out);
    kn_model *back = NULL;
    assert_int_equal(kn_model_parse(&back, "back", spec, strlen(spec), &err), SC_OK);
    assert_true(kn_model_get_tie(back, NULL));
    size_t off = 0;
    for (int i = 0; i < kn_model_block_count(back); i++) {
        size_t cnt = kn_model_block(back, i)->params;
        float *b = malloc(cnt * sizeof *b);
        assert_int_equal(kn_model_fill_block(back, i, b, &err), SC_OK);
        assert_memory_equal(b, p + off, cnt * sizeof *b);
        off += cnt;
        free(b);
    }
    assert_int_equal(off, n);
    /* stage 1's file gone: the stages found do not cover the model */
    char path[200];
    snprintf(path, sizeof path, "%s/stage1-step2.ckpt", ck);
    assert_int_equal(unlink(path), 0);
    sc_err_clear(&err);
    assert_int_equal(rt_export_hf(m, ck, 2, out, NULL, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "cover blocks [0, 0]"));
    kn_model_destroy(&back);
    kn_model_destroy(&m);
    free(p);
}

/* Replicated stages: reps[s] copies of stage s, each a runner connected to every copy of its
 * neighbours and its peers (rt_runner_connect_group); trained `steps` steps. Every copy of a
 * stage ends bit-identical to its copy 0, and every copy of both end stages holds the same tied
 * tensor in both places; returns copy 0's parameters of every stage in block order. */
enum { MAX_RUNNERS = 12 };
static float *train_replicated(int stages, const int *reps, const char *schedule,
                               const char *transport, int steps, size_t *count)
{
    rt_runner *rn[MAX_RUNNERS] = {0};
    int base[4], n = 0;
    sc_err err;
    sc_err_clear(&err);
    for (int s = 0; s < stages; s++) {
        base[s] = n;
        for (int k = 0; k < reps[s]; k++, n++) {
            assert_true(n < MAX_RUNNERS);
            rt_runner_cfg c = cfg_for(stages, s, schedule, transport);
            c.replicas = reps[s];
            c.replica = k;
            c.prev_replicas = s > 0 ? reps[s - 1] : 1;
            c.next_replicas = s < stages - 1 ? reps[s + 1] : 1;
            c.stage_replicas = reps;
            sc_status rc = rt_runner_new(&rn[n], &c, &err);
            if (rc != SC_OK)
                print_error("stage %d copy %d: %s\n", s, k, err.msg);
            assert_int_equal(rc, SC_OK);
        }
    }
    for (int s = 0; s < stages; s++)
        for (int k = 0; k < reps[s]; k++) {
            const char *prev[4] = {0}, *next[4] = {0}, *peers[4] = {0};
            int np = s > 0 ? reps[s - 1] : 0, nn = s < stages - 1 ? reps[s + 1] : 0;
            for (int j = 0; j < np; j++)
                prev[j] = rt_runner_endpoint(rn[base[s - 1] + j]);
            for (int j = 0; j < nn; j++)
                next[j] = rt_runner_endpoint(rn[base[s + 1] + j]);
            for (int j = 0; j < reps[s]; j++)
                peers[j] = j == k ? NULL : rt_runner_endpoint(rn[base[s] + j]);
            sc_status rc =
                rt_runner_connect_group(rn[base[s] + k], prev, np, next, nn, peers, reps[s], &err);
            if (rc != SC_OK)
                print_error("connect stage %d copy %d: %s\n", s, k, err.msg);
            assert_int_equal(rc, SC_OK);
        }
    pthread_t th[MAX_RUNNERS];
    job jobs[MAX_RUNNERS];
    for (int i = 0; i < n; i++) {
        jobs[i] = (job){.r = rn[i], .steps = steps};
        assert_int_equal(pthread_create(&th[i], NULL, run, &jobs[i]), 0);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++) {
        if (jobs[i].rc != SC_OK)
            print_error("runner %d: %s\n", i, jobs[i].err.msg);
        assert_int_equal(jobs[i].rc, SC_OK);
    }
    size_t total = 0, a, b, tn;
    tie_offsets(&a, &b, &tn);
    for (int s = 0; s < stages; s++)
        total += rt_runner_param_count(rn[base[s]]);
    float *all = malloc(total * sizeof *all), *copy = malloc(total * sizeof *copy);
    assert_non_null(all);
    assert_non_null(copy);
    /* copy k of the job: copy k of every stage that has one, else its copy 0 */
    int most = 1;
    for (int s = 0; s < stages; s++)
        most = reps[s] > most ? reps[s] : most;
    for (int k = 0; k < most; k++) {
        float *dst = k == 0 ? all : copy;
        size_t off = 0;
        for (int s = 0; s < stages; s++) {
            rt_runner *r = rn[base[s] + (k < reps[s] ? k : 0)];
            assert_int_equal(rt_runner_params_to_host(r, dst + off, &err), SC_OK);
            off += rt_runner_param_count(r);
        }
        assert_memory_equal(dst + a, dst + b, tn * sizeof(float)); /* the tied copies agree */
        if (k > 0)
            assert_memory_equal(copy, all, total * sizeof(float)); /* copies of a stage agree */
    }
    for (int i = 0; i < n; i++)
        rt_runner_destroy(&rn[i]);
    free(copy);
    *count = total;
    return all;
}

/* The relative L2 distance of p from ref within the replicated schedules' all-reduce rounding
 * (1e-5), the weights having moved from init. */
static void assert_close(const float *p, const float *ref, const float *init, size_t n)
{
    double diff = 0.0, norm = 0.0, moved = 0.0;
    for (size_t i = 0; i < n; i++) {
        diff += ((double)p[i] - ref[i]) * ((double)p[i] - ref[i]);
        norm += (double)ref[i] * ref[i];
        moved += ((double)ref[i] - init[i]) * ((double)ref[i] - init[i]);
    }
    if (sqrt(diff / norm) > 1e-5)
        print_error("relative difference %g (weights moved %g)\n", sqrt(diff / norm),
                    sqrt(moved / norm));
    assert_true(sqrt(diff / norm) <= 1e-5);
    assert_true(sqrt(moved / norm) > 1e-3);
}

/* Replicated end stages (and a replicated stage between them): every copy of both end stages
 * ends with the same tied tensor, and the job equals one stage within the all-reduce's rounding,
 * on 2 and 3 stages and every synchronous schedule that runs copies. */
static void test_replicated_stages(void **state)
{
    (void)state;
    size_t n1, nk;
    g_microbatches = 4;
    float *init = train(1, "gpipe", "zmq", 0, NULL, &n1);
    float *one = train(1, "gpipe", "zmq", 3, NULL, &n1);
    g_microbatches = 2;
    static const int r22[] = {2, 2}, r21[] = {2, 1}, r13[] = {1, 3}, r212[] = {2, 1, 2},
                     r121[] = {1, 2, 1}, r222[] = {2, 2, 2}, r132[] = {1, 3, 2};
    static const struct {
        int stages;
        const int *reps;
        const char *schedule, *transport;
        int microbatches; /* sliced: 2 of 2 samples, run as halves (which count as copies' own) */
    } cases[] = {
        {2, r22, "gpipe", "zmq", 4},     {2, r21, "1f1b", "local", 4},   {2, r13, "zb1", "zmq", 4},
        {3, r212, "1f1b", "zmq", 4},     {3, r121, "gpipe", "local", 4}, {3, r222, "zb1", "zmq", 4},
        {3, r132, "sliced", "local", 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        g_microbatches = cases[k].microbatches;
        float *p = train_replicated(cases[k].stages, cases[k].reps, cases[k].schedule,
                                    cases[k].transport, 3, &nk);
        assert_int_equal(nk, n1);
        assert_close(p, one, init, n1);
        free(p);
    }
    g_microbatches = 2;
    free(one);
    free(init);
}

static void test_unsupported_refused(void **state)
{
    (void)state;
    rt_runner_cfg c = cfg_for(2, 0, "pipedream", "zmq");
    rt_runner *r = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_runner_new(&r, &c, &err), SC_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "ties"));
    assert_null(r);
    /* the relay passes through host memory: not over nccl, replicated or not */
    c = cfg_for(2, 1, "1f1b", "zmq");
    c.transport = "nccl";
    c.replicas = 2;
    c.replica = 1;
    sc_err_clear(&err);
    assert_int_equal(rt_runner_new(&r, &c, &err), SC_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "not \"nccl\""));
    assert_null(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipeline_equals_one_stage),
        cmocka_unit_test(test_export_from_checkpoints),
        cmocka_unit_test(test_replicated_stages),
        cmocka_unit_test(test_unsupported_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
