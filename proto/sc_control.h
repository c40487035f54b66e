/*
 * ZeroMQ control channel: the coordinator's ROUTER and each worker's DEALER, carrying one
 * protobuf-c ControlEnvelope (proto/control.proto) per frame.
 *
 * - Frames larger than max_frame_bytes are refused on send (SC_ERR_TOO_LARGE) and dropped on
 *   receipt: the socket's ZMQ_MAXMSGSIZE makes ZeroMQ close a connection that sends one, and the
 *   peer reconnects. A frame that does not decode is dropped with SC_ERR_PARSE.
 * - The ROUTER is ZMQ_ROUTER_MANDATORY: a send to a peer id that is not connected fails with
 *   SC_ERR_UNAVAILABLE instead of vanishing.
 * - An envelope with another protocol version is answered with an Error envelope naming both
 *   versions (never an Error in reply to an Error) and reported to the caller as SC_ERR_VERSION.
 * - Each DEALER carries a routing id, by which the ROUTER addresses it. Without CURVE a new
 *   connection with a routing id already in use takes it over (ZMQ_ROUTER_HANDOVER): that is a
 *   restarted worker; the fencing epoch in each envelope keeps an old incarnation out. With
 *   CURVE it does not: the first connection keeps the id and the later one is never addressed
 *   by it (libzmq does not show the ZAP handler the id a client claims, so a takeover could not
 *   be held to the key). A CURVE peer then picks an id of its own per connection and the
 *   receiver learns which id speaks for whom from the key's owner (sc_ctl_recv_owner).
 *
 * Not thread-safe: a channel belongs to the one event-loop thread that owns its socket (ZeroMQ
 * sockets must not be shared between threads). The ZeroMQ context may be shared.
 */
#ifndef SC_CONTROL_H
#define SC_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "proto/control.pb-c.h"

#define SC_CTL_DEFAULT_MAX_FRAME_BYTES (1u << 20)
#define SC_CTL_PEER_ID_MAX 256

typedef struct sc_ctl sc_ctl;

/* CURVE keys are Z85 text of 40 characters (zmq_curve_keypair). */
#define SC_CTL_KEY_Z85_LEN 40

typedef struct {
    void *zmq_context;       /* shared ZeroMQ context, or NULL to create one for this channel */
    size_t max_frame_bytes;  /* 0: SC_CTL_DEFAULT_MAX_FRAME_BYTES */
    const char *routing_id;  /* DEALER only: the id the ROUTER addresses this peer by */
    int linger_ms;           /* how long close waits for unsent frames; default 0 */
    /* CURVE encryption and authentication, off when curve_secret_key is NULL.
     * ROUTER: its secret key; it then authenticates every peer through the ZAP handler of its
     * context (sc_ctl_zap_start), which must run before the ROUTER is created, since a CURVE
     * server without a ZAP handler accepts any client key.
     * DEALER: its own secret and public keys and the ROUTER's public key. */
    const char *curve_secret_key;
    const char *curve_public_key;
    const char *curve_server_key;
} sc_ctl_cfg;

/* Whether this libzmq supports CURVE. */
bool sc_ctl_curve_available(void);

/* A new CURVE key pair as Z85 text (41-byte buffers, NUL-terminated). */
sc_status sc_ctl_curve_keypair(char public_key[SC_CTL_KEY_Z85_LEN + 1],
                               char secret_key[SC_CTL_KEY_Z85_LEN + 1], sc_err *err);

/* The public key of a Z85 secret key. */
sc_status sc_ctl_curve_public(const char *secret_key, char public_key[SC_CTL_KEY_Z85_LEN + 1],
                              sc_err *err);

/* ZAP handler: a thread that answers ZeroMQ's authentication requests for every CURVE socket of
 * `zmq_context`, admitting a client key (32 raw bytes) when allow(user, key, owner) returns true.
 * `allow` may name the key's owner in `owner` (at most SC_CTL_PEER_ID_MAX - 1 characters, "" for
 * none): every message of that connection then carries it (sc_ctl_recv_owner), so a receiver
 * can hold a peer to the key it authenticated with whatever routing id it claims. `allow` runs
 * on the handler's thread and must be thread-safe. */
typedef struct sc_ctl_zap sc_ctl_zap;
typedef bool (*sc_ctl_zap_allow_fn)(void *user, const uint8_t key[32],
                                    char owner[SC_CTL_PEER_ID_MAX]);
sc_status sc_ctl_zap_start(sc_ctl_zap **out, void *zmq_context, sc_ctl_zap_allow_fn allow,
                           void *user, sc_err *err);
/* Stops the handler thread. Call before terminating the context. Accepts NULL. */
void sc_ctl_zap_stop(sc_ctl_zap **zap);

/* Binds a ROUTER to `endpoint` ("tcp://127.0.0.1:0" picks a free port; see sc_ctl_endpoint). */
sc_status sc_ctl_router_new(sc_ctl **out, const char *endpoint, const sc_ctl_cfg *cfg, sc_err *err);

/* Connects a DEALER to a ROUTER's endpoint. Connecting never blocks: ZeroMQ (re)connects in the
 * background and queues frames meanwhile. cfg->routing_id is required (1..255 bytes). */
sc_status sc_ctl_dealer_new(sc_ctl **out, const char *endpoint, const sc_ctl_cfg *cfg, sc_err *err);

void sc_ctl_destroy(sc_ctl **ctl);

/* The endpoint the ROUTER is bound to, with the port resolved ("tcp://127.0.0.1:40123"). */
const char *sc_ctl_endpoint(const sc_ctl *ctl);

/* The underlying ZeroMQ socket, for zmq_poll() in an event loop. Borrowed. */
void *sc_ctl_socket(sc_ctl *ctl);

/* Sends one envelope. `peer` names the DEALER for a ROUTER and must be NULL for a DEALER.
 * protocol_version and sent_ns are filled in when zero. Never blocks: a full queue is
 * SC_ERR_UNAVAILABLE. */
sc_status sc_ctl_send(sc_ctl *ctl, const char *peer, Stagecraft__ControlEnvelope *env, sc_err *err);

/* Receives one envelope, waiting up to timeout_ms (0: do not wait; -1: forever).
 * On SC_OK, *env is owned by the caller (free with sc_ctl_envelope_free) and, for a ROUTER,
 * `peer` holds the sender's id. SC_ERR_TIMEOUT: nothing arrived. SC_ERR_PARSE / SC_ERR_VERSION:
 * a frame from `peer` was dropped, err says why; the channel stays usable. */
sc_status sc_ctl_recv(sc_ctl *ctl, int timeout_ms, char peer[SC_CTL_PEER_ID_MAX],
                      Stagecraft__ControlEnvelope **env, sc_err *err);

/* sc_ctl_recv on a ROUTER whose peers authenticated through the ZAP handler: `owner` also gets
 * the owner `allow` named for the key of the connection the envelope came on ("" when there is
 * no ZAP handler or it named none). */
sc_status sc_ctl_recv_owner(sc_ctl *ctl, int timeout_ms, char peer[SC_CTL_PEER_ID_MAX],
                            char owner[SC_CTL_PEER_ID_MAX], Stagecraft__ControlEnvelope **env,
                            sc_err *err);

void sc_ctl_envelope_free(Stagecraft__ControlEnvelope **env);

#endif /* SC_CONTROL_H */
