/*
 * plan_advise_search: which candidate sets plan_advise plans.
 *
 * A candidate is a count per class, a class being the devices of one type on one server (they
 * are interchangeable: plan_cluster_subset), so a catalogue of N devices in C classes has
 * prod(n_c + 1) - 1 candidates instead of 2^N - 1 subsets. Up to exact_limit of them every one
 * is planned. Above it, a greedy ascent from nothing: at the first step every move that adds a
 * whole class or one device of a class is planned; at each later step the ADV_SCREEN classes
 * whose devices give the most speed per price (a little less in a zone not used yet) are
 * planned as whole classes, and the move with the most samples per
 * second gained per unit of cost added (per device added when there are no prices) is taken,
 * until no move adds throughput or the devices run out. Classes that cannot be told apart
 * (servers of one type, alike in zone, bandwidths and slots, holding as many chosen devices)
 * are moved once per step, so identical servers cost one plan a step, not one each. Every plan
 * made is kept and the front and best are taken over all of them. Does not print.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_advise.h"

typedef struct adv_class {
    int server, type, n;
    const int *ids; /* (n) catalogue ids of the class, in file order */
    int alone;      /* the only class of its server */
} adv_class;

typedef struct adv_search {
    const plan_advise_cfg *cfg;
    int n_classes;
    adv_class *classes;
    int *ids; /* every device id grouped by class */
    int n_pts, cap_pts;
    plan_advise_point *pts;
    int *counts; /* (cap_pts, n_classes) the count vector of each point */
    int *table;  /* open addressing over count vectors: point index + 1, 0 empty */
    size_t table_cap;
    int *devs; /* scratch: a candidate's ids */
} adv_search;

static sc_status classes_build(adv_search *s, sc_err *err)
{
    const plan_cluster *c = s->cfg->catalog;
    s->classes = calloc((size_t)c->n_devices, sizeof *s->classes);
    s->ids = malloc((size_t)c->n_devices * sizeof *s->ids);
    s->devs = malloc((size_t)c->n_devices * sizeof *s->devs);
    if (s->classes == NULL || s->ids == NULL || s->devs == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for %d devices", c->n_devices);
    int at = 0;
    for (int v = 0; v < c->n_servers; v++) {
        const plan_server *sv = &c->servers[v];
        int first_class = s->n_classes;
        for (int t = 0; t < c->n_types; t++) {
            int start = at;
            for (int d = sv->first_device; d < sv->first_device + sv->n_devices; d++)
                if (c->devices[d].type == t)
                    s->ids[at++] = d;
            if (at == start)
                continue;
            adv_class *k = &s->classes[s->n_classes++];
            k->server = v;
            k->type = t;
            k->n = at - start;
            k->ids = s->ids + start;
        }
        if (s->n_classes == first_class + 1)
            s->classes[first_class].alone = 1;
    }
    return SC_OK;
}

/* Classes a and b, holding as many chosen devices, give the same plans. */
static int alike(const adv_search *s, int a, int b, const int *x)
{
    const adv_class *p = &s->classes[a], *q = &s->classes[b];
    if (!p->alone || !q->alone || p->type != q->type || p->n != q->n || x[a] != x[b])
        return 0;
    const plan_server *u = &s->cfg->catalog->servers[p->server];
    const plan_server *w = &s->cfg->catalog->servers[q->server];
    return u->zone == w->zone && u->intra_bw_bytes_per_s == w->intra_bw_bytes_per_s &&
           u->nic_bw_bytes_per_s == w->nic_bw_bytes_per_s && u->compute_slots == w->compute_slots &&
           u->reduce_bw_bytes_per_s == w->reduce_bw_bytes_per_s;
}

static uint64_t hash_counts(const int *x, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)(unsigned)x[i];
        h *= 1099511628211ull;
    }
    return h;
}

