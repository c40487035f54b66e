/* SGD with momentum and AdamW: CPU reference (the specification of optim.cu). */
#include "kernels/optim.h"

#include <math.h>

kn_optim_cfg kn_optim_adamw_default(void)
{
    kn_optim_cfg c = {KN_OPT_ADAMW, 3e-4f, 0.0f, 0.0f, 0.9f, 0.999f, 1e-8f};
    return c;
}

kn_optim_cfg kn_optim_sgd_default(void)
{
    kn_optim_cfg c = {KN_OPT_SGD, 0.01f, 0.0f, 0.9f, 0.9f, 0.999f, 1e-8f};
    return c;
}

int kn_optim_state_per_param(kn_optim_kind kind)
{
    return kind == KN_OPT_ADAMW ? 2 : 1;
}

void kn_sgd_step_cpu(float *p, const float *g, float *v, size_t n, float lr, float momentum,
                     float wd)
{
    for (size_t i = 0; i < n; i++) {
        float grad = g[i] + wd * p[i];
        v[i] = momentum * v[i] + grad;
        p[i] -= lr * v[i];
    }
}

void kn_adamw_step_cpu(float *p, const float *g, float *m, float *v, size_t n, float lr,
                       float beta1, float beta2, float eps, float wd, int t)
{
    float c1 = 1.0f - powf(beta1, (float)t);
    float c2 = 1.0f - powf(beta2, (float)t);
    for (size_t i = 0; i < n; i++) {
        m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
        v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
        float mhat = m[i] / c1;
        float vhat = v[i] / c2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}

double kn_sq_sum_cpu(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        s += v * v;
    }
    return s;
}
