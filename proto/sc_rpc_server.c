/*
 * sc_rpc_server: a server's life: checking its configuration, its credentials, binding the
 * port, starting the event-loop and handler threads, and the graceful then forced shutdown.
 *
 * Not here: what happens to a call once it is matched (sc_rpc_call.c).
 *
 * Key invariant: sc_rpc_server_shutdown returns only after every call has ended, every handler
 * has returned and every thread is joined; server_free then frees what is left, whichever
 * step of sc_rpc_server_new failed.
 */
#include "proto/sc_rpc.h"

#include <assert.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/sc_clock.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "proto/sc_rpc_internal.h"
#include "proto/sc_rpc_server_internal.h"

#define RPC_MAX_HANDLER_THREADS 256

static sc_status server_check_cfg(const sc_rpc_server_cfg *cfg, sc_err *err)
{
    if (cfg->listen_addr == NULL || cfg->listen_addr[0] == '\0')
        return SC_ERRF(err, SC_ERR_INVALID, "listen_addr is empty: give HOST:PORT");
    if (cfg->handler_threads < 0 || cfg->handler_threads > RPC_MAX_HANDLER_THREADS)
        return SC_ERRF(err, SC_ERR_INVALID, "handler_threads %d is outside [0, %d]",
                       cfg->handler_threads, RPC_MAX_HANDLER_THREADS);
    if ((cfg->tls.cert_path == NULL) != (cfg->tls.key_path == NULL))
        return SC_ERRF(err, SC_ERR_INVALID, "TLS needs both a certificate and a private key");
    if (cfg->tls.ca_path != NULL && cfg->tls.cert_path == NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "a TLS CA for client certificates needs the server's certificate and key");
    if (cfg->n_methods > 0 && cfg->methods == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "n_methods is %zu but methods is NULL", cfg->n_methods);
    for (size_t i = 0; i < cfg->n_methods; i++) {
        const sc_rpc_method *m = &cfg->methods[i];
        if (m->name == NULL || m->name[0] != '/')
            return SC_ERRF(err, SC_ERR_INVALID,
                           "methods[%zu]: the name must be a full method name such as "
                           "/stagecraft.Coordinator/SubmitJob",
                           i);
        if (m->req_desc == NULL || m->resp_desc == NULL || m->handler == NULL)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "methods[%zu] (%s): request and response descriptors and a handler "
                           "are required",
                           i, m->name);
        if (m->req_desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC ||
            m->resp_desc->magic != PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC)
            return SC_ERRF(err, SC_ERR_INVALID, "methods[%zu] (%s): not a message descriptor", i,
                           m->name);
        for (size_t j = 0; j < i; j++)
            if (strcmp(cfg->methods[j].name, m->name) == 0)
                return SC_ERRF(err, SC_ERR_INVALID, "methods[%zu]: %s is listed twice", i, m->name);
    }
    return SC_OK;
}

