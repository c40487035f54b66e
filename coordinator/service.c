/*
 * The Coordinator gRPC service: RegisterWorker, SubmitJob, GetJob, ListJobs, CancelJob,
 * ListWorkers, GetTrace, GetCheckpoint, GetLogs. Handlers run on the RPC layer's pool; they take
 * c->lock only around registry and store work, and build responses in call-owned memory
 * (sc_rpc_ctx_alloc), so nothing they return points into shared state.
 */
#include "coordinator/service.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/command_queue.h"
#include "coordinator/coord_internal.h"
#include "coordinator/freezing.h"
#include "coordinator/jobs.h"
#include "coordinator/jobspec.h"
#include "coordinator/logs.h"
#include "coordinator/plan_inputs.h"
#include "coordinator/speeds.h"
#include "coordinator/tokens.h"
#include "proto/sc_wire.h"

#define LOG "coordinator"

/* protobuf-c allocator that takes memory from the call, so unpacked messages placed in a
 * response live exactly as long as the call. */
static void *ctx_alloc(void *data, size_t size)
{
    return sc_rpc_ctx_alloc(data, size);
}

static void ctx_free(void *data, void *ptr)
{
    (void)data;
    (void)ptr;
}

static sc_status require_client_token(coord *c, sc_rpc_ctx *ctx, const char *what, sc_err *err)
{
    const Stagecraft__Header *h = sc_rpc_ctx_header(ctx);
    bool none = h == NULL || h->token == NULL || h->token[0] == '\0';
    if (none || !coord_token_equal(h->token, c->client_token)) {
        /* logged as a refused join token is: someone is trying, or a client is misconfigured */
        SC_LOG_WARN(LOG, "%s from %s refused: %s client token", what, sc_rpc_ctx_peer(ctx),
                    none ? "no" : "wrong");
        return SC_ERRF(err, SC_ERR_PERMISSION,
                       "%s needs the client token (STAGECRAFT_TOKEN or --token-file; the "
                       "coordinator wrote it to %s)",
                       what, c->client_token_path[0] ? c->client_token_path : "its --token");
    }
    return SC_OK;
}

static sc_status reg_worker(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                            void *user, sc_err *err)
{
    coord *c = user;
    const Stagecraft__RegisterWorkerRequest *req = (const void *)msg;
    bool name_ok = sc_wire_worker_name_valid(req->name);
    if (!coord_token_equal(req->join_token ? req->join_token : "", c->join_token)) {
        SC_LOG_WARN(LOG, "registration of '%s' from %s refused: wrong join token",
                    name_ok ? req->name : "(not a valid name)", sc_rpc_ctx_peer(ctx));
        return SC_ERRF(err, SC_ERR_PERMISSION,
                       "join token refused: start the worker with the coordinator's join token "
                       "(STAGECRAFT_JOIN_TOKEN or --join-token-file)");
    }
    if (!name_ok) {
        /* logged and answered without the name itself: it may hold a newline or an escape */
        SC_LOG_WARN(LOG, "registration from %s refused: not a valid worker name",
                    sc_rpc_ctx_peer(ctx));
        return SC_ERRF(err, SC_ERR_INVALID,
                       "worker name refused: use 1 to %d letters, digits, '-', '_' or '.', not "
                       "starting with '.'",
                       SC_WIRE_MAX_WORKER_NAME);
    }
    if (req->worker_endpoint == NULL || strchr(req->worker_endpoint, ':') == NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "worker_endpoint '%s' is not HOST:PORT of the worker's service",
                       req->worker_endpoint ? req->worker_endpoint : "");

    coord_worker_rec rec;
    memset(&rec, 0, sizeof rec);
    sc_strlcpy(rec.name, req->name, sizeof rec.name);
    sc_strlcpy(rec.id, req->previous_id ? req->previous_id : "", sizeof rec.id);
    rec.epoch = req->epoch;
    sc_strlcpy(rec.host, req->hardware && req->hardware->hostname ? req->hardware->hostname : "",
               sizeof rec.host);
    sc_strlcpy(rec.endpoint, req->worker_endpoint, sizeof rec.endpoint);
    if (c->zap != NULL && req->curve_public_key.len != 32)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "this coordinator's control channel uses CURVE: the registration must "
                       "carry the worker's 32-byte public key (got %zu bytes)",
                       req->curve_public_key.len);
    if (req->hardware)
        SC_CHECK(sc_wire_pack(&req->hardware->base, &rec.hardware, &rec.hardware_len, err));

    Stagecraft__RegisterWorkerResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__register_worker_response__descriptor);
    coord_worker *w;
    pthread_mutex_lock(&c->lock);
    sc_status rc = coord_registry_register(c->registry, &rec, sc_clock_now_ns(), &w, err);
    if (rc == SC_OK) {
        rc = coord_store_worker_put(c->store, &w->rec, err);
        w->has_curve_key = req->curve_public_key.len == 32;
        if (w->has_curve_key)
            memcpy(w->curve_key, req->curve_public_key.data, 32);
        resp->worker_id = sc_rpc_ctx_strdup(ctx, w->rec.id);
        resp->epoch = w->rec.epoch;
        SC_LOG_INFO(LOG, "worker %s ('%s' on %s, %s) registered, epoch %llu", w->rec.id,
                    w->rec.name, w->rec.host, w->rec.endpoint, (unsigned long long)w->rec.epoch);
    }
    resp->heartbeat_interval_ms = coord_registry_config(c->registry)->heartbeat_interval_ms;
    pthread_cond_broadcast(&c->wake); /* a waiting job may now have its workers */
    pthread_mutex_unlock(&c->lock);
    free(rec.hardware);
    if (rc != SC_OK)
        return rc;
    resp->control_endpoint = c->control_endpoint;
    if (c->zap != NULL) {
        resp->server_curve_public_key.data = c->curve_public;
        resp->server_curve_public_key.len = 32;
    }
    *out = &resp->base;
    return SC_OK;
}

