/*
 * Internals shared by the coordinator's own files (coordinator.c, service.c, jobs.c); not part
 * of its interface.
 */
#ifndef COORD_INTERNAL_H
#define COORD_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "coordinator/coordinator.h"
#include "coordinator/registry.h"
#include "coordinator/store.h"
#include "proto/control.pb-c.h"
#include "proto/sc_control.h"
#include "proto/sc_rpc.h"

#define COORD_TOKEN_MAX 128

/* A control command waiting for the control loop to send it. */
typedef struct coord_cmd {
    struct coord_cmd *next;
    char worker_id[COORD_ID_MAX];
    Stagecraft__CommandKind kind;
    char job_id[COORD_ID_MAX];
    uint64_t step;
    char *payload_json; /* owned, may be NULL */
} coord_cmd;

#define COORD_MAX_STAGES 64
#define COORD_MAX_REPLICAS 16
#define COORD_MAX_RUNNING 32
#define COORD_MAX_DRIVING 16 /* jobs driven (profiled, planned, assigned) at once */

/* What the running job's stages last reported (in memory; step and checkpoint also go to the
 * store). */
typedef struct {
    char job_id[COORD_ID_MAX];
    int n_stages;
    uint64_t steps;            /* the job's target */
    int replicas[COORD_MAX_STAGES];        /* replicas of each stage */
    /* last completed step and checkpoint of each replica of each stage */
    uint64_t step[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    uint64_t checkpoint[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    double iteration_s[COORD_MAX_STAGES];
    double busy_s[COORD_MAX_STAGES];
    double loss;               /* from the last stage */
    double samples_per_s;
    double predicted_iteration_s;
    uint64_t stored_step;      /* what the store has */
    uint64_t complete_sent;    /* the last checkpoint step announced complete to the workers */
    int checkpoint_error_stage; /* the stage whose failure the store shows, -1 when none */
    bool finished;             /* the job succeeded; figures kept for status */
    char *start_payload;       /* the START command's payload, sent again when one is lost */
    uint64_t resume_step;      /* the START command's step */
    uint64_t run;              /* this start's id (START payload "run"; stamped on reports) */
} coord_progress;

struct coord {
    coord_cfg cfg;
    char listen_addr[256];
    char state_dir[1024];
    char join_token[COORD_TOKEN_MAX];
    char client_token[COORD_TOKEN_MAX];
    char join_token_path[1100];
    char client_token_path[1100];
    char control_endpoint[300];
    int state_lock_fd; /* STATE/coordinator.lock, flock'd for the coordinator's life; -1 */

    pthread_mutex_t lock;   /* guards everything below */
    pthread_cond_t wake;    /* signalled when the job driver has work */
    coord_registry *registry;
    coord_store *store;
    coord_cmd *cmd_head, *cmd_tail;
    coord_progress running[COORD_MAX_RUNNING];
    size_t n_running;
    uint64_t last_run; /* the id of the latest start (coord_progress.run) */
    /* jobs a driver thread is taking through profiling, planning and assignment: each has a
     * thread of its own, so a worker that does not answer holds up only its own job */
    char driving[COORD_MAX_DRIVING][COORD_ID_MAX];
    size_t n_driving;
    bool stopping;

    sc_rpc_server *rpc;     /* thread-safe; not guarded */
    void *zctx;             /* ZeroMQ context of the control socket and the ZAP handler */
    sc_ctl_zap *zap;        /* admits registered workers' CURVE keys; NULL without CURVE */
    char curve_secret[SC_CTL_KEY_Z85_LEN + 1]; /* "" when CURVE is off */
    uint8_t curve_public[32];
    sc_ctl *ctl;            /* owned by the control-loop thread */
    pthread_t driver;
    bool driver_started;
};

/* service.c: the Coordinator gRPC method table. */
extern const sc_rpc_method coord_service_methods[];
extern const size_t coord_service_n_methods;

/* jobs.c: the job-driver thread. */
void *coord_driver_main(void *arg);
/* Under c->lock: marks the jobs of a worker that died as recovering and wakes the driver. */
void coord_jobs_worker_died(coord *c, const coord_worker *w);

/* Under c->lock: a worker's training stopped with an error (e->code an sc_status name): the job
 * is re-planned when a neighbour vanished (time-out, unavailable), resumed from an older step
 * when the checkpoint to resume from did not load and the worker names an older one that does
 * (e->checkpoint_step, e->intact_checkpoint_step), else it fails. */
void coord_jobs_worker_error(coord *c, const coord_worker *w, const Stagecraft__Error *e);

/* Under c->lock: frees the workers reserved for a job (it ended or is re-planned). */
void coord_jobs_release_workers(coord *c, const char *job_id);

/* Under c->lock: records a stage's iteration report; ends the job when every stage is done. */
void coord_jobs_report(coord *c, const char *worker_id, const Stagecraft__IterationReport *r);

/* Under c->lock: the progress of a running job, or NULL. */
coord_progress *coord_jobs_progress(coord *c, const char *job_id);

/* Under c->lock: whether an error of `run` (0: of no particular run, e.g. a START refused)
 * concerns job `job_id` as it is now: a run's error counts only while that run trains. */
bool coord_jobs_run_is_current(coord *c, const char *job_id, uint64_t run);

/* Under c->lock: forgets every job's progress (the coordinator stops). */
void coord_jobs_progress_clear(coord *c);

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

/* coordinator.c: queues a command for the control loop (takes c->lock; payload copied). */
sc_status coord_queue_command(coord *c, const char *worker_id, Stagecraft__CommandKind kind,
                              const char *job_id, uint64_t step, const char *payload_json,
                              sc_err *err);

/* The same, with c->lock already held. */
sc_status coord_queue_command_locked(coord *c, const char *worker_id,
                                     Stagecraft__CommandKind kind, const char *job_id,
                                     uint64_t step, const char *payload_json, sc_err *err);

/* Constant-time comparison of a presented token with the expected one. */
bool coord_token_equal(const char *presented, const char *expected);

#endif /* COORD_INTERNAL_H */
