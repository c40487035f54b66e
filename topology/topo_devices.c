/*
 * topo_devices: a server's compute devices and the PCIe root ports above them. In an export
 * from another machine, a GPU is a PCI device that carries a compute OS device (GPU or CoProc
 * type: cudaN, nvmlN, openclNdM, rsmiN, zeN); display-only devices (cardN, renderDN) are not
 * compute devices. Debian's hwloc has no CUDA or NVML backend: on a live machine an NVIDIA GPU
 * is a bare PCI device (vendor 0x10de, class 0x03xx) that this file pairs with the CUDA driver
 * by bus id. A server with no usable GPU gets the CPU as its device.
 *
 * Not here: NICs and NVLink (topo_links.c), ordering the devices (topo.c).
 *
 * Key invariant: each physical GPU is added once, however many OS devices name it; figures
 * come with their topo_source, and a stagecraft worker's annotations win over estimates.
 */
#include "topology/topo.h"

#include <ctype.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "topology/topo_cuda.h"
#include "topology/topo_internal.h"
#include "topology/topo_probe.h"

enum { PCI_VENDOR_NVIDIA = 0x10de, PCI_VENDOR_AMD = 0x1002, PCI_VENDOR_INTEL = 0x8086 };

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
static topo_device *add_device(topo_builder *b, sc_err *err)
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
static int port_of(topo_builder *b, hwloc_topology_t t, hwloc_obj_t pci, sc_err *err)
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
    topo_obj_busid(root, bus, sizeof(bus));
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
    p->numa_node = topo_obj_numa(t, root);
    p->n_switches = switches;
    if (root->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI &&
        topo_obj_pci_attr(root)->linkspeed > 0) {
        p->uplink_bytes_per_s = topo_obj_pci_attr(root)->linkspeed * 1e9;
        p->uplink_source = TOPO_SRC_REPORTED;
    }
    return (int)s->n_ports++;
}

/* Fills a GPU device from its PCI object and compute OS devices (any may be NULL). */
static sc_status gpu_from_pci(topo_builder *b, hwloc_topology_t t, hwloc_obj_t pci, sc_err *err)
{
    topo_device *d = add_device(b, err);
    if (d == NULL)
        return SC_ERR_NOMEM;
    d->kind = TOPO_DEV_GPU;
    topo_obj_busid(pci, d->pci_bus_id, sizeof(d->pci_bus_id));
    d->numa_node = topo_obj_numa(t, pci);
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
    const char *model =
        topo_obj_info(pci, INFO_MODEL); /* a stagecraft worker's export: CUDA's name */
    if (!*model && best)
        model = topo_obj_info(best, "GPUModel");
    if (!*model)
        model = topo_obj_info(pci, "PCIDevice");
    if (*model)
        sc_strlcpy(d->model, model, sizeof(d->model));
    else
        snprintf(d->model, sizeof(d->model), "%s GPU %04x:%04x", vendor_name(vendor), vendor,
                 pci->attr->pcidev.device_id);
    const char *vname = best ? topo_obj_info(best, "GPUVendor") : "";
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
    const char *mem = best ? topo_obj_info(best, "CUDAGlobalMemorySize") : "";
    if (!*mem && best)
        mem = topo_obj_info(best, "OpenCLGlobalMemorySize");
    /* KiB, at most 1 PB; anything else (negative, garbage) falls back to the estimates below */
    double kib = *mem ? topo_info_num(mem, 1e12) : 0.0;
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
        d->sm_count = atoi(topo_obj_info(best, "CUDAMultiProcessors"));
        if (d->sm_count == 0)
            d->sm_count = atoi(topo_obj_info(best, "OpenCLComputeUnits"));
    }
    if (k != NULL) {
        d->gflops = k->tflops * 1e3;
        d->gflops_source = TOPO_SRC_ESTIMATED;
    } else if (best && d->sm_count > 0 && atoi(topo_obj_info(best, "CUDACoresPerMP")) > 0) {
        d->gflops =
            2.0 * d->sm_count * atoi(topo_obj_info(best, "CUDACoresPerMP")) * ASSUMED_GPU_HZ / 1e9;
        d->gflops_source = TOPO_SRC_ESTIMATED;
    } else {
        d->gflops = ASSUMED_GPU_GFLOPS;
        d->gflops_source = TOPO_SRC_ASSUMED;
    }

    /* An export written by a stagecraft worker: its CUDA and probe figures win. */
    const char *v;
    if (topo_info_num(topo_obj_info(pci, INFO_MEM), 1e15) > 0) {
        d->memory_bytes = (uint64_t)topo_info_num(topo_obj_info(pci, INFO_MEM), 1e15);
        d->memory_source = topo_source_parse(topo_obj_info(pci, INFO_MEM_SRC));
    }
    if (topo_info_num(topo_obj_info(pci, INFO_GFLOPS), 1e7) > 0) {
        d->gflops = topo_info_num(topo_obj_info(pci, INFO_GFLOPS), 1e7);
        d->gflops_source = topo_source_parse(topo_obj_info(pci, INFO_GFLOPS_SRC));
    }
    if (topo_info_num(topo_obj_info(pci, INFO_SMS), 1e5) > 0)
        d->sm_count = (int)topo_info_num(topo_obj_info(pci, INFO_SMS), 1e5);
    if (*(v = topo_obj_info(pci, INFO_CC)) && sscanf(v, "%d.%d", &d->cc_major, &d->cc_minor) != 2)
        d->cc_major = d->cc_minor = 0;
    d->h2d_bytes_per_s = topo_info_num(topo_obj_info(pci, INFO_H2D), 1e13);
    d->d2d_bytes_per_s = topo_info_num(topo_obj_info(pci, INFO_D2D), 1e14);
    if (*(v = topo_obj_info(pci, INFO_UNSUPPORTED))) {
        d->supported = false;
        sc_strlcpy(d->unsupported_why, v, sizeof(d->unsupported_why));
    }
    return SC_OK;
}

sc_status topo_find_gpus(topo_builder *b, hwloc_topology_t t, bool live, sc_err *err)
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
            topo_obj_busid(pci, bus, sizeof(bus));
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

/* Live machine: pair GPUs with CUDA devices by bus id; CUDA devices hwloc did not see (a
 * container without /sys PCI access) are added with what CUDA knows. */
sc_status topo_pair_cuda(topo_builder *b, bool measure, sc_err *err)
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

sc_status topo_add_cpu_device(topo_builder *b, hwloc_topology_t t, bool measure, sc_err *err)
{
    topo_server *s = b->s;
    topo_device *d = add_device(b, err);
    if (d == NULL)
        return SC_ERR_NOMEM;
    d->kind = TOPO_DEV_CPU;
    d->supported = true;
    sc_strlcpy(d->model, s->cpu_model[0] ? s->cpu_model : "cpu", sizeof(d->model));
    sc_strlcpy(d->type_name, "cpu", sizeof(d->type_name));
    sc_strlcpy(d->vendor, topo_obj_info(hwloc_get_root_obj(t), "CPUVendor"), sizeof(d->vendor));
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
    if (topo_info_num(topo_obj_info(root, INFO_CPU_GFLOPS), 1e7) > 0) {
        d->gflops = topo_info_num(topo_obj_info(root, INFO_CPU_GFLOPS), 1e7);
        d->gflops_source = topo_source_parse(topo_obj_info(root, INFO_CPU_GFLOPS_SRC));
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
