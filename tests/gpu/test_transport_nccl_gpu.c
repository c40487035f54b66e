/*
 * GPU tests of the data plane: the nccl transport (one GPU: a peer that never joins times out,
 * an abort cancels the wait; two GPUs: messages both ways with sends in flight while receiving,
 * host and device buffers, an out-of-order request refused, a peer that goes away) and GPU
 * stages against the CPU (2- and 3-stage pipelines on cuda:0 over the local transport, whose
 * messages then travel in device memory, and a GPU stage beside a CPU one; on two GPUs over
 * nccl). The local transport's device payloads on their own: device and host memory both ways,
 * out of order, to a transport without them. The replicas' device all-reduce (one GPU: a copy
 * that never joins times out, an abort cancels; two GPUs: sums and means exact, and a replicated
 * GPT stage on two GPUs against the same job on CPUs). Every test skips without the devices it
 * needs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef SC_HAVE_NCCL
#include <cuda_runtime.h>
#endif

#include "common/sc_clock.h"
#include "common/sc_json.h"
#include "kernels/device.h"
#include "kernels/model.h"
#include "worker/runtime/runner.h"
#include "worker/transport/allreduce.h"
#include "worker/transport/transport.h"

#define GPT_JSON                                                                                   \
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", \"vocab\": 256, "       \
    "\"seq_len\": 8, \"layers\": 2, \"width\": 16, \"heads\": 2}"

static int g_gpus;
static int g_gpt_blocks;

static int gpt_blocks(void)
{
    sc_jdoc *doc = NULL;
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    int n = 0;
    if (sc_jdoc_parse(&doc, "model", GPT_JSON, strlen(GPT_JSON), &err) == SC_OK) {
        sc_jnode root = sc_jdoc_root(doc);
        if (kn_model_from_node(&m, &root, &err) == SC_OK)
            n = kn_model_block_count(m);
    }
    kn_model_destroy(&m);
    sc_jdoc_destroy(&doc);
    return n;
}

static int setup(void **state)
{
    (void)state;
    g_gpus = kn_cuda_device_count();
    g_gpt_blocks = gpt_blocks();
    return g_gpt_blocks >= 3 ? 0 : -1;
}

#define NEED_GPUS(n)                                                                               \
    do {                                                                                           \
        if (g_gpus < (n))                                                                          \
            skip();                                                                                \
    } while (0)

#ifdef SC_HAVE_NCCL

static rt_transport *nccl_new(int device, bool has_next, int timeout_ms)
{
    rt_transport_cfg c = rt_transport_cfg_default();
    c.kind = RT_TRANSPORT_NCCL;
    c.bind_endpoint = has_next ? "nccl://" : "nccl://-";
    c.device = device;
    c.timeout_ms = timeout_ms;
    c.tag = 77;
    rt_transport *t = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = rt_transport_new(&t, &c, &err);
    if (rc != SC_OK)
        fail_msg("nccl transport on cuda:%d: %s", device, err.msg);
    return t;
}

/* Aborts a transport or an all-reduce (whichever is set) from another thread after a delay. */
typedef struct {
    rt_transport *t;
    rt_allreduce *a;
    int delay_ms;
} abort_job;

static void *abort_later(void *arg)
{
    abort_job *j = arg;
    struct timespec ts = {j->delay_ms / 1000, (long)(j->delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    if (j->t != NULL)
        rt_transport_abort(j->t);
    if (j->a != NULL)
        rt_allreduce_abort(j->a);
    return NULL;
}

/* One GPU: the second stage joins the communicators of a first stage that never connects. */
static void test_peer_never_joins(void **state)
{
    (void)state;
    NEED_GPUS(1);
    rt_transport *first = nccl_new(0, true, 20000);
    rt_transport *second = nccl_new(0, false, 1500);
    sc_err err;
    sc_err_clear(&err);
    double t0 = sc_clock_now_s();
    sc_status rc = rt_transport_connect(second, rt_transport_endpoint(first), NULL, &err);
    double took = sc_clock_now_s() - t0;
    assert_int_equal(rc, SC_ERR_TIMEOUT);
    assert_non_null(strstr(err.msg, "did not complete within 1500 ms"));
    assert_true(took >= 1.4 && took < 6.0);
    /* broken from then on, and says so at once */
    float x = 0.0f;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_recv(second, RT_MSG_ACTIVATION, 1, 0, &x, sizeof x, &err),
                     SC_ERR_UNAVAILABLE);
    rt_transport_destroy(&second);
    rt_transport_destroy(&first);
}

/* An abort from another thread ends a long wait at once with SC_ERR_CANCELLED. */
static void test_abort_cancels(void **state)
{
    (void)state;
    NEED_GPUS(1);
    rt_transport *first = nccl_new(0, true, 20000);
    rt_transport *second = nccl_new(0, false, 20000);
    abort_job j = {.t = second, .delay_ms = 300};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, abort_later, &j), 0);
    sc_err err;
    sc_err_clear(&err);
    double t0 = sc_clock_now_s();
    sc_status rc = rt_transport_connect(second, rt_transport_endpoint(first), NULL, &err);
    double took = sc_clock_now_s() - t0;
    pthread_join(th, NULL);
    assert_int_equal(rc, SC_ERR_CANCELLED);
    assert_true(took < 5.0);
    rt_transport_destroy(&second);
    rt_transport_destroy(&first);
}

