/*
 * Fuzz target: a block profile in either format the planner reads: the first input byte picks
 * the stagecraft-profile JSON (even) or PipeDream's graph text (odd), the rest is the document.
 * An accepted profile is planned once (the cheap "uniform" strategy) on a fixed 3-device cluster,
 * since the planner is where a profile's figures are used.
 * Demands: no crash or undefined behaviour; a refusal has a message; an accepted profile has
 * blocks with finite, non-negative times, and a plan from it has finite figures.
 */
#include <math.h>

#include "tests/fuzz/fuzz_common.h"

#include "coordinator/planner/plan.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

static void plan_once(const plan_profile *p)
{
    plan_cluster *c = NULL;
    sc_err err;
    sc_err_clear(&err);
    FUZZ_REQUIRE(plan_cluster_new_uniform(&c, 3, 1e9, 16e9, &err) == SC_OK, "%s", err.msg);
    plan_request req = {.profile = p, .cluster = c, .schedule = PLAN_SCHED_1F1B};
    plan_result res;
    sc_status rc = plan_run(&req, PLAN_STRAT_UNIFORM, &res, &err);
    fuzz_refusal(rc, &err, "planning the profile");
    if (rc == SC_OK && res.ok)
        FUZZ_REQUIRE(isfinite(res.iteration_time_s) && res.iteration_time_s >= 0 &&
                         isfinite(res.bottleneck_s) && res.part != NULL && res.part->n_stages >= 1,
                     "a plan with iteration time %g, bottleneck %g", res.iteration_time_s,
                     res.bottleneck_s);
    plan_result_free(&res);
    plan_cluster_destroy(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool graph = data[0] & 1;
    char *text = fuzz_text(data + 1, size - 1);
    plan_profile *p = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = graph ? plan_profile_parse_graph(&p, "graph.txt", text, &err)
                         : plan_profile_parse_json(&p, "profile.json", text, size - 1, &err);
    fuzz_refusal(rc, &err, "the profile");
    if (rc == SC_OK) {
        FUZZ_REQUIRE(p->n_blocks >= 1, "a profile of %d blocks", p->n_blocks);
        plan_once(p);
    }
    plan_profile_destroy(&p);
    free(text);
    return 0;
}
