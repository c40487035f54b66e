/*
 * Internals shared by the RPC server's two files: sc_rpc_server.c (a server's life: checking
 * its configuration, binding, starting and stopping its threads) and sc_rpc_call.c (one call's
 * path: the event loop, the handler pool and the handler's context). Not part of the interface,
 * which is sc_rpc.h.
 *
 * Key invariant: each started batch and the handler job hold one reference on a call; the last
 * one to drop frees it, so no event ever sees a freed call.
 */
#ifndef SC_RPC_SERVER_INTERNAL_H
#define SC_RPC_SERVER_INTERNAL_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/sc_rpc.h"

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
    atomic_ulong *calls; /* [n_methods]: calls received of each (sc_rpc_server_calls) */

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

/* Arms the server for its next call; the NEW tag holds the only reference until then. */
void rpc_server_request_call(sc_rpc_server *srv);

/* The event-loop thread: the only one that waits on srv->cq; returns when the queue shuts
 * down. */
void *rpc_server_event_loop(void *arg);

/* A handler thread: runs queued calls until srv->workers_stop is set and the queue is empty. */
void *rpc_server_worker(void *arg);

#endif /* SC_RPC_SERVER_INTERNAL_H */
