/*
 * plan_write: plan results as the plan JSON of docs/reference/formats.md and as a human table, and
 * a result's simulated schedule as a Chrome trace.
 *
 * Computes nothing: every figure written is the result's own. Invariant: text that comes from
 * the inputs (model, block and file names, error messages) is escaped in the JSON and made
 * printable in the table.
 */
#include "coordinator/planner/plan.h"

#include <stdio.h>

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_sizes(FILE *f, const int *row, int K)
{
    fputc('[', f);
    for (int j = 0; j < K && row[j] > 0; j++)
        fprintf(f, "%s%d", j ? ", " : "", row[j]);
    fputc(']', f);
}

/* zb1's W share of the whole backward on the profile's reference device: the profiler's
 * measured split when every block has one, else PLAN_WGRAD_SHARE (*assumed set). */
static double wgrad_share(const plan_profile *p, int *assumed)
{
    *assumed = !plan_profile_wgrad_measured(p);
    if (*assumed)
        return PLAN_WGRAD_SHARE;
    double w = 0, b = 0;
    for (int l = 0; l < p->n_blocks; l++) {
        w += p->blocks[l].wgrad_share * p->blocks[l].backward_s;
        b += p->blocks[l].backward_s;
    }
    return b > 0 ? w / b : 0;
}

/* A partition's `search` (PLAN_SEARCH_*) as the plan file and the table name it. */
static const char *search_name(int search)
{
    return search == PLAN_SEARCH_EXACT ? "exact" : "heuristic";
}

