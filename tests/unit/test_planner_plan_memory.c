/* coordinator/planner/plan: memory fit through the strategy driver: umpipe's gather slot and
 * fill-drain stashes, the --microbatches auto sweep going on until a count fits, pipedream's
 * stash counted over the plan's own stages, and sliced warm-up halves deciding fit in every
 * search and in the sweep. The driver's figures, JSON and errors: test_planner_plan_driver. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/planner/plan.h"
#include "coordinator/planner/plan_ga.h"

/* umpipe's memory: a backward entry unlike every forward one runs on a gather slot that holds
 * its samples' stash. Forward times linear in the size and backward ones nearly flat make the
 * search take one-sample forward entries and one whole-batch backward entry; with memory for
 * the batch's stash but not for that slot too, the plan searched again fits, and says so. */
static void test_umpipe_gather_slot_memory(void **state)
{
    (void)state;
    const char *json =
        "{\"format\": \"stagecraft-profile\", \"version\": 1, \"microbatch_size\": 1, "
        "\"blocks\": [{\"name\": \"a\", \"forward_s\": 1, \"backward_s\": 2, "
        "\"activation_bytes\": 1, \"stash_bytes\": 1000, \"by_microbatch_size\": [{\"size\": 1, "
        "\"forward_s\": 1, \"backward_s\": 2}, {\"size\": 8, \"forward_s\": 8, \"backward_s\": "
        "2.5}]}, "
        "{\"name\": \"b\", \"forward_s\": 1, \"backward_s\": 2, \"activation_bytes\": 1, "
        "\"stash_bytes\": 1000, \"by_microbatch_size\": [{\"size\": 1, \"forward_s\": 1, "
        "\"backward_s\": 2}, {\"size\": 8, \"forward_s\": 8, \"backward_s\": 2.5}]}]}";
    sc_err err;
    sc_err_clear(&err);
    plan_profile *p = NULL;
    assert_int_equal(plan_profile_parse_json(&p, "gather.json", json, strlen(json), &err), SC_OK);
    const double mems[] = {0 /* unlimited */, 14000, 12000, 9000};
    for (size_t k = 0; k < sizeof mems / sizeof *mems; k++) {
        plan_cluster *c = NULL;
        assert_int_equal(plan_cluster_new_uniform(&c, 2, 1e9, mems[k], &err), SC_OK);
        plan_request req = {.profile = p,
                            .cluster = c,
                            .batch = 8,
                            .microbatches = 8,
                            .schedule = PLAN_SCHED_GPIPE};
        plan_result r;
        assert_int_equal(plan_run(&req, PLAN_STRAT_UMPIPE, &r, &err), SC_OK);
        assert_int_equal(r.part->n_stages, 2);
        int K = r.ga_k, slot = 0;
        for (int s = 0; s < 2; s++) {
            int g = plan_ga_gather_size(r.fwd_sizes + s * K, r.bwd_sizes + s * K, K);
            slot = g > slot ? g : slot;
            /* parameters none; the batch's stash, the slot's stash, 2 x the largest entry */
            if (mems[k] > 0)
                assert_true(r.peak_memory_bytes[s] <= mems[k]);
        }
        assert_true(r.fits_memory);
        if (mems[k] == 0) {
            /* unlimited: the whole batch backward in one entry, on a slot of 8 samples */
            assert_int_equal(slot, 8);
            assert_float_equal(r.peak_memory_bytes[0], 8000 + 8000 + 2 * 8, 1e-6);
            assert_string_equal(r.note, "");
        } else {
            assert_non_null(strstr(r.note, "searched again"));
            /* never worse than the best equal split, which needs no slot */
            assert_true(r.objective_s <= r.ga_best_equal_s * (1 + 1e-9));
        }
        plan_result_free(&r);
        plan_cluster_destroy(&c);
    }
    plan_profile_destroy(&p);
}

/* umpipe's plans run fill-drain, so its partition is searched under that memory: four blocks
 * whose 1F1B stashes fit two devices of 1000 bytes, but whose whole-batch stashes (8 samples x
 * 100 bytes a block) need a device per block. Capped at two stages it refuses, saying why; on
 * four its plan fits. */
