/*
 * rt schedule: a pipeline schedule as data. For each stage, an ordered list of actions
 * (RECV_F, F, SEND_F, RECV_B, B, SEND_B, OPT) over micro-batches 0..m-1, generated for gpipe
 * (all forwards, then all backwards, then the flush) or 1f1b with flush (p-s-1 warm-up forwards,
 * then one forward / one backward, then the drain; with replicated stages the warm-up of
 * 1F1B-RR, below).
 *
 * Validation checks what the executor relies on: each stage runs every micro-batch's F once and
 * its B once, F before B; every send has its matching receive on the neighbour; one OPT at the
 * end; and a dry run (sends never block, a receive waits for its send) completes, so the
 * schedule cannot deadlock. It also reports the activation slots each stage needs.
 * Replicated stages: with r_s replicas of stage s, micro-batch j runs on replica j % r_s of every
 * stage, and each replica runs its stage's list restricted to its own micro-batches (the order is
 * kept). rt_schedule_validate_replicas() dry-runs those restricted lists over all stages and
 * replicas, the replicas of a stage meeting at OPT (their gradient all-reduce).
 * 1f1b with replicated stages (rt_schedule_new_replicated): stage s taken as a whole warms up
 * with min(W_s, m) forwards, W_s = r_s * floor((R_s - 1) / r_s) as for pipedream below
 * (sc_pipeline_warmup; p-s-1 unreplicated, so unreplicated lists are the textbook ones), and
 * each copy, after W_s / r_s warm-up forwards of its own, alternates its own F and B. The
 * textbook p-s-1 counts stages, not copies: with two stages at most two micro-batches would be
 * in flight, one copy busy per stage. A copy holds min(W_s / r_s + 1, ceil(m / r_s))
 * micro-batches (rt_schedule_slots_bound). Deadlock-free by pipedream's argument: the flushed
 * list is the pipedream stream of more minibatches (a multiple of every r) with every action of
 * the minibatches from m on removed and the OPTs but a last one dropped; in a dry run removing
 * actions and barriers only removes waits, and the last OPT waits for copies that have run
 * everything else. rt_schedule_validate_replicas checks it all the same.
 * Asynchronous pipedream with replicated stages (1F1B-RR): rt_schedule_new_pipedream() writes a
 * finite stream of minibatches as one list per stage, with an OPT (the copies' all-reduce and
 * update) after every round of r_s consecutive backwards; each copy runs its restriction, so the
 * same dry run checks that the runner's stream cannot deadlock (see rt_schedule_pipedream_warmup
 * for the rule). The runner executes that stream itself, step by step, without building lists.
 * Zero-bubble ZB-H1 (zb1, Qi et al., ICLR 2024): each backward split into B (the input
 * gradient, sent upstream at once) and W (the parameter gradients, action RT_ACT_W), run later.
 * The lists are the 1f1b lists (1F1B-RR warm-up W_s with copies) with W actions inserted: stage s
 * defers the W of its first D_s backwards, D_s = min(W_0 - W_s, m - min(W_s, m)) (s unreplicated,
 * capped by the steady phase's length), then runs after each backward the W of its oldest
 * pending micro-batch, and the D_s deferred ones at the end, before OPT. Unreplicated these are
 * plan_schedule_build's zb1 lists (stage s: p-s-1 warm-up forwards, s pairs of F and B, then
 * F B W, then B W, then s W): the last stages fill the drain, where 1f1b leaves them idle while
 * the gradients travel back, with their W. The sends and receives are 1f1b's, in 1f1b's order,
 * and a W waits for nothing, so the dry run is 1f1b's (deadlock-free by its argument). A
 * micro-batch holds its slot from F to W: the stage as a whole holds at most min(W_0 + 1, m),
 * 1f1b's count on stage 0 (min(p, m) unreplicated, on every stage: ZB-H1's memory), a copy
 * ceil(that / r_s) (rt_schedule_slots_bound).
 * zb1 with a memory budget (rt_schedule_new_zb1): ZB-H1 counts memory in micro-batches; where
 * the stages' slots differ in bytes (a GPT's last stage holds the logits) its peak over stages
 * exceeds 1f1b's. Each stage's deferral may then be capped, w_defer[s] (the planner's
 * plan_schedule_zb1_caps: the most W that keep the stage's bytes in flight within 1f1b's peak
 * over all stages, the plan's "deferred_w"): the stage defers D'_s = min(w_defer[s], D_s) and
 * holds min(W_s + 1 + D'_s, m) micro-batches as a whole, a copy ceil(that / r_s)
 * (rt_schedule_zb1_slots_bound). D'_s = 0 is 1f1b's list with each W right after its B. The
 * sends and receives stay 1f1b's, so the dry run is unchanged.
 * Not here: the cut micro-batches of the sliced warm-up (the runner adds them on top of 1f1b
 * lists).
 */
