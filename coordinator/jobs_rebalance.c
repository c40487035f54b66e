/*
 * Rebalancing a running job: the measured speed of each worker (its busy time per iteration,
 * smoothed, against its mean over the first iterations of the run: the speed the plan was made
 * for), the decision to re-plan, and the pause that hands the job to the driver.
 *
 *  1. Reports (coord_jobs_rebalance_observe, control loop, under c->lock) keep the speeds. When
 *     a worker's busy time is more than CHANGE off its baseline, or a link between two stages
 *     is off its expected speed enough to matter (jobs_links.c), the job is marked for
 *     evaluation and the driver is woken.
 *  2. Evaluation (coord_jobs_rebalance, a driver thread or the RebalanceJob call; planning runs
 *     without the lock) re-plans with every worker's profile scaled by its measured factor and
 *     its link by its measured link factor, and compares: the running plan replayed at the
 *     measured speeds (compute, the measured links' transfers and copies' all-reduce, which a
 *     re-plan also charges as measured: jobs_reduce.c), and its predicted iteration
 *     time times the measured slow-down of the whole iteration, against the new plan's. It
 * rebalances when the gain is over GAIN_MIN and the time it saves over the remaining steps
 * outweighs the move's estimated cost.
 *  3. The pause: every worker of the job is told to stop after a step a little ahead (REBALANCE
 *     command); when all report they paused there (IterationReport.parked), the driver re-plans
 *     it and assigns the new stages, which take their blocks from the paused workers' block
 *     servers (worker/blocks/). A worker that paused later than the others moves the pause step
 *     for all. The pause and the job's states on the way are jobs_transitions.c's.
 *
 * Not here: probing again the workers a re-plan left out (jobs_reprobe.c, which calls this
 * file's evaluation), the new plan's assignment and start (jobs_driver.c, jobs_dispatch.c),
 * what workers do with their state (worker/). Calls down only: the transitions, the links'
 * and all-reduce figures, the speed model and the planner.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/command_queue.h"
#include "coordinator/coord_internal.h"
#include "coordinator/freezing.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/plan_replay.h"
#include "coordinator/planning.h"
#include "coordinator/speeds.h"

#define LOG "rebalance"
#define BASE_SKIP 10 /* steps of a run left out of its baseline (warm-up, connecting) */
#define BASE_N 8     /* reports averaged into a replica's baseline */
#define KNOWN_SKIP 3 /* the same for a worker an earlier run of the job measured */
#define KNOWN_N 4
#define ALPHA 0.2 /* weight of a new report in the smoothed busy time */
#define CHANGE COORD_REBALANCE_CHANGE
#define GAIN_MIN 0.10     /* the least predicted gain worth a move */
#define QUIET_STEPS 20    /* steps without evaluation after one that found no gain */
#define PERSIST 6         /* steps a change must last (reports of the last stage in a row) */
#define PAUSE_AHEAD 2     /* the pause step: this far past the furthest replica's step */
#define PAUSE_LEAD_S 0.15 /* and at least this much training time past it */
#define MOVE_FIXED_S 2.0  /* a move's cost besides the bytes: pausing, assigning, connecting */

/* Under c->lock: the reports replica (s, k) averages before its worker has a measured speed in
 * this run. A worker an earlier run of the job measured (a run after a move or a recovery) has
 * its reference already (p->ref, set from its first report: coord_jobs_rebalance_observe), and
 * needs fewer, after fewer steps left out: all its new run must show is how fast it runs its new
 * blocks, and the warm-up it skips is the first step's connecting and fetching. A share restored
 * a step into a run after a move paused the job 15-17 steps later, against 27-28 with a first
 * run's baseline (test_rebalance_lab). */
static int base_need(const coord_progress *p, int s, int k)
{
    return p->ref_before[s][k] ? KNOWN_N : BASE_N;
}

bool coord_jobs_speed_known(const coord_progress *p, int s, int k)
{
    return p->base_n[s][k] >= base_need(p, s, k);
}

