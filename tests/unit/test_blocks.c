/* worker/blocks: a stage's state taken over block by block from other workers' block servers.
 * Pieces kept by two servers assemble into the exact image (parameters and each optimizer state
 * array in place); a server answers from a checkpoint file of the step when it kept nothing; a
 * server that does not answer is skipped; a block no one holds, pieces that disagree on the
 * optimizer's step, and a malformed request are refused with what was wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "kernels/model.h"
#include "worker/blocks/block_fetch.h"
#include "worker/blocks/block_server.h"
#include "worker/blocks/block_wire.h"

#define MLP_JSON                                                                                   \
    "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"mlp\", \"sizes\": [12, 10, "   \
    "8, 6, 4]}"
#define K 2 /* AdamW: m and v */

typedef struct {
    kn_model *model;
    int nb;
    size_t total;
    char dir[64];
} fixture;

/* The value every array holds at global parameter i: params, then m, then v. */
static float value(int array, size_t i)
{
    return (float)(array * 100000 + (int)i) * 0.5f;
}

static size_t offset(const fixture *f, int b)
{
    size_t off = 0;
    for (int i = 0; i < b; i++)
        off += kn_model_block(f->model, i)->params;
    return off;
}

/* An image of blocks [first, last] at `step` holding the reference values. */
static rt_stage_image image(const fixture *f, int first, int last, uint64_t step, uint64_t opt_t)
{
    rt_stage_image im = {
        .step = step, .first_block = first, .last_block = last, .optim_kind = 0, .opt_t = opt_t};
    size_t from = offset(f, first), n = offset(f, last + 1) - from;
    im.nparams = n;
    im.nstate = K * n;
    im.params = malloc(n * sizeof(float) + 1);
    im.state = malloc(K * n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) {
        im.params[i] = value(0, from + i);
        for (int j = 0; j < K; j++)
            im.state[j * n + i] = value(1 + j, from + i);
    }
    return im;
}

/* Writes `im` as the checkpoint file rt_runner_save writes (a 72-byte header, then the payload). */
static void write_checkpoint(const fixture *f, const char *job, int stage, const rt_stage_image *im)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", f->dir, job);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/%s/stage%d-step%llu.ckpt", f->dir, job, stage,
             (unsigned long long)im->step);
    struct {
        char magic[8];
        uint32_t version, stage, first, last, optim, reserved;
        uint64_t step, opt_t, nparams, nstate, checksum;
    } h = {.version = 1,
           .stage = (uint32_t)stage,
           .first = (uint32_t)im->first_block,
           .last = (uint32_t)im->last_block,
           .step = im->step,
           .opt_t = im->opt_t,
           .nparams = im->nparams,
           .nstate = im->nstate};
    assert_int_equal(sizeof h, 72);
    memcpy(h.magic, "SCRTCKPT", 8);
    h.checksum = wk_blocks_checksum(im->params, im->nparams, im->state, im->nstate);
    FILE *out = fopen(path, "wb");
    assert_non_null(out);
    assert_int_equal(fwrite(&h, sizeof h, 1, out), 1);
    assert_int_equal(fwrite(im->params, sizeof(float), im->nparams, out), im->nparams);
    assert_int_equal(fwrite(im->state, sizeof(float), im->nstate, out), im->nstate);
    fclose(out);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_model_parse(&f->model, "model", MLP_JSON, strlen(MLP_JSON), &err), SC_OK);
    f->nb = kn_model_block_count(f->model);
    assert_true(f->nb >= 4);
    f->total = offset(f, f->nb);
    strcpy(f->dir, "/tmp/sc-blocks-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
    kn_model_destroy(&f->model);
    free(f);
    return 0;
}

/* The fetched image holds every array's reference values for blocks [first, last]. */
static void assert_image(const fixture *f, const rt_stage_image *im, int first, int last)
{
    size_t from = offset(f, first), n = offset(f, last + 1) - from;
    assert_int_equal(im->nparams, n);
    assert_int_equal(im->nstate, K * n);
    for (size_t i = 0; i < n; i++) {
        assert_true(im->params[i] == value(0, from + i));
        for (int j = 0; j < K; j++)
            assert_true(im->state[j * n + i] == value(1 + j, from + i));
    }
}

