/*
 * A real `stagecraft coordinator` process fed bad wire input: malformed bytes, an oversized
 * message, another protocol version, an unknown method, a registration with bad fields. Each is
 * refused with the right gRPC status, and the coordinator keeps answering. On the control
 * channel: messages bound to the sender's CURVE key, commands sent only on the connection of the
 * key that registered the worker, and none acted on from a worker declared dead.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "proto/sc_control.h"
#include "proto/sc_rpc.h"
#include "proto/sc_wire.h"

typedef struct {
    pid_t pid;
    char dir[64];
    char target[64];
    char token[128];
    sc_rpc_client *cli;
} fixture;

/* start_fast: heartbeats every 100 ms, dead after 4 missed, and the coordinator's debug log */
static bool g_fast;

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
        char log_path[128]; /* its log, for the checks that read it */
        snprintf(log_path, sizeof log_path, "%s/coordinator.log", f->dir);
        int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (log_fd >= 0)
            dup2(log_fd, 2);
        char state_dir[128];
        snprintf(state_dir, sizeof state_dir, "%s/state", f->dir);
        if (g_fast) {
            setenv("STAGECRAFT_LOG", "debug", 1);
            execl(SC_STAGECRAFT_BIN, "stagecraft", "coordinator", "--listen", "127.0.0.1:0",
                  "--state", state_dir, "--heartbeat-ms", "100", "--suspect-after", "2",
                  "--dead-after", "4", (char *)NULL);
        }
        execl(SC_STAGECRAFT_BIN, "stagecraft", "coordinator", "--listen", "127.0.0.1:0", "--state",
              state_dir, (char *)NULL);
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

