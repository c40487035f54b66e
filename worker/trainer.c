/* Training of one assigned stage (see trainer.h). */
#include "worker/trainer.h"

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
#define QUEUE_MAX 256
#define DATA_TIMEOUT_MS 10000 /* a neighbour silent this long has gone */
#define FETCH_TIMEOUT_MS 10000 /* a block server silent this long is skipped */

struct wk_trainer {
    rt_runner *runner;
    char job_id[64];
    uint32_t stage, n_stages, replica;
    int first_block, last_block, frozen_blocks; /* the stage's blocks; the model's frozen prefix */
    char checkpoint_dir[1100];
    json_t *endpoints; /* per stage, its replicas' data endpoints (from START) */
    uint64_t steps, resume_step, checkpoint_every;
    uint64_t last_checkpoint; /* the job's newest complete checkpoint at START (<= resume_step) */
    uint64_t run;             /* the START payload's "run": stamped on every report and error */
    uint64_t checkpoint_keep; /* complete checkpoints kept (0: all); set by START */
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_bool ended;    /* the thread has returned (wk_trainer_stop_within, wk_trainer_reap) */
    _Atomic uint64_t iteration_us; /* the last step's measured time (wk_trainer_stop_ms) */
    uint64_t hang_after;  /* a test's fault: steps after which the step hangs (0: none) */
    _Atomic uint64_t step;
    /* A move (COMMAND_REBALANCE): the step after which training pauses, 0 for none; the paused
     * thread waits on `resume` (under `lock`) for a later step or the stop. */
    _Atomic uint64_t pause_after;
    pthread_cond_t resume;
    wk_block_server *blocks; /* where a paused stage keeps its state (may be NULL) */
    json_t *sources;         /* START's "state_sources": block servers to resume from, or NULL */
    wk_copier *copier;       /* copies of other stages' checkpoints held here, or NULL */
    char *model_json;        /* the job's model, for the copier */
    /* the job's "export": DIR, "" for none; the plan's stage cuts (n_stages + 1 first blocks) */
    char export_dir[1100];
    int *export_cuts;

    pthread_mutex_t lock; /* guards the queue */
    wk_trainer_msg queue[QUEUE_MAX];
    size_t head, count;
};

static void push(wk_trainer *t, wk_trainer_msg *m)
{
    pthread_mutex_lock(&t->lock);
    if (t->count == QUEUE_MAX) { /* the control loop is behind: drop the oldest report */
        wk_trainer_msg_clear(&t->queue[t->head]);
        t->head = (t->head + 1) % QUEUE_MAX;
        t->count--;
    }
    m->run = t->run;
    m->report.run = t->run;
    t->queue[(t->head + t->count) % QUEUE_MAX] = *m;
    t->count++;
    pthread_mutex_unlock(&t->lock);
}

bool wk_trainer_pop(wk_trainer *t, wk_trainer_msg *out)
{
    pthread_mutex_lock(&t->lock);
    bool any = t->count > 0;
    if (any) {
        *out = t->queue[t->head];
        t->head = (t->head + 1) % QUEUE_MAX;
        t->count--;
    }
    pthread_mutex_unlock(&t->lock);
    return any;
}

void wk_trainer_msg_clear(wk_trainer_msg *m)
{
    free(m->report.grad_l1_per_block);
    m->report.grad_l1_per_block = NULL;
    m->report.n_grad_l1_per_block = 0;
    if (m->report.checkpoint_error != protobuf_c_empty_string)
        free(m->report.checkpoint_error);
    m->report.checkpoint_error = NULL;
    free(m->report.checkpoint_copies); /* one block: the pointers, then the messages */
    m->report.checkpoint_copies = NULL;
    m->report.n_checkpoint_copies = 0;
    free(m->report.links); /* one block, as the copies */
    m->report.links = NULL;
    m->report.n_links = 0;
    free(m->report.reduce); /* one block: the timing, the peers' pointers, the peers */
    m->report.reduce = NULL;
}

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

static void push_error(wk_trainer *t, sc_status code, const char *fmt, const char *msg)
{
    wk_trainer_msg m;
    memset(&m, 0, sizeof m);
    m.is_error = true;
    m.code = code;
    sc_strfmt(m.error, sizeof m.error, fmt, msg);
    SC_LOG_WARN(LOG, "%s", m.error);
    push(t, &m);
}

