/*
 * kn model: spec parsing, the block chain of each builder, parameter layout and deterministic
 * initialisation. Shapes only; no device memory and no arithmetic on activations here.
 */
#include "kernels/model.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "kernels/hf_model.h"
#include "kernels/model_internal.h"

/* Each builder reserves its exact block count once its sizes are validated. */
sc_status kn_model_blocks_reserve(kn_model *m, int count, sc_err *err)
{
    m->blocks = calloc((size_t)count, sizeof *m->blocks);
    if (m->blocks == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory building a model of %d blocks", count);
    m->cap = count;
    return SC_OK;
}

kn_block *kn_model_block_add(kn_model *m, kn_block_kind kind, const char *fmt, int a, int b)
{
    assert(m->nblocks < m->cap);
    kn_block *blk = &m->blocks[m->nblocks++];
    memset(blk, 0, sizeof *blk);
    blk->kind = kind;
    snprintf(blk->name, sizeof blk->name, fmt, a, b);
    return blk;
}

void kn_model_tensor_add(kn_block *blk, const char *name, size_t count, bool decay, float std,
                         float cst)
{
    assert(blk->ntensors < KN_BLOCK_TENSORS_MAX);
    kn_tensor *t = &blk->tensors[blk->ntensors++];
    sc_strlcpy(t->name, name, sizeof t->name);
    t->offset = blk->params;
    t->count = count;
    t->decay = decay;
    t->init_std = std;
    t->init_const = cst;
    blk->params += count;
}

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

static sc_status build_gpt(kn_model *m, const sc_jnode *root, sc_err *err)
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

static sc_status build_mlp(kn_model *m, const sc_jnode *root, sc_err *err)
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

static sc_status build_vgg(kn_model *m, const sc_jnode *root, sc_err *err)
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

/* --- spec ---------------------------------------------------------------------------------- */

static const char *const model_kinds[] = {"gpt", "vgg", "mlp", "hf", NULL};
static const char *const cpu_kernel_kinds[] = {"fast", "reference", NULL};

/* The keys of a model spec, per kind (in model_kinds' order): every kind's own, then those of
 * every kind (format and version when the spec is a file of its own). A key not listed is
 * refused: a typo must not pass for an absent optional key. */
#define MODEL_COMMON_KEYS "kind", "name", "seed", "cpu_kernels", "format", "version", NULL
static const char *const gpt_keys[] = {"vocab", "seq_len",      "layers",         "width",
                                       "heads", "split_blocks", MODEL_COMMON_KEYS};
static const char *const vgg_keys[] = {"config", "image", "classes", "width_divisor",
                                       MODEL_COMMON_KEYS};
static const char *const mlp_keys[] = {"sizes", MODEL_COMMON_KEYS};
static const char *const hf_keys[] = {"path", "seq_len", "split_blocks", MODEL_COMMON_KEYS};
static const char *const *const model_keys[] = {gpt_keys, vgg_keys, mlp_keys, hf_keys};

sc_status kn_model_from_node(kn_model **out, const sc_jnode *root, sc_err *err)
{
    *out = NULL;
    SC_CHECK(sc_jnode_expect_object(root, err));
    int kind;
    SC_CHECK(sc_json_get_enum(root, "kind", model_kinds, &kind, err));
    SC_CHECK(sc_jnode_known_keys(root, model_keys[kind], err));
    const char *name;
    int64_t seed;
    SC_CHECK(sc_json_opt_string(root, "name", NULL, &name, err));
    SC_CHECK(sc_json_opt_int(root, "seed", 0, INT64_MAX, 1, &seed, err));
    int cpu_kernels = 0; /* "fast" unless the spec says otherwise */
    sc_jnode ck;
    if (sc_jnode_member(root, "cpu_kernels", &ck, NULL) == SC_OK)
        SC_CHECK(sc_json_get_enum(root, "cpu_kernels", cpu_kernel_kinds, &cpu_kernels, err));
    kn_model *m = calloc(1, sizeof *m);
    SC_ALLOC_CHECK(m, err);
    m->kind = (kn_model_kind)kind;
    m->seed = (uint64_t)seed;
    m->cpu_reference = cpu_kernels == 1;
    sc_status rc;
    if (kind == KN_MODEL_GPT)
        rc = build_gpt(m, root, err);
    else if (kind == KN_MODEL_VGG)
        rc = build_vgg(m, root, err);
    else if (kind == KN_MODEL_HF)
        rc = kn_hf_build(m, root, err);
    else
        rc = build_mlp(m, root, err);
    if (rc != SC_OK) {
        kn_model_destroy(&m);
        return rc;
    }
    if (name != NULL)
        sc_strlcpy(m->name, name, sizeof m->name);
    for (int i = 0; i < m->nblocks; i++)
        m->params += m->blocks[i].params;
    *out = m;
    return SC_OK;
}

sc_status kn_model_parse(kn_model **out, const char *source, const char *text, size_t len,
                         sc_err *err)
{
    sc_jdoc *doc = NULL;
    *out = NULL;
    SC_CHECK(sc_jdoc_parse(&doc, source, text, len, err));
    sc_status rc = sc_jdoc_check_format(doc, "stagecraft-model", 1, NULL, err);
    if (rc == SC_OK) {
        sc_jnode root = sc_jdoc_root(doc);
        rc = kn_model_from_node(out, &root, err);
    }
    sc_jdoc_destroy(&doc);
    return rc;
}

sc_status kn_model_load(kn_model **out, const char *path, sc_err *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    SC_CHECK(sc_file_read(path, 1 << 20, &text, &len, err));
    sc_status rc = kn_model_parse(out, path, text, len, err);
    free(text);
    return rc;
}

void kn_model_destroy(kn_model **model)
{
    if (model == NULL || *model == NULL)
        return;
    kn_hf_destroy(&(*model)->hf);
    free((*model)->blocks);
    free(*model);
    *model = NULL;
}

kn_model_kind kn_model_get_kind(const kn_model *m)
{
    return m->kind;
}

const char *kn_model_name(const kn_model *m)
{
    return m->name;
}

int kn_model_block_count(const kn_model *m)
{
    return m->nblocks;
}

const kn_block *kn_model_block(const kn_model *m, int i)
{
    assert(i >= 0 && i < m->nblocks);
    return &m->blocks[i];
}

size_t kn_model_param_count(const kn_model *m)
{
    return m->params;
}

int kn_model_targets_per_sample(const kn_model *m)
{
    return m->targets_per_sample;
}

int kn_model_classes(const kn_model *m)
{
    return m->classes;
}

uint64_t kn_model_seed(const kn_model *m)
{
    return m->seed;
}

bool kn_model_cpu_reference(const kn_model *m)
{
    return m->cpu_reference;
}

void kn_model_set_cpu_reference(kn_model *m, bool reference)
{
    m->cpu_reference = reference;
}

void kn_model_set_seed(kn_model *m, uint64_t seed)
{
    m->seed = seed;
}

/* splitmix64: a tiny, well-mixed generator; its output depends on nothing but the state */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
    return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

void kn_model_init_block(const kn_model *m, int i, float *params)
{
    const kn_block *b = kn_model_block(m, i);
    uint64_t state = m->seed * 0xD1B54A32D192ED03ull + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    for (int t = 0; t < b->ntensors; t++) {
        const kn_tensor *tn = &b->tensors[t];
        float *p = params + tn->offset;
        if (tn->init_std == 0.0f) {
            for (size_t j = 0; j < tn->count; j++)
                p[j] = tn->init_const;
            continue;
        }
        /* Box-Muller in double, both outputs used */
        for (size_t j = 0; j < tn->count; j += 2) {
            double r = sqrt(-2.0 * log(uniform01(&state)));
            double a = 2.0 * M_PI * uniform01(&state);
            p[j] = (float)(tn->init_std * r * cos(a));
            if (j + 1 < tn->count)
                p[j + 1] = (float)(tn->init_std * r * sin(a));
        }
    }
}

sc_status kn_model_fill_block(const kn_model *m, int i, float *params, sc_err *err)
{
    if (m->hf != NULL)
        return kn_hf_read_block(m, i, params, err);
    kn_model_init_block(m, i, params);
    return SC_OK;
}

bool kn_model_get_tie(const kn_model *m, kn_model_tie *tie)
{
    if (m->tied && tie != NULL)
        *tie = m->tie;
    return m->tied;
}

double kn_model_train_flops_per_sample(const kn_model *m)
{
    if (m->kind == KN_MODEL_GPT || m->kind == KN_MODEL_HF)
        return (6.0 * (double)m->params + 6.0 * m->layers * m->C * m->T) * m->T;
    double macs = 0;
    for (int i = 0; i < m->nblocks; i++) {
        const kn_block *b = &m->blocks[i];
        if (b->kind == KN_BLOCK_FC_RELU || b->kind == KN_BLOCK_FC_LOSS)
            macs += (double)b->fin * b->fout;
        else if (b->kind == KN_BLOCK_CONV_RELU)
            macs += (double)b->cout * b->h * b->w * b->cin * b->k * b->k;
    }
    return 6.0 * macs;
}
