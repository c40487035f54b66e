/*
 * A running job's measured timeline: asks every worker of its plan for the events of its stage
 * (Worker.GetTimeline), estimates each worker's clock offset from that call, and builds the
 * trace with the plan beside it (trace.h).
 * Not here: the trace's layout and the window (trace.c), recording (worker/runtime/timeline.c).
 * Invariant: the calls run without c->lock (a worker that does not answer costs one call's
 * deadline and holds up only this request); the job, its plan and the workers' endpoints are
 * copied out under the lock first.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobs.h"
#include "coordinator/trace.h"

#define TIMELINE_TIMEOUT_MS 2000 /* per call: a worker that hangs costs this once */

typedef struct {
    int stage, copy;
    char id[COORD_ID_MAX];
    char endpoint[COORD_NAME_MAX];
} trace_worker;

/* Under c->lock: the stage copies of the job's plan and their workers' endpoints. */
static sc_status plan_workers(coord *c, const char *plan_json, trace_worker **out, size_t *n,
                              sc_err *err)
{
    *out = NULL;
    *n = 0;
    json_t *plan = json_loads(plan_json != NULL ? plan_json : "", 0, NULL);
    json_t *stages = json_object_get(plan, "stages");
    size_t total = 0, si, k;
    json_t *st, *id;
    json_array_foreach(stages, si, st) total += json_array_size(json_object_get(st, "worker_ids"));
    if (total == 0) {
        json_decref(plan);
        return SC_ERRF(err, SC_ERR_PRECONDITION, "the job's plan names no workers");
    }
    trace_worker *w = calloc(total, sizeof *w);
    if (w == NULL) {
        json_decref(plan);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory collecting the trace");
    }
    json_array_foreach(stages, si, st)
    {
        json_array_foreach(json_object_get(st, "worker_ids"), k, id)
        {
            trace_worker *x = &w[(*n)++];
            x->stage = (int)si;
            x->copy = (int)k;
            sc_strlcpy(x->id, json_string_value(id) ? json_string_value(id) : "?", sizeof x->id);
            const coord_worker *cw = coord_registry_find(c->registry, x->id);
            if (cw != NULL)
                sc_strlcpy(x->endpoint, cw->rec.endpoint, sizeof x->endpoint);
        }
    }
    json_decref(plan);
    *out = w;
    return SC_OK;
}

/* One GetTimeline call on `cli`; *sent_ns and *received_ns bracket it on this clock. */
static sc_status call_timeline(sc_rpc_client *cli, const char *job_id, int iterations,
                               uint64_t last_iteration, Stagecraft__GetTimelineResponse **resp,
                               uint64_t *sent_ns, uint64_t *received_ns, sc_err *err)
{
    Stagecraft__GetTimelineRequest req = STAGECRAFT__GET_TIMELINE_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.iterations = (uint32_t)iterations;
    req.last_iteration = last_iteration;
    ProtobufCMessage *m = NULL;
    *sent_ns = sc_clock_now_ns();
    sc_status rc =
        sc_rpc_call(cli, "/stagecraft.Worker/GetTimeline", &req.base,
                    &stagecraft__get_timeline_response__descriptor, &m, TIMELINE_TIMEOUT_MS, err);
    *received_ns = sc_clock_now_ns();
    *resp = (Stagecraft__GetTimelineResponse *)m;
    return rc;
}

/* A worker that gave no timeline: named with why in `missing`; the first reason kept. */
static void note_missing(json_t *missing, const trace_worker *w, const char *why, char *first,
                         size_t size)
{
    char line[SC_ERR_MSG_MAX + 128];
    snprintf(line, sizeof line, "%s (stage %d copy %d): %s", w->id, w->stage, w->copy, why);
    json_array_append_new(missing, json_string(line));
    if (first[0] == '\0')
        sc_strlcpy(first, line, size);
}

