/*
 * kn block: each block kind written once against device-neutral op calls; DISPATCH sends a call
 * to the CPU reference or to the CUDA launcher of the context's device. Keeping one composition
 * for both devices is what makes the GPU model comparable to the CPU model op for op.
 */
#include "kernels/block.h"

#include <string.h>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/block_dispatch.h"
#include "kernels/block_llama.h"
#include "kernels/conv2d.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/head16.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/precision.h"
#include "kernels/products_cpu.h"

/* DISPATCH(what, cpu_call, gpu_call): the op on the context's device (block_dispatch.h; the
 * block is blk) */
#define DISPATCH(what, cpu_call, gpu_call) KN_DISPATCH(blk, what, cpu_call, gpu_call)

#define CHK(expr) SC_CHECK(expr)

/* The CPU call of an op with a fast path: that path unless the context keeps to the reference
 * kernels (device.h: kn_ctx_set_cpu_kernels). */
#define CPU_PICK(fast_call, reference_call)                                                        \
    do {                                                                                           \
        if (c->cpu_fast)                                                                           \
            fast_call;                                                                             \
        else                                                                                       \
            reference_call;                                                                        \
    } while (0)

/* --- op wrappers ---------------------------------------------------------------------------- */

static sc_status ln_fwd(kn_ctx *c, const kn_block *blk, float *out, float *mean, float *rstd,
                        const float *x, const float *w, const float *b, int N, int C, sc_err *err)
{
    DISPATCH("layernorm forward",
             CPU_PICK(kn_layernorm_forward_fast(out, mean, rstd, x, w, b, N, C),
                      kn_layernorm_forward_cpu(out, mean, rstd, x, w, b, N, C)),
             kn_layernorm_forward_cuda(c, out, mean, rstd, x, w, b, N, C));
    return SC_OK;
}

/* The input-gradient ops run in KN_BWD_FULL and KN_BWD_INPUT (B), the weight-gradient ops in
 * KN_BWD_FULL and KN_BWD_WEIGHT (W). */
static bool runs_input(kn_bwd_part part)
{
    return part != KN_BWD_WEIGHT;
}

static bool runs_weight(kn_bwd_part part)
{
    return part != KN_BWD_INPUT;
}

/* LayerNorm backward. Its parameter gradients run with the input gradient, in B as in the full
 * backward (one call, the same bits): they are reductions over what B has at hand, and deferring
 * them would keep dout and the LayerNorm's input until W, where nothing else reads them. W runs
 * nothing here. */
static sc_status ln_bwd(kn_ctx *c, const kn_block *blk, kn_bwd_part part, float *dx, float *dw,
                        float *db, const float *dout, const float *x, const float *w,
                        const float *mean, const float *rstd, int N, int C, sc_err *err)
{
    if (!runs_input(part))
        return SC_OK;
    DISPATCH("layernorm backward",
             CPU_PICK(kn_layernorm_backward_fast(dx, dw, db, dout, x, w, mean, rstd, N, C),
                      kn_layernorm_backward_cpu(dx, dw, db, dout, x, w, mean, rstd, N, C)),
             kn_layernorm_backward_cuda(c, dx, dw, db, dout, x, w, mean, rstd, N, C));
    return SC_OK;
}

static sc_status lin_fwd(kn_ctx *c, const kn_block *blk, float *out, const float *x, const float *w,
                         const float *b, int N, int IC, int OC, sc_err *err)
{
    DISPATCH("linear forward", CHK(kn_cpu_linear_forward(c, out, x, w, b, N, IC, OC, err)),
             kn_linear_forward_cuda(c, out, x, w, b, N, IC, OC));
    return SC_OK;
}

/* the backward products `part` asks for: input gradient (if dx) and weight gradient */
static sc_status lin_bwd(kn_ctx *c, const kn_block *blk, kn_bwd_part part, float *dx, float *dw,
                         float *db, const float *dout, const float *x, const float *w, int N,
                         int IC, int OC, sc_err *err)
{
    if (dx != NULL && part == KN_BWD_FULL && c->dev.kind == KN_DEV_CUDA) { /* one dout copy */
        DISPATCH("linear backward", (void)0,
                 kn_linear_backward_cuda(c, dx, dw, db, dout, x, w, N, IC, OC));
        return SC_OK;
    }
    if (dx != NULL && runs_input(part))
        DISPATCH("linear backward (input)",
                 CHK(kn_cpu_linear_backward_input(c, dx, dout, w, N, IC, OC, err)),
                 kn_linear_backward_input_cuda(c, dx, dout, w, N, IC, OC));
    if (!runs_weight(part))
        return SC_OK;
    DISPATCH("linear backward (weight)",
             CHK(kn_cpu_linear_backward_weight(c, dw, db, dout, x, N, IC, OC, err)),
             kn_linear_backward_weight_cuda(c, dw, db, dout, x, N, IC, OC));
    return SC_OK;
}

