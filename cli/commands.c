/* The subcommand table. Each subcommand lives in cmd_<name>.c and is listed here once. */
#include "cli/cli.h"
#include "cli/commands.h"

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
    {"profile", "measure each block of a model on this machine (profile JSON)",
     CMD_PROFILE_USAGE, cmd_profile},
    {"plan", "compare pipeline partitioning strategies offline (table, JSON, trace)",
     CMD_PLAN_USAGE, cmd_plan},
    {"demo", "train a small GPT on a local cluster of workers", CMD_DEMO_USAGE, cmd_demo},
    {NULL, NULL, NULL, NULL},
};
