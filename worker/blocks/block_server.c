/* The worker's block server (see block_server.h). */
#include "worker/blocks/block_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "worker/blocks/block_wire.h"

#define LOG "blocks"
#define KEPT_MAX 8

typedef struct {
    char job_id[64];
    rt_stage_image im;
    uint64_t touched_ns;
} kept_image;

struct wk_block_server {
    void *ctx, *sock;
    char endpoint[300];
    char checkpoint_dir[1100];
    pthread_t thread;
    bool running;
    atomic_bool stop;
    pthread_mutex_t lock; /* guards kept[], answered, bytes */
    kept_image kept[KEPT_MAX];
    uint64_t answered, bytes;
};

static bool is_address(const char *host)
{
    unsigned char buf[16];
    return strcmp(host, "*") == 0 || inet_pton(AF_INET, host, buf) == 1 ||
           inet_pton(AF_INET6, host, buf) == 1;
}

/* Under s->lock: forgets images not kept or served for WK_BLOCKS_KEEP_S. */
static void expire(wk_block_server *s, uint64_t now)
{
    for (int i = 0; i < KEPT_MAX; i++) {
        kept_image *k = &s->kept[i];
        if (k->job_id[0] && now - k->touched_ns > (uint64_t)WK_BLOCKS_KEEP_S * 1000000000ull) {
            SC_LOG_INFO(LOG, "dropping the kept state of job %s (step %llu): unused for %d s",
                        k->job_id, (unsigned long long)k->im.step, WK_BLOCKS_KEEP_S);
            rt_stage_image_clear(&k->im);
            k->job_id[0] = '\0';
        }
    }
}

void wk_block_server_keep(wk_block_server *s, const char *job_id, rt_stage_image *im)
{
    pthread_mutex_lock(&s->lock);
    kept_image *slot = NULL;
    for (int i = 0; i < KEPT_MAX && slot == NULL; i++)
        if (strcmp(s->kept[i].job_id, job_id) == 0)
            slot = &s->kept[i];
    for (int i = 0; i < KEPT_MAX && slot == NULL; i++)
        if (s->kept[i].job_id[0] == '\0')
            slot = &s->kept[i];
    if (slot == NULL) { /* full: the oldest goes */
        slot = &s->kept[0];
        for (int i = 1; i < KEPT_MAX; i++)
            if (s->kept[i].touched_ns < slot->touched_ns)
                slot = &s->kept[i];
    }
    rt_stage_image_clear(&slot->im);
    slot->im = *im;
    memset(im, 0, sizeof *im);
    sc_strlcpy(slot->job_id, job_id, sizeof slot->job_id);
    slot->touched_ns = sc_clock_now_ns();
    pthread_mutex_unlock(&s->lock);
}

void wk_block_server_drop(wk_block_server *s, const char *job_id, bool but)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < KEPT_MAX; i++) {
        kept_image *k = &s->kept[i];
        if (k->job_id[0] && (strcmp(k->job_id, job_id) == 0) != but) {
            rt_stage_image_clear(&k->im);
            k->job_id[0] = '\0';
        }
    }
    pthread_mutex_unlock(&s->lock);
}

void wk_block_server_counts(wk_block_server *s, uint64_t *answered, uint64_t *bytes)
{
    pthread_mutex_lock(&s->lock);
    *answered = s->answered;
    *bytes = s->bytes;
    pthread_mutex_unlock(&s->lock);
}

/* Whether image `im` can answer a request for block `first` of `counts` (its sizes agree with
 * the model the asker runs). */
static bool holds(const rt_stage_image *im, uint64_t step, uint32_t first, const uint64_t *counts,
                  uint32_t nblocks)
{
    if (im->step != step || (uint32_t)im->first_block > first || (uint32_t)im->last_block < first ||
        (uint32_t)im->last_block >= nblocks)
        return false;
    size_t np = wk_blocks_offset(counts, im->first_block, im->last_block + 1);
    return np == im->nparams && (np == 0 ? im->nstate == 0 : im->nstate % np == 0);
}

/* The answer for blocks [rq->first, ...] cut from image `im` (which holds rq->first): the
 * header in *a, the parameters and state in new arrays *params, *state (caller frees). */
