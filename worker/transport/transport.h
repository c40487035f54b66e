/*
 * rt transport: the data plane between neighbouring pipeline stages. A stage sends its output
 * activations to the next stage and its input gradients to the previous one; every message is
 * tagged (step, micro-batch, kind) so a receiver can ask for exactly the one it needs while
 * others that arrived early wait in a pending list.
 *
 * Backends behind this one interface: `zmq` (host memory over TCP between processes; each stage
 * binds one PULL inbox and connects a PUSH socket to each neighbour's inbox), `local` (stages
 * in one process; an inbox is a mutex-protected queue found by name in a process-wide registry)
 * and `nccl` (GPU stages on distinct GPUs; ncclSend / ncclRecv over one two-rank communicator
 * per stage boundary and direction, see transport_nccl.c; CUDA + NCCL builds only).
 * zmq and local match messages by tag, so a receiver may ask in any order; nccl messages arrive
 * in the order they were sent (per direction), and asking for another one than the next is
 * SC_ERR_INVALID (a header sent with each payload is checked), never silent corruption.
 * Not here: the replicas' all-reduce on their GPUs (allreduce.h).
 *
 * Invariant: no call blocks forever. A receive waits at most `timeout_ms`, then returns
 * SC_ERR_TIMEOUT (SC_ERR_UNAVAILABLE when the local peer is known to be gone); rt_transport_abort()
 * makes every pending and later wait return SC_ERR_CANCELLED at once.
 * Threading: one thread uses a transport (the stage's compute thread), except
 * rt_transport_abort(), which any thread may call.
 */
#ifndef RT_TRANSPORT_H
#define RT_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "worker/transport/nccl_endpoint.h" /* nccl endpoints, RT_NCCL_ID_BYTES */

typedef enum {
    RT_TRANSPORT_ZMQ = 0,
    RT_TRANSPORT_LOCAL = 1,
    RT_TRANSPORT_NCCL = 2,
} rt_transport_kind;

/* Activations flow to the next stage, gradients to the previous one: the kind names the peer. */
typedef enum {
    RT_MSG_ACTIVATION = 0,
    RT_MSG_GRADIENT = 1,
} rt_msg_kind;

/* How the floats of activations and gradients travel between processes. */
typedef enum {
    RT_WIRE_F32 = 0,  /* as they are */
    RT_WIRE_BF16 = 1, /* rounded to bfloat16 (nearest, ties to even): half the bytes */
    RT_WIRE_FP16 = 2, /* rounded to IEEE half */
} rt_wire;

/* Room for an endpoint: an nccl one carries two hex-encoded 128-byte NCCL unique ids. */
#define RT_ENDPOINT_MAX 640

typedef struct {
    rt_transport_kind kind;
    /* zmq: "tcp://HOST:PORT"; port 0 (or "*") picks a free port, see rt_transport_endpoint().
     * local: "local://NAME"; "local://" alone picks a unique name.
     * nccl: "nccl://" for a stage with a next stage (it creates the ids of the communicators
     * towards it), "nccl://-" for the last stage; see rt_nccl_endpoint_parse for what binds. */
    const char *bind_endpoint;
    int timeout_ms; /* longest wait of one receive (> 0) */
    uint64_t tag;   /* messages carrying another tag (an older job's) are dropped (nccl: an
                     * error, since its messages cannot be skipped) */
    int device;     /* nccl only: the CUDA device ordinal of this stage (cuda:N) */
    /* The largest message a peer may legitimately send this stage (0: not known, no limit).
     * zmq: the inbox refuses larger ones; zmq disconnects a peer that sends one (it reconnects
     * by itself, but that message is lost), so the receive waiting for it times out as for a
     * lost peer. nccl: the largest message expected; its staging is allocated when connecting,
     * since device and pinned allocations while NCCL kernels run may wait for them. Larger
     * messages still work there (their staging is made when first needed). local: unused. */
    size_t max_message_bytes;
    /* local only (CUDA builds): the stage runs on cuda:`device`, and send / recv may be given
     * its device memory as well as host memory (rt_transport_on_device); a message then travels
     * device to device through a buffer of a pool instead of through host memory. A neighbour
     * without it still exchanges messages with this one (copies then cross PCIe). */
    bool device_payloads;
    /* This stage's copy (0 unreplicated): stamped on every message sent, so that a receiver's
     * link figures (rt_transport_link_take) name the sending copy. zmq and local only. */
    int copy;
    /* How rt_transport_send_floats sends over host memory (zmq, and local without device
     * payloads): a job in bf16 or fp16 sends its activations and gradients in those 16 bits,
     * half the bytes. Any receiver widens a 16-bit message back to floats, so the receiving
     * side needs no setting. Device paths (nccl, device payloads) send floats as they are. */
    rt_wire wire;
} rt_transport_cfg;

