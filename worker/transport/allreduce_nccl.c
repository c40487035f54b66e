/*
 * rt allreduce over NCCL (allreduce.h): one non-blocking communicator of a stage's copies, its
 * own non-blocking stream, and a polled event per all-reduce, so that no wait is unbounded and
 * nothing here waits for the whole device. The gradients are reduced in place; the scalar rides
 * in the same NCCL group through a device double and a pinned host double (a copy into pageable
 * memory would wait on the host for the all-reduce, past any deadline). So does each copy's
 * ready stamp (its clock when it called, its gradients complete), all-gathered, for the link
 * figures the host all-reduce gives through its messages' send stamps (rt_allreduce_ready).
 */
#ifdef SC_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "worker/transport/allreduce.h"
#include "worker/transport/gpu_module.h"
#include "worker/transport/nccl_wait.h"
#include "worker/transport/transport.h"

#define FINALIZE_MAX_MS 5000

struct rt_allreduce {
    rt_allreduce_cfg cfg;
    ncclUniqueId id;
    ncclComm_t comm;
    bool live;   /* comm made (joined or joining) */
    bool joined; /* rt_nccl_allreduce_connect succeeded */
    bool broken;
    char why[320];
    cudaStream_t stream;
    cudaEvent_t done;
    double *dev_scalar;  /* device */
    double *host_scalar; /* pinned */
    uint64_t *dev_ready; /* device: every copy's ready stamp (ranks) */
    uint64_t *host_ready; /* pinned, as many */
    bool ready_valid;     /* host_ready holds the last run's */
    atomic_bool aborted;
    char endpoint[RT_ENDPOINT_MAX];
};

#define CUDA_TRY(err, call, what)                                                                  \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return SC_ERRF(err, SC_ERR_CUDA, "replica all-reduce: %s: %s", what,                   \
                           cudaGetErrorString(e_));                                                \
    } while (0)

/* Records the first failure, aborts the communicator (NCCL kernels waiting for a peer return),
 * returns rc. */
static sc_status fail(rt_allreduce *a, sc_status rc, sc_err *err)
{
    if (!a->broken) {
        a->broken = true;
        sc_strlcpy(a->why, err != NULL ? err->msg : "an earlier failure", sizeof a->why);
    }
    if (a->live) {
        ncclCommAbort(a->comm);
        a->live = false;
    }
    return rc;
}

/* One poll of a wait: abort, NCCL's asynchronous error, the deadline. */
static sc_status poll_checks(rt_allreduce *a, uint64_t deadline_ns, const char *what, sc_err *err)
{
    if (atomic_load(&a->aborted)) {
        SC_ERRF(err, SC_ERR_CANCELLED, "replica all-reduce: aborted while %s", what);
        return fail(a, SC_ERR_CANCELLED, err);
    }
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(a->comm, &r) != ncclSuccess)
        r = ncclInternalError;
    if (r != ncclSuccess && r != ncclInProgress) {
        SC_ERRF(err, SC_ERR_UNAVAILABLE,
                "replica all-reduce: %s: NCCL failed (%s: %s); is a copy of the stage gone?", what,
                ncclGetErrorString(r), rt_nccl_msg(r));
        return fail(a, SC_ERR_UNAVAILABLE, err);
    }
    if (sc_clock_now_ns() >= deadline_ns) {
        SC_ERRF(err, SC_ERR_TIMEOUT, "replica all-reduce: %s did not complete within %d ms", what,
                a->cfg.timeout_ms);
        return fail(a, SC_ERR_TIMEOUT, err);
    }
    return SC_OK;
}

/* A non-blocking call that answered ncclInProgress: polls until the communicator settles. */
static sc_status settle(rt_allreduce *a, ncclResult_t r, uint64_t deadline_ns, const char *what,
                        sc_err *err)
{
    int us = 10;
    while (r == ncclInProgress) {
        SC_CHECK(poll_checks(a, deadline_ns, what, err));
        rt_nccl_backoff(&us);
        if (ncclCommGetAsyncError(a->comm, &r) != ncclSuccess)
            r = ncclInternalError;
    }
    if (r != ncclSuccess) {
        SC_ERRF(err, SC_ERR_NCCL, "replica all-reduce: %s: %s (%s)", what, ncclGetErrorString(r),
                rt_nccl_msg(r));
        return fail(a, SC_ERR_NCCL, err);
    }
    return SC_OK;
}

static sc_status usable(rt_allreduce *a, sc_err *err)
{
    if (atomic_load(&a->aborted))
        return SC_ERRF(err, SC_ERR_CANCELLED, "replica all-reduce: aborted");
    if (a->broken)
        return SC_ERRF(err, SC_ERR_UNAVAILABLE,
                       "replica all-reduce: unusable after an earlier failure (%s)", a->why);
    return SC_OK;
}

