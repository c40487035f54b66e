/* worker/runtime/runner across processes and failures: a pipeline of separate worker processes
 * over zmq trains to the single-stage result; a worker killed mid-job, or a vanished neighbour,
 * fails its neighbours' steps within the timeout instead of hanging; a message larger than any
 * peer may send is refused before it is allocated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/runtime_harness.h"
#include "worker/transport/transport.h"

#define EXIT_TIMEOUT 3 /* a child whose step failed with SC_ERR_TIMEOUT / SC_ERR_UNAVAILABLE */

static bool write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

/* A worker process: binds, publishes its endpoint, learns its neighbours', trains, sends its
 * parameters back. No cmocka here: the child reports through its exit status. */
static void child_main(const run_spec *rs, int s, int up, int down, int timeout_ms, int die_after)
{
    rt_runner_cfg c = spec_cfg(rs, s, model_blocks(rs->model));
    c.timeout_ms = timeout_ms;
    rt_runner *r = NULL;
    sc_err err;
    sc_err_clear(&err);
    char ep[RT_ENDPOINT_MAX] = {0}, prev[RT_ENDPOINT_MAX], next[RT_ENDPOINT_MAX];
    if (rt_runner_new(&r, &c, &err) != SC_OK)
        _exit(1);
    snprintf(ep, sizeof ep, "%s", rt_runner_endpoint(r));
    if (!write_all(up, ep, sizeof ep) || !read_all(down, prev, sizeof prev) ||
        !read_all(down, next, sizeof next))
        _exit(1);
    if (rt_runner_connect(r, prev, next, &err) != SC_OK)
        _exit(1);
    for (int i = 0; i < rs->steps; i++) {
        if (i == die_after)
            raise(SIGKILL); /* the worker dies mid-job, without any goodbye */
        sc_status rc = rt_runner_step(r, (uint64_t)i + 1, NULL, &err);
        if (rc != SC_OK)
            fprintf(stderr, "child %d: %s\n", s, err.msg);
        if (rc == SC_ERR_TIMEOUT || rc == SC_ERR_UNAVAILABLE)
            _exit(EXIT_TIMEOUT);
        if (rc != SC_OK)
            _exit(1);
    }
    size_t n = rt_runner_param_count(r);
    float *p = malloc(n * sizeof *p + 1);
    if (p == NULL || rt_runner_params_to_host(r, p, &err) != SC_OK)
        _exit(1);
    /* Closing delivers what is still queued (the last stage's final gradients). */
    rt_runner_destroy(&r);
    if (!write_all(up, &n, sizeof n) || !write_all(up, p, n * sizeof *p))
        _exit(1);
    free(p);
    _exit(0);
}

/* Runs the pipeline as p processes. Returns the concatenated parameters (NULL when a child
 * failed) and each child's wait status. */
static float *train_processes(const run_spec *rs, int timeout_ms, int victim, int die_after,
                              size_t *count, int *status)
{
    int p = rs->stages;
    pid_t pid[8];
    int up[8][2], down[8][2];
    fflush(NULL);
    for (int s = 0; s < p; s++) {
        assert_int_equal(pipe(up[s]), 0);
        assert_int_equal(pipe(down[s]), 0);
        pid[s] = fork();
        assert_true(pid[s] >= 0);
        if (pid[s] == 0) {
            close(up[s][0]);
            close(down[s][1]);
            child_main(rs, s, up[s][1], down[s][0], timeout_ms, s == victim ? die_after : -1);
        }
        close(up[s][1]);
        close(down[s][0]);
    }
    char eps[8][RT_ENDPOINT_MAX];
    for (int s = 0; s < p; s++)
        assert_true(read_all(up[s][0], eps[s], sizeof eps[s]));
    for (int s = 0; s < p; s++) {
        char none[RT_ENDPOINT_MAX] = {0};
        assert_true(write_all(down[s][1], s > 0 ? eps[s - 1] : none, RT_ENDPOINT_MAX));
        assert_true(write_all(down[s][1], s < p - 1 ? eps[s + 1] : none, RT_ENDPOINT_MAX));
    }
    float *all = NULL;
    size_t total = 0;
    bool ok = true;
    for (int s = 0; s < p; s++) {
        size_t n = 0;
        if (!ok || !read_all(up[s][0], &n, sizeof n)) {
            ok = false;
            continue;
        }
        float *grown = realloc(all, (total + n) * sizeof *all);
        assert_non_null(grown);
        all = grown;
        ok = read_all(up[s][0], all + total, n * sizeof *all);
        total += n;
    }
    for (int s = 0; s < p; s++) {
        assert_int_equal(waitpid(pid[s], &status[s], 0), pid[s]);
        close(up[s][0]);
        close(down[s][1]);
    }
    if (!ok) {
        free(all);
        all = NULL;
    }
    *count = total;
    return all;
}

