/*
 * Worker registry (see registry.h). Workers live in an array in registration order; lookups
 * are linear, which is fine at the scale of a cluster (thousands) since the event loop does one
 * lookup per message. Ids are "w-<n>" from a counter that restored records advance, so ids are
 * never reused across coordinator restarts.
 */
#include "coordinator/registry.h"

#include "common/sc_clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sc_util.h"

struct coord_registry {
    coord_registry_cfg cfg;
    coord_worker *workers;
    size_t n, cap;
    uint64_t next_id;
};

const char *coord_worker_state_name(coord_worker_state s)
{
    switch (s) {
    case COORD_WORKER_ALIVE:
        return "alive";
    case COORD_WORKER_SUSPECT:
        return "suspect";
    case COORD_WORKER_DEAD:
        return "dead";
    }
    return "unknown";
}

sc_status coord_registry_new(coord_registry **out, const coord_registry_cfg *cfg, sc_err *err)
{
    *out = NULL;
    coord_registry_cfg c = {1000, 3, 5};
    if (cfg != NULL) {
        if (cfg->heartbeat_interval_ms)
            c.heartbeat_interval_ms = cfg->heartbeat_interval_ms;
        if (cfg->suspect_after)
            c.suspect_after = cfg->suspect_after;
        if (cfg->dead_after)
            c.dead_after = cfg->dead_after;
    }
    if (c.dead_after <= c.suspect_after)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "dead-after (%u missed heartbeats) must be larger than suspect-after (%u)",
                       c.dead_after, c.suspect_after);
    coord_registry *r = calloc(1, sizeof *r);
    SC_ALLOC_CHECK(r, err);
    r->cfg = c;
    r->next_id = 1;
    *out = r;
    return SC_OK;
}

void coord_registry_destroy(coord_registry **reg)
{
    if (reg == NULL || *reg == NULL)
        return;
    for (size_t i = 0; i < (*reg)->n; i++)
        free((*reg)->workers[i].rec.hardware);
    free((*reg)->workers);
    free(*reg);
    *reg = NULL;
}

const coord_registry_cfg *coord_registry_config(const coord_registry *reg)
{
    return &reg->cfg;
}

coord_worker *coord_registry_find(coord_registry *reg, const char *id)
{
    for (size_t i = 0; i < reg->n; i++)
        if (strcmp(reg->workers[i].rec.id, id) == 0)
            return &reg->workers[i];
    return NULL;
}

coord_worker *coord_registry_find_name(coord_registry *reg, const char *name)
{
    for (size_t i = 0; i < reg->n; i++)
        if (strcmp(reg->workers[i].rec.name, name) == 0)
            return &reg->workers[i];
    return NULL;
}

size_t coord_registry_count(const coord_registry *reg)
{
    return reg->n;
}

coord_worker *coord_registry_at(coord_registry *reg, size_t i)
{
    return i < reg->n ? &reg->workers[i] : NULL;
}

static sc_status set_hardware(coord_worker *w, const coord_worker_rec *req, sc_err *err)
{
    uint8_t *hw = NULL;
    if (req->hardware_len > 0) {
        hw = malloc(req->hardware_len);
        SC_ALLOC_CHECK(hw, err);
        memcpy(hw, req->hardware, req->hardware_len);
    }
    free(w->rec.hardware);
    w->rec.hardware = hw;
    w->rec.hardware_len = req->hardware_len;
    return SC_OK;
}

/* A new zeroed entry at the end, or NULL when out of memory. */
static coord_worker *append(coord_registry *reg)
{
    if (reg->n == reg->cap) {
        size_t cap = reg->cap ? reg->cap * 2 : 16;
        coord_worker *grown = realloc(reg->workers, cap * sizeof *grown);
        if (grown == NULL)
            return NULL;
        reg->workers = grown;
        reg->cap = cap;
    }
    coord_worker *w = &reg->workers[reg->n++];
    memset(w, 0, sizeof *w);
    return w;
}

/* Keeps next_id above every "w-<n>" id seen. */
static void note_id(coord_registry *reg, const char *id)
{
    unsigned long long n;
    if (sscanf(id, "w-%llu", &n) == 1 && n >= reg->next_id)
        reg->next_id = n + 1;
}

