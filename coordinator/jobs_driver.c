/*
 * The job driver: takes each job from submitted (or recovering) through profiling to planned,
 * and assigns the planned stages to the workers (the steps are in jobs_workers.c,
 * jobs_dispatch.c and jobs_transports.c; this file sequences them and decides what a failure
 * means for the job).
 *
 * It holds c->lock only to read and write the registry and the store, never during a network
 * call: a worker that stops answering mid-profile costs one call's deadline, after which the
 * job goes back to submitted with the reason recorded and is retried with the workers then
 * alive, up to MAX_PROFILE_FAILURES failed rounds in a row; a model that does not fit fails at
 * once. Waiting jobs are retried when a worker registers or after a backoff.
 *
 * Each job is driven on a thread of its own (at most COORD_MAX_DRIVING at once, one per job),
 * so that one job's silent worker does not hold up the jobs of other workers for that
 * deadline. Jobs do not compete for workers: coord_jobs_choose_workers reserves them under
 * c->lock, in submission order (jobs_workers.c).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/coord_internal.h"
#include "coordinator/freezing.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/jobspec.h"
#include "coordinator/planning.h"
#include "coordinator/speeds.h"

#define LOG "jobs"
#define RETRY_MS 2000
#define MAX_RETRY_ENTRIES 256
/* Failed profiling rounds in a row after which a job fails instead of being retried: a failure
 * that repeats this often is the job's own (a model a worker cannot build or run). */
#define MAX_PROFILE_FAILURES 5

/* Driver-local: when each waiting job may be tried again, and how many of its profiling rounds
 * in a row failed. */
typedef struct {
    char job_id[COORD_ID_MAX];
    uint64_t not_before_ns;
    unsigned profile_failures;
} retry_entry;

/* Shared by the driver threads: every retry_* function takes `lock` (a leaf lock: nothing else
 * is taken while it is held). */
typedef struct {
    pthread_mutex_t lock;
    retry_entry e[MAX_RETRY_ENTRIES];
    size_t n;
} retry_table;

static retry_entry *retry_find(retry_table *t, const char *id)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->e[i].job_id, id) == 0)
            return &t->e[i];
    return NULL;
}

static uint64_t retry_time(retry_table *t, const char *id)
{
    pthread_mutex_lock(&t->lock);
    const retry_entry *e = retry_find(t, id);
    uint64_t at = e != NULL ? e->not_before_ns : 0;
    pthread_mutex_unlock(&t->lock);
    return at;
}

/* The entry of `id`, made when missing. A full table forgets the entry due soonest among those
 * without failures (at worst that job is retried early), else the one due soonest. */
static retry_entry *retry_entry_of(retry_table *t, const char *id)
{
    retry_entry *e = retry_find(t, id);
    if (e != NULL)
        return e;
    if (t->n == MAX_RETRY_ENTRIES) {
        size_t victim = 0;
        for (size_t i = 1; i < t->n; i++) {
            const retry_entry *a = &t->e[i], *b = &t->e[victim];
            bool a_clean = a->profile_failures == 0, b_clean = b->profile_failures == 0;
            if (a_clean != b_clean ? a_clean : a->not_before_ns < b->not_before_ns)
                victim = i;
        }
        t->e[victim] = t->e[--t->n];
    }
    e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    sc_strlcpy(e->job_id, id, sizeof e->job_id);
    return e;
}

static void retry_later(retry_table *t, const char *id, uint64_t delay_ms)
{
    pthread_mutex_lock(&t->lock);
    retry_entry_of(t, id)->not_before_ns = sc_clock_now_ns() + delay_ms * 1000000ull;
    pthread_mutex_unlock(&t->lock);
}

/* Counts a failed profiling round of `id`; returns how many failed in a row. */
static unsigned retry_profile_failed(retry_table *t, const char *id)
{
    pthread_mutex_lock(&t->lock);
    unsigned n = ++retry_entry_of(t, id)->profile_failures;
    pthread_mutex_unlock(&t->lock);
    return n;
}

