/* Helpers shared by the simulator's tests (test_planner_sim_*): play a built schedule, give
 * every stage the same costs, and compare two results bit for bit. Include after cmocka.h. */
#ifndef SC_TESTS_PLANNER_SIM_HARNESS_H
#define SC_TESTS_PLANNER_SIM_HARNESS_H

#include "coordinator/planner/plan_schedule.h"
#include "coordinator/planner/plan_sim.h"

/* Builds and validates schedule k, then plays it: plan_sim_run when sh is NULL, else
 * plan_sim_run_shared with sh, at slice efficiency eff. */
plan_sim_result play(plan_sched_kind k, int p, int m, int sliced, const plan_sim_stage *st,
                     const plan_sim_share *sh, double eff, int record);

/* play without sharing, at slice efficiency 1. */
plan_sim_result run(plan_sched_kind k, int p, int m, int sliced, const plan_sim_stage *st,
                    int record);

/* Stages 0..p-1 with forward f, backward b and nothing else. */
void equal_stages(plan_sim_stage *st, int p, double f, double b);

/* Two results hold the same numbers bit for bit, and the same events in any order (both
 * results' events are sorted in place). */
void assert_same_result(plan_sim_result *a, plan_sim_result *b);

#endif
