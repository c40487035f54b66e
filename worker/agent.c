/*
 * Worker agent (see agent.h). The control loop is a small state machine:
 *   unregistered --RegisterWorker ok--> registered (DEALER connected, heartbeating)
 *   registered --ack says unknown / no ack for dead_after intervals--> unregistered (backoff)
 *   registered --FENCED for its current epoch--> stop: a newer incarnation owns the id.
 * Silence is counted only while the loop runs (a stopped or starved process does not take its
 * own pause for the coordinator's), and a FENCED about an older epoch's heartbeat is ignored.
 * Registration failures that retrying cannot fix (wrong join token, name taken) end the run.
 * A stop asked of the process (SIGTERM, SIGINT) while registered ends with a heartbeat that says
 * "leaving", so that the coordinator re-plans its job at once instead of waiting for silence.
 */
#include "worker/agent.h"
#include "worker/report_steps.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "kernels/threads_cpu.h"
#include "proto/sc_control.h"
#include "proto/sc_wire.h"
#include "worker/blocks/block_server.h"
#include "worker/hardware.h"
#include "worker/service.h"
#include "worker/trainer.h"

#define LOG "worker"
/* how long a stopping worker waits for its stopped stages to end before it exits anyway */
#define STOP_WAIT_MS 3000
/* A worker registers again after DEAD_AFTER_INTERVALS heartbeat intervals without an ack, and
 * never sooner than SILENCE_MIN_MS: with short intervals a coordinator held up for a second by a
 * busy machine would otherwise see its workers register again (each with a new epoch) although
 * it declared none dead. One that did declare it dead answers its next heartbeat "not known",
 * which makes it register again at once. */
#define DEAD_AFTER_INTERVALS 5
#define SILENCE_MIN_MS 5000ull
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 5000
#define REPORT_EVERY_MS 50

/* A trainer message kept by the agent (owned), with the trainer generation
 * (wk_state.trainer_gen) and job it came from. */
typedef struct {
    bool has;
    wk_trainer_msg m;
    uint64_t gen;
    char job[COORD_WORKER_ID_MAX];
} kept_msg;

static void kept_set(kept_msg *k, wk_trainer_msg *m, uint64_t gen, const char *job)
{
    if (k->has)
        wk_trainer_msg_clear(&k->m);
    k->m = *m; /* takes what m owns */
    memset(m, 0, sizeof *m);
    k->gen = gen;
    sc_strlcpy(k->job, job, sizeof k->job);
    k->has = true;
}

static void kept_clear(kept_msg *k)
{
    if (k->has)
        wk_trainer_msg_clear(&k->m);
    k->has = false;
}

struct wk_agent {
    char coordinator[256];
    char name[128];
    char device[32];
    char join_token[256];
    char id_path[1200];
    int lock_fd; /* STATE/worker-NAME.lock, held locked (flock) until destroy; -1 when not open */
    char endpoint[300]; /* this worker's service as the coordinator should dial it */
    uint32_t rpc_timeout_ms;

    wk_state shared; /* guarded by shared.lock; also used by the Worker service */
    sc_rpc_server *rpc;
    sc_rpc_client *coord;
    sc_ctl *ctl; /* owned by the thread in wk_agent_run */
    char control_endpoint[300];
    char curve_public[SC_CTL_KEY_Z85_LEN + 1]; /* this worker's key pair, new each start; */
    char curve_secret[SC_CTL_KEY_Z85_LEN + 1]; /* "" when libzmq has no CURVE */
    uint8_t curve_public_raw[32];
    uint32_t heartbeat_ms;
    uint64_t seq;
    /* Fault injection for tests of the coordinator's repairs: STAGECRAFT_WORKER_FAULTS lists
     * "drop-start" and/or "drop-stop" (comma-separated): the first START / STOP command is
     * ignored, as if the network had lost it; "drop-reports": iteration reports go out only
     * as the repeats that follow heartbeats (repeat_last_report); "drop-errors": the first
     * error of a trainer is lost, and only its repeats go out; "stale-heartbeat": the first
     * heartbeat after a registration of epoch 2 or more carries the epoch before, as one sent
     * just before the worker registered again would, so the coordinator refuses it (FENCED
     * about that older epoch); "refuse-probe" (wk_state.refuse_probe): every ProbeLink call is
     * refused, as by a worker that does not have the method; "die-on-move": the worker kills
     * itself when told to pause for a move (COMMAND_REBALANCE), as if lost mid-move;
     * "hang-stage" (wk_state.hang_stage): each stage hangs in its fourth step, deaf to stop,
     * until the worker gets SIGUSR2, as a step stuck in a kernel would; "slow-profile"
     * (wk_state.slow_profile): the first profile measures for an hour unless cancelled, as
     * a huge model's would. */
    bool drop_start, drop_stop, drop_reports, drop_errors, stale_heartbeat, die_on_move;
    /* What the trainer last said, kept to be said again: its newest iteration report (sent at
     * most every REPORT_EVERY_MS, since a small model steps thousands of times a second and a
     * report each buried the heartbeats in the coordinator's queue; repeated with a heartbeat
     * after which no newer one went out, so a lost final report cannot leave its job running)
     * and the error that stopped it (repeated with every heartbeat; the coordinator acts on it
     * once, for the run it names). Both only while the worker holds that trainer. */
    kept_msg last, failed;
    wk_report_steps steps;     /* the steps since the last report sent, to go with the next */
    bool last_pending;         /* `last` has not gone out yet */
    bool sent_since_heartbeat; /* a report went out since the previous heartbeat */
    uint64_t last_sent_ns;
};

