/*
 * rt transport, the backend-independent part: configuration, dispatch to the chosen backend, the
 * pending list of early messages and the bounded wait loop of a receive.
 * Does not touch sockets or queues itself (transport_zmq.c, transport_local.c do). The message
 * record is transport_msg.c's and the text of nccl endpoints nccl_endpoint.c's: the backends
 * use those modules, never this file, so the dependency runs one way (here to the backends).
 * Splitting joined endpoints (rt_endpoint_pick / part) stays here.
 * Invariant: a receive returns within timeout_ms plus one poll slice, whatever the peers do.
 */
#include "worker/transport/transport.h"

#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "kernels/precision.h"
#include "worker/transport/transport_impl.h"

/* Waits are cut in slices so an abort is noticed quickly even when a backend cannot be woken. */
#define POLL_SLICE_MS 50

rt_transport_cfg rt_transport_cfg_default(void)
{
    rt_transport_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = RT_TRANSPORT_ZMQ;
    c.bind_endpoint = "tcp://127.0.0.1:0";
    c.timeout_ms = 30000;
    c.tag = 0;
    return c;
}

sc_status rt_transport_kind_parse(const char *s, const char *what, rt_transport_kind *out,
                                  sc_err *err)
{
    if (s != NULL && strcmp(s, "zmq") == 0) {
        *out = RT_TRANSPORT_ZMQ;
        return SC_OK;
    }
    if (s != NULL && strcmp(s, "local") == 0) {
        *out = RT_TRANSPORT_LOCAL;
        return SC_OK;
    }
    if (s != NULL && strcmp(s, "nccl") == 0) {
#ifdef SC_HAVE_NCCL
        *out = RT_TRANSPORT_NCCL;
        return SC_OK;
#else
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "%s: \"nccl\" needs a build with CUDA and NCCL (this one is CPU-only: "
                       "configure with STAGECRAFT_CUDA=ON or AUTO where nvcc and NCCL are "
                       "installed); valid here: \"zmq\", \"local\"",
                       what);
#endif
    }
    return SC_ERRF(err, SC_ERR_INVALID,
                   "%s: unknown transport \"%s\"; valid: \"zmq\", \"local\", \"nccl\"", what,
                   s != NULL ? s : "(null)");
}

sc_status rt_transport_new(rt_transport **out, const rt_transport_cfg *cfg, sc_err *err)
{
    *out = NULL;
    if (cfg->timeout_ms <= 0)
        return SC_ERRF(err, SC_ERR_INVALID, "transport timeout_ms must be > 0, got %d",
                       cfg->timeout_ms);
    if (cfg->bind_endpoint == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "transport: no bind endpoint given");
    rt_transport *t = calloc(1, sizeof *t);
    SC_ALLOC_CHECK(t, err);
    t->cfg = *cfg;
    t->cfg.bind_endpoint = NULL; /* not kept: the caller's string may go away */
    atomic_init(&t->aborted, false);
    switch (cfg->kind) {
    case RT_TRANSPORT_ZMQ:
        t->ops = &rt_transport_zmq_ops;
        break;
    case RT_TRANSPORT_LOCAL:
        t->ops = &rt_transport_local_ops;
        break;
    case RT_TRANSPORT_NCCL:
        t->ops = rt_gpu_nccl_ops(err);
        if (t->ops == NULL) {
            free(t);
            sc_err_prefix(err, "transport: the nccl kind (valid without it: \"zmq\", \"local\")");
            return err != NULL ? err->code : SC_ERR_UNSUPPORTED;
        }
        break;
    default:
        free(t);
        return SC_ERRF(err, SC_ERR_INVALID, "transport: unknown kind %d", (int)cfg->kind);
    }
    if (cfg->device_payloads) {
        sc_status rc = cfg->kind != RT_TRANSPORT_LOCAL
                           ? SC_ERRF(err, SC_ERR_INVALID,
                                     "transport: device_payloads is for the local kind (nccl "
                                     "always takes device memory, zmq never)")
                           : rt_dev_open(cfg->device, &t->dev_stream, err);
        if (rc != SC_OK) {
            free(t);
            return rc;
        }
    }
    sc_status rc = t->ops->bind(t, cfg->bind_endpoint, err);
    if (rc != SC_OK) {
        rt_transport_destroy(&t);
        return rc;
    }
    *out = t;
    return SC_OK;
}

