/* proto/sc_rpc: a real server and client on loopback (port 0). Round trips, errors and their
 * mapping, limits, deadlines, hung handlers, shutdown with calls in flight, TLS. */
/* cmocka.h needs these four before it. */
/* clang-format off */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sc_clock.h"
#include "common/sc_status.h"
#include "common/sc_util.h"
#include "proto/sc_rpc.h"
#include "proto/sc_wire.h"
#include "proto/stagecraft.pb-c.h"

#define M_SUBMIT "/stagecraft.Coordinator/SubmitJob"
#define M_GET "/stagecraft.Coordinator/GetJob"
#define M_CANCEL "/stagecraft.Coordinator/CancelJob"
#define M_DESCRIBE "/stagecraft.Worker/Describe"
#define SERVER_MAX_BYTES (64 * 1024)
#define HANDLER_CAP_MS 5000 /* no test handler runs longer, whatever happens */

/* What the handlers saw, for the tests to check. */
typedef struct {
    pthread_mutex_t mu;
    char peer[128];
    char token[64];
    uint32_t header_version;
    uint64_t deadline_ns;
    uint64_t handled_at_ns;
    atomic_int started;    /* CancelJob handlers that began */
    atomic_int running;    /* CancelJob handlers running now */
    atomic_int saw_cancel; /* CancelJob handlers that saw sc_rpc_ctx_cancelled() */
    atomic_int freed;      /* Describe responses given to resp_free */
} seen_t;

static seen_t seen = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void seen_reset(void)
{
    pthread_mutex_lock(&seen.mu);
    seen.peer[0] = seen.token[0] = '\0';
    seen.header_version = 0;
    seen.deadline_ns = seen.handled_at_ns = 0;
    pthread_mutex_unlock(&seen.mu);
    atomic_store(&seen.started, 0);
    atomic_store(&seen.running, 0);
    atomic_store(&seen.saw_cancel, 0);
    atomic_store(&seen.freed, 0);
}

static void seen_copy(char token[64], char peer[128], uint32_t *version, uint64_t *deadline_ns,
                      uint64_t *handled_at_ns)
{
    pthread_mutex_lock(&seen.mu);
    memcpy(token, seen.token, sizeof seen.token);
    memcpy(peer, seen.peer, sizeof seen.peer);
    *version = seen.header_version;
    *deadline_ns = seen.deadline_ns;
    *handled_at_ns = seen.handled_at_ns;
    pthread_mutex_unlock(&seen.mu);
}

