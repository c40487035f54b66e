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

#include <stdbool.h>
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
                    int bound = rt_schedule_slots_bound((rt_schedule_kind)kind, p, NULL, st, m);
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

/* Copy-aware 1f1b (1F1B-RR warm-up): every copy count vector up to 3 per stage over 1..4
 * stages and 3..9 micro-batches: stage s warms up with min(W_s, m) forwards, the lists validate
 * and dry-run over every copy, and each copy holds at most rt_schedule_slots_bound, copy 0
 * exactly that. Unreplicated (NULL or all ones) the lists are rt_schedule_new's, action for
 * action. */
static void test_1f1b_replicated_lists(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    for (int p = 1; p <= 4; p++) {
        for (int m = 3; m <= 9; m++) {
            int reps[4];
            for (int c = 0; replica_combo(c, p, reps); c++) {
                rt_schedule *s = NULL;
                if (rt_schedule_new_replicated(&s, RT_SCHED_1F1B, p, m, reps, &err) != SC_OK)
                    print_error("p %d m %d combo %d: %s\n", p, m, c, err.msg);
                assert_non_null(s);
                if (rt_schedule_validate_replicas(s, reps, &err) != SC_OK)
                    print_error("p %d m %d combo %d: %s\n", p, m, c, err.msg);
                assert_int_equal(rt_schedule_validate_replicas(s, reps, &err), SC_OK);
                for (int st = 0; st < p; st++) {
                    int w = warmup_of(reps, p, st), r = reps[st];
                    w = w < m ? w : m;
                    /* warm-up: the first backward comes after the forward of W_s (m: all) */
                    if (w < m)
                        assert_true(find(s, st, RT_ACT_B, 0) > find(s, st, RT_ACT_F, w));
                    else
                        assert_true(find(s, st, RT_ACT_B, 0) > find(s, st, RT_ACT_F, m - 1));
                    if (w > 0)
                        assert_true(find(s, st, RT_ACT_B, 0) > find(s, st, RT_ACT_F, w - 1));
                    int bound = rt_schedule_slots_bound(RT_SCHED_1F1B, p, reps, st, m);
                    int own0 = (m + r - 1) / r;
                    assert_int_equal(bound, warmup_of(reps, p, st) / r + 1 < own0
                                                ? warmup_of(reps, p, st) / r + 1
                                                : own0);
                    for (int k = 0; k < r; k++) {
                        rt_action *a = NULL;
                        int n = 0, slots = 0;
                        assert_int_equal(rt_schedule_restrict(s, st, r, k, &a, &n, &slots, &err),
                                         SC_OK);
                        assert_true(slots >= 1 && slots <= bound);
                        if (k == 0)
                            assert_int_equal(slots, bound);
                        free(a);
                    }
                }
                rt_schedule_destroy(&s);
            }
        }
    }
    static const int ones[6] = {1, 1, 1, 1, 1, 1};
    for (int kind = 0; kind < 2; kind++)
        for (int p = 1; p <= 6; p++)
            for (int m = 1; m <= 9; m++) {
                rt_schedule *a = NULL, *b = NULL, *c = NULL;
                assert_int_equal(rt_schedule_new(&a, (rt_schedule_kind)kind, p, m, &err), SC_OK);
                assert_int_equal(
                    rt_schedule_new_replicated(&b, (rt_schedule_kind)kind, p, m, ones, &err),
                    SC_OK);
                assert_int_equal(
                    rt_schedule_new_replicated(&c, (rt_schedule_kind)kind, p, m, NULL, &err),
                    SC_OK);
                for (int st = 0; st < p; st++) {
                    assert_int_equal(a->count[st], b->count[st]);
                    assert_int_equal(a->count[st], c->count[st]);
                    assert_memory_equal(a->actions[st], b->actions[st],
                                        (size_t)a->count[st] * sizeof *a->actions[st]);
                    assert_memory_equal(a->actions[st], c->actions[st],
                                        (size_t)a->count[st] * sizeof *a->actions[st]);
                    assert_int_equal(a->slots[st], b->slots[st]);
                    assert_int_equal(
                        rt_schedule_slots_bound((rt_schedule_kind)kind, p, ones, st, m),
                        rt_schedule_slots_bound((rt_schedule_kind)kind, p, NULL, st, m));
                }
                rt_schedule_destroy(&a);
                rt_schedule_destroy(&b);
                rt_schedule_destroy(&c);
            }
    /* a copy count outside 1..m */
    const int five[] = {5, 1};
    sc_err_clear(&err);
    rt_schedule *s = NULL;
    assert_int_equal(rt_schedule_new_replicated(&s, RT_SCHED_1F1B, 2, 4, five, &err),
                     SC_ERR_INVALID);
    assert_null(s);
    assert_non_null(strstr(err.msg, "stage 0 has 5 copies; valid: 1..microbatches (4)"));
}

