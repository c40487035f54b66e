/*
 * wk trainer, the training thread: connects the data plane, loads the resume step's state,
 * then runs the steps: a step, a drain and a checkpoint when one is due, the export at the
 * last step, the iteration's report, and a pause when a move asked for one.
 *
 * Does not build or free the trainer (trainer.c). Calls the reports, resume and faults
 * (trainer_report.c, trainer_resume.c, trainer_fault.c), never trainer.c. Invariant: a step
 * stopped while it ran is neither saved nor reported.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "kernels/threads_cpu.h"
#include "worker/runtime/export_hf.h"
#include "worker/trainer_internal.h"

#define LOG WK_TRAINER_LOG

/* Endpoints of stage s's replicas as a C array (borrowed strings); *n = 0 outside the pipeline. */
static const char **stage_endpoints(wk_trainer *t, long s, int *n)
{
    *n = 0;
    if (s < 0 || s >= (long)t->n_stages)
        return NULL;
    json_t *e = json_array_get(t->endpoints, (size_t)s);
    size_t k = json_array_size(e);
    const char **list = calloc(k ? k : 1, sizeof *list);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < k; i++)
        list[i] = json_string_value(json_array_get(e, i));
    *n = (int)k;
    return list;
}

static sc_status connect_all(wk_trainer *t, sc_err *err)
{
    int n_prev, n_next, n_peers;
    const char **prev = stage_endpoints(t, (long)t->stage - 1, &n_prev);
    const char **next = stage_endpoints(t, (long)t->stage + 1, &n_next);
    const char **peers = stage_endpoints(t, (long)t->stage, &n_peers);
    sc_status rc = rt_runner_connect_group(t->runner, prev, n_prev, next, n_next, peers,
                                           n_peers > 1 ? n_peers : 0, err);
    free(prev);
    free(next);
    free(peers);
    return rc;
}

/* After `step`: when a move asked to pause there (or earlier), keeps the stage's state in the
 * block server, reports the pause, and waits until a later pause step or the stop. Returns false
 * when training must end (stopped, or the state could not be kept). */
static bool maybe_pause(wk_trainer *t, uint64_t step, const Stagecraft__IterationReport *last)
{
    uint64_t at = atomic_load(&t->pause_after);
    if (at == 0 || step < at || step >= t->steps)
        return true;
    sc_err err;
    sc_err_clear(&err);
    rt_stage_image im;
    if (rt_runner_flush(t->runner, NULL, &err) != SC_OK ||
        rt_runner_snapshot(t->runner, step, &im, &err) != SC_OK) {
        if (!atomic_load(&t->stop))
            wk_trainer_push_error(t, err.code, "keeping the stage's state for a move failed: %s",
                                  err.msg);
        return false;
    }
    if (t->blocks != NULL && t->replica == 0)
        wk_block_server_keep(t->blocks, t->job_id, &im);
    rt_stage_image_clear(&im);
    wk_trainer_msg m;
    wk_trainer_report_init(t, step, &m);
    m.report.loss = last->loss;
    m.report.has_loss = last->has_loss;
    m.report.checkpoint_step = last->checkpoint_step;
    m.report.parked = 1;
    wk_trainer_push(t, &m);
    SC_LOG_INFO(LOG, "job %s stage %u replica %u: paused after step %llu for a move", t->job_id,
                t->stage, t->replica, (unsigned long long)step);
    pthread_mutex_lock(&t->lock);
    while (!atomic_load(&t->stop) && atomic_load(&t->pause_after) != 0 &&
           atomic_load(&t->pause_after) <= step)
        pthread_cond_wait(&t->resume, &t->lock);
    pthread_mutex_unlock(&t->lock);
    if (!atomic_load(&t->stop))
        SC_LOG_INFO(LOG, "job %s stage %u: resumed after step %llu (next pause: %llu)", t->job_id,
                    t->stage, (unsigned long long)step,
                    (unsigned long long)atomic_load(&t->pause_after));
    return !atomic_load(&t->stop);
}

void wk_trainer_pause(wk_trainer *t, uint64_t after_step)
{
    pthread_mutex_lock(&t->lock);
    atomic_store(&t->pause_after, after_step);
    pthread_cond_broadcast(&t->resume);
    pthread_mutex_unlock(&t->lock);
}

/* The worker's CFS quota as the reports give it, read again at most every QUOTA_READ_S (it can
 * change while the job runs: a container's limit, the lab's `lab set`; a few small files per
 * read). fraction 0: no quota, or one at or above the CPU threads, which never holds the
 * threads back. */
#define QUOTA_READ_S 0.02
typedef struct {
    double read_s, cores, fraction, period_s;
} cpu_quota;

static void quota_now(cpu_quota *q)
{
    double now = sc_clock_now_s();
    if (q->read_s > 0 && now - q->read_s < QUOTA_READ_S)
        return;
    q->read_s = now;
    if (!kn_cpu_quota_binding(&q->fraction, &q->cores, &q->period_s))
        q->cores = q->fraction = q->period_s = 0;
}

