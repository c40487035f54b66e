/* Softmax cross-entropy fused with the logits gradient, CPU reference. */
#include "kernels/crossentropy.h"

#include <math.h>

void kn_crossentropy_forward_cpu(float *losses, float *probs, const float *logits,
                                 const int32_t *targets, int N, int V)
{
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * V;
        float *p = probs + (size_t)i * V;
        /* read before probs (which may alias logits) overwrites it */
        float zt = z[targets[i]];
        float maxv = -INFINITY;
        for (int j = 0; j < V; j++)
            if (z[j] > maxv)
                maxv = z[j];
        float sum = 0.0f;
        for (int j = 0; j < V; j++) {
            p[j] = expf(z[j] - maxv);
            sum += p[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j < V; j++)
            p[j] *= inv;
        /* from the logits, not log(p): p may underflow to 0 */
        losses[i] = logf(sum) - (zt - maxv);
    }
}

void kn_crossentropy_backward_cpu(float *dlogits, const float *probs, const int32_t *targets,
                                  float dloss, int N, int V)
{
    for (int i = 0; i < N; i++) {
        const float *p = probs + (size_t)i * V;
        float *d = dlogits + (size_t)i * V;
        for (int j = 0; j < V; j++)
            d[j] = (p[j] - (j == targets[i] ? 1.0f : 0.0f)) * dloss;
    }
}
