/* Replaying a job's plan (see plan_replay.h). */
#include "coordinator/plan_replay.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_schedule.h"

/* The type name of device `id` of a cluster document (servers in order, then their devices). */
static const char *device_type(json_t *cluster, int id)
{
    size_t i;
    json_t *srv;
    json_array_foreach(json_object_get(cluster, "servers"), i, srv)
    {
        json_t *devs = json_object_get(srv, "devices");
        if (id < (int)json_array_size(devs))
            return json_string_value(json_array_get(devs, (size_t)id));
        id -= (int)json_array_size(devs);
    }
    return NULL;
}

/* Forward and backward time of blocks [first, last] on device `dev` from the cluster's
 * block_times of its type (written in block order); false when the plan has none for them. */
static bool block_times(json_t *cluster, int dev, int first, int last, double *f, double *b)
{
    const char *type = device_type(cluster, dev);
    json_t *times = json_object_get(
        json_object_get(json_object_get(cluster, "device_types"), type ? type : ""), "block_times");
    if (first < 0 || last < first || (size_t)last >= json_object_size(times))
        return false;
    *f = *b = 0;
    int k = 0;
    const char *name;
    json_t *t;
    json_object_foreach(times, name, t)
    {
        if (k >= first && k <= last) {
            *f += json_number_value(json_object_get(t, "forward_s"));
            *b += json_number_value(json_object_get(t, "backward_s"));
        }
        k++;
    }
    return *f > 0 && *b > 0;
}

/* One stage's forward and backward time of a micro-batch on one copy: from the cluster's
 * block_times (the slowest copy's device) when the plan carries them, else its compute_s split
 * 1:2. Only their proportions matter: the replay is scaled to the plan's iteration time. */
static void stage_times(json_t *plan, json_t *stage, int copies, plan_sim_stage *st)
{
    json_t *cluster = json_object_get(plan, "cluster");
    int first = (int)json_integer_value(json_object_get(stage, "first_block"));
    int last = (int)json_integer_value(json_object_get(stage, "last_block"));
    size_t k;
    json_t *d;
    bool all = json_array_size(json_object_get(stage, "devices")) > 0;
    json_array_foreach(json_object_get(stage, "devices"), k, d)
    {
        double f, b;
        if (!block_times(cluster, (int)json_integer_value(d), first, last, &f, &b)) {
            all = false;
            break;
        }
        st->fwd_s = f > st->fwd_s ? f : st->fwd_s;
        st->bwd_s = b > st->bwd_s ? b : st->bwd_s;
    }
    if (all)
        return;
    /* compute_s: one micro-batch's work of the stage, shared by its copies */
    double c = json_number_value(json_object_get(stage, "compute_s")) * copies;
    st->fwd_s = c / 3.0;
    st->bwd_s = 2.0 * c / 3.0;
}

