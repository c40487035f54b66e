/*
 * rt schedule: generation and validation of per-stage action lists (see schedule.h).
 * Invariant: a schedule returned by rt_schedule_new() or rt_schedule_new_pipedream() has passed
 * rt_schedule_validate().
 */
#include "worker/runtime/schedule.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_pipeline.h"

static const char *const action_names[] = {"RECV_F", "F",      "SEND_F", "RECV_B",
                                           "B",      "SEND_B", "OPT",    "W"};

const char *rt_action_name(rt_action_kind kind)
{
    return (unsigned)kind < sizeof action_names / sizeof action_names[0] ? action_names[kind] : "?";
}

const char *rt_schedule_kind_name(rt_schedule_kind kind)
{
    return kind == RT_SCHED_PIPEDREAM ? "pipedream"
           : kind == RT_SCHED_1F1B    ? "1f1b"
           : kind == RT_SCHED_ZB1     ? "zb1"
                                      : "gpipe";
}

sc_status rt_schedule_kind_parse(const char *s, const char *what, rt_schedule_kind *out,
                                 sc_err *err)
{
    if (s != NULL && strcmp(s, "gpipe") == 0) {
        *out = RT_SCHED_GPIPE;
        return SC_OK;
    }
    if (s != NULL && strcmp(s, "1f1b") == 0) {
        *out = RT_SCHED_1F1B;
        return SC_OK;
    }
    if (s != NULL && strcmp(s, "zb1") == 0) {
        *out = RT_SCHED_ZB1;
        return SC_OK;
    }
    if (s != NULL &&
        (strcmp(s, "pipedream") == 0 || strcmp(s, "sliced") == 0 || strcmp(s, "unequal") == 0))
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "%s: \"%s\" has no action lists of its own: rt_runner builds it on %s "
                       "lists; valid here: \"gpipe\", \"1f1b\", \"zb1\"",
                       what, s, strcmp(s, "unequal") == 0 ? "gpipe" : "1f1b");
    return SC_ERRF(err, SC_ERR_INVALID,
                   "%s: unknown schedule \"%s\"; valid: \"gpipe\", \"1f1b\", \"zb1\"", what,
                   s != NULL ? s : "(null)");
}

/* R_s: the copies of stages stage..stages-1 (NULL replicas: one each). */
static int copies_after(int stages, const int *replicas, int stage)
{
    if (replicas == NULL)
        return stages - stage;
    int after = 0;
    for (int st = stage; st < stages; st++)
        after += replicas[st];
    return after;
}

int rt_schedule_slots_bound(rt_schedule_kind kind, int stages, const int *replicas, int stage,
                            int microbatches)
{
    int r = replicas != NULL ? replicas[stage] : 1;
    if (kind == RT_SCHED_GPIPE)
        return (microbatches + r - 1) / r;
    if (kind == RT_SCHED_ZB1) /* F to W: at most stage 0's 1f1b count, whole */
        return rt_schedule_zb1_slots_bound(stages, replicas, stage, microbatches, NULL);
    int after = copies_after(stages, replicas, stage);
    return sc_pipeline_copy_slots(after, r, kind == RT_SCHED_PIPEDREAM ? 0 : microbatches);
}

int rt_schedule_sliced_slots_bound(int stages, const int *replicas, int stage, int units,
                                   int sliced)
{
    int r = replicas != NULL ? replicas[stage] : 1;
    return sc_pipeline_sliced_copy_slots(copies_after(stages, replicas, stage), r, sliced, units);
}

void rt_schedule_destroy(rt_schedule **sp)
{
    if (sp == NULL || *sp == NULL)
        return;
    rt_schedule *s = *sp;
    for (int i = 0; s->actions != NULL && i < s->stages; i++)
        free(s->actions[i]);
    free(s->actions);
    free(s->count);
    free(s->slots);
    free(s->replicas);
    free(s);
    *sp = NULL;
}

static void push(rt_schedule *s, int st, rt_action_kind kind, int mb)
{
    rt_action *a = &s->actions[st][s->count[st]++];
    a->kind = kind;
    a->mb = mb;
}

static void push_forward(rt_schedule *s, int st, int mb)
{
    if (st > 0)
        push(s, st, RT_ACT_RECV_F, mb);
    push(s, st, RT_ACT_F, mb);
    if (st < s->stages - 1)
        push(s, st, RT_ACT_SEND_F, mb);
}

