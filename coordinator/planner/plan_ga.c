/*
 * plan_ga: the UMPIPE recurrence (scalar and batched), the dual-chromosome genetic search and
 * the two baselines.
 *
 * The batched evaluator walks the population stage by stage and computes each distinct
 * partial state once (see below). Which upstream entry a downstream entry waits for is found
 * by a pointer that only moves forward (the prefix sums are monotone).
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

/* The population pass goes stage by stage over every individual at once. Individuals whose
 * forward rows x_0..x_i are equal have the same state after stage i (crossover swaps whole
 * rows and elitism copies individuals, so a population shares many of them): each distinct
 * state is computed once, found through a hash of (state before, row). The backward pass does
 * the same from the last stage down with (state after stage i+1, row y_i). */

struct plan_ga_batch {
    int n_cap, S, K, H;
    int *x, *y;  /* (S, n_cap, K): row of individual q at stage i */
    int *table;  /* (H) hash slots: group id + 1, 0 = empty */
    int *gid;    /* (2, n_cap): group of each individual, previous and current stage */
    int *fgid;   /* (S, n_cap): forward group of each individual per stage */
    int *rep;    /* (n_cap): an individual of each group of the current stage */
    int *parent; /* (n_cap): group of the previous stage, per current group */
    /* per group state, two stages at a time (previous, current) */
    double *arr;    /* (2, n_cap, K) arrival downstream of each entry */
    int *pref;      /* (2, n_cap, K+1) prefix sums of the entries */
    int *cnt;       /* (2, n_cap) entries */
    double *over;   /* (2, n_cap) samples above the memory caps so far */
    double *endmax; /* (2, n_cap) backward: latest end over the stages done */
    double *fend;   /* (S, n_cap) forward: last forward end, per forward group */
    double *fover;  /* (n_cap) forward over-cap samples of each last-stage forward group */
};

sc_status plan_ga_batch_new(plan_ga_batch **out, const plan_ga_problem *p, int n, sc_err *err)
{
    *out = NULL;
    if (p->max_entries > GA_MAX_K || p->max_entries < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "umpipe: max_entries must be 1-%d, got %d", GA_MAX_K,
                       p->max_entries);
    plan_ga_batch *b = calloc(1, sizeof *b);
    SC_ALLOC_CHECK(b, err);
    size_t N = (size_t)n, S = (size_t)p->n_stages, K = (size_t)p->max_entries;
    b->n_cap = n;
    b->S = p->n_stages;
    b->K = p->max_entries;
    b->H = 16;
    while (b->H < 2 * n)
        b->H *= 2;
    b->x = calloc(S * N * K, sizeof(int));
    b->y = calloc(S * N * K, sizeof(int));
    b->table = calloc((size_t)b->H, sizeof(int));
    b->gid = calloc(2 * N, sizeof(int));
    b->fgid = calloc(S * N, sizeof(int));
    b->rep = calloc(N, sizeof(int));
    b->parent = calloc(N, sizeof(int));
    b->arr = calloc(2 * N * K, sizeof(double));
    b->pref = calloc(2 * N * (K + 1), sizeof(int));
    b->cnt = calloc(2 * N, sizeof(int));
    b->over = calloc(2 * N, sizeof(double));
    b->endmax = calloc(2 * N, sizeof(double));
    b->fend = calloc(S * N, sizeof(double));
    b->fover = calloc(N, sizeof(double));
    if (!b->x || !b->y || !b->table || !b->gid || !b->fgid || !b->rep || !b->parent || !b->arr ||
        !b->pref || !b->cnt || !b->over || !b->endmax || !b->fend || !b->fover) {
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
    free(b->x), free(b->y), free(b->table), free(b->gid), free(b->fgid), free(b->rep);
    free(b->parent), free(b->arr), free(b->pref), free(b->cnt), free(b->over), free(b->endmax);
    free(b->fend), free(b->fover);
    free(b);
    *bp = NULL;
}

void plan_ga_batch_set(plan_ga_batch *b, int i, const int *x, const int *y)
{
    size_t N = (size_t)b->n_cap, K = (size_t)b->K;
    for (int s = 0; s < b->S; s++) {
        memcpy(b->x + ((size_t)s * N + (size_t)i) * K, x + (size_t)s * K, K * sizeof(int));
        memcpy(b->y + ((size_t)s * N + (size_t)i) * K, y + (size_t)s * K, K * sizeof(int));
    }
}

static uint64_t row_hash(int parent, const int *row, int K)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(uint32_t)parent;
    h *= 1099511628211ull;
    for (int j = 0; j < K && row[j] > 0; j++) {
        h ^= (uint64_t)(uint32_t)row[j];
        h *= 1099511628211ull;
    }
    return h;
}

