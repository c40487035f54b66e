/* The jobs' freezing policies (see freezing.h). */
#include "coordinator/freezing.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/store.h"

#define LOG "freezing"

struct coord_freezing {
    char job_id[COORD_ID_MAX];
    uint64_t interval;
    double percentile, max_change;
    int n_blocks;
    int frozen;
    uint64_t next_end;  /* the step that ends the interval under way */
    bool have_before;   /* g_before holds a whole interval */
    double *sum;        /* [n_blocks] gradient norms of the interval under way, summed */
    uint32_t *count;    /* [n_blocks] reports summed */
    double *g_before;   /* [n_blocks] mean norms of the interval before */
    coord_freezing *next;
};

static coord_freezing *job_of(const coord_freezing *all, const char *job_id)
{
    for (const coord_freezing *j = all; j != NULL; j = j->next)
        if (strcmp(j->job_id, job_id) == 0)
            return (coord_freezing *)j;
    return NULL;
}

static void job_free(coord_freezing *j)
{
    free(j->sum);
    free(j->count);
    free(j->g_before);
    free(j);
}

int coord_freezing_start(coord_freezing **all, const char *job_id, uint64_t interval,
                         double percentile, double max_change, int n_blocks, int frozen)
{
    coord_freezing *j = job_of(*all, job_id);
    if (j != NULL) {
        if (frozen > j->frozen && frozen <= j->n_blocks)
            j->frozen = frozen;
        return j->frozen;
    }
    j = calloc(1, sizeof *j);
    if (j == NULL || n_blocks < 1)
        goto fail;
    j->sum = calloc((size_t)n_blocks, sizeof *j->sum);
    j->count = calloc((size_t)n_blocks, sizeof *j->count);
    j->g_before = calloc((size_t)n_blocks, sizeof *j->g_before);
    if (j->sum == NULL || j->count == NULL || j->g_before == NULL)
        goto fail;
    sc_strlcpy(j->job_id, job_id, sizeof j->job_id);
    j->interval = interval > 0 ? interval : 1;
    j->percentile = percentile;
    j->max_change = max_change;
    j->n_blocks = n_blocks;
    j->frozen = frozen > 0 && frozen < n_blocks ? frozen : 0;
    j->next_end = 0; /* set by the first report */
    j->next = *all;
    *all = j;
    return j->frozen;
fail:
    if (j != NULL)
        job_free(j);
    return frozen > 0 ? frozen : 0;
}

