/*
 * What the files of the job driver (jobs_*.c) share with one another; not part of its
 * interface (jobs.h). Functions marked "under c->lock" expect the caller to hold it; the others
 * take it themselves where they touch shared state.
 */
#ifndef COORD_JOBS_INTERNAL_H
#define COORD_JOBS_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "coordinator/jobs.h"
#include "coordinator/jobspec.h"

/* A worker chosen for a job, copied out of the registry so the lock can be dropped. */
typedef struct {
    char id[COORD_ID_MAX];
    char name[COORD_NAME_MAX];
    char endpoint[COORD_NAME_MAX];
    Stagecraft__HardwareReport *hw;
    char *profile_json;
    double link_bytes_per_s; /* measured path to the coordinator (link_probe.h); 0: not measured */
    double link_latency_s;   /* the probe's latency when it ran for this job; 0 otherwise */
    int64_t link_probed_unix_ms; /* when coord_jobs_probe_link measured it; 0: not for this job */
    double reduce_bytes_per_s;   /* its copies' all-reduce as the job measured it (speeds.h); 0 */
} coord_chosen_worker;

/* ---- jobs_workers.c: which workers a job takes, and giving back those its plan leaves out -- */

/* Frees `n` chosen workers (their hardware reports and profiles) and the array. */
void coord_jobs_chosen_free(coord_chosen_worker *w, size_t n);

/* Under c->lock: picks spec->workers alive, free workers (an elastic job: as many as there are,
 * from spec->workers_min up to spec->workers; *n says how many), marks them as the job's. Workers
 * that an older job waiting for them would take now are left to it (taken_by_older): the job then
 * waits as it does for workers that are not there. */
sc_status coord_jobs_choose_workers(coord *c, const char *job_id, const coord_jobspec *spec,
                                    coord_chosen_worker **out, size_t *n, sc_err *err);

/* Copies registry worker `w` (id, name, endpoint, its hardware report unpacked) into *cw;
 * false when the report cannot be read (out of memory). No profile, no link figure. */
bool coord_jobs_chosen_fill(coord_chosen_worker *cw, const coord_worker *w);

/* The endpoint of worker `w`'s block server (HardwareReport.state_endpoint) into buf; false
 * when it has none (an older worker). */
bool coord_worker_state_endpoint(const coord_worker *w, char *buf, size_t size);

/* Reorders workers so those of one host are adjacent (first-appearance order), as the cluster
 * format numbers devices server by server. */
void coord_jobs_group_by_host(coord_chosen_worker *ws, size_t n);

/* Marks in used[n] the chosen workers that the plan's stages run on (device ids index ws[]).
 * A strategy may leave some out (a stage cap, or a faster plan on fewer devices). */
sc_status coord_jobs_plan_workers_used(const char *plan_json, size_t n, bool *used, sc_err *err);

/* Gives the chosen workers that the plan leaves out back to the pool: their registry entries
 * lose the job (under c->lock) and the job's stored worker list names only the planned ones, so
 * that cancel, recovery and a restart deal with those alone. Wakes the driver for jobs waiting
 * for workers. */
void coord_jobs_release_unplanned(coord *c, const char *id, const coord_chosen_worker *ws, size_t n,
                                  const bool *used);

/* ---- jobs_stall.c: a running job whose stages stop stepping ---------------------------------- */

/* A running job's stall bound, in seconds: COORD_STALL_ITERATIONS times its iteration time (the
 * plan's prediction, or the measured one when longer), at least COORD_STALL_MIN_S; before its
 * first step (connecting, loading or taking over its state) COORD_STALL_START_S more, and as
 * much again at its last step (which writes the export and the final checkpoint). */
#define COORD_STALL_ITERATIONS 20
#define COORD_STALL_MIN_S 30.0
#define COORD_STALL_START_S 120.0
double coord_jobs_stall_bound_s(double predicted_iteration_s, double measured_iteration_s,
                                bool stepped);

