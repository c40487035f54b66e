/*
 * Which workers a job takes. Under c->lock, a job reserves spec->workers alive, free workers
 * (by name when the spec names them) by writing its id into their registry entries, in
 * submission order: a job leaves alone the workers that an older job waiting for workers would
 * take now (an older job that the free workers cannot satisfy holds up no one), so which job
 * gets contended workers does not depend on which driver thread comes first. Once the job is
 * planned, the chosen workers its plan does not use go back to the pool.
 *
 * It makes no network call (jobs_dispatch.c does) and does not change a job's state (the
 * driver does).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/jobspec.h"

#define LOG "jobs"

void coord_jobs_chosen_free(coord_chosen_worker *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (w[i].hw)
            stagecraft__hardware_report__free_unpacked(w[i].hw, NULL);
        free(w[i].profile_json);
    }
    free(w);
}

static bool wanted(const coord_jobspec *spec, const coord_worker *w)
{
    if (spec->worker_names == NULL)
        return true;
    for (char **p = spec->worker_names; *p; p++)
        if (strcmp(*p, w->rec.name) == 0)
            return true;
    return false;
}

/* Under c->lock: whether registry worker `w` could serve a job wanting `spec`: alive, not
 * stuck (it says a stage it was told to stop still runs: a step that does not return) nor
 * still profiling for a job that let it go, wanted
 * (by name, when the job names its workers), with a hardware report that has devices. Who
 * holds it is the caller's check. */
static bool usable(const coord_jobspec *spec, const coord_worker *w)
{
    if (w->state != COORD_WORKER_ALIVE || w->leaving || !wanted(spec, w) ||
        w->rec.hardware_len == 0 || strcmp(w->reported_state, "stuck") == 0)
        return false;
    /* still profiling for a job that let it go (a profile cannot be interrupted): busy, though
     * no job holds it; a job that took it would only hear "already profiling" */
    if (w->job_id[0] == '\0' && strcmp(w->reported_state, "profiling") == 0)
        return false;
    Stagecraft__HardwareReport *hw =
        stagecraft__hardware_report__unpack(NULL, w->rec.hardware_len, w->rec.hardware);
    bool ok = hw != NULL && hw->n_devices > 0;
    if (hw)
        stagecraft__hardware_report__free_unpacked(hw, NULL);
    return ok;
}

/* Under c->lock: the registry indices (into idx, at most spec->workers) of the first workers
 * job `job_id` could take: usable, free or already its own, and not `taken` (NULL: none is).
 * Returns how many. */
static size_t pick_workers(coord *c, const char *job_id, const coord_jobspec *spec,
                           const bool *taken, size_t *idx)
{
    size_t have = 0, total = coord_registry_count(c->registry);
    for (size_t i = 0; i < total && have < spec->workers; i++) {
        const coord_worker *w = coord_registry_at(c->registry, i);
        if ((taken == NULL || !taken[i]) && (!w->job_id[0] || strcmp(w->job_id, job_id) == 0) &&
            usable(spec, w))
            idx[have++] = i;
    }
    return have;
}

/* Under c->lock: whether job `job_id` holds any worker. */
static bool holds_workers(coord *c, const char *job_id)
{
    size_t total = coord_registry_count(c->registry);
    for (size_t i = 0; i < total; i++)
        if (strcmp(coord_registry_at(c->registry, i)->job_id, job_id) == 0)
            return true;
    return false;
}

/* Under c->lock: jobs take workers in submission order. Goes through the jobs submitted before
 * `job_id` that wait for workers (submitted or recovering, holding none) and marks in `taken`
 * (one per registry worker) those that each would take, in that order, when the workers free
 * now and not taken by an earlier one satisfy it; a job they do not satisfy takes nothing, so
 * it holds up no later job. `first` gets the first such job that takes a worker `spec` could
 * use ("" when none). */
static void taken_by_older(coord *c, const char *job_id, const coord_jobspec *spec, bool *taken,
                           char *first, size_t first_size)
{
    first[0] = '\0';
    coord_job *jobs;
    size_t n;
    if (coord_store_job_list(c->store, &jobs, &n, NULL) != SC_OK)
        return;
    size_t *idx = NULL, idx_cap = 0;
    for (size_t j = 0; j < n && strcmp(jobs[j].id, job_id) != 0; j++) {
        if ((jobs[j].state != COORD_JOB_SUBMITTED && jobs[j].state != COORD_JOB_RECOVERING) ||
            jobs[j].spec_json == NULL || holds_workers(c, jobs[j].id))
            continue;
        coord_jobspec older;
        if (coord_jobspec_parse(jobs[j].id, jobs[j].spec_json, strlen(jobs[j].spec_json), &older,
                                NULL) != SC_OK)
            continue; /* its driver fails it */
        if (older.workers > idx_cap) {
            size_t *grown = realloc(idx, older.workers * sizeof *idx);
            if (grown == NULL) {
                coord_jobspec_clear(&older);
                continue;
            }
            idx = grown;
            idx_cap = older.workers;
        }
        size_t got = older.workers > 0 ? pick_workers(c, jobs[j].id, &older, taken, idx) : 0;
        if (got > 0 && got >= (older.workers_min ? older.workers_min : older.workers)) {
            for (size_t k = 0; k < got; k++) {
                taken[idx[k]] = true;
                if (!first[0] && usable(spec, coord_registry_at(c->registry, idx[k])))
                    sc_strlcpy(first, jobs[j].id, first_size);
            }
        }
        coord_jobspec_clear(&older);
    }
    free(idx);
    coord_job_list_free(&jobs, n);
}

