/*
 * Internals of kn_ctx shared by device.c, the block code and the CUDA launchers. Not part of the
 * library's contract. Plain C that also compiles as C++ (nvcc), so no C-only syntax here.
 */
#ifndef KN_DEVICE_IMPL_H
#define KN_DEVICE_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/device.h"
#include "kernels/gpu_fn.h"
#include "kernels/precision.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Same type as cudaStream_t, without pulling the CUDA headers into C code. */
typedef struct CUstream_st *kn_stream_t;

struct kn_ctx {
    kn_device dev;
    kn_precision prec;  /* never AUTO */
    bool cpu_fast;      /* CPU: the fast path (BLAS products), else the reference kernels */
    kn_stream_t stream; /* CUDA only */
    void *cublas;       /* cublasHandle_t, CUDA only */
    void *ev_begin;     /* cudaEvent_t, CUDA only */
    void *ev_end;
    double t_begin_s;     /* CPU timing */
    void *half_ws;        /* CUDA, bf16 / fp16: the 16-bit copies of a product's operands */
    size_t half_ws_bytes; /* (linear.cu; grown to the largest product, then reused) */
    int n_marks;          /* device_marks.c: CUDA events, or CPU clock readings */
    void **mark_events;
    uint64_t *mark_ns;
};

#ifdef SC_HAVE_CUDA
/* device_cuda.cu: each returns 0 or a cudaError_t / cublasStatus_t value; the message for a
 * nonzero code comes from kn_cuda_error_string. */
KN_GPU_FN(int, kn_cuda_count, (void));
KN_GPU_FN(int, kn_cuda_name, (int index, char *buf, size_t size));
/* compute capability major * 10 + minor (80 for an A100, 90 for an H100), or -1 */
KN_GPU_FN(int, kn_cuda_capability, (int index));
KN_GPU_FN(int, kn_cuda_ctx_open, (struct kn_ctx *ctx));
KN_GPU_FN(void, kn_cuda_ctx_close, (struct kn_ctx *ctx));
KN_GPU_FN(int, kn_cuda_alloc, (struct kn_ctx *ctx, size_t bytes, void **out));
KN_GPU_FN(void, kn_cuda_free, (struct kn_ctx *ctx, void *p));
KN_GPU_FN(int, kn_cuda_memcpy,
          (struct kn_ctx *ctx, void *dst, const void *src, size_t bytes, int kind));
KN_GPU_FN(int, kn_cuda_memset0, (struct kn_ctx *ctx, void *p, size_t bytes));
KN_GPU_FN(int, kn_cuda_host_alloc, (size_t bytes, void **out));
KN_GPU_FN(void, kn_cuda_host_free, (void *p));
KN_GPU_FN(int, kn_cuda_sync, (struct kn_ctx *ctx));
/* Makes the context's device current for this thread: the CUDA launchers (kernels/ .cu files) use
 * the current device, and one thread may drive stages on several GPUs. */
KN_GPU_FN(int, kn_cuda_enter, (struct kn_ctx *ctx));
KN_GPU_FN(int, kn_cuda_time_begin, (struct kn_ctx *ctx));
KN_GPU_FN(int, kn_cuda_time_end, (struct kn_ctx *ctx, double *seconds));
KN_GPU_FN(const char *, kn_cuda_error_string, (int code));
/* timing marks (device_marks.c): n events into ctx->mark_events, freed by _free */
KN_GPU_FN(int, kn_cuda_marks_new, (struct kn_ctx *ctx, int n));
KN_GPU_FN(void, kn_cuda_marks_free, (struct kn_ctx *ctx));
KN_GPU_FN(int, kn_cuda_mark, (struct kn_ctx *ctx, int i));
KN_GPU_FN(int, kn_cuda_mark_sync, (struct kn_ctx *ctx, int i));
KN_GPU_FN(int, kn_cuda_mark_elapsed, (struct kn_ctx *ctx, int a, int b, double *seconds));
enum { KN_COPY_H2D = 1, KN_COPY_D2H = 2, KN_COPY_D2D = 3 };
#endif

#ifdef __cplusplus
}
#endif

#endif /* KN_DEVICE_IMPL_H */
