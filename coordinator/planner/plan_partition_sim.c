/*
 * plan_partition_sim: a partition's stage costs for the simulator, and the one simulation of a
 * partition that the driver and the strategies share (stages on a server with compute_slots
 * share its processors).
 *
 * Does not build schedules (plan_schedule) and does not choose micro-batch counts (plan.c): it
 * turns a partition into plan_sim's inputs and runs it. It sits on the cost model
 * (plan_partition.c) and the simulator (plan_sim*.c), which never call it; the strategies and
 * the driver call it.
 * Invariant: a replicated stage is played as one lane per copy, each copy running its
 * micro-batches whole at the slowest copy's speed.
 */
#include "coordinator/planner/plan_partition.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_partition_internal.h"
#include "coordinator/planner/plan_sim.h"

/* The processor groups of the simulator's lanes, each copy of a stage a lane on its own device
 * (a stage without copies: one lane): one group per server that has compute_slots; and each
 * lane's CPU quota where its device type has one. `share` points into `buf`. Returns 0 when no
 * server shares its processors and no device is capped (then share is unused), -1 out of
 * memory. */
static int partition_share(const plan_cost *c, const plan_partition *p, plan_sim_share *share,
                           void **buf)
{
    const plan_cluster *cl = c->cluster;
    int S = p->n_stages, shared = 0, capped = 0, N = 0;
    *buf = NULL;
    for (int v = 0; v < cl->n_servers; v++)
        shared |= cl->servers[v].compute_slots > 0;
    for (int i = 0; i < S; i++)
        N += p->n_dev[i];
    for (int l = 0; l < N; l++)
        capped |= cl->types[cl->devices[p->devs[l]].type].quota_fraction > 0;
    if (!shared && !capped)
        return 0;
    /* the doubles first, so they are aligned */
    size_t bytes =
        (size_t)2 * N * sizeof(double) + ((size_t)3 * N + (size_t)cl->n_servers) * sizeof(int);
    double *d = malloc(bytes);
    if (d == NULL)
        return -1;
    double *quota = d, *period = d + N;
    int *b = (int *)(d + 2 * N);
    int *group = b, *cap = b + N, *weight = b + 2 * N, *group_of_server = b + 3 * N;
    *share = (plan_sim_share){.n_groups = 0,
                              .group = group,
                              .capacity = cap,
                              .weight = weight,
                              .quota = capped ? quota : NULL,
                              .quota_period_s = capped ? period : NULL};
    for (int v = 0; v < cl->n_servers; v++)
        group_of_server[v] = -1;
    for (int l = 0; l < N; l++) {
        const plan_device_type *t = &cl->types[cl->devices[p->devs[l]].type];
        int v = cl->devices[p->devs[l]].server;
        quota[l] = t->quota_fraction;
        period[l] = t->quota_period_s;
        group[l] = -1;
        weight[l] = 1;
        if (cl->servers[v].compute_slots <= 0)
            continue;
        if (group_of_server[v] < 0) {
            group_of_server[v] = share->n_groups;
            cap[share->n_groups++] = cl->servers[v].compute_slots;
        }
        group[l] = group_of_server[v];
    }
    *buf = d;
    return 1;
}

sc_status plan_partition_schedule(const plan_cost *c, const plan_partition *p, plan_sched_kind kind,
                                  int units, int sliced, plan_schedule **out, sc_err *err)
{
    *out = NULL;
    if (kind != PLAN_SCHED_ZB1)
        return plan_schedule_build_replicated(out, kind, p->n_stages, units, sliced,
                                              plan_partition_copies(p), err);
    int *w_defer = malloc((size_t)p->n_stages * sizeof *w_defer);
    SC_ALLOC_CHECK(w_defer, err);
    sc_status rc = plan_partition_zb1_defer(c, p, units, w_defer, err);
    if (rc == SC_OK)
        rc = plan_schedule_build_zb1(out, p->n_stages, units, plan_partition_copies(p), w_defer,
                                     err);
    free(w_defer);
    return rc;
}

sc_status plan_partition_simulate(const plan_cost *c, const plan_partition *p,
                                  const plan_schedule *s, const plan_sim_stage *stages, int n_micro,
                                  double slice_efficiency, int record_events, plan_sim_result *out,
                                  sc_err *err)
{
    for (int i = 0; i < p->n_stages; i++)
        if (s->n_stages != p->n_stages || (s->replicas != NULL ? s->replicas[i] : 1) != p->n_dev[i])
            return SC_ERRF(err, SC_ERR_INVALID,
                           "simulate: stage %d of the partition has %d copies, the schedule was "
                           "built for %d (of %d stages); build it with the partition's copies "
                           "(plan_schedule_build_replicated)",
                           i, p->n_dev[i], s->replicas != NULL ? s->replicas[i] : 1, s->n_stages);
    plan_sim_share share;
    void *buf;
    int shared = partition_share(c, p, &share, &buf);
    if (shared < 0)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory simulating %d stages", p->n_stages);
    sc_status rc =
        shared ? plan_sim_run_shared(s, stages, n_micro, slice_efficiency, &share, record_events,
                                     out, err)
               : plan_sim_run(s, stages, n_micro, slice_efficiency, record_events, out, err);
    free(buf);
    return rc;
}

