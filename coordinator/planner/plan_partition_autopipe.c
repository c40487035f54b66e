/*
 * plan_partition_autopipe: AutoPipe's critical-stage search: from the exact min-max partition
 * on the devices in order, simulate 1F1B, find the critical stage (the last whose steady phase
 * has no idle gap) and hand one of its end blocks to a neighbour, balancing that side again
 * exactly; breadth first over the partitions so found while evaluations last. The fastest
 * simulated partition wins.
 *
 * Does not reorder devices, replicate stages or check memory. Invariant: S stages (devices,
 * blocks or the stage cap, the least), stage s on device s; out->objective_s is the simulated
 * iteration, not a bottleneck.
 */
#include "coordinator/planner/plan_partition.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_partition_internal.h"
#include "coordinator/planner/plan_sim.h"

/* Exact min-max of blocks [lo, hi) into exactly ns stages on devices dev0.. in cluster order.
 * f, arg: scratch of (ns+1)*(hi-lo+1). Writes the ns+1 boundaries to bnd. */
static double range_dp(const plan_cost *c, int lo, int hi, int dev0, int ns, int *bnd, double *f,
                       int *arg)
{
    int len = hi - lo, W = len + 1;
    for (int i = 0; i < (ns + 1) * W; i++)
        f[i] = HUGE_VAL;
    f[0] = 0;
    for (int p = 1; p <= ns; p++) {
        int dev = dev0 + p - 1, type = dev_type(c, dev);
        double bw = p > 1 ? plan_cluster_bw(c->cluster, dev - 1, dev) : 1;
        for (int n = p; n <= len - (ns - p); n++) {
            double best = HUGE_VAL;
            int bk = -1;
            for (int k = n - 1; k >= p - 1; k--) {
                double w = plan_cost_work(c, type, lo + k, lo + n - 1);
                if (w >= best)
                    break;
                double prev = f[(p - 1) * W + k];
                if (prev >= best)
                    continue;
                double v = prev > w ? prev : w;
                if (p > 1) {
                    double cut = 2.0 * c->act_bytes[lo + k - 1] / bw;
                    v = cut > v ? cut : v;
                }
                if (v < best) {
                    best = v;
                    bk = k;
                }
            }
            f[p * W + n] = best;
            arg[p * W + n] = bk;
        }
    }
    bnd[ns] = hi;
    int n = len;
    for (int p = ns; p >= 1; p--) {
        n = arg[p * W + n];
        bnd[p - 1] = lo + n;
    }
    return f[ns * W + len];
}