sc_status coord_jobs_trace(coord *c, const char *job_id, int iterations, char **json,
                           coord_trace_summary *sum, int *answered, json_t *missing, sc_err *err)
{
    *json = NULL;
    *answered = 0;
    coord_job job;
    memset(&job, 0, sizeof job); /* cleared on every path, filled or not */
    trace_worker *ws = NULL;
    size_t n = 0;
    pthread_mutex_lock(&c->lock);
    sc_status rc = coord_store_job_get(c->store, job_id, &job, err);
    if (rc == SC_OK && job.state != COORD_JOB_RUNNING)
        rc = SC_ERRF(err, SC_ERR_PRECONDITION,
                     "job %s is %s: a trace needs a running job, whose workers hold its stages",
                     job_id, coord_job_state_name(job.state));
    if (rc == SC_OK)
        rc = plan_workers(c, job.plan_json, &ws, &n, err);
    pthread_mutex_unlock(&c->lock);
    if (rc != SC_OK) {
        coord_job_clear(&job);
        return rc;
    }
    sc_rpc_client **cli = calloc(n, sizeof *cli);
    Stagecraft__GetTimelineResponse **resp = calloc(n, sizeof *resp);
    coord_trace_lane *lanes = calloc(n, sizeof *lanes);
    coord_trace_event **evs = calloc(n, sizeof *evs);
    if (cli == NULL || resp == NULL || lanes == NULL || evs == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory collecting the trace");
        goto out;
    }
    char first_error[SC_ERR_MSG_MAX] = "";
    /* Round 1 (which also opens each channel): each worker's newest iteration. The window ends
     * at the oldest of those, so that every worker still holds it in round 2 (they keep 32
     * iterations, many more than a window) however fast the job steps meanwhile. */
    uint64_t last = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        sc_err e;
        sc_err_clear(&e);
        sc_rpc_client_cfg cfg = {.tls = c->cfg.tls};
        Stagecraft__GetTimelineResponse *r = NULL;
        uint64_t t0, t1;
        sc_status frc = ws[i].endpoint[0] == '\0'
                            ? SC_ERRF(&e, SC_ERR_NOT_FOUND, "not registered")
                            : sc_rpc_client_new(&cli[i], ws[i].endpoint, &cfg, &e);
        if (frc == SC_OK)
            frc = call_timeline(cli[i], job_id, 1, 0, &r, &t0, &t1, &e);
        if (frc == SC_OK && r->newest_iteration == 0)
            frc = SC_ERRF(&e, SC_ERR_NOT_FOUND, "no iteration recorded yet");
        if (frc == SC_OK && r->newest_iteration < last)
            last = r->newest_iteration;
        if (r != NULL)
            protobuf_c_message_free_unpacked(&r->base, NULL);
        if (frc != SC_OK) {
            note_missing(missing, &ws[i], e.msg, first_error, sizeof first_error);
            sc_rpc_client_destroy(&cli[i]);
        }
    }
    /* Round 2: the window's events; this call's times bracket the worker's clock sample. */
    size_t n_lanes = 0;
    int window = iterations > 0 ? iterations : COORD_TRACE_ITERATIONS;
    for (size_t i = 0; i < n; i++) {
        if (cli[i] == NULL)
            continue;
        sc_err e;
        sc_err_clear(&e);
        uint64_t sent, received;
        if (call_timeline(cli[i], job_id, window, last, &resp[i], &sent, &received, &e) != SC_OK) {
            note_missing(missing, &ws[i], e.msg, first_error, sizeof first_error);
            continue;
        }
        (*answered)++;
        const Stagecraft__GetTimelineResponse *r = resp[i];
        int64_t offset = coord_trace_clock_offset(sent, received, r->worker_now_ns);
        evs[i] = calloc(r->n_events ? r->n_events : 1, sizeof *evs[i]);
        if (evs[i] == NULL) {
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory collecting the trace");
            goto out;
        }
        for (size_t k = 0; k < r->n_events; k++)
            evs[i][k] = (coord_trace_event){(int)r->events[k]->kind, r->events[k]->microbatch,
                                            r->events[k]->step,      r->events[k]->iteration,
                                            r->events[k]->start_ns,  r->events[k]->end_ns};
        lanes[n_lanes++] =
            (coord_trace_lane){ws[i].stage, ws[i].copy, ws[i].id, offset, evs[i], r->n_events};
    }
    if (*answered == 0)
        rc = SC_ERRF(err, SC_ERR_UNAVAILABLE, "no worker of job %s gave its timeline: %s", job_id,
                     first_error);
    else
        rc = coord_trace_build(lanes, n_lanes, job.plan_json, window, json, sum, err);
out:
    for (size_t i = 0; i < n; i++) {
        if (cli != NULL)
            sc_rpc_client_destroy(&cli[i]);
        if (resp != NULL && resp[i] != NULL)
            protobuf_c_message_free_unpacked(&resp[i]->base, NULL);
        if (evs != NULL)
            free(evs[i]);
    }
    free(cli);
    free(resp);
    free(lanes);
    free(evs);
    free(ws);
    coord_job_clear(&job);
    return rc;
}
