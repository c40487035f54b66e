/*
 * wk trainer, the lifecycle of trainer.h: builds the stage's runner from an AssignStage
 * request, reads START and starts the training thread (trainer_loop.c), answers the agent's
 * questions, and stops and frees the trainer.
 *
 * The top of the trainer's files (trainer_internal.h lists them): it calls the others, none of
 * them calls it.
 */
#include "worker/trainer.h"
#include "worker/trainer_internal.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "kernels/threads_cpu.h"
#include "worker/blocks/block_fetch.h"
#include "worker/blocks/block_server.h"
#include "worker/blocks/block_wire.h"
#include "worker/blocks/ckpt_copier.h"
#include "worker/runtime/export_hf.h"
#include "worker/runtime/runner.h"
#include "worker/transport/transport.h"

#define LOG "trainer"
#define WK_TRAINER_QUEUE_MAX 256
#define DATA_TIMEOUT_MS 10000 /* a neighbour silent this long has gone */

static const char *jstr(json_t *o, const char *key, const char *def)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : def;
}

static double jnum(json_t *o, const char *key, double def)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

/* A whole number at o.key within [lo, hi] into *out (def when the key is absent); anything else
 * is SC_ERR_INVALID naming `what` and the valid range. A double outside the range must never
 * reach a cast to an integer type (undefined behaviour), whoever sent it. */
static sc_status jwhole(json_t *o, const char *key, double def, double lo, double hi,
                        const char *what, double *out, sc_err *err)
{
    *out = def; /* defined on every path, also when the caller goes on after an error */
    json_t *v = json_object_get(o, key);
    double x = v == NULL ? def : json_is_number(v) ? json_number_value(v) : NAN;
    if (!(x >= lo && x <= hi) || x != floor(x))
        return SC_ERRF(err, SC_ERR_INVALID, "%s: expected a whole number in [%.0f, %.0f]", what, lo,
                       hi);
    *out = x;
    return SC_OK;
}

/* Replicas of stage s of the plan (1 past the last stage). */
static int replicas_of(json_t *stages, int s)
{
    size_t n = json_array_size(json_object_get(json_array_get(stages, (size_t)s), "devices"));
    return n > 0 ? (int)n : 1;
}

/* The job's "export": DIR and the plan's stage cuts, for the export at the last step. */
static sc_status export_setup(wk_trainer *t, json_t *job, json_t *stages, sc_err *err)
{
    const char *dir = json_string_value(json_object_get(job, "export"));
    if (dir == NULL || dir[0] == '\0')
        return SC_OK;
    sc_strlcpy(t->export_dir, dir, sizeof t->export_dir);
    t->export_cuts = calloc((size_t)t->n_stages + 1, sizeof *t->export_cuts);
    SC_ALLOC_CHECK(t->export_cuts, err);
    for (uint32_t s = 0; s < t->n_stages; s++) {
        json_t *st = json_array_get(stages, s);
        t->export_cuts[s] = (int)json_integer_value(json_object_get(st, "first_block"));
        t->export_cuts[s + 1] = (int)json_integer_value(json_object_get(st, "last_block")) + 1;
    }
    return SC_OK;
}