static sc_status submit_job(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                            void *user, sc_err *err)
{
    coord *c = user;
    const Stagecraft__SubmitJobRequest *req = (const void *)msg;
    SC_CHECK(require_client_token(c, ctx, "SubmitJob", err));
    const char *text = req->job_json ? req->job_json : "";
    coord_jobspec spec;
    SC_CHECK(coord_jobspec_parse("job", text, strlen(text), &spec, err));
    coord_job job;
    memset(&job, 0, sizeof job);
    sc_strlcpy(job.name, spec.name, sizeof job.name);
    job.spec_json = (char *)text;
    job.steps = spec.steps;
    snprintf(job.reason, sizeof job.reason, "submitted from %s", sc_rpc_ctx_peer(ctx));
    coord_jobspec_clear(&spec);
    pthread_mutex_lock(&c->lock);
    sc_status rc = coord_store_job_insert(c->store, &job, err);
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
    SC_CHECK(rc);
    SC_LOG_INFO(LOG, "job %s ('%s') submitted", job.id, job.name);
    Stagecraft__SubmitJobResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__submit_job_response__descriptor);
    resp->job_id = sc_rpc_ctx_strdup(ctx, job.id);
    *out = &resp->base;
    return SC_OK;
}

static Stagecraft__JobState job_state_to_wire(coord_job_state s)
{
    switch (s) {
    case COORD_JOB_SUBMITTED:
        return STAGECRAFT__JOB_STATE__JOB_SUBMITTED;
    case COORD_JOB_PROFILING:
        return STAGECRAFT__JOB_STATE__JOB_PROFILING;
    case COORD_JOB_PLANNED:
        return STAGECRAFT__JOB_STATE__JOB_PLANNED;
    case COORD_JOB_RUNNING:
        return STAGECRAFT__JOB_STATE__JOB_RUNNING;
    case COORD_JOB_RECOVERING:
        return STAGECRAFT__JOB_STATE__JOB_RECOVERING;
    case COORD_JOB_REBALANCING:
        return STAGECRAFT__JOB_STATE__JOB_REBALANCING;
    case COORD_JOB_SUCCEEDED:
        return STAGECRAFT__JOB_STATE__JOB_SUCCEEDED;
    case COORD_JOB_FAILED:
        return STAGECRAFT__JOB_STATE__JOB_FAILED;
    case COORD_JOB_CANCELLED:
        return STAGECRAFT__JOB_STATE__JOB_CANCELLED;
    default:
        return STAGECRAFT__JOB_STATE__JOB_STATE_UNSPECIFIED;
    }
}

