/*
 * plan_partition: partition containers, the common bottleneck objective and the strategies.
 *
 * The dynamic programmes scan split points from the right and stop as soon as the stage being
 * formed is already at least as slow as the best value found (its work only grows as the split
 * moves left); that keeps them exact and far below their O(L^2) worst case on long chains.
 */
#include "coordinator/planner/plan_partition.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_pipeline.h"
#include "coordinator/planner/plan_antichain.h"
#include "coordinator/planner/plan_sim.h"

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
}

/* ================================================================ objective */

static int dev_type(const plan_cost *c, int d)
{
    return c->cluster->devices[d].type;
}

static double group_min_bw(const plan_cluster *cl, const int *a, int na, const int *b, int nb)
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

/* PipeDream's data-parallel cost: 4 (r-1) W / (r bw) for a ring all-reduce of W bytes. */
static double allreduce_s(double params, int r, double bw)
{
    return r > 1 ? 4.0 * (r - 1) * params / (r * bw) : 0;
}

/* Share of one micro-batch in a replicated stage's weight all-reduce: synchronous schedules
 * reduce once per iteration, i.e. once per batch / samples micro-batches. */
static double allreduce_share_s(const plan_cost *c, double params, int r, double bw)
{
    double m = c->samples > 0 ? c->batch / c->samples : 1;
    return allreduce_s(params, r, bw) / (m > 1 ? m : 1);
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
    double bw = group_min_bw(c->cluster, devs, n, devs, n);
    return worst / n + allreduce_share_s(c, plan_cost_params(c, first, last), n, bw);
}

double plan_partition_stage_time(const plan_cost *c, const plan_partition *p, int s)
{
    return group_time(c, p->devs + p->dev_start[s], p->n_dev[s], p->first[s], p->last[s]);
}

