/*
 * plan_profile: the model profile the planner cuts, a chain of blocks in execution order.
 *
 * Reads our JSON profile ("stagecraft-profile", docs/reference/formats.md) and PipeDream's graph.txt
 * (a DAG, linearised here in topological order). Does not measure anything and knows nothing
 * about devices: times are for the profile's reference device; plan_cluster scales them.
 *
 * Invariant: after loading, blocks[] is a chain; blocks[l].activation_bytes is what crosses a
 * cut placed right after block l (for a linearised DAG: every earlier output still needed by a
 * later block), and all times and sizes are finite and >= 0. A graph.txt profile also keeps its
 * DAG (pred_start / pred) over the same block positions; every predecessor of block l sits at a
 * position < l. plan_profile_reorder gives the same model in another topological order.
 */
#ifndef PLAN_PROFILE_H
#define PLAN_PROFILE_H

#include <stddef.h>

#include "common/sc_status.h"

#define PLAN_NAME_MAX 96

/* One measured point of a block's time at a micro-batch size. */
typedef struct plan_size_time {
    int size;
    double forward_s;
    double backward_s;
} plan_size_time;

typedef struct plan_block {
    char name[PLAN_NAME_MAX];
    double forward_s; /* one micro-batch of microbatch_size samples */
    double backward_s;
    double activation_bytes; /* bytes crossing a cut after this block, per micro-batch */
    double parameter_bytes;
    double stash_bytes; /* kept from forward to backward, per micro-batch */
    double wstash_bytes;  /* kept from B for W by a split backward (zb1), per micro-batch */
    double scratch_bytes; /* what a stage holding it allocates besides parameters and slots
                           * (workspace, gradient buffers, 16-bit operand copies), per
                           * micro-batch; a stage needs its blocks' largest; 0 when unknown */
    double optimizer_s; /* optimizer step over its parameters, once per iteration (0 when the
                           profile does not say) */
    double wgrad_share; /* the measured share of backward_s that is the weight gradient (zb1's
                           W): the profile's wgrad_s / backward_s; -1 when it does not say */
    /* graph.txt: the node's own output (its activation_size; 0 for the zeroed Input nodes),
     * from which the cut sizes of any order follow; 0 for JSON profiles */
    double output_bytes;
    int n_sizes; /* measured points, sorted by size; 0 = scale linearly */
    plan_size_time *sizes;
} plan_block;

typedef enum { PLAN_PROFILE_JSON = 0, PLAN_PROFILE_PIPEDREAM = 1 } plan_profile_kind;

typedef struct plan_profile {
    char model[PLAN_NAME_MAX];
    char reference_device[PLAN_NAME_MAX];
    plan_profile_kind kind;
    /* Samples the times refer to. 0 for graph.txt files, whose times describe one whole
     * minibatch of unknown size: then the plan's global batch is taken as that size. */
    int microbatch_size;
    int n_blocks;
    plan_block *blocks;
    /* The DAG of a graph.txt profile, NULL for JSON profiles (chains): the direct predecessors
     * of block l are pred[pred_start[l] .. pred_start[l + 1] - 1], block positions, sorted,
     * without duplicates. Edges leaving the zeroed Input sources are left out, as PipeDream's
     * optimizer removes those nodes; they are blocks 0 .. n_input_blocks - 1. */
    int *pred_start; /* (n_blocks + 1) */
    int *pred;
    int n_input_blocks;
    int dag_source; /* the first source in file order once the Input nodes are gone, where
                       PipeDream starts its antichain enumeration (-1 without a DAG) */
} plan_profile;

/* Largest profile file accepted (bytes). */
#define PLAN_PROFILE_MAX_BYTES (64u << 20)

/* Loads a profile file, JSON when its first non-blank character is '{', else graph.txt.
 * Errors name the file, the line (and the JSON path) and what would be valid:
 * SC_ERR_IO for an unreadable file, SC_ERR_PARSE / SC_ERR_INVALID / SC_ERR_VERSION for bad
 * content. *out is owned by the caller (plan_profile_destroy). */
sc_status plan_profile_load(plan_profile **out, const char *path, sc_err *err);

/* The same from text in memory; `source` names it in errors. */
sc_status plan_profile_parse_json(plan_profile **out, const char *source, const char *text,
                                  size_t len, sc_err *err);
sc_status plan_profile_parse_graph(plan_profile **out, const char *source, const char *text,
                                   sc_err *err);

/* An empty profile of n_blocks zeroed blocks ("b0", "b1", ...) for synthetic instances
 * (tests, benchmarks); microbatch_size is 1. */
sc_status plan_profile_new(plan_profile **out, int n_blocks, sc_err *err);

void plan_profile_destroy(plan_profile **p);

/* A copy of DAG profile p (a graph.txt profile: pred_start != NULL) with its blocks in another
 * topological order: position i of the copy holds p's block order[i]. The Input blocks must keep
 * their positions 0 .. n_input_blocks - 1 and every block must follow its predecessors;
 * activation_bytes are recomputed for the new order (the outputs crossing each cut, as for the
 * profile's own order) and the DAG is renumbered. SC_ERR_INVALID naming the profile when `order`
 * is not such an order. *out is owned by the caller (plan_profile_destroy). */
sc_status plan_profile_reorder(plan_profile **out, const plan_profile *p, const int *order,
                               sc_err *err);

/* Forward and backward time of block l on the reference device for a micro-batch of
 * `samples` samples, when the plan's global batch is `batch` (used only when the profile's
 * microbatch_size is 0). Interpolates between measured sizes, else scales linearly. */
void plan_profile_block_time(const plan_profile *p, int l, double samples, int batch,
                             double *forward_s, double *backward_s);

/* Whether every block's weight-gradient share was measured (wgrad_share >= 0). */
int plan_profile_wgrad_measured(const plan_profile *p);

/* Factor applied to per-micro-batch byte counts (activation, stash) for `samples`. */
double plan_profile_size_factor(const plan_profile *p, double samples, int batch);

#endif /* PLAN_PROFILE_H */
