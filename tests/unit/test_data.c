/* worker/data: deterministic batches from generated text, llm.c token shards, CIFAR-10 batches
 * and the synthetic source; malformed files get clear errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/data/data.h"

static char g_dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/sc_test_data_XXXXXX");
    return mkdtemp(g_dir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void write_file(const char *name, const void *data, size_t n, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static rt_data_cfg gpt_cfg(rt_data_kind kind, const char *path, int T, int vocab)
{
    rt_data_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.path = path;
    c.seed = 3;
    c.inputs_are_tokens = true;
    c.input_elems = (size_t)T;
    c.targets_per_sample = T;
    c.classes = vocab;
    return c;
}

static void test_text(void **state)
{
    (void)state;
    char text[300], path[512];
    for (int i = 0; i < 300; i++)
        text[i] = (char)(i * 7 + 1); /* bytes above 127 too */
    write_file("a.txt", text, sizeof text, path, sizeof path);
    rt_data_cfg c = gpt_cfg(RT_DATA_TEXT, path, 8, 256);
    rt_data *d = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_OK);
    assert_int_equal(rt_data_size(d), 300 - 8);
    int32_t in[4 * 8], tgt[4 * 8], in2[2 * 8], tgt2[2 * 8];
    assert_int_equal(rt_data_batch(d, 5, 0, 4, in, tgt, &err), SC_OK);
    for (int s = 0; s < 4; s++) {
        /* a window of the file: targets are the inputs shifted by one */
        int32_t first = in[s * 8];
        int start = -1;
        for (int i = 0; i + 8 < 300; i++)
            if ((uint8_t)text[i] == first && (uint8_t)text[i + 1] == in[s * 8 + 1]) {
                start = i;
                break;
            }
        assert_true(start >= 0);
        for (int t = 0; t < 8; t++) {
            assert_int_equal(in[s * 8 + t], (uint8_t)text[start + t]);
            assert_int_equal(tgt[s * 8 + t], (uint8_t)text[start + t + 1]);
        }
    }
    /* another process asking for samples 2..3 only (the last stage: targets only) gets the same */
    rt_data *d2 = NULL;
    assert_int_equal(rt_data_new(&d2, &c, &err), SC_OK);
    assert_int_equal(rt_data_batch(d2, 5, 2, 2, NULL, tgt2, &err), SC_OK);
    assert_memory_equal(tgt2, tgt + 16, sizeof tgt2);
    assert_int_equal(rt_data_batch(d2, 5, 2, 2, in2, NULL, &err), SC_OK);
    assert_memory_equal(in2, in + 16, sizeof in2);
    /* another step draws other windows */
    assert_int_equal(rt_data_batch(d2, 6, 0, 2, in2, NULL, &err), SC_OK);
    assert_memory_not_equal(in2, in, sizeof in2);
    rt_data_destroy(&d);
    rt_data_destroy(&d2);

    /* too short for one sample; vocabulary too small; model not a token model */
    write_file("short.txt", "abc", 3, path, sizeof path);
    c = gpt_cfg(RT_DATA_TEXT, path, 8, 256);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "short.txt"));
    sc_err_clear(&err);
    c = gpt_cfg(RT_DATA_TEXT, path, 2, 100);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "at least 256"));
    sc_err_clear(&err);
    c.inputs_are_tokens = false;
    c.classes = 256;
    assert_int_equal(rt_data_new(&d, &c, &err), SC_ERR_INVALID);
    sc_err_clear(&err);
    c = gpt_cfg(RT_DATA_TEXT, "/nonexistent/file.txt", 2, 256);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/file.txt"));
    assert_null(d);
}

static size_t make_shard(int32_t magic, int32_t version, int32_t count_hdr, int ntok, uint8_t *buf,
                         int vocab)
{
    int32_t hdr[256] = {0};
    hdr[0] = magic;
    hdr[1] = version;
    hdr[2] = count_hdr;
    memcpy(buf, hdr, sizeof hdr);
    uint16_t *tok = (uint16_t *)(buf + sizeof hdr);
    for (int i = 0; i < ntok; i++)
        tok[i] = (uint16_t)((i * 13 + 5) % vocab);
    return sizeof hdr + (size_t)ntok * 2;
}