static void push_backward(rt_schedule *s, int st, int mb)
{
    if (st < s->stages - 1)
        push(s, st, RT_ACT_RECV_B, mb);
    push(s, st, RT_ACT_B, mb);
    if (st > 0)
        push(s, st, RT_ACT_SEND_B, mb);
}

/* An empty schedule with room for `per_stage` actions on each stage. */
static rt_schedule *schedule_alloc(rt_schedule_kind kind, int stages, int microbatches,
                                   size_t per_stage)
{
    rt_schedule *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->kind = kind;
    s->stages = stages;
    s->microbatches = microbatches;
    s->count = calloc((size_t)stages, sizeof *s->count);
    s->slots = calloc((size_t)stages, sizeof *s->slots);
    s->actions = calloc((size_t)stages, sizeof *s->actions);
    bool ok = s->count != NULL && s->slots != NULL && s->actions != NULL;
    for (int st = 0; ok && st < stages; st++) {
        s->actions[st] = calloc(per_stage, sizeof **s->actions);
        ok = s->actions[st] != NULL;
    }
    if (!ok)
        rt_schedule_destroy(&s);
    return s;
}

sc_status rt_schedule_new(rt_schedule **out, rt_schedule_kind kind, int stages, int microbatches,
                          sc_err *err)
{
    return rt_schedule_new_replicated(out, kind, stages, microbatches, NULL, err);
}

/* Stage st's 1F1B-RR warm-up, at most m forwards. */
static int zb1_warm(int stages, const int *replicas, int st, int m)
{
    int warm =
        sc_pipeline_warmup(copies_after(stages, replicas, st), replicas != NULL ? replicas[st] : 1);
    return warm < m ? warm : m;
}

int rt_schedule_zb1_defer(int stages, const int *replicas, int stage, int microbatches,
                          const int *w_defer)
{
    int m = microbatches, warm = zb1_warm(stages, replicas, stage, m);
    int d = zb1_warm(stages, replicas, 0, m) - warm; /* W_0 - W_s, at most the steady phase */
    d = d > 0 ? d : 0;
    d = d < m - warm ? d : m - warm;
    if (w_defer != NULL && w_defer[stage] >= 0 && w_defer[stage] < d)
        d = w_defer[stage];
    return d;
}

int rt_schedule_zb1_slots_bound(int stages, const int *replicas, int stage, int microbatches,
                                const int *w_defer)
{
    int r = replicas != NULL ? replicas[stage] : 1, m = microbatches;
    /* F to W: the warm-up, the deferred and the one in hand, consecutive micro-batches */
    int held = zb1_warm(stages, replicas, stage, m) + 1 +
               rt_schedule_zb1_defer(stages, replicas, stage, m, w_defer);
    held = held < m ? held : m;
    return (held + r - 1) / r;
}

/* rt_schedule_new_replicated, with sliced > 0 rt_schedule_new_sliced's lists (1f1b only), and
 * with w_defer (zb1 only) rt_schedule_new_zb1's. */