/* ---- id file -------------------------------------------------------------------------------- */

static void load_id(wk_agent *a)
{
    FILE *f = fopen(a->id_path, "r");
    if (f == NULL)
        return;
    char id[COORD_WORKER_ID_MAX];
    unsigned long long epoch;
    if (fscanf(f, "%63s %llu", id, &epoch) == 2) {
        sc_strlcpy(a->shared.id, id, sizeof a->shared.id);
        a->shared.epoch = epoch;
    }
    fclose(f);
}

static void save_id(wk_agent *a)
{
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp", a->id_path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        SC_LOG_WARN(LOG, "cannot write %s: %s (a restart will register as new)", tmp,
                    strerror(errno));
        return;
    }
    fprintf(f, "%s %llu\n", a->shared.id, (unsigned long long)a->shared.epoch);
    if (fclose(f) != 0 || rename(tmp, a->id_path) != 0)
        SC_LOG_WARN(LOG, "cannot write %s: %s", a->id_path, strerror(errno));
}

/* Takes the exclusive lock of this worker's name in its state folder. Two processes with the same
 * name and folder would share the id file, register under the same id and fence each other in
 * turn; the lock makes the second one stop before it registers. flock is released by the kernel
 * when the process ends however it ends, so a crashed worker leaves no stale lock. */
static sc_status lock_name(wk_agent *a, const char *dir, sc_err *err)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/worker-%s.lock", dir, a->name);
    long holder = 0;
    sc_status rc = sc_lock_file(path, &a->lock_fd, &holder, err);
    if (rc == SC_ERR_EXISTS) { /* say it in this daemon's words */
        sc_err_clear(err);
        char pid[40] = "";
        if (holder > 0)
            snprintf(pid, sizeof pid, "pid %ld; ", holder);
        return SC_ERRF(err, SC_ERR_EXISTS,
                       "worker '%s' in state folder %s: another worker process holds %s (%ssame "
                       "--name and --state); stop it, or give this one another --name or --state",
                       a->name, dir, path, pid);
    }
    return rc;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

static void default_name(char *out, size_t size, const char *device)
{
    char host[200] = "worker";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(out, size, "%s-%s", host, device);
    for (char *p = out; *p; p++)
        if (*p == ':')
            *p = '-';
}

static void release_hang(int sig)
{
    (void)sig;
    wk_trainer_fault_release();
}

/* STAGECRAFT_WORKER_FAULTS: a comma-separated list of the faults to inject (struct wk_agent). */
static sc_status parse_faults(wk_agent *a, const char *list, sc_err *err)
{
    static const char *const names[] = {"drop-start",  "drop-stop",       "drop-reports",
                                        "drop-errors", "stale-heartbeat", "refuse-probe",
                                        "die-on-move", "hang-stage",      "slow-profile"};
    bool *flags[] = {&a->drop_start,  &a->drop_stop,         &a->drop_reports,
                     &a->drop_errors, &a->stale_heartbeat,   &a->shared.refuse_probe,
                     &a->die_on_move, &a->shared.hang_stage, &a->shared.slow_profile};
    enum { N_FAULTS = sizeof names / sizeof names[0] };
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        size_t i = 0;
        while (i < N_FAULTS && !(strlen(names[i]) == len && strncmp(p, names[i], len) == 0))
            i++;
        if (i == N_FAULTS)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "STAGECRAFT_WORKER_FAULTS: unknown fault '%.*s'; valid: drop-start, "
                           "drop-stop, drop-reports, drop-errors, stale-heartbeat, refuse-probe, "
                           "die-on-move, hang-stage, slow-profile, separated by commas",
                           (int)(len > 40 ? 40 : len), p);
        *flags[i] = true;
        p += len + (p[len] == ',');
    }
    if (a->shared.hang_stage) /* SIGUSR2 wakes the hung stage */
        signal(SIGUSR2, release_hang);
    return SC_OK;
}

