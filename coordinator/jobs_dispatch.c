/*
 * The calls that take a chosen, planned job to its workers: Worker.Profile and the link probe
 * (Worker.ProbeLink, link_probe.h) on every worker, Worker.AssignStage (one stage replica per
 * worker) and the START command that begins training and creates the job's progress entry.
 *
 * The RPCs run without c->lock (a worker that stops answering costs one call's deadline, and
 * holds up only its own job); state changes take the lock for their in-memory and store work.
 * What to do when a call fails is the driver's choice, not this file's.
 */
#include <jansson.h>
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
#include "coordinator/link_probe.h"
#include "coordinator/profile_cache.h"
#include "coordinator/speeds.h"
#include "coordinator/transport_pick.h"
#include "proto/sc_wire.h"

#define LOG "jobs"
#define ASSIGN_TIMEOUT_MS 10000
/* Each probe round trip's deadline (or the profiling timeout, when shorter): 64 KiB, the first
 * payload, crosses a link of 100 kbit/s in about 5 s. */
#define PROBE_CALL_TIMEOUT_MS 5000

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

/* One call to a worker's service, with the coordinator's TLS settings (its certificate is
 * presented to workers that require one; its CA verifies them). */
static sc_status call_worker(const coord *c, coord_chosen_worker *w, const char *method,
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

void coord_jobs_probe_link(const coord *c, coord_chosen_worker *w)
{
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_client *cli = NULL;
    sc_rpc_client_cfg cfg = {.tls = c->cfg.tls};
    int64_t timeout_ms =
        c->cfg.profile_timeout_ms > 0 && c->cfg.profile_timeout_ms < PROBE_CALL_TIMEOUT_MS
            ? c->cfg.profile_timeout_ms
            : PROBE_CALL_TIMEOUT_MS;
    coord_link_measure m;
    sc_status rc = sc_rpc_client_new(&cli, w->endpoint, &cfg, &err);
    if (rc == SC_OK)
        rc = coord_link_probe(cli, timeout_ms, &m, &err);
    sc_rpc_client_destroy(&cli);
    w->link_bytes_per_s = rc == SC_OK ? m.bytes_per_s : 0;
    w->link_latency_s = rc == SC_OK ? m.latency_s : 0;
    w->link_probed_unix_ms = rc == SC_OK ? sc_clock_unix_ms() : 0;
    if (rc == SC_OK)
        SC_LOG_INFO(LOG,
                    "worker %s ('%s'): link to the coordinator %.4g bytes/s (up %.4g with %zu "
                    "bytes, down %.4g with %zu bytes, latency %.3g ms; probed in %.3g s)",
                    w->id, w->name, m.bytes_per_s, m.up_bytes_per_s, m.up_bytes, m.down_bytes_per_s,
                    m.down_bytes, m.latency_s * 1e3, m.elapsed_s);
    else
        SC_LOG_WARN(LOG,
                    "worker %s ('%s'): link probe failed, so its server's NIC bandwidth is the "
                    "hardware report's unless another of its workers is measured: %s",
                    w->id, w->name, err.msg);
}

void coord_jobs_note_probes(coord *c, const coord_chosen_worker *ws, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ws[i].link_probed_unix_ms <= 0)
            continue;
        coord_worker *w = coord_registry_find(c->registry, ws[i].id);
        if (w == NULL)
            continue;
        w->link_bytes_per_s = ws[i].link_bytes_per_s;
        w->link_latency_s = ws[i].link_latency_s;
        w->link_probed_unix_ms = ws[i].link_probed_unix_ms;
    }
}

/* The data kinds as Worker.Profile names them. */
static const char *const data_kinds[] = {[COORD_DATA_TEXT] = "text",
                                         [COORD_DATA_TOKENS] = "tokens",
                                         [COORD_DATA_CIFAR10] = "cifar10",
                                         [COORD_DATA_SYNTHETIC] = "synthetic"};

/* What a profile of `spec` depends on besides the worker, as the cache's request key (heap,
 * caller frees; NULL out of memory): precision, micro-batch sizes, data and the model. */
