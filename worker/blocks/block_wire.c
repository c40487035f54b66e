/* The block-moving wire's shared pieces (see block_wire.h). */
#include "worker/blocks/block_wire.h"

#include <stdbool.h>
#include <string.h>

uint64_t wk_blocks_checksum(const float *params, size_t np, const float *state, size_t ns)
{
    return rt_checkpoint_checksum(params, np, state, ns);
}

bool wk_blocks_job_id_ok(const char *job_id)
{
    size_t n = strnlen(job_id, 64);
    if (n == 0 || n == 64 || job_id[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = job_id[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

size_t wk_blocks_offset(const uint64_t *counts, int first, int b)
{
    size_t off = 0;
    for (int i = first; i < b; i++)
        off += counts[i];
    return off;
}

void wk_blocks_copy(const rt_stage_image *im, const uint64_t *counts, int first, int last,
                    float *out_params, float *out_state, size_t out_np, size_t at, size_t k)
{
    size_t from = wk_blocks_offset(counts, im->first_block, first);
    size_t n = wk_blocks_offset(counts, first, last + 1);
    memcpy(out_params + at, im->params + from, n * sizeof(float));
    for (size_t j = 0; j < k; j++)
        memcpy(out_state + j * out_np + at, im->state + j * im->nparams + from, n * sizeof(float));
}
