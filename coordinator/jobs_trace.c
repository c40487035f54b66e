/*
 * A job's measured timeline: asks every worker of its plan for the events of its stage
 * (Worker.GetTimeline), estimates each worker's clock offset from that call, and builds the
 * trace with the plan beside it (trace.h).
 * The workers are asked at once, one thread each, after each has opened its channel, so that
 * the iterations their rings hold (they keep 64) overlap even when the job steps every
 * millisecond; the trace's window is the iterations every worker holds.
 * A job that ends (succeeds, fails, is cancelled) has its last window fetched the same way just
 * before its workers are told to drop their stages (coord_jobs_trace_end, on a thread of its
 * own), and kept in the store, so that a trace of an ended job answers from there.
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
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/trace.h"

#define TIMELINE_TIMEOUT_MS 2000 /* per call: a worker that hangs costs this once */
/* per call when a job ends: its STOP waits for the fetch, so a dead worker delays the release
 * of the others by at most two of these (the fetch's two calls) */
#define KEEP_TIMEOUT_MS 1000

typedef struct {
    int stage, copy;
    char id[COORD_ID_MAX];
    char endpoint[COORD_NAME_MAX];
    /* the fetch (fetch_main, one thread per worker) */
    const coord *c;
    const char *job_id;
    int iterations; /* of the second call (0: all the worker keeps) */
    int timeout_ms; /* per call */
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
                               int timeout_ms, Stagecraft__GetTimelineResponse **resp,
                               uint64_t *sent_ns, uint64_t *received_ns, sc_err *err)
{
    Stagecraft__GetTimelineRequest req = STAGECRAFT__GET_TIMELINE_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.iterations = (uint32_t)iterations;
    ProtobufCMessage *m = NULL;
    *sent_ns = sc_clock_now_ns();
    sc_status rc = sc_rpc_call(cli, "/stagecraft.Worker/GetTimeline", &req.base,
                               &stagecraft__get_timeline_response__descriptor, &m, timeout_ms, err);
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
        rc = call_timeline(cli, w->job_id, 1, w->timeout_ms, &r, &sent, &received, &w->err);
    if (r != NULL)
        protobuf_c_message_free_unpacked(&r->base, NULL);
    r = NULL;
    pthread_barrier_wait(w->ready);
    if (rc == SC_OK)
        rc = call_timeline(cli, w->job_id, w->iterations, w->timeout_ms, &r, &sent, &received,
                           &w->err);
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
static sc_status fetch_all(const coord *c, const char *job_id, int iterations, int timeout_ms,
                           trace_worker *ws, size_t n, sc_err *err)
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
        ws[i].iterations = iterations;
        ws[i].timeout_ms = timeout_ms;
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

/* The trace of job `job_id` under `plan_json` from its workers `ws` (n of them, their endpoints
 * filled): coord_jobs_trace's contract, without the job's state. Without c->lock. */
static sc_status collect(const coord *c, const char *job_id, const char *plan_json, int iterations,
                         int fetch_iterations, int timeout_ms, trace_worker *ws, size_t n,
                         char **json, coord_trace_summary *sum, int *answered, json_t *missing,
                         sc_err *err)
{
    coord_trace_lane *lanes = calloc(n, sizeof *lanes);
    coord_trace_event **evs = calloc(n, sizeof *evs);
    sc_status rc = SC_OK;
    if (lanes == NULL || evs == NULL)
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory collecting the trace");
    if (rc == SC_OK)
        rc = fetch_all(c, job_id, fetch_iterations, timeout_ms, ws, n, err);
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
            coord_trace_build(lanes, n_lanes, plan_json,
                              iterations > 0 ? iterations : COORD_TRACE_ITERATIONS, json, sum, err);
    }
    for (size_t i = 0; i < n; i++) {
        if (ws[i].resp != NULL)
            protobuf_c_message_free_unpacked(&ws[i].resp->base, NULL);
        ws[i].resp = NULL;
        if (evs != NULL)
            free(evs[i]);
    }
    free(lanes);
    free(evs);
    return rc;
}

