/*
 * topo_cuda: CUDA driver API and cuBLAS through dlopen. See topo_cuda.h.
 *
 * The driver API (libcuda.so.1) is used rather than the runtime because its entry points and
 * argument types have been stable across CUDA releases, while cudaDeviceProp changes layout
 * between runtime versions. The few types needed are declared here with the driver's ABI.
 */
#include "topology/topo_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"

typedef int cu_result; /* CUresult: 0 is CUDA_SUCCESS */
typedef int cu_device;
typedef void *cu_context;
typedef unsigned long long cu_ptr;

/* CUdevice_attribute values from the driver ABI. */
enum {
    CU_ATTR_CLOCK_RATE = 13,
    CU_ATTR_SM_COUNT = 16,
    CU_ATTR_CC_MAJOR = 75,
    CU_ATTR_CC_MINOR = 76,
};

typedef struct {
    cu_result (*init)(unsigned int);
    cu_result (*device_count)(int *);
    cu_result (*device_get)(cu_device *, int);
    cu_result (*device_name)(char *, int, cu_device);
    cu_result (*device_mem)(size_t *, cu_device);
    cu_result (*device_attr)(int *, int, cu_device);
    cu_result (*device_busid)(char *, int, cu_device);
    cu_result (*ctx_retain)(cu_context *, cu_device);
    cu_result (*ctx_release)(cu_device);
    cu_result (*ctx_set)(cu_context);
    cu_result (*ctx_sync)(void);
    cu_result (*mem_alloc)(cu_ptr *, size_t);
    cu_result (*mem_free)(cu_ptr);
    cu_result (*host_alloc)(void **, size_t);
    cu_result (*host_free)(void *);
    cu_result (*copy_h2d)(cu_ptr, const void *, size_t);
    cu_result (*copy_d2d)(cu_ptr, cu_ptr, size_t);
    cu_result (*memset8)(cu_ptr, unsigned char, size_t);
    cu_result (*error_string)(cu_result, const char **);
} cu_api;

typedef struct {
    int (*create)(void **);
    int (*destroy)(void *);
    int (*sgemm)(void *, int, int, int, int, int, const float *, const float *, int, const float *,
                 int, const float *, float *, int);
} cublas_api;

struct topo_cuda {
    void *lib;
    void *blas_lib; /* loaded on first GEMM probe; NULL when absent */
    cu_api cu;
    cublas_api blas;
    int n;
    topo_cuda_dev *devs;
};