double plan_partition_cut_time(const plan_cost *c, const plan_partition *p, int s)
{
    if (s + 1 >= p->n_stages)
        return 0;
    double bw = group_min_bw(c->cluster, p->devs + p->dev_start[s], p->n_dev[s],
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

double plan_stash_count_copy(plan_sched_kind k, int after, int copies, int m)
{
    switch (k) {
    case PLAN_SCHED_GPIPE:
        return (m + copies - 1) / copies;
    case PLAN_SCHED_PIPEDREAM: /* the stream crosses iterations: no cap by m */
        return sc_pipeline_copy_slots(after, copies, 0);
    default:
        return sc_pipeline_copy_slots(after, copies, m);
    }
}

double plan_stash_count(plan_sched_kind k, int n_stages, int s, int m)
{
    return plan_stash_count_copy(k, n_stages - s, 1, m);
}

int plan_weight_versions(plan_sched_kind k, int after, int copies)
{
    return k == PLAN_SCHED_PIPEDREAM ? sc_pipeline_copy_slots(after, copies, 0) - 1 : 0;
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

/* The stash count the searches assume for a copy of a stage of `copies` copies in a plan of
 * n_stages stages, the stages from it on having `after` copies in all (at most). */
static double search_stash(const plan_search_cfg *cfg, int n_stages, int after, int copies)
{
    int k = cfg->sliced;
    if (cfg->sched != PLAN_SCHED_SLICED || k <= 0)
        return plan_stash_count_copy(cfg->sched, after, copies, cfg->n_micro);
    k = k < n_stages - 1 ? k : n_stages - 1;
    k = k < cfg->n_micro ? k : cfg->n_micro;
    return plan_stash_count_sliced_copy(after, copies, cfg->n_micro, k);
}

/* Sliced schedule: a search tries none and then 1..this many warm-up micro-batches run as
 * halves, each count with its own stash counts (search_stash); a partition fits when one count
 * fits all its stages, as plan_run then keeps the fastest count that fits. 0 when the schedule
 * is not sliced, the search was given its count (cfg->sliced), a micro-batch holds fewer than 2
 * samples (the runtime halves none), or there are at least as many micro-batches as `stages`
 * (the most stages a plan may have, or that the search's memory bound counts): then halves
 * never lower a stage's stash below 1F1B's (plan_stash_count_sliced; they only hold more on
 * the first stages), so they cannot make a plan fit. */
static int sliced_tries(const plan_search_cfg *cfg, int stages)
{
    if (cfg->sched != PLAN_SCHED_SLICED || cfg->sliced != 0 || cfg->cost->samples < 2 ||
        cfg->n_micro >= stages)
        return 0;
    return cfg->n_micro; /* at most stages - 1 */
}

double plan_partition_stage_memory(const plan_search_cfg *cfg, const plan_partition *p, int s)
{
    int after = 0;
    for (int i = s; i < p->n_stages; i++)
        after += p->n_dev[i];
    double inflight = search_stash(cfg, p->n_stages, after, p->n_dev[s]);
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

int plan_replicas_runnable(plan_sched_kind k, int m, int r)
{
    if (r <= 1)
        return 1;
    m = m > 1 ? m : 1;
    return k == PLAN_SCHED_PIPEDREAM ? m % r == 0 : r <= m;
}

int plan_partition_runnable(const plan_partition *p, plan_sched_kind k, int m)
{
    for (int s = 0; s < p->n_stages; s++)
        if (!plan_replicas_runnable(k, m, p->n_dev[s]))
            return 0;
    return 1;
}

/* The processor groups of the simulator's lanes, each copy of a stage a lane on its own device
 * (a stage without copies: one lane): one group per server that has compute_slots; `share`
 * points into `buf`. Returns 0 when no server shares its processors (then share is unused), -1
 * out of memory. */
static int partition_share(const plan_cost *c, const plan_partition *p, plan_sim_share *share,
                           int **buf)
{
    const plan_cluster *cl = c->cluster;
    int S = p->n_stages, shared = 0, N = 0;
    *buf = NULL;
    for (int v = 0; v < cl->n_servers; v++)
        shared |= cl->servers[v].compute_slots > 0;
    if (!shared)
        return 0;
    for (int i = 0; i < S; i++)
        N += p->n_dev[i];
    int *b = malloc(((size_t)3 * N + (size_t)cl->n_servers) * sizeof *b);
    if (b == NULL)
        return -1;
    int *group = b, *cap = b + N, *weight = b + 2 * N, *group_of_server = b + 3 * N;
    *share = (plan_sim_share){.n_groups = 0, .group = group, .capacity = cap, .weight = weight};
    for (int v = 0; v < cl->n_servers; v++)
        group_of_server[v] = -1;
    for (int l = 0; l < N; l++) {
        int v = cl->devices[p->devs[l]].server;
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
    *buf = b;
    return 1;
}

int *plan_partition_copies(const plan_partition *p)
{
    int any = 0;
    for (int s = 0; s < p->n_stages; s++)
        any |= p->n_dev[s] > 1;
    return any ? p->n_dev : NULL;
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
    int *buf;
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
    int *buf;
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
        double f = 0, b = 0;
        for (int i = 0; i < n; i++) {
            size_t t = (size_t)dev_type(c, devs[i]);
            double fi = 0, bi = 0;
            for (int l = p->first[s]; l <= p->last[s]; l++) {
                fi += c->fwd_s[t * L + (size_t)l];
                bi += c->bwd_s[t * L + (size_t)l];
            }
            if (fi > f)
                f = fi;
            if (bi > b)
                b = bi;
        }
        memset(&st[s], 0, sizeof st[s]);
        /* each copy runs its micro-batches whole (plan_sim plays the copies) */
        st[s].fwd_s = f;
        st[s].bwd_s = b;
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
        if (n > 1) {
            double bw = group_min_bw(c->cluster, devs, n, devs, n);
            st[s].opt_s += allreduce_s(plan_cost_params(c, p->first[s], p->last[s]), n, bw);
        }
        double cut = plan_partition_cut_time(c, p, s) / 2.0;
        st[s].send_fwd_s = cut;
        st[s].send_bwd_s = cut;
    }
}

/* ================================================================ helpers */

static double dev_memory(const plan_cost *c, int d)
{
    return c->cluster->types[dev_type(c, d)].memory_bytes;
}

/* Memory bound used inside the DPs, where the later stages are not known yet: a stage of
 * `copies` copies in a plan of at most n_stages stages, with at most `after` copies from it on
 * (itself included): every count grows with `after`, so this never under-estimates the final
 * plan's need. */
static double dp_memory(const plan_search_cfg *cfg, int first, int last, int n_stages, int after,
                        int copies)
{
    double inflight = search_stash(cfg, n_stages, after, copies);
    return plan_cost_memory(cfg->cost, first, last, inflight,
                            plan_weight_versions(cfg->sched, after, copies));
}

/* Marks out->no_fit and says which block is the largest. */
static sc_status no_fit(const plan_search_cfg *cfg, const char *who, plan_partition *out,
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

/* ================================================================ uniform, blockpartition */

sc_status plan_partition_uniform(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks, D = c->cluster->n_devices;
    int S = D < L ? D : L;
    if (cfg->max_stages > 0 && cfg->max_stages < S)
        S = cfg->max_stages;
    plan_partition_clear(out);
    for (int s = 0; s < S; s++) {
        int first = (int)((long)L * s / S), last = (int)((long)L * (s + 1) / S) - 1;
        plan_partition_push(out, first, last, &s, 1);
    }
    out->objective_s = plan_partition_bottleneck(c, out);
    (void)err;
    return SC_OK;
}

sc_status plan_partition_blockpartition(const plan_search_cfg *cfg, plan_partition *out,
                                        sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks, D = c->cluster->n_devices;
    int S = D < L ? D : L, t0 = dev_type(c, 0);
    if (cfg->max_stages > 0 && cfg->max_stages < S)
        S = cfg->max_stages;
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

/* ================================================================ DP over a device order */

typedef struct dp_tables {
    int D, L;
    double *f; /* (D+1, L+1) */
    int *k;    /* split */
    int *r;    /* replicas of the last stage */
} dp_tables;

static void dp_free(dp_tables *t)
{
    free(t->f);
    free(t->k);
    free(t->r);
}

static int dp_alloc(dp_tables *t, int D, int L)
{
    size_t n = (size_t)(D + 1) * (size_t)(L + 1);
    t->D = D;
    t->L = L;
    t->f = malloc(n * sizeof(double));
    t->k = malloc(n * sizeof(int));
    t->r = malloc(n * sizeof(int));
    return t->f && t->k && t->r ? 0 : -1;
}

/* Rebuilds the partition ending at table row d (the first d devices of `order`) for L
 * blocks. Returns -1 when out of memory. */
static int dp_extract(const dp_tables *t, const int *order, int d, int L, plan_partition *out)
{
    int W = t->L + 1, ns = 0, n = L;
    int *st_first = malloc((size_t)L * sizeof(int)), *st_d = malloc((size_t)L * sizeof(int));
    int *st_r = malloc((size_t)L * sizeof(int));
    if (!st_first || !st_d || !st_r) {
        free(st_first), free(st_d), free(st_r);
        return -1;
    }
    /* walk back, then push the stages front to back */
    while (n > 0) {
        int k = t->k[(size_t)d * W + n], r = t->r[(size_t)d * W + n];
        st_first[ns] = k;
        st_d[ns] = d - r;
        st_r[ns] = r;
        ns++;
        n = k;
        d -= r;
    }
    plan_partition_clear(out);
    for (int i = ns - 1; i >= 0; i--) {
        int last = i > 0 ? st_first[i - 1] - 1 : L - 1;
        plan_partition_push(out, st_first[i], last, order + st_d[i], st_r[i]);
    }
    free(st_first), free(st_d), free(st_r);
    return 0;
}

/* The most copies of one stage any DP gives (hetero's max_rep). */
#define DP_MAX_COPIES 8

/* The longest run (at most max_rep) of same-type, same-server devices ending at position d-1
 * of `order`: the devices one replicated stage may take there. */
static int same_run(const plan_cluster *cl, const int *order, int d, int max_rep)
{
    int run = 1;
    while (run < max_rep && d - run - 1 >= 0 &&
           cl->devices[order[d - run - 1]].type == cl->devices[order[d - 1]].type &&
           cl->devices[order[d - run - 1]].server == cl->devices[order[d - 1]].server)
        run++;
    return run;
}

/* Best bottleneck for the chain on devices order[0..D-1] used as a prefix (devices at the end
 * of the order may stay idle); a stage takes a run of r devices of one type on one server when
 * max_rep > 1 and the runtime runs r copies with the plan's micro-batches
 * (plan_replicas_runnable). Values >= cap are not explored. Fills `out` when the result is
 * < cap. */
static double dp_order(const plan_search_cfg *cfg, dp_tables *t, const int *order, int D,
                       int max_rep, double cap, plan_partition *out, int *mem_cut)
{
    const plan_cost *c = cfg->cost;
    const plan_cluster *cl = c->cluster;
    int L = c->n_blocks, W = L + 1;
    double *f = t->f;
    for (int i = 0; i < (D + 1) * W; i++)
        f[i] = HUGE_VAL;
    f[0] = 0;
    for (int d = 1; d <= D; d++) {
        int run = same_run(cl, order, d, max_rep);
        int type = dev_type(c, order[d - 1]);
        double mem = dev_memory(c, order[d - 1]);
        double intra = cl->servers[cl->devices[order[d - 1]].server].intra_bw_bytes_per_s;
        /* what depends on the row and the copies alone, out of the loops over blocks: the
         * stages from this one on take the devices s0..D-1 at most */
        double inflight[DP_MAX_COPIES + 1], bw_in[DP_MAX_COPIES + 1];
        int versions[DP_MAX_COPIES + 1];
        assert(run <= DP_MAX_COPIES);
        for (int r = 1; r <= run; r++) {
            int s0 = d - r; /* position of the stage's first device */
            inflight[r] = search_stash(cfg, D, D - s0, r);
            versions[r] = plan_weight_versions(cfg->sched, D - s0, r);
            bw_in[r] = s0 > 0 ? plan_cluster_bw(cl, order[s0 - 1], order[s0]) : 0;
        }
        for (int n = 1; n <= L; n++) {
            double best = cap;
            int bk = -1, br = 1;
            for (int r = 1; r <= run; r++) {
                if (!plan_replicas_runnable(cfg->sched, cfg->n_micro, r))
                    continue;   /* copies the runtime would refuse for this micro-batch count */
                int s0 = d - r; /* position of the stage's first device */
                const double *prevrow = f + (size_t)s0 * W;
                for (int k = n - 1; k >= 0; k--) {
                    double work = plan_cost_work(c, type, k, n - 1);
                    double ts = r > 1 ? work / r + allreduce_share_s(
                                                       c, plan_cost_params(c, k, n - 1), r, intra)
                                      : work;
                    if (ts >= best)
                        break;
                    /* dp_memory, its counts computed above */
                    if (plan_cost_memory(c, k, n - 1, inflight[r], versions[r]) > mem) {
                        if (mem_cut != NULL)
                            *mem_cut = 1;
                        break;
                    }
                    double prev = prevrow[k];
                    if (prev >= best)
                        continue;
                    double v = prev > ts ? prev : ts;
                    if (s0 > 0 && v < best) {
                        double cut = 2.0 * c->act_bytes[k - 1] / bw_in[r];
                        if (cut > v)
                            v = cut;
                    }
                    if (v < best) {
                        best = v;
                        bk = k;
                        br = r;
                    }
                }
            }
            if (bk >= 0) {
                f[(size_t)d * W + n] = best;
                t->k[(size_t)d * W + n] = bk;
                t->r[(size_t)d * W + n] = br;
            }
        }
    }
    double best = cap;
    int bd = -1;
    for (int d = 1; d <= D; d++)
        if (f[(size_t)d * W + L] < best) {
            best = f[(size_t)d * W + L];
            bd = d;
        }
    if (bd < 0)
        return HUGE_VAL;
    if (out != NULL && dp_extract(t, order, bd, L, out) != 0)
        return HUGE_VAL;
    return best;
}

/* A speed of devices of type `type` relative to type 0 that no block beats: the largest ratio
 * of a block's work on type 0 to its work on `type` (HUGE_VAL when some block costs nothing on
 * `type` but something on type 0). Any stage's work on `type` is at least its work on type 0
 * divided by this. */
static double type_speed_bound(const plan_cost *c, int type)
{
    int L = c->n_blocks;
    double s = 0;
    for (int b = 0; b < L; b++) {
        double w0 = c->fwd_s[b] + c->bwd_s[b];
        double w = c->fwd_s[(size_t)type * L + b] + c->bwd_s[(size_t)type * L + b];
        if (w0 <= 0)
            continue;
        if (w <= 0)
            return HUGE_VAL;
        if (w0 / w > s)
            s = w0 / w;
    }
    return s;
}

/* Lower bounds on the compute bottleneck of any plan on the first d devices of `order`, for
 * d = 0..D (bound[0] = HUGE_VAL): stage i on r_i devices of speed bound s (type_speed_bound)
 * takes at least its work on type 0 over s r_i, so the slowest stage takes at least the whole
 * work on type 0 over the sum of the devices' bounds (with a margin for rounding). 0 where a
 * device has no bound. Returns -1 when out of memory. */
static int prefix_bounds(const plan_cost *c, const int *order, int D, double *bound)
{
    int T = c->cluster->n_types;
    double *speed = malloc((size_t)(T > 0 ? T : 1) * sizeof *speed);
    if (speed == NULL)
        return -1;
    for (int i = 0; i < T; i++)
        speed[i] = type_speed_bound(c, i);
    double work0 = plan_cost_work(c, 0, 0, c->n_blocks - 1), sum = 0;
    bound[0] = HUGE_VAL;
    for (int d = 1; d <= D; d++) {
        sum += speed[dev_type(c, order[d - 1])];
        bound[d] = isfinite(sum) && sum > 0 ? work0 / sum * (1 - 1e-9) : 0;
    }
    free(speed);
    return 0;
}

/* dp_order with each plan's memory counted for its own number of stages, as the final plan
 * counts it. dp_order bounds a stage's stash by the devices from its position to the end of
 * the prefix, which overcounts for a plan that leaves devices idle; when that bound ruled out
 * anything, the prefixes of k = D-1, D-2, ... devices are solved again with k as the count
 * (exact without replicas), each capped by the best so far. A tie goes to the fewer devices,
 * as within one pass. Once no plan on k devices can beat the best so far (prefix_bounds), no
 * shorter prefix can either and the search stops. *mem_cut (when not NULL) is set when memory
 * ruled anything out. Returns HUGE_VAL when out of memory, as when nothing fits. */
static double dp_order_fit(const plan_search_cfg *cfg, dp_tables *t, const int *order, int D,
                           int max_rep, double cap, plan_partition *out, int *mem_cut)
{
    int cut = 0;
    double v = dp_order(cfg, t, order, D, max_rep, cap, out, &cut);
    if (mem_cut != NULL)
        *mem_cut |= cut;
    if (!cut || D < 2)
        return v;
    double *bound = malloc((size_t)(D + 1) * sizeof *bound);
    if (bound == NULL || prefix_bounds(cfg->cost, order, D, bound) != 0) {
        free(bound);
        return HUGE_VAL;
    }
    for (int k = D - 1; k >= 1 && bound[k] < (v < cap ? v : cap); k--) {
        /* a result equal to the best so far is kept: it uses fewer devices */
        double vk =
            dp_order(cfg, t, order, k, max_rep, v < cap ? nextafter(v, HUGE_VAL) : cap, out, NULL);
        if (vk <= v)
            v = vk;
    }
    free(bound);
    return v;
}

/* ================================================================ minmax by bisection */

/* minmax without copies, in two steps instead of a full table per prefix of the order: the
 * least bottleneck V, by bisection on a test that sweeps the chain positions each device of
 * the order can reach within a bound (O(devices x blocks) a test); then dp_order's table on
 * the cells a plan of bottleneck V can pass alone (reached from the front within V and able
 * to reach the end within V). Every value the test compares is computed as dp_order computes
 * it, so V is its least bottleneck, and the path through those cells is its partition, ties
 * broken the same way: the fewest devices, then from the last stage back the shortest stage
 * among the best. */
/* The bisection stops once its bounds are this close (relative); the table over the cells
 * below the upper one then gives the exact value. */
#define MM_BRACKET 0x1p-6

typedef struct mm_ctx {
    const plan_search_cfg *cfg;
    const int *order;
    int L, D, k;        /* blocks; devices of the order; the count memend holds */
    int rows;           /* rows of fw the last probe filled */
    const double **wp;  /* (D) work prefix sums on each position's device type */
    const double **cut; /* (D) cut time after block l into each position (NULL at 0) */
    double *cut_rows;   /* (n_cut, L) the distinct bandwidths' cut times */
    double *cut_bw;     /* (D) their bandwidths */
    int n_cut;
    int *memend;            /* (D, L) the furthest end memory allows a stage starting at l */
    unsigned char *fw, *bk; /* (D+1, L+1) positions reached from the front / reaching the end */
} mm_ctx;

static void mm_free(mm_ctx *m)
{
    free(m->wp), free(m->cut), free(m->cut_rows), free(m->cut_bw);
    free(m->memend), free(m->fw), free(m->bk);
}

static int mm_init(mm_ctx *m, const plan_search_cfg *cfg, const int *order, int D)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks;
    size_t cells = (size_t)(D + 1) * (size_t)(L + 1);
    *m = (mm_ctx){.cfg = cfg, .order = order, .L = L, .D = D};
    m->wp = malloc((size_t)D * sizeof *m->wp);
    m->cut = malloc((size_t)D * sizeof *m->cut);
    m->cut_rows = malloc((size_t)D * (size_t)L * sizeof *m->cut_rows);
    m->cut_bw = malloc((size_t)D * sizeof *m->cut_bw);
    m->memend = malloc((size_t)D * (size_t)L * sizeof *m->memend);
    m->fw = malloc(cells);
    m->bk = malloc(cells);
    if (!m->wp || !m->cut || !m->cut_rows || !m->cut_bw || !m->memend || !m->fw || !m->bk)
        return -1;
    for (int s0 = 0; s0 < D; s0++) {
        m->wp[s0] = c->work_prefix_s + (size_t)dev_type(c, order[s0]) * (size_t)(L + 1);
        m->cut[s0] = NULL;
        if (s0 == 0)
            continue;
        double bw = plan_cluster_bw(c->cluster, order[s0 - 1], order[s0]);
        int i = 0;
        while (i < m->n_cut && m->cut_bw[i] != bw)
            i++;
        double *row = m->cut_rows + (size_t)i * L;
        if (i == m->n_cut) {
            m->cut_bw[m->n_cut++] = bw;
            for (int l = 0; l < L; l++)
                row[l] = 2.0 * c->act_bytes[l] / bw; /* as dp_order computes it */
        }
        m->cut[s0] = row;
    }
    return 0;
}

/* memend for plans counted as k stages (dp_order's bound with k devices): memory grows with a
 * stage's extent, so the furthest end grows with its start. */
static void mm_memory(mm_ctx *m, int k)
{
    const plan_search_cfg *cfg = m->cfg;
    const plan_cost *c = cfg->cost;
    int L = m->L;
    m->k = k;
    for (int s0 = 0; s0 < k; s0++) {
        double inflight = search_stash(cfg, k, k - s0, 1), mem = dev_memory(c, m->order[s0]);
        int versions = plan_weight_versions(cfg->sched, k - s0, 1), e = 0;
        int *end = m->memend + (size_t)s0 * L;
        for (int l = 0; l < L; l++) {
            e = e > l ? e : l;
            while (e < L && !(plan_cost_memory(c, l, e, inflight, versions) > mem))
                e++;
            end[l] = e;
        }
    }
}

/* Whether the chain splits into stages on the first d <= m->k devices of the order with every
 * stage time and cut time <= T (memory as memend): the least such d, 0 when none. fw holds the
 * positions reached after each row: up to the one returned, or with `all` up to m->rows (the
 * rows after it reach nothing). *next gets the least stage or cut time above T that the test
 * ruled out: every bound below it gives the same answer. */
static int mm_probe(mm_ctx *m, double T, int all, double *next)
{
    int L = m->L, W = L + 1, lo = 0, hi = 0, found = 0;
    double nx = HUGE_VAL;
    memset(m->fw, 0, (size_t)W);
    m->fw[0] = 1;
    m->rows = 0;
    for (int d = 1; d <= m->k; d++) {
        const unsigned char *prev = m->fw + (size_t)(d - 1) * W;
        unsigned char *cur = m->fw + (size_t)d * W;
        const double *wp = m->wp[d - 1], *cut = m->cut[d - 1];
        const int *memend = m->memend + (size_t)(d - 1) * L;
        memset(cur, 0, (size_t)W);
        int marked = 0, w = 0, nlo = W, nhi = -1;
        /* stages start where the previous row ends; each reaches a run of ends, and the runs'
         * ends grow with their starts */
        for (int l = lo; l <= hi && l < L; l++) {
            if (!prev[l])
                continue;
            if (cut != NULL && cut[l - 1] > T) {
                nx = cut[l - 1] < nx ? cut[l - 1] : nx;
                continue;
            }
            w = w > l ? w : l;
            while (w < L && !(wp[w + 1] - wp[l] > T))
                w++;
            int end = w;
            if (memend[l] < end) {
                end = memend[l];
            } else if (w < L && memend[l] > w) {
                double x = wp[w + 1] - wp[l];
                nx = x < nx ? x : nx;
            }
            int from = marked > l ? marked + 1 : l + 1;
            if (from > end)
                continue;
            memset(cur + from, 1, (size_t)(end - from + 1));
            marked = end;
            nlo = from < nlo ? from : nlo;
            nhi = end;
        }
        if (nhi < 0)
            break;
        m->rows = d;
        if (cur[L] && !found) {
            found = d;
            if (!all)
                break;
        }
        lo = nlo;
        hi = nhi;
    }
    *next = nx;
    return found;
}

/* dp_order's table for m->k devices on the cells a plan of bottleneck <= T can pass (reached
 * from the front within T, reaching the end of the chain within T), given that one can: every
 * candidate a cell of value <= T takes lies there too, so those cells get dp_order's values and
 * splits, ties broken as it breaks them. Returns the least bottleneck, *row its least row. */
static double mm_table(mm_ctx *m, dp_tables *t, double T, int *row)
{
    int L = m->L, W = L + 1;
    double next;
    int found = mm_probe(m, T, 1, &next), rows = m->rows;
    assert(found > 0);
    (void)found;
    /* bk: the positions after row d from which the chain ends within T on a later row */
    memset(m->bk + (size_t)rows * W, 0, (size_t)W);
    m->bk[(size_t)rows * W + L] = 1;
    for (int d = rows; d >= 1; d--) {
        const unsigned char *fw = m->fw + (size_t)(d - 1) * W, *after = m->bk + (size_t)d * W;
        unsigned char *bk = m->bk + (size_t)(d - 1) * W;
        const double *wp = m->wp[d - 1], *cut = m->cut[d - 1];
        const int *memend = m->memend + (size_t)(d - 1) * L;
        memset(bk, 0, (size_t)W);
        bk[L] = d - 1 >= 1; /* row d - 1 may be the last */
        int nb = W, w = L;  /* the first position of `after` beyond l; the furthest end by work */
        for (int l = L - 1; l >= 0; l--) {
            if (after[l + 1])
                nb = l + 1;
            while (w > l && wp[w] - wp[l] > T)
                w--;
            if (!fw[l] || (cut != NULL && cut[l - 1] > T))
                continue;
            int end = memend[l] < w ? memend[l] : w;
            bk[l] = nb <= end;
        }
    }
    double *f = t->f, cap = nextafter(T, HUGE_VAL), best_v = HUGE_VAL;
    f[0] = 0;
    *row = 0;
    for (int d = 1; d <= rows; d++) {
        const unsigned char *fw = m->fw + (size_t)d * W, *bk = m->bk + (size_t)d * W;
        const unsigned char *pfw = fw - W, *pbk = bk - W;
        const double *wp = m->wp[d - 1], *cut = m->cut[d - 1], *prevrow = f + (size_t)(d - 1) * W;
        const int *memend = m->memend + (size_t)(d - 1) * L;
        for (int n = 1; n <= L; n++) {
            if (!fw[n] || !bk[n])
                continue;
            /* dp_order's scan over the cells above */
            double best = cap;
            int at = -1;
            for (int k = n - 1; k >= 0; k--) {
                double ts = wp[n] - wp[k];
                if (ts >= best || memend[k] < n)
                    break;
                if (!pfw[k] || !pbk[k])
                    continue;
                double prev = prevrow[k];
                if (prev >= best)
                    continue;
                double v = prev > ts ? prev : ts;
                if (cut != NULL && v < best && cut[k - 1] > v)
                    v = cut[k - 1];
                if (v < best) {
                    best = v;
                    at = k;
                }
            }
            assert(at >= 0);
            f[(size_t)d * W + n] = best;
            t->k[(size_t)d * W + n] = at;
            t->r[(size_t)d * W + n] = 1;
        }
        if (fw[L] && f[(size_t)d * W + L] < best_v) {
            best_v = f[(size_t)d * W + L];
            *row = d;
        }
    }
    return best_v;
}

/* The least bottleneck on at most m->k devices when it is <= limit, else HUGE_VAL; when found,
 * t holds its table (mm_table) and *row its least row. `lo`: a lower bound (prefix_bounds),
 * tested first since its rounding margin is not a proof. The bisection only narrows the bound
 * until the table over the cells below it is cheap; the table gives the exact value. */
static double mm_least(mm_ctx *m, dp_tables *t, double lo, double limit, int *row)
{
    double hi = HUGE_VAL, next;
    if (isfinite(limit)) {
        if (mm_probe(m, limit, 0, &next) == 0)
            return HUGE_VAL;
        hi = limit;
    }
    lo = lo < hi ? lo : hi;
    if (mm_probe(m, lo, 0, &next) > 0) {
        hi = lo;
        lo = 0;
    } else {
        if (!isfinite(next))
            return HUGE_VAL;
        lo = next;
    }
    /* nothing below lo passes, hi passes */
    while (lo < hi && !(isfinite(hi) && hi - lo <= hi * MM_BRACKET)) {
        double T = isfinite(hi) ? lo + (hi - lo) / 2 : lo * 1.0625;
        T = T < limit ? T : limit;
        if (mm_probe(m, T, 0, &next) > 0) {
            hi = T;
        } else {
            if (!isfinite(next) || next > limit)
                return HUGE_VAL;
            lo = next;
        }
    }
    return mm_table(m, t, hi, row);
}

/* dp_order_fit for max_rep 1 and no cap, without the sliced schedule's halves (whose stash
 * counts do not grow with the devices counted): the same value and partition. Where
 * dp_order_fit re-solves only when the first pass's memory bound ruled anything out, this one
 * always looks at the shorter prefixes, which changes nothing: had the bound ruled nothing
 * out, every shorter prefix's table would be the same, its best no lower and its least row the
 * same. Returns HUGE_VAL when nothing fits or out of memory (*nomem set). */
static double mm_order_fit(const plan_search_cfg *cfg, dp_tables *t, const int *order, int D,
                           plan_partition *out, int *nomem)
{
    mm_ctx m = {0};
    double *bound = malloc((size_t)(D + 1) * sizeof *bound), v = HUGE_VAL;
    if (bound == NULL || mm_init(&m, cfg, order, D) != 0 ||
        prefix_bounds(cfg->cost, order, D, bound) != 0) {
        *nomem = 1;
        goto done;
    }
    mm_memory(&m, D);
    int row = 0, best_row = 0;
    v = mm_least(&m, t, bound[D], HUGE_VAL, &best_row);
    /* dp_order_fit's re-solves: a tie goes to the fewer devices. t keeps the table of the last
     * prefix found, the best. */
    for (int k = D - 1; k >= 1 && bound[k] < v; k--) {
        mm_memory(&m, k);
        double vk = mm_least(&m, t, bound[k], v, &row);
        if (vk <= v && isfinite(vk)) {
            v = vk;
            best_row = row;
        }
    }
    if (best_row > 0 && dp_extract(t, order, best_row, m.L, out) != 0) {
        *nomem = 1;
        v = HUGE_VAL;
    }
done:
    mm_free(&m);
    free(bound);
    return v;
}

sc_status plan_partition_minmax(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int D = c->cluster->n_devices, L = c->n_blocks;
    dp_tables t = {0};
    int *order = malloc((size_t)D * sizeof(int));
    if (order == NULL || dp_alloc(&t, D, L) != 0) {
        free(order);
        dp_free(&t);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory in minmax");
    }
    for (int d = 0; d < D; d++)
        order[d] = d;
    /* the order is a prefix: capping the devices caps the stages */
    int Dused = cfg->max_stages > 0 && cfg->max_stages < D ? cfg->max_stages : D;
    /* the bisection needs stash counts that grow with the devices counted */
    int nomem = 0;
    double v = cfg->sched == PLAN_SCHED_SLICED && cfg->sliced > 0
                   ? dp_order_fit(cfg, &t, order, Dused, 1, HUGE_VAL, out, NULL)
                   : mm_order_fit(cfg, &t, order, Dused, out, &nomem);
    if (nomem) {
        free(order);
        dp_free(&t);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory in minmax");
    }
    /* sliced: the plan may run 0 to S - 1 warm-up micro-batches as halves */
    plan_search_cfg sc = *cfg;
    for (sc.sliced = 1; sc.sliced <= sliced_tries(cfg, Dused); sc.sliced++) {
        double vk = dp_order_fit(&sc, &t, order, Dused, 1, v, out, NULL);
        if (vk < v)
            v = vk;
    }
    free(order);
    dp_free(&t);
    if (!isfinite(v))
        return no_fit(cfg, "minmax", out, err);
    out->objective_s = v;
    return SC_OK;
}

/* ================================================================ exhaustive */

typedef struct ex_state {
    const plan_search_cfg *cfg;
    plan_partition *scratch; /* with links: the candidate, to score its contention */
    int L, D, S;
    int *used;
    int *cut_at; /* (S) first block of each stage */
    int *dev;    /* (S) */
    int *best_cut, *best_dev;
    int best_S;
    double best;
    int mem_cut; /* memory ruled out some stage */
} ex_state;

static void ex_rec(ex_state *e, int s, int start, double cur)
{
    const plan_cost *c = e->cfg->cost;
    if (s == e->S) {
        if (start == e->L && cur < e->best && e->scratch != NULL) {
            plan_partition_clear(e->scratch);
            for (int x = 0; x < e->S; x++)
                plan_partition_push(e->scratch, e->cut_at[x],
                                    x + 1 < e->S ? e->cut_at[x + 1] - 1 : e->L - 1, &e->dev[x], 1);
            double ct = plan_partition_contention(c, e->scratch);
            cur = ct > cur ? ct : cur;
        }
        if (start == e->L && cur < e->best) {
            e->best = cur;
            e->best_S = e->S;
            memcpy(e->best_cut, e->cut_at, (size_t)e->S * sizeof(int));
            memcpy(e->best_dev, e->dev, (size_t)e->S * sizeof(int));
        }
        return;
    }
    int max_end = e->L - (e->S - s); /* leave one block per remaining stage */
    double inflight = search_stash(e->cfg, e->S, e->S - s, 1);
    int wv = plan_weight_versions(e->cfg->sched, e->S - s, 1);
    for (int d = 0; d < e->D; d++) {
        if (e->used[d])
            continue;
        int type = dev_type(c, d);
        double cut = 0;
        if (s > 0)
            cut = 2.0 * c->act_bytes[start - 1] / plan_cluster_bw(c->cluster, e->dev[s - 1], d);
        if (cut >= e->best)
            continue;
        double base = cur > cut ? cur : cut;
        e->used[d] = 1;
        e->dev[s] = d;
        e->cut_at[s] = start;
        int lo = s == e->S - 1 ? e->L - 1 : start;
        for (int end = lo; end <= max_end; end++) {
            double w = plan_cost_work(c, type, start, end);
            if (w >= e->best)
                break;
            if (plan_cost_memory(c, start, end, inflight, wv) > dev_memory(c, d)) {
                e->mem_cut = 1;
                break;
            }
            ex_rec(e, s + 1, end + 1, base > w ? base : w);
        }
        e->used[d] = 0;
    }
}

static double choose(int n, int k)
{
    double r = 1;
    for (int i = 1; i <= k; i++)
        r = r * (n - k + i) / i;
    return r;
}

/* log10 of the candidate plans of L blocks on D devices in 1..Smax stages, the sum over S of
 * C(L-1, S-1) D! / (D-S)!, by its terms' logarithms: the sum itself passes the largest double
 * (about 1.8e308) on large instances (177 blocks on 4,096 devices give 5e637). */
static double exhaustive_log10_count(int L, int D, int Smax)
{
    double most = -HUGE_VAL, sum = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int S = 1; S <= Smax; S++) {
            double t =
                (lgamma(L) - lgamma(S) - lgamma(L - S + 1) + lgamma(D + 1) - lgamma(D - S + 1)) /
                log(10);
            if (pass == 0)
                most = t > most ? t : most;
            else
                sum += pow(10, t - most);
        }
    return most + log10(sum);
}

sc_status plan_partition_exhaustive(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks, D = c->cluster->n_devices;
    int Smax = D < L ? D : L;
    if (cfg->max_stages > 0 && cfg->max_stages < Smax)
        Smax = cfg->max_stages;
    long limit = cfg->exhaustive_limit > 0 ? cfg->exhaustive_limit : PLAN_EXHAUSTIVE_DEFAULT_LIMIT;
    double count = 0;
    for (int S = 1; S <= Smax; S++) {
        double perm = 1;
        for (int i = 0; i < S; i++)
            perm *= D - i;
        count += choose(L - 1, S - 1) * perm;
    }
    if (count > (double)limit) {
        char n[48];
        if (isfinite(count))
            snprintf(n, sizeof n, "%.3g", count);
        else
            snprintf(n, sizeof n, "more than 10^%.0f", floor(exhaustive_log10_count(L, D, Smax)));
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "exhaustive: %d blocks on %d devices give %s candidate plans, over the "
                       "limit of %ld; use it on small instances (e.g. <= 12 blocks and <= 6 "
                       "devices) or pick another strategy",
                       L, D, n, limit);
    }
    ex_state e = {.cfg = cfg, .L = L, .D = D, .best = HUGE_VAL};
    e.used = calloc((size_t)D, sizeof(int));
    e.cut_at = calloc((size_t)Smax, sizeof(int));
    e.dev = calloc((size_t)Smax, sizeof(int));
    e.best_cut = calloc((size_t)Smax, sizeof(int));
    e.best_dev = calloc((size_t)Smax, sizeof(int));
    sc_status rc = SC_OK;
    if (!e.used || !e.cut_at || !e.dev || !e.best_cut || !e.best_dev) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory in exhaustive");
        goto done;
    }
    if (c->cluster->n_links > 0)
        SC_CHECK_GOTO(plan_partition_new(&e.scratch, L, D, err), done);
    for (int S = 1; S <= Smax; S++) {
        e.S = S;
        ex_rec(&e, 0, 0, 0);
    }
    /* sliced: where memory ruled anything out without halves, every count of halved warm-up
     * micro-batches in turn, keeping only plans better than the best so far */
    plan_search_cfg sc = *cfg;
    e.cfg = &sc;
    for (sc.sliced = 1; e.mem_cut && sc.sliced <= sliced_tries(cfg, Smax); sc.sliced++)
        for (int S = 2; S <= Smax; S++) {
            e.S = S;
            ex_rec(&e, 0, 0, 0);
        }
    if (!isfinite(e.best)) {
        rc = no_fit(cfg, "exhaustive", out, err);
        goto done;
    }
    plan_partition_clear(out);
    for (int s = 0; s < e.best_S; s++) {
        int last = s + 1 < e.best_S ? e.best_cut[s + 1] - 1 : L - 1;
        plan_partition_push(out, e.best_cut[s], last, &e.best_dev[s], 1);
    }
    out->objective_s = e.best;
done:
    plan_partition_destroy(&e.scratch);
    free(e.used), free(e.cut_at), free(e.dev), free(e.best_cut), free(e.best_dev);
    return rc;
}

/* ================================================================ pipedream */

/* One cell of PipeDream's table A[i][j][m]: best time for states i..j on m+1 machines, the
 * split (k: last state of the previous part, -1 for none), the machines of the previous part
 * (index) and the replicas of the last stage. */
typedef struct pd_cell {
    double t;
    int32_t k;
    int16_t mprev;
    int16_t mp;
} pd_cell;

typedef struct pd_level {
    int n, M, rows;
    pd_cell *A; /* (rows, n, M) */
} pd_level;

static pd_cell *pd_at(const pd_level *lv, int i, int j, int m)
{
    return &lv->A[((size_t)i * (size_t)lv->n + (size_t)j) * (size_t)lv->M + (size_t)m];
}

/* The replica counts one level of the DP may use: a stage on r of the level's machines runs as
 * r * mult copies (mult: the servers a second-level stage spans), and the runtime must run that
 * many for the plan's micro-batch count (plan_replicas_runnable). */
typedef struct pd_rule {
    plan_sched_kind sched;
    int n_micro;
    int mult;
} pd_rule;

static int pd_allowed(const pd_rule *u, int r)
{
    return plan_replicas_runnable(u->sched, u->n_micro, r * u->mult);
}

/* Whether the rule forbids some replica count up to M. */
static int pd_restricts(const pd_rule *u, int M)
{
    for (int r = 1; r <= M; r++)
        if (!pd_allowed(u, r))
            return 1;
    return 0;
}

/* The machines (minus one) that the answer for states i..j of row i takes from a solved level:
 * all of them, PipeDream's answer, unless the runtime's rule forbids some replica count up to
 * the cluster's devices (`restricted`); then the count with the lowest time, the most on ties
 * (as PipeDream, which uses every machine), so that devices stay idle only where the copies
 * the runtime runs cannot use them well (or at all: more machines than stages and copies). */
static int pd_machines(const pd_level *lv, int restricted, int i, int j)
{
    int best = lv->M - 1;
    if (!restricted)
        return best;
    for (int m = lv->M - 2; m >= 0; m--)
        if (pd_at(lv, i, j, m)->t < pd_at(lv, i, j, best)->t)
            best = m;
    return best;
}

/* The first level as the second sees it: one server's best time on the states of row i up to j
 * (pd_machines of the first level's table), for a second-level stage spread over mp servers,
 * whose copies multiply the first level's. Multipliers under which the first level may use the
 * same replica counts share a class and one solve of it; cls[mp] = -1: the runtime would run
 * no stage spread over mp servers. */
typedef struct pd_servers {
    int rows, n, n_classes;
    int *cls;     /* (M2 + 1) class of each multiplier mp = 1..M2 */
    int *rep;     /* (n_classes) a multiplier of each class */
    double *t;    /* (n_classes, rows, n) */
    int16_t *m;   /* (n_classes, rows, n) the first level's machines, minus one */
    int fallback; /* some range leaves machines of a server idle (times not monotone) */
} pd_servers;

static void pd_servers_free(pd_servers *sv)
{
    free(sv->cls), free(sv->rep), free(sv->t), free(sv->m);
    memset(sv, 0, sizeof *sv);
}

/* Classes of the multipliers 1..M2 for servers of n1 machines. -1 out of memory. */
static int pd_servers_init(pd_servers *sv, const pd_rule *rule, int n1, int M2, int rows, int n)
{
    memset(sv, 0, sizeof *sv);
    sv->rows = rows;
    sv->n = n;
    sv->cls = malloc((size_t)(M2 + 1) * sizeof *sv->cls);
    sv->rep = malloc((size_t)(M2 + 1) * sizeof *sv->rep);
    if (sv->cls == NULL || sv->rep == NULL)
        return -1;
    sv->cls[0] = -1;
    for (int g = 1; g <= M2; g++) {
        pd_rule u = *rule, v = *rule;
        u.mult = g;
        sv->cls[g] = -1;
        if (!pd_allowed(&u, 1))
            continue;
        for (int c = 0; c < sv->n_classes && sv->cls[g] < 0; c++) {
            int same = 1;
            v.mult = sv->rep[c];
            for (int r = 1; r <= n1 && same; r++)
                same = pd_allowed(&u, r) == pd_allowed(&v, r);
            if (same)
                sv->cls[g] = c;
        }
        if (sv->cls[g] < 0) {
            sv->rep[sv->n_classes] = g;
            sv->cls[g] = sv->n_classes++;
        }
    }
    size_t cells = (size_t)(sv->n_classes > 0 ? sv->n_classes : 1) * (size_t)rows * (size_t)n;
    sv->t = malloc(cells * sizeof *sv->t);
    sv->m = malloc(cells * sizeof *sv->m);
    return sv->t != NULL && sv->m != NULL ? 0 : -1;
}

/* Keeps class c's view of the solved first level lv (pd_machines's choice with `restricted`). */
static void pd_servers_take(pd_servers *sv, int c, const pd_level *lv, int restricted)
{
    size_t at = (size_t)c * (size_t)sv->rows * (size_t)sv->n;
    for (int i = 0; i < sv->rows; i++)
        for (int j = 0; j < sv->n; j++, at++) {
            int m = pd_machines(lv, restricted, i, j);
            sv->t[at] = pd_at(lv, i, j, m)->t;
            sv->m[at] = (int16_t)m;
            sv->fallback |= m != lv->M - 1 && isfinite(sv->t[at]);
        }
}

static double pd_servers_t(const pd_servers *sv, int mp, int i, int j)
{
    int c = sv->cls[mp];
    if (c < 0)
        return HUGE_VAL;
    return sv->t[((size_t)c * (size_t)sv->rows + (size_t)i) * (size_t)sv->n + (size_t)j];
}

static int pd_servers_m(const pd_servers *sv, int mp, int i, int j)
{
    int c = sv->cls[mp];
    return sv->m[((size_t)c * (size_t)sv->rows + (size_t)i) * (size_t)sv->n + (size_t)j];
}

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

/* PipeDream's time of a stage run by r replicas: (compute + the all-reduce of its weights over r
 * replicas) / r; `within` scales the all-reduce of a whole lower level seen as one machine. */
static double pd_stage_time(double compute_s, double params, int r, double bw, int within)
{
    return (compute_s + 4.0 * (r - 1) * params / (bw * r) / within) / r;
}

/* The best split found so far for one DP cell. */
typedef struct {
    double t;
    int k, mprev, mp;
} pd_best;

/* Takes the split after state k (`prev` before it, stage time `last` after it on mp replicas,
 * activation transfers in_t and out_t) when its bottleneck beats the best so far. */
static void pd_take(pd_best *b, double prev, double last, double in_t, double out_t, int k,
                    int mprev, int mp)
{
    double v = prev > last ? prev : last;
    v = in_t > v ? in_t : v;
    v = out_t > v ? out_t : v;
    if (v < b->t) {
        b->t = v;
        b->k = k;
        b->mprev = mprev;
        b->mp = mp;
    }
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

#define PLAN_PD_HIER_MAX_CELLS 3000000L

/* ---- pipedream over antichain states (branching graph.txt profiles) ----
 * The same recurrence with states in place of chain positions: row r of a level is "after
 * state r - 1" (row 0: from the start), a stage runs from one state to a later one and the
 * split k before state j ranges over j's predecessors in the antichain DAG. Transfers use the
 * states' output sizes (PipeDream's augmented antichains). */

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

static sc_status pd_dag(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
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
    int restricted = pd_restricts(&in1.rule, cl->n_devices);
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
        int top = pd_machines(&lv1, restricted, 0, n - 1);
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
        if (pd_servers_init(&sv, &in1.rule, n1, S2, n + 1, n) != 0)
            goto nomem;
        double intra = cl->servers[0].intra_bw_bytes_per_s;
        for (int k = 0; k < sv.n_classes; k++) {
            in1.rule.mult = sv.rep[k];
            pds_solve(&in1, &lv1, 1, intra);
            pd_servers_take(&sv, k, &lv1, restricted);
        }
        int held = sv.n_classes - 1; /* the class lv1 holds */
        pds_in in2 = in1;
        in2.rule.mult = 1;
        in2.below = &sv;
        pds_solve(&in2, &lv2, n1, min_nic);
        int top = pd_machines(&lv2, restricted, 0, n - 1);
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
            ns = pds_walk(&lv1, r, end2[s2], pd_servers_m(&sv, reps2[s2], r, end2[s2]), end, reps);
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
    pd_servers_free(&sv);
    return rc;
}

sc_status plan_partition_pipedream(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    const plan_cost *c = cfg->ref_cost ? cfg->ref_cost : cfg->cost;
    const plan_cluster *cl = c->cluster;
    int L = c->n_blocks;
    sc_status rc = SC_OK;
    plan_partition_clear(out);
    if (!pd_is_chain(c->profile)) {
        rc = pd_dag(cfg, out, err);
        if (rc == SC_OK) {
            pd_note_types(cl, out);
            pd_note_idle(cfg, cl, out);
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
    int restricted = pd_restricts(&in1.rule, cl->n_devices);
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
        int top = pd_machines(&lv1, restricted, 0, n - 1);
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
        if (pd_servers_init(&sv, &in1.rule, n1, S2, n, n) != 0)
            goto nomem;
        double intra = cl->servers[0].intra_bw_bytes_per_s;
        for (int k = 0; k < sv.n_classes; k++) {
            in1.rule.mult = sv.rep[k];
            pd_solve(&in1, &lv1, 1, intra);
            pd_servers_take(&sv, k, &lv1, restricted);
        }
        int held = sv.n_classes - 1; /* the class lv1 holds */
        pd_in in2 = in1;
        in2.rule.mult = 1;
        in2.below = &sv;
        pd_solve(&in2, &lv2, n1, min_nic);
        int top = pd_machines(&lv2, restricted, 0, n - 1);
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
            int ns1 = pd_walk(&lv1, i, j, pd_servers_m(&sv, reps2[s2], i, j), first, reps);
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
    goto done;
nomem:
    rc = SC_ERRF(err, SC_ERR_NOMEM, "pipedream: out of memory for %d states", n);
done:
    free(lv1.A);
    free(lv2.A);
    free(first), free(reps), free(first2), free(reps2), free(devs);
    pd_servers_free(&sv);
    return rc;
}

/* ================================================================ autopipe */

/* Exact min-max of blocks [lo, hi) into exactly ns stages on devices dev0.. in cluster order.
 * f, arg: scratch of (ns+1)*(hi-lo+1). Writes the ns+1 boundaries to bnd. */
static double range_dp(const plan_cost *c, int lo, int hi, int dev0, int ns, int *bnd, double *f,
                       int *arg)
{
    int len = hi - lo, W = len + 1;
    for (int i = 0; i < (ns + 1) * W; i++)
        f[i] = HUGE_VAL;
    f[0] = 0;
    for (int p = 1; p <= ns; p++) {
        int dev = dev0 + p - 1, type = dev_type(c, dev);
        double bw = p > 1 ? plan_cluster_bw(c->cluster, dev - 1, dev) : 1;
        for (int n = p; n <= len - (ns - p); n++) {
            double best = HUGE_VAL;
            int bk = -1;
            for (int k = n - 1; k >= p - 1; k--) {
                double w = plan_cost_work(c, type, lo + k, lo + n - 1);
                if (w >= best)
                    break;
                double prev = f[(p - 1) * W + k];
                if (prev >= best)
                    continue;
                double v = prev > w ? prev : w;
                if (p > 1) {
                    double cut = 2.0 * c->act_bytes[lo + k - 1] / bw;
                    v = cut > v ? cut : v;
                }
                if (v < best) {
                    best = v;
                    bk = k;
                }
            }
            f[p * W + n] = best;
            arg[p * W + n] = bk;
        }
    }
    bnd[ns] = hi;
    int n = len;
    for (int p = ns; p >= 1; p--) {
        n = arg[p * W + n];
        bnd[p - 1] = lo + n;
    }
    return f[ns * W + len];
}

static uint64_t hash_bnd(const int *b, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)b[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void bnd_to_partition(const int *bnd, int S, plan_partition *p)
{
    plan_partition_clear(p);
    for (int s = 0; s < S; s++)
        plan_partition_push(p, bnd[s], bnd[s + 1] - 1, &s, 1);
}

/* The last stage whose steady phase (first backward .. last forward) has no idle gap. */
static int critical_stage(const plan_sim_result *r, int S, const plan_cost *c,
                          const plan_partition *p)
{
    int crit = -1;
    for (int s = 0; s < S; s++) {
        double first_b = HUGE_VAL, last_f = 0, prev_end = -1, gaps = 0;
        for (int e = 0; e < r->n_events; e++) {
            const plan_sim_event *ev = &r->events[e];
            if (ev->lane != s)
                continue;
            if (ev->kind == PLAN_ACT_B && ev->start_s < first_b)
                first_b = ev->start_s;
            if (ev->kind == PLAN_ACT_F)
                last_f = ev->start_s + ev->dur_s;
        }
        for (int e = 0; e < r->n_events; e++) {
            const plan_sim_event *ev = &r->events[e];
            if (ev->lane != s || ev->kind == PLAN_ACT_OPT)
                continue;
            if (ev->start_s >= first_b && ev->start_s <= last_f && prev_end >= first_b)
                gaps += ev->start_s - prev_end;
            prev_end = ev->start_s + ev->dur_s;
        }
        if (first_b <= last_f && gaps <= 1e-9 * r->iteration_s)
            crit = s;
    }
    if (crit < 0) {
        double worst = -1;
        for (int s = 0; s < S; s++) {
            double t = plan_partition_stage_time(c, p, s);
            if (t >= worst) {
                worst = t;
                crit = s;
            }
        }
    }
    return crit;
}

sc_status plan_partition_autopipe(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks, D = c->cluster->n_devices;
    int S = D < L ? D : L;
    if (cfg->max_stages > 0 && cfg->max_stages < S)
        S = cfg->max_stages;
    int m = 2 * S;
    int max_eval = L > 500 ? 48 : 160;
    sc_status rc = SC_OK;
    plan_schedule *sched = NULL;
    plan_partition *cur = NULL;
    plan_sim_stage *st = calloc((size_t)S, sizeof *st);
    double *f = malloc((size_t)(S + 1) * (size_t)(L + 1) * sizeof(double));
    int *arg = malloc((size_t)(S + 1) * (size_t)(L + 1) * sizeof(int));
    int *queue = malloc((size_t)(2 * max_eval + 2) * (size_t)(S + 1) * sizeof(int));
    uint64_t *seen = calloc((size_t)(4 * max_eval + 8), sizeof(uint64_t));
    int *nb = malloc((size_t)(S + 1) * sizeof(int));
    if (!st || !f || !arg || !queue || !seen || !nb) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "autopipe: out of memory");
        goto done;
    }
    SC_CHECK_GOTO(plan_schedule_build(&sched, PLAN_SCHED_1F1B, S, m, 0, err), done);
    SC_CHECK_GOTO(plan_partition_new(&cur, S, S, err), done);
    int head = 0, tail = 0, n_seen = 0, qcap = 2 * max_eval + 2;
    range_dp(c, 0, L, 0, S, queue, f, arg);
    seen[n_seen++] = hash_bnd(queue, S + 1);
    tail = 1;
    double best = HUGE_VAL;
    for (int evals = 0; head < tail && evals < max_eval; evals++) {
        int *bnd = queue + (size_t)(head++ % qcap) * (S + 1);
        bnd_to_partition(bnd, S, cur);
        plan_partition_sim_stages(c, cur, st);
        plan_sim_result r;
        SC_CHECK_GOTO(plan_partition_simulate(c, cur, sched, st, m, 1.0, 1, &r, err), done);
        if (r.iteration_s < best) {
            best = r.iteration_s;
            plan_partition_copy(out, cur);
        }
        int crit = critical_stage(&r, S, c, cur);
        plan_sim_result_free(&r);
        for (int move = 0; move < 2; move++) {
            memcpy(nb, bnd, (size_t)(S + 1) * sizeof(int));
            if (move == 0) {
                /* its first block moves to the previous stage; re-balance the prefix */
                if (crit == 0 || nb[crit + 1] - nb[crit] < 2 || nb[crit] + 1 < crit)
                    continue;
                nb[crit]++;
                range_dp(c, 0, nb[crit], 0, crit, nb, f, arg);
            } else {
                if (crit == S - 1 || nb[crit + 1] - nb[crit] < 2)
                    continue;
                nb[crit + 1]--;
                if (L - nb[crit + 1] < S - crit - 1)
                    continue;
                range_dp(c, nb[crit + 1], L, crit + 1, S - crit - 1, nb + crit + 1, f, arg);
            }
            uint64_t h = hash_bnd(nb, S + 1);
            int dup = 0;
            for (int i = 0; i < n_seen; i++)
                dup |= seen[i] == h;
            if (dup || n_seen >= 4 * max_eval + 8 || tail - head >= qcap)
                continue;
            seen[n_seen++] = h;
            memcpy(queue + (size_t)(tail++ % qcap) * (S + 1), nb, (size_t)(S + 1) * sizeof(int));
        }
    }
    out->objective_s = best;
done:
    plan_schedule_destroy(&sched);
    plan_partition_destroy(&cur);
    free(st), free(f), free(arg), free(queue), free(seen), free(nb);
    return rc;
}

/* ================================================================ hetero */

typedef struct het_search {
    const plan_search_cfg *cfg;
    plan_partition *scratch; /* with links: the DP's partition, scored with contention */
    dp_tables t;
    int D, max_rep, evals, max_evals;
    double best;
    int *best_order;
    int mem_cut; /* memory ruled out some stage */
} het_search;

static void het_try(het_search *h, const int *order)
{
    if (h->evals >= h->max_evals)
        return;
    h->evals++;
    double v =
        dp_order_fit(h->cfg, &h->t, order, h->D, h->max_rep, h->best, h->scratch, &h->mem_cut);
    /* the DP sees link bandwidths pair by pair; shared links are scored on the result */
    if (h->scratch != NULL && isfinite(v))
        v = plan_partition_bottleneck(h->cfg->cost, h->scratch);
    if (v < h->best) {
        h->best = v;
        memcpy(h->best_order, order, (size_t)h->D * sizeof(int));
    }
}

static double dev_speed(const plan_cost *c, int d)
{
    int t = dev_type(c, d);
    double w = plan_cost_work(c, t, 0, c->n_blocks - 1);
    return w > 0 ? 1.0 / w : c->cluster->types[t].relative_speed;
}

/* Sorts devices fastest first, ties by id. An insertion sort rather than qsort: its comparison
 * needs the cost model, and a file-scope pointer to it would race when jobs plan at once. */
static void sort_by_speed_desc(const plan_cost *c, int *devs, int n)
{
    for (int i = 1; i < n; i++) {
        int d = devs[i], j = i;
        double sd = dev_speed(c, d);
        while (j > 0) {
            double sp = dev_speed(c, devs[j - 1]);
            if (sp > sd || (sp == sd && devs[j - 1] < d))
                break;
            devs[j] = devs[j - 1];
            j--;
        }
        devs[j] = d;
    }
}

static int next_perm(int *a, int n)
{
    int i = n - 2;
    while (i >= 0 && a[i] >= a[i + 1])
        i--;
    if (i < 0)
        return 0;
    int j = n - 1;
    while (a[j] <= a[i])
        j--;
    int t = a[i];
    a[i] = a[j];
    a[j] = t;
    for (int l = i + 1, r = n - 1; l < r; l++, r--) {
        t = a[l];
        a[l] = a[r];
        a[r] = t;
    }
    return 1;
}

/* Small instances: the best partition for every (stages, devices used) pair on the chosen
 * order, each simulated. Fewer, more replicated stages can beat a lower bottleneck once fill,
 * drain and the activation round trip of 1F1B are counted, which only the simulator sees. */
#define HET_STAGED_MAX_DEVICES 16
#define HET_STAGED_MAX_BLOCKS 512

static sc_status simulate_candidate(const plan_search_cfg *cfg, const plan_partition *cand,
                                    plan_sim_stage *st, double *iter_s, sc_err *err)
{
    int S = cand->n_stages, m = cfg->n_micro > 0 ? cfg->n_micro : 1;
    int units =
        cfg->sched == PLAN_SCHED_PIPEDREAM && m < 4 * cand->n_devs + 4 ? 4 * cand->n_devs + 4 : m;
    /* sliced: with the halves whose stash the candidate's memory was checked for */
    int halves = cfg->sched == PLAN_SCHED_SLICED ? cfg->sliced : 0;
    halves = halves < S - 1 ? halves : S - 1;
    halves = halves < m ? halves : m;
    double eff = cfg->slice_efficiency > 0 ? cfg->slice_efficiency : 0.9;
    plan_schedule *s = NULL;
    plan_sim_result r;
    SC_CHECK(plan_schedule_build_replicated(&s, cfg->sched, S, units, halves,
                                            plan_partition_copies(cand), err));
    plan_partition_sim_stages(cfg->cost, cand, st);
    sc_status rc = plan_partition_simulate(cfg->cost, cand, s, st, m, eff, 0, &r, err);
    plan_schedule_destroy(&s);
    if (rc != SC_OK)
        return rc;
    *iter_s = r.iteration_s;
    plan_sim_result_free(&r);
    return SC_OK;
}

/* allreduce_mode: how a replicated stage's weight all-reduce counts in the DP: 0 its share of
 * the iteration (as in the objective), 1 all of it per micro-batch, 2 not at all. It really
 * runs as a tail after the flush, which no per-micro-batch charge captures, so the best
 * partitions under all three are candidates and the simulator judges. */
static sc_status pick_by_stages(const plan_search_cfg *cfg, const int *order, int D, int max_rep,
                                int allreduce_mode, plan_partition *out, double *best_iter,
                                int *mem_cut, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    const plan_cluster *cl = c->cluster;
    int L = c->n_blocks, S = D < L ? D : L;
    size_t W = (size_t)L + 1, plane = (size_t)(D + 1) * W, n3 = (size_t)(S + 1) * plane;
    sc_status rc = SC_OK;
    double *f = malloc(n3 * sizeof(double));
    int *kk = malloc(n3 * sizeof(int)), *rr = malloc(n3 * sizeof(int));
    plan_sim_stage *st = calloc((size_t)S, sizeof *st);
    plan_partition *cand = NULL;
    if (!f || !kk || !rr || !st) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "hetero: out of memory");
        goto done;
    }
    SC_CHECK_GOTO(plan_partition_new(&cand, L, D, err), done);
    /* pass 0 bounds each stage's stash as if the plan had S stages, which overcounts for plans
     * of fewer; when that bound ruled anything out, pass k = 1..S-1 solves again with k as the
     * count and keeps only its plans of exactly k stages */
    int cut = 0;
    for (int pass = 0; pass < S && (pass == 0 || cut); pass++) {
        int ms = pass == 0 ? S : pass;
        for (size_t i = 0; i < n3; i++)
            f[i] = HUGE_VAL;
        f[0] = 0;
        for (int s = 1; s <= ms; s++)
            for (int d = s; d <= D; d++) {
                int run = same_run(cl, order, d, max_rep);
                int type = dev_type(c, order[d - 1]);
                double mem = dev_memory(c, order[d - 1]);
                double intra = cl->servers[cl->devices[order[d - 1]].server].intra_bw_bytes_per_s;
                for (int n = s; n <= L; n++) {
                    double best = HUGE_VAL;
                    int bk = -1, br = 1;
                    for (int r = 1; r <= run; r++) {
                        int s0 = d - r;
                        if (s0 < s - 1)
                            break;
                        if (!plan_replicas_runnable(cfg->sched, cfg->n_micro, r))
                            continue;
                        double bw_in = s0 > 0 ? plan_cluster_bw(cl, order[s0 - 1], order[s0]) : 0;
                        const double *prev_row = f + (size_t)(s - 1) * plane + (size_t)s0 * W;
                        for (int k = n - 1; k >= s - 1; k--) {
                            double work = plan_cost_work(c, type, k, n - 1);
                            double ts = work;
                            if (r > 1) {
                                double p = plan_cost_params(c, k, n - 1);
                                ts = work / r + (allreduce_mode == 1 ? allreduce_s(p, r, intra)
                                                 : allreduce_mode == 0
                                                     ? allreduce_share_s(c, p, r, intra)
                                                     : 0);
                            }
                            if (ts >= best)
                                break;
                            /* the ms - s stages after this one: each one device (max_rep 1)
                             * or up to max_rep copies, within the D - d devices left */
                            int later = (ms - s) * max_rep < D - d ? (ms - s) * max_rep : D - d;
                            if (dp_memory(cfg, k, n - 1, ms, r + later, r) > mem) {
                                cut |= pass == 0;
                                *mem_cut = 1;
                                break;
                            }
                            double prev = prev_row[k];
                            if (prev >= best)
                                continue;
                            double v = prev > ts ? prev : ts;
                            if (s0 > 0) {
                                double link_s = 2.0 * c->act_bytes[k - 1] / bw_in;
                                v = link_s > v ? link_s : v;
                            }
                            if (v < best) {
                                best = v;
                                bk = k;
                                br = r;
                            }
                        }
                    }
                    if (bk >= 0) {
                        size_t at = (size_t)s * plane + (size_t)d * W + (size_t)n;
                        f[at] = best;
                        kk[at] = bk;
                        rr[at] = br;
                    }
                }
            }
        for (int s = pass == 0 ? 1 : ms; s <= ms; s++)
            for (int d = s; d <= D; d++) {
                if (!isfinite(f[(size_t)s * plane + (size_t)d * W + (size_t)L]))
                    continue;
                /* walk back from (s, d, L) */
                int firsts[HET_STAGED_MAX_DEVICES], dstart[HET_STAGED_MAX_DEVICES],
                    reps[HET_STAGED_MAX_DEVICES];
                int n = L, dd = d;
                for (int x = s; x >= 1; x--) {
                    size_t at = (size_t)x * plane + (size_t)dd * W + (size_t)n;
                    firsts[x - 1] = kk[at];
                    reps[x - 1] = rr[at];
                    dstart[x - 1] = dd - rr[at];
                    n = kk[at];
                    dd -= rr[at];
                }
                plan_partition_clear(cand);
                for (int x = 0; x < s; x++)
                    plan_partition_push(cand, firsts[x], x + 1 < s ? firsts[x + 1] - 1 : L - 1,
                                        order + dstart[x], reps[x]);
                double it;
                SC_CHECK_GOTO(simulate_candidate(cfg, cand, st, &it, err), done);
                if (it < *best_iter * (1 - 1e-12)) {
                    *best_iter = it;
                    plan_partition_copy(out, cand);
                    out->objective_s = plan_partition_bottleneck(c, cand);
                }
            }
    }
done:
    plan_partition_destroy(&cand);
    free(f), free(kk), free(rr), free(st);
    return rc;
}

/* The DP table holds, for every device count d, the best partition on the order's first d
 * devices; more stages lower the bottleneck but lengthen the fill and drain, so the final
 * choice among them is the simulator's. */
static sc_status pick_by_simulation(const plan_search_cfg *cfg, dp_tables *t, const int *order,
                                    int max_rep, plan_partition *out, double *best_iter,
                                    int *mem_cut, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    int L = c->n_blocks, W = L + 1;
    sc_status rc = SC_OK;
    plan_partition *cand = NULL;
    int D = t->D, cut = 0;
    double *row = malloc((size_t)(D + 1) * sizeof *row);
    double *bound = malloc((size_t)(D + 1) * sizeof *bound);
    plan_sim_stage *st = calloc((size_t)D, sizeof *st);
    if (row == NULL || bound == NULL || st == NULL || prefix_bounds(c, order, D, bound) != 0) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "hetero: out of memory");
        goto done;
    }
    SC_CHECK_GOTO(plan_partition_new(&cand, L, D, err), done);
    double best = HUGE_VAL;
    dp_order(cfg, t, order, D, max_rep, HUGE_VAL, NULL, &cut);
    *mem_cut |= cut;
    for (int d = 0; d <= D; d++)
        row[d] = t->f[(size_t)d * W + L];
    /* pass 0 simulates the table's plans; its memory bound counts every device of the order as
     * a stage, so where it ruled anything out, pass 1 solves the row of d devices again with d
     * as the count, looking only for bottlenecks below the row's (the row's own plan, if any,
     * fits under either count) and skipping rows where even the best compute bound, over the
     * micro-batches, reaches the best iteration so far */
    for (int pass = 0; pass < (cut ? 2 : 1); pass++)
        for (int d = 1; d <= D; d++) {
            if (pass == 0 && !isfinite(row[d]))
                continue;
            if (pass == 1) {
                if (bound[d] * (cfg->n_micro > 0 ? cfg->n_micro : 1) >= best)
                    continue;
                /* its best may lie on a shorter row: only row d itself is this pass's */
                dp_order(cfg, t, order, d, max_rep, row[d], NULL, NULL);
                if (!(t->f[(size_t)d * W + L] < row[d]))
                    continue;
            }
            if (dp_extract(t, order, d, L, cand) != 0) {
                rc = SC_ERRF(err, SC_ERR_NOMEM, "hetero: out of memory");
                goto done;
            }
            double it;
            SC_CHECK_GOTO(simulate_candidate(cfg, cand, st, &it, err), done);
            if (it < best * (1 - 1e-12)) {
                best = it;
                plan_partition_copy(out, cand);
                out->objective_s = plan_partition_bottleneck(c, cand);
            }
        }
    *best_iter = best;
done:
    plan_partition_destroy(&cand);
    free(st), free(row), free(bound);
    return rc;
}

