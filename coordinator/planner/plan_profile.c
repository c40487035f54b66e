/*
 * plan_profile: readers for the two profile formats and the time-scaling rule.
 *
 * graph.txt is a DAG; the planner cuts chains, so it is linearised in topological order and
 * each position's activation_bytes becomes the sum of the outputs that cross a cut there.
 * PipeDream's own optimizer zeroes the data-loading `Input*` sources and drops unused
 * `__getitem__` sinks; we do the same so that its objective can be reproduced. The DAG itself is
 * kept too (predecessor lists over the linear positions) for the pipedream strategy, whose
 * states are the graph's antichains rather than prefixes of one order.
 */
#include "coordinator/planner/plan_profile.h"

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_json.h"
#include "common/sc_util.h"

sc_status plan_profile_new(plan_profile **out, int n_blocks, sc_err *err)
{
    *out = NULL;
    if (n_blocks < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "a profile needs at least one block, got %d", n_blocks);
    plan_profile *p = calloc(1, sizeof *p);
    SC_ALLOC_CHECK(p, err);
    p->blocks = calloc((size_t)n_blocks, sizeof *p->blocks);
    if (p->blocks == NULL) {
        free(p);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for %d blocks", n_blocks);
    }
    p->n_blocks = n_blocks;
    p->microbatch_size = 1;
    p->dag_source = -1;
    sc_strlcpy(p->model, "synthetic", sizeof p->model);
    sc_strlcpy(p->reference_device, "reference", sizeof p->reference_device);
    for (int l = 0; l < n_blocks; l++)
        snprintf(p->blocks[l].name, sizeof p->blocks[l].name, "b%d", l);
    *out = p;
    return SC_OK;
}

void plan_profile_destroy(plan_profile **pp)
{
    if (pp == NULL || *pp == NULL)
        return;
    plan_profile *p = *pp;
    for (int l = 0; l < p->n_blocks; l++)
        free(p->blocks[l].sizes);
    free(p->blocks);
    free(p->pred_start);
    free(p->pred);
    free(p);
    *pp = NULL;
}

/* ---------------------------------------------------------------- JSON profile */

static sc_status parse_sizes(const sc_jnode *blk, plan_block *b, sc_err *err)
{
    if (!sc_jnode_has(blk, "by_microbatch_size"))
        return SC_OK;
    sc_jnode arr;
    SC_CHECK(sc_json_get_array(blk, "by_microbatch_size", 1, 4096, &arr, err));
    size_t n = sc_jnode_size(&arr);
    b->sizes = calloc(n, sizeof *b->sizes);
    SC_ALLOC_CHECK(b->sizes, err);
    b->n_sizes = (int)n;
    for (size_t i = 0; i < n; i++) {
        sc_jnode e = sc_jnode_element(&arr, i);
        int64_t size;
        SC_CHECK(sc_jnode_expect_object(&e, err));
        SC_CHECK(sc_json_get_int(&e, "size", 1, 1 << 24, &size, err));
        SC_CHECK(sc_json_get_number(&e, "forward_s", 0, 1e9, &b->sizes[i].forward_s, err));
        SC_CHECK(sc_json_get_number(&e, "backward_s", 0, 1e9, &b->sizes[i].backward_s, err));
        b->sizes[i].size = (int)size;
        if (i > 0 && b->sizes[i].size <= b->sizes[i - 1].size) {
            sc_jnode sn;
            SC_CHECK(sc_jnode_member(&e, "size", &sn, err));
            return sc_jnode_fail(&sn, err, SC_ERR_INVALID,
                                 "sizes must increase strictly (previous entry has %d)",
                                 b->sizes[i - 1].size);
        }
    }
    return SC_OK;
}

/* Whether any block takes time: a profile of zeros would plan to infinite throughput. */
static bool has_time(const plan_profile *p)
{
    for (int l = 0; l < p->n_blocks; l++)
        if (p->blocks[l].forward_s + p->blocks[l].backward_s > 0)
            return true;
    return false;
}

typedef struct {
    const char *name;
    int index;
} named_index;

static int cmp_by_name(const void *a, const void *b)
{
    const named_index *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c != 0 ? c : (x->index > y->index) - (x->index < y->index);
}

/* The first block (in file order) whose name an earlier block has, or -1. */
static int duplicate_name(const plan_profile *p)
{
    int n = p->n_blocks, dup = -1;
    named_index *v = malloc((size_t)n * sizeof *v);
    if (v == NULL)
        return -1; /* no check without memory; the profile is still usable */
    for (int i = 0; i < n; i++)
        v[i] = (named_index){p->blocks[i].name, i};
    qsort(v, (size_t)n, sizeof *v, cmp_by_name);
    for (int k = 1; k < n; k++)
        if (strcmp(v[k].name, v[k - 1].name) == 0 && (dup < 0 || v[k].index < dup))
            dup = v[k].index;
    free(v);
    return dup;
}

