/* GELU, ReLU, residual add: CPU reference (the specification of activation.cu). */
#include "kernels/activation.h"

#include <math.h>

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */

/* tanh through one expf: glibc's tanhf costs about five expf, and GELU dominates the CPU MLP.
 * exp overflowing to inf still gives 1; the absolute error stays at float rounding. */
static inline float fast_tanh(float u)
{
    return 1.0f - 2.0f / (1.0f + expf(2.0f * u));
}

void kn_gelu_forward_cpu(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + fast_tanh(u));
    }
}

void kn_gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = fast_tanh(u);
        float sech2 = 1.0f - th * th;
        float grad =
            0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = grad * dout[i];
    }
}

void kn_relu_forward_cpu(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void kn_relu_backward_cpu(float *dinp, const float *out, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

void kn_residual_forward_cpu(float *out, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void kn_residual_backward_cpu(float *da, float *db, const float *dout, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (da)
            da[i] += dout[i];
        if (db)
            db[i] += dout[i];
    }
}
