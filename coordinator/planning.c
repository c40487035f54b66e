/*
 * Cluster model and plan for a job (see planning.h). Each worker drives one device and is
 * planned with its own measured speed: a device type is only a cache of workers whose devices
 * have the same name and whose profiles agree (total time within SPEED_TOLERANCE). A type
 * carries the measured per-block times (`block_times`) of the first worker that made it and a
 * relative speed = reference total time / its total time, the reference being workers[0]'s
 * device. Two CPU workers with different CPU shares, or two GPUs of one model with different
 * clocks or power caps, are different types. A server's NIC bandwidth is the least of its
 * workers' measured links to the coordinator where any was measured (link_probe.h), else what
 * the hardware report says.
 */
#include "coordinator/planning.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/planner/plan.h"
#include "kernels/precision.h"

#define DEFAULT_INTRA_BW 10e9 /* bytes/s between devices of one server when unreported */
#define DEFAULT_NIC_BW 1.25e9 /* bytes/s: 10 Gb Ethernet */
/* Two workers share a device type when their profiles' total times differ by at most this
 * fraction of the smaller: repeated profiles of one device on a quiet host agree within a few
 * per cent, while a CPU share of 0.45 against 0.25 (or a GPU's power cap) differs by tens. */
#define SPEED_TOLERANCE 0.05

/* Sum of forward + backward times of a profile, and its blocks as a block_times object. */
static sc_status profile_times(const char *profile_json, const char *who, double *total,
                               json_t **block_times, sc_err *err)
{
    json_error_t jerr;
    json_t *doc = json_loads(profile_json, 0, &jerr);
    json_t *blocks = doc ? json_object_get(doc, "blocks") : NULL;
    if (!json_is_array(blocks) || json_array_size(blocks) == 0) {
        json_decref(doc);
        return SC_ERRF(err, SC_ERR_PARSE, "the profile from %s has no blocks", who);
    }
    *total = 0;
    *block_times = json_object();
    size_t i;
    json_t *b;
    json_array_foreach(blocks, i, b)
    {
        double f = json_number_value(json_object_get(b, "forward_s"));
        double bw = json_number_value(json_object_get(b, "backward_s"));
        *total += f + bw;
        const char *name = json_string_value(json_object_get(b, "name"));
        if (name)
            json_object_set_new(*block_times, name,
                                json_pack("{s:f, s:f}", "forward_s", f, "backward_s", bw));
    }
    json_decref(doc);
    if (!(*total > 0)) {
        json_decref(*block_times);
        return SC_ERRF(err, SC_ERR_PARSE, "the profile from %s has no positive times", who);
    }
    return SC_OK;
}

/* Workers that share a server's processors compete for them: CPU workers for the host's cores,
 * CUDA workers for fewer distinct GPUs than workers. Such a server gets "compute_slots" (the
 * planner's simulator then shares them among the stages that compute at once); a server whose
 * workers each have a processor of their own gets none. Servers follow the workers' order, one
 * per run of equal hostnames, as coord_cluster_json builds them. */
static void set_compute_slots(const coord_plan_worker *workers, size_t n, json_t *servers)
{
    size_t first = 0;
    for (size_t v = 0; v < json_array_size(servers) && first < n; v++) {
        const char *host = workers[first].hw->hostname;
        size_t end = first;
        int cpu = 0, cuda = 0, gpus = 0;
        while (end < n && strcmp(workers[end].hw->hostname, host) == 0) {
            const Stagecraft__Device *d = workers[end].hw->devices[0];
            bool is_cuda = d->kind != NULL && strcmp(d->kind, "cuda") == 0;
            cpu += !is_cuda;
            cuda += is_cuda;
            /* a GPU not seen on an earlier worker of this server (by bus id, else index) */
            bool seen = false;
            for (size_t k = first; is_cuda && k < end && !seen; k++) {
                const Stagecraft__Device *e = workers[k].hw->devices[0];
                bool bus = d->pci_bus_id != NULL && d->pci_bus_id[0] != '\0' &&
                           e->pci_bus_id != NULL && e->pci_bus_id[0] != '\0';
                seen = e->kind != NULL && strcmp(e->kind, "cuda") == 0 &&
                       (bus ? strcmp(d->pci_bus_id, e->pci_bus_id) == 0 : d->index == e->index);
            }
            gpus += is_cuda && !seen;
            end++;
        }
        int workers_here = (int)(end - first), slots = 0;
        uint32_t cores = workers[first].hw->cpu_cores;
        if (cpu == workers_here && cores > 0 && (uint32_t)workers_here > cores)
            slots = (int)cores;
        else if (cuda == workers_here && gpus < workers_here)
            slots = gpus;
        if (slots > 0)
            json_object_set_new(json_array_get(servers, v), "compute_slots", json_integer(slots));
        first = end;
    }
}