static void retry_profile_ok(retry_table *t, const char *id)
{
    pthread_mutex_lock(&t->lock);
    retry_entry *e = retry_find(t, id);
    if (e != NULL)
        e->profile_failures = 0;
    pthread_mutex_unlock(&t->lock);
}

/* Moves a job to `to` unless it was cancelled meanwhile (then frees its workers). Takes the
 * lock. Returns false when the job is no longer ours to drive. */
static bool move_job(coord *c, const char *id, coord_job_state to, const char *reason)
{
    sc_err err;
    sc_err_clear(&err);
    pthread_mutex_lock(&c->lock);
    sc_status rc = coord_store_job_transition(c->store, id, to, reason, &err);
    if (rc != SC_OK || coord_job_state_terminal(to) || to == COORD_JOB_SUBMITTED ||
        to == COORD_JOB_RECOVERING)
        coord_jobs_release_workers(c, id);
    pthread_mutex_unlock(&c->lock);
    if (rc != SC_OK) {
        SC_LOG_INFO(LOG, "job %s: %s", id, err.msg);
        return false;
    }
    SC_LOG_INFO(LOG, "job %s is %s: %s", id, coord_job_state_name(to), reason);
    return true;
}

/* Keeps the freshly measured profiles in the job's speed model (takes the lock). */
static void keep_profiles(coord *c, const char *id, const coord_chosen_worker *ws, size_t n)
{
    const char **ids = calloc(n ? n : 1, sizeof *ids), **profiles = calloc(n ? n : 1, sizeof *ids);
    double *links = calloc(n ? n : 1, sizeof *links);
    if (ids != NULL && profiles != NULL && links != NULL) {
        for (size_t i = 0; i < n; i++) {
            ids[i] = ws[i].id;
            profiles[i] = ws[i].profile_json;
            links[i] = ws[i].link_bytes_per_s;
        }
        pthread_mutex_lock(&c->lock);
        coord_speeds_keep(&c->speeds, id, ids, profiles, links, n);
        coord_jobs_note_probes(c, ws, n);
        pthread_mutex_unlock(&c->lock);
    }
    free(ids);
    free(profiles);
    free(links);
}

/* Under c->lock: whether rebalancing job `id` still trains on to its pause step (not every
 * stage paused yet): the move is not the driver's until then. */
static bool still_pausing(coord *c, const char *id)
{
    const coord_progress *p = coord_jobs_progress(c, id);
    return p != NULL && p->pause_step != 0 && !coord_jobs_pause_done(p);
}

