/*
 * The subcommand table, the lookup by name and `stagecraft help`, which lists the table. Each
 * other subcommand lives in cmd_<name>.c and is listed here once; no subcommand refers back to
 * the table, so this file and main.c sit above all of them.
 */
#include "cli/commands.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

const cli_command cli_commands[] = {
    {"version", "print the version and build kind", CMD_VERSION_USAGE, cmd_version},
    {"help", "show help for a subcommand", CMD_HELP_USAGE, cmd_help},
    {"topo", "show GPUs, links and NICs of this machine or of hwloc XML exports", CMD_TOPO_USAGE,
     cmd_topo},
    {"coordinator", "run the coordinator daemon", CMD_COORDINATOR_USAGE, cmd_coordinator},
    {"worker", "run a worker agent for one device", CMD_WORKER_USAGE, cmd_worker},
    {"submit", "submit a training job", CMD_SUBMIT_USAGE, cmd_submit},
    {"status", "show jobs, or one job's state and plan", CMD_STATUS_USAGE, cmd_status},
    {"cancel", "cancel a job", CMD_CANCEL_USAGE, cmd_cancel},
    {"workers", "list the registered workers", CMD_WORKERS_USAGE, cmd_workers},
    {"rebalance", "re-plan a running job with its measured speeds and move its blocks",
     CMD_REBALANCE_USAGE, cmd_rebalance},
    {"trace", "write a running job's measured timeline beside its plan (Chrome trace)",
     CMD_TRACE_USAGE, cmd_trace},
    {"logs", "print the recent log lines of a worker or of a job's workers", CMD_LOGS_USAGE,
     cmd_logs},
    {"profile", "measure each block of a model on this machine (profile JSON)", CMD_PROFILE_USAGE,
     cmd_profile},
    {"eval", "mean next-token loss of a language model on token shards", CMD_EVAL_USAGE, cmd_eval},
    {"export", "write a trained model as a Hugging Face checkpoint folder", CMD_EXPORT_USAGE,
     cmd_export},
    {"plan", "compare pipeline partitioning strategies offline (table, JSON, trace)",
     CMD_PLAN_USAGE, cmd_plan},
    {"advise", "choose which devices to plan on, for throughput or for cost (Pareto front)",
     CMD_ADVISE_USAGE, cmd_advise},
    {"demo", "train a small GPT on a local cluster of workers", CMD_DEMO_USAGE, cmd_demo},
    {NULL, NULL, NULL, NULL},
};

const cli_command *cli_find(const char *name)
{
    for (const cli_command *c = cli_commands; c->name != NULL; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

int cmd_help(const cli_command *self, int argc, char **argv)
{
    if (argc > 2)
        return cli_usage_error(self, "expected at most one subcommand name");
    if (argc == 2) {
        const cli_command *c = cli_find(argv[1]);
        if (c == NULL)
            return cli_usage_error(self, "unknown subcommand '%s'", argv[1]);
        cli_print_usage(c, stdout);
        return CLI_OK;
    }
    printf("subcommands:\n");
    for (const cli_command *c = cli_commands; c->name != NULL; c++)
        printf("  %-12s %s\n", c->name, c->summary);
    printf("\n`stagecraft SUBCOMMAND --help` shows the flags of one.\n");
    return CLI_OK;
}
