/*
 * plan_sim: event simulator that plays a schedule's action lists over stage and link costs.
 *
 * Returns the iteration time, per-stage busy and idle time, the bubble fraction and the peak
 * number of stashed micro-batches per stage, and can keep every event for a Chrome trace
 * (chrome://tracing, Perfetto). Does not build schedules (plan_schedule) and does not know
 * blocks or devices: the caller gives per-stage times for one whole micro-batch, or, for
 * unequal micro-batch sizes per stage (plan_sim_run_sized), per-stage tables by size.
 *
 * Model: a stage runs one action at a time in list order; a receive waits for its data; a send
 * is asynchronous and queues on the link of its cut and direction, which carries one transfer
 * at a time (first come, first served). A unit carrying frac f of a micro-batch takes f times
 * the micro-batch's compute and transfer time, divided by `slice_efficiency` when f < 1.
 * zb1's backward is split: B takes bwd_s - wgrad_s and W wgrad_s, and a micro-batch stays
 * stashed from its F to its W (the weight gradient needs the stage's inputs).
 * Replicated stages (a schedule from plan_schedule_build_replicated, s->replicas set): every
 * copy of a stage is a lane of its own that runs its stage's list restricted to its units
 * (u % r == its copy, order kept), each with the whole micro-batch's time, as the runtime's
 * copies do; unit u's activation goes from copy u % r_s to copy u % r_{s+1} over the link of
 * that pair of copies (each pair of a cut its own link), its gradient back the same way; and
 * the copies of a stage meet at every OPT (their all-reduce: it starts when the last of them
 * arrives; opt_s includes the all-reduce). Without copies the lanes are the stages.
 * Invariant: the schedule was validated (plan_schedule_validate) before it is played.
 */
#ifndef PLAN_SIM_H
#define PLAN_SIM_H

#include <stdio.h>

#include "common/sc_status.h"
#include "coordinator/planner/plan_schedule.h"

typedef struct plan_sim_stage {
    double fwd_s; /* one micro-batch forward on this stage (on one copy when replicated) */
    double bwd_s;
    double wgrad_s;    /* the part of bwd_s a zb1 schedule runs as W (the weight gradient), the
                        * rest as B (the input gradient); unused by the other schedules, whose B
                        * takes the whole bwd_s */
    double opt_s;      /* optimizer step at the flush (or per minibatch for pipedream; per
                        * round of its copies' minibatches for a replicated stage), with the
                        * copies' all-reduce */
    double send_fwd_s; /* activation of one micro-batch to the next stage */
    double send_bwd_s; /* gradient of one micro-batch to the previous stage */
} plan_sim_stage;

typedef struct plan_sim_event {
    int lane; /* stage index, or n_stages + 2*cut (+1 for backward) for links */
    int kind; /* plan_act_kind */
    int unit;
    double start_s;
    double dur_s;
    int copy; /* a stage's copy; on a link the pair of copies, (sender-side copy of the upper
               * stage) * r_{cut+1} + copy of the lower one; 0 without copies */
} plan_sim_event;

typedef struct plan_sim_result {
    int n_stages;
    double iteration_s;     /* flush schedules: last action end; pipedream: steady_s * m */
    double steady_s;        /* pipedream: time per minibatch in steady state, else 0 */
    double bubble_fraction; /* 1 - busy / (devices * time), a copy being a device */
    double *busy_s;         /* (n_stages) per copy, the mean over a stage's copies */
    double *idle_s;         /* (n_stages) */
    double *peak_inflight;  /* (n_stages) micro-batches stashed at once on one copy, at most */
    int n_events;
    plan_sim_event *events; /* when record_events */
} plan_sim_result;

/* Plays `s` over `stages` (n_stages entries). `n_micro` is the number of micro-batches of an
 * iteration, used to scale pipedream's steady rate to an iteration. slice_efficiency in
 * (0, 1]. Errors: a deadlock (SC_ERR_INVALID), allocation. Reentrant. */
sc_status plan_sim_run(const plan_schedule *s, const plan_sim_stage *stages, int n_micro,
                       double slice_efficiency, int record_events, plan_sim_result *out,
                       sc_err *err);

void plan_sim_result_free(plan_sim_result *r);

/* Stages that share processors (several CPU stages as threads of one host, say): stage i belongs
 * to group[i] (0..n_groups-1) or to none (-1: a device of its own); group g has capacity[g]
 * processors. While n computes (F, B, OPT) of a group run at once each progresses at rate
 * min(1, capacity / n) (processor sharing: the OS spreads runnable threads over the cores).
 * Transfers are not shared. */
