/* The zero-bubble schedule ZB-H1 (zb1) in coordinator/planner: its action lists (every unit's
 * W after its B, the validator's new rules), the simulator's B/W split (also with copies: the
 * all-reduce after the last W) (a hand-built
 * timeline; the bubble below 1f1b's at the same stages and micro-batches with the same peak of
 * stashed micro-batches; shared processors), the planner's memory count, that `auto` picks zb1
 * only when the request says the runtime runs it, the assumption stated in the plan, and W in
 * the trace. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_pipeline.h"
#include "coordinator/planner/plan.h"
#include "coordinator/planner/plan_partition.h"
#include "coordinator/planner/plan_schedule.h"
#include "coordinator/planner/plan_sim.h"

/* Equal stages: forward f, backward 2f of which half is W, transfers c each way. */
static void simulate(plan_sched_kind k, int p, int m, double f, double c, plan_sim_result *r)
{
    plan_schedule *s = NULL;
    sc_err err;
    assert_int_equal(plan_schedule_build(&s, k, p, m, 0, &err), SC_OK);
    assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
    plan_sim_stage *st = calloc((size_t)p, sizeof *st);
    assert_non_null(st);
    for (int i = 0; i < p; i++) {
        st[i].fwd_s = f;
        st[i].bwd_s = 2 * f;
        st[i].wgrad_s = f;
        st[i].send_fwd_s = c;
        st[i].send_bwd_s = c;
    }
    assert_int_equal(plan_sim_run(s, st, m, 1, 1, r, &err), SC_OK);
    free(st);
    plan_schedule_destroy(&s);
}

static double max_peak(const plan_sim_result *r)
{
    double most = 0;
    for (int i = 0; i < r->n_stages; i++)
        most = r->peak_inflight[i] > most ? r->peak_inflight[i] : most;
    return most;
}

static void test_lists(void **state)
{
    (void)state;
    sc_err err;
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m <= 9; m++) {
            plan_schedule *s = NULL;
            assert_int_equal(plan_schedule_build(&s, PLAN_SCHED_ZB1, p, m, 0, &err), SC_OK);
            assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
            for (int st = 0; st < p; st++) {
                /* every unit: F, B, W once each, in that order; W in micro-batch order */
                int nw = 0, last_w = -1;
                for (int a = 0; a < s->n_actions[st]; a++)
                    if (s->actions[st][a].kind == PLAN_ACT_W) {
                        assert_int_equal(s->actions[st][a].unit, last_w + 1);
                        last_w = s->actions[st][a].unit;
                        nw++;
                    }
                assert_int_equal(nw, m);
                /* stage 0 runs each W right after its B */
                if (st == 0)
                    for (int a = 0; a < s->n_actions[0]; a++)
                        if (s->actions[0][a].kind == PLAN_ACT_B)
                            assert_int_equal(s->actions[0][a + 1].kind, PLAN_ACT_W);
            }
            plan_schedule_destroy(&s);
        }
    assert_int_equal(plan_sched_parse("zb1"), PLAN_SCHED_ZB1);
    assert_int_equal(plan_sched_parse("auto"), PLAN_SCHED_AUTO);
    assert_string_equal(plan_sched_name(PLAN_SCHED_ZB1), "zb1");

    /* copies as the synchronous schedules: one micro-batch at least for each */
    plan_schedule *s = NULL;
    assert_true(plan_replicas_runnable(PLAN_SCHED_ZB1, 8, 2));
    assert_true(plan_replicas_runnable(PLAN_SCHED_ZB1, 8, 1));
    assert_false(plan_replicas_runnable(PLAN_SCHED_ZB1, 2, 3));

    /* the validator: a W outside zb1, a missing W, a W before its B */
    assert_int_equal(plan_schedule_new(&s, 1, 1, &err), SC_OK);
    s->kind = PLAN_SCHED_1F1B;
    plan_schedule_push(s, 0, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_B, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_W, 0, &err);
    sc_err_clear(&err);
    assert_int_equal(plan_schedule_validate(s, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "only zb1"));
    s->kind = PLAN_SCHED_ZB1;
    assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
    s->n_actions[0] = 2; /* drop the W */
    sc_err_clear(&err);
    assert_int_equal(plan_schedule_validate(s, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "weight gradient"));
    s->n_actions[0] = 0;
    plan_schedule_push(s, 0, PLAN_ACT_F, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_W, 0, &err);
    plan_schedule_push(s, 0, PLAN_ACT_B, 0, &err);
    sc_err_clear(&err);
    assert_int_equal(plan_schedule_validate(s, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "before its B"));
    plan_schedule_destroy(&s);
}

/* p = 4, m = 8, F = B = W = 1, no transfers: 1F1B takes (m + p - 1)(F + B + W) = 33, ZB-H1
 * m (F + B + W) + (p - 1)(F + B - W) = 27, the bubble per stage going from 9 to 3. */
