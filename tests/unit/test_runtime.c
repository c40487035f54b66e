/* worker/runtime/runner: pipelined training equals single-stage training with gradient
 * accumulation (GPT and VGG-style, gpipe, 1f1b and zb1, 2 and 4 stages, one thread per stage over
 * zmq loopback or local queues), also with micro-batch sizes that differ per stage (activations and
 * gradients re-sliced at the stage boundaries) and with replicated stages (every replica ends
 * bit-identical); asynchronous pipedream against hand-written streams, also with replicated
 * stages (1F1B-RR: copies in rounds, the mean of a round's gradients, bit for bit);
 * checkpoints resume bit-exactly; a vanished neighbour fails the step within the timeout; bad
 * configurations are refused with clear messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sc_json.h"
#include "kernels/model.h"
#include "kernels/stage.h"
#include "worker/data/data.h"
#include "worker/runtime/runner.h"
#include "worker/runtime/timeline.h"
#include "worker/transport/transport.h"

/* The models run the reference CPU kernels: these tests compare schedules and splits bit for
 * bit, and the losses they check follow one exact trajectory (asynchronous schedules amplify
 * the last bits the fast kernels' other order of additions changes). */
#define GPT_JSON                                                                                   \
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", \"vocab\": 256, "       \
    "\"seq_len\": 8, \"layers\": 2, \"width\": 16, \"heads\": 2, \"cpu_kernels\": \"reference\"}"
#define VGG_JSON                                                                                   \
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"vgg\", \"config\": "           \
    "\"vgg11\", "                                                                                  \
    "\"image\": [3, 32, 32], \"classes\": 10, \"width_divisor\": 16, \"cpu_kernels\": "            \
    "\"reference\"}"
#define MLP_JSON "{\"kind\": \"mlp\", \"sizes\": [12, 10, 8, 6, 4], \"cpu_kernels\": \"reference\"}"

typedef struct {
    const char *model;
    const char *schedule;
    int stages, batch, microbatches, steps;
    const char *optimizer;
    const char *transport;
    const char *data_kind, *data_path;
    const int *sizes; /* micro-batch sizes, NULL for equal ones */
    int slice_k;      /* schedule "sliced": warm-up micro-batches cut in halves */
} run_spec;

/* Runners take the device-memory data path (rt_runner_cfg.stage_memory_path). */
static bool g_stage_memory_path;

/* Micro-batches the runner runs: m, plus one per sliced warm-up micro-batch. */
static int effective_microbatches(const run_spec *rs)
{
    if (strcmp(rs->schedule, "sliced") != 0)
        return rs->microbatches;
    return rs->microbatches + (rs->slice_k < rs->microbatches ? rs->slice_k : rs->microbatches);
}

static int spec_size(const run_spec *rs, int mb)
{
    return rs->sizes != NULL ? rs->sizes[mb] : rs->batch / rs->microbatches;
}

static int model_blocks(const char *json)
{
    sc_jdoc *doc = NULL;
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "model", json, strlen(json), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc);
    assert_int_equal(kn_model_from_node(&m, &root, &err), SC_OK);
    int n = kn_model_block_count(m);
    kn_model_destroy(&m);
    sc_jdoc_destroy(&doc);
    return n;
}

/* Sizes per stage: when set, stage s runs per_stage->sizes[s] (per_stage->counts[s] entries) and
 * is told its neighbours' lists; the run_spec's own sizes are the reference's cut. Where
 * bwd[s] is set, stage s runs its backwards in that cut (bcounts[s] entries) and stage s-1 is told
 * it. Tests set it around one run only. */
typedef struct {
    const int *sizes[8];
    int counts[8];
    const int *bwd[8];
    int bcounts[8];
} per_stage_sizes;
static const per_stage_sizes *g_per_stage;

/* The model's frozen prefix (rt_runner_cfg.frozen_blocks; the reference freezes the same blocks).
 * Tests set it around one run only. */
static int g_frozen;
/* rt_runner_cfg.skip_grad_norms of every runner (a test sets it around one run only) */
static bool g_skip_norms;
/* rt_runner_cfg.zb1_defer of every runner (zb1's deferral caps; a test sets it around one run) */
static const int *g_zb1_defer;
/* rt_runner_cfg.precision and fp16's loss scale of every runner (set around one run) */
static const char *g_precision;
static double g_scale_init;
static int g_scale_interval;

static rt_runner_cfg spec_cfg(const run_spec *rs, int stage, int nblocks)
{
    rt_runner_cfg c = rt_runner_cfg_default();
    c.model_json = rs->model;
    c.n_stages = rs->stages;
    c.stage = stage;
    c.first_block = stage * nblocks / rs->stages;
    c.last_block = (stage + 1) * nblocks / rs->stages - 1;
    c.schedule = rs->schedule;
    c.batch_size = rs->batch;
    c.microbatches = rs->microbatches;
    c.seed = 11;
    c.data_kind = rs->data_kind != NULL ? rs->data_kind : "synthetic";
    c.data_path = rs->data_path;
    c.optimizer = rs->optimizer;
    c.lr = strcmp(rs->optimizer, "sgd") == 0 ? 0.05 : 0.01;
    c.weight_decay = 0.01;
    c.momentum = 0.9;
    c.transport = rs->transport != NULL ? rs->transport : "zmq";
    c.bind_endpoint = strcmp(c.transport, "local") == 0 ? "local://" : "tcp://127.0.0.1:0";
    c.timeout_ms = 20000;
    c.microbatch_sizes = rs->sizes;
    c.sliced_warmup = rs->slice_k;
    c.stage_memory_path = g_stage_memory_path;
    c.frozen_blocks = g_frozen;
    c.skip_grad_norms = g_skip_norms;
    c.zb1_defer = g_zb1_defer;
    c.precision = g_precision;
    c.loss_scale_init = g_scale_init;
    c.loss_scale_interval = g_scale_interval;
    if (g_per_stage != NULL) {
        c.microbatch_sizes = g_per_stage->sizes[stage];
        c.microbatches = g_per_stage->counts[stage];
        if (stage > 0) {
            c.prev_sizes = g_per_stage->sizes[stage - 1];
            c.n_prev_sizes = g_per_stage->counts[stage - 1];
        }
        if (stage < rs->stages - 1) {
            c.next_sizes = g_per_stage->sizes[stage + 1];
            c.n_next_sizes = g_per_stage->counts[stage + 1];
            c.next_backward_sizes = g_per_stage->bwd[stage + 1];
            c.n_next_backward_sizes = g_per_stage->bcounts[stage + 1];
        }
        c.backward_sizes = g_per_stage->bwd[stage];
        c.n_backward_sizes = g_per_stage->bcounts[stage];
    }
    return c;
}

typedef struct {
    rt_runner *r;
    uint64_t first_step;
    int steps;
    sc_status rc;
    sc_err err;
    rt_report last;
} stage_job;

static void *stage_thread(void *arg)
{
    stage_job *j = arg;
    sc_err_clear(&j->err);
    j->rc = SC_OK;
    for (int i = 0; i < j->steps && j->rc == SC_OK; i++)
        j->rc = rt_runner_step(j->r, j->first_step + (uint64_t)i, &j->last, &j->err);
    return NULL;
}

/* Creates and connects the runners of a pipeline. */
static void pipeline_open(const run_spec *rs, rt_runner **rn)
{
    int nb = model_blocks(rs->model);
    sc_err err;
    sc_err_clear(&err);
    for (int s = 0; s < rs->stages; s++) {
        rt_runner_cfg c = spec_cfg(rs, s, nb);
        sc_status rc = rt_runner_new(&rn[s], &c, &err);
        if (rc != SC_OK)
            print_error("stage %d: %s\n", s, err.msg);
        assert_int_equal(rc, SC_OK);
    }
    for (int s = 0; s < rs->stages; s++) {
        const char *prev = s > 0 ? rt_runner_endpoint(rn[s - 1]) : NULL;
        const char *next = s < rs->stages - 1 ? rt_runner_endpoint(rn[s + 1]) : NULL;
        assert_int_equal(rt_runner_connect(rn[s], prev, next, &err), SC_OK);
    }
}

/* Runs `steps` steps from `first_step` on every stage at once (one thread each). */
static void pipeline_run(const run_spec *rs, rt_runner **rn, uint64_t first_step, int steps,
                         rt_report *reports)
{
    pthread_t th[8];
    stage_job jobs[8];
    for (int s = 0; s < rs->stages; s++) {
        jobs[s] = (stage_job){.r = rn[s], .first_step = first_step, .steps = steps};
        assert_int_equal(pthread_create(&th[s], NULL, stage_thread, &jobs[s]), 0);
    }
    for (int s = 0; s < rs->stages; s++)
        pthread_join(th[s], NULL);
    for (int s = 0; s < rs->stages; s++) {
        if (jobs[s].rc != SC_OK)
            print_error("stage %d: %s\n", s, jobs[s].err.msg);
        assert_int_equal(jobs[s].rc, SC_OK);
        if (reports != NULL)
            reports[s] = jobs[s].last;
    }
}

static float *pipeline_params(const run_spec *rs, rt_runner **rn, size_t *count)
{
    size_t total = 0;
    for (int s = 0; s < rs->stages; s++)
        total += rt_runner_param_count(rn[s]);
    float *all = malloc(total * sizeof *all);
    assert_non_null(all);
    size_t off = 0;
    sc_err err;
    for (int s = 0; s < rs->stages; s++) {
        assert_int_equal(rt_runner_params_to_host(rn[s], all + off, &err), SC_OK);
        off += rt_runner_param_count(rn[s]);
    }
    *count = total;
    return all;
}

/* Sum of each stage's per-block gradient norms of the last step (the report's array belongs to
 * the runner, so it is read before the runner goes). */
static double g_grad_sq_sum[8];

static float *train_pipeline(const run_spec *rs, size_t *count, rt_report *reports)
{
    rt_runner *rn[8] = {0};
    pipeline_open(rs, rn);
    pipeline_run(rs, rn, 1, rs->steps, reports);
    for (int s = 0; s < rs->stages; s++) {
        g_grad_sq_sum[s] = reports[s].grad_sq_norms == NULL ? -1.0 : 0.0; /* -1: none */
        for (int b = 0; b < reports[s].n_blocks && reports[s].grad_sq_norms != NULL; b++)
            g_grad_sq_sum[s] += reports[s].grad_sq_norms[b];
        reports[s].grad_sq_norms = NULL;
    }
    float *p = pipeline_params(rs, rn, count);
    for (int s = 0; s < rs->stages; s++)
        rt_runner_destroy(&rn[s]);
    return p;
}

/* The reference: one kn_stage over the whole model, the same micro-batches, gradients
 * accumulated, one kn_stage_step per batch: no runtime code involved. */
static float *train_reference(const run_spec *rs, size_t *count, float **init)
{
    sc_err err;
    sc_err_clear(&err);
    sc_jdoc *doc = NULL;
    kn_model *m = NULL;
    assert_int_equal(sc_jdoc_parse(&doc, "model", rs->model, strlen(rs->model), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc);
    assert_int_equal(kn_model_from_node(&m, &root, &err), SC_OK);
    int nb = kn_model_block_count(m), M = 0;
    for (int mb = 0; mb < rs->microbatches; mb++)
        M = spec_size(rs, mb) > M ? spec_size(rs, mb) : M;
    kn_device cpu = {KN_DEV_CPU, 0};
    kn_stage_cfg sc = kn_stage_cfg_default(0, nb - 1, cpu, M);
    rt_runner_cfg rc = spec_cfg(rs, 0, nb);
    if (strcmp(rs->optimizer, "sgd") == 0) {
        sc.optim = kn_optim_sgd_default();
        sc.optim.momentum = (float)rc.momentum;
    }
    sc.optim.lr = (float)rc.lr;
    sc.optim.weight_decay = (float)rc.weight_decay;
    kn_stage *st = NULL;
    assert_int_equal(kn_stage_new_cfg(&st, m, &sc, &err), SC_OK);
    assert_int_equal(kn_stage_set_frozen_blocks(st, g_frozen, &err), SC_OK);
    int tps = kn_model_targets_per_sample(m);
    kn_stage_set_loss_scale(st, 1.0f / (float)(rs->batch * tps));

    rt_data_cfg dc;
    memset(&dc, 0, sizeof dc);
    assert_int_equal(rt_data_kind_parse(rc.data_kind, "data", &dc.kind, &err), SC_OK);
    dc.path = rc.data_path;
    dc.seed = rc.seed;
    dc.inputs_are_tokens = kn_model_block(m, 0)->in_tokens;
    dc.input_elems = kn_model_block(m, 0)->in_floats;
    dc.targets_per_sample = tps;
    dc.classes = kn_model_classes(m);
    rt_data *d = NULL;
    assert_int_equal(rt_data_new(&d, &dc, &err), SC_OK);

    size_t np = kn_stage_param_count(st);
    *init = malloc(np * sizeof **init);
    assert_int_equal(kn_stage_params_to_host(st, *init, &err), SC_OK);
    void *in = malloc((size_t)M * dc.input_elems * 4);
    int32_t *tgt = malloc((size_t)M * (size_t)tps * sizeof *tgt);
    for (int step = 1; step <= rs->steps; step++) {
        assert_int_equal(kn_stage_zero_grads(st, &err), SC_OK);
        /* the configured micro-batches, never sliced: slicing must not change the result */
        for (int mb = 0, off = 0; mb < rs->microbatches; off += spec_size(rs, mb), mb++) {
            int n = spec_size(rs, mb);
            assert_int_equal(rt_data_batch(d, (uint64_t)step, off, n, in, tgt, &err), SC_OK);
            assert_int_equal(kn_stage_forward_host(st, 0, in, tgt, n, &err), SC_OK);
            assert_int_equal(kn_stage_backward_host(st, 0, NULL, &err), SC_OK);
        }
        assert_int_equal(kn_stage_step(st, &err), SC_OK);
    }
    float *p = malloc(np * sizeof *p);
    assert_int_equal(kn_stage_params_to_host(st, p, &err), SC_OK);
    *count = np;
    free(in);
    free(tgt);
    rt_data_destroy(&d);
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
    sc_jdoc_destroy(&doc);
    return p;
}

/* ||a - b|| / ||b|| within 1e-5, and the training moved the weights by much more than that. */
static void assert_params_close(const float *a, const float *b, const float *init, size_t n)
{
    double diff = 0.0, norm = 0.0, moved = 0.0;
    for (size_t i = 0; i < n; i++) {
        diff += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        norm += (double)b[i] * b[i];
        moved += ((double)b[i] - init[i]) * ((double)b[i] - init[i]);
    }
    double rel = sqrt(diff / norm), rel_moved = sqrt(moved / norm);
    if (rel > 1e-5)
        print_error("relative difference %g (weights moved %g)\n", rel, rel_moved);
    assert_true(rel <= 1e-5);
    assert_true(rel_moved > 1e-3);
}

/* Whether some backward entry of stage s is not exactly one of its forward micro-batches: the
 * runner then gathers it into one more activation slot. */
static bool per_stage_gathers(const per_stage_sizes *ps, int s)
{
    if (ps == NULL || ps->bwd[s] == NULL)
        return false;
    for (int j = 0, a = 0; j < ps->bcounts[s]; a += ps->bwd[s][j], j++) {
        bool same = false;
        for (int k = 0, fa = 0; k < ps->counts[s]; fa += ps->sizes[s][k], k++)
            same = same || (fa == a && ps->sizes[s][k] == ps->bwd[s][j]);
        if (!same)
            return true;
    }
    return false;
}

static void check_equivalence(const run_spec *rs)
{
    size_t n_ref = 0, n_pipe = 0;
    float *init = NULL;
    float *ref = train_reference(rs, &n_ref, &init);
    rt_report reports[8];
    float *pipe = train_pipeline(rs, &n_pipe, reports);
    assert_int_equal(n_ref, n_pipe);
    assert_params_close(pipe, ref, init, n_ref);
    for (int s = 0; s < rs->stages; s++) {
        const rt_report *r = &reports[s];
        assert_int_equal(r->step, (uint64_t)rs->steps);
        assert_int_equal(r->has_loss, s == rs->stages - 1);
        int me = g_per_stage != NULL ? g_per_stage->counts[s] : effective_microbatches(rs);
        bool fill_drain =
            strcmp(rs->schedule, "gpipe") == 0 || strcmp(rs->schedule, "unequal") == 0;
        /* zb1 holds a micro-batch from F to W: min(p, m) on every stage, with capped deferral
         * p-s + min(cap, s) (s W deferred at most, fewer when m is short) */
        int held = rs->stages - s;
        if (strcmp(rs->schedule, "zb1") == 0) {
            int warm = rs->stages - s - 1 < me ? rs->stages - s - 1 : me;
            int d = s < me - warm ? s : me - warm;
            held += g_zb1_defer != NULL && g_zb1_defer[s] < d ? g_zb1_defer[s] : d;
        }
        int bound = fill_drain ? me : (held < me ? held : me);
        if (strcmp(rs->schedule, "sliced") == 0) {
            /* the warm-up covers p-s-1 micro-batches' worth, the k halves counted as halves */
            int k = rs->slice_k < rs->microbatches ? rs->slice_k : rs->microbatches;
            int need = rs->stages - s - 1, warm = need <= k ? 2 * need : need + k;
            bound = warm + 1 < me ? warm + 1 : me;
        }
        assert_int_equal(r->microbatches, me);
        assert_int_equal(r->slots, bound + (per_stage_gathers(g_per_stage, s) ? 1 : 0));
        assert_int_equal(r->max_inflight, bound);
        assert_true(r->iteration_s > 0.0 && r->busy_s <= r->iteration_s * 1.01);
        assert_true(r->n_blocks >= 1);
        /* a stage of lone pool blocks would have no parameters; none here. A stage frozen
         * whole has no gradient. */
        int last_block = (s + 1) * model_blocks(rs->model) / rs->stages - 1;
        if (last_block < g_frozen)
            assert_true(g_grad_sq_sum[s] == 0.0);
        else
            assert_true(g_grad_sq_sum[s] > 0.0);
    }
    assert_true(isfinite(reports[rs->stages - 1].loss) && reports[rs->stages - 1].loss > 0.0);
    free(ref);
    free(pipe);
    free(init);
}

/* A job that never freezes skips the per-block gradient norms: its reports carry none, and it
 * trains to the same parameters, bit for bit, as with them. */
static void test_grad_norms_skipped(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "1f1b", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0};
    rt_report reports[2];
    size_t n_with = 0, n_without = 0;
    float *with = train_pipeline(&rs, &n_with, reports);
    for (int s = 0; s < rs.stages; s++)
        assert_true(g_grad_sq_sum[s] > 0.0);
    g_skip_norms = true;
    float *without = train_pipeline(&rs, &n_without, reports);
    g_skip_norms = false;
    for (int s = 0; s < rs.stages; s++)
        assert_true(g_grad_sq_sum[s] == -1.0); /* no norms reported */
    assert_int_equal(n_with, n_without);
    assert_memory_equal(with, without, n_with * sizeof *with);
    free(with);
    free(without);
}

