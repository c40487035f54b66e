/*
 * coord profile cache: the profiles workers measured for earlier jobs, so that a job of the same
 * model on the same worker is planned without profiling it again.
 *
 * An entry is the profile a worker answered Worker.Profile with for one request: the model, its
 * micro-batch sizes, the precision and the data (the request key, as the caller writes it). It
 * holds for the worker's registration only: its id, its epoch and its hardware report (a worker
 * that registers again, restarted or with another device, has another epoch or report, and
 * misses). It does not notice a device that slows down within a registration (a CPU quota
 * changed in place, a GPU's clocks): a rebalance profiles afresh, and a new job after that gets
 * the stale figures until training's measured speeds correct the plan.
 * Invariant: at most COORD_PROFILE_CACHE_MAX entries; a full cache forgets the entry used least
 * recently. Not thread-safe: the coordinator holds c->lock around every call.
 */
#ifndef COORD_PROFILE_CACHE_H
#define COORD_PROFILE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

#define COORD_PROFILE_CACHE_MAX 64

typedef struct coord_profile_cache coord_profile_cache;

/* Which worker, as it is registered now, and what it was asked: the lookup's whole key. */
typedef struct {
    const char *worker_id;
    uint64_t epoch;
    const void *hardware; /* the packed hardware report of its registration */
    size_t hardware_len;
    const char *request; /* the profile request's parameters, the caller's encoding */
} coord_profile_key;

/* A new, empty cache into *out. SC_ERR_NOMEM. */
sc_status coord_profile_cache_new(coord_profile_cache **out, sc_err *err);

/* Frees the cache and sets *pc to NULL; accepts NULL and a NULL *pc. */
void coord_profile_cache_destroy(coord_profile_cache **pc);

/* The profile kept for `key` as a heap copy (caller frees), and the job that measured it into
 * from_job (may be NULL; size bytes); NULL when none (or out of memory). */
char *coord_profile_cache_get(coord_profile_cache *pc, const coord_profile_key *key, char *from_job,
                              size_t size);

/* Keeps a copy of `profile_json`, measured for job `job_id`, under `key`, replacing an entry of
 * the same key. Out of memory keeps nothing (the cache is only an optimisation). */
void coord_profile_cache_put(coord_profile_cache *pc, const coord_profile_key *key,
                             const char *job_id, const char *profile_json);

#endif /* COORD_PROFILE_CACHE_H */
