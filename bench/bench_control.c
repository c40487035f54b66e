/*
 * bench_control: load on the control plane. A real coordinator (coord_new + coord_run, forked
 * into a child process so its memory, CPU time and file descriptors can be read on their own
 * from /proc) serves N simulated workers that live in this process:
 *
 *   phase 1  every worker registers over gRPC (RegisterWorker with the join token and a
 *            one-device cpu HardwareReport) from a few client threads: registrations/s and the
 *            per-call latency;
 *   phase 2  every worker heartbeats at 1 Hz on its own ZeroMQ DEALER (routing id = its worker
 *            id), the N send times spread evenly over each second, for D seconds: heartbeats
 *            acknowledged per second, the round trip (send -> ack receipt) p50/p99/max, lost
 *            heartbeats, the coordinator's RSS, CPU time and open descriptors; at the end
 *            ListWorkers must show every worker alive and the coordinator's log must hold no
 *            suspect/dead transition.
 *
 * A simulated worker is only its registration, its CURVE key pair (when libzmq has CURVE, as
 * the worker agent does) and its DEALER: no gRPC server, no device. All DEALERs share one ZeroMQ
 * context and are driven by one thread through epoll over their ZMQ_FD notification
 * descriptors: zmq_poll would rebuild and scan a poll set of all N sockets on every wake-up,
 * and with N heartbeats a second spread evenly the loop wakes about once per 1/N s, so its cost
 * would grow as N^2 and load the same two cores the coordinator is measured on.
 * Workers start heartbeating as soon as they are registered, as real ones do, so that early
 * registrants are not declared suspect while the later ones register.
 *
 * Not a test: it prints figures and never judges wall-clock speed, except to print whether the
 * issue's goal (1000 workers, p99 < 20 ms) was met. Exit 0 when the run was healthy (every worker
 * registered and stayed alive), 1 when it was not or the coordinator failed, 2 on bad usage.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_status.h"
#include "common/sc_util.h"
#include "coordinator/coordinator.h"
#include "proto/sc_control.h"
#include "proto/sc_rpc.h"

#define WARMUP_MS 2000 /* after the last registration, before the measured window */
#define GRACE_MS 1000  /* after the window: acks still counted for window heartbeats */
#define RPC_TIMEOUT_MS 30000
#define MAX_WORKERS 100000
#define MAX_REG_THREADS 64

static const char usage_text[] =
    "usage: bench_control [--workers N] [--seconds D] [--reg-threads T] [--coord-nofile K]\n"
    "                     [--keep-state]\n"
    "  --workers N       simulated workers (1..100000, default 1000)\n"
    "  --seconds D       measured heartbeat window in seconds (1..3600, default 10)\n"
    "  --reg-threads T   gRPC client threads registering the workers (1..64, default 4)\n"
    "  --coord-nofile K  set the coordinator's open-file soft limit to K (default: inherited)\n"
    "  --keep-state      keep the coordinator's state folder (its database and log) and print\n"
    "                    its path instead of removing it\n";

typedef struct {
    int64_t workers;
    int64_t seconds;
    int64_t reg_threads;
    int64_t coord_nofile; /* 0: inherit */
    bool keep_state;
} bench_opts;

/* ---- the coordinator child --------------------------------------------------------------- */

typedef struct {
    int ok;
    int port;
    char control_endpoint[300];
    char error[SC_ERR_MSG_MAX];
} child_report;

static volatile sig_atomic_t child_stop;

static void child_on_signal(int sig)
{
    (void)sig;
    child_stop = 1;
}

/* Runs in the forked child: a coordinator on loopback until SIGTERM. Its log (warnings and
 * errors only) goes to STATE/coordinator.log, which the parent scans for liveness changes. */
