/*
 * The demo's second part: fine-tuning a small Llama-shaped model from a Hugging Face checkpoint
 * folder on the demo's cluster. The demo's text becomes llm.c token shards of the model's
 * 96-token vocabulary (printable ASCII and the newline), a training and a held-out part; the
 * model's loss on the held-out part is measured before (the folder as given) and after (the
 * job's checkpoint exported with export JOB to a folder of its own).
 * Not here: starting the cluster and the first job (cmd_demo.c).
 */
#ifndef SC_CLI_DEMO_FINETUNE_H
#define SC_CLI_DEMO_FINETUNE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *addr, *token; /* the demo's coordinator and client token */
    const char *scratch;      /* the demo's scratch folder: shards and the export go there */
    const char *checkpoint;   /* the Hugging Face folder to start from (absolute) */
    const char *text;         /* the demo's text file */
    const char *cpu_kernels;  /* "fast" or "reference" (the job's model option) */
    int stages, steps;
} demo_finetune_cfg;

/* Runs the part, printing what it does; 0 when the job succeeded and both losses were measured,
 * else 1 with the reason on stderr. */
int demo_finetune(const demo_finetune_cfg *cfg, volatile sig_atomic_t *stop);

/* The checkpoint folder the demo uses by default: the repository's tiny tied Llama
 * (tests/data/hf/llama-tied) when this binary runs from a build folder of a source tree, into
 * buf; false when there is none. */
bool demo_finetune_default(char *buf, size_t size);

#endif /* SC_CLI_DEMO_FINETUNE_H */
