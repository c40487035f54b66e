/* `stagecraft plan`: compares pipeline partitioning strategies offline on a profile and a
 * cluster (file or --gpus shorthand), prints a table or the plan JSON, and can write the
 * simulated schedule of the fastest plan as a Chrome trace. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "common/sc_util.h"
#include "coordinator/planner/plan.h"
#include "coordinator/planner/plan_hint.h"

typedef struct plan_args {
    const char *model, *cluster, *trace;
    int64_t gpus, batch, microbatches, stages;
    double bandwidth, memory;
    int have_bw, json, all;
    int strategy;
    int schedule;
    int zb1_peak_cap;
} plan_args;

/* The flags `plan` takes, and whether each takes a value (--help is handled before parsing). */
static const struct {
    const char *name;
    int takes_value;
} plan_flags[] = {{"--model", 1},      {"--cluster", 1},  {"--gpus", 1},         {"--bandwidth", 1},
                  {"--memory", 1},     {"--batch", 1},    {"--microbatches", 1}, {"--stages", 1},
                  {"--schedule", 1},   {"--strategy", 1}, {"--json", 0},         {"--trace", 1},
                  {"--zb1-memory", 1}, {"--help", 0}};

#define N_PLAN_FLAGS ((int)(sizeof plan_flags / sizeof plan_flags[0]))

/* Index of flag f in plan_flags, -1 when unknown. */
static int flag_index(const char *f)
{
    for (int i = 0; i < N_PLAN_FLAGS; i++)
        if (strcmp(f, plan_flags[i].name) == 0)
            return i;
    return -1;
}

static int unknown_flag(const cli_command *self, const char *f)
{
    char valid[256];
    size_t at = 0;
    valid[0] = '\0';
    for (int i = 0; i < N_PLAN_FLAGS && at < sizeof valid; i++)
        at += (size_t)snprintf(valid + at, sizeof valid - at, "%s%s", i ? ", " : "",
                               plan_flags[i].name);
    return cli_usage_error(self, "unknown flag '%s'; valid flags: %s", f, valid);
}

static int parse_args(const cli_command *self, int argc, char **argv, plan_args *a)
{
    sc_err err;
    sc_err_clear(&err);
    memset(a, 0, sizeof *a);
    a->all = 1;
    a->schedule = PLAN_SCHED_1F1B;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strncmp(f, "--", 2) != 0)
            return cli_usage_error(self, "unexpected argument '%s'", f);
        int known = flag_index(f);
        if (known < 0)
            return unknown_flag(self, f);
        if (!plan_flags[known].takes_value) { /* --json (--help never gets here) */
            a->json = 1;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage_error(self, "%s needs a value", f);
        const char *v = argv[++i];
        sc_status rc = SC_OK;
        if (strcmp(f, "--model") == 0)
            a->model = v;
        else if (strcmp(f, "--cluster") == 0)
            a->cluster = v;
        else if (strcmp(f, "--trace") == 0)
            a->trace = v;
        else if (strcmp(f, "--gpus") == 0)
            rc = sc_parse_int64(v, 1, PLAN_MAX_DEVICES, "--gpus", &a->gpus, &err);
        else if (strcmp(f, "--bandwidth") == 0) {
            rc = sc_parse_double(v, 1, 1e18, "--bandwidth (bytes per second)", &a->bandwidth, &err);
            a->have_bw = 1;
        } else if (strcmp(f, "--memory") == 0)
            rc = sc_parse_double(v, 1, 1e18, "--memory (bytes)", &a->memory, &err);
        else if (strcmp(f, "--batch") == 0)
            rc = sc_parse_int64(v, 1, PLAN_MAX_BATCH, "--batch", &a->batch, &err);
        else if (strcmp(f, "--stages") == 0)
            rc = sc_parse_int64(v, 1, PLAN_MAX_DEVICES, "--stages", &a->stages, &err);
        else if (strcmp(f, "--microbatches") == 0) {
            if (strcmp(v, "auto") == 0)
                a->microbatches = 0;
            else
                rc = sc_parse_int64(v, 1, PLAN_MAX_BATCH, "--microbatches (a count or auto)",
                                    &a->microbatches, &err);
        } else if (strcmp(f, "--schedule") == 0) {
            a->schedule = plan_sched_parse(v);
            if (a->schedule < 0)
                return cli_usage_error(
                    self, "--schedule '%s': expected gpipe, 1f1b, pipedream, sliced, zb1 or auto",
                    v);
        } else if (strcmp(f, "--zb1-memory") == 0) {
            if (strcmp(v, "device") != 0 && strcmp(v, "1f1b_peak") != 0)
                return cli_usage_error(self, "--zb1-memory '%s': expected device or 1f1b_peak", v);
            a->zb1_peak_cap = strcmp(v, "1f1b_peak") == 0;
        } else if (strcmp(f, "--strategy") == 0) {
            if (strcmp(v, "all") == 0) {
                a->all = 1;
            } else {
                a->all = 0;
                a->strategy = plan_strategy_parse(v);
                if (a->strategy < 0)
                    return cli_usage_error(self,
                                           "--strategy '%s': expected uniform, blockpartition, "
                                           "minmax, pipedream, autopipe, hetero, umpipe, "
                                           "exhaustive or all",
                                           v);
            }
        }
        if (rc != SC_OK)
            return cli_usage_error(self, "%s", err.msg);
    }
    if (a->model == NULL)
        return cli_usage_error(self, "--model FILE is required");
    if ((a->cluster != NULL) == (a->gpus > 0))
        return cli_usage_error(self,
                               "give either --cluster FILE or --gpus N --bandwidth BYTES_PER_S");
    if (a->gpus > 0 && !a->have_bw)
        return cli_usage_error(self, "--gpus needs --bandwidth BYTES_PER_S (e.g. 12.5e9)");
    return CLI_OK;
}

