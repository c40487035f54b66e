/*
 * plan_antichain: enumeration of PipeDream's antichain states over a profile's DAG.
 *
 * Sets of blocks are bitsets. A state is kept as its closure (downward-closed set), which
 * identifies its antichain (the closure's maximal blocks) one to one. The step from a state
 * follows PipeDream: every block y outside the closure that consumes an output of the
 * augmented antichain gives the state closure + y + ancestors(y). The augmented antichain is
 * PipeDream's too: the antichain plus every ancestor p of an antichain block a with an edge to
 * a block that is neither a nor an ancestor of a (so an output shared by two branches of the
 * same cut is counted, as the released optimizer counts it).
 */
#include "coordinator/planner/plan_antichain.h"

#include <stdlib.h>
#include <string.h>

typedef struct ac_build {
    const plan_profile *p;
    int n, W;
    int *succ_start, *succ; /* successor lists (CSR) */
    uint64_t *anc;          /* (n, W) strict ancestors */
    uint64_t *sets;         /* (cap, W) closures in discovery order */
    int n_sets, cap_sets;
    int *table; /* open addressing over sets, -1 = empty */
    int table_mask;
    int *edge_src, *edge_dst;
    int n_edges, cap_edges;
} ac_build;

static int bit_has(const uint64_t *s, int i)
{
    return (int)((s[i >> 6] >> (i & 63)) & 1u);
}

static void bit_set(uint64_t *s, int i)
{
    s[i >> 6] |= (uint64_t)1 << (i & 63);
}

