/*
 * plan_partition_blockpartition: torchgpipe's balance by time, the baseline: Barany and
 * Grinberg's block partition heuristic: from equal block counts, shift blocks from the heaviest
 * stage towards the nearest lightest one while the heaviest stage gets lighter.
 *
 * Balances device 0's work alone, in costs normalised to [0, 1]; ignores bandwidths and memory,
 * as torchgpipe does (the objective, computed afterwards, counts the cuts). Invariant: stage s
 * on device s, every stage at least one block.
 */
#include "coordinator/planner/plan_partition.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_partition_internal.h"

sc_status plan_partition_blockpartition(const plan_search_cfg *cfg, plan_partition *out,
                                        sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks, S = plan_search_max_stages(cfg), t0 = dev_type(c, 0);
    double *w = malloc((size_t)L * sizeof *w);
    int *split = malloc((size_t)S * sizeof *split), *saved = malloc((size_t)S * sizeof *saved);
    double *size = malloc((size_t)S * sizeof *size);
    if (!w || !split || !saved || !size) {
        free(w), free(split), free(saved), free(size);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory in blockpartition");
    }
    double mn = HUGE_VAL, mx = -HUGE_VAL;
    for (int l = 0; l < L; l++) {
        double x = plan_cost_work(c, t0, l, l);
        mn = x < mn ? x : mn;
        mx = x > mx ? x : mx;
    }
    /* costs normalised to [0, 1]: the stopping rule "max <= min + 1" is in these units. Costs
     * that differ by rounding alone (identical blocks scaled by a micro-batch factor) count as
     * equal: normalising would stretch their last-bit differences to the whole range. */
    bool flat = !(mx - mn > 1e-9 * mx);
    for (int l = 0; l < L; l++)
        w[l] = flat ? 0 : (plan_cost_work(c, t0, l, l) - mn) / (mx - mn);
    for (int i = 0; i < S - 1; i++)
        split[i] = (L / S) * (i + 1);
    split[S - 1] = L;
    for (int iter = 0; iter < 4 * L * S + 16; iter++) {
        int p = 0;
        for (int i = 0; i < S; i++) {
            int a = i ? split[i - 1] : 0;
            size[i] = 0;
            for (int l = a; l < split[i]; l++)
                size[i] += w[l];
            if (size[i] > size[p])
                p = i;
        }
        double minsize = HUGE_VAL;
        for (int i = 0; i < S; i++)
            minsize = size[i] < minsize ? size[i] : minsize;
        if (size[p] <= minsize + 1)
            break;
        int q = -1;
        for (int i = 0; i < S; i++)
            if (size[i] == minsize && (q < 0 || abs(i - p) < abs(q - p)))
                q = i;
        memcpy(saved, split, (size_t)S * sizeof *split);
        int ok = 1;
        if (p < q) {
            /* each block between them hands its last element to the right */
            int a = p ? split[p - 1] : 0;
            if (split[p] - a < 2)
                ok = 0;
            for (int h = p; ok && h < q; h++)
                split[h]--;
        } else {
            if (split[p] - split[p - 1] < 2)
                ok = 0;
            for (int h = q; ok && h < p; h++)
                split[h]++;
        }
        double newmax = 0;
        for (int i = 0; ok && i < S; i++) {
            int a = i ? split[i - 1] : 0;
            double sz = 0;
            for (int l = a; l < split[i]; l++)
                sz += w[l];
            newmax = sz > newmax ? sz : newmax;
        }
        if (!ok || newmax >= size[p]) {
            memcpy(split, saved, (size_t)S * sizeof *split);
            break;
        }
    }
    plan_partition_clear(out);
    for (int s = 0; s < S; s++)
        plan_partition_push(out, s ? split[s - 1] : 0, split[s] - 1, &s, 1);
    out->objective_s = plan_partition_bottleneck(c, out);
    free(w), free(split), free(saved), free(size);
    return SC_OK;
}
