/*
 * plan_ga: the UMPIPE recurrence (scalar and batched), the dual-chromosome genetic search and
 * the two baselines.
 *
 * The batched evaluator keeps the population as [stage][entry][individual] so that the inner
 * loop runs over individuals with no branches (masks instead), which the compiler turns into
 * vector code where it can. Which upstream entry a downstream entry waits for is found by a
 * per-individual pointer that only moves forward (the prefix sums are monotone).
 */
#include "coordinator/planner/plan_ga.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GA_MAX_K 64
/* Individuals are evaluated in tiles of GA_TILE lanes so that a tile's scratch (prefix sums
 * and arrivals of two stages) stays in the first-level cache. */
#define GA_TILE 16

/* ================================================================ scalar recurrence */

static double penalty_factor(const plan_ga_problem *p, const int *x, const int *y)
{
    int K = p->max_entries;
    double over = 0;
    for (int i = 0; i < p->n_stages; i++)
        for (int j = 0; j < K; j++) {
            int a = x[i * K + j], b = y[i * K + j];
            if (a > p->max_size[i])
                over += a - p->max_size[i];
            if (b > p->max_size[i])
                over += b - p->max_size[i];
        }
    return over > 0 ? 2.0 + over / p->batch : 1.0;
}

double plan_ga_eval_one(const plan_ga_problem *p, const int *x, const int *y)
{
    int S = p->n_stages, K = p->max_entries, W = p->batch + 1;
    double arr[2][GA_MAX_K];
    int pref[2][GA_MAX_K + 1];
    double fend[512];
    double *fe = S <= 512 ? fend : malloc((size_t)S * sizeof(double));
    if (fe == NULL)
        return HUGE_VAL;
    int cur = 0, nprev = 0;
    for (int i = 0; i < S; i++) {
        const int *xi = x + i * K;
        const double *ft = p->fwd_s + (size_t)i * W, *ct = p->comm_s + (size_t)i * W;
        double F = 0, A = 0;
        int k = 0, cum = 0;
        pref[cur][0] = 0;
        int j = 0;
        for (; j < K && xi[j] > 0; j++) {
            cum += xi[j];
            pref[cur][j + 1] = cum;
            double ready = 0;
            if (i > 0) {
                /* the first upstream entry whose prefix covers our samples */
                while (k < nprev - 1 && pref[!cur][k + 1] < cum)
                    k++;
                ready = arr[!cur][k];
            }
            F = (F > ready ? F : ready) + ft[xi[j]];
            A = (A > F ? A : F) + ct[xi[j]];
            arr[cur][j] = A;
        }
        nprev = j;
        fe[i] = F;
        cur = !cur;
    }
    double end = 0;
    nprev = 0;
    for (int i = S - 1; i >= 0; i--) {
        const int *yi = y + i * K;
        const double *bt = p->bwd_s + (size_t)i * W;
        const double *ct = i > 0 ? p->comm_s + (size_t)(i - 1) * W : NULL;
        double B = fe[i], G = 0;
        int k = 0, cum = 0, j = 0;
        pref[cur][0] = 0;
        for (; j < K && yi[j] > 0; j++) {
            cum += yi[j];
            pref[cur][j + 1] = cum;
            double ready = 0;
            if (i < S - 1) {
                while (k < nprev - 1 && pref[!cur][k + 1] < cum)
                    k++;
                ready = arr[!cur][k];
            }
            B = (B > ready ? B : ready) + bt[yi[j]];
            if (ct) {
                G = (G > B ? G : B) + ct[yi[j]];
                arr[cur][j] = G;
            }
        }
        nprev = j;
        if (B > end)
            end = B;
        cur = !cur;
    }
    if (fe != fend)
        free(fe);
    return (end + p->opt_s) * penalty_factor(p, x, y);
}

/* ================================================================ batched recurrence */

struct plan_ga_batch {
    int n_cap, S, K, B;
    int *x, *y;          /* (S, K, n_cap) */
    int *pref;           /* (2, K+1, GA_TILE): prefix sums of two neighbouring stages */
    double *arr;         /* (2, K, GA_TILE): arrival downstream of each entry */
    double *fend;        /* (S, GA_TILE): last forward end per stage */
    double *end, *pen;   /* (n_cap) */
};

