/*
 * rt runner, boundaries: opens the data-plane transports of a stage (one for both boundaries,
 * or one per boundary with transport_next), the copies' device all-reduce, the device buffers of
 * boundaries crossed in device memory; connects them to the neighbours' and peers' endpoints
 * (rt_runner_connect, rt_runner_connect_group); and routes each send to the transport of its
 * destination (rt_runner_send_routed).
 * Not here: what is sent when (runner_exec.c, runner_pipedream.c), the copies' gradient exchange
 * (runner_update.c), the transports themselves (worker/transport).
 * Invariant: with replicated stages (group) every message arrives in the stage's own inbox (r->tr)
 * and every send goes over the send-only link of its destination copy; otherwise r->tr (and
 * r->tr_next) carry both directions. A device boundary (dev_prev, dev_next) exists only on the
 * plain data path (no copies, no pipedream, no sizes per stage).
 */
#include "worker/runtime/runner_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "kernels/device.h"
#include "kernels/precision.h"
#include "kernels/stage.h"
#include "worker/transport/allreduce.h"
#include "worker/transport/transport.h"

/* The bind endpoint of a transport of `kind` when the stage splits its two boundaries over two
 * kinds: the configured one where it is of that kind, else the kind's default. `towards_next`:
 * this transport serves the next boundary (an nccl one then creates its communicator ids). */
static const char *split_bind(rt_transport_kind kind, const char *configured, bool towards_next)
{
    switch (kind) {
    case RT_TRANSPORT_NCCL:
        return towards_next ? "nccl://" : "nccl://-";
    case RT_TRANSPORT_LOCAL:
        return configured != NULL && strncmp(configured, "local://", 8) == 0 ? configured
                                                                             : "local://";
    default:
        return configured != NULL && strncmp(configured, "tcp://", 6) == 0 ? configured
                                                                           : "tcp://127.0.0.1:0";
    }
}

/* Checks an nccl side and fills its device. */
static sc_status nccl_side(const rt_runner *r, const rt_runner_cfg *c, kn_device dev,
                           rt_transport_cfg *tc, sc_err *err)
{
    /* NCCL moves device memory between distinct GPUs, point to point in send order: no CPU
     * stages, no routed (replicated) groups. */
    if (dev.kind != KN_DEV_CUDA)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: transport \"nccl\" needs a cuda:N device, got \"%s\"; "
                       "use \"zmq\" for CPU stages",
                       r->s, c->device != NULL ? c->device : "cpu");
    if (r->group)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "runner stage %d: transport \"nccl\" with replicated stages (replicas %d, "
                       "prev_replicas %d, next_replicas %d); valid: all 1, or transport \"zmq\"",
                       r->s, r->nrep, r->nrep_prev, r->nrep_next);
    tc->device = dev.index;
    /* nccl preallocates staging of max_message_bytes and enforces no limit: there it is this
     * stage's own largest message, not message_bound's batch (device memory for a whole batch
     * would mostly sit idle); a neighbour with larger entries (unequal sizes) makes the
     * transport grow its receive staging once */
    size_t per_sample = r->in_elems > r->out_elems ? r->in_elems : r->out_elems;
    int most = r->Bcap > r->Mcap ? r->Bcap : r->Mcap;
    tc->max_message_bytes = (size_t)most * per_sample * sizeof(float);
    return SC_OK;
}

/* The largest message a peer can legitimately send this stage: what the transports take as
 * max_message_bytes (zmq refuses larger ones, so a stray or hostile sender cannot make the stage
 * allocate what it claims). Activations and gradients carry one entry of a neighbour's cut, 4
 * bytes per element (floats, or int32 tokens): never more than the whole batch, though more than
 * this stage's own micro-batches where stages have sizes of their own, and a neighbour whose
 * cut disagrees with this stage's lists must still get through for gather to name the list.
 * Copies of a replicated stage all-reduce over the same inbox: np floats and a double. */
