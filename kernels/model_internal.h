/*
 * kn model internals (kernels/ only): the model record, the builder helpers (model.c) and the
 * GPT chain (model_builtin.c) that the model kinds build on, and how a kind plugs into the
 * record (kn_model_source) and into the spec (kn_model_build_fn, listed in model_spec.c).
 * Not part of the public API (model.h is).
 *
 * Calls run one way: model_spec.c (the registry) calls the kinds (model_builtin.c,
 * hf_model.c), which call the core (model.c); the core names no kind and reaches a kind's own
 * data only through its kn_model_source.
 */
#ifndef KN_MODEL_INTERNAL_H
#define KN_MODEL_INTERNAL_H

#include <stdbool.h>

#include "common/sc_json.h"
#include "common/sc_status.h"
#include "kernels/model.h"

/* What a kind adds to the record besides its blocks, set by its builder: where block weights
 * come from when they are not drawn from the seed (read_block; NULL: kn_model_init_block) and
 * how the kind's data (source_data) is freed with the model (release; NULL: nothing to free). */
typedef struct kn_model_source {
    sc_status (*read_block)(const kn_model *m, int i, float *params, sc_err *err);
    void (*release)(void *data);
} kn_model_source;

/* A kind's builder: fills m's blocks, sizes and name from the spec node (kind, seed, name and
 * cpu_kernels are read by kn_model_from_node). On error the caller destroys m. */
typedef sc_status (*kn_model_build_fn)(kn_model *m, const sc_jnode *spec, sc_err *err);

struct kn_model {
    kn_model_kind kind;
    char name[64];
    uint64_t seed;
    bool cpu_reference; /* "cpu_kernels": "reference" */
    int nblocks, cap;
    kn_block *blocks;
    int targets_per_sample;
    int classes;
    int layers, T, C; /* GPT, for the FLOP count */
    size_t params;
    bool tied; /* tie: one tensor held twice (kn_model_tie) */
    kn_model_tie tie;
    const kn_model_source *source; /* NULL: weights drawn from the seed, nothing to release */
    void *source_data;             /* the kind's own, passed to source->release */
};

/* Each builder reserves its exact block count once its sizes are validated. */
sc_status kn_model_blocks_reserve(kn_model *m, int count, sc_err *err);
/* Appends a block named printf(fmt, a, b) (room reserved before). */
kn_block *kn_model_block_add(kn_model *m, kn_block_kind kind, const char *fmt, int a, int b);
/* Appends a tensor to the block's parameter range. */
void kn_model_tensor_add(kn_block *blk, const char *name, size_t count, bool decay, float std,
                         float cst);

/* ---- model_builtin.c: the kinds built from the spec alone ---------------------------- */

/* The GPT chain (embed, L layers or 2L halves, head) with `positions` rows of position
 * embeddings (at least T). */
sc_status kn_model_gpt_blocks(kn_model *m, int V, int T, int L, int C, int NH, bool split,
                              int positions, sc_err *err);
/* Kinds "gpt", "mlp" and "vgg" (their keys: model.h). */
sc_status kn_model_build_gpt(kn_model *m, const sc_jnode *spec, sc_err *err);
sc_status kn_model_build_mlp(kn_model *m, const sc_jnode *spec, sc_err *err);
sc_status kn_model_build_vgg(kn_model *m, const sc_jnode *spec, sc_err *err);

#endif /* KN_MODEL_INTERNAL_H */