/* Hill-climbs the chosen partition's cuts by one or two blocks while the simulated iteration
 * improves and memory still fits: the DPs see one bottleneck, the simulator also sees the
 * round trip of activations and gradients through the cuts. */
static sc_status refine_by_simulation(const plan_search_cfg *cfg, plan_partition *out,
                                      double *best_iter, int *mem_cut, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    const plan_cluster *cl = c->cluster;
    int S = out->n_stages;
    sc_status rc = SC_OK;
    plan_partition *cand = NULL;
    plan_sim_stage *st = calloc((size_t)S, sizeof *st);
    SC_ALLOC_CHECK(st, err);
    SC_CHECK_GOTO(plan_partition_new(&cand, out->cap_stages, out->cap_devices, err), done);
    static const int deltas[] = {-2, -1, 1, 2};
    for (int round = 0, improved = 1; improved && round < 20; round++) {
        improved = 0;
        for (int cut = 0; cut + 1 < S; cut++)
            for (int i = 0; i < 4; i++) {
                plan_partition_copy(cand, out);
                cand->last[cut] += deltas[i];
                cand->first[cut + 1] += deltas[i];
                if (cand->last[cut] < cand->first[cut] ||
                    cand->first[cut + 1] > cand->last[cut + 1])
                    continue;
                int fits = 1;
                for (int x = cut; x <= cut + 1 && fits; x++) {
                    double need = plan_partition_stage_memory(cfg, cand, x);
                    for (int r = 0; r < cand->n_dev[x]; r++) {
                        int d = cand->devs[cand->dev_start[x] + r];
                        fits &= need <= cl->types[cl->devices[d].type].memory_bytes;
                    }
                }
                if (!fits) {
                    *mem_cut = 1;
                    continue;
                }
                double it;
                SC_CHECK_GOTO(simulate_candidate(cfg, cand, st, &it, err), done);
                if (it < *best_iter * (1 - 1e-9)) {
                    *best_iter = it;
                    plan_partition_copy(out, cand);
                    out->objective_s = plan_partition_bottleneck(c, out);
                    improved = 1;
                }
            }
    }
done:
    plan_partition_destroy(&cand);
    free(st);
    return rc;
}

