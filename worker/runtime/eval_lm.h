/*
 * rt eval: mean next-token cross-entropy of a language model over token windows read in order,
 * as llm.c's loader reads its shards: batch b (0-based) takes tokens [b*B*T, b*B*T + B*T + 1)
 * of the concatenated shards; the first B*T are the inputs (B rows of T), the same span shifted
 * by one the targets. For `stagecraft eval`.
 * Not here: training data order (data.h draws windows at random positions).
 */
#ifndef RT_EVAL_LM_H
#define RT_EVAL_LM_H

#include <stddef.h>

#include "common/sc_status.h"
#include "kernels/device.h"
#include "kernels/model.h"

typedef struct {
    const char *data_path; /* llm.c token shards (a glob), the `tokens` data kind */
    int batch;             /* B rows per batch */
    int batches;           /* N batches; 0: every full batch the data holds */
    kn_device device;
} rt_eval_cfg;

/* *loss: the mean over the N*B*T positions (each summed in double); *tokens = N*B*T. The model
 * is a token model with its own seq_len T. Errors: a model that does not take tokens, data
 * with fewer tokens than N batches need (naming both counts), a token beyond the vocabulary. */
sc_status rt_eval_lm(const kn_model *m, const rt_eval_cfg *cfg, double *loss, size_t *tokens,
                     sc_err *err);

#endif /* RT_EVAL_LM_H */
