/*
 * The links of running jobs as training measures them: what the stages' iteration reports say
 * of their neighbours' transfers goes into the speed model (speeds.h: clock offsets, smoothed
 * speed per link), and the rebalance decision (jobs_rebalance.c) reads it back here: whether a
 * link of the running plan changed enough to evaluate a re-plan, which one (for the job's
 * history), and the transfer times of the plan's cuts as planned and as measured (for the
 * replay of the running plan, plan_replay.h).
 *
 * What is measured, and why: a stage cannot time its own sends (ZeroMQ queues them and returns),
 * so each message carries its sender's send time and the receiver notes its arrival; only
 * messages that arrived while the receiver waited on an empty inbox count (others sat behind
 * its compute), and of those the fastest per step (later ones of a burst queue behind earlier
 * ones). Its bytes over its transit is the link's effective speed for messages of that size,
 * latency included (worker/transport/transport.h, rt_link_sample). Between workers held by CPU
 * quotas a transit also holds the time either end sat throttled, a delay that only adds: such
 * a link follows its least recent transit (speeds.h).
 *
 * Not here: the decision, the pause and the move (jobs_rebalance.c), the model (speeds.c).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/sc_util.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/speeds.h"

#define LINK_SKIP 10     /* steps of a run whose transfers are not sampled (connecting, warm-up) */
#define LINK_CHANGE 0.4  /* a link this far off its expected speed (either way) is a change... */
#define LINK_WEIGHT 0.10 /* ...when its transfers then take this share of an iteration more */
#define LINKS_MAX 64

/* Whether a CFS quota of `fraction` over `period_s` can hold a runnable thread back. */
static bool quota_caps(double fraction, double period_s)
{
    return fraction > 0 && fraction < 1 && period_s > 0;
}

void coord_jobs_links_observe(coord *c, coord_progress *p, const char *worker_id,
                              const Stagecraft__IterationReport *r, uint64_t sent_ns,
                              uint64_t received_ns, bool fresh)
{
    coord_speeds_clock(c->speeds, p->job_id, worker_id, r->clock_id, sent_ns, received_ns);
    if (!fresh || r->parked || r->step <= p->resume_step + LINK_SKIP)
        return;
    int s = (int)r->stage;
    for (size_t i = 0; i < r->n_links; i++) {
        const Stagecraft__LinkTransfer *l = r->links[i];
        if (l == NULL || l->clean == 0 || l->bytes == 0)
            continue;
        int from = l->from_next ? s + 1 : s - 1;
        if (from < 0 || from >= p->n_stages || (int)l->from_replica >= p->replicas[from])
            continue;
        const char *sender = p->worker_of[from][l->from_replica];
        double transit;
        if (sender[0] == '\0' ||
            !coord_speeds_transit(c->speeds, p->job_id, sender, worker_id, l->delay_s, &transit))
            continue;
        /* a worker under a CPU quota may sit throttled for up to P (1 - q) of a period when
         * its message is due (the sender's I/O thread, the receiver's wake-up): the transit then
         * holds that wait too, and the link's figure follows its least recent samples */
        double qf, qp;
        bool capped =
            quota_caps(r->cpu_quota_fraction, r->cpu_quota_period_s) ||
            (coord_speeds_quota(c->speeds, p->job_id, sender, &qf, &qp) && quota_caps(qf, qp));
        coord_speeds_link_sample(c->speeds, p->job_id, sender, worker_id, (double)l->bytes, transit,
                                 l->messages, capped);
    }
}

/* Where link v runs in p's plan: the stage it leaves and whether it carries activations
 * (to the next stage) or gradients; false when it joins no two neighbouring stages now. */
static bool in_plan(const coord_progress *p, const coord_link_speed *v, int *stage, bool *fwd)
{
    for (int s = 0; s + 1 < p->n_stages; s++) {
        for (int a = 0; a < p->replicas[s]; a++) {
            for (int b = 0; b < p->replicas[s + 1]; b++) {
                const char *lo = p->worker_of[s][a], *hi = p->worker_of[s + 1][b];
                if (strcmp(v->from, lo) == 0 && strcmp(v->to, hi) == 0) {
                    *stage = s, *fwd = true;
                    return true;
                }
                if (strcmp(v->from, hi) == 0 && strcmp(v->to, lo) == 0) {
                    *stage = s + 1, *fwd = false;
                    return true;
                }
            }
        }
    }
    return false;
}

/* Seconds per step its transfers take at `bytes_per_s`. */
static double step_s(const coord_link_speed *v, double bytes_per_s)
{
    return bytes_per_s > 0 ? v->bytes * (double)v->messages / bytes_per_s : 0;
}

bool coord_jobs_links_changed(coord *c, const coord_progress *p, double iteration_s, double *worst,
                              char *why, size_t size)
{
    coord_link_speed v[LINKS_MAX];
    size_t n = coord_speeds_links(c->speeds, p->job_id, v, LINKS_MAX);
    bool any = false;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        int stage;
        bool fwd;
        if (!in_plan(p, &v[i], &stage, &fwd) || v[i].expected <= 0 || v[i].measured <= 0)
            continue;
        double ratio = v[i].measured / v[i].expected;
        double more = fabs(step_s(&v[i], v[i].measured) - step_s(&v[i], v[i].expected));
        if (fabs(ratio - 1) <= LINK_CHANGE || !(iteration_s > 0) ||
            more <= LINK_WEIGHT * iteration_s)
            continue;
        any = true;
        double off = fabs(log(ratio));
        if (off <= *worst)
            continue;
        *worst = off;
        const coord_worker *a = coord_registry_find(c->registry, v[i].from);
        const coord_worker *b = coord_registry_find(c->registry, v[i].to);
        sc_strfmt(why, size,
                  "link %s ('%s') -> %s ('%s') (%s of stage %d) at %.3gx its expected speed "
                  "(%.3g bytes/s measured, %.3g expected; %.3g s per iteration of transfers, "
                  "%.3g s expected)",
                  v[i].from, a != NULL ? a->rec.name : "?", v[i].to, b != NULL ? b->rec.name : "?",
                  fwd ? "activations" : "gradients", stage, ratio, v[i].measured, v[i].expected,
                  step_s(&v[i], v[i].measured), step_s(&v[i], v[i].expected));
    }
    return any;
}

bool coord_jobs_links_transfer_s(coord *c, const coord_progress *p, double *planned_f,
                                 double *planned_b, double *now_f, double *now_b)
{
    coord_link_speed v[LINKS_MAX];
    size_t n = coord_speeds_links(c->speeds, p->job_id, v, LINKS_MAX);
    bool any = false;
    for (int s = 0; s < p->n_stages; s++)
        planned_f[s] = planned_b[s] = now_f[s] = now_b[s] = 0;
    for (size_t i = 0; i < n; i++) {
        int stage;
        bool fwd;
        if (!in_plan(p, &v[i], &stage, &fwd) || v[i].expected <= 0 || v[i].measured <= 0)
            continue;
        /* one micro-batch's message; copies of a stage: the slowest pair stands for the cut */
        double plan = v[i].bytes / v[i].expected, now = v[i].bytes / v[i].measured;
        double *pl = fwd ? &planned_f[stage] : &planned_b[stage];
        double *nw = fwd ? &now_f[stage] : &now_b[stage];
        *pl = plan > *pl ? plan : *pl;
        *nw = now > *nw ? now : *nw;
        any = true;
    }
    return any;
}