/* Under c->lock, from the control loop: a running job none of whose stages reported a new step
 * within its stall bound is re-planned (recovering, from its last checkpoint), its workers told
 * to STOP. A worker whose stage then does not stop says it is stuck and is left out of plans
 * until its stage ends. A job pausing for a move is not judged. */
void coord_jobs_check_stalls(coord *c, double now_s);

/* ---- jobs_fit.c: whether the model can be trained on the chosen workers at all ------------ */

/* Bytes one parameter takes to train with the job's optimizer: the weight, its gradient and the
 * optimizer's state (adamw: two moments; sgd: the momentum, when it has one), as fp32. */
uint64_t coord_jobs_train_bytes_per_param(const coord_jobspec *spec);

/* Refuses (SC_ERR_TOO_LARGE, naming the bytes needed and held and what would help) a model
 * whose training state alone (coord_jobs_train_bytes_per_param, activations not counted) cannot
 * fit in the `n` chosen workers' memory together, or whose largest block cannot fit in the
 * largest one: no plan fits it, and profiling it would only take a worker's memory and time.
 * A lower bound: a model it lets through may still not fit, which profiling then tells. */
sc_status coord_jobs_check_fit(const coord_jobspec *spec, const coord_chosen_worker *ws, size_t n,
                               sc_err *err);

/* ---- jobs_transports.c: the data plane recorded in the plan ---------------------------------- */

/* Records in the plan (its "transports": one kind per stage boundary, "zmq" or "nccl") which
 * data plane each boundary uses, chosen from the spec and the workers' hardware, so that status
 * shows it and every worker is assigned by the same choice. Replaces *plan_json. */
sc_status coord_jobs_add_transports(const coord_jobspec *spec, const coord_chosen_worker *ws,
                                    size_t n, char **plan_json, sc_err *err);

/* ---- jobs_dispatch.c: the calls and commands that profile, assign and start a job --------- */

/* Measures the link between the coordinator and worker `w` into w->link_bytes_per_s
 * (link_probe.h); a failure is logged and leaves it 0. A network call: without c->lock. */
void coord_jobs_probe_link(const coord *c, coord_chosen_worker *w);

/* Under c->lock: the links that coord_jobs_probe_link measured among ws[0..n) (those with
 * link_probed_unix_ms set) become their workers' last probe in the registry, which the cluster
 * view shows (ListWorkers). */
void coord_jobs_note_probes(coord *c, const coord_chosen_worker *ws, size_t n);

/* Profiles the model on the chosen workers that have no profile yet (each on its own device),
 * filling ws[i].profile_json: workers of one server one at a time, those of distinct servers (or
 * each on a GPU of its own) at once; then measures the link to the coordinator of each worker
 * without a figure (ws[i].link_bytes_per_s), one at a time.
 * A failed probe is logged and leaves the figure 0 (the worker's report then stands); only a
 * failed profile is an error. Network calls: the caller does not hold c->lock. */
sc_status coord_jobs_profile_all(coord *c, const coord_jobspec *spec, const char *job_id,
                                 coord_chosen_worker *ws, size_t n, sc_err *err);

/* Groups chosen workers into those that may be profiled at the same time: group[i] (from 0) for
 * each of ws[n]; returns how many groups. One group per server (its workers share its
 * processors), or one per worker where every worker of a server drives a GPU no other one of
 * them drives (their measurements share no processor: the host's threads only launch). */
int coord_jobs_profile_groups(const coord_chosen_worker *ws, size_t n, int *group);

/* Under c->lock: fills the profile of each chosen worker without one from the profiles kept
 * across jobs (profile_cache.h) when one was measured for the same model, micro-batch sizes,
 * precision and data on the worker as it is registered now; returns how many, and names them
 * in `note` ("w-1 (from job-1), ..."). */
size_t coord_jobs_profiles_cached(coord *c, const coord_jobspec *spec, coord_chosen_worker *ws,
                                  size_t n, char *note, size_t size);

