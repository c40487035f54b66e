/*
 * `stagecraft trace JOB --out FILE`: the measured timeline of a running job's last iterations
 * beside its plan, as one Chrome / Perfetto trace file (Coordinator.GetTrace), and a one-line
 * summary: events, iterations, workers, measured against planned iteration time.
 * Not here: collecting and aligning the timelines (the coordinator's jobs_trace.c, trace.c).
 * Contract: the file is written only when the coordinator returns a trace; workers that gave no
 * timeline are named on stderr and the trace holds the others (exit 0).
 */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "proto/stagecraft.pb-c.h"

typedef struct {
    const char *job, *out, *coordinator;
    long iterations;
    int json;
} trace_args;

static int parse_args(const cli_command *self, int argc, char **argv, trace_args *a)
{
    enum { O_OUT = 1, O_ITER, O_COORD, O_JSON };
    static const struct option opts[] = {{"out", required_argument, NULL, O_OUT},
                                         {"iterations", required_argument, NULL, O_ITER},
                                         {"coordinator", required_argument, NULL, O_COORD},
                                         {"json", no_argument, NULL, O_JSON},
                                         {NULL, 0, NULL, 0}};
    memset(a, 0, sizeof *a);
    int c;
    while ((c = cli_getopt(self, argc, argv, opts)) != -1) {
        char *end = NULL;
        switch (c) {
        case O_OUT:
            a->out = optarg;
            break;
        case O_ITER:
            a->iterations = strtol(optarg, &end, 10);
            if (end == optarg || *end != '\0' || a->iterations < 1 || a->iterations > 1000)
                return cli_usage_error(self, "--iterations '%s': expected a count from 1 to 1000",
                                       optarg);
            break;
        case O_JSON:
            a->json = 1;
            break;
        case O_COORD:
            a->coordinator = optarg;
            break;
        default: /* -2: cli_getopt printed the usage error */
            return CLI_USAGE;
        }
    }
    if (argc - optind != 1)
        return cli_usage_error(
            self, argc - optind == 0 ? "missing JOB" : "unexpected argument '%s'", argv[argc - 1]);
    a->job = argv[optind];
    if (a->out == NULL)
        return cli_usage_error(self, "--out FILE is required (where the trace goes)");
    sc_err err;
    sc_err_clear(&err);
    if (cli_coordinator_addr(a->coordinator, &a->coordinator, &err) != SC_OK)
        return cli_report(self, &err);
    return CLI_OK;
}

static void print_summary(const trace_args *a, const Stagecraft__GetTraceResponse *r)
{
    if (a->json) {
        json_t *missing = json_array();
        for (size_t i = 0; i < r->n_missing; i++)
            json_array_append_new(missing, json_string(r->missing[i]));
        json_t *o =
            json_pack("{s:s, s:s, s:i, s:i, s:i, s:f, s:f, s:o}", "job", a->job, "out", a->out,
                      "events", (int)r->events, "iterations", (int)r->iterations, "workers",
                      (int)r->workers, "measured_iteration_s", r->measured_iteration_s,
                      "planned_iteration_s", r->planned_iteration_s, "missing", missing);
        json_dumpf(o, stdout, JSON_COMPACT);
        printf("\n");
        json_decref(o);
        return;
    }
    printf("%s: %u events, %u iterations, %u workers; iteration measured %.4g s, planned %.4g s",
           a->job, r->events, r->iterations, r->workers, r->measured_iteration_s,
           r->planned_iteration_s);
    if (r->planned_iteration_s > 0)
        printf(" (%+.0f%%)",
               100.0 * (r->measured_iteration_s - r->planned_iteration_s) / r->planned_iteration_s);
    printf("; written to %s\n", a->out);
}

int cmd_trace(const cli_command *self, int argc, char **argv)
{
    if (cli_wants_help(self, argc, argv)) {
        cli_print_usage(self, stdout);
        return CLI_OK;
    }
    trace_args a;
    int code = parse_args(self, argc, argv, &a);
    if (code != CLI_OK)
        return code;
    sc_err err;
    sc_err_clear(&err);
    Stagecraft__GetTraceRequest req = STAGECRAFT__GET_TRACE_REQUEST__INIT;
    req.job_id = (char *)a.job;
    req.iterations = (uint32_t)a.iterations;
    ProtobufCMessage *m = NULL;
    if (cli_call(a.coordinator, "/stagecraft.Coordinator/GetTrace", &req.base,
                 &stagecraft__get_trace_response__descriptor, &m, &err) != SC_OK)
        return cli_report(self, &err);
    const Stagecraft__GetTraceResponse *r = (const void *)m;
    FILE *f = fopen(a.out, "w");
    size_t len = strlen(r->trace_json);
    bool ok = f != NULL && fwrite(r->trace_json, 1, len, f) == len && fputc('\n', f) != EOF;
    if (f != NULL && fclose(f) != 0)
        ok = false;
    if (!ok) {
        SC_ERRF(&err, SC_ERR_IO, "--out %s: cannot write the trace", a.out);
        protobuf_c_message_free_unpacked(m, NULL);
        return cli_report(self, &err);
    }
    for (size_t i = 0; i < r->n_missing; i++)
        fprintf(stderr, "stagecraft trace: not in the trace: worker %s\n", r->missing[i]);
    print_summary(&a, r);
    protobuf_c_message_free_unpacked(m, NULL);
    return CLI_OK;
}
