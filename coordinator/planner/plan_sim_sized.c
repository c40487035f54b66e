/*
 * plan_sim_sized: unequal micro-batch sizes per stage (plan_sim_run_sized and
 * plan_sim_run_sized_shared).
 *
 * Each stage cuts the batch into its own entries; a forward entry waits for the upstream
 * entries that complete its samples, a backward entry for the downstream ones, in fill-drain
 * order. On private devices the two passes are played directly, stage by stage; on shared
 * processors the sizes become fill-drain action lists played by plan_sim_shared_play with each
 * entry's own times. Does not search for sizes (plan_ga) and does not validate schedules.
 * Invariant: every row is checked (entries in 1..batch summing to the batch) before it is
 * played; on private devices the iteration time is exactly the UMPIPE recurrence's
 * (plan_ga_eval_one's without its memory penalty).
 */
#include "coordinator/planner/plan_sim.h"

#include <stdlib.h>
#include <string.h>

#include "coordinator/planner/plan_sim_internal.h"

/* Entries of one row: positive sizes up to the first zero, checked to lie in 1..batch and to
 * sum to the batch. Returns the count, or -1 with err set. */
static int sized_row(const plan_sim_sized *in, const int *row, int stage, const char *what,
                     sc_err *err)
{
    int n = 0;
    long long total = 0;
    for (; n < in->max_entries && row[n] != 0; n++) {
        if (row[n] < 1 || row[n] > in->batch) {
            SC_ERRF(err, SC_ERR_INVALID,
                    "stage %d %s sizes: entry %d is %d samples; each must be 1 to the batch (%d)",
                    stage, what, n, row[n], in->batch);
            return -1;
        }
        total += row[n];
    }
    if (n == 0 || total != in->batch) {
        SC_ERRF(err, SC_ERR_INVALID,
                "stage %d %s sizes sum to %lld samples over %d entries; they must sum to the "
                "batch (%d)",
                stage, what, total, n, in->batch);
        return -1;
    }
    return n;
}

/* Every stage's rows checked (sized_row), their entry counts (nf, nb) and prefix sums (pf, pb:
 * (S, K+1), from 0). Returns SC_ERR_INVALID with err set at the first bad row. */
static sc_status sized_rows(const plan_sim_sized *in, int *pf, int *pb, int *nf, int *nb,
                            sc_err *err)
{
    int K = in->max_entries;
    for (int i = 0; i < in->n_stages; i++) {
        const int *x = in->fwd_sizes + (size_t)i * K, *y = in->bwd_sizes + (size_t)i * K;
        nf[i] = sized_row(in, x, i, "forward", err);
        nb[i] = nf[i] < 0 ? -1 : sized_row(in, y, i, "backward", err);
        if (nf[i] < 0 || nb[i] < 0)
            return SC_ERR_INVALID;
        int *p = pf + (size_t)i * (K + 1), *q = pb + (size_t)i * (K + 1);
        p[0] = q[0] = 0;
        for (int j = 0; j < nf[i]; j++)
            p[j + 1] = p[j] + x[j];
        for (int j = 0; j < nb[i]; j++)
            q[j + 1] = q[j] + y[j];
    }
    return SC_OK;
}