static void test_tokens(void **state)
{
    (void)state;
    static uint8_t buf[1024 + 2 * 200];
    char path[512], pattern[512];
    size_t n = make_shard(20240520, 1, 200, 200, buf, 500);
    write_file("tok_000.bin", buf, n, path, sizeof path);
    write_file("tok_001.bin", buf, n, path, sizeof path);
    snprintf(pattern, sizeof pattern, "%s/tok_*.bin", g_dir);
    rt_data_cfg c = gpt_cfg(RT_DATA_TOKENS, pattern, 16, 512);
    rt_data *d = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_OK);
    assert_int_equal(rt_data_size(d), 400 - 16);
    int32_t in[3 * 16], tgt[3 * 16];
    assert_int_equal(rt_data_batch(d, 0, 0, 3, in, tgt, &err), SC_OK);
    for (int s = 0; s < 3; s++)
        for (int t = 0; t + 1 < 16; t++)
            assert_int_equal(tgt[s * 16 + t], in[s * 16 + t + 1]);
    rt_data_destroy(&d);

    /* malformed shards */
    struct {
        int32_t magic, version, count;
        int ntok, vocab;
        sc_status want;
        const char *says;
    } bad[] = {
        {12345, 1, 200, 200, 500, SC_ERR_PARSE, "bad magic"},
        {20240520, 2, 200, 200, 500, SC_ERR_VERSION, "version 2"},
        {20240520, 1, 300, 200, 500, SC_ERR_PARSE, "header says 300 tokens"},
        {20240520, 1, 200, 200, 600, SC_ERR_INVALID, "outside the model's vocabulary"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        n = make_shard(bad[i].magic, bad[i].version, bad[i].count, bad[i].ntok, buf, bad[i].vocab);
        write_file("bad.bin", buf, n, path, sizeof path);
        c = gpt_cfg(RT_DATA_TOKENS, path, 16, 512);
        sc_err_clear(&err);
        assert_int_equal(rt_data_new(&d, &c, &err), bad[i].want);
        assert_non_null(strstr(err.msg, bad[i].says));
        assert_non_null(strstr(err.msg, "bad.bin"));
    }
    write_file("tiny.bin", buf, 100, path, sizeof path);
    c = gpt_cfg(RT_DATA_TOKENS, path, 16, 512);
    sc_err_clear(&err);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "too short"));
    snprintf(pattern, sizeof pattern, "%s/none_*.bin", g_dir);
    c = gpt_cfg(RT_DATA_TOKENS, pattern, 16, 512);
    sc_err_clear(&err);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_ERR_NOT_FOUND);
}

static rt_data_cfg image_cfg(rt_data_kind kind, const char *path)
{
    rt_data_cfg c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.path = path;
    c.seed = 9;
    c.inputs_are_tokens = false;
    c.input_elems = 3072;
    c.targets_per_sample = 1;
    c.classes = 10;
    return c;
}

static void test_cifar(void **state)
{
    (void)state;
    enum { R = 5 };
    static uint8_t recs[R * 3073];
    for (int r = 0; r < R; r++) {
        recs[r * 3073] = (uint8_t)(r * 2);
        memset(recs + r * 3073 + 1, r * 50, 3072); /* pixels identify the record */
    }
    char sub[300], path[512];
    snprintf(sub, sizeof sub, "%s/cifar", g_dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    write_file("cifar/data_batch_1.bin", recs, sizeof recs, path, sizeof path);
    rt_data_cfg c = image_cfg(RT_DATA_CIFAR10, sub); /* a folder */
    rt_data *d = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_OK);
    assert_int_equal(rt_data_size(d), R);
    static float in[4 * 3072];
    int32_t tgt[4];
    assert_int_equal(rt_data_batch(d, 2, 0, 4, in, tgt, &err), SC_OK);
    for (int s = 0; s < 4; s++) {
        int r = tgt[s] / 2;
        assert_int_equal(tgt[s] % 2, 0);
        assert_float_equal(in[s * 3072], (float)(r * 50) / 255.0f - 0.5f, 1e-6);
        assert_float_equal(in[s * 3072 + 3071], (float)(r * 50) / 255.0f - 0.5f, 1e-6);
    }
    rt_data_destroy(&d);

    write_file("bad_size.bin", recs, 3073 * 2 - 1, path, sizeof path);
    c = image_cfg(RT_DATA_CIFAR10, path);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "3073"));
    recs[3073] = 42;
    write_file("bad_label.bin", recs, sizeof recs, path, sizeof path);
    c = image_cfg(RT_DATA_CIFAR10, path);
    sc_err_clear(&err);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "record 1 has label 42"));
    /* a model that does not take 3x32x32 images */
    c.input_elems = 784;
    sc_err_clear(&err);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "3072"));
}

