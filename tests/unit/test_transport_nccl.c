/*
 * The nccl transport's parts that need no GPU: its endpoint encoding (round trip and malformed
 * input), the kind's parsing and refusal where the build or the machine cannot run it, the
 * runner's checks of an nccl stage, and the coordinator's choice of transport per job from the
 * stages' sites. The data path itself is tested in tests/gpu/test_transport_nccl_gpu.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_json.h"
#include "common/sc_util.h"
#include "coordinator/transport_pick.h"
#include "kernels/model.h"
#include "worker/runtime/runner.h"
#include "worker/transport/transport.h"

#define MLP_JSON "{\"kind\": \"mlp\", \"sizes\": [12, 10, 8, 6, 4]}"

static void fill_id(unsigned char *id, unsigned seed)
{
    for (int i = 0; i < RT_NCCL_ID_BYTES; i++)
        id[i] = (unsigned char)((seed * 131u + (unsigned)i * 29u) & 0xff);
}

static void test_endpoint_round_trip(void **state)
{
    (void)state;
    unsigned char a[RT_NCCL_ID_BYTES], g[RT_NCCL_ID_BYTES];
    unsigned char a2[RT_NCCL_ID_BYTES], g2[RT_NCCL_ID_BYTES];
    fill_id(a, 1);
    fill_id(g, 2);
    a[0] = 0x00;
    a[RT_NCCL_ID_BYTES - 1] = 0xff; /* both extremes of a byte */
    char ep[RT_ENDPOINT_MAX];
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_nccl_endpoint_format(a, g, ep, sizeof ep, &err), SC_OK);
    assert_true(rt_endpoint_is_nccl(ep));
    assert_int_equal(strncmp(ep, "nccl://v1/", 10), 0);
    assert_int_equal(strlen(ep), 10 + 4 * RT_NCCL_ID_BYTES + 1);
    bool ids = false;
    assert_int_equal(rt_nccl_endpoint_parse(ep, &ids, a2, g2, &err), SC_OK);
    assert_true(ids);
    assert_memory_equal(a, a2, sizeof a);
    assert_memory_equal(g, g2, sizeof g);
    /* the two ids are not swapped */
    assert_memory_not_equal(a2, g2, sizeof a2);

    /* upper-case hex is read too (an endpoint may pass through tools that change case) */
    for (char *p = ep + 10; *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    memset(a2, 0, sizeof a2);
    assert_int_equal(rt_nccl_endpoint_parse(ep, &ids, a2, g2, &err), SC_OK);
    assert_memory_equal(a, a2, sizeof a);

    /* the last stage's endpoint carries no ids and leaves the outputs alone */
    assert_int_equal(rt_nccl_endpoint_format(NULL, NULL, ep, sizeof ep, &err), SC_OK);
    assert_string_equal(ep, "nccl://v1/-");
    memset(a2, 0x5a, sizeof a2);
    assert_int_equal(rt_nccl_endpoint_parse(ep, &ids, a2, g2, &err), SC_OK);
    assert_false(ids);
    assert_int_equal(a2[0], 0x5a);
}

static void expect_parse_error(const char *ep, const char *says)
{
    unsigned char a[RT_NCCL_ID_BYTES], g[RT_NCCL_ID_BYTES];
    bool ids = true;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = rt_nccl_endpoint_parse(ep, &ids, a, g, &err);
    if (rc != SC_ERR_INVALID || strstr(err.msg, says) == NULL)
        fail_msg("endpoint \"%.60s\": rc %d, message '%s', wanted SC_ERR_INVALID with '%s'", ep, rc,
                 err.msg, says);
    assert_false(ids);
}

