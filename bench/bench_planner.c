/*
 * bench_planner: search time and plan quality of every planner strategy.
 *
 *   bench_planner [PROFILE ...]
 *   bench_planner --ga        (only the genetic search's evaluators)
 *   bench_planner --hetero N [M]  (hetero against exhaustive on N seeded small instances)
 *   bench_planner --zb1       (simulated bubble of zb1 against 1f1b)
 *   bench_planner --zb1 PROFILE [BW [MEM]]  (the same on the profile's minmax plan)
 *   bench_planner --exact N   (hetero's exact search: time by size, and against exhaustive)
 *
 * For each profile given (our JSON or PipeDream graph.txt), runs every strategy on 4 and 16
 * identical devices; then a synthetic 1,500-block chain on 16 devices and on 64 unequal
 * devices in 8 servers; then the genetic search's batched evaluator against evaluating the
 * same individuals one by one, on fixed populations and inside a search run both ways. Prints
 * figures; asserts nothing. --hetero draws the small two-server instances of
 * tests/unit/test_planner_hetero.c (same generator, seeds 1..N) with M micro-batches of one
 * sample (256 by default) and prints hetero's worst simulated iteration over exhaustive's and
 * both search times. --zb1 simulates 1f1b and zb1 on p equal stages with m micro-batches
 * (forward f, backward 2f of which half is the weight gradient, transfers of 0 or f/10 each way)
 * and prints both bubble fractions, their ratio and the most micro-batches a stage stashes;
 * then both on two stages of 2 and 1 copies, the copies' all-reduce after the last W.
 * --exact times hetero (which runs its exact search up to 8 devices) on chains of 10, 16 and 64
 * blocks over 2..8 devices that are all unlike (one per server, speeds from 1 down), where no
 * symmetry helps, with 4 and 16 micro-batches; then on the uneven instances of
 * tests/unit/test_planner_exact.c (seeds 1..N) it prints hetero's worst simulated iteration
 * over exhaustive's and both search times by device count.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "coordinator/planner/plan.h"
#include "coordinator/planner/plan_ga.h"
#include "coordinator/planner/plan_instance.h"
#include "coordinator/planner/plan_schedule.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void run_all(const char *title, const plan_profile *p, const plan_cluster *c)
{
    printf("\n== %s: %d blocks, %d devices\n", title, p->n_blocks, c->n_devices);
    printf("%-15s %12s %12s %14s %10s %8s\n", "strategy", "search_s", "objective_s", "bottleneck_s",
           "iter_s", "stages");
    plan_request req = {.profile = p, .cluster = c, .schedule = PLAN_SCHED_1F1B};
    for (int s = 0; s < PLAN_STRAT_COUNT; s++) {
        plan_result r;
        sc_err err;
        sc_err_clear(&err);
        sc_status rc = plan_run(&req, (plan_strategy)s, &r, &err);
        if (rc != SC_OK) {
            printf("%-15s %12.6f  refused: %.160s\n", plan_strategy_name((plan_strategy)s),
                   r.search_time_s, err.msg);
        } else {
            printf("%-15s %12.6f %12.6g %14.6g %10.5g %8d%s%s%s\n",
                   plan_strategy_name((plan_strategy)s), r.search_time_s, r.objective_s,
                   r.bottleneck_s, r.iteration_time_s, r.part->n_stages,
                   r.part->order ? "  (own block order)" : "", r.note[0] ? "  note: " : "", r.note);
            if (s == PLAN_STRAT_UMPIPE)
                printf("%-15s best equal split %.6g, local greedy %.6g, uniform stagewise %.6g\n",
                       "", r.ga_best_equal_s, r.ga_greedy_s, r.ga_uniform_s);
        }
        plan_result_free(&r);
    }
}

static plan_profile *synthetic_chain(int L)
{
    plan_profile *p = NULL;
    sc_err err;
    if (plan_profile_new(&p, L, &err) != SC_OK)
        return NULL;
    for (int l = 0; l < L; l++) {
        double f = 0.0005 + 0.002 * urand() * urand();
        p->blocks[l].forward_s = f;
        p->blocks[l].backward_s = 2 * f;
        p->blocks[l].activation_bytes = 1e6 + 4e6 * urand();
        p->blocks[l].parameter_bytes = 1e6 + 1e7 * urand();
        p->blocks[l].stash_bytes = p->blocks[l].activation_bytes;
    }
    return p;
}

static plan_cluster *unequal_64(void)
{
    plan_cluster *c = NULL;
    sc_err err;
    int a100, v100, t4;
    plan_cluster_new_empty(&c, &err);
    plan_cluster_add_type(c, "A100", 1.0, 40e9, &a100, &err);
    plan_cluster_add_type(c, "V100", 0.6, 32e9, &v100, &err);
    plan_cluster_add_type(c, "T4", 0.25, 16e9, &t4, &err);
    for (int s = 0; s < 8; s++) {
        int types[8], t = s < 3 ? a100 : s < 6 ? v100 : t4;
        for (int i = 0; i < 8; i++)
            types[i] = t;
        char name[16];
        snprintf(name, sizeof name, "s%d", s);
        double intra = t == a100 ? 300e9 : t == v100 ? 100e9 : 16e9;
        plan_cluster_add_server(c, name, intra, s % 2 ? 10e9 : 12.5e9, types, 8, &err);
    }
    return c;
}

static int hetero_gap(int n, int m)
{
    double worst = 0, het_s = 0, het_max = 0, ex_s = 0;
    int over = 0, worst_seed = 0;
    for (int seed = 1; seed <= n; seed++) {
        plan_profile *p = NULL;
        plan_cluster *c = NULL;
        sc_err err;
        if (plan_instance_two_server((uint64_t)seed, &p, &c, &err) != SC_OK) {
            fprintf(stderr, "bench_planner: seed %d: %s\n", seed, err.msg);
            return 1;
        }
        plan_request req = {
            .profile = p, .cluster = c, .batch = m, .microbatches = m, .schedule = PLAN_SCHED_1F1B};
        plan_result he, ex;
        if (plan_run(&req, PLAN_STRAT_HETERO, &he, &err) != SC_OK ||
            plan_run(&req, PLAN_STRAT_EXHAUSTIVE, &ex, &err) != SC_OK) {
            fprintf(stderr, "bench_planner: seed %d: %s\n", seed, err.msg);
            return 1;
        }
        double ratio = he.iteration_time_s / ex.iteration_time_s;
        over += ratio > 1.01;
        if (ratio > worst) {
            worst = ratio;
            worst_seed = seed;
        }
        het_s += he.search_time_s;
        het_max = he.search_time_s > het_max ? he.search_time_s : het_max;
        ex_s += ex.search_time_s;
        plan_result_free(&he);
        plan_result_free(&ex);
        plan_cluster_destroy(&c);
        plan_profile_destroy(&p);
    }
    printf("hetero vs exhaustive, %d two-server instances, %d micro-batches of one sample, 1f1b\n",
           n, m);
    printf("worst iteration ratio %.4f (seed %d), over 1%%: %d\n", worst, worst_seed, over);
    printf("search time: hetero mean %.3g s, max %.3g s; exhaustive mean %.3g s\n", het_s / n,
           het_max, ex_s / n);
    return 0;
}

/* --zb1 PROFILE: the profile's minmax plan on 4 devices of `bw` B/s, at most 4 stages, 8
 * micro-batches, under 1f1b, zb1 capped at 1f1b's peak and zb1 by the devices' memory alone
 * (`mem` bytes each; 0: none): bubble, its ratio to 1f1b's, each stage's deferred W and peak
 * memory; and the floor no schedule goes below on those stages (1 - mean stage time / the
 * slowest's, the idle time of unequal stages). */
