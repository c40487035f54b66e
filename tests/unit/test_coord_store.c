/* coordinator/store + job_state: jobs, transitions with reasons, workers, reopening. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "coordinator/store.h"
#include "coordinator/store_reserve.h"

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    strcpy(dir, "/tmp/sc_store_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_transition_table(void **state)
{
    (void)state;
    assert_true(coord_job_transition_allowed(COORD_JOB_SUBMITTED, COORD_JOB_PROFILING));
    assert_true(coord_job_transition_allowed(COORD_JOB_PLANNED, COORD_JOB_RUNNING));
    assert_true(coord_job_transition_allowed(COORD_JOB_RUNNING, COORD_JOB_RECOVERING));
    assert_true(coord_job_transition_allowed(COORD_JOB_RECOVERING, COORD_JOB_RUNNING));
    assert_true(coord_job_transition_allowed(COORD_JOB_PROFILING, COORD_JOB_CANCELLED));
    assert_false(coord_job_transition_allowed(COORD_JOB_SUBMITTED, COORD_JOB_SUCCEEDED));
    assert_false(coord_job_transition_allowed(COORD_JOB_SUCCEEDED, COORD_JOB_RUNNING));
    assert_false(coord_job_transition_allowed(COORD_JOB_CANCELLED, COORD_JOB_FAILED));
    assert_false(coord_job_transition_allowed(COORD_JOB_RUNNING, COORD_JOB_RUNNING));
    coord_job_state s;
    assert_true(coord_job_state_parse("recovering", &s));
    assert_int_equal(s, COORD_JOB_RECOVERING);
    assert_false(coord_job_state_parse("paused", &s));
    for (int i = 0; i < COORD_JOB_STATE_COUNT; i++) {
        assert_true(coord_job_state_parse(coord_job_state_name((coord_job_state)i), &s));
        assert_int_equal(s, i);
    }
}

static void test_jobs_survive_reopen(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    coord_store *s = NULL;
    assert_int_equal(coord_store_open(&s, dir, &err), SC_OK);

    coord_job a = {0}, b = {0};
    strcpy(a.name, "gpt-demo");
    a.spec_json = "{\"format\": \"stagecraft-job\"}";
    a.steps = 200;
    assert_int_equal(coord_store_job_insert(s, &a, &err), SC_OK);
    strcpy(b.name, "vgg");
    b.spec_json = "{}";
    assert_int_equal(coord_store_job_insert(s, &b, &err), SC_OK);
    assert_string_equal(a.id, "job-1");
    assert_string_equal(b.id, "job-2");

    assert_int_equal(
        coord_store_job_transition(s, a.id, COORD_JOB_PROFILING, "3 workers chosen", &err), SC_OK);
    assert_int_equal(coord_store_job_set_plan(s, a.id, "{\"plans\": []}", &err), SC_OK);
    assert_int_equal(coord_store_job_transition(s, a.id, COORD_JOB_PLANNED, "hetero plan", &err),
                     SC_OK);
    assert_int_equal(coord_store_job_set_progress(s, a.id, 120, 100, &err), SC_OK);
    assert_int_equal(coord_store_job_set_workers(s, a.id, "w-1,w-3", &err), SC_OK);

    /* a forbidden transition is refused and changes nothing */
    assert_int_equal(coord_store_job_transition(s, a.id, COORD_JOB_SUCCEEDED, "skip", &err),
                     SC_ERR_PRECONDITION);
    assert_string_equal(err.msg, "job job-1 cannot go from planned to succeeded");
    sc_err_clear(&err);
    assert_int_equal(coord_store_job_transition(s, "job-9", COORD_JOB_FAILED, "x", &err),
                     SC_ERR_NOT_FOUND);
    sc_err_clear(&err);
    coord_store_close(&s);
    assert_null(s);

    /* reopen: everything is still there */
    assert_int_equal(coord_store_open(&s, dir, &err), SC_OK);
    coord_job got;
    assert_int_equal(coord_store_job_get(s, "job-1", &got, &err), SC_OK);
    assert_string_equal(got.name, "gpt-demo");
    assert_int_equal(got.state, COORD_JOB_PLANNED);
    assert_string_equal(got.reason, "hetero plan");
    assert_string_equal(got.plan_json, "{\"plans\": []}");
    assert_string_equal(got.spec_json, "{\"format\": \"stagecraft-job\"}");
    assert_int_equal(got.step, 120);
    assert_int_equal(got.last_checkpoint_step, 100);
    assert_int_equal(got.steps, 200);
    assert_string_equal(got.worker_ids, "w-1,w-3");
    coord_job_clear(&got);

    coord_transition *h;
    size_t nh;
    assert_int_equal(coord_store_job_history(s, "job-1", &h, &nh, &err), SC_OK);
    assert_int_equal(nh, 3);
    assert_int_equal(h[0].to, COORD_JOB_SUBMITTED);
    assert_int_equal(h[1].from, COORD_JOB_SUBMITTED);
    assert_int_equal(h[1].to, COORD_JOB_PROFILING);
    assert_string_equal(h[1].reason, "3 workers chosen");
    assert_int_equal(h[2].to, COORD_JOB_PLANNED);
    free(h);

    coord_job *list;
    size_t n;
    assert_int_equal(coord_store_job_list(s, &list, &n, &err), SC_OK);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].id, "job-1");
    assert_string_equal(list[1].id, "job-2");
    assert_int_equal(list[1].state, COORD_JOB_SUBMITTED);
    coord_job_list_free(&list, n);

    /* ids are never reused */
    coord_job c = {0};
    strcpy(c.name, "c");
    c.spec_json = "{}";
    assert_int_equal(coord_store_job_insert(s, &c, &err), SC_OK);
    assert_string_equal(c.id, "job-3");
    coord_store_close(&s);
}

