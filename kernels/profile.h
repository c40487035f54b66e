/*
 * kn profile: measures each block of a model on one device — forward and backward time per
 * micro-batch size (warm-up, then the median of repeats; CUDA events on a GPU), output
 * activation, parameter and stash bytes — and writes the stagecraft-profile JSON (FORMATS.md)
 * that the planner reads.
 *
 * Each block runs in a one-block stage, so a block's time excludes any transfer between stages,
 * but in the company a pipeline stage gives it: consecutive blocks (a chain, up to 2 GiB of
 * parameters, optimizer state and activations at once, the whole model when it fits) run as a
 * stage runs them, the forwards in order, each on its predecessor's output (the first on random
 * inputs), then the backwards in reverse, each on its successor's input gradient, every block
 * timed on its own; a repeat is one such pass. A block timed alone and repeated keeps its
 * weights and activations in the caches that the other blocks of a stage evict: on a CPU a
 * stage ran 6-33% longer than the sum of its blocks timed so (4-17% with this profile), which
 * made every prediction of the planner too short (bench/bench_profile).
 * Does not measure links; topology does. Times are wall-clock
 * measurements and vary run to run; nothing here asserts on them.
 */
#ifndef KN_PROFILE_H
#define KN_PROFILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common/sc_status.h"
#include "kernels/device.h"
#include "kernels/model.h"

#define KN_PROFILE_SIZES_MAX 32

typedef struct {
    kn_device device;
    int sizes[KN_PROFILE_SIZES_MAX]; /* micro-batch sizes to measure, ascending not required */
    int nsizes;
    int warmup;             /* untimed iterations per size (>= 0) */
    int repeats;            /* timed iterations per size (>= 1) */
    kn_precision precision; /* precision.h; never AUTO */
    /* > 0: sustained speed. Each size (and the optimizer step) runs timed passes until at
     * least `repeats` of them have taken min_time_s together (at most max_passes, or
     * KN_PROFILE_PASSES_MAX when max_passes is 0),
     * and a block's time is the mean over them: a device whose CPU quota, clock or power cap
     * throttles it only after a burst shows its long-run time, which the median of short
     * passes hides. 0: the median of `repeats` passes. */
    double min_time_s;
    int max_passes;
    /* Optional (NULL: never): when it reads non-zero the profile stops at its next check, before
     * each block of a pass and each pass, between the stages it builds and between chains, and
     * kn_profile_run returns SC_ERR_CANCELLED (a worker's job ended, or the worker stops). */
    const atomic_int *cancel;
} kn_profile_cfg;

#define KN_PROFILE_PASSES_MAX 100000

typedef struct {
    int size;
    double forward_s, backward_s; /* medians, or means when sustained (min_time_s > 0) */
    double wgrad_s; /* the part of backward_s that is the weight gradient (zb1's W): each
                       backward runs as B then W, timed apart (block.h) */
} kn_profile_point;

typedef struct {
    char name[KN_NAME_MAX];
    size_t parameter_bytes;
    size_t activation_bytes_per_sample; /* the block's output as it crosses a cut (16-bit: 2 B) */
    size_t stash_bytes_per_sample;      /* its input and internal activations, kept for backward */
    size_t wstash_bytes_per_sample;     /* what its split backward keeps from B for W (zb1) */
    bool on_gpu;                        /* measured on a GPU, in `precision`: what its */
    kn_precision precision;             /* scratch is sized by (kn_block_scratch_bytes) */
    int npoints;
    kn_profile_point points[KN_PROFILE_SIZES_MAX];
    double optimizer_s; /* median optimizer step over the block's parameters as the stage
                           runtime takes it (gradients out, update, parameters back in), once
                           per iteration whatever the micro-batch size */
} kn_profile_block;

/* Measures every block of `m`; `out` has kn_model_block_count(m) entries. */
sc_status kn_profile_run(const kn_model *m, const kn_profile_cfg *cfg, kn_profile_block *out,
                         sc_err *err);

/* Builds the stagecraft-profile document (a jansson object; caller json_decref()s it). The
 * top-level times are those of `microbatch_size`, which must be one of the measured sizes. */
sc_status kn_profile_to_json(const kn_model *m, const char *reference_device, int microbatch_size,
                             const kn_profile_block *blocks, int nblocks, void **json_out,
                             sc_err *err);

#endif /* KN_PROFILE_H */
