/*
 * A job's plan (the JSON the coordinator keeps) played again by the planner's simulator: its
 * stages' compute from the cluster's block times (the slowest copy's device), its schedule, its
 * micro-batch count and copies. What a trace draws beside the measured rows (trace.c), and what
 * the running plan would take if its stages ran at measured speeds (jobs_rebalance.c).
 * Transfers and the copies' all-reduce are played only where the caller gives their times (as
 * the job measures them: jobs_links.c, jobs_reduce.c); figures are meant as ratios against the
 * plan's own iteration_time_s.
 */
#ifndef COORD_PLAN_REPLAY_H
#define COORD_PLAN_REPLAY_H

#include <stdbool.h>

#include "common/sc_status.h"
#include "coordinator/planner/plan_sim.h"

typedef struct {
    int n_stages;
    int *replicas;      /* [n_stages] copies of each stage */
    double planned_s;   /* the plan's iteration_time_s */
    plan_sim_result sim; /* the replay (events when asked for) */
} coord_replay;

/* Replays `plan_json` with each stage's compute multiplied by stage_factor[s] (NULL: as
 * planned). SC_ERR_INVALID when the plan cannot be replayed (no stages, no micro-batch count,
 * an unknown schedule). coord_replay_free frees *out on every path. */
sc_status coord_plan_replay(const char *plan_json, const double *stage_factor, bool record_events,
                            coord_replay *out, sc_err *err);
void coord_replay_free(coord_replay *r);

/* The plan's iteration time if its stages ran stage_factor[s] times their planned compute: the
 * plan's iteration_time_s times the replay's ratio with and without the factors; 0 when it
 * cannot be replayed. */
double coord_plan_replay_scaled_s(const char *plan_json, const double *stage_factor);

/* What a replay plays besides compute, per stage s (each array NULL: none): one micro-batch's
 * activation transfer to stage s + 1 (send_f) and gradient transfer to s - 1 (send_b), and the
 * all-reduce of the stage's copies once per iteration (reduce). */
typedef struct {
    const double *send_f, *send_b, *reduce;
} coord_replay_costs;

/* coord_plan_replay_scaled_s with transfers and all-reduces: the replay as planned plays
 * `planned`, the scaled one `now` (either may be NULL: none). What the running plan takes with
 * its compute, its links and its copies' all-reduce at measured speeds. */
double coord_plan_replay_costs_s(const char *plan_json, const double *stage_factor,
                                 const coord_replay_costs *planned, const coord_replay_costs *now);

#endif /* COORD_PLAN_REPLAY_H */
