/* Embedding, CPU reference (the specification of embedding.cu). */
#include "kernels/embedding.h"

void kn_embedding_forward_cpu(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                              int B, int T, int C)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *we = wte + (size_t)tokens[b * T + t] * C;
            const float *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++)
                o[c] = we[c] + pe[c];
        }
    }
}

void kn_embedding_backward_cpu(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                               int B, int T, int C)
{
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *dwe = dwte + (size_t)tokens[b * T + t] * C;
            float *dpe = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) {
                dwe[c] += d[c];
                dpe[c] += d[c];
            }
        }
    }
}