sc_status plan_ga_batch_new(plan_ga_batch **out, const plan_ga_problem *p, int n, sc_err *err)
{
    *out = NULL;
    if (p->max_entries > GA_MAX_K || p->max_entries < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "umpipe: max_entries must be 1-%d, got %d",
                       GA_MAX_K, p->max_entries);
    plan_ga_batch *b = calloc(1, sizeof *b);
    SC_ALLOC_CHECK(b, err);
    size_t N = (size_t)n, S = (size_t)p->n_stages, K = (size_t)p->max_entries,
           B = (size_t)p->batch;
    b->n_cap = n;
    b->S = p->n_stages;
    b->K = p->max_entries;
    b->B = p->batch;
    b->x = calloc(S * K * N, sizeof(int));
    b->y = calloc(S * K * N, sizeof(int));
    b->pref = calloc(2 * (K + 1) * GA_TILE, sizeof(int));
    b->arr = calloc(2 * K * GA_TILE, sizeof(double));
    (void)B;
    b->fend = calloc(S * GA_TILE, sizeof(double));
    b->end = calloc(N, sizeof(double));
    b->pen = calloc(N, sizeof(double));
    if (!b->x || !b->y || !b->pref || !b->arr || !b->fend || !b->end || !b->pen) {
        plan_ga_batch_destroy(&b);
        return SC_ERRF(err, SC_ERR_NOMEM, "umpipe: out of memory for a population of %d", n);
    }
    *out = b;
    return SC_OK;
}

void plan_ga_batch_destroy(plan_ga_batch **bp)
{
    if (bp == NULL || *bp == NULL)
        return;
    plan_ga_batch *b = *bp;
    free(b->x), free(b->y), free(b->pref), free(b->arr), free(b->fend);
    free(b->end), free(b->pen);
    free(b);
    *bp = NULL;
}

void plan_ga_batch_set(plan_ga_batch *b, int i, const int *x, const int *y)
{
    size_t N = (size_t)b->n_cap;
    for (int s = 0; s < b->S; s++)
        for (int j = 0; j < b->K; j++) {
            size_t at = ((size_t)s * b->K + j) * N + (size_t)i;
            b->x[at] = x[s * b->K + j];
            b->y[at] = y[s * b->K + j];
        }
}

typedef struct ga_tile {
    double F[GA_TILE], A[GA_TILE], last[GA_TILE];
    int k[GA_TILE];
} ga_tile;

/* One direction of the recurrence for one stage over one tile of nt lanes. `sz` points at the
 * tile's first lane of entry 0 (stride N between entries), `t` / `ct` the time and transfer per
 * size (ct NULL: no link after it), `start` the earliest start per lane (NULL: 0), `up_pref` /
 * `up_arr` the upstream stage's prefix sums (K+1, GA_TILE) and arrivals (K, GA_TILE) (NULL:
 * none); writes this stage's to `pref` / `arr` and its last end to g->last. */
static void tile_stage(ga_tile *g, int nt, int K, size_t N, const int *sz, const double *t,
                       const double *ct, const double *start, const int *up_pref,
                       const double *up_arr, int *pref, double *arr)
{
    for (int q = 0; q < nt; q++) {
        g->F[q] = start ? start[q] : 0;
        g->A[q] = 0;
        g->k[q] = 0;
        pref[q] = 0;
    }
    for (int j = 0; j < K; j++) {
        const int *e = sz + (size_t)j * N;
        int any = 0;
        for (int q = 0; q < nt; q++)
            any |= e[q];
        if (!any) /* rows are packed: nothing further in this tile */
            break;
        const int *pin = pref + j * GA_TILE;
        int *pout = pref + (j + 1) * GA_TILE;
        double *aout = arr + j * GA_TILE;
        for (int q = 0; q < nt; q++) {
            int s = e[q], c = pin[q] + s;
            pout[q] = c;
            double ready = 0;
            if (up_pref != NULL && s > 0) {
                /* the first upstream entry whose prefix covers our samples; monotone in j */
                int kk = g->k[q];
                while (up_pref[(kk + 1) * GA_TILE + q] < c)
                    kk++;
                g->k[q] = kk;
                ready = up_arr[kk * GA_TILE + q];
            }
            double f = (g->F[q] > ready ? g->F[q] : ready) + t[s];
            g->F[q] = s > 0 ? f : g->F[q];
            if (ct != NULL) {
                double a = (g->A[q] > g->F[q] ? g->A[q] : g->F[q]) + ct[s];
                g->A[q] = s > 0 ? a : g->A[q];
            }
            aout[q] = g->A[q];
        }
    }
    for (int q = 0; q < nt; q++)
        g->last[q] = g->F[q];
}

