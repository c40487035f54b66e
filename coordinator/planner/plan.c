/*
 * plan: the table of strategies and the driver that runs one of them on a profile and a
 * cluster: strategy names, the request's checks, the micro-batch sweep and the final
 * simulation. Results are written by plan_write.c; umpipe's per-stage sizes come from
 * plan_umpipe.c.
 *
 * Order of work for one strategy: pick a first micro-batch count (given, or the closed form
 * for the whole model), build the cost tables at that size, run the strategy (timed), then,
 * for --microbatches auto, re-fit the closed form on the bottleneck stage and simulate the
 * candidate counts on the partition found, keeping the fastest that fits memory. The final
 * numbers come from one more simulation at the chosen count. A request for PLAN_SCHED_AUTO
 * does all that once per schedule the runtime runs (zb1 only when the request says it does)
 * and keeps the fastest plan.
 *
 * Does not search partitions itself (run_strategy hands that to plan_partition_<strategy>)
 * and does not write results. Invariant: every plan's figures come from simulating its own
 * partition at the count chosen (umpipe's, with its unequal sizes, from plan_umpipe).
 */
#include "coordinator/planner/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "coordinator/planner/plan_microbatch.h"
#include "coordinator/planner/plan_schedule.h"
#include "coordinator/planner/plan_umpipe.h"

static const char *const strat_names[PLAN_STRAT_COUNT] = {"uniform",   "blockpartition", "minmax",
                                                          "pipedream", "autopipe",       "hetero",
                                                          "umpipe",    "exhaustive"};

const char *plan_strategy_name(plan_strategy s)
{
    return (unsigned)s < PLAN_STRAT_COUNT ? strat_names[s] : "unknown";
}

int plan_strategy_parse(const char *name)
{
    for (int i = 0; i < PLAN_STRAT_COUNT; i++)
        if (strcmp(name, strat_names[i]) == 0)
            return i;
    return -1;
}

int64_t plan_request_default_batch(const plan_request *req)
{
    int64_t D = req->cluster->n_devices;
    if (req->profile->microbatch_size > 0)
        return 2 * D * (int64_t)req->profile->microbatch_size;
    return 8 * D;
}

