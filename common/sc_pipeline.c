/*
 * sc_pipeline: 1F1B-RR warm-up and per-copy slots (see sc_pipeline.h).
 */
#include "common/sc_pipeline.h"

#include <assert.h>

int sc_pipeline_warmup(int after, int copies)
{
    assert(copies >= 1 && after >= copies);
    return copies * ((after - 1) / copies);
}

int sc_pipeline_copy_slots(int after, int copies, int microbatches)
{
    int slots = sc_pipeline_warmup(after, copies) / copies + 1;
    if (microbatches > 0) {
        int share = (microbatches + copies - 1) / copies;
        slots = share < slots ? share : slots;
    }
    return slots;
}
