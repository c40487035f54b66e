/*
 * Fuzz target: a cluster file ("format": "stagecraft-cluster", plan_cluster_parse), planned once
 * with a fixed four-block profile (the cheap "uniform" strategy) when accepted.
 * Demands: no crash or undefined behaviour; a refusal has a message; a plan on an accepted
 * cluster has finite figures.
 */
#include <math.h>

#include "tests/fuzz/fuzz_common.h"

#include "coordinator/planner/plan.h"

static const char profile_json[] =
    "{\"format\": \"stagecraft-profile\", \"version\": 1, \"model\": \"m\", "
    "\"reference_device\": \"ref\", \"microbatch_size\": 4, \"blocks\": ["
    "{\"name\": \"embed\", \"forward_s\": 0.001, \"backward_s\": 0.002, "
    "\"activation_bytes\": 4096, \"parameter_bytes\": 1000},"
    "{\"name\": \"h0\", \"forward_s\": 0.003, \"backward_s\": 0.006, \"activation_bytes\": 4096, "
    "\"parameter_bytes\": 2000},"
    "{\"name\": \"h1\", \"forward_s\": 0.003, \"backward_s\": 0.006, \"activation_bytes\": 2048, "
    "\"parameter_bytes\": 2000},"
    "{\"name\": \"head\", \"forward_s\": 0.002, \"backward_s\": 0.003, \"activation_bytes\": 16, "
    "\"parameter_bytes\": 500}]}";

static plan_profile *g_profile;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    sc_err err;
    sc_err_clear(&err);
    FUZZ_REQUIRE(plan_profile_parse_json(&g_profile, "profile.json", profile_json,
                                         strlen(profile_json), &err) == SC_OK,
                 "the fixed profile: %s", err.msg);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = plan_cluster_parse(&c, "cluster.json", text, size, &err);
    fuzz_refusal(rc, &err, "the cluster");
    if (rc == SC_OK) {
        plan_request req = {.profile = g_profile, .cluster = c, .schedule = PLAN_SCHED_1F1B};
        plan_result res;
        sc_err_clear(&err);
        rc = plan_run(&req, PLAN_STRAT_UNIFORM, &res, &err);
        fuzz_refusal(rc, &err, "planning on the cluster");
        if (rc == SC_OK && res.ok)
            FUZZ_REQUIRE(isfinite(res.iteration_time_s) && res.iteration_time_s >= 0 &&
                             res.part != NULL && res.part->n_stages >= 1,
                         "a plan with iteration time %g", res.iteration_time_s);
        plan_result_free(&res);
    }
    plan_cluster_destroy(&c);
    free(text);
    return 0;
}