void plan_ga_eval_batch(const plan_ga_problem *p, plan_ga_batch *b, int n, double *times_s)
{
    int S = p->n_stages, K = p->max_entries, W = p->batch + 1;
    size_t N = (size_t)b->n_cap, KN = (size_t)K * N;
    int *prefs[2] = {b->pref, b->pref + (K + 1) * GA_TILE};
    double *arrs[2] = {b->arr, b->arr + K * GA_TILE};
    ga_tile g;
    for (int q0 = 0; q0 < n; q0 += GA_TILE) {
        int nt = n - q0 < GA_TILE ? n - q0 : GA_TILE;
        double *fend = b->fend; /* (S, GA_TILE) */
        int cur = 0;
        for (int i = 0; i < S; i++) {
            tile_stage(&g, nt, K, N, b->x + (size_t)i * KN + (size_t)q0, p->fwd_s + (size_t)i * W,
                       i < S - 1 ? p->comm_s + (size_t)i * W : NULL, NULL,
                       i > 0 ? prefs[!cur] : NULL, i > 0 ? arrs[!cur] : NULL, prefs[cur],
                       arrs[cur]);
            memcpy(fend + (size_t)i * GA_TILE, g.last, (size_t)nt * sizeof(double));
            cur = !cur;
        }
        for (int q = 0; q < nt; q++)
            b->end[q0 + q] = 0;
        for (int i = S - 1; i >= 0; i--) {
            tile_stage(&g, nt, K, N, b->y + (size_t)i * KN + (size_t)q0, p->bwd_s + (size_t)i * W,
                       i > 0 ? p->comm_s + (size_t)(i - 1) * W : NULL, fend + (size_t)i * GA_TILE,
                       i < S - 1 ? prefs[!cur] : NULL, i < S - 1 ? arrs[!cur] : NULL, prefs[cur],
                       arrs[cur]);
            for (int q = 0; q < nt; q++)
                b->end[q0 + q] = g.last[q] > b->end[q0 + q] ? g.last[q] : b->end[q0 + q];
            cur = !cur;
        }
    }
    /* memory penalty, as in the scalar evaluator */
    for (int q = 0; q < n; q++)
        b->pen[q] = 0;
    for (int i = 0; i < S; i++)
        for (int j = 0; j < K; j++) {
            const int *ex = b->x + ((size_t)i * K + j) * N, *ey = b->y + ((size_t)i * K + j) * N;
            int cap = p->max_size[i];
            for (int q = 0; q < n; q++)
                b->pen[q] += (ex[q] > cap ? ex[q] - cap : 0) + (ey[q] > cap ? ey[q] - cap : 0);
        }
    for (int q = 0; q < n; q++)
        times_s[q] =
            (b->end[q] + p->opt_s) * (b->pen[q] > 0 ? 2.0 + b->pen[q] / p->batch : 1.0);
}

/* ================================================================ search */

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: small, fast, and reproducible across platforms */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 2685821657736338717ull;
}

static int rng_int(uint64_t *s, int n)
{
    return n > 0 ? (int)(rng_next(s) % (uint64_t)n) : 0;
}

void plan_ga_equal_split(const plan_ga_problem *p, int m, int *x)
{
    int K = p->max_entries;
    if (m > K)
        m = K;
    if (m > p->batch)
        m = p->batch;
    for (int j = 0; j < K; j++)
        x[j] = j < m ? p->batch / m + (j < p->batch % m ? 1 : 0) : 0;
}

static int row_count(const int *r, int K)
{
    int n = 0;
    while (n < K && r[n] > 0)
        n++;
    return n;
}

