/* Checkpoint copies: which workers hold a copy of each stage's checkpoints (never the writer,
 * other hosts first, only workers of the plan), which checkpoint is complete with its copies,
 * START's "checkpoint_copies" built from a plan; and the worker's copier, which takes a written
 * checkpoint from the writer's block server into its replicas folder, where its own block server
 * serves it, and refuses a malformed copy file by name without crashing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coordinator/ckpt_copies.h"
#include "kernels/model.h"
#include "worker/blocks/block_fetch.h"
#include "worker/blocks/block_server.h"
#include "worker/blocks/ckpt_copier.h"
#include "worker/runtime/runner.h"

#define H(s, j) holders[(s)*COORD_MAX_CKPT_COPIES + (j)]

static void two_workers_hold_each_others_stage(void **state)
{
    (void)state;
    int owner[2] = {0, 1}, holders[2 * COORD_MAX_CKPT_COPIES], count[2];
    bool used[2] = {true, true}, serves[2] = {true, true};
    coord_ckpt_choose_holders(2, owner, used, serves, NULL, 2, 1, holders, count);
    assert_int_equal(count[0], 1);
    assert_int_equal(count[1], 1);
    assert_int_equal(H(0, 0), 1);
    assert_int_equal(H(1, 0), 0);
    /* more copies asked than other workers: as many as there are */
    coord_ckpt_choose_holders(2, owner, used, serves, NULL, 2, 3, holders, count);
    assert_int_equal(count[0], 1);
    /* none asked: none */
    coord_ckpt_choose_holders(2, owner, used, serves, NULL, 2, 0, holders, count);
    assert_int_equal(count[0], 0);
    assert_int_equal(count[1], 0);
}

static void holders_prefer_other_hosts_and_skip_unused(void **state)
{
    (void)state;
    /* workers 0, 1 on host a; 2 on b; 3 on c but not in the plan; 4 on c serves no blocks */
    const char *hosts[5] = {"a", "a", "b", "c", "c"};
    bool used[5] = {true, true, true, false, true}, serves[5] = {true, true, true, true, false};
    int owner[2] = {0, 2}, holders[2 * COORD_MAX_CKPT_COPIES], count[2];
    coord_ckpt_choose_holders(2, owner, used, serves, hosts, 5, 2, holders, count);
    assert_int_equal(count[0], 2);
    assert_int_equal(H(0, 0), 2); /* another host first, though worker 1 comes next */
    assert_int_equal(H(0, 1), 1);
    assert_int_equal(count[1], 2);
    assert_int_equal(H(1, 0), 0); /* in the order after the writer: 3, 4 left out, then 0, 1 */
    assert_int_equal(H(1, 1), 1);
    /* a writer out of range (no block server): no copies of that stage */
    owner[1] = -1;
    coord_ckpt_choose_holders(2, owner, used, serves, hosts, 5, 2, holders, count);
    assert_int_equal(count[1], 0);
}

static void no_worker_holds_more_than_it_can(void **state)
{
    (void)state;
    /* ten writers on host a, one worker on host b: b is everyone's first choice, up to its cap */
    enum { N = 11 };
    const char *hosts[N];
    bool used[N], serves[N];
    int owner[N - 1], holders[(N - 1) * COORD_MAX_CKPT_COPIES], count[N - 1];
    for (int i = 0; i < N; i++) {
        hosts[i] = i == N - 1 ? "b" : "a";
        used[i] = serves[i] = true;
    }
    for (int s = 0; s < N - 1; s++)
        owner[s] = s;
    coord_ckpt_choose_holders(N - 1, owner, used, serves, hosts, N, 1, holders, count);
    int on_b = 0;
    for (int s = 0; s < N - 1; s++) {
        assert_int_equal(count[s], 1);
        assert_int_not_equal(H(s, 0), s);
        on_b += H(s, 0) == N - 1;
    }
    assert_int_equal(on_b, COORD_MAX_CKPT_HELD);
}

static void complete_waits_for_every_copy(void **state)
{
    (void)state;
    int count[3] = {1, 2, 0};
    uint64_t copied[3 * COORD_MAX_CKPT_COPIES] = {0};
    copied[0] = 20;
    copied[COORD_MAX_CKPT_COPIES + 0] = 30;
    copied[COORD_MAX_CKPT_COPIES + 1] = 10;
    copied[2 * COORD_MAX_CKPT_COPIES] = 2; /* not a holder (count 0): ignored */
    assert_int_equal(coord_ckpt_complete(30, 3, count, copied, 0), 10);
    assert_int_equal(coord_ckpt_complete(8, 3, count, copied, 0), 8);
    assert_int_equal(coord_ckpt_complete(30, 3, count, copied, 12), 12); /* never below floor */
    copied[COORD_MAX_CKPT_COPIES + 1] = 40;
    assert_int_equal(coord_ckpt_complete(30, 3, count, copied, 0), 20);
    int none[3] = {0, 0, 0};
    assert_int_equal(coord_ckpt_complete(30, 3, none, copied, 0), 30);
}

