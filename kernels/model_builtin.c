/*
 * kn model, built-in kinds: the models a spec describes whole, "gpt" (embed, layers, head; the
 * chain also serves the GPT-2 checkpoints of hf_model.c), "mlp" and "vgg": their keys checked
 * with errors naming the key, and their blocks, tensors, shapes and stash sizes.
 *
 * Does not read the spec's common keys or pick the kind (model_spec.c); calls only the core's
 * builder helpers (model.c). Invariant: a builder reserves its exact block count before adding
 * blocks, and a block's stash_floats counts what its forward keeps for its backward.
 */
#include <math.h>
#include <stdio.h>

#include "kernels/model_internal.h"

/* --- GPT ---------------------------------------------------------------------------------- */

static size_t attn_stash(int T, int C, int NH)
{
    /* ln1 (T,C), mean/rstd (T), qkv (T,3C), att (NH,T,T), atty (T,C) */
    return (size_t)T * C + 2 * (size_t)T + 3 * (size_t)T * C + (size_t)NH * T * T + (size_t)T * C;
}

static size_t mlp_stash(int T, int C)
{
    /* ln2 (T,C), mean/rstd (T), fch (T,4C), fch_gelu (T,4C) */
    return (size_t)T * C + 2 * (size_t)T + 8 * (size_t)T * C;
}

static void gpt_attn_tensors(kn_block *b, int C, float std, float proj_std)
{
    kn_model_tensor_add(b, "ln1.w", C, false, 0, 1);
    kn_model_tensor_add(b, "ln1.b", C, false, 0, 0);
    kn_model_tensor_add(b, "qkv.w", 3 * (size_t)C * C, true, std, 0);
    kn_model_tensor_add(b, "qkv.b", 3 * (size_t)C, false, 0, 0);
    kn_model_tensor_add(b, "attproj.w", (size_t)C * C, true, proj_std, 0);
    kn_model_tensor_add(b, "attproj.b", C, false, 0, 0);
}

static void gpt_mlp_tensors(kn_block *b, int C, float std, float proj_std)
{
    kn_model_tensor_add(b, "ln2.w", C, false, 0, 1);
    kn_model_tensor_add(b, "ln2.b", C, false, 0, 0);
    kn_model_tensor_add(b, "fc.w", 4 * (size_t)C * C, true, std, 0);
    kn_model_tensor_add(b, "fc.b", 4 * (size_t)C, false, 0, 0);
    kn_model_tensor_add(b, "fcproj.w", 4 * (size_t)C * C, true, proj_std, 0);
    kn_model_tensor_add(b, "fcproj.b", C, false, 0, 0);
}

static void gpt_shape(kn_block *b, int V, int T, int C, int NH)
{
    b->V = V;
    b->T = T;
    b->C = C;
    b->NH = NH;
    b->in_floats = (size_t)T * C;
    b->out_floats = (size_t)T * C;
}

sc_status kn_model_build_gpt(kn_model *m, const sc_jnode *root, sc_err *err)
{
    int64_t V, T, L, C, NH;
    bool split;
    SC_CHECK(sc_json_get_int(root, "vocab", 1, 1 << 24, &V, err));
    SC_CHECK(sc_json_get_int(root, "seq_len", 1, 1 << 16, &T, err));
    SC_CHECK(sc_json_get_int(root, "layers", 1, 1000, &L, err));
    SC_CHECK(sc_json_get_int(root, "width", 1, 1 << 16, &C, err));
    SC_CHECK(sc_json_get_int(root, "heads", 1, 1 << 16, &NH, err));
    SC_CHECK(sc_json_opt_bool(root, "split_blocks", false, &split, err));
    if (C % NH != 0) {
        sc_jnode w;
        SC_CHECK(sc_jnode_member(root, "width", &w, err));
        return sc_jnode_fail(&w, err, SC_ERR_INVALID,
                             "width %lld is not divisible by heads %lld (each head needs "
                             "width/heads channels)",
                             (long long)C, (long long)NH);
    }
    if (NH > C) {
        sc_jnode h;
        SC_CHECK(sc_jnode_member(root, "heads", &h, err));
        return sc_jnode_fail(&h, err, SC_ERR_INVALID, "heads %lld exceeds width %lld",
                             (long long)NH, (long long)C);
    }
    SC_CHECK(kn_model_gpt_blocks(m, (int)V, (int)T, (int)L, (int)C, (int)NH, split, (int)T, err));
    snprintf(m->name, sizeof m->name, "gpt-L%d-C%d", (int)L, (int)C);
    return SC_OK;
}

