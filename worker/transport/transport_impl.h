/*
 * Internals shared by transport.c and its backends (not part of the contract): the backend
 * operations and the transport object. transport.c owns the pending list and
 * the wait loop; a backend only moves whole messages in and out of its inbox.
 */
#ifndef RT_TRANSPORT_IMPL_H
#define RT_TRANSPORT_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>

#include "worker/transport/transport.h"
#include "worker/transport/transport_msg.h"

/* Device payloads (gpu_calls.c, from the GPU backend's transport_devmem.c; SC_ERR_UNSUPPORTED
 * without CUDA in the build or the backend on the host): a stream of
 * `device` per transport; pool buffers (released buffers are reused; all are freed once no
 * transport holds a stream); a copy between any host and device pointers, done on return
 * (stream NULL: the default stream). */
sc_status rt_dev_open(int device, void **stream, sc_err *err);
void rt_dev_close(void *stream);
sc_status rt_dev_alloc(int device, size_t bytes, void **out, sc_err *err);
void rt_dev_release(void *p);
sc_status rt_dev_copy(int device, void *stream, void *dst, const void *src, size_t bytes,
                      sc_err *err);

typedef struct {
    sc_status (*bind)(rt_transport *t, const char *endpoint, sc_err *err);
    sc_status (*connect)(rt_transport *t, const char *prev, const char *next, sc_err *err);
    /* Takes ownership of `msg` whatever the outcome. */
    sc_status (*send)(rt_transport *t, rt_msg *msg, bool to_next, sc_err *err);
    /* Waits up to wait_ms for one message; *out is NULL when none came. SC_ERR_UNAVAILABLE when
     * nothing is queued and the peer that would send (from_next or the previous one) is gone. */
    sc_status (*poll)(rt_transport *t, int wait_ms, bool from_next, rt_msg **out, sc_err *err);
    void (*wake)(rt_transport *t); /* interrupt a poll (abort); may be NULL */
    void (*destroy)(rt_transport *t);
    /* Backends whose messages cannot wait in the pending list (nccl: they arrive in send order
     * and need a buffer of the right size posted first) set these instead of send / poll: they
     * move the caller's buffer directly and check the message's header themselves. The
     * neighbour checks of transport.c have been done. recv_direct fills *stamp (a message
     * without payload, zeroed by the caller) with the received message's kind, size and link
     * timing (sent_ns, arrived_ns, from_copy, clean; sent_ns 0: not measured). NULL for zmq
     * and local. */
    sc_status (*send_direct)(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                             const void *data, size_t bytes, sc_err *err);
    sc_status (*recv_direct)(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                             void *data, size_t bytes, rt_msg *stamp, sc_err *err);
    bool on_device; /* send_direct / recv_direct accept device pointers */
} rt_transport_ops;

struct rt_transport {
    const rt_transport_ops *ops;
    void *impl;
    rt_transport_cfg cfg;
    char endpoint[RT_ENDPOINT_MAX]; /* resolved by bind */
    bool has_prev, has_next;
    rt_msg *pending; /* received, not yet asked for; owned by the user thread */
    atomic_bool aborted;
    void *dev_stream; /* cfg.device_payloads: the copies' stream (rt_dev_open) */
    rt_link_sample links[RT_LINK_MAX]; /* measured since the last rt_transport_link_take */
    size_t n_links;
};

extern const rt_transport_ops rt_transport_zmq_ops;
extern const rt_transport_ops rt_transport_local_ops;
/* The nccl transport's operations from the GPU backend module (gpu_calls.c); NULL with err set
 * without CUDA + NCCL in the build or the backend on the host. */
const rt_transport_ops *rt_gpu_nccl_ops(sc_err *err);

/* A short name of the transport for messages: its endpoint, or "nccl stage transport" (an nccl
 * endpoint is some 500 characters of hex). */
const char *rt_transport_label(const rt_transport *t);

#endif /* RT_TRANSPORT_IMPL_H */
