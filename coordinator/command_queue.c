/*
 * The coordinator's command queue (see command_queue.h): a singly linked list under c->lock,
 * appended at the tail and taken whole by the control loop.
 */
#include "coordinator/command_queue.h"

#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "coordinator/coord_internal.h"

sc_status coord_queue_command_locked(coord *c, const char *worker_id, Stagecraft__CommandKind kind,
                                     const char *job_id, uint64_t step, const char *payload_json,
                                     sc_err *err)
{
    coord_cmd *cmd = calloc(1, sizeof *cmd);
    SC_ALLOC_CHECK(cmd, err);
    if (payload_json) {
        cmd->payload_json = strdup(payload_json);
        if (cmd->payload_json == NULL) {
            free(cmd);
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory queueing a command");
        }
    }
    sc_strlcpy(cmd->worker_id, worker_id, sizeof cmd->worker_id);
    sc_strlcpy(cmd->job_id, job_id ? job_id : "", sizeof cmd->job_id);
    cmd->kind = kind;
    cmd->step = step;
    cmd->queued_ns = sc_clock_now_ns();
    if (c->cmd_tail)
        c->cmd_tail->next = cmd;
    else
        c->cmd_head = cmd;
    c->cmd_tail = cmd;
    return SC_OK;
}

sc_status coord_queue_command(coord *c, const char *worker_id, Stagecraft__CommandKind kind,
                              const char *job_id, uint64_t step, const char *payload_json,
                              sc_err *err)
{
    pthread_mutex_lock(&c->lock);
    sc_status rc = coord_queue_command_locked(c, worker_id, kind, job_id, step, payload_json, err);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

coord_cmd *coord_queue_take(coord *c)
{
    pthread_mutex_lock(&c->lock);
    coord_cmd *list = c->cmd_head;
    c->cmd_head = c->cmd_tail = NULL;
    pthread_mutex_unlock(&c->lock);
    return list;
}

void coord_queue_put_back(coord *c, coord_cmd *list)
{
    if (list == NULL)
        return;
    coord_cmd *last = list;
    while (last->next)
        last = last->next;
    pthread_mutex_lock(&c->lock);
    last->next = c->cmd_head;
    if (c->cmd_head == NULL)
        c->cmd_tail = last;
    c->cmd_head = list;
    pthread_mutex_unlock(&c->lock);
}

void coord_queue_clear(coord *c)
{
    while (c->cmd_head) {
        coord_cmd *next = c->cmd_head->next;
        free(c->cmd_head->payload_json);
        free(c->cmd_head);
        c->cmd_head = next;
    }
}
