/*
 * kn llama blocks: a decoder layer is
 *   x1 = x + o(attn(rope(q(rms1(x))), rope(k(rms1(x))), v(rms1(x))))
 *   out = x1 + down(silu(gate(rms2(x1))) * up(rms2(x1)))
 * and the head cross-entropy(head(rms(x))), all projections without bias, as transformers'
 * LlamaForCausalLM. The stash keeps what the backward reads, rotated q and k included.
 */
#include "kernels/block_llama.h"

#include <string.h>

#include "kernels/crossentropy.h"
#include "kernels/linear.h"
#include "kernels/llama.h"

static void lin_fwd(const kn_ctx *c, float *out, const float *x, const float *w, int N, int IC,
                    int OC)
{
    (c->cpu_fast ? kn_linear_forward_fast : kn_linear_forward_cpu)(out, x, w, NULL, N, IC, OC);
}

/* dx (overwritten; skipped when NULL) and dw (+=) */
static void lin_bwd(const kn_ctx *c, float *dx, float *dw, const float *dout, const float *x,
                    const float *w, int N, int IC, int OC)
{
    if (dx != NULL)
        (c->cpu_fast ? kn_linear_backward_input_fast : kn_linear_backward_input_cpu)(dx, dout, w, N,
                                                                                     IC, OC);
    (c->cpu_fast ? kn_linear_backward_weight_fast : kn_linear_backward_weight_cpu)(dw, NULL, dout,
                                                                                   x, N, IC, OC);
}

static void add_into(float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] += b[i];
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

static void layer_forward(const kn_ctx *c, const kn_block *b, const float *params, const float *x,
                          float *out, float *stash, int B)
{
    int T = b->T, C = b->C, NH = b->NH, NKV = b->NKV, D = C / NH, FF = b->FF, N = B * T;
    int QD = NH * D, KD = NKV * D;
    size_t NC = (size_t)N * C;
    lparams p = lparams_at(params, b);
    lstash s = lstash_at(stash, b, B);
    kn_rmsnorm_forward_cpu(s.xn1, s.rstd1, x, p.rms1, N, C, b->eps);
    lin_fwd(c, s.q, s.xn1, p.q, N, C, QD);
    lin_fwd(c, s.k, s.xn1, p.k, N, C, KD);
    lin_fwd(c, s.v, s.xn1, p.v, N, C, KD);
    kn_rope_cpu(s.q, N, T, NH, D, b->rope_theta, 0);
    kn_rope_cpu(s.k, N, T, NKV, D, b->rope_theta, 0);
    kn_gqa_forward_cpu(s.y, s.att, s.q, s.k, s.v, B, T, NH, NKV, D);
    lin_fwd(c, s.x1, s.y, p.o, N, QD, C);
    add_into(s.x1, x, NC);
    kn_rmsnorm_forward_cpu(s.xn2, s.rstd2, s.x1, p.rms2, N, C, b->eps);
    lin_fwd(c, s.gate, s.xn2, p.gate, N, C, FF);
    lin_fwd(c, s.up, s.xn2, p.up, N, C, FF);
    kn_swiglu_forward_cpu(s.h, s.gate, s.up, (size_t)N * FF);
    lin_fwd(c, out, s.h, p.down, N, FF, C);
    add_into(out, s.x1, NC);
}