/* The copies' restricted lists played in lock step: each copy one action per round when it can
 * (a receive waits for a send of an earlier round, the copies of a stage meet at OPT), a forward
 * or backward of stage st keeping its copy for work[st] rounds. Returns the most copies of stage
 * `watch` at work at once (computing, or holding a micro-batch between its F and its B), and in
 * *inflight the most micro-batches stage `watch` held at once over all its copies. */
static int lockstep_busy(const rt_schedule *s, const int *reps, const int *work, int watch,
                         int *inflight)
{
    int p = s->stages, m = s->microbatches, n = 0, base[8];
    rt_action *acts[32];
    int count[32], pc[32], st_of[32], held[32], wait[32];
    sc_err err;
    for (int st = 0; st < p; st++) {
        base[st] = n;
        for (int k = 0; k < reps[st]; k++, n++) {
            int slots = 0;
            assert_true(n < 32);
            assert_int_equal(
                rt_schedule_restrict(s, st, reps[st], k, &acts[n], &count[n], &slots, &err), SC_OK);
            pc[n] = 0;
            st_of[n] = st;
            held[n] = 0;
            wait[n] = 0;
        }
    }
    char sent_f[8][64] = {{0}}, sent_b[8][64] = {{0}}, now_f[8][64], now_b[8][64];
    assert_true(p <= 8 && m <= 64);
    int most_busy = 0, most_held = 0;
    for (int round = 0; round < 100 * m; round++) {
        memcpy(now_f, sent_f, sizeof now_f);
        memcpy(now_b, sent_b, sizeof now_b);
        bool left = false;
        for (int i = 0; i < n; i++) {
            if (pc[i] >= count[i])
                continue;
            left = true;
            if (wait[i] > 0) {
                wait[i]--;
                continue;
            }
            const rt_action *a = &acts[i][pc[i]];
            int st = st_of[i];
            if (a->kind == RT_ACT_RECV_F && !now_f[st - 1][a->mb])
                continue;
            if (a->kind == RT_ACT_RECV_B && !now_b[st + 1][a->mb])
                continue;
            if (a->kind == RT_ACT_OPT) { /* every copy of the stage at its OPT (the last) */
                bool all = true;
                for (int k = 0; k < reps[st]; k++) {
                    int j = base[st] + k;
                    all = all && pc[j] >= count[j] - 1;
                }
                if (!all)
                    continue;
            }
            if (a->kind == RT_ACT_SEND_F)
                sent_f[st][a->mb] = 1;
            if (a->kind == RT_ACT_SEND_B)
                sent_b[st][a->mb] = 1;
            held[i] += a->kind == RT_ACT_F ? 1 : a->kind == RT_ACT_B ? -1 : 0;
            if (a->kind == RT_ACT_F || a->kind == RT_ACT_B)
                wait[i] = work[st] - 1;
            pc[i]++;
        }
        int busy = 0, total = 0;
        for (int k = 0; k < reps[watch]; k++) {
            busy += held[base[watch] + k] > 0 || wait[base[watch] + k] > 0;
            total += held[base[watch] + k];
        }
        most_busy = busy > most_busy ? busy : most_busy;
        most_held = total > most_held ? total : most_held;
        if (!left)
            break;
    }
    for (int i = 0; i < n; i++) {
        assert_int_equal(pc[i], count[i]); /* everyone finished */
        free(acts[i]);
    }
    *inflight = most_held;
    return most_busy;
}