static sc_status schedule_build(rt_schedule **out, rt_schedule_kind kind, int stages,
                                int microbatches, int sliced, const int *replicas,
                                const int *w_defer, sc_err *err)
{
    *out = NULL;
    if (kind != RT_SCHED_GPIPE && kind != RT_SCHED_1F1B && kind != RT_SCHED_ZB1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "schedule: rt_schedule_new builds \"gpipe\", \"1f1b\" and \"zb1\"; \"%s\" "
                       "lists come from rt_schedule_new_pipedream",
                       rt_schedule_kind_name(kind));
    if (stages < 1 || stages > 4096 || microbatches < 1 || microbatches > 1 << 20)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "schedule: %d stages and %d micro-batches; both must be >= 1", stages,
                       microbatches);
    for (int st = 0; replicas != NULL && st < stages; st++)
        if (replicas[st] < 1 || replicas[st] > microbatches)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "schedule: stage %d has %d copies; valid: 1..microbatches (%d), so "
                           "that every copy runs a micro-batch",
                           st, replicas[st], microbatches);
    /* three actions forward, three backward, a W (zb1) and the OPT */
    rt_schedule *s = schedule_alloc(kind, stages, microbatches, (size_t)microbatches * 7 + 1);
    if (s == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory building a schedule");
    for (int st = 0; st < stages; st++) {
        if (kind == RT_SCHED_GPIPE) {
            for (int mb = 0; mb < microbatches; mb++)
                push_forward(s, st, mb);
            for (int mb = 0; mb < microbatches; mb++)
                push_backward(s, st, mb);
        } else {
            /* 1F1B-RR's warm-up: p-st-1 unreplicated, enough to busy every copy downstream */
            int warm = sc_pipeline_warmup(copies_after(stages, replicas, st),
                                          replicas != NULL ? replicas[st] : 1);
            if (sliced > 0) /* the same micro-batches' worth, halves counted as halves */
                warm = sc_pipeline_sliced_warmup(warm, sliced, microbatches);
            if (warm > microbatches)
                warm = microbatches;
            /* zb1: the W of the first `defer` backwards wait for the end (schedule.h) */
            int defer = kind == RT_SCHED_ZB1
                            ? rt_schedule_zb1_defer(stages, replicas, st, microbatches, w_defer)
                            : microbatches;
            int f = 0, b = 0, w = 0;
            for (; f < warm; f++)
                push_forward(s, st, f);
            while (f < microbatches) {
                push_forward(s, st, f++);
                push_backward(s, st, b++);
                if (b > defer)
                    push(s, st, RT_ACT_W, w++);
            }
            while (b < microbatches) {
                push_backward(s, st, b++);
                if (b > defer)
                    push(s, st, RT_ACT_W, w++);
            }
            while (kind == RT_SCHED_ZB1 && w < microbatches)
                push(s, st, RT_ACT_W, w++);
        }
        push(s, st, RT_ACT_OPT, -1);
    }
    sc_status rc = rt_schedule_validate(s, err);
    if (rc != SC_OK) {
        rt_schedule_destroy(&s);
        return rc;
    }
    *out = s;
    return SC_OK;
}

sc_status rt_schedule_new_replicated(rt_schedule **out, rt_schedule_kind kind, int stages,
                                     int microbatches, const int *replicas, sc_err *err)
{
    return schedule_build(out, kind, stages, microbatches, 0, replicas, NULL, err);
}

sc_status rt_schedule_new_zb1(rt_schedule **out, int stages, int microbatches, const int *replicas,
                              const int *w_defer, sc_err *err)
{
    *out = NULL;
    for (int st = 0; w_defer != NULL && st < stages; st++)
        if (w_defer[st] < 0)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "zb1 schedule: stage %d may defer %d weight gradients (W); valid: 0 or "
                           "more (a stage defers at most ZB-H1's count whatever the cap)",
                           st, w_defer[st]);
    return schedule_build(out, RT_SCHED_ZB1, stages, microbatches, 0, replicas, w_defer, err);
}

sc_status rt_schedule_new_sliced(rt_schedule **out, int stages, int units, int sliced,
                                 const int *replicas, sc_err *err)
{
    *out = NULL;
    if (sliced < 0 || 2 * sliced > units)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "sliced schedule: %d halved micro-batches in %d units; valid: 0 to %d (two "
                       "units each)",
                       sliced, units, units / 2);
    return schedule_build(out, RT_SCHED_1F1B, stages, units, sliced, replicas, NULL, err);
}

int rt_schedule_pipedream_warmup(int stages, const int *replicas, int stage)
{
    return sc_pipeline_warmup(copies_after(stages, replicas, stage), replicas[stage]);
}

int rt_schedule_pipedream_slots(int stages, const int *replicas, int stage)
{
    return rt_schedule_pipedream_warmup(stages, replicas, stage) / replicas[stage] + 1;
}

/* One backward of the pipedream stream on stage st, and the round's OPT after its last. */
static void push_pd_backward(rt_schedule *s, int st, int k)
{
    push_backward(s, st, k);
    if (k % s->replicas[st] == s->replicas[st] - 1)
        push(s, st, RT_ACT_OPT, -1);
}

