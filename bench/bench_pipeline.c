/*
 * bench_pipeline: the threads of bench_pipeline.h.
 */
#include "bench/bench_pipeline.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "worker/runtime/runner.h"

typedef struct run_ctx {
    rt_runner *r[BENCH_PIPE_MAX_STAGES];
    int p, warmup, iters;
    pthread_barrier_t bar;
    atomic_int failed;
    double iter_s[BENCH_PIPE_MAX_STAGES][BENCH_PIPE_MAX_ITERS];
    double opt_s[BENCH_PIPE_MAX_STAGES][BENCH_PIPE_MAX_ITERS];
    double fwd_s[BENCH_PIPE_MAX_STAGES][BENCH_PIPE_MAX_ITERS];
    double bwd_s[BENCH_PIPE_MAX_STAGES][BENCH_PIPE_MAX_ITERS];
    double loss;
    sc_status rc[BENCH_PIPE_MAX_STAGES];
    sc_err err[BENCH_PIPE_MAX_STAGES];
} run_ctx;

typedef struct {
    run_ctx *ctx;
    int s;
} stage_arg;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void *stage_main(void *arg)
{
    stage_arg *a = arg;
    run_ctx *x = a->ctx;
    int s = a->s;
    /* The default 50 us timer slack would lengthen every slept stand-in forward and backward;
     * 1 ns keeps runs with stand-in compute about the runtime, not about the sleep. Best
     * effort. */
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    for (int i = 0; i < x->warmup + x->iters; i++) {
        /* every stage takes part in every barrier, even after a failure, so none waits forever */
        pthread_barrier_wait(&x->bar);
        if (atomic_load(&x->failed))
            continue;
        rt_report rep;
        sc_status rc = rt_runner_step(x->r[s], (uint64_t)i, &rep, &x->err[s]);
        if (rc != SC_OK) {
            x->rc[s] = rc;
            atomic_store(&x->failed, 1);
            for (int k = 0; k < x->p; k++)
                rt_runner_abort(x->r[k]);
            continue;
        }
        if (rep.has_loss)
            x->loss = rep.loss;
        if (i >= x->warmup) {
            x->iter_s[s][i - x->warmup] = rep.iteration_s;
            x->opt_s[s][i - x->warmup] = rep.optimizer_s;
            x->fwd_s[s][i - x->warmup] = rep.forward_s;
            x->bwd_s[s][i - x->warmup] = rep.backward_s;
        }
    }
    return NULL;
}

/* Starts one thread per stage and waits for them; SC_OK when every step of every stage ran. */
static sc_status run_threads(run_ctx *x, sc_err *err)
{
    int p = x->p;
    if (pthread_barrier_init(&x->bar, NULL, (unsigned)p) != 0)
        return SC_ERRF(err, SC_ERR_INTERNAL, "pthread_barrier_init failed");
    pthread_t th[BENCH_PIPE_MAX_STAGES];
    stage_arg args[BENCH_PIPE_MAX_STAGES];
    int started = 0;
    sc_status rc = SC_OK;
    for (int s = 0; s < p; s++) {
        args[s] = (stage_arg){.ctx = x, .s = s};
        if (pthread_create(&th[s], NULL, stage_main, &args[s]) != 0)
            break;
        started++;
    }
    if (started < p) {
        /* the started threads would wait at the barrier for the missing ones: let them go */
        atomic_store(&x->failed, 1);
        for (int k = started; k < p; k++)
            pthread_barrier_wait(&x->bar);
        rc = SC_ERRF(err, SC_ERR_INTERNAL, "pthread_create failed");
    }
    for (int s = 0; s < started; s++)
        pthread_join(th[s], NULL);
    pthread_barrier_destroy(&x->bar);
    if (rc != SC_OK || !atomic_load(&x->failed))
        return rc;
    /* the stage that failed first is the one whose error is not a cancellation */
    int pick = -1;
    for (int s = 0; s < p; s++)
        if (x->rc[s] != SC_OK && (pick < 0 || x->rc[pick] == SC_ERR_CANCELLED))
            pick = s;
    return SC_ERRF(err, pick >= 0 ? x->rc[pick] : SC_ERR_INTERNAL, "stage %d: %s", pick,
                   pick >= 0 ? x->err[pick].msg : "failed");
}

sc_status bench_pipe_run(const bench_pipe_spec *sp, bench_pipe_result *res, sc_err *err)
{
    int p = sp->n_stages;
    if (p < 1 || p > BENCH_PIPE_MAX_STAGES || sp->iters < 1 || sp->iters > BENCH_PIPE_MAX_ITERS ||
        sp->warmup < 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "pipeline run: %d stages (1..%d), %d iterations (1..%d), %d warm-up (>= 0)",
                       p, BENCH_PIPE_MAX_STAGES, sp->iters, BENCH_PIPE_MAX_ITERS, sp->warmup);
    run_ctx *x = calloc(1, sizeof *x);
    SC_ALLOC_CHECK(x, err);
    x->p = p;
    x->warmup = sp->warmup;
    x->iters = sp->iters;
    x->loss = NAN;
    atomic_init(&x->failed, 0);
    sc_status rc = SC_OK;
    int made = 0;
    bool local = sp->transport == NULL || strcmp(sp->transport, "local") == 0;
    for (int s = 0; s < p; s++) {
        rt_runner_cfg c = rt_runner_cfg_default();
        c.model_json = sp->model_json;
        c.n_stages = p;
        c.stage = s;
        c.first_block = sp->first[s];
        c.last_block = sp->last[s];
        c.schedule = sp->schedule;
        c.batch_size = sp->batch;
        c.microbatches = sp->microbatches;
        c.device = sp->device != NULL ? sp->device : "cpu";
        c.transport = local ? "local" : sp->transport;
        c.bind_endpoint = local ? "local://" : "tcp://127.0.0.1:0";
        c.timeout_ms = 60000;
        c.extra_forward_s = sp->extra_f_s ? sp->extra_f_s[s] : 0.0;
        c.extra_backward_s = sp->extra_b_s ? sp->extra_b_s[s] : 0.0;
        c.extra_optimizer_s = sp->extra_o_s ? sp->extra_o_s[s] : 0.0;
        SC_CHECK_GOTO(rt_runner_new(&x->r[s], &c, err), done);
        made++;
    }
    for (int s = 0; s < p; s++)
        SC_CHECK_GOTO(rt_runner_connect(x->r[s], s > 0 ? rt_runner_endpoint(x->r[s - 1]) : NULL,
                                        s < p - 1 ? rt_runner_endpoint(x->r[s + 1]) : NULL, err),
                      done);
    SC_CHECK_GOTO(run_threads(x, err), done);
    double it[BENCH_PIPE_MAX_ITERS];
    for (int i = 0; i < sp->iters; i++) {
        it[i] = 0.0;
        for (int s = 0; s < p; s++)
            it[i] = fmax(it[i], x->iter_s[s][i]);
    }
    res->iter_s = bench_median(it, sp->iters);
    for (int s = 0; s < p; s++) {
        res->fwd_s[s] = bench_median(x->fwd_s[s], sp->iters);
        res->bwd_s[s] = bench_median(x->bwd_s[s], sp->iters);
        res->opt_s[s] = bench_median(x->opt_s[s], sp->iters);
    }
    res->loss = x->loss;
done:
    for (int s = 0; s < made; s++)
        rt_runner_destroy(&x->r[s]);
    free(x);
    return rc;
}
