/*
 * bench_predict: how close the planner's simulated iteration time comes to the runtime's measured
 * one on this host's CPU, for a small GPT and a small MLP over 2 and 4 stages, gpipe and 1f1b,
 * 4 and 8 micro-batches.
 *
 * Per model: (1) the kernels profiler measures every block's forward and backward time at the
 * micro-batch size used here and writes the stagecraft-profile document, which the planner then
 * parses as it would a file; (2) one transport message of the model's cut size is timed between
 * two inboxes of the chosen transport, giving the loopback bandwidth figure of the cluster.
 * Per configuration: (3) the planner (minmax, p identical devices joined by that bandwidth, the
 * given schedule and micro-batch count) predicts the iteration time; (4) the runtime runs that
 * partition and schedule with every stage a thread of this process, twice:
 *   "real":  the real model and kernels. Stages compete for the host's cores: with more stages
 *            than cores, the measured time also shows that contention, which the planner (one
 *            device per stage) does not model; so the plan is also simulated with every stage
 *            in one group of as many processors as the host has cores (plan_sim_run_shared),
 *            printed beside the planner's own prediction.
 *   "sleep": a tiny model with the same block structure (its own compute is negligible) and
 *            every forward / backward and optimizer step given the profiled time of its stage
 *            as slept stand-in compute (rt_runner_cfg extra_forward_s / extra_backward_s /
 *            extra_optimizer_s). This measures the
 *            schedule, transport and runtime overhead apart from how many cores the host has.
 * A barrier starts every iteration on all stages at once, as the simulator starts from an empty
 * pipeline; an iteration's time is the longest stage's rt_runner_step wall time; the figure is
 * the median over the timed iterations, after the warm-up ones.
 * Diagnostics of the real run, to say where an error comes from: how much slower the stages'
 * compute ran than profiled, their measured optimizer step (the prediction counts the profile's
 * optimizer_s), the prediction with the measured step in its place, and the simulator replayed
 * with the run's own stage times.
 *
 * Not measured: GPUs, replicated stages, the zmq transport's cost between machines. Nothing here
 * asserts on time; it prints figures.
 *
 * Usage: bench_predict [--iters N] [--warmup N] [--profile-repeats N] [--transport local|zmq]
 *                      [--bandwidth BYTES_PER_S]
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_pipeline.h"
#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "coordinator/planner/plan.h"
#include "kernels/model.h"
#include "kernels/profile.h"
#include "worker/runtime/runner.h"
#include "worker/transport/transport.h"

#define MAX_STAGES 4
#define MAX_ITERS BENCH_PIPE_MAX_ITERS
#define MAX_BLOCKS 16
#define MAX_ROWS 32

typedef struct {
    const char *label;
    const char *real_json; /* the measured model */
    const char *tiny_json; /* same blocks, negligible compute: the "sleep" runs */
    int micro_size;        /* samples per micro-batch, the profiled size */
} model_case;

static const model_case models[] = {
    {"gpt-L4-C64-T32",
     "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", \"vocab\": 256, "
     "\"seq_len\": 32, \"layers\": 4, \"width\": 64, \"heads\": 4}",
     "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", \"vocab\": 256, "
     "\"seq_len\": 4, \"layers\": 4, \"width\": 8, \"heads\": 1}",
     4},
    {"mlp-256-512x4-10",
     "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"mlp\", "
     "\"sizes\": [256, 512, 512, 512, 512, 10]}",
     "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"mlp\", "
     "\"sizes\": [8, 8, 8, 8, 8, 10]}",
     16},
};
#define N_MODELS ((int)(sizeof models / sizeof models[0]))

typedef struct {
    int iters, warmup, profile_repeats;
    const char *transport;
    double bw_bytes_per_s; /* 0: measure */
    int rounds;            /* --paired R: rounds of (fresh profile, real run); 0: none */
} bench_opts;

#define MAX_ROUNDS 15

/* ---------------------------------------------------------------- helpers */

/* ---------------------------------------------------------------- profile */

/* Profiles `json`'s blocks on the CPU at `micro` samples and parses the resulting
 * stagecraft-profile document with the planner's own reader. */
