/*
 * Taking blocks over: builds the state image of a stage's block range at a step from the block
 * servers of other workers (block_server.h), asking them in turn for each run of blocks still
 * missing. Used when a stage starts from a step it did not run itself: after a rebalance moved
 * its blocks, or a recovery re-planned them.
 */
#ifndef WK_BLOCK_FETCH_H
#define WK_BLOCK_FETCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "kernels/model.h"
#include "worker/runtime/runner.h"

/* What a fetch moved: bytes received, seconds spent, and requests answered. */
typedef struct {
    double bytes, seconds;
    double local_bytes; /* of `bytes`, those from sources[0] when it is this worker's own */
    int pieces;
} wk_fetch_stats;

/* Fills `out` with blocks [first, last] of `model` at `step` of job `job_id`, from the servers
 * `sources` (n of them; asked in order, each for the first block still missing; one that does
 * not answer within timeout_ms is skipped). With `own_first`, sources[0] is this worker's own
 * server: what it answers stayed here and is counted apart (stats->local_bytes). SC_ERR_NOT_FOUND
 * names the first block no source holds; SC_ERR_INVALID a source whose answer disagrees with the
 * others (optimizer, its step count) or with the model. `cancel` (may be NULL): once it is set,
 * the fetch stops within a tenth of a second, SC_ERR_CANCELLED (the stage was told to stop). */
sc_status wk_blocks_fetch(const char *const *sources, size_t n, const char *job_id, uint64_t step,
                          const kn_model *model, int first, int last, int timeout_ms,
                          bool own_first, const atomic_bool *cancel, rt_stage_image *out,
                          wk_fetch_stats *stats, sc_err *err);

#endif /* WK_BLOCK_FETCH_H */