static sc_status parse_json_doc(plan_profile **out, const sc_jdoc *doc, sc_err *err)
{
    sc_jnode root = sc_jdoc_root(doc), blocks;
    plan_profile *p = NULL;
    const char *s;
    int64_t mb;
    sc_status rc;
    SC_CHECK(sc_jnode_expect_object(&root, err));
    SC_CHECK(sc_jdoc_check_format(doc, "stagecraft-profile", 1, NULL, err));
    SC_CHECK(sc_json_get_int(&root, "microbatch_size", 1, 1 << 24, &mb, err));
    SC_CHECK(sc_json_get_array(&root, "blocks", 1, 1 << 20, &blocks, err));
    size_t n = sc_jnode_size(&blocks);
    SC_CHECK(plan_profile_new(&p, (int)n, err));
    p->kind = PLAN_PROFILE_JSON;
    p->microbatch_size = (int)mb;
    SC_CHECK_GOTO(sc_json_opt_string(&root, "model", "model", &s, err), fail);
    sc_strlcpy(p->model, s, sizeof p->model);
    SC_CHECK_GOTO(sc_json_opt_string(&root, "reference_device", "reference", &s, err), fail);
    sc_strlcpy(p->reference_device, s, sizeof p->reference_device);
    for (size_t i = 0; i < n; i++) {
        sc_jnode e = sc_jnode_element(&blocks, i);
        plan_block *b = &p->blocks[i];
        SC_CHECK_GOTO(sc_jnode_expect_object(&e, err), fail);
        SC_CHECK_GOTO(sc_json_get_string(&e, "name", &s, err), fail);
        sc_strlcpy(b->name, s, sizeof b->name);
        SC_CHECK_GOTO(sc_json_get_number(&e, "forward_s", 0, 1e9, &b->forward_s, err), fail);
        SC_CHECK_GOTO(sc_json_get_number(&e, "backward_s", 0, 1e9, &b->backward_s, err), fail);
        SC_CHECK_GOTO(
            sc_json_get_number(&e, "activation_bytes", 0, 1e18, &b->activation_bytes, err), fail);
        SC_CHECK_GOTO(
            sc_json_opt_number(&e, "parameter_bytes", 0, 1e18, 0, &b->parameter_bytes, err), fail);
        SC_CHECK_GOTO(sc_json_opt_number(&e, "optimizer_s", 0, 1e6, 0, &b->optimizer_s, err), fail);
        SC_CHECK_GOTO(sc_json_opt_number(&e, "stash_bytes", 0, 1e18, b->activation_bytes,
                                         &b->stash_bytes, err),
                      fail);
        SC_CHECK_GOTO(parse_sizes(&e, b, err), fail);
    }
    int dup = duplicate_name(p);
    if (dup >= 0) {
        sc_jnode e = sc_jnode_element(&blocks, (size_t)dup), name;
        sc_jnode_member(&e, "name", &name, NULL);
        rc = sc_jnode_fail(&name, err, SC_ERR_INVALID,
                           "block name \"%s\" is used by an earlier block; names are unique",
                           p->blocks[dup].name);
        goto fail;
    }
    if (!has_time(p)) {
        rc = sc_jnode_fail(&blocks, err, SC_ERR_INVALID,
                           "every block's forward_s and backward_s are 0; expected measured times");
        goto fail;
    }
    *out = p;
    return SC_OK;
fail:
    plan_profile_destroy(&p);
    return rc;
}

sc_status plan_profile_parse_json(plan_profile **out, const char *source, const char *text,
                                  size_t len, sc_err *err)
{
    sc_jdoc *doc = NULL;
    *out = NULL;
    SC_CHECK(sc_jdoc_parse(&doc, source, text, len, err));
    sc_status rc = parse_json_doc(out, doc, err);
    sc_jdoc_destroy(&doc);
    return rc;
}

/* ---------------------------------------------------------------- PipeDream graph.txt */

typedef struct gnode {
    char id[64];
    char desc[PLAN_NAME_MAX];
    double f_ms, b_ms, act, param;
    int order;   /* position in the file */
    long number; /* numeric suffix of the id, for a stable topological order */
    int indeg, outdeg;
    int pos; /* position in the linear order, -1 when dropped */
} gnode;

typedef struct gedge {
    int src, dst;
} gedge;

typedef struct gparse {
    const char *source;
    gnode *nodes;
    int n_nodes, cap_nodes;
    gedge *edges;
    int n_edges, cap_edges;
    int *slots; /* open addressing over node ids: a node index, or -1 */
    size_t cap_slots;
} gparse;