static void test_workers(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    coord_store *s = NULL;
    assert_int_equal(coord_store_open(&s, dir, &err), SC_OK);
    uint8_t hw[] = {1, 2, 3, 0, 5};
    coord_worker_rec w = {.epoch = 2, .hardware = hw, .hardware_len = sizeof hw};
    strcpy(w.id, "w-7");
    strcpy(w.name, "gpu-a");
    strcpy(w.host, "node1");
    strcpy(w.endpoint, "127.0.0.1:7000");
    assert_int_equal(coord_store_worker_put(s, &w, &err), SC_OK);
    w.epoch = 3; /* replace by id */
    assert_int_equal(coord_store_worker_put(s, &w, &err), SC_OK);
    coord_worker_rec *list;
    size_t n;
    assert_int_equal(coord_store_worker_list(s, &list, &n, &err), SC_OK);
    assert_int_equal(n, 1);
    assert_string_equal(list[0].name, "gpu-a");
    assert_int_equal(list[0].epoch, 3);
    assert_int_equal(list[0].hardware_len, sizeof hw);
    assert_memory_equal(list[0].hardware, hw, sizeof hw);
    coord_worker_list_free(&list, n);
    coord_store_close(&s);
}

/* A job's kept trace: missing until kept, replaced by a later one, kept across a reopen. */
static void test_traces(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    coord_store *s = NULL;
    char *trace = NULL, *meta = NULL;
    assert_int_equal(coord_store_open(&s, dir, &err), SC_OK);
    assert_int_equal(coord_store_trace_get(s, "job-1", &trace, &meta, &err), SC_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "job-1"));
    assert_null(trace);
    assert_int_equal(coord_store_trace_put(s, "job-1", "{\"traceEvents\": []}", "{}", &err), SC_OK);
    assert_int_equal(
        coord_store_trace_put(s, "job-1", "{\"traceEvents\": [1]}", "{\"events\": 1}", &err),
        SC_OK);
    coord_store_close(&s);
    assert_int_equal(coord_store_open(&s, dir, &err), SC_OK);
    assert_int_equal(coord_store_trace_get(s, "job-1", &trace, &meta, &err), SC_OK);
    assert_string_equal(trace, "{\"traceEvents\": [1]}");
    assert_string_equal(meta, "{\"events\": 1}");
    free(trace);
    free(meta);
    coord_store_close(&s);
}

