/*
 * The coordinator's HTTP view inside (http.h outside): the server's state, the answers every
 * route sends (http_respond.c), the in-process questions they ask the Coordinator service
 * (http_fetch.c), and the routes themselves (http_api.c, http_metrics.c), which http.c calls.
 *
 * Calls go one way: http.c -> http_api.c, http_metrics.c -> http_fetch.c, http_respond.c.
 */
#ifndef COORD_HTTP_INTERNAL_H
#define COORD_HTTP_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include <jansson.h>

#include "common/sc_status.h"
#include "coordinator/http.h"
#include "proto/sc_rpc.h"
#include "proto/stagecraft.pb-c.h"

#define COORD_HTTP_CODES 6

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
    /* requests answered, by status (stagecraft_http_requests_total), coord_http_codes' order */
    atomic_ulong answered[COORD_HTTP_CODES];
};

/* The status codes counted in coord_http.answered, in its order. */
extern const unsigned coord_http_codes[COORD_HTTP_CODES];

/* ---- http_respond.c: answers ---- */

/* Queues `len` bytes of `body` (copied) with content type `type` and counts the answer. */
enum MHD_Result coord_http_send(coord_http *h, struct MHD_Connection *conn, unsigned code,
                                const char *type, const char *body, size_t len);

/* Queues `o` (stolen; NULL: out of memory, answered 500) as indented JSON. */
enum MHD_Result coord_http_send_json(coord_http *h, struct MHD_Connection *conn, unsigned code,
                                     json_t *o);

/* Queues {"error": MESSAGE} with `code`. */
enum MHD_Result coord_http_send_error(coord_http *h, struct MHD_Connection *conn, unsigned code,
                                      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The HTTP status of a service error: 404 not found, 400 invalid, else 500. */
unsigned coord_http_status_of(sc_status rc);

/* ---- http_fetch.c: the service's answers, asked in process ---- */

/* ListWorkers: *resp lives until sc_rpc_local_free(call). */
sc_status coord_http_fetch_workers(coord_http *h, sc_rpc_local **call,
                                   const Stagecraft__ListWorkersResponse **resp, sc_err *err);

/* Every job, each live one (not succeeded, failed or cancelled) as GetJob answers it (the
 * listing carries state and step only). Free with coord_http_jobs_free. */
typedef struct {
    sc_rpc_local *list_call;
    sc_rpc_local **calls;             /* [n]: GetJob's of live jobs, NULL for the others */
    const Stagecraft__JobInfo **jobs; /* [n] */
    size_t n;
} coord_http_jobs;

sc_status coord_http_fetch_jobs(coord_http *h, coord_http_jobs *out, sc_err *err);
void coord_http_jobs_free(coord_http_jobs *j);

/* The gRPC calls the coordinator's server received of its i-th method (sc_rpc_server_calls);
 * false past the last one. */
bool coord_http_rpc_calls(coord_http *h, size_t i, const char **method, unsigned long *calls);

/* Whether a job in state s may still change (not succeeded, failed or cancelled). */
bool coord_http_job_is_live(Stagecraft__JobState s);

/* ---- http_api.c: the JSON routes ---- */

/* Answers a GET of `url` under /api/; 404 naming the valid paths when no route matches. */
enum MHD_Result coord_http_api(coord_http *h, struct MHD_Connection *conn, const char *url);

/* ---- http_metrics.c: /metrics ---- */

enum MHD_Result coord_http_metrics(coord_http *h, struct MHD_Connection *conn);

#endif /* COORD_HTTP_INTERNAL_H */
