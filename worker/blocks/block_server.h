/*
 * The worker's block server: what a worker holds of a job's state, served to the workers that
 * take its blocks over (a rebalance's move) or resume them (a recovery). It answers from the
 * images kept when a stage pauses for a move (wk_block_server_keep), else from the job's
 * checkpoint files in this worker's checkpoint folder, then from the copies of other workers'
 * checkpoints it holds (JOB/replicas/, ckpt_copier.h). One thread, one ZeroMQ ROUTER socket.
 *
 * A kept image is dropped when the job keeps a newer one, when wk_block_server_drop names its job
 * or every job but one, or WK_BLOCKS_KEEP_S seconds after it was last kept or served.
 */
#ifndef WK_BLOCK_SERVER_H
#define WK_BLOCK_SERVER_H

#include "common/sc_status.h"
#include "worker/runtime/runner.h"

#define WK_BLOCKS_KEEP_S 600
/* where, in a job's checkpoint folder, the copies of other workers' checkpoints go */
#define WK_BLOCKS_COPIES_DIR "replicas"

typedef struct wk_block_server wk_block_server;

/* Binds tcp://bind_host:* (every interface when bind_host is a name, which is then published)
 * and starts serving. Checkpoints are read from `checkpoint_dir`/JOB/. */
sc_status wk_block_server_start(wk_block_server **out, const char *bind_host,
                                const char *checkpoint_dir, sc_err *err);
/* The endpoint peers connect to (tcp://HOST:PORT). */
const char *wk_block_server_endpoint(const wk_block_server *s);
/* Keeps `im` as job `job_id`'s paused state (takes its arrays: *im is zeroed), replacing what
 * the job kept before. */
void wk_block_server_keep(wk_block_server *s, const char *job_id, rt_stage_image *im);
/* Drops what job `job_id` kept; with `but` true, what every other job kept instead. */
void wk_block_server_drop(wk_block_server *s, const char *job_id, bool but);
/* Requests answered and bytes sent since the start (for logs and tests). */
void wk_block_server_counts(wk_block_server *s, uint64_t *answered, uint64_t *bytes);
/* Stops the thread, frees everything. Accepts NULL. */
void wk_block_server_stop(wk_block_server **s);

#endif /* WK_BLOCK_SERVER_H */