static void test_bad_state_folder(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    coord_store *s = NULL;
    assert_int_equal(coord_store_open(&s, "/proc/nope/state", &err), SC_ERR_IO);
    assert_null(s);
    assert_non_null(strstr(err.msg, "/proc/nope/state"));
}

/* A job's checkpoint failure is kept; a database from before that column gets it on open, its
 * jobs intact. */
static void test_checkpoint_error_column(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/stagecraft.db", dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db,
                     "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                     "INSERT INTO meta VALUES('schema_version', '1');"
                     "CREATE TABLE jobs(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE,"
                     " name TEXT NOT NULL, state TEXT NOT NULL, reason TEXT NOT NULL,"
                     " spec_json TEXT NOT NULL, plan_json TEXT, workers TEXT,"
                     " step INTEGER NOT NULL DEFAULT 0, steps INTEGER NOT NULL DEFAULT 0,"
                     " last_checkpoint_step INTEGER NOT NULL DEFAULT 0,"
                     " created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL);"
                     "INSERT INTO jobs(id, name, state, reason, spec_json, last_checkpoint_step,"
                     " created_ms, updated_ms) VALUES('job-1', 'old', 'running', 'r', '{}', 40,"
                     " 1, 1);",
                     NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);

    sc_err err;
    sc_err_clear(&err);
    coord_store *s = NULL;
    assert_int_equal(coord_store_open(&s, dir, &err), SC_OK);
    coord_job j;
    assert_int_equal(coord_store_job_get(s, "job-1", &j, &err), SC_OK);
    assert_string_equal(j.name, "old");
    assert_int_equal(j.last_checkpoint_step, 40);
    assert_string_equal(j.checkpoint_error, "");
    coord_job_clear(&j);
    assert_int_equal(coord_store_job_set_checkpoint_error(s, "job-1", "stage 1: disk full", &err),
                     SC_OK);
    coord_store_close(&s);
    assert_int_equal(coord_store_open(&s, dir, &err), SC_OK); /* the column is not added twice */
    assert_int_equal(coord_store_job_get(s, "job-1", &j, &err), SC_OK);
    assert_string_equal(j.checkpoint_error, "stage 1: disk full");
    coord_job_clear(&j);
    assert_int_equal(coord_store_job_set_checkpoint_error(s, "job-9", "x", &err), SC_ERR_NOT_FOUND);
    coord_store_close(&s);
}

/* The reserve of a full disk: a file whose blocks are allocated, freed and made again. */
static void test_reserve(void **state)
{
    (void)state;
    coord_reserve r;
    coord_reserve_init(&r, dir, 1 << 20);
    assert_true(r.held);
    struct stat st;
    assert_int_equal(stat(r.path, &st), 0);
    assert_int_equal(st.st_size, 1 << 20);
    assert_true((long long)st.st_blocks * 512 >= 1 << 20); /* allocated, not sparse */
    assert_true(coord_reserve_spend(&r));
    assert_false(r.held);
    assert_int_not_equal(stat(r.path, &st), 0);
    assert_false(coord_reserve_spend(&r));         /* nothing left to free */
    assert_false(coord_reserve_refill(&r, false)); /* at most once a second */
    assert_true(coord_reserve_refill(&r, true));
    assert_int_equal(stat(r.path, &st), 0);
    assert_int_equal(st.st_size, 1 << 20);
    /* a store keeps one in its folder */
    coord_store *s;
    sc_err err;
    assert_int_equal(coord_store_open(&s, dir, &err), SC_OK);
    assert_int_equal(stat(r.path, &st), 0);
    assert_int_equal(st.st_size, (off_t)COORD_RESERVE_BYTES);
    coord_store_close(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transition_table),
        cmocka_unit_test_setup_teardown(test_jobs_survive_reopen, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_workers, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_checkpoint_error_column, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_traces, make_dir, remove_dir),
        cmocka_unit_test(test_bad_state_folder),
        cmocka_unit_test_setup_teardown(test_reserve, make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
