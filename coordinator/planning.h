/*
 * From a job and its workers to a plan: builds the cluster JSON (FORMATS.md) from the workers'
 * hardware reports and profiles, and runs the planner on it.
 */
#ifndef COORD_PLANNING_H
#define COORD_PLANNING_H

#include <stddef.h>

#include "common/sc_status.h"
#include "coordinator/jobspec.h"
#include "proto/stagecraft.pb-c.h"

typedef struct {
    const char *id;                         /* worker id */
    const Stagecraft__HardwareReport *hw;   /* its report; devices[0] is the one it drives */
    const char *profile_json;               /* the model profiled on its device */
    double link_bytes_per_s; /* its measured link to the coordinator; 0: not measured */
    double reduce_bytes_per_s; /* its copies' all-reduce as a job measured it, in the planner's
                                * measure (speeds.h); 0: not measured */
} coord_plan_worker;

/* Writes the stagecraft-cluster document for `n` workers (one device each, servers grouped by
 * hostname, device types by device name; relative speeds from the profiles' total times,
 * relative to workers[0]'s device). A server's nic_bandwidth_bytes_per_s is the least measured
 * link of its workers ("nic_bandwidth_source": "measured"); with none measured, its first
 * worker's reported NIC bandwidth ("nic"), else 1.25e9 bytes/s, 10 Gb Ethernet ("assumed").
 * A server's reduce_bandwidth_bytes_per_s is the least measured all-reduce speed of its workers
 * (absent when none is measured). *out is a heap string. */
sc_status coord_cluster_json(const coord_plan_worker *workers, size_t n, char **out, sc_err *err);

/* Plans `spec` over the workers with the job's strategy and schedule. *plan_json is a heap
 * string holding one plan object as `stagecraft plan --json` prints one (device ids index
 * `workers`). With `frozen_blocks` > 0 the model's first blocks are frozen (they run forward
 * only): they are planned with no backward and no optimizer time, and the plan carries
 * "frozen_blocks" for the workers. */
sc_status coord_plan_job(const coord_jobspec *spec, const coord_plan_worker *workers, size_t n,
                         int frozen_blocks, char **plan_json, sc_err *err);

/* `profile_json` with blocks [0, frozen_blocks) at zero backward and optimizer time (heap
 * string, caller frees; NULL when it is not JSON). */
char *coord_profile_frozen(const char *profile_json, int frozen_blocks);

#endif /* COORD_PLANNING_H */
