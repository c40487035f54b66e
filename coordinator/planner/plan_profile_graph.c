/*
 * plan_profile_graph: plan_profile_parse_graph, the reader of PipeDream's graph.txt.
 *
 * graph.txt is a DAG; the planner cuts chains, so it is linearised in topological order and
 * each position's activation_bytes becomes the sum of the outputs that cross a cut there.
 * PipeDream's own optimizer zeroes the data-loading `Input*` sources and drops unused
 * `__getitem__` sinks; we do the same so that its objective can be reproduced. The DAG itself is
 * kept too (predecessor lists over the linear positions) for the pipedream strategy, whose
 * states are the graph's antichains rather than prefixes of one order. Does not read files
 * (plan_profile_load.c) and does not reorder a loaded profile (plan_profile.c).
 * Invariant: the linear order does not depend on the order of node lines in the file (ready
 * nodes go by the numeric suffix of their ids), and every predecessor of a block comes before
 * it.
 */
#include "coordinator/planner/plan_profile.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/planner/plan_profile_internal.h"

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
        qsort(p->pred + lo, (size_t)(hi - lo), sizeof *p->pred, plan_profile_cmp_int);
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
    if (!plan_profile_has_time(p)) {
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