/* fp16's dynamic loss scale: a start far too large overflows, every stage skips the same steps
 * (the verdict travels up and back down the pipeline), the scale halves until the gradients fit
 * and then trains; the stages end with one scale and finite parameters. */
static void test_fp16_loss_scale(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "1f1b", 3, 8, 4, 12, "adamw", "zmq", NULL, NULL, NULL, 0};
    rt_report reports[3];
    size_t n = 0;
    g_precision = "fp16";
    g_scale_init = 0x1p24; /* the head's loss gradient, S / 64 per position, overflows fp16 */
    g_scale_interval = 4;
    float *params = train_pipeline(&rs, &n, reports);
    g_precision = NULL;
    g_scale_init = 0;
    g_scale_interval = 0;
    for (int s = 0; s < rs.stages; s++) {
        print_message("stage %d: loss scale %g, %llu step(s) skipped\n", s,
                      (double)reports[s].loss_scale,
                      (unsigned long long)reports[s].skipped_steps);
        assert_true(reports[s].skipped_steps >= 1);
        assert_true(reports[s].skipped_steps < (uint64_t)rs.steps); /* it trained too */
        assert_int_equal(reports[s].skipped_steps, reports[0].skipped_steps);
        assert_true(reports[s].loss_scale == reports[0].loss_scale);
        assert_true(reports[s].loss_scale < 0x1p24f);
    }
    assert_true(reports[rs.stages - 1].has_loss && isfinite(reports[rs.stages - 1].loss));
    for (size_t i = 0; i < n; i++)
        assert_true(isfinite(params[i]));
    free(params);
}

static void test_equivalence_gpt(void **state)
{
    (void)state;
    const run_spec specs[] = {
        {GPT_JSON, "gpipe", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "1f1b", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "gpipe", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "1f1b", 4, 8, 8, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "1f1b", 4, 6, 3, 2, "sgd", "local", NULL, NULL, NULL, 0}, /* m < p */
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        check_equivalence(&specs[i]);
}

/* Parameters of the model's first `blocks` blocks. */
static size_t prefix_params(const char *json, int blocks)
{
    sc_jdoc *doc = NULL;
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "model", json, strlen(json), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc);
    assert_int_equal(kn_model_from_node(&m, &root, &err), SC_OK);
    size_t n = 0;
    for (int i = 0; i < blocks; i++)
        n += kn_model_block(m, i)->params;
    kn_model_destroy(&m);
    sc_jdoc_destroy(&doc);
    return n;
}

/* A frozen prefix (freezing): a stage frozen whole takes no gradient and sends none, the stage
 * where the prefix ends sends none upstream, one cut inside its blocks runs the backward of the
 * rest only; the result is the one-stage training with the same blocks frozen, and the frozen
 * parameters stay as they were, bit for bit. The GPT has 4 blocks (embedding, 2 layers, head). */
