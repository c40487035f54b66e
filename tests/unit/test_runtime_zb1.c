/* worker/runtime/schedule, zb1 (ZB-H1): the lists are the 1f1b lists with one W per micro-batch
 * inserted after its B (so the sends, receives and dry run are 1f1b's), each stage's W in
 * micro-batch order; a micro-batch is held from F to W, at most min(p, m) on every stage
 * unreplicated (1f1b's first stage); the textbook layout of stage s (p-s-1 warm-up forwards, s
 * deferred W); with replicated stages the restricted lists run through and keep within
 * rt_schedule_slots_bound; and the refusals of W in the wrong place. With a memory budget
 * (rt_schedule_new_zb1): each stage defers min(cap, D_s) W and holds that many more than 1f1b,
 * exactly rt_schedule_zb1_slots_bound; caps that hold nothing back give ZB-H1's lists. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/runtime/schedule.h"

static int find(const rt_schedule *s, int st, rt_action_kind k, int mb)
{
    for (int i = 0; i < s->count[st]; i++)
        if (s->actions[st][i].kind == k && s->actions[st][i].mb == mb)
            return i;
    fail_msg("stage %d has no %s of micro-batch %d", st, rt_action_name(k), mb);
    return -1;
}

/* zb1's list of stage st without its W equals 1f1b's; its W run in micro-batch order. */
static void check_against_1f1b(const rt_schedule *z, const rt_schedule *o, int st)
{
    int j = 0, w = 0;
    for (int i = 0; i < z->count[st]; i++) {
        const rt_action *a = &z->actions[st][i];
        if (a->kind == RT_ACT_W) {
            assert_int_equal(a->mb, w++);
            continue;
        }
        assert_true(j < o->count[st]);
        assert_int_equal(a->kind, o->actions[st][j].kind);
        assert_int_equal(a->mb, o->actions[st][j].mb);
        j++;
    }
    assert_int_equal(j, o->count[st]);
    assert_int_equal(w, z->microbatches);
}

static void test_zb1_lists(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m <= 10; m++) {
            rt_schedule *z = NULL, *o = NULL;
            assert_int_equal(rt_schedule_new(&z, RT_SCHED_ZB1, p, m, &err), SC_OK);
            assert_int_equal(rt_schedule_new(&o, RT_SCHED_1F1B, p, m, &err), SC_OK);
            for (int st = 0; st < p; st++) {
                check_against_1f1b(z, o, st);
                int most = p < m ? p : m;
                assert_int_equal(z->slots[st], most); /* ZB-H1: 1f1b's peak on every stage */
                assert_int_equal(rt_schedule_slots_bound(RT_SCHED_ZB1, p, NULL, st, m), most);
                assert_true(o->slots[st] <= z->slots[st]);
                for (int mb = 0; mb < m; mb++)
                    assert_true(find(z, st, RT_ACT_W, mb) > find(z, st, RT_ACT_B, mb));
                assert_int_equal(z->actions[st][z->count[st] - 1].kind, RT_ACT_OPT);
            }
            rt_schedule_destroy(&z);
            rt_schedule_destroy(&o);
        }
    /* p = 4, m = 8, stage 1: warm-up F0 F1, then F2 B0 (W0 deferred), F3 B1 W0 ...; the last
     * stage defers three W to the end, the first runs each right after its B */
    rt_schedule *z = NULL;
    assert_int_equal(rt_schedule_new(&z, RT_SCHED_ZB1, 4, 8, &err), SC_OK);
    assert_true(find(z, 1, RT_ACT_W, 0) > find(z, 1, RT_ACT_B, 1));
    assert_true(find(z, 1, RT_ACT_W, 0) < find(z, 1, RT_ACT_F, 4));
    assert_int_equal(find(z, 0, RT_ACT_W, 0), find(z, 0, RT_ACT_B, 0) + 1);
    int n3 = z->count[3];
    for (int k = 0; k < 3; k++) {
        assert_int_equal(z->actions[3][n3 - 4 + k].kind, RT_ACT_W);
        assert_int_equal(z->actions[3][n3 - 4 + k].mb, 5 + k);
    }
    assert_string_equal(rt_schedule_kind_name(RT_SCHED_ZB1), "zb1");
    assert_string_equal(rt_action_name(RT_ACT_W), "W");
    rt_schedule_kind k = RT_SCHED_GPIPE;
    assert_int_equal(rt_schedule_kind_parse("zb1", "schedule", &k, &err), SC_OK);
    assert_int_equal(k, RT_SCHED_ZB1);
    rt_schedule_destroy(&z);
}

