/*
 * plan_hint: the subsets `stagecraft plan` tries after its table (see plan_hint.h).
 *
 * Does not choose among all subsets (plan_advise does). Invariant: at most PLAN_HINT_MAX_PLANS
 * plans, each of one strategy, whatever the cluster's size.
 */
#include "coordinator/planner/plan_hint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"

/* Speed per unit of price of a device type (speed alone without prices). */
static double value_of(const plan_cluster *cl, int type)
{
    const plan_device_type *t = &cl->types[type];
    if (plan_cluster_has_prices(cl) && t->price_per_hour > 0)
        return t->relative_speed / t->price_per_hour;
    return t->relative_speed;
}

sc_status plan_hint_find(const plan_request *req, plan_strategy strategy, double full_samples_per_s,
                         plan_hint *out, sc_err *err)
{
    memset(out, 0, sizeof *out);
    const plan_cluster *cl = req->cluster;
    int n = cl->n_devices;
    if (n < 2 || cl->n_links > 0 || !(full_samples_per_s > 0))
        return SC_OK;
    /* one representative per (server, type) class: its last device */
    int *rep = malloc((size_t)n * sizeof *rep), *devs = malloc((size_t)n * sizeof *devs);
    if (rep == NULL || devs == NULL) {
        free(rep);
        free(devs);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for %d devices", n);
    }
    int n_rep = 0;
    for (int d = 0; d < n; d++) {
        int k = 0;
        while (k < n_rep && !(cl->devices[rep[k]].server == cl->devices[d].server &&
                              cl->devices[rep[k]].type == cl->devices[d].type))
            k++;
        rep[k] = d;
        if (k == n_rep)
            n_rep++;
    }
    /* least value first (insertion sort: a handful of classes) */
    for (int i = 1; i < n_rep; i++)
        for (int j = i; j > 0 && value_of(cl, cl->devices[rep[j]].type) <
                                     value_of(cl, cl->devices[rep[j - 1]].type);
             j--) {
            int t = rep[j];
            rep[j] = rep[j - 1];
            rep[j - 1] = t;
        }
    plan_advise_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.catalog = cl;
    cfg.request = *req;
    cfg.strategy = (int)strategy;
    int prices = plan_cluster_has_prices(cl);
    double full_cost = plan_cluster_devices_price_per_hour(cl) / full_samples_per_s;
    sc_status rc = SC_OK;
    for (int k = 0; k < n_rep && k < PLAN_HINT_MAX_PLANS; k++) {
        int m = 0;
        for (int d = 0; d < n; d++)
            if (d != rep[k])
                devs[m++] = d;
        plan_advise_point pt;
        rc = plan_advise_eval(&cfg, devs, m, &pt, NULL, NULL, err);
        if (rc != SC_OK)
            break;
        out->planned++;
        double faster = pt.samples_per_s / full_samples_per_s - 1;
        double cheaper = pt.samples_per_s > 0 && full_cost > 0
                             ? 1 - (pt.devices_per_hour / pt.samples_per_s) / full_cost
                             : 0;
        if (faster >= PLAN_HINT_MIN_GAIN && (!out->found || !out->faster || faster > out->gain)) {
            out->found = out->faster = 1;
            out->gain = faster;
            out->dropped = rep[k];
            out->samples_per_s = pt.samples_per_s;
        } else if (prices && cheaper >= PLAN_HINT_MIN_GAIN && !out->faster &&
                   (!out->found || cheaper > out->gain)) {
            out->found = 1;
            out->gain = cheaper;
            out->dropped = rep[k];
            out->samples_per_s = pt.samples_per_s;
        }
        plan_advise_point_free(&pt);
    }
    free(rep);
    free(devs);
    return rc;
}

void plan_hint_line(const plan_cluster *cl, const plan_hint *h, char *buf, size_t size)
{
    buf[0] = '\0';
    if (!h->found)
        return;
    const plan_device *d = &cl->devices[h->dropped];
    snprintf(buf, size,
             "hint: %d of these %d devices (dropping device %d, %s on %s) %s %.0f%% %s; see "
             "stagecraft advise",
             cl->n_devices - 1, cl->n_devices, h->dropped, cl->types[d->type].name,
             cl->servers[d->server].name, h->faster ? "plan" : "cost", 100 * h->gain,
             h->faster ? "faster" : "less per sample");
}
