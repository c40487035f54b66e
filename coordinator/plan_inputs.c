/*
 * Coordinator.GetPlanInputs (plan_inputs.h): the workers `stagecraft advise --workers` or
 * `--job` plans on, their cluster document and profile, and the coordinator's own plan of them.
 *
 * Does not search subsets or print. Invariant: the cluster and plan come from coord_cluster_json
 * and coord_plan_job on the workers in the order a job's driver plans them in (grouped by host),
 * so the client's plan of all of them is the coordinator's.
 */
#include "coordinator/plan_inputs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/jobspec.h"
#include "coordinator/planning.h"
#include "coordinator/registry.h"
#include "coordinator/speeds.h"
#include "coordinator/store.h"

/* Profiles sent by idle workers for advice are kept under this job id in the profile cache. */
#define ADVISE_JOB_ID "advise"

/* Appends "w-3 (in job job-2)" to note. */
static void note_left_out(char *note, size_t size, const char *id, const char *why)
{
    size_t used = strlen(note);
    snprintf(note + used, size - used, "%s%s (%s)", used ? ", " : "", id, why);
}

/* Under c->lock: the idle alive workers, with cached profiles of spec where there are. */
static sc_status idle_workers(coord *c, const coord_jobspec *spec, coord_chosen_worker **out,
                              size_t *n_out, char *note, size_t note_size, sc_err *err)
{
    size_t total = coord_registry_count(c->registry), n = 0;
    coord_chosen_worker *ws = calloc(total ? total : 1, sizeof *ws);
    if (ws == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < total; i++) {
        const coord_worker *w = coord_registry_at(c->registry, i);
        if (w->state != COORD_WORKER_ALIVE) {
            note_left_out(note, note_size, w->rec.id, coord_worker_state_name(w->state));
            continue;
        }
        if (w->leaving) {
            note_left_out(note, note_size, w->rec.id, "leaving");
            continue;
        }
        if (w->job_id[0] != '\0') {
            char why[COORD_ID_MAX + 16];
            snprintf(why, sizeof why, "in job %s", w->job_id);
            note_left_out(note, note_size, w->rec.id, why);
            continue;
        }
        if (!coord_jobs_chosen_fill(&ws[n], w)) {
            coord_jobs_chosen_free(ws, n + 1);
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading worker %s's hardware",
                           w->rec.id);
        }
        n++;
    }
    if (n == 0) {
        coord_jobs_chosen_free(ws, n);
        return SC_ERRF(err, SC_ERR_PRECONDITION, "no idle worker to advise on%s%s",
                       note[0] ? "; left out: " : "", note);
    }
    char reused[COORD_REASON_MAX];
    coord_jobs_profiles_cached(c, spec, ws, n, reused, sizeof reused);
    *out = ws;
    *n_out = n;
    return SC_OK;
}

