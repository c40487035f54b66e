/*
 * rt runner, the stage's state: checkpoint files (rt_runner_save / rt_runner_load, their names,
 * listing and pruning) and the host copy of the newest parameters (rt_runner_params_to_host).
 * Not here: deciding when to save or which step to resume (the worker agent and coordinator).
 * Invariant: a checkpoint is written under a temporary name and renamed, so a file under its
 * final name is always complete; a file is only loaded whole, after its header matches this
 * stage and its checksum matches its payload.
 */
#include "worker/runtime/runner_internal.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/stage.h"

#define CKPT_MAGIC "SCRTCKPT"
#define CKPT_VERSION 1u

size_t rt_runner_param_count(const rt_runner *r)
{
    return r->np;
}

/* The newest weights: pipedream keeps them on the host too (the device may hold a stash for a
 * backward); the synchronous schedules have them on the device only. */
static sc_status newest_params(rt_runner *r, float *host, sc_err *err)
{
    if (r->pipedream) {
        if (host != r->params)
            memcpy(host, r->params, r->np * sizeof *host);
        return SC_OK;
    }
    return kn_stage_params_to_host(r->st, host, err);
}

sc_status rt_runner_params_to_host(rt_runner *r, float *host, sc_err *err)
{
    return newest_params(r, host, err);
}

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t stage;
    uint32_t first_block, last_block;
    uint32_t optim_kind;
    uint32_t reserved;
    uint64_t step;
    uint64_t opt_t;
    uint64_t nparams, nstate;
    uint64_t checksum; /* FNV-1a 64 over the parameter then the state bytes */
} ckpt_header;

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t rt_checkpoint_checksum(const float *params, size_t np, const float *state, size_t ns)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv1a(h, params, np * sizeof *params);
    return fnv1a(h, state, ns * sizeof *state);
}

void rt_runner_checkpoint_path(const rt_runner *r, const char *dir, uint64_t step, char *buf,
                               size_t size)
{
    snprintf(buf, size, "%s/stage%d-step%llu.ckpt", dir, r->s, (unsigned long long)step);
}

static int step_newest_first(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

sc_status rt_checkpoint_list(const char *dir, int stage, uint64_t **steps, size_t *n, sc_err *err)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT ? SC_OK
                               : SC_ERRF(err, SC_ERR_IO, "cannot list the checkpoints in %s: %s",
                                         dir, strerror(errno));
    size_t cap = 0;
    sc_status rc = SC_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int s;
        uint64_t step;
        char again[300];
        /* exactly the name rt_runner_save gives (not its .tmp, not "stage01-step5.ckpt") */
        if (sscanf(e->d_name, "stage%d-step%" SCNu64 ".ckpt", &s, &step) != 2 || s != stage)
            continue;
        snprintf(again, sizeof again, "stage%d-step%" PRIu64 ".ckpt", s, step);
        if (strcmp(again, e->d_name) != 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t *more = realloc(*steps, cap * sizeof *more);
            if (more == NULL) {
                rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory listing the checkpoints in %s", dir);
                break;
            }
            *steps = more;
        }
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    if (rc != SC_OK) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return rc;
    }
    if (*n > 1)
        qsort(*steps, *n, sizeof **steps, step_newest_first);
    return SC_OK;
}

sc_status rt_checkpoint_prune(const char *dir, int stage, uint64_t complete_step, uint64_t keep,
                              size_t *deleted, sc_err *err)
{
    if (deleted != NULL)
        *deleted = 0;
    if (keep == 0)
        return SC_OK;
    uint64_t *steps;
    size_t n;
    SC_CHECK(rt_checkpoint_list(dir, stage, &steps, &n, err));
    sc_status rc = SC_OK;
    uint64_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (steps[i] > complete_step || kept++ < keep)
            continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/stage%d-step%" PRIu64 ".ckpt", dir, stage, steps[i]);
        if (unlink(path) != 0 && errno != ENOENT)
            rc = SC_ERRF(err, SC_ERR_IO, "%s: cannot delete the old checkpoint: %s", path,
                         strerror(errno));
        else if (deleted != NULL)
            (*deleted)++;
    }
    free(steps);
    return rc;
}

