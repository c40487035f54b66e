/*
 * plan_partition_minmax: the exact contiguous min-max partition on the devices in cluster order
 * (stage s on device s, one device a stage): the least bottleneck of the common objective,
 * memory a hard limit.
 *
 * Does not reorder devices or replicate stages (hetero does both). Solved by bisection on a
 * reachability test and a table over the few cells the answer can pass, instead of
 * plan_partition_dp's full table per prefix of the order, which it still uses under the sliced
 * schedule with halved warm-up micro-batches (their stash counts do not grow with the devices
 * counted, as the bisection needs).
 * Invariant: the value and the partition are plan_dp_order_fit's on the cluster's order with
 * one copy a stage, ties broken the same way.
 */
#include "coordinator/planner/plan_partition.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_partition_internal.h"

/* minmax without copies, in two steps instead of a full table per prefix of the order: the
 * least bottleneck V, by bisection on a test that sweeps the chain positions each device of
 * the order can reach within a bound (O(devices x blocks) a test); then plan_dp_order's table on
 * the cells a plan of bottleneck V can pass alone (reached from the front within V and able
 * to reach the end within V). Every value the test compares is computed as plan_dp_order computes
 * it, so V is its least bottleneck, and the path through those cells is its partition, ties
 * broken the same way: the fewest devices, then from the last stage back the shortest stage
 * among the best. */
/* The bisection stops once its bounds are this close (relative); the table over the cells
 * below the upper one then gives the exact value. */
#define MM_BRACKET 0x1p-6

typedef struct mm_ctx {
    const plan_search_cfg *cfg;
    const int *order;
    int L, D, k;        /* blocks; devices of the order; the count memend holds */
    int rows;           /* rows of fw the last probe filled */
    const double **wp;  /* (D) work prefix sums on each position's device type */
    const double **cut; /* (D) cut time after block l into each position (NULL at 0) */
    double *cut_rows;   /* (n_cut, L) the distinct bandwidths' cut times */
    double *cut_bw;     /* (D) their bandwidths */
    int n_cut;
    int *memend;            /* (D, L) the furthest end memory allows a stage starting at l */
    unsigned char *fw, *bk; /* (D+1, L+1) positions reached from the front / reaching the end */
} mm_ctx;

static void mm_free(mm_ctx *m)
{
    free(m->wp), free(m->cut), free(m->cut_rows), free(m->cut_bw);
    free(m->memend), free(m->fw), free(m->bk);
}

static int mm_init(mm_ctx *m, const plan_search_cfg *cfg, const int *order, int D)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks;
    size_t cells = (size_t)(D + 1) * (size_t)(L + 1);
    *m = (mm_ctx){.cfg = cfg, .order = order, .L = L, .D = D};
    m->wp = malloc((size_t)D * sizeof *m->wp);
    m->cut = malloc((size_t)D * sizeof *m->cut);
    m->cut_rows = malloc((size_t)D * (size_t)L * sizeof *m->cut_rows);
    m->cut_bw = malloc((size_t)D * sizeof *m->cut_bw);
    m->memend = malloc((size_t)D * (size_t)L * sizeof *m->memend);
    m->fw = malloc(cells);
    m->bk = malloc(cells);
    if (!m->wp || !m->cut || !m->cut_rows || !m->cut_bw || !m->memend || !m->fw || !m->bk)
        return -1;
    for (int s0 = 0; s0 < D; s0++) {
        m->wp[s0] = c->work_prefix_s + (size_t)dev_type(c, order[s0]) * (size_t)(L + 1);
        m->cut[s0] = NULL;
        if (s0 == 0)
            continue;
        double bw = plan_cluster_bw(c->cluster, order[s0 - 1], order[s0]);
        int i = 0;
        while (i < m->n_cut && m->cut_bw[i] != bw)
            i++;
        double *row = m->cut_rows + (size_t)i * L;
        if (i == m->n_cut) {
            m->cut_bw[m->n_cut++] = bw;
            for (int l = 0; l < L; l++)
                row[l] = 2.0 * c->act_bytes[l] / bw; /* as plan_dp_order computes it */
        }
        m->cut[s0] = row;
    }
    return 0;
}

