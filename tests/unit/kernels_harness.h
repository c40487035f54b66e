/* The harness the kernels model and stage tests share: three tiny models (a GPT, an MLP and a
 * VGG-style net), a seeded generator of batches for them, and a whole-model stage with its loss.
 * It asserts with cmocka, so only a test program links it. The generator's state is the only
 * state: a test program draws the same batches in the same order on every run. */
#ifndef SC_TESTS_UNIT_KERNELS_HARNESS_H
#define SC_TESTS_UNIT_KERNELS_HARNESS_H

#include <stdint.h>

#include "kernels/model.h"
#include "kernels/stage.h"

/* The host CPU as a kernels device. */
extern const kn_device CPU;

#define GPT_TINY(split)                                                                            \
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", \"vocab\": 11, "        \
    "\"seq_len\": 5, \"layers\": 2, \"width\": 8, \"heads\": 2, \"split_blocks\": " split "}"
extern const char mlp_tiny[];
extern const char vgg_tiny[];

/* The model of a spec text (asserts that it parses); the caller destroys it. */
kn_model *model_from(const char *text);

/* The next number of the harness's seeded generator (a fixed sequence from the program's
 * start). */
uint32_t urand(void);

/* a fixed batch for model m: inputs (tokens or floats) and targets */
typedef struct {
    int n;
    void *input;
    int32_t *targets;
} batch;

/* n samples of random inputs and targets for m (free_batch frees them). */
batch make_batch(const kn_model *m, int n);
void free_batch(batch *b);
/* A stage over every block of m, micro-batches of up to mb samples, optimizer opt. */
kn_stage *whole(const kn_model *m, int mb, kn_optim_cfg opt);
/* The forward of b in slot 0 of st, and its loss. */
float loss_of(kn_stage *st, const batch *b);

#endif
