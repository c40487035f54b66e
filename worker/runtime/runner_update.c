/*
 * rt runner, the update at OPT, shared by both executors: the copies' all-reduce of the stage's
 * gradients (and of the last stage's loss sum), on the GPUs (replica_reduce "nccl") or through
 * host memory over the transports; the optimizer step with the per-block gradient norms the
 * reports carry; and the benchmarks' stand-in compute time that forwards, backwards and updates
 * add.
 * Not here: when the OPT runs (runner_exec.c, runner_pipedream.c), opening the copies' links
 * (runner_connect.c).
 * Invariant: every copy adds the r gradients in copy order 0..r-1, so all copies get
 * bit-identical sums and, stepping the same weights, stay bit-identical.
 */
#include "worker/runtime/runner_internal.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/sc_clock.h"
#include "kernels/stage.h"
#include "worker/transport/allreduce.h"
#include "worker/transport/transport.h"

/* Benchmarks: stand-in compute time. Sleeping rather than spinning keeps the measurement of a
 * schedule's structure valid on hosts with fewer cores than stages. */
void rt_runner_extra_compute(double seconds)
{
    if (seconds <= 0.0)
        return;
    struct timespec left = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

/* The replicas' all-reduce of the host gradients (and of the last stage's loss sum): each sends
 * its own to every peer, then every replica adds all of them in replica order 0..r-1, so all get
 * bit-identical sums (`mean`: then divided by r, identically everywhere). Replica k's message is
 * the gradient of micro-batch tag0 - k of `step` (tag0 < 0), which no real micro-batch uses:
 * tag0 = -1 per synchronous iteration, -1 - (the round's first micro-batch) per pipedream round,
 * so every round's messages differ. sent_ns[k]: copy k's send stamp (for k <= RT_LINK_MAX).
 * The sum lands in r->red_sum (*sum points there). Passes over the gradients, which bound it on
 * CPUs: the send's copy, each peer's receive into red_in, and one pass per addition, the first
 * two copies' added in one (g0 + g1, not 0 + g0 + g1: the same sum but for the sign of a zero,
 * and the same on every copy). */
static sc_status allreduce_grads(rt_runner *r, uint64_t step, int tag0, bool mean, double *loss_sum,
                                 uint64_t *sent_ns, const float **sum, sc_err *err)
{
    size_t n = r->np, gbytes = n * sizeof(float), bytes = gbytes + sizeof(double);
    unsigned char *own = (unsigned char *)r->grads; /* the loss sum goes right after them */
    double own_loss = *loss_sum;
    memcpy(own + gbytes, &own_loss, sizeof own_loss);
    for (int k = 0; k < r->nrep; k++) {
        if (k == r->rep)
            continue;
        if (r->link_peer[k] == NULL)
            return SC_ERRF(err, SC_ERR_PRECONDITION,
                           "runner stage %d replica %d: no link to replica %d (call "
                           "rt_runner_connect_group)",
                           r->s, r->rep, k);
        SC_CHECK(rt_transport_send(r->link_peer[k], RT_MSG_GRADIENT, step, tag0 - r->rep, own,
                                   bytes, err));
    }
    float *acc = r->red_sum;
    const float *first = NULL; /* copy 0's, until copy 1's is added to it */
    double loss = 0.0;
    for (int k = 0; k < r->nrep; k++) {
        const float *g = r->grads;
        double l = own_loss;
        if (k != r->rep) {
            SC_CHECK(rt_transport_recv_copy(r->tr, RT_MSG_GRADIENT, step, tag0 - k, r->red_in,
                                            bytes, k <= RT_LINK_MAX ? &sent_ns[k] : NULL, err));
            g = (const float *)r->red_in;
            memcpy(&l, r->red_in + gbytes, sizeof l);
        }
        loss += l;
        if (k == 0 && (g == r->grads || r->rep == 1)) {
            first = g; /* still there when copy 1's comes: its own, or copy 1 is this one */
        } else if (k == 0) {
            memcpy(acc, g, gbytes); /* red_in takes copy 1's next */
        } else if (first != NULL) {
            for (size_t i = 0; i < n; i++)
                acc[i] = first[i] + g[i];
            first = NULL;
        } else {
            for (size_t i = 0; i < n; i++)
                acc[i] += g[i];
        }
    }
    if (mean)
        for (size_t i = 0; i < n; i++)
            acc[i] /= (float)r->nrep;
    *loss_sum = loss;
    *sum = acc;
    return SC_OK;
}

/* The figures of an all-reduce that began at t0_ns and ended at end_ns on this copy's clock,
 * sent_ns[k] the moment copy k's gradients were complete on its clock: its message's send stamp
 * in host memory, its ready stamp with NCCL (rt_reduce_sample). Copies past RT_LINK_MAX are not
 * measured. */
static void note_reduce(rt_runner *r, uint64_t t0_ns, uint64_t end_ns, const uint64_t *sent_ns)
{
    rt_reduce_sample *x = &r->reduced;
    x->count++;
    x->bytes = r->np * sizeof(float);
    x->own_s = (double)(end_ns - t0_ns) * 1e-9;
    x->n_peers = 0;
    for (int k = 0; k < r->nrep && k <= RT_LINK_MAX && x->n_peers < RT_LINK_MAX; k++) {
        if (k == r->rep || sent_ns[k] == 0)
            continue;
        x->peer_copy[x->n_peers] = k;
        x->peer_delay_s[x->n_peers++] = ((double)end_ns - (double)sent_ns[k]) * 1e-9;
    }
}

/* The copies' all-reduce of the stage's gradients and of *loss_sum: on their GPUs with
 * replica_reduce "nccl", else through host memory (allreduce_grads). */
sc_status rt_runner_reduce_copies(rt_runner *r, uint64_t step, int tag0, bool mean,
                                  double *loss_sum, sc_err *err)
{
    uint64_t t0, sent_ns[RT_LINK_MAX + 1] = {0};
    if (r->ar != NULL) {
        SC_CHECK(kn_ctx_sync(kn_stage_ctx(r->st), err)); /* the gradients are complete */
        t0 = sc_clock_now_ns();
        SC_CHECK(rt_allreduce_run(r->ar, kn_stage_grads_device(r->st), kn_stage_grad_count(r->st),
                                  mean, loss_sum, err));
        rt_allreduce_ready(r->ar, sent_ns, RT_LINK_MAX + 1); /* the copies' ready stamps */
        note_reduce(r, t0, sc_clock_now_ns(), sent_ns);
        return SC_OK;
    }
    t0 = sc_clock_now_ns();
    const float *sum = NULL;
    SC_CHECK(kn_stage_grads_to_host(r->st, r->grads, err));
    SC_CHECK(allreduce_grads(r, step, tag0, mean, loss_sum, sent_ns, &sum, err));
    SC_CHECK(kn_stage_grads_from_host(r->st, sum, err));
    note_reduce(r, t0, sc_clock_now_ns(), sent_ns);
    return SC_OK;
}

/* The optimizer step on the stage's own device (kn_stage_step), after the per-block gradient
 * norms the reports carry. Under pipedream the host copy of the newest weights, which each
 * forward stashes, is brought up to date. */
sc_status rt_runner_optimizer_apply(rt_runner *r, sc_err *err)
{
    rt_runner_extra_compute(r->extra_o_s);
    if (r->grad_norms)
        SC_CHECK(kn_stage_grad_sq_norms(r->st, r->norms, err));
    SC_CHECK(kn_stage_step(r->st, err));
    if (r->pipedream)
        SC_CHECK(kn_stage_params_to_host(r->st, r->params, err));
    return SC_OK;
}