sc_status kn_model_gpt_blocks(kn_model *m, int V, int T, int L, int C, int NH, bool split,
                              int positions, sc_err *err)
{
    m->layers = L;
    m->T = T;
    m->C = C;
    m->targets_per_sample = T;
    m->classes = V;
    float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)L);
    SC_CHECK(kn_model_blocks_reserve(m, 2 + L * (split ? 2 : 1), err));

    kn_block *b = kn_model_block_add(m, KN_BLOCK_EMBED, "embed", 0, 0);
    gpt_shape(b, V, T, C, NH);
    b->in_floats = T;
    b->in_tokens = true;
    kn_model_tensor_add(b, "wte", (size_t)V * C, true, std, 0);
    kn_model_tensor_add(b, "wpe", (size_t)positions * C, true, 0.01f, 0);
    for (int l = 0; l < L; l++) {
        if (split) {
            b = kn_model_block_add(m, KN_BLOCK_GPT_ATTN, "layer%d.attn", l, 0);
            gpt_shape(b, V, T, C, NH);
            gpt_attn_tensors(b, C, std, proj_std);
            b->stash_floats = attn_stash(T, C, NH);
            b = kn_model_block_add(m, KN_BLOCK_GPT_MLP, "layer%d.mlp", l, 0);
            gpt_shape(b, V, T, C, NH);
            gpt_mlp_tensors(b, C, std, proj_std);
            b->stash_floats = mlp_stash(T, C);
        } else {
            b = kn_model_block_add(m, KN_BLOCK_GPT_LAYER, "layer%d", l, 0);
            gpt_shape(b, V, T, C, NH);
            gpt_attn_tensors(b, C, std, proj_std);
            gpt_mlp_tensors(b, C, std, proj_std);
            b->stash_floats = attn_stash(T, C, NH) + (size_t)T * C + mlp_stash(T, C);
        }
    }
    b = kn_model_block_add(m, KN_BLOCK_GPT_HEAD, "head", 0, 0);
    gpt_shape(b, V, T, C, NH);
    b->out_floats = T;
    b->has_loss = true;
    kn_model_tensor_add(b, "lnf.w", C, false, 0, 1);
    kn_model_tensor_add(b, "lnf.b", C, false, 0, 0);
    kn_model_tensor_add(b, "head.w", (size_t)V * C, true, std, 0);
    /* lnf (T,C), mean/rstd (T), probs (T,V) */
    b->stash_floats = (size_t)T * C + 2 * (size_t)T + (size_t)T * V;
    return SC_OK;
}

/* --- classifiers --------------------------------------------------------------------------- */

static void fc_block(kn_model *m, bool last, int idx, int fin, int fout)
{
    kn_block *b = last ? kn_model_block_add(m, KN_BLOCK_FC_LOSS, "head", 0, 0)
                       : kn_model_block_add(m, KN_BLOCK_FC_RELU, "fc%d", idx, 0);
    b->fin = fin;
    b->fout = fout;
    b->in_floats = fin;
    /* He init for ReLU layers, 1/sqrt(fan_in) for the logits */
    kn_model_tensor_add(b, "w", (size_t)fin * fout, true,
                        last ? 1.0f / sqrtf((float)fin) : sqrtf(2.0f / (float)fin), 0);
    kn_model_tensor_add(b, "b", fout, false, 0, 0);
    if (last) {
        b->has_loss = true;
        b->out_floats = 1;
        b->stash_floats = fout; /* probs */
    } else {
        b->out_floats = fout;
    }
}

sc_status kn_model_build_mlp(kn_model *m, const sc_jnode *root, sc_err *err)
{
    sc_jnode sizes;
    SC_CHECK(sc_json_get_array(root, "sizes", 2, 1024, &sizes, err));
    size_t n = sc_jnode_size(&sizes);
    int64_t dims[1024];
    for (size_t i = 0; i < n; i++) {
        sc_jnode e = sc_jnode_element(&sizes, i);
        SC_CHECK(sc_jnode_int(&e, i + 1 == n ? 2 : 1, 1 << 24, &dims[i], err));
    }
    SC_CHECK(kn_model_blocks_reserve(m, (int)n - 1, err));
    for (size_t i = 0; i + 1 < n; i++)
        fc_block(m, i + 2 == n, (int)i, (int)dims[i], (int)dims[i + 1]);
    m->targets_per_sample = 1;
    m->classes = (int)dims[n - 1];
    snprintf(m->name, sizeof m->name, "mlp-%zu", n - 1);
    return SC_OK;
}

