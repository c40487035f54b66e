/*
 * rt transport, nccl backend: GPU stages of one job on distinct GPUs, ncclSend / ncclRecv.
 *
 * Communicators: one two-rank communicator per stage boundary and direction. A stage with a next
 * stage creates, when it binds, the NCCL unique ids of the two communicators towards it (A:
 * activations forward, G: gradients back; it is rank 0 of both) and publishes them in its
 * endpoint ("nccl://v1/<A>/<G>", see nccl_endpoint.h); the next stage receives that endpoint as its
 * previous one in the job's START, exactly as zmq endpoints travel, and joins both as rank 1. So
 * a stage holds up to four communicators, each used in one direction only, each with its own
 * CUDA stream:
 *   fwd_out  A to the next stage      (rank 0, sends)     bwd_in   G from the next stage (rank 0)
 *   fwd_in   A from the previous one  (rank 1, receives)  bwd_out  G to the previous one (rank 1)
 * Why not one communicator for the job: an NCCL send may wait on the GPU until the peer posts
 * the matching receive, and operations of one communicator run in issue order, so a stage that
 * sends an activation and then receives a gradient while its neighbour sends that gradient and
 * then receives the activation (1F1B's steady state) would deadlock on the GPU. Grouping pending
 * sends with the next receive avoids that only while every send finds a receive to ride with; a
 * stage whose last action of an iteration is a send (every stage's SEND_B) would hold it back
 * while the neighbour waits for it. With one communicator and one stream per direction, a
 * stream only ever holds sends or only receives of one peer, matched in the same order on both
 * sides, so nothing on a GPU waits for anything but the peer's own progress: the semantics of
 * the zmq backend (a send never waits for the receiver) hold, which the schedules are checked
 * deadlock-free under. Groups are still used to issue a message's header and payload together.
 *
 * Messages: NCCL carries no tags and a receive must post a buffer of the sender's size, so every
 * message is a fixed header (magic, kind, tag, step, micro-batch, size, the sending copy and its
 * send stamp) followed by its payload, both sent in one group. The receiver receives the header
 * alone first, checks it is exactly the message asked for (messages of one direction come in send
 * order, which the runner's schedules keep), and only then posts the payload's receive. Anything
 * else is SC_ERR_INVALID naming both messages, and the transport is broken from then on (the stream
 * of messages is out of step); nothing is ever copied into the caller's buffer from the wrong
 * message.
 *
 * Buffers: send copies the payload (host or device memory, cudaMemcpyDefault) into a device
 * staging buffer of the transport and waits for that copy only, so the caller's buffer may be
 * reused on return; the send itself completes in the background (buffers of completed sends are
 * reused). A receive goes into the caller's buffer directly when it is device memory, else
 * through a device and a pinned host staging buffer.
 *
 * Never hanging: communicators are created non-blocking (config.blocking = 0) and every wait
 * polls (cudaEventQuery, ncclCommGetAsyncError) until a deadline of timeout_ms: then
 * SC_ERR_TIMEOUT, an NCCL error (a peer whose process died breaks its network connections)
 * SC_ERR_UNAVAILABLE, rt_transport_abort() SC_ERR_CANCELLED; on any of them every communicator is
 * aborted (ncclCommAbort makes NCCL's kernels stop waiting) and the transport is broken. A peer
 * on the same host reached over NVLink / PCIe shows no error when it dies: its receives time out.
 * Closing waits at most min(timeout_ms, 5 s) for sends still in flight, then aborts.
 * Invariant: while connected, nothing here waits for the whole device (no cudaFree, no
 * cudaDeviceSynchronize, only non-blocking streams): a send in flight waits for its receiver,
 * so a device-wide wait could wait for a dead peer. Buffers are freed at destroy, after every
 * communicator is finalized or aborted.
 * Link timing, as the other backends give it (transport.c counts it in the sender's link
 * figures): the send stamp travels in the header, and the receiver times its side on the GPU,
 * with timing events on the channel's stream around the two receives. The stream is idle when
 * the first is recorded, so it marks the moment of posting on the host clock; the header's
 * receive ending well after it (CLEAN_WAIT_NS) says the message was not there yet (the stage
 * waited for it: a clean message), and the payload's receive ending is its arrival. Best
 * effort: a timing call that fails leaves the message unmeasured, never fails it.
 * Threading: one user thread; rt_transport_abort from any (it only sets the flag polled here).
 */
#ifdef SC_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "worker/transport/gpu_module.h"
#include "worker/transport/nccl_endpoint.h"
#include "worker/transport/nccl_wait.h"
#include "worker/transport/transport_impl.h"

