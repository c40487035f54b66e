/*
 * Linear layer, CUDA: the three products go to cuBLAS in the context's precision (kn_gemm) (row-major tensors seen as transposed
 * column-major matrices), bias add and bias gradient are small kernels.
 */
#include "kernels/cuda_common.cuh"
#include "kernels/linear.h"

__global__ static void bias_add(float *out, const float *b, size_t n, int OC)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] += b[i % OC];
}

extern "C" int kn_linear_forward_cuda(kn_ctx *ctx, float *out, const float *inp, const float *w,
                                      const float *b, int N, int IC, int OC)
{
    const float one = 1.0f, zero = 0.0f;
    /* out^T (OC x N) = W (OC x IC) . inp^T (IC x N) */
    KN_GEMM_TRY(kn_gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one, w, IC, inp,
                              IC, &zero, out, OC));
    if (b != NULL) {
        size_t n = (size_t)N * OC;
        bias_add<<<kn_blocks(n, 256), 256, 0, kn_stream(ctx)>>>(out, b, n, OC);
        KN_LAUNCH_CHECK();
    }
    return 0;
}

extern "C" int kn_linear_backward_input_cuda(kn_ctx *ctx, float *dinp, const float *dout,
                                             const float *w, int N, int IC, int OC)
{
    const float one = 1.0f, zero = 0.0f;
    /* dinp^T (IC x N) = W^T (IC x OC) . dout^T (OC x N) */
    KN_GEMM_TRY(kn_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, w, IC,
                              dout, OC, &zero, dinp, IC));
    return 0;
}

extern "C" int kn_linear_backward_weight_cuda(kn_ctx *ctx, float *dw, float *db, const float *dout,
                                              const float *inp, int N, int IC, int OC)
{
    const float one = 1.0f;
    /* dW^T (IC x OC) += inp^T (IC x N) . dout (N x OC) */
    KN_GEMM_TRY(kn_gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one, inp, IC,
                              dout, OC, &one, dw, IC));
    if (db != NULL)
        return kn_colsum_add(ctx, db, dout, N, OC);
    return 0;
}
