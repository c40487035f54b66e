/* proto/sc_control: the ZeroMQ control channel, ROUTER <-> DEALER on loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "proto/sc_control.h"
#include "proto/sc_wire.h"

typedef struct {
    void *zctx;
    sc_ctl *router;
    sc_ctl *dealer;
} pair;

static int setup(void **state)
{
    pair *p = calloc(1, sizeof *p);
    sc_err err;
    sc_err_clear(&err);
    p->zctx = zmq_ctx_new();
    sc_ctl_cfg rcfg = {.zmq_context = p->zctx, .max_frame_bytes = 4096};
    if (sc_ctl_router_new(&p->router, "tcp://127.0.0.1:*", &rcfg, &err) != SC_OK)
        return -1;
    sc_ctl_cfg dcfg = {.zmq_context = p->zctx, .max_frame_bytes = 4096, .routing_id = "w-1"};
    if (sc_ctl_dealer_new(&p->dealer, sc_ctl_endpoint(p->router), &dcfg, &err) != SC_OK)
        return -1;
    *state = p;
    return 0;
}

static int teardown(void **state)
{
    pair *p = *state;
    sc_ctl_destroy(&p->dealer);
    sc_ctl_destroy(&p->router);
    zmq_ctx_term(p->zctx);
    free(p);
    return 0;
}

static void send_heartbeat(sc_ctl *dealer, uint64_t step)
{
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Heartbeat hb = STAGECRAFT__HEARTBEAT__INIT;
    hb.state = "training";
    hb.step = step;
    hb.load = 0.5;
    env.worker_id = "w-1";
    env.epoch = 3;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_ctl_send(dealer, NULL, &env, &err), SC_OK);
}

static void test_round_trip(void **state)
{
    pair *p = *state;
    sc_err err;
    sc_err_clear(&err);
    char peer[SC_CTL_PEER_ID_MAX];
    Stagecraft__ControlEnvelope *got = NULL;

    send_heartbeat(p->dealer, 41);
    assert_int_equal(sc_ctl_recv(p->router, 5000, peer, &got, &err), SC_OK);
    assert_string_equal(peer, "w-1");
    assert_int_equal(got->protocol_version, SC_PROTOCOL_VERSION);
    assert_int_equal(got->epoch, 3);
    assert_true(got->sent_ns > 0);
    assert_int_equal(got->body_case, STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT);
    assert_string_equal(got->heartbeat->state, "training");
    assert_int_equal(got->heartbeat->step, 41);

    /* the coordinator answers by the peer id */
    Stagecraft__ControlEnvelope ack = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__HeartbeatAck a = STAGECRAFT__HEARTBEAT_ACK__INIT;
    a.echo_sent_ns = got->sent_ns;
    a.known = 1;
    ack.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT_ACK;
    ack.heartbeat_ack = &a;
    uint64_t echoed = got->sent_ns;
    sc_ctl_envelope_free(&got);
    assert_null(got);
    assert_int_equal(sc_ctl_send(p->router, peer, &ack, &err), SC_OK);
    assert_int_equal(sc_ctl_recv(p->dealer, 5000, peer, &got, &err), SC_OK);
    assert_string_equal(peer, "");
    assert_int_equal(got->body_case, STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT_ACK);
    assert_int_equal(got->heartbeat_ack->echo_sent_ns, echoed);
    assert_true(got->heartbeat_ack->known);
    sc_ctl_envelope_free(&got);

    /* nothing more: a timeout, not an error that stops the loop */
    assert_int_equal(sc_ctl_recv(p->router, 10, peer, &got, &err), SC_ERR_TIMEOUT);
    assert_null(got);
}

static void test_unknown_peer_fails_visibly(void **state)
{
    pair *p = *state;
    sc_err err;
    sc_err_clear(&err);
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Command cmd = STAGECRAFT__COMMAND__INIT;
    cmd.kind = STAGECRAFT__COMMAND_KIND__COMMAND_STOP;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_COMMAND;
    env.command = &cmd;
    assert_int_equal(sc_ctl_send(p->router, "nobody", &env, &err), SC_ERR_UNAVAILABLE);
    assert_non_null(strstr(err.msg, "'nobody'"));
    assert_non_null(strstr(err.msg, "no such peer"));
    /* wrong use of the API is refused too */
    sc_err_clear(&err);
    assert_int_equal(sc_ctl_send(p->dealer, "x", &env, &err), SC_ERR_INVALID);
}