int topo_busid_normalise(const char *in, char *out, size_t size)
{
    unsigned long dom = 0;
    unsigned bus, dev, fn;
    char tail;
    /* only hex digits and separators: sscanf's %x would also take "0x" prefixes and signs */
    if (in[strspn(in, "0123456789abcdefABCDEF:.")] != '\0')
        return 0;
    if (sscanf(in, "%lx:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) == 4) {
        /* full form with the domain */
    } else if (sscanf(in, "%x:%x.%x%c", &bus, &dev, &fn, &tail) == 3) {
        dom = 0;
    } else {
        return 0;
    }
    if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
        return 0;
    snprintf(out, size, "%04lx:%02x:%02x.%x", dom, bus, dev, fn);
    return 1;
}

static const char *cu_err_text(const topo_cuda *c, cu_result r)
{
    const char *s = NULL;
    if (c->cu.error_string != NULL && c->cu.error_string(r, &s) == 0 && s != NULL)
        return s;
    return "unknown CUDA error";
}

/* Resolves one driver symbol; false (and an error) when missing. */
static int cu_sym(void *lib, const char *name, void **slot, sc_err *err)
{
    *slot = dlsym(lib, name);
    if (*slot == NULL) {
        SC_ERRF(err, SC_ERR_UNAVAILABLE, "CUDA driver lacks %s (driver too old?)", name);
        return 0;
    }
    return 1;
}

#define CU_SYM(field, name)                                                                        \
    do {                                                                                           \
        void *p_;                                                                                  \
        if (!cu_sym(c->lib, name, &p_, err))                                                       \
            goto fail;                                                                             \
        memcpy(&c->cu.field, &p_, sizeof(p_));                                                     \
    } while (0)

sc_status topo_cuda_open(topo_cuda **out, sc_err *err)
{
    *out = NULL;
    topo_cuda *c = calloc(1, sizeof(*c));
    SC_ALLOC_CHECK(c, err);
    c->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (c->lib == NULL) {
        free(c);
        return SC_ERRF(err, SC_ERR_UNAVAILABLE, "no CUDA driver (libcuda.so.1 not loadable)");
    }
    CU_SYM(init, "cuInit");
    CU_SYM(device_count, "cuDeviceGetCount");
    CU_SYM(device_get, "cuDeviceGet");
    CU_SYM(device_name, "cuDeviceGetName");
    CU_SYM(device_mem, "cuDeviceTotalMem_v2");
    CU_SYM(device_attr, "cuDeviceGetAttribute");
    CU_SYM(device_busid, "cuDeviceGetPCIBusId");
    CU_SYM(ctx_retain, "cuDevicePrimaryCtxRetain");
    CU_SYM(ctx_release, "cuDevicePrimaryCtxRelease_v2");
    CU_SYM(ctx_set, "cuCtxSetCurrent");
    CU_SYM(ctx_sync, "cuCtxSynchronize");
    CU_SYM(mem_alloc, "cuMemAlloc_v2");
    CU_SYM(mem_free, "cuMemFree_v2");
    CU_SYM(host_alloc, "cuMemAllocHost_v2");
    CU_SYM(host_free, "cuMemFreeHost");
    CU_SYM(copy_h2d, "cuMemcpyHtoD_v2");
    CU_SYM(copy_d2d, "cuMemcpyDtoD_v2");
    CU_SYM(memset8, "cuMemsetD8_v2");
    CU_SYM(error_string, "cuGetErrorString");

    cu_result r = c->cu.init(0);
    if (r != 0) {
        SC_ERRF(err, SC_ERR_UNAVAILABLE, "CUDA driver present but cuInit failed: %s",
                cu_err_text(c, r));
        goto fail;
    }
    int n = 0;
    r = c->cu.device_count(&n);
    if (r != 0 || n <= 0) {
        SC_ERRF(err, SC_ERR_UNAVAILABLE, "CUDA driver sees no device");
        goto fail;
    }
    c->devs = calloc((size_t)n, sizeof(*c->devs));
    if (c->devs == NULL) {
        SC_ERRF(err, SC_ERR_NOMEM, "out of memory listing %d CUDA devices", n);
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        topo_cuda_dev *d = &c->devs[i];
        cu_device dev;
        size_t mem = 0;
        char busid[64] = "";
        if (c->cu.device_get(&dev, i) != 0 || c->cu.device_name(d->name, sizeof(d->name), dev) ||
            c->cu.device_mem(&mem, dev) != 0 ||
            c->cu.device_busid(busid, (int)sizeof(busid), dev) != 0) {
            SC_ERRF(err, SC_ERR_CUDA, "cannot read the properties of CUDA device %d", i);
            goto fail;
        }
        d->memory_bytes = mem;
        c->cu.device_attr(&d->sm_count, CU_ATTR_SM_COUNT, dev);
        c->cu.device_attr(&d->cc_major, CU_ATTR_CC_MAJOR, dev);
        c->cu.device_attr(&d->cc_minor, CU_ATTR_CC_MINOR, dev);
        c->cu.device_attr(&d->clock_khz, CU_ATTR_CLOCK_RATE, dev);
        if (!topo_busid_normalise(busid, d->pci_bus_id, sizeof(d->pci_bus_id)))
            d->pci_bus_id[0] = '\0';
    }
    c->n = n;
    *out = c;
    return SC_OK;
fail:
    free(c->devs);
    dlclose(c->lib);
    free(c);
    return err != NULL ? err->code : SC_ERR_UNAVAILABLE;
}

void topo_cuda_close(topo_cuda **cuda)
{
    if (cuda == NULL || *cuda == NULL)
        return;
    topo_cuda *c = *cuda;
    if (c->blas_lib != NULL)
        dlclose(c->blas_lib);
    dlclose(c->lib);
    free(c->devs);
    free(c);
    *cuda = NULL;
}

int topo_cuda_count(const topo_cuda *cuda)
{
    return cuda != NULL ? cuda->n : 0;
}

const topo_cuda_dev *topo_cuda_device(const topo_cuda *cuda, int ordinal)
{
    if (cuda == NULL || ordinal < 0 || ordinal >= cuda->n)
        return NULL;
    return &cuda->devs[ordinal];
}

/* cuBLAS is only needed for the GEMM probe; its absence is not an error for the rest. */
static int blas_load(topo_cuda *c)
{
    if (c->blas_lib != NULL)
        return 1;
    static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
                                        "libcublas.so"};
    for (size_t i = 0; i < SC_ARRAY_LEN(names) && c->blas_lib == NULL; i++)
        c->blas_lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (c->blas_lib == NULL)
        return 0;
    void *p[3] = {dlsym(c->blas_lib, "cublasCreate_v2"), dlsym(c->blas_lib, "cublasDestroy_v2"),
                  dlsym(c->blas_lib, "cublasSgemm_v2")};
    if (p[0] == NULL || p[1] == NULL || p[2] == NULL) {
        dlclose(c->blas_lib);
        c->blas_lib = NULL;
        return 0;
    }
    memcpy(&c->blas.create, &p[0], sizeof(p[0]));
    memcpy(&c->blas.destroy, &p[1], sizeof(p[1]));
    memcpy(&c->blas.sgemm, &p[2], sizeof(p[2]));
    return 1;
}

/* Best of `reps` timed calls of a synchronous copy; 0 when any copy fails. */
static double time_h2d(topo_cuda *c, cu_ptr dst, const void *src, size_t bytes, int reps)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = sc_clock_now_s();
        if (c->cu.copy_h2d(dst, src, bytes) != 0 || c->cu.ctx_sync() != 0)
            return 0;
        double dt = sc_clock_now_s() - t0;
        if (dt > 0 && bytes / dt > best)
            best = bytes / dt;
    }
    return best;
}

