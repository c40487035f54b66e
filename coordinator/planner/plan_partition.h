/*
 * plan_partition: the partitioners. Each cuts the block chain into contiguous stages and
 * places every stage on one device or a replicated group of devices.
 *
 * Strategies: uniform, blockpartition (torchgpipe's Barany-Grinberg heuristic, the baseline),
 * minmax (exact contiguous min-max for the cluster's device order), exhaustive (brute force,
 * small instances only), pipedream (PipeDream's replication DP with hierarchical bandwidths),
 * autopipe (critical-stage search over the min-max partition) and hetero (ours: partition,
 * device order and replication over unequal devices, memory as a hard limit). Each strategy
 * has a file of its own, plan_partition_<strategy>.c (pipedream's DP over antichain states in
 * plan_partition_pipedream_dag.c); the container and the common objective are
 * plan_partition.c, the simulator glue plan_partition_sim.c.
 * Does not pick micro-batch sizes (plan_microbatch, plan_ga) and does not time schedules
 * except where a strategy itself needs the simulator (autopipe, and hetero to choose among
 * its candidates).
 *
 * Invariant of a partition: stages cover blocks 0..n_blocks-1 in order, each non-empty; each
 * device appears in at most one stage. Block positions are those of the profile's linear order,
 * or, when the partition carries a block order (pipedream on a branching graph), of that order.
 */
#ifndef PLAN_PARTITION_H
#define PLAN_PARTITION_H

#include "common/sc_pipeline.h"
#include "common/sc_status.h"
#include "coordinator/planner/plan_cluster.h"
#include "coordinator/planner/plan_schedule.h"

enum { PLAN_SEARCH_EXACT = 1, PLAN_SEARCH_HEURISTIC = 2 };

typedef struct plan_partition {
    int cap_stages;
    int cap_devices;
    int n_stages;
    int *first;     /* (n_stages) first block, inclusive */
    int *last;      /* (n_stages) last block, inclusive */
    int *n_dev;     /* (n_stages) replicas */
    int *dev_start; /* (n_stages) index into devs */
    int *devs;      /* (cap_devices) device ids, stage after stage */
    int n_devs;
    double objective_s; /* the strategy's own objective */
    int no_fit;         /* the strategy failed because no partition fits the devices' memory
                         * at the configured micro-batch size (smaller ones might) */
    char note[160];     /* what the strategy simplified, if anything */
    int search;         /* hetero picking by simulation: PLAN_SEARCH_EXACT when its exact
                         * search ran to the end (plan_partition_exact), PLAN_SEARCH_HEURISTIC
                         * when its order search did; 0 for the other strategies */
    /* NULL: positions are the profile's own. Else (n_order = the profile's n_blocks) position i
     * holds the profile's block order[i], a topological order of its DAG in which every stage
     * is contiguous (plan_profile_reorder builds the profile in that order). */
    int *order;
    int n_order;
} plan_partition;

sc_status plan_partition_new(plan_partition **out, int cap_stages, int cap_devices, sc_err *err);
void plan_partition_destroy(plan_partition **p);
/* Empties p: no stages, no objective, no note, no block order, no_fit 0. */
void plan_partition_clear(plan_partition *p);
/* Appends a stage of blocks first..last on devs[0..n-1]. Asserts capacity. */
void plan_partition_push(plan_partition *p, int first, int last, const int *devs, int n);
/* Copies stages, objective and note. Never allocates: src must carry no block order (asserted;
 * only pipedream sets one, and no strategy copies its partitions); dst loses any it had. */
void plan_partition_copy(plan_partition *dst, const plan_partition *src);
/* Gives p the block order order[0..n-1] (copied; see plan_partition.order). SC_ERR_NOMEM. */
sc_status plan_partition_set_order(plan_partition *p, const int *order, int n, sc_err *err);

