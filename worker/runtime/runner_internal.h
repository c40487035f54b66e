/*
 * Internals of the rt runner shared by its files; runner.h is the contract, this is not part of
 * it. The runner object, the slot and direction helpers every executor uses, and the few
 * functions one file of the runner calls in another. Each file calls only files listed below it:
 *   runner.c             lifecycle: configuration checks, rt_runner_new, destroy, abort
 *   runner_exec.c        rt_runner_step: the synchronous schedules' action list
 *   runner_checkpoint.c  checkpoints and the host copy of the parameters
 *   runner_pipedream.c   the asynchronous stream, weight stashes, rt_runner_flush
 *   runner_plan.c        micro-batches, copies and action list, sizes per stage, buffers
 *   runner_connect.c     the transports: opening, connecting, routing a send
 *   runner_update.c      the update at OPT: the copies' all-reduce, the optimizer step
 *   runner_tie.c         the tied tensor's gradient exchange between the end stages
 *   runner_scale.c       fp16's dynamic loss scale: the stages' verdict on an overflow
 * Invariant: every field of rt_runner is written by rt_runner_new (runner.c and the planning it
 * calls) and afterwards only by the one thread that calls the runner (runner.h), except that
 * rt_runner_abort may reach the transports from any thread.
 */
#ifndef RT_RUNNER_INTERNAL_H
#define RT_RUNNER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_clock.h"
#include "common/sc_status.h"
#include "kernels/device.h"
#include "kernels/model.h"
#include "kernels/optim.h"
#include "kernels/stage.h"
#include "worker/data/data.h"
#include "worker/runtime/runner.h"
#include "worker/runtime/schedule.h"
#include "worker/runtime/timeline.h"
#include "worker/transport/allreduce.h"
#include "worker/transport/transport.h"

/* A GPU stage's compute action timed by two marks on its stream (runner_exec.c) */
typedef struct {
    uint8_t kind; /* rt_tl_kind */
    int32_t mb;
    uint64_t step;
} rt_gpu_timed;

struct rt_runner {
    int p, s, first_block, last_block, nb;
    int batch;    /* samples per iteration */
    int m;        /* micro-batches run per iteration (after slicing) */
    int Mcap;     /* the largest micro-batch: the stage's capacity */
    int *mb_size; /* [m] samples of each micro-batch */
    int *mb_off;  /* [m] first sample of each micro-batch in the batch */
    bool first, last;
    /* freezing: every block of the stage is frozen (no gradient comes, none leaves, no
     * all-reduce); the stage sends its input gradient upstream (not the first stage, nor one
     * whose upstream neighbour is frozen whole) */
    bool frozen_all, grad_upstream;
    bool grad_norms; /* the reports carry per-block gradient norms (!cfg.skip_grad_norms) */
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
    rt_reduce_sample reduced; /* the host all-reduce's figures, taken by the step's report */
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
    /* The measured events of the last iterations (timeline.h): recorded by the calling thread
     * around each action, read by any thread through rt_runner_timeline. */
    rt_timeline *tl;
    /* The tied tensor across stages (runner_tie.c): relayed at OPT when tie_relay. */
    bool tie_relay;
    size_t tie_n;              /* floats of the tied tensor */
    float *tie_own, *tie_peer; /* [tie_n] */
    /* GPU stages: each compute action's GPU start and end come from timing marks (kn_ctx_mark:
     * mark 0 opens the iteration, 2k+1 and 2k+2 bracket its k-th compute action), so reports
     * and timelines show the GPU's work rather than the host's enqueueing of it */
    bool gpu_timed;
    int n_timed, max_timed;
    rt_gpu_timed *timed;      /* [max_timed] */
    uint64_t timed_origin_ns; /* host clock once mark 0 had passed */
    /* fp16's dynamic loss scale (runner_scale.c): the loss gradient is multiplied by `scale`,
     * the gradients divided by it before the step; scale_good counts the steps since the last
     * overflow or growth, scale_skips the steps skipped since the start. */
    bool scaling;
    float scale, loss_base;
    int scale_interval, scale_good;
    bool scale_skipped; /* this step's update was skipped */
    uint64_t scale_skips;
};

/* The monotonic clock in ns, and the same reading in seconds (exactly sc_clock_now_s()'s), so
 * one read serves both the report's durations and the timeline. */
static inline double rt_now(uint64_t *ns)
{
    *ns = sc_clock_now_ns();
    return (double)*ns * 1e-9;
}

/* The activation slot of this copy's micro-batch mb (the invariant of runner_exec.c). */
static inline int slot_of(const rt_runner *r, int mb)
{
    return (mb / r->nrep) % r->slots;
}

/* The error when a slot does not hold the micro-batch it must (the slot invariant broke). */
static inline sc_status slot_error(const rt_runner *r, const char *what, int mb, sc_err *err)
{
    return SC_ERRF(err, SC_ERR_INTERNAL,
                   "runner stage %d replica %d: %s of micro-batch %d finds slot %d holding "
                   "micro-batch %d (%d slots)",
                   r->s, r->rep, what, mb, slot_of(r, mb), r->slot_mb[slot_of(r, mb)], r->slots);
}

