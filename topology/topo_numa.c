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

static int cmp_obj(const void *a, const void *b)
{
    hwloc_obj_t x = *(hwloc_obj_t const *)a, y = *(hwloc_obj_t const *)b;
    return (x->os_index > y->os_index) - (x->os_index < y->os_index);
}

/* Cores and PUs below every normal object, indexed by depth and logical index: one walk up
 * from each core and PU, so the cost stays linear in the topology's size whatever an export
 * holds (a count per NUMA node by cpuset intersection would be quadratic). */
typedef struct {
    int depth;
    size_t *offset; /* first slot of each depth */
    int *cores, *pus;
} below_counts;

static void count_up(const below_counts *b, hwloc_obj_t o, int *counts)
{
    for (hwloc_obj_t a = o; a != NULL; a = a->parent)
        if (a->depth >= 0 && a->depth < b->depth)
            counts[b->offset[a->depth] + a->logical_index]++;
}

static sc_status below_counts_new(below_counts *b, hwloc_topology_t t, sc_err *err)
{
    memset(b, 0, sizeof(*b));
    b->depth = hwloc_topology_get_depth(t);
    b->offset = calloc((size_t)b->depth + 1, sizeof(*b->offset));
    SC_ALLOC_CHECK(b->offset, err);
    for (int d = 0; d < b->depth; d++)
        b->offset[d + 1] = b->offset[d] + (size_t)hwloc_get_nbobjs_by_depth(t, d);
    b->cores = calloc(b->offset[b->depth] + 1, sizeof(*b->cores));
    b->pus = calloc(b->offset[b->depth] + 1, sizeof(*b->pus));
    if (b->cores == NULL || b->pus == NULL) {
        free(b->offset);
        free(b->cores);
        free(b->pus);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory counting cores");
    }
    for (hwloc_obj_t c = NULL; (c = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_CORE, c)) != NULL;)
        count_up(b, c, b->cores);
    for (hwloc_obj_t p = NULL; (p = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, p)) != NULL;)
        count_up(b, p, b->pus);
    return SC_OK;
}

sc_status topo_numa_read(hwloc_topology_t t, topo_numa_node **out, size_t *n_out, sc_err *err)
{
    *out = NULL;
    *n_out = 0;
    int n = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
    if (n <= 0)
        return SC_OK;
    below_counts b;
    SC_CHECK(below_counts_new(&b, t, err));
    topo_numa_node *nodes = calloc((size_t)n, sizeof(*nodes));
    hwloc_obj_t *objs = calloc((size_t)n, sizeof(*objs));
    hwloc_bitmap_t taken = hwloc_bitmap_alloc(); /* the CPUs of the nodes with a worker */
    if (nodes == NULL || objs == NULL || taken == NULL) {
        free(b.offset);
        free(b.cores);
        free(b.pus);
        free(nodes);
        free(objs);
        hwloc_bitmap_free(taken);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading NUMA nodes");
    }
    for (int i = 0; i < n; i++)
        objs[i] = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)i);
    qsort(objs, (size_t)n, sizeof(*objs), cmp_obj);
    bool any_core = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE) > 0;
    for (int i = 0; i < n; i++) {
        hwloc_obj_t o = objs[i];
        topo_numa_node *d = &nodes[i];
        d->os_index = (int)o->os_index;
        d->memory_bytes = o->attr != NULL ? o->attr->numanode.local_memory : 0;
        /* a node is attached to the object whose CPUs are its CPUs (through memory-side
         * caches, which are memory objects too) */
        hwloc_obj_t p = o->parent;
        while (p != NULL && p->depth < 0)
            p = p->parent;
        if (p == NULL || p->depth >= b.depth)
            continue;
        size_t slot = b.offset[p->depth] + p->logical_index;
        d->n_pus = b.pus[slot];
        d->n_cores = any_core ? b.cores[slot] : d->n_pus; /* an export without cores: PUs */
        if (d->n_pus == 0) {
            d->n_cores = 0;
            continue;
        }
        cpulist(o->cpuset, d->cpus, sizeof(d->cpus));
        d->worker = !hwloc_bitmap_intersects(o->cpuset, taken);
        hwloc_bitmap_or(taken, taken, o->cpuset);
    }
    free(b.offset);
    free(b.cores);
    free(b.pus);
    free(objs);
    hwloc_bitmap_free(taken);
    *out = nodes;
    *n_out = (size_t)n;
    return SC_OK;
}

size_t topo_numa_worker_nodes(const topo_numa_node *nodes, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += nodes[i].worker;
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
    size_t n_valid = 0;
    for (size_t i = 0; i < n; i++)
        n_valid += nodes[i].n_pus > 0;
    size_t n_memory = n - n_valid;
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
        bad |= set_new(o, "worker", json_boolean(d->worker));
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
        if (nodes[i].worker)
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
                fprintf(out, "%s node %d CPUs %s (%d cores, %s%s)", i ? ";" : "", d->os_index,
                        d->cpus, d->n_cores, mem,
                        d->worker ? "" : "; CPUs of a lower node: no worker of its own");
            else
                fprintf(out, "%s node %d no CPUs (%s)", i ? ";" : "", d->os_index, mem);
        }
        fprintf(out, "\n");
    }
    size_t k = topo_numa_worker_nodes(nodes, n);
    if (k <= 1) {
        for (size_t i = 0; i < n; i++)
            if (nodes[i].worker)
                cores = nodes[i].n_cores;
        fprintf(out, "  CPU workers: one worker, %d cores: stagecraft worker\n", cores);
        return;
    }
    fprintf(out, "  CPU workers: one per NUMA node:");
    size_t shown = 0;
    for (size_t i = 0; i < n; i++)
        if (nodes[i].worker)
            fprintf(out, "%s stagecraft worker --numa-node %d (%d cores)", shown++ ? "," : "",
                    nodes[i].os_index, nodes[i].n_cores);
    fprintf(out, "\n");
}
