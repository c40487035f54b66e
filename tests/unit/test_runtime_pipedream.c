/* worker/runtime/runner's asynchronous pipedream (1f1b with weight stashing): several steps
 * without a drain and a flush equal a hand-written stream bit for bit; every forward uses the
 * newest weights and every backward its forward's stashed version, with never more than p-s
 * minibatches in flight; the pipeline never drains between steps, and the loss falls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_json.h"
#include "kernels/model.h"
#include "kernels/stage.h"
#include "tests/unit/runtime_harness.h"
#include "worker/data/data.h"

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

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipedream_weight_stashing),
        cmocka_unit_test(test_pipedream_versions),
        cmocka_unit_test(test_pipedream_no_drain),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
