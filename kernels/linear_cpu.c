/*
 * Linear layer, CPU reference. Plain loops in an order that keeps the inner loop unit-stride;
 * no other tricks, so it stays the readable specification of linear.cu.
 */
#include "kernels/linear.h"

#include <string.h>

/* Dot product with eight independent partial sums: the fixed summation order lets the compiler
 * keep the lanes in SIMD registers without -ffast-math, and stays deterministic. */
static inline float dot8(const float *a, const float *b, int n)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += a[i + k] * b[i + k];
    float t = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (; i < n; i++)
        t += a[i] * b[i];
    return t;
}

void kn_linear_forward_cpu(float *out, const float *inp, const float *w, const float *b, int N,
                           int IC, int OC)
{
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * IC;
        float *o = out + (size_t)n * OC;
        for (int j = 0; j < OC; j++)
            o[j] = dot8(x, w + (size_t)j * IC, IC) + (b ? b[j] : 0.0f);
    }
}

void kn_linear_backward_input_cpu(float *dinp, const float *dout, const float *w, int N, int IC,
                                  int OC)
{
    for (int n = 0; n < N; n++) {
        float *dx = dinp + (size_t)n * IC;
        const float *d = dout + (size_t)n * OC;
        memset(dx, 0, (size_t)IC * sizeof *dx);
        for (int o = 0; o < OC; o++) {
            float g = d[o];
            const float *wr = w + (size_t)o * IC;
            for (int i = 0; i < IC; i++)
                dx[i] += g * wr[i];
        }
    }
}

void kn_linear_backward_weight_cpu(float *dw, float *db, const float *dout, const float *inp, int N,
                                   int IC, int OC)
{
    for (int o = 0; o < OC; o++) {
        float *dwr = dw + (size_t)o * IC;
        float sb = 0.0f;
        for (int n = 0; n < N; n++) {
            float g = dout[(size_t)n * OC + o];
            const float *x = inp + (size_t)n * IC;
            sb += g;
            for (int i = 0; i < IC; i++)
                dwr[i] += g * x[i];
        }
        if (db)
            db[o] += sb;
    }
}
