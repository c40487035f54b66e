/*
 * topo_cluster: the cluster model the planner prices plans against: servers, their devices,
 * and the links between devices with bandwidths and the devices that share each link.
 *
 * Built from one or many servers' topologies (topo.h): the live machine, hwloc XML files, or
 * workers' registration reports. Servers are merged by hostname: a second report from the
 * same host adds the devices the first did not have as usable (matched by PCI bus id), so two
 * workers on one machine, each owning some GPUs, make one server.
 *
 * Links, each one contention domain (every device listed on a link shares its bandwidth):
 *   nvlink       two GPUs, point to point (direct links plus the NVSwitch fabric)
 *   pcie_uplink  a PCIe root port: all devices under it share its link to the CPU
 *   socket       the link between the packages of a multi-socket server
 *   nic          a network interface: all devices of the server share it off the machine
 *
 * Exported as the cluster JSON of the file formats ("format": "stagecraft-cluster"), with the
 * finer detail in optional keys. What it does not do: it does not plan, and it does not read
 * cluster JSON back (the planner does).
 *
 * Key invariant: global device ids are 0-based, servers in order of addition, then each
 * server's usable devices in its order; unsupported devices (an AMD GPU, an NVIDIA board the
 * driver does not list) are shown but never get an id.
 */
#ifndef SC_TOPO_CLUSTER_H
#define SC_TOPO_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common/sc_status.h"
#include "topology/topo.h"

#define TOPO_CLUSTER_FORMAT "stagecraft-cluster"
#define TOPO_CLUSTER_VERSION 1

typedef enum {
    TOPO_LINK_NVLINK = 0,
    TOPO_LINK_PCIE_UPLINK,
    TOPO_LINK_SOCKET,
    TOPO_LINK_NIC,
} topo_link_kind;

const char *topo_link_kind_str(topo_link_kind k);

typedef struct topo_link {
    topo_link_kind kind;
    size_t server;
    char name[96]; /* "0000:2b:00.0" for a port, "ib0" for a NIC, "gpu0-gpu1" for NVLink */
    double bw_bytes_per_s;
    int *devices; /* global device ids on this link */
    size_t n_devices;
    bool shared; /* more than one device contends for it */
} topo_link;

typedef struct topo_cluster topo_cluster;

sc_status topo_cluster_new(topo_cluster **out, sc_err *err);
void topo_cluster_destroy(topo_cluster **c);

/* Adds a server's devices, merging with an earlier server of the same hostname. The server is
 * only read; the cluster keeps copies, so `s` may be destroyed afterwards. */
sc_status topo_cluster_add(topo_cluster *c, const topo_server *s, sc_err *err);

size_t topo_cluster_servers(const topo_cluster *c);
const char *topo_cluster_server_name(const topo_cluster *c, size_t server);
/* Usable devices of the cluster (the global ids run 0 .. n-1). */
size_t topo_cluster_devices(const topo_cluster *c);
/* The device with global id `id`, and the server it is on. NULL when out of range. */
const topo_device *topo_cluster_device(const topo_cluster *c, size_t id, size_t *server);
/* Bandwidth between two usable devices by global id, as the planner's cost model takes it:
 * the pair's intra-server bandwidth on one server, else the slower of the two servers' NICs. */
double topo_cluster_pair_bw(const topo_cluster *c, size_t a, size_t b);
double topo_cluster_intra_bw(const topo_cluster *c, size_t server);
double topo_cluster_nic_bw(const topo_cluster *c, size_t server);

/* The links (contention domains), rebuilt after each add. */
size_t topo_cluster_links(const topo_cluster *c);
const topo_link *topo_cluster_link(const topo_cluster *c, size_t i);

/*
 * Writes the cluster JSON (format stagecraft-cluster, version 1) into a NUL-terminated heap
 * string the caller frees. SC_ERR_INVALID when the cluster has no usable device.
 */
sc_status topo_cluster_to_json(const topo_cluster *c, char **json, sc_err *err);

/* Human view: a tree per server (devices with memory, NUMA node, PCIe root port; NICs), then
 * the link table. */
void topo_cluster_print(const topo_cluster *c, FILE *out);

#endif /* SC_TOPO_CLUSTER_H */