/* The device type of a worker whose device is named `device` and whose profile totals `total`
 * seconds: an existing type of that device name whose speed agrees within SPEED_TOLERANCE, else
 * a new one, named after the device for the first of its name and `device@worker` after. */
static void type_for(json_t *types, const char *device, const char *worker, double total,
                     double ref_total, double quota, double period_s, char *out, size_t cap)
{
    size_t len = strlen(device);
    const char *key;
    json_t *t;
    json_object_foreach(types, key, t)
    {
        if (strncmp(key, device, len) != 0 || (key[len] != '\0' && key[len] != '@'))
            continue;
        /* a CFS quota of another share or period runs the same work at another pace */
        json_t *tq = json_object_get(t, "cpu_quota");
        if (json_number_value(json_object_get(tq, "fraction")) != quota ||
            json_number_value(json_object_get(tq, "period_s")) != period_s)
            continue;
        double theirs = ref_total / json_number_value(json_object_get(t, "relative_speed"));
        double lo = theirs < total ? theirs : total, hi = theirs < total ? total : theirs;
        if (hi - lo <= SPEED_TOLERANCE * lo) {
            sc_strlcpy(out, key, cap);
            return;
        }
    }
    if (json_object_get(types, device) == NULL)
        sc_strlcpy(out, device, cap);
    else
        snprintf(out, cap, "%s@%s", device, worker);
}

/* A measured link of one of the server's workers: the server's NIC figure becomes the least
 * measurement of its workers, replacing a reported or assumed one (the probe saw the path the
 * transfers take; the report is a NIC's nominal speed, unknown on many virtual links). */
static void take_measured_link(json_t *srv, double bytes_per_s)
{
    if (!(bytes_per_s > 0))
        return;
    const char *source = json_string_value(json_object_get(srv, "nic_bandwidth_source"));
    double now = json_number_value(json_object_get(srv, "nic_bandwidth_bytes_per_s"));
    if (source != NULL && strcmp(source, "measured") == 0 && now <= bytes_per_s)
        return;
    json_object_set_new(srv, "nic_bandwidth_bytes_per_s", json_real(bytes_per_s));
    json_object_set_new(srv, "nic_bandwidth_source", json_string("measured"));
}

/* A worker's measured all-reduce speed: its server's copies all-reduce at the least of them. */
static void take_measured_reduce(json_t *srv, double bytes_per_s)
{
    const char *key = "reduce_bandwidth_bytes_per_s";
    double now = json_number_value(json_object_get(srv, key));
    if (bytes_per_s > 0 && (now <= 0 || bytes_per_s < now))
        json_object_set_new(srv, key, json_real(bytes_per_s));
}

/* A CPU worker's transfers cost CPU on both ends (TCP, ZeroMQ, copies), so under a quota its
 * CPU bounds them: its measured bytes per CPU second times the cores its quota gives (at most
 * one: a transfer runs on a thread or two) caps its server's bandwidths, within the server (the
 * copies' all-reduce, neighbouring stages) and across (the NIC). Unmeasured (older workers, GPUs):
 * no cap. */
static void cap_by_cpu_transport(json_t *srv, const Stagecraft__Device *d)
{
    if (d->kind == NULL || strcmp(d->kind, "cpu") != 0 || !(d->transport_bytes_per_cpu_s > 0))
        return;
    double cores = d->cpu_quota_fraction > 0 && d->cpu_threads > 0
                       ? d->cpu_quota_fraction * (double)d->cpu_threads
                       : 1.0;
    double rate = d->transport_bytes_per_cpu_s * (cores < 1.0 ? cores : 1.0);
    static const char *const keys[] = {"intra_bandwidth_bytes_per_s", "nic_bandwidth_bytes_per_s"};
    for (int k = 0; k < 2; k++)
        if (rate < json_number_value(json_object_get(srv, keys[k])))
            json_object_set_new(srv, keys[k], json_real(rate));
}

