/* The runtime tests' harness (runtime_harness.h): run specs and their options, pipelines of
 * runners with one thread per stage, the one-stage reference and the equivalence check. The run
 * options and the last run's gradient norms are the only state; tests run one at a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_json.h"
#include "kernels/model.h"
#include "kernels/stage.h"
#include "tests/unit/runtime_harness.h"
#include "worker/data/data.h"

static run_opts g_opts;

void run_opts_set(const run_opts *o)
{
    if (o != NULL)
        g_opts = *o;
    else
        memset(&g_opts, 0, sizeof g_opts);
}

const run_opts *run_opts_get(void)
{
    return &g_opts;
}

int effective_microbatches(const run_spec *rs)
{
    if (strcmp(rs->schedule, "sliced") != 0)
        return rs->microbatches;
    return rs->microbatches + (rs->slice_k < rs->microbatches ? rs->slice_k : rs->microbatches);
}

static int spec_size(const run_spec *rs, int mb)
{
    return rs->sizes != NULL ? rs->sizes[mb] : rs->batch / rs->microbatches;
}

int model_blocks(const char *json)
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

rt_runner_cfg spec_cfg(const run_spec *rs, int stage, int nblocks)
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
    c.stage_memory_path = g_opts.stage_memory_path;
    c.frozen_blocks = g_opts.frozen;
    c.skip_grad_norms = g_opts.skip_norms;
    c.zb1_defer = g_opts.zb1_defer;
    c.precision = g_opts.precision;
    c.loss_scale_init = g_opts.scale_init;
    c.loss_scale_interval = g_opts.scale_interval;
    const per_stage_sizes *ps = g_opts.per_stage;
    if (ps != NULL) {
        c.microbatch_sizes = ps->sizes[stage];
        c.microbatches = ps->counts[stage];
        if (stage > 0) {
            c.prev_sizes = ps->sizes[stage - 1];
            c.n_prev_sizes = ps->counts[stage - 1];
        }
        if (stage < rs->stages - 1) {
            c.next_sizes = ps->sizes[stage + 1];
            c.n_next_sizes = ps->counts[stage + 1];
            c.next_backward_sizes = ps->bwd[stage + 1];
            c.n_next_backward_sizes = ps->bcounts[stage + 1];
        }
        c.backward_sizes = ps->bwd[stage];
        c.n_backward_sizes = ps->bcounts[stage];
    }
    return c;
}

void *stage_thread(void *arg)
{
    stage_job *j = arg;
    sc_err_clear(&j->err);
    j->rc = SC_OK;
    for (int i = 0; i < j->steps && j->rc == SC_OK; i++)
        j->rc = rt_runner_step(j->r, j->first_step + (uint64_t)i, &j->last, &j->err);
    return NULL;
}

void pipeline_open(const run_spec *rs, rt_runner **rn)
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

void pipeline_run(const run_spec *rs, rt_runner **rn, uint64_t first_step, int steps,
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

float *pipeline_params(const run_spec *rs, rt_runner **rn, size_t *count)
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

float *train_pipeline(const run_spec *rs, size_t *count, rt_report *reports)
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

double train_grad_sq_sum(int stage)
{
    return g_grad_sq_sum[stage];
}

float *train_reference(const run_spec *rs, size_t *count, float **init)
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
    assert_int_equal(kn_stage_set_frozen_blocks(st, g_opts.frozen, &err), SC_OK);
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

void assert_params_close(const float *a, const float *b, const float *init, size_t n)
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

void check_equivalence(const run_spec *rs)
{
    size_t n_ref = 0, n_pipe = 0;
    float *init = NULL;
    float *ref = train_reference(rs, &n_ref, &init);
    rt_report reports[8];
    float *pipe = train_pipeline(rs, &n_pipe, reports);
    const per_stage_sizes *ps = g_opts.per_stage;
    const int *defer = g_opts.zb1_defer;
    assert_int_equal(n_ref, n_pipe);
    assert_params_close(pipe, ref, init, n_ref);
    for (int s = 0; s < rs->stages; s++) {
        const rt_report *r = &reports[s];
        assert_int_equal(r->step, (uint64_t)rs->steps);
        assert_int_equal(r->has_loss, s == rs->stages - 1);
        int me = ps != NULL ? ps->counts[s] : effective_microbatches(rs);
        bool fill_drain =
            strcmp(rs->schedule, "gpipe") == 0 || strcmp(rs->schedule, "unequal") == 0;
        /* zb1 holds a micro-batch from F to W: min(p, m) on every stage, with capped deferral
         * p-s + min(cap, s) (s W deferred at most, fewer when m is short) */
        int held = rs->stages - s;
        if (strcmp(rs->schedule, "zb1") == 0) {
            int warm = rs->stages - s - 1 < me ? rs->stages - s - 1 : me;
            int d = s < me - warm ? s : me - warm;
            held += defer != NULL && defer[s] < d ? defer[s] : d;
        }
        int bound = fill_drain ? me : (held < me ? held : me);
        if (strcmp(rs->schedule, "sliced") == 0) {
            /* the warm-up covers p-s-1 micro-batches' worth, the k halves counted as halves */
            int k = rs->slice_k < rs->microbatches ? rs->slice_k : rs->microbatches;
            int need = rs->stages - s - 1, warm = need <= k ? 2 * need : need + k;
            bound = warm + 1 < me ? warm + 1 : me;
        }
        assert_int_equal(r->microbatches, me);
        assert_int_equal(r->slots, bound + (per_stage_gathers(ps, s) ? 1 : 0));
        assert_int_equal(r->max_inflight, bound);
        assert_true(r->iteration_s > 0.0 && r->busy_s <= r->iteration_s * 1.01);
        assert_true(r->n_blocks >= 1);
        /* a stage of lone pool blocks would have no parameters; none here. A stage frozen
         * whole has no gradient. */
        int last_block = (s + 1) * model_blocks(rs->model) / rs->stages - 1;
        if (last_block < g_opts.frozen)
            assert_true(g_grad_sq_sum[s] == 0.0);
        else
            assert_true(g_grad_sq_sum[s] > 0.0);
    }
    assert_true(isfinite(reports[rs->stages - 1].loss) && reports[rs->stages - 1].loss > 0.0);
    free(ref);
    free(pipe);
    free(init);
}

int count_kind(const rt_tl_event *ev, size_t n, uint64_t it, int kind)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += ev[i].iteration == it && ev[i].kind == kind;
    return c;
}