sc_status wk_trainer_new(wk_trainer **out, const Stagecraft__AssignStageRequest *req,
                         const char *device, const char *bind_host, const char *checkpoint_dir,
                         wk_block_server *blocks, sc_err *err)
{
    *out = NULL;
    json_error_t jerr;
    json_t *job = json_loads(req->job_json ? req->job_json : "", 0, &jerr);
    json_t *plan = json_loads(req->plan_json ? req->plan_json : "", 0, &jerr);
    sc_status rc = SC_OK;
    if (!json_is_object(job) || !json_is_object(plan)) {
        rc = SC_ERRF(err, SC_ERR_INVALID, "AssignStage needs the job spec and the plan as JSON");
        goto out;
    }
    json_t *stages = json_object_get(plan, "stages");
    json_t *data = json_object_get(job, "data"), *opt = json_object_get(job, "optimizer");
    rt_runner_cfg cfg = rt_runner_cfg_default();
    cfg.model_json = req->model_json;
    cfg.n_stages = (int)req->n_stages;
    cfg.stage = (int)req->stage;
    cfg.first_block = (int)req->first_block;
    cfg.last_block = (int)req->last_block;
    cfg.replicas = replicas_of(stages, (int)req->stage);
    cfg.replica = (int)req->replica;
    cfg.prev_replicas = req->stage > 0 ? replicas_of(stages, (int)req->stage - 1) : 1;
    cfg.next_replicas = replicas_of(stages, (int)req->stage + 1);
    /* every stage's copies: pipedream's warm-up of a stage depends on all stages after it */
    int stage_reps[256];
    if (req->n_stages > sizeof stage_reps / sizeof *stage_reps) {
        rc = SC_ERRF(err, SC_ERR_UNSUPPORTED, "the plan has %u stages; at most %zu", req->n_stages,
                     sizeof stage_reps / sizeof *stage_reps);
        goto out;
    }
    for (uint32_t s = 0; s < req->n_stages; s++)
        stage_reps[s] = replicas_of(stages, (int)s);
    cfg.stage_replicas = stage_reps;
    cfg.schedule = jstr(plan, "schedule", "1f1b");
    /* zb1: the W each stage may defer within 1f1b's peak memory ("deferred_w"; absent from
     * older plans: ZB-H1's deferral) */
    int w_defer[256], n_defer = 0;
    for (uint32_t s = 0; s < req->n_stages; s++) {
        json_t *st = json_array_get(stages, s);
        double d;
        if (json_object_get(st, "deferred_w") == NULL)
            break;
        if ((rc = jwhole(st, "deferred_w", 0, 0, INT_MAX, "the plan's stages[].deferred_w", &d,
                         err)) != SC_OK)
            goto out;
        w_defer[n_defer++] = (int)d;
    }
    cfg.zb1_defer = n_defer == (int)req->n_stages ? w_defer : NULL;
    /* UMPIPE plans: each stage cuts the batch into its own sizes (fill-drain order); the
     * neighbours' cuts tell the runner how to re-slice activations and gradients between them.
     * Rows 0..2: the previous, this and the next stage's forward sizes ("sizes"); rows 3, 4: this
     * and the next stage's backward sizes ("backward_sizes", absent from older plans: then the
     * backward runs in the forward cut, as before). */
    int sizes[5][256], n_sizes[5] = {0, 0, 0, 0, 0};
    json_t *mbs = json_object_get(plan, "microbatches");
    json_t *rows = json_object_get(mbs, "sizes"), *brows = json_object_get(mbs, "backward_sizes");
    bool unequal = strcmp(cfg.schedule, "unequal") == 0;
    for (int k = 0; unequal && k < 5; k++) {
        long s = (long)req->stage + (k < 3 ? k - 1 : k - 3);
        json_t *row = s >= 0 ? json_array_get(k < 3 ? rows : brows, (size_t)s) : NULL;
        size_t n = json_array_size(row);
        if (n > sizeof sizes[k] / sizeof *sizes[k]) {
            rc = SC_ERRF(err, SC_ERR_UNSUPPORTED,
                         "stage %ld of the plan has %zu %s micro-batches; at most %zu", s, n,
                         k < 3 ? "forward" : "backward", sizeof sizes[k] / sizeof *sizes[k]);
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            /* not a positive int (a string, 0, 2^32 + 2): -1, which the runner refuses by name */
            json_int_t v = json_integer_value(json_array_get(row, i));
            sizes[k][i] = v >= 1 && v <= INT_MAX ? (int)v : -1;
        }
        n_sizes[k] = (int)n;
    }
    if (unequal && n_sizes[1] == 0) {
        rc = SC_ERRF(err, SC_ERR_INVALID, "the plan's unequal schedule gives stage %u no sizes",
                     req->stage);
        goto out;
    }
    if (unequal) {
        cfg.microbatch_sizes = sizes[1];
        if (n_sizes[0] > 0) {
            cfg.prev_sizes = sizes[0];
            cfg.n_prev_sizes = n_sizes[0];
        }
        if (n_sizes[2] > 0) {
            cfg.next_sizes = sizes[2];
            cfg.n_next_sizes = n_sizes[2];
        }
        if (n_sizes[3] > 0) {
            cfg.backward_sizes = sizes[3];
            cfg.n_backward_sizes = n_sizes[3];
        }
        if (n_sizes[4] > 0) {
            cfg.next_backward_sizes = sizes[4];
            cfg.n_next_backward_sizes = n_sizes[4];
        }
    }
    double batch, count, seed;
    if ((rc = jwhole(job, "batch_size", 8, 1, INT_MAX, "the job's batch_size", &batch, err)) !=
            SC_OK ||
        (rc = jwhole(json_object_get(plan, "microbatches"), "count", 1, 1, INT_MAX,
                     "the plan's microbatches.count", &count, err)) != SC_OK ||
        (rc = jwhole(job, "seed", 1, 0, 9007199254740992.0, "the job's seed", &seed, err)) != SC_OK)
        goto out;
    /* sliced: the warm-up micro-batches the planner chose to halve (absent: the runner's
     * default, stages - 1) */
    json_t *mbs_obj = json_object_get(plan, "microbatches");
    if (strcmp(cfg.schedule, "sliced") == 0 && json_object_get(mbs_obj, "sliced") != NULL) {
        double k;
        if ((rc = jwhole(mbs_obj, "sliced", 0, 0, count, "the plan's microbatches.sliced", &k,
                         err)) != SC_OK)
            goto out;
        cfg.sliced_warmup = (int)k;
    }
    /* the model's frozen prefix (absent: none); the runner checks it against the model */
    double frozen;
    if ((rc = jwhole(plan, "frozen_blocks", 0, 0, INT_MAX, "the plan's frozen_blocks", &frozen,
                     err)) != SC_OK)
        goto out;
    cfg.frozen_blocks = (int)frozen;
    /* the gradient norms feed the freezing policy alone: absent or "off", none are computed */
    json_t *freeze = json_object_get(job, "freeze");
    cfg.skip_grad_norms =
        freeze == NULL || (json_is_string(freeze) && strcmp(json_string_value(freeze), "off") == 0);
    cfg.batch_size = (int)batch;
    cfg.microbatches = unequal ? n_sizes[1] : (int)count;
    cfg.seed = (uint64_t)seed;
    cfg.data_kind = jstr(data, "kind", "synthetic");
    cfg.data_path = jstr(data, "path", NULL);
    cfg.optimizer = jstr(opt, "kind", "adamw");
    /* resolved by the coordinator for every stage alike (absent from older ones: fp32) */
    cfg.precision = jstr(plan, "precision", "fp32");
    /* fp16's loss scale (the job's "loss_scale", checked at submit; absent: the defaults) */
    json_t *scale = json_object_get(job, "loss_scale");
    cfg.loss_scale_init = jnum(scale, "initial", 0.0);
    cfg.loss_scale_interval = (int)jnum(scale, "interval", 0.0);
    cfg.lr = jnum(opt, "lr", 3e-4);
    cfg.weight_decay = jnum(opt, "weight_decay", 0.0);
    cfg.momentum = jnum(opt, "momentum", 0.9);
    cfg.device = device;
    /* zmq or nccl, as the coordinator chose for the job (the service checked it); an nccl
     * stage binds no socket, the runner creates its communicator ids instead */
    cfg.transport =
        (req->transport != NULL && strcmp(req->transport, "nccl") == 0) ? "nccl" : "zmq";
    if (req->transport_next != NULL && req->transport_next[0] != '\0')
        cfg.transport_next = strcmp(req->transport_next, "nccl") == 0 ? "nccl" : "zmq";
    /* the copies' all-reduce, as the coordinator chose (the service checked it) */
    cfg.replica_reduce =
        req->replica_reduce != NULL && strcmp(req->replica_reduce, "nccl") == 0 ? "nccl" : "host";
    char bind[300];
    snprintf(bind, sizeof bind, "tcp://%s:0", bind_host);
    cfg.bind_endpoint = bind;
    cfg.timeout_ms = DATA_TIMEOUT_MS;
    /* messages of another job (or an older assignment of this one) are dropped */
    uint64_t tag = 1469598103934665603ull;
    for (const char *p = req->job_id; *p; p++)
        tag = (tag ^ (unsigned char)*p) * 1099511628211ull;
    cfg.tag = tag ^ req->resume_step;

    wk_trainer *t = calloc(1, sizeof *t);
    if (t == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        goto out;
    }
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->resume, NULL);
    t->blocks = blocks;
    sc_strlcpy(t->job_id, req->job_id, sizeof t->job_id);
    t->stage = req->stage;
    t->first_block = cfg.first_block;
    t->last_block = cfg.last_block;
    t->frozen_blocks = cfg.frozen_blocks;
    t->n_stages = req->n_stages;
    t->replica = req->replica;
    snprintf(t->checkpoint_dir, sizeof t->checkpoint_dir, "%s/%s", checkpoint_dir, req->job_id);
    t->model_json = strdup(req->model_json ? req->model_json : "");
    if (t->model_json == NULL) {
        wk_trainer_destroy(&t);
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        goto out;
    }
    rc = export_setup(t, job, stages, err);
    if (rc == SC_OK)
        rc = rt_runner_new(&t->runner, &cfg, err);
    if (rc != SC_OK) {
        wk_trainer_destroy(&t);
        goto out;
    }
    *out = t;
