/*
 * Workers' recent log lines through the coordinator (logs.h): resolve, ask every worker at once,
 * copy the answers into the call.
 */
#include "coordinator/logs.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/coord_internal.h"

#define LOGS_MAX_WORKERS (COORD_MAX_STAGES * COORD_MAX_REPLICAS)

typedef struct {
    char id[COORD_ID_MAX];
    char name[COORD_NAME_MAX];
    char endpoint[COORD_NAME_MAX];
    /* the call (ask_main, one thread per worker) */
    const sc_rpc_tls *tls;
    uint32_t lines;
    uint64_t after_seq;
    Stagecraft__ReadLogResponse *resp; /* NULL when it failed: err says why */
    sc_err err;
} logs_worker;

/* Under c->lock: appends registry worker `id` to ws[*n] unless it is there already. */
static void add_worker(coord *c, const char *id, logs_worker *ws, size_t *n)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(ws[i].id, id) == 0)
            return;
    if (*n >= LOGS_MAX_WORKERS)
        return;
    logs_worker *w = &ws[(*n)++];
    sc_strlcpy(w->id, id, sizeof w->id);
    const coord_worker *cw = coord_registry_find(c->registry, id);
    if (cw != NULL) {
        sc_strlcpy(w->name, cw->rec.name, sizeof w->name);
        sc_strlcpy(w->endpoint, cw->rec.endpoint, sizeof w->endpoint);
    }
}

/* Under c->lock: the workers of job `job`: those of its plan's stages, in order, else those
 * it was given (a job between plans). */
static void job_workers(coord *c, const coord_job *job, logs_worker *ws, size_t *n)
{
    json_t *plan = job->plan_json != NULL ? json_loads(job->plan_json, 0, NULL) : NULL;
    size_t si, k;
    json_t *st, *id;
    json_array_foreach(json_object_get(plan, "stages"), si, st)
    {
        json_array_foreach(json_object_get(st, "worker_ids"), k, id)
        {
            if (json_is_string(id))
                add_worker(c, json_string_value(id), ws, n);
        }
    }
    json_decref(plan);
    char *ids = job->worker_ids != NULL ? strdup(job->worker_ids) : NULL, *save = NULL;
    for (char *w = ids != NULL && *n == 0 ? strtok_r(ids, ",", &save) : NULL; w != NULL;
         w = strtok_r(NULL, ",", &save))
        add_worker(c, w, ws, n);
    free(ids);
}

/* Under c->lock: the workers `target` names into ws[*n]. */
static sc_status resolve(coord *c, const char *target, logs_worker *ws, size_t *n, sc_err *err)
{
    *n = 0;
    if (coord_registry_find(c->registry, target) != NULL) {
        add_worker(c, target, ws, n);
        return SC_OK;
    }
    const coord_worker *named = coord_registry_find_name(c->registry, target);
    if (named != NULL) {
        add_worker(c, named->rec.id, ws, n);
        return SC_OK;
    }
    coord_job job;
    memset(&job, 0, sizeof job);
    if (coord_store_job_get(c->store, target, &job, NULL) != SC_OK)
        return SC_ERRF(err, SC_ERR_NOT_FOUND,
                       "no worker or job '%.128s': give a worker id (w-1) or name, as "
                       "`stagecraft workers` lists them, or a job id (job-1), as `stagecraft "
                       "status` lists them",
                       target);
    job_workers(c, &job, ws, n);
    sc_status rc = SC_OK;
    if (*n == 0)
        rc = SC_ERRF(err, SC_ERR_PRECONDITION,
                     "job %s is %s and has no workers yet: its workers are known once it is "
                     "planned",
                     job.id, coord_job_state_name(job.state));
    coord_job_clear(&job);
    return rc;
}

static void *ask_main(void *arg)
{
    logs_worker *w = arg;
    sc_err_clear(&w->err);
    w->resp = NULL;
    if (w->endpoint[0] == '\0') {
        SC_ERRF(&w->err, SC_ERR_NOT_FOUND, "not registered with this coordinator");
        return NULL;
    }
    sc_rpc_client *cli = NULL;
    sc_rpc_client_cfg cfg = {.tls = *w->tls};
    if (sc_rpc_client_new(&cli, w->endpoint, &cfg, &w->err) != SC_OK)
        return NULL;
    Stagecraft__ReadLogRequest req = STAGECRAFT__READ_LOG_REQUEST__INIT;
    req.lines = w->lines;
    req.after_seq = w->after_seq;
    ProtobufCMessage *m = NULL;
    sc_err why;
    sc_err_clear(&why);
    sc_status rc =
        sc_rpc_call(cli, "/stagecraft.Worker/ReadLog", &req.base,
                    &stagecraft__read_log_response__descriptor, &m, COORD_LOGS_TIMEOUT_MS, &why);
    if (rc == SC_OK)
        w->resp = (Stagecraft__ReadLogResponse *)m;
    else if (rc == SC_ERR_TIMEOUT) /* the RPC layer's guesses are about a wrong address */
        SC_ERRF(&w->err, rc,
                "did not answer within %d ms (its process may be stopped, hung or overloaded, "
                "or its host unreachable; it is at %s)",
                COORD_LOGS_TIMEOUT_MS, w->endpoint);
    else
        SC_ERRF(&w->err, rc, "%s", why.msg);
    sc_rpc_client_destroy(&cli);
    return NULL;
}