static void drive_job(coord *c, retry_table *retry, const char *id)
{
    sc_err err;
    sc_err_clear(&err);
    coord_job job;
    coord_jobspec spec;
    coord_chosen_worker *ws = NULL;
    size_t n = 0;      /* workers chosen: spec.workers (an elastic job: from its least up) */
    bool *used = NULL; /* [n]: the chosen workers the plan runs on */
    json_t *plan_now = NULL;
    char *plan_json = NULL, reason[COORD_REASON_MAX];

    pthread_mutex_lock(&c->lock);
    if (coord_store_job_get(c->store, id, &job, &err) != SC_OK) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    if (job.state == COORD_JOB_RUNNING) { /* speeds to measure or a change to evaluate */
        coord_job_clear(&job);
        pthread_mutex_unlock(&c->lock);
        coord_jobs_rebalance_tick(c, id);
        return;
    }
    if (job.state != COORD_JOB_SUBMITTED && job.state != COORD_JOB_RECOVERING &&
        job.state != COORD_JOB_REBALANCING) {
        coord_job_clear(&job);
        pthread_mutex_unlock(&c->lock);
        return;
    }
    /* A rebalance resumes from the step every stage paused after, whose state the paused
     * workers keep; anything else from the last complete checkpoint. */
    bool rebalancing = job.state == COORD_JOB_REBALANCING;
    uint64_t last_checkpoint = job.last_checkpoint_step;
    /* the frozen prefix: the policy's, or the last plan's when the coordinator restarted */
    int frozen = coord_freezing_frozen(c->freezing, id);
    if (frozen == 0 && job.plan_json != NULL) {
        json_t *before = json_loads(job.plan_json, 0, NULL);
        frozen = (int)json_integer_value(json_object_get(before, "frozen_blocks"));
        json_decref(before);
    }
    double decided_s = 0, plan_s = 0;
    if (rebalancing && still_pausing(c, id)) { /* woken early: its stages pause first */
        coord_job_clear(&job);
        pthread_mutex_unlock(&c->lock);
        return;
    }
    if (rebalancing) {
        coord_progress *p = coord_jobs_progress(c, id);
        if (p == NULL || p->pause_step == 0) {
            coord_job_clear(&job);
            pthread_mutex_unlock(&c->lock);
            move_job(c, id, COORD_JOB_RECOVERING,
                     "the rebalance lost track of its paused stages; resuming from the last "
                     "checkpoint");
            return;
        }
        job.last_checkpoint_step = p->pause_step;
        decided_s = p->decided_s;
        plan_s = p->plan_s;
    }
    sc_status rc = coord_jobspec_parse(id, job.spec_json, strlen(job.spec_json), &spec, &err);
    char *spec_json = job.spec_json; /* kept for the workers; freed at the end */
    job.spec_json = NULL;
    uint64_t resume_step = job.last_checkpoint_step;
    /* Why the job waits keeps why it got here ("worker w-2 died; waiting for ..."). */
    char cause[COORD_REASON_MAX];
    sc_strlcpy(cause, job.reason, sizeof cause);
    char *waiting = strstr(cause, "; waiting");
    if (waiting)
        *waiting = '\0';
    else if (strncmp(cause, "waiting", 7) == 0 || job.state == COORD_JOB_SUBMITTED)
        cause[0] = '\0';
    coord_job_clear(&job);
    if (rc != SC_OK) {
        pthread_mutex_unlock(&c->lock);
        move_job(c, id, COORD_JOB_FAILED, err.msg);
        free(spec_json);
        return;
    }
    rc = coord_jobs_choose_workers(c, id, &spec, &ws, &n, &err);
    if (rc != SC_OK) {
        if (cause[0])
            sc_strfmt(reason, sizeof reason, "%s; %s", cause, err.msg);
        else
            sc_strlcpy(reason, err.msg, sizeof reason);
        coord_store_job_set_reason(c->store, id, reason, NULL);
        pthread_mutex_unlock(&c->lock);
        retry_later(retry, id, RETRY_MS);
        coord_jobspec_clear(&spec);
        free(spec_json);
        return;
    }
    coord_jobs_group_by_host(ws, n);
    char ids[COORD_REASON_MAX] = "";
    for (size_t i = 0; i < n; i++) {
        size_t used = strlen(ids);
        snprintf(ids + used, sizeof ids - used, "%s%s", i ? "," : "", ws[i].id);
    }
    coord_store_job_set_workers(c->store, id, ids, NULL);
    /* a rebalance plans with the speed model (profiles scaled by what reports measured): no
     * profiling unless a worker is new to the job */
    bool known = rebalancing;
    for (size_t i = 0; i < n && known; i++) {
        ws[i].profile_json = coord_speeds_profile(c->speeds, id, ws[i].id, &ws[i].link_bytes_per_s);
        known = ws[i].profile_json != NULL;
    }
    for (size_t i = 0; i < n; i++) /* what the job's copies measured of their all-reduce */
        ws[i].reduce_bytes_per_s = coord_speeds_reduce_bw(c->speeds, id, ws[i].id);
    /* a worker that profiled this model for an earlier job, as it is registered now, is not
     * profiled again (its link is still probed) */
    char reused[COORD_REASON_MAX] = "";
    bool *fresh = known ? NULL : calloc(n ? n : 1, sizeof *fresh);
    if (fresh != NULL) {
        coord_jobs_profiles_cached(c, &spec, ws, n, reused, sizeof reused);
        for (size_t i = 0; i < n; i++)
            fresh[i] = ws[i].profile_json == NULL;
    }
    pthread_mutex_unlock(&c->lock);

    /* a model that cannot fit is refused from its memory model, before a worker holds it */
    rc = coord_jobs_check_fit(&spec, ws, n, &err);
    if (rc != SC_OK) {
        move_job(c, id, COORD_JOB_FAILED, err.msg); /* retrying cannot help */
        goto out;
    }
    if (known)
        goto planning;
    sc_strfmt(reason, sizeof reason, "profiling the model on %s%s%s", ids,
              reused[0] ? "; profiles reused: " : "", reused);
    if (!move_job(c, id, COORD_JOB_PROFILING, reason)) {
        free(fresh);
        goto out;
    }
    rc = coord_jobs_profile_all(c, &spec, id, ws, n, &err);
    if (rc == SC_OK && fresh != NULL)
        coord_jobs_profiles_keep(c, &spec, id, ws, n, fresh);
    free(fresh);
    if (rc == SC_ERR_INVALID || rc == SC_ERR_PARSE || rc == SC_ERR_UNSUPPORTED) {
        move_job(c, id, COORD_JOB_FAILED, err.msg); /* retrying cannot help */
        goto out;
    }
    if (rc == SC_ERR_NOMEM || rc == SC_ERR_TOO_LARGE) {
        /* the model (or its micro-batch) does not fit the worker's memory: no retry fits it */
        sc_strfmt(reason, sizeof reason,
                  "the model does not fit on a worker (retrying cannot help): %s", err.msg);
        move_job(c, id, COORD_JOB_FAILED, reason);
        goto out;
    }
    if (rc != SC_OK) {
        unsigned failures = retry_profile_failed(retry, id);
        if (failures >= MAX_PROFILE_FAILURES) {
            sc_strfmt(reason, sizeof reason, "profiling failed %u times in a row; the last: %s",
                      failures, err.msg);
            move_job(c, id, COORD_JOB_FAILED, reason);
            goto out;
        }
        sc_strfmt(reason, sizeof reason,
                  "%s; retrying (failed profiling rounds in a row: %u of %d)", err.msg, failures,
                  MAX_PROFILE_FAILURES);
        move_job(c, id, COORD_JOB_SUBMITTED, reason);
        retry_later(retry, id, RETRY_MS);
        goto out;
    }
    retry_profile_ok(retry, id);
    keep_profiles(c, id, ws, n);
planning:;
    double assign_t0 = sc_clock_now_s();
    coord_plan_worker *pw = calloc(n, sizeof *pw);
    if (pw == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        pw[i].id = ws[i].id;
        pw[i].hw = ws[i].hw;
        pw[i].profile_json = ws[i].profile_json;
        pw[i].link_bytes_per_s = ws[i].link_bytes_per_s;
        pw[i].reduce_bytes_per_s = ws[i].reduce_bytes_per_s;
    }
    rc = coord_plan_job(&spec, pw, n, frozen, &plan_json, &err);
    free(pw);
    if (rc == SC_OK)
        rc = coord_jobs_add_transports(&spec, ws, n, &plan_json, &err);
    used = calloc(n, sizeof *used);
    if (rc == SC_OK && used == NULL)
        rc = SC_ERRF(&err, SC_ERR_NOMEM, "out of memory reading the plan");
    if (rc == SC_OK)
        rc = coord_jobs_plan_workers_used(plan_json, n, used, &err);
    if (rc != SC_OK) {
        move_job(c, id, COORD_JOB_FAILED, err.msg);
        goto out;
    }
    coord_jobs_release_unplanned(c, id, ws, n, used);
    pthread_mutex_lock(&c->lock);
    rc = coord_store_job_set_plan(c->store, id, plan_json, &err);
    pthread_mutex_unlock(&c->lock);
    if (rc != SC_OK) {
        move_job(c, id, COORD_JOB_FAILED, err.msg);
        goto out;
    }
    plan_now = json_loads(plan_json, 0, NULL);
    char frozen_note[64] = "";
    if (frozen > 0)
        sc_strfmt(frozen_note, sizeof frozen_note, ", blocks 0-%d frozen", frozen - 1);
    sc_strfmt(reason, sizeof reason,
              "planned with %s, schedule %s%s: %zu stage(s), predicted %.4g s per iteration%s%s",
              json_string_value(json_object_get(plan_now, "strategy")),
              json_string_value(json_object_get(plan_now, "schedule")),
              strcmp(spec.schedule, "auto") == 0 ? " (auto: the fastest predicted)" : "",
              json_array_size(json_object_get(plan_now, "stages")),
              json_number_value(json_object_get(plan_now, "iteration_time_s")),
              rebalancing ? " (measured speeds)" : "", frozen_note);
    if (!move_job(c, id, COORD_JOB_PLANNED, reason))
        goto out;
    json_t *endpoints = json_array();
    rc = coord_jobs_assign_all(c, &spec, spec_json, id, plan_json, resume_step, ws, n, endpoints,
                               &err);
    if (rc == SC_ERR_INVALID || rc == SC_ERR_UNSUPPORTED || rc == SC_ERR_PARSE || rc == SC_ERR_IO ||
        rc == SC_ERR_NOT_FOUND || rc == SC_ERR_VERSION || rc == SC_ERR_TOO_LARGE) {
        /* a bad spec, or data a worker cannot read: re-planning would hit the same wall (a token
         * shard of another version, a data file over the size limit, a stage over the worker's
         * memory were re-planned every few seconds for good) */
        json_decref(endpoints);
        move_job(c, id, COORD_JOB_FAILED, err.msg);
        goto out;
    }
    if (rc != SC_OK) {
        json_decref(endpoints);
        sc_strfmt(reason, sizeof reason, "%s; re-planning", err.msg);
        move_job(c, id, COORD_JOB_RECOVERING, reason);
        retry_later(retry, id, RETRY_MS);
        goto out;
    }
    char *why = NULL;
    if (rebalancing) {
        why = reason;
        sc_strfmt(reason, sizeof reason,
                  "rebalanced after step %llu to %zu stage(s)%s, predicted %.4g s per iteration "
                  "(%.2f s after the decision; planned in %.1f ms, stages assigned in %.2f s)",
                  (unsigned long long)resume_step,
                  json_array_size(json_object_get(plan_now, "stages")), frozen_note,
                  json_number_value(json_object_get(plan_now, "iteration_time_s")),
                  sc_clock_now_s() - decided_s, 1e3 * plan_s, sc_clock_now_s() - assign_t0);
    }
    coord_jobs_start_training(c, id, &spec, plan_json, endpoints, resume_step, last_checkpoint, why,
                              ws, n, used);
    json_decref(endpoints);
out:
    json_decref(plan_now);
    free(used);
    free(spec_json);
    free(plan_json);
    coord_jobs_chosen_free(ws, n);
    coord_jobspec_clear(&spec);
}