/* hetero for one stash rule (cfg->sliced as given). *score: the simulated iteration of the
 * plan when cfg->select_by_sim, else its bottleneck; *mem_cut is set when memory ruled out
 * anything. */
static sc_status hetero_search(const plan_search_cfg *cfg, plan_partition *out, double *score,
                               int *mem_cut, sc_err *err)
{
    const plan_cost *c = cfg->cost;
    const plan_cluster *cl = c->cluster;
    int D = cl->n_devices, L = c->n_blocks, T = cl->n_types;
    het_search h = {.cfg = cfg, .D = D, .best = HUGE_VAL, .max_evals = 400};
    sc_status rc = SC_OK;
    int *order = calloc((size_t)D, sizeof(int)), *tmp = calloc((size_t)D, sizeof(int));
    int *srv = malloc((size_t)cl->n_servers * sizeof(int));
    int *perm = malloc((size_t)(T > 0 ? T : 1) * sizeof(int));
    h.best_order = malloc((size_t)D * sizeof(int));
    if (!order || !tmp || !srv || !perm || !h.best_order || dp_alloc(&h.t, D, L) != 0) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "hetero: out of memory");
        goto done;
    }
    if (cl->n_links > 0)
        SC_CHECK_GOTO(plan_partition_new(&h.scratch, L, D, err), done);
    /* replication pays only when single blocks are large next to a fair share of the work */
    double lb = plan_lower_bound(c), biggest = 0;
    for (int d = 0; d < D; d++)
        for (int l = 0; l < L; l++) {
            double w = plan_cost_work(c, dev_type(c, d), l, l);
            biggest = w > biggest ? w : biggest;
        }
    h.max_rep = (L <= 256 && D <= 32) || biggest > 0.5 * lb ? DP_MAX_COPIES : 1;

    /* 1. the cluster's own order */
    for (int d = 0; d < D; d++)
        order[d] = d;
    het_try(&h, order);
    /* 2. small clusters: every order */
    if (D <= 7) {
        while (next_perm(order, D))
            het_try(&h, order);
        h.max_evals = h.evals; /* done: nothing left to search */
    }
    /* 3. servers kept together, fastest servers first and last, devices fastest first */
    for (int dir = 0; dir < 2; dir++) {
        for (int s = 0; s < cl->n_servers; s++)
            srv[s] = s;
        for (int a = 0; a < cl->n_servers; a++)
            for (int b = a + 1; b < cl->n_servers; b++) {
                double sa = 0, sb = 0;
                for (int i = 0; i < cl->servers[srv[a]].n_devices; i++)
                    sa += dev_speed(c, cl->servers[srv[a]].first_device + i);
                for (int i = 0; i < cl->servers[srv[b]].n_devices; i++)
                    sb += dev_speed(c, cl->servers[srv[b]].first_device + i);
                if (dir == 0 ? sb > sa : sb < sa) {
                    int t = srv[a];
                    srv[a] = srv[b];
                    srv[b] = t;
                }
            }
        int n = 0;
        for (int s = 0; s < cl->n_servers; s++) {
            const plan_server *sv = &cl->servers[srv[s]];
            for (int i = 0; i < sv->n_devices; i++)
                order[n + i] = sv->first_device + i;
            sort_by_speed_desc(c, order + n, sv->n_devices);
            n += sv->n_devices;
        }
        het_try(&h, order);
    }
    /* 4. orders of device types (as Metis enumerates them), devices of a type by server */
    if (T > 1 && T <= 5) {
        for (int i = 0; i < T; i++)
            perm[i] = i;
        do {
            int n = 0;
            for (int i = 0; i < T; i++)
                for (int d = 0; d < D; d++)
                    if (cl->devices[d].type == perm[i])
                        order[n++] = d;
            het_try(&h, order);
        } while (next_perm(perm, T));
    }
    /* 5. local search from the best order: swap runs of one server (whole devices when few) */
    for (int round = 0; round < 4 && h.evals < h.max_evals && isfinite(h.best); round++) {
        double before = h.best;
        memcpy(order, h.best_order, (size_t)D * sizeof(int));
        /* segments: maximal runs of one server in the order (single devices when D <= 16) */
        int nseg = 0;
        int *seg = tmp; /* segment start positions */
        for (int i = 0; i < D; i++)
            if (D <= 16 || i == 0 ||
                cl->devices[order[i]].server != cl->devices[order[i - 1]].server)
                seg[nseg++] = i;
        for (int a = 0; a < nseg && h.evals < h.max_evals; a++)
            for (int b = a + 1; b < nseg && h.evals < h.max_evals; b++) {
                /* swapping two runs of alike devices (same types, same server) changes
                 * nothing: skip it */
                int sa = seg[a], ea = a + 1 < nseg ? seg[a + 1] : D;
                int sb = seg[b], eb = b + 1 < nseg ? seg[b + 1] : D;
                int alike = ea - sa == eb - sb;
                for (int i = 0; alike && i < ea - sa; i++)
                    alike = cl->devices[order[sa + i]].type == cl->devices[order[sb + i]].type &&
                            cl->devices[order[sa + i]].server == cl->devices[order[sb + i]].server;
                if (alike)
                    continue;
                int *cand = malloc((size_t)D * sizeof(int));
                if (cand == NULL) {
                    rc = SC_ERRF(err, SC_ERR_NOMEM, "hetero: out of memory");
                    goto done;
                }
                int n = 0;
                for (int s = 0; s < nseg; s++) {
                    int from = s == a ? b : s == b ? a : s;
                    int st = seg[from], en = from + 1 < nseg ? seg[from + 1] : D;
                    for (int i = st; i < en; i++)
                        cand[n++] = order[i];
                }
                het_try(&h, cand);
                free(cand);
            }
        if (!(h.best < before))
            break;
    }
    if (!isfinite(h.best)) {
        rc = no_fit(cfg, "hetero", out, err);
        goto done;
    }
    double v = dp_order_fit(cfg, &h.t, h.best_order, D, h.max_rep, HUGE_VAL, out, &h.mem_cut);
    out->objective_s = plan_partition_bottleneck(c, out);
    *score = out->objective_s;
    if (cfg->select_by_sim && isfinite(v)) {
        double best_iter = HUGE_VAL;
        int *cut = &h.mem_cut;
        rc = pick_by_simulation(cfg, &h.t, h.best_order, h.max_rep, out, &best_iter, cut, err);
        if (rc == SC_OK && D <= HET_STAGED_MAX_DEVICES && L <= HET_STAGED_MAX_BLOCKS)
            for (int mode = 0; mode < 3 && rc == SC_OK; mode++)
                rc = pick_by_stages(cfg, h.best_order, D, h.max_rep, mode, out, &best_iter, cut,
                                    err);
        if (rc == SC_OK && D <= HET_STAGED_MAX_DEVICES && L <= HET_STAGED_MAX_BLOCKS)
            rc = refine_by_simulation(cfg, out, &best_iter, cut, err);
        *score = best_iter;
    }