static void test_pieces_assemble(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    wk_block_server *a, *b;
    assert_int_equal(wk_block_server_start(&a, "127.0.0.1", f->dir, &err), SC_OK);
    assert_int_equal(wk_block_server_start(&b, "127.0.0.1", f->dir, &err), SC_OK);
    rt_stage_image lo = image(f, 0, 1, 7, 7), hi = image(f, 2, f->nb - 1, 7, 7);
    wk_block_server_keep(a, "job-1", &lo);
    wk_block_server_keep(b, "job-1", &hi);
    assert_null(lo.params); /* taken */
    /* a server that never answers comes first: it is skipped */
    const char *sources[] = {"tcp://127.0.0.1:1", wk_block_server_endpoint(b),
                             wk_block_server_endpoint(a)};
    rt_stage_image im;
    wk_fetch_stats st;
    assert_int_equal(wk_blocks_fetch(sources, 3, "job-1", 7, f->model, 1, f->nb - 1, 300, false,
                                     NULL, &im, &st, &err),
                     SC_OK);
    assert_image(f, &im, 1, f->nb - 1);
    assert_int_equal(im.opt_t, 7);
    assert_int_equal(im.first_block, 1);
    assert_int_equal(st.pieces, 2);
    assert_true(st.bytes == (double)(1 + K) * im.nparams * sizeof(float));
    rt_stage_image_clear(&im);
    uint64_t answered, bytes;
    wk_block_server_counts(b, &answered, &bytes);
    assert_int_equal(answered, 1);

    /* another step is held by no one: refused, naming the block */
    assert_int_equal(wk_blocks_fetch(sources + 1, 2, "job-1", 8, f->model, 0, 1, 300, false, NULL,
                                     &im, &st, &err),
                     SC_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "block 0 of job job-1 at step 8 is held by none"));
    /* dropped: gone */
    wk_block_server_drop(a, "job-1", false);
    sc_err_clear(&err);
    assert_int_equal(wk_blocks_fetch(sources + 1, 2, "job-1", 7, f->model, 0, 1, 300, false, NULL,
                                     &im, &st, &err),
                     SC_ERR_NOT_FOUND);
    wk_block_server_stop(&a);
    wk_block_server_stop(&b);
}

/* A fetch from a server that never answers stops once it is cancelled (a stage told to stop),
 * long before its time-out, with SC_ERR_CANCELLED; a flag set before it asks nothing. */
static void *cancel_soon(void *arg)
{
    usleep(100 * 1000); /* lets the fetch wait; the check is the status it returns */
    atomic_store((atomic_bool *)arg, true);
    return NULL;
}

static void test_fetch_cancelled(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    const char *sources[] = {"tcp://127.0.0.1:1"};
    rt_stage_image im;
    wk_fetch_stats st;
    atomic_bool cancel = true;
    assert_int_equal(wk_blocks_fetch(sources, 1, "job-1", 7, f->model, 0, f->nb - 1, 600000, false,
                                     &cancel, &im, &st, &err),
                     SC_ERR_CANCELLED);
    atomic_store(&cancel, false);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, cancel_soon, &cancel), 0);
    sc_err_clear(&err);
    assert_int_equal(wk_blocks_fetch(sources, 1, "job-1", 7, f->model, 0, f->nb - 1, 600000, false,
                                     &cancel, &im, &st, &err),
                     SC_ERR_CANCELLED);
    assert_non_null(strstr(err.msg, "taking blocks over was cancelled"));
    pthread_join(t, NULL);
}

