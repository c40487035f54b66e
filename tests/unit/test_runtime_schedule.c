/* worker/runtime/schedule: gpipe and 1f1b action lists, their activation slots, and validation
 * of broken hand-made lists (F after B, missing receive, deadlock); lists restricted to the
 * micro-batches of stage replicas and their replicated dry run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "worker/runtime/schedule.h"

static int count_kind(const rt_schedule *s, int st, rt_action_kind k)
{
    int n = 0;
    for (int i = 0; i < s->count[st]; i++)
        n += s->actions[st][i].kind == k;
    return n;
}

static void test_generated_schedules(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    for (int kind = 0; kind < 2; kind++) {
        for (int p = 1; p <= 6; p++) {
            for (int m = 1; m <= 9; m++) {
                rt_schedule *s = NULL;
                assert_int_equal(rt_schedule_new(&s, (rt_schedule_kind)kind, p, m, &err), SC_OK);
                for (int st = 0; st < p; st++) {
                    assert_int_equal(count_kind(s, st, RT_ACT_F), m);
                    assert_int_equal(count_kind(s, st, RT_ACT_B), m);
                    assert_int_equal(count_kind(s, st, RT_ACT_RECV_F), st > 0 ? m : 0);
                    assert_int_equal(count_kind(s, st, RT_ACT_SEND_B), st > 0 ? m : 0);
                    assert_int_equal(count_kind(s, st, RT_ACT_SEND_F), st < p - 1 ? m : 0);
                    assert_int_equal(s->actions[st][s->count[st] - 1].kind, RT_ACT_OPT);
                    int bound = rt_schedule_slots_bound((rt_schedule_kind)kind, p, st, m);
                    /* the generated lists use exactly the textbook slot count */
                    assert_int_equal(s->slots[st], bound);
                }
                rt_schedule_destroy(&s);
                assert_null(s);
            }
        }
    }
    /* 1f1b, p=4, m=8: stage 0 keeps at most 4 micro-batches, stage 3 at most 1 */
    rt_schedule *s = NULL;
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_1F1B, 4, 8, &err), SC_OK);
    assert_int_equal(s->slots[0], 4);
    assert_int_equal(s->slots[3], 1);
    /* stage 1: warm-up of 2 forwards, then F(2) B(0) */
    const rt_action *a = s->actions[1];
    assert_int_equal(a[0].kind, RT_ACT_RECV_F);
    assert_int_equal(a[1].kind, RT_ACT_F);
    assert_int_equal(a[1].mb, 0);
    assert_int_equal(a[7].kind, RT_ACT_F);
    assert_int_equal(a[7].mb, 2);
    assert_int_equal(a[10].kind, RT_ACT_B);
    assert_int_equal(a[10].mb, 0);
    rt_schedule_destroy(&s);
    rt_schedule_destroy(&s); /* NULL accepted */
}

static void swap(rt_action *x, rt_action *y)
{
    rt_action t = *x;
    *x = *y;
    *y = t;
}

static int find(const rt_schedule *s, int st, rt_action_kind k, int mb)
{
    for (int i = 0; i < s->count[st]; i++)
        if (s->actions[st][i].kind == k && s->actions[st][i].mb == mb)
            return i;
    fail();
    return -1;
}

static void test_validation_rejects(void **state)
{
    (void)state;
    sc_err err;
    rt_schedule *s = NULL;

    /* B before F on one stage */
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_GPIPE, 1, 2, &err), SC_OK);
    swap(&s->actions[0][find(s, 0, RT_ACT_F, 1)], &s->actions[0][find(s, 0, RT_ACT_B, 1)]);
    assert_int_equal(rt_schedule_validate(s, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "before its F"));
    rt_schedule_destroy(&s);

    /* a forward of micro-batch 0 twice (and none of 1) */
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_GPIPE, 2, 2, &err), SC_OK);
    s->actions[1][find(s, 1, RT_ACT_RECV_F, 1)].mb = 0;
    assert_int_equal(rt_schedule_validate(s, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "twice"));
    rt_schedule_destroy(&s);

    /* a deadlock: stage 1 waits for the gradient of mb 1 before sending mb 0's activation...
     * here: stage 0 receives B(0) before it sends F(0). */
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_1F1B, 2, 1, &err), SC_OK);
    {
        rt_action *a0 = s->actions[0]; /* F0 SEND_F0 RECV_B0 B0 OPT */
        swap(&a0[1], &a0[2]);          /* F0 RECV_B0 SEND_F0 ... */
    }
    assert_int_equal(rt_schedule_validate(s, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "deadlock"));
    rt_schedule_destroy(&s);

    /* OPT in the middle */
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_GPIPE, 1, 2, &err), SC_OK);
    swap(&s->actions[0][0], &s->actions[0][s->count[0] - 1]);
    assert_int_equal(rt_schedule_validate(s, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "OPT"));
    rt_schedule_destroy(&s);

    /* a missing send: drop stage 0's last SEND_F by turning it into a second OPT */
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_GPIPE, 2, 2, &err), SC_OK);
    s->actions[0][find(s, 0, RT_ACT_SEND_F, 1)].kind = RT_ACT_F;
    assert_int_equal(rt_schedule_validate(s, &err), SC_ERR_INVALID);
    rt_schedule_destroy(&s);

    sc_err_clear(&err);
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_GPIPE, 0, 2, &err), SC_ERR_INVALID);
    rt_schedule_kind k;
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_kind_parse("1f1b", "schedule", &k, &err), SC_OK);
    assert_int_equal(k, RT_SCHED_1F1B);
    assert_int_equal(rt_schedule_kind_parse("pipedream", "schedule", &k, &err), SC_ERR_UNSUPPORTED);
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_kind_parse("zigzag", "schedule", &k, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "\"gpipe\", \"1f1b\""));
}

