/* coordinator/planner/plan_sim with stages sharing processors (plan_sim_run_shared): against
 * hand-computed timelines, weights and a closed form for GPipe; against the unshared simulator,
 * bit for bit, when no group holds more computes than its capacity; bounds under contention;
 * refused shares; CFS-capped lanes bursting after idle spells. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_schedule.h"
#include "coordinator/planner/plan_sim.h"
#include "planner_sim_harness.h"

static plan_sim_result run_shared(plan_sched_kind k, int p, int m, int sliced,
                                  const plan_sim_stage *st, const plan_sim_share *sh, int record)
{
    return play(k, p, m, sliced, st, sh, 0.9, record);
}

static const plan_sim_event *find_event(const plan_sim_result *r, int lane, int kind, int unit)
{
    for (int e = 0; e < r->n_events; e++)
        if (r->events[e].lane == lane && r->events[e].kind == kind && r->events[e].unit == unit)
            return &r->events[e];
    fail_msg("no event lane %d kind %d unit %d", lane, kind, unit);
    return NULL;
}

static void test_shared_hand_computed(void **state)
{
    (void)state;
    plan_sim_stage st[4];
    equal_stages(st, 2, 1, 1);
    const int group2[2] = {0, 0}, one[1] = {1};
    plan_sim_share sh = {.n_groups = 1, .group = group2, .capacity = one};
    /* GPipe, 2 stages on 1 processor, 2 micro-batches: F0 of stage 0 alone [0,1]; F1 of stage 0
     * and F0 of stage 1 at half rate [1,3]; F1 of stage 1 alone [3,4]; its first backward alone
     * [4,5]; then both stages' backwards at half rate [5,7]; stage 0's last alone [7,8]. The
     * processor never idles: 8 s of work in 8 s, against 6 s on two devices. */
    plan_sim_result r = run_shared(PLAN_SCHED_GPIPE, 2, 2, 0, st, &sh, 1);
    assert_float_equal(r.iteration_s, 8.0, 1e-12);
    const plan_sim_event *a = find_event(&r, 0, PLAN_ACT_F, 1);
    const plan_sim_event *b = find_event(&r, 1, PLAN_ACT_F, 0);
    assert_float_equal(a->start_s, 1.0, 1e-12);
    assert_float_equal(a->dur_s, 2.0, 1e-12);
    assert_float_equal(b->start_s, 1.0, 1e-12);
    assert_float_equal(b->dur_s, 2.0, 1e-12);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_F, 1)->dur_s, 1.0, 1e-12);
    /* busy time is the stretched compute: 1 + 2 + 2 + 1 on stage 0, 2 + 1 + 1 + 2 on stage 1 */
    assert_float_equal(r.busy_s[0], 6.0, 1e-12);
    assert_float_equal(r.busy_s[1], 6.0, 1e-12);
    assert_float_equal(r.idle_s[0], 2.0, 1e-12);
    plan_sim_result_free(&r);

    /* Weights: the same pipeline on 2 processors, stage 0 a stage of 2 copies (weight 2). F1 of
     * stage 0 and F0 of stage 1 overlap with 3 processors' worth of work on 2: each at 2/3,
     * [1, 2.5]; without weights they fit the 2 processors and take 1 s each. */
    const int w21[2] = {2, 1}, two2[1] = {2};
    plan_sim_share shw = {.n_groups = 1, .group = group2, .capacity = two2, .weight = w21};
    r = run_shared(PLAN_SCHED_GPIPE, 2, 2, 0, st, &shw, 1);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_F, 1)->dur_s, 1.5, 1e-12);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_F, 0)->dur_s, 1.5, 1e-12);
    plan_sim_result_free(&r);
    shw.weight = NULL;
    r = run_shared(PLAN_SCHED_GPIPE, 2, 2, 0, st, &shw, 1);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_F, 1)->dur_s, 1.0, 1e-12);
    plan_sim_result_free(&r);

    /* GPipe with p equal stages on c processors, no links: micro-batch j runs on stage s in the
     * wave slot k = s + j of each direction, every stage of a slot starts together, so a slot
     * with w stages takes f * max(1, w / c) forward and b * max(1, w / c) backward, where
     * w = min(k + 1, p, m, m + p - 1 - k). 4 stages on 2 processors: */
    const int group4[4] = {0, 0, 0, 0}, two[1] = {2};
    plan_sim_share sh4 = {.n_groups = 1, .group = group4, .capacity = two};
    const int ms[] = {1, 2, 4, 8};
    const double want_slots[] = {4, 5, 9, 17}; /* sum of max(1, w / 2) over the m + 3 slots */
    equal_stages(st, 4, 1, 2);
    for (int i = 0; i < 4; i++) {
        double slots = 0;
        for (int k = 0; k < ms[i] + 3; k++) {
            int w = k + 1;
            w = w < 4 ? w : 4;
            w = w < ms[i] ? w : ms[i];
            w = w < ms[i] + 3 - k ? w : ms[i] + 3 - k;
            slots += w > 2 ? w / 2.0 : 1.0;
        }
        assert_float_equal(slots, want_slots[i], 0);
        r = run_shared(PLAN_SCHED_GPIPE, 4, ms[i], 0, st, &sh4, 0);
        assert_float_equal(r.iteration_s, 3.0 * want_slots[i], 1e-9);
        /* every stage computes 3 s per micro-batch at rate 1 or stretched */
        for (int s = 0; s < 4; s++)
            assert_true(r.busy_s[s] >= 3.0 * ms[i] - 1e-9);
        plan_sim_result_free(&r);
    }
}

