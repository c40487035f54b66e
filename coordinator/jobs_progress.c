/*
 * The running jobs' progress (c->running, under c->lock): what each stage replica last
 * reported, kept in memory for status and, for the step and checkpoint, in the store. An
 * iteration report moves the job's stored step to its slowest replica's, announces checkpoints
 * that every stage holds, and ends the job when every stage is done. A job that ends or is
 * re-planned gives back its reserved workers and, unless it succeeded, its figures
 * (coord_jobs_release_workers).
 *
 * It does not start jobs (jobs_dispatch.c creates the entry) or handle failures
 * (jobs_recovery.c); the table itself and the moves between states are jobs_transitions.c's.
 * It calls down to rebalancing's measurements (jobs_rebalance.c), the links and all-reduce
 * figures, the transitions and the trace kept at a job's end; nothing calls back up to it but
 * the control loop.
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
#define RATE_WINDOW_S 5.0 /* the throughput window spans 5-10 s once the job has run that long */

/* Under c->lock: keeps the store's checkpoint_error to the latest failure a stage reports (the
 * first failing stage's, until that stage writes one again), so status says why there is no
 * newer checkpoint instead of only the worker's log. */
static void checkpoint_error_report(coord *c, coord_progress *p,
                                    const Stagecraft__IterationReport *r)
{
    int s = (int)r->stage;
    bool failed = r->checkpoint_error != NULL && r->checkpoint_error[0] != '\0';
    if (!failed && p->checkpoint_error_stage != s)
        return;
    if (failed && p->checkpoint_error_stage >= 0 && p->checkpoint_error_stage != s)
        return; /* another stage's failure is shown until it clears */
    char text[COORD_REASON_MAX] = "";
    if (failed)
        sc_strfmt(text, sizeof text, "stage %d: %s", s, r->checkpoint_error);
    coord_job job;
    if (coord_store_job_get(c->store, p->job_id, &job, NULL) != SC_OK)
        return;
    bool same = strcmp(job.checkpoint_error, text) == 0;
    coord_job_clear(&job);
    p->checkpoint_error_stage = failed ? s : -1;
    if (same)
        return;
    if (coord_store_job_set_checkpoint_error(c->store, p->job_id, text, NULL) == SC_OK) {
        if (failed)
            SC_LOG_WARN(LOG, "job %s: checkpoint failed on %s", p->job_id, text);
        else
            SC_LOG_INFO(LOG, "job %s: stage %d writes checkpoints again", p->job_id, s);
    }
}

/* Moves the throughput window to `done` steps at `now_s`. The window opens at the first step
 * this run completes (not at its start: profiling, planning and connecting are not training)
 * and measures whole steps of the whole job, so a stage's copies are not counted apart and a
 * stall shows. */
static void throughput_update(coord_progress *p, uint64_t done, double now_s)
{
    if (done == 0 || done == UINT64_MAX)
        return;
    if (p->rate_t0_s == 0) {
        p->rate_t0_s = p->rate_t1_s = now_s;
        p->rate_step0 = p->rate_step1 = done;
        return;
    }
    if (now_s - p->rate_t1_s >= RATE_WINDOW_S) {
        p->rate_t0_s = p->rate_t1_s, p->rate_step0 = p->rate_step1;
        p->rate_t1_s = now_s, p->rate_step1 = done;
    }
    if (done > p->rate_step0 && now_s > p->rate_t0_s)
        p->samples_per_s = (double)(done - p->rate_step0) * p->batch_size / (now_s - p->rate_t0_s);
}

/* The freezing policy's share of a report: the first copy of each stage brings its blocks'
 * gradient norms (copies hold the same summed gradient); the last stage's closes intervals.
 * A policy that wants more blocks frozen has the driver re-plan and move the job. */
static void freeze_observe(coord *c, coord_progress *p, const Stagecraft__IterationReport *r)
{
    int s = (int)r->stage;
    if (r->replica != 0)
        return;
    coord_freezing_observe(c->freezing, p->job_id, p->first_block[s], r->grad_l1_per_block,
                           r->n_grad_l1_per_block, r->step);
    if (s != p->n_stages - 1)
        return;
    char why[COORD_REASON_MAX] = "";
    int want = coord_freezing_close(c->freezing, p->job_id, r->step, why, sizeof why);
    if (want <= coord_freezing_frozen(c->freezing, p->job_id) || p->pause_step != 0)
        return;
    p->freeze_to = want;
    sc_strlcpy(p->freeze_why, why, sizeof p->freeze_why);
    p->evaluate = true;
    if (p->changed_s == 0)
        p->changed_s = sc_clock_now_s();
    SC_LOG_INFO(LOG, "job %s: %s", p->job_id, why);
    pthread_cond_broadcast(&c->wake);
}

