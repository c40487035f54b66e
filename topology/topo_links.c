/*
 * topo_links: how a server's devices reach each other and the network: its NICs and their
 * speeds, the NVLink matrix from hwloc's "NVLinkBandwidth" distances, and the bandwidth between
 * two devices that the planner prices transfers with (topo_server_pair_bw).
 *
 * Not here: the devices themselves (topo_devices.c), links between servers (topo_cluster.c).
 *
 * Key invariant: every bandwidth is > 0 and comes with where it came from: an annotation, the
 * live machine, a table of known parts, or a stated assumption (ASSUMED_*).
 */
#include "topology/topo.h"

#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "topology/topo_internal.h"

static double nic_speed_from_model(const char *model)
{
    static const struct {
        const char *match;
        double gbit;
    } table[] = {
        {"ConnectX-8", 800}, {"ConnectX-7", 400}, {"ConnectX-6", 200}, {"ConnectX-5", 100},
        {"ConnectX-4", 100}, {"ConnectX-3", 40},  {"E810", 100},       {"X710", 10},
        {"X550", 10},        {"X540", 10},        {"82599", 10},       {"I350", 1},
        {"I210", 1},         {"Gigabit", 1},
    };
    for (size_t i = 0; i < SC_ARRAY_LEN(table); i++)
        if (strstr(model, table[i].match) != NULL)
            return table[i].gbit * 1e9 / 8;
    return 0;
}

static double nic_speed_live(const char *name)
{
    char path[128], buf[32];
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    long mbit = -1;
    if (fgets(buf, sizeof(buf), f) != NULL)
        mbit = strtol(buf, NULL, 10);
    fclose(f);
    return mbit > 0 ? (double)mbit * 1e6 / 8 : 0;
}

sc_status topo_find_nics(topo_builder *b, hwloc_topology_t t, bool live, sc_err *err)
{
    topo_server *s = b->s;
    for (hwloc_obj_t o = hwloc_get_next_osdev(t, NULL); o != NULL; o = hwloc_get_next_osdev(t, o)) {
        hwloc_obj_osdev_type_t type = o->attr->osdev.type;
        if ((type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS) ||
            o->name == NULL)
            continue;
        hwloc_obj_t pci = o->parent;
        if (pci == NULL || pci->type != HWLOC_OBJ_PCI_DEVICE)
            continue; /* virtual interfaces carry no traffic off the machine */
        char bus[TOPO_BUSID_MAX];
        topo_obj_busid(pci, bus, sizeof(bus));
        topo_nic *nic = NULL;
        for (size_t i = 0; i < s->n_nics; i++)
            if (strcmp(s->nics[i].pci_bus_id, bus) == 0)
                nic = &s->nics[i];
        if (nic != NULL) {
            /* One port seen as ib0 and mlx5_0: keep the network interface's name. */
            if (type == HWLOC_OBJ_OSDEV_NETWORK)
                sc_strlcpy(nic->name, o->name, sizeof(nic->name));
            continue;
        }
        if (s->n_nics == b->cap_nics) {
            size_t cap = b->cap_nics ? 2 * b->cap_nics : 4;
            topo_nic *n = realloc(s->nics, cap * sizeof(*n));
            if (n == NULL)
                return SC_ERRF(err, SC_ERR_NOMEM, "out of memory listing NICs");
            s->nics = n;
            b->cap_nics = cap;
        }
        nic = &s->nics[s->n_nics++];
        memset(nic, 0, sizeof(*nic));
        sc_strlcpy(nic->name, o->name, sizeof(nic->name));
        sc_strlcpy(nic->pci_bus_id, bus, sizeof(nic->pci_bus_id));
        sc_strlcpy(nic->model, topo_obj_info(pci, "PCIDevice"), sizeof(nic->model));
        nic->numa_node = topo_obj_numa(t, pci);
    }
    for (size_t i = 0; i < s->n_nics; i++) {
        topo_nic *nic = &s->nics[i];
        hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(t, nic->pci_bus_id);
        double annotated = pci ? topo_info_num(topo_obj_info(pci, INFO_NIC_BW), 1e13) : 0;
        if (annotated > 0) {
            nic->bw_bytes_per_s = annotated;
            nic->bw_source = topo_source_parse(topo_obj_info(pci, INFO_NIC_BW_SRC));
        } else if (live && (nic->bw_bytes_per_s = nic_speed_live(nic->name)) > 0) {
            nic->bw_source = TOPO_SRC_REPORTED;
        } else if ((nic->bw_bytes_per_s = nic_speed_from_model(nic->model)) > 0) {
            nic->bw_source = TOPO_SRC_ESTIMATED;
        } else {
            nic->bw_bytes_per_s = ASSUMED_NIC_BYTES_PER_S;
            nic->bw_source = TOPO_SRC_ASSUMED;
        }
    }
    return SC_OK;
}

static int device_of_obj(const topo_server *s, hwloc_obj_t o)
{
    if (o->type == HWLOC_OBJ_OS_DEVICE)
        o = o->parent;
    if (o == NULL || o->type != HWLOC_OBJ_PCI_DEVICE)
        return -1;
    char bus[TOPO_BUSID_MAX];
    topo_obj_busid(o, bus, sizeof(bus));
    for (size_t i = 0; i < s->n_devices; i++)
        if (s->devices[i].kind == TOPO_DEV_GPU && strcmp(s->devices[i].pci_bus_id, bus) == 0)
            return (int)i;
    return -1;
}