/* What every strategy needs to know. */
typedef struct plan_search_cfg {
    const plan_cost *cost;     /* block costs at the plan's micro-batch size */
    const plan_cost *ref_cost; /* at the profile's own size (pipedream's objective); may = cost */
    plan_sched_kind sched;     /* decides how many micro-batches a stage stashes */
    int n_micro;               /* micro-batches per iteration; pipedream and hetero give a stage
                                  only copies the runtime runs with them
                                  (plan_replicas_runnable) */
    double slice_efficiency;   /* for simulating sliced schedules */
    long exhaustive_limit;     /* candidate plans exhaustive may try; 0 = default */
    int max_stages;            /* 0 = as many as devices; every strategy honours it
                                  (hetero's copies let a capped plan use more devices), but
                                  pipedream, whose DP picks the count, refuses a plan over it */
    int select_by_sim;         /* hetero: among the best partitions for each device count,
                                  keep the one the simulator finds fastest (else the lowest
                                  bottleneck) */
    int sliced;                /* sliced schedule: warm-up micro-batches run as two halves that
                                  the memory bound assumes, at most the plan's stages - 1 and
                                  n_micro; 0 = none (the 1F1B count) */
} plan_search_cfg;

#define PLAN_EXHAUSTIVE_DEFAULT_LIMIT 20000000L

/* ---- the common objective (docs/reference/formats.md) -------------------------------------------
 */

/* Compute time of stage s per micro-batch: the slowest replica's (forward + backward) divided
 * by the replicas, plus, when replicated, its share of the weight all-reduce
 * (4 (r-1) W / (r bw)) that a synchronous iteration does once for batch / samples
 * micro-batches. */
double plan_partition_stage_time(const plan_cost *c, const plan_partition *p, int s);
/* The all-reduce of stage s's copies, once per iteration: 4 (r-1) W / (r bw), bw the copies'
 * plan_group_reduce_bw; 0 for a stage of one copy. */
double plan_partition_reduce_time(const plan_cost *c, const plan_partition *p, int s);
/* 2 x activation bytes at the cut after stage s / bandwidth between the two stages. */
double plan_partition_cut_time(const plan_cost *c, const plan_partition *p, int s);
/* With the cluster's links: the busiest link's time per micro-batch when every cut's
 * activation and gradient and every replicated stage's all-reduce (its share of one per
 * iteration) are routed over the links they cross (plan_cluster_route). 0 without links. */
double plan_partition_contention(const plan_cost *c, const plan_partition *p);
/* max over stage times, cut times and the contention time. */
double plan_partition_bottleneck(const plan_cost *c, const plan_partition *p);
/* Micro-batches one copy of a stage of `copies` copies keeps stashed under schedule `k` with m
 * micro-batches, the stages from it to the last having `after` copies in all (its own
 * included): the runtime's rule (sc_pipeline.h, rt_schedule_slots_bound): gpipe ceil(m / r),
 * 1f1b (and sliced without halves) min(W / r + 1, ceil(m / r)) with the 1F1B-RR warm-up
 * W = r floor((after - 1) / r), pipedream W / r + 1 (its stream crosses iterations).
 * Unreplicated: m, min(p-s, m) and p-s. Inline: the DPs' memory bounds ask for every cell.
 * Not for zb1, whose count depends on the plan's stages (plan_stash_count_zb1). */
static inline double plan_stash_count_copy(plan_sched_kind k, int after, int copies, int m)
{
    switch (k) {
    case PLAN_SCHED_GPIPE:
        return (m + copies - 1) / copies;
    case PLAN_SCHED_PIPEDREAM: /* the stream crosses iterations: no cap by m */
        return sc_pipeline_copy_slots(after, copies, 0);
    default:
        return sc_pipeline_copy_slots(after, copies, m);
    }
}
/* zb1 (ZB-H1): every stage keeps a micro-batch's inputs from its F to its W, at most
 * min(W_0 + 1, m) of them (plan_schedule_build_replicated): 1F1B's first stage's count, on every
 * stage; unreplicated W_0 + 1 = p, min(p, m). A copy of a stage of `copies` keeps its share,
 * ceil(that / copies) (rt_schedule_slots_bound). `first` is W_0 + 1: the plan's stage count
 * unreplicated, with copies sc_pipeline_warmup(all copies, stage 0's copies) + 1. Counted whole:
 * that the input gradient (B) done frees part of them is not modelled. ZB-H1's uncapped count:
 * a plan's capped deferral (plan_partition_zb1_defer) holds this many or fewer, and fits where
 * 1F1B's count does, which the searches count for zb1. */
static inline double plan_stash_count_zb1_copy(int first, int copies, int m)
{
    int held = first < m ? first : m;
    return (held + copies - 1) / copies;
}
static inline double plan_stash_count_zb1(int n_stages, int m)
{
    return plan_stash_count_zb1_copy(n_stages, 1, m);
}
/* Micro-batches stage s keeps stashed under schedule `k` with m micro-batches, no stage
 * replicated: plan_stash_count_copy(k, n_stages - s, 1, m), or plan_stash_count_zb1. */
