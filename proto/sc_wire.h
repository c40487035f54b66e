/*
 * Wire-level facts shared by both planes: the protocol version and its check, and protobuf-c
 * packing helpers.
 *
 * SC_PROTOCOL_VERSION is bumped on any incompatible change to stagecraft.proto or control.proto.
 * Peers refuse a message with another version, naming both, rather than guess at its meaning.
 */
#ifndef SC_WIRE_H
#define SC_WIRE_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

#define SC_PROTOCOL_VERSION 1

/* The largest micro-batch, in samples, that a worker profiles (Worker.Profile refuses larger
 * sizes as invalid). The coordinator refuses a job spec whose fixed micro-batch would be larger
 * and profiles an open count at sizes up to this one. */
#define SC_WIRE_MAX_MICROBATCH_SIZE 4096

/* The longest worker name, in characters: `stagecraft worker --name` refuses a longer one, and
 * so does a job spec that lists one (it could never register). Valid names are letters, digits,
 * '-', '_' and '.', not starting with '.'. */
#define SC_WIRE_MAX_WORKER_NAME 127

/* Whether `name` is a valid worker name (the rule above): `stagecraft worker --name`, a job
 * spec's list of workers and the coordinator's RegisterWorker all apply it, so that a name that
 * could break a log line, a terminal or a path never gets in. */
bool sc_wire_worker_name_valid(const char *name);

/* SC_OK when `got` == SC_PROTOCOL_VERSION, else SC_ERR_VERSION with a message naming both
 * versions and `what` (e.g. "RegisterWorker request from 10.0.0.3"). A version of 0 means the
 * peer sent none. */
sc_status sc_wire_check_version(uint32_t got, const char *what, sc_err *err);

/* Packs a message into a new heap buffer (caller frees). */
sc_status sc_wire_pack(const ProtobufCMessage *msg, uint8_t **out, size_t *len, sc_err *err);

/* Unpacks `len` bytes as `desc`; malformed bytes are SC_ERR_PARSE naming the message type.
 * Free the result with protobuf_c_message_free_unpacked(msg, NULL). */
sc_status sc_wire_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                         ProtobufCMessage **out, sc_err *err);

/* The `header` field (stagecraft.Header) of a management-plane message, or NULL when the message
 * has none or it is unset. */
const ProtobufCMessage *sc_wire_header(const ProtobufCMessage *msg);

/* Sets the message's `header` to `hdr` if the message has a header field and it is unset.
 * `hdr` is borrowed and must outlive packing. */
void sc_wire_set_header(ProtobufCMessage *msg, ProtobufCMessage *hdr);

#endif /* SC_WIRE_H */
