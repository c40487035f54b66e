/*
 * plan_advise_margins: what one device more or less is worth to a set of devices one has
 * (`stagecraft advise --workers` and `--job`): for each device held, the plan without it
 * ("dropping w-3 costs 4%"); for each class of a catalogue's devices (a server's devices of one
 * type), the plan with all of them added ("adding 2 x A10 on b: +38% samples/s for +2.40/h").
 *
 * Every figure is plan_advise_eval's on exactly those devices with the caller's request and
 * strategy, so it is what `stagecraft plan` predicts for them. Does not print or read files.
 * Invariant: the devices held are the catalogue's first n_have; the rest are the ones that can
 * be added.
 */
#ifndef PLAN_ADVISE_MARGINS_H
#define PLAN_ADVISE_MARGINS_H

#include "coordinator/planner/plan_advise.h"

typedef struct plan_advise_margin {
    int device; /* drop: the device left out; add: the class's first device */
    int count;  /* add: devices added (the whole class); drop: 1 */
    plan_advise_point pt;
} plan_advise_margin;

typedef struct plan_advise_margins {
    int n_drop;               /* n_have when n_have > 1, else 0 */
    plan_advise_margin *drop; /* (n_drop) drop[i]: every held device but device i */
    int n_add;
    plan_advise_margin *add; /* (n_add) one per (server, type) class beyond the held devices */
} plan_advise_margins;

/* Plans the margins of the catalogue's first n_have devices. Devices of one class among the
 * held ones give the same plan when dropped: it is planned once and copied. */
sc_status plan_advise_margins_run(const plan_advise_cfg *cfg, int n_have, plan_advise_margins *out,
                                  sc_err *err);

void plan_advise_margins_free(plan_advise_margins *m);

#endif /* PLAN_ADVISE_MARGINS_H */
