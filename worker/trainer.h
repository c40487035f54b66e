/*
 * The worker's training of one assigned stage: builds the stage runner when the coordinator
 * assigns the stage (binding its data-plane inbox), and on START runs the iterations in a
 * thread of its own, checkpointing every K steps and queueing one report per iteration for the
 * control loop to send.
 *
 * Threads: wk_trainer_new / start / stop / destroy come from the agent's threads under its
 * lock; the training thread touches only the runner and the report queue (its own lock).
 */
#ifndef WK_TRAINER_H
#define WK_TRAINER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "proto/control.pb-c.h"
#include "proto/stagecraft.pb-c.h"

typedef struct wk_trainer wk_trainer;
struct wk_block_server;

/* Builds the runner for an AssignStage request on `device`, binding its inbox on `bind_host`.
 * Checkpoints go to `checkpoint_dir`/JOB/; a paused stage keeps its state in `blocks` (may be
 * NULL), and a resumed one takes blocks it lacks from START's state_sources. Bad requests (unknown
 * data, a replicated stage, ...) are SC_ERR_INVALID / SC_ERR_UNSUPPORTED. */
sc_status wk_trainer_new(wk_trainer **out, const Stagecraft__AssignStageRequest *req,
                         const char *device, const char *bind_host, const char *checkpoint_dir,
                         struct wk_block_server *blocks, sc_err *err);

/* A move is coming (COMMAND_REBALANCE): training pauses after step `after_step` (after the step
 * in flight when that is later), keeps the stage's state in the block server given to
 * wk_trainer_new, and reports the pause (IterationReport.parked); a later call with a larger
 * step resumes it up to there. The stage is then replaced by a new assignment, or stopped. */
void wk_trainer_pause(wk_trainer *t, uint64_t after_step);

/* The data endpoint the neighbours connect to. */
const char *wk_trainer_endpoint(const wk_trainer *t);

/* Starts training from a START command's payload (stage endpoints, steps, resume step,
 * checkpoint interval). A second START restarts nothing and is refused. */
sc_status wk_trainer_start(wk_trainer *t, const char *payload_json, sc_err *err);
/* The "run" of a START payload, to stamp on the error that refuses it (0 when the payload has
 * none or cannot be read). */
uint64_t wk_start_run(const char *payload_json);

/* Every stage of the job holds the checkpoint of `step` (COMMAND_CHECKPOINT_COMPLETE): deletes
 * this stage's older checkpoints beyond the job's checkpoint_keep (rt_checkpoint_prune; only
 * on copy 0, which writes them; nothing when START gave no checkpoint_keep). Safe while the
 * training thread saves: it only touches files at or before `step`. */
sc_status wk_trainer_checkpoint_complete(wk_trainer *t, uint64_t step, sc_err *err);

/* Stops the training thread (aborting a step in flight), frees everything. Accepts NULL.
 * Waits for the thread however long it takes: see wk_trainer_stop_within. */
void wk_trainer_destroy(wk_trainer **t);

/* Stops the training thread like wk_trainer_destroy but waits for it at most timeout_ms: SC_OK
 * when it ended (*t freed and NULL; also for *t NULL), SC_ERR_TIMEOUT when it did not (a step
 * stuck in a kernel that does not return): *t then stays, told to stop, for wk_trainer_reap.
 * A thread told to stop saves and reports nothing more, however late it wakes up. */
sc_status wk_trainer_stop_within(wk_trainer **t, int timeout_ms, sc_err *err);

/* Whether the thread of a trainer that wk_trainer_stop_within left behind has ended at last:
 * then frees it, sets *t NULL and returns true. Never blocks. */
bool wk_trainer_reap(wk_trainer **t);

/* Whether the trainer's thread has ended (or never started). Never blocks. */
bool wk_trainer_ended(const wk_trainer *t);

/* How long the trainer may take to stop before its step counts as stuck: WK_TRAINER_STOP_MS, or
 * three of its measured iterations when longer (a slow step ends before it can stop). Any
 * thread. */
#define WK_TRAINER_STOP_MS 3000
uint64_t wk_trainer_stop_ms(const wk_trainer *t);

/* A test's fault (STAGECRAFT_WORKER_FAULTS=hang-stage): after `after_steps` steps of this
 * trainer, its thread hangs inside the step, deaf to stop, as a step stuck in a kernel would,
 * until wk_trainer_fault_release. */
void wk_trainer_fault_hang(wk_trainer *t, uint64_t after_steps);
/* Ends every such hang; async-signal-safe (a signal handler calls it). */
void wk_trainer_fault_release(void);

/* The runner's measured timeline (rt_runner_timeline): valid until wk_trainer_destroy; read it
 * from any thread with rt_timeline_snapshot. */
struct rt_timeline *wk_trainer_timeline(wk_trainer *t);

/* The last completed step (for heartbeats). */
uint64_t wk_trainer_step(const wk_trainer *t);

/* One queued message for the coordinator: an iteration report, or the error that stopped
 * training. Returns false when the queue is empty. The caller frees with
 * wk_trainer_msg_clear. */
typedef struct {
    bool is_error;
    Stagecraft__IterationReport report; /* grad_l1_per_block, checkpoint_error owned */
    sc_status code;                     /* of the error */
    char error[512];
    /* an error resuming: the checkpoint step that did not load, and this stage's newest older
     * one that does (0: none) */
    uint64_t checkpoint_step, intact_checkpoint_step;
    uint64_t run; /* the START payload's "run" (also in report.run) */
} wk_trainer_msg;

bool wk_trainer_pop(wk_trainer *t, wk_trainer_msg *out);
void wk_trainer_msg_clear(wk_trainer_msg *m);

#endif /* WK_TRAINER_H */
