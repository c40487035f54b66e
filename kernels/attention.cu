/*
 * Causal self-attention, CUDA: q, k, v are permuted to (B,NH,T,hs), the two products per head
 * go to cuBLAS strided-batched GEMMs, the masked softmax and its backward are one warp per row.
 * Workspace (kn_attention_workspace_floats(.., 1)):
 *   q, k, v, y (4 x B*T*C) | dq, dk, dv (3 x B*T*C) | datt (B*NH*T*T)
 */
#include <math.h>

#include "kernels/attention.h"
#include "kernels/cuda_common.cuh"

/* qkv (B,T,3,NH,hs) -> q, k, v (B,NH,T,hs) */
__global__ static void split_heads(float *q, float *k, float *v, const float *qkv, int B, int T,
                                   int NH, int hs)
{
    size_t n = (size_t)B * NH * T * hs;
    int C = NH * hs;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % hs);
        int t = (int)((i / hs) % T);
        int h = (int)((i / ((size_t)hs * T)) % NH);
        int b = (int)(i / ((size_t)hs * T * NH));
        const float *src = qkv + ((size_t)b * T + t) * 3 * C + h * hs + d;
        q[i] = src[0];
        k[i] = src[C];
        v[i] = src[2 * C];
    }
}

/* dq, dk, dv (B,NH,T,hs) -> dqkv (B,T,3,NH,hs) */
__global__ static void merge_heads3(float *dqkv, const float *dq, const float *dk, const float *dv,
                                    int B, int T, int NH, int hs)
{
    size_t n = (size_t)B * NH * T * hs;
    int C = NH * hs;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % hs);
        int t = (int)((i / hs) % T);
        int h = (int)((i / ((size_t)hs * T)) % NH);
        int b = (int)(i / ((size_t)hs * T * NH));
        float *dst = dqkv + ((size_t)b * T + t) * 3 * C + h * hs + d;
        dst[0] = dq[i];
        dst[C] = dk[i];
        dst[2 * C] = dv[i];
    }
}

/* y (B,NH,T,hs) <-> out (B,T,C); forward = 1 gathers heads into out, 0 scatters out into y */
__global__ static void permute_y(float *out, float *y, int B, int T, int NH, int hs, int to_out)
{
    size_t n = (size_t)B * NH * T * hs;
    int C = NH * hs;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % hs);
        int t = (int)((i / hs) % T);
        int h = (int)((i / ((size_t)hs * T)) % NH);
        int b = (int)(i / ((size_t)hs * T * NH));
        size_t o = ((size_t)b * T + t) * C + h * hs + d;
        if (to_out)
            out[o] = y[i];
        else
            y[i] = out[o];
    }
}

/* rows of (B*NH*T, T) scores, already scaled: causal softmax in place, zeros above the diagonal */
__global__ static void causal_softmax(float *att, int rows, int T)
{
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    int t = row % T;
    float *a = att + (size_t)row * T;
    float m = -INFINITY;
    for (int j = lane; j <= t; j += 32)
        m = fmaxf(m, a[j]);
    m = kn_warp_max(m);
    float s = 0.0f;
    for (int j = lane; j <= t; j += 32) {
        float e = expf(a[j] - m);
        a[j] = e;
        s += e;
    }
    float inv = 1.0f / kn_warp_sum(s);
    for (int j = lane; j < T; j += 32)
        a[j] = j <= t ? a[j] * inv : 0.0f;
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

extern "C" int kn_attention_forward_cuda(kn_ctx *ctx, float *out, float *att, float *ws,
                                         const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH, batch = B * NH, rows = B * NH * T;
    size_t BTC = (size_t)B * T * C;
    long long sT = (long long)T * hs, sTT = (long long)T * T;
    float *q = ws, *k = q + BTC, *v = k + BTC, *y = v + BTC;
    cudaStream_t s = kn_stream(ctx);
    cublasHandle_t h = kn_cublas(ctx);
    const float one = 1.0f, zero = 0.0f, scale = 1.0f / sqrtf((float)hs);
    split_heads<<<kn_blocks(BTC, 256), 256, 0, s>>>(q, k, v, qkv, B, T, NH, hs);
    KN_LAUNCH_CHECK();
    /* scores^T per head: (T x T) = K (T x hs) . Q^T (hs x T), scaled */
    KN_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &scale, k, hs,
                                            sT, q, hs, sT, &zero, att, T, sTT, batch));
    causal_softmax<<<(rows + 7) / 8, 256, 0, s>>>(att, rows, T);
    KN_LAUNCH_CHECK();
    /* y^T (hs x T) = V^T (hs x T) . att^T (T x T) */
    KN_CUBLAS_TRY(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &one, v, hs, sT,
                                            att, T, sTT, &zero, y, hs, sT, batch));
    permute_y<<<kn_blocks(BTC, 256), 256, 0, s>>>(out, y, B, T, NH, hs, 1);
    KN_LAUNCH_CHECK();
    return 0;
}

extern "C" int kn_attention_backward_cuda(kn_ctx *ctx, float *dqkv, float *ws, const float *dout,
                                          const float *qkv, const float *att, int B, int T, int C,
                                          int NH)
{
    int hs = C / NH, batch = B * NH, rows = B * NH * T;
    size_t BTC = (size_t)B * T * C;
    long long sT = (long long)T * hs, sTT = (long long)T * T;
    float *q = ws, *k = q + BTC, *v = k + BTC, *dy = v + BTC;
    float *dq = dy + BTC, *dk = dq + BTC, *dv = dk + BTC, *datt = dv + BTC;
    cudaStream_t s = kn_stream(ctx);
    cublasHandle_t h = kn_cublas(ctx);
    const float one = 1.0f, zero = 0.0f, scale = 1.0f / sqrtf((float)hs);
    split_heads<<<kn_blocks(BTC, 256), 256, 0, s>>>(q, k, v, qkv, B, T, NH, hs);
    KN_LAUNCH_CHECK();
    permute_y<<<kn_blocks(BTC, 256), 256, 0, s>>>((float *)dout, dy, B, T, NH, hs, 0);
    KN_LAUNCH_CHECK();
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
    merge_heads3<<<kn_blocks(BTC, 256), 256, 0, s>>>(dqkv, dq, dk, dv, B, T, NH, hs);
    KN_LAUNCH_CHECK();
    return 0;
}
