/*
 * plan_advise: one candidate's plan and cost, the objectives, and the Pareto front. The search
 * over candidates is plan_advise_search.c.
 *
 * Does not choose candidates. Invariant: a candidate's figures come from plan_run on
 * plan_cluster_subset of its devices with the caller's request, nothing else.
 */
#include "coordinator/planner/plan_advise.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"

static const char objective_forms[] =
    "throughput, cost, min-cost-at=SAMPLES_PER_S, max-throughput-at=COST_PER_HOUR or "
    "deadline=TOKENS@HOURS";

/* A number > 0 that is the whole of text. */
static int parse_positive(const char *text, double *out)
{
    char *end;
    if (text == NULL || *text == '\0')
        return 0;
    double v = strtod(text, &end);
    if (*end != '\0' || !(v > 0) || !isfinite(v))
        return 0;
    *out = v;
    return 1;
}

sc_status plan_advise_objective_parse(const char *text, plan_advise_objective *out, sc_err *err)
{
    memset(out, 0, sizeof *out);
    const char *eq = strchr(text, '=');
    if (strcmp(text, "throughput") == 0) {
        out->kind = PLAN_ADVISE_THROUGHPUT;
        return SC_OK;
    }
    if (strcmp(text, "cost") == 0) {
        out->kind = PLAN_ADVISE_COST;
        return SC_OK;
    }
    if (eq != NULL && strncmp(text, "min-cost-at=", 12) == 0) {
        out->kind = PLAN_ADVISE_MIN_COST_AT;
        if (parse_positive(eq + 1, &out->samples_per_s))
            return SC_OK;
        return SC_ERRF(err, SC_ERR_INVALID,
                       "--objective %s: expected min-cost-at=SAMPLES_PER_S with a number > 0 "
                       "(e.g. min-cost-at=120)",
                       text);
    }
    if (eq != NULL && strncmp(text, "max-throughput-at=", 18) == 0) {
        out->kind = PLAN_ADVISE_MAX_THROUGHPUT_AT;
        if (parse_positive(eq + 1, &out->cost_per_hour))
            return SC_OK;
        return SC_ERRF(err, SC_ERR_INVALID,
                       "--objective %s: expected max-throughput-at=COST_PER_HOUR with a number > "
                       "0 (e.g. max-throughput-at=12.5)",
                       text);
    }
    if (eq != NULL && strncmp(text, "deadline=", 9) == 0) {
        out->kind = PLAN_ADVISE_DEADLINE;
        char buf[128];
        sc_strlcpy(buf, eq + 1, sizeof buf);
        char *at = strchr(buf, '@');
        if (at != NULL) {
            *at = '\0';
            if (parse_positive(buf, &out->tokens) && parse_positive(at + 1, &out->hours))
                return SC_OK;
        }
        return SC_ERRF(err, SC_ERR_INVALID,
                       "--objective %s: expected deadline=TOKENS@HOURS, both numbers > 0 (e.g. "
                       "deadline=2e9@24)",
                       text);
    }
    return SC_ERRF(err, SC_ERR_INVALID, "--objective '%s': expected %s", text, objective_forms);
}

void plan_advise_point_free(plan_advise_point *p)
{
    if (p == NULL)
        return;
    free(p->devices);
    p->devices = NULL;
    p->n_devices = 0;
}

/* Money per hour for the bytes a plan sends between zones: each cut's activations and
 * gradients (2 x activation bytes per micro-batch, spread evenly over the pairs of the two
 * stages' copies) and each replicated stage's ring all-reduce (every ring edge carries
 * 2 (r-1)/r of the stage's parameter bytes), once per simulated iteration. */
