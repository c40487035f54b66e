/* coordinator/planner/plan_hint and plan_advise_margins: `plan`'s hint names the subset that
 * plans faster (a slow device dropped) or, with prices, costs less per sample, with the figure
 * plan_run gives for exactly that subset, and none where it cannot tell (links, one device);
 * the margins of held devices and catalogue classes are plan_advise_eval's figures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_advise_margins.h"
#include "coordinator/planner/plan_hint.h"

#define DATA SC_TEST_DATA_DIR "/planner/"

static plan_profile *load_profile(void)
{
    plan_profile *p = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_profile_load(&p, DATA "tiny.json", &err), SC_OK);
    return p;
}

static plan_cluster *parse(const char *text)
{
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_parse(&c, "test", text, strlen(text), &err), SC_OK);
    return c;
}

static double plan_sps(const plan_request *req, plan_strategy s)
{
    plan_result r;
    sc_err err;
    sc_err_clear(&err);
    memset(&r, 0, sizeof r);
    assert_int_equal(plan_run(req, s, &r, &err), SC_OK);
    double v = r.throughput_samples_per_s;
    plan_result_free(&r);
    return v;
}

static void assert_close(double a, double b)
{
    assert_true(fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-12);
}

/* Three fast devices and a very slow one behind a slow link: the uniform split waits on the
 * slow one, and the three alone plan faster. */
static void test_faster_subset(void **state)
{
    (void)state;
    plan_profile *p = load_profile();
    plan_cluster *c =
        parse("{\"format\": \"stagecraft-cluster\", \"version\": 1, \"device_types\": {"
              "\"fast\": {\"relative_speed\": 1.0}, \"slow\": {\"relative_speed\": 0.05}},"
              "\"servers\": [{\"name\": \"a\", \"devices\": [\"fast\", \"fast\", \"fast\"],"
              "\"intra_bandwidth_bytes_per_s\": 100e9, \"nic_bandwidth_bytes_per_s\": 10e9},"
              "{\"name\": \"b\", \"devices\": [\"slow\"], \"intra_bandwidth_bytes_per_s\": 100e9,"
              "\"nic_bandwidth_bytes_per_s\": 1e6}]}");
    plan_request req = {
        .profile = p, .cluster = c, .batch = 16, .schedule = PLAN_SCHED_1F1B, .runtime_zb1 = 1};
    double full = plan_sps(&req, PLAN_STRAT_UNIFORM);
    plan_hint h;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_hint_find(&req, PLAN_STRAT_UNIFORM, full, &h, &err), SC_OK);
    assert_true(h.found);
    assert_true(h.faster);
    assert_int_equal(h.dropped, 3);
    assert_true(h.planned >= 1 && h.planned <= PLAN_HINT_MAX_PLANS);
    /* the figure is plan_run's on the cluster of the three fast devices */
    plan_cluster *sub = NULL;
    int devs[3] = {0, 1, 2};
    assert_int_equal(plan_cluster_subset(c, devs, 3, &sub, NULL, &err), SC_OK);
    plan_request r3 = req;
    r3.cluster = sub;
    assert_close(h.samples_per_s, plan_sps(&r3, PLAN_STRAT_UNIFORM));
    assert_close(h.gain, h.samples_per_s / full - 1);
    char line[512];
    plan_hint_line(c, &h, line, sizeof line);
    assert_non_null(strstr(line, "hint: 3 of these 4 devices (dropping device 3, slow on b) "
                                 "plan "));
    assert_non_null(strstr(line, "faster; see stagecraft advise"));
    plan_cluster_destroy(&sub);
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* One device far dearer than the others: without it the set costs less per sample. */
static void test_cheaper_subset(void **state)
{
    (void)state;
    plan_profile *p = load_profile();
    plan_cluster *c =
        parse("{\"format\": \"stagecraft-cluster\", \"version\": 1, \"device_types\": {"
              "\"cheap\": {\"relative_speed\": 1.0, \"price_per_hour\": 1.0},"
              "\"dear\": {\"relative_speed\": 1.0, \"price_per_hour\": 100.0}},"
              "\"servers\": [{\"name\": \"a\", \"devices\": [\"cheap\", \"cheap\", \"dear\"],"
              "\"intra_bandwidth_bytes_per_s\": 100e9, \"nic_bandwidth_bytes_per_s\": 10e9}]}");
    plan_request req = {
        .profile = p, .cluster = c, .batch = 16, .schedule = PLAN_SCHED_1F1B, .runtime_zb1 = 1};
    double full = plan_sps(&req, PLAN_STRAT_UNIFORM);
    plan_hint h;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_hint_find(&req, PLAN_STRAT_UNIFORM, full, &h, &err), SC_OK);
    assert_true(h.found);
    assert_int_equal(h.dropped, 2); /* the dear one: least speed per price, tried first */
    if (!h.faster) {
        /* 102 per hour at `full` against 2 per hour at h.samples_per_s */
        assert_close(h.gain, 1 - (2.0 / h.samples_per_s) / (102.0 / full));
        char line[512];
        plan_hint_line(c, &h, line, sizeof line);
        assert_non_null(strstr(line, "cost "));
        assert_non_null(strstr(line, "% less per sample"));
    }
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