static char *profile_request_key(const coord_jobspec *spec)
{
    uint32_t sizes[4];
    size_t n = profile_sizes(spec, sizes);
    char head[256 + sizeof spec->data_path];
    int len = snprintf(head, sizeof head, "precision %s; data %s %s; sizes", spec->precision,
                       data_kinds[spec->data_kind], spec->data_path);
    for (size_t i = 0; i < n && len > 0 && (size_t)len < sizeof head; i++)
        len += snprintf(head + len, sizeof head - (size_t)len, " %u", sizes[i]);
    size_t model = strlen(spec->model_json);
    char *key = malloc(strlen(head) + model + 2);
    if (key != NULL)
        sprintf(key, "%s\n%s", head, spec->model_json);
    return key;
}

/* Under c->lock: the cache key of chosen worker `w` as it is registered now; false when it is
 * no longer registered. */
static bool profile_key_of(coord *c, const coord_chosen_worker *w, const char *request,
                           coord_profile_key *key)
{
    const coord_worker *cw = coord_registry_find(c->registry, w->id);
    if (cw == NULL)
        return false;
    *key =
        (coord_profile_key){w->id, cw->rec.epoch, cw->rec.hardware, cw->rec.hardware_len, request};
    return true;
}

size_t coord_jobs_profiles_cached(coord *c, const coord_jobspec *spec, coord_chosen_worker *ws,
                                  size_t n, char *note, size_t size)
{
    note[0] = '\0';
    char *request = c->profiles != NULL ? profile_request_key(spec) : NULL;
    size_t hits = 0;
    for (size_t i = 0; request != NULL && i < n; i++) {
        coord_profile_key key;
        char from[COORD_ID_MAX];
        if (ws[i].profile_json != NULL || !profile_key_of(c, &ws[i], request, &key))
            continue;
        ws[i].profile_json = coord_profile_cache_get(c->profiles, &key, from, sizeof from);
        if (ws[i].profile_json == NULL)
            continue;
        size_t used = strlen(note);
        snprintf(note + used, size - used, "%s%s (from %s)", hits ? ", " : "", ws[i].id, from);
        hits++;
    }
    free(request);
    return hits;
}

void coord_jobs_profiles_keep(coord *c, const coord_jobspec *spec, const char *job_id,
                              const coord_chosen_worker *ws, size_t n, const bool *fresh)
{
    char *request = profile_request_key(spec);
    pthread_mutex_lock(&c->lock);
    if (c->profiles == NULL)
        coord_profile_cache_new(&c->profiles, NULL);
    for (size_t i = 0; request != NULL && c->profiles != NULL && i < n; i++) {
        coord_profile_key key;
        if (fresh[i] && ws[i].profile_json != NULL && profile_key_of(c, &ws[i], request, &key))
            coord_profile_cache_put(c->profiles, &key, job_id, ws[i].profile_json);
    }
    pthread_mutex_unlock(&c->lock);
    free(request);
}

/* One group of workers profiled in turn (profile_main, a thread per group). */
typedef struct {
    const coord *c;
    const Stagecraft__ProfileRequest *req;
    coord_chosen_worker *ws;
    const int *group; /* [n]: each worker's group */
    size_t n;
    int g;
    size_t failed; /* the first worker of the group that failed, n when none */
    sc_status rc;
    sc_err err;
} profile_group;

static void *profile_main(void *arg)
{
    profile_group *pg = arg;
    pg->failed = pg->n;
    pg->rc = SC_OK;
    sc_err_clear(&pg->err);
    for (size_t i = 0; i < pg->n; i++) {
        coord_chosen_worker *w = &pg->ws[i];
        if (pg->group[i] != pg->g || w->profile_json != NULL)
            continue;
        ProtobufCMessage *m = NULL;
        pg->rc = call_worker(pg->c, w, "/stagecraft.Worker/Profile", &pg->req->base,
                             &stagecraft__profile_response__descriptor, &m,
                             pg->c->cfg.profile_timeout_ms, &pg->err);
        if (pg->rc == SC_OK) {
            w->profile_json = strdup(((Stagecraft__ProfileResponse *)m)->profile_json);
            if (w->profile_json == NULL)
                pg->rc = SC_ERRF(&pg->err, SC_ERR_NOMEM, "out of memory keeping a profile");
        }
        if (m != NULL)
            protobuf_c_message_free_unpacked(m, NULL);
        if (pg->rc != SC_OK) {
            pg->failed = i;
            break;
        }
    }
    return NULL;
}