#ifndef RT_SCHEDULE_H
#define RT_SCHEDULE_H

#include "common/sc_status.h"

typedef enum {
    RT_SCHED_GPIPE = 0,
    RT_SCHED_1F1B = 1,
    RT_SCHED_PIPEDREAM = 2, /* built by rt_schedule_new_pipedream() only */
    RT_SCHED_ZB1 = 3,       /* 1f1b with each backward split into B and W (above) */
} rt_schedule_kind;

typedef enum {
    RT_ACT_RECV_F = 0, /* receive micro-batch mb's input activation from stage s-1 */
    RT_ACT_F,          /* forward of mb */
    RT_ACT_SEND_F,     /* send mb's output activation to stage s+1 */
    RT_ACT_RECV_B,     /* receive the gradient of mb's output from stage s+1 */
    RT_ACT_B,          /* backward of mb */
    RT_ACT_SEND_B,     /* send the gradient of mb's input to stage s-1 */
    RT_ACT_OPT,        /* optimizer step (mb = -1); pipedream: after every round of backwards */
    RT_ACT_W,          /* zb1: the parameter gradients of mb, after its B (the input gradient) */
} rt_action_kind;

typedef struct {
    rt_action_kind kind;
    int mb;
} rt_action;

typedef struct {
    rt_schedule_kind kind;
    int stages, microbatches;
    int *count;          /* [stages]: actions per stage */
    rt_action **actions; /* [stages][count[s]] */
    int *slots;          /* [stages]: most micro-batches in flight (F done, B not yet; zb1: W) */
    int *replicas;       /* [stages]: copies of each stage (pipedream only; NULL otherwise) */
} rt_schedule;

/* Parses "gpipe", "1f1b" or "zb1". "pipedream", "sliced" and "unequal" are SC_ERR_UNSUPPORTED here
 * (the runner builds the first two on 1f1b lists, "unequal" on gpipe lists). */
sc_status rt_schedule_kind_parse(const char *s, const char *what, rt_schedule_kind *out,
                                 sc_err *err);
const char *rt_schedule_kind_name(rt_schedule_kind kind);

/* Builds and validates the schedule of `stages` stages and `microbatches` micro-batches (gpipe,
 * 1f1b or zb1; RT_SCHED_PIPEDREAM is SC_ERR_INVALID here: use rt_schedule_new_pipedream). */
sc_status rt_schedule_new(rt_schedule **out, rt_schedule_kind kind, int stages, int microbatches,
                          sc_err *err);
/* The same for stages of replicas[st] copies (NULL: one each): 1f1b warms up stage s with
 * min(W_s, m) forwards (1F1B-RR, above), gpipe is unchanged. The lists are the whole stages';
 * a copy runs rt_schedule_restrict's, and rt_schedule_validate_replicas(s, replicas) dry-runs
 * them (s->slots counts a whole stage). A count outside 1..microbatches is SC_ERR_INVALID.
 * Every copy of every stage must be given the same vector: a stage's warm-up depends on the
 * copies of all stages after it, and lists built for different vectors may deadlock. */
sc_status rt_schedule_new_replicated(rt_schedule **out, rt_schedule_kind kind, int stages,
                                     int microbatches, const int *replicas, sc_err *err);
/* zb1 with stage st deferring at most w_defer[st] weight gradients (>= 0; NULL: ZB-H1's D_s
 * on every stage, rt_schedule_new_replicated's lists); a stage never defers more than D_s. A
 * negative entry is SC_ERR_INVALID; the other errors as rt_schedule_new_replicated's. */
sc_status rt_schedule_new_zb1(rt_schedule **out, int stages, int microbatches, const int *replicas,
                              const int *w_defer, sc_err *err);
/* The W that stage `stage` defers under zb1: min(w_defer[stage], D_s), D_s = min(W_0 - W_s, m -
 * min(W_s, m)) (s unreplicated; w_defer NULL or a negative entry: D_s). */
int rt_schedule_zb1_defer(int stages, const int *replicas, int stage, int microbatches,
                          const int *w_defer);
/* The activation slots one copy of `stage` needs under that zb1: ceil(min(W_s + 1 + deferred,
 * m) / r_s); w_defer NULL: rt_schedule_slots_bound's zb1 count. */
int rt_schedule_zb1_slots_bound(int stages, const int *replicas, int stage, int microbatches,
                                const int *w_defer);
/* The sliced schedule: 1f1b over `units` units, of which the first 2 * `sliced` are the halves
 * of the first `sliced` micro-batches (units = m + sliced). Stage s warms up with as many units
 * as cover its 1f1b warm-up in micro-batches' worth, halves counted as halves
 * (sc_pipeline_sliced_warmup, the rule the planner simulates), not with W_s units. */
