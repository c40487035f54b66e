/* worker/runtime/runner refuses bad configurations with clear messages: batch and block
 * ranges, optimizers, frozen blocks, transports, models and data; per-stage and backward sizes
 * that do not add up or dispute a neighbour's real cut (found in the first step); replicated
 * stages' counts and endpoints; pipedream with copies whose micro-batches are not a multiple of
 * every stage's copies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "tests/unit/runtime_harness.h"

static void expect_bad(rt_runner_cfg c, sc_status want, const char *says)
{
    rt_runner *r = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_runner_new(&r, &c, &err), want);
    assert_null(r);
    if (strstr(err.msg, says) == NULL)
        print_error("message \"%s\" lacks \"%s\"\n", err.msg, says);
    assert_non_null(strstr(err.msg, says));
}

static void test_bad_config(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "gpipe", 2, 8, 4, 1, "adamw", "zmq", NULL, NULL, NULL, 0};
    rt_runner_cfg c = spec_cfg(&rs, 0, 4);
    c.batch_size = 7;
    expect_bad(c, SC_ERR_INVALID, "multiple of microbatches");
    c = spec_cfg(&rs, 1, 4);
    c.first_block = 0;
    c.last_block = 2;
    expect_bad(c, SC_ERR_INVALID, "last block 3");
    c = spec_cfg(&rs, 0, 4);
    c.first_block = 1;
    expect_bad(c, SC_ERR_INVALID, "stage 0 must start at block 0");
    c = spec_cfg(&rs, 0, 4);
    c.optimizer = "lion";
    expect_bad(c, SC_ERR_INVALID, "\"adamw\", \"sgd\"");
    c = spec_cfg(&rs, 0, 4);
    c.frozen_blocks = 4;
    expect_bad(c, SC_ERR_INVALID, "4 frozen blocks of a 4-block model; valid: 0 to 3");
    c.frozen_blocks = 1;
    c.schedule = "pipedream";
    expect_bad(c, SC_ERR_UNSUPPORTED, "frozen blocks need a schedule that flushes every step");
    c = spec_cfg(&rs, 0, 4);
    c.transport = "carrier-pigeon";
    expect_bad(c, SC_ERR_INVALID, "\"zmq\", \"local\"");
    c = spec_cfg(&rs, 0, 4);
    c.model_json = "{\"kind\": \"gpt\", \"vocab\": 256}";
    expect_bad(c, SC_ERR_INVALID, "seq_len");
    static const int bad_sum[] = {4, 3}, ones[] = {1, 7};
    c = spec_cfg(&rs, 0, 4);
    c.microbatches = 2;
    c.microbatch_sizes = bad_sum;
    expect_bad(c, SC_ERR_INVALID, "sum to 7, batch_size is 8");
    c.microbatch_sizes = ones;
    c.schedule = "sliced";
    c.sliced_warmup = 1;
    expect_bad(c, SC_ERR_INVALID, "cannot halve");
    run_spec vr = {VGG_JSON, "gpipe", 1, 4, 1, 1, "sgd", "zmq", "text", "/dev/null", NULL, 0};
    c = spec_cfg(&vr, 0, model_blocks(VGG_JSON));
    expect_bad(c, SC_ERR_INVALID, "token models");
}

typedef struct {
    rt_runner *r;
    sc_status rc;
    sc_err err;
} step_job;

static void *step_thread(void *arg)
{
    step_job *j = arg;
    sc_err_clear(&j->err);
    j->rc = rt_runner_step(j->r, 1, NULL, &j->err);
    return NULL;
}

/* Runs step 1 on a 2-stage pipeline, stage `here` (0 or 1) in this thread and the other in a
 * thread, and returns stage `here`'s result (its error in *err); the other stage's result is
 * *rc_other. The other stage is aborted once stage `here` returns, in case it still waits. */
static sc_status two_stage_step(rt_runner_cfg c0, rt_runner_cfg c1, int here, sc_status *rc_other,
                                sc_err *err)
{
    rt_runner *rn[2] = {0};
    sc_err_clear(err);
    assert_int_equal(rt_runner_new(&rn[0], &c0, err), SC_OK);
    assert_int_equal(rt_runner_new(&rn[1], &c1, err), SC_OK);
    assert_int_equal(rt_runner_connect(rn[0], NULL, rt_runner_endpoint(rn[1]), err), SC_OK);
    assert_int_equal(rt_runner_connect(rn[1], rt_runner_endpoint(rn[0]), NULL, err), SC_OK);
    step_job other = {.r = rn[!here]};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, step_thread, &other), 0);
    sc_status rc = rt_runner_step(rn[here], 1, NULL, err);
    rt_runner_abort(rn[!here]);
    pthread_join(th, NULL);
    *rc_other = other.rc;
    for (int s = 0; s < 2; s++)
        rt_runner_destroy(&rn[s]);
    return rc;
}

