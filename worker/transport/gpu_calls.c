/*
 * rt gpu calls: the data plane's GPU functions (device payloads rt_dev_*, the replica
 * all-reduce rt_allreduce_*, the nccl transport's operations) as programs call them. With CUDA +
 * NCCL in the build each forwards to the GPU backend module (gpu_module.h), bound by name on the
 * first call that needs it; where the module cannot be loaded (no CUDA libraries on this host),
 * or the build has no CUDA, each says so and nothing else changes: zmq and local transports and
 * host all-reduce work as before. Releasing nothing (a NULL stream, buffer or all-reduce) never
 * needs the module.
 */
#include <string.h>

#include "worker/transport/allreduce.h"
#include "worker/transport/transport_impl.h"

#ifdef SC_HAVE_NCCL

#include <pthread.h>

#include "kernels/gpu_backend.h"
#include "worker/transport/gpu_module.h"

#define RT_GPU_FUNCTIONS(X)                                                                        \
    X(rt_cuda_dev_open)                                                                            \
    X(rt_cuda_dev_close)                                                                           \
    X(rt_cuda_dev_alloc)                                                                           \
    X(rt_cuda_dev_release)                                                                         \
    X(rt_cuda_dev_copy)                                                                            \
    X(rt_nccl_allreduce_new)                                                                       \
    X(rt_nccl_allreduce_destroy)                                                                   \
    X(rt_nccl_allreduce_endpoint)                                                                  \
    X(rt_nccl_allreduce_connect)                                                                   \
    X(rt_nccl_allreduce_run)                                                                       \
    X(rt_nccl_allreduce_abort)                                                                     \
    X(rt_nccl_allreduce_ready)

static struct {
#define MEMBER(f) __typeof__(f) *f;
    RT_GPU_FUNCTIONS(MEMBER)
#undef MEMBER
    const rt_transport_ops *nccl_ops;
} g;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static sc_err g_why; /* SC_OK once every function is bound */