static const char *const vgg_configs[] = {"vgg11", "vgg13", "vgg16", "vgg19", NULL};
/* channel counts of the conv layers, 0 = 2x2 max pool; -1 ends the list */
static const int vgg_layers[4][24] = {
    {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0, -1},
    {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0, -1},
    {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0, -1},
    {64,  64,  0,   128, 128, 0,   256, 256, 256, 256, 0,
     512, 512, 512, 512, 0,   512, 512, 512, 512, 0,   -1},
};

sc_status kn_model_build_vgg(kn_model *m, const sc_jnode *root, sc_err *err)
{
    int cfg;
    sc_jnode image;
    int64_t chw[3], classes;
    SC_CHECK(sc_json_get_enum(root, "config", vgg_configs, &cfg, err));
    SC_CHECK(sc_json_get_array(root, "image", 3, 3, &image, err));
    for (size_t i = 0; i < 3; i++) {
        sc_jnode e = sc_jnode_element(&image, i);
        SC_CHECK(sc_jnode_int(&e, 1, 1 << 14, &chw[i], err));
        if (i > 0 && chw[i] % 32 != 0)
            return sc_jnode_fail(&e, err, SC_ERR_INVALID,
                                 "image %s %lld is not a multiple of 32 (VGG halves it 5 times)",
                                 i == 1 ? "height" : "width", (long long)chw[i]);
    }
    SC_CHECK(sc_json_get_int(root, "classes", 2, 1 << 20, &classes, err));
    /* optional: divide every width by this (small VGG-shaped nets for tests and demos) */
    int64_t div;
    SC_CHECK(sc_json_opt_int(root, "width_divisor", 1, 64, 1, &div, err));
    int c = (int)chw[0], h = (int)chw[1], w = (int)chw[2];
    int stack = 1, within = 1, count = 3; /* the classifier */
    for (const int *l = vgg_layers[cfg]; *l >= 0; l++)
        count++;
    SC_CHECK(kn_model_blocks_reserve(m, count, err));
    for (const int *l = vgg_layers[cfg]; *l >= 0; l++) {
        kn_block *b;
        if (*l == 0) {
            b = kn_model_block_add(m, KN_BLOCK_MAXPOOL, "pool%d", stack, 0);
            b->cin = b->cout = c;
            b->h = h;
            b->w = w;
            b->k = b->stride = 2;
            b->in_floats = (size_t)c * h * w;
            h /= 2;
            w /= 2;
            b->out_floats = (size_t)c * h * w;
            stack++;
            within = 1;
            continue;
        }
        b = kn_model_block_add(m, KN_BLOCK_CONV_RELU, "conv%d_%d", stack, within++);
        b->cin = c;
        b->h = h;
        b->w = w;
        b->cout = *l / (int)div > 0 ? *l / (int)div : 1;
        b->k = 3;
        b->stride = 1;
        b->pad = 1;
        b->in_floats = (size_t)c * h * w;
        b->out_floats = (size_t)b->cout * h * w;
        kn_model_tensor_add(b, "w", (size_t)b->cout * c * 9, true, sqrtf(2.0f / (float)(c * 9)), 0);
        kn_model_tensor_add(b, "b", b->cout, false, 0, 0);
        c = b->cout;
    }
    /* classifier: CIFAR-sized inputs get 512-wide hidden layers, ImageNet-sized the paper's 4096 */
    int flat = c * h * w;
    int hidden = ((chw[1] * chw[2] <= 64 * 64) ? 512 : 4096) / (int)div;
    fc_block(m, false, 1, flat, hidden);
    fc_block(m, false, 2, hidden, hidden);
    fc_block(m, true, 3, hidden, (int)classes);
    m->targets_per_sample = 1;
    m->classes = (int)classes;
    snprintf(m->name, sizeof m->name, "%s", vgg_configs[cfg]);
    return SC_OK;
}
