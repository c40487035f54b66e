/* `stagecraft version` and `stagecraft help`: the two subcommands that need no other module. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "proto/sc_wire.h"
#include "sc_version.h"

int cmd_version(const cli_command *self, int argc, char **argv)
{
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else
            return cli_usage_error(self, "unknown argument '%s'", argv[i]);
    }
    if (json)
        printf("{\"version\": \"%s\", \"protocol\": %d, \"build\": \"%s\"}\n", SC_VERSION_STRING,
               SC_PROTOCOL_VERSION, SC_BUILD_KIND);
    else
        printf("stagecraft %s\nprotocol %d\nbuild %s\n", SC_VERSION_STRING, SC_PROTOCOL_VERSION,
               SC_BUILD_KIND);
    return CLI_OK;
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
