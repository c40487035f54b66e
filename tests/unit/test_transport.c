/* worker/transport: round trips over zmq (loopback) and local queues, out-of-order delivery,
 * size checks, a vanished peer (timeout / unavailable, never a hang), abort, and the link
 * figures of received messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/sc_clock.h"
#include "kernels/device.h"
#include "kernels/precision.h"
#include "worker/transport/transport.h"

static rt_transport *open_one(rt_transport_kind kind, const char *ep, int timeout_ms)
{
    rt_transport_cfg c = rt_transport_cfg_default();
    c.kind = kind;
    c.bind_endpoint = ep;
    c.timeout_ms = timeout_ms;
    rt_transport *t = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_OK);
    return t;
}

/* a (stage 0) -> b (stage 1): activations forward, gradients back, out of order. */
static void round_trip(rt_transport_kind kind, const char *ep_a, const char *ep_b)
{
    rt_transport *a = open_one(kind, ep_a, 5000), *b = open_one(kind, ep_b, 5000);
    sc_err err;
    sc_err_clear(&err);
    assert_true(strlen(rt_transport_endpoint(a)) > 0);
    assert_string_not_equal(rt_transport_endpoint(a), rt_transport_endpoint(b));
    assert_int_equal(rt_transport_connect(a, NULL, rt_transport_endpoint(b), &err), SC_OK);
    assert_int_equal(rt_transport_connect(b, rt_transport_endpoint(a), "", &err), SC_OK);

    float x0[64], x1[64], got[64];
    for (int i = 0; i < 64; i++) {
        x0[i] = (float)i;
        x1[i] = -(float)i * 0.5f;
    }
    assert_int_equal(rt_transport_send(a, RT_MSG_ACTIVATION, 7, 0, x0, sizeof x0, &err), SC_OK);
    assert_int_equal(rt_transport_send(a, RT_MSG_ACTIVATION, 7, 1, x1, sizeof x1, &err), SC_OK);
    /* ask for micro-batch 1 first: micro-batch 0 waits in the pending list */
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 7, 1, got, sizeof got, &err), SC_OK);
    assert_memory_equal(got, x1, sizeof x1);
    assert_int_equal(rt_transport_pending(b), 1);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 7, 0, got, sizeof got, &err), SC_OK);
    assert_memory_equal(got, x0, sizeof x0);
    assert_int_equal(rt_transport_pending(b), 0);

    /* gradient back; an empty message too */
    assert_int_equal(rt_transport_send(b, RT_MSG_GRADIENT, 7, 1, x1, sizeof x1, &err), SC_OK);
    assert_int_equal(rt_transport_send(b, RT_MSG_GRADIENT, 8, 0, NULL, 0, &err), SC_OK);
    assert_int_equal(rt_transport_recv(a, RT_MSG_GRADIENT, 8, 0, NULL, 0, &err), SC_OK);
    assert_int_equal(rt_transport_recv(a, RT_MSG_GRADIENT, 7, 1, got, sizeof got, &err), SC_OK);
    assert_memory_equal(got, x1, sizeof x1);

    /* a size mismatch is an error, not a silent truncation */
    assert_int_equal(rt_transport_send(a, RT_MSG_ACTIVATION, 9, 0, x0, sizeof x0, &err), SC_OK);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 9, 0, got, 16, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "expected 16"));

    /* no peer in that direction */
    sc_err_clear(&err);
    assert_int_equal(rt_transport_send(b, RT_MSG_ACTIVATION, 1, 0, x0, 4, &err),
                     SC_ERR_PRECONDITION);
    sc_err_clear(&err);
    assert_int_equal(rt_transport_recv(a, RT_MSG_ACTIVATION, 1, 0, got, 4, &err),
                     SC_ERR_PRECONDITION);
    rt_transport_destroy(&a);
    rt_transport_destroy(&b);
    assert_null(a);
    rt_transport_destroy(&a); /* NULL accepted */
}