sc_status plan_sim_run_sized(const plan_sim_sized *in, int record_events, plan_sim_result *out,
                             sc_err *err)
{
    int S = in->n_stages, K = in->max_entries;
    size_t W = (size_t)in->batch + 1;
    sim_state st = {.S = S, .r = out};
    sc_status rc = SC_OK;
    memset(out, 0, sizeof *out);
    if (S < 1 || K < 1 || in->batch < 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "sizes per stage: needs stages, entries and batch >= 1, got %d, %d, %d", S,
                       K, in->batch);
    /* (S, K) arrival of each entry's send across its cut (forward: after stage i; backward:
     * before stage i), prefix sums (S, K+1), entry counts, last forward end */
    double *arr_f = malloc((size_t)S * (size_t)K * sizeof(double));
    double *arr_b = malloc((size_t)S * (size_t)K * sizeof(double));
    int *pf = malloc((size_t)S * (size_t)(K + 1) * sizeof(int));
    int *pb = malloc((size_t)S * (size_t)(K + 1) * sizeof(int));
    int *nf = malloc((size_t)S * sizeof(int)), *nb = malloc((size_t)S * sizeof(int));
    double *fend = malloc((size_t)S * sizeof(double));
    out->n_stages = S;
    out->busy_s = calloc((size_t)S, sizeof(double));
    out->idle_s = calloc((size_t)S, sizeof(double));
    out->peak_inflight = calloc((size_t)S, sizeof(double));
    if (!arr_f || !arr_b || !pf || !pb || !nf || !nb || !fend || !out->busy_s || !out->idle_s ||
        !out->peak_inflight) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory simulating %d stages x %d entries", S, K);
        goto done;
    }
    SC_CHECK_GOTO(sized_rows(in, pf, pb, nf, nb, err), done);
    for (int i = 0; i < S; i++)
        out->peak_inflight[i] = nf[i];

    /* Forward, stage by stage: every input of stage i comes from stage i-1, already played. */
    for (int i = 0; i < S; i++) {
        const int *x = in->fwd_sizes + (size_t)i * K;
        const int *p = pf + (size_t)i * (K + 1);
        const int *up = i > 0 ? pf + (size_t)(i - 1) * (K + 1) : NULL;
        const double *ft = in->fwd_s + (size_t)i * W, *ct = in->comm_s + (size_t)i * W;
        double clock = 0, link = 0;
        int k = 0;
        for (int j = 0; j < nf[i]; j++) {
            if (i > 0) {
                /* the first upstream entry whose prefix covers this entry's samples */
                while (k < nf[i - 1] - 1 && up[k + 1] < p[j + 1])
                    k++;
                double ready = arr_f[(size_t)(i - 1) * K + k];
                clock = clock > ready ? clock : ready;
            }
            double start = clock, dur = ft[x[j]];
            clock = start + dur;
            out->busy_s[i] += dur;
            if (record_events && plan_sim_add_event(&st, i, PLAN_ACT_F, j, start, dur) != 0)
                goto nomem;
            if (i + 1 < S) {
                double t0 = link > clock ? link : clock, d = ct[x[j]];
                link = t0 + d;
                arr_f[(size_t)i * K + j] = link;
                if (record_events && d > 0 &&
                    plan_sim_add_event(&st, S + 2 * i, PLAN_ACT_SEND_F, j, t0, d) != 0)
                    goto nomem;
            }
        }
        fend[i] = clock;
    }
    /* Backward, from the last stage: a stage starts after its own last forward. */
    double end = 0;
    for (int i = S - 1; i >= 0; i--) {
        const int *y = in->bwd_sizes + (size_t)i * K;
        const int *q = pb + (size_t)i * (K + 1);
        const int *dn = i + 1 < S ? pb + (size_t)(i + 1) * (K + 1) : NULL;
        const double *bt = in->bwd_s + (size_t)i * W;
        const double *ct = i > 0 ? in->comm_s + (size_t)(i - 1) * W : NULL;
        double clock = fend[i], link = 0;
        int k = 0;
        for (int j = 0; j < nb[i]; j++) {
            if (i < S - 1) {
                while (k < nb[i + 1] - 1 && dn[k + 1] < q[j + 1])
                    k++;
                double ready = arr_b[(size_t)(i + 1) * K + k];
                clock = clock > ready ? clock : ready;
            }
            double start = clock, dur = bt[y[j]];
            clock = start + dur;
            out->busy_s[i] += dur;
            if (record_events && plan_sim_add_event(&st, i, PLAN_ACT_B, j, start, dur) != 0)
                goto nomem;
            if (ct != NULL) {
                double t0 = link > clock ? link : clock, d = ct[y[j]];
                link = t0 + d;
                arr_b[(size_t)i * K + j] = link;
                if (record_events && d > 0 &&
                    plan_sim_add_event(&st, S + 2 * (i - 1) + 1, PLAN_ACT_SEND_B, j, t0, d) != 0)
                    goto nomem;
            }
        }
        double opt = in->opt_s != NULL ? in->opt_s[i] : 0;
        if (opt > 0) {
            if (record_events && plan_sim_add_event(&st, i, PLAN_ACT_OPT, -1, clock, opt) != 0)
                goto nomem;
            out->busy_s[i] += opt;
        }
        clock += opt;
        end = clock > end ? clock : end;
    }
    plan_sim_finish_flushed(out, out->busy_s, S, end);
    goto done;
nomem:
    rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory recording simulation events");
done:
    free(arr_f);
    free(arr_b);
    free(pf);
    free(pb);
    free(nf);
    free(nb);
    free(fend);
    if (rc != SC_OK)
        plan_sim_result_free(out);
    return rc;
}

/* Appends to stage i the receives that bring it every sample of an entry whose prefix sum is
 * `reach`: the neighbour's entries (n_up of them, prefix sums pu) from *next, the first not yet
 * received, up to the first whose prefix sum reaches `reach`; none when that one came already. */
static sc_status push_receives(plan_schedule *s, int i, plan_act_kind kind, const int *pu, int n_up,
                               int reach, int *next, sc_err *err)
{
    while (*next < n_up && (*next == 0 || pu[*next] < reach)) {
        SC_CHECK(plan_schedule_push(s, i, kind, *next, err));
        ++*next;
    }
    return SC_OK;
}