static uint64_t set_hash(const uint64_t *s, int W)
{
    uint64_t h = 1469598103934665603ull;
    for (int w = 0; w < W; w++) {
        h ^= s[w];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

/* Index of closure `s`, adding it when new; -1 when the cap is reached. */
static int ac_intern(ac_build *b, const uint64_t *s, int max_states, int *fresh)
{
    size_t bytes = (size_t)b->W * sizeof(uint64_t);
    uint64_t h = set_hash(s, b->W);
    int slot = (int)(h & (uint64_t)b->table_mask);
    *fresh = 0;
    while (b->table[slot] >= 0) {
        if (memcmp(b->sets + (size_t)b->table[slot] * (size_t)b->W, s, bytes) == 0)
            return b->table[slot];
        slot = (slot + 1) & b->table_mask;
    }
    if (b->n_sets >= max_states)
        return -1;
    if (b->n_sets == b->cap_sets) {
        int cap = b->cap_sets * 2;
        uint64_t *ns = realloc(b->sets, (size_t)cap * bytes);
        if (ns == NULL)
            return -2;
        b->sets = ns;
        b->cap_sets = cap;
    }
    memcpy(b->sets + (size_t)b->n_sets * (size_t)b->W, s, bytes);
    b->table[slot] = b->n_sets;
    *fresh = 1;
    return b->n_sets++;
}

static int ac_edge(ac_build *b, int src, int dst)
{
    if (b->n_edges == b->cap_edges) {
        int cap = b->cap_edges ? 2 * b->cap_edges : 1024;
        int *s = realloc(b->edge_src, (size_t)cap * sizeof *s);
        if (s == NULL)
            return -1;
        b->edge_src = s;
        int *d = realloc(b->edge_dst, (size_t)cap * sizeof *d);
        if (d == NULL)
            return -1;
        b->edge_dst = d;
        b->cap_edges = cap;
    }
    b->edge_src[b->n_edges] = src;
    b->edge_dst[b->n_edges++] = dst;
    return 0;
}

static void ac_build_free(ac_build *b)
{
    free(b->succ_start), free(b->succ), free(b->anc), free(b->sets), free(b->table);
    free(b->edge_src), free(b->edge_dst);
}

/* Successor lists and ancestor sets; predecessors always sit at smaller positions. */
static int ac_graph(ac_build *b)
{
    const plan_profile *p = b->p;
    int n = b->n, W = b->W;
    b->succ_start = calloc((size_t)n + 1, sizeof(int));
    b->succ = malloc(((size_t)p->pred_start[n] + 1) * sizeof(int));
    b->anc = calloc((size_t)n * (size_t)W, sizeof(uint64_t));
    int *fill = calloc((size_t)n, sizeof(int));
    if (!b->succ_start || !b->succ || !b->anc || !fill) {
        free(fill);
        return -1;
    }
    for (int e = 0; e < p->pred_start[n]; e++)
        b->succ_start[p->pred[e] + 1]++;
    for (int l = 0; l < n; l++)
        b->succ_start[l + 1] += b->succ_start[l];
    for (int l = 0; l < n; l++)
        for (int e = p->pred_start[l]; e < p->pred_start[l + 1]; e++) {
            int q = p->pred[e];
            b->succ[b->succ_start[q] + fill[q]++] = l;
            uint64_t *a = b->anc + (size_t)l * (size_t)W;
            const uint64_t *aq = b->anc + (size_t)q * (size_t)W;
            for (int w = 0; w < W; w++)
                a[w] |= aq[w];
            bit_set(a, q);
        }
    free(fill);
    return 0;
}

/* PipeDream's augmented antichain of closure c, into aug. */
static void ac_augment(const ac_build *b, const uint64_t *c, uint64_t *aug)
{
    int W = b->W;
    memset(aug, 0, (size_t)W * sizeof *aug);
    for (int a = 0; a < b->n; a++) {
        if (!bit_has(c, a))
            continue;
        int maximal = 1;
        for (int e = b->succ_start[a]; e < b->succ_start[a + 1] && maximal; e++)
            maximal = !bit_has(c, b->succ[e]);
        if (!maximal)
            continue;
        bit_set(aug, a);
        const uint64_t *anc = b->anc + (size_t)a * (size_t)W;
        for (int q = 0; q < b->n; q++) {
            if (!bit_has(anc, q) || bit_has(aug, q))
                continue;
            for (int e = b->succ_start[q]; e < b->succ_start[q + 1]; e++) {
                int o = b->succ[e];
                if (o != a && !bit_has(anc, o)) {
                    bit_set(aug, q);
                    break;
                }
            }
        }
    }
}

static int cmp_long(const void *x, const void *y)
{
    long a = *(const long *)x, b = *(const long *)y;
    return (a > b) - (a < b);
}

static int popcount_set(const uint64_t *s, int W)
{
    int c = 0;
    for (int w = 0; w < W; w++)
        c += __builtin_popcountll(s[w]);
    return c;
}

sc_status plan_antichain_new(plan_antichain **out, const plan_profile *p, const double *work_s,
                             const double *params, const double *act_bytes, int max_states,
                             sc_err *err)
{
    *out = NULL;
    if (p->pred_start == NULL || p->dag_source < 0)
        return SC_ERRF(err, SC_ERR_INVALID, "%s: the profile has no graph to enumerate", p->model);
    ac_build b = {.p = p, .n = p->n_blocks, .W = (p->n_blocks + 63) / 64};
    int W = b.W, n = b.n;
    sc_status rc = SC_OK;
    plan_antichain *a = NULL;
    uint64_t *cur = calloc((size_t)W, sizeof *cur), *aug = calloc((size_t)W, sizeof *aug);
    int *old_size = NULL, *perm = NULL, *rank = NULL, *in_start = NULL, *in_src = NULL;
    long *key = NULL;
    int tcap = 1;
    while (tcap < 2 * max_states)
        tcap *= 2;
    b.table = malloc((size_t)tcap * sizeof(int));
    b.table_mask = tcap - 1;
    b.cap_sets = 256;
    b.sets = malloc((size_t)b.cap_sets * (size_t)W * sizeof(uint64_t));
    if (!cur || !aug || !b.table || !b.sets || ac_graph(&b) != 0)
        goto nomem;
    for (int t = 0; t < tcap; t++)
        b.table[t] = -1;
    bit_set(cur, p->dag_source);
    int fresh;
    if (ac_intern(&b, cur, max_states, &fresh) < 0)
        goto nomem;
    /* breadth first over the states in discovery order */
    for (int s = 0; s < b.n_sets; s++) {
        ac_augment(&b, b.sets + (size_t)s * (size_t)W, aug);
        for (int x = 0; x < n; x++) {
            if (!bit_has(aug, x))
                continue;
            for (int e = b.succ_start[x]; e < b.succ_start[x + 1]; e++) {
                int y = b.succ[e];
                const uint64_t *c = b.sets + (size_t)s * (size_t)W;
                if (bit_has(c, y))
                    continue;
                const uint64_t *ay = b.anc + (size_t)y * (size_t)W;
                for (int w = 0; w < W; w++)
                    cur[w] = c[w] | ay[w];
                bit_set(cur, y);
                int t = ac_intern(&b, cur, max_states, &fresh);
                if (t == -2)
                    goto nomem;
                if (t < 0) {
                    rc = SC_ERRF(err, SC_ERR_TOO_LARGE,
                                 "%s: the graph has more than %d antichain states; pipedream "
                                 "cannot search it (use a coarser profile or another strategy)",
                                 p->model, max_states);
                    goto done;
                }
                if (ac_edge(&b, s, t) != 0)
                    goto nomem;
            }
        }
    }
    int S = b.n_sets;
    old_size = malloc((size_t)S * sizeof(int));
    perm = malloc((size_t)S * sizeof(int));
    rank = malloc((size_t)S * sizeof(int));
    key = malloc((size_t)S * sizeof *key);
    if (!old_size || !perm || !rank || !key)
        goto nomem;
    /* by size, then discovery: a topological order, since every step grows the closure */
    for (int s = 0; s < S; s++) {
        old_size[s] = popcount_set(b.sets + (size_t)s * (size_t)W, W);
        key[s] = (long)old_size[s] * S + s;
    }
    qsort(key, (size_t)S, sizeof *key, cmp_long);
    for (int s = 0; s < S; s++) {
        perm[s] = (int)(key[s] % S);
        rank[perm[s]] = s;
    }
    if (old_size[perm[S - 1]] != n - p->n_input_blocks) {
        rc = SC_ERRF(err, SC_ERR_INVALID,
                     "%s: %d of %d blocks cannot be reached from the graph's first source '%s'; "
                     "pipedream needs a graph whose outputs all depend on it",
                     p->model, n - p->n_input_blocks - old_size[perm[S - 1]], n - p->n_input_blocks,
                     p->blocks[p->dag_source].name);
        goto done;
    }
    a = calloc(1, sizeof *a);
    if (a == NULL)
        goto nomem;
    a->n_states = S;
    a->n_blocks = n;
    a->node_words = W;
    a->state_words = (S + 63) / 64;
    int SW = a->state_words;
    a->closure = malloc((size_t)S * (size_t)W * sizeof(uint64_t));
    a->pred = calloc((size_t)S * (size_t)SW, sizeof(uint64_t));
    a->size = malloc((size_t)S * sizeof(int));
    a->work_s = calloc((size_t)S, sizeof(double));
    a->params = calloc((size_t)S, sizeof(double));
    a->out_bytes = calloc((size_t)S, sizeof(double));
    in_start = calloc((size_t)S + 1, sizeof(int));
    in_src = malloc(((size_t)b.n_edges + 1) * sizeof(int));
    if (!a->closure || !a->pred || !a->size || !a->work_s || !a->params || !a->out_bytes ||
        !in_start || !in_src)
        goto nomem;
    for (int s = 0; s < S; s++) {
        const uint64_t *c = b.sets + (size_t)perm[s] * (size_t)W;
        memcpy(a->closure + (size_t)s * (size_t)W, c, (size_t)W * sizeof *c);
        a->size[s] = old_size[perm[s]];
        ac_augment(&b, c, aug);
        for (int l = 0; l < n; l++) {
            if (bit_has(c, l)) {
                a->work_s[s] += work_s[l];
                a->params[s] += params[l];
            }
            if (bit_has(aug, l))
                a->out_bytes[s] += act_bytes[l];
        }
    }
    /* predecessor sets by propagation along the DAG's edges, in topological order */
    for (int e = 0; e < b.n_edges; e++)
        in_start[rank[b.edge_dst[e]] + 1]++;
    for (int s = 0; s < S; s++)
        in_start[s + 1] += in_start[s];
    for (int e = 0; e < b.n_edges; e++) {
        int d = rank[b.edge_dst[e]];
        in_src[in_start[d]++] = rank[b.edge_src[e]];
    }
    for (int s = S; s > 0; s--)
        in_start[s] = in_start[s - 1];
    in_start[0] = 0;
    for (int j = 0; j < S; j++) {
        uint64_t *pj = a->pred + (size_t)j * (size_t)SW;
        for (int e = in_start[j]; e < in_start[j + 1]; e++) {
            int k = in_src[e];
            const uint64_t *pk = a->pred + (size_t)k * (size_t)SW;
            for (int w = 0; w < SW; w++)
                pj[w] |= pk[w];
            bit_set(pj, k);
        }
    }
    *out = a;
    a = NULL;
    goto done;
nomem:
    rc = SC_ERRF(err, SC_ERR_NOMEM, "%s: out of memory enumerating antichain states", p->model);
done:
    plan_antichain_destroy(&a);
    ac_build_free(&b);
    free(cur), free(aug), free(old_size), free(perm), free(rank), free(in_start), free(in_src);
    free(key);
    return rc;
}

void plan_antichain_destroy(plan_antichain **pa)
{
    if (pa == NULL || *pa == NULL)
        return;
    plan_antichain *a = *pa;
    free(a->closure), free(a->pred), free(a->size), free(a->work_s), free(a->params);
    free(a->out_bytes);
    free(a);
    *pa = NULL;
}