static size_t message_bound(const rt_runner *r)
{
    size_t per_sample = r->in_elems > r->out_elems ? r->in_elems : r->out_elems;
    size_t most = (size_t)r->batch * per_sample * 4;
    size_t reduce = r->np * sizeof(float) + sizeof(double);
    if (r->nrep > 1 && reduce > most)
        most = reduce;
    if (r->tie_n * sizeof(float) > most) /* the tied gradient relayed at OPT (runner_tie.c) */
        most = r->tie_n * sizeof(float);
    return most;
}

/* Whether the schedule's data path may hand the transports device memory (the synchronous
 * schedules without copies or sizes per stage: the other paths stage through host buffers). */
static bool plain_data_path(const rt_runner *r)
{
    return !r->group && !r->pipedream && !r->resliced;
}

/* The data-plane transports: one for both boundaries (the usual case), or, when cfg
 * transport_next names another kind than transport, r->tr for the previous boundary and
 * r->tr_next for the next one; the published endpoint then joins both ("A|B", see
 * rt_runner_endpoint). */
/* The wire of the job's precision: a bf16 or fp16 job's activations and gradients cross host
 * memory in those 16 bits (runner.c has already refused a bad name). */
static rt_wire wire_of(const rt_runner_cfg *c)
{
    kn_precision p = KN_PREC_FP32;
    sc_err ignored;
    if (c->precision == NULL ||
        kn_precision_parse(c->precision, "precision", &p, &ignored) != SC_OK)
        return RT_WIRE_F32;
    return p == KN_PREC_BF16 ? RT_WIRE_BF16 : p == KN_PREC_FP16 ? RT_WIRE_FP16 : RT_WIRE_F32;
}

sc_status rt_runner_open_transports(rt_runner *r, const rt_runner_cfg *c, kn_device dev,
                                    sc_err *err)
{
    rt_transport_cfg tc = rt_transport_cfg_default();
    SC_CHECK(rt_transport_kind_parse(c->transport, "transport", &tc.kind, err));
    rt_transport_kind next_kind = tc.kind;
    if (c->transport_next != NULL && c->transport_next[0] != '\0')
        SC_CHECK(rt_transport_kind_parse(c->transport_next, "transport_next", &next_kind, err));
    /* an end stage has one boundary: its transport is that boundary's */
    if (r->first)
        tc.kind = next_kind;
    if (r->last)
        next_kind = tc.kind;
    tc.timeout_ms = c->timeout_ms;
    tc.tag = c->tag;
    tc.copy = r->rep; /* names this copy to the receivers' link figures */
    tc.wire = wire_of(c);
    tc.max_message_bytes = message_bound(r); /* nccl_side puts its own */
    /* a GPU stage's local transport carries device memory where the runner passes it */
    bool dev_payloads = dev.kind == KN_DEV_CUDA && plain_data_path(r);
    tc.device = dev.index;
    tc.device_payloads = dev_payloads && tc.kind == RT_TRANSPORT_LOCAL;
    if (next_kind == tc.kind) {
        if (c->bind_endpoint != NULL)
            tc.bind_endpoint = c->bind_endpoint;
        else if (tc.kind == RT_TRANSPORT_LOCAL)
            tc.bind_endpoint = "local://";
        if (tc.kind == RT_TRANSPORT_NCCL) {
            SC_CHECK(nccl_side(r, c, dev, &tc, err));
            /* the stage before a boundary creates its communicator ids */
            tc.bind_endpoint = r->last ? "nccl://-" : "nccl://";
        }
        SC_CHECK(rt_transport_new(&r->tr, &tc, err));
        sc_strlcpy(r->endpoint, rt_transport_endpoint(r->tr), sizeof r->endpoint);
        r->link_cfg = tc;
        r->link_cfg.bind_endpoint =
            tc.kind == RT_TRANSPORT_LOCAL ? "local://" : "tcp://127.0.0.1:0";
        r->link_cfg.device_payloads = false; /* replicas exchange host gradients */
        return SC_OK;
    }
    if (r->group)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "runner stage %d: transports per boundary (%s, transport_next %s) with "
                       "replicated stages; valid: one transport",
                       r->s, c->transport, c->transport_next);
    rt_transport_cfg tn = tc;
    tn.kind = next_kind;
    tn.device_payloads = dev_payloads && tn.kind == RT_TRANSPORT_LOCAL;
    tc.bind_endpoint = split_bind(tc.kind, c->bind_endpoint, false);
    tn.bind_endpoint = split_bind(tn.kind, c->bind_endpoint, true);
    if (tc.kind == RT_TRANSPORT_NCCL)
        SC_CHECK(nccl_side(r, c, dev, &tc, err));
    if (tn.kind == RT_TRANSPORT_NCCL)
        SC_CHECK(nccl_side(r, c, dev, &tn, err));
    SC_CHECK(rt_transport_new(&r->tr, &tc, err));
    SC_CHECK(rt_transport_new(&r->tr_next, &tn, err));
    const char *a = rt_transport_endpoint(r->tr), *b = rt_transport_endpoint(r->tr_next);
    if (strlen(a) + 1 + strlen(b) >= sizeof r->endpoint)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: the endpoints of its two transports do not fit in %d "
                       "characters",
                       r->s, RT_ENDPOINT_MAX);
    size_t la = strlen(a);
    memcpy(r->endpoint, a, la);
    r->endpoint[la] = RT_ENDPOINT_SEP;
    memcpy(r->endpoint + la + 1, b, strlen(b) + 1);
    return SC_OK;
}

