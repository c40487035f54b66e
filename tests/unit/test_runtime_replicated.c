/* worker/runtime/runner with replicated stages: every replica ends bit-identical and the job
 * equals the single-stage result (gpipe, 1f1b, sliced and zb1; the first, a middle, the last or a
 * lone stage replicated; endpoints joined to a device all-reduce's id too), with the all-reduce's
 * figures in the reports; asynchronous pipedream with copies (1F1B-RR: copies in rounds, the
 * mean of a round's gradients) against a hand-written stream bit for bit, against unreplicated
 * merged minibatches, and the versions every copy's events carry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_json.h"
#include "kernels/model.h"
#include "kernels/stage.h"
#include "tests/unit/runtime_harness.h"
#include "worker/data/data.h"

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
    run_opts_set(&(run_opts){.joined_to_copy0 = "nccl-reduce://v1/00"});
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_replicated(&cases[i], middle2);
}

/* Also after a failure, so that the tests after it are not affected. */
static int unjoin(void **state)
{
    (void)state;
    run_opts_set(NULL);
    return 0;
}

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

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicated_equivalence),
        cmocka_unit_test_teardown(test_replicated_joined_endpoints, unjoin),
        cmocka_unit_test(test_pipedream_replicated_reference),
        cmocka_unit_test(test_pipedream_replicated_merged),
        cmocka_unit_test(test_pipedream_replicated_versions),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
