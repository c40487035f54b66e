/*
 * plan_partition_hetero: ours: partition, device order and replication over unequal devices,
 * memory a hard limit. Searches device orders (the cluster's own, every order on small
 * clusters, servers kept together fastest first or last, orders of device types, then swaps of
 * server runs) with plan_partition_dp's DP on each; with select_by_sim the simulator then
 * chooses among the best partitions for each device count (on small instances also for each
 * stage count) and hill-climbs the chosen one's cuts. Under the sliced schedule, when memory
 * ruled anything out, it searches again for each count of halved warm-up micro-batches. A stage
 * cap (cfg->max_stages) bounds every DP's stages; copies then stay allowed on any instance.
 *
 * With select_by_sim on clusters plan_exact_eligible accepts (up to 8 devices), the exact
 * search of plan_partition_exact runs first and its plan is the answer when it ends within its
 * budget; the order search runs otherwise (out->search says which).
 *
 * Does not pick the micro-batch count (plan_run does); a stage's copies are alike devices of
 * one server, only as many as the runtime runs. Invariant: the partition returned fits every
 * device's memory under the stash rule it was found under.
 */
#include "coordinator/planner/plan_partition.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_partition_internal.h"
#include "coordinator/planner/plan_sim.h"

/* Orders kept per track for the simulator: the best and those that tie with it on distinct
 * plans (select_by_sim on small instances; else the best alone). */
#define HET_TIES 4

/* One search over orders at a copy limit: the best DP value, the first order reaching it
 * (orders[0]) and, when ties are kept, up to HET_TIES - 1 more orders whose DP plans tie with
 * it, those whose plans simulate fastest. */
typedef struct het_track {
    int max_rep;
    double best;
    int n;
    int *orders;                     /* (HET_TIES, D) */
    plan_partition *plans[HET_TIES]; /* their DP plans, to tell tied orders apart */
    double sim[HET_TIES];            /* those plans' simulated iterations */
} het_track;

/* Two tracks when copies are allowed on a small instance picked by simulation: tr[0] at
 * max_rep, tr[1] without copies. The DP charges a replicated stage work / r per micro-batch,
 * a steady state that 1F1B-RR with its bounded warm-up need not reach (each micro-batch still
 * takes the whole stage time on its copy, which lengthens the round trip), so that figure is no
 * bound on the simulated time: with one track, an order whose DP value rests on copies prunes
 * every order whose plans without copies the simulator finds faster. Equal DP values say
 * nothing either about the fill, the drain and the round trip, hence the ties. */
typedef struct het_search {
    const plan_search_cfg *cfg;
    plan_partition *scratch; /* with links: the DP's partition, scored with contention */
    plan_partition *plan;    /* the DP's partition when ties are kept */
    plan_sim_stage *st;      /* (D) to simulate it */
    dp_tables t;
    int D, max_rep, evals, max_evals, n_tracks, ties;
    het_track tr[2];
    int mem_cut; /* memory ruled out some stage */
} het_search;

static int same_plan(const plan_partition *a, const plan_partition *b)
{
    if (a->n_stages != b->n_stages || a->n_devs != b->n_devs)
        return 0;
    for (int x = 0; x < a->n_stages; x++)
        if (a->first[x] != b->first[x] || a->n_dev[x] != b->n_dev[x])
            return 0;
    return memcmp(a->devs, b->devs, (size_t)a->n_devs * sizeof(int)) == 0;
}