static double time_d2d(topo_cuda *c, cu_ptr dst, cu_ptr src, size_t bytes, int reps)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = sc_clock_now_s();
        if (c->cu.copy_d2d(dst, src, bytes) != 0 || c->cu.ctx_sync() != 0)
            return 0;
        double dt = sc_clock_now_s() - t0;
        /* read + write, as the host copy probe counts it */
        if (dt > 0 && 2.0 * bytes / dt > best)
            best = 2.0 * bytes / dt;
    }
    return best;
}

static double time_gemm(topo_cuda *c, cu_ptr a, cu_ptr b, cu_ptr out, int n, int reps)
{
    void *h = NULL;
    if (!blas_load(c) || c->blas.create(&h) != 0)
        return 0;
    const float one = 1.0f, zero = 0.0f;
    double best = 0;
    /* one untimed call: cuBLAS loads its kernels on first use */
    int ok =
        c->blas.sgemm(h, 0, 0, n, n, n, &one, (const float *)(uintptr_t)a, n,
                      (const float *)(uintptr_t)b, n, &zero, (float *)(uintptr_t)out, n) == 0 &&
        c->cu.ctx_sync() == 0;
    for (int r = 0; ok && r < reps; r++) {
        double t0 = sc_clock_now_s();
        ok =
            c->blas.sgemm(h, 0, 0, n, n, n, &one, (const float *)(uintptr_t)a, n,
                          (const float *)(uintptr_t)b, n, &zero, (float *)(uintptr_t)out, n) == 0 &&
            c->cu.ctx_sync() == 0;
        double dt = sc_clock_now_s() - t0;
        if (ok && dt > 0 && 2.0 * n * n * (double)n / dt / 1e9 > best)
            best = 2.0 * n * n * (double)n / dt / 1e9;
    }
    c->blas.destroy(h);
    return ok ? best : 0;
}

sc_status topo_cuda_measure(topo_cuda *cuda, int ordinal, double *h2d_bytes_per_s,
                            double *d2d_bytes_per_s, double *gemm_gflops, sc_err *err)
{
    if (h2d_bytes_per_s)
        *h2d_bytes_per_s = 0;
    if (d2d_bytes_per_s)
        *d2d_bytes_per_s = 0;
    if (gemm_gflops)
        *gemm_gflops = 0;
    if (cuda == NULL || ordinal < 0 || ordinal >= cuda->n)
        return SC_ERRF(err, SC_ERR_INVALID, "no CUDA device %d", ordinal);
    topo_cuda *c = cuda;
    const size_t bytes = 64u << 20;
    const int n = 2048; /* GEMM size: 3 x 16 MiB, about 17 GFLOP per call */
    cu_device dev;
    cu_context ctx = NULL;
    cu_ptr d0 = 0, d1 = 0, d2 = 0;
    void *host = NULL;
    sc_status rc = SC_OK;
    cu_result r = c->cu.device_get(&dev, ordinal);
    if (r == 0)
        r = c->cu.ctx_retain(&ctx, dev);
    if (r != 0)
        return SC_ERRF(err, SC_ERR_CUDA, "CUDA device %d: cannot create a context: %s", ordinal,
                       cu_err_text(c, r));
    if ((r = c->cu.ctx_set(ctx)) != 0 || (r = c->cu.mem_alloc(&d0, bytes)) != 0 ||
        (r = c->cu.mem_alloc(&d1, bytes)) != 0 || (r = c->cu.host_alloc(&host, bytes)) != 0) {
        rc = SC_ERRF(err, SC_ERR_CUDA, "CUDA device %d: probe setup failed: %s", ordinal,
                     cu_err_text(c, r));
        goto out;
    }
    memset(host, 1, bytes);
    c->cu.memset8(d0, 0, bytes);
    if (h2d_bytes_per_s)
        *h2d_bytes_per_s = time_h2d(c, d0, host, bytes, 5);
    if (d2d_bytes_per_s)
        *d2d_bytes_per_s = time_d2d(c, d1, d0, bytes, 5);
    if (gemm_gflops && c->cu.mem_alloc(&d2, (size_t)n * n * sizeof(float)) == 0) {
        /* d0 and d1 (zero-filled / copied) serve as A and B: the rate does not depend on
         * the values. */
        *gemm_gflops = time_gemm(c, d0, d1, d2, n, 5);
    }
    SC_LOG_DEBUG("topo", "cuda%d: h2d %.3g B/s, d2d %.3g B/s, sgemm %.4g GFLOP/s", ordinal,
                 h2d_bytes_per_s ? *h2d_bytes_per_s : 0, d2d_bytes_per_s ? *d2d_bytes_per_s : 0,
                 gemm_gflops ? *gemm_gflops : 0);
out:
    if (d2)
        c->cu.mem_free(d2);
    if (d1)
        c->cu.mem_free(d1);
    if (d0)
        c->cu.mem_free(d0);
    if (host)
        c->cu.host_free(host);
    c->cu.ctx_set(NULL);
    c->cu.ctx_release(dev);
    return rc;
}
