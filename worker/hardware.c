/*
 * Worker hardware report from topology discovery (see hardware.h). The report owns copies of
 * everything it points to, so the topology can be freed right after.
 */
#include "worker/hardware.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "kernels/threads_cpu.h"
#include "topology/topo.h"
#include "worker/transport/transport_rate.h"

/* The largest topology XML a report carries; larger exports are left out (the coordinator then
 * plans from the device list alone). */
#define WK_REPORT_XML_MAX (1u << 20)

sc_status wk_device_parse(const char *device, bool *is_cuda, int *index, sc_err *err)
{
    if (strcmp(device, "cpu") == 0) {
        *is_cuda = false;
        *index = 0;
        return SC_OK;
    }
    if (strncmp(device, "cuda:", 5) == 0) {
        int64_t n;
        sc_err sub;
        sc_err_clear(&sub);
        if (sc_parse_int64(device + 5, 0, 1023, "device", &n, &sub) == SC_OK) {
            *is_cuda = true;
            *index = (int)n;
            return SC_OK;
        }
    }
    return SC_ERRF(err, SC_ERR_INVALID, "--device '%s': expected cpu or cuda:N (N = 0, 1, ...)",
                   device);
}

static char *dup_or_empty(const char *s)
{
    return strdup(s ? s : "");
}

void wk_hardware_free(Stagecraft__HardwareReport **report)
{
    if (report == NULL || *report == NULL)
        return;
    Stagecraft__HardwareReport *r = *report;
    for (size_t i = 0; i < r->n_devices; i++) {
        free(r->devices[i]->kind);
        free(r->devices[i]->name);
        free(r->devices[i]->pci_bus_id);
        free(r->devices[i]->compute_capability);
        free(r->devices[i]);
    }
    free(r->devices);
    free(r->hostname);
    if (r->state_endpoint != protobuf_c_empty_string)
        free(r->state_endpoint);
    free(r->hwloc_xml.data);
    free(r);
    *report = NULL;
}

sc_status wk_hardware_report(const char *device, bool measure, Stagecraft__HardwareReport **out,
                             sc_err *err)
{
    *out = NULL;
    bool is_cuda;
    int index;
    SC_CHECK(wk_device_parse(device, &is_cuda, &index, err));
    /* a CPU worker on a GPU server runs on the host's processors, which the topology lists as a
     * device only when asked once it has found GPUs */
    topo_cfg cfg = {.use_cuda = is_cuda, .measure = measure, .cpu_device = !is_cuda};
    topo_server *srv = NULL;
    SC_CHECK(topo_server_new(&srv, &cfg, err));

    const topo_device *dev = NULL;
    int gpus = 0;
    for (size_t i = 0; i < srv->n_devices; i++) {
        const topo_device *d = &srv->devices[i];
        if (d->kind == TOPO_DEV_GPU && d->cuda_index >= 0)
            gpus++;
        if (is_cuda ? d->kind == TOPO_DEV_GPU && d->cuda_index == index
                    : d->kind == TOPO_DEV_CPU)
            dev = d;
    }
    if (dev == NULL) {
        topo_server_destroy(&srv);
        if (is_cuda)
            return SC_ERRF(err, SC_ERR_NOT_FOUND,
                           "--device %s: this machine has %d usable CUDA device(s)%s", device,
                           gpus, gpus ? "" : "; run the worker with --device cpu");
        return SC_ERRF(err, SC_ERR_NOT_FOUND, "no CPU device found in this machine's topology");
    }

    sc_status rc = SC_OK;
    Stagecraft__HardwareReport *r = calloc(1, sizeof *r);
    Stagecraft__Device *d = calloc(1, sizeof *d);
    Stagecraft__Device **list = calloc(1, sizeof *list);
    if (r == NULL || d == NULL || list == NULL) {
        free(r);
        free(d);
        free(list);
        topo_server_destroy(&srv);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory building the hardware report");
    }
    stagecraft__hardware_report__init(r);
    stagecraft__device__init(d);
    list[0] = d;
    r->devices = list;
    r->n_devices = 1;
    r->hostname = dup_or_empty(srv->hostname);
    r->cpu_cores = (uint32_t)srv->n_cores;
    r->host_memory_bytes = srv->host_memory_bytes;
    for (size_t i = 0; i < srv->n_nics; i++)
        if (srv->nics[i].bw_bytes_per_s > r->nic_bandwidth_bytes_per_s)
            r->nic_bandwidth_bytes_per_s = srv->nics[i].bw_bytes_per_s;
    r->intra_bandwidth_bytes_per_s =
        dev->kind == TOPO_DEV_GPU ? topo_server_pair_bw(srv, (size_t)(dev - srv->devices),
                                                        (size_t)(dev - srv->devices))
                                  : srv->host_mem_bw_bytes_per_s;

    /* The device was found above, so a CUDA worker of an NCCL build can join nccl links. */
#ifdef SC_HAVE_NCCL
    r->nccl = is_cuda;
#endif
    d->index = (uint32_t)index;
    d->kind = dup_or_empty(is_cuda ? "cuda" : "cpu");
    d->name = dup_or_empty(dev->type_name[0] ? dev->type_name : dev->model);
    d->memory_bytes = dev->memory_bytes ? dev->memory_bytes : srv->host_memory_bytes;
    d->relative_speed = 0; /* decided by the coordinator from profiles */
    d->pci_bus_id = dup_or_empty(dev->pci_bus_id);
    d->numa_node = dev->numa_node;
    d->sm_count = (uint32_t)(dev->sm_count > 0 ? dev->sm_count : 0);
    char cc[16] = "";
    if (dev->cc_major > 0)
        snprintf(cc, sizeof cc, "%d.%d", dev->cc_major, dev->cc_minor);
    d->compute_capability = dup_or_empty(cc);
    d->gflops = dev->gflops;
    double quota_fraction, quota_cores, period_s;
    if (!is_cuda && kn_cpu_quota_binding(&quota_fraction, &quota_cores, &period_s)) {
        d->cpu_quota_fraction = quota_fraction;
        d->cpu_quota_period_s = period_s;
    }
    if (!is_cuda) {
        d->cpu_threads = (uint32_t)kn_cpu_threads();
        if (measure)
            d->transport_bytes_per_cpu_s = wk_transport_bytes_per_cpu_s();
    }
    if (d->kind == NULL || d->name == NULL || d->pci_bus_id == NULL ||
        d->compute_capability == NULL || r->hostname == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory building the hardware report");
        goto out;
    }

    char *xml = NULL;
    size_t xml_len = 0;
    if (topo_server_export_xml(srv, &xml, &xml_len, NULL) == SC_OK && xml_len <= WK_REPORT_XML_MAX) {
        r->hwloc_xml.data = (uint8_t *)xml;
        r->hwloc_xml.len = xml_len;
    } else {
        free(xml);
    }
out:
    topo_server_destroy(&srv);
    if (rc != SC_OK)
        wk_hardware_free(&r);
    *out = r;
    return rc;
}
