/*
 * /metrics: the coordinator's figures in the Prometheus text format (version 0.0.4), asked of
 * the Coordinator service in process like every other route (http_fetch.c). Each family's HELP
 * and TYPE come once, then all its samples; names follow Prometheus's conventions (the
 * stagecraft_ prefix, _total for counters, _seconds and _bytes units); labels name identity
 * only (worker, job, stage, state, link ends), never a figure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/http_internal.h"
#include "proto/sc_view.h"

#define LOG "http"

/* A label value with '\\', '"' and newlines escaped as the format asks. */
static void put_label(FILE *f, const char *v)
{
    for (const char *p = v ? v : ""; *p; p++) {
        if (*p == '\\' || *p == '"')
            fputc('\\', f), fputc(*p, f);
        else if (*p == '\n')
            fputs("\\n", f);
        else
            fputc(*p, f);
    }
}

static void put_value(FILE *f, double v)
{
    if (isnan(v))
        fputs(" NaN\n", f);
    else if (isinf(v))
        fputs(v > 0 ? " +Inf\n" : " -Inf\n", f);
    else
        fprintf(f, " %.17g\n", v);
}

static void put_family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{job="ID",name="NAME"[,extra]} value */
static void put_job_sample(FILE *f, const char *metric, const Stagecraft__JobInfo *j,
                           const char *extra, double v)
{
    fprintf(f, "%s{job=\"", metric);
    put_label(f, j->job_id);
    fputs("\",name=\"", f);
    put_label(f, j->name);
    fprintf(f, "\"%s}", extra ? extra : "");
    put_value(f, v);
}

/* A counter per live job: its transitions into state `to` (GetJob's history of states). */
static void put_transitions(FILE *f, const Stagecraft__JobInfo **jobs, size_t n, const char *name,
                            const char *to, const char *help)
{
    put_family(f, name, "counter", help);
    for (size_t i = 0; i < n; i++) {
        if (!coord_http_job_is_live(jobs[i]->state))
            continue;
        size_t count = 0;
        for (size_t k = 0; k < jobs[i]->n_transitions; k++)
            count += strcmp(jobs[i]->transitions[k]->to_state, to) == 0;
        put_job_sample(f, name, jobs[i], NULL, (double)count);
    }
}

/* stagecraft_link_bytes_per_second{job,name,from,to,kind} */
static void put_link_sample(FILE *f, const Stagecraft__JobInfo *j, const Stagecraft__LinkStatus *l,
                            const char *kind, double v)
{
    fputs("stagecraft_link_bytes_per_second{job=\"", f);
    put_label(f, j->job_id);
    fputs("\",name=\"", f);
    put_label(f, j->name);
    fputs("\",from=\"", f);
    put_label(f, l->from_worker);
    fputs("\",to=\"", f);
    put_label(f, l->to_worker);
    fprintf(f, "\",kind=\"%s\"}", kind);
    put_value(f, v);
}

