/*
 * Probing again, while a job runs, what its plan cannot see: the links of its workers under
 * suspicion (a slow link between two workers may be either one's uplink) and the workers a
 * re-plan left out or an elastic job could grow onto (they run nothing of it, so only a new
 * profile tells how fast they are now). A figure that changed by more than CHANGE replaces the
 * speed model's and marks the job for evaluation; the driver's turn for a running job
 * (coord_jobs_rebalance_tick) then evaluates it (jobs_rebalance.c).
 *
 * Calls down only: profiling and link probes (jobs_dispatch.c), the evaluation and measured
 * speeds (jobs_rebalance.c), the transitions' table (jobs_transitions.c), the speed model.
 * Network calls run without c->lock.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/planning.h"
#include "coordinator/speeds.h"

#define LOG "rebalance"
#define CHANGE COORD_REBALANCE_CHANGE

/* Under c->lock: whether free worker `w` is one job p would profile again: one it knows (left
 * out by a re-plan), or, for an elastic job below its most, any alive free worker. */
static bool candidate(coord *c, const coord_progress *p, const coord_worker *w, size_t have)
{
    if (w->job_id[0] != '\0' || w->state != COORD_WORKER_ALIVE || w->leaving ||
        w->rec.hardware_len == 0)
        return false;
    return coord_speeds_known(c->speeds, p->job_id, w->rec.id) ||
           (p->workers_max > 0 && have < p->workers_max);
}

/* Under c->lock: whether worker `w` runs job p and its link is under suspicion (speeds.h:
 * probed slower than at first, or a link from or to it adopted slower than its reference), or,
 * once per run, every link of a run whose baseline is off its prediction: a link that slowed
 * between the probes and the training looks unchanged to the transfers' figures (their
 * reference is the slow speed), and only a probe tells. */
static bool suspect(coord *c, const coord_progress *p, const coord_worker *w)
{
    return strcmp(w->job_id, p->job_id) == 0 && w->state == COORD_WORKER_ALIVE && !w->leaving &&
           ((coord_jobs_baseline_off(p) && !p->base_probed) ||
            coord_speeds_link_suspect(c->speeds, p->job_id, w->rec.id, CHANGE));
}

static bool has_candidates(coord *c, const coord_progress *p)
{
    size_t have = coord_jobs_held(c, p->job_id);
    for (size_t i = 0; i < coord_registry_count(c->registry); i++)
        if (candidate(c, p, coord_registry_at(c->registry, i), have) ||
            suspect(c, p, coord_registry_at(c->registry, i)))
            return true;
    return false;
}

/* Probes again the links of job `id`'s workers under suspicion, while they train. A slow link
 * between two workers may be either one's uplink: the probes (each worker's own path) tell
 * which, and when it is fast again, which no transfer shows once a re-plan stopped using the
 * link. A fresh probe replaces the worker's link in the model (and the measured links from and
 * to it start again); one more than CHANGE off the model's figure marks the job. Network calls
 * without the lock. */
static void probe_suspects(coord *c, const char *id)
{
    pthread_mutex_lock(&c->lock);
    coord_progress *p = coord_jobs_progress(c, id);
    size_t total = coord_registry_count(c->registry), n = 0;
    coord_chosen_worker *ws = calloc(total ? total : 1, sizeof *ws);
    double *before = calloc(total ? total : 1, sizeof *before);
    for (size_t i = 0; p != NULL && ws != NULL && before != NULL && i < total; i++) {
        const coord_worker *w = coord_registry_at(c->registry, i);
        if (!suspect(c, p, w))
            continue;
        coord_jobs_chosen_fill(&ws[n], w);
        free(coord_speeds_profile(c->speeds, id, w->rec.id, &before[n]));
        n++;
    }
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < n; i++)
        coord_jobs_probe_link(c, &ws[i]);
    pthread_mutex_lock(&c->lock);
    coord_jobs_note_probes(c, ws, n);
    p = coord_jobs_progress(c, id);
    if (p != NULL && coord_jobs_baseline_off(p))
        p->base_probed = true;
    for (size_t i = 0; p != NULL && i < n; i++) {
        double link = ws[i].link_bytes_per_s;
        if (!(link > 0))
            continue;
        coord_speeds_set_link(c->speeds, id, ws[i].id, link);
        if (before[i] > 0 && fabs(link / before[i] - 1) <= CHANGE)
            continue;
        sc_strfmt(p->reprobed, sizeof p->reprobed,
                  "worker %s ('%s') now probes its link at %.3g bytes/s (%.3g in the speed model)",
                  ws[i].id, ws[i].name, link, before[i]);
        SC_LOG_INFO(LOG, "job %s: %s", id, p->reprobed);
        if (p->pause_step == 0) {
            p->evaluate = true;
            if (p->changed_s == 0)
                p->changed_s = sc_clock_now_s();
        }
    }
    pthread_mutex_unlock(&c->lock);
    free(before);
    coord_jobs_chosen_free(ws, n);
}

bool coord_jobs_rebalance_wanted(coord *c, char *id, size_t size)
{
    double now = sc_clock_now_s();
    for (size_t i = 0; i < c->n_running; i++) {
        coord_progress *p = &c->running[i];
        if (p->finished || p->pause_step != 0)
            continue;
        if (!p->probe && p->rebalance_auto && coord_jobs_speed_known(p, 0, 0) &&
            now - p->probed_s >= c->cfg.reprofile_ms / 1000.0 && has_candidates(c, p)) {
            p->probe = true;
            p->probed_s = now;
        }
        if (p->evaluate || p->probe) {
            sc_strlcpy(id, p->job_id, size);
            return true;
        }
    }
    return false;
}

