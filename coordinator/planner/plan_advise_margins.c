/*
 * plan_advise_margins: the plans one device fewer or one class more (plan_advise_margins.h).
 *
 * Does not search (plan_advise_search.c does). Invariant: n_have + classes beyond them plans at
 * most, each of one set.
 */
#include "coordinator/planner/plan_advise_margins.h"

#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"

static int same_class(const plan_cluster *c, int a, int b)
{
    return c->devices[a].server == c->devices[b].server && c->devices[a].type == c->devices[b].type;
}

static sc_status copy_point(const plan_advise_point *from, plan_advise_point *to, sc_err *err)
{
    *to = *from;
    to->devices = malloc((size_t)(from->n_devices > 0 ? from->n_devices : 1) * sizeof *to->devices);
    SC_ALLOC_CHECK(to->devices, err);
    memcpy(to->devices, from->devices, (size_t)from->n_devices * sizeof *to->devices);
    return SC_OK;
}

sc_status plan_advise_margins_run(const plan_advise_cfg *cfg, int n_have, plan_advise_margins *out,
                                  sc_err *err)
{
    memset(out, 0, sizeof *out);
    const plan_cluster *cat = cfg->catalog;
    int n = cat->n_devices;
    if (n_have < 1 || n_have > n)
        return SC_ERRF(err, SC_ERR_INVALID, "%d devices held of a catalogue of %d", n_have, n);
    int *devs = malloc((size_t)n * sizeof *devs);
    out->drop = calloc((size_t)n_have, sizeof *out->drop);
    out->add = calloc((size_t)(n - n_have + 1), sizeof *out->add);
    if (devs == NULL || out->drop == NULL || out->add == NULL) {
        free(devs);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for %d devices", n);
    }
    sc_status rc = SC_OK;
    for (int i = 0; n_have > 1 && i < n_have && rc == SC_OK; i++) {
        plan_advise_margin *m = &out->drop[i];
        m->device = i;
        m->count = 1;
        int twin = -1;
        for (int j = 0; j < i && twin < 0; j++)
            if (same_class(cat, i, j))
                twin = j;
        if (twin >= 0) {
            rc = copy_point(&out->drop[twin].pt, &m->pt, err);
        } else {
            int k = 0;
            for (int d = 0; d < n_have; d++)
                if (d != i)
                    devs[k++] = d;
            rc = plan_advise_eval(cfg, devs, k, &m->pt, NULL, NULL, err);
        }
        if (rc == SC_OK)
            out->n_drop++;
    }
    for (int d = n_have; d < n && rc == SC_OK; d++) {
        int seen = 0;
        for (int e = n_have; e < d && !seen; e++)
            seen = same_class(cat, d, e);
        if (seen)
            continue;
        plan_advise_margin *m = &out->add[out->n_add];
        m->device = d;
        int k = 0;
        for (int h = 0; h < n_have; h++)
            devs[k++] = h;
        for (int e = d; e < n; e++)
            if (same_class(cat, d, e)) {
                devs[k++] = e;
                m->count++;
            }
        rc = plan_advise_eval(cfg, devs, k, &m->pt, NULL, NULL, err);
        if (rc == SC_OK)
            out->n_add++;
    }
    free(devs);
    return rc;
}

void plan_advise_margins_free(plan_advise_margins *m)
{
    if (m == NULL)
        return;
    for (int i = 0; i < m->n_drop; i++)
        plan_advise_point_free(&m->drop[i].pt);
    for (int i = 0; i < m->n_add; i++)
        plan_advise_point_free(&m->add[i].pt);
    free(m->drop);
    free(m->add);
    memset(m, 0, sizeof *m);
}
