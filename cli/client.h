/*
 * What the client subcommands (submit, status, workers, cancel) share: finding the
 * coordinator and the client token, and making one call to it.
 */
#ifndef SC_CLI_CLIENT_H
#define SC_CLI_CLIENT_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>

#include "cli/cli.h"
#include "proto/sc_rpc.h"

#define CLI_CALL_TIMEOUT_MS 10000

/* The coordinator's address into *addr: --coordinator (`flag`), else STAGECRAFT_COORDINATOR,
 * else 127.0.0.1:7070. One that is not HOST:PORT with a port in [1, 65535] is SC_ERR_INVALID
 * naming where it came from (the flag or the environment variable). */
sc_status cli_coordinator_addr(const char *flag, const char **addr, sc_err *err);

/* Reads a token from --FLAG FILE when given, else the environment variable `env`; *token is
 * "" when neither is set. The file may end with a newline. */
sc_status cli_read_token(const char *file, const char *env, char *token, size_t size, sc_err *err);

/* One call to the coordinator at `addr`; on error err says which call failed and why. */
sc_status cli_call(const char *addr, const char *method, ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                   sc_err *err);

/* cli_call with a deadline of timeout_ms (a call that profiles workers takes longer). */
sc_status cli_call_timeout(const char *addr, const char *method, ProtobufCMessage *req,
                           const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                           int timeout_ms, sc_err *err);

/* Writes `v` with the printf format `fmt` (one double conversion) into buf, or "-" when the
 * figure is not known yet: a progress line never shows a zero that was not measured. */
void cli_fmt_figure(char *buf, size_t size, bool known, const char *fmt, double v);

/* The figure as JSON: a number when known, else null (a new reference). */
json_t *cli_json_figure(bool known, double v);

/* Installs SIGINT/SIGTERM handlers that set *flag (daemons poll it). */
void cli_on_stop_signals(volatile sig_atomic_t *flag);

#endif /* SC_CLI_CLIENT_H */