sc_status wk_agent_new(wk_agent **out, const wk_agent_cfg *cfg, sc_err *err)
{
    *out = NULL;
    const char *listen = cfg->listen_addr ? cfg->listen_addr : "127.0.0.1:0";
    char host[256];
    SC_CHECK(sc_parse_hostport(cfg->coordinator, false, "--coordinator", NULL, 0, NULL, err));
    SC_CHECK(sc_parse_hostport(listen, true, "--listen", host, sizeof host, NULL, err));
    if (cfg->join_token == NULL || cfg->join_token[0] == '\0')
        return SC_ERRF(err, SC_ERR_INVALID,
                       "a join token is required: set STAGECRAFT_JOIN_TOKEN or --join-token-file "
                       "(the coordinator writes one to its --state folder)");
    const char *device = cfg->device ? cfg->device : "cpu";
    bool is_cuda;
    int index;
    SC_CHECK(wk_device_parse(device, &is_cuda, &index, err));

    wk_agent *a = calloc(1, sizeof *a);
    SC_ALLOC_CHECK(a, err);
    sc_status rc = SC_OK;
    a->lock_fd = -1;
    pthread_mutex_init(&a->shared.lock, NULL);
    sc_strlcpy(a->coordinator, cfg->coordinator, sizeof a->coordinator);
    sc_strlcpy(a->device, device, sizeof a->device);
    sc_strlcpy(a->join_token, cfg->join_token, sizeof a->join_token);
    a->rpc_timeout_ms = cfg->rpc_timeout_ms ? cfg->rpc_timeout_ms : 5000;
    _Static_assert(sizeof a->name > SC_WIRE_MAX_WORKER_NAME, "the longest name must fit");
    /* a name too long is refused, never cut: the cut name is not the one a job spec lists */
    const char *name = cfg->name;
    if (name == NULL) {
        default_name(a->name, sizeof a->name, device);
        name = a->name;
    }
    if (!sc_wire_worker_name_valid(name)) {
        size_t len = strlen(name);
        rc = SC_ERRF(err, SC_ERR_INVALID,
                     "--name '%.40s%s' (%zu characters): use 1 to %d letters, digits, '-', '_' "
                     "or '.', not starting with '.'",
                     name, len > 40 ? "..." : "", len, SC_WIRE_MAX_WORKER_NAME);
        goto fail;
    }
    if (name != a->name)
        sc_strlcpy(a->name, name, sizeof a->name);
    const char *faults = getenv("STAGECRAFT_WORKER_FAULTS");
    if (faults != NULL && faults[0] != '\0') {
        if ((rc = parse_faults(a, faults, err)) != SC_OK)
            goto fail;
        SC_LOG_WARN(LOG, "STAGECRAFT_WORKER_FAULTS=%s: faults are injected on purpose (a test)",
                    faults);
    }
    sc_strlcpy(a->shared.device, device, sizeof a->shared.device);
    sc_strlcpy(a->shared.state, "idle", sizeof a->shared.state);

    const char *dir = cfg->state_dir ? cfg->state_dir : ".";
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        rc = SC_ERRF(err, SC_ERR_IO, "cannot create state folder %s: %s", dir, strerror(errno));
        goto fail;
    }
    SC_CHECK_GOTO(lock_name(a, dir, err), fail);
    snprintf(a->id_path, sizeof a->id_path, "%s/worker-%s.id", dir, a->name);
    snprintf(a->shared.checkpoint_dir, sizeof a->shared.checkpoint_dir, "%s/checkpoints", dir);
    load_id(a);

    SC_CHECK_GOTO(wk_hardware_report(device, true, &a->shared.hardware, err), fail);

    sc_rpc_server_cfg scfg = {.listen_addr = listen, .tls = cfg->tls};
    sc_rpc_method methods[WK_SERVICE_MAX_METHODS];
    size_t n = wk_service_methods(&a->shared, methods, WK_SERVICE_MAX_METHODS);
    scfg.methods = methods;
    scfg.n_methods = n;
    SC_CHECK_GOTO(sc_rpc_server_new(&a->rpc, &scfg, err), fail);

    if (cfg->advertise_host)
        sc_strlcpy(host, cfg->advertise_host, sizeof host);
    else if (strcmp(host, "0.0.0.0") == 0)
        sc_strlcpy(host, a->shared.hardware->hostname, sizeof host);
    snprintf(a->endpoint, sizeof a->endpoint, "%s:%d", host, sc_rpc_server_port(a->rpc));
    sc_strlcpy(a->shared.bind_host, host, sizeof a->shared.bind_host);
    SC_CHECK_GOTO(wk_block_server_start(&a->shared.blocks, host, a->shared.checkpoint_dir, err),
                  fail);
    a->shared.hardware->state_endpoint = strdup(wk_block_server_endpoint(a->shared.blocks));
    if (a->shared.hardware->state_endpoint == NULL) {
        a->shared.hardware->state_endpoint = (char *)protobuf_c_empty_string;
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        goto fail;
    }

    if (sc_ctl_curve_available()) {
        SC_CHECK_GOTO(sc_ctl_curve_keypair(a->curve_public, a->curve_secret, err), fail);
        zmq_z85_decode(a->curve_public_raw, a->curve_public);
    }
    sc_rpc_client_cfg ccfg = {.tls = cfg->tls};
    SC_CHECK_GOTO(sc_rpc_client_new(&a->coord, a->coordinator, &ccfg, err), fail);
    SC_LOG_INFO(LOG, "worker '%s' (%s, %s) serving on %s", a->name, device,
                a->shared.hardware->devices[0]->name, a->endpoint);
    if (strncmp(device, "cpu", 3) == 0) /* what its stages and profiles will run with */
        SC_LOG_INFO(LOG, "CPU kernels: %d threads (%d cores available to this process)",
                    kn_cpu_threads(), kn_cpu_cores_available());
    *out = a;
    return SC_OK;