static int zb1_profile(const char *path, double bw, double mem)
{
    plan_profile *p = NULL;
    plan_cluster *c = NULL;
    sc_err err;
    if (plan_profile_load(&p, path, &err) != SC_OK ||
        plan_cluster_new_uniform(&c, 4, bw, mem, &err) != SC_OK) {
        fprintf(stderr, "bench_planner: %s\n", err.msg);
        plan_profile_destroy(&p);
        return 2;
    }
    printf("%s: minmax, 4 devices at %.3g B/s, memory %s, at most 4 stages, 8 micro-batches\n",
           p->model, bw, mem > 0 ? "limited" : "unlimited");
    printf("%-14s %7s %10s %8s %7s %14s  %s\n", "schedule", "stages", "iter_s", "bubble", "ratio",
           "floor_bubble", "deferred_w / peak MB per stage");
    double base = 0;
    for (int k = 0; k < 3; k++) {
        plan_request req = {.profile = p,
                            .cluster = c,
                            .microbatches = 8,
                            .max_stages = 4,
                            .schedule = k == 0 ? PLAN_SCHED_1F1B : PLAN_SCHED_ZB1,
                            .zb1_peak_cap = k == 1};
        plan_result r;
        if (plan_run(&req, PLAN_STRAT_MINMAX, &r, &err) != SC_OK) {
            printf("%-14s refused: %s\n",
                   k == 0   ? "1f1b"
                   : k == 1 ? "zb1 1f1b_peak"
                            : "zb1 device",
                   err.msg);
            plan_result_free(&r);
            continue;
        }
        double most = 0, sum = 0;
        int S = r.part->n_stages;
        for (int s = 0; s < S; s++) {
            most = r.compute_s[s] > most ? r.compute_s[s] : most;
            sum += r.compute_s[s];
        }
        base = k == 0 ? r.bubble_fraction : base;
        printf("%-14s %7d %10.5f %8.4f %7.3f %14.4f ",
               k == 0   ? "1f1b"
               : k == 1 ? "zb1 1f1b_peak"
                        : "zb1 device",
               S, r.iteration_time_s, r.bubble_fraction, base > 0 ? r.bubble_fraction / base : 0,
               most > 0 ? 1 - sum / (S * most) : 0);
        for (int s = 0; s < S; s++)
            printf(" %d/%.0f", r.w_defer != NULL ? r.w_defer[s] : 0, r.peak_memory_bytes[s] / 1e6);
        printf("\n");
        plan_result_free(&r);
    }
    plan_cluster_destroy(&c);
    plan_profile_destroy(&p);
    return 0;
}

