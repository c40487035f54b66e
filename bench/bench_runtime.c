/*
 * bench_runtime: measured bubble fraction of the runtime's gpipe and 1f1b schedules against the
 * textbook (p-1)/(m+p-1), and of asynchronous pipedream against its steady-state 0, with every
 * stage in this process (one thread each, local transport).
 *
 * Two tables. "schedule": every forward takes F ms and every backward 2F ms of stand-in compute
 * (slept, so a host with fewer cores than stages still shows the schedule and not the core
 * contention) on a tiny GPT whose real compute is negligible; this isolates the schedule.
 * "real": a small GPT with no stand-in time over 2 stages, where unequal stage times, the
 * transport and the optimizer step add to the textbook bubble.
 *
 * Measurement: each stage's rt_runner_step reports its iteration wall time and its busy time
 * (forward + backward + optimizer). Bubble of a stage = 1 - busy / iteration; the table prints
 * the mean over stages, averaged over the timed iterations (after one warm-up iteration).
 * pipedream does not drain between steps: its warm-up (pipeline fill) happens in the untimed first
 * step, so the timed steps are its steady state (the bubble should approach 0) and iteration_ms / m
 * is its steady-state time per minibatch; the final drain (rt_runner_flush) is not timed.
 *
 * A third table, "replicated" (alone with --replicated): two stages, one of them run as r copies
 * with r times the other's stand-in time (forward r F, backward 2 r F per micro-batch on a copy,
 * F and 2 F on the other stage), every copy a thread; the slowest runner's mean iteration
 * against the planner's simulator playing every copy's list (plan_schedule_build_replicated,
 * plan_sim_run; no transfers, no optimizer time), and against the model it replaced (one stage
 * at 1/r of each micro-batch's time).
 *
 * A fourth, "zb1" (alone with --zb1): the zero-bubble schedule against 1f1b with the same
 * stages and micro-batches, twice: as a job with "zb1_memory": "1f1b_peak" runs it ("zb1-peak"),
 * each stage's deferred W capped so that it holds no more bytes than 1f1b's fullest stage
 * (plan_schedule_zb1_caps over the stages' slot bytes, measured as a stage's bytes with two
 * slots less those with one; rt_runner_cfg zb1_defer), and uncapped (ZB-H1, "zb1"), as jobs run
 * it by default where the devices' memory holds it. On the stand-in pipeline (backward stand-in
 * split half B, half W, as the runner splits extra_backward_s; the reference is ZB-H1's
 * (p-1)(F+B-W) idle time per stage, (p-1)/(3m+p-1) here, and the planner's simulator playing the
 * same lists) and on the real GPT over 2 stages (real B and W kernels: the W share of the backward
 * is measured), with the most micro-batches each stage held at once (activation slots in use) and
 * the peak bytes over stages (held x slot bytes). Then the simulator alone: what the cap costs
 * on p equal stages whose last stage's slot is larger than the others'.
 *
 * Usage: bench_runtime [--iters N] [--forward-ms F] [--replicated] [--zb1]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/planner/plan_schedule.h"
#include "coordinator/planner/plan_sim.h"
#include "kernels/model.h"
#include "kernels/stage.h"
#include "worker/runtime/runner.h"

#define TINY_GPT                                                                                   \
    "{\"kind\": \"gpt\", \"vocab\": 256, \"seq_len\": 4, \"layers\": 6, \"width\": 8, "            \
    "\"heads\": 1}"
#define REAL_GPT                                                                                   \
    "{\"kind\": \"gpt\", \"vocab\": 256, \"seq_len\": 32, \"layers\": 4, \"width\": 64, "          \
    "\"heads\": 4}"
#define TINY_BLOCKS 8 /* embed, 6 layers, head */
#define REAL_BLOCKS 6
#define MAX_STAGES 8

typedef struct {
    rt_runner *r;
    int iters;
    double bubble_sum, iter_sum, wgrad_sum, backward_sum;
    int peak; /* most micro-batches held at once in a timed step */
    sc_status rc;
    sc_err err;
} job;

