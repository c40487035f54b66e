/* topology/: hwloc XML import and its guards, synthetic topologies, device deduplication,
 * NUMA/PCIe/NVLink extraction, the cluster model and its JSON, the host probes. Driven by
 * the small fixtures in tests/data/topology/ and hwloc synthetic descriptions, never by the
 * build machine's hardware (one smoke test only checks that live discovery loads). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_json.h"
#include "common/sc_util.h"
#include "topology/topo.h"
#include "topology/topo_cluster.h"
#include "topology/topo_cuda.h"
#include "topology/topo_probe.h"

#define DATA SC_TEST_DATA_DIR "/topology/"

static topo_server *load_file(const char *name)
{
    topo_cfg cfg = {0};
    cfg.xml_path = name;
    topo_server *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = topo_server_new(&s, &cfg, &err);
    if (rc != SC_OK)
        fail_msg("%s: %s", name, err.msg);
    return s;
}

/* Loads a file expected to fail; returns the status and leaves the message in err. */
static sc_status load_fail(const char *name, sc_err *err)
{
    topo_cfg cfg = {0};
    cfg.xml_path = name;
    topo_server *s = NULL;
    sc_err_clear(err);
    sc_status rc = topo_server_new(&s, &cfg, err);
    assert_null(s);
    return rc;
}

static void test_gpu_server(void **state)
{
    (void)state;
    topo_server *s = load_file(DATA "gpu_server.xml");
    assert_string_equal(s->hostname, "gpu-a");
    assert_int_equal(s->n_packages, 2);
    assert_int_equal(s->n_numa, 2);
    assert_int_equal(s->n_cores, 8);
    assert_true(s->host_memory_bytes == 2ull * 34359738368ull);
    /* three GPUs: cuda0 + nvml0 name one of them */
    assert_int_equal(s->n_devices, 3);
    assert_int_equal(topo_server_usable_devices(s), 3);
    const topo_device *a100 = &s->devices[0], *v0 = &s->devices[1], *v1 = &s->devices[2];
    assert_int_equal(a100->kind, TOPO_DEV_GPU);
    assert_string_equal(a100->pci_bus_id, "0000:11:00.0");
    assert_string_equal(a100->os_names, "cuda0,nvml0");
    assert_string_equal(a100->type_name, "A100-SXM4-40GB");
    assert_true(a100->memory_bytes == 40ull << 30); /* CUDAGlobalMemorySize is in KiB */
    assert_int_equal(a100->memory_source, TOPO_SRC_REPORTED);
    assert_int_equal(a100->sm_count, 108);
    assert_int_equal(a100->numa_node, 0);
    assert_true(fabs(a100->pcie_link_bytes_per_s - 31.507692e9) < 1e6);
    /* nvml-only CoProc devices: memory from the model name */
    assert_string_equal(v0->type_name, "V100-SXM2-16GB");
    assert_true(v0->memory_bytes == 16ull << 30);
    assert_int_equal(v0->memory_source, TOPO_SRC_ESTIMATED);
    assert_int_equal(v0->numa_node, 1);
    assert_int_equal(v1->numa_node, 1);
    /* the two V100s share one root port behind one PCIe switch */
    assert_int_equal(s->n_ports, 2);
    assert_int_equal(v0->root_port, v1->root_port);
    assert_int_not_equal(a100->root_port, v0->root_port);
    const topo_port *p = &s->ports[v0->root_port];
    assert_string_equal(p->bus_id, "0000:80:00.0");
    assert_int_equal(p->n_switches, 1);
    assert_int_equal(p->numa_node, 1);
    assert_true(fabs(p->uplink_bytes_per_s - 15.753846e9) < 1e6);
    /* ib0 and mlx5_0 are one NIC */
    assert_int_equal(s->n_nics, 1);
    assert_string_equal(s->nics[0].name, "ib0");
    assert_int_equal(s->nics[0].numa_node, 1);
    assert_true(s->nics[0].bw_bytes_per_s == 100e9 / 8);
    /* NVLink: 0-1 through the NVSwitch (min of 100 and 50 GB/s), 1-2 direct, 0-2 none */
    assert_non_null(s->nvlink_bytes_per_s);
    const double *nv = s->nvlink_bytes_per_s;
    assert_true(nv[0 * 3 + 1] == 50e9);
    assert_true(nv[1 * 3 + 0] == 50e9);
    assert_true(nv[1 * 3 + 2] == 50e9);
    assert_true(nv[0 * 3 + 2] == 0);
    assert_true(topo_server_pair_bw(s, 0, 1) == 50e9);
    /* no NVLink: PCIe through both root ports, capped by the slower uplink */
    assert_true(fabs(topo_server_pair_bw(s, 0, 2) - 15.753846e9) < 1e6);
    topo_server_destroy(&s);
    assert_null(s);
    topo_server_destroy(&s);
}

