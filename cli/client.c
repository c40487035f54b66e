/* Shared helpers of the client subcommands (see client.h). */
#include "cli/client.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "proto/sc_view.h"

sc_status cli_coordinator_addr(const char *flag, const char **addr, sc_err *err)
{
    const char *env = getenv("STAGECRAFT_COORDINATOR");
    if (flag != NULL) {
        *addr = flag;
        return sc_parse_hostport(flag, false, "--coordinator", NULL, 0, NULL, err);
    }
    if (env != NULL && env[0] != '\0') {
        *addr = env;
        return sc_parse_hostport(env, false, "STAGECRAFT_COORDINATOR", NULL, 0, NULL, err);
    }
    *addr = "127.0.0.1:7070";
    return SC_OK;
}

sc_status cli_read_token(const char *file, const char *env, char *token, size_t size, sc_err *err)
{
    token[0] = '\0';
    if (file) {
        char *text;
        size_t len;
        SC_CHECK(sc_file_read(file, 4096, &text, &len, err));
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
            text[--len] = '\0';
        sc_strlcpy(token, text, size);
        free(text);
        if (token[0] == '\0')
            return SC_ERRF(err, SC_ERR_INVALID, "token file %s is empty", file);
        return SC_OK;
    }
    const char *v = getenv(env);
    if (v)
        sc_strlcpy(token, v, size);
    return SC_OK;
}

sc_status cli_call(const char *addr, const char *method, ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                   sc_err *err)
{
    return cli_call_timeout(addr, method, req, resp_desc, resp, CLI_CALL_TIMEOUT_MS, err);
}

sc_status cli_call_timeout(const char *addr, const char *method, ProtobufCMessage *req,
                           const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                           int timeout_ms, sc_err *err)
{
    sc_rpc_client *cli = NULL;
    /* A coordinator serving TLS: STAGECRAFT_TLS_CA verifies it, STAGECRAFT_TLS_CERT/KEY are
     * presented when it requires client certificates. */
    sc_rpc_client_cfg cfg = {.tls = {getenv("STAGECRAFT_TLS_CERT"), getenv("STAGECRAFT_TLS_KEY"),
                                     getenv("STAGECRAFT_TLS_CA")}};
    if (cfg.tls.ca_path == NULL && cfg.tls.cert_path == NULL)
        memset(&cfg.tls, 0, sizeof cfg.tls);
    SC_CHECK(sc_rpc_client_new(&cli, addr, &cfg, err));
    sc_status rc = sc_rpc_call(cli, method, req, resp_desc, resp, timeout_ms, err);
    sc_rpc_client_destroy(&cli);
    return rc;
}

void cli_fmt_figure(char *buf, size_t size, bool known, const char *fmt, double v)
{
    if (known)
        snprintf(buf, size, fmt, v);
    else
        snprintf(buf, size, "-");
}

json_t *cli_json_figure(bool known, double v)
{
    return sc_view_figure(known, v);
}

static volatile sig_atomic_t *stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    if (stop_flag)
        *stop_flag = 1;
}

void cli_on_stop_signals(volatile sig_atomic_t *flag)
{
    stop_flag = flag;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}