double plan_stash_count(plan_sched_kind k, int n_stages, int s, int m);
/* Extra weight versions one copy keeps: pipedream's W / r (p-s-1 unreplicated), 0 for the
 * synchronous schedules. Inline: the DPs' memory bounds ask for every cell. */
static inline int plan_weight_versions(plan_sched_kind k, int after, int copies)
{
    return k == PLAN_SCHED_PIPEDREAM ? sc_pipeline_copy_slots(after, copies, 0) - 1 : 0;
}
/* Micro-batches' worth of samples stage s keeps stashed under the sliced schedule when the
 * first `sliced` of m micro-batches run as two halves (plan_schedule_build); sliced 0 gives
 * the 1F1B count. Slicing can raise a stage's count as well as lower it. */
double plan_stash_count_sliced(int n_stages, int s, int m, int sliced);
/* The same for one copy, as plan_stash_count_copy: with one copy exactly
 * plan_stash_count_sliced with W = after - 1 for p-s-1; with more, a bound (the halves counted
 * whole): the copy's share of the warm-up's units plus one, at most its share of the units. */
double plan_stash_count_sliced_copy(int after, int copies, int m, int sliced);
/* Memory of stage s on each of its devices (bytes). */
double plan_partition_stage_memory(const plan_search_cfg *cfg, const plan_partition *p, int s);
/* SC_OK when every stage fits its devices' memory; else SC_ERR_TOO_LARGE naming the stage. */
sc_status plan_partition_check_memory(const plan_search_cfg *cfg, const plan_partition *p,
                                      sc_err *err);
/* max(total work / total device speed, the largest block on the fastest device), where the
 * work is measured on the fastest device type: no plan whose stages each run on one device has
 * a smaller bottleneck. */
double plan_lower_bound(const plan_cost *c);
/* total work / total device speed alone: the bound that also holds for plans with replicated
 * stages, whose copies split a block's micro-batches (a stage of r copies takes its work / r
 * per micro-batch in the bottleneck). */
double plan_lower_bound_replicated(const plan_cost *c);

/* Whether the runtime runs a stage of r copies when an iteration has m micro-batches under
 * schedule k (docs/design/runtime.md, "Replicated stages"): the synchronous schedules route
 * micro-batch j to copy j mod r and need one on every copy, r <= m (sliced: its halves only
 * add micro-batches, so m is enough); pipedream's rounds of r minibatches must not straddle
 * steps, so m must be a multiple of every stage's copies, i.e. r divides m. zb1 is synchronous:
 * r <= m. One copy always runs; m below 1 counts as 1.
 * Inline: the DPs ask for every cell. */
static inline int plan_replicas_runnable(plan_sched_kind k, int m, int r)
{
    if (r <= 1)
        return 1;
    m = m > 1 ? m : 1;
    return k == PLAN_SCHED_PIPEDREAM ? m % r == 0 : r <= m;
}
/* plan_replicas_runnable for every stage of p. */
int plan_partition_runnable(const plan_partition *p, plan_sched_kind k, int m);

/* ---- strategies ------------------------------------------------------------------------ */
/* All fill `out` (capacity: n_blocks stages, n_devices devices). SC_ERR_TOO_LARGE when no
 * partition fits the memory of the devices. The two that replicate stages (pipedream, hetero)
 * replicate only as far as plan_replicas_runnable allows for cfg->sched and cfg->n_micro. */
sc_status plan_partition_uniform(const plan_search_cfg *cfg, plan_partition *out, sc_err *err);
sc_status plan_partition_blockpartition(const plan_search_cfg *cfg, plan_partition *out,
                                        sc_err *err);
sc_status plan_partition_minmax(const plan_search_cfg *cfg, plan_partition *out, sc_err *err);
/* Refuses (SC_ERR_TOO_LARGE) when the number of candidates exceeds the limit. */
sc_status plan_partition_exhaustive(const plan_search_cfg *cfg, plan_partition *out, sc_err *err);
/* On a branching graph.txt profile the stages are PipeDream's antichain states; when one of
 * them is not a prefix of the profile's order, `out` carries a block order in which all are
 * (plan_partition.order), and positions refer to it. */