/* ---- two GPUs ---- */

typedef struct {
    rt_transport *t;
    const char *prev, *next;
    sc_status rc;
    sc_err err;
} connect_job;

static void *connect_thread(void *arg)
{
    connect_job *j = arg;
    sc_err_clear(&j->err);
    j->rc = rt_transport_connect(j->t, j->prev, j->next, &j->err);
    return NULL;
}

/* Connects a first stage on cuda:0 and a second on cuda:1 (collective: both at once). */
static void pair_open(rt_transport **a, rt_transport **b, int timeout_ms)
{
    *a = nccl_new(0, true, timeout_ms);
    *b = nccl_new(1, false, timeout_ms);
    connect_job ja = {*a, NULL, rt_transport_endpoint(*b), SC_OK, {0}};
    connect_job jb = {*b, rt_transport_endpoint(*a), NULL, SC_OK, {0}};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, connect_thread, &ja), 0);
    connect_thread(&jb);
    pthread_join(th, NULL);
    if (ja.rc != SC_OK || jb.rc != SC_OK)
        fail_msg("connecting cuda:0 and cuda:1: %s / %s", ja.err.msg, jb.err.msg);
}

/* Message k's size in floats: 0, small, and one above NCCL's 4 MiB staging buffers. */
static size_t msg_floats(int k)
{
    static const size_t sizes[] = {0, 1, 333, 4096, (5u << 20) / 4, 17};
    return sizes[k % 6];
}

static float msg_value(int kind, int k, size_t i)
{
    return (float)(kind * 1000 + k) + (float)(i % 97) * 0.25f;
}

typedef struct {
    rt_transport *t;
    int n;
    bool device; /* use device buffers */
    sc_status rc;
    sc_err err;
    int bad; /* first wrong value found, -1 none */
} flow_job;

static void *alloc_buf(bool device, size_t bytes, int dev)
{
    void *p = NULL;
    if (device) {
        cudaSetDevice(dev);
        if (cudaMalloc(&p, bytes + 4) != cudaSuccess)
            return NULL;
        return p;
    }
    return malloc(bytes + 4);
}

static void free_buf(bool device, void *p)
{
    if (device)
        cudaFree(p);
    else
        free(p);
}

static void put(bool device, void *dst, const float *src, size_t n)
{
    if (device)
        cudaMemcpy(dst, src, n * sizeof *src, cudaMemcpyHostToDevice);
    else
        memcpy(dst, src, n * sizeof *src);
}

static void get(bool device, float *dst, const void *src, size_t n)
{
    if (device)
        cudaMemcpy(dst, src, n * sizeof *dst, cudaMemcpyDeviceToHost);
    else
        memcpy(dst, src, n * sizeof *dst);
}

static bool check_msg(int kind, int k, const float *got, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != msg_value(kind, k, i))
            return false;
    return true;
}

/* Stage 0: A(0), A(1), then for k >= 1 G(k-1) before A(k+1): sends in flight while it waits. */
static void *first_stage(void *arg)
{
    flow_job *j = arg;
    sc_err_clear(&j->err);
    j->bad = -1;
    size_t most = (5u << 20) / 4;
    float *host = malloc(most * sizeof *host + 4);
    void *buf = alloc_buf(j->device, most * sizeof(float), 0);
    j->rc = SC_OK;
    for (int k = 0; k <= j->n && j->rc == SC_OK; k++) {
        if (k < j->n) {
            size_t n = msg_floats(k);
            for (size_t i = 0; i < n; i++)
                host[i] = msg_value(0, k, i);
            put(j->device, buf, host, n);
            j->rc =
                rt_transport_send(j->t, RT_MSG_ACTIVATION, 1, k, buf, n * sizeof(float), &j->err);
        }
        if (j->rc == SC_OK && k >= 1) {
            size_t n = msg_floats(k - 1);
            j->rc =
                rt_transport_recv(j->t, RT_MSG_GRADIENT, 1, k - 1, buf, n * sizeof(float), &j->err);
            get(j->device, host, buf, n);
            if (j->rc == SC_OK && !check_msg(1, k - 1, host, n) && j->bad < 0)
                j->bad = k - 1;
        }
    }
    free_buf(j->device, buf);
    free(host);
    return NULL;
}