static sc_status cut(const rt_stage_image *im, const wk_block_request *rq, const uint64_t *counts,
                     wk_block_answer *a, float **params, float **state, sc_err *err)
{
    uint32_t last = rq->last < (uint32_t)im->last_block ? rq->last : (uint32_t)im->last_block;
    size_t np = wk_blocks_offset(counts, (int)rq->first, (int)last + 1);
    size_t k = im->nparams ? im->nstate / im->nparams : 0;
    *params = malloc(np * sizeof(float) + 1);
    *state = malloc(k * np * sizeof(float) + 1);
    if (*params == NULL || *state == NULL) {
        free(*params);
        free(*state);
        *params = *state = NULL;
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory cutting %zu parameters", np);
    }
    wk_blocks_copy(im, counts, (int)rq->first, (int)last, *params, *state, np, 0, k);
    memset(a, 0, sizeof *a);
    memcpy(a->magic, WK_BLOCKS_ANS_MAGIC, 8);
    a->status = WK_BLOCKS_OK;
    a->first = rq->first;
    a->last = last;
    a->optim_kind = (uint32_t)im->optim_kind;
    a->k = (uint32_t)k;
    a->opt_t = im->opt_t;
    a->nparams = np;
    a->checksum = wk_blocks_checksum(*params, np, *state, k * np);
    return SC_OK;
}

/* The answer for a request from a checkpoint file of the request's step in `dir` holding block
 * rq->first. SC_ERR_NOT_FOUND when there is none; a file that does not read (corrupt,
 * truncated, not a checkpoint) is logged and passed over, never served. */
static sc_status from_files(const char *dir, const wk_block_request *rq, const uint64_t *counts,
                            wk_block_answer *a, float **params, float **state, sc_err *skipped,
                            sc_err *err)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return SC_ERR_NOT_FOUND;
    struct dirent *e;
    sc_status rc = SC_ERR_NOT_FOUND;
    while (rc == SC_ERR_NOT_FOUND && (e = readdir(d)) != NULL) {
        int stage;
        uint64_t step;
        char again[300], path[1500];
        if (sscanf(e->d_name, "stage%d-step%" SCNu64 ".ckpt", &stage, &step) != 2 ||
            step != rq->step)
            continue;
        snprintf(again, sizeof again, "stage%d-step%" PRIu64 ".ckpt", stage, step);
        if (strcmp(again, e->d_name) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        rt_stage_image im;
        sc_err why;
        sc_err_clear(&why);
        if (rt_stage_image_read(path, &im, &why) != SC_OK) {
            SC_LOG_WARN(LOG, "not serving %s: %s", path, why.msg);
            /* for the asker: the file's name and why, without this worker's folders */
            size_t at = strncmp(why.msg, path, strlen(path)) == 0 ? strlen(path) : 0;
            at += strncmp(why.msg + at, ": ", 2) == 0 ? 2 : 0;
            skipped->code = why.code;
            sc_strfmt(skipped->msg, sizeof skipped->msg, "%s: %s", e->d_name, why.msg + at);
            continue;
        }
        if (holds(&im, rq->step, rq->first, counts, rq->nblocks))
            rc = cut(&im, rq, counts, a, params, state, err);
        rt_stage_image_clear(&im);
    }
    closedir(d);
    return rc;
}

/* The answer for a request from a kept image of the job's step holding block rq->first (cut
 * under the lock, nothing else copied), else from a checkpoint file of that step.
 * SC_ERR_NOT_FOUND when there is none. */
