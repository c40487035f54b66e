/*
 * The coordinator's HTTP view (http.h): libmicrohttpd with an internal polling thread pool, so
 * a slow client costs a socket and a slot, never a thread of the coordinator's own. Each route
 * turns the answer of a Coordinator service handler (run in process) into JSON through the same
 * views the CLI prints (proto/sc_view.h), or into the Prometheus text format.
 */
#include "coordinator/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/http_page.h" /* generated: coord_http_page[], the dashboard */
#include "coordinator/service.h"
#include "coordinator/tokens.h"
#include "proto/sc_rpc.h"
#include "proto/sc_view.h"

#define LOG "http"

/* Bounds that keep a bad client from stalling the server: a request's headers must fit in
 * HTTP_CONN_MEMORY_BYTES (a larger one is refused by the library with 431 and closed), a
 * connection idle for HTTP_TIMEOUT_S is closed, and the server holds at most
 * HTTP_MAX_CONNECTIONS sockets (HTTP_MAX_PER_IP from one address). */
#define HTTP_THREADS 2
#define HTTP_MAX_CONNECTIONS 64
#define HTTP_MAX_PER_IP 16
#define HTTP_TIMEOUT_S 10
#define HTTP_CONN_MEMORY_BYTES (32 * 1024)
#define HTTP_REFUSED_LOG_EVERY_S 10

struct coord_http {
    struct coord *coord;
    struct MHD_Daemon *daemon;
    int port;
    bool require_token;
    const char *token;
    /* refusals logged at most every HTTP_REFUSED_LOG_EVERY_S (an unauthenticated client may
     * retry in a loop): guarded by refused_lock */
    pthread_mutex_t refused_lock;
    time_t refused_logged_at;
    unsigned long refused_quiet;
    /* requests answered, by status (stagecraft_http_requests_total) */
    atomic_ulong answered[6];
};

static const unsigned answered_codes[6] = {200, 400, 401, 404, 405, 500};

static void count_answer(coord_http *h, unsigned code)
{
    for (size_t i = 0; i < SC_ARRAY_LEN(answered_codes); i++)
        if (answered_codes[i] == code)
            atomic_fetch_add(&h->answered[i], 1);
}

/* ---- responses ------------------------------------------------------------------------------*/

/* Sends `len` bytes of `body` (copied) with `type`; counts it. */
static enum MHD_Result send_body(coord_http *h, struct MHD_Connection *conn, unsigned code,
                                 const char *type, const char *body, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (code == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"stagecraft\"");
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (strncmp(type, "text/html", 9) == 0)
        /* the page is self-contained: nothing but its own inline code and the API */
        MHD_add_response_header(r, "Content-Security-Policy",
                                "default-src 'none'; script-src 'unsafe-inline'; "
                                "style-src 'unsafe-inline'; connect-src 'self'; img-src data:");
    enum MHD_Result rc = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    count_answer(h, code);
    return rc;
}

static enum MHD_Result send_json(coord_http *h, struct MHD_Connection *conn, unsigned code,
                                 json_t *o)
{
    char *text = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    json_decref(o);
    if (text == NULL) {
        static const char oom[] = "{\"error\": \"out of memory building the answer\"}\n";
        return send_body(h, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "application/json", oom,
                         sizeof oom - 1);
    }
    enum MHD_Result rc = send_body(h, conn, code, "application/json", text, strlen(text));
    free(text);
    return rc;
}