static void test_per_stage_bad_config(void **state)
{
    (void)state;
    static const int a[] = {3, 5}, b[] = {2, 2, 4}, zero[] = {0, 8}, short_sum[] = {2, 2, 3};
    const run_spec rs = {GPT_JSON, "unequal", 2, 8, 2, 1, "adamw", "local", NULL, NULL, a, 0};
    rt_runner_cfg c = spec_cfg(&rs, 0, 4);
    c.next_sizes = short_sum;
    c.n_next_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "next_sizes sum to 7, batch_size is 8");
    c.next_sizes = zero;
    c.n_next_sizes = 2;
    expect_bad(c, SC_ERR_INVALID, "next_sizes[0] = 0");
    c.next_sizes = b;
    c.n_next_sizes = 0;
    expect_bad(c, SC_ERR_INVALID, "n_next_sizes 0");
    c.n_next_sizes = 3;
    c.prev_sizes = b;
    c.n_prev_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "prev_sizes must be NULL");
    c = spec_cfg(&rs, 1, 4);
    c.prev_sizes = a;
    c.n_prev_sizes = 2;
    c.next_sizes = b;
    c.n_next_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "next_sizes must be NULL");
    c.next_sizes = NULL;
    c.prev_sizes = short_sum;
    c.n_prev_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "prev_sizes sum to 7");
    c.prev_sizes = a;
    c.n_prev_sizes = 2;
    c.schedule = "1f1b";
    expect_bad(c, SC_ERR_UNSUPPORTED, "valid: \"gpipe\", \"unequal\"");
    c.schedule = "gpipe";
    c.replicas = 2;
    expect_bad(c, SC_ERR_UNSUPPORTED, "replicated");
    c.replicas = 1;
    c.microbatch_sizes = short_sum;
    c.microbatches = 3;
    expect_bad(c, SC_ERR_INVALID, "sum to 7, batch_size is 8");

    /* Lists that dispute the neighbour's real cut are found in the first step: stage 1 is told
     * stage 0 cuts [5, 3], but it cuts [3, 5]. Stage 1 runs here: stage 0 would wait for
     * gradients that never come, so it is the one aborted. */
    static const int wrong[] = {5, 3};
    rt_runner_cfg c0 = spec_cfg(&rs, 0, 4);
    c0.next_sizes = b;
    c0.n_next_sizes = 3;
    c = spec_cfg(&rs, 1, 4);
    c.microbatch_sizes = b;
    c.microbatches = 3;
    c.prev_sizes = wrong;
    c.n_prev_sizes = 2;
    sc_status rc0;
    sc_err err;
    sc_status rc = two_stage_step(c0, c, 1, &rc0, &err);
    assert_int_equal(rc, SC_ERR_INVALID);
    if (strstr(err.msg, "prev_sizes must equal stage 0's microbatch_sizes") == NULL)
        print_error("message \"%s\"\n", err.msg);
    assert_non_null(strstr(err.msg, "prev_sizes must equal stage 0's microbatch_sizes"));
    assert_int_not_equal(rc0, SC_OK);
}

