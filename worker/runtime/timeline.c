/*
 * rt timeline (see timeline.h): a ring of committed iterations plus one open iteration that
 * only the recording thread touches. Not here: what a runner records (runner_exec.c,
 * runner_pipedream.c) and the wire form (worker/service.c).
 * Invariant: `lock` guards ring[], ring_n, ring_next and dropped; `open` and its events belong
 * to the recording thread, which alone calls begin, add and commit.
 */
#include "worker/runtime/timeline.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t iteration;
    int n;
    rt_tl_event *ev; /* [cap] */
} tl_entry;

struct rt_timeline {
    int entries, cap;
    tl_entry open;   /* recording thread only */
    bool open_valid; /* recording thread only */
    uint64_t open_dropped;
    pthread_mutex_t lock; /* guards everything below */
    tl_entry *ring;       /* [entries] */
    int ring_n, ring_next;
    uint64_t dropped;
};

const char *rt_tl_kind_name(int kind)
{
    static const char *const names[] = {"?",
                                        "forward",
                                        "backward",
                                        "send_activation",
                                        "recv_activation",
                                        "send_gradient",
                                        "recv_gradient",
                                        "allreduce",
                                        "optimizer",
                                        "weight_gradient"};
    return kind >= RT_TL_FORWARD && kind <= RT_TL_WEIGHT_GRADIENT ? names[kind] : names[0];
}

sc_status rt_timeline_new(rt_timeline **out, int entries, int events_per_entry, sc_err *err)
{
    *out = NULL;
    if (entries < 1 || events_per_entry < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "timeline: %d entries of %d events; both must be >= 1",
                       entries, events_per_entry);
    rt_timeline *t = calloc(1, sizeof *t);
    SC_ALLOC_CHECK(t, err);
    t->entries = entries;
    t->cap = events_per_entry;
    pthread_mutex_init(&t->lock, NULL);
    t->ring = calloc((size_t)entries, sizeof *t->ring);
    t->open.ev = calloc((size_t)events_per_entry, sizeof *t->open.ev);
    bool ok = t->ring != NULL && t->open.ev != NULL;
    for (int i = 0; ok && i < entries; i++) {
        t->ring[i].ev = calloc((size_t)events_per_entry, sizeof *t->ring[i].ev);
        ok = t->ring[i].ev != NULL;
    }
    if (!ok) {
        rt_timeline_destroy(&t);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory allocating the timeline");
    }
    *out = t;
    return SC_OK;
}

void rt_timeline_destroy(rt_timeline **tp)
{
    if (tp == NULL || *tp == NULL)
        return;
    rt_timeline *t = *tp;
    for (int i = 0; t->ring != NULL && i < t->entries; i++)
        free(t->ring[i].ev);
    free(t->ring);
    free(t->open.ev);
    pthread_mutex_destroy(&t->lock);
    free(t);
    *tp = NULL;
}

void rt_timeline_begin(rt_timeline *t, uint64_t iteration)
{
    t->open.iteration = iteration;
    t->open.n = 0;
    t->open_valid = true;
}

void rt_timeline_add(rt_timeline *t, rt_tl_kind kind, int mb, uint64_t step, uint64_t start_ns,
                     uint64_t end_ns)
{
    if (!t->open_valid)
        return;
    if (t->open.n == t->cap) {
        t->open_dropped++;
        return;
    }
    rt_tl_event *e = &t->open.ev[t->open.n++];
    e->iteration = t->open.iteration;
    e->step = step;
    e->start_ns = start_ns;
    e->end_ns = end_ns;
    e->mb = mb;
    e->kind = (uint8_t)kind;
}

void rt_timeline_commit(rt_timeline *t)
{
    if (!t->open_valid)
        return;
    pthread_mutex_lock(&t->lock);
    /* swap the open buffer into the ring: the oldest entry's buffer becomes the next open one */
    tl_entry *slot = &t->ring[t->ring_next];
    tl_entry old = *slot;
    *slot = t->open;
    t->open = old;
    t->ring_next = (t->ring_next + 1) % t->entries;
    if (t->ring_n < t->entries)
        t->ring_n++;
    t->dropped += t->open_dropped;
    pthread_mutex_unlock(&t->lock);
    t->open_dropped = 0;
    t->open.n = 0;
    t->open_valid = false;
}

sc_status rt_timeline_snapshot(rt_timeline *t, int iterations, uint64_t last_iteration,
                               rt_tl_event **events, size_t *n, rt_tl_snapshot_info *info,
                               sc_err *err)
{
    *events = NULL;
    *n = 0;
    rt_tl_snapshot_info z = {0, 0, 0};
    if (iterations < 1)
        iterations = t->entries;
    pthread_mutex_lock(&t->lock);
    /* k-th newest entry: k = 1 .. ring_n */
#define TL_NEWEST(k) (&t->ring[(t->ring_next - (k) + 2 * t->entries) % t->entries])
    if (t->ring_n > 0)
        z.newest_iteration = TL_NEWEST(1)->iteration;
    z.dropped = t->dropped;
    /* walk back from the newest entry at or before last_iteration while it adds at most
     * `iterations` distinct numbers: entries newest_k .. oldest_k are taken */
    int newest_k = 0, oldest_k = 0;
    size_t total = 0;
    uint64_t last = 0;
    for (int k = 1; k <= t->ring_n; k++) {
        const tl_entry *e = TL_NEWEST(k);
        if (last_iteration != 0 && e->iteration > last_iteration)
            continue;
        if (z.iterations == 0 || e->iteration != last) {
            if (z.iterations == iterations)
                break;
            z.iterations++;
            last = e->iteration;
        }
        if (newest_k == 0)
            newest_k = k;
        oldest_k = k;
        total += (size_t)e->n;
    }
    rt_tl_event *out = total > 0 ? malloc(total * sizeof *out) : NULL;
    if (total > 0 && out == NULL) {
        pthread_mutex_unlock(&t->lock);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory copying the timeline");
    }
    size_t at = 0;
    for (int k = oldest_k; k >= newest_k && k > 0; k--) {
        const tl_entry *e = TL_NEWEST(k);
        if (last_iteration != 0 && e->iteration > last_iteration)
            continue;
        memcpy(out + at, e->ev, (size_t)e->n * sizeof *out);
        at += (size_t)e->n;
    }
#undef TL_NEWEST
    pthread_mutex_unlock(&t->lock);
    *events = out;
    *n = total;
    if (info != NULL)
        *info = z;
    return SC_OK;
}