static int start_fast(void **state)
{
    g_fast = true;
    int rc = start(state);
    g_fast = false;
    return rc;
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

/* The join token the coordinator generated into its state folder. */
static void read_join_token(const fixture *f, char join[128])
{
    char path[160];
    snprintf(path, sizeof path, "%s/state/join.token", f->dir);
    FILE *t = fopen(path, "r");
    assert_non_null(t);
    assert_int_equal(fscanf(t, "%127s", join), 1);
    fclose(t);
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
                                 &stagecraft__list_workers_response__descriptor, &resp, 5000, &err),
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
    char join[128];
    read_join_token(f, join);
    reg.join_token = join;
    /* names `stagecraft worker --name` refuses are refused here too: none, a path, a forged log
     * line with a terminal escape, a hidden name, a space, one too long */
    static const char *const bad_names[] = {"", "../x", "w\n[INFO] forged\x1b[2J", ".hidden",
                                            "a b"};
    char long_name[SC_WIRE_MAX_WORKER_NAME + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    for (int i = 0; i <= 5; i++) {
        reg.name = (char *)(i < 5 ? bad_names[i] : long_name);
        sc_err_clear(&err);
        assert_int_equal(sc_rpc_call(f->cli, "/stagecraft.Coordinator/RegisterWorker", &reg.base,
                                     &stagecraft__register_worker_response__descriptor, &resp, 5000,
                                     &err),
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

/* Registers a worker named `name` with a new CURVE key pair; fills its id, the control endpoint
 * and the DEALER's CURVE settings (keys in `pub`, `sec`, `server`). */
static void register_curve_worker(fixture *f, const char *name, char id[64], char endpoint[300],
                                  char pub[41], char sec[41], char server[41])
{
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_ctl_curve_keypair(pub, sec, &err), SC_OK);
    uint8_t raw[32];
    assert_non_null(zmq_z85_decode(raw, pub));
    char join[128];
    read_join_token(f, join);
    Stagecraft__RegisterWorkerRequest reg = STAGECRAFT__REGISTER_WORKER_REQUEST__INIT;
    reg.name = (char *)name;
    reg.join_token = join;
    reg.worker_endpoint = "127.0.0.1:1";
    reg.curve_public_key.data = raw;
    reg.curve_public_key.len = 32;
    ProtobufCMessage *m = NULL;
    assert_int_equal(sc_rpc_call(f->cli, "/stagecraft.Coordinator/RegisterWorker", &reg.base,
                                 &stagecraft__register_worker_response__descriptor, &m, 5000, &err),
                     SC_OK);
    Stagecraft__RegisterWorkerResponse *r = (void *)m;
    snprintf(id, 64, "%s", r->worker_id);
    snprintf(endpoint, 300, "%s", r->control_endpoint);
    assert_int_equal(r->server_curve_public_key.len, 32);
    assert_non_null(zmq_z85_encode(server, r->server_curve_public_key.data, 32));
    protobuf_c_message_free_unpacked(m, NULL);
}

/* A heartbeat as worker `id` (epoch 1) on `ctl`; whether an ack came back within `wait_ms`. */
static bool heartbeat_acked(sc_ctl *ctl, const char *id, int wait_ms)
{
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Heartbeat hb = STAGECRAFT__HEARTBEAT__INIT;
    hb.state = "idle";
    hb.job_id = "";
    env.worker_id = (char *)id;
    env.epoch = 1;
    env.seq = 1;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_ctl_send(ctl, NULL, &env, &err), SC_OK);
    char peer[SC_CTL_PEER_ID_MAX];
    Stagecraft__ControlEnvelope *got = NULL;
    bool acked = false;
    while (!acked && sc_ctl_recv(ctl, wait_ms, peer, &got, &err) == SC_OK) {
        acked = got->body_case == STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT_ACK;
        sc_ctl_envelope_free(&got);
    }
    return acked;
}

/* A peer that holds the join token registers its own CURVE key, then connects under another
 * worker's id: the coordinator holds every control message to the key its sender authenticated
 * with, so it neither takes the heartbeat as the other worker's nor answers it (an answer, like
 * that worker's commands, would go to the impostor). Under its own id the same key is answered. */
static void test_control_bound_to_key(void **state)
{
    fixture *f = *state;
    if (!sc_ctl_curve_available())
        skip();
    char victim[64], imp[64], endpoint[300], ep2[300];
    char vpub[41], vsec[41], ipub[41], isec[41], server[41];
    register_curve_worker(f, "victim", victim, endpoint, vpub, vsec, server);
    register_curve_worker(f, "impostor", imp, ep2, ipub, isec, server);
    sc_err err;
    sc_err_clear(&err);
    sc_ctl *own = NULL, *forged = NULL;
    sc_ctl_cfg cfg = {.routing_id = imp,
                      .curve_secret_key = isec,
                      .curve_public_key = ipub,
                      .curve_server_key = server};
    assert_int_equal(sc_ctl_dealer_new(&own, endpoint, &cfg, &err), SC_OK);
    assert_true(heartbeat_acked(own, imp, 10000)); /* its own id: answered */
    cfg.routing_id = victim;
    assert_int_equal(sc_ctl_dealer_new(&forged, endpoint, &cfg, &err), SC_OK);
    assert_false(heartbeat_acked(forged, victim, 2000));
    sc_ctl_destroy(&forged);
    sc_ctl_destroy(&own);

    /* the accepted peer floods the control socket with garbage: a few lines are logged, not
     * one per frame. A heartbeat behind the garbage on the same connection is answered once
     * all of it was read. */
    void *zctx = zmq_ctx_new(), *raw = zmq_socket(zctx, ZMQ_DEALER);
    assert_int_equal(zmq_setsockopt(raw, ZMQ_ROUTING_ID, imp, strlen(imp)), 0);
    assert_int_equal(zmq_setsockopt(raw, ZMQ_CURVE_SERVERKEY, server, 40), 0);
    assert_int_equal(zmq_setsockopt(raw, ZMQ_CURVE_PUBLICKEY, ipub, 40), 0);
    assert_int_equal(zmq_setsockopt(raw, ZMQ_CURVE_SECRETKEY, isec, 40), 0);
    assert_int_equal(zmq_connect(raw, endpoint), 0);
    const uint8_t junk[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x41};
    for (int i = 0; i < 200; i++)
        assert_int_equal(zmq_send(raw, junk, sizeof junk, 0), (int)sizeof junk);
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Heartbeat hb = STAGECRAFT__HEARTBEAT__INIT;
    hb.state = "idle";
    hb.job_id = "";
    env.worker_id = imp;
    env.epoch = 1;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    uint8_t *frame = NULL;
    size_t frame_len = 0;
    assert_int_equal(sc_wire_pack(&env.base, &frame, &frame_len, &err), SC_OK);
    assert_int_equal(zmq_send(raw, frame, frame_len, 0), (int)frame_len);
    free(frame);
    int timeout_ms = 30000;
    zmq_setsockopt(raw, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    uint8_t buf[256];
    assert_true(zmq_recv(raw, buf, sizeof buf, 0) > 0); /* the ack */
    zmq_close(raw);
    zmq_ctx_term(zctx);
    char log_path[160], line[1024];
    snprintf(log_path, sizeof log_path, "%s/coordinator.log", f->dir);
    FILE *log = fopen(log_path, "r");
    assert_non_null(log);
    int dropped = 0;
    while (fgets(line, sizeof line, log))
        dropped += strstr(line, "dropped a control frame") != NULL;
    fclose(log);
    assert_true(dropped >= 1 && dropped <= 21); /* 10 a window of 10 s, not 200 */
    assert_alive(f);
}

/* Sends `env` on `ctl` and reads what comes back for up to `wait_ms`: whether an envelope of
 * body `want` arrived (its copy in *got when got is not NULL, else freed). */
static bool answered(sc_ctl *ctl, Stagecraft__ControlEnvelope *env,
                     Stagecraft__ControlEnvelope__BodyCase want, int wait_ms,
                     Stagecraft__ControlEnvelope **got)
{
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_ctl_send(ctl, NULL, env, &err), SC_OK);
    char peer[SC_CTL_PEER_ID_MAX];
    Stagecraft__ControlEnvelope *in = NULL;
    while (sc_ctl_recv(ctl, wait_ms, peer, &in, &err) == SC_OK) {
        if (in->body_case == want) {
            if (got != NULL)
                *got = in;
            else
                sc_ctl_envelope_free(&in);
            return true;
        }
        sc_ctl_envelope_free(&in);
    }
    return false;
}

/* The state ListWorkers gives worker `id`, polled until it is `want` (false after wait_ms). */
static bool wait_worker_state(fixture *f, const char *id, Stagecraft__WorkerState want, int wait_ms)
{
    for (int waited = 0; waited <= wait_ms; waited += 100) {
        Stagecraft__ListWorkersRequest req = STAGECRAFT__LIST_WORKERS_REQUEST__INIT;
        ProtobufCMessage *m = NULL;
        sc_err err;
        sc_err_clear(&err);
        assert_int_equal(sc_rpc_call(f->cli, "/stagecraft.Coordinator/ListWorkers", &req.base,
                                     &stagecraft__list_workers_response__descriptor, &m, 5000,
                                     &err),
                         SC_OK);
        Stagecraft__ListWorkersResponse *r = (void *)m;
        bool there = false;
        for (size_t i = 0; i < r->n_workers; i++)
            there |= strcmp(r->workers[i]->id, id) == 0 && r->workers[i]->state == want;
        protobuf_c_message_free_unpacked(m, NULL);
        if (there)
            return true;
        usleep(100 * 1000);
    }
    return false;
}

/* Whether the coordinator's log gets a line holding `needle` within wait_ms. */
static bool log_has(fixture *f, const char *needle, int wait_ms)
{
    char log_path[160], line[1024];
    snprintf(log_path, sizeof log_path, "%s/coordinator.log", f->dir);
    for (int waited = 0; waited <= wait_ms; waited += 100) {
        FILE *log = fopen(log_path, "r");
        bool found = false;
        while (log != NULL && !found && fgets(line, sizeof line, log))
            found = strstr(line, needle) != NULL;
        if (log != NULL)
            fclose(log);
        if (found)
            return true;
        usleep(100 * 1000);
    }
    return false;
}

/* A worker declared dead may keep its control connection (a ROUTER cannot close one peer's), but
 * the coordinator no longer acts on what comes on it: a message answered while the worker lived
 * (an "UNEXPECTED" error for a body a worker must not send) gets no answer once it is dead and
 * is logged as ignored; a heartbeat is answered "not known", which tells the worker to register
 * again. */
static void test_dead_worker_not_read(void **state)
{
    fixture *f = *state;
    if (!sc_ctl_curve_available())
        skip();
    char id[64], endpoint[300], pub[41], sec[41], server[41];
    register_curve_worker(f, "lazarus", id, endpoint, pub, sec, server);
    sc_err err;
    sc_err_clear(&err);
    sc_ctl *ctl = NULL;
    sc_ctl_cfg cfg = {.routing_id = id,
                      .curve_secret_key = sec,
                      .curve_public_key = pub,
                      .curve_server_key = server};
    assert_int_equal(sc_ctl_dealer_new(&ctl, endpoint, &cfg, &err), SC_OK);
    assert_true(heartbeat_acked(ctl, id, 10000));

    Stagecraft__ControlEnvelope odd = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__HeartbeatAck body = STAGECRAFT__HEARTBEAT_ACK__INIT;
    odd.worker_id = id;
    odd.epoch = 1;
    odd.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT_ACK;
    odd.heartbeat_ack = &body;
    assert_true(answered(ctl, &odd, STAGECRAFT__CONTROL_ENVELOPE__BODY_ERROR, 10000, NULL));

    /* silent for 4 intervals: dead */
    assert_true(wait_worker_state(f, id, STAGECRAFT__WORKER_STATE__WORKER_DEAD, 60000));
    assert_false(answered(ctl, &odd, STAGECRAFT__CONTROL_ENVELOPE__BODY_ERROR, 1500, NULL));
    assert_true(log_has(f, "ignored: it was declared dead and must register again", 10000));

    Stagecraft__ControlEnvelope hb_env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Heartbeat hb = STAGECRAFT__HEARTBEAT__INIT;
    hb.state = "idle";
    hb.job_id = "";
    hb_env.worker_id = id;
    hb_env.epoch = 1;
    hb_env.seq = 2;
    hb_env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT;
    hb_env.heartbeat = &hb;
    Stagecraft__ControlEnvelope *ack = NULL;
    assert_true(
        answered(ctl, &hb_env, STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT_ACK, 10000, &ack));
    assert_false(ack->heartbeat_ack->known);
    sc_ctl_envelope_free(&ack);
    assert_true(wait_worker_state(f, id, STAGECRAFT__WORKER_STATE__WORKER_DEAD, 0));
    sc_ctl_destroy(&ctl);
    assert_alive(f);
}

/* Sends a heartbeat as worker `id` (epoch 1, serving `job`) on `ctl`, then reads what comes
 * back until nothing has for `wait_ms`: counts the commands in *commands and the acks in
 * *acks. */
static void heartbeat_and_read(sc_ctl *ctl, const char *id, const char *job, int wait_ms,
                               int *commands, int *acks)
{
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Heartbeat hb = STAGECRAFT__HEARTBEAT__INIT;
    hb.state = "running";
    hb.job_id = (char *)job;
    env.worker_id = (char *)id;
    env.epoch = 1;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    sc_err err;
    sc_err_clear(&err);
    sc_ctl_send(ctl, NULL, &env, &err);
    char peer[SC_CTL_PEER_ID_MAX];
    Stagecraft__ControlEnvelope *in = NULL;
    while (sc_ctl_recv(ctl, wait_ms, peer, &in, &err) == SC_OK) {
        *commands += in->body_case == STAGECRAFT__CONTROL_ENVELOPE__BODY_COMMAND;
        *acks += in->body_case == STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT_ACK;
        sc_ctl_envelope_free(&in);
    }
}

/* A peer that holds the join token registers its own CURVE key and connects with the very
 * routing id of a live worker's connection, claiming to be that worker. Nothing meant for the
 * worker reaches it: the worker says it runs a stage of a job that does not exist, so the
 * coordinator sends it STOP again and again, and every STOP arrives on the worker's own
 * connection, which keeps being answered; the impostor gets no command. */
static void test_commands_follow_the_key(void **state)
{
    fixture *f = *state;
    if (!sc_ctl_curve_available())
        skip();
    char victim[64], imp[64], endpoint[300], ep2[300];
    char vpub[41], vsec[41], ipub[41], isec[41], server[41];
    register_curve_worker(f, "holder", victim, endpoint, vpub, vsec, server);
    register_curve_worker(f, "thief", imp, ep2, ipub, isec, server);
    sc_err err;
    sc_err_clear(&err);
    sc_ctl *real = NULL, *forged = NULL;
    sc_ctl_cfg cfg = {.routing_id = victim,
                      .curve_secret_key = vsec,
                      .curve_public_key = vpub,
                      .curve_server_key = server};
    assert_int_equal(sc_ctl_dealer_new(&real, endpoint, &cfg, &err), SC_OK);
    assert_true(heartbeat_acked(real, victim, 10000));
    cfg.curve_secret_key = isec;
    cfg.curve_public_key = ipub;
    assert_int_equal(sc_ctl_dealer_new(&forged, endpoint, &cfg, &err), SC_OK);
    int real_cmds = 0, real_acks = 0, forged_cmds = 0, forged_acks = 0;
    /* until the worker got two STOPs: the impostor had as many chances to get one (bounded so a
     * coordinator that never sends one fails instead of hanging) */
    for (int round = 0; round < 600 && real_cmds < 2; round++) {
        heartbeat_and_read(real, victim, "job-never-submitted", 50, &real_cmds, &real_acks);
        heartbeat_and_read(forged, victim, "job-never-submitted", 0, &forged_cmds, &forged_acks);
    }
    print_message("worker: %d command(s), %d ack(s); impostor: %d command(s), %d ack(s)\n",
                  real_cmds, real_acks, forged_cmds, forged_acks);
    assert_true(real_cmds >= 2);
    assert_int_equal(forged_cmds, 0);
    assert_int_equal(forged_acks, 0);
    real_acks = 0;
    heartbeat_and_read(real, victim, "", 2000, &real_cmds, &real_acks);
    assert_int_equal(real_acks, 1); /* its connection was never displaced */
    sc_ctl_destroy(&forged);
    sc_ctl_destroy(&real);
    assert_alive(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_malformed_and_oversized, start, stop),
        cmocka_unit_test_setup_teardown(test_version_and_fields, start, stop),
        cmocka_unit_test_setup_teardown(test_control_bound_to_key, start, stop),
        cmocka_unit_test_setup_teardown(test_dead_worker_not_read, start_fast, stop),
        cmocka_unit_test_setup_teardown(test_commands_follow_the_key, start_fast, stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