static void *run_stage(void *arg)
{
    job *j = arg;
    sc_err_clear(&j->err);
    rt_report rep;
    j->rc = rt_runner_step(j->r, 0, &rep, &j->err); /* warm-up */
    for (int i = 0; i < j->iters && j->rc == SC_OK; i++) {
        j->rc = rt_runner_step(j->r, (uint64_t)i + 1, &rep, &j->err);
        j->bubble_sum += 1.0 - rep.busy_s / rep.iteration_s;
        j->iter_sum += rep.iteration_s;
        j->wgrad_sum += rep.wgrad_s;
        j->backward_sum += rep.backward_s;
        j->peak = rep.max_inflight > j->peak ? rep.max_inflight : j->peak;
    }
    if (j->rc == SC_OK)
        j->rc = rt_runner_flush(j->r, NULL, &j->err); /* pipedream's drain; a no-op otherwise */
    return NULL;
}

/* What measure() saw besides the bubble: the most micro-batches any stage held at once, and
 * the W share of the stages' backward time (zb1; 0 otherwise). */
typedef struct {
    int peak;
    double wgrad_share;
    int stage_peak[MAX_STAGES]; /* the most each stage held */
} extra_out;

/* Runs one configuration; returns 0 and the mean bubble and iteration time (and, with x, the
 * peak and W share), or 1. */
static int measure_x(const char *model, int nblocks, const char *schedule, int p, int m, int batch,
                     double f_s, const int *w_defer, int iters, double *bubble, double *iter_s,
                     extra_out *x)
{
    rt_runner *r[MAX_STAGES] = {0};
    job jobs[MAX_STAGES];
    pthread_t th[MAX_STAGES];
    sc_err err;
    sc_err_clear(&err);
    int rc = 0;
    for (int s = 0; s < p && rc == 0; s++) {
        rt_runner_cfg c = rt_runner_cfg_default();
        c.model_json = model;
        c.n_stages = p;
        c.stage = s;
        c.first_block = s * nblocks / p;
        c.last_block = (s + 1) * nblocks / p - 1;
        c.schedule = schedule;
        c.batch_size = batch;
        c.microbatches = m;
        c.transport = "local";
        c.bind_endpoint = "local://";
        c.extra_forward_s = f_s / (batch / m); /* per sample: a micro-batch takes f_s */
        c.extra_backward_s = 2.0 * c.extra_forward_s;
        c.zb1_defer = w_defer; /* zb1: the memory budget's caps (NULL: ZB-H1's deferral) */
        if (rt_runner_new(&r[s], &c, &err) != SC_OK)
            rc = 1;
    }
    for (int s = 0; s < p && rc == 0; s++)
        if (rt_runner_connect(r[s], s > 0 ? rt_runner_endpoint(r[s - 1]) : NULL,
                              s < p - 1 ? rt_runner_endpoint(r[s + 1]) : NULL, &err) != SC_OK)
            rc = 1;
    if (rc != 0) {
        fprintf(stderr, "bench_runtime: %s\n", err.msg);
    } else {
        for (int s = 0; s < p; s++) {
            jobs[s] = (job){.r = r[s], .iters = iters};
            pthread_create(&th[s], NULL, run_stage, &jobs[s]);
        }
        *bubble = 0.0;
        *iter_s = 0.0;
        double w = 0, b = 0;
        for (int s = 0; s < p; s++) {
            pthread_join(th[s], NULL);
            w += jobs[s].wgrad_sum;
            b += jobs[s].backward_sum;
            if (x != NULL && jobs[s].peak > x->peak)
                x->peak = jobs[s].peak;
            if (x != NULL)
                x->stage_peak[s] = jobs[s].peak;
            if (jobs[s].rc != SC_OK) {
                fprintf(stderr, "bench_runtime: stage %d: %s\n", s, jobs[s].err.msg);
                rc = 1;
            }
            *bubble += jobs[s].bubble_sum / iters / p;
            if (jobs[s].iter_sum / iters > *iter_s)
                *iter_s = jobs[s].iter_sum / iters;
        }
        if (x != NULL)
            x->wgrad_share = b > 0 ? w / b : 0;
    }
    for (int s = 0; s < p; s++)
        rt_runner_destroy(&r[s]);
    return rc;
}

static int measure(const char *model, int nblocks, const char *schedule, int p, int m, int batch,
                   double f_s, int iters, double *bubble, double *iter_s)
{
    return measure_x(model, nblocks, schedule, p, m, batch, f_s, NULL, iters, bubble, iter_s, NULL);
}

/* The simulator's bubble (mean over stages of 1 - busy / iteration) for p equal stand-in stages:
 * forward f_s, backward 2 f_s, half of it W under zb1 (with w_defer: its capped deferral); no
 * transfers or optimizer time. */
