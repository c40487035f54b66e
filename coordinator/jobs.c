/*
 * The job driver: takes each job from submitted (or recovering) through profiling to planned,
 * and assigns the planned stages to the workers.
 *
 * It holds c->lock only to read and write the registry and the store, never during a network
 * call: a worker that stops answering mid-profile costs one call's deadline, after which the
 * job goes back to submitted with the reason recorded and is retried with the workers then
 * alive, up to MAX_PROFILE_FAILURES failed rounds in a row; a model that does not fit fails at
 * once. Waiting jobs are retried when a worker registers or after a backoff.
 *
 * Each job is driven on a thread of its own (at most COORD_MAX_DRIVING at once, one per job),
 * so that one job's silent worker does not hold up the jobs of other workers for that
 * deadline. Jobs do not compete for workers: choose_workers reserves them under c->lock, and in
 * submission order: a job leaves alone the workers that an older job waiting for workers would
 * take now (an older job that the free workers cannot satisfy holds up no one), so which job
 * gets contended workers does not depend on which thread comes first.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobspec.h"
#include "coordinator/planning.h"
#include "coordinator/transport_pick.h"
#include "proto/sc_wire.h"

#define LOG "jobs"
#define RETRY_MS 2000
#define MAX_RETRY_ENTRIES 256
#define ASSIGN_TIMEOUT_MS 10000
/* Failed profiling rounds in a row after which a job fails instead of being retried: a failure
 * that repeats this often is the job's own (a model a worker cannot build or run). */
#define MAX_PROFILE_FAILURES 5

/* Driver-local: when each waiting job may be tried again, and how many of its profiling rounds
 * in a row failed. */
typedef struct {
    char job_id[COORD_ID_MAX];
    uint64_t not_before_ns;
    unsigned profile_failures;
} retry_entry;

/* Shared by the driver threads: every retry_* function takes `lock` (a leaf lock: nothing else
 * is taken while it is held). */
typedef struct {
    pthread_mutex_t lock;
    retry_entry e[MAX_RETRY_ENTRIES];
    size_t n;
} retry_table;

static retry_entry *retry_find(retry_table *t, const char *id)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->e[i].job_id, id) == 0)
            return &t->e[i];
    return NULL;
}

static uint64_t retry_time(retry_table *t, const char *id)
{
    pthread_mutex_lock(&t->lock);
    const retry_entry *e = retry_find(t, id);
    uint64_t at = e != NULL ? e->not_before_ns : 0;
    pthread_mutex_unlock(&t->lock);
    return at;
}

/* The entry of `id`, made when missing. A full table forgets the entry due soonest among those
 * without failures (at worst that job is retried early), else the one due soonest. */
static retry_entry *retry_entry_of(retry_table *t, const char *id)
{
    retry_entry *e = retry_find(t, id);
    if (e != NULL)
        return e;
    if (t->n == MAX_RETRY_ENTRIES) {
        size_t victim = 0;
        for (size_t i = 1; i < t->n; i++) {
            const retry_entry *a = &t->e[i], *b = &t->e[victim];
            bool a_clean = a->profile_failures == 0, b_clean = b->profile_failures == 0;
            if (a_clean != b_clean ? a_clean : a->not_before_ns < b->not_before_ns)
                victim = i;
        }
        t->e[victim] = t->e[--t->n];
    }
    e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    sc_strlcpy(e->job_id, id, sizeof e->job_id);
    return e;
}

static void retry_later(retry_table *t, const char *id, uint64_t delay_ms)
{
    pthread_mutex_lock(&t->lock);
    retry_entry_of(t, id)->not_before_ns = sc_clock_now_ns() + delay_ms * 1000000ull;
    pthread_mutex_unlock(&t->lock);
}

/* Counts a failed profiling round of `id`; returns how many failed in a row. */
static unsigned retry_profile_failed(retry_table *t, const char *id)
{
    pthread_mutex_lock(&t->lock);
    unsigned n = ++retry_entry_of(t, id)->profile_failures;
    pthread_mutex_unlock(&t->lock);
    return n;
}

static void retry_profile_ok(retry_table *t, const char *id)
{
    pthread_mutex_lock(&t->lock);
    retry_entry *e = retry_find(t, id);
    if (e != NULL)
        e->profile_failures = 0;
    pthread_mutex_unlock(&t->lock);
}

static void progress_drop(coord *c, const char *job_id);

void coord_jobs_release_workers(coord *c, const char *job_id)
{
    /* A job that ended well keeps its last figures for `status`; any other stop drops them. */
    coord_progress *p = coord_jobs_progress(c, job_id);
    if (p != NULL && !p->finished)
        progress_drop(c, job_id);
    for (size_t i = 0; i < coord_registry_count(c->registry); i++) {
        coord_worker *w = coord_registry_at(c->registry, i);
        if (strcmp(w->job_id, job_id) == 0)
            w->job_id[0] = '\0';
    }
}

/* Under c->lock: worker `w` no longer serves its job (`why`): a job being profiled goes back to
 * submitted, any other is re-planned (recovering). */
static void worker_lost(coord *c, const coord_worker *w, const char *why)
{
    if (w->job_id[0] == '\0')
        return;
    char job_id[COORD_ID_MAX];
    sc_strlcpy(job_id, w->job_id, sizeof job_id);
    coord_job job;
    sc_err err;
    sc_err_clear(&err);
    if (coord_store_job_get(c->store, job_id, &job, &err) != SC_OK)
        return;
    coord_job_state to =
        job.state == COORD_JOB_PROFILING ? COORD_JOB_SUBMITTED : COORD_JOB_RECOVERING;
    coord_job_clear(&job);
    char reason[COORD_REASON_MAX];
    sc_strfmt(reason, sizeof reason, "worker %s ('%s') %s", w->rec.id, w->rec.name, why);
    if (coord_store_job_transition(c->store, job_id, to, reason, &err) == SC_OK) {
        SC_LOG_WARN(LOG, "job %s is %s: %s", job_id, coord_job_state_name(to), reason);
        coord_jobs_release_workers(c, job_id);
        pthread_cond_broadcast(&c->wake);
    }
}

void coord_jobs_worker_died(coord *c, const coord_worker *w)
{
    char why[96];
    sc_strfmt(why, sizeof why, "died: no heartbeat for %u intervals",
              coord_registry_config(c->registry)->dead_after);
    worker_lost(c, w, why);
}

/* Under c->lock: whether job `id` has ended (succeeded, failed, cancelled or unknown). */
static bool job_ended(coord *c, const char *id)
{
    coord_job job;
    if (coord_store_job_get(c->store, id, &job, NULL) != SC_OK)
        return true;
    bool ended = coord_job_state_terminal(job.state);
    coord_job_clear(&job);
    return ended;
}

