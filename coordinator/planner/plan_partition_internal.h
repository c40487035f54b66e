/*
 * plan_partition_internal: what the partitioner's files share beyond plan_partition.h: the cost
 * model's small helpers (inline: the DPs call them for every cell), the searches' stash and
 * memory rules, and the DP over a device order that minmax and hetero build on
 * (plan_partition_dp.c).
 *
 * Private to the planner's plan_partition*.c files; nothing outside coordinator/planner
 * includes it, and nothing here is a strategy: the model never calls one.
 */
#ifndef PLAN_PARTITION_INTERNAL_H
#define PLAN_PARTITION_INTERNAL_H

#include <math.h>
#include <stddef.h>

#include "coordinator/planner/plan_partition.h"

/* ---- the cost model (plan_partition.c) ------------------------------------------------ */

static inline int dev_type(const plan_cost *c, int d)
{
    return c->cluster->devices[d].type;
}

/* PipeDream's data-parallel cost: 4 (r-1) W / (r bw) for a ring all-reduce of W bytes. */
static inline double allreduce_s(double params, int r, double bw)
{
    return r > 1 ? 4.0 * (r - 1) * params / (r * bw) : 0;
}

/* Share of one micro-batch in a replicated stage's weight all-reduce: synchronous schedules
 * reduce once per iteration, i.e. once per batch / samples micro-batches. */
static inline double allreduce_share_s(const plan_cost *c, double params, int r, double bw)
{
    double m = c->samples > 0 ? c->batch / c->samples : 1;
    return allreduce_s(params, r, bw) / (m > 1 ? m : 1);
}

/* `bw` at most server `server`'s measured all-reduce speed, when it has one: a host-memory
 * all-reduce also copies and sums the gradients on the CPU, which no link speed shows. */
static inline double reduce_capped(const plan_cluster *cl, int server, double bw)
{
    double m = cl->servers[server].reduce_bw_bytes_per_s;
    return m > 0 && m < bw ? m : bw;
}

static inline double dev_memory(const plan_cost *c, int d)
{
    return c->cluster->types[dev_type(c, d)].memory_bytes;
}

/* The least bandwidth between a device of a[0..na-1] and a different device of b[0..nb-1];
 * HUGE_VAL when there is no such pair. */
double plan_group_min_bw(const plan_cluster *cl, const int *a, int na, const int *b, int nb);

/* The bandwidth the copies on devs[0..n-1] all-reduce at in the cost model: the least between
 * two of them (plan_group_min_bw), capped by each of their servers' measured all-reduce speed
 * (reduce_capped). HUGE_VAL for one device. */
double plan_group_reduce_bw(const plan_cluster *cl, const int *devs, int n);

/* The stash count the searches assume for a copy of a stage of `copies` copies in a plan of
 * n_stages stages, the stages from it on having `after` copies in all (at most). */
static inline double search_stash(const plan_search_cfg *cfg, int n_stages, int after, int copies)
{
    int k = cfg->sliced;
    if (cfg->sched == PLAN_SCHED_ZB1) /* 1F1B's: zb1's capped deferral fits where it does */
        return plan_stash_count_copy(PLAN_SCHED_1F1B, after, copies, cfg->n_micro);
    if (cfg->sched != PLAN_SCHED_SLICED || k <= 0)
        return plan_stash_count_copy(cfg->sched, after, copies, cfg->n_micro);
    k = k < n_stages - 1 ? k : n_stages - 1;
    k = k < cfg->n_micro ? k : cfg->n_micro;
    return plan_stash_count_sliced_copy(after, copies, cfg->n_micro, k);
}

/* Sliced schedule: a search tries none and then 1..this many warm-up micro-batches run as
 * halves, each count with its own stash counts (search_stash); a partition fits when one count
 * fits all its stages, as plan_run then keeps the fastest count that fits. 0 when the schedule
 * is not sliced, the search was given its count (cfg->sliced), a micro-batch holds fewer than 2
 * samples (the runtime halves none), or there are at least as many micro-batches as `stages`
 * (the most stages a plan may have, or that the search's memory bound counts): then halves
 * never lower a stage's stash below 1F1B's (plan_stash_count_sliced; they only hold more on
 * the first stages), so they cannot make a plan fit. */
int plan_search_sliced_tries(const plan_search_cfg *cfg, int stages);

/* The most stages a plan may have: a device and a block each at least, and at most
 * cfg->max_stages when that is set (every strategy but pipedream, which refuses a plan over
 * it). */
int plan_search_max_stages(const plan_search_cfg *cfg);

/* The error of a strategy that found no partition fitting the devices' memory: marks
 * out->no_fit and returns SC_ERR_TOO_LARGE, naming `who`, the largest device and the largest
 * block. */
sc_status plan_partition_no_fit(const plan_search_cfg *cfg, const char *who, plan_partition *out,
                                sc_err *err);

/* ---- hetero's exact search (plan_partition_exact.c) ------------------------------------- */

/* The most devices the exact search takes. */
#define PLAN_EXACT_MAX_DEVICES 8
/* Its work units: one per cut tried for a stage, blocks x classes / 8 per bound on the blocks
 * left, PLAN_EXACT_SIM_UNITS per micro-batch and stage of a plan simulated. The default budget
 * is about one second of search on one core (docs/benchmarks.md). */
#define PLAN_EXACT_SIM_UNITS 4L
#define PLAN_EXACT_DEFAULT_BUDGET 64000000L

/* Whether the exact search applies to cfg at all: at most PLAN_EXACT_MAX_DEVICES devices, no
 * explicit links or measured bandwidth matrix, no CPU quota, not pipedream. */
