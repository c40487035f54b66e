/*
 * coord profile cache (see profile_cache.h): a small array searched in full; it holds a few dozen
 * entries and is looked up once per worker per job, so nothing faster is needed.
 */
#include "coordinator/profile_cache.h"

#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/store.h"

typedef struct {
    char worker_id[COORD_ID_MAX];
    uint64_t epoch;
    uint64_t hardware_hash; /* FNV-1a of the packed report */
    size_t hardware_len;
    char *request;
    char *profile_json;
    char job_id[COORD_ID_MAX];
    uint64_t used; /* the cache's tick when last got or put */
} entry;

struct coord_profile_cache {
    entry e[COORD_PROFILE_CACHE_MAX];
    size_t n;
    uint64_t tick;
};

static uint64_t fnv1a(const void *p, size_t len)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static entry *find(coord_profile_cache *pc, const coord_profile_key *k)
{
    uint64_t hh = fnv1a(k->hardware, k->hardware_len);
    for (size_t i = 0; i < pc->n; i++) {
        entry *e = &pc->e[i];
        if (strcmp(e->worker_id, k->worker_id) == 0 && e->epoch == k->epoch &&
            e->hardware_hash == hh && e->hardware_len == k->hardware_len &&
            strcmp(e->request, k->request) == 0)
            return e;
    }
    return NULL;
}

static void entry_clear(entry *e)
{
    free(e->request);
    free(e->profile_json);
    memset(e, 0, sizeof *e);
}

sc_status coord_profile_cache_new(coord_profile_cache **out, sc_err *err)
{
    *out = calloc(1, sizeof **out);
    SC_ALLOC_CHECK(*out, err);
    return SC_OK;
}

void coord_profile_cache_destroy(coord_profile_cache **pc)
{
    if (pc == NULL || *pc == NULL)
        return;
    for (size_t i = 0; i < (*pc)->n; i++)
        entry_clear(&(*pc)->e[i]);
    free(*pc);
    *pc = NULL;
}

char *coord_profile_cache_get(coord_profile_cache *pc, const coord_profile_key *key, char *from_job,
                              size_t size)
{
    entry *e = pc != NULL ? find(pc, key) : NULL;
    if (e == NULL)
        return NULL;
    e->used = ++pc->tick;
    if (from_job != NULL)
        sc_strlcpy(from_job, e->job_id, size);
    return strdup(e->profile_json);
}

void coord_profile_cache_put(coord_profile_cache *pc, const coord_profile_key *key,
                             const char *job_id, const char *profile_json)
{
    if (pc == NULL || profile_json == NULL)
        return;
    char *request = strdup(key->request), *profile = strdup(profile_json);
    if (request == NULL || profile == NULL) {
        free(request);
        free(profile);
        return;
    }
    entry *e = find(pc, key);
    if (e == NULL && pc->n < COORD_PROFILE_CACHE_MAX)
        e = &pc->e[pc->n++];
    if (e == NULL) { /* full: the least recently used goes */
        e = &pc->e[0];
        for (size_t i = 1; i < pc->n; i++)
            if (pc->e[i].used < e->used)
                e = &pc->e[i];
    }
    entry_clear(e);
    sc_strlcpy(e->worker_id, key->worker_id, sizeof e->worker_id);
    e->epoch = key->epoch;
    e->hardware_hash = fnv1a(key->hardware, key->hardware_len);
    e->hardware_len = key->hardware_len;
    e->request = request;
    e->profile_json = profile;
    sc_strlcpy(e->job_id, job_id, sizeof e->job_id);
    e->used = ++pc->tick;
}