static void test_oversized_frame_dropped(void **state)
{
    pair *p = *state;
    sc_err err;
    sc_err_clear(&err);
    char peer[SC_CTL_PEER_ID_MAX];
    Stagecraft__ControlEnvelope *got = NULL;

    /* our own sender refuses it */
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Command cmd = STAGECRAFT__COMMAND__INIT;
    char *big = malloc(8192);
    memset(big, 'x', 8191);
    big[8191] = '\0';
    cmd.payload_json = big;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_COMMAND;
    env.command = &cmd;
    assert_int_equal(sc_ctl_send(p->dealer, NULL, &env, &err), SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "4096-byte limit"));

    /* a peer that bypasses the check: the receiving socket drops the frame (ZMQ_MAXMSGSIZE
     * closes that connection), and the channel goes on with what follows */
    void *raw = zmq_socket(p->zctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(raw, ZMQ_ROUTING_ID, "rogue", 5);
    assert_int_equal(zmq_connect(raw, sc_ctl_endpoint(p->router)), 0);
    assert_int_equal(zmq_send(raw, big, 8192, 0), 8192);
    free(big);
    send_heartbeat(p->dealer, 7);
    sc_err_clear(&err);
    sc_status rc;
    int heartbeats = 0;
    while ((rc = sc_ctl_recv(p->router, 500, peer, &got, &err)) != SC_ERR_TIMEOUT) {
        assert_int_equal(rc, SC_OK); /* never the rogue frame */
        assert_string_equal(peer, "w-1");
        assert_int_equal(got->heartbeat->step, 7);
        heartbeats++;
        sc_ctl_envelope_free(&got);
    }
    assert_int_equal(heartbeats, 1);
    zmq_close(raw);
}