static void test_umpipe_fill_drain_memory(void **state)
{
    (void)state;
    const char *json = "{\"format\": \"stagecraft-profile\", \"version\": 1, "
                       "\"microbatch_size\": 1, \"blocks\": ["
                       "{\"name\": \"a\", \"forward_s\": 1, \"backward_s\": 2, "
                       "\"activation_bytes\": 10, \"stash_bytes\": 100},"
                       "{\"name\": \"b\", \"forward_s\": 1, \"backward_s\": 2, "
                       "\"activation_bytes\": 10, \"stash_bytes\": 100},"
                       "{\"name\": \"c\", \"forward_s\": 1, \"backward_s\": 2, "
                       "\"activation_bytes\": 10, \"stash_bytes\": 100},"
                       "{\"name\": \"d\", \"forward_s\": 1, \"backward_s\": 2, "
                       "\"activation_bytes\": 10, \"stash_bytes\": 100}]}";
    sc_err err;
    sc_err_clear(&err);
    plan_profile *p = NULL;
    plan_cluster *c = NULL;
    assert_int_equal(plan_profile_parse_json(&p, "fd.json", json, strlen(json), &err), SC_OK);
    assert_int_equal(plan_cluster_new_uniform(&c, 4, 1e9, 1000, &err), SC_OK);
    plan_request req = {.profile = p,
                        .cluster = c,
                        .batch = 8,
                        .microbatches = 8,
                        .max_stages = 2,
                        .schedule = PLAN_SCHED_1F1B};
    plan_result r;
    /* 1F1B on two stages fits */
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &r, &err), SC_OK);
    assert_true(r.ok && r.fits_memory);
    assert_int_equal(r.part->n_stages, 2);
    plan_result_free(&r);
    /* fill-drain on two does not: refused, naming the reason */
    sc_err_clear(&err);
    assert_int_not_equal(plan_run(&req, PLAN_STRAT_UMPIPE, &r, &err), SC_OK);
    assert_false(r.ok);
    assert_non_null(strstr(r.error, "umpipe runs fill-drain"));
    plan_result_free(&r);
    /* on four stages it fits, every stage within its device's memory */
    req.max_stages = 0;
    sc_err_clear(&err);
    assert_int_equal(plan_run(&req, PLAN_STRAT_UMPIPE, &r, &err), SC_OK);
    assert_true(r.ok && r.fits_memory);
    assert_int_equal(r.part->n_stages, 4);
    for (int s = 0; s < 4; s++)
        assert_true(r.peak_memory_bytes[s] <= 1000);
    plan_result_free(&r);
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* Times linear in the size: the auto count stops at a 1% bubble (99 (p-1)) instead of one
 * micro-batch per sample; when memory needs smaller micro-batches than that, the sweep goes on
 * doubling the count until one fits. */
static void test_auto_microbatches_capped(void **state)
{
    (void)state;
    const char *lin = "{\"format\": \"stagecraft-profile\", \"version\": 1,"
                      " \"microbatch_size\": 1, \"blocks\": ["
                      "{\"name\": \"a\", \"forward_s\": 1e-4, \"backward_s\": 2e-4,"
                      " \"activation_bytes\": 1000, \"parameter_bytes\": 1000,"
                      " \"stash_bytes\": 4000},"
                      "{\"name\": \"b\", \"forward_s\": 1e-4, \"backward_s\": 2e-4,"
                      " \"activation_bytes\": 1000, \"parameter_bytes\": 1000,"
                      " \"stash_bytes\": 4000}]}";
    plan_profile *p;
    plan_cluster *c;
    sc_err err;
    assert_int_equal(plan_profile_parse_json(&p, "lin.json", lin, strlen(lin), &err), SC_OK);
    assert_int_equal(plan_cluster_new_uniform(&c, 2, 1e12, 0, &err), SC_OK);
    plan_request req = {.profile = p, .cluster = c, .batch = 4096, .schedule = PLAN_SCHED_1F1B};
    plan_result r;
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &r, &err), SC_OK);
    assert_int_equal(r.part->n_stages, 2);
    assert_int_equal(r.n_micro, 64); /* the largest divisor of 4096 up to 99 */
    for (int i = 0; i < r.n_sweep; i++)
        assert_true(r.sweep_count[i] >= 2 && r.sweep_count[i] <= 99);
    plan_result_free(&r);
    /* memory that 512 micro-batches of 8 samples fit and 256 of 16 do not */
    req.microbatches = 512;
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &r, &err), SC_OK);
    double need = r.peak_memory_bytes[0] > r.peak_memory_bytes[1] ? r.peak_memory_bytes[0]
                                                                  : r.peak_memory_bytes[1];
    plan_result_free(&r);
    plan_cluster_destroy(&c);
    assert_int_equal(plan_cluster_new_uniform(&c, 2, 1e12, need, &err), SC_OK);
    req.cluster = c;
    req.microbatches = 0;
    /* every strategy that fails on memory alone (no_fit) searches again with smaller ones */
    const plan_strategy strats[] = {PLAN_STRAT_MINMAX, PLAN_STRAT_HETERO, PLAN_STRAT_EXHAUSTIVE};
    for (size_t k = 0; k < sizeof strats / sizeof *strats; k++) {
        assert_int_equal(plan_run(&req, strats[k], &r, &err), SC_OK);
        assert_int_equal(r.n_micro, 512);
        assert_true(r.fits_memory);
        plan_result_free(&r);
    }
    plan_profile_destroy(&p);
    plan_cluster_destroy(&c);
}