void coord_jobs_heartbeat(coord *c, coord_worker *w, const char *said_state, const char *said_job,
                          uint64_t now_ns)
{
    coord_progress *p = w->job_id[0] ? coord_jobs_progress(c, w->job_id) : NULL;
    bool runs = p != NULL && !p->finished;
    enum { AGREE, NO_STAGE, NOT_STARTED, ENDED_STAGE } what = AGREE;
    if (runs && strcmp(said_job, w->job_id) != 0)
        what = NO_STAGE;
    else if (runs && strcmp(said_state, "assigned") == 0)
        what = NOT_STARTED;
    else if (said_job[0] && strcmp(said_job, w->job_id) != 0)
        what = ENDED_STAGE; /* checked against the store below, once the grace has passed */
    if (what == AGREE) {
        w->disagree_since_ns = 0;
        return;
    }
    uint64_t interval_ns = coord_registry_config(c->registry)->heartbeat_interval_ms * 1000000ull;
    uint64_t grace_ns = 3 * interval_ns < 1000000000ull ? 1000000000ull : 3 * interval_ns;
    if (w->disagree_since_ns == 0)
        w->disagree_since_ns = now_ns;
    if (now_ns - w->disagree_since_ns < grace_ns ||
        (w->repaired_ns != 0 && now_ns - w->repaired_ns < grace_ns))
        return;
    w->repaired_ns = now_ns;
    switch (what) {
    case NO_STAGE: {
        char why[COORD_REASON_MAX], holds[COORD_ID_MAX + 32] = "no stage";
        if (said_job[0])
            sc_strfmt(holds, sizeof holds, "a stage of job %s", said_job);
        sc_strfmt(
            why, sizeof why,
            "no longer holds its stage of the job (it restarted or dropped it; it reports %s)",
            holds);
        worker_lost(c, w, why);
        break;
    }
    case NOT_STARTED:
        SC_LOG_WARN(LOG, "job %s: worker %s ('%s') has not started its stage; sending START again",
                    w->job_id, w->rec.id, w->rec.name);
        coord_queue_command_locked(c, w->rec.id, STAGECRAFT__COMMAND_KIND__COMMAND_START, w->job_id,
                                   p->resume_step, p->start_payload, NULL);
        break;
    case ENDED_STAGE:
        /* a job that is only re-planned gets its stages replaced by the next assignment: a STOP
         * racing that assignment could drop the new stage, so only ended jobs are stopped */
        if (job_ended(c, said_job)) {
            SC_LOG_WARN(LOG,
                        "worker %s ('%s') still runs a stage of job %s, which has ended; "
                        "sending STOP again",
                        w->rec.id, w->rec.name, said_job);
            coord_queue_command_locked(c, w->rec.id, STAGECRAFT__COMMAND_KIND__COMMAND_STOP,
                                       said_job, 0, NULL, NULL);
        }
        break;
    case AGREE:
        break;
    }
}

void coord_jobs_worker_error(coord *c, const coord_worker *w, const Stagecraft__Error *e)
{
    char job_id[COORD_ID_MAX];
    sc_strlcpy(job_id, w->job_id, sizeof job_id);
    bool transient = strcmp(e->code, "SC_ERR_TIMEOUT") == 0 ||
                     strcmp(e->code, "SC_ERR_UNAVAILABLE") == 0 ||
                     strcmp(e->code, "SC_ERR_CANCELLED") == 0;
    coord_job_state to = transient ? COORD_JOB_RECOVERING : COORD_JOB_FAILED;
    char reason[COORD_REASON_MAX];
    sc_strfmt(reason, sizeof reason, "worker %s ('%s'): %s", w->rec.id, w->rec.name, e->message);
    sc_err err;
    sc_err_clear(&err);
    /* The checkpoint to resume from does not load on this stage (corrupt, truncated, gone), but
     * an older one does: resume every stage from that step. A stage that cannot load it either
     * names an older one in turn, so the step only goes down, to the newest one every stage
     * loads; none at all fails the job. */
    coord_job job;
    if (e->checkpoint_step > 0 && coord_store_job_get(c->store, job_id, &job, &err) == SC_OK) {
        uint64_t step = job.step, intact = e->intact_checkpoint_step;
        coord_job_clear(&job);
        if (intact > 0 && intact < e->checkpoint_step) {
            to = COORD_JOB_RECOVERING;
            sc_strfmt(reason, sizeof reason,
                      "resuming from the checkpoint of step %llu instead of step %llu, which "
                      "does not load on worker %s ('%s'): %s",
                      (unsigned long long)intact, (unsigned long long)e->checkpoint_step, w->rec.id,
                      w->rec.name, e->message);
            if (coord_store_job_set_progress(c->store, job_id, step, intact, &err) != SC_OK)
                to = COORD_JOB_FAILED; /* resuming from the same step would fail again */
        } else {
            sc_strfmt(reason, sizeof reason,
                      "no intact checkpoint to resume from: worker %s ('%s'): %s", w->rec.id,
                      w->rec.name, e->message);
        }
    }
    sc_err_clear(&err);
    if (coord_store_job_transition(c->store, job_id, to, reason, &err) == SC_OK) {
        SC_LOG_WARN(LOG, "job %s is %s: %s", job_id, coord_job_state_name(to), reason);
        coord_jobs_release_workers(c, job_id);
        pthread_cond_broadcast(&c->wake);
    }
}

/* A worker chosen for a job, copied out of the registry so the lock can be dropped. */
typedef struct {
    char id[COORD_ID_MAX];
    char name[COORD_NAME_MAX];
    char endpoint[COORD_NAME_MAX];
    Stagecraft__HardwareReport *hw;
    char *profile_json;
} chosen_worker;

static void chosen_free(chosen_worker *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (w[i].hw)
            stagecraft__hardware_report__free_unpacked(w[i].hw, NULL);
        free(w[i].profile_json);
    }
    free(w);
}

static bool wanted(const coord_jobspec *spec, const coord_worker *w)
{
    if (spec->worker_names == NULL)
        return true;
    for (char **p = spec->worker_names; *p; p++)
        if (strcmp(*p, w->rec.name) == 0)
            return true;
    return false;
}

/* Under c->lock: whether registry worker `w` could serve a job wanting `spec`: alive, wanted
 * (by name, when the job names its workers), with a hardware report that has devices. Who
 * holds it is the caller's check. */
static bool usable(const coord_jobspec *spec, const coord_worker *w)
{
    if (w->state != COORD_WORKER_ALIVE || !wanted(spec, w) || w->rec.hardware_len == 0)
        return false;
    Stagecraft__HardwareReport *hw =
        stagecraft__hardware_report__unpack(NULL, w->rec.hardware_len, w->rec.hardware);
    bool ok = hw != NULL && hw->n_devices > 0;
    if (hw)
        stagecraft__hardware_report__free_unpacked(hw, NULL);
    return ok;
}

/* Under c->lock: the registry indices (into idx, at most spec->workers) of the first workers
 * job `job_id` could take: usable, free or already its own, and not `taken` (NULL: none is).
 * Returns how many. */
static size_t pick_workers(coord *c, const char *job_id, const coord_jobspec *spec,
                           const bool *taken, size_t *idx)
{
    size_t have = 0, total = coord_registry_count(c->registry);
    for (size_t i = 0; i < total && have < spec->workers; i++) {
        const coord_worker *w = coord_registry_at(c->registry, i);
        if ((taken == NULL || !taken[i]) && (!w->job_id[0] || strcmp(w->job_id, job_id) == 0) &&
            usable(spec, w))
            idx[have++] = i;
    }
    return have;
}

/* Under c->lock: whether job `job_id` holds any worker. */
static bool holds_workers(coord *c, const char *job_id)
{
    size_t total = coord_registry_count(c->registry);
    for (size_t i = 0; i < total; i++)
        if (strcmp(coord_registry_at(c->registry, i)->job_id, job_id) == 0)
            return true;
    return false;
}

