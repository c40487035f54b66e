/*
 * sc_rpc: what the RPC server and client share: the mapping between sc_status and gRPC status
 * codes, packing a message with its Header's protocol version filled in, slices and byte
 * buffers, the message size limit and reading a TLS configuration's PEM files.
 *
 * Not here: anything that owns a call, a channel or a thread (sc_rpc_server.c, sc_rpc_call.c,
 * sc_rpc_client.c).
 *
 * Key invariant: a status travels as a gRPC code plus the "stagecraft-status" trailer, and
 * sc_rpc_code_to_status(sc_rpc_status_to_code(s)) lands on s wherever the mapping is one to
 * one; the trailer restores it where it is not.
 */
#include "proto/sc_rpc.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "proto/sc_rpc_internal.h"
#include "proto/sc_wire.h"

#define RPC_PEM_MAX_BYTES ((size_t)1 << 20)

/* ---- status codes ---------------------------------------------------------------------------*/

static const char *const code_names[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

const char *sc_rpc_code_name(int code)
{
    if (code < 0 || (size_t)code >= SC_ARRAY_LEN(code_names))
        return "UNKNOWN_CODE";
    return code_names[code];
}

int sc_rpc_status_to_code(sc_status s)
{
    switch (s) {
    case SC_OK:
        return GRPC_STATUS_OK;
    case SC_ERR_INVALID:
    case SC_ERR_PARSE:
        return GRPC_STATUS_INVALID_ARGUMENT;
    case SC_ERR_NOT_FOUND:
        return GRPC_STATUS_NOT_FOUND;
    case SC_ERR_EXISTS:
        return GRPC_STATUS_ALREADY_EXISTS;
    case SC_ERR_PERMISSION:
        return GRPC_STATUS_PERMISSION_DENIED;
    case SC_ERR_VERSION:
    case SC_ERR_PRECONDITION:
        return GRPC_STATUS_FAILED_PRECONDITION;
    case SC_ERR_TOO_LARGE:
    case SC_ERR_NOMEM: /* a resource ran out; the trailer tells which status it was */
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case SC_ERR_UNAVAILABLE:
        return GRPC_STATUS_UNAVAILABLE;
    case SC_ERR_TIMEOUT:
        return GRPC_STATUS_DEADLINE_EXCEEDED;
    case SC_ERR_CANCELLED:
        return GRPC_STATUS_CANCELLED;
    case SC_ERR_UNSUPPORTED:
        return GRPC_STATUS_UNIMPLEMENTED;
    default:
        return GRPC_STATUS_INTERNAL;
    }
}

sc_status sc_rpc_code_to_status(int code)
{
    switch (code) {
    case GRPC_STATUS_OK:
        return SC_OK;
    case GRPC_STATUS_CANCELLED:
        return SC_ERR_CANCELLED;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_OUT_OF_RANGE:
        return SC_ERR_INVALID;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return SC_ERR_TIMEOUT;
    case GRPC_STATUS_NOT_FOUND:
        return SC_ERR_NOT_FOUND;
    case GRPC_STATUS_ALREADY_EXISTS:
        return SC_ERR_EXISTS;
    case GRPC_STATUS_PERMISSION_DENIED:
    case GRPC_STATUS_UNAUTHENTICATED:
        return SC_ERR_PERMISSION;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return SC_ERR_TOO_LARGE;
    case GRPC_STATUS_FAILED_PRECONDITION:
        return SC_ERR_PRECONDITION;
    case GRPC_STATUS_ABORTED:
    case GRPC_STATUS_UNAVAILABLE:
        return SC_ERR_UNAVAILABLE;
    case GRPC_STATUS_UNIMPLEMENTED:
        return SC_ERR_UNSUPPORTED;
    case GRPC_STATUS_INTERNAL:
        return SC_ERR_INTERNAL;
    case GRPC_STATUS_DATA_LOSS:
        return SC_ERR_IO;
    default:
        return SC_ERR_GRPC;
    }
}

/* ---- shared helpers -------------------------------------------------------------------------*/

const ProtobufCFieldDescriptor *rpc_header_field(const ProtobufCMessageDescriptor *d)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(d, "header");
    if (f == NULL || f->type != PROTOBUF_C_TYPE_MESSAGE || f->label == PROTOBUF_C_LABEL_REPEATED ||
        f->descriptor != &stagecraft__header__descriptor)
        return NULL;
    return f;
}