static void test_by_hand(void **state)
{
    (void)state;
    plan_sim_result a, z;
    simulate(PLAN_SCHED_1F1B, 4, 8, 1, 0, &a);
    simulate(PLAN_SCHED_ZB1, 4, 8, 1, 0, &z);
    assert_float_equal(a.iteration_s, 33, 1e-12);
    assert_float_equal(z.iteration_s, 27, 1e-12);
    assert_float_equal(a.bubble_fraction, 1 - 24.0 / 33, 1e-12);
    assert_float_equal(z.bubble_fraction, 1 - 24.0 / 27, 1e-12);
    /* B and W are each half the backward; W is recorded as its own event */
    int nb = 0, nw = 0;
    for (int e = 0; e < z.n_events; e++) {
        if (z.events[e].kind == PLAN_ACT_B) {
            assert_float_equal(z.events[e].dur_s, 1, 1e-12);
            nb++;
        }
        if (z.events[e].kind == PLAN_ACT_W) {
            assert_float_equal(z.events[e].dur_s, 1, 1e-12);
            nw++;
        }
    }
    assert_int_equal(nb, 4 * 8);
    assert_int_equal(nw, 4 * 8);
    /* every stage keeps min(p, m) = 4 micro-batches at most, 1F1B's first stage's count */
    for (int i = 0; i < 4; i++) {
        assert_float_equal(z.peak_inflight[i], 4, 0);
        assert_float_equal(a.peak_inflight[i], 4 - i, 0);
    }
    plan_sim_result_free(&a);
    plan_sim_result_free(&z);
}

/* Replicated stages, by hand: stage 0 of two copies, stage 1 of one; forward, B and W 1 s each,
 * no transfers, the copies' all-reduce and update (OPT) 5 s on stage 0, 0.5 s on stage 1.
 * Stage 0 warms up with W_0 = 2 forwards (1F1B-RR over 3 copies), stage 1 with none and defers
 * W_0 - W_1 = 2 W. Lists: copy 0 F0 F2 B0 W0 B2 W2 OPT, copy 1 F1 F3 B1 W1 B3 W3 OPT, stage 1
 * F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3 OPT. Stage 1 runs F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3 back
 * to back from 1 s to 13 s (OPT to 13.5 s); copy 1 ends its last W (W3, after B3 from 10 s) at
 * 12 s, copy 0 its own (W2) at 9 s: they meet there, and the all-reduce after the last W ends
 * the iteration at 17 s. A copy holds ceil(min(W_0 + 1, m) / r) units, F to W: 2 on stage 0's,
 * 3 on stage 1. */
static void test_replicated_by_hand(void **state)
{
    (void)state;
    plan_schedule *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    int reps[2] = {2, 1};
    assert_int_equal(plan_schedule_build_replicated(&s, PLAN_SCHED_ZB1, 2, 4, 0, reps, &err),
                     SC_OK);
    assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
    /* the OPT, the copies' all-reduce, follows every stage's last W */
    for (int i = 0; i < 2; i++) {
        int n = s->n_actions[i];
        assert_int_equal(s->actions[i][n - 1].kind, PLAN_ACT_OPT);
        assert_int_equal(s->actions[i][n - 2].kind, PLAN_ACT_W);
    }
    plan_sim_stage st[2] = {{.fwd_s = 1, .bwd_s = 2, .wgrad_s = 1, .opt_s = 5},
                            {.fwd_s = 1, .bwd_s = 2, .wgrad_s = 1, .opt_s = 0.5}};
    plan_sim_result r;
    assert_int_equal(plan_sim_run(s, st, 4, 1, 1, &r, &err), SC_OK);
    assert_float_equal(r.iteration_s, 17, 1e-12);
    assert_float_equal(r.peak_inflight[0], 2, 0);
    assert_float_equal(r.peak_inflight[1], 3, 0);
    assert_float_equal(plan_stash_count_zb1_copy(sc_pipeline_warmup(3, 2) + 1, 2, 4), 2, 0);
    assert_float_equal(plan_stash_count_zb1_copy(sc_pipeline_warmup(3, 2) + 1, 1, 4), 3, 0);
    /* the all-reduce starts when both copies of stage 0 have run their last W */
    double opt_start = -1, last_w = 0;
    for (int e = 0; e < r.n_events; e++) {
        const plan_sim_event *x = &r.events[e];
        if (x->lane != 0)
            continue;
        if (x->kind == PLAN_ACT_OPT)
            opt_start = x->start_s > opt_start ? x->start_s : opt_start;
        if (x->kind == PLAN_ACT_W && x->start_s + x->dur_s > last_w)
            last_w = x->start_s + x->dur_s;
    }
    assert_float_equal(last_w, 12, 1e-12);
    assert_float_equal(opt_start, 12, 1e-12);
    plan_sim_result_free(&r);
    /* the same copies under 1f1b: the backward whole (B + W) on the critical path */
    plan_schedule *o = NULL;
    assert_int_equal(plan_schedule_build_replicated(&o, PLAN_SCHED_1F1B, 2, 4, 0, reps, &err),
                     SC_OK);
    plan_sim_result a;
    assert_int_equal(plan_sim_run(o, st, 4, 1, 0, &a, &err), SC_OK);
    assert_true(a.iteration_s > 17);
    plan_sim_result_free(&a);
    plan_schedule_destroy(&o);
    plan_schedule_destroy(&s);
}