static void test_equivalence_frozen(void **state)
{
    (void)state;
    const struct {
        run_spec rs;
        int frozen;
        bool memory_path;
    } cases[] = {
        {{GPT_JSON, "1f1b", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0}, 1, false},
        {{GPT_JSON, "1f1b", 4, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0}, 3, false},
        {{GPT_JSON, "gpipe", 2, 8, 4, 3, "sgd", "zmq", NULL, NULL, NULL, 0}, 1, false},
        {{GPT_JSON, "gpipe", 2, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0}, 2, true},
        {{GPT_JSON, "sliced", 4, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 2}, 2, false},
        {{GPT_JSON, "zb1", 4, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0}, 2, false},
        {{GPT_JSON, "zb1", 2, 8, 4, 3, "sgd", "zmq", NULL, NULL, NULL, 0}, 1, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        g_frozen = cases[i].frozen;
        g_stage_memory_path = cases[i].memory_path;
        check_equivalence(&cases[i].rs);
        size_t n_pipe = 0, frozen = prefix_params(cases[i].rs.model, g_frozen);
        rt_report reports[8];
        float *pipe = train_pipeline(&cases[i].rs, &n_pipe, reports);
        size_t n_ref = 0;
        float *init = NULL;
        float *ref = train_reference(&cases[i].rs, &n_ref, &init);
        assert_true(frozen > 0 && frozen < n_pipe);
        assert_memory_equal(pipe, init, frozen * sizeof *pipe);
        assert_memory_not_equal(pipe + frozen, init + frozen, (n_pipe - frozen) * sizeof *pipe);
        free(pipe);
        free(ref);
        free(init);
    }
    g_frozen = 0;
    g_stage_memory_path = false;
}

/* The data path a GPU stage takes when its transport carries device memory (its slot's output
 * sent directly, receive buffers the forward and backward read, a copy of the input gradient,
 * the last stage's targets uploaded), run on CPU stages, whose "device" memory is host memory:
 * the same parameters as the host-buffer path, bit for bit. */
static void test_stage_memory_path(void **state)
{
    (void)state;
    static const int sizes[] = {3, 1, 2, 2};
    const run_spec specs[] = {
        {GPT_JSON, "gpipe", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "1f1b", 3, 8, 4, 3, "sgd", "local", NULL, NULL, sizes, 0},
        {GPT_JSON, "sliced", 4, 8, 4, 2, "adamw", "local", NULL, NULL, NULL, 3},
        {VGG_JSON, "1f1b", 2, 4, 2, 2, "sgd", "local", NULL, NULL, NULL, 0},
        {GPT_JSON, "zb1", 3, 8, 4, 2, "adamw", "local", NULL, NULL, sizes, 0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        size_t n_host = 0, n_dev = 0;
        rt_report reports[8];
        float *host = train_pipeline(&specs[i], &n_host, reports);
        g_stage_memory_path = true;
        float *dev = train_pipeline(&specs[i], &n_dev, reports);
        g_stage_memory_path = false;
        assert_int_equal(n_host, n_dev);
        assert_memory_equal(host, dev, n_host * sizeof(float));
        free(host);
        free(dev);
    }
    /* and still the single-process result */
    g_stage_memory_path = true;
    check_equivalence(&specs[1]);
    g_stage_memory_path = false;
}

static void test_equivalence_unequal_sliced(void **state)
{
    (void)state;
    static const int sizes_a[] = {3, 1, 2, 2}, sizes_b[] = {1, 3, 2, 2}, sizes_c[] = {2, 1, 1};
    const run_spec specs[] = {
        {GPT_JSON, "1f1b", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, sizes_a, 0},
        {GPT_JSON, "gpipe", 4, 8, 4, 3, "sgd", "local", NULL, NULL, sizes_b, 0},
        {GPT_JSON, "sliced", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 3},
        {GPT_JSON, "sliced", 2, 8, 2, 3, "sgd", "local", NULL, NULL, NULL, 1},
        {VGG_JSON, "sliced", 4, 4, 2, 2, "sgd", "zmq", NULL, NULL, NULL, 2},
        {MLP_JSON, "sliced", 4, 4, 3, 3, "adamw", "local", NULL, NULL, sizes_c, 1},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        check_equivalence(&specs[i]);
}

/* Each stage cuts the batch its own way (fill-drain): still the single-stage result. */
static void test_equivalence_per_stage_sizes(void **state)
{
    (void)state;
    static const int a[] = {3, 5}, b[] = {2, 2, 4}, c[] = {8}, d[] = {1, 3, 4}, e[] = {4, 4},
                     f[] = {2, 3, 3}, g[] = {1, 1, 1, 5};
    const per_stage_sizes three = {.sizes = {a, b, c}, .counts = {2, 3, 1}};
    const per_stage_sizes three_b = {.sizes = {d, e, f}, .counts = {3, 2, 3}};
    const per_stage_sizes two = {.sizes = {c, g}, .counts = {1, 4}};
    const per_stage_sizes two_b = {.sizes = {b, a}, .counts = {3, 2}};
    const struct {
        run_spec rs;
        const per_stage_sizes *ps;
    } cases[] = {
        {{GPT_JSON, "gpipe", 3, 8, 2, 3, "adamw", "zmq", NULL, NULL, a, 0}, &three},
        {{GPT_JSON, "unequal", 2, 8, 3, 3, "sgd", "local", NULL, NULL, b, 0}, &two_b},
        {{GPT_JSON, "unequal", 3, 8, 3, 2, "adamw", "local", NULL, NULL, d, 0}, &three_b},
        {{MLP_JSON, "unequal", 3, 8, 2, 4, "adamw", "local", NULL, NULL, a, 0}, &three},
        {{MLP_JSON, "gpipe", 3, 8, 3, 3, "sgd", "zmq", NULL, NULL, d, 0}, &three_b},
        {{MLP_JSON, "unequal", 2, 8, 1, 4, "adamw", "zmq", NULL, NULL, c, 0}, &two},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        g_per_stage = cases[i].ps;
        check_equivalence(&cases[i].rs);
        g_per_stage = NULL;
    }
}

/* UMPIPE's backward cut: every stage runs its backwards over its own sizes, which differ from its
 * forward sizes and from the neighbours' (entries that span several forwards, that split one,
 * that coincide with one): still the single-stage result with gradient accumulation. */
static void test_equivalence_backward_sizes(void **state)
{
    (void)state;
    static const int f35[] = {3, 5}, f44[] = {4, 4}, f8[] = {8}, f224[] = {2, 2, 4},
                     f1115[] = {1, 1, 1, 5}, f26[] = {2, 6}, f125[] = {1, 2, 5},
                     f2222[] = {2, 2, 2, 2}, f1223[] = {1, 2, 2, 3}, f13[] = {1, 3}, f22[] = {2, 2},
                     f4[] = {4};
    static const int b224[] = {2, 2, 4}, b8[] = {8}, b134[] = {1, 3, 4}, b44[] = {4, 4},
                     b35[] = {3, 5}, b53[] = {5, 3}, b2222[] = {2, 2, 2, 2}, b314[] = {3, 1, 4},
                     b17[] = {1, 7}, b116[] = {1, 1, 6}, b26[] = {2, 6}, b323[] = {3, 2, 3},
                     b11114[] = {1, 1, 1, 1, 4}, b22[] = {2, 2}, b4[] = {4}, b13[] = {1, 3};
    /* GPT, 2 stages: stage 0's [0, 2) splits its first forward, [2, 4) spans both, [4, 8) is the
     * end of the second; stage 1 runs one backward over its two forwards */
    const per_stage_sizes gpt2 = {{f35, f44}, {2, 2}, {b224, b8}, {3, 1}};
    /* GPT, 3 stages: one forward split in three, two forwards joined, a mixed last stage */
    const per_stage_sizes gpt3 = {{f8, f224, f1115}, {1, 3, 4}, {b134, b44, b35}, {3, 2, 2}};
    const per_stage_sizes gpt4 = {
        {f26, f8, f125, f44}, {2, 1, 3, 2}, {b53, b2222, b314, b17}, {2, 4, 3, 2}};
    /* only the middle stage has its own backward cut; its neighbours run theirs as forward */
    const per_stage_sizes gpt3_mid = {{f35, f224, f8}, {2, 3, 1}, {NULL, b17, NULL}, {0, 2, 0}};
    const per_stage_sizes mlp2 = {{f35, f2222}, {2, 4}, {b116, b35}, {3, 2}};
    const per_stage_sizes mlp4 = {
        {f8, f44, f1223, f35}, {1, 2, 4, 2}, {b26, b8, b323, b11114}, {2, 1, 3, 5}};
    const per_stage_sizes mlp1 = {{f35}, {2}, {b26}, {2}};
    const per_stage_sizes vgg2 = {{f13, f22}, {2, 2}, {b22, b4}, {2, 1}};
    const per_stage_sizes vgg2_b = {{f4, f13}, {1, 2}, {b13, b22}, {2, 2}};
    const struct {
        run_spec rs;
        const per_stage_sizes *ps;
    } cases[] = {
        {{GPT_JSON, "unequal", 2, 8, 2, 3, "adamw", "local", NULL, NULL, f35, 0}, &gpt2},
        {{GPT_JSON, "gpipe", 3, 8, 1, 3, "sgd", "zmq", NULL, NULL, f8, 0}, &gpt3},
        {{GPT_JSON, "unequal", 4, 8, 2, 2, "adamw", "zmq", NULL, NULL, f26, 0}, &gpt4},
        {{GPT_JSON, "unequal", 3, 8, 2, 3, "adamw", "local", NULL, NULL, f35, 0}, &gpt3_mid},
        {{MLP_JSON, "unequal", 2, 8, 2, 4, "sgd", "local", NULL, NULL, f35, 0}, &mlp2},
        {{MLP_JSON, "gpipe", 4, 8, 1, 4, "adamw", "zmq", NULL, NULL, f8, 0}, &mlp4},
        {{MLP_JSON, "unequal", 1, 8, 2, 3, "adamw", "local", NULL, NULL, f35, 0}, &mlp1},
        {{VGG_JSON, "unequal", 2, 4, 2, 2, "sgd", "local", NULL, NULL, f13, 0}, &vgg2},
        {{VGG_JSON, "unequal", 2, 4, 1, 2, "adamw", "zmq", NULL, NULL, f4, 0}, &vgg2_b},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        g_per_stage = cases[i].ps;
        check_equivalence(&cases[i].rs);
        g_per_stage = NULL;
    }
}

static void test_equivalence_gpt_text(void **state)
{
    (void)state;
    char path[] = "/tmp/sc_test_runtime_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char text[2000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = "the quick brown fox jumps over the lazy dog. "[i % 45];
    assert_int_equal(write(fd, text, sizeof text), (ssize_t)sizeof text);
    close(fd);
    run_spec rs = {GPT_JSON, "1f1b", 2, 4, 2, 3, "adamw", "zmq", "text", path, NULL, 0};
    check_equivalence(&rs);
    unlink(path);
}

static void test_equivalence_vgg_mlp(void **state)
{
    (void)state;
    const run_spec specs[] = {
        {VGG_JSON, "gpipe", 2, 4, 2, 2, "sgd", "zmq", NULL, NULL, NULL, 0},
        {VGG_JSON, "1f1b", 4, 4, 4, 2, "sgd", "zmq", NULL, NULL, NULL, 0},
        {VGG_JSON, "gpipe", 4, 4, 2, 2, "adamw", "local", NULL, NULL, NULL, 0},
        {MLP_JSON, "1f1b", 2, 8, 4, 4, "adamw", "zmq", NULL, NULL, NULL, 0},
        {MLP_JSON, "gpipe", 4, 8, 4, 4, "sgd", "local", NULL, NULL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        check_equivalence(&specs[i]);
}

/* zb1 (B, and W deferred): the parameters of one-process training, and bit for bit those of
 * 1f1b with the same stages and micro-batches (each stage adds its micro-batches' parameter
 * gradients in the same order, only later). */
static void test_equivalence_zb1(void **state)
{
    (void)state;
    const run_spec specs[] = {
        {GPT_JSON, "zb1", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "zb1", 4, 8, 8, 3, "adamw", "local", NULL, NULL, NULL, 0},
        {GPT_JSON, "zb1", 4, 6, 3, 2, "sgd", "local", NULL, NULL, NULL, 0}, /* m < p */
        {VGG_JSON, "zb1", 4, 4, 4, 2, "sgd", "local", NULL, NULL, NULL, 0},
        {MLP_JSON, "zb1", 3, 8, 4, 4, "adamw", "zmq", NULL, NULL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        check_equivalence(&specs[i]);
        run_spec o = specs[i];
        o.schedule = "1f1b";
        size_t nz = 0, no = 0;
        rt_report rz[8], ro[8];
        float *pz = train_pipeline(&specs[i], &nz, rz), *po = train_pipeline(&o, &no, ro);
        assert_int_equal(nz, no);
        assert_memory_equal(pz, po, nz * sizeof *pz);
        for (int st = 0; st < specs[i].stages; st++) {
            assert_true(rz[st].wgrad_s > 0.0 && rz[st].wgrad_s <= rz[st].backward_s);
            assert_true(ro[st].wgrad_s == 0.0);
        }
        free(pz);
        free(po);
    }
}

/* zb1 with its deferred W capped (the plan's deferred_w: a GPT whose head stage has the largest
 * slot): the parameters of one-process training, bit for bit those of uncapped zb1 and of 1f1b
 * (the caps move W, never the order of a stage's gradient additions), each stage holding
 * p-s + min(cap, s) micro-batches and allocating exactly that many slots. */
static void test_equivalence_zb1_capped(void **state)
{
    (void)state;
    static const int caps[][4] = {{0, 1, 2, 0}, {0, 0, 0, 0}, {0, 1, 1, 1}};
    const run_spec specs[] = {
        {GPT_JSON, "zb1", 4, 8, 8, 3, "adamw", "local", NULL, NULL, NULL, 0},
        {GPT_JSON, "zb1", 4, 8, 4, 2, "sgd", "zmq", NULL, NULL, NULL, 0},
        {MLP_JSON, "zb1", 3, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        g_zb1_defer = caps[i];
        check_equivalence(&specs[i]);
        size_t nc = 0, nz = 0, no = 0;
        rt_report rc[8], rz[8], ro[8];
        float *pc = train_pipeline(&specs[i], &nc, rc);
        g_zb1_defer = NULL;
        run_spec o = specs[i];
        float *pz = train_pipeline(&specs[i], &nz, rz);
        o.schedule = "1f1b";
        float *po = train_pipeline(&o, &no, ro);
        assert_int_equal(nc, nz);
        assert_int_equal(nc, no);
        assert_memory_equal(pc, pz, nc * sizeof *pc);
        assert_memory_equal(pc, po, nc * sizeof *pc);
        for (int st = 0; st < specs[i].stages; st++)
            assert_true(rc[st].slots <= rz[st].slots && rc[st].slots >= ro[st].slots);
        free(pc);
        free(pz);
        free(po);
    }
}

/* ---- separate worker processes over zmq ---- */

#define EXIT_TIMEOUT 3 /* a child whose step failed with SC_ERR_TIMEOUT / SC_ERR_UNAVAILABLE */

static bool write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

/* A worker process: binds, publishes its endpoint, learns its neighbours', trains, sends its
 * parameters back. No cmocka here: the child reports through its exit status. */
static void child_main(const run_spec *rs, int s, int up, int down, int timeout_ms, int die_after)
{
    rt_runner_cfg c = spec_cfg(rs, s, model_blocks(rs->model));
    c.timeout_ms = timeout_ms;
    rt_runner *r = NULL;
    sc_err err;
    sc_err_clear(&err);
    char ep[RT_ENDPOINT_MAX] = {0}, prev[RT_ENDPOINT_MAX], next[RT_ENDPOINT_MAX];
    if (rt_runner_new(&r, &c, &err) != SC_OK)
        _exit(1);
    snprintf(ep, sizeof ep, "%s", rt_runner_endpoint(r));
    if (!write_all(up, ep, sizeof ep) || !read_all(down, prev, sizeof prev) ||
        !read_all(down, next, sizeof next))
        _exit(1);
    if (rt_runner_connect(r, prev, next, &err) != SC_OK)
        _exit(1);
    for (int i = 0; i < rs->steps; i++) {
        if (i == die_after)
            raise(SIGKILL); /* the worker dies mid-job, without any goodbye */
        sc_status rc = rt_runner_step(r, (uint64_t)i + 1, NULL, &err);
        if (rc != SC_OK)
            fprintf(stderr, "child %d: %s\n", s, err.msg);
        if (rc == SC_ERR_TIMEOUT || rc == SC_ERR_UNAVAILABLE)
            _exit(EXIT_TIMEOUT);
        if (rc != SC_OK)
            _exit(1);
    }
    size_t n = rt_runner_param_count(r);
    float *p = malloc(n * sizeof *p + 1);
    if (p == NULL || rt_runner_params_to_host(r, p, &err) != SC_OK)
        _exit(1);
    /* Closing delivers what is still queued (the last stage's final gradients). */
    rt_runner_destroy(&r);
    if (!write_all(up, &n, sizeof n) || !write_all(up, p, n * sizeof *p))
        _exit(1);
    free(p);
    _exit(0);
}

/* Runs the pipeline as p processes. Returns the concatenated parameters (NULL when a child
 * failed) and each child's wait status. */
static float *train_processes(const run_spec *rs, int timeout_ms, int victim, int die_after,
                              size_t *count, int *status)
{
    int p = rs->stages;
    pid_t pid[8];
    int up[8][2], down[8][2];
    fflush(NULL);
    for (int s = 0; s < p; s++) {
        assert_int_equal(pipe(up[s]), 0);
        assert_int_equal(pipe(down[s]), 0);
        pid[s] = fork();
        assert_true(pid[s] >= 0);
        if (pid[s] == 0) {
            close(up[s][0]);
            close(down[s][1]);
            child_main(rs, s, up[s][1], down[s][0], timeout_ms, s == victim ? die_after : -1);
        }
        close(up[s][1]);
        close(down[s][0]);
    }
    char eps[8][RT_ENDPOINT_MAX];
    for (int s = 0; s < p; s++)
        assert_true(read_all(up[s][0], eps[s], sizeof eps[s]));
    for (int s = 0; s < p; s++) {
        char none[RT_ENDPOINT_MAX] = {0};
        assert_true(write_all(down[s][1], s > 0 ? eps[s - 1] : none, RT_ENDPOINT_MAX));
        assert_true(write_all(down[s][1], s < p - 1 ? eps[s + 1] : none, RT_ENDPOINT_MAX));
    }
    float *all = NULL;
    size_t total = 0;
    bool ok = true;
    for (int s = 0; s < p; s++) {
        size_t n = 0;
        if (!ok || !read_all(up[s][0], &n, sizeof n)) {
            ok = false;
            continue;
        }
        float *grown = realloc(all, (total + n) * sizeof *all);
        assert_non_null(grown);
        all = grown;
        ok = read_all(up[s][0], all + total, n * sizeof *all);
        total += n;
    }
    for (int s = 0; s < p; s++) {
        assert_int_equal(waitpid(pid[s], &status[s], 0), pid[s]);
        close(up[s][0]);
        close(down[s][1]);
    }
    if (!ok) {
        free(all);
        all = NULL;
    }
    *count = total;
    return all;
}

static void test_equivalence_processes(void **state)
{
    (void)state;
    const run_spec specs[] = {
        {GPT_JSON, "gpipe", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "1f1b", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {VGG_JSON, "1f1b", 4, 4, 4, 2, "sgd", "zmq", NULL, NULL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        size_t n_ref = 0, n_proc = 0;
        float *init = NULL;
        float *ref = train_reference(&specs[i], &n_ref, &init);
        int status[8];
        float *got = train_processes(&specs[i], 20000, -1, -1, &n_proc, status);
        for (int s = 0; s < specs[i].stages; s++) {
            if (!WIFEXITED(status[s]) || WEXITSTATUS(status[s]) != 0)
                print_error("spec %zu stage %d: wait status 0x%x\n", i, s, status[s]);
            assert_true(WIFEXITED(status[s]));
            assert_int_equal(WEXITSTATUS(status[s]), 0);
        }
        assert_non_null(got);
        assert_int_equal(n_proc, n_ref);
        assert_params_close(got, ref, init, n_ref);
        free(ref);
        free(init);
        free(got);
    }
}

/* A worker killed at the start of its second step: its neighbours' steps fail with a timeout
 * instead of hanging, and every process ends. */
static void test_worker_killed(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "1f1b", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0};
    int status[8];
    size_t n = 0;
    float *got = train_processes(&rs, 500, 2, 1, &n, status);
    assert_null(got);
    assert_true(WIFSIGNALED(status[2]) && WTERMSIG(status[2]) == SIGKILL);
    for (int s = 0; s < 4; s++) {
        if (s == 2)
            continue;
        /* every survivor waits on the dead stage, directly or through a neighbour */
        assert_true(WIFEXITED(status[s]));
        assert_int_equal(WEXITSTATUS(status[s]), EXIT_TIMEOUT);
    }
}

/* ---- pipedream: asynchronous 1f1b with weight stashing ---- */

/* Per stage: every forward / backward event of a run of steps (and of a flush), copied out after
 * each call since the report's array belongs to the runner, and the in-flight count each call
 * left behind. */
typedef struct {
    rt_runner *r;
    uint64_t first_step;
    int steps;
    bool flush;
    sc_status rc;
    sc_err err;
    rt_report last;
    rt_pd_event log[1024];
    int n_log;
    int inflight_end[128]; /* [steps], then the flush's */
    int first_event[128];  /* log index of each call's first event */
    double loss[128];      /* each step's loss (last stage) */
} pd_job;

static void pd_log(pd_job *j, const rt_report *rep, int call)
{
    j->inflight_end[call] = rep->inflight_end;
    j->loss[call] = rep->loss;
    j->first_event[call] = j->n_log;
    for (int k = 0; k < rep->n_events && j->n_log < 1024; k++)
        j->log[j->n_log++] = rep->events[k];
}

static void *pd_thread(void *arg)
{
    pd_job *j = arg;
    sc_err_clear(&j->err);
    j->rc = SC_OK;
    int i = 0;
    for (; i < j->steps && j->rc == SC_OK; i++) {
        j->rc = rt_runner_step(j->r, j->first_step + (uint64_t)i, &j->last, &j->err);
        if (j->rc == SC_OK)
            pd_log(j, &j->last, i);
    }
    if (j->flush && j->rc == SC_OK) {
        rt_report rep;
        j->rc = rt_runner_flush(j->r, &rep, &j->err);
        if (j->rc == SC_OK)
            pd_log(j, &rep, i);
    }
    return NULL;
}

/* Runs steps [first_step, first_step + steps) on the n runners at once (every stage, or every
 * copy of every stage), then flushes if asked. jobs[] (heap: the logs are large) receive the
 * logs, one per runner. */
static pd_job *pd_run_runners(rt_runner **rn, int n, uint64_t first_step, int steps, bool flush)
{
    pthread_t th[8];
    assert_true(n <= 8);
    pd_job *jobs = calloc((size_t)n, sizeof *jobs);
    assert_non_null(jobs);
    for (int s = 0; s < n; s++) {
        jobs[s].r = rn[s];
        jobs[s].first_step = first_step;
        jobs[s].steps = steps;
        jobs[s].flush = flush;
        assert_int_equal(pthread_create(&th[s], NULL, pd_thread, &jobs[s]), 0);
    }
    for (int s = 0; s < n; s++)
        pthread_join(th[s], NULL);
    for (int s = 0; s < n; s++) {
        if (jobs[s].rc != SC_OK)
            print_error("runner %d: %s\n", s, jobs[s].err.msg);
        assert_int_equal(jobs[s].rc, SC_OK);
    }
    return jobs;
}

static pd_job *pd_run(const run_spec *rs, rt_runner **rn, uint64_t first_step, int steps,
                      bool flush)
{
    return pd_run_runners(rn, rs->stages, first_step, steps, flush);
}

/* The two-stage asynchronous pipedream stream done by hand, one thread, straight on kn_stage:
 * the minibatches of all steps form one stream g = 0..steps*m-1 (micro-batch g % m of step
 * 1 + g / m); stage 0 runs F(g+1) before B(g), stage 1 runs F(g), B(g); each backward is followed
 * by that stage's optimizer step, and stage 0's backward of g runs with the weights its forward
 * of g used (saved here by hand). The stream never drains between steps; the last backward is
 * the final flush's. Returns both stages' parameters, concatenated. */
static float *pipedream_reference(const run_spec *rs, size_t *count)
{
    sc_err err;
    sc_err_clear(&err);
    sc_jdoc *doc = NULL;
    kn_model *m = NULL;
    assert_int_equal(sc_jdoc_parse(&doc, "model", rs->model, strlen(rs->model), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc);
    assert_int_equal(kn_model_from_node(&m, &root, &err), SC_OK);
    int nb = kn_model_block_count(m), M = rs->batch / rs->microbatches, mbs = rs->microbatches;
    kn_device cpu = {KN_DEV_CPU, 0};
    kn_stage *st[2];
    rt_runner_cfg rc = spec_cfg(rs, 0, nb);
    for (int s = 0; s < 2; s++) {
        rt_runner_cfg c = spec_cfg(rs, s, nb);
        kn_stage_cfg sc = kn_stage_cfg_default(c.first_block, c.last_block, cpu, M);
        sc.slots = 2;
        if (strcmp(rs->optimizer, "sgd") == 0) {
            sc.optim = kn_optim_sgd_default();
            sc.optim.momentum = (float)rc.momentum;
        }
        sc.optim.lr = (float)rc.lr;
        sc.optim.weight_decay = (float)rc.weight_decay;
        assert_int_equal(kn_stage_new_cfg(&st[s], m, &sc, &err), SC_OK);
    }
    int tps = kn_model_targets_per_sample(m);
    rt_data_cfg dc;
    memset(&dc, 0, sizeof dc);
    dc.kind = RT_DATA_SYNTHETIC;
    dc.seed = rc.seed;
    dc.inputs_are_tokens = kn_model_block(m, 0)->in_tokens;
    dc.input_elems = kn_model_block(m, 0)->in_floats;
    dc.targets_per_sample = tps;
    dc.classes = kn_model_classes(m);
    rt_data *d = NULL;
    assert_int_equal(rt_data_new(&d, &dc, &err), SC_OK);

    size_t n0 = kn_stage_param_count(st[0]), n1 = kn_stage_param_count(st[1]);
    size_t act = (size_t)M * kn_stage_output_per_sample(st[0]);
    float *stash[2] = {malloc(n0 * 4), malloc(n0 * 4)}, *newest = malloc(n0 * 4);
    float *a = malloc(act * 4), *g = malloc(act * 4);
    void *in = malloc((size_t)M * dc.input_elems * 4);
    int32_t *tgt = malloc((size_t)M * (size_t)tps * 4);
    int total = rs->steps * mbs;
    for (int k = -1; k < total; k++) {
        int f = k + 1; /* stage 0's forward of f comes before its backward of k */
        if (f < total) {
            uint64_t step = 1 + (uint64_t)(f / mbs);
            assert_int_equal(rt_data_batch(d, step, (f % mbs) * M, M, in, NULL, &err), SC_OK);
            assert_int_equal(kn_stage_params_to_host(st[0], stash[f % 2], &err), SC_OK);
            assert_int_equal(kn_stage_forward_host(st[0], f % 2, in, NULL, M, &err), SC_OK);
        }
        if (k < 0)
            continue;
        uint64_t step = 1 + (uint64_t)(k / mbs);
        assert_int_equal(kn_stage_output_to_host(st[0], k % 2, a, &err), SC_OK);
        assert_int_equal(rt_data_batch(d, step, (k % mbs) * M, M, NULL, tgt, &err), SC_OK);
        assert_int_equal(kn_stage_zero_grads(st[1], &err), SC_OK);
        assert_int_equal(kn_stage_forward_host(st[1], 0, a, tgt, M, &err), SC_OK);
        assert_int_equal(kn_stage_backward_host(st[1], 0, NULL, &err), SC_OK);
        assert_int_equal(kn_stage_grad_input_to_host(st[1], g, &err), SC_OK);
        assert_int_equal(kn_stage_step(st[1], &err), SC_OK);
        /* stage 0: backward with the stashed weights, then update the newest ones */
        assert_int_equal(kn_stage_params_to_host(st[0], newest, &err), SC_OK);
        assert_int_equal(kn_stage_params_from_host(st[0], stash[k % 2], &err), SC_OK);
        assert_int_equal(kn_stage_zero_grads(st[0], &err), SC_OK);
        assert_int_equal(kn_stage_backward_host(st[0], k % 2, g, &err), SC_OK);
        assert_int_equal(kn_stage_params_from_host(st[0], newest, &err), SC_OK);
        assert_int_equal(kn_stage_step(st[0], &err), SC_OK);
    }
    float *all = malloc((n0 + n1) * sizeof *all);
    assert_int_equal(kn_stage_params_to_host(st[0], all, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(st[1], all + n0, &err), SC_OK);
    *count = n0 + n1;
    free(stash[0]);
    free(stash[1]);
    free(newest);
    free(a);
    free(g);
    free(in);
    free(tgt);
    rt_data_destroy(&d);
    for (int s = 0; s < 2; s++)
        kn_stage_destroy(&st[s]);
    kn_model_destroy(&m);
    sc_jdoc_destroy(&doc);
    return all;
}

/* Several steps without a drain between them, then one flush: bit for bit the hand-made stream. */
static void test_pipedream_weight_stashing(void **state)
{
    (void)state;
    const run_spec specs[] = {
        {GPT_JSON, "pipedream", 2, 6, 3, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {MLP_JSON, "pipedream", 2, 8, 4, 2, "sgd", "local", NULL, NULL, NULL, 0},
        {MLP_JSON, "pipedream", 2, 4, 1, 4, "adamw", "local", NULL, NULL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        size_t n_ref = 0, n_pipe = 0;
        float *ref = pipedream_reference(&specs[i], &n_ref);
        rt_runner *rn[2] = {0};
        pipeline_open(&specs[i], rn);
        pd_job *jobs = pd_run(&specs[i], rn, 1, specs[i].steps, true);
        /* stage 0 left one minibatch in flight after every step; the flush ran it */
        for (int c = 0; c < specs[i].steps; c++) {
            assert_int_equal(jobs[0].inflight_end[c], 1);
            assert_int_equal(jobs[1].inflight_end[c], 0);
        }
        assert_int_equal(jobs[0].inflight_end[specs[i].steps], 0);
        float *pipe = pipeline_params(&specs[i], rn, &n_pipe);
        assert_int_equal(n_ref, n_pipe);
        assert_memory_equal(pipe, ref, n_ref * sizeof *ref);
        for (int s = 0; s < 2; s++)
            rt_runner_destroy(&rn[s]);
        free(jobs);
        free(ref);
        free(pipe);
    }
}

/* The versions over a 4-stage stream of 3 steps without drains: stage s runs exactly
 * F(g), B(g - w) with w = p-s-1; each forward uses the newest weights (version = backwards run
 * before it on the stage), each backward exactly its forward's version (g - w updates behind
 * when the stream is full), never more than p-s minibatches (stashed versions) in flight. */
static void test_pipedream_versions(void **state)
{
    (void)state;
    enum { P = 4, MB = 8, STEPS = 3 };
    const run_spec rs = {GPT_JSON, "pipedream", P, 8, MB, 0, "adamw", "local", NULL, NULL, NULL, 0};
    rt_runner *r[P] = {0};
    pipeline_open(&rs, r);
    pd_job *jobs = pd_run(&rs, r, 1, STEPS, false);
    double loss0 = 0.0;
    for (int s = 0; s < P; s++) {
        const pd_job *j = &jobs[s];
        int w = P - s - 1, total = STEPS * MB;
        assert_int_equal(j->n_log, total + (total - w)); /* every F, all B but the last w */
        uint64_t fwd_ver[STEPS * MB];
        int at = 0, max_inflight = 0;
        for (int g = 0; g < total; g++) {
            const rt_pd_event *f = &j->log[at++];
            assert_false(f->backward);
            assert_int_equal(f->step, 1 + (uint64_t)(g / MB));
            assert_int_equal(f->mb, g % MB);
            /* newest weights: one update per backward run before it */
            assert_int_equal(f->version, (uint64_t)(g > w ? g - w : 0));
            fwd_ver[g] = f->version;
            max_inflight = f->inflight > max_inflight ? f->inflight : max_inflight;
            if (g < w)
                continue;
            const rt_pd_event *b = &j->log[at++];
            int k = g - w;
            assert_true(b->backward);
            assert_int_equal(b->step, 1 + (uint64_t)(k / MB));
            assert_int_equal(b->mb, k % MB);
            assert_int_equal(b->version, fwd_ver[k]); /* the stashed version, not the newest */
            assert_int_equal(b->inflight, w);
        }
        assert_int_equal(max_inflight, P - s);
        if (s == 0) /* step 2's first backward (of minibatch 5) ran after 5 updates on the
                     * version its forward used, 3 updates older */
            assert_int_equal(j->log[j->first_event[1] + 1].version, (uint64_t)(5 - 3));
        assert_int_equal(j->last.slots, P - s);
        assert_int_equal(j->last.max_inflight, P - s);
        assert_int_equal(j->last.weight_version_forward[0], (uint64_t)(2 * MB - w));
    }
    pd_job *first = pd_run(&rs, r, STEPS + 1, 1, false);
    loss0 = first[P - 1].last.loss;
    free(first);
    pd_job *more = pd_run(&rs, r, STEPS + 2, 60, true);
    double loss1 = more[P - 1].last.loss;
    if (!(loss1 < loss0 * 0.8))
        print_error("pipedream loss %g -> %g\n", loss0, loss1);
    assert_true(loss1 < loss0 * 0.8);
    for (int s = 0; s < P; s++)
        rt_runner_destroy(&r[s]);
    free(jobs);
    free(more);
    /* synchronous schedules report no versions */
    const run_spec sync = {GPT_JSON, "1f1b", 2, 4, 2, 1, "adamw", "local", NULL, NULL, NULL, 0};
    size_t n = 0;
    rt_report rep[2];
    float *p = train_pipeline(&sync, &n, rep);
    assert_null(rep[0].weight_version_forward);
    assert_null(rep[0].events);
    free(p);
}

/* The pipeline does not drain between steps: every step leaves p-s-1 minibatches in flight on
 * stage s, the next step's backwards on stage 0 begin with the previous step's last minibatches,
 * and only the first step has a warm-up. */
static void test_pipedream_no_drain(void **state)
{
    (void)state;
    enum { P = 3, MB = 4 };
    const run_spec rs = {MLP_JSON, "pipedream", P, 8, MB, 0, "sgd", "local", NULL, NULL, NULL, 0};
    rt_runner *r[P] = {0};
    pipeline_open(&rs, r);
    pd_job *jobs = pd_run(&rs, r, 5, 3, true);
    for (int s = 0; s < P; s++) {
        const pd_job *j = &jobs[s];
        int w = P - s - 1;
        for (int c = 0; c < 3; c++)
            assert_int_equal(j->inflight_end[c], w);
        assert_int_equal(j->inflight_end[3], 0);
        /* step 6's first forward comes before step 5's last backwards */
        const rt_pd_event *e = &j->log[j->first_event[1]];
        assert_false(e->backward);
        assert_int_equal(e->step, 6);
        assert_int_equal(e->mb, 0);
        for (int k = 0; k < w; k++) {
            const rt_pd_event *b = &j->log[j->first_event[1] + 1 + 2 * k];
            assert_true(b->backward);
            assert_int_equal(b->step, 5);
            assert_int_equal(b->mb, MB - w + k);
        }
        /* the flush ran exactly the w backwards left of the last step */
        assert_int_equal(j->n_log - j->first_event[3], w);
    }
    pd_job *later = pd_run(&rs, r, 8, 1, false); /* a new fill, from any step */
    for (int s = 0; s < P; s++)
        assert_int_equal(later[s].log[0].step, 8);
    free(later);
    later = pd_run(&rs, r, 9, 2, true);
    free(later);
    for (int s = 0; s < P; s++)
        rt_runner_destroy(&r[s]);
    free(jobs);
}

/* The measured timeline (rt_runner_timeline): per iteration, every stage records each action of
 * its list once (its micro-batches' forwards and backwards, the sends and receives its place
 * has, one optimizer step), one after another on its clock; pipedream records its stream the
 * same way, the flush's backwards under the last step's number. */
static int count_kind(const rt_tl_event *ev, size_t n, uint64_t it, int kind)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += ev[i].iteration == it && ev[i].kind == kind;
    return c;
}

static void check_timeline(rt_runner *r, int s, int P, int iterations, uint64_t first, int mb,
                           bool flushed)
{
    rt_tl_event *ev = NULL;
    size_t n = 0;
    rt_tl_snapshot_info info;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_timeline_snapshot(rt_runner_timeline(r), 0, 0, &ev, &n, &info, &err),
                     SC_OK);
    assert_int_equal(info.iterations, iterations);
    assert_int_equal(info.dropped, 0);
    int f = 0, b = 0, o = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(ev[i].end_ns >= ev[i].start_ns);
        if (i > 0) /* one action at a time */
            assert_true(ev[i].start_ns >= ev[i - 1].end_ns);
        assert_true(ev[i].iteration >= first && ev[i].iteration < first + (uint64_t)iterations);
    }
    for (int k = 0; k < iterations; k++) {
        uint64_t it = first + (uint64_t)k;
        int fk = count_kind(ev, n, it, RT_TL_FORWARD), bk = count_kind(ev, n, it, RT_TL_BACKWARD);
        f += fk;
        b += bk;
        o += count_kind(ev, n, it, RT_TL_OPTIMIZER);
        if (!flushed) { /* a synchronous iteration is whole */
            assert_int_equal(fk, mb);
            assert_int_equal(bk, mb);
            assert_int_equal(count_kind(ev, n, it, RT_TL_OPTIMIZER), 1);
        }
        assert_int_equal(count_kind(ev, n, it, RT_TL_SEND_ACTIVATION), s < P - 1 ? fk : 0);
        assert_int_equal(count_kind(ev, n, it, RT_TL_RECV_ACTIVATION), s > 0 ? fk : 0);
        assert_int_equal(count_kind(ev, n, it, RT_TL_SEND_GRADIENT), s > 0 ? bk : 0);
        assert_int_equal(count_kind(ev, n, it, RT_TL_RECV_GRADIENT), s < P - 1 ? bk : 0);
        assert_int_equal(count_kind(ev, n, it, RT_TL_ALLREDUCE), 0);
    }
    assert_int_equal(f, iterations * mb);
    assert_int_equal(b, iterations * mb);
    /* pipedream without copies steps after every backward */
    assert_int_equal(o, flushed ? b : iterations);
    free(ev);
}

static void test_timeline_records(void **state)
{
    (void)state;
    enum { P = 3, MB = 4 };
    const run_spec rs = {MLP_JSON, "1f1b", P, 8, MB, 0, "sgd", "local", NULL, NULL, NULL, 0};
    rt_runner *r[P] = {0};
    pipeline_open(&rs, r);
    pipeline_run(&rs, r, 1, 3, NULL);
    for (int s = 0; s < P; s++) {
        check_timeline(r[s], s, P, 3, 1, MB, false);
        rt_runner_destroy(&r[s]);
    }
    const run_spec pd = {MLP_JSON, "pipedream", P, 8, MB, 0, "sgd", "local", NULL, NULL, NULL, 0};
    pipeline_open(&pd, r);
    pd_job *jobs = pd_run(&pd, r, 1, 3, true);
    for (int s = 0; s < P; s++) {
        check_timeline(r[s], s, P, 3, 1, MB, true);
        rt_runner_destroy(&r[s]);
    }
    free(jobs);
}

/* Checkpoints at flushed points: save refused in flight, a skipped step refused (nothing run),
 * flush + save + load + continue equals the uninterrupted run bit for bit. */
static void test_pipedream_flush_checkpoint(void **state)
{
    (void)state;
    char dir[] = "/tmp/sc_test_pdckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    const run_spec rs = {GPT_JSON, "pipedream", 2, 4, 2, 0, "adamw", "local", NULL, NULL, NULL, 0};
    sc_err err;
    sc_err_clear(&err);
    rt_runner *a[2] = {0};
    pipeline_open(&rs, a);
    free(pd_run(&rs, a, 1, 2, false));
    assert_int_equal(rt_runner_save(a[0], dir, 2, &err), SC_ERR_PRECONDITION);
    assert_non_null(strstr(err.msg, "rt_runner_flush"));
    sc_err_clear(&err);
    rt_report rep;
    assert_int_equal(rt_runner_step(a[0], 7, &rep, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "next step 3"));
    pd_job *f = pd_run(&rs, a, 3, 0, true); /* flush only */
    assert_int_equal(f[0].n_log, 1);
    assert_true(f[0].log[0].backward);
    assert_int_equal(f[0].log[0].step, 2);
    free(f);
    for (int s = 0; s < 2; s++)
        assert_int_equal(rt_runner_save(a[s], dir, 2, &err), SC_OK);
    free(pd_run(&rs, a, 3, 2, true));
    size_t n1 = 0, n2 = 0;
    float *p1 = pipeline_params(&rs, a, &n1);

    rt_runner *b[2] = {0};
    pipeline_open(&rs, b);
    free(pd_run(&rs, b, 1, 1, false)); /* in flight, then dropped by the load */
    for (int s = 0; s < 2; s++)
        assert_int_equal(rt_runner_load(b[s], dir, 2, &err), SC_OK);
    free(pd_run(&rs, b, 3, 2, true));
    float *p2 = pipeline_params(&rs, b, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(p1, p2, n1 * sizeof *p1);
    for (int s = 0; s < 2; s++) {
        char path[1400];
        rt_runner_checkpoint_path(a[s], dir, 2, path, sizeof path);
        assert_int_equal(unlink(path), 0);
        rt_runner_destroy(&a[s]);
        rt_runner_destroy(&b[s]);
    }
    free(p1);
    free(p2);
    assert_int_equal(rmdir(dir), 0);
}

static void test_checkpoint_resume(void **state)
{
    (void)state;
    char dir[] = "/tmp/sc_test_ckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    const run_spec rs = {GPT_JSON, "1f1b", 2, 4, 2, 0, "adamw", "zmq", NULL, NULL, NULL, 0};
    sc_err err;
    sc_err_clear(&err);

    /* uninterrupted: steps 1..4, checkpoint after step 2 */
    rt_runner *a[2] = {0};
    pipeline_open(&rs, a);
    pipeline_run(&rs, a, 1, 2, NULL);
    for (int s = 0; s < 2; s++)
        assert_int_equal(rt_runner_save(a[s], dir, 2, &err), SC_OK);
    pipeline_run(&rs, a, 3, 2, NULL);
    size_t n1 = 0, n2 = 0;
    float *p1 = pipeline_params(&rs, a, &n1);

    /* restarted: fresh runners load step 2 and run 3..4 */
    rt_runner *b[2] = {0};
    pipeline_open(&rs, b);
    for (int s = 0; s < 2; s++)
        assert_int_equal(rt_runner_load(b[s], dir, 2, &err), SC_OK);
    pipeline_run(&rs, b, 3, 2, NULL);
    float *p2 = pipeline_params(&rs, b, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(p1, p2, n1 * sizeof *p1); /* bit-exact, optimizer state included */

    /* missing, corrupt and mismatched checkpoints */
    assert_int_equal(rt_runner_load(b[0], dir, 99, &err), SC_ERR_NOT_FOUND);
    char path[1400];
    rt_runner_checkpoint_path(b[1], dir, 2, path, sizeof path);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 200, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 200, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
    sc_err_clear(&err);
    assert_int_equal(rt_runner_load(b[1], dir, 2, &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "checksum"));
    /* stage 0's file under stage 1's name: another block range */
    char path0[1400];
    rt_runner_checkpoint_path(b[0], dir, 2, path0, sizeof path0);
    assert_int_equal(rename(path0, path), 0);
    sc_err_clear(&err);
    assert_int_equal(rt_runner_load(b[1], dir, 2, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "blocks"));
    f = fopen(path, "wb");
    fputs("not a checkpoint at all, just some text", f);
    fclose(f);
    sc_err_clear(&err);
    assert_int_equal(rt_runner_load(b[1], dir, 2, &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "magic"));
    unlink(path);

    for (int s = 0; s < 2; s++) {
        rt_runner_destroy(&a[s]);
        rt_runner_destroy(&b[s]);
    }
    free(p1);
    free(p2);
    assert_int_equal(rmdir(dir), 0); /* no temporary files left behind */
}

static void touch(const char *dir, const char *name)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
}

static int exists(const char *dir, const char *name)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* Pruning keeps the newest `keep` checkpoints at or before the step every stage completed, and
 * every newer one: when another stage's saves failed from step 50 on, this stage's 50..60 are
 * not complete and its 45, the step a restart resumes from, must stay. */
static void test_checkpoint_prune(void **state)
{
    (void)state;
    char dir[] = "/tmp/sc_test_prune_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char name[64];
    for (int step = 5; step <= 60; step += 5) {
        snprintf(name, sizeof name, "stage0-step%d.ckpt", step);
        touch(dir, name);
        snprintf(name, sizeof name, "stage1-step%d.ckpt", step);
        touch(dir, name);
    }
    /* not checkpoints of stage 0: left alone */
    touch(dir, "stage0-step3.ckpt.tmp.77");
    touch(dir, "stage00-step4.ckpt");
    touch(dir, "notes.txt");
    uint64_t *steps;
    size_t n, deleted;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_checkpoint_list(dir, 0, &steps, &n, &err), SC_OK);
    assert_int_equal(n, 12);
    assert_int_equal(steps[0], 60); /* newest first */
    assert_int_equal(steps[11], 5);
    free(steps);

    assert_int_equal(rt_checkpoint_prune(dir, 0, 45, 2, &deleted, &err), SC_OK);
    assert_int_equal(deleted, 7); /* 5..35 */
    for (int step = 5; step <= 60; step += 5) {
        snprintf(name, sizeof name, "stage0-step%d.ckpt", step);
        assert_int_equal(exists(dir, name), step >= 40);
        snprintf(name, sizeof name, "stage1-step%d.ckpt", step);
        assert_true(exists(dir, name)); /* another stage's files */
    }
    assert_true(exists(dir, "stage0-step3.ckpt.tmp.77"));
    assert_true(exists(dir, "stage00-step4.ckpt"));
    /* the same step again, or keep 0: nothing more goes */
    assert_int_equal(rt_checkpoint_prune(dir, 0, 45, 2, &deleted, &err), SC_OK);
    assert_int_equal(deleted, 0);
    assert_int_equal(rt_checkpoint_prune(dir, 0, 60, 0, &deleted, &err), SC_OK);
    assert_int_equal(deleted, 0);
    /* keep 1 once 60 is complete: only 60 */
    assert_int_equal(rt_checkpoint_prune(dir, 0, 60, 1, &deleted, &err), SC_OK);
    assert_int_equal(deleted, 4);
    assert_int_equal(rt_checkpoint_list(dir, 0, &steps, &n, &err), SC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 60);
    free(steps);

    /* a folder not made yet holds no checkpoints */
    char missing[64];
    snprintf(missing, sizeof missing, "%s/none", dir);
    assert_int_equal(rt_checkpoint_list(missing, 0, &steps, &n, &err), SC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rt_checkpoint_prune(missing, 0, 60, 2, &deleted, &err), SC_OK);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -r %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_peer_gone(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "gpipe", 2, 4, 2, 1, "adamw", "zmq", NULL, NULL, NULL, 0};
    int nb = model_blocks(rs.model);
    rt_runner *r[2] = {0};
    sc_err err;
    sc_err_clear(&err);
    for (int s = 0; s < 2; s++) {
        rt_runner_cfg c = spec_cfg(&rs, s, nb);
        c.timeout_ms = 300;
        assert_int_equal(rt_runner_new(&r[s], &c, &err), SC_OK);
    }
    assert_int_equal(rt_runner_connect(r[0], NULL, rt_runner_endpoint(r[1]), &err), SC_OK);
    rt_runner_destroy(&r[1]); /* the last stage's worker dies */
    rt_report rep;
    assert_int_equal(rt_runner_step(r[0], 1, &rep, &err), SC_ERR_TIMEOUT);
    assert_non_null(strstr(err.msg, "gradient"));
    sc_err_clear(&err);
    assert_int_equal(rt_runner_step(r[0], 2, &rep, &err), SC_ERR_PRECONDITION);
    rt_runner_destroy(&r[0]);
}

/* A zmq stage's inbox takes no message larger than any its peers can legitimately send (a whole
 * batch of its widest boundary): a larger one, from whoever reaches the port, is refused by zmq
 * before it is allocated, and the receive waiting for it times out as for a lost peer. Stage 1
 * of an MLP [12, 10, 8, 6, 4] in two stages, batch 8, expects 4 x 8 floats per micro-batch; a
 * "stage 0" sends 64 KiB, far above 8 samples of any of its boundaries. */
static void test_oversized_message_refused(void **state)
{
    (void)state;
    const run_spec rs = {MLP_JSON, "gpipe", 2, 8, 2, 1, "sgd", "zmq", NULL, NULL, NULL, 0};
    rt_runner_cfg c = spec_cfg(&rs, 1, model_blocks(rs.model));
    c.timeout_ms = 500;
    rt_runner *r = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_runner_new(&r, &c, &err), SC_OK);
    rt_transport_cfg tc = rt_transport_cfg_default();
    tc.tag = c.tag;
    tc.timeout_ms = 500;
    rt_transport *fake = NULL;
    assert_int_equal(rt_transport_new(&fake, &tc, &err), SC_OK);
    assert_int_equal(rt_transport_connect(fake, NULL, rt_runner_endpoint(r), &err), SC_OK);
    assert_int_equal(rt_runner_connect(r, rt_transport_endpoint(fake), NULL, &err), SC_OK);
    size_t big = 64 * 1024;
    void *junk = calloc(1, big);
    assert_non_null(junk);
    assert_int_equal(rt_transport_send(fake, RT_MSG_ACTIVATION, 1, 0, junk, big, &err), SC_OK);
    rt_report rep;
    sc_status rc = rt_runner_step(r, 1, &rep, &err);
    if (rc != SC_ERR_TIMEOUT)
        fail_msg("step: %s: %s (want a timeout: the message should never arrive)",
                 sc_status_name(rc), err.msg);
    free(junk);
    rt_transport_destroy(&fake);
    rt_runner_destroy(&r);
}

static void test_loss_decreases(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "1f1b", 2, 8, 2, 0, "adamw", "local", NULL, NULL, NULL, 0};
    rt_runner *r[2] = {0};
    pipeline_open(&rs, r);
    rt_report first[2], last[2];
    pipeline_run(&rs, r, 1, 1, first);
    pipeline_run(&rs, r, 2, 40, last);
    assert_true(last[1].loss < first[1].loss * 0.8);
    assert_false(first[0].has_loss);
    for (int s = 0; s < 2; s++)
        rt_runner_destroy(&r[s]);
}

static void expect_bad(rt_runner_cfg c, sc_status want, const char *says)
{
    rt_runner *r = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_runner_new(&r, &c, &err), want);
    assert_null(r);
    if (strstr(err.msg, says) == NULL)
        print_error("message \"%s\" lacks \"%s\"\n", err.msg, says);
    assert_non_null(strstr(err.msg, says));
}

static void test_bad_config(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "gpipe", 2, 8, 4, 1, "adamw", "zmq", NULL, NULL, NULL, 0};
    rt_runner_cfg c = spec_cfg(&rs, 0, 4);
    c.batch_size = 7;
    expect_bad(c, SC_ERR_INVALID, "multiple of microbatches");
    c = spec_cfg(&rs, 1, 4);
    c.first_block = 0;
    c.last_block = 2;
    expect_bad(c, SC_ERR_INVALID, "last block 3");
    c = spec_cfg(&rs, 0, 4);
    c.first_block = 1;
    expect_bad(c, SC_ERR_INVALID, "stage 0 must start at block 0");
    c = spec_cfg(&rs, 0, 4);
    c.optimizer = "lion";
    expect_bad(c, SC_ERR_INVALID, "\"adamw\", \"sgd\"");
    c = spec_cfg(&rs, 0, 4);
    c.frozen_blocks = 4;
    expect_bad(c, SC_ERR_INVALID, "4 frozen blocks of a 4-block model; valid: 0 to 3");
    c.frozen_blocks = 1;
    c.schedule = "pipedream";
    expect_bad(c, SC_ERR_UNSUPPORTED, "frozen blocks need a schedule that flushes every step");
    c = spec_cfg(&rs, 0, 4);
    c.transport = "carrier-pigeon";
    expect_bad(c, SC_ERR_INVALID, "\"zmq\", \"local\"");
    c = spec_cfg(&rs, 0, 4);
    c.model_json = "{\"kind\": \"gpt\", \"vocab\": 256}";
    expect_bad(c, SC_ERR_INVALID, "seq_len");
    static const int bad_sum[] = {4, 3}, ones[] = {1, 7};
    c = spec_cfg(&rs, 0, 4);
    c.microbatches = 2;
    c.microbatch_sizes = bad_sum;
    expect_bad(c, SC_ERR_INVALID, "sum to 7, batch_size is 8");
    c.microbatch_sizes = ones;
    c.schedule = "sliced";
    c.sliced_warmup = 1;
    expect_bad(c, SC_ERR_INVALID, "cannot halve");
    run_spec vr = {VGG_JSON, "gpipe", 1, 4, 1, 1, "sgd", "zmq", "text", "/dev/null", NULL, 0};
    c = spec_cfg(&vr, 0, model_blocks(VGG_JSON));
    expect_bad(c, SC_ERR_INVALID, "token models");
}

typedef struct {
    rt_runner *r;
    sc_status rc;
    sc_err err;
} step_job;

static void *step_thread(void *arg)
{
    step_job *j = arg;
    sc_err_clear(&j->err);
    j->rc = rt_runner_step(j->r, 1, NULL, &j->err);
    return NULL;
}

/* Runs step 1 on a 2-stage pipeline, stage `here` (0 or 1) in this thread and the other in a
 * thread, and returns stage `here`'s result (its error in *err); the other stage's result is
 * *rc_other. The other stage is aborted once stage `here` returns, in case it still waits. */
static sc_status two_stage_step(rt_runner_cfg c0, rt_runner_cfg c1, int here, sc_status *rc_other,
                                sc_err *err)
{
    rt_runner *rn[2] = {0};
    sc_err_clear(err);
    assert_int_equal(rt_runner_new(&rn[0], &c0, err), SC_OK);
    assert_int_equal(rt_runner_new(&rn[1], &c1, err), SC_OK);
    assert_int_equal(rt_runner_connect(rn[0], NULL, rt_runner_endpoint(rn[1]), err), SC_OK);
    assert_int_equal(rt_runner_connect(rn[1], rt_runner_endpoint(rn[0]), NULL, err), SC_OK);
    step_job other = {.r = rn[!here]};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, step_thread, &other), 0);
    sc_status rc = rt_runner_step(rn[here], 1, NULL, err);
    rt_runner_abort(rn[!here]);
    pthread_join(th, NULL);
    *rc_other = other.rc;
    for (int s = 0; s < 2; s++)
        rt_runner_destroy(&rn[s]);
    return rc;
}

static void test_per_stage_bad_config(void **state)
{
    (void)state;
    static const int a[] = {3, 5}, b[] = {2, 2, 4}, zero[] = {0, 8}, short_sum[] = {2, 2, 3};
    const run_spec rs = {GPT_JSON, "unequal", 2, 8, 2, 1, "adamw", "local", NULL, NULL, a, 0};
    rt_runner_cfg c = spec_cfg(&rs, 0, 4);
    c.next_sizes = short_sum;
    c.n_next_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "next_sizes sum to 7, batch_size is 8");
    c.next_sizes = zero;
    c.n_next_sizes = 2;
    expect_bad(c, SC_ERR_INVALID, "next_sizes[0] = 0");
    c.next_sizes = b;
    c.n_next_sizes = 0;
    expect_bad(c, SC_ERR_INVALID, "n_next_sizes 0");
    c.n_next_sizes = 3;
    c.prev_sizes = b;
    c.n_prev_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "prev_sizes must be NULL");
    c = spec_cfg(&rs, 1, 4);
    c.prev_sizes = a;
    c.n_prev_sizes = 2;
    c.next_sizes = b;
    c.n_next_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "next_sizes must be NULL");
    c.next_sizes = NULL;
    c.prev_sizes = short_sum;
    c.n_prev_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "prev_sizes sum to 7");
    c.prev_sizes = a;
    c.n_prev_sizes = 2;
    c.schedule = "1f1b";
    expect_bad(c, SC_ERR_UNSUPPORTED, "valid: \"gpipe\", \"unequal\"");
    c.schedule = "gpipe";
    c.replicas = 2;
    expect_bad(c, SC_ERR_UNSUPPORTED, "replicated");
    c.replicas = 1;
    c.microbatch_sizes = short_sum;
    c.microbatches = 3;
    expect_bad(c, SC_ERR_INVALID, "sum to 7, batch_size is 8");

    /* Lists that dispute the neighbour's real cut are found in the first step: stage 1 is told
     * stage 0 cuts [5, 3], but it cuts [3, 5]. Stage 1 runs here: stage 0 would wait for
     * gradients that never come, so it is the one aborted. */
    static const int wrong[] = {5, 3};
    rt_runner_cfg c0 = spec_cfg(&rs, 0, 4);
    c0.next_sizes = b;
    c0.n_next_sizes = 3;
    c = spec_cfg(&rs, 1, 4);
    c.microbatch_sizes = b;
    c.microbatches = 3;
    c.prev_sizes = wrong;
    c.n_prev_sizes = 2;
    sc_status rc0;
    sc_err err;
    sc_status rc = two_stage_step(c0, c, 1, &rc0, &err);
    assert_int_equal(rc, SC_ERR_INVALID);
    if (strstr(err.msg, "prev_sizes must equal stage 0's microbatch_sizes") == NULL)
        print_error("message \"%s\"\n", err.msg);
    assert_non_null(strstr(err.msg, "prev_sizes must equal stage 0's microbatch_sizes"));
    assert_int_not_equal(rc0, SC_OK);
}