static sc_status profile_model(const char *json, int micro, int repeats, plan_profile **out,
                               sc_err *err)
{
    kn_model *m = NULL;
    kn_profile_block *blocks = NULL;
    void *doc = NULL;
    char *text = NULL;
    sc_status rc;
    SC_CHECK(kn_model_parse(&m, "bench model", json, strlen(json), err));
    int nb = kn_model_block_count(m);
    blocks = calloc((size_t)nb, sizeof *blocks);
    if (blocks == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        goto done;
    }
    kn_profile_cfg pc;
    memset(&pc, 0, sizeof pc);
    pc.device = (kn_device){.kind = KN_DEV_CPU, .index = 0};
    pc.sizes[0] = micro;
    pc.nsizes = 1;
    pc.warmup = 2;
    pc.repeats = repeats;
    SC_CHECK_GOTO(kn_profile_run(m, &pc, blocks, err), done);
    SC_CHECK_GOTO(kn_profile_to_json(m, "cpu", micro, blocks, nb, &doc, err), done);
    text = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(12));
    if (text == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the profile");
        goto done;
    }
    rc = plan_profile_parse_json(out, "bench profile", text, strlen(text), err);
done:
    free(text);
    json_decref(doc);
    free(blocks);
    kn_model_destroy(&m);
    return rc;
}

static int model_blocks(const char *json, sc_err *err)
{
    kn_model *m = NULL;
    if (kn_model_parse(&m, "bench model", json, strlen(json), err) != SC_OK)
        return -1;
    int n = kn_model_block_count(m);
    kn_model_destroy(&m);
    return n;
}

/* ---------------------------------------------------------------- loopback bandwidth */

/* One message of `bytes` from one inbox to another of the transport, send then receive in this
 * thread: the median one-way time gives bytes / time, latency included, which is what a cut of
 * that size costs the runtime. */
static sc_status measure_bw(const char *kind_name, size_t bytes, double *bw, sc_err *err)
{
    rt_transport_cfg c = rt_transport_cfg_default();
    SC_CHECK(rt_transport_kind_parse(kind_name, "--transport", &c.kind, err));
    c.bind_endpoint = c.kind == RT_TRANSPORT_LOCAL ? "local://" : "tcp://127.0.0.1:0";
    c.timeout_ms = 5000;
    enum { WARM = 20, REPS = 101 };
    rt_transport *a = NULL, *b = NULL;
    double t[REPS];
    char *buf = malloc(bytes), *back = malloc(bytes);
    sc_status rc = SC_OK;
    if (buf == NULL || back == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        goto done;
    }
    memset(buf, 1, bytes);
    SC_CHECK_GOTO(rt_transport_new(&a, &c, err), done);
    SC_CHECK_GOTO(rt_transport_new(&b, &c, err), done);
    SC_CHECK_GOTO(rt_transport_connect(a, NULL, rt_transport_endpoint(b), err), done);
    SC_CHECK_GOTO(rt_transport_connect(b, rt_transport_endpoint(a), NULL, err), done);
    for (int i = 0; i < WARM + REPS; i++) {
        double t0 = sc_clock_now_s();
        SC_CHECK_GOTO(rt_transport_send(a, RT_MSG_ACTIVATION, 0, i, buf, bytes, err), done);
        SC_CHECK_GOTO(rt_transport_recv(b, RT_MSG_ACTIVATION, 0, i, back, bytes, err), done);
        if (i >= WARM)
            t[i - WARM] = sc_clock_now_s() - t0;
    }
    double one = bench_median(t, REPS);
    *bw = (double)bytes / (one > 1e-9 ? one : 1e-9);
done:
    rt_transport_destroy(&a);
    rt_transport_destroy(&b);
    free(buf);
    free(back);
    return rc;
}

/* ---------------------------------------------------------------- runtime runs */

/* Runs the partition with the schedule on CPU stages over the chosen transport. */
static sc_status run_pipeline(const char *model_json, const plan_partition *part,
                              const char *schedule, int batch, int m, const double *extra_f_s,
                              const double *extra_b_s, const double *extra_o_s, const bench_opts *o,
                              bench_pipe_result *res, sc_err *err)
{
    bench_pipe_spec sp = {.model_json = model_json,
                          .n_stages = part->n_stages,
                          .first = part->first,
                          .last = part->last,
                          .schedule = schedule,
                          .batch = batch,
                          .microbatches = m,
                          .device = "cpu",
                          .transport = o->transport,
                          .warmup = o->warmup,
                          .iters = o->iters,
                          .extra_f_s = extra_f_s,
                          .extra_b_s = extra_b_s,
                          .extra_o_s = extra_o_s};
    return bench_pipe_run(&sp, res, err);
}

