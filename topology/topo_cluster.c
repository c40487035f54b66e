/*
 * topo_cluster: servers merged by hostname, global device ids, links as contention domains,
 * and the cluster JSON. See topo_cluster.h.
 *
 * Each server keeps copies of its devices (usable or not), PCIe ports and NICs, and an n x n
 * matrix of pair bandwidths taken from the topology that saw both devices; everything derived
 * (global ids, links) is rebuilt from those after each add, so merging never leaves stale ids.
 */
#include "topology/topo_cluster.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "topology/topo_numa.h"

#define ASSUMED_NIC_BYTES_PER_S 1.25e9 /* 10 Gb/s Ethernet, when a server shows no NIC */

typedef struct cserver {
    char name[256];
    char sources[512];
    char cpu_model[TOPO_NAME_MAX];
    int n_packages, n_numa, n_cores;
    uint64_t host_memory_bytes;
    double host_mem_bw_bytes_per_s;
    double socket_link_bytes_per_s;
    topo_device *devs;
    size_t n;
    double *bw;     /* n x n pair bandwidth */
    double *nvlink; /* n x n NVLink bandwidth, 0 where none */
    bool has_nvlink;
    topo_port *ports;
    size_t n_ports;
    topo_nic *nics;
    size_t n_nics;
    char notes[512];
    topo_numa_node *numa; /* the first report's NUMA nodes */
    size_t n_numa_nodes;
    int *gid; /* global id per device, -1 when unusable */
    double intra_bw, nic_bw;
    bool nic_assumed;
} cserver;

struct topo_cluster {
    cserver *servers;
    size_t n_servers;
    topo_link *links;
    size_t n_links;
    size_t n_devices;
    size_t *g_server, *g_local;
};

const char *topo_link_kind_str(topo_link_kind k)
{
    switch (k) {
    case TOPO_LINK_NVLINK:
        return "nvlink";
    case TOPO_LINK_PCIE_UPLINK:
        return "pcie_uplink";
    case TOPO_LINK_SOCKET:
        return "socket";
    case TOPO_LINK_NIC:
        return "nic";
    }
    return "unknown";
}

sc_status topo_cluster_new(topo_cluster **out, sc_err *err)
{
    *out = calloc(1, sizeof(**out));
    SC_ALLOC_CHECK(*out, err);
    return SC_OK;
}

static void links_clear(topo_cluster *c)
{
    for (size_t i = 0; i < c->n_links; i++)
        free(c->links[i].devices);
    free(c->links);
    c->links = NULL;
    c->n_links = 0;
}

static void cserver_free(cserver *s)
{
    free(s->devs);
    free(s->bw);
    free(s->nvlink);
    free(s->ports);
    free(s->nics);
    free(s->numa);
    free(s->gid);
}

void topo_cluster_destroy(topo_cluster **cp)
{
    if (cp == NULL || *cp == NULL)
        return;
    topo_cluster *c = *cp;
    for (size_t i = 0; i < c->n_servers; i++)
        cserver_free(&c->servers[i]);
    free(c->servers);
    links_clear(c);
    free(c->g_server);
    free(c->g_local);
    free(c);
    *cp = NULL;
}

/* ---- merging ---------------------------------------------------------------------------- */

static int find_port(const cserver *cs, const char *bus)
{
    for (size_t i = 0; i < cs->n_ports; i++)
        if (strcmp(cs->ports[i].bus_id, bus) == 0)
            return (int)i;
    return -1;
}

/* Index of device `d` of a report in the merged server: same PCI bus id for GPUs, the CPU
 * device for the CPU. -1 when new. */
static int find_device(const cserver *cs, const topo_device *d)
{
    for (size_t i = 0; i < cs->n; i++) {
        const topo_device *e = &cs->devs[i];
        if (e->kind != d->kind)
            continue;
        if (d->kind == TOPO_DEV_CPU || strcmp(e->pci_bus_id, d->pci_bus_id) == 0)
            return (int)i;
    }
    return -1;
}

static int report_index(const topo_server *s, const topo_device *d)
{
    for (size_t i = 0; i < s->n_devices; i++) {
        const topo_device *e = &s->devices[i];
        if (e->kind == d->kind &&
            (d->kind == TOPO_DEV_CPU || strcmp(e->pci_bus_id, d->pci_bus_id) == 0))
            return (int)i;
    }
    return -1;
}

static double link_of(const cserver *cs, const topo_device *d)
{
    if (d->pcie_link_bytes_per_s > 0)
        return d->pcie_link_bytes_per_s;
    if (d->root_port >= 0)
        return cs->ports[d->root_port].uplink_bytes_per_s;
    return 16e9;
}