sc_status plan_write_json(FILE *f, const plan_request *req, const plan_result *r, int n,
                          sc_err *err)
{
    fprintf(f, "{\"model\": ");
    json_str(f, req->profile->model);
    fprintf(f, ", \"blocks\": %d, \"devices\": %d, \"plans\": [", req->profile->n_blocks,
            req->cluster->n_devices);
    for (int i = 0; i < n; i++) {
        const plan_result *x = &r[i];
        fprintf(f, "%s\n  {\"strategy\": \"%s\"", i ? "," : "", plan_strategy_name(x->strategy));
        if (!x->ok) {
            fprintf(f, ", \"error\": ");
            json_str(f, x->error);
            fprintf(f, ", \"search_time_s\": %.9g}", x->search_time_s);
            continue;
        }
        fprintf(f,
                ", \"schedule\": \"%s\", \"batch\": %d, \"objective_s\": %.9g, "
                "\"bottleneck_s\": %.9g, \"iteration_time_s\": %.9g, "
                "\"throughput_samples_per_s\": %.9g, \"bubble_fraction\": %.6f, "
                "\"lower_bound_s\": %.9g, \"lower_bound_replicated_s\": %.9g, "
                "\"search_time_s\": %.9g, \"fits_memory\": %s",
                x->strategy == PLAN_STRAT_UMPIPE ? "unequal" : plan_sched_name(x->schedule),
                x->batch, x->objective_s, x->bottleneck_s, x->iteration_time_s,
                x->throughput_samples_per_s, x->bubble_fraction, x->lower_bound_s,
                x->lower_bound_replicated_s, x->search_time_s, x->fits_memory ? "true" : "false");
        if (x->part->search != 0)
            fprintf(f, ", \"search\": \"%s\"", search_name(x->part->search));
        if (x->note[0]) {
            fprintf(f, ", \"note\": ");
            json_str(f, x->note);
        }
        if (x->schedule == PLAN_SCHED_ZB1 && x->strategy != PLAN_STRAT_UMPIPE) {
            int assumed;
            double share = wgrad_share(req->profile, &assumed);
            fprintf(f,
                    ",\n   \"backward_split\": {\"weight_gradient_share\": %.6g, \"assumed\": "
                    "%s}",
                    share, assumed ? "true" : "false");
        }
        fprintf(f, ",\n   \"stages\": [");
        const plan_partition *p = x->part;
        for (int s = 0; s < p->n_stages; s++) {
            fprintf(f, "%s\n    {\"first_block\": %d, \"last_block\": %d, \"devices\": [",
                    s ? "," : "", p->first[s], p->last[s]);
            for (int d = 0; d < p->n_dev[s]; d++)
                fprintf(f, "%s%d", d ? ", " : "", p->devs[p->dev_start[s] + d]);
            fprintf(f, "], \"replicas\": %d, \"compute_s\": %.9g, \"peak_memory_bytes\": %.6g",
                    p->n_dev[s], x->compute_s[s], x->peak_memory_bytes[s]);
            if (x->allreduce_s != NULL && p->n_dev[s] > 1)
                fprintf(f, ", \"allreduce_s\": %.6g", x->allreduce_s[s]);
            if (x->w_defer != NULL && x->strategy != PLAN_STRAT_UMPIPE)
                fprintf(f, ", \"deferred_w\": %d", x->w_defer[s]);
            fputc('}', f);
        }
        fprintf(f, "]");
        if (p->order != NULL) {
            /* the plan's own block order: position i is the profile's block named here */
            fprintf(f, ",\n   \"block_order\": [");
            for (int i = 0; i < p->n_order; i++) {
                fprintf(f, "%s", i ? ", " : "");
                json_str(f, req->profile->blocks[p->order[i]].name);
            }
            fprintf(f, "]");
        }
        fprintf(f, ",\n   \"microbatches\": {\"count\": %d", x->n_micro);
        if (x->strategy == PLAN_STRAT_UMPIPE) {
            fprintf(f, ", \"sizes\": [");
            for (int s = 0; s < p->n_stages; s++) {
                fprintf(f, "%s", s ? ", " : "");
                json_sizes(f, x->fwd_sizes + s * x->ga_k, x->ga_k);
            }
            fprintf(f, "], \"backward_sizes\": [");
            for (int s = 0; s < p->n_stages; s++) {
                fprintf(f, "%s", s ? ", " : "");
                json_sizes(f, x->bwd_sizes + s * x->ga_k, x->ga_k);
            }
            fprintf(f, "]");
        } else {
            fprintf(f, ", \"size\": %.9g", x->micro_size);
            if (x->schedule == PLAN_SCHED_SLICED)
                fprintf(f, ", \"sliced\": %d", x->sliced);
        }
        if (x->n_sweep > 0) {
            fprintf(f, ", \"sweep\": [");
            for (int k = 0; k < x->n_sweep; k++)
                fprintf(f,
                        "%s{\"count\": %d, \"iteration_time_s\": %.9g, \"fits_memory\": %s, "
                        "\"runnable\": %s}",
                        k ? ", " : "", x->sweep_count[k], x->sweep_iter_s[k],
                        x->sweep_fits[k] ? "true" : "false",
                        x->sweep_runnable[k] ? "true" : "false");
            fprintf(f, "]");
        }
        fprintf(f, "}");
        if (x->strategy == PLAN_STRAT_UMPIPE)
            fprintf(f,
                    ",\n   \"baselines\": {\"best_equal_split_s\": %.9g, \"local_greedy_s\": "
                    "%.9g, \"uniform_stagewise_s\": %.9g}",
                    x->ga_best_equal_s, x->ga_greedy_s, x->ga_uniform_s);
        fprintf(f, "}");
    }
    fprintf(f, "\n]}\n");
    if (ferror(f))
        return SC_ERRF(err, SC_ERR_IO, "writing the plan JSON failed");
    return SC_OK;
}

static void fmt_bytes(char *buf, size_t n, double b)
{
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int i = 0;
    while (b >= 1000 && i < 4) {
        b /= 1000;
        i++;
    }
    snprintf(buf, n, "%.1f %s", b, u[i]);
}

/* Text from the inputs (a model's or block's name, a file name) in a table line: control
 * characters (a newline, a terminal escape) become '?', as in error messages. */
