/* The runtime tests' pipedream runs (runtime_harness.h): every runner in a thread of its own,
 * each call's forward and backward events copied out of its report into a pd_job, the flush's
 * too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>

#include "tests/unit/runtime_harness.h"

static void pd_log(pd_job *j, const rt_report *rep, int call)
{
    j->inflight_end[call] = rep->inflight_end;
    j->loss[call] = rep->loss;
    j->first_event[call] = j->n_log;
    for (int k = 0; k < rep->n_events && j->n_log < 1024; k++)
        j->log[j->n_log++] = rep->events[k];
}

static void *pd_thread(void *arg)
{
    pd_job *j = arg;
    sc_err_clear(&j->err);
    j->rc = SC_OK;
    int i = 0;
    for (; i < j->steps && j->rc == SC_OK; i++) {
        j->rc = rt_runner_step(j->r, j->first_step + (uint64_t)i, &j->last, &j->err);
        if (j->rc == SC_OK)
            pd_log(j, &j->last, i);
    }
    if (j->flush && j->rc == SC_OK) {
        rt_report rep;
        j->rc = rt_runner_flush(j->r, &rep, &j->err);
        if (j->rc == SC_OK)
            pd_log(j, &rep, i);
    }
    return NULL;
}
pd_job *pd_run_runners(rt_runner **rn, int n, uint64_t first_step, int steps, bool flush)
{
    pthread_t th[8];
    assert_true(n <= 8);
    pd_job *jobs = calloc((size_t)n, sizeof *jobs);
    assert_non_null(jobs);
    for (int s = 0; s < n; s++) {
        jobs[s].r = rn[s];
        jobs[s].first_step = first_step;
        jobs[s].steps = steps;
        jobs[s].flush = flush;
        assert_int_equal(pthread_create(&th[s], NULL, pd_thread, &jobs[s]), 0);
    }
    for (int s = 0; s < n; s++)
        pthread_join(th[s], NULL);
    for (int s = 0; s < n; s++) {
        if (jobs[s].rc != SC_OK)
            print_error("runner %d: %s\n", s, jobs[s].err.msg);
        assert_int_equal(jobs[s].rc, SC_OK);
    }
    return jobs;
}

pd_job *pd_run(const run_spec *rs, rt_runner **rn, uint64_t first_step, int steps, bool flush)
{
    return pd_run_runners(rn, rs->stages, first_step, steps, flush);
}
