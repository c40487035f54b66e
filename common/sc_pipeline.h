/*
 * sc_pipeline: the warm-up rule of 1F1B schedules over replicated stages (1F1B-RR) and the
 * activation slots it gives one copy, shared by the runtime's action lists (worker/runtime) and
 * the planner's schedules and memory model (coordinator/planner), so both count the same.
 *
 * A stage with r copies, whose stages from it to the last have R copies in all (R_s, its own
 * included), runs W = r * floor((R - 1) / r) forwards before its first backward when taken as a
 * whole (micro-batch j on copy j mod r). W is a multiple of r, so each copy runs W / r warm-up
 * forwards of its own and then alternates its own forward and backward, holding at most
 * W / r + 1 micro-batches. Unreplicated (every stage one copy) R = p - s and W = p - s - 1, the
 * textbook 1F1B warm-up. Not here: the lists themselves, and any notion of time.
 * The functions are inline: the planner's dynamic programmes call them in their innermost loops.
 */
#ifndef SC_PIPELINE_H
#define SC_PIPELINE_H

#include <assert.h>

/* The warm-up W above: copies >= 1, after >= copies (the stage's own copies are among them). */
static inline int sc_pipeline_warmup(int after, int copies)
{
    assert(copies >= 1 && after >= copies);
    return copies * ((after - 1) / copies);
}

/* Most micro-batches one copy holds between a forward and its backward under that warm-up:
 * W / copies + 1, and, when microbatches > 0 (a flushed iteration of that many), at most the
 * micro-batches of the copy that runs the most, ceil(microbatches / copies). microbatches <= 0:
 * an endless stream (asynchronous PipeDream), no cap. */
static inline int sc_pipeline_copy_slots(int after, int copies, int microbatches)
{
    int slots = copies == 1 ? after : (after - 1) / copies + 1;
    if (microbatches > 0) {
        int share = copies == 1 ? microbatches : (microbatches + copies - 1) / copies;
        slots = share < slots ? share : slots;
    }
    return slots;
}

#endif /* SC_PIPELINE_H */