fail:
    wk_agent_destroy(&a);
    return rc;
}

void wk_agent_destroy(wk_agent **ap)
{
    if (ap == NULL || *ap == NULL)
        return;
    wk_agent *a = *ap;
    if (a->rpc)
        sc_rpc_server_shutdown(a->rpc, 500);
    sc_rpc_server_destroy(&a->rpc);
    sc_rpc_client_destroy(&a->coord);
    sc_ctl_destroy(&a->ctl);
    kept_clear(&a->last);
    kept_clear(&a->failed);
    wk_hardware_free(&a->shared.hardware);
    wk_state_stopping(&a->shared);
    wk_state_release(&a->shared, NULL, "worker stopping");
    wk_state_reap_wait(&a->shared, STOP_WAIT_MS);
    wk_block_server_stop(&a->shared.blocks);
    pthread_mutex_destroy(&a->shared.lock);
    if (a->lock_fd >= 0)
        close(a->lock_fd); /* releases the name's lock */
    free(a);
    *ap = NULL;
}

int wk_agent_port(const wk_agent *a)
{
    return sc_rpc_server_port(a->rpc);
}

/* ---- registration and heartbeats ------------------------------------------------------------ */

/* SC_OK: registered. SC_ERR_PERMISSION / SC_ERR_EXISTS / SC_ERR_INVALID: give up. Others: retry. */
/* The control routing id of a new CURVE connection: the worker id, '/', 16 random hex digits.
 * Falls back to the clock and pid where the kernel has no random bytes to give, which still
 * keeps it unique per connection. */
static void connection_route(const char *id, char *out, size_t n)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
        r = sc_clock_now_ns() ^ ((uint64_t)getpid() << 32);
    snprintf(out, n, "%s/%016llx", id, (unsigned long long)r);
}

static sc_status do_register(wk_agent *a, sc_err *err)
{
    Stagecraft__RegisterWorkerRequest req = STAGECRAFT__REGISTER_WORKER_REQUEST__INIT;
    req.name = a->name;
    req.join_token = a->join_token;
    req.hardware = a->shared.hardware;
    req.worker_endpoint = a->endpoint;
    if (a->curve_secret[0]) {
        req.curve_public_key.data = a->curve_public_raw;
        req.curve_public_key.len = 32;
    }
    pthread_mutex_lock(&a->shared.lock);
    char prev[COORD_WORKER_ID_MAX];
    sc_strlcpy(prev, a->shared.id, sizeof prev);
    req.previous_id = prev;
    req.epoch = a->shared.epoch;
    pthread_mutex_unlock(&a->shared.lock);

    ProtobufCMessage *m = NULL;
    SC_CHECK(sc_rpc_call(a->coord, "/stagecraft.Coordinator/RegisterWorker", &req.base,
                         &stagecraft__register_worker_response__descriptor, &m, a->rpc_timeout_ms,
                         err));
    Stagecraft__RegisterWorkerResponse *resp = (void *)m;
    pthread_mutex_lock(&a->shared.lock);
    sc_strlcpy(a->shared.id, resp->worker_id, sizeof a->shared.id);
    a->shared.epoch = resp->epoch;
    pthread_mutex_unlock(&a->shared.lock);
    sc_strlcpy(a->control_endpoint, resp->control_endpoint, sizeof a->control_endpoint);
    a->heartbeat_ms = resp->heartbeat_interval_ms ? resp->heartbeat_interval_ms : 1000;
    char server_key[SC_CTL_KEY_Z85_LEN + 1] = "";
    bool curve = resp->server_curve_public_key.len == 32 && a->curve_secret[0];
    if (curve)
        zmq_z85_encode(server_key, resp->server_curve_public_key.data, 32);
    protobuf_c_message_free_unpacked(m, NULL);
    save_id(a);

    sc_ctl_destroy(&a->ctl);
    char route[COORD_WORKER_ID_MAX + 24];
    sc_strlcpy(route, a->shared.id, sizeof route);
    sc_ctl_cfg ccfg = {.routing_id = route};
    if (curve) {
        ccfg.curve_secret_key = a->curve_secret;
        ccfg.curve_public_key = a->curve_public;
        ccfg.curve_server_key = server_key;
        /* under CURVE the first connection holding a routing id keeps it (sc_control.h): an id
         * no other peer can guess, so none can hold this worker's before it reconnects; the
         * coordinator learns it from this key's heartbeats */
        connection_route(a->shared.id, route, sizeof route);
    }
    SC_CHECK(sc_ctl_dealer_new(&a->ctl, a->control_endpoint, &ccfg, err));
    SC_LOG_INFO(LOG, "registered as %s (epoch %llu); control %s, heartbeat every %u ms",
                a->shared.id, (unsigned long long)a->shared.epoch, a->control_endpoint,
                a->heartbeat_ms);
    return SC_OK;
}