sc_status coord_cluster_json(const coord_plan_worker *workers, size_t n, char **out, sc_err *err)
{
    json_t *types = json_object(), *servers = json_array();
    json_t *doc = json_pack("{s:s, s:i, s:o, s:o}", "format", "stagecraft-cluster", "version", 1,
                            "device_types", types, "servers", servers);
    sc_status rc = SC_OK;
    double ref_total = 0;
    for (size_t i = 0; i < n && rc == SC_OK; i++) {
        const Stagecraft__Device *d = workers[i].hw->devices[0];
        double total = 0;
        json_t *bt = NULL;
        rc = profile_times(workers[i].profile_json, workers[i].id, &total, &bt, err);
        if (rc != SC_OK)
            break;
        if (i == 0)
            ref_total = total;
        char type[160];
        double quota =
            d->cpu_quota_fraction > 0 && d->cpu_quota_fraction < 1 && d->cpu_quota_period_s > 0
                ? d->cpu_quota_fraction
                : 0;
        double period_s = quota > 0 ? d->cpu_quota_period_s : 0;
        type_for(types, d->name, workers[i].id, total, ref_total, quota, period_s, type,
                 sizeof type);
        if (json_object_get(types, type) == NULL) {
            json_t *t = json_pack("{s:f, s:f, s:o}", "relative_speed", ref_total / total,
                                  "memory_bytes", (double)d->memory_bytes, "block_times", bt);
            if (quota > 0)
                json_object_set_new(
                    t, "cpu_quota",
                    json_pack("{s:f, s:f}", "fraction", quota, "period_s", period_s));
            json_object_set_new(types, type, t);
        } else
            json_decref(bt);

        /* servers in order of first appearance; workers arrive grouped by host */
        const char *host = workers[i].hw->hostname;
        json_t *srv =
            json_array_size(servers) ? json_array_get(servers, json_array_size(servers) - 1) : NULL;
        if (srv == NULL || strcmp(json_string_value(json_object_get(srv, "name")), host) != 0) {
            double intra = workers[i].hw->intra_bandwidth_bytes_per_s;
            double nic = workers[i].hw->nic_bandwidth_bytes_per_s;
            srv = json_pack("{s:s, s:[], s:f, s:f, s:s}", "name", host, "devices",
                            "intra_bandwidth_bytes_per_s", intra > 0 ? intra : DEFAULT_INTRA_BW,
                            "nic_bandwidth_bytes_per_s", nic > 0 ? nic : DEFAULT_NIC_BW,
                            "nic_bandwidth_source", nic > 0 ? "nic" : "assumed");
            json_array_append_new(servers, srv);
        }
        json_array_append_new(json_object_get(srv, "devices"), json_string(type));
        take_measured_link(srv, workers[i].link_bytes_per_s);
        take_measured_reduce(srv, workers[i].reduce_bytes_per_s);
    }
    /* after every worker's measured link: a later one may raise what an earlier one set */
    for (size_t i = 0; i < n && rc == SC_OK; i++)
        for (size_t v = 0; v < json_array_size(servers); v++) {
            json_t *srv = json_array_get(servers, v);
            if (strcmp(json_string_value(json_object_get(srv, "name")), workers[i].hw->hostname) ==
                0)
                cap_by_cpu_transport(srv, workers[i].hw->devices[0]);
        }
    if (rc == SC_OK)
        set_compute_slots(workers, n, servers);
    if (rc == SC_OK) {
        *out = json_dumps(doc, JSON_COMPACT);
        if (*out == NULL)
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the cluster");
    }
    json_decref(doc);
    return rc;
}

/* Whether the runtime can run the plan's replicated stages: the synchronous schedules (gpipe,
 * 1f1b, sliced, zb1) when every replica has at least one micro-batch, asynchronous pipedream
 * (1F1B-RR) when the micro-batch count is a multiple of every stage's copies (so rounds of
 * copies never straddle steps); not unequal (sizes per stage). A model whose tied embedding and
 * head lie in different stages runs with copies too (worker/runtime/runner_tie.c relays the
 * copies' reduced gradients between the end stages); its job never runs pipedream (jobspec.c). */
static int most_replicas(json_t *plan);
static int replicas_lcm(json_t *plan);

static bool is_pipedream(json_t *plan)
{
    const char *sched = json_string_value(json_object_get(plan, "schedule"));
    return sched != NULL && strcmp(sched, "pipedream") == 0;
}

static bool runtime_runs(json_t *plan)
{
    const char *sched = json_string_value(json_object_get(plan, "schedule"));
    int most = most_replicas(plan);
    if (most == 1)
        return true;
    json_int_t m =
        json_integer_value(json_object_get(json_object_get(plan, "microbatches"), "count"));
    if (is_pipedream(plan))
        return m >= 1 && m % replicas_lcm(plan) == 0;
    return sched &&
           (strcmp(sched, "gpipe") == 0 || strcmp(sched, "1f1b") == 0 ||
            strcmp(sched, "sliced") == 0 || strcmp(sched, "zb1") == 0) &&
           m >= (json_int_t)most;
}