/* Under c->lock: jobs take workers in submission order. Goes through the jobs submitted before
 * `job_id` that wait for workers (submitted or recovering, holding none) and marks in `taken`
 * (one per registry worker) those that each would take, in that order, when the workers free
 * now and not taken by an earlier one satisfy it; a job they do not satisfy takes nothing, so
 * it holds up no later job. `first` gets the first such job that takes a worker `spec` could
 * use ("" when none). */
static void taken_by_older(coord *c, const char *job_id, const coord_jobspec *spec, bool *taken,
                           char *first, size_t first_size)
{
    first[0] = '\0';
    coord_job *jobs;
    size_t n;
    if (coord_store_job_list(c->store, &jobs, &n, NULL) != SC_OK)
        return;
    size_t *idx = NULL, idx_cap = 0;
    for (size_t j = 0; j < n && strcmp(jobs[j].id, job_id) != 0; j++) {
        if ((jobs[j].state != COORD_JOB_SUBMITTED && jobs[j].state != COORD_JOB_RECOVERING) ||
            jobs[j].spec_json == NULL || holds_workers(c, jobs[j].id))
            continue;
        coord_jobspec older;
        if (coord_jobspec_parse(jobs[j].id, jobs[j].spec_json, strlen(jobs[j].spec_json), &older,
                                NULL) != SC_OK)
            continue; /* its driver fails it */
        if (older.workers > idx_cap) {
            size_t *grown = realloc(idx, older.workers * sizeof *idx);
            if (grown == NULL) {
                coord_jobspec_clear(&older);
                continue;
            }
            idx = grown;
            idx_cap = older.workers;
        }
        if (older.workers > 0 && pick_workers(c, jobs[j].id, &older, taken, idx) == older.workers) {
            for (size_t k = 0; k < older.workers; k++) {
                taken[idx[k]] = true;
                if (!first[0] && usable(spec, coord_registry_at(c->registry, idx[k])))
                    sc_strlcpy(first, jobs[j].id, first_size);
            }
        }
        coord_jobspec_clear(&older);
    }
    free(idx);
    coord_job_list_free(&jobs, n);
}

/* Under c->lock: picks spec->workers alive, free workers, marks them as the job's. Workers that
 * an older job waiting for them would take now are left to it (taken_by_older): the job then
 * waits as it does for workers that are not there. */
static sc_status choose_workers(coord *c, const char *job_id, const coord_jobspec *spec,
                                chosen_worker **out, sc_err *err)
{
    size_t want = spec->workers, total = coord_registry_count(c->registry);
    chosen_worker *list = calloc(want, sizeof *list);
    size_t *idx = calloc(want, sizeof *idx);
    bool *taken = calloc(total + 1, sizeof *taken);
    if (list == NULL || idx == NULL || taken == NULL) {
        free(list);
        free(idx);
        free(taken);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory choosing workers");
    }
    char older[COORD_ID_MAX];
    taken_by_older(c, job_id, spec, taken, older, sizeof older);
    size_t have = pick_workers(c, job_id, spec, taken, idx);
    free(taken);
    if (have < want) {
        size_t free_now = pick_workers(c, job_id, spec, NULL, idx);
        free(idx);
        free(list);
        if (free_now >= want && older[0])
            return SC_ERRF(err, SC_ERR_UNAVAILABLE,
                           "waiting: %s, submitted earlier, takes these workers first", older);
        return SC_ERRF(err, SC_ERR_UNAVAILABLE, "waiting for %zu %sworker(s): %zu alive and free",
                       want, spec->worker_names ? "named " : "", free_now);
    }
    for (size_t i = 0; i < have; i++) {
        coord_worker *w = coord_registry_at(c->registry, idx[i]);
        chosen_worker *cw = &list[i];
        cw->hw = stagecraft__hardware_report__unpack(NULL, w->rec.hardware_len, w->rec.hardware);
        if (cw->hw == NULL) {
            chosen_free(list, i);
            free(idx);
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading worker %s's hardware",
                           w->rec.id);
        }
        sc_strlcpy(cw->id, w->rec.id, sizeof cw->id);
        sc_strlcpy(cw->name, w->rec.name, sizeof cw->name);
        sc_strlcpy(cw->endpoint, w->rec.endpoint, sizeof cw->endpoint);
    }
    for (size_t i = 0; i < have; i++)
        sc_strlcpy(coord_registry_at(c->registry, idx[i])->job_id, job_id, COORD_ID_MAX);
    free(idx);
    *out = list;
    return SC_OK;
}

/* Micro-batch sizes to profile: the planned size when the count is fixed (the spec keeps it
 * within SC_WIRE_MAX_MICROBATCH_SIZE), else powers of two up to the batch and that limit (at
 * most 4, the largest; the planner extends the times past the largest). */
static size_t profile_sizes(const coord_jobspec *spec, uint32_t *sizes)
{
    if (spec->microbatches > 0) {
        sizes[0] = spec->batch_size / spec->microbatches;
        return 1;
    }
    uint32_t all[32];
    size_t n = 0;
    for (uint32_t s = 1; s <= spec->batch_size && s <= SC_WIRE_MAX_MICROBATCH_SIZE && n < 32;
         s *= 2)
        all[n++] = s;
    size_t first = n > 4 ? n - 4 : 0;
    for (size_t i = first; i < n; i++)
        sizes[i - first] = all[i];
    return n - first;
}

/* Reorders workers so those of one host are adjacent (first-appearance order), as the cluster
 * format numbers devices server by server. */
static void group_by_host(chosen_worker *ws, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t at = i + 1;
        for (size_t j = i + 1; j < n; j++) {
            if (strcmp(ws[j].hw->hostname, ws[i].hw->hostname) == 0) {
                chosen_worker t = ws[j];
                memmove(&ws[at + 1], &ws[at], (j - at) * sizeof *ws);
                ws[at++] = t;
            }
        }
        i = at - 1;
    }
}

/* One call to a worker's service, with the coordinator's TLS settings (its certificate is
 * presented to workers that require one; its CA verifies them). */
static sc_status call_worker(const coord *c, chosen_worker *w, const char *method,
                             const ProtobufCMessage *req,
                             const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                             int64_t timeout_ms, sc_err *err)
{
    sc_rpc_client *cli = NULL;
    sc_rpc_client_cfg cfg = {.tls = c->cfg.tls};
    SC_CHECK(sc_rpc_client_new(&cli, w->endpoint, &cfg, err));
    sc_status rc = sc_rpc_call(cli, method, req, resp_desc, resp, timeout_ms, err);
    sc_rpc_client_destroy(&cli);
    return rc;
}

static sc_status profile_all(coord *c, const coord_jobspec *spec, const char *job_id,
                             chosen_worker *ws, size_t n, sc_err *err)
{
    uint32_t sizes[4];
    Stagecraft__ProfileRequest req = STAGECRAFT__PROFILE_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.model_json = spec->model_json;
    req.microbatch_sizes = sizes;
    req.n_microbatch_sizes = profile_sizes(spec, sizes);
    /* Workers with the same device type measure the same thing: profile each type once. */
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++) {
            if (strcmp(ws[i].hw->devices[0]->name, ws[j].hw->devices[0]->name) == 0 &&
                ws[j].profile_json) {
                ws[i].profile_json = strdup(ws[j].profile_json);
                SC_ALLOC_CHECK(ws[i].profile_json, err);
                break;
            }
        }
        if (ws[i].profile_json)
            continue;
        ProtobufCMessage *m = NULL;
        sc_status rc = call_worker(c, &ws[i], "/stagecraft.Worker/Profile", &req.base,
                                   &stagecraft__profile_response__descriptor, &m,
                                   c->cfg.profile_timeout_ms, err);
        if (rc != SC_OK) {
            sc_err_prefix(err, "worker %s ('%s') did not profile", ws[i].id, ws[i].name);
            return rc;
        }
        ws[i].profile_json = strdup(((Stagecraft__ProfileResponse *)m)->profile_json);
        protobuf_c_message_free_unpacked(m, NULL);
        SC_ALLOC_CHECK(ws[i].profile_json, err);
    }
    return SC_OK;
}

