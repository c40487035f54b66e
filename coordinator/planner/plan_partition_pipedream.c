/*
 * plan_partition_pipedream: PipeDream's partitioner: its replication-aware DP over the chain,
 * hierarchical over servers of equal size (one level within a server, one across), activation
 * transfers counted, with only the replica counts the runtime runs. The entry point sends a
 * branching graph.txt profile to the DP over antichain states (plan_partition_pipedream_dag.c).
 *
 * Does not model unequal devices (every device counts as device 0, and the plan's note says so)
 * or memory: PipeDream's own objective, at the profile's own micro-batch size (ref_cost). Takes
 * no stage cap (its DP picks the count): a plan with more stages than cfg->max_stages is
 * refused.
 * Invariant: devices are handed out in the cluster's order, a stage's copies on consecutive
 * devices of each server it spans; on a chain, the zeroed Input sources at its front join the
 * first stage.
 */
#include "coordinator/planner/plan_partition.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_partition_pipedream_internal.h"

typedef struct pd_in {
    int n, b0, type;
    const plan_cost *c;
    pd_rule rule;
    const pd_servers *below; /* NULL at the first level: compute times come from the profile */
} pd_in;

/* Compute time of states i..j, on one machine (first level) or one server of a stage spread
 * over mp servers (second level). */
static double pd_ct(const pd_in *in, int i, int j, int mp)
{
    if (in->below == NULL)
        return plan_cost_work(in->c, in->type, in->b0 + i, in->b0 + j);
    return pd_servers_t(in->below, mp, i, j);
}

static double pd_params(const pd_in *in, int i, int j)
{
    return plan_cost_params(in->c, in->b0 + i, in->b0 + j);
}

/* PipeDream's compute_partitioning for a chain of states, activation transfers counted, with
 * only the replica counts the runtime runs (in->rule). */
static void pd_solve(const pd_in *in, pd_level *lv, int within, double bw)
{
    int n = lv->n, M = lv->M;
    const double *act = in->c->act_bytes + in->b0;
    /* a server that leaves machines idle on a few states can be slower than on more */
    int monotone = in->below == NULL || !in->below->fallback;
    for (int i = 0; i < lv->rows; i++)
        for (int j = 0; j < n; j++)
            for (int m = 0; m < M; m++) {
                pd_cell *a = pd_at(lv, i, j, m);
                a->t = HUGE_VAL;
                a->k = -1;
                a->mprev = -1;
                a->mp = (int16_t)(m + 1);
                if (j < i || !pd_allowed(&in->rule, m + 1))
                    continue;
                double ct = pd_ct(in, i, j, m + 1);
                if (!isfinite(ct))
                    continue;
                a->t = pd_stage_time(ct, pd_params(in, i, j), m + 1, bw, within);
            }
    for (int i = 0; i < lv->rows; i++)
        for (int m = 1; m < M; m++)
            for (int j = i + 1; j < n; j++) {
                pd_cell *a = pd_at(lv, i, j, m);
                pd_best b = {a->t, a->k, a->mprev, a->mp};
                for (int mp = 1; mp <= m; mp++) {
                    if (!pd_allowed(&in->rule, mp))
                        continue;
                    double out_t = j < n - 1 ? 2.0 * act[j] / (bw * mp) : 0;
                    if (out_t >= b.t)
                        continue;
                    /* the last stage only grows as k moves left: stop once it is too slow */
                    for (int k = j - 1; k >= i; k--) {
                        double last = pd_ct(in, k + 1, j, mp);
                        if (!isfinite(last))
                            continue;
                        last = pd_stage_time(last, pd_params(in, k + 1, j), mp, bw, 1);
                        if (last >= b.t) {
                            if (monotone)
                                break;
                            continue;
                        }
                        double prev = pd_at(lv, i, k, m - mp)->t;
                        if (prev >= b.t)
                            continue;
                        pd_take(&b, prev, last, 2.0 * act[k] / (bw * mp), out_t, k, m - mp, mp);
                    }
                }
                a->t = b.t;
                a->k = b.k;
                a->mprev = (int16_t)b.mprev;
                a->mp = (int16_t)b.mp;
            }
}

/* Stages of states i..j from table lv with m machines: (first state, replicas), front first. */
static int pd_walk(const pd_level *lv, int i, int j, int m, int *first, int *reps)
{
    int ns = 0;
    for (;;) {
        const pd_cell *a = pd_at(lv, i, j, m);
        if (a->k < 0) {
            first[ns] = i;
            reps[ns++] = a->mp;
            break;
        }
        first[ns] = a->k + 1;
        reps[ns++] = a->mp;
        j = a->k;
        m = a->mprev;
    }
    for (int x = 0; x < ns / 2; x++) {
        int t = first[x];
        first[x] = first[ns - 1 - x];
        first[ns - 1 - x] = t;
        t = reps[x];
        reps[x] = reps[ns - 1 - x];
        reps[ns - 1 - x] = t;
    }
    return ns;
}

