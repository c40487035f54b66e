/*
 * rt runner: executes one stage's action list per iteration (see runner.h).
 * Not here: choosing the plan, talking to the coordinator (the worker agent does both).
 * pipedream does not run the action list: its stream of minibatches crosses steps (pd_step,
 * rt_runner_flush). Its counters pd_fwd / pd_bwd walk the whole stage's stream (every copy's
 * minibatches, g on copy g % replicas); a copy runs the F and B of its own, and every copy runs
 * the OPT (all-reduce and update) after the backward of each round's last minibatch, so all
 * copies pass the same OPTs and hold the same weights between calls. Own minibatch g lives in
 * slot (g / replicas) % slots.
 * Invariant: a micro-batch mb lives in activation slot (mb / replicas) % slots from its F to its
 * B (mb / replicas numbers this replica's own micro-batches consecutively); in-order schedules
 * never hold more than `slots` consecutive ones, so slots never collide, and slot_mb[] checks it
 * on every F and B. Re-sliced boundaries (sizes per stage): the samples received from a neighbour
 * this iteration always form a prefix [0, prev_off[prev_got]) of the batch (messages are taken in
 * the neighbour's order), and a micro-batch runs only once that prefix covers it. A backward
 * cut (bsplit) runs entries, not micro-batches, in its backward actions; forward micro-batch k
 * stays in its slot until the entries run so far cover all its samples, so every gather finds
 * its sources' slots holding them.
 */
#include "worker/runtime/runner.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/sc_clock.h"
#include "common/sc_json.h"
#include "common/sc_log.h"
#include "common/sc_util.h"
#include "kernels/device.h"
#include "kernels/model.h"
#include "kernels/optim.h"
#include "kernels/stage.h"
#include "worker/data/data.h"
#include "worker/runtime/schedule.h"
#include "worker/transport/allreduce.h"
#include "worker/transport/transport.h"

#define CKPT_MAGIC "SCRTCKPT"
#define CKPT_VERSION 1u

struct rt_runner {
    int p, s, first_block, last_block, nb;
    int batch;    /* samples per iteration */
    int m;        /* micro-batches run per iteration (after slicing) */
    int Mcap;     /* the largest micro-batch: the stage's capacity */
    int *mb_size; /* [m] samples of each micro-batch */
    int *mb_off;  /* [m] first sample of each micro-batch in the batch */
    bool first, last;
    double extra_f_s, extra_b_s, extra_o_s;
    kn_model *model;
    kn_stage *st;
    rt_schedule *sched;
    rt_data *data;         /* first and last stage only */
    rt_transport *tr;      /* n_stages > 1 only: both boundaries, or the previous one when split */
    rt_transport *tr_next; /* the next boundary's when its kind differs (transport_next), else
                            * NULL */
    kn_optim_cfg optim;
    int slots;
    int *slot_mb;               /* [slots]: micro-batch held by each slot, -1 when free */
    size_t in_elems, out_elems; /* per sample */
    bool in_tokens;
    int tps;
    void *in_buf;     /* M * in_elems (int32 or float) */
    int32_t *tgt_buf; /* M * tps */
    float *out_buf;   /* M * out_elems */
    float *gout_buf;  /* M * out_elems: gradient of the output */
    float *gin_buf;   /* M * in_elems: gradient of the input */
    int gin_mb;       /* micro-batch whose input gradient gin_buf holds, -1 for none */
    /* A GPU stage whose transport takes device memory (nccl; local with device payloads), on
     * the synchronous schedules without copies or sizes per stage: activations and gradients
     * cross that boundary from and into device buffers (in_dev, gout_dev, gin_dev, the slot's
     * own output), never through host memory. */
    bool dev_prev, dev_next; /* the boundary to the previous / next stage does */
    void *in_dev;            /* M * in_elems: a received input (dev_prev) */
    int32_t *tgt_dev;        /* M * tps: the last stage's targets (dev_prev) */
    float *gin_dev;          /* MB * in_elems: the input gradient to send (dev_prev) */
    float *gout_dev;         /* MB * out_elems: a received output gradient (dev_next) */
    size_t np, nstate;
    /* The parameters, gradients and optimizer state live on the stage's device, where the
     * optimizer steps (kn_stage_step). Host copies: params, the newest weights under pipedream
     * (each forward stashes them) and for checkpoints; grads, for the copies' all-reduce; state,
     * for checkpoints. */
    float *params, *grads, *state;
    double *norms;                 /* [nb] */
    bool broken;                   /* a step failed half-way */
    /* pipedream: an optimizer step after every minibatch's backward, which runs with the
     * weights its forward used (stashed per activation slot). Versions count optimizer steps. */
    bool pipedream;
    float **stash;       /* [slots][np]: the parameters each in-flight forward used */
    uint64_t *stash_ver; /* [slots] */
    uint64_t *ver_fwd;   /* [m] version each micro-batch's forward used, this step */
    /* The asynchronous stream: minibatch g is micro-batch g % m of step pd_base + g / m, run by
     * copy g % nrep, and lives in slot (g / nrep) % slots on it; pd_fwd / pd_bwd count the whole
     * stage's forwards / backwards passed since the last fill began (the stage's backward of k
     * follows its forward of k + pd_warm), pd_own_f / pd_own_b this copy's own, so
     * pd_own_f - pd_own_b are in flight here (never more than slots = pd_warm / nrep + 1). */
    uint64_t pd_base, pd_fwd, pd_bwd, pd_own_f, pd_own_b;
    int pd_warm;
    double pd_loss_own;  /* last stage with copies: own loss (x samples) of the open round */
    bool pd_stash_loaded; /* the device holds a stash (an own backward's), not the newest */
    uint64_t *stash_g;   /* [slots] minibatch held by each slot */
    rt_pd_event *events; /* [2m + slots + p] this call's forwards and backwards */
    int n_events;
    char endpoint[RT_ENDPOINT_MAX];
    /* Replicated stages. The action list run is the schedule's list of this stage restricted to
     * this replica's micro-batches (acts, owned, when group; else the schedule's own list). */
    int nrep, rep, nrep_prev, nrep_next;
    int *stage_reps; /* [p] copies of every stage (cfg stage_replicas, or the local counts) */
    bool group;      /* some replica count around this stage is > 1: the routed transports */
    rt_action *acts; /* [nacts] */
    int nacts;
    int halved;                /* sliced: the first `halved` micro-batches run as 2 halves each */
    int own_mbs;               /* micro-batches this replica runs */
    int own_samples;           /* their samples */
    rt_transport_cfg link_cfg; /* for the send-only links below */
    /* group only: send-only transports, one per destination (each also binds a throwaway inbox
     * nobody connects to, since a transport always has one); NULL where not needed. */
    rt_transport **link_prev; /* [nrep_prev]: replica k of the previous stage */
    rt_transport **link_next; /* [nrep_next] */
    rt_transport **link_peer; /* [nrep]: the other replicas of this stage */
    rt_allreduce *ar;         /* replica_reduce "nccl": the copies' device all-reduce, else NULL */
    unsigned char *red_in;    /* a peer's gradients and loss during the all-reduce */
    float *red_sum;           /* [np] the sum in replica order */
    /* Sizes per stage: the neighbours' cuts as prefix offsets (prev_off[k] = first sample of the
     * previous stage's micro-batch k, prev_off[n_prev] = batch), the messages taken from each so
     * far this iteration, and the iteration-wide buffers they are gathered into by sample. */
    bool resliced;
    int n_prev, n_next;
    int *prev_off, *next_off;
    int prev_got, next_got;
    bool next_bw_given;    /* the gradients' cut came as next_backward_sizes (for messages) */
    unsigned char *in_all; /* batch * in_elems (int32 or float): inputs received, not first */
    float *gout_all;       /* batch * out_elems: output gradients received, not last */
    /* Backward cut (bsplit: it differs from the forward micro-batches). Entry j covers samples
     * [bw_off[j], bw_off[j + 1]); bw_mb[j] is the forward micro-batch with exactly those samples,
     * whose slot it runs on, or -1: its samples' activations are gathered from the forwards it
     * overlaps into the stage's gather slot (index `slots`, gather_cap samples). In the action
     * list (acts) the backward actions' mb is the entry. */
    bool bsplit;
    int nbw;
    int *bw_off, *bw_mb;
    int Bcap;               /* the largest backward entry (Mcap without a backward cut) */
    int gather_cap;         /* 0: no entry is gathered, no gather slot */
    kn_stage_range *ranges; /* [m]: one gather's sources */
};

rt_runner_cfg rt_runner_cfg_default(void)
{
    rt_runner_cfg c;
    memset(&c, 0, sizeof c);
    c.n_stages = 1;
    c.schedule = "gpipe";
    c.batch_size = 8;
    c.microbatches = 1;
    c.seed = 1;
    c.data_kind = "synthetic";
    c.optimizer = "adamw";
    c.lr = 3e-4;
    c.momentum = 0.9;
    c.device = "cpu";
    c.transport = "zmq";
    c.bind_endpoint = "tcp://127.0.0.1:0";
    c.timeout_ms = 30000;
    c.sliced_warmup = -1;
    c.replicas = 1;
    c.replica = 0;
    c.prev_replicas = 1;
    c.next_replicas = 1;
    return c;
}

