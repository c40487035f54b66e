/* worker/runtime/runner's training beyond the reference: the loss falls, fp16's dynamic loss
 * scale skips the same steps on every stage and then trains, a job that never freezes skips the
 * per-block gradient norms (bit for bit the same parameters), and the measured timeline records
 * every action of a stage's list once per iteration (synchronous and pipedream). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "tests/unit/runtime_harness.h"

/* A job that never freezes skips the per-block gradient norms: its reports carry none, and it
 * trains to the same parameters, bit for bit, as with them. */
static void test_grad_norms_skipped(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "1f1b", 2, 8, 4, 3, "adamw", "zmq", NULL, NULL, NULL, 0};
    rt_report reports[2];
    size_t n_with = 0, n_without = 0;
    float *with = train_pipeline(&rs, &n_with, reports);
    for (int s = 0; s < rs.stages; s++)
        assert_true(train_grad_sq_sum(s) > 0.0);
    run_opts_set(&(run_opts){.skip_norms = true});
    float *without = train_pipeline(&rs, &n_without, reports);
    run_opts_set(NULL);
    for (int s = 0; s < rs.stages; s++)
        assert_true(train_grad_sq_sum(s) == -1.0); /* no norms reported */
    assert_int_equal(n_with, n_without);
    assert_memory_equal(with, without, n_with * sizeof *with);
    free(with);
    free(without);
}

/* fp16's dynamic loss scale: a start far too large overflows, every stage skips the same steps
 * (the verdict travels up and back down the pipeline), the scale halves until the gradients fit
 * and then trains; the stages end with one scale and finite parameters. */
static void test_fp16_loss_scale(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "1f1b", 3, 8, 4, 12, "adamw", "zmq", NULL, NULL, NULL, 0};
    rt_report reports[3];
    size_t n = 0;
    /* a scale of 2^24: the head's loss gradient, S / 64 per position, overflows fp16 */
    run_opts_set(&(run_opts){.precision = "fp16", .scale_init = 0x1p24, .scale_interval = 4});
    float *params = train_pipeline(&rs, &n, reports);
    run_opts_set(NULL);
    for (int s = 0; s < rs.stages; s++) {
        print_message("stage %d: loss scale %g, %llu step(s) skipped\n", s,
                      (double)reports[s].loss_scale, (unsigned long long)reports[s].skipped_steps);
        assert_true(reports[s].skipped_steps >= 1);
        assert_true(reports[s].skipped_steps < (uint64_t)rs.steps); /* it trained too */
        assert_int_equal(reports[s].skipped_steps, reports[0].skipped_steps);
        assert_true(reports[s].loss_scale == reports[0].loss_scale);
        assert_true(reports[s].loss_scale < 0x1p24f);
    }
    assert_true(reports[rs.stages - 1].has_loss && isfinite(reports[rs.stages - 1].loss));
    for (size_t i = 0; i < n; i++)
        assert_true(isfinite(params[i]));
    free(params);
}

/* The measured timeline (rt_runner_timeline): per iteration, every stage records each action of
 * its list once (its micro-batches' forwards and backwards, the sends and receives its place
 * has, one optimizer step), one after another on its clock; pipedream records its stream the
 * same way, the flush's backwards under the last step's number. */
static void check_timeline(rt_runner *r, int s, int P, int iterations, uint64_t first, int mb,
                           bool flushed)
{
    rt_tl_event *ev = NULL;
    size_t n = 0;
    rt_tl_snapshot_info info;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(rt_timeline_snapshot(rt_runner_timeline(r), 0, 0, &ev, &n, &info, &err),
                     SC_OK);
    assert_int_equal(info.iterations, iterations);
    assert_int_equal(info.dropped, 0);
    int f = 0, b = 0, o = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(ev[i].end_ns >= ev[i].start_ns);
        if (i > 0) /* one action at a time */
            assert_true(ev[i].start_ns >= ev[i - 1].end_ns);
        assert_true(ev[i].iteration >= first && ev[i].iteration < first + (uint64_t)iterations);
    }
    for (int k = 0; k < iterations; k++) {
        uint64_t it = first + (uint64_t)k;
        int fk = count_kind(ev, n, it, RT_TL_FORWARD), bk = count_kind(ev, n, it, RT_TL_BACKWARD);
        f += fk;
        b += bk;
        o += count_kind(ev, n, it, RT_TL_OPTIMIZER);
        if (!flushed) { /* a synchronous iteration is whole */
            assert_int_equal(fk, mb);
            assert_int_equal(bk, mb);
            assert_int_equal(count_kind(ev, n, it, RT_TL_OPTIMIZER), 1);
        }
        assert_int_equal(count_kind(ev, n, it, RT_TL_SEND_ACTIVATION), s < P - 1 ? fk : 0);
        assert_int_equal(count_kind(ev, n, it, RT_TL_RECV_ACTIVATION), s > 0 ? fk : 0);
        assert_int_equal(count_kind(ev, n, it, RT_TL_SEND_GRADIENT), s > 0 ? bk : 0);
        assert_int_equal(count_kind(ev, n, it, RT_TL_RECV_GRADIENT), s < P - 1 ? bk : 0);
        assert_int_equal(count_kind(ev, n, it, RT_TL_ALLREDUCE), 0);
    }
    assert_int_equal(f, iterations * mb);
    assert_int_equal(b, iterations * mb);
    /* pipedream without copies steps after every backward */
    assert_int_equal(o, flushed ? b : iterations);
    free(ev);
}

static void test_timeline_records(void **state)
{
    (void)state;
    enum { P = 3, MB = 4 };
    const run_spec rs = {MLP_JSON, "1f1b", P, 8, MB, 0, "sgd", "local", NULL, NULL, NULL, 0};
    rt_runner *r[P] = {0};
    pipeline_open(&rs, r);
    pipeline_run(&rs, r, 1, 3, NULL);
    for (int s = 0; s < P; s++) {
        check_timeline(r[s], s, P, 3, 1, MB, false);
        rt_runner_destroy(&r[s]);
    }
    const run_spec pd = {MLP_JSON, "pipedream", P, 8, MB, 0, "sgd", "local", NULL, NULL, NULL, 0};
    pipeline_open(&pd, r);
    pd_job *jobs = pd_run(&pd, r, 1, 3, true);
    for (int s = 0; s < P; s++) {
        check_timeline(r[s], s, P, 3, 1, MB, true);
        rt_runner_destroy(&r[s]);
    }
    free(jobs);
}

static void test_loss_decreases(void **state)
{
    (void)state;
    const run_spec rs = {GPT_JSON, "1f1b", 2, 8, 2, 0, "adamw", "local", NULL, NULL, NULL, 0};
    rt_runner *r[2] = {0};
    pipeline_open(&rs, r);
    rt_report first[2], last[2];
    pipeline_run(&rs, r, 1, 1, first);
    pipeline_run(&rs, r, 2, 40, last);
    assert_true(last[1].loss < first[1].loss * 0.8);
    assert_false(first[0].has_loss);
    for (int s = 0; s < 2; s++)
        rt_runner_destroy(&r[s]);
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_norms_skipped),
        cmocka_unit_test(test_fp16_loss_scale),
        cmocka_unit_test(test_timeline_records),
        cmocka_unit_test(test_loss_decreases),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
