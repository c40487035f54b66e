/* common/sc_status, sc_log, sc_clock, sc_util: the error record, string tables, parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_status.h"
#include "common/sc_util.h"

static void test_status_strings(void **state)
{
    (void)state;
    assert_string_equal(sc_status_str(SC_OK), "ok");
    assert_string_equal(sc_status_name(SC_ERR_PARSE), "SC_ERR_PARSE");
    assert_string_equal(sc_status_str(SC_ERR_TOO_LARGE), "resource exhausted");
    assert_string_equal(sc_status_str((sc_status)9999), "unknown status");
    /* every status has a distinct, non-empty name */
    for (int i = 0; i < SC_STATUS_COUNT; i++) {
        assert_true(strlen(sc_status_str((sc_status)i)) > 0);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(sc_status_name((sc_status)i), sc_status_name((sc_status)j));
    }
}

static sc_status fails_twice(sc_err *err)
{
    SC_ERRF(err, SC_ERR_IO, "first %d", 1);
    return SC_ERRF(err, SC_ERR_INTERNAL, "second");
}

static void test_first_error_wins(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(fails_twice(&err), SC_ERR_INTERNAL);
    assert_int_equal(err.code, SC_ERR_IO);
    assert_string_equal(err.msg, "first 1");
    assert_non_null(strstr(err.file, "test_status.c"));
    assert_true(err.line > 0);
    sc_err_prefix(&err, "loading %s", "x.json");
    assert_string_equal(err.msg, "loading x.json: first 1");
    /* NULL err is accepted */
    assert_int_equal(SC_ERRF(NULL, SC_ERR_INVALID, "ignored"), SC_ERR_INVALID);
    /* a bad input's bytes quoted in a message keep it one line of text */
    sc_err_clear(&err);
    SC_ERRF(&err, SC_ERR_PARSE, "bad name \"%s\"", "a\nb\x1b[2Jc\x7f\tü");
    assert_string_equal(err.msg, "bad name \"a?b?[2Jc??ü\"");
    sc_err_prefix(&err, "file %s", "x\ry");
    assert_string_equal(err.msg, "file x?y: bad name \"a?b?[2Jc??ü\"");
}

static sc_status checked(int fail, int *reached)
{
    sc_status rc = SC_OK;
    SC_CHECK_GOTO(fail ? SC_ERR_TIMEOUT : SC_OK, out);
    *reached = 1;
out:
    return rc;
}

static void test_check_macros(void **state)
{
    (void)state;
    int reached = 0;
    assert_int_equal(checked(1, &reached), SC_ERR_TIMEOUT);
    assert_int_equal(reached, 0);
    assert_int_equal(checked(0, &reached), SC_OK);
    assert_int_equal(reached, 1);
}

