/* topology/topo_numa and topo_bind: the NUMA nodes read from hwloc synthetic topologies (CPU
 * lists, cores, PUs), the CPU-worker layout in the cluster JSON and the human view, finding a
 * node for --numa-node with the valid ones named, and binding this process to node 0 (every
 * thread, the thread default following). The layout tests use synthetic topologies only; the
 * binding test takes the expected CPUs from sysfs and sched_getaffinity, not from hwloc. */
#define _GNU_SOURCE /* sched_getaffinity, pthread_getaffinity_np, open_memstream */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/threads_cpu.h"
#include "topology/topo.h"
#include "topology/topo_bind.h"
#include "topology/topo_cluster.h"
#include "topology/topo_numa.h"

/* 2 packages of 4 cores with 2 hardware threads each, numbered as Linux numbers them on x86:
 * the first threads of all cores, then the second ones (core 0 holds PUs 0 and 8). */
#define TWO_NODES "package:2 numa:1 core:4 pu:2(indexes=0,8,1,9,2,10,3,11,4,12,5,13,6,14,7,15)"

static topo_server *load_synthetic(const char *desc)
{
    topo_cfg cfg = {0};
    cfg.synthetic = desc;
    topo_server *s = NULL;
    sc_err err;
    sc_err_clear(&err);
    if (topo_server_new(&s, &cfg, &err) != SC_OK)
        fail_msg("%s: %s", desc, err.msg);
    return s;
}

static void test_nodes_of_two_packages(void **state)
{
    (void)state;
    topo_server *s = load_synthetic(TWO_NODES);
    assert_int_equal(s->n_numa_nodes, 2);
    assert_int_equal(s->n_numa, 2);
    assert_int_equal(s->numa_nodes[0].os_index, 0);
    assert_string_equal(s->numa_nodes[0].cpus, "0-3,8-11");
    assert_int_equal(s->numa_nodes[0].n_cores, 4);
    assert_int_equal(s->numa_nodes[0].n_pus, 8);
    assert_int_equal(s->numa_nodes[1].os_index, 1);
    assert_string_equal(s->numa_nodes[1].cpus, "4-7,12-15");
    assert_int_equal(s->numa_nodes[1].n_cores, 4);
    assert_int_equal(s->numa_nodes[1].n_pus, 8);
    assert_int_equal(topo_numa_worker_nodes(s->numa_nodes, s->n_numa_nodes), 2);
    topo_server_destroy(&s);

    /* sub-NUMA clustering: 2 nodes per package, 4 in all, 2 cores each */
    s = load_synthetic("package:2 numa:2 core:2 pu:1");
    assert_int_equal(s->n_numa_nodes, 4);
    for (size_t i = 0; i < 4; i++) {
        char want[16];
        snprintf(want, sizeof(want), "%zu-%zu", 2 * i, 2 * i + 1);
        assert_int_equal(s->numa_nodes[i].os_index, (int)i);
        assert_string_equal(s->numa_nodes[i].cpus, want);
        assert_int_equal(s->numa_nodes[i].n_cores, 2);
    }
    topo_server_destroy(&s);

    /* DDR and HBM nodes over the same CPUs (flat mode): one worker per package, on the node of
     * lower os index; the other is listed and still accepted by --numa-node */
    s = load_synthetic("package:2 [numa(memory=64GB)] [numa(memory=16GB)] core:2 pu:1");
    assert_int_equal(s->n_numa_nodes, 4);
    static const char *shared_cpus[4] = {"0-1", "0-1", "2-3", "2-3"};
    for (size_t i = 0; i < 4; i++) {
        assert_string_equal(s->numa_nodes[i].cpus, shared_cpus[i]);
        assert_int_equal(s->numa_nodes[i].n_cores, 2);
    }
    assert_int_equal(topo_numa_worker_nodes(s->numa_nodes, 4), 2);
    assert_true(s->numa_nodes[0].worker && !s->numa_nodes[1].worker);
    assert_true(s->numa_nodes[2].worker && !s->numa_nodes[3].worker);
    size_t at = 0;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_numa_find(s->numa_nodes, 4, 1, "--numa-node", &at, &err), SC_OK);
    assert_int_equal(at, 1);
    topo_server_destroy(&s);

    /* no NUMA level in the description: hwloc's one node holds every CPU */
    s = load_synthetic("core:3 pu:2");
    assert_int_equal(s->n_numa_nodes, 1);
    assert_string_equal(s->numa_nodes[0].cpus, "0-5");
    assert_int_equal(s->numa_nodes[0].n_cores, 3);
    assert_int_equal(s->numa_nodes[0].n_pus, 6);
    topo_server_destroy(&s);
}