/* Copies a stored job into a call-owned JobInfo; the spec and plan only when `full` (listings
 * stay small: they come with GetJob). */
static Stagecraft__JobInfo *job_info(sc_rpc_ctx *ctx, const coord_job *j, bool full)
{
    Stagecraft__JobInfo *info =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__job_info__descriptor);
    if (info == NULL)
        return NULL;
    info->job_id = sc_rpc_ctx_strdup(ctx, j->id);
    info->name = sc_rpc_ctx_strdup(ctx, j->name);
    info->state = job_state_to_wire(j->state);
    info->reason = sc_rpc_ctx_strdup(ctx, j->reason);
    info->step = j->step;
    info->steps = j->steps;
    if (full) {
        info->spec_json = sc_rpc_ctx_strdup(ctx, j->spec_json ? j->spec_json : "");
        info->plan_json = sc_rpc_ctx_strdup(ctx, j->plan_json ? j->plan_json : "");
    }
    info->last_checkpoint_step = j->last_checkpoint_step;
    info->checkpoint_error = sc_rpc_ctx_strdup(ctx, j->checkpoint_error);
    info->created_unix_ms = j->created_unix_ms;
    info->updated_unix_ms = j->updated_unix_ms;
    return info;
}

/* A stage's place in the job's plan (info->plan_json): its blocks, its workers (one per copy)
 * and its predicted compute time, so that a client other than `stagecraft status` need not
 * parse the plan for them. */
static void stage_from_plan(sc_rpc_ctx *ctx, json_t *plan, Stagecraft__StageStatus *st)
{
    json_t *ps = json_array_get(json_object_get(plan, "stages"), st->stage);
    if (!json_is_object(ps))
        return;
    st->first_block = (uint32_t)json_integer_value(json_object_get(ps, "first_block"));
    st->last_block = (uint32_t)json_integer_value(json_object_get(ps, "last_block"));
    st->predicted_compute_s = json_number_value(json_object_get(ps, "compute_s"));
    st->predicted_memory_bytes = json_number_value(json_object_get(ps, "peak_memory_bytes"));
    json_t *ids = json_object_get(ps, "worker_ids");
    size_t n = json_array_size(ids);
    st->worker_ids = n ? sc_rpc_ctx_alloc(ctx, n * sizeof *st->worker_ids) : NULL;
    for (size_t k = 0; st->worker_ids != NULL && k < n; k++)
        st->worker_ids[k] = sc_rpc_ctx_strdup(ctx, json_string_value(json_array_get(ids, k))
                                                       ? json_string_value(json_array_get(ids, k))
                                                       : "");
    st->n_worker_ids = st->worker_ids != NULL ? n : 0;
}

/* Live figures of a running job: loss, throughput, per-stage busy fraction, measured vs
 * predicted iteration time, each stage's blocks, workers and predicted compute from the plan,
 * its copies' all-reduce as planned and measured, and the links its transfers measure. */