static double traffic_per_hour(const plan_profile *p, const plan_cluster *cl, const plan_result *r)
{
    if (cl->zone_price_per_gb == NULL || !(r->iteration_time_s > 0) || r->part == NULL)
        return 0;
    const plan_partition *part = r->part;
    double k = plan_profile_size_factor(p, r->micro_size, r->batch);
    double per_iter = 0;
    for (int s = 0; s < part->n_stages; s++) {
        const int *a = part->devs + part->dev_start[s];
        int ra = part->n_dev[s];
        if (s + 1 < part->n_stages) {
            const int *b = part->devs + part->dev_start[s + 1];
            int rb = part->n_dev[s + 1];
            int last = part->order ? part->order[part->last[s]] : part->last[s];
            double bytes = 2.0 * r->n_micro * p->blocks[last].activation_bytes * k;
            double price = 0;
            for (int i = 0; i < ra; i++)
                for (int j = 0; j < rb; j++)
                    price += plan_cluster_price_per_byte(cl, a[i], b[j]);
            per_iter += bytes * price / (ra * rb);
        }
        if (ra > 1) {
            double w = 0;
            for (int l = part->first[s]; l <= part->last[s]; l++)
                w += p->blocks[part->order ? part->order[l] : l].parameter_bytes;
            double edge = 2.0 * (ra - 1) / ra * w;
            for (int i = 0; i < ra; i++)
                per_iter += edge * plan_cluster_price_per_byte(cl, a[i], a[(i + 1) % ra]);
        }
    }
    return per_iter / r->iteration_time_s * 3600.0;
}

sc_status plan_advise_eval_cluster(const plan_advise_cfg *cfg, const plan_cluster *cl,
                                   plan_advise_point *pt, plan_result *res, sc_err *err)
{
    (void)err;
    if (res != NULL)
        memset(res, 0, sizeof *res);
    plan_request req = cfg->request;
    req.cluster = cl;
    req.record_trace = 0;
    plan_result best;
    int have = 0;
    memset(&best, 0, sizeof best);
    for (int s = 0; s < PLAN_STRAT_COUNT; s++) {
        if (cfg->strategy >= 0 && s != cfg->strategy)
            continue;
        plan_result r;
        sc_err e;
        sc_err_clear(&e);
        memset(&r, 0, sizeof r);
        (void)plan_run(&req, (plan_strategy)s, &r, &e);
        if (r.ok && r.fits_memory && r.throughput_samples_per_s > 0 &&
            (!have || r.throughput_samples_per_s > best.throughput_samples_per_s)) {
            if (have)
                plan_result_free(&best);
            best = r;
            have = 1;
        } else {
            plan_result_free(&r);
        }
    }
    pt->samples_per_s = 0;
    pt->traffic_per_hour = 0;
    pt->devices_per_hour = plan_cluster_devices_price_per_hour(cl);
    if (have) {
        pt->samples_per_s = best.throughput_samples_per_s;
        pt->strategy = best.strategy;
        pt->traffic_per_hour = traffic_per_hour(cfg->request.profile, cl, &best);
    }
    pt->cost_per_hour = pt->devices_per_hour + pt->traffic_per_hour;
    if (res != NULL && have)
        *res = best;
    else if (have)
        plan_result_free(&best);
    return SC_OK;
}

sc_status plan_advise_eval(const plan_advise_cfg *cfg, const int *devs, int n,
                           plan_advise_point *pt, plan_result *res, plan_cluster **cl_out,
                           sc_err *err)
{
    memset(pt, 0, sizeof *pt);
    if (res != NULL)
        memset(res, 0, sizeof *res);
    if (cl_out != NULL)
        *cl_out = NULL;
    pt->devices = malloc((size_t)n * sizeof *pt->devices);
    SC_ALLOC_CHECK(pt->devices, err);
    pt->n_devices = n;
    plan_cluster *cl = NULL;
    sc_status rc = plan_cluster_subset(cfg->catalog, devs, n, &cl, pt->devices, err);
    if (rc == SC_OK)
        rc = plan_advise_eval_cluster(cfg, cl, pt, res, err);
    if (rc != SC_OK) {
        plan_advise_point_free(pt);
        plan_cluster_destroy(&cl);
        return rc;
    }
    if (cl_out != NULL)
        *cl_out = cl;
    else
        plan_cluster_destroy(&cl);
    return SC_OK;
}