done:
    *mem_cut |= h.mem_cut;
    plan_partition_destroy(&h.scratch);
    dp_free(&h.t);
    free(order), free(tmp), free(srv), free(perm), free(h.best_order);
    return rc;
}

/* A plan's simulated iteration under the sliced schedule with the fastest count of halved
 * warm-up micro-batches, 0..tries, under which it fits memory (HUGE_VAL when none), as plan_run
 * will run it: plans found under different counts are compared by it. */
static sc_status sliced_score(const plan_search_cfg *cfg, const plan_partition *p, int tries,
                              double *score, sc_err *err)
{
    plan_sim_stage *st = calloc((size_t)p->n_stages, sizeof *st);
    SC_ALLOC_CHECK(st, err);
    sc_status rc = SC_OK;
    plan_search_cfg sc = *cfg;
    *score = HUGE_VAL;
    for (sc.sliced = 0; sc.sliced <= tries && rc == SC_OK; sc.sliced++) {
        double it;
        if (plan_partition_check_memory(&sc, p, NULL) != SC_OK)
            continue;
        rc = simulate_candidate(&sc, p, st, &it, err);
        if (rc == SC_OK && it < *score)
            *score = it;
    }
    free(st);
    return rc;
}

/* hetero_search again under every count of halved warm-up micro-batches up to `tries`
 * (plan_partition_hetero): the best plan that fits under one of them replaces *out when its
 * score is lower, or when *out has none (*found 0). */