static void add_progress(coord *c, sc_rpc_ctx *ctx, Stagecraft__JobInfo *info)
{
    json_t *plan =
        info->plan_json && info->plan_json[0] ? json_loads(info->plan_json, 0, NULL) : NULL;
    pthread_mutex_lock(&c->lock);
    const coord_progress *p = coord_jobs_progress(c, info->job_id);
    if (p != NULL) {
        info->loss = p->loss;
        info->loss_known = p->loss_known;
        info->loss_scale = p->loss_scale;
        info->skipped_steps = p->skipped_steps;
        info->samples_per_s = p->samples_per_s;
        info->samples_per_s_known = p->samples_per_s > 0; /* set once a window has steps */
        info->predicted_iteration_s = p->predicted_iteration_s;
        info->stages = sc_rpc_ctx_alloc(ctx, (size_t)p->n_stages * sizeof *info->stages);
        for (int s = 0; info->stages && s < p->n_stages; s++) {
            Stagecraft__StageStatus *st =
                (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__stage_status__descriptor);
            st->stage = (uint32_t)s;
            st->busy_fraction = p->iteration_s[s] > 0 ? p->busy_s[s] / p->iteration_s[s] : 0;
            st->measured_compute_s = p->busy_s[s];
            st->predicted_allreduce_s = p->planned_reduce_s[s];
            st->measured_allreduce_s = coord_jobs_reduce_measured_s(c, p, s);
            st->measured_memory_bytes = p->memory_bytes[s];
            stage_from_plan(ctx, plan, st);
            if (p->iteration_s[s] > info->measured_iteration_s)
                info->measured_iteration_s = p->iteration_s[s];
            info->stages[s] = st;
        }
        info->n_stages = info->stages ? (size_t)p->n_stages : 0;
    }
    coord_link_speed links[64];
    size_t nl = coord_speeds_links(c->speeds, info->job_id, links, 64);
    info->links = nl ? sc_rpc_ctx_alloc(ctx, nl * sizeof *info->links) : NULL;
    for (size_t i = 0; info->links != NULL && i < nl; i++) {
        Stagecraft__LinkStatus *l =
            (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__link_status__descriptor);
        l->from_worker = sc_rpc_ctx_strdup(ctx, links[i].from);
        l->to_worker = sc_rpc_ctx_strdup(ctx, links[i].to);
        l->measured_bytes_per_s = links[i].measured;
        l->expected_bytes_per_s = links[i].expected;
        l->reference_bytes_per_s = links[i].reference;
        l->message_bytes = links[i].bytes;
        l->messages_per_step = links[i].messages;
        l->samples = links[i].samples;
        info->links[i] = l;
    }
    info->n_links = info->links != NULL ? nl : 0;
    pthread_mutex_unlock(&c->lock);
    json_decref(plan);
}

/* The job's training series (GetJob's `history`), copied into the call. */
static void add_series(sc_rpc_ctx *ctx, Stagecraft__JobInfo *info, const coord_history_point *pts,
                       size_t n)
{
    if (n == 0)
        return;
    info->history = sc_rpc_ctx_alloc(ctx, n * sizeof *info->history);
    Stagecraft__HistoryPoint *all = sc_rpc_ctx_alloc(ctx, n * sizeof *all);
    if (info->history == NULL || all == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        Stagecraft__HistoryPoint *h = &all[i];
        stagecraft__history_point__init(h);
        h->step = pts[i].step;
        h->loss = pts[i].loss;
        h->has_loss = pts[i].has_loss;
        h->samples_per_s = pts[i].samples_per_s;
        h->samples_per_s_known = pts[i].samples_per_s_known;
        h->iteration_s = pts[i].iteration_s;
        h->at_unix_ms = pts[i].at_unix_ms;
        info->history[i] = h;
    }
    info->n_history = n;
}

