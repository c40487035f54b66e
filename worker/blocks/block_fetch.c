/* Taking blocks over from other workers (see block_fetch.h). */
#include "worker/blocks/block_fetch.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "worker/blocks/block_wire.h"

#define LOG "blocks"

/* One answer received: its header and payload frames (owned by the zmq messages). */
typedef struct {
    wk_block_answer a;
    zmq_msg_t params, state;
    bool have;
} answer;

static void answer_close(answer *r)
{
    if (r->have) {
        zmq_msg_close(&r->params);
        zmq_msg_close(&r->state);
    }
    r->have = false;
}

/* Waits up to timeout_ms for an answer on `s`, in slices of CANCEL_SLICE_MS so that `cancel`
 * (may be NULL) is seen within one: SC_OK when one is there, SC_ERR_TIMEOUT, SC_ERR_CANCELLED. */
#define CANCEL_SLICE_MS 100
static sc_status wait_answer(void *s, int timeout_ms, const atomic_bool *cancel)
{
    uint64_t end = sc_clock_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        if (cancel != NULL && atomic_load(cancel))
            return SC_ERR_CANCELLED;
        uint64_t now = sc_clock_now_ns();
        if (now >= end)
            return SC_ERR_TIMEOUT;
        long left_ms = (long)((end - now) / 1000000ull) + 1;
        zmq_pollitem_t item = {s, 0, ZMQ_POLLIN, 0};
        int n = zmq_poll(&item, 1, left_ms < CANCEL_SLICE_MS ? left_ms : CANCEL_SLICE_MS);
        if (n > 0)
            return SC_OK;
        if (n < 0 && zmq_errno() != EINTR)
            return SC_ERR_TIMEOUT;
    }
}

/* Asks `source` for blocks [first, last]: SC_OK with the answer (status may be ABSENT), or an
 * error when the source cannot be reached or its answer is malformed; SC_ERR_CANCELLED as soon as
 * `cancel` (may be NULL) is set. */
static sc_status ask(void *ctx, const char *source, const void *req, size_t req_len, int timeout_ms,
                     const atomic_bool *cancel, answer *r, sc_err *err)
{
    memset(r, 0, sizeof *r);
    void *s = zmq_socket(ctx, ZMQ_REQ);
    if (s == NULL)
        return SC_ERRF(err, SC_ERR_ZMQ, "zmq socket: %s", zmq_strerror(zmq_errno()));
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
    sc_status rc = SC_OK;
    if (zmq_connect(s, source) != 0 || zmq_send(s, req, req_len, 0) < 0) {
        rc = SC_ERRF(err, SC_ERR_UNAVAILABLE, "%s: cannot ask for blocks: %s", source,
                     zmq_strerror(zmq_errno()));
        goto out;
    }
    sc_status waited = wait_answer(s, timeout_ms, cancel);
    if (waited == SC_ERR_CANCELLED) {
        rc = SC_ERRF(err, SC_ERR_CANCELLED, "%s: taking blocks over was cancelled", source);
        goto out;
    }
    zmq_msg_t head;
    zmq_msg_init(&head);
    if (waited != SC_OK || zmq_msg_recv(&head, s, 0) < 0) {
        zmq_msg_close(&head);
        rc = SC_ERRF(err, SC_ERR_TIMEOUT, "%s: no answer within %d ms", source, timeout_ms);
        goto out;
    }
    bool ok = zmq_msg_size(&head) == sizeof r->a && zmq_msg_more(&head);
    if (ok)
        memcpy(&r->a, zmq_msg_data(&head), sizeof r->a);
    zmq_msg_close(&head);
    zmq_msg_init(&r->params);
    zmq_msg_init(&r->state);
    r->have = true;
    ok = ok && zmq_msg_recv(&r->params, s, 0) >= 0 && zmq_msg_more(&r->params) &&
         zmq_msg_recv(&r->state, s, 0) >= 0 && !zmq_msg_more(&r->state);
    ok = ok && memcmp(r->a.magic, WK_BLOCKS_ANS_MAGIC, 8) == 0;
    r->a.message[sizeof r->a.message - 1] = '\0';
    if (ok && r->a.status == WK_BLOCKS_OK)
        ok = zmq_msg_size(&r->params) == r->a.nparams * sizeof(float) &&
             zmq_msg_size(&r->state) == (size_t)r->a.k * r->a.nparams * sizeof(float) &&
             wk_blocks_checksum(zmq_msg_data(&r->params), r->a.nparams, zmq_msg_data(&r->state),
                                (size_t)r->a.k * r->a.nparams) == r->a.checksum;
    if (!ok) {
        answer_close(r);
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: malformed block answer (sizes or checksum)", source);
    }
out:
    zmq_close(s);
    return rc;
}