/* memend for plans counted as k stages (plan_dp_order's bound with k devices): memory grows with a
 * stage's extent, so the furthest end grows with its start. */
static void mm_memory(mm_ctx *m, int k)
{
    const plan_search_cfg *cfg = m->cfg;
    const plan_cost *c = cfg->cost;
    int L = m->L;
    m->k = k;
    for (int s0 = 0; s0 < k; s0++) {
        double inflight = search_stash(cfg, k, k - s0, 1), mem = dev_memory(c, m->order[s0]);
        int versions = plan_weight_versions(cfg->sched, k - s0, 1), e = 0;
        int *end = m->memend + (size_t)s0 * L;
        for (int l = 0; l < L; l++) {
            e = e > l ? e : l;
            while (e < L && !(plan_cost_memory(c, l, e, inflight, versions) > mem))
                e++;
            end[l] = e;
        }
    }
}

/* Whether the chain splits into stages on the first d <= m->k devices of the order with every
 * stage time and cut time <= T (memory as memend): the least such d, 0 when none. fw holds the
 * positions reached after each row: up to the one returned, or with `all` up to m->rows (the
 * rows after it reach nothing). *next gets the least stage or cut time above T that the test
 * ruled out: every bound below it gives the same answer. */
static int mm_probe(mm_ctx *m, double T, int all, double *next)
{
    int L = m->L, W = L + 1, lo = 0, hi = 0, found = 0;
    double nx = HUGE_VAL;
    memset(m->fw, 0, (size_t)W);
    m->fw[0] = 1;
    m->rows = 0;
    for (int d = 1; d <= m->k; d++) {
        const unsigned char *prev = m->fw + (size_t)(d - 1) * W;
        unsigned char *cur = m->fw + (size_t)d * W;
        const double *wp = m->wp[d - 1], *cut = m->cut[d - 1];
        const int *memend = m->memend + (size_t)(d - 1) * L;
        memset(cur, 0, (size_t)W);
        int marked = 0, w = 0, nlo = W, nhi = -1;
        /* stages start where the previous row ends; each reaches a run of ends, and the runs'
         * ends grow with their starts */
        for (int l = lo; l <= hi && l < L; l++) {
            if (!prev[l])
                continue;
            if (cut != NULL && cut[l - 1] > T) {
                nx = cut[l - 1] < nx ? cut[l - 1] : nx;
                continue;
            }
            w = w > l ? w : l;
            while (w < L && !(wp[w + 1] - wp[l] > T))
                w++;
            int end = w;
            if (memend[l] < end) {
                end = memend[l];
            } else if (w < L && memend[l] > w) {
                double x = wp[w + 1] - wp[l];
                nx = x < nx ? x : nx;
            }
            int from = marked > l ? marked + 1 : l + 1;
            if (from > end)
                continue;
            memset(cur + from, 1, (size_t)(end - from + 1));
            marked = end;
            nlo = from < nlo ? from : nlo;
            nhi = end;
        }
        if (nhi < 0)
            break;
        m->rows = d;
        if (cur[L] && !found) {
            found = d;
            if (!all)
                break;
        }
        lo = nlo;
        hi = nhi;
    }
    *next = nx;
    return found;
}

/* plan_dp_order's table for m->k devices on the cells a plan of bottleneck <= T can pass (reached
 * from the front within T, reaching the end of the chain within T), given that one can: every
 * candidate a cell of value <= T takes lies there too, so those cells get plan_dp_order's values
 * and splits, ties broken as it breaks them. Returns the least bottleneck, *row its least row. */
