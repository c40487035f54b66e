/*
 * plan_ga: the dual-chromosome genetic search (plan_ga_run) and its two baselines.
 *
 * Generation 0 holds every equal split and mutated copies of them; each generation keeps the
 * best individual (elitism) and breeds the rest by tournament selection, crossover of whole
 * stage rows and mutation that moves, splits or merges entries. Does not compute times
 * itself: individuals are evaluated by the batched pass (plan_ga_batch.c) or one by one
 * (plan_ga_eval.c). Also here: the row functions the planner uses on its results
 * (plan_ga_equal_split, plan_ga_gather_size).
 * Invariant: every row of every individual sums to the batch, and the population lives in
 * the batches the evaluator reads, so children are bred where they are evaluated.
 */
#include "coordinator/planner/plan_ga.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "coordinator/planner/plan_ga_internal.h"

/* relative margin under which the search's result counts as tying the best equal split */
#define PLAN_GA_TIE 1e-9

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

int plan_ga_gather_size(const int *x, const int *y, int K)
{
    int gather = 0;
    /* fa: the first sample of forward entry fj; ba: the first sample of backward entry j */
    for (int j = 0, fa = 0, fj = 0, ba = 0; j < K && y[j] > 0; j++) {
        while (fj < K && x[fj] > 0 && fa < ba)
            fa += x[fj++];
        int same = fa == ba && fj < K && x[fj] == y[j];
        if (!same && y[j] > gather)
            gather = y[j];
        ba += y[j];
    }
    return gather;
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
    for (int q = 0; q < lim; q++) /* the fewest entries among splits that tie */
        if (fit[q] < r->best_equal_s * (1 - PLAN_GA_TIE)) {
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
    /* Unequal sizes only when they pay: a result no faster than the best equal split beyond
     * rounding (PLAN_GA_TIE, relative; linear times make many splits tie) is that split, which
     * the runtime runs as plain micro-batches. */
    if (r->best_equal_m > 0 && !(r->time_s < r->best_equal_s * (1 - PLAN_GA_TIE))) {
        for (int i = 0; i < S; i++)
            plan_ga_equal_split(p, r->best_equal_m, r->x + (size_t)i * K);
        memcpy(r->y, r->x, ind * sizeof(int));
        r->time_s = r->best_equal_s;
    }
done:
    plan_ga_batch_destroy(&batch);
    plan_ga_batch_destroy(&nbatch);
    free(fit);
    if (rc != SC_OK)
        plan_ga_result_free(r);
    return rc;
}
