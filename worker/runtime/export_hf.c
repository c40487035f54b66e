/*
 * rt export: stage checkpoint files to one parameter view of the whole model, then to a Hugging
 * Face folder. Invariant: nothing is written unless every block's parameters came from a file
 * whose checksum matched.
 */
#include "worker/runtime/export_hf.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/hf_model.h"
#include "worker/runtime/runner.h"

#define EXPORT_STAGES_MAX 1024

static bool has_step(const uint64_t *steps, size_t k, uint64_t step)
{
    for (size_t i = 0; i < k; i++)
        if (steps[i] == step)
            return true;
    return false;
}

/* The newest step every stage 0..n-1 has saved (0: none has one in common). Sets *n to the
 * stages found. */
static sc_status newest_complete(const char *dir, int *n, uint64_t *step, sc_err *err)
{
    uint64_t *lists[EXPORT_STAGES_MAX];
    size_t counts[EXPORT_STAGES_MAX];
    sc_status rc = SC_OK;
    *n = 0;
    *step = 0;
    while (*n < EXPORT_STAGES_MAX) {
        rc = rt_checkpoint_list(dir, *n, &lists[*n], &counts[*n], err);
        if (rc != SC_OK || counts[*n] == 0) {
            free(lists[*n]);
            break;
        }
        (*n)++;
    }
    for (size_t i = 0; rc == SC_OK && *n > 0 && i < counts[0]; i++) {
        bool everywhere = true;
        for (int s = 1; s < *n && everywhere; s++)
            everywhere = has_step(lists[s], counts[s], lists[0][i]);
        if (everywhere && lists[0][i] > *step)
            *step = lists[0][i];
    }
    for (int s = 0; s < *n; s++)
        free(lists[s]);
    if (rc == SC_OK && *n == 0)
        rc = SC_ERRF(err, SC_ERR_NOT_FOUND, "%s: no stage checkpoint (stage0-stepN.ckpt) to export",
                     dir);
    else if (rc == SC_OK && *step == 0)
        rc = SC_ERRF(err, SC_ERR_NOT_FOUND,
                     "%s: no step that all %d stages have saved (stage0..stage%d-stepN.ckpt)", dir,
                     *n, *n - 1);
    return rc;
}

sc_status rt_export_hf(const kn_model *m, const char *ckpt_dir, uint64_t step, const char *out_dir,
                       uint64_t *step_used, sc_err *err)
{
    int stages;
    uint64_t newest;
    SC_CHECK(newest_complete(ckpt_dir, &stages, &newest, err));
    if (step == 0)
        step = newest;
    int nb = kn_model_block_count(m);
    rt_stage_image *im = calloc((size_t)stages, sizeof *im);
    const float **bp = calloc((size_t)nb, sizeof *bp);
    sc_status rc = SC_OK;
    if (im == NULL || bp == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory exporting");
        goto done;
    }
    int next_block = 0;
    for (int s = 0; s < stages && rc == SC_OK; s++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/stage%d-step%llu.ckpt", ckpt_dir, s,
                 (unsigned long long)step);
        rc = rt_stage_image_read(path, &im[s], err);
        if (rc != SC_OK)
            break;
        if (im[s].first_block != next_block || im[s].last_block >= nb) {
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "%s: holds blocks [%d, %d]; the stages before it end at block %d of "
                         "model %s's %d (is this checkpoint of another model or split?)",
                         path, im[s].first_block, im[s].last_block, next_block - 1,
                         kn_model_name(m), nb);
            break;
        }
        size_t off = 0;
        for (int i = im[s].first_block; i <= im[s].last_block; i++) {
            bp[i] = im[s].params + off;
            off += kn_model_block(m, i)->params;
        }
        if (off != im[s].nparams) {
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "%s: %zu parameters, but blocks [%d, %d] of model %s hold %zu", path,
                         im[s].nparams, im[s].first_block, im[s].last_block, kn_model_name(m), off);
            break;
        }
        next_block = im[s].last_block + 1;
    }
    if (rc == SC_OK && next_block != nb)
        rc = SC_ERRF(err, SC_ERR_INVALID,
                     "%s: the %d stage checkpoints of step %llu cover blocks [0, %d] of model "
                     "%s's %d",
                     ckpt_dir, stages, (unsigned long long)step, next_block - 1, kn_model_name(m),
                     nb);
    if (rc == SC_OK)
        rc = kn_hf_export(m, bp, out_dir, err);
    if (rc == SC_OK && step_used != NULL)
        *step_used = step;
done:
    for (int s = 0; im != NULL && s < stages; s++)
        rt_stage_image_clear(&im[s]);
    free(im);
    free(bp);
    return rc;
}

sc_status rt_export_hf_stage(rt_runner *r, int replica, int stage, int n_stages, const int *cuts,
                             const char *dir, sc_err *err)
{
    if (replica > 0)
        return SC_OK;
    const kn_model *m = rt_runner_model(r);
    int first = rt_runner_first_block(r), last = rt_runner_last_block(r);
    if (cuts[stage] != first || cuts[stage + 1] != last + 1)
        return SC_ERRF(err, SC_ERR_INTERNAL,
                       "export: stage %d holds blocks [%d, %d], the plan says [%d, %d]", stage,
                       first, last, cuts[stage], cuts[stage + 1] - 1);
    float *params = malloc(rt_runner_param_count(r) * sizeof *params + 1);
    SC_ALLOC_CHECK(params, err);
    sc_status rc = rt_runner_params_to_host(r, params, err);
    if (rc == SC_OK)
        rc = kn_hf_export_part(m, stage, n_stages, first, last, params, dir, err);
    if (rc == SC_OK && stage == 0)
        rc = kn_hf_export_index(m, n_stages, cuts, dir, err);
    free(params);
    return rc;
}