static sc_status get_job(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                         void *user, sc_err *err)
{
    coord *c = user;
    const Stagecraft__GetJobRequest *req = (const void *)msg;
    coord_job job;
    coord_transition *hist = NULL;
    size_t n_hist = 0;
    const char *id = req->job_id ? req->job_id : "";
    pthread_mutex_lock(&c->lock);
    sc_status rc = coord_store_job_get(c->store, id, &job, err);
    if (rc == SC_OK)
        coord_store_job_history(c->store, id, &hist, &n_hist, NULL);
    coord_history_point *series = NULL;
    size_t n_series = 0;
    bool found = rc == SC_OK;
    if (rc == SC_OK && req->history)
        rc = coord_store_history_get(c->store, id, &series, &n_series, err);
    int frozen = found ? coord_freezing_frozen(c->freezing, id) : 0;
    pthread_mutex_unlock(&c->lock);
    if (rc != SC_OK && found) {
        coord_job_clear(&job);
        free(hist);
    }
    SC_CHECK(rc);
    Stagecraft__GetJobResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__get_job_response__descriptor);
    resp->job = job_info(ctx, &job, true);
    resp->job->frozen_blocks = frozen > 0 ? (uint32_t)frozen : 0;
    coord_job_clear(&job);
    resp->job->transitions = sc_rpc_ctx_alloc(ctx, (n_hist ? n_hist : 1) * sizeof(void *));
    for (size_t i = 0; resp->job->transitions && i < n_hist; i++) {
        Stagecraft__JobTransition *t =
            (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__job_transition__descriptor);
        t->from_state = sc_rpc_ctx_strdup(ctx, i == 0 ? "" : coord_job_state_name(hist[i].from));
        t->to_state = sc_rpc_ctx_strdup(ctx, coord_job_state_name(hist[i].to));
        t->reason = sc_rpc_ctx_strdup(ctx, hist[i].reason);
        t->at_unix_ms = hist[i].at_unix_ms;
        resp->job->transitions[i] = t;
    }
    resp->job->n_transitions = resp->job->transitions ? n_hist : 0;
    free(hist);
    add_series(ctx, resp->job, series, n_series);
    free(series);
    add_progress(c, ctx, resp->job);
    *out = &resp->base;
    return SC_OK;
}

static sc_status list_jobs(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                           void *user, sc_err *err)
{
    (void)msg;
    coord *c = user;
    coord_job *jobs;
    size_t n;
    pthread_mutex_lock(&c->lock);
    sc_status rc = coord_store_job_list(c->store, &jobs, &n, err);
    pthread_mutex_unlock(&c->lock);
    SC_CHECK(rc);
    Stagecraft__ListJobsResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__list_jobs_response__descriptor);
    resp->jobs = sc_rpc_ctx_alloc(ctx, (n ? n : 1) * sizeof *resp->jobs);
    for (size_t i = 0; i < n; i++) {
        resp->jobs[i] = job_info(ctx, &jobs[i], false);
    }
    resp->n_jobs = n;
    coord_job_list_free(&jobs, n);
    *out = &resp->base;
    return SC_OK;
}

static sc_status cancel_job(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                            void *user, sc_err *err)
{
    coord *c = user;
    const Stagecraft__CancelJobRequest *req = (const void *)msg;
    SC_CHECK(require_client_token(c, ctx, "CancelJob", err));
    const char *id = req->job_id ? req->job_id : "";
    char reason[COORD_REASON_MAX];
    snprintf(reason, sizeof reason, "cancelled from %s%s%s", sc_rpc_ctx_peer(ctx),
             req->reason && req->reason[0] ? ": " : "", req->reason ? req->reason : "");
    coord_job job;
    bool already = false;
    pthread_mutex_lock(&c->lock);
    /* Cancelling twice is not an error: the second answers with the job as the first left it.
     * A job that ended another way has nothing left to cancel, and is told so in those words. */
    sc_status rc = coord_store_job_get(c->store, id, &job, err);
    if (rc == SC_OK && job.state == COORD_JOB_CANCELLED) {
        already = true;
    } else if (rc == SC_OK && (job.state == COORD_JOB_SUCCEEDED || job.state == COORD_JOB_FAILED)) {
        rc = SC_ERRF(err, SC_ERR_PRECONDITION, "job %s already ended (%s: %s): nothing to cancel",
                     id, coord_job_state_name(job.state), job.reason);
        coord_job_clear(&job);
    } else if (rc == SC_OK) {
        bool ran = job.state == COORD_JOB_RUNNING || job.state == COORD_JOB_REBALANCING;
        coord_job_clear(&job);
        rc = coord_store_job_transition(c->store, id, COORD_JOB_CANCELLED, reason, err);
        if (rc == SC_OK)
            rc = coord_store_job_get(c->store, id, &job, err);
        if (rc == SC_OK) {
            /* its workers are told to stop once its last window is kept (at once when it did
             * not run) */
            coord_jobs_trace_end(c, id, 0, ran);
            coord_jobs_release_workers(c, id);
        }
        pthread_cond_broadcast(&c->wake);
    }
    pthread_mutex_unlock(&c->lock);
    SC_CHECK(rc);
    if (already) {
        Stagecraft__CancelJobResponse *resp =
            (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__cancel_job_response__descriptor);
        resp->job = job_info(ctx, &job, true);
        resp->already_cancelled = true;
        coord_job_clear(&job);
        *out = &resp->base;
        return SC_OK;
    }
    SC_LOG_INFO(LOG, "job %s %s", id, reason);
    Stagecraft__CancelJobResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__cancel_job_response__descriptor);
    resp->job = job_info(ctx, &job, true);
    coord_job_clear(&job);
    *out = &resp->base;
    return SC_OK;
}

