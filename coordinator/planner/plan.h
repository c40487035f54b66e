/*
 * plan: the strategy driver. Runs one partitioning strategy on a profile and a cluster, picks
 * the micro-batch count, simulates the chosen schedule and fills a plan result; writes results
 * as the plan JSON of docs/reference/formats.md and the simulated schedule as a Chrome trace (the
 * writers are plan_write.c).
 *
 * Does not read files (the caller loads profile and cluster) and prints nothing but what it is
 * asked to write. Every strategy is compared by the same objective and the same simulator.
 * Invariant: a result with ok == 1 has a partition covering every block, and its timings come
 * from simulating that partition with the requested schedule. When the partition carries a
 * block order (part->order, set by pipedream on a branching graph), its positions and every
 * figure of the result refer to the profile in that order (plan_profile_reorder); the request's
 * profile itself is never changed.
 */
#ifndef PLAN_H
#define PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "common/sc_status.h"
#include "coordinator/planner/plan_cluster.h"
#include "coordinator/planner/plan_partition.h"
#include "coordinator/planner/plan_profile.h"
#include "coordinator/planner/plan_sim.h"

typedef enum {
    PLAN_STRAT_UNIFORM = 0,
    PLAN_STRAT_BLOCKPARTITION,
    PLAN_STRAT_MINMAX,
    PLAN_STRAT_PIPEDREAM,
    PLAN_STRAT_AUTOPIPE,
    PLAN_STRAT_HETERO,
    PLAN_STRAT_UMPIPE,
    PLAN_STRAT_EXHAUSTIVE,
    PLAN_STRAT_COUNT
} plan_strategy;

const char *plan_strategy_name(plan_strategy s);
/* -1 when unknown ("all" is handled by the caller). */
int plan_strategy_parse(const char *name);

typedef struct plan_request {
    const plan_profile *profile;
    const plan_cluster *cluster;
    int batch;        /* global batch B (1 to PLAN_MAX_BATCH); 0 = plan_request_default_batch() */
    int microbatches; /* m; 0 = auto (closed form + simulated sweep, memory-capped) */
    plan_sched_kind schedule; /* or PLAN_SCHED_AUTO: plan_run picks among gpipe, 1f1b, sliced
                                 and, with runtime_zb1, zb1 */
    int runtime_zb1;          /* the runtime runs zb1, so PLAN_SCHED_AUTO may pick it: the
                                 workers do (worker/runtime/schedule.h), `stagecraft plan`
                                 sets 1; 0 leaves it out */
    int max_stages;           /* 0 = no cap */
    int zb1_peak_cap;         /* zb1: cap each stage's deferred W so that no copy holds more
                                 bytes than 1f1b's fullest (a job's "zb1_memory":
                                 "1f1b_peak"); 0, the default: only by each device's memory */
    double slice_efficiency;  /* half-size kernels' efficiency for sliced; 0 = 0.9 */
    long exhaustive_limit;    /* 0 = default */
    int record_trace;         /* keep simulated events in the result */
} plan_request;

/* The largest global batch planned (as a job spec's batch_size): the micro-batch sweep and the
 * simulation take time in proportion to it (a graph.txt profile's auto count is the batch). */
#define PLAN_MAX_BATCH (1 << 20)

/* 2 x devices x microbatch_size for JSON profiles; 8 x devices for graph.txt profiles. In 64
 * bits: a large profile micro-batch on many devices exceeds an int (plan_run then refuses it,
 * as any batch above PLAN_MAX_BATCH). */
int64_t plan_request_default_batch(const plan_request *req);

#define PLAN_SWEEP_MAX 24

typedef struct plan_result {
    plan_strategy strategy;
    int ok; /* 0: `error` says why this strategy gave no plan */
    char error[SC_ERR_MSG_MAX];
    int batch;
    plan_sched_kind schedule; /* the one planned and simulated (never PLAN_SCHED_AUTO) */
    double objective_s;
    double bottleneck_s;
    double iteration_time_s;
    double throughput_samples_per_s;
    double bubble_fraction;
    double lower_bound_s;            /* plan_lower_bound: stages of one device each */
    double lower_bound_replicated_s; /* plan_lower_bound_replicated: copies allowed */
    double search_time_s;
    int fits_memory;
    char note[160];
    plan_partition *part;
    double *compute_s;         /* (n_stages) */
    double *peak_memory_bytes; /* (n_stages) */
    double *allreduce_s;       /* (n_stages) the copies' all-reduce each iteration, as charged
                                * (plan_partition_reduce_time; 0: one copy) */
    int *w_defer;              /* (n_stages) zb1: the W each stage defers within its devices'
                                * memory (and 1f1b's peak with zb1_peak_cap)
                                * (plan_partition_zb1_defer); NULL otherwise */
    int n_micro;
    double micro_size; /* samples per micro-batch (equal sizes) */
    int sliced;        /* warm-up micro-batches cut in halves (sliced schedule) */
    /* umpipe: per-stage sizes, (n_stages, ga_k), zeros after the last entry */
    int ga_k;
    int *fwd_sizes;
    int *bwd_sizes;
    double ga_best_equal_s, ga_greedy_s, ga_uniform_s;
    /* --microbatches auto: the simulated sweep */
    int n_sweep;
    int sweep_count[PLAN_SWEEP_MAX];
    double sweep_iter_s[PLAN_SWEEP_MAX];
    int sweep_fits[PLAN_SWEEP_MAX];
    int sweep_runnable[PLAN_SWEEP_MAX]; /* the runtime runs the partition's copies with it */
    plan_sim_result sim;                /* events only when record_trace */
} plan_result;

/* Runs strategy `s`. Errors in the request (batch, micro-batch count, stage cap) return an
 * error; a strategy that finds no plan (memory, exhaustive too large) returns its status
 * with the message also copied into out->error. out must be freed with plan_result_free.
 * With PLAN_SCHED_AUTO the strategy runs under each synchronous schedule the runtime runs
 * (gpipe, 1f1b, sliced; zb1 only with runtime_zb1; never pipedream, whose asynchronous updates
 * train differently) and the fastest plan that fits memory is kept, the note saying which
 * (search_time_s counts every run). A zb1 plan's B and W times are the profile's measured split
 * (wgrad_s) or, where it has none, assumed (PLAN_WGRAD_SHARE): its note says which.
 * A plan's replicated stages always run under the runtime's rule for its micro-batch count
 * (plan_replicas_runnable); with microbatches 0 (auto), when the sweep finds a count that the
 * partition's copies cannot run with faster than every one they can, the strategy searches
 * again at that count and the faster plan is kept (search_time_s counts both searches). */
sc_status plan_run(const plan_request *req, plan_strategy s, plan_result *out, sc_err *err);
void plan_result_free(plan_result *r);

/* {"plans": [...]} with one object per result (failed strategies carry "error"; a result whose
 * partition has its own block order carries "block_order", the profile's block names in it). */
sc_status plan_write_json(FILE *f, const plan_request *req, const plan_result *r, int n,
                          sc_err *err);

/* Human table, one line per result. */
void plan_write_table(FILE *f, const plan_request *req, const plan_result *r, int n);

/* Chrome trace of a result simulated with record_trace. */
sc_status plan_write_trace(const plan_result *r, const char *path, sc_err *err);

#endif /* PLAN_H */
