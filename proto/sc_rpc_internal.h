/*
 * Internals shared by the RPC layer's own files (sc_rpc.c, sc_rpc_server.c, sc_rpc_call.c,
 * sc_rpc_client.c); not part of its interface, which is sc_rpc.h.
 *
 * What both sides need alike: the trailer that carries an exact sc_status, packing a message
 * with its Header filled in, moving bytes between slices and byte buffers, the message size
 * limit and the PEM files of a TLS configuration.
 */
#ifndef SC_RPC_INTERNAL_H
#define SC_RPC_INTERNAL_H

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "common/sc_status.h"
#include "proto/sc_rpc.h"

#define RPC_LOG "rpc"
/* Trailer that carries the handler's exact sc_status next to the coarser gRPC code. */
#define RPC_STATUS_KEY "stagecraft-status"

/* The message's "header" field when it is a singular stagecraft.Header, else NULL. */
const ProtobufCFieldDescriptor *rpc_header_field(const ProtobufCMessageDescriptor *d);

/* Packs `msg` into a new slice with its Header's protocol version filled in when unset or zero.
 * The header is filled on a shallow copy, so `msg` may be shared and const. SC_ERR_TOO_LARGE
 * over max_bytes. */
sc_status rpc_pack_with_header(const ProtobufCMessage *msg, size_t max_bytes, grpc_slice *out,
                               sc_err *err);

/* The whole message as one slice (a reference; unref it). */
grpc_slice rpc_buffer_flatten(grpc_byte_buffer *buf);

/* A byte buffer holding `s`; the slice's reference moves to the buffer. */
grpc_byte_buffer *rpc_buffer_from_slice(grpc_slice s);

/* Fills a channel argument of integer type; `key` must outlive the argument. */
void rpc_set_int_arg(grpc_arg *a, const char *key, int value);

/* Replaces 0 by SC_RPC_DEFAULT_MAX_MESSAGE_BYTES; SC_ERR_INVALID above what gRPC takes. */
sc_status rpc_check_max_bytes(size_t *max_bytes, sc_err *err);

/* The PEM texts named by an sc_rpc_tls; NULL where its path is NULL. */
typedef struct {
    char *cert, *key, *ca;
} rpc_pem_files;

/* Reads every file the tls names; on error nothing is left allocated. */
sc_status rpc_pem_files_read(const sc_rpc_tls *tls, rpc_pem_files *p, sc_err *err);
void rpc_pem_files_free(rpc_pem_files *p);

#endif /* SC_RPC_INTERNAL_H */