sc_status rt_runner_save(rt_runner *r, const char *dir, uint64_t step, sc_err *err)
{
    if (r->pipedream && r->pd_fwd != r->pd_bwd)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "runner stage %d: pipedream has %d minibatches in flight; call "
                       "rt_runner_flush before rt_runner_save",
                       r->s, pd_inflight(r));
    if (r->rep > 0)
        return SC_OK; /* the replicas are bit-identical: replica 0 writes for all */
    char path[1200];
    rt_runner_checkpoint_path(r, dir, step, path, sizeof path);
    SC_CHECK(newest_params(r, r->params, err));
    SC_CHECK(kn_stage_opt_state_to_host(r->st, r->state, err));
    rt_stage_image im = {.step = step,
                         .first_block = r->first_block,
                         .last_block = r->last_block,
                         .optim_kind = (int)r->optim.kind,
                         .opt_t = kn_stage_step_count(r->st),
                         .nparams = r->np,
                         .nstate = r->nstate,
                         .params = r->params,
                         .state = r->state};
    return rt_stage_image_write(path, r->s, &im, err);
}

sc_status rt_stage_image_write(const char *path, int stage, const rt_stage_image *im, sc_err *err)
{
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    ckpt_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CKPT_MAGIC, 8);
    h.version = CKPT_VERSION;
    h.stage = (uint32_t)stage;
    h.first_block = (uint32_t)im->first_block;
    h.last_block = (uint32_t)im->last_block;
    h.optim_kind = (uint32_t)im->optim_kind;
    h.step = im->step;
    h.opt_t = im->opt_t;
    h.nparams = im->nparams;
    h.nstate = im->nstate;
    h.checksum = rt_checkpoint_checksum(im->params, im->nparams, im->state, im->nstate);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL)
        return SC_ERRF(err, SC_ERR_IO, "%s: cannot create the checkpoint: %s", tmp,
                       strerror(errno));
    bool ok = fwrite(&h, sizeof h, 1, f) == 1;
    ok = ok && fwrite(im->params, sizeof(float), im->nparams, f) == im->nparams;
    ok = ok && fwrite(im->state, sizeof(float), im->nstate, f) == im->nstate;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return SC_ERRF(err, SC_ERR_IO, "%s: writing the checkpoint failed: %s", path, strerror(e));
    }
    return SC_OK;
}

void rt_stage_image_clear(rt_stage_image *im)
{
    free(im->params);
    free(im->state);
    memset(im, 0, sizeof *im);
}

sc_status rt_stage_image_read(const char *path, rt_stage_image *im, sc_err *err)
{
    memset(im, 0, sizeof *im);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return SC_ERRF(err, errno == ENOENT ? SC_ERR_NOT_FOUND : SC_ERR_IO,
                       "%s: cannot open the checkpoint: %s", path, strerror(errno));
    ckpt_header h;
    sc_status rc = SC_OK;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, CKPT_MAGIC, 8) != 0) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: not a stagecraft checkpoint (bad magic)", path);
        goto out;
    }
    if (h.version > CKPT_VERSION) {
        rc = SC_ERRF(err, SC_ERR_VERSION, "%s: checkpoint version %u, this build reads up to %u",
                     path, h.version, CKPT_VERSION);
        goto out;
    }
    /* sizes from the file are checked against its length before anything is allocated */
    long here = ftell(f);
    if (fseek(f, 0, SEEK_END) != 0 || here < 0) {
        rc = SC_ERRF(err, SC_ERR_IO, "%s: cannot read the checkpoint: %s", path, strerror(errno));
        goto out;
    }
    long size = ftell(f);
    uint64_t payload = (uint64_t)(size - here) / sizeof(float);
    if (size < here || h.nparams > payload || h.nstate > payload - h.nparams ||
        (uint64_t)(size - here) != (h.nparams + h.nstate) * sizeof(float) ||
        h.first_block > h.last_block) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: truncated or oversized checkpoint", path);
        goto out;
    }
    fseek(f, here, SEEK_SET);
    im->params = malloc(h.nparams * sizeof(float) + 1);
    im->state = malloc(h.nstate * sizeof(float) + 1);
    if (im->params == NULL || im->state == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory loading %s", path);
        goto out;
    }
    if (fread(im->params, sizeof(float), h.nparams, f) != h.nparams ||
        fread(im->state, sizeof(float), h.nstate, f) != h.nstate) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: truncated or oversized checkpoint", path);
        goto out;
    }
    if (rt_checkpoint_checksum(im->params, h.nparams, im->state, h.nstate) != h.checksum) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: checksum mismatch (the file is corrupt)", path);
        goto out;
    }
    im->step = h.step;
    im->first_block = (int)h.first_block;
    im->last_block = (int)h.last_block;
    im->optim_kind = (int)h.optim_kind;
    im->opt_t = h.opt_t;
    im->nparams = h.nparams;
    im->nstate = h.nstate;