/* replica_reduce "nccl": the copies' device all-reduce. Copy 0 publishes its id joined to its
 * data endpoint, which every copy of the stage receives as peer endpoint 0. */
sc_status rt_runner_open_reduce(rt_runner *r, const rt_runner_cfg *c, kn_device dev, sc_err *err)
{
    const char *how =
        c->replica_reduce != NULL && c->replica_reduce[0] != '\0' ? c->replica_reduce : "host";
    if (strcmp(how, "host") == 0)
        return SC_OK;
    if (strcmp(how, "nccl") != 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: replica_reduce \"%s\"; valid: \"host\" (the default), "
                       "\"nccl\"",
                       r->s, how);
    if (r->nrep < 2)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: replica_reduce \"nccl\" needs a replicated stage "
                       "(replicas >= 2, got %d)",
                       r->s, r->nrep);
    if (dev.kind != KN_DEV_CUDA)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: replica_reduce \"nccl\" needs a cuda:N device, got "
                       "\"%s\"; copies on CPUs use \"host\"",
                       r->s, c->device != NULL ? c->device : "cpu");
    rt_allreduce_cfg ac = {
        .device = dev.index, .ranks = r->nrep, .rank = r->rep, .timeout_ms = c->timeout_ms};
    SC_CHECK(rt_allreduce_new(&r->ar, &ac, err));
    if (r->rep != 0)
        return SC_OK;
    const char *id = rt_allreduce_endpoint(r->ar);
    size_t la = strlen(r->endpoint), lb = strlen(id);
    if (la + 1 + lb >= sizeof r->endpoint)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: its data and all-reduce endpoints do not fit in %d "
                       "characters",
                       r->s, RT_ENDPOINT_MAX);
    r->endpoint[la] = RT_ENDPOINT_SEP;
    memcpy(r->endpoint + la + 1, id, lb + 1);
    return SC_OK;
}

/* Which boundaries a GPU stage crosses in device memory (rt_runner.dev_prev, dev_next) and its
 * device buffers for them. */
