/*
 * topo: one server's devices, ports, NICs and NVLink matrix, read through hwloc. See topo.h.
 *
 * hwloc keeps no PCI or OS devices unless the I/O type filter asks for them, even when reading
 * XML, so every load sets it to KEEP_IMPORTANT (GPUs, NICs, their bridges; no DMA channels).
 * Debian's hwloc has no CUDA or NVML backend: on a live machine an NVIDIA GPU is a bare PCI
 * device (vendor 0x10de, class 0x03xx) that this file pairs with the CUDA driver by bus id.
 * In an export from another machine, a GPU is a PCI device that carries a compute OS device
 * (GPU or CoProc type: cudaN, nvmlN, openclNdM, rsmiN, zeN); display-only devices (cardN,
 * renderDN) are not compute devices.
 */
#include "topology/topo.h"

#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "topology/topo_cuda.h"
#include "topology/topo_probe.h"

struct topo_hw {
    hwloc_topology_t topo;
};

enum { PCI_VENDOR_NVIDIA = 0x10de, PCI_VENDOR_AMD = 0x1002, PCI_VENDOR_INTEL = 0x8086 };

/* Assumed figures, used only where the topology says nothing; docs/topology.md lists them. */
#define ASSUMED_PCIE_BYTES_PER_S 16e9   /* PCIe 3.0 x16 */
#define ASSUMED_SOCKET_BYTES_PER_S 20e9 /* one UPI/xGMI link between packages */
#define ASSUMED_NIC_BYTES_PER_S 1.25e9  /* 10 Gb/s Ethernet */
#define ASSUMED_CPU_HZ 2.5e9
#define ASSUMED_CPU_FLOPS_PER_CYCLE 16.0 /* FP32 FMA on 8-wide vectors, one port */
#define ASSUMED_GPU_HZ 1.4e9
#define ASSUMED_GPU_GFLOPS 10e3 /* an unknown NVIDIA GPU: a mid-range data-centre part */

const char *topo_source_str(topo_source s)
{
    switch (s) {
    case TOPO_SRC_MEASURED:
        return "measured";
    case TOPO_SRC_REPORTED:
        return "reported";
    case TOPO_SRC_ESTIMATED:
        return "estimated";
    case TOPO_SRC_ASSUMED:
        return "assumed";
    default:
        return "unknown";
    }
}

/* ---- small helpers over hwloc objects ------------------------------------------------- */

static const char *info(hwloc_obj_t o, const char *name)
{
    const char *v = hwloc_obj_get_info_by_name(o, name);
    return v != NULL ? v : "";
}

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

/* A figure read from an export: a positive finite number no larger than `max`, else 0, so a
 * hostile report cannot hand the planner NaN or absurd values. */
static double num_in(const char *v, double max)
{
    double x = atof(v);
    return x > 0 && x <= max ? x : 0;
}

static topo_source source_parse(const char *s)
{
    for (int i = TOPO_SRC_MEASURED; i <= TOPO_SRC_ASSUMED; i++)
        if (strcmp(s, topo_source_str((topo_source)i)) == 0)
            return (topo_source)i;
    return TOPO_SRC_UNKNOWN;
}

/* Adds an info attribute unless the object already has one of that name (an export of an
 * imported topology keeps its first value). */
