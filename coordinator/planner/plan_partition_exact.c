/*
 * plan_partition_exact: hetero's exact search on small clusters: every plan of contiguous
 * stages, each on 1..DP_MAX_COPIES alike devices (one type, one server) in any order, devices
 * left idle allowed, simulated as plan_run runs it; the plan with the least simulated iteration
 * that fits memory wins. Branch and bound:
 *   - alike devices of one server are interchangeable (without explicit links a device's
 *     bandwidths depend on its server alone), so a stage takes a count of a class's devices,
 *     never a choice among them;
 *   - a lower bound on any plan extending a prefix of stages: a copy of a stage of r copies
 *     runs ceil(m / r) micro-batches' forward and backward, after the first micro-batch's
 *     forward through the stages before it and their transfers and before the last one's
 *     backward back through them (neither under sliced, whose halves travel sooner; zb1:
 *     the input-gradient part, after the copy's last backward, its weight gradients being free
 *     to overlap); the blocks left need m times their work, each block on the fastest
 *     type left, shared by the devices left; and the last micro-batch a copy forwards must go
 *     through the blocks left and back before the copy's backward of it (at the leaves: through
 *     the later stages and their transfers); a prefix whose bound reaches the best plan so far
 *     (the caller's incumbent at first) is dropped;
 *   - memory: a stage's stash at its least (only its own copies after it) must fit.
 * A budget of work units (each cut tried for a stage, blocks x classes / 8 for each bound on
 * the blocks left, a simulation PLAN_EXACT_SIM_UNITS per micro-batch and stage) bounds the
 * search; past it the
 * search gives up and says so (the caller runs its heuristic).
 *
 * Not for pipedream (its stream crosses iterations), clusters with explicit links (devices of
 * a server then differ) or CPU quotas (bursts can beat the sustained times the bound uses):
 * plan_exact_eligible says no. Invariant: when it completes, no plan of that space simulates
 * faster than the one returned.
 */
#include "coordinator/planner/plan_partition.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_partition_internal.h"
#include "coordinator/planner/plan_sim.h"

typedef struct ex_class {
    int server, type;
    int n;     /* devices in the class */
    int first; /* index into ex_search.ids: the class's device ids in order */
    int used;  /* taken by the stages placed so far */
} ex_class;

typedef struct ex_search {
    const plan_search_cfg *cfg;
    int L, m, S_max, n_class, free_devs;
    ex_class cls[PLAN_EXACT_MAX_DEVICES];
    int ids[PLAN_EXACT_MAX_DEVICES];
    int st_first[PLAN_EXACT_MAX_DEVICES], st_last[PLAN_EXACT_MAX_DEVICES];
    int st_class[PLAN_EXACT_MAX_DEVICES], st_rep[PLAN_EXACT_MAX_DEVICES];
    plan_partition *cand, *best_plan;
    plan_sim_stage *sim;
    double *rest; /* (S_max, L + 1): per depth, the suffix sums of ex_rec's bound */
    double *pass; /* (S_max, L + 1): the same for a micro-batch's trip (forward, backward part) */
    /* per stage placed: one micro-batch's forward and backward part on it, the transfer into it,
     * the micro-batches its first copy runs */
    double st_f[PLAN_EXACT_MAX_DEVICES], st_bp[PLAN_EXACT_MAX_DEVICES];
    double st_link[PLAN_EXACT_MAX_DEVICES];
    int st_pc[PLAN_EXACT_MAX_DEVICES];
    double best;
    long units, budget;
    int over, mem_cut;
    sc_status rc;
    sc_err *err;
} ex_search;

int plan_exact_eligible(const plan_search_cfg *cfg)
{
    const plan_cluster *cl = cfg->cost->cluster;
    if (cl->n_devices > PLAN_EXACT_MAX_DEVICES || cl->n_links > 0 || cl->bw_matrix != NULL ||
        cfg->sched == PLAN_SCHED_PIPEDREAM)
        return 0;
    for (int t = 0; t < cl->n_types; t++)
        if (cl->types[t].quota_fraction > 0)
            return 0;
    return 1;
}