static sc_status rebalance_job(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                               void *user, sc_err *err)
{
    coord *c = user;
    const Stagecraft__RebalanceJobRequest *req = (const void *)msg;
    /* A dry run changes nothing and shows what status already shows in part: no token, as
     * status and trace need none. A real move changes the job: the client token. */
    if (!req->dry_run)
        SC_CHECK(require_client_token(c, ctx, "RebalanceJob", err));
    coord_rebalance_result res;
    SC_CHECK(coord_jobs_rebalance(c, req->job_id ? req->job_id : "", true, req->dry_run != 0, &res,
                                  err));
    Stagecraft__RebalanceJobResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__rebalance_job_response__descriptor);
    resp->started = res.started;
    resp->plan_json = sc_rpc_ctx_strdup(ctx, res.plan_json ? res.plan_json : "");
    resp->current_iteration_s = res.current_s;
    resp->new_iteration_s = res.new_s;
    resp->predicted_gain = res.gain;
    resp->message = sc_rpc_ctx_strdup(ctx, res.message);
    free(res.plan_json);
    *out = &resp->base;
    return SC_OK;
}

static Stagecraft__WorkerState worker_state_to_wire(coord_worker_state s)
{
    switch (s) {
    case COORD_WORKER_ALIVE:
        return STAGECRAFT__WORKER_STATE__WORKER_ALIVE;
    case COORD_WORKER_SUSPECT:
        return STAGECRAFT__WORKER_STATE__WORKER_SUSPECT;
    case COORD_WORKER_DEAD:
        return STAGECRAFT__WORKER_STATE__WORKER_DEAD;
    }
    return STAGECRAFT__WORKER_STATE__WORKER_STATE_UNSPECIFIED;
}

static sc_status list_workers(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                              void *user, sc_err *err)
{
    (void)msg;
    (void)err;
    coord *c = user;
    ProtobufCAllocator alloc = {ctx_alloc, ctx_free, ctx};
    Stagecraft__ListWorkersResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__list_workers_response__descriptor);
    pthread_mutex_lock(&c->lock);
    size_t n = coord_registry_count(c->registry);
    resp->workers = sc_rpc_ctx_alloc(ctx, (n ? n : 1) * sizeof *resp->workers);
    for (size_t i = 0; i < n; i++) {
        const coord_worker *w = coord_registry_at(c->registry, i);
        Stagecraft__WorkerInfo *info =
            (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__worker_info__descriptor);
        info->id = sc_rpc_ctx_strdup(ctx, w->rec.id);
        info->name = sc_rpc_ctx_strdup(ctx, w->rec.name);
        info->host = sc_rpc_ctx_strdup(ctx, w->rec.host);
        info->endpoint = sc_rpc_ctx_strdup(ctx, w->rec.endpoint);
        info->state = worker_state_to_wire(w->state);
        info->epoch = w->rec.epoch;
        info->job_id = sc_rpc_ctx_strdup(ctx, w->job_id);
        info->activity = sc_rpc_ctx_strdup(ctx, w->reported_state);
        info->last_heartbeat_unix_ms = w->last_heartbeat_unix_ms;
        info->link_bytes_per_s = w->link_bytes_per_s;
        info->link_latency_s = w->link_latency_s;
        info->link_probed_unix_ms = w->link_probed_unix_ms;
        if (w->rec.hardware_len > 0) {
            Stagecraft__HardwareReport *hw =
                stagecraft__hardware_report__unpack(&alloc, w->rec.hardware_len, w->rec.hardware);
            if (hw != NULL) {
                info->devices = hw->devices;
                info->n_devices = hw->n_devices;
            }
        }
        resp->workers[i] = info;
    }
    resp->n_workers = n;
    pthread_mutex_unlock(&c->lock);
    *out = &resp->base;
    return SC_OK;
}

