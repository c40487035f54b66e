/*
 * kn hf model: config.json to blocks, block tensors to and from checkpoint tensor names.
 * One table per architecture maps each block tensor onto the checkpoint's name, shape and
 * layout; reading and exporting both walk it, so a model written is read back the same.
 */
#include "kernels/hf_model.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/sc_util.h"
#include "kernels/block_llama.h"
#include "kernels/model_internal.h"
#include "kernels/safetensors.h"

typedef enum { HF_GPT2 = 0, HF_LLAMA } hf_arch;

/* A checkpoint's model: the kind's data behind the record's source (model_internal.h). */
typedef struct kn_hf {
    char dir[PATH_MAX];
    hf_arch arch;
    int positions; /* rows of the position embedding (n_positions) */
    bool tied;
    json_t *config; /* the config as read, written back on export */
} kn_hf;

static void hf_release(void *data)
{
    kn_hf *hf = data;
    if (hf == NULL)
        return;
    json_decref(hf->config);
    free(hf);
}

static sc_status hf_read_block(const kn_model *m, int i, float *params, sc_err *err);

/* How a checkpoint's model plugs into the record (model_internal.h): its weights from the
 * folder, its kn_hf freed with the model. */
static const kn_model_source hf_source = {.read_block = hf_read_block, .release = hf_release};

static bool is_hf(const kn_model *m)
{
    return m->source == &hf_source;
}

/* The kn_hf of an "hf" model, or of export_view's shadow of a "gpt" one. */
static const kn_hf *hf_of(const kn_model *m)
{
    return m->source_data;
}

/* An optional integer that may also be null (transformers writes "n_inner": null). */
static sc_status opt_int_or_null(const sc_jnode *cfg, const char *key, int64_t min, int64_t max,
                                 int64_t def, int64_t *out, sc_err *err)
{
    sc_jnode v;
    if (sc_jnode_member(cfg, key, &v, NULL) == SC_OK && json_is_null(v.value)) {
        *out = def;
        return SC_OK;
    }
    return sc_json_opt_int(cfg, key, min, max, def, out, err);
}

/* The first of `keys` present (older and newer names of one setting), else keys[0]. */
static const char *key_present(const sc_jnode *cfg, const char *const *keys)
{
    for (const char *const *k = keys; *k != NULL; k++)
        if (sc_jnode_has(cfg, *k))
            return *k;
    return keys[0];
}

static sc_status refuse(const sc_jnode *cfg, const char *key, sc_err *err, const char *what)
{
    sc_jnode v;
    SC_CHECK(sc_jnode_member(cfg, key, &v, err));
    return sc_jnode_fail(&v, err, SC_ERR_UNSUPPORTED, "%s", what);
}

static const char *const gpt2_acts[] = {"gelu_new", "gelu_pytorch_tanh", NULL};