/* Under c->lock: the trace kept when job `job` ended (coord_jobs_trace's outputs), or
 * SC_ERR_PRECONDITION naming its state when none was kept. */
static sc_status kept_trace(coord *c, const coord_job *job, char **json, coord_trace_summary *sum,
                            int *answered, json_t *missing, sc_err *err)
{
    char *meta_json = NULL;
    sc_err none;
    sc_err_clear(&none);
    sc_status rc = coord_store_trace_get(c->store, job->id, json, &meta_json, &none);
    if (rc == SC_ERR_NOT_FOUND && !coord_job_state_terminal(job->state))
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "job %s is %s: a trace needs a running job, whose workers hold its "
                       "stages, or one that ended after it ran",
                       job->id, coord_job_state_name(job->state));
    if (rc == SC_ERR_NOT_FOUND)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "job %s is %s and no trace of it was kept (it ran no stage, or none of "
                       "its workers answered when it ended): a trace needs a running job, or "
                       "one that ran before it ended",
                       job->id, coord_job_state_name(job->state));
    if (rc != SC_OK)
        return SC_ERRF(err, rc, "%s", none.msg);
    json_t *meta = json_loads(meta_json, 0, NULL);
    free(meta_json);
    if (meta == NULL) {
        free(*json);
        *json = NULL;
        return SC_ERRF(err, SC_ERR_PARSE, "the trace kept for job %s has unreadable figures",
                       job->id);
    }
    memset(sum, 0, sizeof *sum);
    sum->events = (int)json_integer_value(json_object_get(meta, "events"));
    sum->iterations = (int)json_integer_value(json_object_get(meta, "iterations"));
    sum->measured_iteration_s = json_number_value(json_object_get(meta, "measured_iteration_s"));
    sum->planned_iteration_s = json_number_value(json_object_get(meta, "planned_iteration_s"));
    *answered = (int)json_integer_value(json_object_get(meta, "workers"));
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(meta, "missing"), i, m)
    {
        json_array_append(missing, m);
    }
    json_decref(meta);
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
    /* a job whose stages train on to a move's pause still runs them */
    const coord_progress *pausing =
        rc == SC_OK && job.state == COORD_JOB_REBALANCING ? coord_jobs_progress(c, job_id) : NULL;
    bool kept = rc == SC_OK && job.state != COORD_JOB_RUNNING &&
                !(pausing != NULL && pausing->pause_step != 0 && !coord_jobs_pause_done(pausing));
    if (kept) /* an ended job (or one between runs): what was kept when it last ended */
        rc = kept_trace(c, &job, json, sum, answered, missing, err);
    else if (rc == SC_OK)
        rc = plan_workers(c, job.plan_json, &ws, &n, err);
    pthread_mutex_unlock(&c->lock);
    if (rc == SC_OK && !kept)
        rc = collect(c, job_id, job.plan_json, iterations, 0, TIMELINE_TIMEOUT_MS, ws, n, json, sum,
                     answered, missing, err);
    free(ws);
    coord_job_clear(&job);
    return rc;
}

/* What a job's end hands its keeper thread. */
typedef struct {
    coord *c;
    char job_id[COORD_ID_MAX];
    char *plan_json;
    char *worker_ids; /* comma-separated: told to STOP once the window is fetched */
    uint64_t stop_step;
    bool fetch;
    trace_worker *ws; /* [n] */
    size_t n;
} keeper;

/* Under c->lock: STOP to every worker of k->worker_ids. */
static void stop_workers(coord *c, const keeper *k)
{
    char *ids = strdup(k->worker_ids != NULL ? k->worker_ids : ""), *save = NULL;
    for (char *w = ids != NULL ? strtok_r(ids, ",", &save) : NULL; w != NULL;
         w = strtok_r(NULL, ",", &save))
        coord_queue_command_locked(c, w, STAGECRAFT__COMMAND_KIND__COMMAND_STOP, k->job_id,
                                   k->stop_step, NULL, NULL);
    free(ids);
}

