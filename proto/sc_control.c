/*
 * ZeroMQ control channel (see sc_control.h). A ROUTER frame is [routing id][payload]; a DEALER
 * frame is [payload]. Everything that arrives is checked here (size, decoding, protocol version)
 * so the coordinator and worker loops only see well-formed envelopes of their own version.
 */
#include "proto/sc_control.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "proto/sc_wire.h"

struct sc_ctl {
    void *ctx;
    bool owns_ctx;
    void *sock;
    bool router;
    size_t max_frame_bytes;
    char endpoint[256];
};

#define ZMQ_FAIL(err, what) SC_ERRF((err), SC_ERR_ZMQ, "%s: %s", (what), zmq_strerror(zmq_errno()))

static sc_status ctl_open(sc_ctl **out, int type, const sc_ctl_cfg *cfg, sc_err *err)
{
    *out = NULL;
    sc_ctl *c = calloc(1, sizeof *c);
    SC_ALLOC_CHECK(c, err);
    c->router = type == ZMQ_ROUTER;
    c->max_frame_bytes = cfg && cfg->max_frame_bytes ? cfg->max_frame_bytes
                                                     : SC_CTL_DEFAULT_MAX_FRAME_BYTES;
    if (cfg && cfg->zmq_context) {
        c->ctx = cfg->zmq_context;
    } else {
        c->ctx = zmq_ctx_new();
        c->owns_ctx = true;
        if (c->ctx == NULL) {
            free(c);
            return ZMQ_FAIL(err, "creating a ZeroMQ context");
        }
    }
    c->sock = zmq_socket(c->ctx, type);
    if (c->sock == NULL) {
        ZMQ_FAIL(err, "creating a ZeroMQ socket");
        sc_ctl_destroy(&c);
        return SC_ERR_ZMQ;
    }
    int64_t max = (int64_t)c->max_frame_bytes + SC_CTL_PEER_ID_MAX;
    int linger = cfg ? cfg->linger_ms : 0;
    int one = 1;
    /* Under CURVE a new connection never takes over a routing id in use: libzmq does not show
     * the ZAP handler the id a client claims, so a handover would let any admitted key displace
     * another key's connection and receive what is sent to it. The owner of the key each message
     * came with (sc_ctl_recv_owner) says whom a connection speaks for. */
    bool curve = cfg && cfg->curve_secret_key;
    if (zmq_setsockopt(c->sock, ZMQ_MAXMSGSIZE, &max, sizeof max) != 0 ||
        zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        (c->router && zmq_setsockopt(c->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one) != 0) ||
        (c->router && !curve &&
         zmq_setsockopt(c->sock, ZMQ_ROUTER_HANDOVER, &one, sizeof one) != 0)) {
        ZMQ_FAIL(err, "setting control socket options");
        sc_ctl_destroy(&c);
        return SC_ERR_ZMQ;
    }
    if (cfg && cfg->curve_secret_key) {
        int server = c->router;
        bool ok = strlen(cfg->curve_secret_key) == SC_CTL_KEY_Z85_LEN &&
                  zmq_setsockopt(c->sock, ZMQ_CURVE_SECRETKEY, cfg->curve_secret_key,
                                 SC_CTL_KEY_Z85_LEN) == 0;
        if (ok && server)
            ok = zmq_setsockopt(c->sock, ZMQ_CURVE_SERVER, &server, sizeof server) == 0 &&
                 zmq_setsockopt(c->sock, ZMQ_ZAP_DOMAIN, "stagecraft", 10) == 0;
        if (ok && !server)
            ok = cfg->curve_public_key && cfg->curve_server_key &&
                 strlen(cfg->curve_public_key) == SC_CTL_KEY_Z85_LEN &&
                 strlen(cfg->curve_server_key) == SC_CTL_KEY_Z85_LEN &&
                 zmq_setsockopt(c->sock, ZMQ_CURVE_PUBLICKEY, cfg->curve_public_key,
                                SC_CTL_KEY_Z85_LEN) == 0 &&
                 zmq_setsockopt(c->sock, ZMQ_CURVE_SERVERKEY, cfg->curve_server_key,
                                SC_CTL_KEY_Z85_LEN) == 0;
        if (!ok) {
            SC_ERRF(err, SC_ERR_INVALID,
                    "CURVE keys refused (%s): expected %d-character Z85 keys%s",
                    zmq_strerror(zmq_errno()), SC_CTL_KEY_Z85_LEN,
                    server ? "" : " (own secret and public, and the server's public)");
            sc_ctl_destroy(&c);
            return SC_ERR_INVALID;
        }
    }
    *out = c;
    return SC_OK;
}

