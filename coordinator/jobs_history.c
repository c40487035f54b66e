/*
 * Which reports make a job's training series (history.h): the last stage's first copy brings,
 * with each report, the loss and iteration time of every step it finished since its previous
 * report (IterationReport.steps; an older worker: the report's own step only); each point also
 * takes the job's throughput as the progress has it then. Heartbeats repeat the last report, so
 * a step is recorded once (p->history_step); a job restarted from an earlier step records its
 * steps again, replacing those of the run that did not last (coord_store_history_add).
 * Not here: the series' bound (history.c) or its SQL (store.c).
 */
#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "coordinator/coord_internal.h"
#include "coordinator/history.h"
#include "coordinator/jobs.h"

/* the most points one report brings: a worker sends at most 512 steps, and its own */
#define REPORT_POINTS_MAX 520

static coord_history_point point(uint64_t step, bool has_loss, double loss, double iteration_s,
                                 double samples_per_s, int64_t at_ms)
{
    return (coord_history_point){.step = step,
                                 .loss = loss,
                                 .has_loss = has_loss,
                                 .samples_per_s = samples_per_s,
                                 .samples_per_s_known = samples_per_s > 0,
                                 .iteration_s = iteration_s,
                                 .at_unix_ms = at_ms};
}

void coord_jobs_history_observe(coord *c, coord_progress *p, const Stagecraft__IterationReport *r)
{
    if ((int)r->stage != p->n_stages - 1 || r->replica != 0 || r->parked ||
        r->step <= p->history_step)
        return;
    coord_history_point pts[REPORT_POINTS_MAX];
    size_t n = 0;
    int64_t now_ms = sc_clock_unix_ms();
    for (size_t i = 0; i < r->n_steps && n < REPORT_POINTS_MAX - 1; i++) {
        const Stagecraft__StepFigures *f = r->steps[i];
        uint64_t last = n > 0 ? pts[n - 1].step : p->history_step;
        if (f == NULL || f->step <= last || f->step > r->step)
            continue;
        pts[n++] = point(f->step, true, f->loss, f->iteration_s, p->samples_per_s, now_ms);
    }
    if (n == 0 || pts[n - 1].step < r->step) /* the report's own step, when not among them */
        pts[n++] = point(r->step, r->has_loss, r->loss, r->iteration_s, p->samples_per_s, now_ms);
    p->history_step = r->step;
    sc_err err;
    sc_err_clear(&err);
    if (coord_store_history_add(c->store, p->job_id, pts, n, COORD_HISTORY_MAX, &err) != SC_OK)
        SC_LOG_WARN("jobs", "job %s: steps %llu-%llu not kept in its history: %s", p->job_id,
                    (unsigned long long)pts[0].step, (unsigned long long)r->step, err.msg);
}