sc_status coord_jobs_choose_workers(coord *c, const char *job_id, const coord_jobspec *spec,
                                    coord_chosen_worker **out, size_t *n_out, sc_err *err)
{
    size_t want = spec->workers, total = coord_registry_count(c->registry);
    size_t least = spec->workers_min ? spec->workers_min : want;
    coord_chosen_worker *list = calloc(want, sizeof *list);
    size_t *idx = calloc(want, sizeof *idx);
    bool *taken = calloc(total + 1, sizeof *taken);
    if (list == NULL || idx == NULL || taken == NULL) {
        free(list);
        free(idx);
        free(taken);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory choosing workers");
    }
    char older[COORD_ID_MAX];
    taken_by_older(c, job_id, spec, taken, older, sizeof older);
    size_t have = pick_workers(c, job_id, spec, taken, idx);
    free(taken);
    if (have < least) {
        size_t free_now = pick_workers(c, job_id, spec, NULL, idx);
        free(idx);
        free(list);
        if (free_now >= least && older[0])
            return SC_ERRF(err, SC_ERR_UNAVAILABLE,
                           "waiting: %s, submitted earlier, takes these workers first", older);
        return SC_ERRF(err, SC_ERR_UNAVAILABLE, "waiting for %s%zu %sworker(s): %zu alive and free",
                       least < want ? "at least " : "", least, spec->worker_names ? "named " : "",
                       free_now);
    }
    for (size_t i = 0; i < have; i++) {
        coord_worker *w = coord_registry_at(c->registry, idx[i]);
        coord_chosen_worker *cw = &list[i];
        if (!coord_jobs_chosen_fill(cw, w)) {
            coord_jobs_chosen_free(list, i);
            free(idx);
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading worker %s's hardware",
                           w->rec.id);
        }
    }
    for (size_t i = 0; i < have; i++)
        sc_strlcpy(coord_registry_at(c->registry, idx[i])->job_id, job_id, COORD_ID_MAX);
    free(idx);
    *out = list;
    *n_out = have;
    return SC_OK;
}

bool coord_jobs_chosen_fill(coord_chosen_worker *cw, const coord_worker *w)
{
    memset(cw, 0, sizeof *cw);
    sc_strlcpy(cw->id, w->rec.id, sizeof cw->id);
    sc_strlcpy(cw->name, w->rec.name, sizeof cw->name);
    sc_strlcpy(cw->endpoint, w->rec.endpoint, sizeof cw->endpoint);
    cw->hw = stagecraft__hardware_report__unpack(NULL, w->rec.hardware_len, w->rec.hardware);
    return cw->hw != NULL;
}

bool coord_worker_state_endpoint(const coord_worker *w, char *buf, size_t size)
{
    buf[0] = '\0';
    Stagecraft__HardwareReport *hw =
        w->rec.hardware_len ? stagecraft__hardware_report__unpack(NULL, w->rec.hardware_len,
                                                                  w->rec.hardware)
                            : NULL;
    if (hw != NULL && hw->state_endpoint != NULL)
        sc_strlcpy(buf, hw->state_endpoint, size);
    if (hw != NULL)
        stagecraft__hardware_report__free_unpacked(hw, NULL);
    return buf[0] != '\0';
}

void coord_jobs_group_by_host(coord_chosen_worker *ws, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t at = i + 1;
        for (size_t j = i + 1; j < n; j++) {
            if (strcmp(ws[j].hw->hostname, ws[i].hw->hostname) == 0) {
                coord_chosen_worker t = ws[j];
                memmove(&ws[at + 1], &ws[at], (j - at) * sizeof *ws);
                ws[at++] = t;
            }
        }
        i = at - 1;
    }
}

sc_status coord_jobs_plan_workers_used(const char *plan_json, size_t n, bool *used, sc_err *err)
{
    json_t *plan = json_loads(plan_json, 0, NULL);
    json_t *stages = json_object_get(plan, "stages");
    if (!json_is_array(stages)) {
        json_decref(plan);
        return SC_ERRF(err, SC_ERR_INTERNAL, "the plan has no stages array");
    }
    memset(used, 0, n * sizeof *used);
    sc_status rc = SC_OK;
    size_t si, di;
    json_t *stage, *dev;
    json_array_foreach(stages, si, stage)
    {
        json_array_foreach(json_object_get(stage, "devices"), di, dev)
        {
            json_int_t d = json_integer_value(dev);
            if (!json_is_integer(dev) || d < 0 || (size_t)d >= n) {
                rc = SC_ERRF(err, SC_ERR_INTERNAL, "stage %zu of the plan names device %lld of %zu",
                             si, (long long)d, n);
                break;
            }
            used[d] = true;
        }
    }
    json_decref(plan);
    return rc;
}

void coord_jobs_release_unplanned(coord *c, const char *id, const coord_chosen_worker *ws, size_t n,
                                  const bool *used)
{
    char kept[COORD_REASON_MAX] = "", freed[COORD_REASON_MAX] = "";
    size_t n_kept = 0;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        char *list = used[i] ? kept : freed;
        size_t at = strlen(list);
        snprintf(list + at, COORD_REASON_MAX - at, "%s%s", at ? "," : "", ws[i].id);
        if (used[i]) {
            n_kept++;
            continue;
        }
        coord_worker *w = coord_registry_find(c->registry, ws[i].id);
        if (w != NULL && strcmp(w->job_id, id) == 0)
            w->job_id[0] = '\0';
    }
    if (n_kept < n) {
        coord_store_job_set_workers(c->store, id, kept, NULL);
        pthread_cond_broadcast(&c->wake);
    }
    pthread_mutex_unlock(&c->lock);
    if (n_kept < n)
        SC_LOG_INFO(LOG,
                    "job %s: the plan uses %zu of its %zu workers (%s); %s freed for other jobs",
                    id, n_kept, n, kept, freed);
}
