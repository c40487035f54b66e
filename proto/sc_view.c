/*
 * The JSON views of the Coordinator service's answers (sc_view.h): moved here from the CLI so
 * that `status --json`, `workers --json` and the coordinator's /api build them one way.
 */
#include "proto/sc_view.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "common/sc_clock.h"

json_t *sc_view_figure(bool known, double v)
{
    return known ? json_real(v) : json_null();
}

const char *sc_view_job_state_name(Stagecraft__JobState s)
{
    switch (s) {
    case STAGECRAFT__JOB_STATE__JOB_SUBMITTED:
        return "submitted";
    case STAGECRAFT__JOB_STATE__JOB_PROFILING:
        return "profiling";
    case STAGECRAFT__JOB_STATE__JOB_PLANNED:
        return "planned";
    case STAGECRAFT__JOB_STATE__JOB_RUNNING:
        return "running";
    case STAGECRAFT__JOB_STATE__JOB_RECOVERING:
        return "recovering";
    case STAGECRAFT__JOB_STATE__JOB_REBALANCING:
        return "rebalancing";
    case STAGECRAFT__JOB_STATE__JOB_SUCCEEDED:
        return "succeeded";
    case STAGECRAFT__JOB_STATE__JOB_FAILED:
        return "failed";
    case STAGECRAFT__JOB_STATE__JOB_CANCELLED:
        return "cancelled";
    default:
        return "unknown";
    }
}

double sc_view_profiling_s(const Stagecraft__JobInfo *j, int *rounds)
{
    double total_ms = 0;
    *rounds = 0;
    for (size_t i = 0; i < j->n_transitions; i++) {
        if (strcmp(j->transitions[i]->to_state, "profiling") != 0)
            continue;
        int64_t end_ms =
            i + 1 < j->n_transitions ? j->transitions[i + 1]->at_unix_ms : sc_clock_unix_ms();
        total_ms += (double)(end_ms - j->transitions[i]->at_unix_ms);
        (*rounds)++;
    }
    return total_ms / 1000.0;
}

json_t *sc_view_job(const Stagecraft__JobInfo *j)
{
    json_t *o = json_object();
    json_object_set_new(o, "job_id", json_string(j->job_id));
    json_object_set_new(o, "name", json_string(j->name));
    json_object_set_new(o, "state", json_string(sc_view_job_state_name(j->state)));
    json_object_set_new(o, "reason", json_string(j->reason));
    json_object_set_new(o, "step", json_integer((json_int_t)j->step));
    json_object_set_new(o, "steps", json_integer((json_int_t)j->steps));
    json_object_set_new(o, "last_checkpoint_step",
                        json_integer((json_int_t)j->last_checkpoint_step));
    json_object_set_new(o, "checkpoint_error",
                        json_string(j->checkpoint_error ? j->checkpoint_error : ""));
    json_object_set_new(o, "created_unix_ms", json_integer(j->created_unix_ms));
    json_object_set_new(o, "updated_unix_ms", json_integer(j->updated_unix_ms));
    json_t *plan = j->plan_json && j->plan_json[0] ? json_loads(j->plan_json, 0, NULL) : NULL;
    json_object_set_new(o, "plan", plan ? plan : json_null());
    json_object_set_new(o, "loss", sc_view_figure(j->loss_known, j->loss));
    json_object_set_new(o, "samples_per_s",
                        sc_view_figure(j->samples_per_s_known, j->samples_per_s));
    json_object_set_new(o, "predicted_iteration_s", json_real(j->predicted_iteration_s));
    json_object_set_new(o, "measured_iteration_s", json_real(j->measured_iteration_s));
    json_t *stages = json_array();
    for (size_t i = 0; i < j->n_stages; i++) {
        const Stagecraft__StageStatus *st = j->stages[i];
        json_t *ids = json_array();
        for (size_t k = 0; k < st->n_worker_ids; k++)
            json_array_append_new(ids, json_string(st->worker_ids[k]));
        json_array_append_new(
            stages,
            json_pack("{s:i, s:f, s:f, s:i, s:i, s:o, s:f, s:f, s:f, s:f, "
                      "s:f}",
                      "stage", (int)st->stage, "busy_fraction", st->busy_fraction, "busy_s",
                      st->measured_compute_s, "first_block", (int)st->first_block, "last_block",
                      (int)st->last_block, "worker_ids", ids, "predicted_compute_s",
                      st->predicted_compute_s, "predicted_allreduce_s", st->predicted_allreduce_s,
                      "measured_allreduce_s", st->measured_allreduce_s, "predicted_memory_bytes",
                      st->predicted_memory_bytes, "measured_memory_bytes",
                      st->measured_memory_bytes));
    }
    json_object_set_new(o, "stage_figures", stages);
    json_t *links = json_array();
    for (size_t i = 0; i < j->n_links; i++) {
        const Stagecraft__LinkStatus *l = j->links[i];
        json_array_append_new(
            links,
            json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:i, s:i}", "from", l->from_worker, "to",
                      l->to_worker, "measured_bytes_per_s", l->measured_bytes_per_s,
                      "expected_bytes_per_s", l->expected_bytes_per_s, "reference_bytes_per_s",
                      l->reference_bytes_per_s, "message_bytes", l->message_bytes,
                      "messages_per_step", (int)l->messages_per_step, "samples", (int)l->samples));
    }
    json_object_set_new(o, "links", links);
    json_t *hist = json_array();
    for (size_t i = 0; i < j->n_transitions; i++)
        json_array_append_new(
            hist, json_pack("{s:s, s:s, s:s, s:I}", "from", j->transitions[i]->from_state, "to",
                            j->transitions[i]->to_state, "reason", j->transitions[i]->reason,
                            "at_unix_ms", (json_int_t)j->transitions[i]->at_unix_ms));
    json_object_set_new(o, "transitions", hist);
    if (j->loss_scale > 0) { /* fp16 */
        json_object_set_new(o, "loss_scale", json_real(j->loss_scale));
        json_object_set_new(o, "skipped_steps", json_integer((json_int_t)j->skipped_steps));
    }
    int rounds;
    double prof_s = sc_view_profiling_s(j, &rounds);
    json_object_set_new(o, "profiling_s", json_real(prof_s));
    json_object_set_new(o, "profiling_rounds", json_integer(rounds));
    json_t *spec = j->spec_json && j->spec_json[0] ? json_loads(j->spec_json, 0, NULL) : NULL;
    if (spec)
        json_object_set_new(o, "spec", spec);
    return o;
}