static void keeper_free(keeper *k)
{
    free(k->plan_json);
    free(k->worker_ids);
    free(k->ws);
    free(k);
}

/* The figures GetTrace answers with beside the kept trace. */
static char *meta_of(const coord_trace_summary *sum, int answered, json_t *missing)
{
    json_t *meta = json_pack("{s:i, s:i, s:i, s:f, s:f, s:O}", "events", sum->events, "iterations",
                             sum->iterations, "workers", answered, "measured_iteration_s",
                             sum->measured_iteration_s, "planned_iteration_s",
                             sum->planned_iteration_s, "missing", missing);
    char *s = meta != NULL ? json_dumps(meta, JSON_COMPACT) : NULL;
    json_decref(meta);
    return s;
}

/* The keeper thread (detached; in c->driving while it runs, so that the coordinator's stop
 * waits for it): fetches the job's last window, keeps it, then lets the workers go. */
static void *keeper_main(void *arg)
{
    keeper *k = arg;
    coord *c = k->c;
    char *json = NULL, *meta = NULL;
    coord_trace_summary sum;
    int answered = 0;
    json_t *missing = json_array();
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = k->fetch && missing != NULL ? SC_OK : SC_ERR_PRECONDITION;
    if (rc == SC_OK)
        rc = collect(c, k->job_id, k->plan_json, COORD_TRACE_ITERATIONS, COORD_TRACE_ITERATIONS,
                     KEEP_TIMEOUT_MS, k->ws, k->n, &json, &sum, &answered, missing, &err);
    if (rc == SC_OK && (meta = meta_of(&sum, answered, missing)) == NULL)
        rc = SC_ERRF(&err, SC_ERR_NOMEM, "out of memory keeping the trace");
    json_decref(missing);
    pthread_mutex_lock(&c->lock);
    if (rc == SC_OK)
        rc = coord_store_trace_put(c->store, k->job_id, json, meta, &err);
    if (rc == SC_OK)
        SC_LOG_INFO("jobs", "job %s: kept the trace of its last %d iterations (%d workers)",
                    k->job_id, sum.iterations, answered);
    else if (k->fetch)
        SC_LOG_WARN("jobs", "job %s: no trace kept: %s", k->job_id, err.msg);
    stop_workers(c, k);
    for (size_t i = 0; i < c->n_driving; i++) {
        if (strcmp(c->driving[i], k->job_id) == 0) {
            memcpy(c->driving[i], c->driving[--c->n_driving], COORD_ID_MAX);
            break;
        }
    }
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
    free(json);
    free(meta);
    keeper_free(k);
    return NULL;
}

void coord_jobs_trace_end(coord *c, const char *job_id, uint64_t stop_step, bool fetch)
{
    coord_job job;
    memset(&job, 0, sizeof job);
    keeper *k = calloc(1, sizeof *k);
    if (k == NULL || coord_store_job_get(c->store, job_id, &job, NULL) != SC_OK) {
        free(k);
        return;
    }
    k->c = c;
    sc_strlcpy(k->job_id, job_id, sizeof k->job_id);
    k->stop_step = stop_step;
    k->worker_ids = job.worker_ids;
    k->plan_json = job.plan_json;
    job.worker_ids = job.plan_json = NULL;
    coord_job_clear(&job);
    sc_err err;
    sc_err_clear(&err);
    k->fetch = fetch && !c->stopping && k->plan_json != NULL && c->n_driving < COORD_MAX_DRIVING &&
               plan_workers(c, k->plan_json, &k->ws, &k->n, &err) == SC_OK;
    pthread_attr_t attr;
    pthread_t t;
    bool started = false;
    if (k->fetch && pthread_attr_init(&attr) == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        sc_strlcpy(c->driving[c->n_driving++], job_id, COORD_ID_MAX);
        started = pthread_create(&t, &attr, keeper_main, k) == 0;
        if (!started)
            c->n_driving--;
        pthread_attr_destroy(&attr);
    }
    if (!started) { /* no window to fetch (or no thread to fetch it): the workers go now */
        stop_workers(c, k);
        keeper_free(k);
    }
}