/* Under c->lock: the measured speed factor of replica (s, k)'s worker against its profile
 * (2: its work takes twice what it profiled; 0: unknown yet): busy time per profiled second of
 * work, over the worker's reference figure. */
static double factor_of(const coord_progress *p, int s, int k)
{
    if (p->base_n[s][k] < base_need(p, s, k) || p->work[s][k] <= 0 || p->ref[s][k] <= 0)
        return 0;
    return p->busy_avg[s][k] / p->work[s][k] / p->ref[s][k];
}

/* Under c->lock: the factor against what the plan assumed (1: as planned). */
static double off_plan(const coord_progress *p, int s, int k)
{
    double f = factor_of(p, s, k);
    return f > 0 && p->scale[s][k] > 0 ? f / p->scale[s][k] : 0;
}

/* Under c->lock: whether the run's first iterations (its baseline) were already more than CHANGE
 * over its prediction: nothing changed while it ran, it never went as planned. */
bool coord_jobs_baseline_off(const coord_progress *p)
{
    return p->iter_base_n >= BASE_N && p->predicted_iteration_s > 0 &&
           p->iter_base > p->predicted_iteration_s * (1 + CHANGE);
}

/* Under c->lock: how far the worker furthest off the plan's speed is off it (0.5: its work
 * takes 1.5x or 0.5x what the plan assumed; 0 where none is measured yet). */
static double compute_departure(const coord_progress *p)
{
    double worst = 0;
    for (int s = 0; s < p->n_stages; s++) {
        for (int k = 0; k < p->replicas[s]; k++) {
            double f = off_plan(p, s, k);
            if (f > 0 && fabs(f - 1) > worst)
                worst = fabs(f - 1);
        }
    }
    return worst;
}

/* Under c->lock: whether some replica's worker is more than CHANGE off the plan's speed. Its
 * links' figures are then no evidence of their own: a starved receiver takes its messages late
 * and a starved sender sends them late, so a compute change shows on the links at both of its
 * ends. While any worker is off, a re-plan takes the links as the model has them. */
static bool compute_off(const coord_progress *p)
{
    return compute_departure(p) > CHANGE;
}

/* The number of stages of a plan document (0 when it cannot be read). */
static size_t plan_stage_count(const char *plan_json)
{
    json_t *plan = json_loads(plan_json, 0, NULL);
    size_t n = json_array_size(json_object_get(plan, "stages"));
    json_decref(plan);
    return n;
}

/* Whether two plans run the same stages on the same workers (same blocks, same worker ids in
 * order, same schedule and micro-batch count): moving from one to the other changes nothing. */
static bool same_stages(const char *a_json, const char *b_json)
{
    json_t *a = a_json != NULL ? json_loads(a_json, 0, NULL) : NULL;
    json_t *b = b_json != NULL ? json_loads(b_json, 0, NULL) : NULL;
    json_t *sa = json_object_get(a, "stages"), *sb = json_object_get(b, "stages");
    bool same = a != NULL && b != NULL && json_array_size(sa) == json_array_size(sb) &&
                json_array_size(sa) > 0 &&
                json_equal(json_object_get(a, "schedule"), json_object_get(b, "schedule")) &&
                json_equal(json_object_get(json_object_get(a, "microbatches"), "count"),
                           json_object_get(json_object_get(b, "microbatches"), "count")) &&
                json_integer_value(json_object_get(a, "frozen_blocks")) ==
                    json_integer_value(json_object_get(b, "frozen_blocks"));
    for (size_t i = 0; same && i < json_array_size(sa); i++) {
        json_t *x = json_array_get(sa, i), *y = json_array_get(sb, i);
        same = json_equal(json_object_get(x, "first_block"), json_object_get(y, "first_block")) &&
               json_equal(json_object_get(x, "last_block"), json_object_get(y, "last_block")) &&
               json_equal(json_object_get(x, "worker_ids"), json_object_get(y, "worker_ids"));
    }
    json_decref(a);
    json_decref(b);
    return same;
}

