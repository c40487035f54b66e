/*
 * plan_partition_pipedream_dag: PipeDream's DP over antichain states, for branching graph.txt
 * profiles: the chain's recurrence with states in place of chain positions. Row r of a level is
 * "after state r - 1" (row 0: from the start), a stage runs from one state to a later one and
 * the split k before state j ranges over j's predecessors in the antichain DAG. Transfers use
 * the states' output sizes (PipeDream's augmented antichains).
 *
 * Does not build the antichains (plan_antichain) and leaves the plan's notes to the entry point
 * (plan_partition_pipedream). Invariant: the chosen states are nested; when one of them is not
 * a prefix of the profile's order, the partition carries a block order in which every one is.
 */
#include "coordinator/planner/plan_partition.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_antichain.h"
#include "coordinator/planner/plan_partition_pipedream_internal.h"

typedef struct pds_in {
    const plan_antichain *ac;
    pd_rule rule;
    const pd_servers *below; /* NULL at the first level */
    const int *ks_start;     /* predecessors of each state, by decreasing work (CSR) */
    const int *ks;
} pds_in;

static int pds_valid(const plan_antichain *ac, int r, int j)
{
    return r == 0 || plan_antichain_precedes(ac, r - 1, j);
}

/* Compute time of the states after r - 1 up to j, as pd_ct. */
static double pds_ct(const pds_in *in, int r, int j, int mp)
{
    if (in->below != NULL)
        return pd_servers_t(in->below, mp, r, j);
    if (!pds_valid(in->ac, r, j))
        return HUGE_VAL;
    return in->ac->work_s[j] - (r > 0 ? in->ac->work_s[r - 1] : 0);
}

static double pds_params(const pds_in *in, int r, int j)
{
    return in->ac->params[j] - (r > 0 ? in->ac->params[r - 1] : 0);
}