static double predict_bubble(plan_sched_kind k, int p, int m, double f_s, const int *w_defer)
{
    plan_schedule *s = NULL;
    plan_sim_result res;
    sc_err err;
    sc_err_clear(&err);
    plan_sim_stage st[MAX_STAGES];
    for (int i = 0; i < p; i++)
        st[i] = (plan_sim_stage){.fwd_s = f_s, .bwd_s = 2 * f_s, .wgrad_s = f_s};
    double b = -1;
    sc_status rc = k == PLAN_SCHED_ZB1 ? plan_schedule_build_zb1(&s, p, m, NULL, w_defer, &err)
                                       : plan_schedule_build(&s, k, p, m, 0, &err);
    if (rc == SC_OK && plan_sim_run(s, st, m, 1.0, 0, &res, &err) == SC_OK) {
        b = 1.0 - 3 * f_s * m / res.iteration_s;
        plan_sim_result_free(&res);
    }
    plan_schedule_destroy(&s);
    return b;
}

/* Bytes of a stage of blocks [a, b] of `model` (a model object without its format header) with
 * `slots` slots of `samples` samples, the slots keeping W stashes (zb1) or not; 0 on error. */
static size_t stage_bytes(const char *model, int a, int b, int slots, int samples, bool split)
{
    kn_model *m = NULL;
    kn_stage *st = NULL;
    sc_err err;
    sc_err_clear(&err);
    size_t bytes = 0;
    char text[512]; /* a model document: the model with its format header */
    snprintf(text, sizeof text, "{\"format\": \"stagecraft-model\", \"version\": 1, %s", model + 1);
    if (kn_model_parse(&m, "bench", text, strlen(text), &err) != SC_OK)
        fprintf(stderr, "bench_runtime: %s\n", err.msg);
    else {
        kn_stage_cfg cfg = kn_stage_cfg_default(a, b, (kn_device){KN_DEV_CPU, 0}, samples);
        cfg.slots = slots;
        cfg.split_backward = split;
        if (kn_stage_new_cfg(&st, m, &cfg, &err) == SC_OK)
            bytes = kn_stage_memory_bytes(st);
    }
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
    return bytes;
}

/* The bytes of one activation slot (a micro-batch held) of each of p even stages of `model`: a
 * stage's bytes with two slots less those with one. */
static void slot_bytes(const char *model, int nblocks, int p, int samples, bool split, double *out)
{
    for (int s = 0; s < p; s++) {
        int a = s * nblocks / p, b = (s + 1) * nblocks / p - 1;
        out[s] = (double)stage_bytes(model, a, b, 2, samples, split) -
                 (double)stage_bytes(model, a, b, 1, samples, split);
    }
}

/* The schedules of the zb1 tables: 1f1b, zb1 as a job with "zb1_memory": "1f1b_peak" runs it
 * (its deferral capped to 1f1b's peak bytes, plan_schedule_zb1_caps over the stages' measured
 * slot bytes) and zb1 as jobs run it by default where memory allows (ZB-H1, uncapped). */
enum { ZB_1F1B, ZB_CAPPED, ZB_H1, ZB_ROWS };
static const char *const zb_names[ZB_ROWS] = {"1f1b", "zb1-peak", "zb1"};

/* One row of a zb1 table: runs it, prints the held counts per stage and the peak bytes over
 * stages (held x slot), and returns 0 with that peak in *peak, or 1. */
static int zb1_row(const char *model, int nblocks, int row, int p, int m, int batch, double f_ms,
                   int iters, const double *slot, double *bubble, double *it, double *peak,
                   extra_out *x)
{
    int caps[MAX_STAGES];
    plan_schedule_zb1_caps(p, NULL, m, slot, caps);
    if (measure_x(model, nblocks, row == ZB_1F1B ? "1f1b" : "zb1", p, m, batch, f_ms / 1000.0,
                  row == ZB_CAPPED ? caps : NULL, iters, bubble, it, x) != 0)
        return 1;
    *peak = 0;
    char held[64] = "";
    for (int s = 0, n = 0; s < p; s++) {
        double b = x->stage_peak[s] * slot[s];
        *peak = b > *peak ? b : *peak;
        n += snprintf(held + n, sizeof held - (size_t)n, "%s%d", s ? "," : "", x->stage_peak[s]);
    }
    printf("%-6s %2d %2d %9.3f", zb_names[row], p, m, *bubble);
    if (f_ms > 0) { /* the stand-in: ZB-H1's reference and the simulator */
        double ref = row == ZB_1F1B ? (double)(p - 1) / (m + p - 1)
                     : row == ZB_H1 ? (double)(p - 1) / (3 * m + p - 1)
                                    : -1;
        double sim = predict_bubble(row == ZB_1F1B ? PLAN_SCHED_1F1B : PLAN_SCHED_ZB1, p, m, f_ms,
                                    row == ZB_CAPPED ? caps : NULL);
        if (ref >= 0)
            printf(" %9.3f", ref);
        else
            printf(" %9s", "-");
        printf(" %9.3f", sim);
    }
    printf(" %12.1f %9s %10.1f", *it * 1e3, held, *peak / 1e3);
    return 0;
}

