/*
 * rt timeline: the measured events of a stage's last iterations (forward, backward, sends,
 * receives, the copies' all-reduce, the optimizer step), kept in a ring so that another thread
 * (the Worker service's GetTimeline) can read them while training goes on.
 *
 * One thread records (the runner's caller): rt_timeline_begin opens an iteration, rt_timeline_add
 * appends an event to it without a lock or an allocation (the room is sized at creation; events
 * past it are counted as dropped), rt_timeline_commit publishes it into the ring under the
 * timeline's lock (one lock per iteration). Any thread reads with rt_timeline_snapshot.
 * Times are CLOCK_MONOTONIC nanoseconds (sc_clock_now_ns) of the recording process: a reader
 * on another host aligns them with the clock sample GetTimeline sends along.
 * Does not interpret events: it never orders, merges or checks them.
 * Invariant: the ring holds whole committed iterations only, oldest overwritten first; an
 * iteration that is begun but never committed (a failed step) is never seen by a reader.
 */
#ifndef RT_TIMELINE_H
#define RT_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

/* Iterations a runner keeps (GetTimeline's most): many more than a trace's default window of
 * 8, so that workers asked at about the same time still hold iterations in common when a fast
 * job steps every few hundred microseconds. */
#define RT_TIMELINE_ITERATIONS 64

/* The kinds of event; the values are those of the wire's TimelineEventKind. */
typedef enum {
    RT_TL_FORWARD = 1,
    RT_TL_BACKWARD = 2,
    RT_TL_SEND_ACTIVATION = 3,
    RT_TL_RECV_ACTIVATION = 4,
    RT_TL_SEND_GRADIENT = 5,
    RT_TL_RECV_GRADIENT = 6,
    RT_TL_ALLREDUCE = 7,
    RT_TL_OPTIMIZER = 8,
    RT_TL_WEIGHT_GRADIENT = 9, /* zb1's W; its B is recorded as RT_TL_BACKWARD */
} rt_tl_kind;

/* Short name of a kind ("forward", "send_activation", ...); "?" outside the enum. */
const char *rt_tl_kind_name(int kind);

typedef struct {
    uint64_t iteration; /* the step of the rt_runner_step (or flush) call that ran it */
    uint64_t step;      /* the step of its micro-batch (pipedream: may be an earlier one) */
    uint64_t start_ns, end_ns;
    int32_t mb;   /* micro-batch (backward cut: entry), -1 for the all-reduce and optimizer */
    uint8_t kind; /* rt_tl_kind */
} rt_tl_event;

typedef struct rt_timeline rt_timeline;

/* A ring of `entries` iterations (each rt_timeline_begin .. commit is one entry) of at most
 * `events_per_entry` events each, allocated once here. SC_ERR_INVALID for a count < 1. */
sc_status rt_timeline_new(rt_timeline **out, int entries, int events_per_entry, sc_err *err);
void rt_timeline_destroy(rt_timeline **t);

/* Recording thread only. Opens an iteration (dropping one begun and not committed). */
void rt_timeline_begin(rt_timeline *t, uint64_t iteration);
/* Recording thread only: appends an event to the open iteration; nothing without one. */
void rt_timeline_add(rt_timeline *t, rt_tl_kind kind, int mb, uint64_t step, uint64_t start_ns,
                     uint64_t end_ns);
/* Recording thread only: publishes the open iteration into the ring (takes the lock). */
void rt_timeline_commit(rt_timeline *t);

/* What rt_timeline_snapshot found. */
typedef struct {
    int iterations;            /* distinct iterations in the events */
    uint64_t newest_iteration; /* the newest committed one (0: none) */
    uint64_t dropped;          /* events that did not fit their entry since creation */
} rt_tl_snapshot_info;

/* Any thread: the events of the newest committed iterations numbered at most `last_iteration`
 * (0: any), oldest first, covering at most `iterations` (< 1: every kept one) distinct
 * iteration numbers (a pipedream flush is an entry of its own that shares its iteration's
 * number). *events is a heap array (caller frees; NULL when none), *n its length; `info` (may
 * be NULL) gets the figures above. */
sc_status rt_timeline_snapshot(rt_timeline *t, int iterations, uint64_t last_iteration,
                               rt_tl_event **events, size_t *n, rt_tl_snapshot_info *info,
                               sc_err *err);

#endif /* RT_TIMELINE_H */