static sc_status fetch_stage(wk_trainer *t, uint64_t step, rt_stage_image *im, wk_fetch_stats *fs,
                             sc_err *err);

/* At most this many older steps are tried after the resume step's state did not load: each may
 * ask every source, and one that is silent costs FETCH_TIMEOUT_MS. */
#define OLDER_STEPS_MAX 32

static int step_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Whether this stage loads the state of `step` (into the runner): its own checkpoint file when
 * `own_file`, else the blocks of that step from the job's state sources, whichever stage or
 * worker saved them. `why` gets the reason it does not. */
static bool older_step_loads(wk_trainer *t, uint64_t step, bool own_file, sc_err *why)
{
    sc_err_clear(why);
    if (own_file && rt_runner_load(t->runner, t->checkpoint_dir, step, why) == SC_OK)
        return true;
    if (json_array_size(t->sources) == 0 && t->blocks == NULL)
        return false;
    rt_stage_image im;
    wk_fetch_stats fs;
    sc_err fetch;
    sc_err_clear(&fetch);
    bool ok = fetch_stage(t, step, &im, &fs, &fetch) == SC_OK &&
              rt_runner_load_image(t->runner, &im, "the blocks taken over", &fetch) == SC_OK;
    rt_stage_image_clear(&im);
    if (!ok && !own_file)
        *why = fetch;
    else if (!ok)
        sc_strfmt(why->msg + strlen(why->msg), sizeof why->msg - strlen(why->msg),
                  "; from the other workers: %s", fetch.msg);
    return ok;
}

/* The checkpoint of the resume step did not load (`why`): finds the newest older step whose
 * state of this stage's blocks loads, from this worker's own files or from any worker that
 * holds them (a re-plan may have given this stage to a worker that never ran it), and reports
 * both steps, so that the coordinator can resume every stage from an older step instead of
 * failing the job. Steps tried: this stage's own files and the job's checkpoint steps (the
 * multiples of checkpoint_every), newest first, at most OLDER_STEPS_MAX. */
static void push_resume_error(wk_trainer *t, const sc_err *why)
{
    uint64_t *own = NULL, intact = 0;
    size_t n_own = 0;
    sc_err err;
    sc_err_clear(&err);
    rt_checkpoint_list(t->checkpoint_dir, (int)t->stage, &own, &n_own, &err);
    uint64_t tries[OLDER_STEPS_MAX * 2];
    size_t n = 0;
    for (size_t i = 0; i < n_own && n < OLDER_STEPS_MAX; i++)
        if (own[i] < t->resume_step)
            tries[n++] = own[i];
    if (t->checkpoint_every > 0 && t->resume_step > 0)
        for (uint64_t s = (t->resume_step - 1) / t->checkpoint_every * t->checkpoint_every;
             s > 0 && n < 2 * OLDER_STEPS_MAX; s -= t->checkpoint_every) {
            bool listed = false;
            for (size_t i = 0; i < n && !listed; i++)
                listed = tries[i] == s;
            if (!listed)
                tries[n++] = s;
        }
    qsort(tries, n, sizeof *tries, step_desc);
    for (size_t i = 0; i < n && i < OLDER_STEPS_MAX && intact == 0; i++) {
        bool own_file = false;
        for (size_t j = 0; j < n_own && !own_file; j++)
            own_file = own[j] == tries[i];
        if (older_step_loads(t, tries[i], own_file, &err))
            intact = tries[i];
        else
            SC_LOG_WARN(LOG, "older checkpoint of step %llu does not load either: %s",
                        (unsigned long long)tries[i], err.msg);
    }
    free(own);
    wk_trainer_msg m;
    memset(&m, 0, sizeof m);
    m.is_error = true;
    m.code = why->code;
    m.checkpoint_step = t->resume_step;
    m.intact_checkpoint_step = intact;
    if (intact > 0)
        sc_strfmt(m.error, sizeof m.error,
                  "the checkpoint of step %llu does not load: %s; the newest older checkpoint of "
                  "stage %u that loads is step %llu",
                  (unsigned long long)t->resume_step, why->msg, t->stage,
                  (unsigned long long)intact);
    else
        sc_strfmt(m.error, sizeof m.error,
                  "the checkpoint of step %llu does not load: %s; no older checkpoint of stage %u "
                  "loads",
                  (unsigned long long)t->resume_step, why->msg, t->stage);
    SC_LOG_WARN(LOG, "%s", m.error);
    push(t, &m);
}

