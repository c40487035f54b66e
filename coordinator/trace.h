/*
 * coord trace: one Chrome / Perfetto trace ({"traceEvents": [...]}) of a running job, the
 * measured timeline of its stage copies beside the planned one.
 *
 * Pure: takes the events each worker measured (on its own monotonic clock), the offset of each
 * worker's clock from the coordinator's, and the job's plan JSON; calls nobody on the network
 * (jobs_trace.c collects the timelines). The planned rows replay the plan's schedule with the
 * planner's simulator (plan_sim_run) over each stage's forward and backward time of a
 * micro-batch (the plan's cluster block_times of the stage's blocks, the slowest copy's; without
 * them the stage's compute_s split 1:2), copies running whole micro-batches, scaled so that the
 * simulated iteration lasts the plan's iteration_time_s: the stored plan carries no transfer or
 * optimizer times, so those are not in the replay.
 * Invariant: every measured event in the output lies in the window (iterations every lane
 * holds), is shifted onto the coordinator's clock by its lane's offset, and keeps its lane's
 * order; the window starts at trace time 0, where the planned iteration starts too.
 */
#ifndef COORD_TRACE_H
#define COORD_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

/* The window a trace shows when the caller names none. */
#define COORD_TRACE_ITERATIONS 8

/* One measured action, as GetTimeline sends it (kind: the wire's TimelineEventKind). */
typedef struct {
    int kind;
    int32_t mb; /* -1: all-reduce, optimizer */
    uint64_t step, iteration;
    uint64_t start_ns, end_ns; /* the worker's clock */
} coord_trace_event;

/* The timeline of one stage copy. */
typedef struct {
    int stage, copy;
    const char *worker_id;
    int64_t offset_ns; /* the worker's clock minus the coordinator's (coord_trace_clock_offset) */
    const coord_trace_event *events; /* [n_events], in the order the worker ran them */
    size_t n_events;
} coord_trace_lane;

typedef struct {
    int events;     /* measured events written */
    int iterations; /* measured iterations in the window */
    uint64_t first_iteration, last_iteration;
    int lanes;                   /* stage copies with events in the window */
    double measured_iteration_s; /* stage 0 copy 0: start to start over the window (one
                                  * iteration: its span over every lane) */
    double planned_iteration_s;  /* the plan's iteration_time_s (0 when the plan has none) */
    int planned_events;          /* planned events written (0: the plan could not be replayed) */
} coord_trace_summary;

/* NTP-style: the offset of a worker's clock from the caller's, from a call sent at `sent_ns`
 * and answered at `received_ns` (the caller's clock) whose answer read the worker's clock as
 * `worker_now_ns`, taken to be the call's midpoint. Exact when the two legs take equal time;
 * off by at most half the round trip otherwise. */
int64_t coord_trace_clock_offset(uint64_t sent_ns, uint64_t received_ns, uint64_t worker_now_ns);

/* Writes the trace of `lanes` (n of them) and the plan (`plan_json` as the coordinator stores
 * it; NULL or unreadable: no planned rows) into *json (heap string, caller frees), keeping the
 * newest `iterations` (0: all) of the iterations that every lane with events holds. Rows:
 * "measured: stage S copy K (worker W)", then "planned: stage S" (a thread per copy) and
 * "planned: link A->B" for the simulated transfers; events are named "<kind> <micro-batch>"
 * with cat the kind (plus "planned" for the plan's); "otherData" holds the window's iterations,
 * the origin on the coordinator's clock, both iteration times and each lane's worker and clock
 * offset. `sum` (may be NULL) gets the figures.
 * SC_ERR_NOT_FOUND when no lane has an event (nothing has run yet); NOMEM. */
sc_status coord_trace_build(const coord_trace_lane *lanes, size_t n, const char *plan_json,
                            int iterations, char **json, coord_trace_summary *sum, sc_err *err);

#endif /* COORD_TRACE_H */