/* Stage 1: A(k) then G(k), in order. */
static void *second_stage(void *arg)
{
    flow_job *j = arg;
    sc_err_clear(&j->err);
    j->bad = -1;
    size_t most = (5u << 20) / 4;
    float *host = malloc(most * sizeof *host + 4);
    void *buf = alloc_buf(j->device, most * sizeof(float), 1);
    j->rc = SC_OK;
    for (int k = 0; k < j->n && j->rc == SC_OK; k++) {
        size_t n = msg_floats(k);
        j->rc = rt_transport_recv(j->t, RT_MSG_ACTIVATION, 1, k, buf, n * sizeof(float), &j->err);
        if (j->rc != SC_OK)
            break;
        get(j->device, host, buf, n);
        if (!check_msg(0, k, host, n) && j->bad < 0)
            j->bad = k;
        for (size_t i = 0; i < n; i++)
            host[i] = msg_value(1, k, i);
        put(j->device, buf, host, n);
        j->rc = rt_transport_send(j->t, RT_MSG_GRADIENT, 1, k, buf, n * sizeof(float), &j->err);
    }
    free_buf(j->device, buf);
    free(host);
    return NULL;
}

static void run_flow(rt_transport *a, rt_transport *b, int n, bool device)
{
    flow_job ja = {.t = a, .n = n, .device = device};
    flow_job jb = {.t = b, .n = n, .device = device};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, first_stage, &ja), 0);
    second_stage(&jb);
    pthread_join(th, NULL);
    if (ja.rc != SC_OK || jb.rc != SC_OK)
        fail_msg("flow (%s buffers): %s / %s", device ? "device" : "host", ja.err.msg, jb.err.msg);
    assert_int_equal(ja.bad, -1);
    assert_int_equal(jb.bad, -1);
}

static void test_two_gpus_flow(void **state)
{
    (void)state;
    NEED_GPUS(2);
    rt_transport *a, *b;
    pair_open(&a, &b, 20000);
    run_flow(a, b, 12, false);
    run_flow(a, b, 12, true);
    assert_int_equal(rt_transport_pending(a), 0);
    rt_transport_destroy(&b);
    rt_transport_destroy(&a);
}

/* Asking for another message than the next one is an error naming both, never a wrong payload. */
static void test_two_gpus_out_of_order(void **state)
{
    (void)state;
    NEED_GPUS(2);
    rt_transport *a, *b;
    pair_open(&a, &b, 5000);
    float x[4] = {1, 2, 3, 4}, y[4] = {0, 0, 0, 0};
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_send(a, RT_MSG_ACTIVATION, 2, 1, x, sizeof x, &err), SC_OK);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 2, 0, y, sizeof y, &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "the next message is the activation (step 2, micro-batch 1)"));
    assert_true(y[0] == 0.0f); /* nothing of the wrong message reached the buffer */
    sc_err_clear(&err);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 2, 1, y, sizeof y, &err),
                     SC_ERR_UNAVAILABLE);
    rt_transport_destroy(&b);
    rt_transport_destroy(&a);

    /* a size that differs is named too */
    pair_open(&a, &b, 5000);
    sc_err_clear(&err);
    assert_int_equal(rt_transport_send(a, RT_MSG_ACTIVATION, 3, 0, x, 3 * sizeof(float), &err),
                     SC_OK);
    assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 3, 0, y, sizeof y, &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "has 12 bytes, expected 16"));
    rt_transport_destroy(&b);
    rt_transport_destroy(&a);
}

/* Two GPUs: every message received over nccl counts in its sender's link figures, as over zmq;
 * one that arrived while the receiver waited carries its transit (send stamp to arrival). Which
 * messages arrive while it waits is the machine's timing, so only their figures are checked. */
static void test_two_gpus_link_figures(void **state)
{
    (void)state;
    NEED_GPUS(2);
    rt_transport *a, *b;
    pair_open(&a, &b, 5000);
    float x[4] = {1, 2, 3, 4}, y[4];
    sc_err err;
    sc_err_clear(&err);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(rt_transport_send(a, RT_MSG_ACTIVATION, 1, k, x, sizeof x, &err), SC_OK);
        assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 1, k, y, sizeof y, &err), SC_OK);
    }
    rt_link_sample l[4];
    assert_int_equal(rt_transport_link_take(b, l, 4), 1);
    assert_false(l[0].from_next);
    assert_int_equal(l[0].from_copy, 0);
    assert_int_equal(l[0].messages, 3);
    assert_true(l[0].clean <= 3);
    if (l[0].clean > 0) {
        assert_int_equal(l[0].bytes, sizeof x);
        assert_true(l[0].delay_s > 0 && l[0].delay_s < 5.0); /* one host: one clock */
    }
    assert_int_equal(rt_transport_link_take(b, l, 4), 0); /* taken */
    rt_transport_destroy(&b);
    rt_transport_destroy(&a);
}

