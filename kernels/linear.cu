/*
 * Linear layer, CUDA: the three products go to cuBLAS (row-major tensors seen as transposed
 * column-major matrices) in the context's precision: fp32 and TF32 through kn_gemm, bf16 and
 * fp16 on 16-bit copies of the operands; bias add and bias gradient are small kernels.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/linear.h"

/* out (N, OC) += b per row: grid (column chunks, rows), no index division */
__global__ static void bias_add(float *out, const float *b, int N, int OC)
{
    for (int r = blockIdx.y; r < N; r += gridDim.y) {
        float *row = out + (size_t)r * OC;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < OC; j += gridDim.x * blockDim.x)
            row[j] += b[j];
    }
}

/* --- bf16 / fp16: the operands converted to 16 bits (round to nearest even), then a 16-bit
 * product with fp32 accumulation and an fp32 result, as the CPU emulates (products_cpu.c) */

template <typename H> __device__ __forceinline__ H to_half(float x);
template <> __device__ __forceinline__ __nv_bfloat16 to_half<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half to_half<__half>(float x)
{
    return __float2half_rn(x);
}

/* dst (16-bit) = src (fp32), four at a time where src is aligned for it */
template <typename H> __global__ static void to_half_k(H *dst, const float *src, size_t n)
{
    size_t n4 = ((uintptr_t)src & 15) == 0 ? n / 4 : 0;
    const float4 *s4 = (const float4 *)src;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 v = s4[i];
        dst[4 * i] = to_half<H>(v.x);
        dst[4 * i + 1] = to_half<H>(v.y);
        dst[4 * i + 2] = to_half<H>(v.z);
        dst[4 * i + 3] = to_half<H>(v.w);
    }
    for (size_t i = 4 * n4 + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = to_half<H>(src[i]);
}

/* room for `elems` 16-bit values in the context's scratch: grown (after the stream's work) when
 * a larger product comes, so a stage's first step sizes it for good */
static int half_room(kn_ctx *c, size_t elems, void **out)
{
    size_t bytes = (elems * 2 + 255) & ~(size_t)255;
    if (bytes > c->half_ws_bytes) {
        KN_CUDA_TRY(cudaStreamSynchronize(kn_stream(c)));
        if (c->half_ws != NULL)
            KN_CUDA_TRY(cudaFree(c->half_ws));
        c->half_ws = NULL;
        c->half_ws_bytes = 0;
        KN_CUDA_TRY(cudaMalloc(&c->half_ws, bytes));
        c->half_ws_bytes = bytes;
    }
    *out = c->half_ws;
    return 0;
}

/* 16-bit copies of a (na values, then zeros up to na_pad >= na) and b (nb values), one after
 * the other in the scratch */
template <typename H>
static int halves_padded(kn_ctx *c, const float *a, size_t na, size_t na_pad, const float *b,
                         size_t nb, H **ha, H **hb)
{
    void *ws;
    size_t na_al = (na_pad + 127) & ~(size_t)127; /* b's copy 256-byte aligned */
    KN_GEMM_TRY(half_room(c, na_al + nb, &ws));
    *ha = (H *)ws;
    *hb = *ha + na_al;
    to_half_k<H><<<kn_blocks(na / 4 + 1, 256), 256, 0, kn_stream(c)>>>(*ha, a, na);
    KN_LAUNCH_CHECK();
    if (na_pad > na) /* the 16-bit zero is all bits clear */
        KN_CUDA_TRY(cudaMemsetAsync(*ha + na, 0, (na_pad - na) * sizeof(H), kn_stream(c)));
    if (b != NULL) {
        to_half_k<H><<<kn_blocks(nb / 4 + 1, 256), 256, 0, kn_stream(c)>>>(*hb, b, nb);
        KN_LAUNCH_CHECK();
    }
    return 0;
}

