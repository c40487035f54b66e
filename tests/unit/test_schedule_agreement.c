/*
 * The planner simulates the schedules the runtime runs: for every synchronous schedule (gpipe,
 * 1f1b, sliced, zb1), with and without replicated stages, the planner's per-stage
 * order of forwards, backwards and (zb1) weight gradients (coordinator/planner/plan_schedule)
 * equals the runtime's action lists (worker/runtime/schedule), unit for unit; also zb1 with its
 * deferred W capped to a memory budget (the plan's deferred_w), with the same deferral and slots.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "coordinator/planner/plan_schedule.h"
#include "worker/runtime/schedule.h"

/* The forwards, backwards and W of stage st, in order, as +1+unit (F), -1-unit (B) and
 * 1000+unit (W). */
static int runtime_order(const rt_schedule *s, int st, int *out)
{
    int n = 0;
    for (int i = 0; i < s->count[st]; i++) {
        const rt_action *a = &s->actions[st][i];
        if (a->kind == RT_ACT_F)
            out[n++] = 1 + a->mb;
        else if (a->kind == RT_ACT_B)
            out[n++] = -1 - a->mb;
        else if (a->kind == RT_ACT_W)
            out[n++] = 1000 + a->mb;
    }
    return n;
}

static int planner_order(const plan_schedule *s, int st, int *out)
{
    int n = 0;
    for (int i = 0; i < s->n_actions[st]; i++) {
        const plan_action *a = &s->actions[st][i];
        if (a->kind == PLAN_ACT_F)
            out[n++] = 1 + a->unit;
        else if (a->kind == PLAN_ACT_B)
            out[n++] = -1 - a->unit;
        else if (a->kind == PLAN_ACT_W)
            out[n++] = 1000 + a->unit;
    }
    return n;
}

/* The same stage lists, action for action in the compute order. */
static void same_lists(const rt_schedule *rs, const plan_schedule *ps, const char *what)
{
    int a[96], b[96];
    for (int st = 0; st < rs->stages; st++) {
        int na = runtime_order(rs, st, a), nb = planner_order(ps, st, b);
        if (na != nb)
            fail_msg("%s stage %d: runtime %d actions, planner %d", what, st, na, nb);
        for (int i = 0; i < na; i++)
            if (a[i] != b[i])
                fail_msg("%s stage %d action %d: runtime %d, planner %d", what, st, i, a[i], b[i]);
    }
}

/* zb1 with the deferral capped per stage (cap NULL: ZB-H1's): the lists, the deferral each
 * stage runs and the slots one copy holds agree. */
static void check_zb1(int p, int m, const int *replicas, const int *cap)
{
    sc_err err;
    sc_err_clear(&err);
    rt_schedule *rs = NULL;
    plan_schedule *ps = NULL;
    char what[96];
    snprintf(what, sizeof what, "zb1 p=%d m=%d copies %s caps %s", p, m,
             replicas ? "given" : "none", cap ? "given" : "none");
    if (rt_schedule_new_zb1(&rs, p, m, replicas, cap, &err) != SC_OK)
        fail_msg("runtime %s: %s", what, err.msg);
    if (plan_schedule_build_zb1(&ps, p, m, replicas, cap, &err) != SC_OK)
        fail_msg("planner %s: %s", what, err.msg);
    same_lists(rs, ps, what);
    for (int st = 0; st < p; st++) {
        int d = rt_schedule_zb1_defer(p, replicas, st, m, cap);
        assert_int_equal(ps->w_defer[st], d);
        assert_int_equal(rt_schedule_zb1_defer(p, replicas, st, m, NULL),
                         plan_schedule_zb1_defer(p, replicas, m, st));
        assert_int_equal(rt_schedule_zb1_slots_bound(p, replicas, st, m, cap),
                         plan_schedule_zb1_held(p, replicas, m, st, d));
    }
    rt_schedule_destroy(&rs);
    plan_schedule_destroy(&ps);
}