/* Where device `d` of the plan runs, from its worker's hardware report (none: a CPU site). */
static coord_stage_site site_of(const chosen_worker *ws, size_t n, json_int_t d, int replicas)
{
    coord_stage_site site = {.host = "", .pci_bus_id = "", .replicas = replicas};
    if (d < 0 || (size_t)d >= n || ws[d].hw == NULL || ws[d].hw->n_devices == 0)
        return site;
    const Stagecraft__HardwareReport *hw = ws[d].hw;
    const Stagecraft__Device *dev = hw->devices[0];
    site.host = hw->hostname != NULL ? hw->hostname : "";
    site.cuda = dev->kind != NULL && strcmp(dev->kind, "cuda") == 0;
    site.device = (int)dev->index;
    site.pci_bus_id = dev->pci_bus_id != NULL ? dev->pci_bus_id : "";
    site.nccl = hw->nccl;
    return site;
}

/* The transport of each stage boundary (transport_pick.h) from the spec and the hardware of
 * the workers on each stage (a replicated stage's first copy stands for it: replicas keep zmq
 * anyway). kinds: [stages - 1]. */
static sc_status pick_transports(const coord_jobspec *spec, json_t *stages, const chosen_worker *ws,
                                 size_t n, const char **kinds, sc_err *err)
{
    size_t ns = json_array_size(stages);
    coord_stage_site *sites = calloc(ns ? ns : 1, sizeof *sites);
    SC_ALLOC_CHECK(sites, err);
    for (size_t s = 0; s < ns; s++) {
        json_t *devs = json_object_get(json_array_get(stages, s), "devices");
        sites[s] =
            site_of(ws, n, json_integer_value(json_array_get(devs, 0)), (int)json_array_size(devs));
    }
    const char *pref = spec->transport[0] ? spec->transport : "auto";
    sc_status rc = coord_transport_pick(pref, sites, ns, kinds, err);
    free(sites);
    if (rc == SC_OK && ns > 1) {
        char list[256] = "";
        size_t at = 0;
        for (size_t b = 0; b + 1 < ns && at + 8 < sizeof list; b++)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", b ? " " : "", kinds[b]);
        SC_LOG_INFO(LOG, "data plane per stage boundary: %s (transport \"%s\" in the job spec)",
                    list, pref);
    }
    return rc;
}

/* Records in the plan its "replica_reduce": per stage, how its copies all-reduce their
 * gradients, "nccl" (coord_replicas_nccl_ok, unless the spec's transport is "zmq"), "host", or
 * "none" for a stage of one copy. */
static sc_status add_replica_reduce(const coord_jobspec *spec, json_t *stages,
                                    const chosen_worker *ws, size_t n, json_t *plan, sc_err *err)
{
    bool never = strcmp(spec->transport, "zmq") == 0;
    json_t *arr = json_array();
    SC_ALLOC_CHECK(arr, err);
    size_t si;
    json_t *stage;
    json_array_foreach(stages, si, stage)
    {
        json_t *devs = json_object_get(stage, "devices");
        size_t r = json_array_size(devs);
        const char *how = r < 2 ? "none" : "host";
        if (r >= 2 && !never) {
            coord_stage_site *copies = calloc(r, sizeof *copies);
            if (copies == NULL) {
                json_decref(arr);
                return SC_ERRF(err, SC_ERR_NOMEM, "out of memory choosing the all-reduce");
            }
            for (size_t k = 0; k < r; k++)
                copies[k] = site_of(ws, n, json_integer_value(json_array_get(devs, k)), (int)r);
            char why[128];
            if (coord_replicas_nccl_ok(copies, r, why, sizeof why))
                how = "nccl";
            else
                SC_LOG_INFO(LOG, "stage %zu: its %zu copies all-reduce in host memory (%s)", si, r,
                            why);
            free(copies);
        }
        json_array_append_new(arr, json_string(how));
    }
    json_object_set_new(plan, "replica_reduce", arr);
    return SC_OK;
}

/* Records in the plan (its "transports": one kind per stage boundary, "zmq" or "nccl") which
 * data plane each boundary uses, chosen from the spec and the workers' hardware, so that status
 * shows it and every worker is assigned by the same choice. Replaces *plan_json. */
static sc_status add_transports(const coord_jobspec *spec, const chosen_worker *ws, size_t n,
                                char **plan_json, sc_err *err)
{
    json_t *plan = json_loads(*plan_json, 0, NULL);
    if (!json_is_object(plan)) {
        json_decref(plan);
        return SC_ERRF(err, SC_ERR_INTERNAL, "the planner's JSON does not parse");
    }
    json_t *stages = json_object_get(plan, "stages");
    size_t ns = json_array_size(stages);
    const char **kinds = calloc(ns ? ns : 1, sizeof *kinds);
    sc_status rc = kinds == NULL ? SC_ERRF(err, SC_ERR_NOMEM, "out of memory choosing transports")
                                 : pick_transports(spec, stages, ws, n, kinds, err);
    if (rc == SC_OK)
        rc = add_replica_reduce(spec, stages, ws, n, plan, err);
    if (rc == SC_OK) {
        json_t *arr = json_array();
        for (size_t b = 0; b + 1 < ns; b++)
            json_array_append_new(arr, json_string(kinds[b]));
        json_object_set_new(plan, "transports", arr);
        char *text = json_dumps(plan, JSON_COMPACT);
        if (text == NULL) {
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the plan");
        } else {
            free(*plan_json);
            *plan_json = text;
        }
    }
    free(kinds);
    json_decref(plan);
    return rc;
}

/* Sends each worker its stage of the plan; `endpoints` (a JSON array, filled) gets, per stage,
 * the array of its replicas' data endpoints in replica order. */
