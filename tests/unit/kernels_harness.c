/* The kernels tests' harness (kernels_harness.h): tiny models, seeded batches, whole-model
 * stages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/kernels_harness.h"

const kn_device CPU = {KN_DEV_CPU, 0};

kn_model *model_from(const char *text)
{
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = kn_model_parse(&m, "model.json", text, strlen(text), &err);
    if (rc != SC_OK)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, SC_OK);
    return m;
}

const char mlp_tiny[] = "{\"format\": \"stagecraft-model\", \"version\": 1, "
                        "\"kind\": \"mlp\", \"sizes\": [6, 10, 8, 3]}";
const char vgg_tiny[] = "{\"format\": \"stagecraft-model\", \"version\": 1, "
                        "\"kind\": \"vgg\", \"config\": \"vgg11\", \"image\": [2, 32, 32], "
                        "\"classes\": 3, \"width_divisor\": 32}";

static uint64_t rng = 7;

uint32_t urand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

batch make_batch(const kn_model *m, int n)
{
    const kn_block *b0 = kn_model_block(m, 0);
    batch b = {n, malloc(b0->in_floats * n * 4),
               malloc((size_t)kn_model_targets_per_sample(m) * n * 4)};
    assert_non_null(b.input);
    for (size_t i = 0; i < b0->in_floats * n; i++) {
        if (b0->in_tokens)
            ((int32_t *)b.input)[i] = (int32_t)(urand() % (uint32_t)b0->V);
        else
            ((float *)b.input)[i] = (float)(urand() % 2001) / 1000.0f - 1.0f;
    }
    for (int i = 0; i < kn_model_targets_per_sample(m) * n; i++)
        b.targets[i] = (int32_t)(urand() % (uint32_t)kn_model_classes(m));
    return b;
}

void free_batch(batch *b)
{
    free(b->input);
    free(b->targets);
}

kn_stage *whole(const kn_model *m, int mb, kn_optim_cfg opt)
{
    kn_stage_cfg cfg = kn_stage_cfg_default(0, kn_model_block_count(m) - 1, CPU, mb);
    cfg.optim = opt;
    kn_stage *st = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_OK);
    return st;
}

float loss_of(kn_stage *st, const batch *b)
{
    sc_err err;
    sc_err_clear(&err);
    float loss;
    assert_int_equal(kn_stage_forward_host(st, 0, b->input, b->targets, b->n, &err), SC_OK);
    assert_int_equal(kn_stage_loss(st, 0, &loss, &err), SC_OK);
    return loss;
}
