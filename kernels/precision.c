/* kn precision: names, the choice for "auto", and the roundings the CPU emulates. */
#include "kernels/precision.h"

#include <math.h>
#include <string.h>

static const char *const names[] = {"fp32", "tf32", "bf16", "fp16", "auto"};

const char *kn_precision_name(kn_precision p)
{
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "?";
}

sc_status kn_precision_parse(const char *s, const char *what, kn_precision *out, sc_err *err)
{
    for (unsigned i = 0; s != NULL && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (kn_precision)i;
            return SC_OK;
        }
    return SC_ERRF(err, SC_ERR_INVALID,
                   "%s: unknown precision '%s'; valid: auto (bf16 on GPUs that have it, else "
                   "fp16; fp32 on CPUs alone), bf16, fp16, tf32, fp32",
                   what, s != NULL ? s : "(none)");
}

kn_precision kn_precision_resolve(kn_precision p, int gpus, bool every_gpu_has_bf16)
{
    if (p != KN_PREC_AUTO)
        return p;
    if (gpus == 0)
        return KN_PREC_FP32;
    return every_gpu_has_bf16 ? KN_PREC_BF16 : KN_PREC_FP16;
}

bool kn_precision_is_half(kn_precision p)
{
    return p == KN_PREC_BF16 || p == KN_PREC_FP16;
}

static uint32_t f2u(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint16_t kn_bf16_bits(float x)
{
    uint32_t u = f2u(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u); /* a quiet NaN, sign kept */
    u += 0x7fffu + ((u >> 16) & 1u);          /* to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

float kn_bf16_from_bits(uint16_t b)
{
    return u2f((uint32_t)b << 16);
}

uint16_t kn_fp16_bits(float x)
{
    uint32_t u = f2u(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (a >= 0x477ff000u)                  /* 65520 and up round to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half, in units of 2^-24 (exact scaling) */
        float units = u2f(a) * 16777216.0f;
        return (uint16_t)(sign | (uint32_t)lrintf(units)); /* the default mode: ties to even */
    }
    uint32_t mant = a & 0x7fffffu, h = ((a >> 23) - 112u) << 10 | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the right next value */
    return (uint16_t)(sign | h);
}

float kn_fp16_from_bits(uint16_t b)
{
    uint32_t sign = (uint32_t)(b & 0x8000u) << 16, e = (b >> 10) & 0x1fu, m = b & 0x3ffu;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (e == 31)
        return u2f(sign | 0x7f800000u | (m << 13));
    return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

float kn_round_bf16(float x)
{
    return kn_bf16_from_bits(kn_bf16_bits(x));
}

float kn_round_fp16(float x)
{
    return kn_fp16_from_bits(kn_fp16_bits(x));
}

void kn_round_copy(kn_precision p, float *dst, const float *src, size_t n)
{
    if (p == KN_PREC_BF16) {
        for (size_t i = 0; i < n; i++)
            dst[i] = kn_round_bf16(src[i]);
    } else if (p == KN_PREC_FP16) {
        for (size_t i = 0; i < n; i++)
            dst[i] = kn_round_fp16(src[i]);
    } else if (dst != src) {
        memmove(dst, src, n * sizeof *dst);
    }
}

void kn_pack16(kn_precision p, uint16_t *restrict dst, const float *restrict src, size_t n)
{
    if (p == KN_PREC_FP16) {
        for (size_t i = 0; i < n; i++)
            dst[i] = kn_fp16_bits(src[i]);
        return;
    }
    /* kn_bf16_bits without branches, so the compiler vectorizes it: the wire's hot path runs
     * at the speed of a copy */
    for (size_t i = 0; i < n; i++) {
        uint32_t u = f2u(src[i]);
        uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
        dst[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    }
}

void kn_unpack16(kn_precision p, float *restrict dst, const uint16_t *restrict src, size_t n)
{
    if (p == KN_PREC_FP16) {
        for (size_t i = 0; i < n; i++)
            dst[i] = kn_fp16_from_bits(src[i]);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = u2f((uint32_t)src[i] << 16);
}