static void metrics_workers(coord_http *h, FILE *f)
{
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_local *call;
    const Stagecraft__ListWorkersResponse *resp;
    if (coord_http_fetch_workers(h, &call, &resp, &err) != SC_OK) {
        SC_LOG_WARN(LOG, "/metrics without workers: %s", err.msg);
        return;
    }
    static const Stagecraft__WorkerState states[] = {STAGECRAFT__WORKER_STATE__WORKER_ALIVE,
                                                     STAGECRAFT__WORKER_STATE__WORKER_SUSPECT,
                                                     STAGECRAFT__WORKER_STATE__WORKER_DEAD};
    put_family(f, "stagecraft_workers", "gauge", "Registered workers by liveness state.");
    for (size_t s = 0; s < SC_ARRAY_LEN(states); s++) {
        size_t n = 0;
        for (size_t i = 0; i < resp->n_workers; i++)
            n += resp->workers[i]->state == states[s];
        fprintf(f, "stagecraft_workers{state=\"%s\"}", sc_view_worker_state_name(states[s]));
        put_value(f, (double)n);
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double now_s = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
    put_family(f, "stagecraft_worker_heartbeat_age_seconds", "gauge",
               "Seconds since the worker's last heartbeat (workers that sent one).");
    for (size_t i = 0; i < resp->n_workers; i++) {
        const Stagecraft__WorkerInfo *w = resp->workers[i];
        if (w->last_heartbeat_unix_ms <= 0)
            continue;
        double age = now_s - (double)w->last_heartbeat_unix_ms / 1000.0;
        fputs("stagecraft_worker_heartbeat_age_seconds{worker=\"", f);
        put_label(f, w->id);
        fputs("\",name=\"", f);
        put_label(f, w->name);
        fputs("\"}", f);
        put_value(f, age > 0 ? age : 0);
    }
    put_family(f, "stagecraft_worker_state", "gauge",
               "1 for each worker's current liveness state.");
    for (size_t i = 0; i < resp->n_workers; i++) {
        const Stagecraft__WorkerInfo *w = resp->workers[i];
        fputs("stagecraft_worker_state{worker=\"", f);
        put_label(f, w->id);
        fputs("\",name=\"", f);
        put_label(f, w->name);
        fprintf(f, "\",state=\"%s\"}", sc_view_worker_state_name(w->state));
        put_value(f, 1);
    }
    sc_rpc_local_free(&call);
}

static void metrics_jobs(coord_http *h, FILE *f)
{
    sc_err err;
    sc_err_clear(&err);
    coord_http_jobs all;
    if (coord_http_fetch_jobs(h, &all, &err) != SC_OK) {
        SC_LOG_WARN(LOG, "/metrics without jobs: %s", err.msg);
        return;
    }
    const Stagecraft__JobInfo **jobs = all.jobs;
    size_t n = all.n;

    put_family(f, "stagecraft_job_state", "gauge", "1 for each job's current state.");
    for (size_t i = 0; i < n; i++) {
        char extra[64];
        snprintf(extra, sizeof extra, ",state=\"%s\"", sc_view_job_state_name(jobs[i]->state));
        put_job_sample(f, "stagecraft_job_state", jobs[i], extra, 1);
    }
    put_family(f, "stagecraft_job_step", "gauge", "The job's last completed step.");
    for (size_t i = 0; i < n; i++)
        put_job_sample(f, "stagecraft_job_step", jobs[i], NULL, (double)jobs[i]->step);
    put_family(f, "stagecraft_job_steps", "gauge", "The steps the job was submitted for.");
    for (size_t i = 0; i < n; i++)
        put_job_sample(f, "stagecraft_job_steps", jobs[i], NULL, (double)jobs[i]->steps);
    put_family(f, "stagecraft_job_loss", "gauge",
               "The loss the job's last stage last reported (live jobs that reported one).");
    for (size_t i = 0; i < n; i++)
        if (coord_http_job_is_live(jobs[i]->state) && jobs[i]->loss_known)
            put_job_sample(f, "stagecraft_job_loss", jobs[i], NULL, jobs[i]->loss);
    put_family(f, "stagecraft_job_samples_per_second", "gauge",
               "The job's measured throughput in samples per second (live jobs).");
    for (size_t i = 0; i < n; i++)
        if (coord_http_job_is_live(jobs[i]->state) && jobs[i]->samples_per_s_known)
            put_job_sample(f, "stagecraft_job_samples_per_second", jobs[i], NULL,
                           jobs[i]->samples_per_s);
    put_family(f, "stagecraft_job_iteration_seconds", "gauge",
               "The job's iteration time: measured (its slowest stage) and predicted by its "
               "plan (live jobs).");
    for (size_t i = 0; i < n; i++) {
        if (!coord_http_job_is_live(jobs[i]->state))
            continue;
        if (jobs[i]->measured_iteration_s > 0)
            put_job_sample(f, "stagecraft_job_iteration_seconds", jobs[i], ",kind=\"measured\"",
                           jobs[i]->measured_iteration_s);
        if (jobs[i]->predicted_iteration_s > 0)
            put_job_sample(f, "stagecraft_job_iteration_seconds", jobs[i], ",kind=\"predicted\"",
                           jobs[i]->predicted_iteration_s);
    }
    put_family(f, "stagecraft_job_stage_busy_fraction", "gauge",
               "The share of an iteration each stage computes (live jobs).");
    for (size_t i = 0; i < n; i++) {
        if (!coord_http_job_is_live(jobs[i]->state))
            continue;
        for (size_t s = 0; s < jobs[i]->n_stages; s++) {
            char extra[48];
            snprintf(extra, sizeof extra, ",stage=\"%u\"", jobs[i]->stages[s]->stage);
            put_job_sample(f, "stagecraft_job_stage_busy_fraction", jobs[i], extra,
                           jobs[i]->stages[s]->busy_fraction);
        }
    }
    /* each stage's compute per iteration as measured and as its workers' profiles predict: a
     * worker's speed against its profile */
    put_family(f, "stagecraft_job_stage_compute_seconds", "gauge",
               "Each stage's compute per iteration, measured and predicted from its workers' "
               "profiles (live jobs).");
    for (size_t i = 0; i < n; i++) {
        if (!coord_http_job_is_live(jobs[i]->state))
            continue;
        for (size_t s = 0; s < jobs[i]->n_stages; s++) {
            const Stagecraft__StageStatus *st = jobs[i]->stages[s];
            char extra[64];
            if (st->measured_compute_s > 0) {
                snprintf(extra, sizeof extra, ",stage=\"%u\",kind=\"measured\"", st->stage);
                put_job_sample(f, "stagecraft_job_stage_compute_seconds", jobs[i], extra,
                               st->measured_compute_s);
            }
            if (st->predicted_compute_s > 0) {
                snprintf(extra, sizeof extra, ",stage=\"%u\",kind=\"predicted\"", st->stage);
                put_job_sample(f, "stagecraft_job_stage_compute_seconds", jobs[i], extra,
                               st->predicted_compute_s);
            }
        }
    }
    put_family(f, "stagecraft_job_frozen_blocks", "gauge",
               "The leading blocks the job's freezing policy has frozen (live jobs).");
    for (size_t i = 0; i < n; i++)
        if (coord_http_job_is_live(jobs[i]->state))
            put_job_sample(f, "stagecraft_job_frozen_blocks", jobs[i], NULL,
                           (double)jobs[i]->frozen_blocks);
    put_transitions(f, jobs, n, "stagecraft_job_rebalances_total", "rebalancing",
                    "Rebalances the job started (re-plans onto measured speeds), live jobs.");
    put_transitions(f, jobs, n, "stagecraft_job_recoveries_total", "recovering",
                    "Recoveries the job went through (a worker lost), live jobs.");
    put_family(f, "stagecraft_link_bytes_per_second", "gauge",
               "A link between two workers of a live job, one direction: the speed its messages "
               "measure and the one the plan expects.");
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; coord_http_job_is_live(jobs[i]->state) && k < jobs[i]->n_links; k++) {
            const Stagecraft__LinkStatus *l = jobs[i]->links[k];
            put_link_sample(f, jobs[i], l, "measured", l->measured_bytes_per_s);
            put_link_sample(f, jobs[i], l, "expected", l->expected_bytes_per_s);
        }
    }
    coord_http_jobs_free(&all);
}