static double tokens_per_sample(const plan_advise_cfg *cfg)
{
    return cfg->tokens_per_sample > 0 ? cfg->tokens_per_sample : 1;
}

int plan_advise_meets(const plan_advise_cfg *cfg, const plan_advise_point *a)
{
    const plan_advise_objective *o = &cfg->objective;
    if (!(a->samples_per_s > 0))
        return 0;
    switch (o->kind) {
    case PLAN_ADVISE_MIN_COST_AT:
        return a->samples_per_s >= o->samples_per_s;
    case PLAN_ADVISE_MAX_THROUGHPUT_AT:
        return a->cost_per_hour <= o->cost_per_hour * (1 + 1e-12);
    case PLAN_ADVISE_DEADLINE:
        return a->samples_per_s * tokens_per_sample(cfg) * o->hours * 3600.0 >= o->tokens;
    default:
        return 1;
    }
}

/* -1, 0 or 1 as x is below, equal to (within a relative 1e-12) or above y. */
static int cmp(double x, double y)
{
    double tol = 1e-12 * (fabs(x) > fabs(y) ? fabs(x) : fabs(y));
    return x < y - tol ? -1 : x > y + tol ? 1 : 0;
}

int plan_advise_better(const plan_advise_cfg *cfg, const plan_advise_point *a,
                       const plan_advise_point *b)
{
    int c = 0;
    switch (cfg->objective.kind) {
    case PLAN_ADVISE_THROUGHPUT:
    case PLAN_ADVISE_MAX_THROUGHPUT_AT:
        c = cmp(a->samples_per_s, b->samples_per_s);
        if (c == 0)
            c = -cmp(a->cost_per_hour, b->cost_per_hour);
        break;
    case PLAN_ADVISE_MIN_COST_AT:
        c = -cmp(a->cost_per_hour, b->cost_per_hour);
        if (c == 0)
            c = cmp(a->samples_per_s, b->samples_per_s);
        break;
    case PLAN_ADVISE_COST:
    case PLAN_ADVISE_DEADLINE: /* the total is the cost per sample times the samples */
        c = -cmp(a->cost_per_hour / a->samples_per_s, b->cost_per_hour / b->samples_per_s);
        if (c == 0)
            c = cmp(a->samples_per_s, b->samples_per_s);
        break;
    }
    if (c == 0)
        c = a->n_devices < b->n_devices ? 1 : a->n_devices > b->n_devices ? -1 : 0;
    return c > 0;
}

static const plan_advise_point *sort_base;

static int by_cost(const void *x, const void *y)
{
    const plan_advise_point *a = &sort_base[*(const int *)x], *b = &sort_base[*(const int *)y];
    int c = cmp(a->cost_per_hour, b->cost_per_hour);
    if (c == 0)
        c = -cmp(a->samples_per_s, b->samples_per_s);
    if (c == 0)
        c = a->n_devices - b->n_devices;
    return c != 0 ? c : *(const int *)x - *(const int *)y;
}

int plan_advise_front(const plan_advise_point *pts, int n, int *idx)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (pts[i].samples_per_s > 0)
            idx[m++] = i;
    sort_base = pts;
    qsort(idx, (size_t)m, sizeof *idx, by_cost);
    int k = 0;
    double top = 0;
    for (int i = 0; i < m; i++)
        if (cmp(pts[idx[i]].samples_per_s, top) > 0) {
            top = pts[idx[i]].samples_per_s;
            idx[k++] = idx[i];
        }
    return k;
}

void plan_advise_result_free(plan_advise_result *r)
{
    if (r == NULL)
        return;
    plan_advise_point_free(&r->best);
    plan_result_free(&r->best_plan);
    plan_cluster_destroy(&r->best_cluster);
    for (int i = 0; i < r->n_pareto; i++)
        plan_advise_point_free(&r->pareto[i]);
    free(r->pareto);
    memset(r, 0, sizeof *r);
}
