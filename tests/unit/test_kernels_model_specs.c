/*
 * kernels models: the builders (GPT, MLP, VGG: blocks, names, parameter counts), spec errors
 * refused with the file, the JSON path and what would be valid, models read from a file or from
 * a job's node, device names, host memory beyond the machine's refused, and the profiler's JSON
 * and its cancel flag.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sc_clock.h"
#include "kernels/model.h"
#include "kernels/profile.h"
#include "tests/unit/kernels_harness.h"

static void test_gpt_builder(void **state)
{
    (void)state;
    kn_model *m = model_from(GPT_TINY("false"));
    assert_int_equal(kn_model_block_count(m), 4);
    assert_string_equal(kn_model_block(m, 0)->name, "embed");
    assert_string_equal(kn_model_block(m, 2)->name, "layer1");
    assert_string_equal(kn_model_block(m, 3)->name, "head");
    size_t V = 11, T = 5, C = 8, L = 2;
    assert_int_equal(kn_model_param_count(m),
                     V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C + V * C);
    assert_int_equal(kn_model_targets_per_sample(m), 5);
    assert_string_equal(kn_model_name(m), "gpt-L2-C8");
    kn_model_destroy(&m);
    assert_null(m);
    m = model_from(GPT_TINY("true"));
    assert_int_equal(kn_model_block_count(m), 6);
    assert_string_equal(kn_model_block(m, 1)->name, "layer0.attn");
    assert_string_equal(kn_model_block(m, 4)->name, "layer1.mlp");
    kn_model_destroy(&m);
}

static void test_mlp_vgg_builders(void **state)
{
    (void)state;
    kn_model *m = model_from(mlp_tiny);
    assert_int_equal(kn_model_block_count(m), 3);
    assert_string_equal(kn_model_block(m, 1)->name, "fc1");
    assert_string_equal(kn_model_block(m, 2)->name, "head");
    assert_int_equal(kn_model_param_count(m), 6 * 10 + 10 + 10 * 8 + 8 + 8 * 3 + 3);
    assert_int_equal(kn_model_classes(m), 3);
    kn_model_destroy(&m);

    m = model_from("{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"vgg\", "
                   "\"config\": \"vgg16\", \"image\": [3, 32, 32], \"classes\": 10}");
    assert_int_equal(kn_model_block_count(m), 13 + 5 + 3);
    assert_string_equal(kn_model_block(m, 0)->name, "conv1_1");
    assert_string_equal(kn_model_block(m, 2)->name, "pool1");
    assert_string_equal(kn_model_block(m, 17)->name, "pool5");
    const kn_block *fc1 = kn_model_block(m, 18);
    assert_int_equal(fc1->fin, 512); /* 512 channels x 1 x 1 after five pools */
    assert_int_equal(fc1->fout, 512);
    /* conv stack of the paper (14.7M) + CIFAR classifier 512-512-10 */
    assert_int_equal(kn_model_param_count(m),
                     14714688 + 512 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
    kn_model_destroy(&m);

    m = model_from(vgg_tiny);
    assert_int_equal(kn_model_block_count(m), 8 + 5 + 3);
    assert_int_equal(kn_model_block(m, 0)->cout, 2);
    kn_model_destroy(&m);
}

static void expect_refused(const char *text, const char *part1, const char *part2)
{
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = kn_model_parse(&m, "bad.json", text, strlen(text), &err);
    assert_int_not_equal(rc, SC_OK);
    assert_null(m);
    if (strstr(err.msg, part1) == NULL || (part2 && strstr(err.msg, part2) == NULL)) {
        fprintf(stderr, "message: %s\nexpected: %s / %s\n", err.msg, part1, part2);
        fail();
    }
    assert_non_null(strstr(err.msg, "bad.json"));
}

#define HDR "{\"format\": \"stagecraft-model\", \"version\": 1, "