static char *trim(char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static size_t id_hash(const char *id)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)id; *c; c++)
        h = (h ^ *c) * 1099511628211ull;
    return (size_t)h;
}

static int find_node(const gparse *g, const char *id)
{
    if (g->cap_slots == 0)
        return -1;
    for (size_t h = id_hash(id) & (g->cap_slots - 1);; h = (h + 1) & (g->cap_slots - 1)) {
        int i = g->slots[h];
        if (i < 0 || strcmp(g->nodes[i].id, id) == 0)
            return i;
    }
}

/* Indexes node `i` (its id not yet indexed) by its id, growing the table to stay half empty. */
static sc_status index_node(gparse *g, int i, sc_err *err)
{
    if (2 * ((size_t)i + 1) > g->cap_slots) {
        size_t cap = g->cap_slots ? 2 * g->cap_slots : 256;
        int *slots = malloc(cap * sizeof *slots);
        if (slots == NULL)
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading %s", g->source);
        for (size_t k = 0; k < cap; k++)
            slots[k] = -1;
        free(g->slots);
        g->slots = slots;
        g->cap_slots = cap;
        for (int k = 0; k < i; k++) {
            size_t h = id_hash(g->nodes[k].id) & (cap - 1);
            while (slots[h] >= 0)
                h = (h + 1) & (cap - 1);
            slots[h] = k;
        }
    }
    size_t h = id_hash(g->nodes[i].id) & (g->cap_slots - 1);
    while (g->slots[h] >= 0)
        h = (h + 1) & (g->cap_slots - 1);
    g->slots[h] = i;
    return SC_OK;
}

/* strtod for the decimal numbers PipeDream writes: hexadecimal ("0x10"), which strtod also
 * reads, is no number here (*end == v). */
static double decimal(const char *v, char **end)
{
    const char *d = v + (*v == '+' || *v == '-');
    if (d[0] == '0' && (d[1] == 'x' || d[1] == 'X')) {
        *end = (char *)v;
        return 0;
    }
    return strtod(v, end);
}

/* A number or a list "[a; b; c]" whose elements are summed; the result lies in [0, max]. Values
 * are bounded so that sums over thousands of blocks stay finite. */
static int parse_metric(const char *v, double max, double *out)
{
    char *end;
    while (isspace((unsigned char)*v))
        v++;
    if (*v == '[') {
        /* one or more numbers separated by ';': "[]" and "[a;]" are refused */
        double sum = 0;
        v++;
        for (;;) {
            while (isspace((unsigned char)*v))
                v++;
            double x = decimal(v, &end);
            if (end == v || !isfinite(x) || x < 0)
                return -1;
            sum += x;
            v = end;
            while (isspace((unsigned char)*v))
                v++;
            if (*v == ']')
                break;
            if (*v != ';')
                return -1;
            v++;
        }
        v++;
        while (isspace((unsigned char)*v))
            v++;
        *out = sum;
        return *v == '\0' && sum <= max ? 0 : -1;
    }
    double x = decimal(v, &end);
    if (end == v || !isfinite(x) || x < 0)
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    *out = x;
    return *end == '\0' && x <= max ? 0 : -1;
}

