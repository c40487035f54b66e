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

__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                    float lr, float beta1, float beta2, float eps, float wd,
                                    float c1, float c2)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
    }
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
