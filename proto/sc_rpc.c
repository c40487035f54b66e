/*
 * Unary RPC over the gRPC C core API, protobuf-c payloads.
 *
 * Server: the event-loop thread is the only one that waits on the completion queue. A call goes
 * NEW (matched by grpc_server_request_call, which is re-armed at once) -> RECV (request bytes
 * read; unknown methods are answered here without reading) -> a handler thread decodes, checks
 * the version, runs the handler and starts the SEND batch -> SEND and CLOSE events. The CLOSE
 * batch is started with the call, so a cancellation or deadline reaches the call's cancelled flag
 * while its handler still runs. Each started batch and the handler job hold one reference on the
 * call; the last one to drop frees it, so no event ever sees a freed call.
 *
 * Client: every call has its own completion queue and a single batch, so concurrent calls on one
 * channel share nothing but the channel, which gRPC makes thread-safe.
 *
 * Not here: server-side deadlines beyond gRPC's own, per-method limits, compression.
 */
#include "proto/sc_rpc.h"

#include <assert.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "proto/sc_wire.h"

#define RPC_LOG "rpc"
/* Trailer that carries the handler's exact sc_status next to the coarser gRPC code. */
#define RPC_STATUS_KEY "stagecraft-status"
#define RPC_PEM_MAX_BYTES ((size_t)1 << 20)
#define RPC_MAX_HANDLER_THREADS 256
/* How long the client waits past a call's own deadline before cancelling it itself: gRPC ends
 * every call at its deadline, this only guards against that promise failing. */
#define RPC_CLIENT_SLACK_MS 5000

/* ---- status codes ---------------------------------------------------------------------------*/

static const char *const code_names[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *sc_rpc_code_name(int code)
{
    if (code < 0 || (size_t)code >= SC_ARRAY_LEN(code_names))
        return "UNKNOWN_CODE";
    return code_names[code];
}

int sc_rpc_status_to_code(sc_status s)
{
    switch (s) {
    case SC_OK:
        return GRPC_STATUS_OK;
    case SC_ERR_INVALID:
    case SC_ERR_PARSE:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case SC_ERR_NOT_FOUND:
        return GRPC_STATUS_NOT_FOUND;
    case SC_ERR_EXISTS:
        return GRPC_STATUS_ALREADY_EXISTS;
    case SC_ERR_PERMISSION:
        return GRPC_STATUS_PERMISSION_DENIED;
    case SC_ERR_VERSION:
    case SC_ERR_PRECONDITION:
        return GRPC_STATUS_FAILED_PRECONDITION;
    case SC_ERR_TOO_LARGE:
    case SC_ERR_NOMEM: /* a resource ran out; the trailer tells which status it was */
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case SC_ERR_UNAVAILABLE:
        return GRPC_STATUS_UNAVAILABLE;
    case SC_ERR_TIMEOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case SC_ERR_CANCELLED:
        return GRPC_STATUS_CANCELLED;
    case SC_ERR_UNSUPPORTED:
        return GRPC_STATUS_UNIMPLEMENTED;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

sc_status sc_rpc_code_to_status(int code)
{
    switch (code) {
    case GRPC_STATUS_OK:
        return SC_OK;
    case GRPC_STATUS_CANCELLED:
        return SC_ERR_CANCELLED;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_OUT_OF_RANGE:
        return SC_ERR_INVALID;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return SC_ERR_TIMEOUT;
    case GRPC_STATUS_NOT_FOUND:
        return SC_ERR_NOT_FOUND;
    case GRPC_STATUS_ALREADY_EXISTS:
        return SC_ERR_EXISTS;
    case GRPC_STATUS_PERMISSION_DENIED:
    case GRPC_STATUS_UNAUTHENTICATED:
        return SC_ERR_PERMISSION;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return SC_ERR_TOO_LARGE;
    case GRPC_STATUS_FAILED_PRECONDITION:
        return SC_ERR_PRECONDITION;
    case GRPC_STATUS_ABORTED:
    case GRPC_STATUS_UNAVAILABLE:
        return SC_ERR_UNAVAILABLE;
    case GRPC_STATUS_UNIMPLEMENTED:
        return SC_ERR_UNSUPPORTED;
    case GRPC_STATUS_INTERNAL:
        return SC_ERR_INTERNAL;
    case GRPC_STATUS_DATA_LOSS:
        return SC_ERR_IO;
    default:
        return SC_ERR_GRPC;
    }
}

/* ---- shared helpers -------------------------------------------------------------------------*/

static const ProtobufCFieldDescriptor *header_field(const ProtobufCMessageDescriptor *d)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(d, "header");
    if (f == NULL || f->type != PROTOBUF_C_TYPE_MESSAGE || f->label == PROTOBUF_C_LABEL_REPEATED ||
        f->descriptor != &stagecraft__header__descriptor)
        return NULL;
    return f;
}

/* Packs `msg` into a new slice with its Header's protocol version filled in when unset or zero.
 * The header is filled on a shallow copy, so `msg` may be shared and const. */
static sc_status pack_with_header(const ProtobufCMessage *msg, size_t max_bytes, grpc_slice *out,
                                  sc_err *err)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    ProtobufCMessage *copy = malloc(d->sizeof_message);
    SC_ALLOC_CHECK(copy, err);
    memcpy(copy, msg, d->sizeof_message);

    Stagecraft__Header hdr;
    const ProtobufCFieldDescriptor *f = header_field(d);
    if (f != NULL) {
        const Stagecraft__Header *cur = (const Stagecraft__Header *)sc_wire_header(copy);
        if (cur == NULL) {
            stagecraft__header__init(&hdr);
            hdr.protocol_version = SC_PROTOCOL_VERSION;
            sc_wire_set_header(copy, &hdr.base);
        } else if (cur->protocol_version == 0) {
            hdr = *cur;
            hdr.protocol_version = SC_PROTOCOL_VERSION;
            Stagecraft__Header *p = &hdr;
            memcpy((char *)copy + f->offset, &p, sizeof p);
        }
    }
    size_t n = protobuf_c_message_get_packed_size(copy);
    if (n > max_bytes) {
        free(copy);
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "%s of %zu bytes exceeds the message limit of %zu bytes", d->name, n,
                       max_bytes);
    }
    grpc_slice s = grpc_slice_malloc(n);
    size_t w = protobuf_c_message_pack(copy, GRPC_SLICE_START_PTR(s));
    free(copy);
    if (w != n) {
        grpc_slice_unref(s);
        return SC_ERRF(err, SC_ERR_INTERNAL, "packing %s wrote %zu of %zu bytes", d->name, w, n);
    }
    *out = s;
    return SC_OK;
}