static void pds_solve(const pds_in *in, pd_level *lv, int within, double bw)
{
    int n = lv->n, M = lv->M;
    const double *act = in->ac->out_bytes;
    for (int r = 0; r < lv->rows; r++)
        for (int j = 0; j < n; j++)
            for (int m = 0; m < M; m++) {
                pd_cell *a = pd_at(lv, r, j, m);
                a->t = HUGE_VAL;
                a->k = -1;
                a->mprev = -1;
                a->mp = (int16_t)(m + 1);
                if (!pd_allowed(&in->rule, m + 1))
                    continue;
                double ct = pds_ct(in, r, j, m + 1);
                if (!isfinite(ct))
                    continue;
                a->t = pd_stage_time(ct, pds_params(in, r, j), m + 1, bw, within);
            }
    for (int r = 0; r < lv->rows; r++)
        for (int m = 1; m < M; m++)
            for (int j = 0; j < n; j++) {
                if (!pds_valid(in->ac, r, j))
                    continue;
                pd_cell *a = pd_at(lv, r, j, m);
                pd_best b = {a->t, a->k, a->mprev, a->mp};
                for (int mp = 1; mp <= m; mp++) {
                    if (!pd_allowed(&in->rule, mp))
                        continue;
                    double out_t = j < n - 1 ? 2.0 * act[j] / (bw * mp) : 0;
                    if (out_t >= b.t)
                        continue;
                    for (int x = in->ks_start[j]; x < in->ks_start[j + 1]; x++) {
                        int k = in->ks[x];
                        double prev = pd_at(lv, r, k, m - mp)->t;
                        /* the compute part only grows along the list (first level) */
                        double lo = (in->ac->work_s[j] - in->ac->work_s[k]) / mp;
                        if (in->below == NULL && lo >= b.t)
                            break;
                        if (prev >= b.t)
                            continue;
                        double last = in->below == NULL ? in->ac->work_s[j] - in->ac->work_s[k]
                                                        : pd_servers_t(in->below, mp, k + 1, j);
                        if (!isfinite(last))
                            continue;
                        last = pd_stage_time(last, pds_params(in, k + 1, j), mp, bw, 1);
                        if (last >= b.t)
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

/* Stages of row r up to state j with m machines: (last state, replicas), front first. */
static int pds_walk(const pd_level *lv, int r, int j, int m, int *end, int *reps)
{
    int ns = 0;
    for (;;) {
        const pd_cell *a = pd_at(lv, r, j, m);
        end[ns] = j;
        reps[ns++] = a->mp;
        if (a->k < 0)
            break;
        j = a->k;
        m = a->mprev;
    }
    for (int x = 0; x < ns / 2; x++) {
        int t = end[x];
        end[x] = end[ns - 1 - x];
        end[ns - 1 - x] = t;
        t = reps[x];
        reps[x] = reps[ns - 1 - x];
        reps[ns - 1 - x] = t;
    }
    return ns;
}

typedef struct pds_pred {
    double work_s;
    int k;
} pds_pred;

static int by_work_desc(const void *x, const void *y)
{
    const pds_pred *a = x, *b = y;
    if (a->work_s != b->work_s)
        return a->work_s < b->work_s ? 1 : -1;
    return (a->k > b->k) - (a->k < b->k);
}

/* The stage ending at state e ends at block n_input_blocks + size(e) - 1 of the plan's order
 * (pds_order): its blocks are exactly those of e not in the previous stage's state. */
static void pds_push(const plan_antichain *ac, int n_inp, int e, int *prev_last,
                     plan_partition *out, const int *devs, int nd, int *ends)
{
    int last = n_inp + ac->size[e] - 1;
    ends[out->n_stages] = e;
    plan_partition_push(out, *prev_last + 1, last, devs, nd);
    *prev_last = last;
}

/* An order of the blocks in which every chosen state ends[0..ns-1] (nested, the last one
 * holding every non-Input block) is a prefix: the Input blocks, then each stage's new blocks,
 * each part in the profile's own order (a topological order, so the result is one too: a
 * state is downward closed). Returns the number of cuts that are not prefixes of the profile's
 * own order, -1 when the states are not nested (a DP walk always gives nested states). */
static int pds_order(const plan_antichain *ac, int n_inp, const int *ends, int ns, int *order,
                     char *placed)
{
    int L = ac->n_blocks, pos = n_inp, highest = n_inp - 1, moved = 0;
    memset(placed, 0, (size_t)L);
    for (int l = 0; l < n_inp; l++)
        order[l] = l;
    for (int s = 0; s < ns; s++) {
        for (int l = n_inp; l < L; l++)
            if (!placed[l] && plan_antichain_has(ac, ends[s], l)) {
                placed[l] = 1;
                highest = l > highest ? l : highest;
                order[pos++] = l;
            }
        if (pos != n_inp + ac->size[ends[s]])
            return -1;
        /* pos - n_inp distinct blocks >= n_inp are the profile's prefix iff none lies beyond */
        moved += highest != pos - 1 && s + 1 < ns;
    }
    return pos == L ? moved : -1;
}

sc_status plan_pd_dag(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    const plan_cost *c = cfg->ref_cost ? cfg->ref_cost : cfg->cost;
    const plan_cluster *cl = c->cluster;
    const plan_profile *pr = c->profile;
    int L = c->n_blocks, type = cl->devices[0].type;
    sc_status rc = SC_OK;
    plan_antichain *ac = NULL;
    pd_level lv1 = {0}, lv2 = {0};
    int *ks_start = NULL, *ks = NULL, *end = NULL, *reps = NULL, *end2 = NULL, *reps2 = NULL;
    int *devs = NULL, *ends = NULL, *order = NULL;
    char *placed = NULL;
    pds_pred *sorted = NULL;
    pd_servers sv = {0};
    double *w = malloc((size_t)L * 3 * sizeof *w);
    if (w == NULL)
        goto nomem;
    for (int l = 0; l < L; l++) {
        w[l] = plan_cost_work(c, type, l, l);
        w[L + l] = plan_cost_params(c, l, l);
        w[2 * L + l] = plan_cost_stash(c, l, l);
    }
    SC_CHECK_GOTO(plan_antichain_new(&ac, pr, w, w + L, w + 2 * L, PLAN_ANTICHAIN_MAX_STATES, err),
                  done);
    int n = ac->n_states;
    size_t n_ks = 0;
    ks_start = calloc((size_t)n + 1, sizeof *ks_start);
    end = malloc((size_t)n * sizeof(int)), reps = malloc((size_t)n * sizeof(int));
    end2 = malloc((size_t)n * sizeof(int)), reps2 = malloc((size_t)n * sizeof(int));
    devs = malloc((size_t)cl->n_devices * sizeof(int));
    /* every stage has a device of its own: at most n_devices stages */
    ends = malloc((size_t)cl->n_devices * sizeof(int));
    order = malloc((size_t)L * sizeof(int));
    placed = malloc((size_t)L);
    if (!ks_start || !end || !reps || !end2 || !reps2 || !devs || !ends || !order || !placed)
        goto nomem;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < j; k++)
            n_ks += (size_t)plan_antichain_precedes(ac, k, j);
    ks = malloc((n_ks + 1) * sizeof *ks);
    if (ks == NULL)
        goto nomem;
    /* each state's predecessors by decreasing work, so that the stage after the split only
     * grows along the list */
    sorted = malloc((size_t)n * sizeof *sorted);
    if (sorted == NULL)
        goto nomem;
    for (int j = 0, x = 0; j < n; j++) {
        int cnt = 0;
        for (int k = 0; k < j; k++)
            if (plan_antichain_precedes(ac, k, j))
                sorted[cnt++] = (pds_pred){.work_s = ac->work_s[k], .k = k};
        qsort(sorted, (size_t)cnt, sizeof *sorted, by_work_desc);
        ks_start[j] = x;
        for (int y = 0; y < cnt; y++)
            ks[x++] = sorted[y].k;
        ks_start[j + 1] = x;
    }
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
               (long)(n + 1) * (long)n * (long)n1 <= PLAN_PD_HIER_MAX_CELLS;
    pds_in in1 = {.ac = ac,
                  .rule = {.sched = cfg->sched, .n_micro = cfg->n_micro, .mult = 1},
                  .ks_start = ks_start,
                  .ks = ks};
    int restricted = plan_pd_restricts(&in1.rule, cl->n_devices);
    int n_inp = pr->n_input_blocks, prev_last = -1, ns;
    if (!hier) {
        double bw;
        if (cl->n_servers == 1) {
            bw = cl->servers[0].intra_bw_bytes_per_s;
        } else {
            bw = n1 == 1 && equal ? min_nic : (min_nic < min_intra ? min_nic : min_intra);
            if (!(n1 == 1 && equal))
                snprintf(out->note, sizeof out->note, "flat DP at the slowest bandwidth (%s)",
                         equal ? "too many states for two levels" : "servers differ in size");
        }
        int M = cl->n_devices;
        lv1 = (pd_level){.n = n, .M = M, .rows = 1};
        lv1.A = malloc((size_t)n * (size_t)M * sizeof(pd_cell));
        if (lv1.A == NULL)
            goto nomem;
        pds_solve(&in1, &lv1, 1, bw);
        int top = plan_pd_machines(&lv1, restricted, 0, n - 1);
        out->objective_s = pd_at(&lv1, 0, n - 1, top)->t;
        ns = pds_walk(&lv1, 0, n - 1, top, end, reps);
        int next = 0;
        for (int s = 0; s < ns; s++) {
            for (int r = 0; r < reps[s]; r++)
                devs[r] = next + r;
            next += reps[s];
            pds_push(ac, n_inp, end[s], &prev_last, out, devs, reps[s], ends);
        }
    } else {
        int S2 = cl->n_servers;
        lv1 = (pd_level){.n = n, .M = n1, .rows = n + 1};
        lv1.A = malloc((size_t)(n + 1) * (size_t)n * (size_t)n1 * sizeof(pd_cell));
        lv2 = (pd_level){.n = n, .M = S2, .rows = 1};
        lv2.A = malloc((size_t)n * (size_t)S2 * sizeof(pd_cell));
        if (lv1.A == NULL || lv2.A == NULL)
            goto nomem;
        /* the first level once per class of the servers a second-level stage may span */
        if (plan_pd_servers_init(&sv, &in1.rule, n1, S2, n + 1, n) != 0)
            goto nomem;
        double intra = cl->servers[0].intra_bw_bytes_per_s;
        for (int k = 0; k < sv.n_classes; k++) {
            in1.rule.mult = sv.rep[k];
            pds_solve(&in1, &lv1, 1, intra);
            plan_pd_servers_take(&sv, k, &lv1, restricted);
        }
        int held = sv.n_classes - 1; /* the class lv1 holds */
        pds_in in2 = in1;
        in2.rule.mult = 1;
        in2.below = &sv;
        pds_solve(&in2, &lv2, n1, min_nic);
        int top = plan_pd_machines(&lv2, restricted, 0, n - 1);
        out->objective_s = pd_at(&lv2, 0, n - 1, top)->t;
        int ns2 = pds_walk(&lv2, 0, n - 1, top, end2, reps2);
        int server = 0;
        for (int s2 = 0; s2 < ns2; s2++) {
            int r = s2 == 0 ? 0 : end2[s2 - 1] + 1;
            if (sv.cls[reps2[s2]] != held) {
                held = sv.cls[reps2[s2]];
                in1.rule.mult = sv.rep[held];
                pds_solve(&in1, &lv1, 1, intra);
            }
            ns = pds_walk(&lv1, r, end2[s2], plan_pd_servers_m(&sv, reps2[s2], r, end2[s2]), end,
                          reps);
            int local = 0;
            for (int s1 = 0; s1 < ns; s1++) {
                int nd = 0;
                for (int g = 0; g < reps2[s2]; g++)
                    for (int x = 0; x < reps[s1]; x++)
                        devs[nd++] = cl->servers[server + g].first_device + local + x;
                local += reps[s1];
                pds_push(ac, n_inp, end[s1], &prev_last, out, devs, nd, ends);
            }
            server += reps2[s2];
        }
    }
    /* a chosen state that is not a prefix of the profile's order: the plan takes an order in
     * which every one is, so that each stage holds exactly PipeDream's blocks */
    int moved = pds_order(ac, n_inp, ends, out->n_stages, order, placed);
    if (moved < 0) {
        rc = SC_ERRF(err, SC_ERR_INTERNAL,
                     "pipedream: the chosen states of %s are not nested (a bug in the DP walk)",
                     pr->model);
        goto done;
    }
    if (moved > 0)
        SC_CHECK_GOTO(plan_partition_set_order(out, order, L, err), done);
    goto done;
nomem:
    rc = SC_ERRF(err, SC_ERR_NOMEM, "pipedream: out of memory for the antichain DP");
done:
    plan_antichain_destroy(&ac);
    free(w), free(lv1.A), free(lv2.A), free(ks_start), free(ks);
    free(end), free(reps), free(end2), free(reps2), free(devs), free(sorted);
    free(ends), free(order), free(placed);
    plan_pd_servers_free(&sv);
    return rc;
}