/* True when the profile's DAG is a path along the linear order (or absent): then the states
 * are the prefixes and the chain DP is the same search. */
static int pd_is_chain(const plan_profile *p)
{
    if (p->pred_start == NULL || p->dag_source < 0)
        return 1;
    for (int l = p->n_input_blocks; l < p->n_blocks; l++) {
        int np = p->pred_start[l + 1] - p->pred_start[l];
        if (l == p->n_input_blocks ? np != 0 : np != 1 || p->pred[p->pred_start[l]] != l - 1)
            return 0;
    }
    return 1;
}

/* PipeDream's DP knows one device type: say so when the cluster has several. */
static void pd_note_types(const plan_cluster *cl, plan_partition *out)
{
    int types_differ = 0;
    for (int d = 1; d < cl->n_devices; d++)
        types_differ |= cl->devices[d].type != cl->devices[0].type;
    if (types_differ) {
        size_t used = strlen(out->note);
        snprintf(out->note + used, sizeof out->note - used,
                 "%sassumes every device is like device 0 (%s)", used ? "; " : "",
                 cl->types[cl->devices[0].type].name);
    }
}

/* Devices left idle because the runtime runs too few copies of a stage: say so. */
static void pd_note_idle(const plan_search_cfg *cfg, const plan_cluster *cl, plan_partition *out)
{
    if (out->n_devs >= cl->n_devices)
        return;
    size_t used = strlen(out->note);
    snprintf(out->note + used, sizeof out->note - used,
             "%s%d of %d devices idle: the runtime runs too few copies of a stage for them with "
             "%d micro-batches (%s)",
             used ? "; " : "", cl->n_devices - out->n_devs, cl->n_devices,
             cfg->n_micro > 1 ? cfg->n_micro : 1, plan_sched_name(cfg->sched));
}

/* PipeDream's DP chooses the stage count itself, with no way to bound it: a plan over the cap
 * is refused, naming the cap and the strategies that honour it. */
static sc_status pd_check_cap(const plan_search_cfg *cfg, const plan_partition *out, sc_err *err)
{
    if (cfg->max_stages <= 0 || out->n_stages <= cfg->max_stages)
        return SC_OK;
    return SC_ERRF(err, SC_ERR_INVALID,
                   "pipedream: its plan has %d stages, more than the stage limit of %d (the job's "
                   "\"stages\", or --stages); PipeDream's DP picks the stage count itself and "
                   "cannot be limited: drop the limit or use hetero, minmax, autopipe, uniform, "
                   "blockpartition or exhaustive, which honour it",
                   out->n_stages, cfg->max_stages);
}