/* ---------------------------------------------------------------- one configuration */

typedef struct {
    int model, p, stages, m;
    const char *sched;
    char part[64];
    double pred_s, real_s, sleep_s;
    double shared_s;   /* the prediction with all stages sharing the host's cores */
    double with_opt_s; /* the prediction with the real run's optimizer step added */
    double replay_s;   /* the simulator fed the real run's own stage times */
    double opt_s;      /* the slowest stage's optimizer step in the real run */
    double inflation;  /* most a stage's real forward + backward exceeds its profile */
    /* --paired: the median over the rounds of each round's error, the prediction (a device per
     * stage, and sharing the cores) from a profile taken just before that round's run */
    double pair_err, pair_sh_err;
} row;

static double rel_err(double pred, double meas)
{
    return meas > 0 ? (pred - meas) / meas : 0.0;
}

/* Plays the plan's schedule in the planner's simulator with the optimizer step the real run
 * measured in place of the profile's `optimizer_s`, and, when `measured_compute`, the
 * run's own forward and backward times per micro-batch in place of the profiled ones; link
 * times stay the planner's. With measured compute, what remains between this and the measured
 * iteration is the schedule model's own error. */
static sc_status replay(const plan_profile *prof, const plan_cluster *cl,
                        const plan_partition *part, plan_sched_kind kind, int micro, int m,
                        const bench_pipe_result *meas, int measured_compute, double *iter_s,
                        sc_err *err)
{
    plan_cost *c = NULL;
    plan_schedule *sched = NULL;
    plan_sim_stage st[MAX_STAGES];
    plan_sim_result r;
    sc_status rc;
    SC_CHECK(plan_cost_new(&c, prof, cl, micro, micro * m, err));
    plan_partition_sim_stages(c, part, st);
    for (int s = 0; s < part->n_stages; s++) {
        if (measured_compute) {
            st[s].fwd_s = meas->fwd_s[s] / m;
            st[s].bwd_s = meas->bwd_s[s] / m;
        }
        st[s].opt_s = meas->opt_s[s];
    }
    SC_CHECK_GOTO(plan_schedule_build(&sched, kind, part->n_stages, m, 0, err), done);
    SC_CHECK_GOTO(plan_schedule_validate(sched, err), done);
    SC_CHECK_GOTO(plan_sim_run(sched, st, m, 1.0, 0, &r, err), done);
    *iter_s = r.iteration_s;
    plan_sim_result_free(&r);
done:
    plan_schedule_destroy(&sched);
    plan_cost_destroy(&c);
    return rc;
}

/* Each stage's optimizer step as the planner's cost model counts it (the profile's
 * optimizer_s of its blocks) into opt_s[n_stages]. */
static sc_status profiled_optimizer(const plan_profile *prof, const plan_cluster *cl,
                                    const plan_partition *part, int micro, int m, double *opt_s,
                                    sc_err *err)
{
    plan_cost *c = NULL;
    plan_sim_stage st[MAX_STAGES];
    SC_CHECK(plan_cost_new(&c, prof, cl, micro, micro * m, err));
    plan_partition_sim_stages(c, part, st);
    for (int s = 0; s < part->n_stages; s++)
        opt_s[s] = st[s].opt_s;
    plan_cost_destroy(&c);
    return SC_OK;
}

/* The plan's schedule played with the profiled stage times, as the planner predicts it, but with
 * every stage in one group of `cores` processors: the stage threads of the real run compete for
 * the host's cores, which the planner's own prediction (a device per stage) leaves out. With
 * cores >= stages this is the planner's prediction exactly. */