static void test_equivalence_processes(void **state)
{
    (void)state;
    const run_spec specs[] = {
        {GPT_JSON, "gpipe", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {GPT_JSON, "1f1b", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0},
        {VGG_JSON, "1f1b", 4, 4, 4, 2, "sgd", "zmq", NULL, NULL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        size_t n_ref = 0, n_proc = 0;
        float *init = NULL;
        float *ref = train_reference(&specs[i], &n_ref, &init);
        int status[8];
        float *got = train_processes(&specs[i], 20000, -1, -1, &n_proc, status);
        for (int s = 0; s < specs[i].stages; s++) {
            if (!WIFEXITED(status[s]) || WEXITSTATUS(status[s]) != 0)
                print_error("spec %zu stage %d: wait status 0x%x\n", i, s, status[s]);
            assert_true(WIFEXITED(status[s]));
            assert_int_equal(WEXITSTATUS(status[s]), 0);
        }
        assert_non_null(got);
        assert_int_equal(n_proc, n_ref);
        assert_params_close(got, ref, init, n_ref);
        free(ref);
        free(init);
        free(got);
    }
}

/* A worker killed at the start of its second step: its neighbours' steps fail with a timeout
 * instead of hanging, and every process ends. */
static void test_worker_killed(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "1f1b", 4, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0};
    int status[8];
    size_t n = 0;
    float *got = train_processes(&rs, 500, 2, 1, &n, status);
    assert_null(got);
    assert_true(WIFSIGNALED(status[2]) && WTERMSIG(status[2]) == SIGKILL);
    for (int s = 0; s < 4; s++) {
        if (s == 2)
            continue;
        /* every survivor waits on the dead stage, directly or through a neighbour */
        assert_true(WIFEXITED(status[s]));
        assert_int_equal(WEXITSTATUS(status[s]), EXIT_TIMEOUT);
    }
}

static void test_peer_gone(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "gpipe", 2, 4, 2, 1, "adamw", "zmq", NULL, NULL, NULL, 0};
    int nb = model_blocks(rs.model);
    rt_runner *r[2] = {0};
    sc_err err;
    sc_err_clear(&err);
    for (int s = 0; s < 2; s++) {
        rt_runner_cfg c = spec_cfg(&rs, s, nb);
        c.timeout_ms = 300;
        assert_int_equal(rt_runner_new(&r[s], &c, &err), SC_OK);
    }
    assert_int_equal(rt_runner_connect(r[0], NULL, rt_runner_endpoint(r[1]), &err), SC_OK);
    rt_runner_destroy(&r[1]); /* the last stage's worker dies */
    rt_report rep;
    assert_int_equal(rt_runner_step(r[0], 1, &rep, &err), SC_ERR_TIMEOUT);
    assert_non_null(strstr(err.msg, "gradient"));
    sc_err_clear(&err);
    assert_int_equal(rt_runner_step(r[0], 2, &rep, &err), SC_ERR_PRECONDITION);
    rt_runner_destroy(&r[0]);
}

/* A zmq stage's inbox takes no message larger than any its peers can legitimately send (a whole
 * batch of its widest boundary): a larger one, from whoever reaches the port, is refused by zmq
 * before it is allocated, and the receive waiting for it times out as for a lost peer. Stage 1
 * of an MLP [12, 10, 8, 6, 4] in two stages, batch 8, expects 4 x 8 floats per micro-batch; a
 * "stage 0" sends 64 KiB, far above 8 samples of any of its boundaries. */
static void test_oversized_message_refused(void **state)
{
    (void)state;
    const run_spec rs = {MLP_JSON, "gpipe", 2, 8, 2, 1, "sgd", "zmq", NULL, NULL, NULL, 0};
    rt_runner_cfg c = spec_cfg(&rs, 1, model_blocks(rs.model));
    c.timeout_ms = 500;
    rt_runner *r = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_runner_new(&r, &c, &err), SC_OK);
    rt_transport_cfg tc = rt_transport_cfg_default();
    tc.tag = c.tag;
    tc.timeout_ms = 500;
    rt_transport *fake = NULL;
    assert_int_equal(rt_transport_new(&fake, &tc, &err), SC_OK);
    assert_int_equal(rt_transport_connect(fake, NULL, rt_runner_endpoint(r), &err), SC_OK);
    assert_int_equal(rt_runner_connect(r, rt_transport_endpoint(fake), NULL, &err), SC_OK);
    size_t big = 64 * 1024;
    void *junk = calloc(1, big);
    assert_non_null(junk);
    assert_int_equal(rt_transport_send(fake, RT_MSG_ACTIVATION, 1, 0, junk, big, &err), SC_OK);
    rt_report rep;
    sc_status rc = rt_runner_step(r, 1, &rep, &err);
    if (rc != SC_ERR_TIMEOUT)
        fail_msg("step: %s: %s (want a timeout: the message should never arrive)",
                 sc_status_name(rc), err.msg);
    free(junk);
    rt_transport_destroy(&fake);
    rt_runner_destroy(&r);
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equivalence_processes),
        cmocka_unit_test(test_worker_killed),
        cmocka_unit_test(test_peer_gone),
        cmocka_unit_test(test_oversized_message_refused),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