static sc_status build_gpt2(kn_model *m, kn_hf *hf, const sc_jnode *cfg, int64_t seq_len,
                            bool split, sc_err *err)
{
    static const char *const ctx_keys[] = {"n_positions", "n_ctx", NULL};
    static const char *const width_keys[] = {"n_embd", "hidden_size", NULL};
    static const char *const layer_keys[] = {"n_layer", "num_hidden_layers", NULL};
    static const char *const head_keys[] = {"n_head", "num_attention_heads", NULL};
    int64_t V, P, C, L, NH, inner;
    SC_CHECK(sc_json_get_int(cfg, "vocab_size", 1, 1 << 24, &V, err));
    SC_CHECK(sc_json_get_int(cfg, key_present(cfg, ctx_keys), 1, 1 << 16, &P, err));
    SC_CHECK(sc_json_get_int(cfg, key_present(cfg, width_keys), 1, 1 << 16, &C, err));
    SC_CHECK(sc_json_get_int(cfg, key_present(cfg, layer_keys), 1, 1000, &L, err));
    SC_CHECK(sc_json_get_int(cfg, key_present(cfg, head_keys), 1, 1 << 16, &NH, err));
    if (C % NH != 0)
        return refuse(cfg, key_present(cfg, head_keys), err,
                      "the width is not divisible by the number of heads");
    SC_CHECK(opt_int_or_null(cfg, "n_inner", 1, 1 << 20, 4 * C, &inner, err));
    if (inner != 4 * C)
        return refuse(cfg, "n_inner", err,
                      "only an MLP of 4 * n_embd is implemented (n_inner null or 4 * n_embd)");
    int act = 0;
    if (sc_jnode_has(cfg, "activation_function"))
        SC_CHECK(sc_json_get_enum(cfg, "activation_function", gpt2_acts, &act, err));
    double eps;
    SC_CHECK(sc_json_opt_number(cfg, "layer_norm_epsilon", 0, 1, 1e-5, &eps, err));
    if (fabs(eps - 1e-5) > 1e-12)
        return refuse(cfg, "layer_norm_epsilon", err,
                      "only layer_norm_epsilon 1e-05 is implemented (GPT-2's)");
    bool flag;
    SC_CHECK(sc_json_opt_bool(cfg, "scale_attn_by_inverse_layer_idx", false, &flag, err));
    if (flag)
        return refuse(cfg, "scale_attn_by_inverse_layer_idx", err,
                      "scale_attn_by_inverse_layer_idx is not implemented (valid: false)");
    SC_CHECK(sc_json_opt_bool(cfg, "scale_attn_weights", true, &flag, err));
    if (!flag)
        return refuse(cfg, "scale_attn_weights", err,
                      "unscaled attention is not implemented (valid: true)");
    SC_CHECK(sc_json_opt_bool(cfg, "add_cross_attention", false, &flag, err));
    if (flag)
        return refuse(cfg, "add_cross_attention", err,
                      "cross-attention is not implemented (valid: false)");
    SC_CHECK(sc_json_opt_bool(cfg, "tie_word_embeddings", true, &hf->tied, err));
    if (seq_len == 0)
        seq_len = P;
    if (seq_len > P)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "seq_len %lld exceeds the checkpoint's %lld positions (%s)",
                       (long long)seq_len, (long long)P, key_present(cfg, ctx_keys));
    hf->arch = HF_GPT2;
    hf->positions = (int)P;
    SC_CHECK(
        kn_model_gpt_blocks(m, (int)V, (int)seq_len, (int)L, (int)C, (int)NH, split, (int)P, err));
    if (hf->tied) {
        m->tied = true;
        m->tie.block[0] = 0;
        m->tie.tensor[0] = 0;             /* embed: wte */
        m->tie.block[1] = m->nblocks - 1; /* head: head.w */
        m->tie.tensor[1] = 2;
    }
    snprintf(m->name, sizeof m->name, "gpt2-L%d-C%d", (int)L, (int)C);
    return SC_OK;
}

static const char *const llama_acts[] = {"silu", NULL};

/* The rotary base: "rope_theta" (older transformers) or "rope_parameters": {"rope_theta",
 * "rope_type"} (newer); any scaling is refused naming its key. */
static sc_status llama_rope(const sc_jnode *cfg, double *theta, sc_err *err)
{
    sc_jnode v;
    if (sc_jnode_member(cfg, "rope_scaling", &v, NULL) == SC_OK && !json_is_null(v.value)) {
        json_t *type = json_object_get(v.value, "rope_type");
        if (type == NULL)
            type = json_object_get(v.value, "type");
        if (!json_is_string(type) || strcmp(json_string_value(type), "default") != 0)
            return sc_jnode_fail(&v, err, SC_ERR_UNSUPPORTED,
                                 "rope scaling is not implemented (valid: null or rope_type "
                                 "\"default\")");
    }
    SC_CHECK(sc_json_opt_number(cfg, "rope_theta", 1, 1e12, 10000.0, theta, err));
    sc_jnode rp;
    if (sc_jnode_member(cfg, "rope_parameters", &rp, NULL) == SC_OK && !json_is_null(rp.value)) {
        SC_CHECK(sc_jnode_expect_object(&rp, err));
        static const char *const types[] = {"default", NULL};
        int t;
        if (sc_jnode_has(&rp, "rope_type"))
            SC_CHECK(sc_json_get_enum(&rp, "rope_type", types, &t, err));
        SC_CHECK(sc_json_opt_number(&rp, "rope_theta", 1, 1e12, *theta, theta, err));
    }
    return SC_OK;
}