/* coord_plan_replay with each stage's transfers and all-reduce (`x`; NULL: none played). */
static sc_status replay(const char *plan_json, const double *stage_factor,
                        const coord_replay_costs *costs, bool record_events, coord_replay *out,
                        sc_err *err)
{
    static const coord_replay_costs none = {NULL, NULL, NULL};
    const coord_replay_costs *c = costs != NULL ? costs : &none;
    memset(out, 0, sizeof *out);
    json_t *plan = plan_json != NULL ? json_loads(plan_json, 0, NULL) : NULL;
    json_t *stages = json_object_get(plan, "stages");
    out->planned_s = json_number_value(json_object_get(plan, "iteration_time_s"));
    int S = (int)json_array_size(stages);
    json_t *mbs = json_object_get(plan, "microbatches");
    int m = (int)json_integer_value(json_object_get(mbs, "count"));
    int sliced = (int)json_integer_value(json_object_get(mbs, "sliced"));
    const char *sched = json_string_value(json_object_get(plan, "schedule"));
    int kind = sched != NULL ? plan_sched_parse(sched) : -1;
    if (kind < 0)
        kind = PLAN_SCHED_GPIPE; /* "unequal" runs in gpipe order */
    plan_sim_stage *st = S > 0 ? calloc((size_t)S, sizeof *st) : NULL;
    out->replicas = S > 0 ? calloc((size_t)S, sizeof *out->replicas) : NULL;
    plan_schedule *s = NULL;
    sc_status rc = SC_OK;
    if (S < 1 || m < 1) {
        rc = SC_ERRF(err, SC_ERR_INVALID, "the plan has no stages or no micro-batch count");
        goto done;
    }
    if (st == NULL || out->replicas == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory replaying the plan");
        goto done;
    }
    out->n_stages = S;
    for (int i = 0; i < S; i++) {
        json_t *x = json_array_get(stages, (size_t)i);
        int r = (int)json_integer_value(json_object_get(x, "replicas"));
        out->replicas[i] = r < 1 ? 1 : r;
        stage_times(plan, x, out->replicas[i], &st[i]);
        double f = stage_factor != NULL && stage_factor[i] > 0 ? stage_factor[i] : 1.0;
        st[i].fwd_s *= f;
        st[i].bwd_s *= f;
        st[i].send_fwd_s = c->send_f != NULL && i + 1 < S ? c->send_f[i] : 0;
        st[i].send_bwd_s = c->send_b != NULL && i > 0 ? c->send_b[i] : 0;
        st[i].opt_s = c->reduce != NULL && out->replicas[i] > 1 ? c->reduce[i] : 0;
    }
    /* zb1: the deferral each stage runs with (the plan's deferred_w; absent: ZB-H1's) */
    int *w_defer = kind == PLAN_SCHED_ZB1 ? calloc((size_t)S, sizeof *w_defer) : NULL;
    for (int i = 0; w_defer != NULL && i < S; i++) {
        json_t *d = json_object_get(json_array_get(stages, (size_t)i), "deferred_w");
        w_defer[i] = json_is_integer(d) ? (int)json_integer_value(d) : m;
    }
    rc = kind == PLAN_SCHED_ZB1 ? plan_schedule_build_zb1(&s, S, m, out->replicas, w_defer, err)
                                : plan_schedule_build_replicated(&s, (plan_sched_kind)kind, S, m,
                                                                 sliced, out->replicas, err);
    free(w_defer);
    if (rc == SC_OK)
        rc = plan_schedule_validate(s, err);
    if (rc == SC_OK)
        rc = plan_sim_run(s, st, m, 0.9, record_events ? 1 : 0, &out->sim, err);
done:
    plan_schedule_destroy(&s);
    free(st);
    json_decref(plan);
    return rc;
}

sc_status coord_plan_replay(const char *plan_json, const double *stage_factor, bool record_events,
                            coord_replay *out, sc_err *err)
{
    return replay(plan_json, stage_factor, NULL, record_events, out, err);
}

void coord_replay_free(coord_replay *r)
{
    plan_sim_result_free(&r->sim);
    free(r->replicas);
    r->replicas = NULL;
    r->n_stages = 0;
}

double coord_plan_replay_scaled_s(const char *plan_json, const double *stage_factor)
{
    return coord_plan_replay_costs_s(plan_json, stage_factor, NULL, NULL);
}

double coord_plan_replay_costs_s(const char *plan_json, const double *stage_factor,
                                 const coord_replay_costs *planned, const coord_replay_costs *now)
{
    coord_replay as_planned, scaled;
    memset(&as_planned, 0, sizeof as_planned);
    memset(&scaled, 0, sizeof scaled);
    sc_err err;
    sc_err_clear(&err);
    double out = 0;
    if (replay(plan_json, NULL, planned, false, &as_planned, &err) == SC_OK &&
        replay(plan_json, stage_factor, now, false, &scaled, &err) == SC_OK &&
        as_planned.sim.iteration_s > 0)
        out = as_planned.planned_s * scaled.sim.iteration_s / as_planned.sim.iteration_s;
    coord_replay_free(&as_planned);
    coord_replay_free(&scaled);
    return out;
}