static void test_backward_sizes_bad_config(void **state)
{
    (void)state;
    static const int a[] = {3, 5}, b[] = {2, 2, 4}, zero[] = {0, 8}, short_sum[] = {2, 2, 3};
    const run_spec rs = {GPT_JSON, "unequal", 2, 8, 2, 1, "adamw", "local", NULL, NULL, a, 0};
    rt_runner_cfg c = spec_cfg(&rs, 0, 4);
    c.backward_sizes = short_sum;
    c.n_backward_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "backward_sizes sum to 7, batch_size is 8");
    c.backward_sizes = zero;
    c.n_backward_sizes = 2;
    expect_bad(c, SC_ERR_INVALID, "backward_sizes[0] = 0");
    c.backward_sizes = b;
    c.n_backward_sizes = 0;
    expect_bad(c, SC_ERR_INVALID, "n_backward_sizes 0");
    c.n_backward_sizes = 3;
    c.next_backward_sizes = short_sum;
    c.n_next_backward_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "next_backward_sizes sum to 7");
    c = spec_cfg(&rs, 1, 4);
    c.next_backward_sizes = b;
    c.n_next_backward_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "next_backward_sizes must be NULL");
    /* only the fill-drain path with per-stage sizes runs a backward cut */
    const char *other[] = {"1f1b", "sliced", "pipedream"};
    for (int i = 0; i < 3; i++) {
        c = spec_cfg(&rs, 1, 4);
        c.schedule = other[i];
        c.backward_sizes = b;
        c.n_backward_sizes = 3;
        expect_bad(c, SC_ERR_UNSUPPORTED, "valid: \"gpipe\", \"unequal\"");
        c = spec_cfg(&rs, 0, 4);
        c.schedule = other[i];
        c.next_backward_sizes = b;
        c.n_next_backward_sizes = 3;
        expect_bad(c, SC_ERR_UNSUPPORTED, "next_backward_sizes) with schedule");
    }
    c = spec_cfg(&rs, 1, 4);
    c.backward_sizes = b;
    c.n_backward_sizes = 3;
    c.replicas = 2;
    expect_bad(c, SC_ERR_UNSUPPORTED, "with replicated stages");
    c.replicas = 1;
    c.prev_replicas = 2;
    expect_bad(c, SC_ERR_UNSUPPORTED, "with replicated stages");

    /* Lists that dispute the next stage's real backward cut are found at the first gradient
     * whose size differs: stage 1 runs its backward as [8] while stage 0 is told [4, 4]... */
    static const int eight[] = {8}, fours[] = {4, 4}, two_six[] = {2, 6};
    sc_err err;
    sc_status rc1;
    rt_runner_cfg c0 = spec_cfg(&rs, 0, 4), c1 = spec_cfg(&rs, 1, 4);
    c0.next_backward_sizes = fours;
    c0.n_next_backward_sizes = 2;
    c1.backward_sizes = eight;
    c1.n_backward_sizes = 1;
    sc_status rc = two_stage_step(c0, c1, 0, &rc1, &err);
    assert_int_equal(rc, SC_ERR_INVALID);
    if (strstr(err.msg, "next_backward_sizes must equal stage 1's backward_sizes") == NULL)
        print_error("message \"%s\"\n", err.msg);
    assert_non_null(strstr(err.msg, "next_backward_sizes must equal stage 1's backward_sizes"));
    assert_non_null(strstr(err.msg, "backward entry 0 of stage 1 is not the 4 samples"));
    assert_int_equal(rc1, SC_OK); /* stage 1 sent its gradient and finished */
    /* ... and when stage 0 is not told, its next_sizes (stage 1's forward cut) stand for it */
    c0.next_backward_sizes = NULL;
    c0.n_next_backward_sizes = 0;
    c0.next_sizes = a;
    c0.n_next_sizes = 2;
    c1.backward_sizes = two_six;
    c1.n_backward_sizes = 2;
    rc = two_stage_step(c0, c1, 0, &rc1, &err);
    assert_int_equal(rc, SC_ERR_INVALID);
    if (strstr(err.msg, "next_sizes must equal stage 1's microbatch_sizes; when that stage has "
                        "backward_sizes of its own, give them as next_backward_sizes") == NULL)
        print_error("message \"%s\"\n", err.msg);
    assert_non_null(strstr(err.msg, "give them as next_backward_sizes"));
    assert_int_equal(rc1, SC_OK);
    /* the same lists, told correctly, run */
    c0.next_backward_sizes = two_six;
    c0.n_next_backward_sizes = 2;
    rc = two_stage_step(c0, c1, 0, &rc1, &err);
    assert_int_equal(rc, SC_OK);
    assert_int_equal(rc1, SC_OK);
}