static sc_status build_llama(kn_model *m, kn_hf *hf, const sc_jnode *cfg, int64_t seq_len,
                             sc_err *err)
{
    int64_t V, C, FF, L, NH, NKV, P, hd;
    SC_CHECK(sc_json_get_int(cfg, "vocab_size", 1, 1 << 24, &V, err));
    SC_CHECK(sc_json_get_int(cfg, "hidden_size", 1, 1 << 16, &C, err));
    SC_CHECK(sc_json_get_int(cfg, "intermediate_size", 1, 1 << 20, &FF, err));
    SC_CHECK(sc_json_get_int(cfg, "num_hidden_layers", 1, 1000, &L, err));
    SC_CHECK(sc_json_get_int(cfg, "num_attention_heads", 1, 1 << 12, &NH, err));
    SC_CHECK(opt_int_or_null(cfg, "num_key_value_heads", 1, 1 << 12, NH, &NKV, err));
    SC_CHECK(sc_json_opt_int(cfg, "max_position_embeddings", 1, 1 << 24, 2048, &P, err));
    if (C % NH != 0 || (C / NH) % 2 != 0)
        return refuse(cfg, "num_attention_heads", err,
                      "hidden_size must be a multiple of num_attention_heads with an even head "
                      "size (rotary pairs)");
    SC_CHECK(opt_int_or_null(cfg, "head_dim", 1, 1 << 12, C / NH, &hd, err));
    if (hd != C / NH)
        return refuse(cfg, "head_dim", err,
                      "only head_dim = hidden_size / num_attention_heads is implemented");
    if (NH % NKV != 0)
        return refuse(cfg, "num_key_value_heads", err,
                      "num_attention_heads must be a multiple of num_key_value_heads");
    int act = 0;
    if (sc_jnode_has(cfg, "hidden_act"))
        SC_CHECK(sc_json_get_enum(cfg, "hidden_act", llama_acts, &act, err));
    bool flag;
    SC_CHECK(sc_json_opt_bool(cfg, "attention_bias", false, &flag, err));
    if (flag)
        return refuse(cfg, "attention_bias", err,
                      "attention biases are not implemented (valid: false)");
    SC_CHECK(sc_json_opt_bool(cfg, "mlp_bias", false, &flag, err));
    if (flag)
        return refuse(cfg, "mlp_bias", err, "MLP biases are not implemented (valid: false)");
    int64_t tp;
    SC_CHECK(sc_json_opt_int(cfg, "pretraining_tp", 1, 1 << 10, 1, &tp, err));
    if (tp != 1)
        return refuse(cfg, "pretraining_tp", err, "only pretraining_tp 1 is implemented");
    double eps, theta;
    SC_CHECK(sc_json_opt_number(cfg, "rms_norm_eps", 0, 1, 1e-6, &eps, err));
    SC_CHECK(llama_rope(cfg, &theta, err));
    SC_CHECK(sc_json_opt_bool(cfg, "tie_word_embeddings", false, &hf->tied, err));
    if (seq_len == 0)
        seq_len = P < 1 << 16 ? P : 1 << 16;
    if (seq_len > P)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "seq_len %lld exceeds the checkpoint's %lld positions "
                       "(max_position_embeddings)",
                       (long long)seq_len, (long long)P);
    hf->arch = HF_LLAMA;
    hf->positions = (int)P;
    int T = (int)seq_len;
    m->layers = (int)L;
    m->T = T;
    m->C = (int)C;
    m->targets_per_sample = T;
    m->classes = (int)V;
    SC_CHECK(kn_model_blocks_reserve(m, 2 + (int)L, err));
    size_t QD = (size_t)C, KD = (size_t)NKV * (size_t)(C / NH);
    for (int i = 0; i < 2 + L; i++) {
        kn_block_kind kind = i == 0       ? KN_BLOCK_TOK_EMBED
                             : i == L + 1 ? KN_BLOCK_LLAMA_HEAD
                                          : KN_BLOCK_LLAMA_LAYER;
        kn_block *b = kn_model_block_add(m, kind,
                                         kind == KN_BLOCK_TOK_EMBED    ? "embed"
                                         : kind == KN_BLOCK_LLAMA_HEAD ? "head"
                                                                       : "layer%d",
                                         i - 1, 0);
        b->V = (int)V;
        b->T = T;
        b->C = (int)C;
        b->NH = (int)NH;
        b->NKV = (int)NKV;
        b->FF = (int)FF;
        b->eps = (float)eps;
        b->rope_theta = (float)theta;
        b->in_floats = (size_t)T * C;
        b->out_floats = (size_t)T * C;
        /* the weights come from the checkpoint; these initial values are never used */
        if (kind == KN_BLOCK_TOK_EMBED) {
            b->in_floats = T;
            b->in_tokens = true;
            kn_model_tensor_add(b, "wte", (size_t)V * C, true, 0.02f, 0);
        } else if (kind == KN_BLOCK_LLAMA_HEAD) {
            b->out_floats = T;
            b->has_loss = true;
            kn_model_tensor_add(b, "norm.w", C, false, 0, 1);
            kn_model_tensor_add(b, "head.w", (size_t)V * C, true, 0.02f, 0);
            b->stash_floats = kn_llama_head_stash(T, (int)C, (int)V);
        } else {
            kn_model_tensor_add(b, "rms1.w", C, false, 0, 1);
            kn_model_tensor_add(b, "q.w", QD * C, true, 0.02f, 0);
            kn_model_tensor_add(b, "k.w", KD * C, true, 0.02f, 0);
            kn_model_tensor_add(b, "v.w", KD * C, true, 0.02f, 0);
            kn_model_tensor_add(b, "o.w", (size_t)C * QD, true, 0.02f, 0);
            kn_model_tensor_add(b, "rms2.w", C, false, 0, 1);
            kn_model_tensor_add(b, "gate.w", (size_t)FF * C, true, 0.02f, 0);
            kn_model_tensor_add(b, "up.w", (size_t)FF * C, true, 0.02f, 0);
            kn_model_tensor_add(b, "down.w", (size_t)C * FF, true, 0.02f, 0);
            b->stash_floats =
                kn_llama_layer_stash(T, (int)C, (int)NH, (int)NKV, (int)(C / NH), (int)FF);
        }
    }
    if (hf->tied) {
        m->tied = true;
        m->tie.block[0] = 0;
        m->tie.tensor[0] = 0;
        m->tie.block[1] = m->nblocks - 1;
        m->tie.tensor[1] = 1;
    }
    snprintf(m->name, sizeof m->name, "llama-L%d-C%d", (int)L, (int)C);
    return SC_OK;
}