static sc_status make_dirs(const char *path, sc_err *err)
{
    char tmp[1100];
    sc_strlcpy(tmp, path, sizeof tmp);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0700);
            *p = '/';
        }
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return SC_ERRF(err, SC_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    return SC_OK;
}

/* Endpoints of stage s's replicas as a C array (borrowed strings); *n = 0 outside the pipeline. */
static const char **stage_endpoints(wk_trainer *t, long s, int *n)
{
    *n = 0;
    if (s < 0 || s >= (long)t->n_stages)
        return NULL;
    json_t *e = json_array_get(t->endpoints, (size_t)s);
    size_t k = json_array_size(e);
    const char **list = calloc(k ? k : 1, sizeof *list);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < k; i++)
        list[i] = json_string_value(json_array_get(e, i));
    *n = (int)k;
    return list;
}

static sc_status connect_all(wk_trainer *t, sc_err *err)
{
    int n_prev, n_next, n_peers;
    const char **prev = stage_endpoints(t, (long)t->stage - 1, &n_prev);
    const char **next = stage_endpoints(t, (long)t->stage + 1, &n_next);
    const char **peers = stage_endpoints(t, (long)t->stage, &n_peers);
    sc_status rc = rt_runner_connect_group(t->runner, prev, n_prev, next, n_next, peers,
                                           n_peers > 1 ? n_peers : 0, err);
    free(prev);
    free(next);
    free(peers);
    return rc;
}

/* A report of this stage after `step`, its other figures zero. */
static void report_init(const wk_trainer *t, uint64_t step, wk_trainer_msg *m)
{
    memset(m, 0, sizeof *m);
    stagecraft__iteration_report__init(&m->report);
    m->report.stage = t->stage;
    m->report.replica = t->replica;
    m->report.step = step;
}

/* Puts the copies this worker holds of other stages' checkpoints in report r (none when there
 * are none or memory is short: the coordinator keeps what it last heard). */
static void report_copies(wk_trainer *t, Stagecraft__IterationReport *r)
{
    wk_copy_held held[WK_COPIER_MAX];
    size_t n = wk_copier_held(t->copier, held, WK_COPIER_MAX);
    if (n == 0)
        return;
    char *block =
        malloc(n * (sizeof(Stagecraft__CheckpointCopy *) + sizeof(Stagecraft__CheckpointCopy)));
    if (block == NULL)
        return;
    Stagecraft__CheckpointCopy **ptrs = (Stagecraft__CheckpointCopy **)block;
    Stagecraft__CheckpointCopy *msgs =
        (Stagecraft__CheckpointCopy *)(block + n * sizeof(Stagecraft__CheckpointCopy *));
    for (size_t i = 0; i < n; i++) {
        stagecraft__checkpoint_copy__init(&msgs[i]);
        msgs[i].stage = held[i].stage;
        msgs[i].copy = held[i].copy;
        msgs[i].step = held[i].step;
        ptrs[i] = &msgs[i];
    }
    r->checkpoint_copies = ptrs;
    r->n_checkpoint_copies = n;
}

/* The kernel's boot id: workers that report the same one read one monotonic clock, so the
 * delays their links measure are transits as they stand ("" where it cannot be read). */
static char g_clock_id[48];
static pthread_once_t g_clock_once = PTHREAD_ONCE_INIT;

static void clock_id_read(void)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f == NULL)
        return;
    if (fgets(g_clock_id, sizeof g_clock_id, f) == NULL)
        g_clock_id[0] = '\0';
    g_clock_id[strcspn(g_clock_id, "\n")] = '\0';
    fclose(f);
}

