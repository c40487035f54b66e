/*
 * Coordinator lifecycle and control loop (see coordinator.h).
 *
 * The control loop owns the ROUTER socket: it answers heartbeats, sweeps worker liveness every
 * tick and sends the commands other threads queued. Everything it shares goes through c->lock,
 * held only for in-memory work and single SQLite writes, never across network waits.
 */
#include "coordinator/coordinator.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "coordinator/command_queue.h"
#include "coordinator/coord_internal.h"
#include "coordinator/freezing.h"
#include "coordinator/http.h"
#include "coordinator/jobs.h"
#include "coordinator/jobs_internal.h"
#include "coordinator/profile_cache.h"
#include "coordinator/service.h"
#include "coordinator/speeds.h"
#include "coordinator/tokens.h"
#include "proto/sc_wire.h"

#define LOG "coordinator"
#define TICK_MS 50

/* Takes STATE/coordinator.lock (creating the folder when missing), held until coord_destroy:
 * one coordinator per state folder (sc_lock_file). */
static sc_status lock_state_dir(coord *c, sc_err *err)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/coordinator.lock", c->state_dir);
    if (mkdir(c->state_dir, 0700) != 0 && errno != EEXIST)
        return SC_ERRF(err, SC_ERR_IO, "cannot create the state folder %s: %s", c->state_dir,
                       strerror(errno));
    long holder = 0;
    sc_status rc = sc_lock_file(path, &c->state_lock_fd, &holder, err);
    if (rc == SC_ERR_EXISTS) { /* say it in this daemon's words */
        sc_err_clear(err);
        char pid[40] = "";
        if (holder > 0)
            snprintf(pid, sizeof pid, "pid %ld, ", holder);
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "state folder %s: another coordinator holds it (%slock %s); stop it or give "
                       "this one another --state",
                       c->state_dir, pid, path);
    }
    return rc;
}

static sc_status setup_tokens(coord *c, sc_err *err)
{
    bool made;
    snprintf(c->join_token_path, sizeof c->join_token_path, "%s/join.token", c->state_dir);
    snprintf(c->client_token_path, sizeof c->client_token_path, "%s/client.token", c->state_dir);
    if (c->cfg.join_token != NULL) {
        sc_strlcpy(c->join_token, c->cfg.join_token, sizeof c->join_token);
        c->join_token_path[0] = '\0';
    } else {
        SC_CHECK(coord_token_load_or_make(c->join_token_path, c->join_token, sizeof c->join_token,
                                          &made, err));
        if (made)
            SC_LOG_INFO(LOG, "generated a join token for workers in %s", c->join_token_path);
    }
    if (c->cfg.client_token != NULL) {
        sc_strlcpy(c->client_token, c->cfg.client_token, sizeof c->client_token);
        c->client_token_path[0] = '\0';
    } else {
        SC_CHECK(coord_token_load_or_make(c->client_token_path, c->client_token,
                                          sizeof c->client_token, &made, err));
        if (made)
            SC_LOG_INFO(LOG, "generated a client token for submit/cancel in %s",
                        c->client_token_path);
    }
    return SC_OK;
}

/* Workers known from an earlier run come back as dead until they re-register. */
static sc_status restore_workers(coord *c, sc_err *err)
{
    coord_worker_rec *recs;
    size_t n;
    SC_CHECK(coord_store_worker_list(c->store, &recs, &n, err));
    sc_status rc = SC_OK;
    for (size_t i = 0; i < n && rc == SC_OK; i++)
        rc = coord_registry_restore(c->registry, &recs[i], err);
    coord_worker_list_free(&recs, n);
    if (rc == SC_OK && n > 0)
        SC_LOG_INFO(LOG, "restored %zu worker(s) from the state; waiting for them to return", n);
    return rc;
}

/* ZAP: a control connection is admitted when its CURVE key is a registered, live worker's. */
static bool allow_worker_key(void *user, const uint8_t key[32], char owner[SC_CTL_PEER_ID_MAX])
{
    coord *c = user;
    bool ok = false;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < coord_registry_count(c->registry) && !ok; i++) {
        const coord_worker *w = coord_registry_at(c->registry, i);
        ok =
            w->has_curve_key && w->state != COORD_WORKER_DEAD && memcmp(w->curve_key, key, 32) == 0;
        if (ok) /* the connection speaks for this worker only (see key_speaks_for) */
            sc_strlcpy(owner, w->rec.id, SC_CTL_PEER_ID_MAX);
    }
    pthread_mutex_unlock(&c->lock);
    return ok;
}

