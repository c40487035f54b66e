/*
 * The job spec (`"format": "stagecraft-job"`, FORMATS.md): what a user submits.
 *
 * Parsing validates every field and names the JSON path and what would be valid on error.
 * The model object is validated by the kernels' model builder (so a bad width or head count is
 * refused at submit) and kept as a stand-alone stagecraft-model document for the workers.
 */
#ifndef COORD_JOBSPEC_H
#define COORD_JOBSPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

#define COORD_JOBSPEC_MAX_BYTES (1u << 20)
#define COORD_JOBSPEC_MAX_WORKERS 1024

typedef enum {
    COORD_DATA_TEXT,
    COORD_DATA_TOKENS,
    COORD_DATA_CIFAR10,
    COORD_DATA_SYNTHETIC,
} coord_data_kind;

typedef struct {
    char name[128];
    char *model_json;    /* owned: the model as a stagecraft-model document */
    char model_kind[16]; /* "gpt", "vgg", "mlp", "hf" */
    bool tied; /* the model ties its embedding and head (kn_model_tie): zmq, not pipedream */
    uint64_t param_count;      /* the model's parameters, and those of its largest block (the */
    uint64_t max_block_params; /* planner's unit: one worker holds it whole) */
    coord_data_kind data_kind;
    char data_path[1024]; /* "" for synthetic */
    uint32_t batch_size;
    uint32_t microbatches; /* 0 = auto */
    char schedule[16];     /* gpipe, 1f1b, pipedream, sliced, unequal, zb1, auto */
    char strategy[16];     /* planner strategy; default "hetero" */
    uint32_t workers;      /* how many workers; when names are given, their count; the most
                            * an elastic job takes */
    uint32_t workers_min;  /* an elastic job ("workers": {"min", "max"}): the fewest it runs
                            * on; 0 for a job of a fixed count */
    char **worker_names;   /* owned; NULL when a count was given */
    uint64_t steps;
    uint64_t seed;
    char optimizer[16]; /* "adamw" or "sgd" */
    char precision[8];  /* "auto" (default), "bf16", "fp16", "tf32" or "fp32"
                         * (kernels/precision.h); the plan carries it resolved */
    bool zb1_peak_cap;  /* "zb1_memory": "1f1b_peak": zb1's deferred W also capped so no
                         * stage holds more than 1f1b's fullest; false ("device", default):
                         * by each device's memory alone. The plan's stages carry the caps
                         * ("deferred_w") to the workers */
    double lr;
    double weight_decay;
    double momentum;
    uint64_t checkpoint_every;    /* 0 = never */
    uint64_t checkpoint_keep;     /* complete checkpoints each worker keeps (default 2; 0 = all) */
    uint32_t checkpoint_replicas; /* other workers that hold a copy of each stage's checkpoints
                                   * (default 1; 0 = only the writer's own disk) */
    uint32_t max_stages;          /* "stages": at most this many pipeline stages; 0 = any */
    char transport[8];            /* data plane: "auto" (default: nccl where every stage boundary
                                   * can take it, else zmq), "zmq" or "nccl" */
    bool rebalance_auto;          /* "rebalance": "auto" (default: re-plan and move blocks when
                                   * measured speeds change enough) or "off" (only when asked) */
    uint64_t freeze_interval;     /* "freeze": steps between two looks of the freezing policy
                                   * (coordinator/freezing.h); 0: the job freezes nothing */
    double freeze_percentile;     /* the percentile of the blocks' gradient change that sets tau */
    double freeze_max_change;     /* and tau's cap: the most change a converged block shows */
} coord_jobspec;

/* Parses and validates a job spec. `source` names it in errors (a file name, or "request").
 * On success *spec is filled (free with coord_jobspec_clear). */
sc_status coord_jobspec_parse(const char *source, const char *text, size_t len, coord_jobspec *spec,
                              sc_err *err);

void coord_jobspec_clear(coord_jobspec *spec);

#endif /* COORD_JOBSPEC_H */
