/*
 * The Worker gRPC service (Describe, AssignStage, Profile, Release, ProbeLink, GetTimeline,
 * ReadLog) and
 * the worker state it shares with the agent's control loop.
 */
#ifndef WK_SERVICE_H
#define WK_SERVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/sc_rpc.h"
#include "proto/stagecraft.pb-c.h"

#define COORD_WORKER_ID_MAX 64
#define WK_SERVICE_MAX_METHODS 8
/* The newest log lines a worker process keeps for ReadLog (sc_log_keep_lines): at most
 * WK_LOG_LINES * SC_LOGRING_LINE_MAX bytes. */
#define WK_LOG_LINES 1000
/* Micro-batch sizes one Profile request may ask for (each at most
 * SC_WIRE_MAX_MICROBATCH_SIZE). */
#define WK_PROFILE_MAX_SIZES 16
/* The most payload bytes a ProbeLink reply carries: the default RPC message limit less room for
 * the message's header and framing. A request for more is refused (SC_ERR_TOO_LARGE). */
#define WK_PROBE_MAX_BYTES (SC_RPC_DEFAULT_MAX_MESSAGE_BYTES - 1024)

/* Trainers a worker keeps while their threads wind down (each may take wk_trainer_stop_ms
 * before the worker says it is stuck, state "stuck": a step that does not return, e.g. a hung
 * kernel). */
#define WK_PARKED_MAX 8

typedef struct {
    pthread_mutex_t lock; /* guards every field below except `hardware` */
    char id[COORD_WORKER_ID_MAX];
    uint64_t epoch;
    char device[32];
    Stagecraft__HardwareReport *hardware; /* set before serving, immutable after */
    char state[32];                       /* idle, profiling, assigned, training, leaving, stuck */
    char job_id[COORD_WORKER_ID_MAX];
    uint32_t stage, replica, first_block, last_block;
    char transport[16];
    char *plan_json;  /* owned */
    char *model_json; /* owned */
    uint64_t step;
    struct wk_trainer *trainer;     /* the assigned stage's trainer, or NULL */
    uint64_t trainer_gen;           /* counts the trainers set: tells a new one from an old */
    char bind_host[256];            /* immutable: host the data-plane inbox binds */
    char checkpoint_dir[1100];      /* immutable: where stage checkpoints go */
    struct wk_block_server *blocks; /* immutable: serves kept state and checkpoints to peers */
    bool refuse_probe; /* immutable: a test's fault, ProbeLink refused (unimplemented) */
    bool hang_stage;   /* immutable: a test's fault, each stage hangs (wk_trainer_fault_hang) */
    bool slow_profile; /* a test's fault: the first profile runs for an hour unless cancelled */
    /* The profile running (state "profiling"): the job it measures for, and its cancel flag
     * (kn_profile_cfg.cancel), set when that job is released or stopped, or the worker stops */
    char profile_job[COORD_WORKER_ID_MAX];
    atomic_int profile_cancel;
    bool stopping; /* the process stops: no new profile starts */
    /* trainers told to stop whose threads have not ended yet, and when each counts as stuck
     * (monotonic ns): wk_state_reap frees them once they end; one past its time makes the
     * worker "stuck", and it takes no stage until none is left */
    struct wk_trainer *parked[WK_PARKED_MAX];
    uint64_t stuck_at_ns[WK_PARKED_MAX];
} wk_state;

/* Fills `out` with the Worker service's methods bound to `st`; returns how many. */
size_t wk_service_methods(wk_state *st, sc_rpc_method *out, size_t max);

/* The data-plane kinds of an assignment this worker can run: transport and transport_next
 * "zmq", or "nccl" when `nccl_here` (a CUDA + NCCL build driving a cuda:N device); replica_reduce
 * empty, "host", or "nccl" when `nccl_here`. SC_ERR_UNSUPPORTED for nccl that this worker lacks,
 * SC_ERR_INVALID for an unknown kind, each naming the field and what would be valid. */
sc_status wk_assign_kinds_check(const Stagecraft__AssignStageRequest *req, bool nccl_here,
                                sc_err *err);

/* Drops the assignment of `job_id` (any job when NULL) and returns to idle, and cancels a
 * profile running for that job (for any job when NULL): the worker stays "profiling" until the
 * profile has returned. Takes st->lock. Never waits for the stage's thread: it is told to stop
 * and parked (wk_state_reap). */
void wk_state_release(wk_state *st, const char *job_id, const char *why);

/* The worker stops (SIGTERM, SIGINT): cancels the running profile, and refuses a new one.
 * Takes st->lock. */
void wk_state_stopping(wk_state *st);

/* Frees the parked trainers whose threads have ended, and sets the state "stuck" while one is
 * past its time to stop (wk_trainer_stop_ms from when it was told), back to "idle" once none
 * is. Never blocks on a
 * thread; the agent calls it before each heartbeat. Takes st->lock. */
void wk_state_reap(wk_state *st);

/* wk_state_reap until no trainer is parked or timeout_ms has passed (the worker stops: it
 * frees what ends in time and leaves a stuck thread to the process's exit). */
void wk_state_reap_wait(wk_state *st, int timeout_ms);

#endif /* WK_SERVICE_H */