/* Asks every worker at once (a thread each; one that cannot start is asked here). */
static void ask_all(logs_worker *ws, size_t n)
{
    pthread_t th[LOGS_MAX_WORKERS];
    bool started[LOGS_MAX_WORKERS];
    for (size_t i = 0; i < n; i++)
        started[i] = pthread_create(&th[i], NULL, ask_main, &ws[i]) == 0;
    for (size_t i = 0; i < n; i++) {
        if (started[i])
            pthread_join(th[i], NULL);
        else
            ask_main(&ws[i]);
    }
}

/* Copies worker w's answer (or its error) into the call's memory. */
static Stagecraft__WorkerLog *to_entry(sc_rpc_ctx *ctx, const logs_worker *w)
{
    Stagecraft__WorkerLog *e =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__worker_log__descriptor);
    if (e == NULL)
        return NULL;
    e->worker_id = sc_rpc_ctx_strdup(ctx, w->id);
    e->name = sc_rpc_ctx_strdup(ctx, w->name);
    if (w->resp == NULL) {
        e->error = sc_rpc_ctx_strdup(ctx, w->err.msg[0] ? w->err.msg : "no answer");
        return e;
    }
    size_t n = w->resp->n_lines;
    e->lines = sc_rpc_ctx_alloc(ctx, (n ? n : 1) * sizeof *e->lines);
    Stagecraft__LogLine *all = sc_rpc_ctx_alloc(ctx, (n ? n : 1) * sizeof *all);
    if (e->lines == NULL || all == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        stagecraft__log_line__init(&all[i]);
        all[i].seq = w->resp->lines[i]->seq;
        all[i].text = sc_rpc_ctx_strdup(ctx, w->resp->lines[i]->text);
        e->lines[i] = &all[i];
    }
    e->n_lines = n;
    e->newest_seq = w->resp->newest_seq;
    return e;
}

sc_status coord_logs_answer(struct coord *c, sc_rpc_ctx *ctx, const Stagecraft__GetLogsRequest *req,
                            Stagecraft__GetLogsResponse **out, sc_err *err)
{
    *out = NULL;
    const char *target = req->target != NULL ? req->target : "";
    if (target[0] == '\0')
        return SC_ERRF(err, SC_ERR_INVALID, "GetLogs needs a worker id or name, or a job id");
    if (req->lines > COORD_LOGS_MAX_LINES)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "%u lines asked for: a worker keeps at most %d (give 1 to %d)", req->lines,
                       COORD_LOGS_MAX_LINES, COORD_LOGS_MAX_LINES);
    logs_worker *ws = calloc(LOGS_MAX_WORKERS, sizeof *ws);
    if (ws == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory asking for log lines");
    size_t n = 0;
    pthread_mutex_lock(&c->lock);
    sc_status rc = resolve(c, target, ws, &n, err);
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        ws[i].tls = &c->cfg.tls;
        ws[i].lines = req->lines ? req->lines : COORD_LOGS_DEFAULT_LINES;
        for (size_t k = 0; k < req->n_after; k++)
            if (req->after[k] != NULL && req->after[k]->worker_id != NULL &&
                strcmp(req->after[k]->worker_id, ws[i].id) == 0)
                ws[i].after_seq = req->after[k]->after_seq;
    }
    if (rc == SC_OK)
        ask_all(ws, n);
    Stagecraft__GetLogsResponse *resp = NULL;
    if (rc == SC_OK) {
        resp = (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__get_logs_response__descriptor);
        if (resp != NULL)
            resp->workers = sc_rpc_ctx_alloc(ctx, (n ? n : 1) * sizeof *resp->workers);
        for (size_t i = 0; resp != NULL && resp->workers != NULL && i < n; i++)
            if ((resp->workers[resp->n_workers] = to_entry(ctx, &ws[i])) != NULL)
                resp->n_workers++;
        if (resp == NULL || resp->workers == NULL || resp->n_workers < n)
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory returning log lines");
    }
    for (size_t i = 0; i < n; i++)
        if (ws[i].resp != NULL)
            protobuf_c_message_free_unpacked(&ws[i].resp->base, NULL);
    free(ws);
    if (rc == SC_OK)
        *out = resp;
    return rc;
}