static const char *const model_types[] = {"gpt2", "llama", NULL};

sc_status kn_hf_build(kn_model *m, const sc_jnode *spec, sc_err *err)
{
    const char *dir;
    int64_t seq_len;
    bool split;
    SC_CHECK(sc_json_get_string(spec, "path", &dir, err));
    SC_CHECK(sc_json_opt_int(spec, "seq_len", 1, 1 << 16, 0, &seq_len, err));
    SC_CHECK(sc_json_opt_bool(spec, "split_blocks", false, &split, err));
    kn_hf *hf = calloc(1, sizeof *hf);
    SC_ALLOC_CHECK(hf, err);
    m->source = &hf_source; /* hf freed with the model */
    m->source_data = hf;
    if (strlen(dir) >= sizeof hf->dir - 16) {
        sc_jnode p;
        SC_CHECK(sc_jnode_member(spec, "path", &p, err));
        return sc_jnode_fail(&p, err, SC_ERR_INVALID, "path too long");
    }
    sc_strlcpy(hf->dir, dir, sizeof hf->dir);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.json", dir);
    sc_jdoc *doc = NULL;
    SC_CHECK(sc_jdoc_load(&doc, path, 16 << 20, err));
    sc_jnode cfg = sc_jdoc_root(doc);
    int type = 0;
    sc_status rc = sc_jnode_expect_object(&cfg, err);
    if (rc == SC_OK)
        rc = sc_json_get_enum(&cfg, "model_type", model_types, &type, err);
    if (rc == SC_OK && type == HF_GPT2)
        rc = build_gpt2(m, hf, &cfg, seq_len, split, err);
    else if (rc == SC_OK)
        rc = build_llama(m, hf, &cfg, seq_len, err);
    if (rc == SC_OK) {
        hf->config = json_deep_copy(cfg.value);
        if (hf->config == NULL)
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading %s", path);
    }
    sc_jdoc_destroy(&doc);
    return rc;
}

/* --- tensor names --------------------------------------------------------------------------- */

/* Where a block tensor lives in the checkpoint: its name, its shape there and whether it is
 * stored transposed (Conv1D's [in, out] against the linear kernels' (out, in)). */
typedef struct {
    char name[128];
    int ndim;
    int64_t dims[2];
    bool transpose;
    bool skip_on_export; /* the second copy of a tied tensor */
} hf_slot;