/* The whole message as one slice (a reference; unref it). */
static grpc_slice buffer_flatten(grpc_byte_buffer *buf)
{
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, buf))
        return grpc_empty_slice();
    grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    return s;
}

static grpc_byte_buffer *buffer_from_slice(grpc_slice s)
{
    grpc_byte_buffer *b = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return b;
}

static void set_int_arg(grpc_arg *a, const char *key, int value)
{
    a->type = GRPC_ARG_INTEGER;
    a->key = (char *)key;
    a->value.integer = value;
}

static sc_status check_max_bytes(size_t *max_bytes, sc_err *err)
{
    if (*max_bytes == 0)
        *max_bytes = SC_RPC_DEFAULT_MAX_MESSAGE_BYTES;
    if (*max_bytes > INT_MAX)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "max_message_bytes %zu is too large: gRPC takes at most %d bytes",
                       *max_bytes, INT_MAX);
    return SC_OK;
}

typedef struct {
    char *cert, *key, *ca;
} pem_files;

static void pem_files_free(pem_files *p)
{
    free(p->cert);
    free(p->key);
    free(p->ca);
    memset(p, 0, sizeof *p);
}

static sc_status pem_read(const char *path, const char *what, char **out, sc_err *err)
{
    *out = NULL;
    if (path == NULL)
        return SC_OK;
    size_t len;
    sc_status rc = sc_file_read(path, RPC_PEM_MAX_BYTES, out, &len, err);
    if (rc != SC_OK)
        sc_err_prefix(err, "reading the TLS %s", what);
    return rc;
}

static sc_status pem_files_read(const sc_rpc_tls *tls, pem_files *p, sc_err *err)
{
    memset(p, 0, sizeof *p);
    sc_status rc;
    SC_CHECK_GOTO(pem_read(tls->cert_path, "certificate", &p->cert, err), fail);
    SC_CHECK_GOTO(pem_read(tls->key_path, "private key", &p->key, err), fail);
    SC_CHECK_GOTO(pem_read(tls->ca_path, "CA certificate", &p->ca, err), fail);
    return SC_OK;
fail:
    pem_files_free(p);
    return rc;
}

/* ---- server ---------------------------------------------------------------------------------*/

typedef enum { TAG_NEW, TAG_RECV, TAG_SEND, TAG_CLOSE, TAG_SHUTDOWN } tag_kind;

typedef struct srv_call srv_call;

typedef struct {
    tag_kind kind;
    srv_call *call;
} call_tag;

typedef struct arena_block {
    struct arena_block *next;
    max_align_t data[];
} arena_block;

struct sc_rpc_ctx {
    sc_rpc_server *srv;
    const char *method;
    char *peer; /* from grpc_call_get_peer: gpr_free */
    uint64_t deadline_ns;
    const Stagecraft__Header *header;
    arena_block *arena;
    atomic_bool cancelled; /* set by the event loop from the CLOSE batch */
};

struct srv_call {
    sc_rpc_server *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array req_md;
    call_tag t_new, t_recv, t_send, t_close;
    atomic_int refs;
    int close_cancelled;
    grpc_byte_buffer *recv_buf;
    char *method_name;
    const sc_rpc_method *method;
    /* Kept until the call is freed: the SEND batch refers to them. */
    grpc_byte_buffer *send_buf;
    grpc_slice status_details;
    grpc_metadata trailer;
    sc_rpc_ctx ctx;
    srv_call *next_job; /* handler queue link, under srv->mu */
};

struct sc_rpc_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    int port;
    size_t max_bytes;
    sc_rpc_method *methods; /* names owned */
    size_t n_methods;

    pthread_t cq_thread;
    bool cq_thread_started;
    pthread_t *workers;
    int n_workers_started;

    pthread_mutex_t mu;      /* guards everything below down to shutdown_notified */
    pthread_cond_t job_cv;   /* a job was queued, or workers_stop was set */
    pthread_cond_t state_cv; /* shutdown_notified was set; waits use CLOCK_MONOTONIC */
    srv_call *job_head, *job_tail;
    bool workers_stop;
    bool shutdown_notified;

    bool started;           /* grpc_server_start ran; touched by the owner thread only */
    bool shut_down;         /* sc_rpc_server_shutdown finished; owner thread only */
    atomic_bool accepting;  /* false once shutdown began: the event loop stops re-arming */
    atomic_bool cancelling; /* grace is over: every ctx reads as cancelled */
    atomic_int live_calls;  /* calls matched and not yet freed */
    call_tag t_shutdown;
};

static void arena_free(arena_block *b)
{
    while (b != NULL) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
}

