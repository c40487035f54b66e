/*
 * wk trainer, resume: loads the state a START resumes from (this stage's own checkpoint, else
 * the blocks the job's state sources hold: a paused stage's, another worker's checkpoint after
 * a re-plan, or copies of lost ones), and when that fails, finds the newest older step that
 * loads so that the coordinator can resume the whole job from there.
 *
 * Does not run steps or write periodic checkpoints (trainer_loop.c). Calls only the reports
 * (trainer_report.c) among the trainer's files.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "worker/trainer_internal.h"

#define LOG WK_TRAINER_LOG
#define FETCH_TIMEOUT_MS 10000 /* a block server silent this long is skipped */

static sc_status fetch_stage(wk_trainer *t, uint64_t step, rt_stage_image *im, wk_fetch_stats *fs,
                             sc_err *err);

/* At most this many older steps are tried after the resume step's state did not load: each may
 * ask every source, and one that is silent costs FETCH_TIMEOUT_MS. */
#define OLDER_STEPS_MAX 32

static int step_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Whether this stage loads the state of `step` (into the runner): its own checkpoint file when
 * `own_file`, else the blocks of that step from the job's state sources, whichever stage or
 * worker saved them. `why` gets the reason it does not. */
static bool older_step_loads(wk_trainer *t, uint64_t step, bool own_file, sc_err *why)
{
    sc_err_clear(why);
    if (own_file && rt_runner_load(t->runner, t->checkpoint_dir, step, why) == SC_OK)
        return true;
    if (json_array_size(t->sources) == 0 && t->blocks == NULL)
        return false;
    rt_stage_image im;
    wk_fetch_stats fs;
    sc_err fetch;
    sc_err_clear(&fetch);
    bool ok = fetch_stage(t, step, &im, &fs, &fetch) == SC_OK &&
              rt_runner_load_image(t->runner, &im, "the blocks taken over", &fetch) == SC_OK;
    rt_stage_image_clear(&im);
    if (!ok && !own_file)
        *why = fetch;
    else if (!ok)
        sc_strfmt(why->msg + strlen(why->msg), sizeof why->msg - strlen(why->msg),
                  "; from the other workers: %s", fetch.msg);
    return ok;
}

/* The checkpoint of the resume step did not load (`why`): finds the newest older step whose
 * state of this stage's blocks loads, from this worker's own files or from any worker that
 * holds them (a re-plan may have given this stage to a worker that never ran it), and reports
 * both steps, so that the coordinator can resume every stage from an older step instead of
 * failing the job. Steps tried: this stage's own files and the job's checkpoint steps (the
 * multiples of checkpoint_every), newest first, at most OLDER_STEPS_MAX. */
void wk_trainer_push_resume_error(wk_trainer *t, const sc_err *why)
{
    uint64_t *own = NULL, intact = 0;
    size_t n_own = 0;
    sc_err err;
    sc_err_clear(&err);
    rt_checkpoint_list(t->checkpoint_dir, (int)t->stage, &own, &n_own, &err);
    uint64_t tries[OLDER_STEPS_MAX * 2];
    size_t n = 0;
    for (size_t i = 0; i < n_own && n < OLDER_STEPS_MAX; i++)
        if (own[i] < t->resume_step)
            tries[n++] = own[i];
    if (t->checkpoint_every > 0 && t->resume_step > 0)
        for (uint64_t s = (t->resume_step - 1) / t->checkpoint_every * t->checkpoint_every;
             s > 0 && n < 2 * OLDER_STEPS_MAX; s -= t->checkpoint_every) {
            bool listed = false;
            for (size_t i = 0; i < n && !listed; i++)
                listed = tries[i] == s;
            if (!listed)
                tries[n++] = s;
        }
    qsort(tries, n, sizeof *tries, step_desc);
    for (size_t i = 0; i < n && i < OLDER_STEPS_MAX && intact == 0; i++) {
        bool own_file = false;
        for (size_t j = 0; j < n_own && !own_file; j++)
            own_file = own[j] == tries[i];
        if (older_step_loads(t, tries[i], own_file, &err))
            intact = tries[i];
        else
            SC_LOG_WARN(LOG, "older checkpoint of step %llu does not load either: %s",
                        (unsigned long long)tries[i], err.msg);
    }
    free(own);
    wk_trainer_msg m;
    memset(&m, 0, sizeof m);
    m.is_error = true;
    m.code = why->code;
    m.checkpoint_step = t->resume_step;
    m.intact_checkpoint_step = intact;
    if (intact > 0)
        sc_strfmt(m.error, sizeof m.error,
                  "the checkpoint of step %llu does not load: %s; the newest older checkpoint of "
                  "stage %u that loads is step %llu",
                  (unsigned long long)t->resume_step, why->msg, t->stage,
                  (unsigned long long)intact);
    else
        sc_strfmt(m.error, sizeof m.error,
                  "the checkpoint of step %llu does not load: %s; no older checkpoint of stage %u "
                  "loads",
                  (unsigned long long)t->resume_step, why->msg, t->stage);
    SC_LOG_WARN(LOG, "%s", m.error);
    wk_trainer_push(t, &m);
}

