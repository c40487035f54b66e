/*
 * plan_partition_uniform: the simplest baseline: equal numbers of blocks per stage, stage s on
 * device s, as many stages as devices (or blocks, or the stage cap).
 *
 * Looks at neither costs nor memory when cutting; the objective is computed afterwards, only to
 * report it. Invariant: stage sizes differ by at most one block.
 */
#include "coordinator/planner/plan_partition.h"

#include "coordinator/planner/plan_partition_internal.h"

sc_status plan_partition_uniform(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks, S = plan_search_max_stages(cfg);
    plan_partition_clear(out);
    for (int s = 0; s < S; s++) {
        int first = (int)((long)L * s / S), last = (int)((long)L * (s + 1) / S) - 1;
        plan_partition_push(out, first, last, &s, 1);
    }
    out->objective_s = plan_partition_bottleneck(c, out);
    (void)err;
    return SC_OK;
}
