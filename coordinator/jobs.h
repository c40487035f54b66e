/*
 * The coordinator's jobs: the driver that takes each job from submitted (or recovering) through
 * profiling and planning to running, and what the control loop and the gRPC service tell it
 * while a job runs (iteration reports, heartbeats, errors, dead workers, cancels).
 *
 * The files, and what each may call (calls run one way, from the top of this list down; a
 * file calls only files below it, never one above; tools/call-loops.sh, run by
 * ctest as structure/call_loops_sc_coordinator, refuses a loop of calls between any two files of
 * coordinator/):
 *
 *  - jobs_driver.c: the driver threads, which take a job from state to state. Calls any file
 *    below.
 *  - jobs_recovery.c: lost workers, worker errors, heartbeat repair, a worker that leaves.
 *  - jobs_progress.c: running jobs' iteration reports: steps, checkpoints, the end of a job.
 *  - jobs_reprobe.c: probing again a running job's suspect links and left-out workers.
 *  - jobs_rebalance.c: measured speeds, the decision to re-plan a running job (evaluation).
 *  - jobs_dispatch.c: profiling, link probes, assignment and START of a planned job.
 *  - jobs_trace.c: a running job's measured timeline, from its workers; the one kept at its end.
 *  - jobs_stall.c: running jobs whose stages stop stepping.
 *  - jobs_export.c: where a job's checkpoint can be fetched from.
 *  - jobs_links.c, jobs_reduce.c: the links' and the copies' all-reduce figures of a run.
 *  - jobs_workers.c, jobs_fit.c, jobs_transports.c: which workers a job takes, whether the
 *    model can fit them, the data plane recorded in its plan.
 *  - jobs_transitions.c, at the bottom: the running jobs' progress table and the moves of a
 *    job between states that its progress decides (a move's pause, recovery), and what a job
 *    gives back when it stops or moves. Calls no jobs_*.c file.
 *
 * Below all of them: the store, the registry, the speed model, the freezing policy, the
 * command queue, the planner (jobs_internal.h lists what the files share).
 *
 * Everything here but coord_driver_main, coord_jobs_trace and coord_jobs_checkpoint_source runs
 * under c->lock and never waits on the network (coord_jobs_trace_end leaves its calls to a
 * thread of its own).
 */
#ifndef COORD_JOBS_H
#define COORD_JOBS_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "coordinator/coord_internal.h"
#include "coordinator/trace.h"

/* ---- jobs_driver.c ---- */

/* The job-driver thread (coord_new starts it with the coordinator as `arg`): returns once
 * c->stopping is set and the per-job driver threads it started have left. */
void *coord_driver_main(void *arg);

/* ---- jobs_progress.c ---- */

/* Under c->lock: records a stage's iteration report; ends the job when every stage is done.
 * sent_ns: the report's envelope stamp (the worker's clock; 0: unknown), received_ns: when it
 * arrived (this clock), for the clock offsets of the link figures. */
void coord_jobs_report(coord *c, const char *worker_id, const Stagecraft__IterationReport *r,
                       uint64_t sent_ns, uint64_t received_ns);

/* ---- jobs_transitions.c ---- */

/* Under c->lock: the progress of a running job, or NULL. */
coord_progress *coord_jobs_progress(coord *c, const char *job_id);

/* Under c->lock: whether an error of `run` (0: of no particular run, e.g. a START refused)
 * concerns job `job_id` as it is now: a run's error counts only while that run trains. */
bool coord_jobs_run_is_current(coord *c, const char *job_id, uint64_t run);

/* Under c->lock: frees the workers reserved for a job (it ended or is re-planned). */
void coord_jobs_release_workers(coord *c, const char *job_id);

/* Under c->lock: forgets every job's progress (the coordinator stops). */
void coord_jobs_progress_clear(coord *c);

/* ---- jobs_history.c ---- */

/* Under c->lock: a report of running job p's last stage, first copy, adds its step to the job's
 * training series in the store (history.h), once per step. */
void coord_jobs_history_observe(coord *c, coord_progress *p, const Stagecraft__IterationReport *r);

/* ---- jobs_reduce.c ---- */

/* Under c->lock: the all-reduce of stage s's copies per iteration at their measured speeds (the
 * slowest copy's), 0 when the stage has one copy or nothing is measured yet. */
double coord_jobs_reduce_measured_s(coord *c, const coord_progress *p, int s);

/* ---- jobs_recovery.c ---- */

/* Under c->lock: marks the jobs of a worker that died as recovering and wakes the driver. */
void coord_jobs_worker_died(coord *c, const coord_worker *w);

/* Under c->lock: worker `w` said it leaves. When its job is elastic, running, and can do
 * without it, a rebalance moves its blocks to the others first: marks it leaving and returns
 * true (it is told to stay until then, and shut down once the job took its blocks). False: it
 * goes now (coord_jobs_worker_left). */
bool coord_jobs_worker_leaving(coord *c, coord_worker *w);

