/*
 * Causal self-attention, CUDA: q, k, v are permuted to (B,NH,T,hs), the two products per head
 * go to cuBLAS strided-batched GEMMs, the masked softmax and its backward are one warp per row.
 * Workspace (kn_attention_workspace_floats(.., 1)):
 *   q, k, v, y (4 x B*T*C) | dq, dk, dv (3 x B*T*C) | datt (B*NH*T*T)
 *
 * In bf16 and fp16 (kn_attention_*_half) q, k, v, the output gradient, the scores, the stashed
 * probabilities and their gradient are 16-bit (half the memory traffic of the T x T matrices,
 * 16-bit tensor cores); softmax and its backward compute in fp32 from those 16-bit values, and
 * the products that leave the attention (y, dq, dk, dv) are fp32. A sample's 16-bit
 * probabilities sit at the start of its fp32 slot of `att`, so the stash keeps its per-sample
 * layout (kn_stage_gather copies samples by their fp32 offsets).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "kernels/attention.h"
#include "kernels/cuda_common.cuh"

__device__ __forceinline__ float to_f(__nv_bfloat16 x)
{
    return __bfloat162float(x);
}
__device__ __forceinline__ float to_f(__half x)
{
    return __half2float(x);
}
__device__ __forceinline__ float to_f(float x)
{
    return x;
}
template <typename H> __device__ __forceinline__ H from_f(float x);
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_f<__half>(float x)
{
    return __float2half_rn(x);
}
template <> __device__ __forceinline__ float from_f<float>(float x)
{
    return x;
}

/* element i of a (B,NH,T,hs) tensor: its sample b, head h, position t and lane d. I is the index
 * type: 32-bit where the tensor allows it (a 64-bit division costs tens of instructions) */
template <typename I>
__device__ __forceinline__ void bhtd(I i, int T, int NH, int hs, int *b, int *h, int *t, int *d)
{
    I r = i / (I)hs;
    *d = (int)(i - r * (I)hs);
    I r2 = r / (I)T;
    *t = (int)(r - r2 * (I)T);
    I r3 = r2 / (I)NH;
    *h = (int)(r2 - r3 * (I)NH);
    *b = (int)r3;
}

/* qkv (B,T,3,NH,hs) fp32 -> q, k, v (B,NH,T,hs) in H (fp32 or 16-bit) */
template <typename H, typename I>
__global__ static void split_heads_h(H *q, H *k, H *v, const float *qkv, int B, int T, int NH,
                                     int hs)
{
    I n = (I)B * NH * T * hs;
    int C = NH * hs;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        int b, h, t, d;
        bhtd<I>(i, T, NH, hs, &b, &h, &t, &d);
        const float *src = qkv + ((size_t)b * T + t) * 3 * C + h * hs + d;
        q[i] = from_f<H>(src[0]);
        k[i] = from_f<H>(src[C]);
        v[i] = from_f<H>(src[2 * C]);
    }
}

/* dq, dk, dv (B,NH,T,hs) -> dqkv (B,T,3,NH,hs) */
template <typename I>
__global__ static void merge_heads3(float *dqkv, const float *dq, const float *dk, const float *dv,
                                    int B, int T, int NH, int hs)
{
    I n = (I)B * NH * T * hs;
    int C = NH * hs;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        int b, h, t, d;
        bhtd<I>(i, T, NH, hs, &b, &h, &t, &d);
        float *dst = dqkv + ((size_t)b * T + t) * 3 * C + h * hs + d;
        dst[0] = dq[i];
        dst[C] = dk[i];
        dst[2 * C] = dv[i];
    }
}

/* y (B,NH,T,hs) <-> out (B,T,C); forward = 1 gathers heads into out, 0 scatters out into y */
template <typename I>
__global__ static void permute_y(float *out, float *y, int B, int T, int NH, int hs, int to_out)
{
    I n = (I)B * NH * T * hs;
    int C = NH * hs;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        int b, h, t, d;
        bhtd<I>(i, T, NH, hs, &b, &h, &t, &d);
        size_t o = ((size_t)b * T + t) * C + h * hs + d;
        if (to_out)
            out[o] = y[i];
        else
            y[i] = out[o];
    }
}