static sc_status residual_fwd(kn_ctx *c, const kn_block *blk, float *out, const float *a,
                              const float *b, size_t n, sc_err *err)
{
    DISPATCH(
        "residual forward",
        CPU_PICK(kn_residual_forward_fast(out, a, b, n), kn_residual_forward_cpu(out, a, b, n)),
        kn_residual_forward_cuda(c, out, a, b, n));
    return SC_OK;
}

static sc_status ce_fwd(kn_ctx *c, const kn_block *blk, float *losses, float *probs,
                        const int32_t *targets, int N, int V, sc_err *err)
{
    DISPATCH("cross-entropy forward",
             CPU_PICK(kn_crossentropy_forward_fast(losses, probs, probs, targets, N, V),
                      kn_crossentropy_forward_cpu(losses, probs, probs, targets, N, V)),
             kn_crossentropy_forward_cuda(c, losses, probs, probs, targets, N, V));
    return SC_OK;
}

static sc_status ce_bwd(kn_ctx *c, const kn_block *blk, float *dlogits, const float *probs,
                        const int32_t *targets, float dloss, int N, int V, sc_err *err)
{
    DISPATCH("cross-entropy backward",
             CPU_PICK(kn_crossentropy_backward_fast(dlogits, probs, targets, dloss, N, V),
                      kn_crossentropy_backward_cpu(dlogits, probs, targets, dloss, N, V)),
             kn_crossentropy_backward_cuda(c, dlogits, probs, targets, dloss, N, V));
    return SC_OK;
}

/* --- GPT halves --------------------------------------------------------------------------- */

typedef struct {
    float *ln, *mean, *rstd, *qkv, *att, *atty;
} attn_stash;

static attn_stash attn_stash_at(float *s, int B, int T, int C, int NH)
{
    size_t BT = (size_t)B * T, BTC = BT * C;
    attn_stash a;
    a.ln = s;
    a.mean = a.ln + BTC;
    a.rstd = a.mean + BT;
    a.qkv = a.rstd + BT;
    a.att = a.qkv + 3 * BTC;
    a.atty = a.att + BT * NH * T;
    return a;
}

typedef struct {
    float *ln, *mean, *rstd, *fch, *fchg;
} mlp_stash;

static mlp_stash mlp_stash_at(float *s, int B, int T, int C)
{
    size_t BT = (size_t)B * T, BTC = BT * C;
    mlp_stash m;
    m.ln = s;
    m.mean = m.ln + BTC;
    m.rstd = m.mean + BT;
    m.fch = m.rstd + BT;
    m.fchg = m.fch + 4 * BTC;
    return m;
}

static size_t attn_stash_floats(int B, int T, int C, int NH)
{
    size_t BT = (size_t)B * T;
    return 5 * BT * C + 2 * BT + BT * NH * T;
}

static size_t attn_ws(int B, int T, int C, int NH, bool gpu)
{
    return 5 * (size_t)B * T * C + kn_attention_workspace_floats(B, T, C, NH, gpu);
}

static size_t mlp_ws(int B, int T, int C)
{
    return 5 * (size_t)B * T * C;
}

/* p: the six attention tensors in order (ln1.w, ln1.b, qkv.w, qkv.b, attproj.w, attproj.b) */
static sc_status attn_forward(kn_ctx *c, const kn_block *blk, const float *p, const float *x,
                              float *out, float *stash, float *ws, int B, sc_err *err)
{
    int T = blk->T, C = blk->C, NH = blk->NH, BT = B * T;
    const float *ln1w = p, *ln1b = ln1w + C, *qkvw = ln1b + C, *qkvb = qkvw + 3 * (size_t)C * C;
    const float *projw = qkvb + 3 * C, *projb = projw + (size_t)C * C;
    attn_stash s = attn_stash_at(stash, B, T, C, NH);
    (void)ws; /* only the CUDA attention needs scratch in the forward */
    CHK(ln_fwd(c, blk, s.ln, s.mean, s.rstd, x, ln1w, ln1b, BT, C, err));
    CHK(lin_fwd(c, blk, s.qkv, s.ln, qkvw, qkvb, BT, C, 3 * C, err));
    DISPATCH("attention forward",
             CHK(kn_cpu_attention_forward(c, s.atty, s.att, s.qkv, B, T, C, NH, err)),
             kn_attention_forward_cuda(c, s.atty, s.att, ws, s.qkv, B, T, C, NH));
    CHK(lin_fwd(c, blk, out, s.atty, projw, projb, BT, C, C, err));
    return residual_fwd(c, blk, out, out, x, (size_t)BT * C, err);
}