static void track_try(het_search *h, het_track *tr, const int *order)
{
    double tie = 1e-9;
    double cap = h->ties && isfinite(tr->best) ? tr->best * (1 + tie) : tr->best;
    plan_partition *p = h->ties ? h->plan : h->scratch;
    double v = plan_dp_order_fit(h->cfg, &h->t, order, h->D, tr->max_rep, cap, p, &h->mem_cut);
    /* the DP sees link bandwidths pair by pair; shared links are scored on the result */
    if (h->scratch != NULL && isfinite(v))
        v = plan_partition_bottleneck(h->cfg->cost, p);
    if (!(v < cap))
        return;
    if (!h->ties) {
        tr->best = v;
        tr->n = 1;
        memcpy(tr->orders, order, (size_t)h->D * sizeof(int));
        return;
    }
    if (v < tr->best * (1 - tie) || tr->n == 0) {
        tr->best = v;
        tr->n = 0;
    }
    for (int i = 0; i < tr->n; i++)
        if (same_plan(tr->plans[i], p))
            return;
    double it = HUGE_VAL;
    sc_err e;
    sc_err_clear(&e);
    if (plan_search_simulate(h->cfg, p, h->st, &it, &e) != SC_OK)
        it = HUGE_VAL;
    /* full: the slowest tie after the first gives way to a faster one */
    int at = tr->n;
    if (at == HET_TIES) {
        at = 1;
        for (int i = 2; i < HET_TIES; i++)
            at = tr->sim[i] > tr->sim[at] ? i : at;
        if (!(it < tr->sim[at]))
            return;
    } else {
        tr->n++;
    }
    plan_partition_copy(tr->plans[at], p);
    tr->sim[at] = it;
    memcpy(tr->orders + (size_t)at * h->D, order, (size_t)h->D * sizeof(int));
}

static void het_try(het_search *h, const int *order)
{
    if (h->evals >= h->max_evals)
        return;
    h->evals++;
    for (int i = 0; i < h->n_tracks; i++)
        track_try(h, &h->tr[i], order);
}

static double dev_speed(const plan_cost *c, int d)
{
    int t = dev_type(c, d);
    double w = plan_cost_work(c, t, 0, c->n_blocks - 1);
    return w > 0 ? 1.0 / w : c->cluster->types[t].relative_speed;
}

/* Sorts devices fastest first, ties by id. An insertion sort rather than qsort: its comparison
 * needs the cost model, and a file-scope pointer to it would race when jobs plan at once. */
static void sort_by_speed_desc(const plan_cost *c, int *devs, int n)
{
    for (int i = 1; i < n; i++) {
        int d = devs[i], j = i;
        double sd = dev_speed(c, d);
        while (j > 0) {
            double sp = dev_speed(c, devs[j - 1]);
            if (sp > sd || (sp == sd && devs[j - 1] < d))
                break;
            devs[j] = devs[j - 1];
            j--;
        }
        devs[j] = d;
    }
}

static int next_perm(int *a, int n)
{
    int i = n - 2;
    while (i >= 0 && a[i] >= a[i + 1])
        i--;
    if (i < 0)
        return 0;
    int j = n - 1;
    while (a[j] <= a[i])
        j--;
    int t = a[i];
    a[i] = a[j];
    a[j] = t;
    for (int l = i + 1, r = n - 1; l < r; l++, r--) {
        t = a[l];
        a[l] = a[r];
        a[r] = t;
    }
    return 1;
}

/* Small instances: the best partition for every (stages, devices used) pair on the chosen
 * order, each simulated. Fewer, more replicated stages can beat a lower bottleneck once fill,
 * drain and the activation round trip of 1F1B are counted, which only the simulator sees. */
#define HET_STAGED_MAX_DEVICES 16
#define HET_STAGED_MAX_BLOCKS 512

/* Memory bound used inside the DPs, where the later stages are not known yet: a stage of
 * `copies` copies in a plan of at most n_stages stages, with at most `after` copies from it on
 * (itself included): every count grows with `after`, so this never under-estimates the final
 * plan's need. */
static double dp_memory(const plan_search_cfg *cfg, int first, int last, int n_stages, int after,
                        int copies)
{
    double inflight = search_stash(cfg, n_stages, after, copies);
    return plan_cost_memory(cfg->cost, first, last, inflight,
                            plan_weight_versions(cfg->sched, after, copies));
}

/* allreduce_mode: how a replicated stage's weight all-reduce counts in the DP: 0 its share of
 * the iteration (as in the objective), 1 all of it per micro-batch, 2 not at all. It really
 * runs as a tail after the flush, which no per-micro-batch charge captures, so the best
 * partitions under all three are candidates and the simulator judges. */