static void test_garbage_and_version_mismatch(void **state)
{
    pair *p = *state;
    sc_err err;
    char peer[SC_CTL_PEER_ID_MAX];
    Stagecraft__ControlEnvelope *got = NULL;

    void *raw = zmq_socket(p->zctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(raw, ZMQ_ROUTING_ID, "old", 3);
    assert_int_equal(zmq_connect(raw, sc_ctl_endpoint(p->router)), 0);

    /* bytes that do not decode */
    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
    assert_int_equal(zmq_send(raw, garbage, sizeof garbage, 0), (int)sizeof garbage);
    sc_err_clear(&err);
    assert_int_equal(sc_ctl_recv(p->router, 5000, peer, &got, &err), SC_ERR_PARSE);
    assert_null(got);
    assert_string_equal(peer, "old");
    assert_non_null(strstr(err.msg, "from old"));

    /* a well-formed envelope of another protocol version */
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Heartbeat hb = STAGECRAFT__HEARTBEAT__INIT;
    env.protocol_version = SC_PROTOCOL_VERSION + 1;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    uint8_t *buf;
    size_t len;
    sc_err_clear(&err);
    assert_int_equal(sc_wire_pack(&env.base, &buf, &len, &err), SC_OK);
    assert_int_equal(zmq_send(raw, buf, len, 0), (int)len);
    free(buf);
    sc_err_clear(&err);
    assert_int_equal(sc_ctl_recv(p->router, 5000, peer, &got, &err), SC_ERR_VERSION);
    char want[64];
    snprintf(want, sizeof want, "version %d", SC_PROTOCOL_VERSION + 1);
    assert_non_null(strstr(err.msg, want));
    snprintf(want, sizeof want, "version %d", SC_PROTOCOL_VERSION);
    assert_non_null(strstr(err.msg, want));

    /* the old peer was told, in a frame it can decode */
    zmq_pollitem_t item = {raw, 0, ZMQ_POLLIN, 0};
    assert_int_equal(zmq_poll(&item, 1, 5000), 1);
    zmq_msg_t m;
    zmq_msg_init(&m);
    assert_true(zmq_msg_recv(&m, raw, 0) > 0);
    ProtobufCMessage *reply = NULL;
    assert_int_equal(sc_wire_unpack(&stagecraft__control_envelope__descriptor, zmq_msg_data(&m),
                                    zmq_msg_size(&m), &reply, &err),
                     SC_OK);
    Stagecraft__ControlEnvelope *r = (Stagecraft__ControlEnvelope *)reply;
    assert_int_equal(r->body_case, STAGECRAFT__CONTROL_ENVELOPE__BODY_ERROR);
    assert_string_equal(r->error->code, "VERSION");
    assert_non_null(strstr(r->error->message, want));
    protobuf_c_message_free_unpacked(reply, NULL);
    zmq_msg_close(&m);
    zmq_close(raw);

    /* the channel still works for well-behaved peers */
    send_heartbeat(p->dealer, 9);
    sc_err_clear(&err);
    assert_int_equal(sc_ctl_recv(p->router, 5000, peer, &got, &err), SC_OK);
    assert_int_equal(got->heartbeat->step, 9);
    sc_ctl_envelope_free(&got);
}

static void test_dealer_needs_routing_id(void **state)
{
    (void)state;
    sc_ctl *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_ctl_cfg cfg = {0};
    assert_int_equal(sc_ctl_dealer_new(&c, "tcp://127.0.0.1:1", &cfg, &err), SC_ERR_INVALID);
    assert_null(c);
    assert_non_null(strstr(err.msg, "routing id"));
    sc_err_clear(&err);
    assert_int_equal(sc_ctl_router_new(&c, "tcp://999.1.1.1:nope", NULL, &err), SC_ERR_UNAVAILABLE);
    assert_null(c);
    assert_non_null(strstr(err.msg, "tcp://999.1.1.1:nope"));
}

static uint8_t allowed_key[32];
static int zap_calls;

static bool allow_one(void *user, const uint8_t key[32], char owner[SC_CTL_PEER_ID_MAX])
{
    (void)user;
    zap_calls++;
    snprintf(owner, SC_CTL_PEER_ID_MAX, "owner-of-a");
    return memcmp(key, allowed_key, 32) == 0;
}

static void test_curve_with_allow_list(void **state)
{
    (void)state;
    if (!sc_ctl_curve_available())
        skip();
    sc_err err;
    sc_err_clear(&err);
    void *zctx = zmq_ctx_new();
    char spub[41], ssec[41], apub[41], asec[41], bpub[41], bsec[41];
    assert_int_equal(sc_ctl_curve_keypair(spub, ssec, &err), SC_OK);
    assert_int_equal(sc_ctl_curve_keypair(apub, asec, &err), SC_OK);
    assert_int_equal(sc_ctl_curve_keypair(bpub, bsec, &err), SC_OK);
    char again[41];
    assert_int_equal(sc_ctl_curve_public(asec, again, &err), SC_OK);
    assert_string_equal(again, apub);
    assert_int_equal(sc_ctl_curve_public("short", again, &err), SC_ERR_INVALID);
    sc_err_clear(&err);
    zmq_z85_decode(allowed_key, apub);

    sc_ctl_zap *zap = NULL;
    zap_calls = 0;
    assert_int_equal(sc_ctl_zap_start(&zap, zctx, allow_one, NULL, &err), SC_OK);
    sc_ctl *router = NULL, *good = NULL, *bad = NULL;
    sc_ctl_cfg rcfg = {.zmq_context = zctx, .curve_secret_key = ssec};
    assert_int_equal(sc_ctl_router_new(&router, "tcp://127.0.0.1:*", &rcfg, &err), SC_OK);
    sc_ctl_cfg gcfg = {.zmq_context = zctx, .routing_id = "w-1", .curve_secret_key = asec,
                       .curve_public_key = apub, .curve_server_key = spub};
    sc_ctl_cfg bcfg = {.zmq_context = zctx, .routing_id = "w-2", .curve_secret_key = bsec,
                       .curve_public_key = bpub, .curve_server_key = spub};
    assert_int_equal(sc_ctl_dealer_new(&good, sc_ctl_endpoint(router), &gcfg, &err), SC_OK);
    assert_int_equal(sc_ctl_dealer_new(&bad, sc_ctl_endpoint(router), &bcfg, &err), SC_OK);
    /* an impostor holding a's key under another routing id: admitted (the key is known), and
     * its messages carry the key's owner, so the receiver can tell */
    sc_ctl *imp = NULL;
    sc_ctl_cfg icfg = gcfg;
    icfg.routing_id = "w-9";
    assert_int_equal(sc_ctl_dealer_new(&imp, sc_ctl_endpoint(router), &icfg, &err), SC_OK);
    send_heartbeat(bad, 2);
    send_heartbeat(good, 1);
    send_heartbeat(imp, 3);

    char peer[SC_CTL_PEER_ID_MAX], owner[SC_CTL_PEER_ID_MAX];
    Stagecraft__ControlEnvelope *got = NULL;
    int from_good = 0, from_imp = 0;
    sc_status rc;
    while ((rc = sc_ctl_recv_owner(router, 1000, peer, owner, &got, &err)) != SC_ERR_TIMEOUT) {
        assert_int_equal(rc, SC_OK);
        assert_string_equal(owner, "owner-of-a"); /* never the unknown key */
        if (strcmp(peer, "w-1") == 0) {
            assert_int_equal(got->heartbeat->step, 1);
            from_good++;
        } else {
            assert_string_equal(peer, "w-9");
            assert_int_equal(got->heartbeat->step, 3);
            from_imp++;
        }
        sc_ctl_envelope_free(&got);
    }
    assert_int_equal(from_good, 1);
    assert_int_equal(from_imp, 1);
    sc_ctl_destroy(&imp);
    assert_true(zap_calls >= 2);

    /* a DEALER with a malformed key is refused at creation */
    sc_ctl *broken = NULL;
    sc_ctl_cfg kcfg = {.zmq_context = zctx, .routing_id = "w-3", .curve_secret_key = asec,
                       .curve_public_key = "too-short", .curve_server_key = spub};
    sc_err_clear(&err);
    assert_int_equal(sc_ctl_dealer_new(&broken, sc_ctl_endpoint(router), &kcfg, &err),
                     SC_ERR_INVALID);
    assert_null(broken);

    sc_ctl_destroy(&good);
    sc_ctl_destroy(&bad);
    sc_ctl_destroy(&router);
    sc_ctl_zap_stop(&zap);
    zmq_ctx_term(zctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_peer_fails_visibly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversized_frame_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_and_version_mismatch, setup, teardown),
        cmocka_unit_test(test_dealer_needs_routing_id),
        cmocka_unit_test(test_curve_with_allow_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