/* Puts the step's transfer figures (rt_report.links) in report r (none when memory is short). */
static void report_links(const rt_report *rep, Stagecraft__IterationReport *r)
{
    pthread_once(&g_clock_once, clock_id_read);
    r->clock_id = g_clock_id; /* static: never freed */
    size_t n = rep->n_links > 0 ? (size_t)rep->n_links : 0;
    if (n == 0)
        return;
    char *block =
        malloc(n * (sizeof(Stagecraft__LinkTransfer *) + sizeof(Stagecraft__LinkTransfer)));
    if (block == NULL)
        return;
    Stagecraft__LinkTransfer **ptrs = (Stagecraft__LinkTransfer **)block;
    Stagecraft__LinkTransfer *msgs =
        (Stagecraft__LinkTransfer *)(block + n * sizeof(Stagecraft__LinkTransfer *));
    for (size_t i = 0; i < n; i++) {
        const rt_link_sample *l = &rep->links[i];
        stagecraft__link_transfer__init(&msgs[i]);
        msgs[i].from_next = l->from_next;
        msgs[i].from_replica = l->from_copy > 0 ? (uint32_t)l->from_copy : 0;
        msgs[i].messages = l->messages;
        msgs[i].clean = l->clean;
        msgs[i].bytes = l->bytes;
        msgs[i].delay_s = l->delay_s;
        ptrs[i] = &msgs[i];
    }
    r->links = ptrs;
    r->n_links = n;
}

/* Puts the step's all-reduce figures (rt_report.reduce) in report r (none when nothing was
 * measured or memory is short). */
static void report_reduce(const rt_report *rep, Stagecraft__IterationReport *r)
{
    const rt_reduce_sample *x = &rep->reduce;
    if (x->count == 0)
        return;
    size_t n = x->n_peers > 0 ? (size_t)x->n_peers : 0;
    char *block = malloc(sizeof(Stagecraft__ReduceTiming) +
                         n * (sizeof(Stagecraft__ReducePeer *) + sizeof(Stagecraft__ReducePeer)));
    if (block == NULL)
        return;
    Stagecraft__ReduceTiming *t = (Stagecraft__ReduceTiming *)block;
    Stagecraft__ReducePeer **ptrs = (Stagecraft__ReducePeer **)(block + sizeof *t);
    Stagecraft__ReducePeer *peers = (Stagecraft__ReducePeer *)(block + sizeof *t + n * sizeof *ptrs);
    stagecraft__reduce_timing__init(t);
    t->count = x->count;
    t->bytes = x->bytes;
    t->own_s = x->own_s;
    for (size_t i = 0; i < n; i++) {
        stagecraft__reduce_peer__init(&peers[i]);
        peers[i].copy = (uint32_t)x->peer_copy[i];
        peers[i].delay_s = x->peer_delay_s[i];
        ptrs[i] = &peers[i];
    }
    t->peers = n > 0 ? ptrs : NULL;
    t->n_peers = n;
    r->reduce = t;
}

/* Builds this stage's image of `step` from the block servers of the job's state sources, this
 * worker's own first (the blocks it kept when it paused stay there). wk_blocks_fetch's errors;
 * SC_ERR_NOT_FOUND when there is no source. */
static sc_status fetch_stage(wk_trainer *t, uint64_t step, rt_stage_image *im, wk_fetch_stats *fs,
                             sc_err *err)
{
    memset(im, 0, sizeof *im);
    size_t n = json_array_size(t->sources);
    const char *self = t->blocks != NULL ? wk_block_server_endpoint(t->blocks) : NULL;
    const char **src = calloc(n + 1, sizeof *src);
    SC_ALLOC_CHECK(src, err);
    size_t k = 0;
    if (self != NULL)
        src[k++] = self;
    for (size_t i = 0; i < n; i++) {
        const char *e = json_string_value(json_array_get(t->sources, i));
        if (e != NULL && (self == NULL || strcmp(e, self) != 0))
            src[k++] = e;
    }
    const struct kn_model *model = rt_runner_model(t->runner);
    int first = rt_runner_first_block(t->runner), last = rt_runner_last_block(t->runner);
    sc_status rc = k == 0 ? SC_ERRF(err, SC_ERR_NOT_FOUND, "no worker to ask for its blocks")
                          : wk_blocks_fetch(src, k, t->job_id, step, model, first, last,
                                            FETCH_TIMEOUT_MS, self != NULL, im, fs, err);
    free(src);
    return rc;
}

