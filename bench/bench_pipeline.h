/*
 * bench_pipeline: runs a pipeline of stage runners in this process, one thread per stage, for
 * the benchmarks that time the runtime (bench_predict, bench_stages).
 *
 * Every stage runs on the same device over the chosen in-host transport. A barrier starts every
 * iteration on all stages at once, as the planner's simulator starts from an empty pipeline; an
 * iteration's time is the longest stage's rt_runner_step wall time, and each figure is the
 * median over the timed iterations, after the warm-up ones. A stage that fails aborts the
 * others, so nothing waits forever.
 * Not here: deciding what to run (partition, schedule), asserting anything: benchmarks print.
 */
#ifndef BENCH_PIPELINE_H
#define BENCH_PIPELINE_H

#include "common/sc_status.h"

#define BENCH_PIPE_MAX_STAGES 8
#define BENCH_PIPE_MAX_ITERS 200

typedef struct {
    const char *model_json;
    int n_stages;
    const int *first, *last; /* (n_stages) inclusive block ranges that tile the model */
    const char *schedule;    /* the runner's: "gpipe", "1f1b", ... */
    int batch, microbatches;
    const char *device;    /* every stage's: "cpu" or "cuda:N" (NULL: cpu) */
    const char *transport; /* "local" or "zmq" (unused for one stage) */
    int warmup, iters;     /* iters <= BENCH_PIPE_MAX_ITERS */
    /* per stage, seconds per sample slept as stand-in compute (rt_runner_cfg extra_*), and
     * seconds slept per optimizer step; NULL: none */
    const double *extra_f_s, *extra_b_s, *extra_o_s;
} bench_pipe_spec;

typedef struct {
    double iter_s;                       /* median of the longest stage's iteration */
    double fwd_s[BENCH_PIPE_MAX_STAGES]; /* per stage, all micro-batches of an iteration */
    double bwd_s[BENCH_PIPE_MAX_STAGES];
    double opt_s[BENCH_PIPE_MAX_STAGES];
    double loss; /* the last stage's batch loss in the last iteration */
} bench_pipe_result;

/* Builds the runners, connects them, runs warmup + iters steps and fills `res`. Errors: a bad
 * spec (SC_ERR_INVALID), the first stage failure that is not a cancellation. */
sc_status bench_pipe_run(const bench_pipe_spec *sp, bench_pipe_result *res, sc_err *err);

/* Median of v[0..n) (sorts v). */
double bench_median(double *v, int n);

#endif /* BENCH_PIPELINE_H */
