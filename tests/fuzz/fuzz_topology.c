/*
 * Fuzz target: an hwloc XML topology, as a worker's hardware report carries it (topo_server_new
 * from a buffer), turned into a cluster and its JSON when accepted.
 * Demands: no crash or undefined behaviour (in stagecraft's code; hwloc's own parser runs too);
 * a refusal has a message.
 */
#include "tests/fuzz/fuzz_common.h"

#include "topology/topo.h"
#include "topology/topo_cluster.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    topo_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.xml_buffer = text;
    cfg.xml_len = size;
    cfg.hostname = "fuzz";
    topo_server *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = topo_server_new(&s, &cfg, &err);
    fuzz_refusal(rc, &err, "the topology");
    if (rc == SC_OK) {
        topo_cluster *c = NULL;
        char *json = NULL;
        FUZZ_REQUIRE(topo_cluster_new(&c, &err) == SC_OK, "%s", err.msg);
        rc = topo_cluster_add(c, s, &err);
        fuzz_refusal(rc, &err, "adding the server");
        if (rc == SC_OK) {
            rc = topo_cluster_to_json(c, &json, &err);
            fuzz_refusal(rc, &err, "the cluster JSON");
        }
        free(json);
        topo_cluster_destroy(&c);
    }
    topo_server_destroy(&s);
    free(text);
    return 0;
}
