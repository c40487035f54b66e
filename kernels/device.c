/*
 * kn device: CPU paths of the execution context, and the checks that turn CUDA failures into
 * sc_err records. The CUDA calls themselves live in device_cuda.cu, so this file stays C.
 */
#include "kernels/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "kernels/device_impl.h"
#include "kernels/gpu_backend.h"
#include "kernels/threads_cpu.h"

bool kn_built_with_cuda(void)
{
#ifdef SC_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int kn_cuda_device_count(void)
{
#ifdef SC_HAVE_CUDA
    /* no GPU backend here (no CUDA libraries): no usable device */
    return kn_gpu_backend_load(NULL) == SC_OK ? kn_cuda_count() : 0;
#else
    return 0;
#endif
}

#ifdef SC_HAVE_CUDA
static sc_status cuda_fail(sc_err *err, int code, const char *what)
{
    return SC_ERRF(err, SC_ERR_CUDA, "%s: %s", what, kn_cuda_error_string(code));
}
#endif

sc_status kn_device_parse(const char *s, const char *what, kn_device *out, sc_err *err)
{
    if (strcmp(s, "cpu") == 0) {
        out->kind = KN_DEV_CPU;
        out->index = 0;
        return SC_OK;
    }
    int64_t idx = 0;
    if (strcmp(s, "cuda") != 0) {
        if (strncmp(s, "cuda:", 5) != 0)
            return SC_ERRF(err, SC_ERR_INVALID, "%s: unknown device '%s' (valid: cpu, cuda:N)",
                           what, s);
        SC_CHECK(sc_parse_int64(s + 5, 0, 1023, what, &idx, err));
    }
    if (!kn_built_with_cuda())
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "%s: '%s' asked for, but this build has no CUDA (valid: cpu)", what, s);
    sc_status loaded = kn_gpu_backend_load(err);
    if (loaded != SC_OK) {
        sc_err_prefix(err, "%s: '%s' asked for (valid here: cpu)", what, s);
        return loaded;
    }
    int n = kn_cuda_device_count();
    if (idx >= n)
        return SC_ERRF(err, SC_ERR_INVALID, "%s: '%s' asked for, but %d CUDA device%s visible",
                       what, s, n, n == 1 ? " is" : "s are");
    out->kind = KN_DEV_CUDA;
    out->index = (int)idx;
    return SC_OK;
}

void kn_device_format(kn_device dev, char *buf, size_t size)
{
    if (dev.kind == KN_DEV_CPU)
        snprintf(buf, size, "cpu");
    else
        snprintf(buf, size, "cuda:%d", dev.index);
}

void kn_device_name(kn_device dev, char *buf, size_t size)
{
#ifdef SC_HAVE_CUDA
    if (dev.kind == KN_DEV_CUDA && kn_gpu_backend_load(NULL) == SC_OK &&
        kn_cuda_name(dev.index, buf, size) == 0)
        return;
#endif
    kn_device_format(dev, buf, size);
}

bool kn_device_has_bf16(kn_device dev)
{
#ifdef SC_HAVE_CUDA
    if (dev.kind == KN_DEV_CUDA)
        return kn_gpu_backend_load(NULL) == SC_OK && kn_cuda_capability(dev.index) >= 80;
#endif
    return dev.kind == KN_DEV_CPU;
}

size_t kn_ctx_scratch_bytes(const kn_ctx *ctx)
{
    return ctx->half_ws_bytes;
}

kn_precision kn_ctx_precision(const kn_ctx *ctx)
{
    return ctx->prec;
}

sc_status kn_ctx_new(kn_ctx **out, kn_device dev, kn_precision prec, sc_err *err)
{
    *out = NULL;
    if ((unsigned)prec >= (unsigned)KN_PREC_AUTO)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "a context's precision must be fp32, tf32, bf16 or fp16, not %s (resolve "
                       "auto first)",
                       kn_precision_name(prec));
    kn_ctx *ctx = calloc(1, sizeof *ctx);
    SC_ALLOC_CHECK(ctx, err);
    ctx->dev = dev;
    ctx->prec = prec;
    kn_ctx_set_cpu_kernels(ctx, KN_CPU_KERNELS_FAST);
    if (dev.kind == KN_DEV_CPU)
        (void)kn_cpu_threads(); /* the default thread count, applied before the first product */
    if (dev.kind == KN_DEV_CUDA) {
#ifdef SC_HAVE_CUDA
        sc_status loaded = kn_gpu_backend_load(err);
        if (loaded != SC_OK) {
            free(ctx);
            return loaded;
        }
        int rc = kn_cuda_ctx_open(ctx);
        if (rc != 0) {
            kn_cuda_ctx_close(ctx);
            free(ctx);
            return cuda_fail(err, rc, "opening the CUDA device");
        }
#else
        free(ctx);
        return SC_ERRF(err, SC_ERR_UNSUPPORTED, "this build has no CUDA");
#endif
    }
    *out = ctx;
    return SC_OK;
}

void kn_ctx_destroy(kn_ctx **ctx)
{
    if (ctx == NULL || *ctx == NULL)
        return;
    (void)kn_ctx_marks(*ctx, 0, NULL); /* frees the marks */
#ifdef SC_HAVE_CUDA
    if ((*ctx)->dev.kind == KN_DEV_CUDA)
        kn_cuda_ctx_close(*ctx);
#endif
    free(*ctx);
    *ctx = NULL;
}