typedef struct {
    const char *ours, *theirs;
    int in_mult, out_mult; /* shape [in_mult * C, out_mult * C]; out_mult 0 for a vector */
} gpt2_entry;

static const gpt2_entry gpt2_layer[] = {
    {"ln1.w", "ln_1.weight", 1, 0},
    {"ln1.b", "ln_1.bias", 1, 0},
    {"qkv.w", "attn.c_attn.weight", 1, 3},
    {"qkv.b", "attn.c_attn.bias", 3, 0},
    {"attproj.w", "attn.c_proj.weight", 1, 1},
    {"attproj.b", "attn.c_proj.bias", 1, 0},
    {"ln2.w", "ln_2.weight", 1, 0},
    {"ln2.b", "ln_2.bias", 1, 0},
    {"fc.w", "mlp.c_fc.weight", 1, 4},
    {"fc.b", "mlp.c_fc.bias", 4, 0},
    {"fcproj.w", "mlp.c_proj.weight", 4, 1},
    {"fcproj.b", "mlp.c_proj.bias", 1, 0},
};

static sc_status gpt2_slot(const kn_model *m, const char *prefix, int b, int t, hf_slot *s,
                           sc_err *err)
{
    const kn_block *blk = kn_model_block(m, b);
    const kn_tensor *tn = &blk->tensors[t];
    int64_t C = blk->C, V = blk->V;
    memset(s, 0, sizeof *s);
    if (blk->kind == KN_BLOCK_EMBED) {
        snprintf(s->name, sizeof s->name, "%s%s.weight", prefix, tn->name);
        s->ndim = 2;
        s->dims[0] = t == 0 ? V : hf_of(m)->positions;
        s->dims[1] = C;
        return SC_OK;
    }
    if (blk->kind == KN_BLOCK_GPT_HEAD) {
        s->ndim = t == 2 ? 2 : 1;
        s->dims[0] = t == 2 ? V : C;
        s->dims[1] = C;
        if (t < 2)
            snprintf(s->name, sizeof s->name, "%sln_f.%s", prefix, t == 0 ? "weight" : "bias");
        else if (hf_of(m)->tied)
            snprintf(s->name, sizeof s->name, "%swte.weight", prefix);
        else
            snprintf(s->name, sizeof s->name, "lm_head.weight");
        s->skip_on_export = t == 2 && hf_of(m)->tied;
        return SC_OK;
    }
    int layer;
    if (sscanf(blk->name, "layer%d", &layer) != 1)
        return SC_ERRF(err, SC_ERR_INTERNAL, "block %s: no layer index", blk->name);
    for (size_t k = 0; k < sizeof gpt2_layer / sizeof gpt2_layer[0]; k++) {
        const gpt2_entry *e = &gpt2_layer[k];
        if (strcmp(e->ours, tn->name) != 0)
            continue;
        snprintf(s->name, sizeof s->name, "%sh.%d.%s", prefix, layer, e->theirs);
        s->ndim = e->out_mult ? 2 : 1;
        s->dims[0] = e->in_mult * C;
        s->dims[1] = e->out_mult * C;
        s->transpose = e->out_mult != 0;
        return SC_OK;
    }
    return SC_ERRF(err, SC_ERR_INTERNAL, "block %s: tensor %s has no checkpoint name", blk->name,
                   tn->name);
}

typedef struct {
    const char *ours, *theirs;
} llama_entry;

static const llama_entry llama_layer[] = {
    {"rms1.w", "input_layernorm.weight"}, {"q.w", "self_attn.q_proj.weight"},
    {"k.w", "self_attn.k_proj.weight"},   {"v.w", "self_attn.v_proj.weight"},
    {"o.w", "self_attn.o_proj.weight"},   {"rms2.w", "post_attention_layernorm.weight"},
    {"gate.w", "mlp.gate_proj.weight"},   {"up.w", "mlp.up_proj.weight"},
    {"down.w", "mlp.down_proj.weight"},
};