static void test_zmq_round_trip(void **state)
{
    (void)state;
    round_trip(RT_TRANSPORT_ZMQ, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0");
}

/* A host name (a worker that advertises its name): zmq binds addresses only, so the transport
 * binds every interface and publishes the name, which the peer resolves. */
static void test_zmq_host_name(void **state)
{
    (void)state;
    round_trip(RT_TRANSPORT_ZMQ, "tcp://localhost:0", "tcp://localhost:0");
    rt_transport *t = open_one(RT_TRANSPORT_ZMQ, "tcp://localhost:0", 1000);
    assert_int_equal(strncmp(rt_transport_endpoint(t), "tcp://localhost:", 16), 0);
    assert_true(atoi(rt_transport_endpoint(t) + 16) > 0);
    rt_transport_destroy(&t);
    /* an address stays as it is */
    t = open_one(RT_TRANSPORT_ZMQ, "tcp://127.0.0.1:0", 1000);
    assert_int_equal(strncmp(rt_transport_endpoint(t), "tcp://127.0.0.1:", 16), 0);
    rt_transport_destroy(&t);
    rt_transport_cfg c = rt_transport_cfg_default();
    c.bind_endpoint = "tcp://:0";
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "expected tcp://HOST:PORT"));
}

static void test_local_round_trip(void **state)
{
    (void)state;
    round_trip(RT_TRANSPORT_LOCAL, "local://rt-a", "local://");
}

static void test_zmq_peer_gone_times_out(void **state)
{
    (void)state;
    rt_transport *a = open_one(RT_TRANSPORT_ZMQ, "tcp://127.0.0.1:0", 300);
    rt_transport *b = open_one(RT_TRANSPORT_ZMQ, "tcp://127.0.0.1:0", 300);
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_connect(a, NULL, rt_transport_endpoint(b), &err), SC_OK);
    assert_int_equal(rt_transport_connect(b, rt_transport_endpoint(a), NULL, &err), SC_OK);
    float x[4] = {1, 2, 3, 4};
    assert_int_equal(rt_transport_send(a, RT_MSG_ACTIVATION, 1, 0, x, sizeof x, &err), SC_OK);
    rt_transport_destroy(&b); /* the next stage dies before answering */
    double t0 = sc_clock_now_s();
    assert_int_equal(rt_transport_recv(a, RT_MSG_GRADIENT, 1, 0, x, sizeof x, &err),
                     SC_ERR_TIMEOUT);
    double waited = sc_clock_now_s() - t0;
    assert_true(waited >= 0.29);
    assert_non_null(strstr(err.msg, "within 300 ms"));
    /* sending to the dead peer does not block or crash either */
    sc_err_clear(&err);
    sc_status rc = rt_transport_send(a, RT_MSG_ACTIVATION, 2, 0, x, sizeof x, &err);
    assert_true(rc == SC_OK || rc == SC_ERR_TIMEOUT);
    rt_transport_destroy(&a);
}

static void test_local_peer_gone_unavailable(void **state)
{
    (void)state;
    rt_transport *a = open_one(RT_TRANSPORT_LOCAL, "local://", 10000);
    rt_transport *b = open_one(RT_TRANSPORT_LOCAL, "local://", 10000);
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_connect(a, NULL, rt_transport_endpoint(b), &err), SC_OK);
    assert_int_equal(rt_transport_connect(b, rt_transport_endpoint(a), NULL, &err), SC_OK);
    rt_transport_destroy(&b);
    float x[2] = {0};
    /* known gone: fails at once rather than after the 10 s timeout */
    double t0 = sc_clock_now_s();
    assert_int_equal(rt_transport_recv(a, RT_MSG_GRADIENT, 1, 0, x, sizeof x, &err),
                     SC_ERR_UNAVAILABLE);
    assert_true(sc_clock_now_s() - t0 < 5.0);
    sc_err_clear(&err);
    assert_int_equal(rt_transport_send(a, RT_MSG_ACTIVATION, 1, 0, x, sizeof x, &err),
                     SC_ERR_UNAVAILABLE);
    rt_transport_destroy(&a);
}