/* PipeDream stashes p - s minibatches and p - s - 1 weight versions at stage s of p stages: the
 * searches count p as the plan's own stages, not the devices, some of which may stay idle.
 * Here block a stashes 100 MB a minibatch: two stages on 300 MB devices fit (stage 0 needs
 * 40 + 10 + 200 MB), while a count of three or four would rule out every plan. */
static void test_pipedream_memory_counts_stages(void **state)
{
    (void)state;
    const char *two = "{\"format\": \"stagecraft-profile\", \"version\": 1,"
                      " \"microbatch_size\": 1, \"blocks\": ["
                      "{\"name\": \"a\", \"forward_s\": 0.01, \"backward_s\": 0.02,"
                      " \"activation_bytes\": 100e6, \"parameter_bytes\": 10e6},"
                      "{\"name\": \"b\", \"forward_s\": 0.01, \"backward_s\": 0.02,"
                      " \"activation_bytes\": 1e3, \"parameter_bytes\": 10e6}]}";
    plan_profile *p;
    sc_err err;
    assert_int_equal(plan_profile_parse_json(&p, "two.json", two, strlen(two), &err), SC_OK);
    for (int gpus = 2; gpus <= 4; gpus++) {
        plan_cluster *c;
        assert_int_equal(plan_cluster_new_uniform(&c, gpus, 1e10, 300e6, &err), SC_OK);
        plan_request req = {.profile = p,
                            .cluster = c,
                            .batch = 1,
                            .microbatches = 1,
                            .schedule = PLAN_SCHED_PIPEDREAM};
        const plan_strategy strats[] = {PLAN_STRAT_MINMAX, PLAN_STRAT_HETERO, PLAN_STRAT_UMPIPE,
                                        PLAN_STRAT_EXHAUSTIVE};
        for (size_t k = 0; k < sizeof strats / sizeof *strats; k++) {
            plan_result r;
            sc_err_clear(&err);
            assert_int_equal(plan_run(&req, strats[k], &r, &err), SC_OK);
            /* umpipe plays its own schedule, with its own memory figures */
            if (strats[k] != PLAN_STRAT_UMPIPE)
                assert_true(r.fits_memory);
            if (strats[k] == PLAN_STRAT_MINMAX) {
                assert_int_equal(r.part->n_stages, 2);
                assert_true(fabs(r.peak_memory_bytes[0] - 250e6) < 1e3);
            }
            plan_result_free(&r);
        }
        plan_cluster_destroy(&c);
    }
    plan_profile_destroy(&p);
}

/* Sliced warm-up halves change each stage's stash: with one micro-batch of 8 samples run as
 * two halves, the last stage keeps half a micro-batch, not one. Blocks b1 and b2 (2 x 1.4e8 of
 * weights and optimizer state, 2.2e8 of stash) fit the 6e8 device only that way; minmax must
 * find that split, as uniform does, and keep a sliced count under which it fits. */
