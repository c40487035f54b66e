/*
 * sc_rpc_client: blocking unary calls over one channel.
 *
 * Every call has its own completion queue and a single batch, so concurrent calls on one
 * channel share nothing but the channel, which gRPC makes thread-safe.
 *
 * Not here: retries, streaming, load balancing across servers.
 *
 * Key invariant: every call ends with one status; a server's sc_status comes back exact when
 * its "stagecraft-status" trailer agrees with the gRPC code, else mapped from the code.
 */
#include "proto/sc_rpc.h"

#include <assert.h>
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_log.h"
#include "common/sc_util.h"
#include "proto/sc_rpc_internal.h"
#include "proto/sc_wire.h"

/* How long the client waits past a call's own deadline before cancelling it itself: gRPC ends
 * every call at its deadline, this only guards against that promise failing. */
#define RPC_CLIENT_SLACK_MS 5000

struct sc_rpc_client {
    grpc_channel *channel;
    char *target;
    size_t max_bytes;
};

static sc_status client_credentials(const sc_rpc_client_cfg *cfg, grpc_channel_credentials **out,
                                    sc_err *err)
{
    const sc_rpc_tls *tls = &cfg->tls;
    if (tls->ca_path == NULL && tls->cert_path == NULL) {
        *out = grpc_insecure_credentials_create();
        return SC_OK;
    }
    rpc_pem_files pem;
    SC_CHECK(rpc_pem_files_read(tls, &pem, err));
    grpc_ssl_pem_key_cert_pair pair = {.private_key = pem.key, .cert_chain = pem.cert};
    *out = grpc_ssl_credentials_create(pem.ca, pem.cert ? &pair : NULL, NULL, NULL);
    rpc_pem_files_free(&pem);
    if (*out == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "gRPC refused the client TLS files");
    return SC_OK;
}

sc_status sc_rpc_client_new(sc_rpc_client **out, const char *target, const sc_rpc_client_cfg *cfg,
                            sc_err *err)
{
    assert(out != NULL);
    *out = NULL;
    static const sc_rpc_client_cfg defaults = {0};
    if (cfg == NULL)
        cfg = &defaults;
    if (target == NULL || target[0] == '\0')
        return SC_ERRF(err, SC_ERR_INVALID, "the RPC target is empty: give HOST:PORT");
    if ((cfg->tls.cert_path == NULL) != (cfg->tls.key_path == NULL))
        return SC_ERRF(err, SC_ERR_INVALID,
                       "a TLS client certificate needs its private key and the other way round");
    size_t max_bytes = cfg->max_message_bytes;
    SC_CHECK(rpc_check_max_bytes(&max_bytes, err));

    sc_rpc_client *cli = calloc(1, sizeof *cli);
    SC_ALLOC_CHECK(cli, err);
    cli->target = strdup(target);
    if (cli->target == NULL) {
        free(cli);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory creating an RPC client");
    }
    cli->max_bytes = max_bytes;
    grpc_init();

    grpc_channel_credentials *creds;
    sc_status rc = client_credentials(cfg, &creds, err);
    if (rc != SC_OK) {
        free(cli->target);
        free(cli);
        grpc_shutdown();
        return rc;
    }
    grpc_arg args[3];
    size_t n = 0;
    rpc_set_int_arg(&args[n++], GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int)max_bytes);
    rpc_set_int_arg(&args[n++], GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int)max_bytes);
    if (cfg->tls_server_name != NULL) {
        args[n].type = GRPC_ARG_STRING;
        args[n].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[n++].value.string = (char *)cfg->tls_server_name;
    }
    grpc_channel_args chargs = {.num_args = n, .args = args};
    cli->channel = grpc_channel_create(target, creds, &chargs);
    grpc_channel_credentials_release(creds);
    *out = cli;
    return SC_OK;
}

void sc_rpc_client_destroy(sc_rpc_client **p)
{
    if (p == NULL || *p == NULL)
        return;
    sc_rpc_client *cli = *p;
    grpc_channel_destroy(cli->channel);
    free(cli->target);
    free(cli);
    grpc_shutdown();
    *p = NULL;
}

/* The sc_status the server's handler returned, when its trailer agrees with the gRPC code. */
static sc_status trailer_status(const grpc_metadata_array *md, grpc_status_code code)
{
    for (size_t i = 0; i < md->count; i++) {
        const grpc_metadata *e = &md->metadata[i];
        if (grpc_slice_str_cmp(e->key, RPC_STATUS_KEY) != 0)
            continue;
        for (int s = 1; s < SC_STATUS_COUNT; s++)
            if (grpc_slice_str_cmp(e->value, sc_status_name((sc_status)s)) == 0 &&
                sc_rpc_status_to_code((sc_status)s) == (int)code)
                return (sc_status)s;
    }
    return sc_rpc_code_to_status(code);
}