static void *abort_later(void *arg)
{
    sc_clock_sleep_ms(100);
    rt_transport_abort(arg);
    return NULL;
}

static void abort_case(rt_transport_kind kind, const char *ep)
{
    rt_transport *a = open_one(kind, ep, 20000);
    rt_transport *b = open_one(kind, ep, 20000);
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_connect(a, rt_transport_endpoint(b), NULL, &err), SC_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, abort_later, a), 0);
    float x[2];
    assert_int_equal(rt_transport_recv(a, RT_MSG_ACTIVATION, 1, 0, x, sizeof x, &err),
                     SC_ERR_CANCELLED);
    pthread_join(th, NULL);
    rt_transport_destroy(&a);
    rt_transport_destroy(&b);
}

static void test_abort(void **state)
{
    (void)state;
    abort_case(RT_TRANSPORT_ZMQ, "tcp://127.0.0.1:0");
    abort_case(RT_TRANSPORT_LOCAL, "local://");
}

static void test_tag_filters_stray_messages(void **state)
{
    (void)state;
    rt_transport_cfg c = rt_transport_cfg_default();
    c.kind = RT_TRANSPORT_LOCAL;
    c.bind_endpoint = "local://";
    c.timeout_ms = 200;
    c.tag = 1;
    rt_transport *a = NULL, *b = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_new(&a, &c, &err), SC_OK);
    c.tag = 2; /* an older job's stage */
    assert_int_equal(rt_transport_new(&b, &c, &err), SC_OK);
    assert_int_equal(rt_transport_connect(a, rt_transport_endpoint(b), NULL, &err), SC_OK);
    assert_int_equal(rt_transport_connect(b, NULL, rt_transport_endpoint(a), &err), SC_OK);
    int v = 5;
    assert_int_equal(rt_transport_send(b, RT_MSG_ACTIVATION, 1, 0, &v, sizeof v, &err), SC_OK);
    assert_int_equal(rt_transport_recv(a, RT_MSG_ACTIVATION, 1, 0, &v, sizeof v, &err),
                     SC_ERR_TIMEOUT);
    rt_transport_destroy(&a);
    rt_transport_destroy(&b);
}

/* A data message in the wire header of an older stagecraft ("SCRT", without the send time) is
 * refused with a message naming the mismatch: ignored as a stray, the job would wait for it. */
static void test_zmq_older_header_refused(void **state)
{
    (void)state;
    rt_transport *a = open_one(RT_TRANSPORT_ZMQ, "tcp://127.0.0.1:0", 2000);
    rt_transport *b = open_one(RT_TRANSPORT_ZMQ, "tcp://127.0.0.1:0", 2000);
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_connect(b, rt_transport_endpoint(a), NULL, &err), SC_OK);
    void *ctx = zmq_ctx_new(), *push = zmq_socket(ctx, ZMQ_PUSH);
    assert_int_equal(zmq_connect(push, rt_transport_endpoint(b)), 0);
    struct {
        uint32_t magic;
        int32_t kind;
        uint64_t tag, step;
        int32_t microbatch;
        uint32_t reserved;
        uint64_t bytes;
    } old = {.magic = 0x53435254u, .kind = RT_MSG_ACTIVATION, .step = 1, .bytes = 4};
    int v = 5;
    assert_int_equal(zmq_send(push, &old, sizeof old, ZMQ_SNDMORE), (int)sizeof old);
    assert_int_equal(zmq_send(push, &v, sizeof v, 0), (int)sizeof v);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 1, 0, &v, sizeof v, &err),
                     SC_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "older stagecraft"));
    int linger = 0;
    zmq_setsockopt(push, ZMQ_LINGER, &linger, sizeof linger);
    zmq_close(push);
    zmq_ctx_term(ctx);
    rt_transport_destroy(&b);
    rt_transport_destroy(&a);
}