static sc_status predict_shared(const plan_profile *prof, const plan_cluster *cl,
                                const plan_partition *part, plan_sched_kind kind, int micro, int m,
                                int cores, double *iter_s, sc_err *err)
{
    plan_cost *c = NULL;
    plan_schedule *sched = NULL;
    plan_sim_stage st[MAX_STAGES];
    int group[MAX_STAGES] = {0};
    plan_sim_share share = {.n_groups = 1, .group = group, .capacity = &cores};
    plan_sim_result r;
    sc_status rc;
    SC_CHECK(plan_cost_new(&c, prof, cl, micro, micro * m, err));
    plan_partition_sim_stages(c, part, st);
    SC_CHECK_GOTO(plan_schedule_build(&sched, kind, part->n_stages, m, 0, err), done);
    SC_CHECK_GOTO(plan_schedule_validate(sched, err), done);
    SC_CHECK_GOTO(plan_sim_run_shared(sched, st, m, 1.0, &share, 0, &r, err), done);
    *iter_s = r.iteration_s;
    plan_sim_result_free(&r);
done:
    plan_schedule_destroy(&sched);
    plan_cost_destroy(&c);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* --paired: rounds of a fresh profile of the model and, at once, a real run of the same plan;
 * each round's prediction comes from its own profile, so a host whose speed drifts (a shared
 * virtual machine) is measured at about the same speed on both sides. */
static sc_status paired_rounds(const model_case *mc, const plan_cluster *cl,
                               const plan_partition *part, plan_sched_kind kind, const char *sched,
                               int m, int cores, const bench_opts *o, row *out, sc_err *err)
{
    double e[MAX_ROUNDS], esh[MAX_ROUNDS];
    for (int k = 0; k < o->rounds; k++) {
        plan_profile *pr = NULL;
        double pred, shared;
        bench_pipe_result real;
        SC_CHECK(profile_model(mc->real_json, mc->micro_size, o->profile_repeats, &pr, err));
        sc_status rc =
            predict_shared(pr, cl, part, kind, mc->micro_size, m, MAX_STAGES, &pred, err);
        if (rc == SC_OK)
            rc = predict_shared(pr, cl, part, kind, mc->micro_size, m, cores, &shared, err);
        plan_profile_destroy(&pr);
        SC_CHECK(rc);
        SC_CHECK(run_pipeline(mc->real_json, part, sched, mc->micro_size * m, m, NULL, NULL, NULL,
                              o, &real, err));
        e[k] = rel_err(pred, real.iter_s);
        esh[k] = rel_err(shared, real.iter_s);
    }
    out->pair_err = median(e, o->rounds);
    out->pair_sh_err = median(esh, o->rounds);
    return SC_OK;
}