static void send_heartbeat(wk_agent *a)
{
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Heartbeat hb = STAGECRAFT__HEARTBEAT__INIT;
    double load[1] = {0};
    if (getloadavg(load, 1) == 1)
        hb.load = load[0];
    wk_state_reap(&a->shared); /* a stopped stage that still runs: "stuck" */
    pthread_mutex_lock(&a->shared.lock);
    char state[32], job[COORD_WORKER_ID_MAX], id[COORD_WORKER_ID_MAX];
    sc_strlcpy(state, a->shared.state, sizeof state);
    sc_strlcpy(job, a->shared.job_id, sizeof job);
    /* a profile for a job this worker holds no stage of yet: that job, so that a coordinator
     * for which it has ended says STOP (which cancels the profile) */
    if (job[0] == '\0' && a->shared.profile_job[0] != '\0' &&
        strcmp(a->shared.profile_job, "(none)") != 0)
        sc_strlcpy(job, a->shared.profile_job, sizeof job);
    sc_strlcpy(id, a->shared.id, sizeof id);
    env.epoch = a->shared.epoch;
    hb.step = a->shared.trainer ? wk_trainer_step(a->shared.trainer) : a->shared.step;
    pthread_mutex_unlock(&a->shared.lock);
    if (a->stale_heartbeat && env.epoch > 1) {
        a->stale_heartbeat = false;
        env.epoch--;
        SC_LOG_WARN(LOG, "fault injection: heartbeat sent with the earlier epoch %llu",
                    (unsigned long long)env.epoch);
    }
    hb.state = state;
    hb.job_id = job;
    env.worker_id = id;
    env.seq = ++a->seq;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    sc_err err;
    sc_err_clear(&err);
    if (sc_ctl_send(a->ctl, NULL, &env, &err) != SC_OK)
        SC_LOG_DEBUG(LOG, "heartbeat not sent: %s", err.msg);
}

/* An Error envelope about a job: the coordinator decides from `code` (an sc_status name)
 * whether to re-plan or to fail the job. */
static void send_error(wk_agent *a, const char *job_id, sc_status code, const char *msg,
                       uint64_t checkpoint_step, uint64_t intact_checkpoint_step, uint64_t run)
{
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Error e = STAGECRAFT__ERROR__INIT;
    char text[700];
    sc_strfmt(text, sizeof text, "job %s: %s", job_id, msg);
    e.code = (char *)sc_status_name(code);
    e.message = text;
    e.checkpoint_step = checkpoint_step;
    e.intact_checkpoint_step = intact_checkpoint_step;
    e.run = run;
    pthread_mutex_lock(&a->shared.lock);
    char id[COORD_WORKER_ID_MAX];
    sc_strlcpy(id, a->shared.id, sizeof id);
    env.epoch = a->shared.epoch;
    pthread_mutex_unlock(&a->shared.lock);
    env.worker_id = id;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_ERROR;
    env.error = &e;
    sc_err err;
    sc_err_clear(&err);
    if (sc_ctl_send(a->ctl, NULL, &env, &err) != SC_OK)
        SC_LOG_WARN(LOG, "error report not sent: %s", err.msg);
}

/* Whether the worker still holds the trainer `k` came from (its generation and job); fills the
 * worker's id and epoch for sending. Takes the shared lock. */
static bool still_holds(wk_agent *a, const kept_msg *k, char *id, uint64_t *epoch)
{
    pthread_mutex_lock(&a->shared.lock);
    bool holds = a->shared.trainer != NULL && a->shared.trainer_gen == k->gen &&
                 strcmp(a->shared.job_id, k->job) == 0;
    sc_strlcpy(id, a->shared.id, COORD_WORKER_ID_MAX);
    *epoch = a->shared.epoch;
    pthread_mutex_unlock(&a->shared.lock);
    return holds;
}

static void send_report(wk_agent *a, const char *id, uint64_t epoch)
{
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    env.worker_id = (char *)id;
    env.epoch = epoch;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_ITERATION_REPORT;
    env.iteration_report = &a->last.m.report;
    a->last.m.report.job_id = a->last.job;
    wk_report_steps_attach(&a->steps, &a->last.m.report);
    sc_err err;
    sc_err_clear(&err);
    if (sc_ctl_send(a->ctl, NULL, &env, &err) != SC_OK)
        SC_LOG_DEBUG(LOG, "report not sent: %s", err.msg);
    wk_report_steps_sent(&a->steps, &a->last.m.report);
}

static void send_failed(wk_agent *a)
{
    const wk_trainer_msg *m = &a->failed.m;
    send_error(a, a->failed.job, m->code, m->error, m->checkpoint_step, m->intact_checkpoint_step,
               m->run);
}

/* Sends `last` when it has not gone out yet. */
static void flush_last(wk_agent *a, const char *id, uint64_t epoch)
{
    if (!a->last_pending)
        return;
    a->last_pending = false;
    a->last_sent_ns = sc_clock_now_ns();
    if (a->drop_reports)
        return; /* fault injection: lost */
    send_report(a, id, epoch);
    a->sent_since_heartbeat = true;
}

/* Sends what the trainer queued: the newest iteration report (at most every REPORT_EVERY_MS;
 * the coordinator keeps only the newest figures) and, at once, the error that stopped it. */