/* Grows the server to n devices, keeping the old matrix entries. */
static sc_status cserver_resize(cserver *cs, size_t n, sc_err *err)
{
    size_t old = cs->n;
    topo_device *devs = realloc(cs->devs, (n ? n : 1) * sizeof(*devs));
    if (devs == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory merging servers");
    cs->devs = devs;
    double *bw = calloc(n * n + 1, sizeof(double)), *nv = calloc(n * n + 1, sizeof(double));
    int *gid = calloc(n + 1, sizeof(int));
    if (bw == NULL || nv == NULL || gid == NULL) {
        free(bw);
        free(nv);
        free(gid);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory merging servers");
    }
    size_t keep = old < n ? old : n;
    for (size_t i = 0; i < keep; i++)
        for (size_t j = 0; j < keep; j++) {
            bw[i * n + j] = cs->bw[i * old + j];
            nv[i * n + j] = cs->nvlink[i * old + j];
        }
    free(cs->bw);
    free(cs->nvlink);
    free(cs->gid);
    cs->bw = bw;
    cs->nvlink = nv;
    cs->gid = gid;
    cs->n = n;
    return SC_OK;
}

static sc_status add_port(cserver *cs, const topo_port *p, int *index, sc_err *err)
{
    int i = find_port(cs, p->bus_id);
    if (i < 0) {
        topo_port *ports = realloc(cs->ports, (cs->n_ports + 1) * sizeof(*ports));
        if (ports == NULL)
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory merging servers");
        cs->ports = ports;
        cs->ports[cs->n_ports] = *p;
        i = (int)cs->n_ports++;
    }
    *index = i;
    return SC_OK;
}

static sc_status add_nic(cserver *cs, const topo_nic *nic, sc_err *err)
{
    for (size_t i = 0; i < cs->n_nics; i++)
        if (strcmp(cs->nics[i].pci_bus_id, nic->pci_bus_id) == 0)
            return SC_OK;
    topo_nic *nics = realloc(cs->nics, (cs->n_nics + 1) * sizeof(*nics));
    if (nics == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory merging servers");
    cs->nics = nics;
    cs->nics[cs->n_nics++] = *nic;
    return SC_OK;
}

/* Drops the CPU device once a usable GPU is known: the CPU stands in only for GPU-less
 * servers. */
static void drop_cpu_if_gpu(cserver *cs)
{
    bool gpu = false;
    for (size_t i = 0; i < cs->n; i++)
        gpu |= cs->devs[i].kind == TOPO_DEV_GPU && cs->devs[i].supported;
    if (!gpu)
        return;
    size_t n = cs->n, w = 0;
    size_t *keep = malloc(n * sizeof(size_t));
    if (keep == NULL)
        return; /* harmless: the CPU stays listed */
    for (size_t i = 0; i < n; i++)
        if (cs->devs[i].kind != TOPO_DEV_CPU)
            keep[w++] = i;
    for (size_t a = 0; a < w; a++) {
        cs->devs[a] = cs->devs[keep[a]];
        for (size_t b = 0; b < w; b++) {
            cs->bw[a * w + b] = cs->bw[keep[a] * n + keep[b]];
            cs->nvlink[a * w + b] = cs->nvlink[keep[a] * n + keep[b]];
        }
    }
    cs->n = w;
    free(keep);
}

static void append_text(char *dst, size_t size, const char *text)
{
    size_t l = strlen(dst);
    if (*text && l + 3 < size)
        sc_strfmt(dst + l, size - l, "%s%s", l ? "; " : "", text);
}

static sc_status merge_report(cserver *cs, const topo_server *s, sc_err *err)
{
    size_t n0 = cs->n;
    /* where each report device lands in the merged server, -1 when the server keeps its own */
    int *at = malloc((s->n_devices ? s->n_devices : 1) * sizeof(int));
    SC_ALLOC_CHECK(at, err);
    sc_status rc = SC_OK;
    size_t next = n0;
    for (size_t k = 0; k < s->n_devices; k++) {
        const topo_device *d = &s->devices[k];
        int i = find_device(cs, d);
        if (i < 0)
            at[k] = (int)next++;
        else if (!cs->devs[i].supported && d->supported)
            at[k] = i; /* this report can use a device the earlier one could not */
        else
            at[k] = -1;
    }
    SC_CHECK_GOTO(cserver_resize(cs, next, err), out);
    bool *written = calloc(next ? next : 1, sizeof(bool));
    if (written == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory merging servers");
        goto out;
    }
    for (size_t k = 0; k < s->n_devices && rc == SC_OK; k++) {
        if (at[k] < 0)
            continue;
        const topo_device *d = &s->devices[k];
        topo_device *e = &cs->devs[at[k]];
        *e = *d;
        e->root_port = -1;
        written[at[k]] = true;
        if (d->root_port >= 0) {
            int p = -1;
            rc = add_port(cs, &s->ports[d->root_port], &p, err);
            e->root_port = p;
        }
    }
    /* Pair bandwidths: from this report for every pair it saw and that involves a device it
     * brought; a pair no report saw together gets the slower of the two PCIe links. */
    for (size_t a = 0; a < cs->n && rc == SC_OK; a++) {
        int ra = report_index(s, &cs->devs[a]);
        for (size_t b = 0; b < cs->n; b++) {
            int rb = report_index(s, &cs->devs[b]);
            double *bw = &cs->bw[a * cs->n + b];
            if (ra >= 0 && rb >= 0 && (written[a] || written[b] || *bw <= 0)) {
                *bw = topo_server_pair_bw(s, (size_t)ra, (size_t)rb);
                if (s->nvlink_bytes_per_s != NULL) {
                    double v = s->nvlink_bytes_per_s[(size_t)ra * s->n_devices + (size_t)rb];
                    cs->nvlink[a * cs->n + b] = v;
                    cs->has_nvlink |= v > 0;
                }
            } else if (*bw <= 0) {
                double la = link_of(cs, &cs->devs[a]), lb = link_of(cs, &cs->devs[b]);
                *bw = la < lb ? la : lb;
            }
        }
    }
    free(written);
    if (rc != SC_OK)
        goto out;
    for (size_t k = 0; k < s->n_nics; k++)
        SC_CHECK_GOTO(add_nic(cs, &s->nics[k], err), out);
    for (size_t k = 0; k < s->n_ports; k++) {
        int p;
        SC_CHECK_GOTO(add_port(cs, &s->ports[k], &p, err), out);
    }
    if (cs->n_packages == 0) {
        sc_strlcpy(cs->cpu_model, s->cpu_model, sizeof(cs->cpu_model));
        cs->n_packages = s->n_packages;
        cs->n_numa = s->n_numa;
        cs->n_cores = s->n_cores;
        cs->host_memory_bytes = s->host_memory_bytes;
        cs->socket_link_bytes_per_s = s->socket_link_bytes_per_s;
        SC_CHECK_GOTO(topo_numa_copy(&cs->numa, s->numa_nodes, s->n_numa_nodes, err), out);
        cs->n_numa_nodes = s->n_numa_nodes;
    }
    if (s->host_mem_bw_bytes_per_s > cs->host_mem_bw_bytes_per_s)
        cs->host_mem_bw_bytes_per_s = s->host_mem_bw_bytes_per_s;
    append_text(cs->sources, sizeof(cs->sources), s->source);
    append_text(cs->notes, sizeof(cs->notes), s->notes);
    drop_cpu_if_gpu(cs);
out:
    free(at);
    return rc;
}

/* ---- derived: ids, bandwidth summaries, links --------------------------------------------- */

static sc_status push_link(topo_cluster *c, topo_link_kind kind, size_t server, const char *name,
                           double bw, const int *devs, size_t n, sc_err *err)
{
    topo_link *links = realloc(c->links, (c->n_links + 1) * sizeof(*links));
    if (links == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory building links");
    c->links = links;
    topo_link *l = &c->links[c->n_links];
    memset(l, 0, sizeof(*l));
    l->devices = malloc((n ? n : 1) * sizeof(int));
    if (l->devices == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory building links");
    memcpy(l->devices, devs, n * sizeof(int));
    l->n_devices = n;
    l->kind = kind;
    l->server = server;
    sc_strlcpy(l->name, name, sizeof(l->name));
    l->bw_bytes_per_s = bw;
    l->shared = n > 1;
    c->n_links++;
    return SC_OK;
}

static sc_status rebuild(topo_cluster *c, sc_err *err)
{
    links_clear(c);
    size_t total = 0;
    for (size_t s = 0; s < c->n_servers; s++)
        for (size_t i = 0; i < c->servers[s].n; i++)
            total += c->servers[s].devs[i].supported;
    free(c->g_server);
    free(c->g_local);
    c->g_server = malloc((total ? total : 1) * sizeof(size_t));
    c->g_local = malloc((total ? total : 1) * sizeof(size_t));
    int *ids = malloc((total ? total : 1) * sizeof(int));
    if (c->g_server == NULL || c->g_local == NULL || ids == NULL) {
        free(ids);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory building the cluster");
    }
    size_t g = 0;
    for (size_t s = 0; s < c->n_servers; s++) {
        cserver *cs = &c->servers[s];
        for (size_t i = 0; i < cs->n; i++) {
            cs->gid[i] = -1;
            if (!cs->devs[i].supported)
                continue;
            cs->gid[i] = (int)g;
            c->g_server[g] = s;
            c->g_local[g] = i;
            g++;
        }
    }
    c->n_devices = g;

    sc_status rc = SC_OK;
    for (size_t s = 0; s < c->n_servers && rc == SC_OK; s++) {
        cserver *cs = &c->servers[s];
        size_t n = cs->n;
        /* intra: the slowest pair of usable devices (the planner takes one number); a
         * one-device server gives its own copy rate */
        double intra = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++) {
                double bw = cs->bw[i * n + j];
                if (i == j || cs->gid[i] < 0 || cs->gid[j] < 0 || bw <= 0)
                    continue;
                if (intra == 0 || bw < intra)
                    intra = bw;
            }
        for (size_t i = 0; i < n && intra == 0; i++)
            if (cs->gid[i] >= 0 && cs->bw[i * n + i] > 0)
                intra = cs->bw[i * n + i];
        cs->intra_bw = intra > 0 ? intra : 16e9;
        cs->nic_bw = 0;
        for (size_t k = 0; k < cs->n_nics; k++)
            if (cs->nics[k].bw_bytes_per_s > cs->nic_bw)
                cs->nic_bw = cs->nics[k].bw_bytes_per_s;
        cs->nic_assumed = cs->nic_bw <= 0;
        if (cs->nic_assumed)
            cs->nic_bw = ASSUMED_NIC_BYTES_PER_S;

        /* NVLink pairs */
        for (size_t i = 0; i < n && rc == SC_OK; i++)
            for (size_t j = i + 1; j < n && rc == SC_OK; j++) {
                double a = cs->nvlink[i * n + j], b = cs->nvlink[j * n + i];
                double bw = a > 0 && b > 0 ? (a < b ? a : b) : (a > b ? a : b);
                if (cs->gid[i] < 0 || cs->gid[j] < 0 || bw <= 0)
                    continue;
                int pair[2] = {cs->gid[i], cs->gid[j]};
                char name[96];
                snprintf(name, sizeof(name), "dev%d-dev%d", pair[0], pair[1]);
                rc = push_link(c, TOPO_LINK_NVLINK, s, name, bw, pair, 2, err);
            }
        /* PCIe root ports */
        for (size_t p = 0; p < cs->n_ports && rc == SC_OK; p++) {
            size_t k = 0;
            for (size_t i = 0; i < n; i++)
                if (cs->gid[i] >= 0 && cs->devs[i].root_port == (int)p)
                    ids[k++] = cs->gid[i];
            if (k > 0)
                rc = push_link(c, TOPO_LINK_PCIE_UPLINK, s, cs->ports[p].bus_id,
                               cs->ports[p].uplink_bytes_per_s, ids, k, err);
        }
        /* socket interconnect: devices placed on a known NUMA node cross it */
        if (cs->socket_link_bytes_per_s > 0 && rc == SC_OK) {
            size_t k = 0;
            int first = -2;
            bool spread = false;
            for (size_t i = 0; i < n; i++) {
                if (cs->gid[i] < 0 || cs->devs[i].numa_node < 0)
                    continue;
                ids[k++] = cs->gid[i];
                if (first == -2)
                    first = cs->devs[i].numa_node;
                spread |= cs->devs[i].numa_node != first;
            }
            if (spread)
                rc = push_link(c, TOPO_LINK_SOCKET, s, "socket", cs->socket_link_bytes_per_s, ids,
                               k, err);
        }
        /* NICs: every usable device leaves the server through them */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (cs->gid[i] >= 0)
                ids[k++] = cs->gid[i];
        for (size_t q = 0; q < cs->n_nics && rc == SC_OK && k > 0; q++)
            rc = push_link(c, TOPO_LINK_NIC, s, cs->nics[q].name, cs->nics[q].bw_bytes_per_s, ids,
                           k, err);
        if (cs->n_nics == 0 && k > 0 && rc == SC_OK)
            rc = push_link(c, TOPO_LINK_NIC, s, "assumed", cs->nic_bw, ids, k, err);
    }
    free(ids);
    return rc;
}

sc_status topo_cluster_add(topo_cluster *c, const topo_server *s, sc_err *err)
{
    cserver *cs = NULL;
    for (size_t i = 0; i < c->n_servers; i++)
        if (strcmp(c->servers[i].name, s->hostname) == 0)
            cs = &c->servers[i];
    if (cs == NULL) {
        cserver *servers = realloc(c->servers, (c->n_servers + 1) * sizeof(*servers));
        SC_ALLOC_CHECK(servers, err);
        c->servers = servers;
        cs = &c->servers[c->n_servers++];
        memset(cs, 0, sizeof(*cs));
        sc_strlcpy(cs->name, s->hostname, sizeof(cs->name));
    }
    SC_CHECK(merge_report(cs, s, err));
    /* Two different CPUs must not share the type "cpu": the planner would give them one
     * speed. A later, different one is named after its server. */
    for (size_t i = 0; i < cs->n; i++) {
        topo_device *d = &cs->devs[i];
        if (d->kind != TOPO_DEV_CPU)
            continue;
        for (size_t o = 0; o < c->n_servers; o++) {
            const cserver *other = &c->servers[o];
            if (other == cs)
                continue;
            for (size_t k = 0; k < other->n; k++) {
                const topo_device *e = &other->devs[k];
                if (e->kind == TOPO_DEV_CPU && strcmp(e->type_name, d->type_name) == 0 &&
                    (strcmp(e->model, d->model) != 0 || e->cpu_cores != d->cpu_cores))
                    snprintf(d->type_name, sizeof(d->type_name), "cpu-%.100s", cs->name);
            }
        }
    }
    return rebuild(c, err);
}

size_t topo_cluster_servers(const topo_cluster *c)
{
    return c->n_servers;
}

const char *topo_cluster_server_name(const topo_cluster *c, size_t server)
{
    return server < c->n_servers ? c->servers[server].name : NULL;
}

size_t topo_cluster_devices(const topo_cluster *c)
{
    return c->n_devices;
}

const topo_device *topo_cluster_device(const topo_cluster *c, size_t id, size_t *server)
{
    if (id >= c->n_devices)
        return NULL;
    if (server)
        *server = c->g_server[id];
    return &c->servers[c->g_server[id]].devs[c->g_local[id]];
}

double topo_cluster_pair_bw(const topo_cluster *c, size_t a, size_t b)
{
    if (a >= c->n_devices || b >= c->n_devices)
        return 0;
    size_t sa = c->g_server[a], sb = c->g_server[b];
    if (sa == sb) {
        const cserver *cs = &c->servers[sa];
        return cs->bw[c->g_local[a] * cs->n + c->g_local[b]];
    }
    double x = c->servers[sa].nic_bw, y = c->servers[sb].nic_bw;
    return x < y ? x : y;
}

double topo_cluster_intra_bw(const topo_cluster *c, size_t server)
{
    return server < c->n_servers ? c->servers[server].intra_bw : 0;
}

double topo_cluster_nic_bw(const topo_cluster *c, size_t server)
{
    return server < c->n_servers ? c->servers[server].nic_bw : 0;
}

size_t topo_cluster_links(const topo_cluster *c)
{
    return c->n_links;
}

const topo_link *topo_cluster_link(const topo_cluster *c, size_t i)
{
    return i < c->n_links ? &c->links[i] : NULL;
}

/* ---- JSON --------------------------------------------------------------------------------- */

/* Device types: one per type name, with the speed of its devices relative to the fastest
 * type (1.0). */
typedef struct {
    const char *name;
    const topo_device *first;
    double gflops_sum;
    size_t count;
    uint64_t memory_bytes; /* smallest of its devices: what a plan may count on; 0: unknown */
} type_acc;

static int set_new(json_t *obj, const char *key, json_t *v)
{
    return v == NULL || json_object_set_new(obj, key, v) != 0;
}

static double type_gflops(const type_acc *t)
{
    return t->count ? t->gflops_sum / (double)t->count : 0;
}

sc_status topo_cluster_to_json(const topo_cluster *c, char **out, sc_err *err)
{
    *out = NULL;
    if (c->n_devices == 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "cluster has no usable device (every device listed is unsupported)");
    type_acc *types = calloc(c->n_devices, sizeof(*types));
    SC_ALLOC_CHECK(types, err);
    size_t n_types = 0;
    for (size_t g = 0; g < c->n_devices; g++) {
        const topo_device *d = topo_cluster_device(c, g, NULL);
        size_t t = 0;
        while (t < n_types && strcmp(types[t].name, d->type_name) != 0)
            t++;
        if (t == n_types) {
            types[t].name = d->type_name;
            types[t].first = d;
            types[t].memory_bytes = d->memory_bytes;
            n_types++;
        }
        types[t].gflops_sum += d->gflops;
        types[t].count++;
        /* 0 is "not reported" (no GPU model or memory in the XML), not a limit */
        if (d->memory_bytes > 0 &&
            (types[t].memory_bytes == 0 || d->memory_bytes < types[t].memory_bytes))
            types[t].memory_bytes = d->memory_bytes;
    }
    double ref = 0;
    const char *ref_name = types[0].name;
    for (size_t t = 0; t < n_types; t++)
        if (type_gflops(&types[t]) > ref) {
            ref = type_gflops(&types[t]);
            ref_name = types[t].name;
        }

    int bad = 0;
    json_t *root = json_object();
    json_t *jtypes = json_object(), *jservers = json_array(), *jlinks = json_array();
    bad |= root == NULL || jtypes == NULL || jservers == NULL || jlinks == NULL;
    if (!bad) {
        bad |= set_new(root, "format", json_string(TOPO_CLUSTER_FORMAT));
        bad |= set_new(root, "version", json_integer(TOPO_CLUSTER_VERSION));
        bad |= set_new(root, "reference_device", json_string(ref_name));
        bad |= set_new(root, "relative_speed_basis",
                       json_string("FP32 matmul GFLOP/s; the fastest device type is 1.0"));
    }
    for (size_t t = 0; t < n_types && !bad; t++) {
        const type_acc *ta = &types[t];
        json_t *jt = json_object();
        bad |= jt == NULL || json_object_set_new(jtypes, ta->name, jt) != 0;
        if (bad)
            break;
        double gf = type_gflops(ta);
        /* No speed known at all: count it as the reference rather than as infinitely slow. */
        double rel = ref > 0 && gf > 0 ? gf / ref : 1.0;
        if (rel < 1e-6) /* the planner's floor: far slower still reads as "very slow" */
            rel = 1e-6;
        bad |= set_new(jt, "relative_speed", json_real(rel));
        /* unknown: left out, which the planner reads as unlimited (it refuses 0 bytes) */
        if (ta->memory_bytes > 0)
            bad |= set_new(jt, "memory_bytes", json_integer((json_int_t)ta->memory_bytes));
        bad |= set_new(jt, "kind", json_string(ta->first->kind == TOPO_DEV_GPU ? "gpu" : "cpu"));
        bad |= set_new(jt, "model", json_string(ta->first->model));
        bad |= set_new(jt, "gflops", json_real(gf));
        bad |= set_new(jt, "gflops_source", json_string(topo_source_str(ta->first->gflops_source)));
        bad |= set_new(jt, "memory_source", json_string(topo_source_str(ta->first->memory_source)));
    }
    for (size_t s = 0; s < c->n_servers && !bad; s++) {
        const cserver *cs = &c->servers[s];
        json_t *js = json_object(), *jdevs = json_array(), *jinfo = json_array();
        json_t *jnics = json_array();
        bad |= js == NULL || jdevs == NULL || jinfo == NULL || jnics == NULL ||
               json_array_append_new(jservers, js) != 0;
        if (bad) {
            json_decref(jdevs);
            json_decref(jinfo);
            json_decref(jnics);
            break;
        }
        bad |= set_new(js, "name", json_string(cs->name));
        bad |= set_new(js, "devices", jdevs);
        bad |= set_new(js, "intra_bandwidth_bytes_per_s", json_real(cs->intra_bw));
        bad |= set_new(js, "nic_bandwidth_bytes_per_s", json_real(cs->nic_bw));
        bad |=
            set_new(js, "nic_bandwidth_source", json_string(cs->nic_assumed ? "assumed" : "nic"));
        bad |= set_new(js, "device_info", jinfo);
        bad |= set_new(js, "nics", jnics);
        bad |= set_new(js, "numa_nodes", json_integer(cs->n_numa));
        bad |= set_new(js, "cpu_cores", json_integer(cs->n_cores));
        bad |= set_new(js, "numa_nodes_detail", topo_numa_json_detail(cs->numa, cs->n_numa_nodes));
        bad |= set_new(js, "cpu_workers", topo_numa_json_workers(cs->numa, cs->n_numa_nodes));
        bad |= set_new(js, "host_memory_bytes", json_integer((json_int_t)cs->host_memory_bytes));
        if (cs->host_mem_bw_bytes_per_s > 0)
            bad |= set_new(js, "host_memory_bandwidth_bytes_per_s",
                           json_real(cs->host_mem_bw_bytes_per_s));
        for (size_t i = 0; i < cs->n && !bad; i++) {
            const topo_device *d = &cs->devs[i];
            json_t *ji = json_object();
            bad |= ji == NULL || json_array_append_new(jinfo, ji) != 0;
            if (bad)
                break;
            if (cs->gid[i] >= 0) {
                bad |= json_array_append_new(jdevs, json_string(d->type_name)) != 0;
                bad |= set_new(ji, "id", json_integer(cs->gid[i]));
            } else {
                bad |= set_new(ji, "id", json_null());
                bad |= set_new(ji, "unsupported", json_string(d->unsupported_why));
            }
            bad |= set_new(ji, "type", json_string(d->type_name));
            bad |= set_new(ji, "model", json_string(d->model));
            bad |= set_new(ji, "memory_bytes", json_integer((json_int_t)d->memory_bytes));
            if (d->pci_bus_id[0])
                bad |= set_new(ji, "pci_bus_id", json_string(d->pci_bus_id));
            bad |= set_new(ji, "numa_node", json_integer(d->numa_node));
            if (d->root_port >= 0) {
                bad |= set_new(ji, "pcie_root_port", json_string(cs->ports[d->root_port].bus_id));
                bad |= set_new(ji, "pcie_switch_levels",
                               json_integer(cs->ports[d->root_port].n_switches));
            }
            if (d->pcie_link_bytes_per_s > 0)
                bad |= set_new(ji, "pcie_link_bytes_per_s", json_real(d->pcie_link_bytes_per_s));
            if (d->sm_count > 0)
                bad |= set_new(ji, "sm_count", json_integer(d->sm_count));
            if (d->cc_major > 0) {
                char cc[16];
                snprintf(cc, sizeof(cc), "%d.%d", d->cc_major, d->cc_minor);
                bad |= set_new(ji, "compute_capability", json_string(cc));
            }
            if (d->cpu_cores > 0)
                bad |= set_new(ji, "cores", json_integer(d->cpu_cores));
            bad |= set_new(ji, "gflops", json_real(d->gflops));
            if (d->h2d_bytes_per_s > 0)
                bad |= set_new(ji, "h2d_bytes_per_s", json_real(d->h2d_bytes_per_s));
            if (d->d2d_bytes_per_s > 0)
                bad |= set_new(ji, "d2d_bytes_per_s", json_real(d->d2d_bytes_per_s));
        }
        for (size_t q = 0; q < cs->n_nics && !bad; q++) {
            const topo_nic *nic = &cs->nics[q];
            json_t *jn = json_object();
            bad |= jn == NULL || json_array_append_new(jnics, jn) != 0;
            if (bad)
                break;
            bad |= set_new(jn, "name", json_string(nic->name));
            bad |= set_new(jn, "model", json_string(nic->model));
            bad |= set_new(jn, "pci_bus_id", json_string(nic->pci_bus_id));
            bad |= set_new(jn, "numa_node", json_integer(nic->numa_node));
            bad |= set_new(jn, "bandwidth_bytes_per_s", json_real(nic->bw_bytes_per_s));
            bad |= set_new(jn, "bandwidth_source", json_string(topo_source_str(nic->bw_source)));
        }
    }
    for (size_t l = 0; l < c->n_links && !bad; l++) {
        const topo_link *lk = &c->links[l];
        json_t *jl = json_object(), *jd = json_array();
        bad |= jl == NULL || jd == NULL || json_array_append_new(jlinks, jl) != 0;
        if (bad) {
            json_decref(jd);
            break;
        }
        bad |= set_new(jl, "kind", json_string(topo_link_kind_str(lk->kind)));
        bad |= set_new(jl, "server", json_integer((json_int_t)lk->server));
        bad |= set_new(jl, "name", json_string(lk->name));
        bad |= set_new(jl, "bandwidth_bytes_per_s", json_real(lk->bw_bytes_per_s));
        bad |= set_new(jl, "shared", json_boolean(lk->shared));
        bad |= set_new(jl, "devices", jd);
        for (size_t k = 0; k < lk->n_devices && !bad; k++)
            bad |= json_array_append_new(jd, json_integer(lk->devices[k])) != 0;
    }
    if (!bad) {
        bad |= set_new(root, "device_types", jtypes);
        jtypes = NULL;
        bad |= set_new(root, "servers", jservers);
        jservers = NULL;
        bad |= set_new(root, "links", jlinks);
        jlinks = NULL;
    }
    char *text =
        bad ? NULL
            : json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    json_decref(jtypes);
    json_decref(jservers);
    json_decref(jlinks);
    json_decref(root);
    free(types);
    if (text == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the cluster JSON");
    /* json_dumps allocates with jansson's allocator (malloc by default); hand back a copy so
     * callers free() it without knowing that. */
    *out = strdup(text);
    free(text);
    SC_ALLOC_CHECK(*out, err);
    return SC_OK;
}

/* ---- human view -------------------------------------------------------------------------- */

static void fmt_bytes(double v, char *buf, size_t size)
{
    if (v >= 1e12)
        snprintf(buf, size, "%.1f TB", v / 1e12);
    else if (v >= 1e9)
        snprintf(buf, size, "%.1f GB", v / 1e9);
    else if (v >= 1e6)
        snprintf(buf, size, "%.1f MB", v / 1e6);
    else
        snprintf(buf, size, "%.0f B", v);
}

static void print_matrix(const cserver *cs, FILE *out)
{
    fprintf(out, "  NVLink GB/s (rows from, columns to; ids are global):\n       ");
    for (size_t j = 0; j < cs->n; j++)
        if (cs->gid[j] >= 0)
            fprintf(out, "%5d", cs->gid[j]);
    fprintf(out, "\n");
    for (size_t i = 0; i < cs->n; i++) {
        if (cs->gid[i] < 0)
            continue;
        fprintf(out, "  %5d", cs->gid[i]);
        for (size_t j = 0; j < cs->n; j++) {
            if (cs->gid[j] < 0)
                continue;
            if (i == j)
                fprintf(out, "    -");
            else
                fprintf(out, "%5.0f", cs->nvlink[i * cs->n + j] / 1e9);
        }
        fprintf(out, "\n");
    }
}

void topo_cluster_print(const topo_cluster *c, FILE *out)
{
    char a[32], b[32];
    for (size_t s = 0; s < c->n_servers; s++) {
        const cserver *cs = &c->servers[s];
        fmt_bytes((double)cs->host_memory_bytes, a, sizeof(a));
        fprintf(out, "server %s  (%s)\n", cs->name, cs->sources);
        fprintf(out, "  cpu: %s, %d package(s), %d core(s), %d NUMA node(s), %s memory",
                cs->cpu_model[0] ? cs->cpu_model : "unknown model", cs->n_packages, cs->n_cores,
                cs->n_numa, a);
        if (cs->host_mem_bw_bytes_per_s > 0) {
            fmt_bytes(cs->host_mem_bw_bytes_per_s, b, sizeof(b));
            fprintf(out, " (copy %s/s measured)", b);
        }
        fprintf(out, "\n");
        topo_numa_print(cs->numa, cs->n_numa_nodes, cs->n_cores, out);
        for (size_t i = 0; i < cs->n; i++) {
            const topo_device *d = &cs->devs[i];
            fmt_bytes((double)d->memory_bytes, a, sizeof(a));
            char id[16];
            if (cs->gid[i] >= 0)
                snprintf(id, sizeof(id), "dev%d", cs->gid[i]);
            else
                snprintf(id, sizeof(id), "--");
            if (d->kind == TOPO_DEV_CPU) {
                fprintf(out, "  |- %-6s cpu  %s  %d cores  %s  %.0f GFLOP/s (%s)\n", id, d->model,
                        d->cpu_cores, a, d->gflops, topo_source_str(d->gflops_source));
                continue;
            }
            char numa[16];
            if (d->numa_node >= 0)
                snprintf(numa, sizeof(numa), "numa %d", d->numa_node);
            else
                snprintf(numa, sizeof(numa), "numa ?");
            fprintf(out, "  |- %-6s gpu  %-24s %9s  %s  pci %s  root port %s", id, d->type_name, a,
                    numa, d->pci_bus_id, d->root_port >= 0 ? cs->ports[d->root_port].bus_id : "-");
            if (d->root_port >= 0 && cs->ports[d->root_port].n_switches > 0)
                fprintf(out, " via %d switch level(s)", cs->ports[d->root_port].n_switches);
            if (d->gflops_source == TOPO_SRC_MEASURED)
                fprintf(out, "  %.0f GFLOP/s", d->gflops);
            if (d->h2d_bytes_per_s > 0)
                fprintf(out, "  h2d %.1f GB/s", d->h2d_bytes_per_s / 1e9);
            if (d->d2d_bytes_per_s > 0)
                fprintf(out, "  d2d %.0f GB/s", d->d2d_bytes_per_s / 1e9);
            if (d->os_names[0])
                fprintf(out, "  [%s]", d->os_names);
            if (!d->supported)
                fprintf(out, "  UNSUPPORTED: %s", d->unsupported_why);
            fprintf(out, "\n");
        }
        for (size_t q = 0; q < cs->n_nics; q++) {
            const topo_nic *nic = &cs->nics[q];
            fmt_bytes(nic->bw_bytes_per_s, a, sizeof(a));
            fprintf(out, "  |- nic    %-8s %s/s (%s)  numa %d  pci %s  %s\n", nic->name, a,
                    topo_source_str(nic->bw_source), nic->numa_node, nic->pci_bus_id, nic->model);
        }
        fmt_bytes(cs->intra_bw, a, sizeof(a));
        fmt_bytes(cs->nic_bw, b, sizeof(b));
        fprintf(out, "  intra-server %s/s, network %s/s%s\n", a, b,
                cs->nic_assumed ? " (assumed: no NIC found)" : "");
        if (cs->notes[0])
            fprintf(out, "  note: %s\n", cs->notes);
        if (cs->has_nvlink)
            print_matrix(cs, out);
        fprintf(out, "  links (each one contention domain; devices by global id):\n");
        fprintf(out, "    %-12s %-14s %10s  %-6s  %s\n", "kind", "name", "GB/s", "shared",
                "devices");
        size_t nvlinks = 0;
        for (size_t l = 0; l < c->n_links; l++) {
            const topo_link *lk = &c->links[l];
            if (lk->server != s)
                continue;
            if (lk->kind == TOPO_LINK_NVLINK) {
                nvlinks++;
                continue; /* shown as the matrix above */
            }
            fprintf(out, "    %-12s %-14s %10.2f  %-6s  ", topo_link_kind_str(lk->kind), lk->name,
                    lk->bw_bytes_per_s / 1e9, lk->shared ? "yes" : "no");
            for (size_t k = 0; k < lk->n_devices; k++)
                fprintf(out, "%s%d", k ? "," : "", lk->devices[k]);
            fprintf(out, "\n");
        }
        if (nvlinks)
            fprintf(out, "    %-12s %zu GPU pairs, point to point (matrix above)\n", "nvlink",
                    nvlinks);
        fprintf(out, "\n");
    }
}