static void test_find_names_valid_nodes(void **state)
{
    (void)state;
    topo_server *s = load_synthetic(TWO_NODES);
    sc_err err;
    sc_err_clear(&err);
    size_t at = 99;
    assert_int_equal(topo_numa_find(s->numa_nodes, 2, 1, "--numa-node", &at, &err), SC_OK);
    assert_int_equal(at, 1);
    assert_int_equal(topo_numa_find(s->numa_nodes, 2, 3, "--numa-node", &at, &err), SC_ERR_INVALID);
    assert_string_equal(err.msg, "--numa-node 3: this machine has NUMA nodes 0, 1");
    topo_server_destroy(&s);

    /* a memory-only node (CXL memory) is named, never offered */
    topo_numa_node nodes[3] = {
        {.os_index = 0, .n_cores = 2, .n_pus = 2, .cpus = "0-1", .worker = true},
        {.os_index = 1, .n_cores = 2, .n_pus = 2, .cpus = "2-3", .worker = true},
        {.os_index = 2, .memory_bytes = 1ull << 30},
    };
    assert_int_equal(topo_numa_worker_nodes(nodes, 3), 2);
    sc_err_clear(&err);
    assert_int_equal(topo_numa_find(nodes, 3, 2, "--numa-node", &at, &err), SC_ERR_INVALID);
    assert_string_equal(err.msg, "--numa-node 2: NUMA node 2 has no CPUs this process may use; "
                                 "nodes with CPUs: 0, 1");
    sc_err_clear(&err);
    assert_int_equal(topo_numa_find(nodes, 3, 5, "--numa-node", &at, &err), SC_ERR_INVALID);
    assert_string_equal(err.msg, "--numa-node 5: this machine has NUMA nodes 0, 1 (node 2 has "
                                 "memory only, no CPUs)");
    sc_err_clear(&err);
    assert_int_equal(topo_numa_find(nodes, 1, 1, "--numa-node", &at, &err), SC_ERR_INVALID);
    assert_string_equal(err.msg, "--numa-node 1: this machine has NUMA node 0");
}

/* The cluster JSON of one synthetic server, parsed; servers[0] in *server. */
static json_t *cluster_json(const char *desc, json_t **server)
{
    topo_server *s = load_synthetic(desc);
    topo_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_cluster_new(&c, &err), SC_OK);
    assert_int_equal(topo_cluster_add(c, s, &err), SC_OK);
    char *text = NULL;
    assert_int_equal(topo_cluster_to_json(c, &text, &err), SC_OK);
    json_t *root = json_loads(text, 0, NULL);
    assert_non_null(root);
    *server = json_array_get(json_object_get(root, "servers"), 0);
    assert_non_null(*server);
    free(text);
    topo_cluster_destroy(&c);
    topo_server_destroy(&s);
    return root;
}

static void test_json_keys(void **state)
{
    (void)state;
    json_t *server, *root = cluster_json(TWO_NODES, &server);
    /* the keys that were there keep their meaning */
    assert_int_equal(json_integer_value(json_object_get(server, "numa_nodes")), 2);
    assert_int_equal(json_integer_value(json_object_get(server, "cpu_cores")), 8);
    json_t *detail = json_object_get(server, "numa_nodes_detail");
    assert_int_equal(json_array_size(detail), 2);
    static const char *cpus[2] = {"0-3,8-11", "4-7,12-15"};
    for (size_t i = 0; i < 2; i++) {
        json_t *d = json_array_get(detail, i);
        assert_int_equal(json_integer_value(json_object_get(d, "os_index")), (json_int_t)i);
        assert_string_equal(json_string_value(json_object_get(d, "cpus")), cpus[i]);
        assert_int_equal(json_integer_value(json_object_get(d, "cores")), 4);
        assert_int_equal(json_integer_value(json_object_get(d, "pus")), 8);
        assert_true(json_is_integer(json_object_get(d, "memory_bytes")));
    }
    json_t *workers = json_object_get(server, "cpu_workers");
    assert_string_equal(json_string_value(json_object_get(workers, "layout")), "one_per_numa_node");
    json_t *ids = json_object_get(workers, "numa_nodes");
    assert_int_equal(json_array_size(ids), 2);
    assert_int_equal(json_integer_value(json_array_get(ids, 0)), 0);
    assert_int_equal(json_integer_value(json_array_get(ids, 1)), 1);
    json_decref(root);

    root = cluster_json("core:4 pu:1", &server);
    workers = json_object_get(server, "cpu_workers");
    assert_string_equal(json_string_value(json_object_get(workers, "layout")), "one");
    assert_int_equal(json_array_size(json_object_get(workers, "numa_nodes")), 1);
    assert_int_equal(json_array_size(json_object_get(server, "numa_nodes_detail")), 1);
    json_decref(root);
}

