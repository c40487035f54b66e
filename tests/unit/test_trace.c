/* The measured timeline: the runtime's ring of iterations (worker/runtime/timeline.c) and the
 * coordinator's trace of them beside the plan (coordinator/trace.c), on synthetic clocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/trace.h"
#include "worker/runtime/timeline.h"

/* ---- the ring ---- */

static void record(rt_timeline *t, uint64_t it, int n)
{
    rt_timeline_begin(t, it);
    for (int i = 0; i < n; i++)
        rt_timeline_add(t, RT_TL_FORWARD, i, it, it * 1000 + (uint64_t)i * 10,
                        it * 1000 + (uint64_t)i * 10 + 5);
    rt_timeline_commit(t);
}

static void test_ring_keeps_newest(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    rt_timeline *t = NULL;
    assert_int_equal(rt_timeline_new(&t, 4, 3, &err), SC_OK);
    rt_tl_event *ev = NULL;
    size_t n = 99;
    rt_tl_snapshot_info info;
    assert_int_equal(rt_timeline_snapshot(t, 0, 0, &ev, &n, &info, &err), SC_OK);
    assert_null(ev);
    assert_int_equal(n, 0);
    assert_int_equal(info.newest_iteration, 0);
    for (uint64_t it = 1; it <= 6; it++)
        record(t, it, 2);
    /* only the last 4 iterations are kept, oldest first, each in its recorded order */
    assert_int_equal(rt_timeline_snapshot(t, 0, 0, &ev, &n, &info, &err), SC_OK);
    assert_int_equal(n, 8);
    assert_int_equal(info.iterations, 4);
    assert_int_equal(info.newest_iteration, 6);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ev[i].iteration, 3 + i / 2);
        assert_int_equal(ev[i].mb, (int)(i % 2));
        assert_int_equal(ev[i].kind, RT_TL_FORWARD);
        assert_true(ev[i].end_ns > ev[i].start_ns);
    }
    free(ev);
    /* the newest 2, and the newest 2 up to iteration 4 */
    assert_int_equal(rt_timeline_snapshot(t, 2, 0, &ev, &n, &info, &err), SC_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ev[0].iteration, 5);
    assert_int_equal(ev[3].iteration, 6);
    free(ev);
    assert_int_equal(rt_timeline_snapshot(t, 2, 4, &ev, &n, &info, &err), SC_OK);
    assert_int_equal(n, 4);
    assert_int_equal(ev[0].iteration, 3);
    assert_int_equal(ev[3].iteration, 4);
    assert_int_equal(info.newest_iteration, 6);
    free(ev);
    rt_timeline_destroy(&t);
    assert_null(t);
}

static void test_ring_drops_overflow_and_uncommitted(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    rt_timeline *t = NULL;
    assert_int_equal(rt_timeline_new(&t, 4, 3, &err), SC_OK);
    record(t, 1, 5); /* 2 past the room: dropped, counted */
    rt_timeline_begin(t, 2);
    rt_timeline_add(t, RT_TL_BACKWARD, 0, 2, 1, 2); /* a failed step: never committed */
    rt_timeline_begin(t, 3);                        /* the next one replaces it */
    rt_timeline_add(t, RT_TL_OPTIMIZER, -1, 3, 7, 9);
    rt_timeline_commit(t);
    rt_timeline_add(t, RT_TL_FORWARD, 0, 3, 10, 11); /* no open iteration: ignored */
    rt_tl_event *ev = NULL;
    size_t n = 0;
    rt_tl_snapshot_info info;
    assert_int_equal(rt_timeline_snapshot(t, 0, 0, &ev, &n, &info, &err), SC_OK);
    assert_int_equal(n, 4);
    assert_int_equal(info.dropped, 2);
    assert_int_equal(info.iterations, 2);
    assert_int_equal(ev[3].iteration, 3);
    assert_int_equal(ev[3].kind, RT_TL_OPTIMIZER);
    assert_int_equal(ev[3].mb, -1);
    free(ev);
    /* a flush is an entry of its own under its iteration's number: one iteration, both entries */
    record(t, 3, 1);
    assert_int_equal(rt_timeline_snapshot(t, 1, 0, &ev, &n, &info, &err), SC_OK);
    assert_int_equal(info.iterations, 1);
    assert_int_equal(n, 2);
    free(ev);
    assert_string_equal(rt_tl_kind_name(RT_TL_SEND_GRADIENT), "send_gradient");
    assert_string_equal(rt_tl_kind_name(0), "?");
    rt_timeline_destroy(&t);
    assert_int_equal(rt_timeline_new(&t, 0, 3, &err), SC_ERR_INVALID);
    assert_null(t);
}