/* CFS-capped lanes (plan_sim_share.quota): a compute after an idle spell runs at full speed
 * until the bucket of q P (1 - q) is spent, so it takes P (1 - q) less than its sustained time;
 * back to back, the sustained time. */
static void test_quota_hand_computed(void **state)
{
    (void)state;
    plan_sim_stage st[2];
    const int none[2] = {-1, -1}, zero_cap[1] = {1};
    const double half[2] = {0.5, 0.5}, period[2] = {1.0, 1.0};
    /* one stage at q 0.5, P 1 s (bucket 0.25 s), GPipe over 2 micro-batches of F 2 s, B 4 s
     * sustained: F0 runs 0.5 s at full speed (1 s of its sustained time) and the rest at the
     * quota: 1.5 s; F1, B1, B0 follow at once: 2, 4 and 4 s. 11.5 s against 12. */
    equal_stages(st, 1, 2, 4);
    plan_sim_share sh = {.n_groups = 0,
                         .group = none,
                         .capacity = zero_cap,
                         .quota = half,
                         .quota_period_s = period};
    plan_sim_result r = run_shared(PLAN_SCHED_GPIPE, 1, 2, 0, st, &sh, 1);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_F, 0)->dur_s, 1.5, 1e-12);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_F, 1)->dur_s, 2.0, 1e-12);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_B, 0)->dur_s, 4.0, 1e-12);
    assert_float_equal(r.iteration_s, 11.5, 1e-12);
    plan_sim_result_free(&r);

    /* two stages of F 1 s, B 1 s, one micro-batch; only stage 1 capped (q 0.5, P 1 s). Its F0
     * starts at 1 s with a full bucket (it waited since 0) and ends with it at 1.5 s; its B0
     * has no tokens left: [1.5, 2.5]; stage 0's B0 [2.5, 3.5]. */
    const double second[2] = {0, 0.5};
    equal_stages(st, 2, 1, 1);
    sh.quota = second;
    r = run_shared(PLAN_SCHED_GPIPE, 2, 1, 0, st, &sh, 1);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_F, 0)->start_s, 1.0, 1e-12);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_F, 0)->dur_s, 0.5, 1e-12);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_B, 0)->dur_s, 1.0, 1e-12);
    assert_float_equal(find_event(&r, 0, PLAN_ACT_F, 0)->dur_s, 1.0, 1e-12); /* uncapped */
    assert_float_equal(r.iteration_s, 3.5, 1e-12);
    plan_sim_result_free(&r);

    /* a compute shorter than the bucket holds runs at full speed throughout: F 0.2 s sustained
     * at q 0.5 takes 0.1 s, spending 0.05 s of the 0.25 s bucket */
    equal_stages(st, 2, 0.2, 1);
    r = run_shared(PLAN_SCHED_GPIPE, 2, 1, 0, st, &sh, 1);
    assert_float_equal(find_event(&r, 1, PLAN_ACT_F, 0)->dur_s, 0.1, 1e-12);
    /* B0 then starts with 0.2 s of tokens: full speed for 0.4 s (0.8 s sustained), then 0.2 s */
    assert_float_equal(find_event(&r, 1, PLAN_ACT_B, 0)->dur_s, 0.6, 1e-12);
    plan_sim_result_free(&r);

    /* no quota anywhere (all 0) and no groups: plan_sim_run's figures, bit for bit */
    const double zeros[2] = {0, 0};
    sh.quota = zeros;
    equal_stages(st, 2, 1, 2);
    plan_sim_result a = run_shared(PLAN_SCHED_1F1B, 2, 4, 0, st, &sh, 0);
    plan_sim_result b = play(PLAN_SCHED_1F1B, 2, 4, 0, st, NULL, 0.9, 0);
    assert_true(a.iteration_s == b.iteration_s);
    plan_sim_result_free(&a);
    plan_sim_result_free(&b);

    /* a share outside (0, 1) or a period <= 0: refused, naming the lane */
    const double bad[2] = {0.5, 1.5};
    sh.quota = bad;
    plan_schedule *sc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_schedule_build(&sc, PLAN_SCHED_GPIPE, 2, 2, 0, &err), SC_OK);
    assert_int_equal(plan_sim_run_shared(sc, st, 2, 1.0, &sh, 0, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stage 1 has share 1.5"));
    const double no_period[2] = {1.0, 0};
    sh.quota = half;
    sh.quota_period_s = no_period;
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_shared(sc, st, 2, 1.0, &sh, 0, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "period of 0 s"));
    plan_schedule_destroy(&sc);
}

