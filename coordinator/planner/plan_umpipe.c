/*
 * plan_umpipe: the umpipe strategy after its partition: the genetic search (plan_ga) for
 * unequal forward and backward micro-batch sizes per stage on that partition, each entry capped
 * by the memory its stage has left, then the event simulator's figures for the sizes found.
 *
 * Does not partition (plan_run runs minmax first, under fill-drain memory) and does not compute
 * the common objective (plan_run does, at the plan's mean entry size). Invariant: a result with
 * fits_memory has room on every stage for its largest entry and its gather slot.
 */
#include "coordinator/planner/plan_umpipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_ga.h"

/* The largest entry (samples) whose per-sample bytes fit in `room`, at most B. */
static int entry_cap(double room, double per_sample, int B)
{
    if (room < 0)
        return 0;
    if (per_sample <= 0 || room / per_sample >= B)
        return B;
    return (int)(room / per_sample);
}

/* Whether every stage of sizes (x, y) fits: its largest entry's activations (2 x samples) and,
 * with `gather`, its gather slot's stash (plan_ga_gather_size) within the memory left (rem).
 * *bad (when not NULL): the first stage that does not, -1 when all do. */
static int umpipe_fits(const plan_ga_problem *prob, const int *x, const int *y, const double *rem,
                       const double *act_ps, const double *stash_ps, int gather_slot, int *bad)
{
    int K = prob->max_entries;
    for (int i = 0; i < prob->n_stages; i++) {
        int big = 0;
        for (int j = 0; j < K; j++) {
            big = x[i * K + j] > big ? x[i * K + j] : big;
            big = y[i * K + j] > big ? y[i * K + j] : big;
        }
        int gather = gather_slot ? plan_ga_gather_size(x + i * K, y + i * K, K) : 0;
        if (2 * act_ps[i] * big + stash_ps[i] * gather > rem[i]) {
            if (bad != NULL)
                *bad = i;
            return 0;
        }
    }
    if (bad != NULL)
        *bad = -1;
    return 1;
}

