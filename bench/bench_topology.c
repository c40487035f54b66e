/*
 * bench_topology: what topology discovery costs and what the probes measure here.
 *
 *   bench_topology [XML ...]
 *
 * For each hwloc XML export given: the time to check and load it and to add it to a cluster
 * model, and the time to write the cluster JSON (best of 20). Then, on this machine: the time
 * of a live discovery without probes, the host copy bandwidth and single-core matmul rate at a
 * few sizes, and, when a CUDA driver is present, each GPU's copy rates and SGEMM rate.
 * Prints figures; asserts nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "topology/topo.h"
#include "topology/topo_cluster.h"
#include "topology/topo_cuda.h"
#include "topology/topo_probe.h"

static void bench_file(const char *path)
{
    double best_load = 1e9, best_json = 1e9;
    size_t devices = 0, links = 0, bytes = 0;
    for (int r = 0; r < 20; r++) {
        sc_err err;
        sc_err_clear(&err);
        topo_cfg cfg = {0};
        cfg.xml_path = path;
        topo_server *s = NULL;
        topo_cluster *c = NULL;
        double t0 = sc_clock_now_s();
        if (topo_server_new(&s, &cfg, &err) != SC_OK || topo_cluster_new(&c, &err) != SC_OK ||
            topo_cluster_add(c, s, &err) != SC_OK) {
            printf("%s: %s\n", path, err.msg);
            topo_server_destroy(&s);
            topo_cluster_destroy(&c);
            return;
        }
        double t1 = sc_clock_now_s();
        char *json = NULL;
        if (topo_cluster_to_json(c, &json, &err) != SC_OK) {
            printf("%s: %s\n", path, err.msg);
        } else {
            double t2 = sc_clock_now_s();
            best_json = t2 - t1 < best_json ? t2 - t1 : best_json;
            bytes = strlen(json);
        }
        best_load = t1 - t0 < best_load ? t1 - t0 : best_load;
        devices = topo_cluster_devices(c);
        links = topo_cluster_links(c);
        free(json);
        topo_server_destroy(&s);
        topo_cluster_destroy(&c);
    }
    printf("%-48s load+model %8.3f ms  json %7.3f ms  %3zu devices %4zu links %7zu bytes\n", path,
           best_load * 1e3, best_json * 1e3, devices, links, bytes);
}

int main(int argc, char **argv)
{
    printf("== XML imports (best of 20)\n");
    for (int i = 1; i < argc; i++)
        bench_file(argv[i]);

    printf("\n== this machine\n");
    sc_err err;
    sc_err_clear(&err);
    topo_cfg cfg = {0};
    topo_server *s = NULL;
    double t0 = sc_clock_now_s();
    if (topo_server_new(&s, &cfg, &err) == SC_OK)
        printf("live discovery (hwloc, no CUDA, no probes): %.1f ms, %d cores, %d NUMA node(s)\n",
               (sc_clock_now_s() - t0) * 1e3, s->n_cores, s->n_numa);
    else
        printf("live discovery: %s\n", err.msg);
    topo_server_destroy(&s);

    static const size_t copy_bytes[] = {1u << 20, 16u << 20, 256u << 20};
    for (size_t i = 0; i < sizeof(copy_bytes) / sizeof(copy_bytes[0]); i++) {
        double bw = 0;
        sc_err_clear(&err);
        if (topo_probe_host_copy(copy_bytes[i], 5, &bw, &err) == SC_OK)
            printf("host copy %4zu MiB: %6.2f GB/s (read + write)\n", copy_bytes[i] >> 20,
                   bw / 1e9);
        else
            printf("host copy: %s\n", err.msg);
    }
    static const int sizes[] = {128, 256, 512};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        double gf = 0;
        sc_err_clear(&err);
        if (topo_probe_cpu_gemm(sizes[i], 3, &gf, &err) == SC_OK)
            printf("cpu sgemm n=%4d (one core): %6.2f GFLOP/s\n", sizes[i], gf);
        else
            printf("cpu sgemm: %s\n", err.msg);
    }

    topo_cuda *cuda = NULL;
    sc_err_clear(&err);
    if (topo_cuda_open(&cuda, &err) != SC_OK) {
        printf("cuda: %s\n", err.msg);
        return 0;
    }
    for (int g = 0; g < topo_cuda_count(cuda); g++) {
        const topo_cuda_dev *d = topo_cuda_device(cuda, g);
        double h2d = 0, d2d = 0, gf = 0;
        sc_err_clear(&err);
        sc_status rc = topo_cuda_measure(cuda, g, &h2d, &d2d, &gf, &err);
        printf("cuda%d %s (%s, %.1f GiB, %d SMs, cc %d.%d): h2d %.1f GB/s, d2d %.0f GB/s, "
               "sgemm %.0f GFLOP/s%s%s\n",
               g, d->name, d->pci_bus_id, d->memory_bytes / 1073741824.0, d->sm_count, d->cc_major,
               d->cc_minor, h2d / 1e9, d2d / 1e9, gf, rc == SC_OK ? "" : "  ",
               rc == SC_OK ? "" : err.msg);
    }
    topo_cuda_close(&cuda);
    return 0;
}