void rt_runner_destroy(rt_runner **rp)
{
    if (rp == NULL || *rp == NULL)
        return;
    rt_runner *r = *rp;
    rt_allreduce_destroy(&r->ar);
    rt_transport_destroy(&r->tr);
    rt_transport_destroy(&r->tr_next);
    for (int k = 0; r->link_prev != NULL && k < r->nrep_prev; k++)
        rt_transport_destroy(&r->link_prev[k]);
    for (int k = 0; r->link_next != NULL && k < r->nrep_next; k++)
        rt_transport_destroy(&r->link_next[k]);
    for (int k = 0; r->link_peer != NULL && k < r->nrep; k++)
        rt_transport_destroy(&r->link_peer[k]);
    free(r->link_prev);
    free(r->link_next);
    free(r->link_peer);
    free(r->acts);
    free(r->stage_reps);
    free(r->prev_off);
    free(r->next_off);
    free(r->bw_off);
    free(r->bw_mb);
    free(r->ranges);
    free(r->in_all);
    free(r->gout_all);
    free(r->red_in);
    free(r->red_sum);
    rt_data_destroy(&r->data);
    rt_schedule_destroy(&r->sched);
    if (r->st != NULL) {
        kn_ctx *ctx = kn_stage_ctx(r->st);
        kn_ctx_free(ctx, r->in_dev);
        kn_ctx_free(ctx, r->tgt_dev);
        kn_ctx_free(ctx, r->gin_dev);
        kn_ctx_free(ctx, r->gout_dev);
    }
    kn_stage_destroy(&r->st);
    kn_model_destroy(&r->model);
    free(r->slot_mb);
    free(r->mb_size);
    free(r->mb_off);
    free(r->in_buf);
    free(r->tgt_buf);
    free(r->out_buf);
    free(r->gout_buf);
    free(r->gin_buf);
    free(r->params);
    free(r->grads);
    free(r->state);
    free(r->norms);
    for (int i = 0; r->stash != NULL && i < r->slots; i++)
        free(r->stash[i]);
    free(r->stash);
    free(r->stash_ver);
    free(r->ver_fwd);
    free(r->stash_g);
    free(r->events);
    free(r);
    *rp = NULL;
}

static sc_status parse_model(const char *json, kn_model **out, sc_err *err)
{
    if (json == NULL)
        return SC_ERRF(err, SC_ERR_INVALID, "runner: no model document given");
    sc_jdoc *doc = NULL;
    SC_CHECK(sc_jdoc_parse(&doc, "model", json, strlen(json), err));
    sc_jnode root = sc_jdoc_root(doc);
    sc_status rc = kn_model_from_node(out, &root, err);
    sc_jdoc_destroy(&doc);
    return rc;
}

static sc_status parse_optim(const rt_runner_cfg *c, kn_optim_cfg *o, sc_err *err)
{
    if (c->optimizer != NULL && strcmp(c->optimizer, "adamw") == 0)
        *o = kn_optim_adamw_default();
    else if (c->optimizer != NULL && strcmp(c->optimizer, "sgd") == 0)
        *o = kn_optim_sgd_default();
    else
        return SC_ERRF(err, SC_ERR_INVALID,
                       "optimizer.kind: unknown \"%s\"; valid: \"adamw\", "
                       "\"sgd\"",
                       c->optimizer != NULL ? c->optimizer : "(null)");
    if (!(c->lr > 0.0) || c->weight_decay < 0.0 || c->momentum < 0.0 || c->momentum >= 1.0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "optimizer: lr must be > 0 (got %g), weight_decay "
                       ">= 0 (got %g), momentum in [0, 1) (got %g)",
                       c->lr, c->weight_decay, c->momentum);
    o->lr = (float)c->lr;
    o->weight_decay = (float)c->weight_decay;
    if (o->kind == KN_OPT_SGD)
        o->momentum = (float)c->momentum;
    return SC_OK;
}

static sc_status check_layout(const rt_runner_cfg *c, int nblocks, sc_err *err)
{
    if (c->n_stages < 1 || c->stage < 0 || c->stage >= c->n_stages)
        return SC_ERRF(err, SC_ERR_INVALID, "runner: stage %d of %d stages; valid: 0..n_stages-1",
                       c->stage, c->n_stages);
    if (c->first_block < 0 || c->last_block < c->first_block || c->last_block >= nblocks)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: blocks [%d, %d]; the model has blocks 0..%d (first <= last)",
                       c->first_block, c->last_block, nblocks - 1);
    if (c->stage == 0 && c->first_block != 0)
        return SC_ERRF(err, SC_ERR_INVALID, "runner: stage 0 must start at block 0, not %d",
                       c->first_block);
    if (c->stage == c->n_stages - 1 && c->last_block != nblocks - 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: the last stage must end at the model's last block %d, not %d",
                       nblocks - 1, c->last_block);
    if (c->microbatches < 1 || c->batch_size < 1 ||
        (c->microbatch_sizes == NULL && c->batch_size % c->microbatches != 0))
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: batch_size %d must be a positive multiple of microbatches %d "
                       "(or give microbatch_sizes)",
                       c->batch_size, c->microbatches);
    if (c->timeout_ms <= 0)
        return SC_ERRF(err, SC_ERR_INVALID, "runner: timeout_ms must be > 0, got %d",
                       c->timeout_ms);
    if (c->replicas < 1 || c->replica < 0 || c->replica >= c->replicas)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: replica %d of replicas %d; valid: replicas >= 1, replica "
                       "0..replicas-1",
                       c->replica, c->replicas);
    if (c->prev_replicas < 1 || c->next_replicas < 1)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: prev_replicas %d, next_replicas %d; each must be >= 1 (1 when "
                       "the neighbour is not replicated or absent)",
                       c->prev_replicas, c->next_replicas);
    return SC_OK;
}

/* Every stage's copy count: cfg stage_replicas (checked against the three counts the stage was
 * given), or those three with 1 for the other stages. */
static sc_status plan_stage_replicas(rt_runner *r, const rt_runner_cfg *c, sc_err *err)
{
    r->stage_reps = calloc((size_t)r->p, sizeof *r->stage_reps);
    SC_ALLOC_CHECK(r->stage_reps, err);
    for (int st = 0; st < r->p; st++) {
        int known = st == r->s       ? r->nrep
                    : st == r->s - 1 ? r->nrep_prev
                    : st == r->s + 1 ? r->nrep_next
                                     : 1;
        if (c->stage_replicas == NULL) {
            r->stage_reps[st] = known;
            continue;
        }
        int given = c->stage_replicas[st];
        if (given < 1)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner stage %d: stage_replicas[%d] = %d; valid: >= 1 copies", r->s, st,
                           given);
        if (st >= r->s - 1 && st <= r->s + 1 && given != known)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner stage %d: stage_replicas[%d] = %d; valid: equal to %s (%d)",
                           r->s, st, given,
                           st == r->s       ? "replicas"
                           : st == r->s - 1 ? "prev_replicas"
                                            : "next_replicas",
                           known);
        r->stage_reps[st] = given;
    }
    return SC_OK;
}

/* pipedream (1F1B-RR, see rt_schedule_pipedream_warmup): the warm-up and slots of this stage,
 * and, when any stage has copies, the checks that its stream cannot deadlock nor outgrow them. */
static sc_status plan_pipedream(rt_runner *r, sc_err *err)
{
    /* Rounds of a stage's r copies must not straddle steps: a step then ends with whole rounds
     * on every stage (the last stage's copies complete theirs within the step, so each reports
     * the step's loss), and a flush leaves no round half done. */
    long long lcm = 1; /* of the copy counts; stops growing past 2^30, where no m reaches */
    bool any = false;
    for (int st = 0; st < r->p; st++) {
        long long a = lcm, b = r->stage_reps[st];
        while (b != 0) {
            long long t = a % b;
            a = b;
            b = t;
        }
        if (lcm <= 1ll << 30)
            lcm = lcm / a * r->stage_reps[st];
        any = any || r->stage_reps[st] > 1;
    }
    if (r->m % lcm != 0) {
        char list[160] = "";
        for (int st = 0, at = 0; st < r->p && at < (int)sizeof list - 16; st++)
            at += snprintf(list + at, sizeof list - (size_t)at, "%s%d", st ? ", " : "",
                           r->stage_reps[st]);
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: schedule \"pipedream\" with stage copies [%s] needs "
                       "microbatches to be a multiple of every stage's copies, so that rounds "
                       "of copies never straddle steps; got %d; valid: %lld, %lld, ...",
                       r->s, list, r->m, lcm, 2 * lcm);
    }
    r->pd_warm = rt_schedule_pipedream_warmup(r->p, r->stage_reps, r->s);
    r->slots = rt_schedule_pipedream_slots(r->p, r->stage_reps, r->s);
    r->own_mbs = r->m / r->nrep;
    for (int j = r->rep; j < r->m; j += r->nrep)
        r->own_samples += r->mb_size[j];
    if (!any)
        return SC_OK; /* the textbook stream: stage s keeps p-s minibatches */
    /* Dry runs of the whole job's copies over streams of 1, 2, ... steps and their drains, long
     * enough to pass the fill of stage 0 (W_0 < all copies) and some rounds of steady state. */
    int total = 0;
    for (int st = 0; st < r->p; st++)
        total += r->stage_reps[st];
    sc_status rc = SC_OK;
    for (int len = r->m; rc == SC_OK; len += r->m) {
        rt_schedule *ps = NULL;
        rt_action *acts = NULL;
        int n = 0, slots = 0;
        rc = rt_schedule_new_pipedream(&ps, r->p, r->stage_reps, len, err);
        if (rc == SC_OK)
            rc = rt_schedule_validate_replicas(ps, NULL, err);
        if (rc == SC_OK)
            rc = rt_schedule_restrict(ps, r->s, r->nrep, r->rep, &acts, &n, &slots, err);
        if (rc == SC_OK && slots > r->slots)
            rc = SC_ERRF(err, SC_ERR_INTERNAL,
                         "runner stage %d copy %d: the pipedream stream of %d minibatches holds "
                         "%d in flight, more than its %d slots",
                         r->s, r->rep, len, slots, r->slots);
        free(acts);
        rt_schedule_destroy(&ps);
        if (len >= 2 * total + 2 * lcm)
            break;
    }
    return rc;
}

/* The schedule and, for replicated stages, the restricted action list and its checks. The runner
 * knows the replica counts of its own stage and its two neighbours, and of the others when given
 * stage_replicas (else it takes them as unreplicated; the plan's whole vector can be checked with
 * rt_schedule_validate_replicas). 1f1b's warm-up counts the copies of every later stage
 * (rt_schedule_new_replicated), so a replicated 1f1b or sliced stage with stages beyond its next
 * one needs the vector. */
/* The synchronous lists: gpipe or 1f1b over r->m micro-batches, or sliced (r->halved > 0). */
static sc_status new_schedule(rt_runner *r, rt_schedule_kind skind, sc_err *err)
{
    if (r->halved > 0)
        return rt_schedule_new_sliced(&r->sched, r->p, r->m, r->halved, r->stage_reps, err);
    return rt_schedule_new_replicated(&r->sched, skind, r->p, r->m, r->stage_reps, err);
}