/* The simulator on p equal stages (F = B = W = 1, no transfers), every slot 1 byte but the last
 * stage's `big`: iteration and bubble of 1f1b, ZB-H1 and capped zb1, and their peak bytes. */
static void zb1_cap_cost(void)
{
    printf("\nzb1's cap, simulated: p equal stages (F = B = W = 1, no transfers), the last "
           "stage's slot `last` times the others'; peak = most bytes any stage holds / 1f1b's\n");
    printf("%2s %3s %5s %-12s %9s %9s %9s %9s %9s %9s %8s %8s\n", "p", "m", "last", "caps",
           "iter_1f1b", "iter_h1", "iter_zb1", "bub_1f1b", "bub_h1", "bub_zb1", "peak_h1",
           "peak_zb1");
    const int ps[] = {2, 4, 4, 8}, ms[] = {8, 8, 32, 32};
    const double bigs[] = {1, 1.25, 1.5, 2, 4};
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 5; k++) {
            int p = ps[c], m = ms[c], caps[MAX_STAGES], full[MAX_STAGES];
            double slot[MAX_STAGES], iter[3], bub[3], peak[3];
            for (int s = 0; s < p; s++)
                slot[s] = s == p - 1 ? bigs[k] : 1;
            plan_schedule_zb1_caps(p, NULL, m, slot, caps);
            for (int s = 0; s < p; s++)
                full[s] = m; /* at least ZB-H1's */
            for (int r = 0; r < 3; r++) {
                plan_schedule *sch = NULL;
                plan_sim_result res;
                sc_err err;
                sc_err_clear(&err);
                plan_sim_stage st[MAX_STAGES];
                for (int i = 0; i < p; i++)
                    st[i] = (plan_sim_stage){.fwd_s = 1, .bwd_s = 2, .wgrad_s = 1};
                sc_status rc =
                    r == 0 ? plan_schedule_build(&sch, PLAN_SCHED_1F1B, p, m, 0, &err)
                           : plan_schedule_build_zb1(&sch, p, m, NULL, r == 1 ? full : caps, &err);
                iter[r] = bub[r] = peak[r] = -1;
                if (rc == SC_OK && plan_sim_run(sch, st, m, 1.0, 0, &res, &err) == SC_OK) {
                    iter[r] = res.iteration_s;
                    bub[r] = res.bubble_fraction;
                    peak[r] = 0;
                    for (int i = 0; i < p; i++)
                        peak[r] = res.peak_inflight[i] * slot[i] > peak[r]
                                      ? res.peak_inflight[i] * slot[i]
                                      : peak[r];
                    plan_sim_result_free(&res);
                }
                plan_schedule_destroy(&sch);
            }
            char cs[64] = "";
            for (int s = 0, n = 0; s < p; s++)
                n += snprintf(cs + n, sizeof cs - (size_t)n, "%s%d", s ? "," : "", caps[s]);
            printf("%2d %3d %5.2f %-12s %9.0f %9.0f %9.0f %9.4f %9.4f %9.4f %8.2f %8.2f\n", p, m,
                   bigs[k], cs, iter[0], iter[1], iter[2], bub[0], bub[1], bub[2],
                   peak[1] / peak[0], peak[2] / peak[0]);
        }
}

