/*
 * The steps a stage finished between two iteration reports the agent sends (a report goes at
 * most every REPORT_EVERY_MS with the newest step's figures): each step's loss and iteration
 * time, so that the coordinator's training series has every step, not one per report.
 * Bounded: at most WK_REPORT_STEPS_MAX wait for a report; when full, every other one is dropped
 * (the newest kept), so a stage that steps faster still sends an even spread of its steps.
 * Only steps that brought a loss are kept (the last stage's); a new trainer (generation or job)
 * starts afresh. Not thread-safe: the agent's control loop owns it.
 */
#ifndef WK_REPORT_STEPS_H
#define WK_REPORT_STEPS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/control.pb-c.h"

#define WK_REPORT_STEPS_MAX 512

typedef struct {
    Stagecraft__StepFigures fig[WK_REPORT_STEPS_MAX];
    Stagecraft__StepFigures *ptr[WK_REPORT_STEPS_MAX];
    size_t n;
    uint64_t gen;
    char job[64];
} wk_report_steps;

/* Keeps report r's step (of trainer generation `gen`, job `job`) when it brought a loss. */
void wk_report_steps_add(wk_report_steps *s, const Stagecraft__IterationReport *r, uint64_t gen,
                         const char *job);

/* Points r->steps at the kept steps, for one send; wk_report_steps_sent detaches them from r
 * and empties s (r never owns them). */
void wk_report_steps_attach(wk_report_steps *s, Stagecraft__IterationReport *r);
void wk_report_steps_sent(wk_report_steps *s, Stagecraft__IterationReport *r);

#endif /* WK_REPORT_STEPS_H */
