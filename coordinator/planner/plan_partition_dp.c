/*
 * plan_partition_dp: the dynamic programme over a device order that minmax and hetero build on:
 * the least bottleneck of the chain cut into stages on the order's devices front to back (a
 * prefix of the order; a stage may take a run of alike devices as copies), memory a hard limit,
 * and the lower bounds that let the searches stop early.
 *
 * Does not choose the order (hetero does) and does not simulate. Like the other partitioners'
 * DPs, it scans split points from the right and stops as soon as the stage being formed is
 * already at least as slow as the best value found (its work only grows as the split moves
 * left); that keeps it exact and far below its O(L^2) worst case on long chains. With a stage
 * cap the table gains a plane per stage allowed (at most s stages in plane s), S times the work.
 * Invariant: row d of a table holds the best partitions on the order's first d devices (within
 * the cap); a tie between rows goes to the fewer devices.
 */
#include "coordinator/planner/plan_partition.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>

#include "coordinator/planner/plan_partition_internal.h"

void plan_dp_free(dp_tables *t)
{
    free(t->f);
    free(t->k);
    free(t->r);
}

int plan_dp_alloc(dp_tables *t, int D, int L, int S)
{
    S = S > 0 && S < D && S < L ? S : 0;
    int rows = S > 0 && S * DP_MAX_COPIES < D ? S * DP_MAX_COPIES : D;
    size_t n = (size_t)(S + 1) * (size_t)(rows + 1) * (size_t)(L + 1);
    t->D = D;
    t->L = L;
    t->S = S;
    t->rows = rows;
    t->f = malloc(n * sizeof(double));
    t->k = malloc(n * sizeof(int));
    t->r = malloc(n * sizeof(int));
    return t->f && t->k && t->r ? 0 : -1;
}

int plan_dp_extract(const dp_tables *t, const int *order, int d, int L, plan_partition *out)
{
    int W = t->L + 1, ns = 0, n = L, s = t->S;
    size_t plane = (size_t)(t->rows + 1) * (size_t)W;
    int *st_first = malloc((size_t)L * sizeof(int)), *st_d = malloc((size_t)L * sizeof(int));
    int *st_r = malloc((size_t)L * sizeof(int));
    if (!st_first || !st_d || !st_r) {
        free(st_first), free(st_d), free(st_r);
        return -1;
    }
    /* walk back (with a cap, one plane down a stage), then push the stages front to back */
    assert(d <= t->rows);
    while (n > 0) {
        size_t at = (size_t)s * plane + (size_t)d * W + n;
        int k = t->k[at], r = t->r[at];
        if (r == 0) { /* the plane below's plan, with fewer stages */
            assert(s > 1);
            s--;
            continue;
        }
        st_first[ns] = k;
        st_d[ns] = d - r;
        st_r[ns] = r;
        ns++;
        n = k;
        d -= r;
        if (t->S > 0) {
            assert(s > 0);
            s--;
        }
    }
    plan_partition_clear(out);
    for (int i = ns - 1; i >= 0; i--) {
        int last = i > 0 ? st_first[i - 1] - 1 : L - 1;
        plan_partition_push(out, st_first[i], last, order + st_d[i], st_r[i]);
    }
    free(st_first), free(st_d), free(st_r);
    return 0;
}

int plan_dp_same_run(const plan_cluster *cl, const int *order, int d, int max_rep)
{
    int run = 1;
    while (run < max_rep && d - run - 1 >= 0 &&
           cl->devices[order[d - run - 1]].type == cl->devices[order[d - 1]].type &&
           cl->devices[order[d - run - 1]].server == cl->devices[order[d - 1]].server)
        run++;
    return run;
}

/* One plane of plan_dp_order: rows 1..D of f (splits kk, copies rr), each stage's predecessors
 * read from `prev`: the plane itself without a cap (its rows above are done by then), the plane
 * below with one (`below` set). Then a cell starts from the plane below's value, with fewer
 * stages, marked by 0 copies: a stage added must beat it, which stops the scans early; and
 * predecessors where the plane below holds nothing are skipped: its rows past prev_rows, and
 * in row 0 every prefix but the empty one. */
