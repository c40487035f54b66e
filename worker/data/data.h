/*
 * rt data: the training samples of a job, as deterministic batches. The batch of (seed, step) is a
 * pure function of the data source, so every stage that needs part of it regenerates it itself:
 * the first stage takes the inputs, the last stage the targets, and labels never travel through
 * the middle stages.
 *
 * Sources: `text` (the bytes of any file are the tokens, vocabulary 256; a sample is a window of
 * seq_len + 1 bytes at a position drawn from (seed, step, sample)), `tokens` (llm.c shards: a
 * header of 256 int32 with magic 20240520, version 1, token count, then uint16 tokens; the path
 * may be a glob), `cifar10` (binary batches of 1 label byte + 3072 pixel bytes, CHW; the path is
 * a file or a folder of *.bin) and `synthetic` (generated, learnable: next token = affine map of
 * the current one; images whose mean depends on the label).
 * Not here: shuffling epochs, tokenizers, augmentation, prefetching threads.
 * Invariant: rt_data_batch() with the same arguments yields the same bytes, whatever else was
 * asked before, on any process.
 */
#ifndef RT_DATA_H
#define RT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

typedef enum {
    RT_DATA_TEXT = 0,
    RT_DATA_TOKENS,
    RT_DATA_CIFAR10,
    RT_DATA_SYNTHETIC,
} rt_data_kind;

/* What the model consumes, per sample. */
typedef struct {
    rt_data_kind kind;
    const char *path;       /* text / tokens / cifar10; ignored for synthetic */
    uint64_t seed;          /* sample order */
    bool inputs_are_tokens; /* int32 token ids (GPT) rather than floats */
    size_t input_elems;     /* per sample: seq_len tokens, or C*H*W floats */
    int targets_per_sample; /* seq_len for a GPT, 1 for a classifier */
    int classes;            /* vocabulary size or class count: targets lie in [0, classes) */
} rt_data_cfg;

typedef struct rt_data rt_data;

/* Parses "text", "tokens", "cifar10" or "synthetic". */
sc_status rt_data_kind_parse(const char *s, const char *what, rt_data_kind *out, sc_err *err);
const char *rt_data_kind_name(rt_data_kind kind);

/* Opens (and reads into memory) the source. A missing or malformed file, or a source that does
 * not fit the model (text for a classifier, a vocabulary under 256 for text, a token beyond the
 * vocabulary, images that are not 3x32x32), is an error naming the file and what is expected. */
sc_status rt_data_new(rt_data **out, const rt_data_cfg *cfg, sc_err *err);
void rt_data_destroy(rt_data **d);

/* Samples in the source (windows for token sources, records for cifar10; 0 for synthetic). */
size_t rt_data_size(const rt_data *d);

/* The whole token stream of a text or tokens source (the shards concatenated in the order
 * their glob sorts), for readers that walk it in order (evaluation); NULL and 0 for the other
 * sources. Borrowed: valid until rt_data_destroy. */
void rt_data_stream(const rt_data *d, const uint16_t **tokens, size_t *n);

/* Samples [first, first + n) of the batch of `step`: `inputs` (n * input_elems int32 or floats;
 * may be NULL) and `targets` (n * targets_per_sample int32; may be NULL). */
sc_status rt_data_batch(const rt_data *d, uint64_t step, int first, int n, void *inputs,
                        int32_t *targets, sc_err *err);

#endif /* RT_DATA_H */
