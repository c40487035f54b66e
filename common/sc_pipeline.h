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

/* The sliced schedule (1F1B with the first k micro-batches cut in halves, each half a unit of
 * its own): the warm-up forwards, in units, of a stage whose 1F1B warm-up is `warm`
 * micro-batches (sc_pipeline_warmup): as many units as cover `warm` micro-batches' worth of
 * samples, halves counted as halves, at most `units` (the 2k halves plus the m - k whole
 * micro-batches). The halves let the next stage start sooner; they do not shorten the warm-up
 * (counted as whole micro-batches, they would leave the first stage idle, waiting for its first
 * backward). A stage then holds at most warm + 1 consecutive units, a copy every r-th of them:
 * sc_pipeline_sliced_copy_slots. */
static inline int sc_pipeline_sliced_warmup(int warm, int k, int units)
{
    int n = warm <= k ? 2 * warm : warm + k;
    return n < units ? n : units;
}

static inline int sc_pipeline_sliced_copy_slots(int after, int copies, int k, int units)
{
    int warm = sc_pipeline_sliced_warmup(sc_pipeline_warmup(after, copies), k, units);
    int window = (warm + copies) / copies, share = (units + copies - 1) / copies;
    return window < share ? window : share;
}

#endif /* SC_PIPELINE_H */
