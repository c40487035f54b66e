/*
 * A stage's parameter file (kn_stage_save / kn_stage_load, see stage.h), written and read through
 * the stage's public calls only: the parameters and the optimizer state as host arrays.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/stage.h"

#define PARAM_MAGIC "SCKNPRM1"

/* File layout: this header (native byte order), the parameters, then the optimizer state
 * (opt_count floats) that lets a resumed run continue exactly where it stopped. */
typedef struct {
    char magic[8];
    uint32_t first_block, last_block;
    uint64_t count;
    uint32_t opt_kind, step;
    uint64_t opt_count;
} param_header;

sc_status kn_stage_save(kn_stage *st, const char *path, sc_err *err)
{
    size_t np = kn_stage_param_count(st), nopt = kn_stage_opt_state_count(st);
    float *host = malloc((np + nopt) * sizeof *host + 1);
    SC_ALLOC_CHECK(host, err);
    sc_status rc = kn_stage_params_to_host(st, host, err);
    if (rc == SC_OK)
        rc = kn_stage_opt_state_to_host(st, host + np, err);
    if (rc != SC_OK) {
        free(host);
        return rc;
    }
    param_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, PARAM_MAGIC, 8);
    h.first_block = (uint32_t)kn_stage_first_block(st);
    h.last_block = (uint32_t)kn_stage_last_block(st);
    h.count = np;
    h.opt_kind = (uint32_t)kn_stage_optim_kind(st);
    h.step = (uint32_t)kn_stage_step_count(st);
    h.opt_count = nopt;
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        free(host);
        return SC_ERRF(err, SC_ERR_IO, "%s: cannot create the parameter file", path);
    }
    size_t ok = fwrite(&h, sizeof h, 1, f);
    ok += fwrite(host, sizeof *host, np + nopt, f) == np + nopt;
    free(host);
    if (fclose(f) != 0 || ok != 2)
        return SC_ERRF(err, SC_ERR_IO, "%s: writing the parameter file failed", path);
    return SC_OK;
}

sc_status kn_stage_load(kn_stage *st, const char *path, sc_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return SC_ERRF(err, SC_ERR_IO, "%s: cannot open the parameter file", path);
    param_header h;
    sc_status rc = SC_OK;
    float *host = NULL;
    size_t np = kn_stage_param_count(st), nopt = kn_stage_opt_state_count(st);
    int first = kn_stage_first_block(st), last = kn_stage_last_block(st);
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, PARAM_MAGIC, 8) != 0) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: not a stagecraft parameter file", path);
        goto out;
    }
    if ((int)h.first_block != first || (int)h.last_block != last || h.count != np) {
        rc = SC_ERRF(err, SC_ERR_INVALID,
                     "%s: holds blocks [%u, %u] with %llu parameters, the stage has blocks "
                     "[%d, %d] with %zu",
                     path, h.first_block, h.last_block, (unsigned long long)h.count, first, last,
                     np);
        goto out;
    }
    host = malloc((np + nopt) * sizeof *host + 1);
    if (host == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory loading %s", path);
        goto out;
    }
    if (fread(host, sizeof *host, np, f) != np) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: truncated parameter file", path);
        goto out;
    }
    rc = kn_stage_params_from_host(st, host, err);
    /* the optimizer state comes along only for the same optimizer; another one starts fresh */
    if (rc == SC_OK && h.opt_kind == (uint32_t)kn_stage_optim_kind(st) && h.opt_count == nopt) {
        if (fread(host + np, sizeof *host, nopt, f) != nopt) {
            rc = SC_ERRF(err, SC_ERR_PARSE, "%s: truncated optimizer state", path);
            goto out;
        }
        rc = kn_stage_opt_state_from_host(st, host + np, err);
        if (rc == SC_OK)
            rc = kn_stage_set_step_count(st, h.step, err);
    }
out:
    free(host);
    fclose(f);
    return rc;
}