/* A CPU worker on a GPU server: the host's processors join the GPUs as a device of their own,
 * after them, and the GPUs keep their order and links. */
static void test_cpu_device_beside_gpus(void **state)
{
    (void)state;
    topo_cfg cfg = {.xml_path = DATA "gpu_server.xml", .cpu_device = true};
    topo_server *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_server_new(&s, &cfg, &err), SC_OK);
    assert_int_equal(s->n_devices, 4);
    assert_int_equal(topo_server_usable_devices(s), 4);
    for (int i = 0; i < 3; i++)
        assert_int_equal(s->devices[i].kind, TOPO_DEV_GPU);
    assert_string_equal(s->devices[0].type_name, "A100-SXM4-40GB");
    const topo_device *cpu = &s->devices[3];
    assert_int_equal(cpu->kind, TOPO_DEV_CPU);
    assert_string_equal(cpu->type_name, "cpu");
    assert_int_equal(cpu->cpu_cores, 8);
    assert_true(cpu->memory_bytes == 2ull * 34359738368ull);
    assert_true(topo_server_pair_bw(s, 0, 1) == 50e9);
    topo_server_destroy(&s);
    /* without it, a server with GPUs lists them alone */
    cfg.cpu_device = false;
    assert_int_equal(topo_server_new(&s, &cfg, &err), SC_OK);
    assert_int_equal(s->n_devices, 3);
    for (size_t i = 0; i < s->n_devices; i++)
        assert_int_equal(s->devices[i].kind, TOPO_DEV_GPU);
    topo_server_destroy(&s);
}

static void test_mixed_vendor(void **state)
{
    (void)state;
    topo_server *s = load_file(DATA "mixed_vendor.xml");
    assert_int_equal(s->n_devices, 2);
    assert_int_equal(topo_server_usable_devices(s), 1);
    assert_true(s->devices[0].supported);
    assert_string_equal(s->devices[0].type_name, "K80");
    assert_string_equal(s->devices[0].os_names, "cuda0"); /* card0 is a display device */
    assert_false(s->devices[1].supported);
    assert_non_null(strstr(s->devices[1].unsupported_why, "AMD"));
    assert_true(s->devices[1].memory_bytes == 3145728ull * 1024);
    assert_non_null(strstr(s->notes, "0000:03:00.0"));
    assert_int_equal(s->n_nics, 1);
    assert_true(s->nics[0].bw_bytes_per_s == 1e9 / 8);
    assert_null(s->nvlink_bytes_per_s);
    topo_server_destroy(&s);
}

static void test_worker_report(void **state)
{
    (void)state;
    /* a worker's export: NVIDIA PCI devices with no compute OS device but stagecraft's own
     * figures; absurd figures are ignored, not trusted */
    topo_server *s = load_file(DATA "worker_report.xml");
    assert_string_equal(s->hostname, "worker-h100");
    assert_int_equal(s->n_devices, 2);
    assert_int_equal(topo_server_usable_devices(s), 1);
    const topo_device *d = &s->devices[0];
    assert_true(d->supported);
    assert_string_equal(d->type_name, "H100-80GB-HBM3");
    assert_true(d->memory_bytes == 85045149696ull);
    assert_int_equal(d->memory_source, TOPO_SRC_REPORTED);
    assert_true(d->gflops == 51234.5);
    assert_int_equal(d->gflops_source, TOPO_SRC_MEASURED);
    assert_int_equal(d->sm_count, 132);
    assert_int_equal(d->cc_major, 9);
    assert_true(d->h2d_bytes_per_s == 2.5e10);
    assert_true(s->host_mem_bw_bytes_per_s == 2e10);
    const topo_device *bad = &s->devices[1];
    assert_false(bad->supported);
    assert_string_equal(bad->unsupported_why, "not visible to the CUDA driver");
    assert_true(bad->memory_bytes == 80ull << 30); /* "nan" ignored: from the model name */
    assert_true(bad->gflops < 1e6);                /* 1e300 ignored */

    /* an export of an imported topology carries the same figures once */
    char *xml = NULL;
    size_t len = 0;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_server_export_xml(s, &xml, &len, &err), SC_OK);
    const char *first = strstr(xml, "StagecraftGPUModel");
    assert_non_null(first);
    topo_cfg cfg = {0};
    cfg.xml_buffer = xml;
    cfg.xml_len = len;
    topo_server *back = NULL;
    assert_int_equal(topo_server_new(&back, &cfg, &err), SC_OK);
    assert_true(back->devices[0].gflops == 51234.5);
    assert_true(back->devices[0].memory_bytes == 85045149696ull);
    assert_false(back->devices[1].supported);
    topo_server_destroy(&back);
    free(xml);
    topo_server_destroy(&s);
}

