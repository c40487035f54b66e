/* `stagecraft plan`: exit statuses, one-line errors, the table, --json and --trace, through
 * the real binary on the fixtures in tests/data/planner/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DATA SC_TEST_DATA_DIR "/planner/"

/* Runs `stagecraft plan ARGS`; stdout and stderr go to separate heap buffers. */
static int run(const char *args, char **out, char **errtext)
{
    static const char *const paths[] = {"/tmp/test_planner_cli_out", "/tmp/test_planner_cli_err"};
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' plan %s >%s.%d 2>%s.%d", SC_STAGECRAFT_BIN, args, paths[0],
             (int)getpid(), paths[1], (int)getpid());
    int status = system(cmd);
    char *bufs[2];
    for (int i = 0; i < 2; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s.%d", paths[i], (int)getpid());
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        rewind(f);
        bufs[i] = calloc(1, (size_t)n + 1);
        assert_int_equal(fread(bufs[i], 1, (size_t)n, f), (size_t)n);
        fclose(f);
        unlink(path);
    }
    *out = bufs[0];
    *errtext = bufs[1];
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#define NEED_BINARY()                                                                              \
    do {                                                                                           \
        if (access(SC_STAGECRAFT_BIN, X_OK) != 0)                                                  \
            skip();                                                                                \
    } while (0)

static void test_table_and_json(void **state)
{
    (void)state;
    NEED_BINARY();
    char *out, *err;
    assert_int_equal(run("--model " DATA "tiny.json --cluster " DATA "cluster2.json", &out, &err),
                     0);
    assert_non_null(strstr(out, "strategy"));
    assert_non_null(strstr(out, "hetero"));
    assert_non_null(strstr(out, "lower bound"));
    free(out), free(err);
    assert_int_equal(run("--model " DATA "tiny.graph.txt --gpus 3 --bandwidth 1e9 --strategy "
                         "minmax --json --microbatches 4 --batch 8",
                         &out, &err),
                     0);
    json_error_t jerr;
    json_t *root = json_loads(out, 0, &jerr);
    assert_non_null(root);
    json_t *plans = json_object_get(root, "plans");
    assert_int_equal(json_array_size(plans), 1);
    json_t *p = json_array_get(plans, 0);
    assert_string_equal(json_string_value(json_object_get(p, "strategy")), "minmax");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(p, "microbatches"), "count")), 4);
    json_decref(root);
    free(out), free(err);
}

static void test_trace(void **state)
{
    (void)state;
    NEED_BINARY();
    char path[64], args[512], *out, *err;
    snprintf(path, sizeof path, "/tmp/test_planner_cli_trace.%d.json", (int)getpid());
    snprintf(args, sizeof args,
             "--model " DATA "tiny.json --gpus 2 --bandwidth 1e9 --strategy uniform --trace %s",
             path);
    assert_int_equal(run(args, &out, &err), 0);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    assert_non_null(root);
    assert_true(json_array_size(json_object_get(root, "traceEvents")) > 4);
    json_decref(root);
    unlink(path);
    free(out), free(err);
}

static void bad(const char *args, const char *needle)
{
    char *out, *err;
    assert_int_equal(run(args, &out, &err), 2);
    if (strstr(err, needle) == NULL)
        print_error("stderr: %s\n", err);
    assert_non_null(strstr(err, needle));
    free(out), free(err);
}

static void test_bad_input(void **state)
{
    (void)state;
    NEED_BINARY();
    bad("--model " DATA "bad_field.json --gpus 2 --bandwidth 1e9", "$.blocks[1].forward_s");
    bad("--model " DATA "bad_metric.graph.txt --gpus 2 --bandwidth 1e9", "bad_metric.graph.txt:2:");
    bad("--model " DATA "tiny.json --cluster " DATA "bad_cluster_bw.json",
        "nic_bandwidth_bytes_per_s");
    bad("--model " DATA "tiny.json --gpus 2 --bandwidth 0", "--bandwidth");
    bad("--model " DATA "tiny.json --gpus 2 --bandwidth 1e9 --stages 3", "more stages");
    bad("--model " DATA "tiny.json --cluster " DATA "small_memory.json", "more than any device");
    bad("--model " DATA "tiny.json --gpus 2 --bandwidth 1e9 --strategy nosuch", "--strategy");
    bad("--gpus 2 --bandwidth 1e9", "--model");
    bad("--model " DATA "tiny.json --gpus 2 --bandwidth 1e9 --batch 16777216",
        "--batch: '16777216' is not an integer in [1, 1048576]");
    bad("--model " DATA " --gpus 2 --bandwidth 1e9", "is a directory, expected a file");
}