static void info_put(hwloc_obj_t o, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void info_put(hwloc_obj_t o, const char *name, const char *fmt, ...)
{
    if (o == NULL || hwloc_obj_get_info_by_name(o, name) != NULL)
        return;
    char value[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    hwloc_obj_add_info(o, name, value);
}

static int numa_of(hwloc_topology_t t, hwloc_obj_t o)
{
    hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(t, o);
    if (a == NULL || a->nodeset == NULL || hwloc_bitmap_weight(a->nodeset) != 1)
        return -1;
    return hwloc_bitmap_first(a->nodeset);
}

/* PCI attributes of a PCI device, or of a bridge's upstream side. */
static const struct hwloc_pcidev_attr_s *pci_attr(hwloc_obj_t o)
{
    return o->type == HWLOC_OBJ_BRIDGE ? &o->attr->bridge.upstream.pci : &o->attr->pcidev;
}

static void busid_of(hwloc_obj_t pci, char *out, size_t size)
{
    const struct hwloc_pcidev_attr_s *a = pci_attr(pci);
    snprintf(out, size, "%04x:%02x:%02x.%x", a->domain, a->bus, a->dev, a->func);
}

static int is_compute_osdev(hwloc_obj_t o)
{
    if (o->type != HWLOC_OBJ_OS_DEVICE || o->name == NULL)
        return 0;
    hwloc_obj_osdev_type_t t = o->attr->osdev.type;
    if (t != HWLOC_OBJ_OSDEV_GPU && t != HWLOC_OBJ_OSDEV_COPROC)
        return 0;
    static const char *const prefixes[] = {"cuda", "nvml", "opencl", "rsmi", "ze", "ve"};
    for (size_t i = 0; i < SC_ARRAY_LEN(prefixes); i++)
        if (o->name != NULL && strncmp(o->name, prefixes[i], strlen(prefixes[i])) == 0)
            return 1;
    /* Display devices (cardN, renderDN) carry no backend info; any backend counts. */
    return hwloc_obj_get_info_by_name(o, "Backend") != NULL;
}

static const char *vendor_name(unsigned id)
{
    switch (id) {
    case PCI_VENDOR_NVIDIA:
        return "NVIDIA";
    case PCI_VENDOR_AMD:
        return "AMD";
    case PCI_VENDOR_INTEL:
        return "Intel";
    default:
        return "unknown vendor";
    }
}

/* "Tesla V100-SXM3-32GB-H" -> "V100-SXM3-32GB-H"; spaces become dashes so the type reads as
 * one word in tables and JSON keys. */
static void type_name_from_model(const char *model, char *out, size_t size)
{
    static const char *const drop[] = {"NVIDIA ", "Tesla "};
    const char *m = model;
    for (int again = 1; again;) {
        again = 0;
        for (size_t i = 0; i < SC_ARRAY_LEN(drop); i++) {
            size_t n = strlen(drop[i]);
            if (strncmp(m, drop[i], n) == 0 && m[n] != '\0') {
                m += n;
                again = 1;
            }
        }
    }
    size_t o = 0;
    for (; *m && o + 1 < size; m++) {
        char ch = isspace((unsigned char)*m) ? '-' : *m;
        if (ch == '-' && o > 0 && out[o - 1] == '-')
            continue;
        out[o++] = ch;
    }
    while (o > 0 && out[o - 1] == '-')
        o--;
    out[o] = '\0';
    if (o == 0)
        sc_strlcpy(out, "gpu", size);
}

/* Known parts: FP32 peak TFLOP/s and memory GiB, for exports that carry only a model name.
 * Matched as substrings, first match wins, so longer names come first. */
static const struct known_gpu {
    const char *match;
    double tflops;
    double mem_gib;
} known_gpus[] = {
    {"H200", 67.0, 141},     {"H100 PCIe", 51.2, 80},
    {"H100", 66.9, 80},      {"A100-SXM4-80GB", 19.5, 80},
    {"A100 80GB", 19.5, 80}, {"A100", 19.5, 40},
    {"A40", 37.4, 48},       {"A30", 10.3, 24},
    {"A10", 31.2, 24},       {"L40S", 91.6, 48},
    {"L40", 90.5, 48},       {"L4", 30.3, 24},
    {"V100", 15.7, 16},      {"P100", 10.6, 16},
    {"P40", 11.8, 24},       {"T4", 8.1, 16},
    {"K80", 4.1, 12},        {"K40", 4.3, 12},
    {"M2075", 1.03, 6},      {"RTX 4090", 82.6, 24},
    {"RTX 3090", 35.6, 24},  {"RTX 6000 Ada", 91.1, 48},
    {"TITAN V", 14.9, 12},
};

static const struct known_gpu *known_gpu(const char *model)
{
    for (size_t i = 0; i < SC_ARRAY_LEN(known_gpus); i++)
        if (strstr(model, known_gpus[i].match) != NULL)
            return &known_gpus[i];
    return NULL;
}

/* "…-32GB…" in a model name: memory in GiB (vendors' "GB" on GPU boards are binary). */
static uint64_t memory_from_model(const char *model)
{
    for (const char *p = model; *p; p++) {
        if (!isdigit((unsigned char)*p) || (p > model && isdigit((unsigned char)p[-1])))
            continue;
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (v > 0 && v <= 4096 && end[0] == 'G' && end[1] == 'B')
            return (uint64_t)v << 30;
    }
    return 0;
}

/* ---- loading ------------------------------------------------------------------------------ */

typedef struct {
    topo_server *s;
    size_t cap_devices, cap_ports, cap_nics;
} builder;

static topo_device *add_device(builder *b, sc_err *err)
{
    topo_server *s = b->s;
    if (s->n_devices == b->cap_devices) {
        size_t cap = b->cap_devices ? 2 * b->cap_devices : 8;
        topo_device *d = realloc(s->devices, cap * sizeof(*d));
        if (d == NULL) {
            SC_ERRF(err, SC_ERR_NOMEM, "out of memory listing devices");
            return NULL;
        }
        s->devices = d;
        b->cap_devices = cap;
    }
    topo_device *d = &s->devices[s->n_devices++];
    memset(d, 0, sizeof(*d));
    d->numa_node = -1;
    d->root_port = -1;
    d->cuda_index = -1;
    return d;
}

/* The root port above a PCI object: the bridge whose parent is a host bridge. Returns its
 * index in s->ports (added on first sight) or -1 when the device hangs off the host bridge. */
static int port_of(builder *b, hwloc_topology_t t, hwloc_obj_t pci, sc_err *err)
{
    hwloc_obj_t root = NULL;
    int bridges = 0;
    for (hwloc_obj_t o = pci->parent; o != NULL && o->type == HWLOC_OBJ_BRIDGE; o = o->parent) {
        if (o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST)
            break;
        root = o;
        bridges++;
    }
    if (root == NULL)
        return -1;
    char bus[TOPO_BUSID_MAX];
    busid_of(root, bus, sizeof(bus));
    topo_server *s = b->s;
    int switches = (bridges - 1) / 2; /* each switch: an upstream and a downstream port */
    for (size_t i = 0; i < s->n_ports; i++) {
        if (strcmp(s->ports[i].bus_id, bus) == 0) {
            if (switches > s->ports[i].n_switches)
                s->ports[i].n_switches = switches;
            return (int)i;
        }
    }
    if (s->n_ports == b->cap_ports) {
        size_t cap = b->cap_ports ? 2 * b->cap_ports : 8;
        topo_port *p = realloc(s->ports, cap * sizeof(*p));
        if (p == NULL) {
            SC_ERRF(err, SC_ERR_NOMEM, "out of memory listing PCIe ports");
            return -2;
        }
        s->ports = p;
        b->cap_ports = cap;
    }
    topo_port *p = &s->ports[s->n_ports];
    memset(p, 0, sizeof(*p));
    sc_strlcpy(p->bus_id, bus, sizeof(p->bus_id));
    p->numa_node = numa_of(t, root);
    p->n_switches = switches;
    if (root->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI && pci_attr(root)->linkspeed > 0) {
        p->uplink_bytes_per_s = pci_attr(root)->linkspeed * 1e9;
        p->uplink_source = TOPO_SRC_REPORTED;
    }
    return (int)s->n_ports++;
}

/* Fills a GPU device from its PCI object and compute OS devices (any may be NULL). */
static sc_status gpu_from_pci(builder *b, hwloc_topology_t t, hwloc_obj_t pci, sc_err *err)
{
    topo_device *d = add_device(b, err);
    if (d == NULL)
        return SC_ERR_NOMEM;
    d->kind = TOPO_DEV_GPU;
    busid_of(pci, d->pci_bus_id, sizeof(d->pci_bus_id));
    d->numa_node = numa_of(t, pci);
    if (pci->attr->pcidev.linkspeed > 0)
        d->pcie_link_bytes_per_s = pci->attr->pcidev.linkspeed * 1e9;
    int port = port_of(b, t, pci, err);
    if (port == -2)
        return SC_ERR_NOMEM;
    d->root_port = port;

    /* Prefer the richest OS device: CUDA carries memory and SMs, then OpenCL, then NVML. */
    hwloc_obj_t best = NULL;
    int best_rank = -1;
    size_t names = 0;
    for (hwloc_obj_t o = pci->io_first_child; o != NULL; o = o->next_sibling) {
        if (!is_compute_osdev(o))
            continue;
        int rank = strncmp(o->name, "cuda", 4) == 0     ? 3
                   : strncmp(o->name, "opencl", 6) == 0 ? 2
                                                        : 1;
        if (rank > best_rank) {
            best = o;
            best_rank = rank;
        }
        int w = snprintf(d->os_names + names, sizeof(d->os_names) - names, "%s%s", names ? "," : "",
                         o->name);
        if (w > 0 && names + (size_t)w < sizeof(d->os_names))
            names += (size_t)w;
    }
    unsigned vendor = pci->attr->pcidev.vendor_id;
    const char *model = info(pci, INFO_MODEL); /* a stagecraft worker's export: CUDA's name */
    if (!*model && best)
        model = info(best, "GPUModel");
    if (!*model)
        model = info(pci, "PCIDevice");
    if (*model)
        sc_strlcpy(d->model, model, sizeof(d->model));
    else
        snprintf(d->model, sizeof(d->model), "%s GPU %04x:%04x", vendor_name(vendor), vendor,
                 pci->attr->pcidev.device_id);
    const char *vname = best ? info(best, "GPUVendor") : "";
    sc_strlcpy(d->vendor, *vname ? vname : vendor_name(vendor), sizeof(d->vendor));
    type_name_from_model(d->model, d->type_name, sizeof(d->type_name));

    if (vendor == PCI_VENDOR_NVIDIA) {
        d->supported = true;
    } else {
        d->supported = false;
        snprintf(d->unsupported_why, sizeof(d->unsupported_why),
                 "%s GPU: stagecraft kernels need CUDA (NVIDIA)", vendor_name(vendor));
    }

    /* hwloc writes CUDA and OpenCL memory sizes in KiB. */
    const char *mem = best ? info(best, "CUDAGlobalMemorySize") : "";
    if (!*mem && best)
        mem = info(best, "OpenCLGlobalMemorySize");
    /* KiB, at most 1 PB; anything else (negative, garbage) falls back to the estimates below */
    double kib = *mem ? num_in(mem, 1e12) : 0.0;
    if (kib > 0) {
        d->memory_bytes = (uint64_t)kib * 1024ull;
        d->memory_source = TOPO_SRC_REPORTED;
    }
    const struct known_gpu *k = known_gpu(d->model);
    if (d->memory_bytes == 0) {
        d->memory_bytes = memory_from_model(d->model);
        if (d->memory_bytes == 0 && k != NULL)
            d->memory_bytes = (uint64_t)(k->mem_gib * (double)(1ull << 30));
        if (d->memory_bytes)
            d->memory_source = TOPO_SRC_ESTIMATED;
    }
    if (best) {
        d->sm_count = atoi(info(best, "CUDAMultiProcessors"));
        if (d->sm_count == 0)
            d->sm_count = atoi(info(best, "OpenCLComputeUnits"));
    }
    if (k != NULL) {
        d->gflops = k->tflops * 1e3;
        d->gflops_source = TOPO_SRC_ESTIMATED;
    } else if (best && d->sm_count > 0 && atoi(info(best, "CUDACoresPerMP")) > 0) {
        d->gflops = 2.0 * d->sm_count * atoi(info(best, "CUDACoresPerMP")) * ASSUMED_GPU_HZ / 1e9;
        d->gflops_source = TOPO_SRC_ESTIMATED;
    } else {
        d->gflops = ASSUMED_GPU_GFLOPS;
        d->gflops_source = TOPO_SRC_ASSUMED;
    }

    /* An export written by a stagecraft worker: its CUDA and probe figures win. */
    const char *v;
    if (num_in(info(pci, INFO_MEM), 1e15) > 0) {
        d->memory_bytes = (uint64_t)num_in(info(pci, INFO_MEM), 1e15);
        d->memory_source = source_parse(info(pci, INFO_MEM_SRC));
    }
    if (num_in(info(pci, INFO_GFLOPS), 1e7) > 0) {
        d->gflops = num_in(info(pci, INFO_GFLOPS), 1e7);
        d->gflops_source = source_parse(info(pci, INFO_GFLOPS_SRC));
    }
    if (num_in(info(pci, INFO_SMS), 1e5) > 0)
        d->sm_count = (int)num_in(info(pci, INFO_SMS), 1e5);
    if (*(v = info(pci, INFO_CC)) && sscanf(v, "%d.%d", &d->cc_major, &d->cc_minor) != 2)
        d->cc_major = d->cc_minor = 0;
    d->h2d_bytes_per_s = num_in(info(pci, INFO_H2D), 1e13);
    d->d2d_bytes_per_s = num_in(info(pci, INFO_D2D), 1e14);
    if (*(v = info(pci, INFO_UNSUPPORTED))) {
        d->supported = false;
        sc_strlcpy(d->unsupported_why, v, sizeof(d->unsupported_why));
    }
    return SC_OK;
}

/* Writes what this load learned into the hwloc objects (see INFO_*). */
static void annotate(const topo_server *s, hwloc_topology_t t)
{
    for (size_t i = 0; i < s->n_devices; i++) {
        const topo_device *d = &s->devices[i];
        if (d->kind == TOPO_DEV_CPU) {
            hwloc_obj_t root = hwloc_get_root_obj(t);
            info_put(root, INFO_CPU_GFLOPS, "%.6g", d->gflops);
            info_put(root, INFO_CPU_GFLOPS_SRC, "%s", topo_source_str(d->gflops_source));
            continue;
        }
        hwloc_obj_t pci =
            d->pci_bus_id[0] ? hwloc_get_pcidev_by_busidstring(t, d->pci_bus_id) : NULL;
        if (pci == NULL)
            continue;
        info_put(pci, INFO_MODEL, "%s", d->model);
        info_put(pci, INFO_MEM, "%llu", (unsigned long long)d->memory_bytes);
        info_put(pci, INFO_MEM_SRC, "%s", topo_source_str(d->memory_source));
        info_put(pci, INFO_GFLOPS, "%.6g", d->gflops);
        info_put(pci, INFO_GFLOPS_SRC, "%s", topo_source_str(d->gflops_source));
        if (d->sm_count > 0)
            info_put(pci, INFO_SMS, "%d", d->sm_count);
        if (d->cc_major > 0)
            info_put(pci, INFO_CC, "%d.%d", d->cc_major, d->cc_minor);
        if (d->h2d_bytes_per_s > 0)
            info_put(pci, INFO_H2D, "%.6g", d->h2d_bytes_per_s);
        if (d->d2d_bytes_per_s > 0)
            info_put(pci, INFO_D2D, "%.6g", d->d2d_bytes_per_s);
        if (!d->supported)
            info_put(pci, INFO_UNSUPPORTED, "%s", d->unsupported_why);
    }
    for (size_t i = 0; i < s->n_nics; i++) {
        hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(t, s->nics[i].pci_bus_id);
        info_put(pci, INFO_NIC_BW, "%.6g", s->nics[i].bw_bytes_per_s);
        info_put(pci, INFO_NIC_BW_SRC, "%s", topo_source_str(s->nics[i].bw_source));
    }
    if (s->host_mem_bw_bytes_per_s > 0)
        info_put(hwloc_get_root_obj(t), INFO_HOST_BW, "%.6g", s->host_mem_bw_bytes_per_s);
}

static sc_status find_gpus(builder *b, hwloc_topology_t t, bool live, sc_err *err)
{
    int ignored = 0;
    char ignored_ids[160] = "";
    for (hwloc_obj_t pci = hwloc_get_next_pcidev(t, NULL); pci != NULL;
         pci = hwloc_get_next_pcidev(t, pci)) {
        int compute = 0;
        for (hwloc_obj_t o = pci->io_first_child; o != NULL; o = o->next_sibling)
            compute |= is_compute_osdev(o);
        compute |= hwloc_obj_get_info_by_name(pci, INFO_MODEL) != NULL;
        int nvidia_gpu = pci->attr->pcidev.vendor_id == PCI_VENDOR_NVIDIA &&
                         (pci->attr->pcidev.class_id >> 8) == 0x03;
        if (compute || (live && nvidia_gpu)) {
            SC_CHECK(gpu_from_pci(b, t, pci, err));
        } else if (nvidia_gpu) {
            /* In an export, an NVIDIA board without a CUDA/NVML/OpenCL device had no driver
             * on the machine that wrote it: nothing could run there. */
            char bus[TOPO_BUSID_MAX];
            busid_of(pci, bus, sizeof(bus));
            size_t l = strlen(ignored_ids);
            if (l + strlen(bus) + 3 < sizeof(ignored_ids))
                snprintf(ignored_ids + l, sizeof(ignored_ids) - l, "%s%s", l ? ", " : "", bus);
            ignored++;
        }
    }
    if (ignored) {
        size_t l = strlen(b->s->notes);
        snprintf(b->s->notes + l, sizeof(b->s->notes) - l,
                 "%signored %d NVIDIA PCI device(s) without a compute driver (%s)", l ? "; " : "",
                 ignored, ignored_ids);
    }
    return SC_OK;
}

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

static sc_status find_nics(builder *b, hwloc_topology_t t, bool live, sc_err *err)
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
        busid_of(pci, bus, sizeof(bus));
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
        sc_strlcpy(nic->model, info(pci, "PCIDevice"), sizeof(nic->model));
        nic->numa_node = numa_of(t, pci);
    }
    for (size_t i = 0; i < s->n_nics; i++) {
        topo_nic *nic = &s->nics[i];
        hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(t, nic->pci_bus_id);
        double annotated = pci ? num_in(info(pci, INFO_NIC_BW), 1e13) : 0;
        if (annotated > 0) {
            nic->bw_bytes_per_s = annotated;
            nic->bw_source = source_parse(info(pci, INFO_NIC_BW_SRC));
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
    busid_of(o, bus, sizeof(bus));
    for (size_t i = 0; i < s->n_devices; i++)
        if (s->devices[i].kind == TOPO_DEV_GPU && strcmp(s->devices[i].pci_bus_id, bus) == 0)
            return (int)i;
    return -1;
}

/* NVLink matrix from hwloc's "NVLinkBandwidth" distances (MB/s, row = from). Objects may be
 * GPUs (by OS device or PCI device), NVSwitches (PCI devices) or CPUs (packages): GPU pairs
 * add their direct links, and two GPUs that both reach NVSwitches also talk through the
 * switch fabric at the smaller of their two switch bandwidths. */
static sc_status read_nvlink(topo_server *s, hwloc_topology_t t, sc_err *err)
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

static int cmp_device(const void *a, const void *b)
{
    const topo_device *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind == TOPO_DEV_GPU ? -1 : 1;
    return strcmp(x->pci_bus_id, y->pci_bus_id);
}

/* Live machine: pair GPUs with CUDA devices by bus id; CUDA devices hwloc did not see (a
 * container without /sys PCI access) are added with what CUDA knows. */
static sc_status pair_cuda(builder *b, bool measure, sc_err *err)
{
    topo_server *s = b->s;
    topo_cuda *cuda = NULL;
    sc_err cerr;
    sc_err_clear(&cerr);
    if (topo_cuda_open(&cuda, &cerr) != SC_OK) {
        SC_LOG_DEBUG("topo", "no CUDA: %s", cerr.msg);
        for (size_t i = 0; i < s->n_devices; i++) {
            topo_device *d = &s->devices[i];
            if (d->kind == TOPO_DEV_GPU && d->supported) {
                d->supported = false;
                snprintf(d->unsupported_why, sizeof(d->unsupported_why), "%.100s", cerr.msg);
            }
        }
        return SC_OK;
    }
    for (int c = 0; c < topo_cuda_count(cuda); c++) {
        const topo_cuda_dev *cd = topo_cuda_device(cuda, c);
        topo_device *d = NULL;
        for (size_t i = 0; i < s->n_devices; i++)
            if (strcmp(s->devices[i].pci_bus_id, cd->pci_bus_id) == 0)
                d = &s->devices[i];
        if (d == NULL) {
            d = add_device(b, err);
            if (d == NULL) {
                topo_cuda_close(&cuda);
                return SC_ERR_NOMEM;
            }
            d->kind = TOPO_DEV_GPU;
            sc_strlcpy(d->pci_bus_id, cd->pci_bus_id, sizeof(d->pci_bus_id));
            sc_strlcpy(d->vendor, "NVIDIA", sizeof(d->vendor));
        }
        d->supported = true;
        d->cuda_index = c;
        sc_strlcpy(d->model, cd->name, sizeof(d->model));
        type_name_from_model(d->model, d->type_name, sizeof(d->type_name));
        d->memory_bytes = cd->memory_bytes;
        d->memory_source = TOPO_SRC_REPORTED;
        d->sm_count = cd->sm_count;
        d->cc_major = cd->cc_major;
        d->cc_minor = cd->cc_minor;
        snprintf(d->os_names, sizeof(d->os_names), "cuda%d", c);
        const struct known_gpu *k = known_gpu(d->model);
        if (k != NULL) {
            d->gflops = k->tflops * 1e3;
            d->gflops_source = TOPO_SRC_ESTIMATED;
        } else if (cd->sm_count > 0 && cd->clock_khz > 0) {
            /* 128 FP32 lanes per SM since Maxwell (64 on P100/V100: an over-estimate there,
             * but those are in the table) */
            d->gflops = 2.0 * 128 * cd->sm_count * (cd->clock_khz * 1e3) / 1e9;
            d->gflops_source = TOPO_SRC_ESTIMATED;
        } else {
            d->gflops = ASSUMED_GPU_GFLOPS;
            d->gflops_source = TOPO_SRC_ASSUMED;
        }
        if (measure) {
            double h2d = 0, d2d = 0, gf = 0;
            sc_err merr;
            sc_err_clear(&merr);
            if (topo_cuda_measure(cuda, c, &h2d, &d2d, &gf, &merr) != SC_OK)
                SC_LOG_WARN("topo", "cuda%d probes: %s", c, merr.msg);
            d->h2d_bytes_per_s = h2d;
            d->d2d_bytes_per_s = d2d;
            if (gf > 0) {
                d->gflops = gf;
                d->gflops_source = TOPO_SRC_MEASURED;
            }
        }
    }
    /* NVIDIA boards the driver does not list (disabled, other container) cannot be used. */
    for (size_t i = 0; i < s->n_devices; i++) {
        topo_device *d = &s->devices[i];
        if (d->kind == TOPO_DEV_GPU && d->supported && d->cuda_index < 0) {
            d->supported = false;
            sc_strlcpy(d->unsupported_why, "not visible to the CUDA driver",
                       sizeof(d->unsupported_why));
        }
    }
    topo_cuda_close(&cuda);
    return SC_OK;
}

static sc_status add_cpu_device(builder *b, hwloc_topology_t t, bool measure, sc_err *err)
{
    topo_server *s = b->s;
    topo_device *d = add_device(b, err);
    if (d == NULL)
        return SC_ERR_NOMEM;
    d->kind = TOPO_DEV_CPU;
    d->supported = true;
    sc_strlcpy(d->model, s->cpu_model[0] ? s->cpu_model : "cpu", sizeof(d->model));
    sc_strlcpy(d->type_name, "cpu", sizeof(d->type_name));
    sc_strlcpy(d->vendor, info(hwloc_get_root_obj(t), "CPUVendor"), sizeof(d->vendor));
    d->cpu_cores = s->n_cores;
    d->memory_bytes = s->host_memory_bytes;
    d->memory_source = TOPO_SRC_REPORTED;
    d->numa_node = s->n_numa == 1 ? 0 : -1;
    double hz = ASSUMED_CPU_HZ;
    unsigned nk = (unsigned)hwloc_cpukinds_get_nr(t, 0);
    for (unsigned k = 0; k < nk; k++) {
        struct hwloc_info_s *infos = NULL;
        unsigned ninfos = 0;
        if (hwloc_cpukinds_get_info(t, k, NULL, NULL, &ninfos, &infos, 0) != 0)
            continue;
        for (unsigned i = 0; i < ninfos; i++)
            if (strcmp(infos[i].name, "FrequencyMaxMHz") == 0 && atof(infos[i].value) > 0)
                hz = atof(infos[i].value) * 1e6;
    }
    d->gflops = (s->n_cores > 0 ? s->n_cores : 1) * hz * ASSUMED_CPU_FLOPS_PER_CYCLE / 1e9;
    d->gflops_source = TOPO_SRC_ESTIMATED;
    hwloc_obj_t root = hwloc_get_root_obj(t);
    if (num_in(info(root, INFO_CPU_GFLOPS), 1e7) > 0) {
        d->gflops = num_in(info(root, INFO_CPU_GFLOPS), 1e7);
        d->gflops_source = source_parse(info(root, INFO_CPU_GFLOPS_SRC));
    }
    if (measure) {
        double gf = 0;
        sc_err perr;
        sc_err_clear(&perr);
        /* One core measured, scaled by the core count: the kernels use every core. */
        if (topo_probe_cpu_gemm(256, 3, &gf, &perr) == SC_OK) {
            d->gflops = gf * (s->n_cores > 0 ? s->n_cores : 1);
            d->gflops_source = TOPO_SRC_MEASURED;
        } else {
            SC_LOG_WARN("topo", "cpu gemm probe: %s", perr.msg);
        }
    }
    return SC_OK;
}

static void basename_no_ext(const char *path, char *out, size_t size)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    sc_strlcpy(out, base, size);
    size_t n = strlen(out);
    if (n > 4 && strcmp(out + n - 4, ".xml") == 0)
        out[n - 4] = '\0';
}

sc_status topo_server_new(topo_server **out, const topo_cfg *cfg, sc_err *err)
{
    *out = NULL;
    int n_sources = (cfg->xml_path != NULL) + (cfg->xml_buffer != NULL) + (cfg->synthetic != NULL);
    if (n_sources > 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "topology: give one of an XML file, an XML buffer "
                       "or a synthetic description");
    bool live = n_sources == 0;
    const char *source = cfg->source_name  ? cfg->source_name
                         : cfg->xml_path   ? cfg->xml_path
                         : cfg->xml_buffer ? "hwloc XML buffer"
                         : cfg->synthetic  ? "synthetic topology"
                                           : "live";
    size_t max_bytes = cfg->max_xml_bytes ? cfg->max_xml_bytes : TOPO_XML_MAX_BYTES;

    sc_status rc = SC_OK;
    char *file_text = NULL;
    builder b = {0};
    topo_server *s = calloc(1, sizeof(*s));
    SC_ALLOC_CHECK(s, err);
    b.s = s;
    s->hw = calloc(1, sizeof(*s->hw));
    if (s->hw == NULL) {
        free(s);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    }
    sc_strlcpy(s->source, source, sizeof(s->source));
    if (hwloc_topology_init(&s->hw->topo) != 0) {
        free(s->hw);
        free(s);
        return SC_ERRF(err, SC_ERR_NOMEM, "hwloc_topology_init failed");
    }
    hwloc_topology_t t = s->hw->topo;
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);

    const char *text = NULL;
    size_t text_len = 0;
    if (cfg->xml_path != NULL) {
        /* Read it ourselves: the size cap and the checks apply before hwloc parses it. */
        SC_CHECK_GOTO(sc_file_read(cfg->xml_path, max_bytes, &file_text, &text_len, err), fail);
        text = file_text;
    } else if (cfg->xml_buffer != NULL) {
        text = cfg->xml_buffer;
        text_len = cfg->xml_len;
    }
    if (text != NULL) {
        SC_CHECK_GOTO(topo_xml_check(text, text_len, max_bytes, source, err), fail);
        size_t bom = topo_xml_bom(text, text_len);
        text += bom;
        text_len -= bom;
        /* hwloc wants the terminating NUL counted; a buffer from the network may lack one. */
        char *copy = malloc(text_len + 1);
        if (copy == NULL) {
            rc = SC_ERRF(err, SC_ERR_NOMEM, "%s: out of memory", source);
            goto fail;
        }
        memcpy(copy, text, text_len);
        copy[text_len] = '\0';
        free(file_text);
        file_text = copy;
        if (hwloc_topology_set_xmlbuffer(t, file_text, (int)text_len + 1) != 0) {
            rc = SC_ERRF(err, SC_ERR_PARSE, "%s: hwloc refused the XML: %s", source,
                         strerror(errno));
            goto fail;
        }
    } else if (cfg->synthetic != NULL) {
        if (hwloc_topology_set_synthetic(t, cfg->synthetic) != 0) {
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "%s: invalid hwloc synthetic description \"%s\" (e.g. \"pack:2 core:4 "
                         "pu:1\")",
                         source, cfg->synthetic);
            goto fail;
        }
    }
    if (hwloc_topology_load(t) != 0) {
        rc = SC_ERRF(err, SC_ERR_PARSE,
                     "%s: hwloc could not load the topology (%s): not a valid hwloc 2.x export",
                     source, strerror(errno));
        goto fail;
    }
    free(file_text);
    file_text = NULL;

    hwloc_obj_t root = hwloc_get_root_obj(t);
    s->n_packages = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
    s->n_numa = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    s->n_cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    s->n_pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
    if (s->n_cores <= 0)
        s->n_cores = s->n_pus;
    if (s->n_pus <= 0) {
        rc = SC_ERRF(err, SC_ERR_INVALID, "%s: the topology has no processing unit", source);
        goto fail;
    }
    s->host_memory_bytes = root->total_memory;
    hwloc_obj_t pkg = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    const char *cpu = pkg ? info(pkg, "CPUModel") : "";
    sc_strlcpy(s->cpu_model, *cpu ? cpu : info(root, "CPUModel"), sizeof(s->cpu_model));
    if (s->n_packages > 1)
        s->socket_link_bytes_per_s = ASSUMED_SOCKET_BYTES_PER_S;

    if (cfg->hostname != NULL && cfg->hostname[0]) {
        sc_strlcpy(s->hostname, cfg->hostname, sizeof(s->hostname));
    } else if (*info(root, "HostName")) {
        sc_strlcpy(s->hostname, info(root, "HostName"), sizeof(s->hostname));
    } else if (live && gethostname(s->hostname, sizeof(s->hostname) - 1) == 0) {
        s->hostname[sizeof(s->hostname) - 1] = '\0';
    } else if (cfg->xml_path != NULL) {
        basename_no_ext(cfg->xml_path, s->hostname, sizeof(s->hostname));
    } else {
        sc_strlcpy(s->hostname, "server", sizeof(s->hostname));
    }

    SC_CHECK_GOTO(find_gpus(&b, t, live, err), fail);
    for (size_t i = 0; i < s->n_ports; i++) {
        /* A root port whose link speed hwloc did not record: take the fastest device link
         * below it, or assume a PCIe 3.0 x16 slot. */
        topo_port *p = &s->ports[i];
        if (p->uplink_bytes_per_s > 0)
            continue;
        for (size_t k = 0; k < s->n_devices; k++)
            if (s->devices[k].root_port == (int)i &&
                s->devices[k].pcie_link_bytes_per_s > p->uplink_bytes_per_s)
                p->uplink_bytes_per_s = s->devices[k].pcie_link_bytes_per_s;
        p->uplink_source = p->uplink_bytes_per_s > 0 ? TOPO_SRC_REPORTED : TOPO_SRC_ASSUMED;
        if (p->uplink_bytes_per_s <= 0)
            p->uplink_bytes_per_s = ASSUMED_PCIE_BYTES_PER_S;
    }
    if (live && cfg->use_cuda)
        SC_CHECK_GOTO(pair_cuda(&b, cfg->measure, err), fail);
    if (s->n_devices > 1)
        qsort(s->devices, s->n_devices, sizeof(*s->devices), cmp_device);
    SC_CHECK_GOTO(find_nics(&b, t, live, err), fail);
    s->host_mem_bw_bytes_per_s = num_in(info(root, INFO_HOST_BW), 1e14);
    if (live && cfg->measure) {
        sc_err perr;
        sc_err_clear(&perr);
        if (topo_probe_host_copy(64u << 20, 5, &s->host_mem_bw_bytes_per_s, &perr) != SC_OK)
            SC_LOG_WARN("topo", "host copy probe: %s", perr.msg);
    }
    if (topo_server_usable_devices(s) == 0)
        SC_CHECK_GOTO(add_cpu_device(&b, t, live && cfg->measure, err), fail);
    SC_CHECK_GOTO(read_nvlink(s, t, err), fail);
    annotate(s, t);
    *out = s;
    return SC_OK;
