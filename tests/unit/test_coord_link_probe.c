/* coordinator/link_probe and its other end, the worker's ProbeLink: the bandwidth estimate from
 * timings (latency subtracted, nonsense refused), the doubling procedure over a made-up link
 * (both directions, where it stops, what it reports), the worker's bound on a reply, and a real
 * probe over loopback against the worker's service. */
/* cmocka.h needs these four before it. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/link_probe.h"
#include "proto/sc_rpc.h"
#include "worker/service.h"

static void test_rate(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    double bw = 0;
    /* 1 MB in 0.51 s of which 0.01 s is the latency: 2 MB/s */
    assert_int_equal(coord_link_rate(1e6, 0.51, 0.01, &bw, &err), SC_OK);
    assert_true(fabs(bw - 2e6) < 1e-6);
    assert_int_equal(coord_link_rate(65536, 0.5, 0, &bw, &err), SC_OK);
    assert_true(fabs(bw - 131072) < 1e-6);
    /* nonsense is refused, the figure left alone */
    static const double bad[][3] = {
        {1e6, 0.01, 0.01},     /* no longer than the latency */
        {1e6, 0.005, 0.01},    /* shorter */
        {0, 0.5, 0.01},        /* no payload */
        {-1, 0.5, 0.01},       /* negative payload */
        {1e6, -0.5, 0.01},     /* negative time */
        {1e6, 0.5, -0.01},     /* negative latency */
        {1e6, NAN, 0.01},      /* not a number */
        {1e6, INFINITY, 0.01}, /* not finite */
        {INFINITY, 0.5, 0.01},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bw = 42;
        sc_err_clear(&err);
        assert_int_equal(coord_link_rate(bad[i][0], bad[i][1], bad[i][2], &bw, &err),
                         SC_ERR_INVALID);
        assert_true(bw == 42);
        assert_non_null(strstr(err.msg, "link probe"));
    }
    sc_err_clear(&err);
    coord_link_rate(1e6, 0.01, 0.01, &bw, &err);
    assert_non_null(strstr(err.msg, "no longer than"));
}

/* A made-up link: a round trip costs `latency_s` (and `connect_s` more the first time) plus
 * each payload over its direction's rate. Records the calls. */
typedef struct {
    double latency_s, connect_s, up_bytes_per_s, down_bytes_per_s;
    int calls, fail_at; /* fail_at > 0: that call fails */
    double constant_s;  /* > 0: every round trip takes this long, whatever it carries */
    size_t sent[64], asked[64];
} fake_link;

static sc_status fake_trip(void *user, size_t send_bytes, size_t reply_bytes, double *seconds,
                           sc_err *err)
{
    fake_link *l = user;
    int k = l->calls++;
    if (k < 64) {
        l->sent[k] = send_bytes;
        l->asked[k] = reply_bytes;
    }
    if (l->fail_at > 0 && l->calls == l->fail_at)
        return SC_ERRF(err, SC_ERR_TIMEOUT, "ProbeLink: DEADLINE_EXCEEDED");
    *seconds = l->constant_s > 0 ? l->constant_s
                                 : l->latency_s + (k == 0 ? l->connect_s : 0) +
                                       (double)send_bytes / l->up_bytes_per_s +
                                       (double)reply_bytes / l->down_bytes_per_s;
    return SC_OK;
}

static void test_procedure(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    /* 10 Mbit/s up, 1 Gbit/s down, 1 ms latency, 50 ms to connect */
    fake_link l = {
        .latency_s = 1e-3, .connect_s = 0.05, .up_bytes_per_s = 1.25e6, .down_bytes_per_s = 1.25e8};
    coord_link_measure m;
    assert_int_equal(coord_link_measure_run(fake_trip, &l, &m, &err), SC_OK);
    /* the connection's cost is not taken for latency */
    assert_true(fabs(m.latency_s - 1e-3) < 1e-12);
    /* 4 tiny trips, then up 64, 128, 256 KiB (256 KiB takes 0.21 s >= 0.2 s) */
    for (int k = 0; k < 4; k++)
        assert_true(l.sent[k] == 0 && l.asked[k] == 0);
    assert_true(l.sent[4] == 64 << 10 && l.sent[5] == 128 << 10 && l.sent[6] == 256 << 10);
    assert_true(l.asked[4] == 0 && l.asked[6] == 0);
    assert_true(m.up_bytes == 256 << 10);
    assert_true(fabs(m.up_bytes_per_s - 1.25e6) < 1e-3);
    /* down: 64 KiB doubling to 2 MiB, then capped at the message's limit (0.034 s < 0.2 s) */
    size_t want = 64 << 10;
    int k = 7;
    for (; want < COORD_LINK_PROBE_MAX_BYTES; k++, want *= 2)
        assert_true(l.sent[k] == 0 && l.asked[k] == want);
    assert_true(l.asked[k] == COORD_LINK_PROBE_MAX_BYTES);
    assert_int_equal(l.calls, k + 1);
    assert_true(m.down_bytes == COORD_LINK_PROBE_MAX_BYTES);
    assert_true(fabs(m.down_bytes_per_s - 1.25e8) < 1e-2);
    assert_true(m.bytes_per_s == m.up_bytes_per_s); /* the slower direction */
    /* short: well under a second even on the slow side */
    assert_true(m.elapsed_s > 0.3 && m.elapsed_s < 1.0);

    /* a slow link stops at its first payload: 64 KiB at 100 kB/s takes 0.66 s */
    l = (fake_link){.latency_s = 1e-3, .up_bytes_per_s = 1e5, .down_bytes_per_s = 1e5};
    assert_int_equal(coord_link_measure_run(fake_trip, &l, &m, &err), SC_OK);
    assert_int_equal(l.calls, 6);
    assert_true(m.up_bytes == 64 << 10 && m.down_bytes == 64 << 10);
    assert_true(fabs(m.bytes_per_s - 1e5) < 1e-3);

    /* a failed round trip ends the probe with its error */
    for (int at = 1; at <= 8; at++) {
        l = (fake_link){
            .latency_s = 1e-3, .up_bytes_per_s = 1e9, .down_bytes_per_s = 1e9, .fail_at = at};
        sc_err_clear(&err);
        assert_int_equal(coord_link_measure_run(fake_trip, &l, &m, &err), SC_ERR_TIMEOUT);
        assert_int_equal(l.calls, at);
    }
    /* payloads that take no longer than a tiny round trip measure nothing: refused */
    l = (fake_link){.constant_s = 1e-3};
    sc_err_clear(&err);
    assert_int_equal(coord_link_measure_run(fake_trip, &l, &m, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "upwards"));
}

