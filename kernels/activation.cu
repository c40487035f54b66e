/* GELU, ReLU, residual add, CUDA: grid-stride elementwise kernels, same formulas as the CPU. */
#include "kernels/activation.h"
#include "kernels/cuda_common.cuh"

#define GELU_SCALE 0.7978845608028654f

#define FOR_EACH(i, n)                                                                             \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

__global__ static void gelu_fwd(float *out, const float *inp, size_t n)
{
    FOR_EACH(i, n)
    {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

__global__ static void gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n)
{
    FOR_EACH(i, n)
    {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float grad = 0.5f * (1.0f + th) +
                     0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = grad * dout[i];
    }
}

__global__ static void relu_fwd(float *out, const float *inp, size_t n)
{
    FOR_EACH(i, n)
    {
        out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
    }
}

__global__ static void relu_bwd(float *dinp, const float *out, const float *dout, size_t n)
{
    FOR_EACH(i, n)
    {
        dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
    }
}

__global__ static void add_fwd(float *out, const float *a, const float *b, size_t n)
{
    FOR_EACH(i, n)
    {
        out[i] = a[i] + b[i];
    }
}

__global__ static void add_bwd(float *da, float *db, const float *dout, size_t n)
{
    FOR_EACH(i, n)
    {
        if (da)
            da[i] += dout[i];
        if (db)
            db[i] += dout[i];
    }
}

#define LAUNCH(kernel, n, ...)                                                                     \
    do {                                                                                           \
        kernel<<<kn_blocks((n), 256), 256, 0, kn_stream(ctx)>>>(__VA_ARGS__);                      \
        KN_LAUNCH_CHECK();                                                                         \
        return 0;                                                                                  \
    } while (0)

extern "C" int kn_gelu_forward_cuda(kn_ctx *ctx, float *out, const float *inp, size_t n)
{
    LAUNCH(gelu_fwd, n, out, inp, n);
}

extern "C" int kn_gelu_backward_cuda(kn_ctx *ctx, float *dinp, const float *inp, const float *dout,
                                     size_t n)
{
    LAUNCH(gelu_bwd, n, dinp, inp, dout, n);
}

extern "C" int kn_relu_forward_cuda(kn_ctx *ctx, float *out, const float *inp, size_t n)
{
    LAUNCH(relu_fwd, n, out, inp, n);
}

extern "C" int kn_relu_backward_cuda(kn_ctx *ctx, float *dinp, const float *out, const float *dout,
                                     size_t n)
{
    LAUNCH(relu_bwd, n, dinp, out, dout, n);
}

extern "C" int kn_residual_forward_cuda(kn_ctx *ctx, float *out, const float *a, const float *b,
                                        size_t n)
{
    LAUNCH(add_fwd, n, out, a, b, n);
}

extern "C" int kn_residual_backward_cuda(kn_ctx *ctx, float *da, float *db, const float *dout,
                                         size_t n)
{
    LAUNCH(add_bwd, n, da, db, dout, n);
}
