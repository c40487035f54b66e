/*
 * Fuzz target: the body of a gRPC request to the coordinator or a worker. The first input byte
 * picks the request type among every method of both services (their protobuf-c service
 * descriptors), the rest is the body, decoded as the RPC layer decodes it (sc_wire_unpack), then
 * checked as the server and its handlers check what they read before acting on it: the header's
 * protocol version, a registration's worker name and its hardware report (packed again to be
 * stored), a submitted job's spec.
 * Demands: no crash or undefined behaviour; a refusal has a message; a decoded request packs
 * again into bytes that decode to a message packing to the same bytes (nothing read is lost or
 * invented between the server and the store).
 */
#include "tests/fuzz/fuzz_common.h"

#include "coordinator/jobspec.h"
#include "proto/sc_wire.h"
#include "proto/stagecraft.pb-c.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

static const ProtobufCMessageDescriptor *pick(uint8_t b)
{
    const ProtobufCServiceDescriptor *svc[] = {&stagecraft__coordinator__descriptor,
                                               &stagecraft__worker__descriptor};
    unsigned n = svc[0]->n_methods + svc[1]->n_methods;
    unsigned i = b % n;
    return i < svc[0]->n_methods ? svc[0]->methods[i].input
                                 : svc[1]->methods[i - svc[0]->n_methods].input;
}

/* pack, unpack, pack: the two packings are the same bytes */
static void round_trip(const ProtobufCMessage *m)
{
    uint8_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    sc_err err;
    sc_err_clear(&err);
    FUZZ_REQUIRE(sc_wire_pack(m, &a, &na, &err) == SC_OK, "packing %s: %s", m->descriptor->name,
                 err.msg);
    ProtobufCMessage *again = NULL;
    FUZZ_REQUIRE(sc_wire_unpack(m->descriptor, a, na, &again, &err) == SC_OK,
                 "%s packed into bytes that do not decode: %s", m->descriptor->name, err.msg);
    FUZZ_REQUIRE(sc_wire_pack(again, &b, &nb, &err) == SC_OK, "%s", err.msg);
    FUZZ_REQUIRE(na == nb && memcmp(a, b, na) == 0, "%s: %zu bytes packed again as %zu",
                 m->descriptor->name, na, nb);
    protobuf_c_message_free_unpacked(again, NULL);
    free(a);
    free(b);
}

static void check_register(const Stagecraft__RegisterWorkerRequest *req)
{
    if (sc_wire_worker_name_valid(req->name)) {
        for (const char *p = req->name; *p; p++)
            FUZZ_REQUIRE(*p > ' ' && *p < 127 && *p != '/', "a worker name with byte %d passed",
                         (unsigned char)*p);
        FUZZ_REQUIRE(strcmp(req->name, ".") != 0 && strcmp(req->name, "..") != 0,
                     "worker name '%s' passed", req->name);
    }
    if (req->hardware != NULL)
        round_trip(&req->hardware->base);
}

static void check_submit(const Stagecraft__SubmitJobRequest *req)
{
    const char *text = req->job_json ? req->job_json : "";
    coord_jobspec spec;
    memset(&spec, 0, sizeof spec);
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = coord_jobspec_parse("job", text, strlen(text), &spec, &err);
    fuzz_refusal(rc, &err, "the submitted job");
    coord_jobspec_clear(&spec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const ProtobufCMessageDescriptor *desc = pick(data[0]);
    /* the body in a buffer of its own size, as the server flattens the slices it received */
    uint8_t *body = malloc(size - 1 ? size - 1 : 1);
    FUZZ_REQUIRE(body != NULL, "out of memory");
    memcpy(body, data + 1, size - 1);
    ProtobufCMessage *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = sc_wire_unpack(desc, body, size - 1, &m, &err);
    fuzz_refusal(rc, &err, desc->name);
    if (rc == SC_OK) {
        const Stagecraft__Header *h = (const Stagecraft__Header *)sc_wire_header(m);
        sc_err_clear(&err);
        rc = sc_wire_check_version(h ? h->protocol_version : 0, "request", &err);
        fuzz_refusal(rc, &err, "the header");
        round_trip(m);
        if (desc == &stagecraft__register_worker_request__descriptor)
            check_register((const Stagecraft__RegisterWorkerRequest *)m);
        else if (desc == &stagecraft__submit_job_request__descriptor)
            check_submit((const Stagecraft__SubmitJobRequest *)m);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    free(body);
    return 0;
}
