/* coordinator/planner/plan_advise: the search equals planning every subset on a small
 * catalogue (3 types, 8 devices, 2 zones) for every objective; a set's throughput is plan_run's
 * on exactly those devices; the catalogue keys (prices, zones) and the objectives' parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_advise.h"

#define DATA SC_TEST_DATA_DIR "/planner/"

typedef struct fixture {
    plan_profile *prof;
    plan_cluster *cat;
    plan_advise_cfg cfg;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_profile_load(&f->prof, DATA "tiny.json", &err), SC_OK);
    assert_int_equal(plan_cluster_load_catalog(&f->cat, DATA "catalog_small.json", &err), SC_OK);
    f->cfg.catalog = f->cat;
    f->cfg.strategy = PLAN_STRAT_HETERO;
    f->cfg.request = (plan_request){
        .profile = f->prof, .batch = 16, .schedule = PLAN_SCHED_1F1B, .runtime_zb1 = 1};
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    plan_profile_destroy(&f->prof);
    plan_cluster_destroy(&f->cat);
    free(f);
    return 0;
}

static void assert_close(double a, double b)
{
    assert_true(fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-12);
}

/* Every objective: plan_advise_run's best and front equal those of all 255 subsets. */
static void test_equals_brute_force(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    int n = f->cat->n_devices;
    assert_int_equal(n, 8);
    assert_int_equal(f->cat->n_types, 3);
    int n_sub = (1 << n) - 1;
    plan_advise_point *pts = calloc((size_t)n_sub, sizeof *pts);
    int *idx = malloc((size_t)n_sub * sizeof *idx);
    for (int mask = 1; mask <= n_sub; mask++) {
        int devs[8], k = 0;
        for (int d = 0; d < n; d++)
            if (mask & (1 << d))
                devs[k++] = d;
        assert_int_equal(plan_advise_eval(&f->cfg, devs, k, &pts[mask - 1], NULL, NULL, &err),
                         SC_OK);
    }
    const char *objectives[] = {"throughput",      "cost",
                                "min-cost-at=300", "max-throughput-at=6",
                                "deadline=2e7@24", "min-cost-at=1e9"};
    for (size_t o = 0; o < sizeof objectives / sizeof *objectives; o++) {
        assert_int_equal(plan_advise_objective_parse(objectives[o], &f->cfg.objective, &err),
                         SC_OK);
        int best = -1;
        for (int i = 0; i < n_sub; i++)
            if (plan_advise_meets(&f->cfg, &pts[i]) &&
                (best < 0 || plan_advise_better(&f->cfg, &pts[i], &pts[best])))
                best = i;
        plan_advise_result r;
        assert_int_equal(plan_advise_run(&f->cfg, &r, &err), SC_OK);
        assert_true(r.exact);
        assert_true(r.evaluated < n_sub); /* counts per class, not subsets */
        assert_int_equal(r.have_best, best >= 0);
        if (best >= 0) {
            assert_close(r.best.samples_per_s, pts[best].samples_per_s);
            assert_close(r.best.cost_per_hour, pts[best].cost_per_hour);
        }
        int nf = plan_advise_front(pts, n_sub, idx);
        assert_int_equal(r.n_pareto, nf);
        for (int i = 0; i < nf; i++) {
            assert_close(r.pareto[i].samples_per_s, pts[idx[i]].samples_per_s);
            assert_close(r.pareto[i].cost_per_hour, pts[idx[i]].cost_per_hour);
            if (i > 0) {
                assert_true(r.pareto[i].samples_per_s > r.pareto[i - 1].samples_per_s);
                assert_true(r.pareto[i].cost_per_hour >= r.pareto[i - 1].cost_per_hour);
            }
        }
        plan_advise_result_free(&r);
    }
    /* the last objective asks for more than any set gives */
    for (int i = 0; i < n_sub; i++)
        plan_advise_point_free(&pts[i]);
    free(pts);
    free(idx);
}

/* The best's samples/s is plan_run's on the cluster of exactly its devices; its price is
 * theirs plus the cross-zone traffic. */
static void test_matches_plan(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_advise_objective_parse("throughput", &f->cfg.objective, &err), SC_OK);
    plan_advise_result r;
    assert_int_equal(plan_advise_run(&f->cfg, &r, &err), SC_OK);
    assert_true(r.have_best);
    plan_cluster *sub = NULL;
    int order[8];
    assert_int_equal(
        plan_cluster_subset(f->cat, r.best.devices, r.best.n_devices, &sub, order, &err), SC_OK);
    plan_request req = f->cfg.request;
    req.cluster = sub;
    plan_result pr;
    memset(&pr, 0, sizeof pr);
    assert_int_equal(plan_run(&req, PLAN_STRAT_HETERO, &pr, &err), SC_OK);
    assert_close(pr.throughput_samples_per_s, r.best.samples_per_s);
    assert_close(r.best_plan.throughput_samples_per_s, r.best.samples_per_s);
    double price = 0;
    for (int i = 0; i < r.best.n_devices; i++) {
        assert_int_equal(order[i], r.best.devices[i]);
        price += f->cat->types[f->cat->devices[order[i]].type].price_per_hour;
    }
    assert_close(r.best.devices_per_hour, price);
    assert_true(r.best.traffic_per_hour >= 0);
    assert_close(r.best.cost_per_hour, price + r.best.traffic_per_hour);
    plan_result_free(&pr);
    plan_cluster_destroy(&sub);
    plan_advise_result_free(&r);
}

