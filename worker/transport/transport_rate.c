/*
 * How fast this worker's CPU moves data-plane bytes: messages pushed through a ZeroMQ TCP
 * socket pair over loopback within the process, timed in process CPU seconds. A CPU worker's
 * transfers (its pipeline messages, its share of an all-reduce) cost CPU on both ends: the TCP
 * stack, ZeroMQ's framing, the copies. Under a CPU quota that cost, not the network, bounds them:
 * two workers at 0.2 of a core each move a few MB of gradients in tens of milliseconds over a
 * link that would carry them in one. Counted in CPU seconds, the figure does not depend on the
 * quota the worker happens to have while it measures; the coordinator scales it by the quota
 * (planning.c).
 */
#include "worker/transport/transport_rate.h"

#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/sc_clock.h"

#define MSG_BYTES ((size_t)1 << 20)
#define MSGS 24

double wk_transport_bytes_per_cpu_s(void)
{
    void *ctx = zmq_ctx_new();
    void *push = ctx ? zmq_socket(ctx, ZMQ_PUSH) : NULL;
    void *pull = ctx ? zmq_socket(ctx, ZMQ_PULL) : NULL;
    char *buf = malloc(MSG_BYTES);
    double rate = 0;
    char endpoint[128];
    size_t len = sizeof endpoint;
    int linger = 0, timeout_ms = 5000;
    if (push == NULL || pull == NULL || buf == NULL)
        goto out;
    zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(pull, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(pull, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(push, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    if (zmq_bind(pull, "tcp://127.0.0.1:*") != 0 ||
        zmq_getsockopt(pull, ZMQ_LAST_ENDPOINT, endpoint, &len) != 0 ||
        zmq_connect(push, endpoint) != 0)
        goto out;
    memset(buf, 0x5a, MSG_BYTES);
    /* one message first: the connection is up before the clock starts */
    if (zmq_send(push, buf, 1, 0) != 1 || zmq_recv(pull, buf, MSG_BYTES, 0) != 1)
        goto out;
    double cpu0 = sc_clock_process_cpu_s();
    size_t moved = 0;
    for (int i = 0; i < MSGS; i++) {
        /* send then receive: at most one message in flight, as a ring all-reduce step does */
        if (zmq_send(push, buf, MSG_BYTES, 0) != (int)MSG_BYTES ||
            zmq_recv(pull, buf, MSG_BYTES, 0) != (int)MSG_BYTES)
            goto out;
        moved += MSG_BYTES;
    }
    double cpu = sc_clock_process_cpu_s() - cpu0;
    if (cpu > 0)
        rate = (double)moved / cpu;
out:
    free(buf);
    if (push)
        zmq_close(push);
    if (pull)
        zmq_close(pull);
    if (ctx)
        zmq_ctx_term(ctx);
    return rate;
}