/* Keeps the profiles measured for job `job_id` (those of ws[i] with fresh[i]) for later jobs.
 * Takes c->lock. */
void coord_jobs_profiles_keep(coord *c, const coord_jobspec *spec, const char *job_id,
                              const coord_chosen_worker *ws, size_t n, const bool *fresh);

/* Sends each worker its stage of the plan; `endpoints` (a JSON array, filled) gets, per stage,
 * the array of its replicas' data endpoints in replica order. */
sc_status coord_jobs_assign_all(const coord *c, const coord_jobspec *spec, const char *spec_json,
                                const char *job_id, const char *plan_json, uint64_t resume_step,
                                coord_chosen_worker *ws, size_t n, json_t *endpoints, sc_err *err);

/* Tells every worker of the plan (used[i]) where its neighbours receive and to start training
 * after `resume_step` (the state of which it loads, from its checkpoint or from the block
 * servers of all `n` workers: START's state_sources); `last_checkpoint` is the job's newest
 * complete checkpoint (resume_step, or older after a rebalance's pause). `reason` (NULL: the
 * usual) goes in the job's history. The job is running from then on. */
void coord_jobs_start_training(coord *c, const char *id, const coord_jobspec *spec,
                               const char *plan_json, json_t *endpoints, uint64_t resume_step,
                               uint64_t last_checkpoint, const char *reason,
                               coord_chosen_worker *ws, size_t n, const bool *used);

/* ---- jobs_transitions.c: the running jobs' progress table and their moves between states -- */

/* Under c->lock: forgets entry i of c->running. */
void coord_jobs_progress_remove(coord *c, size_t i);

/* Under c->lock: forgets the progress of job `job_id`, if it has any. */
void coord_jobs_progress_drop(coord *c, const char *job_id);

/* Under c->lock: how many workers of the registry job `job_id` holds. */
size_t coord_jobs_held(coord *c, const char *job_id);

/* Under c->lock: moves job `job_id` to recovering for `reason` (logged), gives back its
 * workers (its progress entry is dropped: a pointer to it is stale after a true return) and
 * wakes the driver. False when the store refuses the transition (nothing changed). */
bool coord_jobs_recover(coord *c, const char *job_id, const char *reason);

/* Under c->lock: the first step after job `job_id`'s move ran: workers that left and whose
 * blocks that move took are told to go (COMMAND_SHUTDOWN) and counted dead. */
void coord_jobs_shutdown_left(coord *c, const char *job_id);

/* Under c->lock: starts the pause before a move of running job p (p->why, p->decided_s and
 * p->plan_s already say why and when): every replica is told to pause after `pause_step`, and
 * the job is rebalancing from now on ("...; pausing after step N"), while its stages train on
 * to that step; the driver leaves it alone until coord_jobs_pause_done. */
void coord_jobs_pause_begin(coord *c, coord_progress *p, uint64_t pause_step);

/* Under c->lock: replica (s, k) of p reports it paused after `step`. Once every replica paused
 * after the pause step, the job's reason (and its history's rebalancing entry) says so ("...;
 * paused after step N in T s") and the driver is woken; one that paused past it moves the
 * pause step for all (a pipedream job recovers instead). Returns false when the job went to
 * recovery (p is gone then). */
bool coord_jobs_pause_report(coord *c, coord_progress *p, int s, int k, uint64_t step);

/* Under c->lock: whether every replica of p paused after its pause step (a move may begin). */
bool coord_jobs_pause_done(const coord_progress *p);

/* ---- jobs_rebalance.c: measured speeds and the decision to re-plan ------------------------- */

/* A worker this far off the plan's speed (either way), or a link this far off its model, is a
 * change worth evaluating. */
#define COORD_REBALANCE_CHANGE 0.4

/* Under c->lock: whether replica (s, k) of p has a measured speed in this run (its baseline's
 * reports are in). */
bool coord_jobs_speed_known(const coord_progress *p, int s, int k);