/* Moves samples, splits or merges entries of one row; the sum stays the batch. */
static void mutate_row(int *r, int K, uint64_t *rng)
{
    int n = row_count(r, K);
    int op = rng_int(rng, 3);
    if (op == 0 && n >= 2) {
        int a = rng_int(rng, n), b = rng_int(rng, n);
        if (a != b && r[a] > 1) {
            int amt = 1 + rng_int(rng, r[a] - 1);
            r[a] -= amt;
            r[b] += amt;
        }
    } else if (op == 1 && n < K) {
        int a = rng_int(rng, n);
        if (r[a] >= 2) {
            int amt = 1 + rng_int(rng, r[a] - 1);
            memmove(r + a + 2, r + a + 1, (size_t)(n - a - 1) * sizeof(int));
            r[a + 1] = amt;
            r[a] -= amt;
        }
    } else if (n >= 2) {
        int a = rng_int(rng, n - 1);
        r[a] += r[a + 1];
        memmove(r + a + 1, r + a + 2, (size_t)(n - a - 2) * sizeof(int));
        r[n - 1] = 0;
    }
}

void plan_ga_result_free(plan_ga_result *r)
{
    if (r == NULL)
        return;
    free(r->x);
    free(r->y);
    r->x = r->y = NULL;
}

/* Local greedy: each stage cuts the batch at its most sample-efficient size under its cap. */
static double greedy(const plan_ga_problem *p, int *x, int *y)
{
    int S = p->n_stages, K = p->max_entries, W = p->batch + 1;
    for (int i = 0; i < S; i++) {
        int cap = p->max_size[i] < p->batch ? p->max_size[i] : p->batch;
        int lo = (p->batch + K - 1) / K; /* fewer than K entries */
        if (cap < lo)
            cap = lo;
        int best = cap;
        double best_rate = HUGE_VAL;
        for (int s = lo; s <= cap; s++) {
            double rate = (p->fwd_s[(size_t)i * W + s] + p->bwd_s[(size_t)i * W + s]) / s;
            if (rate < best_rate - 1e-15) {
                best_rate = rate;
                best = s;
            }
        }
        int *r = x + i * K, left = p->batch, j = 0;
        while (left > 0 && j < K) {
            r[j] = left < best ? left : best;
            left -= r[j++];
        }
        for (; j < K; j++)
            r[j] = 0;
        memcpy(y + i * K, r, (size_t)K * sizeof(int));
    }
    return plan_ga_eval_one(p, x, y);
}

/* Stage by stage, each stage picks the uniform entry count that minimises the iteration time
 * while the stages after it provisionally share its choice. */
static double uniform_stagewise(const plan_ga_problem *p, int *x, int *y)
{
    int S = p->n_stages, K = p->max_entries;
    int lim = K < p->batch ? K : p->batch;
    for (int i = 0; i < S; i++)
        plan_ga_equal_split(p, 1, x + i * K);
    double best = HUGE_VAL;
    for (int i = 0; i < S; i++) {
        int best_m = row_count(x + i * K, K); /* keep the current choice unless beaten */
        for (int m = 1; m <= lim; m++) {
            for (int k = i; k < S; k++)
                plan_ga_equal_split(p, m, x + k * K);
            memcpy(y, x, (size_t)S * K * sizeof(int));
            double t = plan_ga_eval_one(p, x, y);
            if (t < best) {
                best = t;
                best_m = m;
            }
        }
        for (int k = i; k < S; k++)
            plan_ga_equal_split(p, best_m, x + k * K);
    }
    memcpy(y, x, (size_t)S * K * sizeof(int));
    return plan_ga_eval_one(p, x, y);
}

