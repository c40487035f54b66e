/*
 * Worker gRPC service (see service.h). GetTimeline answers with the measured events of the
 * stage this worker runs (worker/runtime/timeline.h) and a sample of its clock; ReadLog with the
 * process's newest log lines (sc_log_keep_lines). Profile measures
 * the requested model's blocks on this worker's device with the kernels' profiler and returns the
 * stagecraft-profile JSON; one profile runs at a time (a second request while profiling is refused
 * as unavailable). A profile is cancelled (kn_profile_cfg.cancel) when its job is released or
 * stopped, or the worker stops; the worker says "profiling" until the measuring has returned.
 */
#include "worker/service.h"

#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "kernels/model.h"
#include "kernels/profile.h"
#include "kernels/threads_cpu.h"
#include "proto/sc_wire.h"
#include "worker/blocks/block_server.h"
#include "worker/data/data.h"
#include "worker/runtime/timeline.h"
#include "worker/trainer.h"
#include "worker/transport/transport.h"

#define LOG "worker"
/* the longest an assignment waits for a stopped stage to end (a worker leaving is never
 * "stuck"; the coordinator's call gives up sooner anyway) */
#define ASSIGN_WAIT_MAX_MS 30000

/* Parks trainer `t`, told to stop, until its thread ends (under st->lock). One that does not fit
 * is waited for here: a worker that has WK_PARKED_MAX stuck threads already is stuck anyway. */
static void park_locked(wk_state *st, struct wk_trainer *t, uint64_t stuck_at_ns)
{
    for (int i = 0; i < WK_PARKED_MAX; i++)
        if (st->parked[i] == NULL) {
            st->parked[i] = t;
            st->stuck_at_ns[i] = stuck_at_ns;
            return;
        }
    SC_LOG_WARN(LOG, "%d stopped stages still run; waiting for one more to end", WK_PARKED_MAX);
    pthread_mutex_unlock(&st->lock);
    wk_trainer_destroy(&t);
    pthread_mutex_lock(&st->lock);
}

/* Tells `*t` to stop and waits up to wait_ms for it to end; one that does not is parked, stuck
 * once wk_trainer_stop_ms has passed since it was told. */
static void stop_or_park(wk_state *st, struct wk_trainer **t, int wait_ms)
{
    if (*t == NULL)
        return;
    uint64_t stuck_at = sc_clock_now_ns() + wk_trainer_stop_ms(*t) * 1000000u;
    sc_err err;
    sc_err_clear(&err);
    if (wk_trainer_stop_within(t, wait_ms, &err) == SC_OK)
        return;
    pthread_mutex_lock(&st->lock);
    park_locked(st, *t, stuck_at);
    pthread_mutex_unlock(&st->lock);
    *t = NULL;
}

void wk_state_reap(wk_state *st)
{
    struct wk_trainer *ended[WK_PARKED_MAX];
    int n_ended = 0;
    uint64_t now = sc_clock_now_ns();
    bool stuck = false;
    pthread_mutex_lock(&st->lock);
    for (int i = 0; i < WK_PARKED_MAX; i++) {
        if (st->parked[i] == NULL)
            continue;
        if (wk_trainer_ended(st->parked[i])) {
            ended[n_ended++] = st->parked[i];
            st->parked[i] = NULL;
        } else if (now >= st->stuck_at_ns[i]) {
            stuck = true;
        }
    }
    if (stuck && strcmp(st->state, "stuck") != 0 && strcmp(st->state, "leaving") != 0) {
        SC_LOG_WARN(LOG, "a stopped stage has not ended: its step does not return (stuck in a "
                         "kernel?); this worker takes no stage until it does");
        sc_strlcpy(st->state, "stuck", sizeof st->state);
    } else if (!stuck && strcmp(st->state, "stuck") == 0) {
        SC_LOG_INFO(LOG, "the stuck stage has ended; its work is discarded");
        sc_strlcpy(st->state, st->trainer != NULL ? "assigned" : "idle", sizeof st->state);
    }
    pthread_mutex_unlock(&st->lock);
    for (int i = 0; i < n_ended; i++)
        wk_trainer_destroy(&ended[i]); /* its thread has ended: no wait */
}

static bool any_parked_locked(const wk_state *st);

