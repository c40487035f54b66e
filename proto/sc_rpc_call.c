/*
 * sc_rpc_call: one server call's path, from the moment gRPC matches it to the moment its last
 * reference drops, and the context its handler sees.
 *
 * The event-loop thread is the only one that waits on the completion queue. A call goes NEW
 * (matched by grpc_server_request_call, which is re-armed at once) -> RECV (request bytes read;
 * unknown methods are answered here without reading) -> a handler thread decodes, checks the
 * version, runs the handler and starts the SEND batch -> SEND and CLOSE events. The CLOSE batch
 * is started with the call, so a cancellation or deadline reaches the call's cancelled flag while
 * its handler still runs.
 *
 * Not here: creating, binding or stopping the server (sc_rpc_server.c).
 *
 * Key invariant: each started batch and the handler job hold one reference on the call; the
 * last one to drop frees it, so no event ever sees a freed call.
 */
#include "proto/sc_rpc.h"

#include <assert.h>
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "proto/sc_rpc_internal.h"
#include "proto/sc_rpc_server_internal.h"
#include "proto/sc_wire.h"

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
void rpc_server_request_call(sc_rpc_server *srv)
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
        rpc_server_request_call(srv);

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
        atomic_fetch_add(&srv->calls[c->method - srv->methods], 1);
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

void *rpc_server_event_loop(void *arg)
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
    grpc_slice in = rpc_buffer_flatten(c->recv_buf);
    rc = sc_wire_unpack(m->req_desc, GRPC_SLICE_START_PTR(in), GRPC_SLICE_LENGTH(in), &req, &err);
    grpc_slice_unref(in);
    if (rc != SC_OK)
        goto reply;

    if (rpc_header_field(m->req_desc) != NULL) {
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
        else if ((rc = rpc_pack_with_header(resp, c->srv->max_bytes, &s, &err)) == SC_OK)
            out = rpc_buffer_from_slice(s);
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

void *rpc_server_worker(void *arg)
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

/* ---- handler context ------------------------------------------------------------------------*/

bool sc_rpc_ctx_cancelled(const sc_rpc_ctx *ctx)
{
    /* an in-process call (sc_rpc_local_call) has no server to stop it */
    return atomic_load(&ctx->cancelled) ||
           (ctx->srv != NULL && atomic_load(&ctx->srv->cancelling)) ||
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

/* ---- in-process calls -----------------------------------------------------------------------*/

struct sc_rpc_local {
    sc_rpc_ctx ctx; /* srv NULL, peer malloc'd, no header, no deadline */
    const sc_rpc_method *method;
    void *user;
    ProtobufCMessage *resp;
};

sc_status sc_rpc_local_call(const sc_rpc_method *m, void *user, const ProtobufCMessage *req,
                            const char *peer, sc_rpc_local **call, ProtobufCMessage **resp,
                            sc_err *err)
{
    assert(m != NULL && m->handler != NULL && req != NULL && call != NULL && resp != NULL);
    assert(req->descriptor == m->req_desc);
    *call = NULL;
    *resp = NULL;
    sc_rpc_local *l = calloc(1, sizeof *l);
    if (l == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory starting an in-process %s", m->name);
    l->ctx.method = m->name;
    l->ctx.deadline_ns = UINT64_MAX;
    l->ctx.peer = strdup(peer ? peer : "local");
    l->method = m;
    l->user = user;
    atomic_init(&l->ctx.cancelled, false);
    sc_status rc = m->handler(&l->ctx, req, &l->resp, user, err);
    if (rc != SC_OK) {
        sc_rpc_local_free(&l);
        return rc;
    }
    assert(l->resp == NULL || l->resp->descriptor == m->resp_desc);
    *call = l;
    *resp = l->resp;
    return SC_OK;
}

void sc_rpc_local_free(sc_rpc_local **call)
{
    if (call == NULL || *call == NULL)
        return;
    sc_rpc_local *l = *call;
    if (l->resp != NULL && l->method->resp_free != NULL)
        l->method->resp_free(l->resp, l->user);
    free(l->ctx.peer);
    arena_free(l->ctx.arena);
    free(l);
    *call = NULL;
}