/* A neighbour that goes away: the wait ends within the timeout, never hangs. */
static void test_two_gpus_peer_gone(void **state)
{
    (void)state;
    NEED_GPUS(2);
    rt_transport *a, *b;
    pair_open(&a, &b, 2000);
    rt_transport_abort(b);
    rt_transport_destroy(&b);
    float y[4];
    sc_err err;
    sc_err_clear(&err);
    double t0 = sc_clock_now_s();
    sc_status rc = rt_transport_recv(a, RT_MSG_GRADIENT, 1, 0, y, sizeof y, &err);
    double took = sc_clock_now_s() - t0;
    assert_true(rc == SC_ERR_TIMEOUT || rc == SC_ERR_UNAVAILABLE);
    assert_true(took < 2.0 + 3.0);
    rt_transport_destroy(&a);
}

#endif /* SC_HAVE_NCCL */

/* ---- the local transport with device payloads (one GPU) ---- */

static rt_transport *local_new(const char *ep, bool device_payloads)
{
    rt_transport_cfg c = rt_transport_cfg_default();
    c.kind = RT_TRANSPORT_LOCAL;
    c.bind_endpoint = ep;
    c.device = 0;
    c.device_payloads = device_payloads;
    c.timeout_ms = 5000;
    rt_transport *t = NULL;
    sc_err err;
    sc_err_clear(&err);
    if (rt_transport_new(&t, &c, &err) != SC_OK)
        fail_msg("%s: %s", ep, err.msg);
    return t;
}

/* Messages from and into device and host memory between two GPU stages' transports, asked
 * for out of order, and from a GPU stage's transport to a plain one (host memory only). */
static void test_local_device_payloads(void **state)
{
    (void)state;
    NEED_GPUS(1);
    sc_err err;
    sc_err_clear(&err);
    kn_device dev;
    assert_int_equal(kn_device_parse("cuda:0", "device", &dev, &err), SC_OK);
    kn_ctx *ctx = NULL;
    assert_int_equal(kn_ctx_new(&ctx, dev, KN_PREC_FP32, &err), SC_OK);
    rt_transport *a = local_new("local://dev-a", true), *b = local_new("local://dev-b", true);
    rt_transport *h = local_new("local://host-c", false);
    assert_true(rt_transport_on_device(a));
    assert_false(rt_transport_on_device(h));
    assert_int_equal(rt_transport_connect(a, NULL, "local://dev-b", &err), SC_OK);
    assert_int_equal(rt_transport_connect(b, "local://dev-a", "local://host-c", &err), SC_OK);
    assert_int_equal(rt_transport_connect(h, "local://dev-b", NULL, &err), SC_OK);
    enum { N = 3, MAXF = 4096 };
    const size_t nf[N] = {MAXF, 10, 0};
    float *host = malloc(MAXF * sizeof(float)), *back = malloc(MAXF * sizeof(float));
    void *d_src, *d_dst;
    assert_int_equal(kn_ctx_alloc(ctx, MAXF * sizeof(float), &d_src, &err), SC_OK);
    assert_int_equal(kn_ctx_alloc(ctx, MAXF * sizeof(float), &d_dst, &err), SC_OK);
    /* a -> b: activations of micro-batches 0..2 sent from device memory, each its own values */
    for (int k = 0; k < N; k++) {
        for (size_t i = 0; i < MAXF; i++)
            host[i] = (float)(k * 100000 + (int)i);
        assert_int_equal(kn_ctx_upload(ctx, d_src, host, MAXF * sizeof(float), &err), SC_OK);
        assert_int_equal(
            rt_transport_send(a, RT_MSG_ACTIVATION, 1, k, d_src, nf[k] * sizeof(float), &err),
            SC_OK);
    }
    /* asked for last first; into device memory, then one into host memory */
    for (int k = N - 1; k >= 0; k--) {
        bool to_host = k == 0;
        memset(back, 0, MAXF * sizeof(float));
        assert_int_equal(rt_transport_recv(b, RT_MSG_ACTIVATION, 1, k, to_host ? back : d_dst,
                                           nf[k] * sizeof(float), &err),
                         SC_OK);
        if (!to_host && nf[k] > 0)
            assert_int_equal(kn_ctx_download(ctx, back, d_dst, nf[k] * sizeof(float), &err), SC_OK);
        for (size_t i = 0; i < nf[k]; i++)
            if (back[i] != (float)(k * 100000 + (int)i))
                fail_msg("micro-batch %d, value %zu: %g", k, i, back[i]);
    }
    assert_int_equal(rt_transport_pending(b), 0);
    /* b -> a: a gradient from host memory into a's device memory */
    for (size_t i = 0; i < 10; i++)
        host[i] = -(float)i;
    assert_int_equal(rt_transport_send(b, RT_MSG_GRADIENT, 2, 0, host, 10 * sizeof(float), &err),
                     SC_OK);
    assert_int_equal(rt_transport_recv(a, RT_MSG_GRADIENT, 2, 0, d_dst, 10 * sizeof(float), &err),
                     SC_OK);
    assert_int_equal(kn_ctx_download(ctx, back, d_dst, 10 * sizeof(float), &err), SC_OK);
    assert_memory_equal(back, host, 10 * sizeof(float));
    /* b -> h (host memory only): b's device payload lands in h's host buffer */
    for (size_t i = 0; i < MAXF; i++)
        host[i] = (float)i * 0.5f;
    assert_int_equal(kn_ctx_upload(ctx, d_src, host, MAXF * sizeof(float), &err), SC_OK);
    assert_int_equal(
        rt_transport_send(b, RT_MSG_ACTIVATION, 3, 0, d_src, MAXF * sizeof(float), &err), SC_OK);
    memset(back, 0, MAXF * sizeof(float));
    assert_int_equal(
        rt_transport_recv(h, RT_MSG_ACTIVATION, 3, 0, back, MAXF * sizeof(float), &err), SC_OK);
    assert_memory_equal(back, host, MAXF * sizeof(float));
    /* a message still queued when every transport is gone is freed with its buffer */
    assert_int_equal(rt_transport_send(a, RT_MSG_ACTIVATION, 4, 0, d_src, 64, &err), SC_OK);
    rt_transport_destroy(&h);
    rt_transport_destroy(&b);
    rt_transport_destroy(&a);
    kn_ctx_free(ctx, d_src);
    kn_ctx_free(ctx, d_dst);
    kn_ctx_destroy(&ctx);
    free(host);
    free(back);
}