static sc_status server_credentials(const sc_rpc_tls *tls, grpc_server_credentials **out,
                                    sc_err *err)
{
    if (tls->cert_path == NULL) {
        *out = grpc_insecure_server_credentials_create();
        return SC_OK;
    }
    rpc_pem_files pem;
    SC_CHECK(rpc_pem_files_read(tls, &pem, err));
    grpc_ssl_pem_key_cert_pair pair = {.private_key = pem.key, .cert_chain = pem.cert};
    *out = grpc_ssl_server_credentials_create_ex(
        pem.ca, &pair, 1,
        pem.ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
    rpc_pem_files_free(&pem);
    if (*out == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "gRPC refused the TLS certificate %s or key %s",
                       tls->cert_path, tls->key_path);
    return SC_OK;
}

/* Frees what sc_rpc_server_new built; threads must already be joined. */
static void server_free(sc_rpc_server *srv)
{
    if (srv->server != NULL)
        grpc_server_destroy(srv->server);
    if (srv->cq != NULL) {
        if (!srv->shut_down) { /* never started: nothing but the queue's own shutdown to drain */
            grpc_completion_queue_shutdown(srv->cq);
            while (grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
                       .type != GRPC_QUEUE_SHUTDOWN)
                ;
        }
        grpc_completion_queue_destroy(srv->cq);
    }
    for (size_t i = 0; i < srv->n_methods; i++)
        free((char *)srv->methods[i].name);
    free(srv->methods);
    free(srv->calls);
    free(srv->workers);
    pthread_cond_destroy(&srv->state_cv);
    pthread_cond_destroy(&srv->job_cv);
    pthread_mutex_destroy(&srv->mu);
    free(srv);
    grpc_shutdown();
}

sc_status sc_rpc_server_new(sc_rpc_server **out, const sc_rpc_server_cfg *cfg, sc_err *err)
{
    assert(out != NULL && cfg != NULL);
    *out = NULL;
    SC_CHECK(server_check_cfg(cfg, err));
    size_t max_bytes = cfg->max_message_bytes;
    SC_CHECK(rpc_check_max_bytes(&max_bytes, err));

    sc_rpc_server *srv = calloc(1, sizeof *srv);
    SC_ALLOC_CHECK(srv, err);
    grpc_init();
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->job_cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->state_cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&srv->accepting, true);
    atomic_init(&srv->cancelling, false);
    atomic_init(&srv->live_calls, 0);
    srv->t_shutdown = (call_tag){TAG_SHUTDOWN, NULL};
    srv->max_bytes = max_bytes;
    int n_workers = cfg->handler_threads ? cfg->handler_threads : SC_RPC_DEFAULT_HANDLER_THREADS;
    sc_status rc = SC_OK;

    srv->workers = calloc((size_t)n_workers, sizeof *srv->workers);
    srv->methods = calloc(cfg->n_methods ? cfg->n_methods : 1, sizeof *srv->methods);
    srv->calls = calloc(cfg->n_methods ? cfg->n_methods : 1, sizeof *srv->calls);
    if (srv->workers == NULL || srv->methods == NULL || srv->calls == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory creating the RPC server");
        goto fail;
    }
    for (size_t i = 0; i < cfg->n_methods; i++) {
        srv->methods[i] = cfg->methods[i];
        srv->methods[i].name = strdup(cfg->methods[i].name);
        srv->n_methods = i + 1;
        if (srv->methods[i].name == NULL) {
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory copying the method table");
            goto fail;
        }
    }

    grpc_arg args[3];
    rpc_set_int_arg(&args[0], GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int)max_bytes);
    rpc_set_int_arg(&args[1], GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int)max_bytes);
    /* Without this a second server on the same fixed port binds silently beside the first. */
    rpc_set_int_arg(&args[2], GRPC_ARG_ALLOW_REUSEPORT, 0);
    grpc_channel_args chargs = {.num_args = SC_ARRAY_LEN(args), .args = args};
    srv->server = grpc_server_create(&chargs, NULL);
    srv->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(srv->server, srv->cq, NULL);

    grpc_server_credentials *creds;
    SC_CHECK_GOTO(server_credentials(&cfg->tls, &creds, err), fail);
    srv->port = grpc_server_add_http2_port(srv->server, cfg->listen_addr, creds);
    grpc_server_credentials_release(creds);
    if (srv->port <= 0) {
        rc = SC_ERRF(err, SC_ERR_UNAVAILABLE,
                     "cannot listen on %s: the port is taken or the address is not local",
                     cfg->listen_addr);
        goto fail;
    }

    grpc_server_start(srv->server);
    srv->started = true;
    if (pthread_create(&srv->cq_thread, NULL, rpc_server_event_loop, srv) != 0) {
        rc = SC_ERRF(err, SC_ERR_INTERNAL, "cannot start the RPC event-loop thread");
        goto fail;
    }
    srv->cq_thread_started = true;
    rpc_server_request_call(srv);
    for (int i = 0; i < n_workers; i++) {
        if (pthread_create(&srv->workers[i], NULL, rpc_server_worker, srv) != 0) {
            rc = SC_ERRF(err, SC_ERR_INTERNAL, "cannot start RPC handler thread %d of %d", i + 1,
                         n_workers);
            goto fail;
        }
        srv->n_workers_started = i + 1;
    }
    SC_LOG_INFO(RPC_LOG, "serving %zu methods on %s (port %d, %s, %d handler threads)",
                srv->n_methods, cfg->listen_addr, srv->port,
                cfg->tls.cert_path ? (cfg->tls.ca_path ? "mutual TLS" : "TLS") : "plaintext",
                n_workers);
    *out = srv;
    return SC_OK;

