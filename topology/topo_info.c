/*
 * topo_info: small reads of hwloc objects (info attributes, NUMA placement, PCI bus ids) and
 * the "Stagecraft*" info attributes through which a live load's findings (CUDA properties,
 * probe results, NIC speeds) travel inside an hwloc XML export.
 *
 * Not here: deciding what an object is (topo_devices.c, topo_links.c).
 *
 * Key invariant: a figure read back from an attribute passes topo_info_num's range check, and
 * topo_annotate never overwrites an attribute, so exporting an imported topology keeps the
 * figures of the machine that measured them.
 */
#include "topology/topo.h"

#include <hwloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topology/topo_internal.h"

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

const char *topo_obj_info(hwloc_obj_t o, const char *name)
{
    const char *v = hwloc_obj_get_info_by_name(o, name);
    return v != NULL ? v : "";
}

double topo_info_num(const char *v, double max)
{
    double x = atof(v);
    return x > 0 && x <= max ? x : 0;
}

topo_source topo_source_parse(const char *s)
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

int topo_obj_numa(hwloc_topology_t t, hwloc_obj_t o)
{
    hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(t, o);
    if (a == NULL || a->nodeset == NULL || hwloc_bitmap_weight(a->nodeset) != 1)
        return -1;
    return hwloc_bitmap_first(a->nodeset);
}

const struct hwloc_pcidev_attr_s *topo_obj_pci_attr(hwloc_obj_t o)
{
    return o->type == HWLOC_OBJ_BRIDGE ? &o->attr->bridge.upstream.pci : &o->attr->pcidev;
}

void topo_obj_busid(hwloc_obj_t pci, char *out, size_t size)
{
    const struct hwloc_pcidev_attr_s *a = topo_obj_pci_attr(pci);
    snprintf(out, size, "%04x:%02x:%02x.%x", a->domain, a->bus, a->dev, a->func);
}
/* Writes what this load learned into the hwloc objects (see INFO_*). */
void topo_annotate(const topo_server *s, hwloc_topology_t t)
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