sc_status sc_ctl_router_new(sc_ctl **out, const char *endpoint, const sc_ctl_cfg *cfg, sc_err *err)
{
    sc_ctl *c;
    SC_CHECK(ctl_open(&c, ZMQ_ROUTER, cfg, err));
    if (zmq_bind(c->sock, endpoint) != 0) {
        SC_ERRF(err, SC_ERR_UNAVAILABLE, "cannot bind control endpoint %s: %s", endpoint,
                zmq_strerror(zmq_errno()));
        sc_ctl_destroy(&c);
        return SC_ERR_UNAVAILABLE;
    }
    size_t len = sizeof c->endpoint;
    if (zmq_getsockopt(c->sock, ZMQ_LAST_ENDPOINT, c->endpoint, &len) != 0)
        sc_strlcpy(c->endpoint, endpoint, sizeof c->endpoint);
    *out = c;
    return SC_OK;
}

sc_status sc_ctl_dealer_new(sc_ctl **out, const char *endpoint, const sc_ctl_cfg *cfg, sc_err *err)
{
    *out = NULL;
    const char *id = cfg ? cfg->routing_id : NULL;
    if (id == NULL || id[0] == '\0' || strlen(id) >= SC_CTL_PEER_ID_MAX)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "a control DEALER needs a routing id of 1 to %d bytes (the worker id)",
                       SC_CTL_PEER_ID_MAX - 1);
    sc_ctl *c;
    SC_CHECK(ctl_open(&c, ZMQ_DEALER, cfg, err));
    if (zmq_setsockopt(c->sock, ZMQ_ROUTING_ID, id, strlen(id)) != 0) {
        ZMQ_FAIL(err, "setting the control routing id");
        sc_ctl_destroy(&c);
        return SC_ERR_ZMQ;
    }
    if (zmq_connect(c->sock, endpoint) != 0) {
        SC_ERRF(err, SC_ERR_INVALID, "cannot connect to control endpoint '%s': %s", endpoint,
                zmq_strerror(zmq_errno()));
        sc_ctl_destroy(&c);
        return SC_ERR_INVALID;
    }
    sc_strlcpy(c->endpoint, endpoint, sizeof c->endpoint);
    *out = c;
    return SC_OK;
}

void sc_ctl_destroy(sc_ctl **ctl)
{
    if (ctl == NULL || *ctl == NULL)
        return;
    sc_ctl *c = *ctl;
    if (c->sock)
        zmq_close(c->sock);
    if (c->owns_ctx && c->ctx)
        zmq_ctx_term(c->ctx);
    free(c);
    *ctl = NULL;
}

const char *sc_ctl_endpoint(const sc_ctl *ctl)
{
    return ctl->endpoint;
}

void *sc_ctl_socket(sc_ctl *ctl)
{
    return ctl->sock;
}

sc_status sc_ctl_send(sc_ctl *ctl, const char *peer, Stagecraft__ControlEnvelope *env, sc_err *err)
{
    if (ctl->router != (peer != NULL))
        return SC_ERRF(err, SC_ERR_INVALID, "%s",
                       ctl->router ? "a ROUTER send needs the peer id"
                                   : "a DEALER send takes no peer id");
    if (env->protocol_version == 0)
        env->protocol_version = SC_PROTOCOL_VERSION;
    if (env->sent_ns == 0)
        env->sent_ns = sc_clock_now_ns();
    size_t n = protobuf_c_message_get_packed_size(&env->base);
    if (n > ctl->max_frame_bytes)
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "control frame of %zu bytes exceeds the %zu-byte limit", n,
                       ctl->max_frame_bytes);
    uint8_t *buf;
    SC_CHECK(sc_wire_pack(&env->base, &buf, &n, err));
    sc_status rc = SC_OK;
    if (peer != NULL && zmq_send(ctl->sock, peer, strlen(peer), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        rc = SC_ERRF(err, SC_ERR_UNAVAILABLE, "control send to '%s' failed: %s", peer,
                     e == EHOSTUNREACH ? "no such peer is connected" : zmq_strerror(e));
        goto out;
    }
    if (zmq_send(ctl->sock, buf, n, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        rc = SC_ERRF(err, SC_ERR_UNAVAILABLE, "control send%s%s failed: %s", peer ? " to " : "",
                     peer ? peer : "", e == EAGAIN ? "queue full" : zmq_strerror(e));
    }
out:
    free(buf);
    return rc;
}

/* Reads the remaining frames of a multi-part message, so one bad message cannot desynchronise
 * the ones after it. */
static void drain_more(void *sock)
{
    int more = 0;
    size_t len = sizeof more;
    while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &len) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, sock, ZMQ_DONTWAIT);
        zmq_msg_close(&m);
        len = sizeof more;
    }
}