const char *sc_view_worker_state_name(Stagecraft__WorkerState s)
{
    switch (s) {
    case STAGECRAFT__WORKER_STATE__WORKER_ALIVE:
        return "alive";
    case STAGECRAFT__WORKER_STATE__WORKER_SUSPECT:
        return "suspect";
    case STAGECRAFT__WORKER_STATE__WORKER_DEAD:
        return "dead";
    default:
        return "unknown";
    }
}

json_t *sc_view_worker(const Stagecraft__WorkerInfo *w)
{
    json_t *devs = json_array();
    for (size_t d = 0; d < w->n_devices; d++) {
        Stagecraft__Device *dv = w->devices[d];
        json_array_append_new(devs,
                              json_pack("{s:s, s:i, s:s, s:I, s:s, s:i, s:f}", "kind", dv->kind,
                                        "index", (int)dv->index, "name", dv->name, "memory_bytes",
                                        (json_int_t)dv->memory_bytes, "pci_bus_id", dv->pci_bus_id,
                                        "numa_node", dv->numa_node, "gflops", dv->gflops));
    }
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:o, s:I, s:s, s:s, s:I, s:s}", "id", w->id, "name",
                          w->name, "host", w->host, "state", sc_view_worker_state_name(w->state),
                          "devices", devs, "last_heartbeat_unix_ms",
                          (json_int_t)w->last_heartbeat_unix_ms, "job_id", w->job_id, "endpoint",
                          w->endpoint, "epoch", (json_int_t)w->epoch, "activity", w->activity);
    /* its path to the coordinator as last probed; null until a job probes it */
    bool probed = w->link_probed_unix_ms > 0;
    json_object_set_new(o, "link_bytes_per_s", sc_view_figure(probed, w->link_bytes_per_s));
    json_object_set_new(o, "link_latency_s", sc_view_figure(probed, w->link_latency_s));
    json_object_set_new(o, "link_probed_unix_ms",
                        probed ? json_integer(w->link_probed_unix_ms) : json_null());
    return o;
}

json_t *sc_view_jobs(const Stagecraft__ListJobsResponse *resp)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < resp->n_jobs; i++)
        json_array_append_new(arr, sc_view_job(resp->jobs[i]));
    return json_pack("{s:o}", "jobs", arr);
}

json_t *sc_view_workers(const Stagecraft__ListWorkersResponse *resp)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < resp->n_workers; i++)
        json_array_append_new(arr, sc_view_worker(resp->workers[i]));
    return json_pack("{s:o}", "workers", arr);
}

json_t *sc_view_history(const Stagecraft__JobInfo *j)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < j->n_history; i++) {
        const Stagecraft__HistoryPoint *h = j->history[i];
        json_array_append_new(
            arr,
            json_pack("{s:I, s:o, s:o, s:f, s:I}", "step", (json_int_t)h->step, "loss",
                      /* JSON has no NaN: a diverged loss reads as not measured */
                      sc_view_figure(h->has_loss && isfinite(h->loss), h->loss), "samples_per_s",
                      sc_view_figure(h->samples_per_s_known, h->samples_per_s), "iteration_s",
                      h->iteration_s, "at_unix_ms", (json_int_t)h->at_unix_ms));
    }
    return arr;
}

json_t *sc_view_logs(const Stagecraft__GetLogsResponse *resp)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < resp->n_workers; i++) {
        const Stagecraft__WorkerLog *w = resp->workers[i];
        json_t *lines = json_array();
        for (size_t k = 0; k < w->n_lines; k++)
            json_array_append_new(lines,
                                  json_pack("{s:I, s:s}", "seq", (json_int_t)w->lines[k]->seq,
                                            "text", w->lines[k]->text ? w->lines[k]->text : ""));
        bool failed = w->error != NULL && w->error[0] != '\0';
        json_array_append_new(arr, json_pack("{s:s, s:s, s:o, s:I, s:o}", "worker_id", w->worker_id,
                                             "name", w->name ? w->name : "", "lines", lines,
                                             "newest_seq", (json_int_t)w->newest_seq, "error",
                                             failed ? json_string(w->error) : json_null()));
    }
    return json_pack("{s:o}", "workers", arr);
}