static void test_bad_specs(void **state)
{
    (void)state;
    expect_refused(HDR "\"kind\": \"resnet\"}", "$.kind", "gpt");
    expect_refused(HDR "\"kind\": \"gpt\", \"vocab\": 10, \"seq_len\": 4, \"layers\": 2, "
                       "\"width\": 10, \"heads\": 3}",
                   "$.width", "not divisible by heads 3");
    expect_refused(HDR "\"kind\": \"gpt\", \"vocab\": 10, \"seq_len\": 4, \"layers\": 0, "
                       "\"width\": 8, \"heads\": 2}",
                   "$.layers", "[1, 1000]");
    expect_refused(HDR "\"kind\": \"gpt\", \"vocab\": 10, \"layers\": 1, \"width\": 8, "
                       "\"heads\": 2}",
                   "seq_len", NULL);
    expect_refused(HDR "\"kind\": \"mlp\", \"sizes\": [4, 0, 2]}", "$.sizes[1]", NULL);
    expect_refused(HDR "\"kind\": \"mlp\", \"sizes\": [4]}", "$.sizes", "2 to 1024 elements");
    expect_refused(HDR "\"kind\": \"vgg\", \"config\": \"vgg16\", \"image\": [3, 30, 32], "
                       "\"classes\": 10}",
                   "$.image[1]", "multiple of 32");
    expect_refused(HDR "\"kind\": \"vgg\", \"config\": \"vgg99\", \"image\": [3, 32, 32], "
                       "\"classes\": 10}",
                   "$.config", "vgg16");
    expect_refused("{\"format\": \"stagecraft-profile\", \"version\": 1, \"kind\": \"mlp\"}",
                   "stagecraft-model", NULL);
    expect_refused(HDR "\"kind\": \"mlp\", \"sizes\": [4, 2], }", "invalid JSON", NULL);
    /* a key the kind does not have is refused with its line, column and path, and the closest
     * valid key; another kind's key is no key of this one */
    expect_refused(HDR "\"kind\": \"gpt\", \"vocab\": 10, \"seq_len\": 4, \"layers\": 1,\n"
                       "\"width\": 8, \"heads\": 2, \"layres\": 3}",
                   "bad.json:2:35: $.layres: unknown key \"layres\"", "did you mean \"layers\"?");
    expect_refused(HDR "\"kind\": \"mlp\", \"sizes\": [4, 2], \"sead\": 3}", "$.sead",
                   "did you mean \"seed\"?");
    expect_refused(HDR "\"kind\": \"mlp\", \"sizes\": [4, 2], \"classes\": 3}",
                   "$.classes: unknown key", "\"sizes\"");
    expect_refused(HDR "\"kind\": \"vgg\", \"config\": \"vgg11\", \"image\": [3, 32, 32], "
                       "\"classes\": 10, \"width_divsor\": 2}",
                   "$.width_divsor", "did you mean \"width_divisor\"?");
}

static void test_model_load_file(void **state)
{
    (void)state;
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_model_load(&m, SC_TEST_DATA_DIR "/kernels/gpt_tiny.json", &err), SC_OK);
    assert_string_equal(kn_model_name(m), "gpt-tiny");
    assert_int_equal(kn_model_block_count(m), 1 + 2 * 2 + 1); /* split_blocks: true */
    assert_int_equal(kn_model_seed(m), 1);
    kn_model_destroy(&m);
    assert_int_equal(kn_model_load(&m, SC_TEST_DATA_DIR "/kernels/missing.json", &err), SC_ERR_IO);
    assert_non_null(strstr(err.msg, "missing.json"));
    assert_null(m);
}

