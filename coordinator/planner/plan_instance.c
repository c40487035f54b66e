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

sc_status plan_instance_uneven(uint64_t seed, plan_profile **prof, plan_cluster **cl, sc_err *err)
{
    *prof = NULL;
    *cl = NULL;
    uint64_t s = 0xD1B54A32D192ED03ull * seed + 777;
    for (int i = 0; i < 4; i++)
        next(&s);
    int L = 4 + (int)(next(&s) * 7);
    SC_CHECK(plan_profile_new(prof, L, err));
    double state = 0;
    for (int l = 0; l < L; l++) {
        plan_block *b = &(*prof)->blocks[l];
        b->forward_s = 1e-3 + 9e-3 * next(&s);
        b->backward_s = b->forward_s * (1 + 2 * next(&s));
        b->activation_bytes = 1e5 * pow(100, next(&s));
        b->parameter_bytes = 1e6 * pow(100, next(&s));
        b->stash_bytes = b->activation_bytes;
        state += 4 * b->parameter_bytes + 2 * b->stash_bytes;
    }
    static const double speed_lo[3] = {1.0, 0.4, 0.15}, speed_span[3] = {0, 0.3, 0.15};
    static const char *names[3] = {"fast", "mid", "slow"};
    static const double intra[3] = {1e10, 5e10, 2e11}, nic[3] = {1.25e8, 1.25e9, 3e9};
    int t[3];
    sc_status rc = plan_cluster_new_empty(cl, err);
    for (int k = 0; k < 3 && rc == SC_OK; k++) {
        double mem = next(&s) < 0.6 ? state * (0.1 + 0.7 * next(&s)) : 0;
        rc = plan_cluster_add_type(*cl, names[k], speed_lo[k] + speed_span[k] * next(&s), mem,
                                   &t[k], err);
    }
    int n_srv = 2 + (next(&s) < 0.5), D = 2 + (int)(next(&s) * 7), per[3] = {1, 1, 1};
    if (D < n_srv)
        D = n_srv;
    for (int i = n_srv; i < D; i++)
        per[(int)(next(&s) * n_srv)]++;
    for (int k = 0; k < n_srv && rc == SC_OK; k++) {
        int types[8], main_type = t[(int)(next(&s) * 3)];
        for (int i = 0; i < per[k]; i++)
            types[i] = next(&s) < 0.7 ? main_type : t[(int)(next(&s) * 3)];
        char name[8] = {'s', (char)('0' + k), '\0'};
        rc = plan_cluster_add_server(*cl, name, intra[(int)(next(&s) * 3)],
                                     nic[(int)(next(&s) * 3)], types, per[k], err);
    }
    if (rc != SC_OK) {
        plan_cluster_destroy(cl);
        plan_profile_destroy(prof);
    }
    return rc;
}