sc_status coord_registry_register(coord_registry *reg, const coord_worker_rec *req,
                                  uint64_t now_ns, coord_worker **out, sc_err *err)
{
    *out = NULL;
    if (req->name[0] == '\0')
        return SC_ERRF(err, SC_ERR_INVALID, "a worker must register with a non-empty name");
    coord_worker *w = coord_registry_find_name(reg, req->name);
    if (req->id[0] != '\0') {
        coord_worker *by_id = coord_registry_find(reg, req->id);
        if (by_id != NULL && by_id != w)
            return SC_ERRF(err, SC_ERR_PERMISSION,
                           "worker '%s' claims id %s, which belongs to worker '%s'", req->name,
                           req->id, by_id->rec.name);
    }
    if (w != NULL) {
        /* The same name again: a restart (it presents its id, or its old incarnation is gone)
         * is a re-registration; anything else is a second worker claiming a live name. */
        bool presents_id = req->id[0] != '\0' && strcmp(req->id, w->rec.id) == 0;
        if (!presents_id && w->state != COORD_WORKER_DEAD)
            return SC_ERRF(err, SC_ERR_EXISTS,
                           "a worker named '%s' is already registered and %s (id %s); give this "
                           "one another --name, or stop the other first",
                           req->name, coord_worker_state_name(w->state), w->rec.id);
        SC_CHECK(set_hardware(w, req, err));
        w->rec.epoch++;
    } else {
        w = append(reg);
        if (w == NULL)
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory registering worker '%s'", req->name);
        sc_strfmt(w->rec.id, sizeof w->rec.id, "w-%llu", (unsigned long long)reg->next_id++);
        sc_strlcpy(w->rec.name, req->name, sizeof w->rec.name);
        w->rec.epoch = 1;
        w->rec.registered_unix_ms = sc_clock_unix_ms();
        sc_status rc = set_hardware(w, req, err);
        if (rc != SC_OK) {
            reg->n--;
            return rc;
        }
    }
    sc_strlcpy(w->rec.host, req->host, sizeof w->rec.host);
    sc_strlcpy(w->rec.endpoint, req->endpoint, sizeof w->rec.endpoint);
    w->state = COORD_WORKER_ALIVE;
    w->last_heartbeat_ns = now_ns;
    w->last_heartbeat_unix_ms = sc_clock_unix_ms();
    w->disagree_since_ns = w->repaired_ns = 0;
    w->route[0] = '\0'; /* a new incarnation speaks on a connection of its own */
    *out = w;
    return SC_OK;
}

sc_status coord_registry_restore(coord_registry *reg, const coord_worker_rec *rec, sc_err *err)
{
    if (coord_registry_find(reg, rec->id) != NULL || coord_registry_find_name(reg, rec->name))
        return SC_ERRF(err, SC_ERR_EXISTS, "worker %s ('%s') is already in the registry",
                       rec->id, rec->name);
    coord_worker *w = append(reg);
    if (w == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory restoring worker %s", rec->id);
    w->rec = *rec;
    w->rec.hardware = NULL;
    w->rec.hardware_len = 0;
    sc_status rc = set_hardware(w, rec, err);
    if (rc != SC_OK) {
        reg->n--;
        return rc;
    }
    w->state = COORD_WORKER_DEAD;
    note_id(reg, rec->id);
    return SC_OK;
}

sc_status coord_registry_heartbeat(coord_registry *reg, const char *id, uint64_t epoch,
                                   uint64_t now_ns, coord_worker **out, sc_err *err)
{
    *out = NULL;
    coord_worker *w = coord_registry_find(reg, id);
    if (w == NULL)
        return SC_ERRF(err, SC_ERR_NOT_FOUND, "heartbeat from unknown worker '%s'", id);
    if (epoch != w->rec.epoch)
        return SC_ERRF(err, SC_ERR_PERMISSION,
                       "heartbeat from worker %s with epoch %llu refused: the current epoch is "
                       "%llu (a newer incarnation registered)",
                       id, (unsigned long long)epoch, (unsigned long long)w->rec.epoch);
    if (w->state == COORD_WORKER_DEAD)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "worker %s was declared dead; it must register again", id);
    w->state = COORD_WORKER_ALIVE;
    w->last_heartbeat_ns = now_ns;
    w->last_heartbeat_unix_ms = sc_clock_unix_ms();
    *out = w;
    return SC_OK;
}

size_t coord_registry_sweep(coord_registry *reg, uint64_t now_ns,
                            void (*changed)(void *user, const coord_worker *w,
                                            coord_worker_state old_state),
                            void *user)
{
    size_t changes = 0;
    uint64_t interval_ns = (uint64_t)reg->cfg.heartbeat_interval_ms * 1000000ull;
    for (size_t i = 0; i < reg->n; i++) {
        coord_worker *w = &reg->workers[i];
        if (w->state == COORD_WORKER_DEAD)
            continue;
        uint64_t silent = now_ns > w->last_heartbeat_ns ? now_ns - w->last_heartbeat_ns : 0;
        coord_worker_state next = COORD_WORKER_ALIVE;
        if (silent >= interval_ns * reg->cfg.dead_after)
            next = COORD_WORKER_DEAD;
        else if (silent >= interval_ns * reg->cfg.suspect_after)
            next = COORD_WORKER_SUSPECT;
        if (next != w->state) {
            coord_worker_state old = w->state;
            w->state = next;
            changes++;
            if (changed)
                changed(user, w, old);
        }
    }
    return changes;
}
