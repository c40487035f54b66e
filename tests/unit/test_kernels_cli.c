/*
 * `stagecraft profile` end to end: runs the real binary on a small spec and checks the profile
 * it writes, and that bad input exits 2 with a message naming the file, flag or JSON path.
 */
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

static char out_path[] = "/tmp/kn_cli_profile_XXXXXX";
static char err_path[] = "/tmp/kn_cli_stderr_XXXXXX";

/* Runs `stagecraft profile ARGS`, stdout to /dev/null, stderr to err_path; returns the exit
 * status. */
static int run_profile(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' profile %s >/dev/null 2>'%s'", SC_STAGECRAFT_BIN, args,
             err_path);
    int st = system(cmd);
    assert_true(st != -1 && WIFEXITED(st));
    return WEXITSTATUS(st);
}

static int stderr_has(const char *needle)
{
    char buf[8192];
    FILE *f = fopen(err_path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (strstr(buf, needle) == NULL) {
        fprintf(stderr, "stderr was: %s\nexpected: %s\n", buf, needle);
        return 0;
    }
    return 1;
}

static int setup(void **state)
{
    (void)state;
    int a = mkstemp(out_path), b = mkstemp(err_path);
    if (a < 0 || b < 0)
        return -1;
    close(a);
    close(b);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(out_path);
    unlink(err_path);
    return 0;
}

static void test_profile_writes_json(void **state)
{
    (void)state;
    char args[1024];
    snprintf(args, sizeof args,
             "--model %s/kernels/gpt_tiny.json --microbatch 1,2 --warmup 0 --repeats 1 --out %s",
             SC_TEST_DATA_DIR, out_path);
    assert_int_equal(run_profile(args), 0);
    json_error_t jerr;
    json_t *doc = json_load_file(out_path, 0, &jerr);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "format")), "stagecraft-profile");
    assert_string_equal(json_string_value(json_object_get(doc, "model")), "gpt-tiny");
    assert_string_equal(json_string_value(json_object_get(doc, "reference_device")), "cpu");
    assert_int_equal(json_integer_value(json_object_get(doc, "microbatch_size")), 2);
    json_t *blocks = json_object_get(doc, "blocks");
    assert_int_equal(json_array_size(blocks), 6);
    json_t *head = json_array_get(blocks, 5);
    assert_string_equal(json_string_value(json_object_get(head, "name")), "head");
    /* per-position losses of 2 samples x 16 positions */
    assert_int_equal(json_integer_value(json_object_get(head, "activation_bytes")), 2 * 16 * 4);
    assert_int_equal(json_array_size(json_object_get(head, "by_microbatch_size")), 2);
    json_decref(doc);
}

static void test_profile_bad_input(void **state)
{
    (void)state;
    char args[1024];
    snprintf(args, sizeof args, "--model %s/kernels/bad_heads.json", SC_TEST_DATA_DIR);
    assert_int_equal(run_profile(args), 2);
    assert_true(stderr_has("bad_heads.json:2:"));
    assert_true(stderr_has("$.width: width 30 is not divisible by heads 4"));

    snprintf(args, sizeof args, "--model %s/kernels/gpt_tiny.json --microbatch 1,0",
             SC_TEST_DATA_DIR);
    assert_int_equal(run_profile(args), 2);
    assert_true(stderr_has("--microbatch"));

    /* sizes out of order, repeated or with a trailing comma: refused, not written into a
     * profile whose by_microbatch_size the planner then refuses */
    static const char *const bad_lists[] = {"2,1", "1,1", "1,"};
    for (size_t i = 0; i < sizeof bad_lists / sizeof *bad_lists; i++) {
        snprintf(args, sizeof args, "--model %s/kernels/gpt_tiny.json --microbatch %s",
                 SC_TEST_DATA_DIR, bad_lists[i]);
        assert_int_equal(run_profile(args), 2);
        assert_true(stderr_has("--microbatch"));
    }
    assert_true(stderr_has("--microbatch: expected up to"));

    snprintf(args, sizeof args, "--model %s/kernels/gpt_tiny.json --device tpu", SC_TEST_DATA_DIR);
    assert_int_equal(run_profile(args), 2);
    assert_true(stderr_has("unknown device 'tpu'"));

    assert_int_equal(run_profile("--microbatch 2"), 2);
    assert_true(stderr_has("--model SPEC is required"));

    assert_int_equal(run_profile("--model /nonexistent/spec.json"), 2);
    assert_true(stderr_has("/nonexistent/spec.json"));
}

/* An --out that cannot be written is refused before the model is even loaded (so before
 * profiling), naming the path and the reason, and no file is left behind. */
static void test_profile_unwritable_out(void **state)
{
    (void)state;
    char args[1024], dir[] = "/tmp/kn_cli_out_XXXXXX";
    assert_non_null(mkdtemp(dir));
    snprintf(args, sizeof args, "--model %s/kernels/gpt_tiny.json --out %s/missing/p.json",
             SC_TEST_DATA_DIR, dir);
    assert_int_equal(run_profile(args), 2);
    assert_true(stderr_has("/missing/p.json: cannot write the file: No such file or directory"));

    /* a folder, and a path below a regular file (ENOTDIR: also refused when run as root) */
    snprintf(args, sizeof args, "--model %s/kernels/gpt_tiny.json --out %s", SC_TEST_DATA_DIR, dir);
    assert_int_equal(run_profile(args), 2);
    assert_true(stderr_has("Is a directory"));
    snprintf(args, sizeof args, "--model %s/kernels/gpt_tiny.json --out %s/x", SC_TEST_DATA_DIR,
             out_path);
    assert_int_equal(run_profile(args), 2);
    assert_true(stderr_has("Not a directory"));

    /* checked first: a model that does not exist is not what is reported */
    snprintf(args, sizeof args, "--model /nonexistent/spec.json --out %s/missing/p.json", dir);
    assert_int_equal(run_profile(args), 2);
    assert_true(stderr_has("--out"));

    /* a writable new path is checked without being left behind when the run fails later */
    snprintf(args, sizeof args, "--model /nonexistent/spec.json --out %s/new.json", dir);
    assert_int_equal(run_profile(args), 2);
    char path[128];
    snprintf(path, sizeof path, "%s/new.json", dir);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_writes_json),
        cmocka_unit_test(test_profile_bad_input),
        cmocka_unit_test(test_profile_unwritable_out),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
