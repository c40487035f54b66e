/*
 * kn hf model: models read from, and written to, a Hugging Face checkpoint folder (what
 * transformers' save_pretrained writes: config.json plus model.safetensors or shards).
 *
 * The model spec is {"kind": "hf", "path": DIR} with optional "seq_len" (default: the config's
 * context length), "split_blocks", "name" and "cpu_kernels" as for "gpt". Supported:
 *   model_type "gpt2": the GPT blocks of model.h (embed, layerN, head) with transformers' GPT-2
 *   semantics: learned positions, pre-LayerNorm (eps 1e-5), GELU tanh approximation, biases;
 *   Conv1D weights (stored [in, out]) are transposed into the (out, in) layout of the linear
 *   kernels. With tie_word_embeddings (the default) the head's projection is the token
 *   embedding, held twice (kn_model_tie).
 *   model_type "llama": embed (token embedding), layerN (RMSNorm, rotary attention with grouped
 *   key/value heads, SwiGLU; block_llama.c) and head, no biases, tied or untied head; the
 *   rotary base from "rope_theta" or "rope_parameters"; rope scaling is refused.
 * Configs and names are read as older and newer transformers write them: "n_ctx" for
 * "n_positions", "torch_dtype" or "dtype" (ignored: every dtype is converted to float), tensor
 * names with or without the "transformer." prefix. What is not implemented (another activation,
 * another norm epsilon, a model_type) is refused naming the config key and what is valid.
 *
 * Not here: the safetensors format (safetensors.h), the arithmetic (block.c).
 */
#ifndef KN_HF_MODEL_H
#define KN_HF_MODEL_H

#include "common/sc_json.h"
#include "common/sc_status.h"
#include "kernels/model.h"

/* Builds `m`'s blocks from the spec node's DIR/config.json (kernels-internal: the builder of
 * kind "hf" in model_spec.c's registry). Reads config.json only, not the weights: the model's
 * source (model_internal.h) reads each block's tensors from the checkpoint when
 * kn_model_fill_block asks, and frees the kind's data with the model. */
sc_status kn_hf_build(kn_model *m, const sc_jnode *spec, sc_err *err);

/* Writes DIR/config.json and DIR/model.safetensors (F32) for a model of kind "hf" or "gpt"
 * (as GPT-2: a "gpt" model has an untied head and n_positions = seq_len), from every block's
 * parameters: block_params[i] holds block i's (host). The tied copy is written once, as
 * transformers stores it. DIR is created when missing. SC_ERR_UNSUPPORTED for other kinds. */
sc_status kn_hf_export(const kn_model *m, const float *const *block_params, const char *dir,
                       sc_err *err);

/* The same folder in parts, one per pipeline stage, as transformers' sharded checkpoints:
 * part `part` of `nparts` is DIR/model-0000P-of-0000N.safetensors holding blocks [first, last],
 * whose parameters lie in `params` one block after the other (a stage's flat parameters); the
 * index (DIR/model.safetensors.index.json, naming each tensor's part; cuts[k] is part k's first
 * block, cuts[nparts] the block count) and config.json come from kn_hf_export_index. Each part
 * is written by the process that holds it; nothing is shared but the folder. */
sc_status kn_hf_export_part(const kn_model *m, int part, int nparts, int first, int last,
                            const float *params, const char *dir, sc_err *err);
sc_status kn_hf_export_index(const kn_model *m, int nparts, const int *cuts, const char *dir,
                             sc_err *err);

#endif /* KN_HF_MODEL_H */