out:
    json_decref(job);
    json_decref(plan);
    return rc;
}

const char *wk_trainer_endpoint(const wk_trainer *t)
{
    return rt_runner_endpoint(t->runner);
}

uint64_t wk_trainer_step(const wk_trainer *t)
{
    return atomic_load(&t->step);
}

/* START's "checkpoint_copies" (absent: none): per stage, the block server of its writer
 * ("source") and of the workers that hold copies ("holders"); a copier for the stages whose
 * holders name this worker's block server. Malformed entries are refused, naming the entry. */
static sc_status copies_from(wk_trainer *t, json_t *list, sc_err *err)
{
    if (list == NULL)
        return SC_OK;
    if (!json_is_array(list))
        return SC_ERRF(err, SC_ERR_INVALID, "START: checkpoint_copies must be an array");
    const char *self = t->blocks != NULL ? wk_block_server_endpoint(t->blocks) : NULL;
    sc_status rc = SC_OK;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        double stage, first, last;
        json_t *holders = json_object_get(e, "holders");
        const char *source = json_string_value(json_object_get(e, "source"));
        char what[64];
        sc_strfmt(what, sizeof what, "START: checkpoint_copies[%zu]", i);
        if (!json_is_object(e) || source == NULL || !json_is_array(holders))
            return SC_ERRF(err, SC_ERR_INVALID,
                           "%s: expected {\"stage\", \"first_block\", \"last_block\", "
                           "\"source\", \"holders\"}",
                           what);
        if ((rc = jwhole(e, "stage", -1, 0, (double)t->n_stages - 1, what, &stage, err)) != SC_OK ||
            (rc = jwhole(e, "first_block", -1, 0, WK_BLOCKS_MAX, what, &first, err)) != SC_OK ||
            (rc = jwhole(e, "last_block", -1, first, WK_BLOCKS_MAX, what, &last, err)) != SC_OK)
            return rc;
        for (size_t k = 0; self != NULL && k < json_array_size(holders); k++) {
            const char *h = json_string_value(json_array_get(holders, k));
            if (h == NULL || strcmp(h, self) != 0)
                continue;
            if (t->copier == NULL && (rc = wk_copier_new(&t->copier, t->job_id, t->checkpoint_dir,
                                                         t->model_json, err)) != SC_OK)
                return rc;
            if ((rc = wk_copier_add(t->copier, (uint32_t)stage, (uint32_t)k, source, (int)first,
                                    (int)last, err)) != SC_OK) {
                sc_err_prefix(err, "%s", what);
                return rc;
            }
        }
    }
    return t->copier != NULL ? wk_copier_start(t->copier, err) : SC_OK;
}

