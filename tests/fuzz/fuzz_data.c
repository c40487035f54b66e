/*
 * Fuzz target: the files a job's data source reads (rt_data_new): the first input byte picks the
 * kind (tokens: an llm.c shard; cifar10: binary batches; text: any bytes) and, for tokens, the
 * vocabulary (512 or 65536); the rest is written to a file that the loader opens. An accepted
 * source serves two batches of two samples.
 * Demands: no crash or undefined behaviour; a refusal has a message; every target served lies
 * in [0, vocabulary or classes), every token input too.
 */
#include <unistd.h>

#include "tests/fuzz/fuzz_common.h"

#include "worker/data/data.h"

#define SEQ 8
#define CIFAR_PIXELS 3072

static char g_dir[64];
static char g_path[128];

static void remove_dir(void)
{
    unlink(g_path);
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    snprintf(g_dir, sizeof g_dir, "%s", "/tmp/sc-fuzz-data-XXXXXX");
    FUZZ_REQUIRE(mkdtemp(g_dir) != NULL, "mkdtemp");
    snprintf(g_path, sizeof g_path, "%s/source.bin", g_dir);
    atexit(remove_dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    FILE *f = fopen(g_path, "wb");
    FUZZ_REQUIRE(f != NULL, "cannot write %s", g_path);
    FUZZ_REQUIRE(fwrite(data + 1, 1, size - 1, f) == size - 1, "short write");
    fclose(f);

    static const rt_data_kind kinds[] = {RT_DATA_TOKENS, RT_DATA_CIFAR10, RT_DATA_TEXT};
    rt_data_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.kind = kinds[data[0] % 3];
    cfg.path = g_path;
    cfg.seed = data[0];
    if (cfg.kind == RT_DATA_CIFAR10) {
        cfg.input_elems = CIFAR_PIXELS;
        cfg.targets_per_sample = 1;
        cfg.classes = 10;
    } else {
        cfg.inputs_are_tokens = true;
        cfg.input_elems = SEQ;
        cfg.targets_per_sample = SEQ;
        cfg.classes = cfg.kind == RT_DATA_TEXT ? 256 : (data[0] & 4) ? 65536 : 512;
    }
    rt_data *d = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = rt_data_new(&d, &cfg, &err);
    fuzz_refusal(rc, &err, "the data source");
    if (rc == SC_OK) {
        size_t in_elems = 2 * cfg.input_elems;
        void *inputs = malloc(in_elems * 4);
        int32_t *targets = malloc(2 * (size_t)cfg.targets_per_sample * sizeof *targets);
        FUZZ_REQUIRE(inputs != NULL && targets != NULL, "out of memory");
        for (uint64_t step = 0; step < 2; step++) {
            sc_err_clear(&err);
            rc = rt_data_batch(d, step * 1000003u, 0, 2, inputs, targets, &err);
            FUZZ_REQUIRE(rc == SC_OK, "batch of step %llu of an accepted source: %s",
                         (unsigned long long)step, err.msg);
            for (int i = 0; i < 2 * cfg.targets_per_sample; i++)
                FUZZ_REQUIRE(targets[i] >= 0 && targets[i] < cfg.classes, "target %d of %d classes",
                             (int)targets[i], cfg.classes);
            if (cfg.inputs_are_tokens)
                for (size_t i = 0; i < in_elems; i++) {
                    int32_t t = ((const int32_t *)inputs)[i];
                    FUZZ_REQUIRE(t >= 0 && t < cfg.classes, "input token %d of a vocabulary of %d",
                                 (int)t, cfg.classes);
                }
        }
        free(inputs);
        free(targets);
    }
    rt_data_destroy(&d);
    return 0;
}