static void call_free(srv_call *c)
{
    if (c->call != NULL) {
        grpc_call_unref(c->call);
        atomic_fetch_sub(&c->srv->live_calls, 1);
    }
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->req_md);
    if (c->recv_buf != NULL)
        grpc_byte_buffer_destroy(c->recv_buf);
    if (c->send_buf != NULL)
        grpc_byte_buffer_destroy(c->send_buf);
    grpc_slice_unref(c->status_details);
    grpc_slice_unref(c->trailer.value);
    if (c->ctx.peer != NULL)
        gpr_free(c->ctx.peer);
    arena_free(c->ctx.arena);
    free(c->method_name);
    free(c);
}

/* For logs: the method name is missing only when copying it ran out of memory. */
static const char *call_name(const srv_call *c)
{
    return c->method_name ? c->method_name : "(unnamed call)";
}

static void call_unref(srv_call *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        call_free(c);
}

/* Starts a batch holding one reference for its completion event. */
static void call_start_batch(srv_call *c, const grpc_op *ops, size_t n, call_tag *tag)
{
    atomic_fetch_add(&c->refs, 1);
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
    if (e != GRPC_CALL_OK) {
        SC_LOG_WARN(RPC_LOG, "%s: starting a batch failed: %s", call_name(c),
                    grpc_call_error_to_string(e));
        call_unref(c);
    }
}

/* Arms the server for its next call; the NEW tag holds the only reference until then. */
static void server_request_call(sc_rpc_server *srv)
{
    srv_call *c = calloc(1, sizeof *c);
    if (c == NULL) {
        SC_LOG_ERROR(RPC_LOG, "out of memory: no longer accepting calls");
        return;
    }
    c->srv = srv;
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->req_md);
    c->status_details = grpc_empty_slice();
    c->trailer.key = grpc_slice_from_static_string(RPC_STATUS_KEY);
    c->trailer.value = grpc_empty_slice();
    c->t_new = (call_tag){TAG_NEW, c};
    c->t_recv = (call_tag){TAG_RECV, c};
    c->t_send = (call_tag){TAG_SEND, c};
    c->t_close = (call_tag){TAG_CLOSE, c};
    c->ctx.srv = srv;
    c->ctx.deadline_ns = UINT64_MAX;
    atomic_init(&c->ctx.cancelled, false);
    atomic_init(&c->refs, 1);
    grpc_call_error e = grpc_server_request_call(srv->server, &c->call, &c->details, &c->req_md,
                                                 srv->cq, srv->cq, &c->t_new);
    if (e != GRPC_CALL_OK) {
        SC_LOG_WARN(RPC_LOG, "requesting the next call failed: %s", grpc_call_error_to_string(e));
        call_free(c);
    }
}

/* Sends the final status (and the response when `resp` is set; ownership moves to the call). */
static void call_reply(srv_call *c, sc_status rc, const char *msg, grpc_byte_buffer *resp)
{
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (resp != NULL) {
        c->send_buf = resp;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = resp;
    }
    int code = sc_rpc_status_to_code(rc);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)code;
    if (rc != SC_OK) {
        c->status_details = grpc_slice_from_copied_string(msg);
        ops[n].data.send_status_from_server.status_details = &c->status_details;
        c->trailer.value = grpc_slice_from_static_string(sc_status_name(rc));
        ops[n].data.send_status_from_server.trailing_metadata_count = 1;
        ops[n].data.send_status_from_server.trailing_metadata = &c->trailer;
        SC_LOG_DEBUG(RPC_LOG, "%s from %s: %s: %s", call_name(c), c->ctx.peer ? c->ctx.peer : "?",
                     sc_rpc_code_name(code), msg);
    }
    n++;
    call_start_batch(c, ops, n, &c->t_send);
}

static void server_queue_job(sc_rpc_server *srv, srv_call *c)
{
    pthread_mutex_lock(&srv->mu);
    c->next_job = NULL;
    if (srv->job_tail != NULL)
        srv->job_tail->next_job = c;
    else
        srv->job_head = c;
    srv->job_tail = c;
    pthread_cond_signal(&srv->job_cv);
    pthread_mutex_unlock(&srv->mu);
}

static void ctx_set_deadline(sc_rpc_ctx *ctx, gpr_timespec deadline)
{
    if (gpr_time_cmp(deadline, gpr_inf_future(deadline.clock_type)) == 0)
        return;
    gpr_timespec left = gpr_time_sub(deadline, gpr_now(deadline.clock_type));
    uint64_t now = sc_clock_now_ns();
    if (left.tv_sec < 0) {
        ctx->deadline_ns = now;
    } else if (left.tv_sec < 100000000) { /* further out than ~3 years: treat as none */
        ctx->deadline_ns = now + (uint64_t)left.tv_sec * 1000000000u + (uint64_t)left.tv_nsec;
    }
}

static const sc_rpc_method *server_find_method(const sc_rpc_server *srv, const char *name)
{
    for (size_t i = 0; i < srv->n_methods; i++)
        if (strcmp(srv->methods[i].name, name) == 0)
            return &srv->methods[i];
    return NULL;
}