void wk_state_reap_wait(wk_state *st, int timeout_ms)
{
    for (int waited = 0;; waited += 10) {
        wk_state_reap(st);
        pthread_mutex_lock(&st->lock);
        bool parked = any_parked_locked(st);
        pthread_mutex_unlock(&st->lock);
        if (!parked)
            return;
        if (waited >= timeout_ms) {
            SC_LOG_WARN(LOG, "a stopped stage still runs after %d ms; left to the exit",
                        timeout_ms);
            return;
        }
        usleep(10 * 1000);
    }
}

/* Whether a trainer is parked (under st->lock). */
static bool any_parked_locked(const wk_state *st)
{
    for (int i = 0; i < WK_PARKED_MAX; i++)
        if (st->parked[i] != NULL)
            return true;
    return false;
}

/* Cancels the profile running for `job_id` (any when NULL or empty), under st->lock. */
static void cancel_profile_locked(wk_state *st, const char *job_id, const char *why)
{
    if (st->profile_job[0] == '\0' || atomic_load(&st->profile_cancel) != 0)
        return; /* no profile runs, or it is cancelled already */
    if (job_id != NULL && job_id[0] != '\0' && strcmp(job_id, st->profile_job) != 0)
        return;
    atomic_store(&st->profile_cancel, 1);
    SC_LOG_INFO(LOG, "profiling for job %s is cancelled: %s", st->profile_job, why);
}

void wk_state_stopping(wk_state *st)
{
    pthread_mutex_lock(&st->lock);
    st->stopping = true;
    cancel_profile_locked(st, NULL, "the worker stops");
    pthread_mutex_unlock(&st->lock);
}

void wk_state_release(wk_state *st, const char *job_id, const char *why)
{
    struct wk_trainer *old = NULL;
    pthread_mutex_lock(&st->lock);
    cancel_profile_locked(st, job_id, why);
    if (job_id == NULL || job_id[0] == '\0' || strcmp(job_id, st->job_id) == 0) {
        if (st->job_id[0])
            SC_LOG_INFO(LOG, "released job %s: %s", st->job_id, why);
        st->job_id[0] = '\0';
        free(st->plan_json);
        free(st->model_json);
        st->plan_json = st->model_json = NULL;
        old = st->trainer;
        st->trainer = NULL;
        if (strcmp(st->state, "profiling") != 0 && strcmp(st->state, "stuck") != 0)
            sc_strlcpy(st->state, "idle", sizeof st->state);
    }
    pthread_mutex_unlock(&st->lock);
    /* The heartbeats' thread comes here: it never waits for the stage's thread (a step stuck in
     * a kernel would silence them), which is parked until it ends (wk_state_reap). */
    stop_or_park(st, &old, 0);
}

static sc_status describe(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                          void *user, sc_err *err)
{
    (void)msg;
    (void)err;
    wk_state *st = user;
    Stagecraft__DescribeResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__describe_response__descriptor);
    resp->hardware = st->hardware;
    pthread_mutex_lock(&st->lock);
    resp->worker_id = sc_rpc_ctx_strdup(ctx, st->id);
    resp->state = sc_rpc_ctx_strdup(ctx, st->state);
    resp->job_id = sc_rpc_ctx_strdup(ctx, st->job_id);
    pthread_mutex_unlock(&st->lock);
    *out = &resp->base;
    return SC_OK;
}

/* The coordinator picks nccl (between stages, or for the copies' all-reduce) only for workers
 * whose hardware report offers it; a worker of another build (or an older coordinator's choice)
 * is refused here with what would work. */
sc_status wk_assign_kinds_check(const Stagecraft__AssignStageRequest *req, bool nccl_here,
                                sc_err *err)
{
    const char *kinds[2] = {req->transport, req->transport_next};
    for (int i = 0; i < 2; i++) {
        const char *k = kinds[i];
        if (i == 1 && (k == NULL || k[0] == '\0'))
            break; /* transport_next empty: the same for both boundaries */
        bool known = k != NULL && (strcmp(k, "zmq") == 0 || (nccl_here && strcmp(k, "nccl") == 0));
        if (!known)
            return SC_ERRF(
                err, k != NULL && strcmp(k, "nccl") == 0 ? SC_ERR_UNSUPPORTED : SC_ERR_INVALID,
                "AssignStage: %s '%.40s' is not supported by this worker (%s)",
                i == 0 ? "transport" : "transport_next", k != NULL ? k : "",
                nccl_here ? "zmq, nccl"
                          : "zmq; nccl needs a CUDA + NCCL build and a cuda:N device");
    }
    const char *red = req->replica_reduce != NULL ? req->replica_reduce : "";
    if (!(red[0] == '\0' || strcmp(red, "host") == 0 || (nccl_here && strcmp(red, "nccl") == 0)))
        return SC_ERRF(
            err, strcmp(red, "nccl") == 0 ? SC_ERR_UNSUPPORTED : SC_ERR_INVALID,
            "AssignStage: replica_reduce '%.40s' is not supported by this worker (%s)", red,
            nccl_here ? "host, nccl" : "host; nccl needs a CUDA + NCCL build and a cuda:N device");
    return SC_OK;
}