static void bind_once(void)
{
    if (kn_gpu_backend_load(&g_why) != SC_OK)
        return;
    void *sym;
#define BIND(f)                                                                                    \
    if ((sym = kn_gpu_backend_symbol(#f)) == NULL) {                                               \
        SC_ERRF(&g_why, SC_ERR_UNSUPPORTED, "the GPU backend %s lacks %s", kn_gpu_backend_path(),  \
                #f);                                                                               \
        return;                                                                                    \
    }                                                                                              \
    memcpy(&g.f, &sym, sizeof g.f);
    RT_GPU_FUNCTIONS(BIND)
#undef BIND
    g.nccl_ops = kn_gpu_backend_symbol("rt_transport_nccl_ops");
    if (g.nccl_ops == NULL)
        SC_ERRF(&g_why, SC_ERR_UNSUPPORTED, "the GPU backend %s lacks rt_transport_nccl_ops",
                kn_gpu_backend_path());
}

/* SC_OK when the module's functions can be called, else why not (into err, may be NULL) */
static sc_status bound(sc_err *err)
{
    pthread_once(&g_once, bind_once);
    if (g_why.code == SC_OK)
        return SC_OK;
    if (err != NULL)
        *err = g_why;
    return g_why.code;
}

sc_status rt_dev_open(int device, void **stream, sc_err *err)
{
    *stream = NULL;
    SC_CHECK(bound(err));
    return g.rt_cuda_dev_open(device, stream, err);
}

void rt_dev_close(void *stream)
{
    if (stream != NULL && bound(NULL) == SC_OK)
        g.rt_cuda_dev_close(stream);
}

sc_status rt_dev_alloc(int device, size_t bytes, void **out, sc_err *err)
{
    *out = NULL;
    SC_CHECK(bound(err));
    return g.rt_cuda_dev_alloc(device, bytes, out, err);
}

void rt_dev_release(void *p)
{
    if (p != NULL && bound(NULL) == SC_OK)
        g.rt_cuda_dev_release(p);
}

sc_status rt_dev_copy(int device, void *stream, void *dst, const void *src, size_t bytes,
                      sc_err *err)
{
    SC_CHECK(bound(err));
    return g.rt_cuda_dev_copy(device, stream, dst, src, bytes, err);
}

const rt_transport_ops *rt_gpu_nccl_ops(sc_err *err)
{
    return bound(err) == SC_OK ? g.nccl_ops : NULL;
}

sc_status rt_allreduce_new(rt_allreduce **out, const rt_allreduce_cfg *cfg, sc_err *err)
{
    *out = NULL;
    SC_CHECK(rt_allreduce_cfg_check(cfg, err));
    sc_status rc = bound(err);
    if (rc != SC_OK) {
        sc_err_prefix(err, "the GPU all-reduce of replicated stages (replicas can all-reduce in "
                           "host memory instead: replica_reduce \"host\")");
        return rc;
    }
    return g.rt_nccl_allreduce_new(out, cfg, err);
}

/* An all-reduce exists only once the module is bound: the calls below on one need no check. */
void rt_allreduce_destroy(rt_allreduce **a)
{
    if (a != NULL && *a != NULL)
        g.rt_nccl_allreduce_destroy(a);
}

const char *rt_allreduce_endpoint(const rt_allreduce *a)
{
    return a != NULL ? g.rt_nccl_allreduce_endpoint(a) : "";
}

sc_status rt_allreduce_connect(rt_allreduce *a, const char *rank0_endpoint, sc_err *err)
{
    return g.rt_nccl_allreduce_connect(a, rank0_endpoint, err);
}

sc_status rt_allreduce_run(rt_allreduce *a, float *dev_grads, size_t n, bool mean, double *scalar,
                           sc_err *err)
{
    return g.rt_nccl_allreduce_run(a, dev_grads, n, mean, scalar, err);
}

int rt_allreduce_ready(const rt_allreduce *a, uint64_t *ready_ns, int max)
{
    return a != NULL ? g.rt_nccl_allreduce_ready(a, ready_ns, max) : 0;
}

void rt_allreduce_abort(rt_allreduce *a)
{
    if (a != NULL)
        g.rt_nccl_allreduce_abort(a);
}

#else /* no CUDA + NCCL in the build */

static sc_status no_cuda(const char *what, sc_err *err)
{
    return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                   "%s needs a build with CUDA and NCCL (this one is CPU-only: configure with "
                   "STAGECRAFT_CUDA=ON or AUTO where nvcc and NCCL are installed)",
                   what);
}

static sc_status no_devmem(int device, sc_err *err)
{
    return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                   "local transport: device payloads (cuda:%d) need a build with CUDA", device);
}

sc_status rt_dev_open(int device, void **stream, sc_err *err)
{
    *stream = NULL;
    return no_devmem(device, err);
}

void rt_dev_close(void *stream)
{
    (void)stream;
}

sc_status rt_dev_alloc(int device, size_t bytes, void **out, sc_err *err)
{
    (void)bytes;
    *out = NULL;
    return no_devmem(device, err);
}

void rt_dev_release(void *p)
{
    (void)p;
}

sc_status rt_dev_copy(int device, void *stream, void *dst, const void *src, size_t bytes,
                      sc_err *err)
{
    (void)stream, (void)dst, (void)src, (void)bytes;
    return no_devmem(device, err);
}

const rt_transport_ops *rt_gpu_nccl_ops(sc_err *err)
{
    no_cuda("the nccl transport", err);
    return NULL;
}

sc_status rt_allreduce_new(rt_allreduce **out, const rt_allreduce_cfg *cfg, sc_err *err)
{
    *out = NULL;
    SC_CHECK(rt_allreduce_cfg_check(cfg, err));
    return no_cuda("the GPU all-reduce of replicated stages (replicas all-reduce in host memory "
                   "instead: replica_reduce \"host\")",
                   err);
}

void rt_allreduce_destroy(rt_allreduce **a)
{
    if (a != NULL)
        *a = NULL;
}

const char *rt_allreduce_endpoint(const rt_allreduce *a)
{
    (void)a;
    return "";
}

sc_status rt_allreduce_connect(rt_allreduce *a, const char *rank0_endpoint, sc_err *err)
{
    (void)a, (void)rank0_endpoint;
    return no_cuda("the GPU all-reduce", err);
}

sc_status rt_allreduce_run(rt_allreduce *a, float *dev_grads, size_t n, bool mean, double *scalar,
                           sc_err *err)
{
    (void)a, (void)dev_grads, (void)n, (void)mean, (void)scalar;
    return no_cuda("the GPU all-reduce", err);
}

int rt_allreduce_ready(const rt_allreduce *a, uint64_t *ready_ns, int max)
{
    (void)a, (void)ready_ns, (void)max;
    return 0;
}

void rt_allreduce_abort(rt_allreduce *a)
{
    (void)a;
}

#endif /* SC_HAVE_NCCL */