static void on_new_call(srv_call *c, bool ok)
{
    sc_rpc_server *srv = c->srv;
    if (!ok) { /* the server is shutting down: no call came */
        c->call = NULL;
        call_free(c);
        return;
    }
    atomic_fetch_add(&srv->live_calls, 1);
    if (atomic_load(&srv->accepting))
        server_request_call(srv);

    size_t len = GRPC_SLICE_LENGTH(c->details.method);
    c->method_name = malloc(len + 1);
    if (c->method_name != NULL) {
        memcpy(c->method_name, GRPC_SLICE_START_PTR(c->details.method), len);
        c->method_name[len] = '\0';
    }
    c->ctx.method = c->method_name;
    c->ctx.peer = grpc_call_get_peer(c->call);
    ctx_set_deadline(&c->ctx, c->details.deadline);

    grpc_op close_op;
    memset(&close_op, 0, sizeof close_op);
    close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    close_op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    call_start_batch(c, &close_op, 1, &c->t_close);

    if (c->method_name == NULL) {
        call_reply(c, SC_ERR_NOMEM, "out of memory", NULL);
    } else if ((c->method = server_find_method(srv, c->method_name)) == NULL) {
        char msg[512];
        snprintf(msg, sizeof msg, "unknown method %s", c->method_name);
        SC_LOG_INFO(RPC_LOG, "%s from %s", msg, c->ctx.peer);
        call_reply(c, SC_ERR_UNSUPPORTED, msg, NULL);
    } else {
        grpc_op recv_op;
        memset(&recv_op, 0, sizeof recv_op);
        recv_op.op = GRPC_OP_RECV_MESSAGE;
        recv_op.data.recv_message.recv_message = &c->recv_buf;
        call_start_batch(c, &recv_op, 1, &c->t_recv);
    }
    call_unref(c); /* the NEW tag's reference */
}

static void on_recv(srv_call *c, bool ok)
{
    if (!ok || c->recv_buf == NULL) {
        /* A cancelled call (gRPC cancels one whose request is over the limit, answering
         * RESOURCE_EXHAUSTED itself), or a client that half-closed without a request. */
        call_reply(c, SC_ERR_INVALID, "the call carried no request message", NULL);
        call_unref(c);
        return;
    }
    server_queue_job(c->srv, c); /* the RECV reference moves to the job */
}

static void *server_event_loop(void *arg)
{
    sc_rpc_server *srv = arg;
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        call_tag *t = ev.tag;
        switch (t->kind) {
        case TAG_SHUTDOWN:
            pthread_mutex_lock(&srv->mu);
            srv->shutdown_notified = true;
            pthread_cond_broadcast(&srv->state_cv);
            pthread_mutex_unlock(&srv->mu);
            break;
        case TAG_NEW:
            on_new_call(t->call, ev.success);
            break;
        case TAG_RECV:
            on_recv(t->call, ev.success);
            break;
        case TAG_SEND:
            call_unref(t->call);
            break;
        case TAG_CLOSE:
            if (!ev.success || t->call->close_cancelled)
                atomic_store(&t->call->ctx.cancelled, true);
            call_unref(t->call);
            break;
        }
    }
    return NULL;
}

/* Decodes, checks, runs the handler and replies; on a handler thread. */
static void call_handle(srv_call *c)
{
    const sc_rpc_method *m = c->method;
    sc_err err;
    sc_err_clear(&err);
    ProtobufCMessage *req = NULL, *resp = NULL;
    grpc_byte_buffer *out = NULL;
    sc_status rc;

    if (sc_rpc_ctx_cancelled(&c->ctx)) {
        rc = SC_ERRF(&err, SC_ERR_CANCELLED, "the call was cancelled before its handler ran");
        goto reply;
    }
    grpc_slice in = buffer_flatten(c->recv_buf);
    rc = sc_wire_unpack(m->req_desc, GRPC_SLICE_START_PTR(in), GRPC_SLICE_LENGTH(in), &req, &err);
    grpc_slice_unref(in);
    if (rc != SC_OK)
        goto reply;

    if (header_field(m->req_desc) != NULL) {
        const Stagecraft__Header *h = (const Stagecraft__Header *)sc_wire_header(req);
        char what[256];
        snprintf(what, sizeof what, "request from %s", c->ctx.peer ? c->ctx.peer : "?");
        rc = sc_wire_check_version(h ? h->protocol_version : 0, what, &err);
        if (rc != SC_OK)
            goto reply;
        c->ctx.header = h;
    }

    rc = m->handler(&c->ctx, req, &resp, m->user, &err);
    if (rc == SC_OK) {
        grpc_slice s;
        if (resp == NULL)
            rc = SC_ERRF(&err, SC_ERR_INTERNAL, "the handler returned no response");
        else if (resp->descriptor != m->resp_desc)
            rc = SC_ERRF(&err, SC_ERR_INTERNAL, "the handler returned a %s instead of a %s",
                         resp->descriptor->name, m->resp_desc->name);
        else if ((rc = pack_with_header(resp, c->srv->max_bytes, &s, &err)) == SC_OK)
            out = buffer_from_slice(s);
    } else if (rc == SC_ERR_CANCELLED && sc_clock_now_ns() >= c->ctx.deadline_ns) {
        /* A handler that gave up because the call's deadline passed: the client is told so,
         * as its own deadline would, whichever of the two fires first. */
        sc_err late;
        sc_err_clear(&late);
        SC_ERRF(&late, SC_ERR_TIMEOUT, "deadline exceeded while the handler ran (%s)", err.msg);
        err = late;
        rc = SC_ERR_TIMEOUT;
    } else if (err.code == SC_OK) {
        SC_ERRF(&err, rc, "%s", sc_status_str(rc));
    }
    if (resp != NULL && m->resp_free != NULL)
        m->resp_free(resp, m->user);
reply:
    call_reply(c, rc, err.msg, out);
    if (req != NULL)
        protobuf_c_message_free_unpacked(req, NULL);
    c->ctx.header = NULL;
}

static void *server_worker(void *arg)
{
    sc_rpc_server *srv = arg;
    for (;;) {
        pthread_mutex_lock(&srv->mu);
        while (srv->job_head == NULL && !srv->workers_stop)
            pthread_cond_wait(&srv->job_cv, &srv->mu);
        srv_call *c = srv->job_head;
        if (c != NULL) {
            srv->job_head = c->next_job;
            if (srv->job_head == NULL)
                srv->job_tail = NULL;
        }
        pthread_mutex_unlock(&srv->mu);
        if (c == NULL)
            return NULL;
        call_handle(c);
        call_unref(c);
    }
}