/* Every replica count vector up to 3 per stage: the restricted lists run through, each replica
 * keeps exactly its micro-batches in order, and needs no more slots than the whole stage. */
static void test_replicated_restrict(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    for (int kind = 0; kind < 2; kind++) {
        for (int p = 1; p <= 4; p++) {
            for (int m = 3; m <= 7; m += 2) {
                rt_schedule *s = NULL;
                assert_int_equal(rt_schedule_new(&s, (rt_schedule_kind)kind, p, m, &err), SC_OK);
                int combos = 1;
                for (int st = 0; st < p; st++)
                    combos *= 3;
                for (int c = 0; c < combos; c++) {
                    int reps[4], x = c;
                    for (int st = 0; st < p; st++, x /= 3)
                        reps[st] = 1 + x % 3;
                    if (rt_schedule_validate_replicas(s, reps, &err) != SC_OK)
                        print_error("kind %d p %d m %d: %s\n", kind, p, m, err.msg);
                    assert_int_equal(rt_schedule_validate_replicas(s, reps, &err), SC_OK);
                    for (int st = 0; st < p; st++) {
                        for (int k = 0; k < reps[st]; k++) {
                            rt_action *a = NULL;
                            int n = 0, slots = 0, next_f = k;
                            assert_int_equal(
                                rt_schedule_restrict(s, st, reps[st], k, &a, &n, &slots, &err),
                                SC_OK);
                            for (int i = 0; i < n - 1; i++) {
                                assert_int_equal(a[i].mb % reps[st], k);
                                if (a[i].kind == RT_ACT_F) {
                                    assert_int_equal(a[i].mb, next_f);
                                    next_f += reps[st];
                                }
                            }
                            assert_true(next_f >= m); /* all its forwards, in order */
                            assert_int_equal(a[n - 1].kind, RT_ACT_OPT);
                            assert_true(slots >= 1 && slots <= s->slots[st]);
                            free(a);
                        }
                    }
                }
                rt_schedule_destroy(&s);
            }
        }
    }
    /* gpipe keeps all of a replica's micro-batches, 1f1b with 2 replicas of stage 0 of 2: one */
    rt_schedule *s = NULL;
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_GPIPE, 2, 4, &err), SC_OK);
    rt_action *a = NULL;
    int n = 0, slots = 0;
    assert_int_equal(rt_schedule_restrict(s, 0, 2, 1, &a, &n, &slots, &err), SC_OK);
    assert_int_equal(slots, 2);
    assert_int_equal(n, 2 * 4 + 1); /* F SEND_F RECV_B B per micro-batch, OPT */
    free(a);
    rt_schedule_destroy(&s);

    /* more replicas than micro-batches, a replica out of range */
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_1F1B, 2, 2, &err), SC_OK);
    const int too_many[] = {3, 1};
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_validate_replicas(s, too_many, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "3 replicas"));
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_restrict(s, 0, 2, 2, &a, &n, &slots, &err), SC_ERR_INVALID);
    assert_null(a);
    /* a deadlocking list is still caught with replicas: stage 0 receives B(0) before F(0) */
    rt_schedule_destroy(&s);
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_1F1B, 2, 2, &err), SC_OK);
    int f0 = find(s, 0, RT_ACT_SEND_F, 0), b0 = find(s, 0, RT_ACT_RECV_B, 0);
    swap(&s->actions[0][f0], &s->actions[0][b0]);
    const int two[] = {2, 1};
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_validate_replicas(s, two, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "deadlocks: stage 0 replica 0"));
    rt_schedule_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generated_schedules),
        cmocka_unit_test(test_validation_rejects),
        cmocka_unit_test(test_replicated_restrict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
