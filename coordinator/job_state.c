/* Job state names and the transition table (see job_state.h). */
#include "coordinator/job_state.h"

#include <string.h>

static const char *const state_names[] = {
#define COORD_JOB_STATE_TEXT(name, text) text,
    COORD_JOB_STATE_LIST(COORD_JOB_STATE_TEXT)
#undef COORD_JOB_STATE_TEXT
};

const char *coord_job_state_name(coord_job_state s)
{
    return (unsigned)s < COORD_JOB_STATE_COUNT ? state_names[s] : "unknown";
}

bool coord_job_state_parse(const char *name, coord_job_state *out)
{
    for (int i = 0; i < COORD_JOB_STATE_COUNT; i++) {
        if (strcmp(name, state_names[i]) == 0) {
            *out = (coord_job_state)i;
            return true;
        }
    }
    return false;
}

bool coord_job_state_terminal(coord_job_state s)
{
    return s == COORD_JOB_SUCCEEDED || s == COORD_JOB_FAILED || s == COORD_JOB_CANCELLED;
}

bool coord_job_transition_allowed(coord_job_state from, coord_job_state to)
{
    if (coord_job_state_terminal(from) || from == to)
        return false;
    if (to == COORD_JOB_FAILED || to == COORD_JOB_CANCELLED)
        return true;
    switch (from) {
    case COORD_JOB_SUBMITTED:
        return to == COORD_JOB_PROFILING || to == COORD_JOB_PLANNED;
    case COORD_JOB_PROFILING:
        return to == COORD_JOB_PLANNED || to == COORD_JOB_SUBMITTED;
    case COORD_JOB_PLANNED:
        return to == COORD_JOB_RUNNING || to == COORD_JOB_PROFILING || to == COORD_JOB_RECOVERING;
    case COORD_JOB_RUNNING:
        return to == COORD_JOB_SUCCEEDED || to == COORD_JOB_RECOVERING ||
               to == COORD_JOB_REBALANCING;
    case COORD_JOB_RECOVERING:
    case COORD_JOB_REBALANCING:
        return to == COORD_JOB_RUNNING || to == COORD_JOB_PLANNED || to == COORD_JOB_PROFILING ||
               to == COORD_JOB_RECOVERING;
    default:
        return false;
    }
}