#define WIRE_MAGIC 0x5343524fu /* "SCRO" ("SCRN" before the send stamp) */
#define HDR_ROOM 256           /* header slot in a staging buffer: keeps the payload aligned */
#define FLUSH_MAX_MS 5000
#define MAX_INFLIGHT 64 /* sends in flight before a send waits for the oldest */
#define CLEAN_WAIT_NS 200000 /* a header received this long after posting was waited for */

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the nccl transport needs NCCL >= 2.14 (non-blocking communicators)"
#endif

typedef struct {
    uint32_t magic;
    int32_t kind;
    uint64_t tag;
    uint64_t step;
    int32_t microbatch;
    int32_t from_copy; /* the sending stage's copy */
    uint64_t bytes;
    uint64_t sent_ns; /* the sender's monotonic clock when it handed the message over */
} nccl_header;

typedef struct send_rec {
    struct send_rec *next;
    unsigned char *dev; /* HDR_ROOM + cap bytes */
    size_t cap;
    cudaEvent_t done; /* recorded after the send on its stream */
} send_rec;

/* An outgrown receive staging pair, freed at destroy. */
typedef struct retired {
    struct retired *next;
    unsigned char *dev, *host;
} retired;

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t ev;
    cudaEvent_t posted, got_header, got_payload; /* receives: link timing (with timing) */
    int peer; /* the other rank */
    bool live;
    const char *name; /* for messages */
} chan;

typedef struct {
    int dev;
    bool has_ids;
    ncclUniqueId id_a, id_g;
    chan fwd_out, bwd_in, fwd_in, bwd_out;
    cudaStream_t copy; /* staging copies of sends */
    cudaEvent_t copy_done;
    send_rec *inflight_head, *inflight_tail, *spare;
    int n_inflight;
    unsigned char *hdr_dev;   /* device: a received header */
    nccl_header *hdr_host;    /* pinned */
    unsigned char *rbuf_dev;  /* device staging of a receive into host memory */
    unsigned char *rbuf_host; /* pinned, as large */
    size_t rbuf_cap;
    retired *graveyard;
    bool broken;
    char why[320];
} nccl_impl;

#define CUDA_TRY(err, call, what)                                                                  \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return SC_ERRF(err, SC_ERR_CUDA, "nccl transport: %s: %s", what,                       \
                           cudaGetErrorString(e_));                                                \
    } while (0)

static chan *all_chans(nccl_impl *n, int i)
{
    chan *c[4] = {&n->fwd_out, &n->bwd_in, &n->fwd_in, &n->bwd_out};
    return c[i];
}

/* Aborts every communicator: NCCL kernels waiting for a peer return, nothing can be assumed
 * about operations in flight, so the transport is unusable afterwards. */
static void abort_all(nccl_impl *n)
{
    for (int i = 0; i < 4; i++) {
        chan *c = all_chans(n, i);
        if (c->live) {
            ncclCommAbort(c->comm);
            c->live = false;
        }
    }
}

/* Records why the transport broke (first failure only), aborts, returns rc with the message. */
static sc_status fail(nccl_impl *n, sc_status rc, sc_err *err)
{
    if (!n->broken) {
        n->broken = true;
        sc_strlcpy(n->why, err != NULL ? err->msg : "an earlier failure", sizeof n->why);
    }
    abort_all(n);
    return rc;
}

static sc_status check_usable(rt_transport *t, nccl_impl *n, sc_err *err)
{
    if (atomic_load(&t->aborted)) {
        abort_all(n);
        return SC_ERRF(err, SC_ERR_CANCELLED, "nccl transport: aborted");
    }
    if (n->broken)
        return SC_ERRF(err, SC_ERR_UNAVAILABLE,
                       "nccl transport: unusable after an earlier failure (%s)", n->why);
    return SC_OK;
}

/* Any live communicator in error (its peer's connection broke, or NCCL failed): SC_ERR_UNAVAILABLE
 * after aborting everything. */
static sc_status check_async(nccl_impl *n, sc_err *err)
{
    for (int i = 0; i < 4; i++) {
        chan *c = all_chans(n, i);
        if (!c->live)
            continue;
        ncclResult_t a = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(c->comm, &a);
        if (q != ncclSuccess)
            a = q;
        if (a != ncclSuccess && a != ncclInProgress) {
            SC_ERRF(err, SC_ERR_UNAVAILABLE,
                    "nccl transport: the %s communicator failed (%s: %s); is the peer stage "
                    "gone?",
                    c->name, ncclGetErrorString(a), rt_nccl_msg(a));
            return fail(n, SC_ERR_UNAVAILABLE, err);
        }
    }
    return SC_OK;
}

/* The common exit checks of a wait: abort, deadline, NCCL errors. */
static sc_status wait_checks(rt_transport *t, nccl_impl *n, uint64_t deadline_ns, const char *what,
                             sc_err *err)
{
    if (atomic_load(&t->aborted)) {
        SC_ERRF(err, SC_ERR_CANCELLED, "nccl transport: aborted while waiting for %s", what);
        return fail(n, SC_ERR_CANCELLED, err);
    }
    SC_CHECK(check_async(n, err));
    if (sc_clock_now_ns() >= deadline_ns) {
        SC_ERRF(err, SC_ERR_TIMEOUT, "nccl transport: %s did not complete within %d ms", what,
                t->cfg.timeout_ms);
        return fail(n, SC_ERR_TIMEOUT, err);
    }
    return SC_OK;
}

