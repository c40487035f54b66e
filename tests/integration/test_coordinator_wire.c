/*
 * A real `stagecraft coordinator` process fed bad wire input: malformed bytes, an oversized
 * message, another protocol version, an unknown method, a registration with bad fields. Each is
 * refused with the right gRPC status, and the coordinator keeps answering.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto/sc_rpc.h"
#include "proto/sc_wire.h"

typedef struct {
    pid_t pid;
    char dir[64];
    char target[64];
    char token[128];
    sc_rpc_client *cli;
} fixture;

static int start(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/sc_wire_XXXXXX");
    if (mkdtemp(f->dir) == NULL)
        return -1;
    int out[2];
    if (pipe(out) != 0)
        return -1;
    f->pid = fork();
    if (f->pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        char state_dir[128];
        snprintf(state_dir, sizeof state_dir, "%s/state", f->dir);
        execl(SC_STAGECRAFT_BIN, "stagecraft", "coordinator", "--listen", "127.0.0.1:0",
              "--state", state_dir, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    FILE *in = fdopen(out[0], "r");
    char line[256];
    int port = 0;
    while (port == 0 && fgets(line, sizeof line, in))
        sscanf(line, "coordinator listening on port %d", &port);
    fclose(in);
    if (port == 0)
        return -1;
    snprintf(f->target, sizeof f->target, "127.0.0.1:%d", port);
    char path[160];
    snprintf(path, sizeof path, "%s/state/client.token", f->dir);
    FILE *t = fopen(path, "r");
    if (t == NULL || fscanf(t, "%127s", f->token) != 1)
        return -1;
    fclose(t);
    sc_err err;
    sc_err_clear(&err);
    if (sc_rpc_client_new(&f->cli, f->target, NULL, &err) != SC_OK)
        return -1;
    *state = f;
    return 0;
}

static int stop(void **state)
{
    fixture *f = *state;
    sc_rpc_client_destroy(&f->cli);
    kill(f->pid, SIGTERM);
    int status = 0;
    waitpid(f->pid, &status, 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    int rc = system(cmd);
    free(f);
    /* a clean exit on SIGTERM */
    return rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* The coordinator still answers a well-formed call. */
static void assert_alive(fixture *f)
{
    Stagecraft__ListJobsRequest req = STAGECRAFT__LIST_JOBS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_call(f->cli, "/stagecraft.Coordinator/ListJobs", &req.base,
                                 &stagecraft__list_jobs_response__descriptor, &resp, 5000, &err),
                     SC_OK);
    protobuf_c_message_free_unpacked(resp, NULL);
}

static void test_malformed_and_oversized(void **state)
{
    fixture *f = *state;
    sc_err err;
    uint8_t *out = NULL;
    size_t out_len = 0;
    const uint8_t garbage[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x41};
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_call_raw(f->cli, "/stagecraft.Coordinator/SubmitJob", garbage,
                                     sizeof garbage, &out, &out_len, 5000, &err),
                     SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "INVALID_ARGUMENT"));
    assert_non_null(strstr(err.msg, "SubmitJobRequest"));
    assert_alive(f);

    size_t big = 6u << 20; /* over the 4 MiB default limit */
    uint8_t *payload = calloc(1, big);
    sc_rpc_client *wide = NULL;
    sc_rpc_client_cfg cfg = {.max_message_bytes = 16u << 20};
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_client_new(&wide, f->target, &cfg, &err), SC_OK);
    assert_int_equal(sc_rpc_call_raw(wide, "/stagecraft.Coordinator/SubmitJob", payload, big, &out,
                                     &out_len, 5000, &err),
                     SC_ERR_TOO_LARGE);
    assert_non_null(strstr(err.msg, "RESOURCE_EXHAUSTED"));
    sc_rpc_client_destroy(&wide);
    free(payload);
    assert_alive(f);

    sc_err_clear(&err);
    assert_int_not_equal(sc_rpc_call_raw(f->cli, "/stagecraft.Coordinator/Nope", garbage,
                                         sizeof garbage, &out, &out_len, 5000, &err),
                         SC_OK);
    assert_non_null(strstr(err.msg, "UNIMPLEMENTED"));
    assert_alive(f);
}

