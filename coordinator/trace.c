/*
 * coord trace (see trace.h): picks the window of iterations every lane holds, shifts each
 * lane's events onto the coordinator's clock, replays the plan with the planner's simulator,
 * and writes both as Chrome trace events with jansson.
 * Not here: collecting the timelines from the workers (jobs_trace.c), the simulator itself.
 * Invariant: trace time 0 is the earliest start, on the coordinator's clock, of the window's
 * first iteration on any lane; no measured event of the window starts before it (each lane
 * runs its iterations in order).
 */
#include "coordinator/trace.h"

#include <ctype.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/plan_replay.h"
#include "proto/stagecraft.pb-c.h"

#define PLANNED_PID 1000 /* + stage */
#define LINK_PID 2000    /* + simulator lane */

int64_t coord_trace_clock_offset(uint64_t sent_ns, uint64_t received_ns, uint64_t worker_now_ns)
{
    /* the midpoint without overflow: sent + (received - sent) / 2 */
    uint64_t mid = sent_ns + (received_ns - sent_ns) / 2;
    return (int64_t)(worker_now_ns - mid);
}

/* "forward", "send_activation", ...: the wire enum's value name without its prefix, lowercase */
static void kind_name(int kind, char *out, size_t size)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&stagecraft__timeline_event_kind__descriptor, kind);
    const char *name = v != NULL && kind != 0 ? v->name + strlen("TIMELINE_") : "unknown";
    size_t i = 0;
    for (; name[i] && i + 1 < size; i++)
        out[i] = (char)tolower((unsigned char)name[i]);
    out[i] = '\0';
}

static int planned_kind(int act)
{
    switch (act) {
    case PLAN_ACT_F:
        return STAGECRAFT__TIMELINE_EVENT_KIND__TIMELINE_FORWARD;
    case PLAN_ACT_B:
        return STAGECRAFT__TIMELINE_EVENT_KIND__TIMELINE_BACKWARD;
    case PLAN_ACT_SEND_F:
        return STAGECRAFT__TIMELINE_EVENT_KIND__TIMELINE_SEND_ACTIVATION;
    case PLAN_ACT_RECV_F:
        return STAGECRAFT__TIMELINE_EVENT_KIND__TIMELINE_RECV_ACTIVATION;
    case PLAN_ACT_SEND_B:
        return STAGECRAFT__TIMELINE_EVENT_KIND__TIMELINE_SEND_GRADIENT;
    case PLAN_ACT_RECV_B:
        return STAGECRAFT__TIMELINE_EVENT_KIND__TIMELINE_RECV_GRADIENT;
    case PLAN_ACT_W:
        return STAGECRAFT__TIMELINE_EVENT_KIND__TIMELINE_WEIGHT_GRADIENT;
    }
    return STAGECRAFT__TIMELINE_EVENT_KIND__TIMELINE_OPTIMIZER;
}

static void add_meta(json_t *out, const char *what, int pid, int tid, const char *key, json_t *v)
{
    json_t *e = json_pack("{s:s, s:s, s:i, s:i, s:{s:o}}", "name", what, "ph", "M", "pid", pid,
                          "tid", tid, "args", key, v);
    json_array_append_new(out, e);
}

static void add_row(json_t *out, int pid, int sort, const char *name)
{
    add_meta(out, "process_name", pid, 0, "name", json_string(name));
    add_meta(out, "process_sort_index", pid, 0, "sort_index", json_integer(sort));
}

static void add_event(json_t *out, int pid, int tid, int kind, int mb, bool planned, double ts_us,
                      double dur_us, json_t *args)
{
    char k[32], name[48];
    kind_name(kind, k, sizeof k);
    if (mb >= 0)
        snprintf(name, sizeof name, "%s %d", k, mb);
    else
        snprintf(name, sizeof name, "%s", k);
    json_t *e = json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:o}", "name", name, "cat",
                          planned ? "planned" : k, "ph", "X", "pid", pid, "tid", tid, "ts", ts_us,
                          "dur", dur_us, "args", args);
    json_array_append_new(out, e);
}