static double mm_table(mm_ctx *m, dp_tables *t, double T, int *row)
{
    int L = m->L, W = L + 1;
    double next;
    int found = mm_probe(m, T, 1, &next), rows = m->rows;
    assert(found > 0);
    (void)found;
    /* bk: the positions after row d from which the chain ends within T on a later row */
    memset(m->bk + (size_t)rows * W, 0, (size_t)W);
    m->bk[(size_t)rows * W + L] = 1;
    for (int d = rows; d >= 1; d--) {
        const unsigned char *fw = m->fw + (size_t)(d - 1) * W, *after = m->bk + (size_t)d * W;
        unsigned char *bk = m->bk + (size_t)(d - 1) * W;
        const double *wp = m->wp[d - 1], *cut = m->cut[d - 1];
        const int *memend = m->memend + (size_t)(d - 1) * L;
        memset(bk, 0, (size_t)W);
        bk[L] = d - 1 >= 1; /* row d - 1 may be the last */
        int nb = W, w = L;  /* the first position of `after` beyond l; the furthest end by work */
        for (int l = L - 1; l >= 0; l--) {
            if (after[l + 1])
                nb = l + 1;
            while (w > l && wp[w] - wp[l] > T)
                w--;
            if (!fw[l] || (cut != NULL && cut[l - 1] > T))
                continue;
            int end = memend[l] < w ? memend[l] : w;
            bk[l] = nb <= end;
        }
    }
    double *f = t->f, cap = nextafter(T, HUGE_VAL), best_v = HUGE_VAL;
    f[0] = 0;
    *row = 0;
    for (int d = 1; d <= rows; d++) {
        const unsigned char *fw = m->fw + (size_t)d * W, *bk = m->bk + (size_t)d * W;
        const unsigned char *pfw = fw - W, *pbk = bk - W;
        const double *wp = m->wp[d - 1], *cut = m->cut[d - 1], *prevrow = f + (size_t)(d - 1) * W;
        const int *memend = m->memend + (size_t)(d - 1) * L;
        for (int n = 1; n <= L; n++) {
            if (!fw[n] || !bk[n])
                continue;
            /* plan_dp_order's scan over the cells above */
            double best = cap;
            int at = -1;
            for (int k = n - 1; k >= 0; k--) {
                double ts = wp[n] - wp[k];
                if (ts >= best || memend[k] < n)
                    break;
                if (!pfw[k] || !pbk[k])
                    continue;
                double prev = prevrow[k];
                if (prev >= best)
                    continue;
                double v = prev > ts ? prev : ts;
                if (cut != NULL && v < best && cut[k - 1] > v)
                    v = cut[k - 1];
                if (v < best) {
                    best = v;
                    at = k;
                }
            }
            assert(at >= 0);
            f[(size_t)d * W + n] = best;
            t->k[(size_t)d * W + n] = at;
            t->r[(size_t)d * W + n] = 1;
        }
        if (fw[L] && f[(size_t)d * W + L] < best_v) {
            best_v = f[(size_t)d * W + L];
            *row = d;
        }
    }
    return best_v;
}

/* The least bottleneck on at most m->k devices when it is <= limit, else HUGE_VAL; when found,
 * t holds its table (mm_table) and *row its least row. `lo`: a lower bound (plan_dp_prefix_bounds),
 * tested first since its rounding margin is not a proof. The bisection only narrows the bound
 * until the table over the cells below it is cheap; the table gives the exact value. */
static double mm_least(mm_ctx *m, dp_tables *t, double lo, double limit, int *row)
{
    double hi = HUGE_VAL, next;
    if (isfinite(limit)) {
        if (mm_probe(m, limit, 0, &next) == 0)
            return HUGE_VAL;
        hi = limit;
    }
    lo = lo < hi ? lo : hi;
    if (mm_probe(m, lo, 0, &next) > 0) {
        hi = lo;
        lo = 0;
    } else {
        if (!isfinite(next))
            return HUGE_VAL;
        lo = next;
    }
    /* nothing below lo passes, hi passes */
    while (lo < hi && !(isfinite(hi) && hi - lo <= hi * MM_BRACKET)) {
        double T = isfinite(hi) ? lo + (hi - lo) / 2 : lo * 1.0625;
        T = T < limit ? T : limit;
        if (mm_probe(m, T, 0, &next) > 0) {
            hi = T;
        } else {
            if (!isfinite(next) || next > limit)
                return HUGE_VAL;
            lo = next;
        }
    }
    return mm_table(m, t, hi, row);
}