/* Llama tensors are nn.Linear weights, (out, in) as the linear kernels hold them. */
static sc_status llama_slot(const kn_model *m, int b, int t, hf_slot *s, sc_err *err)
{
    const kn_block *blk = kn_model_block(m, b);
    const kn_tensor *tn = &blk->tensors[t];
    int64_t C = blk->C, V = blk->V, KD = (int64_t)blk->NKV * (C / blk->NH);
    memset(s, 0, sizeof *s);
    if (blk->kind == KN_BLOCK_TOK_EMBED || (blk->kind == KN_BLOCK_LLAMA_HEAD && t == 1)) {
        bool tied_copy = blk->kind == KN_BLOCK_LLAMA_HEAD && hf_of(m)->tied;
        snprintf(s->name, sizeof s->name, "%s",
                 blk->kind == KN_BLOCK_TOK_EMBED || tied_copy ? "model.embed_tokens.weight"
                                                              : "lm_head.weight");
        s->ndim = 2;
        s->dims[0] = V;
        s->dims[1] = C;
        s->skip_on_export = tied_copy;
        return SC_OK;
    }
    if (blk->kind == KN_BLOCK_LLAMA_HEAD) {
        snprintf(s->name, sizeof s->name, "model.norm.weight");
        s->ndim = 1;
        s->dims[0] = C;
        return SC_OK;
    }
    int layer;
    if (sscanf(blk->name, "layer%d", &layer) != 1)
        return SC_ERRF(err, SC_ERR_INTERNAL, "block %s: no layer index", blk->name);
    for (size_t k = 0; k < sizeof llama_layer / sizeof llama_layer[0]; k++) {
        if (strcmp(llama_layer[k].ours, tn->name) != 0)
            continue;
        snprintf(s->name, sizeof s->name, "model.layers.%d.%s", layer, llama_layer[k].theirs);
        s->ndim = tn->name[0] == 'r' ? 1 : 2; /* the norms are vectors */
        s->dims[0] = tn->name[0] == 'r' ? C : (int64_t)(tn->count / (size_t)C);
        s->dims[1] = C;
        if (strcmp(tn->name, "k.w") == 0 || strcmp(tn->name, "v.w") == 0)
            s->dims[0] = KD;
        if (strcmp(tn->name, "o.w") == 0 || strcmp(tn->name, "down.w") == 0) {
            s->dims[0] = C;
            s->dims[1] = (int64_t)(tn->count / (size_t)C);
        }
        return SC_OK;
    }
    return SC_ERRF(err, SC_ERR_INTERNAL, "block %s: tensor %s has no checkpoint name", blk->name,
                   tn->name);
}

static sc_status slot_of(const kn_model *m, const char *prefix, int b, int t, hf_slot *s,
                         sc_err *err)
{
    if (hf_of(m)->arch == HF_LLAMA)
        return llama_slot(m, b, t, s, err);
    return gpt2_slot(m, prefix, b, t, s, err);
}

/* GPT-2 checkpoints name the body "transformer.h.0..." (GPT2LMHeadModel) or "h.0..."
 * (GPT2Model, older conversions). */
static const char *gpt2_prefix(const kn_st *st)
{
    static const char *const probes[] = {"wte.weight", "ln_f.weight", "h.0.ln_1.weight"};
    for (size_t k = 0; k < 3; k++) {
        char n[64];
        snprintf(n, sizeof n, "transformer.%s", probes[k]);
        if (kn_st_has(st, n))
            return "transformer.";
    }
    return "";
}

static sc_status hf_read_block(const kn_model *m, int i, float *params, sc_err *err)
{
    kn_st *st = NULL;
    SC_CHECK(kn_st_open(&st, hf_of(m)->dir, err));
    const char *prefix = gpt2_prefix(st);
    const kn_block *blk = kn_model_block(m, i);
    sc_status rc = SC_OK;
    for (int t = 0; t < blk->ntensors && rc == SC_OK; t++) {
        hf_slot s;
        rc = slot_of(m, prefix, i, t, &s, err);
        if (rc == SC_OK && !kn_st_has(st, s.name))
            rc = SC_ERRF(err, SC_ERR_NOT_FOUND,
                         "%s: the checkpoint has no tensor \"%s\" (block %s, tensor %s)",
                         hf_of(m)->dir, s.name, blk->name, blk->tensors[t].name);
        if (rc == SC_OK)
            rc = kn_st_read(st, s.name, s.ndim, s.dims, s.transpose,
                            params + blk->tensors[t].offset, err);
    }
    kn_st_close(&st);
    return rc;
}

/* --- export --------------------------------------------------------------------------------- */