/* ---- GPU stages against the CPU ---- */

/* One runner of a job in a thread of its own: connects (with the endpoints of its neighbours'
 * copies and of its own stage's, rt_runner_connect_group; an unreplicated stage has one or none
 * on each side and no peers), then trains `steps` steps, keeping the loss of each. */
typedef struct {
    rt_runner *r;
    const char *prev[2], *next[2], *peers[2];
    int n_prev, n_next, n_peers;
    int steps;
    sc_status rc;
    sc_err err;
    double loss[8];
} stage_job;

static void *stage_thread(void *arg)
{
    stage_job *j = arg;
    sc_err_clear(&j->err);
    j->rc = rt_runner_connect_group(j->r, j->prev, j->n_prev, j->next, j->n_next, j->peers,
                                    j->n_peers, &j->err);
    for (int s = 0; s < j->steps && j->rc == SC_OK; s++) {
        rt_report rep;
        j->rc = rt_runner_step(j->r, (uint64_t)s + 1, &rep, &j->err);
        j->loss[s] = rep.has_loss ? rep.loss : NAN;
    }
    return NULL;
}

/* An n-stage GPT pipeline (n = 2 or 3; 1f1b, 4 micro-batches): stage s on devices[s], over
 * transports[s] towards its previous boundary and transports_next[s] (NULL: the same) towards
 * its next; the last stage's loss of each step into loss[steps]. Connects and trains in one
 * thread per stage (nccl's connect is collective). */
static void run_stages(int n, const char *const *devices, const char *const *transports,
                       const char *const *transports_next, int steps, double *loss)
{
    rt_runner *rn[3] = {NULL, NULL, NULL};
    sc_err err;
    sc_err_clear(&err);
    for (int s = 0; s < n; s++) {
        rt_runner_cfg c = rt_runner_cfg_default();
        c.model_json = GPT_JSON;
        c.n_stages = n;
        c.stage = s;
        c.first_block = s * g_gpt_blocks / n;
        c.last_block = (s + 1) * g_gpt_blocks / n - 1;
        c.schedule = "1f1b";
        c.batch_size = 8;
        c.microbatches = 4;
        c.seed = 5;
        c.optimizer = "adamw";
        c.lr = 0.01;
        c.device = devices[s];
        c.transport = transports[s];
        c.transport_next = transports_next != NULL ? transports_next[s] : NULL;
        c.bind_endpoint = strcmp(transports[s], "local") == 0 ? "local://" : NULL;
        c.timeout_ms = 30000;
        sc_status rc = rt_runner_new(&rn[s], &c, &err);
        if (rc != SC_OK)
            fail_msg("stage %d on %s over %s: %s", s, devices[s], transports[s], err.msg);
    }
    stage_job jobs[3];
    pthread_t th[3];
    for (int s = 0; s < n; s++) {
        jobs[s] = (stage_job){.r = rn[s], .steps = steps, .n_prev = s > 0, .n_next = s < n - 1};
        jobs[s].prev[0] = s > 0 ? rt_runner_endpoint(rn[s - 1]) : NULL;
        jobs[s].next[0] = s < n - 1 ? rt_runner_endpoint(rn[s + 1]) : NULL;
        assert_int_equal(pthread_create(&th[s], NULL, stage_thread, &jobs[s]), 0);
    }
    for (int s = 0; s < n; s++)
        pthread_join(th[s], NULL);
    for (int s = 0; s < n; s++)
        if (jobs[s].rc != SC_OK)
            fail_msg("stage %d on %s over %s: %s", s, devices[s], transports[s], jobs[s].err.msg);
    for (int k = 0; k < steps; k++)
        loss[k] = jobs[n - 1].loss[k];
    for (int s = n - 1; s >= 0; s--)
        rt_runner_destroy(&rn[s]);
}