static enum MHD_Result send_error(coord_http *h, struct MHD_Connection *conn, unsigned code,
                                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static enum MHD_Result send_error(coord_http *h, struct MHD_Connection *conn, unsigned code,
                                  const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return send_json(h, conn, code, json_pack("{s:s}", "error", msg));
}

static unsigned status_to_http(sc_status rc)
{
    switch (rc) {
    case SC_ERR_NOT_FOUND:
        return MHD_HTTP_NOT_FOUND;
    case SC_ERR_INVALID:
        return MHD_HTTP_BAD_REQUEST;
    default:
        return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
}

/* ---- the JSON routes -------------------------------------------------------------------------*/

static enum MHD_Result api_workers(coord_http *h, struct MHD_Connection *conn)
{
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_local *call;
    ProtobufCMessage *m;
    Stagecraft__ListWorkersRequest req = STAGECRAFT__LIST_WORKERS_REQUEST__INIT;
    sc_status rc = coord_service_call(h->coord, "/stagecraft.Coordinator/ListWorkers", &req.base,
                                      "http", &call, &m, &err);
    if (rc != SC_OK)
        return send_error(h, conn, status_to_http(rc), "%s", err.msg);
    json_t *o = sc_view_workers((const Stagecraft__ListWorkersResponse *)m);
    sc_rpc_local_free(&call);
    return send_json(h, conn, MHD_HTTP_OK, o);
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
        return send_error(h, conn, status_to_http(rc), "%s", err.msg);
    json_t *o = sc_view_jobs((const Stagecraft__ListJobsResponse *)m);
    sc_rpc_local_free(&call);
    return send_json(h, conn, MHD_HTTP_OK, o);
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
    sc_status rc = coord_service_call(h->coord, "/stagecraft.Coordinator/GetJob", &req.base,
                                      "http", &call, &m, &err);
    if (rc != SC_OK)
        return send_error(h, conn, status_to_http(rc), "%s", err.msg);
    const Stagecraft__JobInfo *j = ((const Stagecraft__GetJobResponse *)m)->job;
    json_t *o = history ? json_pack("{s:s, s:s, s:I, s:I, s:o}", "job_id", j->job_id, "state",
                                    sc_view_job_state_name(j->state), "step", (json_int_t)j->step,
                                    "steps", (json_int_t)j->steps, "history", sc_view_history(j))
                        : sc_view_job(j);
    sc_rpc_local_free(&call);
    return send_json(h, conn, MHD_HTTP_OK, o);
}

/* /api/logs/TARGET[?lines=N]: the recent log lines of a worker or of a job's workers, as
 * `stagecraft logs TARGET --json` prints them (the workers are asked with a deadline each). */
static enum MHD_Result api_logs(coord_http *h, struct MHD_Connection *conn, const char *target)
{
    const char *lines = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "lines");
    char *end = NULL;
    long n = lines != NULL ? strtol(lines, &end, 10) : 0;
    if (lines != NULL && (end == lines || *end != '\0' || n < 1 || n > 1000))
        return send_error(h, conn, MHD_HTTP_BAD_REQUEST,
                          "lines=%.32s: expected a count from 1 to 1000", lines);
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
        return send_error(h, conn, status_to_http(rc), "%s", err.msg);
    json_t *o = sc_view_logs((const Stagecraft__GetLogsResponse *)m);
    json_object_set_new(o, "target", json_string(target));
    sc_rpc_local_free(&call);
    return send_json(h, conn, MHD_HTTP_OK, o);
}

/* ---- /metrics ---------------------------------------------------------------------------------
 * The Prometheus text format (version 0.0.4): each family's HELP and TYPE, then its samples,
 * all together. Labels name identity only (worker, job, stage, state). */

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

static bool job_is_live(Stagecraft__JobState s)
{
    return s != STAGECRAFT__JOB_STATE__JOB_SUCCEEDED && s != STAGECRAFT__JOB_STATE__JOB_FAILED &&
           s != STAGECRAFT__JOB_STATE__JOB_CANCELLED;
}

static void metrics_workers(coord_http *h, FILE *f)
{
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_local *call;
    ProtobufCMessage *m;
    Stagecraft__ListWorkersRequest req = STAGECRAFT__LIST_WORKERS_REQUEST__INIT;
    if (coord_service_call(h->coord, "/stagecraft.Coordinator/ListWorkers", &req.base, "http",
                           &call, &m, &err) != SC_OK) {
        SC_LOG_WARN(LOG, "/metrics without workers: %s", err.msg);
        return;
    }
    const Stagecraft__ListWorkersResponse *resp = (const void *)m;
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
    sc_rpc_local *list_call;
    ProtobufCMessage *m;
    Stagecraft__ListJobsRequest req = STAGECRAFT__LIST_JOBS_REQUEST__INIT;
    if (coord_service_call(h->coord, "/stagecraft.Coordinator/ListJobs", &req.base, "http",
                           &list_call, &m, &err) != SC_OK) {
        SC_LOG_WARN(LOG, "/metrics without jobs: %s", err.msg);
        return;
    }
    const Stagecraft__ListJobsResponse *list = (const void *)m;
    size_t n = list->n_jobs;
    /* a live job's figures come with GetJob (the listing carries state and step only) */
    const Stagecraft__JobInfo **jobs = calloc(n ? n : 1, sizeof *jobs);
    sc_rpc_local **calls = calloc(n ? n : 1, sizeof *calls);
    for (size_t i = 0; jobs != NULL && calls != NULL && i < n; i++) {
        jobs[i] = list->jobs[i];
        if (!job_is_live(jobs[i]->state))
            continue;
        Stagecraft__GetJobRequest g = STAGECRAFT__GET_JOB_REQUEST__INIT;
        g.job_id = list->jobs[i]->job_id;
        ProtobufCMessage *jm;
        sc_err_clear(&err);
        if (coord_service_call(h->coord, "/stagecraft.Coordinator/GetJob", &g.base, "http",
                               &calls[i], &jm, &err) == SC_OK)
            jobs[i] = ((const Stagecraft__GetJobResponse *)jm)->job;
    }
    if (jobs == NULL || calls == NULL)
        n = 0;

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
        if (job_is_live(jobs[i]->state) && jobs[i]->loss_known)
            put_job_sample(f, "stagecraft_job_loss", jobs[i], NULL, jobs[i]->loss);
    put_family(f, "stagecraft_job_samples_per_second", "gauge",
               "The job's measured throughput in samples per second (live jobs).");
    for (size_t i = 0; i < n; i++)
        if (job_is_live(jobs[i]->state) && jobs[i]->samples_per_s_known)
            put_job_sample(f, "stagecraft_job_samples_per_second", jobs[i], NULL,
                           jobs[i]->samples_per_s);
    put_family(f, "stagecraft_job_iteration_seconds", "gauge",
               "The job's iteration time: measured (its slowest stage) and predicted by its "
               "plan (live jobs).");
    for (size_t i = 0; i < n; i++) {
        if (!job_is_live(jobs[i]->state))
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
        if (!job_is_live(jobs[i]->state))
            continue;
        for (size_t s = 0; s < jobs[i]->n_stages; s++) {
            char extra[48];
            snprintf(extra, sizeof extra, ",stage=\"%u\"", jobs[i]->stages[s]->stage);
            put_job_sample(f, "stagecraft_job_stage_busy_fraction", jobs[i], extra,
                           jobs[i]->stages[s]->busy_fraction);
        }
    }
    for (size_t i = 0; calls != NULL && i < list->n_jobs; i++)
        sc_rpc_local_free(&calls[i]);
    free(calls);
    free(jobs);
    sc_rpc_local_free(&list_call);
}

static enum MHD_Result metrics(coord_http *h, struct MHD_Connection *conn)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return send_error(h, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    metrics_workers(h, f);
    metrics_jobs(h, f);
    put_family(f, "stagecraft_http_requests_total", "counter",
               "HTTP requests the coordinator answered, by status code (before this one).");
    for (size_t i = 0; i < SC_ARRAY_LEN(answered_codes); i++) {
        fprintf(f, "stagecraft_http_requests_total{code=\"%u\"}", answered_codes[i]);
        put_value(f, (double)atomic_load(&h->answered[i]));
    }
    bool ok = fclose(f) == 0;
    enum MHD_Result rc =
        ok ? send_body(h, conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len)
           : send_error(h, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    free(text);
    return rc;
}

/* ---- the request handler ----------------------------------------------------------------------*/

/* Whether the request carries "Authorization: Bearer <the client token>". */
static bool authorized(coord_http *h, struct MHD_Connection *conn)
{
    const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (a == NULL || strncasecmp(a, "Bearer ", 7) != 0)
        return false;
    a += 7;
    while (*a == ' ')
        a++;
    return coord_token_equal(a, h->token);
}

static void log_refused(coord_http *h, const char *url)
{
    time_t now = time(NULL);
    pthread_mutex_lock(&h->refused_lock);
    if (now - h->refused_logged_at < HTTP_REFUSED_LOG_EVERY_S) {
        h->refused_quiet++;
        pthread_mutex_unlock(&h->refused_lock);
        return;
    }
    unsigned long quiet = h->refused_quiet;
    h->refused_quiet = 0;
    h->refused_logged_at = now;
    pthread_mutex_unlock(&h->refused_lock);
    SC_LOG_WARN(LOG,
                "refused a request for %.64s without the client token (401); %lu more "
                "refused since the last such line",
                url, quiet);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
    (void)version;
    (void)upload_data;
    (void)req_cls;
    coord_http *h = cls;
    if (*upload_data_size != 0) {
        /* a body with a GET is ignored; a refused method's body is discarded by the library */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return send_error(h, conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                          "%.16s refused: this view is read-only (GET and HEAD only)", method);
    if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
        /* the page holds no data (it asks the API, with the token where one is needed) */
        return send_body(h, conn, MHD_HTTP_OK, "text/html; charset=utf-8", coord_http_page,
                         sizeof coord_http_page - 1);
    if (h->require_token && !authorized(h, conn)) {
        log_refused(h, url);
        return send_error(h, conn, MHD_HTTP_UNAUTHORIZED,
                          "this coordinator serves HTTP beyond loopback: send its client token "
                          "as 'Authorization: Bearer TOKEN' (the --token-file, STAGECRAFT_TOKEN "
                          "or STATE/client.token)");
    }
    if (strcmp(url, "/metrics") == 0)
        return metrics(h, conn);
    if (strcmp(url, "/api/workers") == 0)
        return api_workers(h, conn);
    if (strcmp(url, "/api/jobs") == 0)
        return api_jobs(h, conn);
    if (strncmp(url, "/api/jobs/", 10) == 0 && url[10] != '\0' && strchr(url + 10, '/') == NULL)
        return api_job(h, conn, url + 10, false);
    const char *slash = strncmp(url, "/api/jobs/", 10) == 0 ? strchr(url + 10, '/') : NULL;
    if (slash != NULL && slash > url + 10 && strcmp(slash, "/history") == 0 &&
        (size_t)(slash - url - 10) < 128) {
        char id[128];
        memcpy(id, url + 10, (size_t)(slash - url - 10));
        id[slash - url - 10] = '\0';
        return api_job(h, conn, id, true);
    }
    if (strncmp(url, "/api/logs/", 10) == 0 && url[10] != '\0' && strchr(url + 10, '/') == NULL)
        return api_logs(h, conn, url + 10);
    return send_error(h, conn, MHD_HTTP_NOT_FOUND,
                      "no page %.128s: the paths are /, /metrics, /api/jobs, /api/jobs/JOB, "
                      "/api/jobs/JOB/history, /api/logs/WORKER or /api/logs/JOB and /api/workers",
                      url);
}

static void on_library_message(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    /* the library's own complaints are about clients (a too-large header, a reset): debug */
    if (sc_log_enabled(SC_LOG_DEBUG))
        sc_logv(SC_LOG_DEBUG, LOG, fmt, ap);
}

/* ---- life -------------------------------------------------------------------------------------*/

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) ||
               (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

/* Binds and listens on addr ("HOST:PORT"): the socket in *fd, whether it is loopback. Bound
 * here rather than by the library so that a failure can say why. */
static sc_status listen_on(const char *addr, int *fd, bool *loopback, sc_err *err)
{
    char host[256];
    int port;
    SC_CHECK(sc_parse_hostport(addr, true, "--http", host, sizeof host, &port, err));
    char *h = host;
    size_t hl = strlen(h);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h[hl - 1] = '\0';
        h++;
    }
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(h, service, &hints, &res);
    if (gai != 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "--http %s: cannot resolve '%s' (%s); give HOST:PORT of this machine, "
                       "e.g. 127.0.0.1:8080, or 'off'",
                       addr, h, gai_strerror(gai));
    int s = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(s, res->ai_addr, res->ai_addrlen) != 0 || listen(s, 64) != 0) {
        int e = errno;
        if (s >= 0)
            close(s);
        freeaddrinfo(res);
        return SC_ERRF(err, SC_ERR_UNAVAILABLE,
                       "--http %s: cannot listen there (%s); choose a free port (0 picks one) "
                       "or 'off'",
                       addr, strerror(e));
    }
    *loopback = is_loopback(res->ai_addr);
    freeaddrinfo(res);
    *fd = s;
    return SC_OK;
}

sc_status coord_http_new(coord_http **out, struct coord *c, const coord_http_cfg *cfg,
                         sc_err *err)
{
    *out = NULL;
    coord_http *h = calloc(1, sizeof *h);
    SC_ALLOC_CHECK(h, err);
    h->coord = c;
    h->token = cfg->token ? cfg->token : "";
    pthread_mutex_init(&h->refused_lock, NULL);
    int fd = -1;
    bool loopback = false;
    sc_status rc = listen_on(cfg->addr, &fd, &loopback, err);
    if (rc != SC_OK)
        goto fail;
    h->require_token = !loopback;
    if (h->require_token && h->token[0] == '\0') {
        close(fd);
        rc = SC_ERRF(err, SC_ERR_INVALID,
                     "--http %s is not a loopback address, so it needs the client token, and "
                     "there is none",
                     cfg->addr);
        goto fail;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        h->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    h->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTP_THREADS, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)HTTP_MAX_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)HTTP_MAX_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONN_MEMORY_BYTES,
        MHD_OPTION_EXTERNAL_LOGGER, on_library_message, NULL, MHD_OPTION_END);
    if (h->daemon == NULL) {
        close(fd);
        rc = SC_ERRF(err, SC_ERR_UNAVAILABLE,
                     "--http %s: libmicrohttpd could not start its threads", cfg->addr);
        goto fail;
    }
    SC_LOG_INFO(LOG, "serving the dashboard and /metrics on %s (port %d)%s", cfg->addr, h->port,
                h->require_token ? ", data routes need the client token" : "");
    *out = h;
    return SC_OK;
fail:
    coord_http_destroy(&h);
    return rc;
}

int coord_http_port(const coord_http *h)
{
    return h->port;
}

void coord_http_destroy(coord_http **hp)
{
    if (hp == NULL || *hp == NULL)
        return;
    coord_http *h = *hp;
    if (h->daemon != NULL)
        MHD_stop_daemon(h->daemon); /* joins its threads and closes the listening socket */
    pthread_mutex_destroy(&h->refused_lock);
    free(h);
    *hp = NULL;
}
