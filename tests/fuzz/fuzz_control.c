/*
 * Fuzz target: control frames as a coordinator's ROUTER receives them from an accepted peer
 * (sc_ctl_recv over ZeroMQ inproc, from a raw DEALER that sends whatever bytes it is given). The
 * first input byte's low bit sends the rest as two frames of one message (split at the second
 * byte's value) instead of one; every other byte is the frame. The channel's frame limit is
 * 2048 bytes here, so the oversized-frame path runs too. A received Command's payload goes to
 * the worker's START reader (wk_start_run), the only JSON a control message carries.
 * Demands: no crash or undefined behaviour; a dropped frame has a message; the channel stays
 * usable (a valid heartbeat sent after every input is received intact).
 */
#include <zmq.h>

#include "tests/fuzz/fuzz_common.h"

#include "proto/sc_control.h"
#include "proto/sc_wire.h"
#include "worker/trainer.h"

#define FUZZ_MAX_FRAME 2048

static void *g_ctx;
static sc_ctl *g_router;
static void *g_dealer;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    g_ctx = zmq_ctx_new();
    FUZZ_REQUIRE(g_ctx != NULL, "zmq_ctx_new");
    sc_ctl_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.zmq_context = g_ctx;
    cfg.max_frame_bytes = FUZZ_MAX_FRAME;
    sc_err err;
    sc_err_clear(&err);
    FUZZ_REQUIRE(sc_ctl_router_new(&g_router, "inproc://fuzz-control", &cfg, &err) == SC_OK, "%s",
                 err.msg);
    g_dealer = zmq_socket(g_ctx, ZMQ_DEALER);
    FUZZ_REQUIRE(g_dealer != NULL, "zmq_socket");
    FUZZ_REQUIRE(zmq_setsockopt(g_dealer, ZMQ_ROUTING_ID, "w1", 2) == 0, "routing id");
    FUZZ_REQUIRE(zmq_connect(g_dealer, "inproc://fuzz-control") == 0, "connect");
    return 0;
}

/* Empties what the ROUTER answered (version errors), so its queue never fills. */
static void drain_dealer(void)
{
    char buf[4096];
    while (zmq_recv(g_dealer, buf, sizeof buf, ZMQ_DONTWAIT) >= 0) {
    }
}

static void receive_one(bool expect_valid)
{
    char peer[SC_CTL_PEER_ID_MAX];
    Stagecraft__ControlEnvelope *env = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = sc_ctl_recv(g_router, 5000, peer, &env, &err);
    FUZZ_REQUIRE(rc != SC_ERR_TIMEOUT, "a frame sent was not received: %s", err.msg);
    fuzz_refusal(rc, &err, "the control frame");
    FUZZ_REQUIRE(strcmp(peer, "w1") == 0, "the frame came from '%s', not from w1", peer);
    if (rc == SC_OK) {
        FUZZ_REQUIRE(env != NULL && env->protocol_version == SC_PROTOCOL_VERSION,
                     "an envelope of another version was accepted");
        if (env->body_case == STAGECRAFT__CONTROL_ENVELOPE__BODY_COMMAND && env->command != NULL)
            (void)wk_start_run(env->command->payload_json);
        if (expect_valid)
            FUZZ_REQUIRE(env->body_case == STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT &&
                             env->seq == 77,
                         "the heartbeat after the input arrived as body %d seq %llu",
                         (int)env->body_case, (unsigned long long)env->seq);
    } else {
        FUZZ_REQUIRE(!expect_valid, "the heartbeat after the input was dropped: %s", err.msg);
    }
    sc_ctl_envelope_free(&env);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *frame = data + 1;
    size_t n = size - 1;
    if ((data[0] & 1) && n >= 1) {
        size_t cut = frame[0] % n;
        FUZZ_REQUIRE(zmq_send(g_dealer, frame + 1, cut, ZMQ_SNDMORE) >= 0, "send");
        FUZZ_REQUIRE(zmq_send(g_dealer, frame + 1 + cut, n - 1 - cut, 0) >= 0, "send");
    } else {
        FUZZ_REQUIRE(zmq_send(g_dealer, frame, n, 0) >= 0, "send");
    }
    receive_one(false);

    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Heartbeat hb = STAGECRAFT__HEARTBEAT__INIT;
    env.protocol_version = SC_PROTOCOL_VERSION;
    env.seq = 77;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    hb.state = "idle";
    uint8_t *buf = NULL;
    size_t len = 0;
    sc_err err;
    sc_err_clear(&err);
    FUZZ_REQUIRE(sc_wire_pack(&env.base, &buf, &len, &err) == SC_OK, "%s", err.msg);
    FUZZ_REQUIRE(zmq_send(g_dealer, buf, len, 0) >= 0, "send");
    free(buf);
    receive_one(true);
    drain_dealer();
    return 0;
}
