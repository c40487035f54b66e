/*
 * Link probe: measures the bandwidth of the network path between the coordinator and a worker by
 * timing Worker.ProbeLink round trips of growing size, each direction on its own, less the time
 * of a tiny round trip (the latency and per-call overhead).
 *
 * What it measures is that one path. On a cluster whose bottleneck is each server's NIC or
 * uplink (the coordinator's own being faster) it equals that uplink, which is what the cluster
 * model's nic_bandwidth_bytes_per_s stands for. It does not see a link between two workers
 * that the coordinator's path avoids, a switch fabric slower than the uplinks, or links that
 * probes of several workers would share at once (the caller probes one worker at a time).
 *
 * The procedure (coord_link_measure_run) is separate from the transport: it takes a round-trip
 * function, so it runs over gRPC (coord_link_probe) and over timings made up by a test alike.
 */
#ifndef COORD_LINK_PROBE_H
#define COORD_LINK_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "proto/sc_rpc.h"

/* The first payload of each direction; it doubles from there. */
#define COORD_LINK_PROBE_START_BYTES ((size_t)64 << 10)
/* A direction stops at the first round trip that takes at least this long... */
#define COORD_LINK_PROBE_TARGET_S 0.2
/* ...or carries this many bytes: the payload a ProbeLink message holds within the default RPC
 * message limit (the worker's own bound, WK_PROBE_MAX_BYTES, is the same). */
#define COORD_LINK_PROBE_MAX_BYTES (SC_RPC_DEFAULT_MAX_MESSAGE_BYTES - 1024)
/* Tiny round trips timed for the latency, after one that opens the connection. */
#define COORD_LINK_PROBE_LATENCY_TRIPS 3

/* Bytes per second of a link from one timed round trip that carried `payload_bytes` one way:
 * payload_bytes / (round_trip_s - latency_s), where latency_s is the time of a tiny round trip.
 * SC_ERR_INVALID, naming the figures, for nonsense: a payload <= 0, a time or latency that is
 * negative or not finite, or a round trip no longer than the latency (the payload's time
 * drowned in the noise; a larger payload would tell). */
sc_status coord_link_rate(double payload_bytes, double round_trip_s, double latency_s,
                          double *bytes_per_s, sc_err *err);

/* One round trip: send `send_bytes` of payload, get `reply_bytes` back; *seconds is the time it
 * took. An error ends the probe. */
typedef sc_status (*coord_link_round_trip_fn)(void *user, size_t send_bytes, size_t reply_bytes,
                                              double *seconds, sc_err *err);

typedef struct {
    double latency_s;            /* the least of the tiny round trips */
    double up_bytes_per_s;       /* coordinator to worker */
    double down_bytes_per_s;     /* worker to coordinator */
    double bytes_per_s;          /* the slower direction: the figure the cluster model takes */
    size_t up_bytes, down_bytes; /* the payload each direction's figure was measured with */
    double elapsed_s;            /* time spent in round trips */
} coord_link_measure;

/* Runs the probe over `trip`: one tiny round trip (which may open the connection) then
 * COORD_LINK_PROBE_LATENCY_TRIPS more for the latency; then, upwards (payload sent, nothing
 * back) and downwards (nothing sent, payload back) in turn, payloads from
 * COORD_LINK_PROBE_START_BYTES doubling until a round trip takes COORD_LINK_PROBE_TARGET_S or
 * the payload reaches COORD_LINK_PROBE_MAX_BYTES; a direction's figure comes from its last,
 * largest round trip (coord_link_rate). On a 10 Mbit/s link that is about 0.4 s a direction,
 * on 1 Gbit/s well under 0.1 s. Errors: those of `trip`, and coord_link_rate's. */
sc_status coord_link_measure_run(coord_link_round_trip_fn trip, void *user, coord_link_measure *out,
                                 sc_err *err);

/* coord_link_measure_run over Worker.ProbeLink calls through `cli` (one connection for every
 * round trip), each with a deadline of `call_timeout_ms`. */
sc_status coord_link_probe(sc_rpc_client *cli, int64_t call_timeout_ms, coord_link_measure *out,
                           sc_err *err);

#endif /* COORD_LINK_PROBE_H */