int plan_exact_eligible(const plan_search_cfg *cfg);
/* The plan of least simulated iteration (plan_search_simulate) among every plan of contiguous
 * stages on 1..DP_MAX_COPIES alike devices of one server each (copies plan_replicas_runnable),
 * that fits memory (plan_partition_check_memory), within `budget` work units (0: the default),
 * when one beats `incumbent` (the iteration of a plan the caller has; HUGE_VAL: none).
 * *completed 1 when the search ran to the end: then, when a plan beats the incumbent, `out`
 * holds the best and *iter_s is its iteration; else out is untouched and *iter_s is the
 * incumbent (HUGE_VAL: no plan fits). *completed 0 when cfg is not eligible or the budget ran
 * out (out untouched, *iter_s the incumbent). *mem_cut is set when memory ruled out anything.
 * Errors: out of memory, a simulation's. */
sc_status plan_partition_exact(const plan_search_cfg *cfg, long budget, double incumbent,
                               plan_partition *out, double *iter_s, int *completed, int *mem_cut,
                               sc_err *err);

/* ---- the DP over a device order (plan_partition_dp.c) --------------------------------- */

/* The most copies of one stage any DP gives (hetero's max_rep). */
#define DP_MAX_COPIES 8

/* Without a stage cap (S 0) one plane of (D+1, L+1) cells: row d, column n holds the best
 * partition of the first n blocks on the order's first d devices. With a cap of S stages,
 * planes 0..S of (rows+1, L+1) cells, plane s holding the best with at most s stages (plane 0
 * the empty plan); the cap's answers are plane S's. rows = min(D, S x DP_MAX_COPIES): no plan
 * of S stages uses more devices, and rows beyond read as nothing found. */
typedef struct dp_tables {
    int D, L, S, rows;
    double *f; /* the planes */
    int *k;    /* split */
    int *r;    /* replicas of the last stage; 0: the plane below's cell (fewer stages) */
} dp_tables;

/* Tables for D devices, L blocks and at most S stages (0: no cap; pass 0 too when S >= D or
 * S >= L, which caps nothing); -1 when out of memory. plan_dp_free frees what was allocated,
 * also after a failed plan_dp_alloc or on zeroed tables. */
void plan_dp_free(dp_tables *t);
int plan_dp_alloc(dp_tables *t, int D, int L, int S);

/* The answer's cell (d, n) of the last plan_dp_order, d up to its D: the best bottleneck of the
 * first n blocks on the order's first d devices (at most t->S stages when capped), HUGE_VAL
 * when none. */
static inline double plan_dp_value(const dp_tables *t, int d, int n)
{
    if (d > t->rows)
        return HUGE_VAL;
    size_t plane = (size_t)(t->rows + 1) * (size_t)(t->L + 1);
    return t->f[(size_t)t->S * plane + (size_t)d * (size_t)(t->L + 1) + (size_t)n];
}

/* The rows plan_dp_order fills for a prefix of D devices and stages of at most max_rep copies:
 * D, or under a cap at most S x max_rep (no plan of S stages uses more devices). Prefixes
 * longer than that solve as that one does. */
static inline int plan_dp_rows(const dp_tables *t, int D, int max_rep)
{
    int rows = D < t->rows ? D : t->rows;
    return t->S > 0 && t->S * max_rep < rows ? t->S * max_rep : rows;
}

/* Rebuilds the partition ending at the answer's row d (the first d devices of `order`) for L
 * blocks. Returns -1 when out of memory. */
int plan_dp_extract(const dp_tables *t, const int *order, int d, int L, plan_partition *out);

/* The longest run (at most max_rep) of same-type, same-server devices ending at position d-1
 * of `order`: the devices one replicated stage may take there. */
int plan_dp_same_run(const plan_cluster *cl, const int *order, int d, int max_rep);

/* Best bottleneck for the chain on devices order[0..D-1] used as a prefix (devices at the end
 * of the order may stay idle), in at most t->S stages when the tables have that cap; a stage
 * takes a run of r devices of one type on one server when max_rep > 1 and the runtime runs r
 * copies with the plan's micro-batches (plan_replicas_runnable). Values >= cap are not
 * explored. Fills `out` when the result is < cap. D <= t->D. */
double plan_dp_order(const plan_search_cfg *cfg, dp_tables *t, const int *order, int D, int max_rep,
                     double cap, plan_partition *out, int *mem_cut);

/* Lower bounds on the compute bottleneck of any plan on the first d devices of `order`, for
 * d = 0..D (bound[0] = HUGE_VAL): stage i on r_i devices of speed bound s (type_speed_bound)
 * takes at least its work on type 0 over s r_i, so the slowest stage takes at least the whole
 * work on type 0 over the sum of the devices' bounds (with a margin for rounding). 0 where a
 * device has no bound. Returns -1 when out of memory. */
int plan_dp_prefix_bounds(const plan_cost *c, const int *order, int D, double *bound);

/* plan_dp_order with each plan's memory counted for its own number of stages, as the final plan
 * counts it. plan_dp_order bounds a stage's stash by the devices from its position to the end of
 * the prefix, which overcounts for a plan that leaves devices idle; when that bound ruled out
 * anything, the prefixes of k = D-1, D-2, ... devices are solved again with k as the count
 * (exact without replicas), each capped by the best so far. A tie goes to the fewer devices,
 * as within one pass. Once no plan on k devices can beat the best so far (plan_dp_prefix_bounds),
 * no shorter prefix can either and the search stops. *mem_cut (when not NULL) is set when memory
 * ruled anything out. Returns HUGE_VAL when out of memory, as when nothing fits. */
double plan_dp_order_fit(const plan_search_cfg *cfg, dp_tables *t, const int *order, int D,
                         int max_rep, double cap, plan_partition *out, int *mem_cut);

#endif /* PLAN_PARTITION_INTERNAL_H */