/* A forward and a backward of unit u on stage st of P, with their transfers. */
static void push_fwd(plan_schedule *s, int st, int u)
{
    if (st > 0)
        plan_schedule_push(s, st, PLAN_ACT_RECV_F, u, NULL);
    plan_schedule_push(s, st, PLAN_ACT_F, u, NULL);
    if (st < s->n_stages - 1)
        plan_schedule_push(s, st, PLAN_ACT_SEND_F, u, NULL);
}

static void push_bwd(plan_schedule *s, int st, int u)
{
    if (st < s->n_stages - 1)
        plan_schedule_push(s, st, PLAN_ACT_RECV_B, u, NULL);
    plan_schedule_push(s, st, PLAN_ACT_B, u, NULL);
    if (st > 0)
        plan_schedule_push(s, st, PLAN_ACT_SEND_B, u, NULL);
}

/* Why zb1 holds min(p, m) on every stage (ZB-H1's memory) rather than 1f1b's p-s: the same
 * lists with every stage capped at p-s micro-batches from F to W must run each W right after its
 * B while forwards are left (only the drain may defer W), and then lose the whole gain: p = 4,
 * m = 8, F = B = W = 1 gives 1f1b's 33 s, against zb1's 27 s. */
static void test_capped_at_1f1b_memory(void **state)
{
    (void)state;
    enum { P = 4, M = 8 };
    plan_schedule *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_schedule_new(&s, P, M, &err), SC_OK);
    s->kind = PLAN_SCHED_ZB1;
    for (int st = 0; st < P; st++) {
        int warm = P - st - 1 < M ? P - st - 1 : M, f = 0, b = 0, w = 0;
        while (f < warm)
            push_fwd(s, st, f++);
        while (b < M) {
            if (f < M)
                push_fwd(s, st, f++);
            push_bwd(s, st, b++);
            if (f < M) /* a forward is left: it needs the slot W frees */
                plan_schedule_push(s, st, PLAN_ACT_W, w++, &err);
        }
        while (w < M)
            plan_schedule_push(s, st, PLAN_ACT_W, w++, &err);
        plan_schedule_push(s, st, PLAN_ACT_OPT, -1, &err);
    }
    assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
    plan_sim_stage st[P];
    for (int i = 0; i < P; i++)
        st[i] = (plan_sim_stage){.fwd_s = 1, .bwd_s = 2, .wgrad_s = 1};
    plan_sim_result capped, z;
    assert_int_equal(plan_sim_run(s, st, M, 1, 0, &capped, &err), SC_OK);
    simulate(PLAN_SCHED_ZB1, P, M, 1, 0, &z);
    for (int i = 0; i < P; i++)
        assert_float_equal(capped.peak_inflight[i], P - i, 0);
    assert_float_equal(capped.iteration_s, 33, 1e-12);
    assert_float_equal(z.iteration_s, 27, 1e-12);
    plan_sim_result_free(&capped);
    plan_sim_result_free(&z);
    plan_schedule_destroy(&s);
}

static void test_bubble_below_1f1b(void **state)
{
    (void)state;
    for (int p = 2; p <= 8; p++)
        for (int m = 1; m <= 4 * p; m++)
            for (int ci = 0; ci < 2; ci++) {
                double c = ci ? 0.1 : 0;
                plan_sim_result a, z;
                simulate(PLAN_SCHED_1F1B, p, m, 1, c, &a);
                simulate(PLAN_SCHED_ZB1, p, m, 1, c, &z);
                if (!(z.bubble_fraction < a.bubble_fraction))
                    print_error("p %d m %d c %g: zb1 %g, 1f1b %g\n", p, m, c, z.bubble_fraction,
                                a.bubble_fraction);
                assert_true(z.bubble_fraction < a.bubble_fraction);
                assert_true(z.iteration_s < a.iteration_s);
                /* the same activation memory: the most any stage stashes */
                assert_float_equal(max_peak(&z), max_peak(&a), 0);
                assert_float_equal(max_peak(&z), p < m ? p : m, 0);
                if (c == 0 && m >= p) /* about a third of 1F1B's (p-1)(F+B+W) idle per stage */
                    assert_float_equal(z.iteration_s, 3.0 * m + (p - 1), 1e-9);
                plan_sim_result_free(&a);
                plan_sim_result_free(&z);
            }
}

