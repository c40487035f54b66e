/*
 * What happens to a job when one of its workers fails it: dies (no heartbeat), reports an
 * error, or heartbeats a state that disagrees with the job's. A job being profiled goes back to
 * submitted, a running one is re-planned (recovering) or resumed from an older intact
 * checkpoint, a job whose failure cannot be helped fails; lost START and STOP commands are sent
 * again once a disagreement outlasts a grace period.
 *
 * Every function runs under c->lock on the control loop's thread and only changes the store and
 * the registry and queues commands; the driver re-plans the job.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/command_queue.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobs_internal.h"

#define LOG "jobs"

/* Under c->lock: worker `w` no longer serves its job (`why`): a job being profiled goes back to
 * submitted, any other is re-planned (recovering). */
static void worker_lost(coord *c, const coord_worker *w, const char *why)
{
    if (w->job_id[0] == '\0')
        return;
    char job_id[COORD_ID_MAX];
    sc_strlcpy(job_id, w->job_id, sizeof job_id);
    coord_job job;
    sc_err err;
    sc_err_clear(&err);
    if (coord_store_job_get(c->store, job_id, &job, &err) != SC_OK)
        return;
    coord_job_state to =
        job.state == COORD_JOB_PROFILING ? COORD_JOB_SUBMITTED : COORD_JOB_RECOVERING;
    coord_job_clear(&job);
    char reason[COORD_REASON_MAX];
    sc_strfmt(reason, sizeof reason, "worker %s ('%s') %s", w->rec.id, w->rec.name, why);
    if (coord_store_job_transition(c->store, job_id, to, reason, &err) == SC_OK) {
        SC_LOG_WARN(LOG, "job %s is %s: %s", job_id, coord_job_state_name(to), reason);
        coord_jobs_release_workers(c, job_id);
        pthread_cond_broadcast(&c->wake);
    }
}

void coord_jobs_worker_died(coord *c, const coord_worker *w)
{
    char why[96];
    sc_strfmt(why, sizeof why, "died: no heartbeat for %u intervals",
              coord_registry_config(c->registry)->dead_after);
    worker_lost(c, w, why);
}

void coord_jobs_worker_left(coord *c, const coord_worker *w)
{
    worker_lost(c, w, "left: its process was stopped");
}

/* Under c->lock: whether job `id` has ended (succeeded, failed, cancelled or unknown). */
static bool job_ended(coord *c, const char *id)
{
    coord_job job;
    if (coord_store_job_get(c->store, id, &job, NULL) != SC_OK)
        return true;
    bool ended = coord_job_state_terminal(job.state);
    coord_job_clear(&job);
    return ended;
}

void coord_jobs_heartbeat(coord *c, coord_worker *w, const char *said_state, const char *said_job,
                          uint64_t now_ns)
{
    coord_progress *p = w->job_id[0] ? coord_jobs_progress(c, w->job_id) : NULL;
    /* a job pausing for a move is assigned and started anew: nothing to repair meanwhile */
    bool runs = p != NULL && !p->finished && p->pause_step == 0;
    enum { AGREE, NO_STAGE, NOT_STARTED, ENDED_STAGE } what = AGREE;
    if (runs && strcmp(said_job, w->job_id) != 0)
        what = NO_STAGE;
    else if (runs && strcmp(said_state, "assigned") == 0)
        what = NOT_STARTED;
    else if (said_job[0] && strcmp(said_job, w->job_id) != 0)
        what = ENDED_STAGE; /* checked against the store below, once the grace has passed */
    if (what == AGREE) {
        w->disagree_since_ns = 0;
        return;
    }
    uint64_t interval_ns = coord_registry_config(c->registry)->heartbeat_interval_ms * 1000000ull;
    uint64_t grace_ns = 3 * interval_ns < 1000000000ull ? 1000000000ull : 3 * interval_ns;
    if (w->disagree_since_ns == 0)
        w->disagree_since_ns = now_ns;
    if (now_ns - w->disagree_since_ns < grace_ns ||
        (w->repaired_ns != 0 && now_ns - w->repaired_ns < grace_ns))
        return;
    w->repaired_ns = now_ns;
    switch (what) {
    case NO_STAGE: {
        char why[COORD_REASON_MAX], holds[COORD_ID_MAX + 32] = "no stage";
        if (said_job[0])
            sc_strfmt(holds, sizeof holds, "a stage of job %s", said_job);
        sc_strfmt(
            why, sizeof why,
            "no longer holds its stage of the job (it restarted or dropped it; it reports %s)",
            holds);
        worker_lost(c, w, why);
        break;
    }
    case NOT_STARTED:
        SC_LOG_WARN(LOG, "job %s: worker %s ('%s') has not started its stage; sending START again",
                    w->job_id, w->rec.id, w->rec.name);
        coord_queue_command_locked(c, w->rec.id, STAGECRAFT__COMMAND_KIND__COMMAND_START, w->job_id,
                                   p->resume_step, p->start_payload, NULL);
        break;
    case ENDED_STAGE:
        /* a job that is only re-planned gets its stages replaced by the next assignment: a STOP
         * racing that assignment could drop the new stage, so only ended jobs are stopped */
        if (job_ended(c, said_job)) {
            SC_LOG_WARN(LOG,
                        "worker %s ('%s') still runs a stage of job %s, which has ended; "
                        "sending STOP again",
                        w->rec.id, w->rec.name, said_job);
            coord_queue_command_locked(c, w->rec.id, STAGECRAFT__COMMAND_KIND__COMMAND_STOP,
                                       said_job, 0, NULL, NULL);
        }
        break;
    case AGREE:
        break;
    }
}