void rt_transport_destroy(rt_transport **tp)
{
    if (tp == NULL || *tp == NULL)
        return;
    rt_transport *t = *tp;
    if (t->ops != NULL && t->ops->destroy != NULL)
        t->ops->destroy(t);
    while (t->pending != NULL) {
        rt_msg *m = t->pending;
        t->pending = m->next;
        rt_msg_free(m);
    }
    rt_dev_close(t->dev_stream);
    free(t);
    *tp = NULL;
}

const char *rt_transport_endpoint(const rt_transport *t)
{
    return t->endpoint;
}

const char *rt_transport_label(const rt_transport *t)
{
    return t->cfg.kind == RT_TRANSPORT_NCCL ? "nccl stage transport" : t->endpoint;
}

bool rt_transport_on_device(const rt_transport *t)
{
    return t->ops->on_device || t->dev_stream != NULL;
}

static const char *nonempty(const char *s)
{
    return (s != NULL && s[0] != '\0') ? s : NULL;
}

sc_status rt_transport_connect(rt_transport *t, const char *prev_endpoint,
                               const char *next_endpoint, sc_err *err)
{
    const char *prev = nonempty(prev_endpoint), *next = nonempty(next_endpoint);
    SC_CHECK(t->ops->connect(t, prev, next, err));
    t->has_prev = prev != NULL;
    t->has_next = next != NULL;
    return SC_OK;
}

static kn_precision wire_precision(uint32_t wire)
{
    return wire == RT_WIRE_FP16 ? KN_PREC_FP16 : KN_PREC_BF16;
}

/* rt_transport_send, its floats in `wire` when that is not RT_WIRE_F32 (host payloads only) */
static sc_status send_msg(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                          const void *data, size_t bytes, rt_wire wire, sc_err *err)
{
    bool to_next = kind == RT_MSG_ACTIVATION;
    /* a direct backend checks its own state first: broken (a failed connect included) before
     * not connected, so a stage whose peer never joined hears "unusable", not "no stage" */
    if (t->ops->send_direct != NULL)
        return t->ops->send_direct(t, kind, step, microbatch, data, bytes, err);
    if (to_next ? !t->has_next : !t->has_prev)
        return SC_ERRF(err, SC_ERR_PRECONDITION, "transport %s: no %s stage to send %s to",
                       rt_transport_label(t), to_next ? "next" : "previous",
                       to_next ? "activations" : "gradients");
    /* with device payloads, the payload goes to a device buffer (from host or device memory) */
    bool dev = t->dev_stream != NULL && bytes > 0;
    bool half = !dev && wire != RT_WIRE_F32 && bytes % sizeof(float) == 0;
    size_t sent = half ? bytes / 2 : bytes;
    rt_msg *m = rt_msg_new(dev ? 0 : sent);
    SC_ALLOC_CHECK(m, err);
    m->tag = t->cfg.tag;
    m->step = step;
    m->kind = (int32_t)kind;
    m->microbatch = microbatch;
    m->from_copy = t->cfg.copy;
    m->sent_ns = sc_clock_now_ns(); /* handed over now; the backend's queue is transit */
    if (dev) {
        m->bytes = bytes;
        m->dev_device = t->cfg.device;
        sc_status rc = rt_dev_alloc(t->cfg.device, bytes, &m->dev, err);
        if (rc == SC_OK)
            rc = rt_dev_copy(t->cfg.device, t->dev_stream, m->dev, data, bytes, err);
        if (rc != SC_OK) {
            rt_msg_free(m);
            return rc;
        }
    } else if (half) { /* rounded as it is copied: no more work than the copy */
        m->wire = (uint32_t)wire;
        kn_pack16(wire_precision(m->wire), (uint16_t *)m->data, data, bytes / sizeof(float));
    } else if (bytes > 0) {
        memcpy(m->data, data, bytes);
    }
    return t->ops->send(t, m, to_next, err);
}