static void test_cpu_only(void **state)
{
    (void)state;
    topo_server *s = load_file(DATA "cpu_only.xml");
    assert_string_equal(s->hostname, "cpu_only"); /* no HostName: the file name */
    assert_int_equal(s->n_devices, 1);
    const topo_device *d = &s->devices[0];
    assert_int_equal(d->kind, TOPO_DEV_CPU);
    assert_true(d->supported);
    assert_string_equal(d->type_name, "cpu");
    assert_string_equal(d->model, "Test CPU 4-Core");
    assert_int_equal(d->cpu_cores, 8);
    assert_true(d->memory_bytes == s->host_memory_bytes);
    assert_true(d->gflops > 0);
    assert_int_equal(d->gflops_source, TOPO_SRC_ESTIMATED);
    topo_server_destroy(&s);
}

static void test_synthetic(void **state)
{
    (void)state;
    topo_cfg cfg = {0};
    cfg.synthetic = "pack:2 numa:1 core:3 pu:2";
    cfg.hostname = "synth";
    topo_server *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_server_new(&s, &cfg, &err), SC_OK);
    assert_string_equal(s->hostname, "synth");
    assert_int_equal(s->n_packages, 2);
    assert_int_equal(s->n_numa, 2);
    assert_int_equal(s->n_cores, 6);
    assert_int_equal(s->n_pus, 12);
    assert_int_equal(s->n_devices, 1);
    assert_int_equal(s->devices[0].kind, TOPO_DEV_CPU);
    assert_int_equal(s->devices[0].cpu_cores, 6);
    assert_true(s->socket_link_bytes_per_s > 0);
    topo_server_destroy(&s);

    cfg.synthetic = "bogus:7";
    sc_err_clear(&err);
    assert_int_equal(topo_server_new(&s, &cfg, &err), SC_ERR_INVALID);
    assert_null(s);
    assert_non_null(strstr(err.msg, "bogus:7"));

    /* two sources at once is a usage error */
    cfg.xml_path = DATA "cpu_only.xml";
    sc_err_clear(&err);
    assert_int_equal(topo_server_new(&s, &cfg, &err), SC_ERR_INVALID);
}

static void test_malformed_files(void **state)
{
    (void)state;
    sc_err err;
    assert_int_equal(load_fail(DATA "version3.xml", &err), SC_ERR_VERSION);
    assert_non_null(strstr(err.msg, "version3.xml"));
    assert_non_null(strstr(err.msg, "3.0"));
    assert_int_equal(load_fail(DATA "truncated.xml", &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "truncated"));
    assert_int_equal(load_fail(DATA "duplicate_ids.xml", &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "gp_index=\"101\""));
    assert_int_equal(load_fail(DATA "not_topology.xml", &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "<cluster>"));
    assert_int_equal(load_fail(DATA "entities.xml", &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "entities"));
    assert_int_equal(load_fail(DATA "empty.xml", &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "empty"));
    sc_status rc = load_fail(DATA "no_pu.xml", &err);
    assert_true(rc == SC_ERR_PARSE || rc == SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "no_pu.xml"));
    assert_int_equal(load_fail(DATA "does_not_exist.xml", &err), SC_ERR_IO);
    assert_non_null(strstr(err.msg, "does_not_exist.xml"));

    /* a file over the size cap is refused before parsing */
    topo_cfg cfg = {0};
    cfg.xml_path = DATA "gpu_server.xml";
    cfg.max_xml_bytes = 1000;
    topo_server *s = NULL;
    sc_err_clear(&err);
    assert_int_equal(topo_server_new(&s, &cfg, &err), SC_ERR_TOO_LARGE);
    assert_null(s);
}

/* Loads `name` with every `from` replaced by `to` (to "" deletes); the server, or NULL with
 * the message in err. */
static topo_server *load_edited(const char *name, const char *from, const char *to, sc_err *err)
{
    char *text = NULL;
    size_t len = 0;
    sc_err_clear(err);
    assert_int_equal(sc_file_read(name, 1 << 20, &text, &len, err), SC_OK);
    char *edited = calloc(1, 2 * len + 1);
    assert_non_null(edited);
    size_t n = 0;
    for (const char *p = text; *p;) {
        if (strncmp(p, from, strlen(from)) == 0) {
            n += (size_t)sprintf(edited + n, "%s", to);
            p += strlen(from);
        } else {
            edited[n++] = *p++;
        }
    }
    topo_cfg cfg = {0};
    cfg.xml_buffer = edited;
    cfg.xml_len = n;
    cfg.source_name = "edited.xml";
    topo_server *s = NULL;
    sc_err_clear(err);
    topo_server_new(&s, &cfg, err);
    free(edited);
    free(text);
    return s;
}