static void *train_thread(void *arg)
{
    wk_trainer *t = arg;
    wk_trainer_train(t);
    atomic_store(&t->ended, true);
    return NULL;
}

sc_status wk_trainer_start(wk_trainer *t, const char *payload_json, sc_err *err)
{
    if (t->started)
        return SC_ERRF(err, SC_ERR_PRECONDITION, "training of job %s already started", t->job_id);
    json_error_t jerr;
    json_t *p = json_loads(payload_json ? payload_json : "", 0, &jerr);
    json_t *eps = json_object_get(p, "stage_endpoints");
    if (!json_is_array(eps) || json_array_size(eps) != t->n_stages) {
        json_decref(p);
        return SC_ERRF(err, SC_ERR_INVALID, "START needs the %u stages' data endpoints",
                       t->n_stages);
    }
    /* each stage's entry lists its replicas' endpoints, in replica order */
    for (size_t i = 0; i < t->n_stages; i++) {
        json_t *e = json_array_get(eps, i);
        if (json_is_string(e)) { /* one replica, given bare */
            json_array_set_new(eps, i, json_pack("[O]", e));
            e = json_array_get(eps, i);
        }
        for (size_t k = 0; k < json_array_size(e); k++) {
            if (!json_is_string(json_array_get(e, k))) {
                json_decref(p);
                return SC_ERRF(err, SC_ERR_INVALID,
                               "START: stage %zu replica %zu has no data endpoint", i, k);
            }
        }
        if (!json_is_array(e) || json_array_size(e) == 0) {
            json_decref(p);
            return SC_ERRF(err, SC_ERR_INVALID, "START: stage %zu has no data endpoints", i);
        }
    }
    double steps, resume, every, keep, run, last_ckpt;
    sc_status rc;
    if ((rc = jwhole(p, "steps", 0, 0, 9007199254740992.0, "START: steps", &steps, err)) != SC_OK ||
        (rc = jwhole(p, "resume_step", 0, 0, steps, "START: resume_step", &resume, err)) != SC_OK ||
        (rc = jwhole(p, "checkpoint_every", 0, 0, 9007199254740992.0, "START: checkpoint_every",
                     &every, err)) != SC_OK ||
        /* absent (an older coordinator, which never says which step is complete): keep all */
        (rc = jwhole(p, "checkpoint_keep", 0, 0, 9007199254740992.0, "START: checkpoint_keep",
                     &keep, err)) != SC_OK ||
        (rc = jwhole(p, "run", 0, 0, 9007199254740992.0, "START: run", &run, err)) != SC_OK ||
        /* a rebalance resumes after a step that is no checkpoint (absent: resume_step is one) */
        (rc = jwhole(p, "last_checkpoint", resume, 0, resume, "START: last_checkpoint", &last_ckpt,
                     err)) != SC_OK) {
        json_decref(p);
        return rc;
    }
    json_t *sources = json_object_get(p, "state_sources");
    for (size_t i = 0; i < json_array_size(sources); i++) {
        if (!json_is_string(json_array_get(sources, i))) {
            json_decref(p);
            return SC_ERRF(err, SC_ERR_INVALID,
                           "START: state_sources[%zu] is not an endpoint string", i);
        }
    }
    if (sources != NULL && !json_is_array(sources)) {
        json_decref(p);
        return SC_ERRF(err, SC_ERR_INVALID, "START: state_sources must be an array of endpoints");
    }
    if ((rc = copies_from(t, json_object_get(p, "checkpoint_copies"), err)) != SC_OK) {
        json_decref(p);
        return rc;
    }
    t->sources = json_incref(sources);
    t->endpoints = json_incref(eps);
    t->steps = (uint64_t)steps;
    t->resume_step = (uint64_t)resume;
    t->last_checkpoint = (uint64_t)last_ckpt;
    t->checkpoint_every = (uint64_t)every;
    t->checkpoint_keep = (uint64_t)keep;
    t->run = (uint64_t)run;
    json_decref(p);
    atomic_store(&t->step, t->resume_step);
    if (pthread_create(&t->thread, NULL, train_thread, t) != 0)
        return SC_ERRF(err, SC_ERR_INTERNAL, "cannot start the training thread");
    t->started = true;
    char frozen[96] = "";
    if (t->frozen_blocks > t->first_block)
        snprintf(frozen, sizeof frozen, "; blocks %d-%d frozen (forward only)", t->first_block,
                 t->frozen_blocks - 1 < t->last_block ? t->frozen_blocks - 1 : t->last_block);
    SC_LOG_INFO(LOG, "training stage %u replica %u of job %s: steps %llu..%llu%s", t->stage,
                t->replica, t->job_id, (unsigned long long)t->resume_step + 1,
                (unsigned long long)t->steps, frozen);
    return SC_OK;
}

