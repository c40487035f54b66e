/*
 * Timing marks of a context on the CPU (device.h): the pool's bounds, readings in order, the
 * elapsed seconds between two marks and the host time of a passed one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "common/sc_clock.h"
#include "kernels/device.h"

static void test_marks_cpu(void **state)
{
    (void)state;
    kn_ctx *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_ctx_new(&c, (kn_device){KN_DEV_CPU, 0}, KN_PREC_FP32, &err), SC_OK);
    assert_int_equal(kn_ctx_mark(c, 0, &err), SC_ERR_INVALID); /* no pool yet */
    assert_int_equal(kn_ctx_marks(c, 3, &err), SC_OK);
    sc_err_clear(&err);
    uint64_t before = sc_clock_now_ns();
    assert_int_equal(kn_ctx_mark(c, 0, &err), SC_OK);
    struct timespec ts = {0, 2000000}; /* 2 ms between the marks: the work being timed */
    nanosleep(&ts, NULL);
    assert_int_equal(kn_ctx_mark(c, 2, &err), SC_OK);
    double s;
    assert_int_equal(kn_ctx_mark_elapsed(c, 0, 2, &s, &err), SC_OK);
    assert_true(s >= 0.002);
    uint64_t seen;
    assert_int_equal(kn_ctx_mark_sync(c, 0, &seen, &err), SC_OK);
    assert_true(seen >= before && seen <= sc_clock_now_ns());
    assert_int_equal(kn_ctx_mark(c, 3, &err), SC_ERR_INVALID);
    assert_int_equal(kn_ctx_mark_elapsed(c, -1, 0, &s, &err), SC_ERR_INVALID);
    assert_int_equal(kn_ctx_marks(c, 0, &err), SC_OK); /* dropped */
    assert_int_equal(kn_ctx_mark(c, 0, &err), SC_ERR_INVALID);
    assert_int_equal(kn_ctx_marks(c, 5, &err), SC_OK); /* destroyed with the context */
    kn_ctx_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_marks_cpu)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
