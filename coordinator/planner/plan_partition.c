/*
 * plan_partition: the partition container and the cost model every strategy is judged by:
 * stage, cut and link times, the bottleneck, the micro-batches a stage stashes and the memory
 * they take (zb1's deferral capped to each stage's memory included), the lower bounds, and
 * which replica counts the runtime runs.
 *
 * Does not search and does not simulate: each strategy has a file of its own
 * (plan_partition_<strategy>.c) and the simulator glue is plan_partition_sim.c. Those files call
 * this one, never the other way round: this file calls only the planner's lower modules
 * (plan_cluster, plan_profile's costs, plan_schedule's counts).
 * Invariant: times are per micro-batch at the cost tables' micro-batch size (plan_cost); stash
 * counts follow the runtime's rule (sc_pipeline.h), and the searches' memory bounds never count
 * less than the final plan needs.
 */
#include "coordinator/planner/plan_partition.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_pipeline.h"
#include "coordinator/planner/plan_partition_internal.h"

/* ================================================================ containers */

sc_status plan_partition_new(plan_partition **out, int cap_stages, int cap_devices, sc_err *err)
{
    *out = NULL;
    plan_partition *p = calloc(1, sizeof *p);
    SC_ALLOC_CHECK(p, err);
    if (cap_stages < 1)
        cap_stages = 1;
    if (cap_devices < 1)
        cap_devices = 1;
    p->cap_stages = cap_stages;
    p->cap_devices = cap_devices;
    p->first = calloc((size_t)cap_stages, sizeof(int));
    p->last = calloc((size_t)cap_stages, sizeof(int));
    p->n_dev = calloc((size_t)cap_stages, sizeof(int));
    p->dev_start = calloc((size_t)cap_stages, sizeof(int));
    p->devs = calloc((size_t)cap_devices, sizeof(int));
    if (!p->first || !p->last || !p->n_dev || !p->dev_start || !p->devs) {
        plan_partition_destroy(&p);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for a partition");
    }
    *out = p;
    return SC_OK;
}

void plan_partition_destroy(plan_partition **pp)
{
    if (pp == NULL || *pp == NULL)
        return;
    plan_partition *p = *pp;
    free(p->first);
    free(p->last);
    free(p->n_dev);
    free(p->dev_start);
    free(p->devs);
    free(p->order);
    free(p);
    *pp = NULL;
}

void plan_partition_clear(plan_partition *p)
{
    p->n_stages = 0;
    p->n_devs = 0;
    p->objective_s = 0;
    p->no_fit = 0;
    p->note[0] = '\0';
    p->search = 0;
    if (p->order != NULL) {
        free(p->order);
        p->order = NULL;
        p->n_order = 0;
    }
}

sc_status plan_partition_set_order(plan_partition *p, const int *order, int n, sc_err *err)
{
    int *o = malloc((size_t)(n > 0 ? n : 1) * sizeof *o);
    if (o == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for a block order of %d blocks", n);
    memcpy(o, order, (size_t)n * sizeof *o);
    free(p->order);
    p->order = o;
    p->n_order = n;
    return SC_OK;
}

void plan_partition_push(plan_partition *p, int first, int last, const int *devs, int n)
{
    assert(p->n_stages < p->cap_stages && p->n_devs + n <= p->cap_devices);
    int s = p->n_stages++;
    p->first[s] = first;
    p->last[s] = last;
    p->n_dev[s] = n;
    p->dev_start[s] = p->n_devs;
    memcpy(p->devs + p->n_devs, devs, (size_t)n * sizeof(int));
    p->n_devs += n;
}

void plan_partition_copy(plan_partition *dst, const plan_partition *src)
{
    assert(src->order == NULL);
    plan_partition_clear(dst);
    for (int s = 0; s < src->n_stages; s++)
        plan_partition_push(dst, src->first[s], src->last[s], src->devs + src->dev_start[s],
                            src->n_dev[s]);
    dst->objective_s = src->objective_s;
    memcpy(dst->note, src->note, sizeof dst->note);
    dst->search = src->search;
}

/* ================================================================ objective */

double plan_group_min_bw(const plan_cluster *cl, const int *a, int na, const int *b, int nb)
{
    double bw = HUGE_VAL;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (a[i] != b[j]) {
                double x = plan_cluster_bw(cl, a[i], b[j]);
                if (x < bw)
                    bw = x;
            }
    return bw;
}

double plan_group_reduce_bw(const plan_cluster *cl, const int *devs, int n)
{
    double bw = plan_group_min_bw(cl, devs, n, devs, n);
    for (int i = 0; n > 1 && i < n; i++)
        bw = reduce_capped(cl, cl->devices[devs[i]].server, bw);
    return bw;
}

static double group_time(const plan_cost *c, const int *devs, int n, int first, int last)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double w = plan_cost_work(c, dev_type(c, devs[i]), first, last);
        if (w > worst)
            worst = w;
    }
    if (n == 1)
        return worst;
    double bw = plan_group_reduce_bw(c->cluster, devs, n);
    return worst / n + allreduce_share_s(c, plan_cost_params(c, first, last), n, bw);
}