template <typename H>
static int halves(kn_ctx *c, const float *a, size_t na, const float *b, size_t nb, H **ha, H **hb)
{
    return halves_padded<H>(c, a, na, na, b, nb, ha, hb);
}

/* 16-bit copies of three operands, each 256-byte aligned, in the scratch */
template <typename H>
static int halves3(kn_ctx *c, const float *a, size_t na, const float *b, size_t nb, const float *d,
                   size_t nd, H **ha, H **hb, H **hd)
{
    void *ws;
    size_t na_al = (na + 127) & ~(size_t)127, nb_al = (nb + 127) & ~(size_t)127;
    KN_GEMM_TRY(half_room(c, na_al + nb_al + nd, &ws));
    *ha = (H *)ws;
    *hb = *ha + na_al;
    *hd = *hb + nb_al;
    const float *src[3] = {a, b, d};
    H *dst[3] = {*ha, *hb, *hd};
    size_t n[3] = {na, nb, nd};
    for (int i = 0; i < 3; i++) {
        to_half_k<H><<<kn_blocks(n[i] / 4 + 1, 256), 256, 0, kn_stream(c)>>>(dst[i], src[i], n[i]);
        KN_LAUNCH_CHECK();
    }
    return 0;
}

/* C = beta C + op(A) op(B), A and B 16-bit; C fp32, or 16-bit (c16) when C is NULL */
static int gemm_half_to(kn_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        const void *A, int lda, const void *B, int ldb, float beta, void *C,
                        bool c16, int ldc)
{
    const float one = 1.0f;
    cudaDataType_t t = c->prec == KN_PREC_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    KN_CUBLAS_TRY(cublasGemmEx(kn_cublas(c), ta, tb, m, n, k, &one, A, t, lda, B, t, ldb, &beta, C,
                               c16 ? t : CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

static int gemm_half(kn_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                     const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc)
{
    return gemm_half_to(c, ta, tb, m, n, k, A, lda, B, ldb, beta, C, false, ldc);
}

/* C (m x n, column-major) = beta C + op(A) op(B) on 16-bit copies of fp32 A (na) and B (nb) */
template <typename H>
static int product_half(kn_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                        const float *A, size_t na, int lda, const float *B, size_t nb, int ldb,
                        float beta, float *C, int ldc)
{
    H *ha, *hb;
    KN_GEMM_TRY(halves<H>(c, A, na, B, nb, &ha, &hb));
    return gemm_half(c, ta, tb, m, n, k, ha, lda, hb, ldb, beta, C, ldc);
}

/* 16-bit copy of a (na values) alone, in the scratch */
template <typename H> static int half_of(kn_ctx *c, const float *a, size_t na, H **ha)
{
    void *ws;
    KN_GEMM_TRY(half_room(c, na, &ws));
    *ha = (H *)ws;
    to_half_k<H><<<kn_blocks(na / 4 + 1, 256), 256, 0, kn_stream(c)>>>(*ha, a, na);
    KN_LAUNCH_CHECK();
    return 0;
}

/* The same product where B is already 16-bit (b16, in the context's precision) and only A (fp32,
 * na values) is converted. */
template <typename H>
static int product_one_half(kn_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                            int k, const float *A, size_t na, int lda, const void *b16, int ldb,
                            float beta, float *C, int ldc)
{
    H *ha;
    KN_GEMM_TRY(half_of<H>(c, A, na, &ha));
    return gemm_half(c, ta, tb, m, n, k, ha, lda, b16, ldb, beta, C, ldc);
}

static int product_with_half(kn_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                             int k, const float *A, size_t na, int lda, const void *b16, int ldb,
                             float beta, float *C, int ldc)
{
    if (c->prec == KN_PREC_BF16)
        return product_one_half<__nv_bfloat16>(c, ta, tb, m, n, k, A, na, lda, b16, ldb, beta, C,
                                               ldc);
    if (c->prec == KN_PREC_FP16)
        return product_one_half<__half>(c, ta, tb, m, n, k, A, na, lda, b16, ldb, beta, C, ldc);
    return (int)cudaErrorInvalidValue; /* a 16-bit operand needs a bf16 / fp16 context */
}

static int product(kn_ctx *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                   const float *A, size_t na, int lda, const float *B, size_t nb, int ldb,
                   float beta, float *C, int ldc)
{
    if (c->prec == KN_PREC_BF16)
        return product_half<__nv_bfloat16>(c, ta, tb, m, n, k, A, na, lda, B, nb, ldb, beta, C,
                                           ldc);
    if (c->prec == KN_PREC_FP16)
        return product_half<__half>(c, ta, tb, m, n, k, A, na, lda, B, nb, ldb, beta, C, ldc);
    const float one = 1.0f;
    return kn_gemm(c, ta, tb, m, n, k, &one, A, lda, B, ldb, &beta, C, ldc);
}

extern "C" int kn_linear_forward_cuda(kn_ctx *ctx, float *out, const float *inp, const float *w,
                                      const float *b, int N, int IC, int OC)
{
    /* out^T (OC x N) = W (OC x IC) . inp^T (IC x N) */
    KN_GEMM_TRY(product(ctx, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w, (size_t)OC * IC, IC, inp,
                        (size_t)N * IC, IC, 0.0f, out, OC));
    if (b != NULL) {
        dim3 grid((unsigned)((OC + 255) / 256), (unsigned)(N < 65535 ? N : 65535));
        bias_add<<<grid, 256, 0, kn_stream(ctx)>>>(out, b, N, OC);
        KN_LAUNCH_CHECK();
    }
    return 0;
}

extern "C" int kn_linear_backward_input_cuda(kn_ctx *ctx, float *dinp, const float *dout,
                                             const float *w, int N, int IC, int OC)
{
    /* dinp^T (IC x N) = W^T (IC x OC) . dout^T (OC x N) */
    KN_GEMM_TRY(product(ctx, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w, (size_t)OC * IC, IC, dout,
                        (size_t)N * OC, OC, 0.0f, dinp, IC));
    return 0;
}

extern "C" int kn_linear_backward_weight_cuda(kn_ctx *ctx, float *dw, float *db, const float *dout,
                                              const float *inp, int N, int IC, int OC)
{
    /* dW^T (IC x OC) += inp^T (IC x N) . dout (N x OC) */
    KN_GEMM_TRY(product(ctx, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, (size_t)N * IC, IC, dout,
                        (size_t)N * OC, OC, 1.0f, dw, IC));
    if (db != NULL)
        return kn_colsum_add(ctx, db, dout, N, OC);
    return 0;
}

/* The head's products (linear.h): W's 16-bit copy gets zero rows up to `ld` (the padded row
 * stride of the 16-bit logits), so every dimension cuBLAS sees is a multiple of 8 where GPT-2's
 * vocabulary of 50,257 is odd; cuBLAS picks its slow unaligned kernels otherwise (measured on an
 * H200: the logits' product 6.7 ms, the input gradient's 4.9 ms, each several times its
 * aligned twin). */
/* both backward products from one 16-bit copy of dout (the separate calls convert it twice) */
template <typename H>
static int backward_both_half(kn_ctx *c, float *dinp, float *dw, const float *dout,
                              const float *inp, const float *w, int N, int IC, int OC)
{
    H *hw, *hd, *hi;
    KN_GEMM_TRY(halves3<H>(c, w, (size_t)OC * IC, dout, (size_t)N * OC, inp, (size_t)N * IC, &hw,
                           &hd, &hi));
    KN_GEMM_TRY(gemm_half(c, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, hw, IC, hd, OC, 0.0f, dinp, IC));
    return gemm_half(c, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, hi, IC, hd, OC, 1.0f, dw, IC);
}

extern "C" int kn_linear_backward_cuda(kn_ctx *ctx, float *dinp, float *dw, float *db,
                                       const float *dout, const float *inp, const float *w, int N,
                                       int IC, int OC)
{
    if (ctx->prec == KN_PREC_BF16)
        KN_GEMM_TRY(backward_both_half<__nv_bfloat16>(ctx, dinp, dw, dout, inp, w, N, IC, OC));
    else if (ctx->prec == KN_PREC_FP16)
        KN_GEMM_TRY(backward_both_half<__half>(ctx, dinp, dw, dout, inp, w, N, IC, OC));
    else {
        KN_GEMM_TRY(kn_linear_backward_input_cuda(ctx, dinp, dout, w, N, IC, OC));
        return kn_linear_backward_weight_cuda(ctx, dw, db, dout, inp, N, IC, OC);
    }
    if (db != NULL)
        return kn_colsum_add(ctx, db, dout, N, OC);
    return 0;
}

template <typename H>
static int forward_half_out(kn_ctx *c, void *out16, int ldo, const float *inp, const float *w,
                            int N, int IC, int OC)
{
    H *hw, *hi;
    KN_GEMM_TRY(
        halves_padded<H>(c, w, (size_t)OC * IC, (size_t)ldo * IC, inp, (size_t)N * IC, &hw, &hi));
    return gemm_half_to(c, CUBLAS_OP_T, CUBLAS_OP_N, ldo, N, IC, hw, IC, hi, IC, 0.0f, out16, true,
                        ldo);
}

template <typename H>
static int backward_input_half(kn_ctx *c, float *dinp, const void *dout16, int ldd, const float *w,
                               int N, int IC, int OC)
{
    H *hw, *unused;
    KN_GEMM_TRY(halves_padded<H>(c, w, (size_t)OC * IC, (size_t)ldd * IC, NULL, 0, &hw, &unused));
    return gemm_half(c, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, ldd, hw, IC, dout16, ldd, 0.0f, dinp, IC);
}

extern "C" int kn_linear_forward_half_out_cuda(kn_ctx *ctx, void *out16, int ldo, const float *inp,
                                               const float *w, int N, int IC, int OC)
{
    /* out^T (ldo x N) = W (ldo x IC, zero rows past OC) . inp^T (IC x N), rounded to 16 bits */
    if (ldo < OC)
        return (int)cudaErrorInvalidValue;
    if (ctx->prec == KN_PREC_BF16)
        return forward_half_out<__nv_bfloat16>(ctx, out16, ldo, inp, w, N, IC, OC);
    if (ctx->prec == KN_PREC_FP16)
        return forward_half_out<__half>(ctx, out16, ldo, inp, w, N, IC, OC);
    return (int)cudaErrorInvalidValue;
}

extern "C" int kn_linear_backward_input_half_cuda(kn_ctx *ctx, float *dinp, const void *dout16,
                                                  int ldd, const float *w, int N, int IC, int OC)
{
    /* dinp^T (IC x N) = W^T (IC x ldd, zero columns past OC) . dout^T (ldd x N), dout 16-bit */
    if (ldd < OC)
        return (int)cudaErrorInvalidValue;
    if (ctx->prec == KN_PREC_BF16)
        return backward_input_half<__nv_bfloat16>(ctx, dinp, dout16, ldd, w, N, IC, OC);
    if (ctx->prec == KN_PREC_FP16)
        return backward_input_half<__half>(ctx, dinp, dout16, ldd, w, N, IC, OC);
    return (int)cudaErrorInvalidValue;
}

extern "C" int kn_linear_backward_weight_half_cuda(kn_ctx *ctx, float *dw, const void *dout16,
                                                   int ldd, const float *inp, int N, int IC, int OC)
{
    /* dW^T (IC x OC) += inp^T (IC x N) . dout (N x OC), dout already 16-bit */
    return product_with_half(ctx, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, inp, (size_t)N * IC, IC,
                             dout16, ldd, 1.0f, dw, IC);
}