static void test_parse_numbers(void **state)
{
    (void)state;
    sc_err err;
    int64_t v;
    double d;
    sc_err_clear(&err);
    assert_int_equal(sc_parse_int64("42", 0, 100, "--n", &v, &err), SC_OK);
    assert_int_equal(v, 42);
    assert_int_equal(sc_parse_int64("4x", 0, 100, "--n", &v, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--n"));
    assert_non_null(strstr(err.msg, "'4x'"));
    sc_err_clear(&err);
    assert_int_equal(sc_parse_int64("101", 0, 100, "--n", &v, &err), SC_ERR_INVALID);
    assert_int_equal(sc_parse_double("1e9", 0, 1e12, "--bandwidth", &d, &err), SC_OK);
    assert_true(d == 1e9);
    assert_int_equal(sc_parse_double("nan", 0, 1, "--x", &d, &err), SC_ERR_INVALID);
    assert_int_equal(sc_parse_double("", 0, 1, "--x", &d, &err), SC_ERR_INVALID);
}

/* One HOST:PORT check for every address flag: ports outside 16 bits used to wrap silently. */
/* One holder at a time: a second open of the lock file (flock locks belong to the open file, so
 * this works within one process) is refused with the holder's pid, and free once it closes. */
static void test_lock_file(void **state)
{
    (void)state;
    char path[] = "/tmp/test_status_lock_XXXXXX";
    int tmp = mkstemp(path);
    assert_true(tmp >= 0);
    close(tmp);
    sc_err err;
    sc_err_clear(&err);
    int a = -1, b = -1;
    long holder = -1;
    assert_int_equal(sc_lock_file(path, &a, &holder, &err), SC_OK);
    assert_true(a >= 0);
    assert_int_equal(sc_lock_file(path, &b, &holder, &err), SC_ERR_EXISTS);
    assert_int_equal(b, -1);
    assert_int_equal(holder, (long)getpid());
    assert_non_null(strstr(err.msg, path));
    close(a);
    sc_err_clear(&err);
    assert_int_equal(sc_lock_file(path, &b, &holder, &err), SC_OK);
    close(b);
    unlink(path);
    assert_int_equal(sc_lock_file("/nonexistent-dir/x.lock", &b, &holder, &err), SC_ERR_IO);
}

static void test_parse_hostport(void **state)
{
    (void)state;
    sc_err err;
    char host[64];
    int port = -1;
    static const struct {
        const char *s;
        bool zero_ok;
        const char *host;
        int port;
    } good[] = {
        {"127.0.0.1:7070", false, "127.0.0.1", 7070},
        {"coord.example:1", false, "coord.example", 1},
        {"h:65535", false, "h", 65535},
        {"127.0.0.1:0", true, "127.0.0.1", 0},
        {"[::1]:7070", false, "[::1]", 7070},
        {"0.0.0.0:08080", true, "0.0.0.0", 8080},
    };
    for (size_t i = 0; i < SC_ARRAY_LEN(good); i++) {
        sc_err_clear(&err);
        if (sc_parse_hostport(good[i].s, good[i].zero_ok, "--listen", host, sizeof host, &port,
                              &err) != SC_OK)
            fail_msg("'%s' refused: %s", good[i].s, err.msg);
        assert_string_equal(host, good[i].host);
        assert_int_equal(port, good[i].port);
    }
    static const struct {
        const char *s;
        bool zero_ok;
        const char *says;
    } bad[] = {
        {"127.0.0.1:99999", true, "not an integer in [0, 65535] (0 picks a free one)"},
        {"127.0.0.1:65536", false, "not an integer in [1, 65535]"},
        {"127.0.0.1:-1", true, "the port '-1'"},
        {"127.0.0.1:0", false, "[1, 65535]"},
        {"notahost:abc", false, "the port 'abc'"},
        {"127.0.0.1: 80", false, "the port ' 80'"},
        {"127.0.0.1:+80", false, "the port '+80'"},
        {"127.0.0.1:0x50", false, "the port '0x50'"},
        {"127.0.0.1:", false, "the port ''"},
        {"127.0.0.1", false, "expected HOST:PORT"},
        {":7070", false, "the host is empty"},
        {"[]:7070", false, "the host is empty"},
        {"my host:7070", false, "white space"},
        {"::1:7070", false, "in brackets"},
        {"", false, "empty value"},
    };
    for (size_t i = 0; i < SC_ARRAY_LEN(bad); i++) {
        sc_err_clear(&err);
        port = -1;
        if (sc_parse_hostport(bad[i].s, bad[i].zero_ok, "--coordinator", host, sizeof host, &port,
                              &err) != SC_ERR_INVALID)
            fail_msg("'%s' accepted", bad[i].s);
        if (strstr(err.msg, bad[i].says) == NULL || strstr(err.msg, "--coordinator") == NULL)
            fail_msg("'%s': message \"%s\" lacks \"%s\" or the flag", bad[i].s, err.msg,
                     bad[i].says);
        if (bad[i].s[0] != '\0')
            assert_non_null(strstr(err.msg, bad[i].s));
        assert_int_equal(port, -1);
    }
    sc_err_clear(&err);
    assert_int_equal(
        sc_parse_hostport("a-rather-long-host-name:80", false, "--x", host, 8, NULL, &err),
        SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "longer than 7"));
    sc_err_clear(&err);
    assert_int_equal(sc_parse_hostport("h:80", false, "--x", NULL, 0, NULL, &err), SC_OK);
}

static void test_strlcpy_and_file_read(void **state)
{
    (void)state;
    char small[4];
    assert_int_equal(sc_strlcpy(small, "abcdef", sizeof small), 6);
    assert_string_equal(small, "abc");

    char path[] = "/tmp/sc_test_util_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "hello world", 11), 11);
    close(fd);
    char *buf = NULL;
    size_t len = 0;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_file_read(path, 100, &buf, &len, &err), SC_OK);
    assert_int_equal(len, 11);
    assert_string_equal(buf, "hello world");
    free(buf);
    assert_int_equal(sc_file_read(path, 5, &buf, &len, &err), SC_ERR_TOO_LARGE);
    assert_null(buf);
    assert_non_null(strstr(err.msg, path));
    unlink(path);
    sc_err_clear(&err);
    assert_int_equal(sc_file_read("/nonexistent/x", 5, &buf, &len, &err), SC_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/x"));
}

static void test_clock_monotonic(void **state)
{
    (void)state;
    uint64_t a = sc_clock_now_ns();
    sc_clock_sleep_ms(2);
    uint64_t b = sc_clock_now_ns();
    assert_true(b >= a + 2000000ull);
}

static void test_log_levels(void **state)
{
    (void)state;
    sc_log_level lvl;
    assert_true(sc_log_level_parse("DEBUG", &lvl));
    assert_int_equal(lvl, SC_LOG_DEBUG);
    assert_false(sc_log_level_parse("loud", &lvl));
    sc_log_set_level(SC_LOG_WARN);
    assert_false(sc_log_enabled(SC_LOG_INFO));
    assert_true(sc_log_enabled(SC_LOG_ERROR));
    sc_log_set_level(SC_LOG_INFO);
    assert_true(sc_log_enabled(SC_LOG_INFO));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_first_error_wins),
        cmocka_unit_test(test_check_macros),
        cmocka_unit_test(test_parse_numbers),
        cmocka_unit_test(test_parse_hostport),
        cmocka_unit_test(test_lock_file),
        cmocka_unit_test(test_strlcpy_and_file_read),
        cmocka_unit_test(test_clock_monotonic),
        cmocka_unit_test(test_log_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