/* Packs `msg` into a new slice with its Header's protocol version filled in when unset or zero.
 * The header is filled on a shallow copy, so `msg` may be shared and const. */
sc_status rpc_pack_with_header(const ProtobufCMessage *msg, size_t max_bytes, grpc_slice *out,
                               sc_err *err)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    ProtobufCMessage *copy = malloc(d->sizeof_message);
    SC_ALLOC_CHECK(copy, err);
    memcpy(copy, msg, d->sizeof_message);

    Stagecraft__Header hdr;
    const ProtobufCFieldDescriptor *f = rpc_header_field(d);
    if (f != NULL) {
        const Stagecraft__Header *cur = (const Stagecraft__Header *)sc_wire_header(copy);
        if (cur == NULL) {
            stagecraft__header__init(&hdr);
            hdr.protocol_version = SC_PROTOCOL_VERSION;
            sc_wire_set_header(copy, &hdr.base);
        } else if (cur->protocol_version == 0) {
            hdr = *cur;
            hdr.protocol_version = SC_PROTOCOL_VERSION;
            Stagecraft__Header *p = &hdr;
            memcpy((char *)copy + f->offset, &p, sizeof p);
        }
    }
    size_t n = protobuf_c_message_get_packed_size(copy);
    if (n > max_bytes) {
        free(copy);
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "%s of %zu bytes exceeds the message limit of %zu bytes", d->name, n,
                       max_bytes);
    }
    grpc_slice s = grpc_slice_malloc(n);
    size_t w = protobuf_c_message_pack(copy, GRPC_SLICE_START_PTR(s));
    free(copy);
    if (w != n) {
        grpc_slice_unref(s);
        return SC_ERRF(err, SC_ERR_INTERNAL, "packing %s wrote %zu of %zu bytes", d->name, w, n);
    }
    *out = s;
    return SC_OK;
}

/* The whole message as one slice (a reference; unref it). */
grpc_slice rpc_buffer_flatten(grpc_byte_buffer *buf)
{
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, buf))
        return grpc_empty_slice();
    grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    return s;
}

grpc_byte_buffer *rpc_buffer_from_slice(grpc_slice s)
{
    grpc_byte_buffer *b = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return b;
}

void rpc_set_int_arg(grpc_arg *a, const char *key, int value)
{
    a->type = GRPC_ARG_INTEGER;
    a->key = (char *)key;
    a->value.integer = value;
}

sc_status rpc_check_max_bytes(size_t *max_bytes, sc_err *err)
{
    if (*max_bytes == 0)
        *max_bytes = SC_RPC_DEFAULT_MAX_MESSAGE_BYTES;
    if (*max_bytes > INT_MAX)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "max_message_bytes %zu is too large: gRPC takes at most %d bytes",
                       *max_bytes, INT_MAX);
    return SC_OK;
}

void rpc_pem_files_free(rpc_pem_files *p)
{
    free(p->cert);
    free(p->key);
    free(p->ca);
    memset(p, 0, sizeof *p);
}

static sc_status pem_read(const char *path, const char *what, char **out, sc_err *err)
{
    *out = NULL;
    if (path == NULL)
        return SC_OK;
    size_t len;
    sc_status rc = sc_file_read(path, RPC_PEM_MAX_BYTES, out, &len, err);
    if (rc != SC_OK)
        sc_err_prefix(err, "reading the TLS %s", what);
    return rc;
}

sc_status rpc_pem_files_read(const sc_rpc_tls *tls, rpc_pem_files *p, sc_err *err)
{
    memset(p, 0, sizeof *p);
    sc_status rc;
    SC_CHECK_GOTO(pem_read(tls->cert_path, "certificate", &p->cert, err), fail);
    SC_CHECK_GOTO(pem_read(tls->key_path, "private key", &p->key, err), fail);
    SC_CHECK_GOTO(pem_read(tls->ca_path, "CA certificate", &p->ca, err), fail);
    return SC_OK;
fail:
    rpc_pem_files_free(p);
    return rc;
}