static int coordinator_child(const bench_opts *o, pid_t parent, const char *state_dir,
                             const char *join_token, const char *client_token, int report_fd)
{
    /* An aborted benchmark must not leave a coordinator behind. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = child_on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    char log_path[1200];
    snprintf(log_path, sizeof log_path, "%s/coordinator.log", state_dir);
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (log_fd >= 0) {
        dup2(log_fd, STDERR_FILENO);
        close(log_fd);
    }
    sc_log_set_level(SC_LOG_WARN);

    child_report rep;
    memset(&rep, 0, sizeof rep);
    if (o->coord_nofile > 0) {
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = (rlim_t)o->coord_nofile;
        if (rl.rlim_cur > rl.rlim_max || setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            snprintf(rep.error, sizeof rep.error,
                     "--coord-nofile %lld: cannot set the open-file limit (hard limit %llu)",
                     (long long)o->coord_nofile, (unsigned long long)rl.rlim_max);
            if (write(report_fd, &rep, sizeof rep) < 0)
                return 1;
            return 1;
        }
    }

    coord_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen_addr = "127.0.0.1:0";
    cfg.state_dir = state_dir;
    cfg.join_token = join_token;
    cfg.client_token = client_token;
    coord *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    if (coord_new(&c, &cfg, &err) != SC_OK) {
        sc_strlcpy(rep.error, err.msg, sizeof rep.error);
        if (write(report_fd, &rep, sizeof rep) < 0)
            return 1;
        return 1;
    }
    rep.ok = 1;
    rep.port = coord_port(c);
    sc_strlcpy(rep.control_endpoint, coord_control_endpoint(c), sizeof rep.control_endpoint);
    bool told = write(report_fd, &rep, sizeof rep) == (ssize_t)sizeof rep;
    close(report_fd);
    sc_status rc = SC_OK;
    if (told)
        rc = coord_run(c, &child_stop, &err);
    coord_destroy(&c);
    return told && rc == SC_OK ? 0 : 1;
}

/* ---- /proc readings ------------------------------------------------------------------------ */

/* A "Key:   value kB" line of /proc/PID/status, as a number (kB for memory); -1 if absent. */
static long long proc_status_value(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    long long v = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            v = strtoll(line + klen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

/* utime + stime of a process, in seconds; -1 if unreadable. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces: fields are counted after its closing parenthesis,
     * where field 3 (state) starts; utime and stime are fields 14 and 15. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return -1;
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Open descriptors of a process, and how many of them are sockets. */
static void proc_fds(pid_t pid, long *total, long *sockets)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    *total = *sockets = -1;
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    *total = *sockets = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char link_path[400], target[128];
        snprintf(link_path, sizeof link_path, "%s/%s", path, e->d_name);
        ssize_t n = readlink(link_path, target, sizeof target - 1);
        (*total)++;
        if (n > 0) {
            target[n] = '\0';
            if (strncmp(target, "socket:", 7) == 0)
                (*sockets)++;
        }
    }
    closedir(d);
    if (pid == getpid()) /* the directory stream itself */
        (*total)--;
}

static void read_loadavg(char *out, size_t size)
{
    out[0] = '\0';
    FILE *f = fopen("/proc/loadavg", "r");
    if (f == NULL)
        return;
    double a, b, c;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(out, size, "%.2f %.2f %.2f", a, b, c);
    fclose(f);
}

/* ---- the simulated workers ------------------------------------------------------------------ */

typedef struct {
    char id[SC_CTL_PEER_ID_MAX]; /* written by its registration thread before `ready` */
    uint64_t epoch;
    char curve_public[SC_CTL_KEY_Z85_LEN + 1]; /* its own key pair, "" without CURVE */
    char curve_secret[SC_CTL_KEY_Z85_LEN + 1];
    char server_key[SC_CTL_KEY_Z85_LEN + 1]; /* the coordinator's, "" for plaintext */
    atomic_int ready; /* 1 once registered (release/acquire with the fields above) */
    sc_ctl *ctl;      /* owned by the heartbeat thread */
    void *sock;
    uint64_t seq;
} bench_worker;

typedef struct {
    bench_worker *w;
    size_t n;
    void *zctx;
    char control_endpoint[300];
    int epfd;
    uint64_t t0_ns;
    _Atomic uint64_t win_start_ns; /* 0 until the main thread fixes the window */
    _Atomic uint64_t win_end_ns;
    atomic_int stop;

    /* Owned by the heartbeat thread; the main thread reads them after joining it. */
    uint64_t sent_total, acks_total;
    uint64_t sent_win, acked_win, send_failures_win;
    uint64_t unknown_acks, error_replies, other_msgs, recv_errors, setup_failures;
    uint64_t max_lag_ns_win; /* how late a window heartbeat left after its due time */
    double *rtt_ms;          /* round trips of window heartbeats */
    size_t n_rtt, cap_rtt;
    char first_problem[SC_ERR_MSG_MAX + 128];
} hb_loop;

static void note_problem(hb_loop *h, const char *what, const char *msg)
{
    if (h->first_problem[0] == '\0')
        snprintf(h->first_problem, sizeof h->first_problem, "%s: %s", what, msg);
}

static bool in_window(const hb_loop *h, uint64_t t_ns)
{
    uint64_t a = atomic_load(&h->win_start_ns), b = atomic_load(&h->win_end_ns);
    return a != 0 && t_ns >= a && t_ns < b;
}

static void handle_reply(hb_loop *h, Stagecraft__ControlEnvelope *env)
{
    uint64_t now = sc_clock_now_ns();
    switch (env->body_case) {
    case STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT_ACK: {
        Stagecraft__HeartbeatAck *a = env->heartbeat_ack;
        h->acks_total++;
        if (!a->known) {
            h->unknown_acks++;
            note_problem(h, "ack", "the coordinator no longer knows a worker");
        }
        if (in_window(h, a->echo_sent_ns)) {
            h->acked_win++;
            if (h->n_rtt < h->cap_rtt)
                h->rtt_ms[h->n_rtt++] = (double)(now - a->echo_sent_ns) * 1e-6;
        }
        break;
    }
    case STAGECRAFT__CONTROL_ENVELOPE__BODY_ERROR:
        h->error_replies++;
        note_problem(h, env->error->code, env->error->message);
        break;
    default:
        h->other_msgs++;
        break;
    }
}

/* Reads everything waiting on one DEALER. Checking ZMQ_EVENTS also re-arms its ZMQ_FD, which
 * signals edges only: a send can consume the notification of an ack, hence a drain after every
 * send as well as on each epoll wake-up. */
static void drain_worker(hb_loop *h, bench_worker *w)
{
    for (;;) {
        int events = 0;
        size_t len = sizeof events;
        if (zmq_getsockopt(w->sock, ZMQ_EVENTS, &events, &len) != 0 || !(events & ZMQ_POLLIN))
            return;
        char peer[SC_CTL_PEER_ID_MAX];
        Stagecraft__ControlEnvelope *env = NULL;
        sc_err err;
        sc_err_clear(&err);
        sc_status rc = sc_ctl_recv(w->ctl, 0, peer, &env, &err);
        if (rc == SC_OK) {
            handle_reply(h, env);
            sc_ctl_envelope_free(&env);
        } else if (rc == SC_ERR_TIMEOUT) {
            return;
        } else {
            h->recv_errors++;
            note_problem(h, "receive", err.msg);
        }
    }
}

/* Connects a newly registered worker's DEALER and watches its notification descriptor. */
static bool open_worker(hb_loop *h, size_t i)
{
    bench_worker *w = &h->w[i];
    sc_ctl_cfg cfg = {.zmq_context = h->zctx, .routing_id = w->id};
    if (w->server_key[0]) {
        cfg.curve_secret_key = w->curve_secret;
        cfg.curve_public_key = w->curve_public;
        cfg.curve_server_key = w->server_key;
    }
    sc_err err;
    sc_err_clear(&err);
    if (sc_ctl_dealer_new(&w->ctl, h->control_endpoint, &cfg, &err) != SC_OK) {
        note_problem(h, "connect", err.msg);
        return false;
    }
    w->sock = sc_ctl_socket(w->ctl);
    int fd = -1;
    size_t len = sizeof fd;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = i};
    if (zmq_getsockopt(w->sock, ZMQ_FD, &fd, &len) != 0 ||
        epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        note_problem(h, "epoll", strerror(errno));
        sc_ctl_destroy(&w->ctl);
        w->sock = NULL;
        return false;
    }
    return true;
}

