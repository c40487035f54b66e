/* SGD with momentum and AdamW, CUDA: one thread per parameter, the CPU's formulas. */
#include <math.h>

#include "kernels/cuda_common.cuh"
#include "kernels/optim.h"

__global__ static void sgd_kernel(float *p, const float *g, float *v, size_t n, float lr,
                                  float momentum, float wd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float grad = g[i] + wd * p[i];
        v[i] = momentum * v[i] + grad;
        p[i] -= lr * v[i];
    }
}

/* element i's AdamW update, the CPU's formula (c1, c2: the bias corrections) */
__device__ __forceinline__ void adamw_one(float *p, const float *g, float *m, float *v, size_t i,
                                          float lr, float beta1, float beta2, float eps, float wd,
                                          float c1, float c2)
{
    float gi = g[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
}

__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                    float lr, float beta1, float beta2, float eps, float wd,
                                    float c1, float c2)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        adamw_one(p, g, m, v, i, lr, beta1, beta2, eps, wd, c1, c2);
}

/* the tensor holding element i: the last start <= i (starts ascending, starts[0] = 0) */
__device__ __forceinline__ int seg_of(const unsigned long long *starts, int nseg, size_t i)
{
    int lo = 0, hi = nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (starts[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* the segment table in shared memory (its starts, then its decays), then adamw_kernel's update
 * with each element's tensor's decay */
__global__ static void adamw_multi_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                          const unsigned long long *starts, const float *decays,
                                          int nseg, float lr, float beta1, float beta2, float eps,
                                          float c1, float c2)
{
    extern __shared__ unsigned long long sh[];
    unsigned long long *s_start = sh;
    float *s_wd = (float *)(sh + nseg);
    for (int k = threadIdx.x; k < nseg; k += blockDim.x) {
        s_start[k] = starts[k];
        s_wd[k] = decays[k];
    }
    __syncthreads();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        adamw_one(p, g, m, v, i, lr, beta1, beta2, eps, s_wd[seg_of(s_start, nseg, i)], c1, c2);
}

extern "C" int kn_adamw_multi_cuda(kn_ctx *ctx, float *p, const float *g, float *m, float *v,
                                   size_t n, const void *segs, int nseg, float lr, float beta1,
                                   float beta2, float eps, int t)
{
    if (n == 0 || nseg <= 0)
        return 0;
    if (nseg > KN_ADAMW_SEGS_MAX)
        return (int)cudaErrorInvalidValue;
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    const unsigned long long *starts = (const unsigned long long *)segs;
    const float *decays = (const float *)(starts + nseg);
    /* a few waves of blocks: each loads the table once */
    unsigned blocks = kn_blocks(n, 256);
    if (blocks > 132 * 8)
        blocks = 132 * 8;
    size_t shmem = (size_t)nseg * (sizeof(unsigned long long) + sizeof(float));
    adamw_multi_kernel<<<blocks, 256, shmem, kn_stream(ctx)>>>(p, g, m, v, n, starts, decays, nseg,
                                                               lr, beta1, beta2, eps, c1, c2);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_sgd_step_cuda(kn_ctx *ctx, float *p, const float *g, float *v, size_t n, float lr,
                                float momentum, float wd)
{
    sgd_kernel<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(p, g, v, n, lr, momentum, wd);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_adamw_step_cuda(kn_ctx *ctx, float *p, const float *g, float *m, float *v,
                                  size_t n, float lr, float beta1, float beta2, float eps, float wd,
                                  int t)
{
    /* bias corrections on the host, exactly as the CPU reference computes them */
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(p, g, m, v, n, lr, beta1, beta2,
                                                                eps, wd, c1, c2);
    KN_LAUNCH_CHECK();
    return 0;
}

/* per thread a double partial sum over a grid-stride range, a warp reduction, one atomic add
 * per warp (double atomicAdd: compute capability 6.0 and up) */
__global__ static void sq_sum_kernel(const float *x, size_t n, double *out)
{
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        double v = x[i];
        s += v * v;
    }
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0)
        atomicAdd(out, s);
}

extern "C" int kn_sq_sum_add_cuda(kn_ctx *ctx, const float *x, size_t n, double *out)
{
    if (n == 0)
        return 0;
    /* a few waves of blocks: enough to fill the device, few atomics */
    unsigned blocks = kn_blocks(n, 256);
    if (blocks > 1024)
        blocks = 1024;
    sq_sum_kernel<<<blocks, 256, 0, kn_stream(ctx)>>>(x, n, out);
    KN_LAUNCH_CHECK();
    return 0;
}

__global__ static void scale_kernel(float *x, size_t n, float a)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] *= a;
}

extern "C" int kn_scale_cuda(kn_ctx *ctx, float *x, size_t n, float a)
{
    if (n == 0)
        return 0;
    scale_kernel<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(x, n, a);
    KN_LAUNCH_CHECK();
    return 0;
}