bool coord_jobs_rebalance_observe(coord *c, coord_progress *p, const Stagecraft__IterationReport *r)
{
    int s = (int)r->stage, k = (int)r->replica;
    if (r->parked)
        return p->pause_step == 0 || coord_jobs_pause_report(c, p, s, k, r->step);
    /* a worker under a CPU quota: its busy time at the quota's sustained rate (a stage that
     * waits runs at full speed for a while after, which its wall-clock busy time would count
     * as a faster worker) unless the wall clock says slower still (other work on its host
     * takes CPU its quota would allow), and the quota a re-plan should model */
    double busy = r->quota_busy_s > r->busy_s ? r->quota_busy_s : r->busy_s;
    if (p->worker_of[s][k][0] != '\0' && (r->quota_busy_s > 0 || r->cpu_quota_fraction > 0))
        coord_speeds_set_quota(c->speeds, p->job_id, p->worker_of[s][k], r->cpu_quota_fraction,
                               r->cpu_quota_period_s);
    if (p->base_n[s][k] == 0 && p->ref[s][k] <= 0 && p->worker_of[s][k][0] != '\0') {
        p->ref[s][k] = coord_speeds_reference(c->speeds, p->job_id, p->worker_of[s][k], 0);
        p->ref_before[s][k] = p->ref[s][k] > 0;
    }
    if (r->step <= p->resume_step + (p->ref_before[s][k] ? KNOWN_SKIP : BASE_SKIP) || busy <= 0)
        return true;
    int need = base_need(p, s, k);
    if (p->base_n[s][k] < need) {
        p->busy_base[s][k] = (p->busy_base[s][k] * p->base_n[s][k] + busy) / (p->base_n[s][k] + 1);
        p->busy_avg[s][k] = p->busy_base[s][k];
        if (++p->base_n[s][k] == need && p->work[s][k] > 0 && !p->ref_before[s][k]) {
            /* the worker's first measured run on this profile is its reference */
            double ratio =
                p->busy_base[s][k] / p->work[s][k] / (p->scale[s][k] > 0 ? p->scale[s][k] : 1);
            p->ref[s][k] = coord_speeds_reference(c->speeds, p->job_id, p->worker_of[s][k], ratio);
        }
    } else {
        p->busy_avg[s][k] = ALPHA * busy + (1 - ALPHA) * p->busy_avg[s][k];
    }
    /* the iteration's baseline leaves out the whole warm-up: it judges the run as planned */
    if (s == p->n_stages - 1 && k == 0 && r->iteration_s > 0 &&
        r->step > p->resume_step + BASE_SKIP) {
        if (p->iter_base_n < BASE_N) {
            p->iter_base = (p->iter_base * p->iter_base_n + r->iteration_s) / (p->iter_base_n + 1);
            p->iter_avg = p->iter_base;
            p->iter_base_n++;
        } else {
            p->iter_avg = ALPHA * r->iteration_s + (1 - ALPHA) * p->iter_avg;
        }
    }
    if (p->pause_step != 0 || p->evaluate || !p->rebalance_auto)
        return true;
    if (s != p->n_stages - 1 || k != 0)
        return true; /* one look per report of the last stage: about once per iteration */
    double departure = compute_departure(p);
    bool off = departure > CHANGE;
    /* After an evaluation that found no move worth it, what it saw is not looked at again for
     * QUIET_STEPS steps; a worker further off than it saw by more than CHANGE is a new change
     * (a share cut just after it), which waits for no quiet. */
    if (r->step < p->quiet_until && !(off && departure > p->quiet_departure + CHANGE))
        return true;
    if (!off) { /* or a link between two stages (jobs_links.c), or the copies' all-reduce */
        double worst, iter = p->iter_avg > 0 ? p->iter_avg : r->iteration_s;
        char why[COORD_REASON_MAX];
        off = coord_jobs_links_changed(c, p, iter, &worst, why, sizeof why) ||
              coord_jobs_reduce_changed(c, p, iter, why, sizeof why);
    }
    if (!off) {
        p->off_since = 0;
        p->changed_s = 0;
        return true;
    }
    if (p->changed_s == 0) {
        p->changed_s = sc_clock_now_s();
        p->off_since = r->step;
    }
    if (r->step >= p->off_since + PERSIST) {
        p->off_since = r->step;
        p->evaluate = true;
        pthread_cond_broadcast(&c->wake);
    }
    return true;
}