static sc_status parse_node_line(gparse *g, char *line, int lineno, sc_err *err)
{
    char *fields[64];
    int nf = 0;
    char *s = line;
    for (;;) {
        char *sep = strstr(s, " -- ");
        if (nf == 63)
            break;
        fields[nf++] = s;
        if (sep == NULL)
            break;
        *sep = '\0';
        s = sep + 4;
    }
    int metrics = -1;
    for (int i = 1; i < nf; i++)
        if (strncmp(trim(fields[i]), "forward_compute_time=", 21) == 0)
            metrics = i;
    if (nf < 3 || metrics < 2)
        return SC_ERRF(err, SC_ERR_PARSE,
                       "%s:%d: expected a node line 'ID -- DESCRIPTION -- "
                       "forward_compute_time=F, backward_compute_time=B, activation_size=A, "
                       "parameter_size=P' or an indented edge 'SRC -- DST'",
                       g->source, lineno);
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 64;
        gnode *nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        SC_ALLOC_CHECK(nn, err);
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    gnode *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    char *id = trim(fields[0]);
    if (*id == '\0' || strlen(id) >= sizeof n->id)
        return SC_ERRF(err, SC_ERR_PARSE, "%s:%d: node id must be 1-63 characters", g->source,
                       lineno);
    if (find_node(g, id) >= 0)
        return SC_ERRF(err, SC_ERR_PARSE, "%s:%d: node '%s' is defined twice", g->source, lineno,
                       id);
    sc_strlcpy(n->id, id, sizeof n->id);
    sc_strlcpy(n->desc, trim(fields[1]), sizeof n->desc);
    const char *p = id + strlen(id);
    while (p > id && isdigit((unsigned char)p[-1]))
        p--;
    n->number = *p ? strtol(p, NULL, 10) : -1;
    n->order = g->n_nodes;
    n->pos = -1;
    int seen = 0;
    /* metrics: "key=value, key=value"; list values use ';' inside brackets, so ',' splits */
    char *m = fields[metrics];
    while (m && *m) {
        char *comma = strchr(m, ',');
        if (comma)
            *comma = '\0';
        char *kv = trim(m);
        char *eq = strchr(kv, '=');
        if (eq == NULL)
            return SC_ERRF(err, SC_ERR_PARSE, "%s:%d: expected key=value, got '%s'", g->source,
                           lineno, kv);
        *eq = '\0';
        double v;
        /* times in ms up to 1e12 (1e9 s, as in the JSON format), sizes up to 1e18 bytes */
        double max = strstr(kv, "time") != NULL ? 1e12 : 1e18;
        if (parse_metric(eq + 1, max, &v) != 0)
            return SC_ERRF(err, SC_ERR_PARSE,
                           "%s:%d: %s: expected a number in [0, %g] or a list [a; b] of them, "
                           "got '%s'",
                           g->source, lineno, kv, max, eq + 1);
        if (strcmp(kv, "forward_compute_time") == 0)
            n->f_ms = v, seen |= 1;
        else if (strcmp(kv, "backward_compute_time") == 0)
            n->b_ms = v, seen |= 2;
        else if (strcmp(kv, "activation_size") == 0)
            n->act = v, seen |= 4;
        else if (strcmp(kv, "parameter_size") == 0)
            n->param = v, seen |= 8;
        m = comma ? comma + 1 : NULL;
    }
    if (seen != 15)
        return SC_ERRF(err, SC_ERR_PARSE,
                       "%s:%d: node '%s' lacks one of forward_compute_time, "
                       "backward_compute_time, activation_size, parameter_size",
                       g->source, lineno, id);
    SC_CHECK(index_node(g, g->n_nodes, err));
    g->n_nodes++;
    return SC_OK;
}

static sc_status parse_edge_line(gparse *g, char *line, int lineno, gedge *out, sc_err *err)
{
    char *sep = strstr(line, " -- ");
    if (sep == NULL)
        return SC_ERRF(err, SC_ERR_PARSE, "%s:%d: expected an edge 'SRC -- DST'", g->source,
                       lineno);
    *sep = '\0';
    char *a = trim(line), *b = trim(sep + 4);
    int ia = find_node(g, a), ib = find_node(g, b);
    if (ia < 0 || ib < 0)
        return SC_ERRF(err, SC_ERR_PARSE, "%s:%d: edge names unknown node '%s'", g->source, lineno,
                       ia < 0 ? a : b);
    if (ia == ib)
        return SC_ERRF(err, SC_ERR_PARSE, "%s:%d: edge from '%s' to itself", g->source, lineno, a);
    out->src = ia;
    out->dst = ib;
    return SC_OK;
}

