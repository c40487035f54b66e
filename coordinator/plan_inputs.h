/*
 * What the coordinator plans with, for `stagecraft advise --workers` and `--job`
 * (Coordinator.GetPlanInputs): the cluster document of a set of workers with their measured
 * speeds, the profile the planner uses, and the plan the coordinator makes of a job on all of
 * them, so that the client can plan subsets of them exactly as the coordinator would.
 *
 * --workers: the idle, alive workers (those in a job are left out: profiling them would slow
 * it), each with the model's profile from the profile cache, else profiled now (and cached);
 * their links probed as a job's are. --job: a running job's workers with its speed model
 * (speeds.h: the profiles scaled by what training measured).
 * Not here: the search over subsets (the client's planner does it). Invariant: the calls to
 * workers run without c->lock.
 */
#ifndef COORD_PLAN_INPUTS_H
#define COORD_PLAN_INPUTS_H

#include "common/sc_status.h"
#include "proto/sc_rpc.h"
#include "proto/stagecraft.pb-c.h"

struct coord;

/* Answers one GetPlanInputs request into *out (allocated in ctx). SC_ERR_INVALID for a request
 * with neither or both of job_json and job_id, or a job document that does not parse;
 * SC_ERR_NOT_FOUND for an unknown job; SC_ERR_PRECONDITION for a job that is not running or
 * has no profile of a worker, or no idle worker; a worker's failure to profile, as a job's. */
sc_status coord_plan_inputs_answer(struct coord *c, sc_rpc_ctx *ctx,
                                   const Stagecraft__GetPlanInputsRequest *req,
                                   Stagecraft__GetPlanInputsResponse **out, sc_err *err);

#endif /* COORD_PLAN_INPUTS_H */
