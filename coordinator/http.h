/*
 * The coordinator's HTTP view: a read-only dashboard page (/), Prometheus metrics (/metrics) and
 * JSON (/api/jobs, /api/jobs/JOB, /api/workers), served by GNU libmicrohttpd on threads of its
 * own.
 *
 * Deliberately not here: any change to jobs or workers (no submit, cancel or rebalance over
 * HTTP), TLS, and any figure of its own: every route asks the Coordinator service's handlers
 * in process (coord_service_call), so the page, the metrics and `stagecraft status --json`
 * share one source of truth and its locks.
 *
 * Key invariant: no request, however slow, large or malformed, holds a gRPC, control-loop or
 * job-driver thread; the server's own threads are bounded in connections, memory per
 * connection and idle time.
 */
#ifndef COORD_HTTP_H
#define COORD_HTTP_H

#include "common/sc_status.h"

struct coord;
typedef struct coord_http coord_http;

typedef struct {
    const char *addr;  /* "HOST:PORT" (IPv6 in brackets); port 0 picks a free one */
    const char *token; /* the client token; a non-loopback address requires it on every data
                          route as "Authorization: Bearer TOKEN" (borrowed: it must outlive
                          the server) */
} coord_http_cfg;

/* Binds cfg->addr and starts serving `c` (borrowed; it must outlive the server). Errors: a bad
 * address (SC_ERR_INVALID naming --http and what is valid), one that cannot be bound
 * (SC_ERR_UNAVAILABLE naming it and why), a non-loopback address without a token
 * (SC_ERR_INVALID). */
sc_status coord_http_new(coord_http **out, struct coord *c, const coord_http_cfg *cfg,
                         sc_err *err);

/* The bound TCP port (the chosen one when cfg->addr asked for port 0). */
int coord_http_port(const coord_http *h);

/* Stops serving (waits for the requests in flight, each bounded by the connection timeout),
 * frees everything and sets *h to NULL. Accepts NULL. */
void coord_http_destroy(coord_http **h);

#endif /* COORD_HTTP_H */