static void test_endpoint_malformed(void **state)
{
    (void)state;
    unsigned char a[RT_NCCL_ID_BYTES], g[RT_NCCL_ID_BYTES];
    fill_id(a, 3);
    fill_id(g, 4);
    char good[RT_ENDPOINT_MAX], bad[RT_ENDPOINT_MAX + 8];
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_nccl_endpoint_format(a, g, good, sizeof good, &err), SC_OK);

    expect_parse_error(NULL, "expected nccl://v1/");
    expect_parse_error("tcp://127.0.0.1:5555", "expected nccl://v1/");
    expect_parse_error("nccl://", "unknown format version");
    expect_parse_error("nccl://v2/-", "unknown format version (this build reads v1");
    expect_parse_error("nccl://v1/", "0 characters after");
    expect_parse_error("nccl://v1/--", "characters after");

    /* one id only */
    snprintf(bad, sizeof bad, "%.*s", 10 + 2 * RT_NCCL_ID_BYTES, good);
    expect_parse_error(bad, "expected 513");
    /* a digit missing */
    snprintf(bad, sizeof bad, "%.*s", (int)strlen(good) - 1, good);
    expect_parse_error(bad, "512 characters after");
    /* a digit too many */
    snprintf(bad, sizeof bad, "%s0", good);
    expect_parse_error(bad, "514 characters after");
    /* the separator replaced */
    strcpy(bad, good);
    bad[10 + 2 * RT_NCCL_ID_BYTES] = ':';
    expect_parse_error(bad, "separated by '/'");
    /* a non-hex digit in each id, named by position */
    strcpy(bad, good);
    bad[10 + 7] = 'g';
    expect_parse_error(bad, "character 7 of the first id is 'g'");
    strcpy(bad, good);
    bad[10 + 2 * RT_NCCL_ID_BYTES + 1 + 200] = ' ';
    expect_parse_error(bad, "character 200 of the second id is ' '");

    /* formatting: room and arguments */
    char small[64];
    assert_int_equal(rt_nccl_endpoint_format(a, g, small, sizeof small, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "needed"));
    sc_err_clear(&err);
    assert_int_equal(rt_nccl_endpoint_format(a, NULL, good, sizeof good, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "both ids or neither"));
    assert_int_equal(rt_nccl_endpoint_format(NULL, NULL, small, 11, &err), SC_ERR_INVALID);
}

static void test_kind_parse(void **state)
{
    (void)state;
    rt_transport_kind k = RT_TRANSPORT_ZMQ;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = rt_transport_kind_parse("nccl", "transport", &k, &err);
#ifdef SC_HAVE_NCCL
    assert_int_equal(rc, SC_OK);
    assert_int_equal(k, RT_TRANSPORT_NCCL);
#else
    assert_int_equal(rc, SC_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "needs a build with CUDA and NCCL"));
    assert_non_null(strstr(err.msg, "valid here: \"zmq\", \"local\""));
#endif
    sc_err_clear(&err);
    assert_int_equal(rt_transport_kind_parse("infiniband", "transport", &k, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "valid: \"zmq\", \"local\", \"nccl\""));
}

/* Without a GPU (this test's usual place) an nccl transport is refused cleanly; with one, it
 * binds and publishes ids, and a bad bind endpoint or device is named. */
static void test_nccl_new(void **state)
{
    (void)state;
    rt_transport_cfg c = rt_transport_cfg_default();
    c.kind = RT_TRANSPORT_NCCL;
    c.bind_endpoint = "nccl://";
    c.timeout_ms = 500;
    rt_transport *t = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = rt_transport_new(&t, &c, &err);
#ifndef SC_HAVE_NCCL
    assert_int_equal(rc, SC_ERR_UNSUPPORTED);
    assert_null(t);
    assert_non_null(strstr(err.msg, "CPU-only"));
#else
    if (rc == SC_ERR_UNSUPPORTED) { /* no device on this machine */
        assert_null(t);
        assert_non_null(strstr(err.msg, "no CUDA device is visible"));
        return;
    }
    assert_int_equal(rc, SC_OK);
    assert_true(rt_transport_on_device(t));
    assert_int_equal(rt_transport_pending(t), 0);
    unsigned char a[RT_NCCL_ID_BYTES], g[RT_NCCL_ID_BYTES];
    bool ids = false;
    assert_int_equal(rt_nccl_endpoint_parse(rt_transport_endpoint(t), &ids, a, g, &err), SC_OK);
    assert_true(ids);
    assert_memory_not_equal(a, g, sizeof a); /* two communicators, two ids */
    /* unconnected: sends and receives say so */
    float x = 1.0f;
    assert_int_equal(rt_transport_send(t, RT_MSG_ACTIVATION, 1, 0, &x, sizeof x, &err),
                     SC_ERR_PRECONDITION);
    /* a malformed neighbour endpoint is named before anything is started */
    sc_err_clear(&err);
    assert_int_equal(rt_transport_connect(t, "nccl://v1/xyz", NULL, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "nccl endpoint"));
    sc_err_clear(&err);
    assert_int_equal(rt_transport_connect(t, "tcp://127.0.0.1:1", NULL, &err), SC_ERR_INVALID);
    rt_transport_destroy(&t);

    c.bind_endpoint = "nccl://-";
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_OK);
    assert_string_equal(rt_transport_endpoint(t), "nccl://v1/-");
    /* bound as the last stage: a next stage is a contradiction */
    sc_err_clear(&err);
    assert_int_equal(rt_transport_connect(t, NULL, "nccl://v1/-", &err), SC_ERR_PRECONDITION);
    rt_transport_destroy(&t);

    c.bind_endpoint = "tcp://127.0.0.1:0";
    sc_err_clear(&err);
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "expected \"nccl://\""));
    c.bind_endpoint = "nccl://";
    c.device = 4096;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "cuda:4096 does not exist"));
    assert_null(t);