/* Echo: job_id = "job:" + job_json; records peer, header and deadline. */
static sc_status handle_submit(sc_rpc_ctx *ctx, const ProtobufCMessage *req,
                               ProtobufCMessage **resp, void *user, sc_err *err)
{
    (void)user;
    const Stagecraft__SubmitJobRequest *r = (const Stagecraft__SubmitJobRequest *)req;
    const Stagecraft__Header *h = sc_rpc_ctx_header(ctx);
    pthread_mutex_lock(&seen.mu);
    snprintf(seen.peer, sizeof seen.peer, "%s", sc_rpc_ctx_peer(ctx));
    snprintf(seen.token, sizeof seen.token, "%s", h ? h->token : "(none)");
    seen.header_version = h ? h->protocol_version : 0;
    seen.deadline_ns = sc_rpc_ctx_deadline_ns(ctx);
    seen.handled_at_ns = sc_clock_now_ns();
    pthread_mutex_unlock(&seen.mu);

    Stagecraft__SubmitJobResponse *out = (Stagecraft__SubmitJobResponse *)sc_rpc_ctx_new_message(
        ctx, &stagecraft__submit_job_response__descriptor);
    size_t n = strlen(r->job_json) + 5;
    char *id = sc_rpc_ctx_alloc(ctx, n);
    if (out == NULL || id == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    snprintf(id, n, "job:%s", r->job_json);
    out->job_id = id;
    *resp = &out->base;
    return SC_OK;
}

static sc_status status_by_name(const char *name)
{
    for (int s = 0; s < SC_STATUS_COUNT; s++)
        if (strcmp(sc_status_name((sc_status)s), name) == 0)
            return (sc_status)s;
    return SC_OK;
}

/* job_id picks the behaviour: an sc_status name fails with it; "bare:NAME" fails without a
 * message; "badver", "wrongtype", "noresp", "big:N" exercise the layer's checks. */
static sc_status handle_get(sc_rpc_ctx *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp,
                            void *user, sc_err *err)
{
    (void)user;
    const char *id = ((const Stagecraft__GetJobRequest *)req)->job_id;
    Stagecraft__GetJobResponse *out = (Stagecraft__GetJobResponse *)sc_rpc_ctx_new_message(
        ctx, &stagecraft__get_job_response__descriptor);
    Stagecraft__JobInfo *job =
        (Stagecraft__JobInfo *)sc_rpc_ctx_new_message(ctx, &stagecraft__job_info__descriptor);
    if (out == NULL || job == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
    out->job = job;
    job->job_id = (char *)id; /* the request outlives the response: borrowing is fine */
    job->state = STAGECRAFT__JOB_STATE__JOB_RUNNING;

    if (strncmp(id, "SC_", 3) == 0)
        return SC_ERRF(err, status_by_name(id), "job j-42: %s", id);
    if (strncmp(id, "bare:", 5) == 0)
        return status_by_name(id + 5);
    if (strcmp(id, "noresp") == 0)
        return SC_OK;
    if (strcmp(id, "wrongtype") == 0) {
        *resp = &job->base;
        return SC_OK;
    }
    if (strcmp(id, "badver") == 0) {
        Stagecraft__Header *h =
            (Stagecraft__Header *)sc_rpc_ctx_new_message(ctx, &stagecraft__header__descriptor);
        h->protocol_version = 7;
        out->header = h;
    }
    if (strncmp(id, "big:", 4) == 0) {
        size_t n = (size_t)atol(id + 4);
        char *s = sc_rpc_ctx_alloc(ctx, n + 1);
        memset(s, 'r', n);
        job->reason = s;
    }
    *resp = &out->base;
    return SC_OK;
}

/* reason picks the behaviour: "poll" waits until cancelled; "slow:N" polls for N ms and then
 * answers; "sleep:N" sleeps N ms without looking at the flag. */
static sc_status handle_cancel(sc_rpc_ctx *ctx, const ProtobufCMessage *req,
                               ProtobufCMessage **resp, void *user, sc_err *err)
{
    (void)user;
    const char *how = ((const Stagecraft__CancelJobRequest *)req)->reason;
    atomic_fetch_add(&seen.running, 1);
    atomic_fetch_add(&seen.started, 1);
    sc_status rc = SC_OK;
    if (strncmp(how, "sleep:", 6) == 0) {
        sc_clock_sleep_ms((uint64_t)atol(how + 6));
    } else {
        uint64_t limit_ms = strcmp(how, "poll") == 0 ? HANDLER_CAP_MS : (uint64_t)atol(how + 5);
        uint64_t end = sc_clock_now_ns() + limit_ms * 1000000u;
        while (sc_clock_now_ns() < end) {
            if (sc_rpc_ctx_cancelled(ctx)) {
                atomic_fetch_add(&seen.saw_cancel, 1);
                rc = SC_ERRF(err, SC_ERR_CANCELLED, "gave up: the call was cancelled");
                break;
            }
            sc_clock_sleep_ms(2);
        }
    }
    if (rc == SC_OK) {
        ProtobufCMessage *out =
            sc_rpc_ctx_new_message(ctx, &stagecraft__cancel_job_response__descriptor);
        *resp = out;
    }
    atomic_fetch_sub(&seen.running, 1);
    return rc;
}

/* A response built on the heap and released by the method's resp_free. */
static sc_status handle_describe(sc_rpc_ctx *ctx, const ProtobufCMessage *req,
                                 ProtobufCMessage **resp, void *user, sc_err *err)
{
    (void)ctx;
    (void)req;
    (void)err;
    Stagecraft__DescribeResponse *out = malloc(sizeof *out);
    stagecraft__describe_response__init(out);
    out->worker_id = strdup((const char *)user);
    out->state = strdup("idle");
    *resp = &out->base;
    return SC_OK;
}

static void free_describe(ProtobufCMessage *resp, void *user)
{
    (void)user;
    Stagecraft__DescribeResponse *d = (Stagecraft__DescribeResponse *)resp;
    free(d->worker_id);
    free(d->state);
    free(d);
    atomic_fetch_add(&seen.freed, 1);
}

static sc_rpc_method method_table[] = {
    {M_SUBMIT, &stagecraft__submit_job_request__descriptor,
     &stagecraft__submit_job_response__descriptor, handle_submit, NULL, NULL},
    {M_GET, &stagecraft__get_job_request__descriptor, &stagecraft__get_job_response__descriptor,
     handle_get, NULL, NULL},
    {M_CANCEL, &stagecraft__cancel_job_request__descriptor,
     &stagecraft__cancel_job_response__descriptor, handle_cancel, NULL, NULL},
    {M_DESCRIBE, &stagecraft__describe_request__descriptor,
     &stagecraft__describe_response__descriptor, handle_describe, free_describe, (void *)"w-7"},
};

typedef struct {
    sc_rpc_server *srv;
    sc_rpc_client *cli;
    char target[64];
} fixture;

static sc_rpc_server_cfg server_cfg(void)
{
    sc_rpc_server_cfg cfg = {.listen_addr = "127.0.0.1:0",
                             .max_message_bytes = SERVER_MAX_BYTES,
                             .handler_threads = 4,
                             .methods = method_table,
                             .n_methods = SC_ARRAY_LEN(method_table)};
    return cfg;
}

static int setup(void **state)
{
    seen_reset();
    fixture *f = calloc(1, sizeof *f);
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_server_cfg cfg = server_cfg();
    if (sc_rpc_server_new(&f->srv, &cfg, &err) != SC_OK) {
        fprintf(stderr, "server: %s\n", err.msg);
        return -1;
    }
    assert_true(sc_rpc_server_port(f->srv) > 0);
    snprintf(f->target, sizeof f->target, "127.0.0.1:%d", sc_rpc_server_port(f->srv));
    if (sc_rpc_client_new(&f->cli, f->target, NULL, &err) != SC_OK) {
        fprintf(stderr, "client: %s\n", err.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    sc_rpc_client_destroy(&f->cli);
    sc_rpc_server_destroy(&f->srv);
    assert_null(f->cli);
    assert_null(f->srv);
    free(f);
    return 0;
}

/* SubmitJob with `json`; the response's job_id must echo it. */
static sc_status submit(sc_rpc_client *cli, const char *json, const Stagecraft__Header *hdr,
                        int64_t timeout_ms, sc_err *err)
{
    Stagecraft__SubmitJobRequest req = STAGECRAFT__SUBMIT_JOB_REQUEST__INIT;
    req.header = (Stagecraft__Header *)hdr;
    req.job_json = (char *)json;
    ProtobufCMessage *m = NULL;
    sc_status rc = sc_rpc_call(cli, M_SUBMIT, &req.base,
                               &stagecraft__submit_job_response__descriptor, &m, timeout_ms, err);
    if (rc != SC_OK) {
        assert_null(m);
        return rc;
    }
    Stagecraft__SubmitJobResponse *r = (Stagecraft__SubmitJobResponse *)m;
    assert_non_null(r->header);
    assert_int_equal(r->header->protocol_version, SC_PROTOCOL_VERSION);
    assert_true(strncmp(r->job_id, "job:", 4) == 0);
    assert_string_equal(r->job_id + 4, json);
    protobuf_c_message_free_unpacked(m, NULL);
    return SC_OK;
}

static void assert_submit_ok(sc_rpc_client *cli)
{
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = submit(cli, "{\"format\": \"stagecraft-job\"}", NULL, 2000, &err);
    if (rc != SC_OK)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, SC_OK);
}

static sc_status get_job(sc_rpc_client *cli, const char *id, Stagecraft__GetJobResponse **out,
                         sc_err *err)
{
    Stagecraft__GetJobRequest req = STAGECRAFT__GET_JOB_REQUEST__INIT;
    req.job_id = (char *)id;
    ProtobufCMessage *m = NULL;
    sc_status rc = sc_rpc_call(cli, M_GET, &req.base, &stagecraft__get_job_response__descriptor, &m,
                               2000, err);
    if (out != NULL)
        *out = (Stagecraft__GetJobResponse *)m;
    else if (m != NULL)
        protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

static void test_round_trip(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);

    /* a Header with a token but no version: the client fills the version, keeps the token */
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.token = "t0k";
    uint64_t before = sc_clock_now_ns();
    assert_int_equal(submit(f->cli, "{\"name\": \"gpt\", \"steps\": 3}", &hdr, 3000, &err), SC_OK);
    assert_int_equal(hdr.protocol_version, 0); /* the caller's message is left alone */
    /* Copy what the handler saw under the lock, then check it: a failed check must not leave
     * the lock held for the tests after it. */
    char token[64], peer[128];
    uint32_t version;
    uint64_t deadline_ns, handled_at_ns;
    seen_copy(token, peer, &version, &deadline_ns, &handled_at_ns);
    uint64_t after = sc_clock_now_ns();
    assert_string_equal(token, "t0k");
    assert_int_equal(version, SC_PROTOCOL_VERSION);
    assert_true(strncmp(peer, "ipv4:127.0.0.1:", 15) == 0);
    /* the handler's deadline lies after it ran and no later than the client's (the server
     * rebuilds it from the transmitted timeout, so allow for the time in transit and the clock
     * conversions) */
    assert_true(deadline_ns > handled_at_ns);
    assert_true(deadline_ns <= after + 3000000000ull + 200000000ull);
    assert_true(deadline_ns >= before);

    /* no Header at all: the server still sees one with the version */
    assert_int_equal(submit(f->cli, "{}", NULL, 2000, &err), SC_OK);
    seen_copy(token, peer, &version, &deadline_ns, &handled_at_ns);
    assert_int_equal(version, SC_PROTOCOL_VERSION);
    assert_string_equal(token, "");

    /* a nested message, and a response field borrowed from the request */
    Stagecraft__GetJobResponse *r = NULL;
    assert_int_equal(get_job(f->cli, "j-1", &r, &err), SC_OK);
    assert_non_null(r->job);
    assert_string_equal(r->job->job_id, "j-1");
    assert_int_equal(r->job->state, STAGECRAFT__JOB_STATE__JOB_RUNNING);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    assert_int_equal(err.code, SC_OK);
}

static void test_raw_round_trip(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.protocol_version = SC_PROTOCOL_VERSION;
    Stagecraft__SubmitJobRequest req = STAGECRAFT__SUBMIT_JOB_REQUEST__INIT;
    req.header = &hdr;
    req.job_json = "raw";
    uint8_t *bytes, *out = NULL;
    size_t len, out_len = 0;
    assert_int_equal(sc_wire_pack(&req.base, &bytes, &len, &err), SC_OK);
    assert_int_equal(sc_rpc_call_raw(f->cli, M_SUBMIT, bytes, len, &out, &out_len, 2000, &err),
                     SC_OK);
    free(bytes);
    ProtobufCMessage *m;
    assert_int_equal(
        sc_wire_unpack(&stagecraft__submit_job_response__descriptor, out, out_len, &m, &err),
        SC_OK);
    assert_string_equal(((Stagecraft__SubmitJobResponse *)m)->job_id, "job:raw");
    protobuf_c_message_free_unpacked(m, NULL);
    free(out);
}

static void test_unknown_method(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    Stagecraft__ListJobsRequest req = STAGECRAFT__LIST_JOBS_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    assert_int_equal(sc_rpc_call(f->cli, "/stagecraft.Coordinator/Nope", &req.base,
                                 &stagecraft__list_jobs_response__descriptor, &m, 2000, &err),
                     SC_ERR_UNSUPPORTED);
    assert_null(m);
    char want[160];
    snprintf(want, sizeof want,
             "/stagecraft.Coordinator/Nope at %s: UNIMPLEMENTED: unknown method "
             "/stagecraft.Coordinator/Nope",
             f->target);
    assert_string_equal(err.msg, want);
    assert_submit_ok(f->cli);
}

static void test_malformed_request(void **state)
{
    fixture *f = *state;
    /* field 2 announces 16 bytes, 1 follows; then bytes that are not protobuf at all */
    static const uint8_t truncated[] = {0x12, 0x10, 'x'};
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0xff, 0x7f};
    const uint8_t *cases[] = {truncated, junk};
    const size_t lens[] = {sizeof truncated, sizeof junk};
    for (int i = 0; i < 2; i++) {
        sc_err err;
        sc_err_clear(&err);
        uint8_t *out = NULL;
        size_t out_len = 0;
        assert_int_equal(
            sc_rpc_call_raw(f->cli, M_SUBMIT, cases[i], lens[i], &out, &out_len, 2000, &err),
            SC_ERR_PARSE);
        assert_null(out);
        assert_non_null(strstr(err.msg, ": INVALID_ARGUMENT: "));
        assert_non_null(strstr(err.msg, "malformed stagecraft.SubmitJobRequest"));
        assert_submit_ok(f->cli); /* the server still answers */
    }
}

static void test_oversized_request(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    size_t n = SERVER_MAX_BYTES + 1000;
    char *big = malloc(n + 1);
    memset(big, 'j', n);
    big[n] = '\0';
    /* the client allows 4 MiB, the server 64 KiB: gRPC refuses it on the server */
    assert_int_equal(submit(f->cli, big, NULL, 2000, &err), SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, ": RESOURCE_EXHAUSTED: "));
    assert_submit_ok(f->cli);

    /* a response over the server's limit is refused by the server, naming the type */
    char id[32];
    snprintf(id, sizeof id, "big:%d", SERVER_MAX_BYTES + 10);
    sc_err_clear(&err);
    assert_int_equal(get_job(f->cli, id, NULL, &err), SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "RESOURCE_EXHAUSTED: stagecraft.GetJobResponse of"));
    assert_submit_ok(f->cli);

    /* a client with a 1 KiB limit: its own requests are refused before sending, and a larger
     * response is refused by gRPC on receipt */
    sc_rpc_client *small = NULL;
    sc_rpc_client_cfg ccfg = {.max_message_bytes = 1024};
    assert_int_equal(sc_rpc_client_new(&small, f->target, &ccfg, &err), SC_OK);
    big[2000] = '\0';
    sc_err_clear(&err);
    assert_int_equal(submit(small, big, NULL, 2000, &err), SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "stagecraft.SubmitJobRequest of"));
    assert_non_null(strstr(err.msg, "limit of 1024 bytes"));
    sc_err_clear(&err);
    assert_int_equal(get_job(small, "big:4000", NULL, &err), SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, ": RESOURCE_EXHAUSTED: "));
    assert_int_equal(get_job(small, "j-2", NULL, &err), SC_OK);
    sc_rpc_client_destroy(&small);
    free(big);
    assert_submit_ok(f->cli);
}