/* Where the split attention keeps its output gradient for W (the projection's weight gradient
 * reads it): over the attention probabilities, which only B reads, when they are as large
 * (NH * T >= C), else in the W stash. */
static bool attn_dout_over_att(const kn_block *blk)
{
    return (size_t)blk->NH * blk->T >= (size_t)blk->C;
}

/* Split parts: what W reads is kept between B and W, all of it over stash parts only B reads:
 * dqkv over the stash's qkv, the block's output gradient over the probabilities
 * (attn_dout_over_att; else in `wst`). The LayerNorm's gradients run in B (ln_bwd). The full
 * backward keeps dqkv and dln in `ws`. */
static sc_status attn_backward(kn_ctx *c, const kn_block *blk, kn_bwd_part part, const float *p,
                               float *g, const float *x, float *stash, const float *dout,
                               float *din, float *wst, float *ws, int B, sc_err *err)
{
    int T = blk->T, C = blk->C, NH = blk->NH, BT = B * T;
    size_t BTC = (size_t)BT * C;
    const float *ln1w = p, *qkvw = p + 2 * C, *projw = qkvw + 3 * (size_t)C * C + 3 * C;
    float *dln1w = g, *dln1b = g + C, *dqkvw = g + 2 * C, *dqkvb = dqkvw + 3 * (size_t)C * C;
    float *dprojw = dqkvb + 3 * C, *dprojb = dprojw + (size_t)C * C;
    attn_stash s = attn_stash_at(stash, B, T, C, NH);
    float *datty = ws, *aws = ws + 5 * BTC, *dqkv = ws + BTC, *dln = dqkv + 3 * BTC;
    float *keep = attn_dout_over_att(blk) ? s.att : wst; /* W's copy of dout */
    if (part == KN_BWD_WEIGHT)
        dout = keep;
    /* the residual passes dout straight to the input; the branch adds to it below */
    if (runs_input(part))
        CHK(kn_ctx_copy(c, din, dout, BTC * sizeof(float), err));
    CHK(lin_bwd(c, blk, part, datty, dprojw, dprojb, dout, s.atty, projw, BT, C, C, err));
    if (runs_input(part))
        DISPATCH(
            "attention backward",
            CHK(kn_cpu_attention_backward(c, dqkv, aws, datty, s.qkv, s.att, B, T, C, NH, err)),
            kn_attention_backward_cuda(c, dqkv, aws, datty, s.qkv, s.att, B, T, C, NH));
    if (part == KN_BWD_INPUT) { /* W's copies, over what the backward no longer reads */
        CHK(kn_ctx_copy(c, s.qkv, dqkv, 3 * BTC * sizeof(float), err));
        CHK(kn_ctx_copy(c, keep, dout, BTC * sizeof(float), err));
    }
    if (part == KN_BWD_WEIGHT)
        dqkv = s.qkv;
    CHK(lin_bwd(c, blk, part, dln, dqkvw, dqkvb, dqkv, s.ln, qkvw, BT, C, 3 * C, err));
    return ln_bwd(c, blk, part, din, dln1w, dln1b, dln, x, ln1w, s.mean, s.rstd, BT, C, err);
}

/* p: the six MLP tensors (ln2.w, ln2.b, fc.w, fc.b, fcproj.w, fcproj.b) */
static sc_status mlp_forward(kn_ctx *c, const kn_block *blk, const float *p, const float *x,
                             float *out, float *stash, int B, sc_err *err)
{
    int T = blk->T, C = blk->C, BT = B * T;
    const float *lnw = p, *lnb = lnw + C, *fcw = lnb + C, *fcb = fcw + 4 * (size_t)C * C;
    const float *projw = fcb + 4 * C, *projb = projw + 4 * (size_t)C * C;
    mlp_stash s = mlp_stash_at(stash, B, T, C);
    size_t n4 = 4 * (size_t)BT * C;
    CHK(ln_fwd(c, blk, s.ln, s.mean, s.rstd, x, lnw, lnb, BT, C, err));
    CHK(lin_fwd(c, blk, s.fch, s.ln, fcw, fcb, BT, C, 4 * C, err));
    DISPATCH(
        "gelu forward",
        CPU_PICK(kn_gelu_forward_fast(s.fchg, s.fch, n4), kn_gelu_forward_cpu(s.fchg, s.fch, n4)),
        kn_gelu_forward_cuda(c, s.fchg, s.fch, n4));
    CHK(lin_fwd(c, blk, out, s.fchg, projw, projb, BT, 4 * C, C, err));
    return residual_fwd(c, blk, out, out, x, (size_t)BT * C, err);
}