sc_status rt_schedule_new_pipedream(rt_schedule **out, int stages, const int *replicas,
                                    int minibatches, sc_err *err)
{
    *out = NULL;
    if (stages < 1 || stages > 4096 || minibatches < 1 || minibatches > 1 << 20 || replicas == NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "pipedream schedule: %d stages and %d minibatches; both must be >= 1, and "
                       "the copies of every stage given",
                       stages, minibatches);
    for (int st = 0; st < stages; st++)
        if (replicas[st] < 1 || minibatches % replicas[st] != 0)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "pipedream schedule: stage %d has %d copies and the stream %d "
                           "minibatches; valid: copies >= 1 dividing the minibatches (whole "
                           "rounds)",
                           st, replicas[st], minibatches);
    /* each minibatch: 3 actions forward, 3 backward, and at most one OPT */
    rt_schedule *s =
        schedule_alloc(RT_SCHED_PIPEDREAM, stages, minibatches, (size_t)minibatches * 7 + 1);
    if (s != NULL)
        s->replicas = malloc((size_t)stages * sizeof *s->replicas);
    if (s == NULL || s->replicas == NULL) {
        rt_schedule_destroy(&s);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory building a pipedream schedule");
    }
    memcpy(s->replicas, replicas, (size_t)stages * sizeof *replicas);
    for (int st = 0; st < stages; st++) {
        int w = rt_schedule_pipedream_warmup(stages, replicas, st), b = 0;
        for (int g = 0; g < minibatches; g++) {
            push_forward(s, st, g);
            if (g >= w)
                push_pd_backward(s, st, b++);
        }
        while (b < minibatches) /* the drain (rt_runner_flush) */
            push_pd_backward(s, st, b++);
    }
    sc_status rc = rt_schedule_validate(s, err);
    if (rc != SC_OK) {
        rt_schedule_destroy(&s);
        return rc;
    }
    *out = s;
    return SC_OK;
}

/* Per stage: action order and counts. Returns the most micro-batches in flight in *slots. */
static sc_status validate_stage(const rt_schedule *s, int st, int *state, int *slots, sc_err *err)
{
    /* state[mb] bit flags, in the order the stage must pass them. */
    enum { GOT_F = 1, DID_F = 2, SENT_F = 4, GOT_B = 8, DID_B = 16, SENT_B = 32, DID_W = 64 };
    bool split = s->kind == RT_SCHED_ZB1; /* a micro-batch is held until its W */
    int p = s->stages, m = s->microbatches;
    bool first = st == 0, last = st == p - 1;
    memset(state, 0, (size_t)m * sizeof *state);
    int inflight = 0, opt = 0;
    /* pipedream: an OPT closes each round of r backwards (the copies' update) */
    int round = s->replicas != NULL ? s->replicas[st] : 0, since_opt = 0;
    *slots = 0;
    for (int i = 0; i < s->count[st]; i++) {
        const rt_action *a = &s->actions[st][i];
        int mb = a->mb;
        if (a->kind == RT_ACT_OPT) {
            if (round == 0 && i != s->count[st] - 1)
                return SC_ERRF(err, SC_ERR_INVALID,
                               "schedule: stage %d has OPT at action %d, "
                               "before its end",
                               st, i);
            if (round > 0 && since_opt != round)
                return SC_ERRF(err, SC_ERR_INVALID,
                               "schedule: stage %d has OPT at action %d after %d backwards; a "
                               "round of its %d copies has %d",
                               st, i, since_opt, round, round);
            since_opt = 0;
            opt++;
            continue;
        }
        if (mb < 0 || mb >= m)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "schedule: stage %d action %d (%s) names micro-batch %d of %d", st, i,
                           rt_action_name(a->kind), mb, m);
        int *f = &state[mb];
        const char *why = NULL;
        switch (a->kind) {
        case RT_ACT_RECV_F:
            why = first ? "the first stage receives no activations" : (*f & GOT_F) ? "twice" : NULL;
            *f |= GOT_F;
            break;
        case RT_ACT_F:
            why = (*f & DID_F) ? "twice" : (!first && !(*f & GOT_F)) ? "before its RECV_F" : NULL;
            *f |= DID_F;
            if (++inflight > *slots)
                *slots = inflight;
            break;
        case RT_ACT_SEND_F:
            why = last            ? "the last stage sends no activations"
                  : (*f & SENT_F) ? "twice"
                  : !(*f & DID_F) ? "before its F"
                                  : NULL;
            *f |= SENT_F;
            break;
        case RT_ACT_RECV_B:
            why = last ? "the last stage receives no gradients" : (*f & GOT_B) ? "twice" : NULL;
            *f |= GOT_B;
            break;
        case RT_ACT_B:
            why = (*f & DID_B)               ? "twice"
                  : !(*f & DID_F)            ? "before its F"
                  : (!last && !(*f & GOT_B)) ? "before its RECV_B"
                                             : NULL;
            *f |= DID_B;
            inflight -= !split;
            since_opt++;
            break;
        case RT_ACT_W:
            why = !split          ? "in a schedule that does not split the backward (only zb1)"
                  : (*f & DID_W)  ? "twice"
                  : !(*f & DID_B) ? "before its B"
                                  : NULL;
            *f |= DID_W;
            inflight--;
            break;
        case RT_ACT_SEND_B:
            why = first           ? "the first stage sends no gradients"
                  : (*f & SENT_B) ? "twice"
                  : !(*f & DID_B) ? "before its B"
                                  : NULL;
            *f |= SENT_B;
            break;
        default:
            why = "unknown action";
        }
        if (why != NULL)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "schedule: stage %d action %d: %s of micro-batch "
                           "%d %s",
                           st, i, rt_action_name(a->kind), mb, why);
    }
    int want_opt = round > 0 ? m / round : 1;
    if (opt != want_opt || since_opt != 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "schedule: stage %d has %d OPT actions (%d backwards after the last), "
                       "expected %d",
                       st, opt, since_opt, want_opt);
    for (int mb = 0; mb < m; mb++) {
        int want = DID_F | DID_B | (split ? DID_W : 0) | (first ? 0 : GOT_F | SENT_B) |
                   (last ? 0 : SENT_F | GOT_B);
        if (state[mb] != want)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "schedule: stage %d does not run micro-batch %d completely (missing "
                           "F, B, W (zb1) or one of its sends/receives)",
                           st, mb);
    }
    return SC_OK;
}

