/*
 * What `stagecraft advise` shares between its two files: cmd_advise.c (flags, the catalogue
 * search) and advise_margins.c (--workers and --job: the coordinator's workers, what dropping
 * one or adding a catalogue's server is worth).
 */
#ifndef SC_CLI_ADVISE_H
#define SC_CLI_ADVISE_H

#include <stdint.h>

#include "cli/cli.h"

typedef struct advise_args {
    const char *model, *catalog, *objective, *job, *coordinator;
    int workers; /* --workers */
    int64_t batch, microbatches, stages;
    int have_batch, have_micro, have_stages, have_schedule, have_strategy;
    double tokens_per_sample;
    int json, strategy, schedule;
} advise_args;

/* `advise --workers` or `--job JOB` (with --catalog: also the catalogue's servers added). */
int advise_margins_main(const cli_command *self, const advise_args *a);

#endif /* SC_CLI_ADVISE_H */
