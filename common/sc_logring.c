/*
 * The log ring (sc_logring.h): `capacity` slots, the line of sequence number s in slot
 * (s - 1) % capacity. Invariant: the ring holds lines newest - held + 1 .. newest, where
 * held = min(newest, capacity); a slot whose copy failed holds NULL and reads as an empty line.
 */
#include "common/sc_logring.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct sc_logring {
    pthread_mutex_t lock; /* guards everything below */
    char **slot;          /* [capacity] */
    size_t capacity;
    uint64_t newest; /* sequence number of the newest line (0: none yet) */
};

sc_status sc_logring_new(sc_logring **out, size_t capacity, sc_err *err)
{
    *out = NULL;
    if (capacity == 0)
        return SC_ERRF(err, SC_ERR_INVALID, "a log ring needs room for at least one line");
    sc_logring *r = calloc(1, sizeof *r);
    if (r == NULL || (r->slot = calloc(capacity, sizeof *r->slot)) == NULL) {
        free(r);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for a log ring of %zu lines", capacity);
    }
    r->capacity = capacity;
    pthread_mutex_init(&r->lock, NULL);
    *out = r;
    return SC_OK;
}

void sc_logring_destroy(sc_logring **r)
{
    if (r == NULL || *r == NULL)
        return;
    for (size_t i = 0; i < (*r)->capacity; i++)
        free((*r)->slot[i]);
    free((*r)->slot);
    pthread_mutex_destroy(&(*r)->lock);
    free(*r);
    *r = NULL;
}

void sc_logring_push(sc_logring *r, const char *line)
{
    size_t len = strlen(line);
    if (len > 0 && line[len - 1] == '\n')
        len--;
    if (len > SC_LOGRING_LINE_MAX - 1)
        len = SC_LOGRING_LINE_MAX - 1;
    /* copied before the lock: the logger's callers wait only for the slot swap */
    char *copy = malloc(len + 1);
    if (copy != NULL) {
        memcpy(copy, line, len);
        copy[len] = '\0';
    }
    pthread_mutex_lock(&r->lock);
    size_t i = (size_t)(r->newest % r->capacity);
    char *old = r->slot[i];
    r->slot[i] = copy;
    r->newest++;
    pthread_mutex_unlock(&r->lock);
    free(old);
}

sc_status sc_logring_read(sc_logring *r, uint64_t after_seq, size_t max, sc_logring_line **out,
                          size_t *n, uint64_t *newest_seq, sc_err *err)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&r->lock);
    uint64_t newest = r->newest;
    uint64_t held = newest < r->capacity ? newest : r->capacity;
    uint64_t first = newest - held + 1; /* the oldest kept */
    if (after_seq > newest)
        after_seq = 0;
    if (after_seq + 1 > first)
        first = after_seq + 1;
    uint64_t count = newest + 1 - first;
    if (max > 0 && count > max) { /* the newest `max` of them */
        first += count - max;
        count = max;
    }
    sc_logring_line *lines = calloc(count ? count : 1, sizeof *lines);
    bool ok = lines != NULL;
    for (uint64_t k = 0; ok && k < count; k++) {
        const char *t = r->slot[(size_t)((first + k - 1) % r->capacity)];
        lines[k].seq = first + k;
        lines[k].text = strdup(t != NULL ? t : "");
        ok = lines[k].text != NULL;
    }
    pthread_mutex_unlock(&r->lock);
    if (!ok) {
        sc_logring_lines_free(&lines, count);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory copying %llu log lines",
                       (unsigned long long)count);
    }
    *out = lines;
    *n = (size_t)count;
    if (newest_seq != NULL)
        *newest_seq = newest;
    return SC_OK;
}

void sc_logring_lines_free(sc_logring_line **lines, size_t n)
{
    if (lines == NULL || *lines == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free((*lines)[i].text);
    free(*lines);
    *lines = NULL;
}
