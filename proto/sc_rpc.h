/*
 * sc_rpc: the management plane's unary RPC layer over the gRPC C core API, carrying protobuf-c
 * messages.
 *
 * Server: one completion-queue thread owns the gRPC event loop (accepts calls, reads requests,
 * dispatches by full method name) and a small pool of handler threads runs the handlers, so a
 * slow or hung handler holds one pool thread and never the event loop. Before a handler runs,
 * the request is decoded (malformed bytes -> INVALID_ARGUMENT naming the message type) and its
 * Header's protocol version checked (mismatch -> FAILED_PRECONDITION naming both versions);
 * every response gets a Header carrying this side's protocol version.
 * Client: blocking unary calls with a per-call deadline, safe to issue from many threads.
 *
 * Deliberately not here: streaming RPCs, retries, authentication tokens (handlers read the
 * request Header's token themselves), load balancing across servers.
 *
 * Key invariant: no request, however malformed, oversized, slow or cancelled, affects any other
 * call; every call ends with exactly one gRPC status, and an sc_status travels to the client as a
 * gRPC code plus a "stagecraft-status" trailer that restores the exact sc_status.
 */
#ifndef SC_RPC_H
#define SC_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "proto/stagecraft.pb-c.h"

/* gRPC's own default receive limit; used when a cfg leaves max_message_bytes at 0. */
#define SC_RPC_DEFAULT_MAX_MESSAGE_BYTES ((size_t)4 << 20)
#define SC_RPC_DEFAULT_HANDLER_THREADS 4

typedef struct sc_rpc_server sc_rpc_server;
typedef struct sc_rpc_client sc_rpc_client;
typedef struct sc_rpc_ctx sc_rpc_ctx;

/* PEM file paths; all NULL means plaintext.
 * Server: cert + key are its own chain and key (both required for TLS); ca, when set, makes the
 * server require and verify client certificates signed by it (mutual TLS).
 * Client: ca holds the roots that verify the server (NULL: the system's roots); cert + key, when
 * set, are presented to a server that asks for a client certificate. */
typedef struct {
    const char *cert_path;
    const char *key_path;
    const char *ca_path;
} sc_rpc_tls;

/* A handler decodes nothing and encodes nothing: it gets the decoded, version-checked request and
 * returns a response message of the method's resp_desc type in *resp.
 *
 * Ownership of *resp: allocate it, and everything it points to, with sc_rpc_ctx_alloc /
 * sc_rpc_ctx_strdup / sc_rpc_ctx_new_message; that memory lives until the response is sent and
 * is freed by the layer. Pointers into the request are fine too (it lives as long). Anything else
 * (the handler's own state) must be copied, since the response is packed after the handler
 * returns. A method may instead give a resp_free callback, called once with the response after
 * it is packed (also when the handler fails after setting *resp).
 * The layer sets the response's Header itself when the handler leaves it unset.
 *
 * Return SC_OK with *resp set, or an error recorded in err: the client receives the mapped gRPC
 * code (sc_rpc_status_to_code) with err->msg as the details, and no response message.
 * Runs on a pool thread: concurrent calls run concurrently, so shared state needs the handler's
 * own lock. A long handler polls sc_rpc_ctx_cancelled() and gives up when it turns true. */
typedef sc_status (*sc_rpc_handler_fn)(sc_rpc_ctx *ctx, const ProtobufCMessage *req,
                                       ProtobufCMessage **resp, void *user, sc_err *err);

typedef struct {
    const char *name; /* full method name: "/stagecraft.Coordinator/SubmitJob" (copied) */
    const ProtobufCMessageDescriptor *req_desc;
    const ProtobufCMessageDescriptor *resp_desc;
    sc_rpc_handler_fn handler;
    void (*resp_free)(ProtobufCMessage *resp, void *user); /* optional, see sc_rpc_handler_fn */
    void *user;                                            /* borrowed, passed to both */
} sc_rpc_method;