static void send_heartbeat(hb_loop *h, bench_worker *w, uint64_t due_ns)
{
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Heartbeat hb = STAGECRAFT__HEARTBEAT__INIT;
    hb.state = "idle";
    hb.job_id = "";
    env.worker_id = w->id;
    env.epoch = w->epoch;
    env.seq = ++w->seq;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    uint64_t now = sc_clock_now_ns();
    env.sent_ns = now;
    bool counted = in_window(h, now);
    sc_err err;
    sc_err_clear(&err);
    h->sent_total++;
    if (counted) {
        h->sent_win++;
        if (now - due_ns > h->max_lag_ns_win)
            h->max_lag_ns_win = now - due_ns;
    }
    if (sc_ctl_send(w->ctl, NULL, &env, &err) != SC_OK) {
        if (counted)
            h->send_failures_win++;
        note_problem(h, "send", err.msg);
    }
}

/* Slot s (s = 0, 1, 2, ...) is worker s % n's turn, due at t0 + s * (1 s / n): each worker once
 * a second, the n of them evenly spread over the second. */
static uint64_t slot_due_ns(const hb_loop *h, uint64_t s)
{
    return h->t0_ns + (s / h->n) * 1000000000ull + (s % h->n) * 1000000000ull / h->n;
}

static void *heartbeat_main(void *arg)
{
    hb_loop *h = arg;
    struct epoll_event evs[256];
    uint64_t next_slot = 0;
    while (!atomic_load(&h->stop)) {
        uint64_t now = sc_clock_now_ns();
        while (slot_due_ns(h, next_slot) <= now) {
            size_t i = (size_t)(next_slot % h->n);
            bench_worker *w = &h->w[i];
            uint64_t due = slot_due_ns(h, next_slot);
            next_slot++;
            if (!atomic_load_explicit(&w->ready, memory_order_acquire))
                continue;
            if (w->ctl == NULL && !open_worker(h, i)) {
                h->setup_failures++;
                atomic_store(&w->ready, 0); /* counted once; it stays silent */
                continue;
            }
            send_heartbeat(h, w, due);
            drain_worker(h, w);
        }
        uint64_t due = slot_due_ns(h, next_slot);
        now = sc_clock_now_ns();
        int wait_ms = due > now ? (int)((due - now + 999999) / 1000000) : 0;
        if (wait_ms > 100)
            wait_ms = 100;
        int n = epoll_wait(h->epfd, evs, (int)(sizeof evs / sizeof *evs), wait_ms);
        for (int k = 0; k < n; k++)
            drain_worker(h, &h->w[evs[k].data.u64]);
    }
    return NULL;
}

/* ---- registration --------------------------------------------------------------------------- */

typedef struct {
    hb_loop *h;
    const char *target;
    const char *join_token;
    size_t first, stride;
    double *lat_ms; /* one per registration attempted by this thread */
    size_t n_lat;
    size_t failures;
    char first_error[SC_ERR_MSG_MAX + 64];
} reg_thread;

