/* worker/runtime/runner's checkpoints: save, load and continue equals the uninterrupted run bit
 * for bit (optimizer state included), with replicated stages (copy 0 writes, every copy loads)
 * and under pipedream (only at flushed points); missing, corrupt and mismatched files are
 * refused with what was wrong; pruning keeps what a restart needs. */
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

#include "tests/unit/runtime_harness.h"

/* Checkpoints at flushed points: save refused in flight, a skipped step refused (nothing run),
 * flush + save + load + continue equals the uninterrupted run bit for bit. */
static void test_pipedream_flush_checkpoint(void **state)
{
    (void)state;
    char dir[] = "/tmp/sc_test_pdckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    const run_spec rs = {GPT_JSON, "pipedream", 2, 4, 2, 0, "adamw", "local", NULL, NULL, NULL, 0};
    sc_err err;
    sc_err_clear(&err);
    rt_runner *a[2] = {0};
    pipeline_open(&rs, a);
    free(pd_run(&rs, a, 1, 2, false));
    assert_int_equal(rt_runner_save(a[0], dir, 2, &err), SC_ERR_PRECONDITION);
    assert_non_null(strstr(err.msg, "rt_runner_flush"));
    sc_err_clear(&err);
    rt_report rep;
    assert_int_equal(rt_runner_step(a[0], 7, &rep, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "next step 3"));
    pd_job *f = pd_run(&rs, a, 3, 0, true); /* flush only */
    assert_int_equal(f[0].n_log, 1);
    assert_true(f[0].log[0].backward);
    assert_int_equal(f[0].log[0].step, 2);
    free(f);
    for (int s = 0; s < 2; s++)
        assert_int_equal(rt_runner_save(a[s], dir, 2, &err), SC_OK);
    free(pd_run(&rs, a, 3, 2, true));
    size_t n1 = 0, n2 = 0;
    float *p1 = pipeline_params(&rs, a, &n1);

    rt_runner *b[2] = {0};
    pipeline_open(&rs, b);
    free(pd_run(&rs, b, 1, 1, false)); /* in flight, then dropped by the load */
    for (int s = 0; s < 2; s++)
        assert_int_equal(rt_runner_load(b[s], dir, 2, &err), SC_OK);
    free(pd_run(&rs, b, 3, 2, true));
    float *p2 = pipeline_params(&rs, b, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(p1, p2, n1 * sizeof *p1);
    for (int s = 0; s < 2; s++) {
        char path[1400];
        rt_runner_checkpoint_path(a[s], dir, 2, path, sizeof path);
        assert_int_equal(unlink(path), 0);
        rt_runner_destroy(&a[s]);
        rt_runner_destroy(&b[s]);
    }
    free(p1);
    free(p2);
    assert_int_equal(rmdir(dir), 0);
}

static void test_checkpoint_resume(void **state)
{
    (void)state;
    char dir[] = "/tmp/sc_test_ckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    const run_spec rs = {GPT_JSON, "1f1b", 2, 4, 2, 0, "adamw", "zmq", NULL, NULL, NULL, 0};
    sc_err err;
    sc_err_clear(&err);

    /* uninterrupted: steps 1..4, checkpoint after step 2 */
    rt_runner *a[2] = {0};
    pipeline_open(&rs, a);
    pipeline_run(&rs, a, 1, 2, NULL);
    for (int s = 0; s < 2; s++)
        assert_int_equal(rt_runner_save(a[s], dir, 2, &err), SC_OK);
    pipeline_run(&rs, a, 3, 2, NULL);
    size_t n1 = 0, n2 = 0;
    float *p1 = pipeline_params(&rs, a, &n1);

    /* restarted: fresh runners load step 2 and run 3..4 */
    rt_runner *b[2] = {0};
    pipeline_open(&rs, b);
    for (int s = 0; s < 2; s++)
        assert_int_equal(rt_runner_load(b[s], dir, 2, &err), SC_OK);
    pipeline_run(&rs, b, 3, 2, NULL);
    float *p2 = pipeline_params(&rs, b, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(p1, p2, n1 * sizeof *p1); /* bit-exact, optimizer state included */

    /* missing, corrupt and mismatched checkpoints */
    assert_int_equal(rt_runner_load(b[0], dir, 99, &err), SC_ERR_NOT_FOUND);
    char path[1400];
    rt_runner_checkpoint_path(b[1], dir, 2, path, sizeof path);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 200, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 200, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
    sc_err_clear(&err);
    assert_int_equal(rt_runner_load(b[1], dir, 2, &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "checksum"));
    /* stage 0's file under stage 1's name: another block range */
    char path0[1400];
    rt_runner_checkpoint_path(b[0], dir, 2, path0, sizeof path0);
    assert_int_equal(rename(path0, path), 0);
    sc_err_clear(&err);
    assert_int_equal(rt_runner_load(b[1], dir, 2, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "blocks"));
    f = fopen(path, "wb");
    fputs("not a checkpoint at all, just some text", f);
    fclose(f);
    sc_err_clear(&err);
    assert_int_equal(rt_runner_load(b[1], dir, 2, &err), SC_ERR_PARSE);
    assert_non_null(strstr(err.msg, "magic"));
    unlink(path);

    for (int s = 0; s < 2; s++) {
        rt_runner_destroy(&a[s]);
        rt_runner_destroy(&b[s]);
    }
    free(p1);
    free(p2);
    assert_int_equal(rmdir(dir), 0); /* no temporary files left behind */
}

static void touch(const char *dir, const char *name)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
}

static int exists(const char *dir, const char *name)
{
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* Pruning keeps the newest `keep` checkpoints at or before the step every stage completed, and
 * every newer one: when another stage's saves failed from step 50 on, this stage's 50..60 are
 * not complete and its 45, the step a restart resumes from, must stay. */
static void test_checkpoint_prune(void **state)
{
    (void)state;
    char dir[] = "/tmp/sc_test_prune_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char name[64];
    for (int step = 5; step <= 60; step += 5) {
        snprintf(name, sizeof name, "stage0-step%d.ckpt", step);
        touch(dir, name);
        snprintf(name, sizeof name, "stage1-step%d.ckpt", step);
        touch(dir, name);
    }
    /* not checkpoints of stage 0: left alone */
    touch(dir, "stage0-step3.ckpt.tmp.77");
    touch(dir, "stage00-step4.ckpt");
    touch(dir, "notes.txt");
    uint64_t *steps;
    size_t n, deleted;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_checkpoint_list(dir, 0, &steps, &n, &err), SC_OK);
    assert_int_equal(n, 12);
    assert_int_equal(steps[0], 60); /* newest first */
    assert_int_equal(steps[11], 5);
    free(steps);

    assert_int_equal(rt_checkpoint_prune(dir, 0, 45, 2, &deleted, &err), SC_OK);
    assert_int_equal(deleted, 7); /* 5..35 */
    for (int step = 5; step <= 60; step += 5) {
        snprintf(name, sizeof name, "stage0-step%d.ckpt", step);
        assert_int_equal(exists(dir, name), step >= 40);
        snprintf(name, sizeof name, "stage1-step%d.ckpt", step);
        assert_true(exists(dir, name)); /* another stage's files */
    }
    assert_true(exists(dir, "stage0-step3.ckpt.tmp.77"));
    assert_true(exists(dir, "stage00-step4.ckpt"));
    /* the same step again, or keep 0: nothing more goes */
    assert_int_equal(rt_checkpoint_prune(dir, 0, 45, 2, &deleted, &err), SC_OK);
    assert_int_equal(deleted, 0);
    assert_int_equal(rt_checkpoint_prune(dir, 0, 60, 0, &deleted, &err), SC_OK);
    assert_int_equal(deleted, 0);
    /* keep 1 once 60 is complete: only 60 */
    assert_int_equal(rt_checkpoint_prune(dir, 0, 60, 1, &deleted, &err), SC_OK);
    assert_int_equal(deleted, 4);
    assert_int_equal(rt_checkpoint_list(dir, 0, &steps, &n, &err), SC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(steps[0], 60);
    free(steps);

    /* a folder not made yet holds no checkpoints */
    char missing[64];
    snprintf(missing, sizeof missing, "%s/none", dir);
    assert_int_equal(rt_checkpoint_list(missing, 0, &steps, &n, &err), SC_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rt_checkpoint_prune(missing, 0, 60, 2, &deleted, &err), SC_OK);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -r %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* Replica 0 writes the stage's checkpoint, the others skip; every replica loads the same file
 * and they stay identical. */
static void test_replicated_checkpoint(void **state)
{
    (void)state;
    char dir[] = "/tmp/sc_test_rckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const int reps[] = {2, 1};
    const run_spec rs = {GPT_JSON, "1f1b", 2, 8, 4, 0, "adamw", "local", NULL, NULL, NULL, 0};
    sc_err err;
    sc_err_clear(&err);
    repl_pipe a, b;
    repl_open(&a, &rs, reps);
    repl_run(&a, 1, 2, NULL);
    for (int i = 0; i < a.n; i++)
        assert_int_equal(rt_runner_save(a.r[i], dir, 2, &err), SC_OK);
    repl_run(&a, 3, 2, NULL);
    size_t n1 = 0, n2 = 0;
    float *p1 = repl_params(&a, &n1);
    repl_open(&b, &rs, reps);
    for (int i = 0; i < b.n; i++)
        assert_int_equal(rt_runner_load(b.r[i], dir, 2, &err), SC_OK);
    repl_run(&b, 3, 2, NULL);
    float *p2 = repl_params(&b, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(p1, p2, n1 * sizeof *p1);
    for (int s = 0; s < 2; s++) {
        char path[1400];
        rt_runner_checkpoint_path(a.r[a.base[s]], dir, 2, path, sizeof path);
        assert_int_equal(unlink(path), 0);
    }
    assert_int_equal(rmdir(dir), 0); /* two files only: replica 1 wrote none */
    free(p1);
    free(p2);
    repl_close(&a);
    repl_close(&b);
}

/* Flushed checkpoints with copies: a save in flight is refused on every copy, copy 0 writes the
 * stage's file after the flush and copy 1 nothing, every copy loads it, and the resumed run
 * equals the uninterrupted one bit for bit. */
static void test_pipedream_replicated_checkpoint(void **state)
{
    (void)state;
    char dir[] = "/tmp/sc_test_pdrckpt_XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const int reps[] = {2, 1};
    const run_spec rs = {GPT_JSON, "pipedream", 2, 8, 4, 0, "adamw", "local", NULL, NULL, NULL, 0};
    sc_err err;
    sc_err_clear(&err);
    repl_pipe a, b;
    repl_open(&a, &rs, reps);
    free(pd_run_runners(a.r, a.n, 1, 2, false));
    for (int i = 0; i < 2; i++) { /* both copies of stage 0 hold minibatches */
        sc_err_clear(&err);
        assert_int_equal(rt_runner_save(a.r[i], dir, 2, &err), SC_ERR_PRECONDITION);
        assert_non_null(strstr(err.msg, "rt_runner_flush"));
    }
    free(pd_run_runners(a.r, a.n, 3, 0, true));
    for (int i = 0; i < a.n; i++)
        assert_int_equal(rt_runner_save(a.r[i], dir, 2, &err), SC_OK);
    free(pd_run_runners(a.r, a.n, 3, 2, true));
    size_t n1 = 0, n2 = 0;
    float *p1 = repl_params(&a, &n1);
    repl_open(&b, &rs, reps);
    free(pd_run_runners(b.r, b.n, 1, 1, false)); /* in flight, then dropped by the load */
    for (int i = 0; i < b.n; i++)
        assert_int_equal(rt_runner_load(b.r[i], dir, 2, &err), SC_OK);
    free(pd_run_runners(b.r, b.n, 3, 2, true));
    float *p2 = repl_params(&b, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(p1, p2, n1 * sizeof *p1);
    for (int s = 0; s < 2; s++) {
        char path[1400];
        rt_runner_checkpoint_path(a.r[a.base[s]], dir, 2, path, sizeof path);
        assert_int_equal(unlink(path), 0);
    }
    assert_int_equal(rmdir(dir), 0); /* two files only: copy 1 wrote none */
    free(p1);
    free(p2);
    repl_close(&a);
    repl_close(&b);
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoint_prune),
        cmocka_unit_test(test_pipedream_flush_checkpoint),
        cmocka_unit_test(test_checkpoint_resume),
        cmocka_unit_test(test_replicated_checkpoint),
        cmocka_unit_test(test_pipedream_replicated_checkpoint),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