static void test_backward_sizes_bad_config(void **state)
{
    (void)state;
    static const int a[] = {3, 5}, b[] = {2, 2, 4}, zero[] = {0, 8}, short_sum[] = {2, 2, 3};
    const run_spec rs = {GPT_JSON, "unequal", 2, 8, 2, 1, "adamw", "local", NULL, NULL, a, 0};
    rt_runner_cfg c = spec_cfg(&rs, 0, 4);
    c.backward_sizes = short_sum;
    c.n_backward_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "backward_sizes sum to 7, batch_size is 8");
    c.backward_sizes = zero;
    c.n_backward_sizes = 2;
    expect_bad(c, SC_ERR_INVALID, "backward_sizes[0] = 0");
    c.backward_sizes = b;
    c.n_backward_sizes = 0;
    expect_bad(c, SC_ERR_INVALID, "n_backward_sizes 0");
    c.n_backward_sizes = 3;
    c.next_backward_sizes = short_sum;
    c.n_next_backward_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "next_backward_sizes sum to 7");
    c = spec_cfg(&rs, 1, 4);
    c.next_backward_sizes = b;
    c.n_next_backward_sizes = 3;
    expect_bad(c, SC_ERR_INVALID, "next_backward_sizes must be NULL");
    /* only the fill-drain path with per-stage sizes runs a backward cut */
    const char *other[] = {"1f1b", "sliced", "pipedream"};
    for (int i = 0; i < 3; i++) {
        c = spec_cfg(&rs, 1, 4);
        c.schedule = other[i];
        c.backward_sizes = b;
        c.n_backward_sizes = 3;
        expect_bad(c, SC_ERR_UNSUPPORTED, "valid: \"gpipe\", \"unequal\"");
        c = spec_cfg(&rs, 0, 4);
        c.schedule = other[i];
        c.next_backward_sizes = b;
        c.n_next_backward_sizes = 3;
        expect_bad(c, SC_ERR_UNSUPPORTED, "next_backward_sizes) with schedule");
    }
    c = spec_cfg(&rs, 1, 4);
    c.backward_sizes = b;
    c.n_backward_sizes = 3;
    c.replicas = 2;
    expect_bad(c, SC_ERR_UNSUPPORTED, "with replicated stages");
    c.replicas = 1;
    c.prev_replicas = 2;
    expect_bad(c, SC_ERR_UNSUPPORTED, "with replicated stages");

    /* Lists that dispute the next stage's real backward cut are found at the first gradient
     * whose size differs: stage 1 runs its backward as [8] while stage 0 is told [4, 4]... */
    static const int eight[] = {8}, fours[] = {4, 4}, two_six[] = {2, 6};
    sc_err err;
    sc_status rc1;
    rt_runner_cfg c0 = spec_cfg(&rs, 0, 4), c1 = spec_cfg(&rs, 1, 4);
    c0.next_backward_sizes = fours;
    c0.n_next_backward_sizes = 2;
    c1.backward_sizes = eight;
    c1.n_backward_sizes = 1;
    sc_status rc = two_stage_step(c0, c1, 0, &rc1, &err);
    assert_int_equal(rc, SC_ERR_INVALID);
    if (strstr(err.msg, "next_backward_sizes must equal stage 1's backward_sizes") == NULL)
        print_error("message \"%s\"\n", err.msg);
    assert_non_null(strstr(err.msg, "next_backward_sizes must equal stage 1's backward_sizes"));
    assert_non_null(strstr(err.msg, "backward entry 0 of stage 1 is not the 4 samples"));
    assert_int_equal(rc1, SC_OK); /* stage 1 sent its gradient and finished */
    /* ... and when stage 0 is not told, its next_sizes (stage 1's forward cut) stand for it */
    c0.next_backward_sizes = NULL;
    c0.n_next_backward_sizes = 0;
    c0.next_sizes = a;
    c0.n_next_sizes = 2;
    c1.backward_sizes = two_six;
    c1.n_backward_sizes = 2;
    rc = two_stage_step(c0, c1, 0, &rc1, &err);
    assert_int_equal(rc, SC_ERR_INVALID);
    if (strstr(err.msg, "next_sizes must equal stage 1's microbatch_sizes; when that stage has "
                        "backward_sizes of its own, give them as next_backward_sizes") == NULL)
        print_error("message \"%s\"\n", err.msg);
    assert_non_null(strstr(err.msg, "give them as next_backward_sizes"));
    assert_int_equal(rc1, SC_OK);
    /* the same lists, told correctly, run */
    c0.next_backward_sizes = two_six;
    c0.n_next_backward_sizes = 2;
    rc = two_stage_step(c0, c1, 0, &rc1, &err);
    assert_int_equal(rc, SC_OK);
    assert_int_equal(rc1, SC_OK);
}