/* Whether worker w drives a CUDA device (its first), into *bus its PCI bus id. */
static bool cuda_device(const coord_chosen_worker *w, const char **bus)
{
    if (w->hw == NULL || w->hw->n_devices == 0 || strcmp(w->hw->devices[0]->kind, "cuda") != 0)
        return false;
    *bus = w->hw->devices[0]->pci_bus_id != NULL ? w->hw->devices[0]->pci_bus_id : "";
    return true;
}

int coord_jobs_profile_groups(const coord_chosen_worker *ws, size_t n, int *group)
{
    int groups = 0;
    for (size_t i = 0; i < n; i++)
        group[i] = -1;
    for (size_t i = 0; i < n; i++) {
        if (group[i] >= 0)
            continue;
        const char *host = ws[i].hw != NULL ? ws[i].hw->hostname : "";
        bool own_gpus = true; /* every worker of this host on a GPU no other one of them has */
        for (size_t j = i; j < n && own_gpus; j++) {
            const char *bj, *bk;
            if (strcmp(ws[j].hw != NULL ? ws[j].hw->hostname : "", host) != 0)
                continue;
            own_gpus = cuda_device(&ws[j], &bj);
            for (size_t k = i; k < j && own_gpus; k++)
                if (strcmp(ws[k].hw != NULL ? ws[k].hw->hostname : "", host) == 0)
                    own_gpus = cuda_device(&ws[k], &bk) && strcmp(bj, bk) != 0;
        }
        for (size_t j = i; j < n; j++)
            if (group[j] < 0 && strcmp(ws[j].hw != NULL ? ws[j].hw->hostname : "", host) == 0)
                group[j] = own_gpus ? groups++ : groups;
        if (!own_gpus)
            groups++;
    }
    return groups;
}

sc_status coord_jobs_profile_all(coord *c, const coord_jobspec *spec, const char *job_id,
                                 coord_chosen_worker *ws, size_t n, sc_err *err)
{
    uint32_t sizes[4];
    Stagecraft__ProfileRequest req = STAGECRAFT__PROFILE_REQUEST__INIT;
    req.job_id = (char *)job_id;
    req.model_json = spec->model_json;
    req.precision = (char *)spec->precision;
    req.microbatch_sizes = sizes;
    req.n_microbatch_sizes = profile_sizes(spec, sizes);
    /* the worker checks the data before it measures: a path missing on its server fails the
     * job's profiling, naming the worker and the path, rather than its stage assignment later */
    req.data_kind = (char *)data_kinds[spec->data_kind];
    req.data_path = (char *)spec->data_path;
    /* Every worker measures its own device: two of one name may differ (a CPU share, a GPU's
     * clock or power cap), and the cluster model groups them only when their profiles agree.
     * Workers that share a server's processors are profiled one at a time, so that they do not
     * slow each other's measurements; distinct servers (and GPUs of their own) at once. */
    int *group = calloc(n ? n : 1, sizeof *group);
    profile_group *pg = calloc(n ? n : 1, sizeof *pg);
    pthread_t *th = calloc(n ? n : 1, sizeof *th);
    bool *started = calloc(n ? n : 1, sizeof *started);
    if (group == NULL || pg == NULL || th == NULL || started == NULL) {
        free(group);
        free(pg);
        free(th);
        free(started);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory profiling the workers");
    }
    int groups = coord_jobs_profile_groups(ws, n, group);
    for (int g = 0; g < groups; g++) {
        pg[g] = (profile_group){c, &req, ws, group, n, g, n, SC_OK, {0}};
        /* the last group (or one whose thread does not start) runs here */
        started[g] = g + 1 < groups && pthread_create(&th[g], NULL, profile_main, &pg[g]) == 0;
        if (!started[g])
            profile_main(&pg[g]);
    }
    size_t first = n; /* the first worker that failed, in the job's order */
    sc_status rc = SC_OK;
    for (int g = 0; g < groups; g++) {
        if (started[g])
            pthread_join(th[g], NULL);
        /* a worker whose Profile call timed out still measures: STOP for the job cancels it,
         * so that it is free for the next try (or another job) at once */
        if (pg[g].rc == SC_ERR_TIMEOUT && pg[g].failed < n) {
            SC_LOG_WARN(LOG,
                        "job %s: worker %s ('%s') did not profile in time; cancelling its "
                        "profile",
                        job_id, ws[pg[g].failed].id, ws[pg[g].failed].name);
            coord_queue_command(c, ws[pg[g].failed].id, STAGECRAFT__COMMAND_KIND__COMMAND_STOP,
                                job_id, 0, NULL, NULL);
        }
        if (pg[g].rc != SC_OK && pg[g].failed < first) {
            first = pg[g].failed;
            rc = pg[g].rc;
            sc_err_clear(err);
            SC_ERRF(err, rc, "%s", pg[g].err.msg);
        }
    }
    free(group);
    free(pg);
    free(th);
    free(started);
    if (rc != SC_OK) {
        sc_err_prefix(err, "worker %s ('%s') did not profile", ws[first].id, ws[first].name);
        return rc;
    }
    /* the links one at a time: probes of two workers would share the coordinator's link */
    for (size_t i = 0; i < n; i++)
        if (ws[i].link_bytes_per_s <= 0)
            coord_jobs_probe_link(c, &ws[i]);
    return SC_OK;
}