/* Above exact_limit the greedy ascent answers with fewer plans, a set that meets the
 * objective and a front of real points. */
static void test_greedy(void **state)
{
    fixture *f = *state;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_advise_objective_parse("cost", &f->cfg.objective, &err), SC_OK);
    f->cfg.exact_limit = 10;
    plan_advise_result r;
    assert_int_equal(plan_advise_run(&f->cfg, &r, &err), SC_OK);
    f->cfg.exact_limit = 0;
    assert_false(r.exact);
    assert_true(r.have_best);
    assert_true(r.evaluated < r.candidates);
    assert_true(r.n_pareto >= 1);
    assert_true(r.best.samples_per_s > 0);
    plan_advise_result_free(&r);
}

static void test_zones_and_prices(void **state)
{
    fixture *f = *state;
    const plan_cluster *c = f->cat;
    assert_int_equal(c->n_zones, 2);
    assert_true(plan_cluster_has_prices(c));
    /* b (east) to c (west): the smaller NIC (3e9) capped by the zones' 1e9 */
    assert_close(plan_cluster_bw(c, 2, 5), 1e9);
    assert_close(plan_cluster_bw(c, 0, 2), 12.5e9); /* a and b: one zone */
    assert_close(plan_cluster_price_per_byte(c, 2, 5), 0.02 / 1e9);
    assert_close(plan_cluster_price_per_byte(c, 0, 2), 0);
}

static void expect_refused(const char *text, const char *needle)
{
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_not_equal(plan_cluster_parse_catalog(&c, "cat.json", text, strlen(text), &err),
                         SC_OK);
    assert_null(c);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("'%s' lacks '%s'", err.msg, needle);
}

#define HEAD "{\"format\": \"stagecraft-cluster\", \"version\": 1, "
#define SRV(z)                                                                                     \
    "{\"name\": \"a\", " z "\"devices\": [\"g\"], \"intra_bandwidth_bytes_per_s\": 1e9, "          \
    "\"nic_bandwidth_bytes_per_s\": 1e9}"

static void test_catalog_refusals(void **state)
{
    (void)state;
    expect_refused(HEAD "\"device_types\": {\"g\": {\"relative_speed\": 1, \"price_per_hr\": 1}},"
                        " \"servers\": [" SRV("") "]}",
                   "price_per_hour");
    expect_refused(
        HEAD "\"device_types\": {\"g\": {\"relative_speed\": 1}}, \"servers\": [" SRV("") "]}",
        "needs \"price_per_hour\"");
    expect_refused(HEAD
                   "\"device_types\": {\"g\": {\"relative_speed\": 1, \"price_per_hour\": 1}},"
                   " \"servers\": [" SRV("\"zone\": \"x\", ") "], \"zones\": {\"pairs\": "
                                                              "[{\"zones\": [\"x\", \"y\"]}]}}",
                   "no server is in zone \"y\"");
    expect_refused(HEAD "\"device_types\": {\"g\": {\"relative_speed\": 1, \"price_per_hour\": 1}},"
                        " \"servers\": [" SRV("\"zonne\": \"x\", ") "]}",
                   "zonne");
    /* plan's reader takes the same file without prices */
    const char *ok =
        HEAD "\"device_types\": {\"g\": {\"relative_speed\": 1}}, \"servers\": [" SRV("") "]}";
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_parse(&c, "c.json", ok, strlen(ok), &err), SC_OK);
    assert_false(plan_cluster_has_prices(c));
    plan_cluster_destroy(&c);
}

static void test_objective_parse(void **state)
{
    (void)state;
    plan_advise_objective o;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_advise_objective_parse("deadline=2e9@24", &o, &err), SC_OK);
    assert_int_equal(o.kind, PLAN_ADVISE_DEADLINE);
    assert_close(o.tokens, 2e9);
    assert_close(o.hours, 24);
    assert_int_equal(plan_advise_objective_parse("min-cost-at=120", &o, &err), SC_OK);
    assert_close(o.samples_per_s, 120);
    const char *bad[] = {"fast",       "min-cost-at=", "min-cost-at=-1",
                         "deadline=5", "cost=3",       "max-throughput-at=x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        sc_err_clear(&err);
        assert_int_equal(plan_advise_objective_parse(bad[i], &o, &err), SC_ERR_INVALID);
        assert_non_null(strstr(err.msg, "expected"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equals_brute_force),
        cmocka_unit_test(test_matches_plan),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_zones_and_prices),
        cmocka_unit_test(test_catalog_refusals),
        cmocka_unit_test(test_objective_parse),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
