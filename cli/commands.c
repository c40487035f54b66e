/* The subcommand table. Each subcommand lives in cmd_<name>.c and is listed here once. */
#include "cli/cli.h"
#include "cli/commands.h"

const cli_command cli_commands[] = {
    {"version", "print the version and build kind", CMD_VERSION_USAGE, cmd_version},
    {"help", "show help for a subcommand", CMD_HELP_USAGE, cmd_help},
    {NULL, NULL, NULL, NULL},
};
