/* `stagecraft topo`: exit statuses, error messages and the --json output, through the real
 * binary on the fixtures in tests/data/topology/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/sc_json.h"

#define DATA SC_TEST_DATA_DIR "/topology/"

/* Runs the binary with `args`, stderr folded into stdout; returns the exit status and the
 * output in a heap buffer. */
static int run(const char *args, char **out)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", SC_STAGECRAFT_BIN, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, p)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            assert_non_null(buf);
        }
    }
    buf[n] = '\0';
    int status = pclose(p);
    *out = buf;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_json_output(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(run("topo --json --xml " DATA "gpu_server.xml " DATA "cpu_only.xml", &out), 0);
    sc_jdoc *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "stdout", out, strlen(out), &err), SC_OK);
    assert_int_equal(sc_jdoc_check_format(doc, "stagecraft-cluster", 1, NULL, &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc), servers, s0, devs;
    assert_int_equal(sc_json_get_array(&root, "servers", 2, 2, &servers, &err), SC_OK);
    s0 = sc_jnode_element(&servers, 0);
    assert_int_equal(sc_json_get_array(&s0, "devices", 3, 3, &devs, &err), SC_OK);
    sc_jdoc_destroy(&doc);
    free(out);
}

static void test_human_output(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(run("topo --xml " DATA "mixed_vendor.xml", &out), 0);
    assert_non_null(strstr(out, "server mixed"));
    assert_non_null(strstr(out, "K80"));
    assert_non_null(strstr(out, "UNSUPPORTED"));
    assert_non_null(strstr(out, "pcie_uplink"));
    free(out);
}

static void test_bad_input_exit_2(void **state)
{
    (void)state;
    static const struct {
        const char *args;
        const char *message;
    } cases[] = {
        {"topo --xml " DATA "version3.xml", "version 3.0"},
        {"topo --xml " DATA "truncated.xml", "truncated"},
        {"topo --xml " DATA "duplicate_ids.xml", "gp_index"},
        {"topo --xml " DATA "missing.xml", "missing.xml"},
        {"topo --xml", "--xml needs a FILE"},
        {"topo --frobnicate", "unknown argument"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *out = NULL;
        int rc = run(cases[i].args, &out);
        if (rc != 2 || strstr(out, cases[i].message) == NULL)
            fail_msg("`%s`: exit %d, output: %s", cases[i].args, rc, out);
        /* one line of error before any usage text */
        assert_non_null(strstr(out, "stagecraft topo: "));
        free(out);
    }
}

/* The NUMA layout through the binary: the human line, --cpu-workers, and the JSON keys of a
 * two-node export (gpu_server.xml) and a one-node one (mixed_vendor.xml). */
static void test_cpu_worker_layout(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(run("topo --xml " DATA "gpu_server.xml", &out), 0);
    assert_non_null(strstr(out, "\n  numa: node 0 CPUs 0-3 (4 cores, 34.4 GB); node 1 CPUs 4-7 "
                                "(4 cores, 34.4 GB)\n"));
    assert_non_null(strstr(out, "\n  CPU workers: one per NUMA node: stagecraft worker "
                                "--numa-node 0 (4 cores), stagecraft worker --numa-node 1 (4 "
                                "cores)\n"));
    free(out);
    assert_int_equal(run("topo --cpu-workers --xml " DATA "gpu_server.xml", &out), 0);
    assert_string_equal(out, "0\n1\n");
    free(out);
    assert_int_equal(run("topo --xml " DATA "mixed_vendor.xml", &out), 0);
    assert_non_null(strstr(out, "\n  CPU workers: one worker, 4 cores: stagecraft worker\n"));
    free(out);
    assert_int_equal(run("topo --cpu-workers --xml " DATA "mixed_vendor.xml", &out), 0);
    assert_string_equal(out, "0\n");
    free(out);

    assert_int_equal(run("topo --json --xml " DATA "gpu_server.xml", &out), 0);
    sc_jdoc *doc = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "stdout", out, strlen(out), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc), servers, s0, detail, node1, workers, ids;
    assert_int_equal(sc_json_get_array(&root, "servers", 1, 1, &servers, &err), SC_OK);
    s0 = sc_jnode_element(&servers, 0);
    assert_int_equal(sc_json_get_array(&s0, "numa_nodes_detail", 2, 2, &detail, &err), SC_OK);
    node1 = sc_jnode_element(&detail, 1);
    const char *text = NULL;
    assert_int_equal(sc_json_get_string(&node1, "cpus", &text, &err), SC_OK);
    assert_string_equal(text, "4-7");
    int64_t v = 0;
    assert_int_equal(sc_json_get_int(&node1, "os_index", 0, 1000, &v, &err), SC_OK);
    assert_int_equal(v, 1);
    assert_int_equal(sc_json_get_int(&node1, "cores", 0, 1000, &v, &err), SC_OK);
    assert_int_equal(v, 4);
    assert_int_equal(sc_json_get_object(&s0, "cpu_workers", &workers, &err), SC_OK);
    assert_int_equal(sc_json_get_array(&workers, "numa_nodes", 2, 2, &ids, &err), SC_OK);
    assert_int_equal(sc_json_get_string(&workers, "layout", &text, &err), SC_OK);
    assert_string_equal(text, "one_per_numa_node");
    sc_jdoc_destroy(&doc);
    free(out);

    /* --cpu-workers prints one server's layout */
    assert_int_equal(
        run("topo --cpu-workers --xml " DATA "gpu_server.xml " DATA "cpu_only.xml", &out), 2);
    assert_non_null(strstr(out, "--cpu-workers prints one server's layout"));
    free(out);
}