static int zb1_bubble(void)
{
    printf("%3s %4s %6s %12s %12s %8s %12s %12s\n", "p", "m", "comm", "bubble_1f1b", "bubble_zb1",
           "ratio", "stash_1f1b", "stash_zb1");
    for (int p = 2; p <= 8; p *= 2)
        for (int m = p; m <= 8 * p; m *= 2)
            for (int ci = 0; ci < 2; ci++) {
                double bubble[2], stash[2];
                for (int k = 0; k < 2; k++) {
                    plan_schedule *s = NULL;
                    plan_sim_stage st[8];
                    plan_sim_result r;
                    sc_err err;
                    memset(st, 0, sizeof st);
                    for (int i = 0; i < p; i++) {
                        st[i].fwd_s = 1e-3;
                        st[i].bwd_s = 2e-3;
                        st[i].wgrad_s = 1e-3;
                        st[i].send_fwd_s = st[i].send_bwd_s = ci ? 1e-4 : 0;
                    }
                    if (plan_schedule_build(&s, k ? PLAN_SCHED_ZB1 : PLAN_SCHED_1F1B, p, m, 0,
                                            &err) != SC_OK ||
                        plan_sim_run(s, st, m, 1, 0, &r, &err) != SC_OK) {
                        fprintf(stderr, "bench_planner: %s\n", err.msg);
                        plan_schedule_destroy(&s);
                        return 1;
                    }
                    bubble[k] = r.bubble_fraction;
                    stash[k] = 0;
                    for (int i = 0; i < p; i++)
                        stash[k] = r.peak_inflight[i] > stash[k] ? r.peak_inflight[i] : stash[k];
                    plan_sim_result_free(&r);
                    plan_schedule_destroy(&s);
                }
                printf("%3d %4d %6s %12.4f %12.4f %8.3f %12.0f %12.0f\n", p, m, ci ? "f/10" : "0",
                       bubble[0], bubble[1], bubble[1] / bubble[0], stash[0], stash[1]);
            }
    /* replicated: stage 0 of two copies each twice as slow (forward 2f, backward 4f of which
     * half W), stage 1 of one (f, 2f); the copies' all-reduce and update after their last W,
     * 4f (stage 1's update f/2); no transfers */
    printf("\nreplicated (copies 2, 1; copy of stage 0 at half speed; all-reduce 4f after the "
           "last W)\n%4s %14s %14s %8s %16s %16s\n",
           "m", "iteration_1f1b", "iteration_zb1", "ratio", "stash_1f1b(0,1)", "stash_zb1(0,1)");
    for (int m = 4; m <= 32; m *= 2) {
        double it[2], stash[2][2];
        for (int k = 0; k < 2; k++) {
            const int reps[2] = {2, 1};
            plan_sim_stage st[2] = {{.fwd_s = 2e-3, .bwd_s = 4e-3, .wgrad_s = 2e-3, .opt_s = 4e-3},
                                    {.fwd_s = 1e-3, .bwd_s = 2e-3, .wgrad_s = 1e-3, .opt_s = 5e-4}};
            plan_schedule *s = NULL;
            plan_sim_result r;
            sc_err err;
            if (plan_schedule_build_replicated(&s, k ? PLAN_SCHED_ZB1 : PLAN_SCHED_1F1B, 2, m, 0,
                                               reps, &err) != SC_OK ||
                plan_sim_run(s, st, m, 1, 0, &r, &err) != SC_OK) {
                fprintf(stderr, "bench_planner: %s\n", err.msg);
                plan_schedule_destroy(&s);
                return 1;
            }
            it[k] = r.iteration_s;
            stash[k][0] = r.peak_inflight[0];
            stash[k][1] = r.peak_inflight[1];
            plan_sim_result_free(&r);
            plan_schedule_destroy(&s);
        }
        printf("%4d %14.1f %14.1f %8.3f %11.0f, %2.0f %11.0f, %2.0f\n", m, it[0] * 1e3, it[1] * 1e3,
               it[1] / it[0], stash[0][0], stash[0][1], stash[1][0], stash[1][1]);
    }
    return 0;
}