static void test_version_mismatch(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.protocol_version = 99;
    assert_int_equal(submit(f->cli, "{}", &hdr, 2000, &err), SC_ERR_VERSION);
    assert_non_null(strstr(err.msg, ": FAILED_PRECONDITION: request from ipv4:127.0.0.1:"));
    assert_non_null(strstr(err.msg, "protocol version 99"));
    char ours[32];
    snprintf(ours, sizeof ours, "speaks version %d", SC_PROTOCOL_VERSION);
    assert_non_null(strstr(err.msg, ours));

    /* the client checks the response's version too */
    sc_err_clear(&err);
    assert_int_equal(get_job(f->cli, "badver", NULL, &err), SC_ERR_VERSION);
    assert_non_null(strstr(err.msg, "the response speaks protocol version 7"));
    assert_submit_ok(f->cli);
}

static void test_handler_errors(void **state)
{
    fixture *f = *state;
    const struct {
        sc_status s;
        const char *code;
    } cases[] = {
        {SC_ERR_NOT_FOUND, "NOT_FOUND"},
        {SC_ERR_INVALID, "INVALID_ARGUMENT"},
        {SC_ERR_PARSE, "INVALID_ARGUMENT"},
        {SC_ERR_EXISTS, "ALREADY_EXISTS"},
        {SC_ERR_PERMISSION, "PERMISSION_DENIED"},
        {SC_ERR_VERSION, "FAILED_PRECONDITION"},
        {SC_ERR_PRECONDITION, "FAILED_PRECONDITION"},
        {SC_ERR_TOO_LARGE, "RESOURCE_EXHAUSTED"},
        {SC_ERR_NOMEM, "RESOURCE_EXHAUSTED"},
        {SC_ERR_UNAVAILABLE, "UNAVAILABLE"},
        {SC_ERR_TIMEOUT, "DEADLINE_EXCEEDED"},
        {SC_ERR_CANCELLED, "CANCELLED"},
        {SC_ERR_UNSUPPORTED, "UNIMPLEMENTED"},
        {SC_ERR_IO, "INTERNAL"},
        {SC_ERR_CUDA, "INTERNAL"},
        {SC_ERR_INTERNAL, "INTERNAL"},
    };
    for (size_t i = 0; i < SC_ARRAY_LEN(cases); i++) {
        sc_err err;
        sc_err_clear(&err);
        const char *name = sc_status_name(cases[i].s);
        Stagecraft__GetJobResponse *r = (Stagecraft__GetJobResponse *)&err;
        assert_int_equal(get_job(f->cli, name, &r, &err), cases[i].s);
        assert_null(r);
        char want[256];
        snprintf(want, sizeof want, "%s at %s: %s: job j-42: %s", M_GET, f->target, cases[i].code,
                 name);
        assert_string_equal(err.msg, want);
    }

    /* an error without a message carries the status text */
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(get_job(f->cli, "bare:SC_ERR_EXISTS", NULL, &err), SC_ERR_EXISTS);
    assert_non_null(strstr(err.msg, ": ALREADY_EXISTS: already exists"));

    /* handler mistakes become INTERNAL, not crashes */
    sc_err_clear(&err);
    assert_int_equal(get_job(f->cli, "noresp", NULL, &err), SC_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "INTERNAL: the handler returned no response"));
    sc_err_clear(&err);
    assert_int_equal(get_job(f->cli, "wrongtype", NULL, &err), SC_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "returned a stagecraft.JobInfo instead of a "
                                    "stagecraft.GetJobResponse"));
    assert_submit_ok(f->cli);
}

