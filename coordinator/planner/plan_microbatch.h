/*
 * plan_microbatch: how many micro-batches to cut the global batch into.
 *
 * Closed form (Hu 2024, reconstructed): with a stage time t(M) = alpha + beta*M per
 * micro-batch of M samples, m micro-batches of B/M on p stages take (m+p-1)(alpha + beta*B/m),
 * smallest at m* = sqrt((p-1) beta B / alpha). This module fits alpha and beta and proposes
 * the candidate counts around m* that the driver then simulates (plan.c): counts that divide
 * B, at least p for 1F1B-like schedules. It does not simulate and does not check memory.
 */
#ifndef PLAN_MICROBATCH_H
#define PLAN_MICROBATCH_H

#include "coordinator/planner/plan_profile.h"

/* alpha (s) and beta (s per sample) of blocks first..last on the reference device, from two
 * sizes (the smallest and the largest measured, else 1 and B); alpha is 0 when times scale
 * linearly. */
void plan_microbatch_fit(const plan_profile *p, int first, int last, int batch, double *alpha,
                         double *beta);

/* Micro-batches per stage beyond one at which the fill-drain bubble (p-1)/(m+p-1) is 1%:
 * m* never goes past PLAN_MB_BUBBLE_COUNT * (p-1). */
#define PLAN_MB_BUBBLE_COUNT 99

/* m* from the closed form, at most PLAN_MB_BUBBLE_COUNT * (stages-1) (its value when
 * alpha <= 0: times linear in the size), clamped to [1, batch]; 1 for one stage. */
double plan_microbatch_closed_form(double alpha, double beta, int batch, int stages);

#define PLAN_MB_MAX_CANDIDATES 24

/* Up to PLAN_MB_MAX_CANDIDATES counts m dividing `batch`, min_count <= m <= max_count when
 * possible (max_count below min_count counts as min_count), the ones nearest m* (on a log
 * scale) first, returned in increasing order. */
int plan_microbatch_candidates(int batch, double m_star, int min_count, int max_count, int *out);

/* The largest count the sweep proposes for `stages` stages: PLAN_MB_BUBBLE_COUNT * (stages-1),
 * at least 1. */
int plan_microbatch_most(int stages);

/* The next count when micro-batches of batch/m samples are too large for memory: the smallest
 * divisor of `batch` that is at least 2m, else the batch itself (one sample each). */
int plan_microbatch_smaller(int batch, int m);

#endif /* PLAN_MICROBATCH_H */