/* Split parts: dfch, the gradient of the GELU's input, is kept in the stash's fch (which only
 * the GELU backward reads: it writes its result there, element by element), and the block's
 * output gradient at `keep` (the W stash; a GPT layer passes its stashed MLP input, which only
 * the LayerNorm's backward reads, in B). The LayerNorm's gradients run in B (ln_bwd). */
static sc_status mlp_backward(kn_ctx *c, const kn_block *blk, kn_bwd_part part, const float *p,
                              float *g, const float *x, float *stash, const float *dout, float *din,
                              float *keep, float *ws, int B, sc_err *err)
{
    int T = blk->T, C = blk->C, BT = B * T;
    size_t BTC = (size_t)BT * C;
    const float *lnw = p, *fcw = p + 2 * C, *projw = fcw + 4 * (size_t)C * C + 4 * C;
    float *dlnw = g, *dlnb = g + C, *dfcw = g + 2 * C, *dfcb = dfcw + 4 * (size_t)C * C;
    float *dprojw = dfcb + 4 * C, *dprojb = dprojw + 4 * (size_t)C * C;
    mlp_stash s = mlp_stash_at(stash, B, T, C);
    float *dfch = ws, *dln = ws + 4 * BTC;
    /* the GELU backward's result: in place in the full backward, over fch in the split one */
    float *dgelu = part == KN_BWD_FULL ? dfch : s.fch;
    if (part == KN_BWD_WEIGHT)
        dout = keep;
    if (runs_input(part))
        CHK(kn_ctx_copy(c, din, dout, BTC * sizeof(float), err));
    CHK(lin_bwd(c, blk, part, dfch, dprojw, dprojb, dout, s.fchg, projw, BT, 4 * C, C, err));
    if (runs_input(part))
        DISPATCH("gelu backward",
                 CPU_PICK(kn_gelu_backward_fast(dgelu, s.fch, dfch, 4 * BTC),
                          kn_gelu_backward_cpu(dgelu, s.fch, dfch, 4 * BTC)),
                 kn_gelu_backward_cuda(c, dgelu, s.fch, dfch, 4 * BTC));
    dfch = dgelu;
    CHK(lin_bwd(c, blk, part, dln, dfcw, dfcb, dfch, s.ln, fcw, BT, C, 4 * C, err));
    CHK(ln_bwd(c, blk, part, din, dlnw, dlnb, dln, x, lnw, s.mean, s.rstd, BT, C, err));
    /* after the LayerNorm's backward, which may read `keep` as its input x */
    if (part == KN_BWD_INPUT)
        CHK(kn_ctx_copy(c, keep, dout, BTC * sizeof(float), err));
    return SC_OK;
}

/* The segments attn_stash_at / mlp_stash_at lay out, per sample, in the same order. */
static void attn_segments(const kn_block *blk, size_t *seg, int *n)
{
    size_t T = (size_t)blk->T, C = (size_t)blk->C;
    const size_t s[] = {T * C, T, T, 3 * T * C, (size_t)blk->NH * T * T, T * C};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        seg[(*n)++] = s[i];
}

static void mlp_segments(const kn_block *blk, size_t *seg, int *n)
{
    size_t T = (size_t)blk->T, C = (size_t)blk->C;
    const size_t s[] = {T * C, T, T, 4 * T * C, 4 * T * C};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        seg[(*n)++] = s[i];
}

/* --- blocks --------------------------------------------------------------------------------- */

void kn_block_stash_segments(const kn_block *blk, size_t per_sample[KN_STASH_SEGMENTS_MAX],
                             int *n_segments)
{
    int n = 0;
    switch (blk->kind) {
    case KN_BLOCK_EMBED:
    case KN_BLOCK_FC_RELU:
    case KN_BLOCK_CONV_RELU:
    case KN_BLOCK_MAXPOOL:
        break; /* nothing stashed: the backward reads the input and the output */
    case KN_BLOCK_GPT_ATTN:
        attn_segments(blk, per_sample, &n);
        break;
    case KN_BLOCK_GPT_MLP:
        mlp_segments(blk, per_sample, &n);
        break;
    case KN_BLOCK_GPT_LAYER: /* attention stash, the half-way activation (T,C), MLP stash */
        attn_segments(blk, per_sample, &n);
        per_sample[n++] = (size_t)blk->T * blk->C;
        mlp_segments(blk, per_sample, &n);
        break;
    case KN_BLOCK_GPT_HEAD: /* lnf (T,C), mean, rstd (T), probs (T,V) */
        per_sample[n++] = (size_t)blk->T * blk->C;
        per_sample[n++] = (size_t)blk->T;
        per_sample[n++] = (size_t)blk->T;
        per_sample[n++] = (size_t)blk->T * blk->V;
        break;
    case KN_BLOCK_FC_LOSS: /* probs (fout) */
        per_sample[n++] = (size_t)blk->fout;
        break;
    case KN_BLOCK_TOK_EMBED:
        break;
    case KN_BLOCK_LLAMA_LAYER:
    case KN_BLOCK_LLAMA_HEAD:
        kn_llama_stash_segments(blk, per_sample, &n);
        break;
    }
    *n_segments = n;
}