/* The worker's service on loopback, and a client to it. */
typedef struct {
    wk_state st;
    sc_rpc_server *srv;
    sc_rpc_client *cli;
} worker_fixture;

static int worker_up(void **state)
{
    static worker_fixture f;
    memset(&f, 0, sizeof f);
    pthread_mutex_init(&f.st.lock, NULL);
    sc_rpc_method methods[WK_SERVICE_MAX_METHODS];
    sc_rpc_server_cfg cfg = {.listen_addr = "127.0.0.1:0", .methods = methods};
    cfg.n_methods = wk_service_methods(&f.st, methods, WK_SERVICE_MAX_METHODS);
    sc_err err;
    sc_err_clear(&err);
    if (sc_rpc_server_new(&f.srv, &cfg, &err) != SC_OK)
        return -1;
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", sc_rpc_server_port(f.srv));
    if (sc_rpc_client_new(&f.cli, target, NULL, &err) != SC_OK)
        return -1;
    *state = &f;
    return 0;
}

static int worker_down(void **state)
{
    worker_fixture *f = *state;
    sc_rpc_client_destroy(&f->cli);
    sc_rpc_server_destroy(&f->srv);
    pthread_mutex_destroy(&f->st.lock);
    return 0;
}

static sc_status probe_call(sc_rpc_client *cli, size_t send, uint32_t reply, size_t *got,
                            sc_err *err)
{
    static uint8_t zeros[1 << 16];
    Stagecraft__ProbeLinkRequest req = STAGECRAFT__PROBE_LINK_REQUEST__INIT;
    req.payload.data = zeros;
    req.payload.len = send;
    req.reply_bytes = reply;
    ProtobufCMessage *m = NULL;
    SC_CHECK(sc_rpc_call(cli, "/stagecraft.Worker/ProbeLink", &req.base,
                         &stagecraft__probe_link_response__descriptor, &m, 10000, err));
    *got = ((Stagecraft__ProbeLinkResponse *)m)->payload.len;
    protobuf_c_message_free_unpacked(m, NULL);
    return SC_OK;
}

static void test_worker_bound(void **state)
{
    worker_fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    size_t got = 1;
    assert_int_equal(probe_call(f->cli, 1 << 16, 0, &got, &err), SC_OK);
    assert_true(got == 0);
    assert_int_equal(probe_call(f->cli, 0, 12345, &got, &err), SC_OK);
    assert_true(got == 12345);
    /* the largest reply fits the message limit; one byte more is refused, saying why */
    assert_int_equal(probe_call(f->cli, 0, WK_PROBE_MAX_BYTES, &got, &err), SC_OK);
    assert_true(got == WK_PROBE_MAX_BYTES);
    assert_int_equal(probe_call(f->cli, 0, WK_PROBE_MAX_BYTES + 1, &got, &err), SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "RESOURCE_EXHAUSTED"));
    assert_non_null(strstr(err.msg, "reply_bytes 4193281 is over the limit of 4193280 bytes"));
    sc_err_clear(&err);
    assert_int_equal(probe_call(f->cli, 0, UINT32_MAX, &got, &err), SC_ERR_TOO_LARGE);
    /* the coordinator's largest payload is within the worker's bound */
    assert_true(COORD_LINK_PROBE_MAX_BYTES <= WK_PROBE_MAX_BYTES);
}

static void test_probe_loopback(void **state)
{
    worker_fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    coord_link_measure m;
    assert_int_equal(coord_link_probe(f->cli, 10000, &m, &err), SC_OK);
    assert_true(m.latency_s > 0);
    assert_true(m.up_bytes_per_s > 0 && isfinite(m.up_bytes_per_s));
    assert_true(m.down_bytes_per_s > 0 && isfinite(m.down_bytes_per_s));
    assert_true(m.bytes_per_s == fmin(m.up_bytes_per_s, m.down_bytes_per_s));
    assert_true(m.up_bytes >= COORD_LINK_PROBE_START_BYTES &&
                m.up_bytes <= COORD_LINK_PROBE_MAX_BYTES);
    print_message("loopback: up %.3g B/s with %zu bytes, down %.3g B/s with %zu bytes, latency "
                  "%.3g ms, %.3g s\n",
                  m.up_bytes_per_s, m.up_bytes, m.down_bytes_per_s, m.down_bytes, m.latency_s * 1e3,
                  m.elapsed_s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rate),
        cmocka_unit_test(test_procedure),
        cmocka_unit_test_setup_teardown(test_worker_bound, worker_up, worker_down),
        cmocka_unit_test_setup_teardown(test_probe_loopback, worker_up, worker_down),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
