/*
 * Following a job from the client (`submit --follow`, `status JOB --follow`): polls the
 * coordinator, prints each state change as it happens and a live progress line, and ends with
 * the job's outcome. It does not change the job, and it keeps no state beyond its own process:
 * following can stop (Ctrl-C) and start again at any time.
 */
#ifndef SC_CLI_FOLLOW_H
#define SC_CLI_FOLLOW_H

#include <stdbool.h>

#include "common/sc_status.h"

/* Follows `job_id` at the coordinator `addr` until the job ends. Prints to stdout: a line per
 * state change ("+12.3 s  running     training on 2 stage(s)") and a progress line (step bar,
 * loss, samples/s, ETA), redrawn in place on a terminal and printed at most every
 * `progress_every_s` seconds otherwise; with `json` one JSON object per line instead (each
 * state change and progress update). Rides over a coordinator restart: unreachable for up to
 * 60 s it retries, saying so once.
 * Returns 0 when the job succeeded, 1 when it failed or was cancelled, when following was
 * interrupted (SIGINT, SIGTERM) or the coordinator stayed unreachable (err says why then). */
int cli_follow_job(const char *addr, const char *job_id, bool json, double progress_every_s,
                   sc_err *err);

#endif /* SC_CLI_FOLLOW_H */
