/*
 * The data plane of a planned job, recorded in its plan so that status shows it and every worker
 * is assigned by the same choice: per stage boundary the transport (transport_pick.h, from the
 * spec and the hardware of the workers on each stage), per replicated stage how its copies
 * all-reduce their gradients.
 *
 * It maps the plan's devices to the chosen workers' hardware; the rules themselves are in
 * transport_pick.c. No lock, no network call.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_log.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/transport_pick.h"

#define LOG "jobs"

/* Where device `d` of the plan runs, from its worker's hardware report (none: a CPU site). */
static coord_stage_site site_of(const coord_chosen_worker *ws, size_t n, json_int_t d, int replicas)
{
    coord_stage_site site = {.host = "", .pci_bus_id = "", .replicas = replicas};
    if (d < 0 || (size_t)d >= n || ws[d].hw == NULL || ws[d].hw->n_devices == 0)
        return site;
    const Stagecraft__HardwareReport *hw = ws[d].hw;
    const Stagecraft__Device *dev = hw->devices[0];
    site.host = hw->hostname != NULL ? hw->hostname : "";
    site.cuda = dev->kind != NULL && strcmp(dev->kind, "cuda") == 0;
    site.device = (int)dev->index;
    site.pci_bus_id = dev->pci_bus_id != NULL ? dev->pci_bus_id : "";
    site.nccl = hw->nccl;
    return site;
}

/* The transport of each stage boundary (transport_pick.h) from the spec and the hardware of
 * the workers on each stage (a replicated stage's first copy stands for it: replicas keep zmq
 * anyway). kinds: [stages - 1]. */
static sc_status pick_transports(const coord_jobspec *spec, json_t *stages,
                                 const coord_chosen_worker *ws, size_t n, const char **kinds,
                                 sc_err *err)
{
    size_t ns = json_array_size(stages);
    coord_stage_site *sites = calloc(ns ? ns : 1, sizeof *sites);
    SC_ALLOC_CHECK(sites, err);
    for (size_t s = 0; s < ns; s++) {
        json_t *devs = json_object_get(json_array_get(stages, s), "devices");
        sites[s] =
            site_of(ws, n, json_integer_value(json_array_get(devs, 0)), (int)json_array_size(devs));
    }
    const char *pref = spec->transport[0] ? spec->transport : "auto";
    sc_status rc = coord_transport_pick(pref, sites, ns, kinds, err);
    free(sites);
    if (rc == SC_OK && ns > 1) {
        char list[256] = "";
        size_t at = 0;
        for (size_t b = 0; b + 1 < ns && at + 8 < sizeof list; b++)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", b ? " " : "", kinds[b]);
        SC_LOG_INFO(LOG, "data plane per stage boundary: %s (transport \"%s\" in the job spec)",
                    list, pref);
    }
    return rc;
}

/* Records in the plan its "replica_reduce": per stage, how its copies all-reduce their
 * gradients, "nccl" (coord_replicas_nccl_ok, unless the spec's transport is "zmq"), "host", or
 * "none" for a stage of one copy. */
static sc_status add_replica_reduce(const coord_jobspec *spec, json_t *stages,
                                    const coord_chosen_worker *ws, size_t n, json_t *plan,
                                    sc_err *err)
{
    bool never = strcmp(spec->transport, "zmq") == 0;
    json_t *arr = json_array();
    SC_ALLOC_CHECK(arr, err);
    size_t si;
    json_t *stage;
    json_array_foreach(stages, si, stage)
    {
        json_t *devs = json_object_get(stage, "devices");
        size_t r = json_array_size(devs);
        const char *how = r < 2 ? "none" : "host";
        if (r >= 2 && !never) {
            coord_stage_site *copies = calloc(r, sizeof *copies);
            if (copies == NULL) {
                json_decref(arr);
                return SC_ERRF(err, SC_ERR_NOMEM, "out of memory choosing the all-reduce");
            }
            for (size_t k = 0; k < r; k++)
                copies[k] = site_of(ws, n, json_integer_value(json_array_get(devs, k)), (int)r);
            char why[128];
            if (coord_replicas_nccl_ok(copies, r, why, sizeof why))
                how = "nccl";
            else
                SC_LOG_INFO(LOG, "stage %zu: its %zu copies all-reduce in host memory (%s)", si, r,
                            why);
            free(copies);
        }
        json_array_append_new(arr, json_string(how));
    }
    json_object_set_new(plan, "replica_reduce", arr);
    return SC_OK;
}

sc_status coord_jobs_add_transports(const coord_jobspec *spec, const coord_chosen_worker *ws,
                                    size_t n, char **plan_json, sc_err *err)
{
    json_t *plan = json_loads(*plan_json, 0, NULL);
    if (!json_is_object(plan)) {
        json_decref(plan);
        return SC_ERRF(err, SC_ERR_INTERNAL, "the planner's JSON does not parse");
    }
    json_t *stages = json_object_get(plan, "stages");
    size_t ns = json_array_size(stages);
    const char **kinds = calloc(ns ? ns : 1, sizeof *kinds);
    sc_status rc = kinds == NULL ? SC_ERRF(err, SC_ERR_NOMEM, "out of memory choosing transports")
                                 : pick_transports(spec, stages, ws, n, kinds, err);
    if (rc == SC_OK)
        rc = add_replica_reduce(spec, stages, ws, n, plan, err);
    if (rc == SC_OK) {
        json_t *arr = json_array();
        for (size_t b = 0; b + 1 < ns; b++)
            json_array_append_new(arr, json_string(kinds[b]));
        json_object_set_new(plan, "transports", arr);
        char *text = json_dumps(plan, JSON_COMPACT);
        if (text == NULL) {
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the plan");
        } else {
            free(*plan_json);
            *plan_json = text;
        }
    }
    free(kinds);
    json_decref(plan);
    return rc;
}