/* Under c->lock: whether a driver thread has job `id`. */
static bool is_driving(const coord *c, const char *id)
{
    for (size_t i = 0; i < c->n_driving; i++)
        if (strcmp(c->driving[i], id) == 0)
            return true;
    return false;
}

/* Under c->lock: the next job that needs the driver and has no driver thread yet, if any. */
static bool next_job(coord *c, retry_table *retry, char *id, size_t size)
{
    coord_job *jobs;
    size_t n;
    sc_err err;
    sc_err_clear(&err);
    if (coord_store_job_list(c->store, &jobs, &n, &err) != SC_OK)
        return false;
    uint64_t now = sc_clock_now_ns();
    bool found = false;
    for (size_t i = 0; i < n && !found; i++) {
        if ((jobs[i].state == COORD_JOB_SUBMITTED || jobs[i].state == COORD_JOB_RECOVERING ||
             (jobs[i].state == COORD_JOB_REBALANCING && !still_pausing(c, jobs[i].id))) &&
            !is_driving(c, jobs[i].id) && retry_time(retry, jobs[i].id) <= now) {
            sc_strlcpy(id, jobs[i].id, size);
            found = true;
        }
    }
    coord_job_list_free(&jobs, n);
    if (!found && coord_jobs_rebalance_wanted(c, id, size) && !is_driving(c, id))
        found = true;
    return found;
}

