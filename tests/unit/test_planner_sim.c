/* coordinator/planner/plan_schedule + plan_sim: schedules against hand-computed timelines,
 * the pipeline bubble (p-1)/(m+p-1), stash counts, link serialisation, validation failures
 * and the Chrome trace. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_schedule.h"
#include "coordinator/planner/plan_sim.h"

static plan_sim_result run(plan_sched_kind k, int p, int m, int sliced, const plan_sim_stage *st,
                           int record)
{
    plan_schedule *s = NULL;
    plan_sim_result r;
    sc_err err;
    sc_err_clear(&err);
    int units = k == PLAN_SCHED_PIPEDREAM ? 8 * p : m;
    assert_int_equal(plan_schedule_build(&s, k, p, units, sliced, &err), SC_OK);
    assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
    assert_int_equal(plan_sim_run(s, st, m, 1.0, record, &r, &err), SC_OK);
    plan_schedule_destroy(&s);
    return r;
}

static void equal_stages(plan_sim_stage *st, int p, double f, double b)
{
    for (int i = 0; i < p; i++) {
        memset(&st[i], 0, sizeof st[i]);
        st[i].fwd_s = f;
        st[i].bwd_s = b;
    }
}

static void test_bubble_equal_stages(void **state)
{
    (void)state;
    plan_sim_stage st[8];
    const int ps[] = {1, 2, 3, 4, 8}, ms[] = {1, 2, 4, 8, 16};
    for (int a = 0; a < 5; a++)
        for (int c = 0; c < 5; c++) {
            int p = ps[a], m = ms[c];
            equal_stages(st, p, 1.0, 2.0);
            double want = (double)(p - 1) / (m + p - 1);
            plan_sim_result g = run(PLAN_SCHED_GPIPE, p, m, 0, st, 0);
            assert_float_equal(g.iteration_s, (m + p - 1) * 3.0, 1e-9);
            assert_float_equal(g.bubble_fraction, want, 1e-12);
            for (int s = 0; s < p; s++) {
                assert_float_equal(g.peak_inflight[s], m, 0);
                assert_float_equal(g.busy_s[s], 3.0 * m, 1e-9);
            }
            plan_sim_result_free(&g);
            if (m < p)
                continue;
            plan_sim_result o = run(PLAN_SCHED_1F1B, p, m, 0, st, 0);
            assert_float_equal(o.iteration_s, (m + p - 1) * 3.0, 1e-9);
            assert_float_equal(o.bubble_fraction, want, 1e-12);
            /* 1F1B stashes at most min(p - s, m) micro-batches */
            for (int s = 0; s < p; s++)
                assert_float_equal(o.peak_inflight[s], p - s < m ? p - s : m, 0);
            plan_sim_result_free(&o);
        }
}

static void test_links_hand_computed(void **state)
{
    (void)state;
    plan_sim_stage st[2] = {{.fwd_s = 1, .bwd_s = 1, .send_fwd_s = 0.5, .send_bwd_s = 0.5},
                            {.fwd_s = 1, .bwd_s = 1}};
    /* F0 [0,1], arrives 1.5, F0 [1.5,2.5], B0 [2.5,3.5], grad arrives 4, B0 [4,5] */
    plan_sim_result r = run(PLAN_SCHED_GPIPE, 2, 1, 0, st, 0);
    assert_float_equal(r.iteration_s, 5.0, 1e-12);
    plan_sim_result_free(&r);
    /* transfers slower than compute queue on the link: one at a time.
     * acts: [1,3] [3,5]; stage 1: F [3,4] [5,6], B [6,7] [7,8]; grads [7,9] [9,11];
     * stage 0: B [9,10] [11,12] */
    st[0].send_fwd_s = st[0].send_bwd_s = 2;
    r = run(PLAN_SCHED_GPIPE, 2, 2, 0, st, 1);
    assert_float_equal(r.iteration_s, 12.0, 1e-12);
    assert_float_equal(r.busy_s[0], 4.0, 1e-12);
    assert_float_equal(r.idle_s[1], 8.0, 1e-12);
    plan_sim_result_free(&r);
    /* optimizer step at the flush */
    st[0].send_fwd_s = st[0].send_bwd_s = 0;
    st[0].opt_s = st[1].opt_s = 0.25;
    r = run(PLAN_SCHED_GPIPE, 2, 1, 0, st, 0);
    assert_float_equal(r.iteration_s, 4.25, 1e-12);
    plan_sim_result_free(&r);
}

static void test_pipedream_steady_state(void **state)
{
    (void)state;
    plan_sim_stage st[3];
    equal_stages(st, 3, 1, 2);
    plan_sim_result r = run(PLAN_SCHED_PIPEDREAM, 3, 10, 0, st, 0);
    /* no flush: one minibatch per max(f + b) */
    assert_float_equal(r.steady_s, 3.0, 1e-9);
    assert_float_equal(r.iteration_s, 30.0, 1e-9);
    assert_float_equal(r.bubble_fraction, 0.0, 1e-9);
    plan_sim_result_free(&r);
    st[1].fwd_s = 2;
    st[1].bwd_s = 3;
    r = run(PLAN_SCHED_PIPEDREAM, 3, 10, 0, st, 0);
    assert_float_equal(r.steady_s, 5.0, 1e-9);
    assert_float_equal(r.bubble_fraction, 1 - (3 + 5 + 3) / (3 * 5.0), 1e-9);
    plan_sim_result_free(&r);
    plan_schedule *s = NULL;
    sc_err err;
    assert_int_equal(plan_schedule_build(&s, PLAN_SCHED_PIPEDREAM, 4, 8, 0, &err), SC_OK);
    assert_int_equal(s->weight_versions, 3);
    plan_schedule_destroy(&s);
}