static void test_zb1_rejects(void **state)
{
    (void)state;
    sc_err err;
    rt_schedule *s = NULL;
    /* W before its B */
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_ZB1, 2, 3, &err), SC_OK);
    int b = find(s, 1, RT_ACT_B, 0), w = find(s, 1, RT_ACT_W, 0);
    rt_action t = s->actions[1][b];
    s->actions[1][b] = s->actions[1][w];
    s->actions[1][w] = t;
    assert_int_equal(rt_schedule_validate(s, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "W of micro-batch 0 before its B"));
    rt_schedule_destroy(&s);
    /* a W missing */
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_ZB1, 2, 3, &err), SC_OK);
    w = find(s, 0, RT_ACT_W, 2);
    s->actions[0][w] = s->actions[0][w + 1]; /* the OPT, twice */
    s->count[0]--;
    assert_int_equal(rt_schedule_validate(s, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "micro-batch 2 completely"));
    rt_schedule_destroy(&s);
    /* a W in a 1f1b list */
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_1F1B, 1, 2, &err), SC_OK);
    s->actions[0][s->count[0]] = s->actions[0][s->count[0] - 1]; /* the OPT stays last */
    s->actions[0][s->count[0]++ - 1] = (rt_action){RT_ACT_W, 0};
    assert_int_equal(rt_schedule_validate(s, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "only zb1"));
    rt_schedule_destroy(&s);
}

static int replica_combo(int c, int p, int *reps)
{
    for (int st = 0; st < p; st++, c /= 3)
        reps[st] = 1 + c % 3;
    return c == 0;
}

/* Every copy count vector up to 3 per stage: 1f1b-RR's lists with W inserted, the replicated
 * dry run passes, and no copy holds more than the bound (copy 0 exactly that on stage 0). */
static void test_zb1_replicated(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    for (int p = 1; p <= 4; p++)
        for (int m = 3; m <= 9; m++) {
            int reps[4];
            for (int c = 0; replica_combo(c, p, reps); c++) {
                rt_schedule *z = NULL, *o = NULL;
                if (rt_schedule_new_replicated(&z, RT_SCHED_ZB1, p, m, reps, &err) != SC_OK)
                    fail_msg("p %d m %d combo %d: %s", p, m, c, err.msg);
                assert_int_equal(rt_schedule_new_replicated(&o, RT_SCHED_1F1B, p, m, reps, &err),
                                 SC_OK);
                if (rt_schedule_validate_replicas(z, reps, &err) != SC_OK)
                    fail_msg("p %d m %d combo %d: %s", p, m, c, err.msg);
                for (int st = 0; st < p; st++) {
                    check_against_1f1b(z, o, st);
                    int bound = rt_schedule_slots_bound(RT_SCHED_ZB1, p, reps, st, m);
                    for (int k = 0; k < reps[st]; k++) {
                        rt_action *a = NULL;
                        int n = 0, slots = 0;
                        assert_int_equal(
                            rt_schedule_restrict(z, st, reps[st], k, &a, &n, &slots, &err), SC_OK);
                        if (slots < 1 || slots > bound)
                            fail_msg("p %d m %d combo %d stage %d copy %d: %d slots, bound %d", p,
                                     m, c, st, k, slots, bound);
                        if (st == 0 && k == 0)
                            assert_int_equal(slots, bound);
                        free(a);
                    }
                }
                rt_schedule_destroy(&z);
                rt_schedule_destroy(&o);
            }
        }
}

/* The index of stage st's first W (its list's), and which backward it follows (1-based). */
static int first_w_after(const rt_schedule *s, int st)
{
    int b = 0;
    for (int i = 0; i < s->count[st]; i++) {
        if (s->actions[st][i].kind == RT_ACT_B)
            b++;
        if (s->actions[st][i].kind == RT_ACT_W)
            return b;
    }
    fail_msg("stage %d has no W", st);
    return -1;
}

/* Capped deferral (rt_schedule_new_zb1): for every cap vector of a pattern family, stage st
 * defers min(cap, D_st) W (its first W follows that many + 1 backwards, or the last), holds
 * min(p-st + deferred, m) micro-batches from F to W, which rt_schedule_zb1_slots_bound gives
 * exactly; the lists are still 1f1b's with W inserted in micro-batch order. Caps of D_st or more
 * (and NULL) give ZB-H1's lists action for action; caps of 0 put each W right after its B. */
