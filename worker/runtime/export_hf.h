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

#endif /* RT_EXPORT_HF_H */
