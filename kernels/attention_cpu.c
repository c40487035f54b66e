/*
 * Causal multi-head self-attention, CPU reference (the specification of attention.cu).
 * Rows of att above the diagonal are stored as zeros, so att is a plain (T,T) matrix per head.
 */
#include "kernels/attention.h"

#include <math.h>
#include <string.h>

size_t kn_attention_workspace_floats(int B, int T, int C, int NH, int on_gpu)
{
    if (!on_gpu)
        return (size_t)T; /* one row of d(att) */
    /* q, k, v, y/dy and dq, dk, dv in (B,NH,T,hs) layout, plus d(att) (B,NH,T,T) */
    return 7 * (size_t)B * T * C + (size_t)B * NH * T * T;
}

void kn_attention_forward_cpu(float *out, float *att, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++)
                        s += q[i] * k[i];
                    s *= scale;
                    a[t2] = s;
                    if (s > maxv)
                        maxv = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = expf(a[t2] - maxv);
                    sum += a[t2];
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 < T; t2++)
                    a[t2] = t2 <= t ? a[t2] * inv : 0.0f;
                float *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++)
                    o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    float w = a[t2];
                    for (int i = 0; i < hs; i++)
                        o[i] += w * v[i];
                }
            }
        }
    }
}

void kn_attention_backward_cpu(float *dqkv, float *ws, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH)
{
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    float *datt = ws;
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof *dqkv);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *d = dout + ((size_t)b * T + t) * C + h * hs;
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                float *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
                /* out = att @ v: gradients of att's row and of v */
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    float *dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) {
                        s += v[i] * d[i];
                        dv[i] += a[t2] * d[i];
                    }
                    datt[t2] = s;
                }
                /* softmax backward: dpre = a * (datt - sum(a * datt)) */
                float dot = 0.0f;
                for (int t2 = 0; t2 <= t; t2++)
                    dot += a[t2] * datt[t2];
                for (int t2 = 0; t2 <= t; t2++) {
                    float dpre = a[t2] * (datt[t2] - dot) * scale;
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    float *dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
                    for (int i = 0; i < hs; i++) {
                        dq[i] += dpre * k[i];
                        dk[i] += dpre * q[i];
                    }
                }
            }
        }
    }
}