/* The human view of one synthetic server. */
static char *printed(const char *desc)
{
    topo_server *s = load_synthetic(desc);
    topo_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(topo_cluster_new(&c, &err), SC_OK);
    assert_int_equal(topo_cluster_add(c, s, &err), SC_OK);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    topo_cluster_print(c, out);
    fclose(out);
    topo_cluster_destroy(&c);
    topo_server_destroy(&s);
    return text;
}

static void test_human_layout_line(void **state)
{
    (void)state;
    char *text = printed(TWO_NODES);
    assert_non_null(strstr(text, "\n  numa: node 0 CPUs 0-3,8-11 (4 cores, "));
    assert_non_null(strstr(text, "; node 1 CPUs 4-7,12-15 (4 cores, "));
    assert_non_null(strstr(text, "\n  CPU workers: one per NUMA node: stagecraft worker "
                                 "--numa-node 0 (4 cores), stagecraft worker --numa-node 1 "
                                 "(4 cores)\n"));
    free(text);
    text = printed("core:6 pu:2");
    assert_non_null(strstr(text, "\n  CPU workers: one worker, 6 cores: stagecraft worker\n"));
    free(text);
}

/* ---- binding this process (the machine the tests run on) ---------------------------------- */

/* The CPUs of NUMA node 0 as the kernel lists them, in `set`; false when sysfs has no node 0
 * (a kernel without NUMA: every CPU is node 0's). */
static bool sysfs_node0(cpu_set_t *set)
{
    FILE *f = fopen("/sys/devices/system/node/node0/cpulist", "r");
    if (f == NULL)
        return false;
    CPU_ZERO(set);
    char line[4096];
    bool ok = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    for (char *p = line; ok && *p && *p != '\n';) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (*end == '-')
            b = strtol(end + 1, &end, 10);
        for (long i = a; i <= b && i < CPU_SETSIZE; i++)
            CPU_SET((int)i, set);
        p = *end == ',' ? end + 1 : end;
    }
    return ok;
}

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_open;

/* A thread started before the binding, as a BLAS's pool is: it waits until told to end. */
static void *waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&gate);
    while (!gate_open)
        pthread_cond_wait(&gate_cv, &gate);
    pthread_mutex_unlock(&gate);
    return NULL;
}

static void test_bind_node_0(void **state)
{
    (void)state;
    cpu_set_t before, want, main_after, thread_after;
    assert_int_equal(sched_getaffinity(0, sizeof(before), &before), 0);
    want = before;
    cpu_set_t node0;
    if (sysfs_node0(&node0))
        CPU_AND(&want, &before, &node0);
    assert_true(CPU_COUNT(&want) > 0);

    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, waiter, NULL), 0);
    topo_bind_result r;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = topo_bind_numa_node(0, "--numa-node", &r, &err);
    if (rc != SC_OK)
        fail_msg("binding to node 0: %s", err.msg);
    assert_int_equal(r.os_index, 0);
    assert_int_equal(r.n_pus, CPU_COUNT(&want));
    assert_true(r.n_cores >= 1 && r.n_cores <= r.n_pus);
    if (!r.memory_bound)
        print_message("memory not bound here: %s\n", r.memory_note);

    assert_int_equal(sched_getaffinity(0, sizeof(main_after), &main_after), 0);
    assert_true(CPU_EQUAL(&main_after, &want));
    /* the thread that ran before the binding moved too */
    assert_int_equal(pthread_getaffinity_np(t, sizeof(thread_after), &thread_after), 0);
    assert_true(CPU_EQUAL(&thread_after, &want));
    /* the CPU kernels' default thread count follows the binding */
    assert_int_equal(kn_cpu_cores_available() <= CPU_COUNT(&want), 1);
    assert_true(kn_cpu_cores_available() >= 1);

    pthread_mutex_lock(&gate);
    gate_open = true;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate);
    pthread_join(t, NULL);

    /* a node this machine lacks: refused, naming the ones it has, nothing changed */
    sc_err_clear(&err);
    assert_int_equal(topo_bind_numa_node(7, "--numa-node", &r, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--numa-node 7: this machine has NUMA node"));
    assert_int_equal(sched_getaffinity(0, sizeof(main_after), &main_after), 0);
    assert_true(CPU_EQUAL(&main_after, &want));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nodes_of_two_packages),
        cmocka_unit_test(test_find_names_valid_nodes),
        cmocka_unit_test(test_json_keys),
        cmocka_unit_test(test_human_layout_line),
        cmocka_unit_test(test_bind_node_0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
