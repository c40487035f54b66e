/*
 * The speed model of each job: per worker, the profile it measured when the job was profiled,
 * its measured link, and a scale that iteration reports have since put on its times (2.0: its
 * blocks now take twice as long as profiled). Re-plans (rebalancing, and any later drive of the
 * job) use the scaled profiles instead of profiling again.
 *
 * All functions run under c->lock (speeds live in struct coord); nothing here plans or measures.
 */
#ifndef COORD_SPEEDS_H
#define COORD_SPEEDS_H

#include <stdbool.h>
#include <stddef.h>

#include "coordinator/store.h"

typedef struct coord_speeds coord_speeds;

/* Frees every job's model (the coordinator stops). */
void coord_speeds_free(coord_speeds **all);

/* Keeps the freshly measured profile and link of workers ids[i] for job `job_id`; their scales
 * start again at 1 (the profile is the worker's speed now). */
void coord_speeds_keep(coord_speeds **all, const char *job_id, const char *const *ids,
                       const char *const *profiles, const double *links, size_t n);

/* A copy of worker `id`'s profile for job `job_id` with every time multiplied by its scale
 * (heap string, caller frees), and its link; NULL when the job has no profile of that worker. */
char *coord_speeds_profile(const coord_speeds *all, const char *job_id, const char *id,
                           double *link);

/* Whether job `job_id` has a profile of worker `id`. */
bool coord_speeds_known(const coord_speeds *all, const char *job_id, const char *id);

/* The time of one micro-batch through every block of a profile (forward + backward), 0 when it
 * cannot be read: how two profiles of one model on one worker compare. */
double coord_profile_total_s(const char *profile_json);

/* Worker `id`'s scale in job `job_id` (1 when unknown). */
double coord_speeds_scale(const coord_speeds *all, const char *job_id, const char *id);

/* Sets worker `id`'s scale in job `job_id` (its times are `scale` times its profile's). */
void coord_speeds_set_scale(coord_speeds *all, const char *job_id, const char *id, double scale);

/* One sample's compute through blocks [first, last] on worker `id` by its profile as measured
 * (unscaled; forward + backward, per micro-batch over the micro-batch size), 0 when unknown. */
double coord_speeds_work_s(const coord_speeds *all, const char *job_id, const char *id, int first,
                           int last);

/* What iterations measured of worker `id`: busy seconds per second of profiled work. The first
 * figure of a profile is its reference (*ref, set when it had none); a fresh profile
 * (coord_speeds_keep) clears it. Returns the reference. */
double coord_speeds_reference(coord_speeds *all, const char *job_id, const char *id, double ratio);

/* A rebalance of job `job_id` was decided by itself (not asked for): moves in a row (each
 * within MOVE_WINDOW_S of the one before) raise the gain the next one needs. */
void coord_speeds_note_move(coord_speeds *all, const char *job_id);

/* The predicted gain job `job_id`'s next rebalance needs: `base`, doubled for each move of the
 * current row after its first, at most 0.8. */
double coord_speeds_gain_needed(const coord_speeds *all, const char *job_id, double base);

/* The moves' measured cost: coord_speeds_paused when every stage of job `job_id` has paused for
 * a move, coord_speeds_moved at the first step after it; the seconds between are training time
 * the move took. */
void coord_speeds_paused(coord_speeds *all, const char *job_id);
void coord_speeds_moved(coord_speeds *all, const char *job_id);

/* The last move's measured cost in seconds (0: no move measured yet). */
double coord_speeds_move_cost(const coord_speeds *all, const char *job_id);

/* Forgets job `job_id`'s model (it ended). */
void coord_speeds_drop(coord_speeds **all, const char *job_id);

/* `profile_json` with every number under a key ending in "_s" (forward_s, backward_s, ...)
 * multiplied by `factor` (heap string, caller frees; NULL when it is not JSON). */
char *coord_profile_scaled(const char *profile_json, double factor);

#endif /* COORD_SPEEDS_H */
