/* coordinator/jobspec: the job spec of FORMATS.md, valid and invalid. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>
#include <string.h>

#include <stdio.h>

#include "coordinator/jobspec.h"

static const char good[] =
    "{\"format\": \"stagecraft-job\", \"version\": 1, \"name\": \"gpt-demo\",\n"
    " \"model\": {\"kind\": \"gpt\", \"vocab\": 256, \"seq_len\": 64, \"layers\": 4,\n"
    "           \"width\": 128, \"heads\": 4},\n"
    " \"data\": {\"kind\": \"text\", \"path\": \"/usr/share/common-licenses/GPL-3\"},\n"
    " \"batch_size\": 16, \"microbatches\": \"auto\", \"schedule\": \"auto\",\n"
    " \"strategy\": \"hetero\", \"workers\": 4, \"steps\": 200, \"seed\": 1,\n"
    " \"optimizer\": {\"kind\": \"adamw\", \"lr\": 3e-4, \"weight_decay\": 0.0},\n"
    " \"checkpoint_every\": 50}\n";

static void test_good_spec(void **state)
{
    (void)state;
    coord_jobspec spec;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_jobspec_parse("job.json", good, strlen(good), &spec, &err), SC_OK);
    assert_string_equal(spec.name, "gpt-demo");
    assert_string_equal(spec.model_kind, "gpt");
    assert_non_null(strstr(spec.model_json, "\"heads\":4"));
    assert_non_null(strstr(spec.model_json, "\"format\":\"stagecraft-model\""));
    assert_int_equal(spec.data_kind, COORD_DATA_TEXT);
    assert_string_equal(spec.data_path, "/usr/share/common-licenses/GPL-3");
    assert_int_equal(spec.batch_size, 16);
    assert_int_equal(spec.microbatches, 0);
    assert_string_equal(spec.schedule, "auto");
    assert_string_equal(spec.strategy, "hetero");
    assert_int_equal(spec.workers, 4);
    assert_null(spec.worker_names);
    assert_int_equal(spec.steps, 200);
    assert_string_equal(spec.optimizer, "adamw");
    assert_true(spec.lr == 3e-4);
    assert_int_equal(spec.checkpoint_every, 50);
    assert_int_equal(spec.checkpoint_keep, 2);     /* not given: the newest 2 complete ones */
    assert_int_equal(spec.checkpoint_replicas, 1); /* not given: one copy on another worker */
    assert_string_equal(spec.transport, "auto");   /* not given: the coordinator picks */
    assert_string_equal(spec.precision, "auto");   /* not given: the plan resolves it */
    assert_false(spec.zb1_peak_cap);               /* not given: zb1 bounded by device memory */
    coord_jobspec_clear(&spec);
    /* zb1's deferral capped at 1f1b's peak, or by the devices' memory, by name */
    for (int i = 0; i < 2; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%.*s, \"zb1_memory\": \"%s\"}\n",
                 (int)(strrchr(good, '}') - good), good, i ? "1f1b_peak" : "device");
        assert_int_equal(coord_jobspec_parse("job.json", text, strlen(text), &spec, &err), SC_OK);
        assert_int_equal(spec.zb1_peak_cap, i == 1);
        coord_jobspec_clear(&spec);
    }
    /* each precision by name */
    const char *const names[] = {"bf16", "fp16", "tf32", "fp32", "auto"};
    for (int i = 0; i < 5; i++) {
        char text[2048];
        snprintf(text, sizeof text, "%.*s, \"precision\": \"%s\"}\n",
                 (int)(strrchr(good, '}') - good), good, names[i]);
        assert_int_equal(coord_jobspec_parse("job.json", text, strlen(text), &spec, &err), SC_OK);
        assert_string_equal(spec.precision, names[i]);
        coord_jobspec_clear(&spec);
    }
}

