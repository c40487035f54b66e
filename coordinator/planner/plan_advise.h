/*
 * plan_advise: which of a catalogue's devices to plan a model on, for throughput or for cost.
 *
 * Every candidate set of devices is planned by plan_run on the cluster of exactly those devices
 * (plan_cluster_subset) with the caller's request, so a candidate's samples_per_s is what
 * `stagecraft plan` predicts for it with the same flags; its cost per hour is its devices'
 * prices plus the bytes its plan sends across zones at their price per GB. The search keeps
 * every candidate it planned and returns their Pareto front (throughput against cost per hour)
 * and the best one for the objective.
 *
 * Does not read files or print (cli/cmd_advise.c does). Invariant: devices of one type on one
 * server are interchangeable (plan_cluster_subset gives them one cluster), so a candidate is a
 * count per (server, type) class. When the classes' count vectors number at most exact_limit,
 * every one is planned: the answer is that of planning every subset. Above it the search is the
 * greedy ascent of docs/design/planner.md ("Choosing devices"), which is not exact.
 */
#ifndef PLAN_ADVISE_H
#define PLAN_ADVISE_H

#include "common/sc_status.h"
#include "coordinator/planner/plan.h"

typedef enum {
    PLAN_ADVISE_THROUGHPUT = 0,    /* most samples per second */
    PLAN_ADVISE_COST,              /* least cost per sample (per million tokens) */
    PLAN_ADVISE_MIN_COST_AT,       /* least cost per hour with samples_per_s >= samples_per_s */
    PLAN_ADVISE_MAX_THROUGHPUT_AT, /* most samples per second at cost_per_hour <= cost_per_hour */
    PLAN_ADVISE_DEADLINE /* least cost for `tokens` within `hours` (tokens_per_sample apart) */
} plan_advise_kind;

typedef struct plan_advise_objective {
    plan_advise_kind kind;
    double samples_per_s; /* MIN_COST_AT */
    double cost_per_hour; /* MAX_THROUGHPUT_AT */
    double tokens, hours; /* DEADLINE */
} plan_advise_objective;

/* "throughput", "cost", "min-cost-at=S", "max-throughput-at=C", "deadline=TOKENS@HOURS".
 * SC_ERR_INVALID naming what was wrong and the valid forms. */
sc_status plan_advise_objective_parse(const char *text, plan_advise_objective *out, sc_err *err);

/* 2^8: every catalogue of up to 8 devices is searched exactly, whatever its classes. */
#define PLAN_ADVISE_EXACT_LIMIT 256

typedef struct plan_advise_cfg {
    const plan_cluster *catalog; /* device types with prices (or not: cost is then 0) */
    plan_request request;        /* the plan request; its cluster is set per candidate */
    int strategy;                /* a plan_strategy, or -1: every strategy, the fastest kept */
    plan_advise_objective objective;
    double tokens_per_sample; /* for cost per million tokens and deadlines; 0 means 1 */
    long exact_limit;         /* count vectors planned exactly up to this; 0:
                                 PLAN_ADVISE_EXACT_LIMIT */
    long max_evaluations;     /* the greedy ascent's cap on plans; 0: 4000 */
} plan_advise_cfg;

typedef struct plan_advise_point {
    int n_devices;
    int *devices;         /* (n_devices) catalogue ids, in the planned cluster's order */
    double samples_per_s; /* 0: no strategy found a plan that fits memory */
    double cost_per_hour; /* devices_per_hour + traffic_per_hour */
    double devices_per_hour;
    double traffic_per_hour; /* bytes crossing zones each hour times their price */
    plan_strategy strategy;  /* the plan's */
} plan_advise_point;

typedef struct plan_advise_result {
    int have_best; /* 0: no candidate meets the objective (note says why) */
    plan_advise_point best;
    plan_result best_plan; /* the best's plan (device ids index best.devices) */
    plan_cluster *best_cluster;
    int n_pareto;
    plan_advise_point *pareto; /* cost per hour ascending, samples_per_s strictly ascending */
    long classes;              /* (server, type) classes in the catalogue */
    double candidates;         /* count vectors there are (excluding the empty one) */
    long evaluated;            /* plans made */
    int exact;                 /* 1: every count vector was planned */
    char note[SC_ERR_MSG_MAX];
} plan_advise_result;

/* Plans devs[0..n-1] of the catalogue: fills *pt (pt->devices is a heap array in the planned
 * order). With res and cl non-NULL, also hands over the plan and its cluster (the caller frees
 * them with plan_result_free and plan_cluster_destroy; *res is zeroed when there is no plan).
 * Errors only for a bad request (every candidate would fail alike) or memory; a set on which
 * no strategy finds a plan gets samples_per_s 0. */
sc_status plan_advise_eval(const plan_advise_cfg *cfg, const int *devs, int n,
                           plan_advise_point *pt, plan_result *res, plan_cluster **cl, sc_err *err);

/* Plans cluster cl as it is (no subset, devices in its order): *pt's figures as
 * plan_advise_eval's, pt->devices left as the caller set them; *res as there. */
sc_status plan_advise_eval_cluster(const plan_advise_cfg *cfg, const plan_cluster *cl,
                                   plan_advise_point *pt, plan_result *res, sc_err *err);

/* Whether a meets the objective, and whether a is better than b for it (both meeting it). */
int plan_advise_meets(const plan_advise_cfg *cfg, const plan_advise_point *a);
int plan_advise_better(const plan_advise_cfg *cfg, const plan_advise_point *a,
                       const plan_advise_point *b);

/* Runs the search. *out must be freed with plan_advise_result_free (also after an error). */
sc_status plan_advise_run(const plan_advise_cfg *cfg, plan_advise_result *out, sc_err *err);

/* The Pareto front of points (throughput up, cost per hour down): indices into pts, written to
 * idx in cost ascending order; returns their count. Points of samples_per_s 0 are left out. */
int plan_advise_front(const plan_advise_point *pts, int n, int *idx);

void plan_advise_point_free(plan_advise_point *p);
void plan_advise_result_free(plan_advise_result *r);

#endif /* PLAN_ADVISE_H */
