/* Timing marks of a context (device.h): CUDA events on a GPU, clock readings on the CPU. */
#include <stdlib.h>

#include "common/sc_clock.h"
#include "kernels/device.h"
#include "kernels/device_impl.h"

static void marks_free(kn_ctx *ctx)
{
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA && ctx->mark_events != NULL)
        kn_cuda_marks_free(ctx);
#endif
    free(ctx->mark_events);
    free(ctx->mark_ns);
    ctx->mark_events = NULL;
    ctx->mark_ns = NULL;
    ctx->n_marks = 0;
}

static sc_status check(const kn_ctx *ctx, int i, sc_err *err)
{
    if (i < 0 || i >= ctx->n_marks)
        return SC_ERRF(err, SC_ERR_INVALID, "timing mark %d outside the context's %d", i,
                       ctx->n_marks);
    return SC_OK;
}

#ifdef SC_HAVE_CUDA
static sc_status cuda_rc(int rc, const char *what, sc_err *err)
{
    return rc == 0 ? SC_OK : SC_ERRF(err, SC_ERR_CUDA, "%s: %s", what, kn_cuda_error_string(rc));
}
#endif

sc_status kn_ctx_marks(kn_ctx *ctx, int n, sc_err *err)
{
    marks_free(ctx);
    if (n <= 0)
        return SC_OK;
    ctx->mark_events = calloc((size_t)n, sizeof *ctx->mark_events);
    ctx->mark_ns = calloc((size_t)n, sizeof *ctx->mark_ns);
    if (ctx->mark_events == NULL || ctx->mark_ns == NULL) {
        marks_free(ctx);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for %d timing marks", n);
    }
    ctx->n_marks = n;
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA) {
        sc_status rc = cuda_rc(kn_cuda_marks_new(ctx, n), "creating timing events", err);
        if (rc != SC_OK)
            marks_free(ctx);
        return rc;
    }
#endif
    return SC_OK;
}

sc_status kn_ctx_mark(kn_ctx *ctx, int i, sc_err *err)
{
    SC_CHECK(check(ctx, i, err));
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA)
        return cuda_rc(kn_cuda_mark(ctx, i), "recording a timing event", err);
#endif
    ctx->mark_ns[i] = sc_clock_now_ns();
    return SC_OK;
}

sc_status kn_ctx_mark_sync(kn_ctx *ctx, int i, uint64_t *host_ns, sc_err *err)
{
    SC_CHECK(check(ctx, i, err));
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA) {
        SC_CHECK(cuda_rc(kn_cuda_mark_sync(ctx, i), "waiting for a timing event", err));
        *host_ns = sc_clock_now_ns();
        return SC_OK;
    }
#endif
    *host_ns = ctx->mark_ns[i];
    return SC_OK;
}

sc_status kn_ctx_mark_elapsed(kn_ctx *ctx, int a, int b, double *seconds, sc_err *err)
{
    SC_CHECK(check(ctx, a, err));
    SC_CHECK(check(ctx, b, err));
#ifdef SC_HAVE_CUDA
    if (ctx->dev.kind == KN_DEV_CUDA)
        return cuda_rc(kn_cuda_mark_elapsed(ctx, a, b, seconds), "timing events", err);
#endif
    *seconds = ((double)ctx->mark_ns[b] - (double)ctx->mark_ns[a]) * 1e-9;
    return SC_OK;
}
