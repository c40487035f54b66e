/* worker/runtime/runner: pipelined training equals single-stage training with gradient
 * accumulation (GPT, VGG-style and MLP, gpipe, 1f1b and zb1 with and without capped deferral,
 * 2 and 4 stages, one thread per stage over zmq loopback or local queues, text data too), also
 * with a frozen prefix (the frozen parameters stay bit for bit) and on the device-memory data
 * path (bit for bit the host-buffer path). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sc_json.h"
#include "kernels/model.h"
#include "tests/unit/runtime_harness.h"

static void test_equivalence_gpt(void **state)
{
    (void)state;
    const run_spec specs[] = {
        {GPT_JSON, "gpipe", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "1f1b", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "gpipe", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "1f1b", 4, 8, 8, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "1f1b", 4, 6, 3, 2, "sgd", "local", NULL, NULL, NULL, 0}, /* m < p */
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        check_equivalence(&specs[i]);
}

/* Parameters of the model's first `blocks` blocks. */
static size_t prefix_params(const char *json, int blocks)
{
    sc_jdoc *doc = NULL;
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "model", json, strlen(json), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc);
    assert_int_equal(kn_model_from_node(&m, &root, &err), SC_OK);
    size_t n = 0;
    for (int i = 0; i < blocks; i++)
        n += kn_model_block(m, i)->params;
    kn_model_destroy(&m);
    sc_jdoc_destroy(&doc);
    return n;
}

/* A frozen prefix (freezing): a stage frozen whole takes no gradient and sends none, the stage
 * where the prefix ends sends none upstream, one cut inside its blocks runs the backward of the
 * rest only; the result is the one-stage training with the same blocks frozen, and the frozen
 * parameters stay as they were, bit for bit. The GPT has 4 blocks (embedding, 2 layers, head). */
