/*
 * The device all-reduce of replicated GPU stages, the parts that need no GPU: its endpoint
 * (round trip, malformed input), picking it out of a joined endpoint, its configuration checks
 * and refusal where the build or the machine cannot run it, the runner's checks of
 * replica_reduce, the worker's check of an assignment's kinds, and the coordinator's rule for
 * which copies may use it. The all-reduce itself
 * runs in tests/gpu/test_transport_nccl_gpu.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "coordinator/transport_pick.h"
#include "worker/runtime/runner.h"
#include "worker/service.h"
#include "worker/transport/allreduce.h"
#include "worker/transport/transport.h"

#define MLP_JSON "{\"kind\": \"mlp\", \"sizes\": [12, 10, 8, 6, 4]}"

static void test_endpoint_round_trip(void **state)
{
    (void)state;
    unsigned char id[RT_NCCL_ID_BYTES], back[RT_NCCL_ID_BYTES];
    for (int i = 0; i < RT_NCCL_ID_BYTES; i++)
        id[i] = (unsigned char)(i * 37 + 5);
    char ep[RT_ENDPOINT_MAX];
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_reduce_endpoint_format(id, ep, sizeof ep, &err), SC_OK);
    assert_int_equal(strncmp(ep, "nccl-reduce://v1/", 17), 0);
    assert_int_equal(strlen(ep), 17 + 2 * RT_NCCL_ID_BYTES);
    memset(back, 0, sizeof back);
    assert_int_equal(rt_reduce_endpoint_parse(ep, back, &err), SC_OK);
    assert_memory_equal(back, id, sizeof id);
    /* upper-case digits read the same */
    char up[RT_ENDPOINT_MAX];
    strcpy(up, ep);
    for (char *p = up + 17; *p; p++)
        if (*p >= 'a' && *p <= 'f')
            *p = (char)(*p - 'a' + 'A');
    memset(back, 0, sizeof back);
    assert_int_equal(rt_reduce_endpoint_parse(up, back, &err), SC_OK);
    assert_memory_equal(back, id, sizeof id);
    /* no room: refused, nothing overrun */
    char small[40];
    memset(small, 'x', sizeof small);
    assert_int_equal(rt_reduce_endpoint_format(id, small, sizeof small, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "needed"));
}

static void test_endpoint_malformed(void **state)
{
    (void)state;
    unsigned char id[RT_NCCL_ID_BYTES], good[RT_NCCL_ID_BYTES];
    memset(good, 0xab, sizeof good);
    char ep[RT_ENDPOINT_MAX];
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_reduce_endpoint_format(good, ep, sizeof ep, &err), SC_OK);
    char bad[RT_ENDPOINT_MAX + 8];
    static const struct {
        int what;
        const char *want;
    } cases[] = {
        {0, "expected nccl-reduce://v1/<256 hex digits>"}, /* another scheme */
        {1, "unknown format version"},                     /* v2 */
        {2, "expected 256 hex digits"},                    /* one digit short */
        {3, "expected 256 hex digits"},                    /* one digit more */
        {4, "character 7 of the id is 'g'"},               /* not hex */
        {5, "expected nccl-reduce://"},                    /* NULL */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        strcpy(bad, ep);
        const char *in = bad;
        switch (cases[c].what) {
        case 0:
            memcpy(bad, "nccl-redux", 10);
            break;
        case 1:
            bad[strlen("nccl-reduce://v")] = '2';
            break;
        case 2:
            bad[strlen(bad) - 1] = '\0';
            break;
        case 3:
            strcat(bad, "0");
            break;
        case 4:
            bad[17 + 7] = 'g';
            break;
        case 5:
            in = NULL;
            break;
        }
        memset(id, 0x11, sizeof id);
        sc_err_clear(&err);
        assert_int_equal(rt_reduce_endpoint_parse(in, id, &err), SC_ERR_INVALID);
        if (strstr(err.msg, cases[c].want) == NULL)
            fail_msg("case %zu: \"%s\" does not say \"%s\"", c, err.msg, cases[c].want);
        for (size_t i = 0; i < sizeof id; i++) /* the output is untouched */
            assert_int_equal(id[i], 0x11);
    }
}