static sc_status assign_all(const coord *c, const coord_jobspec *spec, const char *spec_json,
                            const char *job_id, const char *plan_json, uint64_t resume_step,
                            chosen_worker *ws, size_t n, json_t *endpoints, sc_err *err)
{
    json_error_t jerr;
    json_t *plan = json_loads(plan_json, 0, &jerr);
    json_t *stages = plan ? json_object_get(plan, "stages") : NULL;
    if (!json_is_array(stages)) {
        json_decref(plan);
        return SC_ERRF(err, SC_ERR_INTERNAL, "the plan has no stages array");
    }
    sc_status rc = SC_OK;
    size_t n_stages = json_array_size(stages);
    const char **kinds = calloc(n_stages ? n_stages : 1, sizeof *kinds);
    if (kinds == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory choosing the transports");
        goto out;
    }
    /* the kinds the driver recorded in the plan when it was made (add_transports) */
    json_t *recorded = json_object_get(plan, "transports");
    if (n_stages > 1 && json_array_size(recorded) + 1 != n_stages) {
        rc = SC_ERRF(err, SC_ERR_INTERNAL, "the plan records %zu transports for %zu stages",
                     json_array_size(recorded), n_stages);
        goto out;
    }
    for (size_t b = 0; b + 1 < n_stages; b++) {
        const char *k = json_string_value(json_array_get(recorded, b));
        kinds[b] = k != NULL && strcmp(k, "nccl") == 0 ? "nccl" : "zmq";
    }
    size_t si;
    json_t *stage;
    json_array_foreach(stages, si, stage)
    {
        json_t *devs = json_object_get(stage, "devices");
        size_t di;
        json_t *dev;
        json_array_foreach(devs, di, dev)
        {
            json_int_t d = json_integer_value(dev);
            if (d < 0 || (size_t)d >= n) {
                rc = SC_ERRF(err, SC_ERR_INTERNAL, "the plan names device %lld of %zu",
                             (long long)d, n);
                goto out;
            }
            Stagecraft__AssignStageRequest req = STAGECRAFT__ASSIGN_STAGE_REQUEST__INIT;
            req.job_id = (char *)job_id;
            req.stage = (uint32_t)si;
            req.replica = (uint32_t)di;
            req.first_block = (uint32_t)json_integer_value(json_object_get(stage, "first_block"));
            req.last_block = (uint32_t)json_integer_value(json_object_get(stage, "last_block"));
            req.model_json = spec->model_json;
            req.plan_json = (char *)plan_json;
            const char *tr = "zmq", *tr_next = "";
            coord_transport_of_stage(kinds, n_stages, si, &tr, &tr_next);
            req.transport = (char *)tr;
            req.transport_next = (char *)tr_next;
            const char *red =
                json_string_value(json_array_get(json_object_get(plan, "replica_reduce"), si));
            req.replica_reduce = red != NULL && strcmp(red, "nccl") == 0 ? "nccl" : "host";
            req.world_size = (uint32_t)n;
            req.rank = (uint32_t)d;
            req.job_json = (char *)spec_json;
            req.n_stages = (uint32_t)json_array_size(stages);
            req.resume_step = resume_step;
            ProtobufCMessage *m = NULL;
            rc = call_worker(c, &ws[d], "/stagecraft.Worker/AssignStage", &req.base,
                             &stagecraft__assign_stage_response__descriptor, &m, ASSIGN_TIMEOUT_MS,
                             err);
            if (rc != SC_OK) {
                sc_err_prefix(err, "assigning stage %zu to worker %s", si, ws[d].id);
                goto out;
            }
            if (di == 0)
                json_array_append_new(endpoints, json_array());
            const char *ep = ((Stagecraft__AssignStageResponse *)m)->data_endpoint;
            json_array_append_new(json_array_get(endpoints, si), json_string(ep ? ep : ""));
            protobuf_c_message_free_unpacked(m, NULL);
        }
    }
out:
    free(kinds);
    json_decref(plan);
    return rc;
}

/* Under c->lock: forgets entry i of c->running. */
static void progress_remove(coord *c, size_t i)
{
    free(c->running[i].start_payload);
    c->running[i] = c->running[--c->n_running];
}

static void progress_drop(coord *c, const char *job_id)
{
    for (size_t i = 0; i < c->n_running; i++) {
        if (strcmp(c->running[i].job_id, job_id) == 0) {
            progress_remove(c, i);
            return;
        }
    }
}

void coord_jobs_progress_clear(coord *c)
{
    while (c->n_running > 0)
        progress_remove(c, c->n_running - 1);
}

bool coord_jobs_run_is_current(coord *c, const char *job_id, uint64_t run)
{
    if (run == 0)
        return true;
    const coord_progress *p = coord_jobs_progress(c, job_id);
    return p != NULL && !p->finished && p->run == run;
}

coord_progress *coord_jobs_progress(coord *c, const char *job_id)
{
    for (size_t i = 0; i < c->n_running; i++)
        if (strcmp(c->running[i].job_id, job_id) == 0)
            return &c->running[i];
    return NULL;
}

/* Marks in used[n] the chosen workers that the plan's stages run on (device ids index ws[]).
 * A strategy may leave some out (a stage cap, or a faster plan on fewer devices). */
static sc_status plan_workers_used(const char *plan_json, size_t n, bool *used, sc_err *err)
{
    json_t *plan = json_loads(plan_json, 0, NULL);
    json_t *stages = json_object_get(plan, "stages");
    if (!json_is_array(stages)) {
        json_decref(plan);
        return SC_ERRF(err, SC_ERR_INTERNAL, "the plan has no stages array");
    }
    memset(used, 0, n * sizeof *used);
    sc_status rc = SC_OK;
    size_t si, di;
    json_t *stage, *dev;
    json_array_foreach(stages, si, stage)
    {
        json_array_foreach(json_object_get(stage, "devices"), di, dev)
        {
            json_int_t d = json_integer_value(dev);
            if (!json_is_integer(dev) || d < 0 || (size_t)d >= n) {
                rc = SC_ERRF(err, SC_ERR_INTERNAL, "stage %zu of the plan names device %lld of %zu",
                             si, (long long)d, n);
                break;
            }
            used[d] = true;
        }
    }
    json_decref(plan);
    return rc;
}

/* Gives the chosen workers that the plan leaves out back to the pool: their registry entries
 * lose the job (under c->lock) and the job's stored worker list names only the planned ones, so
 * that cancel, recovery and a restart deal with those alone. Wakes the driver for jobs waiting
 * for workers. */
static void release_unplanned(coord *c, const char *id, const chosen_worker *ws, size_t n,
                              const bool *used)
{
    char kept[COORD_REASON_MAX] = "", freed[COORD_REASON_MAX] = "";
    size_t n_kept = 0;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        char *list = used[i] ? kept : freed;
        size_t at = strlen(list);
        snprintf(list + at, COORD_REASON_MAX - at, "%s%s", at ? "," : "", ws[i].id);
        if (used[i]) {
            n_kept++;
            continue;
        }
        coord_worker *w = coord_registry_find(c->registry, ws[i].id);
        if (w != NULL && strcmp(w->job_id, id) == 0)
            w->job_id[0] = '\0';
    }
    if (n_kept < n) {
        coord_store_job_set_workers(c->store, id, kept, NULL);
        pthread_cond_broadcast(&c->wake);
    }
    pthread_mutex_unlock(&c->lock);
    if (n_kept < n)
        SC_LOG_INFO(LOG,
                    "job %s: the plan uses %zu of its %zu workers (%s); %s freed for other jobs",
                    id, n_kept, n, kept, freed);
}

/* Tells every worker of the plan (used[i]) where its neighbours receive and to start training;
 * the job is running from then on. */
