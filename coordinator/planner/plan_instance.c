/* Random small planning instances (see plan_instance.h). */
#include "coordinator/planner/plan_instance.h"

#include <math.h>

/* xorshift64: the instance of a seed does not depend on the C library */
static double next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (double)(*s >> 11) / 9007199254740992.0;
}

sc_status plan_instance_two_server(uint64_t seed, plan_profile **prof, plan_cluster **cl,
                                   sc_err *err)
{
    *prof = NULL;
    *cl = NULL;
    uint64_t s = 0x9E3779B97F4A7C15ull * seed + 12345;
    for (int i = 0; i < 4; i++)
        next(&s);
    int L = 5 + (int)(next(&s) * 5);
    SC_CHECK(plan_profile_new(prof, L, err));
    for (int l = 0; l < L; l++) {
        plan_block *b = &(*prof)->blocks[l];
        b->forward_s = 1e-3 + 9e-3 * next(&s);
        b->backward_s = b->forward_s * (1 + 2 * next(&s));
        b->activation_bytes = 1e5 * pow(100, next(&s));
        b->parameter_bytes = 1e6 * pow(100, next(&s));
        b->stash_bytes = b->activation_bytes;
    }
    int t[3];
    sc_status rc = plan_cluster_new_empty(cl, err);
    if (rc == SC_OK)
        rc = plan_cluster_add_type(*cl, "fast", 1.0, 0, &t[0], err);
    if (rc == SC_OK)
        rc = plan_cluster_add_type(*cl, "mid", 0.5 + 0.2 * next(&s), 0, &t[1], err);
    if (rc == SC_OK)
        rc = plan_cluster_add_type(*cl, "slow", 0.2 + 0.1 * next(&s), 0, &t[2], err);
    for (int k = 0; k < 2 && rc == SC_OK; k++) {
        int nd = 1 + (next(&s) < 0.5), types[2];
        for (int i = 0; i < nd; i++)
            types[i] = t[(int)(next(&s) * 3)];
        double intra = next(&s) < 0.5 ? 1e10 : 5e10, nic = next(&s) < 0.5 ? 1e9 : 3e9;
        rc = plan_cluster_add_server(*cl, k ? "s1" : "s0", intra, nic, types, nd, err);
    }
    if (rc != SC_OK) {
        plan_cluster_destroy(cl);
        plan_profile_destroy(prof);
    }
    return rc;
}