/* No hint: one device; a cluster with links (a subset of a wired machine is not modelled). */
static void test_no_hint(void **state)
{
    (void)state;
    plan_profile *p = load_profile();
    plan_cluster *one =
        parse("{\"format\": \"stagecraft-cluster\", \"version\": 1, \"device_types\": {"
              "\"fast\": {\"relative_speed\": 1.0}}, \"servers\": [{\"name\": \"a\", \"devices\": "
              "[\"fast\"], \"intra_bandwidth_bytes_per_s\": 100e9, \"nic_bandwidth_bytes_per_s\": "
              "10e9}]}");
    plan_request req = {
        .profile = p, .cluster = one, .batch = 16, .schedule = PLAN_SCHED_1F1B, .runtime_zb1 = 1};
    plan_hint h;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_hint_find(&req, PLAN_STRAT_UNIFORM, 100, &h, &err), SC_OK);
    assert_false(h.found);
    assert_int_equal(h.planned, 0);
    plan_cluster *links = NULL;
    assert_int_equal(plan_cluster_load(&links, DATA "cluster_links.json", &err), SC_OK);
    req.cluster = links;
    assert_int_equal(plan_hint_find(&req, PLAN_STRAT_UNIFORM, 100, &h, &err), SC_OK);
    assert_false(h.found);
    assert_int_equal(h.planned, 0);
    char line[64] = "x";
    plan_hint_line(links, &h, line, sizeof line);
    assert_string_equal(line, "");
    plan_cluster_destroy(&links);
    plan_cluster_destroy(&one);
    plan_profile_destroy(&p);
}

/* Held: servers a and b (5 devices); the catalogue's server c adds its classes. */
static void test_margins(void **state)
{
    (void)state;
    plan_profile *p = load_profile();
    plan_cluster *cat = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_load_catalog(&cat, DATA "catalog_small.json", &err), SC_OK);
    plan_advise_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.catalog = cat;
    cfg.strategy = PLAN_STRAT_HETERO;
    cfg.request =
        (plan_request){.profile = p, .batch = 16, .schedule = PLAN_SCHED_1F1B, .runtime_zb1 = 1};
    plan_advise_margins m;
    assert_int_equal(plan_advise_margins_run(&cfg, 5, &m, &err), SC_OK);
    assert_int_equal(m.n_drop, 5);
    for (int i = 0; i < 5; i++) {
        int devs[4], k = 0;
        for (int d = 0; d < 5; d++)
            if (d != i)
                devs[k++] = d;
        plan_advise_point pt;
        assert_int_equal(plan_advise_eval(&cfg, devs, k, &pt, NULL, NULL, &err), SC_OK);
        assert_int_equal(m.drop[i].device, i);
        assert_close(m.drop[i].pt.samples_per_s, pt.samples_per_s);
        assert_close(m.drop[i].pt.cost_per_hour, pt.cost_per_hour);
        plan_advise_point_free(&pt);
    }
    /* server c: two "small" and one "mid" */
    assert_int_equal(m.n_add, 2);
    assert_int_equal(m.add[0].device, 5);
    assert_int_equal(m.add[0].count, 2);
    assert_int_equal(m.add[1].device, 7);
    assert_int_equal(m.add[1].count, 1);
    int devs[7] = {0, 1, 2, 3, 4, 5, 6};
    plan_advise_point pt;
    assert_int_equal(plan_advise_eval(&cfg, devs, 7, &pt, NULL, NULL, &err), SC_OK);
    assert_close(m.add[0].pt.samples_per_s, pt.samples_per_s);
    assert_close(m.add[0].pt.cost_per_hour, pt.cost_per_hour);
    plan_advise_point_free(&pt);
    plan_advise_margins_free(&m);
    /* bad input: more devices held than the catalogue has */
    assert_int_equal(plan_advise_margins_run(&cfg, 9, &m, &err), SC_ERR_INVALID);
    plan_advise_margins_free(&m);
    plan_cluster_destroy(&cat);
    plan_profile_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_faster_subset),
        cmocka_unit_test(test_cheaper_subset),
        cmocka_unit_test(test_no_hint),
        cmocka_unit_test(test_margins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
