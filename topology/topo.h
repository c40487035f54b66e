/*
 * topo: the hardware of one server, as stagecraft needs it for planning.
 *
 * A topo_server is read from one of three sources: the live machine (hwloc's own discovery,
 * paired with CUDA properties loaded at run time), an hwloc XML export of another machine (a
 * file, or a buffer received in a worker's registration report), or an hwloc synthetic
 * description (tests). From hwloc's tree it keeps the compute devices (GPUs and, when there is
 * no usable GPU, the CPU itself), the NICs, the PCIe root ports the devices sit under, the NUMA
 * placement of each, and the NVLink bandwidth between GPUs when the topology carries hwloc's
 * "NVLinkBandwidth" distances.
 *
 * What it does not do: it does not model several servers (topo_cluster.h does), and it does not
 * keep hwloc objects in its public view: everything below is plain data, copied out at load.
 *
 * Key invariant: each physical GPU appears once, however many OS devices name it (cudaN,
 * openclNdM, nvmlN under one PCI device are one GPU); devices are ordered GPUs first (by PCI bus
 * id), then the CPU device if there is one. Input from outside (XML) passes topo_xml_check()
 * before hwloc parses it, so a hostile buffer costs bounded memory and stack. What a live load
 * learns beyond hwloc (CUDA properties, probe results, NIC speeds) is written into the hwloc
 * topology as "Stagecraft*" info attributes, so an XML export carries it and reads back the
 * same.
 */
#ifndef SC_TOPO_H
#define SC_TOPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "topology/topo_xml.h"

#define TOPO_NAME_MAX 128
#define TOPO_BUSID_MAX 16

typedef enum {
    TOPO_DEV_GPU = 0,
    TOPO_DEV_CPU = 1,
} topo_dev_kind;

/* Where a number came from, so users and the planner can judge it. */
typedef enum {
    TOPO_SRC_UNKNOWN = 0,
    TOPO_SRC_MEASURED,  /* measured on this machine, now */
    TOPO_SRC_REPORTED,  /* read from the hardware or driver (CUDA, hwloc, sysfs) */
    TOPO_SRC_ESTIMATED, /* derived from a model name or a table of known parts */
    TOPO_SRC_ASSUMED,   /* nothing known: a stated default (docs/design/topology.md) */
} topo_source;

const char *topo_source_str(topo_source s);

typedef struct topo_device {
    topo_dev_kind kind;
    char model[TOPO_NAME_MAX]; /* as reported: "Tesla V100-SXM3-32GB-H", "Intel(R) Xeon(R)..." */
    char type_name[TOPO_NAME_MAX]; /* device type key of the cluster JSON: "V100-SXM3-32GB-H" */
    char vendor[64];
    char os_names[TOPO_NAME_MAX]; /* hwloc OS devices merged into this one: "cuda0,nvml0" */
    bool supported;               /* stagecraft can run stages on it (NVIDIA GPU or the CPU) */
    char unsupported_why[TOPO_NAME_MAX];
    uint64_t memory_bytes;
    topo_source memory_source;
    char pci_bus_id[TOPO_BUSID_MAX]; /* "0000:34:00.0"; empty for the CPU */
    int numa_node;                   /* hwloc os index of the nearest NUMA node, -1 unknown */
    double pcie_link_bytes_per_s;    /* the device's own PCIe link, 0 unknown */
    int root_port;                   /* index in topo_server.ports, -1 none (CPU) */
    int cuda_index;                  /* CUDA ordinal on a live machine, -1 when not paired */
    int sm_count;                    /* 0 unknown */
    int cc_major, cc_minor;          /* compute capability, 0.0 unknown */
    int cpu_cores;                   /* CPU device: physical cores */
    double gflops;                   /* FP32 matmul rate */
    topo_source gflops_source;
    double h2d_bytes_per_s;         /* measured host-to-device copy rate, 0 unmeasured */
    double d2d_bytes_per_s;         /* measured on-device copy rate, 0 unmeasured */
    double host_nvlink_bytes_per_s; /* NVLink to the CPU (POWER systems), 0 none */
} topo_device;

/* A PCIe root port (the bridge right under a host bridge): every device below it shares its
 * link to the CPU, so it is one contention domain for host traffic. */
typedef struct topo_port {
    char bus_id[TOPO_BUSID_MAX];
    int numa_node;
    double uplink_bytes_per_s;
    topo_source uplink_source;
    int n_switches; /* PCIe switch levels between the port and its deepest device */
} topo_port;

typedef struct topo_nic {
    char name[64]; /* "ib0", "eth0" */
    char pci_bus_id[TOPO_BUSID_MAX];
    char model[TOPO_NAME_MAX];
    int numa_node;
    double bw_bytes_per_s;
    topo_source bw_source;
} topo_nic;

/* A NUMA node: its memory and the CPUs nearest to it. With hwloc's default view, CPUs and
 * memory outside this process's cgroup cpuset are left out. */
