/* LayerNorm, CPU reference (the specification of layernorm.cu). */
#include "kernels/layernorm.h"

#include <math.h>

void kn_layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C)
{
    const float eps = 1e-5f;
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++)
            m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            v += d * d;
        }
        v /= C;
        float s = 1.0f / sqrtf(v + eps);
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++)
            o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

void kn_layernorm_backward_cpu(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C)
{
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * C;
        const float *x = inp + (size_t)i * C;
        float *dx = dinp != NULL ? dinp + (size_t)i * C : NULL;
        float m = mean[i], s = rstd[i];
        if (dinp == NULL) { /* the parameter gradients alone, added in the same order */
            for (int c = 0; c < C; c++) {
                float norm = (x[c] - m) * s;
                db[c] += d[c];
                dw[c] += norm * d[c];
            }
            continue;
        }
        /* the two row reductions of the normalised-input gradient */
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = w[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            float dnorm = w[c] * d[c];
            if (dw != NULL) {
                db[c] += d[c];
                dw[c] += norm * d[c];
            }
            dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
}
