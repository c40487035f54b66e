/*
 * plan_microbatch: the closed-form micro-batch count and its candidate neighbourhood.
 *
 * Candidates are divisors of the batch so every micro-batch has the same size; the sweep over
 * them (by simulation, memory-capped) happens in the driver, which owns the partition.
 */
#include "coordinator/planner/plan_microbatch.h"

#include <math.h>
#include <stdlib.h>

void plan_microbatch_fit(const plan_profile *p, int first, int last, int batch, double *alpha,
                         double *beta)
{
    double m1 = 1, m2 = batch > 1 ? batch : 2;
    const plan_block *b0 = &p->blocks[first];
    if (b0->n_sizes >= 2) {
        m1 = b0->sizes[0].size;
        m2 = b0->sizes[b0->n_sizes - 1].size;
    }
    double t1 = 0, t2 = 0;
    for (int l = first; l <= last; l++) {
        double f, b;
        plan_profile_block_time(p, l, m1, batch, &f, &b);
        t1 += f + b;
        plan_profile_block_time(p, l, m2, batch, &f, &b);
        t2 += f + b;
    }
    *beta = (t2 - t1) / (m2 - m1);
    *alpha = t1 - *beta * m1;
    if (*alpha < 1e-15)
        *alpha = 0;
    if (*beta < 0)
        *beta = 0;
}

double plan_microbatch_closed_form(double alpha, double beta, int batch, int stages)
{
    if (stages <= 1)
        return 1;
    /* past the count whose fill-drain bubble (p-1)/(m+p-1) is 1%, more micro-batches gain
     * less than 1% and cost the simulator (and the runtime) time in proportion: with no or
     * a tiny fixed cost per micro-batch, m* stops there */
    double most = plan_microbatch_most(stages);
    double m = alpha > 0 ? sqrt((stages - 1) * beta * batch / alpha) : most;
    if (m > most)
        m = most;
    if (m < 1)
        m = 1;
    if (m > batch)
        m = batch;
    return m;
}

int plan_microbatch_most(int stages)
{
    return stages > 1 ? PLAN_MB_BUBBLE_COUNT * (stages - 1) : 1;
}

int plan_microbatch_smaller(int batch, int m)
{
    for (int d = 2 * m; d < batch; d++)
        if (batch % d == 0)
            return d;
    return batch;
}

static double dist(int m, double m_star)
{
    return fabs(log((double)m) - log(m_star));
}

int plan_microbatch_candidates(int batch, double m_star, int min_count, int max_count, int *out)
{
    int n = 0, lo = min_count <= batch ? min_count : 1;
    int hi = max_count > min_count ? max_count : min_count;
    int *all = malloc(sizeof(int) * 4096);
    if (all == NULL)
        return 0;
    int na = 0;
    for (int m = 1; m <= batch && na < 4096; m++)
        if (batch % m == 0 && m >= lo && m <= hi)
            all[na++] = m;
    if (na == 0)
        all[na++] = batch;
    /* keep the nearest ones to m* */
    while (n < PLAN_MB_MAX_CANDIDATES && n < na) {
        int best = -1;
        for (int i = 0; i < na; i++)
            if (all[i] > 0 && (best < 0 || dist(all[i], m_star) < dist(all[best], m_star)))
                best = i;
        out[n++] = all[best];
        all[best] = 0;
    }
    free(all);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}
