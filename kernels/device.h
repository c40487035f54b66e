/*
 * kn device: where a stage runs (the CPU or one CUDA device) and the execution context that owns
 * the memory, stream, cuBLAS handle and timers of that device.
 *
 * Does not schedule anything: every call on a CUDA context is enqueued on the context's one
 * stream, in order; kn_ctx_sync() waits for it. On the CPU every call completes before it
 * returns. Invariant: memory from kn_ctx_alloc() lives on the context's device and is only
 * touched through that context (or, on the CPU, directly).
 * A context is used by one thread at a time (the device's compute thread).
 */
#ifndef KN_DEVICE_H
#define KN_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "kernels/precision.h"

typedef enum { KN_DEV_CPU = 0, KN_DEV_CUDA = 1 } kn_device_kind;

typedef struct {
    kn_device_kind kind;
    int index; /* CUDA ordinal; 0 for the CPU */
} kn_device;

/* Parses "cpu", "cuda" (= cuda:0) or "cuda:N". `what` names the value in errors ("--device").
 * A CUDA device in a CPU-only build, or beyond the device count, is SC_ERR_UNSUPPORTED /
 * SC_ERR_INVALID with a message saying what is available. */
sc_status kn_device_parse(const char *s, const char *what, kn_device *out, sc_err *err);

/* "cpu" or "cuda:N". */
void kn_device_format(kn_device dev, char *buf, size_t size);

/* Number of CUDA devices visible; 0 in a CPU-only build or without a driver/device. */
int kn_cuda_device_count(void);

/* True when this library was built with its CUDA kernels. */
bool kn_built_with_cuda(void);

/* Name of the device for profiles: "cpu" or the CUDA product name ("NVIDIA H100 80GB HBM3"). */
void kn_device_name(kn_device dev, char *buf, size_t size);

typedef struct kn_ctx kn_ctx;

/* Opens an execution context on `dev` computing in `prec` (precision.h; AUTO is SC_ERR_INVALID:
 * resolve it first). On a GPU, TF32 lets cuBLAS use TF32 tensor cores; bf16 and fp16 run the
 * products on 16-bit tensor cores. The CPU computes tf32 as plain fp32 and emulates bf16 and
 * fp16. */
sc_status kn_ctx_new(kn_ctx **out, kn_device dev, kn_precision prec, sc_err *err);
kn_precision kn_ctx_precision(const kn_ctx *ctx);

/* True when the device has bfloat16 tensor cores (compute capability 8.0 and up) or is the CPU,
 * which emulates them. */
bool kn_device_has_bf16(kn_device dev);
void kn_ctx_destroy(kn_ctx **ctx);
kn_device kn_ctx_device(const kn_ctx *ctx);

/* Which kernels a CPU context runs. FAST (the default): matrix products on the BLAS with the
 * process's threads (threads_cpu.h), results within rounding of the reference but dependent on
 * shapes, so a run cut into other stages or micro-batches differs in the last bits. REFERENCE:
 * the fixed-order kernels, the same bits on every build and for every split of a batch into
 * micro-batches; single-threaded. A build without BLAS runs the reference for both. Ignored on
 * a CUDA context. */
typedef enum { KN_CPU_KERNELS_FAST = 0, KN_CPU_KERNELS_REFERENCE = 1 } kn_cpu_kernels;
void kn_ctx_set_cpu_kernels(kn_ctx *ctx, kn_cpu_kernels kernels);
/* What the context runs: REFERENCE when asked for, or when the build has no BLAS. */
kn_cpu_kernels kn_ctx_cpu_kernels(const kn_ctx *ctx);

/* Zero-filled device memory of `bytes` bytes; free with kn_ctx_free (NULL accepted). */
sc_status kn_ctx_alloc(kn_ctx *ctx, size_t bytes, void **out, sc_err *err);
void kn_ctx_free(kn_ctx *ctx, void *p);

/* Bytes of device memory the context holds besides its callers' allocations: the 16-bit
 * operands' scratch of bf16 / fp16 products on a GPU (0 elsewhere). */
size_t kn_ctx_scratch_bytes(const kn_ctx *ctx);

/* Host memory for the context's transfers: page-locked on a GPU (copies to and from the device
 * run at the link's speed, with no staging copy on the way), plain memory on the CPU; zero-filled.
 * Free with kn_ctx_host_free (NULL accepted). */
sc_status kn_ctx_host_alloc(kn_ctx *ctx, size_t bytes, void **out, sc_err *err);
void kn_ctx_host_free(kn_ctx *ctx, void *p);

/* Copies; `dst`/`src` on the device unless named host. These wait for completion. */
sc_status kn_ctx_upload(kn_ctx *ctx, void *dst, const void *host_src, size_t bytes, sc_err *err);
sc_status kn_ctx_download(kn_ctx *ctx, void *host_dst, const void *src, size_t bytes, sc_err *err);
/* Device-to-device copy and memset, enqueued in stream order. */
sc_status kn_ctx_copy(kn_ctx *ctx, void *dst, const void *src, size_t bytes, sc_err *err);
sc_status kn_ctx_zero(kn_ctx *ctx, void *p, size_t bytes, sc_err *err);
sc_status kn_ctx_sync(kn_ctx *ctx, sc_err *err);

/* Interval timing of the work enqueued between begin and end: CUDA events on a GPU, the
 * monotonic clock on the CPU. kn_ctx_time_end waits for the work and returns seconds. */
sc_status kn_ctx_time_begin(kn_ctx *ctx, sc_err *err);
sc_status kn_ctx_time_end(kn_ctx *ctx, double *seconds, sc_err *err);

/* Timing marks: numbered points in the context's stream of work, to time many intervals of one
 * stretch of work without waiting between them (CUDA events on a GPU, so the GPU's own start
 * and end of its work; the monotonic clock on the CPU, whose work is done when a call returns).
 * kn_ctx_marks sizes the pool (marks 0..n-1; earlier marks are dropped); kn_ctx_mark records
 * mark i at this point of the stream; kn_ctx_mark_sync waits until the device has passed mark i
 * and gives the monotonic clock (sc_clock_now_ns) then; kn_ctx_mark_elapsed gives the seconds
 * between two passed marks. A mark outside the pool is SC_ERR_INVALID. */
sc_status kn_ctx_marks(kn_ctx *ctx, int n, sc_err *err);
sc_status kn_ctx_mark(kn_ctx *ctx, int i, sc_err *err);
sc_status kn_ctx_mark_sync(kn_ctx *ctx, int i, uint64_t *host_ns, sc_err *err);
sc_status kn_ctx_mark_elapsed(kn_ctx *ctx, int a, int b, double *seconds, sc_err *err);

#endif /* KN_DEVICE_H */