/* Loads the state of the resume step: this stage's own checkpoint when it has one of the same
 * blocks, else the blocks taken over from the workers START named (state_sources): the stage
 * paused there for a move, their checkpoint files after a re-plan, or the copies they hold of
 * lost or corrupt checkpoints (ckpt_copier.h). */
static sc_status resume(wk_trainer *t, sc_err *err)
{
    sc_err own;
    sc_err_clear(&own);
    if (rt_runner_load(t->runner, t->checkpoint_dir, t->resume_step, &own) == SC_OK) {
        SC_LOG_INFO(LOG, "job %s stage %u: resumed from its own checkpoint of step %llu",
                    t->job_id, t->stage, (unsigned long long)t->resume_step);
        return SC_OK;
    }
    size_t n = json_array_size(t->sources);
    if (n == 0 ||
        (own.code != SC_ERR_NOT_FOUND && own.code != SC_ERR_INVALID && own.code != SC_ERR_PARSE)) {
        *err = own;
        return own.code;
    }
    if (own.code == SC_ERR_PARSE)
        SC_LOG_WARN(LOG, "job %s stage %u: %s; asking the other workers for a copy", t->job_id,
                    t->stage, own.msg);
    rt_stage_image im;
    wk_fetch_stats fs;
    sc_status rc = fetch_stage(t, t->resume_step, &im, &fs, err);
    if (rc != SC_OK && own.code == SC_ERR_PARSE) { /* the own file's fault is the news */
        SC_LOG_WARN(LOG, "job %s stage %u: no copy either: %s", t->job_id, t->stage, err->msg);
        *err = own;
        sc_err_prefix(err, "no other worker holds an intact copy either");
        rc = own.code;
    }
    if (rc == SC_OK) {
        int first = rt_runner_first_block(t->runner), last = rt_runner_last_block(t->runner);
        rc = rt_runner_load_image(t->runner, &im, "the blocks taken over", err);
        if (rc == SC_OK)
            SC_LOG_INFO(LOG,
                        "job %s stage %u: took blocks %d-%d of step %llu over: %.0f bytes "
                        "from other workers, %.0f kept here, in %d piece(s), %.3f s",
                        t->job_id, t->stage, first, last, (unsigned long long)t->resume_step,
                        fs.bytes - fs.local_bytes, fs.local_bytes, fs.pieces, fs.seconds);
    }
    rt_stage_image_clear(&im);
    /* A checkpoint taken over (a re-plan, or a copy of a lost worker's) becomes this stage's
     * own, so that it is here should the workers it came from go too; never over a file of
     * another block range of that name (an older plan's), which other stages may still take
     * their blocks from. */
    if (rc == SC_OK && t->resume_step == t->last_checkpoint && t->replica == 0 &&
        (own.code == SC_ERR_NOT_FOUND || own.code == SC_ERR_PARSE)) {
        sc_err why;
        sc_err_clear(&why);
        if (make_dirs(t->checkpoint_dir, &why) != SC_OK ||
            rt_runner_save(t->runner, t->checkpoint_dir, t->resume_step, &why) != SC_OK)
            SC_LOG_WARN(LOG,
                        "job %s stage %u: the checkpoint of step %llu taken over is not "
                        "kept here: %s",
                        t->job_id, t->stage, (unsigned long long)t->resume_step, why.msg);
    }
    return rc;
}

/* After `step`: when a move asked to pause there (or earlier), keeps the stage's state in the
 * block server, reports the pause, and waits until a later pause step or the stop. Returns false
 * when training must end (stopped, or the state could not be kept). */
