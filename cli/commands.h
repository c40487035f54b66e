/* Entry points and usage texts of the subcommands, one pair per cmd_<name>.c. */
#ifndef SC_CLI_COMMANDS_H
#define SC_CLI_COMMANDS_H

#include "cli/cli.h"

#define CMD_VERSION_USAGE                                                                          \
    "usage: stagecraft version [--json]\n\n"                                                       \
    "Prints the stagecraft version, the wire protocol version and whether this build has CUDA.\n"  \
    "  --json   print {\"version\": ..., \"protocol\": ..., \"build\": ...}\n"
int cmd_version(const cli_command *self, int argc, char **argv);

#define CMD_HELP_USAGE                                                                             \
    "usage: stagecraft help [SUBCOMMAND]\n\n"                                                      \
    "Shows the list of subcommands, or the help of one.\n"
int cmd_help(const cli_command *self, int argc, char **argv);

#endif /* SC_CLI_COMMANDS_H */