/* Whether a control message claiming to come from worker `claimed` (its envelope's worker id,
 * "" when it names none), received from routing id `peer` on a connection authenticated with
 * `owner`'s CURVE key, may be acted on. A peer holding the join token can register a key of its
 * own and then claim another worker's id: its heartbeats would pass for that worker's. Under
 * CURVE the key's owner is who a connection speaks for, whatever routing id it picked. Without
 * CURVE there is no key to hold anyone to. A refused pair is logged once (the last
 * LOGGED_MISMATCHES are remembered). */
#define LOGGED_MISMATCHES 16
static bool key_speaks_for(const coord *c, const char *claimed, const char *peer,
                           const char *owner)
{
    if (c->zap == NULL || (owner[0] != '\0' && (claimed[0] == '\0' || strcmp(claimed, owner) == 0)))
        return true;
    static char logged[LOGGED_MISMATCHES][2 * SC_CTL_PEER_ID_MAX];
    static size_t next;
    char pair[2 * SC_CTL_PEER_ID_MAX];
    snprintf(pair, sizeof pair, "%s|%s", claimed, owner);
    for (size_t i = 0; i < LOGGED_MISMATCHES; i++)
        if (strcmp(logged[i], pair) == 0)
            return false;
    sc_strlcpy(logged[next], pair, sizeof logged[next]);
    next = (next + 1) % LOGGED_MISMATCHES;
    SC_LOG_WARN(LOG,
                "control messages claiming worker id '%s' (connection '%s') come with the key of "
                "'%s'; refused (logged once)",
                claimed, peer, owner[0] ? owner : "no registered worker");
    return false;
}

/* Loads STATE/control.key (the control socket's CURVE secret key), making it on first start. */
static sc_status setup_curve(coord *c, sc_err *err)
{
    if (!sc_ctl_curve_available()) {
        SC_LOG_WARN(LOG, "this libzmq has no CURVE support: the control channel is not "
                         "encrypted or authenticated");
        return SC_OK;
    }
    char path[1100], pub[SC_CTL_KEY_Z85_LEN + 1];
    snprintf(path, sizeof path, "%s/control.key", c->state_dir);
    char *text = NULL;
    size_t len = 0;
    if (access(path, F_OK) == 0) {
        SC_CHECK(sc_file_read(path, 256, &text, &len, err));
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' '))
            text[--len] = '\0';
        sc_strlcpy(c->curve_secret, text, sizeof c->curve_secret);
        free(text);
        sc_status rc = sc_ctl_curve_public(c->curve_secret, pub, err);
        if (rc != SC_OK) {
            sc_err_prefix(err, "%s", path);
            return rc;
        }
    } else {
        SC_CHECK(sc_ctl_curve_keypair(pub, c->curve_secret, err));
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd < 0 || write(fd, c->curve_secret, SC_CTL_KEY_Z85_LEN) != SC_CTL_KEY_Z85_LEN) {
            if (fd >= 0)
                close(fd);
            return SC_ERRF(err, SC_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        }
        close(fd);
    }
    zmq_z85_decode(c->curve_public, pub);
    return sc_ctl_zap_start(&c->zap, c->zctx, allow_worker_key, c, err);
}

/* An IPv4 address other hosts may reach: not loopback (127/8), not link-local (169.254/16),
 * not 0.0.0.0. */
static bool routable_ipv4(const struct in_addr *a)
{
    uint32_t h = ntohl(a->s_addr);
    return h != 0 && (h >> 24) != 127 && (h >> 16) != 0xA9FE;
}

/* The host workers on other machines reach the control endpoint at, for a coordinator
 * listening on every interface without --advertise: the first up, non-loopback interface's
 * IPv4 address, else the host name's non-loopback IPv4 address. Never a loopback address,
 * which would send remote workers to themselves; SC_ERR_INVALID, naming --advertise, when
 * there is none. */
