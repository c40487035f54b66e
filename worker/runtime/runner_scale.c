/*
 * rt runner, fp16's dynamic loss scale (as PyTorch's GradScaler): fp16 keeps five bits of
 * exponent, so small gradients flush to zero unless the loss, and with it every gradient, is
 * multiplied by a large scale S first; too large an S overflows to infinity instead. The last
 * stage multiplies its loss gradient by S; at OPT every stage checks its gradients (their
 * squared norms, once the copies' all-reduce and the tied relay are done), and the stages agree
 * whether any overflowed:
 *   - upstream: each stage ORs its own flag with those of every copy of the next stage and sends
 *     the result to every copy of the previous one, so stage 0 ends with the pipeline's verdict;
 *   - downstream: stage 0 sends the verdict to every copy of stage 1, which passes it on.
 * An overflow anywhere skips the step on every stage (no update; the gradients are zeroed at the
 * next step's start) and halves S; otherwise each stage divides its gradients by S and steps,
 * and after `interval` steps in a row without overflow S doubles. Messages are 4 bytes with the
 * reserved micro-batch tag RT_SCALE_TAG, on the synchronous schedules' own links.
 * Not here: when OPT runs (runner_exec.c), the optimizer (runner_update.c).
 * Limits: not with pipedream (its stages step per minibatch, at times they do not share); the
 * scale restarts from its initial value when a job resumes from a checkpoint.
 */
#include "worker/runtime/runner_internal.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "kernels/precision.h"
#include "kernels/stage.h"

#define RT_SCALE_TAG (INT_MIN / 2 + 1)
#define SCALE_INIT 65536.0f /* GradScaler's defaults */
#define SCALE_INTERVAL 2000
#define SCALE_MIN 0x1p-24f /* below it a scale means nothing: the gradients themselves are bad */

sc_status rt_runner_scale_setup(rt_runner *r, const rt_runner_cfg *c, sc_err *err)
{
    kn_precision p = KN_PREC_FP32;
    if (c->precision != NULL)
        SC_CHECK(kn_precision_parse(c->precision, "precision", &p, err));
    r->scaling = p == KN_PREC_FP16;
    r->scale = 1.0f;
    if (!r->scaling)
        return SC_OK;
    if (r->pipedream)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "runner stage %d: fp16 needs a dynamic loss scale, which the stages agree "
                       "on at each flush; schedule pipedream has none: use gpipe, 1f1b, zb1 or "
                       "sliced, or precision bf16 or fp32",
                       r->s);
    if (c->loss_scale_init < 0 || c->loss_scale_interval < 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: loss scale %g every %d steps; valid: a scale > 0 and an interval "
                       ">= 1 (0 for the defaults, %g and %d)",
                       c->loss_scale_init, c->loss_scale_interval, (double)SCALE_INIT,
                       SCALE_INTERVAL);
    r->scale = c->loss_scale_init > 0 ? (float)c->loss_scale_init : SCALE_INIT;
    r->scale_interval = c->loss_scale_interval > 0 ? c->loss_scale_interval : SCALE_INTERVAL;
    r->scale_good = 0;
    r->loss_base = 1.0f / (float)((size_t)r->batch * (size_t)r->tps);
    if (r->last)
        kn_stage_set_loss_scale(r->st, r->loss_base * r->scale);
    return SC_OK;
}

/* One flag to the previous stage (a gradient) or the next one (an activation): to every copy of
 * it when replicated around this stage. */
static sc_status flag_send(rt_runner *r, bool towards_next, uint64_t step, int32_t flag,
                           sc_err *err)
{
    rt_msg_kind kind = towards_next ? RT_MSG_ACTIVATION : RT_MSG_GRADIENT;
    if (!r->group)
        return rt_transport_send(tr_dir(r, towards_next), kind, step, RT_SCALE_TAG, &flag,
                                 sizeof flag, err);
    rt_transport **links = towards_next ? r->link_next : r->link_prev;
    int n = towards_next ? r->nrep_next : r->nrep_prev;
    for (int k = 0; k < n; k++) {
        if (links == NULL || links[k] == NULL)
            return SC_ERRF(err, SC_ERR_PRECONDITION,
                           "runner stage %d replica %d: no link to replica %d of stage %d for the "
                           "loss scale's verdict (call rt_runner_connect_group)",
                           r->s, r->rep, k, towards_next ? r->s + 1 : r->s - 1);
        SC_CHECK(rt_transport_send(links[k], kind, step, RT_SCALE_TAG, &flag, sizeof flag, err));
    }
    return SC_OK;
}

/* The OR of the flags of every copy of the next stage (from_next) or of the previous one. */
static sc_status flag_recv(rt_runner *r, bool from_next, uint64_t step, int32_t *flag,
                           sc_err *err)
{
    int n = !r->group ? 1 : from_next ? r->nrep_next : r->nrep_prev;
    *flag = 0;
    for (int k = 0; k < n; k++) {
        int32_t f = 0;
        SC_CHECK(rt_transport_recv(tr_dir(r, from_next),
                                   from_next ? RT_MSG_GRADIENT : RT_MSG_ACTIVATION, step,
                                   RT_SCALE_TAG, &f, sizeof f, err));
        *flag |= f != 0;
    }
    return SC_OK;
}

sc_status rt_runner_scale_agree(rt_runner *r, uint64_t step, bool *skip, sc_err *err)
{
    *skip = false;
    r->scale_skipped = false;
    if (!r->scaling)
        return SC_OK;
    SC_CHECK(kn_stage_grad_sq_norms(r->st, r->norms, err));
    int32_t bad = 0, theirs = 0;
    for (int i = 0; i < r->nb; i++)
        bad |= !isfinite(r->norms[i]);
    if (r->p > 1) {
        if (!r->last) {
            SC_CHECK(flag_recv(r, true, step, &theirs, err));
            bad |= theirs;
        }
        if (!r->first)
            SC_CHECK(flag_send(r, false, step, bad, err));
        if (!r->first) /* stage 0's verdict, the pipeline's */
            SC_CHECK(flag_recv(r, false, step, &bad, err));
        if (!r->last)
            SC_CHECK(flag_send(r, true, step, bad, err));
    }
    if (bad) {
        *skip = true;
        r->scale_skipped = true;
        r->scale_skips++;
        r->scale_good = 0;
        if (r->scale > SCALE_MIN)
            r->scale *= 0.5f;
    } else {
        SC_CHECK(kn_stage_scale_grads(r->st, 1.0f / r->scale, err));
        if (++r->scale_good >= r->scale_interval) {
            r->scale_good = 0;
            if (r->scale < 0x1p100f)
                r->scale *= 2.0f;
        }
    }
    if (r->last)
        kn_stage_set_loss_scale(r->st, r->loss_base * r->scale);
    return SC_OK;
}
