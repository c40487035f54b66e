/*
 * Link probe (see link_probe.h): the estimate from timings, the doubling procedure, and its
 * round trips over Worker.ProbeLink.
 *
 * Not here: which workers are probed, when, or what a failure means for a job; the job
 * driver decides (a failed probe leaves the worker's reported figure in the cluster model).
 * Invariant: every figure returned is positive and finite, from a round trip longer than the
 * latency; anything else is an error, never a guess.
 */
#include "coordinator/link_probe.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/sc_clock.h"
#include "proto/stagecraft.pb-c.h"

sc_status coord_link_rate(double payload_bytes, double round_trip_s, double latency_s,
                          double *bytes_per_s, sc_err *err)
{
    if (!(payload_bytes > 0) || !isfinite(payload_bytes))
        return SC_ERRF(err, SC_ERR_INVALID, "link probe: a payload of %g bytes measures nothing",
                       payload_bytes);
    if (!(round_trip_s >= 0) || !isfinite(round_trip_s) || !(latency_s >= 0) ||
        !isfinite(latency_s))
        return SC_ERRF(err, SC_ERR_INVALID,
                       "link probe: round trip %g s and latency %g s must be finite and >= 0",
                       round_trip_s, latency_s);
    if (round_trip_s <= latency_s)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "link probe: the round trip with %g bytes took %g s, no longer than the "
                       "%g s of a tiny one, so it says nothing of the bandwidth",
                       payload_bytes, round_trip_s, latency_s);
    *bytes_per_s = payload_bytes / (round_trip_s - latency_s);
    return SC_OK;
}

/* One direction: payloads doubling from COORD_LINK_PROBE_START_BYTES until a round trip takes
 * COORD_LINK_PROBE_TARGET_S or carries COORD_LINK_PROBE_MAX_BYTES; the rate of that last one. */
static sc_status measure_direction(coord_link_round_trip_fn trip, void *user, bool up,
                                   coord_link_measure *m, double *bytes_per_s, size_t *bytes,
                                   sc_err *err)
{
    size_t size = COORD_LINK_PROBE_START_BYTES;
    double t = 0;
    for (;;) {
        SC_CHECK(trip(user, up ? size : 0, up ? 0 : size, &t, err));
        m->elapsed_s += t;
        if (t >= COORD_LINK_PROBE_TARGET_S || size >= COORD_LINK_PROBE_MAX_BYTES)
            break;
        size = size * 2 < COORD_LINK_PROBE_MAX_BYTES ? size * 2 : COORD_LINK_PROBE_MAX_BYTES;
    }
    *bytes = size;
    sc_status rc = coord_link_rate((double)size, t, m->latency_s, bytes_per_s, err);
    if (rc != SC_OK)
        sc_err_prefix(err, "%s", up ? "upwards" : "downwards");
    return rc;
}

sc_status coord_link_measure_run(coord_link_round_trip_fn trip, void *user, coord_link_measure *out,
                                 sc_err *err)
{
    *out = (coord_link_measure){0};
    double t = 0;
    /* the first call may open the connection: not a latency */
    SC_CHECK(trip(user, 0, 0, &t, err));
    out->elapsed_s += t;
    out->latency_s = INFINITY;
    for (int i = 0; i < COORD_LINK_PROBE_LATENCY_TRIPS; i++) {
        SC_CHECK(trip(user, 0, 0, &t, err));
        out->elapsed_s += t;
        out->latency_s = t < out->latency_s ? t : out->latency_s;
    }
    SC_CHECK(measure_direction(trip, user, true, out, &out->up_bytes_per_s, &out->up_bytes, err));
    SC_CHECK(
        measure_direction(trip, user, false, out, &out->down_bytes_per_s, &out->down_bytes, err));
    out->bytes_per_s =
        out->up_bytes_per_s < out->down_bytes_per_s ? out->up_bytes_per_s : out->down_bytes_per_s;
    return SC_OK;
}

/* ---- over gRPC ---------------------------------------------------------------------------- */

typedef struct {
    sc_rpc_client *cli;
    int64_t timeout_ms;
    uint8_t *zeros; /* COORD_LINK_PROBE_MAX_BYTES of payload to send */
} grpc_trip;

static sc_status probe_trip(void *user, size_t send_bytes, size_t reply_bytes, double *seconds,
                            sc_err *err)
{
    grpc_trip *g = user;
    Stagecraft__ProbeLinkRequest req = STAGECRAFT__PROBE_LINK_REQUEST__INIT;
    req.payload.data = g->zeros;
    req.payload.len = send_bytes;
    req.reply_bytes = (uint32_t)reply_bytes;
    ProtobufCMessage *m = NULL;
    uint64_t t0 = sc_clock_now_ns();
    SC_CHECK(sc_rpc_call(g->cli, "/stagecraft.Worker/ProbeLink", &req.base,
                         &stagecraft__probe_link_response__descriptor, &m, g->timeout_ms, err));
    *seconds = (double)(sc_clock_now_ns() - t0) * 1e-9;
    size_t got = ((Stagecraft__ProbeLinkResponse *)m)->payload.len;
    protobuf_c_message_free_unpacked(m, NULL);
    if (got != reply_bytes)
        return SC_ERRF(err, SC_ERR_PARSE, "ProbeLink answered %zu bytes for %zu asked", got,
                       reply_bytes);
    return SC_OK;
}

sc_status coord_link_probe(sc_rpc_client *cli, int64_t call_timeout_ms, coord_link_measure *out,
                           sc_err *err)
{
    grpc_trip g = {cli, call_timeout_ms, calloc(1, COORD_LINK_PROBE_MAX_BYTES)};
    SC_ALLOC_CHECK(g.zeros, err);
    sc_status rc = coord_link_measure_run(probe_trip, &g, out, err);
    free(g.zeros);
    return rc;
}