/* Waits for `ev` (recorded on an NCCL stream) until the deadline. */
static sc_status wait_event(rt_transport *t, nccl_impl *n, cudaEvent_t ev, uint64_t deadline_ns,
                            const char *what, sc_err *err)
{
    int us = 10;
    for (;;) {
        cudaError_t q = cudaEventQuery(ev);
        if (q == cudaSuccess)
            return SC_OK;
        if (q != cudaErrorNotReady) {
            SC_ERRF(err, SC_ERR_CUDA, "nccl transport: waiting for %s: %s", what,
                    cudaGetErrorString(q));
            return fail(n, SC_ERR_CUDA, err);
        }
        SC_CHECK(wait_checks(t, n, deadline_ns, what, err));
        rt_nccl_backoff(&us);
    }
}

/* A non-blocking communicator may answer ncclInProgress: poll until it settles (NCCL forbids
 * other calls on it until then). */
static sc_status settle(rt_transport *t, nccl_impl *n, chan *c, ncclResult_t r,
                        uint64_t deadline_ns, const char *what, sc_err *err)
{
    int us = 10;
    while (r == ncclInProgress) {
        SC_CHECK(wait_checks(t, n, deadline_ns, what, err));
        rt_nccl_backoff(&us);
        if (ncclCommGetAsyncError(c->comm, &r) != ncclSuccess)
            r = ncclInternalError;
    }
    if (r != ncclSuccess) {
        SC_ERRF(err, SC_ERR_NCCL, "nccl transport: %s: %s (%s)", what, ncclGetErrorString(r),
                rt_nccl_msg(r));
        return fail(n, SC_ERR_NCCL, err);
    }
    return SC_OK;
}

/* ---- bind / connect ---- */

static sc_status nt_bind(rt_transport *t, const char *endpoint, sc_err *err)
{
    bool with_ids;
    if (strcmp(endpoint, "nccl://") == 0)
        with_ids = true;
    else if (strcmp(endpoint, "nccl://-") == 0)
        with_ids = false;
    else
        return SC_ERRF(err, SC_ERR_INVALID,
                       "nccl transport: bind endpoint \"%.80s\": expected \"nccl://\" (a stage "
                       "with a next stage) or \"nccl://-\" (the last stage)",
                       endpoint);
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "nccl transport: no CUDA device is visible (%s); the nccl transport "
                       "needs GPU stages, use \"zmq\"",
                       ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    if (t->cfg.device < 0 || t->cfg.device >= count)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "nccl transport: device cuda:%d does not exist (%d visible: cuda:0.."
                       "cuda:%d)",
                       t->cfg.device, count, count - 1);
    nccl_impl *n = calloc(1, sizeof *n);
    SC_ALLOC_CHECK(n, err);
    t->impl = n;
    n->dev = t->cfg.device;
    n->fwd_out.name = "activations-to-next";
    n->bwd_in.name = "gradients-from-next";
    n->fwd_in.name = "activations-from-previous";
    n->bwd_out.name = "gradients-to-previous";
    CUDA_TRY(err, cudaSetDevice(n->dev), "cudaSetDevice");
    CUDA_TRY(err, cudaStreamCreateWithFlags(&n->copy, cudaStreamNonBlocking), "creating a stream");
    CUDA_TRY(err, cudaEventCreateWithFlags(&n->copy_done, cudaEventDisableTiming),
             "creating an event");
    CUDA_TRY(err, cudaMalloc((void **)&n->hdr_dev, HDR_ROOM), "allocating the header buffer");
    CUDA_TRY(err, cudaMallocHost((void **)&n->hdr_host, sizeof *n->hdr_host),
             "allocating the pinned header buffer");
    if (with_ids) {
        ncclResult_t r = ncclGetUniqueId(&n->id_a);
        if (r == ncclSuccess)
            r = ncclGetUniqueId(&n->id_g);
        if (r != ncclSuccess)
            return SC_ERRF(err, SC_ERR_NCCL, "nccl transport: ncclGetUniqueId: %s (%s)",
                           ncclGetErrorString(r), rt_nccl_msg(r));
        n->has_ids = true;
    }
    _Static_assert(sizeof(ncclUniqueId) == RT_NCCL_ID_BYTES, "NCCL unique id size changed");
    return rt_nccl_endpoint_format(with_ids ? (const unsigned char *)n->id_a.internal : NULL,
                                   with_ids ? (const unsigned char *)n->id_g.internal : NULL,
                                   t->endpoint, sizeof t->endpoint, err);
}