static int before(const gnode *a, const gnode *b)
{
    /* data-loading inputs first, so that they can be zeroed into the first stage */
    int ia = strncmp(a->desc, "Input", 5) == 0, ib = strncmp(b->desc, "Input", 5) == 0;
    if (ia != ib)
        return ia;
    if (a->number != b->number)
        return a->number < b->number;
    return a->order < b->order;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int is_input_source(const gparse *g, const char *is_source, int i)
{
    return is_source[i] && strncmp(g->nodes[i].desc, "Input", 5) == 0;
}

/* Predecessor lists over the kept positions. Input sources come first in the linear order and
 * lose their out-edges (PipeDream deletes them); edges to dropped sinks vanish with them. */
static sc_status keep_dag(const gparse *g, plan_profile *p, const char *is_source, sc_err *err)
{
    int n = p->n_blocks, cnt = 0;
    p->pred_start = calloc((size_t)n + 1, sizeof *p->pred_start);
    p->pred = malloc(((size_t)g->n_edges + 1) * sizeof *p->pred);
    if (p->pred_start == NULL || p->pred == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for the graph of %s", g->source);
    for (int i = 0; i < g->n_nodes; i++) {
        const gnode *nd = &g->nodes[i];
        if (nd->pos >= 0 && is_input_source(g, is_source, i))
            p->n_input_blocks++;
    }
    for (int e = 0; e < g->n_edges; e++) {
        int src = g->edges[e].src, b = g->nodes[g->edges[e].dst].pos;
        if (!is_input_source(g, is_source, src) && b >= 0)
            p->pred_start[b + 1]++;
    }
    for (int l = 0; l < n; l++)
        p->pred_start[l + 1] += p->pred_start[l];
    int *fill = calloc((size_t)n, sizeof *fill);
    if (fill == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for the graph of %s", g->source);
    for (int e = 0; e < g->n_edges; e++) {
        int src = g->edges[e].src, b = g->nodes[g->edges[e].dst].pos;
        if (!is_input_source(g, is_source, src) && b >= 0)
            p->pred[p->pred_start[b] + fill[b]++] = g->nodes[src].pos;
    }
    free(fill);
    /* sort and drop repeated edges, compacting in place */
    for (int l = 0; l < n; l++) {
        int lo = p->pred_start[l], hi = p->pred_start[l + 1];
        qsort(p->pred + lo, (size_t)(hi - lo), sizeof *p->pred, cmp_int);
        p->pred_start[l] = cnt;
        for (int x = lo; x < hi; x++)
            if (x == lo || p->pred[x] != p->pred[x - 1])
                p->pred[cnt++] = p->pred[x];
    }
    p->pred_start[n] = cnt;
    for (int i = 0; i < g->n_nodes && p->dag_source < 0; i++) {
        int l = g->nodes[i].pos;
        if (l >= 0 && !is_input_source(g, is_source, i) && p->pred_start[l] == p->pred_start[l + 1])
            p->dag_source = l;
    }
    return SC_OK;
}

/* A binary min-heap of ready nodes ordered by before(). */
static void heap_push(const gparse *g, int *heap, int *n, int v)
{
    int i = (*n)++;
    while (i > 0 && before(&g->nodes[v], &g->nodes[heap[(i - 1) / 2]])) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = v;
}

static int heap_pop(const gparse *g, int *heap, int *n)
{
    int top = heap[0], v = heap[--*n], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && before(&g->nodes[heap[c + 1]], &g->nodes[heap[c]]))
            c++;
        if (!before(&g->nodes[heap[c]], &g->nodes[v]))
            break;
        heap[i] = heap[c];
        i = c;
    }
    if (*n > 0)
        heap[i] = v;
    return top;
}

/* Kahn's algorithm over the edges grouped by source; `indeg` (consumed) holds each node's
 * in-degree. Fills order[0..*placed); fewer than n placed means a cycle. */
static sc_status kahn(const gparse *g, int *indeg, int *order, int *placed, sc_err *err)
{
    int n = g->n_nodes, m = g->n_edges, ready = 0;
    int *start = calloc((size_t)n + 1, sizeof *start);
    int *dst = malloc(((size_t)m + 1) * sizeof *dst);
    int *heap = malloc(((size_t)n + 1) * sizeof *heap);
    sc_status rc = SC_OK;
    if (start == NULL || dst == NULL || heap == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory linearising %s", g->source);
        goto out;
    }
    for (int e = 0; e < m; e++)
        start[g->edges[e].src + 1]++;
    for (int i = 0; i < n; i++)
        start[i + 1] += start[i];
    /* start[] serves as each source's fill cursor, then is shifted back to the starts */
    for (int e = 0; e < m; e++)
        dst[start[g->edges[e].src]++] = g->edges[e].dst;
    for (int i = n; i > 0; i--)
        start[i] = start[i - 1];
    start[0] = 0;
    for (int i = 0; i < n; i++)
        if (indeg[i] == 0)
            heap_push(g, heap, &ready, i);
    *placed = 0;
    while (ready > 0) {
        int v = heap_pop(g, heap, &ready);
        order[(*placed)++] = v;
        for (int k = start[v]; k < start[v + 1]; k++)
            if (--indeg[dst[k]] == 0)
                heap_push(g, heap, &ready, dst[k]);
    }
out:
    free(start);
    free(dst);
    free(heap);
    return rc;
}

/* Kahn's algorithm; among ready nodes the one with the smallest id number goes first, so the
 * order does not depend on the (arbitrary) order of node lines in the file. */
static sc_status linearise(gparse *g, plan_profile **out, sc_err *err)
{
    int n = g->n_nodes;
    sc_status rc = SC_OK;
    int *indeg = calloc((size_t)n, sizeof *indeg);
    int *order = calloc((size_t)n, sizeof *order);
    int *last_use = calloc((size_t)n, sizeof *last_use);
    char *dropped = calloc((size_t)n, 1);
    char *is_source = calloc((size_t)n, 1);
    double *cut = NULL;
    plan_profile *p = NULL;
    if (!indeg || !order || !last_use || !dropped || !is_source) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory linearising %s", g->source);
        goto done;
    }
    for (int e = 0; e < g->n_edges; e++) {
        indeg[g->edges[e].dst]++;
        g->nodes[g->edges[e].src].outdeg++;
    }
    for (int i = 0; i < n; i++)
        is_source[i] = indeg[i] == 0;
    /* unused __getitem__ sinks are dropped, as PipeDream's optimizer does */
    for (int i = 0; i < n; i++)
        if (g->nodes[i].outdeg == 0 && strncmp(g->nodes[i].desc, "__getitem__", 11) == 0 && n > 1)
            dropped[i] = 1;
    int placed = 0;
    SC_CHECK_GOTO(kahn(g, indeg, order, &placed, err), done);
    if (placed < n) {
        rc = SC_ERRF(err, SC_ERR_PARSE,
                     "%s: the graph has a cycle (%d of %d nodes could not be ordered); a profile "
                     "must be a DAG",
                     g->source, n - placed, n);
        goto done;
    }
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (!dropped[order[i]])
            g->nodes[order[i]].pos = kept++;
    if (kept == 0) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: no nodes", g->source);
        goto done;
    }
    SC_CHECK_GOTO(plan_profile_new(&p, kept, err), done);
    p->kind = PLAN_PROFILE_PIPEDREAM;
    p->microbatch_size = 0;
    const char *base = strrchr(g->source, '/');
    sc_strlcpy(p->model, base ? base + 1 : g->source, sizeof p->model);
    cut = calloc((size_t)kept + 1, sizeof *cut);
    if (cut == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory linearising %s", g->source);
        goto done;
    }
    for (int i = 0; i < n; i++)
        last_use[i] = g->nodes[i].pos;
    for (int e = 0; e < g->n_edges; e++) {
        const gnode *d = &g->nodes[g->edges[e].dst];
        if (d->pos > last_use[g->edges[e].src])
            last_use[g->edges[e].src] = d->pos;
    }
    for (int i = 0; i < n; i++) {
        gnode *nd = &g->nodes[i];
        if (nd->pos < 0)
            continue;
        int is_input = strncmp(nd->desc, "Input", 5) == 0 && is_source[i];
        plan_block *b = &p->blocks[nd->pos];
        snprintf(b->name, sizeof b->name, "%s", nd->id);
        if (is_input)
            continue; /* zeroed: data loading always belongs to the first stage */
        b->forward_s = nd->f_ms / 1000.0;
        b->backward_s = nd->b_ms / 1000.0;
        b->parameter_bytes = nd->param;
        b->stash_bytes = nd->act;
        b->output_bytes = nd->act;
        /* the output crosses every cut between the node and its last consumer */
        int last = last_use[i];
        if (last == nd->pos && nd->pos == kept - 1)
            last = kept; /* the model's output, reported on the last block */
        cut[nd->pos] += nd->act;
        cut[last] -= nd->act;
    }
    double run = 0;
    for (int l = 0; l < kept; l++) {
        run += cut[l];
        p->blocks[l].activation_bytes = run > 0 ? run : 0;
    }
    if (!has_time(p)) {
        rc = SC_ERRF(err, SC_ERR_INVALID,
                     "%s: every node's forward_compute_time and backward_compute_time is 0 (input "
                     "nodes count as 0); expected measured times",
                     g->source);
        goto done;
    }
    SC_CHECK_GOTO(keep_dag(g, p, is_source, err), done);
    *out = p;
    p = NULL;