/* Why a call got no answer, for the cases gRPC's own words leave a newcomer guessing: "" when
 * the failure explains itself. A channel that never became READY made no gRPC connection: a TCP
 * connection may have been accepted, but nothing answered the HTTP/2 handshake (the SETTINGS
 * frame) in time, which is what a port of another program, or TLS on one side and plaintext on
 * the other, looks like from here. A READY channel whose call timed out reached a gRPC server
 * that did not answer in time. */
static const char *no_answer_hint(sc_rpc_client *cli, grpc_status_code status, const char *details,
                                  int dlen)
{
    bool no_settings = false; /* "...timed out before receiving SETTINGS frame" */
    for (int i = 0; i + 8 <= dlen && !no_settings; i++)
        no_settings = memcmp(details + i, "SETTINGS", 8) == 0;
    if (status != GRPC_STATUS_DEADLINE_EXCEEDED && !no_settings)
        return "";
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(cli->channel, 0);
    if (!no_settings && st == GRPC_CHANNEL_READY)
        return " (the connection is up but the server did not answer the call in time: it may be "
               "overloaded or stuck; its log may say why)";
    return " (no gRPC connection was made: something may have accepted the TCP connection, but "
           "nothing answered the gRPC handshake. Likely causes: a wrong port (not a stagecraft "
           "coordinator or worker), TLS on one side and plaintext on the other, or a firewall "
           "holding the packets. Check the address against the port the coordinator logs "
           "(`coordinator listening on port N`) and that both sides use TLS (--tls-*, "
           "STAGECRAFT_TLS_CA) or neither)";
}

/* One call: sends `req` (a reference is taken over), fills *resp with the response bytes
 * (unref) on SC_OK. Errors are "METHOD at TARGET: CODE: details", and for a call that got no
 * answer, how long it waited and the likely causes (no_answer_hint). */
static sc_status client_invoke(sc_rpc_client *cli, const char *method, grpc_slice req,
                               grpc_slice *resp, int64_t timeout_ms, sc_err *err)
{
    if (GRPC_SLICE_LENGTH(req) > cli->max_bytes) {
        size_t n = GRPC_SLICE_LENGTH(req);
        grpc_slice_unref(req);
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "%s at %s: request of %zu bytes exceeds the message limit of %zu bytes",
                       method, cli->target, n, cli->max_bytes);
    }
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
    grpc_slice mslice = grpc_slice_from_copied_string(method);
    grpc_call *call = grpc_channel_create_call(cli->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                               mslice, NULL, deadline, NULL);
    grpc_slice_unref(mslice);
    grpc_byte_buffer *req_buf = rpc_buffer_from_slice(req);
    grpc_byte_buffer *resp_buf = NULL;
    grpc_metadata_array init_md, trail_md;
    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trail_md);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    sc_status rc = SC_OK;

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = req_buf;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &resp_buf;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trail_md;
    ops[5].data.recv_status_on_client.status = &status;
    ops[5].data.recv_status_on_client.status_details = &details;
    ops[5].data.recv_status_on_client.error_string = &error_string;
    int tag;
    grpc_call_error e = grpc_call_start_batch(call, ops, SC_ARRAY_LEN(ops), &tag, NULL);
    if (e != GRPC_CALL_OK) {
        rc = SC_ERRF(err, SC_ERR_GRPC, "%s at %s: starting the call failed: %s", method,
                     cli->target, grpc_call_error_to_string(e));
        goto out;
    }
    gpr_timespec give_up =
        gpr_time_add(deadline, gpr_time_from_millis(RPC_CLIENT_SLACK_MS, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_next(cq, give_up, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        SC_LOG_WARN(RPC_LOG, "%s at %s: no end %d ms past the deadline; cancelling", method,
                    cli->target, RPC_CLIENT_SLACK_MS);
        grpc_call_cancel(call, NULL);
        ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    }
    /* The batch's success flag says little: a call that failed still completes its
     * RECV_STATUS op, and the status code is the verdict. */
    if (status != GRPC_STATUS_OK) {
        const char *d = (const char *)GRPC_SLICE_START_PTR(details);
        int dlen = (int)GRPC_SLICE_LENGTH(details);
        if (dlen == 0 && error_string != NULL) {
            d = error_string;
            dlen = (int)strlen(error_string);
        }
        /* a status the server's handler sent (its trailer) explains itself */
        bool answered = false;
        for (size_t i = 0; i < trail_md.count && !answered; i++)
            answered = grpc_slice_str_cmp(trail_md.metadata[i].key, RPC_STATUS_KEY) == 0;
        const char *hint = answered ? "" : no_answer_hint(cli, status, d, dlen);
        if (hint[0] != '\0')
            rc = SC_ERRF(err, trailer_status(&trail_md, status),
                         "%s at %s: %s: %.*s after waiting %.1f s%s", method, cli->target,
                         sc_rpc_code_name(status), dlen, d, (double)timeout_ms / 1000.0, hint);
        else
            rc = SC_ERRF(err, trailer_status(&trail_md, status), "%s at %s: %s: %.*s", method,
                         cli->target, sc_rpc_code_name(status), dlen, d);
    } else if (resp_buf == NULL) {
        rc = SC_ERRF(err, SC_ERR_GRPC, "%s at %s: OK: but the server sent no response message",
                     method, cli->target);
    } else {
        *resp = rpc_buffer_flatten(resp_buf);
    }

out:
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_byte_buffer_destroy(req_buf);
    if (resp_buf != NULL)
        grpc_byte_buffer_destroy(resp_buf);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trail_md);
    grpc_slice_unref(details);
    gpr_free((void *)error_string);
    return rc;
}