static sc_status plan_replicas(rt_runner *r, const rt_runner_cfg *c, rt_schedule_kind skind,
                               sc_err *err)
{
    r->nrep = c->replicas;
    r->rep = c->replica;
    r->nrep_prev = r->first ? 1 : c->prev_replicas;
    r->nrep_next = r->last ? 1 : c->next_replicas;
    r->group = r->nrep > 1 || r->nrep_prev > 1 || r->nrep_next > 1;
    SC_CHECK(plan_stage_replicas(r, c, err));
    if (r->pipedream) {
        SC_CHECK(rt_schedule_new(&r->sched, skind, r->p, r->m, err));
        return plan_pipedream(r, err);
    }
    if (r->group && skind == RT_SCHED_1F1B && c->stage_replicas == NULL && r->s + 2 < r->p)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d of %d: schedule \"%s\" with replicated stages (replicas "
                       "%d, prev_replicas %d, next_replicas %d) needs stage_replicas, the copies "
                       "of every stage: its warm-up counts the copies of stages %d..%d; valid: "
                       "the plan's [n_stages] vector, the same for every runner",
                       r->s, r->p, c->schedule != NULL ? c->schedule : "1f1b", r->nrep,
                       r->nrep_prev, r->nrep_next, r->s, r->p - 1);
    if (!r->group) {
        /* the copies of stages further on still set the warm-up (1, 1, 4: stage 0 warms up
         * with 5 forwards) */
        SC_CHECK(new_schedule(r, skind, err));
        r->own_mbs = r->m;
        r->own_samples = r->batch;
        r->slots = r->sched->slots[r->s];
        return SC_OK;
    }
    /* sliced is 1f1b over the micro-batches with the first k cut in halves: each half is a
     * micro-batch of its own here (r->m counts them), routed round-robin like any other */
    int most = r->nrep > r->nrep_prev ? r->nrep : r->nrep_prev;
    most = r->nrep_next > most ? r->nrep_next : most;
    if (most > r->m)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: %d replicas (stage %d: replicas %d, prev_replicas %d, "
                       "next_replicas %d) but only %d micro-batches; every replica needs one: "
                       "microbatches >= replicas",
                       most, r->s, r->nrep, r->nrep_prev, r->nrep_next, r->m);
    SC_CHECK(new_schedule(r, skind, err));
    SC_CHECK(rt_schedule_validate_replicas(r->sched, r->stage_reps, err));
    SC_CHECK(
        rt_schedule_restrict(r->sched, r->s, r->nrep, r->rep, &r->acts, &r->nacts, &r->slots, err));
    for (int j = r->rep; j < r->m; j += r->nrep) {
        r->own_mbs++;
        r->own_samples += r->mb_size[j];
    }
    return SC_OK;
}

static sc_status alloc_buffers(rt_runner *r, sc_err *err)
{
    /* forwards use the first three, backwards (their own cut) the gradients */
    size_t M = (size_t)r->Mcap, MB = (size_t)(r->Bcap > r->Mcap ? r->Bcap : r->Mcap);
    r->slot_mb = malloc((size_t)r->slots * sizeof *r->slot_mb);
    r->in_buf = calloc(M * r->in_elems + 1, 4);
    r->tgt_buf = calloc(M * (size_t)r->tps + 1, sizeof *r->tgt_buf);
    r->out_buf = calloc(M * r->out_elems + 1, sizeof *r->out_buf);
    r->gout_buf = calloc(MB * r->out_elems + 1, sizeof *r->gout_buf);
    r->gin_buf = calloc(MB * r->in_elems + 1, sizeof *r->gin_buf);
    r->params = calloc(r->np + 1, sizeof *r->params);
    r->grads = calloc(r->np + 1, sizeof *r->grads);
    r->state = calloc(r->nstate + 1, sizeof *r->state);
    r->norms = calloc((size_t)r->nb, sizeof *r->norms);
    if (!r->slot_mb || !r->in_buf || !r->tgt_buf || !r->out_buf || !r->gout_buf || !r->gin_buf ||
        !r->params || !r->grads || !r->state || !r->norms)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory allocating the runner's host buffers");
    for (int i = 0; i < r->slots; i++)
        r->slot_mb[i] = -1;
    r->gin_mb = -1;
    return SC_OK;
}

/* Sizes and offsets of the micro-batches actually run: the configured ones, with the first k cut
 * in halves for the sliced schedule. Sample identities do not change: micro-batch i covers samples
 * [mb_off[i], mb_off[i] + mb_size[i]) of the batch whatever the cut. */
static sc_status plan_microbatches(rt_runner *r, const rt_runner_cfg *c, bool sliced, sc_err *err)
{
    int m = c->microbatches, k = 0;
    if (sliced) {
        k = c->sliced_warmup < 0 ? c->n_stages - 1 : c->sliced_warmup;
        if (k > m)
            k = m;
    }
    r->m = m + k;
    r->halved = k;
    r->mb_size = calloc((size_t)r->m, sizeof *r->mb_size);
    r->mb_off = calloc((size_t)r->m, sizeof *r->mb_off);
    if (r->mb_size == NULL || r->mb_off == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory planning micro-batches");
    int64_t total = 0;
    int n = 0;
    for (int i = 0; i < m; i++) {
        int size = c->microbatch_sizes != NULL ? c->microbatch_sizes[i] : c->batch_size / m;
        if (size < 1 || size > c->batch_size)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner: microbatch_sizes[%d] = %d; each size must be in [1, "
                           "batch_size %d]",
                           i, size, c->batch_size);
        if (i < k && size < 2)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner: sliced warm-up cannot halve micro-batch %d of %d sample; use "
                           "sliced_warmup < %d",
                           i, size, i + 1);
        int parts = i < k ? 2 : 1;
        for (int part = 0; part < parts; part++) {
            int piece = parts == 1 ? size : part == 0 ? size / 2 : size - size / 2;
            r->mb_size[n] = piece;
            r->mb_off[n] = (int)total;
            total += piece;
            if (piece > r->Mcap)
                r->Mcap = piece;
            n++;
        }
    }
    if (total != c->batch_size)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: microbatch_sizes sum to %lld, batch_size is %d", (long long)total,
                       c->batch_size);
    return SC_OK;
}

/* One neighbour's cut (`sizes`, NULL: the same as this stage's) as prefix offsets in *off. */
static sc_status plan_neighbour(rt_runner *r, const char *what, const int *sizes, int n, int **off,
                                int *count, sc_err *err)
{
    if (sizes == NULL) {
        n = r->m;
        sizes = r->mb_size;
    } else if (n < 1 || n > r->batch) {
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: n_%s %d; valid: 1..batch_size %d (one size per "
                       "entry of that cut)",
                       r->s, what, n, r->batch);
    }
    *off = calloc((size_t)n + 1, sizeof **off);
    SC_ALLOC_CHECK(*off, err);
    int64_t total = 0;
    for (int k = 0; k < n; k++) {
        if (sizes[k] < 1 || sizes[k] > r->batch)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner stage %d: %s[%d] = %d; each size must be in [1, batch_size %d]",
                           r->s, what, k, sizes[k], r->batch);
        (*off)[k] = (int)total;
        total += sizes[k];
        if (total > r->batch)
            break;
    }
    if (total != r->batch)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner stage %d: %s sum to %s%lld, batch_size is %d; a stage's sizes "
                       "must cover the batch exactly",
                       r->s, what, total > r->batch ? "more than " : "", (long long)total,
                       r->batch);
    (*off)[n] = (int)total;
    *count = n;
    return SC_OK;
}

/* The backward cut: which entries coincide with a forward micro-batch and which are gathered
 * (the largest of those sizes the gather slot). */
static sc_status plan_backward(rt_runner *r, const rt_runner_cfg *c, sc_err *err)
{
    r->Bcap = r->Mcap;
    if (c->backward_sizes == NULL)
        return SC_OK;
    SC_CHECK(plan_neighbour(r, "backward_sizes", c->backward_sizes, c->n_backward_sizes, &r->bw_off,
                            &r->nbw, err));
    r->bsplit = r->nbw != r->m;
    for (int j = 0; j < r->nbw && !r->bsplit; j++)
        r->bsplit = r->bw_off[j] != r->mb_off[j];
    if (!r->bsplit)
        return SC_OK; /* the forward cut again: nothing changes */
    r->bw_mb = calloc((size_t)r->nbw, sizeof *r->bw_mb);
    r->ranges = calloc((size_t)r->m, sizeof *r->ranges);
    SC_ALLOC_CHECK(r->bw_mb, err);
    SC_ALLOC_CHECK(r->ranges, err);
    r->Bcap = 0;
    for (int j = 0, k = 0; j < r->nbw; j++) {
        int a = r->bw_off[j], b = r->bw_off[j + 1];
        while (r->mb_off[k] + r->mb_size[k] <= a) /* the forward holding sample a */
            k++;
        bool same = r->mb_off[k] == a && r->mb_off[k] + r->mb_size[k] == b;
        r->bw_mb[j] = same ? k : -1;
        if (!same && b - a > r->gather_cap)
            r->gather_cap = b - a;
        if (b - a > r->Bcap)
            r->Bcap = b - a;
    }
    return SC_OK;
}

/* Sizes per stage: checks the neighbours' lists and the backward cut, and allocates the gather
 * buffers' offsets. */