static sc_status pick_by_stages(const plan_search_cfg *cfg, const int *order, int D, int max_rep,
                                int allreduce_mode, plan_partition *out, double *best_iter,
                                int *mem_cut, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    const plan_cluster *cl = c->cluster;
    int L = c->n_blocks, S = plan_search_max_stages(cfg); /* devices, blocks or the cap */
    size_t W = (size_t)L + 1, plane = (size_t)(D + 1) * W, n3 = (size_t)(S + 1) * plane;
    sc_status rc = SC_OK;
    double *f = malloc(n3 * sizeof(double));
    int *kk = malloc(n3 * sizeof(int)), *rr = malloc(n3 * sizeof(int));
    plan_sim_stage *st = calloc((size_t)S, sizeof *st);
    plan_partition *cand = NULL;
    if (!f || !kk || !rr || !st) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "hetero: out of memory");
        goto done;
    }
    SC_CHECK_GOTO(plan_partition_new(&cand, L, D, err), done);
    /* pass 0 bounds each stage's stash as if the plan had S stages, which overcounts for plans
     * of fewer; when that bound ruled anything out, pass k = 1..S-1 solves again with k as the
     * count and keeps only its plans of exactly k stages */
    int cut = 0;
    for (int pass = 0; pass < S && (pass == 0 || cut); pass++) {
        int ms = pass == 0 ? S : pass;
        for (size_t i = 0; i < n3; i++)
            f[i] = HUGE_VAL;
        f[0] = 0;
        for (int s = 1; s <= ms; s++)
            for (int d = s; d <= D; d++) {
                int run = plan_dp_same_run(cl, order, d, max_rep);
                int type = dev_type(c, order[d - 1]);
                double mem = dev_memory(c, order[d - 1]);
                int srv = cl->devices[order[d - 1]].server;
                double intra = reduce_capped(cl, srv, cl->servers[srv].intra_bw_bytes_per_s);
                for (int n = s; n <= L; n++) {
                    double best = HUGE_VAL;
                    int bk = -1, br = 1;
                    for (int r = 1; r <= run; r++) {
                        int s0 = d - r;
                        if (s0 < s - 1)
                            break;
                        if (!plan_replicas_runnable(cfg->sched, cfg->n_micro, r))
                            continue;
                        double bw_in = s0 > 0 ? plan_cluster_bw(cl, order[s0 - 1], order[s0]) : 0;
                        const double *prev_row = f + (size_t)(s - 1) * plane + (size_t)s0 * W;
                        for (int k = n - 1; k >= s - 1; k--) {
                            double work = plan_cost_work(c, type, k, n - 1);
                            double ts = work;
                            if (r > 1) {
                                double p = plan_cost_params(c, k, n - 1);
                                ts = work / r + (allreduce_mode == 1 ? allreduce_s(p, r, intra)
                                                 : allreduce_mode == 0
                                                     ? allreduce_share_s(c, p, r, intra)
                                                     : 0);
                            }
                            if (ts >= best)
                                break;
                            /* the ms - s stages after this one: each one device (max_rep 1)
                             * or up to max_rep copies, within the D - d devices left */
                            int later = (ms - s) * max_rep < D - d ? (ms - s) * max_rep : D - d;
                            if (dp_memory(cfg, k, n - 1, ms, r + later, r) > mem) {
                                cut |= pass == 0;
                                *mem_cut = 1;
                                break;
                            }
                            double prev = prev_row[k];
                            if (prev >= best)
                                continue;
                            double v = prev > ts ? prev : ts;
                            if (s0 > 0) {
                                double link_s = 2.0 * c->act_bytes[k - 1] / bw_in;
                                v = link_s > v ? link_s : v;
                            }
                            if (v < best) {
                                best = v;
                                bk = k;
                                br = r;
                            }
                        }
                    }
                    if (bk >= 0) {
                        size_t at = (size_t)s * plane + (size_t)d * W + (size_t)n;
                        f[at] = best;
                        kk[at] = bk;
                        rr[at] = br;
                    }
                }
            }
        for (int s = pass == 0 ? 1 : ms; s <= ms; s++)
            for (int d = s; d <= D; d++) {
                if (!isfinite(f[(size_t)s * plane + (size_t)d * W + (size_t)L]))
                    continue;
                /* walk back from (s, d, L) */
                int firsts[HET_STAGED_MAX_DEVICES], dstart[HET_STAGED_MAX_DEVICES],
                    reps[HET_STAGED_MAX_DEVICES];
                int n = L, dd = d;
                for (int x = s; x >= 1; x--) {
                    size_t at = (size_t)x * plane + (size_t)dd * W + (size_t)n;
                    firsts[x - 1] = kk[at];
                    reps[x - 1] = rr[at];
                    dstart[x - 1] = dd - rr[at];
                    n = kk[at];
                    dd -= rr[at];
                }
                plan_partition_clear(cand);
                for (int x = 0; x < s; x++)
                    plan_partition_push(cand, firsts[x], x + 1 < s ? firsts[x + 1] - 1 : L - 1,
                                        order + dstart[x], reps[x]);
                double it;
                SC_CHECK_GOTO(plan_search_simulate(cfg, cand, st, &it, err), done);
                if (it < *best_iter * (1 - 1e-12)) {
                    *best_iter = it;
                    plan_partition_copy(out, cand);
                    out->objective_s = plan_partition_bottleneck(c, cand);
                }
            }
    }
