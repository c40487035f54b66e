/* Copies of other workers' stage checkpoints (see ckpt_copier.h). */
#include "worker/blocks/ckpt_copier.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "worker/blocks/block_fetch.h"
#include "worker/blocks/block_server.h"
#include "worker/runtime/runner.h"

#define LOG "copies"
#define DUE_MAX 64            /* steps due and not copied yet */
#define FETCH_TIMEOUT_MS 5000 /* a writer's block server silent this long: asked again later */
#define RETRY_MS 100          /* between asks for a step the writer does not hold yet */
#define PASS_OVER_S 5.0       /* a step still missing this long is passed over for a newer one */

typedef struct {
    uint32_t stage, copy;
    char source[300];
    int first, last;
    uint64_t held; /* newest step copied */
} target;

struct wk_copier {
    char job_id[64];
    char dir[1200];  /* JOB/replicas */
    kn_model *model; /* owned: the thread may outlive the trainer that made it */
    target t[WK_COPIER_MAX];
    size_t n;
    pthread_t thread;
    bool running, stop, orphan; /* orphan: destroyed while running; the thread frees */
    pthread_mutex_t lock;       /* guards everything below, t[].held and stop */
    pthread_cond_t wake;
    uint64_t due[DUE_MAX];
    size_t due_head, due_count;
    wk_copier_stats stats;
};

sc_status wk_copier_new(wk_copier **out, const char *job_id, const char *dir,
                        const char *model_json, sc_err *err)
{
    *out = NULL;
    wk_copier *c = calloc(1, sizeof *c);
    SC_ALLOC_CHECK(c, err);
    sc_status rc = kn_model_parse(&c->model, "the job's model", model_json ? model_json : "",
                                  model_json ? strlen(model_json) : 0, err);
    if (rc != SC_OK) {
        free(c);
        return rc;
    }
    sc_strlcpy(c->job_id, job_id, sizeof c->job_id);
    snprintf(c->dir, sizeof c->dir, "%s/" WK_BLOCKS_COPIES_DIR, dir);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    *out = c;
    return SC_OK;
}

sc_status wk_copier_add(wk_copier *c, uint32_t stage, uint32_t copy, const char *source, int first,
                        int last, sc_err *err)
{
    if (c->running)
        return SC_ERRF(err, SC_ERR_PRECONDITION, "the copier of job %s already runs", c->job_id);
    if (c->n == WK_COPIER_MAX)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "a worker holds copies of at most %d stages of a job", WK_COPIER_MAX);
    int nb = kn_model_block_count(c->model);
    if (first < 0 || first > last || last >= nb)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "the copy of stage %u names blocks %d-%d; the model has blocks 0-%d", stage,
                       first, last, nb - 1);
    if (source == NULL || strncmp(source, "tcp://", 6) != 0 || strlen(source) >= 300)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "the copy of stage %u names no block server (expected tcp://HOST:PORT)",
                       stage);
    for (size_t i = 0; i < c->n; i++)
        if (c->t[i].stage == stage)
            return SC_ERRF(err, SC_ERR_INVALID, "the copy of stage %u is named twice", stage);
    target *t = &c->t[c->n++];
    memset(t, 0, sizeof *t);
    t->stage = stage;
    t->copy = copy;
    sc_strlcpy(t->source, source, sizeof t->source);
    t->first = first;
    t->last = last;
    return SC_OK;
}