sc_status plan_sim_run_sized_shared(const plan_sim_sized *in, const plan_sim_share *share,
                                    int record_events, plan_sim_result *out, sc_err *err)
{
    int S = in->n_stages, K = in->max_entries, grouped = 0;
    memset(out, 0, sizeof *out);
    if (share != NULL && S >= 1)
        SC_CHECK(plan_sim_share_check(share, S, 0, &grouped, err));
    if (!grouped)
        return plan_sim_run_sized(in, record_events, out, err);
    if (K < 1 || in->batch < 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "sizes per stage: needs stages, entries and batch >= 1, got %d, %d, %d", S,
                       K, in->batch);
    size_t W = (size_t)in->batch + 1, SK = (size_t)S * (size_t)K;
    plan_schedule *s = NULL;
    double *t = calloc(4 * SK, sizeof(double));
    int *pf = malloc((size_t)S * (size_t)(K + 1) * sizeof(int));
    int *pb = malloc((size_t)S * (size_t)(K + 1) * sizeof(int));
    int *nf = malloc((size_t)S * sizeof(int)), *nb = malloc((size_t)S * sizeof(int));
    plan_sim_stage *stages = calloc((size_t)S, sizeof *stages);
    sc_status rc = SC_OK;
    if (!t || !pf || !pb || !nf || !nb || !stages) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory simulating %d stages x %d entries", S, K);
        goto done;
    }
    /* each entry's times, as plan_sim_run_sized reads them */
    SC_CHECK_GOTO(sized_rows(in, pf, pb, nf, nb, err), done);
    for (int i = 0; i < S; i++) {
        const int *x = in->fwd_sizes + (size_t)i * K, *y = in->bwd_sizes + (size_t)i * K;
        for (int j = 0; j < nf[i]; j++) {
            t[(size_t)i * K + j] = in->fwd_s[(size_t)i * W + x[j]];
            if (i + 1 < S)
                t[2 * SK + (size_t)i * K + j] = in->comm_s[(size_t)i * W + x[j]];
        }
        for (int j = 0; j < nb[i]; j++) {
            t[SK + (size_t)i * K + j] = in->bwd_s[(size_t)i * W + y[j]];
            if (i > 0)
                t[3 * SK + (size_t)i * K + j] = in->comm_s[(size_t)(i - 1) * W + y[j]];
        }
        stages[i].opt_s = in->opt_s != NULL ? in->opt_s[i] : 0;
    }
    /* The fill-drain lists: each entry first receives the neighbour's entries that complete its
     * samples (the links deliver them in order, so the clock reaches the last one's arrival,
     * the wait of plan_sim_run_sized), computes, and sends; the optimizer step last. */
    SC_CHECK_GOTO(plan_schedule_new(&s, S, K, err), done);
    for (int i = 0; i < S; i++) {
        const int *p = pf + (size_t)i * (K + 1), *q = pb + (size_t)i * (K + 1);
        int next = 0;
        for (int j = 0; j < nf[i]; j++) {
            if (i > 0)
                SC_CHECK_GOTO(push_receives(s, i, PLAN_ACT_RECV_F, pf + (size_t)(i - 1) * (K + 1),
                                            nf[i - 1], p[j + 1], &next, err),
                              done);
            SC_CHECK_GOTO(plan_schedule_push(s, i, PLAN_ACT_F, j, err), done);
            if (i + 1 < S)
                SC_CHECK_GOTO(plan_schedule_push(s, i, PLAN_ACT_SEND_F, j, err), done);
        }
        next = 0;
        for (int j = 0; j < nb[i]; j++) {
            if (i + 1 < S)
                SC_CHECK_GOTO(push_receives(s, i, PLAN_ACT_RECV_B, pb + (size_t)(i + 1) * (K + 1),
                                            nb[i + 1], q[j + 1], &next, err),
                              done);
            SC_CHECK_GOTO(plan_schedule_push(s, i, PLAN_ACT_B, j, err), done);
            if (i > 0)
                SC_CHECK_GOTO(plan_schedule_push(s, i, PLAN_ACT_SEND_B, j, err), done);
        }
        if (stages[i].opt_s > 0)
            SC_CHECK_GOTO(plan_schedule_push(s, i, PLAN_ACT_OPT, -1, err), done);
    }
    sim_unit_times ut = {.fwd = t, .bwd = t + SK, .send_f = t + 2 * SK, .send_b = t + 3 * SK};
    rc = plan_sim_shared_play(s, stages, 1, 1.0, share, &ut, record_events, out, err);
done:
    plan_schedule_destroy(&s);
    free(t);
    free(pf);
    free(pb);
    free(nf);
    free(nb);
    free(stages);
    return rc;
}