static void test_worker_names_and_defaults(void **state)
{
    (void)state;
    const char *text = "{\"format\": \"stagecraft-job\", \"version\": 1, \"name\": \"m\","
                       " \"model\": {\"kind\": \"mlp\", \"sizes\": [4, 2]},"
                       " \"data\": {\"kind\": \"synthetic\"}, \"batch_size\": 8,"
                       " \"microbatches\": 4, \"workers\": [\"a\", \"b\"], \"steps\": 3}";
    coord_jobspec spec;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_jobspec_parse("job.json", text, strlen(text), &spec, &err), SC_OK);
    assert_int_equal(spec.workers, 2);
    assert_string_equal(spec.worker_names[0], "a");
    assert_string_equal(spec.worker_names[1], "b");
    assert_string_equal(spec.transport, "auto");
    assert_null(spec.worker_names[2]);
    assert_int_equal(spec.microbatches, 4);
    assert_string_equal(spec.schedule, "auto");
    assert_string_equal(spec.strategy, "hetero");
    assert_string_equal(spec.optimizer, "adamw");
    assert_int_equal(spec.seed, 1);
    assert_int_equal(spec.workers_min, 0); /* a fixed count */
    assert_true(spec.rebalance_auto);
    coord_jobspec_clear(&spec);

    /* an elastic job, rebalanced only when asked */
    const char *elastic = "{\"format\": \"stagecraft-job\", \"version\": 1, \"name\": \"e\","
                          " \"model\": {\"kind\": \"mlp\", \"sizes\": [4, 2]},"
                          " \"data\": {\"kind\": \"synthetic\"}, \"batch_size\": 8,"
                          " \"workers\": {\"min\": 2, \"max\": 5}, \"steps\": 3,"
                          " \"rebalance\": \"off\"}";
    assert_int_equal(coord_jobspec_parse("job.json", elastic, strlen(elastic), &spec, &err), SC_OK);
    assert_int_equal(spec.workers, 5);
    assert_int_equal(spec.workers_min, 2);
    assert_null(spec.worker_names);
    assert_false(spec.rebalance_auto);
    assert_int_equal(spec.freeze_interval, 0); /* no freezing unless asked */
    coord_jobspec_clear(&spec);

    /* freezing: "auto" looks every tenth of the steps; an object sets both figures */
    char text2[2048];
    snprintf(text2, sizeof text2, "%.*s, \"freeze\": \"auto\"}", (int)(strlen(elastic) - 1),
             elastic);
    assert_int_equal(coord_jobspec_parse("job.json", text2, strlen(text2), &spec, &err), SC_OK);
    assert_int_equal(spec.freeze_interval, 1); /* 3 steps: at least 1 */
    assert_true(spec.freeze_percentile == 50);
    assert_true(spec.freeze_max_change == 0.1);
    coord_jobspec_clear(&spec);
    snprintf(text2, sizeof text2, "%.*s, \"freeze\": {\"interval\": 7, \"percentile\": 30}}",
             (int)(strlen(elastic) - 1), elastic);
    assert_int_equal(coord_jobspec_parse("job.json", text2, strlen(text2), &spec, &err), SC_OK);
    assert_int_equal(spec.freeze_interval, 7);
    assert_true(spec.freeze_percentile == 30);
    coord_jobspec_clear(&spec);
}

/* Replaces the first occurrence of `from` in the good spec by `to` and expects an error whose
 * message contains `want`. */
static void expect_error(const char *from, const char *to, const char *want)
{
    char text[2048];
    const char *at = strstr(good, from);
    assert_non_null(at);
    size_t head = (size_t)(at - good);
    memcpy(text, good, head);
    strcpy(text + head, to);
    strcat(text, at + strlen(from));
    coord_jobspec spec;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = coord_jobspec_parse("job.json", text, strlen(text), &spec, &err);
    if (rc == SC_OK || strstr(err.msg, want) == NULL)
        fail_msg("replacing %s by %s: got rc %d, message '%s', wanted '%s'", from, to, rc, err.msg,
                 want);
}

