/* Job spec parsing and validation (see jobspec.h). */
#include "coordinator/jobspec.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_json.h"
#include "common/sc_util.h"
#include "coordinator/ckpt_copies.h"
#include "coordinator/store.h"
#include "kernels/model.h"
#include "proto/sc_wire.h"

static const char *const data_kinds[] = {"text", "tokens", "cifar10", "synthetic", NULL};
static const char *const schedules[] = {"auto",   "gpipe",   "1f1b", "pipedream",
                                        "sliced", "unequal", "zb1",  NULL};
static const char *const strategies[] = {"hetero", "uniform",    "blockpartition",
                                         "minmax", "pipedream",  "autopipe",
                                         "umpipe", "exhaustive", NULL};
static const char *const optimizers[] = {"adamw", "sgd", NULL};
static const char *const model_kinds[] = {"gpt", "vgg", "mlp", "hf", NULL};
/* every key of a job file and of its objects (the model's are its builder's to check) */
static const char *const job_keys[] = {"format",
                                       "version",
                                       "name",
                                       "model",
                                       "data",
                                       "batch_size",
                                       "microbatches",
                                       "schedule",
                                       "strategy",
                                       "workers",
                                       "steps",
                                       "seed",
                                       "checkpoint_every",
                                       "checkpoint_keep",
                                       "checkpoint_replicas",
                                       "stages",
                                       "transport",
                                       "export",
                                       "rebalance",
                                       "freeze",
                                       "optimizer",
                                       "precision",
                                       "loss_scale",
                                       "zb1_memory",
                                       NULL};
static const char *const loss_scale_keys[] = {"initial", "interval", NULL};
static const char *const data_keys[] = {"kind", "path", NULL};
static const char *const optimizer_keys[] = {"kind", "lr", "weight_decay", "momentum", NULL};
static const char *const elastic_keys[] = {"min", "max", NULL};
static const char *const freeze_keys[] = {"interval", "percentile", "max_change", NULL};

/* A name `stagecraft worker --name` would take (see worker/agent.c): any other one could never
 * register, and a job naming it would wait for it for good. */
_Static_assert(SC_WIRE_MAX_WORKER_NAME < COORD_NAME_MAX, "a worker name must fit the store");

/* Job names are printed by `stagecraft status`, one field per line: a newline or an escape
 * sequence in one would break the line or drive the terminal of whoever looks. */
static bool has_control_chars(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return true;
    return false;
}

static sc_status parse_workers(const sc_jnode *root, coord_jobspec *spec, sc_err *err)
{
    sc_jnode w;
    SC_CHECK(sc_jnode_member(root, "workers", &w, err));
    if (json_is_array(w.value)) {
        SC_CHECK(sc_jnode_expect_array(&w, 1, COORD_JOBSPEC_MAX_WORKERS, err));
        size_t n = sc_jnode_size(&w);
        spec->worker_names = calloc(n + 1, sizeof *spec->worker_names);
        SC_ALLOC_CHECK(spec->worker_names, err);
        for (size_t i = 0; i < n; i++) {
            sc_jnode e = sc_jnode_element(&w, i);
            const char *name;
            SC_CHECK(sc_jnode_string(&e, &name, err));
            if (!sc_wire_worker_name_valid(name))
                return sc_jnode_fail(&e, err, SC_ERR_INVALID,
                                     "expected a worker name as `stagecraft worker --name` takes "
                                     "it: 1 to %d letters, digits, '-', '_' or '.', not starting "
                                     "with '.'",
                                     SC_WIRE_MAX_WORKER_NAME);
            for (size_t j = 0; j < i; j++)
                if (strcmp(spec->worker_names[j], name) == 0)
                    return sc_jnode_fail(&e, err, SC_ERR_INVALID, "worker \"%s\" is listed twice",
                                         name);
            spec->worker_names[i] = strdup(name);
            SC_ALLOC_CHECK(spec->worker_names[i], err);
        }
        spec->workers = (uint32_t)n;
        return SC_OK;
    }
    int64_t n;
    if (json_is_object(w.value)) { /* elastic: {"min": M, "max": N} */
        int64_t lo;
        SC_CHECK(sc_jnode_known_keys(&w, elastic_keys, err));
        SC_CHECK(sc_json_get_int(&w, "min", 1, COORD_JOBSPEC_MAX_WORKERS, &lo, err));
        SC_CHECK(sc_json_get_int(&w, "max", lo, COORD_JOBSPEC_MAX_WORKERS, &n, err));
        spec->workers = (uint32_t)n;
        spec->workers_min = (uint32_t)lo;
        return SC_OK;
    }
    if (!json_is_number(w.value))
        return sc_jnode_fail(&w, err, SC_ERR_INVALID,
                             "expected a worker count (1 to %d), a list of worker names, or "
                             "{\"min\": M, \"max\": N} (an elastic job)",
                             COORD_JOBSPEC_MAX_WORKERS);
    SC_CHECK(sc_jnode_int(&w, 1, COORD_JOBSPEC_MAX_WORKERS, &n, err));
    spec->workers = (uint32_t)n;
    return SC_OK;
}