sc_status rt_runner_device_boundaries(rt_runner *r, const rt_runner_cfg *c, kn_device dev,
                                      sc_err *err)
{
    bool forced = c->stage_memory_path;
    if ((dev.kind != KN_DEV_CUDA && !forced) || !plain_data_path(r))
        return SC_OK;
    r->dev_prev = !r->first && (forced || rt_transport_on_device(r->tr));
    r->dev_next =
        !r->last && (forced || rt_transport_on_device(r->tr_next != NULL ? r->tr_next : r->tr));
    kn_ctx *ctx = kn_stage_ctx(r->st);
    size_t M = (size_t)r->Mcap, MB = (size_t)(r->Bcap > r->Mcap ? r->Bcap : r->Mcap);
    void *p;
    if (r->dev_prev) {
        SC_CHECK(kn_ctx_alloc(ctx, M * r->in_elems * 4 + 4, &p, err));
        r->in_dev = p;
        SC_CHECK(kn_ctx_alloc(ctx, MB * r->in_elems * sizeof(float) + 4, &p, err));
        r->gin_dev = p;
        if (r->last) {
            SC_CHECK(kn_ctx_alloc(ctx, M * (size_t)r->tps * sizeof(int32_t) + 4, &p, err));
            r->tgt_dev = p;
        }
    }
    if (r->dev_next) {
        SC_CHECK(kn_ctx_alloc(ctx, MB * r->out_elems * sizeof(float) + 4, &p, err));
        r->gout_dev = p;
    }
    return SC_OK;
}

sc_status rt_runner_connect(rt_runner *r, const char *prev_endpoint, const char *next_endpoint,
                            sc_err *err)
{
    if (r->group)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: stage %d replica %d is replicated or has replicated neighbours "
                       "(replicas %d, prev_replicas %d, next_replicas %d): use "
                       "rt_runner_connect_group",
                       r->s, r->rep, r->nrep, r->nrep_prev, r->nrep_next);
    bool has_prev = prev_endpoint != NULL && prev_endpoint[0] != '\0';
    bool has_next = next_endpoint != NULL && next_endpoint[0] != '\0';
    return rt_runner_connect_group(r, &prev_endpoint, has_prev ? 1 : 0, &next_endpoint,
                                   has_next ? 1 : 0, NULL, 0, err);
}

static bool endpoint_given(const char *ep)
{
    return ep != NULL && ep[0] != '\0';
}

/* A send-only link to `endpoint`: both directions point at it, so an activation and a gradient
 * sent on it both land in that inbox. */
static sc_status link_open(rt_runner *r, const char *endpoint, rt_transport **out, sc_err *err)
{
    char ep[RT_ENDPOINT_MAX]; /* a copy 0 with a device all-reduce joins its id to it */
    SC_CHECK(rt_endpoint_pick(endpoint, r->link_cfg.kind, ep, sizeof ep, err));
    rt_transport_destroy(out);
    SC_CHECK(rt_transport_new(out, &r->link_cfg, err));
    return rt_transport_connect(*out, ep, ep, err);
}

static sc_status check_eps(const rt_runner *r, const char *what, const char *const *eps, int n,
                           int want, int skip, sc_err *err)
{
    if (n != want || (n > 0 && eps == NULL))
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: stage %d of %d replica %d: %d %s endpoints given, expected %d",
                       r->s, r->p, r->rep, n, what, want);
    for (int k = 0; k < n; k++)
        if (k != skip && !endpoint_given(eps[k]))
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner: stage %d replica %d: %s endpoint %d is empty", r->s, r->rep,
                           what, k);
    return SC_OK;
}