static void run_pipeline(const char *const devices[2], const char *transport, int steps,
                         double *loss)
{
    const char *tr[2] = {transport, transport};
    run_stages(2, devices, tr, NULL, steps, loss);
}

/* FP32 kernels against the CPU references: the losses agree to well within a step's change. */
static void assert_losses_close(const double *gpu, const double *cpu, int steps)
{
    for (int k = 0; k < steps; k++) {
        if (!(fabs(gpu[k] - cpu[k]) <= 1e-3 * fabs(cpu[k]) + 1e-4))
            fail_msg("step %d: loss %.7f on the GPU, %.7f on the CPU", k + 1, gpu[k], cpu[k]);
    }
    assert_true(cpu[steps - 1] < cpu[0]); /* it trains: the comparison is not of constants */
}

static void test_gpu_stages_local(void **state)
{
    (void)state;
    NEED_GPUS(1);
    enum { STEPS = 4 };
    double cpu[STEPS], gpu[STEPS];
    const char *on_cpu[2] = {"cpu", "cpu"}, *on_gpu[2] = {"cuda:0", "cuda:0"};
    run_pipeline(on_cpu, "local", STEPS, cpu);
    run_pipeline(on_gpu, "local", STEPS, gpu);
    assert_losses_close(gpu, cpu, STEPS);
}

static void test_gpu_stages_nccl(void **state)
{
    (void)state;
#ifndef SC_HAVE_NCCL
    skip();
#else
    NEED_GPUS(2);
    enum { STEPS = 4 };
    double cpu[STEPS], gpu[STEPS];
    const char *on_cpu[2] = {"cpu", "cpu"}, *on_gpus[2] = {"cuda:0", "cuda:1"};
    run_pipeline(on_cpu, "local", STEPS, cpu);
    run_pipeline(on_gpus, "nccl", STEPS, gpu);
    assert_losses_close(gpu, cpu, STEPS);
#endif
}

/* Three stages on one GPU over the local transport (the middle one receives and sends both
 * ways in device memory), and a GPU stage beside a CPU stage in one process. */
static void test_gpu_stages_local_three_and_mixed(void **state)
{
    (void)state;
    NEED_GPUS(1);
    enum { STEPS = 3 };
    double cpu[STEPS], gpu[STEPS];
    const char *on_cpu[3] = {"cpu", "cpu", "cpu"}, *on_gpu[3] = {"cuda:0", "cuda:0", "cuda:0"};
    const char *local[3] = {"local", "local", "local"};
    run_stages(3, on_cpu, local, NULL, STEPS, cpu);
    run_stages(3, on_gpu, local, NULL, STEPS, gpu);
    assert_losses_close(gpu, cpu, STEPS);
    double cpu2[STEPS], mixed[STEPS];
    const char *two_cpu[2] = {"cpu", "cpu"}, *gpu_cpu[2] = {"cuda:0", "cpu"};
    run_pipeline(two_cpu, "local", STEPS, cpu2);
    run_pipeline(gpu_cpu, "local", STEPS, mixed);
    assert_losses_close(mixed, cpu2, STEPS);
}

/* Two GPU stages over nccl and a CPU stage over zmq in one job: the middle stage holds one
 * transport per direction. */
static void test_gpu_cpu_mixed(void **state)
{
    (void)state;
#ifndef SC_HAVE_NCCL
    skip();
#else
    NEED_GPUS(2);
    enum { STEPS = 3 };
    double cpu[STEPS], mixed[STEPS];
    const char *on_cpu[3] = {"cpu", "cpu", "cpu"}, *local[3] = {"local", "local", "local"};
    run_stages(3, on_cpu, local, NULL, STEPS, cpu);
    const char *devs[3] = {"cuda:0", "cuda:1", "cpu"};
    const char *tr[3] = {"nccl", "nccl", "zmq"}, *tr_next[3] = {NULL, "zmq", NULL};
    run_stages(3, devs, tr, tr_next, STEPS, mixed);
    assert_losses_close(mixed, cpu, STEPS);
#endif
}

/* ---- the replicas' device all-reduce ---- */

#ifdef SC_HAVE_NCCL
static rt_allreduce *reduce_new(int device, int ranks, int rank, int timeout_ms)
{
    rt_allreduce_cfg c = {.device = device, .ranks = ranks, .rank = rank, .timeout_ms = timeout_ms};
    rt_allreduce *a = NULL;
    sc_err err;
    sc_err_clear(&err);
    if (rt_allreduce_new(&a, &c, &err) != SC_OK)
        fail_msg("all-reduce copy %d of %d on cuda:%d: %s", rank, ranks, device, err.msg);
    return a;
}

/* One GPU: copy 1 joins a communicator whose copy 0 never connects: a timeout, not a hang; and
 * rt_allreduce_abort from another thread (as rt_runner_abort calls it) ends the wait at once. */