/* "freeze": "off" (the default), "auto" (a look every tenth of the steps, tau at the median and
 * at most FREEZE_MAX_CHANGE), or {"interval": STEPS, "percentile": P, "max_change": C}. */
#define FREEZE_MAX_CHANGE 0.1
static sc_status parse_freeze(const sc_jnode *root, coord_jobspec *spec, sc_err *err)
{
    spec->freeze_interval = 0;
    spec->freeze_percentile = 50;
    spec->freeze_max_change = FREEZE_MAX_CHANGE;
    if (!sc_jnode_has(root, "freeze"))
        return SC_OK;
    sc_jnode f;
    SC_CHECK(sc_jnode_member(root, "freeze", &f, err));
    uint64_t tenth = spec->steps / 10 > 0 ? spec->steps / 10 : 1;
    if (json_is_string(f.value)) {
        static const char *const modes[] = {"off", "auto", NULL};
        int which;
        SC_CHECK(sc_jnode_enum(&f, modes, &which, err));
        spec->freeze_interval = which == 1 ? tenth : 0;
    } else if (json_is_object(f.value)) {
        int64_t v;
        SC_CHECK(sc_jnode_known_keys(&f, freeze_keys, err));
        SC_CHECK(sc_json_opt_int(&f, "interval", 1, INT64_C(1) << 40, (int64_t)tenth, &v, err));
        spec->freeze_interval = (uint64_t)v;
        SC_CHECK(sc_json_opt_number(&f, "percentile", 1, 99, 50, &spec->freeze_percentile, err));
        SC_CHECK(sc_json_opt_number(&f, "max_change", 1e-6, 1e6, FREEZE_MAX_CHANGE,
                                    &spec->freeze_max_change, err));
    } else {
        return sc_jnode_fail(&f, err, SC_ERR_INVALID,
                             "expected \"off\", \"auto\" or {\"interval\": STEPS, "
                             "\"percentile\": 1..99, \"max_change\": C}");
    }
    if (spec->freeze_interval > 0 &&
        (strcmp(spec->schedule, "pipedream") == 0 || strcmp(spec->strategy, "pipedream") == 0))
        return sc_jnode_fail(&f, err, SC_ERR_UNSUPPORTED,
                             "freezing needs a schedule that flushes every step (gpipe, 1f1b, "
                             "sliced, unequal or auto); pipedream keeps minibatches in flight "
                             "across steps");
    return SC_OK;
}

/* A model with a tied embedding and head (kn_model_tie) relays that tensor's gradient between
 * its end stages through host memory at each synchronous step (worker/runtime/runner_tie.c): the
 * data plane is zmq ("auto" becomes it) and the schedule not pipedream. */
static sc_status tied_model_rules(coord_jobspec *spec, const sc_jnode *root, sc_err *err)
{
    sc_jnode n;
    if (strcmp(spec->transport, "nccl") == 0) {
        SC_CHECK(sc_jnode_member(root, "transport", &n, err));
        return sc_jnode_fail(&n, err, SC_ERR_INVALID,
                             "the model ties its embedding and output projection, whose "
                             "gradients travel between stages through host memory: expected "
                             "\"zmq\" or \"auto\"");
    }
    sc_strlcpy(spec->transport, "zmq", sizeof spec->transport);
    if (strcmp(spec->schedule, "pipedream") == 0 || strcmp(spec->strategy, "pipedream") == 0) {
        const char *key = strcmp(spec->schedule, "pipedream") == 0 ? "schedule" : "strategy";
        SC_CHECK(sc_jnode_member(root, key, &n, err));
        return sc_jnode_fail(&n, err, SC_ERR_INVALID,
                             "the model ties its embedding and output projection, whose "
                             "gradients are summed at each synchronous step: pipedream is not "
                             "supported for it");
    }
    return SC_OK;
}