static void start_training(coord *c, const char *id, const coord_jobspec *spec,
                           const char *plan_json, json_t *endpoints, uint64_t resume_step,
                           chosen_worker *ws, size_t n, const bool *used)
{
    json_t *plan = json_loads(plan_json, 0, NULL);
    size_t n_stages = json_array_size(json_object_get(plan, "stages"));
    /* this start's id: distinct from every earlier one, also across coordinator restarts
     * (milliseconds since the epoch, times 1000), and below 2^53 so that JSON keeps it exact */
    pthread_mutex_lock(&c->lock);
    uint64_t run = (uint64_t)sc_clock_unix_ms() * 1000u;
    run = run > c->last_run ? run : c->last_run + 1;
    c->last_run = run;
    pthread_mutex_unlock(&c->lock);
    json_t *payload =
        json_pack("{s:O, s:I, s:I, s:I, s:I, s:I}", "stage_endpoints", endpoints, "steps",
                  (json_int_t)spec->steps, "resume_step", (json_int_t)resume_step,
                  "checkpoint_every", (json_int_t)spec->checkpoint_every, "checkpoint_keep",
                  (json_int_t)spec->checkpoint_keep, "run", (json_int_t)run);
    char *text = json_dumps(payload, JSON_COMPACT);
    char reason[COORD_REASON_MAX], from[64] = "";
    if (resume_step > 0)
        sc_strfmt(from, sizeof from, " from the checkpoint of step %llu",
                  (unsigned long long)resume_step);
    sc_strfmt(reason, sizeof reason, "training on %zu stage(s)%s", n_stages, from);
    pthread_mutex_lock(&c->lock);
    sc_err err;
    sc_err_clear(&err);
    if (c->n_running == COORD_MAX_RUNNING) { /* make room: forget a finished job's figures */
        for (size_t i = 0; i < c->n_running; i++) {
            if (c->running[i].finished) {
                progress_remove(c, i);
                break;
            }
        }
    }
    /* Only a job still planned starts: if a worker died or the job was cancelled while its
     * stages were being assigned, it has moved on and will be driven again. */
    coord_job now;
    bool planned = false;
    if (coord_store_job_get(c->store, id, &now, &err) == SC_OK) {
        planned = now.state == COORD_JOB_PLANNED;
        coord_job_clear(&now);
    }
    if (!planned)
        SC_ERRF(&err, SC_ERR_PRECONDITION,
                "the job left the planned state while its stages were assigned");
    char *payload_copy = text != NULL ? strdup(text) : NULL;
    bool ok = planned && payload_copy != NULL && n_stages > 0 && n_stages <= COORD_MAX_STAGES &&
              c->n_running < COORD_MAX_RUNNING &&
              coord_store_job_transition(c->store, id, COORD_JOB_RUNNING, reason, &err) == SC_OK;
    if (ok) {
        progress_drop(c, id);
        coord_progress *p = &c->running[c->n_running++];
        memset(p, 0, sizeof *p);
        sc_strlcpy(p->job_id, id, sizeof p->job_id);
        p->n_stages = (int)n_stages;
        p->steps = spec->steps;
        p->predicted_iteration_s = json_number_value(json_object_get(plan, "iteration_time_s"));
        for (int s = 0; s < p->n_stages; s++) {
            json_t *devs =
                json_object_get(json_array_get(json_object_get(plan, "stages"), s), "devices");
            size_t r = json_array_size(devs);
            p->replicas[s] = r < 1 ? 1 : r > COORD_MAX_REPLICAS ? COORD_MAX_REPLICAS : (int)r;
            for (int k = 0; k < p->replicas[s]; k++)
                p->step[s][k] = p->checkpoint[s][k] = resume_step;
        }
        p->stored_step = resume_step;
        p->complete_sent = resume_step;
        p->start_payload = payload_copy;
        p->resume_step = resume_step;
        p->run = run;
        payload_copy = NULL;
        p->checkpoint_error_stage = -1;
        /* a failure of an earlier run: this one reports its own */
        coord_store_job_set_checkpoint_error(c->store, id, "", NULL);
    }
    pthread_mutex_unlock(&c->lock);
    free(payload_copy);
    if (ok) {
        SC_LOG_INFO(LOG, "job %s is running: %s", id, reason);
        for (size_t i = 0; i < n; i++)
            if (used[i])
                coord_queue_command(c, ws[i].id, STAGECRAFT__COMMAND_KIND__COMMAND_START, id,
                                    resume_step, text, NULL);
    } else {
        SC_LOG_WARN(LOG, "job %s could not start: %s", id, err.msg[0] ? err.msg : "too many jobs");
    }
    free(text);
    json_decref(payload);
    json_decref(plan);
}

/* Under c->lock: keeps the store's checkpoint_error to the latest failure a stage reports (the
 * first failing stage's, until that stage writes one again), so status says why there is no
 * newer checkpoint instead of only the worker's log. */
static void checkpoint_error_report(coord *c, coord_progress *p,
                                    const Stagecraft__IterationReport *r)
{
    int s = (int)r->stage;
    bool failed = r->checkpoint_error != NULL && r->checkpoint_error[0] != '\0';
    if (!failed && p->checkpoint_error_stage != s)
        return;
    if (failed && p->checkpoint_error_stage >= 0 && p->checkpoint_error_stage != s)
        return; /* another stage's failure is shown until it clears */
    char text[COORD_REASON_MAX] = "";
    if (failed)
        sc_strfmt(text, sizeof text, "stage %d: %s", s, r->checkpoint_error);
    coord_job job;
    if (coord_store_job_get(c->store, p->job_id, &job, NULL) != SC_OK)
        return;
    bool same = strcmp(job.checkpoint_error, text) == 0;
    coord_job_clear(&job);
    p->checkpoint_error_stage = failed ? s : -1;
    if (same)
        return;
    if (coord_store_job_set_checkpoint_error(c->store, p->job_id, text, NULL) == SC_OK) {
        if (failed)
            SC_LOG_WARN(LOG, "job %s: checkpoint failed on %s", p->job_id, text);
        else
            SC_LOG_INFO(LOG, "job %s: stage %d writes checkpoints again", p->job_id, s);
    }
}

void coord_jobs_report(coord *c, const char *worker_id, const Stagecraft__IterationReport *r)
{
    coord_progress *p = coord_jobs_progress(c, r->job_id);
    /* a report of an earlier run of the job (before a re-plan), still on its way, is stale */
    if (p == NULL || p->finished || (r->run != 0 && r->run != p->run) ||
        (int)r->stage >= p->n_stages || (int)r->replica >= p->replicas[r->stage])
        return;
    int s = (int)r->stage, k = (int)r->replica;
    if (r->step > p->step[s][k])
        p->step[s][k] = r->step;
    if (r->checkpoint_step > p->checkpoint[s][k])
        p->checkpoint[s][k] = r->checkpoint_step;
    p->iteration_s[s] = r->iteration_s;
    p->busy_s[s] = r->busy_s;
    if (s == p->n_stages - 1) {
        p->loss = r->loss;
        p->samples_per_s = r->samples_per_s;
    }
    checkpoint_error_report(c, p, r);
    /* the job is as far as its slowest replica of any stage */
    uint64_t done = UINT64_MAX, ckpt = UINT64_MAX;
    for (int i = 0; i < p->n_stages; i++) {
        for (int j = 0; j < p->replicas[i]; j++) {
            done = p->step[i][j] < done ? p->step[i][j] : done;
            ckpt = p->checkpoint[i][j] < ckpt ? p->checkpoint[i][j] : ckpt;
        }
    }
    sc_err err;
    sc_err_clear(&err);
    if (done > p->stored_step) {
        coord_store_job_set_progress(c->store, p->job_id, done, ckpt, &err);
        p->stored_step = done;
    }
    if (ckpt > p->complete_sent) {
        /* every stage holds this step now: the workers may delete their older checkpoints
         * beyond the job's checkpoint_keep (before a STOP below, which drops the stage) */
        p->complete_sent = ckpt;
        for (size_t i = 0; i < coord_registry_count(c->registry); i++) {
            const coord_worker *w = coord_registry_at(c->registry, i);
            if (strcmp(w->job_id, p->job_id) == 0)
                coord_queue_command_locked(c, w->rec.id,
                                           STAGECRAFT__COMMAND_KIND__COMMAND_CHECKPOINT_COMPLETE,
                                           p->job_id, ckpt, NULL, NULL);
        }
    }
    if (done < p->steps)
        return;
    char id[COORD_ID_MAX], reason[COORD_REASON_MAX];
    sc_strlcpy(id, p->job_id, sizeof id);
    sc_strfmt(reason, sizeof reason, "trained %llu steps; final loss %.4f",
              (unsigned long long)done, p->loss);
    p->finished = true;
    if (coord_store_job_transition(c->store, id, COORD_JOB_SUCCEEDED, reason, &err) == SC_OK)
        SC_LOG_INFO(LOG, "job %s succeeded: %s (last report from %s)", id, reason, worker_id);
    /* the workers drop the finished stage and are free for the next job */
    for (size_t i = 0; i < coord_registry_count(c->registry); i++) {
        const coord_worker *w = coord_registry_at(c->registry, i);
        if (strcmp(w->job_id, id) == 0)
            coord_queue_command_locked(c, w->rec.id, STAGECRAFT__COMMAND_KIND__COMMAND_STOP, id,
                                       done, NULL, NULL);
    }
    coord_jobs_release_workers(c, id);
}