/* An inbox with max_message_bytes takes messages up to that size; a peer that sends a larger one
 * is disconnected by zmq before the payload is allocated, so the receive times out as for a lost
 * peer. The inbox keeps serving: another peer's messages, and the same peer's once it has
 * reconnected, still arrive. */
static void test_zmq_message_limit(void **state)
{
    (void)state;
    enum { LIMIT = 4096 };
    rt_transport_cfg c = rt_transport_cfg_default();
    c.bind_endpoint = "tcp://127.0.0.1:0";
    c.timeout_ms = 500;
    c.max_message_bytes = LIMIT;
    rt_transport *b = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_new(&b, &c, &err), SC_OK);
    /* two previous stages pushing into b's one inbox: `bad` oversends, `good` does not */
    rt_transport *bad = open_one(RT_TRANSPORT_ZMQ, "tcp://127.0.0.1:0", 500);
    rt_transport *good = open_one(RT_TRANSPORT_ZMQ, "tcp://127.0.0.1:0", 500);
    assert_int_equal(rt_transport_connect(bad, NULL, rt_transport_endpoint(b), &err), SC_OK);
    assert_int_equal(rt_transport_connect(good, NULL, rt_transport_endpoint(b), &err), SC_OK);
    assert_int_equal(rt_transport_connect(b, rt_transport_endpoint(good), NULL, &err), SC_OK);

    unsigned char *buf = malloc(LIMIT + 1), *got = malloc(LIMIT + 1);
    assert_non_null(buf);
    assert_non_null(got);
    for (int i = 0; i <= LIMIT; i++)
        buf[i] = (unsigned char)(i * 7);

    /* at the limit: delivered */
    assert_int_equal(rt_transport_send(good, RT_MSG_ACTIVATION, 1, 0, buf, LIMIT, &err), SC_OK);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 1, 0, got, LIMIT, &err), SC_OK);
    assert_memory_equal(got, buf, LIMIT);

    /* one byte over: never delivered */
    assert_int_equal(rt_transport_send(bad, RT_MSG_ACTIVATION, 2, 0, buf, LIMIT + 1, &err), SC_OK);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 2, 0, got, LIMIT + 1, &err),
                     SC_ERR_TIMEOUT);
    assert_int_equal(rt_transport_pending(b), 0);

    /* the inbox still serves the other peer, and the oversender once it has reconnected */
    sc_err_clear(&err);
    assert_int_equal(rt_transport_send(good, RT_MSG_ACTIVATION, 3, 0, buf, LIMIT, &err), SC_OK);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 3, 0, got, LIMIT, &err), SC_OK);
    assert_memory_equal(got, buf, LIMIT);
    assert_int_equal(rt_transport_send(bad, RT_MSG_ACTIVATION, 4, 0, buf, 16, &err), SC_OK);
    sc_status rc = SC_ERR_TIMEOUT;
    for (int i = 0; i < 20 && rc == SC_ERR_TIMEOUT; i++) { /* zmq reconnects after 100 ms */
        sc_err_clear(&err);
        rc = rt_transport_recv(b, RT_MSG_ACTIVATION, 4, 0, got, 16, &err);
    }
    assert_int_equal(rc, SC_OK);
    assert_memory_equal(got, buf, 16);

    /* a limit below the header's size still admits the header and a payload at the limit */
    rt_transport_destroy(&b);
    c.max_message_bytes = 8;
    assert_int_equal(rt_transport_new(&b, &c, &err), SC_OK);
    assert_int_equal(rt_transport_connect(good, NULL, rt_transport_endpoint(b), &err), SC_OK);
    assert_int_equal(rt_transport_connect(b, rt_transport_endpoint(good), NULL, &err), SC_OK);
    assert_int_equal(rt_transport_send(good, RT_MSG_ACTIVATION, 5, 0, buf, 8, &err), SC_OK);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 5, 0, got, 8, &err), SC_OK);
    assert_memory_equal(got, buf, 8);

    free(buf);
    free(got);
    rt_transport_destroy(&bad);
    rt_transport_destroy(&good);
    rt_transport_destroy(&b);
}