/* Groups the individuals of one stage by (group before, row): fills gid_cur, rep, parent and
 * returns the number of groups. `rows` is the stage's (n_cap, K) rows. */
static int group_stage(plan_ga_batch *b, int n, const int *rows, const int *gid_prev, int *gid_cur,
                       int distinct)
{
    size_t K = (size_t)b->K;
    int ng = 0;
    if (distinct) {
        /* nearly every state was distinct a stage ago: hashing would not pay */
        for (int q = 0; q < n; q++) {
            b->rep[q] = q;
            b->parent[q] = gid_prev ? gid_prev[q] : 0;
            gid_cur[q] = q;
        }
        return n;
    }
    memset(b->table, 0, (size_t)b->H * sizeof(int));
    for (int q = 0; q < n; q++) {
        int par = gid_prev ? gid_prev[q] : 0;
        const int *row = rows + (size_t)q * K;
        uint64_t h = row_hash(par, row, b->K);
        int slot = (int)(h & (uint64_t)(b->H - 1));
        for (;;) {
            int g = b->table[slot] - 1;
            if (g < 0) {
                b->table[slot] = ng + 1;
                b->rep[ng] = q;
                b->parent[ng] = par;
                gid_cur[q] = ng++;
                break;
            }
            if (b->parent[g] == par &&
                memcmp(rows + (size_t)b->rep[g] * K, row, K * sizeof(int)) == 0) {
                gid_cur[q] = g;
                break;
            }
            slot = (slot + 1) & (b->H - 1);
        }
    }
    return ng;
}

/* One stage of one group: entries `row`, times `t`, transfers `ct` (NULL: no link after),
 * earliest start `start`, upstream prefix/arrivals/count (NULL: none). Writes this stage's
 * prefix, arrivals and count, and returns the last end. */
static double stage_step(const int *row, int K, const double *t, const double *ct, double start,
                         const int *up_pref, const double *up_arr, int up_n, int *pref, double *arr,
                         int *n_out)
{
    double F = start, A = 0;
    int k = 0, cum = 0, j = 0;
    pref[0] = 0;
    for (; j < K && row[j] > 0; j++) {
        cum += row[j];
        pref[j + 1] = cum;
        double ready = 0;
        if (up_pref != NULL) {
            while (k < up_n - 1 && up_pref[k + 1] < cum)
                k++;
            ready = up_arr[k];
        }
        F = (F > ready ? F : ready) + t[row[j]];
        if (ct != NULL)
            A = (A > F ? A : F) + ct[row[j]];
        arr[j] = A;
    }
    *n_out = j;
    return F;
}

static double row_over(const int *row, int K, int cap)
{
    double over = 0;
    for (int j = 0; j < K && row[j] > 0; j++)
        over += row[j] > cap ? row[j] - cap : 0;
    return over;
}

