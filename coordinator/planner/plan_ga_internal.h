/*
 * plan_ga_internal: what the genetic search's files share; not part of plan_ga's interface.
 */
#ifndef PLAN_GA_INTERNAL_H
#define PLAN_GA_INTERNAL_H

/* The most entries (micro-batches) one stage's row may hold: the evaluators' fixed-size
 * scratch is sized by it. */
#define GA_MAX_K 64

#endif /* PLAN_GA_INTERNAL_H */
