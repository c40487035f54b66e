/* The steps waiting for the next iteration report (report_steps.h). */
#include "worker/report_steps.h"

#include <string.h>

void wk_report_steps_add(wk_report_steps *s, const Stagecraft__IterationReport *r, uint64_t gen,
                         const char *job)
{
    if (s->gen != gen || strncmp(s->job, job, sizeof s->job) != 0) {
        s->n = 0;
        s->gen = gen;
        strncpy(s->job, job, sizeof s->job - 1);
        s->job[sizeof s->job - 1] = '\0';
    }
    if (!r->has_loss || r->parked)
        return;
    if (s->n > 0 && r->step <= s->fig[s->n - 1].step)
        return;                        /* a repeat */
    if (s->n == WK_REPORT_STEPS_MAX) { /* full: keep every other one */
        size_t kept = 0;
        for (size_t i = 1; i < s->n; i += 2)
            s->fig[kept++] = s->fig[i];
        s->n = kept;
    }
    Stagecraft__StepFigures *f = &s->fig[s->n++];
    stagecraft__step_figures__init(f);
    f->step = r->step;
    f->loss = r->loss;
    f->iteration_s = r->iteration_s;
}

void wk_report_steps_attach(wk_report_steps *s, Stagecraft__IterationReport *r)
{
    for (size_t i = 0; i < s->n; i++)
        s->ptr[i] = &s->fig[i];
    r->steps = s->n > 0 ? s->ptr : NULL;
    r->n_steps = s->n;
}

void wk_report_steps_sent(wk_report_steps *s, Stagecraft__IterationReport *r)
{
    r->steps = NULL;
    r->n_steps = 0;
    s->n = 0;
}