sc_status wk_blocks_fetch(const char *const *sources, size_t n, const char *job_id, uint64_t step,
                          const kn_model *model, int first, int last, int timeout_ms,
                          bool own_first, const atomic_bool *cancel, rt_stage_image *out,
                          wk_fetch_stats *stats, sc_err *err)
{
    memset(out, 0, sizeof *out);
    memset(stats, 0, sizeof *stats);
    int nb = kn_model_block_count(model);
    if (first < 0 || first > last || last >= nb)
        return SC_ERRF(err, SC_ERR_INVALID, "blocks [%d, %d] are not in the model (0..%d)", first,
                       last, nb - 1);
    if (strlen(job_id) >= sizeof((wk_block_request *)0)->job_id)
        return SC_ERRF(err, SC_ERR_INVALID, "job id '%s' is too long", job_id);
    size_t req_len = sizeof(wk_block_request) + (size_t)nb * sizeof(uint64_t);
    char *req = calloc(1, req_len);
    uint64_t *counts = (uint64_t *)(req + sizeof(wk_block_request));
    void *ctx = zmq_ctx_new();
    if (req == NULL || ctx == NULL) {
        free(req);
        if (ctx)
            zmq_ctx_term(ctx);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory asking for blocks");
    }
    for (int b = 0; b < nb; b++)
        counts[b] = kn_model_block(model, b)->params;
    size_t np = wk_blocks_offset(counts, first, last + 1);
    uint64_t t0 = sc_clock_now_ns();
    sc_status rc = SC_OK;
    size_t k = 0;
    int next = first;
    char tried[600] = "";
    while (next <= last && rc == SC_OK) {
        wk_block_request rq;
        memset(&rq, 0, sizeof rq);
        memcpy(rq.magic, WK_BLOCKS_REQ_MAGIC, 8);
        sc_strlcpy(rq.job_id, job_id, sizeof rq.job_id);
        rq.step = step;
        rq.first = (uint32_t)next;
        rq.last = (uint32_t)last;
        rq.nblocks = (uint32_t)nb;
        memcpy(req, &rq, sizeof rq);
        bool got = false;
        tried[0] = '\0';
        for (size_t i = 0; i < n && !got && rc == SC_OK; i++) {
            answer r;
            sc_err why;
            sc_err_clear(&why);
            sc_status asked = ask(ctx, sources[i], req, req_len, timeout_ms, cancel, &r, &why);
            if (asked == SC_ERR_CANCELLED) {
                rc = SC_ERRF(err, SC_ERR_CANCELLED, "%s", why.msg);
                break;
            }
            if (asked != SC_OK) {
                SC_LOG_WARN(LOG, "job %s: %s", job_id, why.msg);
                size_t used = strlen(tried);
                snprintf(tried + used, sizeof tried - used, "%s%.200s", used ? "; " : "", why.msg);
                continue;
            }
            if (r.a.status != WK_BLOCKS_OK || r.a.first != (uint32_t)next || r.a.last < r.a.first ||
                r.a.last > (uint32_t)last ||
                r.a.nparams != wk_blocks_offset(counts, next, (int)r.a.last + 1)) {
                size_t used = strlen(tried);
                snprintf(tried + used, sizeof tried - used, "%s%.100s: %.200s", used ? "; " : "",
                         sources[i], r.a.status != WK_BLOCKS_OK ? r.a.message : "wrong blocks");
                answer_close(&r);
                continue;
            }
            if (out->params == NULL) { /* the first piece says the optimizer's shape */
                k = r.a.k;
                out->params = malloc(np * sizeof(float) + 1);
                out->state = malloc(k * np * sizeof(float) + 1);
                out->opt_t = r.a.opt_t;
                out->optim_kind = (int)r.a.optim_kind;
                if (out->params == NULL || out->state == NULL)
                    rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory taking over %zu parameters", np);
            } else if (r.a.k != k || r.a.opt_t != out->opt_t ||
                       (int)r.a.optim_kind != out->optim_kind) {
                rc = SC_ERRF(err, SC_ERR_INVALID,
                             "%s: blocks %u-%u were saved with optimizer %u after %llu updates; "
                             "the blocks before them with optimizer %d after %llu",
                             sources[i], r.a.first, r.a.last, r.a.optim_kind,
                             (unsigned long long)r.a.opt_t, out->optim_kind,
                             (unsigned long long)out->opt_t);
            }
            if (rc == SC_OK) {
                rt_stage_image piece = {.first_block = next,
                                        .last_block = (int)r.a.last,
                                        .nparams = r.a.nparams,
                                        .nstate = k * r.a.nparams,
                                        .params = zmq_msg_data(&r.params),
                                        .state = zmq_msg_data(&r.state)};
                size_t at = wk_blocks_offset(counts, first, next);
                wk_blocks_copy(&piece, counts, next, (int)r.a.last, out->params, out->state, np, at,
                               k);
                double got_bytes = (double)(1 + k) * (double)r.a.nparams * sizeof(float);
                stats->bytes += got_bytes;
                if (own_first && i == 0)
                    stats->local_bytes += got_bytes;
                stats->pieces++;
                next = (int)r.a.last + 1;
                got = true;
            }
            answer_close(&r);
        }
        if (!got && rc == SC_OK)
            rc = SC_ERRF(err, SC_ERR_NOT_FOUND,
                         "block %d of job %s at step %llu is held by none of the %zu worker(s) "
                         "asked (%s)",
                         next, job_id, (unsigned long long)step, n, tried);
    }
    free(req);
    zmq_ctx_term(ctx);
    stats->seconds = (double)(sc_clock_now_ns() - t0) / 1e9;
    if (rc != SC_OK) {
        rt_stage_image_clear(out);
        return rc;
    }
    out->step = step;
    out->first_block = first;
    out->last_block = last;
    out->nparams = np;
    out->nstate = k * np;
    return SC_OK;
}