static void payload_names_writer_and_holders(void **state)
{
    (void)state;
    json_t *plan =
        json_loads("{\"stages\": [{\"first_block\": 0, \"last_block\": 1, \"devices\": "
                   "[1]}, {\"first_block\": 2, \"last_block\": 4, \"devices\": [0, 2]}]}",
                   0, NULL);
    assert_non_null(plan);
    const char *eps[3] = {"tcp://h0:1", "tcp://h1:1", "tcp://h2:1"};
    bool used[3] = {true, true, true};
    int count[2];
    json_t *out = coord_ckpt_copies_payload(plan, eps, NULL, used, 3, 1, count);
    assert_non_null(out);
    assert_int_equal(json_array_size(out), 2);
    assert_int_equal(count[0], 1);
    json_t *e = json_array_get(out, 1);
    assert_int_equal(json_integer_value(json_object_get(e, "stage")), 1);
    assert_int_equal(json_integer_value(json_object_get(e, "first_block")), 2);
    assert_int_equal(json_integer_value(json_object_get(e, "last_block")), 4);
    assert_string_equal(json_string_value(json_object_get(e, "source")), "tcp://h0:1");
    assert_string_equal(json_string_value(json_array_get(json_object_get(e, "holders"), 0)),
                        "tcp://h1:1");
    json_decref(out);
    /* k 0: an empty list */
    out = coord_ckpt_copies_payload(plan, eps, NULL, used, 3, 0, count);
    assert_int_equal(json_array_size(out), 0);
    assert_int_equal(count[1], 0);
    json_decref(out);
    json_decref(plan);
}

/* ---- the worker's copier ---------------------------------------------------------------- */

#define MLP_JSON                                                                                   \
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"mlp\", \"sizes\": [12, 10, "   \
    "8, 6, 4]}"

static size_t params_of(const kn_model *m, int first, int last)
{
    size_t n = 0;
    for (int b = first; b <= last; b++)
        n += kn_model_block(m, b)->params;
    return n;
}