/* Floats a row of the head's logits (or their gradient) takes in the workspace: V, or what the
 * padded 16-bit rows of head16.h take where V is under 63. */
static size_t head_logit_floats(int V)
{
    size_t half_row = ((size_t)kn_head16_ld(V) + 1) / 2;
    return (size_t)V > half_row ? (size_t)V : half_row;
}

size_t kn_block_ws_floats(const kn_block *blk, int B, bool gpu)
{
    size_t BT = (size_t)B * blk->T, a, m;
    switch (blk->kind) {
    case KN_BLOCK_EMBED:
    case KN_BLOCK_MAXPOOL:
        return 0;
    case KN_BLOCK_GPT_ATTN:
        return attn_ws(B, blk->T, blk->C, blk->NH, gpu);
    case KN_BLOCK_GPT_MLP:
        return mlp_ws(B, blk->T, blk->C);
    case KN_BLOCK_GPT_LAYER:
        a = attn_ws(B, blk->T, blk->C, blk->NH, gpu);
        m = mlp_ws(B, blk->T, blk->C);
        return BT * blk->C + (a > m ? a : m);
    case KN_BLOCK_GPT_HEAD:
        return BT * head_logit_floats(blk->V) + BT * blk->C;
    case KN_BLOCK_FC_RELU:
    case KN_BLOCK_FC_LOSS:
        return (size_t)B * blk->fout;
    case KN_BLOCK_CONV_RELU: {
        kn_conv2d_shape s = {blk->cin, blk->h, blk->w, blk->cout, blk->k, blk->stride, blk->pad};
        return kn_conv2d_col_floats(&s) + (size_t)B * blk->out_floats;
    }
    case KN_BLOCK_TOK_EMBED:
    case KN_BLOCK_LLAMA_LAYER:
    case KN_BLOCK_LLAMA_HEAD:
        return kn_llama_ws_floats(blk, B, gpu);
    }
    return 0;
}

/* 16-bit elements of linear.cu's scratch for the three products of a linear layer (N, IC, OC):
 * the largest pair of operands, or the three of a full backward, each but the last rounded up
 * to 128 values */
static size_t linear_half_elems(size_t N, size_t IC, size_t OC)
{
    size_t pairs[3][2] = {{OC * IC, N * IC}, {OC * IC, N * OC}, {N * IC, N * OC}}, most = 0;
    for (int i = 0; i < 3; i++) {
        size_t e = ((pairs[i][0] + 127) & ~(size_t)127) + pairs[i][1];
        most = e > most ? e : most;
    }
    /* a full backward converts all three at once (kn_linear_backward_cuda) */
    size_t all = ((OC * IC + 127) & ~(size_t)127) + ((N * OC + 127) & ~(size_t)127) + N * IC;
    return all > most ? all : most;
}

size_t kn_block_scratch_bytes(const kn_block *blk, int B, bool gpu, kn_precision prec)
{
    size_t io = blk->in_floats > blk->out_floats ? blk->in_floats : blk->out_floats;
    size_t bytes = (kn_block_ws_floats(blk, B, gpu) + 2 * io * (size_t)B) * sizeof(float);
    if (!gpu || !kn_precision_is_half(prec))
        return bytes;
    size_t N = (size_t)B * (size_t)blk->T, C = (size_t)blk->C, half = 0, e;
#define MOST(x) (e = (x), half = e > half ? e : half)
    switch (blk->kind) {
    case KN_BLOCK_GPT_ATTN:
        MOST(linear_half_elems(N, C, 3 * C));
        break;
    case KN_BLOCK_GPT_MLP:
        MOST(linear_half_elems(N, C, 4 * C));
        MOST(linear_half_elems(N, 4 * C, C));
        break;
    case KN_BLOCK_GPT_LAYER:
        MOST(linear_half_elems(N, C, 3 * C));
        MOST(linear_half_elems(N, C, 4 * C));
        MOST(linear_half_elems(N, 4 * C, C));
        break;
    case KN_BLOCK_GPT_HEAD: /* the logits' gradient is 16-bit already (head16.h): the products
                             * convert the weight (padded rows) or the input alone */
        MOST(((C * (size_t)kn_head16_ld(blk->V) + 127) & ~(size_t)127) + N * C);
        break;
    case KN_BLOCK_FC_RELU:
    case KN_BLOCK_FC_LOSS:
        MOST(linear_half_elems((size_t)B, (size_t)blk->fin, (size_t)blk->fout));
        break;
    default:
        break;
    }
#undef MOST
    return bytes + ((half * 2 + 255) & ~(size_t)255);
}