sc_status rt_runner_connect_group(rt_runner *r, const char *const *prev_eps, int n_prev,
                                  const char *const *next_eps, int n_next,
                                  const char *const *peer_eps, int n_peers, sc_err *err)
{
    SC_CHECK(
        check_eps(r, "previous-stage", prev_eps, n_prev, r->first ? 0 : r->nrep_prev, -1, err));
    SC_CHECK(check_eps(r, "next-stage", next_eps, n_next, r->last ? 0 : r->nrep_next, -1, err));
    if (!(r->nrep == 1 && n_peers == 0))
        SC_CHECK(check_eps(r, "peer-replica", peer_eps, n_peers, r->nrep, r->rep, err));
    if (r->tr == NULL)
        return SC_OK; /* a single unreplicated stage has no one to talk to */
    if (!r->group) {
        /* A neighbour with transports of two kinds publishes both endpoints: take the part of
         * the kind that carries that boundary. */
        char prev[RT_ENDPOINT_MAX] = "", next[RT_ENDPOINT_MAX] = "";
        rt_transport *tn = r->tr_next != NULL ? r->tr_next : r->tr;
        if (n_prev > 0)
            SC_CHECK(
                rt_endpoint_pick(prev_eps[0], rt_transport_kind_of(r->tr), prev, sizeof prev, err));
        if (n_next > 0)
            SC_CHECK(
                rt_endpoint_pick(next_eps[0], rt_transport_kind_of(tn), next, sizeof next, err));
        if (r->tr_next == NULL)
            return rt_transport_connect(r->tr, prev, next, err);
        SC_CHECK(rt_transport_connect(r->tr, prev, NULL, err));
        return rt_transport_connect(r->tr_next, NULL, next, err);
    }
    /* Routed: every send goes over the link of its destination; everything arrives in the own
     * inbox, told apart by (kind, step, micro-batch). Both directions of the inbox's transport
     * point at the inbox itself so it may receive either kind (the all-reduce uses gradients)
     * whatever the stage's position. */
    char own[RT_ENDPOINT_MAX];
    SC_CHECK(rt_endpoint_pick(r->endpoint, rt_transport_kind_of(r->tr), own, sizeof own, err));
    SC_CHECK(rt_transport_connect(r->tr, own, own, err));
    for (int k = 0; k < n_prev; k++)
        SC_CHECK(link_open(r, prev_eps[k], &r->link_prev[k], err));
    for (int k = 0; k < n_next; k++)
        SC_CHECK(link_open(r, next_eps[k], &r->link_next[k], err));
    if (r->ar != NULL) { /* the copies reduce on their GPUs: no host links between them */
        char id[RT_ENDPOINT_MAX];
        bool found = false;
        SC_CHECK(rt_endpoint_part(r->rep == 0 ? r->endpoint : peer_eps[0], RT_REDUCE_SCHEME, id,
                                  sizeof id, &found, err));
        if (!found)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner stage %d replica %d: copy 0's endpoint \"%.80s\" carries no "
                           "%s part, which replica_reduce \"nccl\" needs (is copy 0 configured "
                           "with replica_reduce \"host\"?)",
                           r->s, r->rep, peer_eps[0], RT_REDUCE_SCHEME);
        return rt_allreduce_connect(r->ar, id, err);
    }
    for (int k = 0; k < n_peers && r->nrep > 1; k++)
        if (k != r->rep)
            SC_CHECK(link_open(r, peer_eps[k], &r->link_peer[k], err));
    return SC_OK;
}

/* Activations go to replica mb % next_replicas of the next stage, gradients to replica
 * mb % prev_replicas of the previous one. */
sc_status rt_runner_send_routed(rt_runner *r, rt_msg_kind kind, uint64_t step, int mb,
                                const void *data, size_t bytes, sc_err *err)
{
    rt_transport *t = tr_dir(r, kind == RT_MSG_ACTIVATION);
    if (r->group)
        t = kind == RT_MSG_ACTIVATION ? r->link_next[mb % r->nrep_next]
                                      : r->link_prev[mb % r->nrep_prev];
    if (t == NULL)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "runner stage %d replica %d: not connected (call rt_runner_connect_group)",
                       r->s, r->rep);
    return rt_transport_send_floats(t, kind, step, mb, data, bytes, err);
}