static rt_stage_image image(const kn_model *m, int first, int last, uint64_t step)
{
    size_t n = params_of(m, first, last);
    rt_stage_image im = {.step = step,
                         .first_block = first,
                         .last_block = last,
                         .opt_t = step,
                         .nparams = n,
                         .nstate = 2 * n,
                         .params = malloc(n * sizeof(float) + 1),
                         .state = malloc(2 * n * sizeof(float) + 1)};
    for (size_t i = 0; i < n; i++) {
        im.params[i] = (float)i * 0.25f + (float)step;
        im.state[i] = -(float)i;
        im.state[n + i] = (float)i * 2;
    }
    return im;
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void copier_takes_checkpoints_and_refuses_bad_files(void **state)
{
    (void)state;
    sc_err err;
    sc_err_clear(&err);
    kn_model *model = NULL;
    assert_int_equal(kn_model_parse(&model, "model", MLP_JSON, strlen(MLP_JSON), &err), SC_OK);
    int nb = kn_model_block_count(model);
    char root[] = "/tmp/sc-copies-XXXXXX", a[64], b[64], path[256];
    assert_non_null(mkdtemp(root));
    snprintf(a, sizeof a, "%s/a", root);
    snprintf(b, sizeof b, "%s/b", root);
    mkdir(a, 0700);
    mkdir(b, 0700);
    wk_block_server *sa = NULL, *sb = NULL;
    assert_int_equal(wk_block_server_start(&sa, "127.0.0.1", a, &err), SC_OK);
    assert_int_equal(wk_block_server_start(&sb, "127.0.0.1", b, &err), SC_OK);
    /* worker a wrote stage 1 (blocks 1..nb-1) of step 4 */
    snprintf(path, sizeof path, "%s/job-1", a);
    mkdir(path, 0700);
    rt_stage_image im = image(model, 1, nb - 1, 4);
    snprintf(path, sizeof path, "%s/job-1/stage1-step4.ckpt", a);
    assert_int_equal(rt_stage_image_write(path, 1, &im, &err), SC_OK);

    char bjob[96];
    snprintf(bjob, sizeof bjob, "%s/job-1", b);
    wk_copier *c = NULL;
    assert_int_equal(wk_copier_new(&c, "job-1", bjob, MLP_JSON, &err), SC_OK);
    /* bad targets are refused by name */
    assert_int_equal(wk_copier_add(c, 1, 0, "nowhere", 1, nb - 1, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "tcp://HOST:PORT"));
    sc_err_clear(&err);
    assert_int_equal(wk_copier_add(c, 1, 0, wk_block_server_endpoint(sa), 1, nb + 3, &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "blocks"));
    sc_err_clear(&err);
    assert_int_equal(wk_copier_add(c, 1, 0, wk_block_server_endpoint(sa), 1, nb - 1, &err), SC_OK);
    assert_int_equal(wk_copier_start(c, &err), SC_OK);
    wk_copier_due(c, 4);
    wk_copy_held held[WK_COPIER_MAX];
    for (int i = 0; i < 600; i++) { /* a minute at most on a busy machine */
        if (wk_copier_held(c, held, WK_COPIER_MAX) == 1 && held[0].step == 4)
            break;
        usleep(100000);
    }
    assert_int_equal(wk_copier_held(c, held, WK_COPIER_MAX), 1);
    assert_int_equal(held[0].stage, 1);
    assert_int_equal(held[0].step, 4);
    wk_copier_stats st;
    wk_copier_stats_get(c, &st);
    assert_int_equal(st.copies, 1);
    assert_true(st.bytes == 3.0 * (double)im.nparams * sizeof(float));

    /* the copy is the same file content, in b's replicas folder */
    rt_stage_image got;
    snprintf(path, sizeof path, "%s/job-1/" WK_BLOCKS_COPIES_DIR "/stage1-step4.ckpt", b);
    assert_int_equal(rt_stage_image_read(path, &got, &err), SC_OK);
    assert_int_equal(got.nparams, im.nparams);
    assert_memory_equal(got.params, im.params, im.nparams * sizeof(float));
    assert_memory_equal(got.state, im.state, im.nstate * sizeof(float));
    rt_stage_image_clear(&got);

    /* a's disk is lost: b's block server serves the copy */
    snprintf(path, sizeof path, "rm -rf %s", a);
    assert_int_equal(system(path), 0);
    const char *src[1] = {wk_block_server_endpoint(sb)};
    wk_fetch_stats fs;
    assert_int_equal(
        wk_blocks_fetch(src, 1, "job-1", 4, model, 1, nb - 1, 5000, false, NULL, &got, &fs, &err),
        SC_OK);
    assert_memory_equal(got.params, im.params, im.nparams * sizeof(float));
    rt_stage_image_clear(&got);

    /* a malformed copy file is refused, naming why, and nothing crashes */
    snprintf(path, sizeof path, "%s/job-1/" WK_BLOCKS_COPIES_DIR "/stage1-step6.ckpt", b);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("SCRTCKPT but not a checkpoint at all", f);
    fclose(f);
    sc_err_clear(&err);
    assert_int_equal(
        wk_blocks_fetch(src, 1, "job-1", 6, model, 1, nb - 1, 5000, false, NULL, &got, &fs, &err),
        SC_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "stage1-step6.ckpt"));
    assert_non_null(strstr(err.msg, "refused"));

    /* step 6 comes due, but its writer is gone: nothing copied, nothing crashes; the copies
     * older than the complete step beyond `keep` are deleted */
    wk_copier_due(c, 6);
    snprintf(path, sizeof path, "%s/job-1/" WK_BLOCKS_COPIES_DIR "/stage1-step2.ckpt", b);
    rt_stage_image old = image(model, 1, nb - 1, 2);
    assert_int_equal(rt_stage_image_write(path, 1, &old, &err), SC_OK);
    assert_int_equal(wk_copier_complete(c, 4, 1, &err), SC_OK);
    assert_false(exists(path));
    snprintf(path, sizeof path, "%s/job-1/" WK_BLOCKS_COPIES_DIR "/stage1-step4.ckpt", b);
    assert_true(exists(path));
    wk_copier_destroy(&c);
    assert_null(c);

    rt_stage_image_clear(&old);
    rt_stage_image_clear(&im);
    wk_block_server_stop(&sa);
    wk_block_server_stop(&sb);
    snprintf(path, sizeof path, "rm -rf %s", root);
    assert_int_equal(system(path), 0);
    kn_model_destroy(&model);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(two_workers_hold_each_others_stage),
        cmocka_unit_test(holders_prefer_other_hosts_and_skip_unused),
        cmocka_unit_test(no_worker_holds_more_than_it_can),
        cmocka_unit_test(complete_waits_for_every_copy),
        cmocka_unit_test(payload_names_writer_and_holders),
        cmocka_unit_test(copier_takes_checkpoints_and_refuses_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