sc_status kn_block_forward(kn_ctx *c, const kn_block *blk, const float *params, const void *in,
                           float *out, float *stash, const int32_t *targets, float *ws, int B,
                           sc_err *err)
{
    const float *x = in;
    const float *p0 = params + blk->tensors[0].offset;
    switch (blk->kind) {
    case KN_BLOCK_EMBED: {
        const int32_t *tok = in;
        const float *wte = p0, *wpe = params + blk->tensors[1].offset;
        DISPATCH("embedding forward",
                 kn_embedding_forward_cpu(out, tok, wte, wpe, B, blk->T, blk->C),
                 kn_embedding_forward_cuda(c, out, tok, wte, wpe, B, blk->T, blk->C, blk->V));
        return SC_OK;
    }
    case KN_BLOCK_GPT_ATTN:
        return attn_forward(c, blk, p0, x, out, stash, ws, B, err);
    case KN_BLOCK_GPT_MLP:
        return mlp_forward(c, blk, p0, x, out, stash, B, err);
    case KN_BLOCK_GPT_LAYER: {
        float *mid = stash + attn_stash_floats(B, blk->T, blk->C, blk->NH);
        float *mstash = mid + (size_t)B * blk->T * blk->C;
        CHK(attn_forward(c, blk, p0, x, mid, stash, ws, B, err));
        return mlp_forward(c, blk, params + blk->tensors[6].offset, mid, out, mstash, B, err);
    }
    case KN_BLOCK_GPT_HEAD: {
        int T = blk->T, C = blk->C, BT = B * T;
        float *ln = stash, *mean = ln + (size_t)BT * C, *rstd = mean + BT, *probs = rstd + BT;
        const float *w = params + blk->tensors[2].offset;
        CHK(ln_fwd(c, blk, ln, mean, rstd, x, p0, p0 + C, BT, C, err));
        if (kn_head16_applies(c)) /* 16-bit logits in the workspace (head16.h) */
            return kn_head16_forward(c, blk->name, out, probs, ws, ln, w, targets, BT, C, blk->V,
                                     err);
        CHK(lin_fwd(c, blk, probs, ln, w, NULL, BT, C, blk->V, err));
        if (c->dev.kind != KN_DEV_CUDA && kn_precision_is_half(c->prec))
            kn_round_copy(c->prec, probs, probs, (size_t)BT * blk->V); /* as the GPU's logits */
        return ce_fwd(c, blk, out, probs, targets, BT, blk->V, err);
    }
    case KN_BLOCK_FC_RELU: {
        size_t n = (size_t)B * blk->fout;
        CHK(lin_fwd(c, blk, out, x, p0, p0 + (size_t)blk->fin * blk->fout, B, blk->fin, blk->fout,
                    err));
        DISPATCH("relu forward", kn_relu_forward_cpu(out, out, n),
                 kn_relu_forward_cuda(c, out, out, n));
        return SC_OK;
    }
    case KN_BLOCK_FC_LOSS:
        CHK(lin_fwd(c, blk, stash, x, p0, p0 + (size_t)blk->fin * blk->fout, B, blk->fin, blk->fout,
                    err));
        return ce_fwd(c, blk, out, stash, targets, B, blk->fout, err);
    case KN_BLOCK_CONV_RELU: {
        kn_conv2d_shape s = {blk->cin, blk->h, blk->w, blk->cout, blk->k, blk->stride, blk->pad};
        const float *w = p0, *b = params + blk->tensors[1].offset;
        size_t n = (size_t)B * blk->out_floats;
        DISPATCH("conv2d forward", CHK(kn_cpu_conv2d_forward(c, out, ws, x, w, b, B, &s, err)),
                 kn_conv2d_forward_cuda(c, out, ws, x, w, b, B, &s));
        DISPATCH("relu forward", kn_relu_forward_cpu(out, out, n),
                 kn_relu_forward_cuda(c, out, out, n));
        return SC_OK;
    }
    case KN_BLOCK_MAXPOOL:
        DISPATCH(
            "maxpool forward",
            kn_maxpool2d_forward_cpu(out, x, B, blk->cin, blk->h, blk->w, blk->k, blk->stride),
            kn_maxpool2d_forward_cuda(c, out, x, B, blk->cin, blk->h, blk->w, blk->k, blk->stride));
        return SC_OK;
    case KN_BLOCK_TOK_EMBED:
    case KN_BLOCK_LLAMA_LAYER:
    case KN_BLOCK_LLAMA_HEAD:
        return kn_llama_forward(c, blk, params, in, out, stash, targets, ws, B, err);
    }
    return SC_ERRF(err, SC_ERR_INTERNAL, "block %s: unknown kind %d", blk->name, (int)blk->kind);
}