static void test_model_from_job_node(void **state)
{
    (void)state;
    /* a job spec carries the model as an object without format/version */
    const char *job = "{\"format\": \"stagecraft-job\", \"version\": 1,\n"
                      " \"model\": {\"kind\": \"mlp\", \"sizes\": [4, 0, 2]}}";
    sc_jdoc *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "job.json", job, strlen(job), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc), mnode;
    assert_int_equal(sc_json_get_object(&root, "model", &mnode, &err), SC_OK);
    kn_model *m = NULL;
    assert_int_equal(kn_model_from_node(&m, &mnode, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "job.json:2:"));
    assert_non_null(strstr(err.msg, "$.model.sizes[1]"));
    sc_jdoc_destroy(&doc);
    const char *ok = "{\"model\": {\"kind\": \"mlp\", \"sizes\": [4, 3, 2], \"seed\": 5}}";
    assert_int_equal(sc_jdoc_parse(&doc, "job.json", ok, strlen(ok), &err), SC_OK);
    root = sc_jdoc_root(doc);
    sc_err_clear(&err);
    assert_int_equal(sc_json_get_object(&root, "model", &mnode, &err), SC_OK);
    assert_int_equal(kn_model_from_node(&m, &mnode, &err), SC_OK);
    assert_int_equal(kn_model_seed(m), 5);
    assert_int_equal(kn_model_block_count(m), 2);
    kn_model_destroy(&m);
    sc_jdoc_destroy(&doc);
}

static void test_device_parse(void **state)
{
    (void)state;
    kn_device d;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_device_parse("cpu", "--device", &d, &err), SC_OK);
    assert_int_equal(d.kind, KN_DEV_CPU);
    char buf[32];
    kn_device_format(d, buf, sizeof buf);
    assert_string_equal(buf, "cpu");
    assert_int_equal(kn_device_parse("tpu:0", "--device", &d, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--device: unknown device 'tpu:0' (valid: cpu, cuda:N)"));
    sc_err_clear(&err);
    assert_int_not_equal(kn_device_parse("cuda:x", "--device", &d, &err), SC_OK);
    assert_non_null(strstr(err.msg, "--device"));
    sc_err_clear(&err);
    /* beyond the visible devices (none here, or fewer than 1000 on any machine) */
    assert_int_not_equal(kn_device_parse("cuda:999", "--device", &d, &err), SC_OK);
    assert_non_null(strstr(err.msg, "cuda:999"));
}

static void test_profile_json(void **state)
{
    (void)state;
    kn_model *m = model_from(mlp_tiny);
    kn_profile_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.device = CPU;
    cfg.sizes[0] = 1;
    cfg.sizes[1] = 4;
    cfg.nsizes = 2;
    cfg.warmup = 1;
    cfg.repeats = 3;
    kn_profile_block blocks[3];
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_profile_run(m, &cfg, blocks, &err), SC_OK);
    void *doc = NULL;
    assert_int_equal(kn_profile_to_json(m, "cpu", 3, blocks, 3, &doc, &err), SC_ERR_INVALID);
    sc_err_clear(&err);
    assert_int_equal(kn_profile_to_json(m, "cpu", 4, blocks, 3, &doc, &err), SC_OK);
    json_t *root = doc;
    assert_string_equal(json_string_value(json_object_get(root, "format")), "stagecraft-profile");
    assert_int_equal(json_integer_value(json_object_get(root, "microbatch_size")), 4);
    json_t *arr = json_object_get(root, "blocks");
    assert_int_equal(json_array_size(arr), 3);
    json_t *fc0 = json_array_get(arr, 0);
    assert_string_equal(json_string_value(json_object_get(fc0, "name")), "fc0");
    assert_int_equal(json_integer_value(json_object_get(fc0, "activation_bytes")), 10 * 4 * 4);
    assert_int_equal(json_integer_value(json_object_get(fc0, "parameter_bytes")), (60 + 10) * 4);
    assert_int_equal(json_integer_value(json_object_get(fc0, "stash_bytes")), 6 * 4 * 4);
    assert_true(json_real_value(json_object_get(fc0, "forward_s")) >= 0.0);
    assert_true(json_real_value(json_object_get(fc0, "wgrad_s")) <=
                json_real_value(json_object_get(fc0, "backward_s")));
    json_t *by = json_object_get(fc0, "by_microbatch_size");
    assert_int_equal(json_array_size(by), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(by, 0), "size")), 1);
    json_decref(root);
    /* sustained: each size and the optimizer step are measured over at least min_time_s of
     * passes (two sizes + the optimizer: three spans), and give positive mean times */
    cfg.min_time_s = 0.02;
    double t0 = sc_clock_now_s();
    assert_int_equal(kn_profile_run(m, &cfg, blocks, &err), SC_OK);
    assert_true(sc_clock_now_s() - t0 >= 3 * cfg.min_time_s);
    for (int i = 0; i < 3; i++) {
        assert_true(blocks[i].points[1].forward_s > 0 && blocks[i].points[1].backward_s > 0);
        assert_true(blocks[i].optimizer_s > 0);
        /* B and W timed apart: W is a positive part of the backward (every block has weights) */
        assert_true(blocks[i].points[1].wgrad_s > 0);
        assert_true(blocks[i].points[1].wgrad_s <= blocks[i].points[1].backward_s);
    }
    cfg.repeats = 0;
    assert_int_equal(kn_profile_run(m, &cfg, blocks, &err), SC_ERR_INVALID);
    kn_model_destroy(&m);
}