static void test_bad_specs(void **state)
{
    (void)state;
    expect_error("\"batch_size\": 16", "\"batch_size\": 0",
                 "job.json:5:16: $.batch_size: expected an integer in [1, 1048576], got 0");
    expect_error("\"schedule\": \"auto\"", "\"schedule\": \"auto\", \"precision\": \"bf61\"",
                 "$.precision: expected one of \"auto\", \"bf16\", \"fp16\", \"tf32\", "
                 "\"fp32\", got \"bf61\"");
    /* fp16's loss scale: its own keys, a whole interval, no pipedream */
    expect_error("\"schedule\": \"auto\"",
                 "\"schedule\": \"auto\", \"loss_scale\": {\"intial\": 1024}",
                 "unknown key \"intial\": did you mean \"initial\"?");
    expect_error("\"schedule\": \"auto\"",
                 "\"schedule\": \"auto\", \"loss_scale\": {\"interval\": 2.5}",
                 "loss_scale.interval 2.5 is not a whole number of steps");
    expect_error("\"schedule\": \"auto\"", "\"schedule\": \"pipedream\", \"precision\": \"fp16\"",
                 "precision fp16 needs a dynamic loss scale, which schedule pipedream");
    expect_error("\"schedule\": \"auto\"", "\"schedule\": \"auto\", \"zb1_memory\": \"peak\"",
                 "$.zb1_memory: expected one of \"device\", \"1f1b_peak\", got \"peak\"");
    expect_error("\"schedule\": \"auto\"", "\"schedule\": \"zigzag\"",
                 "$.schedule: expected one of \"auto\", \"gpipe\", \"1f1b\"");
    expect_error("\"kind\": \"gpt\"", "\"kind\": \"rnn\"",
                 "$.model.kind: expected one of \"gpt\", \"vgg\", \"mlp\", \"hf\", got \"rnn\"");
    expect_error("\"heads\": 4", "\"heads\": 3", "$.model");
    expect_error("\"schedule\": \"auto\"", "\"schedule\": \"auto\", \"export\": \"out\"",
                 "$.export: expected an absolute folder path");
    expect_error("\"schedule\": \"auto\"", "\"schedule\": \"auto\", \"export\": 3", "$.export");
    expect_error("\"kind\": \"text\"", "\"kind\": \"tape\"", "$.data.kind: expected one of");
    expect_error("\"path\": \"/usr/share/common-licenses/GPL-3\"", "\"file\": \"x\"",
                 "$.data.file: unknown key \"file\": valid keys here: \"kind\", \"path\"");
    expect_error("\"text\", \"path\": \"/usr/share/common-licenses/GPL-3\"", "\"text\"",
                 "$.data: missing required field \"path\"");
    expect_error("\"microbatches\": \"auto\"", "\"microbatches\": 5",
                 "$.microbatches: 5 micro-batches do not divide the batch of 16 samples");
    /* a fixed micro-batch over the workers' limit (SC_WIRE_MAX_MICROBATCH_SIZE samples) */
    expect_error("\"batch_size\": 16, \"microbatches\": \"auto\"",
                 "\"batch_size\": 1048576, \"microbatches\": 4",
                 "job.json:5:41: $.microbatches: 4 micro-batches of the batch of 1048576 samples "
                 "are 262144 samples each, over the workers' limit of 4096: expected a divisor of "
                 "batch_size in [256, 1048576], or \"auto\"");
    expect_error("\"batch_size\": 16, \"microbatches\": \"auto\"",
                 "\"batch_size\": 8192, \"microbatches\": 1",
                 "expected a divisor of batch_size in [2, 8192]");
    expect_error("\"workers\": 4", "\"workers\": \"four\"",
                 "$.workers: expected a worker count (1 to 1024), a list of worker names, or "
                 "{\"min\": M, \"max\": N} (an elastic job)");
    expect_error("\"workers\": 4", "\"workers\": {\"min\": 0, \"max\": 2}",
                 "$.workers.min: expected an integer in [1, 1024], got 0");
    expect_error("\"workers\": 4", "\"workers\": {\"min\": 2}", "$.workers: missing required");
    expect_error("\"seed\": 1,", "\"seed\": 1, \"rebalance\": \"sometimes\",",
                 "$.rebalance: expected one of \"auto\", \"off\"");
    expect_error("\"seed\": 1,", "\"seed\": 1, \"freeze\": \"always\",",
                 "$.freeze: expected one of \"off\", \"auto\"");
    expect_error("\"seed\": 1,", "\"seed\": 1, \"freeze\": 3,",
                 "$.freeze: expected \"off\", \"auto\" or {\"interval\": STEPS, \"percentile\": "
                 "1..99, \"max_change\": C}");
    expect_error("\"seed\": 1,", "\"seed\": 1, \"freeze\": {\"max_change\": 0},",
                 "$.freeze.max_change: expected a number in [1e-06, 1e+06]");
    expect_error("\"seed\": 1,", "\"seed\": 1, \"freeze\": {\"percentile\": 100},",
                 "$.freeze.percentile: expected a number in [1, 99]");
    expect_error("\"seed\": 1,", "\"seed\": 1, \"freeze\": {\"interval\": 0},",
                 "$.freeze.interval: expected an integer in [1,");
    expect_error("\"schedule\": \"auto\"", "\"schedule\": \"pipedream\", \"freeze\": \"auto\"",
                 "$.freeze: freezing needs a schedule that flushes every step");
    expect_error("\"workers\": 4", "\"workers\": [\"a\", \"a\"]",
                 "$.workers[1]: worker \"a\" is listed twice");
    expect_error("\"steps\": 200", "\"steps\": -1", "$.steps: expected an integer");
    expect_error("\"seed\": 1,", "\"seed\": 1, \"transport\": \"infiniband\",",
                 "$.transport: expected one of \"auto\", \"zmq\", \"nccl\"");
    expect_error("\"lr\": 3e-4", "\"lr\": \"fast\"", "$.optimizer.lr: expected a number");
    expect_error("\"checkpoint_every\": 50", "\"checkpoint_every\": 50, \"checkpoint_keep\": -1",
                 "$.checkpoint_keep: expected an integer in [0, 1000000], got -1");
    expect_error("\"checkpoint_every\": 50", "\"checkpoint_every\": 50, \"checkpoint_keep\": 2.5",
                 "$.checkpoint_keep: expected an integer");
    expect_error("\"checkpoint_every\": 50",
                 "\"checkpoint_every\": 50, \"checkpoint_keep\": \"all\"",
                 "$.checkpoint_keep: expected an integer");
    expect_error("\"checkpoint_every\": 50", "\"checkpoint_every\": 50, \"checkpoint_replicas\": 9",
                 "$.checkpoint_replicas: expected an integer in [0, 8], got 9");
    expect_error("\"checkpoint_every\": 50",
                 "\"checkpoint_every\": 50, \"checkpoint_replicas\": true",
                 "$.checkpoint_replicas: expected an integer");
    expect_error("\"stagecraft-job\"", "\"stagecraft-plan\"",
                 "$.format: expected \"stagecraft-job\", got \"stagecraft-plan\"");
    expect_error("\"version\": 1", "\"version\": 2", "newer than this stagecraft reads");
    expect_error("\"steps\": 200,", "\"steps\": 200,,", "job.json:6:");
    expect_error("\"name\": \"gpt-demo\",", "", "$: missing required field \"name\"");
}

