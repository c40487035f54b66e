/*
 * kn llama blocks: a decoder layer is
 *   x1 = x + o(attn(rope(q(rms1(x))), rope(k(rms1(x))), v(rms1(x))))
 *   out = x1 + down(silu(gate(rms2(x1))) * up(rms2(x1)))
 * and the head cross-entropy(head(rms(x))), all projections without bias, as transformers'
 * LlamaForCausalLM. The stash keeps what the backward reads, rotated q and k included. Each op
 * goes to the CPU reference or to the CUDA launcher of the context's device (OP below), as in
 * block.c.
 */
#include "kernels/block_llama.h"

#include <string.h>

#include "kernels/activation.h"
#include "kernels/block_dispatch.h"
#include "kernels/crossentropy.h"
#include "kernels/head16.h"
#include "kernels/linear.h"
#include "kernels/llama.h"
#include "kernels/products_cpu.h"

/* OP(what, cpu_call, gpu_call): the op on the context's device (block_dispatch.h; the block
 * is b) */
#define OP(what, cpu_call, gpu_call) KN_DISPATCH(b, what, cpu_call, gpu_call)
#define CHK(expr) SC_CHECK(expr)

static sc_status lin_fwd(kn_ctx *c, const kn_block *b, float *out, const float *x, const float *w,
                         int N, int IC, int OC, sc_err *err)
{
    OP("linear forward", CHK(kn_cpu_linear_forward(c, out, x, w, NULL, N, IC, OC, err)),
       kn_linear_forward_cuda(c, out, x, w, NULL, N, IC, OC));
    return SC_OK;
}

/* dx (overwritten) and dw (+=) */
static sc_status lin_bwd(kn_ctx *c, const kn_block *b, float *dx, float *dw, const float *dout,
                         const float *x, const float *w, int N, int IC, int OC, sc_err *err)
{
    OP("linear backward (input)", CHK(kn_cpu_linear_backward_input(c, dx, dout, w, N, IC, OC, err)),
       kn_linear_backward_input_cuda(c, dx, dout, w, N, IC, OC));
    OP("linear backward (weight)",
       CHK(kn_cpu_linear_backward_weight(c, dw, NULL, dout, x, N, IC, OC, err)),
       kn_linear_backward_weight_cuda(c, dw, NULL, dout, x, N, IC, OC));
    return SC_OK;
}

static void add_cpu(float *a, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] += x[i];
}

/* a += x */
static sc_status add_into(kn_ctx *c, const kn_block *b, float *a, const float *x, size_t n,
                          sc_err *err)
{
    OP("residual add", add_cpu(a, x, n), kn_residual_forward_cuda(c, a, a, x, n));
    return SC_OK;
}

static sc_status rms_fwd(kn_ctx *c, const kn_block *b, float *out, float *rstd, const float *x,
                         const float *w, int N, sc_err *err)
{
    OP("rmsnorm forward", kn_rmsnorm_forward_cpu(out, rstd, x, w, N, b->C, b->eps),
       kn_rmsnorm_forward_cuda(c, out, rstd, x, w, N, b->C, b->eps));
    return SC_OK;
}

static sc_status rms_bwd(kn_ctx *c, const kn_block *b, float *dx, float *dw, const float *dout,
                         const float *x, const float *w, const float *rstd, int N, sc_err *err)
{
    OP("rmsnorm backward", kn_rmsnorm_backward_cpu(dx, dw, dout, x, w, rstd, N, b->C),
       kn_rmsnorm_backward_cuda(c, dx, dw, dout, x, w, rstd, N, b->C));
    return SC_OK;
}

static sc_status rope(kn_ctx *c, const kn_block *b, float *x, int N, int H, int inverse,
                      sc_err *err)
{
    int D = b->C / b->NH;
    OP("rotary", kn_rope_cpu(x, N, b->T, H, D, b->rope_theta, inverse),
       kn_rope_cuda(c, x, N, b->T, H, D, b->rope_theta, inverse));
    return SC_OK;
}

/* --- layer ---------------------------------------------------------------------------------- */

typedef struct {
    float *xn1, *rstd1, *q, *k, *v, *att, *y, *x1, *xn2, *rstd2, *gate, *up, *h;
} lstash;