void plan_result_free(plan_result *r)
{
    if (r == NULL)
        return;
    plan_partition_destroy(&r->part);
    free(r->compute_s);
    free(r->peak_memory_bytes);
    free(r->allreduce_s);
    free(r->w_defer);
    free(r->fwd_sizes);
    free(r->bwd_sizes);
    plan_sim_result_free(&r->sim);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------- simulation helpers */

/* plan_cost_new with the request's zb1 memory rule. */
static sc_status cost_new(const plan_request *req, plan_cost **out, const plan_profile *p,
                          const plan_cluster *c, double samples, int batch, sc_err *err)
{
    SC_CHECK(plan_cost_new(out, p, c, samples, batch, err));
    (*out)->zb1_peak_cap = req->zb1_peak_cap != 0;
    return SC_OK;
}

static int sched_units(plan_sched_kind k, int devices, int m)
{
    /* PipeDream has no flush: play enough minibatches to reach the steady state (its warm-up
     * grows with the copies) */
    if (k == PLAN_SCHED_PIPEDREAM)
        return m > 4 * devices + 4 ? m : 4 * devices + 4;
    return m;
}

static sc_status simulate(const plan_request *req, const plan_cost *c, const plan_partition *p,
                          int m, int sliced, int record, plan_sim_result *out, sc_err *err)
{
    plan_schedule *s = NULL;
    int S = p->n_stages;
    sc_status rc;
    plan_sim_stage *st = calloc((size_t)S, sizeof *st);
    SC_ALLOC_CHECK(st, err);
    /* zb1: with its deferred W capped by memory (plan_partition_zb1_defer), as the runtime runs it
     */
    SC_CHECK_GOTO(plan_partition_schedule(c, p, req->schedule,
                                          sched_units(req->schedule, p->n_devs, m), sliced, &s,
                                          err),
                  done);
    SC_CHECK_GOTO(plan_schedule_validate(s, err), done);
    plan_partition_sim_stages(c, p, st);
    double eff = req->slice_efficiency > 0 ? req->slice_efficiency : 0.9;
    rc = plan_partition_simulate(c, p, s, st, m, eff, record, out, err);
done:
    plan_schedule_destroy(&s);
    free(st);
    return rc;
}

/* Peak memory per stage from the simulated stash counts; returns 1 when all fit. */
static int memory_of(const plan_request *req, const plan_cost *c, const plan_partition *p,
                     const plan_sim_result *sim, double *peak)
{
    const plan_cluster *cl = req->cluster;
    int fits = 1;
    for (int s = 0; s < p->n_stages; s++) {
        int after = 0;
        for (int i = s; i < p->n_stages; i++)
            after += p->n_dev[i];
        int wv = plan_weight_versions(req->schedule, after, p->n_dev[s]);
        peak[s] = plan_cost_memory(c, p->first[s], p->last[s], sim->peak_inflight[s], wv);
        /* what the searches leave out (a range maximum): the stage's scratch, its blocks'
         * largest, and zb1's W stashes in every slot */
        double most = 0;
        for (int l = p->first[s]; l <= p->last[s]; l++)
            most = c->scratch[l] > most ? c->scratch[l] : most;
        peak[s] += most;
        if (req->schedule == PLAN_SCHED_ZB1)
            peak[s] += (c->wstash_prefix[p->last[s] + 1] - c->wstash_prefix[p->first[s]]) *
                       sim->peak_inflight[s];
        for (int i = 0; i < p->n_dev[s]; i++) {
            int d = p->devs[p->dev_start[s] + i];
            if (peak[s] > cl->types[cl->devices[d].type].memory_bytes)
                fits = 0;
        }
    }
    return fits;
}

/* The sliced schedule's count of warm-up micro-batches run as halves, k in [0, min(S-1, m)],
 * that fits memory and simulates fastest (the fastest of all when none fits): slicing changes
 * each stage's stash, lowering the last stages' and possibly raising the first's, so whether
 * a plan fits depends on k. Halving needs 2 samples a micro-batch (the runtime refuses to halve
 * one of 1). Other schedules: k = 0. *iter_s and *fits are that k's, peak its memory per
 * stage. */
static sc_status pick_sliced(const plan_request *req, const plan_cost *c, const plan_partition *p,
                             int batch, int m, double *peak, int *k_out, double *iter_s,
                             int *fits_out, sc_err *err)
{
    int most = req->schedule == PLAN_SCHED_SLICED && batch / m >= 2 ? p->n_stages - 1 : 0;
    most = most < m ? most : m;
    double *pk = calloc((size_t)p->n_stages, sizeof(double));
    SC_ALLOC_CHECK(pk, err);
    *k_out = 0;
    *iter_s = HUGE_VAL;
    *fits_out = 0;
    for (int k = 0; k <= most; k++) {
        plan_sim_result sr;
        sc_status rc = simulate(req, c, p, m, k, 0, &sr, err);
        if (rc != SC_OK) {
            free(pk);
            return rc;
        }
        int fits = memory_of(req, c, p, &sr, pk);
        if (k == 0 || fits > *fits_out || (fits == *fits_out && sr.iteration_s < *iter_s - 1e-12)) {
            *iter_s = sr.iteration_s;
            *fits_out = fits;
            *k_out = k;
            memcpy(peak, pk, (size_t)p->n_stages * sizeof(double));
        }
        plan_sim_result_free(&sr);
    }
    free(pk);
    return SC_OK;
}

static int min_count(const plan_request *req, int S)
{
    return req->schedule == PLAN_SCHED_1F1B || req->schedule == PLAN_SCHED_SLICED ||
                   req->schedule == PLAN_SCHED_ZB1
               ? S
               : 1;
}

/* ---------------------------------------------------------------- driver */

static sc_status check_request(const plan_request *req, int batch, sc_err *err)
{
    int D = req->cluster->n_devices;
    if (batch < 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "--batch: expected a positive number of samples, got %d", batch);
    if (req->microbatches < 0 || req->microbatches > batch)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "--microbatches %d: expected 1 to the batch size (%d), or auto",
                       req->microbatches, batch);
    if (req->microbatches > 0 && batch % req->microbatches != 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "--microbatches %d: must divide the batch of %d samples (try one of its "
                       "divisors)",
                       req->microbatches, batch);
    if (req->max_stages > D)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "--stages %d: more stages than the %d devices of %s; expected 1 to %d",
                       req->max_stages, D, req->cluster->source, D);
    if (req->max_stages < 0)
        return SC_ERRF(err, SC_ERR_INVALID, "--stages: expected 1 to %d", D);
    /* a block that fits no device at all can never be placed */
    plan_cost *c = NULL;
    SC_CHECK(cost_new(req, &c, req->profile, req->cluster, 1, batch, err));
    double most = 0;
    for (int t = 0; t < req->cluster->n_types; t++)
        most =
            req->cluster->types[t].memory_bytes > most ? req->cluster->types[t].memory_bytes : most;
    sc_status rc = SC_OK;
    for (int l = 0; l < c->n_blocks; l++) {
        double need = PLAN_PARAM_COPIES * plan_cost_params(c, l, l);
        if (need > most) {
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "block %d \"%s\" of %s needs %.3g bytes for its parameters, "
                         "gradients and optimizer state, more than any device of %s has "
                         "(largest %.3g bytes)",
                         l, req->profile->blocks[l].name, req->profile->model, need,
                         req->cluster->source, most);
            break;
        }
    }
    plan_cost_destroy(&c);
    return rc;
}

