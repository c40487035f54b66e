/*
 * bench_stages: training throughput of one process running the whole model vs the same model
 * split into stages on that same device, one runner thread per stage (the runtime's own
 * pipeline: schedule, in-host transport, activation slots), for a GPT.
 *
 * Both runs train the same model from the same seed on the same synthetic batches: "whole" is
 * one stage over every block with gradient accumulation over the m micro-batches (n_stages 1,
 * no transport), "staged" cuts the blocks into S stages of equal block counts and runs the
 * chosen schedule over the local transport. Figures: the median iteration time over the timed
 * iterations after the warm-up ones, samples and tokens per second, staged / whole throughput,
 * and both runs' last loss (they should agree to float rounding: the same math, grouped by stage).
 * On a GPU every stage shares it (each runner has its own CUDA stream), so the ratio is the
 * price of pipelining on one device: the goal is >= 90%. On a CPU the stages run on separate
 * cores, so the ratio can exceed 1 and says nothing about that goal; it checks the code path.
 * Nothing is asserted: it prints.
 *
 * Usage: bench_stages [--device cpu|cuda:N] [--stages S] [--schedule 1f1b|gpipe]
 *                     [--microbatches M] [--micro SAMPLES] [--layers L] [--width C]
 *                     [--heads H] [--seq T] [--vocab V] [--iters N] [--warmup N]
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_pipeline.h"
#include "common/sc_util.h"
#include "kernels/device.h"
#include "kernels/model.h"

typedef struct {
    const char *device, *schedule;
    int stages, m, micro, layers, width, heads, seq, vocab, iters, warmup;
} opts;

static sc_status parse_args(int argc, char **argv, opts *o, sc_err *err)
{
    for (int i = 1; i < argc; i += 2) {
        int64_t v = 0;
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (val == NULL)
            return SC_ERRF(err, SC_ERR_INVALID, "'%s': unknown, or missing its value", a);
        if (strcmp(a, "--device") == 0) {
            kn_device d;
            SC_CHECK(kn_device_parse(val, "--device", &d, err));
            o->device = val;
            continue;
        }
        if (strcmp(a, "--schedule") == 0) {
            if (strcmp(val, "1f1b") != 0 && strcmp(val, "gpipe") != 0)
                return SC_ERRF(err, SC_ERR_INVALID, "--schedule '%s': expected 1f1b or gpipe", val);
            o->schedule = val;
            continue;
        }
        static const struct {
            const char *flag;
            int64_t lo, hi;
            size_t off;
        } ints[] = {
            {"--stages", 1, BENCH_PIPE_MAX_STAGES, offsetof(opts, stages)},
            {"--microbatches", 1, 1024, offsetof(opts, m)},
            {"--micro", 1, 4096, offsetof(opts, micro)},
            {"--layers", 1, 96, offsetof(opts, layers)},
            {"--width", 8, 8192, offsetof(opts, width)},
            {"--heads", 1, 128, offsetof(opts, heads)},
            {"--seq", 1, 8192, offsetof(opts, seq)},
            {"--vocab", 2, 1 << 20, offsetof(opts, vocab)},
            {"--iters", 1, BENCH_PIPE_MAX_ITERS, offsetof(opts, iters)},
            {"--warmup", 0, 100, offsetof(opts, warmup)},
        };
        size_t k = 0;
        while (k < sizeof ints / sizeof ints[0] && strcmp(a, ints[k].flag) != 0)
            k++;
        if (k == sizeof ints / sizeof ints[0])
            return SC_ERRF(err, SC_ERR_INVALID, "unknown argument '%s'", a);
        SC_CHECK(sc_parse_int64(val, ints[k].lo, ints[k].hi, ints[k].flag, &v, err));
        *(int *)((char *)o + ints[k].off) = (int)v;
    }
    return SC_OK;
}

static void print_run(const char *what, const opts *o, int stages, const bench_pipe_result *r)
{
    double samples = (double)o->m * o->micro;
    printf("  %-7s %d stage%s  iteration %9.4f s  %10.1f samples/s  %12.0f tokens/s  loss %.6f\n",
           what, stages, stages == 1 ? " " : "s", r->iter_s, samples / r->iter_s,
           samples * o->seq / r->iter_s, r->loss);
}

int main(int argc, char **argv)
{
    static const char usage[] =
        "usage: bench_stages [--device cpu|cuda:N] [--stages S] [--schedule 1f1b|gpipe]\n"
        "                    [--microbatches M] [--micro SAMPLES] [--layers L] [--width C]\n"
        "                    [--heads H] [--seq T] [--vocab V] [--iters N] [--warmup N]\n"
        "defaults: cuda:0 when a CUDA device is visible (GPT 12 layers, width 768, 12 heads,\n"
        "sequence 256, vocab 50304, 8 micro-batches of 8), else cpu (GPT 4 layers, width 128,\n"
        "4 heads, sequence 64, vocab 256, 8 micro-batches of 2); 4 stages, 1f1b, 5 timed\n"
        "iterations after 2 warm-up\n";
    int gpus = kn_cuda_device_count();
    opts o = {.device = gpus > 0 ? "cuda:0" : "cpu",
              .schedule = "1f1b",
              .stages = 4,
              .m = 8,
              .iters = 5,
              .warmup = 2};
    sc_err err;
    sc_err_clear(&err);
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (parse_args(argc, argv, &o, &err) != SC_OK) {
        fprintf(stderr, "bench_stages: %s\n%s", err.msg, usage);
        return 2;
    }
    bool gpu = strncmp(o.device, "cuda", 4) == 0;
    /* model defaults by device, each kept where given on the command line */
    if (o.layers == 0)
        o.layers = gpu ? 12 : 4;
    if (o.width == 0)
        o.width = gpu ? 768 : 128;
    if (o.heads == 0)
        o.heads = gpu ? 12 : 4;
    if (o.seq == 0)
        o.seq = gpu ? 256 : 64;
    if (o.vocab == 0)
        o.vocab = gpu ? 50304 : 256;
    if (o.micro == 0)
        o.micro = gpu ? 8 : 2;
    char json[512];
    snprintf(json, sizeof json,
             "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"gpt\", "
             "\"vocab\": %d, \"seq_len\": %d, \"layers\": %d, \"width\": %d, \"heads\": %d}",
             o.vocab, o.seq, o.layers, o.width, o.heads);
    kn_model *model = NULL;
    if (kn_model_parse(&model, "bench model", json, strlen(json), &err) != SC_OK) {
        fprintf(stderr, "bench_stages: %s\n", err.msg);
        return 2;
    }
    int nb = kn_model_block_count(model);
    kn_model_destroy(&model);
    if (o.stages > nb) {
        fprintf(stderr, "bench_stages: --stages %d, but the model has %d blocks\n", o.stages, nb);
        return 2;
    }
    int first[BENCH_PIPE_MAX_STAGES], last[BENCH_PIPE_MAX_STAGES];
    for (int s = 0; s < o.stages; s++) {
        first[s] = s * nb / o.stages;
        last[s] = (s + 1) * nb / o.stages - 1;
    }
    printf("bench_stages: GPT %d layers, width %d, %d heads, sequence %d, vocab %d (%d blocks) "
           "on %s; batch %d = %d micro-batches of %d; %d timed iterations after %d warm-up, "
           "median; %ld cores\n",
           o.layers, o.width, o.heads, o.seq, o.vocab, nb, o.device, o.m * o.micro, o.m, o.micro,
           o.iters, o.warmup, sysconf(_SC_NPROCESSORS_ONLN));
    int whole_first = 0, whole_last = nb - 1;
    bench_pipe_spec whole = {.model_json = json,
                             .n_stages = 1,
                             .first = &whole_first,
                             .last = &whole_last,
                             .schedule = "gpipe",
                             .batch = o.m * o.micro,
                             .microbatches = o.m,
                             .device = o.device,
                             .transport = "local",
                             .warmup = o.warmup,
                             .iters = o.iters};
    bench_pipe_spec staged = whole;
    staged.n_stages = o.stages;
    staged.first = first;
    staged.last = last;
    staged.schedule = o.schedule;
    bench_pipe_result rw, rs;
    if (bench_pipe_run(&whole, &rw, &err) != SC_OK) {
        fprintf(stderr, "bench_stages: whole model: %s\n", err.msg);
        return 1;
    }
    print_run("whole", &o, 1, &rw);
    if (bench_pipe_run(&staged, &rs, &err) != SC_OK) {
        fprintf(stderr, "bench_stages: %d stages: %s\n", o.stages, err.msg);
        return 1;
    }
    print_run(o.schedule, &o, o.stages, &rs);
    printf("  stages:");
    for (int s = 0; s < o.stages; s++)
        printf(" [%d-%d]", first[s], last[s]);
    printf("\n  staged / whole throughput: %.1f%%%s; loss difference %.2e\n",
           100.0 * rw.iter_s / rs.iter_s,
           gpu ? " (goal on one GPU: >= 90%)"
               : " (CPU: the stages run on separate cores, so this is no GPU figure)",
           fabs(rs.loss - rw.loss));
    return 0;
}