/* per-sample sizes in stash order */
static int layer_segments(int T, int C, int NH, int NKV, int D, int FF, size_t *s)
{
    size_t t = (size_t)T, qd = (size_t)NH * D, kd = (size_t)NKV * D;
    const size_t seg[] = {t * C, t, t * qd, t * kd, t * kd, (size_t)NH * t * t, t * qd, t * C,
                          t * C, t, t * FF, t * FF, t * FF};
    int n = (int)(sizeof seg / sizeof seg[0]);
    memcpy(s, seg, sizeof seg);
    return n;
}

size_t kn_llama_layer_stash(int T, int C, int NH, int NKV, int D, int FF)
{
    size_t s[16], sum = 0;
    int n = layer_segments(T, C, NH, NKV, D, FF, s);
    for (int i = 0; i < n; i++)
        sum += s[i];
    return sum;
}

size_t kn_llama_head_stash(int T, int C, int V)
{
    return (size_t)T * C + (size_t)T + (size_t)T * V;
}

static lstash lstash_at(float *p, const kn_block *b, int B)
{
    size_t s[16];
    int n = layer_segments(b->T, b->C, b->NH, b->NKV, b->C / b->NH, b->FF, s);
    float *ptr[13];
    for (int i = 0; i < n; i++) {
        ptr[i] = p;
        p += (size_t)B * s[i];
    }
    lstash l = {ptr[0], ptr[1], ptr[2], ptr[3],  ptr[4],  ptr[5], ptr[6],
                ptr[7], ptr[8], ptr[9], ptr[10], ptr[11], ptr[12]};
    return l;
}

typedef struct {
    const float *rms1, *q, *k, *v, *o, *rms2, *gate, *up, *down;
} lparams;

static lparams lparams_at(const float *p, const kn_block *b)
{
    const float *t[9];
    for (int i = 0; i < 9; i++)
        t[i] = p + b->tensors[i].offset;
    lparams l = {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]};
    return l;
}

static sc_status layer_forward(kn_ctx *c, const kn_block *b, const float *params, const float *x,
                               float *out, float *stash, int B, sc_err *err)
{
    int T = b->T, C = b->C, NH = b->NH, NKV = b->NKV, D = C / NH, FF = b->FF, N = B * T;
    int QD = NH * D, KD = NKV * D;
    size_t NC = (size_t)N * C, NF = (size_t)N * FF;
    lparams p = lparams_at(params, b);
    lstash s = lstash_at(stash, b, B);
    CHK(rms_fwd(c, b, s.xn1, s.rstd1, x, p.rms1, N, err));
    CHK(lin_fwd(c, b, s.q, s.xn1, p.q, N, C, QD, err));
    CHK(lin_fwd(c, b, s.k, s.xn1, p.k, N, C, KD, err));
    CHK(lin_fwd(c, b, s.v, s.xn1, p.v, N, C, KD, err));
    CHK(rope(c, b, s.q, N, NH, 0, err));
    CHK(rope(c, b, s.k, N, NKV, 0, err));
    OP("attention forward", kn_gqa_forward_cpu(s.y, s.att, s.q, s.k, s.v, B, T, NH, NKV, D),
       kn_gqa_forward_cuda(c, s.y, s.att, s.q, s.k, s.v, B, T, NH, NKV, D));
    CHK(lin_fwd(c, b, s.x1, s.y, p.o, N, QD, C, err));
    CHK(add_into(c, b, s.x1, x, NC, err));
    CHK(rms_fwd(c, b, s.xn2, s.rstd2, s.x1, p.rms2, N, err));
    CHK(lin_fwd(c, b, s.gate, s.xn2, p.gate, N, C, FF, err));
    CHK(lin_fwd(c, b, s.up, s.xn2, p.up, N, C, FF, err));
    OP("swiglu forward", kn_swiglu_forward_cpu(s.h, s.gate, s.up, NF),
       kn_swiglu_forward_cuda(c, s.h, s.gate, s.up, NF));
    CHK(lin_fwd(c, b, out, s.h, p.down, N, FF, C, err));
    return add_into(c, b, out, s.x1, NC, err);
}

