/*
 * A job's plan (the JSON the coordinator keeps) played again by the planner's simulator: its
 * stages' compute from the cluster's block times (the slowest copy's device), its schedule, its
 * micro-batch count and copies. What a trace draws beside the measured rows (trace.c), and what
 * the running plan would take if its stages ran at measured speeds (jobs_rebalance.c).
 * Transfers are played only where the caller gives their times (the links measured while the
 * job runs, jobs_links.c); figures are meant as ratios against the plan's own iteration_time_s.
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

/* coord_plan_replay_scaled_s with transfers: the replay as planned plays planned_f[s] (one
 * micro-batch's activation from stage s to s + 1) and planned_b[s] (its gradient from s to
 * s - 1), the scaled one now_f and now_b (any may be NULL: no transfers there). What the
 * running plan takes with its compute and its links at measured speeds. */
double coord_plan_replay_links_s(const char *plan_json, const double *stage_factor,
                                 const double *planned_f, const double *planned_b,
                                 const double *now_f, const double *now_b);

#endif /* COORD_PLAN_REPLAY_H */