sc_status plan_partition_pipedream(const plan_search_cfg *cfg, plan_partition *out, sc_err *err);
sc_status plan_partition_autopipe(const plan_search_cfg *cfg, plan_partition *out, sc_err *err);
sc_status plan_partition_hetero(const plan_search_cfg *cfg, plan_partition *out, sc_err *err);

/* The share of a block's backward that is its weight gradient (zb1's W), the rest being the
 * input gradient (B), for profiles that do not measure it (no wgrad_s: hand-written and older
 * profiles, graph.txt). An assumption, stated in such zb1 plans: for blocks whose time goes to
 * matrix products (linear layers, attention projections) the two gradients are one product each
 * of the forward's size, so B = W = half the backward. `stagecraft profile` measures B and W
 * (kernels/profile.h) and each block's own share is used instead. */
#define PLAN_WGRAD_SHARE 0.5

/* Stage costs for the simulator: per-stage forward/backward of one micro-batch on one copy
 * (the slowest), its weight-gradient part (PLAN_WGRAD_SHARE of it, zb1's W), the optimizer step
 * with the copies' all-reduce, and cut transfers. A replicated stage's copies are simulated
 * each on its own (plan_schedule_build_replicated). */
struct plan_sim_stage;
void plan_partition_sim_stages(const plan_cost *c, const plan_partition *p,
                               struct plan_sim_stage *stages);
/* p->n_dev when some stage of p has copies, else NULL: what plan_schedule_build_replicated
 * takes for p. */
int *plan_partition_copies(const plan_partition *p);

/* zb1's memory budget for p: w_defer[s] (n_stages entries) = ZB-H1's deferral
 * (plan_schedule_zb1_defer), or with c->zb1_peak_cap plan_schedule_zb1_caps over the stages'
 * stash bytes per micro-batch (plan_cost_stash, what a micro-batch keeps from F to W), so that
 * no copy holds more bytes than 1F1B's peak stage does; then lowered until the stage fits its
 * smallest device (plan_cost_memory plus the W stashes of the micro-batches held and the
 * largest block's scratch, as plan_run's peak counts them; down to 0, 1F1B's count): a zb1 plan
 * fits wherever the same partition under 1F1B fits. */
sc_status plan_partition_zb1_defer(const plan_cost *c, const plan_partition *p, int n_micro,
                                   int *w_defer, sc_err *err);
/* The schedule the runtime runs p with: plan_schedule_build_replicated with p's copies, and for
 * zb1 plan_schedule_build_zb1 with plan_partition_zb1_defer's caps. */
sc_status plan_partition_schedule(const plan_cost *c, const plan_partition *p, plan_sched_kind kind,
                                  int units, int sliced, plan_schedule **out, sc_err *err);

/* Plays schedule `s` (n_micro micro-batches; built for p's copies, SC_ERR_INVALID otherwise)
 * over the partition's stage costs `stages`, with
 * the stages on a server that has compute_slots sharing them (a stage counts on the server of
 * its first device; one group per such server), else each on its own device: the one simulation
 * the driver and the strategies that select by simulation share. Errors as plan_sim_run. */
struct plan_sim_result;
sc_status plan_partition_simulate(const plan_cost *c, const plan_partition *p,
                                  const plan_schedule *s, const struct plan_sim_stage *stages,
                                  int n_micro, double slice_efficiency, int record_events,
                                  struct plan_sim_result *out, sc_err *err);
/* A search's candidate simulated as plan_run will run it: cfg's schedule (pipedream over
 * enough minibatches to reach its steady state; sliced with cfg->sliced halves, at most the
 * stages - 1 and the micro-batches), cfg->n_micro micro-batches; *iter_s its iteration. `st`
 * holds cand's stages (n_stages entries). Errors as plan_partition_simulate. */
sc_status plan_search_simulate(const plan_search_cfg *cfg, const plan_partition *cand,
                               struct plan_sim_stage *st, double *iter_s, sc_err *err);
/* The same for unequal micro-batch sizes per stage (plan_sim_run_sized_shared): the umpipe
 * strategy's figures. */
struct plan_sim_sized;
sc_status plan_partition_simulate_sized(const plan_cost *c, const plan_partition *p,
                                        const struct plan_sim_sized *in, int record_events,
                                        struct plan_sim_result *out, sc_err *err);

#endif /* PLAN_PARTITION_H */