static sc_status plan_reslice(rt_runner *r, const rt_runner_cfg *c, bool unequal, sc_err *err)
{
    r->resliced = c->prev_sizes != NULL || c->next_sizes != NULL || c->backward_sizes != NULL ||
                  c->next_backward_sizes != NULL;
    if (!r->resliced)
        return SC_OK;
    if (r->first && c->prev_sizes != NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: stage 0 has no previous stage; prev_sizes must be NULL");
    if (r->last && c->next_sizes != NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: stage %d is the last stage; next_sizes must be NULL", r->s);
    if (r->last && c->next_backward_sizes != NULL)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "runner: stage %d is the last stage; next_backward_sizes must be NULL",
                       r->s);
    if (!unequal && (c->schedule == NULL || strcmp(c->schedule, "gpipe") != 0))
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "runner: sizes per stage (prev_sizes / next_sizes / backward_sizes / "
                       "next_backward_sizes) with schedule \"%s\"; valid: \"gpipe\", "
                       "\"unequal\" (fill-drain)",
                       c->schedule != NULL ? c->schedule : "(null)");
    if (c->replicas != 1 || (!r->first && c->prev_replicas != 1) ||
        (!r->last && c->next_replicas != 1))
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "runner: sizes per stage (prev_sizes / next_sizes / backward_sizes / "
                       "next_backward_sizes) with replicated stages (replicas %d, prev_replicas "
                       "%d, next_replicas %d); valid: all 1",
                       c->replicas, c->prev_replicas, c->next_replicas);
    if (!r->first)
        SC_CHECK(plan_neighbour(r, "prev_sizes", c->prev_sizes, c->n_prev_sizes, &r->prev_off,
                                &r->n_prev, err));
    if (!r->last) {
        /* next_off is the cut of the gradients received: the next stage's backward cut */
        SC_CHECK(plan_neighbour(r, "next_sizes", c->next_sizes, c->n_next_sizes, &r->next_off,
                                &r->n_next, err));
        if (c->next_backward_sizes != NULL) {
            free(r->next_off);
            r->next_off = NULL;
            SC_CHECK(plan_neighbour(r, "next_backward_sizes", c->next_backward_sizes,
                                    c->n_next_backward_sizes, &r->next_off, &r->n_next, err));
        }
    }
    r->next_bw_given = c->next_backward_sizes != NULL;
    return plan_backward(r, c, err);
}

/* Backward cut: the stage's gpipe forwards in their order, then its backward entries ascending,
 * each received (the gradients of its samples, from the next stage's own cut), run and sent,
 * then the optimizer step. As with the forward cuts, a receive waits only for the next stage's
 * backwards, which wait only for stages further down, so nothing deadlocks. */
static sc_status plan_backward_actions(rt_runner *r, sc_err *err)
{
    const rt_action *fwd = r->sched->actions[r->s];
    int n = r->sched->count[r->s];
    r->acts = malloc(((size_t)n + 3 * (size_t)r->nbw + 1) * sizeof *r->acts);
    SC_ALLOC_CHECK(r->acts, err);
    int c = 0;
    for (int i = 0; i < n; i++)
        if (fwd[i].kind == RT_ACT_RECV_F || fwd[i].kind == RT_ACT_F || fwd[i].kind == RT_ACT_SEND_F)
            r->acts[c++] = fwd[i];
    for (int j = 0; j < r->nbw; j++) {
        if (!r->last)
            r->acts[c++] = (rt_action){RT_ACT_RECV_B, j};
        r->acts[c++] = (rt_action){RT_ACT_B, j};
        if (!r->first)
            r->acts[c++] = (rt_action){RT_ACT_SEND_B, j};
    }
    r->acts[c++] = (rt_action){RT_ACT_OPT, -1};
    r->nacts = c;
    return SC_OK;
}

static sc_status alloc_stash(rt_runner *r, sc_err *err)
{
    r->stash = calloc((size_t)r->slots, sizeof *r->stash);
    r->stash_ver = calloc((size_t)r->slots, sizeof *r->stash_ver);
    r->ver_fwd = calloc((size_t)r->m, sizeof *r->ver_fwd);
    r->stash_g = calloc((size_t)r->slots, sizeof *r->stash_g);
    /* a step runs at most m forwards and m backwards, a flush at most `slots` backwards */
    r->events = calloc((size_t)(2 * r->m + r->slots + r->p), sizeof *r->events);
    if (r->stash == NULL || r->stash_ver == NULL || r->ver_fwd == NULL || r->stash_g == NULL ||
        r->events == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory allocating weight stashes");
    for (int i = 0; i < r->slots; i++) {
        r->stash[i] = malloc(r->np * sizeof **r->stash + 1);
        if (r->stash[i] == NULL)
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory allocating weight stashes");
    }
    return SC_OK;
}

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
    return most;
}

/* The data-plane transports: one for both boundaries (the usual case), or, when cfg
 * transport_next names another kind than transport, r->tr for the previous boundary and
 * r->tr_next for the next one; the published endpoint then joins both ("A|B", see
 * rt_runner_endpoint). */
/* Whether the schedule's data path may hand the transports device memory (the synchronous
 * schedules without copies or sizes per stage: the other paths stage through host buffers). */
static bool plain_data_path(const rt_runner *r)
{
    return !r->group && !r->pipedream && !r->resliced;
}

static sc_status open_transports(rt_runner *r, const rt_runner_cfg *c, kn_device dev, sc_err *err)
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
static sc_status open_reduce(rt_runner *r, const rt_runner_cfg *c, kn_device dev, sc_err *err)
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
static sc_status device_boundaries(rt_runner *r, const rt_runner_cfg *c, kn_device dev, sc_err *err)
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

static sc_status runner_init(rt_runner *r, const rt_runner_cfg *c, sc_err *err)
{
    SC_CHECK(parse_model(c->model_json, &r->model, err));
    SC_CHECK(check_layout(c, kn_model_block_count(r->model), err));
    rt_schedule_kind skind = RT_SCHED_1F1B;
    bool sliced = c->schedule != NULL && strcmp(c->schedule, "sliced") == 0;
    bool unequal = c->schedule != NULL && strcmp(c->schedule, "unequal") == 0;
    r->pipedream = c->schedule != NULL && strcmp(c->schedule, "pipedream") == 0;
    if (unequal)
        skind = RT_SCHED_GPIPE; /* fill-drain over this stage's own sizes */
    else if (!sliced && !r->pipedream)
        SC_CHECK(rt_schedule_kind_parse(c->schedule, "schedule", &skind, err));
    SC_CHECK(parse_optim(c, &r->optim, err));
    kn_device dev;
    SC_CHECK(kn_device_parse(c->device != NULL ? c->device : "cpu", "device", &dev, err));
    r->p = c->n_stages;
    r->s = c->stage;
    r->first = r->s == 0;
    r->last = r->s == r->p - 1;
    r->first_block = c->first_block;
    r->last_block = c->last_block;
    r->nb = c->last_block - c->first_block + 1;
    r->batch = c->batch_size;
    SC_CHECK(plan_microbatches(r, c, sliced, err));
    SC_CHECK(plan_reslice(r, c, unequal, err));
    r->extra_f_s = c->extra_forward_s;
    r->extra_b_s = c->extra_backward_s;
    r->extra_o_s = c->extra_optimizer_s;

    SC_CHECK(plan_replicas(r, c, skind, err));
    if (r->bsplit)
        SC_CHECK(plan_backward_actions(r, err));
    /* pipedream: the stream crosses steps: W_s / r_s + 1 (p-s unreplicated) whatever m;
     * plan_pipedream's dry runs checked a copy never holds more */
    int bound = r->halved > 0
                    ? rt_schedule_sliced_slots_bound(r->p, r->stage_reps, r->s, r->m, r->halved)
                    : rt_schedule_slots_bound(r->pipedream ? RT_SCHED_PIPEDREAM : skind, r->p,
                                              r->stage_reps, r->s, r->m);
    if (r->slots > bound)
        return SC_ERRF(err, SC_ERR_INTERNAL,
                       "schedule %s needs %d activation slots on stage %d, "
                       "more than its bound %d",
                       rt_schedule_kind_name(skind), r->slots, r->s, bound);

    kn_stage_cfg scfg = kn_stage_cfg_default(c->first_block, c->last_block, dev, r->Mcap);
    scfg.slots = r->slots;
    scfg.gather_microbatch = r->gather_cap; /* one more slot, counted in the stage's memory */
    scfg.optim = r->optim;
    SC_CHECK(kn_stage_new_cfg(&r->st, r->model, &scfg, err));
    r->in_elems = kn_stage_input_per_sample(r->st);
    r->in_tokens = kn_stage_input_is_tokens(r->st);
    r->out_elems = kn_stage_output_per_sample(r->st);
    r->tps = kn_model_targets_per_sample(r->model);
    r->np = kn_stage_param_count(r->st);
    r->nstate = r->np * (size_t)kn_optim_state_per_param(r->optim.kind);
    SC_CHECK(alloc_buffers(r, err));
    if (r->resliced) {
        r->in_all = r->first ? NULL : calloc((size_t)r->batch * r->in_elems + 1, 4);
        r->gout_all = r->last ? NULL : calloc((size_t)r->batch * r->out_elems + 1, sizeof(float));
        if ((!r->first && r->in_all == NULL) || (!r->last && r->gout_all == NULL))
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory allocating the re-slicing buffers");
    }
    if (r->pipedream)
        SC_CHECK(alloc_stash(r, err));
    SC_CHECK(kn_stage_params_to_host(r->st, r->params, err));
    /* pipedream steps per micro-batch, so each loss is its own micro-batch's mean (the default) */
    if (r->last && !r->pipedream)
        kn_stage_set_loss_scale(r->st, 1.0f / (float)((size_t)r->batch * (size_t)r->tps));

    if (r->first || r->last) {
        rt_data_cfg dc;
        memset(&dc, 0, sizeof dc);
        SC_CHECK(rt_data_kind_parse(c->data_kind, "data.kind", &dc.kind, err));
        const kn_block *b0 = kn_model_block(r->model, 0);
        dc.path = c->data_path;
        dc.seed = c->seed;
        dc.inputs_are_tokens = b0->in_tokens;
        dc.input_elems = b0->in_floats;
        dc.targets_per_sample = r->tps;
        dc.classes = kn_model_classes(r->model);
        SC_CHECK(rt_data_new(&r->data, &dc, err));
    }
    if (r->group) {
        r->red_in = malloc(r->np * sizeof(float) + sizeof(double) + 1);
        r->red_sum = malloc(r->np * sizeof(float) + 1);
        r->link_prev = calloc((size_t)r->nrep_prev, sizeof *r->link_prev);
        r->link_next = calloc((size_t)r->nrep_next, sizeof *r->link_next);
        r->link_peer = calloc((size_t)r->nrep, sizeof *r->link_peer);
        if (!r->red_in || !r->red_sum || !r->link_prev || !r->link_next || !r->link_peer)
            return SC_ERRF(err, SC_ERR_NOMEM, "out of memory allocating replica buffers");
    }
    if (r->p > 1 || r->nrep > 1) {
        SC_CHECK(open_transports(r, c, dev, err));
        SC_CHECK(device_boundaries(r, c, dev, err));
    }
    return open_reduce(r, c, dev, err);
}