/* A copy 0 with a device all-reduce publishes "DATA|nccl-reduce://...": each reader takes its
 * part. */
static void test_endpoint_part(void **state)
{
    (void)state;
    char out[RT_ENDPOINT_MAX];
    bool found = true;
    sc_err err;
    sc_err_clear(&err);
    const char *joined = "tcp://10.0.0.2:4100|nccl-reduce://v1/00ff";
    assert_int_equal(rt_endpoint_part(joined, RT_REDUCE_SCHEME, out, sizeof out, &found, &err),
                     SC_OK);
    assert_true(found);
    assert_string_equal(out, "nccl-reduce://v1/00ff");
    assert_int_equal(rt_endpoint_part(joined, "tcp://", out, sizeof out, &found, &err), SC_OK);
    assert_true(found);
    assert_string_equal(out, "tcp://10.0.0.2:4100");
    assert_int_equal(rt_endpoint_pick(joined, RT_TRANSPORT_ZMQ, out, sizeof out, &err), SC_OK);
    assert_string_equal(out, "tcp://10.0.0.2:4100");
    /* three parts, the wanted one in the middle */
    assert_int_equal(rt_endpoint_part("local://a|nccl-reduce://v1/1|tcp://h:1", RT_REDUCE_SCHEME,
                                      out, sizeof out, &found, &err),
                     SC_OK);
    assert_true(found);
    assert_string_equal(out, "nccl-reduce://v1/1");
    /* absent: not an error, nothing found */
    assert_int_equal(rt_endpoint_part("tcp://h:1", RT_REDUCE_SCHEME, out, sizeof out, &found, &err),
                     SC_OK);
    assert_false(found);
    assert_string_equal(out, "");
    assert_int_equal(rt_endpoint_part(NULL, "tcp://", out, sizeof out, &found, &err), SC_OK);
    assert_false(found);
    /* too long for the room */
    char small[8];
    assert_int_equal(rt_endpoint_part(joined, "tcp://", small, sizeof small, &found, &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "longer than 7"));
}

static void test_allreduce_new(void **state)
{
    (void)state;
    rt_allreduce *a = NULL;
    sc_err err;
    sc_err_clear(&err);
    static const rt_allreduce_cfg bad[] = {
        {.device = 0, .ranks = 1, .rank = 0, .timeout_ms = 100},  /* one copy */
        {.device = 0, .ranks = 2, .rank = 2, .timeout_ms = 100},  /* rank out of range */
        {.device = 0, .ranks = 2, .rank = -1, .timeout_ms = 100}, /* negative rank */
        {.device = 0, .ranks = 2, .rank = 0, .timeout_ms = 0},    /* no timeout */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sc_err_clear(&err);
        assert_int_equal(rt_allreduce_new(&a, &bad[i], &err), SC_ERR_INVALID);
        assert_null(a);
        assert_non_null(strstr(err.msg, i < 3 ? "at least 2 copies" : "timeout_ms must be > 0"));
    }
    rt_allreduce_cfg c = {.device = 0, .ranks = 2, .rank = 0, .timeout_ms = 200};
    sc_err_clear(&err);
    sc_status rc = rt_allreduce_new(&a, &c, &err);
#ifndef SC_HAVE_NCCL
    assert_int_equal(rc, SC_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "CUDA and NCCL"));
    assert_null(a);
