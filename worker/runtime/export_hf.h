/*
 * rt export: a trained model written as a Hugging Face checkpoint folder from its stages'
 * checkpoint files (stageS-stepN.ckpt, runner.h), for `stagecraft export`.
 *
 * Not here: the safetensors and config writing (kernels/hf_model.h), saving checkpoints
 * (runner_checkpoint.c).
 */
#ifndef RT_EXPORT_HF_H
#define RT_EXPORT_HF_H

#include <stdint.h>

#include "common/sc_status.h"
#include "kernels/model.h"

/* Reads the stage checkpoints in `ckpt_dir` of `step` (0: the newest step every stage 0..S-1
 * found there has saved; stages are counted from 0 until one has no file), checks that their
 * block ranges tile the model and that each holds its blocks' parameter count, and writes
 * `out_dir` with kn_hf_export. *step_used (may be NULL) is the step written. Errors name the
 * file or the gap: no checkpoint, a stage missing the step, a range or size that does not fit
 * the model, a corrupt file. */
sc_status rt_export_hf(const kn_model *m, const char *ckpt_dir, uint64_t step, const char *out_dir,
                       uint64_t *step_used, sc_err *err);

/* The job option "export": DIR at the end of training: this runner's stage writes its part of
 * the folder (kn_hf_export_part, part = stage, with the newest parameters), and stage 0 also the
 * index and config.json. `cuts` holds the n_stages + 1 first blocks of the plan's stages (the
 * last = the block count). Copy 0 of a replicated stage writes for all. */
struct rt_runner;
sc_status rt_export_hf_stage(struct rt_runner *r, int replica, int stage, int n_stages,
                             const int *cuts, const char *dir, sc_err *err);

#endif /* RT_EXPORT_HF_H */