static void send_reports(wk_agent *a)
{
    char id[COORD_WORKER_ID_MAX];
    uint64_t epoch = 0;
    for (;;) {
        wk_trainer_msg m;
        pthread_mutex_lock(&a->shared.lock);
        bool any = a->shared.trainer && wk_trainer_pop(a->shared.trainer, &m);
        char job[COORD_WORKER_ID_MAX];
        sc_strlcpy(job, a->shared.job_id, sizeof job);
        sc_strlcpy(id, a->shared.id, sizeof id);
        epoch = a->shared.epoch;
        uint64_t gen = a->shared.trainer_gen;
        pthread_mutex_unlock(&a->shared.lock);
        if (!any)
            break;
        if (m.is_error) {
            flush_last(a, id, epoch); /* the steps it reached, before why it stopped */
            kept_set(&a->failed, &m, gen, job);
            if (a->drop_errors) { /* fault injection: lost; the repeats bring it */
                a->drop_errors = false;
                SC_LOG_WARN(LOG, "fault injection: error of job %s not sent: %s", job,
                            a->failed.m.error);
            } else {
                send_failed(a);
            }
        } else {
            wk_report_steps_add(&a->steps, &m.report, gen, job);
            kept_set(&a->last, &m, gen, job);
            a->last_pending = true;
        }
    }
    if (a->last_pending && sc_clock_now_ns() - a->last_sent_ns >= REPORT_EVERY_MS * 1000000ull)
        flush_last(a, id, epoch);
}

/* With a heartbeat: the last report again when none went out since the previous heartbeat
 * (the coordinator keeps the highest step it heard, so a repeat changes nothing but a lost
 * last report), and the error that stopped the trainer; each while its trainer is still the
 * worker's. */
static void repeat_kept(wk_agent *a)
{
    char id[COORD_WORKER_ID_MAX];
    uint64_t epoch;
    bool fresh = a->sent_since_heartbeat || a->last_pending;
    a->sent_since_heartbeat = false;
    if (a->last.has && !fresh) {
        if (still_holds(a, &a->last, id, &epoch))
            send_report(a, id, epoch);
        else
            kept_clear(&a->last);
    }
    if (a->failed.has) {
        if (still_holds(a, &a->failed, id, &epoch))
            send_failed(a);
        else
            kept_clear(&a->failed);
    }
}

typedef enum { CTL_OK, CTL_REREGISTER, CTL_SHUTDOWN, CTL_FENCED } ctl_outcome;

