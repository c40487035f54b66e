/*
 * A job's state as the coordinator holds it while it runs: the running jobs' progress table
 * (c->running), the moves of a job between states that its progress decides (a move's pause,
 * its end in rebalancing, a pause that misses and recovers instead), and what a job that stops
 * or moves gives back (its reserved workers, its figures, the workers that left once the move
 * took their blocks).
 *
 * This is the bottom of the job driver's files: dispatch, progress, rebalancing, recovery and
 * the stall check call it, and it calls none of them (only the store, the registry, the speed
 * model, the freezing policy and the command queue). Everything here runs under c->lock and
 * never waits on the network.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/command_queue.h"
#include "coordinator/coord_internal.h"
#include "coordinator/freezing.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/speeds.h"

#define LOG "jobs"

/* ---- the progress table ---------------------------------------------------------------------- */

coord_progress *coord_jobs_progress(coord *c, const char *job_id)
{
    for (size_t i = 0; i < c->n_running; i++)
        if (strcmp(c->running[i].job_id, job_id) == 0)
            return &c->running[i];
    return NULL;
}

void coord_jobs_progress_remove(coord *c, size_t i)
{
    free(c->running[i].start_payload);
    c->running[i] = c->running[--c->n_running];
}

void coord_jobs_progress_drop(coord *c, const char *job_id)
{
    for (size_t i = 0; i < c->n_running; i++) {
        if (strcmp(c->running[i].job_id, job_id) == 0) {
            coord_jobs_progress_remove(c, i);
            return;
        }
    }
}

void coord_jobs_progress_clear(coord *c)
{
    while (c->n_running > 0)
        coord_jobs_progress_remove(c, c->n_running - 1);
}

bool coord_jobs_run_is_current(coord *c, const char *job_id, uint64_t run)
{
    if (run == 0)
        return true;
    const coord_progress *p = coord_jobs_progress(c, job_id);
    return p != NULL && !p->finished && p->run == run;
}

/* ---- what a job gives back ------------------------------------------------------------------- */

void coord_jobs_release_workers(coord *c, const char *job_id)
{
    /* A job that ended well keeps its last figures for `status`; any other stop drops them. */
    coord_progress *p = coord_jobs_progress(c, job_id);
    if (p != NULL && !p->finished)
        coord_jobs_progress_drop(c, job_id);
    coord_job job;
    bool ended = true;
    if (coord_store_job_get(c->store, job_id, &job, NULL) == SC_OK) {
        ended = coord_job_state_terminal(job.state);
        coord_job_clear(&job);
    }
    if (ended) { /* no re-plan will want its speeds or its frozen prefix */
        coord_speeds_drop(&c->speeds, job_id);
        coord_freezing_drop(&c->freezing, job_id);
    }
    for (size_t i = 0; i < coord_registry_count(c->registry); i++) {
        coord_worker *w = coord_registry_at(c->registry, i);
        if (strcmp(w->job_id, job_id) == 0)
            w->job_id[0] = '\0';
    }
}

size_t coord_jobs_held(coord *c, const char *job_id)
{
    size_t n = 0;
    for (size_t i = 0; i < coord_registry_count(c->registry); i++)
        n += strcmp(coord_registry_at(c->registry, i)->job_id, job_id) == 0;
    return n;
}

bool coord_jobs_recover(coord *c, const char *job_id, const char *reason)
{
    char id[COORD_ID_MAX];
    sc_strlcpy(id, job_id, sizeof id); /* job_id may live in the progress entry dropped below */
    if (coord_store_job_transition(c->store, id, COORD_JOB_RECOVERING, reason, NULL) != SC_OK)
        return false;
    SC_LOG_WARN(LOG, "job %s is recovering: %s", id, reason);
    coord_jobs_release_workers(c, id);
    pthread_cond_broadcast(&c->wake);
    return true;
}

void coord_jobs_shutdown_left(coord *c, const char *job_id)
{
    for (size_t i = 0; i < coord_registry_count(c->registry); i++) {
        coord_worker *w = coord_registry_at(c->registry, i);
        /* its job moved off it (the new plan does not hold it), or it was freed */
        if (!w->leaving || w->state != COORD_WORKER_ALIVE ||
            (w->job_id[0] != '\0' && strcmp(w->job_id, job_id) != 0))
            continue;
        w->job_id[0] = '\0';
        SC_LOG_INFO(LOG, "worker %s (%s) handed its blocks over; it may go", w->rec.id,
                    w->rec.name);
        coord_queue_command_locked(c, w->rec.id, STAGECRAFT__COMMAND_KIND__COMMAND_SHUTDOWN, "", 0,
                                   NULL, NULL);
        w->state = COORD_WORKER_DEAD; /* it must register again to come back */
        w->leaving = false;
    }
}

