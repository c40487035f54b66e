/*
 * bench_control_workers: the simulated workers. A simulated worker is only its registration,
 * its CURVE key pair (when libzmq has CURVE, as the worker agent does) and its DEALER: no gRPC
 * server, no device. Registration threads call RegisterWorker over gRPC; one heartbeat thread
 * drives every DEALER through epoll over their ZMQ_FD notification descriptors: zmq_poll would
 * rebuild and scan a poll set of all N sockets on every wake-up, and with N heartbeats a second
 * spread evenly the loop wakes about once per 1/N s, so its cost would grow as N^2 and load the
 * same two cores the coordinator is measured on.
 *
 * Not here: the coordinator (bench_control_coord.c), the figures' printing.
 *
 * Key invariant: a worker's fields are written by its registration thread before `ready` is
 * released, and only then touched by the heartbeat thread; the hb_loop counters belong to the
 * heartbeat thread until the main thread joins it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <zmq.h>

#include "bench/bench_control_internal.h"
#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "proto/sc_rpc.h"

/* ---- the simulated workers ------------------------------------------------------------------ */

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

void *bench_heartbeat_main(void *arg)
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

void *bench_register_main(void *arg)
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
