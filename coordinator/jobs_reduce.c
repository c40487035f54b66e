/*
 * The copies' all-reduce of running jobs as training measures it: what each copy of a
 * replicated stage reports of its all-reduce (IterationReport.reduce: through host memory, or
 * NCCL's between GPUs, which carries the same stamps) goes into the
 * speed model (speeds.h: a figure per worker, in the planner's measure), and the rebalance
 * decision (jobs_rebalance.c) reads it back here: whether a stage's all-reduce is far enough off
 * what its plan charges to evaluate a re-plan, and its time as planned and as measured (for the
 * replay of the running plan, plan_replay.h). A re-plan then charges the copies of a server at
 * their measured speed (planning.c).
 *
 * What is measured, and why: a copy's all-reduce starts when its own gradients are complete,
 * and then it waits for the slowest copy, which is the pipeline's imbalance, not the all-reduce.
 * Each copy reports its own time (own_s) and, per other copy, the end of its all-reduce minus
 * that copy's send stamp (the moment that copy's gradients were complete); corrected for the two
 * clocks as a link's delay is, the least of these is the all-reduce's time once every copy had
 * its gradients. Between CPU workers that is mostly CPU: copying and summing the gradients and
 * pushing them through TCP, which the planner's bandwidth alone does not show.
 *
 * Not here: the decision and the move (jobs_rebalance.c), the model (speeds.c), the runtime's
 * all-reduce (worker/runtime/runner_update.c).
 */
#include <math.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/registry.h"
#include "coordinator/speeds.h"

#define REDUCE_SKIP 10     /* steps of a run whose all-reduces are not sampled (connecting) */
#define REDUCE_CHANGE 0.4  /* an all-reduce this far off what the plan charges is a change... */
#define REDUCE_WEIGHT 0.10 /* ...when it then takes this share of an iteration more or less */

/* Whether the copies of stage s all run on one host: only then does their all-reduce measure
 * that server's (across servers the NIC's speed, which the model has, is in it too). */
static bool one_host(coord *c, const coord_progress *p, int s)
{
    const coord_worker *w0 = coord_registry_find(c->registry, p->worker_of[s][0]);
    for (int k = 1; w0 != NULL && k < p->replicas[s]; k++) {
        const coord_worker *w = coord_registry_find(c->registry, p->worker_of[s][k]);
        if (w == NULL || strcmp(w->rec.host, w0->rec.host) != 0)
            return false;
    }
    return w0 != NULL;
}

void coord_jobs_reduce_observe(coord *c, coord_progress *p, const char *worker_id,
                               const Stagecraft__IterationReport *r, bool fresh)
{
    const Stagecraft__ReduceTiming *x = r->reduce;
    int s = (int)r->stage;
    if (!fresh || r->parked || x == NULL || x->count == 0 || x->bytes == 0 ||
        r->step <= p->resume_step + REDUCE_SKIP || p->replicas[s] < 2 ||
        x->n_peers != (size_t)(p->replicas[s] - 1) || !one_host(c, p, s))
        return;
    p->reduce_bytes[s] = (double)x->bytes;
    double cost = x->own_s;
    for (size_t i = 0; i < x->n_peers; i++) {
        const Stagecraft__ReducePeer *peer = x->peers[i];
        double since;
        if (peer == NULL || (int)peer->copy >= p->replicas[s] ||
            p->worker_of[s][peer->copy][0] == '\0' ||
            !coord_speeds_transit(c->speeds, p->job_id, p->worker_of[s][peer->copy], worker_id,
                                  peer->delay_s, &since))
            return; /* a copy whose readiness is unknown: the wait cannot be told apart */
        if (since < cost)
            cost = since;
    }
    coord_speeds_reduce_sample(c->speeds, p->job_id, worker_id, p->replicas[s], (double)x->bytes,
                               cost);
}

double coord_jobs_reduce_measured_s(coord *c, const coord_progress *p, int s)
{
    double most = 0;
    for (int k = 0; k < p->replicas[s] && p->replicas[s] > 1; k++) {
        double t = coord_speeds_reduce_s(c->speeds, p->job_id, p->worker_of[s][k], p->replicas[s],
                                         p->reduce_bytes[s]);
        most = t > most ? t : most; /* the slowest copy ends it for all */
    }
    return most;
}

bool coord_jobs_reduce_s(coord *c, const coord_progress *p, double *planned, double *now)
{
    bool any = false;
    for (int s = 0; s < p->n_stages; s++) {
        planned[s] = p->planned_reduce_s[s];
        now[s] = coord_jobs_reduce_measured_s(c, p, s);
        if (now[s] > 0 && planned[s] > 0)
            any = true;
        else
            now[s] = planned[s]; /* unmeasured: as planned */
    }
    return any;
}

bool coord_jobs_reduce_changed(coord *c, const coord_progress *p, double iteration_s, char *why,
                               size_t size)
{
    if (p->async || !(iteration_s > 0))
        return false;
    int worst = -1;
    double off = 0, now = 0;
    for (int s = 0; s < p->n_stages; s++) {
        double planned = p->planned_reduce_s[s], t = coord_jobs_reduce_measured_s(c, p, s);
        if (!(planned > 0) || !(t > 0))
            continue; /* one copy, or not measured yet */
        double ratio = t / planned;
        if (fabs(ratio - 1) <= REDUCE_CHANGE || fabs(t - planned) <= REDUCE_WEIGHT * iteration_s ||
            fabs(log(ratio)) <= off)
            continue;
        off = fabs(log(ratio));
        worst = s;
        now = t;
    }
    if (worst < 0)
        return false;
    double planned = p->planned_reduce_s[worst];
    sc_strfmt(why, size,
              "the all-reduce of stage %d's %d copies at %.3gx the plan's time (%.3g s per "
              "iteration measured, %.3g s planned, %.3g MB of gradients)",
              worst, p->replicas[worst], now / planned, now, planned,
              p->reduce_bytes[worst] / 1e6);
    return true;
}