static void test_resp_free(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    Stagecraft__DescribeRequest req = STAGECRAFT__DESCRIBE_REQUEST__INIT;
    for (int i = 0; i < 3; i++) {
        ProtobufCMessage *m = NULL;
        assert_int_equal(sc_rpc_call(f->cli, M_DESCRIBE, &req.base,
                                     &stagecraft__describe_response__descriptor, &m, 2000, &err),
                         SC_OK);
        Stagecraft__DescribeResponse *d = (Stagecraft__DescribeResponse *)m;
        assert_string_equal(d->worker_id, "w-7");
        assert_string_equal(d->state, "idle");
        assert_int_equal(d->header->protocol_version, SC_PROTOCOL_VERSION);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    /* resp_free ran once per call, after the response went out */
    assert_int_equal(atomic_load(&seen.freed), 3);
}

static void test_status_tables(void **state)
{
    (void)state;
    assert_string_equal(sc_rpc_code_name(0), "OK");
    assert_string_equal(sc_rpc_code_name(4), "DEADLINE_EXCEEDED");
    assert_string_equal(sc_rpc_code_name(16), "UNAUTHENTICATED");
    assert_string_equal(sc_rpc_code_name(17), "UNKNOWN_CODE");
    assert_string_equal(sc_rpc_code_name(-1), "UNKNOWN_CODE");
    assert_int_equal(sc_rpc_code_to_status(16), SC_ERR_PERMISSION);
    assert_int_equal(sc_rpc_code_to_status(2), SC_ERR_GRPC);
    assert_int_equal(sc_rpc_code_to_status(99), SC_ERR_GRPC);
    /* every status survives the trip to a code and back, up to the code's resolution */
    for (int s = 0; s < SC_STATUS_COUNT; s++) {
        int code = sc_rpc_status_to_code((sc_status)s);
        assert_int_equal(sc_rpc_status_to_code(sc_rpc_code_to_status(code)), code);
    }
}

typedef struct {
    sc_rpc_client *cli;
    const char *how;
    int64_t timeout_ms;
    sc_status rc;
    sc_err err;
    atomic_bool done;
} bg_call;

static void *bg_cancel_job(void *arg)
{
    bg_call *b = arg;
    sc_err_clear(&b->err);
    Stagecraft__CancelJobRequest req = STAGECRAFT__CANCEL_JOB_REQUEST__INIT;
    req.job_id = "j-9";
    req.reason = (char *)b->how;
    ProtobufCMessage *m = NULL;
    b->rc = sc_rpc_call(b->cli, M_CANCEL, &req.base, &stagecraft__cancel_job_response__descriptor,
                        &m, b->timeout_ms, &b->err);
    if (m != NULL)
        protobuf_c_message_free_unpacked(m, NULL);
    atomic_store(&b->done, true);
    return NULL;
}

/* Bounded wait for a counter to reach `want`. */
static bool wait_for(atomic_int *v, int want, int64_t limit_ms)
{
    uint64_t end = sc_clock_now_ns() + (uint64_t)limit_ms * 1000000u;
    while (atomic_load(v) < want) {
        if (sc_clock_now_ns() > end)
            return false;
        sc_clock_sleep_ms(1);
    }
    return true;
}

static void test_hung_handler_deadline(void **state)
{
    fixture *f = *state;
    /* one handler that polls the flag, one that ignores it: both hold a pool thread past the
     * client's deadline, and neither stops other calls */
    const char *hows[] = {"poll", "sleep:1500"};
    assert_submit_ok(f->cli); /* connected first, so the deadline is all the handler's */
    for (int i = 0; i < 2; i++) {
        seen_reset();
        bg_call b = {.cli = f->cli, .how = hows[i], .timeout_ms = 500};
        atomic_init(&b.done, false);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, bg_cancel_job, &b), 0);
        assert_true(wait_for(&seen.started, 1, 3000));
        assert_submit_ok(f->cli);
        assert_int_equal(get_job(f->cli, "j-3", NULL, NULL), SC_OK);
        if (i == 1) /* the sleeper is still asleep: the other calls did not wait for it */
            assert_int_equal(atomic_load(&seen.running), 1);
        pthread_join(t, NULL);
        assert_int_equal(b.rc, SC_ERR_TIMEOUT);
        assert_non_null(strstr(b.err.msg, M_CANCEL " at 127.0.0.1:"));
        assert_non_null(strstr(b.err.msg, ": DEADLINE_EXCEEDED: "));
        if (i == 0) /* the polling handler learnt of the deadline */
            assert_true(wait_for(&seen.saw_cancel, 1, 3000));
        assert_submit_ok(f->cli);
    }
}