static sc_status server_check_cfg(const sc_rpc_server_cfg *cfg, sc_err *err)
{
    if (cfg->listen_addr == NULL || cfg->listen_addr[0] == '\0')
        return SC_ERRF(err, SC_ERR_INVALID, "listen_addr is empty: give HOST:PORT");
    if (cfg->handler_threads < 0 || cfg->handler_threads > RPC_MAX_HANDLER_THREADS)
        return SC_ERRF(err, SC_ERR_INVALID, "handler_threads %d is outside [0, %d]",
                       cfg->handler_threads, RPC_MAX_HANDLER_THREADS);
    if ((cfg->tls.cert_path == NULL) != (cfg->tls.key_path == NULL))
        return SC_ERRF(err, SC_ERR_INVALID, "TLS needs both a certificate and a private key");
    if (cfg->tls.ca_path != NULL && cfg->tls.cert_path == NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "a TLS CA for client certificates needs the server's certificate and key");
    if (cfg->n_methods > 0 && cfg->methods == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "n_methods is %zu but methods is NULL", cfg->n_methods);
    for (size_t i = 0; i < cfg->n_methods; i++) {
        const sc_rpc_method *m = &cfg->methods[i];
        if (m->name == NULL || m->name[0] != '/')
            return SC_ERRF(err, SC_ERR_INVALID,
                           "methods[%zu]: the name must be a full method name such as "
                           "/stagecraft.Coordinator/SubmitJob",
                           i);
        if (m->req_desc == NULL || m->resp_desc == NULL || m->handler == NULL)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "methods[%zu] (%s): request and response descriptors and a handler "
                           "are required",
                           i, m->name);
        if (m->req_desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC ||
            m->resp_desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC)
            return SC_ERRF(err, SC_ERR_INVALID, "methods[%zu] (%s): not a message descriptor", i,
                           m->name);
        for (size_t j = 0; j < i; j++)
            if (strcmp(cfg->methods[j].name, m->name) == 0)
                return SC_ERRF(err, SC_ERR_INVALID, "methods[%zu]: %s is listed twice", i, m->name);
    }
    return SC_OK;
}

static sc_status server_credentials(const sc_rpc_tls *tls, grpc_server_credentials **out,
                                    sc_err *err)
{
    if (tls->cert_path == NULL) {
        *out = grpc_insecure_server_credentials_create();
        return SC_OK;
    }
    pem_files pem;
    SC_CHECK(pem_files_read(tls, &pem, err));
    grpc_ssl_pem_key_cert_pair pair = {.private_key = pem.key, .cert_chain = pem.cert};
    *out = grpc_ssl_server_credentials_create_ex(
        pem.ca, &pair, 1,
        pem.ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
    pem_files_free(&pem);
    if (*out == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "gRPC refused the TLS certificate %s or key %s",
                       tls->cert_path, tls->key_path);
    return SC_OK;
}

/* Frees what sc_rpc_server_new built; threads must already be joined. */
static void server_free(sc_rpc_server *srv)
{
    if (srv->server != NULL)
        grpc_server_destroy(srv->server);
    if (srv->cq != NULL) {
        if (!srv->shut_down) { /* never started: nothing but the queue's own shutdown to drain */
            grpc_completion_queue_shutdown(srv->cq);
            while (grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
                       .type != GRPC_QUEUE_SHUTDOWN)
                ;
        }
        grpc_completion_queue_destroy(srv->cq);
    }
    for (size_t i = 0; i < srv->n_methods; i++)
        free((char *)srv->methods[i].name);
    free(srv->methods);
    free(srv->workers);
    pthread_cond_destroy(&srv->state_cv);
    pthread_cond_destroy(&srv->job_cv);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
    grpc_shutdown();
}

sc_status sc_rpc_server_new(sc_rpc_server **out, const sc_rpc_server_cfg *cfg, sc_err *err)
{
    assert(out != NULL && cfg != NULL);
    *out = NULL;
    SC_CHECK(server_check_cfg(cfg, err));
    size_t max_bytes = cfg->max_message_bytes;
    SC_CHECK(check_max_bytes(&max_bytes, err));

    sc_rpc_server *srv = calloc(1, sizeof *srv);
    SC_ALLOC_CHECK(srv, err);
    grpc_init();
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->job_cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->state_cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&srv->accepting, true);
    atomic_init(&srv->cancelling, false);
    atomic_init(&srv->live_calls, 0);
    srv->t_shutdown = (call_tag){TAG_SHUTDOWN, NULL};
    srv->max_bytes = max_bytes;
    int n_workers = cfg->handler_threads ? cfg->handler_threads : SC_RPC_DEFAULT_HANDLER_THREADS;
    sc_status rc = SC_OK;

    srv->workers = calloc((size_t)n_workers, sizeof *srv->workers);
    srv->methods = calloc(cfg->n_methods ? cfg->n_methods : 1, sizeof *srv->methods);
    if (srv->workers == NULL || srv->methods == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory creating the RPC server");
        goto fail;
    }
    for (size_t i = 0; i < cfg->n_methods; i++) {
        srv->methods[i] = cfg->methods[i];
        srv->methods[i].name = strdup(cfg->methods[i].name);
        srv->n_methods = i + 1;
        if (srv->methods[i].name == NULL) {
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory copying the method table");
            goto fail;
        }
    }

    grpc_arg args[3];
    set_int_arg(&args[0], GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int)max_bytes);
    set_int_arg(&args[1], GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int)max_bytes);
    /* Without this a second server on the same fixed port binds silently beside the first. */
    set_int_arg(&args[2], GRPC_ARG_ALLOW_REUSEPORT, 0);
    grpc_channel_args chargs = {.num_args = SC_ARRAY_LEN(args), .args = args};
    srv->server = grpc_server_create(&chargs, NULL);
    srv->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(srv->server, srv->cq, NULL);

    grpc_server_credentials *creds;
    SC_CHECK_GOTO(server_credentials(&cfg->tls, &creds, err), fail);
    srv->port = grpc_server_add_http2_port(srv->server, cfg->listen_addr, creds);
    grpc_server_credentials_release(creds);
    if (srv->port <= 0) {
        rc = SC_ERRF(err, SC_ERR_UNAVAILABLE,
                     "cannot listen on %s: the port is taken or the address is not local",
                     cfg->listen_addr);
        goto fail;
    }

    grpc_server_start(srv->server);
    srv->started = true;
    if (pthread_create(&srv->cq_thread, NULL, server_event_loop, srv) != 0) {
        rc = SC_ERRF(err, SC_ERR_INTERNAL, "cannot start the RPC event-loop thread");
        goto fail;
    }
    srv->cq_thread_started = true;
    server_request_call(srv);
    for (int i = 0; i < n_workers; i++) {
        if (pthread_create(&srv->workers[i], NULL, server_worker, srv) != 0) {
            rc = SC_ERRF(err, SC_ERR_INTERNAL, "cannot start RPC handler thread %d of %d", i + 1,
                         n_workers);
            goto fail;
        }
        srv->n_workers_started = i + 1;
    }
    SC_LOG_INFO(RPC_LOG, "serving %zu methods on %s (port %d, %s, %d handler threads)",
                srv->n_methods, cfg->listen_addr, srv->port,
                cfg->tls.cert_path ? (cfg->tls.ca_path ? "mutual TLS" : "TLS") : "plaintext",
                n_workers);
    *out = srv;
    return SC_OK;