/* one pass over a row's first n values: the running maximum m and the sum s of exp(x - m)
 * (online softmax), merged over the warp: every lane gets the row's pair */
template <typename H>
__device__ __forceinline__ void warp_row_lse(const H *a, int n, int lane, float *m_out,
                                             float *s_out)
{
    float m = -INFINITY, s = 0.0f;
    for (int j = lane; j < n; j += 32) {
        kn_lse_add(m, s, to_f(a[j]));
    }
    kn_warp_lse(m, s);
    *m_out = m;
    *s_out = s;
}

/* rows of (B*NH*T, T) scores, already scaled: causal softmax in place, zeros above the diagonal */
__global__ static void causal_softmax(float *att, int rows, int T)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    int t = row % T;
    float *a = att + (size_t)row * T;
    float m, s;
    warp_row_lse(a, t + 1, lane, &m, &s);
    float inv = 1.0f / s;
    for (int j = lane; j < T; j += 32)
        a[j] = j <= t ? expf(a[j] - m) * inv : 0.0f;
}

/* datt -> d(scores) in place: a * (datt - sum(a * datt)) * scale, zero above the diagonal */
__global__ static void causal_softmax_bwd(float *datt, const float *att, int rows, int T,
                                          float scale)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    int t = row % T;
    float *d = datt + (size_t)row * T;
    const float *a = att + (size_t)row * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32)
        dot += a[j] * d[j];
    dot = kn_warp_sum(dot);
    for (int j = lane; j < T; j += 32)
        d[j] = j <= t ? a[j] * (d[j] - dot) * scale : 0.0f;
}

/* --- bf16 / fp16 ------------------------------------------------------------------------- */

/* out (B,T,C) fp32 -> dy (B,NH,T,hs) 16-bit */
template <typename H, typename I>
__global__ static void scatter_heads_h(H *dy, const float *dout, int B, int T, int NH, int hs)
{
    I n = (I)B * NH * T * hs;
    int C = NH * hs;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        int b, h, t, d;
        bhtd<I>(i, T, NH, hs, &b, &h, &t, &d);
        dy[i] = from_f<H>(dout[((size_t)b * T + t) * C + h * hs + d]);
    }
}

/* row r of the (B*NH*T, T) 16-bit matrices laid out per sample in fp32 slots (see the top) */
template <typename H> __device__ __forceinline__ size_t half_row(int r, int NH, int T)
{
    size_t per_head_rows = (size_t)NH * T, b = r / per_head_rows, rem = r % per_head_rows;
    return b * 2 * per_head_rows * T + rem * T;
}

template <typename H> __global__ static void causal_softmax_h(H *att, int rows, int NH, int T)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    int t = row % T;
    H *a = att + half_row<H>(row, NH, T);
    float m, s;
    warp_row_lse(a, t + 1, lane, &m, &s);
    float inv = 1.0f / s;
    for (int j = lane; j < T; j += 32)
        a[j] = from_f<H>(j <= t ? expf(to_f(a[j]) - m) * inv : 0.0f);
}

template <typename H>
__global__ static void causal_softmax_bwd_h(H *datt, const H *att, int rows, int NH, int T,
                                            float scale)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    int t = row % T;
    size_t o = half_row<H>(row, NH, T);
    H *d = datt + o;
    const H *a = att + o;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += 32)
        dot += to_f(a[j]) * to_f(d[j]);
    dot = kn_warp_sum(dot);
    for (int j = lane; j < T; j += 32)
        d[j] = from_f<H>(j <= t ? to_f(a[j]) * (to_f(d[j]) - dot) * scale : 0.0f);
}

/* 32-bit index math where the tensor allows it: under 2^31 elements, so that a grid-stride step
 * (at most kn_blocks' 2^28 threads) never wraps */
static inline bool idx32(size_t n)
{
    return n < 0x80000000u;
}

