/*
 * What every `stagecraft` subcommand shares: the subcommand descriptor, exit codes, and the
 * helpers for flags, usage errors and help. It does not know which subcommands exist: the table
 * and the lookup by name are in commands.h, above every subcommand.
 *
 * Conventions (docs/reference/cli.md): exit 0 on success, 1 on a runtime failure, 2 on bad usage or bad
 * input, with a one-line message on stderr that names the flag, file or JSON path and what would
 * be valid. Every subcommand takes --help; those that print results take --json.
 */
#ifndef SC_CLI_H
#define SC_CLI_H

#include <stdio.h>

#include "common/sc_status.h"

enum { CLI_OK = 0, CLI_FAILURE = 1, CLI_USAGE = 2 };

typedef struct cli_command {
    const char *name;
    const char *summary; /* one line, shown by `stagecraft --help` */
    const char *usage;   /* full help text, shown by `stagecraft NAME --help` */
    int (*run)(const struct cli_command *self, int argc, char **argv);
} cli_command;

/* Prints "stagecraft NAME: message" and the subcommand's usage to stderr; returns CLI_USAGE.
 * The message is one line: control characters (from a bad argument, say) become '?'. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "stagecraft NAME: <err message>" to stderr; returns CLI_USAGE for errors caused by
 * the user's input (invalid, parse, not found, version, too large) and CLI_FAILURE otherwise. */
int cli_report(const cli_command *cmd, const sc_err *err);

/* Prints the usage of `cmd` to `out`. */
void cli_print_usage(const cli_command *cmd, FILE *out);

struct option;
/* getopt_long for subcommands: returns the next option like getopt_long, or -1 at the end, or
 * -2 after printing a usage error for an unknown flag or a flag missing its value (the caller
 * then returns CLI_USAGE). Resets getopt's state on the first call for a new argv. */
int cli_getopt(const cli_command *cmd, int argc, char **argv, const struct option *longopts);

/* Scans argv for --help/-h before any other parsing; prints usage and returns true if found. */
int cli_wants_help(const cli_command *cmd, int argc, char **argv);

#endif /* SC_CLI_H */