void coord_jobs_worker_error(coord *c, const coord_worker *w, const Stagecraft__Error *e)
{
    char job_id[COORD_ID_MAX];
    sc_strlcpy(job_id, w->job_id, sizeof job_id);
    bool transient = strcmp(e->code, "SC_ERR_TIMEOUT") == 0 ||
                     strcmp(e->code, "SC_ERR_UNAVAILABLE") == 0 ||
                     strcmp(e->code, "SC_ERR_CANCELLED") == 0;
    coord_job_state to = transient ? COORD_JOB_RECOVERING : COORD_JOB_FAILED;
    char reason[COORD_REASON_MAX];
    sc_strfmt(reason, sizeof reason, "worker %s ('%s'): %s", w->rec.id, w->rec.name, e->message);
    sc_err err;
    sc_err_clear(&err);
    /* The checkpoint to resume from does not load on this stage (corrupt, truncated, gone), but
     * an older one does: resume every stage from that step. A stage that cannot load it either
     * names an older one in turn, so the step only goes down, to the newest one every stage
     * loads; none at all fails the job. */
    coord_job job;
    if (e->checkpoint_step > 0 && coord_store_job_get(c->store, job_id, &job, &err) == SC_OK) {
        uint64_t step = job.step, intact = e->intact_checkpoint_step;
        coord_job_clear(&job);
        if (intact > 0 && intact < e->checkpoint_step) {
            to = COORD_JOB_RECOVERING;
            sc_strfmt(reason, sizeof reason,
                      "resuming from the checkpoint of step %llu instead of step %llu, which "
                      "does not load on worker %s ('%s'): %s",
                      (unsigned long long)intact, (unsigned long long)e->checkpoint_step, w->rec.id,
                      w->rec.name, e->message);
            if (coord_store_job_set_progress(c->store, job_id, step, intact, &err) != SC_OK)
                to = COORD_JOB_FAILED; /* resuming from the same step would fail again */
        } else {
            sc_strfmt(reason, sizeof reason,
                      "no intact checkpoint to resume from: worker %s ('%s'): %s", w->rec.id,
                      w->rec.name, e->message);
        }
    }
    sc_err_clear(&err);
    if (coord_store_job_transition(c->store, job_id, to, reason, &err) == SC_OK) {
        SC_LOG_WARN(LOG, "job %s is %s: %s", job_id, coord_job_state_name(to), reason);
        if (to == COORD_JOB_FAILED) /* keeps its last window, then its workers drop the stages */
            coord_jobs_trace_end(c, job_id, 0, true);
        coord_jobs_release_workers(c, job_id);
        pthread_cond_broadcast(&c->wake);
    }
}

bool coord_jobs_worker_leaving(coord *c, coord_worker *w)
{
    coord_progress *p = w->job_id[0] ? coord_jobs_progress(c, w->job_id) : NULL;
    if (p == NULL || p->finished || p->pause_step != 0 || p->leaving[0] || p->workers_min == 0 ||
        coord_jobs_held(c, p->job_id) <= p->workers_min)
        return false;
    char endpoint[COORD_NAME_MAX];
    if (!coord_worker_state_endpoint(w, endpoint, sizeof endpoint))
        return false; /* an older worker: its blocks cannot be taken from it */
    w->leaving = true;
    sc_strlcpy(p->leaving, w->rec.id, sizeof p->leaving);
    p->evaluate = true;
    p->changed_s = sc_clock_now_s();
    SC_LOG_INFO(LOG, "job %s: worker %s ('%s') leaves; moving its blocks to the others first",
                p->job_id, w->rec.id, w->rec.name);
    pthread_cond_broadcast(&c->wake);
    return true;
}
