/*
 * A bounded ring of a process's recent log lines, so that a daemon can hand them to whoever asks
 * (a worker answers Worker.ReadLog from it; `stagecraft logs` prints them).
 *
 * Each pushed line gets the next sequence number (1, 2, ...); the ring keeps the newest
 * `capacity` lines and drops the oldest, so memory stays at most capacity * SC_LOGRING_LINE_MAX
 * bytes whatever the process logs. A longer line is kept cut to SC_LOGRING_LINE_MAX - 1 bytes.
 * Not here: formatting or levels (sc_log.h), shipping lines anywhere (stderr stays the log).
 * Thread-safe: every call takes the ring's own lock; a push never blocks on a reader for longer
 * than a copy of the lines it asked for.
 */
#ifndef SC_LOGRING_H
#define SC_LOGRING_H

#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

#define SC_LOGRING_LINE_MAX 1024

typedef struct sc_logring sc_logring;

typedef struct {
    uint64_t seq; /* 1 for the first line the ring was given */
    char *text;   /* owned; without its newline */
} sc_logring_line;

/* A ring keeping the newest `capacity` lines (at least 1). */
sc_status sc_logring_new(sc_logring **out, size_t capacity, sc_err *err);

/* Frees the ring and its lines, sets *r to NULL; accepts NULL. No call may be in flight. */
void sc_logring_destroy(sc_logring **r);

/* Copies `line` (a trailing newline is dropped) as the newest line. Out of memory: the line is
 * lost and counted as such in its sequence number, never an error for the logger. */
void sc_logring_push(sc_logring *r, const char *line);

/* The newest lines after sequence number `after_seq` (0: from the oldest kept), at most `max`
 * of them (0: all kept), oldest first, into *out (free with sc_logring_lines_free); *newest_seq
 * gets the newest sequence number pushed (0: none yet). An `after_seq` beyond it (the caller's
 * cursor is from an earlier process) reads as 0. */
sc_status sc_logring_read(sc_logring *r, uint64_t after_seq, size_t max, sc_logring_line **out,
                          size_t *n, uint64_t *newest_seq, sc_err *err);

void sc_logring_lines_free(sc_logring_line **lines, size_t n);

#endif /* SC_LOGRING_H */
