/*
 * Copies of other workers' stage checkpoints, so that a checkpoint survives the loss of its
 * writer's disk. For each stage this worker is named to hold a copy of (START's
 * "checkpoint_copies"), a background thread takes each checkpoint of that stage, once due, from
 * its writer's block server (wk_blocks_fetch: the transfer a recovery uses) and stores it as
 * JOB/replicas/stage<S>-step<N>.ckpt, a checkpoint file like the writer's own, which this
 * worker's block server then serves. Training never waits for it.
 *
 * Not here: choosing who holds which copy, and which step is complete with its copies (the
 * coordinator, ckpt_copies.h there).
 */
#ifndef WK_CKPT_COPIER_H
#define WK_CKPT_COPIER_H

#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "kernels/model.h"

#define WK_COPIER_MAX 8 /* stages one worker holds copies of */

typedef struct wk_copier wk_copier;

/* The newest step of a stage this worker holds a copy of (0: none yet); `copy` is this worker's
 * place among the stage's holders, as START named it. */
typedef struct {
    uint32_t stage, copy;
    uint64_t step;
} wk_copy_held;

/* What the copies cost so far: bytes taken, seconds spent taking and writing them, copies. */
typedef struct {
    double bytes, seconds;
    uint64_t copies;
} wk_copier_stats;

/* A copier of job `job_id` whose copies go to `dir`/replicas/ (dir: the job's checkpoint
 * folder); the model (its JSON, parsed into the copier's own) says how images are cut by block. */
sc_status wk_copier_new(wk_copier **out, const char *job_id, const char *dir,
                        const char *model_json, sc_err *err);
/* Holds copies of stage `stage` (blocks first..last), written by the worker whose block server is
 * `source`, as its holder number `copy`. Before wk_copier_start only. */
sc_status wk_copier_add(wk_copier *c, uint32_t stage, uint32_t copy, const char *source, int first,
                        int last, sc_err *err);
/* Starts the background thread (none when nothing was added). */
sc_status wk_copier_start(wk_copier *c, sc_err *err);
/* The checkpoint of `step` is due on every stage (this worker's training passed it): copy it
 * once its writer has it. Steps are copied in the order they come due; one the writer still
 * lacks after a while is passed over once a newer one is due (its writer failed to write it). */
void wk_copier_due(wk_copier *c, uint64_t step);
/* The copies held, one per stage added, into out (at most max); returns the count. */
size_t wk_copier_held(wk_copier *c, wk_copy_held *out, size_t max);
void wk_copier_stats_get(wk_copier *c, wk_copier_stats *out);
/* Every stage holds the checkpoint of `step` with its copies: deletes the copies older than the
 * `keep` newest at or before it (rt_checkpoint_prune; keep 0 deletes nothing). */
sc_status wk_copier_complete(wk_copier *c, uint64_t step, uint64_t keep, sc_err *err);
/* Stops the copier and returns at once: a copy under way is dropped when its answer comes (or
 * times out), never written, and the thread then frees what it holds. Accepts NULL. */
void wk_copier_destroy(wk_copier **c);

#endif /* WK_CKPT_COPIER_H */
