/*
 * kn model internals (kernels/ only): the model record and the builder helpers shared by the
 * spec builders of model.c and the checkpoint builder of hf_model.c. Not part of the public API
 * (model.h is).
 */
#ifndef KN_MODEL_INTERNAL_H
#define KN_MODEL_INTERNAL_H

#include <stdbool.h>

#include "kernels/model.h"

typedef struct kn_hf kn_hf;

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
    kn_hf *hf; /* a checkpoint's model (hf_model.c): where its weights come from */
};

/* Each builder reserves its exact block count once its sizes are validated. */
sc_status kn_model_blocks_reserve(kn_model *m, int count, sc_err *err);
/* Appends a block named printf(fmt, a, b) (room reserved before). */
kn_block *kn_model_block_add(kn_model *m, kn_block_kind kind, const char *fmt, int a, int b);
/* Appends a tensor to the block's parameter range. */
void kn_model_tensor_add(kn_block *blk, const char *name, size_t count, bool decay, float std,
                         float cst);
/* The GPT chain (embed, L layers or 2L halves, head) with `positions` rows of position
 * embeddings (at least T). */
sc_status kn_model_gpt_blocks(kn_model *m, int V, int T, int L, int C, int NH, bool split,
                              int positions, sc_err *err);

#endif /* KN_MODEL_INTERNAL_H */