done:
    plan_partition_destroy(&cand);
    free(f), free(kk), free(rr), free(st);
    return rc;
}

/* The DP table holds, for every device count d, the best partition on the order's first d
 * devices; more stages lower the bottleneck but lengthen the fill and drain, so the final
 * choice among them is the simulator's. */
static sc_status pick_by_simulation(const plan_search_cfg *cfg, dp_tables *t, const int *order,
                                    int max_rep, plan_partition *out, double *best_iter,
                                    int *mem_cut, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks;
    sc_status rc = SC_OK;
    plan_partition *cand = NULL;
    int D = t->D, cut = 0;
    double *row = malloc((size_t)(D + 1) * sizeof *row);
    double *bound = malloc((size_t)(D + 1) * sizeof *bound);
    plan_sim_stage *st = calloc((size_t)D, sizeof *st);
    if (row == NULL || bound == NULL || st == NULL ||
        plan_dp_prefix_bounds(c, order, D, bound) != 0) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "hetero: out of memory");
        goto done;
    }
    SC_CHECK_GOTO(plan_partition_new(&cand, L, D, err), done);
    double best = HUGE_VAL;
    plan_dp_order(cfg, t, order, D, max_rep, HUGE_VAL, NULL, &cut);
    *mem_cut |= cut;
    for (int d = 0; d <= D; d++)
        row[d] = plan_dp_value(t, d, L);
    /* pass 0 simulates the table's plans; its memory bound counts every device of the order as
     * a stage, so where it ruled anything out, pass 1 solves the row of d devices again with d
     * as the count, looking only for bottlenecks below the row's (the row's own plan, if any,
     * fits under either count) and skipping rows where even the best compute bound, over the
     * micro-batches, reaches the best iteration so far */
    for (int pass = 0; pass < (cut ? 2 : 1); pass++)
        for (int d = 1; d <= D; d++) {
            if (pass == 0 && !isfinite(row[d]))
                continue;
            if (pass == 1) {
                if (d > plan_dp_rows(t, D, max_rep)) /* past a stage cap's rows: no plan */
                    break;
                if (bound[d] * (cfg->n_micro > 0 ? cfg->n_micro : 1) >= best)
                    continue;
                /* its best may lie on a shorter row: only row d itself is this pass's */
                plan_dp_order(cfg, t, order, d, max_rep, row[d], NULL, NULL);
                if (!(plan_dp_value(t, d, L) < row[d]))
                    continue;
            }
            if (plan_dp_extract(t, order, d, L, cand) != 0) {
                rc = SC_ERRF(err, SC_ERR_NOMEM, "hetero: out of memory");
                goto done;
            }
            double it;
            SC_CHECK_GOTO(plan_search_simulate(cfg, cand, st, &it, err), done);
            if (it < best * (1 - 1e-12)) {
                best = it;
                plan_partition_copy(out, cand);
                out->objective_s = plan_partition_bottleneck(c, cand);
            }
        }
    *best_iter = best;
done:
    plan_partition_destroy(&cand);
    free(st), free(row), free(bound);
    return rc;
}