static sc_status setup(rt_allreduce *a, sc_err *err)
{
    int count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce != cudaSuccess || count == 0)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "replica all-reduce: no CUDA device is visible (%s); copies on CPUs "
                       "all-reduce in host memory (replica_reduce \"host\")",
                       ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    if (a->cfg.device < 0 || a->cfg.device >= count)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "replica all-reduce: device cuda:%d does not exist (%d visible: cuda:0.."
                       "cuda:%d)",
                       a->cfg.device, count, count - 1);
    CUDA_TRY(err, cudaSetDevice(a->cfg.device), "cudaSetDevice");
    CUDA_TRY(err, cudaStreamCreateWithFlags(&a->stream, cudaStreamNonBlocking),
             "creating a stream");
    CUDA_TRY(err, cudaEventCreateWithFlags(&a->done, cudaEventDisableTiming), "creating an event");
    CUDA_TRY(err, cudaMalloc((void **)&a->dev_scalar, sizeof(double)), "allocating a scalar");
    CUDA_TRY(err, cudaMallocHost((void **)&a->host_scalar, sizeof(double)),
             "allocating a pinned scalar");
    size_t ready_bytes = (size_t)a->cfg.ranks * sizeof(uint64_t);
    CUDA_TRY(err, cudaMalloc((void **)&a->dev_ready, ready_bytes), "allocating the stamps");
    CUDA_TRY(err, cudaMallocHost((void **)&a->host_ready, ready_bytes),
             "allocating the pinned stamps");
    if (a->cfg.rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&a->id);
        if (r != ncclSuccess)
            return SC_ERRF(err, SC_ERR_NCCL, "replica all-reduce: ncclGetUniqueId: %s (%s)",
                           ncclGetErrorString(r), rt_nccl_msg(r));
        _Static_assert(sizeof(ncclUniqueId) == RT_NCCL_ID_BYTES, "NCCL unique id size changed");
        SC_CHECK(rt_reduce_endpoint_format((const unsigned char *)a->id.internal, a->endpoint,
                                           sizeof a->endpoint, err));
    }
    return SC_OK;
}

sc_status rt_nccl_allreduce_new(rt_allreduce **out, const rt_allreduce_cfg *cfg, sc_err *err)
{
    *out = NULL;
    SC_CHECK(rt_allreduce_cfg_check(cfg, err));
    rt_allreduce *a = calloc(1, sizeof *a);
    SC_ALLOC_CHECK(a, err);
    a->cfg = *cfg;
    atomic_init(&a->aborted, false);
    sc_status rc = setup(a, err);
    if (rc != SC_OK) {
        rt_nccl_allreduce_destroy(&a);
        return rc;
    }
    *out = a;
    return SC_OK;
}

void rt_nccl_allreduce_destroy(rt_allreduce **ap)
{
    if (ap == NULL || *ap == NULL)
        return;
    rt_allreduce *a = *ap;
    cudaSetDevice(a->cfg.device);
    if (a->live) {
        /* a clean end: nothing is in flight after a successful run, so finalizing is quick;
         * bounded all the same */
        bool clean = a->joined && !a->broken && !atomic_load(&a->aborted);
        ncclResult_t r = clean ? ncclCommFinalize(a->comm) : ncclInternalError;
        uint64_t deadline = rt_nccl_deadline_after(
            a->cfg.timeout_ms < FINALIZE_MAX_MS ? a->cfg.timeout_ms : FINALIZE_MAX_MS);
        int us = 10;
        while (r == ncclInProgress && sc_clock_now_ns() < deadline) {
            rt_nccl_backoff(&us);
            if (ncclCommGetAsyncError(a->comm, &r) != ncclSuccess)
                r = ncclInternalError;
        }
        if (r == ncclSuccess)
            ncclCommDestroy(a->comm);
        else
            ncclCommAbort(a->comm);
    }
    if (a->stream != NULL)
        cudaStreamDestroy(a->stream);
    if (a->done != NULL)
        cudaEventDestroy(a->done);
    if (a->dev_scalar != NULL)
        cudaFree(a->dev_scalar);
    if (a->host_scalar != NULL)
        cudaFreeHost(a->host_scalar);
    if (a->dev_ready != NULL)
        cudaFree(a->dev_ready);
    if (a->host_ready != NULL)
        cudaFreeHost(a->host_ready);
    free(a);
    *ap = NULL;
}

const char *rt_nccl_allreduce_endpoint(const rt_allreduce *a)
{
    return a->endpoint;
}

