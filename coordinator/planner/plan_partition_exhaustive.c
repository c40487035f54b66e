/*
 * plan_partition_exhaustive: brute force for small instances: every cut of the chain into 1..S
 * stages and every assignment of distinct devices to them, pruned by the best bottleneck found
 * so far and by memory; a reference for the other strategies.
 *
 * Does not replicate stages, and refuses (SC_ERR_TOO_LARGE) when the candidates exceed the
 * limit instead of running for hours. Invariant: the result has the least bottleneck (with
 * links, contention included) of all candidates that fit memory.
 */
#include "coordinator/planner/plan_partition.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_partition_internal.h"

typedef struct ex_state {
    const plan_search_cfg *cfg;
    plan_partition *scratch; /* with links: the candidate, to score its contention */
    int L, D, S;
    int *used;
    int *cut_at; /* (S) first block of each stage */
    int *dev;    /* (S) */
    int *best_cut, *best_dev;
    int best_S;
    double best;
    int mem_cut; /* memory ruled out some stage */
} ex_state;

static void ex_rec(ex_state *e, int s, int start, double cur)
{
    const plan_cost *c = e->cfg->cost;
    if (s == e->S) {
        if (start == e->L && cur < e->best && e->scratch != NULL) {
            plan_partition_clear(e->scratch);
            for (int x = 0; x < e->S; x++)
                plan_partition_push(e->scratch, e->cut_at[x],
                                    x + 1 < e->S ? e->cut_at[x + 1] - 1 : e->L - 1, &e->dev[x], 1);
            double ct = plan_partition_contention(c, e->scratch);
            cur = ct > cur ? ct : cur;
        }
        if (start == e->L && cur < e->best) {
            e->best = cur;
            e->best_S = e->S;
            memcpy(e->best_cut, e->cut_at, (size_t)e->S * sizeof(int));
            memcpy(e->best_dev, e->dev, (size_t)e->S * sizeof(int));
        }
        return;
    }
    int max_end = e->L - (e->S - s); /* leave one block per remaining stage */
    double inflight = search_stash(e->cfg, e->S, e->S - s, 1);
    int wv = plan_weight_versions(e->cfg->sched, e->S - s, 1);
    for (int d = 0; d < e->D; d++) {
        if (e->used[d])
            continue;
        int type = dev_type(c, d);
        double cut = 0;
        if (s > 0)
            cut = 2.0 * c->act_bytes[start - 1] / plan_cluster_bw(c->cluster, e->dev[s - 1], d);
        if (cut >= e->best)
            continue;
        double base = cur > cut ? cur : cut;
        e->used[d] = 1;
        e->dev[s] = d;
        e->cut_at[s] = start;
        int lo = s == e->S - 1 ? e->L - 1 : start;
        for (int end = lo; end <= max_end; end++) {
            double w = plan_cost_work(c, type, start, end);
            if (w >= e->best)
                break;
            if (plan_cost_memory(c, start, end, inflight, wv) > dev_memory(c, d)) {
                e->mem_cut = 1;
                break;
            }
            ex_rec(e, s + 1, end + 1, base > w ? base : w);
        }
        e->used[d] = 0;
    }
}

static double choose(int n, int k)
{
    double r = 1;
    for (int i = 1; i <= k; i++)
        r = r * (n - k + i) / i;
    return r;
}

/* log10 of the candidate plans of L blocks on D devices in 1..Smax stages, the sum over S of
 * C(L-1, S-1) D! / (D-S)!, by its terms' logarithms: the sum itself passes the largest double
 * (about 1.8e308) on large instances (177 blocks on 4,096 devices give 5e637). */
static double exhaustive_log10_count(int L, int D, int Smax)
{
    double most = -HUGE_VAL, sum = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int S = 1; S <= Smax; S++) {
            double t =
                (lgamma(L) - lgamma(S) - lgamma(L - S + 1) + lgamma(D + 1) - lgamma(D - S + 1)) /
                log(10);
            if (pass == 0)
                most = t > most ? t : most;
            else
                sum += pow(10, t - most);
        }
    return most + log10(sum);
}

sc_status plan_partition_exhaustive(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks, D = c->cluster->n_devices;
    int Smax = plan_search_max_stages(cfg);
    long limit = cfg->exhaustive_limit > 0 ? cfg->exhaustive_limit : PLAN_EXHAUSTIVE_DEFAULT_LIMIT;
    double count = 0;
    for (int S = 1; S <= Smax; S++) {
        double perm = 1;
        for (int i = 0; i < S; i++)
            perm *= D - i;
        count += choose(L - 1, S - 1) * perm;
    }
    if (count > (double)limit) {
        char n[48];
        if (isfinite(count))
            snprintf(n, sizeof n, "%.3g", count);
        else
            snprintf(n, sizeof n, "more than 10^%.0f", floor(exhaustive_log10_count(L, D, Smax)));
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "exhaustive: %d blocks on %d devices give %s candidate plans, over the "
                       "limit of %ld; use it on small instances (e.g. <= 12 blocks and <= 6 "
                       "devices) or pick another strategy",
                       L, D, n, limit);
    }
    ex_state e = {.cfg = cfg, .L = L, .D = D, .best = HUGE_VAL};
    e.used = calloc((size_t)D, sizeof(int));
    e.cut_at = calloc((size_t)Smax, sizeof(int));
    e.dev = calloc((size_t)Smax, sizeof(int));
    e.best_cut = calloc((size_t)Smax, sizeof(int));
    e.best_dev = calloc((size_t)Smax, sizeof(int));
    sc_status rc = SC_OK;
    if (!e.used || !e.cut_at || !e.dev || !e.best_cut || !e.best_dev) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory in exhaustive");
        goto done;
    }
    if (c->cluster->n_links > 0)
        SC_CHECK_GOTO(plan_partition_new(&e.scratch, L, D, err), done);
    for (int S = 1; S <= Smax; S++) {
        e.S = S;
        ex_rec(&e, 0, 0, 0);
    }
    /* sliced: where memory ruled anything out without halves, every count of halved warm-up
     * micro-batches in turn, keeping only plans better than the best so far */
    plan_search_cfg sc = *cfg;
    e.cfg = &sc;
    for (sc.sliced = 1; e.mem_cut && sc.sliced <= plan_search_sliced_tries(cfg, Smax); sc.sliced++)
        for (int S = 2; S <= Smax; S++) {
            e.S = S;
            ex_rec(&e, 0, 0, 0);
        }
    if (!isfinite(e.best)) {
        rc = plan_partition_no_fit(cfg, "exhaustive", out, err);
        goto done;
    }
    plan_partition_clear(out);
    for (int s = 0; s < e.best_S; s++) {
        int last = s + 1 < e.best_S ? e.best_cut[s + 1] - 1 : L - 1;
        plan_partition_push(out, e.best_cut[s], last, &e.best_dev[s], 1);
    }
    out->objective_s = e.best;
done:
    plan_partition_destroy(&e.scratch);
    free(e.used), free(e.cut_at), free(e.dev), free(e.best_cut), free(e.best_dev);
    return rc;
}