fail:
    if (srv->started) {
        sc_rpc_server_shutdown(srv, 0);
    }
    server_free(srv);
    return rc;
}

int sc_rpc_server_port(const sc_rpc_server *srv)
{
    return srv->port;
}

/* Waits for the shutdown notification until `deadline_ns` (UINT64_MAX: for ever). */
static bool server_wait_notified(sc_rpc_server *srv, uint64_t deadline_ns)
{
    pthread_mutex_lock(&srv->mu);
    while (!srv->shutdown_notified) {
        uint64_t now = sc_clock_now_ns();
        if (deadline_ns != UINT64_MAX && now >= deadline_ns)
            break;
        /* Wake every few seconds even without a deadline, to say what is being waited for. */
        uint64_t until = now + 5000000000ull;
        if (deadline_ns < until)
            until = deadline_ns;
        struct timespec ts = {.tv_sec = (time_t)(until / 1000000000u),
                              .tv_nsec = (long)(until % 1000000000u)};
        if (pthread_cond_timedwait(&srv->state_cv, &srv->mu, &ts) != 0 &&
            deadline_ns == UINT64_MAX && !srv->shutdown_notified)
            SC_LOG_WARN(RPC_LOG, "shutdown: still waiting for handlers that ignore cancellation");
    }
    bool done = srv->shutdown_notified;
    pthread_mutex_unlock(&srv->mu);
    return done;
}

void sc_rpc_server_shutdown(sc_rpc_server *srv, int64_t grace_ms)
{
    if (srv == NULL || srv->shut_down || !srv->started)
        return;
    atomic_store(&srv->accepting, false);
    grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->t_shutdown);
    if (srv->cq_thread_started) {
        if (grace_ms < 0)
            grace_ms = 0;
        if (grace_ms > INT64_C(86400000))
            grace_ms = INT64_C(86400000);
        uint64_t grace_end = sc_clock_now_ns() + (uint64_t)grace_ms * 1000000u;
        if (!server_wait_notified(srv, grace_end)) {
            int live = atomic_load(&srv->live_calls);
            if (live > 0)
                SC_LOG_INFO(RPC_LOG, "shutdown: grace of %lld ms over, cancelling %d calls",
                            (long long)grace_ms, live);
            atomic_store(&srv->cancelling, true);
            grpc_server_cancel_all_calls(srv->server);
            server_wait_notified(srv, UINT64_MAX);
        }
    }

    pthread_mutex_lock(&srv->mu);
    srv->workers_stop = true;
    pthread_cond_broadcast(&srv->job_cv);
    pthread_mutex_unlock(&srv->mu);
    for (int i = 0; i < srv->n_workers_started; i++)
        pthread_join(srv->workers[i], NULL);
    srv->n_workers_started = 0;

    grpc_completion_queue_shutdown(srv->cq);
    if (srv->cq_thread_started) {
        pthread_join(srv->cq_thread, NULL);
        srv->cq_thread_started = false;
    } else {
        while (
            grpc_completion_queue_next(srv->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
            GRPC_QUEUE_SHUTDOWN)
            ;
    }
    srv->shut_down = true;
}

void sc_rpc_server_destroy(sc_rpc_server **p)
{
    if (p == NULL || *p == NULL)
        return;
    sc_rpc_server_shutdown(*p, 0);
    server_free(*p);
    *p = NULL;
}

bool sc_rpc_server_calls(const sc_rpc_server *srv, size_t i, const char **name,
                         unsigned long *calls)
{
    if (i >= srv->n_methods)
        return false;
    *name = srv->methods[i].name;
    *calls = atomic_load(&srv->calls[i]);
    return true;
}