typedef struct rt_transport rt_transport;

/* Defaults: zmq on "tcp://127.0.0.1:0", 30 s timeout, tag 0. */
rt_transport_cfg rt_transport_cfg_default(void);

/* Parses "zmq", "local" or "nccl"; `what` names the value in errors. "nccl" in a build without
 * CUDA + NCCL is SC_ERR_UNSUPPORTED (the message says so); whether a device is present is
 * checked by rt_transport_new. */
sc_status rt_transport_kind_parse(const char *s, const char *what, rt_transport_kind *out,
                                  sc_err *err);

/* Binds the inbox. A malformed endpoint is SC_ERR_INVALID; an endpoint in use SC_ERR_EXISTS
 * (local) or SC_ERR_ZMQ. nccl: SC_ERR_UNSUPPORTED without CUDA + NCCL in the build, SC_ERR_CUDA
 * when cfg->device is not a visible device, SC_ERR_NCCL when NCCL cannot create an id. */
sc_status rt_transport_new(rt_transport **out, const rt_transport_cfg *cfg, sc_err *err);
/* Frees everything. zmq gives messages still queued for a peer up to min(timeout_ms, 5 s) to
 * leave (so a stage that exits right after its last send still delivers it), never longer;
 * local drops nothing (the peer's inbox holds them). Accepts NULL. */
void rt_transport_destroy(rt_transport **t);

/* The bound endpoint with the port / name resolved: what neighbours pass to connect. */
const char *rt_transport_endpoint(const rt_transport *t);

/* Connects to the neighbours' endpoints; NULL or "" for none (first / last stage). Local
 * endpoints must already be bound (SC_ERR_NOT_FOUND otherwise). nccl: collective with both
 * neighbours (each must call it with this stage's endpoint); waits at most timeout_ms for them
 * to join (SC_ERR_TIMEOUT), a malformed nccl endpoint is SC_ERR_INVALID. */
sc_status rt_transport_connect(rt_transport *t, const char *prev_endpoint,
                               const char *next_endpoint, sc_err *err);

/* Sends `bytes` bytes (copied; the buffer may be reused at once) to the next stage for an
 * activation, to the previous one for a gradient. No peer in that direction is
 * SC_ERR_PRECONDITION; a local peer that is gone SC_ERR_UNAVAILABLE. */
sc_status rt_transport_send(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                            const void *data, size_t bytes, sc_err *err);

/* rt_transport_send of `bytes` bytes of floats, which travel in the configured wire (cfg.wire)
 * where the payload goes through host memory; as they are elsewhere. */
sc_status rt_transport_send_floats(rt_transport *t, rt_msg_kind kind, uint64_t step,
                                   int microbatch, const float *data, size_t bytes, sc_err *err);

/* Receives the message (kind, step, microbatch) from the previous stage (activation) or the next
 * (gradient) into `data`, which must hold exactly `bytes` (a size mismatch is SC_ERR_INVALID); a
 * message of floats sent in 16 bits (rt_transport_send_floats) is widened into it.
 * Waits at most the configured timeout: SC_ERR_TIMEOUT, SC_ERR_UNAVAILABLE (peer gone) or
 * SC_ERR_CANCELLED (aborted). */