/* A random composition of the batch into 1 to K entries. */
static void random_row(int *r, int K, int B)
{
    int n = 1 + (int)(urand() * K), left = B, j = 0;
    if (n > B)
        n = B;
    for (; j < n - 1; j++) {
        int most = left - (n - 1 - j), v = 1 + (int)(urand() * 2.0 * left / (n - j));
        r[j] = v > most ? most : v;
        left -= r[j];
    }
    r[j++] = left;
    for (; j < K; j++)
        r[j] = 0;
}

enum { GA_POP_RANDOM, GA_POP_EQUAL, GA_POP_MIXED };

/* Throughput of both evaluators on one fixed population, stored once in a batch: the batched
 * pass evaluates it in place, the one-by-one loop calls plan_ga_eval_one on the same storage.
 * Best of 3 rounds of `reps` passes each (the machine may be shared). */
static void ga_fixed(const plan_ga_problem *p, int N, int kind)
{
    int S = p->n_stages, K = p->max_entries;
    size_t row = (size_t)S * K;
    plan_ga_batch *bt = NULL;
    sc_err err;
    if (plan_ga_batch_new(&bt, p, N, &err) != SC_OK) {
        fprintf(stderr, "bench_planner: %s\n", err.msg);
        return;
    }
    for (int n = 0; n < N; n++) {
        int *x = plan_ga_batch_individual(bt, n);
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < S; i++) {
                int *r = x + c * row + (size_t)i * K;
                if (kind == GA_POP_RANDOM)
                    random_row(r, K, p->batch);
                else
                    plan_ga_equal_split(p, kind == GA_POP_EQUAL ? K / 2 : 1 + (n + i) % K, r);
            }
    }
    double *t = calloc((size_t)N, sizeof(double)), sink = 0, best_vec = HUGE_VAL,
           best_one = HUGE_VAL;
    int reps = 100, same = 1;
    for (int round = 0; round < 3; round++) {
        double t0 = sc_clock_now_s();
        for (int r = 0; r < reps; r++) {
            plan_ga_eval_batch(p, bt, N, t);
            sink += t[r % N];
        }
        double vec = sc_clock_now_s() - t0;
        t0 = sc_clock_now_s();
        for (int r = 0; r < reps; r++)
            for (int n = 0; n < N; n++) {
                const int *x = plan_ga_batch_individual(bt, n);
                double one = plan_ga_eval_one(p, x, x + row);
                same &= one == t[n];
                sink += one;
            }
        double one = sc_clock_now_s() - t0;
        best_vec = vec < best_vec ? vec : best_vec;
        best_one = one < best_one ? one : best_one;
    }
    const char *what = kind == GA_POP_RANDOM  ? "random rows (1-32 entries, random sizes)"
                       : kind == GA_POP_EQUAL ? "equal splits, 16 entries on every stage"
                                              : "equal splits, 1 to 32 entries by stage";
    printf("%-42s %12.0f %12.0f %8.2fx  %s\n", what, reps * N / best_vec, reps * N / best_one,
           best_one / best_vec, same ? "identical" : "DIFFERENT");
    (void)sink;
    free(t);
    plan_ga_batch_destroy(&bt);
}