static sc_status assign_stage(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                              void *user, sc_err *err)
{
    wk_state *st = user;
    const Stagecraft__AssignStageRequest *req = (const void *)msg;
    if (req->job_id == NULL || req->job_id[0] == '\0' || strlen(req->job_id) >= COORD_WORKER_ID_MAX)
        return SC_ERRF(err, SC_ERR_INVALID, "AssignStage needs a job_id");
    if (req->first_block > req->last_block)
        return SC_ERRF(err, SC_ERR_INVALID, "AssignStage: first_block %u is after last_block %u",
                       req->first_block, req->last_block);
    bool nccl_here = false;
#ifdef SC_HAVE_NCCL
    nccl_here = strncmp(st->device, "cuda:", 5) == 0;
#endif
    SC_CHECK(wk_assign_kinds_check(req, nccl_here, err));
    char *plan = strdup(req->plan_json ? req->plan_json : "");
    char *model = strdup(req->model_json ? req->model_json : "");
    if (plan == NULL || model == NULL) {
        free(plan);
        free(model);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory storing the assignment");
    }
    /* A new assignment (first, after a re-plan, or of another job: the coordinator is the
     * authority on what this worker does) replaces the stage being trained. The old trainer is
     * stopped outside the lock (it joins a thread); the new one is built outside it too. */
    pthread_mutex_lock(&st->lock);
    if (st->job_id[0] && strcmp(st->job_id, req->job_id) != 0)
        SC_LOG_WARN(LOG, "job %s replaces job %s on this worker (the coordinator reassigned it)",
                    req->job_id, st->job_id);
    /* state kept for other jobs' moves gives its memory to this one */
    wk_block_server_drop(st->blocks, req->job_id, true);
    struct wk_trainer *old = st->trainer;
    st->trainer = NULL;
    pthread_mutex_unlock(&st->lock);
    stop_or_park(st, &old, old != NULL ? (int)wk_trainer_stop_ms(old) : 0);
    /* a stage told to stop that still runs holds this worker: no second stage beside it; wait
     * for it until it counts as stuck */
    for (int waited_ms = 0;; waited_ms += 10) {
        wk_state_reap(st);
        pthread_mutex_lock(&st->lock);
        bool parked = any_parked_locked(st), stuck = strcmp(st->state, "stuck") == 0;
        pthread_mutex_unlock(&st->lock);
        if (!parked)
            break;
        if (stuck || waited_ms >= ASSIGN_WAIT_MAX_MS) {
            free(plan);
            free(model);
            wk_state_reap(st);
            return SC_ERRF(err, SC_ERR_UNAVAILABLE,
                           "this worker is stuck: a stage it was told to stop still runs (its "
                           "step does not return); it takes no stage until that one ends");
        }
        usleep(10 * 1000);
    }
    struct wk_trainer *fresh = NULL;
    sc_status rc =
        wk_trainer_new(&fresh, req, st->device, st->bind_host, st->checkpoint_dir, st->blocks, err);
    if (rc != SC_OK) {
        free(plan);
        free(model);
        return rc;
    }
    if (st->hang_stage)
        wk_trainer_fault_hang(fresh, 3);
    pthread_mutex_lock(&st->lock);
    old = st->trainer; /* a concurrent AssignStage: the last one wins */
    st->trainer = fresh;
    st->trainer_gen++;
    char endpoint[RT_ENDPOINT_MAX];
    sc_strlcpy(endpoint, wk_trainer_endpoint(st->trainer), sizeof endpoint);
    sc_strlcpy(st->job_id, req->job_id, sizeof st->job_id);
    st->stage = req->stage;
    st->replica = req->replica;
    st->first_block = req->first_block;
    st->last_block = req->last_block;
    sc_strlcpy(st->transport, req->transport, sizeof st->transport);
    free(st->plan_json);
    free(st->model_json);
    st->plan_json = plan;
    st->model_json = model;
    st->step = req->resume_step;
    sc_strlcpy(st->state, "assigned", sizeof st->state);
    pthread_mutex_unlock(&st->lock);
    stop_or_park(st, &old, old != NULL ? (int)wk_trainer_stop_ms(old) : 0);
    SC_LOG_INFO(LOG, "assigned stage %u (blocks %u-%u) of job %s over %s", req->stage,
                req->first_block, req->last_block, req->job_id, req->transport);
    Stagecraft__AssignStageResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__assign_stage_response__descriptor);
    resp->accepted = 1;
    resp->message = "assigned";
    resp->data_endpoint = sc_rpc_ctx_strdup(ctx, endpoint);
    *out = &resp->base;
    return SC_OK;
}