double plan_partition_stage_time(const plan_cost *c, const plan_partition *p, int s)
{
    return group_time(c, p->devs + p->dev_start[s], p->n_dev[s], p->first[s], p->last[s]);
}

double plan_partition_reduce_time(const plan_cost *c, const plan_partition *p, int s)
{
    const int *devs = p->devs + p->dev_start[s];
    int n = p->n_dev[s];
    return n > 1 ? allreduce_s(plan_cost_params(c, p->first[s], p->last[s]), n,
                               plan_group_reduce_bw(c->cluster, devs, n))
                 : 0;
}

double plan_partition_cut_time(const plan_cost *c, const plan_partition *p, int s)
{
    if (s + 1 >= p->n_stages)
        return 0;
    double bw = plan_group_min_bw(c->cluster, p->devs + p->dev_start[s], p->n_dev[s],
                                  p->devs + p->dev_start[s + 1], p->n_dev[s + 1]);
    if (!isfinite(bw))
        return 0;
    return 2.0 * c->act_bytes[p->last[s]] / bw;
}

static void add_flow(const plan_cluster *cl, double *load, int a, int b, double bytes)
{
    int route[64];
    int n = plan_cluster_route(cl, a, b, route, 64);
    for (int i = 0; i < n; i++)
        load[route[i]] += bytes;
}

double plan_partition_contention(const plan_cost *c, const plan_partition *p)
{
    const plan_cluster *cl = c->cluster;
    if (cl->n_links == 0)
        return 0;
    double *load = calloc((size_t)cl->n_links, sizeof(double));
    if (load == NULL)
        return 0;
    double m = c->samples > 0 ? c->batch / c->samples : 1;
    if (m < 1)
        m = 1;
    for (int s = 0; s < p->n_stages; s++) {
        const int *da = p->devs + p->dev_start[s];
        int ra = p->n_dev[s];
        if (s + 1 < p->n_stages) {
            /* activations forward and gradients back, spread over the replica pairs */
            const int *db = p->devs + p->dev_start[s + 1];
            int rb = p->n_dev[s + 1], nf = ra > rb ? ra : rb;
            for (int i = 0; i < nf; i++)
                add_flow(cl, load, da[i % ra], db[i % rb], 2.0 * c->act_bytes[p->last[s]] / nf);
        }
        if (ra > 1) {
            /* ring all-reduce: each replica sends 2 (r-1)/r of the weights once an iteration */
            double w = plan_cost_params(c, p->first[s], p->last[s]);
            for (int i = 0; i < ra; i++)
                add_flow(cl, load, da[i], da[(i + 1) % ra], 2.0 * (ra - 1) / ra * w / m);
        }
    }
    double worst = 0;
    for (int l = 0; l < cl->n_links; l++) {
        double t = load[l] / cl->links[l].bw_bytes_per_s;
        worst = t > worst ? t : worst;
    }
    free(load);
    return worst;
}

double plan_partition_bottleneck(const plan_cost *c, const plan_partition *p)
{
    double b = plan_partition_contention(c, p);
    for (int s = 0; s < p->n_stages; s++) {
        double t = plan_partition_stage_time(c, p, s);
        double x = plan_partition_cut_time(c, p, s);
        if (t > b)
            b = t;
        if (x > b)
            b = x;
    }
    return b;
}

/* ================================================================ stash and memory */

double plan_stash_count(plan_sched_kind k, int n_stages, int s, int m)
{
    if (k == PLAN_SCHED_ZB1)
        return plan_stash_count_zb1(n_stages, m);
    return plan_stash_count_copy(k, n_stages - s, 1, m);
}

/* Samples before unit u, in micro-batches, when the first 2 * sliced units are halves. */
static double units_before(int u, int sliced)
{
    return u <= 2 * sliced ? 0.5 * u : sliced + (u - 2 * sliced);
}