static void test_edited_exports(void **state)
{
    (void)state;
    sc_err err;
    /* a PCIe link speed hwloc would take as 9e18 GB/s: refused with the line, not turned into
     * a bandwidth the planner refuses */
    topo_server *s = load_edited(DATA "mixed_vendor.xml", "pci_link_speed=\"0.000000\"",
                                 "pci_link_speed=\"9e18\"", &err);
    assert_null(s);
    assert_int_equal(err.code, SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "edited.xml:"));
    assert_non_null(strstr(err.msg, "pci_link_speed"));
    s = load_edited(DATA "mixed_vendor.xml", "pci_link_speed=\"0.000000\"",
                    "pci_link_speed=\"nan\"", &err);
    assert_null(s);
    assert_non_null(strstr(err.msg, "pci_link_speed"));

    /* NUMA memory hwloc would read with strtoull ("-5" as 2^64 - 5, summed into the server's
     * memory): refused with the line and the valid range */
    const char *bad_memory[] = {"local_memory=\"-5\"", "local_memory=\"99999999999999999999\"",
                                "local_memory=\"\"", "local_memory=\"12kB\""};
    for (size_t i = 0; i < SC_ARRAY_LEN(bad_memory); i++) {
        s = load_edited(DATA "gpu_server.xml", "local_memory=\"34359738368\"", bad_memory[i], &err);
        assert_null(s);
        assert_int_equal(err.code, SC_ERR_PARSE);
        assert_non_null(strstr(err.msg, "edited.xml:10: local_memory of a NUMANode object"));
        assert_non_null(strstr(err.msg, "[0, 1000000000000000]"));
    }
    /* a GPU memory size that is not a plain KiB count: the model name's size instead */
    s = load_edited(DATA "gpu_server.xml", "value=\"41943040\"", "value=\"-5\"", &err);
    assert_non_null(s);
    assert_true(s->devices[0].memory_bytes == 40ull << 30);
    assert_int_equal(s->devices[0].memory_source, TOPO_SRC_ESTIMATED);
    topo_server_destroy(&s);
    /* a UTF-8 byte-order mark before the declaration is skipped */
    s = load_edited(DATA "gpu_server.xml", "<?xml ", "\xEF\xBB\xBF<?xml ", &err);
    assert_non_null(s);
    assert_true(s->host_memory_bytes == 2ull * 34359738368ull);
    assert_int_equal(s->n_devices, 3);
    topo_server_destroy(&s);

    /* a GPU whose model and memory are not reported: its type leaves memory_bytes out (the
     * planner reads that as unlimited) instead of writing 0, which the planner refuses */
    topo_cluster *c = NULL;
    assert_int_equal(topo_cluster_new(&c, &err), SC_OK);
    s = load_edited(DATA "mixed_vendor.xml",
                    "<info name=\"GPUModel\" value=\"Tesla K80\"/>\n"
                    "            <info name=\"CUDAGlobalMemorySize\" value=\"11811160\"/>",
                    "", &err);
    assert_non_null(s);
    assert_int_equal(topo_cluster_add(c, s, &err), SC_OK);
    topo_server_destroy(&s);
    char *text = NULL;
    assert_int_equal(topo_cluster_to_json(c, &text, &err), SC_OK);
    sc_jdoc *doc = NULL;
    assert_int_equal(sc_jdoc_parse(&doc, "cluster.json", text, strlen(text), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc), types;
    assert_int_equal(sc_json_get_object(&root, "device_types", &types, &err), SC_OK);
    const char *key;
    json_t *val;
    size_t seen = 0;
    json_object_foreach(types.value, key, val)
    {
        json_t *mem = json_object_get(val, "memory_bytes");
        assert_true(mem == NULL || json_number_value(mem) >= 1);
        seen++;
    }
    assert_true(seen > 0);
    sc_jdoc_destroy(&doc);
    free(text);
    topo_cluster_destroy(&c);
}