#else
    if (rc == SC_ERR_UNSUPPORTED) { /* no device, or no CUDA libraries, on this machine */
        assert_null(a);
        assert_true(strstr(err.msg, "no CUDA device is visible") != NULL ||
                    strstr(err.msg, "the GPU backend") != NULL);
        return;
    }
    /* a GPU is here: copy 0 publishes an id, copy 1 nothing; nothing runs unjoined */
    assert_int_equal(rc, SC_OK);
    unsigned char id[RT_NCCL_ID_BYTES];
    assert_int_equal(rt_reduce_endpoint_parse(rt_allreduce_endpoint(a), id, &err), SC_OK);
    double x = 1.0;
    assert_int_equal(rt_allreduce_run(a, NULL, 0, false, &x, &err), SC_ERR_PRECONDITION);
    sc_err_clear(&err);
    assert_int_equal(rt_allreduce_connect(a, "tcp://h:1", &err), SC_ERR_INVALID);
    /* copy 0 given some other id */
    char other[RT_ENDPOINT_MAX];
    id[0] ^= 1;
    assert_int_equal(rt_reduce_endpoint_format(id, other, sizeof other, &err), SC_OK);
    sc_err_clear(&err);
    assert_int_equal(rt_allreduce_connect(a, other, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "another copy 0's endpoint"));
    rt_allreduce_destroy(&a);
    assert_null(a);
    c.rank = 1;
    assert_int_equal(rt_allreduce_new(&a, &c, &err), SC_OK);
    assert_string_equal(rt_allreduce_endpoint(a), "");
    rt_allreduce_destroy(&a);
    c.device = 4096;
    sc_err_clear(&err);
    assert_int_equal(rt_allreduce_new(&a, &c, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "cuda:4096 does not exist"));
#endif
    rt_allreduce_destroy(&a); /* NULL is fine */
}

/* A replica_reduce the stage cannot use is refused, naming what would be valid. */
static void test_runner_checks(void **state)
{
    (void)state;
    static const struct {
        const char *how;
        int replicas;
        const char *device;
        const char *want;
    } cases[] = {
        {"gpu", 2, "cpu", "valid: \"host\" (the default), \"nccl\""},
        {"nccl", 1, "cpu", "needs a replicated stage (replicas >= 2, got 1)"},
        {"nccl", 2, "cpu", "needs a cuda:N device, got \"cpu\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rt_runner_cfg c = rt_runner_cfg_default();
        c.model_json = MLP_JSON;
        c.n_stages = 2;
        c.stage = 1;
        c.first_block = 2;
        c.last_block = 3;
        c.schedule = "gpipe";
        c.microbatches = 4;
        c.replicas = cases[i].replicas;
        c.replica = 0;
        c.transport = "local";
        c.bind_endpoint = "local://";
        c.device = cases[i].device;
        c.replica_reduce = cases[i].how;
        rt_runner *r = NULL;
        sc_err err;
        sc_err_clear(&err);
        assert_int_equal(rt_runner_new(&r, &c, &err), SC_ERR_INVALID);
        assert_null(r);
        if (strstr(err.msg, cases[i].want) == NULL)
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err.msg, cases[i].want);
    }
    /* the default and "host" are the same */
    for (int k = 0; k < 2; k++) {
        rt_runner_cfg c = rt_runner_cfg_default();
        c.model_json = MLP_JSON;
        c.n_stages = 1;
        c.first_block = 0;
        c.last_block = 3;
        c.replica_reduce = k == 0 ? NULL : "host";
        rt_runner *r = NULL;
        sc_err err;
        sc_err_clear(&err);
        assert_int_equal(rt_runner_new(&r, &c, &err), SC_OK);
        rt_runner_destroy(&r);
    }
}

static coord_stage_site gpu(const char *host, int device)
{
    coord_stage_site s = {.host = host,
                          .cuda = true,
                          .device = device,
                          .pci_bus_id = "",
                          .nccl = true,
                          .replicas = 3};
    return s;
}

