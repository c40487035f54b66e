/* The runtime tests' pipelines with replicated stages (runtime_harness.h): every copy of every
 * stage made and connected to its neighbours' copies and its own stage's, run one thread per
 * copy, and the copies' parameters checked identical. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/runtime_harness.h"

static const char *repl_endpoint(const repl_pipe *rp, int i, char *buf, size_t size)
{
    const char *ep = rt_runner_endpoint(rp->r[i]);
    const char *joined = run_opts_get()->joined_to_copy0;
    if (joined == NULL || rp->replica_of[i] != 0)
        return ep;
    size_t n = strlen(ep), m = strlen(joined);
    assert_true(n + 1 + m < size);
    memcpy(buf, ep, n);
    buf[n] = RT_ENDPOINT_SEP;
    memcpy(buf + n + 1, joined, m + 1);
    return buf;
}

void repl_open(repl_pipe *rp, const run_spec *rs, const int *reps)
{
    memset(rp, 0, sizeof *rp);
    rp->rs = rs;
    rp->reps = reps;
    int nb = model_blocks(rs->model);
    sc_err err;
    sc_err_clear(&err);
    for (int s = 0; s < rs->stages; s++) {
        rp->base[s] = rp->n;
        for (int k = 0; k < reps[s]; k++) {
            rt_runner_cfg c = spec_cfg(rs, s, nb);
            c.replicas = reps[s];
            c.replica = k;
            c.prev_replicas = s > 0 ? reps[s - 1] : 1;
            c.next_replicas = s < rs->stages - 1 ? reps[s + 1] : 1;
            c.stage_replicas = reps;
            assert_true(rp->n < MAX_AGENTS);
            sc_status rc = rt_runner_new(&rp->r[rp->n], &c, &err);
            if (rc != SC_OK)
                print_error("stage %d replica %d: %s\n", s, k, err.msg);
            assert_int_equal(rc, SC_OK);
            rp->stage_of[rp->n] = s;
            rp->replica_of[rp->n] = k;
            rp->n++;
        }
    }
    for (int i = 0; i < rp->n; i++) {
        int s = rp->stage_of[i];
        const char *prev[MAX_AGENTS], *next[MAX_AGENTS], *peers[MAX_AGENTS];
        static char buf[3][MAX_AGENTS][2 * RT_ENDPOINT_MAX];
        int np = s > 0 ? reps[s - 1] : 0, nn = s < rs->stages - 1 ? reps[s + 1] : 0;
        for (int k = 0; k < np; k++)
            prev[k] = repl_endpoint(rp, rp->base[s - 1] + k, buf[0][k], sizeof buf[0][k]);
        for (int k = 0; k < nn; k++)
            next[k] = repl_endpoint(rp, rp->base[s + 1] + k, buf[1][k], sizeof buf[1][k]);
        for (int k = 0; k < reps[s]; k++)
            peers[k] = k == rp->replica_of[i]
                           ? NULL
                           : repl_endpoint(rp, rp->base[s] + k, buf[2][k], sizeof buf[2][k]);
        sc_status rc = rt_runner_connect_group(rp->r[i], prev, np, next, nn, peers, reps[s], &err);
        if (rc != SC_OK)
            print_error("connect %d: %s\n", i, err.msg);
        assert_int_equal(rc, SC_OK);
    }
}

void repl_run(repl_pipe *rp, uint64_t first_step, int steps, rt_report *reports)
{
    pthread_t th[MAX_AGENTS];
    stage_job jobs[MAX_AGENTS];
    for (int i = 0; i < rp->n; i++) {
        jobs[i] = (stage_job){.r = rp->r[i], .first_step = first_step, .steps = steps};
        assert_int_equal(pthread_create(&th[i], NULL, stage_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < rp->n; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < rp->n; i++) {
        if (jobs[i].rc != SC_OK)
            print_error("runner %d: %s\n", i, jobs[i].err.msg);
        assert_int_equal(jobs[i].rc, SC_OK);
        if (reports != NULL)
            reports[i] = jobs[i].last;
    }
}

float *repl_params(repl_pipe *rp, size_t *count)
{
    size_t total = 0;
    for (int s = 0; s < rp->rs->stages; s++)
        total += rt_runner_param_count(rp->r[rp->base[s]]);
    float *all = malloc(total * sizeof *all);
    assert_non_null(all);
    sc_err err;
    size_t off = 0;
    for (int s = 0; s < rp->rs->stages; s++) {
        rt_runner *r0 = rp->r[rp->base[s]];
        size_t n = rt_runner_param_count(r0);
        assert_int_equal(rt_runner_params_to_host(r0, all + off, &err), SC_OK);
        float *other = malloc(n * sizeof *other + 1);
        for (int k = 1; k < rp->reps[s]; k++) {
            rt_runner *rk = rp->r[rp->base[s] + k];
            assert_int_equal(rt_runner_param_count(rk), n);
            assert_int_equal(rt_runner_params_to_host(rk, other, &err), SC_OK);
            assert_memory_equal(other, all + off, n * sizeof *other);
        }
        free(other);
        off += n;
    }
    *count = total;
    return all;
}

void repl_close(repl_pipe *rp)
{
    for (int i = 0; i < rp->n; i++)
        rt_runner_destroy(&rp->r[i]);
}