/* Two stages, m = 8, worked out by hand. Stage 0 as 4 copies before one: R_0 = 5, so W_0 = 4
 * (the textbook warm-up counts 1) and W_1 = 0; stage 0 runs F0..F3, then F4 B0 ... F7 B3, then
 * B4..B7; copy k runs F(k) F(k+4) B(k) B(k+4) and holds 2. One stage before 4 copies: W_0 = 4
 * again, stage 0 holds 5, each copy of stage 1 one; with the textbook warm-up stage 0 would hold
 * 2 and at most 2 copies of stage 1 would ever have work. */
/* Sliced, 4 stages, m = 4 with the first 3 cut in halves: 7 units (0-5 halves, 6 whole). Stage
 * s warms up with the units covering p-s-1 micro-batches' worth: 6, 4, 2, 0 units. */
static void test_sliced_by_hand(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    rt_schedule *s = NULL;
    assert_int_equal(rt_schedule_new_sliced(&s, 4, 7, 3, NULL, &err), SC_OK);
    static const int warm[] = {6, 4, 2, 0}, slots[] = {7, 5, 3, 1};
    for (int st = 0; st < 4; st++) {
        int f = 0, first_b = -1;
        for (int i = 0; i < s->count[st] && first_b < 0; i++) {
            if (s->actions[st][i].kind == RT_ACT_B)
                first_b = f;
            else if (s->actions[st][i].kind == RT_ACT_F)
                f++;
        }
        /* forwards before the first backward: the warm-up and the one that pairs with it */
        assert_int_equal(first_b, warm[st] + 1 < 7 ? warm[st] + 1 : 7);
        assert_int_equal(s->slots[st], slots[st]);
        assert_int_equal(rt_schedule_sliced_slots_bound(4, NULL, st, 7, 3), slots[st]);
    }
    assert_int_equal(rt_schedule_validate_replicas(s, NULL, &err), SC_OK);
    rt_schedule_destroy(&s);
    /* no halves: the 1f1b lists */
    rt_schedule *plain = NULL;
    assert_int_equal(rt_schedule_new_sliced(&s, 4, 4, 0, NULL, &err), SC_OK);
    assert_int_equal(rt_schedule_new(&plain, RT_SCHED_1F1B, 4, 4, &err), SC_OK);
    for (int st = 0; st < 4; st++) {
        assert_int_equal(s->count[st], plain->count[st]);
        assert_memory_equal(s->actions[st], plain->actions[st],
                            (size_t)s->count[st] * sizeof *s->actions[st]);
    }
    rt_schedule_destroy(&s);
    rt_schedule_destroy(&plain);
    assert_int_equal(rt_schedule_new_sliced(&s, 4, 7, 4, NULL, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "valid: 0 to 3"));
}

