/*
 * Fuzz target: a checkpoint file as a resuming stage reads it (rt_runner_load), for a small
 * one-stage MLP (23 parameters, AdamW). The first input byte's low bit "seals" the rest: the
 * harness writes the FNV-1a checksum of the bytes after the header into the header, so
 * mutations reach past the checksum to the loader's use of the figures; the rest is the file.
 * A checkpoint that loads is trained on for one step.
 * Demands: no crash or undefined behaviour; a refusal has a message; a step after a load
 * completes or refuses with a message (the loaded figures may be any floats, NaN included).
 * STAGECRAFT_FUZZ_CHECKPOINT_SEED=PATH: write a sealed checkpoint of the stage there (a corpus
 * seed) and exit.
 */
#include <unistd.h>

#include "tests/fuzz/fuzz_common.h"

#include "worker/runtime/runner.h"

#define STEP 5
/* The file's layout (worker/runtime/runner_checkpoint.c): a 72-byte header, the checksum in
 * its last 8 bytes, then the parameters and the optimizer state as floats. */
#define HEADER_BYTES 72
#define CHECKSUM_AT 64

static const char model_json[] =
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"mlp\", \"sizes\": [4, 3, 2]}";

static char g_dir[64];
static char g_path[1200];
static rt_runner *g_runner;

static void cleanup(void)
{
    unlink(g_path);
    rmdir(g_dir);
    rt_runner_destroy(&g_runner);
}

static void write_seed(const char *out)
{
    sc_err err;
    sc_err_clear(&err);
    FUZZ_REQUIRE(rt_runner_step(g_runner, 0, NULL, &err) == SC_OK, "%s", err.msg);
    FUZZ_REQUIRE(rt_runner_save(g_runner, g_dir, STEP, &err) == SC_OK, "%s", err.msg);
    FILE *in = fopen(g_path, "rb");
    FILE *o = fopen(out, "wb");
    FUZZ_REQUIRE(in != NULL && o != NULL, "cannot copy %s to %s", g_path, out);
    fputc(1, o);
    int c;
    while ((c = fgetc(in)) != EOF)
        fputc(c, o);
    fclose(in);
    fclose(o);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    snprintf(g_dir, sizeof g_dir, "%s", "/tmp/sc-fuzz-ckpt-XXXXXX");
    FUZZ_REQUIRE(mkdtemp(g_dir) != NULL, "mkdtemp");
    rt_runner_cfg c = rt_runner_cfg_default();
    c.model_json = model_json;
    c.n_stages = 1;
    c.stage = 0;
    c.first_block = 0;
    c.last_block = 1;
    c.batch_size = 2;
    c.microbatches = 1;
    c.data_kind = "synthetic";
    c.optimizer = "adamw";
    sc_err err;
    sc_err_clear(&err);
    FUZZ_REQUIRE(rt_runner_new(&g_runner, &c, &err) == SC_OK, "the stage: %s", err.msg);
    rt_runner_checkpoint_path(g_runner, g_dir, STEP, g_path, sizeof g_path);
    atexit(cleanup);
    const char *seed = getenv("STAGECRAFT_FUZZ_CHECKPOINT_SEED");
    if (seed != NULL && seed[0] != '\0') {
        write_seed(seed);
        exit(0);
    }
    return 0;
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t n = size - 1;
    uint8_t *file = malloc(n ? n : 1);
    FUZZ_REQUIRE(file != NULL, "out of memory");
    memcpy(file, data + 1, n);
    if ((data[0] & 1) && n >= HEADER_BYTES) {
        uint64_t h = fnv1a(file + HEADER_BYTES, n - HEADER_BYTES);
        memcpy(file + CHECKSUM_AT, &h, sizeof h);
    }
    FILE *f = fopen(g_path, "wb");
    FUZZ_REQUIRE(f != NULL, "cannot write %s", g_path);
    FUZZ_REQUIRE(fwrite(file, 1, n, f) == n, "short write");
    fclose(f);
    free(file);

    sc_err err;
    sc_err_clear(&err);
    sc_status rc = rt_runner_load(g_runner, g_dir, STEP, &err);
    fuzz_refusal(rc, &err, "the checkpoint");
    if (rc == SC_OK) {
        sc_err_clear(&err);
        rc = rt_runner_step(g_runner, STEP + 1, NULL, &err);
        fuzz_refusal(rc, &err, "a step after the load");
    }
    return 0;
}