typedef struct plan_sim_share {
    int n_groups;
    const int *group;    /* (n_stages) group of each stage, -1: own device; with copies
                          * (s->replicas) one entry per copy, the copies of stage 0 first */
    const int *capacity; /* (n_groups) processors of each group, >= 1 */
    const int *weight;   /* (as group) processors a computing stage takes, >= 1; NULL: 1 each.
                          * n above counts these. */
    /* CFS-capped lanes (NULL: none): quota[l] in (0, 1) is the share of full speed lane l's CPU
     * quota allows over quota_period_s[l] (0: no quota). Its times are sustained ones (full
     * speed times / quota). Modelled as a token bucket of B = q P (1 - q) seconds that fills at
     * q per second while the lane does not compute and drains at (1 - q) while it computes at
     * full speed; an empty bucket holds it to q. So a compute after a long enough idle spell
     * takes its time less P (1 - q), as under CFS, where a fresh period's quota runs at full
     * speed; one right after another keeps its sustained time. */
    const double *quota;
    const double *quota_period_s;
} plan_sim_share;

/* plan_sim_run with stages grouped onto shared processors, or on CFS-capped CPUs (quota). `share`
 * NULL (or no stage in a group and no quota) is plan_sim_run itself, bit for bit. Otherwise an
 * event-driven loop plays the lists: a stage still runs one action at a time in list order with the
 * same receive, send and link rules, but a compute starts only when the simulated clock reaches it,
 * and the rates of its group change whenever one of the group's stages starts or finishes
 * computing. An action that ran at full rate throughout keeps its own duration, so a group that
 * never holds more computes than its capacity (a group of one stage, a capacity >= its stages)
 * gives plan_sim_run's figures. Recorded events and busy_s carry the stretched times; for pipedream
 * busy_s adds each stage's mean stretch per minibatch. Errors: a group id out of range or a
 * capacity < 1 (SC_ERR_INVALID naming the stage or group), a deadlock, allocation. Reentrant. */
sc_status plan_sim_run_shared(const plan_schedule *s, const plan_sim_stage *stages, int n_micro,
                              double slice_efficiency, const plan_sim_share *share,
                              int record_events, plan_sim_result *out, sc_err *err);

/* Unequal micro-batch sizes per stage (UMPIPE): stage i cuts the batch into its own entries,
 * fwd_sizes row i in the forward and bwd_sizes row i in the backward, each a list of positive
 * sizes summing to the batch (zeros after the last entry). Times come from tables indexed by an
 * entry's size, so a stage's time need not be linear in its size.
 * Fill-drain order: a stage runs all its forward entries, then all its backward entries, both in
 * ascending sample order, then its optimizer step. Forward entry j of stage i+1 waits until the
 * activations of every sample it covers have crossed the cut: the upstream entries up to the
 * first whose prefix reaches its own prefix (sends of one cut and direction go one at a time,
 * so that entry's arrival is the last of them); backward mirrors it with gradients from stage
 * i+1 to stage i. These are the semantics of ALGORITHMS.md section 5, so the iteration time is
 * exactly the recurrence's (plan_ga_eval_one's without its memory penalty, for equal opt_s). */
typedef struct plan_sim_sized {
    int n_stages;
    int batch;            /* samples per iteration */
    int max_entries;      /* K: row length of fwd_sizes and bwd_sizes */
    const int *fwd_sizes; /* (n_stages, K) */
    const int *bwd_sizes; /* (n_stages, K) */
    const double *fwd_s;  /* (n_stages, batch+1): forward time of x samples on stage i */
    const double *bwd_s;  /* (n_stages, batch+1) */
    const double *comm_s; /* (n_stages, batch+1): x samples across the cut after stage i, either
                           * direction */
    const double *opt_s;  /* (n_stages) optimizer step after the stage's last backward; NULL: 0 */
} plan_sim_sized;

/* Plays per-stage sizes as above. Events as plan_sim_run's, `unit` being the entry's index in
 * its stage's row; peak_inflight[i] is the number of forward entries of stage i (fill-drain
 * keeps them all until their backward). A row that is empty, holds a size outside 1..batch or
 * does not sum to the batch is SC_ERR_INVALID naming the stage and the chromosome. Reentrant. */
sc_status plan_sim_run_sized(const plan_sim_sized *in, int record_events, plan_sim_result *out,
                             sc_err *err);

/* plan_sim_run_sized with stages grouped onto shared processors (plan_sim_share, as in
 * plan_sim_run_shared). `share` NULL (or no stage in a group) is plan_sim_run_sized itself, bit
 * for bit. Otherwise the sizes become fill-drain action lists (each entry receives the
 * neighbour's entries that complete its samples, computes, sends; then the optimizer step)
 * played by plan_sim_run_shared's event-driven loop with each entry's own times: the same
 * figures as plan_sim_run_sized while no group holds more computes than its capacity, and
 * stretched computes where one does. Errors as both. Reentrant. */
sc_status plan_sim_run_sized_shared(const plan_sim_sized *in, const plan_sim_share *share,
                                    int record_events, plan_sim_result *out, sc_err *err);

/* Writes the recorded events as Chrome trace JSON ("traceEvents", times in microseconds),
 * one lane per stage and per link direction. `names` (may be NULL) names the stage lanes. */
sc_status plan_sim_write_trace(const plan_sim_result *r, FILE *f, const char *const *names,
                               sc_err *err);

#endif /* PLAN_SIM_H */