typedef struct {
    const char *listen_addr;  /* "HOST:PORT"; port 0 picks a free one (sc_rpc_server_port) */
    size_t max_message_bytes; /* request and response limit; 0: SC_RPC_DEFAULT_MAX_MESSAGE_BYTES */
    int handler_threads;      /* 0: SC_RPC_DEFAULT_HANDLER_THREADS */
    sc_rpc_tls tls;
    const sc_rpc_method *methods; /* the table is copied */
    size_t n_methods;
} sc_rpc_server_cfg;

/* Binds, starts the event-loop and handler threads, and serves until shutdown. Errors: a bad cfg
 * (SC_ERR_INVALID naming the field), unreadable TLS files (SC_ERR_IO), an address that cannot be
 * bound (SC_ERR_UNAVAILABLE naming it). */
sc_status sc_rpc_server_new(sc_rpc_server **out, const sc_rpc_server_cfg *cfg, sc_err *err);

/* The bound TCP port (the chosen one when listen_addr asked for port 0). */
int sc_rpc_server_port(const sc_rpc_server *srv);

/* Stops accepting calls, lets the calls in flight finish for up to grace_ms, then cancels the
 * rest (their handlers see sc_rpc_ctx_cancelled() and their clients get CANCELLED), waits for
 * every handler to return and joins all threads. Handlers that never poll the cancelled flag
 * delay this until they return. Idempotent; call from one thread, not from a handler. */
void sc_rpc_server_shutdown(sc_rpc_server *srv, int64_t grace_ms);

/* The calls the server received of its i-th method (i < the methods it serves, in the order
 * its cfg listed them) since it started, with the method's full name in *name (owned by the
 * server); false past the last method. Safe from any thread while the server lives. */
bool sc_rpc_server_calls(const sc_rpc_server *srv, size_t i, const char **name,
                         unsigned long *calls);

/* Shuts down (grace 0) if still serving, frees everything, sets *srv to NULL. Accepts NULL. */
void sc_rpc_server_destroy(sc_rpc_server **srv);

/* ---- inside a handler ------------------------------------------------------------------------
 * A ctx is valid only during the handler call and only on the handler's thread, except
 * sc_rpc_ctx_cancelled, which is safe from any thread the handler starts and joins. */

/* True once the client cancelled the call, its deadline passed, or the server is cancelling
 * calls at shutdown. */
bool sc_rpc_ctx_cancelled(const sc_rpc_ctx *ctx);

/* The full method name of the call. */
const char *sc_rpc_ctx_method(const sc_rpc_ctx *ctx);

/* The peer's address as gRPC names it, e.g. "ipv4:127.0.0.1:53422". */
const char *sc_rpc_ctx_peer(const sc_rpc_ctx *ctx);

/* The call's deadline on the sc_clock_now_ns() clock; UINT64_MAX when the client set none. */
uint64_t sc_rpc_ctx_deadline_ns(const sc_rpc_ctx *ctx);

/* The request's Header (protocol version already checked), or NULL when the request type has
 * none. */
const Stagecraft__Header *sc_rpc_ctx_header(const sc_rpc_ctx *ctx);

/* Zeroed memory owned by the call, freed after the response is sent; NULL when out of memory. */
void *sc_rpc_ctx_alloc(sc_rpc_ctx *ctx, size_t bytes);
char *sc_rpc_ctx_strdup(sc_rpc_ctx *ctx, const char *s);
/* A message of type `desc`, initialised with its defaults, owned by the call. */
ProtobufCMessage *sc_rpc_ctx_new_message(sc_rpc_ctx *ctx, const ProtobufCMessageDescriptor *desc);

/* ---- in-process calls ------------------------------------------------------------------------
 * A method's handler run on the caller's thread, outside gRPC: for a server's other front ends
 * (the coordinator's HTTP view) that must answer exactly as the RPC does. */

typedef struct sc_rpc_local sc_rpc_local;

/* Runs m->handler with `user` on `req` (of type m->req_desc). Its context has `peer` (NULL:
 * "local") as the peer, no request Header (so a handler that wants a token refuses) and no
 * deadline. On SC_OK *resp is the handler's response and *call owns it (and all the memory the
 * handler took from the context) until sc_rpc_local_free(call). On error *call and *resp are
 * NULL and err holds the handler's error. */