sc_status rt_transport_recv(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                            void *data, size_t bytes, sc_err *err);

/* rt_transport_recv of a message from another copy of this stage (the copies' all-reduce): it
 * counts in no neighbour's link figures, and *sent_ns is its sender's send stamp (on the
 * sender's monotonic clock; 0 where the backend stamps none, nccl). */
sc_status rt_transport_recv_copy(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                                 void *data, size_t bytes, uint64_t *sent_ns, sc_err *err);

/* True when send / recv may be given device pointers (the nccl backend, and local with
 * device_payloads: any pointer CUDA can address, host or device memory of cfg->device); false
 * for zmq and plain local (host memory only).
 * The transport orders nothing against the caller's streams: device memory given to send must
 * be fully written, and device memory given to recv no longer read, by the caller's own work
 * (kn_ctx_sync first); recv returns once the message is in place. */
bool rt_transport_on_device(const rt_transport *t);

/* Makes waits return SC_ERR_CANCELLED from now on. Thread-safe; async-signal-unsafe. */
void rt_transport_abort(rt_transport *t);

/* Messages received and not yet asked for (for tests and leak checks; nccl: always 0). */
size_t rt_transport_pending(const rt_transport *t);

/* What a receiver measured of one neighbour copy's messages (zmq and local; nccl measures
 * nothing here). Every message carries its sender's monotonic send time; the receiver notes
 * when it takes the message from its inbox. That moment is the arrival only when the receiver
 * was already waiting on an empty inbox (a "clean" message); otherwise the message sat there
 * behind the receiver's compute. Of the clean messages the fastest is kept: later messages of a
 * burst queue behind earlier ones in the sender's socket and on the wire, the first does not.
 * delay_s = arrival (this host's clock) - send stamp (the sender's clock): the transit of
 * `bytes` payload bytes, latency included, where both stages share a clock (one host); across
 * hosts it is off by the difference of the two clocks, which whoever reads it must remove. */
typedef struct {
    bool from_next;    /* gradients from the next stage; false: activations from the previous */
    int from_copy;     /* the sending stage's copy */
    uint32_t messages; /* messages of that peer taken since the last take */
    uint32_t clean;    /* of them, those that arrived while this stage waited */
    uint64_t bytes;    /* payload bytes of the fastest clean one (0: none was clean) */
    double delay_s;    /* its arrival minus its send stamp, seconds (0: none was clean) */
} rt_link_sample;

#define RT_LINK_MAX 16 /* peers a transport keeps figures of (more are not measured) */

/* Copies the figures measured since the last call (at most `max`, one per neighbour copy that
 * sent something) into out and starts afresh; returns their count. */
size_t rt_transport_link_take(rt_transport *t, rt_link_sample *out, size_t max);

/* The kind the transport was created with. */
rt_transport_kind rt_transport_kind_of(const rt_transport *t);

/* A stage whose two boundaries use different kinds (the runner's transport_next) publishes both
 * endpoints joined by this character, "tcp://H:P|nccl://v1/..."; no endpoint contains it. */
#define RT_ENDPOINT_SEP '|'

/* The part of `ep` a transport of `kind` connects to, into out[size]: `ep` itself when it is a
 * single endpoint (the backend then checks it), else the part whose scheme is the kind's
 * ("tcp://" zmq, "local://" local, "nccl://" nccl). A joined endpoint without such a part, or
 * one that does not fit, is SC_ERR_INVALID. */
sc_status rt_endpoint_pick(const char *ep, rt_transport_kind kind, char *out, size_t size,
                           sc_err *err);

/* The part of `ep` (one endpoint, or several joined by RT_ENDPOINT_SEP) that starts with
 * `scheme` ("tcp://", RT_REDUCE_SCHEME, ...) into out[size]; *found is false and out "" when
 * no part does. A part that does not fit is SC_ERR_INVALID. */
sc_status rt_endpoint_part(const char *ep, const char *scheme, char *out, size_t size, bool *found,
                           sc_err *err);

#endif /* RT_TRANSPORT_H */