fail:
    if (srv->started) {
        sc_rpc_server_shutdown(srv, 0);
    }
    server_free(srv);
    return rc;
}

int sc_rpc_server_port(const sc_rpc_server *srv)
{
    return srv->port;
}

/* Waits for the shutdown notification until `deadline_ns` (UINT64_MAX: for ever). */
static bool server_wait_notified(sc_rpc_server *srv, uint64_t deadline_ns)
{
    pthread_mutex_lock(&srv->mu);
    while (!srv->shutdown_notified) {
        uint64_t now = sc_clock_now_ns();
        if (deadline_ns != UINT64_MAX && now >= deadline_ns)
            break;
        /* Wake every few seconds even without a deadline, to say what is being waited for. */
        uint64_t until = now + 5000000000ull;
        if (deadline_ns < until)
            until = deadline_ns;
        struct timespec ts = {.tv_sec = (time_t)(until / 1000000000u),
                              .tv_nsec = (long)(until % 1000000000u)};
        if (pthread_cond_timedwait(&srv->state_cv, &srv->mu, &ts) != 0 &&
            deadline_ns == UINT64_MAX && !srv->shutdown_notified)
            SC_LOG_WARN(RPC_LOG, "shutdown: still waiting for handlers that ignore cancellation");
    }
    bool done = srv->shutdown_notified;
    pthread_mutex_unlock(&srv->mu);
    return done;
}

void sc_rpc_server_shutdown(sc_rpc_server *srv, int64_t grace_ms)
{
    if (srv == NULL || srv->shut_down || !srv->started)
        return;
    atomic_store(&srv->accepting, false);
    grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->t_shutdown);
    if (srv->cq_thread_started) {
        if (grace_ms < 0)
            grace_ms = 0;
        if (grace_ms > INT64_C(86400000))
            grace_ms = INT64_C(86400000);
        uint64_t grace_end = sc_clock_now_ns() + (uint64_t)grace_ms * 1000000u;
        if (!server_wait_notified(srv, grace_end)) {
            int live = atomic_load(&srv->live_calls);
            if (live > 0)
                SC_LOG_INFO(RPC_LOG, "shutdown: grace of %lld ms over, cancelling %d calls",
                            (long long)grace_ms, live);
            atomic_store(&srv->cancelling, true);
            grpc_server_cancel_all_calls(srv->server);
            server_wait_notified(srv, UINT64_MAX);
        }
    }

    pthread_mutex_lock(&srv->mu);
    srv->workers_stop = true;
    pthread_cond_broadcast(&srv->job_cv);
    pthread_mutex_unlock(&srv->mu);
    for (int i = 0; i < srv->n_workers_started; i++)
        pthread_join(srv->workers[i], NULL);
    srv->n_workers_started = 0;

    grpc_completion_queue_shutdown(srv->cq);
    if (srv->cq_thread_started) {
        pthread_join(srv->cq_thread, NULL);
        srv->cq_thread_started = false;
    } else {
        while (
            grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
            GRPC_QUEUE_SHUTDOWN)
            ;
    }
    srv->shut_down = true;
}

void sc_rpc_server_destroy(sc_rpc_server **p)
{
    if (p == NULL || *p == NULL)
        return;
    sc_rpc_server_shutdown(*p, 0);
    server_free(*p);
    *p = NULL;
}

/* ---- handler context ------------------------------------------------------------------------*/

bool sc_rpc_ctx_cancelled(const sc_rpc_ctx *ctx)
{
    return atomic_load(&ctx->cancelled) || atomic_load(&ctx->srv->cancelling) ||
           sc_clock_now_ns() >= ctx->deadline_ns;
}

const char *sc_rpc_ctx_method(const sc_rpc_ctx *ctx)
{
    return ctx->method;
}

