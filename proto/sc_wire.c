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

/* Whether `m` or a message inside it kept an unknown field numbered 0. protobuf-c 1.4 refuses
 * field number 0 in a one-byte tag but keeps it, as an unknown field, from a tag padded to more
 * bytes; packing writes it back in one byte, so the message would pack into bytes that no longer
 * decode (a stored hardware report could then never be read again). Field numbers start at 1.
 * The schema has no recursive message, so the depth is bounded. */
static bool has_field_zero(const ProtobufCMessage *m)
{
    for (unsigned i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return true;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const char *base = (const char *)m;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n;
            ProtobufCMessage **v;
            memcpy(&n, base + f->quantifier_offset, sizeof n);
            memcpy(&v, base + f->offset, sizeof v);
            for (size_t j = 0; j < n; j++)
                if (v[j] != NULL && has_field_zero(v[j]))
                    return true;
            continue;
        }
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which;
            memcpy(&which, base + f->quantifier_offset, sizeof which);
            if (which != f->id)
                continue; /* another member of the oneof holds the storage */
        }
        ProtobufCMessage *sub;
        memcpy(&sub, base + f->offset, sizeof sub);
        if (sub != NULL && has_field_zero(sub))
            return true;
    }
    return false;
}

sc_status sc_wire_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                         ProtobufCMessage **out, sc_err *err)
{
    ProtobufCMessage *m = protobuf_c_message_unpack(desc, NULL, len, data);
    if (m == NULL)
        return SC_ERRF(err, SC_ERR_PARSE, "malformed %s: %zu bytes that do not decode as one",
                       desc->name, len);
    if (has_field_zero(m)) {
        protobuf_c_message_free_unpacked(m, NULL);
        return SC_ERRF(err, SC_ERR_PARSE,
                       "malformed %s: %zu bytes with a field numbered 0 (field numbers start "
                       "at 1)",
                       desc->name, len);
    }
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
