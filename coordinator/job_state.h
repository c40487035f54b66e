/*
 * Job states and the transitions allowed between them.
 *
 * submitted -> profiling -> planned -> running -> succeeded, with recovering (a worker died:
 * re-plan, restore from the last checkpoint) and rebalancing (hardware changed or layers froze)
 * as detours from running; failed and cancelled end a job from any live state. Terminal states
 * never change again. The names are the ones users see (`stagecraft status`, FORMATS.md).
 */
#ifndef COORD_JOB_STATE_H
#define COORD_JOB_STATE_H

#include <stdbool.h>

#define COORD_JOB_STATE_LIST(X)                                                                    \
    X(COORD_JOB_SUBMITTED, "submitted")                                                            \
    X(COORD_JOB_PROFILING, "profiling")                                                            \
    X(COORD_JOB_PLANNED, "planned")                                                                \
    X(COORD_JOB_RUNNING, "running")                                                                \
    X(COORD_JOB_RECOVERING, "recovering")                                                          \
    X(COORD_JOB_REBALANCING, "rebalancing")                                                        \
    X(COORD_JOB_SUCCEEDED, "succeeded")                                                            \
    X(COORD_JOB_FAILED, "failed")                                                                  \
    X(COORD_JOB_CANCELLED, "cancelled")

typedef enum {
#define COORD_JOB_STATE_ENUM(name, text) name,
    COORD_JOB_STATE_LIST(COORD_JOB_STATE_ENUM)
#undef COORD_JOB_STATE_ENUM
        COORD_JOB_STATE_COUNT
} coord_job_state;

const char *coord_job_state_name(coord_job_state s);

/* Parses a state name; false when it is not one. */
bool coord_job_state_parse(const char *name, coord_job_state *out);

bool coord_job_state_terminal(coord_job_state s);

/* Whether a job may move from `from` to `to`. */
bool coord_job_transition_allowed(coord_job_state from, coord_job_state to);

#endif /* COORD_JOB_STATE_H */
