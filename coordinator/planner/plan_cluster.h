/*
 * plan_cluster: the cluster the planner places stages on, and the cost model over it.
 *
 * Reads the cluster JSON ("stagecraft-cluster", docs/reference/formats.md) or builds a homogeneous
 * cluster from the `--gpus N --bandwidth B [--memory M]` shorthand, and turns a profile into
 * per-device-type block times for one micro-batch size (plan_cost). Does not discover
 * hardware (topology/ does) and does not model shared links: the bandwidth between two devices
 * is the intra-server bandwidth on one server, else the smaller of the two NIC bandwidths.
 *
 * Invariant: device ids are 0-based in order of appearance (servers in order, then their
 * devices); every bandwidth, speed and memory size is > 0.
 */
#ifndef PLAN_CLUSTER_H
#define PLAN_CLUSTER_H

#include <stddef.h>

#include "common/sc_status.h"
#include "coordinator/planner/plan_profile.h"

typedef struct plan_block_time {
    char block[PLAN_NAME_MAX];
    double forward_s;
    double backward_s;
} plan_block_time;

typedef struct plan_device_type {
    char name[PLAN_NAME_MAX];
    double relative_speed; /* to the profile's reference device */
    double memory_bytes;   /* HUGE_VAL when not given */
    double quota_fraction; /* a CFS-capped CPU: the share of full speed its quota allows over
                            * quota_period_s (0 < f < 1); 0: none. Its times are sustained
                            * (profiled over many periods); plan_sim_share says what bursts
                            * after idle spells gain */
    double quota_period_s;
    int n_block_times; /* measured times per block name, for the profile's micro-batch */
    plan_block_time *block_times;
    double price_per_hour; /* a catalogue's on-demand price of one device for an hour (any
                            * currency, the same in the whole file); -1: not given */
} plan_device_type;

typedef struct plan_server {
    char name[PLAN_NAME_MAX];
    int first_device;
    int n_devices;
    double intra_bw_bytes_per_s;
    double nic_bw_bytes_per_s;
    int compute_slots; /* > 0: the server's devices share this many processors (e.g. CPU workers
                        * sharing the host's cores); 0: every device computes on its own */
    double reduce_bw_bytes_per_s; /* > 0: the speed data-parallel copies on this server were
                                   * measured to all-reduce at, which caps what the cost model
                                   * charges them (plan_group_reduce_bw); 0: not measured, the
                                   * bandwidths alone bound it */
    int zone; /* index into the cluster's zone names; 0 for every server when none names one */
} plan_server;

typedef struct plan_device {
    int type;
    int server;
} plan_device;

typedef enum {
    PLAN_LINK_NVLINK = 0,
    PLAN_LINK_PCIE_UPLINK,
    PLAN_LINK_SOCKET,
    PLAN_LINK_NIC,
    PLAN_LINK_OTHER
} plan_link_kind;

/* A physical resource that transfers share (optional `links` of the cluster JSON, written by
 * topology discovery): an NVLink between two GPUs, the uplink of a PCIe switch, a CPU socket
 * interconnect, a NIC, with the global ids of the devices behind it. */
typedef struct plan_link {
    plan_link_kind kind;
    char name[PLAN_NAME_MAX];
    double bw_bytes_per_s;
    int n_devices;
    int *devices;
} plan_link;

typedef struct plan_cluster {
    char source[256]; /* file name, or "--gpus" for the shorthand */
    int n_types;
    plan_device_type *types;
    int n_servers;
    plan_server *servers;
    int n_devices;
    plan_device *devices;
    int n_links; /* 0 when the file lists none */
    plan_link *links;
    double *bw_matrix; /* (n_devices, n_devices) when links are given, else NULL */
    /* Zones (optional: a server's "zone", the document's "zones"): 0 when no server names one.
     * Between servers of two zones the bandwidth is also capped by zone_bw and each byte
     * costs zone_price_per_gb / 1e9 (both (n_zones, n_zones), symmetric; HUGE_VAL and 0 when
     * not given). */
    int n_zones;
    char (*zone_names)[PLAN_NAME_MAX];
    double *zone_bw;
    double *zone_price_per_gb;
} plan_cluster;

