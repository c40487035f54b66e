/*
 * rt transport, zmq backend: host memory over TCP between worker processes. Each stage binds one
 * PULL socket (its inbox) and connects one PUSH socket to each neighbour's inbox; a message is two
 * frames, a fixed header (magic, kind, tag, step, micro-batch, sending copy, size, send time)
 * and the payload.
 * Does not detect a dead peer actively: a receive from it simply times out (the wait loop in
 * transport.c bounds it). The inbox refuses payloads larger than cfg max_message_bytes
 * (ZMQ_MAXMSGSIZE): zmq closes that peer's connection rather than allocating what a stray or
 * hostile sender claims. Invariant: closing waits at most FLUSH_MAX_MS (or the timeout, if
 * shorter) for queued messages to leave, so a stage that sends its last gradients and exits still
 * delivers them, and a gone peer never holds a closing process for longer than that.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/sc_util.h"
#include "worker/transport/transport_impl.h"

#define WIRE_MAGIC 0x53435256u     /* "SCRV": the header with the payload's wire (16-bit floats) */
#define WIRE_MAGIC_U 0x53435255u   /* "SCRU": the header before it (no wire) */
#define WIRE_MAGIC_OLD 0x53435254u /* "SCRT": the one before (no send time, no copy) */
#define FLUSH_MAX_MS 5000

typedef struct {
    uint32_t magic;
    int32_t kind;
    uint64_t tag;
    uint64_t step;
    int32_t microbatch;
    int32_t from_copy; /* the sending stage's copy */
    uint64_t bytes;
    uint64_t sent_ns; /* the sender's monotonic clock when it sent (link measurement) */
    uint32_t wire;    /* RT_WIRE_*: how the payload's floats travel */
    uint32_t pad;
} wire_header;

typedef struct {
    void *ctx;
    void *inbox; /* PULL, bound */
    void *prev;  /* PUSH to the previous stage's inbox, or NULL */
    void *next;  /* PUSH to the next stage's inbox, or NULL */
} zmq_impl;

#define ZMQ_FAIL(err, what) SC_ERRF(err, SC_ERR_ZMQ, "zmq %s: %s", what, zmq_strerror(zmq_errno()))

/* linger_ms: how long zmq_ctx_term may spend delivering what is still queued on this socket. */
static void close_socket(void **s, int linger_ms)
{
    if (*s != NULL) {
        zmq_setsockopt(*s, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
        zmq_close(*s);
        *s = NULL;
    }
}

static void zt_destroy(rt_transport *t)
{
    zmq_impl *z = t->impl;
    if (z == NULL)
        return;
    /* An aborted transport belongs to a stage being torn down: nothing queued is worth a wait. */
    int flush_ms = t->cfg.timeout_ms < FLUSH_MAX_MS ? t->cfg.timeout_ms : FLUSH_MAX_MS;
    if (atomic_load(&t->aborted))
        flush_ms = 0;
    close_socket(&z->inbox, 0);
    close_socket(&z->prev, flush_ms);
    close_socket(&z->next, flush_ms);
    if (z->ctx != NULL)
        zmq_ctx_term(z->ctx);
    free(z);
    t->impl = NULL;
}

static sc_status set_common_opts(void *s, sc_err *err)
{
    int zero = 0;
    if (zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) != 0)
        return ZMQ_FAIL(err, "setsockopt(ZMQ_LINGER)");
    return SC_OK;
}

/* Whether `host` is something zmq binds as it is: an IPv4 or IPv6 address (bracketed or
 * not), or the wildcard '*'. */
static bool is_address(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    char v6[INET6_ADDRSTRLEN + 2];
    size_t n = strlen(host);
    if (strcmp(host, "*") == 0 || inet_pton(AF_INET, host, buf) == 1 ||
        inet_pton(AF_INET6, host, buf) == 1)
        return true;
    if (n > 2 && n < sizeof v6 && host[0] == '[' && host[n - 1] == ']') {
        memcpy(v6, host + 1, n - 2);
        v6[n - 2] = '\0';
        return inet_pton(AF_INET6, v6, buf) == 1;
    }
    return false;
}