static void test_zb1_capped(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m <= 10; m++) {
            rt_schedule *h = NULL, *o = NULL;
            assert_int_equal(rt_schedule_new(&h, RT_SCHED_ZB1, p, m, &err), SC_OK);
            assert_int_equal(rt_schedule_new(&o, RT_SCHED_1F1B, p, m, &err), SC_OK);
            for (int pat = 0; pat < 12; pat++) {
                int cap[6];
                for (int st = 0; st < p; st++) /* uniform 0..5, then mixed patterns */
                    cap[st] = pat < 6 ? pat : (st * 7 + pat) % (p + 1);
                rt_schedule *z = NULL;
                if (rt_schedule_new_zb1(&z, p, m, NULL, cap, &err) != SC_OK)
                    fail_msg("p %d m %d pattern %d: %s", p, m, pat, err.msg);
                bool same = true;
                for (int st = 0; st < p; st++) {
                    check_against_1f1b(z, o, st);
                    int warm = p - st - 1 < m ? p - st - 1 : m;
                    int full = st < m - warm ? st : m - warm; /* ZB-H1's D_st */
                    int d = cap[st] < full ? cap[st] : full;
                    assert_int_equal(rt_schedule_zb1_defer(p, NULL, st, m, cap), d);
                    assert_int_equal(rt_schedule_zb1_defer(p, NULL, st, m, NULL), full);
                    int held = p - st + d < m ? p - st + d : m;
                    assert_int_equal(z->slots[st], held);
                    assert_int_equal(rt_schedule_zb1_slots_bound(p, NULL, st, m, cap), held);
                    assert_true(o->slots[st] <= held && held <= h->slots[st]);
                    assert_int_equal(first_w_after(z, st), d + 1 < m ? d + 1 : m);
                    same = same && d == full;
                }
                /* the caps change nothing where no stage is held back */
                bool equal = z->count[p - 1] == h->count[p - 1];
                for (int st = 0; equal && st < p; st++)
                    equal = z->count[st] == h->count[st] &&
                            memcmp(z->actions[st], h->actions[st],
                                   (size_t)z->count[st] * sizeof(rt_action)) == 0;
                if (same)
                    assert_true(equal);
                if (pat == 0) /* every W right after its B */
                    for (int st = 0; st < p; st++)
                        for (int mb = 0; mb < m; mb++)
                            assert_int_equal(find(z, st, RT_ACT_W, mb),
                                             find(z, st, RT_ACT_B, mb) + 1 + (st > 0));
                rt_schedule_destroy(&z);
            }
            /* NULL caps: rt_schedule_new's lists and bound */
            rt_schedule *n = NULL;
            assert_int_equal(rt_schedule_new_zb1(&n, p, m, NULL, NULL, &err), SC_OK);
            for (int st = 0; st < p; st++) {
                assert_int_equal(n->count[st], h->count[st]);
                assert_memory_equal(n->actions[st], h->actions[st],
                                    (size_t)n->count[st] * sizeof(rt_action));
                assert_int_equal(rt_schedule_zb1_slots_bound(p, NULL, st, m, NULL),
                                 rt_schedule_slots_bound(RT_SCHED_ZB1, p, NULL, st, m));
            }
            rt_schedule_destroy(&n);
            rt_schedule_destroy(&h);
            rt_schedule_destroy(&o);
        }
    /* a negative cap is refused, naming the stage */
    rt_schedule *s = NULL;
    const int bad[3] = {0, -1, 2};
    assert_int_equal(rt_schedule_new_zb1(&s, 3, 6, NULL, bad, &err), SC_ERR_INVALID);
    assert_null(s);
    assert_non_null(strstr(err.msg, "stage 1 may defer -1"));
}

/* Caps with replicated stages: the restricted lists still dry-run, and no copy holds more than
 * rt_schedule_zb1_slots_bound (stage 0's copy 0 exactly that), which the caps lower. */
static void test_zb1_capped_replicated(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    for (int p = 2; p <= 4; p++)
        for (int m = 3; m <= 9; m++) {
            int reps[4];
            for (int c = 0; replica_combo(c, p, reps); c++)
                for (int pat = 0; pat < 3; pat++) {
                    int cap[4];
                    for (int st = 0; st < p; st++)
                        cap[st] = pat == 0 ? 0 : pat == 1 ? 1 : (st + c) % 3;
                    rt_schedule *z = NULL, *o = NULL;
                    if (rt_schedule_new_zb1(&z, p, m, reps, cap, &err) != SC_OK)
                        fail_msg("p %d m %d combo %d: %s", p, m, c, err.msg);
                    assert_int_equal(
                        rt_schedule_new_replicated(&o, RT_SCHED_1F1B, p, m, reps, &err), SC_OK);
                    if (rt_schedule_validate_replicas(z, reps, &err) != SC_OK)
                        fail_msg("p %d m %d combo %d pattern %d: %s", p, m, c, pat, err.msg);
                    for (int st = 0; st < p; st++) {
                        check_against_1f1b(z, o, st);
                        int bound = rt_schedule_zb1_slots_bound(p, reps, st, m, cap);
                        assert_true(bound <= rt_schedule_slots_bound(RT_SCHED_ZB1, p, reps, st, m));
                        for (int k = 0; k < reps[st]; k++) {
                            rt_action *a = NULL;
                            int n = 0, slots = 0;
                            assert_int_equal(
                                rt_schedule_restrict(z, st, reps[st], k, &a, &n, &slots, &err),
                                SC_OK);
                            if (slots < 1 || slots > bound)
                                fail_msg("p %d m %d combo %d stage %d copy %d: %d slots, bound %d",
                                         p, m, c, st, k, slots, bound);
                            if (st == 0 && k == 0)
                                assert_int_equal(slots, bound);
                            free(a);
                        }
                    }
                    rt_schedule_destroy(&z);
                    rt_schedule_destroy(&o);
                }
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zb1_lists),
        cmocka_unit_test(test_zb1_rejects),
        cmocka_unit_test(test_zb1_replicated),
        cmocka_unit_test(test_zb1_capped),
        cmocka_unit_test(test_zb1_capped_replicated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