#endif
}

static void test_other_kinds_host_only(void **state)
{
    (void)state;
    rt_transport_cfg c = rt_transport_cfg_default();
    c.kind = RT_TRANSPORT_LOCAL;
    c.bind_endpoint = "local://";
    rt_transport *t = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_OK);
    assert_false(rt_transport_on_device(t));
    rt_transport_destroy(&t);
    c.kind = RT_TRANSPORT_ZMQ;
    c.bind_endpoint = "tcp://127.0.0.1:0";
    assert_int_equal(rt_transport_new(&t, &c, &err), SC_OK);
    assert_false(rt_transport_on_device(t));
    rt_transport_destroy(&t);
}

/* The runner refuses an nccl stage it cannot run, before any transport is made. */
static void test_runner_nccl_checks(void **state)
{
    (void)state;
    rt_runner_cfg c = rt_runner_cfg_default();
    c.model_json = MLP_JSON;
    c.n_stages = 2;
    c.stage = 0;
    c.first_block = 0;
    c.last_block = 1;
    c.transport = "nccl";
    c.device = "cpu";
    rt_runner *r = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = rt_runner_new(&r, &c, &err);
    assert_null(r);
#ifdef SC_HAVE_NCCL
    assert_int_equal(rc, SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "needs a cuda:N device"));
#else
    assert_int_equal(rc, SC_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "CUDA and NCCL"));
#endif
}

static coord_stage_site gpu_site(const char *host, int device)
{
    coord_stage_site s = {.host = host,
                          .cuda = true,
                          .device = device,
                          .pci_bus_id = "",
                          .nccl = true,
                          .replicas = 1};
    return s;
}

