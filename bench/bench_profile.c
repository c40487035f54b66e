/*
 * bench_profile: how well the profiler's per-block times add up to a stage's real compute on
 * this host's CPU. Per model, over N rounds, interleaved so that the host's drift hits all three
 * alike, it times the forward and backward of one micro-batch:
 *   alone:  each block in its own one-block stage, run twice in a row, the second timed (a block
 *           timed alone and repeated, the profiler's conditions before its chains);
 *   chain:  the profiler itself as a worker runs it (kn_profile_run: one warm-up pass, three
 *           timed, the median), which runs the blocks one after the other as a stage runs
 *           them: the sum of its block times;
 *   stage:  one stage over all the blocks (what the runtime runs).
 * and prints the medians over the rounds and the median of each round's ratio stage / alone and
 * stage / chain: 1.00 means the profile adds up to the stage exactly.
 *
 * usage: bench_profile [--rounds N]   (default 200)
 * Prints figures; asserts nothing. Build in Release for meaningful numbers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "kernels/model.h"
#include "kernels/profile.h"
#include "kernels/stage.h"

#define MAX_BLOCKS 32

typedef struct {
    const char *label;
    const char *json;
    int micro; /* samples per micro-batch */
} model_case;

static const model_case models[] = {
    {"gpt-L4-C64-T32",
     "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", \"vocab\": 256, "
     "\"seq_len\": 32, \"layers\": 4, \"width\": 64, \"heads\": 4}",
     4},
    {"mlp-256-512x4-10",
     "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"mlp\", "
     "\"sizes\": [256, 512, 512, 512, 512, 10]}",
     16},
};

static void die(const char *what, const sc_err *err)
{
    fprintf(stderr, "bench_profile: %s: %s\n", what, err->msg);
    exit(1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes + 4);
    if (p == NULL) {
        fprintf(stderr, "bench_profile: out of memory\n");
        exit(1);
    }
    return p;
}

static void *filled(size_t n, int tokens, int vocab)
{
    float *p = xmalloc(n * sizeof(float));
    uint64_t s = 7;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        if (tokens)
            ((int32_t *)p)[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
        else
            p[i] = (float)((s >> 40) / 16777216.0 - 0.5);
    }
    return p;
}