/* ---- the trace ---- */

static void test_clock_offset(void **state)
{
    (void)state;
    /* sent at 1000, answered at 1200 (our clock); the worker read 5100 at the midpoint 1100 */
    assert_int_equal(coord_trace_clock_offset(1000, 1200, 5100), 4000);
    assert_int_equal(coord_trace_clock_offset(1000, 1200, 100), -1000);
}

#define PLAN                                                                                       \
    "{\"strategy\": \"uniform\", \"schedule\": \"1f1b\", \"batch\": 4, "                           \
    "\"iteration_time_s\": 0.002, \"stages\": ["                                                   \
    "{\"first_block\": 0, \"last_block\": 1, \"devices\": [0], \"replicas\": 1, "                  \
    "\"compute_s\": 0.0003, \"worker_ids\": [\"w-1\"]},"                                           \
    "{\"first_block\": 2, \"last_block\": 3, \"devices\": [1], \"replicas\": 1, "                  \
    "\"compute_s\": 0.0003, \"worker_ids\": [\"w-2\"]}], "                                         \
    "\"microbatches\": {\"count\": 2, \"size\": 2}}"

/* Iterations first..last of a 2-micro-batch stage, one 1 ms apart from `base` on its own clock:
 * stage 0 runs F0 S0 F1 S1 R1 B1 R0 B0 OPT, stage 1 R0 F0 B0 S0 R1 F1 B1 S1 OPT, 50 us each. */
static size_t lane_events(coord_trace_event *ev, int stage, uint64_t first, uint64_t last,
                          uint64_t base)
{
    static const int k0[] = {1, 3, 1, 3, 6, 2, 6, 2, 8}, m0[] = {0, 0, 1, 1, 1, 1, 0, 0, -1};
    static const int k1[] = {4, 1, 2, 5, 4, 1, 2, 5, 8}, m1[] = {0, 0, 0, 0, 1, 1, 1, 1, -1};
    size_t n = 0;
    for (uint64_t it = first; it <= last; it++)
        for (int a = 0; a < 9; a++) {
            uint64_t t = base + (it - 1) * 1000000 + (uint64_t)a * 60000 + (uint64_t)stage * 30000;
            ev[n++] = (coord_trace_event){
                stage ? k1[a] : k0[a], stage ? m1[a] : m0[a], it, it, t, t + 50000};
        }
    return n;
}

static json_t *pid_named(json_t *doc, const char *prefix, int *pid)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(doc, "traceEvents"), i, e)
    {
        const char *nm = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
        if (strcmp(json_string_value(json_object_get(e, "name")), "process_name") == 0 &&
            nm != NULL && strncmp(nm, prefix, strlen(prefix)) == 0) {
            *pid = (int)json_integer_value(json_object_get(e, "pid"));
            return e;
        }
    }
    return NULL;
}