static sc_status take_blocks(wk_block_server *s, const wk_block_request *rq, const uint64_t *counts,
                             wk_block_answer *a, float **params, float **state, sc_err *err)
{
    *params = *state = NULL;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < KEPT_MAX; i++) {
        kept_image *k = &s->kept[i];
        if (k->job_id[0] == '\0' || strcmp(k->job_id, rq->job_id) != 0 ||
            !holds(&k->im, rq->step, rq->first, counts, rq->nblocks))
            continue;
        k->touched_ns = sc_clock_now_ns();
        sc_status rc = cut(&k->im, rq, counts, a, params, state, err);
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    pthread_mutex_unlock(&s->lock);
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", s->checkpoint_dir, rq->job_id);
    sc_err skipped;
    sc_err_clear(&skipped);
    sc_status rc = from_files(dir, rq, counts, a, params, state, &skipped, err);
    if (rc == SC_ERR_NOT_FOUND) { /* the copies this worker holds of other workers' stages */
        snprintf(dir, sizeof dir, "%s/%s/" WK_BLOCKS_COPIES_DIR, s->checkpoint_dir, rq->job_id);
        rc = from_files(dir, rq, counts, a, params, state, &skipped, err);
    }
    if (rc == SC_ERR_NOT_FOUND && skipped.msg[0] != '\0')
        SC_ERRF(err, SC_ERR_NOT_FOUND,
                "no intact state of block %u of job %s at step %llu here (refused %.100s)",
                rq->first, rq->job_id, (unsigned long long)rq->step, skipped.msg);
    else if (rc == SC_ERR_NOT_FOUND)
        SC_ERRF(err, SC_ERR_NOT_FOUND, "no state of block %u of job %s at step %llu here",
                rq->first, rq->job_id, (unsigned long long)rq->step);
    return rc;
}

static void send_answer(wk_block_server *s, zmq_msg_t *id, const wk_block_answer *a,
                        const float *params, const float *state, size_t ns)
{
    zmq_msg_send(id, s->sock, ZMQ_SNDMORE);
    zmq_send(s->sock, "", 0, ZMQ_SNDMORE);
    zmq_send(s->sock, a, sizeof *a, ZMQ_SNDMORE);
    zmq_send(s->sock, params, a->nparams * sizeof(float), ZMQ_SNDMORE);
    zmq_send(s->sock, state, ns * sizeof(float), 0);
}

static void refuse(wk_block_server *s, zmq_msg_t *id, uint32_t status, const char *why)
{
    wk_block_answer a;
    memset(&a, 0, sizeof a);
    memcpy(a.magic, WK_BLOCKS_ANS_MAGIC, 8);
    a.status = status;
    sc_strlcpy(a.message, why, sizeof a.message);
    float none = 0;
    send_answer(s, id, &a, &none, &none, 0);
}

/* Answers one request: frames [identity][empty][request]. */
static void serve_one(wk_block_server *s)
{
    zmq_msg_t id, part;
    zmq_msg_init(&id);
    zmq_msg_init(&part);
    if (zmq_msg_recv(&id, s->sock, 0) < 0)
        goto out;
    /* skip to the last frame (the request); anything malformed is answered as bad */
    size_t frames = 0;
    int more = zmq_msg_more(&id);
    while (more) {
        zmq_msg_close(&part);
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, s->sock, 0) < 0)
            goto out;
        frames++;
        more = zmq_msg_more(&part);
    }
    wk_block_request rq;
    size_t len = zmq_msg_size(&part);
    if (frames != 2 || len < sizeof rq) {
        refuse(s, &id, WK_BLOCKS_BAD_REQUEST, "not a block request");
        goto out;
    }
    memcpy(&rq, zmq_msg_data(&part), sizeof rq);
    rq.job_id[sizeof rq.job_id - 1] = '\0';
    if (memcmp(rq.magic, WK_BLOCKS_REQ_MAGIC, 8) != 0 || rq.nblocks == 0 ||
        rq.nblocks > WK_BLOCKS_MAX || len != sizeof rq + rq.nblocks * sizeof(uint64_t) ||
        rq.first > rq.last || rq.last >= rq.nblocks || !wk_blocks_job_id_ok(rq.job_id)) {
        refuse(s, &id, WK_BLOCKS_BAD_REQUEST,
               "bad block request (magic, job id [A-Za-z0-9._-], block range or counts)");
        goto out;
    }
    uint64_t *counts = malloc(rq.nblocks * sizeof *counts);
    if (counts == NULL) {
        refuse(s, &id, WK_BLOCKS_ABSENT, "out of memory");
        goto out;
    }
    memcpy(counts, (char *)zmq_msg_data(&part) + sizeof rq, rq.nblocks * sizeof *counts);
    wk_block_answer a;
    float *params = NULL, *state = NULL;
    sc_err err;
    sc_err_clear(&err);
    if (take_blocks(s, &rq, counts, &a, &params, &state, &err) != SC_OK) {
        refuse(s, &id, WK_BLOCKS_ABSENT, err.msg);
    } else {
        /* counted before it goes: whoever got the answer sees it counted */
        pthread_mutex_lock(&s->lock);
        s->answered++;
        s->bytes += (1 + (size_t)a.k) * a.nparams * sizeof(float);
        pthread_mutex_unlock(&s->lock);
        send_answer(s, &id, &a, params, state, (size_t)a.k * a.nparams);
        SC_LOG_INFO(LOG, "sent blocks %u-%u of job %s at step %llu (%llu parameters)", a.first,
                    a.last, rq.job_id, (unsigned long long)rq.step, (unsigned long long)a.nparams);
    }
    free(params);
    free(state);
    free(counts);