sc_status plan_umpipe_run(const plan_request *req, const plan_cost *c, plan_result *r, sc_err *err)
{
    const plan_partition *p = r->part;
    const plan_profile *prof = req->profile;
    const plan_cluster *cl = req->cluster;
    int S = p->n_stages, B = r->batch, W = B + 1;
    /* up to 64 entries a stage, and as many as the batch has samples below that: every equal
     * split GPipe could use is then among the search's starting points */
    int K = B < 64 ? B : 64;
    if (B > 16384)
        return SC_ERRF(err, SC_ERR_TOO_LARGE,
                       "umpipe: a batch of %d samples is too large for per-sample sizes (at most "
                       "16384)",
                       B);
    sc_status rc = SC_OK;
    double *fw = calloc((size_t)S * W, sizeof(double)), *bw = calloc((size_t)S * W, sizeof(double));
    double *cm = calloc((size_t)S * W, sizeof(double));
    int *cap = calloc((size_t)S, sizeof(int)), *capg = calloc((size_t)S, sizeof(int));
    double *rem = calloc((size_t)S, sizeof(double)), *act_ps = calloc((size_t)S, sizeof(double));
    double *stash_ps = calloc((size_t)S, sizeof(double));
    plan_ga_result g = {0}, g2 = {0};
    if (!fw || !bw || !cm || !cap || !capg || !rem || !act_ps || !stash_ps) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "umpipe: out of memory");
        goto done;
    }
    double M = c->samples;
    size_t L = (size_t)c->n_blocks;
    for (int i = 0; i < S; i++) {
        int d = p->devs[p->dev_start[i]], t = cl->devices[d].type, r_ = p->n_dev[i];
        for (int x = 1; x <= B; x++) {
            double f = 0, b = 0;
            for (int l = p->first[i]; l <= p->last[i]; l++) {
                double f0, b0, fx, bx;
                plan_profile_block_time(prof, l, M, B, &f0, &b0);
                plan_profile_block_time(prof, l, x, B, &fx, &bx);
                /* scale the stage's own (possibly measured) time by the profile's size curve */
                if (f0 > 0)
                    f += c->fwd_s[(size_t)t * L + (size_t)l] * fx / f0;
                if (b0 > 0)
                    b += c->bwd_s[(size_t)t * L + (size_t)l] * bx / b0;
            }
            fw[(size_t)i * W + x] = f / r_;
            bw[(size_t)i * W + x] = b / r_;
            if (i + 1 < S) {
                int d2 = p->devs[p->dev_start[i + 1]];
                cm[(size_t)i * W + x] =
                    c->act_bytes[p->last[i]] * x / M / plan_cluster_bw(cl, d, d2);
            }
        }
        /* memory left once the parameters and the whole batch's stash (fill-drain) are in */
        stash_ps[i] = plan_cost_stash(c, p->first[i], p->last[i]) / M;
        act_ps[i] = c->act_bytes[p->last[i]] / M;
        rem[i] = cl->types[t].memory_bytes -
                 PLAN_PARAM_COPIES * plan_cost_params(c, p->first[i], p->last[i]) - stash_ps[i] * B;
        /* an entry of x samples holds 2 x activations; capg also leaves room for a gather
         * slot of as many samples (a gather slot is never larger than the largest entry) */
        cap[i] = entry_cap(rem[i], 2 * act_ps[i], B);
        capg[i] = entry_cap(rem[i], 2 * act_ps[i] + stash_ps[i], B);
    }
    plan_ga_problem prob = {.n_stages = S,
                            .batch = B,
                            .max_entries = K,
                            .fwd_s = fw,
                            .bwd_s = bw,
                            .comm_s = cm,
                            .max_size = cap,
                            .opt_s = 0};
    plan_ga_cfg gcfg = {.population = 64, .generations = 120, .seed = 1};
    SC_CHECK_GOTO(plan_ga_run(&prob, &gcfg, &g, err), done);
    int bad;
    if (umpipe_fits(&prob, g.x, g.y, rem, act_ps, stash_ps, 0, NULL) &&
        !umpipe_fits(&prob, g.x, g.y, rem, act_ps, stash_ps, 1, &bad)) {
        /* The search's caps bound each entry, not the gather slot that a backward entry
         * unlike every forward one runs on. Search again with room for a slot as large as the
         * largest entry, and keep the faster of that result and the best equal split (whose
         * entries coincide: no slot), whichever fit. */
        prob.max_size = capg;
        SC_CHECK_GOTO(plan_ga_run(&prob, &gcfg, &g2, err), done);
        prob.max_size = cap;
        int eq_fits = g.best_equal_m > 0;
        for (int i = 0; i < S && eq_fits; i++)
            eq_fits = (B + g.best_equal_m - 1) / g.best_equal_m <= cap[i];
        int g2_fits = umpipe_fits(&prob, g2.x, g2.y, rem, act_ps, stash_ps, 1, NULL);
        if (eq_fits && (!g2_fits || g.best_equal_s <= g2.time_s)) {
            for (int i = 0; i < S; i++)
                plan_ga_equal_split(&prob, g.best_equal_m, g.x + (size_t)i * K);
            memcpy(g.y, g.x, (size_t)S * K * sizeof(int));
            g.time_s = g.best_equal_s;
        } else {
            int *tx = g.x, *ty = g.y;
            g.x = g2.x, g.y = g2.y, g.time_s = g2.time_s;
            g2.x = tx, g2.y = ty;
        }
        size_t used = strlen(r->note);
        snprintf(r->note + used, sizeof r->note - used,
                 "%ssearched again: the first result's gather slot on stage %d did not fit "
                 "memory",
                 used ? "; " : "", bad);
    }
    r->ga_k = K;
    r->fwd_sizes = g.x;
    r->bwd_sizes = g.y;
    g.x = g.y = NULL;
    r->objective_s = g.time_s;
    r->iteration_time_s = g.time_s;
    r->ga_best_equal_s = g.best_equal_s;
    r->ga_greedy_s = g.greedy_s;
    r->ga_uniform_s = g.uniform_s;
    int most = 0;
    r->fits_memory = 1;
    for (int i = 0; i < S; i++) {
        int n = 0, big = 0;
        for (int j = 0; j < K; j++) {
            int x = r->fwd_sizes[i * K + j], y = r->bwd_sizes[i * K + j];
            n += x > 0;
            big = x > big ? x : big;
            big = y > big ? y : big;
        }
        most = n > most ? n : most;
        /* a backward entry that is not exactly one forward entry runs on a gather slot holding
         * its samples' stash (the runtime's kn_stage_gather): room for the largest such entry */
        int gather = plan_ga_gather_size(r->fwd_sizes + i * K, r->bwd_sizes + i * K, K);
        r->peak_memory_bytes[i] = PLAN_PARAM_COPIES * plan_cost_params(c, p->first[i], p->last[i]) +
                                  plan_cost_stash(c, p->first[i], p->last[i]) / M * (B + gather) +
                                  2 * c->act_bytes[p->last[i]] / M * big;
    }
    r->n_micro = most;
    r->fits_memory = umpipe_fits(&prob, r->fwd_sizes, r->bwd_sizes, rem, act_ps, stash_ps, 1, NULL);
    /* The search's objective leaves the optimizer out; the plan's figures (and its trace) come
     * from the event simulator playing the chosen sizes with each stage's optimizer step, as
     * every other strategy's do. Without steps the two times are equal (the simulator plays
     * the same recurrence). */
    plan_sim_stage *st = calloc((size_t)S, sizeof *st);
    double *opt = calloc((size_t)S, sizeof(double));
    if (st == NULL || opt == NULL) {
        free(st), free(opt);
        rc = SC_ERRF(err, SC_ERR_NOMEM, "umpipe: out of memory");
        goto done;
    }
    plan_partition_sim_stages(c, p, st);
    for (int i = 0; i < S; i++)
        opt[i] = st[i].opt_s;
    plan_sim_sized in = {.n_stages = S,
                         .batch = B,
                         .max_entries = K,
                         .fwd_sizes = r->fwd_sizes,
                         .bwd_sizes = r->bwd_sizes,
                         .fwd_s = fw,
                         .bwd_s = bw,
                         .comm_s = cm,
                         .opt_s = opt};
    rc = plan_partition_simulate_sized(c, p, &in, req->record_trace, &r->sim, err);
    free(st), free(opt);
    if (rc != SC_OK)
        goto done;
    r->iteration_time_s = r->sim.iteration_s;
    r->bubble_fraction = r->sim.bubble_fraction;
done:
    plan_ga_result_free(&g);
    plan_ga_result_free(&g2);
    free(fw), free(bw), free(cm), free(cap), free(capg), free(rem), free(act_ps), free(stash_ps);
    return rc;
}