double plan_stash_count_sliced(int n_stages, int s, int m, int sliced)
{
    assert(sliced >= 0 && sliced <= m);
    int n = m + sliced;
    /* warm-up: the fewest units that make up p-s-1 micro-batches */
    int warm = sc_pipeline_sliced_warmup(n_stages - s - 1, sliced, n);
    if (warm >= n)
        return m;
    /* then one forward, one backward: warm + 1 units in flight, the most in the last such
     * window since the halves come first */
    return units_before(n, sliced) - units_before(n - warm - 1, sliced);
}

double plan_stash_count_sliced_copy(int after, int copies, int m, int sliced)
{
    if (copies == 1) /* need = W = after - 1 */
        return plan_stash_count_sliced(after, 0, m, sliced);
    /* a copy holds every r-th of the warm-up + 1 consecutive units, each at most one
     * micro-batch's worth */
    return sc_pipeline_sliced_copy_slots(after, copies, sliced, m + sliced);
}

int plan_search_sliced_tries(const plan_search_cfg *cfg, int stages)
{
    if (cfg->sched != PLAN_SCHED_SLICED || cfg->sliced != 0 || cfg->cost->samples < 2 ||
        cfg->n_micro >= stages)
        return 0;
    return cfg->n_micro; /* at most stages - 1 */
}

int *plan_partition_copies(const plan_partition *p)
{
    int any = 0;
    for (int s = 0; s < p->n_stages; s++)
        any |= p->n_dev[s] > 1;
    return any ? p->n_dev : NULL;
}

sc_status plan_partition_zb1_defer(const plan_cost *c, const plan_partition *p, int n_micro,
                                   int *w_defer, sc_err *err)
{
    const int *reps = plan_partition_copies(p);
    if (c->zb1_peak_cap) {
        double *slot = malloc((size_t)p->n_stages * sizeof *slot);
        SC_ALLOC_CHECK(slot, err);
        for (int s = 0; s < p->n_stages; s++) /* what a micro-batch keeps from F to W */
            slot[s] = plan_cost_stash(c, p->first[s], p->last[s]);
        plan_schedule_zb1_caps(p->n_stages, reps, n_micro, slot, w_defer);
        free(slot);
    } else {
        for (int s = 0; s < p->n_stages; s++) /* ZB-H1's own deferral */
            w_defer[s] = plan_schedule_zb1_defer(p->n_stages, reps, n_micro, s);
    }
    /* and within the stage's smallest device, counted as the plan's peak is (plan_run): the
     * stash and the W stashes of every micro-batch held, and the largest block's scratch. 0
     * fits where 1f1b's count does (the searches count 1f1b's stash for zb1). */
    for (int s = 0; s < p->n_stages; s++) {
        double room = HUGE_VAL, scratch = 0;
        for (int i = 0; i < p->n_dev[s]; i++)
            room = fmin(room, dev_memory(c, p->devs[p->dev_start[s] + i]));
        for (int l = p->first[s]; l <= p->last[s]; l++)
            scratch = fmax(scratch, c->scratch[l]);
        double wstash = c->wstash_prefix[p->last[s] + 1] - c->wstash_prefix[p->first[s]];
        while (w_defer[s] > 0) {
            int held = plan_schedule_zb1_held(p->n_stages, reps, n_micro, s, w_defer[s]);
            if (plan_cost_memory(c, p->first[s], p->last[s], held, 0) + wstash * held + scratch <=
                room)
                break;
            w_defer[s]--;
        }
    }
    return SC_OK;
}

double plan_partition_stage_memory(const plan_search_cfg *cfg, const plan_partition *p, int s)
{
    int after = 0, all = 0;
    for (int i = 0; i < p->n_stages; i++) {
        all += p->n_dev[i];
        after += i >= s ? p->n_dev[i] : 0;
    }
    double inflight = search_stash(cfg, p->n_stages, after, p->n_dev[s]);
    if (cfg->sched == PLAN_SCHED_ZB1) { /* the plan known whole: stage 0's warm-up exactly */
        inflight = plan_stash_count_zb1_copy(sc_pipeline_warmup(all, p->n_dev[0]) + 1, p->n_dev[s],
                                             cfg->n_micro);
        /* and the deferral capped by the stage's devices (and 1f1b's peak when asked), as the plan
         * runs (out of memory: ZB-H1's count, a bound) */
        int *w_defer = malloc((size_t)p->n_stages * sizeof *w_defer);
        if (w_defer != NULL && cfg->n_micro > 0 &&
            plan_partition_zb1_defer(cfg->cost, p, cfg->n_micro, w_defer, NULL) == SC_OK)
            inflight = plan_schedule_zb1_held(p->n_stages, plan_partition_copies(p), cfg->n_micro,
                                              s, w_defer[s]);
        free(w_defer);
    }
    return plan_cost_memory(cfg->cost, p->first[s], p->last[s], inflight,
                            plan_weight_versions(cfg->sched, after, p->n_dev[s]));
}