static double forward_s(const plan_cost *c, int type, int first, int last)
{
    const double *f = c->fwd_s + (size_t)type * (size_t)c->n_blocks;
    double s = 0;
    for (int l = first; l <= last; l++)
        s += f[l];
    return s;
}

/* The part of the backward of blocks first..last on a device of `type` that a micro-batch's
 * gradient must wait for on its way back: all of it, or under zb1 its input-gradient part (the
 * weight gradient, W, may come later). */
static double backward_s(const plan_search_cfg *cfg, int type, int first, int last)
{
    const plan_cost *c = cfg->cost;
    const double *b = c->bwd_s + (size_t)type * (size_t)c->n_blocks;
    double s = 0;
    for (int l = first; l <= last; l++) {
        double share = c->profile->blocks[l].wgrad_share;
        share = share >= 0 ? share : PLAN_WGRAD_SHARE;
        s += cfg->sched == PLAN_SCHED_ZB1 ? (1 - share) * b[l] : b[l];
    }
    return s;
}

/* Forward and the backward part above of blocks first..last: what a copy must have done for a
 * micro-batch before that micro-batch's gradient leaves it upstream. */
static double until_sent_s(const plan_search_cfg *cfg, int type, int first, int last)
{
    return forward_s(cfg->cost, type, first, last) + backward_s(cfg, type, first, last);
}

/* The placed stages as a partition (the classes' devices taken in order), checked for memory
 * and simulated; kept when faster than the best so far. */
static void ex_leaf(ex_search *e, int n_stages)
{
    plan_partition *p = e->cand;
    plan_partition_clear(p);
    int taken[PLAN_EXACT_MAX_DEVICES] = {0};
    for (int s = 0; s < n_stages; s++) {
        const ex_class *k = &e->cls[e->st_class[s]];
        plan_partition_push(p, e->st_first[s], e->st_last[s],
                            e->ids + k->first + taken[e->st_class[s]], e->st_rep[s]);
        taken[e->st_class[s]] += e->st_rep[s];
    }
    if (plan_partition_check_memory(e->cfg, p, NULL) != SC_OK) {
        e->mem_cut = 1;
        return;
    }
    /* with every stage known: the last micro-batch a stage's first copy forwards goes through
     * every later stage and back before that copy runs its backward, then on upstream */
    if (e->cfg->sched != PLAN_SCHED_SLICED) {
        double after = 0;
        for (int x = n_stages - 1; x >= 0; x--) {
            double before_f = 0, before_b = 0;
            for (int y = 0; y < x; y++) {
                before_f += e->st_f[y] + e->st_link[y + 1];
                before_b += e->st_bp[y] + e->st_link[y + 1];
            }
            double trip = before_f + e->st_pc[x] * e->st_f[x] + after + e->st_bp[x] + before_b;
            if (trip >= e->best)
                return;
            after += e->st_f[x] + e->st_bp[x] + 2 * e->st_link[x];
        }
    }
    e->units += PLAN_EXACT_SIM_UNITS * e->m * n_stages;
    double it;
    sc_status rc = plan_search_simulate(e->cfg, p, e->sim, &it, e->err);
    if (rc != SC_OK) {
        e->rc = rc;
        return;
    }
    if (it < e->best * (1 - 1e-12)) {
        e->best = it;
        plan_partition_copy(e->best_plan, p);
    }
}

/* Places stage s from block `start` on, every stage before it placed; `bound` the prefix's
 * lower bound, `fwd` the first micro-batch's forward time through it and `bwd` the last one's
 * backward back through it, each with the transfers between its stages. */