static sc_status run_config(const model_case *mc, const plan_profile *prof, double bw, int p,
                            const char *sched, int m, const bench_opts *o, row *out, sc_err *err)
{
    plan_cluster *cl = NULL;
    plan_result res;
    memset(&res, 0, sizeof res);
    sc_status rc;
    SC_CHECK(plan_cluster_new_uniform(&cl, p, bw, 0.0, err));
    plan_request req;
    memset(&req, 0, sizeof req);
    req.profile = prof;
    req.cluster = cl;
    req.batch = mc->micro_size * m;
    req.microbatches = m;
    req.schedule = strcmp(sched, "gpipe") == 0 ? PLAN_SCHED_GPIPE : PLAN_SCHED_1F1B;
    req.max_stages = p;
    SC_CHECK_GOTO(plan_run(&req, PLAN_STRAT_MINMAX, &res, err), done);
    if (!res.ok) {
        rc = SC_ERRF(err, SC_ERR_INTERNAL, "minmax found no plan: %s", res.error);
        goto done;
    }
    const plan_partition *part = res.part;
    out->p = p;
    out->stages = part->n_stages;
    out->m = m;
    out->sched = sched;
    out->pred_s = res.iteration_time_s;
    size_t at = 0;
    out->part[0] = '\0';
    for (int s = 0; s < part->n_stages && at < sizeof out->part; s++)
        at += (size_t)snprintf(out->part + at, sizeof out->part - at, "%s%d-%d", s ? "|" : "",
                               part->first[s], part->last[s]);

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    SC_CHECK_GOTO(predict_shared(prof, cl, part, req.schedule, mc->micro_size, m,
                                 cores >= 1 && cores < MAX_STAGES ? (int)cores : MAX_STAGES,
                                 &out->shared_s, err),
                  done);
    bench_pipe_result real, sleep;
    SC_CHECK_GOTO(
        run_pipeline(mc->real_json, part, sched, req.batch, m, NULL, NULL, NULL, o, &real, err),
        done);
    out->real_s = real.iter_s;
    SC_CHECK_GOTO(
        replay(prof, cl, part, req.schedule, mc->micro_size, m, &real, 0, &out->with_opt_s, err),
        done);
    SC_CHECK_GOTO(
        replay(prof, cl, part, req.schedule, mc->micro_size, m, &real, 1, &out->replay_s, err),
        done);

    /* the stand-in compute of each stage: its blocks' profiled times, per sample, and its
     * profiled optimizer step, as the prediction counts them */
    double ef[MAX_STAGES], eb[MAX_STAGES], eo[MAX_STAGES];
    SC_CHECK_GOTO(profiled_optimizer(prof, cl, part, mc->micro_size, m, eo, err), done);
    for (int s = 0; s < part->n_stages; s++) {
        double f = 0, b = 0;
        for (int l = part->first[s]; l <= part->last[s]; l++) {
            f += prof->blocks[l].forward_s;
            b += prof->blocks[l].backward_s;
        }
        ef[s] = f / mc->micro_size;
        eb[s] = b / mc->micro_size;
        out->opt_s = fmax(out->opt_s, real.opt_s[s]);
        if (f + b > 0)
            out->inflation = fmax(out->inflation, (real.fwd_s[s] + real.bwd_s[s]) / (m * (f + b)));
    }
    SC_CHECK_GOTO(
        run_pipeline(mc->tiny_json, part, sched, req.batch, m, ef, eb, eo, o, &sleep, err), done);
    out->sleep_s = sleep.iter_s;
    if (o->rounds > 0)
        SC_CHECK_GOTO(paired_rounds(mc, cl, part, req.schedule, sched, m,
                                    cores >= 1 && cores < MAX_STAGES ? (int)cores : MAX_STAGES, o,
                                    out, err),
                      done);
done:
    plan_result_free(&res);
    plan_cluster_destroy(&cl);
    return rc;
}

/* ---------------------------------------------------------------- summary */

typedef struct {
    double sum, max;
    int n, within;
} err_stats;

static void stats_add(err_stats *st, double e)
{
    e = fabs(e);
    st->sum += e;
    st->max = fmax(st->max, e);
    st->n++;
    st->within += e <= 0.10;
}

static void stats_print(const char *what, const err_stats *st)
{
    if (st->n == 0)
        return;
    printf("  %-44s mean |err| %5.1f%%  max %5.1f%%  within 10%%: %d/%d\n", what,
           100.0 * st->sum / st->n, 100.0 * st->max, st->within, st->n);
}

static sc_status parse_args(int argc, char **argv, bench_opts *o, sc_err *err)
{
    for (int i = 1; i < argc; i += 2) {
        int64_t v;
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (val == NULL)
            return SC_ERRF(err, SC_ERR_INVALID, "'%s': unknown, or missing its value", a);
        if (strcmp(a, "--iters") == 0) {
            SC_CHECK(sc_parse_int64(val, 1, MAX_ITERS, "--iters", &v, err));
            o->iters = (int)v;
        } else if (strcmp(a, "--warmup") == 0) {
            SC_CHECK(sc_parse_int64(val, 0, 100, "--warmup", &v, err));
            o->warmup = (int)v;
        } else if (strcmp(a, "--profile-repeats") == 0) {
            SC_CHECK(sc_parse_int64(val, 1, 1000, "--profile-repeats", &v, err));
            o->profile_repeats = (int)v;
        } else if (strcmp(a, "--transport") == 0) {
            if (strcmp(val, "local") != 0 && strcmp(val, "zmq") != 0)
                return SC_ERRF(err, SC_ERR_INVALID, "--transport '%s': expected local or zmq", val);
            o->transport = val;
        } else if (strcmp(a, "--paired") == 0) {
            SC_CHECK(sc_parse_int64(val, 1, MAX_ROUNDS, "--paired", &v, err));
            o->rounds = (int)v;
        } else if (strcmp(a, "--bandwidth") == 0) {
            SC_CHECK(sc_parse_double(val, 1e3, 1e15, "--bandwidth", &o->bw_bytes_per_s, err));
        } else {
            return SC_ERRF(err, SC_ERR_INVALID, "unknown argument '%s'", a);
        }
    }
    return SC_OK;
}