/* An unknown flag is named, with the valid ones, wherever it stands: given last, it used to be
 * taken for a flag missing its value. */
static void test_unknown_flag(void **state)
{
    (void)state;
    NEED_BINARY();
    const char *args[] = {"--model " DATA "tiny.json --gpus 2 --bandwidth 1e9 --bogus",
                          "--model " DATA "tiny.json --bogus 3 --gpus 2 --bandwidth 1e9",
                          "--bogus"};
    for (size_t i = 0; i < sizeof args / sizeof *args; i++) {
        char *out, *err;
        assert_int_equal(run(args[i], &out, &err), 2);
        if (strstr(err, "unknown flag '--bogus'") == NULL)
            print_error("stderr: %s\n", err);
        assert_non_null(strstr(err, "unknown flag '--bogus'"));
        assert_non_null(strstr(err, "valid flags: --model, --cluster, --gpus, --bandwidth"));
        assert_null(strstr(err, "needs a value"));
        /* the message is the first line; the usage follows */
        assert_true(strchr(err, '\n') > strstr(err, "--trace"));
        assert_string_equal(out, "");
        free(out), free(err);
    }
    /* a known flag without its value still says so */
    bad("--model " DATA "tiny.json --gpus 2 --bandwidth", "--bandwidth needs a value");
}

/* A --trace that cannot be written is refused before planning: one line naming the path, exit
 * status 2, no table and no trace. */
static void test_trace_unwritable(void **state)
{
    (void)state;
    NEED_BINARY();
    char *out, *err;
    assert_int_equal(run("--model " DATA "tiny.json --gpus 2 --bandwidth 1e9 --trace "
                         "/nonexistent/dir/t.json",
                         &out, &err),
                     2);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "--trace /nonexistent/dir/t.json: cannot write the file"));
    assert_int_equal(strchr(err, '\n') - err, (long)strlen(err) - 1); /* one line */
    free(out), free(err);
    bad("--model " DATA "tiny.json --gpus 2 --bandwidth 1e9 --trace /tmp",
        "--trace /tmp: is a directory");
    /* a writable path still gets its trace, and a failing run leaves none behind */
    char path[64], args[512];
    snprintf(path, sizeof path, "/tmp/test_planner_cli_trace2.%d.json", (int)getpid());
    unlink(path);
    snprintf(args, sizeof args,
             "--model " DATA "bad_field.json --gpus 2 --bandwidth 1e9 --trace %s", path);
    assert_int_equal(run(args, &out, &err), 2);
    assert_int_not_equal(access(path, F_OK), 0);
    free(out), free(err);
}

/* Control characters in a profile's names (a terminal escape, a newline) never reach the table
 * raw: they print as '?', as in error messages. */
static void test_control_characters(void **state)
{
    (void)state;
    NEED_BINARY();
    char *out, *err;
    /* 1 MB devices: every strategy that checks memory fails on block 0's stash, naming it */
    assert_int_equal(run("--model " DATA "control_chars.json --gpus 2 --bandwidth 1e9 --memory 1e6 "
                         "--batch 1 --microbatches 1",
                         &out, &err),
                     0);
    for (const char *c = out; *c; c++)
        if (*c != '\n' && ((unsigned char)*c < 0x20 || *c == 0x7f))
            fail_msg("control character 0x%02x at offset %d of the table", (unsigned char)*c,
                     (int)(c - out));
    assert_non_null(strstr(out, "model evil?[2J?model: 2 blocks"));
    assert_non_null(strstr(out, "block 0 \"a?[31m?b\""));
    free(out), free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_and_json),   cmocka_unit_test(test_trace),
        cmocka_unit_test(test_bad_input),        cmocka_unit_test(test_unknown_flag),
        cmocka_unit_test(test_trace_unwritable), cmocka_unit_test(test_control_characters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