void coord_freezing_observe(coord_freezing *all, const char *job_id, int first_block,
                            const double *sq_norms, size_t n, uint64_t step)
{
    coord_freezing *j = job_of(all, job_id);
    if (j == NULL || first_block < 0 || sq_norms == NULL)
        return;
    if (j->next_end == 0) /* the interval under way ends at the next multiple */
        j->next_end = (step / j->interval + 1) * j->interval;
    for (size_t i = 0; i < n && first_block + (int)i < j->n_blocks; i++) {
        double v = sq_norms[i];
        if (!(v >= 0) || !isfinite(v))
            continue; /* a diverged step says nothing about convergence */
        j->sum[first_block + (int)i] += sqrt(v);
        j->count[first_block + (int)i]++;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int coord_freezing_decide(const double *g_before, const double *g_now, int n, int frozen,
                          double percentile, double max_change, double *tau)
{
    *tau = 0;
    double *r = calloc((size_t)(n > 0 ? n : 1), sizeof *r);
    if (r == NULL)
        return frozen;
    int m = 0;
    for (int l = frozen; l < n; l++)
        if (g_before[l] > 0)
            r[m++] = fabs(g_before[l] - g_now[l]) / g_before[l];
    if (m < 2) { /* the one block left learning never freezes */
        free(r);
        return frozen;
    }
    qsort(r, (size_t)m, sizeof *r, cmp_double);
    double at = percentile / 100.0 * (m - 1);
    int lo = (int)floor(at);
    int hi = lo + 1 < m ? lo + 1 : lo;
    *tau = r[lo] + (at - lo) * (r[hi] - r[lo]);
    if (max_change > 0 && *tau > max_change)
        *tau = max_change;
    free(r);
    int end = frozen;
    for (int l = frozen; l < n; l++) {
        if (g_before[l] <= 0)
            continue; /* no parameters: it follows the prefix */
        if (fabs(g_before[l] - g_now[l]) / g_before[l] >= *tau)
            break;
        end = l + 1;
    }
    return end;
}

int coord_freezing_close(coord_freezing *all, const char *job_id, uint64_t step, char *why,
                         size_t size)
{
    coord_freezing *j = job_of(all, job_id);
    if (j == NULL)
        return 0;
    if (j->next_end == 0 || step < j->next_end)
        return j->frozen;
    double *g_now = calloc((size_t)j->n_blocks, sizeof *g_now);
    if (g_now == NULL)
        return j->frozen;
    for (int l = 0; l < j->n_blocks; l++)
        g_now[l] = j->count[l] > 0 ? j->sum[l] / j->count[l] : 0;
    int want = j->frozen;
    if (j->have_before) {
        double tau;
        want = coord_freezing_decide(j->g_before, g_now, j->n_blocks, j->frozen, j->percentile,
                                     j->max_change, &tau);
        char list[512] = "";
        for (int l = j->frozen; l < j->n_blocks; l++) {
            size_t used = strlen(list);
            if (j->g_before[l] > 0 && used + 16 < sizeof list)
                snprintf(list + used, sizeof list - used, " %d:%.3g", l,
                         fabs(j->g_before[l] - g_now[l]) / j->g_before[l]);
        }
        SC_LOG_DEBUG(LOG,
                     "job %s: gradient change per learning block over steps %llu-%llu:%s; tau %.3g",
                     job_id, (unsigned long long)(j->next_end - j->interval + 1),
                     (unsigned long long)j->next_end, list, tau);
        if (want > j->frozen && why != NULL) {
            /* the change of the last block to freeze, against the threshold */
            int l = want - 1;
            while (l > j->frozen && j->g_before[l] <= 0)
                l--;
            double rl = j->g_before[l] > 0 ? fabs(j->g_before[l] - g_now[l]) / j->g_before[l] : 0;
            snprintf(why, size,
                     "freezing blocks %d-%d: their gradient norms changed less than tau %.3g "
                     "(the %.0fth percentile of the learning blocks' change, at most %.3g) over "
                     "steps %llu-%llu (block %d: %.3g)",
                     j->frozen, want - 1, tau, j->percentile, j->max_change,
                     (unsigned long long)(j->next_end - j->interval + 1),
                     (unsigned long long)j->next_end, l, rl);
        }
    }
    memcpy(j->g_before, g_now, (size_t)j->n_blocks * sizeof *g_now);
    free(g_now);
    j->have_before = true;
    memset(j->sum, 0, (size_t)j->n_blocks * sizeof *j->sum);
    memset(j->count, 0, (size_t)j->n_blocks * sizeof *j->count);
    j->next_end = (step / j->interval + 1) * j->interval;
    return want;
}

int coord_freezing_frozen(const coord_freezing *all, const char *job_id)
{
    const coord_freezing *j = job_of(all, job_id);
    return j != NULL ? j->frozen : 0;
}

void coord_freezing_set(coord_freezing *all, const char *job_id, int frozen)
{
    coord_freezing *j = job_of(all, job_id);
    if (j != NULL && frozen > j->frozen && frozen < j->n_blocks)
        j->frozen = frozen;
}

void coord_freezing_drop(coord_freezing **all, const char *job_id)
{
    for (coord_freezing **p = all; *p != NULL; p = &(*p)->next) {
        if (strcmp((*p)->job_id, job_id) == 0) {
            coord_freezing *j = *p;
            *p = j->next;
            job_free(j);
            return;
        }
    }
}

void coord_freezing_free(coord_freezing **all)
{
    while (*all != NULL) {
        coord_freezing *j = *all;
        *all = j->next;
        job_free(j);
    }
}