static void test_shared_without_contention_is_unshared(void **state)
{
    (void)state;
    /* unequal stages and links, so that stages overlap at odd times */
    plan_sim_stage st[4] = {
        {.fwd_s = 1.3, .bwd_s = 2.1, .opt_s = 0.4, .send_fwd_s = 0.3, .send_bwd_s = 0.2},
        {.fwd_s = 0.7, .bwd_s = 1.9, .opt_s = 0.1, .send_fwd_s = 0.6, .send_bwd_s = 0.5},
        {.fwd_s = 1.1, .bwd_s = 0.8, .opt_s = 0.3, .send_fwd_s = 0.1, .send_bwd_s = 0.7},
        {.fwd_s = 0.9, .bwd_s = 1.7, .opt_s = 0.2}};
    const int all[4] = {0, 0, 0, 0}, singles[4] = {0, -1, 1, 2}, none[4] = {-1, -1, -1, -1};
    const int cap4[1] = {4}, cap9[1] = {9}, ones[3] = {1, 1, 1};
    const plan_sim_share shares[] = {
        {.n_groups = 1, .group = all, .capacity = cap4},     /* capacity = stages */
        {.n_groups = 1, .group = all, .capacity = cap9},     /* more than enough */
        {.n_groups = 3, .group = singles, .capacity = ones}, /* groups of one stage */
        {.n_groups = 1, .group = none, .capacity = cap4},    /* nobody grouped: the sweep */
    };
    const plan_sched_kind kinds[] = {PLAN_SCHED_GPIPE, PLAN_SCHED_1F1B, PLAN_SCHED_PIPEDREAM,
                                     PLAN_SCHED_SLICED};
    for (int x = 0; x < 4; x++)
        for (int k = 0; k < 4; k++)
            for (int p = 1; p <= 4; p++) {
                plan_schedule *s = NULL;
                sc_err err;
                int m = 8, units = kinds[k] == PLAN_SCHED_PIPEDREAM ? 8 * p : m;
                assert_int_equal(plan_schedule_build(&s, kinds[k], p, units,
                                                     kinds[k] == PLAN_SCHED_SLICED, &err),
                                 SC_OK);
                assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
                plan_sim_result a, b;
                plan_sim_share sh = shares[x];
                assert_int_equal(plan_sim_run(s, st, m, 0.9, 1, &a, &err), SC_OK);
                assert_int_equal(plan_sim_run_shared(s, st, m, 0.9, &sh, 1, &b, &err), SC_OK);
                assert_same_result(&a, &b);
                plan_sim_result_free(&a);
                plan_sim_result_free(&b);
                if (x == 0) {
                    assert_int_equal(plan_sim_run_shared(s, st, m, 0.9, NULL, 1, &b, &err), SC_OK);
                    assert_int_equal(plan_sim_run(s, st, m, 0.9, 1, &a, &err), SC_OK);
                    assert_same_result(&a, &b);
                    plan_sim_result_free(&a);
                    plan_sim_result_free(&b);
                }
                plan_schedule_destroy(&s);
            }
}

