/*
 * plan_cluster_subset: the cluster of some of a cluster's devices, as `stagecraft advise`
 * plans each candidate set on.
 *
 * Does not choose the devices (plan_advise does). Invariant: two subsets that take as many
 * devices of each type from each server give the same cluster, device for device (servers in
 * order, on each server the chosen devices grouped by type in device_types order), so the
 * planner cannot tell interchangeable devices apart.
 */
#include "coordinator/planner/plan_cluster.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"

/* The types of c, block times and quotas included, appended to s. */
static sc_status copy_types(const plan_cluster *c, plan_cluster *s, sc_err *err)
{
    for (int t = 0; t < c->n_types; t++) {
        const plan_device_type *from = &c->types[t];
        SC_CHECK(plan_cluster_add_type(s, from->name, from->relative_speed,
                                       isinf(from->memory_bytes) ? 0 : from->memory_bytes, NULL,
                                       err));
        plan_device_type *to = &s->types[t];
        to->price_per_hour = from->price_per_hour;
        to->quota_fraction = from->quota_fraction;
        to->quota_period_s = from->quota_period_s;
        if (from->n_block_times > 0) {
            to->block_times = malloc((size_t)from->n_block_times * sizeof *to->block_times);
            SC_ALLOC_CHECK(to->block_times, err);
            memcpy(to->block_times, from->block_times,
                   (size_t)from->n_block_times * sizeof *to->block_times);
            to->n_block_times = from->n_block_times;
        }
    }
    return SC_OK;
}

/* Zone names (all of c's, in order, so indices agree) and the prices and caps between them. */
static sc_status copy_zones(const plan_cluster *c, plan_cluster *s, sc_err *err)
{
    if (c->n_zones == 0)
        return SC_OK;
    size_t n = (size_t)c->n_zones;
    s->zone_names = malloc(n * sizeof *s->zone_names);
    s->zone_bw = malloc(n * n * sizeof *s->zone_bw);
    s->zone_price_per_gb = malloc(n * n * sizeof *s->zone_price_per_gb);
    if (s->zone_names == NULL || s->zone_bw == NULL || s->zone_price_per_gb == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for %zu zones", n);
    memcpy(s->zone_names, c->zone_names, n * sizeof *s->zone_names);
    memcpy(s->zone_bw, c->zone_bw, n * n * sizeof *s->zone_bw);
    memcpy(s->zone_price_per_gb, c->zone_price_per_gb, n * n * sizeof *s->zone_price_per_gb);
    s->n_zones = c->n_zones;
    return SC_OK;
}

sc_status plan_cluster_subset(const plan_cluster *c, const int *devs, int n, plan_cluster **out,
                              int *order, sc_err *err)
{
    *out = NULL;
    if (c->n_links > 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "%s: a cluster with links cannot be cut into subsets (its links name "
                       "devices by id)",
                       c->source);
    if (n < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "a subset needs at least one device");
    char *chosen = calloc((size_t)c->n_devices, 1);
    int *types = malloc((size_t)n * sizeof *types);
    int *ids = malloc((size_t)n * sizeof *ids);
    plan_cluster *s = NULL;
    sc_status rc = SC_OK;
    if (chosen == NULL || types == NULL || ids == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory for a subset of %d devices", n);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        if (devs[i] < 0 || devs[i] >= c->n_devices || chosen[devs[i]]) {
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "%s: device %d is outside 0..%d or named twice in a subset", c->source,
                         devs[i], c->n_devices - 1);
            goto fail;
        }
        chosen[devs[i]] = 1;
    }
    SC_CHECK_GOTO(plan_cluster_new_empty(&s, err), fail);
    sc_strlcpy(s->source, c->source, sizeof s->source);
    SC_CHECK_GOTO(copy_types(c, s, err), fail);
    SC_CHECK_GOTO(copy_zones(c, s, err), fail);
    int placed = 0;
    for (int v = 0; v < c->n_servers; v++) {
        const plan_server *sv = &c->servers[v];
        int k = 0;
        for (int t = 0; t < c->n_types; t++)
            for (int d = sv->first_device; d < sv->first_device + sv->n_devices; d++)
                if (chosen[d] && c->devices[d].type == t) {
                    types[k] = t;
                    ids[placed + k] = d;
                    k++;
                }
        if (k == 0)
            continue;
        SC_CHECK_GOTO(plan_cluster_add_server(s, sv->name, sv->intra_bw_bytes_per_s,
                                              sv->nic_bw_bytes_per_s, types, k, err),
                      fail);
        plan_server *to = &s->servers[s->n_servers - 1];
        to->compute_slots = sv->compute_slots;
        to->reduce_bw_bytes_per_s = sv->reduce_bw_bytes_per_s;
        to->zone = sv->zone;
        placed += k;
    }
    if (order != NULL)
        memcpy(order, ids, (size_t)n * sizeof *order);
    free(chosen);
    free(types);
    free(ids);
    *out = s;
    return SC_OK;
fail:
    free(chosen);
    free(types);
    free(ids);
    plan_cluster_destroy(&s);
    return rc;
}