/* Link figures (rt_transport_link_take): a message queued before the receive asked for it is
 * counted but not timed (it waited behind the receiver, not on the link); one that arrives
 * while the receiver waits is timed, with its bytes and the sending copy. */
typedef struct {
    rt_transport *t;
    uint64_t step;
    atomic_int go;
} late_send;

static void *send_when_told(void *arg)
{
    late_send *l = arg;
    while (atomic_load(&l->go) == 0)
        ;                 /* the receiver is about to wait */
    sc_clock_sleep_ms(5); /* and then waits: the message comes to an empty inbox */
    float x[256] = {0};
    sc_err err;
    sc_err_clear(&err);
    rt_transport_send(l->t, RT_MSG_ACTIVATION, l->step, 0, x, sizeof x, &err);
    return NULL;
}

static void link_figures(rt_transport_kind kind, const char *ep)
{
    rt_transport_cfg c = rt_transport_cfg_default();
    c.kind = kind;
    c.bind_endpoint = ep;
    c.timeout_ms = 5000;
    c.copy = 3;
    rt_transport *a = NULL, *b = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_new(&a, &c, &err), SC_OK);
    c.copy = 0;
    assert_int_equal(rt_transport_new(&b, &c, &err), SC_OK);
    assert_int_equal(rt_transport_connect(a, NULL, rt_transport_endpoint(b), &err), SC_OK);
    assert_int_equal(rt_transport_connect(b, rt_transport_endpoint(a), "", &err), SC_OK);
    rt_link_sample got[RT_LINK_MAX];
    assert_int_equal(rt_transport_link_take(b, got, RT_LINK_MAX), 0);

    float x[256] = {0}, y[256];
    if (kind == RT_TRANSPORT_LOCAL) { /* local queues at once: it waits before the receive */
        assert_int_equal(rt_transport_send(a, RT_MSG_ACTIVATION, 1, 0, x, sizeof x, &err), SC_OK);
        assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 1, 0, y, sizeof y, &err), SC_OK);
        assert_int_equal(rt_transport_link_take(b, got, RT_LINK_MAX), 1);
        assert_int_equal(got[0].messages, 1);
        assert_int_equal(got[0].clean, 0);
        assert_int_equal(got[0].bytes, 0);
        assert_false(got[0].from_next);
        assert_int_equal(got[0].from_copy, 3);
    }
    /* sent while the receiver waits: timed. A descheduled receiver can miss its first look
     * until the message is there, so of 10 rounds one timed message is asked for, not ten. */
    int timed = 0;
    for (uint64_t step = 2; step < 12; step++) {
        late_send l = {.t = a, .step = step};
        atomic_init(&l.go, 0);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, send_when_told, &l), 0);
        uint64_t t0 = sc_clock_now_ns();
        atomic_store(&l.go, 1);
        assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, step, 0, y, sizeof y, &err),
                         SC_OK);
        double most = (double)(sc_clock_now_ns() - t0) * 1e-9;
        pthread_join(th, NULL);
        assert_int_equal(rt_transport_link_take(b, got, RT_LINK_MAX), 1);
        assert_int_equal(got[0].messages, 1);
        assert_int_equal(got[0].from_copy, 3);
        if (got[0].clean == 1) {
            timed++;
            assert_int_equal(got[0].bytes, sizeof x);
            /* one clock: the transit lies within the receive */
            assert_true(got[0].delay_s >= 0 && got[0].delay_s <= most);
        }
    }
    assert_true(timed >= 1);
    /* the figures start afresh after a take */
    assert_int_equal(rt_transport_link_take(b, got, RT_LINK_MAX), 0);
    /* a message of another copy of the stage (the all-reduce's): its send stamp, and no link */
    uint64_t before = sc_clock_now_ns(), sent = 0;
    assert_int_equal(rt_transport_send(b, RT_MSG_GRADIENT, 20, -1, x, sizeof x, &err), SC_OK);
    assert_int_equal(rt_transport_recv_copy(a, RT_MSG_GRADIENT, 20, -1, y, sizeof y, &sent, &err),
                     SC_OK);
    assert_true(sent >= before && sent <= sc_clock_now_ns());
    assert_int_equal(rt_transport_link_take(a, got, RT_LINK_MAX), 0);
    rt_transport_destroy(&a);
    rt_transport_destroy(&b);
}