sc_status rt_runner_new(rt_runner **out, const rt_runner_cfg *cfg, sc_err *err)
{
    *out = NULL;
    rt_runner *r = calloc(1, sizeof *r);
    SC_ALLOC_CHECK(r, err);
    sc_status rc = runner_init(r, cfg, err);
    if (rc != SC_OK) {
        rt_runner_destroy(&r);
        return rc;
    }
    *out = r;
    return SC_OK;
}

const char *rt_runner_endpoint(const rt_runner *r)
{
    return r->endpoint;
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

/* Benchmarks: stand-in compute time. Sleeping rather than spinning keeps the measurement of a
 * schedule's structure valid on hosts with fewer cores than stages. */
static void extra_compute(double seconds)
{
    if (seconds <= 0.0)
        return;
    struct timespec left = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

static int slot_of(const rt_runner *r, int mb)
{
    return (mb / r->nrep) % r->slots;
}

/* The transport of the next boundary (towards_next) or of the previous one. */
static rt_transport *tr_dir(const rt_runner *r, bool towards_next)
{
    return towards_next && r->tr_next != NULL ? r->tr_next : r->tr;
}

/* Activations go to replica mb % next_replicas of the next stage, gradients to replica
 * mb % prev_replicas of the previous one. */
static sc_status send_routed(rt_runner *r, rt_msg_kind kind, uint64_t step, int mb,
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
    return rt_transport_send(t, kind, step, mb, data, bytes, err);
}

/* The replicas' all-reduce of the host gradients (and of the last stage's loss sum): each sends
 * its own to every peer, then every replica adds all of them in replica order 0..r-1, so all get
 * bit-identical sums (`mean`: then divided by r, identically everywhere). Replica k's message is
 * the gradient of micro-batch tag0 - k of `step` (tag0 < 0), which no real micro-batch uses:
 * tag0 = -1 per synchronous iteration, -1 - (the round's first micro-batch) per pipedream round,
 * so every round's messages differ. */
static sc_status allreduce_grads(rt_runner *r, uint64_t step, int tag0, bool mean, double *loss_sum,
                                 sc_err *err)
{
    size_t gbytes = r->np * sizeof(float), bytes = gbytes + sizeof(double);
    memcpy(r->red_in, r->grads, gbytes);
    memcpy(r->red_in + gbytes, loss_sum, sizeof(double));
    for (int k = 0; k < r->nrep; k++) {
        if (k == r->rep)
            continue;
        if (r->link_peer[k] == NULL)
            return SC_ERRF(err, SC_ERR_PRECONDITION,
                           "runner stage %d replica %d: no link to replica %d (call "
                           "rt_runner_connect_group)",
                           r->s, r->rep, k);
        SC_CHECK(rt_transport_send(r->link_peer[k], RT_MSG_GRADIENT, step, tag0 - r->rep, r->red_in,
                                   bytes, err));
    }
    memset(r->red_sum, 0, gbytes);
    double loss = 0.0, own_loss = *loss_sum;
    for (int k = 0; k < r->nrep; k++) {
        const float *g = r->grads;
        double l = own_loss;
        if (k != r->rep) {
            SC_CHECK(
                rt_transport_recv(r->tr, RT_MSG_GRADIENT, step, tag0 - k, r->red_in, bytes, err));
            g = (const float *)r->red_in;
            memcpy(&l, r->red_in + gbytes, sizeof l);
        }
        for (size_t i = 0; i < r->np; i++)
            r->red_sum[i] += g[i];
        loss += l;
    }
    if (mean)
        for (size_t i = 0; i < r->np; i++)
            r->red_sum[i] /= (float)r->nrep;
    memcpy(r->grads, r->red_sum, gbytes);
    *loss_sum = loss;
    return SC_OK;
}

/* The copies' all-reduce of the stage's gradients and of *loss_sum: on their GPUs with
 * replica_reduce "nccl", else through host memory (allreduce_grads). */
static sc_status reduce_copies(rt_runner *r, uint64_t step, int tag0, bool mean, double *loss_sum,
                               sc_err *err)
{
    if (r->ar != NULL) {
        SC_CHECK(kn_ctx_sync(kn_stage_ctx(r->st), err)); /* the gradients are complete */
        return rt_allreduce_run(r->ar, kn_stage_grads_device(r->st), r->np, mean, loss_sum, err);
    }
    SC_CHECK(kn_stage_grads_to_host(r->st, r->grads, err));
    SC_CHECK(allreduce_grads(r, step, tag0, mean, loss_sum, err));
    return kn_stage_grads_from_host(r->st, r->grads, err);
}

/* The optimizer step on the stage's own device (kn_stage_step), after the per-block gradient
 * norms the reports carry. Under pipedream the host copy of the newest weights, which each
 * forward stashes, is brought up to date. */
static sc_status optimizer_apply(rt_runner *r, sc_err *err)
{
    extra_compute(r->extra_o_s);
    SC_CHECK(kn_stage_grad_sq_norms(r->st, r->norms, err));
    SC_CHECK(kn_stage_step(r->st, err));
    if (r->pipedream)
        SC_CHECK(kn_stage_params_to_host(r->st, r->params, err));
    return SC_OK;
}

/* Sizes per stage: takes the neighbour's messages, in its micro-batch order, into the gather
 * buffer `all` (`elem_bytes` per sample) until the received prefix reaches sample `end`, then
 * copies this stage's samples [begin, end) into `dst`. A message whose size is not the one the
 * neighbour list promises means the list is not that stage's real cut. */
static sc_status gather(rt_runner *r, rt_msg_kind kind, uint64_t step, const int *off, int *got,
                        unsigned char *all, size_t elem_bytes, int begin, int end, void *dst,
                        double *wait_s, sc_err *err)
{
    bool act = kind == RT_MSG_ACTIVATION;
    const char *what = act ? "prev_sizes" : r->next_bw_given ? "next_backward_sizes" : "next_sizes";
    /* gradients come in the next stage's backward cut, its forward cut unless it has its own */
    const char *theirs = act || !r->next_bw_given ? "microbatch_sizes" : "backward_sizes";
    const char *hint = act || r->next_bw_given
                           ? ""
                           : "; when that stage has backward_sizes of its own, give them as "
                             "next_backward_sizes";
    int from = act ? r->s - 1 : r->s + 1;
    double t0 = sc_clock_now_s();
    while (off[*got] < end) {
        int k = *got;
        size_t at = (size_t)off[k] * elem_bytes, bytes = (size_t)(off[k + 1] - off[k]) * elem_bytes;
        sc_err local;
        sc_err_clear(&local);
        sc_status rc = rt_transport_recv(tr_dir(r, kind == RT_MSG_GRADIENT), kind, step, k,
                                         all + at, bytes, &local);
        if (rc == SC_ERR_INVALID)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner stage %d: %s %d of stage %d is not the %d samples %s says: "
                           "%s must equal stage %d's %s%s (%s)",
                           r->s, act ? "micro-batch" : "backward entry", k, from,
                           off[k + 1] - off[k], what, what, from, theirs, hint, local.msg);
        if (rc != SC_OK)
            return SC_ERRF(err, rc, "%s", local.msg);
        (*got)++;
    }
    *wait_s += sc_clock_now_s() - t0;
    memcpy(dst, all + (size_t)begin * elem_bytes, (size_t)(end - begin) * elem_bytes);
    return SC_OK;
}

static sc_status slot_error(const rt_runner *r, const char *what, int mb, sc_err *err)
{
    return SC_ERRF(err, SC_ERR_INTERNAL,
                   "runner stage %d replica %d: %s of micro-batch %d finds slot %d holding "
                   "micro-batch %d (%d slots)",
                   r->s, r->rep, what, mb, slot_of(r, mb), r->slot_mb[slot_of(r, mb)], r->slots);
}

/* The forward of the synchronous schedules: the input from the data (first stage), the host
 * buffer or, crossing its boundary in device memory, in_dev; the last stage's targets from the
 * data. */
static sc_status stage_forward(rt_runner *r, int slot, int n, sc_err *err)
{
    const int32_t *tgt = r->last ? r->tgt_buf : NULL;
    if (!r->dev_prev)
        return kn_stage_forward_host(r->st, slot, r->in_buf, tgt, n, err);
    if (r->last) {
        SC_CHECK(kn_ctx_upload(kn_stage_ctx(r->st), r->tgt_dev, r->tgt_buf,
                               (size_t)n * (size_t)r->tps * sizeof(int32_t), err));
        tgt = r->tgt_dev;
    }
    return kn_stage_forward(r->st, slot, r->in_dev, tgt, n, err);
}

/* The backward of `slot` with the received output gradient (host or, dev_next, gout_dev). */
static sc_status stage_backward(rt_runner *r, int slot, sc_err *err)
{
    if (r->last)
        return kn_stage_backward_host(r->st, slot, NULL, err);
    if (r->dev_next)
        return kn_stage_backward(r->st, slot, r->gout_dev, err);
    return kn_stage_backward_host(r->st, slot, r->gout_buf, err);
}

/* Backward cut: entry j over samples [a, b), its output gradient in gout_buf. An entry that is
 * exactly forward micro-batch k runs on k's slot; any other first has its samples' activations
 * gathered from the slots of the forwards it overlaps into the gather slot. Afterwards every
 * forward whose samples are all backwarded (entries run in ascending order) frees its slot. */
static sc_status backward_entry(rt_runner *r, int j, int *inflight, sc_err *err)
{
    int a = r->bw_off[j], b = r->bw_off[j + 1], k = r->bw_mb[j], slot;
    if (k >= 0) {
        slot = slot_of(r, k);
        if (r->slot_mb[slot] != k)
            return slot_error(r, "backward", k, err);
    } else {
        int n = 0;
        for (int f = 0; f < r->m; f++) {
            int fa = r->mb_off[f], fb = fa + r->mb_size[f];
            if (fb <= a || fa >= b)
                continue;
            if (r->slot_mb[slot_of(r, f)] != f)
                return slot_error(r, "gather for a backward", f, err);
            int lo = fa > a ? fa : a, hi = fb < b ? fb : b;
            r->ranges[n++] = (kn_stage_range){slot_of(r, f), lo - fa, hi - lo};
        }
        slot = r->slots; /* the stage's gather slot */
        SC_CHECK(kn_stage_gather(r->st, slot, r->ranges, n, err));
    }
    SC_CHECK(stage_backward(r, slot, err));
    for (int f = 0; f < r->m; f++) {
        if (r->slot_mb[slot_of(r, f)] == f && r->mb_off[f] + r->mb_size[f] <= b) {
            r->slot_mb[slot_of(r, f)] = -1;
            --*inflight;
        }
    }
    return SC_OK;
}

static bool is_backward(rt_action_kind kind)
{
    return kind == RT_ACT_RECV_B || kind == RT_ACT_B || kind == RT_ACT_SEND_B;
}

static sc_status run_action(rt_runner *r, uint64_t step, const rt_action *a, rt_report *rep,
                            int *inflight, double *loss_sum, sc_err *err)
{
    /* the samples [off, off + M) of the action's micro-batch, or of its backward entry */
    bool entry = r->bsplit && is_backward(a->kind);
    int off = a->mb < 0 ? 0 : entry ? r->bw_off[a->mb] : r->mb_off[a->mb];
    size_t M = a->mb < 0 ? 0
               : entry   ? (size_t)(r->bw_off[a->mb + 1] - off)
                         : (size_t)r->mb_size[a->mb];
    size_t in_bytes = M * r->in_elems * 4, out_bytes = M * r->out_elems * sizeof(float);
    int mb = a->mb, slot = mb >= 0 && !entry ? slot_of(r, mb) : -1;
    double t0 = sc_clock_now_s();
    switch (a->kind) {
    case RT_ACT_RECV_F:
        if (r->resliced) {
            SC_CHECK(gather(r, RT_MSG_ACTIVATION, step, r->prev_off, &r->prev_got, r->in_all,
                            r->in_elems * 4, off, off + (int)M, r->in_buf, &rep->wait_s, err));
            break;
        }
        if (r->dev_prev) /* the previous forward's copy out of in_dev has run */
            SC_CHECK(kn_ctx_sync(kn_stage_ctx(r->st), err));
        SC_CHECK(rt_transport_recv(tr_dir(r, false), RT_MSG_ACTIVATION, step, mb,
                                   r->dev_prev ? r->in_dev : r->in_buf, in_bytes, err));
        rep->wait_s += sc_clock_now_s() - t0;
        break;
    case RT_ACT_F:
        if (r->slot_mb[slot] != -1)
            return slot_error(r, "forward", mb, err);
        if (r->first || r->last)
            SC_CHECK(rt_data_batch(r->data, step, r->mb_off[mb], (int)M,
                                   r->first ? r->in_buf : NULL, r->last ? r->tgt_buf : NULL, err));
        SC_CHECK(stage_forward(r, slot, (int)M, err));
        r->slot_mb[slot] = mb;
        if (++*inflight > rep->max_inflight)
            rep->max_inflight = *inflight;
        if (r->last) {
            float l = 0.0f;
            SC_CHECK(kn_stage_loss(r->st, slot, &l, err));
            *loss_sum += (double)l * (double)M; /* per-sample weight: sizes may differ */
        }
        extra_compute(r->extra_f_s * (double)M);
        rep->forward_s += sc_clock_now_s() - t0;
        break;
    case RT_ACT_SEND_F:
        if (r->slot_mb[slot] != mb)
            return slot_error(r, "send of the output", mb, err);
        if (r->dev_next) { /* straight from the slot, once the forward has written it */
            SC_CHECK(kn_ctx_sync(kn_stage_ctx(r->st), err));
            SC_CHECK(send_routed(r, RT_MSG_ACTIVATION, step, mb, kn_stage_output(r->st, slot),
                                 out_bytes, err));
            break;
        }
        SC_CHECK(kn_stage_output_to_host(r->st, slot, r->out_buf, err));
        SC_CHECK(send_routed(r, RT_MSG_ACTIVATION, step, mb, r->out_buf, out_bytes, err));
        break;
    case RT_ACT_RECV_B:
        if (r->resliced) {
            SC_CHECK(gather(r, RT_MSG_GRADIENT, step, r->next_off, &r->next_got,
                            (unsigned char *)r->gout_all, r->out_elems * sizeof(float), off,
                            off + (int)M, r->gout_buf, &rep->wait_s, err));
            break;
        }
        if (r->dev_next) /* the previous backward has read gout_dev */
            SC_CHECK(kn_ctx_sync(kn_stage_ctx(r->st), err));
        SC_CHECK(rt_transport_recv(tr_dir(r, true), RT_MSG_GRADIENT, step, mb,
                                   r->dev_next ? (void *)r->gout_dev : r->gout_buf, out_bytes,
                                   err));
        rep->wait_s += sc_clock_now_s() - t0;
        break;
    case RT_ACT_B:
        if (entry) {
            SC_CHECK(backward_entry(r, mb, inflight, err));
        } else {
            if (r->slot_mb[slot] != mb)
                return slot_error(r, "backward", mb, err);
            SC_CHECK(stage_backward(r, slot, err));
            r->slot_mb[slot] = -1;
            --*inflight;
        }
        if (!r->first) {
            /* The stage keeps only the latest input gradient: take it now. */
            if (r->dev_prev)
                SC_CHECK(kn_ctx_copy(kn_stage_ctx(r->st), r->gin_dev, kn_stage_grad_input(r->st),
                                     M * r->in_elems * sizeof(float), err));
            else
                SC_CHECK(kn_stage_grad_input_to_host(r->st, r->gin_buf, err));
            r->gin_mb = mb;
        }
        extra_compute(r->extra_b_s * (double)M);
        rep->backward_s += sc_clock_now_s() - t0;
        break;
    case RT_ACT_SEND_B:
        if (r->gin_mb != mb)
            return SC_ERRF(err, SC_ERR_INTERNAL,
                           "runner stage %d: SEND_B of micro-batch %d "
                           "after the backward of %d",
                           r->s, mb, r->gin_mb);
        if (r->dev_prev) /* the copy into gin_dev has run */
            SC_CHECK(kn_ctx_sync(kn_stage_ctx(r->st), err));
        SC_CHECK(send_routed(r, RT_MSG_GRADIENT, step, mb,
                             r->dev_prev ? (const void *)r->gin_dev : r->gin_buf,
                             M * r->in_elems * sizeof(float), err));
        break;
    case RT_ACT_OPT:
        if (r->nrep > 1) { /* the copies' summed gradient */
            SC_CHECK(reduce_copies(r, step, -1, false, loss_sum, err));
            rep->wait_s += sc_clock_now_s() - t0; /* counted as waiting, not as the optimizer */
            t0 = sc_clock_now_s();
        }
        SC_CHECK(optimizer_apply(r, err));
        rep->optimizer_s += sc_clock_now_s() - t0;
        break;
    }
    return SC_OK;
}

/* ---- pipedream: the asynchronous stream ---- */

static uint64_t pd_step_of(const rt_runner *r, uint64_t g)
{
    return r->pd_base + g / (uint64_t)r->m;
}

static int pd_inflight(const rt_runner *r)
{
    return (int)(r->pd_own_f - r->pd_own_b);
}

static void pd_event(rt_runner *r, bool backward, uint64_t g, uint64_t version)
{
    rt_pd_event *e = &r->events[r->n_events++];
    e->backward = backward;
    e->step = pd_step_of(r, g);
    e->mb = (int)(g % (uint64_t)r->m);
    e->version = version;
    e->inflight = pd_inflight(r);
}

/* This copy's slot of its own minibatch g. */
static int pd_slot(const rt_runner *r, uint64_t g)
{
    return (int)((g / (uint64_t)r->nrep) % (uint64_t)r->slots);
}

/* The stage's next forward, minibatch pd_fwd: another copy's passes by; an own one is received,
 * run with the newest weights (stashed for its backward) and sent. */
static sc_status pd_forward(rt_runner *r, rt_report *rep, double *loss_sum, sc_err *err)
{
    uint64_t g = r->pd_fwd, step = pd_step_of(r, g);
    int mb = (int)(g % (uint64_t)r->m), slot = pd_slot(r, g);
    if (g % (uint64_t)r->nrep != (uint64_t)r->rep) {
        r->ver_fwd[mb] = UINT64_MAX; /* run by copy g % nrep */
        r->pd_fwd++;
        return SC_OK;
    }
    size_t M = (size_t)r->mb_size[mb];
    double t0 = sc_clock_now_s();
    if (!r->first) {
        SC_CHECK(rt_transport_recv(tr_dir(r, false), RT_MSG_ACTIVATION, step, mb, r->in_buf,
                                   M * r->in_elems * 4, err));
        rep->wait_s += sc_clock_now_s() - t0;
    }
    double t1 = sc_clock_now_s();
    if (r->slot_mb[slot] != -1)
        return slot_error(r, "forward", mb, err);
    if (r->first || r->last)
        SC_CHECK(rt_data_batch(r->data, step, r->mb_off[mb], (int)M, r->first ? r->in_buf : NULL,
                               r->last ? r->tgt_buf : NULL, err));
    /* The device holds the newest weights: after an own backward on stashed ones, the round's
     * OPT (which uploads the newest) always comes before the copy's next forward. */
    SC_CHECK(
        kn_stage_forward_host(r->st, slot, r->in_buf, r->last ? r->tgt_buf : NULL, (int)M, err));
    r->slot_mb[slot] = mb;
    r->stash_g[slot] = g;
    /* the weights this forward used, for its backward */
    memcpy(r->stash[slot], r->params, r->np * sizeof *r->params);
    r->stash_ver[slot] = kn_stage_step_count(r->st);
    r->ver_fwd[mb] = kn_stage_step_count(r->st);
    r->pd_fwd++;
    r->pd_own_f++;
    if (pd_inflight(r) > rep->max_inflight)
        rep->max_inflight = pd_inflight(r);
    if (r->last) {
        float l = 0.0f;
        SC_CHECK(kn_stage_loss(r->st, slot, &l, err));
        /* with copies, the round's all-reduce adds up the copies' losses */
        if (r->nrep > 1)
            r->pd_loss_own += (double)l * (double)M;
        else
            *loss_sum += (double)l * (double)M;
    }
    extra_compute(r->extra_f_s * (double)M);
    rep->forward_s += sc_clock_now_s() - t1;
    pd_event(r, false, g, kn_stage_step_count(r->st));
    if (!r->last) {
        SC_CHECK(kn_stage_output_to_host(r->st, slot, r->out_buf, err));
        SC_CHECK(send_routed(r, RT_MSG_ACTIVATION, step, mb, r->out_buf,
                             M * r->out_elems * sizeof(float), err));
    }
    return SC_OK;
}

/* The stage's next backward, minibatch pd_bwd. An own one is received, run with the weights
 * stashed at its forward and sent; its gradient waits in r->grads for the round's end. After a
 * round's last minibatch every copy runs the OPT: the copies' all-reduce (mean of the round's r
 * gradients; none unreplicated), then the same update of the newest weights on each. */
static sc_status pd_backward(rt_runner *r, rt_report *rep, double *loss_sum, sc_err *err)
{
    uint64_t k = r->pd_bwd, step = pd_step_of(r, k);
    int mb = (int)(k % (uint64_t)r->m);
    if (k % (uint64_t)r->nrep == (uint64_t)r->rep) {
        int slot = pd_slot(r, k);
        size_t M = (size_t)r->mb_size[mb];
        double t0 = sc_clock_now_s();
        if (!r->last) {
            SC_CHECK(rt_transport_recv(tr_dir(r, true), RT_MSG_GRADIENT, step, mb, r->gout_buf,
                                       M * r->out_elems * sizeof(float), err));
            rep->wait_s += sc_clock_now_s() - t0;
        }
        double t1 = sc_clock_now_s();
        if (r->slot_mb[slot] != mb || r->stash_g[slot] != k)
            return slot_error(r, "backward", mb, err);
        SC_CHECK(kn_stage_zero_grads(r->st, err));
        if (r->stash_ver[slot] !=
            kn_stage_step_count(r->st)) { /* newer weights since: back to the stashed ones */
            SC_CHECK(kn_stage_params_from_host(r->st, r->stash[slot], err));
            r->pd_stash_loaded = true;
        }
        SC_CHECK(kn_stage_backward_host(r->st, slot, r->last ? NULL : r->gout_buf, err));
        r->slot_mb[slot] = -1;
        r->pd_own_b++;
        if (!r->first)
            SC_CHECK(kn_stage_grad_input_to_host(r->st, r->gin_buf, err));
        extra_compute(r->extra_b_s * (double)M);
        rep->backward_s += sc_clock_now_s() - t1;
        r->pd_bwd++;
        pd_event(r, true, k, r->stash_ver[slot]);
        rep->backwards++;
        if (!r->first)
            SC_CHECK(send_routed(r, RT_MSG_GRADIENT, step, mb, r->gin_buf,
                                 M * r->in_elems * sizeof(float), err));
    } else {
        r->pd_bwd++;
    }
    if (k % (uint64_t)r->nrep != (uint64_t)(r->nrep - 1))
        return SC_OK; /* the round goes on */
    double t2 = sc_clock_now_s();
    if (r->nrep > 1) {
        /* m is a multiple of nrep, so the round's minibatches are micro-batches
         * mb - nrep + 1 .. mb of one step */
        SC_CHECK(reduce_copies(r, step, -1 - (mb - r->nrep + 1), true, &r->pd_loss_own, err));
        *loss_sum += r->pd_loss_own;
        r->pd_loss_own = 0.0;
        rep->wait_s += sc_clock_now_s() - t2; /* counted as waiting, not as the optimizer */
        t2 = sc_clock_now_s();
    }
    /* the update is of the newest weights, not of the stash the backward ran on */
    if (r->pd_stash_loaded) {
        SC_CHECK(kn_stage_params_from_host(r->st, r->params, err));
        r->pd_stash_loaded = false;
    }
    SC_CHECK(optimizer_apply(r, err));
    rep->optimizer_s += sc_clock_now_s() - t2;
    return SC_OK;
}

static void pd_finish(rt_runner *r, rt_report *rep, double t0)
{
    rep->iteration_s = sc_clock_now_s() - t0;
    rep->busy_s = rep->forward_s + rep->backward_s + rep->optimizer_s;
    rep->weight_version_forward = r->ver_fwd;
    rep->events = r->events;
    rep->n_events = r->n_events;
    rep->inflight_end = pd_inflight(r);
    rep->slots = r->slots;
    rep->n_blocks = r->nb;
    rep->grad_sq_norms = r->norms;
}

/* One step of the stream: the stage's m forwards of `step` (this copy's own run, the others'
 * pass by), each followed by the backwards the warm-up allows (the stage's backward of k after
 * its forward of k + pd_warm). */
static sc_status pd_step(rt_runner *r, uint64_t step, rt_report *rep, sc_err *err)
{
    double t0 = sc_clock_now_s();
    if (r->pd_fwd == r->pd_bwd) { /* empty: a new fill starts at this step */
        r->pd_base = step;
        r->pd_fwd = r->pd_bwd = r->pd_own_f = r->pd_own_b = 0;
    }
    bool filling = r->pd_own_b == 0;
    uint64_t w = (uint64_t)r->pd_warm;
    double loss_sum = 0.0;
    r->n_events = 0;
    for (int j = 0; j < r->m; j++) {
        SC_CHECK(pd_forward(r, rep, &loss_sum, err));
        while (r->pd_fwd - r->pd_bwd > w) {
            if (filling && r->pd_own_b == 0 && r->pd_bwd % (uint64_t)r->nrep == (uint64_t)r->rep)
                rep->warmup_s = sc_clock_now_s() - t0;
            SC_CHECK(pd_backward(r, rep, &loss_sum, err));
        }
    }
    if (filling && r->pd_own_b == 0)
        rep->warmup_s = sc_clock_now_s() - t0; /* still filling (m small against the warm-up) */
    /* checked every step, as the synchronous schedules check theirs */
    if (rep->max_inflight > r->slots)
        return SC_ERRF(err, SC_ERR_INTERNAL, "runner stage %d: %d minibatches in flight, %d slots",
                       r->s, rep->max_inflight, r->slots);
    pd_finish(r, rep, t0);
    rep->samples_per_s = rep->iteration_s > 0.0 ? (double)r->own_samples / rep->iteration_s : 0.0;
    rep->has_loss = r->last;
    rep->loss = r->last ? loss_sum / (double)r->batch : 0.0;
    rep->microbatches = r->own_mbs;
    return SC_OK;
}

static void pd_reset(rt_runner *r)
{
    r->pd_base = r->pd_fwd = r->pd_bwd = r->pd_own_f = r->pd_own_b = 0;
    r->pd_loss_own = 0.0;
    r->pd_stash_loaded = false;
}

sc_status rt_runner_flush(rt_runner *r, rt_report *report, sc_err *err)
{
    rt_report rep;
    memset(&rep, 0, sizeof rep);
    if (!r->pipedream) {
        if (report != NULL)
            *report = rep;
        return SC_OK;
    }
    if (r->broken)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "runner stage %d: an earlier step failed; load a checkpoint first", r->s);
    double t0 = sc_clock_now_s();
    r->n_events = 0;
    rep.step = r->pd_fwd > 0 ? pd_step_of(r, r->pd_fwd - 1) : 0;
    /* whole rounds (m is a multiple of the copies): the last backward closes the last round */
    double loss_sum = 0.0;
    sc_status rc = SC_OK;
    while (rc == SC_OK && r->pd_bwd < r->pd_fwd)
        rc = pd_backward(r, &rep, &loss_sum, err);
    if (rc != SC_OK) {
        r->broken = true;
        return rc;
    }
    pd_finish(r, &rep, t0);
    rep.weight_version_forward = NULL; /* no forwards ran */
    pd_reset(r);
    if (report != NULL)
        *report = rep;
    return SC_OK;
}