/* The genetic search's two evaluators, on the same individuals. */
static void ga_throughput(void)
{
    int S = 16, B = 256, K = 32, N = 256, W = B + 1, G = 200;
    double *f = calloc((size_t)S * W, sizeof(double)), *b = calloc((size_t)S * W, sizeof(double));
    double *cm = calloc((size_t)S * W, sizeof(double));
    int *cap = calloc((size_t)S, sizeof(int));
    for (int i = 0; i < S; i++) {
        double a = 0.001 * urand(), be = 0.0001 * (0.5 + urand());
        for (int x = 1; x <= B; x++) {
            f[i * W + x] = a + be * x;
            b[i * W + x] = 2 * (a + be * x);
            cm[i * W + x] = 0.00002 * x;
        }
        cap[i] = B;
    }
    plan_ga_problem p = {.n_stages = S,
                         .batch = B,
                         .max_entries = K,
                         .fwd_s = f,
                         .bwd_s = b,
                         .comm_s = cm,
                         .max_size = cap};
    /* the batched pass runs the fastest code path this CPU has: name it */
    plan_ga_batch *probe = NULL;
    sc_err err;
    const char *path = "?";
    if (plan_ga_batch_new(&probe, &p, 1, &err) == SC_OK)
        path = plan_ga_kernel_name(plan_ga_batch_kernel(probe));
    plan_ga_batch_destroy(&probe);
    printf("\n== UMPIPE evaluator: %d stages, batch %d, up to %d entries per row, population %d, "
           "batched pass: %s\n",
           S, B, K, N, path);
    printf("fixed populations (same stored individuals both ways; best of 3 rounds of 100 "
           "passes):\n");
    printf("%-42s %12s %12s %9s  %s\n", "population", "batched/s", "one-by-one/s", "ratio",
           "times");
    ga_fixed(&p, N, GA_POP_RANDOM);
    ga_fixed(&p, N, GA_POP_EQUAL);
    ga_fixed(&p, N, GA_POP_MIXED);
    /* the same search run twice with the same seed: identical populations, so the evaluation
     * time (plan_ga_result.eval_s, around each generation's evaluation only) compares the two
     * evaluators on exactly the same individuals */
    plan_ga_result r[2];
    double rate[2], wall[2];
    for (int k = 0; k < 2; k++) {
        plan_ga_cfg cfg = {.population = N, .generations = G, .seed = 7, .one_by_one = k};
        double t0 = sc_clock_now_s();
        if (plan_ga_run(&p, &cfg, &r[k], &err) != SC_OK) {
            fprintf(stderr, "bench_planner: %s\n", err.msg);
            return;
        }
        wall[k] = sc_clock_now_s() - t0;
        rate[k] = r[k].evaluated / r[k].eval_s;
    }
    printf("inside a real search (population %d, %d generations, seed 7, run once per "
           "evaluator):\n",
           N, G);
    printf("%-42s %12.0f %12.0f %8.2fx  %s\n", "individuals evaluated per second", rate[0], rate[1],
           rate[0] / rate[1],
           r[0].time_s == r[1].time_s && r[0].evaluated == r[1].evaluated ? "identical"
                                                                          : "DIFFERENT");
    printf("%-42s %12.3f %12.3f %8.2fx\n", "whole search, seconds", wall[0], wall[1],
           wall[1] / wall[0]);
    printf("best plan %.6g s (best equal split %.6g s)\n", r[0].time_s, r[0].best_equal_s);
    plan_ga_result_free(&r[0]);
    plan_ga_result_free(&r[1]);
    free(f), free(b), free(cm), free(cap);
}