static void test_hostile_buffers(void **state)
{
    (void)state;
    sc_err err;
    /* larger than the cap: refused without reading the text */
    static const char tiny[] = "<topology version=\"2.0\"></topology>";
    sc_err_clear(&err);
    assert_int_equal(topo_xml_check(tiny, (size_t)TOPO_XML_MAX_BYTES + 1, 0, "net", &err),
                     SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "net:"));

    /* nested far deeper than any export: refused before hwloc's recursive parser sees it */
    const int depth = 100000;
    size_t cap = 64 + (size_t)depth * 40;
    char *deep = malloc(cap);
    assert_non_null(deep);
    size_t n = (size_t)snprintf(deep, cap,
                                "<topology version=\"2.0\"><object type=\"Machine\" "
                                "cpuset=\"0x1\" complete_cpuset=\"0x1\" nodeset=\"0x1\" "
                                "complete_nodeset=\"0x1\">");
    for (int i = 0; i < depth; i++)
        n += (size_t)snprintf(deep + n, cap - n, "<object type=\"Misc\">");
    for (int i = 0; i < depth; i++)
        n += (size_t)snprintf(deep + n, cap - n, "</object>");
    n += (size_t)snprintf(deep + n, cap - n, "</object></topology>");
    topo_cfg cfg = {0};
    cfg.xml_buffer = deep;
    cfg.xml_len = n;
    cfg.source_name = "worker w3 report";
    topo_server *s = NULL;
    sc_err_clear(&err);
    assert_int_equal(topo_server_new(&s, &cfg, &err), SC_ERR_PARSE);
    assert_null(s);
    assert_non_null(strstr(err.msg, "worker w3 report"));
    assert_non_null(strstr(err.msg, "nested deeper"));
    free(deep);

    /* garbage, a stray closing tag, content after the root, unterminated attribute */
    static const char *const bad[] = {
        "hello world",
        "</object>",
        "<topology version=\"2.0\"></topology><topology/>",
        "<topology version=\"2.0\"><object type=\"Machine",
        "<topology version=\"2.0\"><!-- never closed",
    };
    for (size_t i = 0; i < SC_ARRAY_LEN(bad); i++) {
        sc_err_clear(&err);
        assert_int_equal(topo_xml_check(bad[i], strlen(bad[i]), 0, "buf", &err), SC_ERR_PARSE);
    }
    /* a distance matrix larger than the topology (hwloc would allocate nbobjs^2 first) */
    static const char bomb[] =
        "<topology version=\"2.0\"><object type=\"Machine\" cpuset=\"0x1\" "
        "complete_cpuset=\"0x1\" nodeset=\"0x1\" complete_nodeset=\"0x1\" gp_index=\"1\"/>"
        "<distances2 type=\"NUMANode\" nbobjs=\"4000000000\" kind=\"5\" name=\"x\">"
        "</distances2></topology>";
    sc_err_clear(&err);
    assert_int_equal(topo_xml_check(bomb, strlen(bomb), 0, "buf", &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "4000000000"));

    /* a buffer cut from a larger one (no NUL at len) loads like the file */
    char *text = NULL;
    size_t len = 0;
    sc_err_clear(&err);
    assert_int_equal(sc_file_read(DATA "mixed_vendor.xml", 1 << 20, &text, &len, &err), SC_OK);
    char *unterminated = malloc(len);
    assert_non_null(unterminated);
    memcpy(unterminated, text, len);
    cfg = (topo_cfg){0};
    cfg.xml_buffer = unterminated;
    cfg.xml_len = len;
    assert_int_equal(topo_server_new(&s, &cfg, &err), SC_OK);
    assert_int_equal(topo_server_usable_devices(s), 1);
    topo_server_destroy(&s);
    free(unterminated);
    free(text);
}

static void test_truncated_everywhere(void **state)
{
    (void)state;
    /* an export cut at any byte before its end is refused with a parse error, never loaded
     * half and never handed to hwloc's reader */
    char *text = NULL;
    size_t len = 0;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_file_read(DATA "gpu_server.xml", 1 << 20, &text, &len, &err), SC_OK);
    size_t end = (size_t)(strstr(text, "</topology>") - text) + strlen("</topology>");
    for (size_t cut = 0; cut < end; cut += 3) {
        topo_cfg cfg = {0};
        cfg.xml_buffer = text;
        cfg.xml_len = cut;
        topo_server *s = NULL;
        sc_err_clear(&err);
        sc_status rc = topo_server_new(&s, &cfg, &err);
        if (rc != SC_ERR_PARSE)
            fail_msg("cut at %zu: %s (%s)", cut, sc_status_name(rc), err.msg);
        assert_null(s);
    }
    free(text);
}

static void test_export_roundtrip(void **state)
{
    (void)state;
    topo_server *s = load_file(DATA "gpu_server.xml");
    char *xml = NULL;
    size_t len = 0;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_server_export_xml(s, &xml, &len, &err), SC_OK);
    assert_true(len > 100 && strlen(xml) == len);
    assert_non_null(strstr(xml, "<topology version=\"2.0\">"));
    topo_cfg cfg = {0};
    cfg.xml_buffer = xml;
    cfg.xml_len = len;
    topo_server *back = NULL;
    assert_int_equal(topo_server_new(&back, &cfg, &err), SC_OK);
    assert_string_equal(back->hostname, "gpu-a");
    assert_int_equal(back->n_devices, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(back->devices[i].pci_bus_id, s->devices[i].pci_bus_id);
        assert_true(back->devices[i].memory_bytes == s->devices[i].memory_bytes);
        assert_int_equal(back->devices[i].numa_node, s->devices[i].numa_node);
    }
    assert_non_null(back->nvlink_bytes_per_s);
    for (size_t i = 0; i < 9; i++)
        assert_true(back->nvlink_bytes_per_s[i] == s->nvlink_bytes_per_s[i]);
    topo_server_destroy(&back);
    topo_server_destroy(&s);
    free(xml);
}

static topo_cluster *cluster_of(const char *const *files, size_t n)
{
    topo_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_cluster_new(&c, &err), SC_OK);
    for (size_t i = 0; i < n; i++) {
        topo_server *s = load_file(files[i]);
        assert_int_equal(topo_cluster_add(c, s, &err), SC_OK);
        topo_server_destroy(&s);
    }
    return c;
}