static sc_status layer_backward(kn_ctx *c, const kn_block *b, const float *params, float *grads,
                                const float *x, float *stash, const float *dout, float *din,
                                float *ws, int B, sc_err *err)
{
    int T = b->T, C = b->C, NH = b->NH, NKV = b->NKV, D = C / NH, FF = b->FF, N = B * T;
    int QD = NH * D, KD = NKV * D;
    size_t NC = (size_t)N * C, NF = (size_t)N * FF;
    lparams p = lparams_at(params, b);
    lstash s = lstash_at(stash, b, B);
    float *g[9];
    for (int i = 0; i < 9; i++)
        g[i] = grads + b->tensors[i].offset;
    float *dx1 = ws, *dxn = dx1 + NC, *tmp = dxn + NC, *dh = tmp + NC;
    float *dgate = dh + NF, *dup = dgate + NF;
    float *dy = dup + NF, *dq = dy + (size_t)N * QD, *dk = dq + (size_t)N * QD;
    float *dv = dk + (size_t)N * KD, *scratch = dv + (size_t)N * KD;

    CHK(kn_ctx_copy(c, dx1, dout, NC * sizeof(float), err));
    CHK(lin_bwd(c, b, dh, g[8], dout, s.h, p.down, N, FF, C, err));
    OP("swiglu backward", kn_swiglu_backward_cpu(dgate, dup, dh, s.gate, s.up, NF),
       kn_swiglu_backward_cuda(c, dgate, dup, dh, s.gate, s.up, NF));
    CHK(lin_bwd(c, b, dxn, g[6], dgate, s.xn2, p.gate, N, C, FF, err));
    CHK(lin_bwd(c, b, tmp, g[7], dup, s.xn2, p.up, N, C, FF, err));
    CHK(add_into(c, b, dxn, tmp, NC, err));
    CHK(rms_bwd(c, b, tmp, g[5], dxn, s.x1, p.rms2, s.rstd2, N, err));
    CHK(add_into(c, b, dx1, tmp, NC, err));

    CHK(lin_bwd(c, b, dy, g[4], dx1, s.y, p.o, N, QD, C, err));
    OP("attention backward",
       kn_gqa_backward_cpu(dq, dk, dv, scratch, dy, s.q, s.k, s.v, s.att, B, T, NH, NKV, D),
       kn_gqa_backward_cuda(c, dq, dk, dv, scratch, dy, s.q, s.k, s.v, s.att, B, T, NH, NKV, D));
    CHK(rope(c, b, dq, N, NH, 1, err));
    CHK(rope(c, b, dk, N, NKV, 1, err));
    CHK(lin_bwd(c, b, dxn, g[1], dq, s.xn1, p.q, N, C, QD, err));
    CHK(lin_bwd(c, b, tmp, g[2], dk, s.xn1, p.k, N, C, KD, err));
    CHK(add_into(c, b, dxn, tmp, NC, err));
    CHK(lin_bwd(c, b, tmp, g[3], dv, s.xn1, p.v, N, C, KD, err));
    CHK(add_into(c, b, dxn, tmp, NC, err));
    CHK(rms_bwd(c, b, din, g[0], dxn, x, p.rms1, s.rstd1, N, err));
    return add_into(c, b, din, dx1, NC, err);
}

/* --- blocks --------------------------------------------------------------------------------- */

size_t kn_llama_ws_floats(const kn_block *b, int B, bool gpu)
{
    size_t N = (size_t)B * b->T, C = (size_t)b->C;
    switch (b->kind) {
    case KN_BLOCK_LLAMA_LAYER: {
        size_t D = C / (size_t)b->NH, QD = (size_t)b->NH * D, KD = (size_t)b->NKV * D;
        /* attention scratch: a row of T on the CPU, every (B, NH, T, T) score on a GPU */
        size_t scratch = gpu ? (size_t)B * b->NH * b->T * b->T : (size_t)b->T;
        return 3 * N * C + 3 * N * (size_t)b->FF + 2 * N * QD + 2 * N * KD + scratch;
    }
    case KN_BLOCK_LLAMA_HEAD:
        return N * (size_t)b->V + N * C;
    default:
        return 0;
    }
}