/* Every cluster file `stagecraft topo --json` writes loads in `stagecraft plan --cluster`
 * (cluster files refuse unknown keys: each key topo writes must be one the reader knows); the
 * fixtures here, and every *.xml of the folder SC_TEST_TOPOLOGIES names when it is set. A typo
 * in such a file is refused with exit 2, naming the key and the closest valid one. */
static void round_trip(const char *xmls)
{
    char tmpl[] = "/tmp/sc-topo-cluster-XXXXXX";
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    close(fd);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' topo --json --xml %s > '%s' 2>/dev/null", SC_STAGECRAFT_BIN,
             xmls, tmpl);
    int status = system(cmd);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char args[2048], *out = NULL;
    snprintf(args, sizeof args,
             "plan --model " SC_TEST_DATA_DIR "/planner/tiny.json --cluster '%s'", tmpl);
    int rc = run(args, &out);
    if (rc != 0)
        print_error("%s: plan --cluster of topo's output: exit %d: %s\n", xmls, rc, out);
    assert_int_equal(rc, 0);
    free(out);
    unlink(tmpl);
}

static void test_topo_json_plans(void **state)
{
    (void)state;
    const char *fixtures[] = {"gpu_server.xml", "gpu_server_more.xml", "cpu_only.xml",
                              "mixed_vendor.xml", "worker_report.xml"};
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
        char path[1024];
        snprintf(path, sizeof path, "'%s%s'", DATA, fixtures[i]);
        round_trip(path);
    }
    round_trip("'" DATA "gpu_server.xml' '" DATA "cpu_only.xml' '" DATA "mixed_vendor.xml'");
    const char *more = getenv("SC_TEST_TOPOLOGIES");
    DIR *dir = more != NULL && more[0] ? opendir(more) : NULL;
    for (struct dirent *e = dir ? readdir(dir) : NULL; e != NULL; e = readdir(dir)) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".xml") != 0)
            continue;
        char path[2048];
        snprintf(path, sizeof path, "'%s/%s'", more, e->d_name);
        round_trip(path);
    }
    if (dir != NULL)
        closedir(dir);

    char tmpl[] = "/tmp/sc-typo-cluster-XXXXXX";
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    const char *typo = "{\"format\": \"stagecraft-cluster\", \"version\": 1,\n"
                       " \"device_types\": {\"a\": {\"relative_speed\": 1}},\n"
                       " \"servers\": [{\"devices\": [\"a\"], \"intra_bandwidth_bytes_per_s\": "
                       "1e9,\n  \"nic_bandwidth_bytes_per_s\": 1e9, \"compute_slot\": 2}]}\n";
    assert_int_equal(write(fd, typo, strlen(typo)), (ssize_t)strlen(typo));
    close(fd);
    char args[2048], *out = NULL;
    snprintf(args, sizeof args,
             "plan --model " SC_TEST_DATA_DIR "/planner/tiny.json --cluster '%s'", tmpl);
    assert_int_equal(run(args, &out), 2);
    if (strstr(out, "$.servers[0].compute_slot: unknown key \"compute_slot\"") == NULL)
        print_error("output: %s\n", out);
    assert_non_null(strstr(out, ":4:53: $.servers[0].compute_slot: unknown key \"compute_slot\""));
    assert_non_null(strstr(out, "did you mean \"compute_slots\"?"));
    free(out);
    unlink(tmpl);
}

static void test_help(void **state)
{
    (void)state;
    char *out = NULL;
    assert_int_equal(run("topo --help", &out), 0);
    assert_non_null(strstr(out, "usage: stagecraft topo"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_output),      cmocka_unit_test(test_human_output),
        cmocka_unit_test(test_bad_input_exit_2), cmocka_unit_test(test_cpu_worker_layout),
        cmocka_unit_test(test_topo_json_plans),  cmocka_unit_test(test_help),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