sc_status plan_partition_pipedream(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    const plan_cost *c = cfg->ref_cost ? cfg->ref_cost : cfg->cost;
    const plan_cluster *cl = c->cluster;
    int L = c->n_blocks;
    sc_status rc = SC_OK;
    plan_partition_clear(out);
    if (!pd_is_chain(c->profile)) {
        rc = plan_pd_dag(cfg, out, err);
        if (rc == SC_OK) {
            pd_note_types(cl, out);
            pd_note_idle(cfg, cl, out);
            rc = pd_check_cap(cfg, out, err);
        }
        return rc;
    }
    /* PipeDream removes the zeroed Input sources: they join the first stage */
    int b0 = 0;
    while (b0 < L - 1 && plan_cost_work(c, 0, b0, b0) == 0 && c->act_bytes[b0] == 0 &&
           plan_cost_params(c, b0, b0) == 0)
        b0++;
    int n = L - b0;
    plan_partition_clear(out);
    int n1 = cl->servers[0].n_devices, equal = 1;
    double min_nic = HUGE_VAL, min_intra = HUGE_VAL;
    for (int s = 0; s < cl->n_servers; s++) {
        equal &= cl->servers[s].n_devices == n1;
        if (cl->servers[s].nic_bw_bytes_per_s < min_nic)
            min_nic = cl->servers[s].nic_bw_bytes_per_s;
        if (cl->servers[s].intra_bw_bytes_per_s < min_intra)
            min_intra = cl->servers[s].intra_bw_bytes_per_s;
    }
    int hier = cl->n_servers > 1 && equal && n1 > 1 &&
               (long)n * (long)n * (long)n1 <= PLAN_PD_HIER_MAX_CELLS;
    pd_level lv1 = {0}, lv2 = {0};
    pd_servers sv = {0};
    pd_in in1 = {.n = n,
                 .b0 = b0,
                 .type = cl->devices[0].type,
                 .c = c,
                 .rule = {.sched = cfg->sched, .n_micro = cfg->n_micro, .mult = 1}};
    int restricted = plan_pd_restricts(&in1.rule, cl->n_devices);
    int *first = malloc((size_t)n * sizeof(int)), *reps = malloc((size_t)n * sizeof(int));
    int *first2 = malloc((size_t)n * sizeof(int)), *reps2 = malloc((size_t)n * sizeof(int));
    int *devs = malloc((size_t)cl->n_devices * sizeof(int));
    if (!first || !reps || !first2 || !reps2 || !devs)
        goto nomem;
    if (!hier) {
        double bw;
        int M;
        if (cl->n_servers == 1) {
            bw = cl->servers[0].intra_bw_bytes_per_s;
            M = cl->n_devices;
        } else {
            bw = n1 == 1 && equal ? min_nic : (min_nic < min_intra ? min_nic : min_intra);
            M = cl->n_devices;
            if (!(n1 == 1 && equal))
                snprintf(out->note, sizeof out->note, "flat DP at the slowest bandwidth (%s)",
                         equal ? "too many states for two levels" : "servers differ in size");
        }
        lv1 = (pd_level){.n = n, .M = M, .rows = 1};
        lv1.A = malloc((size_t)n * (size_t)M * sizeof(pd_cell));
        if (lv1.A == NULL)
            goto nomem;
        pd_solve(&in1, &lv1, 1, bw);
        int top = plan_pd_machines(&lv1, restricted, 0, n - 1);
        out->objective_s = pd_at(&lv1, 0, n - 1, top)->t;
        int ns = pd_walk(&lv1, 0, n - 1, top, first, reps);
        int next = 0;
        for (int s = 0; s < ns; s++) {
            for (int r = 0; r < reps[s]; r++)
                devs[r] = next + r;
            next += reps[s];
            int a = s == 0 ? 0 : b0 + first[s];
            int b = s + 1 < ns ? b0 + first[s + 1] - 1 : L - 1;
            plan_partition_push(out, a, b, devs, reps[s]);
        }
    } else {
        int S2 = cl->n_servers;
        lv1 = (pd_level){.n = n, .M = n1, .rows = n};
        lv1.A = malloc((size_t)n * (size_t)n * (size_t)n1 * sizeof(pd_cell));
        lv2 = (pd_level){.n = n, .M = S2, .rows = 1};
        lv2.A = malloc((size_t)n * (size_t)S2 * sizeof(pd_cell));
        if (lv1.A == NULL || lv2.A == NULL)
            goto nomem;
        /* the first level once per class of the servers a second-level stage may span */
        if (plan_pd_servers_init(&sv, &in1.rule, n1, S2, n, n) != 0)
            goto nomem;
        double intra = cl->servers[0].intra_bw_bytes_per_s;
        for (int k = 0; k < sv.n_classes; k++) {
            in1.rule.mult = sv.rep[k];
            pd_solve(&in1, &lv1, 1, intra);
            plan_pd_servers_take(&sv, k, &lv1, restricted);
        }
        int held = sv.n_classes - 1; /* the class lv1 holds */
        pd_in in2 = in1;
        in2.rule.mult = 1;
        in2.below = &sv;
        pd_solve(&in2, &lv2, n1, min_nic);
        int top = plan_pd_machines(&lv2, restricted, 0, n - 1);
        out->objective_s = pd_at(&lv2, 0, n - 1, top)->t;
        int ns2 = pd_walk(&lv2, 0, n - 1, top, first2, reps2);
        int server = 0;
        for (int s2 = 0; s2 < ns2; s2++) {
            int i = first2[s2], j = s2 + 1 < ns2 ? first2[s2 + 1] - 1 : n - 1;
            if (sv.cls[reps2[s2]] != held) {
                held = sv.cls[reps2[s2]];
                in1.rule.mult = sv.rep[held];
                pd_solve(&in1, &lv1, 1, intra);
            }
            int ns1 = pd_walk(&lv1, i, j, plan_pd_servers_m(&sv, reps2[s2], i, j), first, reps);
            int local = 0;
            for (int s1 = 0; s1 < ns1; s1++) {
                int nd = 0;
                for (int g = 0; g < reps2[s2]; g++)
                    for (int r = 0; r < reps[s1]; r++)
                        devs[nd++] = cl->servers[server + g].first_device + local + r;
                local += reps[s1];
                int a = out->n_stages == 0 ? 0 : b0 + first[s1];
                int b = s1 + 1 < ns1 ? b0 + first[s1 + 1] - 1 : b0 + j;
                plan_partition_push(out, a, b, devs, nd);
            }
            server += reps2[s2];
        }
    }
    pd_note_types(cl, out);
    pd_note_idle(cfg, cl, out);
    rc = pd_check_cap(cfg, out, err);
    goto done;
nomem:
    rc = SC_ERRF(err, SC_ERR_NOMEM, "pipedream: out of memory for %d states", n);
done:
    free(lv1.A);
    free(lv2.A);
    free(first), free(reps), free(first2), free(reps2), free(devs);
    plan_pd_servers_free(&sv);
    return rc;
}