/* Sends never block; a receive waits for its send. All stages must reach their end. */
static sc_status dry_run(const rt_schedule *s, sc_err *err)
{
    int p = s->stages, m = s->microbatches;
    int *pc = calloc((size_t)p, sizeof *pc);
    char *sent_f = calloc((size_t)p * (size_t)m + 1, 1);
    char *sent_b = calloc((size_t)p * (size_t)m + 1, 1);
    sc_status rc = SC_OK;
    if (pc == NULL || sent_f == NULL || sent_b == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory validating a schedule");
        goto out;
    }
    for (;;) {
        bool progress = false, done = true;
        for (int st = 0; st < p; st++) {
            while (pc[st] < s->count[st]) {
                const rt_action *a = &s->actions[st][pc[st]];
                size_t at = (size_t)st * (size_t)m + (size_t)(a->mb < 0 ? 0 : a->mb);
                if (a->kind == RT_ACT_RECV_F && !sent_f[at - (size_t)m])
                    break;
                if (a->kind == RT_ACT_RECV_B && !sent_b[at + (size_t)m])
                    break;
                if (a->kind == RT_ACT_SEND_F)
                    sent_f[at] = 1;
                if (a->kind == RT_ACT_SEND_B)
                    sent_b[at] = 1;
                pc[st]++;
                progress = true;
            }
            if (pc[st] < s->count[st])
                done = false;
        }
        if (done)
            break;
        if (!progress) {
            int st = 0;
            while (pc[st] >= s->count[st])
                st++;
            const rt_action *a = &s->actions[st][pc[st]];
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "schedule deadlocks: stage %d waits forever at action %d (%s of "
                         "micro-batch %d)",
                         st, pc[st], rt_action_name(a->kind), a->mb);
            break;
        }
    }
out:
    free(pc);
    free(sent_f);
    free(sent_b);
    return rc;
}

sc_status rt_schedule_validate(rt_schedule *s, sc_err *err)
{
    int *state = calloc((size_t)s->microbatches + 1, sizeof *state);
    SC_ALLOC_CHECK(state, err);
    sc_status rc = SC_OK;
    for (int st = 0; rc == SC_OK && st < s->stages; st++)
        rc = validate_stage(s, st, state, &s->slots[st], err);
    free(state);
    if (rc == SC_OK)
        rc = dry_run(s, err);
    return rc;
}

sc_status rt_schedule_restrict(const rt_schedule *s, int stage, int replicas, int replica,
                               rt_action **out, int *count, int *slots, sc_err *err)
{
    *out = NULL;
    *count = 0;
    *slots = 0;
    if (stage < 0 || stage >= s->stages || replicas < 1 || replica < 0 || replica >= replicas)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "schedule: replica %d of %d of stage %d (of %d); valid: replicas >= 1, "
                       "replica 0..replicas-1",
                       replica, replicas, stage, s->stages);
    rt_action *a = malloc(((size_t)s->count[stage] + 1) * sizeof *a);
    SC_ALLOC_CHECK(a, err);
    int n = 0, inflight = 0;
    for (int i = 0; i < s->count[stage]; i++) {
        const rt_action *x = &s->actions[stage][i];
        if (x->kind != RT_ACT_OPT && x->mb % replicas != replica)
            continue;
        a[n++] = *x;
        if (x->kind == RT_ACT_F && ++inflight > *slots)
            *slots = inflight;
        if (x->kind == (s->kind == RT_SCHED_ZB1 ? RT_ACT_W : RT_ACT_B))
            inflight--;
    }
    *out = a;
    *count = n;
    return SC_OK;
}