/* A chain of L blocks (as synthetic_chain) on D unlike devices: one per server, speeds from 1
 * down to 0.3, NICs of 1.25e9 B/s. */
static void unlike_instance(int L, int D, plan_profile **p, plan_cluster **c)
{
    sc_err err;
    *p = synthetic_chain(L);
    plan_cluster_new_empty(c, &err);
    for (int d = 0; d < D; d++) {
        int t;
        char name[16];
        snprintf(name, sizeof name, "t%d", d);
        plan_cluster_add_type(*c, name, 1.0 - 0.7 * d / 8, 0, &t, &err);
        snprintf(name, sizeof name, "s%d", d);
        plan_cluster_add_server(*c, name, 5e10, 1.25e9, &t, 1, &err);
    }
}

static int exact_bench(int n)
{
    printf("hetero's search on unlike devices (one per server), 1f1b\n");
    printf("%7s %7s %5s %12s %10s\n", "blocks", "devices", "m", "search_s", "search");
    static const int chains[3] = {10, 16, 64};
    for (int li = 0; li < 3; li++)
        for (int D = 2; D <= 8; D++)
            for (int m = 4; m <= 16; m *= 4) {
                plan_profile *p = NULL;
                plan_cluster *c = NULL;
                int L = chains[li];
                unlike_instance(L, D, &p, &c);
                plan_request req = {.profile = p,
                                    .cluster = c,
                                    .batch = m,
                                    .microbatches = m,
                                    .schedule = PLAN_SCHED_1F1B};
                plan_result r;
                sc_err err;
                if (plan_run(&req, PLAN_STRAT_HETERO, &r, &err) != SC_OK) {
                    printf("%7d %7d %5d  refused: %s\n", L, D, m, err.msg);
                } else {
                    printf("%7d %7d %5d %12.4f %10s\n", L, D, m, r.search_time_s,
                           r.part->search == PLAN_SEARCH_EXACT ? "exact" : "heuristic");
                }
                plan_result_free(&r);
                plan_cluster_destroy(&c);
                plan_profile_destroy(&p);
            }
    double worst = 0, het[9] = {0}, het_max[9] = {0}, ex[9] = {0};
    int count[9] = {0}, exact = 0, compared = 0;
    for (int seed = 1; seed <= n; seed++) {
        static const int ms[4] = {4, 8, 16, 32};
        plan_profile *p = NULL;
        plan_cluster *c = NULL;
        sc_err err;
        if (plan_instance_uneven((uint64_t)seed, &p, &c, &err) != SC_OK) {
            fprintf(stderr, "bench_planner: seed %d: %s\n", seed, err.msg);
            return 1;
        }
        int m = ms[seed % 4], D = c->n_devices;
        plan_request req = {
            .profile = p, .cluster = c, .batch = m, .microbatches = m, .schedule = PLAN_SCHED_1F1B};
        plan_result he, x;
        int okh = plan_run(&req, PLAN_STRAT_HETERO, &he, &err) == SC_OK;
        int okx = plan_run(&req, PLAN_STRAT_EXHAUSTIVE, &x, &err) == SC_OK;
        count[D]++;
        het[D] += he.search_time_s;
        het_max[D] = he.search_time_s > het_max[D] ? he.search_time_s : het_max[D];
        ex[D] += x.search_time_s;
        exact += okh && he.part->search == PLAN_SEARCH_EXACT;
        if (okh && okx) {
            double ratio = he.iteration_time_s / x.iteration_time_s;
            worst = ratio > worst ? ratio : worst;
            compared++;
        }
        plan_result_free(&he);
        plan_result_free(&x);
        plan_cluster_destroy(&c);
        plan_profile_destroy(&p);
    }
    printf("\nuneven instances 1..%d (2-3 servers, 4-10 blocks, 4-32 micro-batches, 1f1b)\n", n);
    printf("%7s %9s %14s %13s %15s\n", "devices", "instances", "hetero_mean_s", "hetero_max_s",
           "exhaustive_s");
    for (int D = 2; D <= 8; D++)
        if (count[D] > 0)
            printf("%7d %9d %14.4f %13.4f %15.4f\n", D, count[D], het[D] / count[D], het_max[D],
                   ex[D] / count[D]);
    printf("worst hetero / exhaustive iteration %.4f over %d instances both fit; hetero exact on "
           "%d\n",
           worst, compared, exact);
    return 0;
}