/* Names: a job name that status would print with a newline or an escape sequence in it, and a
 * worker name no worker can register with (the job would wait for it for good), are refused. */
/* A key the format does not have, at any level of the job file, is refused naming it, where it
 * stands, the closest valid key when one is close, and the valid ones: a typo of an optional
 * key must not pass for its absence (checkpoint_evry turned checkpointing off). */
static void test_unknown_keys(void **state)
{
    (void)state;
    expect_error("\"steps\": 200", "\"stpes\": 5, \"steps\": 200",
                 "job.json:6:47: $.stpes: unknown key \"stpes\": did you mean \"steps\"?");
    expect_error("\"checkpoint_every\": 50", "\"checkpoint_evry\": 25",
                 "$.checkpoint_evry: unknown key \"checkpoint_evry\": did you mean "
                 "\"checkpoint_every\"?");
    /* nothing close: the valid keys are listed */
    expect_error("\"seed\": 1", "\"seed\": 1, \"priority\": \"high\"",
                 "$.priority: unknown key \"priority\": valid keys here: \"format\", "
                 "\"version\", \"name\"");
    expect_error("\"path\":", "\"pth\": \"x\", \"path\":",
                 "$.data.pth: unknown key \"pth\": did you mean \"path\"?");
    expect_error("\"lr\": 3e-4", "\"learning_rate\": 3e-4",
                 "$.optimizer.learning_rate: unknown key \"learning_rate\": valid keys here: "
                 "\"kind\", \"lr\", \"weight_decay\", \"momentum\"");
    expect_error("\"workers\": 4", "\"workers\": {\"min\": 1, \"mx\": 2}",
                 "$.workers.mx: unknown key \"mx\": did you mean \"max\"?");
    expect_error("\"checkpoint_every\": 50", "\"freeze\": {\"intervall\": 5}",
                 "$.freeze.intervall: unknown key \"intervall\": did you mean \"interval\"?");
}

static void test_unprintable_and_unregistrable_names(void **state)
{
    (void)state;
    expect_error("\"gpt-demo\"", "\"gpt\\ndemo\"",
                 "$.name: expected a name of 1 to 127 characters, without control characters");
    expect_error("\"gpt-demo\"", "\"\\u001b[31mred\"", "without control characters");
    expect_error("\"gpt-demo\"", "\"tab\\there\"", "without control characters");
    expect_error("\"workers\": 4", "\"workers\": [\"a\", \"b c\"]",
                 "$.workers[1]: expected a worker name as `stagecraft worker --name` takes it: 1 "
                 "to 127 letters, digits, '-', '_' or '.', not starting with '.'");
    expect_error("\"workers\": 4", "\"workers\": [\"../a\"]",
                 "$.workers[0]: expected a worker name");
    expect_error("\"workers\": 4", "\"workers\": [\".a\"]", "$.workers[0]: expected a worker name");
    expect_error("\"workers\": 4", "\"workers\": [\"\"]", "$.workers[0]: expected a worker name");
    char longname[200], to[220];
    memset(longname, 'w', 128);
    longname[128] = '\0';
    snprintf(to, sizeof to, "\"workers\": [\"%s\"]", longname);
    expect_error("\"workers\": 4", to, "$.workers[0]: expected a worker name");
    /* what workers do take, and names in any script */
    const char *text =
        "{\"format\": \"stagecraft-job\", \"version\": 1, \"name\": \"gpt d\u00e9mo \u5b66\","
        " \"model\": {\"kind\": \"mlp\", \"sizes\": [4, 2]},"
        " \"data\": {\"kind\": \"synthetic\"}, \"batch_size\": 8,"
        " \"workers\": [\"host-1.cpu\", \"Gpu_0\"], \"steps\": 3}";
    coord_jobspec spec;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_jobspec_parse("job.json", text, strlen(text), &spec, &err), SC_OK);
    assert_string_equal(spec.name, "gpt d\xc3\xa9mo \xe5\xad\xa6");
    assert_string_equal(spec.worker_names[0], "host-1.cpu");
    coord_jobspec_clear(&spec);
}