/* plan_dp_order_fit for max_rep 1 and no cap, without the sliced schedule's halves (whose stash
 * counts do not grow with the devices counted): the same value and partition. Where
 * plan_dp_order_fit re-solves only when the first pass's memory bound ruled anything out, this one
 * always looks at the shorter prefixes, which changes nothing: had the bound ruled nothing
 * out, every shorter prefix's table would be the same, its best no lower and its least row the
 * same. Returns HUGE_VAL when nothing fits or out of memory (*nomem set). */
static double mm_order_fit(const plan_search_cfg *cfg, dp_tables *t, const int *order, int D,
                           plan_partition *out, int *nomem)
{
    mm_ctx m = {0};
    double *bound = malloc((size_t)(D + 1) * sizeof *bound), v = HUGE_VAL;
    if (bound == NULL || mm_init(&m, cfg, order, D) != 0 ||
        plan_dp_prefix_bounds(cfg->cost, order, D, bound) != 0) {
        *nomem = 1;
        goto done;
    }
    mm_memory(&m, D);
    int row = 0, best_row = 0;
    v = mm_least(&m, t, bound[D], HUGE_VAL, &best_row);
    /* plan_dp_order_fit's re-solves: a tie goes to the fewer devices. t keeps the table of the last
     * prefix found, the best. */
    for (int k = D - 1; k >= 1 && bound[k] < v; k--) {
        mm_memory(&m, k);
        double vk = mm_least(&m, t, bound[k], v, &row);
        if (vk <= v && isfinite(vk)) {
            v = vk;
            best_row = row;
        }
    }
    if (best_row > 0 && plan_dp_extract(t, order, best_row, m.L, out) != 0) {
        *nomem = 1;
        v = HUGE_VAL;
    }
done:
    mm_free(&m);
    free(bound);
    return v;
}

sc_status plan_partition_minmax(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int D = c->cluster->n_devices, L = c->n_blocks;
    dp_tables t = {0};
    int *order = malloc((size_t)D * sizeof(int));
    if (order == NULL || plan_dp_alloc(&t, D, L, 0) != 0) {
        free(order);
        plan_dp_free(&t);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory in minmax");
    }
    for (int d = 0; d < D; d++)
        order[d] = d;
    /* the order is a prefix: capping the devices caps the stages */
    int Dused = cfg->max_stages > 0 && cfg->max_stages < D ? cfg->max_stages : D;
    /* the bisection needs stash counts that grow with the devices counted */
    int nomem = 0;
    double v = cfg->sched == PLAN_SCHED_SLICED && cfg->sliced > 0
                   ? plan_dp_order_fit(cfg, &t, order, Dused, 1, HUGE_VAL, out, NULL)
                   : mm_order_fit(cfg, &t, order, Dused, out, &nomem);
    if (nomem) {
        free(order);
        plan_dp_free(&t);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory in minmax");
    }
    /* sliced: the plan may run 0 to S - 1 warm-up micro-batches as halves */
    plan_search_cfg sc = *cfg;
    for (sc.sliced = 1; sc.sliced <= plan_search_sliced_tries(cfg, Dused); sc.sliced++) {
        double vk = plan_dp_order_fit(&sc, &t, order, Dused, 1, v, out, NULL);
        if (vk < v)
            v = vk;
    }
    free(order);
    plan_dp_free(&t);
    if (!isfinite(v))
        return plan_partition_no_fit(cfg, "minmax", out, err);
    out->objective_s = v;
    return SC_OK;
}
