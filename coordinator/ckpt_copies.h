/*
 * Where copies of a job's stage checkpoints are held, and which checkpoint is complete with its
 * copies: the coordinator's side of checkpoint replication (the workers copy, ckpt_copier.h
 * there). Each stage's checkpoints are written by its copy 0's worker (the writer); the job's
 * "checkpoint_replicas" other workers of the plan each hold a copy, taken from the writer's block
 * server after it wrote one, and report the newest step they hold. A checkpoint counts as
 * complete (the job resumes from it, the workers may delete older ones) once every stage has
 * written it and every copy of it is held, so that it survives the loss of any one worker's disk.
 *
 * Pure functions over plain arrays and JSON: no lock, no store, no network.
 */
#ifndef COORD_CKPT_COPIES_H
#define COORD_CKPT_COPIES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define COORD_MAX_CKPT_COPIES 8 /* "checkpoint_replicas" at most */
#define COORD_MAX_CKPT_HELD 8   /* stages one worker holds copies of at most (the worker's
                                 * WK_COPIER_MAX) */

/* Chooses the holders of each of n_stages stages' copies: up to k of the n workers, never the
 * stage's writer (owner[s], an index into the n workers), only workers the plan uses (used[i])
 * that serve blocks (serves[i]); workers on another host than the writer's first (hosts[i];
 * hosts NULL: all on one), then in the order after the writer, so that copies spread; a worker
 * holds copies of at most COORD_MAX_CKPT_HELD stages.
 * holders[s * COORD_MAX_CKPT_COPIES + j] gets the index of holder j; count[s] how many there are
 * (fewer than k when the plan has too few other workers). */
void coord_ckpt_choose_holders(size_t n_stages, const int *owner, const bool *used,
                               const bool *serves, const char *const *hosts, size_t n, int k,
                               int *holders, int *count);

/* The newest complete checkpoint: `written` (the newest step every stage has written), lowered
 * to the oldest newest-step any holder holds (copied[s * COORD_MAX_CKPT_COPIES + j] for
 * j < count[s]), never below `floor` (the step the run started from, whose state was found). */
uint64_t coord_ckpt_complete(uint64_t written, size_t n_stages, const int *count,
                             const uint64_t *copied, uint64_t floor);

/* START's "checkpoint_copies" for a plan (JSON text of its "stages": each with first_block,
 * last_block and devices, indexes into the n workers) and the workers' block servers
 * (endpoints[i], "" or NULL: none) and hosts: one entry per stage with holders, {"stage",
 * "first_block", "last_block", "source": the writer's block server, "holders": theirs}; count[s]
 * gets each stage's holders (0 for every stage when k is 0). A new array (caller decrefs). */
json_t *coord_ckpt_copies_payload(const json_t *plan, const char *const *endpoints,
                                  const char *const *hosts, const bool *used, size_t n, int k,
                                  int *count);

#endif /* COORD_CKPT_COPIES_H */