static ctl_outcome handle_control(wk_agent *a, Stagecraft__ControlEnvelope *env, uint64_t *last_ack)
{
    switch (env->body_case) {
    case STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT_ACK:
        *last_ack = sc_clock_now_ns();
        if (!env->heartbeat_ack->known) {
            SC_LOG_WARN(LOG, "the coordinator does not know this worker any more; registering "
                             "again");
            return CTL_REREGISTER;
        }
        return CTL_OK;
    case STAGECRAFT__CONTROL_ENVELOPE__BODY_COMMAND: {
        Stagecraft__Command *cmd = env->command;
        bool *drop = cmd->kind == STAGECRAFT__COMMAND_KIND__COMMAND_START  ? &a->drop_start
                     : cmd->kind == STAGECRAFT__COMMAND_KIND__COMMAND_STOP ? &a->drop_stop
                                                                           : NULL;
        if (drop != NULL && *drop) {
            *drop = false;
            SC_LOG_WARN(LOG, "fault injection: command %llu for job %s ignored",
                        (unsigned long long)cmd->command_id, cmd->job_id);
            return CTL_OK;
        }
        if (cmd->kind == STAGECRAFT__COMMAND_KIND__COMMAND_SHUTDOWN) {
            SC_LOG_INFO(LOG, "the coordinator ordered a shutdown");
            return CTL_SHUTDOWN;
        }
        if (cmd->kind == STAGECRAFT__COMMAND_KIND__COMMAND_STOP) {
            SC_LOG_INFO(LOG, "the coordinator stopped job %s", cmd->job_id);
            wk_state_release(&a->shared, cmd->job_id, "stopped by the coordinator");
        }
        if (cmd->kind == STAGECRAFT__COMMAND_KIND__COMMAND_START) {
            sc_err err;
            sc_err_clear(&err);
            pthread_mutex_lock(&a->shared.lock);
            sc_status rc = SC_OK;
            bool again = false;
            if (a->shared.trainer == NULL || strcmp(a->shared.job_id, cmd->job_id) != 0)
                rc = SC_ERRF(&err, SC_ERR_PRECONDITION,
                             "START for job %s, which is not assigned "
                             "here",
                             cmd->job_id);
            else if (strcmp(a->shared.state, "training") == 0)
                again = true; /* sent again while the first was on its way: already running */
            else
                rc = wk_trainer_start(a->shared.trainer, cmd->payload_json, &err);
            if (rc == SC_OK)
                sc_strlcpy(a->shared.state, "training", sizeof a->shared.state);
            pthread_mutex_unlock(&a->shared.lock);
            if (again)
                SC_LOG_INFO(LOG, "job %s: START again; its stage already trains", cmd->job_id);
            if (rc != SC_OK) /* for the run it refused: an older run's refusal is ignored */
                send_error(a, cmd->job_id, rc, err.msg, 0, 0, wk_start_run(cmd->payload_json));
        }
        if (cmd->kind == STAGECRAFT__COMMAND_KIND__COMMAND_REBALANCE && a->die_on_move) {
            /* a worker lost while its job's blocks move: as abrupt as a kill -9 */
            SC_LOG_WARN(LOG, "fault injection: dying as job %s starts a move", cmd->job_id);
            raise(SIGKILL);
        }
        if (cmd->kind == STAGECRAFT__COMMAND_KIND__COMMAND_REBALANCE) {
            pthread_mutex_lock(&a->shared.lock);
            bool ours = a->shared.trainer != NULL && strcmp(a->shared.job_id, cmd->job_id) == 0;
            if (ours)
                wk_trainer_pause(a->shared.trainer, cmd->step);
            pthread_mutex_unlock(&a->shared.lock);
            if (ours)
                SC_LOG_INFO(LOG, "job %s: pausing after step %llu for a move", cmd->job_id,
                            (unsigned long long)cmd->step);
            else
                SC_LOG_WARN(LOG, "REBALANCE for job %s, which is not assigned here: ignored",
                            cmd->job_id);
        }
        if (cmd->kind == STAGECRAFT__COMMAND_KIND__COMMAND_CHECKPOINT_COMPLETE) {
            sc_err err;
            sc_err_clear(&err);
            pthread_mutex_lock(&a->shared.lock);
            sc_status rc = SC_OK;
            if (a->shared.trainer != NULL && strcmp(a->shared.job_id, cmd->job_id) == 0)
                rc = wk_trainer_checkpoint_complete(a->shared.trainer, cmd->step, &err);
            pthread_mutex_unlock(&a->shared.lock);
            if (rc != SC_OK)
                SC_LOG_WARN(LOG, "job %s: old checkpoints not deleted: %s", cmd->job_id, err.msg);
        }
        return CTL_OK;
    }
    case STAGECRAFT__CONTROL_ENVELOPE__BODY_ERROR:
        if (strcmp(env->error->code, "FENCED") == 0 && env->epoch != 0 &&
            env->epoch < a->shared.epoch) {
            /* about a heartbeat of this process's previous registration, still in flight when
             * it registered again: the current one is not fenced */
            SC_LOG_INFO(LOG,
                        "a heartbeat of epoch %llu was refused after this worker registered "
                        "again (epoch %llu); ignored",
                        (unsigned long long)env->epoch, (unsigned long long)a->shared.epoch);
            return CTL_OK;
        }
        if (strcmp(env->error->code, "FENCED") == 0) {
            SC_LOG_ERROR(LOG, "fenced off: %s", env->error->message);
            return CTL_FENCED;
        }
        SC_LOG_WARN(LOG, "coordinator says %s: %s", env->error->code, env->error->message);
        return CTL_OK;
    default:
        SC_LOG_WARN(LOG, "unexpected control message (body %d); ignored", (int)env->body_case);
        return CTL_OK;
    }
}

/* Tells the coordinator this worker leaves (a heartbeat in state "leaving") and waits up to
 * LEAVE_WAIT_MS for its acknowledgement, so the message is not lost with the socket; whatever
 * else arrives meanwhile is dropped: the worker is stopping. Returns whether the coordinator
 * asks it to stay until its blocks have moved (HeartbeatAck.drain). */
#define LEAVE_WAIT_MS 1000
static bool say_leaving(wk_agent *a)
{
    pthread_mutex_lock(&a->shared.lock);
    sc_strlcpy(a->shared.state, "leaving", sizeof a->shared.state);
    pthread_mutex_unlock(&a->shared.lock);
    send_heartbeat(a);
    uint64_t seq = a->seq, end = sc_clock_now_ns() + LEAVE_WAIT_MS * 1000000ull;
    for (uint64_t now = sc_clock_now_ns(); now < end; now = sc_clock_now_ns()) {
        char peer[SC_CTL_PEER_ID_MAX];
        Stagecraft__ControlEnvelope *env = NULL;
        sc_err err;
        sc_err_clear(&err);
        if (sc_ctl_recv(a->ctl, (int)((end - now) / 1000000ull) + 1, peer, &env, &err) != SC_OK)
            continue;
        bool acked = env->body_case == STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT_ACK &&
                     env->heartbeat_ack->echo_seq == seq;
        bool drain = acked && env->heartbeat_ack->drain;
        sc_ctl_envelope_free(&env);
        if (acked) {
            SC_LOG_INFO(LOG, "the coordinator knows this worker leaves%s",
                        drain ? "; it stays until its blocks have moved to the others" : "");
            return drain;
        }
    }
    SC_LOG_WARN(LOG, "the coordinator did not acknowledge that this worker leaves");
    return false;
}

/* After say_leaving asked to stay: goes on heartbeating ("leaving"), obeying commands (the
 * pause of the job's move) and sending reports, while the block server hands the stage's blocks
 * over, until the coordinator's SHUTDOWN or DRAIN_MAX_MS. */
