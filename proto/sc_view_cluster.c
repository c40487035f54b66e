/*
 * The cluster view (sc_view.h, sc_view_cluster): servers with their workers and devices, each
 * worker's probed path to the coordinator, and the links the jobs measure between workers.
 * Built from ListWorkers' and GetJob's answers only: nothing here measures or asks.
 */
#include <string.h>

#include "proto/sc_view.h"

/* The host of worker `id` in the listing, "" when it is not listed (it left). */
static const char *host_of(const Stagecraft__ListWorkersResponse *ws, const char *id)
{
    for (size_t i = 0; i < ws->n_workers; i++)
        if (strcmp(ws->workers[i]->id, id) == 0)
            return ws->workers[i]->host;
    return "";
}

/* The stage worker `id` runs in one of the jobs (the first that names it), NULL for none. */
static const Stagecraft__StageStatus *stage_of(const Stagecraft__JobInfo *const *jobs,
                                               size_t n_jobs, const char *id)
{
    for (size_t j = 0; j < n_jobs; j++)
        for (size_t s = 0; s < jobs[j]->n_stages; s++)
            for (size_t k = 0; k < jobs[j]->stages[s]->n_worker_ids; k++)
                if (strcmp(jobs[j]->stages[s]->worker_ids[k], id) == 0)
                    return jobs[j]->stages[s];
    return NULL;
}

static json_t *servers(const Stagecraft__ListWorkersResponse *ws,
                       const Stagecraft__JobInfo *const *jobs, size_t n_jobs)
{
    json_t *out = json_array();
    for (size_t i = 0; i < ws->n_workers; i++) {
        const Stagecraft__WorkerInfo *w = ws->workers[i];
        json_t *server = NULL, *s;
        size_t k;
        json_array_foreach(out, k, s)
        {
            if (strcmp(json_string_value(json_object_get(s, "host")), w->host) == 0)
                server = s;
        }
        if (server == NULL) {
            server = json_pack("{s:s, s:[], s:i, s:I}", "host", w->host, "workers", "devices", 0,
                               "memory_bytes", (json_int_t)0);
            json_array_append_new(out, server);
        }
        /* its speed against its profile: its stage's compute per iteration as measured and as
         * the plan predicted from the profiles (null where it runs no stage) */
        json_t *wj = sc_view_worker(w);
        const Stagecraft__StageStatus *st = stage_of(jobs, n_jobs, w->id);
        json_object_set_new(wj, "compute_measured_s",
                            sc_view_figure(st != NULL && st->measured_compute_s > 0,
                                           st != NULL ? st->measured_compute_s : 0));
        json_object_set_new(wj, "compute_predicted_s",
                            sc_view_figure(st != NULL && st->predicted_compute_s > 0,
                                           st != NULL ? st->predicted_compute_s : 0));
        json_array_append_new(json_object_get(server, "workers"), wj);
        json_int_t mem = json_integer_value(json_object_get(server, "memory_bytes"));
        for (size_t d = 0; d < w->n_devices; d++)
            mem += (json_int_t)w->devices[d]->memory_bytes;
        json_object_set_new(server, "memory_bytes", json_integer(mem));
        json_object_set_new(server, "devices",
                            json_integer(json_integer_value(json_object_get(server, "devices")) +
                                         (json_int_t)w->n_devices));
    }
    return out;
}

static json_t *coordinator_links(const Stagecraft__ListWorkersResponse *ws)
{
    json_t *out = json_array();
    for (size_t i = 0; i < ws->n_workers; i++) {
        const Stagecraft__WorkerInfo *w = ws->workers[i];
        if (w->link_probed_unix_ms <= 0)
            continue;
        json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:f, s:f, s:I}", "worker_id", w->id,
                                             "name", w->name, "host", w->host, "bytes_per_s",
                                             w->link_bytes_per_s, "latency_s", w->link_latency_s,
                                             "probed_unix_ms", (json_int_t)w->link_probed_unix_ms));
    }
    return out;
}

static json_t *worker_links(const Stagecraft__ListWorkersResponse *ws,
                            const Stagecraft__JobInfo *const *jobs, size_t n_jobs)
{
    json_t *out = json_array();
    for (size_t j = 0; j < n_jobs; j++) {
        for (size_t i = 0; i < jobs[j]->n_links; i++) {
            const Stagecraft__LinkStatus *l = jobs[j]->links[i];
            bool timed = l->measured_bytes_per_s > 0 && l->message_bytes > 0;
            json_t *o = json_pack(
                "{s:s, s:s, s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:o, s:i}", "job_id",
                jobs[j]->job_id, "from", l->from_worker, "to", l->to_worker, "from_host",
                host_of(ws, l->from_worker), "to_host", host_of(ws, l->to_worker),
                "measured_bytes_per_s", l->measured_bytes_per_s, "expected_bytes_per_s",
                l->expected_bytes_per_s, "reference_bytes_per_s", l->reference_bytes_per_s,
                "message_bytes", l->message_bytes, "message_s",
                sc_view_figure(timed, timed ? l->message_bytes / l->measured_bytes_per_s : 0),
                "samples", (int)l->samples);
            json_array_append_new(out, o);
        }
    }
    return out;
}

json_t *sc_view_cluster(const Stagecraft__ListWorkersResponse *workers,
                        const Stagecraft__JobInfo *const *jobs, size_t n_jobs)
{
    return json_pack("{s:o, s:o, s:o}", "servers", servers(workers, jobs, n_jobs),
                     "coordinator_links",
                     coordinator_links(workers), "worker_links",
                     worker_links(workers, jobs, n_jobs));
}