static sc_status client_check_args(const sc_rpc_client *cli, const char *method, int64_t timeout_ms,
                                   sc_err *err)
{
    if (method == NULL || method[0] != '/')
        return SC_ERRF(err, SC_ERR_INVALID,
                       "method \"%s\" is not a full method name such as "
                       "/stagecraft.Coordinator/SubmitJob",
                       method ? method : "(null)");
    if (timeout_ms <= 0)
        return SC_ERRF(err, SC_ERR_INVALID, "%s at %s: timeout_ms must be positive, not %lld",
                       method, cli->target, (long long)timeout_ms);
    return SC_OK;
}

sc_status sc_rpc_call(sc_rpc_client *cli, const char *method, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
                      int64_t timeout_ms, sc_err *err)
{
    assert(cli != NULL && req != NULL && resp_desc != NULL && resp != NULL);
    *resp = NULL;
    SC_CHECK(client_check_args(cli, method, timeout_ms, err));
    sc_err e;
    sc_err_clear(&e);
    grpc_slice out;
    if (rpc_pack_with_header(req, cli->max_bytes, &out, &e) != SC_OK)
        return SC_ERRF(err, e.code, "%s at %s: request: %s", method, cli->target, e.msg);

    grpc_slice in;
    SC_CHECK(client_invoke(cli, method, out, &in, timeout_ms, err));
    ProtobufCMessage *m = NULL;
    sc_status rc =
        sc_wire_unpack(resp_desc, GRPC_SLICE_START_PTR(in), GRPC_SLICE_LENGTH(in), &m, &e);
    grpc_slice_unref(in);
    if (rc == SC_OK && rpc_header_field(resp_desc) != NULL) {
        const Stagecraft__Header *h = (const Stagecraft__Header *)sc_wire_header(m);
        rc = sc_wire_check_version(h ? h->protocol_version : 0, "the response", &e);
    }
    if (rc != SC_OK) {
        if (m != NULL)
            protobuf_c_message_free_unpacked(m, NULL);
        return SC_ERRF(err, rc, "%s at %s: %s", method, cli->target, e.msg);
    }
    *resp = m;
    return SC_OK;
}

sc_status sc_rpc_call_raw(sc_rpc_client *cli, const char *method, const uint8_t *data, size_t len,
                          uint8_t **out, size_t *out_len, int64_t timeout_ms, sc_err *err)
{
    assert(cli != NULL && (data != NULL || len == 0) && out != NULL && out_len != NULL);
    *out = NULL;
    *out_len = 0;
    SC_CHECK(client_check_args(cli, method, timeout_ms, err));
    grpc_slice in;
    SC_CHECK(client_invoke(cli, method, grpc_slice_from_copied_buffer((const char *)data, len), &in,
                           timeout_ms, err));
    size_t n = GRPC_SLICE_LENGTH(in);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) {
        grpc_slice_unref(in);
        return SC_ERRF(err, SC_ERR_NOMEM, "%s at %s: out of memory for a %zu-byte response", method,
                       cli->target, n);
    }
    memcpy(buf, GRPC_SLICE_START_PTR(in), n);
    grpc_slice_unref(in);
    *out = buf;
    *out_len = n;
    return SC_OK;
}
