/*
 * The coordinator's durable state: jobs (spec, plan, state, progress), every state transition
 * with its reason, and the workers that registered (so a restarted coordinator gives a returning
 * worker its old id). One SQLite database, `stagecraft.db` in the state folder, in WAL mode.
 *
 * Every write is one transaction, committed before the call returns: a coordinator killed at any
 * moment loses no accepted job. A write that fails for want of space (the disk full) frees the
 * folder's reserve (store_reserve.h) and runs once more: the jobs already accepted go on being
 * recorded, while a new job is refused (SC_ERR_TOO_LARGE, naming the folder) and traces and
 * training series are not kept, until the disk has room for the reserve again. A failed write
 * never leaves a transaction open. Heartbeats are not stored (they are in-memory, see registry.h).
 * Not thread-safe: the coordinator's event-loop thread owns the store.
 */
#ifndef COORD_STORE_H
#define COORD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "coordinator/history.h"
#include "coordinator/job_state.h"

typedef struct coord_store coord_store;

#define COORD_ID_MAX 64
#define COORD_NAME_MAX 128
#define COORD_REASON_MAX 512

typedef struct {
    char id[COORD_ID_MAX]; /* "job-<n>" */
    char name[COORD_NAME_MAX];
    coord_job_state state;
    char reason[COORD_REASON_MAX];
    char *spec_json;  /* owned; the submitted stagecraft-job document */
    char *plan_json;  /* owned; NULL until planned */
    char *worker_ids; /* owned; comma-separated ids of the job's workers, or NULL */
    uint64_t step;
    uint64_t steps;
    uint64_t last_checkpoint_step;
    char checkpoint_error[COORD_REASON_MAX]; /* why a stage's latest checkpoint failed, or "" */
    int64_t created_unix_ms;
    int64_t updated_unix_ms;
} coord_job;

typedef struct {
    coord_job_state from;
    coord_job_state to;
    char reason[COORD_REASON_MAX];
    int64_t at_unix_ms;
} coord_transition;

typedef struct {
    char id[COORD_ID_MAX]; /* "w-<n>" */
    char name[COORD_NAME_MAX];
    char host[COORD_NAME_MAX];
    char endpoint[COORD_NAME_MAX];
    uint64_t epoch;
    uint8_t *hardware; /* owned; packed HardwareReport */
    size_t hardware_len;
    int64_t registered_unix_ms;
} coord_worker_rec;

/* Opens (creating if needed) `dir`/stagecraft.db. The folder is created when missing. */
sc_status coord_store_open(coord_store **out, const char *dir, sc_err *err);
void coord_store_close(coord_store **store);

/* Inserts a new job in state `submitted`; assigns job->id and the timestamps. */
sc_status coord_store_job_insert(coord_store *s, coord_job *job, sc_err *err);

/* Moves a job to `to`, recording the reason. SC_ERR_PRECONDITION when the transition is not
 * allowed (the message names both states); SC_ERR_NOT_FOUND for an unknown id. */
sc_status coord_store_job_transition(coord_store *s, const char *id, coord_job_state to,
                                     const char *reason, sc_err *err);

sc_status coord_store_job_set_plan(coord_store *s, const char *id, const char *plan_json,
                                   sc_err *err);
/* Updates the reason shown for a job's current state without changing the state. */
sc_status coord_store_job_set_reason(coord_store *s, const char *id, const char *reason,
                                     sc_err *err);

/* Updates the reason of a job's current state and of the transition that entered it (its
 * history's last entry), for a state whose account is completed while it lasts (a rebalance
 * that says how its pause went once every stage paused). The state and times do not change. */
sc_status coord_store_job_amend_reason(coord_store *s, const char *id, const char *reason,
                                       sc_err *err);

/* Records the workers a job runs on ("w-1,w-4"), or NULL to clear. */
sc_status coord_store_job_set_workers(coord_store *s, const char *id, const char *worker_ids,
                                      sc_err *err);
sc_status coord_store_job_set_progress(coord_store *s, const char *id, uint64_t step,
                                       uint64_t last_checkpoint_step, sc_err *err);

/* Records why a stage's latest checkpoint was not written ("" or NULL: every stage's was). */
sc_status coord_store_job_set_checkpoint_error(coord_store *s, const char *id, const char *text,
                                               sc_err *err);

/* Fills *job (free its strings with coord_job_clear). SC_ERR_NOT_FOUND for an unknown id. */
sc_status coord_store_job_get(coord_store *s, const char *id, coord_job *job, sc_err *err);

/* All jobs, oldest first; free with coord_job_list_free. */
sc_status coord_store_job_list(coord_store *s, coord_job **jobs, size_t *n, sc_err *err);

/* Keeps the trace of job `job_id`'s last window (`trace_json`, the trace file; `meta_json`, its
 * figures as the coordinator's GetTrace answers them), replacing one kept before. */
sc_status coord_store_trace_put(coord_store *s, const char *job_id, const char *trace_json,
                                const char *meta_json, sc_err *err);

/* The trace kept for job `job_id` into *trace_json and *meta_json (heap strings, caller frees).
 * SC_ERR_NOT_FOUND when none was kept. */
sc_status coord_store_trace_get(coord_store *s, const char *job_id, char **trace_json,
                                char **meta_json, sc_err *err);

/* Records points pts[n] (by step, oldest first) of job `job_id`'s training series: the points
 * it held at or after pts[0]'s step go first (a job that resumed from an earlier step trains
 * them again), and a series over `max` points is thinned (history.h). One transaction. */
sc_status coord_store_history_add(coord_store *s, const char *job_id,
                                  const coord_history_point *pts, size_t n, size_t max,
                                  sc_err *err);

/* Job `job_id`'s series, oldest step first, into *out (free() it; NULL and 0 when empty). */
sc_status coord_store_history_get(coord_store *s, const char *job_id, coord_history_point **out,
                                  size_t *n, sc_err *err);

/* A job's transitions, oldest first; caller frees *out with free(). */
sc_status coord_store_job_history(coord_store *s, const char *id, coord_transition **out, size_t *n,
                                  sc_err *err);

void coord_job_clear(coord_job *job);
void coord_job_list_free(coord_job **jobs, size_t n);

/* Inserts or replaces a worker record (by id). */
sc_status coord_store_worker_put(coord_store *s, const coord_worker_rec *w, sc_err *err);

/* All worker records, by id; free with coord_worker_list_free. */
sc_status coord_store_worker_list(coord_store *s, coord_worker_rec **out, size_t *n, sc_err *err);
void coord_worker_list_free(coord_worker_rec **list, size_t n);

#endif /* COORD_STORE_H */
