/*
 * kn model: a network described by a stagecraft-model spec (FORMATS.md) and built as a chain of
 * blocks, the unit the planner cuts. GPT: embed, layerN (or layerN.attn + layerN.mlp with
 * split_blocks), head (final norm + vocabulary projection + loss). MLP: fcN (linear + ReLU) and
 * head (linear + loss). VGG: convX_Y (conv 3x3 + ReLU), poolX (2x2 max pool), fcN and head
 * (the classifier; flatten is a view).
 *
 * A model is a description only: shapes, parameter layout and deterministic initial values. It
 * owns no device memory; stages (stage.h) do. Invariant: block i's parameters are generated from
 * (seed, i) alone, so any split of the model into stages starts from the same weights, on the
 * CPU and the GPU alike.
 */
#ifndef KN_MODEL_H
#define KN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_json.h"
#include "common/sc_status.h"

/* KN_MODEL_HF: a model read from a Hugging Face checkpoint folder (hf_model.h) */
typedef enum { KN_MODEL_GPT = 0, KN_MODEL_VGG, KN_MODEL_MLP, KN_MODEL_HF } kn_model_kind;

typedef enum {
    KN_BLOCK_EMBED = 0, /* tokens (T) -> (T,C) */
    KN_BLOCK_GPT_ATTN,  /* (T,C) -> (T,C): x + proj(attn(ln1(x))) */
    KN_BLOCK_GPT_MLP,   /* (T,C) -> (T,C): x + proj(gelu(fc(ln2(x)))) */
    KN_BLOCK_GPT_LAYER, /* attn half then mlp half */
    KN_BLOCK_GPT_HEAD,  /* (T,C) -> losses (T): cross-entropy(lnf(x) @ wte_head^T) */
    KN_BLOCK_FC_RELU,   /* (in) -> (out): relu(x @ w^T + b) */
    KN_BLOCK_FC_LOSS,   /* (in) -> loss (1): cross-entropy(x @ w^T + b) */
    KN_BLOCK_CONV_RELU, /* (cin,h,w) -> (cout,h',w'): relu(conv(x)) */
    KN_BLOCK_MAXPOOL,   /* (c,h,w) -> (c,h/2,w/2) */
    /* Llama (block_llama.c) */
    KN_BLOCK_TOK_EMBED,   /* tokens (T) -> (T,C): wte[tokens], no positions */
    KN_BLOCK_LLAMA_LAYER, /* (T,C) -> (T,C): RMSNorm, rotary GQA attention, RMSNorm, SwiGLU */
    KN_BLOCK_LLAMA_HEAD,  /* (T,C) -> losses (T): cross-entropy(rms(x) @ head^T) */
} kn_block_kind;

#define KN_NAME_MAX 32
#define KN_BLOCK_TENSORS_MAX 16

/* One parameter tensor of a block: [offset, offset+count) in the block's parameter range. */
typedef struct {
    char name[KN_NAME_MAX];
    size_t offset;
    size_t count;
    bool decay;     /* weight decay applies (matrices), not to biases and norm gains */
    float init_std; /* normal(0, std); 0 means a constant */
    float init_const;
} kn_tensor;

typedef struct {
    char name[KN_NAME_MAX];
    kn_block_kind kind;
    /* GPT */
    int T, C, NH, V;
    /* Llama: key/value heads, MLP width, norm epsilon, rotary base */
    int NKV, FF;
    float eps, rope_theta;
    /* fully connected */
    int fin, fout;
    /* conv / pool: input (cin, h, w), output channels, kernel, stride, padding */
    int cin, h, w, cout, k, stride, pad;

    size_t in_floats;    /* input per sample, in 4-byte elements (tokens are int32) */
    bool in_tokens;      /* input is int32 token ids */
    size_t out_floats;   /* output per sample */
    size_t stash_floats; /* internal activations kept from forward to backward, per sample */
    bool has_loss;       /* consumes targets; output = per-position losses */
    size_t params;       /* parameter count */
    int ntensors;
    kn_tensor tensors[KN_BLOCK_TENSORS_MAX];
} kn_block;

typedef struct kn_model kn_model;

/* Loads and validates a spec file ("format": "stagecraft-model", version 1). Errors name the
 * file, line, JSON path and what would be valid (unknown kind, width not divisible by heads,
 * zero sizes, image not a multiple of 32, ...). */
sc_status kn_model_load(kn_model **out, const char *path, sc_err *err);
/* Same from text; `source` names it in errors. */
sc_status kn_model_parse(kn_model **out, const char *source, const char *text, size_t len,
                         sc_err *err);
/* From a model object inside another document (a job spec's "model"): format/version optional. */
sc_status kn_model_from_node(kn_model **out, const sc_jnode *node, sc_err *err);
void kn_model_destroy(kn_model **model);

kn_model_kind kn_model_get_kind(const kn_model *m);
/* A short name: the spec's "name" if given, else e.g. "gpt-L4-C128". */
const char *kn_model_name(const kn_model *m);
int kn_model_block_count(const kn_model *m);
const kn_block *kn_model_block(const kn_model *m, int i);
size_t kn_model_param_count(const kn_model *m);
/* Targets per sample: T for GPT, 1 for classifiers. Their range is [0, kn_model_classes). */
int kn_model_targets_per_sample(const kn_model *m);
int kn_model_classes(const kn_model *m);
/* Initialisation seed: the spec's optional "seed" (default 1). */
uint64_t kn_model_seed(const kn_model *m);
void kn_model_set_seed(kn_model *m, uint64_t seed);

/* The spec's optional "cpu_kernels": "fast" (default: matrix products on the BLAS, threaded)
 * or "reference" (the fixed-order kernels: the same bits on every build and for any split into
 * stages and micro-batches). Stages on the CPU run what it says (device.h). */
bool kn_model_cpu_reference(const kn_model *m);
void kn_model_set_cpu_reference(kn_model *m, bool reference);

/* Writes block i's initial parameters (block->params floats) into host memory. */
void kn_model_init_block(const kn_model *m, int i, float *params);
/* Block i's starting parameters: a checkpoint's tensors for a model read from one (only those
 * of block i are read; a missing tensor or a wrong shape is an error naming it), else
 * kn_model_init_block. */
sc_status kn_model_fill_block(const kn_model *m, int i, float *params, sc_err *err);

/* A tied tensor: tensor tensor[0] of block block[0] and tensor tensor[1] of block block[1]
 * (block[0] < block[1]) are one parameter held twice (GPT-2's token embedding and output
 * projection). Both copies start equal; whoever steps them adds the two gradients first and
 * gives each copy the sum, so they stay equal (kn_stage_step within a stage, the runtime across
 * stages). */
typedef struct {
    int block[2];
    int tensor[2];
} kn_model_tie;
/* True (and *tie set) when the model has one. */
bool kn_model_get_tie(const kn_model *m, kn_model_tie *tie);

/* FLOPs of one training step (forward + backward) per sample, for MFU figures: for a GPT,
 * T tokens of 6N + 6*L*C*T each; otherwise 6 per multiply-add of the linear and conv layers
 * (2 in the forward, 4 in the backward). */
double kn_model_train_flops_per_sample(const kn_model *m);

#endif /* KN_MODEL_H */