static void layer_backward(const kn_ctx *c, const kn_block *b, const float *params, float *grads,
                           const float *x, float *stash, const float *dout, float *din, float *ws,
                           int B)
{
    int T = b->T, C = b->C, NH = b->NH, NKV = b->NKV, D = C / NH, FF = b->FF, N = B * T;
    int QD = NH * D, KD = NKV * D;
    size_t NC = (size_t)N * C;
    lparams p = lparams_at(params, b);
    lstash s = lstash_at(stash, b, B);
    float *g[9];
    for (int i = 0; i < 9; i++)
        g[i] = grads + b->tensors[i].offset;
    float *dx1 = ws, *dxn = dx1 + NC, *tmp = dxn + NC, *dh = tmp + NC;
    float *dgate = dh + (size_t)N * FF, *dup = dgate + (size_t)N * FF;
    float *dy = dup + (size_t)N * FF, *dq = dy + (size_t)N * QD, *dk = dq + (size_t)N * QD;
    float *dv = dk + (size_t)N * KD, *scratch = dv + (size_t)N * KD;

    memcpy(dx1, dout, NC * sizeof(float));
    lin_bwd(c, dh, g[8], dout, s.h, p.down, N, FF, C);
    kn_swiglu_backward_cpu(dgate, dup, dh, s.gate, s.up, (size_t)N * FF);
    lin_bwd(c, dxn, g[6], dgate, s.xn2, p.gate, N, C, FF);
    lin_bwd(c, tmp, g[7], dup, s.xn2, p.up, N, C, FF);
    add_into(dxn, tmp, NC);
    kn_rmsnorm_backward_cpu(tmp, g[5], dxn, s.x1, p.rms2, s.rstd2, N, C);
    add_into(dx1, tmp, NC);

    lin_bwd(c, dy, g[4], dx1, s.y, p.o, N, QD, C);
    kn_gqa_backward_cpu(dq, dk, dv, scratch, dy, s.q, s.k, s.v, s.att, B, T, NH, NKV, D);
    kn_rope_cpu(dq, N, T, NH, D, b->rope_theta, 1);
    kn_rope_cpu(dk, N, T, NKV, D, b->rope_theta, 1);
    lin_bwd(c, dxn, g[1], dq, s.xn1, p.q, N, C, QD);
    lin_bwd(c, tmp, g[2], dk, s.xn1, p.k, N, C, KD);
    add_into(dxn, tmp, NC);
    lin_bwd(c, tmp, g[3], dv, s.xn1, p.v, N, C, KD);
    add_into(dxn, tmp, NC);
    kn_rmsnorm_backward_cpu(din, g[0], dxn, x, p.rms1, s.rstd1, N, C);
    add_into(din, dx1, NC);
}

/* --- blocks --------------------------------------------------------------------------------- */

size_t kn_llama_ws_floats(const kn_block *b, int B)
{
    size_t N = (size_t)B * b->T, C = (size_t)b->C;
    switch (b->kind) {
    case KN_BLOCK_LLAMA_LAYER: {
        size_t D = C / (size_t)b->NH, QD = (size_t)b->NH * D, KD = (size_t)b->NKV * D;
        return 3 * N * C + 3 * N * (size_t)b->FF + 2 * N * QD + 2 * N * KD + (size_t)b->T;
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
    case KN_BLOCK_TOK_EMBED:
        kn_tok_embed_forward_cpu(out, in, params + b->tensors[0].offset, N, C);
        return SC_OK;
    case KN_BLOCK_LLAMA_LAYER:
        layer_forward(c, b, params, in, out, stash, B);
        return SC_OK;
    case KN_BLOCK_LLAMA_HEAD: {
        float *xn = stash, *rstd = xn + (size_t)N * C, *probs = rstd + N;
        kn_rmsnorm_forward_cpu(xn, rstd, in, params + b->tensors[0].offset, N, C, b->eps);
        lin_fwd(c, probs, xn, params + b->tensors[1].offset, N, C, V);
        (c->cpu_fast ? kn_crossentropy_forward_fast
                     : kn_crossentropy_forward_cpu)(out, probs, probs, targets, N, V);
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
    case KN_BLOCK_TOK_EMBED:
        kn_tok_embed_backward_cpu(grads + b->tensors[0].offset, dout, in, N, C);
        return SC_OK;
    case KN_BLOCK_LLAMA_LAYER:
        layer_backward(c, b, params, grads, in, stash, dout, din, ws, B);
        return SC_OK;
    case KN_BLOCK_LLAMA_HEAD: {
        const float *xn = stash, *rstd = xn + (size_t)N * C, *probs = rstd + N;
        float *dlogits = ws, *dxn = ws + (size_t)N * V;
        size_t ow = b->tensors[1].offset;
        (c->cpu_fast ? kn_crossentropy_backward_fast
                     : kn_crossentropy_backward_cpu)(dlogits, probs, targets, dloss, N, V);
        lin_bwd(c, dxn, grads + ow, dlogits, xn, params + ow, N, C, V);
        kn_rmsnorm_backward_cpu(din, grads + b->tensors[0].offset, dxn, in,
                                params + b->tensors[0].offset, rstd, N, C);
        return SC_OK;
    }
    default:
        return SC_ERRF(err, SC_ERR_INTERNAL, "block %s: not a Llama block", b->name);
    }
}
