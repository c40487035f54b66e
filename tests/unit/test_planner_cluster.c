/* coordinator/planner/plan_cluster: cluster JSON, the --gpus shorthand, bandwidth rules and
 * the per-type cost tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coordinator/planner/plan_cluster.h"

#define DATA SC_TEST_DATA_DIR "/planner/"

static void test_cluster_json(void **state)
{
    (void)state;
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_load(&c, DATA "cluster2.json", &err), SC_OK);
    assert_int_equal(c->n_devices, 5);
    assert_int_equal(c->n_servers, 2);
    assert_int_equal(c->n_types, 2);
    /* ids in order of appearance: s0 holds 0-1, s1 holds 2-4 */
    assert_int_equal(c->devices[1].server, 0);
    assert_int_equal(c->devices[2].server, 1);
    assert_string_equal(c->types[c->devices[4].type].name, "slow");
    assert_true(c->types[c->devices[0].type].memory_bytes == 40e9);
    /* same server: intra; across: the smaller NIC */
    assert_true(plan_cluster_bw(c, 0, 1) == 300e9);
    assert_true(plan_cluster_bw(c, 2, 4) == 16e9);
    assert_true(plan_cluster_bw(c, 1, 3) == 10e9);
    assert_true(plan_cluster_max_speed(c) == 2.0);
    plan_cluster_destroy(&c);
    assert_null(c);
}

static void fails(const char *file, const char *needle1, const char *needle2)
{
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_load(&c, file, &err), SC_ERR_INVALID);
    assert_null(c);
    if (!strstr(err.msg, needle1) || !strstr(err.msg, needle2))
        print_error("message: %s\n", err.msg);
    assert_non_null(strstr(err.msg, needle1));
    assert_non_null(strstr(err.msg, needle2));
    assert_null(strchr(err.msg, '\n'));
}

static void test_cluster_errors(void **state)
{
    (void)state;
    fails(DATA "bad_cluster_type.json", "$.servers[0].devices[1]", "A100");
    fails(DATA "bad_cluster_bw.json", "$.servers[0].nic_bandwidth_bytes_per_s", "bad_cluster_bw");
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_new_uniform(&c, 4, 0, 0, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--bandwidth"));
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_new_uniform(&c, 0, 1e9, 0, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--gpus"));
    const char *noservers = "{\"format\": \"stagecraft-cluster\", \"version\": 1,"
                            " \"device_types\": {\"a\": {\"relative_speed\": 1}}, \"servers\": []}";
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_parse(&c, "n.json", noservers, strlen(noservers), &err),
                     SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "$.servers"));
    /* a misspelt link kind is refused, not read as a link that counts for nothing */
    const char *badkind =
        "{\"format\": \"stagecraft-cluster\", \"version\": 1,"
        " \"device_types\": {\"a\": {\"relative_speed\": 1}},"
        " \"servers\": [{\"devices\": [\"a\", \"a\"], \"intra_bandwidth_bytes_per_s\": 1e9,"
        " \"nic_bandwidth_bytes_per_s\": 1e9}],"
        " \"links\": [{\"kind\": \"nvlnk\", \"bandwidth_bytes_per_s\": 3e11, \"devices\": [0, "
        "1]}]}";
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_parse(&c, "k.json", badkind, strlen(badkind), &err),
                     SC_ERR_INVALID);
    assert_null(c);
    assert_non_null(strstr(err.msg, "$.links[0].kind"));
    assert_non_null(strstr(err.msg, "unknown link kind \"nvlnk\""));
}

/* A key the format does not define is refused at every level the planner reads, naming the
 * key, its JSON path, line and column and the closest valid key. */
static void refused(const char *text, const char *path, const char *key, const char *near)
{
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_parse(&c, "typo.json", text, strlen(text), &err), SC_ERR_INVALID);
    assert_null(c);
    char want[160];
    snprintf(want, sizeof want, "%s: unknown key \"%s\"", path, key);
    if (strstr(err.msg, want) == NULL || strstr(err.msg, near) == NULL)
        print_error("message: %s\n", err.msg);
    assert_non_null(strstr(err.msg, want));
    assert_non_null(strstr(err.msg, near));
    assert_non_null(strstr(err.msg, "typo.json:"));
}

#define HEAD "{\"format\": \"stagecraft-cluster\", \"version\": 1,\n"
#define SERVER                                                                                     \
    "\"servers\": [{\"devices\": [\"a\", \"a\"], \"intra_bandwidth_bytes_per_s\": 1e9,\n"          \
    " \"nic_bandwidth_bytes_per_s\": 1e9}]"

