/* `stagecraft submit`, `status`, `cancel`, `rebalance` and `workers`: the client subcommands. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/follow.h"
#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "coordinator/jobspec.h"
#include "proto/sc_view.h"

/* how often a followed job prints progress when stdout is not a terminal */
#define FOLLOW_PROGRESS_S 5.0

enum { O_COORD = 1, O_JSON, O_TOKEN, O_REASON, O_FOLLOW, O_DRY_RUN, O_HISTORY };

static const struct option client_opts[] = {
    {"coordinator", required_argument, NULL, O_COORD},
    {"json", no_argument, NULL, O_JSON},
    {"token-file", required_argument, NULL, O_TOKEN},
    {"reason", required_argument, NULL, O_REASON},
    {"follow", no_argument, NULL, O_FOLLOW},
    {"dry-run", no_argument, NULL, O_DRY_RUN},
    {"history", no_argument, NULL, O_HISTORY},
    {NULL, 0, NULL, 0},
};

typedef struct {
    const char *coordinator;
    const char *token_file;
    const char *reason;
    int json;
    int follow;      /* submit and status JOB: follow the job to its end */
    int dry_run;     /* rebalance: show the plan, change nothing */
    int history;     /* status JOB: its training series */
    const char *arg; /* the one positional argument, or NULL */
} client_args;

/* Whether subcommand `self` takes the shared flag `opt`: each takes only the flags its help
 * names, so a flag given to the wrong subcommand (a token to `status`) is refused, not
 * silently ignored. */
static bool client_takes(const cli_command *self, int opt)
{
    switch (opt) {
    case O_COORD:
    case O_JSON:
        return true;
    case O_TOKEN:
        return self->run == cmd_submit || self->run == cmd_cancel || self->run == cmd_rebalance;
    case O_REASON:
        return self->run == cmd_cancel;
    case O_FOLLOW:
        return self->run == cmd_submit || self->run == cmd_status;
    case O_DRY_RUN:
        return self->run == cmd_rebalance;
    case O_HISTORY:
        return self->run == cmd_status;
    }
    return false;
}

/* Parses the shared flags; `positional` is 0 (none), 1 (exactly one) or 2 (at most one). */
static int parse_client_args(const cli_command *self, int argc, char **argv, int positional,
                             client_args *a)
{
    memset(a, 0, sizeof *a);
    int c;
    while ((c = cli_getopt(self, argc, argv, client_opts)) != -1) {
        if (c > 0 && !client_takes(self, c)) {
            const char *name = "?";
            for (const struct option *o = client_opts; o->name != NULL; o++)
                if (o->val == c)
                    name = o->name;
            return cli_usage_error(self, "unknown flag '--%s'", name);
        }
        switch (c) {
        case -2:
            return CLI_USAGE;
        case O_COORD:
            a->coordinator = optarg;
            break;
        case O_JSON:
            a->json = 1;
            break;
        case O_TOKEN:
            a->token_file = optarg;
            break;
        case O_REASON:
            a->reason = optarg;
            break;
        case O_FOLLOW:
            a->follow = 1;
            break;
        case O_DRY_RUN:
            a->dry_run = 1;
            break;
        case O_HISTORY:
            a->history = 1;
            break;
        }
    }
    int rest = argc - optind;
    if (rest > 1 || (positional == 0 && rest > 0))
        return cli_usage_error(self, "unexpected argument '%s'", argv[argc - 1]);
    if (positional == 1 && rest == 0)
        return cli_usage_error(self, "missing argument");
    a->arg = rest ? argv[optind] : NULL;
    sc_err err;
    sc_err_clear(&err);
    if (cli_coordinator_addr(a->coordinator, &a->coordinator, &err) != SC_OK)
        return cli_report(self, &err);
    return CLI_OK;
}

/* --follow: the job's states and progress until it ends; 0 only when it succeeded. */
static int follow(const cli_command *self, const client_args *a, const char *job_id)
{
    sc_err err;
    sc_err_clear(&err);
    int rc = cli_follow_job(a->coordinator, job_id, a->json, FOLLOW_PROGRESS_S, &err);
    if (rc == 0)
        return CLI_OK;
    return err.code != SC_OK ? cli_report(self, &err) : CLI_FAILURE;
}