static sc_status run_strategy(const coord_jobspec *spec, int strategy, int microbatches,
                              plan_profile *profile, plan_cluster *cluster, json_t **plan_out,
                              sc_err *err);

/* The most replicas any stage of the plan has. */
static int most_replicas(json_t *plan)
{
    size_t i, most = 1;
    json_t *st;
    json_array_foreach(json_object_get(plan, "stages"), i, st)
    {
        size_t r = json_array_size(json_object_get(st, "devices"));
        most = r > most ? r : most;
    }
    return (int)most;
}

/* The least common multiple of the stages' copy counts (pipedream's step of valid micro-batch
 * counts); past 2^20 it stops growing, beyond any batch. */
static int replicas_lcm(json_t *plan)
{
    size_t i;
    json_t *st;
    long long lcm = 1;
    json_array_foreach(json_object_get(plan, "stages"), i, st)
    {
        long long r = (long long)json_array_size(json_object_get(st, "devices"));
        long long a = lcm, b = r > 0 ? r : 1;
        while (b != 0) {
            long long t = a % b;
            a = b;
            b = t;
        }
        if (lcm <= 1 << 20)
            lcm = lcm / a * (r > 0 ? r : 1);
    }
    return lcm > 1 << 20 ? 1 << 21 : (int)lcm;
}

/* Runs the job's strategy; when its plan replicates stages in a way the runtime cannot run
 * (the unequal schedule, fewer micro-batches than replicas, pipedream with a count that
 * is not a multiple of every stage's copies), takes the best unreplicated plan instead
 * (exhaustive where the instance is small enough, else minmax) and says so in the plan's note. */
static sc_status run_planner(const coord_jobspec *spec, plan_profile *profile,
                             plan_cluster *cluster, json_t **plan_out, sc_err *err)
{
    int strategy = plan_strategy_parse(spec->strategy);
    if (strategy < 0)
        return SC_ERRF(err, SC_ERR_INVALID, "strategy \"%s\" is not one the planner knows",
                       spec->strategy);
    SC_CHECK(
        run_strategy(spec, strategy, (int)spec->microbatches, profile, cluster, plan_out, err));
    if (runtime_runs(*plan_out))
        return SC_OK;
    json_t *alt = NULL;
    sc_err sub;
    sc_err_clear(&sub);
    /* Too few micro-batches for the replicas: the same strategy with the fewest micro-batches
     * that give every replica one (and divide the batch; for pipedream, a multiple of every
     * stage's copies), when the job left the count open. */
    int most = most_replicas(*plan_out);
    int unit = is_pipedream(*plan_out) ? replicas_lcm(*plan_out) : 1;
    for (int m = most; spec->microbatches == 0 && m <= (int)spec->batch_size; m++) {
        if (spec->batch_size % (uint32_t)m != 0 || m % unit != 0)
            continue;
        if (run_strategy(spec, strategy, m, profile, cluster, &alt, &sub) == SC_OK &&
            runtime_runs(alt)) {
            char note[512];
            sc_strfmt(note, sizeof note,
                      "%d micro-batches so that each of up to %d replicas of a stage gets one", m,
                      most_replicas(alt));
            json_object_set_new(alt, "note", json_string(note));
            json_decref(*plan_out);
            *plan_out = alt;
            return SC_OK;
        }
        json_decref(alt);
        alt = NULL;
        break;
    }
    sc_err_clear(&sub);
    int fallback = PLAN_STRAT_EXHAUSTIVE;
    if (run_strategy(spec, fallback, (int)spec->microbatches, profile, cluster, &alt, &sub) !=
        SC_OK) {
        fallback = PLAN_STRAT_MINMAX;
        sc_err_clear(&sub);
        if (run_strategy(spec, fallback, (int)spec->microbatches, profile, cluster, &alt, &sub) !=
            SC_OK)
            return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                           "the %s plan replicates stages in a way the runtime cannot run, and "
                           "no unreplicated plan was found: %s",
                           spec->strategy, sub.msg);
    }
    char note[512];
    sc_strfmt(note, sizeof note,
              "%s's plan (predicted %.4g s per iteration) is one the runtime cannot run (it "
              "replicates stages only with gpipe, 1f1b, sliced or zb1 and at least as many "
              "micro-batches as replicas, or pipedream and micro-batches a multiple of every "
              "stage's copies), so this is %s's plan",
              spec->strategy, json_number_value(json_object_get(*plan_out, "iteration_time_s")),
              plan_strategy_name((plan_strategy)fallback));
    json_object_set_new(alt, "note", json_string(note));
    json_decref(*plan_out);
    *plan_out = alt;
    return SC_OK;
}