static double ref_samples(const plan_profile *p, int batch)
{
    return p->microbatch_size > 0 ? p->microbatch_size : batch;
}

/* The strategy's partition search alone. */
static sc_status run_strategy(plan_strategy strat, const plan_search_cfg *cfg, plan_partition *part,
                              sc_err *err)
{
    switch (strat) {
    case PLAN_STRAT_UNIFORM:
        return plan_partition_uniform(cfg, part, err);
    case PLAN_STRAT_BLOCKPARTITION:
        return plan_partition_blockpartition(cfg, part, err);
    case PLAN_STRAT_MINMAX:
    case PLAN_STRAT_UMPIPE:
        return plan_partition_minmax(cfg, part, err);
    case PLAN_STRAT_PIPEDREAM:
        return plan_partition_pipedream(cfg, part, err);
    case PLAN_STRAT_AUTOPIPE:
        return plan_partition_autopipe(cfg, part, err);
    case PLAN_STRAT_HETERO:
        return plan_partition_hetero(cfg, part, err);
    case PLAN_STRAT_EXHAUSTIVE:
        return plan_partition_exhaustive(cfg, part, err);
    default:
        return SC_ERRF(err, SC_ERR_INVALID, "unknown strategy %d", (int)strat);
    }
}

/* plan_run without the second search: with --microbatches auto, *retry_m is set to a count
 * that simulated faster than every count the runtime runs the partition's copies with (the
 * partition replicates more than that count allows), else left alone. */
