/*
 * plan_schedule: generators for the schedule families and the validator.
 *
 * Generators write compute actions (F, B, OPT) in the family's order and wrap each with its
 * communication: RECV before a forward that needs an input, SEND after a forward whose output
 * is needed, and the mirror for backward. Sends are asynchronous (the stage goes on); receives
 * block. The validator's dry run plays the lists with that rule and no times.
 */
#include "coordinator/planner/plan_schedule.h"

#include <stdlib.h>
#include <string.h>

#include "common/sc_pipeline.h"

static const char *const sched_names[PLAN_SCHED_COUNT + 1] = {"gpipe",  "1f1b", "pipedream",
                                                              "sliced", "zb1",  "auto"};

const char *plan_sched_name(plan_sched_kind k)
{
    return (unsigned)k <= PLAN_SCHED_COUNT ? sched_names[k] : "unknown";
}

int plan_sched_parse(const char *name)
{
    for (int i = 0; i <= PLAN_SCHED_COUNT; i++)
        if (strcmp(name, sched_names[i]) == 0)
            return i;
    return -1;
}

void plan_schedule_destroy(plan_schedule **sp)
{
    if (sp == NULL || *sp == NULL)
        return;
    plan_schedule *s = *sp;
    if (s->actions)
        for (int i = 0; i < s->n_stages; i++)
            free(s->actions[i]);
    free(s->actions);
    free(s->n_actions);
    free(s->frac);
    free(s->replicas);
    free(s->w_defer);
    free(s);
    *sp = NULL;
}

sc_status plan_schedule_new(plan_schedule **out, int n_stages, int n_units, sc_err *err)
{
    *out = NULL;
    if (n_stages < 1 || n_units < 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "a schedule needs at least one stage and one micro-batch (got %d, %d)",
                       n_stages, n_units);
    plan_schedule *s = calloc(1, sizeof *s);
    SC_ALLOC_CHECK(s, err);
    s->n_stages = n_stages;
    s->n_units = n_units;
    s->frac = malloc((size_t)n_units * sizeof *s->frac);
    s->n_actions = calloc((size_t)n_stages, sizeof *s->n_actions);
    s->actions = calloc((size_t)n_stages, sizeof *s->actions);
    if (!s->frac || !s->n_actions || !s->actions) {
        plan_schedule_destroy(&s);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for a schedule");
    }
    /* each stage holds at most 6 actions per unit and an OPT per unit (pipedream's copies, one
     * per round) or a W per unit (zb1) and one OPT at the end: allocate once */
    for (int i = 0; i < n_stages; i++) {
        s->actions[i] = malloc(((size_t)n_units * 7 + 1) * sizeof(plan_action));
        if (s->actions[i] == NULL) {
            plan_schedule_destroy(&s);
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for a schedule");
        }
    }
    for (int u = 0; u < n_units; u++)
        s->frac[u] = 1.0;
    *out = s;
    return SC_OK;
}

sc_status plan_schedule_push(plan_schedule *s, int stage, plan_act_kind kind, int unit, sc_err *err)
{
    if (stage < 0 || stage >= s->n_stages || s->n_actions[stage] >= s->n_units * 7 + 1)
        return SC_ERRF(err, SC_ERR_INVALID, "schedule: stage %d out of range or full", stage);
    plan_action *a = &s->actions[stage][s->n_actions[stage]++];
    a->kind = (uint8_t)kind;
    a->unit = unit;
    return SC_OK;
}

/* Compute action with its communication around it (pushes cannot fail: capacity is sized). */
static void push_f(plan_schedule *s, int st, int u)
{
    if (st > 0)
        plan_schedule_push(s, st, PLAN_ACT_RECV_F, u, NULL);
    plan_schedule_push(s, st, PLAN_ACT_F, u, NULL);
    if (st < s->n_stages - 1)
        plan_schedule_push(s, st, PLAN_ACT_SEND_F, u, NULL);
}

static void push_b(plan_schedule *s, int st, int u)
{
    if (st < s->n_stages - 1)
        plan_schedule_push(s, st, PLAN_ACT_RECV_B, u, NULL);
    plan_schedule_push(s, st, PLAN_ACT_B, u, NULL);
    if (st > 0)
        plan_schedule_push(s, st, PLAN_ACT_SEND_B, u, NULL);
}