out:
    zmq_msg_close(&id);
    zmq_msg_close(&part);
}

static void *serve_main(void *arg)
{
    wk_block_server *s = arg;
    while (!atomic_load(&s->stop)) {
        zmq_pollitem_t it = {.socket = s->sock, .events = ZMQ_POLLIN};
        int n = zmq_poll(&it, 1, 200);
        if (n > 0 && (it.revents & ZMQ_POLLIN))
            serve_one(s);
        pthread_mutex_lock(&s->lock);
        expire(s, sc_clock_now_ns());
        pthread_mutex_unlock(&s->lock);
    }
    return NULL;
}

sc_status wk_block_server_start(wk_block_server **out, const char *bind_host,
                                const char *checkpoint_dir, sc_err *err)
{
    *out = NULL;
    wk_block_server *s = calloc(1, sizeof *s);
    SC_ALLOC_CHECK(s, err);
    pthread_mutex_init(&s->lock, NULL);
    sc_strlcpy(s->checkpoint_dir, checkpoint_dir, sizeof s->checkpoint_dir);
    bool named = !is_address(bind_host);
    char ep[300];
    snprintf(ep, sizeof ep, "tcp://%s:*", named ? "*" : bind_host);
    s->ctx = zmq_ctx_new();
    s->sock = s->ctx ? zmq_socket(s->ctx, ZMQ_ROUTER) : NULL;
    int zero = 0;
    /* a request is small; one that claims more is dropped unread */
    int64_t most = (int64_t)(sizeof(wk_block_request) + WK_BLOCKS_MAX * sizeof(uint64_t));
    if (s->sock == NULL || zmq_setsockopt(s->sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(s->sock, ZMQ_MAXMSGSIZE, &most, sizeof most) != 0 ||
        zmq_bind(s->sock, ep) != 0) {
        sc_status rc = SC_ERRF(err, SC_ERR_ZMQ, "block server: cannot bind %s: %s", ep,
                               zmq_strerror(zmq_errno()));
        wk_block_server_stop(&s);
        return rc;
    }
    size_t len = sizeof s->endpoint;
    zmq_getsockopt(s->sock, ZMQ_LAST_ENDPOINT, s->endpoint, &len);
    if (named) {
        char port[16];
        sc_strlcpy(port, strrchr(s->endpoint, ':') + 1, sizeof port);
        snprintf(s->endpoint, sizeof s->endpoint, "tcp://%s:%s", bind_host, port);
    }
    if (pthread_create(&s->thread, NULL, serve_main, s) != 0) {
        wk_block_server_stop(&s);
        return SC_ERRF(err, SC_ERR_INTERNAL, "block server: cannot start its thread");
    }
    s->running = true;
    *out = s;
    return SC_OK;
}

const char *wk_block_server_endpoint(const wk_block_server *s)
{
    return s->endpoint;
}

void wk_block_server_stop(wk_block_server **sp)
{
    if (sp == NULL || *sp == NULL)
        return;
    wk_block_server *s = *sp;
    atomic_store(&s->stop, true);
    if (s->running)
        pthread_join(s->thread, NULL);
    if (s->sock)
        zmq_close(s->sock);
    if (s->ctx)
        zmq_ctx_term(s->ctx);
    for (int i = 0; i < KEPT_MAX; i++)
        rt_stage_image_clear(&s->kept[i].im);
    pthread_mutex_destroy(&s->lock);
    free(s);
    *sp = NULL;
}