/* After a restart: jobs caught mid-profile go back to submitted; planned jobs keep their
 * workers reserved for when they return. */
static void resume_jobs(coord *c)
{
    coord_job *jobs;
    size_t n;
    sc_err err;
    sc_err_clear(&err);
    pthread_mutex_lock(&c->lock);
    if (coord_store_job_list(c->store, &jobs, &n, &err) != SC_OK) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        coord_job *j = &jobs[i];
        if (j->state == COORD_JOB_PROFILING) {
            coord_store_job_transition(c->store, j->id, COORD_JOB_SUBMITTED,
                                       "the coordinator restarted during profiling", NULL);
            continue;
        }
        if (j->state == COORD_JOB_RUNNING || j->state == COORD_JOB_PLANNED ||
            j->state == COORD_JOB_REBALANCING) {
            /* its workers' progress was not kept: re-plan and resume from the last checkpoint */
            coord_store_job_transition(c->store, j->id, COORD_JOB_RECOVERING,
                                       "the coordinator restarted; resuming from the last "
                                       "checkpoint",
                                       NULL);
            continue;
        }
        if (coord_job_state_terminal(j->state) || j->worker_ids == NULL)
            continue;
        char *save = NULL;
        for (char *w = strtok_r(j->worker_ids, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
            coord_worker *cw = coord_registry_find(c->registry, w);
            if (cw)
                sc_strlcpy(cw->job_id, j->id, sizeof cw->job_id);
        }
    }
    coord_job_list_free(&jobs, n);
    pthread_mutex_unlock(&c->lock);
}