/* A backward, and with `round` > 0 an OPT after every round-th one (pipedream's copies). */
static void push_b_round(plan_schedule *s, int st, int u, int round)
{
    push_b(s, st, u);
    if (round > 0 && u % round == round - 1)
        plan_schedule_push(s, st, PLAN_ACT_OPT, -1, NULL);
}

/* zb1's W: the weight gradient of unit u, some time after its B (push_b), which then computes
 * only the input gradient and sends it upstream at once. */
static void push_w(plan_schedule *s, int st, int u)
{
    plan_schedule_push(s, st, PLAN_ACT_W, u, NULL);
}

/* ZB-H1 on stage st (plan_schedule_build_replicated): 1F1B over units with `warm` warm-up
 * forwards (1F1B-RR's with copies), the W of the first `defer` backwards deferred to the end and
 * every later backward followed by the W of the oldest one pending. Unreplicated, warm =
 * p-st-1 and defer = st (capped by the steady phase): warm-up, st deferred pairs, F-B-W, B-W,
 * the deferred W. Each stage's W run in unit order; the runtime's rule (rt_schedule). */
static void zero_bubble_h1(plan_schedule *s, int st, int warm, int defer)
{
    int n = s->n_units, f = 0, b = 0, w = 0;
    warm = warm < n ? warm : n;
    while (f < warm)
        push_f(s, st, f++);
    while (f < n) {
        push_f(s, st, f++);
        push_b(s, st, b++);
        if (b > defer)
            push_w(s, st, w++);
    }
    while (b < n) {
        push_b(s, st, b++);
        if (b > defer)
            push_w(s, st, w++);
    }
    while (w < n)
        push_w(s, st, w++);
}

/* zb1's deferred W on a stage warming up with `warm` forwards, stage 0 with `warm0`: W_0 - W_s
 * (st unreplicated), at most the steady phase's n - warm backwards. */
static int zb1_defer(int warm0, int warm, int n)
{
    warm0 = warm0 < n ? warm0 : n;
    warm = warm < n ? warm : n;
    int d = warm0 - warm > 0 ? warm0 - warm : 0;
    return d < n - warm ? d : n - warm;
}

/* R_s and W_s of stage st (NULL replicas: p-st and p-st-1). */
static int zb1_warm(int n_stages, const int *replicas, int st)
{
    int after = 0;
    for (int i = st; i < n_stages; i++)
        after += replicas != NULL ? replicas[i] : 1;
    return sc_pipeline_warmup(after, replicas != NULL ? replicas[st] : 1);
}

int plan_schedule_zb1_defer(int n_stages, const int *replicas, int n_micro, int stage)
{
    return zb1_defer(zb1_warm(n_stages, replicas, 0), zb1_warm(n_stages, replicas, stage), n_micro);
}

int plan_schedule_zb1_held(int n_stages, const int *replicas, int n_micro, int stage, int defer)
{
    int warm = zb1_warm(n_stages, replicas, stage), r = replicas != NULL ? replicas[stage] : 1;
    warm = warm < n_micro ? warm : n_micro;
    int held = warm + 1 + defer;
    held = held < n_micro ? held : n_micro;
    return (held + r - 1) / r;
}

void plan_schedule_zb1_caps(int n_stages, const int *replicas, int n_micro,
                            const double *slot_bytes, int *w_defer)
{
    /* 1f1b's peak over the stages, bytes on one copy: zb1 without deferral holds 1f1b's count */
    double budget = 0;
    for (int st = 0; st < n_stages; st++) {
        double b = plan_schedule_zb1_held(n_stages, replicas, n_micro, st, 0) * slot_bytes[st];
        budget = b > budget ? b : budget;
    }
    for (int st = 0; st < n_stages; st++) {
        int d = plan_schedule_zb1_defer(n_stages, replicas, n_micro, st);
        /* the most W within the budget; 0 always fits (1f1b's own count) */
        while (d > 0 &&
               plan_schedule_zb1_held(n_stages, replicas, n_micro, st, d) * slot_bytes[st] > budget)
            d--;
        w_defer[st] = d;
    }
}

