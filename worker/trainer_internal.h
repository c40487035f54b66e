/*
 * wk trainer internals (worker/ only): the trainer record and what its files share. The
 * trainer's files, from the bottom up, each calling only those before it:
 *   trainer_report.c  the report queue and the iteration report's figures;
 *   trainer_resume.c  loading the resume step's state (own checkpoint, other workers' blocks,
 *                     an older step when that fails) and the checkpoint folder;
 *   trainer_fault.c   the faults tests inject (a hung step);
 *   trainer_loop.c    the training thread: connect, resume, step, checkpoint, report, pause;
 *   trainer.c         the lifecycle of trainer.h: build from AssignStage, START, stop, free.
 * Not part of the worker's API (trainer.h is).
 */
#ifndef WK_TRAINER_INTERNAL_H
#define WK_TRAINER_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "worker/blocks/block_fetch.h"
#include "worker/blocks/block_server.h"
#include "worker/blocks/ckpt_copier.h"
#include "worker/runtime/runner.h"
#include "worker/trainer.h"

#define WK_TRAINER_LOG "trainer"
#define WK_TRAINER_QUEUE_MAX 256

struct wk_trainer {
    rt_runner *runner;
    char job_id[64];
    uint32_t stage, n_stages, replica;
    int first_block, last_block, frozen_blocks; /* the stage's blocks; the model's frozen prefix */
    char checkpoint_dir[1100];
    json_t *endpoints; /* per stage, its replicas' data endpoints (from START) */
    uint64_t steps, resume_step, checkpoint_every;
    uint64_t last_checkpoint; /* the job's newest complete checkpoint at START (<= resume_step) */
    uint64_t run;             /* the START payload's "run": stamped on every report and error */
    uint64_t checkpoint_keep; /* complete checkpoints kept (0: all); set by START */
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_bool ended; /* the thread has returned (wk_trainer_stop_within, wk_trainer_reap) */
    _Atomic uint64_t iteration_us; /* the last step's measured time (wk_trainer_stop_ms) */
    uint64_t hang_after;           /* a test's fault: steps after which the step hangs (0: none) */
    _Atomic uint64_t step;
    /* A move (COMMAND_REBALANCE): the step after which training pauses, 0 for none; the paused
     * thread waits on `resume` (under `lock`) for a later step or the stop. */
    _Atomic uint64_t pause_after;
    pthread_cond_t resume;
    wk_block_server *blocks; /* where a paused stage keeps its state (may be NULL) */
    json_t *sources;         /* START's "state_sources": block servers to resume from, or NULL */
    wk_copier *copier;       /* copies of other stages' checkpoints held here, or NULL */
    char *model_json;        /* the job's model, for the copier */
    /* the job's "export": DIR, "" for none; the plan's stage cuts (n_stages + 1 first blocks) */
    char export_dir[1100];
    int *export_cuts;

    pthread_mutex_t lock; /* guards the queue */
    wk_trainer_msg queue[WK_TRAINER_QUEUE_MAX];
    size_t head, count;
};

/* ---- trainer_report.c ------------------------------------------------------------------ */

/* Queues m (moved: the queue owns its buffers), stamped with the run; drops the oldest report
 * when the control loop is WK_TRAINER_QUEUE_MAX behind. Any thread. */
void wk_trainer_push(wk_trainer *t, wk_trainer_msg *m);
/* Queues (and logs) an error printf(fmt, msg) with its code. */
void wk_trainer_push_error(wk_trainer *t, sc_status code, const char *fmt, const char *msg);
/* A report of this stage after `step`, its other figures zero. */
void wk_trainer_report_init(const wk_trainer *t, uint64_t step, wk_trainer_msg *m);
/* The copies this worker holds of other stages' checkpoints, the step's transfers and its
 * all-reduce, put in r (each left out when there is nothing or memory is short). */
void wk_trainer_report_copies(wk_trainer *t, Stagecraft__IterationReport *r);
void wk_trainer_report_links(const rt_report *rep, Stagecraft__IterationReport *r);
void wk_trainer_report_reduce(const rt_report *rep, Stagecraft__IterationReport *r);

/* ---- trainer_resume.c ------------------------------------------------------------------ */

/* Creates `path` and its parents (mode 0700); SC_ERR_IO naming the path. */
sc_status wk_trainer_make_dirs(const char *path, sc_err *err);
/* Loads the state of t->resume_step into the runner: its own checkpoint, else the blocks of
 * the job's state sources; keeps a checkpoint taken over as its own. */
sc_status wk_trainer_resume(wk_trainer *t, sc_err *err);
/* Reports that the resume step's state did not load (`why`), with the newest older step whose
 * state does load (0: none), for the coordinator to resume every stage from. */
void wk_trainer_push_resume_error(wk_trainer *t, const sc_err *why);

/* ---- trainer_fault.c ------------------------------------------------------------------- */

/* The step of a test's fault (wk_trainer_fault_hang): stuck, stop or not, until
 * wk_trainer_fault_release; then the fault is spent. */
void wk_trainer_fault_hang_step(wk_trainer *t, uint64_t step);

/* ---- trainer_loop.c -------------------------------------------------------------------- */

/* The training thread's body: returns when the steps are done, on stop, or after queueing the
 * error that ended it. */
void wk_trainer_train(wk_trainer *t);

#endif /* WK_TRAINER_INTERNAL_H */