static sc_status plan_run_once(const plan_request *req, plan_strategy strat, plan_result *out,
                               int *retry_m, sc_err *err)
{
    const plan_profile *prof = req->profile;
    const plan_cluster *cl = req->cluster;
    memset(out, 0, sizeof *out);
    out->strategy = strat;
    out->schedule = req->schedule;
    if (req->batch > PLAN_MAX_BATCH)
        return SC_ERRF(err, SC_ERR_INVALID, "--batch %d: expected 1 to %d samples", req->batch,
                       PLAN_MAX_BATCH);
    int64_t batch64 = req->batch > 0 ? req->batch : plan_request_default_batch(req);
    if (batch64 > PLAN_MAX_BATCH) /* only the default can be: req->batch was checked above */
        return SC_ERRF(err, SC_ERR_INVALID,
                       "the default batch, 2 x %d devices x the profile's microbatch_size %d = "
                       "%lld samples, is more than the %d planned; give --batch (1 to %d)",
                       cl->n_devices, prof->microbatch_size, (long long)batch64, PLAN_MAX_BATCH,
                       PLAN_MAX_BATCH);
    int batch = (int)batch64;
    int L = prof->n_blocks, D = cl->n_devices;
    out->batch = batch;
    SC_CHECK(check_request(req, batch, err));
    sc_status rc = SC_OK;
    plan_cost *cost = NULL, *ref = NULL;
    plan_profile *reordered = NULL;
    sc_err serr;
    sc_err_clear(&serr);

    /* first micro-batch count: given, or the closed form over the whole model */
    int S0 = D < L ? D : L;
    if (req->max_stages > 0 && req->max_stages < S0)
        S0 = req->max_stages;
    int m = req->microbatches;
    int cand[PLAN_MB_MAX_CANDIDATES];
    if (m == 0) {
        double a, b;
        plan_microbatch_fit(prof, 0, L - 1, batch, &a, &b);
        double ms = plan_microbatch_closed_form(a, b / S0, batch, S0);
        int n = plan_microbatch_candidates(batch, ms, min_count(req, S0), plan_microbatch_most(S0),
                                           cand);
        m = cand[0];
        for (int i = 1; i < n; i++)
            if (fabs(log(cand[i]) - log(ms)) < fabs(log(m) - log(ms)))
                m = cand[i];
    }
    SC_CHECK_GOTO(cost_new(req, &cost, prof, cl, (double)batch / m, batch, err), done);
    SC_CHECK_GOTO(cost_new(req, &ref, prof, cl, ref_samples(prof, batch), batch, err), done);
    SC_CHECK_GOTO(plan_partition_new(&out->part, L, D, err), done);
    /* umpipe's plans run fill-drain (the whole batch's stash at once): its partition is
     * searched under that memory, whatever schedule the request names */
    plan_search_cfg cfg = {.cost = cost,
                           .ref_cost = ref,
                           .sched = strat == PLAN_STRAT_UMPIPE ? PLAN_SCHED_GPIPE : req->schedule,
                           .n_micro = m,
                           .slice_efficiency = req->slice_efficiency,
                           .exhaustive_limit = req->exhaustive_limit,
                           .max_stages = req->max_stages,
                           .select_by_sim = 1};

    double t0 = sc_clock_now_s();
    for (;;) {
        rc = run_strategy(strat, &cfg, out->part, &serr);
        /* --microbatches auto with a capped count (plan_microbatch_most) whose micro-batches
         * fit no partition: smaller ones, about twice the count each time, as the uncapped
         * closed form would have tried */
        if (rc == SC_OK || !out->part->no_fit || req->microbatches != 0 || m >= batch)
            break;
        m = plan_microbatch_smaller(batch, m);
        sc_err_clear(&serr);
        plan_cost_destroy(&cost);
        plan_partition_destroy(&out->part);
        SC_CHECK_GOTO(cost_new(req, &cost, prof, cl, (double)batch / m, batch, err), done);
        SC_CHECK_GOTO(plan_partition_new(&out->part, L, D, err), done);
        cfg.cost = cost;
        cfg.n_micro = m;
    }
    if (rc != SC_OK)
        goto strategy_failed;
    out->objective_s = out->part->objective_s;
    sc_strlcpy(out->note, out->part->note, sizeof out->note);
    int S = out->part->n_stages;
    out->compute_s = calloc((size_t)S, sizeof(double));
    out->peak_memory_bytes = calloc((size_t)S, sizeof(double));
    out->allreduce_s = calloc((size_t)S, sizeof(double));
    if (!out->compute_s || !out->peak_memory_bytes || !out->allreduce_s) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (strat == PLAN_STRAT_UMPIPE) {
        /* on the minmax partition, which keeps the profile's order (no part->order) */
        out->micro_size = cost->samples;
        rc = plan_umpipe_run(req, cost, out, &serr);
        out->search_time_s = sc_clock_now_s() - t0;
        if (rc != SC_OK)
            goto strategy_failed;
        /* the common objective at the plan's mean entry size (batch / entries of the stage
         * with most), not at the size minmax partitioned with */
        out->micro_size = (double)batch / out->n_micro;
        plan_cost_destroy(&cost);
        SC_CHECK_GOTO(cost_new(req, &cost, prof, cl, out->micro_size, batch, err), done);
        for (int s = 0; s < S; s++) {
            out->compute_s[s] = plan_partition_stage_time(cost, out->part, s);
            out->allreduce_s[s] = plan_partition_reduce_time(cost, out->part, s);
        }
        out->bottleneck_s = plan_partition_bottleneck(cost, out->part);
        out->lower_bound_s = plan_lower_bound(cost);
        out->lower_bound_replicated_s = plan_lower_bound_replicated(cost);
        out->throughput_samples_per_s =
            out->iteration_time_s > 0 ? batch / out->iteration_time_s : 0;
        out->ok = 1;
        goto done;
    }
    out->search_time_s = sc_clock_now_s() - t0;

    /* a strategy that chose its own block order (pipedream on a branching graph): everything
     * below is computed on the profile in that order, where each stage is contiguous and holds
     * exactly the blocks the strategy gave it. req->profile stays as it is, so every plan of a
     * run starts from the same order. */
    if (out->part->order != NULL) {
        SC_CHECK_GOTO(plan_profile_reorder(&reordered, prof, out->part->order, err), done);
        prof = reordered;
        plan_cost_destroy(&cost);
        SC_CHECK_GOTO(cost_new(req, &cost, prof, cl, (double)batch / m, batch, err), done);
    }

    /* --microbatches auto: closed form on the bottleneck stage, then a simulated sweep */
    if (req->microbatches == 0) {
        int worst = 0;
        for (int s = 1; s < S; s++)
            if (plan_partition_stage_time(cost, out->part, s) >
                plan_partition_stage_time(cost, out->part, worst))
                worst = s;
        double a, b;
        plan_microbatch_fit(prof, out->part->first[worst], out->part->last[worst], batch, &a, &b);
        double ms = plan_microbatch_closed_form(a, b, batch, S);
        int n =
            plan_microbatch_candidates(batch, ms, min_count(req, S), plan_microbatch_most(S), cand);
        double best = HUGE_VAL, best_other = HUGE_VAL;
        int best_m = -1, fallback_m = -1, tried_m = -1, other_m = -1;
        double *peak = calloc((size_t)S, sizeof(double));
        if (peak == NULL) {
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
            goto done;
        }
        /* the candidates around m*; when none fits memory, ever smaller micro-batches (about
         * twice the count each time, divisors of the batch) until one fits or each holds one
         * sample. Only a count under which the runtime runs the partition's copies is chosen
         * (the searched count m is one: with none among them m stays); the fastest other one
         * that fits is left to plan_run to search again at. */
        for (int i = 0, mc = n > 0 ? cand[0] : 0; mc > 0;
             mc = ++i < n                         ? cand[i]
                  : best_m < 0 && tried_m < batch ? plan_microbatch_smaller(batch, tried_m)
                                                  : 0) {
            tried_m = mc > tried_m ? mc : tried_m;
            int runs = plan_partition_runnable(out->part, req->schedule, mc);
            plan_cost *cm = NULL;
            double it;
            int k, fits;
            rc = cost_new(req, &cm, prof, cl, (double)batch / mc, batch, err);
            if (rc == SC_OK)
                rc = pick_sliced(req, cm, out->part, batch, mc, peak, &k, &it, &fits, err);
            plan_cost_destroy(&cm);
            if (rc != SC_OK) {
                free(peak);
                goto done;
            }
            if (out->n_sweep < PLAN_SWEEP_MAX) {
                out->sweep_count[out->n_sweep] = mc;
                out->sweep_iter_s[out->n_sweep] = it;
                out->sweep_fits[out->n_sweep] = fits;
                out->sweep_runnable[out->n_sweep++] = runs;
            }
            /* the fastest that fits; when none fits, the smallest micro-batches */
            if (runs && fits && it < best) {
                best = it;
                best_m = mc;
            }
            if (!runs && fits && it < best_other) {
                best_other = it;
                other_m = mc;
            }
            if (runs && mc > fallback_m)
                fallback_m = mc;
        }
        if (other_m > 0 && best_other < best)
            *retry_m = other_m;
        if (best_m < 0)
            best_m = fallback_m;
        free(peak);
        if (best_m > 0 && best_m != m) {
            m = best_m;
            plan_cost_destroy(&cost);
            SC_CHECK_GOTO(cost_new(req, &cost, prof, cl, (double)batch / m, batch, err), done);
        }
    }
    out->n_micro = m;
    out->micro_size = (double)batch / m;

    int sliced = 0;
    if (req->schedule == PLAN_SCHED_SLICED) {
        double it;
        int fits;
        SC_CHECK_GOTO(pick_sliced(req, cost, out->part, batch, m, out->peak_memory_bytes, &sliced,
                                  &it, &fits, err),
                      done);
    }
    out->sliced = sliced;
    SC_CHECK_GOTO(simulate(req, cost, out->part, m, sliced, req->record_trace, &out->sim, err),
                  done);
    out->iteration_time_s = out->sim.iteration_s;
    out->bubble_fraction = out->sim.bubble_fraction;
    out->throughput_samples_per_s = out->iteration_time_s > 0 ? batch / out->iteration_time_s : 0;
    out->fits_memory = memory_of(req, cost, out->part, &out->sim, out->peak_memory_bytes);
    if (req->schedule == PLAN_SCHED_ZB1) { /* the plan's deferred_w, for the runtime */
        out->w_defer = calloc((size_t)S, sizeof *out->w_defer);
        if (out->w_defer == NULL) {
            rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory");
            goto done;
        }
        SC_CHECK_GOTO(plan_partition_zb1_defer(cost, out->part, m, out->w_defer, err), done);
    }
    for (int s = 0; s < S; s++) {
        out->compute_s[s] = plan_partition_stage_time(cost, out->part, s);
        out->allreduce_s[s] = plan_partition_reduce_time(cost, out->part, s);
    }
    out->bottleneck_s = plan_partition_bottleneck(cost, out->part);
    out->lower_bound_s = plan_lower_bound(cost);
    out->lower_bound_replicated_s = plan_lower_bound_replicated(cost);
    out->ok = 1;
    goto done;

strategy_failed:
    out->search_time_s = sc_clock_now_s() - t0;
    if (strat == PLAN_STRAT_UMPIPE && out->part != NULL && out->part->no_fit) {
        /* its partition was searched under fill-drain memory: say so */
        static const char pre[] = "umpipe runs fill-drain, every stage holding the whole "
                                  "batch's stash until its backward: ";
        char msg[SC_ERR_MSG_MAX];
        sc_strlcpy(msg, pre, sizeof msg);
        sc_strlcpy(msg + strlen(pre), serr.msg, sizeof msg - strlen(pre));
        sc_strlcpy(serr.msg, msg, sizeof serr.msg);
    }
    sc_strlcpy(out->error, serr.msg, sizeof out->error);
    if (err != NULL && err->code == SC_OK)
        *err = serr;
done:
    plan_cost_destroy(&cost);
    plan_cost_destroy(&ref);
    plan_profile_destroy(&reordered);
    return rc;
}