sc_status rt_runner_step(rt_runner *r, uint64_t step, rt_report *report, sc_err *err)
{
    if (r->broken)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "runner stage %d: an earlier step failed; load "
                       "a checkpoint first",
                       r->s);
    rt_report rep;
    memset(&rep, 0, sizeof rep);
    rep.step = step;
    if (r->pipedream) {
        if (r->pd_fwd != r->pd_bwd && step != pd_step_of(r, r->pd_fwd))
            return SC_ERRF(err, SC_ERR_INVALID,
                           "runner stage %d: pipedream step %llu while %d minibatches are in "
                           "flight; valid: the next step %llu (or call rt_runner_flush first)",
                           r->s, (unsigned long long)step, pd_inflight(r),
                           (unsigned long long)pd_step_of(r, r->pd_fwd));
        sc_status rc = pd_step(r, step, &rep, err);
        if (rc != SC_OK) { /* the stream is partial (messages taken, updates made) */
            r->broken = true;
            for (int i = 0; i < r->slots; i++)
                r->slot_mb[i] = -1;
        }
        if (rc == SC_OK && report != NULL)
            *report = rep;
        return rc;
    }
    double t0 = sc_clock_now_s();
    sc_status rc = kn_stage_zero_grads(r->st, err);
    int inflight = 0;
    double loss_sum = 0.0;
    r->prev_got = 0;
    r->next_got = 0;
    bool own_list = r->group || r->bsplit;
    const rt_action *acts = own_list ? r->acts : r->sched->actions[r->s];
    int nacts = own_list ? r->nacts : r->sched->count[r->s];
    for (int i = 0; rc == SC_OK && i < nacts; i++)
        rc = run_action(r, step, &acts[i], &rep, &inflight, &loss_sum, err);
    if (rc == SC_OK && rep.max_inflight > r->slots)
        rc = SC_ERRF(err, SC_ERR_INTERNAL, "runner stage %d: %d micro-batches in flight, %d slots",
                     r->s, rep.max_inflight, r->slots);
    /* a backward cut frees forward slots by sample coverage: all must be free at the end */
    if (rc == SC_OK && r->bsplit && inflight != 0)
        rc = SC_ERRF(err, SC_ERR_INTERNAL,
                     "runner stage %d: %d forward micro-batches still held after the backwards",
                     r->s, inflight);
    /* every neighbour message of the iteration was taken: none is left for the next one */
    if (rc == SC_OK && r->resliced &&
        ((!r->first && r->prev_got != r->n_prev) || (!r->last && r->next_got != r->n_next)))
        rc = SC_ERRF(err, SC_ERR_INTERNAL,
                     "runner stage %d: took %d of %d activations and %d of %d gradients", r->s,
                     r->prev_got, r->n_prev, r->next_got, r->n_next);
    if (rc != SC_OK) {
        r->broken = true;
        for (int i = 0; i < r->slots; i++)
            r->slot_mb[i] = -1;
        return rc;
    }
    rep.iteration_s = sc_clock_now_s() - t0;
    rep.busy_s = rep.forward_s + rep.backward_s + rep.optimizer_s;
    rep.samples_per_s = rep.iteration_s > 0.0 ? (double)r->own_samples / rep.iteration_s : 0.0;
    rep.has_loss = r->last;
    rep.loss = r->last ? loss_sum / (double)r->batch : 0.0;
    rep.microbatches = r->own_mbs;
    rep.slots = r->slots + (r->gather_cap > 0 ? 1 : 0);
    rep.n_blocks = r->nb;
    rep.grad_sq_norms = r->norms;
    if (report != NULL)
        *report = rep;
    return SC_OK;
}

