/*
 * plan_ga: the UMPIPE recurrence (scalar and batched), the dual-chromosome genetic search and
 * the two baselines.
 *
 * The scalar evaluator is the specification: per stage, a pointer that only moves forward finds
 * the upstream entry each entry waits for. The batched evaluator computes the same numbers with
 * the same floating-point operations in the same order per individual (so its times are
 * bit-identical), rearranged so that nothing branches on the data and independent individuals
 * run side by side (see "batched recurrence").
 */
#include "coordinator/planner/plan_ga.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"

#define GA_MAX_K 64

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

/* The batch holds the population itself, one individual after another (x then y, as the
 * search keeps them), and evaluates it GA_LANES individuals at a time. For each block of lanes
 * and each stage:
 *   1. per lane: the entry count, the prefix sums (int16, so that eight fit one SSE register)
 *      and the samples above the memory cap;
 *   2. per lane: which upstream entry each entry waits for, as a count of the upstream entries
 *      that end before it. That is a small comparison matrix, branch-free and vectorised over
 *      the entries; the scalar evaluator's forward-moving pointer mispredicts about once an
 *      entry on mixed rows, and that was most of its time;
 *   3. across the lanes, in step: F = max(F, ready) + f(x), A = max(A, F) + c(x) per entry.
 *      The lanes are independent chains, so the latency of one max-then-add chain is hidden;
 *      lanes with fewer entries than the block's longest row are masked (their state is kept).
 * Every operation is the scalar evaluator's, in the same order per individual, so the times
 * are bit-identical to plan_ga_eval_one. */

#define GA_LANES 4
/* int16 prefix sums: an individual whose rows sum past this goes to the scalar evaluator */
#define GA_CUM_MAX 32767

struct plan_ga_batch {
    int n_cap, S, K, KP;
    int *ind;        /* (n_cap, 2, S, K): x then y of each individual */
    int16_t *cum[2]; /* (LANES, KP): prefix sums of the stage upstream / this stage */
    int16_t *kst;    /* (LANES, KP): upstream entry each entry waits for */
    int *cnt[2];     /* (LANES): entries per lane, upstream / this stage */
    double *arr[2];  /* (K, LANES): arrival downstream of each entry, upstream / here */
    double *fend;    /* (S, LANES): last forward end per stage */
};