static int zb1_table(double f_ms, int iters)
{
    double slot[MAX_STAGES];
    printf(
        "zb1 table (stand-in): tiny GPT, forward %.1f ms, backward %.1f ms per micro-batch (zb1: "
        "B and W %.1f ms each); micro-batches of 4 samples; held = most micro-batches each "
        "stage held (F to B, zb1 F to W); peak = the most bytes any stage held (held x its "
        "slot's bytes); zb1-peak = capped to 1f1b's peak bytes (zb1_memory 1f1b_peak), zb1 = "
        "ZB-H1, as jobs run it where memory allows\n",
        f_ms, 2 * f_ms, f_ms);
    printf("%-6s %2s %2s %9s %9s %9s %12s %9s %10s %8s\n", "sched", "p", "m", "measured",
           "reference", "simulated", "iteration_ms", "held", "peak_KB", "peak/1f1b");
    const int ps[] = {2, 4}, ms[] = {4, 8, 16};
    for (int pi = 0; pi < 2; pi++) {
        slot_bytes(TINY_GPT, TINY_BLOCKS, ps[pi], 4, true, slot);
        for (int mi = 0; mi < 3; mi++) {
            double top = 0;
            for (int k = 0; k < ZB_ROWS; k++) {
                int p = ps[pi], m = ms[mi];
                double bubble, it, peak;
                extra_out x = {0};
                if (zb1_row(TINY_GPT, TINY_BLOCKS, k, p, m, 4 * m, f_ms, iters, slot, &bubble, &it,
                            &peak, &x) != 0)
                    return 1;
                top = k == ZB_1F1B ? peak : top;
                printf(" %8.2f\n", top > 0 ? peak / top : 0.0);
                fflush(stdout);
            }
        }
    }
    printf("slot bytes per stage (p = 4):");
    slot_bytes(TINY_GPT, TINY_BLOCKS, 4, 4, true, slot);
    for (int s = 0; s < 4; s++)
        printf(" %.0f", slot[s]);
    printf("\n\nzb1 table (real): GPT L4 C64 T32, batch 16, 2 stages, real compute only; W share = "
           "the measured W time over the backward's (B + W); peak in KB as above\n");
    printf("%-6s %2s %2s %9s %12s %9s %10s %8s %8s\n", "sched", "p", "m", "measured",
           "iteration_ms", "held", "peak_KB", "peak/1f1b", "W_share");
    for (int mi = 0; mi < 3; mi++) {
        int m = (int[]){2, 4, 8}[mi];
        double top = 0;
        slot_bytes(REAL_GPT, REAL_BLOCKS, 2, 16 / m, true, slot);
        for (int k = 0; k < ZB_ROWS; k++) {
            double bubble, it, peak;
            extra_out x = {0};
            if (zb1_row(REAL_GPT, REAL_BLOCKS, k, 2, m, 16, 0.0, iters, slot, &bubble, &it, &peak,
                        &x) != 0)
                return 1;
            top = k == ZB_1F1B ? peak : top;
            printf(" %8.2f %8.3f\n", top > 0 ? peak / top : 0.0, x.wgrad_share);
            fflush(stdout);
        }
        printf("slot bytes per stage (m = %d): %.0f %.0f\n", m, slot[0], slot[1]);
    }
    zb1_cap_cost();
    return 0;
}

/* Two stages of reps[0] and reps[1] copies (the tiny GPT's blocks 0-3 and 4-7), each copy a
 * runner on a thread of its own over the local transport, a copy of stage s taking reps[s] f_s
 * forward and twice that backward per micro-batch of stand-in time. Returns 0 and the slowest
 * runner's mean iteration, or 1. */