/* Shared processors: W is a compute like F and B. Without contention the event loop gives the
 * sweep's figures; with every stage on one processor the iteration is all the work in a row. */
static void test_shared(void **state)
{
    (void)state;
    sc_err err;
    plan_schedule *s = NULL;
    assert_int_equal(plan_schedule_build(&s, PLAN_SCHED_ZB1, 3, 5, 0, &err), SC_OK);
    plan_sim_stage st[3];
    memset(st, 0, sizeof st);
    for (int i = 0; i < 3; i++) {
        st[i].fwd_s = 1 + i;
        st[i].bwd_s = 2 + i;
        st[i].wgrad_s = 1;
    }
    int group[3] = {0, 0, 0}, roomy[1] = {3}, one[1] = {1};
    plan_sim_share sh = {.n_groups = 1, .group = group, .capacity = roomy};
    plan_sim_result a, b, c;
    assert_int_equal(plan_sim_run(s, st, 5, 1, 0, &a, &err), SC_OK);
    assert_int_equal(plan_sim_run_shared(s, st, 5, 1, &sh, 0, &b, &err), SC_OK);
    assert_float_equal(b.iteration_s, a.iteration_s, 1e-12);
    assert_float_equal(b.bubble_fraction, a.bubble_fraction, 1e-12);
    sh.capacity = one;
    assert_int_equal(plan_sim_run_shared(s, st, 5, 1, &sh, 0, &c, &err), SC_OK);
    assert_float_equal(c.iteration_s, 5 * (1 + 2 + 3 + 2 + 3 + 4), 1e-9);
    assert_string_equal(plan_sched_name(PLAN_SCHED_AUTO), "auto");
    plan_sim_result_free(&a);
    plan_sim_result_free(&b);
    plan_sim_result_free(&c);
    plan_schedule_destroy(&s);
}

/* Eight equal blocks on four equal devices: the planner, its memory count, auto and the
 * stated assumption, and the trace. */
