/*
 * topo_bind: binds the calling process to one NUMA node of the live machine, CPUs and memory,
 * for `stagecraft worker --numa-node N`.
 *
 * CPUs: every thread of the process (hwloc's HWLOC_CPUBIND_PROCESS walks /proc/self/task on
 * Linux), so the threads a library started before main (OpenBLAS's pool) move too, and every
 * thread started later inherits the mask. The CPUs are the node's within those the process
 * may already run on (taskset, Slurm's task affinity, systemd's CPUAffinity=), so a binding
 * never escapes what the process was given.
 * Memory: HWLOC_MEMBIND_BIND to the node, by nodeset. Linux keeps a memory policy per thread:
 * it is set on the calling thread and inherited by the threads it starts afterwards; threads
 * that already run keep allocating by first touch, which the CPU binding keeps on the node.
 * Where the kernel or the container refuses it (no CAP_SYS_NICE under Docker's seccomp
 * profile), the CPU binding stands and the result says why memory is not bound.
 *
 * What it does not do: it does not pick a node (topo_numa.h says which layout to run), does
 * not pin threads to single cores, and does not set the thread count (kn_cpu_threads' default,
 * the affinity mask, follows the binding when read after it).
 *
 * Key invariant: on any error nothing is bound.
 */
#ifndef SC_TOPO_BIND_H
#define SC_TOPO_BIND_H

#include <stdbool.h>

#include "common/sc_status.h"
#include "topology/topo.h"

typedef struct topo_bind_result {
    int os_index;
    char cpus[TOPO_CPULIST_MAX]; /* the CPUs bound, cpulist syntax: "0-15,32-47" */
    int n_cores, n_pus;          /* of those CPUs */
    bool memory_bound;
    char memory_note[192]; /* when !memory_bound: what refused it */
} topo_bind_result;

/*
 * Binds this process to NUMA node `os_index` (hwloc os index) as described above and fills
 * *out. Errors: SC_ERR_INVALID, the message starting with `what` ("--numa-node") and naming
 * the valid nodes, for a node this machine does not have, one without CPUs, or one whose CPUs
 * all lie outside the process's affinity; SC_ERR_UNSUPPORTED when hwloc describes another
 * machine (HWLOC_XMLFILE or HWLOC_SYNTHETIC set); SC_ERR_PERMISSION when the kernel refuses
 * the CPU binding. Call it before starting threads that should not move while they run.
 */
sc_status topo_bind_numa_node(int os_index, const char *what, topo_bind_result *out, sc_err *err);

#endif /* SC_TOPO_BIND_H */
