/*
 * rt transport, local backend: stages in one process. Each transport owns an inbox (a queue of
 * messages with a condition variable) registered by name in a process-wide registry; connecting
 * looks the neighbours' inboxes up and keeps a reference to them; a send copies the payload into
 * the neighbour's queue.
 * With device_payloads (transport.c, transport_devmem.c) a message's payload is a device
 * buffer: stages on GPUs exchange activations device to device.
 * Invariant: an inbox is freed only when its owner and every connected neighbour have dropped it
 * (reference count under `g_lock`), so a send to a destroyed peer fails cleanly with
 * SC_ERR_UNAVAILABLE instead of touching freed memory.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sc_util.h"
#include "worker/transport/transport_impl.h"

typedef struct inbox {
    struct inbox *next_in_registry;
    char name[RT_ENDPOINT_MAX];
    int refs;    /* owner + connected neighbours; under g_lock */
    bool closed; /* owner destroyed; under g_lock */
    pthread_cond_t cond;
    rt_msg *head, *tail; /* under g_lock */
} inbox;

/* One lock for the registry and all queues: local pipelines are small and this keeps the
 * reference counting obviously right. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static inbox *g_registry;      /* under g_lock */
static unsigned long g_serial; /* under g_lock: names for "local://" */

typedef struct {
    inbox *own, *prev, *next;
} local_impl;

static inbox *registry_find(const char *name)
{
    for (inbox *b = g_registry; b != NULL; b = b->next_in_registry)
        if (!b->closed && strcmp(b->name, name) == 0)
            return b;
    return NULL;
}

/* Drops one reference; frees the inbox (and its queued messages) on the last. Under g_lock. */
static void inbox_unref(inbox *b)
{
    if (b == NULL || --b->refs > 0)
        return;
    for (inbox **pp = &g_registry; *pp != NULL; pp = &(*pp)->next_in_registry) {
        if (*pp == b) {
            *pp = b->next_in_registry;
            break;
        }
    }
    while (b->head != NULL) {
        rt_msg *m = b->head;
        b->head = m->next;
        rt_msg_free(m);
    }
    pthread_cond_destroy(&b->cond);
    free(b);
}

static sc_status lt_bind(rt_transport *t, const char *endpoint, sc_err *err)
{
    if (strncmp(endpoint, "local://", 8) != 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "transport endpoint \"%s\": expected local://NAME (or local:// for a "
                       "generated name)",
                       endpoint);
    if (strlen(endpoint) >= RT_ENDPOINT_MAX - 24)
        return SC_ERRF(err, SC_ERR_INVALID, "transport endpoint \"%s\" is too long", endpoint);
    local_impl *l = calloc(1, sizeof *l);
    SC_ALLOC_CHECK(l, err);
    t->impl = l;
    inbox *b = calloc(1, sizeof *b);
    SC_ALLOC_CHECK(b, err);
    pthread_cond_init(&b->cond, NULL);
    b->refs = 1;
    pthread_mutex_lock(&g_lock);
    if (endpoint[8] == '\0')
        snprintf(b->name, sizeof b->name, "local://auto-%lu", ++g_serial);
    else
        sc_strlcpy(b->name, endpoint, sizeof b->name);
    if (registry_find(b->name) != NULL) {
        pthread_mutex_unlock(&g_lock);
        pthread_cond_destroy(&b->cond);
        free(b);
        return SC_ERRF(err, SC_ERR_EXISTS, "transport endpoint %s is already bound", endpoint);
    }
    b->next_in_registry = g_registry;
    g_registry = b;
    l->own = b;
    pthread_mutex_unlock(&g_lock);
    sc_strlcpy(t->endpoint, b->name, sizeof t->endpoint);
    return SC_OK;
}

static sc_status lt_connect(rt_transport *t, const char *prev, const char *next, sc_err *err)
{
    local_impl *l = t->impl;
    sc_status rc = SC_OK;
    pthread_mutex_lock(&g_lock);
    inbox *p = prev != NULL ? registry_find(prev) : NULL;
    inbox *n = next != NULL ? registry_find(next) : NULL;
    if (prev != NULL && p == NULL)
        rc = SC_ERRF(err, SC_ERR_NOT_FOUND, "transport: no local endpoint %s is bound", prev);
    else if (next != NULL && n == NULL)
        rc = SC_ERRF(err, SC_ERR_NOT_FOUND, "transport: no local endpoint %s is bound", next);
    if (rc == SC_OK) {
        inbox_unref(l->prev);
        inbox_unref(l->next);
        l->prev = p;
        l->next = n;
        if (p != NULL)
            p->refs++;
        if (n != NULL)
            n->refs++;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static sc_status lt_send(rt_transport *t, rt_msg *m, bool to_next, sc_err *err)
{
    local_impl *l = t->impl;
    inbox *b = to_next ? l->next : l->prev;
    pthread_mutex_lock(&g_lock);
    if (b->closed) {
        pthread_mutex_unlock(&g_lock);
        rt_msg_free(m);
        return SC_ERRF(err, SC_ERR_UNAVAILABLE, "transport %s: the %s stage (%s) is gone",
                       t->endpoint, to_next ? "next" : "previous", b->name);
    }
    m->next = NULL;
    if (b->tail != NULL)
        b->tail->next = m;
    else
        b->head = m;
    b->tail = m;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&g_lock);
    return SC_OK;
}

static sc_status lt_poll(rt_transport *t, int wait_ms, bool from_next, rt_msg **out, sc_err *err)
{
    local_impl *l = t->impl;
    inbox *b = l->own;
    inbox *peer = from_next ? l->next : l->prev;
    *out = NULL;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    sc_status rc = SC_OK;
    pthread_mutex_lock(&g_lock);
    for (;;) {
        if (b->head != NULL) {
            rt_msg *m = b->head;
            b->head = m->next;
            if (b->head == NULL)
                b->tail = NULL;
            m->next = NULL;
            *out = m;
            break;
        }
        if (peer != NULL && peer->closed) {
            rc = SC_ERRF(err, SC_ERR_UNAVAILABLE, "transport %s: the %s stage (%s) is gone",
                         t->endpoint, from_next ? "next" : "previous", peer->name);
            break;
        }
        if (atomic_load(&t->aborted))
            break;
        if (pthread_cond_timedwait(&b->cond, &g_lock, &until) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static void lt_wake(rt_transport *t)
{
    local_impl *l = t->impl;
    if (l == NULL || l->own == NULL)
        return;
    pthread_mutex_lock(&g_lock);
    pthread_cond_broadcast(&l->own->cond);
    pthread_mutex_unlock(&g_lock);
}

static void lt_destroy(rt_transport *t)
{
    local_impl *l = t->impl;
    if (l == NULL)
        return;
    pthread_mutex_lock(&g_lock);
    if (l->own != NULL) {
        l->own->closed = true;
        /* Wake neighbours blocked on us so they see we are gone now, not at their timeout. */
        if (l->prev != NULL)
            pthread_cond_broadcast(&l->prev->cond);
        if (l->next != NULL)
            pthread_cond_broadcast(&l->next->cond);
    }
    inbox_unref(l->prev);
    inbox_unref(l->next);
    inbox_unref(l->own);
    pthread_mutex_unlock(&g_lock);
    free(l);
    t->impl = NULL;
}

const rt_transport_ops rt_transport_local_ops = {
    .bind = lt_bind,
    .connect = lt_connect,
    .send = lt_send,
    .poll = lt_poll,
    .wake = lt_wake,
    .destroy = lt_destroy,
};
