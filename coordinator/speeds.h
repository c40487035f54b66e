/*
 * The speed model of each job: per worker, the profile it measured when the job was profiled,
 * its measured link, and a scale that iteration reports have since put on its times (2.0: its
 * blocks now take twice as long as profiled); per link between two of its workers, the speed
 * its transfers measure as training runs (below). Re-plans (rebalancing, and any later drive of
 * the job) use the scaled profiles and links instead of profiling again.
 *
 * All functions run under c->lock (speeds live in struct coord); nothing here plans or measures.
 */
#ifndef COORD_SPEEDS_H
#define COORD_SPEEDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "coordinator/store.h"

typedef struct coord_speeds coord_speeds;

/* Frees every job's model (the coordinator stops). */
void coord_speeds_free(coord_speeds **all);

/* Keeps the freshly measured profile and link of workers ids[i] for job `job_id`; their scales
 * start again at 1 (the profile is the worker's speed now), and so do the measured links from
 * and to them (the probe is their link now) and their all-reduce figures. */
void coord_speeds_keep(coord_speeds **all, const char *job_id, const char *const *ids,
                       const char *const *profiles, const double *links, size_t n);

/* A copy of worker `id`'s profile for job `job_id` with every time multiplied by its scale
 * (heap string, caller frees), and its link: the probed one times the adopted link factor
 * (coord_speeds_link_factor); NULL when the job has no profile of that worker. */
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

/* Worker `id`'s CPU quota as its latest report said it (fraction of its threads' speed over
 * period_s; fraction 0: none), which a re-plan uses instead of the one it registered with: a
 * container's limit can change while the job runs. */
void coord_speeds_set_quota(coord_speeds *all, const char *job_id, const char *id, double fraction,
                            double period_s);

/* The quota of coord_speeds_set_quota; false when no report said one. */
bool coord_speeds_quota(const coord_speeds *all, const char *job_id, const char *id,
                        double *fraction, double *period_s);

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

/* ---- links: measured transfers between the job's workers ----
 *
 * A link is one direction between two workers (activations from stage s to s+1 travel on one,
 * the gradients back on another). Workers report, per step, the fastest message from each
 * neighbour among those that arrived while they waited (IterationReport.links): its bytes and
 * its delay, the receiver's monotonic clock at arrival minus the sender's at send. Where both
 * clocks are one (the workers report the same clock_id: one kernel) that is the transit; across
 * hosts the model removes the clocks' offset, each worker's estimated from its control
 * messages' send stamps against their arrival here (the largest stamp - arrival over the last
 * CLOCK_WINDOW_S: the offset less the least one-way delay, which both workers' estimates share
 * roughly). A link's speed is bytes over transit (latency included: the effective speed of
 * messages of that size, what the transfers of the plan take), smoothed as seconds per byte: the
 * median of its last LINK_MEDIAN samples into an EWMA (LINK_ALPHA), so that a single late
 * message moves nothing and a lasting change shows from its third sample (between capped
 * workers the least of them: a throttled end only adds to a transit). Its reference is its
 * smoothed figure after its first LINK_BASE_N samples in the job: the speed the running plan's
 * transfers were seen to take; what a re-plan assumes of a worker's link to the others is its
 * probed link (link_probe.h) times the least ratio of its outgoing links' adopted figure to their
 * reference. */

/* One control message of worker `id` in job `job_id`: it stamped it sent_ns on its clock
 * `clock_id` (its kernel's boot id; "" unknown), and it arrived at received_ns here. */
void coord_speeds_clock(coord_speeds *all, const char *job_id, const char *id, const char *clock_id,
                        uint64_t sent_ns, uint64_t received_ns);

/* The transit of a message of worker `from` that worker `to` measured as `delay_s` (its arrival
 * on to's clock minus its send stamp on from's): delay_s itself when they share a clock, else
 * corrected by the clocks' estimated offsets. False when no estimate of either clock exists. */
bool coord_speeds_transit(const coord_speeds *all, const char *job_id, const char *from,
                          const char *to, double delay_s, double *transit_s);

