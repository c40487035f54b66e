/*
 * plan_schedule: pipeline schedules as data, per-stage lists of actions, and their validation.
 *
 * Builds the action lists of GPipe, 1F1B with flush, asynchronous 1F1B (PipeDream, weight
 * stashing), 1F1B with sliced warm-up micro-batches and zero-bubble ZB-H1 (zb1: each backward
 * split into B, the input gradient, and W, the weight gradient, deferred into the bubbles), and
 * checks any list (hand-written ones too) before it is simulated or run. Does not time
 * anything: plan_sim plays the lists. The runtime runs every kind (worker/runtime/schedule.h;
 * its zb1 lists equal these, tests/unit/test_schedule_agreement.c); zb1 is planned here
 * without copies only.
 *
 * A schedule works on *units*: unit u carries frac[u] of a micro-batch (1.0, or 0.5 for the
 * halves of a sliced warm-up micro-batch). Invariant of a valid schedule: on every stage each
 * unit has exactly one F before exactly one B (and, in zb1, exactly one W after that B, none in
 * the other kinds); every SEND_F/SEND_B has the matching RECV on the neighbouring stage; a dry
 * run of the lists finishes (no deadlock).
 */
#ifndef PLAN_SCHEDULE_H
#define PLAN_SCHEDULE_H

#include <stdint.h>

#include "common/sc_status.h"

typedef enum {
    PLAN_SCHED_GPIPE = 0,
    PLAN_SCHED_1F1B,
    PLAN_SCHED_PIPEDREAM,
    PLAN_SCHED_SLICED,
    PLAN_SCHED_ZB1, /* ZB-H1 (Qi et al., ICLR 2024) */
    PLAN_SCHED_COUNT
} plan_sched_kind;

/* Not a schedule: a plan request's "pick one" (plan_run tries the synchronous schedules the
 * runtime runs and keeps the fastest plan). */
#define PLAN_SCHED_AUTO ((plan_sched_kind)PLAN_SCHED_COUNT)

/* "gpipe", "1f1b", "pipedream", "sliced", "zb1"; "auto" for PLAN_SCHED_AUTO. */
const char *plan_sched_name(plan_sched_kind k);
/* Parses a name, "auto" included (PLAN_SCHED_AUTO); -1 when unknown. */
int plan_sched_parse(const char *name);

typedef enum {
    PLAN_ACT_F = 0,
    PLAN_ACT_B,
    PLAN_ACT_SEND_F, /* activation of unit to the next stage */
    PLAN_ACT_RECV_F,
    PLAN_ACT_SEND_B, /* gradient of unit to the previous stage */
    PLAN_ACT_RECV_B,
    PLAN_ACT_OPT, /* optimizer step (unit is -1) */
    PLAN_ACT_W,   /* zb1: weight gradient of unit, after its B (which then computes only the
                   * input gradient and sends it) */
} plan_act_kind;

typedef struct plan_action {
    uint8_t kind; /* plan_act_kind */
    int32_t unit;
} plan_action;

typedef struct plan_schedule {
    plan_sched_kind kind;
    int n_stages;
    int n_units;
    double *frac;          /* (n_units) share of a micro-batch each unit carries */
    int *n_actions;        /* (n_stages) */
    plan_action **actions; /* (n_stages)[n_actions[s]] */
    int weight_versions;   /* extra weight copies a stage keeps (PipeDream stashing) */
    int *replicas;         /* (n_stages) copies of each stage (plan_schedule_build_replicated);
                            * NULL: one each */
    int *w_defer;          /* (n_stages) zb1: the W each stage defers (its list's); NULL for the
                            * other schedules */
} plan_schedule;

/* Builds a schedule of kind `kind` over n_stages stages and n_micro micro-batches.
 * For PLAN_SCHED_SLICED, `sliced` of the first micro-batches are cut in two halves
 * (0 <= sliced <= n_micro). For PLAN_SCHED_PIPEDREAM n_micro minibatches flow with no flush.
 * For PLAN_SCHED_ZB1 (ZB-H1, p stages), stage s runs min(p-s-1, m) warm-up forwards as 1F1B
 * does, then s pairs of F and B whose W it defers, then F, B, W (the W of the oldest deferred
 * micro-batch) while forwards are left, then B, W, then its s deferred W: the last stages,
 * which 1F1B leaves idle at the drain while the gradients travel back, fill that time with
 * their W. A stage holds at most min(p, m) micro-batches' inputs (from F to W): 1F1B's peak,
 * that of its first stage, on every stage (ZB-H1's lists; plan_schedule_build_zb1 caps the
 * deferral where a stage's micro-batches take more bytes). Stage 0 runs each W right after its B.
 * Errors: n_stages < 1, n_micro < 1 (SC_ERR_INVALID). */
