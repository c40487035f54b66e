/*
 * A job's training series (stagecraft status JOB --history, /api/jobs/JOB/history, the
 * dashboard's curves): one point per step of the last stage's first copy, kept in the store
 * (store.h) so that it survives a restart of the coordinator.
 *
 * Bounded: a job keeps at most COORD_HISTORY_MAX points. When a new point makes it more, the
 * series is thinned (coord_history_thin): the first and the newest points stay, and every other
 * one between them goes. Recording then goes on at every step, so the newest steps are always
 * dense and older ones thin out, each thinning halving them again.
 * Not here: SQL (store.c), deciding which report makes a point (jobs_history.c).
 */
#ifndef COORD_HISTORY_H
#define COORD_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define COORD_HISTORY_MAX 1000

typedef struct {
    uint64_t step;
    double loss; /* when has_loss */
    bool has_loss;
    double samples_per_s; /* the job's throughput then, when samples_per_s_known */
    bool samples_per_s_known;
    double iteration_s;
    int64_t at_unix_ms;
} coord_history_point;

/* Thins pts[n] (by step, oldest first) in place: keeps pts[0], pts[n-1] and every point of an
 * even index between; returns how many are kept (n when n <= 2). */
size_t coord_history_thin(coord_history_point *pts, size_t n);

#endif /* COORD_HISTORY_H */