/* Opens the job's data as the first and last stages will, and closes it: a path this server
 * lacks, a malformed shard or a token beyond the model's vocabulary is an error naming the
 * path, found before the profile is measured. No data kind (an older coordinator): no check. */
static sc_status check_data(const kn_model *model, const Stagecraft__ProfileRequest *req,
                            sc_err *err)
{
    if (req->data_kind == NULL || req->data_kind[0] == '\0')
        return SC_OK;
    rt_data_cfg dc;
    memset(&dc, 0, sizeof dc);
    SC_CHECK(rt_data_kind_parse(req->data_kind, "data.kind", &dc.kind, err));
    const kn_block *b0 = kn_model_block(model, 0);
    dc.path = req->data_path && req->data_path[0] ? req->data_path : NULL;
    dc.seed = 1;
    dc.inputs_are_tokens = b0->in_tokens;
    dc.input_elems = b0->in_floats;
    dc.targets_per_sample = kn_model_targets_per_sample(model);
    dc.classes = kn_model_classes(model);
    rt_data *data = NULL;
    sc_status rc = rt_data_new(&data, &dc, err);
    rt_data_destroy(&data);
    if (rc == SC_OK || rc == SC_ERR_NOMEM)
        return rc;
    /* The job's input, not this worker, is at fault (a missing file, a bad shard): INVALID, so
     * the coordinator fails the job now instead of profiling it again. */
    sc_err_prefix(err, "the job's data is not usable on this worker's server");
    if (err != NULL)
        err->code = SC_ERR_INVALID;
    return SC_ERR_INVALID;
}