/* ---- replicated stages ---- */

#define MAX_AGENTS 8

/* A pipeline whose stage s runs as reps[s] replicas: runners in stage-major order. */
typedef struct {
    const run_spec *rs;
    const int *reps;
    int n; /* runners */
    int stage_of[MAX_AGENTS], replica_of[MAX_AGENTS], base[8];
    rt_runner *r[MAX_AGENTS];
} repl_pipe;

/* When set, repl_open hands out every copy 0's endpoint joined to this one, as a copy 0 with a
 * device all-reduce publishes it ("DATA|nccl-reduce://..."): the readers must take their part. */
static const char *g_joined_to_copy0;

static const char *repl_endpoint(const repl_pipe *rp, int i, char *buf, size_t size)
{
    const char *ep = rt_runner_endpoint(rp->r[i]);
    if (g_joined_to_copy0 == NULL || rp->replica_of[i] != 0)
        return ep;
    size_t n = strlen(ep), m = strlen(g_joined_to_copy0);
    assert_true(n + 1 + m < size);
    memcpy(buf, ep, n);
    buf[n] = RT_ENDPOINT_SEP;
    memcpy(buf + n + 1, g_joined_to_copy0, m + 1);
    return buf;
}

static void repl_open(repl_pipe *rp, const run_spec *rs, const int *reps)
{
    memset(rp, 0, sizeof *rp);
    rp->rs = rs;
    rp->reps = reps;
    int nb = model_blocks(rs->model);
    sc_err err;
    sc_err_clear(&err);
    for (int s = 0; s < rs->stages; s++) {
        rp->base[s] = rp->n;
        for (int k = 0; k < reps[s]; k++) {
            rt_runner_cfg c = spec_cfg(rs, s, nb);
            c.replicas = reps[s];
            c.replica = k;
            c.prev_replicas = s > 0 ? reps[s - 1] : 1;
            c.next_replicas = s < rs->stages - 1 ? reps[s + 1] : 1;
            c.stage_replicas = reps;
            assert_true(rp->n < MAX_AGENTS);
            sc_status rc = rt_runner_new(&rp->r[rp->n], &c, &err);
            if (rc != SC_OK)
                print_error("stage %d replica %d: %s\n", s, k, err.msg);
            assert_int_equal(rc, SC_OK);
            rp->stage_of[rp->n] = s;
            rp->replica_of[rp->n] = k;
            rp->n++;
        }
    }
    for (int i = 0; i < rp->n; i++) {
        int s = rp->stage_of[i];
        const char *prev[MAX_AGENTS], *next[MAX_AGENTS], *peers[MAX_AGENTS];
        static char buf[3][MAX_AGENTS][2 * RT_ENDPOINT_MAX];
        int np = s > 0 ? reps[s - 1] : 0, nn = s < rs->stages - 1 ? reps[s + 1] : 0;
        for (int k = 0; k < np; k++)
            prev[k] = repl_endpoint(rp, rp->base[s - 1] + k, buf[0][k], sizeof buf[0][k]);
        for (int k = 0; k < nn; k++)
            next[k] = repl_endpoint(rp, rp->base[s + 1] + k, buf[1][k], sizeof buf[1][k]);
        for (int k = 0; k < reps[s]; k++)
            peers[k] = k == rp->replica_of[i]
                           ? NULL
                           : repl_endpoint(rp, rp->base[s] + k, buf[2][k], sizeof buf[2][k]);
        sc_status rc = rt_runner_connect_group(rp->r[i], prev, np, next, nn, peers, reps[s], &err);
        if (rc != SC_OK)
            print_error("connect %d: %s\n", i, err.msg);
        assert_int_equal(rc, SC_OK);
    }
}

