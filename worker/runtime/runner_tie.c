/*
 * rt runner, the tied tensor across stages (kn_model_tie: GPT-2's token embedding in the first
 * stage, its copy as the output projection in the last): at OPT both end stages need the sum of
 * the two copies' gradients before stepping, as one stage holding both would compute it
 * (kn_stage_step). The end stages are not linked to each other, so the two gradients travel
 * along the pipeline's own links: the first stage's towards the next stage as an activation,
 * the last stage's towards the previous one as a gradient, each stage in between passing them
 * on. Messages carry the reserved micro-batch tag RT_TIE_TAG, which no micro-batch uses.
 * Replicated stages: the relay runs after the copies' all-reduce (runner_update.c), so every
 * copy of a stage already holds the same reduced gradient. Copy 0 of each end stage sends its
 * own; copy 0 of each stage in between passes it on (received in its inbox, sent over the link
 * to copy 0 of the stage after it); the hop into an end stage goes to every copy of that stage
 * (over all of link_next in the stage before the last, all of link_prev in the one after the
 * first). So every copy of both end stages receives the other end's reduced gradient, and
 * no copy shares anything with its peers: the path also serves copies that all-reduce on their
 * GPUs (replica_reduce "nccl", which opens no host links between them; no test covers that
 * pairing yet, it needs two GPUs a stage). Copies other than 0 of a stage in between take no
 * part.
 * Not here: when OPT runs (runner_exec.c), the in-stage sum (kernels/stage.c), the copies'
 * all-reduce (runner_update.c).
 * Invariant: every copy of both end stages adds the same two float arrays (a + b == b + a bit for
 * bit), so all copies stay bit-identical and, without copies, equal one stage's.
 * Limits: not with pipedream (its copies step per round at times the end stages do not share)
 * nor the nccl transport (the relay passes through host memory); refused at creation.
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
    if (r->pipedream)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "runner stage %d: model %s ties its embedding and head across stages, "
                       "which needs a synchronous schedule (gpipe, 1f1b, zb1, sliced, unequal); "
                       "schedule %s here",
                       r->s, kn_model_name(r->model), c->schedule != NULL ? c->schedule : "?");
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

/* Sends the tied gradient one hop: an activation towards the next stage, a gradient towards the
 * previous one. Replicated around this stage: to copy 0 of that neighbour, or to every copy of
 * it when it is an end stage (the file header). */
static sc_status tie_send(rt_runner *r, bool towards_next, uint64_t step, const float *g,
                          sc_err *err)
{
    rt_msg_kind kind = towards_next ? RT_MSG_ACTIVATION : RT_MSG_GRADIENT;
    size_t bytes = r->tie_n * sizeof(float);
    if (!r->group)
        return rt_transport_send(tr_dir(r, towards_next), kind, step, RT_TIE_TAG, g, bytes, err);
    rt_transport **links = towards_next ? r->link_next : r->link_prev;
    int nlinks = towards_next ? r->nrep_next : r->nrep_prev;
    bool to_end = towards_next ? r->s + 1 == r->p - 1 : r->s - 1 == 0;
    for (int k = 0; k < (to_end ? nlinks : 1); k++) {
        if (links == NULL || links[k] == NULL)
            return SC_ERRF(err, SC_ERR_PRECONDITION,
                           "runner stage %d replica %d: no link to replica %d of stage %d for the "
                           "tied gradient (call rt_runner_connect_group)",
                           r->s, r->rep, k, towards_next ? r->s + 1 : r->s - 1);
        SC_CHECK(rt_transport_send(links[k], kind, step, RT_TIE_TAG, g, bytes, err));
    }
    return SC_OK;
}

/* Receives the tied gradient coming from the previous stage (an activation) or from the next
 * one (a gradient); with copies everything arrives in the own inbox, which tr_dir is then. */
static sc_status tie_recv(rt_runner *r, bool from_next, uint64_t step, float *g, sc_err *err)
{
    return rt_transport_recv(tr_dir(r, from_next), from_next ? RT_MSG_GRADIENT : RT_MSG_ACTIVATION,
                             step, RT_TIE_TAG, g, r->tie_n * sizeof(float), err);
}

sc_status rt_runner_tie_exchange(rt_runner *r, uint64_t step, sc_err *err)
{
    if (!r->tie_relay)
        return SC_OK;
    if (!r->first && !r->last) { /* copy 0 passes both on */
        if (r->rep != 0)
            return SC_OK;
        SC_CHECK(tie_recv(r, false, step, r->tie_peer, err));
        SC_CHECK(tie_send(r, true, step, r->tie_peer, err));
        SC_CHECK(tie_recv(r, true, step, r->tie_peer, err));
        return tie_send(r, false, step, r->tie_peer, err);
    }
    size_t off, n;
    if (!kn_stage_tie_part(r->st, &off, &n) || n != r->tie_n)
        return SC_ERRF(err, SC_ERR_INTERNAL, "runner stage %d: holds no copy of the tied tensor",
                       r->s);
    SC_CHECK(kn_stage_grads_to_host(r->st, r->grads, err));
    memcpy(r->tie_own, r->grads + off, n * sizeof(float));
    if (r->rep == 0)
        SC_CHECK(tie_send(r, r->first, step, r->tie_own, err));
    SC_CHECK(tie_recv(r, r->first, step, r->tie_peer, err));
    float *g = r->grads + off;
    for (size_t j = 0; j < n; j++)
        g[j] = r->tie_own[j] + r->tie_peer[j];
    return kn_stage_grads_from_host(r->st, r->grads, err);
}