/* Hill-climbs the chosen partition's cuts by one or two blocks while the simulated iteration
 * improves and memory still fits: the DPs see one bottleneck, the simulator also sees the
 * round trip of activations and gradients through the cuts. */
static sc_status refine_by_simulation(const plan_search_cfg *cfg, plan_partition *out,
                                      double *best_iter, int *mem_cut, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    const plan_cluster *cl = c->cluster;
    int S = out->n_stages;
    sc_status rc = SC_OK;
    plan_partition *cand = NULL;
    plan_sim_stage *st = calloc((size_t)S, sizeof *st);
    SC_ALLOC_CHECK(st, err);
    SC_CHECK_GOTO(plan_partition_new(&cand, out->cap_stages, out->cap_devices, err), done);
    static const int deltas[] = {-2, -1, 1, 2};
    for (int round = 0, improved = 1; improved && round < 20; round++) {
        improved = 0;
        for (int cut = 0; cut + 1 < S; cut++)
            for (int i = 0; i < 4; i++) {
                plan_partition_copy(cand, out);
                cand->last[cut] += deltas[i];
                cand->first[cut + 1] += deltas[i];
                if (cand->last[cut] < cand->first[cut] ||
                    cand->first[cut + 1] > cand->last[cut + 1])
                    continue;
                int fits = 1;
                for (int x = cut; x <= cut + 1 && fits; x++) {
                    double need = plan_partition_stage_memory(cfg, cand, x);
                    for (int r = 0; r < cand->n_dev[x]; r++) {
                        int d = cand->devs[cand->dev_start[x] + r];
                        fits &= need <= cl->types[cl->devices[d].type].memory_bytes;
                    }
                }
                if (!fits) {
                    *mem_cut = 1;
                    continue;
                }
                double it;
                SC_CHECK_GOTO(plan_search_simulate(cfg, cand, st, &it, err), done);
                if (it < *best_iter * (1 - 1e-9)) {
                    *best_iter = it;
                    plan_partition_copy(out, cand);
                    out->objective_s = plan_partition_bottleneck(c, out);
                    improved = 1;
                }
            }
    }
done:
    plan_partition_destroy(&cand);
    free(st);
    return rc;
}

/* hetero for one stash rule (cfg->sliced as given). *score: the simulated iteration of the
 * plan when cfg->select_by_sim, else its bottleneck; *mem_cut is set when memory ruled out
 * anything. */
