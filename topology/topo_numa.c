/*
 * topo_numa: reading a server's NUMA nodes from hwloc, and the CPU-worker layout they call for
 * (see topo_numa.h).
 */
#include "topology/topo_numa.h"

#include <hwloc.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "topology/topo_internal.h"

/* Writes `set` as a cpulist into out; a list that does not fit is cut after a whole entry and
 * ends in "...". */
static void cpulist(hwloc_const_bitmap_t set, char *out, size_t size)
{
    out[0] = '\0';
    if (set == NULL || hwloc_bitmap_iszero(set))
        return;
    int need = hwloc_bitmap_list_snprintf(out, size, set);
    if (need >= 0 && (size_t)need < size)
        return;
    out[size - 4] = '\0';
    char *comma = strrchr(out, ',');
    if (comma != NULL)
        comma[1] = '\0';
    sc_strlcpy(out + strlen(out), "...", size - strlen(out));
}

static int cmp_node(const void *a, const void *b)
{
    const topo_numa_node *x = a, *y = b;
    return (x->os_index > y->os_index) - (x->os_index < y->os_index);
}

sc_status topo_numa_read(hwloc_topology_t t, topo_numa_node **out, size_t *n_out, sc_err *err)
{
    *out = NULL;
    *n_out = 0;
    int n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    if (n <= 0)
        return SC_OK;
    topo_numa_node *nodes = calloc((size_t)n, sizeof(*nodes));
    SC_ALLOC_CHECK(nodes, err);
    int n_cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)i);
        topo_numa_node *d = &nodes[i];
        d->os_index = (int)o->os_index;
        d->memory_bytes = o->attr != NULL ? o->attr->numanode.local_memory : 0;
        if (o->cpuset == NULL)
            continue;
        d->n_pus = hwloc_get_nbobjs_inside_cpuset_by_type(t, o->cpuset, HWLOC_OBJ_PU);
        /* a core counts where its PUs are; an export without cores counts PUs */
        if (n_cores <= 0) {
            d->n_cores = d->n_pus;
        } else {
            for (int c = 0; c < n_cores; c++) {
                hwloc_obj_t core = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, (unsigned)c);
                d->n_cores +=
                    core->cpuset != NULL && hwloc_bitmap_intersects(core->cpuset, o->cpuset);
            }
        }
        if (d->n_pus > 0)
            cpulist(o->cpuset, d->cpus, sizeof(d->cpus));
        else
            d->n_cores = 0;
    }
    qsort(nodes, (size_t)n, sizeof(*nodes), cmp_node);
    *out = nodes;
    *n_out = (size_t)n;
    return SC_OK;
}

size_t topo_numa_worker_nodes(const topo_numa_node *nodes, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += nodes[i].n_pus > 0;
    return k;
}