fail:
    free(file_text);
    topo_server_destroy(&s);
    return rc != SC_OK ? rc : SC_ERR_INTERNAL;
}

void topo_server_destroy(topo_server **sp)
{
    if (sp == NULL || *sp == NULL)
        return;
    topo_server *s = *sp;
    if (s->hw != NULL) {
        if (s->hw->topo != NULL)
            hwloc_topology_destroy(s->hw->topo);
        free(s->hw);
    }
    free(s->devices);
    free(s->ports);
    free(s->nics);
    free(s->nvlink_bytes_per_s);
    free(s);
    *sp = NULL;
}

sc_status topo_server_export_xml(const topo_server *s, char **xml, size_t *len, sc_err *err)
{
    *xml = NULL;
    *len = 0;
    char *buf = NULL;
    int n = 0;
    if (hwloc_topology_export_xmlbuffer(s->hw->topo, &buf, &n, 0) != 0 || buf == NULL || n <= 0)
        return SC_ERRF(err, SC_ERR_INTERNAL, "%s: hwloc could not export the topology as XML",
                       s->source);
    /* n counts the terminating NUL. */
    char *copy = malloc((size_t)n);
    if (copy == NULL) {
        hwloc_free_xmlbuffer(s->hw->topo, buf);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory exporting XML");
    }
    memcpy(copy, buf, (size_t)n);
    copy[n - 1] = '\0';
    hwloc_free_xmlbuffer(s->hw->topo, buf);
    *xml = copy;
    *len = strlen(copy);
    return SC_OK;
}

size_t topo_server_usable_devices(const topo_server *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_devices; i++)
        n += s->devices[i].supported;
    return n;
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