/* 1F1B over units: `warm` forwards, then one forward / one backward, then the drain. */
static void one_f_one_b(plan_schedule *s, int st, int warm, int round)
{
    int n = s->n_units;
    if (warm > n)
        warm = n;
    for (int u = 0; u < warm; u++)
        push_f(s, st, u);
    for (int i = 0; i < n - warm; i++) {
        push_f(s, st, warm + i);
        push_b_round(s, st, i, round);
    }
    for (int u = n - warm; u < n; u++)
        if (u >= 0)
            push_b_round(s, st, u, round);
}

sc_status plan_schedule_build(plan_schedule **out, plan_sched_kind kind, int n_stages, int n_micro,
                              int sliced, sc_err *err)
{
    return plan_schedule_build_replicated(out, kind, n_stages, n_micro, sliced, NULL, err);
}

static sc_status build(plan_schedule **out, plan_sched_kind kind, int n_stages, int n_micro,
                       int sliced, const int *replicas, const int *w_defer, sc_err *err);

sc_status plan_schedule_build_replicated(plan_schedule **out, plan_sched_kind kind, int n_stages,
                                         int n_micro, int sliced, const int *replicas, sc_err *err)
{
    return build(out, kind, n_stages, n_micro, sliced, replicas, NULL, err);
}

sc_status plan_schedule_build_zb1(plan_schedule **out, int n_stages, int n_micro,
                                  const int *replicas, const int *w_defer, sc_err *err)
{
    *out = NULL;
    for (int st = 0; w_defer != NULL && st < n_stages; st++)
        if (w_defer[st] < 0)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "zb1 schedule: stage %d may defer %d weight gradients (W); valid: 0 or "
                           "more (a stage defers at most ZB-H1's count whatever the cap)",
                           st, w_defer[st]);
    return build(out, PLAN_SCHED_ZB1, n_stages, n_micro, 0, replicas, w_defer, err);
}

/* plan_schedule_build_replicated, and for zb1 with w_defer (NULL: none) its caps. */
static sc_status build(plan_schedule **out, plan_sched_kind kind, int n_stages, int n_micro,
                       int sliced, const int *replicas, const int *w_defer, sc_err *err)
{
    *out = NULL;
    int copies = 0; /* R_i, summed from the last stage back; 0: every stage one copy */
    for (int st = 0; replicas != NULL && st < n_stages; st++) {
        if (replicas[st] < 1)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "schedule: stage %d has %d copies; valid: 1 or more", st, replicas[st]);
        copies |= replicas[st] > 1;
    }
    if (!copies)
        replicas = NULL;
    if (n_micro < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "a schedule needs at least one micro-batch, got %d",
                       n_micro);
    if (kind != PLAN_SCHED_SLICED)
        sliced = 0;
    if (sliced < 0 || sliced > n_micro)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "sliced warm-up: expected 0 to %d micro-batches, got %d", n_micro, sliced);
    plan_schedule *s = NULL;
    SC_CHECK(plan_schedule_new(&s, n_stages, n_micro + sliced, err));
    s->kind = kind;
    for (int u = 0; u < 2 * sliced; u++)
        s->frac[u] = 0.5;
    int p = n_stages;
    if (kind == PLAN_SCHED_ZB1 && (s->w_defer = calloc((size_t)p, sizeof *s->w_defer)) == NULL) {
        plan_schedule_destroy(&s);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for a schedule");
    }
    if (replicas != NULL) {
        s->replicas = malloc((size_t)p * sizeof *s->replicas);
        if (s->replicas == NULL) {
            plan_schedule_destroy(&s);
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for a schedule");
        }
        memcpy(s->replicas, replicas, (size_t)p * sizeof *replicas);
    }
    /* zb1: stage 0's warm-up, from every stage's copies */
    int all = 0;
    for (int st = 0; st < p; st++)
        all += replicas != NULL ? replicas[st] : 1;
    int warm0 = replicas != NULL ? sc_pipeline_warmup(all, replicas[0]) : p - 1;
    int after = 0;
    for (int st = p - 1; st >= 0; st--) {
        int r = replicas != NULL ? replicas[st] : 1;
        after += r;
        /* 1F1B-RR: p-st-1 unreplicated */
        int warm_rr = replicas != NULL ? sc_pipeline_warmup(after, r) : p - st - 1;
        switch (kind) {
        case PLAN_SCHED_GPIPE:
            for (int u = 0; u < s->n_units; u++)
                push_f(s, st, u);
            for (int u = 0; u < s->n_units; u++)
                push_b(s, st, u);
            break;
        case PLAN_SCHED_1F1B:
            one_f_one_b(s, st, warm_rr, 0);
            break;
        case PLAN_SCHED_PIPEDREAM:
            one_f_one_b(s, st, warm_rr, r > 1 ? r : 0);
            break;
        case PLAN_SCHED_SLICED: {
            /* warm-up covers p-st-1 (W_st) micro-batches' worth of samples, halves counted as
             * halves: the runtime's rule */
            one_f_one_b(s, st, sc_pipeline_sliced_warmup(warm_rr, sliced, s->n_units), 0);
            break;
        }
        case PLAN_SCHED_ZB1: {
            int d = zb1_defer(warm0, warm_rr, s->n_units);
            if (w_defer != NULL && w_defer[st] < d)
                d = w_defer[st];
            s->w_defer[st] = d;
            zero_bubble_h1(s, st, warm_rr, d);
            break;
        }
        default:
            plan_schedule_destroy(&s);
            return SC_ERRF(err, SC_ERR_INVALID, "unknown schedule kind %d", (int)kind);
        }
        if (kind != PLAN_SCHED_PIPEDREAM)
            plan_schedule_push(s, st, PLAN_ACT_OPT, -1, NULL);
    }
    /* PipeDream keeps one weight version per in-flight minibatch of the first stage (of one of
     * its copies: W_0 / r_0) */
    s->weight_versions = kind != PLAN_SCHED_PIPEDREAM ? 0
                         : replicas != NULL ? sc_pipeline_copy_slots(after, replicas[0], 0) - 1
                                            : p - 1;
    *out = s;
    return SC_OK;
}

