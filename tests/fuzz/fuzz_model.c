/*
 * Fuzz target: a model document ("format": "stagecraft-model"), as `stagecraft plan`, the
 * planner and every worker parse it (kn_model_parse).
 * Demands: no crash or undefined behaviour; a refusal has a message; an accepted model has
 * blocks, parameters, and blocks whose sizes chain (each block's input is its predecessor's
 * output).
 */
#include "tests/fuzz/fuzz_common.h"

#include "kernels/model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = kn_model_parse(&m, "model.json", text, size, &err);
    fuzz_refusal(rc, &err, "the model");
    if (rc == SC_OK) {
        int nb = kn_model_block_count(m);
        FUZZ_REQUIRE(nb >= 1 && kn_model_param_count(m) > 0, "a model of %d blocks, %zu params", nb,
                     kn_model_param_count(m));
        for (int i = 1; i < nb; i++) {
            const kn_block *a = kn_model_block(m, i - 1), *b = kn_model_block(m, i);
            FUZZ_REQUIRE(b->in_floats == a->out_floats && !b->in_tokens,
                         "block %d takes %zu values, block %d gives %zu", i, b->in_floats, i - 1,
                         a->out_floats);
        }
    }
    kn_model_destroy(&m);
    free(text);
    return 0;
}