static void test_from_checkpoint_files(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    /* blocks 0-1 of step 5 in a checkpoint file, 2-end kept in memory by another server */
    rt_stage_image lo = image(f, 0, 1, 5, 5), hi = image(f, 2, f->nb - 1, 5, 5);
    write_checkpoint(f, "job-2", 0, &lo);
    rt_stage_image_clear(&lo);
    wk_block_server *a, *b;
    assert_int_equal(wk_block_server_start(&a, "127.0.0.1", f->dir, &err), SC_OK);
    assert_int_equal(wk_block_server_start(&b, "127.0.0.1", "/nonexistent", &err), SC_OK);
    wk_block_server_keep(b, "job-2", &hi);
    const char *sources[] = {wk_block_server_endpoint(a), wk_block_server_endpoint(b)};
    rt_stage_image im;
    wk_fetch_stats st;
    assert_int_equal(wk_blocks_fetch(sources, 2, "job-2", 5, f->model, 0, f->nb - 1, 1000, false,
                                     NULL, &im, &st, &err),
                     SC_OK);
    assert_image(f, &im, 0, f->nb - 1);
    rt_stage_image_clear(&im);

    /* a piece saved after another count of optimizer steps does not mix */
    rt_stage_image odd = image(f, 2, f->nb - 1, 5, 4);
    wk_block_server_keep(b, "job-2", &odd);
    assert_int_equal(wk_blocks_fetch(sources, 2, "job-2", 5, f->model, 0, f->nb - 1, 1000, false,
                                     NULL, &im, &st, &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "after 4 updates"));
    wk_block_server_stop(&a);
    wk_block_server_stop(&b);
}

static void test_bad_requests(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    wk_block_server *s;
    assert_int_equal(wk_block_server_start(&s, "127.0.0.1", f->dir, &err), SC_OK);
    void *ctx = zmq_ctx_new(), *req = zmq_socket(ctx, ZMQ_REQ);
    int ms = 2000, zero = 0;
    zmq_setsockopt(req, ZMQ_RCVTIMEO, &ms, sizeof ms);
    zmq_setsockopt(req, ZMQ_LINGER, &zero, sizeof zero);
    assert_int_equal(zmq_connect(req, wk_block_server_endpoint(s)), 0);
    /* garbage, then a request whose job id would leave the checkpoint folder */
    wk_block_request rq;
    memset(&rq, 0, sizeof rq);
    memcpy(rq.magic, WK_BLOCKS_REQ_MAGIC, 8);
    strcpy(rq.job_id, "../etc");
    rq.nblocks = 1;
    uint64_t counts[1] = {4};
    char frame[sizeof rq + sizeof counts];
    memcpy(frame, &rq, sizeof rq);
    memcpy(frame + sizeof rq, counts, sizeof counts);
    const void *bodies[2] = {"hello", frame};
    size_t lens[2] = {5, sizeof frame};
    for (int i = 0; i < 2; i++) {
        assert_true(zmq_send(req, bodies[i], lens[i], 0) >= 0);
        wk_block_answer a;
        assert_int_equal(zmq_recv(req, &a, sizeof a, 0), (int)sizeof a);
        assert_int_equal(a.status, WK_BLOCKS_BAD_REQUEST);
        int more = 1;
        size_t sz = sizeof more;
        char sink[8];
        while (zmq_getsockopt(req, ZMQ_RCVMORE, &more, &sz) == 0 && more)
            zmq_recv(req, sink, sizeof sink, 0);
    }
    zmq_close(req);
    zmq_ctx_term(ctx);
    /* and it still serves */
    rt_stage_image all = image(f, 0, f->nb - 1, 3, 3);
    wk_block_server_keep(s, "job-3", &all);
    const char *sources[] = {wk_block_server_endpoint(s)};
    rt_stage_image im;
    wk_fetch_stats st;
    assert_int_equal(wk_blocks_fetch(sources, 1, "job-3", 3, f->model, 0, f->nb - 1, 1000, false,
                                     NULL, &im, &st, &err),
                     SC_OK);
    assert_image(f, &im, 0, f->nb - 1);
    rt_stage_image_clear(&im);
    assert_int_equal(wk_blocks_fetch(sources, 1, "job-3", 3, f->model, 2, f->nb + 3, 1000, false,
                                     NULL, &im, &st, &err),
                     SC_ERR_INVALID);
    wk_block_server_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pieces_assemble, setup, teardown),
        cmocka_unit_test_setup_teardown(test_from_checkpoint_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetch_cancelled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_requests, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