/* NVLink matrix from hwloc's "NVLinkBandwidth" distances (MB/s, row = from). Objects may be
 * GPUs (by OS device or PCI device), NVSwitches (PCI devices) or CPUs (packages): GPU pairs
 * add their direct links, and two GPUs that both reach NVSwitches also talk through the
 * switch fabric at the smaller of their two switch bandwidths. */
sc_status topo_read_nvlink(topo_server *s, hwloc_topology_t t, sc_err *err)
{
    unsigned nr = 1;
    struct hwloc_distances_s *dist = NULL;
    if (hwloc_distances_get_by_name(t, "NVLinkBandwidth", &nr, &dist, 0) != 0 || nr == 0)
        return SC_OK;
    size_t n = s->n_devices, m = dist->nbobjs;
    sc_status rc = SC_OK;
    double *mat = calloc(n * n, sizeof(double));
    double *sw = calloc(n, sizeof(double));
    int *map = malloc(m * sizeof(int));
    char *taken = calloc(n, 1);
    if (mat == NULL || sw == NULL || map == NULL || taken == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading NVLink distances");
        goto out;
    }
    /* -1 other, -2 NVSwitch, -3 CPU side; >= 0 a GPU (first object naming it only). */
    for (size_t k = 0; k < m; k++) {
        hwloc_obj_t o = dist->objs[k];
        int d = o != NULL ? device_of_obj(s, o) : -1;
        if (d >= 0 && !taken[d]) {
            taken[d] = 1;
            map[k] = d;
        } else if (d >= 0) {
            map[k] = -1;
        } else if (o != NULL && o->type == HWLOC_OBJ_PCI_DEVICE) {
            map[k] = -2;
        } else if (o != NULL && !hwloc_obj_type_is_io(o->type)) {
            map[k] = -3;
        } else {
            map[k] = -1;
        }
    }
    int any = 0;
    for (size_t i = 0; i < m; i++) {
        if (map[i] < 0)
            continue;
        size_t gi = (size_t)map[i];
        for (size_t j = 0; j < m; j++) {
            double v = (double)dist->values[i * m + j] * 1e6;
            if (i == j || v <= 0)
                continue;
            if (map[j] >= 0) {
                mat[gi * n + (size_t)map[j]] += v;
                any = 1;
            } else if (map[j] == -2) {
                sw[gi] += v;
            } else if (map[j] == -3) {
                s->devices[gi].host_nvlink_bytes_per_s += v;
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            if (i != j && sw[i] > 0 && sw[j] > 0) {
                mat[i * n + j] += sw[i] < sw[j] ? sw[i] : sw[j];
                any = 1;
            }
    if (any) {
        s->nvlink_bytes_per_s = mat;
        mat = NULL;
    }
out:
    free(mat);
    free(sw);
    free(map);
    free(taken);
    hwloc_distances_release(t, dist);
    return rc;
}

static double device_link(const topo_server *s, const topo_device *d)
{
    if (d->pcie_link_bytes_per_s > 0)
        return d->pcie_link_bytes_per_s;
    if (d->root_port >= 0)
        return s->ports[d->root_port].uplink_bytes_per_s;
    return ASSUMED_PCIE_BYTES_PER_S;
}

double topo_server_pair_bw(const topo_server *s, size_t i, size_t j)
{
    const topo_device *a = &s->devices[i], *b = &s->devices[j];
    if (i == j) {
        if (a->d2d_bytes_per_s > 0)
            return a->d2d_bytes_per_s;
        if (a->kind == TOPO_DEV_CPU)
            return s->host_mem_bw_bytes_per_s > 0 ? s->host_mem_bw_bytes_per_s : 10e9;
        return device_link(s, a);
    }
    if (s->nvlink_bytes_per_s != NULL && s->nvlink_bytes_per_s[i * s->n_devices + j] > 0)
        return s->nvlink_bytes_per_s[i * s->n_devices + j];
    double la = device_link(s, a), lb = device_link(s, b);
    double bw = la < lb ? la : lb;
    if (a->root_port != b->root_port) {
        /* through the CPU: each side's root port, and the socket link between NUMA nodes */
        if (a->root_port >= 0 && s->ports[a->root_port].uplink_bytes_per_s < bw)
            bw = s->ports[a->root_port].uplink_bytes_per_s;
        if (b->root_port >= 0 && s->ports[b->root_port].uplink_bytes_per_s < bw)
            bw = s->ports[b->root_port].uplink_bytes_per_s;
        if (a->numa_node != b->numa_node && s->socket_link_bytes_per_s > 0 &&
            s->socket_link_bytes_per_s < bw)
            bw = s->socket_link_bytes_per_s;
        /* POWER-style GPUs with NVLink to the CPU: host memory is the faster meeting point */
        double ha = a->host_nvlink_bytes_per_s, hb = b->host_nvlink_bytes_per_s;
        if (ha > 0 && hb > 0) {
            double via = ha < hb ? ha : hb;
            if (a->numa_node != b->numa_node && s->socket_link_bytes_per_s > 0 &&
                s->socket_link_bytes_per_s < via)
                via = s->socket_link_bytes_per_s;
            if (via > bw)
                bw = via;
        }
    }
    return bw;
}