static void test_planner(void **state)
{
    (void)state;
    sc_err err;
    plan_profile *p = NULL;
    plan_cluster *c = NULL;
    assert_int_equal(plan_profile_new(&p, 8, &err), SC_OK);
    for (int l = 0; l < 8; l++) {
        p->blocks[l].forward_s = 0.01;
        p->blocks[l].backward_s = 0.02;
        p->blocks[l].activation_bytes = 1e3;
        p->blocks[l].stash_bytes = 1e6;
        p->blocks[l].parameter_bytes = 1e3;
    }
    assert_int_equal(plan_cluster_new_uniform(&c, 4, 1e10, 0, &err), SC_OK);
    plan_request req = {.profile = p,
                        .cluster = c,
                        .batch = 8,
                        .microbatches = 8,
                        .schedule = PLAN_SCHED_ZB1,
                        .record_trace = 1};
    plan_result z, a, au;
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &z, &err), SC_OK);
    assert_int_equal(z.schedule, PLAN_SCHED_ZB1);
    assert_int_equal(z.part->n_stages, 4);
    assert_non_null(strstr(z.note, "assumed"));
    /* every stage stashes min(p, m) = 4 micro-batches under zb1 */
    for (int s = 0; s < 4; s++)
        assert_float_equal(z.sim.peak_inflight[s], 4, 0);
    assert_float_equal(plan_stash_count(PLAN_SCHED_ZB1, 4, 3, 8), 4, 0);
    assert_float_equal(plan_stash_count(PLAN_SCHED_ZB1, 4, 3, 2), 2, 0);
    req.schedule = PLAN_SCHED_1F1B;
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &a, &err), SC_OK);
    assert_true(z.iteration_time_s < a.iteration_time_s);
    assert_true(z.bubble_fraction < a.bubble_fraction);

    /* auto leaves zb1 out unless the runtime runs it */
    req.schedule = PLAN_SCHED_AUTO;
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &au, &err), SC_OK);
    assert_int_not_equal(au.schedule, PLAN_SCHED_ZB1);
    assert_non_null(strstr(au.note, "zb1 left out"));
    plan_result_free(&au);
    req.runtime_zb1 = 1;
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &au, &err), SC_OK);
    assert_int_equal(au.schedule, PLAN_SCHED_ZB1);
    assert_float_equal(au.iteration_time_s, z.iteration_time_s, 1e-12);
    assert_non_null(strstr(au.note, "auto: zb1"));
    assert_non_null(strstr(au.note, "assumed"));

    /* the JSON states the split as an assumption; the trace shows B and W */
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(plan_write_json(f, &req, &au, 1, &err), SC_OK);
    assert_int_equal(plan_sim_write_trace(&au.sim, f, NULL, &err), SC_OK);
    long n = ftell(f);
    rewind(f);
    char *text = calloc((size_t)n + 1, 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    assert_non_null(strstr(text, "\"schedule\": \"zb1\""));
    assert_non_null(strstr(text, "\"backward_split\": {\"weight_gradient_share\": 0.5, "
                                 "\"assumed\": true}"));
    assert_non_null(strstr(text, "\"name\": \"W 7\""));
    assert_non_null(strstr(text, "\"name\": \"B 7\""));
    free(text);

    plan_result_free(&au);
    plan_result_free(&a);
    plan_result_free(&z);
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* A profile that measured B and W (wgrad_s, as `stagecraft profile` writes it): the simulator
 * takes each block's own share, the plan says the split was measured; a wgrad_s above the
 * backward is refused. */
static void test_measured_split(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    static const char text[] =
        "{\"format\": \"stagecraft-profile\", \"version\": 1, \"microbatch_size\": 1, "
        "\"blocks\": ["
        "{\"name\": \"a\", \"forward_s\": 0.01, \"backward_s\": 0.02, \"wgrad_s\": 0.015, "
        "\"activation_bytes\": 1000},"
        "{\"name\": \"b\", \"forward_s\": 0.01, \"backward_s\": 0.02, \"wgrad_s\": 0.005, "
        "\"activation_bytes\": 1000}]}";
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_parse_json(&p, "p.json", text, strlen(text), &err), SC_OK);
    assert_true(plan_profile_wgrad_measured(p));
    assert_float_equal(p->blocks[0].wgrad_share, 0.75, 1e-12);
    assert_float_equal(p->blocks[1].wgrad_share, 0.25, 1e-12);
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_new_uniform(&c, 2, 1e10, 0, &err), SC_OK);
    plan_request req = {.profile = p,
                        .cluster = c,
                        .batch = 8,
                        .microbatches = 8,
                        .max_stages = 2,
                        .schedule = PLAN_SCHED_ZB1};
    plan_result z;
    assert_int_equal(plan_run(&req, PLAN_STRAT_UNIFORM, &z, &err), SC_OK);
    assert_int_equal(z.part->n_stages, 2);
    assert_non_null(strstr(z.note, "as the profile measured them"));
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(plan_write_json(f, &req, &z, 1, &err), SC_OK);
    long n = ftell(f);
    rewind(f);
    char *out = calloc((size_t)n + 1, 1);
    assert_non_null(out);
    assert_int_equal(fread(out, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    assert_non_null(
        strstr(out, "\"backward_split\": {\"weight_gradient_share\": 0.5, \"assumed\": false}"));
    free(out);
    plan_result_free(&z);
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
    static const char bad[] =
        "{\"format\": \"stagecraft-profile\", \"version\": 1, \"microbatch_size\": 1, "
        "\"blocks\": [{\"name\": \"a\", \"forward_s\": 0.01, \"backward_s\": 0.02, "
        "\"wgrad_s\": 0.03, \"activation_bytes\": 1000}]}";
    assert_int_equal(plan_profile_parse_json(&p, "bad.json", bad, strlen(bad), &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "wgrad_s"));
}

/* Memory binds: block 0 stashes 100 bytes a micro-batch, block 1 300; m = 4. On two stages
 * 1F1B stashes 2 and 1 micro-batches (200 and 300 bytes); ZB-H1 would stash 2 on each (200 and
 * 600), which fits neither 450 nor 350, but zb1's budget holds stage 1 to 1f1b's peak, 300, so
 * it defers no W there and zb1 plans the two stages wherever 1f1b does (before the budget zb1
 * fell back to one stage at 450 and found nothing at 350). Then the device's own room: block 0
 * stashing 300, block 1 100 with 130 bytes of parameters (520 with gradients and moments) on
 * devices of 650: the budget (1f1b's 600) would let stage 1 hold 2 (720 bytes), more than its
 * device, so it holds 1 (620). */
static void test_memory(void **state)
{
    (void)state;
    sc_err err;
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_new(&p, 2, &err), SC_OK);
    for (int l = 0; l < 2; l++) {
        p->blocks[l].forward_s = 0.01;
        p->blocks[l].backward_s = 0.02;
        p->blocks[l].stash_bytes = l ? 300 : 100;
    }
    static const double mem[] = {450, 350};
    for (int k = 0; k < 2; k++) {
        plan_cluster *c = NULL;
        assert_int_equal(plan_cluster_new_uniform(&c, 2, 1e10, mem[k], &err), SC_OK);
        plan_request req = {
            .profile = p, .cluster = c, .batch = 4, .microbatches = 4, .schedule = PLAN_SCHED_1F1B};
        plan_result r;
        static const plan_strategy strats[] = {PLAN_STRAT_MINMAX, PLAN_STRAT_EXHAUSTIVE};
        for (int i = 0; i < 2; i++) {
            plan_strategy strat = strats[i];
            for (int z = 0; z < 2; z++) {
                req.schedule = z ? PLAN_SCHED_ZB1 : PLAN_SCHED_1F1B;
                sc_err_clear(&err);
                if (plan_run(&req, strat, &r, &err) != SC_OK)
                    fail_msg("%s %s at %g: %s", plan_strategy_name(strat),
                             plan_sched_name(req.schedule), mem[k], err.msg);
                if (r.part->n_stages != 2)
                    fail_msg("%s %s at %g: %d stages", plan_strategy_name(strat),
                             plan_sched_name(req.schedule), mem[k], r.part->n_stages);
                assert_true(r.fits_memory);
                assert_float_equal(r.peak_memory_bytes[0], 200, 1e-9);
                assert_float_equal(r.peak_memory_bytes[1], 300, 1e-9);
                if (z) {
                    assert_int_equal(r.w_defer[0], 0);
                    assert_int_equal(r.w_defer[1], 0);
                }
                plan_result_free(&r);
            }
        }
        /* hetero, which searches stage counts and copies itself, finds a zb1 plan that fits */
        req.schedule = PLAN_SCHED_ZB1;
        assert_int_equal(plan_run(&req, PLAN_STRAT_HETERO, &r, &err), SC_OK);
        assert_true(r.fits_memory);
        plan_result_free(&r);
        plan_cluster_destroy(&c);
    }
    p->blocks[0].stash_bytes = 300;
    p->blocks[1].stash_bytes = 100;
    p->blocks[1].parameter_bytes = 130;
    plan_cluster *c = NULL;
    assert_int_equal(plan_cluster_new_uniform(&c, 2, 1e10, 650, &err), SC_OK);
    plan_request req = {
        .profile = p, .cluster = c, .batch = 4, .microbatches = 4, .schedule = PLAN_SCHED_ZB1};
    plan_result r;
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &r, &err), SC_OK);
    assert_int_equal(r.part->n_stages, 2);
    assert_true(r.fits_memory);
    assert_int_equal(r.w_defer[1], 0);
    assert_float_equal(r.sim.peak_inflight[1], 1, 0);
    assert_float_equal(r.peak_memory_bytes[1], 620, 1e-9);
    int caps[2];
    double bytes[2] = {300, 100};
    plan_schedule_zb1_caps(2, NULL, 4, bytes, caps); /* the byte budget alone would allow 1 */
    assert_int_equal(caps[1], 1);
    plan_result_free(&r);
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* plan_schedule_zb1_caps: equal slots keep ZB-H1's deferral on every stage (no copies); a larger
 * slot later in the pipeline holds its stage back to 1f1b's peak in bytes; with copies the
 * budget is per copy; on pseudo-random slots every stage gets the most W within the budget. */