/* Moves a job to `to` unless it was cancelled meanwhile (then frees its workers). Takes the
 * lock. Returns false when the job is no longer ours to drive. */
static bool move_job(coord *c, const char *id, coord_job_state to, const char *reason)
{
    sc_err err;
    sc_err_clear(&err);
    pthread_mutex_lock(&c->lock);
    sc_status rc = coord_store_job_transition(c->store, id, to, reason, &err);
    if (rc != SC_OK || coord_job_state_terminal(to) || to == COORD_JOB_SUBMITTED ||
        to == COORD_JOB_RECOVERING)
        coord_jobs_release_workers(c, id);
    pthread_mutex_unlock(&c->lock);
    if (rc != SC_OK) {
        SC_LOG_INFO(LOG, "job %s: %s", id, err.msg);
        return false;
    }
    SC_LOG_INFO(LOG, "job %s is %s: %s", id, coord_job_state_name(to), reason);
    return true;
}

static void drive_job(coord *c, retry_table *retry, const char *id)
{
    sc_err err;
    sc_err_clear(&err);
    coord_job job;
    coord_jobspec spec;
    chosen_worker *ws = NULL;
    bool *used = NULL; /* [spec.workers]: the chosen workers the plan runs on */
    char *plan_json = NULL, reason[COORD_REASON_MAX];

    pthread_mutex_lock(&c->lock);
    if (coord_store_job_get(c->store, id, &job, &err) != SC_OK) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    if (job.state != COORD_JOB_SUBMITTED && job.state != COORD_JOB_RECOVERING) {
        coord_job_clear(&job);
        pthread_mutex_unlock(&c->lock);
        return;
    }
    sc_status rc = coord_jobspec_parse(id, job.spec_json, strlen(job.spec_json), &spec, &err);
    char *spec_json = job.spec_json; /* kept for the workers; freed at the end */
    job.spec_json = NULL;
    uint64_t resume_step = job.last_checkpoint_step;
    /* Why the job waits keeps why it got here ("worker w-2 died; waiting for ..."). */
    char cause[COORD_REASON_MAX];
    sc_strlcpy(cause, job.reason, sizeof cause);
    char *waiting = strstr(cause, "; waiting");
    if (waiting)
        *waiting = '\0';
    else if (strncmp(cause, "waiting", 7) == 0 || job.state == COORD_JOB_SUBMITTED)
        cause[0] = '\0';
    coord_job_clear(&job);
    if (rc != SC_OK) {
        pthread_mutex_unlock(&c->lock);
        move_job(c, id, COORD_JOB_FAILED, err.msg);
        free(spec_json);
        return;
    }
    rc = choose_workers(c, id, &spec, &ws, &err);
    if (rc != SC_OK) {
        if (cause[0])
            sc_strfmt(reason, sizeof reason, "%s; %s", cause, err.msg);
        else
            sc_strlcpy(reason, err.msg, sizeof reason);
        coord_store_job_set_reason(c->store, id, reason, NULL);
        pthread_mutex_unlock(&c->lock);
        retry_later(retry, id, RETRY_MS);
        coord_jobspec_clear(&spec);
        free(spec_json);
        return;
    }
    size_t n = spec.workers;
    group_by_host(ws, n);
    char ids[COORD_REASON_MAX] = "";
    for (size_t i = 0; i < n; i++) {
        size_t used = strlen(ids);
        snprintf(ids + used, sizeof ids - used, "%s%s", i ? "," : "", ws[i].id);
    }
    coord_store_job_set_workers(c->store, id, ids, NULL);
    pthread_mutex_unlock(&c->lock);

    sc_strfmt(reason, sizeof reason, "profiling the model on %s", ids);
    if (!move_job(c, id, COORD_JOB_PROFILING, reason))
        goto out;
    rc = profile_all(c, &spec, id, ws, n, &err);
    if (rc == SC_ERR_INVALID || rc == SC_ERR_PARSE || rc == SC_ERR_UNSUPPORTED) {
        move_job(c, id, COORD_JOB_FAILED, err.msg); /* retrying cannot help */
        goto out;
    }
    if (rc == SC_ERR_NOMEM || rc == SC_ERR_TOO_LARGE) {
        /* the model (or its micro-batch) does not fit the worker's memory: no retry fits it */
        sc_strfmt(reason, sizeof reason,
                  "the model does not fit on a worker (retrying cannot help): %s", err.msg);
        move_job(c, id, COORD_JOB_FAILED, reason);
        goto out;
    }
    if (rc != SC_OK) {
        unsigned failures = retry_profile_failed(retry, id);
        if (failures >= MAX_PROFILE_FAILURES) {
            sc_strfmt(reason, sizeof reason, "profiling failed %u times in a row; the last: %s",
                      failures, err.msg);
            move_job(c, id, COORD_JOB_FAILED, reason);
            goto out;
        }
        sc_strfmt(reason, sizeof reason,
                  "%s; retrying (failed profiling rounds in a row: %u of %d)", err.msg, failures,
                  MAX_PROFILE_FAILURES);
        move_job(c, id, COORD_JOB_SUBMITTED, reason);
        retry_later(retry, id, RETRY_MS);
        goto out;
    }
    retry_profile_ok(retry, id);
    coord_plan_worker *pw = calloc(n, sizeof *pw);
    if (pw == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        pw[i].id = ws[i].id;
        pw[i].hw = ws[i].hw;
        pw[i].profile_json = ws[i].profile_json;
    }
    rc = coord_plan_job(&spec, pw, n, &plan_json, &err);
    free(pw);
    if (rc == SC_OK)
        rc = add_transports(&spec, ws, n, &plan_json, &err);
    used = calloc(n, sizeof *used);
    if (rc == SC_OK && used == NULL)
        rc = SC_ERRF(&err, SC_ERR_NOMEM, "out of memory reading the plan");
    if (rc == SC_OK)
        rc = plan_workers_used(plan_json, n, used, &err);
    if (rc != SC_OK) {
        move_job(c, id, COORD_JOB_FAILED, err.msg);
        goto out;
    }
    release_unplanned(c, id, ws, n, used);
    pthread_mutex_lock(&c->lock);
    rc = coord_store_job_set_plan(c->store, id, plan_json, &err);
    pthread_mutex_unlock(&c->lock);
    if (rc != SC_OK) {
        move_job(c, id, COORD_JOB_FAILED, err.msg);
        goto out;
    }
    json_t *plan = json_loads(plan_json, 0, NULL);
    sc_strfmt(reason, sizeof reason,
              "planned with %s: %zu stage(s), predicted %.4g s per iteration",
              json_string_value(json_object_get(plan, "strategy")),
              json_array_size(json_object_get(plan, "stages")),
              json_number_value(json_object_get(plan, "iteration_time_s")));
    json_decref(plan);
    if (!move_job(c, id, COORD_JOB_PLANNED, reason))
        goto out;
    json_t *endpoints = json_array();
    rc = assign_all(c, &spec, spec_json, id, plan_json, resume_step, ws, n, endpoints, &err);
    if (rc == SC_ERR_INVALID || rc == SC_ERR_UNSUPPORTED || rc == SC_ERR_PARSE || rc == SC_ERR_IO ||
        rc == SC_ERR_NOT_FOUND || rc == SC_ERR_VERSION || rc == SC_ERR_TOO_LARGE) {
        /* a bad spec, or data a worker cannot read: re-planning would hit the same wall (a token
         * shard of another version, a data file over the size limit, a stage over the worker's
         * memory were re-planned every few seconds for good) */
        json_decref(endpoints);
        move_job(c, id, COORD_JOB_FAILED, err.msg);
        goto out;
    }
    if (rc != SC_OK) {
        json_decref(endpoints);
        sc_strfmt(reason, sizeof reason, "%s; re-planning", err.msg);
        move_job(c, id, COORD_JOB_RECOVERING, reason);
        retry_later(retry, id, RETRY_MS);
        goto out;
    }
    start_training(c, id, &spec, plan_json, endpoints, resume_step, ws, n, used);
    json_decref(endpoints);
out:
    free(used);
    free(spec_json);
    free(plan_json);
    chosen_free(ws, n);
    coord_jobspec_clear(&spec);
}