static sc_status grow(adv_search *s, sc_err *err)
{
    if (s->n_pts < s->cap_pts)
        return SC_OK;
    int cap = s->cap_pts ? 2 * s->cap_pts : 256;
    plan_advise_point *p = realloc(s->pts, (size_t)cap * sizeof *p);
    if (p != NULL)
        s->pts = p;
    int *c = realloc(s->counts, (size_t)cap * (size_t)s->n_classes * sizeof *c);
    if (c != NULL)
        s->counts = c;
    if (p == NULL || c == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for %d candidates", cap);
    s->cap_pts = cap;
    /* the table stays at most half full */
    size_t tcap = (size_t)cap * 2;
    int *t = calloc(tcap, sizeof *t);
    if (t == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for %d candidates", cap);
    for (int i = 0; i < s->n_pts; i++) {
        size_t h = hash_counts(s->counts + (size_t)i * s->n_classes, s->n_classes) & (tcap - 1);
        while (t[h] != 0)
            h = (h + 1) & (tcap - 1);
        t[h] = i + 1;
    }
    free(s->table);
    s->table = t;
    s->table_cap = tcap;
    return SC_OK;
}

/* The point of count vector x, planned now unless planned before; *out its index. */
static sc_status point_of(adv_search *s, const int *x, int *out, sc_err *err)
{
    SC_CHECK(grow(s, err));
    size_t h = hash_counts(x, s->n_classes) & (s->table_cap - 1);
    while (s->table[h] != 0) {
        int i = s->table[h] - 1;
        if (memcmp(s->counts + (size_t)i * s->n_classes, x, (size_t)s->n_classes * sizeof *x) ==
            0) {
            *out = i;
            return SC_OK;
        }
        h = (h + 1) & (s->table_cap - 1);
    }
    int n = 0;
    for (int c = 0; c < s->n_classes; c++)
        for (int k = 0; k < x[c]; k++)
            s->devs[n++] = s->classes[c].ids[k];
    SC_CHECK(plan_advise_eval(s->cfg, s->devs, n, &s->pts[s->n_pts], NULL, NULL, err));
    memcpy(s->counts + (size_t)s->n_pts * s->n_classes, x, (size_t)s->n_classes * sizeof *x);
    s->table[h] = s->n_pts + 1;
    *out = s->n_pts++;
    return SC_OK;
}

/* Every count vector but zeros, in mixed radix. */
static sc_status enumerate(adv_search *s, sc_err *err)
{
    int *x = calloc((size_t)s->n_classes, sizeof *x);
    if (x == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    sc_status rc = SC_OK;
    for (;;) {
        int c = 0;
        while (c < s->n_classes && x[c] == s->classes[c].n)
            x[c++] = 0;
        if (c == s->n_classes)
            break;
        x[c]++;
        int i;
        if ((rc = point_of(s, x, &i, err)) != SC_OK)
            break;
    }
    free(x);
    return rc;
}

/* What a move from point `from` to point `to` that adds `added` devices is worth. */
static double gain(const adv_search *s, int from, int to, int added)
{
    const plan_advise_point *b = &s->pts[to];
    double sps0 = from < 0 ? 0 : s->pts[from].samples_per_s;
    double cost0 = from < 0 ? 0 : s->pts[from].cost_per_hour;
    double dsps = b->samples_per_s - sps0;
    if (!(b->samples_per_s > 0) || !(dsps > 0))
        return -1;
    double dcost = b->cost_per_hour - cost0;
    if (plan_cluster_has_prices(s->cfg->catalog) && dcost > 0)
        return dsps / dcost;
    return dsps / added;
}

/* Moves planned per step after the first. */
#define ADV_SCREEN 4

/* What adding class c to x is expected to be worth, before planning it: its devices' speed per
 * unit of price (speed alone without prices), a little less in a zone x does not use yet (its
 * cuts would cross zones) or on a slower network. */
static double estimate(const adv_search *s, int c, const int *x)
{
    const plan_cluster *cat = s->cfg->catalog;
    const adv_class *k = &s->classes[c];
    const plan_device_type *t = &cat->types[k->type];
    double e = t->relative_speed;
    if (plan_cluster_has_prices(cat) && t->price_per_hour > 0)
        e /= t->price_per_hour;
    int zone = cat->servers[k->server].zone, used = 0, any = 0;
    for (int d = 0; d < s->n_classes; d++)
        if (x[d] > 0) {
            any = 1;
            used |= cat->servers[s->classes[d].server].zone == zone;
        }
    if (any && !used)
        e *= 0.95;
    return e * (1 + 1e-3 * log1p(cat->servers[k->server].nic_bw_bytes_per_s / 1e9));
}

static sc_status ascend(adv_search *s, long max_eval, plan_advise_result *out, sc_err *err)
{
    int C = s->n_classes;
    int *x = calloc((size_t)C, sizeof *x), *y = malloc((size_t)C * sizeof *y);
    int *best_x = malloc((size_t)C * sizeof *best_x);
    double *est = malloc((size_t)C * sizeof *est);
    sc_status rc = SC_OK;
    if (x == NULL || y == NULL || best_x == NULL || est == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        goto done;
    }
    int cur = -1;
    for (;;) {
        double best_gain = 0;
        int best_pt = -1;
        for (int c = 0; c < C; c++)
            est[c] = -1;
        for (int c = 0; c < C; c++) {
            int room = s->classes[c].n - x[c], seen = 0;
            for (int d = 0; d < c && !seen; d++)
                seen = alike(s, c, d, x);
            if (room > 0 && !seen)
                est[c] = estimate(s, c, x);
        }
        /* after the first step, only the ADV_SCREEN classes of best estimate are planned */
        for (int c = 0; c < C && cur >= 0; c++) {
            int better = 0;
            for (int d = 0; d < C; d++)
                better += est[d] > est[c] || (est[d] == est[c] && d < c);
            if (better >= ADV_SCREEN)
                est[c] = -1;
        }
        for (int c = 0; c < C && s->n_pts < max_eval; c++) {
            int room = s->classes[c].n - x[c];
            if (est[c] < 0)
                continue;
            /* whole classes (a server's devices of a type, as clouds rent them), and from
             * nothing also single devices, so the cheapest small sets are seen */
            int steps[2] = {room, 1};
            for (int k = 0; k < (room > 1 && cur < 0 ? 2 : 1); k++) {
                memcpy(y, x, (size_t)C * sizeof *y);
                y[c] += steps[k];
                int i;
                if ((rc = point_of(s, y, &i, err)) != SC_OK)
                    goto done;
                double g = gain(s, cur, i, steps[k]);
                if (g > best_gain) {
                    best_gain = g;
                    best_pt = i;
                    memcpy(best_x, y, (size_t)C * sizeof *best_x);
                }
            }
        }
        if (s->n_pts >= max_eval) {
            snprintf(out->note, sizeof out->note,
                     "the search stopped at its cap of %ld plans; the front may miss larger sets",
                     max_eval);
            break;
        }
        if (best_pt < 0)
            break;
        memcpy(x, best_x, (size_t)C * sizeof *x);
        cur = best_pt;
    }
done:
    free(x);
    free(y);
    free(best_x);
    free(est);
    return rc;
}

sc_status plan_advise_run(const plan_advise_cfg *cfg, plan_advise_result *out, sc_err *err)
{
    memset(out, 0, sizeof *out);
    adv_search s;
    memset(&s, 0, sizeof s);
    s.cfg = cfg;
    sc_status rc;
    int *idx = NULL;
    SC_CHECK_GOTO(classes_build(&s, err), done);
    out->classes = s.n_classes;
    double cand = 1;
    for (int c = 0; c < s.n_classes; c++)
        cand *= s.classes[c].n + 1;
    out->candidates = cand - 1;
    long limit = cfg->exact_limit > 0 ? cfg->exact_limit : PLAN_ADVISE_EXACT_LIMIT;
    if (out->candidates <= (double)limit) {
        out->exact = 1;
        SC_CHECK_GOTO(enumerate(&s, err), done);
    } else {
        SC_CHECK_GOTO(ascend(&s, cfg->max_evaluations > 0 ? cfg->max_evaluations : 4000, out, err),
                      done);
    }
    out->evaluated = s.n_pts;
    idx = malloc((size_t)(s.n_pts > 0 ? s.n_pts : 1) * sizeof *idx);
    if (idx == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        goto done;
    }
    int best = -1;
    for (int i = 0; i < s.n_pts; i++)
        if (plan_advise_meets(cfg, &s.pts[i]) &&
            (best < 0 || plan_advise_better(cfg, &s.pts[i], &s.pts[best])))
            best = i;
    int nf = plan_advise_front(s.pts, s.n_pts, idx);
    out->pareto = calloc((size_t)(nf > 0 ? nf : 1), sizeof *out->pareto);
    if (out->pareto == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < nf; i++) { /* the points move to the result */
        out->pareto[i] = s.pts[idx[i]];
        s.pts[idx[i]].devices = NULL;
    }
    out->n_pareto = nf;
    if (best >= 0) {
        /* the best's devices, planned once more to keep its plan and cluster */
        int n = 0;
        const int *x = s.counts + (size_t)best * s.n_classes;
        for (int c = 0; c < s.n_classes; c++)
            for (int k = 0; k < x[c]; k++)
                s.devs[n++] = s.classes[c].ids[k];
        SC_CHECK_GOTO(
            plan_advise_eval(cfg, s.devs, n, &out->best, &out->best_plan, &out->best_cluster, err),
            done);
        out->have_best = out->best.samples_per_s > 0;
    }
    if (!out->have_best && out->note[0] == '\0')
        snprintf(out->note, sizeof out->note, "%s",
                 nf == 0 ? "no set of the catalogue's devices gets a plan that fits memory"
                         : "no set of the catalogue's devices meets the objective");
    rc = SC_OK;
done:
    for (int i = 0; i < s.n_pts; i++)
        plan_advise_point_free(&s.pts[i]);
    free(s.pts);
    free(s.counts);
    free(s.table);
    free(s.classes);
    free(s.ids);
    free(s.devs);
    free(idx);
    return rc;
}