int main(int argc, char **argv)
{
    bench_opts o = {.iters = 5, .warmup = 1, .profile_repeats = 9, .transport = "local"};
    static const char usage[] = "usage: bench_predict [--iters N] [--warmup N] "
                                "[--profile-repeats N] [--transport local|zmq] "
                                "[--bandwidth BYTES_PER_S] [--paired R]\n"
                                "defaults: 5 timed iterations, 1 warm-up, 9 profile repeats, "
                                "local transport, bandwidth measured, no paired rounds\n";
    sc_err err;
    sc_err_clear(&err);
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (parse_args(argc, argv, &o, &err) != SC_OK) {
        fprintf(stderr, "bench_predict: %s\n%s", err.msg, usage);
        return 2;
    }
    double load[3] = {0};
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf != NULL) {
        if (fscanf(lf, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3)
            load[0] = load[1] = load[2] = 0;
        fclose(lf);
    }
    printf("bench_predict: planner (minmax, simulated schedule) vs runtime (stages as threads, "
           "%s transport), %d timed iterations after %d warm-up, median; %ld cores, load "
           "average at start %.2f\n",
           o.transport, o.iters, o.warmup, sysconf(_SC_NPROCESSORS_ONLN), load[0]);
    printf("err = (predicted - measured) / measured; real = real kernels (p stages share this "
           "host's cores); sleep = tiny model + profiled times slept per stage (schedule and "
           "transport only)\n");

    static const int ps[] = {2, 4}, ms[] = {4, 8};
    static const char *const scheds[] = {"gpipe", "1f1b"};
    row rows[MAX_ROWS];
    int nrows = 0;
    err_stats sleep_all = {0}, real_fit = {0}, real_over = {0}, replay_all = {0}, opt_fit = {0},
              shared_over = {0}, pair_fit = {0}, pair_over = {0};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    for (int mi = 0; mi < N_MODELS; mi++) {
        const model_case *mc = &models[mi];
        plan_profile *prof = NULL;
        int tiny_blocks = model_blocks(mc->tiny_json, &err);
        if (tiny_blocks < 0 ||
            profile_model(mc->real_json, mc->micro_size, o.profile_repeats, &prof, &err) != SC_OK) {
            fprintf(stderr, "bench_predict: %s: %s\n", mc->label, err.msg);
            return 1;
        }
        if (tiny_blocks != prof->n_blocks || prof->n_blocks > MAX_BLOCKS) {
            fprintf(stderr, "bench_predict: %s: the tiny stand-in has %d blocks, the model %d\n",
                    mc->label, tiny_blocks, prof->n_blocks);
            plan_profile_destroy(&prof);
            return 1;
        }
        /* the cut size: the largest activation crossing a cut between blocks */
        double cut_bytes = 0;
        for (int l = 0; l + 1 < prof->n_blocks; l++)
            cut_bytes = fmax(cut_bytes, prof->blocks[l].activation_bytes);
        double bw = o.bw_bytes_per_s;
        if (bw <= 0 && measure_bw(o.transport, (size_t)cut_bytes, &bw, &err) != SC_OK) {
            fprintf(stderr, "bench_predict: measuring the %s transport: %s\n", o.transport,
                    err.msg);
            plan_profile_destroy(&prof);
            return 1;
        }
        printf("\n%s, micro-batch %d samples; profile (forward/backward ms):", mc->label,
               mc->micro_size);
        for (int l = 0; l < prof->n_blocks; l++)
            printf(" %s %.2f/%.2f", prof->blocks[l].name, prof->blocks[l].forward_s * 1e3,
                   prof->blocks[l].backward_s * 1e3);
        printf("\nloopback %s: %.0f-byte message, %.3g bytes/s %s\n", o.transport, cut_bytes, bw,
               o.bw_bytes_per_s > 0 ? "(given)" : "(measured)");
        printf("%-6s %2s %2s %2s %-16s %8s %9s | %8s %7s %7s %6s %6s %7s %7s | %8s %7s\n", "sched",
               "p", "S", "m", "blocks/stage", "pred_ms", "shared_ms", "real_ms", "err", "sh_err",
               "infl", "opt_ms", "+opt", "replay", "sleep_ms", "err");
        for (int si = 0; si < 2; si++)
            for (int pi = 0; pi < 2; pi++)
                for (int k = 0; k < 2; k++) {
                    row *r = &rows[nrows];
                    memset(r, 0, sizeof *r);
                    r->model = mi;
                    if (run_config(mc, prof, bw, ps[pi], scheds[si], ms[k], &o, r, &err) != SC_OK) {
                        fprintf(stderr, "bench_predict: %s %s p=%d m=%d: %s\n", mc->label,
                                scheds[si], ps[pi], ms[k], err.msg);
                        plan_profile_destroy(&prof);
                        return 1;
                    }
                    double er = rel_err(r->pred_s, r->real_s);
                    double erp = rel_err(r->replay_s, r->real_s);
                    double eo = rel_err(r->with_opt_s, r->real_s);
                    double es = rel_err(r->pred_s, r->sleep_s);
                    double esh = rel_err(r->shared_s, r->real_s);
                    printf("%-6s %2d %2d %2d %-16s %8.2f %9.2f | %8.2f %+6.1f%% %+6.1f%% %6.2f "
                           "%6.2f %+6.1f%% %+6.1f%% | %8.2f %+6.1f%%\n",
                           r->sched, r->p, r->stages, r->m, r->part, r->pred_s * 1e3,
                           r->shared_s * 1e3, r->real_s * 1e3, 100 * er, 100 * esh, r->inflation,
                           r->opt_s * 1e3, 100 * eo, 100 * erp, r->sleep_s * 1e3, 100 * es);
                    fflush(stdout);
                    stats_add(&sleep_all, es);
                    stats_add(r->stages <= cores ? &real_fit : &real_over, er);
                    if (r->stages > cores)
                        stats_add(&shared_over, esh);
                    if (r->stages <= cores)
                        stats_add(&opt_fit, eo);
                    stats_add(&replay_all, erp);
                    if (o.rounds > 0) {
                        printf("       paired over %d rounds (median): err %+6.1f%%, sh_err "
                               "%+6.1f%%\n",
                               o.rounds, 100 * r->pair_err, 100 * r->pair_sh_err);
                        stats_add(r->stages <= cores ? &pair_fit : &pair_over,
                                  r->stages <= cores ? r->pair_err : r->pair_sh_err);
                    }
                    nrows++;
                }
        plan_profile_destroy(&prof);
    }
    printf(
        "\nS: stages of the minmax plan. pred_ms: the planner's prediction (a device per stage). "
        "shared_ms: the same plan simulated with its stages sharing this host's cores "
        "(processor sharing; equal to pred_ms when stages <= cores); err and sh_err: their "
        "errors against real_ms. infl: the most a stage's measured forward + backward "
        "exceeds its profiled time (x). opt_ms: the slowest stage's measured optimizer step (the "
        "prediction counts the profile's optimizer_s). +opt: error of the prediction with each "
        "stage's measured optimizer step in place of the profiled one. replay: error of the "
        "simulator fed the real "
        "run's own stage times and optimizer steps (schedule model alone).\nsummary over %d "
        "configurations:\n",
        nrows);
    stats_print("sleep (schedule + transport), all", &sleep_all);
    char what[96];
    snprintf(what, sizeof what, "real kernels, stages <= %ld cores", cores);
    stats_print(what, &real_fit);
    snprintf(what, sizeof what, "  same, measured optimizer step (+opt)");
    stats_print(what, &opt_fit);
    snprintf(what, sizeof what, "real kernels, stages > %ld cores (shared)", cores);
    stats_print(what, &real_over);
    snprintf(what, sizeof what, "  same, prediction sharing %ld cores (sh_err)", cores);
    stats_print(what, &shared_over);
    stats_print("replay (schedule model alone), all", &replay_all);
    if (o.rounds > 0) {
        printf("paired rounds (each run predicted from a profile taken just before it; median "
               "of %d rounds per configuration):\n",
               o.rounds);
        snprintf(what, sizeof what, "real kernels, stages <= %ld cores (err)", cores);
        stats_print(what, &pair_fit);
        snprintf(what, sizeof what, "real kernels, stages > %ld cores (sh_err)", cores);
        stats_print(what, &pair_over);
    }
    return 0;
}
