/*
 * topo: loads one server's topology (see topo.h) and owns its lifecycle: picking the source,
 * bounding and checking XML before hwloc parses it, the server-wide figures (packages, cores,
 * memory, hostname), then the devices, ports, NICs and NVLink matrix in that order.
 *
 * hwloc keeps no PCI or OS devices unless the I/O type filter asks for them, even when reading
 * XML, so every load sets it to KEEP_IMPORTANT (GPUs, NICs, their bridges; no DMA channels).
 *
 * Not here: what a device, NIC or link is (topo_devices.c, topo_links.c), the info attributes
 * (topo_info.c).
 *
 * Key invariant: on any error the half-built server is destroyed and *out stays NULL.
 */
#include "topology/topo.h"

#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "topology/topo_internal.h"
#include "topology/topo_probe.h"

struct topo_hw {
    hwloc_topology_t topo;
};

static int cmp_device(const void *a, const void *b)
{
    const topo_device *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind == TOPO_DEV_GPU ? -1 : 1;
    return strcmp(x->pci_bus_id, y->pci_bus_id);
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
    topo_builder b = {0};
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
    SC_CHECK_GOTO(topo_numa_read(t, &s->numa_nodes, &s->n_numa_nodes, err), fail);
    s->host_memory_bytes = root->total_memory;
    hwloc_obj_t pkg = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    const char *cpu = pkg ? topo_obj_info(pkg, "CPUModel") : "";
    sc_strlcpy(s->cpu_model, *cpu ? cpu : topo_obj_info(root, "CPUModel"), sizeof(s->cpu_model));
    if (s->n_packages > 1)
        s->socket_link_bytes_per_s = ASSUMED_SOCKET_BYTES_PER_S;

    if (cfg->hostname != NULL && cfg->hostname[0]) {
        sc_strlcpy(s->hostname, cfg->hostname, sizeof(s->hostname));
    } else if (*topo_obj_info(root, "HostName")) {
        sc_strlcpy(s->hostname, topo_obj_info(root, "HostName"), sizeof(s->hostname));
    } else if (live && gethostname(s->hostname, sizeof(s->hostname) - 1) == 0) {
        s->hostname[sizeof(s->hostname) - 1] = '\0';
    } else if (cfg->xml_path != NULL) {
        basename_no_ext(cfg->xml_path, s->hostname, sizeof(s->hostname));
    } else {
        sc_strlcpy(s->hostname, "server", sizeof(s->hostname));
    }

    SC_CHECK_GOTO(topo_find_gpus(&b, t, live, err), fail);
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
        SC_CHECK_GOTO(topo_pair_cuda(&b, cfg->measure, err), fail);
    if (s->n_devices > 1)
        qsort(s->devices, s->n_devices, sizeof(*s->devices), cmp_device);
    SC_CHECK_GOTO(topo_find_nics(&b, t, live, err), fail);
    s->host_mem_bw_bytes_per_s = topo_info_num(topo_obj_info(root, INFO_HOST_BW), 1e14);
    if (live && cfg->measure) {
        sc_err perr;
        sc_err_clear(&perr);
        if (topo_probe_host_copy(64u << 20, 5, &s->host_mem_bw_bytes_per_s, &perr) != SC_OK)
            SC_LOG_WARN("topo", "host copy probe: %s", perr.msg);
    }
    if (cfg->cpu_device || topo_server_usable_devices(s) == 0)
        SC_CHECK_GOTO(topo_add_cpu_device(&b, t, live && cfg->measure, err), fail);
    SC_CHECK_GOTO(topo_read_nvlink(s, t, err), fail);
    topo_annotate(s, t);
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
    free(s->numa_nodes);
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
