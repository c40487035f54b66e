/*
 * The block-moving wire: how a worker asks another for the state of a run of blocks at a step,
 * and how the answer is laid out; plus cutting an image (rt_stage_image) by block, which both
 * ends need. Not here: the sockets (block_server.c answers, block_fetch.c asks).
 *
 * A request is one frame: wk_block_request, then `nblocks` uint64 parameter counts (every block
 * of the model, so the server can cut an image it holds without knowing the model). An answer is
 * three frames: wk_block_answer, the parameters, the optimizer state (k arrays, one after the
 * other, each of answer.nparams floats). The server answers with the blocks from `first` up to
 * `last` or to the end of what it holds, whichever comes first; status WK_BLOCKS_ABSENT when it
 * holds no image of that step with block `first`.
 */
#ifndef WK_BLOCK_WIRE_H
#define WK_BLOCK_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "worker/runtime/runner.h"

#define WK_BLOCKS_REQ_MAGIC "SCBLKRQ1"
#define WK_BLOCKS_ANS_MAGIC "SCBLKAN1"
#define WK_BLOCKS_MAX 65536 /* blocks in a model a request may describe */

enum { WK_BLOCKS_OK = 0, WK_BLOCKS_ABSENT = 1, WK_BLOCKS_BAD_REQUEST = 2 };

typedef struct {
    char magic[8];
    char job_id[64]; /* NUL-terminated */
    uint64_t step;
    uint32_t first, last; /* blocks wanted */
    uint32_t nblocks;     /* parameter counts that follow */
    uint32_t reserved;
} wk_block_request;

typedef struct {
    char magic[8];
    uint32_t status;
    uint32_t first, last; /* blocks sent */
    uint32_t optim_kind;
    uint32_t k; /* optimizer state arrays per parameter */
    uint32_t reserved;
    uint64_t opt_t;
    uint64_t nparams;
    uint64_t checksum; /* FNV-1a 64 over the parameters then the state */
    char message[200]; /* why not, when status is not WK_BLOCKS_OK */
} wk_block_answer;

/* FNV-1a 64 of the parameters then the state, as wk_block_answer.checksum. */
uint64_t wk_blocks_checksum(const float *params, size_t np, const float *state, size_t ns);

/* Whether a job id read from the network is safe as one path component ([A-Za-z0-9._-], not
 * starting with '.', shorter than the field). */
bool wk_blocks_job_id_ok(const char *job_id);

/* The offset of block b's parameters in an image that starts at block `first` (counts[]: every
 * block of the model). */
size_t wk_blocks_offset(const uint64_t *counts, int first, int b);

/* Copies blocks [first, last] of `im` (which must hold them) into `out` at parameter offset
 * `at`, for each of the k state arrays too: out holds out_np parameters per array. */
void wk_blocks_copy(const rt_stage_image *im, const uint64_t *counts, int first, int last,
                    float *out_params, float *out_state, size_t out_np, size_t at, size_t k);

#endif /* WK_BLOCK_WIRE_H */