static bool maybe_pause(wk_trainer *t, uint64_t step, const Stagecraft__IterationReport *last)
{
    uint64_t at = atomic_load(&t->pause_after);
    if (at == 0 || step < at || step >= t->steps)
        return true;
    sc_err err;
    sc_err_clear(&err);
    rt_stage_image im;
    if (rt_runner_flush(t->runner, NULL, &err) != SC_OK ||
        rt_runner_snapshot(t->runner, step, &im, &err) != SC_OK) {
        if (!atomic_load(&t->stop))
            push_error(t, err.code, "keeping the stage's state for a move failed: %s", err.msg);
        return false;
    }
    if (t->blocks != NULL && t->replica == 0)
        wk_block_server_keep(t->blocks, t->job_id, &im);
    rt_stage_image_clear(&im);
    wk_trainer_msg m;
    report_init(t, step, &m);
    m.report.loss = last->loss;
    m.report.has_loss = last->has_loss;
    m.report.checkpoint_step = last->checkpoint_step;
    m.report.parked = 1;
    push(t, &m);
    SC_LOG_INFO(LOG, "job %s stage %u replica %u: paused after step %llu for a move", t->job_id,
                t->stage, t->replica, (unsigned long long)step);
    pthread_mutex_lock(&t->lock);
    while (!atomic_load(&t->stop) && atomic_load(&t->pause_after) != 0 &&
           atomic_load(&t->pause_after) <= step)
        pthread_cond_wait(&t->resume, &t->lock);
    pthread_mutex_unlock(&t->lock);
    if (!atomic_load(&t->stop))
        SC_LOG_INFO(LOG, "job %s stage %u: resumed after step %llu (next pause: %llu)", t->job_id,
                    t->stage, (unsigned long long)step,
                    (unsigned long long)atomic_load(&t->pause_after));
    return !atomic_load(&t->stop);
}

void wk_trainer_pause(wk_trainer *t, uint64_t after_step)
{
    pthread_mutex_lock(&t->lock);
    atomic_store(&t->pause_after, after_step);
    pthread_cond_broadcast(&t->resume);
    pthread_mutex_unlock(&t->lock);
}

/* The worker's CFS quota as the reports give it, read again at most every QUOTA_READ_S (it can
 * change while the job runs: a container's limit, the lab's `lab set`; a few small files per
 * read). fraction 0: no quota, or one at or above the CPU threads, which never holds the
 * threads back. */
#define QUOTA_READ_S 0.02
typedef struct {
    double read_s, cores, fraction, period_s;
} cpu_quota;

static void quota_now(cpu_quota *q)
{
    double now = sc_clock_now_s();
    if (q->read_s > 0 && now - q->read_s < QUOTA_READ_S)
        return;
    q->read_s = now;
    if (!kn_cpu_quota_binding(&q->fraction, &q->cores, &q->period_s))
        q->cores = q->fraction = q->period_s = 0;
}

/* wk_trainer_fault_release's flag: set from a signal handler */
static volatile sig_atomic_t hang_released;

void wk_trainer_fault_release(void)
{
    hang_released = 1;
}

void wk_trainer_fault_hang(wk_trainer *t, uint64_t after_steps)
{
    t->hang_after = after_steps;
}

/* The step of a test's fault: stuck, stop or not, until released. */
static void fault_hang(wk_trainer *t, uint64_t step)
{
    SC_LOG_WARN(LOG, "fault injection: job %s stage %u hangs in step %llu", t->job_id, t->stage,
                (unsigned long long)step);
    while (!hang_released)
        usleep(20 * 1000);
    SC_LOG_WARN(LOG, "fault injection: job %s stage %u wakes up in step %llu%s", t->job_id,
                t->stage, (unsigned long long)step,
                atomic_load(&t->stop) ? ", stopped meanwhile: it ends" : "");
    t->hang_after = 0;
}