static sc_status pick_advertise_host(const char *listen, char *out, size_t n, sc_err *err)
{
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
            if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
                !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
                continue;
            const struct in_addr *a = &((const struct sockaddr_in *)i->ifa_addr)->sin_addr;
            if (routable_ipv4(a) && inet_ntop(AF_INET, a, out, (socklen_t)n) != NULL) {
                SC_LOG_INFO(LOG,
                            "listening on every interface without --advertise: workers are "
                            "told %s (interface %s, the first non-loopback one); give "
                            "--advertise HOST to choose",
                            out, i->ifa_name);
                freeifaddrs(ifs);
                return SC_OK;
            }
        }
        freeifaddrs(ifs);
    }
    char name[256] = "";
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (gethostname(name, sizeof name - 1) == 0 && getaddrinfo(name, NULL, &hints, &res) == 0) {
        for (struct addrinfo *r = res; r != NULL; r = r->ai_next) {
            const struct in_addr *a = &((const struct sockaddr_in *)r->ai_addr)->sin_addr;
            if (routable_ipv4(a) && inet_ntop(AF_INET, a, out, (socklen_t)n) != NULL) {
                SC_LOG_INFO(LOG,
                            "listening on every interface without --advertise: workers are "
                            "told %s (the address of host name %s); give --advertise HOST to "
                            "choose",
                            out, name);
                freeaddrinfo(res);
                return SC_OK;
            }
        }
        freeaddrinfo(res);
    }
    return SC_ERRF(err, SC_ERR_INVALID,
                   "--listen %s listens on every interface, but this host has no address that "
                   "other hosts can reach (its interfaces are loopback only and host name '%s' "
                   "has no other address) to tell workers: give --advertise HOST, the name or "
                   "address workers reach this host at, or --listen 127.0.0.1:PORT for workers "
                   "on this host only",
                   listen, name);
}

sc_status coord_new(coord **out, const coord_cfg *cfg, sc_err *err)
{
    *out = NULL;
    if (cfg->listen_addr == NULL || cfg->state_dir == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "the coordinator needs --listen and --state");
    coord *c = calloc(1, sizeof *c);
    SC_ALLOC_CHECK(c, err);
    c->cfg = *cfg;
    c->state_lock_fd = -1;
    if (c->cfg.profile_timeout_ms == 0)
        c->cfg.profile_timeout_ms = 60000;
    if (c->cfg.reprofile_ms == 0)
        c->cfg.reprofile_ms = 10000;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->wake, NULL);
    sc_strlcpy(c->listen_addr, cfg->listen_addr, sizeof c->listen_addr);
    sc_strlcpy(c->state_dir, cfg->state_dir, sizeof c->state_dir);
    sc_status rc;
    char host[256];
    SC_CHECK_GOTO(
        sc_parse_hostport(cfg->listen_addr, true, "--listen", host, sizeof host, NULL, err), fail);
    /* settings first: a refused one leaves the state folder as it was (no token written) */
    const char *adv = cfg->advertise_host;
    char picked[INET_ADDRSTRLEN];
    if (adv == NULL && (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "[::]") == 0)) {
        SC_CHECK_GOTO(pick_advertise_host(cfg->listen_addr, picked, sizeof picked, err), fail);
        adv = picked;
    } else if (adv == NULL) {
        adv = host;
    }
    SC_CHECK_GOTO(coord_registry_new(&c->registry, &cfg->registry, err), fail);
    /* one coordinator per state folder: a second would drive the same jobs */
    SC_CHECK_GOTO(lock_state_dir(c, err), fail);
    SC_CHECK_GOTO(coord_store_open(&c->store, c->state_dir, err), fail);
    SC_CHECK_GOTO(setup_tokens(c, err), fail);
    SC_CHECK_GOTO(restore_workers(c, err), fail);

    c->zctx = zmq_ctx_new();
    if (c->zctx == NULL) {
        rc = SC_ERRF(err, SC_ERR_ZMQ, "cannot create a ZeroMQ context");
        goto fail;
    }
    SC_CHECK_GOTO(setup_curve(c, err), fail);
    char bind[300];
    snprintf(bind, sizeof bind, "tcp://%s:*", host);
    sc_ctl_cfg ccfg = {.zmq_context = c->zctx,
                       .curve_secret_key = c->curve_secret[0] ? c->curve_secret : NULL};
    SC_CHECK_GOTO(sc_ctl_router_new(&c->ctl, bind, &ccfg, err), fail);
    const char *bound = sc_ctl_endpoint(c->ctl);
    const char *port = strrchr(bound, ':');
    snprintf(c->control_endpoint, sizeof c->control_endpoint, "tcp://%s%s", adv,
             port ? port : ":0");

    sc_rpc_server_cfg rcfg = {
        .listen_addr = cfg->listen_addr,
        .max_message_bytes = cfg->max_message_bytes,
        .tls = cfg->tls,
        .methods = coord_service_methods,
        .n_methods = coord_service_n_methods,
    };
    /* Handlers find the coordinator through each method's user pointer. */
    sc_rpc_method methods[16];
    for (size_t i = 0; i < coord_service_n_methods; i++) {
        methods[i] = coord_service_methods[i];
        methods[i].user = c;
    }
    rcfg.methods = methods;
    SC_CHECK_GOTO(sc_rpc_server_new(&c->rpc, &rcfg, err), fail);
    if (cfg->http_addr != NULL) {
        coord_http_cfg hcfg = {.addr = cfg->http_addr, .token = c->client_token};
        sc_err herr;
        sc_err_clear(&herr);
        rc = coord_http_new(&c->http, c, &hcfg, &herr);
        if (rc == SC_ERR_UNAVAILABLE && cfg->http_optional) {
            SC_LOG_WARN(LOG, "no dashboard: %s", herr.msg);
        } else if (rc != SC_OK) {
            if (err != NULL)
                *err = herr;
            goto fail;
        }
    }
    if (pthread_create(&c->driver, NULL, coord_driver_main, c) != 0) {
        rc = SC_ERRF(err, SC_ERR_INTERNAL, "cannot start the job driver thread");
        goto fail;
    }
    c->driver_started = true;
    SC_LOG_INFO(LOG, "serving on %s:%d (gRPC), control on %s (%s), state in %s", host,
                sc_rpc_server_port(c->rpc), c->control_endpoint,
                c->zap ? "CURVE, registered workers only" : "plaintext", c->state_dir);
    *out = c;
    return SC_OK;