static void test_equivalence_frozen(void **state)
{
    (void)state;
    const struct {
        run_spec rs;
        int frozen;
        bool memory_path;
    } cases[] = {
        {{GPT_JSON, "1f1b", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0}, 1, false},
        {{GPT_JSON, "1f1b", 4, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0}, 3, false},
        {{GPT_JSON, "gpipe", 2, 8, 4, 3, "sgd", "zmq", NULL, NULL, NULL, 0}, 1, false},
        {{GPT_JSON, "gpipe", 2, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0}, 2, true},
        {{GPT_JSON, "sliced", 4, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 2}, 2, false},
        {{GPT_JSON, "zb1", 4, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0}, 2, false},
        {{GPT_JSON, "zb1", 2, 8, 4, 3, "sgd", "zmq", NULL, NULL, NULL, 0}, 1, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_opts_set(
            &(run_opts){.frozen = cases[i].frozen, .stage_memory_path = cases[i].memory_path});
        check_equivalence(&cases[i].rs);
        size_t n_pipe = 0, frozen = prefix_params(cases[i].rs.model, cases[i].frozen);
        rt_report reports[8];
        float *pipe = train_pipeline(&cases[i].rs, &n_pipe, reports);
        size_t n_ref = 0;
        float *init = NULL;
        float *ref = train_reference(&cases[i].rs, &n_ref, &init);
        assert_true(frozen > 0 && frozen < n_pipe);
        assert_memory_equal(pipe, init, frozen * sizeof *pipe);
        assert_memory_not_equal(pipe + frozen, init + frozen, (n_pipe - frozen) * sizeof *pipe);
        free(pipe);
        free(ref);
        free(init);
    }
    run_opts_set(NULL);
}

/* The data path a GPU stage takes when its transport carries device memory (its slot's output
 * sent directly, receive buffers the forward and backward read, a copy of the input gradient,
 * the last stage's targets uploaded), run on CPU stages, whose "device" memory is host memory:
 * the same parameters as the host-buffer path, bit for bit. */
static void test_stage_memory_path(void **state)
{
    (void)state;
    static const int sizes[] = {3, 1, 2, 2};
    const run_spec specs[] = {
        {GPT_JSON, "gpipe", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "1f1b", 3, 8, 4, 3, "sgd", "local", NULL, NULL, sizes, 0},
        {GPT_JSON, "sliced", 4, 8, 4, 2, "adamw", "local", NULL, NULL, NULL, 3},
        {VGG_JSON, "1f1b", 2, 4, 2, 2, "sgd", "local", NULL, NULL, NULL, 0},
        {GPT_JSON, "zb1", 3, 8, 4, 2, "adamw", "local", NULL, NULL, sizes, 0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        size_t n_host = 0, n_dev = 0;
        rt_report reports[8];
        float *host = train_pipeline(&specs[i], &n_host, reports);
        run_opts_set(&(run_opts){.stage_memory_path = true});
        float *dev = train_pipeline(&specs[i], &n_dev, reports);
        run_opts_set(NULL);
        assert_int_equal(n_host, n_dev);
        assert_memory_equal(host, dev, n_host * sizeof(float));
        free(host);
        free(dev);
    }
    /* and still the single-process result */
    run_opts_set(&(run_opts){.stage_memory_path = true});
    check_equivalence(&specs[1]);
    run_opts_set(NULL);
}

static void test_equivalence_gpt_text(void **state)
{
    (void)state;
    char path[] = "/tmp/sc_test_runtime_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char text[2000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = "the quick brown fox jumps over the lazy dog. "[i % 45];
    assert_int_equal(write(fd, text, sizeof text), (ssize_t)sizeof text);
    close(fd);
    run_spec rs = {GPT_JSON, "1f1b", 2, 4, 2, 3, "adamw", "zmq", "text", path, NULL, 0};
    check_equivalence(&rs);
    unlink(path);
}

static void test_equivalence_vgg_mlp(void **state)
{
    (void)state;
    const run_spec specs[] = {
        {VGG_JSON, "gpipe", 2, 4, 2, 2, "sgd", "zmq", NULL, NULL, NULL, 0},
        {VGG_JSON, "1f1b", 4, 4, 4, 2, "sgd", "zmq", NULL, NULL, NULL, 0},
        {VGG_JSON, "gpipe", 4, 4, 2, 2, "adamw", "local", NULL, NULL, NULL, 0},
        {MLP_JSON, "1f1b", 2, 8, 4, 4, "adamw", "zmq", NULL, NULL, NULL, 0},
        {MLP_JSON, "gpipe", 4, 8, 4, 4, "sgd", "local", NULL, NULL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        check_equivalence(&specs[i]);
}

/* zb1 (B, and W deferred): the parameters of one-process training, and bit for bit those of
 * 1f1b with the same stages and micro-batches (each stage adds its micro-batches' parameter
 * gradients in the same order, only later). */
static void test_equivalence_zb1(void **state)
{
    (void)state;
    const run_spec specs[] = {
        {GPT_JSON, "zb1", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "zb1", 4, 8, 8, 3, "adamw", "local", NULL, NULL, NULL, 0},
        {GPT_JSON, "zb1", 4, 6, 3, 2, "sgd", "local", NULL, NULL, NULL, 0}, /* m < p */
        {VGG_JSON, "zb1", 4, 4, 4, 2, "sgd", "local", NULL, NULL, NULL, 0},
        {MLP_JSON, "zb1", 3, 8, 4, 4, "adamw", "zmq", NULL, NULL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        check_equivalence(&specs[i]);
        run_spec o = specs[i];
        o.schedule = "1f1b";
        size_t nz = 0, no = 0;
        rt_report rz[8], ro[8];
        float *pz = train_pipeline(&specs[i], &nz, rz), *po = train_pipeline(&o, &no, ro);
        assert_int_equal(nz, no);
        assert_memory_equal(pz, po, nz * sizeof *pz);
        for (int st = 0; st < specs[i].stages; st++) {
            assert_true(rz[st].wgrad_s > 0.0 && rz[st].wgrad_s <= rz[st].backward_s);
            assert_true(ro[st].wgrad_s == 0.0);
        }
        free(pz);
        free(po);
    }
}

/* zb1 with its deferred W capped (the plan's deferred_w: a GPT whose head stage has the largest
 * slot): the parameters of one-process training, bit for bit those of uncapped zb1 and of 1f1b
 * (the caps move W, never the order of a stage's gradient additions), each stage holding
 * p-s + min(cap, s) micro-batches and allocating exactly that many slots. */
static void test_equivalence_zb1_capped(void **state)
{
    (void)state;
    static const int caps[][4] = {{0, 1, 2, 0}, {0, 0, 0, 0}, {0, 1, 1, 1}};
    const run_spec specs[] = {
        {GPT_JSON, "zb1", 4, 8, 8, 3, "adamw", "local", NULL, NULL, NULL, 0},
        {GPT_JSON, "zb1", 4, 8, 4, 2, "sgd", "zmq", NULL, NULL, NULL, 0},
        {MLP_JSON, "zb1", 3, 8, 4, 3, "adamw", "local", NULL, NULL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        run_opts_set(&(run_opts){.zb1_defer = caps[i]});
        check_equivalence(&specs[i]);
        size_t nc = 0, nz = 0, no = 0;
        rt_report rc[8], rz[8], ro[8];
        float *pc = train_pipeline(&specs[i], &nc, rc);
        run_opts_set(NULL);
        run_spec o = specs[i];
        float *pz = train_pipeline(&specs[i], &nz, rz);
        o.schedule = "1f1b";
        float *po = train_pipeline(&o, &no, ro);
        assert_int_equal(nc, nz);
        assert_int_equal(nc, no);
        assert_memory_equal(pc, pz, nc * sizeof *pc);
        assert_memory_equal(pc, po, nc * sizeof *pc);
        for (int st = 0; st < specs[i].stages; st++)
            assert_true(rc[st].slots <= rz[st].slots && rc[st].slots >= ro[st].slots);
        free(pc);
        free(pz);
        free(po);
    }
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equivalence_gpt),
        cmocka_unit_test(test_equivalence_gpt_text),
        cmocka_unit_test(test_equivalence_vgg_mlp),
        cmocka_unit_test(test_equivalence_zb1),
        cmocka_unit_test(test_equivalence_zb1_capped),
        cmocka_unit_test(test_stage_memory_path),
        cmocka_unit_test(test_equivalence_frozen),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