static void dp_plane(const plan_search_cfg *cfg, const int *order, int D, int W, int max_rep,
                     int mem_D, double cap, const double *prev, int below, int prev_rows, double *f,
                     int *kk, int *rr, int *mem_cut)
{
    const plan_cost *c = cfg->cost;
    const plan_cluster *cl = c->cluster;
    int L = W - 1;
    for (int d = 1; d <= D; d++) {
        int run = plan_dp_same_run(cl, order, d, max_rep);
        int type = dev_type(c, order[d - 1]);
        double mem = dev_memory(c, order[d - 1]);
        int srv = cl->devices[order[d - 1]].server;
        double intra = reduce_capped(cl, srv, cl->servers[srv].intra_bw_bytes_per_s);
        /* what depends on the row and the copies alone, out of the loops over blocks: the
         * stages from this one on take the devices s0..mem_D-1 at most */
        double inflight[DP_MAX_COPIES + 1], bw_in[DP_MAX_COPIES + 1];
        int versions[DP_MAX_COPIES + 1];
        assert(run <= DP_MAX_COPIES);
        for (int r = 1; r <= run; r++) {
            int s0 = d - r; /* position of the stage's first device */
            inflight[r] = search_stash(cfg, mem_D, mem_D - s0, r);
            versions[r] = plan_weight_versions(cfg->sched, mem_D - s0, r);
            bw_in[r] = s0 > 0 ? plan_cluster_bw(cl, order[s0 - 1], order[s0]) : 0;
        }
        for (int n = 1; n <= L; n++) {
            double best = cap;
            int bk = -1, br = 1;
            if (below && prev[(size_t)d * W + n] < best) {
                best = prev[(size_t)d * W + n];
                bk = n;
                br = 0;
            }
            for (int r = 1; r <= run; r++) {
                if (!plan_replicas_runnable(cfg->sched, cfg->n_micro, r))
                    continue;   /* copies the runtime would refuse for this micro-batch count */
                int s0 = d - r; /* position of the stage's first device */
                const double *prevrow = prev + (size_t)s0 * W;
                if (below && s0 > prev_rows)
                    continue;
                for (int k = below && s0 == 0 ? 0 : n - 1; k >= 0; k--) {
                    double work = plan_cost_work(c, type, k, n - 1);
                    double ts = r > 1 ? work / r + allreduce_share_s(
                                                       c, plan_cost_params(c, k, n - 1), r, intra)
                                      : work;
                    if (ts >= best)
                        break;
                    /* dp_memory (plan_partition_hetero.c), its counts computed above */
                    if (plan_cost_memory(c, k, n - 1, inflight[r], versions[r]) > mem) {
                        if (mem_cut != NULL)
                            *mem_cut = 1;
                        break;
                    }
                    double pv = prevrow[k];
                    if (pv >= best)
                        continue;
                    double v = pv > ts ? pv : ts;
                    if (s0 > 0 && v < best) {
                        double cut = 2.0 * c->act_bytes[k - 1] / bw_in[r];
                        if (cut > v)
                            v = cut;
                    }
                    if (v < best) {
                        best = v;
                        bk = k;
                        br = r;
                    }
                }
            }
            if (bk >= 0) {
                f[(size_t)d * W + n] = best;
                kk[(size_t)d * W + n] = bk;
                rr[(size_t)d * W + n] = br;
            }
        }
    }
}