void wk_trainer_train(wk_trainer *t)
{
    sc_err err;
    sc_err_clear(&err);
    if (connect_all(t, &err) != SC_OK) {
        wk_trainer_push_error(t, err.code, "connecting the data plane: %s", err.msg);
        return;
    }
    if (t->resume_step > 0 && wk_trainer_resume(t, &err) != SC_OK) {
        /* told to stop while taking its state over (the fetch is cancelled): nothing to say */
        if (!atomic_load(&t->stop))
            wk_trainer_push_resume_error(t, &err);
        return;
    }
    uint64_t last_ckpt = t->last_checkpoint;
    char ckpt_error[400] = ""; /* why the latest checkpoint failed, "" when it was written */
    cpu_quota quota = {0};
    for (uint64_t step = t->resume_step + 1; step <= t->steps && !atomic_load(&t->stop); step++) {
        rt_report rep;
        sc_err_clear(&err);
        if (rt_runner_step(t->runner, step, &rep, &err) != SC_OK) {
            if (!atomic_load(&t->stop))
                wk_trainer_push_error(t, err.code, "training step failed: %s", err.msg);
            return;
        }
        atomic_store(&t->iteration_us, (uint64_t)(rep.iteration_s > 0 ? rep.iteration_s * 1e6 : 0));
        if (t->hang_after > 0 && step >= t->resume_step + t->hang_after)
            wk_trainer_fault_hang_step(t, step);
        if (atomic_load(&t->stop))
            return; /* stopped while the step ran: nothing of it is saved or reported */
        bool save =
            t->checkpoint_every > 0 && (step % t->checkpoint_every == 0 || step == t->steps);
        /* An asynchronous (pipedream) pipeline keeps minibatches in flight across steps: every
         * stage drains it before a checkpoint and at the end, so both hold whole updates.
         * (A no-op for the flushing schedules.) */
        if (save || step == t->steps) {
            sc_err_clear(&err);
            if (rt_runner_flush(t->runner, NULL, &err) != SC_OK) {
                if (!atomic_load(&t->stop))
                    wk_trainer_push_error(t, err.code, "draining the pipeline failed: %s", err.msg);
                return;
            }
        }
        if (step == t->steps && t->export_dir[0] != '\0') {
            sc_err_clear(&err);
            if (rt_export_hf_stage(t->runner, (int)t->replica, (int)t->stage, (int)t->n_stages,
                                   t->export_cuts, t->export_dir, &err) != SC_OK) {
                wk_trainer_push_error(t, err.code, "export at the last step failed: %s", err.msg);
                return;
            }
        }
        if (save) {
            sc_err_clear(&err);
            if (wk_trainer_make_dirs(t->checkpoint_dir, &err) != SC_OK ||
                rt_runner_save(t->runner, t->checkpoint_dir, step, &err) != SC_OK) {
                SC_LOG_WARN(LOG, "checkpoint of step %llu not written: %s",
                            (unsigned long long)step, err.msg);
                /* the coordinator shows it in the job's status, not only this log */
                sc_strfmt(ckpt_error, sizeof ckpt_error, "step %llu not written: %s",
                          (unsigned long long)step, err.msg);
            } else {
                last_ckpt = step;
                ckpt_error[0] = '\0';
            }
            wk_copier_due(t->copier, step);
        }
        atomic_store(&t->step, step);
        wk_trainer_msg m;
        wk_trainer_report_init(t, step, &m);
        m.report.loss = rep.has_loss ? rep.loss : 0;
        m.report.has_loss = rep.has_loss;
        m.report.iteration_s = rep.iteration_s;
        m.report.busy_s = rep.busy_s;
        m.report.memory_bytes = rep.memory_bytes;
        m.report.loss_scale = rep.loss_scale;
        m.report.skipped_steps = rep.skipped_steps;
        m.report.forward_s = rep.forward_s;
        m.report.backward_s = rep.backward_s;
        m.report.samples_per_s = rep.samples_per_s;
        /* a quota changed while the stage runs (a resize): the kernels' threads follow it */
        int threads_now = kn_cpu_threads_follow_quota();
        if (threads_now > 0)
            SC_LOG_INFO("trainer",
                        "job %s stage %d: the CPU quota changed; the kernels use %d thread%s "
                        "from step %llu",
                        t->job_id, t->stage, threads_now, threads_now == 1 ? "" : "s",
                        (unsigned long long)step + 1);
        quota_now(&quota);
        if (quota.fraction > 0) {
            /* the compute's CPU at the quota's pace: its threads, held to `fraction` of their
             * speed, take busy_cpu_s / fraction sustained */
            m.report.quota_busy_s = rep.busy_cpu_s / quota.fraction;
            m.report.cpu_quota_fraction = quota.fraction;
            m.report.cpu_quota_period_s = quota.period_s;
        }
        m.report.checkpoint_step = last_ckpt;
        wk_trainer_report_copies(t, &m.report);
        wk_trainer_report_links(&rep, &m.report);
        wk_trainer_report_reduce(&rep, &m.report);
        if (ckpt_error[0] != '\0') {
            char *copy = strdup(ckpt_error);
            if (copy != NULL)
                m.report.checkpoint_error = copy;
        }
        if (rep.n_blocks > 0 && rep.grad_sq_norms) {
            m.report.grad_l1_per_block = malloc((size_t)rep.n_blocks * sizeof(double));
            if (m.report.grad_l1_per_block) {
                memcpy(m.report.grad_l1_per_block, rep.grad_sq_norms,
                       (size_t)rep.n_blocks * sizeof(double));
                m.report.n_grad_l1_per_block = (size_t)rep.n_blocks;
            }
        }
        Stagecraft__IterationReport last = m.report;
        wk_trainer_push(t, &m);
        if (!maybe_pause(t, step, &last))
            return;
    }
    return;
}