/* The job's workers now (those its plan runs on), with their hardware reports and their
 * profiles scaled by the speed model and by the factors measured since the run began
 * (factor[i], 1 where unmeasured). Under c->lock. */
static sc_status current_workers(coord *c, const coord_progress *p, coord_chosen_worker **out,
                                 double **factor, size_t *n_out, sc_err *err)
{
    size_t total = coord_registry_count(c->registry), n = 0;
    coord_chosen_worker *ws = calloc(total ? total : 1, sizeof *ws);
    double *f = calloc(total ? total : 1, sizeof *f);
    if (ws == NULL || f == NULL) {
        free(ws);
        free(f);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    }
    sc_status rc = SC_OK;
    for (size_t i = 0; i < total && rc == SC_OK; i++) {
        const coord_worker *w = coord_registry_at(c->registry, i);
        /* its own, and those an earlier re-plan left out (free, alive, profiled for it) */
        bool free_known = w->job_id[0] == '\0' && w->state == COORD_WORKER_ALIVE &&
                          coord_speeds_known(c->speeds, p->job_id, w->rec.id);
        if ((strcmp(w->job_id, p->job_id) != 0 && !free_known) || w->leaving)
            continue;
        coord_chosen_worker *cw = &ws[n];
        coord_jobs_chosen_fill(cw, w); /* a report that cannot be read is refused below */
        double measured = 1;           /* against the scale the model has for it */
        for (int s = 0; s < p->n_stages; s++)
            for (int k = 0; k < p->replicas[s]; k++)
                if (strcmp(p->worker_of[s][k], w->rec.id) == 0 && off_plan(p, s, k) > 0)
                    measured = off_plan(p, s, k);
        f[n] = measured;
        char *prof = coord_speeds_profile(c->speeds, p->job_id, w->rec.id, &cw->link_bytes_per_s);
        cw->reduce_bytes_per_s = coord_speeds_reduce_bw(c->speeds, p->job_id, w->rec.id);
        cw->profile_json = prof != NULL ? coord_profile_scaled(prof, measured) : NULL;
        /* its link as its transfers measure it now, not as the model last adopted it */
        if (!compute_off(p))
            cw->link_bytes_per_s *=
                coord_speeds_link_factor(c->speeds, p->job_id, w->rec.id, true) /
                coord_speeds_link_factor(c->speeds, p->job_id, w->rec.id, false);
        free(prof);
        n++;
        if (cw->hw == NULL || cw->profile_json == NULL)
            rc = SC_ERRF(err, SC_ERR_PRECONDITION,
                         "no profile of worker %s for job %s (the coordinator restarted since "
                         "it was profiled?)",
                         w->rec.id, p->job_id);
    }
    if (rc == SC_OK && n == 0)
        rc = SC_ERRF(err, SC_ERR_PRECONDITION, "job %s holds no worker", p->job_id);
    if (rc != SC_OK) {
        coord_jobs_chosen_free(ws, n);
        free(f);
        return rc;
    }
    *out = ws;
    *factor = f;
    *n_out = n;
    return SC_OK;
}

/* "worker w-2 ('b') at 3.9x its planned time (busy 0.83 s per iteration, was 0.21 s)" for the
 * replica furthest off its baseline, into buf. Under c->lock. */