typedef struct {
    sc_rpc_client *cli;
    int index, calls, ok;
    sc_err err;
} many_calls;

/* SubmitJob `calls` times with this thread's own payload; counts the right echoes. */
static void *bg_many(void *arg)
{
    many_calls *b = arg;
    sc_err_clear(&b->err);
    for (int i = 0; i < b->calls; i++) {
        char json[64];
        snprintf(json, sizeof json, "{\"thread\": %d, \"call\": %d}", b->index, i);
        Stagecraft__SubmitJobRequest req = STAGECRAFT__SUBMIT_JOB_REQUEST__INIT;
        req.job_json = json;
        ProtobufCMessage *m = NULL;
        if (sc_rpc_call(b->cli, M_SUBMIT, &req.base, &stagecraft__submit_job_response__descriptor,
                        &m, 5000, &b->err) != SC_OK)
            break;
        const char *id = ((Stagecraft__SubmitJobResponse *)m)->job_id;
        if (strncmp(id, "job:", 4) == 0 && strcmp(id + 4, json) == 0)
            b->ok++;
        protobuf_c_message_free_unpacked(m, NULL);
    }
    return NULL;
}

static void test_concurrent_calls(void **state)
{
    fixture *f = *state;
    enum { THREADS = 8, CALLS = 40 };
    pthread_t t[THREADS];
    many_calls b[THREADS];
    for (int i = 0; i < THREADS; i++) {
        b[i] = (many_calls){.cli = f->cli, .index = i, .calls = CALLS};
        assert_int_equal(pthread_create(&t[i], NULL, bg_many, &b[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        if (b[i].ok != CALLS)
            fprintf(stderr, "thread %d: %s\n", i, b[i].err.msg);
        assert_int_equal(b[i].ok, CALLS);
    }
}

static void test_shutdown_waits_for_call_in_flight(void **state)
{
    fixture *f = *state;
    bg_call b = {.cli = f->cli, .how = "slow:300", .timeout_ms = 5000};
    atomic_init(&b.done, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, bg_cancel_job, &b), 0);
    assert_true(wait_for(&seen.started, 1, 3000));
    sc_rpc_server_shutdown(f->srv, 3000); /* the call ends within the grace */
    pthread_join(t, NULL);
    if (b.rc != SC_OK)
        fprintf(stderr, "%s\n", b.err.msg);
    assert_int_equal(b.rc, SC_OK);
    assert_int_equal(atomic_load(&seen.saw_cancel), 0);
    /* no longer serving: a new call fails, promptly */
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = submit(f->cli, "{}", NULL, 2000, &err);
    assert_true(rc == SC_ERR_UNAVAILABLE || rc == SC_ERR_TIMEOUT);
    sc_rpc_server_shutdown(f->srv, 0); /* idempotent */
}

static void test_shutdown_cancels_after_grace(void **state)
{
    fixture *f = *state;
    bg_call b = {.cli = f->cli, .how = "poll", .timeout_ms = 10000};
    atomic_init(&b.done, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, bg_cancel_job, &b), 0);
    assert_true(wait_for(&seen.started, 1, 3000));
    sc_rpc_server_shutdown(f->srv, 100);
    /* shutdown returned only after the handler did */
    assert_int_equal(atomic_load(&seen.running), 0);
    assert_int_equal(atomic_load(&seen.saw_cancel), 1);
    pthread_join(t, NULL);
    if (b.rc != SC_ERR_CANCELLED && b.rc != SC_ERR_UNAVAILABLE)
        fprintf(stderr, "%s: %s\n", sc_status_name(b.rc), b.err.msg);
    assert_true(b.rc == SC_ERR_CANCELLED || b.rc == SC_ERR_UNAVAILABLE);
}

static void test_destroy_with_call_in_flight(void **state)
{
    fixture *f = *state;
    bg_call b = {.cli = f->cli, .how = "poll", .timeout_ms = 10000};
    atomic_init(&b.done, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, bg_cancel_job, &b), 0);
    assert_true(wait_for(&seen.started, 1, 3000));
    sc_rpc_server_destroy(&f->srv); /* grace 0 */
    pthread_join(t, NULL);
    assert_true(b.rc == SC_ERR_CANCELLED || b.rc == SC_ERR_UNAVAILABLE);
}

