/* `stagecraft advise --workers` and `--job JOB`: asks the coordinator what it plans with
 * (Coordinator.GetPlanInputs: its workers' cluster with their measured speeds, the profile, its
 * own plan of the job on all of them), then plans here what dropping each worker and adding
 * each of a catalogue's servers (--catalog) is worth, as `plan` would predict it. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/advise.h"
#include "cli/client.h"
#include "common/sc_util.h"
#include "coordinator/jobspec.h"
#include "coordinator/planner/plan_advise_margins.h"
#include "proto/stagecraft.pb-c.h"

/* Profiling the model on the workers may take as long as a job's profiling does. */
#define ADVISE_CALL_TIMEOUT_MS 600000

/* Reads a whole file (heap, NUL-terminated). */
static sc_status read_text(const char *path, char **out, sc_err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return SC_ERRF(err, SC_ERR_IO, "%s: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1)
            break;
        char *more = realloc(buf, cap * 2);
        if (more == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = more;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (buf == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading %s", path);
    if (bad) {
        free(buf);
        return SC_ERRF(err, SC_ERR_IO, "%s: read error", path);
    }
    buf[len] = '\0';
    *out = buf;
    return SC_OK;
}

/* The workers' cluster with the catalogue's device types and servers after its own: a
 * catalogue type named as a workers' type (or as its device before "@worker") gives that type
 * its price and adds no type; the others are added as they are (their relative_speed is then
 * against the profile's device, the first worker's). A catalogue server named as a workers'
 * server is renamed "+NAME". Zones and their prices come from the catalogue (the workers'
 * servers share the unnamed zone). Heap JSON text. */
static sc_status merge(const char *workers_json, const char *catalog_path, char **out, sc_err *err)
{
    json_error_t je;
    json_t *w = json_loads(workers_json, 0, &je);
    json_t *cat = catalog_path ? json_load_file(catalog_path, 0, &je) : NULL;
    if (w == NULL || (catalog_path != NULL && cat == NULL)) {
        json_decref(w);
        json_decref(cat);
        return SC_ERRF(err, SC_ERR_PARSE, "%s: %s (line %d)",
                       w == NULL ? "the coordinator's cluster" : catalog_path, je.text, je.line);
    }
    json_t *wtypes = json_object_get(w, "device_types"), *wservers = json_object_get(w, "servers");
    const char *name;
    json_t *t;
    json_object_foreach(json_object_get(cat, "device_types"), name, t)
    {
        int matched = 0;
        const char *wname;
        json_t *wt;
        json_object_foreach(wtypes, wname, wt)
        {
            size_t len = strlen(name);
            if (strncmp(wname, name, len) == 0 && (wname[len] == '\0' || wname[len] == '@')) {
                json_object_set(wt, "price_per_hour", json_object_get(t, "price_per_hour"));
                matched = 1;
            }
        }
        if (!matched)
            json_object_set(wtypes, name, t);
    }
    size_t i;
    json_t *srv;
    json_array_foreach(json_object_get(cat, "servers"), i, srv)
    {
        json_t *copy = json_deep_copy(srv);
        const char *sname = json_string_value(json_object_get(copy, "name"));
        size_t k;
        json_t *ws;
        json_array_foreach(wservers, k, ws)
        {
            if (sname != NULL &&
                strcmp(json_string_value(json_object_get(ws, "name")), sname) == 0) {
                char renamed[300];
                snprintf(renamed, sizeof renamed, "+%s", sname);
                json_object_set_new(copy, "name", json_string(renamed));
                break;
            }
        }
        json_array_append_new(wservers, copy);
    }
    if (json_object_get(cat, "zones") != NULL)
        json_object_set(w, "zones", json_object_get(cat, "zones"));
    *out = json_dumps(w, JSON_COMPACT);
    json_decref(w);
    json_decref(cat);
    return *out != NULL ? SC_OK : SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
}

/* The plan request: the job's batch, micro-batches, stages and schedule and the coordinator's
 * strategy (the flags override each), so that all the workers plan as the coordinator did. */
static sc_status request_of(const advise_args *a, const Stagecraft__GetPlanInputsResponse *r,
                            const plan_profile *prof, plan_request *req, int *strategy,
                            json_t **coord_plan, sc_err *err)
{
    coord_jobspec spec;
    memset(&spec, 0, sizeof spec);
    SC_CHECK(coord_jobspec_parse("the job", r->job_json, strlen(r->job_json), &spec, err));
    json_t *plan = json_loads(r->plan_json, 0, NULL);
    if (plan == NULL) {
        coord_jobspec_clear(&spec);
        return SC_ERRF(err, SC_ERR_PARSE, "the coordinator's plan is not JSON");
    }
    const char *sched = strcmp(spec.schedule, "unequal") == 0 ? "1f1b" : spec.schedule;
    int micro = (int)spec.microbatches;
    /* a plan the coordinator changed (micro-batches for replicas, another strategy) notes it */
    if (json_object_get(plan, "note") != NULL)
        micro = (int)json_integer_value(
            json_object_get(json_object_get(plan, "microbatches"), "count"));
    *req = (plan_request){
        .profile = prof,
        .batch = a->have_batch ? (int)a->batch : (int)spec.batch_size,
        .microbatches = a->have_micro ? (int)a->microbatches : micro,
        .schedule = (plan_sched_kind)(a->have_schedule ? a->schedule : plan_sched_parse(sched)),
        .runtime_zb1 = 1,
        .max_stages = a->have_stages ? (int)a->stages : (int)spec.max_stages};
    *strategy = a->have_strategy
                    ? a->strategy
                    : plan_strategy_parse(json_string_value(json_object_get(plan, "strategy")));
    coord_jobspec_clear(&spec);
    *coord_plan = plan;
    if (*strategy < 0 && !a->have_strategy)
        return SC_ERRF(err, SC_ERR_PARSE, "the coordinator's plan names no strategy");
    return SC_OK;
}

static const char *str_or(const json_t *v, const char *dflt)
{
    const char *s = json_string_value(v);
    return s != NULL ? s : dflt;
}

static double change(double now, double base)
{
    return base > 0 ? now / base - 1 : 0;
}

/* "2 x A10 on b" */
static void class_name(const plan_cluster *cl, const plan_advise_margin *m, char *buf, size_t n)
{
    const plan_device *d = &cl->devices[m->device];
    snprintf(buf, n, "%d x %s on %s", m->count, cl->types[d->type].name,
             cl->servers[d->server].name);
}

static void print_text(const advise_args *a, const Stagecraft__GetPlanInputsResponse *r,
                       const plan_cluster *cl, const plan_advise_point *all, double coord_sps,
                       const char *coord_strategy, const plan_advise_margins *m)
{
    size_t n = r->n_worker_ids;
    if (a->job != NULL)
        printf("job %s: %zu worker%s", a->job, n, n == 1 ? "" : "s");
    else
        printf("%zu idle worker%s", n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++)
        printf("%s%s (%s)", i ? ", " : ": ", r->worker_ids[i], r->worker_names[i]);
    printf("\nall of them: %.6g samples/s (%s); the coordinator plans %.6g samples/s (%s)\n",
           all->samples_per_s, plan_strategy_name(all->strategy), coord_sps, coord_strategy);
    for (int i = 0; i < m->n_drop; i++) {
        const plan_advise_margin *d = &m->drop[i];
        double c = change(d->pt.samples_per_s, all->samples_per_s);
        if (!(d->pt.samples_per_s > 0))
            printf("  dropping %s leaves no plan that fits memory\n", r->worker_ids[d->device]);
        else if (c <= 0)
            printf("  dropping %s costs %.0f%% (%.6g samples/s)\n", r->worker_ids[d->device],
                   fabs(100 * c), d->pt.samples_per_s);
        else
            printf("  dropping %s gains %.0f%% (%.6g samples/s)\n", r->worker_ids[d->device],
                   100 * c, d->pt.samples_per_s);
    }
    if (n == 1)
        printf("  (one worker: nothing to drop)\n");
    for (int i = 0; i < m->n_add; i++) {
        const plan_advise_margin *d = &m->add[i];
        char what[PLAN_NAME_MAX * 2 + 32];
        class_name(cl, d, what, sizeof what);
        double c = change(d->pt.samples_per_s, all->samples_per_s);
        printf("  adding %s: %+.0f%% samples/s for %+.2f/h (%.6g samples/s)\n", what, 100 * c,
               d->pt.cost_per_hour - all->cost_per_hour, d->pt.samples_per_s);
    }
    if (r->note[0])
        printf("left out: %s\n", r->note);
}

static sc_status print_json(const Stagecraft__GetPlanInputsResponse *r, const plan_cluster *cl,
                            const char *merged, const plan_advise_point *all, json_t *coord_plan,
                            const plan_advise_margins *m, sc_err *err)
{
    json_t *workers = json_array(), *drop = json_array(), *add = json_array();
    for (size_t i = 0; i < r->n_worker_ids; i++)
        json_array_append_new(workers, json_pack("{s:s, s:s, s:I}", "id", r->worker_ids[i], "name",
                                                 r->worker_names[i], "device", (json_int_t)i));
    for (int i = 0; i < m->n_drop; i++) {
        const plan_advise_margin *d = &m->drop[i];
        json_array_append_new(drop, json_pack("{s:s, s:f, s:f}", "worker", r->worker_ids[d->device],
                                              "samples_per_s", d->pt.samples_per_s, "change",
                                              change(d->pt.samples_per_s, all->samples_per_s)));
    }
    for (int i = 0; i < m->n_add; i++) {
        const plan_advise_margin *d = &m->add[i];
        const plan_device *dv = &cl->devices[d->device];
        json_array_append_new(
            add, json_pack("{s:s, s:s, s:i, s:f, s:f, s:f}", "server", cl->servers[dv->server].name,
                           "type", cl->types[dv->type].name, "count", d->count, "samples_per_s",
                           d->pt.samples_per_s, "change",
                           change(d->pt.samples_per_s, all->samples_per_s), "added_cost_per_hour",
                           d->pt.cost_per_hour - all->cost_per_hour));
    }
    json_t *root = json_pack(
        "{s:o, s:{s:f, s:f, s:s}, s:{s:f, s:s}, s:o, s:o, s:s}", "workers", workers, "all",
        "samples_per_s", all->samples_per_s, "cost_per_hour", all->cost_per_hour, "strategy",
        plan_strategy_name(all->strategy), "coordinator_plan", "samples_per_s",
        json_number_value(json_object_get(coord_plan, "throughput_samples_per_s")), "strategy",
        str_or(json_object_get(coord_plan, "strategy"), ""), "drop", drop, "add", add, "note",
        r->note);
    if (root == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing the JSON");
    /* what was planned: a catalogue and a profile `advise --catalog` reads as they are */
    json_object_set_new(root, "cluster", json_loads(merged, 0, NULL));
    json_object_set_new(root, "profile", json_loads(r->profile_json, 0, NULL));
    int bad = json_dumpf(root, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(12));
    json_decref(root);
    printf("\n");
    return bad ? SC_ERRF(err, SC_ERR_IO, "writing the JSON to standard output failed") : SC_OK;
}

int advise_margins_main(const cli_command *self, const advise_args *a)
{
    sc_err err;
    sc_err_clear(&err);
    const char *addr = NULL;
    char *job_text = NULL, *merged = NULL;
    ProtobufCMessage *m = NULL;
    plan_profile *prof = NULL;
    plan_cluster *wcl = NULL, *cl = NULL;
    json_t *coord_plan = NULL;
    plan_advise_margins margins;
    memset(&margins, 0, sizeof margins);
    plan_advise_point all;
    memset(&all, 0, sizeof all);
    int code = CLI_OK;
    if (cli_coordinator_addr(a->coordinator, &addr, &err) != SC_OK)
        goto report;
    if (a->catalog != NULL) { /* read strictly before the coordinator is asked anything */
        plan_cluster *check = NULL;
        sc_status rc = plan_cluster_load_catalog(&check, a->catalog, &err);
        plan_cluster_destroy(&check);
        if (rc != SC_OK)
            goto report;
    }
    Stagecraft__GetPlanInputsRequest req = STAGECRAFT__GET_PLAN_INPUTS_REQUEST__INIT;
    if (a->workers) {
        if (read_text(a->model, &job_text, &err) != SC_OK)
            goto report;
        coord_jobspec spec; /* a bad job file is refused here, naming the file */
        if (coord_jobspec_parse(a->model, job_text, strlen(job_text), &spec, &err) != SC_OK)
            goto report;
        coord_jobspec_clear(&spec);
        req.job_json = job_text;
    } else {
        req.job_id = (char *)a->job;
    }
    if (cli_call_timeout(addr, "/stagecraft.Coordinator/GetPlanInputs", &req.base,
                         &stagecraft__get_plan_inputs_response__descriptor, &m,
                         ADVISE_CALL_TIMEOUT_MS, &err) != SC_OK)
        goto report;
    const Stagecraft__GetPlanInputsResponse *r = (const void *)m;
    if (plan_profile_parse_json(&prof, "the coordinator's profile", r->profile_json,
                                strlen(r->profile_json), &err) != SC_OK ||
        plan_cluster_parse(&wcl, "the coordinator's cluster", r->cluster_json,
                           strlen(r->cluster_json), &err) != SC_OK ||
        merge(r->cluster_json, a->catalog, &merged, &err) != SC_OK ||
        plan_cluster_parse(&cl, a->catalog ? a->catalog : "the coordinator's cluster", merged,
                           strlen(merged), &err) != SC_OK)
        goto report;
    if ((size_t)wcl->n_devices != r->n_worker_ids) {
        SC_ERRF(&err, SC_ERR_INTERNAL, "the coordinator's cluster has %d devices for %zu workers",
                wcl->n_devices, r->n_worker_ids);
        goto report;
    }
    plan_advise_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.catalog = cl;
    cfg.tokens_per_sample = a->tokens_per_sample;
    if (request_of(a, r, prof, &cfg.request, &cfg.strategy, &coord_plan, &err) != SC_OK)
        goto report;
    /* all the workers as the coordinator's cluster orders them: the coordinator's plan */
    plan_advise_cfg whole = cfg;
    whole.catalog = wcl;
    if (plan_advise_eval_cluster(&whole, wcl, &all, NULL, &err) != SC_OK ||
        plan_advise_margins_run(&cfg, wcl->n_devices, &margins, &err) != SC_OK)
        goto report;
    /* the workers' price per hour as the catalogue gives it (their types' prices) */
    all.devices_per_hour = 0;
    for (int d = 0; d < wcl->n_devices; d++)
        if (cl->types[cl->devices[d].type].price_per_hour > 0)
            all.devices_per_hour += cl->types[cl->devices[d].type].price_per_hour;
    all.cost_per_hour = all.devices_per_hour + all.traffic_per_hour;
    if (a->json) {
        if (print_json(r, cl, merged, &all, coord_plan, &margins, &err) != SC_OK)
            goto report;
    } else {
        print_text(a, r, cl, &all,
                   json_number_value(json_object_get(coord_plan, "throughput_samples_per_s")),
                   str_or(json_object_get(coord_plan, "strategy"), "?"), &margins);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        SC_ERRF(&err, SC_ERR_IO, "writing to standard output failed: %s", strerror(errno));
        goto report;
    }
    goto done;
report:
    code = cli_report(self, &err);
done:
    plan_advise_margins_free(&margins);
    json_decref(coord_plan);
    plan_cluster_destroy(&wcl);
    plan_cluster_destroy(&cl);
    plan_profile_destroy(&prof);
    if (m != NULL)
        protobuf_c_message_free_unpacked(m, NULL);
    free(job_text);
    free(merged);
    return code;
}