/* The config of a "gpt" model written as GPT-2's. */
static json_t *gpt_config(const kn_model *m)
{
    const kn_block *b = kn_model_block(m, 0);
    int L = 0;
    for (int i = 0; i < kn_model_block_count(m); i++) {
        kn_block_kind k = kn_model_block(m, i)->kind;
        L += k == KN_BLOCK_GPT_LAYER || k == KN_BLOCK_GPT_ATTN;
    }
    return json_pack("{s:s, s:[s], s:i, s:i, s:i, s:i, s:i, s:i, s:n, s:s, s:f, s:b, s:s}",
                     "model_type", "gpt2", "architectures", "GPT2LMHeadModel", "vocab_size", b->V,
                     "n_positions", b->T, "n_ctx", b->T, "n_embd", b->C, "n_layer", L, "n_head",
                     b->NH, "n_inner", "activation_function", "gelu_new", "layer_norm_epsilon",
                     1e-5, "tie_word_embeddings", 0, "torch_dtype", "float32");
}

static sc_status write_config(json_t *cfg, const char *dir, sc_err *err)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (json_dump_file(cfg, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
        return SC_ERRF(err, SC_ERR_IO, "%s: cannot write", path);
    return SC_OK;
}

/* The model as the export tables see it: an "hf" model itself, a "gpt" one through `shadow`, a
 * GPT-2 with an untied head and seq_len positions (`gpt` holds its record). NULL for other
 * kinds. */
static const kn_model *export_view(const kn_model *m, kn_model *shadow, kn_hf *gpt)
{
    if (is_hf(m))
        return m;
    if (kn_model_get_kind(m) != KN_MODEL_GPT)
        return NULL;
    memset(gpt, 0, sizeof *gpt);
    gpt->arch = HF_GPT2;
    gpt->positions = kn_model_block(m, 0)->T;
    *shadow = *m;
    shadow->source = NULL; /* never destroyed: nothing to release */
    shadow->source_data = gpt;
    return shadow;
}

static sc_status unsupported(const kn_model *m, sc_err *err)
{
    return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                   "model %s: only GPT-shaped models are exported (kind \"hf\" or \"gpt\")",
                   kn_model_name(m));
}

static sc_status make_dir(const char *dir, sc_err *err)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return SC_ERRF(err, SC_ERR_IO, "%s: %s", dir, strerror(errno));
    return SC_OK;
}

/* Blocks [first, last] into the writer; block_params[i - first] holds block i's. A tied copy is
 * left out (written with the embedding). *bytes (may be NULL) adds their float32 size. */
static sc_status add_blocks(const kn_model *mm, kn_st_writer *w, int first, int last,
                            const float *const *block_params, size_t *bytes, sc_err *err)
{
    for (int i = first; i <= last; i++) {
        const kn_block *blk = kn_model_block(mm, i);
        for (int t = 0; t < blk->ntensors; t++) {
            hf_slot s;
            SC_CHECK(slot_of(mm, "transformer.", i, t, &s, err));
            if (s.skip_on_export)
                continue;
            SC_CHECK(kn_st_writer_add(w, s.name, s.ndim, s.dims,
                                      block_params[i - first] + blk->tensors[t].offset, s.transpose,
                                      err));
            if (bytes != NULL)
                *bytes += blk->tensors[t].count * sizeof(float);
        }
    }
    return SC_OK;
}

/* The dtype a config names (transformers' "torch_dtype", or "dtype" in newer configs):
 * bfloat16 and float16 as such, anything else float32. An exported checkpoint keeps it. */
static kn_st_dtype config_dtype(json_t *cfg)
{
    const char *d = json_string_value(json_object_get(cfg, "torch_dtype"));
    if (d == NULL)
        d = json_string_value(json_object_get(cfg, "dtype"));
    if (d != NULL && strcmp(d, "bfloat16") == 0)
        return KN_ST_BF16;
    if (d != NULL && (strcmp(d, "float16") == 0 || strcmp(d, "half") == 0))
        return KN_ST_F16;
    return KN_ST_F32;
}

static json_t *export_config(const kn_model *m, const kn_model *mm)
{
    json_t *cfg = is_hf(m) ? json_deep_copy(hf_of(m)->config) : gpt_config(m);
    if (cfg != NULL && json_object_get(cfg, "architectures") == NULL)
        json_object_set_new(
            cfg, "architectures",
            json_pack("[s]", hf_of(mm)->arch == HF_LLAMA ? "LlamaForCausalLM" : "GPT2LMHeadModel"));
    return cfg;
}

