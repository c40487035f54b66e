/*
 * Internals shared by the files that load one server's topology (topo.c, topo_info.c,
 * topo_devices.c, topo_links.c, topo_numa.c) and by topo_bind.c; not part of the interface,
 * which is topo.h.
 *
 * What they share: the figures assumed where a topology says nothing, the names of the
 * "Stagecraft*" info attributes a live load writes into the hwloc topology (so an XML export
 * carries them), the topo_builder that grows a server's arrays, and small reads of hwloc objects.
 */
#ifndef SC_TOPO_INTERNAL_H
#define SC_TOPO_INTERNAL_H

#include <hwloc.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/sc_status.h"
#include "topology/topo.h"

/* Assumed figures, used only where the topology says nothing; docs/design/topology.md lists them. */
#define ASSUMED_PCIE_BYTES_PER_S 16e9   /* PCIe 3.0 x16 */
#define ASSUMED_SOCKET_BYTES_PER_S 20e9 /* one UPI/xGMI link between packages */
#define ASSUMED_NIC_BYTES_PER_S 1.25e9  /* 10 Gb/s Ethernet */
#define ASSUMED_CPU_HZ 2.5e9
#define ASSUMED_CPU_FLOPS_PER_CYCLE 16.0 /* FP32 FMA on 8-wide vectors, one port */
#define ASSUMED_GPU_HZ 1.4e9
#define ASSUMED_GPU_GFLOPS 10e3 /* an unknown NVIDIA GPU: a mid-range data-centre part */

/* What a live discovery learns beyond hwloc (CUDA properties, probes, NIC speeds) is written
 * into the topology as info attributes, so an XML export carries it to the coordinator. */
#define INFO_MODEL "StagecraftGPUModel"
#define INFO_MEM "StagecraftMemoryBytes"
#define INFO_MEM_SRC "StagecraftMemorySource"
#define INFO_GFLOPS "StagecraftGFLOPS"
#define INFO_GFLOPS_SRC "StagecraftGFLOPSSource"
#define INFO_SMS "StagecraftSMCount"
#define INFO_CC "StagecraftComputeCapability"
#define INFO_H2D "StagecraftH2DBytesPerS"
#define INFO_D2D "StagecraftD2DBytesPerS"
#define INFO_UNSUPPORTED "StagecraftUnsupported"
#define INFO_CPU_GFLOPS "StagecraftCPUGFLOPS"
#define INFO_CPU_GFLOPS_SRC "StagecraftCPUGFLOPSSource"
#define INFO_HOST_BW "StagecraftHostMemoryBytesPerS"
#define INFO_NIC_BW "StagecraftNICBytesPerS"
#define INFO_NIC_BW_SRC "StagecraftNICSource"

/* A server under construction: its arrays grow by doubling up to these capacities. */
typedef struct {
    topo_server *s;
    size_t cap_devices, cap_ports, cap_nics;
} topo_builder;

/* ---- hwloc objects and info attributes (topo_info.c) ---------------------------------------- */

/* The object's info attribute `name`, or "" when it has none. */
const char *topo_obj_info(hwloc_obj_t o, const char *name);

/* A figure read from an export: a positive finite number no larger than `max`, else 0, so a
 * hostile report cannot hand the planner NaN or absurd values. */
double topo_info_num(const char *v, double max);

/* The topo_source named by topo_source_str's text; TOPO_SRC_UNKNOWN for anything else. */
topo_source topo_source_parse(const char *s);

/* hwloc os index of the single NUMA node above `o`, -1 when there is not exactly one. */
int topo_obj_numa(hwloc_topology_t t, hwloc_obj_t o);

/* PCI attributes of a PCI device, or of a bridge's upstream side. */
const struct hwloc_pcidev_attr_s *topo_obj_pci_attr(hwloc_obj_t o);

/* "0000:34:00.0" of a PCI device or bridge. */
void topo_obj_busid(hwloc_obj_t pci, char *out, size_t size);

/* Writes what this load learned into the hwloc objects (see INFO_*); an attribute the object
 * already has keeps its first value. */
void topo_annotate(const topo_server *s, hwloc_topology_t t);

/* ---- NUMA nodes (topo_numa.c) ---------------------------------------------------------- */

/* The topology's NUMA nodes by os index into a new array *out (free()); *n is 0 and *out NULL
 * when it has none. */
sc_status topo_numa_read(hwloc_topology_t t, topo_numa_node **out, size_t *n, sc_err *err);

/* ---- devices (topo_devices.c) --------------------------------------------------------------- */

/* Adds a GPU for every PCI device that carries a compute OS device or a stagecraft worker's
 * model annotation, and on a live machine every NVIDIA display-class device; notes the NVIDIA
 * boards an export shows without a compute driver. Also fills b->s->ports. */
sc_status topo_find_gpus(topo_builder *b, hwloc_topology_t t, bool live, sc_err *err);

/* Live machine: pairs GPUs with CUDA devices by bus id (see topo_devices.c). */
sc_status topo_pair_cuda(topo_builder *b, bool measure, sc_err *err);

/* Adds the CPU as a device, for a server with no usable GPU. */
sc_status topo_add_cpu_device(topo_builder *b, hwloc_topology_t t, bool measure, sc_err *err);

/* ---- NICs and NVLink (topo_links.c) --------------------------------------------------------- */

/* Lists the NICs under PCI devices with their bandwidth and where it came from. */
sc_status topo_find_nics(topo_builder *b, hwloc_topology_t t, bool live, sc_err *err);

/* Fills s->nvlink_bytes_per_s from hwloc's "NVLinkBandwidth" distances, when there are any. */
sc_status topo_read_nvlink(topo_server *s, hwloc_topology_t t, sc_err *err);

#endif /* SC_TOPO_INTERNAL_H */