static sc_status run_strategy(const coord_jobspec *spec, int strategy, int microbatches,
                              plan_profile *profile, plan_cluster *cluster, json_t **plan_out,
                              sc_err *err)
{
    /* auto: the planner's pick among the synchronous schedules the workers run (gpipe, 1f1b,
     * sliced, zb1), by predicted iteration time among the plans that fit memory (plan_run);
     * unequal plans as 1f1b here (umpipe's own sizes decide its order) */
    const char *sched = strcmp(spec->schedule, "unequal") == 0 ? "1f1b" : spec->schedule;
    plan_request req;
    memset(&req, 0, sizeof req);
    req.profile = profile;
    req.cluster = cluster;
    req.batch = (int)spec->batch_size;
    req.microbatches = microbatches;
    req.max_stages = (int)spec->max_stages;
    req.schedule = (plan_sched_kind)plan_sched_parse(sched);
    req.runtime_zb1 = 1; /* the workers run zb1 (worker/runtime/schedule.h) */
    req.zb1_peak_cap = spec->zb1_peak_cap;
    plan_result res;
    memset(&res, 0, sizeof res);
    sc_status rc = plan_run(&req, (plan_strategy)strategy, &res, err);
    if (rc != SC_OK) {
        plan_result_free(&res);
        return rc;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (mem == NULL) {
        plan_result_free(&res);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the plan");
    }
    rc = plan_write_json(mem, &req, &res, 1, err);
    fclose(mem);
    plan_result_free(&res);
    json_t *doc = rc == SC_OK ? json_loadb(buf, len, 0, NULL) : NULL;
    free(buf);
    if (rc != SC_OK)
        return rc;
    json_t *plan = json_array_get(json_object_get(doc, "plans"), 0);
    if (!json_is_object(plan)) {
        json_decref(doc);
        return SC_ERRF(err, SC_ERR_INTERNAL, "the planner wrote no plan");
    }
    json_t *e = json_object_get(plan, "error");
    if (json_is_string(e)) {
        rc = SC_ERRF(err, SC_ERR_INVALID, "no %s plan: %s",
                     plan_strategy_name((plan_strategy)strategy), json_string_value(e));
        json_decref(doc);
        return rc;
    }
    *plan_out = json_incref(plan);
    json_decref(doc);
    return SC_OK;
}

char *coord_profile_frozen(const char *profile_json, int frozen_blocks)
{
    json_t *root = json_loads(profile_json, 0, NULL);
    if (root == NULL)
        return NULL;
    json_t *blocks = json_object_get(root, "blocks");
    for (size_t i = 0; i < json_array_size(blocks) && (int)i < frozen_blocks; i++) {
        json_t *b = json_array_get(blocks, i);
        if (json_object_get(b, "backward_s") != NULL)
            json_object_set_new(b, "backward_s", json_real(0));
        if (json_object_get(b, "optimizer_s") != NULL)
            json_object_set_new(b, "optimizer_s", json_real(0));
        if (json_object_get(b, "wgrad_s") != NULL) /* zb1's W: part of the backward */
            json_object_set_new(b, "wgrad_s", json_real(0));
        size_t k;
        json_t *e;
        json_array_foreach(json_object_get(b, "by_microbatch_size"), k, e)
        {
            if (json_object_get(e, "backward_s") != NULL)
                json_object_set_new(e, "backward_s", json_real(0));
            if (json_object_get(e, "wgrad_s") != NULL)
                json_object_set_new(e, "wgrad_s", json_real(0));
        }
    }
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return text;
}

/* The workers with their profiles frozen (frozen_workers_free frees the copies). */
static sc_status frozen_workers(const coord_plan_worker *workers, size_t n, int frozen_blocks,
                                coord_plan_worker **out, sc_err *err)
{
    coord_plan_worker *w = calloc(n ? n : 1, sizeof *w);
    SC_ALLOC_CHECK(w, err);
    for (size_t i = 0; i < n; i++) {
        w[i] = workers[i];
        w[i].profile_json = coord_profile_frozen(workers[i].profile_json, frozen_blocks);
        if (w[i].profile_json == NULL) {
            for (size_t k = 0; k < i; k++)
                free((char *)w[k].profile_json);
            free(w);
            return SC_ERRF(err, SC_ERR_INVALID, "the profile of worker %s is not JSON",
                           workers[i].id);
        }
    }
    *out = w;
    return SC_OK;
}

static void frozen_workers_free(coord_plan_worker *w, size_t n)
{
    for (size_t i = 0; w != NULL && i < n; i++)
        free((char *)w[i].profile_json);
    free(w);
}

/* The job's precision over the devices the plan uses: "auto" is bf16 where every GPU among them
 * has bfloat16 tensor cores (compute capability 8.0 and up), fp16 where one lacks them, fp32
 * with CPUs alone (kernels/precision.h). */
static const char *plan_precision(const coord_jobspec *spec, const coord_plan_worker *workers,
                                  size_t n, json_t *plan)
{
    kn_precision p = KN_PREC_AUTO;
    if (kn_precision_parse(spec->precision, "precision", &p, NULL) != SC_OK)
        p = KN_PREC_FP32;
    int gpus = 0;
    bool all_bf16 = true;
    size_t si, k;
    json_t *st, *d;
    json_array_foreach(json_object_get(plan, "stages"), si, st)
    {
        json_array_foreach(json_object_get(st, "devices"), k, d)
        {
            json_int_t i = json_integer_value(d);
            if (i < 0 || (size_t)i >= n || workers[i].hw == NULL || workers[i].hw->n_devices == 0)
                continue;
            const Stagecraft__Device *dev = workers[i].hw->devices[0];
            if (dev->kind == NULL || strcmp(dev->kind, "cuda") != 0)
                continue;
            gpus++;
            int major = dev->compute_capability != NULL ? atoi(dev->compute_capability) : 0;
            if (major < 8)
                all_bf16 = false;
        }
    }
    return kn_precision_name(kn_precision_resolve(p, gpus, all_bf16));
}

sc_status coord_plan_job(const coord_jobspec *spec, const coord_plan_worker *given, size_t n,
                         int frozen_blocks, char **plan_json, sc_err *err)
{
    *plan_json = NULL;
    if (n == 0)
        return SC_ERRF(err, SC_ERR_INVALID, "no workers to plan on");
    coord_plan_worker *frozen = NULL; /* the profiles with the frozen blocks' backward at 0 */
    if (frozen_blocks > 0)
        SC_CHECK(frozen_workers(given, n, frozen_blocks, &frozen, err));
    const coord_plan_worker *workers = frozen != NULL ? frozen : given;
    char *cluster_text = NULL;
    plan_profile *profile = NULL;
    plan_cluster *cluster = NULL;
    json_t *plan = NULL;
    sc_status rc;
    SC_CHECK_GOTO(coord_cluster_json(workers, n, &cluster_text, err), out);
    SC_CHECK_GOTO(plan_profile_parse_json(&profile, workers[0].id, workers[0].profile_json,
                                          strlen(workers[0].profile_json), err),
                  out);
    SC_CHECK_GOTO(plan_cluster_parse(&cluster, "cluster", cluster_text, strlen(cluster_text), err),
                  out);
    SC_CHECK_GOTO(run_planner(spec, profile, cluster, &plan, err), out);
    /* Name the workers behind each stage's devices (device ids index `workers`). */
    size_t si;
    json_t *st;
    json_array_foreach(json_object_get(plan, "stages"), si, st)
    {
        json_t *ids = json_array();
        size_t k;
        json_t *d;
        json_array_foreach(json_object_get(st, "devices"), k, d)
        {
            json_int_t i = json_integer_value(d);
            json_array_append_new(ids, json_string(i >= 0 && (size_t)i < n ? workers[i].id : "?"));
        }
        json_object_set_new(st, "worker_ids", ids);
    }
    json_object_set_new(plan, "cluster", json_loads(cluster_text, 0, NULL));
    json_object_set_new(plan, "precision", json_string(plan_precision(spec, workers, n, plan)));
    if (frozen_blocks > 0)
        json_object_set_new(plan, "frozen_blocks", json_integer(frozen_blocks));
    *plan_json = json_dumps(plan, JSON_COMPACT);
    if (*plan_json == NULL)
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the plan");
out:
    json_decref(plan);
    plan_cluster_destroy(&cluster);
    plan_profile_destroy(&profile);
    free(cluster_text);
    frozen_workers_free(frozen, n);
    return rc;
}