sc_status wk_trainer_make_dirs(const char *path, sc_err *err)
{
    char tmp[1100];
    sc_strlcpy(tmp, path, sizeof tmp);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0700);
            *p = '/';
        }
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return SC_ERRF(err, SC_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    return SC_OK;
}

/* Builds this stage's image of `step` from the block servers of the job's state sources, this
 * worker's own first (the blocks it kept when it paused stay there). wk_blocks_fetch's errors;
 * SC_ERR_NOT_FOUND when there is no source. */
static sc_status fetch_stage(wk_trainer *t, uint64_t step, rt_stage_image *im, wk_fetch_stats *fs,
                             sc_err *err)
{
    memset(im, 0, sizeof *im);
    size_t n = json_array_size(t->sources);
    const char *self = t->blocks != NULL ? wk_block_server_endpoint(t->blocks) : NULL;
    const char **src = calloc(n + 1, sizeof *src);
    SC_ALLOC_CHECK(src, err);
    size_t k = 0;
    if (self != NULL)
        src[k++] = self;
    for (size_t i = 0; i < n; i++) {
        const char *e = json_string_value(json_array_get(t->sources, i));
        if (e != NULL && (self == NULL || strcmp(e, self) != 0))
            src[k++] = e;
    }
    const struct kn_model *model = rt_runner_model(t->runner);
    int first = rt_runner_first_block(t->runner), last = rt_runner_last_block(t->runner);
    sc_status rc = k == 0 ? SC_ERRF(err, SC_ERR_NOT_FOUND, "no worker to ask for its blocks")
                          : wk_blocks_fetch(src, k, t->job_id, step, model, first, last,
                                            FETCH_TIMEOUT_MS, self != NULL, &t->stop, im, fs, err);
    free(src);
    return rc;
}

/* Loads the state of the resume step: this stage's own checkpoint when it has one of the same
 * blocks, else the blocks taken over from the workers START named (state_sources): the stage
 * paused there for a move, their checkpoint files after a re-plan, or the copies they hold of
 * lost or corrupt checkpoints (ckpt_copier.h). */
sc_status wk_trainer_resume(wk_trainer *t, sc_err *err)
{
    sc_err own;
    sc_err_clear(&own);
    if (rt_runner_load(t->runner, t->checkpoint_dir, t->resume_step, &own) == SC_OK) {
        SC_LOG_INFO(LOG, "job %s stage %u: resumed from its own checkpoint of step %llu", t->job_id,
                    t->stage, (unsigned long long)t->resume_step);
        return SC_OK;
    }
    size_t n = json_array_size(t->sources);
    if (n == 0 ||
        (own.code != SC_ERR_NOT_FOUND && own.code != SC_ERR_INVALID && own.code != SC_ERR_PARSE)) {
        *err = own;
        return own.code;
    }
    if (own.code == SC_ERR_PARSE)
        SC_LOG_WARN(LOG, "job %s stage %u: %s; asking the other workers for a copy", t->job_id,
                    t->stage, own.msg);
    rt_stage_image im;
    wk_fetch_stats fs;
    sc_status rc = fetch_stage(t, t->resume_step, &im, &fs, err);
    if (rc != SC_OK && own.code == SC_ERR_PARSE) { /* the own file's fault is the news */
        SC_LOG_WARN(LOG, "job %s stage %u: no copy either: %s", t->job_id, t->stage, err->msg);
        *err = own;
        sc_err_prefix(err, "no other worker holds an intact copy either");
        rc = own.code;
    }
    if (rc == SC_OK) {
        int first = rt_runner_first_block(t->runner), last = rt_runner_last_block(t->runner);
        rc = rt_runner_load_image(t->runner, &im, "the blocks taken over", err);
        if (rc == SC_OK)
            SC_LOG_INFO(LOG,
                        "job %s stage %u: took blocks %d-%d of step %llu over: %.0f bytes "
                        "from other workers, %.0f kept here, in %d piece(s), %.3f s",
                        t->job_id, t->stage, first, last, (unsigned long long)t->resume_step,
                        fs.bytes - fs.local_bytes, fs.local_bytes, fs.pieces, fs.seconds);
    }
    rt_stage_image_clear(&im);
    /* A checkpoint taken over (a re-plan, or a copy of a lost worker's) becomes this stage's
     * own, so that it is here should the workers it came from go too; never over a file of
     * another block range of that name (an older plan's), which other stages may still take
     * their blocks from. */
    if (rc == SC_OK && t->resume_step == t->last_checkpoint && t->replica == 0 &&
        (own.code == SC_ERR_NOT_FOUND || own.code == SC_ERR_PARSE)) {
        sc_err why;
        sc_err_clear(&why);
        if (wk_trainer_make_dirs(t->checkpoint_dir, &why) != SC_OK ||
            rt_runner_save(t->runner, t->checkpoint_dir, t->resume_step, &why) != SC_OK)
            SC_LOG_WARN(LOG,
                        "job %s stage %u: the checkpoint of step %llu taken over is not "
                        "kept here: %s",
                        t->job_id, t->stage, (unsigned long long)t->resume_step, why.msg);
    }
    return rc;
}
