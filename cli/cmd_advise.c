/* `stagecraft advise`: which of a catalogue's devices to train a model on, for throughput or
 * for cost. Parses the flags, runs plan_advise and prints the best set with its plan and the
 * Pareto front (throughput against cost per hour) as a table or JSON. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/advise.h"
#include "cli/commands.h"
#include "common/sc_util.h"
#include "coordinator/planner/plan_advise.h"

static const char *const advise_flag_names[] = {
    "--model", "--catalog",      "--workers",  "--job",      "--coordinator", "--objective",
    "--batch", "--microbatches", "--schedule", "--strategy", "--stages",      "--tokens-per-sample",
    "--json",  "--help",         NULL};

static int parse_args(const cli_command *self, int argc, char **argv, advise_args *a)
{
    sc_err err;
    sc_err_clear(&err);
    memset(a, 0, sizeof *a);
    a->objective = "throughput";
    a->strategy = PLAN_STRAT_HETERO;
    a->schedule = PLAN_SCHED_1F1B;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        int known = 0;
        for (int k = 0; advise_flag_names[k]; k++)
            known |= strcmp(f, advise_flag_names[k]) == 0;
        if (!known) {
            char valid[320] = "";
            for (int k = 0; advise_flag_names[k]; k++) {
                strncat(valid, k ? ", " : "", sizeof valid - strlen(valid) - 1);
                strncat(valid, advise_flag_names[k], sizeof valid - strlen(valid) - 1);
            }
            return cli_usage_error(self, "unknown flag or argument '%s'; valid flags: %s", f,
                                   valid);
        }
        if (strcmp(f, "--json") == 0) {
            a->json = 1;
            continue;
        }
        if (strcmp(f, "--workers") == 0) {
            a->workers = 1;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage_error(self, "%s needs a value", f);
        const char *v = argv[++i];
        sc_status rc = SC_OK;
        if (strcmp(f, "--model") == 0)
            a->model = v;
        else if (strcmp(f, "--catalog") == 0)
            a->catalog = v;
        else if (strcmp(f, "--job") == 0)
            a->job = v;
        else if (strcmp(f, "--coordinator") == 0)
            a->coordinator = v;
        else if (strcmp(f, "--objective") == 0)
            a->objective = v;
        else if (strcmp(f, "--batch") == 0) {
            rc = sc_parse_int64(v, 1, PLAN_MAX_BATCH, "--batch", &a->batch, &err);
            a->have_batch = 1;
        } else if (strcmp(f, "--stages") == 0) {
            rc = sc_parse_int64(v, 1, PLAN_MAX_DEVICES, "--stages", &a->stages, &err);
            a->have_stages = 1;
        } else if (strcmp(f, "--tokens-per-sample") == 0)
            rc = sc_parse_double(v, 1, 1e9, "--tokens-per-sample", &a->tokens_per_sample, &err);
        else if (strcmp(f, "--microbatches") == 0) {
            a->have_micro = 1;
            if (strcmp(v, "auto") == 0)
                a->microbatches = 0;
            else
                rc = sc_parse_int64(v, 1, PLAN_MAX_BATCH, "--microbatches (a count or auto)",
                                    &a->microbatches, &err);
        } else if (strcmp(f, "--schedule") == 0) {
            a->schedule = plan_sched_parse(v);
            a->have_schedule = 1;
            if (a->schedule < 0)
                return cli_usage_error(
                    self, "--schedule '%s': expected gpipe, 1f1b, pipedream, sliced, zb1 or auto",
                    v);
        } else if (strcmp(f, "--strategy") == 0) {
            a->strategy = strcmp(v, "all") == 0 ? -1 : plan_strategy_parse(v);
            a->have_strategy = 1;
            if (a->strategy < 0 && strcmp(v, "all") != 0)
                return cli_usage_error(self,
                                       "--strategy '%s': expected uniform, blockpartition, "
                                       "minmax, pipedream, autopipe, hetero (default), umpipe, "
                                       "exhaustive or all",
                                       v);
        }
        if (rc != SC_OK)
            return cli_usage_error(self, "%s", err.msg);
    }
    if (a->workers && a->job != NULL)
        return cli_usage_error(self, "give --workers or --job JOB, not both");
    if (a->job != NULL && a->model != NULL)
        return cli_usage_error(self, "--job JOB plans the job's own model: drop --model");
    if (a->job == NULL && a->model == NULL)
        return cli_usage_error(self, "--model FILE is required (with --workers: a "
                                     "stagecraft-job file)");
    if (a->catalog == NULL && !a->workers && a->job == NULL)
        return cli_usage_error(self, "give --catalog FILE (a stagecraft-cluster file whose device "
                                     "types carry price_per_hour), --workers or --job JOB");
    if (a->coordinator != NULL && !a->workers && a->job == NULL)
        return cli_usage_error(self, "--coordinator is used with --workers or --job only");
    return CLI_OK;
}

static double per_million(const advise_args *a, const plan_advise_point *p)
{
    double tps = a->tokens_per_sample > 0 ? a->tokens_per_sample : 1;
    return p->samples_per_s > 0 ? p->cost_per_hour / (p->samples_per_s * tps * 3600.0) * 1e6 : 0;
}

/* "4 x A100 on s0, 2 x L4 on s1": runs of one type on one server in the planned order. */
static void describe(FILE *f, const plan_cluster *cat, const plan_advise_point *p)
{
    for (int i = 0; i < p->n_devices;) {
        const plan_device *d = &cat->devices[p->devices[i]];
        int j = i;
        while (j < p->n_devices && cat->devices[p->devices[j]].type == d->type &&
               cat->devices[p->devices[j]].server == d->server)
            j++;
        fprintf(f, "%s%d x %s on %s", i ? ", " : "", j - i, cat->types[d->type].name,
                cat->servers[d->server].name);
        i = j;
    }
}