double plan_dp_order(const plan_search_cfg *cfg, dp_tables *t, const int *order, int D, int max_rep,
                     double cap, plan_partition *out, int *mem_cut)
{
    int L = t->L, W = L + 1;
    assert(D <= t->D && L == cfg->cost->n_blocks);
    /* with a cap no plan has more devices than plan_dp_rows, so the memory bound counts those
     * of the prefix up to there; the planes are cleared whole, so that rows past it read as
     * nothing found */
    int rows = plan_dp_rows(t, D, max_rep), clear = t->S > 0 ? t->rows : rows;
    size_t plane = (size_t)(t->rows + 1) * (size_t)W;
    double *f = t->f;
    for (int s = 0; s <= t->S; s++) {
        double *fs = f + (size_t)s * plane;
        for (size_t i = 0; i < (size_t)(clear + 1) * W; i++)
            fs[i] = HUGE_VAL;
        fs[0] = 0; /* the empty prefix: every plane may start there */
    }
    if (t->S == 0) {
        dp_plane(cfg, order, rows, W, max_rep, rows, cap, f, 0, rows, f, t->k, t->r, mem_cut);
    } else {
        for (int s = 1; s <= t->S; s++) {
            /* at most s stages of at most max_rep copies each */
            int rs = s * max_rep < rows ? s * max_rep : rows;
            int below_rs = (s - 1) * max_rep < rows ? (s - 1) * max_rep : rows;
            size_t at = (size_t)s * plane;
            dp_plane(cfg, order, rs, W, max_rep, rows, cap, f + at - plane, 1, below_rs, f + at,
                     t->k + at, t->r + at, mem_cut);
        }
    }
    double best = cap;
    int bd = -1;
    for (int d = 1; d <= rows; d++)
        if (plan_dp_value(t, d, L) < best) {
            best = plan_dp_value(t, d, L);
            bd = d;
        }
    if (bd < 0)
        return HUGE_VAL;
    if (out != NULL && plan_dp_extract(t, order, bd, L, out) != 0)
        return HUGE_VAL;
    return best;
}

/* A speed of devices of type `type` relative to type 0 that no block beats: the largest ratio
 * of a block's work on type 0 to its work on `type` (HUGE_VAL when some block costs nothing on
 * `type` but something on type 0). Any stage's work on `type` is at least its work on type 0
 * divided by this. */
static double type_speed_bound(const plan_cost *c, int type)
{
    int L = c->n_blocks;
    double s = 0;
    for (int b = 0; b < L; b++) {
        double w0 = c->fwd_s[b] + c->bwd_s[b];
        double w = c->fwd_s[(size_t)type * L + b] + c->bwd_s[(size_t)type * L + b];
        if (w0 <= 0)
            continue;
        if (w <= 0)
            return HUGE_VAL;
        if (w0 / w > s)
            s = w0 / w;
    }
    return s;
}

int plan_dp_prefix_bounds(const plan_cost *c, const int *order, int D, double *bound)
{
    int T = c->cluster->n_types;
    double *speed = malloc((size_t)(T > 0 ? T : 1) * sizeof *speed);
    if (speed == NULL)
        return -1;
    for (int i = 0; i < T; i++)
        speed[i] = type_speed_bound(c, i);
    double work0 = plan_cost_work(c, 0, 0, c->n_blocks - 1), sum = 0;
    bound[0] = HUGE_VAL;
    for (int d = 1; d <= D; d++) {
        sum += speed[dev_type(c, order[d - 1])];
        bound[d] = isfinite(sum) && sum > 0 ? work0 / sum * (1 - 1e-9) : 0;
    }
    free(speed);
    return 0;
}

double plan_dp_order_fit(const plan_search_cfg *cfg, dp_tables *t, const int *order, int D,
                         int max_rep, double cap, plan_partition *out, int *mem_cut)
{
    int cut = 0;
    double v = plan_dp_order(cfg, t, order, D, max_rep, cap, out, &cut);
    if (mem_cut != NULL)
        *mem_cut |= cut;
    if (!cut || D < 2)
        return v;
    double *bound = malloc((size_t)(D + 1) * sizeof *bound);
    if (bound == NULL || plan_dp_prefix_bounds(cfg->cost, order, D, bound) != 0) {
        free(bound);
        return HUGE_VAL;
    }
    /* with a cap, longer prefixes than plan_dp_rows solve as that one did */
    for (int k = plan_dp_rows(t, D, max_rep) - 1; k >= 1 && bound[k] < (v < cap ? v : cap); k--) {
        /* a result equal to the best so far is kept: it uses fewer devices */
        double vk = plan_dp_order(cfg, t, order, k, max_rep, v < cap ? nextafter(v, HUGE_VAL) : cap,
                                  out, NULL);
        if (vk <= v)
            v = vk;
    }
    free(bound);
    return v;
}
