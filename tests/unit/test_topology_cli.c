/* `stagecraft topo`: exit statuses, error messages and the --json output, through the real
 * binary on the fixtures in tests/data/topology/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "common/sc_json.h"

#define DATA SC_TEST_DATA_DIR "/topology/"

/* Runs the binary with `args`, stderr folded into stdout; returns the exit status and the
 * output in a heap buffer. */
static int run(const char *args, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", SC_STAGECRAFT_BIN, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, p)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            assert_non_null(buf);
        }
    }
    buf[n] = '\0';
    int status = pclose(p);
    *out = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_json_output(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(run("topo --json --xml " DATA "gpu_server.xml " DATA "cpu_only.xml", &out), 0);
    sc_jdoc *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "stdout", out, strlen(out), &err), SC_OK);
    assert_int_equal(sc_jdoc_check_format(doc, "stagecraft-cluster", 1, NULL, &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc), servers, s0, devs;
    assert_int_equal(sc_json_get_array(&root, "servers", 2, 2, &servers, &err), SC_OK);
    s0 = sc_jnode_element(&servers, 0);
    assert_int_equal(sc_json_get_array(&s0, "devices", 3, 3, &devs, &err), SC_OK);
    sc_jdoc_destroy(&doc);
    free(out);
}

static void test_human_output(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(run("topo --xml " DATA "mixed_vendor.xml", &out), 0);
    assert_non_null(strstr(out, "server mixed"));
    assert_non_null(strstr(out, "K80"));
    assert_non_null(strstr(out, "UNSUPPORTED"));
    assert_non_null(strstr(out, "pcie_uplink"));
    free(out);
}

static void test_bad_input_exit_2(void **state)
{
    (void)state;
    static const struct {
        const char *args;
        const char *message;
    } cases[] = {
        {"topo --xml " DATA "version3.xml", "version 3.0"},
        {"topo --xml " DATA "truncated.xml", "truncated"},
        {"topo --xml " DATA "duplicate_ids.xml", "gp_index"},
        {"topo --xml " DATA "missing.xml", "missing.xml"},
        {"topo --xml", "--xml needs a FILE"},
        {"topo --frobnicate", "unknown argument"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *out = NULL;
        int rc = run(cases[i].args, &out);
        if (rc != 2 || strstr(out, cases[i].message) == NULL)
            fail_msg("`%s`: exit %d, output: %s", cases[i].args, rc, out);
        /* one line of error before any usage text */
        assert_non_null(strstr(out, "stagecraft topo: "));
        free(out);
    }
}

static void test_help(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(run("topo --help", &out), 0);
    assert_non_null(strstr(out, "usage: stagecraft topo"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_output),
        cmocka_unit_test(test_human_output),
        cmocka_unit_test(test_bad_input_exit_2),
        cmocka_unit_test(test_help),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