static int measure_replicated(const char *schedule, const int *reps, int m, double f_s, int iters,
                              double *iter_s)
{
    enum { MAX_RUNNERS = 16, PER = 2 }; /* PER samples a micro-batch */
    rt_runner *r[MAX_RUNNERS] = {0};
    job jobs[MAX_RUNNERS];
    pthread_t th[MAX_RUNNERS];
    int base[2], n = 0, rc = 0;
    sc_err err;
    sc_err_clear(&err);
    for (int s = 0; s < 2 && rc == 0; s++) {
        base[s] = n;
        for (int k = 0; k < reps[s] && rc == 0; k++, n++) {
            rt_runner_cfg c = rt_runner_cfg_default();
            c.model_json = TINY_GPT;
            c.n_stages = 2;
            c.stage = s;
            c.first_block = s * TINY_BLOCKS / 2;
            c.last_block = (s + 1) * TINY_BLOCKS / 2 - 1;
            c.schedule = schedule;
            c.batch_size = m * PER;
            c.microbatches = m;
            c.transport = "local";
            c.bind_endpoint = "local://";
            c.extra_forward_s = f_s * reps[s] / PER;
            c.extra_backward_s = 2.0 * c.extra_forward_s;
            c.replicas = reps[s];
            c.replica = k;
            c.prev_replicas = s > 0 ? reps[0] : 1;
            c.next_replicas = s == 0 ? reps[1] : 1;
            c.stage_replicas = reps;
            if (rt_runner_new(&r[n], &c, &err) != SC_OK)
                rc = 1;
        }
    }
    for (int i = 0; i < n && rc == 0; i++) {
        int s = i < base[1] ? 0 : 1, k = i - base[s];
        const char *prev[MAX_RUNNERS], *next[MAX_RUNNERS], *peers[MAX_RUNNERS];
        int np = s > 0 ? reps[0] : 0, nn = s == 0 ? reps[1] : 0;
        for (int j = 0; j < np; j++)
            prev[j] = rt_runner_endpoint(r[base[0] + j]);
        for (int j = 0; j < nn; j++)
            next[j] = rt_runner_endpoint(r[base[1] + j]);
        for (int j = 0; j < reps[s]; j++)
            peers[j] = j == k ? NULL : rt_runner_endpoint(r[base[s] + j]);
        if (rt_runner_connect_group(r[i], prev, np, next, nn, peers, reps[s], &err) != SC_OK)
            rc = 1;
    }
    if (rc != 0)
        fprintf(stderr, "bench_runtime: %s\n", err.msg);
    for (int i = 0; i < n && rc == 0; i++) {
        jobs[i] = (job){.r = r[i], .iters = iters};
        pthread_create(&th[i], NULL, run_stage, &jobs[i]);
    }
    *iter_s = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        pthread_join(th[i], NULL);
        if (jobs[i].rc != SC_OK) {
            fprintf(stderr, "bench_runtime: runner %d: %s\n", i, jobs[i].err.msg);
            rc = 1;
        }
        if (jobs[i].iter_sum / iters > *iter_s)
            *iter_s = jobs[i].iter_sum / iters;
    }
    for (int i = 0; i < n; i++)
        rt_runner_destroy(&r[i]);
    return rc;
}

/* The planner's prediction for measure_replicated's pipeline: every copy played (copies 1), or
 * the replaced model, one stage at 1/r of the time on the unreplicated lists (copies 0). */
static double predict_replicated(plan_sched_kind k, const int *reps, int m, double f_s, int copies)
{
    plan_schedule *s = NULL;
    plan_sim_result res;
    sc_err err;
    sc_err_clear(&err);
    plan_sim_stage st[2];
    for (int i = 0; i < 2; i++) {
        double scale = copies ? reps[i] : 1;
        st[i] = (plan_sim_stage){.fwd_s = f_s * scale, .bwd_s = 2 * f_s * scale};
    }
    double t = -1;
    if (plan_schedule_build_replicated(&s, k, 2, m, 0, copies ? reps : NULL, &err) == SC_OK &&
        plan_sim_run(s, st, m, 1.0, 0, &res, &err) == SC_OK) {
        t = res.iteration_s;
        plan_sim_result_free(&res);
    }
    plan_schedule_destroy(&s);
    return t;
}

static int replicated_table(double f_ms, int iters)
{
    printf("\nreplicated table: tiny GPT, 2 stages, one as r copies with r times the other's "
           "stand-in compute (forward %.1f ms x r, backward twice that), every copy a thread\n",
           f_ms);
    printf("%-6s %-7s %3s %12s %12s %7s %14s\n", "sched", "copies", "m", "measured_ms",
           "predicted_ms", "diff", "old_model_ms");
    static const int cfg[][2] = {{2, 1}, {4, 1}, {1, 2}, {1, 4}};
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 2; k++)
            for (int x = 1; x <= 4; x *= 4) {
                int r = cfg[c][0] > cfg[c][1] ? cfg[c][0] : cfg[c][1], m = x * r;
                plan_sched_kind kind = k ? PLAN_SCHED_1F1B : PLAN_SCHED_GPIPE;
                double it;
                if (measure_replicated(plan_sched_name(kind), cfg[c], m, f_ms / 1000.0, iters,
                                       &it) != 0)
                    return 1;
                double pred = predict_replicated(kind, cfg[c], m, f_ms / 1000.0, 1);
                double old = predict_replicated(kind, cfg[c], m, f_ms / 1000.0, 0);
                printf("%-6s [%d, %d] %3d %12.1f %12.1f %6.1f%% %14.1f\n", plan_sched_name(kind),
                       cfg[c][0], cfg[c][1], m, it * 1e3, pred * 1e3, 100 * (pred / it - 1),
                       old * 1e3);
                fflush(stdout);
            }
    return 0;
}

