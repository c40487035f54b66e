/*
 * stagecraft: entry point. Dispatches `stagecraft SUBCOMMAND [ARGS]` to the subcommand table
 * and handles the top-level flags (--help, --version, --log-level). Knows nothing of what the
 * subcommands do.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "common/sc_log.h"
#include "sc_version.h"

static void print_overview(FILE *out)
{
    fprintf(out,
            "stagecraft %s: pipeline-parallel training on clusters of unequal GPU servers\n\n"
            "usage: stagecraft [--log-level LEVEL] SUBCOMMAND [ARGS]\n"
            "       stagecraft SUBCOMMAND --help\n"
            "       stagecraft --version\n\n"
            "subcommands:\n",
            SC_VERSION_STRING);
    for (const cli_command *c = cli_commands; c->name != NULL; c++)
        fprintf(out, "  %-12s %s\n", c->name, c->summary);
    fprintf(out, "\nenvironment: STAGECRAFT_LOG=error|warn|info|debug|trace\n");
}

int main(int argc, char **argv)
{
    int i = 1;
    while (i < argc && argv[i][0] == '-') {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_overview(stdout);
            return CLI_OK;
        }
        if (strcmp(a, "--version") == 0) {
            printf("stagecraft %s (%s)\n", SC_VERSION_STRING, SC_BUILD_KIND);
            return CLI_OK;
        }
        if (strcmp(a, "--log-level") == 0 || strncmp(a, "--log-level=", 12) == 0) {
            const char *v = a[11] == '=' ? a + 12 : (i + 1 < argc ? argv[++i] : NULL);
            sc_log_level lvl;
            if (v == NULL || !sc_log_level_parse(v, &lvl)) {
                fprintf(stderr, "stagecraft: --log-level needs one of error, warn, info, debug, "
                                "trace\n");
                return CLI_USAGE;
            }
            sc_log_set_level(lvl);
            i++;
            continue;
        }
        fprintf(stderr, "stagecraft: unknown flag '%s'\n\n", a);
        print_overview(stderr);
        return CLI_USAGE;
    }
    if (i >= argc) {
        fprintf(stderr, "stagecraft: missing subcommand\n\n");
        print_overview(stderr);
        return CLI_USAGE;
    }
    const cli_command *cmd = cli_find(argv[i]);
    if (cmd == NULL) {
        fprintf(stderr, "stagecraft: unknown subcommand '%s'\n\n", argv[i]);
        print_overview(stderr);
        return CLI_USAGE;
    }
    if (cli_wants_help(cmd, argc - i, argv + i)) {
        cli_print_usage(cmd, stdout);
        return CLI_OK;
    }
    return cmd->run(cmd, argc - i, argv + i);
}
