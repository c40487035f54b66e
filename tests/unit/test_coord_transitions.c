/* coordinator/jobs_transitions: a move's pause as the job's state shows it. The job is
 * rebalancing from the moment its stages are told to pause, while they still train on to the
 * pause step; once every replica paused there, its reason (and its history's entry) says so and
 * the driver may move it. A stage that pauses past the step moves it for all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sc_util.h"
#include "coordinator/command_queue.h"
#include "coordinator/coord_internal.h"
#include "coordinator/jobs_internal.h"

typedef struct {
    char dir[64];
    coord *c;
    coord_progress *p;
    char id[COORD_ID_MAX];
} fixture;

/* A coordinator with a store and nothing else, and a running job of 2 stages, the second of
 * 2 replicas, at step 10. */
static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    sc_strlcpy(f->dir, "/tmp/sc_test_transitions_XXXXXX", sizeof f->dir);
    assert_non_null(mkdtemp(f->dir));
    f->c = calloc(1, sizeof *f->c);
    assert_non_null(f->c);
    pthread_mutex_init(&f->c->lock, NULL);
    pthread_cond_init(&f->c->wake, NULL);
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_store_open(&f->c->store, f->dir, &err), SC_OK);
    assert_int_equal(coord_registry_new(&f->c->registry, NULL, &err), SC_OK);
    coord_job job;
    memset(&job, 0, sizeof job);
    sc_strlcpy(job.name, "moving", sizeof job.name);
    job.spec_json = "{}";
    job.steps = 100;
    assert_int_equal(coord_store_job_insert(f->c->store, &job, &err), SC_OK);
    sc_strlcpy(f->id, job.id, sizeof f->id);
    coord_job_state path[] = {COORD_JOB_PROFILING, COORD_JOB_PLANNED, COORD_JOB_RUNNING};
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(coord_store_job_transition(f->c->store, f->id, path[i], "on", &err),
                         SC_OK);
    coord_progress *p = &f->c->running[f->c->n_running++];
    sc_strlcpy(p->job_id, f->id, sizeof p->job_id);
    p->n_stages = 2;
    p->replicas[0] = 1;
    p->replicas[1] = 2;
    p->steps = 100;
    sc_strlcpy(p->worker_of[0][0], "w-1", sizeof p->worker_of[0][0]);
    sc_strlcpy(p->worker_of[1][0], "w-2", sizeof p->worker_of[1][0]);
    sc_strlcpy(p->worker_of[1][1], "w-3", sizeof p->worker_of[1][1]);
    sc_strlcpy(p->why, "rebalance asked for", sizeof p->why);
    f->p = p;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    coord_queue_clear(f->c);
    coord_jobs_progress_clear(f->c);
    coord_store_close(&f->c->store);
    coord_registry_destroy(&f->c->registry);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    free(f->c);
    free(f);
    return 0;
}

static coord_job_state state_of(fixture *f, char *reason, size_t size)
{
    coord_job job;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_store_job_get(f->c->store, f->id, &job, &err), SC_OK);
    coord_job_state s = job.state;
    sc_strlcpy(reason, job.reason, size);
    coord_job_clear(&job);
    return s;
}

/* The history's last entry: how the job got to its state, and why. */
static void last_transition(fixture *f, coord_transition *out)
{
    coord_transition *h = NULL;
    size_t n = 0;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(coord_store_job_history(f->c->store, f->id, &h, &n, &err), SC_OK);
    assert_true(n > 0);
    *out = h[n - 1];
    free(h);
}

static size_t commands_to_pause(fixture *f, uint64_t step)
{
    size_t n = 0;
    coord_cmd *cmds = coord_queue_take(f->c);
    while (cmds != NULL) {
        coord_cmd *next = cmds->next;
        n += cmds->kind == STAGECRAFT__COMMAND_KIND__COMMAND_REBALANCE && cmds->step == step;
        free(cmds->payload_json);
        free(cmds);
        cmds = next;
    }
    return n;
}

static void test_rebalancing_while_pausing(void **state)
{
    fixture *f = *state;
    char reason[COORD_REASON_MAX];
    coord_jobs_pause_begin(f->c, f->p, 14);
    /* every replica is told, and status says rebalancing at once */
    assert_int_equal(commands_to_pause(f, 14), 3);
    assert_int_equal(state_of(f, reason, sizeof reason), COORD_JOB_REBALANCING);
    assert_string_equal(reason, "rebalance asked for; pausing after step 14");
    assert_false(coord_jobs_pause_done(f->p));
    /* two of three paused: still pausing */
    assert_true(coord_jobs_pause_report(f->c, f->p, 0, 0, 14));
    assert_true(coord_jobs_pause_report(f->c, f->p, 1, 1, 14));
    assert_false(coord_jobs_pause_done(f->p));
    assert_string_equal(reason, "rebalance asked for; pausing after step 14");
    /* the last: the move may begin, and the one history entry says how the pause went */
    assert_true(coord_jobs_pause_report(f->c, f->p, 1, 0, 14));
    assert_true(coord_jobs_pause_done(f->p));
    assert_int_equal(state_of(f, reason, sizeof reason), COORD_JOB_REBALANCING);
    assert_non_null(strstr(reason, "rebalance asked for; paused after step 14 in "));
    coord_transition t;
    last_transition(f, &t);
    assert_int_equal(t.from, COORD_JOB_RUNNING);
    assert_int_equal(t.to, COORD_JOB_REBALANCING);
    assert_string_equal(t.reason, reason);
}

static void test_pause_moves_for_a_late_stage(void **state)
{
    fixture *f = *state;
    char reason[COORD_REASON_MAX];
    coord_jobs_pause_begin(f->c, f->p, 14);
    assert_int_equal(commands_to_pause(f, 14), 3);
    assert_true(coord_jobs_pause_report(f->c, f->p, 0, 0, 14));
    /* one ran past the step before it was told: every replica is told the later one */
    assert_true(coord_jobs_pause_report(f->c, f->p, 1, 0, 16));
    assert_int_equal(f->p->pause_step, 16);
    assert_int_equal(commands_to_pause(f, 16), 3);
    assert_false(coord_jobs_pause_done(f->p));
    assert_true(coord_jobs_pause_report(f->c, f->p, 0, 0, 16));
    assert_true(coord_jobs_pause_report(f->c, f->p, 1, 1, 16));
    assert_true(coord_jobs_pause_done(f->p));
    assert_int_equal(state_of(f, reason, sizeof reason), COORD_JOB_REBALANCING);
    assert_non_null(strstr(reason, "paused after step 16 in "));
}

static void test_pipedream_pause_missed_recovers(void **state)
{
    fixture *f = *state;
    char reason[COORD_REASON_MAX];
    f->p->async = true;
    coord_jobs_pause_begin(f->c, f->p, 14);
    assert_false(coord_jobs_pause_report(f->c, f->p, 1, 0, 15)); /* p is gone */
    assert_int_equal(f->c->n_running, 0);
    assert_int_equal(state_of(f, reason, sizeof reason), COORD_JOB_RECOVERING);
    assert_non_null(strstr(reason, "the rebalance's pause missed"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rebalancing_while_pausing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_moves_for_a_late_stage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipedream_pause_missed_recovers, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