static void run_model(const model_case *mc, int rounds)
{
    sc_err err;
    sc_err_clear(&err);
    kn_model *m = NULL;
    if (kn_model_parse(&m, mc->label, mc->json, strlen(mc->json), &err) != SC_OK)
        die(mc->label, &err);
    int nb = kn_model_block_count(m), M = mc->micro;
    if (nb > MAX_BLOCKS) {
        fprintf(stderr, "bench_profile: %d blocks, at most %d\n", nb, MAX_BLOCKS);
        exit(1);
    }
    kn_device cpu = {.kind = KN_DEV_CPU};
    kn_stage *one[MAX_BLOCKS], *whole = NULL;
    for (int i = 0; i < nb; i++) {
        kn_stage_cfg c = kn_stage_cfg_default(i, i, cpu, M);
        if (kn_stage_new_cfg(&one[i], m, &c, &err) != SC_OK)
            die("a one-block stage", &err);
    }
    kn_stage_cfg wc = kn_stage_cfg_default(0, nb - 1, cpu, M);
    if (kn_stage_new_cfg(&whole, m, &wc, &err) != SC_OK)
        die("the whole stage", &err);
    const kn_block *b0 = kn_model_block(m, 0), *bl = kn_model_block(m, nb - 1);
    void *input = filled(b0->in_floats * (size_t)M, b0->in_tokens, b0->V);
    int32_t *targets = filled((size_t)kn_model_targets_per_sample(m) * M, 1, kn_model_classes(m));
    float *dout_last = filled(bl->out_floats * (size_t)M, 0, 0);
    /* each block's own input and output gradient for the "alone" runs: those of one chained
     * pass, so all three see the same data */
    void *ins[MAX_BLOCKS];
    float *douts[MAX_BLOCKS];
    const void *in = input;
    for (int i = 0; i < nb; i++) {
        size_t n = kn_model_block(m, i)->in_floats * (size_t)M;
        ins[i] = xmalloc(n * sizeof(float));
        memcpy(ins[i], in, n * sizeof(float));
        if (kn_stage_forward(one[i], 0, in, targets, M, &err) != SC_OK)
            die("a forward", &err);
        in = kn_stage_output(one[i], 0);
    }
    for (int i = nb - 1; i >= 0; i--) {
        size_t n = kn_model_block(m, i)->out_floats * (size_t)M;
        douts[i] = xmalloc(n * sizeof(float));
        memcpy(douts[i], i == nb - 1 ? dout_last : kn_stage_grad_input(one[i + 1]),
               n * sizeof(float));
        if (kn_stage_backward(one[i], 0, douts[i], &err) != SC_OK)
            die("a backward", &err);
    }
    kn_profile_cfg pc = {.device = cpu, .sizes = {M}, .nsizes = 1, .warmup = 1, .repeats = 3};
    kn_profile_block *prof = xmalloc((size_t)nb * sizeof *prof);
    size_t nr = (size_t)rounds * sizeof(double);
    double *alone = xmalloc(nr), *chain = xmalloc(nr), *stage = xmalloc(nr), *ra = xmalloc(nr);
    double *rc = xmalloc(nr);
    for (int r = 0; r < rounds; r++) {
        double a = 0, c = 0;
        for (int i = 0; i < nb; i++) {
            for (int rep = 0; rep < 2; rep++) {
                double t0 = sc_clock_now_s();
                kn_stage_forward(one[i], 0, ins[i], targets, M, &err);
                kn_stage_backward(one[i], 0, douts[i], &err);
                if (rep == 1)
                    a += sc_clock_now_s() - t0;
            }
            kn_stage_zero_grads(one[i], &err);
        }
        /* the profiler itself: one warm-up pass, three timed, the median, as a worker profiles */
        if (kn_profile_run(m, &pc, prof, &err) != SC_OK)
            die("the profiler", &err);
        for (int i = 0; i < nb; i++)
            c += prof[i].points[0].forward_s + prof[i].points[0].backward_s;
        double t0 = sc_clock_now_s();
        kn_stage_forward(whole, 0, input, targets, M, &err);
        kn_stage_backward(whole, 0, NULL, &err);
        double w = sc_clock_now_s() - t0;
        kn_stage_zero_grads(whole, &err);
        alone[r] = a;
        chain[r] = c;
        stage[r] = w;
        ra[r] = w / a;
        rc[r] = w / c;
    }
    printf("%-18s %5d %11.3f %11.3f %11.3f %13.3f %13.3f\n", mc->label, M,
           median(alone, rounds) * 1e3, median(chain, rounds) * 1e3, median(stage, rounds) * 1e3,
           median(ra, rounds), median(rc, rounds));
    for (int i = 0; i < nb; i++) {
        kn_stage_destroy(&one[i]);
        free(ins[i]);
        free(douts[i]);
    }
    kn_stage_destroy(&whole);
    kn_model_destroy(&m);
    free(input);
    free(targets);
    free(dout_last);
    free(prof);
    free(alone);
    free(chain);
    free(stage);
    free(ra);
    free(rc);
}

int main(int argc, char **argv)
{
    int rounds = 200;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            rounds = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_profile [--rounds N] (N >= 1, default 200)\n");
            return 2;
        }
    }
    printf("bench_profile: forward + backward of one micro-batch on the CPU, %d interleaved "
           "rounds, medians (ms)\n",
           rounds);
    printf("%-18s %5s %11s %11s %11s %13s %13s\n", "model", "micro", "alone", "chain", "stage",
           "stage/alone", "stage/chain");
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++)
        run_model(&models[k], rounds);
    printf("alone: each block timed alone, run twice in a row; chain: the blocks one after the "
           "other as a stage runs them (the profiler's way); stage: one stage over all the "
           "blocks. Ratios: median over the rounds of each round's ratio.\n");
    return 0;
}