sc_status plan_ga_run(const plan_ga_problem *p, const plan_ga_cfg *cfg, plan_ga_result *r,
                      sc_err *err)
{
    int S = p->n_stages, K = p->max_entries;
    int P = cfg && cfg->population > 0 ? cfg->population : 64;
    int G = cfg && cfg->generations > 0 ? cfg->generations : 120;
    uint64_t rng = cfg && cfg->seed ? cfg->seed : 1;
    size_t ind = (size_t)S * K; /* ints per chromosome */
    memset(r, 0, sizeof *r);
    if (K < 1 || K > GA_MAX_K || p->batch < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "umpipe: needs batch >= 1 and 1-%d entries per stage",
                       GA_MAX_K);
    int lim = K < p->batch ? K : p->batch;
    if (P < lim + 2)
        P = lim + 2; /* room for every equal split plus variety */
    sc_status rc = SC_OK;
    plan_ga_batch *batch = NULL;
    int *pop = malloc((size_t)P * 2 * ind * sizeof(int));
    int *next = malloc((size_t)P * 2 * ind * sizeof(int));
    double *fit = malloc((size_t)P * sizeof(double));
    r->x = malloc(ind * sizeof(int));
    r->y = malloc(ind * sizeof(int));
    if (!pop || !next || !fit || !r->x || !r->y) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "umpipe: out of memory");
        goto done;
    }
    SC_CHECK_GOTO(plan_ga_batch_new(&batch, p, P, err), done);
    /* baselines */
    r->greedy_s = greedy(p, r->x, r->y);
    r->uniform_s = uniform_stagewise(p, r->x, r->y);
    /* generation 0: every equal split, then mutated copies of them */
    r->best_equal_s = HUGE_VAL;
    for (int q = 0; q < P; q++) {
        int *ix = pop + (size_t)q * 2 * ind, *iy = ix + ind;
        int m = q < lim ? q + 1 : 1 + rng_int(&rng, lim);
        for (int i = 0; i < S; i++)
            plan_ga_equal_split(p, m, ix + i * K);
        memcpy(iy, ix, ind * sizeof(int));
        if (q >= lim)
            for (int i = 0; i < S; i++) {
                mutate_row(ix + i * K, K, &rng);
                mutate_row(iy + i * K, K, &rng);
            }
        plan_ga_batch_set(batch, q, ix, iy);
    }
    plan_ga_eval_batch(p, batch, P, fit);
    r->evaluated += P;
    for (int q = 0; q < lim; q++)
        if (fit[q] < r->best_equal_s) {
            r->best_equal_s = fit[q];
            r->best_equal_m = q + 1;
        }
    for (int g = 0; g < G; g++) {
        /* elitism: the best individual goes through unchanged */
        int best = 0;
        for (int q = 1; q < P; q++)
            if (fit[q] < fit[best])
                best = q;
        memcpy(next, pop + (size_t)best * 2 * ind, 2 * ind * sizeof(int));
        for (int q = 1; q < P; q++) {
            int pa = -1, pb = -1;
            for (int t = 0; t < 3; t++) {
                int c1 = rng_int(&rng, P), c2 = rng_int(&rng, P);
                if (pa < 0 || fit[c1] < fit[pa])
                    pa = c1;
                if (pb < 0 || fit[c2] < fit[pb])
                    pb = c2;
            }
            int *child = next + (size_t)q * 2 * ind;
            const int *A = pop + (size_t)pa * 2 * ind, *Bp = pop + (size_t)pb * 2 * ind;
            /* crossover swaps whole stage rows, independently for the two chromosomes */
            for (int c = 0; c < 2; c++)
                for (int i = 0; i < S; i++) {
                    const int *src = (rng_next(&rng) & 1) ? Bp : A;
                    memcpy(child + c * ind + (size_t)i * K, src + c * ind + (size_t)i * K,
                           (size_t)K * sizeof(int));
                }
            for (int c = 0; c < 2; c++)
                for (int i = 0; i < S; i++)
                    if (rng_int(&rng, 100) < 30)
                        mutate_row(child + c * ind + (size_t)i * K, K, &rng);
            plan_ga_batch_set(batch, q, child, child + ind);
        }
        plan_ga_batch_set(batch, 0, next, next + ind);
        int *tmp = pop;
        pop = next;
        next = tmp;
        plan_ga_eval_batch(p, batch, P, fit);
        r->evaluated += P;
    }
    int best = 0;
    for (int q = 1; q < P; q++)
        if (fit[q] < fit[best])
            best = q;
    memcpy(r->x, pop + (size_t)best * 2 * ind, ind * sizeof(int));
    memcpy(r->y, pop + (size_t)best * 2 * ind + ind, ind * sizeof(int));
    r->time_s = fit[best];
done:
    plan_ga_batch_destroy(&batch);
    free(pop), free(next), free(fit);
    if (rc != SC_OK)
        plan_ga_result_free(r);
    return rc;
}
