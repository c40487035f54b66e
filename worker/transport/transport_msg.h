/*
 * rt transport messages: the record of one tagged message as the zmq and local backends deliver
 * it and transport.c keeps it in its pending list (internal to the transport folder).
 * Not here: matching or waiting (transport.c), moving messages (the backends).
 * Invariant: the payload is `data` (`bytes` of it) unless `dev` or `ext` holds it; rt_msg_free
 * releases any of them. `bytes` counts what travelled: with a 16-bit wire, 2 bytes a float. sent_ns
 * is on the sender's clock, arrived_ns on the receiver's (the same clock only on one host).
 */
#ifndef RT_TRANSPORT_MSG_H
#define RT_TRANSPORT_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_msg {
    struct rt_msg *next;
    uint64_t tag, step;
    int32_t kind, microbatch;
    size_t bytes;
    void *dev; /* local with device payloads: the payload, a pool buffer on dev_device;
                * NULL: the payload is `data` */
    int dev_device;
    /* Link measurement (transport.c): the sender's monotonic clock when it handed the message
     * over, the sending stage's copy, the receiver's clock when it took the message from its
     * inbox, and whether the receiver was waiting on an empty inbox then (so arrived_ns is the
     * arrival itself, not the end of some compute that kept the message waiting). */
    uint64_t sent_ns, arrived_ns;
    int32_t from_copy;
    bool clean;
    uint32_t wire; /* RT_WIRE_*: the floats travelled as 16 bits (widened when received) */
    /* a payload held elsewhere (zmq's received buffer, not copied), released by ext_free */
    const unsigned char *ext;
    void (*ext_free)(void *arg);
    void *ext_arg;
    unsigned char data[]; /* bytes, unless dev or ext */
} rt_msg;

/* Allocates a message with room for `bytes` payload bytes (NULL when out of memory). */
rt_msg *rt_msg_new(size_t bytes);
/* Frees a message, gives its device payload back to the pool and releases an external one.
 * Accepts NULL. */
void rt_msg_free(rt_msg *m);

/* The host payload: ext when set, else data. */
static inline const unsigned char *rt_msg_payload(const rt_msg *m)
{
    return m->ext != NULL ? m->ext : m->data;
}

#endif /* RT_TRANSPORT_MSG_H */