static void test_trace_build(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    coord_trace_event e0[90], e1[90];
    /* stage 0's worker clock runs 7 s ahead of the coordinator's, stage 1's 3 s behind; stage 0
     * holds iterations 3..10, stage 1 (behind in the pipeline) 1..9 */
    const uint64_t base = 100000000000ull;
    size_t n0 = lane_events(e0, 0, 3, 10, base + 7000000000ull);
    size_t n1 = lane_events(e1, 1, 1, 9, base - 3000000000ull);
    coord_trace_lane lanes[2] = {{0, 0, "w-1", 7000000000ll, e0, n0},
                                 {1, 0, "w-2", -3000000000ll, e1, n1}};
    char *json = NULL;
    coord_trace_summary sum;
    assert_int_equal(coord_trace_build(lanes, 2, PLAN, 4, &json, &sum, &err), SC_OK);
    /* the window: the newest 4 iterations both hold, 6..9 */
    assert_int_equal(sum.iterations, 4);
    assert_int_equal(sum.first_iteration, 6);
    assert_int_equal(sum.last_iteration, 9);
    assert_int_equal(sum.events, 2 * 4 * 9);
    assert_int_equal(sum.lanes, 2);
    assert_float_equal(sum.measured_iteration_s, 0.001, 1e-9);
    assert_float_equal(sum.planned_iteration_s, 0.002, 1e-12);
    assert_true(sum.planned_events > 0);
    json_t *doc = json_loads(json, 0, NULL);
    assert_non_null(doc);
    int p0 = -1, p1 = -1, q0 = -1, q1 = -1;
    assert_non_null(pid_named(doc, "measured: stage 0 copy 0 (worker w-1)", &p0));
    assert_non_null(pid_named(doc, "measured: stage 1 copy 0 (worker w-2)", &p1));
    assert_non_null(pid_named(doc, "planned: stage 0", &q0));
    assert_non_null(pid_named(doc, "planned: stage 1", &q1));
    /* offsets corrected: on the coordinator's clock stage 1's actions start 30 us after stage
     * 0's; time 0 is the window's first action (stage 0's F0 of iteration 6); each lane in order */
    double first0 = -1, first1 = -1, prev_end[2] = {-1, -1}, planned_first = 1e18;
    int n_measured = 0, n_planned[2] = {0, 0};
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(doc, "traceEvents"), i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") != 0)
            continue;
        int pid = (int)json_integer_value(json_object_get(e, "pid"));
        double ts = json_number_value(json_object_get(e, "ts"));
        double dur = json_number_value(json_object_get(e, "dur"));
        if (pid == q0 || pid == q1) {
            n_planned[pid == q1]++;
            planned_first = ts < planned_first ? ts : planned_first;
            continue;
        }
        if (pid != p0 && pid != p1)
            continue;
        n_measured++;
        int s = pid == p1;
        json_t *it = json_object_get(json_object_get(e, "args"), "iteration");
        assert_true(json_integer_value(it) >= 6 && json_integer_value(it) <= 9);
        assert_true(ts >= prev_end[s] - 1e-6);
        assert_float_equal(dur, 50.0, 1e-6);
        prev_end[s] = ts + dur;
        if (s == 0 && first0 < 0)
            first0 = ts;
        if (s == 1 && first1 < 0)
            first1 = ts;
    }
    assert_int_equal(n_measured, 72);
    assert_float_equal(first0, 0.0, 1e-6);
    assert_float_equal(first1, 30.0, 1e-6);
    /* the plan: both stages, aligned with the window's start, its iteration 2 ms */
    assert_true(n_planned[0] > 0 && n_planned[1] > 0);
    assert_float_equal(planned_first, 0.0, 1e-6);
    json_t *other = json_object_get(doc, "otherData");
    assert_int_equal(json_integer_value(json_object_get(other, "first_iteration")), 6);
    json_t *w1 = json_array_get(json_object_get(other, "workers"), 1);
    assert_string_equal(json_string_value(json_object_get(w1, "worker")), "w-2");
    assert_int_equal(json_integer_value(json_object_get(w1, "clock_offset_ns")), -3000000000ll);
    json_decref(doc);
    free(json);

    /* names: "<kind> <micro-batch>", the optimizer without one */
    assert_int_equal(coord_trace_build(lanes, 1, NULL, 1, &json, &sum, &err), SC_OK);
    assert_non_null(strstr(json, "\"name\":\"send_activation 1\""));
    assert_non_null(strstr(json, "\"name\":\"optimizer\""));
    assert_int_equal(sum.planned_events, 0); /* no plan: the measured rows stand alone */
    assert_int_equal(sum.iterations, 1);
    free(json);
}

/* The plan's cluster carries block_times: the planned forward and backward keep their ratio
 * (stage 0: blocks 0-1, 1 + 1 forward against 3 + 3 backward on its device type "a"). */
