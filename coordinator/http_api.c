/*
 * The coordinator's JSON routes (/api/...): each asks the Coordinator service in process
 * (http_fetch.c) and answers with the view the CLI prints for the same question
 * (proto/sc_view.h), so `status --json`, `workers --json`, `logs --json`, `trace` and the page
 * cannot drift apart. No route changes anything.
 */
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/http_internal.h"
#include "coordinator/service.h"
#include "proto/sc_view.h"

#define JOB_ID_MAX 128
#define TRACE_ITERATIONS_MAX 64

static const char paths[] = "/api/cluster, /api/workers, /api/jobs, /api/jobs/JOB, "
                            "/api/jobs/JOB/history, /api/jobs/JOB/trace, /api/logs/WORKER and "
                            "/api/logs/JOB";

static enum MHD_Result api_workers(coord_http *h, struct MHD_Connection *conn)
{
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_local *call;
    const Stagecraft__ListWorkersResponse *resp;
    sc_status rc = coord_http_fetch_workers(h, &call, &resp, &err);
    if (rc != SC_OK)
        return coord_http_send_error(h, conn, coord_http_status_of(rc), "%s", err.msg);
    json_t *o = sc_view_workers(resp);
    sc_rpc_local_free(&call);
    return coord_http_send_json(h, conn, MHD_HTTP_OK, o);
}

static enum MHD_Result api_jobs(coord_http *h, struct MHD_Connection *conn)
{
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_local *call;
    ProtobufCMessage *m;
    Stagecraft__ListJobsRequest req = STAGECRAFT__LIST_JOBS_REQUEST__INIT;
    sc_status rc = coord_service_call(h->coord, "/stagecraft.Coordinator/ListJobs", &req.base,
                                      "http", &call, &m, &err);
    if (rc != SC_OK)
        return coord_http_send_error(h, conn, coord_http_status_of(rc), "%s", err.msg);
    json_t *o = sc_view_jobs((const Stagecraft__ListJobsResponse *)m);
    sc_rpc_local_free(&call);
    return coord_http_send_json(h, conn, MHD_HTTP_OK, o);
}

/* /api/cluster: the servers with their workers and devices, each worker's probed path to the
 * coordinator, and the links the live jobs measure between their workers (sc_view_cluster). */
static enum MHD_Result api_cluster(coord_http *h, struct MHD_Connection *conn)
{
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_local *call;
    const Stagecraft__ListWorkersResponse *workers;
    sc_status rc = coord_http_fetch_workers(h, &call, &workers, &err);
    if (rc != SC_OK)
        return coord_http_send_error(h, conn, coord_http_status_of(rc), "%s", err.msg);
    coord_http_jobs jobs;
    rc = coord_http_fetch_jobs(h, &jobs, &err);
    if (rc != SC_OK) {
        sc_rpc_local_free(&call);
        return coord_http_send_error(h, conn, coord_http_status_of(rc), "%s", err.msg);
    }
    json_t *o = sc_view_cluster(workers, jobs.jobs, jobs.n);
    coord_http_jobs_free(&jobs);
    sc_rpc_local_free(&call);
    return coord_http_send_json(h, conn, MHD_HTTP_OK, o);
}

/* /api/jobs/JOB: the object of `status JOB --json`; /api/jobs/JOB/history (`history`): the
 * job's id, state and step with its training series, as `status JOB --history --json` has it. */
static enum MHD_Result api_job(coord_http *h, struct MHD_Connection *conn, const char *id,
                               bool history)
{
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_local *call;
    ProtobufCMessage *m;
    Stagecraft__GetJobRequest req = STAGECRAFT__GET_JOB_REQUEST__INIT;
    req.job_id = (char *)id;
    req.history = history;
    sc_status rc = coord_service_call(h->coord, "/stagecraft.Coordinator/GetJob", &req.base, "http",
                                      &call, &m, &err);
    if (rc != SC_OK)
        return coord_http_send_error(h, conn, coord_http_status_of(rc), "%s", err.msg);
    const Stagecraft__JobInfo *j = ((const Stagecraft__GetJobResponse *)m)->job;
    json_t *o = history ? json_pack("{s:s, s:s, s:I, s:I, s:o}", "job_id", j->job_id, "state",
                                    sc_view_job_state_name(j->state), "step", (json_int_t)j->step,
                                    "steps", (json_int_t)j->steps, "history", sc_view_history(j))
                        : sc_view_job(j);
    sc_rpc_local_free(&call);
    return coord_http_send_json(h, conn, MHD_HTTP_OK, o);
}

/* A count argument `name` of the query, from 1 to max; 0 when absent, -1 when malformed. */
static long count_arg(struct MHD_Connection *conn, const char *name, long max)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
    if (v == NULL)
        return 0;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return end == v || *end != '\0' || n < 1 || n > max ? -1 : n;
}