static sc_status hetero_orders(const plan_search_cfg *cfg, plan_partition *out, double *score,
                               int *mem_cut, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    const plan_cluster *cl = c->cluster;
    int D = cl->n_devices, L = c->n_blocks, T = cl->n_types;
    het_search h = {.cfg = cfg, .D = D, .max_evals = 400};
    sc_status rc = SC_OK;
    int *order = calloc((size_t)D, sizeof(int)), *tmp = calloc((size_t)D, sizeof(int));
    int *srv = malloc((size_t)cl->n_servers * sizeof(int));
    int *perm = malloc((size_t)(T > 0 ? T : 1) * sizeof(int));
    for (int i = 0; i < 2; i++) {
        h.tr[i].best = HUGE_VAL;
        h.tr[i].orders = malloc((size_t)HET_TIES * (size_t)D * sizeof(int));
    }
    if (!order || !tmp || !srv || !perm || !h.tr[0].orders || !h.tr[1].orders ||
        plan_dp_alloc(&h.t, D, L, plan_search_max_stages(cfg)) != 0) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "hetero: out of memory");
        goto done;
    }
    if (cl->n_links > 0)
        SC_CHECK_GOTO(plan_partition_new(&h.scratch, L, D, err), done);
    /* small instances picked by simulation keep tied orders, and without copies too */
    int small = D <= HET_STAGED_MAX_DEVICES && L <= HET_STAGED_MAX_BLOCKS;
    h.ties = cfg->select_by_sim && small;
    if (h.ties) {
        h.st = calloc((size_t)D, sizeof *h.st);
        if (h.st == NULL) {
            rc = SC_ERRF(err, SC_ERR_NOMEM, "hetero: out of memory");
            goto done;
        }
        SC_CHECK_GOTO(plan_partition_new(&h.plan, L, D, err), done);
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < HET_TIES; k++)
                SC_CHECK_GOTO(plan_partition_new(&h.tr[i].plans[k], L, D, err), done);
    }
    /* replication pays only when single blocks are large next to a fair share of the work */
    double lb = plan_lower_bound(c), biggest = 0;
    for (int d = 0; d < D; d++)
        for (int l = 0; l < L; l++) {
            double w = plan_cost_work(c, dev_type(c, d), l, l);
            biggest = w > biggest ? w : biggest;
        }
    h.max_rep = (L <= 256 && D <= 32) || biggest > 0.5 * lb ? DP_MAX_COPIES : 1;
    /* and under a stage cap that binds (h.t.S), which without copies leaves devices idle: the
     * copies a stage needs on average to use every device. Each DP then costs about S times
     * max_rep squared times one without (a plane per stage, scans r times as long for r
     * copies), so fewer orders are tried. */
    if (h.max_rep == 1 && h.t.S > 0) {
        int want = (D + h.t.S - 1) / h.t.S;
        h.max_rep = want < DP_MAX_COPIES ? want : DP_MAX_COPIES;
        h.max_evals = h.max_evals / h.t.S > 16 ? h.max_evals / h.t.S : 16;
    }
    h.tr[0].max_rep = h.max_rep;
    h.tr[1].max_rep = 1;
    h.n_tracks = h.ties && h.max_rep > 1 ? 2 : 1;

    /* 1. the cluster's own order */
    for (int d = 0; d < D; d++)
        order[d] = d;
    het_try(&h, order);
    /* 2. small clusters: every order */
    if (D <= 7) {
        while (next_perm(order, D))
            het_try(&h, order);
        h.max_evals = h.evals; /* done: nothing left to search */
    }
    /* 3. servers kept together, fastest servers first and last, devices fastest first */
    for (int dir = 0; dir < 2; dir++) {
        for (int s = 0; s < cl->n_servers; s++)
            srv[s] = s;
        for (int a = 0; a < cl->n_servers; a++)
            for (int b = a + 1; b < cl->n_servers; b++) {
                double sa = 0, sb = 0;
                for (int i = 0; i < cl->servers[srv[a]].n_devices; i++)
                    sa += dev_speed(c, cl->servers[srv[a]].first_device + i);
                for (int i = 0; i < cl->servers[srv[b]].n_devices; i++)
                    sb += dev_speed(c, cl->servers[srv[b]].first_device + i);
                if (dir == 0 ? sb > sa : sb < sa) {
                    int t = srv[a];
                    srv[a] = srv[b];
                    srv[b] = t;
                }
            }
        int n = 0;
        for (int s = 0; s < cl->n_servers; s++) {
            const plan_server *sv = &cl->servers[srv[s]];
            for (int i = 0; i < sv->n_devices; i++)
                order[n + i] = sv->first_device + i;
            sort_by_speed_desc(c, order + n, sv->n_devices);
            n += sv->n_devices;
        }
        het_try(&h, order);
    }
    /* 4. orders of device types (as Metis enumerates them), devices of a type by server */
    if (T > 1 && T <= 5) {
        for (int i = 0; i < T; i++)
            perm[i] = i;
        do {
            int n = 0;
            for (int i = 0; i < T; i++)
                for (int d = 0; d < D; d++)
                    if (cl->devices[d].type == perm[i])
                        order[n++] = d;
            het_try(&h, order);
        } while (next_perm(perm, T));
    }
    /* 5. local search from the best order: swap runs of one server (whole devices when few) */
    for (int round = 0; round < 4 && h.evals < h.max_evals && isfinite(h.tr[0].best); round++) {
        double before = h.tr[0].best;
        memcpy(order, h.tr[0].orders, (size_t)D * sizeof(int));
        /* segments: maximal runs of one server in the order (single devices when D <= 16) */
        int nseg = 0;
        int *seg = tmp; /* segment start positions */
        for (int i = 0; i < D; i++)
            if (D <= 16 || i == 0 ||
                cl->devices[order[i]].server != cl->devices[order[i - 1]].server)
                seg[nseg++] = i;
        for (int a = 0; a < nseg && h.evals < h.max_evals; a++)
            for (int b = a + 1; b < nseg && h.evals < h.max_evals; b++) {
                /* swapping two runs of alike devices (same types, same server) changes
                 * nothing: skip it */
                int sa = seg[a], ea = a + 1 < nseg ? seg[a + 1] : D;
                int sb = seg[b], eb = b + 1 < nseg ? seg[b + 1] : D;
                int alike = ea - sa == eb - sb;
                for (int i = 0; alike && i < ea - sa; i++)
                    alike = cl->devices[order[sa + i]].type == cl->devices[order[sb + i]].type &&
                            cl->devices[order[sa + i]].server == cl->devices[order[sb + i]].server;
                if (alike)
                    continue;
                int *cand = malloc((size_t)D * sizeof(int));
                if (cand == NULL) {
                    rc = SC_ERRF(err, SC_ERR_NOMEM, "hetero: out of memory");
                    goto done;
                }
                int n = 0;
                for (int s = 0; s < nseg; s++) {
                    int from = s == a ? b : s == b ? a : s;
                    int st = seg[from], en = from + 1 < nseg ? seg[from + 1] : D;
                    for (int i = st; i < en; i++)
                        cand[n++] = order[i];
                }
                het_try(&h, cand);
                free(cand);
            }
        if (!(h.tr[0].best < before))
            break;
    }
    if (!isfinite(h.tr[0].best)) {
        rc = plan_partition_no_fit(cfg, "hetero", out, err);
        goto done;
    }
    double v =
        plan_dp_order_fit(cfg, &h.t, h.tr[0].orders, D, h.max_rep, HUGE_VAL, out, &h.mem_cut);
    out->objective_s = plan_partition_bottleneck(c, out);
    *score = out->objective_s;
    if (cfg->select_by_sim && isfinite(v)) {
        double best_iter = HUGE_VAL;
        int *cut = &h.mem_cut;
        /* every kept order of every track (het_search), its candidates simulated */
        for (int i = 0; i < h.n_tracks && rc == SC_OK; i++)
            for (int k = 0; k < h.tr[i].n && rc == SC_OK; k++) {
                const int *o = h.tr[i].orders + (size_t)k * D;
                int rep = h.tr[i].max_rep;
                double it = HUGE_VAL;
                plan_partition *into = i == 0 && k == 0 ? out : h.plan;
                rc = pick_by_simulation(cfg, &h.t, o, rep, into, &it, cut, err);
                /* without copies the all-reduce modes are alike: one */
                for (int mode = 0; mode < (rep > 1 ? 3 : 1) && small && rc == SC_OK; mode++)
                    rc = pick_by_stages(cfg, o, D, rep, mode, into, &it, cut, err);
                if (rc == SC_OK && into != out && it < best_iter * (1 - 1e-12))
                    plan_partition_copy(out, into);
                best_iter = it < best_iter ? it : best_iter;
            }
        if (rc == SC_OK && small)
            rc = refine_by_simulation(cfg, out, &best_iter, cut, err);
        *score = best_iter;
    }
