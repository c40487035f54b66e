/*
 * plan_antichain: the states of PipeDream's partitioning DP on a branching profile.
 *
 * A state is a downward-closed set of blocks (the closure of an antichain). States are found
 * the way PipeDream's released optimizer finds them: start from the first source's antichain
 * and repeatedly step to the antichains reached by moving one node of the augmented antichain
 * to one of its successors. Does not run the DP (plan_partition does) and knows nothing about
 * devices: per-block weights are given by the caller.
 *
 * Invariant: states are numbered in a topological order of the antichain DAG (by closure
 * size), so every predecessor of state j has an index < j; the last state holds every
 * non-Input block.
 */
#ifndef PLAN_ANTICHAIN_H
#define PLAN_ANTICHAIN_H

#include <stdint.h>

#include "common/sc_status.h"
#include "coordinator/planner/plan_profile.h"

/* States enumerated before giving up (SC_ERR_TOO_LARGE). */
#define PLAN_ANTICHAIN_MAX_STATES 20000

typedef struct plan_antichain {
    int n_states;
    int n_blocks;      /* of the profile */
    int node_words;    /* 64-bit words per block set */
    int state_words;   /* 64-bit words per state set */
    uint64_t *closure; /* (n_states, node_words): blocks in the state */
    uint64_t *pred;    /* (n_states, state_words): k is set in row j when state k strictly
                          precedes state j in the antichain DAG */
    int *size;         /* (n_states) blocks in the closure */
    double *work_s;    /* (n_states) sum of the closure's per-block work */
    double *params;    /* (n_states) sum of the closure's parameter bytes */
    double *out_bytes; /* (n_states) PipeDream's output activation size: the outputs of the
                          augmented antichain */
} plan_antichain;

/* Enumerates the states of profile p (which must have a DAG: pred_start != NULL). work_s,
 * params and act_bytes are per-block weights (act_bytes: the block's own output). Stops with
 * SC_ERR_TOO_LARGE naming the profile past max_states, SC_ERR_INVALID when part of the graph
 * cannot be reached from its first source. */
sc_status plan_antichain_new(plan_antichain **out, const plan_profile *p, const double *work_s,
                             const double *params, const double *act_bytes, int max_states,
                             sc_err *err);
void plan_antichain_destroy(plan_antichain **a);

static inline int plan_antichain_precedes(const plan_antichain *a, int k, int j)
{
    return (int)((a->pred[(size_t)j * (size_t)a->state_words + (size_t)(k >> 6)] >> (k & 63)) & 1u);
}

static inline int plan_antichain_has(const plan_antichain *a, int s, int block)
{
    return (int)((a->closure[(size_t)s * (size_t)a->node_words + (size_t)(block >> 6)] >>
                  (block & 63)) &
                 1u);
}

#endif /* PLAN_ANTICHAIN_H */
