/* Helpers shared by the simulator's tests; see planner_sim_harness.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "planner_sim_harness.h"

plan_sim_result play(plan_sched_kind k, int p, int m, int sliced, const plan_sim_stage *st,
                     const plan_sim_share *sh, double eff, int record)
{
    plan_schedule *s = NULL;
    plan_sim_result r;
    sc_err err;
    sc_err_clear(&err);
    int units = k == PLAN_SCHED_PIPEDREAM ? 8 * p : m;
    assert_int_equal(plan_schedule_build(&s, k, p, units, sliced, &err), SC_OK);
    assert_int_equal(plan_schedule_validate(s, &err), SC_OK);
    if (sh == NULL)
        assert_int_equal(plan_sim_run(s, st, m, eff, record, &r, &err), SC_OK);
    else
        assert_int_equal(plan_sim_run_shared(s, st, m, eff, sh, record, &r, &err), SC_OK);
    plan_schedule_destroy(&s);
    return r;
}

plan_sim_result run(plan_sched_kind k, int p, int m, int sliced, const plan_sim_stage *st,
                    int record)
{
    return play(k, p, m, sliced, st, NULL, 1.0, record);
}

void equal_stages(plan_sim_stage *st, int p, double f, double b)
{
    for (int i = 0; i < p; i++) {
        memset(&st[i], 0, sizeof st[i]);
        st[i].fwd_s = f;
        st[i].bwd_s = b;
    }
}

/* Orders events by lane, start, kind and unit. */
static int event_cmp(const void *x, const void *y)
{
    const plan_sim_event *a = x, *b = y;
    if (a->lane != b->lane)
        return a->lane < b->lane ? -1 : 1;
    if (a->start_s != b->start_s)
        return a->start_s < b->start_s ? -1 : 1;
    if (a->kind != b->kind)
        return a->kind < b->kind ? -1 : 1;
    return a->unit < b->unit ? -1 : a->unit > b->unit;
}

void assert_same_result(plan_sim_result *a, plan_sim_result *b)
{
    assert_int_equal(a->n_stages, b->n_stages);
    assert_true(a->iteration_s == b->iteration_s);
    assert_true(a->steady_s == b->steady_s);
    assert_true(a->bubble_fraction == b->bubble_fraction);
    size_t n = (size_t)a->n_stages * sizeof(double);
    assert_memory_equal(a->busy_s, b->busy_s, n);
    assert_memory_equal(a->idle_s, b->idle_s, n);
    assert_memory_equal(a->peak_inflight, b->peak_inflight, n);
    assert_int_equal(a->n_events, b->n_events);
    qsort(a->events, (size_t)a->n_events, sizeof *a->events, event_cmp);
    qsort(b->events, (size_t)b->n_events, sizeof *b->events, event_cmp);
    for (int e = 0; e < a->n_events; e++) {
        assert_int_equal(event_cmp(&a->events[e], &b->events[e]), 0);
        assert_true(a->events[e].dur_s == b->events[e].dur_s);
    }
}