sc_status rt_schedule_new_sliced(rt_schedule **out, int stages, int units, int sliced,
                                 const int *replicas, sc_err *err);
/* The activation slots one copy of `stage` needs under it (sc_pipeline_sliced_copy_slots). */
int rt_schedule_sliced_slots_bound(int stages, const int *replicas, int stage, int units,
                                   int sliced);
void rt_schedule_destroy(rt_schedule **s);

/* Validates any schedule (also hand-made ones, for tests); fills s->slots. A synchronous list has
 * one OPT, at its end; a zb1 list one W for each micro-batch, after its B, and no other list
 * has W; a pipedream list of stage s one after every r_s-th backward (and no
 * backward after the last). */
sc_status rt_schedule_validate(rt_schedule *s, sc_err *err);

/* Activation slots one copy of stage `stage` needs, replicas[st] copies of stage st (NULL: one
 * each): ceil(m / r_s) for gpipe, min(W_s / r_s + 1, ceil(m / r_s)) for 1f1b, ceil(min(W_0 + 1,
 * m) / r_s) for zb1 (min(p, m) unreplicated; capped zb1: rt_schedule_zb1_slots_bound)
 * (sc_pipeline_copy_slots; min(p-s, m) unreplicated), W_s / r_s + 1 for pipedream, whose stream
 * crosses steps (p-s unreplicated). The copy that runs the most micro-batches (copy 0) needs
 * exactly that many, the others at most that (tested against rt_schedule_restrict). */
int rt_schedule_slots_bound(rt_schedule_kind kind, int stages, const int *replicas, int stage,
                            int microbatches);

const char *rt_action_name(rt_action_kind kind);

/* The list of `stage` restricted to the micro-batches j with j % replicas == replica, in their
 * order, OPT kept: a malloc'ed array of *count actions (free() it) and the activation slots it
 * needs (most of its micro-batches in flight). replicas >= 1, 0 <= replica < replicas. */
sc_status rt_schedule_restrict(const rt_schedule *s, int stage, int replicas, int replica,
                               rt_action **out, int *count, int *slots, sc_err *err);

/* PipeDream with replicated stages (1F1B-RR). Minibatch g of the stream runs on copy g % r_s of
 * stage s (r_s = replicas[s] copies). Stage s, taken as a whole, runs F(g) then B(g - W_s) with
 * the warm-up W_s = r_s * floor((R_s - 1) / r_s), R_s the copies of stages s..p-1, and after the
 * backward of every round of r_s consecutive minibatches an OPT. W_s is a multiple of r_s, so
 * each copy alternates its own F and B after floor((R_s - 1) / r_s) warm-up forwards, as
 * PipeDream's runtime does; unreplicated, W_s = p-s-1. W_s >= R_{s+1} > W_{s+1}, so a backward's
 * gradient never waits for a forward the stage has not run yet: no deadlock whatever the counts.
 * rt_schedule_pipedream_slots: the activation slots (= stashed weight versions) of one copy,
 * W_s / r_s + 1 (for stage 0, PipeDream's NOAM = ceil(all copies / r_0)). stages >= 1, stage in
 * 0..stages-1, every replicas[st] >= 1. */
int rt_schedule_pipedream_warmup(int stages, const int *replicas, int stage);
int rt_schedule_pipedream_slots(int stages, const int *replicas, int stage);

/* The pipedream stream of `minibatches` minibatches (a multiple of every replicas[st], so the last
 * round of each stage is complete) followed by its drain, as one list per stage: F(g) then
 * B(g - W_s), the remaining backwards at the end, an OPT after every r_s-th backward. The copy of
 * `replicas` is kept in s->replicas; validated as rt_schedule_validate does (slots counts the
 * whole stage's minibatches in flight). Restricting it to a copy and
 * rt_schedule_validate_replicas() check what one copy runs. Bad counts are SC_ERR_INVALID. */
sc_status rt_schedule_new_pipedream(rt_schedule **out, int stages, const int *replicas,
                                    int minibatches, sc_err *err);

/* Dry run of the restricted lists of every replica of every stage (replicas[st] >= 1 copies of
 * stage st; NULL: one each): sends never block, a receive waits for its send (micro-batch j's
 * activation comes from replica j % replicas[st-1], its gradient from j % replicas[st+1]), and
 * the n-th OPT of a replica waits until every replica of the stage has reached its n-th OPT.
 * Every replica must reach its end; a deadlock is SC_ERR_INVALID naming the stage, replica and
 * action it waits at. A pipedream schedule is run with its own replicas (NULL: those; another
 * vector is SC_ERR_INVALID, since its OPTs were placed for them). */
sc_status rt_schedule_validate_replicas(const rt_schedule *s, const int *replicas, sc_err *err);

#endif /* RT_SCHEDULE_H */
