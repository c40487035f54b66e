/* common/sc_logring and sc_log_keep_lines: the bounded ring of recent log lines. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_log.h"
#include "common/sc_logring.h"

static void push_n(sc_logring *r, int from, int to)
{
    char line[64];
    for (int i = from; i <= to; i++) {
        snprintf(line, sizeof line, "line %d\n", i);
        sc_logring_push(r, line);
    }
}

static void test_empty_and_bad_capacity(void **state)
{
    (void)state;
    sc_logring *r = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_logring_new(&r, 0, &err), SC_ERR_INVALID);
    assert_null(r);
    assert_int_equal(sc_logring_new(&r, 4, &err), SC_OK);
    sc_logring_line *lines = NULL;
    size_t n = 99;
    uint64_t newest = 99;
    assert_int_equal(sc_logring_read(r, 0, 0, &lines, &n, &newest, &err), SC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(newest, 0);
    sc_logring_lines_free(&lines, n);
    sc_logring_destroy(&r);
    assert_null(r);
    sc_logring_destroy(&r); /* accepts NULL */
}

/* Ten lines into a ring of four: the newest four are kept, in order, newline dropped. */
static void test_keeps_newest(void **state)
{
    (void)state;
    sc_logring *r = NULL;
    assert_int_equal(sc_logring_new(&r, 4, NULL), SC_OK);
    push_n(r, 1, 10);
    sc_logring_line *lines = NULL;
    size_t n = 0;
    uint64_t newest = 0;
    assert_int_equal(sc_logring_read(r, 0, 0, &lines, &n, &newest, NULL), SC_OK);
    assert_int_equal(newest, 10);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++) {
        char want[32];
        snprintf(want, sizeof want, "line %zu", 7 + i);
        assert_string_equal(lines[i].text, want);
        assert_int_equal(lines[i].seq, 7 + i);
    }
    sc_logring_lines_free(&lines, n);
    assert_null(lines);
    /* the newest 2 only */
    assert_int_equal(sc_logring_read(r, 0, 2, &lines, &n, &newest, NULL), SC_OK);
    assert_int_equal(n, 2);
    assert_string_equal(lines[0].text, "line 9");
    assert_string_equal(lines[1].text, "line 10");
    sc_logring_lines_free(&lines, n);
    sc_logring_destroy(&r);
}

/* A follower's cursor: only lines after it; one older than the ring holds gets what is kept;
 * one beyond the newest (an earlier process's) reads from the start. */
static void test_cursor(void **state)
{
    (void)state;
    sc_logring *r = NULL;
    assert_int_equal(sc_logring_new(&r, 8, NULL), SC_OK);
    push_n(r, 1, 5);
    sc_logring_line *lines = NULL;
    size_t n = 0;
    uint64_t newest = 0;
    assert_int_equal(sc_logring_read(r, 3, 0, &lines, &n, &newest, NULL), SC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(lines[0].seq, 4);
    assert_string_equal(lines[1].text, "line 5");
    sc_logring_lines_free(&lines, n);
    assert_int_equal(sc_logring_read(r, 5, 0, &lines, &n, &newest, NULL), SC_OK);
    assert_int_equal(n, 0);
    sc_logring_lines_free(&lines, n);
    push_n(r, 6, 20); /* holds 13..20 */
    assert_int_equal(sc_logring_read(r, 2, 0, &lines, &n, &newest, NULL), SC_OK);
    assert_int_equal(n, 8);
    assert_int_equal(lines[0].seq, 13);
    sc_logring_lines_free(&lines, n);
    assert_int_equal(sc_logring_read(r, 500, 3, &lines, &n, &newest, NULL), SC_OK);
    assert_int_equal(n, 3);
    assert_int_equal(lines[2].seq, 20);
    assert_int_equal(newest, 20);
    sc_logring_lines_free(&lines, n);
    sc_logring_destroy(&r);
}

/* A line longer than the slot is cut, never overflowing. */
static void test_long_line_cut(void **state)
{
    (void)state;
    sc_logring *r = NULL;
    assert_int_equal(sc_logring_new(&r, 2, NULL), SC_OK);
    char *big = malloc(3 * SC_LOGRING_LINE_MAX);
    assert_non_null(big);
    memset(big, 'x', 3 * SC_LOGRING_LINE_MAX - 1);
    big[3 * SC_LOGRING_LINE_MAX - 1] = '\0';
    sc_logring_push(r, big);
    free(big);
    sc_logring_line *lines = NULL;
    size_t n = 0;
    assert_int_equal(sc_logring_read(r, 0, 0, &lines, &n, NULL, NULL), SC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(strlen(lines[0].text), SC_LOGRING_LINE_MAX - 1);
    sc_logring_lines_free(&lines, n);
    sc_logring_destroy(&r);
}

/* The logger's ring: what sc_log writes at or above the level is kept, with its prefix. */
static void test_log_keeps_lines(void **state)
{
    (void)state;
    assert_null(sc_log_ring());
    sc_log_set_level(SC_LOG_INFO);
    assert_int_equal(sc_log_keep_lines(3, NULL), SC_OK);
    sc_logring *ring = sc_log_ring();
    assert_non_null(ring);
    assert_int_equal(sc_log_keep_lines(10, NULL), SC_OK); /* keeps the first */
    assert_ptr_equal(sc_log_ring(), ring);
    SC_LOG_INFO("test", "kept %d", 1);
    SC_LOG_DEBUG("test", "below the level");
    SC_LOG_WARN("test", "kept %d", 2);
    sc_logring_line *lines = NULL;
    size_t n = 0;
    assert_int_equal(sc_logring_read(ring, 0, 0, &lines, &n, NULL, NULL), SC_OK);
    assert_int_equal(n, 2);
    assert_non_null(strstr(lines[0].text, " I [test] kept 1"));
    assert_non_null(strstr(lines[1].text, " W [test] kept 2"));
    assert_int_equal(lines[0].text[4], '-'); /* starts with its timestamp */
    assert_int_equal(lines[0].text[23], 'Z');
    sc_logring_lines_free(&lines, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_and_bad_capacity),
        cmocka_unit_test(test_keeps_newest),
        cmocka_unit_test(test_cursor),
        cmocka_unit_test(test_long_line_cut),
        cmocka_unit_test(test_log_keeps_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
