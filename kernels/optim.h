/*
 * Optimizers over one contiguous parameter range: SGD with momentum and (coupled, L2) weight
 * decay, and AdamW (decoupled weight decay, bias-corrected moments).
 * The state arrays are the caller's (one allocation per stage); step t counts from 1.
 */
#ifndef KN_OPTIM_H
#define KN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/device_impl.h"
#include "kernels/gpu_fn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KN_OPT_SGD = 0, KN_OPT_ADAMW = 1 } kn_optim_kind;

typedef struct {
    kn_optim_kind kind;
    float lr;
    float weight_decay;
    float momentum;          /* SGD */
    float beta1, beta2, eps; /* AdamW */
} kn_optim_cfg;

/* AdamW defaults: lr 3e-4, betas 0.9/0.999, eps 1e-8, weight decay 0. */
kn_optim_cfg kn_optim_adamw_default(void);
/* SGD defaults: lr 0.01, momentum 0.9, weight decay 0. */
kn_optim_cfg kn_optim_sgd_default(void);
/* State floats per parameter: 2 for AdamW (m, v), 1 for SGD (velocity). */
int kn_optim_state_per_param(kn_optim_kind kind);

/* v = momentum*v + (g + wd*p); p -= lr*v. The arrays must not overlap (they are restrict). */
void kn_sgd_step_cpu(float *p, const float *g, float *v, size_t n, float lr, float momentum,
                     float wd);
/* m,v moments; t >= 1. The arrays must not overlap (they are restrict). */
void kn_adamw_step_cpu(float *p, const float *g, float *m, float *v, size_t n, float lr,
                       float beta1, float beta2, float eps, float wd, int t);
/* The same, ranges of it on the process's threads (elementwise_fast_cpu.c): the same bits. */
void kn_adamw_step_fast(float *p, const float *g, float *m, float *v, size_t n, float lr,
                        float beta1, float beta2, float eps, float wd, int t);

/* sum of x[i]^2 over n floats, each squared and added in double (the per-layer gradient
 * statistic the freezing policy reads) */
double kn_sq_sum_cpu(const float *x, size_t n);

#ifdef SC_HAVE_CUDA
/* adds kn_sq_sum_cpu(x, n) (in another order of additions) into *out, a double in device
 * memory */
KN_GPU_FN(int, kn_sq_sum_add_cuda, (kn_ctx *ctx, const float *x, size_t n, double *out));
/* x[i] *= a over n floats in device memory (fp16's loss scale taken out of the gradients) */
KN_GPU_FN(int, kn_scale_cuda, (kn_ctx *ctx, float *x, size_t n, float a));
KN_GPU_FN(int, kn_sgd_step_cuda,
          (kn_ctx *ctx, float *p, const float *g, float *v, size_t n, float lr, float momentum,
           float wd));
KN_GPU_FN(int, kn_adamw_step_cuda,
          (kn_ctx *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr,
           float beta1, float beta2, float eps, float wd, int t));
/* One AdamW launch over many tensors laid end to end (a stage's learning parameters): tensor k
 * covers [start[k], start[k + 1]) of the n values, with weight decay wd[k]. `segs` (device
 * memory) holds the starts as KN_ADAMW_SEGS_MAX-bounded uint64 values then the decays as floats
 * (kn_adamw_segs_bytes); the same formula as kn_adamw_step_cuda, element for element. */
#define KN_ADAMW_SEGS_MAX 4096
KN_GPU_FN(int, kn_adamw_multi_cuda,
          (kn_ctx *ctx, float *p, const float *g, float *m, float *v, size_t n,
           const void *segs, int nseg, float lr, float beta1, float beta2, float eps, int t));
#endif
/* bytes of a segment table of nseg tensors: nseg uint64 starts, then nseg float decays */
static inline size_t kn_adamw_segs_bytes(int nseg)
{
    return (size_t)nseg * (sizeof(uint64_t) + sizeof(float));
}
#ifdef SC_HAVE_CUDA
#endif

#ifdef __cplusplus
}
#endif

#endif /* KN_OPTIM_H */