static void describe_change(coord *c, const coord_progress *p, char *buf, size_t size)
{
    if (p->leaving[0]) {
        const coord_worker *w = coord_registry_find(c->registry, p->leaving);
        sc_strfmt(buf, size, "worker %s ('%s') leaves: its blocks move to the others", p->leaving,
                  w != NULL ? w->rec.name : "?");
        return;
    }
    int bs = -1, bk = -1;
    double worst = 0;
    for (int s = 0; s < p->n_stages; s++) {
        for (int k = 0; k < p->replicas[s]; k++) {
            double f = off_plan(p, s, k);
            double off = f > 0 ? fabs(log(f)) : 0;
            if (off > worst) {
                worst = off;
                bs = s, bk = k;
            }
        }
    }
    /* with every worker as planned, a link off its expected speed names the change */
    double link_off = 0;
    char link_why[COORD_REASON_MAX];
    if (!compute_off(p) &&
        coord_jobs_links_changed(c, p,
                                 p->iter_avg > 0 ? p->iter_avg : p->iteration_s[p->n_stages - 1],
                                 &link_off, link_why, sizeof link_why)) {
        sc_strlcpy(buf, link_why, size);
        return;
    }
    /* nor a link: the copies' all-reduce off what the plan charges */
    if (!compute_off(p) &&
        coord_jobs_reduce_changed(
            c, p, p->iter_avg > 0 ? p->iter_avg : p->iteration_s[p->n_stages - 1], buf, size))
        return;
    /* nothing the job runs on changed beyond CHANGE: a worker it left out did */
    if (p->reprobed[0] && worst <= log(1 + CHANGE)) {
        sc_strlcpy(buf, p->reprobed, size);
        return;
    }
    if (bs < 0) {
        sc_strlcpy(buf, "no measured change", size);
        return;
    }
    const coord_worker *w = coord_registry_find(c->registry, p->worker_of[bs][bk]);
    sc_strfmt(buf, size,
              "worker %s ('%s', stage %d) at %.2fx its planned time (busy %.3g s per iteration, "
              "%.3g s expected)",
              p->worker_of[bs][bk], w != NULL ? w->rec.name : "?", bs, off_plan(p, bs, bk),
              p->busy_avg[bs][bk], p->busy_avg[bs][bk] / off_plan(p, bs, bk));
}