/* Under c->lock: the same for a worker that said it leaves (its process was stopped). */
void coord_jobs_worker_left(coord *c, const coord_worker *w);

/* Under c->lock: a worker's training stopped with an error (e->code an sc_status name): the job
 * is re-planned when a neighbour vanished (time-out, unavailable), resumed from an older step
 * when the checkpoint to resume from did not load and the worker names an older one that does
 * (e->checkpoint_step, e->intact_checkpoint_step), else it fails. */
void coord_jobs_worker_error(coord *c, const coord_worker *w, const Stagecraft__Error *e);

/* Under c->lock: worker `w` says in a heartbeat (at now_ns) that it holds a stage of `said_job`
 * ("" none) in `said_state`. Repairs what a lost control message or a restart left behind
 * when the disagreement with what the coordinator holds it to lasts a grace period (3
 * heartbeat intervals, at least 1 s, so messages in flight settle first):
 *  - its job runs, but it holds no stage of it (it restarted, or a STOP was mistaken for it):
 *    the job recovers, as when a worker dies;
 *  - its job runs, but its stage waits for a START that never came: START is sent again;
 *  - it still runs a stage of a job that has ended: STOP is sent again. */
void coord_jobs_heartbeat(coord *c, coord_worker *w, const char *said_state, const char *said_job,
                          uint64_t now_ns);

/* ---- jobs_rebalance.c ---- */

/* What an evaluation of a running job's plan found: the predicted iteration time of the plan
 * it runs under the measured speeds, the new plan's (plan_json, heap, caller frees), the gain,
 * and what was done and why in words. */
typedef struct {
    bool started;
    double current_s, new_s, gain;
    char *plan_json;
    char message[COORD_REASON_MAX];
} coord_rebalance_result;

/* Re-plans running job `job_id` with the measured speeds (takes c->lock; plans without it).
 * Starts a rebalance when `force`, or when the gain is worth a move; a dry run only reports.
 * SC_ERR_NOT_FOUND for an unknown job, SC_ERR_PRECONDITION for one not running (or already
 * pausing for a move). */
sc_status coord_jobs_rebalance(coord *c, const char *job_id, bool force, bool dry_run,
                               coord_rebalance_result *out, sc_err *err);

/* ---- jobs_trace.c (network calls: the caller does not hold c->lock) ---- */

/* The trace of running job `job_id` (coord_trace_build) over the newest `iterations` (0:
 * COORD_TRACE_ITERATIONS) that every stage holds: calls Worker.GetTimeline twice on every worker
 * of its plan, first for its newest iteration, then for the window ending at the oldest of
 * those, each worker's clock offset estimated from the second call. A worker that does not answer
 * is left out, named with why in `missing` (a JSON array, appended to), and the others' timelines
 * are still traced; *answered counts those that answered. Errors: an unknown job
 * (SC_ERR_NOT_FOUND), one that is not running and kept none (SC_ERR_PRECONDITION naming its
 * state), no worker
 * answering (SC_ERR_UNAVAILABLE naming the first), and coord_trace_build's. *json is a heap string
 * (caller frees). A job that is not running answers with the trace kept when it last ended
 * (coord_jobs_trace_end; its window whatever `iterations` asks), SC_ERR_PRECONDITION naming its
 * state when none was kept. */
sc_status coord_jobs_trace(coord *c, const char *job_id, int iterations, char **json,
                           coord_trace_summary *sum, int *answered, json_t *missing, sc_err *err);

/* Under c->lock: job `job_id` ended (its state is terminal now) and its workers are to drop
 * their stages: when `fetch` and the job has a plan, a thread of its own fetches the job's last
 * window (COORD_TRACE_ITERATIONS) from its workers first, bounded by a short deadline per call
 * so a dead worker delays the others' release by about two seconds at most, and keeps it in the
 * store (coord_jobs_trace answers from it from then on); then, or at once without a fetch, every
 * worker the store lists for the job is sent STOP for `stop_step`. A fetch that fails is logged
 * and keeps nothing. */
void coord_jobs_trace_end(coord *c, const char *job_id, uint64_t stop_step, bool fetch);

/* ---- jobs_export.c (takes c->lock itself) ---- */

/* Where job `job_id`'s checkpoint of `step` (0: its last complete one) can be fetched from, for
 * `stagecraft export JOB`: {"step", "model_json", "model_kind", "stages": [{"stage",
 * "first_block", "last_block", "sources": [{"worker_id", "endpoint", "state"}]}]}, each stage's
 * sources its own workers first, then every other worker not dead that serves blocks (caller
 * decrefs). Errors: an unknown job (SC_ERR_NOT_FOUND), a model that is not exported
 * (SC_ERR_UNSUPPORTED naming the kinds that are), no complete checkpoint yet
 * (SC_ERR_PRECONDITION), a step past the last complete one (SC_ERR_INVALID). */
sc_status coord_jobs_checkpoint_source(coord *c, const char *job_id, uint64_t step, json_t **out,
                                       sc_err *err);

#endif /* COORD_JOBS_H */