sc_status rt_nccl_allreduce_connect(rt_allreduce *a, const char *rank0_endpoint, sc_err *err)
{
    SC_CHECK(usable(a, err));
    if (a->live)
        return SC_ERRF(err, SC_ERR_PRECONDITION, "replica all-reduce: already connected");
    ncclUniqueId id;
    SC_CHECK(rt_reduce_endpoint_parse(rank0_endpoint, (unsigned char *)id.internal, err));
    if (a->cfg.rank == 0 && memcmp(id.internal, a->id.internal, sizeof id.internal) != 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "replica all-reduce: copy 0 was given another copy 0's endpoint");
    CUDA_TRY(err, cudaSetDevice(a->cfg.device), "cudaSetDevice");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* returns at once; joining is polled, so a missing copy cannot hang us */
    ncclResult_t r = ncclCommInitRankConfig(&a->comm, a->cfg.ranks, id, a->cfg.rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        SC_ERRF(err, SC_ERR_NCCL, "replica all-reduce: creating the communicator: %s (%s)",
                ncclGetErrorString(r), rt_nccl_msg(r));
        if (a->comm != NULL)
            ncclCommAbort(a->comm);
        a->comm = NULL;
        return fail(a, SC_ERR_NCCL, err);
    }
    a->live = true;
    if (ncclCommGetAsyncError(a->comm, &r) != ncclSuccess)
        r = ncclInternalError;
    SC_CHECK(settle(a, r, rt_nccl_deadline_after(a->cfg.timeout_ms),
                    "joining the communicator of the stage's copies (every copy must connect)",
                    err));
    a->joined = true;
    return SC_OK;
}

sc_status rt_nccl_allreduce_run(rt_allreduce *a, float *dev_grads, size_t n, bool mean,
                                double *scalar, sc_err *err)
{
    SC_CHECK(usable(a, err));
    if (!a->joined)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "replica all-reduce: not connected (call rt_nccl_allreduce_connect)");
    CUDA_TRY(err, cudaSetDevice(a->cfg.device), "cudaSetDevice");
    uint64_t deadline = rt_nccl_deadline_after(a->cfg.timeout_ms);
    a->ready_valid = false;
    int me = a->cfg.rank;
    a->host_ready[me] = sc_clock_now_ns();
    *a->host_scalar = *scalar;
    CUDA_TRY(err,
             cudaMemcpyAsync(a->dev_scalar, a->host_scalar, sizeof(double), cudaMemcpyHostToDevice,
                             a->stream),
             "copying the scalar");
    CUDA_TRY(err,
             cudaMemcpyAsync(a->dev_ready + me, a->host_ready + me, sizeof(uint64_t),
                             cudaMemcpyHostToDevice, a->stream),
             "copying the stamp");
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess && n > 0)
        r = ncclAllReduce(dev_grads, dev_grads, n, ncclFloat, mean ? ncclAvg : ncclSum, a->comm,
                          a->stream);
    if (r == ncclSuccess)
        r = ncclAllReduce(a->dev_scalar, a->dev_scalar, 1, ncclDouble, ncclSum, a->comm, a->stream);
    if (r == ncclSuccess) /* in place: this copy's stamp is already at its own slot */
        r = ncclAllGather(a->dev_ready + me, a->dev_ready, 1, ncclUint64, a->comm, a->stream);
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess)
        r = e;
    SC_CHECK(settle(a, r, deadline, "issuing the all-reduce", err));
    cudaError_t ce = cudaMemcpyAsync(a->host_scalar, a->dev_scalar, sizeof(double),
                                     cudaMemcpyDeviceToHost, a->stream);
    if (ce == cudaSuccess)
        ce = cudaMemcpyAsync(a->host_ready, a->dev_ready, (size_t)a->cfg.ranks * sizeof(uint64_t),
                             cudaMemcpyDeviceToHost, a->stream);
    if (ce == cudaSuccess)
        ce = cudaEventRecord(a->done, a->stream);
    int us = 10;
    while (ce == cudaSuccess) {
        ce = cudaEventQuery(a->done);
        if (ce == cudaSuccess)
            break;
        if (ce != cudaErrorNotReady)
            break;
        ce = cudaSuccess;
        SC_CHECK(poll_checks(a, deadline, "all-reducing the gradients of the stage's copies", err));
        rt_nccl_backoff(&us);
    }
    if (ce != cudaSuccess) {
        SC_ERRF(err, SC_ERR_CUDA, "replica all-reduce: waiting for the all-reduce: %s",
                cudaGetErrorString(ce));
        return fail(a, SC_ERR_CUDA, err);
    }
    *scalar = *a->host_scalar;
    a->ready_valid = true;
    return SC_OK;
}

int rt_nccl_allreduce_ready(const rt_allreduce *a, uint64_t *ready_ns, int max)
{
    int n = a->ready_valid ? (a->cfg.ranks < max ? a->cfg.ranks : max) : 0;
    for (int k = 0; k < n; k++)
        ready_ns[k] = a->host_ready[k];
    return n;
}

void rt_nccl_allreduce_abort(rt_allreduce *a)
{
    if (a != NULL)
        atomic_store(&a->aborted, true);
}

#endif /* SC_HAVE_NCCL */
