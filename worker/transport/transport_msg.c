/*
 * rt transport messages: the record in which zmq and local carry one tagged message, and in
 * which transport.c keeps it in its pending list until it is asked for.
 * Not here: matching, waiting or moving messages (transport.c and the backends do).
 * Invariant: a message's payload is either `data` (bytes of it, inline) or, with device payloads,
 * a pool buffer `dev` on dev_device, or a buffer `ext` held elsewhere; rt_msg_free gives a
 * pool buffer back and releases an external one.
 */
#include "worker/transport/transport_msg.h"

#include <stdlib.h>
#include <string.h>

#include "worker/transport/transport_impl.h"

rt_msg *rt_msg_new(size_t bytes)
{
    rt_msg *m = malloc(sizeof *m + bytes + 1);
    if (m != NULL) {
        memset(m, 0, sizeof *m);
        m->bytes = bytes;
    }
    return m;
}

void rt_msg_free(rt_msg *m)
{
    if (m == NULL)
        return;
    rt_dev_release(m->dev);
    if (m->ext_free != NULL)
        m->ext_free(m->ext_arg);
    free(m);
}