static sc_status zt_bind(rt_transport *t, const char *endpoint, sc_err *err)
{
    if (strncmp(endpoint, "tcp://", 6) != 0 || strchr(endpoint + 6, ':') == NULL ||
        endpoint[6] == ':')
        return SC_ERRF(err, SC_ERR_INVALID,
                       "transport endpoint \"%s\": expected tcp://HOST:PORT (port 0 picks one)",
                       endpoint);
    /* zmq spells "any free port" as '*'; accept the usual ":0" too. zmq binds interfaces and
     * addresses, not host names ("No such device"): a worker that advertises its host name
     * binds every interface and publishes the name, which peers resolve when they connect. */
    char host[RT_ENDPOINT_MAX], port[16], ep[RT_ENDPOINT_MAX];
    const char *colon = strrchr(endpoint, ':');
    size_t host_len = (size_t)(colon - (endpoint + 6));
    if (host_len + 1 > sizeof host || strlen(colon + 1) + 1 > sizeof port)
        return SC_ERRF(err, SC_ERR_INVALID, "transport endpoint \"%s\" is too long", endpoint);
    memcpy(host, endpoint + 6, host_len);
    host[host_len] = '\0';
    sc_strlcpy(port, colon + 1, sizeof port);
    bool named = !is_address(host);
    if ((size_t)snprintf(ep, sizeof ep, "tcp://%s:%s", named ? "*" : host,
                         strcmp(port, "0") == 0 ? "*" : port) >= sizeof ep)
        return SC_ERRF(err, SC_ERR_INVALID, "transport endpoint \"%s\" is too long", endpoint);

    zmq_impl *z = calloc(1, sizeof *z);
    SC_ALLOC_CHECK(z, err);
    t->impl = z;
    z->ctx = zmq_ctx_new();
    if (z->ctx == NULL)
        return ZMQ_FAIL(err, "ctx_new");
    z->inbox = zmq_socket(z->ctx, ZMQ_PULL);
    if (z->inbox == NULL)
        return ZMQ_FAIL(err, "socket(PULL)");
    SC_CHECK(set_common_opts(z->inbox, err));
    /* Anyone who reaches the port can send a frame that claims any size, and zmq allocates it
     * before we see it. With a limit, zmq drops such a peer's connection unread instead (its
     * messages are then lost, and a receive waiting for them times out as for a dead peer).
     * The limit is per frame, and a message is two: the header, then a payload of at most
     * max_message_bytes; the larger of the two sizes admits both. */
    if (t->cfg.max_message_bytes > 0) {
        size_t frame = t->cfg.max_message_bytes > sizeof(wire_header) ? t->cfg.max_message_bytes
                                                                      : sizeof(wire_header);
        int64_t most = frame > (uint64_t)INT64_MAX ? -1 /* none */ : (int64_t)frame;
        if (zmq_setsockopt(z->inbox, ZMQ_MAXMSGSIZE, &most, sizeof most) != 0)
            return ZMQ_FAIL(err, "setsockopt(ZMQ_MAXMSGSIZE)");
    }
    if (zmq_bind(z->inbox, ep) != 0)
        return SC_ERRF(err, SC_ERR_ZMQ, "transport: cannot bind %s: %s", endpoint,
                       zmq_strerror(zmq_errno()));
    size_t len = sizeof t->endpoint;
    if (zmq_getsockopt(z->inbox, ZMQ_LAST_ENDPOINT, t->endpoint, &len) != 0)
        return ZMQ_FAIL(err, "getsockopt(ZMQ_LAST_ENDPOINT)");
    if (named) {
        sc_strlcpy(port, strrchr(t->endpoint, ':') + 1, sizeof port);
        if ((size_t)snprintf(t->endpoint, sizeof t->endpoint, "tcp://%s:%s", host, port) >=
            sizeof t->endpoint)
            return SC_ERRF(err, SC_ERR_INVALID, "transport endpoint \"%s\" is too long", endpoint);
    }
    return SC_OK;
}

static sc_status open_push(zmq_impl *z, const char *endpoint, void **out, sc_err *err)
{
    void *s = zmq_socket(z->ctx, ZMQ_PUSH);
    if (s == NULL)
        return ZMQ_FAIL(err, "socket(PUSH)");
    *out = s;
    SC_CHECK(set_common_opts(s, err));
    if (zmq_connect(s, endpoint) != 0)
        return SC_ERRF(err, SC_ERR_INVALID, "transport: cannot connect to %s: %s", endpoint,
                       zmq_strerror(zmq_errno()));
    return SC_OK;
}

static sc_status zt_connect(rt_transport *t, const char *prev, const char *next, sc_err *err)
{
    zmq_impl *z = t->impl;
    close_socket(&z->prev, 0);
    close_socket(&z->next, 0);
    if (prev != NULL)
        SC_CHECK(open_push(z, prev, &z->prev, err));
    if (next != NULL)
        SC_CHECK(open_push(z, next, &z->next, err));
    return SC_OK;
}

static void free_sent(void *data, void *hint)
{
    (void)data;
    free(hint); /* the rt_msg whose inline data was the payload */
}

/* a received payload kept in its zmq message (rt_msg ext) */
static void free_received(void *arg)
{
    zmq_msg_close(arg);
    free(arg);
}

