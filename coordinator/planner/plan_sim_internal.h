/*
 * plan_sim_internal: what the simulator's files share; not part of plan_sim's interface.
 *
 * The state of playing a schedule's action lists (lanes, arrivals, links, the copies' OPT
 * barrier), set up and summed up by plan_sim.c, and the rules of playing one action, which
 * the sweep (plan_sim.c) and the event-driven loop (plan_sim_shared.c) both follow. Does not
 * decide the order in which lanes are played: each player does.
 * Invariant: an arrival is NAN until its send has been played.
 */
#ifndef PLAN_SIM_INTERNAL_H
#define PLAN_SIM_INTERNAL_H

#include "coordinator/planner/plan_schedule.h"
#include "coordinator/planner/plan_sim.h"

/* Per-entry times, (S, U) each, for action lists whose units differ in size from stage to
 * stage (sizes per stage played on shared processors): they replace the stage costs scaled by
 * the units' fractions. */
typedef struct sim_unit_times {
    const double *fwd, *bwd;       /* compute of stage i's unit u */
    const double *send_f, *send_b; /* stage i's send of unit u downstream / upstream */
} sim_unit_times;

typedef struct sim_state {
    int S, U;
    /* Lanes: the copies of every stage, stage after stage; without copies lane i is stage i. A
     * lane runs its stage's list restricted to its units (u % r == its copy). */
    int N;
    const int *reps;          /* (S) copies of each stage; NULL: one each */
    int *lane_stage;          /* (N) */
    int *lane0;               /* (S) each stage's first lane */
    const plan_action **acts; /* (N) each lane's list */
    int *n_acts;              /* (N) */
    plan_action *own;         /* the copies' restricted lists, one allocation; NULL unreplicated */
    const sim_unit_times *ut; /* NULL: stage costs x unit fractions */
    double *arr_f, *arr_b;    /* (S, U) arrival of the send from stage s; NAN until played */
    double *bend;             /* (S, U) backward end */
    int *link_base;           /* (S) first link of each cut; a cut has one per pair of copies */
    double *link_f, *link_b;
    double *clock, *inflight, *busy, *peak; /* (N) */
    int *cursor;                            /* (N) */
    /* the copies' OPT barrier (their all-reduce): opt_n, the OPTs a lane has arrived at, opt_t
     * when it arrived at the last, opt_at while it waits there; rel_n / rel_t (S): the last OPT
     * every copy of the stage reached, and when the last of them did */
    int *opt_n, *rel_n;
    double *opt_t, *rel_t;
    char *opt_at;
    int remaining; /* actions not yet played, over every lane */
    double eff;    /* slice efficiency, in (0, 1] */
    plan_sim_result *r;
    int cap_events;
} sim_state;

/* Appends an event to st->r (lane l of the trace, copy 0). Returns -1 out of memory. */
int plan_sim_add_event(sim_state *st, int lane, int kind, int unit, double start, double dur);
/* A compute event of lane l: its stage's trace lane, its copy. Returns -1 out of memory. */
int plan_sim_add_lane_event(sim_state *st, int l, int kind, int unit, double start, double dur);

/* A flushed iteration that ends at `end`: iteration time, idle time per stage and the bubble
 * over n_dev devices whose busy times are dev_busy. */
void plan_sim_finish_flushed(plan_sim_result *out, const double *dev_busy, int n_dev, double end);

/* Allocates the per-lane and per-unit state of playing `s` and the result's arrays; arrivals
 * start as NAN (not sent yet). On error everything allocated is freed by the caller's
 * plan_sim_state_free and plan_sim_result_free. */
sc_status plan_sim_state_init(sim_state *st, const plan_schedule *s, double slice_efficiency,
                              plan_sim_result *out, sc_err *err);
void plan_sim_state_free(sim_state *st);

/* The iteration time and per-stage figures once every action has been played. `stretch_s`
 * (NULL: none) is, per stage and unit (S, U), the time its computes ran longer than their own
 * durations because of shared processors. */
void plan_sim_finish(const plan_schedule *s, const plan_sim_stage *stages, int n_micro,
                     const sim_state *st, const double *stretch_s, plan_sim_result *out);

/* The rules both players share. A receive: the arrival of its send, NAN while that send has not
 * been played; the lane's clock moves to it. Unit u comes from copy u % r of the neighbour. */
static inline double recv_arrival(const sim_state *st, int l, const plan_action *a)
{
    int i = st->lane_stage[l];
    return a->kind == PLAN_ACT_RECV_F ? st->arr_f[(size_t)(i - 1) * st->U + a->unit]
                                      : st->arr_b[(size_t)(i + 1) * st->U + a->unit];
}

/* A send at the lane's clock queues on the link of its cut, direction and pair of copies (one
 * transfer at a time) and sets its arrival. Returns -1 when the event cannot be recorded. */
int plan_sim_play_send(sim_state *st, const plan_schedule *s, const plan_sim_stage *stages, int l,
                       const plan_action *a, int record);

/* Whether an action takes its lane's processor (F, B, W, OPT); sends and receives do not. */
static inline int is_compute(int kind)
{
    return kind == PLAN_ACT_F || kind == PLAN_ACT_B || kind == PLAN_ACT_OPT || kind == PLAN_ACT_W;
}

/* The copies' barrier at an OPT (their all-reduce): lane l, whose next action is an OPT, may
 * start it once every copy of its stage has reached that OPT, at the latest of their arrivals
 * (its clock moves there). Returns 1 when it may, 0 while it waits (its arrival is recorded
 * once; *arrived is set when this call recorded it). A lone copy passes at once. */
int plan_sim_opt_pass(sim_state *st, int l, int *arrived);

/* A compute's own duration, and its effect on the lane's stash count. */
double plan_sim_start_compute(sim_state *st, const plan_schedule *s, const plan_sim_stage *c, int l,
                              const plan_action *a);

/* Checks a share of `n` entries: the stages, or with copies the lanes (every copy of every
 * stage, stage after stage). *grouped is set when some entry is in a group. SC_ERR_INVALID
 * naming the group or the entry. */
sc_status plan_sim_share_check(const plan_sim_share *sh, int n, int copies, int *grouped,
                               sc_err *err);

/* The event-driven loop of plan_sim_run_shared over a checked share with a group, the costs
 * from `stages` or, where ut is not NULL, the per-entry times. */
sc_status plan_sim_shared_play(const plan_schedule *s, const plan_sim_stage *stages, int n_micro,
                               double slice_efficiency, const plan_sim_share *share,
                               const sim_unit_times *ut, int record_events, plan_sim_result *out,
                               sc_err *err);

#endif /* PLAN_SIM_INTERNAL_H */