static json_t *point_json(const advise_args *a, const plan_advise_point *p)
{
    json_t *devs = json_array();
    for (int i = 0; i < p->n_devices; i++)
        json_array_append_new(devs, json_integer(p->devices[i]));
    return json_pack("{s:o, s:f, s:f, s:f, s:f, s:f, s:s}", "devices", devs, "samples_per_s",
                     p->samples_per_s, "cost_per_hour", p->cost_per_hour, "devices_cost_per_hour",
                     p->devices_per_hour, "traffic_cost_per_hour", p->traffic_per_hour,
                     a->tokens_per_sample > 0 ? "cost_per_million_tokens"
                                              : "cost_per_million_samples",
                     per_million(a, p), "strategy", plan_strategy_name(p->strategy));
}

/* The best's plan as `plan --json` writes it (its "plans"[0]). */
static json_t *plan_json(const plan_request *req, const plan_advise_result *r, sc_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (m == NULL) {
        SC_ERRF(err, SC_ERR_NOMEM, "out of memory for the plan JSON");
        return NULL;
    }
    sc_status rc = plan_write_json(m, req, &r->best_plan, 1, err);
    fclose(m);
    json_t *doc = rc == SC_OK ? json_loadb(buf, len, 0, NULL) : NULL;
    free(buf);
    json_t *plan = doc ? json_incref(json_array_get(json_object_get(doc, "plans"), 0)) : NULL;
    json_decref(doc);
    if (plan == NULL && rc == SC_OK)
        SC_ERRF(err, SC_ERR_INTERNAL, "the plan JSON could not be read back");
    return plan;
}

static sc_status write_json(const advise_args *a, const plan_advise_cfg *cfg,
                            const plan_advise_result *r, sc_err *err)
{
    json_t *root = json_object(), *front = json_array();
    if (r->have_best) {
        plan_request req = cfg->request;
        req.cluster = r->best_cluster;
        json_t *plan = plan_json(&req, r, err);
        if (plan == NULL) {
            json_decref(root);
            json_decref(front);
            return err->code;
        }
        json_t *best = point_json(a, &r->best);
        json_object_set_new(best, "plan", plan);
        json_object_set_new(root, "best", best);
    } else {
        json_object_set_new(root, "best", json_null());
        json_object_set_new(root, "note", json_string(r->note));
    }
    for (int i = 0; i < r->n_pareto; i++)
        json_array_append_new(front, point_json(a, &r->pareto[i]));
    json_object_set_new(root, "pareto", front);
    json_object_set_new(root, "objective", json_string(a->objective));
    json_object_set_new(root, "search",
                        json_pack("{s:I, s:f, s:I, s:b}", "classes", (json_int_t)r->classes,
                                  "candidates", r->candidates, "planned", (json_int_t)r->evaluated,
                                  "exact", r->exact));
    if (r->note[0] && r->have_best)
        json_object_set_new(root, "note", json_string(r->note));
    int bad = json_dumpf(root, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(10));
    json_decref(root);
    printf("\n");
    if (bad)
        return SC_ERRF(err, SC_ERR_IO, "writing the JSON to standard output failed");
    return SC_OK;
}