/* plan_run for one schedule. */
static sc_status plan_run_sched(const plan_request *req, plan_strategy strat, plan_result *out,
                                sc_err *err)
{
    int retry_m = 0;
    sc_status rc = plan_run_once(req, strat, out, &retry_m, err);
    if (rc != SC_OK || retry_m == 0)
        return rc;
    /* --microbatches auto: the sweep's fastest count gives some replicated stage of the partition
     * fewer micro-batches than the runtime needs for its copies. Search again at that count,
     * where the strategy replicates only what the runtime runs, and keep the faster plan. */
    plan_request again = *req;
    again.microbatches = retry_m;
    plan_result alt;
    sc_err ignored;
    sc_err_clear(&ignored);
    int none = 0;
    sc_status arc = plan_run_once(&again, strat, &alt, &none, &ignored);
    out->search_time_s += alt.search_time_s;
    if (arc == SC_OK && alt.ok && alt.fits_memory >= out->fits_memory &&
        alt.iteration_time_s < out->iteration_time_s) {
        alt.search_time_s = out->search_time_s;
        alt.n_sweep = out->n_sweep;
        memcpy(alt.sweep_count, out->sweep_count, sizeof alt.sweep_count);
        memcpy(alt.sweep_iter_s, out->sweep_iter_s, sizeof alt.sweep_iter_s);
        memcpy(alt.sweep_fits, out->sweep_fits, sizeof alt.sweep_fits);
        memcpy(alt.sweep_runnable, out->sweep_runnable, sizeof alt.sweep_runnable);
        size_t used = strlen(alt.note);
        snprintf(alt.note + used, sizeof alt.note - used,
                 "%ssearched again at %d micro-batches, which the first plan's copies cannot "
                 "run with",
                 used ? "; " : "", retry_m);
        plan_result_free(out);
        *out = alt;
    } else {
        plan_result_free(&alt);
    }
    return SC_OK;
}