/* One agent of the replicated dry run: replica k of stage st and its restricted list; opts: the
 * OPTs it has arrived at, waiting: it waits at the last of them. */
typedef struct {
    int st, k, count, pc, opts;
    bool waiting;
    rt_action *acts;
} dry_agent;

sc_status rt_schedule_validate_replicas(const rt_schedule *s, const int *replicas, sc_err *err)
{
    int p = s->stages, m = s->microbatches, n = 0;
    if (s->replicas != NULL) {
        for (int st = 0; replicas != NULL && st < p; st++)
            if (replicas[st] != s->replicas[st])
                return SC_ERRF(err, SC_ERR_INVALID,
                               "schedule: the pipedream lists were built for %d copies of stage "
                               "%d, not %d",
                               s->replicas[st], st, replicas[st]);
        replicas = s->replicas;
    }
    for (int st = 0; st < p; st++) {
        int r = replicas != NULL ? replicas[st] : 1;
        if (r < 1 || r > m)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "schedule: stage %d has %d replicas; valid: 1..microbatches (%d), so "
                           "that every replica runs a micro-batch",
                           st, r, m);
        n += r;
    }
    dry_agent *ag = calloc((size_t)n, sizeof *ag);
    int *first = calloc((size_t)p, sizeof *first); /* each stage's first agent */
    char *sent_f = calloc((size_t)p * (size_t)m + 1, 1);
    char *sent_b = calloc((size_t)p * (size_t)m + 1, 1);
    sc_status rc = SC_OK;
    if (ag == NULL || first == NULL || sent_f == NULL || sent_b == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory validating a replicated schedule");
        goto out;
    }
    for (int st = 0, i = 0; st < p && rc == SC_OK; st++) {
        int r = replicas != NULL ? replicas[st] : 1;
        first[st] = i;
        for (int k = 0; k < r && rc == SC_OK; k++, i++) {
            int slots = 0;
            ag[i].st = st;
            ag[i].k = k;
            rc = rt_schedule_restrict(s, st, r, k, &ag[i].acts, &ag[i].count, &slots, err);
        }
    }
    for (; rc == SC_OK;) {
        bool progress = false, done = true;
        for (int i = 0; i < n; i++) {
            dry_agent *g = &ag[i];
            int r = replicas != NULL ? replicas[g->st] : 1;
            while (g->pc < g->count) {
                const rt_action *a = &g->acts[g->pc];
                size_t at = (size_t)g->st * (size_t)m + (size_t)(a->mb < 0 ? 0 : a->mb);
                if (a->kind == RT_ACT_RECV_F && !sent_f[at - (size_t)m])
                    break;
                if (a->kind == RT_ACT_RECV_B && !sent_b[at + (size_t)m])
                    break;
                if (a->kind == RT_ACT_OPT) {
                    /* the all-reduce: announce arrival, pass once every replica of the stage
                     * has arrived at this OPT (its opts-th) too */
                    if (!g->waiting) {
                        g->waiting = true;
                        g->opts++;
                        progress = true;
                    }
                    int all = g->opts;
                    for (int k = 0; k < r; k++)
                        all = ag[first[g->st] + k].opts < all ? ag[first[g->st] + k].opts : all;
                    if (all < g->opts)
                        break;
                    g->waiting = false;
                }
                if (a->kind == RT_ACT_SEND_F)
                    sent_f[at] = 1;
                if (a->kind == RT_ACT_SEND_B)
                    sent_b[at] = 1;
                g->pc++;
                progress = true;
            }
            if (g->pc < g->count)
                done = false;
        }
        if (done)
            break;
        if (!progress) {
            int i = 0;
            while (ag[i].pc >= ag[i].count)
                i++;
            const rt_action *a = &ag[i].acts[ag[i].pc];
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "replicated schedule deadlocks: stage %d replica %d waits forever at "
                         "action %d (%s of micro-batch %d)",
                         ag[i].st, ag[i].k, ag[i].pc, rt_action_name(a->kind), a->mb);
        }
    }
out:
    for (int i = 0; ag != NULL && i < n; i++)
        free(ag[i].acts);
    free(ag);
    free(first);
    free(sent_f);
    free(sent_b);
    return rc;
}