sc_status rt_transport_send(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                            const void *data, size_t bytes, sc_err *err)
{
    return send_msg(t, kind, step, microbatch, data, bytes, RT_WIRE_F32, err);
}

sc_status rt_transport_send_floats(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                                   const float *data, size_t bytes, sc_err *err)
{
    return send_msg(t, kind, step, microbatch, data, bytes, t->cfg.wire, err);
}

/* A 16-bit message widened into `data` (bytes of floats): straight into host memory, through a
 * host buffer into device memory. */
static sc_status widen(rt_transport *t, const rt_msg *m, void *data, size_t bytes, sc_err *err)
{
    size_t n = bytes / sizeof(float);
    kn_precision p = wire_precision(m->wire);
    const unsigned char *payload = rt_msg_payload(m);
    uint16_t *aligned = NULL;
    if (((uintptr_t)payload & 1u) != 0) { /* zmq keeps a small message inside its record, at
                                           * any address: 16-bit loads need it aligned */
        aligned = malloc(n * sizeof(uint16_t) + 1);
        SC_ALLOC_CHECK(aligned, err);
        memcpy(aligned, payload, n * sizeof(uint16_t));
        payload = (const unsigned char *)aligned;
    }
    sc_status rc = SC_OK;
    if (t->dev_stream == NULL) {
        kn_unpack16(p, data, (const uint16_t *)payload, n);
    } else {
        float *tmp = malloc(bytes);
        if (tmp == NULL) {
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory widening %zu bytes", bytes);
        } else {
            kn_unpack16(p, tmp, (const uint16_t *)payload, n);
            rc = rt_dev_copy(t->cfg.device, t->dev_stream, data, tmp, bytes, err);
            free(tmp);
        }
    }
    free(aligned);
    return rc;
}

static bool msg_matches(const rt_msg *m, rt_msg_kind kind, uint64_t step, int microbatch)
{
    return m->kind == (int32_t)kind && m->step == step && m->microbatch == microbatch;
}

/* Removes and returns the pending message that matches, or NULL. */
static rt_msg *pending_take(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch)
{
    for (rt_msg **pp = &t->pending; *pp != NULL; pp = &(*pp)->next) {
        if (msg_matches(*pp, kind, step, microbatch)) {
            rt_msg *m = *pp;
            *pp = m->next;
            m->next = NULL;
            return m;
        }
    }
    return NULL;
}

static void pending_append(rt_transport *t, rt_msg *m)
{
    rt_msg **pp = &t->pending;
    while (*pp != NULL)
        pp = &(*pp)->next;
    m->next = NULL;
    *pp = m;
}

/* Counts message m in the figures of its sender (rt_link_sample): every message, and the
 * fastest of those that arrived while this stage waited. */
static void link_note(rt_transport *t, const rt_msg *m)
{
    bool from_next = m->kind == (int32_t)RT_MSG_GRADIENT;
    rt_link_sample *l = NULL;
    for (size_t i = 0; i < t->n_links && l == NULL; i++)
        if (t->links[i].from_next == from_next && t->links[i].from_copy == m->from_copy)
            l = &t->links[i];
    if (l == NULL) {
        if (t->n_links == RT_LINK_MAX)
            return;
        l = &t->links[t->n_links++];
        memset(l, 0, sizeof *l);
        l->from_next = from_next;
        l->from_copy = m->from_copy;
    }
    l->messages++;
    if (!m->clean || m->sent_ns == 0)
        return;
    double d = ((double)m->arrived_ns - (double)m->sent_ns) * 1e-9;
    if (l->clean++ == 0 || d < l->delay_s) {
        l->delay_s = d;
        l->bytes = m->bytes;
    }
}