void kn_llama_stash_segments(const kn_block *b, size_t *per_sample, int *n)
{
    if (b->kind == KN_BLOCK_LLAMA_LAYER) {
        *n += layer_segments(b->T, b->C, b->NH, b->NKV, b->C / b->NH, b->FF, per_sample + *n);
    } else if (b->kind == KN_BLOCK_LLAMA_HEAD) { /* xn (T,C), rstd (T), probs (T,V) */
        per_sample[(*n)++] = (size_t)b->T * b->C;
        per_sample[(*n)++] = (size_t)b->T;
        per_sample[(*n)++] = (size_t)b->T * b->V;
    }
}

sc_status kn_llama_forward(kn_ctx *c, const kn_block *b, const float *params, const void *in,
                           float *out, float *stash, const int32_t *targets, float *ws, int B,
                           sc_err *err)
{
    (void)ws;
    int N = B * b->T, C = b->C, V = b->V;
    switch (b->kind) {
    case KN_BLOCK_TOK_EMBED: {
        const float *wte = params + b->tensors[0].offset;
        OP("embedding forward", kn_tok_embed_forward_cpu(out, in, wte, N, C),
           kn_tok_embed_forward_cuda(c, out, in, wte, N, C, V));
        return SC_OK;
    }
    case KN_BLOCK_LLAMA_LAYER:
        return layer_forward(c, b, params, in, out, stash, B, err);
    case KN_BLOCK_LLAMA_HEAD: {
        float *xn = stash, *rstd = xn + (size_t)N * C, *probs = rstd + N;
        CHK(rms_fwd(c, b, xn, rstd, in, params + b->tensors[0].offset, N, err));
        CHK(lin_fwd(c, b, probs, xn, params + b->tensors[1].offset, N, C, V, err));
        OP("cross-entropy forward",
           (c->cpu_fast ? kn_crossentropy_forward_fast
                        : kn_crossentropy_forward_cpu)(out, probs, probs, targets, N, V),
           kn_crossentropy_forward_cuda(c, out, probs, probs, targets, N, V));
        return SC_OK;
    }
    default:
        return SC_ERRF(err, SC_ERR_INTERNAL, "block %s: not a Llama block", b->name);
    }
}

sc_status kn_llama_backward(kn_ctx *c, const kn_block *b, const float *params, float *grads,
                            const void *in, const float *stash_c, const float *dout, float *din,
                            const int32_t *targets, float *ws, int B, float dloss, sc_err *err)
{
    int N = B * b->T, C = b->C, V = b->V;
    float *stash = (float *)stash_c; /* shares the pointer helpers with the forward */
    switch (b->kind) {
    case KN_BLOCK_TOK_EMBED: {
        float *dwte = grads + b->tensors[0].offset;
        OP("embedding backward", kn_tok_embed_backward_cpu(dwte, dout, in, N, C),
           kn_tok_embed_backward_cuda(c, dwte, dout, in, N, C, V));
        return SC_OK;
    }
    case KN_BLOCK_LLAMA_LAYER:
        return layer_backward(c, b, params, grads, in, stash, dout, din, ws, B, err);
    case KN_BLOCK_LLAMA_HEAD: {
        const float *xn = stash, *rstd = xn + (size_t)N * C, *probs = rstd + N;
        float *dlogits = ws, *dxn = ws + (size_t)N * V;
        size_t ow = b->tensors[1].offset;
        if (kn_head16_applies(c)) {
            CHK(kn_head16_backward(c, b->name, true, true, dxn, grads + ow, dlogits, V, probs,
                                   targets, dloss, xn, params + ow, N, C, V, err));
        } else {
            OP("cross-entropy backward",
               (c->cpu_fast ? kn_crossentropy_backward_fast
                            : kn_crossentropy_backward_cpu)(dlogits, probs, targets, dloss, N, V),
               kn_crossentropy_backward_cuda(c, dlogits, probs, targets, dloss, N, V));
            CHK(lin_bwd(c, b, dxn, grads + ow, dlogits, xn, params + ow, N, C, V, err));
        }
        return rms_bwd(c, b, din, grads + b->tensors[0].offset, dxn, in,
                       params + b->tensors[0].offset, rstd, N, err);
    }
    default:
        return SC_ERRF(err, SC_ERR_INTERNAL, "block %s: not a Llama block", b->name);
    }
}