/* --trace: whether the file can be written, checked before any planning (a missing folder, a
 * folder's name, no permission) rather than after the table. Opens it for appending, which
 * creates it without truncating one that exists; one created here is removed again, so that a
 * run that fails later leaves no empty trace. */
static sc_status check_trace_path(const char *path, sc_err *err)
{
    struct stat st;
    int existed = stat(path, &st) == 0;
    if (existed && S_ISDIR(st.st_mode))
        return SC_ERRF(err, SC_ERR_IO, "--trace %s: is a directory; expected a file to write",
                       path);
    FILE *f = fopen(path, "a");
    if (f == NULL)
        return SC_ERRF(err, SC_ERR_IO, "--trace %s: cannot write the file: %s", path,
                       strerror(errno));
    fclose(f);
    if (!existed)
        remove(path);
    return SC_OK;
}

/* Under the table: a subset of the devices that plans faster (or, with prices, costs less per
 * sample) than all of them with the fastest plan's strategy (plan_hint.h bounds the search). A
 * failure to find one prints nothing: the hint is never the command's answer. */
static void print_hint(const plan_request *req, const plan_result *res, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (res[i].ok && res[i].fits_memory &&
            (best < 0 || res[i].throughput_samples_per_s > res[best].throughput_samples_per_s))
            best = i;
    if (best < 0)
        return;
    plan_hint h;
    sc_err e;
    sc_err_clear(&e);
    char line[512];
    plan_request r = *req;
    r.record_trace = 0;
    if (plan_hint_find(&r, res[best].strategy, res[best].throughput_samples_per_s, &h, &e) != SC_OK)
        return;
    plan_hint_line(req->cluster, &h, line, sizeof line);
    if (line[0])
        printf("%s\n", line);
}

int cmd_plan(const cli_command *self, int argc, char **argv)
{
    if (cli_wants_help(self, argc, argv)) {
        cli_print_usage(self, stdout);
        return CLI_OK;
    }
    plan_args a;
    int code = parse_args(self, argc, argv, &a);
    if (code != CLI_OK)
        return code;
    sc_err err;
    sc_err_clear(&err);
    plan_profile *prof = NULL;
    plan_cluster *cl = NULL;
    plan_result res[PLAN_STRAT_COUNT];
    int n = 0;
    code = CLI_OK;
    memset(res, 0, sizeof res);
    if (a.trace != NULL && check_trace_path(a.trace, &err) != SC_OK)
        goto report;
    if (plan_profile_load(&prof, a.model, &err) != SC_OK)
        goto report;
    if (a.cluster ? plan_cluster_load(&cl, a.cluster, &err)
                  : plan_cluster_new_uniform(&cl, (int)a.gpus, a.bandwidth, a.memory, &err))
        goto report;
    plan_request req = {.profile = prof,
                        .cluster = cl,
                        .batch = (int)a.batch,
                        .microbatches = (int)a.microbatches,
                        .schedule = (plan_sched_kind)a.schedule,
                        .runtime_zb1 = 1, /* the workers run zb1: auto may pick it */
                        .max_stages = (int)a.stages,
                        .zb1_peak_cap = a.zb1_peak_cap,
                        .record_trace = a.trace != NULL};
    int first_ok = -1;
    sc_err first_err;
    sc_err_clear(&first_err);
    for (int s = 0; s < PLAN_STRAT_COUNT; s++) {
        if (!a.all && s != a.strategy)
            continue;
        sc_err e;
        sc_err_clear(&e);
        sc_status rc = plan_run(&req, (plan_strategy)s, &res[n], &e);
        if (rc != SC_OK && res[n].error[0] == '\0') {
            /* a bad request, not a strategy's failure: every strategy would say the same */
            err = e;
            n++;
            goto report;
        }
        if (rc != SC_OK && first_err.code == SC_OK)
            first_err = e;
        if (res[n].ok && first_ok < 0)
            first_ok = n;
        n++;
    }
    if (a.json) {
        if (plan_write_json(stdout, &req, res, n, &err) != SC_OK)
            goto report;
    } else {
        plan_write_table(stdout, &req, res, n);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) { /* a full disk, a closed pipe */
        SC_ERRF(&err, SC_ERR_IO, "writing the plans to standard output failed: %s",
                strerror(errno));
        goto report;
    }
    if (first_ok < 0) {
        err = first_err;
        goto report;
    }
    if (!a.json)
        print_hint(&req, res, n);
    if (a.trace) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (res[i].ok && (best < 0 || res[i].iteration_time_s < res[best].iteration_time_s))
                best = i;
        if (best < 0) {
            SC_ERRF(&err, SC_ERR_INVALID, "--trace: no plan succeeded, so there is no trace");
            goto report;
        }
        if (plan_write_trace(&res[best], a.trace, &err) != SC_OK)
            goto report;
        if (!a.json)
            printf("trace of %s written to %s (open in Perfetto or chrome://tracing)\n",
                   plan_strategy_name(res[best].strategy), a.trace);
    }
    goto done;
report:
    code = cli_report(self, &err);
done:
    for (int i = 0; i < n; i++)
        plan_result_free(&res[i]);
    plan_profile_destroy(&prof);
    plan_cluster_destroy(&cl);
    return code;
}
