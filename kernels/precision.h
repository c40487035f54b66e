/*
 * kn precision: the numerics a stage computes in, the job key "precision".
 *
 *   fp32  plain fp32 everywhere (GPU matmuls pedantic, no tensor-core shortcuts)
 *   tf32  fp32 storage, GPU matmuls on TF32 tensor cores (the CPU computes plain fp32)
 *   bf16  mixed precision as PyTorch's autocast: the inputs of every matrix product rounded to
 *         bfloat16, products accumulated in fp32; parameters, their gradients and the optimizer
 *         state stay fp32 (master weights); LayerNorm, softmax, GELU and the loss in fp32
 *   fp16  the same with IEEE half inputs (V100, T4: no bfloat16 tensor cores)
 *   auto  a request only: bf16 where every device of the job has it, else fp16; fp32 for a job
 *         on CPUs alone (kn_precision_resolve)
 *
 * The CPU computes bf16 and fp16 with the rounding emulated (kn_round_*): the same roundings of
 * the same operands as the GPU, accumulation in fp32, so a CPU stage and a GPU stage of one job
 * agree to within accumulation order and a CPU test checks the GPU's numerics. Activations and
 * gradients still travel between stages as fp32.
 */
#ifndef KN_PRECISION_H
#define KN_PRECISION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KN_PREC_FP32 = 0,
    KN_PREC_TF32 = 1,
    KN_PREC_BF16 = 2,
    KN_PREC_FP16 = 3,
    KN_PREC_AUTO = 4 /* a request, resolved before any stage is made */
} kn_precision;

/* "fp32", "tf32", "bf16", "fp16" or "auto" */
const char *kn_precision_name(kn_precision p);

/* Parses one of the names above; anything else is SC_ERR_INVALID naming `what` and the valid
 * names. */
sc_status kn_precision_parse(const char *s, const char *what, kn_precision *out, sc_err *err);

/* AUTO -> bf16 when every GPU of the job has bfloat16 tensor cores (compute capability 8.0 and
 * up), fp16 when one lacks them, fp32 when the job has no GPU; other values unchanged. */
kn_precision kn_precision_resolve(kn_precision p, int gpus, bool every_gpu_has_bf16);

/* True for bf16 and fp16: products on 16-bit inputs, 16-bit transfers between stages. */
bool kn_precision_is_half(kn_precision p);

/* Rounding to the nearest bfloat16 / IEEE half (ties to even), returned as a float; fp16 overflows
 * to infinity as the hardware's conversion does, NaN stays NaN. */
float kn_round_bf16(float x);
float kn_round_fp16(float x);

/* dst[i] = x rounded to the precision's product inputs (bf16 / fp16; a plain copy otherwise).
 * dst may equal src. */
void kn_round_copy(kn_precision p, float *dst, const float *src, size_t n);

/* The 16-bit encodings: bits of bfloat16 / IEEE half (as rounded above), and back (exact). */
uint16_t kn_bf16_bits(float x);
float kn_bf16_from_bits(uint16_t b);
uint16_t kn_fp16_bits(float x);
float kn_fp16_from_bits(uint16_t b);

/* n floats to their 16-bit encodings in fp16 for KN_PREC_FP16, bf16 for anything else (the
 * data plane's wire), and back. */
void kn_pack16(kn_precision p, uint16_t *dst, const float *src, size_t n);
void kn_unpack16(kn_precision p, float *dst, const uint16_t *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* KN_PRECISION_H */