void kn_ctx_set_cpu_kernels(kn_ctx *ctx, kn_cpu_kernels kernels)
{
    ctx->cpu_fast = kernels == KN_CPU_KERNELS_FAST && kn_built_with_blas();
}

kn_cpu_kernels kn_ctx_cpu_kernels(const kn_ctx *ctx)
{
    return ctx->cpu_fast ? KN_CPU_KERNELS_FAST : KN_CPU_KERNELS_REFERENCE;
}

kn_device kn_ctx_device(const kn_ctx *ctx)
{
    return ctx->dev;
}

sc_status kn_ctx_alloc(kn_ctx *ctx, size_t bytes, void **out, sc_err *err)
{
    *out = NULL;
    if (bytes == 0)
        bytes = 1; /* a valid, unique pointer even for empty ranges */
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA) {
        int rc = kn_cuda_alloc(ctx, bytes, out);
        if (rc != 0) {
            *out = NULL;
            return SC_ERRF(err, SC_ERR_TOO_LARGE, "allocating %zu bytes on cuda:%d: %s", bytes,
                           ctx->dev.index, kn_cuda_error_string(rc));
        }
        return SC_OK;
    }
#endif
    (void)ctx;
    /* more than the machine has cannot be meant: refused before calloc, which may promise it
     * (overcommit) and leave the process to the out-of-memory killer when it is touched */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && bytes / (size_t)page > (size_t)pages)
        return SC_ERRF(err, SC_ERR_NOMEM,
                       "allocating %zu bytes of host memory: more than this machine's %zu bytes",
                       bytes, (size_t)pages * (size_t)page);
    *out = calloc(1, bytes);
    if (*out == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "allocating %zu bytes of host memory", bytes);
    return SC_OK;
}

sc_status kn_ctx_host_alloc(kn_ctx *ctx, size_t bytes, void **out, sc_err *err)
{
    *out = NULL;
    if (bytes == 0)
        bytes = 1;
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA) {
        int rc = kn_cuda_host_alloc(bytes, out);
        if (rc != 0) {
            *out = NULL;
            return SC_ERRF(err, SC_ERR_NOMEM, "allocating %zu bytes of page-locked host memory: %s",
                           bytes, kn_cuda_error_string(rc));
        }
        return SC_OK;
    }
#endif
    (void)ctx;
    *out = calloc(1, bytes);
    if (*out == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "allocating %zu bytes of host memory", bytes);
    return SC_OK;
}

void kn_ctx_host_free(kn_ctx *ctx, void *p)
{
    if (p == NULL)
        return;
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA) {
        kn_cuda_host_free(p);
        return;
    }
#endif
    (void)ctx;
    free(p);
}

void kn_ctx_free(kn_ctx *ctx, void *p)
{
    if (p == NULL)
        return;
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA) {
        kn_cuda_free(ctx, p);
        return;
    }
#endif
    (void)ctx;
    free(p);
}

static sc_status copy(kn_ctx *ctx, void *dst, const void *src, size_t bytes, int kind, sc_err *err)
{
    if (bytes == 0)
        return SC_OK;
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA) {
        int rc = kn_cuda_memcpy(ctx, dst, src, bytes, kind);
        return rc ? cuda_fail(err, rc, "copying memory") : SC_OK;
    }
#endif
    (void)ctx;
    (void)kind;
    (void)err;
    if (dst != src)
        memmove(dst, src, bytes);
    return SC_OK;
}

sc_status kn_ctx_upload(kn_ctx *ctx, void *dst, const void *host_src, size_t bytes, sc_err *err)
{
    return copy(ctx, dst, host_src, bytes, 1, err);
}

sc_status kn_ctx_download(kn_ctx *ctx, void *host_dst, const void *src, size_t bytes, sc_err *err)
{
    return copy(ctx, host_dst, src, bytes, 2, err);
}

sc_status kn_ctx_copy(kn_ctx *ctx, void *dst, const void *src, size_t bytes, sc_err *err)
{
    return copy(ctx, dst, src, bytes, 3, err);
}

sc_status kn_ctx_zero(kn_ctx *ctx, void *p, size_t bytes, sc_err *err)
{
    if (bytes == 0)
        return SC_OK;
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA) {
        int rc = kn_cuda_memset0(ctx, p, bytes);
        return rc ? cuda_fail(err, rc, "clearing memory") : SC_OK;
    }
#endif
    (void)ctx;
    (void)err;
    memset(p, 0, bytes);
    return SC_OK;
}

sc_status kn_ctx_sync(kn_ctx *ctx, sc_err *err)
{
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA) {
        int rc = kn_cuda_sync(ctx);
        return rc ? cuda_fail(err, rc, "waiting for the device") : SC_OK;
    }
#endif
    (void)ctx;
    (void)err;
    return SC_OK;
}

sc_status kn_ctx_time_begin(kn_ctx *ctx, sc_err *err)
{
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA) {
        int rc = kn_cuda_time_begin(ctx);
        return rc ? cuda_fail(err, rc, "recording an event") : SC_OK;
    }
#endif
    (void)err;
    ctx->t_begin_s = sc_clock_now_s();
    return SC_OK;
}

sc_status kn_ctx_time_end(kn_ctx *ctx, double *seconds, sc_err *err)
{
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA) {
        int rc = kn_cuda_time_end(ctx, seconds);
        return rc ? cuda_fail(err, rc, "timing with events") : SC_OK;
    }
#endif
    (void)err;
    *seconds = sc_clock_now_s() - ctx->t_begin_s;
    return SC_OK;
}