const char *sc_rpc_ctx_peer(const sc_rpc_ctx *ctx)
{
    return ctx->peer ? ctx->peer : "";
}

uint64_t sc_rpc_ctx_deadline_ns(const sc_rpc_ctx *ctx)
{
    return ctx->deadline_ns;
}

const Stagecraft__Header *sc_rpc_ctx_header(const sc_rpc_ctx *ctx)
{
    return ctx->header;
}

void *sc_rpc_ctx_alloc(sc_rpc_ctx *ctx, size_t bytes)
{
    arena_block *b = calloc(1, sizeof *b + bytes);
    if (b == NULL)
        return NULL;
    b->next = ctx->arena;
    ctx->arena = b;
    return b->data;
}

char *sc_rpc_ctx_strdup(sc_rpc_ctx *ctx, const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = sc_rpc_ctx_alloc(ctx, n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

ProtobufCMessage *sc_rpc_ctx_new_message(sc_rpc_ctx *ctx, const ProtobufCMessageDescriptor *desc)
{
    ProtobufCMessage *m = sc_rpc_ctx_alloc(ctx, desc->sizeof_message);
    if (m != NULL)
        protobuf_c_message_init(desc, m);
    return m;
}

/* ---- client ---------------------------------------------------------------------------------*/

struct sc_rpc_client {
    grpc_channel *channel;
    char *target;
    size_t max_bytes;
};

static sc_status client_credentials(const sc_rpc_client_cfg *cfg, grpc_channel_credentials **out,
                                    sc_err *err)
{
    const sc_rpc_tls *tls = &cfg->tls;
    if (tls->ca_path == NULL && tls->cert_path == NULL) {
        *out = grpc_insecure_credentials_create();
        return SC_OK;
    }
    pem_files pem;
    SC_CHECK(pem_files_read(tls, &pem, err));
    grpc_ssl_pem_key_cert_pair pair = {.private_key = pem.key, .cert_chain = pem.cert};
    *out = grpc_ssl_credentials_create(pem.ca, pem.cert ? &pair : NULL, NULL, NULL);
    pem_files_free(&pem);
    if (*out == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "gRPC refused the client TLS files");
    return SC_OK;
}

sc_status sc_rpc_client_new(sc_rpc_client **out, const char *target, const sc_rpc_client_cfg *cfg,
                            sc_err *err)
{
    assert(out != NULL);
    *out = NULL;
    static const sc_rpc_client_cfg defaults = {0};
    if (cfg == NULL)
        cfg = &defaults;
    if (target == NULL || target[0] == '\0')
        return SC_ERRF(err, SC_ERR_INVALID, "the RPC target is empty: give HOST:PORT");
    if ((cfg->tls.cert_path == NULL) != (cfg->tls.key_path == NULL))
        return SC_ERRF(err, SC_ERR_INVALID,
                       "a TLS client certificate needs its private key and the other way round");
    size_t max_bytes = cfg->max_message_bytes;
    SC_CHECK(check_max_bytes(&max_bytes, err));

    sc_rpc_client *cli = calloc(1, sizeof *cli);
    SC_ALLOC_CHECK(cli, err);
    cli->target = strdup(target);
    if (cli->target == NULL) {
        free(cli);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory creating an RPC client");
    }
    cli->max_bytes = max_bytes;
    grpc_init();

    grpc_channel_credentials *creds;
    sc_status rc = client_credentials(cfg, &creds, err);
    if (rc != SC_OK) {
        free(cli->target);
        free(cli);
        grpc_shutdown();
        return rc;
    }
    grpc_arg args[3];
    size_t n = 0;
    set_int_arg(&args[n++], GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int)max_bytes);
    set_int_arg(&args[n++], GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int)max_bytes);
    if (cfg->tls_server_name != NULL) {
        args[n].type = GRPC_ARG_STRING;
        args[n].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[n++].value.string = (char *)cfg->tls_server_name;
    }
    grpc_channel_args chargs = {.num_args = n, .args = args};
    cli->channel = grpc_channel_create(target, creds, &chargs);
    grpc_channel_credentials_release(creds);
    *out = cli;
    return SC_OK;
}

void sc_rpc_client_destroy(sc_rpc_client **p)
{
    if (p == NULL || *p == NULL)
        return;
    sc_rpc_client *cli = *p;
    grpc_channel_destroy(cli->channel);
    free(cli->target);
    free(cli);
    grpc_shutdown();
    *p = NULL;
}

/* The sc_status the server's handler returned, when its trailer agrees with the gRPC code. */
static sc_status trailer_status(const grpc_metadata_array *md, grpc_status_code code)
{
    for (size_t i = 0; i < md->count; i++) {
        const grpc_metadata *e = &md->metadata[i];
        if (grpc_slice_str_cmp(e->key, RPC_STATUS_KEY) != 0)
            continue;
        for (int s = 1; s < SC_STATUS_COUNT; s++)
            if (grpc_slice_str_cmp(e->value, sc_status_name((sc_status)s)) == 0 &&
                sc_rpc_status_to_code((sc_status)s) == (int)code)
                return (sc_status)s;
    }
    return sc_rpc_code_to_status(code);
}

/* One call: sends `req` (a reference is taken over), fills *resp with the response bytes
 * (unref) on SC_OK. Errors are "METHOD at TARGET: CODE: details". */