done:
    *mem_cut |= h.mem_cut;
    plan_partition_destroy(&h.scratch);
    plan_partition_destroy(&h.plan);
    free(h.st);
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < HET_TIES; k++)
            plan_partition_destroy(&h.tr[i].plans[k]);
        free(h.tr[i].orders);
    }
    plan_dp_free(&h.t);
    free(order), free(tmp), free(srv), free(perm);
    return rc;
}

/* hetero_orders, then, picked by simulation on a small cluster, the exact search with its plan
 * as the incumbent (plan_partition_exact): *exact stays 1 when that search ran to the end,
 * and its plan replaces the order search's when faster (or when that found none fitting). */
static sc_status hetero_search(const plan_search_cfg *cfg, plan_partition *out, double *score,
                               int *mem_cut, int *exact, sc_err *err)
{
    sc_status rc = hetero_orders(cfg, out, score, mem_cut, err);
    if (!cfg->select_by_sim || !plan_exact_eligible(cfg) || (rc != SC_OK && !out->no_fit)) {
        *exact = 0;
        return rc;
    }
    int done = 0, no_fit = rc != SC_OK;
    double it;
    SC_CHECK(
        plan_partition_exact(cfg, 0, no_fit ? HUGE_VAL : *score, out, &it, &done, mem_cut, err));
    *exact &= done;
    if (no_fit && isfinite(it)) { /* out holds the exact search's plan */
        if (err != NULL)
            sc_err_clear(err);
        rc = SC_OK;
    }
    if (rc == SC_OK)
        *score = it;
    return rc;
}

