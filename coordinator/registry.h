/*
 * The coordinator's table of workers: registration, fencing epochs and liveness from
 * heartbeats.
 *
 * A worker registers under a name. A restarted worker that presents its previous id gets that
 * id back with a new epoch; control messages carrying an older epoch are refused (fenced), so a
 * stale incarnation that wakes up cannot act for the new one. A second live worker claiming a
 * registered name without its id is refused as a duplicate. Liveness: a worker is suspect after
 * `suspect_after` heartbeat intervals without a heartbeat and dead after `dead_after`;
 * a heartbeat brings a suspect worker back to alive; a dead one must re-register.
 *
 * Time is passed in (monotonic ns) so the rules can be tested without sleeping.
 * Not thread-safe: owned by the coordinator's event-loop thread.
 */
#ifndef COORD_REGISTRY_H
#define COORD_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "coordinator/store.h"

/* a control routing id, with its NUL (SC_CTL_PEER_ID_MAX) */
#define COORD_ROUTE_MAX 256

typedef enum {
    COORD_WORKER_ALIVE = 1,
    COORD_WORKER_SUSPECT = 2,
    COORD_WORKER_DEAD = 3,
} coord_worker_state;

const char *coord_worker_state_name(coord_worker_state s);

typedef struct {
    uint32_t heartbeat_interval_ms; /* what workers are told to use; default 1000 */
    uint32_t suspect_after;         /* missed intervals; default 3 */
    uint32_t dead_after;            /* missed intervals; default 5 */
} coord_registry_cfg;

typedef struct {
    coord_worker_rec rec; /* id, name, host, endpoint, epoch, hardware report */
    coord_worker_state state;
    uint64_t last_heartbeat_ns; /* monotonic */
    int64_t last_heartbeat_unix_ms;
    char job_id[COORD_ID_MAX]; /* the job it serves, or "" */
    char reported_state[32];   /* from its last heartbeat */
    /* its path to the coordinator as last probed (coord_jobs_note_probes): the slower
     * direction, the latency and when (0: never probed since it registered) */
    double link_bytes_per_s, link_latency_s;
    int64_t link_probed_unix_ms;
    uint8_t curve_key[32]; /* its ZeroMQ CURVE public key, when has_curve_key */
    bool has_curve_key;
    /* the routing id of its control connection: set from a heartbeat of its current epoch that
     * came with its key (coordinator.c), "" from its registration until then */
    char route[COORD_ROUTE_MAX];
    uint64_t step;
    /* coord_jobs_heartbeat: since when its heartbeats disagree with job_id (0: they agree), and
     * when a command was last sent again to settle it */
    uint64_t disagree_since_ns, repaired_ns;
    /* it said it leaves and stays until its job's blocks have moved off it (jobs_recovery.c):
     * no job takes it meanwhile */
    bool leaving;
} coord_worker;

typedef struct coord_registry coord_registry;

/* cfg may be NULL for the defaults. dead_after must be > suspect_after >= 1. */
sc_status coord_registry_new(coord_registry **out, const coord_registry_cfg *cfg, sc_err *err);
void coord_registry_destroy(coord_registry **reg);

const coord_registry_cfg *coord_registry_config(const coord_registry *reg);

/* Registers `req` (name, host, endpoint and hardware set; id and epoch as the worker last held
 * them, or empty/0). On success *out points at the registry's entry, whose id and epoch the
 * worker is to use. Errors: SC_ERR_EXISTS for a live duplicate name, SC_ERR_PERMISSION for a
 * previous id that belongs to another name, SC_ERR_INVALID for an empty name. The hardware
 * report is copied. */
sc_status coord_registry_register(coord_registry *reg, const coord_worker_rec *req, uint64_t now_ns,
                                  coord_worker **out, sc_err *err);

/* Restores a worker known from the store (after a coordinator restart) as dead until it
 * re-registers; its id and epoch are kept. */
sc_status coord_registry_restore(coord_registry *reg, const coord_worker_rec *rec, sc_err *err);

/* Records a heartbeat. SC_ERR_NOT_FOUND for an unknown id, SC_ERR_PERMISSION for a stale epoch,
 * SC_ERR_PRECONDITION for a worker already declared dead (it must re-register). */
sc_status coord_registry_heartbeat(coord_registry *reg, const char *id, uint64_t epoch,
                                   uint64_t now_ns, coord_worker **out, sc_err *err);

/* Re-evaluates every worker's state at `now_ns`. For each worker whose state changed, calls
 * `changed(user, worker, old_state)` (may be NULL). Returns the number of changes. */
size_t coord_registry_sweep(coord_registry *reg, uint64_t now_ns,
                            void (*changed)(void *user, const coord_worker *w,
                                            coord_worker_state old_state),
                            void *user);

coord_worker *coord_registry_find(coord_registry *reg, const char *id);
coord_worker *coord_registry_find_name(coord_registry *reg, const char *name);
size_t coord_registry_count(const coord_registry *reg);
/* The i-th worker in registration order (i < count). */
coord_worker *coord_registry_at(coord_registry *reg, size_t i);

#endif /* COORD_REGISTRY_H */