static void reply_version_error(sc_ctl *ctl, const char *peer, uint32_t got)
{
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Error e = STAGECRAFT__ERROR__INIT;
    char msg[256];
    snprintf(msg, sizeof msg, "protocol version %u refused: this peer speaks version %d", got,
             SC_PROTOCOL_VERSION);
    e.code = "VERSION";
    e.message = msg;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_ERROR;
    env.error = &e;
    sc_err ignored;
    sc_err_clear(&ignored);
    sc_ctl_send(ctl, ctl->router ? peer : NULL, &env, &ignored);
}

sc_status sc_ctl_recv(sc_ctl *ctl, int timeout_ms, char peer[SC_CTL_PEER_ID_MAX],
                      Stagecraft__ControlEnvelope **env, sc_err *err)
{
    return sc_ctl_recv_owner(ctl, timeout_ms, peer, NULL, env, err);
}

sc_status sc_ctl_recv_owner(sc_ctl *ctl, int timeout_ms, char peer[SC_CTL_PEER_ID_MAX],
                            char owner[SC_CTL_PEER_ID_MAX], Stagecraft__ControlEnvelope **env,
                            sc_err *err)
{
    *env = NULL;
    peer[0] = '\0';
    if (owner != NULL)
        owner[0] = '\0';
    zmq_pollitem_t item = {ctl->sock, 0, ZMQ_POLLIN, 0};
    int n = zmq_poll(&item, 1, timeout_ms);
    if (n < 0) {
        if (zmq_errno() == EINTR)
            return SC_ERRF(err, SC_ERR_TIMEOUT, "control receive interrupted");
        return ZMQ_FAIL(err, "polling the control socket");
    }
    if (n == 0)
        return SC_ERRF(err, SC_ERR_TIMEOUT, "no control message within %d ms", timeout_ms);

    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (ctl->router) {
        if (zmq_msg_recv(&msg, ctl->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            return ZMQ_FAIL(err, "receiving a control frame");
        }
        size_t id_len = zmq_msg_size(&msg);
        if (id_len >= SC_CTL_PEER_ID_MAX)
            id_len = SC_CTL_PEER_ID_MAX - 1;
        memcpy(peer, zmq_msg_data(&msg), id_len);
        peer[id_len] = '\0';
        zmq_msg_close(&msg);
        zmq_msg_init(&msg);
    }
    if (zmq_msg_recv(&msg, ctl->sock, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        return ZMQ_FAIL(err, "receiving a control frame");
    }
    drain_more(ctl->sock);
    if (owner != NULL) {
        /* set by the ZAP handler for the connection (zmq_msg_gets fails without one) */
        const char *uid = zmq_msg_gets(&msg, "User-Id");
        if (uid != NULL)
            sc_strlcpy(owner, uid, SC_CTL_PEER_ID_MAX);
    }
    sc_status rc;
    ProtobufCMessage *m = NULL;
    size_t len = zmq_msg_size(&msg);
    const char *from = peer[0] ? peer : "the coordinator";
    if (len > ctl->max_frame_bytes) {
        rc = SC_ERRF(err, SC_ERR_TOO_LARGE, "dropped a %zu-byte control frame from %s: over the "
                     "%zu-byte limit", len, from, ctl->max_frame_bytes);
        goto out;
    }
    rc = sc_wire_unpack(&stagecraft__control_envelope__descriptor, zmq_msg_data(&msg), len, &m,
                        err);
    if (rc != SC_OK) {
        sc_err_prefix(err, "dropped a control frame from %s", from);
        goto out;
    }
    Stagecraft__ControlEnvelope *e = (Stagecraft__ControlEnvelope *)m;
    if (e->protocol_version != SC_PROTOCOL_VERSION) {
        char what[300];
        snprintf(what, sizeof what, "control message from %s", from);
        rc = sc_wire_check_version(e->protocol_version, what, err);
        if (e->body_case != STAGECRAFT__CONTROL_ENVELOPE__BODY_ERROR)
            reply_version_error(ctl, peer, e->protocol_version);
        protobuf_c_message_free_unpacked(m, NULL);
        goto out;
    }
    *env = e;
out:
    zmq_msg_close(&msg);
    return rc;
}

void sc_ctl_envelope_free(Stagecraft__ControlEnvelope **env)
{
    if (env == NULL || *env == NULL)
        return;
    protobuf_c_message_free_unpacked(&(*env)->base, NULL);
    *env = NULL;
}

/* ---- CURVE and ZAP ---------------------------------------------------------------------------- */

bool sc_ctl_curve_available(void)
{
    return zmq_has("curve") != 0;
}

sc_status sc_ctl_curve_keypair(char public_key[SC_CTL_KEY_Z85_LEN + 1],
                               char secret_key[SC_CTL_KEY_Z85_LEN + 1], sc_err *err)
{
    if (zmq_curve_keypair(public_key, secret_key) != 0)
        return ZMQ_FAIL(err, "making a CURVE key pair");
    return SC_OK;
}

sc_status sc_ctl_curve_public(const char *secret_key, char public_key[SC_CTL_KEY_Z85_LEN + 1],
                              sc_err *err)
{
    if (strlen(secret_key) != SC_CTL_KEY_Z85_LEN || zmq_curve_public(public_key, secret_key) != 0)
        return SC_ERRF(err, SC_ERR_INVALID, "not a %d-character Z85 CURVE secret key",
                       SC_CTL_KEY_Z85_LEN);
    return SC_OK;
}

struct sc_ctl_zap {
    void *ctx;
    void *sock; /* REP on inproc://zeromq.zap.01, owned by the thread once started */
    pthread_t thread;
    volatile int stop;
    sc_ctl_zap_allow_fn allow;
    void *user;
};

/* One ZAP request: version, request id, domain, address, identity, mechanism, credentials. */
static void zap_answer(sc_ctl_zap *z)
{
    zmq_msg_t part[8];
    int n = 0, more = 1;
    while (more && n < 8) {
        zmq_msg_init(&part[n]);
        if (zmq_msg_recv(&part[n], z->sock, 0) < 0) {
            zmq_msg_close(&part[n]);
            break;
        }
        more = zmq_msg_more(&part[n]);
        n++;
    }
    if (more)
        drain_more(z->sock);
    bool ok = false;
    const char *why = "malformed ZAP request";
    char owner[SC_CTL_PEER_ID_MAX] = "";
    if (n >= 7 && zmq_msg_size(&part[5]) == 5 && memcmp(zmq_msg_data(&part[5]), "CURVE", 5) == 0 &&
        zmq_msg_size(&part[6]) == 32) {
        ok = z->allow(z->user, zmq_msg_data(&part[6]), owner);
        owner[SC_CTL_PEER_ID_MAX - 1] = '\0';
        why = ok ? "OK" : "unknown worker key";
    } else if (n >= 6) {
        why = "only CURVE peers are accepted";
    }
    if (n >= 2) {
        zmq_send(z->sock, "1.0", 3, ZMQ_SNDMORE);
        zmq_send(z->sock, zmq_msg_data(&part[1]), zmq_msg_size(&part[1]), ZMQ_SNDMORE);
        zmq_send(z->sock, ok ? "200" : "400", 3, ZMQ_SNDMORE);
        zmq_send(z->sock, why, strlen(why), ZMQ_SNDMORE);
        /* the user id: every message of the connection carries it as "User-Id" */
        zmq_send(z->sock, owner, ok ? strlen(owner) : 0, ZMQ_SNDMORE);
        zmq_send(z->sock, "", 0, 0);
    }
    if (!ok)
        SC_LOG_WARN("control", "control connection refused: %s", why);
    for (int i = 0; i < n; i++)
        zmq_msg_close(&part[i]);
}

static void *zap_main(void *arg)
{
    sc_ctl_zap *z = arg;
    while (!z->stop) {
        zmq_pollitem_t item = {z->sock, 0, ZMQ_POLLIN, 0};
        int r = zmq_poll(&item, 1, 100);
        if (r > 0)
            zap_answer(z);
        else if (r < 0 && zmq_errno() == ETERM)
            break;
    }
    zmq_close(z->sock);
    return NULL;
}

sc_status sc_ctl_zap_start(sc_ctl_zap **out, void *zmq_context, sc_ctl_zap_allow_fn allow,
                           void *user, sc_err *err)
{
    *out = NULL;
    sc_ctl_zap *z = calloc(1, sizeof *z);
    SC_ALLOC_CHECK(z, err);
    z->ctx = zmq_context;
    z->allow = allow;
    z->user = user;
    z->sock = zmq_socket(zmq_context, ZMQ_REP);
    int linger = 0;
    if (z->sock == NULL || zmq_setsockopt(z->sock, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_bind(z->sock, "inproc://zeromq.zap.01") != 0) {
        ZMQ_FAIL(err, "starting the ZAP handler");
        if (z->sock)
            zmq_close(z->sock);
        free(z);
        return SC_ERR_ZMQ;
    }
    if (pthread_create(&z->thread, NULL, zap_main, z) != 0) {
        zmq_close(z->sock);
        free(z);
        return SC_ERRF(err, SC_ERR_INTERNAL, "cannot start the ZAP handler thread");
    }
    *out = z;
    return SC_OK;
}

void sc_ctl_zap_stop(sc_ctl_zap **zap)
{
    if (zap == NULL || *zap == NULL)
        return;
    (*zap)->stop = 1;
    pthread_join((*zap)->thread, NULL);
    free(*zap);
    *zap = NULL;
}
