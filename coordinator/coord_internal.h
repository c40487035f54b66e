/*
 * The coordinator's shared state (struct coord and the running jobs' progress), read and written
 * by its own files (coordinator.c, service.c, command_queue.c, jobs_*.c) under c->lock; not part
 * of its interface. It holds data only: each file's functions are declared in that file's
 * header (command_queue.h, tokens.h, service.h, jobs.h).
 */
#ifndef COORD_INTERNAL_H
#define COORD_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "coordinator/ckpt_copies.h"
#include "coordinator/command_queue.h"
#include "coordinator/coordinator.h"
#include "coordinator/registry.h"
#include "coordinator/store.h"
#include "coordinator/tokens.h"
#include "proto/control.pb-c.h"
#include "proto/sc_control.h"
#include "proto/sc_rpc.h"

#define COORD_MAX_STAGES 64
#define COORD_MAX_REPLICAS 16
#define COORD_MAX_RUNNING 32
#define COORD_MAX_DRIVING 16 /* jobs driven (profiled, planned, assigned) at once */

/* What the running job's stages last reported (in memory; step and checkpoint also go to the
 * store). */
typedef struct {
    char job_id[COORD_ID_MAX];
    int n_stages;
    uint64_t steps;                 /* the job's target */
    int replicas[COORD_MAX_STAGES]; /* replicas of each stage */
    /* last completed step and checkpoint of each replica of each stage */
    uint64_t step[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    uint64_t checkpoint[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    /* the workers holding copies of each stage's checkpoints (ckpt_copies.h): how many, and the
     * newest step each one reported holding */
    int copies[COORD_MAX_STAGES];
    uint64_t copied[COORD_MAX_STAGES][COORD_MAX_CKPT_COPIES];
    double iteration_s[COORD_MAX_STAGES];
    double busy_s[COORD_MAX_STAGES];
    double memory_bytes[COORD_MAX_STAGES]; /* the largest a copy of the stage reported */
    double loss;                           /* from the last stage */
    bool loss_known; /* a last-stage report brought a loss since this run began */
    double loss_scale;      /* fp16: the last stage's loss scale (0: not fp16) */
    uint64_t skipped_steps; /* fp16: the steps skipped on an overflow this run */
    /* the job's throughput over wall-clock time: samples of the steps done (every stage's
     * every copy) since the window's start, over the time since; the window restarts from its
     * middle once it spans RATE_WINDOW_S, so it follows a job that slows down or speeds up */
    double samples_per_s;
    uint32_t batch_size;
    double rate_t0_s, rate_t1_s; /* sc_clock_now_s() of the window's start and middle */
    uint64_t rate_step0, rate_step1;
    double predicted_iteration_s;
    /* the stall watchdog (jobs_stall.c): when the steps the stages reported last changed, and
     * their sum then (0 s: not looked at yet) */
    double moved_s;
    uint64_t moved_sum;
    uint64_t stored_step;       /* what the store has */
    uint64_t history_step;      /* the newest step of this run in the job's series (history.h) */
    uint64_t complete_sent;     /* the last checkpoint step announced complete to the workers */
    int checkpoint_error_stage; /* the stage whose failure the store shows, -1 when none */
    bool finished;              /* the job succeeded; figures kept for status */
    char *start_payload;        /* the START command's payload, sent again when one is lost */
    uint64_t resume_step;       /* the START command's step */
    uint64_t run;               /* this start's id (START payload "run"; stamped on reports) */
    uint64_t last_checkpoint;   /* the newest complete checkpoint when this run started */
    /* The measured speeds (jobs_rebalance.c): the worker of each replica, its busy time per
     * iteration smoothed, and its mean over the first reports of the run (the baseline the plan
     * was made for); the same for the job's iteration time (the last stage's). */
    char worker_of[COORD_MAX_STAGES][COORD_MAX_REPLICAS][COORD_ID_MAX];
    double busy_avg[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    double busy_base[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    int base_n[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    double iter_avg, iter_base;
    int iter_base_n;
    /* the copies' all-reduce of each stage (jobs_reduce.c): what the plan charges per iteration
     * (its stages[].allreduce_s; 0: one copy, or a plan without it) and the gradient bytes the
     * copies' reports say they reduce (0: none reported yet) */
    double planned_reduce_s[COORD_MAX_STAGES];
    double reduce_bytes[COORD_MAX_STAGES];
    /* per replica: its profiled work per iteration (seconds, the worker's own profile), the
     * scale the plan put on that profile, and the worker's reference busy-per-work ratio (from
     * the first run measured on its profile): busy / work / reference is its speed factor */
    double work[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    double scale[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    double ref[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    /* the reference came from an earlier run of the job: a shorter baseline will do */
    bool ref_before[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    /* A rebalance: evaluate (the driver re-plans with the measured speeds), then the pause of
     * every replica after pause_step (0: none under way) and where each one paused. */
    bool rebalance_auto;        /* the job's "rebalance" option: re-plan by itself on a change */
    uint32_t workers_max;       /* an elastic job: the most workers it takes (0: not elastic) */
    uint32_t workers_min;       /* and the fewest */
    char leaving[COORD_ID_MAX]; /* a worker leaving: the rebalance under way moves off it */
    /* a worker the plan left out profiled or probed again at another speed: what changed, for
     * the history when nothing the job runs on did ("" none) */
    char reprobed[COORD_REASON_MAX];
    bool async; /* pipedream: stages run minibatches ahead and drain together */
    bool evaluate;
    bool probe;             /* the driver should profile the workers a re-plan left out */
    bool base_probed;       /* the links were probed again for a baseline far over the prediction */
    double probed_s;        /* when it last did */
    uint64_t off_since;     /* the step since which reports find a worker off the plan */
    uint64_t quiet_until;   /* no evaluation before this step */
    double quiet_departure; /* the furthest worker's departure from the plan's speed then */
    double changed_s;       /* when the speeds were first seen off the baseline (0: they are not) */
    uint64_t pause_step;
    uint64_t paused[COORD_MAX_STAGES][COORD_MAX_REPLICAS];
    bool pause_reported;      /* every replica paused: said in the store, the driver woken */
    double decided_s, plan_s; /* when the rebalance was decided; planning time */
    char why[COORD_REASON_MAX];
    /* after a rebalance started this run: when, to report the move's time at its first step */
    double moved_from_s;
    /* Freezing (freezing.h): the job freezes; each stage's first block (the reports' block
     * norms start there); the prefix the policy asked for, not yet moved to (0: none), and why */
    bool freeze;
    int first_block[COORD_MAX_STAGES];
    int freeze_to;
    char freeze_why[COORD_REASON_MAX];
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

    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t wake;  /* signalled when the job driver has work */
    coord_registry *registry;
    coord_store *store;
    coord_cmd *cmd_head, *cmd_tail;
    coord_progress running[COORD_MAX_RUNNING];
    size_t n_running;
    struct coord_speeds *speeds;          /* each job's speed model (speeds.h) */
    struct coord_freezing *freezing;      /* each job's freezing policy (freezing.h) */
    struct coord_profile_cache *profiles; /* workers' profiles across jobs (profile_cache.h) */
    uint64_t last_run;                    /* the id of the latest start (coord_progress.run) */
    /* jobs a driver thread is taking through profiling, planning and assignment: each has a
     * thread of its own, so a worker that does not answer holds up only its own job */
    char driving[COORD_MAX_DRIVING][COORD_ID_MAX];
    size_t n_driving;
    bool stopping;

    sc_rpc_server *rpc;      /* thread-safe; not guarded */
    struct coord_http *http; /* its own threads; NULL when off; not guarded */
    void *zctx;              /* ZeroMQ context of the control socket and the ZAP handler */
    sc_ctl_zap *zap;         /* admits registered workers' CURVE keys; NULL without CURVE */
    char curve_secret[SC_CTL_KEY_Z85_LEN + 1]; /* "" when CURVE is off */
    uint8_t curve_public[32];
    sc_ctl *ctl; /* owned by the control-loop thread */
    pthread_t driver;
    bool driver_started;
};

#endif /* COORD_INTERNAL_H */