sc_status coord_jobs_assign_all(const coord *c, const coord_jobspec *spec, const char *spec_json,
                                const char *job_id, const char *plan_json, uint64_t resume_step,
                                coord_chosen_worker *ws, size_t n, json_t *endpoints, sc_err *err)
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
    /* the kinds the driver recorded in the plan when it was made (coord_jobs_add_transports) */
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

void coord_jobs_start_training(coord *c, const char *id, const coord_jobspec *spec,
                               const char *plan_json, json_t *endpoints, uint64_t resume_step,
                               uint64_t last_checkpoint, const char *why, coord_chosen_worker *ws,
                               size_t n, const bool *used)
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
    /* where a stage finds the blocks of resume_step it does not hold itself: every worker of
     * the job serves what it kept paused for a move and its checkpoint files */
    json_t *sources = json_array();
    for (size_t i = 0; i < n; i++)
        if (ws[i].hw != NULL && ws[i].hw->state_endpoint != NULL && ws[i].hw->state_endpoint[0])
            json_array_append_new(sources, json_string(ws[i].hw->state_endpoint));
    /* then every other live worker: those that leave once their blocks are taken, and those a
     * new plan left out (an elastic job grown onto freed workers, a job re-planned around a
     * restarted worker), which may hold the only state of some blocks in files or kept images.
     * A source without them answers "not here" at once. */
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < coord_registry_count(c->registry); i++) {
        const coord_worker *w = coord_registry_at(c->registry, i);
        char endpoint[COORD_NAME_MAX];
        if (w->state == COORD_WORKER_DEAD ||
            !coord_worker_state_endpoint(w, endpoint, sizeof endpoint))
            continue;
        bool listed = false;
        for (size_t k = 0; k < json_array_size(sources) && !listed; k++)
            listed = strcmp(json_string_value(json_array_get(sources, k)), endpoint) == 0;
        if (!listed)
            json_array_append_new(sources, json_string(endpoint));
    }
    pthread_mutex_unlock(&c->lock);
    /* who holds a copy of each stage's checkpoints, so that they survive a lost disk */
    int copies[COORD_MAX_STAGES] = {0};
    json_t *copy_list = NULL;
    const char **eps = calloc(n ? n : 1, sizeof *eps), **hosts = calloc(n ? n : 1, sizeof *hosts);
    if (spec->checkpoint_every > 0 && spec->checkpoint_replicas > 0 && eps != NULL &&
        hosts != NULL && n_stages <= COORD_MAX_STAGES) {
        for (size_t i = 0; i < n; i++) {
            eps[i] = ws[i].hw != NULL ? ws[i].hw->state_endpoint : NULL;
            hosts[i] = ws[i].hw != NULL && ws[i].hw->hostname != NULL ? ws[i].hw->hostname : "";
        }
        copy_list = coord_ckpt_copies_payload(plan, eps, hosts, used, n,
                                              (int)spec->checkpoint_replicas, copies);
    }
    free(eps);
    free(hosts);
    json_t *payload = json_pack(
        "{s:O, s:I, s:I, s:I, s:I, s:I, s:o, s:I, s:o*}", "stage_endpoints", endpoints, "steps",
        (json_int_t)spec->steps, "resume_step", (json_int_t)resume_step, "checkpoint_every",
        (json_int_t)spec->checkpoint_every, "checkpoint_keep", (json_int_t)spec->checkpoint_keep,
        "run", (json_int_t)run, "state_sources", sources, "last_checkpoint",
        (json_int_t)last_checkpoint, "checkpoint_copies", copy_list);
    char *text = json_dumps(payload, JSON_COMPACT);
    char reason[COORD_REASON_MAX], from[64] = "";
    if (resume_step > 0)
        sc_strfmt(from, sizeof from, " from the checkpoint of step %llu",
                  (unsigned long long)resume_step);
    if (why != NULL)
        sc_strlcpy(reason, why, sizeof reason);
    else
        sc_strfmt(reason, sizeof reason, "training on %zu stage(s)%s", n_stages, from);
    pthread_mutex_lock(&c->lock);
    sc_err err;
    sc_err_clear(&err);
    if (c->n_running == COORD_MAX_RUNNING) { /* make room: forget a finished job's figures */
        for (size_t i = 0; i < c->n_running; i++) {
            if (c->running[i].finished) {
                coord_jobs_progress_remove(c, i);
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
        coord_jobs_progress_drop(c, id);
        coord_progress *p = &c->running[c->n_running++];
        memset(p, 0, sizeof *p);
        sc_strlcpy(p->job_id, id, sizeof p->job_id);
        p->n_stages = (int)n_stages;
        p->steps = spec->steps;
        p->batch_size = spec->batch_size;
        p->predicted_iteration_s = json_number_value(json_object_get(plan, "iteration_time_s"));
        for (int s = 0; s < p->n_stages; s++) {
            json_t *devs =
                json_object_get(json_array_get(json_object_get(plan, "stages"), s), "devices");
            size_t r = json_array_size(devs);
            p->replicas[s] = r < 1 ? 1 : r > COORD_MAX_REPLICAS ? COORD_MAX_REPLICAS : (int)r;
            for (int k = 0; k < p->replicas[s]; k++) {
                p->step[s][k] = resume_step;
                p->checkpoint[s][k] = last_checkpoint;
            }
            p->planned_reduce_s[s] = json_number_value(
                json_object_get(json_array_get(json_object_get(plan, "stages"), s), "allreduce_s"));
            p->copies[s] = copies[s];
            for (int j = 0; j < copies[s]; j++)
                p->copied[s][j] = last_checkpoint;
            for (int k = 0; k < p->replicas[s]; k++) {
                /* the plan's device ids index ws[] */
                json_int_t d = json_integer_value(json_array_get(devs, (size_t)k));
                if (d >= 0 && (size_t)d < n) {
                    sc_strlcpy(p->worker_of[s][k], ws[d].id, sizeof p->worker_of[s][k]);
                    json_t *st = json_array_get(json_object_get(plan, "stages"), s);
                    int first = (int)json_integer_value(json_object_get(st, "first_block"));
                    int last = (int)json_integer_value(json_object_get(st, "last_block"));
                    p->first_block[s] = first;
                    p->work[s][k] = coord_speeds_work_s(c->speeds, id, ws[d].id, first, last) *
                                    spec->batch_size / p->replicas[s];
                    p->scale[s][k] = coord_speeds_scale(c->speeds, id, ws[d].id);
                }
            }
        }
        p->stored_step = resume_step;
        p->complete_sent = last_checkpoint;
        p->last_checkpoint = last_checkpoint;
        p->rebalance_auto = spec->rebalance_auto;
        p->workers_max = spec->workers_min > 0 ? spec->workers : 0;
        p->workers_min = spec->workers_min;
        const char *sched = json_string_value(json_object_get(plan, "schedule"));
        p->async = sched != NULL && strcmp(sched, "pipedream") == 0;
        if (spec->freeze_interval > 0 && !p->async) {
            json_t *stages = json_object_get(plan, "stages");
            json_t *end = json_array_get(stages, json_array_size(stages) - 1);
            int n_blocks = (int)json_integer_value(json_object_get(end, "last_block")) + 1;
            int frozen = (int)json_integer_value(json_object_get(plan, "frozen_blocks"));
            coord_freezing_start(&c->freezing, id, spec->freeze_interval, spec->freeze_percentile,
                                 spec->freeze_max_change, n_blocks, frozen);
            p->freeze = true;
        }
        if (why != NULL)
            p->moved_from_s = sc_clock_now_s();
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