/* stagecraft_rpc_calls_total{method}: the gRPC calls received, by method. */
static void metrics_rpc(coord_http *h, FILE *f)
{
    put_family(f, "stagecraft_rpc_calls_total", "counter",
               "gRPC calls the coordinator received, by method (the page's and /metrics' own "
               "questions are asked in process and not counted).");
    const char *method;
    unsigned long calls;
    for (size_t i = 0; coord_http_rpc_calls(h, i, &method, &calls); i++) {
        fputs("stagecraft_rpc_calls_total{method=\"", f);
        put_label(f, method);
        fputs("\"}", f);
        put_value(f, (double)calls);
    }
}

enum MHD_Result coord_http_metrics(coord_http *h, struct MHD_Connection *conn)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return coord_http_send_error(h, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    metrics_workers(h, f);
    metrics_jobs(h, f);
    metrics_rpc(h, f);
    put_family(f, "stagecraft_http_requests_total", "counter",
               "HTTP requests the coordinator answered, by status code (before this one).");
    for (size_t i = 0; i < COORD_HTTP_CODES; i++) {
        fprintf(f, "stagecraft_http_requests_total{code=\"%u\"}", coord_http_codes[i]);
        put_value(f, (double)atomic_load(&h->answered[i]));
    }
    bool ok = fclose(f) == 0;
    enum MHD_Result rc =
        ok ? coord_http_send(h, conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text,
                             len)
           : coord_http_send_error(h, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    free(text);
    return rc;
}
