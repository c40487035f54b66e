/*
 * Fuzz target: a safetensors file (a Hugging Face checkpoint shard) as a worker opens it
 * (kn_st_open_file: the header parsed, the file mapped) and reads every tensor it lists as floats
 * (kn_st_read, with the shape the header gives).
 * Demands: no crash or undefined behaviour; a refusal has a message; every tensor of a file that
 * opened reads, or is refused with a message (the converted values may be any floats).
 * STAGECRAFT_FUZZ_SAFETENSORS_SEED=PATH: write a small valid file there (a corpus seed) and exit.
 */
#include <unistd.h>

#include "tests/fuzz/fuzz_common.h"

#include "kernels/safetensors.h"

#define MAX_ELEMS (1u << 22) /* a tensor larger than this is only shaped, not read */

static char g_path[64];

static void cleanup(void)
{
    unlink(g_path);
}

static void write_seed(const char *out)
{
    sc_err err;
    sc_err_clear(&err);
    kn_st_writer *w = NULL;
    float wte[6] = {1, 2, 3, 4, 5, 6}, bias[3] = {-1, 0.5f, 2};
    const int64_t d2[2] = {2, 3}, d1[1] = {3};
    FUZZ_REQUIRE(kn_st_writer_new(&w, &err) == SC_OK, "%s", err.msg);
    FUZZ_REQUIRE(kn_st_writer_add(w, "transformer.wte.weight", 2, d2, wte, false, &err) == SC_OK,
                 "%s", err.msg);
    FUZZ_REQUIRE(
        kn_st_writer_add(w, "transformer.h.0.attn.c_attn.bias", 1, d1, bias, false, &err) == SC_OK,
        "%s", err.msg);
    FUZZ_REQUIRE(kn_st_writer_save(w, out, &err) == SC_OK, "%s", err.msg);
    kn_st_writer_destroy(&w);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    const char *seed = getenv("STAGECRAFT_FUZZ_SAFETENSORS_SEED");
    if (seed != NULL) {
        write_seed(seed);
        exit(0);
    }
    snprintf(g_path, sizeof g_path, "/tmp/sc-fuzz-st-%d.safetensors", (int)getpid());
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fopen(g_path, "wb");
    FUZZ_REQUIRE(f != NULL, "cannot write %s", g_path);
    FUZZ_REQUIRE(fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write %s", g_path);
    kn_st *st = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = kn_st_open_file(&st, g_path, &err);
    fuzz_refusal(rc, &err, "the safetensors file");
    for (size_t i = 0; rc == SC_OK && i < kn_st_tensor_count(st); i++) {
        const char *name = kn_st_tensor_name(st, i);
        FUZZ_REQUIRE(name != NULL && kn_st_has(st, name), "tensor %zu has no name it answers to",
                     i);
        int ndim = 0;
        int64_t dims[KN_ST_DIMS_MAX];
        kn_st_dtype dtype;
        sc_err_clear(&err);
        sc_status s = kn_st_shape(st, name, &ndim, dims, &dtype, &err);
        fuzz_refusal(s, &err, "a tensor's shape");
        if (s != SC_OK)
            continue;
        FUZZ_REQUIRE(ndim >= 0 && ndim <= KN_ST_DIMS_MAX, "tensor %s has %d dimensions", name,
                     ndim);
        uint64_t n = 1;
        for (int d = 0; d < ndim && n <= MAX_ELEMS; d++) {
            FUZZ_REQUIRE(dims[d] >= 0, "tensor %s: dimension %d is %lld", name, d,
                         (long long)dims[d]);
            n = dims[d] == 0 ? 0 : n * (uint64_t)dims[d];
        }
        if (n > MAX_ELEMS)
            continue;
        float *out = malloc((size_t)n * sizeof *out + 1);
        FUZZ_REQUIRE(out != NULL, "out of memory for %llu floats", (unsigned long long)n);
        sc_err_clear(&err);
        s = kn_st_read(st, name, ndim, dims, false, out, &err);
        fuzz_refusal(s, &err, "a tensor's read");
        free(out);
    }
    kn_st_close(&st);
    return 0;
}