static const char *act_name(int k)
{
    static const char *const n[] = {"F", "B", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "OPT", "W"};
    return k >= 0 && k <= PLAN_ACT_W ? n[k] : "?";
}

/* Slot of an action kind in the validator's table: the six per-unit kinds, then W. */
#define VAL_SLOTS 7
static int val_slot(int kind)
{
    return kind == PLAN_ACT_W ? 6 : kind;
}

sc_status plan_schedule_validate(const plan_schedule *s, sc_err *err)
{
    int S = s->n_stages, U = s->n_units;
    sc_status rc = SC_OK;
    /* per (stage, unit): position of each action kind, -1 when absent */
    int *pos = malloc((size_t)S * (size_t)U * VAL_SLOTS * sizeof *pos);
    int *cursor = calloc((size_t)S, sizeof *cursor);
    char *sent = calloc((size_t)S * (size_t)U * 2, 1);
    if (!pos || !cursor || !sent) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory validating a schedule");
        goto done;
    }
    for (size_t i = 0; i < (size_t)S * (size_t)U * VAL_SLOTS; i++)
        pos[i] = -1;
    int split = s->kind == PLAN_SCHED_ZB1; /* W after every B, and none elsewhere */
    for (int st = 0; st < S; st++) {
        for (int i = 0; i < s->n_actions[st]; i++) {
            const plan_action *a = &s->actions[st][i];
            if (a->kind == PLAN_ACT_OPT)
                continue;
            if (a->kind > PLAN_ACT_W || a->unit < 0 || a->unit >= U) {
                rc = SC_ERRF(err, SC_ERR_INVALID,
                             "schedule: stage %d action %d: bad kind %d or unit %d (units 0-%d)",
                             st, i, a->kind, a->unit, U - 1);
                goto done;
            }
            if (a->kind == PLAN_ACT_W && !split) {
                rc = SC_ERRF(err, SC_ERR_INVALID,
                             "schedule: stage %d action %d: W of unit %d in a %s schedule; only "
                             "zb1 splits the backward into B and W",
                             st, i, a->unit, plan_sched_name(s->kind));
                goto done;
            }
            int *slot = &pos[((size_t)st * U + a->unit) * VAL_SLOTS + val_slot(a->kind)];
            if (*slot >= 0) {
                rc = SC_ERRF(err, SC_ERR_INVALID,
                             "schedule: stage %d action %d: %s of unit %d appears twice", st, i,
                             act_name(a->kind), a->unit);
                goto done;
            }
            *slot = i;
        }
        for (int u = 0; u < U; u++) {
            const int *p = &pos[((size_t)st * U + u) * VAL_SLOTS];
            if (p[PLAN_ACT_F] < 0 || p[PLAN_ACT_B] < 0 || (split && p[val_slot(PLAN_ACT_W)] < 0)) {
                rc = SC_ERRF(err, SC_ERR_INVALID, "schedule: stage %d: unit %d lacks its %s", st, u,
                             p[PLAN_ACT_F] < 0   ? "forward"
                             : p[PLAN_ACT_B] < 0 ? "backward"
                                                 : "weight gradient (W)");
                goto done;
            }
            if (split && p[val_slot(PLAN_ACT_W)] < p[PLAN_ACT_B]) {
                rc = SC_ERRF(err, SC_ERR_INVALID,
                             "schedule: stage %d: W of unit %d (action %d) comes before its B "
                             "(action %d)",
                             st, u, p[val_slot(PLAN_ACT_W)], p[PLAN_ACT_B]);
                goto done;
            }
            if (p[PLAN_ACT_B] < p[PLAN_ACT_F]) {
                rc = SC_ERRF(err, SC_ERR_INVALID,
                             "schedule: stage %d: backward of unit %d (action %d) comes before "
                             "its forward (action %d)",
                             st, u, p[PLAN_ACT_B], p[PLAN_ACT_F]);
                goto done;
            }
            int want_fwd_send = st < S - 1, want_bwd_recv = st < S - 1;
            int want_fwd_recv = st > 0, want_bwd_send = st > 0;
            if ((p[PLAN_ACT_SEND_F] >= 0) != want_fwd_send ||
                (p[PLAN_ACT_RECV_B] >= 0) != want_bwd_recv ||
                (p[PLAN_ACT_RECV_F] >= 0) != want_fwd_recv ||
                (p[PLAN_ACT_SEND_B] >= 0) != want_bwd_send) {
                rc = SC_ERRF(err, SC_ERR_INVALID,
                             "schedule: stage %d unit %d: sends and receives do not match the "
                             "neighbours (each inner cut needs SEND_F/RECV_F and SEND_B/RECV_B)",
                             st, u);
                goto done;
            }
            if ((want_fwd_send && p[PLAN_ACT_SEND_F] < p[PLAN_ACT_F]) ||
                (want_fwd_recv && p[PLAN_ACT_RECV_F] > p[PLAN_ACT_F]) ||
                (want_bwd_send && p[PLAN_ACT_SEND_B] < p[PLAN_ACT_B]) ||
                (want_bwd_recv && p[PLAN_ACT_RECV_B] > p[PLAN_ACT_B])) {
                rc = SC_ERRF(err, SC_ERR_INVALID,
                             "schedule: stage %d unit %d: a send precedes its compute or a "
                             "receive follows it",
                             st, u);
                goto done;
            }
        }
    }
    /* dry run: a receive may pass once its matching send has been played */
    int remaining = 0;
    for (int st = 0; st < S; st++)
        remaining += s->n_actions[st];
    while (remaining > 0) {
        int progress = 0;
        for (int st = 0; st < S; st++) {
            while (cursor[st] < s->n_actions[st]) {
                const plan_action *a = &s->actions[st][cursor[st]];
                if (a->kind == PLAN_ACT_RECV_F && !sent[((size_t)(st - 1) * U + a->unit) * 2])
                    break;
                if (a->kind == PLAN_ACT_RECV_B && !sent[((size_t)(st + 1) * U + a->unit) * 2 + 1])
                    break;
                if (a->kind == PLAN_ACT_SEND_F)
                    sent[((size_t)st * U + a->unit) * 2] = 1;
                if (a->kind == PLAN_ACT_SEND_B)
                    sent[((size_t)st * U + a->unit) * 2 + 1] = 1;
                cursor[st]++;
                remaining--;
                progress = 1;
            }
        }
        if (!progress) {
            int st = 0;
            while (cursor[st] >= s->n_actions[st])
                st++;
            const plan_action *a = &s->actions[st][cursor[st]];
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "schedule: deadlock: stage %d waits at action %d (%s of unit %d) for a "
                         "send that never comes",
                         st, cursor[st], act_name(a->kind), a->unit);
            goto done;
        }
    }
done:
    free(pos);
    free(cursor);
    free(sent);
    return rc;
}