static sc_status register_one(sc_rpc_client *cli, reg_thread *t, size_t i, sc_err *err)
{
    char name[64], host[64], endpoint[96];
    snprintf(name, sizeof name, "bench-%06zu", i);
    snprintf(host, sizeof host, "bench-host-%06zu", i);
    /* Never called: no job is submitted, so the coordinator has no reason to reach it. */
    snprintf(endpoint, sizeof endpoint, "%s.invalid:7000", host);
    Stagecraft__Device dev = STAGECRAFT__DEVICE__INIT;
    dev.index = 0;
    dev.kind = "cpu";
    dev.name = "cpu";
    dev.memory_bytes = 16ull << 30;
    dev.relative_speed = 1.0;
    dev.numa_node = -1;
    Stagecraft__Device *devs[1] = {&dev};
    Stagecraft__HardwareReport hw = STAGECRAFT__HARDWARE_REPORT__INIT;
    hw.hostname = host;
    hw.devices = devs;
    hw.n_devices = 1;
    hw.cpu_cores = 8;
    hw.host_memory_bytes = 16ull << 30;
    Stagecraft__RegisterWorkerRequest req = STAGECRAFT__REGISTER_WORKER_REQUEST__INIT;
    req.name = name;
    req.join_token = (char *)t->join_token;
    req.hardware = &hw;
    req.worker_endpoint = endpoint;
    bench_worker *w = &t->h->w[i];
    uint8_t public_raw[32];
    if (w->curve_public[0]) {
        zmq_z85_decode(public_raw, w->curve_public);
        req.curve_public_key.data = public_raw;
        req.curve_public_key.len = 32;
    }

    ProtobufCMessage *m = NULL;
    SC_CHECK(sc_rpc_call(cli, "/stagecraft.Coordinator/RegisterWorker", &req.base,
                         &stagecraft__register_worker_response__descriptor, &m, RPC_TIMEOUT_MS,
                         err));
    Stagecraft__RegisterWorkerResponse *resp = (void *)m;
    sc_status rc = SC_OK;
    if (resp->worker_id == NULL || resp->worker_id[0] == '\0' ||
        strlen(resp->worker_id) >= sizeof w->id)
        rc = SC_ERRF(err, SC_ERR_PARSE, "RegisterWorker answered without a usable worker id");
    else if (resp->control_endpoint == NULL ||
             strcmp(resp->control_endpoint, t->h->control_endpoint) != 0)
        rc = SC_ERRF(err, SC_ERR_PARSE, "RegisterWorker named control endpoint '%s', not '%s'",
                     resp->control_endpoint ? resp->control_endpoint : "", t->h->control_endpoint);
    else if (resp->heartbeat_interval_ms != 1000)
        rc = SC_ERRF(err, SC_ERR_UNSUPPORTED,
                     "the coordinator asks for heartbeats every %u ms; this benchmark sends one "
                     "per second",
                     resp->heartbeat_interval_ms);
    else if (resp->server_curve_public_key.len != 0 &&
             (resp->server_curve_public_key.len != 32 || !w->curve_public[0]))
        rc = SC_ERRF(err, SC_ERR_PARSE, "RegisterWorker sent a %zu-byte CURVE server key",
                     resp->server_curve_public_key.len);
    if (rc == SC_OK) {
        if (resp->server_curve_public_key.len == 32)
            zmq_z85_encode(w->server_key, resp->server_curve_public_key.data, 32);
        sc_strlcpy(w->id, resp->worker_id, sizeof w->id);
        w->epoch = resp->epoch;
        atomic_store_explicit(&w->ready, 1, memory_order_release);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

static void *register_main(void *arg)
{
    reg_thread *t = arg;
    sc_rpc_client *cli = NULL;
    sc_err err;
    sc_err_clear(&err);
    if (sc_rpc_client_new(&cli, t->target, NULL, &err) != SC_OK) {
        for (size_t i = t->first; i < t->h->n; i += t->stride)
            t->failures++;
        sc_strlcpy(t->first_error, err.msg, sizeof t->first_error);
        return NULL;
    }
    bool curve = sc_ctl_curve_available();
    for (size_t i = t->first; i < t->h->n; i += t->stride) {
        sc_err_clear(&err);
        /* A worker makes its key pair before it registers, as the agent does at start. */
        bench_worker *w = &t->h->w[i];
        if (curve && sc_ctl_curve_keypair(w->curve_public, w->curve_secret, &err) != SC_OK) {
            if (t->failures++ == 0)
                snprintf(t->first_error, sizeof t->first_error, "worker %zu: %s", i, err.msg);
            continue;
        }
        uint64_t a = sc_clock_now_ns();
        sc_status rc = register_one(cli, t, i, &err);
        t->lat_ms[t->n_lat++] = (double)(sc_clock_now_ns() - a) * 1e-6;
        if (rc != SC_OK) {
            if (t->failures++ == 0)
                snprintf(t->first_error, sizeof t->first_error, "worker %zu: %s", i, err.msg);
        }
    }
    sc_rpc_client_destroy(&cli);
    return NULL;
}

/* ---- figures -------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array (p in 0..1). */
static double percentile(const double *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t k = (size_t)(p * (double)n + 0.999999);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return v[k - 1];
}

typedef struct {
    size_t alive, suspect, dead, other, total;
    bool ok;
    char error[SC_ERR_MSG_MAX];
} worker_census;

static void list_workers(const char *target, worker_census *c)
{
    memset(c, 0, sizeof *c);
    sc_rpc_client *cli = NULL;
    sc_err err;
    sc_err_clear(&err);
    Stagecraft__ListWorkersRequest req = STAGECRAFT__LIST_WORKERS_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    if (sc_rpc_client_new(&cli, target, NULL, &err) != SC_OK ||
        sc_rpc_call(cli, "/stagecraft.Coordinator/ListWorkers", &req.base,
                    &stagecraft__list_workers_response__descriptor, &m, RPC_TIMEOUT_MS,
                    &err) != SC_OK) {
        sc_strlcpy(c->error, err.msg, sizeof c->error);
        sc_rpc_client_destroy(&cli);
        return;
    }
    Stagecraft__ListWorkersResponse *resp = (void *)m;
    c->total = resp->n_workers;
    for (size_t i = 0; i < resp->n_workers; i++) {
        switch (resp->workers[i]->state) {
        case STAGECRAFT__WORKER_STATE__WORKER_ALIVE:
            c->alive++;
            break;
        case STAGECRAFT__WORKER_STATE__WORKER_SUSPECT:
            c->suspect++;
            break;
        case STAGECRAFT__WORKER_STATE__WORKER_DEAD:
            c->dead++;
            break;
        default:
            c->other++;
            break;
        }
    }
    c->ok = true;
    protobuf_c_message_free_unpacked(m, NULL);
    sc_rpc_client_destroy(&cli);
}

/* Liveness changes and other complaints the coordinator logged (it runs at level warn). */
typedef struct {
    size_t suspect, dead, warnings;
    char first[512];
} log_scan;

static void scan_coordinator_log(const char *state_dir, log_scan *s)
{
    memset(s, 0, sizeof *s);
    char path[1200], line[2048];
    snprintf(path, sizeof path, "%s/coordinator.log", state_dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f)) {
        s->warnings++;
        if (s->first[0] == '\0') {
            sc_strlcpy(s->first, line, sizeof s->first);
            s->first[strcspn(s->first, "\n")] = '\0';
        }
        if (strstr(line, " is suspect (was "))
            s->suspect++;
        if (strstr(line, " is dead (was "))
            s->dead++;
    }
    fclose(f);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void print_kb(const char *label, long long kb)
{
    if (kb < 0)
        printf("  %-34s unreadable\n", label);
    else
        printf("  %-34s %.1f MiB\n", label, (double)kb / 1024.0);
}

/* Everything the report prints besides the heartbeat loop's own counters. */
typedef struct {
    int argc;
    char **argv;
    pid_t child;
    const char *target, *control_endpoint, *load_start, *load_end;
    size_t reg_threads;
    double reg_s;
    double *reg_lat; /* sorted here */
    size_t n_lat, reg_failures;
    const char *reg_error;
    double win_s;
    long long rss_idle_kb, rss_reg_kb, rss_q_kb[5], hwm_kb, coord_threads;
    long long self_rss_kb;
    double coord_cpu_s, self_cpu_s;
    long fds, fd_sockets;
    long long nofile; /* the coordinator's soft limit, -1 when unreadable */
    worker_census census;
    log_scan ls;
} bench_figures;

/* Prints the figures; returns whether the run was healthy (every worker registered and alive
 * throughout, no error reply). Sorts h->rtt_ms and f->reg_lat. */
static bool print_report(hb_loop *h, bench_figures *f)
{
    const size_t n = h->n;
    qsort(f->reg_lat, f->n_lat, sizeof *f->reg_lat, cmp_double);
    qsort(h->rtt_ms, h->n_rtt, sizeof *h->rtt_ms, cmp_double);
    uint64_t lost = h->sent_win > h->acked_win ? h->sent_win - h->acked_win : 0;
    double p99 = percentile(h->rtt_ms, h->n_rtt, 0.99);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);

    printf("stagecraft control-plane benchmark:");
    for (int i = 0; i < f->argc; i++)
        printf(" %s", f->argv[i]);
    printf("\nmachine: %ld online CPUs; load average %s at start, %s at end\n", cpus, f->load_start,
           f->load_end);
    printf("coordinator: child process %d, gRPC %s, control %s, log level warn\n", (int)f->child,
           f->target, f->control_endpoint);
    printf("workers: %zu simulated in this process (one DEALER each%s, one ZeroMQ context, one "
           "heartbeat thread on epoll)\n\n",
           n, h->w[0].server_key[0] ? " with CURVE" : ", plaintext");

    printf("phase 1: RegisterWorker over gRPC, %zu client threads (one channel each), "
           "registered workers already heartbeating\n",
           f->reg_threads);
    printf("  %-34s %zu ok, %zu failed\n", "registrations", n - f->reg_failures, f->reg_failures);
    printf("  %-34s %.3f s\n", "wall time (first call -> last reply)", f->reg_s);
    printf("  %-34s %.1f\n", "registrations/s", (double)n / f->reg_s);
    printf("  %-34s %.2f / %.2f / %.2f ms\n", "call latency p50 / p99 / max",
           percentile(f->reg_lat, f->n_lat, 0.5), percentile(f->reg_lat, f->n_lat, 0.99),
           f->n_lat ? f->reg_lat[f->n_lat - 1] : 0.0);
    if (f->reg_failures)
        printf("  first failure: %s\n", f->reg_error);

    printf("\nphase 2: heartbeats at 1 Hz per worker, spread evenly; window %.1f s after %d ms "
           "warm-up\n",
           f->win_s, WARMUP_MS);
    printf("  %-34s %llu (%.1f/s)\n", "heartbeats sent in window", (unsigned long long)h->sent_win,
           (double)h->sent_win / f->win_s);
    printf("  %-34s %llu (%.1f/s)\n", "acks received (handled)", (unsigned long long)h->acked_win,
           (double)h->acked_win / f->win_s);
    printf("  %-34s %llu (no ack by %d ms after the window; %llu send failures)\n",
           "lost heartbeats", (unsigned long long)lost, GRACE_MS,
           (unsigned long long)h->send_failures_win);
    printf("  %-34s %.3f / %.3f / %.3f ms\n", "round trip p50 / p99 / max",
           percentile(h->rtt_ms, h->n_rtt, 0.50), p99, h->n_rtt ? h->rtt_ms[h->n_rtt - 1] : 0.0);
    printf("  %-34s %.2f ms\n", "latest send after its due time", (double)h->max_lag_ns_win * 1e-6);
    printf("  (round trip: the heartbeat's sent_ns, stamped just before zmq_send, to the moment "
           "this process read the ack; same monotonic clock)\n");

    printf("\ncoordinator process (/proc/%d)\n", (int)f->child);
    print_kb("RSS after start, no workers", f->rss_idle_kb);
    print_kb("RSS right after last registration", f->rss_reg_kb);
    printf("  %-34s", "RSS at 0, 1/4 .. 4/4 of window");
    for (int q = 0; q <= 4; q++)
        printf(" %.1f", (double)f->rss_q_kb[q] / 1024.0);
    printf(" MiB\n");
    print_kb("peak RSS (VmHWM)", f->hwm_kb);
    printf("  %-34s %.1f%% of one core (%.2f s in %.1f s)\n", "CPU during window",
           100.0 * f->coord_cpu_s / f->win_s, f->coord_cpu_s, f->win_s);
    printf("  %-34s %lld\n", "threads", f->coord_threads);
    printf("  %-34s %ld (%ld sockets); soft limit %lld\n", "open descriptors", f->fds,
           f->fd_sockets, f->nofile);

    printf("\nbenchmark process (the simulated workers)\n");
    print_kb("RSS at end of window", f->self_rss_kb);
    printf("  %-34s %.1f%% of one core\n", "CPU during window", 100.0 * f->self_cpu_s / f->win_s);

    const worker_census *c = &f->census;
    printf("\nliveness\n");
    if (c->ok)
        printf("  %-34s %zu workers: %zu alive, %zu suspect, %zu dead\n", "ListWorkers at end",
               c->total, c->alive, c->suspect, c->dead);
    else
        printf("  %-34s failed: %s\n", "ListWorkers at end", c->error);
    printf("  %-34s %zu suspect, %zu dead (%zu warning lines)\n", "transitions in coordinator log",
           f->ls.suspect, f->ls.dead, f->ls.warnings);
    printf("  %-34s %llu unknown-worker acks, %llu errors, %llu other, %llu unreadable, "
           "%llu connect failures\n",
           "replies (whole run)", (unsigned long long)h->unknown_acks,
           (unsigned long long)h->error_replies, (unsigned long long)h->other_msgs,
           (unsigned long long)h->recv_errors, (unsigned long long)h->setup_failures);
    if (f->ls.first[0])
        printf("  first coordinator warning: %s\n", f->ls.first);
    if (h->first_problem[0])
        printf("  first problem seen by the workers: %s\n", h->first_problem);

    bool healthy = f->reg_failures == 0 && c->ok && c->total == n && c->alive == n &&
                   f->ls.suspect == 0 && f->ls.dead == 0 && h->unknown_acks == 0 &&
                   h->error_replies == 0 && h->setup_failures == 0;
    printf("\nresult: %s", healthy ? "healthy" : "NOT healthy (see above)");
    if (n == 1000)
        printf("; goal (1000 workers at 1 Hz, p99 < 20 ms): %s (p99 %.3f ms, %ld CPUs)",
               p99 < 20.0 && lost == 0 && healthy ? "met" : "not met", p99, cpus);
    printf("\n");
    return healthy;
}

/* ---- main ----------------------------------------------------------------------------------- */

static int parse_args(int argc, char **argv, bench_opts *o)
{
    static const struct option longopts[] = {
        {"workers", required_argument, NULL, 'w'},
        {"seconds", required_argument, NULL, 's'},
        {"reg-threads", required_argument, NULL, 't'},
        {"coord-nofile", required_argument, NULL, 'f'},
        {"keep-state", no_argument, NULL, 'k'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    o->workers = 1000;
    o->seconds = 10;
    o->reg_threads = 4;
    o->coord_nofile = 0;
    o->keep_state = false;
    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        sc_err err;
        sc_err_clear(&err);
        sc_status rc = SC_OK;
        switch (ch) {
        case 'w':
            rc = sc_parse_int64(optarg, 1, MAX_WORKERS, "--workers", &o->workers, &err);
            break;
        case 's':
            rc = sc_parse_int64(optarg, 1, 3600, "--seconds", &o->seconds, &err);
            break;
        case 't':
            rc = sc_parse_int64(optarg, 1, MAX_REG_THREADS, "--reg-threads", &o->reg_threads, &err);
            break;
        case 'f':
            rc = sc_parse_int64(optarg, 16, 1 << 24, "--coord-nofile", &o->coord_nofile, &err);
            break;
        case 'k':
            o->keep_state = true;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return -1;
        default:
            fprintf(stderr, "bench_control: unknown flag or missing value: %s\n%s",
                    argv[optind - 1], usage_text);
            return 2;
        }
        if (rc != SC_OK) {
            fprintf(stderr, "bench_control: %s\n%s", err.msg, usage_text);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench_control: unexpected argument '%s'\n%s", argv[optind], usage_text);
        return 2;
    }
    return 0;
}

static bool make_token(char *out, size_t size)
{
    unsigned char raw[16];
    int fd = open("/dev/urandom", O_RDONLY);
    bool ok = fd >= 0 && read(fd, raw, sizeof raw) == (ssize_t)sizeof raw;
    if (fd >= 0)
        close(fd);
    for (size_t i = 0; ok && i < sizeof raw && 2 * i + 2 < size; i++)
        snprintf(out + 2 * i, size - 2 * i, "%02x", raw[i]);
    return ok;
}

/* Waits up to timeout_ms for the child's report; false if it died or said nothing. */
static bool read_child_report(int fd, child_report *rep, int timeout_ms)
{
    size_t got = 0;
    uint64_t end = sc_clock_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (got < sizeof *rep) {
        uint64_t now = sc_clock_now_ns();
        if (now >= end)
            return false;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)((end - now) / 1000000ull) + 1) <= 0)
            continue;
        ssize_t n = read(fd, (char *)rep + got, sizeof *rep - got);
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

static void stop_child(pid_t pid)
{
    kill(pid, SIGTERM);
    for (int i = 0; i < 200; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        sc_clock_sleep_ms(50);
    }
    fprintf(stderr, "bench_control: the coordinator did not stop within 10 s; killing it\n");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void sleep_until(uint64_t t_ns)
{
    uint64_t now = sc_clock_now_ns();
    if (t_ns > now)
        sc_clock_sleep_ms((t_ns - now + 999999) / 1000000);
}

int main(int argc, char **argv)
{
    bench_opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc != 0)
        return prc < 0 ? 0 : prc;
    sc_log_set_level(SC_LOG_WARN);
    const size_t n = (size_t)o.workers;

    const char *tmp = getenv("TMPDIR");
    char state_dir[1024];
    snprintf(state_dir, sizeof state_dir, "%s/sc-bench-control-XXXXXX",
             tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(state_dir) == NULL) {
        fprintf(stderr, "bench_control: cannot create a state folder %s: %s\n", state_dir,
                strerror(errno));
        return 1;
    }
    char join_token[64] = "", client_token[64] = "";
    if (!make_token(join_token, sizeof join_token) ||
        !make_token(client_token, sizeof client_token)) {
        fprintf(stderr, "bench_control: cannot read /dev/urandom for the tokens\n");
        rmdir(state_dir);
        return 1;
    }
    char load_start[64];
    read_loadavg(load_start, sizeof load_start);

    /* The coordinator is forked before this process starts any thread. */
    int pfd[2];
    if (pipe(pfd) != 0) {
        fprintf(stderr, "bench_control: pipe: %s\n", strerror(errno));
        rmdir(state_dir);
        return 1;
    }
    fflush(NULL);
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "bench_control: fork: %s\n", strerror(errno));
        rmdir(state_dir);
        return 1;
    }
    if (child == 0) {
        close(pfd[0]);
        return coordinator_child(&o, parent, state_dir, join_token, client_token, pfd[1]);
    }
    close(pfd[1]);

    int status = 1;
    hb_loop h;
    memset(&h, 0, sizeof h);
    h.epfd = -1;
    reg_thread *rt = NULL;
    double *reg_lat = NULL;
    pthread_t hb_thread;
    bool hb_started = false;
    child_report rep;
    memset(&rep, 0, sizeof rep);
    bool reported = read_child_report(pfd[0], &rep, 30000);
    close(pfd[0]);
    if (!reported || !rep.ok) {
        fprintf(stderr, "bench_control: the coordinator did not start: %s\n",
                reported ? rep.error : "it exited or said nothing within 30 s (see its log)");
        goto done;
    }
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", rep.port);
    sc_strlcpy(h.control_endpoint, rep.control_endpoint, sizeof h.control_endpoint);
    long long rss_idle_kb = proc_status_value(child, "VmRSS");

    /* Each DEALER holds a TCP connection and a notification descriptor. */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rlim_t need = (rlim_t)(2 * n + 256);
    if (rl.rlim_cur < need) {
        rl.rlim_cur = need < rl.rlim_max ? need : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < need) {
        fprintf(stderr,
                "bench_control: %zu workers need about %llu open files in this process; the "
                "hard limit is %llu (raise it with ulimit -Hn)\n",
                n, (unsigned long long)need, (unsigned long long)rl.rlim_max);
        goto done;
    }

    h.w = calloc(n, sizeof *h.w);
    h.n = n;
    h.cap_rtt = n * (size_t)(o.seconds + 2) + 1024;
    h.rtt_ms = malloc(h.cap_rtt * sizeof *h.rtt_ms);
    h.zctx = zmq_ctx_new();
    h.epfd = epoll_create1(EPOLL_CLOEXEC);
    reg_lat = malloc(n * sizeof *reg_lat);
    rt = calloc((size_t)o.reg_threads, sizeof *rt);
    if (h.w == NULL || h.rtt_ms == NULL || h.zctx == NULL || h.epfd < 0 || reg_lat == NULL ||
        rt == NULL) {
        fprintf(stderr, "bench_control: out of memory or descriptors setting up %zu workers\n", n);
        goto done;
    }
    if (zmq_ctx_set(h.zctx, ZMQ_MAX_SOCKETS, (int)n + 16) != 0) {
        fprintf(stderr, "bench_control: ZeroMQ refuses %zu sockets: %s\n", n + 16,
                zmq_strerror(zmq_errno()));
        goto done;
    }
    h.t0_ns = sc_clock_now_ns();
    if (pthread_create(&hb_thread, NULL, heartbeat_main, &h) != 0) {
        fprintf(stderr, "bench_control: cannot start the heartbeat thread\n");
        goto done;
    }
    hb_started = true;

    /* Phase 1: registration. */
    fprintf(stderr, "bench_control: registering %zu workers with %lld threads...\n", n,
            (long long)o.reg_threads);
    size_t nt = (size_t)o.reg_threads;
    pthread_t reg_tid[MAX_REG_THREADS];
    size_t lat_off = 0;
    for (size_t t = 0; t < nt; t++) {
        rt[t].h = &h;
        rt[t].target = target;
        rt[t].join_token = join_token;
        rt[t].first = t;
        rt[t].stride = nt;
        rt[t].lat_ms = reg_lat + lat_off;
        lat_off += t < n ? (n - t + nt - 1) / nt : 0;
    }
    uint64_t reg_start = sc_clock_now_ns();
    size_t started = 0;
    for (; started < nt; started++)
        if (pthread_create(&reg_tid[started], NULL, register_main, &rt[started]) != 0)
            break;
    for (size_t t = 0; t < started; t++)
        pthread_join(reg_tid[t], NULL);
    uint64_t reg_end = sc_clock_now_ns();
    if (started < nt) {
        fprintf(stderr, "bench_control: could start only %zu registration threads\n", started);
        goto done;
    }
    size_t reg_failures = 0, n_lat = 0;
    const char *reg_error = "";
    for (size_t t = 0; t < nt; t++) {
        reg_failures += rt[t].failures;
        if (rt[t].failures && reg_error[0] == '\0')
            reg_error = rt[t].first_error;
        /* Compact the per-thread latencies into one array. */
        memmove(reg_lat + n_lat, rt[t].lat_ms, rt[t].n_lat * sizeof *reg_lat);
        n_lat += rt[t].n_lat;
    }
    long long rss_reg_kb = proc_status_value(child, "VmRSS");

    /* Phase 2: the measured heartbeat window. */
    uint64_t w0 = reg_end + WARMUP_MS * 1000000ull;
    uint64_t w1 = w0 + (uint64_t)o.seconds * 1000000000ull;
    atomic_store(&h.win_end_ns, w1);
    atomic_store(&h.win_start_ns, w0);
    fprintf(stderr,
            "bench_control: %zu registered; heartbeating, measuring %lld s after %d ms "
            "of warm-up...\n",
            n - reg_failures, (long long)o.seconds, WARMUP_MS);
    sleep_until(w0);
    double coord_cpu0 = proc_cpu_s(child), self_cpu0 = proc_cpu_s(getpid());
    /* RSS at each quarter of the window: a plateau is buffers filling, steady growth a leak. */
    long long rss_q_kb[5];
    rss_q_kb[0] = proc_status_value(child, "VmRSS");
    for (int q = 1; q <= 4; q++) {
        sleep_until(w0 + (w1 - w0) / 4 * (uint64_t)q);
        rss_q_kb[q] = proc_status_value(child, "VmRSS");
    }
    sleep_until(w1);
    double coord_cpu1 = proc_cpu_s(child), self_cpu1 = proc_cpu_s(getpid());
    long long hwm_kb = proc_status_value(child, "VmHWM");
    long long coord_threads = proc_status_value(child, "Threads");
    long long self_rss_kb = proc_status_value(getpid(), "VmRSS");
    long fds = 0, fd_sockets = 0;
    proc_fds(child, &fds, &fd_sockets);
    struct rlimit child_nofile;
    bool have_child_nofile = prlimit(child, RLIMIT_NOFILE, NULL, &child_nofile) == 0;
    sleep_until(w1 + GRACE_MS * 1000000ull);
    worker_census census;
    list_workers(target, &census);
    atomic_store(&h.stop, 1);
    pthread_join(hb_thread, NULL);
    hb_started = false;
    char load_end[64];
    read_loadavg(load_end, sizeof load_end);

    bench_figures f = {
        .argc = argc,
        .argv = argv,
        .child = child,
        .target = target,
        .control_endpoint = rep.control_endpoint,
        .load_start = load_start,
        .load_end = load_end,
        .reg_threads = nt,
        .reg_s = (double)(reg_end - reg_start) * 1e-9,
        .reg_lat = reg_lat,
        .n_lat = n_lat,
        .reg_failures = reg_failures,
        .reg_error = reg_error,
        .win_s = (double)(w1 - w0) * 1e-9,
        .rss_idle_kb = rss_idle_kb,
        .rss_reg_kb = rss_reg_kb,
        .hwm_kb = hwm_kb,
        .coord_threads = coord_threads,
        .self_rss_kb = self_rss_kb,
        .coord_cpu_s = coord_cpu1 - coord_cpu0,
        .self_cpu_s = self_cpu1 - self_cpu0,
        .fds = fds,
        .fd_sockets = fd_sockets,
        .nofile = have_child_nofile ? (long long)child_nofile.rlim_cur : -1,
        .census = census,
    };
    memcpy(f.rss_q_kb, rss_q_kb, sizeof f.rss_q_kb);
    scan_coordinator_log(state_dir, &f.ls);
    status = print_report(&h, &f) ? 0 : 1;

done:
    if (hb_started) {
        atomic_store(&h.stop, 1);
        pthread_join(hb_thread, NULL);
    }
    for (size_t i = 0; h.w && i < n; i++)
        sc_ctl_destroy(&h.w[i].ctl);
    if (h.zctx)
        zmq_ctx_term(h.zctx);
    if (h.epfd >= 0)
        close(h.epfd);
    free(h.w);
    free(h.rtt_ms);
    free(reg_lat);
    free(rt);
    stop_child(child);
    if (o.keep_state)
        fprintf(stderr, "bench_control: state and coordinator log kept in %s\n", state_dir);
    else
        nftw(state_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    return status;
}