/* The transport of the next boundary (towards_next) or of the previous one. */
static inline rt_transport *tr_dir(const rt_runner *r, bool towards_next)
{
    return towards_next && r->tr_next != NULL ? r->tr_next : r->tr;
}

/* pipedream: the step of minibatch g of the stream. */
static inline uint64_t pd_step_of(const rt_runner *r, uint64_t g)
{
    return r->pd_base + g / (uint64_t)r->m;
}

/* pipedream: this copy's minibatches in flight. */
static inline int pd_inflight(const rt_runner *r)
{
    return (int)(r->pd_own_f - r->pd_own_b);
}

/* ---- runner_plan.c (called by rt_runner_new) ---- */

/* Sizes and offsets of the micro-batches run (sliced: the first ones in halves). */
sc_status rt_runner_plan_microbatches(rt_runner *r, const rt_runner_cfg *c, bool sliced,
                                      sc_err *err);
/* Sizes per stage: the neighbours' cuts and the backward cut (nothing without them). */
sc_status rt_runner_plan_reslice(rt_runner *r, const rt_runner_cfg *c, bool unequal, sc_err *err);
/* The copies of every stage, the schedule and this copy's action list and slots. */
sc_status rt_runner_plan_replicas(rt_runner *r, const rt_runner_cfg *c, rt_schedule_kind skind,
                                  sc_err *err);
/* A backward cut's own action list (r->acts). */
sc_status rt_runner_plan_backward_actions(rt_runner *r, sc_err *err);
/* The host buffers, sized by the plan; every slot free. */
sc_status rt_runner_alloc_buffers(rt_runner *r, sc_err *err);

/* ---- runner_connect.c ---- */

/* rt_runner_new: the transports and the endpoint, the device boundaries and their buffers, the
 * copies' device all-reduce (replica_reduce "nccl"). */
sc_status rt_runner_open_transports(rt_runner *r, const rt_runner_cfg *c, kn_device dev,
                                    sc_err *err);
sc_status rt_runner_device_boundaries(rt_runner *r, const rt_runner_cfg *c, kn_device dev,
                                      sc_err *err);
sc_status rt_runner_open_reduce(rt_runner *r, const rt_runner_cfg *c, kn_device dev, sc_err *err);
/* Sends an activation to copy mb % next_replicas of the next stage, a gradient to copy
 * mb % prev_replicas of the previous one: floats, in 16 bits over host memory in a bf16 / fp16
 * job (rt_transport_send_floats). */
sc_status rt_runner_send_routed(rt_runner *r, rt_msg_kind kind, uint64_t step, int mb,
                                const void *data, size_t bytes, sc_err *err);

/* ---- runner_update.c ---- */

/* Benchmarks: sleeps `seconds` (nothing for <= 0). */
void rt_runner_extra_compute(double seconds);
/* The copies' all-reduce of the gradients and of *loss_sum (tag0: see there; mean: divide by r). */
sc_status rt_runner_reduce_copies(rt_runner *r, uint64_t step, int tag0, bool mean,
                                  double *loss_sum, sc_err *err);
/* The optimizer step on the device, after the gradient norms (r->norms). */
sc_status rt_runner_optimizer_apply(rt_runner *r, sc_err *err);

/* ---- runner_scale.c ---- */

/* rt_runner_new: the loss scale of an fp16 stage (none otherwise); refuses pipedream. */
sc_status rt_runner_scale_setup(rt_runner *r, const rt_runner_cfg *c, sc_err *err);
/* At OPT, after the copies' all-reduce and the tied relay: every stage learns whether any
 * overflowed (*skip: then no update), the gradients are unscaled, the scale moves. */
sc_status rt_runner_scale_agree(rt_runner *r, uint64_t step, bool *skip, sc_err *err);

/* ---- runner_tie.c ---- */

/* rt_runner_new, after the stage: whether the model's tied tensor spans stages (then tie_relay),
 * refusing the set-ups the relay does not serve. */
sc_status rt_runner_tie_setup(rt_runner *r, const rt_runner_cfg *c, sc_err *err);
/* At OPT, before the step: both end stages get the tied tensor's summed gradient; stages in
 * between pass the two gradients on. Nothing without tie_relay. */
sc_status rt_runner_tie_exchange(rt_runner *r, uint64_t step, sc_err *err);

/* ---- runner_pipedream.c ---- */

/* rt_runner_new: the weight stashes and the event list. */
sc_status rt_runner_alloc_stash(rt_runner *r, sc_err *err);
/* rt_runner_step of a pipedream runner: one step of the stream. */
sc_status rt_runner_pd_step(rt_runner *r, uint64_t step, rt_report *rep, sc_err *err);
/* An empty stream (after a load). */
void rt_runner_pd_reset(rt_runner *r);

#endif /* RT_RUNNER_INTERNAL_H */