static void test_pick(void **state)
{
    (void)state;
    coord_stage_site sites[3] = {gpu_site("a", 0), gpu_site("a", 1), gpu_site("b", 0)};
    const char *k[2] = {NULL, NULL};
    sc_err err;
    sc_err_clear(&err);
    /* every boundary can: auto and nccl pick nccl, zmq stays zmq */
    assert_int_equal(coord_transport_pick("auto", sites, 3, k, &err), SC_OK);
    assert_string_equal(k[0], "nccl");
    assert_string_equal(k[1], "nccl");
    assert_int_equal(coord_transport_pick(NULL, sites, 3, k, &err), SC_OK);
    assert_string_equal(k[1], "nccl");
    assert_int_equal(coord_transport_pick("nccl", sites, 3, k, &err), SC_OK);
    assert_string_equal(k[0], "nccl");
    assert_int_equal(coord_transport_pick("zmq", sites, 3, k, &err), SC_OK);
    assert_string_equal(k[0], "zmq");
    assert_string_equal(k[1], "zmq");
    /* one stage: no boundary is written */
    k[0] = "untouched";
    assert_int_equal(coord_transport_pick("nccl", sites, 1, k, &err), SC_OK);
    assert_string_equal(k[0], "untouched");
    assert_int_equal(coord_transport_pick("tcp", sites, 3, k, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "valid: \"auto\", \"zmq\", \"nccl\""));

    char why[128];
    int n = 0;
    /* each condition alone rules the boundary between stages 1 and 2 out; auto then keeps nccl
     * on the first boundary and zmq on the second */
    for (int c = 0; c < 5; c++) {
        coord_stage_site s[3] = {gpu_site("a", 0), gpu_site("a", 1), gpu_site("b", 0)};
        const char *want = NULL;
        switch (c) {
        case 0:
            s[2].cuda = false;
            want = "runs on a CPU";
            break;
        case 1:
            s[2].nccl = false;
            want = "has no NCCL";
            break;
        case 2:
            s[2].replicas = 2;
            want = "replicated";
            break;
        case 3:
            s[2].host = "a";
            s[2].device = 1; /* the same GPU as stage 1 */
            want = "same GPU";
            break;
        case 4: /* same host and index, but the bus ids say they differ: distinct GPUs */
            s[2].host = "a";
            s[2].device = 1;
            s[1].pci_bus_id = "0000:17:00.0";
            s[2].pci_bus_id = "0000:65:00.0";
            want = NULL;
            break;
        }
        bool ok = coord_boundary_nccl_ok(&s[1], &s[2], why, sizeof why);
        assert_int_equal(coord_transport_pick("auto", s, 3, k, &err), SC_OK);
        if (want == NULL) {
            assert_true(ok);
            assert_string_equal(k[1], "nccl");
            continue;
        }
        assert_false(ok);
        assert_non_null(strstr(why, want));
        assert_string_equal(k[1], "zmq");
        /* a replicated stage 2 makes stage 1 route over zmq: the first boundary too */
        assert_string_equal(k[0], c == 2 ? "zmq" : "nccl");
        sc_err_clear(&err);
        assert_int_equal(coord_transport_pick("nccl", s, 3, k, &err), SC_ERR_UNSUPPORTED);
        assert_non_null(
            strstr(err.msg, c == 2 ? "between stages 0 and 1" : "between stages 1 and 2"));
        assert_non_null(strstr(err.msg, c == 2 ? "neighbouring stage is replicated" : want));
        n++;
    }
    assert_int_equal(n, 4);

    /* four stages, the last replicated: only the boundary away from it takes nccl */
    coord_stage_site f[4] = {gpu_site("a", 0), gpu_site("a", 1), gpu_site("b", 0),
                             gpu_site("b", 1)};
    f[3].replicas = 2;
    const char *k3[3];
    assert_int_equal(coord_transport_pick("auto", f, 4, k3, &err), SC_OK);
    assert_string_equal(k3[0], "nccl");
    assert_string_equal(k3[1], "zmq");
    assert_string_equal(k3[2], "zmq");
}

static void test_stage_transports(void **state)
{
    (void)state;
    const char *kinds[3] = {"nccl", "zmq", "zmq"};
    const char *t = NULL, *tn = NULL;
    coord_transport_of_stage(kinds, 4, 0, &t, &tn); /* first: its one boundary */
    assert_string_equal(t, "nccl");
    assert_string_equal(tn, "");
    coord_transport_of_stage(kinds, 4, 1, &t, &tn); /* nccl behind, zmq ahead */
    assert_string_equal(t, "nccl");
    assert_string_equal(tn, "zmq");
    coord_transport_of_stage(kinds, 4, 2, &t, &tn); /* zmq on both sides */
    assert_string_equal(t, "zmq");
    assert_string_equal(tn, "");
    coord_transport_of_stage(kinds, 4, 3, &t, &tn); /* last */
    assert_string_equal(t, "zmq");
    assert_string_equal(tn, "");
    coord_transport_of_stage(kinds, 1, 0, &t, &tn); /* one stage */
    assert_string_equal(t, "zmq");
    assert_string_equal(tn, "");
}