size_t kn_block_wstash_floats(const kn_block *blk)
{
    size_t TC = (size_t)blk->T * blk->C;
    switch (blk->kind) {
    case KN_BLOCK_EMBED:    /* no input gradient: its whole backward runs in B */
    case KN_BLOCK_GPT_HEAD: /* W recomputes the logits' gradient from the stashed probs */
        return 0;
    case KN_BLOCK_GPT_ATTN:  /* dqkv over the stashed qkv, the output gradient over the probs */
    case KN_BLOCK_GPT_LAYER: /* the same; the MLP's output gradient over its stashed input */
        return attn_dout_over_att(blk) ? 0 : TC;
    case KN_BLOCK_GPT_MLP: /* the output gradient; dfch over the stashed fch */
        return TC;
    case KN_BLOCK_FC_RELU: /* the pre-activation gradients */
    case KN_BLOCK_CONV_RELU:
        return blk->out_floats;
    case KN_BLOCK_FC_LOSS:   /* W recomputes the logits' gradient */
    case KN_BLOCK_MAXPOOL:   /* no parameters */
    case KN_BLOCK_TOK_EMBED: /* no split: the whole backward in B */
    case KN_BLOCK_LLAMA_LAYER:
    case KN_BLOCK_LLAMA_HEAD:
        return 0;
    }
    return 0;
}

sc_status kn_block_backward(kn_ctx *c, const kn_block *blk, const float *params, float *grads,
                            const void *in, const float *stash, const float *out, const float *dout,
                            float *din, const int32_t *targets, float *ws, int B, float dloss,
                            sc_err *err)
{
    return kn_block_backward_part(c, blk, KN_BWD_FULL, params, grads, in, stash, out, dout, din,
                                  NULL, targets, ws, B, dloss, err);
}