fail:
    coord_destroy(&c);
    return rc;
}

void coord_destroy(coord **cp)
{
    if (cp == NULL || *cp == NULL)
        return;
    coord *c = *cp;
    coord_http_destroy(&c->http); /* first: its requests call the service's handlers */
    pthread_mutex_lock(&c->lock);
    c->stopping = true;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->lock);
    if (c->rpc)
        sc_rpc_server_shutdown(c->rpc, 1000);
    if (c->driver_started)
        pthread_join(c->driver, NULL);
    sc_rpc_server_destroy(&c->rpc);
    sc_ctl_destroy(&c->ctl);
    sc_ctl_zap_stop(&c->zap);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    coord_queue_clear(c);
    coord_jobs_progress_clear(c);
    coord_speeds_free(&c->speeds);
    coord_profile_cache_destroy(&c->profiles);
    coord_freezing_free(&c->freezing);
    coord_registry_destroy(&c->registry);
    coord_store_close(&c->store);
    if (c->state_lock_fd >= 0)
        close(c->state_lock_fd); /* releases the state folder's lock */
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->lock);
    free(c);
    *cp = NULL;
}

int coord_port(const coord *c)
{
    return sc_rpc_server_port(c->rpc);
}

int coord_http_bound_port(const coord *c)
{
    return c->http != NULL ? coord_http_port(c->http) : -1;
}

const char *coord_control_endpoint(const coord *c)
{
    return c->control_endpoint;
}

const char *coord_join_token_path(const coord *c)
{
    return c->join_token_path;
}

const char *coord_client_token_path(const coord *c)
{
    return c->client_token_path;
}

/* ---- control loop -------------------------------------------------------------------------- */

/* An Error envelope to `peer` about its message of `epoch` (0: any): the worker tells a refusal
 * of its current incarnation from one of an older message still in flight. */
static void reply_error(coord *c, const char *peer, uint64_t epoch, const char *code,
                        const char *msg)
{
    Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__Error e = STAGECRAFT__ERROR__INIT;
    e.code = (char *)code;
    e.message = (char *)msg;
    env.epoch = epoch;
    env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_ERROR;
    env.error = &e;
    sc_err ignored;
    sc_err_clear(&ignored);
    sc_ctl_send(c->ctl, peer, &env, &ignored);
}