static const topo_link *find_link(const topo_cluster *c, topo_link_kind kind, const char *name)
{
    for (size_t i = 0; i < topo_cluster_links(c); i++) {
        const topo_link *l = topo_cluster_link(c, i);
        if (l->kind == kind && strcmp(l->name, name) == 0)
            return l;
    }
    return NULL;
}

static void test_cluster_links(void **state)
{
    (void)state;
    static const char *const files[] = {DATA "gpu_server.xml", DATA "cpu_only.xml"};
    topo_cluster *c = cluster_of(files, 2);
    assert_int_equal(topo_cluster_servers(c), 2);
    assert_int_equal(topo_cluster_devices(c), 4);
    size_t server = 9;
    const topo_device *d = topo_cluster_device(c, 3, &server);
    assert_int_equal(server, 1);
    assert_int_equal(d->kind, TOPO_DEV_CPU);
    assert_null(topo_cluster_device(c, 4, NULL));

    /* the two V100s contend for root port 0000:80:00.0; the A100 has its port alone */
    const topo_link *l = find_link(c, TOPO_LINK_PCIE_UPLINK, "0000:80:00.0");
    assert_non_null(l);
    assert_true(l->shared);
    assert_int_equal(l->n_devices, 2);
    assert_int_equal(l->devices[0], 1);
    assert_int_equal(l->devices[1], 2);
    l = find_link(c, TOPO_LINK_PCIE_UPLINK, "0000:10:00.0");
    assert_non_null(l);
    assert_false(l->shared);
    /* every device of gpu-a leaves through ib0; GPUs on both sockets cross the socket link */
    l = find_link(c, TOPO_LINK_NIC, "ib0");
    assert_non_null(l);
    assert_int_equal(l->n_devices, 3);
    assert_true(l->bw_bytes_per_s == 12.5e9);
    l = find_link(c, TOPO_LINK_SOCKET, "socket");
    assert_non_null(l);
    assert_int_equal(l->server, 0);
    /* NVLink pairs: 0-1 and 1-2 */
    size_t nv = 0;
    for (size_t i = 0; i < topo_cluster_links(c); i++)
        nv += topo_cluster_link(c, i)->kind == TOPO_LINK_NVLINK;
    assert_int_equal(nv, 2);
    l = find_link(c, TOPO_LINK_NVLINK, "dev1-dev2");
    assert_non_null(l);
    assert_true(l->bw_bytes_per_s == 50e9);

    /* the planner's view of bandwidth */
    assert_true(topo_cluster_pair_bw(c, 1, 2) == 50e9);
    assert_true(topo_cluster_pair_bw(c, 0, 3) == 1.25e9); /* cpu_only has no NIC: assumed */
    assert_true(fabs(topo_cluster_intra_bw(c, 0) - 15.753846e9) < 1e6);
    assert_true(topo_cluster_nic_bw(c, 0) == 12.5e9);
    topo_cluster_destroy(&c);
    assert_null(c);
}

static void test_cluster_merge_by_hostname(void **state)
{
    (void)state;
    /* a second report of gpu-a adds its T4; a repeated report adds nothing */
    static const char *const files[] = {DATA "gpu_server.xml", DATA "gpu_server_more.xml",
                                        DATA "gpu_server.xml"};
    topo_cluster *c = cluster_of(files, 3);
    assert_int_equal(topo_cluster_servers(c), 1);
    assert_string_equal(topo_cluster_server_name(c, 0), "gpu-a");
    assert_int_equal(topo_cluster_devices(c), 4);
    const topo_device *t4 = topo_cluster_device(c, 3, NULL);
    assert_string_equal(t4->type_name, "T4");
    assert_string_equal(t4->pci_bus_id, "0000:21:00.0");
    /* NVLink kept from the first report; the T4 pair bandwidth falls back to PCIe */
    assert_true(topo_cluster_pair_bw(c, 0, 1) == 50e9);
    assert_true(fabs(topo_cluster_pair_bw(c, 0, 3) - 7.876923e9) < 1e6);
    topo_cluster_destroy(&c);
}

static void test_cluster_cpu_types(void **state)
{
    (void)state;
    /* two different CPU servers get two device types; the same CPU twice shares one */
    topo_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_cluster_new(&c, &err), SC_OK);
    static const char *const hosts[] = {"c1", "c2", "c3"};
    static const char *const shapes[] = {"pack:1 core:4 pu:1", "pack:1 core:4 pu:1",
                                         "pack:2 core:8 pu:2"};
    for (size_t i = 0; i < 3; i++) {
        topo_cfg cfg = {0};
        cfg.synthetic = shapes[i];
        cfg.hostname = hosts[i];
        topo_server *s = NULL;
        assert_int_equal(topo_server_new(&s, &cfg, &err), SC_OK);
        assert_int_equal(topo_cluster_add(c, s, &err), SC_OK);
        topo_server_destroy(&s);
    }
    assert_int_equal(topo_cluster_devices(c), 3);
    assert_string_equal(topo_cluster_device(c, 0, NULL)->type_name, "cpu");
    assert_string_equal(topo_cluster_device(c, 1, NULL)->type_name, "cpu");
    assert_string_equal(topo_cluster_device(c, 2, NULL)->type_name, "cpu-c3");
    /* CPU servers without NICs: the planner's figure between servers is the assumed one */
    assert_true(topo_cluster_pair_bw(c, 0, 2) == 1.25e9);
    topo_cluster_destroy(&c);
}

