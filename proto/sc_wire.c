/*
 * Protocol version check and protobuf-c helpers. The header lookup goes through the message
 * descriptor, so the RPC layer can check versions of every message without knowing its type.
 */
#include "proto/sc_wire.h"

#include <stdlib.h>
#include <string.h>

#include "proto/stagecraft.pb-c.h"

sc_status sc_wire_check_version(uint32_t got, const char *what, sc_err *err)
{
    if (got == SC_PROTOCOL_VERSION)
        return SC_OK;
    if (got == 0)
        return SC_ERRF(err, SC_ERR_VERSION,
                       "%s carries no protocol version; this stagecraft speaks protocol %d", what,
                       SC_PROTOCOL_VERSION);
    return SC_ERRF(err, SC_ERR_VERSION,
                   "%s speaks protocol version %u but this stagecraft speaks version %d; run the "
                   "same stagecraft release on the coordinator and every worker",
                   what, got, SC_PROTOCOL_VERSION);
}

sc_status sc_wire_pack(const ProtobufCMessage *msg, uint8_t **out, size_t *len, sc_err *err)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory packing %s (%zu bytes)",
                       msg->descriptor->name, n);
    size_t w = protobuf_c_message_pack(msg, buf);
    if (w != n) {
        free(buf);
        return SC_ERRF(err, SC_ERR_INTERNAL, "packing %s wrote %zu of %zu bytes",
                       msg->descriptor->name, w, n);
    }
    *out = buf;
    *len = n;
    return SC_OK;
}

sc_status sc_wire_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                         ProtobufCMessage **out, sc_err *err)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, data);
    if (m == NULL)
        return SC_ERRF(err, SC_ERR_PARSE, "malformed %s: %zu bytes that do not decode as one",
                       desc->name, len);
    *out = m;
    return SC_OK;
}

static const ProtobufCFieldDescriptor *header_field(const ProtobufCMessage *msg)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(msg->descriptor, "header");
    if (f == NULL || f->type != PROTOBUF_C_TYPE_MESSAGE || f->label == PROTOBUF_C_LABEL_REPEATED ||
        f->descriptor != &stagecraft__header__descriptor)
        return NULL;
    return f;
}

const ProtobufCMessage *sc_wire_header(const ProtobufCMessage *msg)
{
    const ProtobufCFieldDescriptor *f = header_field(msg);
    if (f == NULL)
        return NULL;
    const ProtobufCMessage *h;
    memcpy(&h, (const char *)msg + f->offset, sizeof h);
    return h;
}

void sc_wire_set_header(ProtobufCMessage *msg, ProtobufCMessage *hdr)
{
    const ProtobufCFieldDescriptor *f = header_field(msg);
    if (f == NULL)
        return;
    ProtobufCMessage *cur;
    memcpy(&cur, (char *)msg + f->offset, sizeof cur);
    if (cur == NULL)
        memcpy((char *)msg + f->offset, &hdr, sizeof hdr);
}

bool sc_wire_worker_name_valid(const char *name)
{
    if (name == NULL || name[0] == '\0' || name[0] == '.' || strlen(name) > SC_WIRE_MAX_WORKER_NAME)
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return false;
    return true;
}