static void test_cluster_unknown_keys(void **state)
{
    (void)state;
    refused(HEAD "\"device_typse\": {}}", "typo.json:2:17: $.device_typse", "device_typse",
            "did you mean \"device_types\"?");
    refused(HEAD "\"device_types\": {\"a\": {\"relative_sped\": 1}},\n" SERVER "}",
            "$.device_types.a.relative_sped", "relative_sped", "did you mean \"relative_speed\"?");
    refused(HEAD "\"device_types\": {\"a\": {\"relative_speed\": 1,\n"
                 " \"cpu_quota\": {\"fraction\": 0.5, \"period\": 0.1}}},\n" SERVER "}",
            "typo.json:3:43: $.device_types.a.cpu_quota.period", "period",
            "did you mean \"period_s\"?");
    refused(HEAD "\"device_types\": {\"a\": {\"relative_speed\": 1, \"block_times\":\n"
                 " {\"b0\": {\"forward_s\": 1, \"backwards_s\": 2}}}},\n" SERVER "}",
            "$.device_types.a.block_times.b0.backwards_s", "backwards_s",
            "did you mean \"backward_s\"?");
    refused(HEAD "\"device_types\": {\"a\": {\"relative_speed\": 1}},\n"
                 "\"servers\": [{\"devices\": [\"a\"], \"intra_bandwidth_bytes_per_s\": 1e9,\n"
                 " \"nic_bandwidth_bytes_per_s\": 1e9, \"zone_name\": \"x\"}]}",
            "typo.json:4:49: $.servers[0].zone_name", "zone_name", "valid keys here:");
    refused(HEAD "\"device_types\": {\"a\": {\"relative_speed\": 1}},\n" SERVER ",\n"
                 "\"links\": [{\"kind\": \"nvlink\", \"bandwith_bytes_per_s\": 3e11, \"devices\": "
                 "[0, 1]}]}",
            "$.links[0].bandwith_bytes_per_s", "bandwith_bytes_per_s",
            "did you mean \"bandwidth_bytes_per_s\"?");
    refused(HEAD "\"device_types\": {\"a\": {\"relative_speed\": 1}},\n" SERVER ",\n"
                 "\"zones\": {\"price_per_gig\": 1}}",
            "$.zones.price_per_gig", "price_per_gig", "did you mean \"price_per_gb\"?");
}

static void test_uniform(void **state)
{
    (void)state;
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_new_uniform(&c, 3, 5e9, 0, &err), SC_OK);
    assert_int_equal(c->n_devices, 3);
    assert_true(plan_cluster_bw(c, 0, 2) == 5e9);
    assert_true(isinf(c->types[0].memory_bytes));
    plan_cluster_destroy(&c);
    assert_int_equal(plan_cluster_new_uniform(&c, 2, 5e9, 8e9, &err), SC_OK);
    assert_true(c->types[0].memory_bytes == 8e9);
    plan_cluster_destroy(&c);
}

static void test_cost(void **state)
{
    (void)state;
    plan_profile *p = NULL;
    plan_cluster *c = NULL;
    plan_cost *cost = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_profile_load(&p, DATA "tiny.json", &err), SC_OK);
    assert_int_equal(plan_cluster_load(&c, DATA "cluster2.json", &err), SC_OK);
    /* micro-batch of 8 = twice the profile's 4 samples */
    assert_int_equal(plan_cost_new(&cost, p, c, 8, 32, &err), SC_OK);
    int fast = c->devices[0].type, slow = c->devices[2].type;
    /* h0: (0.003 + 0.006) * 2 samples-factor / speed */
    assert_float_equal(plan_cost_work(cost, fast, 1, 1), 0.009 * 2 / 2.0, 1e-15);
    assert_float_equal(plan_cost_work(cost, slow, 1, 1), 0.009 * 2 / 0.5, 1e-15);
    /* head has measured times on "fast": used as measured (scaled to 8 samples) */
    assert_float_equal(plan_cost_work(cost, fast, 3, 3), 0.0003 * 2, 1e-15);
    assert_float_equal(plan_cost_work(cost, slow, 3, 3), 0.005 * 2 / 0.5, 1e-15);
    assert_true(cost->act_bytes[0] == 8192);
    assert_true(plan_cost_params(cost, 0, 3) == 5500);
    assert_true(plan_cost_stash(cost, 0, 0) == 16384);
    /* weights, gradients, 2 moments + 3 stashed micro-batches */
    assert_float_equal(plan_cost_memory(cost, 0, 0, 3, 0), 4 * 1000 + 3 * 16384.0, 1e-9);
    assert_float_equal(plan_cost_cut_one_way(cost, 1, 0, 2), 8192 / 10e9, 1e-20);
    assert_true(plan_cost_cut_one_way(cost, 1, 2, 2) == 0);
    plan_cost_destroy(&cost);
    assert_null(cost);
    plan_cluster_destroy(&c);
    /* a block_times entry naming no block is refused */
    assert_int_equal(plan_cluster_load(&c, DATA "bad_cluster_block.json", &err), SC_OK);
    assert_int_equal(plan_cost_new(&cost, p, c, 4, 8, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "nosuch"));
    assert_non_null(strstr(err.msg, "block_times"));
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
}

static void test_links(void **state)
{
    (void)state;
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_load(&c, DATA "cluster_links.json", &err), SC_OK);
    assert_int_equal(c->n_links, 4);
    assert_int_equal(c->links[0].kind, PLAN_LINK_NVLINK);
    assert_int_equal(c->links[2].kind, PLAN_LINK_PCIE_UPLINK);
    /* an NVLink pair uses its NVLink; other pairs cross both PCIe uplinks (16e9 < intra) */
    assert_true(plan_cluster_bw(c, 0, 1) == 300e9);
    assert_true(plan_cluster_bw(c, 3, 2) == 300e9);
    assert_true(plan_cluster_bw(c, 1, 2) == 16e9);
    int route[8];
    assert_int_equal(plan_cluster_route(c, 0, 1, route, 8), 1);
    assert_int_equal(route[0], 0);
    assert_int_equal(plan_cluster_route(c, 0, 3, route, 8), 2);
    assert_int_equal(route[0], 2);
    assert_int_equal(route[1], 3);
    plan_cluster_destroy(&c);
    sc_err_clear(&err);
    assert_int_equal(plan_cluster_load(&c, DATA "bad_cluster_link.json", &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "$.links[0].devices[1]"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster_json),
        cmocka_unit_test(test_cluster_errors),
        cmocka_unit_test(test_cluster_unknown_keys),
        cmocka_unit_test(test_uniform),
        cmocka_unit_test(test_cost),
        cmocka_unit_test(test_links),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
