/*
 * Helpers of the CPU references' inner loops (internal to kernels/): row updates written eight
 * elements a step, the shape the compiler turns into vector instructions, each keeping one
 * fixed order of additions per element; and KN_VECTOR_CLONES, which also builds a function for
 * AVX2, chosen at load time (x86-64, GCC). A lane does exactly the scalar code's operations
 * and C11 fuses no multiply-add, so every build gives the same bits.
 */
#ifndef KN_VEC_CPU_H
#define KN_VEC_CPU_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define KN_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef KN_VECTOR_CLONES
#define KN_VECTOR_CLONES
#endif

#include <math.h>
#include <string.h>

/* AT(i) for every i in [0, n), an elementwise body that reads and writes element i only: in
 * blocks of a fixed eight, which the compiler turns into vector instructions at -O2 too, then
 * the tail one by one. */
#define KN_EACH_ELEMENT(n, AT)                                                                     \
    do {                                                                                           \
        size_t each_i_ = 0;                                                                        \
        for (; each_i_ + 8 <= (n); each_i_ += 8)                                                   \
            for (int each_j_ = 0; each_j_ < 8; each_j_++)                                          \
                AT(each_i_ + (size_t)each_j_);                                                     \
        for (; each_i_ < (n); each_i_++)                                                           \
            AT(each_i_);                                                                           \
    } while (0)

/* Eight floats (a GCC vector type: elementwise operations, exactly those of the scalar code
 * lane by lane; the compiler picks the instructions, e.g. two SSE halves). Loaded by a macro,
 * never passed to or returned from a function: the default and AVX2 builds of a function pass
 * such vectors differently. */
typedef float kn_v8 __attribute__((vector_size(32)));
#define V8_LOAD(v, p) memcpy(&(v), (p), sizeof(v))

/* Two rows at once, sharing the loads of x0..x3:
 *   y0[i] = (((y0[i] + a[0] x0[i]) + a[1] x1[i]) + a[2] x2[i]) + a[3] x3[i], y1 likewise with b */
static inline void add4x2(float *restrict y0, float *restrict y1, const float *restrict x0,
                          const float *restrict x1, const float *restrict x2,
                          const float *restrict x3, const float a[4], const float b[4], int n)
{
    float a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3];
/* element j of both rows (a macro, so that the eight-step loop stays one vectorisable body) */
#define ADD4X2_AT(j)                                                                               \
    do {                                                                                           \
        float v0 = x0[j], v1 = x1[j], v2 = x2[j], v3 = x3[j], t = y0[j], u = y1[j];                \
        t += a0 * v0;                                                                              \
        t += a1 * v1;                                                                              \
        t += a2 * v2;                                                                              \
        t += a3 * v3;                                                                              \
        u += b0 * v0;                                                                              \
        u += b1 * v1;                                                                              \
        u += b2 * v2;                                                                              \
        u += b3 * v3;                                                                              \
        y0[j] = t;                                                                                 \
        y1[j] = u;                                                                                 \
    } while (0)
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            ADD4X2_AT(i + k);
    for (; i < n; i++)
        ADD4X2_AT(i);
#undef ADD4X2_AT
}

/* e^x in each lane, for the fast path only (the references call expf): x = k ln2 + r with
 * |r| <= ln2/2, e^r by Cephes' degree-6 polynomial, 2^k from the exponent bits. Inputs are
 * clamped to [-87.3, 88.3] (results from 1.2e-38 to 2.2e38: no 0, inf or NaN). Relative error
 * within 2e-7. A macro, as V8_LOAD: vectors never cross a function boundary. */
typedef int kn_i8 __attribute__((vector_size(32)));
#define V8_EXP(out, xin)                                                                           \
    do {                                                                                           \
        kn_v8 x_ = (xin), lo_, hi_;                                                                \
        for (int l_ = 0; l_ < 8; l_++) {                                                           \
            lo_[l_] = -87.3365f;                                                                   \
            hi_[l_] = 88.3762f;                                                                    \
        }                                                                                          \
        kn_i8 below_ = x_<lo_, above_ = x_> hi_; /* lanes of -1 where true */                      \
        x_ = (kn_v8)(((kn_i8)x_ & ~below_) | ((kn_i8)lo_ & below_));                               \
        x_ = (kn_v8)(((kn_i8)x_ & ~above_) | ((kn_i8)hi_ & above_));                               \
        kn_v8 t_ = x_ * 1.44269504088896341f + 0.5f;                                               \
        kn_i8 k_ = __builtin_convertvector(t_, kn_i8); /* toward zero, then down: floor */         \
        k_ += (kn_i8)(__builtin_convertvector(k_, kn_v8) > t_);                                    \
        kn_v8 kf_ = __builtin_convertvector(k_, kn_v8);                                            \
        kn_v8 r_ = x_ - kf_ * 0.693359375f;                                                        \
        r_ = r_ - kf_ * -2.12194440e-4f;                                                           \
        kn_v8 p_ = r_ * 1.9875691500e-4f + 1.3981999507e-3f;                                       \
        p_ = p_ * r_ + 8.3334519073e-3f;                                                           \
        p_ = p_ * r_ + 4.1665795894e-2f;                                                           \
        p_ = p_ * r_ + 1.6666665459e-1f;                                                           \
        p_ = p_ * r_ + 5.0000001201e-1f;                                                           \
        p_ = p_ * r_ * r_ + r_ + 1.0f;                                                             \
        kn_i8 e_ = (k_ + 127) << 23;                                                               \
        (out) = p_ * (kn_v8)e_;                                                                    \
    } while (0)
#define V8_STORE(p, v) memcpy((p), &(v), sizeof(v))

/* The largest of x[0..n). */
static inline __attribute__((always_inline)) float kn_row_max(const float *x, int n)
{
    float m = -INFINITY;
    for (int j = 0; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

/* out[j] = e^(in[j] - shift) for j < n (in may be out), returning their sum: the numerators and
 * the denominator of a softmax row, eight lanes at a time (V8_EXP), then the tail (expf). The
 * lanes add in a fixed order, so a row gives the same bits wherever it is computed. For the
 * fast path only. */
static inline __attribute__((always_inline)) float kn_exp_shifted(float *out, const float *in,
                                                                  int n, float shift)
{
    kn_v8 acc = {0};
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        kn_v8 v;
        V8_LOAD(v, in + j);
        V8_EXP(v, v - shift);
        V8_STORE(out + j, v);
        acc += v;
    }
    float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; j < n; j++) {
        out[j] = expf(in[j] - shift);
        sum += out[j];
    }
    return sum;
}

/* y[i] += a x[i] */
static inline void add1(float *restrict y, const float *restrict x, float a, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

#endif /* KN_VEC_CPU_H */