static void test_shared_contention_bounds(void **state)
{
    (void)state;
    /* 1F1B and PipeDream, 4 stages on 1 or 2 processors: never faster than on a device each,
     * never faster than the work divided by the processors, busy time stretched. */
    plan_sim_stage st[4];
    equal_stages(st, 4, 1, 2);
    const int all[4] = {0, 0, 0, 0};
    for (int c = 1; c <= 2; c++) {
        plan_sim_share sh = {.n_groups = 1, .group = all, .capacity = &c};
        plan_sim_result base = run(PLAN_SCHED_1F1B, 4, 8, 0, st, 0);
        plan_sim_result r = run_shared(PLAN_SCHED_1F1B, 4, 8, 0, st, &sh, 0);
        assert_true(r.iteration_s >= base.iteration_s - 1e-9);
        assert_true(r.iteration_s >= 4 * 8 * 3.0 / c - 1e-9);
        for (int s = 0; s < 4; s++)
            assert_true(r.busy_s[s] >= 8 * 3.0 - 1e-9);
        plan_sim_result_free(&base);
        plan_sim_result_free(&r);
        /* PipeDream's steady state: 4 stages each 3 s per minibatch on c processors */
        r = run_shared(PLAN_SCHED_PIPEDREAM, 4, 10, 0, st, &sh, 0);
        assert_float_equal(r.steady_s, 4 * 3.0 / c, 1e-9);
        assert_float_equal(r.bubble_fraction, 0.0, 1e-9);
        plan_sim_result_free(&r);
    }
}

static void test_shared_invalid(void **state)
{
    (void)state;
    plan_schedule *s = NULL;
    plan_sim_stage st[2];
    plan_sim_result r;
    sc_err err;
    equal_stages(st, 2, 1, 1);
    assert_int_equal(plan_schedule_build(&s, PLAN_SCHED_GPIPE, 2, 2, 0, &err), SC_OK);
    const int bad_group[2] = {0, 1}, good_group[2] = {0, 0}, zero[1] = {0}, one[1] = {1};
    plan_sim_share sh = {.n_groups = 1, .group = bad_group, .capacity = one};
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_shared(s, st, 2, 1.0, &sh, 0, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stage 1 is in group 1"));
    sh = (plan_sim_share){.n_groups = 1, .group = good_group, .capacity = zero};
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_shared(s, st, 2, 1.0, &sh, 0, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "group 0 has capacity 0"));
    const int no_weight[2] = {1, 0};
    sh = (plan_sim_share){.n_groups = 1, .group = good_group, .capacity = one, .weight = no_weight};
    sc_err_clear(&err);
    assert_int_equal(plan_sim_run_shared(s, st, 2, 1.0, &sh, 0, &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stage 1 has weight 0"));
    plan_schedule_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_hand_computed),
        cmocka_unit_test(test_shared_without_contention_is_unshared),
        cmocka_unit_test(test_shared_contention_bounds),
        cmocka_unit_test(test_shared_invalid),
        cmocka_unit_test(test_quota_hand_computed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