static void test_caps(void **state)
{
    (void)state;
    int cap[8];
    double ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 12; m++) {
            plan_schedule_zb1_caps(p, NULL, m, ones, cap);
            for (int st = 0; st < p; st++)
                assert_int_equal(cap[st], plan_schedule_zb1_defer(p, NULL, m, st));
        }
    static const struct {
        int m;
        double bytes[4];
        int want[4];
    } cases[] = {
        {8, {1, 1, 1, 4}, {0, 1, 2, 0}},   /* the head: 1f1b's peak is the last stage's */
        {8, {1, 1, 1, 2}, {0, 1, 2, 1}},   /* budget 4: the last stage may hold 2 */
        {8, {1, 1, 1, 1.5}, {0, 1, 2, 1}}, /* 3 x 1.5 > 4 */
        {8, {4, 1, 1, 1}, {0, 1, 2, 3}},   /* the first stage's the largest: ZB-H1's */
        {8, {1, 2, 1, 1}, {0, 0, 2, 3}},   /* budget 6: stage 1 holds 3 x 2 already */
        {2, {1, 1, 1, 4}, {0, 0, 1, 0}},   /* m < p: at most m held */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        plan_schedule_zb1_caps(4, NULL, cases[i].m, cases[i].bytes, cap);
        for (int st = 0; st < 4; st++)
            if (cap[st] != cases[i].want[st])
                fail_msg("case %zu stage %d: cap %d, want %d", i, st, cap[st], cases[i].want[st]);
    }
    /* two copies of stage 0, equal slots: a copy of stage 0 holds 2 under 1f1b, stage 1 one;
     * uncapped, stage 1 would hold W_0 + 1 = 3 (ZB-H1 counts the copies together) */
    int reps[2] = {2, 1};
    plan_schedule_zb1_caps(2, reps, 4, ones, cap);
    assert_int_equal(cap[0], 0);
    assert_int_equal(cap[1], 1);
    assert_int_equal(plan_schedule_zb1_defer(2, reps, 4, 1), 2);
    assert_int_equal(plan_schedule_zb1_held(2, reps, 4, 1, 2), 3);
    assert_int_equal(plan_schedule_zb1_held(2, reps, 4, 1, 1), 2);
    assert_int_equal(plan_schedule_zb1_held(2, reps, 4, 0, 0), 2);
    /* pseudo-random slots and copies: within the budget, and one more W would break it */
    unsigned seed = 1;
    for (int trial = 0; trial < 2000; trial++) {
        seed = seed * 1103515245u + 12345u;
        int p = 1 + (int)(seed >> 16) % 6, m = 1 + (int)(seed >> 8) % 12, r[6];
        double bytes[6];
        for (int st = 0; st < p; st++) {
            seed = seed * 1103515245u + 12345u;
            bytes[st] = 1 + (seed >> 16) % 1000;
            r[st] = 1 + (int)(seed >> 4) % 2;
            r[st] = r[st] <= m ? r[st] : 1;
        }
        plan_schedule_zb1_caps(p, r, m, bytes, cap);
        double budget = 0;
        for (int st = 0; st < p; st++) {
            double b = plan_schedule_zb1_held(p, r, m, st, 0) * bytes[st];
            budget = b > budget ? b : budget;
        }
        for (int st = 0; st < p; st++) {
            int d = cap[st], most = plan_schedule_zb1_defer(p, r, m, st);
            assert_true(d >= 0 && d <= most);
            assert_true(plan_schedule_zb1_held(p, r, m, st, d) * bytes[st] <= budget);
            assert_true(d == most ||
                        plan_schedule_zb1_held(p, r, m, st, d + 1) * bytes[st] > budget);
        }
    }
}

