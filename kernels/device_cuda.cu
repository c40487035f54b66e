/*
 * kn device, CUDA side: device selection, stream, cuBLAS handle, memory, events. Every call
 * first makes the context's device current, because the calling thread may also drive others.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda_common.cuh"

extern "C" int kn_cuda_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: clear the sticky error, report none */
        return 0;
    }
    return n;
}

extern "C" int kn_cuda_name(int index, char *buf, size_t size)
{
    cudaDeviceProp p;
    KN_CUDA_TRY(cudaGetDeviceProperties(&p, index));
    snprintf(buf, size, "%s", p.name);
    return 0;
}

extern "C" int kn_cuda_capability(int index)
{
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return major * 10 + minor;
}

extern "C" int kn_cuda_ctx_open(struct kn_ctx *c)
{
    KN_CUDA_TRY(cudaSetDevice(c->dev.index));
    cudaStream_t s;
    KN_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    c->stream = s;
    cublasHandle_t h;
    KN_CUBLAS_TRY(cublasCreate(&h));
    c->cublas = h;
    KN_CUBLAS_TRY(cublasSetStream(h, s));
    /* kn_gemm names its compute type per call; the calls that do not (the fp32 attention's
     * batched products) follow the handle: TF32 where asked for, else pedantic fp32, which keeps
     * cuBLAS from choosing a shortcut on its own */
    KN_CUBLAS_TRY(cublasSetMathMode(h, c->prec == KN_PREC_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                               : CUBLAS_PEDANTIC_MATH));
    cudaEvent_t a, b;
    KN_CUDA_TRY(cudaEventCreate(&a));
    c->ev_begin = a;
    KN_CUDA_TRY(cudaEventCreate(&b));
    c->ev_end = b;
    return 0;
}

extern "C" void kn_cuda_ctx_close(struct kn_ctx *c)
{
    cudaSetDevice(c->dev.index);
    if (c->stream)
        cudaStreamSynchronize((cudaStream_t)c->stream);
    if (c->ev_begin)
        cudaEventDestroy((cudaEvent_t)c->ev_begin);
    if (c->ev_end)
        cudaEventDestroy((cudaEvent_t)c->ev_end);
    if (c->half_ws)
        cudaFree(c->half_ws);
    c->half_ws = NULL;
    c->half_ws_bytes = 0;
    if (c->cublas)
        cublasDestroy((cublasHandle_t)c->cublas);
    if (c->stream)
        cudaStreamDestroy((cudaStream_t)c->stream);
    c->stream = NULL;
    c->cublas = NULL;
    c->ev_begin = c->ev_end = NULL;
}

extern "C" int kn_cuda_alloc(struct kn_ctx *c, size_t bytes, void **out)
{
    KN_CUDA_TRY(cudaSetDevice(c->dev.index));
    KN_CUDA_TRY(cudaMalloc(out, bytes));
    /* zero-filled, as the contract says; done before the pointer is handed out */
    cudaError_t e = cudaMemsetAsync(*out, 0, bytes, (cudaStream_t)c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize((cudaStream_t)c->stream);
    if (e != cudaSuccess) {
        cudaFree(*out);
        *out = NULL;
        return (int)e;
    }
    return 0;
}

extern "C" void kn_cuda_free(struct kn_ctx *c, void *p)
{
    cudaSetDevice(c->dev.index);
    cudaStreamSynchronize((cudaStream_t)c->stream);
    cudaFree(p);
}

extern "C" int kn_cuda_memcpy(struct kn_ctx *c, void *dst, const void *src, size_t bytes, int kind)
{
    cudaStream_t s = (cudaStream_t)c->stream;
    KN_CUDA_TRY(cudaSetDevice(c->dev.index));
    cudaMemcpyKind k = kind == KN_COPY_H2D   ? cudaMemcpyHostToDevice
                       : kind == KN_COPY_D2H ? cudaMemcpyDeviceToHost
                                             : cudaMemcpyDeviceToDevice;
    KN_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, k, s));
    /* host memory may be reused as soon as the call returns: wait for transfers with the host */
    if (kind != KN_COPY_D2D)
        KN_CUDA_TRY(cudaStreamSynchronize(s));
    return 0;
}