/* kind: 0 gpipe, 1 1f1b, 2 sliced with k halved micro-batches, 3 zb1. */
static void check(int kind, int p, int m, int k, const int *replicas)
{
    sc_err err;
    sc_err_clear(&err);
    rt_schedule *rs = NULL;
    plan_schedule *ps = NULL;
    plan_sched_kind pk = kind == 0   ? PLAN_SCHED_GPIPE
                         : kind == 1 ? PLAN_SCHED_1F1B
                         : kind == 3 ? PLAN_SCHED_ZB1
                                     : PLAN_SCHED_SLICED;
    rt_schedule_kind rk = kind == 0 ? RT_SCHED_GPIPE : kind == 3 ? RT_SCHED_ZB1 : RT_SCHED_1F1B;
    sc_status rc = kind == 2 ? rt_schedule_new_sliced(&rs, p, m + k, k, replicas, &err)
                             : rt_schedule_new_replicated(&rs, rk, p, m, replicas, &err);
    if (rc != SC_OK)
        fail_msg("runtime p=%d m=%d k=%d kind %d: %s", p, m, k, kind, err.msg);
    if (plan_schedule_build_replicated(&ps, pk, p, m, kind == 2 ? k : 0, replicas, &err) != SC_OK)
        fail_msg("planner p=%d m=%d k=%d kind %d: %s", p, m, k, kind, err.msg);
    int a[96], b[96];
    for (int st = 0; st < p; st++) {
        int na = runtime_order(rs, st, a), nb = planner_order(ps, st, b);
        if (na != nb)
            fail_msg("p=%d m=%d k=%d kind %d stage %d: runtime %d actions, planner %d", p, m, k,
                     kind, st, na, nb);
        for (int i = 0; i < na; i++)
            if (a[i] != b[i])
                fail_msg("p=%d m=%d k=%d kind %d stage %d action %d: runtime %d, planner %d", p, m,
                         k, kind, st, i, a[i], b[i]);
    }
    rt_schedule_destroy(&rs);
    plan_schedule_destroy(&ps);
}

static void test_unreplicated(void **state)
{
    (void)state;
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m <= 10; m++) {
            check(0, p, m, 0, NULL);
            check(1, p, m, 0, NULL);
            check(3, p, m, 0, NULL);
            for (int k = 0; k <= m && m + k <= 20; k++)
                check(2, p, m, k, NULL);
        }
}

static void test_replicated(void **state)
{
    (void)state;
    static const int vecs[][4] = {{2, 1, 1, 1}, {1, 2, 1, 1}, {1, 1, 4, 1}, {2, 2, 1, 1},
                                  {3, 1, 2, 1}, {1, 1, 1, 3}, {4, 2, 1, 1}};
    for (size_t v = 0; v < sizeof vecs / sizeof vecs[0]; v++)
        for (int p = 2; p <= 4; p++)
            for (int m = 4; m <= 12; m++) {
                int most = 1;
                for (int st = 0; st < p; st++)
                    most = vecs[v][st] > most ? vecs[v][st] : most;
                if (m < most)
                    continue;
                check(0, p, m, 0, vecs[v]);
                check(1, p, m, 0, vecs[v]);
                check(3, p, m, 0, vecs[v]);
                for (int k = 1; k <= p - 1 && k <= m; k++)
                    check(2, p, m, k, vecs[v]);
            }
}

/* zb1 under a memory budget: hand-made caps and the caps plan_schedule_zb1_caps derives from
 * stash bytes per stage (equal, the last stage's the largest, pseudo-random), with and without
 * copies: the runtime given the planner's caps runs the lists the planner simulated. */
static void test_zb1_capped(void **state)
{
    (void)state;
    static const int vecs[][5] = {{1, 1, 1, 1, 1}, {2, 1, 1, 1, 1}, {1, 2, 1, 1, 1},
                                  {1, 1, 3, 1, 1}, {2, 2, 1, 1, 1}, {1, 1, 1, 2, 1}};
    unsigned seed = 7;
    for (size_t v = 0; v < sizeof vecs / sizeof vecs[0]; v++)
        for (int p = 1; p <= 5; p++)
            for (int m = 1; m <= 12; m++) {
                const int *reps = v == 0 ? NULL : vecs[v];
                int most = 1;
                for (int st = 0; st < p; st++)
                    most = vecs[v][st] > most ? vecs[v][st] : most;
                if (m < most)
                    continue;
                int cap[5];
                for (int pat = 0; pat < 3; pat++) {
                    for (int st = 0; st < p; st++)
                        cap[st] = pat == 0 ? 0 : pat == 1 ? 1 : (st * 5 + m) % 4;
                    check_zb1(p, m, reps, cap);
                }
                check_zb1(p, m, reps, NULL);
                for (int kind = 0; kind < 4; kind++) {
                    double bytes[5];
                    for (int st = 0; st < p; st++) {
                        seed = seed * 1103515245u + 12345u;
                        bytes[st] = kind == 0   ? 1.0
                                    : kind == 1 ? (st == p - 1 ? 3.0 : 1.0)
                                    : kind == 2 ? (st == p - 1 ? 1.2 : 1.0)
                                                : 1.0 + (seed >> 16) % 100;
                    }
                    plan_schedule_zb1_caps(p, reps, m, bytes, cap);
                    check_zb1(p, m, reps, cap);
                }
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unreplicated),
        cmocka_unit_test(test_replicated),
        cmocka_unit_test(test_zb1_capped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