static void test_coordinator_rule(void **state)
{
    (void)state;
    char why[128];
    coord_stage_site ok3[3] = {gpu("a", 0), gpu("a", 1), gpu("b", 0)};
    assert_true(coord_replicas_nccl_ok(ok3, 3, why, sizeof why));
    assert_string_equal(why, "");
    assert_true(coord_replicas_nccl_ok(ok3, 2, NULL, 0));
    assert_false(coord_replicas_nccl_ok(ok3, 1, why, sizeof why));
    assert_non_null(strstr(why, "single copy"));
    /* each condition alone rules it out, whichever copy breaks it */
    for (int c = 0; c < 4; c++)
        for (int at = 0; at < 3; at++) {
            coord_stage_site s[3] = {gpu("a", 0), gpu("a", 1), gpu("b", 0)};
            const char *want = NULL;
            switch (c) {
            case 0:
                s[at].cuda = false;
                want = "runs on a CPU";
                break;
            case 1:
                s[at].nccl = false;
                want = "has no NCCL";
                break;
            case 2: /* copy `at` moves onto another copy's GPU */
                s[at] = at == 0 ? gpu("a", 1) : gpu("a", 0);
                want = "same GPU";
                break;
            case 3: /* same host and index, distinct bus ids: distinct GPUs, fine */
                s[0].pci_bus_id = "0000:17:00.0";
                s[1].pci_bus_id = "0000:65:00.0";
                s[1].device = 0;
                want = NULL;
                break;
            }
            bool ok = coord_replicas_nccl_ok(s, 3, why, sizeof why);
            if (want == NULL) {
                assert_true(ok);
                continue;
            }
            assert_false(ok);
            if (strstr(why, want) == NULL)
                fail_msg("condition %d at copy %d: \"%s\" does not say \"%s\"", c, at, why, want);
        }
}

/* A worker refuses kinds it cannot run, naming the field and what it can. */
static void test_worker_assignment_kinds(void **state)
{
    (void)state;
    static const struct {
        const char *tr, *tr_next, *red;
        bool nccl_here;
        sc_status want;
        const char *says;
    } cases[] = {
        {"zmq", "", "", false, SC_OK, NULL},
        {"zmq", NULL, "host", false, SC_OK, NULL},
        {"zmq", "", "nccl", true, SC_OK, NULL},
        {"nccl", "zmq", "nccl", true, SC_OK, NULL},
        {"zmq", "", "nccl", false, SC_ERR_UNSUPPORTED, "replica_reduce 'nccl' is not supported"},
        {"zmq", "", "gpus", true, SC_ERR_INVALID, "(host, nccl)"},
        {"zmq", "", "gpus", false, SC_ERR_INVALID, "host; nccl needs a CUDA + NCCL build"},
        {"nccl", "", "", false, SC_ERR_UNSUPPORTED, "transport 'nccl' is not supported"},
        {"zmq", "nccl", "", false, SC_ERR_UNSUPPORTED, "transport_next 'nccl'"},
        {"tcp", "", "", true, SC_ERR_INVALID, "transport 'tcp'"},
        {NULL, "", "", true, SC_ERR_INVALID, "transport ''"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Stagecraft__AssignStageRequest req = STAGECRAFT__ASSIGN_STAGE_REQUEST__INIT;
        req.transport = (char *)cases[i].tr;
        req.transport_next = (char *)cases[i].tr_next;
        req.replica_reduce = (char *)cases[i].red;
        sc_err err;
        sc_err_clear(&err);
        sc_status rc = wk_assign_kinds_check(&req, cases[i].nccl_here, &err);
        if (rc != cases[i].want)
            fail_msg("case %zu: status %d, expected %d (%s)", i, (int)rc, (int)cases[i].want,
                     err.msg);
        if (cases[i].says != NULL && strstr(err.msg, cases[i].says) == NULL)
            fail_msg("case %zu: \"%s\" does not say \"%s\"", i, err.msg, cases[i].says);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoint_round_trip),     cmocka_unit_test(test_endpoint_malformed),
        cmocka_unit_test(test_endpoint_part),           cmocka_unit_test(test_allreduce_new),
        cmocka_unit_test(test_runner_checks),           cmocka_unit_test(test_coordinator_rule),
        cmocka_unit_test(test_worker_assignment_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
