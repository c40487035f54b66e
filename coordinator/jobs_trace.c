/*
 * A running job's measured timeline: asks every worker of its plan for the events of its stage
 * (Worker.GetTimeline), estimates each worker's clock offset from that call, and builds the
 * trace with the plan beside it (trace.h).
 * The workers are asked at once, one thread each, after each has opened its channel, so that
 * the iterations their rings hold (they keep 64) overlap even when the job steps every
 * millisecond; the trace's window is the iterations every worker holds.
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
    /* the fetch (fetch_main, one thread per worker) */
    const coord *c;
    const char *job_id;
    pthread_barrier_t *ready;
    Stagecraft__GetTimelineResponse *resp; /* NULL when it failed: err says why */
    int64_t offset_ns;
    sc_err err;
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
                               Stagecraft__GetTimelineResponse **resp, uint64_t *sent_ns,
                               uint64_t *received_ns, sc_err *err)
{
    Stagecraft__GetTimelineRequest req = STAGECRAFT__GET_TIMELINE_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.iterations = (uint32_t)iterations;
    ProtobufCMessage *m = NULL;
    *sent_ns = sc_clock_now_ns();
    sc_status rc =
        sc_rpc_call(cli, "/stagecraft.Worker/GetTimeline", &req.base,
                    &stagecraft__get_timeline_response__descriptor, &m, TIMELINE_TIMEOUT_MS, err);
    *received_ns = sc_clock_now_ns();
    *resp = (Stagecraft__GetTimelineResponse *)m;
    return rc;
}

/* One worker's fetch: a first call of one iteration opens the channel (so that the second's two
 * legs take like times), every fetch waits for the others' first call, then the second call
 * takes everything the worker keeps and brackets its clock sample. */
static void *fetch_main(void *arg)
{
    trace_worker *w = arg;
    sc_err_clear(&w->err);
    sc_rpc_client *cli = NULL;
    sc_rpc_client_cfg cfg = {.tls = w->c->cfg.tls};
    Stagecraft__GetTimelineResponse *r = NULL;
    uint64_t sent = 0, received = 0;
    sc_status rc = w->endpoint[0] == '\0' ? SC_ERRF(&w->err, SC_ERR_NOT_FOUND, "not registered")
                                          : sc_rpc_client_new(&cli, w->endpoint, &cfg, &w->err);
    if (rc == SC_OK)
        rc = call_timeline(cli, w->job_id, 1, &r, &sent, &received, &w->err);
    if (r != NULL)
        protobuf_c_message_free_unpacked(&r->base, NULL);
    r = NULL;
    pthread_barrier_wait(w->ready);
    if (rc == SC_OK)
        rc = call_timeline(cli, w->job_id, 0, &r, &sent, &received, &w->err);
    sc_rpc_client_destroy(&cli);
    if (rc != SC_OK) {
        if (r != NULL)
            protobuf_c_message_free_unpacked(&r->base, NULL);
        return NULL;
    }
    w->resp = r;
    w->offset_ns = coord_trace_clock_offset(sent, received, r->worker_now_ns);
    return NULL;
}

/* Fetches every worker's timeline at once (a thread each); ws[i].resp or ws[i].err. */
static sc_status fetch_all(const coord *c, const char *job_id, trace_worker *ws, size_t n,
                           sc_err *err)
{
    pthread_t *th = calloc(n, sizeof *th);
    pthread_barrier_t ready;
    if (th == NULL || pthread_barrier_init(&ready, NULL, (unsigned)n) != 0) {
        free(th);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory collecting the trace");
    }
    size_t started = 0;
    for (size_t i = 0; i < n; i++) {
        ws[i].c = c;
        ws[i].job_id = job_id;
        ws[i].ready = &ready;
        ws[i].resp = NULL;
    }
    for (; started < n; started++)
        if (pthread_create(&th[started], NULL, fetch_main, &ws[started]) != 0)
            break;
    /* a thread that did not start: run its fetch here (it joins the barrier like the others) */
    for (size_t i = started; i < n; i++)
        fetch_main(&ws[i]);
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&ready);
    free(th);
    return SC_OK;
}

/* The workers' timelines as lanes (one per worker that answered, *n_lanes of them), into
 * `lanes` and `evs` (per worker, freed by the caller); a worker that did not answer goes to
 * `missing`, the first one's line into first_error. */
static sc_status to_lanes(const trace_worker *ws, size_t n, coord_trace_lane *lanes,
                          coord_trace_event **evs, size_t *n_lanes, json_t *missing,
                          char *first_error, size_t size, sc_err *err)
{
    *n_lanes = 0;
    for (size_t i = 0; i < n; i++) {
        const Stagecraft__GetTimelineResponse *r = ws[i].resp;
        if (r == NULL) {
            char line[SC_ERR_MSG_MAX + 128];
            snprintf(line, sizeof line, "%s (stage %d copy %d): %s", ws[i].id, ws[i].stage,
                     ws[i].copy, ws[i].err.msg);
            json_array_append_new(missing, json_string(line));
            if (first_error[0] == '\0')
                sc_strlcpy(first_error, line, size);
            continue;
        }
        evs[i] = calloc(r->n_events ? r->n_events : 1, sizeof *evs[i]);
        if (evs[i] == NULL)
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory collecting the trace");
        for (size_t k = 0; k < r->n_events; k++)
            evs[i][k] = (coord_trace_event){(int)r->events[k]->kind, r->events[k]->microbatch,
                                            r->events[k]->step,      r->events[k]->iteration,
                                            r->events[k]->start_ns,  r->events[k]->end_ns};
        lanes[(*n_lanes)++] = (coord_trace_lane){ws[i].stage,     ws[i].copy, ws[i].id,
                                                 ws[i].offset_ns, evs[i],     r->n_events};
    }
    return SC_OK;
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
    coord_trace_lane *lanes = rc == SC_OK ? calloc(n, sizeof *lanes) : NULL;
    coord_trace_event **evs = rc == SC_OK ? calloc(n, sizeof *evs) : NULL;
    if (rc == SC_OK && (lanes == NULL || evs == NULL))
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory collecting the trace");
    if (rc == SC_OK)
        rc = fetch_all(c, job_id, ws, n, err);
    char first_error[SC_ERR_MSG_MAX] = "";
    size_t n_lanes = 0;
    if (rc == SC_OK)
        rc = to_lanes(ws, n, lanes, evs, &n_lanes, missing, first_error, sizeof first_error, err);
    if (rc == SC_OK && n_lanes == 0)
        rc = SC_ERRF(err, SC_ERR_UNAVAILABLE, "no worker of job %s gave its timeline: %s", job_id,
                     first_error);
    if (rc == SC_OK) {
        *answered = (int)n_lanes;
        rc =
            coord_trace_build(lanes, n_lanes, job.plan_json,
                              iterations > 0 ? iterations : COORD_TRACE_ITERATIONS, json, sum, err);
    }
    for (size_t i = 0; i < n; i++) {
        if (ws[i].resp != NULL)
            protobuf_c_message_free_unpacked(&ws[i].resp->base, NULL);
        if (evs != NULL)
            free(evs[i]);
    }
    free(lanes);
    free(evs);
    free(ws);
    coord_job_clear(&job);
    return rc;
}