size_t rt_transport_link_take(rt_transport *t, rt_link_sample *out, size_t max)
{
    size_t n = t->n_links < max ? t->n_links : max;
    memcpy(out, t->links, n * sizeof *out);
    t->n_links = 0;
    return n;
}

static const char *kind_name(rt_msg_kind kind)
{
    return kind == RT_MSG_ACTIVATION ? "activation" : "gradient";
}

/* rt_transport_recv, the message counted in its sender's link figures when `neighbour`, its send
 * stamp in *sent_ns (NULL: not wanted). */
static sc_status recv_msg(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                          void *data, size_t bytes, bool neighbour, uint64_t *sent_ns, sc_err *err)
{
    bool from_next = kind == RT_MSG_GRADIENT;
    if (sent_ns != NULL)
        *sent_ns = 0;
    if (t->ops->recv_direct != NULL) { /* its own checks first, as in rt_transport_send */
        rt_msg stamp;
        memset(&stamp, 0, sizeof stamp);
        sc_status rc = t->ops->recv_direct(t, kind, step, microbatch, data, bytes, &stamp, err);
        if (rc == SC_OK && neighbour)
            link_note(t, &stamp);
        if (rc == SC_OK && sent_ns != NULL)
            *sent_ns = stamp.sent_ns;
        return rc;
    }
    if (from_next ? !t->has_next : !t->has_prev)
        return SC_ERRF(err, SC_ERR_PRECONDITION, "transport %s: no %s stage to receive %s from",
                       rt_transport_label(t), from_next ? "next" : "previous", kind_name(kind));
    uint64_t deadline_ns = sc_clock_now_ns() + (uint64_t)t->cfg.timeout_ms * 1000000ull;
    rt_msg *m = pending_take(t, kind, step, microbatch);
    /* whether the inbox was found empty during this call: what arrives after that arrives
     * while this stage waits, so the time it is taken is its arrival (a clean message) */
    bool idle = false;
    while (m == NULL) {
        if (atomic_load(&t->aborted))
            return SC_ERRF(err, SC_ERR_CANCELLED,
                           "transport %s: aborted while waiting for %s "
                           "(step %llu, micro-batch %d)",
                           t->endpoint, kind_name(kind), (unsigned long long)step, microbatch);
        uint64_t now = sc_clock_now_ns();
        if (now >= deadline_ns)
            return SC_ERRF(err, SC_ERR_TIMEOUT,
                           "transport %s: no %s (step %llu, micro-batch %d) from the %s stage "
                           "within %d ms",
                           t->endpoint, kind_name(kind), (unsigned long long)step, microbatch,
                           from_next ? "next" : "previous", t->cfg.timeout_ms);
        uint64_t left_ms = (deadline_ns - now) / 1000000ull + 1;
        int wait_ms = left_ms < POLL_SLICE_MS ? (int)left_ms : POLL_SLICE_MS;
        rt_msg *got = NULL;
        /* a first look without waiting tells whether the inbox is empty */
        sc_status rc = t->ops->poll(t, idle ? wait_ms : 0, from_next, &got, err);
        if (rc != SC_OK)
            return rc;
        if (got == NULL) {
            idle = true;
            continue;
        }
        got->arrived_ns = sc_clock_now_ns();
        got->clean = idle;
        if (got->tag != t->cfg.tag) {
            rt_msg_free(got); /* a stray message of another job or run */
            continue;
        }
        if (msg_matches(got, kind, step, microbatch))
            m = got;
        else
            pending_append(t, got);
    }
    if (neighbour)
        link_note(t, m);
    if (sent_ns != NULL)
        *sent_ns = m->sent_ns;
    sc_status rc = SC_OK;
    size_t want = m->wire != RT_WIRE_F32 ? bytes / 2 : bytes; /* 16-bit: 2 bytes a float */
    if (m->bytes != want || (m->wire != RT_WIRE_F32 && bytes % sizeof(float) != 0))
        rc = SC_ERRF(err, SC_ERR_INVALID,
                     "transport %s: %s (step %llu, micro-batch %d) has %zu bytes%s, expected %zu "
                     "(do the stages agree on the model and micro-batch size?)",
                     t->endpoint, kind_name(kind), (unsigned long long)step, microbatch, m->bytes,
                     m->wire != RT_WIRE_F32 ? " of 16-bit floats" : "", want);
    else if (m->wire != RT_WIRE_F32)
        rc = widen(t, m, data, bytes, err);
    else if (m->dev != NULL) /* a device payload, to host or device memory (any device) */
        rc = rt_dev_copy(t->dev_stream != NULL ? t->cfg.device : m->dev_device, t->dev_stream, data,
                         m->dev, bytes, err);
    else if (bytes > 0 && t->dev_stream != NULL) /* host payload, maybe to device memory */
        rc = rt_dev_copy(t->cfg.device, t->dev_stream, data, rt_msg_payload(m), bytes, err);
    else if (bytes > 0)
        memcpy(data, rt_msg_payload(m), bytes);
    rt_msg_free(m);
    return rc;
}

