/*
 * plan_ga_eval: plan_ga_eval_one, the UMPIPE fill-drain recurrence for one individual: the
 * specification the batched evaluator (plan_ga_batch.c) is held to.
 *
 * Per stage, a pointer that only moves forward finds the upstream entry each entry waits for;
 * forward runs stage by stage from the first, backward from the last, each stage's backward
 * starting after its own last forward. Does not search, and does not evaluate many
 * individuals at once (plan_ga_batch.c does, with the same floating-point operations in the
 * same order, so that its times are bit-identical to these).
 * Invariant: the time of an individual whose entries fit their stages' max_size is the
 * recurrence's exactly; one with entries over it is multiplied by 2 + (samples over) / batch.
 */
#include "coordinator/planner/plan_ga.h"

#include <math.h>
#include <stdlib.h>

#include "coordinator/planner/plan_ga_internal.h"

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
