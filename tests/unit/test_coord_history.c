/* coordinator/history and the store's series: thinning, the bound, a resumed run's steps,
 * reopening, and the worker's steps between reports (worker/report_steps). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/history.h"
#include "coordinator/store.h"
#include "worker/report_steps.h"

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/sc_history_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static coord_history_point point(uint64_t step)
{
    return (coord_history_point){step, 10.0 / (double)step, true, 0, false, 0.01, 1000};
}

static void test_thin(void **state)
{
    (void)state;
    coord_history_point p[8];
    for (int i = 0; i < 8; i++)
        p[i] = point((uint64_t)i + 1);
    assert_int_equal(coord_history_thin(p, 2), 2);
    assert_int_equal(coord_history_thin(p, 1), 1);
    /* 1..7: even indices 0,2,4,6 -> steps 1,3,5,7 (the newest among them) */
    assert_int_equal(coord_history_thin(p, 7), 4);
    assert_int_equal(p[0].step, 1);
    assert_int_equal(p[1].step, 3);
    assert_int_equal(p[3].step, 7);
    for (int i = 0; i < 8; i++)
        p[i] = point((uint64_t)i + 1);
    /* 1..8: steps 1,3,5,7 and the newest, 8 */
    assert_int_equal(coord_history_thin(p, 8), 5);
    assert_int_equal(p[3].step, 7);
    assert_int_equal(p[4].step, 8);
    assert_float_equal(p[4].loss, 10.0 / 8, 1e-12);
}

/* 250 steps one by one into a series bounded at 100 (the coordinator's is COORD_HISTORY_MAX,
 * the same way): never more than 100 points, the first and the newest kept, steps increasing,
 * the newest 40 steps all there (dense), and the figures as recorded (a loss not measured stays
 * so). */
static void test_bounded_series(void **state)
{
    (void)state;
    coord_store *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_store_open(&s, dir, &err), SC_OK);
    for (uint64_t step = 1; step <= 250; step++) {
        coord_history_point p = point(step);
        p.has_loss = step != 2; /* one step without a loss */
        p.samples_per_s_known = step > 1;
        p.samples_per_s = 100.0 + (double)step;
        assert_int_equal(coord_store_history_add(s, "job-1", &p, 1, 100, &err), SC_OK);
        if (step == 100 || step == 101) {
            coord_history_point *pts = NULL;
            size_t n = 0;
            assert_int_equal(coord_store_history_get(s, "job-1", &pts, &n, &err), SC_OK);
            assert_int_equal(n, step == 100 ? 100 : 51); /* 101 points thinned to 51 */
            free(pts);
        }
    }
    coord_history_point *pts = NULL;
    size_t n = 0;
    assert_int_equal(coord_store_history_get(s, "job-1", &pts, &n, &err), SC_OK);
    assert_true(n > 50 && n <= 100);
    assert_int_equal(pts[0].step, 1);
    assert_false(pts[0].samples_per_s_known);
    assert_false(pts[1].has_loss && pts[1].step == 2);
    assert_int_equal(pts[n - 1].step, 250);
    assert_float_equal(pts[n - 1].loss, 10.0 / 250, 1e-12);
    assert_float_equal(pts[n - 1].samples_per_s, 350.0, 1e-9);
    for (size_t i = 1; i < n; i++)
        assert_true(pts[i].step > pts[i - 1].step);
    for (size_t i = n - 40; i < n; i++) /* dense at the newest end */
        assert_int_equal(pts[i].step, pts[i - 1].step + 1);
    free(pts);
    /* another job's series is its own */
    assert_int_equal(coord_store_history_get(s, "job-2", &pts, &n, &err), SC_OK);
    assert_int_equal(n, 0);
    assert_null(pts);
    coord_store_close(&s);
}

/* A batch of steps in one call; a run that resumes from an earlier step replaces the steps of
 * the run that did not last; the series survives reopening the store. */
static void test_resume_and_reopen(void **state)
{
    (void)state;
    coord_store *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_store_open(&s, dir, &err), SC_OK);
    coord_history_point batch[10];
    for (int i = 0; i < 10; i++)
        batch[i] = point((uint64_t)i + 1);
    batch[4].has_loss = false;
    assert_int_equal(coord_store_history_add(s, "job-7", batch, 10, COORD_HISTORY_MAX, &err),
                     SC_OK);
    coord_history_point again = point(6); /* resumed from step 5's checkpoint */
    again.loss = 99;
    assert_int_equal(coord_store_history_add(s, "job-7", &again, 1, COORD_HISTORY_MAX, &err),
                     SC_OK);
    coord_store_close(&s);
    assert_int_equal(coord_store_open(&s, dir, &err), SC_OK);
    coord_history_point *pts = NULL;
    size_t n = 0;
    assert_int_equal(coord_store_history_get(s, "job-7", &pts, &n, &err), SC_OK);
    assert_int_equal(n, 6);
    assert_int_equal(pts[5].step, 6);
    assert_float_equal(pts[5].loss, 99, 0);
    assert_false(pts[4].has_loss);
    assert_true(pts[3].has_loss);
    free(pts);
    coord_store_close(&s);
}

/* The worker's steps between two reports: only steps with a loss, a new trainer starts afresh,
 * a full buffer keeps every other step and the newest, sending empties it. */
static void test_report_steps(void **state)
{
    (void)state;
    wk_report_steps *rs = calloc(1, sizeof *rs);
    assert_non_null(rs);
    Stagecraft__IterationReport r = STAGECRAFT__ITERATION_REPORT__INIT;
    for (uint64_t step = 1; step <= 3; step++) {
        r.step = step;
        r.loss = (double)step;
        r.has_loss = step != 2;
        wk_report_steps_add(rs, &r, 1, "job-1");
    }
    assert_int_equal(rs->n, 2);
    Stagecraft__IterationReport out = STAGECRAFT__ITERATION_REPORT__INIT;
    wk_report_steps_attach(rs, &out);
    assert_int_equal(out.n_steps, 2);
    assert_int_equal(out.steps[1]->step, 3);
    wk_report_steps_sent(rs, &out);
    assert_null(out.steps);
    assert_int_equal(rs->n, 0);
    r.has_loss = true;
    for (uint64_t step = 1; step <= WK_REPORT_STEPS_MAX + 1; step++) {
        r.step = step;
        wk_report_steps_add(rs, &r, 1, "job-1");
    }
    assert_int_equal(rs->n, WK_REPORT_STEPS_MAX / 2 + 1);
    assert_int_equal(rs->fig[0].step, 2);
    assert_int_equal(rs->fig[rs->n - 1].step, WK_REPORT_STEPS_MAX + 1);
    r.step = 1; /* a new trainer (generation 2) */
    wk_report_steps_add(rs, &r, 2, "job-1");
    assert_int_equal(rs->n, 1);
    free(rs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thin),
        cmocka_unit_test_setup_teardown(test_bounded_series, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_resume_and_reopen, make_dir, remove_dir),
        cmocka_unit_test(test_report_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