/* The measured timeline of a running job beside its plan (the workers are called without the
 * lock), or the one kept when the job ended (coord_jobs_trace); the trace JSON is copied into
 * the call's memory. */
static sc_status get_trace(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                           void *user, sc_err *err)
{
    coord *c = user;
    const Stagecraft__GetTraceRequest *req = (const void *)msg;
    char *json = NULL;
    coord_trace_summary sum;
    int answered = 0;
    json_t *missing = json_array();
    sc_status rc = coord_jobs_trace(c, req->job_id ? req->job_id : "", (int)req->iterations, &json,
                                    &sum, &answered, missing, err);
    if (rc != SC_OK) {
        json_decref(missing);
        return rc;
    }
    Stagecraft__GetTraceResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__get_trace_response__descriptor);
    resp->trace_json = sc_rpc_ctx_strdup(ctx, json);
    free(json);
    resp->events = (uint32_t)sum.events;
    resp->iterations = (uint32_t)sum.iterations;
    resp->workers = (uint32_t)answered;
    resp->measured_iteration_s = sum.measured_iteration_s;
    resp->planned_iteration_s = sum.planned_iteration_s;
    size_t nm = json_array_size(missing);
    resp->missing = sc_rpc_ctx_alloc(ctx, (nm ? nm : 1) * sizeof *resp->missing);
    for (size_t i = 0; resp->missing != NULL && i < nm; i++)
        resp->missing[i] = sc_rpc_ctx_strdup(ctx, json_string_value(json_array_get(missing, i)));
    resp->n_missing = resp->missing != NULL ? nm : 0;
    json_decref(missing);
    if (resp->trace_json == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory returning the trace");
    *out = &resp->base;
    return SC_OK;
}

/* Where a job's checkpoint can be fetched from (stagecraft export JOB): needs the client token,
 * since what it names are the job's weights. */
static sc_status get_checkpoint(sc_rpc_ctx *ctx, const ProtobufCMessage *msg,
                                ProtobufCMessage **out, void *user, sc_err *err)
{
    coord *c = user;
    const Stagecraft__GetCheckpointRequest *req = (const void *)msg;
    SC_CHECK(require_client_token(c, ctx, "GetCheckpoint", err));
    json_t *src = NULL;
    SC_CHECK(coord_jobs_checkpoint_source(c, req->job_id ? req->job_id : "", req->step, &src, err));
    Stagecraft__GetCheckpointResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__get_checkpoint_response__descriptor);
    resp->step = (uint64_t)json_integer_value(json_object_get(src, "step"));
    resp->model_json =
        sc_rpc_ctx_strdup(ctx, json_string_value(json_object_get(src, "model_json")));
    resp->model_kind =
        sc_rpc_ctx_strdup(ctx, json_string_value(json_object_get(src, "model_kind")));
    json_t *stages = json_object_get(src, "stages");
    size_t ns = json_array_size(stages);
    resp->stages = sc_rpc_ctx_alloc(ctx, (ns ? ns : 1) * sizeof *resp->stages);
    for (size_t s = 0; resp->stages != NULL && s < ns; s++) {
        json_t *js = json_array_get(stages, s), *list = json_object_get(js, "sources");
        Stagecraft__CheckpointStage *st =
            (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__checkpoint_stage__descriptor);
        st->stage = (uint32_t)s;
        st->first_block = (uint32_t)json_integer_value(json_object_get(js, "first_block"));
        st->last_block = (uint32_t)json_integer_value(json_object_get(js, "last_block"));
        size_t nsrc = json_array_size(list);
        st->sources = sc_rpc_ctx_alloc(ctx, (nsrc ? nsrc : 1) * sizeof *st->sources);
        for (size_t k = 0; st->sources != NULL && k < nsrc; k++) {
            json_t *e = json_array_get(list, k);
            Stagecraft__CheckpointSource *cs =
                (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__checkpoint_source__descriptor);
            cs->worker_id =
                sc_rpc_ctx_strdup(ctx, json_string_value(json_object_get(e, "worker_id")));
            cs->endpoint =
                sc_rpc_ctx_strdup(ctx, json_string_value(json_object_get(e, "endpoint")));
            cs->state = sc_rpc_ctx_strdup(ctx, json_string_value(json_object_get(e, "state")));
            st->sources[k] = cs;
        }
        st->n_sources = st->sources != NULL ? nsrc : 0;
        resp->stages[s] = st;
    }
    resp->n_stages = resp->stages != NULL ? ns : 0;
    json_decref(src);
    if (resp->model_json == NULL || resp->model_kind == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory describing the checkpoint");
    *out = &resp->base;
    return SC_OK;
}