#define PLAN_CLUSTER_MAX_BYTES (16u << 20)
#define PLAN_MAX_DEVICES 4096

/* Reads a cluster file. A key the format does not define, at any level the planner reads, is
 * refused (SC_ERR_INVALID naming the key, its line, column and JSON path, the closest valid key
 * and the valid ones); the keys stagecraft itself writes (`stagecraft topo --json`, a job's
 * cluster) are all valid. */
sc_status plan_cluster_load(plan_cluster **out, const char *path, sc_err *err);

/* A catalogue (`stagecraft advise --catalog`): a cluster file read more strictly: every device type
 * must carry `price_per_hour`, and `links` are refused (a catalogue lists what can be had, not how
 * one machine is wired). Errors as plan_cluster_load's. */
sc_status plan_cluster_load_catalog(plan_cluster **out, const char *path, sc_err *err);
sc_status plan_cluster_parse_catalog(plan_cluster **out, const char *source, const char *text,
                                     size_t len, sc_err *err);

/* Puts server `server` in zone `name` (registered on first use). */
sc_status plan_cluster_set_zone(plan_cluster *c, int server, const char *name, sc_err *err);

/* Sets the bandwidth cap (HUGE_VAL: none) and price per GB between zones za and zb (both
 * directions); with za == zb == -1, between every two distinct zones. */
void plan_cluster_set_zone_link(plan_cluster *c, int za, int zb, double bw_bytes_per_s,
                                double price_per_gb);

/* Price of one byte between devices a and b (0 on one zone or without prices). */
double plan_cluster_price_per_byte(const plan_cluster *c, int a, int b);

/* 1 when every device type has a price_per_hour. */
int plan_cluster_has_prices(const plan_cluster *c);

/* Price of the cluster's devices for one hour (those without a price count 0). */
double plan_cluster_devices_price_per_hour(const plan_cluster *c);

/* A cluster holding devices devs[0..n-1] of c (distinct ids): c's device types, zones and
 * prices, each server that holds one of them with its own bandwidths, and on each server the
 * chosen devices grouped by type (in device_types order), so that subsets taking as many of
 * each type from each server give the same cluster. order[i] (n entries, may be NULL) is the
 * id in c of the subset's device i. SC_ERR_INVALID when c has links (not carried over) or an
 * id is out of range or repeated. */
sc_status plan_cluster_subset(const plan_cluster *c, const int *devs, int n, plan_cluster **out,
                              int *order, sc_err *err);
sc_status plan_cluster_parse(plan_cluster **out, const char *source, const char *text, size_t len,
                             sc_err *err);

/* One server of n_gpus identical devices (type "gpu", relative speed 1, memory_bytes or
 * unlimited when <= 0) joined by bw_bytes_per_s. Errors for n_gpus < 1 or bw <= 0. */
sc_status plan_cluster_new_uniform(plan_cluster **out, int n_gpus, double bw_bytes_per_s,
                                   double memory_bytes, sc_err *err);

/* Builder for synthetic clusters: an empty cluster, then types, then servers. */
sc_status plan_cluster_new_empty(plan_cluster **out, sc_err *err);
sc_status plan_cluster_add_type(plan_cluster *c, const char *name, double relative_speed,
                                double memory_bytes, int *type_out, sc_err *err);
sc_status plan_cluster_add_server(plan_cluster *c, const char *name, double intra_bw, double nic_bw,
                                  const int *device_types, int n_devices, sc_err *err);

void plan_cluster_destroy(plan_cluster **c);