sc_status plan_partition_simulate_sized(const plan_cost *c, const plan_partition *p,
                                        const plan_sim_sized *in, int record_events,
                                        plan_sim_result *out, sc_err *err)
{
    plan_sim_share share;
    void *buf;
    int shared = partition_share(c, p, &share, &buf);
    if (shared < 0)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory simulating %d stages", p->n_stages);
    sc_status rc = plan_sim_run_sized_shared(in, shared ? &share : NULL, record_events, out, err);
    free(buf);
    return rc;
}

void plan_partition_sim_stages(const plan_cost *c, const plan_partition *p, plan_sim_stage *st)
{
    size_t L = (size_t)c->n_blocks;
    for (int s = 0; s < p->n_stages; s++) {
        const int *devs = p->devs + p->dev_start[s];
        int n = p->n_dev[s];
        double f = 0, b = 0, w = 0;
        for (int i = 0; i < n; i++) {
            size_t t = (size_t)dev_type(c, devs[i]);
            double fi = 0, bi = 0, wi = 0;
            for (int l = p->first[s]; l <= p->last[s]; l++) {
                double share = c->profile->blocks[l].wgrad_share;
                fi += c->fwd_s[t * L + (size_t)l];
                bi += c->bwd_s[t * L + (size_t)l];
                /* measured by the profiler, else assumed (plan_partition.h) */
                wi += (share >= 0 ? share : PLAN_WGRAD_SHARE) * c->bwd_s[t * L + (size_t)l];
            }
            if (fi > f)
                f = fi;
            if (bi > b) {
                b = bi;
                w = wi; /* the slowest copy's */
            }
        }
        memset(&st[s], 0, sizeof st[s]);
        /* each copy runs its micro-batches whole (plan_sim plays the copies) */
        st[s].fwd_s = f;
        st[s].bwd_s = b;
        st[s].wgrad_s = w;
        /* every replica steps the optimizer over the stage's parameters once per iteration;
         * the slowest one sets the pace */
        double opt = 0;
        for (int i = 0; i < n; i++) {
            int t = dev_type(c, devs[i]);
            double oi = 0;
            for (int l = p->first[s]; l <= p->last[s]; l++)
                oi += c->profile->blocks[l].optimizer_s;
            oi /= c->cluster->types[t].relative_speed;
            if (oi > opt)
                opt = oi;
        }
        st[s].opt_s = opt;
        st[s].opt_s += plan_partition_reduce_time(c, p, s);
        double cut = plan_partition_cut_time(c, p, s) / 2.0;
        st[s].send_fwd_s = cut;
        st[s].send_bwd_s = cut;
    }
}

sc_status plan_search_simulate(const plan_search_cfg *cfg, const plan_partition *cand,
                               plan_sim_stage *st, double *iter_s, sc_err *err)
{
    int S = cand->n_stages, m = cfg->n_micro > 0 ? cfg->n_micro : 1;
    /* pipedream's stream crosses iterations: enough minibatches to reach its steady state */
    int units =
        cfg->sched == PLAN_SCHED_PIPEDREAM && m < 4 * cand->n_devs + 4 ? 4 * cand->n_devs + 4 : m;
    /* sliced: with the halves whose stash the candidate's memory was checked for */
    int halves = cfg->sched == PLAN_SCHED_SLICED ? cfg->sliced : 0;
    halves = halves < S - 1 ? halves : S - 1;
    halves = halves < m ? halves : m;
    double eff = cfg->slice_efficiency > 0 ? cfg->slice_efficiency : 0.9;
    plan_schedule *s = NULL;
    plan_sim_result r;
    SC_CHECK(plan_partition_schedule(cfg->cost, cand, cfg->sched, units, halves, &s, err));
    plan_partition_sim_stages(cfg->cost, cand, st);
    sc_status rc = plan_partition_simulate(cfg->cost, cand, s, st, m, eff, 0, &r, err);
    plan_schedule_destroy(&s);
    if (rc != SC_OK)
        return rc;
    *iter_s = r.iteration_s;
    plan_sim_result_free(&r);
    return SC_OK;
}