void coord_jobs_report(coord *c, const char *worker_id, const Stagecraft__IterationReport *r,
                       uint64_t sent_ns, uint64_t received_ns)
{
    coord_progress *p = coord_jobs_progress(c, r->job_id);
    /* a report of an earlier run of the job (before a re-plan), still on its way, is stale */
    if (p == NULL || p->finished || (r->run != 0 && r->run != p->run) ||
        (int)r->stage >= p->n_stages || (int)r->replica >= p->replicas[r->stage])
        return;
    int s = (int)r->stage, k = (int)r->replica;
    /* heartbeats repeat the last report: its transfers are counted once */
    bool fresh = r->step > p->step[s][k];
    coord_jobs_links_observe(c, p, worker_id, r, sent_ns, received_ns, fresh);
    coord_jobs_reduce_observe(c, p, worker_id, r, fresh);
    if (r->step > p->step[s][k])
        p->step[s][k] = r->step;
    if (r->checkpoint_step > p->checkpoint[s][k])
        p->checkpoint[s][k] = r->checkpoint_step;
    for (size_t i = 0; i < r->n_checkpoint_copies; i++) {
        const Stagecraft__CheckpointCopy *cc = r->checkpoint_copies[i];
        if (cc != NULL && (int)cc->stage < p->n_stages && (int)cc->copy < p->copies[cc->stage] &&
            cc->step > p->copied[cc->stage][cc->copy])
            p->copied[cc->stage][cc->copy] = cc->step;
    }
    if (!r->parked) {
        p->iteration_s[s] = r->iteration_s;
        p->busy_s[s] = r->busy_s;
        if ((double)r->memory_bytes > p->memory_bytes[s])
            p->memory_bytes[s] = (double)r->memory_bytes;
        if (s == p->n_stages - 1 && r->has_loss) {
            p->loss = r->loss;
            p->loss_known = true;
            p->loss_scale = r->loss_scale;
            p->skipped_steps = r->skipped_steps;
            if (k == 0) /* every step's loss, for whoever wants the curve (bench_freeze.sh) */
                SC_LOG_DEBUG(LOG, "job %s step %llu: loss %.6f", p->job_id,
                             (unsigned long long)r->step, r->loss);
        }
    }
    checkpoint_error_report(c, p, r);
    coord_jobs_history_observe(c, p, r);
    if (!coord_jobs_rebalance_observe(c, p, r))
        return;
    if (p->freeze && !r->parked)
        freeze_observe(c, p, r);
    if (p->moved_from_s > 0 && r->step > p->resume_step) {
        /* the first step after a move: the blocks were taken over */
        coord_speeds_moved(c->speeds, p->job_id);
        char note[COORD_REASON_MAX];
        sc_strfmt(note, sizeof note,
                  "rebalanced: the first step after the move ran %.2f s after the new stages "
                  "started, %.2f s after every stage paused (the move's cost, weighed against "
                  "the gain of the next one)",
                  sc_clock_now_s() - p->moved_from_s, coord_speeds_move_cost(c->speeds, p->job_id));
        coord_store_job_set_reason(c->store, p->job_id, note, NULL);
        SC_LOG_INFO(LOG, "job %s: %s", p->job_id, note);
        p->moved_from_s = 0;
        coord_jobs_shutdown_left(c, p->job_id);
    }
    /* the job is as far as its slowest replica of any stage */
    uint64_t done = UINT64_MAX, written = UINT64_MAX;
    for (int i = 0; i < p->n_stages; i++) {
        for (int j = 0; j < p->replicas[i]; j++) {
            done = p->step[i][j] < done ? p->step[i][j] : done;
            written = p->checkpoint[i][j] < written ? p->checkpoint[i][j] : written;
        }
    }
    /* complete: written by every stage and held by every copy (ckpt_copies.h) */
    uint64_t ckpt =
        coord_ckpt_complete(written, (size_t)p->n_stages, p->copies, &p->copied[0][0],
                            p->last_checkpoint < written ? p->last_checkpoint : written);
    throughput_update(p, done, sc_clock_now_s());
    sc_err err;
    sc_err_clear(&err);
    if (done > p->stored_step) {
        coord_store_job_set_progress(c->store, p->job_id, done, ckpt, &err);
        p->stored_step = done;
    }
    if (ckpt > p->complete_sent) {
        /* every stage holds this step now: the workers may delete their older checkpoints
         * beyond the job's checkpoint_keep (before a STOP below, which drops the stage) */
        p->complete_sent = ckpt;
        for (size_t i = 0; i < coord_registry_count(c->registry); i++) {
            const coord_worker *w = coord_registry_at(c->registry, i);
            if (strcmp(w->job_id, p->job_id) == 0)
                coord_queue_command_locked(c, w->rec.id,
                                           STAGECRAFT__COMMAND_KIND__COMMAND_CHECKPOINT_COMPLETE,
                                           p->job_id, ckpt, NULL, NULL);
        }
    }
    if (done < p->steps)
        return;
    char id[COORD_ID_MAX], reason[COORD_REASON_MAX];
    sc_strlcpy(id, p->job_id, sizeof id);
    if (p->loss_known)
        sc_strfmt(reason, sizeof reason, "trained %llu steps; final loss %.4f",
                  (unsigned long long)done, p->loss);
    else
        sc_strfmt(reason, sizeof reason, "trained %llu steps", (unsigned long long)done);
    p->finished = true;
    if (written > p->complete_sent) {
        /* the job is done: its copies no longer matter for a restart, the written steps do */
        p->complete_sent = written;
        coord_store_job_set_progress(c->store, p->job_id, done, written, NULL);
        for (size_t i = 0; i < coord_registry_count(c->registry); i++) {
            const coord_worker *w = coord_registry_at(c->registry, i);
            if (strcmp(w->job_id, p->job_id) == 0)
                coord_queue_command_locked(c, w->rec.id,
                                           STAGECRAFT__COMMAND_KIND__COMMAND_CHECKPOINT_COMPLETE,
                                           p->job_id, written, NULL, NULL);
        }
    }
    if (coord_store_job_transition(c->store, id, COORD_JOB_SUCCEEDED, reason, &err) == SC_OK)
        SC_LOG_INFO(LOG, "job %s succeeded: %s (last report from %s)", id, reason, worker_id);
    /* the workers drop the finished stage and are free for the next job, once its last
     * window is kept for `stagecraft trace` */
    coord_jobs_trace_end(c, id, done, true);
    coord_jobs_release_workers(c, id);
}