done:
    plan_profile_destroy(&p);
    free(indeg);
    free(order);
    free(last_use);
    free(dropped);
    free(is_source);
    free(cut);
    return rc;
}

sc_status plan_profile_parse_graph(plan_profile **out, const char *source, const char *text,
                                   sc_err *err)
{
    gparse g = {.source = source};
    sc_status rc = SC_OK;
    *out = NULL;
    /* two passes: nodes first (edges may name nodes defined later), then edges */
    for (int pass = 0; pass < 2 && rc == SC_OK; pass++) {
        int lineno = 0;
        char *buf = strdup(text);
        if (buf == NULL) {
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading %s", source);
            break;
        }
        /* strtok_r would skip empty lines and lose the numbering: split by hand */
        char *line = buf;
        while (line != NULL && rc == SC_OK) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            lineno++;
            size_t len = strlen(line);
            if (len && line[len - 1] == '\r')
                line[len - 1] = '\0';
            int indented = line[0] == ' ' || line[0] == '\t';
            char *t = trim(line);
            if (*t != '\0' && *t != '#') {
                if (pass == 0 && !indented) {
                    rc = parse_node_line(&g, t, lineno, err);
                } else if (pass == 1 && indented) {
                    gedge e;
                    rc = parse_edge_line(&g, t, lineno, &e, err);
                    if (rc == SC_OK) {
                        if (g.n_edges == g.cap_edges) {
                            int cap = g.cap_edges ? 2 * g.cap_edges : 64;
                            gedge *ne = realloc(g.edges, (size_t)cap * sizeof *ne);
                            if (ne == NULL) {
                                rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading %s", source);
                                break;
                            }
                            g.edges = ne;
                            g.cap_edges = cap;
                        }
                        g.edges[g.n_edges++] = e;
                    }
                }
            }
            line = nl ? nl + 1 : NULL;
        }
        free(buf);
    }
    if (rc == SC_OK && g.n_nodes == 0)
        rc = SC_ERRF(err, SC_ERR_PARSE,
                     "%s: no node lines found (expected 'ID -- DESCRIPTION -- "
                     "forward_compute_time=F, ...')",
                     source);
    if (rc == SC_OK)
        rc = linearise(&g, out, err);
    free(g.nodes);
    free(g.edges);
    free(g.slots);
    return rc;
}

