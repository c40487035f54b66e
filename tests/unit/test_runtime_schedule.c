/* worker/runtime/schedule: gpipe and 1f1b action lists, their activation slots, and validation
 * of broken hand-made lists (F after B, missing receive, deadlock); lists restricted to the
 * micro-batches of stage replicas and their replicated dry run; pipedream's stream with
 * replicated stages (1F1B-RR): warm-ups, rounds, slots, and the copies' OPT barriers. */
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

/* The c-th of the 3^p ways to give p stages 1 to 3 replicas each, into reps; 0 once c is past
 * the last. */
static int replica_combo(int c, int p, int *reps)
{
    for (int st = 0; st < p; st++, c /= 3)
        reps[st] = 1 + c % 3;
    return c == 0;
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
                int reps[4];
                for (int c = 0; replica_combo(c, p, reps); c++) {
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

/* W_s = r_s * floor((R_s - 1) / r_s), R_s the copies of stages s..p-1, written out again. */
static int warmup_of(const int *reps, int p, int s)
{
    int after = 0;
    for (int j = s; j < p; j++)
        after += reps[j];
    return reps[s] * ((after - 1) / reps[s]);
}

static int lcm_of(const int *reps, int p)
{
    int l = 1;
    for (int s = 0; s < p; s++) {
        int a = l, b = reps[s];
        while (b != 0) {
            int t = a % b;
            a = b;
            b = t;
        }
        l = l / a * reps[s];
    }
    return l;
}

/* Every copy count vector up to 3 per stage over 1..4 stages, streams of 1..3 lcm-multiples of
 * minibatches: the lists validate and dry-run with the copies' OPT barriers; stage s runs F(g),
 * B(g - W_s) with an OPT after each round; each copy alternates its own F and B after
 * W_s / r_s warm-up forwards and holds at most W_s / r_s + 1 in flight, exactly that once the
 * stream is long enough. */
static void test_pipedream_lists(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    for (int p = 1; p <= 4; p++) {
        int reps[4];
        for (int c = 0; replica_combo(c, p, reps); c++) {
            int l = lcm_of(reps, p);
            for (int k = 1; k <= 3; k++) {
                int L = k * l;
                rt_schedule *s = NULL;
                if (rt_schedule_new_pipedream(&s, p, reps, L, &err) != SC_OK)
                    print_error("p %d combo %d L %d: %s\n", p, c, L, err.msg);
                assert_non_null(s);
                assert_int_equal(s->kind, RT_SCHED_PIPEDREAM);
                if (rt_schedule_validate_replicas(s, NULL, &err) != SC_OK)
                    print_error("p %d combo %d L %d: %s\n", p, c, L, err.msg);
                assert_int_equal(rt_schedule_validate_replicas(s, reps, &err), SC_OK);
                for (int st = 0; st < p; st++) {
                    int w = warmup_of(reps, p, st), r = reps[st];
                    assert_int_equal(rt_schedule_pipedream_warmup(p, reps, st), w);
                    assert_int_equal(rt_schedule_pipedream_slots(p, reps, st), w / r + 1);
                    assert_int_equal(w % r, 0);
                    if (st + 1 < p) /* W_s > W_{s+1}: the condition against deadlock */
                        assert_true(w > warmup_of(reps, p, st + 1));
                    assert_int_equal(count_kind(s, st, RT_ACT_F), L);
                    assert_int_equal(count_kind(s, st, RT_ACT_B), L);
                    assert_int_equal(count_kind(s, st, RT_ACT_OPT), L / r);
                    /* the stage's first backward comes right after its forward of W_s */
                    if (w < L)
                        assert_int_equal(find(s, st, RT_ACT_B, 0) > find(s, st, RT_ACT_F, w), 1);
                    for (int k2 = 0; k2 < r; k2++) {
                        rt_action *a = NULL;
                        int n = 0, slots = 0;
                        assert_int_equal(rt_schedule_restrict(s, st, r, k2, &a, &n, &slots, &err),
                                         SC_OK);
                        int own = L / r, warm = w / r < own ? w / r : own;
                        assert_int_equal(slots, warm + 1 <= own ? warm + 1 : own);
                        /* the copy's compute order: warm F, then (F B OPT)*, then (B OPT)* */
                        int f = 0, b = 0, i = 0;
                        for (; i < n; i++) {
                            rt_action_kind kd = a[i].kind;
                            if (kd != RT_ACT_F && kd != RT_ACT_B && kd != RT_ACT_OPT)
                                continue;
                            if (kd == RT_ACT_F) {
                                assert_int_equal(a[i].mb, k2 + f * r);
                                assert_true(f - b <= warm);
                                f++;
                            } else if (kd == RT_ACT_B) {
                                assert_int_equal(a[i].mb, k2 + b * r);
                                assert_true(f == own || f - b == warm + 1);
                                b++;
                            } else {
                                assert_int_equal(b, f == own ? b : f - warm); /* after each B */
                            }
                        }
                        assert_int_equal(f, own);
                        assert_int_equal(b, own);
                        free(a);
                    }
                }
                rt_schedule_destroy(&s);
            }
        }
    }
    /* PipeDream's numbers: [2, 2, 1] warms up 4, 2, 0 and keeps 3, 2, 1 per copy; unreplicated
     * it is the textbook p-s-1 and p-s; stage 0 keeps NOAM = ceil(all copies / r_0) */
    static const int r221[] = {2, 2, 1}, r1111[] = {1, 1, 1, 1}, r3111[] = {3, 1, 1, 1};
    for (int st = 0; st < 3; st++) {
        assert_int_equal(rt_schedule_pipedream_warmup(3, r221, st), 4 - 2 * st);
        assert_int_equal(rt_schedule_pipedream_slots(3, r221, st), 3 - st);
    }
    for (int st = 0; st < 4; st++) {
        assert_int_equal(rt_schedule_pipedream_warmup(4, r1111, st), 4 - st - 1);
        assert_int_equal(rt_schedule_pipedream_slots(4, r1111, st), 4 - st);
    }
    assert_int_equal(rt_schedule_pipedream_slots(4, r3111, 0), 2); /* ceil(6 / 3) */
}

/* Refusals, and a deadlock that only the copies' OPT barrier causes: copy 0 of stage 0 sends
 * minibatch 2 after round 0's OPT, which waits for copy 1's backward of 1, which the next stage
 * (running 0, 2, 1, 3) reaches only after minibatch 2. */
static void test_pipedream_lists_rejects(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    rt_schedule *s = NULL;
    static const int r21[] = {2, 1}, r11[] = {1, 1}, r20[] = {2, 0};
    assert_int_equal(rt_schedule_new_pipedream(&s, 2, r21, 3, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stage 0 has 2 copies and the stream 3 minibatches"));
    assert_null(s);
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_new_pipedream(&s, 2, r20, 4, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "stage 1 has 0 copies"));
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_PIPEDREAM, 2, 4, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "rt_schedule_new_pipedream"));
    assert_int_equal(rt_schedule_new_pipedream(&s, 2, r21, 4, &err), SC_OK);
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_validate_replicas(s, r11, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "built for 2 copies of stage 0, not 1"));
    /* an OPT inside a round of stage 0 (after one backward of two) */
    int opt = find(s, 0, RT_ACT_OPT, -1), b0 = find(s, 0, RT_ACT_B, 0);
    rt_action keep = s->actions[0][b0 + 1];
    s->actions[0][b0 + 1] = s->actions[0][opt];
    s->actions[0][opt] = keep;
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_validate(s, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "after 1 backwards; a round of its 2 copies has 2"));
    rt_schedule_destroy(&s);

    assert_int_equal(rt_schedule_new_pipedream(&s, 2, r21, 4, &err), SC_OK);
    static const rt_action st0[] = {
        {RT_ACT_F, 0},      {RT_ACT_SEND_F, 0}, {RT_ACT_F, 1},      {RT_ACT_SEND_F, 1},
        {RT_ACT_RECV_B, 0}, {RT_ACT_B, 0},      {RT_ACT_RECV_B, 1}, {RT_ACT_B, 1},
        {RT_ACT_OPT, -1},   {RT_ACT_F, 2},      {RT_ACT_SEND_F, 2}, {RT_ACT_F, 3},
        {RT_ACT_SEND_F, 3}, {RT_ACT_RECV_B, 2}, {RT_ACT_B, 2},      {RT_ACT_RECV_B, 3},
        {RT_ACT_B, 3},      {RT_ACT_OPT, -1},
    };
    memcpy(s->actions[0], st0, sizeof st0);
    s->count[0] = (int)(sizeof st0 / sizeof st0[0]);
    static const int order[] = {0, 2, 1, 3};
    s->count[1] = 0;
    for (int i = 0; i < 4; i++) {
        int g = order[i];
        const rt_action one[] = {
            {RT_ACT_RECV_F, g}, {RT_ACT_F, g}, {RT_ACT_B, g}, {RT_ACT_SEND_B, g}, {RT_ACT_OPT, -1}};
        memcpy(&s->actions[1][s->count[1]], one, sizeof one);
        s->count[1] += 5;
    }
    assert_int_equal(rt_schedule_validate(s, &err), SC_ERR_INVALID); /* as one agent, too */
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_validate_replicas(s, NULL, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "deadlocks"));
    /* in stream order the next stage lets the barrier pass */
    s->count[1] = 0;
    for (int g = 0; g < 4; g++) {
        const rt_action one[] = {
            {RT_ACT_RECV_F, g}, {RT_ACT_F, g}, {RT_ACT_B, g}, {RT_ACT_SEND_B, g}, {RT_ACT_OPT, -1}};
        memcpy(&s->actions[1][s->count[1]], one, sizeof one);
        s->count[1] += 5;
    }
    sc_err_clear(&err);
    assert_int_equal(rt_schedule_validate_replicas(s, NULL, &err), SC_OK);
    rt_schedule_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generated_schedules),     cmocka_unit_test(test_validation_rejects),
        cmocka_unit_test(test_replicated_restrict),     cmocka_unit_test(test_pipedream_lists),
        cmocka_unit_test(test_pipedream_lists_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