#define DRAIN_MAX_MS 60000
static void drain(wk_agent *a)
{
    uint64_t now = sc_clock_now_ns(), end = now + DRAIN_MAX_MS * 1000000ull, next_hb = now;
    uint64_t interval_ns = (uint64_t)a->heartbeat_ms * 1000000ull;
    uint64_t last_ack = now;
    ctl_outcome outcome = CTL_OK;
    while (outcome == CTL_OK && (now = sc_clock_now_ns()) < end) {
        if (now >= next_hb) {
            send_heartbeat(a);
            next_hb = now + interval_ns;
        }
        char peer[SC_CTL_PEER_ID_MAX];
        Stagecraft__ControlEnvelope *env = NULL;
        sc_err err;
        sc_err_clear(&err);
        if (sc_ctl_recv(a->ctl, 20, peer, &env, &err) == SC_OK) {
            outcome = handle_control(a, env, &last_ack);
            sc_ctl_envelope_free(&env);
        }
        send_reports(a);
    }
    if (outcome == CTL_SHUTDOWN)
        SC_LOG_INFO(LOG, "blocks handed over; leaving");
    else
        SC_LOG_WARN(LOG, "leaving after %d s without the coordinator's word", DRAIN_MAX_MS / 1000);
}

static bool sleep_unless_stopped(uint64_t ms, volatile sig_atomic_t *stop)
{
    uint64_t end = sc_clock_now_ns() + ms * 1000000ull;
    while (!*stop && sc_clock_now_ns() < end)
        sc_clock_sleep_ms(20);
    return !*stop;
}

sc_status wk_agent_run(wk_agent *a, volatile sig_atomic_t *stop, sc_err *err)
{
    uint64_t backoff_ms = BACKOFF_MIN_MS;
    sc_status result = SC_OK;
    while (!*stop) {
        sc_err rerr;
        sc_err_clear(&rerr);
        sc_status rc = do_register(a, &rerr);
        if (rc == SC_ERR_PERMISSION || rc == SC_ERR_EXISTS || rc == SC_ERR_INVALID) {
            result = SC_ERRF(err, rc, "registration refused: %s", rerr.msg);
            break;
        }
        if (rc != SC_OK) {
            SC_LOG_WARN(LOG, "cannot register (%s); retrying in %llu ms", rerr.msg,
                        (unsigned long long)backoff_ms);
            if (!sleep_unless_stopped(backoff_ms, stop))
                break;
            backoff_ms = backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
            continue;
        }
        backoff_ms = BACKOFF_MIN_MS;

        uint64_t now = sc_clock_now_ns(), last_ack = now, next_hb = now, last_turn = now;
        uint64_t interval_ns = (uint64_t)a->heartbeat_ms * 1000000ull;
        uint64_t silence_ns = interval_ns * DEAD_AFTER_INTERVALS;
        if (silence_ns < SILENCE_MIN_MS * 1000000ull)
            silence_ns = SILENCE_MIN_MS * 1000000ull;
        ctl_outcome outcome = CTL_OK;
        while (!*stop && outcome == CTL_OK) {
            now = sc_clock_now_ns();
            /* This loop itself did not run for a while (the process was stopped or starved of
             * CPU): the missing acks say nothing about the coordinator, and those on their way
             * have not been read yet. Count the silence from now. */
            if (now - last_turn > 2 * interval_ns)
                last_ack = now;
            last_turn = now;
            if (now >= next_hb) {
                send_heartbeat(a);
                repeat_kept(a);
                next_hb = now + interval_ns;
            }
            if (now - last_ack > silence_ns) {
                SC_LOG_WARN(LOG, "no answer from the coordinator for %.1f s; registering again",
                            (double)(now - last_ack) * 1e-9);
                outcome = CTL_REREGISTER;
                break;
            }
            int wait_ms = (int)((next_hb - now) / 1000000ull) + 1;
            if (wait_ms > 20)
                wait_ms = 20; /* reports go out within 20 ms of their step */
            char peer[SC_CTL_PEER_ID_MAX];
            Stagecraft__ControlEnvelope *env = NULL;
            sc_err_clear(&rerr);
            rc = sc_ctl_recv(a->ctl, wait_ms, peer, &env, &rerr);
            if (rc == SC_OK) {
                outcome = handle_control(a, env, &last_ack);
                sc_ctl_envelope_free(&env);
            } else if (rc != SC_ERR_TIMEOUT) {
                SC_LOG_WARN(LOG, "%s", rerr.msg);
            }
            send_reports(a);
        }
        if (*stop)
            wk_state_stopping(&a->shared); /* a profile stops at its next block */
        if (*stop && outcome == CTL_OK) {
            if (say_leaving(a))
                drain(a);
            break;
        }
        if (outcome == CTL_SHUTDOWN)
            break;
        if (outcome == CTL_FENCED) {
            result = SC_ERRF(err, SC_ERR_PERMISSION,
                             "worker %s was fenced off: a newer incarnation registered under "
                             "its id",
                             a->shared.id);
            break;
        }
    }
    wk_state_stopping(&a->shared);
    wk_state_release(&a->shared, NULL, "worker stopping");
    wk_state_reap_wait(&a->shared, STOP_WAIT_MS);
    return result;
}