static sc_status zt_send(rt_transport *t, rt_msg *m, bool to_next, sc_err *err)
{
    zmq_impl *z = t->impl;
    void *s = to_next ? z->next : z->prev;
    wire_header h;
    memset(&h, 0, sizeof h);
    h.magic = WIRE_MAGIC;
    h.kind = m->kind;
    h.tag = m->tag;
    h.step = m->step;
    h.microbatch = m->microbatch;
    h.from_copy = m->from_copy;
    h.bytes = m->bytes;
    h.sent_ns = m->sent_ns;
    h.wire = m->wire;
    /* PUSH queues up to its high-water mark even without a live peer, so this does not block
     * on a dead neighbour for small pipelines; a full queue waits at most the timeout. */
    int timeout = t->cfg.timeout_ms;
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout, sizeof timeout);
    /* the payload leaves without a copy: zmq frees the message once it is on the wire */
    zmq_msg_t body;
    int made = m->bytes > 0 ? zmq_msg_init_data(&body, m->data, m->bytes, free_sent, m)
                            : zmq_msg_init(&body);
    if (made != 0) {
        free(m);
        return ZMQ_FAIL(err, "message");
    }
    if (m->bytes == 0)
        free(m);
    sc_status rc = SC_OK;
    if (zmq_send(s, &h, sizeof h, ZMQ_SNDMORE) != (int)sizeof h || zmq_msg_send(&body, s, 0) < 0) {
        if (zmq_errno() == EAGAIN)
            rc = SC_ERRF(err, SC_ERR_TIMEOUT,
                         "transport %s: send to the %s stage timed out "
                         "after %d ms",
                         t->endpoint, to_next ? "next" : "previous", timeout);
        else
            rc = ZMQ_FAIL(err, "send");
        zmq_msg_close(&body); /* not sent: still ours (frees m) */
    }
    return rc;
}

/* Reads and drops the remaining frames of a malformed message. */
static void drain_frames(void *s)
{
    int more = 1;
    size_t len = sizeof more;
    while (zmq_getsockopt(s, ZMQ_RCVMORE, &more, &len) == 0 && more) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        zmq_msg_recv(&part, s, 0);
        zmq_msg_close(&part);
        len = sizeof more;
    }
}

static sc_status zt_poll(rt_transport *t, int wait_ms, bool from_next, rt_msg **out, sc_err *err)
{
    (void)from_next;
    zmq_impl *z = t->impl;
    *out = NULL;
    zmq_pollitem_t item = {z->inbox, 0, ZMQ_POLLIN, 0};
    int n = zmq_poll(&item, 1, wait_ms);
    if (n < 0) {
        if (zmq_errno() == EINTR)
            return SC_OK;
        return ZMQ_FAIL(err, "poll");
    }
    if (n == 0)
        return SC_OK;
    wire_header h;
    int got = zmq_recv(z->inbox, &h, sizeof h, ZMQ_DONTWAIT);
    if (got < 0)
        return zmq_errno() == EAGAIN ? SC_OK : ZMQ_FAIL(err, "recv");
    int more = 0;
    size_t len = sizeof more;
    zmq_getsockopt(z->inbox, ZMQ_RCVMORE, &more, &len);
    if (got >= (int)sizeof h.magic && (h.magic == WIRE_MAGIC_OLD || h.magic == WIRE_MAGIC_U)) {
        /* a worker of an older stagecraft: its messages would be dropped, and the job wait */
        drain_frames(z->inbox);
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "a data message in the wire header of an older stagecraft (\"%s\"; this "
                       "build's is \"SCRV\"): run one stagecraft version on every worker of a job",
                       h.magic == WIRE_MAGIC_OLD ? "SCRT" : "SCRU");
    }
    if (got != (int)sizeof h || h.magic != WIRE_MAGIC || !more) {
        drain_frames(z->inbox); /* not ours: a stray connection; ignore it */
        return SC_OK;
    }
    zmq_msg_t part;
    zmq_msg_init(&part);
    /* The payload frame follows its header at once (zmq delivers multipart atomically). */
    if (zmq_msg_recv(&part, z->inbox, 0) < 0) {
        zmq_msg_close(&part);
        return ZMQ_FAIL(err, "recv payload");
    }
    size_t size = zmq_msg_size(&part);
    if (size != h.bytes || h.wire > RT_WIRE_FP16) {
        zmq_msg_close(&part);
        drain_frames(z->inbox);
        return SC_OK;
    }
    /* the payload stays in its zmq message (no copy); the record points into it */
    rt_msg *m = rt_msg_new(0);
    zmq_msg_t *held = malloc(sizeof *held);
    if (m == NULL || held == NULL) {
        zmq_msg_close(&part);
        free(m);
        free(held);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory receiving %zu bytes", size);
    }
    zmq_msg_init(held);
    zmq_msg_move(held, &part);
    zmq_msg_close(&part);
    m->bytes = size;
    m->ext = zmq_msg_data(held);
    m->ext_free = free_received;
    m->ext_arg = held;
    m->tag = h.tag;
    m->step = h.step;
    m->kind = h.kind;
    m->microbatch = h.microbatch;
    m->from_copy = h.from_copy;
    m->sent_ns = h.sent_ns;
    m->wire = h.wire;
    drain_frames(z->inbox);
    *out = m;
    return SC_OK;
}

const rt_transport_ops rt_transport_zmq_ops = {
    .bind = zt_bind,
    .connect = zt_connect,
    .send = zt_send,
    .poll = zt_poll,
    .wake = NULL,
    .destroy = zt_destroy,
};