static void test_endpoint_pick(void **state)
{
    (void)state;
    char out[RT_ENDPOINT_MAX];
    sc_err err;
    sc_err_clear(&err);
    /* a single endpoint passes through whatever the kind (the backend checks it) */
    assert_int_equal(rt_endpoint_pick("tcp://h:1", RT_TRANSPORT_NCCL, out, sizeof out, &err),
                     SC_OK);
    assert_string_equal(out, "tcp://h:1");
    assert_int_equal(rt_endpoint_pick(NULL, RT_TRANSPORT_ZMQ, out, sizeof out, &err), SC_OK);
    assert_string_equal(out, "");
    /* a joined one gives the part of the kind, first or second */
    const char *both = "tcp://10.0.0.1:5000|nccl://v1/-";
    assert_int_equal(rt_endpoint_pick(both, RT_TRANSPORT_ZMQ, out, sizeof out, &err), SC_OK);
    assert_string_equal(out, "tcp://10.0.0.1:5000");
    assert_int_equal(rt_endpoint_pick(both, RT_TRANSPORT_NCCL, out, sizeof out, &err), SC_OK);
    assert_string_equal(out, "nccl://v1/-");
    assert_int_equal(
        rt_endpoint_pick("local://x|tcp://h:2", RT_TRANSPORT_LOCAL, out, sizeof out, &err), SC_OK);
    assert_string_equal(out, "local://x");
    /* no part of that kind, or too long */
    assert_int_equal(rt_endpoint_pick(both, RT_TRANSPORT_LOCAL, out, sizeof out, &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "offers no local://"));
    sc_err_clear(&err);
    assert_int_equal(rt_endpoint_pick(both, RT_TRANSPORT_ZMQ, out, 8, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "longer than 7"));
}

/* ---- one transport per direction: a stage between a zmq and a local boundary ---- */

typedef struct {
    rt_runner *r;
    char prev[RT_ENDPOINT_MAX], next[RT_ENDPOINT_MAX];
    int steps;
    sc_status rc;
    sc_err err;
    double loss[4];
    size_t np;
    float *params;
} split_job;

static void *split_thread(void *arg)
{
    split_job *j = arg;
    sc_err_clear(&j->err);
    j->rc = rt_runner_connect(j->r, j->prev, j->next, &j->err);
    for (int k = 0; k < j->steps && j->rc == SC_OK; k++) {
        rt_report rep;
        j->rc = rt_runner_step(j->r, (uint64_t)k + 1, &rep, &j->err);
        j->loss[k] = rep.has_loss ? rep.loss : 0.0;
    }
    j->np = rt_runner_param_count(j->r);
    j->params = malloc(j->np * sizeof(float) + 4);
    if (j->rc == SC_OK)
        j->rc = rt_runner_params_to_host(j->r, j->params, &j->err);
    return NULL;
}

static int mlp_blocks(void)
{
    sc_jdoc *doc = NULL;
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(sc_jdoc_parse(&doc, "model", MLP_JSON, strlen(MLP_JSON), &err), SC_OK);
    sc_jnode root = sc_jdoc_root(doc);
    assert_int_equal(kn_model_from_node(&m, &root, &err), SC_OK);
    int n = kn_model_block_count(m);
    kn_model_destroy(&m);
    sc_jdoc_destroy(&doc);
    return n;
}

/* Three CPU stages, 1f1b, 3 steps; stage s uses transports[s] towards its previous boundary and
 * transports_next[s] (NULL: the same) towards its next. Fills the last stage's losses and
 * every stage's parameters (params[s], heap). */
static void run_split(const char *const transports[3], const char *const transports_next[3],
                      double loss[3], float *params[3], size_t np[3])
{
    int nb = mlp_blocks();
    assert_true(nb >= 3);
    rt_runner *rn[3] = {NULL, NULL, NULL};
    sc_err err;
    sc_err_clear(&err);
    for (int s = 0; s < 3; s++) {
        rt_runner_cfg c = rt_runner_cfg_default();
        c.model_json = MLP_JSON;
        c.n_stages = 3;
        c.stage = s;
        c.first_block = s * nb / 3;
        c.last_block = (s + 1) * nb / 3 - 1;
        c.schedule = "1f1b";
        c.batch_size = 8;
        c.microbatches = 4;
        c.lr = 0.01;
        c.transport = transports[s];
        c.transport_next = transports_next[s];
        c.bind_endpoint = strcmp(transports[s], "local") == 0 ? "local://" : "tcp://127.0.0.1:0";
        c.timeout_ms = 20000;
        sc_status rc = rt_runner_new(&rn[s], &c, &err);
        if (rc != SC_OK)
            fail_msg("stage %d: %s", s, err.msg);
    }
    split_job jobs[3];
    pthread_t th[3];
    memset(jobs, 0, sizeof jobs);
    for (int s = 0; s < 3; s++) {
        jobs[s].r = rn[s];
        jobs[s].steps = 3;
        if (s > 0)
            sc_strlcpy(jobs[s].prev, rt_runner_endpoint(rn[s - 1]), sizeof jobs[s].prev);
        if (s < 2)
            sc_strlcpy(jobs[s].next, rt_runner_endpoint(rn[s + 1]), sizeof jobs[s].next);
    }
    for (int s = 0; s < 3; s++)
        assert_int_equal(pthread_create(&th[s], NULL, split_thread, &jobs[s]), 0);
    for (int s = 0; s < 3; s++)
        pthread_join(th[s], NULL);
    for (int s = 0; s < 3; s++) {
        if (jobs[s].rc != SC_OK)
            fail_msg("stage %d: %s", s, jobs[s].err.msg);
        params[s] = jobs[s].params;
        np[s] = jobs[s].np;
        rt_runner_destroy(&rn[s]);
    }
    for (int k = 0; k < 3; k++)
        loss[k] = jobs[2].loss[k];
}