sc_status rt_transport_recv(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                            void *data, size_t bytes, sc_err *err)
{
    return recv_msg(t, kind, step, microbatch, data, bytes, true, NULL, err);
}

sc_status rt_transport_recv_copy(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                                 void *data, size_t bytes, uint64_t *sent_ns, sc_err *err)
{
    return recv_msg(t, kind, step, microbatch, data, bytes, false, sent_ns, err);
}

void rt_transport_abort(rt_transport *t)
{
    atomic_store(&t->aborted, true);
    if (t->ops->wake != NULL)
        t->ops->wake(t);
}

size_t rt_transport_pending(const rt_transport *t)
{
    size_t n = 0;
    for (const rt_msg *m = t->pending; m != NULL; m = m->next)
        n++;
    return n;
}

rt_transport_kind rt_transport_kind_of(const rt_transport *t)
{
    return t->cfg.kind;
}

static const char *scheme_of(rt_transport_kind kind)
{
    return kind == RT_TRANSPORT_NCCL    ? "nccl://"
           : kind == RT_TRANSPORT_LOCAL ? "local://"
                                        : "tcp://";
}

sc_status rt_endpoint_part(const char *ep, const char *scheme, char *out, size_t size, bool *found,
                           sc_err *err)
{
    *found = false;
    if (size > 0)
        out[0] = '\0';
    const char *at = NULL, *end = NULL;
    for (const char *p = ep != NULL ? ep : ""; p != NULL; p = end != NULL ? end + 1 : NULL) {
        end = strchr(p, RT_ENDPOINT_SEP);
        if (strncmp(p, scheme, strlen(scheme)) == 0) {
            at = p;
            break;
        }
    }
    if (at == NULL)
        return SC_OK;
    size_t len = end != NULL ? (size_t)(end - at) : strlen(at);
    if (len >= size)
        return SC_ERRF(err, SC_ERR_INVALID, "endpoint \"%.60s...\" is longer than %zu characters",
                       at, size - 1);
    memcpy(out, at, len);
    out[len] = '\0';
    *found = true;
    return SC_OK;
}

sc_status rt_endpoint_pick(const char *ep, rt_transport_kind kind, char *out, size_t size,
                           sc_err *err)
{
    if (ep == NULL)
        ep = "";
    if (strchr(ep, RT_ENDPOINT_SEP) == NULL) { /* a single endpoint: the backend checks it */
        size_t len = strlen(ep);
        if (len >= size)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "endpoint \"%.60s...\" is longer than %zu characters", ep, size - 1);
        memcpy(out, ep, len + 1);
        return SC_OK;
    }
    bool found = false;
    SC_CHECK(rt_endpoint_part(ep, scheme_of(kind), out, size, &found, err));
    if (!found)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "endpoint \"%.120s\" offers no %s... part for this boundary's "
                       "transport (the neighbours disagree on the transport)",
                       ep, scheme_of(kind));
    return SC_OK;
}
