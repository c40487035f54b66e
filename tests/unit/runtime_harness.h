/* The harness the worker/runtime/runner tests share: small models, a run_spec that describes a
 * pipeline run, runners made from it (one thread per stage, zmq loopback or local queues), the
 * one-stage reference the pipelines are held to, the pipedream event logs and pipelines with
 * replicated stages. It asserts with cmocka, so only a test program links it; it keeps no state
 * but the run options below (set around one run) and the last run's gradient norms.
 *
 * runtime_harness.c: specs, options, pipelines, the reference and the equivalence check;
 * runtime_harness_pipedream.c: runs that log every forward and backward (pd_job);
 * runtime_harness_replicas.c: pipelines whose stages run as several copies (repl_pipe).
 * The last two call the first, never the other way. */
#ifndef SC_TESTS_UNIT_RUNTIME_HARNESS_H
#define SC_TESTS_UNIT_RUNTIME_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "worker/runtime/runner.h"
#include "worker/runtime/timeline.h"

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

/* Sizes per stage: when set, stage s runs per_stage->sizes[s] (per_stage->counts[s] entries) and
 * is told its neighbours' lists; the run_spec's own sizes are the reference's cut. Where
 * bwd[s] is set, stage s runs its backwards in that cut (bcounts[s] entries) and stage s-1 is told
 * it. */
typedef struct {
    const int *sizes[8];
    int counts[8];
    const int *bwd[8];
    int bcounts[8];
} per_stage_sizes;

/* What every runner the harness makes takes beyond its run_spec; all zero is the default. */
typedef struct {
    bool stage_memory_path;           /* rt_runner_cfg.stage_memory_path (device-memory path) */
    const per_stage_sizes *per_stage; /* each stage's own cut, see above */
    int frozen;                       /* rt_runner_cfg.frozen_blocks (the reference freezes too) */
    bool skip_norms;                  /* rt_runner_cfg.skip_grad_norms */
    const int *zb1_defer;             /* rt_runner_cfg.zb1_defer (zb1's deferral caps) */
    const char *precision;            /* rt_runner_cfg.precision */
    double scale_init;                /* fp16's loss scale: rt_runner_cfg.loss_scale_init */
    int scale_interval;               /* and rt_runner_cfg.loss_scale_interval */
    /* When set, repl_open hands out every copy 0's endpoint joined to this one, as a copy 0 with
     * a device all-reduce publishes it ("DATA|nccl-reduce://..."): the readers must take their
     * part. */
    const char *joined_to_copy0;
} run_opts;

/* Sets the options of the runs that follow (a copy is kept; the pointers in it are borrowed until
 * the next call). NULL restores the defaults. Tests set them around one run only, and restore
 * them before they return. */
void run_opts_set(const run_opts *o);
const run_opts *run_opts_get(void);

/* Micro-batches the runner runs: m, plus one per sliced warm-up micro-batch. */
int effective_microbatches(const run_spec *rs);
/* Blocks of the model in `json`. */
int model_blocks(const char *json);
/* Stage `stage`'s runner configuration of the run, its blocks an even cut of `nblocks`. */
rt_runner_cfg spec_cfg(const run_spec *rs, int stage, int nblocks);

/* One runner's steps [first_step, first_step + steps) in a thread of its own (stage_thread). */
typedef struct {
    rt_runner *r;
    uint64_t first_step;
    int steps;
    sc_status rc;
    sc_err err;
    rt_report last;
} stage_job;
void *stage_thread(void *arg);

/* Creates and connects the runners of a pipeline, rn[rs->stages]. */
void pipeline_open(const run_spec *rs, rt_runner **rn);
/* Runs `steps` steps from `first_step` on every stage at once (one thread each); each stage's
 * last report goes to reports[s] unless reports is NULL. */
void pipeline_run(const run_spec *rs, rt_runner **rn, uint64_t first_step, int steps,
                  rt_report *reports);
/* Every stage's parameters, concatenated (malloc'd, the caller frees); their number in *count. */
float *pipeline_params(const run_spec *rs, rt_runner **rn, size_t *count);
/* Opens a pipeline, runs steps 1..rs->steps, returns its parameters (as pipeline_params) and each
 * stage's last report (grad_sq_norms cleared: read them with train_grad_sq_sum). */
float *train_pipeline(const run_spec *rs, size_t *count, rt_report *reports);
/* The sum of stage s's per-block gradient norms of the last train_pipeline (-1: none reported). */
double train_grad_sq_sum(int stage);
/* The reference: one kn_stage over the whole model, the same micro-batches, gradients
 * accumulated, one kn_stage_step per batch: no runtime code involved. Returns the trained
 * parameters and, in *init, the initial ones (both malloc'd). */
float *train_reference(const run_spec *rs, size_t *count, float **init);
/* ||a - b|| / ||b|| within 1e-5, and the training moved the weights by much more than that. */
void assert_params_close(const float *a, const float *b, const float *init, size_t n);
/* The pipeline trains to the reference's parameters, and each stage's report states the
 * micro-batches, slots and in-flight bound its schedule has. */
void check_equivalence(const run_spec *rs);
/* Timeline events of iteration `it` and kind `kind` among ev[n]. */
int count_kind(const rt_tl_event *ev, size_t n, uint64_t it, int kind);

/* ---- runtime_harness_pipedream.c ---- */

/* Per runner: every forward / backward event of a run of steps (and of a flush), copied out
 * after each call since the report's array belongs to the runner, and the in-flight count each
 * call left behind. */
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

/* Runs steps [first_step, first_step + steps) on the n runners at once (every stage, or every
 * copy of every stage), then flushes if asked. Returns the logs, one per runner (calloc'd: the
 * caller frees). */
pd_job *pd_run_runners(rt_runner **rn, int n, uint64_t first_step, int steps, bool flush);
/* pd_run_runners over the rs->stages runners of a pipeline. */
pd_job *pd_run(const run_spec *rs, rt_runner **rn, uint64_t first_step, int steps, bool flush);

/* ---- runtime_harness_replicas.c ---- */

#define MAX_AGENTS 8

/* A pipeline whose stage s runs as reps[s] replicas: runners in stage-major order. */
typedef struct {
    const run_spec *rs;
    const int *reps;
    int n; /* runners */
    int stage_of[MAX_AGENTS], replica_of[MAX_AGENTS], base[8];
    rt_runner *r[MAX_AGENTS];
} repl_pipe;

/* Creates and connects every copy of every stage (rs and reps are borrowed). */
void repl_open(repl_pipe *rp, const run_spec *rs, const int *reps);
/* Runs steps [first_step, first_step + steps) on every runner at once; runner i's last report
 * goes to reports[i] unless reports is NULL. */
void repl_run(repl_pipe *rp, uint64_t first_step, int steps, rt_report *reports);
/* Every replica of a stage holds bit-identical parameters; returns replica 0's of every stage,
 * concatenated (malloc'd). */
float *repl_params(repl_pipe *rp, size_t *count);
void repl_close(repl_pipe *rp);

#endif