static void test_link_figures(void **state)
{
    (void)state;
    link_figures(RT_TRANSPORT_LOCAL, "local://");
    link_figures(RT_TRANSPORT_ZMQ, "tcp://127.0.0.1:0");
}

static void test_bad_config(void **state)
{
    (void)state;
    rt_transport_cfg c = rt_transport_cfg_default();
    rt_transport *t = NULL;
    sc_err err;
    sc_err_clear(&err);
    c.bind_endpoint = "127.0.0.1:5555";
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(err.msg, "tcp://HOST:PORT"));
    sc_err_clear(&err);
    c.kind = RT_TRANSPORT_LOCAL;
    c.bind_endpoint = "tcp://127.0.0.1:0";
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_ERR_INVALID);
    sc_err_clear(&err);
    c.bind_endpoint = "local://dup";
    rt_transport *d = NULL;
    assert_int_equal(rt_transport_new(&d, &c, &err), SC_OK);
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_ERR_EXISTS);
    sc_err_clear(&err);
    assert_int_equal(rt_transport_connect(d, "local://nobody", NULL, &err), SC_ERR_NOT_FOUND);
    rt_transport_destroy(&d);
    sc_err_clear(&err);
    c.timeout_ms = 0;
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_ERR_INVALID);
    rt_transport_kind k;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_kind_parse("local", "transport", &k, &err), SC_OK);
    assert_int_equal(k, RT_TRANSPORT_LOCAL);
    assert_int_equal(rt_transport_kind_parse("udp", "transport", &k, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "\"zmq\", \"local\""));
}

/* Device payloads: for the local kind only; a build without CUDA, or a device that is not
 * there, refuses them with a message, and a plain local transport takes host memory only. */
static void test_device_payloads_config(void **state)
{
    (void)state;
    rt_transport_cfg c = rt_transport_cfg_default();
    rt_transport *t = NULL;
    sc_err err;
    sc_err_clear(&err);
    c.device_payloads = true;
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_ERR_INVALID); /* zmq */
    assert_null(t);
    assert_non_null(strstr(err.msg, "device_payloads is for the local kind"));
    c.kind = RT_TRANSPORT_LOCAL;
    c.bind_endpoint = "local://devp";
    c.device = 99; /* no machine has it */
    sc_err_clear(&err);
    sc_status rc = rt_transport_new(&t, &c, &err);
    assert_null(t);
#ifdef SC_HAVE_CUDA
    assert_int_equal(rc, SC_ERR_CUDA);
    assert_non_null(strstr(err.msg, "local transport on cuda:99"));
    if (kn_cuda_device_count() > 0) {
        c.device = 0;
        sc_err_clear(&err);
        assert_int_equal(rt_transport_new(&t, &c, &err), SC_OK);
        assert_true(rt_transport_on_device(t));
        rt_transport_destroy(&t);
    }
#else
    assert_int_equal(rc, SC_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "need a build with CUDA"));
#endif
    /* the endpoint is free again after the refusals: nothing was left bound */
    c.device_payloads = false;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_OK);
    assert_false(rt_transport_on_device(t));
    rt_transport_destroy(&t);
}