out:
    fclose(f);
    if (rc != SC_OK)
        rt_stage_image_clear(im);
    return rc;
}

sc_status rt_runner_snapshot(rt_runner *r, uint64_t step, rt_stage_image *im, sc_err *err)
{
    memset(im, 0, sizeof *im);
    if (r->pipedream && r->pd_fwd != r->pd_bwd)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "runner stage %d: pipedream has %d minibatches in flight; call "
                       "rt_runner_flush before rt_runner_snapshot",
                       r->s, pd_inflight(r));
    SC_CHECK(newest_params(r, r->params, err));
    SC_CHECK(kn_stage_opt_state_to_host(r->st, r->state, err));
    im->params = malloc(r->np * sizeof(float) + 1);
    im->state = malloc(r->nstate * sizeof(float) + 1);
    if (im->params == NULL || im->state == NULL) {
        rt_stage_image_clear(im);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory keeping stage %d's state", r->s);
    }
    memcpy(im->params, r->params, r->np * sizeof(float));
    memcpy(im->state, r->state, r->nstate * sizeof(float));
    im->step = step;
    im->first_block = r->first_block;
    im->last_block = r->last_block;
    im->optim_kind = (int)r->optim.kind;
    im->opt_t = kn_stage_step_count(r->st);
    im->nparams = r->np;
    im->nstate = r->nstate;
    return SC_OK;
}

sc_status rt_runner_load_image(rt_runner *r, const rt_stage_image *im, const char *source,
                               sc_err *err)
{
    if (im->first_block != r->first_block || im->last_block != r->last_block ||
        im->nparams != r->np || im->nstate != r->nstate || im->optim_kind != (int)r->optim.kind)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "%s: holds step %llu of blocks [%d, %d] (%zu parameters, optimizer %d); "
                       "this stage has blocks [%d, %d] (%zu parameters, optimizer %d)",
                       source, (unsigned long long)im->step, im->first_block, im->last_block,
                       im->nparams, im->optim_kind, r->first_block, r->last_block, r->np,
                       (int)r->optim.kind);
    SC_CHECK(kn_stage_params_from_host(r->st, im->params, err));
    SC_CHECK(kn_stage_opt_state_from_host(r->st, im->state, err));
    SC_CHECK(kn_stage_set_step_count(r->st, im->opt_t, err));
    memcpy(r->params, im->params, r->np * sizeof *r->params);
    r->broken = false;
    rt_runner_pd_reset(r);
    for (int i = 0; i < r->slots; i++)
        r->slot_mb[i] = -1;
    return SC_OK;
}

sc_status rt_runner_load(rt_runner *r, const char *dir, uint64_t step, sc_err *err)
{
    char path[1200];
    rt_runner_checkpoint_path(r, dir, step, path, sizeof path);
    rt_stage_image im;
    SC_CHECK(rt_stage_image_read(path, &im, err));
    sc_status rc = SC_OK;
    if (im.step != step)
        rc = SC_ERRF(err, SC_ERR_INVALID, "%s: holds step %llu, not step %llu", path,
                     (unsigned long long)im.step, (unsigned long long)step);
    else
        rc = rt_runner_load_image(r, &im, path, err);
    rt_stage_image_clear(&im);
    return rc;
}
