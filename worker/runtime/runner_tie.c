/*
 * rt runner, the tied tensor across stages (kn_model_tie: GPT-2's token embedding in the first
 * stage, its copy as the output projection in the last): at OPT both end stages need the sum of
 * the two copies' gradients before stepping, as one stage holding both would compute it
 * (kn_stage_step). The end stages are not linked to each other, so the two gradients travel
 * along the pipeline's own links: the first stage's towards the next stage as an activation,
 * the last stage's towards the previous one as a gradient, each stage in between passing them
 * on. Messages carry the reserved micro-batch tag RT_TIE_TAG, which no micro-batch uses.
 * Not here: when OPT runs (runner_exec.c), the in-stage sum (kernels/stage.c).
 * Invariant: both end stages add the same two float arrays (a + b == b + a bit for bit), so the
 * copies stay bit-identical and equal one stage's.
 * Limits: not with replicated stages, pipedream or the nccl transport (refused at creation).
 */
#include "worker/runtime/runner_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/stage.h"

#define RT_TIE_TAG (INT_MIN / 2)

sc_status rt_runner_tie_setup(rt_runner *r, const rt_runner_cfg *c, sc_err *err)
{
    kn_model_tie tie;
    if (r->p < 2 || !kn_model_get_tie(r->model, &tie))
        return SC_OK;
    const kn_block *b = kn_model_block(r->model, tie.block[0]);
    r->tie_n = b->tensors[tie.tensor[0]].count;
    if (r->group || r->pipedream)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "runner stage %d: model %s ties its embedding and head across stages, "
                       "which needs a synchronous schedule (gpipe, 1f1b, sliced, unequal) "
                       "without replicated stages; schedule %s, replicas %d here",
                       r->s, kn_model_name(r->model), c->schedule != NULL ? c->schedule : "?",
                       r->nrep);
    if ((c->transport != NULL && strcmp(c->transport, "nccl") == 0) ||
        (c->transport_next != NULL && strcmp(c->transport_next, "nccl") == 0))
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "runner stage %d: model %s ties its embedding and head across stages; "
                       "their gradients travel through host memory: transport \"zmq\" or "
                       "\"local\", not \"nccl\"",
                       r->s, kn_model_name(r->model));
    r->tie_relay = true;
    r->tie_own = malloc(r->tie_n * sizeof(float) + 1);
    r->tie_peer = malloc(r->tie_n * sizeof(float) + 1);
    if (r->tie_own == NULL || r->tie_peer == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory for the tied gradient (%zu floats)",
                       r->tie_n);
    return SC_OK;
}

sc_status rt_runner_tie_exchange(rt_runner *r, uint64_t step, sc_err *err)
{
    if (!r->tie_relay)
        return SC_OK;
    size_t bytes = r->tie_n * sizeof(float);
    if (!r->first && !r->last) { /* pass both on */
        SC_CHECK(rt_transport_recv(tr_dir(r, false), RT_MSG_ACTIVATION, step, RT_TIE_TAG,
                                   r->tie_peer, bytes, err));
        SC_CHECK(rt_transport_send(tr_dir(r, true), RT_MSG_ACTIVATION, step, RT_TIE_TAG,
                                   r->tie_peer, bytes, err));
        SC_CHECK(rt_transport_recv(tr_dir(r, true), RT_MSG_GRADIENT, step, RT_TIE_TAG, r->tie_peer,
                                   bytes, err));
        return rt_transport_send(tr_dir(r, false), RT_MSG_GRADIENT, step, RT_TIE_TAG, r->tie_peer,
                                 bytes, err);
    }
    size_t off, n;
    if (!kn_stage_tie_part(r->st, &off, &n) || n != r->tie_n)
        return SC_ERRF(err, SC_ERR_INTERNAL, "runner stage %d: holds no copy of the tied tensor",
                       r->s);
    SC_CHECK(kn_stage_grads_to_host(r->st, r->grads, err));
    memcpy(r->tie_own, r->grads + off, bytes);
    if (r->first) {
        SC_CHECK(rt_transport_send(tr_dir(r, true), RT_MSG_ACTIVATION, step, RT_TIE_TAG, r->tie_own,
                                   bytes, err));
        SC_CHECK(rt_transport_recv(tr_dir(r, true), RT_MSG_GRADIENT, step, RT_TIE_TAG, r->tie_peer,
                                   bytes, err));
    } else {
        SC_CHECK(rt_transport_send(tr_dir(r, false), RT_MSG_GRADIENT, step, RT_TIE_TAG, r->tie_own,
                                   bytes, err));
        SC_CHECK(rt_transport_recv(tr_dir(r, false), RT_MSG_ACTIVATION, step, RT_TIE_TAG,
                                   r->tie_peer, bytes, err));
    }
    float *g = r->grads + off;
    for (size_t j = 0; j < n; j++)
        g[j] = r->tie_own[j] + r->tie_peer[j];
    return kn_stage_grads_from_host(r->st, r->grads, err);
}