/* A bf16 / fp16 job's floats travel in 16 bits: a sender with cfg.wire sends half the bytes
 * through rt_transport_send_floats; the receiver, configured or not, widens them to the values
 * rounded to nearest even; plain rt_transport_send stays exact; the size check counts floats. */
static void wire_case(rt_transport_kind kind, rt_wire wire, kn_precision prec)
{
    rt_transport_cfg c = rt_transport_cfg_default();
    c.kind = kind;
    c.bind_endpoint = kind == RT_TRANSPORT_ZMQ ? "tcp://127.0.0.1:0" : "local://";
    c.timeout_ms = 5000;
    c.wire = wire;
    rt_transport *a = NULL, *b = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_new(&a, &c, &err), SC_OK);
    c.wire = RT_WIRE_F32; /* the receiver needs no setting */
    assert_int_equal(rt_transport_new(&b, &c, &err), SC_OK);
    assert_int_equal(rt_transport_connect(a, NULL, rt_transport_endpoint(b), &err), SC_OK);
    assert_int_equal(rt_transport_connect(b, rt_transport_endpoint(a), "", &err), SC_OK);
    enum { N = 1000 };
    float x[N], got[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(i - 500) * 0.0123456789f + 1e-3f * (float)(i % 7);
    assert_int_equal(rt_transport_send_floats(a, RT_MSG_ACTIVATION, 3, 0, x, sizeof x, &err),
                     SC_OK);
    assert_int_equal(rt_transport_send(a, RT_MSG_ACTIVATION, 3, 1, x, sizeof x, &err), SC_OK);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 3, 0, got, sizeof got, &err), SC_OK);
    int rounded = 0;
    for (int i = 0; i < N; i++) {
        float want = prec == KN_PREC_FP16 ? kn_round_fp16(x[i]) : kn_round_bf16(x[i]);
        assert_memory_equal(&got[i], &want, sizeof want);
        rounded += got[i] != x[i];
    }
    assert_true(rounded > N / 2); /* it really travelled in 16 bits */
    rt_link_sample ls[4];
    assert_int_equal(rt_transport_link_take(b, ls, 4), 1);
    assert_int_equal(ls[0].messages, 1);
    assert_true(ls[0].bytes == 0 || ls[0].bytes == sizeof x / 2); /* the bytes that travelled */
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 3, 1, got, sizeof got, &err), SC_OK);
    assert_memory_equal(got, x, sizeof x);
    /* a receiver expecting another size hears it in floats */
    assert_int_equal(rt_transport_send_floats(a, RT_MSG_ACTIVATION, 4, 0, x, sizeof x, &err),
                     SC_OK);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 4, 0, got, 400, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "16-bit floats"));
    rt_transport_destroy(&a);
    rt_transport_destroy(&b);
}

static void test_wire_16bit(void **state)
{
    (void)state;
    wire_case(RT_TRANSPORT_ZMQ, RT_WIRE_BF16, KN_PREC_BF16);
    wire_case(RT_TRANSPORT_ZMQ, RT_WIRE_FP16, KN_PREC_FP16);
    wire_case(RT_TRANSPORT_LOCAL, RT_WIRE_BF16, KN_PREC_BF16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zmq_round_trip),
        cmocka_unit_test(test_zmq_host_name),
        cmocka_unit_test(test_local_round_trip),
        cmocka_unit_test(test_zmq_peer_gone_times_out),
        cmocka_unit_test(test_local_peer_gone_unavailable),
        cmocka_unit_test(test_abort),
        cmocka_unit_test(test_tag_filters_stray_messages),
        cmocka_unit_test(test_zmq_older_header_refused),
        cmocka_unit_test(test_zmq_message_limit),
        cmocka_unit_test(test_link_figures),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_device_payloads_config),
        cmocka_unit_test(test_wire_16bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
