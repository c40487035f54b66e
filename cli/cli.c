/*
 * Shared helpers of the subcommands: usage, flags and error reporting (see cli.h). Nothing here
 * looks at the subcommand table; a helper only knows the subcommand it is given.
 */
#include "cli/cli.h"

#include <getopt.h>
#include <stdarg.h>
#include <string.h>

void cli_print_usage(const cli_command *cmd, FILE *out)
{
    fprintf(out, "%s", cmd->usage);
}

int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
{
    /* one line whatever the arguments hold: control characters become '?', as in sc_err */
    char msg[SC_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = '?';
    fprintf(stderr, "stagecraft %s: %s\n\n", cmd->name, msg);
    cli_print_usage(cmd, stderr);
    return CLI_USAGE;
}

int cli_report(const cli_command *cmd, const sc_err *err)
{
    fprintf(stderr, "stagecraft %s: %s\n", cmd->name,
            err->msg[0] ? err->msg : sc_status_str(err->code));
    switch (err->code) {
    case SC_ERR_INVALID:
    case SC_ERR_PARSE:
    case SC_ERR_NOT_FOUND:
    case SC_ERR_VERSION:
    case SC_ERR_TOO_LARGE:
    case SC_ERR_IO:
        return CLI_USAGE;
    default:
        return CLI_FAILURE;
    }
}

int cli_wants_help(const cli_command *cmd, int argc, char **argv)
{
    (void)cmd;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    }
    return 0;
}

int cli_getopt(const cli_command *cmd, int argc, char **argv, const struct option *longopts)
{
    static char **current;
    if (current != argv) {
        current = argv;
        optind = 1;
    }
    opterr = 0;
    int c = getopt_long(argc, argv, ":", longopts, NULL);
    if (c == '?') {
        cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        return -2;
    }
    if (c == ':') {
        cli_usage_error(cmd, "flag '%s' needs a value", argv[optind - 1]);
        return -2;
    }
    return c;
}
