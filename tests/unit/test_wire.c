/* proto/sc_wire: protocol version check, protobuf-c pack/unpack, generic Header lookup. */
/* cmocka.h needs these four before it. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_status.h"
#include "proto/sc_wire.h"
#include "proto/stagecraft.pb-c.h"

static void test_version_check(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_wire_check_version(SC_PROTOCOL_VERSION, "x", &err), SC_OK);
    assert_int_equal(err.code, SC_OK);

    assert_int_equal(sc_wire_check_version(0, "SubmitJob request", &err), SC_ERR_VERSION);
    assert_non_null(strstr(err.msg, "SubmitJob request"));
    assert_non_null(strstr(err.msg, "no protocol version"));

    sc_err_clear(&err);
    assert_int_equal(sc_wire_check_version(SC_PROTOCOL_VERSION + 41, "worker w1", &err),
                     SC_ERR_VERSION);
    char got[32], ours[48];
    snprintf(got, sizeof got, "version %d", SC_PROTOCOL_VERSION + 41);
    snprintf(ours, sizeof ours, "speaks version %d", SC_PROTOCOL_VERSION);
    assert_non_null(strstr(err.msg, "worker w1"));
    assert_non_null(strstr(err.msg, got));
    assert_non_null(strstr(err.msg, ours));
}

static void test_pack_unpack_round_trip(void **state)
{
    (void)state;
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.protocol_version = SC_PROTOCOL_VERSION;
    hdr.request_id = "r-17";
    Stagecraft__SubmitJobRequest req = STAGECRAFT__SUBMIT_JOB_REQUEST__INIT;
    req.header = &hdr;
    req.job_json = "{\"format\": \"stagecraft-job\"}";

    sc_err err;
    sc_err_clear(&err);
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(sc_wire_pack(&req.base, &buf, &len, &err), SC_OK);
    assert_int_equal(len, protobuf_c_message_get_packed_size(&req.base));

    ProtobufCMessage *m = NULL;
    assert_int_equal(
        sc_wire_unpack(&stagecraft__submit_job_request__descriptor, buf, len, &m, &err), SC_OK);
    Stagecraft__SubmitJobRequest *back = (Stagecraft__SubmitJobRequest *)m;
    assert_non_null(back->header);
    assert_int_equal(back->header->protocol_version, SC_PROTOCOL_VERSION);
    assert_string_equal(back->header->request_id, "r-17");
    assert_string_equal(back->job_json, req.job_json);
    protobuf_c_message_free_unpacked(m, NULL);
    free(buf);

    /* an all-default message packs to zero bytes and still unpacks */
    Stagecraft__ListJobsRequest empty = STAGECRAFT__LIST_JOBS_REQUEST__INIT;
    assert_int_equal(sc_wire_pack(&empty.base, &buf, &len, &err), SC_OK);
    assert_int_equal(len, 0);
    assert_int_equal(sc_wire_unpack(&stagecraft__list_jobs_request__descriptor, buf, len, &m, &err),
                     SC_OK);
    assert_null(((Stagecraft__ListJobsRequest *)m)->header);
    protobuf_c_message_free_unpacked(m, NULL);
    free(buf);
    assert_int_equal(err.code, SC_OK);
}

static void test_unpack_malformed(void **state)
{
    (void)state;
    /* field 2 (job_json) announces 16 bytes but only 1 follows */
    static const uint8_t truncated[] = {0x12, 0x10, 'x'};
    /* a varint that never ends */
    static const uint8_t endless[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    /* field 1 (header, a message) sent as a varint: the wrong wire type */
    static const uint8_t wrong_type[] = {0x08, 0x01};
    /* field number 0 in a two-byte tag, at the top and inside the header: protobuf-c keeps it
     * and would pack it back into a one-byte tag that it refuses (found by tests/fuzz/) */
    static const uint8_t field_zero[] = {0x81, 0x00, 0, 0, 0, 0, 0, 0x2a, 0, 0};
    static const uint8_t field_zero_inner[] = {0x0a, 0x03, 0x80, 0x00, 0x00};
    const struct {
        const uint8_t *data;
        size_t len;
    } cases[] = {{truncated, sizeof truncated},
                 {endless, sizeof endless},
                 {wrong_type, sizeof wrong_type},
                 {field_zero, sizeof field_zero},
                 {field_zero_inner, sizeof field_zero_inner}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sc_err err;
        sc_err_clear(&err);
        ProtobufCMessage *m = (ProtobufCMessage *)&err; /* must stay untouched on failure */
        assert_int_equal(sc_wire_unpack(&stagecraft__submit_job_request__descriptor, cases[i].data,
                                        cases[i].len, &m, &err),
                         SC_ERR_PARSE);
        assert_ptr_equal(m, (ProtobufCMessage *)&err);
        assert_non_null(strstr(err.msg, "stagecraft.SubmitJobRequest"));
        char n[32];
        snprintf(n, sizeof n, "%zu bytes", cases[i].len);
        assert_non_null(strstr(err.msg, n));
    }
}

static void test_header_lookup(void **state)
{
    (void)state;
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.protocol_version = 3;
    Stagecraft__GetJobRequest req = STAGECRAFT__GET_JOB_REQUEST__INIT;

    /* unset header */
    assert_null(sc_wire_header(&req.base));
    sc_wire_set_header(&req.base, &hdr.base);
    assert_ptr_equal(req.header, &hdr);
    assert_ptr_equal(sc_wire_header(&req.base), &hdr.base);

    /* a header already there is kept */
    Stagecraft__Header other = STAGECRAFT__HEADER__INIT;
    sc_wire_set_header(&req.base, &other.base);
    assert_ptr_equal(req.header, &hdr);

    /* messages without a header field: lookup is NULL, set is a no-op */
    Stagecraft__Device dev = STAGECRAFT__DEVICE__INIT;
    assert_null(sc_wire_header(&dev.base));
    Stagecraft__Device before = dev;
    sc_wire_set_header(&dev.base, &hdr.base);
    assert_memory_equal(&dev, &before, sizeof dev);

    /* the lookup works through any message type that has one */
    Stagecraft__ReleaseResponse rel = STAGECRAFT__RELEASE_RESPONSE__INIT;
    rel.header = &other;
    assert_ptr_equal(sc_wire_header(&rel.base), &other.base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_check),
        cmocka_unit_test(test_pack_unpack_round_trip),
        cmocka_unit_test(test_unpack_malformed),
        cmocka_unit_test(test_header_lookup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