sc_status plan_partition_check_memory(const plan_search_cfg *cfg, const plan_partition *p,
                                      sc_err *err)
{
    const plan_cluster *cl = cfg->cost->cluster;
    for (int s = 0; s < p->n_stages; s++) {
        double need = plan_partition_stage_memory(cfg, p, s);
        for (int i = 0; i < p->n_dev[s]; i++) {
            int d = p->devs[p->dev_start[s] + i];
            double have = cl->types[cl->devices[d].type].memory_bytes;
            if (need > have)
                return SC_ERRF(err, SC_ERR_TOO_LARGE,
                               "stage %d (blocks %d-%d) needs %.3g bytes but device %d (%s) has "
                               "%.3g",
                               s, p->first[s], p->last[s], need, d,
                               cl->types[cl->devices[d].type].name, have);
        }
    }
    return SC_OK;
}

sc_status plan_partition_no_fit(const plan_search_cfg *cfg, const char *who, plan_partition *out,
                                sc_err *err)
{
    out->no_fit = 1;
    const plan_cost *c = cfg->cost;
    int big = 0;
    for (int l = 1; l < c->n_blocks; l++)
        if (plan_cost_memory(c, l, l, 1, 0) > plan_cost_memory(c, big, big, 1, 0))
            big = l;
    double most = 0;
    for (int d = 0; d < c->cluster->n_devices; d++)
        if (dev_memory(c, d) > most)
            most = dev_memory(c, d);
    return SC_ERRF(err, SC_ERR_TOO_LARGE,
                   "%s: no partition fits the devices' memory (largest device %.3g bytes; block "
                   "%d \"%s\" alone needs %.3g with one micro-batch stashed): add devices with "
                   "more memory or use fewer/smaller micro-batches",
                   who, most, big, c->profile->blocks[big].name,
                   plan_cost_memory(c, big, big, 1, 0));
}

/* ================================================================ bounds and the runtime's rule */

/* The fastest device type (the one with the least total work: measured times may differ) and
 * the sum of every device's speed. */
static int fastest_type(const plan_cost *c, double *speed_sum)
{
    const plan_cluster *cl = c->cluster;
    int fastest = 0;
    *speed_sum = 0;
    for (int d = 0; d < cl->n_devices; d++) {
        int t = cl->devices[d].type;
        *speed_sum += cl->types[t].relative_speed;
        if (plan_cost_work(c, t, 0, c->n_blocks - 1) <
            plan_cost_work(c, fastest, 0, c->n_blocks - 1))
            fastest = t;
    }
    return fastest;
}

double plan_lower_bound_replicated(const plan_cost *c)
{
    double speed_sum;
    int fastest = fastest_type(c, &speed_sum);
    /* total work on the fastest device, spread over the summed speed in units of it */
    return plan_cost_work(c, fastest, 0, c->n_blocks - 1) *
           c->cluster->types[fastest].relative_speed / speed_sum;
}

double plan_lower_bound(const plan_cost *c)
{
    double speed_sum;
    int fastest = fastest_type(c, &speed_sum);
    double biggest = 0;
    for (int l = 0; l < c->n_blocks; l++) {
        double w = plan_cost_work(c, fastest, l, l);
        if (w > biggest)
            biggest = w;
    }
    double spread = plan_lower_bound_replicated(c);
    return spread > biggest ? spread : biggest;
}

int plan_partition_runnable(const plan_partition *p, plan_sched_kind k, int m)
{
    for (int s = 0; s < p->n_stages; s++)
        if (!plan_replicas_runnable(k, m, p->n_dev[s]))
            return 0;
    return 1;
}

int plan_search_max_stages(const plan_search_cfg *cfg)
{
    int L = cfg->cost->n_blocks, D = cfg->cost->cluster->n_devices;
    int S = D < L ? D : L;
    if (cfg->max_stages > 0 && cfg->max_stages < S)
        S = cfg->max_stages;
    return S;
}