/* Profiles again the workers job `id` knows but a re-plan left out (they run nothing, so only
 * a new profile tells how fast they are now) and probes their links again; a speed or a link
 * that changed by more than CHANGE replaces the model's and marks the job for evaluation. Network
 * calls: takes the lock only to read and write the registry, the store and the speed model. */
static void probe_left_out(coord *c, const char *id)
{
    pthread_mutex_lock(&c->lock);
    coord_progress *p = coord_jobs_progress(c, id);
    if (p != NULL)
        p->probe = false;
    size_t total = coord_registry_count(c->registry), n = 0;
    coord_chosen_worker *ws = calloc(total ? total : 1, sizeof *ws);
    double *before = calloc(total ? total : 1, sizeof *before);
    double *link_before = calloc(total ? total : 1, sizeof *link_before);
    coord_job job;
    char *spec_json = NULL;
    if (p != NULL && ws != NULL && before != NULL && link_before != NULL &&
        coord_store_job_get(c->store, id, &job, NULL) == SC_OK) {
        spec_json = job.spec_json;
        job.spec_json = NULL;
        coord_job_clear(&job);
        size_t have = coord_jobs_held(c, p->job_id);
        for (size_t i = 0; i < total; i++) {
            const coord_worker *w = coord_registry_at(c->registry, i);
            if (!candidate(c, p, w, have + n))
                continue;
            coord_chosen_worker *cw = &ws[n];
            coord_jobs_chosen_fill(cw, w);
            char *known = coord_speeds_profile(c->speeds, id, w->rec.id, &link_before[n]);
            cw->link_bytes_per_s = 0; /* probed again: a link that changed shows too */
            before[n] = known != NULL ? coord_profile_total_s(known) : 0;
            free(known);
            n++;
        }
    }
    pthread_mutex_unlock(&c->lock);
    coord_jobspec spec;
    memset(&spec, 0, sizeof spec);
    sc_err err;
    sc_err_clear(&err);
    if (n > 0 && spec_json != NULL &&
        coord_jobspec_parse(id, spec_json, strlen(spec_json), &spec, &err) == SC_OK &&
        coord_jobs_profile_all(c, &spec, id, ws, n, &err) == SC_OK) {
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < n; i++) {
            double now = coord_profile_total_s(ws[i].profile_json);
            bool joined = before[i] <= 0; /* new to the job: an elastic job may grow onto it */
            /* a link the model has (probed, times what training measured on it) against the
             * probe now: a link cut while the worker ran, restored since it was left out */
            double link = ws[i].link_bytes_per_s;
            bool link_moved =
                link > 0 && link_before[i] > 0 && fabs(link / link_before[i] - 1) > CHANGE;
            if (now <= 0 || (!joined && fabs(now / before[i] - 1) <= CHANGE && !link_moved))
                continue;
            const char *ids[1] = {ws[i].id}, *profiles[1] = {ws[i].profile_json};
            double links[1] = {link > 0 ? link : link_before[i]};
            coord_speeds_keep(&c->speeds, id, ids, profiles, links, 1);
            p = coord_jobs_progress(c, id);
            char what[COORD_REASON_MAX] = "";
            if (link_moved && fabs(now / before[i] - 1) <= CHANGE)
                sc_strfmt(what, sizeof what,
                          "worker %s ('%s'), left out of the plan, now probes its link at %.3g "
                          "bytes/s (%.3g in the speed model)",
                          ws[i].id, ws[i].name, link, link_before[i]);
            else if (!joined)
                sc_strfmt(what, sizeof what,
                          "worker %s ('%s'), left out of the plan, now profiles at %.2fx the "
                          "time it was planned with",
                          ws[i].id, ws[i].name, now / before[i]);
            if (p != NULL && what[0])
                sc_strlcpy(p->reprobed, what, sizeof p->reprobed);
            if (what[0])
                SC_LOG_INFO(LOG, "job %s: %s", id, what);
            else if (joined)
                SC_LOG_INFO(LOG, "job %s: worker %s ('%s') is free; profiled to grow onto it", id,
                            ws[i].id, ws[i].name);
            if (p != NULL && p->pause_step == 0) {
                p->evaluate = true;
                if (p->changed_s == 0)
                    p->changed_s = sc_clock_now_s();
            }
        }
        pthread_mutex_unlock(&c->lock);
    } else if (n > 0 && err.msg[0]) {
        SC_LOG_INFO(LOG, "job %s: profiling the workers its plan left out failed: %s", id, err.msg);
    }
    coord_jobspec_clear(&spec);
    free(spec_json);
    free(before);
    free(link_before);
    coord_jobs_chosen_free(ws, n);
}

void coord_jobs_rebalance_tick(coord *c, const char *id)
{
    pthread_mutex_lock(&c->lock);
    coord_progress *p = coord_jobs_progress(c, id);
    bool probe = p != NULL && p->probe;
    pthread_mutex_unlock(&c->lock);
    if (probe) {
        probe_suspects(c, id); /* first: the left-out workers' figures are read after it */
        probe_left_out(c, id);
    }
    pthread_mutex_lock(&c->lock);
    p = coord_jobs_progress(c, id);
    bool evaluate = p != NULL && p->evaluate, leaving = p != NULL && p->leaving[0];
    pthread_mutex_unlock(&c->lock);
    if (!evaluate)
        return;
    coord_rebalance_result res;
    sc_err err;
    sc_err_clear(&err);
    if (coord_jobs_rebalance(c, id, leaving, false, &res, &err) != SC_OK)
        SC_LOG_INFO(LOG, "job %s: no rebalance: %s", id, err.msg);
    free(res.plan_json);
}