void rt_runner_abort(rt_runner *r)
{
    rt_allreduce_abort(r->ar);
    if (r->tr != NULL)
        rt_transport_abort(r->tr);
    if (r->tr_next != NULL)
        rt_transport_abort(r->tr_next);
    for (int k = 0; r->link_prev != NULL && k < r->nrep_prev; k++)
        if (r->link_prev[k] != NULL)
            rt_transport_abort(r->link_prev[k]);
    for (int k = 0; r->link_next != NULL && k < r->nrep_next; k++)
        if (r->link_next[k] != NULL)
            rt_transport_abort(r->link_next[k]);
    for (int k = 0; r->link_peer != NULL && k < r->nrep; k++)
        if (r->link_peer[k] != NULL)
            rt_transport_abort(r->link_peer[k]);
}

size_t rt_runner_param_count(const rt_runner *r)
{
    return r->np;
}

/* The newest weights: pipedream keeps them on the host too (the device may hold a stash for a
 * backward); the synchronous schedules have them on the device only. */
static sc_status newest_params(rt_runner *r, float *host, sc_err *err)
{
    if (r->pipedream) {
        if (host != r->params)
            memcpy(host, r->params, r->np * sizeof *host);
        return SC_OK;
    }
    return kn_stage_params_to_host(r->st, host, err);
}