static void test_sliced_memory_in_search(void **state)
{
    (void)state;
    const char *prof = "{\"format\": \"stagecraft-profile\", \"version\": 1,"
                       " \"microbatch_size\": 2, \"blocks\": ["
                       "{\"name\": \"b0\", \"forward_s\": 0.0068, \"backward_s\": 0.0126,"
                       " \"activation_bytes\": 0, \"parameter_bytes\": 83e6},"
                       "{\"name\": \"b1\", \"forward_s\": 0, \"backward_s\": 0.0037,"
                       " \"activation_bytes\": 0, \"parameter_bytes\": 50e6},"
                       "{\"name\": \"b2\", \"forward_s\": 0, \"backward_s\": 0.0007,"
                       " \"activation_bytes\": 54e6, \"parameter_bytes\": 59e6}]}";
    const char *cl =
        "{\"format\": \"stagecraft-cluster\", \"version\": 1, \"device_types\": {"
        "\"small\": {\"relative_speed\": 3, \"memory_bytes\": 6e8},"
        "\"big\": {\"relative_speed\": 3, \"memory_bytes\": 1.6e9}},"
        " \"servers\": [{\"name\": \"s0\", \"devices\": [\"big\"],"
        " \"intra_bandwidth_bytes_per_s\": 1e9, \"nic_bandwidth_bytes_per_s\": 1e8},"
        " {\"name\": \"s1\", \"devices\": [\"small\"],"
        " \"intra_bandwidth_bytes_per_s\": 1e10, \"nic_bandwidth_bytes_per_s\": 1e8}]}";
    plan_profile *p;
    plan_cluster *c;
    sc_err err;
    assert_int_equal(plan_profile_parse_json(&p, "sl.json", prof, strlen(prof), &err), SC_OK);
    assert_int_equal(plan_cluster_parse(&c, "sl.cluster.json", cl, strlen(cl), &err), SC_OK);
    plan_request req = {
        .profile = p, .cluster = c, .batch = 8, .microbatches = 1, .schedule = PLAN_SCHED_SLICED};
    plan_result u, r;
    assert_int_equal(plan_run(&req, PLAN_STRAT_UNIFORM, &u, &err), SC_OK);
    assert_true(u.fits_memory);
    assert_int_equal(u.sliced, 1);
    assert_int_equal(plan_run(&req, PLAN_STRAT_MINMAX, &r, &err), SC_OK);
    assert_true(r.fits_memory);
    assert_int_equal(r.part->n_stages, 2);
    assert_int_equal(r.part->last[0], 0);
    assert_true(r.bottleneck_s <= u.bottleneck_s * (1 + 1e-9));
    plan_result_free(&u);
    plan_result_free(&r);
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* The same halves decide fit for every strategy that checks memory. On two devices of 6e8
 * bytes: b0 and b1 together need 4 x 1.51e8 of weights and optimizer state (too much), b1 and
 * b2 need 4.36e8 and b2's stash of 8 samples, 2.16e8 (too much), or half of it when the
 * micro-batch runs as two halves; b0 alone needs 4.04e8. So the only plan is b0 | b1 b2 with
 * one sliced micro-batch; without halves (1f1b) none fits. */
static void test_sliced_memory_every_search(void **state)
{
    (void)state;
    const char *prof = "{\"format\": \"stagecraft-profile\", \"version\": 1,"
                       " \"microbatch_size\": 2, \"blocks\": ["
                       "{\"name\": \"b0\", \"forward_s\": 0.0068, \"backward_s\": 0.0126,"
                       " \"activation_bytes\": 0, \"parameter_bytes\": 101e6},"
                       "{\"name\": \"b1\", \"forward_s\": 0, \"backward_s\": 0.0037,"
                       " \"activation_bytes\": 0, \"parameter_bytes\": 50e6},"
                       "{\"name\": \"b2\", \"forward_s\": 0, \"backward_s\": 0.0007,"
                       " \"activation_bytes\": 54e6, \"parameter_bytes\": 59e6}]}";
    plan_profile *p;
    plan_cluster *c;
    sc_err err;
    assert_int_equal(plan_profile_parse_json(&p, "sl.json", prof, strlen(prof), &err), SC_OK);
    assert_int_equal(plan_cluster_new_uniform(&c, 2, 1e9, 6e8, &err), SC_OK);
    const plan_strategy strats[] = {PLAN_STRAT_MINMAX, PLAN_STRAT_HETERO, PLAN_STRAT_EXHAUSTIVE};
    for (size_t k = 0; k < sizeof strats / sizeof *strats; k++) {
        plan_request req = {.profile = p,
                            .cluster = c,
                            .batch = 8,
                            .microbatches = 1,
                            .schedule = PLAN_SCHED_SLICED};
        plan_result r;
        sc_err_clear(&err);
        sc_status rc = plan_run(&req, strats[k], &r, &err);
        if (rc != SC_OK)
            fail_msg("%s: %s", plan_strategy_name(strats[k]), err.msg);
        assert_true(r.fits_memory);
        assert_int_equal(r.sliced, 1);
        assert_int_equal(r.part->n_stages, 2);
        assert_int_equal(r.part->last[0], 0);
        for (int s = 0; s < 2; s++)
            assert_true(r.peak_memory_bytes[s] <= 6e8);
        plan_result_free(&r);
        req.schedule = PLAN_SCHED_1F1B;
        sc_err_clear(&err);
        assert_int_equal(plan_run(&req, strats[k], &r, &err), SC_ERR_TOO_LARGE);
        plan_result_free(&r);
    }
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* The --microbatches auto sweep counts the halves too. Three stages, a batch of 2 samples: one
 * micro-batch of 2 (each block's time has a large fixed part, so it is the faster count) fits
 * the 150-byte devices only when it runs as two halves, which leave b2's stage one sample's
 * stash (100 bytes) instead of two; two micro-batches of one sample fit without halves but
 * take longer. The sweep must see that one micro-batch fits. */
static void test_sliced_memory_in_sweep(void **state)
{
    (void)state;
    char prof[2048];
    const char *block = "{\"name\": \"b%d\", \"forward_s\": 1, \"backward_s\": 1,"
                        " \"activation_bytes\": 1, \"stash_bytes\": %d, \"by_microbatch_size\":"
                        " [{\"size\": 1, \"forward_s\": 1, \"backward_s\": 1},"
                        " {\"size\": 2, \"forward_s\": 1.05, \"backward_s\": 1.05}]}";
    int at = snprintf(prof, sizeof prof,
                      "{\"format\": \"stagecraft-profile\", \"version\": 1,"
                      " \"microbatch_size\": 1, \"blocks\": [");
    for (int b = 0; b < 3; b++) {
        at += snprintf(prof + at, sizeof prof - (size_t)at, "%s", b ? ", " : "");
        at += snprintf(prof + at, sizeof prof - (size_t)at, block, b, b == 2 ? 100 : 10);
    }
    snprintf(prof + at, sizeof prof - (size_t)at, "]}");
    plan_profile *p;
    plan_cluster *c;
    sc_err err;
    assert_int_equal(plan_profile_parse_json(&p, "sweep.json", prof, strlen(prof), &err), SC_OK);
    assert_int_equal(plan_cluster_new_uniform(&c, 3, 1e9, 150, &err), SC_OK);
    plan_request req = {.profile = p, .cluster = c, .batch = 2, .schedule = PLAN_SCHED_SLICED};
    const plan_strategy strats[] = {PLAN_STRAT_UNIFORM, PLAN_STRAT_MINMAX, PLAN_STRAT_EXHAUSTIVE};
    for (size_t k = 0; k < sizeof strats / sizeof *strats; k++) {
        plan_result r;
        sc_err_clear(&err);
        assert_int_equal(plan_run(&req, strats[k], &r, &err), SC_OK);
        assert_int_equal(r.part->n_stages, 3);
        assert_int_equal(r.n_micro, 1);
        assert_int_equal(r.sliced, 1);
        assert_true(r.fits_memory);
        for (int s = 0; s < 3; s++)
            assert_true(r.peak_memory_bytes[s] <= 150);
        /* the sweep's entry for one micro-batch is the sliced plan's */
        int found = 0;
        for (int i = 0; i < r.n_sweep; i++)
            if (r.sweep_count[i] == 1) {
                found = 1;
                assert_true(r.sweep_fits[i]);
                assert_float_equal(r.sweep_iter_s[i], r.iteration_time_s, 1e-12);
            } else {
                assert_true(r.sweep_iter_s[i] > r.iteration_time_s);
            }
        assert_true(found);
        plan_result_free(&r);
    }
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_umpipe_gather_slot_memory),
        cmocka_unit_test(test_umpipe_fill_drain_memory),
        cmocka_unit_test(test_auto_microbatches_capped),
        cmocka_unit_test(test_pipedream_memory_counts_stages),
        cmocka_unit_test(test_sliced_memory_in_search),
        cmocka_unit_test(test_sliced_memory_every_search),
        cmocka_unit_test(test_sliced_memory_in_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