static void test_cluster_json(void **state)
{
    (void)state;
    static const char *const files[] = {DATA "gpu_server.xml", DATA "mixed_vendor.xml",
                                        DATA "cpu_only.xml"};
    topo_cluster *c = cluster_of(files, 3);
    char *text = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_cluster_to_json(c, &text, &err), SC_OK);
    sc_jdoc *doc = NULL;
    assert_int_equal(sc_jdoc_parse(&doc, "cluster.json", text, strlen(text), &err), SC_OK);
    assert_int_equal(sc_jdoc_check_format(doc, "stagecraft-cluster", 1, NULL, &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc), types, servers, t, sv, devs, dev, links;
    assert_int_equal(sc_json_get_object(&root, "device_types", &types, &err), SC_OK);
    double speed, mem;
    assert_int_equal(sc_json_get_object(&types, "A100-SXM4-40GB", &t, &err), SC_OK);
    assert_int_equal(sc_json_get_number(&t, "relative_speed", 0, 1, &speed, &err), SC_OK);
    assert_true(speed == 1.0); /* the fastest type is the reference */
    assert_int_equal(sc_json_get_number(&t, "memory_bytes", 1, 1e15, &mem, &err), SC_OK);
    assert_true(mem == (double)(40ull << 30));
    assert_int_equal(sc_json_get_object(&types, "V100-SXM2-16GB", &t, &err), SC_OK);
    assert_int_equal(sc_json_get_number(&t, "relative_speed", 0, 1, &speed, &err), SC_OK);
    assert_true(fabs(speed - 15.7 / 19.5) < 1e-5);
    assert_int_equal(sc_json_get_object(&types, "cpu", &t, &err), SC_OK);
    assert_false(sc_jnode_has(&types, "AMD-Radeon-Test")); /* unsupported: no type */
    assert_int_equal(sc_jnode_size(&types), 4);

    assert_int_equal(sc_json_get_array(&root, "servers", 3, 3, &servers, &err), SC_OK);
    const char *name, *type;
    double intra, nic;
    static const char *const want_names[] = {"gpu-a", "mixed", "cpu_only"};
    static const size_t want_devs[] = {3, 1, 1};
    for (size_t i = 0; i < 3; i++) {
        sv = sc_jnode_element(&servers, i);
        assert_int_equal(sc_json_get_string(&sv, "name", &name, &err), SC_OK);
        assert_string_equal(name, want_names[i]);
        assert_int_equal(sc_json_get_array(&sv, "devices", 1, 64, &devs, &err), SC_OK);
        assert_int_equal(sc_jnode_size(&devs), want_devs[i]);
        for (size_t k = 0; k < sc_jnode_size(&devs); k++) {
            dev = sc_jnode_element(&devs, k);
            assert_int_equal(sc_jnode_string(&dev, &type, &err), SC_OK);
            assert_true(sc_jnode_has(&types, type));
        }
        assert_int_equal(
            sc_json_get_number(&sv, "intra_bandwidth_bytes_per_s", 1, 1e15, &intra, &err), SC_OK);
        assert_int_equal(sc_json_get_number(&sv, "nic_bandwidth_bytes_per_s", 1, 1e15, &nic, &err),
                         SC_OK);
    }
    sv = sc_jnode_element(&servers, 1);
    assert_int_equal(sc_json_get_number(&sv, "nic_bandwidth_bytes_per_s", 1, 1e15, &nic, &err),
                     SC_OK);
    assert_true(nic == 1e9 / 8);
    /* the mixed server lists its AMD GPU with no id */
    sc_jnode info, amd, id;
    assert_int_equal(sc_json_get_array(&sv, "device_info", 2, 2, &info, &err), SC_OK);
    amd = sc_jnode_element(&info, 1);
    assert_int_equal(sc_jnode_member(&amd, "id", &id, &err), SC_OK);
    assert_true(json_is_null(id.value));
    assert_true(sc_jnode_has(&amd, "unsupported"));
    /* link device ids are global ids */
    assert_int_equal(sc_json_get_array(&root, "links", 1, 1000, &links, &err), SC_OK);
    for (size_t i = 0; i < sc_jnode_size(&links); i++) {
        sc_jnode l = sc_jnode_element(&links, i), ld;
        assert_int_equal(sc_json_get_array(&l, "devices", 1, 64, &ld, &err), SC_OK);
        for (size_t k = 0; k < sc_jnode_size(&ld); k++) {
            sc_jnode e = sc_jnode_element(&ld, k);
            int64_t v;
            assert_int_equal(sc_jnode_int(&e, 0, 4, &v, &err), SC_OK);
        }
    }
    assert_int_equal(err.code, SC_OK);
    sc_jdoc_destroy(&doc);
    free(text);
    topo_cluster_destroy(&c);

    /* nothing to run on: an error, not an empty cluster */
    assert_int_equal(topo_cluster_new(&c, &err), SC_OK);
    sc_err_clear(&err);
    assert_int_equal(topo_cluster_to_json(c, &text, &err), SC_ERR_INVALID);
    assert_null(text);
    topo_cluster_destroy(&c);
}

