/*
 * The coordinator's command queue: control commands (START, STOP, CHECKPOINT_COMPLETE, ...) that
 * any thread queues for a worker and the control loop, which owns the control socket, sends.
 *
 * The queue lives in the coordinator (c->cmd_head, c->cmd_tail) under c->lock; commands leave it
 * in the order they were queued. It does not send anything: the control loop takes the whole
 * queue and sends it (coordinator.c).
 */
#ifndef COORD_COMMAND_QUEUE_H
#define COORD_COMMAND_QUEUE_H

#include <stdint.h>

#include "common/sc_status.h"
#include "coordinator/coordinator.h"
#include "coordinator/registry.h"
#include "proto/control.pb-c.h"

/* A control command waiting for the control loop to send it. */
typedef struct coord_cmd {
    struct coord_cmd *next;
    char worker_id[COORD_ID_MAX];
    Stagecraft__CommandKind kind;
    char job_id[COORD_ID_MAX];
    uint64_t step;
    char *payload_json; /* owned, may be NULL */
    uint64_t queued_ns; /* monotonic, when it was first queued */
} coord_cmd;

/* Queues a command for the control loop (takes c->lock; payload copied). */
sc_status coord_queue_command(coord *c, const char *worker_id, Stagecraft__CommandKind kind,
                              const char *job_id, uint64_t step, const char *payload_json,
                              sc_err *err);

/* The same, with c->lock already held. */
sc_status coord_queue_command_locked(coord *c, const char *worker_id, Stagecraft__CommandKind kind,
                                     const char *job_id, uint64_t step, const char *payload_json,
                                     sc_err *err);

/* Takes every queued command (takes c->lock): the caller owns the returned list (linked by
 * `next`, oldest first; NULL when empty) and frees each command and its payload_json. */
coord_cmd *coord_queue_take(coord *c);

/* Puts `list` (taken by coord_queue_take, linked by `next`, oldest first) back at the head of
 * the queue, before anything queued since, so commands still leave in the order they were
 * queued (takes c->lock; the queue owns the list again). Accepts NULL. */
void coord_queue_put_back(coord *c, coord_cmd *list);

/* Frees every command still queued (the coordinator stops; no other thread runs). */
void coord_queue_clear(coord *c);

#endif /* COORD_COMMAND_QUEUE_H */