sc_status plan_schedule_build(plan_schedule **out, plan_sched_kind kind, int n_stages, int n_micro,
                              int sliced, sc_err *err);

/* The same with replicated stages, replicas[i] copies of stage i (NULL, or every count 1: exactly
 * plan_schedule_build). Unit u runs on copy u % r of every stage (the runtime's routing); the
 * lists are the whole stages', each copy running its own units in their order, and the copies
 * of a stage meet at OPT (their all-reduce). The warm-ups are the runtime's 1F1B-RR rule
 * (sc_pipeline_warmup): stage i taken as a whole runs W_i = r_i floor((R_i - 1) / r_i) forwards
 * before its first backward (R_i: the copies of stages i..p-1), for 1f1b and pipedream in units;
 * sliced keeps its own rule with W_i for p-i-1 (the warm-up covers W_i micro-batches' worth of
 * samples, halves counted as halves). pipedream: a stage of r > 1 copies gets an OPT (the
 * copies' all-reduce and update) after every r-th backward, as the runtime runs its rounds; an
 * unreplicated one steps after every backward inside B, as before. The vector is kept in
 * s->replicas when some count exceeds 1 (plan_sim then plays every copy), NULL otherwise.
 * zb1 with copies: the 1F1B-RR lists with W inserted as the runtime does (rt_schedule): stage
 * i defers the W of its first min(W_0 - W_i, m - W_i) backwards, then runs after each backward
 * the W of its oldest pending unit, the deferred ones before OPT, so the copies' all-reduce
 * (OPT) follows the last W; a copy holds ceil(min(W_0 + 1, m) / r_i) units (F to W).
 * Errors: those of plan_schedule_build, a count below 1 (SC_ERR_INVALID naming the stage). */
sc_status plan_schedule_build_replicated(plan_schedule **out, plan_sched_kind kind, int n_stages,
                                         int n_micro, int sliced, const int *replicas, sc_err *err);

/* zb1 with a memory budget: stage i defers min(w_defer[i], D_i) W (D_i the deferral above,
 * ZB-H1's; w_defer NULL: D_i everywhere, plan_schedule_build_replicated's lists); the runtime's
 * rt_schedule_new_zb1, list for list. A negative entry is SC_ERR_INVALID; other errors as
 * plan_schedule_build_replicated's. s->w_defer holds the deferral each stage got. */
sc_status plan_schedule_build_zb1(plan_schedule **out, int n_stages, int n_micro,
                                  const int *replicas, const int *w_defer, sc_err *err);

/* ZB-H1's deferral D_i of stage `stage`: min(W_0 - W_i, m - min(W_i, m)) (i unreplicated). */
int plan_schedule_zb1_defer(int n_stages, const int *replicas, int n_micro, int stage);

/* Units one copy of `stage` holds from F to W under zb1 when it defers `defer` W:
 * ceil(min(min(W_i, m) + 1 + defer, m) / r_i); defer 0 gives 1F1B's count (unreplicated
 * min(p-i, m)). */
int plan_schedule_zb1_held(int n_stages, const int *replicas, int n_micro, int stage, int defer);

/* The memory budget of zb1's deferred W: w_defer[i] = the most W stage i may defer, at most D_i,
 * so that its bytes in flight on a copy, plan_schedule_zb1_held(.., i, w_defer[i]) *
 * slot_bytes[i], stay within 1F1B's peak over the stages, the largest plan_schedule_zb1_held(..,
 * j, 0) * slot_bytes[j] (slot_bytes: a micro-batch's bytes held from F to W on stage i; the plan's
 * "deferred_w"). Equal slots give D_i on every stage (ZB-H1's lists); where a later stage's slot
 * is the largest its deferral shrinks, down to 0 (1F1B's order with each W after its B). */
void plan_schedule_zb1_caps(int n_stages, const int *replicas, int n_micro,
                            const double *slot_bytes, int *w_defer);

/* An empty schedule (no actions) to fill by hand with plan_schedule_push. */
sc_status plan_schedule_new(plan_schedule **out, int n_stages, int n_units, sc_err *err);
sc_status plan_schedule_push(plan_schedule *s, int stage, plan_act_kind kind, int unit,
                             sc_err *err);

/* Checks the invariant above; the message names the stage, action index and unit at fault. */
sc_status plan_schedule_validate(const plan_schedule *s, sc_err *err);

void plan_schedule_destroy(plan_schedule **s);

#endif /* PLAN_SCHEDULE_H */
