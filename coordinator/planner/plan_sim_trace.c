/*
 * plan_sim_trace: plan_sim_write_trace, the recorded events of a simulation as Chrome trace
 * JSON (chrome://tracing, Perfetto).
 *
 * One lane per stage and per link direction; copies of a replicated stage (or pairs of copies
 * on a link) get lanes of their own after those, named when they first appear. Does not
 * simulate anything: it only formats plan_sim_result.events.
 * Invariant: the output is one JSON object whatever the events, times in microseconds.
 */
#include "coordinator/planner/plan_sim.h"

#include <stdlib.h>

sc_status plan_sim_write_trace(const plan_sim_result *r, FILE *f, const char *const *names,
                               sc_err *err)
{
    static const char *const kinds[] = {"F", "B", "act", "", "grad", "", "opt", "W"};
    int S = r->n_stages;
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    for (int i = 0; i < S; i++)
        fprintf(f,
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                "\"args\": {\"name\": \"stage %d%s%s\"}},\n",
                i, i, names ? " " : "", names ? names[i] : "");
    for (int i = 0; i + 1 < S; i++) {
        fprintf(f,
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                "\"args\": {\"name\": \"link %d->%d\"}},\n",
                S + 2 * i, i, i + 1);
        fprintf(f,
                "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                "\"args\": {\"name\": \"link %d->%d\"}},\n",
                S + 2 * i + 1, i + 1, i);
    }
    /* copies past the first (of a stage, or pairs of copies on a link) get lanes of their own
     * after the links, named the first time they appear */
    int *seen = NULL, n_seen = 0, cap_seen = 0;
    for (int e = 0; e < r->n_events; e++) {
        const plan_sim_event *ev = &r->events[e];
        int tid = ev->lane;
        if (ev->copy > 0) {
            tid = 3 * S + ev->lane * 4096 + ev->copy;
            int known = 0;
            for (int j = 0; j < n_seen && !known; j++)
                known = seen[j] == tid;
            if (!known) {
                if (n_seen == cap_seen) {
                    int cap = cap_seen ? 2 * cap_seen : 16;
                    int *ns = realloc(seen, (size_t)cap * sizeof *ns);
                    if (ns == NULL) {
                        free(seen);
                        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the trace");
                    }
                    seen = ns;
                    cap_seen = cap;
                }
                seen[n_seen++] = tid;
                if (ev->lane < S)
                    fprintf(f,
                            "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                            "\"args\": {\"name\": \"stage %d%s%s copy %d\"}},\n",
                            tid, ev->lane, names ? " " : "", names ? names[ev->lane] : "",
                            ev->copy);
                else
                    fprintf(f,
                            "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                            "\"args\": {\"name\": \"link %d->%d pair %d\"}},\n",
                            tid, (ev->lane - S) / 2 + (ev->lane - S) % 2,
                            (ev->lane - S) / 2 + 1 - (ev->lane - S) % 2, ev->copy);
            }
        }
        const char *k = ev->kind >= 0 && ev->kind <= PLAN_ACT_W ? kinds[ev->kind] : "?";
        fprintf(f,
                "{\"name\": \"%s%s%d\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, "
                "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"unit\": %d}},\n",
                k, ev->unit >= 0 ? " " : "", ev->unit >= 0 ? ev->unit : 0, k, tid,
                ev->start_s * 1e6, ev->dur_s * 1e6, ev->unit);
    }
    free(seen);
    fprintf(f,
            "{\"name\": \"iteration\", \"ph\": \"i\", \"s\": \"g\", \"pid\": 0, \"tid\": 0, "
            "\"ts\": %.3f}\n]}\n",
            r->iteration_s * 1e6);
    if (ferror(f))
        return SC_ERRF(err, SC_ERR_IO, "writing the trace failed");
    return SC_OK;
}