/* Under c->lock: whether a driver thread has job `id`. */
static bool is_driving(const coord *c, const char *id)
{
    for (size_t i = 0; i < c->n_driving; i++)
        if (strcmp(c->driving[i], id) == 0)
            return true;
    return false;
}

/* Under c->lock: the next job that needs the driver and has no driver thread yet, if any. */
static bool next_job(coord *c, retry_table *retry, char *id, size_t size)
{
    coord_job *jobs;
    size_t n;
    sc_err err;
    sc_err_clear(&err);
    if (coord_store_job_list(c->store, &jobs, &n, &err) != SC_OK)
        return false;
    uint64_t now = sc_clock_now_ns();
    bool found = false;
    for (size_t i = 0; i < n && !found; i++) {
        if ((jobs[i].state == COORD_JOB_SUBMITTED || jobs[i].state == COORD_JOB_RECOVERING) &&
            !is_driving(c, jobs[i].id) && retry_time(retry, jobs[i].id) <= now) {
            sc_strlcpy(id, jobs[i].id, size);
            found = true;
        }
    }
    coord_job_list_free(&jobs, n);
    return found;
}

/* After a restart: jobs caught mid-profile go back to submitted; planned jobs keep their
 * workers reserved for when they return. */
static void resume_jobs(coord *c)
{
    coord_job *jobs;
    size_t n;
    sc_err err;
    sc_err_clear(&err);
    pthread_mutex_lock(&c->lock);
    if (coord_store_job_list(c->store, &jobs, &n, &err) != SC_OK) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        coord_job *j = &jobs[i];
        if (j->state == COORD_JOB_PROFILING) {
            coord_store_job_transition(c->store, j->id, COORD_JOB_SUBMITTED,
                                       "the coordinator restarted during profiling", NULL);
            continue;
        }
        if (j->state == COORD_JOB_RUNNING || j->state == COORD_JOB_PLANNED ||
            j->state == COORD_JOB_REBALANCING) {
            /* its workers' progress was not kept: re-plan and resume from the last checkpoint */
            coord_store_job_transition(c->store, j->id, COORD_JOB_RECOVERING,
                                       "the coordinator restarted; resuming from the last "
                                       "checkpoint",
                                       NULL);
            continue;
        }
        if (coord_job_state_terminal(j->state) || j->worker_ids == NULL)
            continue;
        char *save = NULL;
        for (char *w = strtok_r(j->worker_ids, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
            coord_worker *cw = coord_registry_find(c->registry, w);
            if (cw)
                sc_strlcpy(cw->job_id, j->id, sizeof cw->job_id);
        }
    }
    coord_job_list_free(&jobs, n);
    pthread_mutex_unlock(&c->lock);
}

typedef struct {
    coord *c;
    retry_table *retry;
    char id[COORD_ID_MAX];
} drive_arg;

/* One job's driver thread (detached): drives it once, then leaves the driving set. */
static void *drive_main(void *arg)
{
    drive_arg *a = arg;
    coord *c = a->c;
    drive_job(c, a->retry, a->id);
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->n_driving; i++) {
        if (strcmp(c->driving[i], a->id) == 0) {
            memcpy(c->driving[i], c->driving[--c->n_driving], COORD_ID_MAX);
            break;
        }
    }
    free(a);
    /* wakes the loop: this job may need driving again, and a stopping loop waits for us */
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Under c->lock: starts a driver thread for job `id`. False when none could be started (the
 * caller drives the job itself). */
static bool drive_async(coord *c, retry_table *retry, const char *id)
{
    drive_arg *a = calloc(1, sizeof *a);
    if (a == NULL)
        return false;
    a->c = c;
    a->retry = retry;
    sc_strlcpy(a->id, id, sizeof a->id);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    bool ok = pthread_create(&t, &attr, drive_main, a) == 0;
    pthread_attr_destroy(&attr);
    if (!ok) {
        free(a);
        return false;
    }
    sc_strlcpy(c->driving[c->n_driving++], id, COORD_ID_MAX);
    return true;
}

void *coord_driver_main(void *arg)
{
    coord *c = arg;
    retry_table *retry = calloc(1, sizeof *retry);
    if (retry == NULL)
        return NULL;
    pthread_mutex_init(&retry->lock, NULL);
    resume_jobs(c);
    pthread_mutex_lock(&c->lock);
    while (!c->stopping) {
        char id[COORD_ID_MAX];
        if (c->n_driving == COORD_MAX_DRIVING || !next_job(c, retry, id, sizeof id)) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 200 * 1000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&c->wake, &c->lock, &until);
            continue;
        }
        if (drive_async(c, retry, id))
            continue;
        pthread_mutex_unlock(&c->lock);
        drive_job(c, retry, id);
        pthread_mutex_lock(&c->lock);
    }
    /* the driver threads use c and the retry table until they leave the driving set */
    while (c->n_driving > 0)
        pthread_cond_wait(&c->wake, &c->lock);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_destroy(&retry->lock);
    free(retry);
    return NULL;
}