static sc_status hetero_sliced(const plan_search_cfg *cfg, int tries, plan_partition *out,
                               double *score, int *found, sc_err *err)
{
    plan_partition *cand = NULL;
    SC_CHECK(plan_partition_new(&cand, out->cap_stages, out->cap_devices, err));
    sc_status rc = SC_OK;
    plan_search_cfg sc = *cfg;
    for (sc.sliced = 1; sc.sliced <= tries && rc == SC_OK; sc.sliced++) {
        double s = HUGE_VAL;
        int ignored = 0;
        sc_err e;
        sc_err_clear(&e);
        sc_status r = hetero_search(&sc, cand, &s, &ignored, &e);
        if (r == SC_OK && cfg->select_by_sim)
            r = sliced_score(cfg, cand, tries, &s, &e);
        if (r != SC_OK && !cand->no_fit) { /* not memory: out of memory, say */
            rc = r;
            if (err != NULL && err->code == SC_OK)
                *err = e;
        } else if (r == SC_OK && (!*found || s < *score)) {
            plan_partition_copy(out, cand);
            *score = s;
            *found = 1;
        }
    }
    plan_partition_destroy(&cand);
    return rc;
}

sc_status plan_partition_hetero(const plan_search_cfg *cfg, plan_partition *out, sc_err *err)
{
    double score = HUGE_VAL;
    int cut = 0;
    sc_err first;
    sc_err_clear(&first);
    sc_status rc = hetero_search(cfg, out, &score, &cut, &first);
    int tries = sliced_tries(cfg, cfg->cost->cluster->n_devices), found = rc == SC_OK;
    /* sliced with fewer micro-batches than devices, and memory ruled something out without
     * halves: their stash counts differ (plan_stash_count_sliced), so search again under each
     * count of them, keeping the best plan that fits under one, as minmax does */
    if (cut && tries > 0 && (found || out->no_fit)) {
        if (found && cfg->select_by_sim)
            SC_CHECK(sliced_score(cfg, out, tries, &score, err));
        sc_status src = hetero_sliced(cfg, tries, out, &score, &found, err);
        rc = src != SC_OK ? src : found ? SC_OK : rc;
    }
    if (rc != SC_OK && !found && err != NULL && err->code == SC_OK)
        *err = first;
    return rc;
}