static void test_transport_per_direction(void **state)
{
    (void)state;
    /* reference: local everywhere */
    const char *all_local[3] = {"local", "local", "local"}, *same[3] = {NULL, NULL, NULL};
    double ref_loss[3], loss[3];
    float *ref[3], *got[3];
    size_t ref_np[3], np[3];
    run_split(all_local, same, ref_loss, ref, ref_np);
    /* zmq between stages 0 and 1, local between 1 and 2: stage 1 holds one of each */
    const char *tr[3] = {"zmq", "zmq", "local"}, *tr_next[3] = {NULL, "local", NULL};
    run_split(tr, tr_next, loss, got, np);
    for (int k = 0; k < 3; k++)
        assert_true(loss[k] == ref_loss[k]); /* the same arithmetic: bit-identical */
    for (int s = 0; s < 3; s++) {
        assert_int_equal(np[s], ref_np[s]);
        assert_memory_equal(got[s], ref[s], np[s] * sizeof(float));
        free(got[s]);
        free(ref[s]);
    }
    assert_true(ref_loss[2] < ref_loss[0]);
}

/* The split stage publishes both endpoints; a neighbour given the wrong kind is told so. */
static void test_split_endpoint(void **state)
{
    (void)state;
    int nb = mlp_blocks();
    rt_runner_cfg c = rt_runner_cfg_default();
    c.model_json = MLP_JSON;
    c.n_stages = 3;
    c.stage = 1;
    c.first_block = nb / 3;
    c.last_block = 2 * nb / 3 - 1;
    c.transport = "zmq";
    c.transport_next = "local";
    rt_runner *r = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_runner_new(&r, &c, &err), SC_OK);
    const char *ep = rt_runner_endpoint(r);
    const char *bar = strchr(ep, RT_ENDPOINT_SEP);
    assert_non_null(bar);
    assert_int_equal(strncmp(ep, "tcp://127.0.0.1:", 16), 0);
    assert_int_equal(strncmp(bar + 1, "local://", 8), 0);
    /* the next stage offers no local endpoint */
    assert_int_equal(
        rt_runner_connect(r, "tcp://127.0.0.1:1", "tcp://127.0.0.1:1|tcp://127.0.0.1:2", &err),
        SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "offers no local://"));
    rt_runner_destroy(&r);
    /* with replicas, one transport only */
    c.replicas = 2;
    c.microbatches = 2;
    sc_err_clear(&err);
    assert_int_equal(rt_runner_new(&r, &c, &err), SC_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "transports per boundary"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoint_round_trip),
        cmocka_unit_test(test_endpoint_malformed),
        cmocka_unit_test(test_kind_parse),
        cmocka_unit_test(test_nccl_new),
        cmocka_unit_test(test_other_kinds_host_only),
        cmocka_unit_test(test_runner_nccl_checks),
        cmocka_unit_test(test_pick),
        cmocka_unit_test(test_stage_transports),
        cmocka_unit_test(test_endpoint_pick),
        cmocka_unit_test(test_transport_per_direction),
        cmocka_unit_test(test_split_endpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