/* The layout kernels' launches over B*T*C elements, in 32-bit index math where it fits. */
template <typename H>
static int launch_split_heads(cudaStream_t s, H *q, H *k, H *v, const float *qkv, int B, int T,
                              int NH, int hs)
{
    size_t n = (size_t)B * T * NH * hs;
    if (idx32(n))
        split_heads_h<H, unsigned><<<kn_blocks(n, 256), 256, 0, s>>>(q, k, v, qkv, B, T, NH, hs);
    else
        split_heads_h<H, size_t><<<kn_blocks(n, 256), 256, 0, s>>>(q, k, v, qkv, B, T, NH, hs);
    KN_LAUNCH_CHECK();
    return 0;
}

static int launch_permute_y(cudaStream_t s, float *out, float *y, int B, int T, int NH, int hs,
                            int to_out)
{
    size_t n = (size_t)B * T * NH * hs;
    if (idx32(n))
        permute_y<unsigned><<<kn_blocks(n, 256), 256, 0, s>>>(out, y, B, T, NH, hs, to_out);
    else
        permute_y<size_t><<<kn_blocks(n, 256), 256, 0, s>>>(out, y, B, T, NH, hs, to_out);
    KN_LAUNCH_CHECK();
    return 0;
}

template <typename H>
static int launch_scatter_heads(cudaStream_t s, H *dy, const float *dout, int B, int T, int NH,
                                int hs)
{
    size_t n = (size_t)B * T * NH * hs;
    if (idx32(n))
        scatter_heads_h<H, unsigned><<<kn_blocks(n, 256), 256, 0, s>>>(dy, dout, B, T, NH, hs);
    else
        scatter_heads_h<H, size_t><<<kn_blocks(n, 256), 256, 0, s>>>(dy, dout, B, T, NH, hs);
    KN_LAUNCH_CHECK();
    return 0;
}

static int launch_merge_heads3(cudaStream_t s, float *dqkv, const float *dq, const float *dk,
                               const float *dv, int B, int T, int NH, int hs)
{
    size_t n = (size_t)B * T * NH * hs;
    if (idx32(n))
        merge_heads3<unsigned><<<kn_blocks(n, 256), 256, 0, s>>>(dqkv, dq, dk, dv, B, T, NH, hs);
    else
        merge_heads3<size_t><<<kn_blocks(n, 256), 256, 0, s>>>(dqkv, dq, dk, dv, B, T, NH, hs);
    KN_LAUNCH_CHECK();
    return 0;
}

/* one strided-batched product per sample over its NH heads: 16-bit A and B, C in ct, fp32
 * accumulation */