static void test_replicated_bad_config(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "1f1b", 2, 8, 4, 1, "adamw", "local", NULL, NULL, NULL, 0};
    rt_runner_cfg c = spec_cfg(&rs, 0, 4);
    c.replicas = 2;
    c.replica = 2;
    expect_bad(c, SC_ERR_INVALID, "replica 2 of replicas 2");
    c.replicas = 0;
    c.replica = 0;
    expect_bad(c, SC_ERR_INVALID, "replicas >= 1");
    c = spec_cfg(&rs, 1, 4);
    c.prev_replicas = 0;
    expect_bad(c, SC_ERR_INVALID, "prev_replicas 0");
    c = spec_cfg(&rs, 0, 4);
    c.replicas = 5;
    c.replica = 4;
    expect_bad(c, SC_ERR_INVALID, "microbatches >= replicas");
    c = spec_cfg(&rs, 1, 4);
    c.prev_replicas = 8;
    expect_bad(c, SC_ERR_INVALID, "microbatches >= replicas");
    static const int next_cut[] = {4, 4};
    c = spec_cfg(&rs, 0, 4);
    c.replicas = 2;
    c.schedule = "gpipe";
    c.next_sizes = next_cut;
    c.n_next_sizes = 2;
    expect_bad(c, SC_ERR_UNSUPPORTED, "with replicated stages (replicas 2");
    /* 1f1b's warm-up counts the copies of every later stage: beyond the next one it needs the
     * plan's vector */
    const run_spec rs3 = {GPT_JSON, "1f1b", 3, 8, 4, 1, "adamw", "local", NULL, NULL, NULL, 0};
    static const int r211[] = {2, 1, 1};
    c = spec_cfg(&rs3, 0, 4);
    c.replicas = 2;
    expect_bad(c, SC_ERR_INVALID, "needs stage_replicas, the copies of every stage");
    c.stage_replicas = r211;
    rt_runner *ok = NULL;
    sc_err e3;
    sc_err_clear(&e3);
    assert_int_equal(rt_runner_new(&ok, &c, &e3), SC_OK);
    rt_runner_destroy(&ok);

    /* connecting: the plain call is refused, and so are wrong endpoint counts */
    sc_err err;
    sc_err_clear(&err);
    rt_runner *r = NULL;
    c = spec_cfg(&rs, 1, 4);
    c.prev_replicas = 2;
    assert_int_equal(rt_runner_new(&r, &c, &err), SC_OK);
    assert_int_equal(rt_runner_connect(r, "local://x", NULL, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "rt_runner_connect_group"));
    const char *one[] = {"local://a"}, *two[] = {"local://a", ""};
    sc_err_clear(&err);
    assert_int_equal(rt_runner_connect_group(r, one, 1, NULL, 0, NULL, 0, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "1 previous-stage endpoints given, expected 2"));
    sc_err_clear(&err);
    assert_int_equal(rt_runner_connect_group(r, two, 2, NULL, 0, NULL, 0, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "previous-stage endpoint 1 is empty"));
    /* not connected: a step fails cleanly */
    sc_err_clear(&err);
    rt_runner_destroy(&r);
    c = spec_cfg(&rs, 0, 4);
    c.replicas = 2;
    assert_int_equal(rt_runner_new(&r, &c, &err), SC_OK);
    assert_int_equal(rt_runner_step(r, 1, NULL, &err), SC_ERR_PRECONDITION);
    assert_non_null(strstr(err.msg, "connect_group"));
    rt_runner_destroy(&r);
}

/* What pipedream with copies refuses: m not a multiple of every stage's copies (naming the valid
 * counts) and a stage_replicas vector that disputes the stage's own counts. */
static void test_pipedream_replicated_bad_config(void **state)
{
    (void)state;
    static const int r21[] = {2, 1}, r11[] = {1, 1}, r23[] = {2, 3}, r120[] = {1, 2, 0};
    const run_spec rs = {GPT_JSON, "pipedream", 2, 6, 3, 1, "adamw", "local", NULL, NULL, NULL, 0};
    rt_runner_cfg c = spec_cfg(&rs, 0, 4);
    c.replicas = 2;
    c.stage_replicas = r21;
    expect_bad(c, SC_ERR_INVALID, "multiple of every stage's copies");
    expect_bad(c, SC_ERR_INVALID, "copies [2, 1]");
    expect_bad(c, SC_ERR_INVALID, "got 3; valid: 2, 4, ...");
    c = spec_cfg(&rs, 1, 4); /* the unreplicated stage refuses too: its warm-up needs rounds */
    c.prev_replicas = 2;
    expect_bad(c, SC_ERR_INVALID, "valid: 2, 4, ...");
    c = spec_cfg(&rs, 0, 4);
    c.batch_size = 12;
    c.microbatches = 4;
    c.stage_replicas = r23; /* stage 1, unknown to stage 0 but for this vector, has 3 copies */
    c.replicas = 2;
    c.next_replicas = 3;
    expect_bad(c, SC_ERR_INVALID, "got 4; valid: 6, 12, ...");
    c = spec_cfg(&rs, 0, 4);
    c.replicas = 2;
    c.stage_replicas = r11;
    expect_bad(c, SC_ERR_INVALID, "stage_replicas[0] = 1; valid: equal to replicas (2)");
    const run_spec p3 = {GPT_JSON, "pipedream", 3, 8, 4, 1, "adamw", "local", NULL, NULL, NULL, 0};
    c = spec_cfg(&p3, 0, 4);
    c.next_replicas = 2;
    c.stage_replicas = r120;
    expect_bad(c, SC_ERR_INVALID, "stage_replicas[2] = 0");
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_stage_bad_config),
        cmocka_unit_test(test_backward_sizes_bad_config),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_replicated_bad_config),
        cmocka_unit_test(test_pipedream_replicated_bad_config),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