/* A cancel flag set before the profile stops it before anything is built; set while it runs (a
 * profile that would take an hour), it stops at its next check and returns SC_ERR_CANCELLED. */
static void *cancel_when_running(void *arg)
{
    atomic_int *flag = arg;
    usleep(50 * 1000); /* lets the profile start; the check is the status it returns */
    atomic_store(flag, 1);
    return NULL;
}

static void test_profile_cancel(void **state)
{
    (void)state;
    kn_model *m = model_from(mlp_tiny);
    kn_profile_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.device = CPU;
    cfg.sizes[0] = 4;
    cfg.nsizes = 1;
    cfg.warmup = 1;
    cfg.repeats = 3;
    atomic_int flag = 1;
    cfg.cancel = &flag;
    kn_profile_block blocks[3];
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_profile_run(m, &cfg, blocks, &err), SC_ERR_CANCELLED);
    assert_non_null(strstr(err.msg, "profiling was cancelled"));
    atomic_store(&flag, 0);
    cfg.min_time_s = 3600; /* an hour of passes, however short */
    cfg.max_passes = INT_MAX;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, cancel_when_running, &flag), 0);
    sc_err_clear(&err);
    assert_int_equal(kn_profile_run(m, &cfg, blocks, &err), SC_ERR_CANCELLED);
    pthread_join(t, NULL);
    kn_model_destroy(&m);
}

/* Host memory beyond the machine's is refused at once with a message, not promised by an
 * overcommitting calloc and killed later. */
static void test_alloc_beyond_memory(void **state)
{
    (void)state;
    kn_ctx *ctx = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(
        kn_ctx_new(&ctx, (kn_device){.kind = KN_DEV_CPU, .index = 0}, KN_PREC_FP32, &err), SC_OK);
    size_t phys = (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    void *p = (void *)1;
    assert_int_equal(kn_ctx_alloc(ctx, phys + phys / 2, &p, &err), SC_ERR_NOMEM);
    assert_null(p);
    assert_non_null(strstr(err.msg, "more than this machine's"));
    assert_int_equal(kn_ctx_alloc(ctx, 4096, &p, &err), SC_OK);
    assert_non_null(p);
    kn_ctx_free(ctx, p);
    kn_ctx_destroy(&ctx);
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_builder),
        cmocka_unit_test(test_alloc_beyond_memory),
        cmocka_unit_test(test_mlp_vgg_builders),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_model_load_file),
        cmocka_unit_test(test_model_from_job_node),
        cmocka_unit_test(test_device_parse),
        cmocka_unit_test(test_profile_json),
        cmocka_unit_test(test_profile_cancel),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