static void write_table(const advise_args *a, const plan_advise_cfg *cfg,
                        const plan_advise_result *r)
{
    const plan_cluster *cat = cfg->catalog;
    const char *unit = a->tokens_per_sample > 0 ? "Mtok" : "Msample";
    printf("catalogue %s: %d devices in %ld classes (type x server); %.0f candidate sets, %ld "
           "planned (%s)\n",
           cat->source, cat->n_devices, r->classes, r->candidates, r->evaluated,
           r->exact ? "every one: exact" : "greedy ascent");
    if (r->have_best) {
        printf("best for %s: %d devices: ", a->objective, r->best.n_devices);
        describe(stdout, cat, &r->best);
        printf("\n  %.6g samples/s, %.4g per hour (devices %.4g, cross-zone traffic %.4g), %.4g "
               "per %s\n",
               r->best.samples_per_s, r->best.cost_per_hour, r->best.devices_per_hour,
               r->best.traffic_per_hour, per_million(a, &r->best), unit);
        printf("  catalogue devices:");
        for (int i = 0; i < r->best.n_devices; i++)
            printf(" %d", r->best.devices[i]);
        printf(" (the plan's device i is the i-th of these)\n\n");
        plan_request req = cfg->request;
        req.cluster = r->best_cluster;
        plan_write_table(stdout, &req, &r->best_plan, 1);
    } else {
        printf("no best: %s\n", r->note);
    }
    printf("\nPareto front (throughput against cost per hour):\n");
    printf("%12s %12s %12s %8s  %s\n", "samples/s", "cost/h", unit, "devices", "which");
    for (int i = 0; i < r->n_pareto; i++) {
        const plan_advise_point *p = &r->pareto[i];
        printf("%12.6g %12.4g %12.4g %8d  ", p->samples_per_s, p->cost_per_hour, per_million(a, p),
               p->n_devices);
        describe(stdout, cat, p);
        printf("\n");
    }
    if (r->note[0] && r->have_best)
        printf("note: %s\n", r->note);
}

int cmd_advise(const cli_command *self, int argc, char **argv)
{
    if (cli_wants_help(self, argc, argv)) {
        cli_print_usage(self, stdout);
        return CLI_OK;
    }
    advise_args a;
    int code = parse_args(self, argc, argv, &a);
    if (code != CLI_OK)
        return code;
    if (a.workers || a.job != NULL)
        return advise_margins_main(self, &a);
    sc_err err;
    sc_err_clear(&err);
    plan_profile *prof = NULL;
    plan_cluster *cat = NULL;
    plan_advise_result res;
    memset(&res, 0, sizeof res);
    plan_advise_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    if (plan_advise_objective_parse(a.objective, &cfg.objective, &err) != SC_OK)
        return cli_usage_error(self, "%s", err.msg);
    if (plan_profile_load(&prof, a.model, &err) != SC_OK ||
        plan_cluster_load_catalog(&cat, a.catalog, &err) != SC_OK)
        goto report;
    cfg.catalog = cat;
    cfg.strategy = a.strategy;
    cfg.tokens_per_sample = a.tokens_per_sample;
    cfg.request = (plan_request){.profile = prof,
                                 .batch = (int)a.batch,
                                 .microbatches = (int)a.microbatches,
                                 .schedule = (plan_sched_kind)a.schedule,
                                 .runtime_zb1 = 1,
                                 .max_stages = (int)a.stages};
    if (plan_advise_run(&cfg, &res, &err) != SC_OK)
        goto report;
    if (a.json) {
        if (write_json(&a, &cfg, &res, &err) != SC_OK)
            goto report;
    } else {
        write_table(&a, &cfg, &res);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        SC_ERRF(&err, SC_ERR_IO, "writing to standard output failed: %s", strerror(errno));
        goto report;
    }
    if (!res.have_best) {
        SC_ERRF(&err, SC_ERR_INVALID, "%s: %s", a.catalog, res.note);
        goto report;
    }
    goto done;
report:
    code = cli_report(self, &err);
done:
    plan_advise_result_free(&res);
    plan_profile_destroy(&prof);
    plan_cluster_destroy(&cat);
    return code;
}