sc_status plan_ga_batch_new(plan_ga_batch **out, const plan_ga_problem *p, int n, sc_err *err)
{
    *out = NULL;
    if (p->max_entries > GA_MAX_K || p->max_entries < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "umpipe: max_entries must be 1-%d, got %d", GA_MAX_K,
                       p->max_entries);
    if (n < 1 || p->n_stages < 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "umpipe: needs a population >= 1 and stages >= 1, got %d and %d", n,
                       p->n_stages);
    plan_ga_batch *b = calloc(1, sizeof *b);
    SC_ALLOC_CHECK(b, err);
    b->n_cap = n;
    b->S = p->n_stages;
    b->K = p->max_entries;
    b->KP = (b->K + 15) & ~15;
    size_t S = (size_t)b->S, K = (size_t)b->K, KP = (size_t)b->KP, V = GA_LANES;
    b->ind = calloc((size_t)n * 2 * S * K, sizeof(int));
    b->kst = calloc(V * KP, sizeof(int16_t));
    b->fend = calloc(S * V, sizeof(double));
    int ok = b->ind && b->kst && b->fend;
    for (int c = 0; c < 2; c++) {
        b->cum[c] = calloc(V * KP, sizeof(int16_t));
        b->cnt[c] = calloc(V, sizeof(int));
        b->arr[c] = calloc(K * V, sizeof(double));
        ok = ok && b->cum[c] && b->cnt[c] && b->arr[c];
    }
    if (!ok) {
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
    free(b->ind), free(b->kst), free(b->fend);
    for (int c = 0; c < 2; c++)
        free(b->cum[c]), free(b->cnt[c]), free(b->arr[c]);
    free(b);
    *bp = NULL;
}

int *plan_ga_batch_individual(plan_ga_batch *b, int i)
{
    return b->ind + (size_t)i * 2 * (size_t)b->S * (size_t)b->K;
}

void plan_ga_batch_set(plan_ga_batch *b, int i, const int *x, const int *y)
{
    size_t row = (size_t)b->S * (size_t)b->K;
    int *d = plan_ga_batch_individual(b, i);
    memcpy(d, x, row * sizeof(int));
    memcpy(d + row, y, row * sizeof(int));
}

/* Step 1 for one lane: entry count, prefix sums (clamped; *wide is set when a sum does not
 * fit), samples over the cap. */
static int lane_prefix(const int *restrict r, int K, int cap, int16_t *restrict cv, int64_t *over,
                       int *wide)
{
    int64_t c = 0, ov = 0;
    int n = 0;
    for (; n < K && r[n] > 0; n++) {
        c += r[n];
        cv[n] = (int16_t)(c < GA_CUM_MAX ? c : GA_CUM_MAX);
        ov += r[n] > cap ? (int64_t)r[n] - cap : 0;
    }
    *over += ov;
    *wide |= c >= GA_CUM_MAX;
    return n;
}

/* Eight int16 counters in one SSE register (a GCC vector type: plain SSE2 code, and plain
 * scalar code on targets without vectors). */
typedef int16_t ga_v8 __attribute__((vector_size(16)));

static void lane_waits(const int16_t *restrict cv, int n, const int16_t *restrict uv, int nu,
                       int16_t *restrict kv)
{
    /* sixteen entries at a time, their counters kept in registers across the upstream ends */
    for (int j0 = 0; j0 < n; j0 += 16) {
        ga_v8 c0, c1, a0 = {0}, a1 = {0};
        memcpy(&c0, cv + j0, sizeof c0);
        memcpy(&c1, cv + j0 + 8, sizeof c1);
        for (int k = 0; k < nu - 1; k++) {
            ga_v8 u = (ga_v8){0} + uv[k];
            a0 += (u < c0); /* true is -1 */
            a1 += (u < c1);
        }
        a0 = -a0;
        a1 = -a1;
        memcpy(kv + j0, &a0, sizeof a0);
        memcpy(kv + j0 + 8, &a1, sizeof a1);
    }
}

/* One stage of a block: rows[v] is lane v's row, t/ct the stage's time and transfer tables,
 * start the lanes' earliest start (0 forward, the forward end backward). Reads the upstream
 * state in b->*[up], writes b->*[!up]. */
static void block_stage(plan_ga_batch *b, const int *const *rows, const double *restrict t,
                        const double *restrict ct, int cap, const double *restrict start, int up,
                        double *restrict last, int64_t *restrict over, int *restrict wide)
{
    enum { V = GA_LANES };
    int K = b->K, KP = b->KP, most = 0;
    int16_t *cum = b->cum[!up];
    const int16_t *ucum = b->cum[up];
    int *cnt = b->cnt[!up];
    const int *ucnt = b->cnt[up];
    for (int v = 0; v < V; v++) {
        cnt[v] = lane_prefix(rows[v], K, cap, cum + v * KP, &over[v], &wide[v]);
        lane_waits(cum + v * KP, cnt[v], ucum + v * KP, ucnt[v], b->kst + v * KP);
        most = cnt[v] > most ? cnt[v] : most;
    }
    const double *restrict uarr = b->arr[up];
    double *restrict arr = b->arr[!up];
    const int16_t *restrict kst = b->kst;
    double F[V], A[V];
    for (int v = 0; v < V; v++) {
        F[v] = start[v];
        A[v] = 0;
    }
    /* the lanes are independent: unrolled over them, their chains overlap in the core */
    for (int j = 0; j < most; j++) {
        for (int v = 0; v < V; v++) {
            int live = j < cnt[v];
            int x = live ? rows[v][j] : 0;
            double r = uarr[kst[v * KP + j] * V + v];
            double f = (F[v] > r ? F[v] : r) + t[x];
            double a = (A[v] > f ? A[v] : f) + ct[x];
            F[v] = live ? f : F[v];
            A[v] = live ? a : A[v];
            arr[j * V + v] = A[v];
        }
    }
    for (int v = 0; v < V; v++)
        last[v] = F[v];
}

void plan_ga_eval_batch(const plan_ga_problem *p, plan_ga_batch *b, int n, double *times_s)
{
    enum { V = GA_LANES };
    int S = p->n_stages, K = p->max_entries, W = p->batch + 1;
    size_t row = (size_t)S * (size_t)K;
    static const double zero[V];
    for (int q0 = 0; q0 < n; q0 += V) {
        const int *base[V];
        for (int v = 0; v < V; v++) /* a short last block repeats its first individual */
            base[v] = plan_ga_batch_individual(b, q0 + v < n ? q0 + v : q0);
        const int *rows[V];
        int64_t over[V] = {0};
        int wide[V] = {0}, up = 0;
        double endmax[V] = {0}, last[V];
        for (int v = 0; v < V; v++) { /* before stage 0: nothing to wait for */
            b->cnt[up][v] = 0;
            b->arr[up][v] = 0;
        }
        for (int i = 0; i < S; i++) {
            for (int v = 0; v < V; v++)
                rows[v] = base[v] + (size_t)i * K;
            block_stage(b, rows, p->fwd_s + (size_t)i * W, p->comm_s + (size_t)i * W,
                        p->max_size[i], zero, up, b->fend + (size_t)i * V, over, wide);
            up = !up;
        }
        for (int v = 0; v < V; v++) {
            b->cnt[up][v] = 0;
            b->arr[up][v] = 0;
        }
        for (int i = S - 1; i >= 0; i--) {
            for (int v = 0; v < V; v++)
                rows[v] = base[v] + row + (size_t)i * K;
            /* stage 0 sends nothing back: its transfer table is never read */
            block_stage(b, rows, p->bwd_s + (size_t)i * W,
                        p->comm_s + (size_t)(i > 0 ? i - 1 : 0) * W, p->max_size[i],
                        b->fend + (size_t)i * V, up, last, over, wide);
            for (int v = 0; v < V; v++)
                endmax[v] = last[v] > endmax[v] ? last[v] : endmax[v];
            up = !up;
        }
        for (int v = 0; v < V && q0 + v < n; v++)
            times_s[q0 + v] = wide[v] ? plan_ga_eval_one(p, base[v], base[v] + row)
                                      : (endmax[v] + p->opt_s) *
                                            (over[v] > 0 ? 2.0 + (double)over[v] / p->batch : 1.0);
    }
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

/* Evaluates the P individuals stored in `batch` (2 * ind ints each, from `pop`), with the
 * batched pass or one by one: both read the same storage, so the two are timed alike. */
static void evaluate(const plan_ga_problem *p, const plan_ga_cfg *cfg, plan_ga_batch *batch,
                     size_t ind, int P, double *fit, plan_ga_result *r)
{
    double t0 = sc_clock_now_s();
    if (cfg && cfg->one_by_one) {
        const int *pop = plan_ga_batch_individual(batch, 0);
        for (int q = 0; q < P; q++)
            fit[q] =
                plan_ga_eval_one(p, pop + (size_t)q * 2 * ind, pop + (size_t)q * 2 * ind + ind);
    } else {
        plan_ga_eval_batch(p, batch, P, fit);
    }
    r->eval_s += sc_clock_now_s() - t0;
    r->evaluated += P;
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
    /* the population lives in the batches (this generation's and the next one's), so the
     * children are bred where the evaluator reads them */
    plan_ga_batch *batch = NULL, *nbatch = NULL;
    double *fit = malloc((size_t)P * sizeof(double));
    r->x = malloc(ind * sizeof(int));
    r->y = malloc(ind * sizeof(int));
    if (!fit || !r->x || !r->y) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "umpipe: out of memory");
        goto done;
    }
    SC_CHECK_GOTO(plan_ga_batch_new(&batch, p, P, err), done);
    SC_CHECK_GOTO(plan_ga_batch_new(&nbatch, p, P, err), done);
    int *pop = plan_ga_batch_individual(batch, 0), *next = plan_ga_batch_individual(nbatch, 0);
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
    }
    evaluate(p, cfg, batch, ind, P, fit, r);
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
        }
        int *tmp = pop;
        pop = next;
        next = tmp;
        plan_ga_batch *btmp = batch;
        batch = nbatch;
        nbatch = btmp;
        evaluate(p, cfg, batch, ind, P, fit, r);
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
    plan_ga_batch_destroy(&nbatch);
    free(fit);
    if (rc != SC_OK)
        plan_ga_result_free(r);
    return rc;
}
