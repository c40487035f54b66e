/*
 * `stagecraft topo`: show the hardware of this machine, or of hwloc XML exports (one server
 * each), as a tree and link table or as the cluster JSON that `stagecraft plan --cluster`
 * reads; or, with --cpu-workers, the NUMA nodes to start one CPU worker on each. Parsing flags and
 * printing only; discovery and the model live in topology/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "topology/topo.h"
#include "topology/topo_cluster.h"
#include "topology/topo_numa.h"

int cmd_topo(const cli_command *self, int argc, char **argv)
{
    int json = 0, measure = 1, use_cuda = 1, cpu_workers = 0;
    const char *export_xml = NULL;
    const char **files = calloc((size_t)argc, sizeof(*files));
    if (files == NULL) {
        fprintf(stderr, "stagecraft topo: out of memory\n");
        return CLI_FAILURE;
    }
    size_t n_files = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--no-measure") == 0) {
            measure = 0;
        } else if (strcmp(a, "--no-cuda") == 0) {
            use_cuda = 0;
        } else if (strcmp(a, "--cpu-workers") == 0) {
            cpu_workers = 1;
        } else if (strcmp(a, "--xml") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '-') {
                free(files);
                return cli_usage_error(self, "--xml needs a FILE (an hwloc XML export)");
            }
            /* --xml takes every following non-flag argument: --xml a.xml b.xml */
            while (i + 1 < argc && argv[i + 1][0] != '-')
                files[n_files++] = argv[++i];
        } else if (strcmp(a, "--export-xml") == 0) {
            if (i + 1 >= argc) {
                free(files);
                return cli_usage_error(self, "--export-xml needs a FILE to write");
            }
            export_xml = argv[++i];
        } else {
            free(files);
            return cli_usage_error(self, "unknown argument '%s'", a);
        }
    }
    if (export_xml != NULL && n_files > 1) {
        free(files);
        return cli_usage_error(self, "--export-xml writes one server: give at most one --xml FILE");
    }
    if (cpu_workers && (n_files > 1 || json || export_xml != NULL)) {
        free(files);
        return cli_usage_error(self, "--cpu-workers prints one server's layout: give at most one "
                                     "--xml FILE, and no --json or --export-xml");
    }

    sc_err err;
    sc_err_clear(&err);
    int rc = CLI_OK;
    topo_cluster *cluster = NULL;
    topo_server *server = NULL;
    char *text = NULL;
    if (topo_cluster_new(&cluster, &err) != SC_OK)
        goto fail;
    for (size_t f = 0; f < (n_files ? n_files : 1); f++) {
        topo_cfg cfg = {0};
        cfg.xml_path = n_files ? files[f] : NULL;
        cfg.use_cuda = use_cuda && !cpu_workers; /* the layout needs CPUs and nodes only */
        cfg.measure = measure && !cpu_workers;
        if (topo_server_new(&server, &cfg, &err) != SC_OK)
            goto fail;
        if (cpu_workers) {
            /* one line per CPU worker to start: the NUMA node it binds to */
            for (size_t i = 0; i < server->n_numa_nodes; i++)
                if (server->numa_nodes[i].worker)
                    printf("%d\n", server->numa_nodes[i].os_index);
            goto out;
        }
        if (export_xml != NULL) {
            size_t len = 0;
            if (topo_server_export_xml(server, &text, &len, &err) != SC_OK)
                goto fail;
            FILE *out = fopen(export_xml, "w");
            if (out == NULL || fwrite(text, 1, len, out) != len) {
                if (out)
                    fclose(out);
                SC_ERRF(&err, SC_ERR_IO, "%s: cannot write the XML export", export_xml);
                rc = CLI_FAILURE;
                fprintf(stderr, "stagecraft topo: %s\n", err.msg);
                goto out;
            }
            fclose(out);
            free(text);
            text = NULL;
        }
        if (topo_cluster_add(cluster, server, &err) != SC_OK)
            goto fail;
        topo_server_destroy(&server);
    }
    if (json) {
        if (topo_cluster_to_json(cluster, &text, &err) != SC_OK)
            goto fail;
        printf("%s\n", text);
    } else {
        topo_cluster_print(cluster, stdout);
    }
    goto out;
fail:
    rc = cli_report(self, &err);
out:
    free(text);
    topo_server_destroy(&server);
    topo_cluster_destroy(&cluster);
    free(files);
    return rc;
}