static void test_reduce_copy_never_joins(void **state)
{
    (void)state;
    NEED_GPUS(1);
    for (int aborted = 0; aborted < 2; aborted++) {
        rt_allreduce *a0 = reduce_new(0, 2, 0, 400);
        rt_allreduce *a1 = reduce_new(0, 2, 1, aborted ? 60000 : 400);
        abort_job job = {.a = a1, .delay_ms = 300};
        pthread_t th;
        if (aborted)
            assert_int_equal(pthread_create(&th, NULL, abort_later, &job), 0);
        sc_err err;
        sc_err_clear(&err);
        uint64_t t0 = sc_clock_now_ns();
        sc_status rc = rt_allreduce_connect(a1, rt_allreduce_endpoint(a0), &err);
        double waited = (double)(sc_clock_now_ns() - t0) / 1e9;
        if (aborted)
            pthread_join(th, NULL);
        assert_int_equal(rc, aborted ? SC_ERR_CANCELLED : SC_ERR_TIMEOUT);
        assert_true(waited < 10.0);
        /* broken from then on: it says so instead of waiting again */
        double x = 0.0;
        sc_err_clear(&err);
        assert_int_not_equal(rt_allreduce_run(a1, NULL, 0, false, &x, &err), SC_OK);
        rt_allreduce_destroy(&a1);
        rt_allreduce_destroy(&a0);
    }
}

typedef struct {
    rt_allreduce *a;
    const char *ep0;
    float *dev;
    size_t n;
    bool mean;
    double scalar;
    sc_status rc;
    sc_err err;
} reduce_job;

static void *reduce_thread(void *arg)
{
    reduce_job *j = arg;
    sc_err_clear(&j->err);
    j->rc = rt_allreduce_connect(j->a, j->ep0, &j->err);
    for (int k = 0; k < 2 && j->rc == SC_OK; k++) /* a sum, then the mean of that sum */
        j->rc = rt_allreduce_run(j->a, j->dev, j->n, k == 1, &j->scalar, &j->err);
    return NULL;
}

/* Two GPUs: each copy's vector becomes the sum of both, then the mean of the sums (the same
 * vector); the scalars are summed twice. Small integers: every result is exact. */
static void test_reduce_two_gpus(void **state)
{
    (void)state;
    NEED_GPUS(2);
    enum { N = 1000 };
    kn_ctx *ctx[2] = {NULL, NULL};
    reduce_job jobs[2];
    float *host = malloc(N * sizeof *host);
    assert_non_null(host);
    sc_err err;
    sc_err_clear(&err);
    rt_allreduce *a[2] = {reduce_new(0, 2, 0, 30000), reduce_new(1, 2, 1, 30000)};
    for (int k = 0; k < 2; k++) {
        kn_device d = {.kind = KN_DEV_CUDA, .index = k};
        assert_int_equal(kn_ctx_new(&ctx[k], d, KN_PREC_FP32, &err), SC_OK);
        float *dev = NULL;
        assert_int_equal(kn_ctx_alloc(ctx[k], N * sizeof(float), (void **)&dev, &err), SC_OK);
        for (int i = 0; i < N; i++)
            host[i] = (float)(k == 0 ? i : 3 * i + 1);
        assert_int_equal(kn_ctx_upload(ctx[k], dev, host, N * sizeof(float), &err), SC_OK);
        assert_int_equal(kn_ctx_sync(ctx[k], &err), SC_OK);
        jobs[k] = (reduce_job){.a = a[k],
                               .ep0 = rt_allreduce_endpoint(a[0]),
                               .dev = dev,
                               .n = N,
                               .scalar = k == 0 ? 1.5 : 2.25};
    }
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        assert_int_equal(pthread_create(&th[k], NULL, reduce_thread, &jobs[k]), 0);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    uint64_t ready[2][4] = {{0}};
    for (int k = 0; k < 2; k++) {
        if (jobs[k].rc != SC_OK)
            fail_msg("copy %d: %s", k, jobs[k].err.msg);
        assert_int_equal(kn_ctx_download(ctx[k], host, jobs[k].dev, N * sizeof(float), &err),
                         SC_OK);
        for (int i = 0; i < N; i++) /* sum 4i + 1, then the mean of (4i + 1, 4i + 1) */
            if (host[i] != (float)(4 * i + 1))
                fail_msg("copy %d, value %d: %g, expected %d", k, i, host[i], 4 * i + 1);
        assert_true(jobs[k].scalar == 2.0 * (1.5 + 2.25)); /* summed twice */
        /* both copies' ready stamps, the same on both (one gathered array) */
        assert_int_equal(rt_allreduce_ready(a[k], ready[k], 4), 2);
        assert_true(ready[k][0] > 0 && ready[k][1] > 0);
        kn_ctx_free(ctx[k], jobs[k].dev);
        rt_allreduce_destroy(&a[k]);
        kn_ctx_destroy(&ctx[k]);
    }
    assert_memory_equal(ready[0], ready[1], 2 * sizeof(uint64_t));
    free(host);
}