/* Bandwidth between devices a and b (a != b): intra-server bandwidth when they share a server,
 * else the smaller NIC bandwidth of the two servers. With links: an NVLink joining both sets
 * the bandwidth of a pair on one server; otherwise it is capped by every link on the route
 * (plan_cluster_route). */
double plan_cluster_bw(const plan_cluster *c, int a, int b);

/* Links a transfer from a to b goes through (indices into links, at most `max`): the NVLink
 * joining them if any; else, on one server, each PCIe uplink and socket link holding exactly
 * one of them; across servers, one NIC link of each side plus those uplinks and sockets.
 * Returns the count; 0 without links. */
int plan_cluster_route(const plan_cluster *c, int a, int b, int *links, int max);

/* Largest device memory and fastest relative speed over the cluster. */
double plan_cluster_max_speed(const plan_cluster *c);

/* ---------------------------------------------------------------- cost model */

/* Block costs for one micro-batch of `samples` samples on every device type. Keeps pointers
 * to the profile and the cluster, which must outlive it. */
typedef struct plan_cost {
    const plan_profile *profile;
    const plan_cluster *cluster;
    int n_blocks;
    int n_types;
    double samples;        /* micro-batch size M */
    int batch;             /* global batch B */
    double *fwd_s;         /* (n_types, n_blocks) */
    double *bwd_s;         /* (n_types, n_blocks) */
    double *work_prefix_s; /* (n_types, n_blocks + 1): prefix sums of fwd + bwd */
    double *act_bytes;     /* (n_blocks) crossing a cut after block l, per micro-batch */
    double *stash_prefix;  /* (n_blocks + 1) per micro-batch */
    double *wstash_prefix; /* (n_blocks + 1) per micro-batch: zb1's W stashes */
    double *scratch;       /* (n_blocks) per block, at the planned micro-batch size */
    double *param_prefix;  /* (n_blocks + 1) */
    int zb1_peak_cap;      /* zb1's deferred W capped at 1f1b's peak bytes as well as by each
                            * device's memory (plan_partition_zb1_defer); 0 after plan_cost_new */
} plan_cost;

/* Errors: a block_times entry naming no block of the profile (SC_ERR_INVALID). */
sc_status plan_cost_new(plan_cost **out, const plan_profile *p, const plan_cluster *c,
                        double samples, int batch, sc_err *err);
void plan_cost_destroy(plan_cost **c);

/* Sum of forward + backward of blocks first..last (inclusive) on a device of type `type`. */
static inline double plan_cost_work(const plan_cost *c, int type, int first, int last)
{
    const double *w = c->work_prefix_s + (size_t)type * (size_t)(c->n_blocks + 1);
    return w[last + 1] - w[first];
}

static inline double plan_cost_params(const plan_cost *c, int first, int last)
{
    return c->param_prefix[last + 1] - c->param_prefix[first];
}

static inline double plan_cost_stash(const plan_cost *c, int first, int last)
{
    return c->stash_prefix[last + 1] - c->stash_prefix[first];
}

/* Bytes of parameter state a stage keeps: weights, gradients and two optimizer moments. */
#define PLAN_PARAM_COPIES 4.0

/* Memory of a stage holding blocks first..last with `inflight` micro-batches stashed and
 * `weight_versions` extra weight copies (PipeDream's stashing; 0 otherwise). Inline: the
 * searches call it in their innermost loops. */
static inline double plan_cost_memory(const plan_cost *c, int first, int last, double inflight,
                                      int weight_versions)
{
    return plan_cost_params(c, first, last) * (PLAN_PARAM_COPIES + weight_versions) +
           plan_cost_stash(c, first, last) * inflight;
}

/* Time to move one micro-batch's activation (and, backward, its gradient) across the cut
 * after block `last` between devices a and b: act / bw each way; 0 when a == b. */
double plan_cost_cut_one_way(const plan_cost *c, int last, int a, int b);

#endif /* PLAN_CLUSTER_H */
