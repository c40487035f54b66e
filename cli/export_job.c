/* `stagecraft export JOB`: from the workers' block servers to a Hugging Face folder (see
 * export_job.h). */
#include "cli/export_job.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/client.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "kernels/hf_model.h"
#include "kernels/model.h"
#include "proto/stagecraft.pb-c.h"
#include "worker/blocks/block_fetch.h"

/* Fetches stage `st`'s blocks from its sources, in order, into *im, adding the bytes received
 * to *bytes; on error, err names the stage and every worker asked. */
static sc_status fetch_stage(const Stagecraft__CheckpointStage *st, const char *job_id,
                             uint64_t step, const kn_model *m, int timeout_ms, rt_stage_image *im,
                             double *bytes, sc_err *err)
{
    size_t n = st->n_sources;
    int nb = kn_model_block_count(m);
    if ((int)st->last_block >= nb || st->first_block > st->last_block)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "stage %u of job %s holds blocks %u-%u, but model %s has %d blocks",
                       st->stage, job_id, st->first_block, st->last_block, kn_model_name(m), nb);
    if (n == 0)
        return SC_ERRF(err, SC_ERR_UNAVAILABLE,
                       "stage %u (blocks %u-%u) of job %s: no registered worker serves blocks "
                       "(the workers that hold its checkpoint are gone)",
                       st->stage, st->first_block, st->last_block, job_id);
    const char **eps = calloc(n, sizeof *eps);
    SC_ALLOC_CHECK(eps, err);
    for (size_t k = 0; k < n; k++)
        eps[k] = st->sources[k]->endpoint;
    wk_fetch_stats fs;
    sc_err why;
    sc_err_clear(&why);
    /* a source that gives nothing is logged as a warning by the fetch: here the error below
     * names them all, once */
    sc_log_level level = sc_log_get_level();
    if (level > SC_LOG_ERROR)
        sc_log_set_level(SC_LOG_ERROR);
    sc_status rc = wk_blocks_fetch(eps, n, job_id, step, m, (int)st->first_block,
                                   (int)st->last_block, timeout_ms, false, NULL, im, &fs, &why);
    sc_log_set_level(level);
    free(eps);
    if (rc == SC_OK) {
        *bytes += fs.bytes;
        return SC_OK;
    }
    char asked[400] = "";
    for (size_t k = 0; k < n; k++) {
        size_t used = strlen(asked);
        snprintf(asked + used, sizeof asked - used, "%s%s at %s (%s)", k ? ", " : "",
                 st->sources[k]->worker_id, st->sources[k]->endpoint, st->sources[k]->state);
    }
    return SC_ERRF(err, rc == SC_ERR_NOT_FOUND ? SC_ERR_UNAVAILABLE : rc,
                   "stage %u (blocks %u-%u) of job %s at step %llu could not be fetched from "
                   "workers %s: %s",
                   st->stage, st->first_block, st->last_block, job_id, (unsigned long long)step,
                   asked, why.msg);
}

sc_status cli_export_job(const char *addr, const char *token, const char *job_id, uint64_t step,
                         const char *out_dir, int timeout_ms, cli_export_result *res, sc_err *err)
{
    memset(res, 0, sizeof *res);
    Stagecraft__GetCheckpointRequest req = STAGECRAFT__GET_CHECKPOINT_REQUEST__INIT;
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.token = (char *)token;
    req.header = &hdr;
    req.job_id = (char *)job_id;
    req.step = step;
    ProtobufCMessage *msg = NULL;
    SC_CHECK(cli_call(addr, "/stagecraft.Coordinator/GetCheckpoint", &req.base,
                      &stagecraft__get_checkpoint_response__descriptor, &msg, err));
    const Stagecraft__GetCheckpointResponse *cp = (const void *)msg;
    kn_model *m = NULL;
    rt_stage_image *im = NULL;
    const float **bp = NULL;
    char source[160];
    snprintf(source, sizeof source, "job %s's model", job_id);
    sc_status rc = kn_model_parse(&m, source, cp->model_json, strlen(cp->model_json), err);
    if (rc != SC_OK && strcmp(cp->model_kind, "hf") == 0) {
        /* its config.json is read here as the workers read it: same path, this machine */
        sc_err inner = *err;
        sc_err_clear(err);
        rc = SC_ERRF(err, rc,
                     "%s (the job's checkpoint folder must be readable here too, at "
                     "the path its spec names)",
                     inner.msg);
    }
    if (rc != SC_OK)
        goto out;
    int nb = kn_model_block_count(m);
    im = calloc(cp->n_stages ? cp->n_stages : 1, sizeof *im);
    bp = calloc((size_t)nb, sizeof *bp);
    if (im == NULL || bp == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory exporting job %s", job_id);
        goto out;
    }
    for (size_t s = 0; s < cp->n_stages && rc == SC_OK; s++) {
        const Stagecraft__CheckpointStage *st = cp->stages[s];
        rc = fetch_stage(st, job_id, cp->step, m, timeout_ms, &im[s], &res->bytes, err);
        /* each block's parameters within the stage's image, one block after the other */
        size_t off = 0;
        for (int b = (int)st->first_block; rc == SC_OK && b <= (int)st->last_block; b++) {
            bp[b] = im[s].params + off;
            off += kn_model_block(m, b)->params;
        }
    }
    for (int b = 0; rc == SC_OK && b < nb; b++)
        if (bp[b] == NULL)
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "the plan of job %s leaves block %d of model %s to no stage", job_id, b,
                         kn_model_name(m));
    if (rc == SC_OK)
        rc = kn_hf_export(m, bp, out_dir, err);
    if (rc == SC_OK) {
        res->step = cp->step;
        res->stages = (int)cp->n_stages;
        sc_strlcpy(res->model, kn_model_name(m), sizeof res->model);
    }
out:
    for (size_t s = 0; im != NULL && s < cp->n_stages; s++)
        rt_stage_image_clear(&im[s]);
    free(im);
    free(bp);
    kn_model_destroy(&m);
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}
