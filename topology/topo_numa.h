/*
 * topo_numa: a server's NUMA nodes (topo_numa_node in topo.h) and the CPU-worker layout they
 * call for: one CPU worker per NUMA node that has CPUs (`stagecraft worker --numa-node N`), so
 * each worker's threads and memory stay on one node, or one worker for the whole machine when
 * it has a single node.
 *
 * It reads the nodes out of a loaded hwloc topology (topo_internal.h: live, XML or synthetic
 * alike), finds a node by os index for `--numa-node` with a message naming the valid ones, and
 * writes the layout as JSON and as the line of `stagecraft topo`'s human view.
 *
 * What it does not do: it does not bind anything (topo_bind.h does, on the live machine), and
 * it does not weigh GPUs: the layout is the CPU's alone.
 *
 * Key invariant: nodes are in increasing os index, and a node runs a worker (worker = true)
 * exactly when it has PUs and none of them is a PU of a node of lower os index, so no two
 * workers of the layout share a CPU: a second node over the same CPUs (HBM, CXL or MCDRAM
 * memory beside DDR) and a node without CPUs (its CPUs withheld by the cgroup) get none.
 */
#ifndef SC_TOPO_NUMA_H
#define SC_TOPO_NUMA_H

#include <stddef.h>
#include <stdio.h>

#include "common/sc_status.h"
#include "topology/topo.h"

struct json_t; /* jansson's */

/* Number of nodes that run a CPU worker (worker = true); 0 when none has PUs. */
size_t topo_numa_worker_nodes(const topo_numa_node *nodes, size_t n);

/*
 * Finds the node of os index `os_index` among those with PUs (a worker may bind to a node the
 * layout does not use, e.g. HBM beside DDR); *index is its position in `nodes`. SC_ERR_INVALID
 * otherwise, the message starting with `what` and `os_index` and naming the valid nodes:
 * "--numa-node 3: this machine has NUMA nodes 0, 1", or, for a node without CPUs, "--numa-node 2:
 * NUMA node 2 has no CPUs this process may use; nodes with CPUs: 0, 1".
 */
sc_status topo_numa_find(const topo_numa_node *nodes, size_t n, int os_index, const char *what,
                         size_t *index, sc_err *err);

/* Copies n nodes into a new array *out (NULL when n is 0) the caller frees with free(). */
sc_status topo_numa_copy(topo_numa_node **out, const topo_numa_node *nodes, size_t n, sc_err *err);

/* The cluster JSON's per-server keys: "numa_nodes_detail" (every node: os_index, cpus, cores,
 * pus, memory_bytes) and "cpu_workers" ({"layout": "one_per_numa_node" | "one",
 * "numa_nodes": [os indexes]}). New references; NULL when out of memory. */
struct json_t *topo_numa_json_detail(const topo_numa_node *nodes, size_t n);
struct json_t *topo_numa_json_workers(const topo_numa_node *nodes, size_t n);

/* The human view's lines for one server, indented by two spaces:
 *   numa: node 0 CPUs 0-15,32-47 (16 cores, 192.0 GB); node 1 ...
 *   CPU workers: one per NUMA node: stagecraft worker --numa-node 0 (16 cores), ...
 * or "CPU workers: one worker, 8 cores: stagecraft worker" for a single node. `cores` is the
 * server's core count, used when no node lists CPUs. */
void topo_numa_print(const topo_numa_node *nodes, size_t n, int cores, FILE *out);

#endif /* SC_TOPO_NUMA_H */