static sc_status chan_open(nccl_impl *n, chan *c, const ncclUniqueId *id, int rank, sc_err *err)
{
    CUDA_TRY(err, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
             "creating a stream");
    CUDA_TRY(err, cudaEventCreateWithFlags(&c->ev, cudaEventDisableTiming), "creating an event");
    CUDA_TRY(err, cudaEventCreate(&c->posted), "creating an event");
    CUDA_TRY(err, cudaEventCreate(&c->got_header), "creating an event");
    CUDA_TRY(err, cudaEventCreate(&c->got_payload), "creating an event");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* returns at once; completion is polled, so a missing peer cannot hang us */
    ncclResult_t r = ncclCommInitRankConfig(&c->comm, 2, *id, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        SC_ERRF(err, SC_ERR_NCCL, "nccl transport: creating the %s communicator: %s (%s)", c->name,
                ncclGetErrorString(r), rt_nccl_msg(r));
        if (c->comm != NULL)
            ncclCommAbort(c->comm);
        c->comm = NULL;
        return fail(n, SC_ERR_NCCL, err);
    }
    c->live = true;
    c->peer = 1 - rank;
    return SC_OK;
}

static sc_status prealloc(nccl_impl *n, size_t bytes, sc_err *err);

/* Starts the communicators towards the next stage (with this stage's ids) and the previous one
 * (with `pa` / `pg`), then waits until every one has joined, then preallocates the staging of
 * messages up to cfg.max_message_bytes (allocations while NCCL kernels run can wait for them). */
static sc_status open_chans(rt_transport *t, nccl_impl *n, bool next, const ncclUniqueId *pa,
                            const ncclUniqueId *pg, sc_err *err)
{
    CUDA_TRY(err, cudaSetDevice(n->dev), "cudaSetDevice");
    /* All communicators are started before any is waited for: each needs its peer, which may
     * be starting its own in another order. */
    if (next) {
        SC_CHECK(chan_open(n, &n->fwd_out, &n->id_a, 0, err));
        SC_CHECK(chan_open(n, &n->bwd_in, &n->id_g, 0, err));
    }
    if (pa != NULL) {
        SC_CHECK(chan_open(n, &n->fwd_in, pa, 1, err));
        SC_CHECK(chan_open(n, &n->bwd_out, pg, 1, err));
    }
    uint64_t deadline = rt_nccl_deadline_after(t->cfg.timeout_ms);
    for (int i = 0; i < 4; i++) {
        chan *c = all_chans(n, i);
        if (!c->live)
            continue;
        ncclResult_t r = ncclInProgress;
        if (ncclCommGetAsyncError(c->comm, &r) != ncclSuccess)
            r = ncclInternalError;
        char what[160];
        snprintf(what, sizeof what, "joining the %s communicator (the %s stage must connect too)",
                 c->name, c == &n->fwd_out || c == &n->bwd_in ? "next" : "previous");
        SC_CHECK(settle(t, n, c, r, deadline, what, err));
    }
    return prealloc(n, t->cfg.max_message_bytes, err);
}

static sc_status nt_connect(rt_transport *t, const char *prev, const char *next, sc_err *err)
{
    nccl_impl *n = t->impl;
    SC_CHECK(check_usable(t, n, err));
    for (int i = 0; i < 4; i++)
        if (all_chans(n, i)->live)
            return SC_ERRF(err, SC_ERR_PRECONDITION,
                           "nccl transport: already connected (an nccl stage connects once)");
    ncclUniqueId pa, pg;
    if (prev != NULL) {
        bool ids = false;
        SC_CHECK(rt_nccl_endpoint_parse(prev, &ids, (unsigned char *)pa.internal,
                                        (unsigned char *)pg.internal, err));
        if (!ids)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "nccl transport: the previous stage's endpoint (nccl://v1/-) carries "
                           "no communicator ids: it was bound as a last stage");
    }
    if (next != NULL) {
        bool ids = false;
        unsigned char skip_a[RT_NCCL_ID_BYTES], skip_g[RT_NCCL_ID_BYTES];
        SC_CHECK(rt_nccl_endpoint_parse(next, &ids, skip_a, skip_g, err));
        if (!n->has_ids)
            return SC_ERRF(err, SC_ERR_PRECONDITION,
                           "nccl transport: this stage was bound as the last one (nccl://-) but "
                           "is given a next stage");
    }
    /* from here on any failure leaves communicators half made: it breaks the transport */
    sc_status rc =
        open_chans(t, n, next != NULL, prev != NULL ? &pa : NULL, prev != NULL ? &pg : NULL, err);
    return rc == SC_OK || n->broken ? rc : fail(n, rc, err);
}

/* One send (`send`) or receive of `bytes` on the channel's stream, in a group of its own;
 * waits until NCCL has taken it (a non-blocking communicator may answer ncclInProgress). */
