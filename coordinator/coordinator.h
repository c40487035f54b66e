/*
 * The coordinator daemon: the Coordinator gRPC service (registration, jobs), the ZeroMQ control
 * loop (heartbeats, liveness, commands), the job driver (profile -> plan -> assign) and the
 * SQLite state that lets a restarted coordinator resume.
 *
 * Threads: coord_run's caller runs the control loop and owns the control socket; the RPC layer
 * runs handlers on its pool; one job-driver thread moves jobs through their states. The
 * registry, the store and the command queue are shared and guarded by one mutex (see
 * coord_internal.h). Bad input from any peer is refused with a message and never stops the
 * daemon.
 */
#ifndef COORD_COORDINATOR_H
#define COORD_COORDINATOR_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "coordinator/registry.h"
#include "proto/sc_rpc.h"

typedef struct coord coord;

typedef struct {
    const char *listen_addr;    /* gRPC "HOST:PORT" (port 0: pick one) */
    const char *advertise_host; /* host workers reach the control endpoint at; default: the
                                   listen host, or when that is 0.0.0.0 or [::] this host's
                                   first non-loopback IPv4 address (coord_new refuses to
                                   start when there is none) */
    const char *state_dir;      /* SQLite database and generated tokens */
    const char *join_token;     /* NULL: read or generate STATE/join.token */
    const char *client_token;   /* NULL: read or generate STATE/client.token */
    coord_registry_cfg registry;
    sc_rpc_tls tls;
    size_t max_message_bytes;   /* 0: the RPC layer's default */
    uint32_t profile_timeout_ms;/* per Worker.Profile call; default 60000 */
    uint32_t reprofile_ms;      /* how often a running job profiles again the free workers it
                                   could use (left out by a re-plan; an elastic job's newcomers);
                                   default 10000 */
    const char *http_addr;      /* the dashboard, /metrics and /api ("HOST:PORT", port 0: pick
                                   one; coordinator/http.h); NULL: no HTTP */
    bool http_optional;         /* an http_addr that cannot be bound (taken) is logged and the
                                   coordinator runs without HTTP, rather than not at all: for
                                   the default address, which a second coordinator on the
                                   machine finds taken */
} coord_cfg;

/* Opens the state, restores workers and jobs, binds the gRPC and control endpoints and starts
 * the RPC server and job driver. The state folder is locked (STATE/coordinator.lock, an
 * exclusive flock held until coord_destroy) so that one coordinator at a time drives its jobs:
 * SC_ERR_PRECONDITION, naming the folder, when another process holds it. */
sc_status coord_new(coord **out, const coord_cfg *cfg, sc_err *err);

/* Runs the control loop until *stop becomes non-zero (set it from a signal handler). */
sc_status coord_run(coord *c, volatile sig_atomic_t *stop, sc_err *err);

/* Stops the RPC server and the job driver, closes the state. Accepts NULL. */
void coord_destroy(coord **c);

int coord_port(const coord *c);
/* The HTTP view's bound port; -1 when cfg.http_addr was NULL. */
int coord_http_bound_port(const coord *c);
const char *coord_control_endpoint(const coord *c);
const char *coord_join_token_path(const coord *c);
const char *coord_client_token_path(const coord *c);

#endif /* COORD_COORDINATOR_H */