/* ---------------------------------------------------------------- another topological order */

sc_status plan_profile_reorder(plan_profile **out, const plan_profile *p, const int *order,
                               sc_err *err)
{
    *out = NULL;
    if (p->pred_start == NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "%s: only a graph.txt profile (a DAG) can be put in another block order",
                       p->model);
    int n = p->n_blocks;
    sc_status rc = SC_OK;
    plan_profile *q = NULL;
    int *inv = malloc((size_t)n * sizeof *inv), *last_use = malloc((size_t)n * sizeof *last_use);
    double *cut = calloc((size_t)n + 1, sizeof *cut);
    if (!inv || !last_use || !cut) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reordering %s", p->model);
        goto done;
    }
    for (int l = 0; l < n; l++)
        inv[l] = -1;
    for (int i = 0; i < n; i++) {
        int l = order[i];
        if (l < 0 || l >= n || inv[l] >= 0) {
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "%s: block order entry %d is %d; expected each of the %d blocks 0..%d "
                         "exactly once",
                         p->model, i, l, n, n - 1);
            goto done;
        }
        if ((i < p->n_input_blocks || l < p->n_input_blocks) && l != i) {
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "%s: block order entry %d is %d; the %d Input block(s) must stay at "
                         "positions 0..%d",
                         p->model, i, l, p->n_input_blocks, p->n_input_blocks - 1);
            goto done;
        }
        inv[l] = i;
    }
    for (int i = 0; i < n; i++) {
        int l = order[i];
        for (int e = p->pred_start[l]; e < p->pred_start[l + 1]; e++)
            if (inv[p->pred[e]] > i) {
                rc = SC_ERRF(err, SC_ERR_INVALID,
                             "%s: block order puts '%s' before its input '%s'; expected a "
                             "topological order of the graph",
                             p->model, p->blocks[l].name, p->blocks[p->pred[e]].name);
                goto done;
            }
    }
    SC_CHECK_GOTO(plan_profile_new(&q, n, err), done);
    sc_strlcpy(q->model, p->model, sizeof q->model);
    sc_strlcpy(q->reference_device, p->reference_device, sizeof q->reference_device);
    q->kind = p->kind;
    q->microbatch_size = p->microbatch_size;
    q->n_input_blocks = p->n_input_blocks;
    q->dag_source = p->dag_source >= 0 ? inv[p->dag_source] : -1;
    q->pred_start = calloc((size_t)n + 1, sizeof *q->pred_start);
    q->pred = malloc(((size_t)p->pred_start[n] + 1) * sizeof *q->pred);
    if (q->pred_start == NULL || q->pred == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reordering %s", p->model);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const plan_block *src = &p->blocks[order[i]];
        plan_block *b = &q->blocks[i];
        *b = *src;
        b->sizes = NULL;
        if (src->n_sizes > 0) {
            b->sizes = malloc((size_t)src->n_sizes * sizeof *b->sizes);
            if (b->sizes == NULL) {
                b->n_sizes = 0;
                rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reordering %s", p->model);
                goto done;
            }
            memcpy(b->sizes, src->sizes, (size_t)src->n_sizes * sizeof *b->sizes);
        }
        /* the predecessors renumbered, kept sorted as the profile's contract says */
        int lo = q->pred_start[i], cnt = 0;
        for (int e = p->pred_start[order[i]]; e < p->pred_start[order[i] + 1]; e++)
            q->pred[lo + cnt++] = inv[p->pred[e]];
        qsort(q->pred + lo, (size_t)cnt, sizeof *q->pred, cmp_int);
        q->pred_start[i + 1] = lo + cnt;
    }
    /* an output crosses every cut between its block and the block's last consumer in the new
     * order; the last block's own output is reported on it, as for the profile's own order */
    for (int i = 0; i < n; i++)
        last_use[i] = i;
    for (int i = 0; i < n; i++)
        for (int e = q->pred_start[i]; e < q->pred_start[i + 1]; e++)
            if (i > last_use[q->pred[e]])
                last_use[q->pred[e]] = i;
    for (int i = 0; i < n; i++) {
        int last = last_use[i];
        if (last == i && i == n - 1)
            last = n;
        cut[i] += q->blocks[i].output_bytes;
        cut[last] -= q->blocks[i].output_bytes;
    }
    double run = 0;
    for (int i = 0; i < n; i++) {
        run += cut[i];
        q->blocks[i].activation_bytes = run > 0 ? run : 0;
    }
    *out = q;
    q = NULL;
