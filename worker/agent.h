/*
 * The worker agent: serves the Worker gRPC service (Describe, AssignStage, Profile, Release),
 * registers with the coordinator, heartbeats over the ZeroMQ control channel, and re-registers
 * with backoff when the coordinator goes away or forgets it.
 *
 * The worker keeps its id and epoch in STATE/worker-NAME.id, so a restarted worker registers
 * again under its old id. It holds STATE/worker-NAME.lock locked (flock) from wk_agent_new to
 * wk_agent_destroy, so a second process with the same name and state folder cannot share the id.
 * Threads: wk_agent_run's caller owns the control socket (registration, heartbeats, commands); the
 * RPC layer's pool runs the Worker service; shared state is guarded by the agent's mutex. Running
 * stages arrives with the runtime; until then an assignment is recorded and reported.
 */
#ifndef WK_AGENT_H
#define WK_AGENT_H

#include <signal.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "proto/sc_rpc.h"

typedef struct wk_agent wk_agent;

typedef struct {
    const char *coordinator;    /* "HOST:PORT" of the coordinator's gRPC service */
    const char *listen_addr;    /* this worker's gRPC service; default "127.0.0.1:0" */
    const char *advertise_host; /* host the coordinator reaches this worker at; default: the
                                   listen host, or the hostname when it is 0.0.0.0 */
    const char *name;           /* default: HOSTNAME-DEVICE */
    const char *device;         /* "cpu" or "cuda:N"; default "cpu" */
    const char *join_token;     /* required */
    const char *state_dir;      /* where the id and lock files live; created when missing */
    sc_rpc_tls tls;             /* for the coordinator connection and this worker's service */
    uint32_t rpc_timeout_ms;    /* registration call deadline; default 5000 */
} wk_agent_cfg;

/* Checks the settings, takes the name's lock in the state folder, binds the Worker service and
 * prepares the coordinator connection (nothing is sent yet). SC_ERR_INVALID for bad settings,
 * SC_ERR_EXISTS when another process holds the lock of this name in this state folder, SC_ERR_IO
 * when the folder or its lock file cannot be made. */
sc_status wk_agent_new(wk_agent **out, const wk_agent_cfg *cfg, sc_err *err);

/* Registers, heartbeats and serves until *stop becomes non-zero; then releases the device and
 * returns. Returns an error only for problems that retrying cannot fix (a refused join token,
 * a name taken by a live worker). */
sc_status wk_agent_run(wk_agent *a, volatile sig_atomic_t *stop, sc_err *err);

void wk_agent_destroy(wk_agent **a);

/* The port of the worker's own gRPC service. */
int wk_agent_port(const wk_agent *a);

#endif /* WK_AGENT_H */
