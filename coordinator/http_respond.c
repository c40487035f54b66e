/*
 * The answers of the coordinator's HTTP routes (http_internal.h): one place sets the headers
 * every answer carries (no caching, no sniffing, the page's content security policy) and
 * counts the answers by status for /metrics.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/http_internal.h"

const unsigned coord_http_codes[COORD_HTTP_CODES] = {200, 400, 401, 404, 405, 500};

static void count_answer(coord_http *h, unsigned code)
{
    for (size_t i = 0; i < COORD_HTTP_CODES; i++)
        if (coord_http_codes[i] == code)
            atomic_fetch_add(&h->answered[i], 1);
}

enum MHD_Result coord_http_send(coord_http *h, struct MHD_Connection *conn, unsigned code,
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
        /* the page is self-contained: its own scripts and styles, and the API */
        MHD_add_response_header(r, "Content-Security-Policy",
                                "default-src 'none'; script-src 'self'; style-src 'self'; "
                                "connect-src 'self'; img-src data:; base-uri 'none'");
    enum MHD_Result rc = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    count_answer(h, code);
    return rc;
}

enum MHD_Result coord_http_send_json(coord_http *h, struct MHD_Connection *conn, unsigned code,
                                     json_t *o)
{
    char *text = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    json_decref(o);
    if (text == NULL) {
        static const char oom[] = "{\"error\": \"out of memory building the answer\"}\n";
        return coord_http_send(h, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "application/json", oom,
                               sizeof oom - 1);
    }
    enum MHD_Result rc = coord_http_send(h, conn, code, "application/json", text, strlen(text));
    free(text);
    return rc;
}

enum MHD_Result coord_http_send_error(coord_http *h, struct MHD_Connection *conn, unsigned code,
                                      const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return coord_http_send_json(h, conn, code, json_pack("{s:s}", "error", msg));
}

unsigned coord_http_status_of(sc_status rc)
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
