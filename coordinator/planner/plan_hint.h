/*
 * plan_hint: whether a subset of the devices `stagecraft plan` was given plans faster, or
 * (when every device type has a price) costs less per sample, than all of them: the one-line
 * hint `plan` prints under its table, pointing at `stagecraft advise`.
 *
 * Bounded so that it does not slow `plan` noticeably: only sets of all the devices but one are
 * tried, one per class (the devices of one type on one server are interchangeable, so dropping
 * any one of a class gives the same plan), at most PLAN_HINT_MAX_PLANS classes (least speed per
 * price first, least speed without prices), each planned once with the strategy that won the
 * table. Does not print; plan_hint_line writes the line.
 */
#ifndef PLAN_HINT_H
#define PLAN_HINT_H

#include <stddef.h>

#include "coordinator/planner/plan_advise.h"

/* Subsets planned at most. */
#define PLAN_HINT_MAX_PLANS 4
/* A subset is named only when it plans at least this fraction faster (or cheaper per sample). */
#define PLAN_HINT_MIN_GAIN 0.02

typedef struct plan_hint {
    int found;            /* 1: a subset is faster or cheaper per sample by PLAN_HINT_MIN_GAIN */
    int faster;           /* 1: faster (gain in samples/s); 0: cheaper per sample */
    int dropped;          /* the device id left out */
    double gain;          /* fraction faster, or fraction less cost per sample */
    double samples_per_s; /* the subset's */
    int planned;          /* subsets planned */
} plan_hint;

/* Tries the subsets of req->cluster against the full set's figure full_samples_per_s (what the
 * table's fastest plan predicts) with strategy `strategy`. No hint (found 0, no error) when the
 * cluster has fewer than 2 devices or lists `links` (a subset of a wired machine is not
 * modelled). Errors only for memory. */
sc_status plan_hint_find(const plan_request *req, plan_strategy strategy, double full_samples_per_s,
                         plan_hint *out, sc_err *err);

/* "hint: 3 of these 4 devices (dropping device 3, T4 on b) plan 12% faster; see stagecraft
 * advise" (or "cost 9% less per sample") into buf (empty when none was found). */
void plan_hint_line(const plan_cluster *cl, const plan_hint *h, char *buf, size_t size);

#endif /* PLAN_HINT_H */