int main(int argc, char **argv)
{
    sc_err err;
    if (argc == 2 && strcmp(argv[1], "--ga") == 0) {
        ga_throughput();
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--zb1") == 0)
        return zb1_bubble();
    if (argc >= 3 && argc <= 5 && strcmp(argv[1], "--zb1") == 0)
        return zb1_profile(argv[2], argc >= 4 ? atof(argv[3]) : 1e11,
                           argc == 5 ? atof(argv[4]) : 0);
    if (argc == 3 && strcmp(argv[1], "--exact") == 0) {
        int n = atoi(argv[2]);
        if (n < 1) {
            fprintf(stderr, "bench_planner: --exact N: N seeds >= 1\n");
            return 2;
        }
        return exact_bench(n);
    }
    if (argc >= 3 && argc <= 4 && strcmp(argv[1], "--hetero") == 0) {
        int n = atoi(argv[2]), m = argc == 4 ? atoi(argv[3]) : 256;
        if (n < 1 || m < 1 || m > PLAN_MAX_BATCH) {
            fprintf(stderr,
                    "bench_planner: --hetero N [M]: N seeds >= 1, M micro-batches in 1..%d\n",
                    PLAN_MAX_BATCH);
            return 2;
        }
        return hetero_gap(n, m);
    }
    for (int i = 1; i < argc; i++) {
        plan_profile *p = NULL;
        sc_err_clear(&err);
        if (plan_profile_load(&p, argv[i], &err) != SC_OK) {
            fprintf(stderr, "bench_planner: %s\n", err.msg);
            return 2;
        }
        for (int g = 4; g <= 16; g *= 4) {
            plan_cluster *c = NULL;
            plan_cluster_new_uniform(&c, g, 12.5e9, 0, &err);
            char title[512];
            snprintf(title, sizeof title, "%s on %d GPUs at 12.5 GB/s", p->model, g);
            run_all(title, p, c);
            plan_cluster_destroy(&c);
        }
        plan_profile_destroy(&p);
    }
    plan_profile *chain = synthetic_chain(1500);
    plan_cluster *c16 = NULL;
    plan_cluster_new_uniform(&c16, 16, 12.5e9, 0, &err);
    run_all("synthetic chain on 16 GPUs", chain, c16);
    plan_cluster_destroy(&c16);
    plan_cluster *c64 = unequal_64();
    run_all("synthetic chain on 64 unequal GPUs in 8 servers (3xA100, 3xV100, 2xT4 servers)", chain,
            c64);
    plan_cluster_destroy(&c64);
    plan_profile_destroy(&chain);
    ga_throughput();
    return 0;
}