/* Appends `text` to a result's note, after "; " when it holds one already. */
static void note_add(plan_result *r, const char *text)
{
    size_t used = strlen(r->note);
    snprintf(r->note + used, sizeof r->note - used, "%s%s", used ? "; " : "", text);
}

/* Whether plan a is better than plan b under PLAN_SCHED_AUTO: found, fits memory, faster. */
static int auto_better(const plan_result *a, const plan_result *b)
{
    if (a->ok != b->ok)
        return a->ok;
    if (a->fits_memory != b->fits_memory)
        return a->fits_memory;
    return a->iteration_time_s < b->iteration_time_s;
}

/* Where a zb1 plan's B and W times come from. */
static const char *zb1_note(const plan_request *req)
{
    return plan_profile_wgrad_measured(req->profile)
               ? "zb1: B and W as the profile measured them"
               : "zb1: B and W each half of the profile's backward (assumed)";
}

sc_status plan_run(const plan_request *req, plan_strategy strat, plan_result *out, sc_err *err)
{
    if (req->schedule != PLAN_SCHED_AUTO) {
        sc_status rc = plan_run_sched(req, strat, out, err);
        if (rc == SC_OK && out->ok && out->schedule == PLAN_SCHED_ZB1 && strat != PLAN_STRAT_UMPIPE)
            note_add(out, zb1_note(req));
        return rc;
    }
    /* 1f1b first: a tie keeps it */
    static const plan_sched_kind cands[] = {PLAN_SCHED_1F1B, PLAN_SCHED_GPIPE, PLAN_SCHED_SLICED,
                                            PLAN_SCHED_ZB1};
    int n = (int)(sizeof cands / sizeof cands[0]) - (req->runtime_zb1 ? 0 : 1);
    if (strat == PLAN_STRAT_UMPIPE)
        n = 1; /* its plans run fill-drain ("unequal") whatever the schedule */
    plan_request one = *req;
    double searched = 0;
    sc_status rc = SC_OK;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < n; i++) {
        plan_result r;
        sc_err e;
        sc_err_clear(&e);
        one.schedule = cands[i];
        sc_status ri = plan_run_sched(&one, strat, &r, &e);
        searched += r.search_time_s;
        if (i == 0 || (ri == SC_OK && auto_better(&r, out))) {
            plan_result_free(out);
            *out = r;
            rc = ri;
            if (err != NULL && ri != SC_OK)
                *err = e;
        } else {
            plan_result_free(&r);
        }
        if (i == 0 && ri != SC_OK && !out->ok && out->part == NULL)
            return rc; /* the request itself is bad: every schedule would say so */
    }
    out->search_time_s = searched;
    if (rc == SC_OK && out->ok && strat != PLAN_STRAT_UMPIPE) {
        char text[96];
        snprintf(text, sizeof text, "auto: %s, fastest of gpipe, 1f1b, sliced%s",
                 plan_sched_name(out->schedule),
                 req->runtime_zb1 ? ", zb1" : " (zb1 left out: the runtime does not run it)");
        note_add(out, text);
        if (out->schedule == PLAN_SCHED_ZB1)
            note_add(out, zb1_note(req));
    }
    return rc;
}