sc_status sc_rpc_local_call(const sc_rpc_method *m, void *user, const ProtobufCMessage *req,
                            const char *peer, sc_rpc_local **call, ProtobufCMessage **resp,
                            sc_err *err);

/* Frees the response and the call's memory, sets *call to NULL. Accepts NULL. */
void sc_rpc_local_free(sc_rpc_local **call);

/* ---- client ---------------------------------------------------------------------------------*/

typedef struct {
    size_t max_message_bytes; /* request and response limit; 0: SC_RPC_DEFAULT_MAX_MESSAGE_BYTES */
    sc_rpc_tls tls;
    const char *tls_server_name; /* name checked against the server certificate instead of the
                                    target's host (e.g. "localhost" for "127.0.0.1:PORT") */
} sc_rpc_client_cfg;

/* A channel to `target` ("HOST:PORT"); connects lazily, on the first call. `cfg` may be NULL for
 * plaintext and default limits. Errors: bad arguments (SC_ERR_INVALID), unreadable TLS files
 * (SC_ERR_IO). Thread-safe: any number of threads may call through one client. */
sc_status sc_rpc_client_new(sc_rpc_client **out, const char *target, const sc_rpc_client_cfg *cfg,
                            sc_err *err);

void sc_rpc_client_destroy(sc_rpc_client **cli);

/* One unary call of `method` with a deadline timeout_ms (> 0) from now. The request's Header is
 * filled with this side's protocol version when unset or zero (req itself is not modified). On
 * SC_OK, *resp is a `resp_desc` message whose Header version was checked; free it with
 * protobuf_c_message_free_unpacked(*resp, NULL).
 * Errors carry "METHOD at TARGET: CODE_NAME: details" and the sc_status the server's handler
 * returned, or else the one mapped from the gRPC code (sc_rpc_code_to_status): SC_ERR_TIMEOUT
 * at the deadline, SC_ERR_UNAVAILABLE when nothing answers, SC_ERR_TOO_LARGE over a size limit,
 * SC_ERR_PARSE for a response that does not decode, SC_ERR_VERSION for a mismatched one. */
sc_status sc_rpc_call(sc_rpc_client *cli, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                      int64_t timeout_ms, sc_err *err);

/* The same call with the bytes sent and received as they are: no Header filled or checked, no
 * decoding. *out is a malloc'd buffer of *out_len bytes (the caller frees), set on SC_OK. */
sc_status sc_rpc_call_raw(sc_rpc_client *cli, const char *method, const uint8_t *data, size_t len,
                          uint8_t **out, size_t *out_len, int64_t timeout_ms, sc_err *err);

/* ---- status codes ---------------------------------------------------------------------------*/

/* "OK", "DEADLINE_EXCEEDED", ... for a grpc_status_code; "UNKNOWN_CODE" outside the range. */
const char *sc_rpc_code_name(int code);

/* sc_status -> grpc_status_code: INVALID/PARSE -> INVALID_ARGUMENT, NOT_FOUND, EXISTS ->
 * ALREADY_EXISTS, PERMISSION -> PERMISSION_DENIED, VERSION/PRECONDITION -> FAILED_PRECONDITION,
 * TOO_LARGE/NOMEM -> RESOURCE_EXHAUSTED, UNAVAILABLE, TIMEOUT -> DEADLINE_EXCEEDED, CANCELLED,
 * UNSUPPORTED -> UNIMPLEMENTED, anything else -> INTERNAL. */
int sc_rpc_status_to_code(sc_status s);

/* grpc_status_code -> sc_status, the inverse where there is one (UNAUTHENTICATED ->
 * SC_ERR_PERMISSION, ABORTED -> SC_ERR_UNAVAILABLE, OUT_OF_RANGE -> SC_ERR_INVALID, DATA_LOSS ->
 * SC_ERR_IO, UNKNOWN and unknown codes -> SC_ERR_GRPC). */
sc_status sc_rpc_code_to_status(int code);

#endif /* SC_RPC_H */