/* Measures the model on this worker's device; *json is a heap string. */
static sc_status run_profile(wk_state *st, const Stagecraft__ProfileRequest *req, char **json,
                             sc_err *err)
{
    kn_model *model = NULL;
    const char *text = req->model_json ? req->model_json : "";
    SC_CHECK(kn_model_parse(&model, "model", text, strlen(text), err));
    sc_status drc = check_data(model, req, err);
    if (drc != SC_OK) {
        kn_model_destroy(&model);
        return drc;
    }
    kn_profile_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    sc_status rc = kn_device_parse(st->device, "device", &cfg.device, err);
    for (size_t i = 0; rc == SC_OK && i < req->n_microbatch_sizes; i++)
        cfg.sizes[cfg.nsizes++] = (int)req->microbatch_sizes[i];
    /* the job's precision as its stages will compute ("auto": this device's choice) */
    kn_precision prec = KN_PREC_FP32;
    if (rc == SC_OK && req->precision != NULL && req->precision[0] != '\0')
        rc = kn_precision_parse(req->precision, "the job's precision", &prec, err);
    cfg.precision = kn_precision_resolve(prec, cfg.device.kind == KN_DEV_CUDA,
                                         rc == SC_OK && kn_device_has_bf16(cfg.device));
    cfg.warmup = 1;
    cfg.repeats = 3;
    cfg.cancel = &st->profile_cancel;
    /* Sustained speed: a worker capped by a CPU quota runs its first milliseconds of every
     * CFS period at full speed, so short passes alone would profile it as uncapped; 100 ms
     * spans twenty periods of 5 ms (the period the uneven lab sets); 200 ms holds a stall
     * more or less (a period at most) to a few percent of a slow worker's passes. */
    cfg.min_time_s = 0.2;
    if (st->slow_profile) { /* a test's fault: a first profile as long as a huge model's */
        cfg.min_time_s = 3600;
        cfg.max_passes = INT_MAX;
        st->slow_profile = false; /* one profile runs at a time: no other reads it */
    }
    int n = kn_model_block_count(model);
    kn_profile_block *blocks = rc == SC_OK ? calloc((size_t)n, sizeof *blocks) : NULL;
    if (rc == SC_OK && blocks == NULL)
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory profiling");
    if (rc == SC_OK && cfg.device.kind == KN_DEV_CPU) { /* the quota as it is now */
        int threads_now = kn_cpu_threads_follow_quota();
        if (threads_now > 0)
            SC_LOG_INFO("worker", "the CPU quota changed: the kernels use %d thread%s",
                        threads_now, threads_now == 1 ? "" : "s");
    }
    if (rc == SC_OK)
        rc = kn_profile_run(model, &cfg, blocks, err);
    void *doc = NULL;
    if (rc == SC_OK) {
        char devname[128];
        kn_device_name(cfg.device, devname, sizeof devname);
        rc = kn_profile_to_json(model, devname, cfg.sizes[0], blocks, n, &doc, err);
    }
    if (rc == SC_OK) {
        *json = json_dumps(doc, JSON_COMPACT);
        json_decref(doc);
        if (*json == NULL)
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the profile");
    }
    free(blocks);
    kn_model_destroy(&model);
    return rc;
}

static sc_status profile(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                         void *user, sc_err *err)
{
    wk_state *st = user;
    const Stagecraft__ProfileRequest *req = (const void *)msg;
    if (req->n_microbatch_sizes == 0 || req->n_microbatch_sizes > WK_PROFILE_MAX_SIZES)
        return SC_ERRF(err, SC_ERR_INVALID, "Profile needs 1 to %d micro-batch sizes, got %zu",
                       WK_PROFILE_MAX_SIZES, req->n_microbatch_sizes);
    for (size_t i = 0; i < req->n_microbatch_sizes; i++)
        if (req->microbatch_sizes[i] < 1 || req->microbatch_sizes[i] > SC_WIRE_MAX_MICROBATCH_SIZE)
            return SC_ERRF(err, SC_ERR_INVALID, "micro-batch size %u is not in [1, %d]",
                           req->microbatch_sizes[i], SC_WIRE_MAX_MICROBATCH_SIZE);
    pthread_mutex_lock(&st->lock);
    if (strcmp(st->state, "profiling") == 0) {
        char job[COORD_WORKER_ID_MAX];
        sc_strlcpy(job, st->profile_job, sizeof job);
        pthread_mutex_unlock(&st->lock);
        return SC_ERRF(err, SC_ERR_UNAVAILABLE, "this worker is already profiling (for job %s)",
                       job);
    }
    if (st->stopping) {
        pthread_mutex_unlock(&st->lock);
        return SC_ERRF(err, SC_ERR_UNAVAILABLE, "this worker is stopping");
    }
    char before[32];
    sc_strlcpy(before, st->state, sizeof before);
    sc_strlcpy(st->state, "profiling", sizeof st->state);
    sc_strlcpy(st->profile_job, req->job_id != NULL && req->job_id[0] ? req->job_id : "(none)",
               sizeof st->profile_job);
    atomic_store(&st->profile_cancel, 0);
    pthread_mutex_unlock(&st->lock);

    char *json = NULL;
    sc_status rc = run_profile(st, req, &json, err);

    /* "profiling" until here, cancelled or not: the worker is free only once it is */
    pthread_mutex_lock(&st->lock);
    if (rc == SC_ERR_CANCELLED)
        SC_LOG_INFO(LOG, "profiling for job %s stopped: cancelled", st->profile_job);
    if (strcmp(st->state, "profiling") == 0) { /* not "leaving" meanwhile */
        sc_strlcpy(st->state, st->job_id[0] ? "assigned" : before, sizeof st->state);
        if (strcmp(st->state, "profiling") == 0)
            sc_strlcpy(st->state, "idle", sizeof st->state);
    }
    st->profile_job[0] = '\0';
    atomic_store(&st->profile_cancel, 0);
    pthread_mutex_unlock(&st->lock);
    SC_CHECK(rc);
    Stagecraft__ProfileResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__profile_response__descriptor);
    resp->profile_json = sc_rpc_ctx_strdup(ctx, json);
    free(json);
    if (resp->profile_json == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory returning the profile");
    *out = &resp->base;
    return SC_OK;
}