static void test_1f1b_replicated_by_hand(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    static const int four_one[] = {4, 1}, one_four[] = {1, 4};
    rt_schedule *s = NULL;
    assert_int_equal(rt_schedule_new_replicated(&s, RT_SCHED_1F1B, 2, 8, four_one, &err), SC_OK);
    static const rt_action_kind F = RT_ACT_F, B = RT_ACT_B;
    static const struct {
        rt_action_kind kind;
        int mb;
    } want0[] = {{F, 0}, {F, 1}, {F, 2}, {F, 3}, {F, 4}, {B, 0}, {F, 5}, {B, 1},
                 {F, 6}, {B, 2}, {F, 7}, {B, 3}, {B, 4}, {B, 5}, {B, 6}, {B, 7}};
    for (int i = 0, j = 0; i < s->count[0]; i++) {
        const rt_action *a = &s->actions[0][i];
        if (a->kind != F && a->kind != B)
            continue;
        assert_true(j < 16);
        assert_int_equal(a->kind, want0[j].kind);
        assert_int_equal(a->mb, want0[j].mb);
        j++;
    }
    assert_int_equal(s->slots[0], 5); /* the whole stage: W_0 + 1 */
    assert_int_equal(s->slots[1], 1);
    assert_int_equal(rt_schedule_slots_bound(RT_SCHED_1F1B, 2, four_one, 0, 8), 2);
    assert_int_equal(rt_schedule_slots_bound(RT_SCHED_1F1B, 2, four_one, 1, 8), 1);
    assert_int_equal(rt_schedule_slots_bound(RT_SCHED_GPIPE, 2, four_one, 0, 8), 2);
    assert_int_equal(rt_schedule_validate_replicas(s, four_one, &err), SC_OK);
    for (int k = 0; k < 4; k++) {
        rt_action *a = NULL;
        int n = 0, slots = 0;
        assert_int_equal(rt_schedule_restrict(s, 0, 4, k, &a, &n, &slots, &err), SC_OK);
        assert_int_equal(slots, 2);
        /* F(k) SEND_F F(k+4) SEND_F RECV_B B(k) RECV_B B(k+4) OPT */
        assert_int_equal(n, 9);
        assert_int_equal(a[0].kind, F);
        assert_int_equal(a[0].mb, k);
        assert_int_equal(a[2].kind, F);
        assert_int_equal(a[2].mb, k + 4);
        assert_int_equal(a[5].kind, B);
        assert_int_equal(a[5].mb, k);
        free(a);
    }
    int held = 0;
    static const int w41[] = {4, 1}, w14[] = {1, 4}; /* a copy has 4 times the other's work */
    assert_int_equal(lockstep_busy(s, four_one, w41, 0, &held), 4);
    assert_int_equal(held, 8); /* every copy holds its two at once */
    rt_schedule_destroy(&s);

    assert_int_equal(rt_schedule_new_replicated(&s, RT_SCHED_1F1B, 2, 8, one_four, &err), SC_OK);
    assert_int_equal(s->slots[0], 5);
    assert_int_equal(rt_schedule_slots_bound(RT_SCHED_1F1B, 2, one_four, 0, 8), 5);
    assert_int_equal(rt_schedule_slots_bound(RT_SCHED_1F1B, 2, one_four, 1, 8), 1);
    assert_int_equal(rt_schedule_validate_replicas(s, one_four, &err), SC_OK);
    assert_int_equal(lockstep_busy(s, one_four, w14, 1, &held), 4); /* all four copies at work */
    assert_int_equal(lockstep_busy(s, one_four, w14, 0, &held), 1);
    assert_int_equal(held, 5);
    rt_schedule_destroy(&s);
    /* the textbook lists restricted the same way keep half of the copies idle */
    assert_int_equal(rt_schedule_new(&s, RT_SCHED_1F1B, 2, 8, &err), SC_OK);
    assert_int_equal(rt_schedule_validate_replicas(s, one_four, &err), SC_OK);
    assert_int_equal(lockstep_busy(s, one_four, w14, 1, &held), 2);
    assert_int_equal(rt_schedule_validate_replicas(s, four_one, &err), SC_OK);
    lockstep_busy(s, four_one, w41, 0, &held);
    assert_int_equal(held, 4); /* one micro-batch per copy of stage 0 at a time */
    rt_schedule_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generated_schedules),
        cmocka_unit_test(test_validation_rejects),
        cmocka_unit_test(test_replicated_restrict),
        cmocka_unit_test(test_pipedream_lists),
        cmocka_unit_test(test_pipedream_lists_rejects),
        cmocka_unit_test(test_1f1b_replicated_lists),
        cmocka_unit_test(test_1f1b_replicated_by_hand),
        cmocka_unit_test(test_sliced_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