static sc_status client_invoke(sc_rpc_client *cli, const char *method, grpc_slice req,
                               grpc_slice *resp, int64_t timeout_ms, sc_err *err)
{
    if (GRPC_SLICE_LENGTH(req) > cli->max_bytes) {
        size_t n = GRPC_SLICE_LENGTH(req);
        grpc_slice_unref(req);
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "%s at %s: request of %zu bytes exceeds the message limit of %zu bytes",
                       method, cli->target, n, cli->max_bytes);
    }
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    grpc_slice mslice = grpc_slice_from_copied_string(method);
    grpc_call *call = grpc_channel_create_call(cli->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                               mslice, NULL, deadline, NULL);
    grpc_slice_unref(mslice);
    grpc_byte_buffer *req_buf = buffer_from_slice(req);
    grpc_byte_buffer *resp_buf = NULL;
    grpc_metadata_array init_md, trail_md;
    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trail_md);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    sc_status rc = SC_OK;

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = req_buf;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &resp_buf;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trail_md;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    ops[5].data.recv_status_on_client.error_string = &error_string;
    int tag;
    grpc_call_error e = grpc_call_start_batch(call, ops, SC_ARRAY_LEN(ops), &tag, NULL);
    if (e != GRPC_CALL_OK) {
        rc = SC_ERRF(err, SC_ERR_GRPC, "%s at %s: starting the call failed: %s", method,
                     cli->target, grpc_call_error_to_string(e));
        goto out;
    }
    gpr_timespec give_up =
        gpr_time_add(deadline, gpr_time_from_millis(RPC_CLIENT_SLACK_MS, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_next(cq, give_up, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        SC_LOG_WARN(RPC_LOG, "%s at %s: no end %d ms past the deadline; cancelling", method,
                    cli->target, RPC_CLIENT_SLACK_MS);
        grpc_call_cancel(call, NULL);
        ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    }
    /* The batch's success flag says little: a call that failed still completes its
     * RECV_STATUS op, and the status code is the verdict. */
    if (status != GRPC_STATUS_OK) {
        const char *d = (const char *)GRPC_SLICE_START_PTR(details);
        int dlen = (int)GRPC_SLICE_LENGTH(details);
        if (dlen == 0 && error_string != NULL) {
            d = error_string;
            dlen = (int)strlen(error_string);
        }
        rc = SC_ERRF(err, trailer_status(&trail_md, status), "%s at %s: %s: %.*s", method,
                     cli->target, sc_rpc_code_name(status), dlen, d);
    } else if (resp_buf == NULL) {
        rc = SC_ERRF(err, SC_ERR_GRPC, "%s at %s: OK: but the server sent no response message",
                     method, cli->target);
    } else {
        *resp = buffer_flatten(resp_buf);
    }

out:
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_byte_buffer_destroy(req_buf);
    if (resp_buf != NULL)
        grpc_byte_buffer_destroy(resp_buf);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trail_md);
    grpc_slice_unref(details);
    gpr_free((void *)error_string);
    return rc;
}

static sc_status client_check_args(const sc_rpc_client *cli, const char *method, int64_t timeout_ms,
                                   sc_err *err)
{
    if (method == NULL || method[0] != '/')
        return SC_ERRF(err, SC_ERR_INVALID,
                       "method \"%s\" is not a full method name such as "
                       "/stagecraft.Coordinator/SubmitJob",
                       method ? method : "(null)");
    if (timeout_ms <= 0)
        return SC_ERRF(err, SC_ERR_INVALID, "%s at %s: timeout_ms must be positive, not %lld",
                       method, cli->target, (long long)timeout_ms);
    return SC_OK;
}

sc_status sc_rpc_call(sc_rpc_client *cli, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                      int64_t timeout_ms, sc_err *err)
{
    assert(cli != NULL && req != NULL && resp_desc != NULL && resp != NULL);
    *resp = NULL;
    SC_CHECK(client_check_args(cli, method, timeout_ms, err));
    sc_err e;
    sc_err_clear(&e);
    grpc_slice out;
    if (pack_with_header(req, cli->max_bytes, &out, &e) != SC_OK)
        return SC_ERRF(err, e.code, "%s at %s: request: %s", method, cli->target, e.msg);

    grpc_slice in;
    SC_CHECK(client_invoke(cli, method, out, &in, timeout_ms, err));
    ProtobufCMessage *m = NULL;
    sc_status rc =
        sc_wire_unpack(resp_desc, GRPC_SLICE_START_PTR(in), GRPC_SLICE_LENGTH(in), &m, &e);
    grpc_slice_unref(in);
    if (rc == SC_OK && header_field(resp_desc) != NULL) {
        const Stagecraft__Header *h = (const Stagecraft__Header *)sc_wire_header(m);
        rc = sc_wire_check_version(h ? h->protocol_version : 0, "the response", &e);
    }
    if (rc != SC_OK) {
        if (m != NULL)
            protobuf_c_message_free_unpacked(m, NULL);
        return SC_ERRF(err, rc, "%s at %s: %s", method, cli->target, e.msg);
    }
    *resp = m;
    return SC_OK;
}

sc_status sc_rpc_call_raw(sc_rpc_client *cli, const char *method, const uint8_t *data, size_t len,
                          uint8_t **out, size_t *out_len, int64_t timeout_ms, sc_err *err)
{
    assert(cli != NULL && (data != NULL || len == 0) && out != NULL && out_len != NULL);
    *out = NULL;
    *out_len = 0;
    SC_CHECK(client_check_args(cli, method, timeout_ms, err));
    grpc_slice in;
    SC_CHECK(client_invoke(cli, method, grpc_slice_from_copied_buffer((const char *)data, len), &in,
                           timeout_ms, err));
    size_t n = GRPC_SLICE_LENGTH(in);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) {
        grpc_slice_unref(in);
        return SC_ERRF(err, SC_ERR_NOMEM, "%s at %s: out of memory for a %zu-byte response", method,
                       cli->target, n);
    }
    memcpy(buf, GRPC_SLICE_START_PTR(in), n);
    grpc_slice_unref(in);
    *out = buf;
    *out_len = n;
    return SC_OK;
}