static sc_status release(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                         void *user, sc_err *err)
{
    (void)err;
    wk_state *st = user;
    const Stagecraft__ReleaseRequest *req = (const void *)msg;
    wk_state_release(st, req->job_id, req->reason && req->reason[0] ? req->reason : "released");
    *out = sc_rpc_ctx_new_message(ctx, &stagecraft__release_response__descriptor);
    return SC_OK;
}

/* ---- link probe: the coordinator times these round trips to measure the path to this worker.
 * Cheap and stateless: it takes no lock and reads only an immutable test fault, so a probe
 * runs whatever the worker is doing. */
static sc_status probe_link(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                            void *user, sc_err *err)
{
    const wk_state *st = user;
    const Stagecraft__ProbeLinkRequest *req = (const void *)msg;
    if (st->refuse_probe)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "ProbeLink is refused (STAGECRAFT_WORKER_FAULTS=refuse-probe)");
    if (req->reply_bytes > WK_PROBE_MAX_BYTES)
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "ProbeLink: reply_bytes %u is over the limit of %zu bytes (the %zu-byte "
                       "RPC message limit less room for the response's header)",
                       req->reply_bytes, (size_t)WK_PROBE_MAX_BYTES,
                       (size_t)SC_RPC_DEFAULT_MAX_MESSAGE_BYTES);
    Stagecraft__ProbeLinkResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__probe_link_response__descriptor);
    if (req->reply_bytes > 0) {
        resp->payload.data = sc_rpc_ctx_alloc(ctx, req->reply_bytes); /* zeroed */
        if (resp->payload.data == NULL)
            return SC_ERRF(err, SC_ERR_NOMEM, "ProbeLink: out of memory for %u bytes",
                           req->reply_bytes);
        resp->payload.len = req->reply_bytes;
    }
    *out = &resp->base;
    return SC_OK;
}

/* The timeline of the stage this worker runs for the job. The snapshot is taken under st->lock,
 * which keeps the trainer (and its runner's timeline) alive: a release or a new assignment takes
 * the trainer out under that lock before destroying it. The training thread never takes
 * st->lock, so this waits at most for one iteration's commit (the timeline's own lock). */
static sc_status get_timeline(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                              void *user, sc_err *err)
{
    wk_state *st = user;
    const Stagecraft__GetTimelineRequest *req = (const void *)msg;
    const char *job = req->job_id != NULL ? req->job_id : "";
    rt_tl_event *ev = NULL;
    size_t n = 0;
    rt_tl_snapshot_info info = {0, 0, 0};
    uint32_t stage = 0, replica = 0;
    sc_status rc = SC_OK;
    pthread_mutex_lock(&st->lock);
    if (job[0] == '\0' || strcmp(job, st->job_id) != 0)
        rc = SC_ERRF(err, SC_ERR_NOT_FOUND,
                     "GetTimeline: this worker runs no stage of job '%.64s'%s%s", job,
                     st->job_id[0] ? "; it runs job " : " (it runs none)", st->job_id);
    else if (st->trainer == NULL)
        rc = SC_ERRF(err, SC_ERR_PRECONDITION, "GetTimeline: job %s has no stage built here yet",
                     job);
    else /* more iterations than the runner keeps: all it keeps */
        rc = rt_timeline_snapshot(wk_trainer_timeline(st->trainer),
                                  req->iterations > RT_TIMELINE_ITERATIONS ? 0
                                                                           : (int)req->iterations,
                                  req->last_iteration, &ev, &n, &info, err);
    stage = st->stage;
    replica = st->replica;
    pthread_mutex_unlock(&st->lock);
    SC_CHECK(rc);
    Stagecraft__GetTimelineResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__get_timeline_response__descriptor);
    resp->stage = stage;
    resp->replica = replica;
    resp->iterations = (uint32_t)info.iterations;
    resp->dropped = info.dropped;
    resp->newest_iteration = info.newest_iteration;
    resp->events = sc_rpc_ctx_alloc(ctx, (n ? n : 1) * sizeof *resp->events);
    Stagecraft__TimelineEvent *all = sc_rpc_ctx_alloc(ctx, (n ? n : 1) * sizeof *all);
    if (resp->events == NULL || all == NULL) {
        free(ev);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory answering GetTimeline");
    }
    for (size_t i = 0; i < n; i++) {
        Stagecraft__TimelineEvent *e = &all[i];
        stagecraft__timeline_event__init(e);
        e->kind = (Stagecraft__TimelineEventKind)ev[i].kind;
        e->microbatch = ev[i].mb;
        e->step = ev[i].step;
        e->iteration = ev[i].iteration;
        e->start_ns = ev[i].start_ns;
        e->end_ns = ev[i].end_ns;
        resp->events[i] = e;
    }
    resp->n_events = n;
    free(ev);
    /* the clock sample the caller aligns the events with, as late as possible */
    resp->worker_now_ns = sc_clock_now_ns();
    *out = &resp->base;
    return SC_OK;
}