static sc_status parse_body(const sc_jdoc *doc, coord_jobspec *spec, sc_err *err)
{
    sc_jnode root = sc_jdoc_root(doc), model, data, opt;
    const char *s;
    int64_t v;
    int which;
    SC_CHECK(sc_jdoc_check_format(doc, "stagecraft-job", 1, NULL, err));
    SC_CHECK(sc_jnode_known_keys(&root, job_keys, err));

    SC_CHECK(sc_json_get_string(&root, "name", &s, err));
    if (s[0] == '\0' || strlen(s) >= sizeof spec->name || has_control_chars(s)) {
        sc_jnode n;
        sc_jnode_member(&root, "name", &n, NULL);
        return sc_jnode_fail(&n, err, SC_ERR_INVALID,
                             "expected a name of 1 to %zu characters, without control characters",
                             sizeof spec->name - 1);
    }
    sc_strlcpy(spec->name, s, sizeof spec->name);

    SC_CHECK(sc_json_get_object(&root, "model", &model, err));
    SC_CHECK(sc_json_get_enum(&model, "kind", model_kinds, &which, err));
    sc_strlcpy(spec->model_kind, model_kinds[which], sizeof spec->model_kind);
    /* The model builder validates the rest (sizes, heads, configs) with its own messages. */
    kn_model *built = NULL;
    SC_CHECK(kn_model_from_node(&built, &model, err));
    bool tied = kn_model_get_tie(built, NULL);
    spec->tied = tied;
    spec->param_count = kn_model_param_count(built);
    for (int i = 0; i < kn_model_block_count(built); i++)
        if (kn_model_block(built, i)->params > spec->max_block_params)
            spec->max_block_params = kn_model_block(built, i)->params;
    kn_model_destroy(&built);
    /* Workers receive the model as a stand-alone stagecraft-model document. */
    json_t *standalone = json_deep_copy(model.value);
    SC_ALLOC_CHECK(standalone, err);
    json_object_set_new(standalone, "format", json_string("stagecraft-model"));
    json_object_set_new(standalone, "version", json_integer(1));
    spec->model_json = json_dumps(standalone, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(standalone);
    SC_ALLOC_CHECK(spec->model_json, err);

    SC_CHECK(sc_json_get_object(&root, "data", &data, err));
    SC_CHECK(sc_jnode_known_keys(&data, data_keys, err));
    SC_CHECK(sc_json_get_enum(&data, "kind", data_kinds, &which, err));
    spec->data_kind = (coord_data_kind)which;
    if (spec->data_kind != COORD_DATA_SYNTHETIC) {
        SC_CHECK(sc_json_get_string(&data, "path", &s, err));
        if (s[0] == '\0' || strlen(s) >= sizeof spec->data_path) {
            sc_jnode n;
            sc_jnode_member(&data, "path", &n, NULL);
            return sc_jnode_fail(&n, err, SC_ERR_INVALID, "expected a path to the %s data",
                                 data_kinds[which]);
        }
        sc_strlcpy(spec->data_path, s, sizeof spec->data_path);
    }

    SC_CHECK(sc_json_get_int(&root, "batch_size", 1, 1 << 20, &v, err));
    spec->batch_size = (uint32_t)v;

    sc_jnode mb;
    spec->microbatches = 0;
    if (sc_jnode_has(&root, "microbatches")) {
        SC_CHECK(sc_jnode_member(&root, "microbatches", &mb, err));
        if (json_is_string(mb.value)) {
            static const char *const autos[] = {"auto", NULL};
            SC_CHECK(sc_jnode_enum(&mb, autos, &which, err));
        } else {
            SC_CHECK(sc_jnode_int(&mb, 1, spec->batch_size, &v, err));
            if (spec->batch_size % (uint32_t)v != 0)
                return sc_jnode_fail(&mb, err, SC_ERR_INVALID,
                                     "%lld micro-batches do not divide the batch of %u samples; "
                                     "use a divisor of batch_size or \"auto\"",
                                     (long long)v, spec->batch_size);
            /* workers profile and train micro-batches of at most SC_WIRE_MAX_MICROBATCH_SIZE */
            uint32_t fewest =
                (spec->batch_size + SC_WIRE_MAX_MICROBATCH_SIZE - 1) / SC_WIRE_MAX_MICROBATCH_SIZE;
            if ((uint32_t)v < fewest)
                return sc_jnode_fail(&mb, err, SC_ERR_INVALID,
                                     "%lld micro-batches of the batch of %u samples are %u "
                                     "samples each, over the workers' limit of %d: expected a "
                                     "divisor of batch_size in [%u, %u], or \"auto\"",
                                     (long long)v, spec->batch_size, spec->batch_size / (uint32_t)v,
                                     SC_WIRE_MAX_MICROBATCH_SIZE, fewest, spec->batch_size);
            spec->microbatches = (uint32_t)v;
        }
    }

    SC_CHECK(sc_json_opt_string(&root, "schedule", "auto", &s, err));
    if (sc_jnode_has(&root, "schedule"))
        SC_CHECK(sc_json_get_enum(&root, "schedule", schedules, &which, err));
    sc_strlcpy(spec->schedule, s, sizeof spec->schedule);

    SC_CHECK(sc_json_opt_string(&root, "strategy", "hetero", &s, err));
    if (sc_jnode_has(&root, "strategy"))
        SC_CHECK(sc_json_get_enum(&root, "strategy", strategies, &which, err));
    sc_strlcpy(spec->strategy, s, sizeof spec->strategy);

    SC_CHECK(parse_workers(&root, spec, err));

    SC_CHECK(sc_json_get_int(&root, "steps", 1, INT64_C(1) << 40, &v, err));
    spec->steps = (uint64_t)v;
    SC_CHECK(sc_json_opt_int(&root, "seed", 0, INT64_MAX, 1, &v, err));
    spec->seed = (uint64_t)v;
    SC_CHECK(sc_json_opt_int(&root, "checkpoint_every", 0, INT64_C(1) << 40, 0, &v, err));
    spec->checkpoint_every = (uint64_t)v;
    /* 0 keeps every checkpoint, as releases before this key did */
    SC_CHECK(sc_json_opt_int(&root, "checkpoint_keep", 0, 1000000, 2, &v, err));
    spec->checkpoint_keep = (uint64_t)v;
    SC_CHECK(sc_json_opt_int(&root, "checkpoint_replicas", 0, COORD_MAX_CKPT_COPIES, 1, &v, err));
    spec->checkpoint_replicas = (uint32_t)v;
    SC_CHECK(sc_json_opt_int(&root, "stages", 0, spec->workers, 0, &v, err));
    spec->max_stages = (uint32_t)v;

    static const char *const transports[] = {"auto", "zmq", "nccl", NULL};
    SC_CHECK(sc_json_opt_string(&root, "transport", "auto", &s, err));
    if (sc_jnode_has(&root, "transport"))
        SC_CHECK(sc_json_get_enum(&root, "transport", transports, &which, err));
    sc_strlcpy(spec->transport, s, sizeof spec->transport);
    if (tied)
        SC_CHECK(tied_model_rules(spec, &root, err));
    /* "export": DIR, written by the stages at the last step (worker/runtime/export_hf.h) */
    if (sc_jnode_has(&root, "export")) {
        sc_jnode ex;
        SC_CHECK(sc_json_get_string(&root, "export", &s, err));
        SC_CHECK(sc_jnode_member(&root, "export", &ex, err));
        if (s[0] != '/')
            return sc_jnode_fail(&ex, err, SC_ERR_INVALID,
                                 "expected an absolute folder path (every stage's worker writes "
                                 "its part there)");
        if (strcmp(spec->model_kind, "hf") != 0 && strcmp(spec->model_kind, "gpt") != 0)
            return sc_jnode_fail(&ex, err, SC_ERR_INVALID,
                                 "a %s model is not exported; valid for model kinds \"hf\" and "
                                 "\"gpt\"",
                                 spec->model_kind);
    }

    static const char *const rebalances[] = {"auto", "off", NULL};
    spec->rebalance_auto = true;
    if (sc_jnode_has(&root, "rebalance")) {
        SC_CHECK(sc_json_get_enum(&root, "rebalance", rebalances, &which, err));
        spec->rebalance_auto = which == 0;
    }

    SC_CHECK(parse_freeze(&root, spec, err));
    if (tied && spec->freeze_interval > 0) {
        sc_jnode f;
        SC_CHECK(sc_jnode_member(&root, "freeze", &f, err));
        return sc_jnode_fail(&f, err, SC_ERR_UNSUPPORTED,
                             "the model ties its embedding and output projection: freezing the "
                             "embedding would leave its copy in the head learning; expected "
                             "\"off\" for such a model");
    }

    /* "precision": what the stages compute in; auto resolves when the job is planned */
    static const char *const precisions[] = {"auto", "bf16", "fp16", "tf32", "fp32", NULL};
    sc_strlcpy(spec->precision, "auto", sizeof spec->precision);
    if (sc_jnode_has(&root, "precision")) {
        SC_CHECK(sc_json_get_enum(&root, "precision", precisions, &which, err));
        sc_strlcpy(spec->precision, precisions[which], sizeof spec->precision);
    }
    /* "loss_scale": fp16's dynamic loss scale, its start and growth interval (the workers read
     * them from the job; checked here so a bad value fails at submit) */
    if (sc_jnode_has(&root, "loss_scale")) {
        sc_jnode ls;
        double initial, interval;
        SC_CHECK(sc_json_get_object(&root, "loss_scale", &ls, err));
        SC_CHECK(sc_jnode_known_keys(&ls, loss_scale_keys, err));
        SC_CHECK(sc_json_opt_number(&ls, "initial", 0x1p-24, 0x1p100, 65536.0, &initial, err));
        SC_CHECK(sc_json_opt_number(&ls, "interval", 1.0, 1e9, 2000.0, &interval, err));
        if (interval != (double)(int64_t)interval) {
            sc_jnode n;
            SC_CHECK(sc_jnode_member(&ls, "interval", &n, err));
            return sc_jnode_fail(&n, err, SC_ERR_INVALID,
                                 "loss_scale.interval %g is not a whole number of steps", interval);
        }
    }
    /* fp16 needs the stages to agree on each step's overflow, which pipedream's per-minibatch
     * steps do not allow */
    if (strcmp(spec->precision, "fp16") == 0 && strcmp(spec->schedule, "pipedream") == 0) {
        sc_jnode n;
        SC_CHECK(sc_jnode_member(&root, "precision", &n, err));
        return sc_jnode_fail(&n, err, SC_ERR_UNSUPPORTED,
                             "precision fp16 needs a dynamic loss scale, which schedule pipedream "
                             "cannot agree on across stages; valid: bf16, tf32 or fp32 with "
                             "pipedream, or another schedule (gpipe, 1f1b, zb1, sliced, auto)");
    }

    /* "zb1_memory": what bounds zb1's deferred weight gradients: each device's memory
     * ("device", the default) or, as well, 1f1b's fullest stage ("1f1b_peak") */
    static const char *const zb1_memories[] = {"device", "1f1b_peak", NULL};
    spec->zb1_peak_cap = false;
    if (sc_jnode_has(&root, "zb1_memory")) {
        SC_CHECK(sc_json_get_enum(&root, "zb1_memory", zb1_memories, &which, err));
        spec->zb1_peak_cap = which == 1;
    }

    sc_strlcpy(spec->optimizer, "adamw", sizeof spec->optimizer);
    spec->lr = 3e-4;
    spec->weight_decay = 0.0;
    spec->momentum = 0.9;
    if (sc_jnode_has(&root, "optimizer")) {
        SC_CHECK(sc_json_get_object(&root, "optimizer", &opt, err));
        SC_CHECK(sc_jnode_known_keys(&opt, optimizer_keys, err));
        SC_CHECK(sc_json_get_enum(&opt, "kind", optimizers, &which, err));
        sc_strlcpy(spec->optimizer, optimizers[which], sizeof spec->optimizer);
        SC_CHECK(sc_json_opt_number(&opt, "lr", 1e-12, 10.0, spec->lr, &spec->lr, err));
        SC_CHECK(sc_json_opt_number(&opt, "weight_decay", 0.0, 1.0, 0.0, &spec->weight_decay, err));
        SC_CHECK(sc_json_opt_number(&opt, "momentum", 0.0, 0.9999, 0.9, &spec->momentum, err));
    }
    return SC_OK;
}

sc_status coord_jobspec_parse(const char *source, const char *text, size_t len, coord_jobspec *spec,
                              sc_err *err)
{
    memset(spec, 0, sizeof *spec);
    if (len > COORD_JOBSPEC_MAX_BYTES)
        return SC_ERRF(err, SC_ERR_TOO_LARGE, "%s: job spec of %zu bytes is over the %u-byte limit",
                       source, len, COORD_JOBSPEC_MAX_BYTES);
    sc_jdoc *doc;
    SC_CHECK(sc_jdoc_parse(&doc, source, text, len, err));
    sc_status rc = parse_body(doc, spec, err);
    sc_jdoc_destroy(&doc);
    if (rc != SC_OK)
        coord_jobspec_clear(spec);
    return rc;
}

void coord_jobspec_clear(coord_jobspec *spec)
{
    if (spec == NULL)
        return;
    free(spec->model_json);
    if (spec->worker_names) {
        for (char **p = spec->worker_names; *p; p++)
            free(*p);
        free(spec->worker_names);
    }
    memset(spec, 0, sizeof *spec);
}