static void ex_rec(ex_search *e, int s, int start, double bound, double fwd, double bwd)
{
    const plan_cost *c = e->cfg->cost;
    if (e->rc != SC_OK || e->over)
        return;
    if (start == e->L) {
        ex_leaf(e, s);
        return;
    }
    if (s == e->S_max || e->free_devs == 0)
        return;
    if (++e->units > e->budget) {
        e->over = 1;
        return;
    }
    int sliced = e->cfg->sched == PLAN_SCHED_SLICED;
    for (int ci = 0; ci < e->n_class; ci++) {
        ex_class *k = &e->cls[ci];
        int avail = k->n - k->used;
        double mem = c->cluster->types[k->type].memory_bytes;
        /* the transfer into this stage, one way (as plan_partition_sim_stages plays it) */
        double link = 0;
        if (s > 0 && avail > 0) {
            const ex_class *pk = &e->cls[e->st_class[s - 1]];
            int a = e->ids[pk->first], b = e->ids[k->first + (pk == k ? 1 : 0)];
            link = c->act_bytes[start - 1] / plan_cluster_bw(c->cluster, a, b);
        }
        double in = sliced ? 0 : fwd + link, back = sliced ? 0 : bwd + link;
        int zb1 = e->cfg->sched == PLAN_SCHED_ZB1;
        for (int r = 1; r <= avail && r <= DP_MAX_COPIES; r++) {
            if (!plan_replicas_runnable(e->cfg->sched, e->m, r))
                continue;
            int left = e->free_devs - r;
            /* the blocks from l on, each on the fastest type left after this stage: their
             * work on any devices left is at least this sum */
            double *rest_work = e->rest + (size_t)s * (size_t)(e->L + 1);
            double *rest_pass = e->pass + (size_t)s * (size_t)(e->L + 1);
            rest_work[e->L] = rest_pass[e->L] = 0;
            e->units += left > 0 ? (e->L - start) * e->n_class / 8 : 0;
            for (int l = e->L - 1; l > start && left > 0; l--) {
                double least = HUGE_VAL, quickest = HUGE_VAL;
                for (int cj = 0; cj < e->n_class; cj++) {
                    const ex_class *o = &e->cls[cj];
                    if (o->n - o->used - (cj == ci ? r : 0) > 0) {
                        double wl = plan_cost_work(c, o->type, l, l);
                        double pl = until_sent_s(e->cfg, o->type, l, l);
                        least = wl < least ? wl : least;
                        quickest = pl < quickest ? pl : quickest;
                    }
                }
                rest_work[l] = rest_work[l + 1] + least;
                rest_pass[l] = rest_pass[l + 1] + quickest;
            }
            double stash = search_stash(e->cfg, s + 1, r, r);
            int per_copy = (e->m + r - 1) / r;
            /* the last stage possible takes every block left */
            int lo = s + 1 == e->S_max || left == 0 ? e->L - 1 : start;
            double f = lo > start ? forward_s(c, k->type, start, lo - 1) : 0;
            double bp = lo > start ? backward_s(e->cfg, k->type, start, lo - 1) : 0;
            for (int end = lo; end < e->L; end++) {
                if (++e->units > e->budget) {
                    e->over = 1;
                    return;
                }
                /* this stage's blocks start..end: its forward and backward part so far */
                f += forward_s(c, k->type, end, end);
                bp += backward_s(e->cfg, k->type, end, end);
                double w = plan_cost_work(c, k->type, start, end);
                /* the copy's work starts after the first micro-batch's forward reaches it;
                 * its last backward's gradient then goes back through the stages before it.
                 * zb1: that backward may come before the copy's last weight gradients, which
                 * overlap the way back, so only the work up to it counts there */
                double own = in + per_copy * w + (zb1 ? 0 : back);
                if (zb1) {
                    double sent = in + per_copy * (f + bp) + back;
                    own = sent > own ? sent : own;
                }
                if (own >= e->best)
                    break; /* grows with end */
                if (plan_cost_memory(c, start, end, stash, 0) > mem) {
                    e->mem_cut = 1;
                    break;
                }
                double rest = 0;
                if (end + 1 < e->L) {
                    if (left == 0)
                        continue;
                    rest = e->m * rest_work[end + 1] / left;
                    /* the copy's last forward's micro-batch through the blocks left and back
                     * (their transfers not counted), then this stage's backward part and on
                     * upstream */
                    double trip = sliced ? 0 : in + per_copy * f + rest_pass[end + 1] + bp + back;
                    rest = trip > rest ? trip : rest;
                }
                double b = bound > own ? bound : own;
                if ((rest > b ? rest : b) >= e->best)
                    continue;
                e->st_first[s] = start;
                e->st_last[s] = end;
                e->st_class[s] = ci;
                e->st_rep[s] = r;
                e->st_f[s] = f;
                e->st_bp[s] = bp;
                e->st_link[s] = link;
                e->st_pc[s] = per_copy;
                k->used += r;
                e->free_devs -= r;
                ex_rec(e, s + 1, end + 1, b, fwd + link + f, bwd + link + bp);
                k->used -= r;
                e->free_devs += r;
                if (e->rc != SC_OK || e->over)
                    return;
            }
        }
    }
}

