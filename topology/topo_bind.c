/*
 * topo_bind: binding this process to one NUMA node (see topo_bind.h). Loads its own hwloc
 * topology of the live machine, without I/O devices: binding needs only CPUs and nodes.
 */
#include "topology/topo_bind.h"

#include <errno.h>
#include <hwloc.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "topology/topo_internal.h"
#include "topology/topo_numa.h"

static int count_cores(hwloc_topology_t t, hwloc_const_bitmap_t set)
{
    int n_cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE), n = 0;
    if (n_cores <= 0)
        return hwloc_bitmap_weight(set);
    for (int c = 0; c < n_cores; c++) {
        hwloc_obj_t core = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, (unsigned)c);
        n += core->cpuset != NULL && hwloc_bitmap_intersects(core->cpuset, set);
    }
    return n;
}

sc_status topo_bind_numa_node(int os_index, const char *what, topo_bind_result *out, sc_err *err)
{
    memset(out, 0, sizeof(*out));
    out->os_index = os_index;
    hwloc_topology_t t = NULL;
    hwloc_bitmap_t mine = NULL, target = NULL;
    topo_numa_node *nodes = NULL;
    size_t n_nodes = 0, at = 0;
    sc_status rc = SC_OK;
    if (hwloc_topology_init(&t) != 0)
        return SC_ERRF(err, SC_ERR_NOMEM, "%s: hwloc_topology_init failed", what);
    if (hwloc_topology_load(t) != 0) {
        rc = SC_ERRF(err, SC_ERR_INTERNAL, "%s: hwloc could not read this machine: %s", what,
                     strerror(errno));
        goto out;
    }
    if (!hwloc_topology_is_thissystem(t)) {
        rc = SC_ERRF(err, SC_ERR_UNSUPPORTED,
                     "%s: hwloc describes another machine (HWLOC_XMLFILE, HWLOC_SYNTHETIC or "
                     "HWLOC_FSROOT is set): cannot bind; unset it",
                     what);
        goto out;
    }
    SC_CHECK_GOTO(topo_numa_read(t, &nodes, &n_nodes, err), out);
    SC_CHECK_GOTO(topo_numa_find(nodes, n_nodes, os_index, what, &at, err), out);
    hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(t, (unsigned)os_index);
    mine = hwloc_bitmap_alloc();
    target = hwloc_bitmap_alloc();
    if (node == NULL || mine == NULL || target == NULL) {
        rc = SC_ERRF(err, node == NULL ? SC_ERR_INTERNAL : SC_ERR_NOMEM,
                     "%s %d: hwloc lost the node", what, os_index);
        goto out;
    }
    /* the CPUs this process may run on now; where hwloc cannot say, the machine's allowed set */
    if (hwloc_get_cpubind(t, mine, HWLOC_CPUBIND_PROCESS) != 0 || hwloc_bitmap_iszero(mine))
        hwloc_bitmap_copy(mine, hwloc_topology_get_allowed_cpuset(t));
    hwloc_bitmap_and(target, node->cpuset, mine);
    if (hwloc_bitmap_iszero(target)) {
        char have[TOPO_CPULIST_MAX];
        hwloc_bitmap_list_snprintf(have, sizeof(have), mine);
        rc = SC_ERRF(err, SC_ERR_INVALID,
                     "%s %d: the node's CPUs %s are all outside the CPUs this process may run on "
                     "(%s: taskset, Slurm or systemd CPUAffinity= gave it those)",
                     what, os_index, nodes[at].cpus, have);
        goto out;
    }
    if (hwloc_set_cpubind(t, target, HWLOC_CPUBIND_PROCESS) != 0) {
        rc = SC_ERRF(err, SC_ERR_PERMISSION, "%s %d: the kernel refused to bind to CPUs %s: %s",
                     what, os_index, nodes[at].cpus, strerror(errno));
        goto out;
    }
    hwloc_bitmap_list_snprintf(out->cpus, sizeof(out->cpus), target);
    out->n_pus = hwloc_bitmap_weight(target);
    out->n_cores = count_cores(t, target);
    /* no PROCESS flag: Linux has no process-wide memory policy, hwloc sets this thread's */
    if (hwloc_set_membind(t, node->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET) == 0) {
        out->memory_bound = true;
    } else {
        snprintf(out->memory_note, sizeof(out->memory_note), "%s%s", strerror(errno),
                 errno == EPERM || errno == ENOSYS
                     ? " (the container or kernel forbids set_mempolicy)"
                     : "");
    }
out:
    hwloc_bitmap_free(mine);
    hwloc_bitmap_free(target);
    free(nodes);
    hwloc_topology_destroy(t);
    return rc;
}
