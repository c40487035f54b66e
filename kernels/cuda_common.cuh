/*
 * Shared helpers of the CUDA launchers (internal to kernels/): error returns in the convention
 * of device_impl.h (0, a cudaError_t, or KN_CUBLAS_BASE + cublasStatus_t), launch geometry and
 * warp reductions. Every launcher enqueues on the context's stream and returns at once.
 */
#ifndef KN_CUDA_COMMON_CUH
#define KN_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/device_impl.h"

#define KN_CUBLAS_BASE 100000

#define KN_CUDA_TRY(call)                                                                          \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return (int)e_;                                                                        \
    } while (0)

#define KN_CUBLAS_TRY(call)                                                                        \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return KN_CUBLAS_BASE + (int)s_;                                                       \
    } while (0)

/* after every launch: a bad configuration shows up here, not three kernels later */
#define KN_LAUNCH_CHECK() KN_CUDA_TRY(cudaGetLastError())

static inline cudaStream_t kn_stream(kn_ctx *c)
{
    return (cudaStream_t)c->stream;
}

static inline cublasHandle_t kn_cublas(kn_ctx *c)
{
    return (cublasHandle_t)c->cublas;
}

/* The compute type of the context's products on fp32 storage: pedantic fp32, TF32 tensor cores,
 * or inputs rounded to bf16 / fp16 with fp32 accumulation (precision.h). */
static inline cublasComputeType_t kn_compute_type(const kn_ctx *c)
{
    switch (c->prec) {
    case KN_PREC_TF32:
        return CUBLAS_COMPUTE_32F_FAST_TF32;
    case KN_PREC_BF16:
        return CUBLAS_COMPUTE_32F_FAST_16BF;
    case KN_PREC_FP16:
        return CUBLAS_COMPUTE_32F_FAST_16F;
    default:
        return CUBLAS_COMPUTE_32F_PEDANTIC;
    }
}

/* cublasSgemm's arguments (column-major, fp32 storage) in the context's precision */
static inline int kn_gemm(kn_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                          int k, const float *alpha, const float *A, int lda, const float *B,
                          int ldb, const float *beta, float *C, int ldc)
{
    KN_CUBLAS_TRY(cublasGemmEx(kn_cublas(c), ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B,
                               CUDA_R_32F, ldb, beta, C, CUDA_R_32F, ldc, kn_compute_type(c),
                               CUBLAS_GEMM_DEFAULT));
    return 0;
}

#define KN_GEMM_TRY(call)                                                                          \
    do {                                                                                           \
        int r_ = (call);                                                                           \
        if (r_ != 0)                                                                               \
            return r_;                                                                             \
    } while (0)

static inline unsigned kn_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535u * 16u ? 65535u * 16u : (b == 0 ? 1 : b));
}

__device__ __forceinline__ float kn_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float kn_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Online softmax: (m, s) a running maximum and the sum of exp(x - m) over some values; merging
 * another pair (m2, s2) gives the pair over both sets (empty sets are (-inf, 0)). */
__device__ __forceinline__ void kn_lse_merge(float &m, float &s, float m2, float s2)
{
    float M = fmaxf(m, m2);
    if (M == -INFINITY) /* both empty */
        return;
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

/* Adds one value x to the pair (one exp per value unless x is a new maximum). */
__device__ __forceinline__ void kn_lse_add(float &m, float &s, float x)
{
    if (x > m) {
        s = s * expf(m - x) + 1.0f;
        m = x;
    } else {
        s += expf(x - m);
    }
}

/* The pair over the whole warp, in every lane. */
__device__ __forceinline__ void kn_warp_lse(float &m, float &s)
{
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        kn_lse_merge(m, s, m2, s2);
    }
}

/* sums over a whole block (blockDim.x a multiple of 32, <= 1024); every thread gets the sum */
__device__ __forceinline__ float kn_block_sum(float v, float *shared32)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = kn_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        shared32[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? shared32[lane] : 0.0f;
    return kn_warp_sum(r);
}

__device__ __forceinline__ float kn_block_max(float v, float *shared32)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = kn_warp_max(v);
    __syncthreads();
    if (lane == 0)
        shared32[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? shared32[lane] : -INFINITY;
    return kn_warp_max(r);
}

/* column sums of a row-major (N, C) matrix added into out (C): grid (ceil(C/256), chunks) */
__global__ static void kn_colsum_add_kernel(float *out, const float *m, int N, int C, int rows)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    if (c >= C || r0 >= N)
        return;
    float s = 0.0f;
    for (int r = r0; r < r1; r++)
        s += m[(size_t)r * C + c];
    atomicAdd(&out[c], s);
}

/* Rows per chunk of a column reduction over N rows: 64, or more so that the chunks fit in a
 * grid's y dimension (at most 65535). */
static inline int kn_row_chunk(int N)
{
    int rows = (N + 65534) / 65535;
    return rows < 64 ? 64 : rows;
}

static inline int kn_colsum_add(kn_ctx *ctx, float *out, const float *m, int N, int C)
{
    if (N <= 0 || C <= 0)
        return 0;
    int rows = kn_row_chunk(N);
    dim3 grid((C + 255) / 256, (N + rows - 1) / rows);
    kn_colsum_add_kernel<<<grid, 256, 0, kn_stream(ctx)>>>(out, m, N, C, rows);
    KN_LAUNCH_CHECK();
    return 0;
}

#endif /* KN_CUDA_COMMON_CUH */
