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
 * Usage: bench_runtime [--iters N] [--forward-ms F]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
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
    double bubble_sum, iter_sum;
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
    }
    if (j->rc == SC_OK)
        j->rc = rt_runner_flush(j->r, NULL, &j->err); /* pipedream's drain; a no-op otherwise */
    return NULL;
}

/* Runs one configuration; returns 0 and the mean bubble and iteration time, or 1. */
static int measure(const char *model, int nblocks, const char *schedule, int p, int m, int batch,
                   double f_s, int iters, double *bubble, double *iter_s)
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
        for (int s = 0; s < p; s++) {
            pthread_join(th[s], NULL);
            if (jobs[s].rc != SC_OK) {
                fprintf(stderr, "bench_runtime: stage %d: %s\n", s, jobs[s].err.msg);
                rc = 1;
            }
            *bubble += jobs[s].bubble_sum / iters / p;
            if (jobs[s].iter_sum / iters > *iter_s)
                *iter_s = jobs[s].iter_sum / iters;
        }
    }
    for (int s = 0; s < p; s++)
        rt_runner_destroy(&r[s]);
    return rc;
}

int main(int argc, char **argv)
{
    int64_t iters = 5;
    double f_ms = 4.0;
    sc_err err;
    sc_err_clear(&err);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            if (sc_parse_int64(argv[++i], 1, 1000, "--iters", &iters, &err) != SC_OK)
                goto usage;
        } else if (strcmp(argv[i], "--forward-ms") == 0 && i + 1 < argc) {
            if (sc_parse_double(argv[++i], 1.0, 1000.0, "--forward-ms", &f_ms, &err) != SC_OK)
                goto usage;
        } else {
            goto usage;
        }
    }
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
    return 0;
usage:
    fprintf(stderr, "%s%susage: bench_runtime [--iters N] [--forward-ms F]\n", err.msg,
            err.msg[0] ? "\n" : "");
    return 2;
}