#define TOPO_CPULIST_MAX 512
typedef struct topo_numa_node {
    int os_index;          /* hwloc os index: the N of numactl --cpunodebind=N, --numa-node N */
    int n_cores;           /* physical cores with a PU in this node; 0: a memory-only node */
    int n_pus;             /* processing units (hardware threads) */
    uint64_t memory_bytes; /* local memory, 0 unknown */
    /* The layout starts a CPU worker here: the node has PUs and none of them belongs to a node
     * of lower os index. False for a second node over the same CPUs (HBM or CXL memory next to
     * DDR, KNL's MCDRAM), which --numa-node still accepts. */
    bool worker;
    /* PU os indexes in Linux cpulist syntax, "0-15,32-47"; "" for a memory-only node. A list
     * too long for the buffer ends in "..." (a node of thousands of scattered PUs). */
    char cpus[TOPO_CPULIST_MAX];
} topo_numa_node;

typedef struct topo_server {
    char hostname[256];
    char source[256]; /* "live", a file name, "synthetic", or the cfg's source_name */
    char cpu_model[TOPO_NAME_MAX];
    int n_packages, n_numa, n_cores, n_pus;
    uint64_t host_memory_bytes;
    double host_mem_bw_bytes_per_s; /* measured copy bandwidth, 0 unmeasured */
    double socket_link_bytes_per_s; /* between packages; estimated; 0 with one package */

    topo_device *devices; /* GPUs by PCI bus id, then the CPU device if any */
    size_t n_devices;
    topo_port *ports;
    size_t n_ports;
    topo_nic *nics;
    size_t n_nics;
    /* NVLink bandwidth between devices i and j at nvlink_bytes_per_s[i * n_devices + j]: direct
     * links plus the path through NVSwitches; NULL when the topology has no NVLink data. */
    double *nvlink_bytes_per_s;
    /* The NUMA nodes by os index (every topology has at least one); n_numa counts them too. */
    topo_numa_node *numa_nodes;
    size_t n_numa_nodes;
    /* Human notes about what was ignored ("2 NVIDIA PCI devices without a compute driver"). */
    char notes[512];

    struct topo_hw *hw; /* private: the hwloc topology, kept for XML export */
} topo_server;

typedef struct topo_cfg {
    const char *xml_path;   /* load this hwloc XML file */
    const char *xml_buffer; /* or this XML text (from the network) of xml_len bytes */
    size_t xml_len;
    const char *synthetic;   /* or this hwloc synthetic description ("pack:2 core:4 pu:1") */
    const char *source_name; /* names the input in errors; default: the path or "buffer" */
    const char *hostname;    /* overrides the hostname found in the topology */
    size_t max_xml_bytes;    /* 0: TOPO_XML_MAX_BYTES */
    /* Live machine only (no xml_path, xml_buffer or synthetic): */
    bool use_cuda; /* pair GPUs with the CUDA driver loaded by dlopen, when present */
    bool measure;  /* run the short probes: host memory bandwidth, CPU and GPU GEMM, copies */
    /* list the host's processors as a device also where GPUs are usable (a CPU worker on a GPU
     * server); without it the CPU becomes a device only on a server with no usable GPU */
    bool cpu_device;
} topo_cfg;

/*
 * Loads one server's topology from the source named in cfg (none: the live machine).
 * On success *out owns a new server (topo_server_destroy). Errors: SC_ERR_IO (file missing),
 * SC_ERR_TOO_LARGE (over the XML size cap), SC_ERR_PARSE (truncated or malformed XML, too deep,
 * duplicate object ids), SC_ERR_VERSION (hwloc 3.x XML), SC_ERR_INVALID (a topology without
 * any processing unit); messages name the source. A topology with no GPU is not an error: the
 * CPU becomes its device (as it does beside the GPUs with cfg->cpu_device). Not thread-safe with
 * respect to one cfg; distinct calls are.
 */
sc_status topo_server_new(topo_server **out, const topo_cfg *cfg, sc_err *err);

/* Frees the server; sets *s to NULL; accepts NULL. */
void topo_server_destroy(topo_server **s);

/* Exports the server's topology as hwloc XML (v2 format). *xml is a NUL-terminated heap
 * buffer the caller frees with free(); *len excludes the NUL. */
sc_status topo_server_export_xml(const topo_server *s, char **xml, size_t *len, sc_err *err);

/* Number of supported devices (those a stage can run on). */
size_t topo_server_usable_devices(const topo_server *s);

/* Bandwidth between two devices of one server: NVLink when present, else the PCIe path
 * (the slower of the two links, and the socket link when they hang off different NUMA
 * nodes); for i == j the device's own copy rate. Bytes per second, > 0. */
double topo_server_pair_bw(const topo_server *s, size_t i, size_t j);

#endif /* SC_TOPO_H */
