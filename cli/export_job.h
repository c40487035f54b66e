/*
 * `stagecraft export JOB`: a job's checkpoint written as a Hugging Face folder on the machine
 * running the command. The coordinator names the step, the model and where each stage's blocks
 * are served (Coordinator.GetCheckpoint); the blocks come from the workers' block servers over
 * the wire workers use to take each other's blocks (worker/blocks/block_fetch.h); the folder is
 * written as the checkpoint-folder form writes it (kn_hf_export).
 * Not here: parsing the command line (cmd_export.c).
 */
#ifndef SC_CLI_EXPORT_JOB_H
#define SC_CLI_EXPORT_JOB_H

#include <stdint.h>

#include "common/sc_status.h"

typedef struct {
    uint64_t step;   /* the step written */
    char model[128]; /* the model's name */
    int stages;      /* stages fetched */
    double bytes;    /* parameters and optimizer state received */
} cli_export_result;

/* Exports job `job_id`'s checkpoint of `step` (0: the last complete one) to `out_dir`, asking
 * the coordinator at `addr` with client token `token`; a block server silent for `timeout_ms`
 * is skipped for the next source. Errors name the job, the stage and blocks, and each worker
 * asked with why it gave nothing (not answering, not holding the step). Nothing is written
 * unless every block arrived with its checksum. */
sc_status cli_export_job(const char *addr, const char *token, const char *job_id, uint64_t step,
                         const char *out_dir, int timeout_ms, cli_export_result *res, sc_err *err);

#endif /* SC_CLI_EXPORT_JOB_H */