typedef struct {
    coord *c;
    retry_table *retry;
    char id[COORD_ID_MAX];
} drive_arg;

/* One job's driver thread (detached): drives it once, then leaves the driving set. */
static void *drive_main(void *arg)
{
    drive_arg *a = arg;
    coord *c = a->c;
    drive_job(c, a->retry, a->id);
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->n_driving; i++) {
        if (strcmp(c->driving[i], a->id) == 0) {
            memcpy(c->driving[i], c->driving[--c->n_driving], COORD_ID_MAX);
            break;
        }
    }
    free(a);
    /* wakes the loop: this job may need driving again, and a stopping loop waits for us */
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Under c->lock: starts a driver thread for job `id`. False when none could be started (the
 * caller drives the job itself). */
static bool drive_async(coord *c, retry_table *retry, const char *id)
{
    drive_arg *a = calloc(1, sizeof *a);
    if (a == NULL)
        return false;
    a->c = c;
    a->retry = retry;
    sc_strlcpy(a->id, id, sizeof a->id);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    bool ok = pthread_create(&t, &attr, drive_main, a) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) {
        free(a);
        return false;
    }
    sc_strlcpy(c->driving[c->n_driving++], id, COORD_ID_MAX);
    return true;
}

void *coord_driver_main(void *arg)
{
    coord *c = arg;
    retry_table *retry = calloc(1, sizeof *retry);
    if (retry == NULL)
        return NULL;
    pthread_mutex_init(&retry->lock, NULL);
    resume_jobs(c);
    pthread_mutex_lock(&c->lock);
    while (!c->stopping) {
        char id[COORD_ID_MAX];
        if (c->n_driving == COORD_MAX_DRIVING || !next_job(c, retry, id, sizeof id)) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 200 * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&c->wake, &c->lock, &until);
            continue;
        }
        if (drive_async(c, retry, id))
            continue;
        pthread_mutex_unlock(&c->lock);
        drive_job(c, retry, id);
        pthread_mutex_lock(&c->lock);
    }
    /* the driver threads use c and the retry table until they leave the driving set */
    while (c->n_driving > 0)
        pthread_cond_wait(&c->wake, &c->lock);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_destroy(&retry->lock);
    free(retry);
    return NULL;
}