static bool lane_has(const coord_trace_lane *l, uint64_t it)
{
    for (size_t i = 0; i < l->n_events; i++)
        if (l->events[i].iteration == it)
            return true;
    return false;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The window: the iterations of the first lane with events that every lane with events holds,
 * ascending, the newest `iterations` (0: all) of them. *win is a heap array. */
static sc_status pick_window(const coord_trace_lane *lanes, size_t n, int iterations,
                             uint64_t **win, int *n_win, sc_err *err)
{
    *win = NULL;
    *n_win = 0;
    const coord_trace_lane *ref = NULL;
    for (size_t i = 0; i < n && ref == NULL; i++)
        if (lanes[i].n_events > 0)
            ref = &lanes[i];
    if (ref == NULL)
        return SC_ERRF(err, SC_ERR_NOT_FOUND,
                       "no stage has recorded an iteration yet; try again once the job has run "
                       "a step");
    uint64_t *w = malloc(ref->n_events * sizeof *w);
    SC_ALLOC_CHECK(w, err);
    int k = 0;
    for (size_t i = 0; i < ref->n_events; i++) {
        uint64_t it = ref->events[i].iteration;
        bool seen = false, everywhere = true;
        for (int j = 0; j < k && !seen; j++)
            seen = w[j] == it;
        for (size_t l = 0; l < n && everywhere && !seen; l++)
            everywhere = lanes[l].n_events == 0 || lane_has(&lanes[l], it);
        if (!seen && everywhere)
            w[k++] = it;
    }
    qsort(w, (size_t)k, sizeof *w, cmp_u64);
    if (iterations > 0 && k > iterations) {
        memmove(w, w + (k - iterations), (size_t)iterations * sizeof *w);
        k = iterations;
    }
    if (k == 0) {
        free(w);
        return SC_ERRF(err, SC_ERR_NOT_FOUND,
                       "the stages hold no iteration in common yet; try again in a moment");
    }
    *win = w;
    *n_win = k;
    return SC_OK;
}

static bool in_window(const uint64_t *win, int n, uint64_t it)
{
    return it >= win[0] && it <= win[n - 1]; /* consecutive steps; a gap is kept, not invented */
}

/* A worker event's time on the coordinator's clock. */
static int64_t coord_ns(const coord_trace_lane *l, uint64_t worker_ns)
{
    return (int64_t)worker_ns - l->offset_ns;
}

/* The plan replayed (see trace.h) from trace time 0, where the window starts; *planned_s the
 * plan's iteration_time_s. Returns the events written; 0 when the plan cannot be replayed (the
 * measured rows stand alone). */
static int add_planned(json_t *out, const char *plan_json, double *planned_s)
{
    coord_replay rp;
    sc_err err;
    sc_err_clear(&err);
    int written = 0;
    *planned_s = 0;
    if (coord_plan_replay(plan_json, NULL, true, &rp, &err) != SC_OK) {
        coord_replay_free(&rp);
        return 0;
    }
    *planned_s = rp.planned_s;
    int S = rp.n_stages;
    const int *reps = rp.replicas;
    const plan_sim_result *res = &rp.sim;
    double scale = res->iteration_s > 0 && *planned_s > 0 ? *planned_s / res->iteration_s : 1.0;
    bool *named = calloc((size_t)(3 * S + 1), sizeof *named);
    if (named == NULL)
        goto done;
    for (int e = 0; e < res->n_events; e++) {
        const plan_sim_event *ev = &res->events[e];
        int pid, tid = ev->copy;
        char row[64];
        if (ev->lane < S) {
            pid = PLANNED_PID + ev->lane;
            snprintf(row, sizeof row, "planned: stage %d", ev->lane);
        } else {
            int cut = (ev->lane - S) / 2, back = (ev->lane - S) % 2;
            pid = LINK_PID + ev->lane;
            snprintf(row, sizeof row, "planned: link %d->%d", back ? cut + 1 : cut,
                     back ? cut : cut + 1);
        }
        if (ev->lane >= 0 && ev->lane < 3 * S && !named[ev->lane]) {
            named[ev->lane] = true;
            add_row(out, pid, ev->lane < S ? ev->lane * 100 + 99 : 100000 + ev->lane, row);
            for (int k = 0; ev->lane < S && k < reps[ev->lane]; k++) {
                snprintf(row, sizeof row, "copy %d", k);
                add_meta(out, "thread_name", pid, k, "name", json_string(row));
            }
        }
        add_event(out, pid, tid, planned_kind(ev->kind), ev->unit, true, ev->start_s * scale * 1e6,
                  ev->dur_s * scale * 1e6,
                  json_pack("{s:i, s:i}", "unit", ev->unit, "copy", ev->copy));
        written++;
    }
    free(named);
done:
    coord_replay_free(&rp);
    return written;
}

sc_status coord_trace_build(const coord_trace_lane *lanes, size_t n, const char *plan_json,
                            int iterations, char **json, coord_trace_summary *sum, sc_err *err)
{
    *json = NULL;
    coord_trace_summary z;
    memset(&z, 0, sizeof z);
    uint64_t *win = NULL;
    int n_win = 0;
    SC_CHECK(pick_window(lanes, n, iterations, &win, &n_win, err));
    z.iterations = n_win;
    z.first_iteration = win[0];
    z.last_iteration = win[n_win - 1];
    /* the origin, the first lane's iteration starts, and the window's first iteration's span */
    int64_t origin = INT64_MAX, first_end = INT64_MIN;
    int64_t *starts = malloc((size_t)n_win * sizeof *starts);
    for (int w = 0; starts != NULL && w < n_win; w++)
        starts[w] = INT64_MAX;
    const coord_trace_lane *lead = NULL; /* stage 0 copy 0, else the lowest lane with events */
    for (size_t i = 0; i < n; i++)
        if (lanes[i].n_events > 0 &&
            (lead == NULL || lanes[i].stage < lead->stage ||
             (lanes[i].stage == lead->stage && lanes[i].copy < lead->copy)))
            lead = &lanes[i];
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < lanes[i].n_events; k++) {
            const coord_trace_event *e = &lanes[i].events[k];
            if (e->iteration != win[0])
                continue;
            int64_t a = coord_ns(&lanes[i], e->start_ns), b = coord_ns(&lanes[i], e->end_ns);
            origin = a < origin ? a : origin;
            first_end = b > first_end ? b : first_end;
        }
    json_t *doc = json_object(), *out = json_array();
    json_object_set_new(doc, "displayTimeUnit", json_string("ms"));
    json_object_set_new(doc, "traceEvents", out);
    for (size_t i = 0; i < n; i++) {
        const coord_trace_lane *l = &lanes[i];
        bool named = false;
        for (size_t k = 0; k < l->n_events; k++) {
            const coord_trace_event *e = &l->events[k];
            if (!in_window(win, n_win, e->iteration))
                continue;
            if (!named) {
                char row[160];
                snprintf(row, sizeof row, "measured: stage %d copy %d (worker %s)", l->stage,
                         l->copy, l->worker_id != NULL ? l->worker_id : "?");
                add_row(out, (int)i + 1, l->stage * 100 + l->copy, row);
                add_meta(out, "thread_name", (int)i + 1, 0, "name", json_string("runner"));
                named = true;
                z.lanes++;
            }
            int64_t a = coord_ns(l, e->start_ns), b = coord_ns(l, e->end_ns);
            if (l == lead && starts != NULL) {
                int w = (int)(e->iteration - win[0]);
                if (w < n_win && a < starts[w])
                    starts[w] = a;
            }
            add_event(out, (int)i + 1, 0, e->kind, e->mb, false, (double)(a - origin) / 1e3,
                      (double)(b - a) / 1e3,
                      json_pack("{s:i, s:I, s:I, s:s}", "microbatch", e->mb, "step",
                                (json_int_t)e->step, "iteration", (json_int_t)e->iteration,
                                "worker", l->worker_id != NULL ? l->worker_id : "?"));
            z.events++;
        }
    }
    if (n_win >= 2 && starts != NULL && starts[0] != INT64_MAX && starts[n_win - 1] != INT64_MAX)
        z.measured_iteration_s = (double)(starts[n_win - 1] - starts[0]) / 1e9 / (n_win - 1);
    else
        z.measured_iteration_s = (double)(first_end - origin) / 1e9;
    free(starts);
    z.planned_events = add_planned(out, plan_json, &z.planned_iteration_s);
    json_object_set_new(
        doc, "otherData",
        json_pack("{s:I, s:I, s:I, s:f, s:f}", "first_iteration", (json_int_t)z.first_iteration,
                  "last_iteration", (json_int_t)z.last_iteration, "origin_coordinator_ns",
                  (json_int_t)origin, "measured_iteration_s", z.measured_iteration_s,
                  "planned_iteration_s", z.planned_iteration_s));
    json_t *offsets = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(offsets,
                              json_pack("{s:s, s:i, s:i, s:I}", "worker",
                                        lanes[i].worker_id ? lanes[i].worker_id : "?", "stage",
                                        lanes[i].stage, "copy", lanes[i].copy, "clock_offset_ns",
                                        (json_int_t)lanes[i].offset_ns));
    json_object_set_new(json_object_get(doc, "otherData"), "workers", offsets);
    free(win);
    *json = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (*json == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the trace");
    if (sum != NULL)
        *sum = z;
    return SC_OK;
}
