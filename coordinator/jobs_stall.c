/*
 * The stall watchdog: a running job whose stages stop stepping is treated as failed. A worker
 * that is stopped (SIGSTOP) or gone falls silent and the registry declares it dead; one whose
 * step never returns (a kernel that hangs) while its heartbeats go on is only seen here, from
 * the missing progress: no iteration report with a new step within a bound derived from the
 * job's iteration time. The job is then re-planned from its last checkpoint and its workers are
 * told to stop; a worker whose stage does not stop says it is stuck (worker/service.h) and no
 * plan takes it until its stage ends, and nothing that stage does afterwards is applied: its
 * reports name a run that is no longer current, and a stopped stage saves nothing.
 *
 * It does not judge a job pausing for a move (its stages wait on purpose) nor say which stage
 * hangs: in a pipeline every stage waits for the stuck one, and the neighbours' data-plane
 * time-outs usually say it first.
 */
#include <stdio.h>
#include <string.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/command_queue.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobs_internal.h"

#define LOG "jobs"

double coord_jobs_stall_bound_s(double predicted_iteration_s, double measured_iteration_s,
                                bool stepped)
{
    double iteration_s =
        measured_iteration_s > predicted_iteration_s ? measured_iteration_s : predicted_iteration_s;
    double bound = COORD_STALL_ITERATIONS * iteration_s;
    if (bound < COORD_STALL_MIN_S)
        bound = COORD_STALL_MIN_S;
    return stepped ? bound : bound + COORD_STALL_START_S;
}

/* Under c->lock: job `p` made no progress for `quiet_s`, over its bound: re-planned. */
static void stalled(coord *c, coord_progress *p, double quiet_s)
{
    char id[COORD_ID_MAX], reason[COORD_REASON_MAX];
    sc_strlcpy(id, p->job_id, sizeof id);
    coord_job job;
    if (coord_store_job_get(c->store, id, &job, NULL) != SC_OK)
        return;
    bool running = job.state == COORD_JOB_RUNNING;
    coord_job_clear(&job);
    if (!running)
        return;
    sc_strfmt(reason, sizeof reason,
              "no stage reported a step for %.0f s (the bound: %d iterations of %.3g s, at least "
              "%.0f s%s): a stage does not progress; re-planning from the last checkpoint",
              quiet_s, COORD_STALL_ITERATIONS,
              p->iter_avg > p->predicted_iteration_s ? p->iter_avg : p->predicted_iteration_s,
              COORD_STALL_MIN_S, p->rate_t0_s == 0 ? ", and its first step may take longer" : "");
    sc_err err;
    sc_err_clear(&err);
    if (coord_store_job_transition(c->store, id, COORD_JOB_RECOVERING, reason, &err) != SC_OK)
        return;
    SC_LOG_WARN(LOG, "job %s is recovering: %s", id, reason);
    for (size_t i = 0; i < coord_registry_count(c->registry); i++) {
        const coord_worker *w = coord_registry_at(c->registry, i);
        if (strcmp(w->job_id, id) == 0)
            coord_queue_command_locked(c, w->rec.id, STAGECRAFT__COMMAND_KIND__COMMAND_STOP, id, 0,
                                       NULL, NULL);
    }
    coord_jobs_release_workers(c, id); /* drops `p` */
    pthread_cond_broadcast(&c->wake);
}

void coord_jobs_check_stalls(coord *c, double now_s)
{
    for (size_t i = 0; i < c->n_running; i++) {
        coord_progress *p = &c->running[i];
        if (p->job_id[0] == '\0' || p->finished || p->pause_step != 0) {
            p->moved_s = 0; /* judged afresh once it runs on */
            continue;
        }
        uint64_t sum = 0;
        for (int s = 0; s < p->n_stages && s < COORD_MAX_STAGES; s++)
            for (int r = 0; r < p->replicas[s] && r < COORD_MAX_REPLICAS; r++)
                sum += p->step[s][r];
        if (p->moved_s == 0 || sum != p->moved_sum) {
            p->moved_s = now_s;
            p->moved_sum = sum;
            continue;
        }
        double bound =
            coord_jobs_stall_bound_s(p->predicted_iteration_s, p->iter_avg, p->rate_t0_s != 0);
        if (p->stored_step + 1 >= p->steps)
            bound += COORD_STALL_START_S; /* the last step also writes the export and checkpoint */
        if (now_s - p->moved_s >= bound) {
            stalled(c, p, now_s - p->moved_s);
            return; /* c->running changed */
        }
    }
}