static void test_synthetic(void **state)
{
    (void)state;
    rt_data_cfg c = gpt_cfg(RT_DATA_SYNTHETIC, NULL, 6, 50);
    rt_data *d = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_data_new(&d, &c, &err), SC_OK);
    int32_t in[2 * 6], tgt[2 * 6], in2[2 * 6];
    assert_int_equal(rt_data_batch(d, 1, 0, 2, in, tgt, &err), SC_OK);
    for (int i = 0; i < 12; i++) {
        assert_true(in[i] >= 0 && in[i] < 50);
        assert_int_equal(tgt[i], (5 * in[i] + 3) % 50);
    }
    assert_int_equal(rt_data_batch(d, 1, 0, 2, in2, NULL, &err), SC_OK);
    assert_memory_equal(in, in2, sizeof in);
    rt_data_destroy(&d);

    c = image_cfg(RT_DATA_SYNTHETIC, NULL);
    c.input_elems = 20;
    c.classes = 4;
    assert_int_equal(rt_data_new(&d, &c, &err), SC_OK);
    float x[3 * 20];
    int32_t y[3];
    assert_int_equal(rt_data_batch(d, 4, 10, 3, x, y, &err), SC_OK);
    for (int s = 0; s < 3; s++) {
        assert_true(y[s] >= 0 && y[s] < 4);
        assert_true(x[s * 20 + y[s]] > 0.7f); /* the label's marker */
    }
    rt_data_destroy(&d);

    rt_data_kind k;
    assert_int_equal(rt_data_kind_parse("cifar10", "data.kind", &k, &err), SC_OK);
    assert_int_equal(k, RT_DATA_CIFAR10);
    assert_int_equal(rt_data_kind_parse("imagenet", "data.kind", &k, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "\"synthetic\""));
}

/* Sources that are not regular files are refused at once, by name: a FIFO used to block the
 * open (and the worker's handler thread) until a writer came, a device such as /dev/zero used
 * to be read until the limit. alarm() turns such a hang into a failure. */
static void test_source_not_a_regular_file(void **state)
{
    (void)state;
    char fifo[512], sub[512], pattern[512];
    snprintf(fifo, sizeof fifo, "%s/fifo", g_dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(sub, sizeof sub, "%s/folder.bin", g_dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(pattern, sizeof pattern, "%s/fold*.bin", g_dir);
    struct {
        rt_data_cfg c;
        sc_status want;
        const char *says;
    } bad[] = {
        {gpt_cfg(RT_DATA_TEXT, fifo, 8, 256), SC_ERR_INVALID, "not a regular file"},
        {gpt_cfg(RT_DATA_TOKENS, fifo, 8, 256), SC_ERR_INVALID, "not a regular file"},
        {image_cfg(RT_DATA_CIFAR10, fifo), SC_ERR_INVALID, "not a regular file"},
        {gpt_cfg(RT_DATA_TEXT, "/dev/zero", 8, 256), SC_ERR_INVALID, "not a regular file"},
        {gpt_cfg(RT_DATA_TEXT, g_dir, 8, 256), SC_ERR_INVALID, "is a directory"},
        {gpt_cfg(RT_DATA_TOKENS, pattern, 8, 256), SC_ERR_INVALID, "is a directory"},
    };
    alarm(20);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_data *d = NULL;
        sc_err err;
        sc_err_clear(&err);
        assert_int_equal(rt_data_new(&d, &bad[i].c, &err), bad[i].want);
        assert_non_null(strstr(err.msg, bad[i].says));
        assert_non_null(strstr(err.msg, "expected a data file"));
        assert_null(d);
    }
    alarm(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_cifar),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_source_not_a_regular_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