static sc_status p2p_group(rt_transport *t, nccl_impl *n, chan *c, bool send, void *buf,
                           size_t bytes, uint64_t deadline, const char *what, sc_err *err)
{
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess)
        r = send ? ncclSend(buf, bytes, ncclUint8, c->peer, c->comm, c->stream)
                 : ncclRecv(buf, bytes, ncclUint8, c->peer, c->comm, c->stream);
    ncclResult_t g = ncclGroupEnd();
    if (r == ncclSuccess)
        r = g;
    return settle(t, n, c, r, deadline, what, err);
}

/* ---- sends ---- */

/* Moves completed sends (in issue order) to the spare list. */
static sc_status reap(nccl_impl *n, sc_err *err)
{
    while (n->inflight_head != NULL) {
        send_rec *s = n->inflight_head;
        cudaError_t q = cudaEventQuery(s->done);
        if (q == cudaErrorNotReady)
            break;
        if (q != cudaSuccess) {
            SC_ERRF(err, SC_ERR_CUDA, "nccl transport: a send failed: %s", cudaGetErrorString(q));
            return fail(n, SC_ERR_CUDA, err);
        }
        n->inflight_head = s->next;
        if (n->inflight_head == NULL)
            n->inflight_tail = NULL;
        n->n_inflight--;
        s->next = n->spare;
        n->spare = s;
    }
    return SC_OK;
}

static void rec_free(send_rec *s)
{
    if (s->dev != NULL)
        cudaFree(s->dev);
    if (s->done != NULL)
        cudaEventDestroy(s->done);
    free(s);
}

/* Capacity for `bytes`: the next power of two from 4 KiB, so a few sizes share buffers. */
static size_t round_cap(size_t bytes)
{
    size_t cap = 4096;
    while (cap < bytes && cap < ((size_t)1 << 62))
        cap *= 2;
    return cap < bytes ? bytes : cap;
}

/* A staging buffer of at least `bytes` payload bytes: a spare one that fits, else a new one.
 * Spares are never freed here: cudaFree waits for the whole device, sends in flight included,
 * and a send waits for its receiver, so freeing on the way could wait for a dead peer forever.
 * They go at destroy, after every communicator is finalized or aborted. */
static sc_status rec_new(size_t bytes, send_rec **out, sc_err *err);

static sc_status rec_get(nccl_impl *n, size_t bytes, send_rec **out, sc_err *err)
{
    for (send_rec **pp = &n->spare; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->cap >= bytes) {
            *out = *pp;
            *pp = (*pp)->next;
            (*out)->next = NULL;
            return SC_OK;
        }
    }
    return rec_new(bytes, out, err);
}

/* A new staging buffer of at least `bytes` payload bytes. */
static sc_status rec_new(size_t bytes, send_rec **out, sc_err *err)
{
    send_rec *s = calloc(1, sizeof *s);
    SC_ALLOC_CHECK(s, err);
    size_t cap = round_cap(bytes);
    cudaError_t e = cudaMalloc((void **)&s->dev, HDR_ROOM + cap);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        rec_free(s);
        return SC_ERRF(err, SC_ERR_CUDA, "nccl transport: allocating %zu bytes of send staging: %s",
                       HDR_ROOM + cap, cudaGetErrorString(e));
    }
    s->cap = cap;
    *out = s;
    return SC_OK;
}

static void header_fill(nccl_header *h, const rt_transport *t, rt_msg_kind kind, uint64_t step,
                        int microbatch, size_t bytes)
{
    memset(h, 0, sizeof *h);
    h->magic = WIRE_MAGIC;
    h->kind = (int32_t)kind;
    h->tag = t->cfg.tag;
    h->step = step;
    h->microbatch = microbatch;
    h->from_copy = t->cfg.copy;
    h->bytes = bytes;
    h->sent_ns = sc_clock_now_ns(); /* handed over now; staging and the peer's wait are transit */
}