int cmd_submit(const cli_command *self, int argc, char **argv)
{
    client_args a;
    int rc = parse_client_args(self, argc, argv, 1, &a);
    if (rc != CLI_OK)
        return rc;
    sc_err err;
    sc_err_clear(&err);
    char *text;
    size_t len;
    if (sc_file_read(a.arg, COORD_JOBSPEC_MAX_BYTES, &text, &len, &err) != SC_OK)
        return cli_report(self, &err);
    /* Validate here first: the user gets the file name, line and column in the message. */
    coord_jobspec spec;
    if (coord_jobspec_parse(a.arg, text, len, &spec, &err) != SC_OK) {
        free(text);
        return cli_report(self, &err);
    }
    coord_jobspec_clear(&spec);
    char token[256];
    if (cli_read_token(a.token_file, "STAGECRAFT_TOKEN", token, sizeof token, &err) != SC_OK) {
        free(text);
        return cli_report(self, &err);
    }
    Stagecraft__SubmitJobRequest req = STAGECRAFT__SUBMIT_JOB_REQUEST__INIT;
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.token = token;
    req.header = &hdr;
    req.job_json = text;
    ProtobufCMessage *m = NULL;
    sc_status s = cli_call(a.coordinator, "/stagecraft.Coordinator/SubmitJob", &req.base,
                           &stagecraft__submit_job_response__descriptor, &m, &err);
    free(text);
    if (s != SC_OK)
        return cli_report(self, &err);
    Stagecraft__SubmitJobResponse *resp = (void *)m;
    if (a.json)
        printf("{\"job_id\": \"%s\"}\n", resp->job_id);
    else
        printf("submitted %s\n", resp->job_id);
    fflush(stdout);
    if (a.follow)
        rc = follow(self, &a, resp->job_id);
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

static void print_plan(json_t *plan)
{
    printf("plan:    %s, predicted %.4g s per iteration, %.4g samples/s, bubble %.1f%%\n",
           json_string_value(json_object_get(plan, "strategy")),
           json_number_value(json_object_get(plan, "iteration_time_s")),
           json_number_value(json_object_get(plan, "throughput_samples_per_s")),
           100.0 * json_number_value(json_object_get(plan, "bubble_fraction")));
    const char *note = json_string_value(json_object_get(plan, "note"));
    if (note)
        printf("  note: %s\n", note);
    json_t *tr = json_object_get(plan, "transports");
    if (json_array_size(tr) > 0) {
        printf("  data plane:");
        for (size_t b = 0; b < json_array_size(tr); b++)
            printf(" %zu-%zu %s%s", b, b + 1, json_string_value(json_array_get(tr, b)),
                   b + 1 < json_array_size(tr) ? "," : "");
        printf("\n");
    }
    /* replicated stages: how their copies all-reduce ("none" for single copies is left out) */
    json_t *red = json_object_get(plan, "replica_reduce");
    bool any = false;
    for (size_t s = 0; s < json_array_size(red); s++) {
        const char *how = json_string_value(json_array_get(red, s));
        if (how == NULL || strcmp(how, "none") == 0)
            continue;
        printf("%s stage %zu %s", any ? "," : "  gradient all-reduce:", s,
               strcmp(how, "nccl") == 0 ? "nccl (on the GPUs)" : "host memory");
        any = true;
    }
    if (any)
        printf("\n");
    printf("  %-6s %-12s %-16s %-12s %s\n", "stage", "blocks", "workers", "compute_s",
           "peak_memory");
    size_t i;
    json_t *st;
    json_array_foreach(json_object_get(plan, "stages"), i, st)
    {
        char blocks[32], workers[128] = "";
        snprintf(blocks, sizeof blocks, "%lld-%lld",
                 (long long)json_integer_value(json_object_get(st, "first_block")),
                 (long long)json_integer_value(json_object_get(st, "last_block")));
        json_t *ids = json_object_get(st, "worker_ids");
        if (!json_is_array(ids))
            ids = json_object_get(st, "devices");
        size_t k;
        json_t *w;
        json_array_foreach(ids, k, w)
        {
            size_t used = strlen(workers);
            if (json_is_string(w))
                snprintf(workers + used, sizeof workers - used, "%s%s", k ? "," : "",
                         json_string_value(w));
            else
                snprintf(workers + used, sizeof workers - used, "%s%lld", k ? "," : "",
                         (long long)json_integer_value(w));
        }
        printf("  %-6zu %-12s %-16s %-12.4g %.3g MB\n", i, blocks, workers,
               json_number_value(json_object_get(st, "compute_s")),
               json_number_value(json_object_get(st, "peak_memory_bytes")) / 1e6);
    }
}

/* status JOB --history: the job's training series as a table, oldest step first. */
static void print_history(const Stagecraft__JobInfo *j)
{
    if (j->n_history == 0) {
        printf("%s (%s): no steps recorded yet\n", j->job_id, sc_view_job_state_name(j->state));
        return;
    }
    printf("%s (%s): %zu steps recorded, %llu to %llu\n", j->job_id,
           sc_view_job_state_name(j->state), j->n_history, (unsigned long long)j->history[0]->step,
           (unsigned long long)j->history[j->n_history - 1]->step);
    printf("%10s %12s %12s %13s\n", "STEP", "LOSS", "SAMPLES/S", "ITERATION_S");
    for (size_t i = 0; i < j->n_history; i++) {
        const Stagecraft__HistoryPoint *h = j->history[i];
        char loss[32], rate[32];
        cli_fmt_figure(loss, sizeof loss, h->has_loss, "%.4f", h->loss);
        cli_fmt_figure(rate, sizeof rate, h->samples_per_s_known, "%.1f", h->samples_per_s);
        printf("%10llu %12s %12s %13.4g\n", (unsigned long long)h->step, loss, rate,
               h->iteration_s);
    }
}

int cmd_status(const cli_command *self, int argc, char **argv)
{
    client_args a;
    int rc = parse_client_args(self, argc, argv, 2, &a);
    if (rc != CLI_OK)
        return rc;
    sc_err err;
    sc_err_clear(&err);
    ProtobufCMessage *m = NULL;
    if (a.arg == NULL && a.follow)
        return cli_usage_error(self, "--follow needs a JOB to follow");
    if (a.history && (a.arg == NULL || a.follow))
        return cli_usage_error(self, "--history needs a JOB, without --follow");
    if (a.arg == NULL) {
        Stagecraft__ListJobsRequest req = STAGECRAFT__LIST_JOBS_REQUEST__INIT;
        if (cli_call(a.coordinator, "/stagecraft.Coordinator/ListJobs", &req.base,
                     &stagecraft__list_jobs_response__descriptor, &m, &err) != SC_OK)
            return cli_report(self, &err);
        Stagecraft__ListJobsResponse *resp = (void *)m;
        if (a.json) {
            json_t *o = sc_view_jobs(resp);
            json_dumpf(o, stdout, JSON_INDENT(2));
            printf("\n");
            json_decref(o);
        } else {
            printf("%-10s %-20s %-11s %-12s %s\n", "JOB", "NAME", "STATE", "STEP", "REASON");
            for (size_t i = 0; i < resp->n_jobs; i++) {
                Stagecraft__JobInfo *j = resp->jobs[i];
                char step[32];
                snprintf(step, sizeof step, "%llu/%llu", (unsigned long long)j->step,
                         (unsigned long long)j->steps);
                printf("%-10s %-20s %-11s %-12s %s\n", j->job_id, j->name, sc_view_job_state_name(j->state),
                       step, j->reason);
            }
        }
        protobuf_c_message_free_unpacked(m, NULL);
        return CLI_OK;
    }
    if (a.follow)
        return follow(self, &a, a.arg);
    Stagecraft__GetJobRequest req = STAGECRAFT__GET_JOB_REQUEST__INIT;
    req.job_id = (char *)a.arg;
    req.history = a.history;
    if (cli_call(a.coordinator, "/stagecraft.Coordinator/GetJob", &req.base,
                 &stagecraft__get_job_response__descriptor, &m, &err) != SC_OK)
        return cli_report(self, &err);
    Stagecraft__JobInfo *j = ((Stagecraft__GetJobResponse *)m)->job;
    json_t *o = sc_view_job(j);
    if (a.history)
        json_object_set_new(o, "history", sc_view_history(j));
    if (a.history && !a.json) {
        print_history(j);
    } else if (a.json) {
        json_dumpf(o, stdout, JSON_INDENT(2));
        printf("\n");
    } else {
        printf("job:     %s (%s)\nstate:   %s: %s\nstep:    %llu of %llu (last checkpoint %llu)\n",
               j->job_id, j->name, sc_view_job_state_name(j->state), j->reason, (unsigned long long)j->step,
               (unsigned long long)j->steps, (unsigned long long)j->last_checkpoint_step);
        if (j->checkpoint_error != NULL && j->checkpoint_error[0] != '\0')
            printf("checkpoint failed: %s\n", j->checkpoint_error);
        if (j->n_stages > 0) {
            char loss[32], rate[32];
            cli_fmt_figure(loss, sizeof loss, j->loss_known, "%.4f", j->loss);
            cli_fmt_figure(rate, sizeof rate, j->samples_per_s_known, "%.1f", j->samples_per_s);
            printf("loss:    %s, %s samples/s; iteration %.4g s measured, %.4g s predicted\n", loss,
                   rate, j->measured_iteration_s, j->predicted_iteration_s);
            printf("busy:   ");
            for (size_t i = 0; i < j->n_stages; i++)
                printf(" stage %u %.0f%%", j->stages[i]->stage,
                       100.0 * j->stages[i]->busy_fraction);
            printf("\n");
            if (j->stages[0]->measured_memory_bytes > 0) {
                printf("memory: ");
                for (size_t i = 0; i < j->n_stages; i++)
                    printf(" stage %u %.4g MB (planned %.4g)", j->stages[i]->stage,
                           j->stages[i]->measured_memory_bytes / 1e6,
                           j->stages[i]->predicted_memory_bytes / 1e6);
                printf("\n");
            }
        }
        bool reduce_shown = false; /* the copies' all-reduce, where a stage has copies */
        for (size_t i = 0; i < j->n_stages; i++) {
            const Stagecraft__StageStatus *st = j->stages[i];
            if (st->predicted_allreduce_s <= 0 && st->measured_allreduce_s <= 0)
                continue;
            printf("%s stage %u %.3g s measured, %.3g s planned\n",
                   reduce_shown ? "           " : "all-reduce:", st->stage,
                   st->measured_allreduce_s, st->predicted_allreduce_s);
            reduce_shown = true;
        }
        for (size_t i = 0; i < j->n_links; i++) /* the links training measures */
            printf("%s %s -> %s %.3g bytes/s measured, %.3g expected\n",
                   i ? "        " : "links:  ", j->links[i]->from_worker, j->links[i]->to_worker,
                   j->links[i]->measured_bytes_per_s, j->links[i]->expected_bytes_per_s);
        if (j->loss_scale > 0) /* fp16 */
            printf("fp16:    loss scale %g, %llu step(s) skipped on an overflow\n", j->loss_scale,
                   (unsigned long long)j->skipped_steps);
        int rounds;
        double prof_s = sc_view_profiling_s(j, &rounds);
        if (rounds > 0)
            printf("profiling: %.3g s%s\n", prof_s,
                   rounds > 1 ? " over several rounds (see the history)" : "");
        json_t *plan = json_object_get(o, "plan");
        if (json_is_object(plan))
            print_plan(plan);
        if (j->n_transitions > 0) {
            printf("history:\n");
            int64_t t0 = j->transitions[0]->at_unix_ms;
            for (size_t i = 0; i < j->n_transitions; i++)
                printf("  %+9.3f s  %-11s %s\n",
                       (double)(j->transitions[i]->at_unix_ms - t0) / 1000.0,
                       j->transitions[i]->to_state, j->transitions[i]->reason);
        }
    }
    json_decref(o);
    protobuf_c_message_free_unpacked(m, NULL);
    return CLI_OK;
}

int cmd_cancel(const cli_command *self, int argc, char **argv)
{
    client_args a;
    int rc = parse_client_args(self, argc, argv, 1, &a);
    if (rc != CLI_OK)
        return rc;
    sc_err err;
    sc_err_clear(&err);
    char token[256];
    if (cli_read_token(a.token_file, "STAGECRAFT_TOKEN", token, sizeof token, &err) != SC_OK)
        return cli_report(self, &err);
    Stagecraft__CancelJobRequest req = STAGECRAFT__CANCEL_JOB_REQUEST__INIT;
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.token = token;
    req.header = &hdr;
    req.job_id = (char *)a.arg;
    req.reason = (char *)(a.reason ? a.reason : "");
    ProtobufCMessage *m = NULL;
    if (cli_call(a.coordinator, "/stagecraft.Coordinator/CancelJob", &req.base,
                 &stagecraft__cancel_job_response__descriptor, &m, &err) != SC_OK)
        return cli_report(self, &err);
    const Stagecraft__CancelJobResponse *r = (const void *)m;
    Stagecraft__JobInfo *j = r->job;
    if (a.json) {
        json_t *o = sc_view_job(j);
        json_object_set_new(o, "already_cancelled", json_boolean(r->already_cancelled));
        json_dumpf(o, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(o);
    } else if (r->already_cancelled) {
        printf("%s is already cancelled (%s)\n", j->job_id, j->reason);
    } else {
        printf("%s is %s\n", j->job_id, sc_view_job_state_name(j->state));
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return CLI_OK;
}

/* rebalance JOB [--dry-run]: re-plans a running job with its measured speeds (RebalanceJob) */
int cmd_rebalance(const cli_command *self, int argc, char **argv)
{
    client_args a;
    int rc = parse_client_args(self, argc, argv, 1, &a);
    if (rc != CLI_OK)
        return rc;
    sc_err err;
    sc_err_clear(&err);
    /* the token is sent when there is one; the coordinator asks for it unless --dry-run */
    char token[256];
    if (cli_read_token(a.token_file, "STAGECRAFT_TOKEN", token, sizeof token, &err) != SC_OK)
        return cli_report(self, &err);
    Stagecraft__RebalanceJobRequest req = STAGECRAFT__REBALANCE_JOB_REQUEST__INIT;
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.token = token;
    req.header = &hdr;
    req.job_id = (char *)a.arg;
    req.dry_run = a.dry_run;
    ProtobufCMessage *m = NULL;
    if (cli_call(a.coordinator, "/stagecraft.Coordinator/RebalanceJob", &req.base,
                 &stagecraft__rebalance_job_response__descriptor, &m, &err) != SC_OK)
        return cli_report(self, &err);
    const Stagecraft__RebalanceJobResponse *r = (const void *)m;
    if (a.json) {
        json_t *plan = json_loads(r->plan_json, 0, NULL);
        json_t *o = json_pack("{s:s, s:b, s:b, s:f, s:f, s:f, s:s, s:o}", "job", a.arg, "dry_run",
                              a.dry_run, "started", r->started, "current_iteration_s",
                              r->current_iteration_s, "new_iteration_s", r->new_iteration_s,
                              "predicted_gain", r->predicted_gain, "message", r->message, "plan",
                              plan ? plan : json_null());
        json_dumpf(o, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(o);
    } else {
        printf("%s: %s\n", a.arg, r->message);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return CLI_OK;
}

int cmd_workers(const cli_command *self, int argc, char **argv)
{
    client_args a;
    int rc = parse_client_args(self, argc, argv, 0, &a);
    if (rc != CLI_OK)
        return rc;
    sc_err err;
    sc_err_clear(&err);
    ProtobufCMessage *m = NULL;
    Stagecraft__ListWorkersRequest req = STAGECRAFT__LIST_WORKERS_REQUEST__INIT;
    if (cli_call(a.coordinator, "/stagecraft.Coordinator/ListWorkers", &req.base,
                 &stagecraft__list_workers_response__descriptor, &m, &err) != SC_OK)
        return cli_report(self, &err);
    Stagecraft__ListWorkersResponse *resp = (void *)m;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    if (a.json) {
        json_t *o = sc_view_workers(resp);
        json_dumpf(o, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(o);
    } else {
        printf("%-6s %-20s %-16s %-8s %-32s %-10s %-10s %s\n", "ID", "NAME", "HOST", "STATE",
               "DEVICE", "HEARTBEAT", "JOB", "DOING");
        for (size_t i = 0; i < resp->n_workers; i++) {
            Stagecraft__WorkerInfo *w = resp->workers[i];
            char dev[64] = "-", hb[32] = "never";
            if (w->n_devices > 0)
                snprintf(dev, sizeof dev, "%s %.0f GB", w->devices[0]->name,
                         (double)w->devices[0]->memory_bytes / 1e9);
            if (w->last_heartbeat_unix_ms > 0)
                snprintf(hb, sizeof hb, "%.1f s ago",
                         (double)(now_ms - w->last_heartbeat_unix_ms) / 1000.0);
            printf("%-6s %-20s %-16s %-8s %-32s %-10s %-10s %s\n", w->id, w->name, w->host,
                   sc_view_worker_state_name(w->state), dev, hb, w->job_id[0] ? w->job_id : "-",
                   w->activity[0] ? w->activity : "-");
        }
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return CLI_OK;
}