static void repl_run(repl_pipe *rp, uint64_t first_step, int steps, rt_report *reports)
{
    pthread_t th[MAX_AGENTS];
    stage_job jobs[MAX_AGENTS];
    for (int i = 0; i < rp->n; i++) {
        jobs[i] = (stage_job){.r = rp->r[i], .first_step = first_step, .steps = steps};
        assert_int_equal(pthread_create(&th[i], NULL, stage_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < rp->n; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < rp->n; i++) {
        if (jobs[i].rc != SC_OK)
            print_error("runner %d: %s\n", i, jobs[i].err.msg);
        assert_int_equal(jobs[i].rc, SC_OK);
        if (reports != NULL)
            reports[i] = jobs[i].last;
    }
}

/* Every replica of a stage holds bit-identical parameters; returns replica 0's of every stage,
 * concatenated. */
static float *repl_params(repl_pipe *rp, size_t *count)
{
    size_t total = 0;
    for (int s = 0; s < rp->rs->stages; s++)
        total += rt_runner_param_count(rp->r[rp->base[s]]);
    float *all = malloc(total * sizeof *all);
    assert_non_null(all);
    sc_err err;
    size_t off = 0;
    for (int s = 0; s < rp->rs->stages; s++) {
        rt_runner *r0 = rp->r[rp->base[s]];
        size_t n = rt_runner_param_count(r0);
        assert_int_equal(rt_runner_params_to_host(r0, all + off, &err), SC_OK);
        float *other = malloc(n * sizeof *other + 1);
        for (int k = 1; k < rp->reps[s]; k++) {
            rt_runner *rk = rp->r[rp->base[s] + k];
            assert_int_equal(rt_runner_param_count(rk), n);
            assert_int_equal(rt_runner_params_to_host(rk, other, &err), SC_OK);
            assert_memory_equal(other, all + off, n * sizeof *other);
        }
        free(other);
        off += n;
    }
    *count = total;
    return all;
}

static void repl_close(repl_pipe *rp)
{
    for (int i = 0; i < rp->n; i++)
        rt_runner_destroy(&rp->r[i]);
}

static void check_replicated(const run_spec *rs, const int *reps)
{
    size_t n_ref = 0, n_pipe = 0;
    float *init = NULL;
    float *ref = train_reference(rs, &n_ref, &init);
    repl_pipe rp;
    repl_open(&rp, rs, reps);
    rt_report rep[MAX_AGENTS];
    repl_run(&rp, 1, rs->steps, rep);
    float *got = repl_params(&rp, &n_pipe);
    assert_int_equal(n_pipe, n_ref);
    assert_params_close(got, ref, init, n_ref);
    int last = rs->stages - 1;
    for (int i = 0; i < rp.n; i++) {
        int s = rp.stage_of[i], k = rp.replica_of[i];
        /* round-robin: replica k runs micro-batches k, k + r, ... (sliced: halves count) */
        int m = effective_microbatches(rs);
        assert_int_equal(rep[i].microbatches, (m - k + reps[s] - 1) / reps[s]);
        assert_int_equal(rep[i].has_loss, s == last);
        assert_true(rep[i].max_inflight <= rep[i].slots);
        /* the loss is the whole batch's, the same on every replica of the last stage */
        if (s == last)
            assert_true(rep[i].loss == rep[rp.base[last]].loss && rep[i].loss > 0.0);
        /* the timeline: each iteration, this copy's forwards, then the copies' all-reduce
         * (replicated stages only) and the optimizer step, at the end */
        if (strcmp(rs->schedule, "pipedream") != 0) {
            rt_tl_event *ev = NULL;
            size_t n = 0;
            sc_err err;
            sc_err_clear(&err);
            assert_int_equal(
                rt_timeline_snapshot(rt_runner_timeline(rp.r[i]), 1, 0, &ev, &n, NULL, &err),
                SC_OK);
            assert_true(n >= 2);
            assert_int_equal(count_kind(ev, n, (uint64_t)rs->steps, RT_TL_FORWARD),
                             rep[i].microbatches);
            assert_int_equal(count_kind(ev, n, (uint64_t)rs->steps, RT_TL_ALLREDUCE),
                             reps[s] > 1 ? 1 : 0);
            assert_int_equal(ev[n - 1].kind, RT_TL_OPTIMIZER);
            if (reps[s] > 1)
                assert_int_equal(ev[n - 2].kind, RT_TL_ALLREDUCE);
            free(ev);
        }
        /* the all-reduce's figures for the coordinator: one per synchronous step (pipedream:
         * one per round of copies), of the stage's gradients, with every other copy's delay
         * from its send (one clock here: positive) */
        const rt_reduce_sample *x = &rep[i].reduce;
        if (reps[s] == 1) {
            assert_int_equal(x->count, 0);
            continue;
        }
        if (strcmp(rs->schedule, "pipedream") != 0)
            assert_int_equal(x->count, 1);
        assert_true(x->count >= 1);
        assert_int_equal(x->bytes, rt_runner_param_count(rp.r[i]) * sizeof(float));
        assert_true(x->own_s > 0);
        assert_int_equal(x->n_peers, reps[s] - 1);
        for (int j = 0; j < x->n_peers; j++) {
            assert_true(x->peer_copy[j] != k && x->peer_copy[j] >= 0 && x->peer_copy[j] < reps[s]);
            assert_true(x->peer_delay_s[j] > 0);
        }
    }
    free(got);
    free(ref);
    free(init);
    repl_close(&rp);
}

static void test_replicated_equivalence(void **state)
{
    (void)state;
    static const int first2[] = {2, 1}, middle2[] = {1, 2, 1}, last2[] = {1, 2}, end2[] = {1, 1, 2},
                     four1[] = {4, 1};
    static const struct {
        run_spec rs;
        const int *reps;
    } cases[] = {
        {{GPT_JSON, "gpipe", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0}, first2},
        {{GPT_JSON, "1f1b", 2, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0}, first2},
        {{MLP_JSON, "gpipe", 2, 8, 4, 3, "sgd", "local", NULL, NULL, NULL, 0}, first2},
        {{MLP_JSON, "1f1b", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0}, first2},
        {{GPT_JSON, "gpipe", 3, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0}, middle2},
        {{GPT_JSON, "1f1b", 3, 8, 4, 3, "sgd", "zmq", NULL, NULL, NULL, 0}, middle2},
        {{MLP_JSON, "gpipe", 3, 8, 4, 3, "sgd", "zmq", NULL, NULL, NULL, 0}, middle2},
        {{MLP_JSON, "1f1b", 3, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0}, middle2},
        /* the last stage replicated (below: a lone stage as 3 replicas, m = 4, unequal sizes) */
        {{GPT_JSON, "1f1b", 2, 8, 4, 2, "adamw", "local", NULL, NULL, NULL, 0}, last2},
        /* a copy two stages on: stage 0's warm-up counts it (W_0 = 3, not 2) */
        {{MLP_JSON, "1f1b", 3, 8, 4, 2, "sgd", "zmq", NULL, NULL, NULL, 0}, end2},
        /* four copies before one, eight micro-batches (W_0 = 4: each copy holds two) */
        {{GPT_JSON, "1f1b", 2, 8, 8, 2, "adamw", "local", NULL, NULL, NULL, 0}, four1},
        /* sliced: the halves of the warm-up micro-batches are routed like micro-batches */
        {{GPT_JSON, "sliced", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 1}, first2},
        {{MLP_JSON, "sliced", 3, 8, 4, 3, "sgd", "local", NULL, NULL, NULL, 2}, middle2},
        {{GPT_JSON, "sliced", 2, 8, 2, 2, "adamw", "local", NULL, NULL, NULL, 1}, last2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_replicated(&cases[i].rs, cases[i].reps);
    /* zb1: 1f1b-RR's lists with the W deferred */
    static const struct {
        run_spec rs;
        const int *reps;
    } zb[] = {
        {{GPT_JSON, "zb1", 2, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0}, first2},
        {{MLP_JSON, "zb1", 3, 8, 4, 3, "sgd", "zmq", NULL, NULL, NULL, 0}, middle2},
        {{MLP_JSON, "zb1", 3, 8, 4, 2, "adamw", "local", NULL, NULL, NULL, 0}, end2},
        {{GPT_JSON, "zb1", 2, 8, 8, 2, "adamw", "local", NULL, NULL, NULL, 0}, four1},
    };
    for (size_t i = 0; i < sizeof zb / sizeof zb[0]; i++)
        check_replicated(&zb[i].rs, zb[i].reps);
    static const int three[] = {3};
    static const int sizes[] = {1, 2, 3, 2};
    const run_spec lone = {MLP_JSON, "gpipe", 1, 8, 4, 3, "adamw", "local", NULL, NULL, sizes, 0};
    check_replicated(&lone, three);
}

/* Copies whose copy 0 publishes a device all-reduce's id beside its data endpoint (as a GPU
 * stage with replica_reduce "nccl" does): the neighbours and the other copies connect to the
 * data part, and training is unchanged. */
static void test_replicated_joined_endpoints(void **state)
{
    (void)state;
    static const int middle2[] = {1, 2, 1};
    static const run_spec cases[] = {
        {GPT_JSON, "1f1b", 3, 8, 4, 2, "adamw", "zmq", NULL, NULL, NULL, 0},
        {MLP_JSON, "gpipe", 3, 8, 4, 2, "sgd", "local", NULL, NULL, NULL, 0},
    };
    g_joined_to_copy0 = "nccl-reduce://v1/00";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_replicated(&cases[i], middle2);
}

/* Also after a failure, so that the tests after it are not affected. */
static int unjoin(void **state)
{
    (void)state;
    g_joined_to_copy0 = NULL;
    return 0;
}

/* Replica 0 writes the stage's checkpoint, the others skip; every replica loads the same file
 * and they stay identical. */
static void test_replicated_checkpoint(void **state)
{
    (void)state;
    char dir[] = "/tmp/sc_test_rckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const int reps[] = {2, 1};
    const run_spec rs = {GPT_JSON, "1f1b", 2, 8, 4, 0, "adamw", "local", NULL, NULL, NULL, 0};
    sc_err err;
    sc_err_clear(&err);
    repl_pipe a, b;
    repl_open(&a, &rs, reps);
    repl_run(&a, 1, 2, NULL);
    for (int i = 0; i < a.n; i++)
        assert_int_equal(rt_runner_save(a.r[i], dir, 2, &err), SC_OK);
    repl_run(&a, 3, 2, NULL);
    size_t n1 = 0, n2 = 0;
    float *p1 = repl_params(&a, &n1);
    repl_open(&b, &rs, reps);
    for (int i = 0; i < b.n; i++)
        assert_int_equal(rt_runner_load(b.r[i], dir, 2, &err), SC_OK);
    repl_run(&b, 3, 2, NULL);
    float *p2 = repl_params(&b, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(p1, p2, n1 * sizeof *p1);
    for (int s = 0; s < 2; s++) {
        char path[1400];
        rt_runner_checkpoint_path(a.r[a.base[s]], dir, 2, path, sizeof path);
        assert_int_equal(unlink(path), 0);
    }
    assert_int_equal(rmdir(dir), 0); /* two files only: replica 1 wrote none */
    free(p1);
    free(p2);
    repl_close(&a);
    repl_close(&b);
}

static void test_replicated_bad_config(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "1f1b", 2, 8, 4, 1, "adamw", "local", NULL, NULL, NULL, 0};
    rt_runner_cfg c = spec_cfg(&rs, 0, 4);
    c.replicas = 2;
    c.replica = 2;
    expect_bad(c, SC_ERR_INVALID, "replica 2 of replicas 2");
    c.replicas = 0;
    c.replica = 0;
    expect_bad(c, SC_ERR_INVALID, "replicas >= 1");
    c = spec_cfg(&rs, 1, 4);
    c.prev_replicas = 0;
    expect_bad(c, SC_ERR_INVALID, "prev_replicas 0");
    c = spec_cfg(&rs, 0, 4);
    c.replicas = 5;
    c.replica = 4;
    expect_bad(c, SC_ERR_INVALID, "microbatches >= replicas");
    c = spec_cfg(&rs, 1, 4);
    c.prev_replicas = 8;
    expect_bad(c, SC_ERR_INVALID, "microbatches >= replicas");
    static const int next_cut[] = {4, 4};
    c = spec_cfg(&rs, 0, 4);
    c.replicas = 2;
    c.schedule = "gpipe";
    c.next_sizes = next_cut;
    c.n_next_sizes = 2;
    expect_bad(c, SC_ERR_UNSUPPORTED, "with replicated stages (replicas 2");
    /* 1f1b's warm-up counts the copies of every later stage: beyond the next one it needs the
     * plan's vector */
    const run_spec rs3 = {GPT_JSON, "1f1b", 3, 8, 4, 1, "adamw", "local", NULL, NULL, NULL, 0};
    static const int r211[] = {2, 1, 1};
    c = spec_cfg(&rs3, 0, 4);
    c.replicas = 2;
    expect_bad(c, SC_ERR_INVALID, "needs stage_replicas, the copies of every stage");
    c.stage_replicas = r211;
    rt_runner *ok = NULL;
    sc_err e3;
    sc_err_clear(&e3);
    assert_int_equal(rt_runner_new(&ok, &c, &e3), SC_OK);
    rt_runner_destroy(&ok);

    /* connecting: the plain call is refused, and so are wrong endpoint counts */
    sc_err err;
    sc_err_clear(&err);
    rt_runner *r = NULL;
    c = spec_cfg(&rs, 1, 4);
    c.prev_replicas = 2;
    assert_int_equal(rt_runner_new(&r, &c, &err), SC_OK);
    assert_int_equal(rt_runner_connect(r, "local://x", NULL, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "rt_runner_connect_group"));
    const char *one[] = {"local://a"}, *two[] = {"local://a", ""};
    sc_err_clear(&err);
    assert_int_equal(rt_runner_connect_group(r, one, 1, NULL, 0, NULL, 0, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "1 previous-stage endpoints given, expected 2"));
    sc_err_clear(&err);
    assert_int_equal(rt_runner_connect_group(r, two, 2, NULL, 0, NULL, 0, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "previous-stage endpoint 1 is empty"));
    /* not connected: a step fails cleanly */
    sc_err_clear(&err);
    rt_runner_destroy(&r);
    c = spec_cfg(&rs, 0, 4);
    c.replicas = 2;
    assert_int_equal(rt_runner_new(&r, &c, &err), SC_OK);
    assert_int_equal(rt_runner_step(r, 1, NULL, &err), SC_ERR_PRECONDITION);
    assert_non_null(strstr(err.msg, "connect_group"));
    rt_runner_destroy(&r);
}

/* ---- pipedream with replicated stages (1F1B-RR) ---- */

/* Stage s's warm-up in minibatches of the stage's stream, as docs/design/runtime.md states it:
 * W_s = r_s * floor((R_s - 1) / r_s), R_s the copies of stages s..p-1. */
static int pdr_warmup(const int *reps, int p, int s)
{
    int after = 0;
    for (int j = s; j < p; j++)
        after += reps[j];
    return reps[s] * ((after - 1) / reps[s]);
}

/* The weight version (rounds of updates taken) the forward of minibatch g uses on stage s: the
 * rounds whose last backward comes before it, i.e. those of minibatches below g - W_s. */
static uint64_t pdr_version(const int *reps, int p, int s, int g)
{
    int w = pdr_warmup(reps, p, s);
    return g < w ? 0 : (uint64_t)((g - w) / reps[s]);
}

/* PipeDream with replicated stages by hand, one thread, one kn_stage per stage (the copies of a
 * stage are identical, so one stands for all). The minibatches g = 0..steps*m-1 of the stream
 * (micro-batch g % m of step 1 + g / m) are taken one at a time, forward through every stage,
 * then backward. On stage s, g's forward and backward use the weights after pdr_version(g)
 * rounds of updates (every version is kept); each backward's weight gradient is taken alone, and
 * after the r_s minibatches of a round their gradients are added in order (from zero) and
 * divided by r_s, then the stage's optimizer steps once; an unreplicated stage steps on each
 * gradient as it is. Nothing of the runner's order of work is imitated: only which weights each
 * minibatch sees and which gradients form each update. Returns every stage's final parameters,
 * concatenated, and each step's mean loss in losses[steps]. */
static float *pdr_reference(const run_spec *rs, const int *reps, size_t *count, double *losses)
{
    enum { MAXS = 4 };
    sc_err err;
    sc_err_clear(&err);
    sc_jdoc *doc = NULL;
    kn_model *m = NULL;
    assert_int_equal(sc_jdoc_parse(&doc, "model", rs->model, strlen(rs->model), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc);
    assert_int_equal(kn_model_from_node(&m, &root, &err), SC_OK);
    int p = rs->stages, nb = kn_model_block_count(m), mbs = rs->microbatches;
    int M = rs->batch / mbs, total = rs->steps * mbs;
    assert_true(p <= MAXS);
    kn_device cpu = {KN_DEV_CPU, 0};
    kn_stage *st[MAXS];
    float **hist[MAXS], *sum[MAXS], *act[MAXS], *gin[MAXS];
    size_t np[MAXS], most = 0;
    int nver[MAXS], in_round[MAXS];
    rt_runner_cfg rc = spec_cfg(rs, 0, nb);
    for (int s = 0; s < p; s++) {
        rt_runner_cfg c = spec_cfg(rs, s, nb);
        kn_stage_cfg sc = kn_stage_cfg_default(c.first_block, c.last_block, cpu, M);
        if (strcmp(rs->optimizer, "sgd") == 0) {
            sc.optim = kn_optim_sgd_default();
            sc.optim.momentum = (float)rc.momentum;
        }
        sc.optim.lr = (float)rc.lr;
        sc.optim.weight_decay = (float)rc.weight_decay;
        assert_int_equal(kn_stage_new_cfg(&st[s], m, &sc, &err), SC_OK);
        np[s] = kn_stage_param_count(st[s]);
        most = np[s] > most ? np[s] : most;
        hist[s] = calloc((size_t)(total / reps[s] + 2), sizeof *hist[s]);
        hist[s][0] = malloc(np[s] * sizeof(float));
        assert_int_equal(kn_stage_params_to_host(st[s], hist[s][0], &err), SC_OK);
        nver[s] = 1;
        in_round[s] = 0;
        sum[s] = calloc(np[s], sizeof(float));
        act[s] = malloc((size_t)M * kn_stage_output_per_sample(st[s]) * sizeof(float) + 4);
        gin[s] = malloc((size_t)M * kn_stage_input_per_sample(st[s]) * sizeof(float) + 4);
    }
    int tps = kn_model_targets_per_sample(m);
    rt_data_cfg dc;
    memset(&dc, 0, sizeof dc);
    dc.kind = RT_DATA_SYNTHETIC;
    dc.seed = rc.seed;
    dc.inputs_are_tokens = kn_model_block(m, 0)->in_tokens;
    dc.input_elems = kn_model_block(m, 0)->in_floats;
    dc.targets_per_sample = tps;
    dc.classes = kn_model_classes(m);
    rt_data *d = NULL;
    assert_int_equal(rt_data_new(&d, &dc, &err), SC_OK);
    void *in = malloc((size_t)M * dc.input_elems * 4 + 4);
    int32_t *tgt = malloc((size_t)M * (size_t)tps * 4);
    float *g1 = malloc(most * sizeof *g1);
    for (int t = 0; t < rs->steps; t++)
        losses[t] = 0.0;
    for (int g = 0; g < total; g++) {
        uint64_t step = 1 + (uint64_t)(g / mbs);
        assert_int_equal(rt_data_batch(d, step, (g % mbs) * M, M, in, tgt, &err), SC_OK);
        const void *x = in;
        for (int s = 0; s < p; s++) {
            uint64_t v = pdr_version(reps, p, s, g);
            assert_true(v < (uint64_t)nver[s]); /* that many rounds are complete by now */
            assert_int_equal(kn_stage_params_from_host(st[s], hist[s][v], &err), SC_OK);
            assert_int_equal(kn_stage_forward_host(st[s], 0, x, s == p - 1 ? tgt : NULL, M, &err),
                             SC_OK);
            if (s < p - 1) {
                assert_int_equal(kn_stage_output_to_host(st[s], 0, act[s], &err), SC_OK);
                x = act[s];
            } else {
                float l = 0.0f;
                assert_int_equal(kn_stage_loss(st[s], 0, &l, &err), SC_OK);
                losses[g / mbs] += (double)l * (double)M;
            }
        }
        const float *gy = NULL; /* the gradient of stage s's output */
        for (int s = p - 1; s >= 0; s--) {
            assert_int_equal(kn_stage_zero_grads(st[s], &err), SC_OK);
            assert_int_equal(kn_stage_backward_host(st[s], 0, gy, &err), SC_OK);
            assert_int_equal(kn_stage_grads_to_host(st[s], g1, &err), SC_OK);
            if (s > 0) {
                assert_int_equal(kn_stage_grad_input_to_host(st[s], gin[s], &err), SC_OK);
                gy = gin[s];
            }
            if (reps[s] == 1)
                memcpy(sum[s], g1, np[s] * sizeof(float));
            else
                for (size_t i = 0; i < np[s]; i++)
                    sum[s][i] += g1[i];
            if (++in_round[s] < reps[s])
                continue;
            if (reps[s] > 1)
                for (size_t i = 0; i < np[s]; i++)
                    sum[s][i] /= (float)reps[s];
            /* the round's update, on the newest weights */
            assert_int_equal(kn_stage_params_from_host(st[s], hist[s][nver[s] - 1], &err), SC_OK);
            memcpy(kn_stage_grads_device(st[s]), sum[s], np[s] * sizeof(float));
            assert_int_equal(kn_stage_step(st[s], &err), SC_OK);
            hist[s][nver[s]] = malloc(np[s] * sizeof(float));
            assert_int_equal(kn_stage_params_to_host(st[s], hist[s][nver[s]], &err), SC_OK);
            nver[s]++;
            memset(sum[s], 0, np[s] * sizeof(float));
            in_round[s] = 0;
        }
    }
    for (int t = 0; t < rs->steps; t++)
        losses[t] /= (double)rs->batch;
    size_t all_n = 0;
    for (int s = 0; s < p; s++)
        all_n += np[s];
    float *all = malloc(all_n * sizeof *all);
    for (int s = 0, off = 0; s < p; off += (int)np[s], s++) {
        assert_int_equal(in_round[s], 0); /* whole rounds only */
        memcpy(all + off, hist[s][nver[s] - 1], np[s] * sizeof(float));
    }
    *count = all_n;
    for (int s = 0; s < p; s++) {
        for (int v = 0; v < nver[s]; v++)
            free(hist[s][v]);
        free(hist[s]);
        free(sum[s]);
        free(act[s]);
        free(gin[s]);
        kn_stage_destroy(&st[s]);
    }
    free(g1);
    free(in);
    free(tgt);
    rt_data_destroy(&d);
    kn_model_destroy(&m);
    sc_jdoc_destroy(&doc);
    return all;
}

/* The pipeline with reps[s] copies of stage s runs rs->steps steps, then a flush; after the steps
 * (not drained) and after the flush every stage's copies hold bit-identical parameters. Returns
 * them (copy 0's of every stage, concatenated) and the step losses of every copy of the last
 * stage, which must agree bit for bit. */
static float *pdr_train(const run_spec *rs, const int *reps, size_t *count, double *losses)
{
    repl_pipe rp;
    repl_open(&rp, rs, reps);
    pd_job *jobs = pd_run_runners(rp.r, rp.n, 1, rs->steps, false);
    size_t n = 0;
    free(repl_params(&rp, &n)); /* identical copies with minibatches in flight */
    int last = rp.base[rs->stages - 1];
    for (int t = 0; t < rs->steps; t++) {
        losses[t] = jobs[last].loss[t];
        for (int i = last; i < rp.n; i++)
            assert_true(jobs[i].loss[t] == losses[t]);
    }
    free(jobs);
    free(pd_run_runners(rp.r, rp.n, 1 + (uint64_t)rs->steps, 0, true));
    float *p = repl_params(&rp, count);
    repl_close(&rp);
    return p;
}

/* The stream with replicated stages matches the hand-made reference bit for bit: 2 and 3 stages,
 * the first, the last, or two stages replicated, GPT and MLP, adamw and sgd, zmq and local,
 * m a multiple of the copies (m = r too). */
static void test_pipedream_replicated_reference(void **state)
{
    (void)state;
    static const int r21[] = {2, 1}, r12[] = {1, 2}, r221[] = {2, 2, 1}, r22[] = {2, 2},
                     r122[] = {1, 2, 2};
    static const struct {
        run_spec rs;
        const int *reps;
    } cases[] = {
        {{GPT_JSON, "pipedream", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0}, r21},
        {{MLP_JSON, "pipedream", 2, 8, 4, 3, "sgd", "local", NULL, NULL, NULL, 0}, r12},
        {{GPT_JSON, "pipedream", 3, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0}, r221},
        {{MLP_JSON, "pipedream", 2, 4, 2, 4, "adamw", "local", NULL, NULL, NULL, 0}, r22},
        {{MLP_JSON, "pipedream", 3, 8, 4, 2, "sgd", "zmq", NULL, NULL, NULL, 0}, r122},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const run_spec *rs = &cases[i].rs;
        double ref_loss[8], got_loss[8];
        size_t n_ref = 0, n_got = 0;
        float *ref = pdr_reference(rs, cases[i].reps, &n_ref, ref_loss);
        float *got = pdr_train(rs, cases[i].reps, &n_got, got_loss);
        assert_int_equal(n_ref, n_got);
        if (memcmp(ref, got, n_ref * sizeof *ref) != 0)
            print_error("case %zu: parameters differ from the reference\n", i);
        assert_memory_equal(ref, got, n_ref * sizeof *ref);
        for (int t = 0; t < rs->steps; t++) {
            /* the copies add their losses per round: another order of the same doubles */
            assert_true(fabs(got_loss[t] - ref_loss[t]) <= 1e-9 * ref_loss[t]);
            assert_true(ref_loss[t] > 0.0);
        }
        free(ref);
        free(got);
    }
}

/* The round's mean makes [r, r] the unreplicated stream over merged minibatches: with m/r
 * micro-batches of r times the samples (the union of a round's), an unreplicated pipedream run
 * reaches the same parameters, up to float rounding. */
static void test_pipedream_replicated_merged(void **state)
{
    (void)state;
    static const int r22[] = {2, 2};
    const run_spec rep = {MLP_JSON, "pipedream", 2, 8, 4, 4, "sgd", "local", NULL, NULL, NULL, 0};
    const run_spec one = {MLP_JSON, "pipedream", 2, 8, 2, 4, "sgd", "local", NULL, NULL, NULL, 0};
    double loss[8];
    size_t n_rep = 0, n_one = 0;
    float *a = pdr_train(&rep, r22, &n_rep, loss);
    rt_runner *rn[2] = {0};
    pipeline_open(&one, rn);
    free(pd_run(&one, rn, 1, one.steps, true));
    float *b = pipeline_params(&one, rn, &n_one);
    assert_int_equal(n_rep, n_one);
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n_one; i++) {
        diff += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        norm += (double)b[i] * b[i];
    }
    if (sqrt(diff / norm) > 1e-6)
        print_error("relative difference %g\n", sqrt(diff / norm));
    assert_true(sqrt(diff / norm) <= 1e-6);
    for (int s = 0; s < 2; s++)
        rt_runner_destroy(&rn[s]);
    free(a);
    free(b);
}

/* The events of every copy over 3 undrained steps of [2, 2, 1]: copy c of stage s runs exactly
 * its own minibatches g = c, c + r, ..., as F(g) then B(g - W_s); every forward uses the version
 * of the rounds completed before it, every backward its forward's; no copy holds more than
 * W_s / r_s + 1 minibatches; then the loss falls over 60 more steps. */
static void test_pipedream_replicated_versions(void **state)
{
    (void)state;
    enum { P = 3, MB = 4, STEPS = 3 };
    static const int reps[P] = {2, 2, 1};
    const run_spec rs = {GPT_JSON, "pipedream", P, 8, MB, 0, "adamw", "local", NULL, NULL, NULL, 0};
    repl_pipe rp;
    repl_open(&rp, &rs, reps);
    pd_job *jobs = pd_run_runners(rp.r, rp.n, 1, STEPS, false);
    for (int i = 0; i < rp.n; i++) {
        const pd_job *j = &jobs[i];
        int s = rp.stage_of[i], c = rp.replica_of[i], r = reps[s];
        int w = pdr_warmup(reps, P, s), slots = w / r + 1, total = STEPS * MB;
        uint64_t fwd_ver[STEPS * MB];
        int at = 0, max_inflight = 0;
        for (int g = c; g < total; g += r) {
            const rt_pd_event *f = &j->log[at++];
            assert_false(f->backward);
            assert_int_equal(f->step, 1 + (uint64_t)(g / MB));
            assert_int_equal(f->mb, g % MB);
            assert_int_equal(f->version, pdr_version(reps, P, s, g));
            fwd_ver[g] = f->version;
            max_inflight = f->inflight > max_inflight ? f->inflight : max_inflight;
            if (g < w)
                continue;
            const rt_pd_event *b = &j->log[at++];
            int k = g - w; /* W_s is a multiple of r_s: an own minibatch */
            assert_true(b->backward);
            assert_int_equal(b->step, 1 + (uint64_t)(k / MB));
            assert_int_equal(b->mb, k % MB);
            assert_int_equal(b->version, fwd_ver[k]); /* the stashed version */
            assert_int_equal(b->inflight, w / r);
        }
        assert_int_equal(j->n_log, at);
        assert_int_equal(max_inflight, slots);
        for (int t = 0; t < STEPS; t++) {
            int done = (t + 1) * MB / r; /* own forwards so far */
            assert_int_equal(j->inflight_end[t], done < w / r ? done : w / r);
        }
        assert_int_equal(j->last.slots, slots);
        assert_int_equal(j->last.microbatches, MB / r);
        for (int mb = 0; mb < MB; mb++)
            assert_int_equal(j->last.weight_version_forward[mb],
                             mb % r == c ? pdr_version(reps, P, s, (STEPS - 1) * MB + mb)
                                         : UINT64_MAX);
        assert_int_equal(j->last.has_loss, s == P - 1);
    }
    /* stage 0 (W 4, 2 copies): step 3's forwards use version 2 (rounds of minibatches 0..3) */
    assert_int_equal(pdr_version(reps, P, 0, 8), 2);
    free(jobs);
    pd_job *first = pd_run_runners(rp.r, rp.n, STEPS + 1, 1, false);
    double loss0 = first[rp.base[P - 1]].last.loss;
    free(first);
    pd_job *more = pd_run_runners(rp.r, rp.n, STEPS + 2, 60, true);
    double loss1 = more[rp.base[P - 1]].last.loss;
    if (!(loss1 < loss0 * 0.8))
        print_error("pipedream with replicas: loss %g -> %g\n", loss0, loss1);
    assert_true(loss1 < loss0 * 0.8);
    free(more);
    size_t n = 0;
    free(repl_params(&rp, &n)); /* copies identical after the flush */
    repl_close(&rp);
}

/* Flushed checkpoints with copies: a save in flight is refused on every copy, copy 0 writes the
 * stage's file after the flush and copy 1 nothing, every copy loads it, and the resumed run
 * equals the uninterrupted one bit for bit. */
static void test_pipedream_replicated_checkpoint(void **state)
{
    (void)state;
    char dir[] = "/tmp/sc_test_pdrckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const int reps[] = {2, 1};
    const run_spec rs = {GPT_JSON, "pipedream", 2, 8, 4, 0, "adamw", "local", NULL, NULL, NULL, 0};
    sc_err err;
    sc_err_clear(&err);
    repl_pipe a, b;
    repl_open(&a, &rs, reps);
    free(pd_run_runners(a.r, a.n, 1, 2, false));
    for (int i = 0; i < 2; i++) { /* both copies of stage 0 hold minibatches */
        sc_err_clear(&err);
        assert_int_equal(rt_runner_save(a.r[i], dir, 2, &err), SC_ERR_PRECONDITION);
        assert_non_null(strstr(err.msg, "rt_runner_flush"));
    }
    free(pd_run_runners(a.r, a.n, 3, 0, true));
    for (int i = 0; i < a.n; i++)
        assert_int_equal(rt_runner_save(a.r[i], dir, 2, &err), SC_OK);
    free(pd_run_runners(a.r, a.n, 3, 2, true));
    size_t n1 = 0, n2 = 0;
    float *p1 = repl_params(&a, &n1);
    repl_open(&b, &rs, reps);
    free(pd_run_runners(b.r, b.n, 1, 1, false)); /* in flight, then dropped by the load */
    for (int i = 0; i < b.n; i++)
        assert_int_equal(rt_runner_load(b.r[i], dir, 2, &err), SC_OK);
    free(pd_run_runners(b.r, b.n, 3, 2, true));
    float *p2 = repl_params(&b, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(p1, p2, n1 * sizeof *p1);
    for (int s = 0; s < 2; s++) {
        char path[1400];
        rt_runner_checkpoint_path(a.r[a.base[s]], dir, 2, path, sizeof path);
        assert_int_equal(unlink(path), 0);
    }
    assert_int_equal(rmdir(dir), 0); /* two files only: copy 1 wrote none */
    free(p1);
    free(p2);
    repl_close(&a);
    repl_close(&b);
}

/* What pipedream with copies refuses: m not a multiple of every stage's copies (naming the valid
 * counts) and a stage_replicas vector that disputes the stage's own counts. */
static void test_pipedream_replicated_bad_config(void **state)
{
    (void)state;
    static const int r21[] = {2, 1}, r11[] = {1, 1}, r23[] = {2, 3}, r120[] = {1, 2, 0};
    const run_spec rs = {GPT_JSON, "pipedream", 2, 6, 3, 1, "adamw", "local", NULL, NULL, NULL, 0};
    rt_runner_cfg c = spec_cfg(&rs, 0, 4);
    c.replicas = 2;
    c.stage_replicas = r21;
    expect_bad(c, SC_ERR_INVALID, "multiple of every stage's copies");
    expect_bad(c, SC_ERR_INVALID, "copies [2, 1]");
    expect_bad(c, SC_ERR_INVALID, "got 3; valid: 2, 4, ...");
    c = spec_cfg(&rs, 1, 4); /* the unreplicated stage refuses too: its warm-up needs rounds */
    c.prev_replicas = 2;
    expect_bad(c, SC_ERR_INVALID, "valid: 2, 4, ...");
    c = spec_cfg(&rs, 0, 4);
    c.batch_size = 12;
    c.microbatches = 4;
    c.stage_replicas = r23; /* stage 1, unknown to stage 0 but for this vector, has 3 copies */
    c.replicas = 2;
    c.next_replicas = 3;
    expect_bad(c, SC_ERR_INVALID, "got 4; valid: 6, 12, ...");
    c = spec_cfg(&rs, 0, 4);
    c.replicas = 2;
    c.stage_replicas = r11;
    expect_bad(c, SC_ERR_INVALID, "stage_replicas[0] = 1; valid: equal to replicas (2)");
    const run_spec p3 = {GPT_JSON, "pipedream", 3, 8, 4, 1, "adamw", "local", NULL, NULL, NULL, 0};
    c = spec_cfg(&p3, 0, 4);
    c.next_replicas = 2;
    c.stage_replicas = r120;
    expect_bad(c, SC_ERR_INVALID, "stage_replicas[2] = 0");
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equivalence_gpt),
        cmocka_unit_test(test_grad_norms_skipped),
        cmocka_unit_test(test_fp16_loss_scale),
        cmocka_unit_test(test_timeline_records),
        cmocka_unit_test(test_checkpoint_prune),
        cmocka_unit_test(test_equivalence_gpt_text),
        cmocka_unit_test(test_equivalence_vgg_mlp),
        cmocka_unit_test(test_equivalence_zb1),
        cmocka_unit_test(test_equivalence_zb1_capped),
        cmocka_unit_test(test_equivalence_unequal_sliced),
        cmocka_unit_test(test_stage_memory_path),
        cmocka_unit_test(test_equivalence_frozen),
        cmocka_unit_test(test_equivalence_per_stage_sizes),
        cmocka_unit_test(test_per_stage_bad_config),
        cmocka_unit_test(test_equivalence_backward_sizes),
        cmocka_unit_test(test_backward_sizes_bad_config),
        cmocka_unit_test(test_equivalence_processes),
        cmocka_unit_test(test_worker_killed),
        cmocka_unit_test(test_pipedream_weight_stashing),
        cmocka_unit_test(test_pipedream_versions),
        cmocka_unit_test(test_pipedream_no_drain),
        cmocka_unit_test(test_pipedream_flush_checkpoint),
        cmocka_unit_test(test_checkpoint_resume),
        cmocka_unit_test(test_peer_gone),
        cmocka_unit_test(test_oversized_message_refused),
        cmocka_unit_test(test_loss_decreases),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_replicated_equivalence),
        cmocka_unit_test_teardown(test_replicated_joined_endpoints, unjoin),
        cmocka_unit_test(test_replicated_checkpoint),
        cmocka_unit_test(test_replicated_bad_config),
        cmocka_unit_test(test_pipedream_replicated_reference),
        cmocka_unit_test(test_pipedream_replicated_merged),
        cmocka_unit_test(test_pipedream_replicated_versions),
        cmocka_unit_test(test_pipedream_replicated_checkpoint),
        cmocka_unit_test(test_pipedream_replicated_bad_config),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