sc_status kn_hf_export(const kn_model *m, const float *const *block_params, const char *dir,
                       sc_err *err)
{
    kn_model shadow;
    kn_hf gpt;
    const kn_model *mm = export_view(m, &shadow, &gpt);
    if (mm == NULL)
        return unsupported(m, err);
    SC_CHECK(make_dir(dir, err));
    json_t *cfg = export_config(m, mm);
    if (cfg == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory exporting to %s", dir);
    kn_st_writer *w = NULL;
    sc_status rc = kn_st_writer_new(&w, err);
    if (rc == SC_OK) {
        kn_st_writer_set_dtype(w, config_dtype(cfg));
        rc = add_blocks(mm, w, 0, kn_model_block_count(m) - 1, block_params, NULL, err);
    }
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (rc == SC_OK)
        rc = kn_st_writer_save(w, path, err);
    if (rc == SC_OK)
        rc = write_config(cfg, dir, err);
    kn_st_writer_destroy(&w);
    json_decref(cfg);
    return rc;
}

static void part_name(char *buf, size_t size, int part, int nparts)
{
    snprintf(buf, size, "model-%05d-of-%05d.safetensors", part + 1, nparts);
}

sc_status kn_hf_export_part(const kn_model *m, int part, int nparts, int first, int last,
                            const float *params, const char *dir, sc_err *err)
{
    kn_model shadow;
    kn_hf gpt;
    const kn_model *mm = export_view(m, &shadow, &gpt);
    if (mm == NULL)
        return unsupported(m, err);
    SC_CHECK(make_dir(dir, err));
    int n = last - first + 1;
    const float **bp = calloc((size_t)n, sizeof *bp);
    SC_ALLOC_CHECK(bp, err);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        bp[i] = params + off;
        off += kn_model_block(m, first + i)->params;
    }
    kn_st_writer *w = NULL;
    json_t *cfg = export_config(m, mm);
    sc_status rc = cfg != NULL ? kn_st_writer_new(&w, err)
                               : SC_ERRF(err, SC_ERR_NOMEM, "out of memory exporting to %s", dir);
    if (rc == SC_OK) {
        kn_st_writer_set_dtype(w, config_dtype(cfg));
        rc = add_blocks(mm, w, first, last, bp, NULL, err);
    }
    json_decref(cfg);
    char path[PATH_MAX + 64], name[64];
    part_name(name, sizeof name, part, nparts);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (rc == SC_OK)
        rc = kn_st_writer_save(w, path, err);
    kn_st_writer_destroy(&w);
    free(bp);
    return rc;
}

sc_status kn_hf_export_index(const kn_model *m, int nparts, const int *cuts, const char *dir,
                             sc_err *err)
{
    kn_model shadow;
    kn_hf gpt;
    const kn_model *mm = export_view(m, &shadow, &gpt);
    if (mm == NULL)
        return unsupported(m, err);
    SC_CHECK(make_dir(dir, err));
    json_t *map = json_object(), *cfg = export_config(m, mm);
    uint64_t total = 0;
    sc_status rc = map != NULL && cfg != NULL
                       ? SC_OK
                       : SC_ERRF(err, SC_ERR_NOMEM, "out of memory exporting to %s", dir);
    for (int k = 0; rc == SC_OK && k < nparts; k++) {
        char name[64];
        part_name(name, sizeof name, k, nparts);
        for (int i = cuts[k]; rc == SC_OK && i < cuts[k + 1]; i++) {
            const kn_block *blk = kn_model_block(mm, i);
            for (int t = 0; rc == SC_OK && t < blk->ntensors; t++) {
                hf_slot s;
                rc = slot_of(mm, "transformer.", i, t, &s, err);
                if (rc != SC_OK || s.skip_on_export)
                    continue;
                json_object_set_new(map, s.name, json_string(name));
                total += blk->tensors[t].count * kn_st_dtype_bytes(config_dtype(cfg));
            }
        }
    }
    if (rc == SC_OK) {
        json_t *index = json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)total,
                                  "weight_map", map);
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        if (index == NULL || json_dump_file(index, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
            rc = SC_ERRF(err, SC_ERR_IO, "%s: cannot write", path);
        json_decref(index);
    }
    if (rc == SC_OK)
        rc = write_config(cfg, dir, err);
    json_decref(map);
    json_decref(cfg);
    return rc;
}