/* The process's newest log lines (sc_log_keep_lines, set when the worker starts). Touches no
 * worker state: it answers while a stage trains or profiles. */
static sc_status read_log(sc_rpc_ctx *ctx, const ProtobufCMessage *msg, ProtobufCMessage **out,
                          void *user, sc_err *err)
{
    (void)user;
    const Stagecraft__ReadLogRequest *req = (const void *)msg;
    sc_logring *ring = sc_log_ring();
    if (ring == NULL)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED, "ReadLog: this process keeps no log lines");
    sc_logring_line *lines = NULL;
    size_t n = 0;
    uint64_t newest = 0;
    SC_CHECK(sc_logring_read(ring, req->after_seq, req->lines, &lines, &n, &newest, err));
    Stagecraft__ReadLogResponse *resp =
        (void *)sc_rpc_ctx_new_message(ctx, &stagecraft__read_log_response__descriptor);
    resp->lines = sc_rpc_ctx_alloc(ctx, (n ? n : 1) * sizeof *resp->lines);
    Stagecraft__LogLine *all = sc_rpc_ctx_alloc(ctx, (n ? n : 1) * sizeof *all);
    bool ok = resp->lines != NULL && all != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        stagecraft__log_line__init(&all[i]);
        all[i].seq = lines[i].seq;
        all[i].text = sc_rpc_ctx_strdup(ctx, lines[i].text);
        ok = all[i].text != NULL;
        resp->lines[i] = &all[i];
    }
    sc_logring_lines_free(&lines, n);
    if (!ok)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory answering ReadLog");
    resp->n_lines = n;
    resp->newest_seq = newest;
    *out = &resp->base;
    return SC_OK;
}

size_t wk_service_methods(wk_state *st, sc_rpc_method *out, size_t max)
{
    const sc_rpc_method methods[] = {
        {"/stagecraft.Worker/Describe", &stagecraft__describe_request__descriptor,
         &stagecraft__describe_response__descriptor, describe, NULL, st},
        {"/stagecraft.Worker/AssignStage", &stagecraft__assign_stage_request__descriptor,
         &stagecraft__assign_stage_response__descriptor, assign_stage, NULL, st},
        {"/stagecraft.Worker/Profile", &stagecraft__profile_request__descriptor,
         &stagecraft__profile_response__descriptor, profile, NULL, st},
        {"/stagecraft.Worker/Release", &stagecraft__release_request__descriptor,
         &stagecraft__release_response__descriptor, release, NULL, st},
        {"/stagecraft.Worker/ProbeLink", &stagecraft__probe_link_request__descriptor,
         &stagecraft__probe_link_response__descriptor, probe_link, NULL, st},
        {"/stagecraft.Worker/GetTimeline", &stagecraft__get_timeline_request__descriptor,
         &stagecraft__get_timeline_response__descriptor, get_timeline, NULL, st},
        {"/stagecraft.Worker/ReadLog", &stagecraft__read_log_request__descriptor,
         &stagecraft__read_log_response__descriptor, read_log, NULL, st},
    };
    size_t n = sizeof methods / sizeof *methods;
    if (n > max)
        n = max;
    memcpy(out, methods, n * sizeof *methods);
    return n;
}
