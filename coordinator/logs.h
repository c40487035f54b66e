/*
 * Recent log lines of workers through the coordinator (Coordinator.GetLogs, `stagecraft logs`):
 * the target (a worker id or name, or a job: every worker of its plan) is resolved here, each
 * worker is asked for its newest lines (Worker.ReadLog) at once, one thread each with a deadline,
 * and a worker that does not answer in time is named in its entry's `error`.
 * Not here: keeping the lines (common/sc_logring.h, in each worker), printing them (the CLI).
 * Invariant: the calls run without c->lock; the workers' endpoints are copied out under it.
 */
#ifndef COORD_LOGS_H
#define COORD_LOGS_H

#include "common/sc_status.h"
#include "proto/sc_rpc.h"
#include "proto/stagecraft.pb-c.h"

struct coord;

#define COORD_LOGS_DEFAULT_LINES 50
#define COORD_LOGS_MAX_LINES 1000
#define COORD_LOGS_TIMEOUT_MS 2000 /* per worker; the workers are asked at once */

/* Answers `req` into *out, built in the call's memory (ctx). SC_ERR_INVALID for a line count
 * over COORD_LOGS_MAX_LINES; SC_ERR_NOT_FOUND for a target that is no worker and no job;
 * SC_ERR_PRECONDITION for a job that has no workers yet. A worker that fails is not an error
 * of the call: its entry says why. Takes c->lock itself; blocks up to one deadline. */
sc_status coord_logs_answer(struct coord *c, sc_rpc_ctx *ctx, const Stagecraft__GetLogsRequest *req,
                            Stagecraft__GetLogsResponse **out, sc_err *err);

#endif /* COORD_LOGS_H */