static uint64_t hash_bnd(const int *b, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)b[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void bnd_to_partition(const int *bnd, int S, plan_partition *p)
{
    plan_partition_clear(p);
    for (int s = 0; s < S; s++)
        plan_partition_push(p, bnd[s], bnd[s + 1] - 1, &s, 1);
}

/* The last stage whose steady phase (first backward .. last forward) has no idle gap. */
static int critical_stage(const plan_sim_result *r, int S, const plan_cost *c,
                          const plan_partition *p)
{
    int crit = -1;
    for (int s = 0; s < S; s++) {
        double first_b = HUGE_VAL, last_f = 0, prev_end = -1, gaps = 0;
        for (int e = 0; e < r->n_events; e++) {
            const plan_sim_event *ev = &r->events[e];
            if (ev->lane != s)
                continue;
            if (ev->kind == PLAN_ACT_B && ev->start_s < first_b)
                first_b = ev->start_s;
            if (ev->kind == PLAN_ACT_F)
                last_f = ev->start_s + ev->dur_s;
        }
        for (int e = 0; e < r->n_events; e++) {
            const plan_sim_event *ev = &r->events[e];
            if (ev->lane != s || ev->kind == PLAN_ACT_OPT)
                continue;
            if (ev->start_s >= first_b && ev->start_s <= last_f && prev_end >= first_b)
                gaps += ev->start_s - prev_end;
            prev_end = ev->start_s + ev->dur_s;
        }
        if (first_b <= last_f && gaps <= 1e-9 * r->iteration_s)
            crit = s;
    }
    if (crit < 0) {
        double worst = -1;
        for (int s = 0; s < S; s++) {
            double t = plan_partition_stage_time(c, p, s);
            if (t >= worst) {
                worst = t;
                crit = s;
            }
        }
    }
    return crit;
}

sc_status plan_partition_autopipe(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks, S = plan_search_max_stages(cfg);
    int m = 2 * S;
    int max_eval = L > 500 ? 48 : 160;
    sc_status rc = SC_OK;
    plan_schedule *sched = NULL;
    plan_partition *cur = NULL;
    plan_sim_stage *st = calloc((size_t)S, sizeof *st);
    double *f = malloc((size_t)(S + 1) * (size_t)(L + 1) * sizeof(double));
    int *arg = malloc((size_t)(S + 1) * (size_t)(L + 1) * sizeof(int));
    int *queue = malloc((size_t)(2 * max_eval + 2) * (size_t)(S + 1) * sizeof(int));
    uint64_t *seen = calloc((size_t)(4 * max_eval + 8), sizeof(uint64_t));
    int *nb = malloc((size_t)(S + 1) * sizeof(int));
    if (!st || !f || !arg || !queue || !seen || !nb) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "autopipe: out of memory");
        goto done;
    }
    SC_CHECK_GOTO(plan_schedule_build(&sched, PLAN_SCHED_1F1B, S, m, 0, err), done);
    SC_CHECK_GOTO(plan_partition_new(&cur, S, S, err), done);
    int head = 0, tail = 0, n_seen = 0, qcap = 2 * max_eval + 2;
    range_dp(c, 0, L, 0, S, queue, f, arg);
    seen[n_seen++] = hash_bnd(queue, S + 1);
    tail = 1;
    double best = HUGE_VAL;
    for (int evals = 0; head < tail && evals < max_eval; evals++) {
        int *bnd = queue + (size_t)(head++ % qcap) * (S + 1);
        bnd_to_partition(bnd, S, cur);
        plan_partition_sim_stages(c, cur, st);
        plan_sim_result r;
        SC_CHECK_GOTO(plan_partition_simulate(c, cur, sched, st, m, 1.0, 1, &r, err), done);
        if (r.iteration_s < best) {
            best = r.iteration_s;
            plan_partition_copy(out, cur);
        }
        int crit = critical_stage(&r, S, c, cur);
        plan_sim_result_free(&r);
        for (int move = 0; move < 2; move++) {
            memcpy(nb, bnd, (size_t)(S + 1) * sizeof(int));
            if (move == 0) {
                /* its first block moves to the previous stage; re-balance the prefix */
                if (crit == 0 || nb[crit + 1] - nb[crit] < 2 || nb[crit] + 1 < crit)
                    continue;
                nb[crit]++;
                range_dp(c, 0, nb[crit], 0, crit, nb, f, arg);
            } else {
                if (crit == S - 1 || nb[crit + 1] - nb[crit] < 2)
                    continue;
                nb[crit + 1]--;
                if (L - nb[crit + 1] < S - crit - 1)
                    continue;
                range_dp(c, nb[crit + 1], L, crit + 1, S - crit - 1, nb + crit + 1, f, arg);
            }
            uint64_t h = hash_bnd(nb, S + 1);
            int dup = 0;
            for (int i = 0; i < n_seen; i++)
                dup |= seen[i] == h;
            if (dup || n_seen >= 4 * max_eval + 8 || tail - head >= qcap)
                continue;
            seen[n_seen++] = h;
            memcpy(queue + (size_t)(tail++ % qcap) * (S + 1), nb, (size_t)(S + 1) * sizeof(int));
        }
    }
    out->objective_s = best;
done:
    plan_schedule_destroy(&sched);
    plan_partition_destroy(&cur);
    free(st), free(f), free(arg), free(queue), free(seen), free(nb);
    return rc;
}