#define PLAN_TIMES                                                                                 \
    "{\"schedule\": \"gpipe\", \"iteration_time_s\": 0.01, \"stages\": ["                          \
    "{\"first_block\": 0, \"last_block\": 1, \"devices\": [0], \"replicas\": 1, "                  \
    "\"compute_s\": 1},"                                                                           \
    "{\"first_block\": 2, \"last_block\": 2, \"devices\": [1], \"replicas\": 1, "                  \
    "\"compute_s\": 1}], \"microbatches\": {\"count\": 2}, "                                       \
    "\"cluster\": {\"device_types\": {"                                                            \
    "\"a\": {\"block_times\": {\"x\": {\"forward_s\": 1, \"backward_s\": 3}, "                     \
    "\"y\": {\"forward_s\": 1, \"backward_s\": 3}, \"z\": {\"forward_s\": 9, \"backward_s\": "     \
    "9}}}, "                                                                                       \
    "\"b\": {\"block_times\": {\"x\": {\"forward_s\": 1, \"backward_s\": 1}, "                     \
    "\"y\": {\"forward_s\": 1, \"backward_s\": 1}, \"z\": {\"forward_s\": 2, \"backward_s\": "     \
    "2}}}}, "                                                                                      \
    "\"servers\": [{\"devices\": [\"a\"]}, {\"devices\": [\"b\"]}]}}"

static double planned_dur(json_t *doc, int pid, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(doc, "traceEvents"), i, e)
    {
        if (json_integer_value(json_object_get(e, "pid")) == pid &&
            strcmp(json_string_value(json_object_get(e, "name")), name) == 0)
            return json_number_value(json_object_get(e, "dur"));
    }
    return -1;
}

static void test_trace_plan_times(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    coord_trace_event a[9];
    coord_trace_lane lane = {0, 0, "w-1", 0, a, lane_events(a, 0, 1, 1, 1000)};
    char *json = NULL;
    coord_trace_summary sum;
    assert_int_equal(coord_trace_build(&lane, 1, PLAN_TIMES, 0, &json, &sum, &err), SC_OK);
    json_t *doc = json_loads(json, 0, NULL);
    int q0 = -1, q1 = -1;
    assert_non_null(pid_named(doc, "planned: stage 0", &q0));
    assert_non_null(pid_named(doc, "planned: stage 1", &q1));
    double f0 = planned_dur(doc, q0, "forward 0"), b0 = planned_dur(doc, q0, "backward 0");
    double f1 = planned_dur(doc, q1, "forward 0"), b1 = planned_dur(doc, q1, "backward 0");
    assert_true(f0 > 0 && f1 > 0);
    assert_float_equal(b0 / f0, 3.0, 1e-9);
    assert_float_equal(b1 / f1, 1.0, 1e-9); /* block z on type b */
    assert_float_equal(f1 / f0, 1.0, 1e-9);
    json_decref(doc);
    free(json);
}

static void test_trace_refusals(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    char *json = NULL;
    coord_trace_lane none[1] = {{0, 0, "w-1", 0, NULL, 0}};
    assert_int_equal(coord_trace_build(none, 1, PLAN, 0, &json, NULL, &err), SC_ERR_NOT_FOUND);
    assert_null(json);
    /* two lanes with no iteration in common */
    coord_trace_event a[9], b[9];
    coord_trace_lane lanes[2] = {{0, 0, "w-1", 0, a, lane_events(a, 0, 1, 1, 1000)},
                                 {1, 0, "w-2", 0, b, lane_events(b, 1, 2, 2, 1000)}};
    sc_err_clear(&err);
    assert_int_equal(coord_trace_build(lanes, 2, PLAN, 0, &json, NULL, &err), SC_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "no iteration in common"));
    /* an unreadable plan: still a trace, without planned rows */
    assert_int_equal(coord_trace_build(lanes, 1, "{not json", 0, &json, NULL, &err), SC_OK);
    assert_null(strstr(json, "planned: "));
    free(json);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_keeps_newest),
        cmocka_unit_test(test_ring_drops_overflow_and_uncommitted),
        cmocka_unit_test(test_clock_offset),
        cmocka_unit_test(test_trace_build),
        cmocka_unit_test(test_trace_plan_times),
        cmocka_unit_test(test_trace_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