sc_status plan_partition_exact(const plan_search_cfg *cfg, long budget, double incumbent,
                               plan_partition *out, double *iter_s, int *completed, int *mem_cut,
                               sc_err *err)
{
    const plan_cost *c = cfg->cost;
    const plan_cluster *cl = c->cluster;
    *completed = 0;
    *iter_s = incumbent;
    if (!plan_exact_eligible(cfg))
        return SC_OK;
    ex_search e = {.cfg = cfg,
                   .L = c->n_blocks,
                   .m = cfg->n_micro > 0 ? cfg->n_micro : 1,
                   .S_max = plan_search_max_stages(cfg),
                   .free_devs = cl->n_devices,
                   .best = incumbent,
                   .budget = budget > 0 ? budget : PLAN_EXACT_DEFAULT_BUDGET,
                   .rc = SC_OK,
                   .err = err};
    if (e.S_max > PLAN_EXACT_MAX_DEVICES)
        e.S_max = PLAN_EXACT_MAX_DEVICES;
    /* classes: alike devices of one server, fastest first (good plans early prune more) */
    int n = 0;
    for (int d = 0; d < cl->n_devices; d++) {
        int found = -1;
        for (int k = 0; k < e.n_class && found < 0; k++)
            if (e.cls[k].server == cl->devices[d].server && e.cls[k].type == dev_type(c, d))
                found = k;
        if (found < 0) {
            found = e.n_class++;
            e.cls[found] = (ex_class){.server = cl->devices[d].server, .type = dev_type(c, d)};
        }
        e.cls[found].n++;
    }
    for (int i = 1; i < e.n_class; i++)
        for (int j = i; j > 0; j--) {
            double a = plan_cost_work(c, e.cls[j - 1].type, 0, e.L - 1);
            double b = plan_cost_work(c, e.cls[j].type, 0, e.L - 1);
            if (!(b < a))
                break;
            ex_class t = e.cls[j];
            e.cls[j] = e.cls[j - 1];
            e.cls[j - 1] = t;
        }
    for (int k = 0; k < e.n_class; k++) {
        e.cls[k].first = n;
        for (int d = 0; d < cl->n_devices; d++)
            if (cl->devices[d].server == e.cls[k].server && dev_type(c, d) == e.cls[k].type)
                e.ids[n++] = d;
    }
    sc_status rc = SC_OK;
    e.sim = calloc((size_t)cl->n_devices, sizeof *e.sim);
    e.rest = malloc((size_t)e.S_max * (size_t)(e.L + 1) * sizeof *e.rest);
    e.pass = malloc((size_t)e.S_max * (size_t)(e.L + 1) * sizeof *e.pass);
    if (e.sim == NULL || e.rest == NULL || e.pass == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "exact search: out of memory");
        goto done;
    }
    SC_CHECK_GOTO(plan_partition_new(&e.cand, e.L, cl->n_devices, err), done);
    SC_CHECK_GOTO(plan_partition_new(&e.best_plan, e.L, cl->n_devices, err), done);
    ex_rec(&e, 0, 0, 0, 0, 0);
    rc = e.rc;
    *mem_cut |= e.mem_cut;
    if (rc != SC_OK || e.over)
        goto done;
    *completed = 1;
    *iter_s = e.best;
    if (e.best < incumbent) {
        plan_partition_copy(out, e.best_plan);
        out->objective_s = plan_partition_bottleneck(c, out);
    }
done:
    plan_partition_destroy(&e.cand);
    plan_partition_destroy(&e.best_plan);
    free(e.sim);
    free(e.rest);
    free(e.pass);
    return rc;
}