/* One sample of link from -> to: a message of `bytes` took `transit_s`; `messages` crossed it
 * in the step; `capped`: an end runs under a CPU quota, so a transit may hold the time it sat
 * throttled (the least of the last samples counts, not their median). A transit <= 0 (clocks
 * estimated too far apart) is no sample. */
void coord_speeds_link_sample(coord_speeds *all, const char *job_id, const char *from,
                              const char *to, double bytes, double transit_s, unsigned messages,
                              bool capped);

typedef struct {
    char from[COORD_ID_MAX], to[COORD_ID_MAX];
    double measured;  /* smoothed bytes/s now */
    double expected;  /* bytes/s the plan assumes: the reference, or the figure a re-plan adopted */
    double reference; /* bytes/s after its first LINK_BASE_N samples (0: not yet) */
    double bytes;     /* payload of its last sample's message */
    unsigned messages; /* messages per step, as last reported */
    unsigned samples;
} coord_link_speed;

/* Job `job_id`'s links with a reference (at most `max`); returns their count. */
size_t coord_speeds_links(const coord_speeds *all, const char *job_id, coord_link_speed *out,
                          size_t max);

/* The factor on worker `id`'s probed link: the least ratio, over its outgoing links with a
 * reference, of their figure (`measured`: now; else the adopted one) to their reference
 * (1 without any). */
double coord_speeds_link_factor(const coord_speeds *all, const char *job_id, const char *id,
                                bool measured);

/* A re-plan took the links' measured figures: those more than `change` off their reference
 * become what the plan expects; the others expect their reference again. */
void coord_speeds_links_adopt(coord_speeds *all, const char *job_id, double change);

/* The measured links from and to worker `id` start again (no reference, nothing adopted). */
void coord_speeds_links_restart(coord_speeds *all, const char *job_id, const char *id);

/* A fresh probe of worker `id`'s link (bytes/s > 0): it replaces the probed figure and the
 * measured links from and to the worker start again (coord_speeds_keep's reset, profile kept). */
void coord_speeds_set_link(coord_speeds *all, const char *job_id, const char *id, double link);

/* Whether worker `id`'s link is under suspicion in job `job_id`: its probe more than `change`
 * below its first one in the job, or a link from or to it adopted that far below its
 * reference. Such a worker is probed again while it
 * trains: a slow link between two workers may be either one's, and only their probes tell which,
 * and when it is fast again. */
bool coord_speeds_link_suspect(const coord_speeds *all, const char *job_id, const char *id,
                               double change);

/* ---- the copies' all-reduce ----
 *
 * A stage's copies that all-reduce through host memory report what each measured of it: its
 * time once every copy had its gradients (IterationReport.reduce; jobs_reduce.c takes out the
 * waiting). Kept per worker as the planner counts it, seconds per byte of 4 (r-1) W / r for W
 * gradient bytes among r copies, smoothed as a link is (the median of the last LINK_MEDIAN
 * samples into an EWMA); a figure once LINK_MEDIAN samples came. What a re-plan assumes of the
 * copies' all-reduce on the worker's server (planning.c: reduce_bandwidth_bytes_per_s). */

/* One all-reduce of `bytes` gradient bytes among `copies` copies that took `seconds` on worker
 * `id` (of job `job_id`, which has its profile; otherwise nothing is kept). */
void coord_speeds_reduce_sample(coord_speeds *all, const char *job_id, const char *id, int copies,
                                double bytes, double seconds);

/* Worker `id`'s measured all-reduce speed in the planner's measure (bytes/s); 0 before
 * LINK_MEDIAN samples. */
double coord_speeds_reduce_bw(const coord_speeds *all, const char *job_id, const char *id);

/* The seconds an all-reduce of `bytes` among `copies` copies takes at that speed (0 unknown). */
double coord_speeds_reduce_s(const coord_speeds *all, const char *job_id, const char *id,
                             int copies, double bytes);

/* `profile_json` with every number under a key ending in "_s" (forward_s, backward_s, ...)
 * multiplied by `factor` (heap string, caller frees; NULL when it is not JSON). */
char *coord_profile_scaled(const char *profile_json, double factor);

#endif /* COORD_SPEEDS_H */