static sc_status make_dir(const char *dir, sc_err *err)
{
    char up[1200];
    sc_strlcpy(up, dir, sizeof up);
    char *slash = strrchr(up, '/');
    if (slash != NULL) {
        *slash = '\0';
        mkdir(up, 0700); /* the job's folder, when this worker has written nothing of its own */
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return SC_ERRF(err, SC_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    return SC_OK;
}

/* Takes the copy of step `step` of target t from its writer and stores it. SC_ERR_NOT_FOUND:
 * the writer does not hold it (yet). Runs without the lock. */
static sc_status copy_one(wk_copier *c, const target *t, uint64_t step, sc_err *err)
{
    const char *src[1] = {t->source};
    rt_stage_image im;
    wk_fetch_stats fs;
    uint64_t t0 = sc_clock_now_ns();
    SC_CHECK(wk_blocks_fetch(src, 1, c->job_id, step, c->model, t->first, t->last, FETCH_TIMEOUT_MS,
                             false, NULL, &im, &fs, err));
    pthread_mutex_lock(&c->lock);
    bool stopped = c->stop; /* a copy of a stage replaced meanwhile is not written */
    pthread_mutex_unlock(&c->lock);
    if (stopped) {
        rt_stage_image_clear(&im);
        return SC_ERRF(err, SC_ERR_CANCELLED, "the copier of job %s stopped", c->job_id);
    }
    char path[1400];
    snprintf(path, sizeof path, "%s/stage%u-step%" PRIu64 ".ckpt", c->dir, t->stage, step);
    sc_status rc = make_dir(c->dir, err);
    if (rc == SC_OK)
        rc = rt_stage_image_write(path, (int)t->stage, &im, err);
    rt_stage_image_clear(&im);
    if (rc != SC_OK)
        return rc;
    double s = (double)(sc_clock_now_ns() - t0) / 1e9;
    pthread_mutex_lock(&c->lock);
    c->stats.bytes += fs.bytes;
    c->stats.seconds += s;
    c->stats.copies++;
    pthread_mutex_unlock(&c->lock);
    SC_LOG_DEBUG(LOG, "job %s: copied stage %u of step %" PRIu64 " from %s: %.0f bytes in %.3f s",
                 c->job_id, t->stage, step, t->source, fs.bytes, s);
    return SC_OK;
}

/* Under c->lock: waits up to ms for a new due step or the stop. */
static void wait_ms(wk_copier *c, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&c->wake, &c->lock, &until);
}

static void free_copier(wk_copier *c)
{
    kn_model_destroy(&c->model);
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void *copier_main(void *arg)
{
    wk_copier *c = arg;
    pthread_mutex_lock(&c->lock);
    double missing_since = 0;
    while (!c->stop) {
        if (c->due_count == 0) {
            pthread_cond_wait(&c->wake, &c->lock);
            continue;
        }
        uint64_t step = c->due[c->due_head];
        bool all = true, absent = false;
        for (size_t i = 0; i < c->n && !c->stop; i++) {
            if (c->t[i].held >= step)
                continue;
            target t = c->t[i];
            pthread_mutex_unlock(&c->lock);
            sc_err err;
            sc_err_clear(&err);
            sc_status rc = copy_one(c, &t, step, &err);
            pthread_mutex_lock(&c->lock);
            if (rc == SC_OK) {
                c->t[i].held = step;
                continue;
            }
            all = false;
            absent = absent || rc == SC_ERR_NOT_FOUND;
            if (rc != SC_ERR_NOT_FOUND && rc != SC_ERR_CANCELLED)
                SC_LOG_WARN(LOG, "job %s: copy of stage %u of step %" PRIu64 " failed: %s",
                            c->job_id, t.stage, step, err.msg);
        }
        double now = sc_clock_now_s();
        if (!all && missing_since == 0)
            missing_since = now;
        bool pass_over = !all && c->due_count > 1 && now - missing_since >= PASS_OVER_S;
        if (pass_over)
            SC_LOG_WARN(LOG,
                        "job %s: the checkpoint of step %" PRIu64 " is %s after %.0f s; "
                        "copying the next one instead",
                        c->job_id, step, absent ? "not held by its writer" : "not copied",
                        PASS_OVER_S);
        if (all || pass_over) {
            c->due_head = (c->due_head + 1) % DUE_MAX;
            c->due_count--;
            missing_since = 0;
        } else if (!c->stop) {
            wait_ms(c, RETRY_MS);
        }
    }
    bool orphan = c->orphan;
    pthread_mutex_unlock(&c->lock);
    if (orphan)
        free_copier(c);
    return NULL;
}

sc_status wk_copier_start(wk_copier *c, sc_err *err)
{
    if (c->running || c->n == 0)
        return SC_OK;
    if (pthread_create(&c->thread, NULL, copier_main, c) != 0)
        return SC_ERRF(err, SC_ERR_INTERNAL, "cannot start the checkpoint copier of job %s",
                       c->job_id);
    c->running = true;
    for (size_t i = 0; i < c->n; i++)
        SC_LOG_INFO(LOG, "job %s: holding copies of stage %u (blocks %d-%d) from %s", c->job_id,
                    c->t[i].stage, c->t[i].first, c->t[i].last, c->t[i].source);
    return SC_OK;
}

void wk_copier_due(wk_copier *c, uint64_t step)
{
    if (c == NULL || c->n == 0 || step == 0)
        return;
    pthread_mutex_lock(&c->lock);
    uint64_t last = c->due_count ? c->due[(c->due_head + c->due_count - 1) % DUE_MAX] : 0;
    if (step > last) {
        if (c->due_count == DUE_MAX) { /* far behind: the oldest due step goes */
            SC_LOG_WARN(LOG,
                        "job %s: %d checkpoints wait for their copies; not copying step %" PRIu64,
                        c->job_id, DUE_MAX, c->due[c->due_head]);
            c->due_head = (c->due_head + 1) % DUE_MAX;
            c->due_count--;
        }
        c->due[(c->due_head + c->due_count) % DUE_MAX] = step;
        c->due_count++;
        pthread_cond_broadcast(&c->wake);
    }
    pthread_mutex_unlock(&c->lock);
}

size_t wk_copier_held(wk_copier *c, wk_copy_held *out, size_t max)
{
    if (c == NULL)
        return 0;
    pthread_mutex_lock(&c->lock);
    size_t n = c->n < max ? c->n : max;
    for (size_t i = 0; i < n; i++)
        out[i] = (wk_copy_held){.stage = c->t[i].stage, .copy = c->t[i].copy, .step = c->t[i].held};
    pthread_mutex_unlock(&c->lock);
    return n;
}

void wk_copier_stats_get(wk_copier *c, wk_copier_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->stats;
    pthread_mutex_unlock(&c->lock);
}

sc_status wk_copier_complete(wk_copier *c, uint64_t step, uint64_t keep, sc_err *err)
{
    if (c == NULL || keep == 0)
        return SC_OK;
    sc_status rc = SC_OK;
    for (size_t i = 0; i < c->n; i++) {
        sc_err one;
        sc_err_clear(&one);
        if (rt_checkpoint_prune(c->dir, (int)c->t[i].stage, step, keep, NULL, &one) != SC_OK &&
            rc == SC_OK) {
            rc = one.code;
            *err = one;
        }
    }
    return rc;
}

void wk_copier_destroy(wk_copier **cp)
{
    if (cp == NULL || *cp == NULL)
        return;
    wk_copier *c = *cp;
    *cp = NULL;
    if (!c->running) {
        free_copier(c);
        return;
    }
    /* the thread may be waiting on a writer that is gone (up to FETCH_TIMEOUT_MS): it is not
     * waited for; it sees the stop, drops what it was taking, and frees the copier itself */
    pthread_t thread = c->thread;
    pthread_mutex_lock(&c->lock);
    c->stop = true;
    c->orphan = true;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
    pthread_detach(thread);
}
