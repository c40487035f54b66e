/*
 * `stagecraft rebalance JOB [--dry-run]`: re-plans a running job now with the speeds measured
 * while it runs (Coordinator.RebalanceJob) and moves its blocks to the new plan; with --dry-run
 * only shows the plan it would use and the predicted gain. Prints one line (or --json: the
 * figures and the plan).
 * Not here: deciding or moving (the coordinator's jobs_rebalance.c and the workers).
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
    const char *job, *coordinator, *token_file;
    int json, dry_run;
} rebalance_args;

static int parse_args(const cli_command *self, int argc, char **argv, rebalance_args *a)
{
    enum { O_DRY = 1, O_COORD, O_JSON, O_TOKEN };
    static const struct option opts[] = {{"dry-run", no_argument, NULL, O_DRY},
                                         {"coordinator", required_argument, NULL, O_COORD},
                                         {"json", no_argument, NULL, O_JSON},
                                         {"token-file", required_argument, NULL, O_TOKEN},
                                         {NULL, 0, NULL, 0}};
    memset(a, 0, sizeof *a);
    int c;
    while ((c = cli_getopt(self, argc, argv, opts)) != -1) {
        switch (c) {
        case O_DRY:
            a->dry_run = 1;
            break;
        case O_JSON:
            a->json = 1;
            break;
        case O_COORD:
            a->coordinator = optarg;
            break;
        case O_TOKEN:
            a->token_file = optarg;
            break;
        default: /* -2: cli_getopt printed the usage error */
            return CLI_USAGE;
        }
    }
    if (argc - optind != 1)
        return cli_usage_error(
            self, argc - optind == 0 ? "missing JOB" : "unexpected argument '%s'", argv[argc - 1]);
    a->job = argv[optind];
    sc_err err;
    sc_err_clear(&err);
    if (cli_coordinator_addr(a->coordinator, &a->coordinator, &err) != SC_OK)
        return cli_report(self, &err);
    return CLI_OK;
}

int cmd_rebalance(const cli_command *self, int argc, char **argv)
{
    if (cli_wants_help(self, argc, argv)) {
        cli_print_usage(self, stdout);
        return CLI_OK;
    }
    rebalance_args a;
    int code = parse_args(self, argc, argv, &a);
    if (code != CLI_OK)
        return code;
    sc_err err;
    sc_err_clear(&err);
    char token[256];
    if (cli_read_token(a.token_file, "STAGECRAFT_TOKEN", token, sizeof token, &err) != SC_OK)
        return cli_report(self, &err);
    Stagecraft__RebalanceJobRequest req = STAGECRAFT__REBALANCE_JOB_REQUEST__INIT;
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.token = token;
    req.header = &hdr;
    req.job_id = (char *)a.job;
    req.dry_run = a.dry_run;
    ProtobufCMessage *m = NULL;
    if (cli_call(a.coordinator, "/stagecraft.Coordinator/RebalanceJob", &req.base,
                 &stagecraft__rebalance_job_response__descriptor, &m, &err) != SC_OK)
        return cli_report(self, &err);
    const Stagecraft__RebalanceJobResponse *r = (const void *)m;
    if (a.json) {
        json_t *plan = json_loads(r->plan_json, 0, NULL);
        json_t *o = json_pack("{s:s, s:b, s:b, s:f, s:f, s:f, s:s, s:o}", "job", a.job, "dry_run",
                              a.dry_run, "started", r->started, "current_iteration_s",
                              r->current_iteration_s, "new_iteration_s", r->new_iteration_s,
                              "predicted_gain", r->predicted_gain, "message", r->message, "plan",
                              plan ? plan : json_null());
        json_dumpf(o, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(o);
    } else {
        printf("%s: %s\n", a.job, r->message);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return CLI_OK;
}