static sc_status nt_send(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                         const void *data, size_t bytes, sc_err *err)
{
    nccl_impl *n = t->impl;
    SC_CHECK(check_usable(t, n, err));
    chan *c = kind == RT_MSG_ACTIVATION ? &n->fwd_out : &n->bwd_out;
    if (!c->live)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "nccl transport: not connected to the %s stage (call rt_transport_connect)",
                       kind == RT_MSG_ACTIVATION ? "next" : "previous");
    CUDA_TRY(err, cudaSetDevice(n->dev), "cudaSetDevice");
    uint64_t deadline = rt_nccl_deadline_after(t->cfg.timeout_ms);
    SC_CHECK(reap(n, err));
    if (n->n_inflight >= MAX_INFLIGHT) { /* bound the staging memory: wait for the oldest */
        SC_CHECK(wait_event(t, n, n->inflight_head->done, deadline,
                            "an earlier send (the peer is not receiving)", err));
        SC_CHECK(reap(n, err));
    }
    send_rec *s = NULL;
    SC_CHECK(rec_get(n, bytes, &s, err));
    /* From here on `s` must reach the in-flight or the spare list. */
    nccl_header h;
    header_fill(&h, t, kind, step, microbatch, bytes);
    cudaError_t e = cudaMemcpyAsync(s->dev, &h, sizeof h, cudaMemcpyHostToDevice, n->copy);
    if (e == cudaSuccess && bytes > 0)
        e = cudaMemcpyAsync(s->dev + HDR_ROOM, data, bytes, cudaMemcpyDefault, n->copy);
    if (e == cudaSuccess)
        e = cudaEventRecord(n->copy_done, n->copy);
    if (e != cudaSuccess) {
        s->next = n->spare;
        n->spare = s;
        SC_ERRF(err, SC_ERR_CUDA, "nccl transport: staging a send: %s", cudaGetErrorString(e));
        return fail(n, SC_ERR_CUDA, err);
    }
    /* Waiting for the copy (not the send) lets the caller reuse its buffer, whatever memory it
     * is in (a copy from pinned or device memory is asynchronous). */
    sc_status rc = wait_event(t, n, n->copy_done, deadline, "staging a send", err);
    if (rc == SC_OK) {
        /* header and payload each in a group of its own, as the receiver posts them (it reads
         * the header before it knows where the payload goes): NCCL wants both sides' group
         * patterns to match */
        rc = p2p_group(t, n, c, true, s->dev, sizeof h, deadline, "issuing a send", err);
        if (rc == SC_OK && bytes > 0)
            rc =
                p2p_group(t, n, c, true, s->dev + HDR_ROOM, bytes, deadline, "issuing a send", err);
    }
    if (rc == SC_OK) {
        e = cudaEventRecord(s->done, c->stream);
        if (e != cudaSuccess)
            rc = fail(n,
                      SC_ERRF(err, SC_ERR_CUDA, "nccl transport: recording a send: %s",
                              cudaGetErrorString(e)),
                      err);
    }
    if (rc != SC_OK) {
        /* the send may still be on the GPU: keep the buffer on the in-flight list for destroy */
        s->next = NULL;
    }
    if (n->inflight_tail != NULL)
        n->inflight_tail->next = s;
    else
        n->inflight_head = s;
    n->inflight_tail = s;
    n->n_inflight++;
    return rc;
}

/* ---- receives ---- */

static const char *kind_name(int32_t kind)
{
    return kind == RT_MSG_ACTIVATION ? "activation" : kind == RT_MSG_GRADIENT ? "gradient" : "?";
}

/* Receive staging of at least `bytes`. Outgrown buffers are kept until destroy, not freed
 * (cudaFree / cudaFreeHost wait for the device, where sends may wait for a dead peer). */
static sc_status ensure_rbuf(nccl_impl *n, size_t bytes, sc_err *err)
{
    if (bytes <= n->rbuf_cap)
        return SC_OK;
    if (n->rbuf_dev != NULL || n->rbuf_host != NULL) {
        retired *old = calloc(1, sizeof *old);
        SC_ALLOC_CHECK(old, err);
        old->dev = n->rbuf_dev;
        old->host = n->rbuf_host;
        old->next = n->graveyard;
        n->graveyard = old;
    }
    n->rbuf_dev = NULL;
    n->rbuf_host = NULL;
    n->rbuf_cap = 0;
    size_t cap = round_cap(bytes);
    CUDA_TRY(err, cudaMalloc((void **)&n->rbuf_dev, cap), "allocating receive staging");
    CUDA_TRY(err, cudaMallocHost((void **)&n->rbuf_host, cap), "allocating pinned receive staging");
    n->rbuf_cap = cap;
    return SC_OK;
}

#define PREALLOC_SENDS 4 /* staging buffers made at connect; more are made when needed */

/* Staging for messages up to `bytes` (0: none ahead), made before any message moves. */
static sc_status prealloc(nccl_impl *n, size_t bytes, sc_err *err)
{
    if (bytes == 0)
        return SC_OK;
    if (n->fwd_out.live || n->bwd_out.live) {
        for (int i = 0; i < PREALLOC_SENDS; i++) {
            send_rec *s = NULL;
            SC_CHECK(rec_new(bytes, &s, err));
            s->next = n->spare;
            n->spare = s;
        }
    }
    if (n->fwd_in.live || n->bwd_in.live)
        SC_CHECK(ensure_rbuf(n, bytes, err));
    return SC_OK;
}

static bool is_device_memory(const void *p)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* an unknown host pointer on old drivers: clear the sticky error */
        return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* The link figures of a message received with the timing events recorded (see the top). */