static void test_version_and_fields(void **state)
{
    fixture *f = *state;
    sc_err err;
    ProtobufCMessage *resp = NULL;

    Stagecraft__ListWorkersRequest lw = STAGECRAFT__LIST_WORKERS_REQUEST__INIT;
    Stagecraft__Header old = STAGECRAFT__HEADER__INIT;
    old.protocol_version = SC_PROTOCOL_VERSION + 41;
    lw.header = &old;
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_call(f->cli, "/stagecraft.Coordinator/ListWorkers", &lw.base,
                                 &stagecraft__list_workers_response__descriptor, &resp, 5000,
                                 &err),
                     SC_ERR_VERSION);
    char want[32];
    snprintf(want, sizeof want, "version %d", SC_PROTOCOL_VERSION + 41);
    assert_non_null(strstr(err.msg, want));

    /* a registration with no join token, then one with the token but no name */
    Stagecraft__RegisterWorkerRequest reg = STAGECRAFT__REGISTER_WORKER_REQUEST__INIT;
    reg.name = "x";
    reg.worker_endpoint = "127.0.0.1:1";
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_call(f->cli, "/stagecraft.Coordinator/RegisterWorker", &reg.base,
                                 &stagecraft__register_worker_response__descriptor, &resp, 5000,
                                 &err),
                     SC_ERR_PERMISSION);
    char join_path[160], join[128] = "";
    snprintf(join_path, sizeof join_path, "%s/state/join.token", f->dir);
    FILE *t = fopen(join_path, "r");
    assert_non_null(t);
    assert_int_equal(fscanf(t, "%127s", join), 1);
    fclose(t);
    reg.join_token = join;
    reg.name = "";
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_call(f->cli, "/stagecraft.Coordinator/RegisterWorker", &reg.base,
                                 &stagecraft__register_worker_response__descriptor, &resp, 5000,
                                 &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "worker name"));
    /* names `stagecraft worker --name` refuses are refused here too: a path, a forged log
     * line with a terminal escape, a hidden name, one too long */
    static const char *const bad_names[] = {"../x", "w\n[INFO] forged\x1b[2J", ".hidden", "a b",
                                            NULL};
    char long_name[SC_WIRE_MAX_WORKER_NAME + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    for (int i = 0; i <= 4; i++) {
        reg.name = (char *)(i < 4 ? bad_names[i] : long_name);
        sc_err_clear(&err);
        assert_int_equal(sc_rpc_call(f->cli, "/stagecraft.Coordinator/RegisterWorker", &reg.base,
                                     &stagecraft__register_worker_response__descriptor, &resp,
                                     5000, &err),
                         SC_ERR_INVALID);
        assert_non_null(strstr(err.msg, "worker name refused"));
        assert_null(strchr(err.msg, '\x1b'));
    }

    /* a job spec that is not JSON, with the client token */
    Stagecraft__SubmitJobRequest sub = STAGECRAFT__SUBMIT_JOB_REQUEST__INIT;
    Stagecraft__Header hdr = STAGECRAFT__HEADER__INIT;
    hdr.token = f->token;
    sub.header = &hdr;
    sub.job_json = "{\"format\": \"stagecraft-job\", \"version\": 1, \"name\": ";
    sc_err_clear(&err);
    assert_int_equal(sc_rpc_call(f->cli, "/stagecraft.Coordinator/SubmitJob", &sub.base,
                                 &stagecraft__submit_job_response__descriptor, &resp, 5000, &err),
                     SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "job:1:"));
    assert_alive(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_malformed_and_oversized, start, stop),
        cmocka_unit_test_setup_teardown(test_version_and_fields, start, stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