uint64_t wk_start_run(const char *payload_json)
{
    json_t *p = payload_json != NULL ? json_loads(payload_json, 0, NULL) : NULL;
    double run = 0;
    sc_err ignored;
    sc_err_clear(&ignored);
    if (!json_is_object(p) ||
        jwhole(p, "run", 0, 0, 9007199254740992.0, "START: run", &run, &ignored) != SC_OK)
        run = 0;
    json_decref(p);
    return (uint64_t)run;
}

sc_status wk_trainer_checkpoint_complete(wk_trainer *t, uint64_t step, sc_err *err)
{
    if (t->checkpoint_keep == 0)
        return SC_OK;
    sc_status copies = wk_copier_complete(t->copier, step, t->checkpoint_keep, err);
    if (t->replica != 0)
        return copies; /* copy 0 writes (and so deletes) the stage's checkpoints */
    size_t deleted = 0;
    sc_status rc = rt_checkpoint_prune(t->checkpoint_dir, (int)t->stage, step, t->checkpoint_keep,
                                       &deleted, err);
    if (deleted > 0)
        SC_LOG_DEBUG(LOG,
                     "job %s stage %u: step %llu is complete; %zu older checkpoint(s) "
                     "deleted, keeping %llu",
                     t->job_id, t->stage, (unsigned long long)step, deleted,
                     (unsigned long long)t->checkpoint_keep);
    return rc;
}