/* Two GPUs: a replicated GPT stage whose copies (cuda:0, cuda:1) all-reduce over NCCL, against
 * the same job on CPUs (host all-reduce): the losses agree. Stage 0 runs as two copies, stage 1
 * once on cuda:0; the data plane is the local transport (routed, host memory). */
static void test_gpu_replicas_nccl(void **state)
{
    (void)state;
    NEED_GPUS(2);
    enum { STEPS = 4, RUNNERS = 3 };
    static const int reps[2] = {2, 1};
    double loss[2][STEPS];
    for (int gpu = 0; gpu < 2; gpu++) {
        static const char *devs[2][RUNNERS] = {{"cpu", "cpu", "cpu"},
                                               {"cuda:0", "cuda:1", "cuda:0"}};
        rt_runner *rn[RUNNERS] = {NULL, NULL, NULL};
        sc_err err;
        sc_err_clear(&err);
        for (int i = 0; i < RUNNERS; i++) {
            int s = i < 2 ? 0 : 1;
            rt_runner_cfg c = rt_runner_cfg_default();
            c.model_json = GPT_JSON;
            c.n_stages = 2;
            c.stage = s;
            c.first_block = s == 0 ? 0 : g_gpt_blocks / 2;
            c.last_block = s == 0 ? g_gpt_blocks / 2 - 1 : g_gpt_blocks - 1;
            c.schedule = "1f1b";
            c.batch_size = 8;
            c.microbatches = 4;
            c.seed = 5;
            c.optimizer = "adamw";
            c.lr = 0.01;
            c.device = devs[gpu][i];
            c.transport = "local";
            c.bind_endpoint = "local://";
            c.timeout_ms = 30000;
            c.replicas = reps[s];
            c.replica = i < 2 ? i : 0;
            c.prev_replicas = s == 1 ? 2 : 1;
            c.next_replicas = s == 0 ? 1 : 1;
            c.stage_replicas = reps;
            c.replica_reduce = gpu && s == 0 ? "nccl" : "host";
            if (rt_runner_new(&rn[i], &c, &err) != SC_OK)
                fail_msg("runner %d on %s: %s", i, c.device, err.msg);
        }
        const char *ep[RUNNERS];
        for (int i = 0; i < RUNNERS; i++)
            ep[i] = rt_runner_endpoint(rn[i]);
        if (gpu) /* copy 0 publishes the communicator's id beside its data endpoint */
            assert_non_null(strstr(ep[0], "|" RT_REDUCE_SCHEME "v1/"));
        stage_job jobs[RUNNERS];
        pthread_t th[RUNNERS];
        for (int i = 0; i < RUNNERS; i++) {
            jobs[i] = (stage_job){.r = rn[i], .steps = STEPS};
            if (i < 2) { /* a copy of stage 0: its peers and the next stage */
                jobs[i].peers[0] = ep[0];
                jobs[i].peers[1] = ep[1];
                jobs[i].n_peers = 2;
                jobs[i].next[0] = ep[2];
                jobs[i].n_next = 1;
            } else {
                jobs[i].prev[0] = ep[0];
                jobs[i].prev[1] = ep[1];
                jobs[i].n_prev = 2;
            }
            assert_int_equal(pthread_create(&th[i], NULL, stage_thread, &jobs[i]), 0);
        }
        for (int i = 0; i < RUNNERS; i++)
            pthread_join(th[i], NULL);
        for (int i = 0; i < RUNNERS; i++)
            if (jobs[i].rc != SC_OK)
                fail_msg("%s, runner %d: %s", gpu ? "GPUs" : "CPUs", i, jobs[i].err.msg);
        for (int k = 0; k < STEPS; k++)
            loss[gpu][k] = jobs[2].loss[k];
        for (int i = RUNNERS - 1; i >= 0; i--)
            rt_runner_destroy(&rn[i]);
    }
    assert_losses_close(loss[1], loss[0], STEPS);
}
#endif /* SC_HAVE_NCCL */

int main(void)
{
    const struct CMUnitTest tests[] = {
#ifdef SC_HAVE_NCCL
        cmocka_unit_test(test_peer_never_joins),
        cmocka_unit_test(test_abort_cancels),
        cmocka_unit_test(test_two_gpus_flow),
        cmocka_unit_test(test_two_gpus_out_of_order),
        cmocka_unit_test(test_two_gpus_link_figures),
        cmocka_unit_test(test_two_gpus_peer_gone),
#endif
        cmocka_unit_test(test_local_device_payloads),
        cmocka_unit_test(test_gpu_stages_local),
        cmocka_unit_test(test_gpu_stages_nccl),
        cmocka_unit_test(test_gpu_stages_local_three_and_mixed),
        cmocka_unit_test(test_gpu_cpu_mixed),
#ifdef SC_HAVE_NCCL
        cmocka_unit_test(test_reduce_copy_never_joins),
        cmocka_unit_test(test_reduce_two_gpus),
        cmocka_unit_test(test_gpu_replicas_nccl),
#endif
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
