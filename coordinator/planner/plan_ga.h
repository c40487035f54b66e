/*
 * plan_ga: unequal micro-batch sizes per stage (UMPIPE, reconstructed), found by a
 * dual-chromosome genetic search, with its two baselines.
 *
 * An individual gives every stage its own forward sizes x (first chromosome) and backward
 * sizes y (second), each a list of at most max_entries sizes summing to the batch. Its time
 * comes from the fill-drain recurrence of ALGORITHMS.md section 5: stage i+1's j-th entry can
 * start once stage i has sent the samples it needs; a link carries one transfer at a time;
 * backward starts after a stage's last forward. The population is evaluated many individuals
 * at a time (plan_ga_eval_batch): sixteen side by side in AVX2 vectors where the CPU has them,
 * their rows transposed so that one instruction steps every one of them, and four side by side
 * elsewhere. The one-by-one evaluator (plan_ga_eval_one) is the specification; the batched pass
 * gives bit-identical times.
 * Does not choose the partition: it works on the stages it is given.
 * Invariant: the best individual is kept from one generation to the next (elitism), and every
 * equal split of the batch is in the first generation, so the result is never worse than the
 * best equal split; and it is that equal split unless it is faster by more than rounding (a
 * relative 1e-9).
 */
#ifndef PLAN_GA_H
#define PLAN_GA_H

#include <stdint.h>

#include "common/sc_status.h"

typedef struct plan_ga_problem {
    int n_stages;
    int batch;            /* B: samples per iteration */
    int max_entries;      /* K: most micro-batches one stage may cut the batch into */
    const double *fwd_s;  /* (n_stages, batch+1): forward time of x samples, [0] = 0 */
    const double *bwd_s;  /* (n_stages, batch+1) */
    const double *comm_s; /* (n_stages, batch+1): x samples across the cut after stage i */
    const int *max_size;  /* (n_stages): largest entry that fits the stage's memory */
    double opt_s;         /* optimizer step after the last backward */
} plan_ga_problem;

typedef struct plan_ga_cfg {
    int population;  /* default 64 */
    int generations; /* default 120 */
    uint64_t seed;   /* default 1 */
    int one_by_one;  /* evaluate with plan_ga_eval_one instead of the batched pass (same
                        results; for measuring the batched pass) */
} plan_ga_cfg;

typedef struct plan_ga_result {
    double time_s;       /* best individual's iteration time (with penalty: never chosen) */
    int *x;              /* (n_stages, max_entries) forward sizes, 0 = unused slot */
    int *y;              /* (n_stages, max_entries) backward sizes */
    double best_equal_s; /* best equal split the search started from */
    int best_equal_m;
    double greedy_s;  /* local greedy baseline */
    double uniform_s; /* stage-by-stage search over uniform sizes */
    long evaluated;   /* individuals evaluated */
    double eval_s;    /* time spent evaluating them */
} plan_ga_result;

/* Iteration time of one individual (x, y: (n_stages, max_entries), packed, zeros after the
 * last entry), +penalty when an entry exceeds its stage's max_size. */
double plan_ga_eval_one(const plan_ga_problem *p, const int *x, const int *y);

/* A population (one individual after another) and the scratch of plan_ga_eval_batch. The batch
 * is tied to the shape (n_stages, max_entries, batch) of the problem it was made for. */
typedef struct plan_ga_batch plan_ga_batch;
sc_status plan_ga_batch_new(plan_ga_batch **out, const plan_ga_problem *p, int n, sc_err *err);
void plan_ga_batch_destroy(plan_ga_batch **b);
/* Individual i's storage in the batch: x (n_stages, max_entries) followed by y, to be written
 * in place (the search breeds its children there). */
int *plan_ga_batch_individual(plan_ga_batch *b, int i);
/* Copies individual i (x, y as above) into the batch. */
void plan_ga_batch_set(plan_ga_batch *b, int i, const int *x, const int *y);
/* Evaluates the first n individuals of the batch; times_s[i] is exactly plan_ga_eval_one's.
 * Entries must lie in 0..batch and rows be packed with at least one entry, as the search keeps
 * them (on a row with a zero before later entries both evaluators stop at the zero, but the
 * memory penalty here counts only the entries before it). The batch holds the pass's scratch:
 * one call at a time per batch. */
void plan_ga_eval_batch(const plan_ga_problem *p, plan_ga_batch *b, int n, double *times_s);

/* The batched pass's code paths, with the same times on every path. A new batch uses the
 * fastest this CPU runs: AVX2 on x86-64 CPUs that have it, else the portable one. */
typedef enum plan_ga_kernel {
    PLAN_GA_KERNEL_AUTO,
    PLAN_GA_KERNEL_PORTABLE,
    PLAN_GA_KERNEL_AVX2,
} plan_ga_kernel;
/* Makes the batch evaluate with path k (AUTO: the fastest); returns 0 and changes nothing
 * when this build or CPU cannot run it. For tests and benchmarks. */
int plan_ga_batch_use_kernel(plan_ga_batch *b, plan_ga_kernel k);
/* The path the batch evaluates with (never AUTO), and its name. */
plan_ga_kernel plan_ga_batch_kernel(const plan_ga_batch *b);
const char *plan_ga_kernel_name(plan_ga_kernel k);

/* Runs the search and both baselines. r->x, r->y are allocated (plan_ga_result_free). */
sc_status plan_ga_run(const plan_ga_problem *p, const plan_ga_cfg *cfg, plan_ga_result *r,
                      sc_err *err);
void plan_ga_result_free(plan_ga_result *r);

/* The largest backward entry of a stage's rows (x forward, y backward, K entries each, packed)
 * whose samples are not exactly one forward entry's: the runtime runs such an entry on a gather
 * slot of that many samples (0: every backward entry coincides with a forward one). */
int plan_ga_gather_size(const int *x, const int *y, int K);

/* Fills x with an equal split of the batch into m entries (sizes differ by at most one). */
void plan_ga_equal_split(const plan_ga_problem *p, int m, int *x);

#endif /* PLAN_GA_H */