static int gemm_heads(kn_ctx *ctx, cudaDataType_t ht, cublasOperation_t ta, cublasOperation_t tb,
                      int m, int n, int k, float alpha, const void *A, int lda, long long sA,
                      const void *B, int ldb, long long sB, cudaDataType_t ct, void *C, int ldc,
                      long long sC, int NH)
{
    const float zero = 0.0f;
    KN_CUBLAS_TRY(cublasGemmStridedBatchedEx(kn_cublas(ctx), ta, tb, m, n, k, &alpha, A, ht, lda,
                                             sA, B, ht, ldb, sB, &zero, C, ct, ldc, sC, NH,
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

template <typename H>
static int attention_forward_half(kn_ctx *ctx, cudaDataType_t ht, float *out, float *att, float *ws,
                                  const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH, rows = B * NH * T;
    size_t BTC = (size_t)B * T * C, NTT = (size_t)NH * T * T;
    long long sT = (long long)T * hs, sTT = (long long)T * T;
    H *q = (H *)ws, *k = (H *)(ws + BTC), *v = (H *)(ws + 2 * BTC);
    float *y = ws + 3 * BTC;
    H *a = (H *)att;
    cudaStream_t s = kn_stream(ctx);
    float scale = 1.0f / sqrtf((float)hs);
    KN_GEMM_TRY(launch_split_heads<H>(s, q, k, v, qkv, B, T, NH, hs));
    for (int b = 0; b < B; b++) { /* scores^T per head: K (T x hs) . Q^T (hs x T), scaled */
        size_t o = (size_t)b * NH * T * hs;
        KN_GEMM_TRY(gemm_heads(ctx, ht, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k + o, hs, sT,
                               q + o, hs, sT, ht, a + 2 * b * NTT, T, sTT, NH));
    }
    causal_softmax_h<H><<<(rows + 7) / 8, 256, 0, s>>>(a, rows, NH, T);
    KN_LAUNCH_CHECK();
    for (int b = 0; b < B; b++) { /* y^T (hs x T) = V^T (hs x T) . att^T (T x T) */
        size_t o = (size_t)b * NH * T * hs;
        KN_GEMM_TRY(gemm_heads(ctx, ht, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v + o, hs, sT,
                               a + 2 * b * NTT, T, sTT, CUDA_R_32F, y + o, hs, sT, NH));
    }
    KN_GEMM_TRY(launch_permute_y(s, out, y, B, T, NH, hs, 1));
    return 0;
}

template <typename H>
static int attention_backward_half(kn_ctx *ctx, cudaDataType_t ht, float *dqkv, float *ws,
                                   const float *dout, const float *qkv, const float *att, int B,
                                   int T, int C, int NH)
{
    int hs = C / NH, rows = B * NH * T;
    size_t BTC = (size_t)B * T * C, NTT = (size_t)NH * T * T;
    long long sT = (long long)T * hs, sTT = (long long)T * T;
    H *q = (H *)ws, *k = (H *)(ws + BTC), *v = (H *)(ws + 2 * BTC), *dy = (H *)(ws + 3 * BTC);
    float *dq = ws + 4 * BTC, *dk = dq + BTC, *dv = dk + BTC;
    H *datt = (H *)(dv + BTC);
    const H *a = (const H *)att;
    cudaStream_t s = kn_stream(ctx);
    float scale = 1.0f / sqrtf((float)hs);
    KN_GEMM_TRY(launch_split_heads<H>(s, q, k, v, qkv, B, T, NH, hs));
    KN_GEMM_TRY(launch_scatter_heads<H>(s, dy, dout, B, T, NH, hs));
    for (int b = 0; b < B; b++) {
        size_t o = (size_t)b * NH * T * hs, oa = 2 * b * NTT;
        /* datt^T (T x T) = V (T x hs) . dy^T (hs x T) */
        KN_GEMM_TRY(gemm_heads(ctx, ht, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v + o, hs, sT,
                               dy + o, hs, sT, ht, datt + oa, T, sTT, NH));
        /* dv^T (hs x T) = dy^T (hs x T) . att (T x T) */
        KN_GEMM_TRY(gemm_heads(ctx, ht, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dy + o, hs, sT,
                               a + oa, T, sTT, CUDA_R_32F, dv + o, hs, sT, NH));
    }
    causal_softmax_bwd_h<H><<<(rows + 7) / 8, 256, 0, s>>>(datt, a, rows, NH, T, scale);
    KN_LAUNCH_CHECK();
    for (int b = 0; b < B; b++) {
        size_t o = (size_t)b * NH * T * hs, oa = 2 * b * NTT;
        /* dq^T (hs x T) = K^T (hs x T) . dpre^T (T x T) */
        KN_GEMM_TRY(gemm_heads(ctx, ht, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, k + o, hs, sT,
                               datt + oa, T, sTT, CUDA_R_32F, dq + o, hs, sT, NH));
        /* dk^T (hs x T) = Q^T (hs x T) . dpre (T x T) */
        KN_GEMM_TRY(gemm_heads(ctx, ht, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q + o, hs, sT,
                               datt + oa, T, sTT, CUDA_R_32F, dk + o, hs, sT, NH));
    }
    KN_GEMM_TRY(launch_merge_heads3(s, dqkv, dq, dk, dv, B, T, NH, hs));
    return 0;
}

extern "C" int kn_attention_forward_cuda(kn_ctx *ctx, float *out, float *att, float *ws,
                                         const float *qkv, int B, int T, int C, int NH)
{
    if (ctx->prec == KN_PREC_BF16)
        return attention_forward_half<__nv_bfloat16>(ctx, CUDA_R_16BF, out, att, ws, qkv, B, T, C,
                                                     NH);
    if (ctx->prec == KN_PREC_FP16)
        return attention_forward_half<__half>(ctx, CUDA_R_16F, out, att, ws, qkv, B, T, C, NH);
    int hs = C / NH, batch = B * NH, rows = B * NH * T;
    size_t BTC = (size_t)B * T * C;
    long long sT = (long long)T * hs, sTT = (long long)T * T;
    float *q = ws, *k = q + BTC, *v = k + BTC, *y = v + BTC;
    cudaStream_t s = kn_stream(ctx);
    cublasHandle_t h = kn_cublas(ctx);
    const float one = 1.0f, zero = 0.0f, scale = 1.0f / sqrtf((float)hs);
    KN_GEMM_TRY(launch_split_heads<float>(s, q, k, v, qkv, B, T, NH, hs));
    /* scores^T per head: (T x T) = K (T x hs) . Q^T (hs x T), scaled */
    KN_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &scale, k, hs,
                                            sT, q, hs, sT, &zero, att, T, sTT, batch));
    causal_softmax<<<(rows + 7) / 8, 256, 0, s>>>(att, rows, T);
    KN_LAUNCH_CHECK();
    /* y^T (hs x T) = V^T (hs x T) . att^T (T x T) */
    KN_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &one, v, hs, sT,
                                            att, T, sTT, &zero, y, hs, sT, batch));
    KN_GEMM_TRY(launch_permute_y(s, out, y, B, T, NH, hs, 1));
    return 0;
}

