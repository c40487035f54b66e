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

/* The uneven instance of `seed`: a chain of 4-10 blocks (as above) on 2 or 3 servers holding
 * 2-8 devices in all (at least one each) of 3 types (speeds 1, 0.4-0.7 and 0.15-0.3; a server
 * mostly of one type), links of 1e10, 5e10 or 2e11 B/s inside a server and NICs of 1.25e8
 * (1 Gbit/s), 1.25e9 or 3e9 B/s. Each type has, with odd 0.6, a memory limit of 0.1-0.8 times
 * the model's parameter state (4 copies) plus two micro-batches' stash of every block; the rest
 * none. Some instances fit no plan. Free both with their destroy calls. */
sc_status plan_instance_uneven(uint64_t seed, plan_profile **prof, plan_cluster **cl, sc_err *err);

#endif /* PLAN_INSTANCE_H */