/* Workers' recent log lines (logs.h): needs no token, as status needs none. */
static sc_status get_logs(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                          void *user, sc_err *err)
{
    Stagecraft__GetLogsResponse *resp = NULL;
    SC_CHECK(coord_logs_answer(user, ctx, (const Stagecraft__GetLogsRequest *)msg, &resp, err));
    *out = &resp->base;
    return SC_OK;
}

/* What the coordinator plans with (plan_inputs.h): needs no token, as a dry rebalance needs
 * none; it may profile idle workers, as a submitted job would. */
static sc_status get_plan_inputs(sc_rpc_ctx *ctx, const ProtobufCMessage *msg,
                                 ProtobufCMessage **out, void *user, sc_err *err)
{
    Stagecraft__GetPlanInputsResponse *resp = NULL;
    SC_CHECK(coord_plan_inputs_answer(user, ctx, (const Stagecraft__GetPlanInputsRequest *)msg,
                                      &resp, err));
    *out = &resp->base;
    return SC_OK;
}

#define METHOD(svc, name, lower, handler)                                                          \
    {                                                                                              \
        "/stagecraft." svc "/" name, &stagecraft__##lower##_request__descriptor,                   \
            &stagecraft__##lower##_response__descriptor, handler, NULL, NULL                       \
    }

const sc_rpc_method coord_service_methods[] = {
    METHOD("Coordinator", "RegisterWorker", register_worker, reg_worker),
    METHOD("Coordinator", "SubmitJob", submit_job, submit_job),
    METHOD("Coordinator", "GetJob", get_job, get_job),
    METHOD("Coordinator", "ListJobs", list_jobs, list_jobs),
    METHOD("Coordinator", "CancelJob", cancel_job, cancel_job),
    METHOD("Coordinator", "RebalanceJob", rebalance_job, rebalance_job),
    METHOD("Coordinator", "ListWorkers", list_workers, list_workers),
    METHOD("Coordinator", "GetTrace", get_trace, get_trace),
    METHOD("Coordinator", "GetCheckpoint", get_checkpoint, get_checkpoint),
    METHOD("Coordinator", "GetLogs", get_logs, get_logs),
    METHOD("Coordinator", "GetPlanInputs", get_plan_inputs, get_plan_inputs),
};
const size_t coord_service_n_methods = sizeof coord_service_methods / sizeof *coord_service_methods;

sc_status coord_service_call(struct coord *c, const char *method, const ProtobufCMessage *req,
                             const char *peer, sc_rpc_local **call, ProtobufCMessage **resp,
                             sc_err *err)
{
    for (size_t i = 0; i < coord_service_n_methods; i++)
        if (strcmp(coord_service_methods[i].name, method) == 0)
            return sc_rpc_local_call(&coord_service_methods[i], c, req, peer, call, resp, err);
    *call = NULL;
    *resp = NULL;
    return SC_ERRF(err, SC_ERR_NOT_FOUND, "no method %s in the Coordinator service", method);
}