static void test_sliced_warmup(void **state)
{
    (void)state;
    plan_sim_stage st[4];
    equal_stages(st, 4, 1, 1);
    plan_sim_result base = run(PLAN_SCHED_1F1B, 4, 4, 0, st, 0);
    plan_sim_result none = run(PLAN_SCHED_SLICED, 4, 4, 0, st, 0);
    assert_float_equal(none.iteration_s, base.iteration_s, 1e-12);
    /* halves let downstream stages start after half a forward */
    plan_sim_result one = run(PLAN_SCHED_SLICED, 4, 4, 1, st, 0);
    assert_true(one.iteration_s < base.iteration_s - 1e-9);
    plan_schedule *s = NULL;
    sc_err err;
    assert_int_equal(plan_schedule_build(&s, PLAN_SCHED_SLICED, 4, 4, 2, &err), SC_OK);
    assert_int_equal(s->n_units, 6);
    assert_true(s->frac[0] == 0.5 && s->frac[3] == 0.5 && s->frac[4] == 1.0);
    plan_schedule_destroy(&s);
    plan_sim_result_free(&base);
    plan_sim_result_free(&none);
    plan_sim_result_free(&one);
}

static plan_schedule *hand(int stages, int units)
{
    plan_schedule *s = NULL;
    sc_err err;
    assert_int_equal(plan_schedule_new(&s, stages, units, &err), SC_OK);
    return s;
}

static void expect_invalid(plan_schedule *s, const char *needle)
{
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_schedule_validate(s, &err), SC_ERR_INVALID);
    if (strstr(err.msg, needle) == NULL)
        print_error("message: %s\n", err.msg);
    assert_non_null(strstr(err.msg, needle));
    plan_schedule_destroy(&s);
}

static void test_validation(void **state)
{
    (void)state;
    sc_err err;
    /* backward before forward */
    plan_schedule *s = hand(1, 1);
    plan_schedule_push(s, 0, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_F, 0, &err);
    expect_invalid(s, "before its forward");
    /* a missing backward */
    s = hand(1, 2);
    plan_schedule_push(s, 0, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_F, 1, &err);
    expect_invalid(s, "unit 1 lacks its backward");
    /* a send with no matching receive */
    s = hand(2, 1);
    plan_schedule_push(s, 0, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_SEND_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_RECV_B, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_SEND_B, 0, &err);
    expect_invalid(s, "do not match");
    /* both stages wait for each other */
    s = hand(2, 1);
    plan_schedule_push(s, 0, PLAN_ACT_RECV_B, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_SEND_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_RECV_F, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 1, PLAN_ACT_SEND_B, 0, &err);
    expect_invalid(s, "deadlock");
    /* every generated schedule is valid */
    for (int k = 0; k < PLAN_SCHED_COUNT; k++)
        for (int p = 1; p <= 5; p++)
            for (int m = 1; m <= 7; m++) {
                assert_int_equal(plan_schedule_build(&s, (plan_sched_kind)k, p, m,
                                                     k == PLAN_SCHED_SLICED ? m / 2 : 0, &err),
                                 SC_OK);
                assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
                plan_schedule_destroy(&s);
            }
    assert_int_equal(plan_schedule_build(&s, PLAN_SCHED_GPIPE, 2, 0, 0, &err), SC_ERR_INVALID);
    assert_int_equal(plan_sched_parse("1f1b"), PLAN_SCHED_1F1B);
    assert_int_equal(plan_sched_parse("zero"), -1);
}

static void test_trace(void **state)
{
    (void)state;
    plan_sim_stage st[2] = {{.fwd_s = 1, .bwd_s = 1, .send_fwd_s = 0.5, .send_bwd_s = 0.5},
                            {.fwd_s = 1, .bwd_s = 1}};
    plan_sim_result r = run(PLAN_SCHED_1F1B, 2, 3, 0, st, 1);
    /* 6 compute actions and the optimizer step per stage + 3 transfers each way */
    assert_int_equal(r.n_events, 2 * 7 + 2 * 3);
    FILE *f = tmpfile();
    assert_non_null(f);
    sc_err err;
    assert_int_equal(plan_sim_write_trace(&r, f, NULL, &err), SC_OK);
    long len = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)len + 1);
    assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    assert_non_null(root);
    json_t *ev = json_object_get(root, "traceEvents");
    assert_true(json_is_array(ev));
    int complete = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") == 0)
            complete++;
    }
    assert_int_equal(complete, r.n_events);
    json_decref(root);
    free(text);
    plan_sim_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bubble_equal_stages),
        cmocka_unit_test(test_links_hand_computed),
        cmocka_unit_test(test_pipedream_steady_state),
        cmocka_unit_test(test_sliced_warmup),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