static void test_nothing_listening(void **state)
{
    (void)state;
    /* a port that was free a moment ago and has no listener */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t alen = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    close(fd);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", ntohs(a.sin_port));

    sc_rpc_client *cli = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_client_new(&cli, target, NULL, &err), SC_OK);
    uint64_t t0 = sc_clock_now_ns();
    sc_status rc = submit(cli, "{}", NULL, 1000, &err);
    uint64_t took_ms = (sc_clock_now_ns() - t0) / 1000000u;
    assert_true(rc == SC_ERR_UNAVAILABLE || rc == SC_ERR_TIMEOUT);
    assert_non_null(strstr(err.msg, target));
    /* bounded by the deadline (with room for a loaded machine), never a hang */
    assert_true(took_ms < 1000 + 3000);
    sc_rpc_client_destroy(&cli);
}

static void test_bad_config(void **state)
{
    (void)state;
    sc_err err;
    sc_rpc_server *srv = NULL;
    sc_rpc_server_cfg cfg = server_cfg();

    sc_err_clear(&err);
    cfg.listen_addr = "";
    assert_int_equal(sc_rpc_server_new(&srv, &cfg, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "listen_addr"));

    sc_rpc_method dup[2] = {method_table[0], method_table[0]};
    cfg = server_cfg();
    cfg.methods = dup;
    cfg.n_methods = 2;
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_server_new(&srv, &cfg, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "listed twice"));

    dup[1].name = "SubmitJob";
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_server_new(&srv, &cfg, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "methods[1]"));

    cfg = server_cfg();
    cfg.tls.cert_path = SC_TEST_DATA_DIR "/rpc/server.pem";
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_server_new(&srv, &cfg, &err), SC_ERR_INVALID);
    cfg.tls.key_path = SC_TEST_DATA_DIR "/rpc/missing.key";
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_server_new(&srv, &cfg, &err), SC_ERR_IO);
    assert_non_null(strstr(err.msg, "missing.key"));
    assert_null(srv);

    /* a port that is taken: the second server fails visibly */
    sc_rpc_server *first = NULL;
    cfg = server_cfg();
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_server_new(&first, &cfg, &err), SC_OK);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", sc_rpc_server_port(first));
    cfg.listen_addr = addr;
    assert_int_equal(sc_rpc_server_new(&srv, &cfg, &err), SC_ERR_UNAVAILABLE);
    assert_non_null(strstr(err.msg, addr));
    sc_rpc_server_destroy(&first);
    sc_rpc_server_destroy(&srv); /* NULL is fine */

    sc_rpc_client *cli = NULL;
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_client_new(&cli, "", NULL, &err), SC_ERR_INVALID);
    assert_int_equal(sc_rpc_client_new(&cli, "127.0.0.1:1", NULL, &err), SC_OK);
    Stagecraft__ListJobsRequest req = STAGECRAFT__LIST_JOBS_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_call(cli, M_SUBMIT, &req.base,
                                 &stagecraft__list_jobs_response__descriptor, &m, 0, &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "timeout_ms"));
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_call(cli, "SubmitJob", &req.base,
                                 &stagecraft__list_jobs_response__descriptor, &m, 100, &err),
                     SC_ERR_INVALID);
    sc_rpc_client_destroy(&cli);
    sc_rpc_client_destroy(&cli); /* NULL is fine */
}

