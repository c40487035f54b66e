/*
 * Where a job's checkpoint can be taken from, for `stagecraft export JOB` (GetCheckpoint): the
 * step (the job's last complete checkpoint, or one the client names at or before it), the
 * model, and per stage of the job's plan the block servers to ask, the stage's own workers
 * first, then every other worker that serves blocks (one of them may hold a copy, or the stage's
 * blocks from before a move).
 *
 * Not here: moving the weights (the client asks the workers' block servers, block_fetch.h) and
 * writing the folder (the client, kernels/hf_model.h). The coordinator holds no weights.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobs.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/jobspec.h"

static void add_source(json_t *list, const coord_worker *w)
{
    char endpoint[COORD_NAME_MAX];
    if (!coord_worker_state_endpoint(w, endpoint, sizeof endpoint))
        return;
    json_array_append_new(list, json_pack("{s:s, s:s, s:s}", "worker_id", w->rec.id, "endpoint",
                                          endpoint, "state", coord_worker_state_name(w->state)));
}

static bool names(json_t *ids, const char *id)
{
    size_t k;
    json_t *v;
    json_array_foreach(ids, k, v) if (json_string_value(v) &&
                                      strcmp(json_string_value(v), id) == 0) return true;
    return false;
}

/* Under c->lock: the stages of `plan` with their sources (see the file comment). */
static json_t *stage_sources(coord *c, json_t *plan)
{
    json_t *out = json_array();
    size_t s;
    json_t *st;
    json_array_foreach(json_object_get(plan, "stages"), s, st)
    {
        json_t *ids = json_object_get(st, "worker_ids"), *list = json_array();
        size_t k;
        json_t *id;
        json_array_foreach(ids, k, id)
        {
            const coord_worker *w = json_string_value(id)
                                        ? coord_registry_find(c->registry, json_string_value(id))
                                        : NULL;
            if (w != NULL)
                add_source(list, w);
        }
        for (size_t i = 0; i < coord_registry_count(c->registry); i++) {
            const coord_worker *w = coord_registry_at(c->registry, i);
            if (w->state != COORD_WORKER_DEAD && !names(ids, w->rec.id))
                add_source(list, w);
        }
        json_array_append_new(
            out, json_pack("{s:i, s:I, s:I, s:o}", "stage", (int)s, "first_block",
                           json_integer_value(json_object_get(st, "first_block")), "last_block",
                           json_integer_value(json_object_get(st, "last_block")), "sources", list));
    }
    return out;
}

sc_status coord_jobs_checkpoint_source(coord *c, const char *job_id, uint64_t step, json_t **out,
                                       sc_err *err)
{
    *out = NULL;
    coord_job job;
    pthread_mutex_lock(&c->lock);
    sc_status rc = coord_store_job_get(c->store, job_id, &job, err);
    pthread_mutex_unlock(&c->lock);
    if (rc == SC_ERR_NOT_FOUND) {
        sc_err_clear(err);
        return SC_ERRF(err, SC_ERR_NOT_FOUND, "no job '%s' (stagecraft status lists the jobs)",
                       job_id);
    }
    SC_CHECK(rc);
    coord_jobspec spec;
    rc = coord_jobspec_parse(job_id, job.spec_json ? job.spec_json : "",
                             job.spec_json ? strlen(job.spec_json) : 0, &spec, err);
    if (rc != SC_OK) {
        coord_job_clear(&job);
        return rc;
    }
    json_t *plan = job.plan_json && job.plan_json[0] ? json_loads(job.plan_json, 0, NULL) : NULL;
    if (strcmp(spec.model_kind, "hf") != 0 && strcmp(spec.model_kind, "gpt") != 0)
        rc = SC_ERRF(err, SC_ERR_UNSUPPORTED,
                     "job %s trains a \"%s\" model: export writes Hugging Face folders of models "
                     "of kind \"hf\" (GPT-2, Llama) and \"gpt\" (written as GPT-2)",
                     job_id, spec.model_kind);
    else if (job.last_checkpoint_step == 0)
        rc = SC_ERRF(
            err, SC_ERR_PRECONDITION, "job %s (%s, step %llu) has no complete checkpoint yet%s",
            job_id, coord_job_state_name(job.state), (unsigned long long)job.step,
            spec.checkpoint_every == 0 ? ": it saves none (its spec sets no \"checkpoint_every\")"
                                       : "");
    else if (step > job.last_checkpoint_step)
        rc =
            SC_ERRF(err, SC_ERR_INVALID,
                    "step %llu: job %s's last complete checkpoint is of step %llu (valid: a "
                    "checkpoint step up to it)",
                    (unsigned long long)step, job_id, (unsigned long long)job.last_checkpoint_step);
    else if (json_array_size(json_object_get(plan, "stages")) == 0)
        rc = SC_ERRF(err, SC_ERR_PRECONDITION, "job %s has no plan: it never ran", job_id);
    if (rc == SC_OK) {
        pthread_mutex_lock(&c->lock);
        json_t *stages = stage_sources(c, plan);
        pthread_mutex_unlock(&c->lock);
        *out = json_pack("{s:I, s:s, s:s, s:o}", "step",
                         (json_int_t)(step ? step : job.last_checkpoint_step), "model_json",
                         spec.model_json, "model_kind", spec.model_kind, "stages", stages);
        if (*out == NULL)
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory describing job %s's checkpoint", job_id);
    }
    json_decref(plan);
    coord_jobspec_clear(&spec);
    coord_job_clear(&job);
    return rc;
}
