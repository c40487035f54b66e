/*
 * plan_umpipe: the umpipe strategy's per-stage micro-batch sizes, found by the genetic search
 * on a partition that plan_run has already chosen, and the plan's figures for them.
 */
#ifndef PLAN_UMPIPE_H
#define PLAN_UMPIPE_H

#include "coordinator/planner/plan.h"

/* Fills r for the partition r->part at batch r->batch with block costs c (at the partition's
 * micro-batch size): the sizes (ga_k entries a stage in fwd_sizes, bwd_sizes), n_micro (the
 * most entries of a stage), objective_s, iteration_time_s, bubble_fraction, the baselines
 * (ga_*), fits_memory, peak_memory_bytes (which must hold n_stages) and sim (events when
 * req->record_trace); appends to r->note when it searched twice. r owns the sizes
 * (plan_result_free). Errors: SC_ERR_TOO_LARGE for a batch over 16384 samples, SC_ERR_NOMEM,
 * and those of plan_ga_run and the simulation. */
sc_status plan_umpipe_run(const plan_request *req, const plan_cost *c, plan_result *r, sc_err *err);

#endif /* PLAN_UMPIPE_H */
