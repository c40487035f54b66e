/*
 * rt transport: the data plane between neighbouring pipeline stages. A stage sends its output
 * activations to the next stage and its input gradients to the previous one; every message is
 * tagged (step, micro-batch, kind) so a receiver can ask for exactly the one it needs while
 * others that arrived early wait in a pending list.
 *
 * Backends behind this one interface: `zmq` (host memory over TCP between processes; each stage
 * binds one PULL inbox and connects a PUSH socket to each neighbour's inbox) and `local` (stages
 * in one process; an inbox is a mutex-protected queue found by name in a process-wide registry).
 * Not here: device memory (callers stage through host buffers), replica all-reduce, NCCL.
 *
 * Invariant: no call blocks forever. A receive waits at most `timeout_ms`, then returns
 * SC_ERR_TIMEOUT (SC_ERR_UNAVAILABLE when the local peer is known to be gone); rt_transport_abort()
 * makes every pending and later wait return SC_ERR_CANCELLED at once.
 * Threading: one thread uses a transport (the stage's compute thread), except
 * rt_transport_abort(), which any thread may call.
 */
#ifndef RT_TRANSPORT_H
#define RT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

typedef enum {
    RT_TRANSPORT_ZMQ = 0,
    RT_TRANSPORT_LOCAL = 1,
} rt_transport_kind;

/* Activations flow to the next stage, gradients to the previous one: the kind names the peer. */
typedef enum {
    RT_MSG_ACTIVATION = 0,
    RT_MSG_GRADIENT = 1,
} rt_msg_kind;

#define RT_ENDPOINT_MAX 256

typedef struct {
    rt_transport_kind kind;
    /* zmq: "tcp://HOST:PORT"; port 0 (or "*") picks a free port, see rt_transport_endpoint().
     * local: "local://NAME"; "local://" alone picks a unique name. */
    const char *bind_endpoint;
    int timeout_ms; /* longest wait of one receive (> 0) */
    uint64_t tag;   /* messages carrying another tag (an older job's) are dropped */
} rt_transport_cfg;

typedef struct rt_transport rt_transport;

/* Defaults: zmq on "tcp://127.0.0.1:0", 30 s timeout, tag 0. */
rt_transport_cfg rt_transport_cfg_default(void);

/* Parses "zmq" or "local"; `what` names the value in errors. */
sc_status rt_transport_kind_parse(const char *s, const char *what, rt_transport_kind *out,
                                  sc_err *err);

/* Binds the inbox. A malformed endpoint is SC_ERR_INVALID; an endpoint in use SC_ERR_EXISTS
 * (local) or SC_ERR_ZMQ. */
sc_status rt_transport_new(rt_transport **out, const rt_transport_cfg *cfg, sc_err *err);
/* Frees everything. zmq gives messages still queued for a peer up to min(timeout_ms, 5 s) to
 * leave (so a stage that exits right after its last send still delivers it), never longer;
 * local drops nothing (the peer's inbox holds them). Accepts NULL. */
void rt_transport_destroy(rt_transport **t);

/* The bound endpoint with the port / name resolved: what neighbours pass to connect. */
const char *rt_transport_endpoint(const rt_transport *t);

/* Connects to the neighbours' endpoints; NULL or "" for none (first / last stage). Local
 * endpoints must already be bound (SC_ERR_NOT_FOUND otherwise). */
sc_status rt_transport_connect(rt_transport *t, const char *prev_endpoint,
                               const char *next_endpoint, sc_err *err);

/* Sends `bytes` bytes (copied; the buffer may be reused at once) to the next stage for an
 * activation, to the previous one for a gradient. No peer in that direction is
 * SC_ERR_PRECONDITION; a local peer that is gone SC_ERR_UNAVAILABLE. */
sc_status rt_transport_send(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                            const void *data, size_t bytes, sc_err *err);

/* Receives the message (kind, step, microbatch) from the previous stage (activation) or the next
 * (gradient) into `data`, which must hold exactly `bytes` (a size mismatch is SC_ERR_INVALID).
 * Waits at most the configured timeout: SC_ERR_TIMEOUT, SC_ERR_UNAVAILABLE (peer gone) or
 * SC_ERR_CANCELLED (aborted). */
sc_status rt_transport_recv(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                            void *data, size_t bytes, sc_err *err);

/* Makes waits return SC_ERR_CANCELLED from now on. Thread-safe; async-signal-unsafe. */
void rt_transport_abort(rt_transport *t);

/* Messages received and not yet asked for (for tests and leak checks). */
size_t rt_transport_pending(const rt_transport *t);

#endif /* RT_TRANSPORT_H */