/* /api/jobs/JOB/trace[?iterations=N]: the Chrome / Perfetto trace `stagecraft trace JOB`
 * writes (the newest N iterations every stage holds, measured beside planned), whole. */
static enum MHD_Result api_trace(coord_http *h, struct MHD_Connection *conn, const char *id)
{
    long n = count_arg(conn, "iterations", TRACE_ITERATIONS_MAX);
    if (n < 0)
        return coord_http_send_error(
            h, conn, MHD_HTTP_BAD_REQUEST, "iterations=%.32s: expected a count from 1 to %d",
            MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "iterations"),
            TRACE_ITERATIONS_MAX);
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_local *call;
    ProtobufCMessage *m;
    Stagecraft__GetTraceRequest req = STAGECRAFT__GET_TRACE_REQUEST__INIT;
    req.job_id = (char *)id;
    req.iterations = (uint32_t)n;
    sc_status rc = coord_service_call(h->coord, "/stagecraft.Coordinator/GetTrace", &req.base,
                                      "http", &call, &m, &err);
    if (rc != SC_OK)
        return coord_http_send_error(h, conn, coord_http_status_of(rc), "%s", err.msg);
    const char *trace = ((const Stagecraft__GetTraceResponse *)m)->trace_json;
    enum MHD_Result r =
        coord_http_send(h, conn, MHD_HTTP_OK, "application/json", trace, strlen(trace));
    sc_rpc_local_free(&call);
    return r;
}

/* /api/logs/TARGET[?lines=N]: the recent log lines of a worker or of a job's workers, as
 * `stagecraft logs TARGET --json` prints them (the workers are asked with a deadline each). */
static enum MHD_Result api_logs(coord_http *h, struct MHD_Connection *conn, const char *target)
{
    long n = count_arg(conn, "lines", 1000);
    if (n < 0)
        return coord_http_send_error(
            h, conn, MHD_HTTP_BAD_REQUEST, "lines=%.32s: expected a count from 1 to 1000",
            MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "lines"));
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_local *call;
    ProtobufCMessage *m;
    Stagecraft__GetLogsRequest req = STAGECRAFT__GET_LOGS_REQUEST__INIT;
    req.target = (char *)target;
    req.lines = (uint32_t)n;
    sc_status rc = coord_service_call(h->coord, "/stagecraft.Coordinator/GetLogs", &req.base,
                                      "http", &call, &m, &err);
    if (rc != SC_OK)
        return coord_http_send_error(h, conn, coord_http_status_of(rc), "%s", err.msg);
    json_t *o = sc_view_logs((const Stagecraft__GetLogsResponse *)m);
    json_object_set_new(o, "target", json_string(target));
    sc_rpc_local_free(&call);
    return coord_http_send_json(h, conn, MHD_HTTP_OK, o);
}

/* Whether `rest` is "ID" or "ID/SUB" with a non-empty ID shorter than JOB_ID_MAX: the ID in
 * id[], SUB in *sub (NULL without a slash). */
static bool split_id(const char *rest, char id[JOB_ID_MAX], const char **sub)
{
    const char *slash = strchr(rest, '/');
    size_t len = slash != NULL ? (size_t)(slash - rest) : strlen(rest);
    if (len == 0 || len >= JOB_ID_MAX)
        return false;
    memcpy(id, rest, len);
    id[len] = '\0';
    *sub = slash != NULL ? slash + 1 : NULL;
    return true;
}

enum MHD_Result coord_http_api(coord_http *h, struct MHD_Connection *conn, const char *url)
{
    char id[JOB_ID_MAX];
    const char *sub;
    if (strcmp(url, "/api/cluster") == 0)
        return api_cluster(h, conn);
    if (strcmp(url, "/api/workers") == 0)
        return api_workers(h, conn);
    if (strcmp(url, "/api/jobs") == 0)
        return api_jobs(h, conn);
    if (strncmp(url, "/api/jobs/", 10) == 0 && split_id(url + 10, id, &sub)) {
        if (sub == NULL)
            return api_job(h, conn, id, false);
        if (strcmp(sub, "history") == 0)
            return api_job(h, conn, id, true);
        if (strcmp(sub, "trace") == 0)
            return api_trace(h, conn, id);
    }
    if (strncmp(url, "/api/logs/", 10) == 0 && url[10] != '\0' && strchr(url + 10, '/') == NULL)
        return api_logs(h, conn, url + 10);
    return coord_http_send_error(h, conn, MHD_HTTP_NOT_FOUND,
                                 "no page %.128s: the API's paths are %s", url, paths);
}