static void test_probes(void **state)
{
    (void)state;
    /* the blocked product equals the plain triple loop (n not a multiple of the block) */
    const int n = 70;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n);
    float *c = malloc(sizeof(float) * n * n);
    assert_true(a && b && c);
    for (int i = 0; i < n * n; i++) {
        a[i] = (float)((i * 13) % 7) - 3.0f;
        b[i] = (float)((i * 5) % 11) - 5.0f;
    }
    topo_probe_sgemm(n, a, b, c);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            float want = 0;
            for (int k = 0; k < n; k++)
                want += a[i * n + k] * b[k * n + j];
            assert_true(c[i * n + j] == want);
        }
    free(a);
    free(b);
    free(c);
    double gf = 0, bw = 0;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_probe_cpu_gemm(64, 1, &gf, &err), SC_OK);
    assert_true(gf > 0);
    assert_int_equal(topo_probe_host_copy(1 << 20, 2, &bw, &err), SC_OK);
    assert_true(bw > 0);
    assert_int_equal(topo_probe_cpu_gemm(4, 1, &gf, &err), SC_ERR_INVALID);
    assert_int_equal(topo_probe_host_copy(0, 1, &bw, &err), SC_ERR_INVALID);
}

static void test_busid_and_cuda(void **state)
{
    (void)state;
    char out[16];
    assert_true(topo_busid_normalise("00000000:3B:00.0", out, sizeof(out)));
    assert_string_equal(out, "0000:3b:00.0");
    assert_true(topo_busid_normalise("3b:1f.7", out, sizeof(out)));
    assert_string_equal(out, "0000:3b:1f.7");
    assert_false(topo_busid_normalise("gpu0", out, sizeof(out)));
    assert_false(topo_busid_normalise("0000:3b:00.9", out, sizeof(out)));
    assert_false(topo_busid_normalise("0000:3b:00.0x", out, sizeof(out)));

    /* CUDA is optional: either devices with properties, or "unavailable" with a reason */
    topo_cuda *cuda = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = topo_cuda_open(&cuda, &err);
    if (rc == SC_OK) {
        assert_true(topo_cuda_count(cuda) > 0);
        const topo_cuda_dev *d = topo_cuda_device(cuda, 0);
        assert_non_null(d);
        assert_true(d->memory_bytes > 0);
        assert_null(topo_cuda_device(cuda, topo_cuda_count(cuda)));
    } else {
        assert_null(cuda);
        assert_true(rc == SC_ERR_UNAVAILABLE || rc == SC_ERR_CUDA);
        assert_true(err.msg[0] != '\0');
    }
    topo_cuda_close(&cuda);
    assert_null(cuda);
}

static void test_live_smoke(void **state)
{
    (void)state;
    topo_cfg cfg = {0}; /* no probes, no CUDA: only that live discovery loads */
    topo_server *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_server_new(&s, &cfg, &err), SC_OK);
    assert_true(topo_server_usable_devices(s) >= 1);
    assert_true(s->n_pus >= 1);
    assert_true(s->hostname[0] != '\0');
    char *xml = NULL;
    size_t len = 0;
    assert_int_equal(topo_server_export_xml(s, &xml, &len, &err), SC_OK);
    assert_int_equal(topo_xml_check(xml, len, 0, "export", &err), SC_OK);
    free(xml);
    topo_server_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_server),
        cmocka_unit_test(test_cpu_device_beside_gpus),
        cmocka_unit_test(test_mixed_vendor),
        cmocka_unit_test(test_worker_report),
        cmocka_unit_test(test_cpu_only),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_edited_exports),
        cmocka_unit_test(test_hostile_buffers),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_export_roundtrip),
        cmocka_unit_test(test_cluster_links),
        cmocka_unit_test(test_cluster_merge_by_hostname),
        cmocka_unit_test(test_cluster_cpu_types),
        cmocka_unit_test(test_cluster_json),
        cmocka_unit_test(test_probes),
        cmocka_unit_test(test_busid_and_cuda),
        cmocka_unit_test(test_live_smoke),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