static void *train_main(void *arg)
{
    wk_trainer *t = arg;
    sc_err err;
    sc_err_clear(&err);
    if (connect_all(t, &err) != SC_OK) {
        push_error(t, err.code, "connecting the data plane: %s", err.msg);
        return NULL;
    }
    if (t->resume_step > 0 && resume(t, &err) != SC_OK) {
        push_resume_error(t, &err);
        return NULL;
    }
    uint64_t last_ckpt = t->last_checkpoint;
    char ckpt_error[400] = ""; /* why the latest checkpoint failed, "" when it was written */
    cpu_quota quota = {0};
    for (uint64_t step = t->resume_step + 1; step <= t->steps && !atomic_load(&t->stop); step++) {
        rt_report rep;
        sc_err_clear(&err);
        if (rt_runner_step(t->runner, step, &rep, &err) != SC_OK) {
            if (!atomic_load(&t->stop))
                push_error(t, err.code, "training step failed: %s", err.msg);
            return NULL;
        }
        atomic_store(&t->iteration_us, (uint64_t)(rep.iteration_s > 0 ? rep.iteration_s * 1e6 : 0));
        if (t->hang_after > 0 && step >= t->resume_step + t->hang_after)
            fault_hang(t, step);
        if (atomic_load(&t->stop))
            return NULL; /* stopped while the step ran: nothing of it is saved or reported */
        bool save =
            t->checkpoint_every > 0 && (step % t->checkpoint_every == 0 || step == t->steps);
        /* An asynchronous (pipedream) pipeline keeps minibatches in flight across steps: every
         * stage drains it before a checkpoint and at the end, so both hold whole updates.
         * (A no-op for the flushing schedules.) */
        if (save || step == t->steps) {
            sc_err_clear(&err);
            if (rt_runner_flush(t->runner, NULL, &err) != SC_OK) {
                if (!atomic_load(&t->stop))
                    push_error(t, err.code, "draining the pipeline failed: %s", err.msg);
                return NULL;
            }
        }
        if (step == t->steps && t->export_dir[0] != '\0') {
            sc_err_clear(&err);
            if (rt_export_hf_stage(t->runner, (int)t->replica, (int)t->stage, (int)t->n_stages,
                                   t->export_cuts, t->export_dir, &err) != SC_OK) {
                push_error(t, err.code, "export at the last step failed: %s", err.msg);
                return NULL;
            }
        }
        if (save) {
            sc_err_clear(&err);
            if (make_dirs(t->checkpoint_dir, &err) != SC_OK ||
                rt_runner_save(t->runner, t->checkpoint_dir, step, &err) != SC_OK) {
                SC_LOG_WARN(LOG, "checkpoint of step %llu not written: %s",
                            (unsigned long long)step, err.msg);
                /* the coordinator shows it in the job's status, not only this log */
                sc_strfmt(ckpt_error, sizeof ckpt_error, "step %llu not written: %s",
                          (unsigned long long)step, err.msg);
            } else {
                last_ckpt = step;
                ckpt_error[0] = '\0';
            }
            wk_copier_due(t->copier, step);
        }
        atomic_store(&t->step, step);
        wk_trainer_msg m;
        report_init(t, step, &m);
        m.report.loss = rep.has_loss ? rep.loss : 0;
        m.report.has_loss = rep.has_loss;
        m.report.iteration_s = rep.iteration_s;
        m.report.busy_s = rep.busy_s;
        m.report.memory_bytes = rep.memory_bytes;
        m.report.forward_s = rep.forward_s;
        m.report.backward_s = rep.backward_s;
        m.report.samples_per_s = rep.samples_per_s;
        quota_now(&quota);
        if (quota.fraction > 0) {
            /* the compute's CPU at the quota's pace: its threads, held to `fraction` of their
             * speed, take busy_cpu_s / fraction sustained */
            m.report.quota_busy_s = rep.busy_cpu_s / quota.fraction;
            m.report.cpu_quota_fraction = quota.fraction;
            m.report.cpu_quota_period_s = quota.period_s;
        }
        m.report.checkpoint_step = last_ckpt;
        report_copies(t, &m.report);
        report_links(&rep, &m.report);
        report_reduce(&rep, &m.report);
        if (ckpt_error[0] != '\0') {
            char *copy = strdup(ckpt_error);
            if (copy != NULL)
                m.report.checkpoint_error = copy;
        }
        if (rep.n_blocks > 0 && rep.grad_sq_norms) {
            m.report.grad_l1_per_block = malloc((size_t)rep.n_blocks * sizeof(double));
            if (m.report.grad_l1_per_block) {
                memcpy(m.report.grad_l1_per_block, rep.grad_sq_norms,
                       (size_t)rep.n_blocks * sizeof(double));
                m.report.n_grad_l1_per_block = (size_t)rep.n_blocks;
            }
        }
        Stagecraft__IterationReport last = m.report;
        push(t, &m);
        if (!maybe_pause(t, step, &last))
            return NULL;
    }
    return NULL;
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
    train_main(t);
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
    for (int waited = 0; t->started && !atomic_load(&t->ended) && waited < timeout_ms;
         waited += 10)
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