void plan_ga_eval_batch(const plan_ga_problem *p, plan_ga_batch *b, int n, double *times_s)
{
    int S = p->n_stages, K = p->max_entries, W = p->batch + 1;
    size_t N = (size_t)b->n_cap, Kz = (size_t)K, K1 = Kz + 1;
    int cur = 0, ng_prev = 0;
    /* forward, stage 0 up */
    for (int i = 0; i < S; i++) {
        int *gcur = b->fgid + (size_t)i * N, *gprev = i > 0 ? b->fgid + (size_t)(i - 1) * N : NULL;
        const int *rows = b->x + (size_t)i * N * Kz;
        int ng = group_stage(b, n, rows, gprev, gcur, 10 * ng_prev > 9 * n);
        ng_prev = ng;
        const double *t = p->fwd_s + (size_t)i * W;
        const double *ct = i < S - 1 ? p->comm_s + (size_t)i * W : NULL;
        for (int g = 0; g < ng; g++) {
            int par = b->parent[g];
            const int *row = rows + (size_t)b->rep[g] * Kz;
            size_t pc = (size_t)cur * N + (size_t)g, pp = (size_t)!cur * N + (size_t)par;
            b->fend[(size_t)i * N + (size_t)g] = stage_step(
                row, K, t, ct, 0, i > 0 ? b->pref + pp * K1 : NULL, i > 0 ? b->arr + pp * Kz : NULL,
                i > 0 ? b->cnt[pp] : 0, b->pref + pc * K1, b->arr + pc * Kz, &b->cnt[pc]);
            b->over[pc] = (i > 0 ? b->over[pp] : 0) + row_over(row, K, p->max_size[i]);
        }
        if (i == S - 1)
            for (int g = 0; g < ng; g++)
                b->fover[g] = b->over[(size_t)cur * N + (size_t)g];
        cur = !cur;
    }
    /* backward, last stage down; the state after stage i+1 identifies every x row too */
    const int *glast = b->fgid + (size_t)(S - 1) * N;
    int *gprev = b->gid, *gcur = b->gid + N;
    for (int i = S - 1; i >= 0; i--) {
        const int *rows = b->y + (size_t)i * N * Kz;
        int ng = group_stage(b, n, rows, i == S - 1 ? glast : gprev, gcur,
                             i < S - 1 && 10 * ng_prev > 9 * n);
        ng_prev = ng;
        const double *t = p->bwd_s + (size_t)i * W;
        const double *ct = i > 0 ? p->comm_s + (size_t)(i - 1) * W : NULL;
        for (int g = 0; g < ng; g++) {
            int par = b->parent[g], q = b->rep[g];
            const int *row = rows + (size_t)q * Kz;
            size_t pc = (size_t)cur * N + (size_t)g, pp = (size_t)!cur * N + (size_t)par;
            double start = b->fend[(size_t)i * N + (size_t)b->fgid[(size_t)i * N + (size_t)q]];
            int last = i == S - 1;
            double end = stage_step(row, K, t, ct, start, last ? NULL : b->pref + pp * K1,
                                    last ? NULL : b->arr + pp * Kz, last ? 0 : b->cnt[pp],
                                    b->pref + pc * K1, b->arr + pc * Kz, &b->cnt[pc]);
            double before = last ? 0 : b->endmax[pp];
            b->endmax[pc] = end > before ? end : before;
            b->over[pc] = (last ? b->fover[par] : b->over[pp]) + row_over(row, K, p->max_size[i]);
        }
        int *tmp = gprev;
        gprev = gcur;
        gcur = tmp;
        cur = !cur;
    }
    for (int q = 0; q < n; q++) {
        size_t at = (size_t)!cur * N + (size_t)gprev[q];
        double over = b->over[at];
        times_s[q] = (b->endmax[at] + p->opt_s) * (over > 0 ? 2.0 + over / p->batch : 1.0);
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

/* Evaluates the population `pop` (P individuals of 2 * ind ints) already set into `batch`. */
static void evaluate(const plan_ga_problem *p, const plan_ga_cfg *cfg, plan_ga_batch *batch,
                     const int *pop, size_t ind, int P, double *fit, plan_ga_result *r)
{
    double t0 = sc_clock_now_s();
    if (cfg && cfg->one_by_one) {
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
    evaluate(p, cfg, batch, pop, ind, P, fit, r);
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
        evaluate(p, cfg, batch, pop, ind, P, fit, r);
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