static void stamp_arrival(const chan *c, const nccl_header *h, uint64_t posted_ns, bool payload,
                          rt_msg *stamp)
{
    float header_ms = 0, arrived_ms = 0;
    if (cudaEventElapsedTime(&header_ms, c->posted, c->got_header) != cudaSuccess ||
        cudaEventElapsedTime(&arrived_ms, c->posted, payload ? c->got_payload : c->got_header) !=
            cudaSuccess) {
        cudaGetLastError(); /* not a sticky error: clear it, leave the message unmeasured */
        return;
    }
    stamp->sent_ns = h->sent_ns;
    stamp->from_copy = h->from_copy;
    stamp->arrived_ns = posted_ns + (uint64_t)((double)arrived_ms * 1e6);
    stamp->clean = (double)header_ms * 1e6 >= CLEAN_WAIT_NS;
}

static sc_status nt_recv(rt_transport *t, rt_msg_kind kind, uint64_t step, int microbatch,
                         void *data, size_t bytes, rt_msg *stamp, sc_err *err)
{
    nccl_impl *n = t->impl;
    SC_CHECK(check_usable(t, n, err));
    bool from_next = kind == RT_MSG_GRADIENT;
    chan *c = from_next ? &n->bwd_in : &n->fwd_in;
    if (!c->live)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "nccl transport: not connected to the %s stage (call rt_transport_connect)",
                       from_next ? "next" : "previous");
    CUDA_TRY(err, cudaSetDevice(n->dev), "cudaSetDevice");
    SC_CHECK(reap(n, err));
    uint64_t deadline = rt_nccl_deadline_after(t->cfg.timeout_ms);
    char what[160];
    snprintf(what, sizeof what, "the %s (step %llu, micro-batch %d) from the %s stage",
             kind_name((int32_t)kind), (unsigned long long)step, microbatch,
             from_next ? "next" : "previous");

    /* 1. the header alone, checked before any payload is posted (timed: the stream is idle, so
     * `posted` runs at once) */
    uint64_t posted_ns = sc_clock_now_ns();
    bool timed = cudaEventRecord(c->posted, c->stream) == cudaSuccess;
    SC_CHECK(p2p_group(t, n, c, false, n->hdr_dev, sizeof(nccl_header), deadline, what, err));
    timed = timed && cudaEventRecord(c->got_header, c->stream) == cudaSuccess;
    cudaError_t e = cudaMemcpyAsync(n->hdr_host, n->hdr_dev, sizeof(nccl_header),
                                    cudaMemcpyDeviceToHost, c->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(c->ev, c->stream);
    if (e != cudaSuccess) {
        SC_ERRF(err, SC_ERR_CUDA, "nccl transport: receiving a header: %s", cudaGetErrorString(e));
        return fail(n, SC_ERR_CUDA, err);
    }
    SC_CHECK(wait_event(t, n, c->ev, deadline, what, err));
    nccl_header h = *n->hdr_host;
    if (h.magic != WIRE_MAGIC || h.tag != t->cfg.tag) {
        SC_ERRF(err, SC_ERR_INVALID,
                "nccl transport: waiting for %s, got a message of another job or format "
                "(magic %#x, tag %llu; expected %#x, %llu)",
                what, h.magic, (unsigned long long)h.tag, WIRE_MAGIC,
                (unsigned long long)t->cfg.tag);
        return fail(n, SC_ERR_INVALID, err);
    }
    if (h.kind != (int32_t)kind || h.step != step || h.microbatch != microbatch) {
        SC_ERRF(err, SC_ERR_INVALID,
                "nccl transport: asked for %s but the next message is the %s (step %llu, "
                "micro-batch %d): nccl delivers in send order, so both stages must run their "
                "micro-batches in the same order",
                what, kind_name(h.kind), (unsigned long long)h.step, h.microbatch);
        return fail(n, SC_ERR_INVALID, err);
    }
    if (h.bytes != bytes) {
        SC_ERRF(err, SC_ERR_INVALID,
                "nccl transport: %s has %llu bytes, expected %zu (do the stages agree on the "
                "model and micro-batch size?)",
                what, (unsigned long long)h.bytes, bytes);
        return fail(n, SC_ERR_INVALID, err);
    }
    if (stamp != NULL) {
        stamp->kind = h.kind;
        stamp->bytes = (size_t)h.bytes;
    }
    if (bytes == 0) {
        if (timed && stamp != NULL)
            stamp_arrival(c, &h, posted_ns, false, stamp);
        return SC_OK;
    }

    /* 2. the payload: into device memory directly, into host memory through staging */
    bool direct = is_device_memory(data);
    if (direct) {
        SC_CHECK(p2p_group(t, n, c, false, data, bytes, deadline, what, err));
        timed = timed && cudaEventRecord(c->got_payload, c->stream) == cudaSuccess;
        e = cudaEventRecord(c->ev, c->stream);
    } else {
        SC_CHECK(ensure_rbuf(n, bytes, err));
        SC_CHECK(p2p_group(t, n, c, false, n->rbuf_dev, bytes, deadline, what, err));
        timed = timed && cudaEventRecord(c->got_payload, c->stream) == cudaSuccess;
        e = cudaMemcpyAsync(n->rbuf_host, n->rbuf_dev, bytes, cudaMemcpyDeviceToHost, c->stream);
        if (e == cudaSuccess)
            e = cudaEventRecord(c->ev, c->stream);
    }
    if (e != cudaSuccess) {
        SC_ERRF(err, SC_ERR_CUDA, "nccl transport: receiving %s: %s", what, cudaGetErrorString(e));
        return fail(n, SC_ERR_CUDA, err);
    }
    SC_CHECK(wait_event(t, n, c->ev, deadline, what, err));
    if (!direct)
        memcpy(data, n->rbuf_host, bytes);
    if (timed && stamp != NULL)
        stamp_arrival(c, &h, posted_ns, true, stamp);
    return SC_OK;
}

