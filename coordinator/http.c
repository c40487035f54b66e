/*
 * The coordinator's HTTP server (http.h): libmicrohttpd with an internal polling thread pool, so
 * a slow client costs a socket and a slot, never a thread of the coordinator's own. Here: the
 * socket, the token check, the page's own files (built into the binary) and the dispatch to the
 * routes (http_api.c for /api/..., http_metrics.c for /metrics).
 */
#include "coordinator/http.h"
#include "coordinator/http_internal.h"

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
#include "coordinator/http_page.h" /* generated: coord_http_files[], the dashboard */
#include "coordinator/tokens.h"

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

/* ---- the request handler ----------------------------------------------------------------------*/

/* Whether the request carries "Authorization: Bearer <the client token>". */
static bool authorized(coord_http *h, struct MHD_Connection *conn)
{
    const char *a =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
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

/* The file of the page that `url` names: /web/NAME, or the page itself for / and for a job's
 * page (/jobs/JOB: the page reads the job from its address); NULL for any other path. */
static const coord_http_file *page_file(const char *url)
{
    const char *name = NULL;
    if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0 ||
        (strncmp(url, "/jobs/", 6) == 0 && url[6] != '\0' && strchr(url + 6, '/') == NULL))
        name = "index.html";
    else if (strncmp(url, "/web/", 5) == 0)
        name = url + 5;
    for (size_t i = 0; name != NULL && i < SC_ARRAY_LEN(coord_http_files); i++)
        if (strcmp(coord_http_files[i].name, name) == 0)
            return &coord_http_files[i];
    return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
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
        return coord_http_send_error(h, conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                                     "%.16s refused: this view is read-only (GET and HEAD only)",
                                     method);
    /* the page and its files hold no data (they ask the API, with the token where one is
     * needed): served to anyone */
    const coord_http_file *page = page_file(url);
    if (page != NULL)
        return coord_http_send(h, conn, MHD_HTTP_OK, page->type, page->data, page->len);
    if (h->require_token && !authorized(h, conn)) {
        log_refused(h, url);
        return coord_http_send_error(
            h, conn, MHD_HTTP_UNAUTHORIZED,
            "this coordinator serves HTTP beyond loopback: send its client token as "
            "'Authorization: Bearer TOKEN' (the --token-file, STAGECRAFT_TOKEN or "
            "STATE/client.token)");
    }
    if (strcmp(url, "/metrics") == 0)
        return coord_http_metrics(h, conn);
    if (strncmp(url, "/api/", 5) == 0)
        return coord_http_api(h, conn, url);
    return coord_http_send_error(h, conn, MHD_HTTP_NOT_FOUND,
                                 "no page %.128s: the paths are /, /jobs/JOB, /metrics, "
                                 "/api/cluster, /api/workers, /api/jobs, /api/jobs/JOB, "
                                 "/api/jobs/JOB/history, /api/jobs/JOB/trace and /api/logs/TARGET",
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
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
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
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
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

sc_status coord_http_new(coord_http **out, struct coord *c, const coord_http_cfg *cfg, sc_err *err)
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