/* Four equal blocks but the last (a GPT's head) stashing four times as much, on four devices,
 * with the 1f1b-peak cap asked for (a job's "zb1_memory": "1f1b_peak"): the zb1 plan defers no W
 * on the last stage and no more on the others than 1f1b's peak allows (deferred_w in the plan),
 * its peak memory is 1f1b's, and its simulated time lies between ZB-H1's uncapped lists and
 * 1f1b's on the same stages: the cap's cost in bubble. */
static void test_planner_caps(void **state)
{
    (void)state;
    sc_err err;
    plan_profile *p = NULL;
    plan_cluster *c = NULL;
    assert_int_equal(plan_profile_new(&p, 4, &err), SC_OK);
    for (int l = 0; l < 4; l++) {
        p->blocks[l].forward_s = 0.01;
        p->blocks[l].backward_s = 0.02;
        p->blocks[l].activation_bytes = 1e3;
        p->blocks[l].stash_bytes = l == 3 ? 4e6 : 1e6;
        p->blocks[l].parameter_bytes = 1e3;
    }
    assert_int_equal(plan_cluster_new_uniform(&c, 4, 1e10, 0, &err), SC_OK);
    plan_request req = {.profile = p,
                        .cluster = c,
                        .batch = 8,
                        .microbatches = 8,
                        .max_stages = 4,
                        .zb1_peak_cap = 1,
                        .schedule = PLAN_SCHED_ZB1};
    plan_result z, a;
    assert_int_equal(plan_run(&req, PLAN_STRAT_UNIFORM, &z, &err), SC_OK);
    req.schedule = PLAN_SCHED_1F1B;
    assert_int_equal(plan_run(&req, PLAN_STRAT_UNIFORM, &a, &err), SC_OK);
    assert_int_equal(z.part->n_stages, 4);
    assert_int_equal(a.part->n_stages, 4);
    assert_non_null(z.w_defer);
    assert_null(a.w_defer);
    static const int want[4] = {0, 1, 2, 0};
    double peak_z = 0, peak_a = 0;
    for (int s = 0; s < 4; s++) {
        assert_int_equal(z.w_defer[s], want[s]);
        assert_float_equal(z.sim.peak_inflight[s], 4 - s + want[s], 0);
        peak_z = z.peak_memory_bytes[s] > peak_z ? z.peak_memory_bytes[s] : peak_z;
        peak_a = a.peak_memory_bytes[s] > peak_a ? a.peak_memory_bytes[s] : peak_a;
    }
    assert_float_equal(peak_z, peak_a, 1e-6 * peak_a);
    assert_true(z.iteration_time_s < a.iteration_time_s);
    /* the same caps on equal stages (F = B = W = 1): 1f1b 33, ZB-H1 27 (the last stage holding
     * 4 x 4 where 1f1b's peak is 4), capped 30: the last stage runs each W on the critical path,
     * (p-1) W more than ZB-H1, half its gain over 1f1b */
    plan_sim_result capped, h, o;
    plan_schedule *s = NULL;
    plan_sim_stage st[4];
    for (int i = 0; i < 4; i++)
        st[i] = (plan_sim_stage){.fwd_s = 1, .bwd_s = 2, .wgrad_s = 1};
    assert_int_equal(plan_schedule_build_zb1(&s, 4, 8, NULL, want, &err), SC_OK);
    assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
    assert_int_equal(plan_sim_run(s, st, 8, 1, 0, &capped, &err), SC_OK);
    plan_schedule_destroy(&s);
    simulate(PLAN_SCHED_ZB1, 4, 8, 1, 0, &h);
    simulate(PLAN_SCHED_1F1B, 4, 8, 1, 0, &o);
    assert_float_equal(capped.iteration_s, 30, 1e-12);
    assert_float_equal(h.iteration_s, 27, 1e-12);
    assert_float_equal(o.iteration_s, 33, 1e-12);
    plan_sim_result_free(&capped);
    plan_sim_result_free(&h);
    plan_sim_result_free(&o);
    FILE *f = tmpfile();
    assert_non_null(f);
    req.schedule = PLAN_SCHED_ZB1;
    assert_int_equal(plan_write_json(f, &req, &z, 1, &err), SC_OK);
    long n = ftell(f);
    rewind(f);
    char *text = calloc((size_t)n + 1, 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    assert_non_null(strstr(text, "\"deferred_w\": 2}"));
    assert_non_null(strstr(text, "\"deferred_w\": 0}]"));
    free(text);
    plan_result_free(&z);
    plan_result_free(&a);
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* The same stages by default: zb1's deferral bounded by the devices' memory alone. Unlimited,
 * every stage defers ZB-H1's count (0, 1, 2, 3; each holds 4 micro-batches) and the plan
 * simulates as ZB-H1 (27 units on equal F = B = W, here 0.27 s and the transfers) where the cap gave
 * 0.30 s. With devices of 16 MB and the head's block keeping a 1 MB W stash per micro-batch,
 * the last stage holds 3 (4 MB stash + 1 MB W stash each: 15 MB, a fourth would pass 16 MB):
 * it defers 2, and the predicted peak counts the W stashes. */
static void test_planner_device_memory(void **state)
{
    (void)state;
    sc_err err;
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_new(&p, 4, &err), SC_OK);
    for (int l = 0; l < 4; l++) {
        p->blocks[l].forward_s = 0.01;
        p->blocks[l].backward_s = 0.02;
        p->blocks[l].activation_bytes = 1e3;
        p->blocks[l].stash_bytes = l == 3 ? 4e6 : 1e6;
        p->blocks[l].parameter_bytes = 1e3;
    }
    static const double mem[2] = {0, 16e6};
    static const int want[2][4] = {{0, 1, 2, 3}, {0, 1, 2, 2}};
    for (int k = 0; k < 2; k++) {
        p->blocks[3].wstash_bytes = k ? 1e6 : 0;
        plan_cluster *c = NULL;
        assert_int_equal(plan_cluster_new_uniform(&c, 4, 1e10, mem[k], &err), SC_OK);
        plan_request req = {.profile = p,
                            .cluster = c,
                            .batch = 8,
                            .microbatches = 8,
                            .max_stages = 4,
                            .schedule = PLAN_SCHED_ZB1};
        plan_result z;
        assert_int_equal(plan_run(&req, PLAN_STRAT_UNIFORM, &z, &err), SC_OK);
        assert_int_equal(z.part->n_stages, 4);
        assert_true(z.fits_memory);
        for (int s = 0; s < 4; s++) {
            assert_int_equal(z.w_defer[s], want[k][s]);
            assert_float_equal(z.sim.peak_inflight[s], 4 - s + want[k][s], 0);
        }
        if (k == 0) {
            assert_float_equal(z.iteration_time_s, 0.27, 1e-5);
        } else {
            /* parameters and their state, the stash and the W stash of 3 micro-batches */
            assert_float_equal(z.peak_memory_bytes[3], 4e3 + 3 * 4e6 + 3 * 1e6, 1e-3);
            assert_true(z.peak_memory_bytes[3] <= 16e6);
            assert_true(z.iteration_time_s < 0.30 - 1e-9);
        }
        plan_result_free(&z);
        plan_cluster_destroy(&c);
    }
    plan_profile_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lists),
        cmocka_unit_test(test_by_hand),
        cmocka_unit_test(test_replicated_by_hand),
        cmocka_unit_test(test_capped_at_1f1b_memory),
        cmocka_unit_test(test_planner_device_memory),
        cmocka_unit_test(test_bubble_below_1f1b),
        cmocka_unit_test(test_shared),
        cmocka_unit_test(test_planner),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_measured_split),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_planner_caps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