/* "0, 1, 3" of the nodes with (with_cpus) or without PUs. */
static void list_nodes(const topo_numa_node *nodes, size_t n, bool with_cpus, char *out,
                       size_t size)
{
    out[0] = '\0';
    size_t used = 0;
    for (size_t i = 0; i < n && used < size; i++) {
        if ((nodes[i].n_pus > 0) != with_cpus)
            continue;
        int w = snprintf(out + used, size - used, "%s%d", used ? ", " : "", nodes[i].os_index);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

sc_status topo_numa_find(const topo_numa_node *nodes, size_t n, int os_index, const char *what,
                         size_t *index, sc_err *err)
{
    char valid[256], memory_only[256];
    list_nodes(nodes, n, true, valid, sizeof(valid));
    list_nodes(nodes, n, false, memory_only, sizeof(memory_only));
    for (size_t i = 0; i < n; i++) {
        if (nodes[i].os_index != os_index)
            continue;
        if (nodes[i].n_pus > 0) {
            *index = i;
            return SC_OK;
        }
        return SC_ERRF(err, SC_ERR_INVALID,
                       "%s %d: NUMA node %d has no CPUs this process may use; nodes with CPUs: %s",
                       what, os_index, os_index, valid[0] ? valid : "none");
    }
    if (valid[0] == '\0')
        return SC_ERRF(err, SC_ERR_INVALID, "%s %d: this machine has no NUMA node with CPUs", what,
                       os_index);
    size_t n_valid = topo_numa_worker_nodes(nodes, n), n_memory = n - n_valid;
    if (n_memory == 0)
        return SC_ERRF(err, SC_ERR_INVALID, "%s %d: this machine has NUMA node%s %s", what,
                       os_index, n_valid == 1 ? "" : "s", valid);
    return SC_ERRF(err, SC_ERR_INVALID,
                   "%s %d: this machine has NUMA node%s %s (node%s %s ha%s memory only, no CPUs)",
                   what, os_index, n_valid == 1 ? "" : "s", valid, n_memory == 1 ? "" : "s",
                   memory_only, n_memory == 1 ? "s" : "ve");
}

sc_status topo_numa_copy(topo_numa_node **out, const topo_numa_node *nodes, size_t n, sc_err *err)
{
    *out = NULL;
    if (n == 0)
        return SC_OK;
    *out = malloc(n * sizeof(**out));
    SC_ALLOC_CHECK(*out, err);
    memcpy(*out, nodes, n * sizeof(**out));
    return SC_OK;
}

static int set_new(json_t *obj, const char *key, json_t *v)
{
    return v == NULL || json_object_set_new(obj, key, v) != 0;
}

json_t *topo_numa_json_detail(const topo_numa_node *nodes, size_t n)
{
    json_t *arr = json_array();
    int bad = arr == NULL;
    for (size_t i = 0; i < n && !bad; i++) {
        const topo_numa_node *d = &nodes[i];
        json_t *o = json_object();
        bad |= o == NULL || json_array_append_new(arr, o) != 0;
        if (bad)
            break;
        bad |= set_new(o, "os_index", json_integer(d->os_index));
        bad |= set_new(o, "cpus", json_string(d->cpus));
        bad |= set_new(o, "cores", json_integer(d->n_cores));
        bad |= set_new(o, "pus", json_integer(d->n_pus));
        bad |= set_new(o, "memory_bytes", json_integer((json_int_t)d->memory_bytes));
    }
    if (bad) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

json_t *topo_numa_json_workers(const topo_numa_node *nodes, size_t n)
{
    size_t k = topo_numa_worker_nodes(nodes, n);
    json_t *o = json_object(), *ids = json_array();
    int bad = o == NULL || ids == NULL;
    if (!bad)
        bad |= set_new(o, "layout", json_string(k > 1 ? "one_per_numa_node" : "one"));
    for (size_t i = 0; i < n && !bad; i++)
        if (nodes[i].n_pus > 0)
            bad |= json_array_append_new(ids, json_integer(nodes[i].os_index)) != 0;
    if (!bad) {
        bad |= set_new(o, "numa_nodes", ids);
        ids = NULL;
    }
    json_decref(ids);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void fmt_gb(uint64_t bytes, char *out, size_t size)
{
    if (bytes == 0)
        snprintf(out, size, "memory unknown");
    else if (bytes >= 1000000000ull)
        snprintf(out, size, "%.1f GB", (double)bytes / 1e9);
    else
        snprintf(out, size, "%.1f MB", (double)bytes / 1e6);
}

void topo_numa_print(const topo_numa_node *nodes, size_t n, int cores, FILE *out)
{
    char mem[32];
    if (n > 0) {
        fprintf(out, "  numa:");
        for (size_t i = 0; i < n; i++) {
            const topo_numa_node *d = &nodes[i];
            fmt_gb(d->memory_bytes, mem, sizeof(mem));
            if (d->n_pus > 0)
                fprintf(out, "%s node %d CPUs %s (%d cores, %s)", i ? ";" : "", d->os_index,
                        d->cpus, d->n_cores, mem);
            else
                fprintf(out, "%s node %d no CPUs (%s)", i ? ";" : "", d->os_index, mem);
        }
        fprintf(out, "\n");
    }
    size_t k = topo_numa_worker_nodes(nodes, n);
    if (k <= 1) {
        for (size_t i = 0; i < n; i++)
            if (nodes[i].n_pus > 0)
                cores = nodes[i].n_cores;
        fprintf(out, "  CPU workers: one worker, %d cores: stagecraft worker\n", cores);
        return;
    }
    fprintf(out, "  CPU workers: one per NUMA node:");
    size_t shown = 0;
    for (size_t i = 0; i < n; i++)
        if (nodes[i].n_pus > 0)
            fprintf(out, "%s stagecraft worker --numa-node %d (%d cores)", shown++ ? "," : "",
                    nodes[i].os_index, nodes[i].n_cores);
    fprintf(out, "\n");
}
