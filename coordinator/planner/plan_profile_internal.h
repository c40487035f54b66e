/*
 * plan_profile_internal: what the profile's files share; not part of plan_profile's
 * interface.
 */
#ifndef PLAN_PROFILE_INTERNAL_H
#define PLAN_PROFILE_INTERNAL_H

#include <stdbool.h>

#include "coordinator/planner/plan_profile.h"

/* Whether any block takes time: a profile of zeros would plan to infinite throughput. Both
 * readers refuse such a profile. */
bool plan_profile_has_time(const plan_profile *p);

/* qsort comparator of ints, ascending: predecessor lists are kept sorted. */
int plan_profile_cmp_int(const void *a, const void *b);

#endif /* PLAN_PROFILE_INTERNAL_H */