static void table_str(FILE *f, const char *s)
{
    for (; *s; s++)
        fputc((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s, f);
}

void plan_write_table(FILE *f, const plan_request *req, const plan_result *r, int n)
{
    fprintf(f, "model ");
    table_str(f, req->profile->model);
    fprintf(f, ": %d blocks; cluster ", req->profile->n_blocks);
    table_str(f, req->cluster->source);
    fprintf(f, ": %d devices; batch %d; schedule %s\n", req->cluster->n_devices,
            n > 0 ? r[0].batch : 0, plan_sched_name(req->schedule));
    fprintf(f, "%-15s %6s %7s %6s %12s %12s %12s %7s %10s %10s\n", "strategy", "stages", "devices",
            "micro", "iteration_s", "samples/s", "bottleneck_s", "bubble", "peak_mem", "search_s");
    int zb1 = 0;
    for (int i = 0; i < n; i++) {
        const plan_result *x = &r[i];
        if (!x->ok) {
            fprintf(f, "%-15s failed: ", plan_strategy_name(x->strategy));
            table_str(f, x->error);
            fputc('\n', f);
            continue;
        }
        double peak = 0;
        for (int s = 0; s < x->part->n_stages; s++)
            peak = x->peak_memory_bytes[s] > peak ? x->peak_memory_bytes[s] : peak;
        char pm[32];
        fmt_bytes(pm, sizeof pm, peak);
        fprintf(f, "%-15s %6d %7d %6d %12.6g %12.6g %12.6g %6.1f%% %10s %10.4g%s",
                plan_strategy_name(x->strategy), x->part->n_stages, x->part->n_devs, x->n_micro,
                x->iteration_time_s, x->throughput_samples_per_s, x->bottleneck_s,
                100 * x->bubble_fraction, pm, x->search_time_s,
                x->fits_memory ? "" : "  (exceeds memory)");
        /* auto: each line's own schedule */
        if (req->schedule == PLAN_SCHED_AUTO)
            fprintf(f, "  [%s]",
                    x->strategy == PLAN_STRAT_UMPIPE ? "unequal" : plan_sched_name(x->schedule));
        /* hetero: whether its exact search ran to the end or its heuristic decided */
        if (x->part->search != 0)
            fprintf(f, "  search: %s", search_name(x->part->search));
        fputc('\n', f);
        zb1 |= x->schedule == PLAN_SCHED_ZB1 && x->strategy != PLAN_STRAT_UMPIPE;
    }
    int assumed;
    double share = wgrad_share(req->profile, &assumed);
    if (zb1)
        fprintf(f,
                "zb1: each backward split into B (input gradient) and W (weight gradient), "
                "%.0f%% of it %s\n",
                100 * share,
                assumed ? "assumed to be W (the profile does not measure the split)"
                        : "W as the profile measured it");
    /* The bounds are per micro-batch, as the bottleneck is: one line per micro-batch size */
    for (int i = 0; i < n; i++) {
        int seen = !r[i].ok;
        for (int j = 0; j < i && !seen; j++)
            seen = r[j].ok && r[j].micro_size == r[i].micro_size;
        if (seen)
            continue;
        fprintf(f,
                "lower bound on the bottleneck at %.6g samples per micro-batch: %.6g s with a "
                "device per stage, %.6g s with replicated stages\n",
                r[i].micro_size, r[i].lower_bound_s, r[i].lower_bound_replicated_s);
    }
}

sc_status plan_write_trace(const plan_result *r, const char *path, sc_err *err)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return SC_ERRF(err, SC_ERR_IO, "--trace %s: cannot create the file", path);
    sc_status rc = plan_sim_write_trace(&r->sim, f, NULL, err);
    if (fclose(f) != 0 && rc == SC_OK)
        rc = SC_ERRF(err, SC_ERR_IO, "--trace %s: write failed", path);
    return rc;
}