/* Under c->lock: running job `id`'s workers with its speed model's profiles and links. */
static sc_status job_workers(coord *c, const char *id, coord_chosen_worker **out, size_t *n_out,
                             char **spec_json, sc_err *err)
{
    coord_job job;
    SC_CHECK(coord_store_job_get(c->store, id, &job, err));
    if (job.state != COORD_JOB_RUNNING) {
        sc_status rc = SC_ERRF(err, SC_ERR_PRECONDITION,
                               "job %s is %s; --job advises on a running job's measured speeds", id,
                               coord_job_state_name(job.state));
        coord_job_clear(&job);
        return rc;
    }
    *spec_json = job.spec_json;
    job.spec_json = NULL;
    coord_job_clear(&job);
    size_t total = coord_registry_count(c->registry), n = 0;
    coord_chosen_worker *ws = calloc(total ? total : 1, sizeof *ws);
    if (ws == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    sc_status rc = SC_OK;
    for (size_t i = 0; i < total && rc == SC_OK; i++) {
        const coord_worker *w = coord_registry_at(c->registry, i);
        if (strcmp(w->job_id, id) != 0 || w->leaving)
            continue;
        if (!coord_jobs_chosen_fill(&ws[n], w)) {
            n++;
            rc =
                SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading worker %s's hardware", w->rec.id);
            break;
        }
        ws[n].profile_json =
            coord_speeds_profile(c->speeds, id, w->rec.id, &ws[n].link_bytes_per_s);
        ws[n].reduce_bytes_per_s = coord_speeds_reduce_bw(c->speeds, id, w->rec.id);
        n++;
        if (ws[n - 1].profile_json == NULL)
            rc = SC_ERRF(err, SC_ERR_PRECONDITION,
                         "job %s has no measured profile of worker %s (the coordinator "
                         "restarted since it was profiled?)",
                         id, w->rec.id);
    }
    if (rc == SC_OK && n == 0)
        rc = SC_ERRF(err, SC_ERR_PRECONDITION, "job %s holds no worker", id);
    if (rc != SC_OK) {
        coord_jobs_chosen_free(ws, n);
        return rc;
    }
    *out = ws;
    *n_out = n;
    return SC_OK;
}

/* The workers' cluster, the coordinator's plan of spec on them, into the response. */
static sc_status answer(sc_rpc_ctx *ctx, const coord_jobspec *spec, const char *spec_json,
                        coord_chosen_worker *ws, size_t n, Stagecraft__GetPlanInputsResponse *resp,
                        sc_err *err)
{
    coord_jobs_group_by_host(ws, n); /* the order the driver plans in */
    coord_plan_worker *pw = calloc(n, sizeof *pw);
    if (pw == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        pw[i] = (coord_plan_worker){ws[i].id, ws[i].hw, ws[i].profile_json, ws[i].link_bytes_per_s,
                                    ws[i].reduce_bytes_per_s};
    char *cluster = NULL, *plan = NULL;
    sc_status rc = coord_cluster_json(pw, n, &cluster, err);
    if (rc == SC_OK)
        rc = coord_plan_job(spec, pw, n, 0, &plan, err);
    free(pw);
    if (rc == SC_OK) {
        resp->cluster_json = sc_rpc_ctx_strdup(ctx, cluster);
        resp->plan_json = sc_rpc_ctx_strdup(ctx, plan);
        resp->profile_json = sc_rpc_ctx_strdup(ctx, ws[0].profile_json);
        resp->job_json = sc_rpc_ctx_strdup(ctx, spec_json);
        resp->worker_ids = sc_rpc_ctx_alloc(ctx, n * sizeof *resp->worker_ids);
        resp->worker_names = sc_rpc_ctx_alloc(ctx, n * sizeof *resp->worker_names);
        if (resp->worker_ids == NULL || resp->worker_names == NULL)
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        for (size_t i = 0; rc == SC_OK && i < n; i++) {
            resp->worker_ids[i] = sc_rpc_ctx_strdup(ctx, ws[i].id);
            resp->worker_names[i] = sc_rpc_ctx_strdup(ctx, ws[i].name);
        }
        if (rc == SC_OK)
            resp->n_worker_ids = resp->n_worker_names = n;
    }
    free(cluster);
    free(plan);
    return rc;
}

sc_status coord_plan_inputs_answer(coord *c, sc_rpc_ctx *ctx,
                                   const Stagecraft__GetPlanInputsRequest *req,
                                   Stagecraft__GetPlanInputsResponse **out, sc_err *err)
{
    const char *job_json = req->job_json != NULL ? req->job_json : "";
    const char *job_id = req->job_id != NULL ? req->job_id : "";
    if ((job_json[0] != '\0') == (job_id[0] != '\0'))
        return SC_ERRF(err, SC_ERR_INVALID,
                       "GetPlanInputs takes either a job document (--workers) or a running "
                       "job's id (--job), not %s",
                       job_json[0] ? "both" : "neither");
    Stagecraft__GetPlanInputsResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__get_plan_inputs_response__descriptor);
    if (resp == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    coord_jobspec spec;
    memset(&spec, 0, sizeof spec);
    coord_chosen_worker *ws = NULL;
    size_t n = 0;
    char *spec_json = NULL, note[COORD_REASON_MAX] = "";
    sc_status rc;
    if (job_id[0] != '\0') {
        pthread_mutex_lock(&c->lock);
        rc = job_workers(c, job_id, &ws, &n, &spec_json, err);
        pthread_mutex_unlock(&c->lock);
        if (rc == SC_OK)
            rc = coord_jobspec_parse(job_id, spec_json, strlen(spec_json), &spec, err);
    } else {
        spec_json = strdup(job_json);
        rc = spec_json != NULL ? SC_OK : SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        if (rc == SC_OK)
            rc = coord_jobspec_parse("the job", job_json, strlen(job_json), &spec, err);
        if (rc == SC_OK) {
            pthread_mutex_lock(&c->lock);
            rc = idle_workers(c, &spec, &ws, &n, note, sizeof note, err);
            pthread_mutex_unlock(&c->lock);
        }
        bool *fresh = rc == SC_OK ? calloc(n, sizeof *fresh) : NULL;
        if (rc == SC_OK && fresh == NULL)
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        for (size_t i = 0; rc == SC_OK && i < n; i++)
            fresh[i] = ws[i].profile_json == NULL;
        if (rc == SC_OK)
            rc = coord_jobs_profile_all(c, &spec, ADVISE_JOB_ID, ws, n, err);
        if (rc == SC_OK)
            coord_jobs_profiles_keep(c, &spec, ADVISE_JOB_ID, ws, n, fresh);
        free(fresh);
    }
    if (rc == SC_OK)
        rc = answer(ctx, &spec, spec_json, ws, n, resp, err);
    if (rc == SC_OK)
        resp->note = sc_rpc_ctx_strdup(ctx, note);
    coord_jobs_chosen_free(ws, n);
    coord_jobspec_clear(&spec);
    free(spec_json);
    if (rc == SC_OK)
        *out = resp;
    return rc;
}
