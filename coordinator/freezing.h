/*
 * The freezing policy of each job (FreezePipe, with the criterion of AutoFreeze and
 * PipeTransformer): which prefix of the model's blocks has stopped learning and may run forward
 * only. Reports bring each block's gradient norm every step; every `interval` steps the mean norm
 * per block over the interval, G_l, is compared with the interval before:
 *
 *   r_l = |G_l(before) - G_l(now)| / G_l(before)
 *
 * tau is the p-th percentile of r over the blocks still learning (those with parameters), capped
 * at max_change (a block whose gradient still changes by more than that has not converged,
 * whatever the others do), and the frozen prefix grows to end before the first learning block
 * with r_l >= tau. It only grows
 * (nothing un-freezes), and the block that changes most never freezes, so the prefix always
 * leaves a block to train. Blocks without parameters (their norm is 0) join a prefix that
 * reaches past them and never stop one.
 *
 * Not here: moving the stages after a freeze (jobs_rebalance.c re-plans with the frozen blocks'
 * backward at zero, planning.c), running frozen blocks (kernels/stage.h, worker/runtime/).
 * All functions run under c->lock; the table lives in struct coord.
 */
#ifndef COORD_FREEZING_H
#define COORD_FREEZING_H

#include <stddef.h>
#include <stdint.h>

typedef struct coord_freezing coord_freezing;

/* Starts (or finds) job `job_id`'s policy: `interval` steps per comparison, the `percentile`
 * (1..99) that sets tau and its cap `max_change` (> 0), `n_blocks` blocks in the model, `frozen`
 * blocks frozen already (a job resumed after the coordinator restarted). Returns the prefix
 * frozen now (a job already known keeps its own, or `frozen` when larger). */
int coord_freezing_start(coord_freezing **all, const char *job_id, uint64_t interval,
                         double percentile, double max_change, int n_blocks, int frozen);

/* One stage's report of `step`: squared L2 norms of the gradients of blocks first_block..
 * first_block + n - 1, before the optimizer step. */
void coord_freezing_observe(coord_freezing *all, const char *job_id, int first_block,
                            const double *sq_norms, size_t n, uint64_t step);

/* A report of the last stage after `step`: when it ends an interval, the interval is compared
 * with the one before. Returns the prefix the policy now wants (> coord_freezing_frozen: more
 * blocks should freeze; `why` says which and the figures), else the prefix frozen now. */
int coord_freezing_close(coord_freezing *all, const char *job_id, uint64_t step, char *why,
                         size_t size);

/* Blocks [0, result) of job `job_id` are frozen (0: none, or an unknown job). */
int coord_freezing_frozen(const coord_freezing *all, const char *job_id);

/* The move that freezes blocks [0, frozen) was decided: they are frozen from now on. */
void coord_freezing_set(coord_freezing *all, const char *job_id, int frozen);

/* Forgets job `job_id` (it ended). */
void coord_freezing_drop(coord_freezing **all, const char *job_id);
void coord_freezing_free(coord_freezing **all);

/* The policy's decision on one comparison, for tests: the new prefix end (>= frozen) given the
 * mean norms of the interval before (g_before) and of the last (g_now) for n blocks; *tau gets
 * the threshold, capped (0 when no block could be compared). */
int coord_freezing_decide(const double *g_before, const double *g_now, int n, int frozen,
                          double percentile, double max_change, double *tau);

#endif /* COORD_FREEZING_H */
