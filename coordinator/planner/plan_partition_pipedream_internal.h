/*
 * plan_partition_pipedream_internal: what the pipedream strategy's files share: one level of
 * PipeDream's hierarchical DP (its table A[i][j][m]), the rule for the replica counts the
 * runtime runs, the first level as the second sees it (plan_partition_pipedream_levels.c), and
 * the stage time and split choice of both recurrences, the chain's (plan_partition_pipedream.c)
 * and the antichain states' (plan_partition_pipedream_dag.c).
 *
 * Private to those files. The small functions are inline: the DPs call them for every cell.
 */
#ifndef PLAN_PARTITION_PIPEDREAM_INTERNAL_H
#define PLAN_PARTITION_PIPEDREAM_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "coordinator/planner/plan_partition.h"

/* One cell of PipeDream's table A[i][j][m]: best time for states i..j on m+1 machines, the
 * split (k: last state of the previous part, -1 for none), the machines of the previous part
 * (index) and the replicas of the last stage. */
typedef struct pd_cell {
    double t;
    int32_t k;
    int16_t mprev;
    int16_t mp;
} pd_cell;

typedef struct pd_level {
    int n, M, rows;
    pd_cell *A; /* (rows, n, M) */
} pd_level;

static inline pd_cell *pd_at(const pd_level *lv, int i, int j, int m)
{
    return &lv->A[((size_t)i * (size_t)lv->n + (size_t)j) * (size_t)lv->M + (size_t)m];
}

/* The replica counts one level of the DP may use: a stage on r of the level's machines runs as
 * r * mult copies (mult: the servers a second-level stage spans), and the runtime must run that
 * many for the plan's micro-batch count (plan_replicas_runnable). */
typedef struct pd_rule {
    plan_sched_kind sched;
    int n_micro;
    int mult;
} pd_rule;

static inline int pd_allowed(const pd_rule *u, int r)
{
    return plan_replicas_runnable(u->sched, u->n_micro, r * u->mult);
}

/* Whether the rule forbids some replica count up to M. */
int plan_pd_restricts(const pd_rule *u, int M);

/* The machines (minus one) that the answer for states i..j of row i takes from a solved level:
 * all of them, PipeDream's answer, unless the runtime's rule forbids some replica count up to
 * the cluster's devices (`restricted`); then the count with the lowest time, the most on ties
 * (as PipeDream, which uses every machine), so that devices stay idle only where the copies
 * the runtime runs cannot use them well (or at all: more machines than stages and copies). */
int plan_pd_machines(const pd_level *lv, int restricted, int i, int j);

/* The first level as the second sees it: one server's best time on the states of row i up to j
 * (plan_pd_machines of the first level's table), for a second-level stage spread over mp servers,
 * whose copies multiply the first level's. Multipliers under which the first level may use the
 * same replica counts share a class and one solve of it; cls[mp] = -1: the runtime would run
 * no stage spread over mp servers. */
typedef struct pd_servers {
    int rows, n, n_classes;
    int *cls;     /* (M2 + 1) class of each multiplier mp = 1..M2 */
    int *rep;     /* (n_classes) a multiplier of each class */
    double *t;    /* (n_classes, rows, n) */
    int16_t *m;   /* (n_classes, rows, n) the first level's machines, minus one */
    int fallback; /* some range leaves machines of a server idle (times not monotone) */
} pd_servers;

void plan_pd_servers_free(pd_servers *sv);

/* Classes of the multipliers 1..M2 for servers of n1 machines. -1 out of memory. */
int plan_pd_servers_init(pd_servers *sv, const pd_rule *rule, int n1, int M2, int rows, int n);

/* Keeps class c's view of the solved first level lv (plan_pd_machines's choice with
 * `restricted`). */
void plan_pd_servers_take(pd_servers *sv, int c, const pd_level *lv, int restricted);

static inline double pd_servers_t(const pd_servers *sv, int mp, int i, int j)
{
    int c = sv->cls[mp];
    if (c < 0)
        return HUGE_VAL;
    return sv->t[((size_t)c * (size_t)sv->rows + (size_t)i) * (size_t)sv->n + (size_t)j];
}

int plan_pd_servers_m(const pd_servers *sv, int mp, int i, int j);

/* PipeDream's time of a stage run by r replicas: (compute + the all-reduce of its weights over r
 * replicas) / r; `within` scales the all-reduce of a whole lower level seen as one machine. */
static inline double pd_stage_time(double compute_s, double params, int r, double bw, int within)
{
    return (compute_s + 4.0 * (r - 1) * params / (bw * r) / within) / r;
}

/* The best split found so far for one DP cell. */
typedef struct {
    double t;
    int k, mprev, mp;
} pd_best;

/* Takes the split after state k (`prev` before it, stage time `last` after it on mp replicas,
 * activation transfers in_t and out_t) when its bottleneck beats the best so far. */
static inline void pd_take(pd_best *b, double prev, double last, double in_t, double out_t, int k,
                           int mprev, int mp)
{
    double v = prev > last ? prev : last;
    v = in_t > v ? in_t : v;
    v = out_t > v ? out_t : v;
    if (v < b->t) {
        b->t = v;
        b->k = k;
        b->mprev = mprev;
        b->mp = mp;
    }
}

#define PLAN_PD_HIER_MAX_CELLS 3000000L

/* PipeDream over the antichain states of a branching profile (cfg->ref_cost's): fills out's
 * stages, objective and, when a chosen state is not a prefix of the profile's order, its block
 * order. No notes on device types or idle devices (plan_partition_pipedream adds them). */
sc_status plan_pd_dag(const plan_search_cfg *cfg, plan_partition *out, sc_err *err);

#endif /* PLAN_PARTITION_PIPEDREAM_INTERNAL_H */