/* ---- a move's pause -------------------------------------------------------------------------- */

/* Sends every worker of the job the pause step. */
static void send_pause(coord *c, coord_progress *p)
{
    for (int s = 0; s < p->n_stages; s++)
        for (int k = 0; k < p->replicas[s]; k++)
            if (p->worker_of[s][k][0])
                coord_queue_command_locked(c, p->worker_of[s][k],
                                           STAGECRAFT__COMMAND_KIND__COMMAND_REBALANCE, p->job_id,
                                           p->pause_step, NULL, NULL);
}

void coord_jobs_pause_begin(coord *c, coord_progress *p, uint64_t pause_step)
{
    p->pause_step = pause_step;
    memset(p->paused, 0, sizeof p->paused);
    p->pause_reported = false;
    send_pause(c, p);
    /* status says what happens from the moment the pause is asked for: the job trains on to
     * the pause step, but it is moving */
    char reason[COORD_REASON_MAX];
    sc_strfmt(reason, sizeof reason, "%s; pausing after step %llu", p->why,
              (unsigned long long)pause_step);
    sc_err err;
    sc_err_clear(&err);
    if (coord_store_job_transition(c->store, p->job_id, COORD_JOB_REBALANCING, reason, &err) ==
        SC_OK)
        SC_LOG_INFO(LOG, "job %s is rebalancing: %s", p->job_id, reason);
    else
        SC_LOG_WARN(LOG, "job %s: %s", p->job_id, err.msg);
}

bool coord_jobs_pause_done(const coord_progress *p)
{
    if (p->pause_step == 0)
        return false;
    for (int s = 0; s < p->n_stages; s++)
        for (int k = 0; k < p->replicas[s]; k++)
            if (p->paused[s][k] != p->pause_step)
                return false;
    return true;
}

bool coord_jobs_pause_report(coord *c, coord_progress *p, int s, int k, uint64_t step)
{
    p->paused[s][k] = step;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < p->n_stages; i++) {
        for (int j = 0; j < p->replicas[i]; j++) {
            lo = p->paused[i][j] < lo ? p->paused[i][j] : lo;
            hi = p->paused[i][j] > hi ? p->paused[i][j] : hi;
        }
    }
    if (hi > p->pause_step && p->async) {
        /* pipedream drains the pipeline together at the pause: one that drained at another
         * step than the others cannot be brought back in line */
        char reason[COORD_REASON_MAX];
        sc_strfmt(reason, sizeof reason,
                  "the rebalance's pause missed: a pipedream stage drained after step %llu, "
                  "past %llu; resuming from the last checkpoint",
                  (unsigned long long)hi, (unsigned long long)p->pause_step);
        return !coord_jobs_recover(c, p->job_id, reason); /* drops p when it recovers */
    }
    if (hi > p->pause_step) {
        /* one ran past the pause step before it was told: all pause there instead */
        SC_LOG_INFO(LOG, "job %s: a stage paused after step %llu, past %llu; pausing all there",
                    p->job_id, (unsigned long long)hi, (unsigned long long)p->pause_step);
        p->pause_step = hi;
        send_pause(c, p);
        return true;
    }
    if (lo != p->pause_step || p->pause_reported)
        return true;
    /* every replica paused: the job (rebalancing since the pause began) is the driver's now,
     * and its state's account says how the pause went */
    p->pause_reported = true;
    char reason[COORD_REASON_MAX];
    sc_strfmt(reason, sizeof reason, "%s; paused after step %llu in %.2f s", p->why,
              (unsigned long long)p->pause_step, sc_clock_now_s() - p->decided_s);
    coord_store_job_amend_reason(c->store, p->job_id, reason, NULL);
    coord_speeds_paused(c->speeds, p->job_id); /* the move's cost is counted from here */
    SC_LOG_INFO(LOG, "job %s: every stage paused: %s", p->job_id, reason);
    pthread_cond_broadcast(&c->wake);
    return true;
}