static void test_tls(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    sc_rpc_server *srv = NULL;
    sc_rpc_server_cfg cfg = server_cfg();
    cfg.tls.cert_path = SC_TEST_DATA_DIR "/rpc/server.pem";
    cfg.tls.key_path = SC_TEST_DATA_DIR "/rpc/server.key";
    assert_int_equal(sc_rpc_server_new(&srv, &cfg, &err), SC_OK);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", sc_rpc_server_port(srv));

    sc_rpc_client_cfg ccfg = {.tls = {.ca_path = SC_TEST_DATA_DIR "/rpc/ca.pem"},
                              .tls_server_name = "localhost"};
    sc_rpc_client *cli = NULL;
    assert_int_equal(sc_rpc_client_new(&cli, target, &ccfg, &err), SC_OK);
    assert_submit_ok(cli);
    sc_rpc_client_destroy(&cli);

    /* plaintext to a TLS server gets no answer */
    assert_int_equal(sc_rpc_client_new(&cli, target, NULL, &err), SC_OK);
    sc_status rc = submit(cli, "{}", NULL, 2000, &err);
    assert_true(rc == SC_ERR_UNAVAILABLE || rc == SC_ERR_TIMEOUT);
    sc_rpc_client_destroy(&cli);
    sc_rpc_server_destroy(&srv);

    /* mutual TLS: a client without a certificate is refused, one with it served */
    cfg.tls.ca_path = SC_TEST_DATA_DIR "/rpc/ca.pem";
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_server_new(&srv, &cfg, &err), SC_OK);
    snprintf(target, sizeof target, "127.0.0.1:%d", sc_rpc_server_port(srv));
    assert_int_equal(sc_rpc_client_new(&cli, target, &ccfg, &err), SC_OK);
    rc = submit(cli, "{}", NULL, 2000, &err);
    assert_true(rc == SC_ERR_UNAVAILABLE || rc == SC_ERR_TIMEOUT);
    sc_rpc_client_destroy(&cli);
    ccfg.tls.cert_path = SC_TEST_DATA_DIR "/rpc/client.pem";
    ccfg.tls.key_path = SC_TEST_DATA_DIR "/rpc/client.key";
    assert_int_equal(sc_rpc_client_new(&cli, target, &ccfg, &err), SC_OK);
    assert_submit_ok(cli);
    sc_rpc_client_destroy(&cli);
    sc_rpc_server_destroy(&srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_tables),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_method, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oversized_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_version_mismatch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handler_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resp_free, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hung_handler_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_waits_for_call_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_cancels_after_grace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_with_call_in_flight, setup, teardown),
        cmocka_unit_test(test_nothing_listening),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_tls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
