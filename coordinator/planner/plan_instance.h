/*
 * Random small planning instances, the same for one seed on every machine: what the tests and
 * bench_planner check strategies against the exhaustive search on. Not here: solving them.
 */
#ifndef PLAN_INSTANCE_H
#define PLAN_INSTANCE_H

#include <stdint.h>

#include "common/sc_status.h"
#include "coordinator/planner/plan_cluster.h"
#include "coordinator/planner/plan_profile.h"

/* The two-server instance of `seed`: a chain of 5-9 blocks (forward 1-10 ms for one sample,
 * backward 1-3 times that, activations of 1e5-1e7 bytes, parameters of 1e6-1e8 bytes) on two
 * servers of 1-2 devices drawn from 3 types (speeds 1, 0.5-0.7 and 0.2-0.3), links of 1e10 or
 * 5e10 B/s inside a server and NICs of 1e9 or 3e9 B/s. Free both with their destroy calls. */
sc_status plan_instance_two_server(uint64_t seed, plan_profile **prof, plan_cluster **cl,
                                   sc_err *err);

#endif /* PLAN_INSTANCE_H */