/* A plan's simulated iteration under the sliced schedule with the fastest count of halved
 * warm-up micro-batches, 0..tries, under which it fits memory (HUGE_VAL when none), as plan_run
 * will run it: plans found under different counts are compared by it. */
static sc_status sliced_score(const plan_search_cfg *cfg, const plan_partition *p, int tries,
                              double *score, sc_err *err)
{
    plan_sim_stage *st = calloc((size_t)p->n_stages, sizeof *st);
    SC_ALLOC_CHECK(st, err);
    sc_status rc = SC_OK;
    plan_search_cfg sc = *cfg;
    *score = HUGE_VAL;
    for (sc.sliced = 0; sc.sliced <= tries && rc == SC_OK; sc.sliced++) {
        double it;
        if (plan_partition_check_memory(&sc, p, NULL) != SC_OK)
            continue;
        rc = plan_search_simulate(&sc, p, st, &it, err);
        if (rc == SC_OK && it < *score)
            *score = it;
    }
    free(st);
    return rc;
}

/* hetero_search again under every count of halved warm-up micro-batches up to `tries`
 * (plan_partition_hetero): the best plan that fits under one of them replaces *out when its
 * score is lower, or when *out has none (*found 0). */
static sc_status hetero_sliced(const plan_search_cfg *cfg, int tries, plan_partition *out,
                               double *score, int *found, int *exact, sc_err *err)
{
    plan_partition *cand = NULL;
    SC_CHECK(plan_partition_new(&cand, out->cap_stages, out->cap_devices, err));
    sc_status rc = SC_OK;
    plan_search_cfg sc = *cfg;
    for (sc.sliced = 1; sc.sliced <= tries && rc == SC_OK; sc.sliced++) {
        double s = HUGE_VAL;
        int ignored = 0;
        sc_err e;
        sc_err_clear(&e);
        sc_status r = hetero_search(&sc, cand, &s, &ignored, exact, &e);
        if (r == SC_OK && cfg->select_by_sim)
            r = sliced_score(cfg, cand, tries, &s, &e);
        if (r != SC_OK && !cand->no_fit) { /* not memory: out of memory, say */
            rc = r;
            if (err != NULL && err->code == SC_OK)
                *err = e;
        } else if (r == SC_OK && (!*found || s < *score)) {
            plan_partition_copy(out, cand);
            *score = s;
            *found = 1;
        }
    }
    plan_partition_destroy(&cand);
    return rc;
}

sc_status plan_partition_hetero(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    double score = HUGE_VAL;
    int cut = 0;
    sc_err first;
    sc_err_clear(&first);
    int exact = 1;
    sc_status rc = hetero_search(cfg, out, &score, &cut, &exact, &first);
    int tries = plan_search_sliced_tries(cfg, cfg->cost->cluster->n_devices), found = rc == SC_OK;
    /* sliced with fewer micro-batches than devices, and memory ruled something out without
     * halves: their stash counts differ (plan_stash_count_sliced), so search again under each
     * count of them, keeping the best plan that fits under one, as minmax does */
    if (cut && tries > 0 && (found || out->no_fit)) {
        if (found && cfg->select_by_sim)
            SC_CHECK(sliced_score(cfg, out, tries, &score, err));
        sc_status src = hetero_sliced(cfg, tries, out, &score, &found, &exact, err);
        rc = src != SC_OK ? src : found ? SC_OK : rc;
    }
    if (rc == SC_OK && cfg->select_by_sim)
        out->search = exact ? PLAN_SEARCH_EXACT : PLAN_SEARCH_HEURISTIC;
    if (rc != SC_OK && !found && err != NULL && err->code == SC_OK)
        *err = first;
    return rc;
}