/* Micro-batches of the workers' largest size are accepted, and so is an open count whatever the
 * batch (the coordinator profiles sizes up to the limit). */
/* A tied checkpoint (GPT-2 from tests/data/hf): the data plane becomes zmq, nccl and pipedream
 * are refused naming the key. */
static void test_tied_model(void **state)
{
    (void)state;
    char text[2048];
    const char *const tails[] = {"", ", \"transport\": \"nccl\"", ", \"schedule\": \"pipedream\""};
    for (int k = 0; k < 3; k++) {
        snprintf(text, sizeof text,
                 "{\"format\": \"stagecraft-job\", \"version\": 1, \"name\": \"t\", \"model\": "
                 "{\"kind\": \"hf\", \"path\": \"%s/hf/gpt2-tied\", \"seq_len\": 8}, "
                 "\"data\": {\"kind\": \"synthetic\"}, \"batch_size\": 4, \"workers\": 2, "
                 "\"steps\": 3%s}",
                 SC_TEST_DATA_DIR, tails[k]);
        coord_jobspec spec;
        sc_err err;
        sc_err_clear(&err);
        sc_status rc = coord_jobspec_parse("job.json", text, strlen(text), &spec, &err);
        if (k == 0) {
            if (rc != SC_OK)
                fail_msg("%s", err.msg);
            assert_string_equal(spec.transport, "zmq");
            assert_string_equal(spec.model_kind, "hf");
            coord_jobspec_clear(&spec);
        } else {
            assert_int_equal(rc, SC_ERR_INVALID);
            assert_non_null(strstr(err.msg, k == 1 ? "$.transport" : "$.schedule"));
            assert_non_null(strstr(err.msg, "ties"));
        }
    }
}

static void test_microbatch_limit(void **state)
{
    (void)state;
    const char *const texts[] = {
        "{\"format\": \"stagecraft-job\", \"version\": 1, \"name\": \"m\","
        " \"model\": {\"kind\": \"mlp\", \"sizes\": [4, 2]}, \"data\": {\"kind\": \"synthetic\"},"
        " \"batch_size\": 8192, \"microbatches\": 2, \"workers\": 1, \"steps\": 3}",
        "{\"format\": \"stagecraft-job\", \"version\": 1, \"name\": \"m\","
        " \"model\": {\"kind\": \"mlp\", \"sizes\": [4, 2]}, \"data\": {\"kind\": \"synthetic\"},"
        " \"batch_size\": 1048576, \"microbatches\": \"auto\", \"workers\": 1, \"steps\": 3}",
    };
    const uint32_t batches[] = {8192, 1048576}, counts[] = {2, 0};
    for (int i = 0; i < 2; i++) {
        coord_jobspec spec;
        sc_err err;
        sc_err_clear(&err);
        assert_int_equal(coord_jobspec_parse("job.json", texts[i], strlen(texts[i]), &spec, &err),
                         SC_OK);
        assert_int_equal(spec.batch_size, batches[i]);
        assert_int_equal(spec.microbatches, counts[i]);
        coord_jobspec_clear(&spec);
    }
}

static void test_oversized_spec(void **state)
{
    (void)state;
    coord_jobspec spec;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_jobspec_parse("request", good, COORD_JOBSPEC_MAX_BYTES + 1, &spec, &err),
                     SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "limit"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_spec),
        cmocka_unit_test(test_worker_names_and_defaults),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_unprintable_and_unregistrable_names),
        cmocka_unit_test(test_microbatch_limit),
        cmocka_unit_test(test_tied_model),
        cmocka_unit_test(test_oversized_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