/* Under c->lock: whether p's first iterations (its baseline) were already more than CHANGE
 * over its prediction: nothing changed while it ran, it never went as planned. */
bool coord_jobs_baseline_off(const coord_progress *p);

/* ---- jobs_links.c: the links training measures ---- */

/* Under c->lock: a report of worker `worker_id` (its envelope stamped sent_ns on its clock, and
 * it arrived at received_ns here): its clock sample, and, when the report is of a step not seen
 * before (`fresh`; heartbeats repeat the last one), its neighbours' transfers as link samples. */
void coord_jobs_links_observe(coord *c, coord_progress *p, const char *worker_id,
                              const Stagecraft__IterationReport *r, uint64_t sent_ns,
                              uint64_t received_ns, bool fresh);
/* Under c->lock: whether a link between two neighbouring stages of p's plan is off its expected
 * speed by more than LINK_CHANGE and its transfers then take more than LINK_WEIGHT of
 * `iteration_s` more or less; *worst is the furthest one's |log(measured / expected)| and `why`
 * names it ("link w-1 ('a') -> w-2 ('b') ... at 0.1x its expected speed (... bytes/s measured,
 * ... expected ...)"). */
bool coord_jobs_links_changed(coord *c, const coord_progress *p, double iteration_s, double *worst,
                              char *why, size_t size);
/* Under c->lock: per stage of p, one micro-batch's activation (to the next stage, *_f) and
 * gradient (to the previous, *_b) transfer time at the links' expected and measured speeds
 * (0 where unmeasured). Returns whether any link of the plan is measured. */
bool coord_jobs_links_transfer_s(coord *c, const coord_progress *p, double *planned_f,
                                 double *planned_b, double *now_f, double *now_b);

/* ---- jobs_reduce.c: the copies' all-reduce training measures ---- */

/* Under c->lock: a fresh report of a copy of a replicated stage (after coord_jobs_links_observe,
 * which keeps the clock samples): its all-reduce, less the wait for the slowest copy, as a
 * sample of its worker's all-reduce speed (when the stage's copies share one host). */
void coord_jobs_reduce_observe(coord *c, coord_progress *p, const char *worker_id,
                               const Stagecraft__IterationReport *r, bool fresh);
/* Under c->lock: per stage of p, the copies' all-reduce per iteration as the plan charges it
 * (planned) and at its copies' measured speeds (now: the slowest copy's; as planned where
 * unmeasured). Returns whether any stage's is measured. */
bool coord_jobs_reduce_s(coord *c, const coord_progress *p, double *planned, double *now);
/* Under c->lock: whether a stage's all-reduce measures more than REDUCE_CHANGE off what the plan
 * charges and that is more than REDUCE_WEIGHT of `iteration_s` (never under pipedream, whose
 * rounds the plan counts otherwise); `why` names the furthest one. */
bool coord_jobs_reduce_changed(coord *c, const coord_progress *p, double iteration_s, char *why,
                               size_t size);

/* Under c->lock: a report of one replica: keeps its measured speed, marks the job for
 * evaluation when a worker's speed changed, and follows a pause under way (parked reports).
 * Returns false when the job left running for recovery: p is gone, read nothing more of it. */
bool coord_jobs_rebalance_observe(coord *c, coord_progress *p,
                                  const Stagecraft__IterationReport *r);

/* ---- jobs_reprobe.c: probing again what a running job's plan cannot see -------------------- */

/* Under c->lock: a running job marked for evaluation, or due to profile again the workers a
 * re-plan left out (its id into `id`), if any. */
bool coord_jobs_rebalance_wanted(coord *c, char *id, size_t size);

/* A driver thread's turn for a running job: profiles the workers its plan left out when due,
 * then evaluates a re-plan when marked (coord_jobs_rebalance). Takes c->lock itself. */
void coord_jobs_rebalance_tick(coord *c, const char *id);

#endif /* COORD_JOBS_INTERNAL_H */