int main(int argc, char **argv)
{
    int64_t iters = 5;
    double f_ms = 4.0;
    int only_replicated = 0, only_zb1 = 0;
    sc_err err;
    sc_err_clear(&err);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            if (sc_parse_int64(argv[++i], 1, 1000, "--iters", &iters, &err) != SC_OK)
                goto usage;
        } else if (strcmp(argv[i], "--replicated") == 0) {
            only_replicated = 1;
        } else if (strcmp(argv[i], "--zb1") == 0) {
            only_zb1 = 1;
        } else if (strcmp(argv[i], "--forward-ms") == 0 && i + 1 < argc) {
            if (sc_parse_double(argv[++i], 1.0, 1000.0, "--forward-ms", &f_ms, &err) != SC_OK)
                goto usage;
        } else {
            goto usage;
        }
    }
    if (only_replicated)
        return replicated_table(f_ms, (int)iters);
    if (only_zb1)
        return zb1_table(f_ms, (int)iters);
    printf("bubble = mean over stages of 1 - busy/iteration (busy = forward + backward + "
           "optimizer), %d timed iterations after 1 warm-up; stages are threads of one process "
           "over the local transport\n\n",
           (int)iters);
    printf("schedule table: tiny GPT, stand-in compute forward %.1f ms, backward %.1f ms per "
           "micro-batch\n",
           f_ms, 2 * f_ms);
    printf("(micro-batches of 4 samples; stand-in time scales with samples, so the halves of the "
           "sliced warm-up (k = p-1) take half; pipedream adds an optimizer step per "
           "micro-batch and, never draining, has the steady-state bubble 0 as its reference)\n");
    printf("%-9s %2s %2s %10s %10s %8s %12s\n", "sched", "p", "m", "measured", "(p-1)/(m+p-1)",
           "diff", "iteration_ms");
    const char *scheds[] = {"gpipe", "1f1b", "sliced", "pipedream"};
    const int ps[] = {2, 4}, ms[] = {1, 2, 4, 8};
    for (int si = 0; si < 4; si++)
        for (int pi = 0; pi < 2; pi++)
            for (int mi = 0; mi < 4; mi++) {
                int p = ps[pi], m = ms[mi];
                double bubble, it;
                if (measure(TINY_GPT, TINY_BLOCKS, scheds[si], p, m, 4 * m, f_ms / 1000.0,
                            (int)iters, &bubble, &it) != 0)
                    return 1;
                /* pipedream: steady state, no fill or drain inside the timed steps */
                double theory = si == 3 ? 0.0 : (double)(p - 1) / (m + p - 1);
                printf("%-9s %2d %2d %10.3f %13.3f %8.3f %12.1f\n", scheds[si], p, m, bubble,
                       theory, bubble - theory, it * 1e3);
            }
    printf("\nreal table: GPT L4 C64 T32, batch 16, 2 stages, real compute only (unequal stage "
           "times: embedding+layers vs layers+head)\n");
    printf("%-9s %2s %2s %10s %10s %8s %12s\n", "sched", "p", "m", "measured", "(p-1)/(m+p-1)",
           "diff", "iteration_ms");
    for (int si = 0; si < 2; si++)
        for (int mi = 0; mi < 4; mi++) {
            int m = ms[mi];
            double bubble, it;
            if (measure(REAL_GPT, REAL_BLOCKS, scheds[si], 2, m, 16, 0.0, (int)iters, &bubble,
                        &it) != 0)
                return 1;
            double theory = 1.0 / (m + 1);
            printf("%-9s %2d %2d %10.3f %13.3f %8.3f %12.1f\n", scheds[si], 2, m, bubble, theory,
                   bubble - theory, it * 1e3);
        }
    if (replicated_table(f_ms, (int)iters) != 0)
        return 1;
    printf("\n");
    return zb1_table(f_ms, (int)iters);
usage:
    fprintf(stderr,
            "%s%susage: bench_runtime [--iters N] [--forward-ms F] [--replicated] [--zb1]\n",
            err.msg, err.msg[0] ? "\n" : "");
    return 2;
}
