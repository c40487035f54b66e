/*
 * Fuzz target: a job spec as SubmitJob carries it (coord_jobspec_parse), and the model document
 * an accepted spec yields, parsed as the coordinator later parses it (kn_model_parse).
 * Demands: no crash or undefined behaviour; a refusal has a message; an accepted job has a
 * batch, steps and a model that parses.
 */
#include "tests/fuzz/fuzz_common.h"

#include "coordinator/jobspec.h"
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
    coord_jobspec spec;
    memset(&spec, 0, sizeof spec);
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = coord_jobspec_parse("job.json", text, size, &spec, &err);
    fuzz_refusal(rc, &err, "the job spec");
    if (rc == SC_OK) {
        FUZZ_REQUIRE(spec.batch_size >= 1 && spec.steps >= 1 && spec.model_json != NULL,
                     "accepted a job with batch %u, steps %llu", spec.batch_size,
                     (unsigned long long)spec.steps);
        kn_model *m = NULL;
        sc_err_clear(&err);
        rc = kn_model_parse(&m, "job.json model", spec.model_json, strlen(spec.model_json), &err);
        fuzz_refusal(rc, &err, "the job's model");
        if (rc == SC_OK)
            FUZZ_REQUIRE(kn_model_block_count(m) >= 1, "a model of %d blocks",
                         kn_model_block_count(m));
        kn_model_destroy(&m);
    }
    coord_jobspec_clear(&spec);
    free(text);
    return 0;
}