sc_status kn_block_backward_part(kn_ctx *c, const kn_block *blk, kn_bwd_part part,
                                 const float *params, float *grads, const void *in,
                                 const float *stash_c, const float *out, const float *dout,
                                 float *din, float *wst, const int32_t *targets, float *ws, int B,
                                 float dloss, sc_err *err)
{
    const float *x = in;
    float *stash = (float *)stash_c; /* the halves share pointer helpers with the forward */
    const float *p0 = params + blk->tensors[0].offset;
    float *g0 = grads + blk->tensors[0].offset;
    bool split = part != KN_BWD_FULL;
    if (split && wst == NULL && kn_block_wstash_floats(blk) > 0)
        return SC_ERRF(err, SC_ERR_INTERNAL, "block %s: a split backward without its W stash",
                       blk->name);
    switch (blk->kind) {
    case KN_BLOCK_EMBED: {
        /* no input gradient: the whole backward runs in B (W would only keep dout longer) */
        const int32_t *tok = in;
        float *dwte = g0, *dwpe = grads + blk->tensors[1].offset;
        if (part == KN_BWD_WEIGHT)
            return SC_OK;
        DISPATCH("embedding backward",
                 kn_embedding_backward_cpu(dwte, dwpe, dout, tok, B, blk->T, blk->C),
                 kn_embedding_backward_cuda(c, dwte, dwpe, dout, tok, B, blk->T, blk->C, blk->V));
        return SC_OK;
    }
    case KN_BLOCK_GPT_ATTN:
        return attn_backward(c, blk, part, p0, g0, x, stash, dout, din, wst, ws, B, err);
    case KN_BLOCK_GPT_MLP:
        return mlp_backward(c, blk, part, p0, g0, x, stash, dout, din, wst, ws, B, err);
    case KN_BLOCK_GPT_LAYER: {
        size_t BTC = (size_t)B * blk->T * blk->C;
        float *mid = stash + attn_stash_floats(B, blk->T, blk->C, blk->NH);
        float *mstash = mid + BTC;
        float *dmid = ws;
        size_t o = blk->tensors[6].offset;
        CHK(mlp_backward(c, blk, part, params + o, grads + o, mid, mstash, dout, dmid, mid,
                         ws + BTC, B, err));
        return attn_backward(c, blk, part, p0, g0, x, stash, dmid, din, wst, ws + BTC, B, err);
    }
    case KN_BLOCK_GPT_HEAD: {
        int T = blk->T, C = blk->C, V = blk->V, BT = B * T;
        const float *ln = stash, *mean = ln + (size_t)BT * C, *rstd = mean + BT;
        const float *probs = rstd + BT;
        float *dlogits = ws, *dln = ws + (size_t)BT * head_logit_floats(V);
        size_t ow = blk->tensors[2].offset;
        /* W recomputes dlogits (elementwise, same bits) rather than keeping (B,T,V) floats */
        if (kn_head16_applies(c))
            CHK(kn_head16_backward(c, blk->name, runs_input(part), runs_weight(part), dln,
                                   grads + ow, dlogits, kn_head16_ld(V), probs, targets, dloss, ln,
                                   params + ow, BT, C, V, err));
        else {
            CHK(ce_bwd(c, blk, dlogits, probs, targets, dloss, BT, V, err));
            CHK(lin_bwd(c, blk, part, dln, grads + ow, NULL, dlogits, ln, params + ow, BT, C, V,
                        err));
        }
        if (runs_input(part))
            CHK(kn_ctx_zero(c, din, (size_t)BT * C * sizeof(float), err));
        return ln_bwd(c, blk, part, din, g0, g0 + C, dln, x, p0, mean, rstd, BT, C, err);
    }
    case KN_BLOCK_FC_RELU:
    case KN_BLOCK_FC_LOSS: {
        size_t n = (size_t)B * blk->fout, wn = (size_t)blk->fin * blk->fout;
        bool loss = blk->kind == KN_BLOCK_FC_LOSS;
        float *dpre = split && !loss ? wst : ws;
        if (loss) /* recomputed by W too */
            CHK(ce_bwd(c, blk, dpre, stash, targets, dloss, B, blk->fout, err));
        else if (runs_input(part))
            DISPATCH("relu backward", kn_relu_backward_cpu(dpre, out, dout, n),
                     kn_relu_backward_cuda(c, dpre, out, dout, n));
        return lin_bwd(c, blk, part, din, g0, g0 + wn, dpre, x, p0, B, blk->fin, blk->fout, err);
    }
    case KN_BLOCK_CONV_RELU: {
        kn_conv2d_shape s = {blk->cin, blk->h, blk->w, blk->cout, blk->k, blk->stride, blk->pad};
        size_t n = (size_t)B * blk->out_floats;
        float *dpre = split ? wst : ws, *col = ws + n, *dw = g0;
        float *db = grads + blk->tensors[1].offset;
        if (runs_input(part))
            DISPATCH("relu backward", kn_relu_backward_cpu(dpre, out, dout, n),
                     kn_relu_backward_cuda(c, dpre, out, dout, n));
        if (runs_weight(part))
            DISPATCH("conv2d backward (weight)",
                     CHK(kn_cpu_conv2d_backward_weight(c, dw, db, col, dpre, x, B, &s, err)),
                     kn_conv2d_backward_weight_cuda(c, dw, db, col, dpre, x, B, &s));
        if (din != NULL && runs_input(part))
            DISPATCH("conv2d backward (input)",
                     CHK(kn_cpu_conv2d_backward_input(c, din, col, dpre, p0, B, &s, err)),
                     kn_conv2d_backward_input_cuda(c, din, col, dpre, p0, B, &s));
        return SC_OK;
    }
    case KN_BLOCK_MAXPOOL:
        if (runs_input(part))
            DISPATCH("maxpool backward",
                     kn_maxpool2d_backward_cpu(din, dout, x, B, blk->cin, blk->h, blk->w, blk->k,
                                               blk->stride),
                     kn_maxpool2d_backward_cuda(c, din, dout, x, B, blk->cin, blk->h, blk->w,
                                                blk->k, blk->stride));
        return SC_OK;
    case KN_BLOCK_TOK_EMBED:
    case KN_BLOCK_LLAMA_LAYER:
    case KN_BLOCK_LLAMA_HEAD:
        /* no split of their own (block.h): the whole backward runs as B, W has nothing left */
        if (part == KN_BWD_WEIGHT)
            return SC_OK;
        return kn_llama_backward(c, blk, params, grads, in, stash, dout, din, targets, ws, B, dloss,
                                 err);
    }
    return SC_ERRF(err, SC_ERR_INTERNAL, "block %s: unknown kind %d", blk->name, (int)blk->kind);
}
