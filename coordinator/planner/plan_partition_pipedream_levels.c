/*
 * plan_partition_pipedream_levels: how the two levels of PipeDream's hierarchical DP see each
 * other: which replica counts the runtime's rule forbids, which machine count a solved level
 * answers with, and the first level's answers kept per class of the servers a second-level
 * stage may span.
 *
 * Does not solve a level: plan_partition_pipedream.c does for chains,
 * plan_partition_pipedream_dag.c for antichain states. Invariant: multipliers of one class
 * allow the first level exactly the same replica counts, so one solve serves them all.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_partition_pipedream_internal.h"

int plan_pd_restricts(const pd_rule *u, int M)
{
    for (int r = 1; r <= M; r++)
        if (!pd_allowed(u, r))
            return 1;
    return 0;
}

int plan_pd_machines(const pd_level *lv, int restricted, int i, int j)
{
    int best = lv->M - 1;
    if (!restricted)
        return best;
    for (int m = lv->M - 2; m >= 0; m--)
        if (pd_at(lv, i, j, m)->t < pd_at(lv, i, j, best)->t)
            best = m;
    return best;
}

void plan_pd_servers_free(pd_servers *sv)
{
    free(sv->cls), free(sv->rep), free(sv->t), free(sv->m);
    memset(sv, 0, sizeof *sv);
}

int plan_pd_servers_init(pd_servers *sv, const pd_rule *rule, int n1, int M2, int rows, int n)
{
    memset(sv, 0, sizeof *sv);
    sv->rows = rows;
    sv->n = n;
    sv->cls = malloc((size_t)(M2 + 1) * sizeof *sv->cls);
    sv->rep = malloc((size_t)(M2 + 1) * sizeof *sv->rep);
    if (sv->cls == NULL || sv->rep == NULL)
        return -1;
    sv->cls[0] = -1;
    for (int g = 1; g <= M2; g++) {
        pd_rule u = *rule, v = *rule;
        u.mult = g;
        sv->cls[g] = -1;
        if (!pd_allowed(&u, 1))
            continue;
        for (int c = 0; c < sv->n_classes && sv->cls[g] < 0; c++) {
            int same = 1;
            v.mult = sv->rep[c];
            for (int r = 1; r <= n1 && same; r++)
                same = pd_allowed(&u, r) == pd_allowed(&v, r);
            if (same)
                sv->cls[g] = c;
        }
        if (sv->cls[g] < 0) {
            sv->rep[sv->n_classes] = g;
            sv->cls[g] = sv->n_classes++;
        }
    }
    size_t cells = (size_t)(sv->n_classes > 0 ? sv->n_classes : 1) * (size_t)rows * (size_t)n;
    sv->t = malloc(cells * sizeof *sv->t);
    sv->m = malloc(cells * sizeof *sv->m);
    return sv->t != NULL && sv->m != NULL ? 0 : -1;
}

void plan_pd_servers_take(pd_servers *sv, int c, const pd_level *lv, int restricted)
{
    size_t at = (size_t)c * (size_t)sv->rows * (size_t)sv->n;
    for (int i = 0; i < sv->rows; i++)
        for (int j = 0; j < sv->n; j++, at++) {
            int m = plan_pd_machines(lv, restricted, i, j);
            sv->t[at] = pd_at(lv, i, j, m)->t;
            sv->m[at] = (int16_t)m;
            sv->fallback |= m != lv->M - 1 && isfinite(sv->t[at]);
        }
}

int plan_pd_servers_m(const pd_servers *sv, int mp, int i, int j)
{
    int c = sv->cls[mp];
    return sv->m[((size_t)c * (size_t)sv->rows + (size_t)i) * (size_t)sv->n + (size_t)j];
}