extern "C" int kn_cuda_memset0(struct kn_ctx *c, void *p, size_t bytes)
{
    KN_CUDA_TRY(cudaSetDevice(c->dev.index));
    KN_CUDA_TRY(cudaMemsetAsync(p, 0, bytes, (cudaStream_t)c->stream));
    return 0;
}

extern "C" int kn_cuda_host_alloc(size_t bytes, void **out)
{
    KN_CUDA_TRY(cudaHostAlloc(out, bytes, cudaHostAllocPortable));
    memset(*out, 0, bytes);
    return 0;
}

extern "C" void kn_cuda_host_free(void *p)
{
    cudaFreeHost(p);
}

extern "C" int kn_cuda_sync(struct kn_ctx *c)
{
    KN_CUDA_TRY(cudaSetDevice(c->dev.index));
    KN_CUDA_TRY(cudaStreamSynchronize((cudaStream_t)c->stream));
    return 0;
}

extern "C" int kn_cuda_enter(struct kn_ctx *c)
{
    KN_CUDA_TRY(cudaSetDevice(c->dev.index));
    return 0;
}

extern "C" int kn_cuda_time_begin(struct kn_ctx *c)
{
    KN_CUDA_TRY(cudaSetDevice(c->dev.index));
    KN_CUDA_TRY(cudaEventRecord((cudaEvent_t)c->ev_begin, (cudaStream_t)c->stream));
    return 0;
}

extern "C" int kn_cuda_time_end(struct kn_ctx *c, double *seconds)
{
    float ms = 0.0f;
    KN_CUDA_TRY(cudaSetDevice(c->dev.index));
    KN_CUDA_TRY(cudaEventRecord((cudaEvent_t)c->ev_end, (cudaStream_t)c->stream));
    KN_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)c->ev_end));
    KN_CUDA_TRY(cudaEventElapsedTime(&ms, (cudaEvent_t)c->ev_begin, (cudaEvent_t)c->ev_end));
    *seconds = ms * 1e-3;
    return 0;
}

extern "C" void kn_cuda_marks_free(struct kn_ctx *c)
{
    cudaSetDevice(c->dev.index);
    for (int i = 0; c->mark_events != NULL && i < c->n_marks; i++)
        if (c->mark_events[i] != NULL)
            cudaEventDestroy((cudaEvent_t)c->mark_events[i]);
}

extern "C" int kn_cuda_marks_new(struct kn_ctx *c, int n)
{
    KN_CUDA_TRY(cudaSetDevice(c->dev.index));
    for (int i = 0; i < n; i++) {
        cudaEvent_t e;
        KN_CUDA_TRY(cudaEventCreate(&e));
        c->mark_events[i] = e;
    }
    return 0;
}

extern "C" int kn_cuda_mark(struct kn_ctx *c, int i)
{
    KN_CUDA_TRY(cudaEventRecord((cudaEvent_t)c->mark_events[i], (cudaStream_t)c->stream));
    return 0;
}

extern "C" int kn_cuda_mark_sync(struct kn_ctx *c, int i)
{
    KN_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)c->mark_events[i]));
    return 0;
}

extern "C" int kn_cuda_mark_elapsed(struct kn_ctx *c, int a, int b, double *seconds)
{
    float ms = 0.0f;
    KN_CUDA_TRY(
        cudaEventElapsedTime(&ms, (cudaEvent_t)c->mark_events[a], (cudaEvent_t)c->mark_events[b]));
    *seconds = ms * 1e-3;
    return 0;
}

extern "C" const char *kn_cuda_error_string(int code)
{
    if (code >= KN_CUBLAS_BASE)
        return cublasGetStatusString((cublasStatus_t)(code - KN_CUBLAS_BASE));
    return cudaGetErrorString((cudaError_t)code);
}
