/*
 * Device payloads of the local transport (rt_dev_* of transport_impl.h, which reach these through
 * gpu_calls.c; part of the GPU backend module): a message between two stages of one process
 * that run on GPUs is copied device to device into a buffer of a pool, and from there into the
 * receiver's memory, instead of through host memory.
 * Invariant: a pool buffer is freed only when no transport with device payloads is open any
 * more (cudaFree waits for the whole device, which a running stage must never do); until then
 * released buffers are reused for messages of at most their size.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>

#include "worker/transport/gpu_module.h"

typedef struct devbuf {
    struct devbuf *next;
    void *ptr;
    size_t bytes;
    int device;
    bool in_use;
} devbuf;

static pthread_mutex_t g_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static devbuf *g_pool; /* under g_pool_lock */
static int g_open;     /* transports with device payloads; under g_pool_lock */

static sc_status cuda_fail(sc_err *err, cudaError_t e, const char *what, int device)
{
    return SC_ERRF(err, SC_ERR_CUDA, "local transport on cuda:%d: %s: %s", device, what,
                   cudaGetErrorString(e));
}

sc_status rt_cuda_dev_open(int device, void **stream, sc_err *err)
{
    *stream = NULL;
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "selecting the device", device);
    cudaStream_t s;
    e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "creating a stream", device);
    pthread_mutex_lock(&g_pool_lock);
    g_open++;
    pthread_mutex_unlock(&g_pool_lock);
    *stream = s;
    return SC_OK;
}

void rt_cuda_dev_close(void *stream)
{
    if (stream == NULL)
        return;
    cudaStreamDestroy((cudaStream_t)stream);
    pthread_mutex_lock(&g_pool_lock);
    if (--g_open == 0) {
        /* nothing of ours runs any more: the buffers not held by a queued message go */
        for (devbuf **pp = &g_pool; *pp != NULL;) {
            devbuf *b = *pp;
            if (b->in_use) {
                pp = &b->next;
                continue;
            }
            *pp = b->next;
            cudaSetDevice(b->device);
            cudaFree(b->ptr);
            free(b);
        }
    }
    pthread_mutex_unlock(&g_pool_lock);
}

sc_status rt_cuda_dev_alloc(int device, size_t bytes, void **out, sc_err *err)
{
    *out = NULL;
    pthread_mutex_lock(&g_pool_lock);
    devbuf *best = NULL;
    for (devbuf *b = g_pool; b != NULL; b = b->next)
        if (!b->in_use && b->device == device && b->bytes >= bytes &&
            (best == NULL || b->bytes < best->bytes))
            best = b;
    if (best != NULL) {
        best->in_use = true;
        *out = best->ptr;
        pthread_mutex_unlock(&g_pool_lock);
        return SC_OK;
    }
    pthread_mutex_unlock(&g_pool_lock);
    devbuf *b = calloc(1, sizeof *b);
    SC_ALLOC_CHECK(b, err);
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaMalloc(&b->ptr, bytes);
    if (e != cudaSuccess) {
        free(b);
        return cuda_fail(err, e, "allocating a message buffer", device);
    }
    b->bytes = bytes;
    b->device = device;
    b->in_use = true;
    pthread_mutex_lock(&g_pool_lock);
    b->next = g_pool;
    g_pool = b;
    pthread_mutex_unlock(&g_pool_lock);
    *out = b->ptr;
    return SC_OK;
}

void rt_cuda_dev_release(void *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&g_pool_lock);
    for (devbuf *b = g_pool; b != NULL; b = b->next)
        if (b->ptr == p) {
            b->in_use = false;
            break;
        }
    pthread_mutex_unlock(&g_pool_lock);
}

sc_status rt_cuda_dev_copy(int device, void *stream, void *dst, const void *src, size_t bytes,
                           sc_err *err)
{
    if (bytes == 0)
        return SC_OK;
    /* any pair of host and device pointers (unified addressing); done when this returns */
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? SC_OK : cuda_fail(err, e, "copying a message", device);
}