sc_status coord_jobs_rebalance(coord *c, const char *job_id, bool force, bool dry_run,
                               coord_rebalance_result *out, sc_err *err)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->lock);
    coord_progress *p = coord_jobs_progress(c, job_id);
    coord_job job;
    if (coord_store_job_get(c->store, job_id, &job, err) != SC_OK) {
        pthread_mutex_unlock(&c->lock);
        return err->code;
    }
    coord_job_state state = job.state;
    char *spec_json = job.spec_json, *running_plan = job.plan_json;
    job.spec_json = NULL;
    job.plan_json = NULL;
    coord_job_clear(&job);
    if (p != NULL && !p->finished && p->pause_step != 0) {
        pthread_mutex_unlock(&c->lock);
        free(spec_json);
        free(running_plan);
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "job %s is already pausing after step %llu for a rebalance", job_id,
                       (unsigned long long)p->pause_step);
    }
    if (state != COORD_JOB_RUNNING || p == NULL || p->finished) {
        pthread_mutex_unlock(&c->lock);
        free(spec_json);
        free(running_plan);
        return SC_ERRF(err, SC_ERR_PRECONDITION, "job %s is %s; only a running job rebalances",
                       job_id, coord_job_state_name(state));
    }
    p->evaluate = false;
    coord_chosen_worker *ws = NULL;
    double *factor = NULL;
    size_t n = 0;
    sc_status rc = current_workers(c, p, &ws, &factor, &n, err);
    /* the CPU quota each worker's reports say it has now, for the re-plan's model */
    for (size_t i = 0; rc == SC_OK && i < n; i++) {
        double qf, qp;
        if (ws[i].hw != NULL && ws[i].hw->n_devices > 0 &&
            coord_speeds_quota(c->speeds, job_id, ws[i].id, &qf, &qp)) {
            ws[i].hw->devices[0]->cpu_quota_fraction = qf;
            ws[i].hw->devices[0]->cpu_quota_period_s = qp;
        }
    }
    /* what an iteration measures now, and each stage's measured factor (its slowest copy's)
     * against the plan's speeds */
    double measured =
        p->predicted_iteration_s *
        (p->iter_base_n >= BASE_N && p->iter_base > 0 ? p->iter_avg / p->iter_base : 1.0);
    double stage_factor[COORD_MAX_STAGES];
    /* the plan's transfers at its links' expected and measured speeds (none measured: not
     * played, as before links were measured) */
    double planned_f[COORD_MAX_STAGES], planned_b[COORD_MAX_STAGES];
    double now_f[COORD_MAX_STAGES], now_b[COORD_MAX_STAGES];
    bool off = compute_off(p);
    bool links = !off && coord_jobs_links_transfer_s(c, p, planned_f, planned_b, now_f, now_b);
    /* the copies' all-reduce as planned and as measured (none measured: not played) */
    double planned_r[COORD_MAX_STAGES], now_r[COORD_MAX_STAGES];
    bool reduced = !p->async && coord_jobs_reduce_s(c, p, planned_r, now_r);
    for (int s = 0; s < p->n_stages; s++) {
        double f = 0;
        for (int k = 0; k < p->replicas[s]; k++)
            f = off_plan(p, s, k) > f ? off_plan(p, s, k) : f;
        stage_factor[s] = f > 0 ? f : 1; /* unmeasured: as planned */
    }
    int n_stages = p->n_stages;
    uint64_t done = p->stored_step, steps = p->steps;
    char change[COORD_REASON_MAX];
    describe_change(c, p, change, sizeof change);
    p->reprobed[0] = '\0'; /* told once */
    /* a freeze the policy asked for: the workers learn the new prefix only from a new plan, so
     * it moves whatever the gain */
    int frozen = coord_freezing_frozen(c->freezing, job_id);
    int freeze_to = p->freeze_to > frozen ? p->freeze_to : frozen;
    bool asked = force, freezing = freeze_to > frozen;
    if (freezing) {
        sc_strlcpy(change, p->freeze_why, sizeof change);
        force = true;
    }
    /* a run that never went as its plan predicted (its first iterations already more than
     * CHANGE over it: a link slowed between the probe and the training, say) has no baseline
     * to scale from: what its iterations measure is the only view of now */
    double unplanned_s = coord_jobs_baseline_off(p) ? p->iter_avg : 0;
    pthread_mutex_unlock(&c->lock);

    /* The running plan at the measured speeds, on the same footing as the new plan (compute
     * scaled by the measured factors, the measured links' transfers, the measured all-reduce). */
    coord_replay_costs as_planned = {links ? planned_f : NULL, links ? planned_b : NULL, NULL};
    coord_replay_costs now = {links ? now_f : NULL, links ? now_b : NULL, NULL};
    bool replayable = running_plan != NULL && (size_t)n_stages == plan_stage_count(running_plan);
    double current =
        replayable ? coord_plan_replay_costs_s(running_plan, stage_factor, &as_planned, &now) : 0;
    if (replayable && reduced && current > 0) {
        /* an all-reduce the plan charged wrong was so from the run's first iteration, which the
         * iterations' drift against their baseline does not show: both views of now take its
         * difference */
        as_planned.reduce = planned_r;
        now.reduce = now_r;
        double with = coord_plan_replay_costs_s(running_plan, stage_factor, &as_planned, &now);
        if (with > 0) {
            measured += with - current;
            current = with;
        }
    }
    if (current <= 0)
        current = measured;
    if (unplanned_s > 0)
        measured = current = unplanned_s;
    coord_jobspec spec;
    memset(&spec, 0, sizeof spec);
    if (rc == SC_OK)
        rc = coord_jobspec_parse(job_id, spec_json, strlen(spec_json), &spec, err);
    free(spec_json);
    coord_plan_worker *pw = rc == SC_OK ? calloc(n, sizeof *pw) : NULL;
    if (rc == SC_OK && pw == NULL)
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    double t0 = sc_clock_now_s();
    char *plan_json = NULL;
    /* the measured factors by worker id: grouping by host below reorders ws[] */
    char(*ids)[COORD_ID_MAX] = rc == SC_OK ? calloc(n ? n : 1, sizeof *ids) : NULL;
    if (rc == SC_OK && ids == NULL)
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; rc == SC_OK && i < n; i++)
        sc_strlcpy(ids[i], ws[i].id, sizeof ids[i]);
    if (rc == SC_OK) {
        coord_jobs_group_by_host(ws, n); /* the order the driver plans in */
        for (size_t i = 0; i < n; i++) {
            pw[i].id = ws[i].id;
            pw[i].hw = ws[i].hw;
            pw[i].profile_json = ws[i].profile_json;
            pw[i].link_bytes_per_s = ws[i].link_bytes_per_s;
            pw[i].reduce_bytes_per_s = ws[i].reduce_bytes_per_s;
        }
        rc = coord_plan_job(&spec, pw, n, freeze_to, &plan_json, err);
    }
    free(pw);
    double plan_s = sc_clock_now_s() - t0;
    if (rc != SC_OK)
        goto out;
    json_t *plan = json_loads(plan_json, 0, NULL);
    out->new_s = json_number_value(json_object_get(plan, "iteration_time_s"));
    json_decref(plan);
    out->current_s = current;
    /* the smaller of the gains against either view of now: a slowdown the factors do not
     * explain would slow the new plan too, and factors that overstate what the iterations show
     * (a busy time inflated by a loaded host) promise a gain the job would not see */
    out->gain = current > 0 && measured > 0
                    ? 1 - out->new_s / (current < measured ? current : measured)
                    : 0;
    out->plan_json = plan_json;
    plan_json = NULL;
    /* the move's cost: the whole model's state over the slowest measured link, plus a fixed
     * part; what it saves: the gain on every remaining step */
    double bytes = 0, slowest = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *prof = json_loads(ws[i].profile_json, 0, NULL);
        json_t *blocks = json_object_get(prof, "blocks");
        double mine = 0;
        for (size_t b = 0; b < json_array_size(blocks); b++)
            mine +=
                json_number_value(json_object_get(json_array_get(blocks, b), "parameter_bytes"));
        bytes = mine > bytes ? mine : bytes;
        json_decref(prof);
        if (ws[i].link_bytes_per_s > 0 && (slowest == 0 || ws[i].link_bytes_per_s < slowest))
            slowest = ws[i].link_bytes_per_s;
    }
    /* the last move's measured cost, once there was one (the same job moves about the same
     * state each time), else the estimate */
    pthread_mutex_lock(&c->lock);
    double move_measured = coord_speeds_move_cost(c->speeds, job_id);
    pthread_mutex_unlock(&c->lock);
    double cost = move_measured > 0
                      ? move_measured
                      : MOVE_FIXED_S + 3 * bytes / (slowest > 0 ? slowest : 1e8); /* params, m, v */
    double saved = out->gain * measured * (double)(steps > done ? steps - done : 0);
    /* moves in a row ask for more: a gain that does not last is noise the plan chases */
    pthread_mutex_lock(&c->lock);
    double needed = coord_speeds_gain_needed(c->speeds, job_id, GAIN_MIN);
    pthread_mutex_unlock(&c->lock);
    /* a re-plan onto the very stages the job runs (a strategy whose cut the speeds do not
     * change, say) moves nothing: whatever it predicts is no gain */
    bool same = same_stages(running_plan, out->plan_json);
    bool worth = out->gain > needed && saved > cost && !same;
    if (dry_run || (!force && !worth)) {
        sc_strfmt(out->message, sizeof out->message,
                  "%s; predicted %.4g s per iteration now (%.4g s measured), %.4g s re-planned "
                  "(gain %.1f%%, %.0f%% needed; saves %.3g s over %llu steps, a move costs about "
                  "%.3g s%s)%s",
                  change, current, measured, out->new_s, 100 * out->gain, 100 * needed, saved,
                  (unsigned long long)(steps > done ? steps - done : 0), cost,
                  move_measured > 0 ? ", measured on the last move" : "",
                  dry_run ? ": dry run, nothing changed"
                  : same  ? ": the re-plan keeps the same stages"
                          : ": not worth a move");
        pthread_mutex_lock(&c->lock);
        p = coord_jobs_progress(c, job_id);
        if (p != NULL && !dry_run) {
            p->quiet_until = done + QUIET_STEPS;
            p->quiet_departure = compute_departure(p);
        }
        pthread_mutex_unlock(&c->lock);
        if (!dry_run)
            SC_LOG_INFO(LOG, "job %s: %s", job_id, out->message);
        goto out;
    }
    pthread_mutex_lock(&c->lock);
    p = coord_jobs_progress(c, job_id);
    if (p == NULL || p->finished || p->pause_step != 0) {
        pthread_mutex_unlock(&c->lock);
        rc = SC_ERRF(err, SC_ERR_PRECONDITION, "job %s stopped running while it was re-planned",
                     job_id);
        goto out;
    }
    /* the measured factors and links become the speed model the driver plans with */
    for (size_t i = 0; i < n; i++)
        if (factor[i] != 1)
            coord_speeds_set_scale(c->speeds, job_id, ids[i],
                                   coord_speeds_scale(c->speeds, job_id, ids[i]) * factor[i]);
    if (!off) {
        coord_speeds_links_adopt(c->speeds, job_id, CHANGE);
    } else { /* what the links of the off workers measured was their compute: measured anew */
        for (int s = 0; s < p->n_stages; s++)
            for (int k = 0; k < p->replicas[s]; k++)
                if (off_plan(p, s, k) > 0 && fabs(off_plan(p, s, k) - 1) > CHANGE)
                    coord_speeds_links_restart(c->speeds, job_id, p->worker_of[s][k]);
    }
    uint64_t furthest = 0;
    for (int s = 0; s < p->n_stages; s++)
        for (int k = 0; k < p->replicas[s]; k++)
            furthest = p->step[s][k] > furthest ? p->step[s][k] : furthest;
    /* Far enough ahead that no stage has started that step when the command reaches it: a
     * stage may have run on since its last report (sent at most every 50 ms) and is then held
     * in a step its paused neighbour never joins. Steps of PAUSE_LEAD_S at least, and
     * pipedream's first stage runs up to a minibatch per stage ahead of the last. */
    double iter = p->iter_avg > 0 ? p->iter_avg : p->iteration_s[p->n_stages - 1];
    uint64_t lead = iter > 0 ? (uint64_t)ceil(PAUSE_LEAD_S / iter) : 0;
    uint64_t pause_step =
        furthest + PAUSE_AHEAD + (lead < 200 ? lead : 200) + (p->async ? (uint64_t)p->n_stages : 0);
    if (pause_step >= p->steps) {
        p->pause_step = pause_step; /* too late for any move: none is evaluated again */
        pthread_mutex_unlock(&c->lock);
        p = NULL;
        sc_strfmt(out->message, sizeof out->message,
                  "the job ends before a move could take effect (step %llu of %llu)",
                  (unsigned long long)furthest, (unsigned long long)steps);
        goto out;
    }
    p->decided_s = sc_clock_now_s();
    p->plan_s = plan_s;
    double detect = p->changed_s > 0 ? p->decided_s - p->changed_s : 0;
    sc_strfmt(p->why, sizeof p->why,
              "%s%s; predicted %.4g s per iteration now (%.4g s measured), %.4g s re-planned "
              "(gain %.1f%%); detected in %.2f s, planned in %.1f ms",
              asked && !p->leaving[0] ? "rebalance asked for: " : "", change, current, measured,
              out->new_s, 100 * out->gain, detect, 1e3 * plan_s);
    coord_jobs_pause_begin(c, p, pause_step);
    if (!force)
        coord_speeds_note_move(c->speeds, job_id);
    if (freezing) { /* the driver plans the move with the new prefix */
        coord_freezing_set(c->freezing, job_id, freeze_to);
        p->freeze_to = 0;
    }
    out->started = true;
    sc_strfmt(out->message, sizeof out->message, "rebalancing after step %llu: %s",
              (unsigned long long)p->pause_step, p->why);
    SC_LOG_INFO(LOG, "job %s: %s", job_id, out->message);
    pthread_mutex_unlock(&c->lock);
out:
    free(running_plan);
    free(ids);
    free(plan_json);
    free(factor);
    coord_jobs_chosen_free(ws, n);
    coord_jobspec_clear(&spec);
    return rc;
}