/* A heartbeat from worker `wid` (the owner of the connection's key under CURVE, else the
 * connection's routing id `peer`). One of its current epoch binds the worker's commands to
 * `peer` (w->route). */
static void handle_heartbeat(coord *c, const char *wid, const char *peer,
                             Stagecraft__ControlEnvelope *env)
{
    sc_err err;
    sc_err_clear(&err);
    if (strcmp(wid, env->worker_id) != 0) {
        SC_LOG_WARN(LOG, "heartbeat from connection '%s' claims worker id '%s'; ignored", peer,
                    env->worker_id);
        reply_error(c, peer, 0, "IDENTITY", "the worker id does not match the connection's id");
        return;
    }
    coord_worker *w;
    bool drain = false;
    pthread_mutex_lock(&c->lock);
    sc_status rc = coord_registry_heartbeat(c->registry, env->worker_id, env->epoch,
                                            sc_clock_now_ns(), &w, &err);
    if (rc == SC_OK && strcmp(w->route, peer) != 0) {
        SC_LOG_DEBUG(LOG, "worker %s speaks on control connection '%s'", w->rec.id, peer);
        sc_strlcpy(w->route, peer, sizeof w->route);
    }
    if (rc == SC_OK && env->heartbeat) {
        const char *said = env->heartbeat->state ? env->heartbeat->state : "";
        sc_strlcpy(w->reported_state, said, sizeof w->reported_state);
        w->step = env->heartbeat->step;
        if (strcmp(said, "leaving") == 0) {
            /* stopped by its operator: an elastic job that can do without it moves its blocks
             * off it first (it stays until then: drain); else it is dead now (it must register
             * again to come back), and its job re-planned without waiting for the silence that
             * would say so */
            drain = w->leaving || coord_jobs_worker_leaving(c, w);
            if (!drain) {
                w->state = COORD_WORKER_DEAD;
                SC_LOG_INFO(LOG, "worker %s (%s) leaves: it was stopped", w->rec.id,
                            w->rec.name);
                coord_jobs_worker_left(c, w);
            }
        } else {
            coord_jobs_heartbeat(c, w, said, env->heartbeat->job_id ? env->heartbeat->job_id : "",
                                 sc_clock_now_ns());
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (rc == SC_ERR_PERMISSION) {
        SC_LOG_WARN(LOG, "%s", err.msg);
        reply_error(c, peer, env->epoch, "FENCED", err.msg);
        return;
    }
    Stagecraft__ControlEnvelope ack = STAGECRAFT__CONTROL_ENVELOPE__INIT;
    Stagecraft__HeartbeatAck a = STAGECRAFT__HEARTBEAT_ACK__INIT;
    a.echo_seq = env->seq;
    a.echo_sent_ns = env->sent_ns;
    a.known = rc == SC_OK;
    a.drain = drain;
    ack.worker_id = env->worker_id;
    ack.epoch = env->epoch;
    ack.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT_ACK;
    ack.heartbeat_ack = &a;
    sc_err_clear(&err);
    if (sc_ctl_send(c->ctl, peer, &ack, &err) != SC_OK)
        SC_LOG_DEBUG(LOG, "heartbeat ack: %s", err.msg);
}

/* Whether `peer` is a worker the registry declared dead. Its connection may stay open (a ROUTER
 * cannot close one peer's, and ZAP refuses it only a new one), but nothing it sends is acted on
 * until it registers again: its heartbeats are answered "not known", which tells it to. */
static bool declared_dead(coord *c, const char *peer)
{
    pthread_mutex_lock(&c->lock);
    const coord_worker *w = coord_registry_find(c->registry, peer);
    bool dead = w != NULL && w->state == COORD_WORKER_DEAD;
    pthread_mutex_unlock(&c->lock);
    return dead;
}

/* A message from worker `wid` (see handle_heartbeat) that came on routing id `peer`, which
 * answers go to. */
static void handle_message(coord *c, const char *wid, const char *peer,
                           Stagecraft__ControlEnvelope *env)
{
    if (env->body_case != STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT && declared_dead(c, wid)) {
        SC_LOG_DEBUG(LOG,
                     "control message (body %d) from %s ignored: it was declared dead and "
                     "must register again",
                     (int)env->body_case, wid);
        return;
    }
    switch (env->body_case) {
    case STAGECRAFT__CONTROL_ENVELOPE__BODY_HEARTBEAT:
        handle_heartbeat(c, wid, peer, env);
        break;
    case STAGECRAFT__CONTROL_ENVELOPE__BODY_ITERATION_REPORT: {
        Stagecraft__IterationReport *r = env->iteration_report;
        uint64_t received_ns = sc_clock_now_ns();
        SC_LOG_DEBUG(LOG, "report from %s: job %s step %llu loss %g", wid, r->job_id,
                     (unsigned long long)r->step, r->loss);
        pthread_mutex_lock(&c->lock);
        coord_worker *w = coord_registry_find(c->registry, wid);
        if (w != NULL && w->rec.epoch == env->epoch && strcmp(w->job_id, r->job_id) == 0)
            coord_jobs_report(c, wid, r, env->sent_ns, received_ns);
        pthread_mutex_unlock(&c->lock);
        break;
    }
    case STAGECRAFT__CONTROL_ENVELOPE__BODY_COMMAND_ACK:
        if (!env->command_ack->ok)
            SC_LOG_WARN(LOG, "worker %s refused command %llu: %s", wid,
                        (unsigned long long)env->command_ack->command_id,
                        env->command_ack->message);
        break;
    case STAGECRAFT__CONTROL_ENVELOPE__BODY_ERROR: {
        pthread_mutex_lock(&c->lock);
        coord_worker *w = coord_registry_find(c->registry, wid);
        bool current = w != NULL && w->rec.epoch == env->epoch && w->job_id[0] &&
                       coord_jobs_run_is_current(c, w->job_id, env->error->run);
        if (current) {
            SC_LOG_WARN(LOG, "worker %s reports %s: %s", wid, env->error->code,
                        env->error->message);
            coord_jobs_worker_error(c, w, env->error);
        } else {
            SC_LOG_DEBUG(LOG, "worker %s repeats %s of an earlier run: %s", wid, env->error->code,
                         env->error->message);
        }
        pthread_mutex_unlock(&c->lock);
        break;
    }
    default:
        SC_LOG_WARN(LOG, "unexpected control message (body %d) from %s; ignored",
                    (int)env->body_case, wid);
        reply_error(c, peer, 0, "UNEXPECTED", "the coordinator does not accept this message");
        break;
    }
}

static void on_worker_change(void *user, const coord_worker *w, coord_worker_state old)
{
    coord *c = user;
    SC_LOG_WARN(LOG, "worker %s (%s) is %s (was %s): no heartbeat for %.1f s", w->rec.id,
                w->rec.name, coord_worker_state_name(w->state), coord_worker_state_name(old),
                (double)(sc_clock_now_ns() - w->last_heartbeat_ns) * 1e-9);
    if (w->state == COORD_WORKER_DEAD)
        coord_jobs_worker_died(c, w);
}

/* How long a command waits for its worker's control connection to become known (a worker
 * heartbeats right after it registers) before it is dropped as undeliverable. */
#define ROUTE_WAIT_NS (10ull * 1000000000ull)

/* Where a command for `worker_id` goes: the routing id its current incarnation heartbeats on
 * (w->route). Without CURVE a worker's routing id is its id, so that is used until a heartbeat
 * says otherwise; under CURVE no other id is trusted. Returns "" when there is none yet; `*wait`
 * says whether the worker is alive and may still connect. Takes c->lock. */
static void command_route(coord *c, const char *worker_id, char route[COORD_ROUTE_MAX],
                          bool *wait)
{
    pthread_mutex_lock(&c->lock);
    const coord_worker *w = coord_registry_find(c->registry, worker_id);
    route[0] = '\0';
    *wait = w != NULL && w->state != COORD_WORKER_DEAD;
    if (w != NULL && w->route[0] != '\0')
        sc_strlcpy(route, w->route, COORD_ROUTE_MAX);
    else if (c->zap == NULL)
        sc_strlcpy(route, worker_id, COORD_ROUTE_MAX);
    pthread_mutex_unlock(&c->lock);
}

static void send_queued(coord *c)
{
    coord_cmd *list = coord_queue_take(c);
    coord_cmd *held = NULL, **held_tail = &held;
    static uint64_t next_id = 1;
    uint64_t now_ns = sc_clock_now_ns();
    while (list) {
        coord_cmd *cmd = list;
        list = list->next;
        char route[COORD_ROUTE_MAX];
        bool wait;
        command_route(c, cmd->worker_id, route, &wait);
        if (route[0] == '\0' && wait && now_ns - cmd->queued_ns < ROUTE_WAIT_NS) {
            cmd->next = NULL; /* kept, in order, for the next round */
            *held_tail = cmd;
            held_tail = &cmd->next;
            continue;
        }
        Stagecraft__ControlEnvelope env = STAGECRAFT__CONTROL_ENVELOPE__INIT;
        Stagecraft__Command body = STAGECRAFT__COMMAND__INIT;
        body.kind = cmd->kind;
        body.job_id = cmd->job_id;
        body.step = cmd->step;
        body.command_id = next_id++;
        body.payload_json = cmd->payload_json ? cmd->payload_json : "";
        env.worker_id = cmd->worker_id;
        env.body_case = STAGECRAFT__CONTROL_ENVELOPE__BODY_COMMAND;
        env.command = &body;
        sc_err err;
        sc_err_clear(&err);
        if (route[0] == '\0')
            SC_LOG_WARN(LOG, "command to %s not sent: it has no authenticated control connection",
                        cmd->worker_id);
        else if (sc_ctl_send(c->ctl, route, &env, &err) != SC_OK)
            SC_LOG_WARN(LOG, "command to %s not sent: %s", cmd->worker_id, err.msg);
        free(cmd->payload_json);
        free(cmd);
    }
    coord_queue_put_back(c, held);
}

/* Warnings about frames the control socket dropped (malformed, oversized, another version):
 * an accepted peer can send thousands a second, so at most BAD_FRAME_LOGS are logged per
 * BAD_FRAME_WINDOW_S, and the count of the others once the window ends. */
#define BAD_FRAME_LOGS 10
#define BAD_FRAME_WINDOW_S 10.0
typedef struct {
    double window_start_s;
    unsigned logged, suppressed;
} bad_frame_log;

static void log_bad_frame(bad_frame_log *b, const char *msg, double now_s)
{
    if (now_s - b->window_start_s >= BAD_FRAME_WINDOW_S) {
        if (b->suppressed > 0)
            SC_LOG_WARN(LOG, "%u more dropped control frames not logged in the last %.0f s",
                        b->suppressed, BAD_FRAME_WINDOW_S);
        b->window_start_s = now_s;
        b->logged = b->suppressed = 0;
    }
    if (b->logged < BAD_FRAME_LOGS) {
        b->logged++;
        SC_LOG_WARN(LOG, "%s", msg);
    } else {
        b->suppressed++;
    }
}

sc_status coord_run(coord *c, volatile sig_atomic_t *stop, sc_err *err)
{
    bad_frame_log bad = {0, 0, 0};
    (void)err;
    uint64_t last_sweep = sc_clock_now_ns();
    while (!*stop) {
        char peer[SC_CTL_PEER_ID_MAX], owner[SC_CTL_PEER_ID_MAX];
        Stagecraft__ControlEnvelope *env = NULL;
        sc_err rerr;
        sc_err_clear(&rerr);
        sc_status rc = sc_ctl_recv_owner(c->ctl, TICK_MS, peer, owner, &env, &rerr);
        if (rc == SC_OK) {
            const char *wid = c->zap ? owner : peer;
            if (key_speaks_for(c, env->worker_id ? env->worker_id : "", peer, owner))
                handle_message(c, wid, peer, env);
            sc_ctl_envelope_free(&env);
        } else if (rc != SC_ERR_TIMEOUT) {
            log_bad_frame(&bad, rerr.msg, sc_clock_now_s());
        }
        uint64_t now = sc_clock_now_ns();
        if (now - last_sweep >= TICK_MS * 1000000ull) {
            pthread_mutex_lock(&c->lock);
            coord_registry_sweep(c->registry, now, on_worker_change, c);
            coord_jobs_check_stalls(c, sc_clock_now_s());
            pthread_mutex_unlock(&c->lock);
            last_sweep = now;
        }
        send_queued(c);
    }
    SC_LOG_INFO(LOG, "stopping");
    return SC_OK;
}