/* ---- teardown ---- */

static void nt_destroy(rt_transport *t)
{
    nccl_impl *n = t->impl;
    if (n == NULL)
        return;
    cudaSetDevice(n->dev);
    bool clean = !n->broken && !atomic_load(&t->aborted);
    /* Sends still in flight get a bounded time to leave (a stage that exits right after its last
     * send still delivers it); a peer that never receives them costs that much, no more. */
    int flush_ms = t->cfg.timeout_ms < FLUSH_MAX_MS ? t->cfg.timeout_ms : FLUSH_MAX_MS;
    uint64_t deadline = rt_nccl_deadline_after(clean ? flush_ms : 0);
    int us = 10;
    while (clean && n->inflight_head != NULL) {
        sc_err ignore;
        sc_err_clear(&ignore);
        if (reap(n, &ignore) != SC_OK || check_async(n, &ignore) != SC_OK)
            clean = false;
        else if (n->inflight_head != NULL && sc_clock_now_ns() >= deadline)
            clean = false;
        else if (n->inflight_head != NULL)
            rt_nccl_backoff(&us);
    }
    for (int i = 0; i < 4; i++) {
        chan *c = all_chans(n, i);
        if (c->live && clean) {
            ncclResult_t r = ncclCommFinalize(c->comm);
            while (r == ncclInProgress && sc_clock_now_ns() < deadline) {
                rt_nccl_backoff(&us);
                if (ncclCommGetAsyncError(c->comm, &r) != ncclSuccess)
                    r = ncclInternalError;
            }
            if (r == ncclSuccess)
                ncclCommDestroy(c->comm);
            else
                ncclCommAbort(c->comm);
            c->live = false;
        } else if (c->live) {
            ncclCommAbort(c->comm);
            c->live = false;
        }
    }
    /* Every kernel has finished or been aborted: the buffers are free to go. */
    while (n->inflight_head != NULL) {
        send_rec *s = n->inflight_head;
        n->inflight_head = s->next;
        rec_free(s);
    }
    while (n->spare != NULL) {
        send_rec *s = n->spare;
        n->spare = s->next;
        rec_free(s);
    }
    for (int i = 0; i < 4; i++) {
        chan *c = all_chans(n, i);
        if (c->stream != NULL)
            cudaStreamDestroy(c->stream);
        cudaEvent_t evs[] = {c->ev, c->posted, c->got_header, c->got_payload};
        for (size_t e = 0; e < sizeof evs / sizeof evs[0]; e++)
            if (evs[e] != NULL)
                cudaEventDestroy(evs[e]);
    }
    if (n->copy != NULL)
        cudaStreamDestroy(n->copy);
    if (n->copy_done != NULL)
        cudaEventDestroy(n->copy_done);
    if (n->hdr_dev != NULL)
        cudaFree(n->hdr_dev);
    if (n->hdr_host != NULL)
        cudaFreeHost(n->hdr_host);
    if (n->rbuf_dev != NULL)
        cudaFree(n->rbuf_dev);
    if (n->rbuf_host != NULL)
        cudaFreeHost(n->rbuf_host);
    while (n->graveyard != NULL) {
        retired *g = n->graveyard;
        n->graveyard = g->next;
        if (g->dev != NULL)
            cudaFree(g->dev);
        if (g->host != NULL)
            cudaFreeHost(g->host);
        free(g);
    }
    free(n);
    t->impl = NULL;
}

const rt_transport_ops rt_transport_nccl_ops = {
    .bind = nt_bind,
    .connect = nt_connect,
    .send = NULL,
    .poll = NULL,
    .wake = NULL, /* waits poll the abort flag every millisecond at most */
    .destroy = nt_destroy,
    .send_direct = nt_send,
    .recv_direct = nt_recv,
    .on_device = true,
};

#endif /* SC_HAVE_NCCL */