extern "C" int kn_attention_backward_cuda(kn_ctx *ctx, float *dqkv, float *ws, const float *dout,
                                          const float *qkv, const float *att, int B, int T, int C,
                                          int NH)
{
    if (ctx->prec == KN_PREC_BF16)
        return attention_backward_half<__nv_bfloat16>(ctx, CUDA_R_16BF, dqkv, ws, dout, qkv, att, B,
                                                      T, C, NH);
    if (ctx->prec == KN_PREC_FP16)
        return attention_backward_half<__half>(ctx, CUDA_R_16F, dqkv, ws, dout, qkv, att, B, T, C,
                                               NH);
    int hs = C / NH, batch = B * NH, rows = B * NH * T;
    size_t BTC = (size_t)B * T * C;
    long long sT = (long long)T * hs, sTT = (long long)T * T;
    float *q = ws, *k = q + BTC, *v = k + BTC, *dy = v + BTC;
    float *dq = dy + BTC, *dk = dq + BTC, *dv = dk + BTC, *datt = dv + BTC;
    cudaStream_t s = kn_stream(ctx);
    cublasHandle_t h = kn_cublas(ctx);
    const float one = 1.0f, zero = 0.0f, scale = 1.0f / sqrtf((float)hs);
    KN_GEMM_TRY(launch_split_heads<float>(s, q, k, v, qkv, B, T, NH, hs));
    KN_GEMM_TRY(launch_permute_y(s, (float *)dout, dy, B, T, NH, hs, 0));
    /* datt^T (T x T) = V (T x hs) . dy^T (hs x T) */
    KN_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &one, v, hs, sT,
                                            dy, hs, sT, &zero, datt, T, sTT, batch));
    /* dv^T (hs x T) = dy^T (hs x T) . att (T x T) */
    KN_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &one, dy, hs, sT,
                                            att, T, sTT, &zero, dv, hs, sT, batch));
    causal_softmax_bwd<<<(rows + 7) / 8, 256, 0, s>>>(datt, att, rows, T, scale);
    KN_LAUNCH_CHECK();
    /* dq^T (hs x T) = K^T (hs x T) . dpre^T (T x T) */
    KN_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &one, k, hs, sT,
                                            datt, T, sTT, &zero, dq, hs, sT, batch));
    /* dk^T (hs x T) = Q^T (hs x T) . dpre (T x T) */
    KN_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &one, q, hs, sT,
                                            datt, T, sTT, &zero, dk, hs, sT, batch));
    KN_GEMM_TRY(launch_merge_heads3(s, dqkv, dq, dk, dv, B, T, NH, hs));
    return 0;
}