struct rt_timeline *wk_trainer_timeline(wk_trainer *t)
{
    return rt_runner_timeline(t->runner);
}

/* Tells the thread to stop: the flag it checks between steps, and an abort of the step in
 * flight (its waits for the neighbours return). */
static void tell_stop(wk_trainer *t)
{
    pthread_mutex_lock(&t->lock);
    atomic_store(&t->stop, true);
    pthread_cond_broadcast(&t->resume);
    pthread_mutex_unlock(&t->lock);
    if (t->runner)
        rt_runner_abort(t->runner);
}

/* Frees a trainer whose thread has been joined (or never started). */
static void trainer_free(wk_trainer **tp)
{
    wk_trainer *t = *tp;
    wk_copier_destroy(&t->copier);
    rt_runner_destroy(&t->runner);
    free(t->model_json);
    json_decref(t->endpoints);
    json_decref(t->sources);
    free(t->export_cuts);
    wk_trainer_msg m;
    while (wk_trainer_pop(t, &m))
        wk_trainer_msg_clear(&m);
    pthread_cond_destroy(&t->resume);
    pthread_mutex_destroy(&t->lock);
    free(t);
    *tp = NULL;
}

void wk_trainer_destroy(wk_trainer **tp)
{
    if (tp == NULL || *tp == NULL)
        return;
    wk_trainer *t = *tp;
    tell_stop(t);
    if (t->started)
        pthread_join(t->thread, NULL);
    trainer_free(tp);
}

sc_status wk_trainer_stop_within(wk_trainer **tp, int timeout_ms, sc_err *err)
{
    if (tp == NULL || *tp == NULL)
        return SC_OK;
    wk_trainer *t = *tp;
    tell_stop(t);
    for (int waited = 0; t->started && !atomic_load(&t->ended) && waited < timeout_ms; waited += 10)
        usleep(10 * 1000);
    if (t->started && !atomic_load(&t->ended))
        return SC_ERRF(err, SC_ERR_TIMEOUT,
                       "the stage of job %s (stage %u) did not stop within %d ms: its step does "
                       "not return (stuck in a kernel?)",
                       t->job_id, t->stage, timeout_ms);
    wk_trainer_destroy(tp); /* the thread has ended: the join returns at once */
    return SC_OK;
}

uint64_t wk_trainer_stop_ms(const wk_trainer *t)
{
    uint64_t three = 3 * atomic_load(&t->iteration_us) / 1000;
    return three > WK_TRAINER_STOP_MS ? three : WK_TRAINER_STOP_MS;
}

bool wk_trainer_ended(const wk_trainer *t)
{
    return !t->started || atomic_load(&t->ended);
}

bool wk_trainer_reap(wk_trainer **tp)
{
    if (tp == NULL || *tp == NULL)
        return true;
    if ((*tp)->started && !atomic_load(&(*tp)->ended))
        return false;
    wk_trainer_destroy(tp);
    return true;
}
