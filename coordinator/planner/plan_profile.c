/*
 * plan_profile: the profile object (plan_profile_new, plan_profile_destroy) and what the
 * planner asks of a loaded profile: block times scaled to a micro-batch size, and the same
 * DAG in another topological order (plan_profile_reorder).
 *
 * Times scale linearly with the samples unless a block has measured sizes, between which they
 * are interpolated. Does not read files: plan_profile_load.c tells the formats apart,
 * plan_profile_json.c and plan_profile_graph.c read them.
 * Invariant: a reordered copy keeps plan_profile.h's contract: activation_bytes are recomputed
 * for the new order and predecessor lists stay sorted.
 */
#include "coordinator/planner/plan_profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/planner/plan_profile_internal.h"

int plan_profile_wgrad_measured(const plan_profile *p)
{
    for (int l = 0; l < p->n_blocks; l++)
        if (p->blocks[l].wgrad_share < 0)
            return 0;
    return 1;
}

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
    for (int i = 0; i < n_blocks; i++)
        p->blocks[i].wgrad_share = -1; /* not measured */
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

bool plan_profile_has_time(const plan_profile *p)
{
    for (int l = 0; l < p->n_blocks; l++)
        if (p->blocks[l].forward_s + p->blocks[l].backward_s > 0)
            return true;
    return false;
}

int plan_profile_cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
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
        qsort(q->pred + lo, (size_t)cnt, sizeof *q->pred, plan_profile_cmp_int);
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