done:
    plan_profile_destroy(&q);
    free(inv), free(last_use), free(cut);
    return rc;
}

sc_status plan_profile_load(plan_profile **out, const char *path, sc_err *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    SC_CHECK(sc_file_read(path, PLAN_PROFILE_MAX_BYTES, &text, &len, err));
    size_t bom = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* UTF-8 mark */
    const char *s = text + bom;
    while (*s && isspace((unsigned char)*s))
        s++;
    sc_status rc;
    if (*s == '{' || *s == '[' || *s == '"') /* JSON (a graph.txt line starts with a node id) */
        rc = plan_profile_parse_json(out, path, text + bom, len - bom, err);
    else if (memchr(text, '\0', len) != NULL)
        rc = SC_ERRF(err, SC_ERR_PARSE,
                     "%s: binary data; expected a stagecraft-profile JSON or a PipeDream graph.txt",
                     path);
    else
        rc = plan_profile_parse_graph(out, path, text, err);
    free(text);
    return rc;
}

/* ---------------------------------------------------------------- scaling */

static double ref_samples(const plan_profile *p, int batch)
{
    if (p->microbatch_size > 0)
        return p->microbatch_size;
    return batch > 0 ? batch : 1;
}

double plan_profile_size_factor(const plan_profile *p, double samples, int batch)
{
    return samples / ref_samples(p, batch);
}

/* The slope (seconds per sample) of forward (which 0) or backward times beyond the largest of
 * n >= 2 measured sizes; see plan_profile_block_time. */
static double beyond_slope(const plan_size_time *t, int n, int which)
{
    double a = which ? t[n - 2].backward_s : t[n - 2].forward_s;
    double z = which ? t[n - 1].backward_s : t[n - 1].forward_s;
    double first = which ? t[0].backward_s : t[0].forward_s;
    double last_seg = (z - a) / (t[n - 1].size - t[n - 2].size);
    double whole = (z - first) / (t[n - 1].size - t[0].size);
    double slope = fmax(last_seg, whole);
    return slope > 0 ? slope : z / t[n - 1].size;
}

void plan_profile_block_time(const plan_profile *p, int l, double samples, int batch,
                             double *forward_s, double *backward_s)
{
    const plan_block *b = &p->blocks[l];
    if (b->n_sizes == 0) {
        double k = samples / ref_samples(p, batch);
        *forward_s = b->forward_s * k;
        *backward_s = b->backward_s * k;
        return;
    }
    const plan_size_time *t = b->sizes;
    int n = b->n_sizes;
    if (n == 1 || samples <= t[0].size) {
        /* below the smallest measured size, scale down proportionally */
        double k = samples / t[0].size;
        *forward_s = t[0].forward_s * k;
        *backward_s = t[0].backward_s * k;
        return;
    }
    int i = 1;
    while (i < n - 1 && t[i].size < samples)
        i++;
    /* linear between the two bracketing points */
    double x0 = t[i - 1].size, x1 = t[i].size, u = (samples - x0) / (x1 - x0);
    double f = t[i - 1].forward_s + u * (t[i].forward_s - t[i - 1].forward_s);
    double bw = t[i - 1].backward_s + u * (t[i].backward_s - t[i - 1].backward_s);
    if (samples > x1) {
        /* beyond the largest size: along the last segment, but with a slope no smaller than
         * the whole measured range's, so that a last segment falling by noise does not reach
         * zero; if the times fall over the whole range too, in proportion to the last one */
        f = t[i].forward_s + beyond_slope(t, n, 0) * (samples - x1);
        bw = t[i].backward_s + beyond_slope(t, n, 1) * (samples - x1);
    }
    *forward_s = f > 0 ? f : 0;
    *backward_s = bw > 0 ? bw : 0;
}