sc_status rt_runner_params_to_host(rt_runner *r, float *host, sc_err *err)
{
    return newest_params(r, host, err);
}

/* ---- checkpoints ---- */

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t stage;
    uint32_t first_block, last_block;
    uint32_t optim_kind;
    uint32_t reserved;
    uint64_t step;
    uint64_t opt_t;
    uint64_t nparams, nstate;
    uint64_t checksum; /* FNV-1a 64 over the parameter then the state bytes */
} ckpt_header;

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t payload_checksum(const float *params, size_t np, const float *state, size_t ns)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv1a(h, params, np * sizeof *params);
    return fnv1a(h, state, ns * sizeof *state);
}

void rt_runner_checkpoint_path(const rt_runner *r, const char *dir, uint64_t step, char *buf,
                               size_t size)
{
    snprintf(buf, size, "%s/stage%d-step%llu.ckpt", dir, r->s, (unsigned long long)step);
}

static int step_newest_first(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

sc_status rt_checkpoint_list(const char *dir, int stage, uint64_t **steps, size_t *n, sc_err *err)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        return errno == ENOENT ? SC_OK
                               : SC_ERRF(err, SC_ERR_IO, "cannot list the checkpoints in %s: %s",
                                         dir, strerror(errno));
    size_t cap = 0;
    sc_status rc = SC_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int s;
        uint64_t step;
        char again[300];
        /* exactly the name rt_runner_save gives (not its .tmp, not "stage01-step5.ckpt") */
        if (sscanf(e->d_name, "stage%d-step%" SCNu64 ".ckpt", &s, &step) != 2 || s != stage)
            continue;
        snprintf(again, sizeof again, "stage%d-step%" PRIu64 ".ckpt", s, step);
        if (strcmp(again, e->d_name) != 0)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t *more = realloc(*steps, cap * sizeof *more);
            if (more == NULL) {
                rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory listing the checkpoints in %s", dir);
                break;
            }
            *steps = more;
        }
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    if (rc != SC_OK) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return rc;
    }
    if (*n > 1)
        qsort(*steps, *n, sizeof **steps, step_newest_first);
    return SC_OK;
}

sc_status rt_checkpoint_prune(const char *dir, int stage, uint64_t complete_step, uint64_t keep,
                              size_t *deleted, sc_err *err)
{
    if (deleted != NULL)
        *deleted = 0;
    if (keep == 0)
        return SC_OK;
    uint64_t *steps;
    size_t n;
    SC_CHECK(rt_checkpoint_list(dir, stage, &steps, &n, err));
    sc_status rc = SC_OK;
    uint64_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (steps[i] > complete_step || kept++ < keep)
            continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/stage%d-step%" PRIu64 ".ckpt", dir, stage, steps[i]);
        if (unlink(path) != 0 && errno != ENOENT)
            rc = SC_ERRF(err, SC_ERR_IO, "%s: cannot delete the old checkpoint: %s", path,
                         strerror(errno));
        else if (deleted != NULL)
            (*deleted)++;
    }
    free(steps);
    return rc;
}

sc_status rt_runner_save(rt_runner *r, const char *dir, uint64_t step, sc_err *err)
{
    if (r->pipedream && r->pd_fwd != r->pd_bwd)
        return SC_ERRF(err, SC_ERR_PRECONDITION,
                       "runner stage %d: pipedream has %d minibatches in flight; call "
                       "rt_runner_flush before rt_runner_save",
                       r->s, pd_inflight(r));
    if (r->rep > 0)
        return SC_OK; /* the replicas are bit-identical: replica 0 writes for all */
    char path[1200], tmp[1300];
    rt_runner_checkpoint_path(r, dir, step, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    ckpt_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CKPT_MAGIC, 8);
    h.version = CKPT_VERSION;
    h.stage = (uint32_t)r->s;
    h.first_block = (uint32_t)r->first_block;
    h.last_block = (uint32_t)r->last_block;
    h.optim_kind = (uint32_t)r->optim.kind;
    h.step = step;
    h.opt_t = kn_stage_step_count(r->st);
    h.nparams = r->np;
    h.nstate = r->nstate;
    SC_CHECK(newest_params(r, r->params, err));
    SC_CHECK(kn_stage_opt_state_to_host(r->st, r->state, err));
    h.checksum = payload_checksum(r->params, r->np, r->state, r->nstate);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL)
        return SC_ERRF(err, SC_ERR_IO, "%s: cannot create the checkpoint: %s", tmp,
                       strerror(errno));
    bool ok = fwrite(&h, sizeof h, 1, f) == 1;
    ok = ok && fwrite(r->params, sizeof(float), r->np, f) == r->np;
    ok = ok && fwrite(r->state, sizeof(float), r->nstate, f) == r->nstate;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return SC_ERRF(err, SC_ERR_IO, "%s: writing the checkpoint failed: %s", path, strerror(e));
    }
    return SC_OK;
}

sc_status rt_runner_load(rt_runner *r, const char *dir, uint64_t step, sc_err *err)
{
    char path[1200];
    rt_runner_checkpoint_path(r, dir, step, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return SC_ERRF(err, errno == ENOENT ? SC_ERR_NOT_FOUND : SC_ERR_IO,
                       "%s: cannot open the checkpoint: %s", path, strerror(errno));
    ckpt_header h;
    sc_status rc = SC_OK;
    float *params = NULL, *state = NULL;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, CKPT_MAGIC, 8) != 0) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: not a stagecraft checkpoint (bad magic)", path);
        goto out;
    }
    if (h.version > CKPT_VERSION) {
        rc = SC_ERRF(err, SC_ERR_VERSION, "%s: checkpoint version %u, this build reads up to %u",
                     path, h.version, CKPT_VERSION);
        goto out;
    }
    if ((int)h.first_block != r->first_block || (int)h.last_block != r->last_block ||
        h.nparams != r->np || h.nstate != r->nstate || h.optim_kind != (uint32_t)r->optim.kind ||
        h.step != step) {
        rc = SC_ERRF(err, SC_ERR_INVALID,
                     "%s: holds step %llu of blocks [%u, %u] (%llu parameters, optimizer %u); "
                     "this stage has blocks [%d, %d] (%zu parameters, optimizer %d)",
                     path, (unsigned long long)h.step, h.first_block, h.last_block,
                     (unsigned long long)h.nparams, h.optim_kind, r->first_block, r->last_block,
                     r->np, (int)r->optim.kind);
        goto out;
    }
    params = malloc(r->np * sizeof *params + 1);
    state = malloc(r->nstate * sizeof *state + 1);
    if (params == NULL || state == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory loading %s", path);
        goto out;
    }
    if (fread(params, sizeof *params, r->np, f) != r->np ||
        fread(state, sizeof *state, r->nstate, f) != r->nstate || fgetc(f) != EOF) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: truncated or oversized checkpoint", path);
        goto out;
    }
    if (payload_checksum(params, r->np, state, r->nstate) != h.checksum) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: checksum mismatch (the file is corrupt)", path);
        goto out;
    }
    rc = kn_stage_params_from_host(r->st, params, err);
    if (rc == SC_OK)
        rc = kn_stage_opt_state_from_host(r->st, state, err);
    if (rc == SC_OK)
        rc = kn_stage_set_step_count(r->st, h.opt_t, err);
    if (rc == SC_OK) {
        memcpy(r->params, params, r->np * sizeof *params);
        r->broken = false;
        pd_reset(r);
        for (int i = 0; i < r->slots; i++)
            r->slot_mb[i] = -1;
    }
out:
    free(params);
    free(state);
    fclose(f);
    return rc;
}
