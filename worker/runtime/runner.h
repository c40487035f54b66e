/*
 * rt runner: the stage executor of one worker. It owns one pipeline stage of a model (a kn_stage
 * over blocks [first_block, last_block]), the job's data source, the data-plane transport to its
 * neighbours and the schedule's action list for its stage, and runs one training iteration per
 * rt_runner_step(): every micro-batch by the schedule (receive, forward, send, ..., backward),
 * then the optimizer step. The first stage reads inputs, the last reads targets and computes the
 * loss (both regenerate the same deterministic batch, so labels skip the middle stages).
 *
 * Gradients of the m micro-batches accumulate with the loss scaled by 1/(positions of the whole
 * batch), so one iteration equals one step on the batch mean: a p-stage pipeline reaches the same
 * parameters as single-stage training with gradient accumulation.
 *
 * The optimizer steps on the stage's own device (kn_stage_step); host copies of the parameters
 * and of its state (AdamW moments or SGD velocity) are made only for checkpoints, pipedream's
 * weight stashes and a host all-reduce of replicated stages.
 *
 * Micro-batches may differ in size, and the "sliced" schedule cuts the first warm-up micro-batches
 * in halves; both keep the equivalence above.
 * Sizes per stage (UMPIPE's forward sizes, schedule "unequal", or "gpipe" with neighbour lists):
 * each stage cuts the batch into its own consecutive sample ranges (microbatch_sizes) and is told
 * how its neighbours cut it (prev_sizes, next_sizes). A stage sends each of its micro-batches as
 * it finishes it (its activation forward, its input gradient backward), cut by its own ranges; the
 * receiver copies every message into an iteration-wide host buffer indexed by sample and runs its
 * micro-batch j over samples [a, b) once the received prefix reaches b (upstream activations in
 * the forward, downstream gradients in the backward). Fill-drain order (all forwards, then all
 * backwards, both ascending), so receives only ever wait for the neighbour's own progress and
 * nothing deadlocks. UMPIPE's backward sizes: a stage may also cut its backward its own way
 * (backward_sizes; default its forward cut) and is told the next stage's backward cut
 * (next_backward_sizes), in which the gradients it receives come; it sends its input gradients in
 * its own backward cut. Backward entry j over samples [a, b) waits until the received gradient
 * prefix reaches b and runs on the slot of the forward micro-batch with exactly those samples, or
 * else on the stage's gather slot, into which kn_stage_gather copies those samples' activations
 * from the slots of the forwards they came from (one more activation slot, sized for the
 * largest such entry). A forward's slot is freed once backward entries cover all its samples.
 * A neighbour list that disputes the neighbour's real cut is found at the first message whose
 * size differs, in the first step: SC_ERR_INVALID naming prev_sizes / next_sizes /
 * next_backward_sizes.
 * "pipedream" (asynchronous PipeDream, 1f1b without flush): every micro-batch is a minibatch of
 * its own, with its own optimizer step after its backward. The micro-batches of consecutive steps
 * form one stream g = 0, 1, 2, ... (step base + g / m, micro-batch g % m) that flows through the
 * pipeline without draining: stage s runs F(g) then B(g - w) with w = p-s-1 (warm-up: the first w
 * forwards run without a backward, once per fill), so p-s minibatches are in flight at most. A
 * forward uses the newest weights, which are stashed (p-s versions at most, one per in-flight
 * minibatch) so its backward runs on the same version; the update then goes to the newest ones.
 * rt_runner_step(t) runs the m forwards of step t and the backwards that 1f1b puts between them,
 * so on return stage s still holds w minibatches in flight (the last w of step t); their backwards
 * run in the next step or in rt_runner_flush(), which drains the pipeline (every stage must call
 * it). Between flushes steps must be consecutive; checkpoints are only taken flushed.
 * Replicated (data-parallel) stages: a stage may run as r copies (cfg replicas / replica), each a
 * runner of its own. Micro-batch j of an iteration runs on copy j % r of every stage, so its
 * activation goes from copy j % r_prev of the previous stage to copy j % r of this one and its
 * gradient back the same way; each copy runs its stage's action list restricted to its own
 * micro-batches (checked deadlock-free by a dry run over the stage, its neighbours and their
 * copies). 1f1b and sliced warm up for the copies (1F1B-RR, rt_schedule_new_replicated): stage s
 * as a whole runs min(W_s, m) forwards before its first backward, W_s as for pipedream below,
 * so each copy runs W_s / r_s of its own and then alternates; with replicated stages beyond the
 * next one such a runner needs stage_replicas (SC_ERR_INVALID otherwise). At OPT the copies
 * all-reduce their host gradients over the transport (every copy sends its own to all others and
 * adds all r in copy order, so the sums are bit-identical), then each steps its own parameters: the
 * copies stay bit-identical, and the result equals unreplicated training. The last stage's copies
 * also sum their losses, so each reports the batch loss. With replicas: gpipe, 1f1b and sliced
 * (whose halves count as micro-batches here) need m >= the largest of the three replica counts (m
 * need not be a multiple of r: copies j < m % r run one micro-batch more); copy 0 writes
 * checkpoints, every copy loads the same file. pipedream with replicas (PipeDream's 1F1B-RR):
 * minibatch g of the stream runs on copy g % r of every stage (activation from copy g % r_prev,
 * gradient back the same way), its backward on that copy with the version stashed at its forward.
 * Stage s as a whole runs F(g), then B(g - W_s) with W_s = r_s * floor((R_s - 1) / r_s), R_s the
 * copies of stages s..p-1 (p-s-1 unreplicated), so each copy alternates its own F and B after W_s /
 * r_s warm-up forwards and keeps W_s / r_s + 1 slots and versions (stage 0: PipeDream's NOAM,
 * ceil(all copies / r_0)). The backwards go in rounds of r_s consecutive minibatches, one per copy;
 * after the round's last backward every copy all-reduces (as above) and applies the MEAN of the
 * round's r_s gradients, so the copies update together and stay bit-identical, and a version counts
 * rounds. The mean keeps the step size of unreplicated pipedream: with r copies of every stage this
 * is unreplicated pipedream over minibatches of r times the samples (a round's union, m/r per
 * step), up to float rounding; mixed counts have no unreplicated equivalent (a replicated stage
 * updates once per round, an unreplicated one per minibatch). m must be a multiple of every stage's
 * copies (rounds never straddle steps, so the last stage's copies each report the step's loss and a
 * flush drains whole rounds); every runner needs all stages' counts (stage_replicas) for W_s. The
 * runner dry-runs the job's copies over streams of some steps and their drains
 * (rt_schedule_new_pipedream, rt_schedule_validate_replicas: OPTs are barriers of a stage's
 * copies) before it runs.
 * Copies on GPUs of their own may all-reduce on the devices instead (cfg replica_reduce "nccl",
 * rt allreduce: ncclAllReduce of the device gradients, the same bits on every copy but not the
 * host path's bits).
 * Not here: sizes per stage (forward or backward) with another schedule than gpipe or with
 * replicas, the nccl transport between stages with replicas (SC_ERR_UNSUPPORTED).
 * A GPU stage on the synchronous schedules without replicas or sizes per stage hands the nccl
 * transport (and local with device payloads) device memory; the other paths pass activations
 * and gradients through the runner's host buffers.
 * Invariant: no more than the schedule's activation slots (per copy: gpipe ceil(m / r_s), 1f1b
 * min(W_s / r_s + 1, ceil(m / r_s)), pipedream W_s / r_s + 1; min(p-s, m) and p-s unreplicated:
 * rt_schedule_slots_bound; zb1 rt_schedule_zb1_slots_bound) are ever in flight; each iteration
 * checks it and fails with SC_ERR_INTERNAL otherwise.
 * (A backward cut's gather slot holds no forward of its own and is not counted there; the
 * report's `slots` includes it.)
 * Threading: all calls on a runner come from one thread; rt_runner_abort() from any thread.
 */
#ifndef RT_RUNNER_H
#define RT_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"
#include "worker/runtime/timeline.h"
#include "worker/transport/transport.h" /* RT_ENDPOINT_MAX: room for an endpoint */

typedef struct {
    const char *model_json;      /* a stagecraft-model document, or a job's "model" object */
    int n_stages;                /* p >= 1 */
    int stage;                   /* this stage, 0..p-1 */
    int first_block, last_block; /* inclusive, 0-based; consecutive stages must tile the model */
    const char *schedule;        /* "gpipe", "1f1b", "zb1" (1f1b with each backward split in B
                                  * and W, schedule.h), "sliced", "pipedream" or "unequal"
                                  * (gpipe order, sizes per stage: see prev_sizes) */
    int batch_size;              /* samples per iteration */
    int microbatches;            /* m >= 1 */
    uint64_t seed;               /* data order */
    const char *data_kind;       /* "text", "tokens", "cifar10", "synthetic" */
    const char *data_path;       /* NULL for synthetic */
    const char *optimizer;       /* "adamw" or "sgd" */
    const char *precision;       /* "fp32", "tf32", "bf16" or "fp16" (kernels/precision.h: the
                                  * plan's, resolved); NULL: fp32 */
    /* fp16 only: the dynamic loss scale's start and the steps without overflow after which it
     * doubles (runner_scale.c); 0: 65536 and 2000, as PyTorch's GradScaler. */
    double loss_scale_init;
    int loss_scale_interval;
    double lr, weight_decay, momentum; /* momentum: SGD only */
    const char *device;                /* "cpu" or "cuda:N" */
    const char *transport;             /* "zmq", "local" or "nccl" (cuda:N devices, no
                                        * replicas; CUDA + NCCL builds) */
    const char *transport_next;        /* the next boundary's transport when it differs from
                                        * `transport` (which then carries the previous one
                                        * only); NULL or "": the same. An end stage's one
                                        * boundary uses the kind given for it. Not with
                                        * replicas. */
    const char *bind_endpoint;         /* this stage's inbox: "tcp://HOST:0", "local://NAME";
                                        * ignored for nccl (the runner picks "nccl://" or
                                        * "nccl://-" by the stage's place) */
    int timeout_ms;                    /* longest wait for a neighbour's message */
    uint64_t tag;                      /* data-plane tag shared by the job's stages (0 is fine) */
    /* Benchmarks only: seconds per sample added (slept, counted as busy) to every forward /
     * backward, and seconds added to every optimizer step, to measure a schedule's bubble
     * independently of how many cores the host has. 0 in real jobs. */
    double extra_forward_s, extra_backward_s, extra_optimizer_s;
    /* Freezing: the model's blocks [0, frozen_blocks) are frozen (forward only; 0: none). A stage
     * wholly inside the prefix runs no backward and takes no gradient; the stage where the
     * prefix ends sends none upstream. The flushing schedules only (not pipedream). */
    int frozen_blocks;
    /* Skip the per-block squared gradient norms of each step (the reports' grad_sq_norms, which
     * only the freezing policy reads; then NULL): a job that never freezes saves a pass over its
     * gradients each step. false: computed. */
    bool skip_grad_norms;
    /* Tests only: take the device-memory data path (a GPU stage's, with a transport that takes
     * device memory) on any device. On a CPU stage that memory is host memory, so the path's
     * buffers and order run, and are checked, without a GPU. false in real jobs. */
    bool stage_memory_path;
    /* Optional micro-batch sizes of this stage: [microbatches] values >= 1 that sum to
     * batch_size (borrowed during rt_runner_new only). NULL: batch_size / microbatches each, which
     * must then divide. The neighbours cut the batch the same way unless told otherwise below. */
    const int *microbatch_sizes;
    /* Sizes per stage: how the previous / next stage cuts the batch (that stage's own
     * microbatch_sizes): [n_prev_sizes] / [n_next_sizes] values >= 1 summing to batch_size,
     * borrowed during rt_runner_new only. NULL (the default): the same cut as this stage's. Either
     * given turns on re-slicing at that stage boundary; the first stage must leave prev_sizes NULL,
     * the last next_sizes. Needs schedule "gpipe" or "unequal" and no replicas. */
    const int *prev_sizes;
    int n_prev_sizes;
    const int *next_sizes;
    int n_next_sizes;
    /* UMPIPE's backward cut (its second chromosome; same rules as prev_sizes): this stage runs
     * its backwards over its own consecutive sample ranges, [n_backward_sizes] values >= 1
     * summing to batch_size, and sends each input gradient cut by them; NULL (the default): the
     * forward cut (microbatch_sizes). next_backward_sizes / n_next_backward_sizes: the next
     * stage's backward_sizes, the cut of the gradients this stage receives; NULL: that stage
     * has none of its own (next_sizes, or this stage's cut when next_sizes is NULL too). The last
     * stage must leave it NULL. Both borrowed during rt_runner_new only. */
    const int *backward_sizes;
    int n_backward_sizes;
    const int *next_backward_sizes;
    int n_next_backward_sizes;
    /* Schedule "sliced" (1f1b with sliced warm-up): the first `sliced_warmup` micro-batches are
     * each cut into two halves run as separate micro-batches, so downstream stages start after
     * half a forward. -1 (the default) means n_stages - 1; capped at microbatches. */
    int sliced_warmup;
    /* Replicated (data-parallel) stages: this stage runs as `replicas` copies (>= 1), this runner
     * being copy `replica` (0..replicas-1); the neighbouring stages have prev_replicas and
     * next_replicas copies (>= 1; ignored for the first / last stage). Micro-batch j runs on copy
     * j % r of every stage; before the optimizer step the copies of a stage all-reduce their
     * gradients (replica_reduce below). Needs replicas <= the micro-batches run and the
     * "gpipe", "1f1b" or "pipedream" schedule when any of the three is > 1 (pipedream: see the
     * top of this file). Defaults 1, 0, 1, 1. */
    int replicas, replica;
    int prev_replicas, next_replicas;
    /* Copies of every stage: [n_stages] values >= 1, borrowed during rt_runner_new only; entries
     * stage-1, stage and stage+1 must equal prev_replicas, replicas and next_replicas. NULL (the
     * default): those three, 1 for every other stage. pipedream, 1f1b and sliced need the true
     * vector whenever a stage is replicated (the warm-up of a stage depends on the copies of all
     * stages after it; stages told different vectors may deadlock until the timeout), so a job
     * with replicated stages gives it to every stage; gpipe uses it for a fuller dry run. */
    const int *stage_replicas;
    /* How the copies of a replicated stage all-reduce their gradients: "host" (NULL or "", the
     * default: in host memory over the transport, bit-identical sums in copy order, any device)
     * or "nccl" (every copy on a GPU of its own, replicas >= 2, CUDA + NCCL builds: ncclAllReduce
     * of the device gradients, rt allreduce; copy 0 joins the communicator's id to its
     * endpoint, so every copy must get copy 0's endpoint as peer endpoint 0). */
    const char *replica_reduce;
    /* Schedule "zb1" with a memory budget: the most weight gradients (W) each stage defers,
     * [n_stages] values >= 0 (the plan's stages[].deferred_w, from plan_schedule_zb1_caps),
     * borrowed during rt_runner_new only; a stage defers min(this, ZB-H1's count) and allocates
     * the slots that holds (rt_schedule_new_zb1, rt_schedule_zb1_slots_bound). Every stage must
     * be given the same vector. NULL (the default): ZB-H1's deferral on every stage. Ignored by
     * the other schedules. */
    const int *zb1_defer;
} rt_runner_cfg;

/* pipedream: one forward or backward run by rt_runner_step / rt_runner_flush, in order. */
typedef struct {
    bool backward; /* false: forward */
    uint64_t step; /* the minibatch: micro-batch mb of step */
    int mb;
    uint64_t version; /* weight version used (optimizer steps this stage had taken at its F) */
    int inflight;     /* minibatches in flight on this stage after it */
} rt_pd_event;

/* What a copy measured of the copies' all-reduce through host memory (none on the GPUs' NCCL
 * path): its time from its gradients complete to the sum in place, and per other copy the end of
 * it (this copy's monotonic clock) minus that copy's send stamp (its clock). The least of these
 * is the all-reduce's own time on this copy once every copy had its gradients: the time before
 * that is waiting for the slowest copy, not the all-reduce. Of the step's last all-reduce. */
typedef struct {
    unsigned count; /* all-reduces this step (0: none measured) */
    uint64_t bytes; /* gradient bytes each copy contributed */
    double own_s;
    int n_peers;
    int peer_copy[RT_LINK_MAX];
    double peer_delay_s[RT_LINK_MAX];
} rt_reduce_sample;

typedef struct {
    uint64_t step;
    bool has_loss;      /* last stage only */
    size_t memory_bytes; /* the stage's allocations on its device (kn_stage_memory_bytes plus
                          * the context's scratch) */
    double loss;        /* mean loss over the batch */
    double iteration_s; /* wall time of rt_runner_step */
    double busy_s;      /* forward + backward + optimizer compute */
    double busy_cpu_s;  /* the calling thread's CPU seconds over that compute (the copies'
                         * all-reduce left out; 0 under pipedream): at full speed what busy_s
                         * is in wall time, and no more when a CPU quota throttles it */
    double forward_s, backward_s, optimizer_s;
    double wgrad_s;              /* zb1: the part of backward_s spent in W (parameter gradients) */
    double wait_s;               /* blocked in receives and in the replicas' all-reduce */
    double samples_per_s;        /* samples this replica ran / iteration_s (batch_size / iteration_s
                                  * unreplicated) */
    int microbatches;            /* micro-batches run by this replica (with the sliced warm-up
                                  * halves) */
    int max_inflight;            /* most micro-batches held at once this iteration */
    int slots;                   /* activation slots allocated (with the gather slot of a
                                  * backward cut) */
    int n_blocks;                /* last_block - first_block + 1 */
    const double *grad_sq_norms; /* [n_blocks] squared L2 norm of each block's gradient before
                                  * the step; owned by the runner, valid until the next step;
                                  * NULL with cfg.skip_grad_norms */
    /* pipedream only (else NULL / 0), owned by the runner like the above: [microbatches] the
     * weight version (optimizer steps taken on this stage) each micro-batch's forward of this step
     * used (UINT64_MAX for those another copy of the stage ran); the forwards and backwards run by
     * this call in order (a backward may belong to the previous step; with copies, this copy's
     * own only); the minibatches still in flight on this copy on return (W_s / r_s after a step,
     * p-s-1 unreplicated: the pipeline is not drained); the time before the copy's first backward
     * of a fill (the warm-up, in the first step after a start, a load or a flush only) and the
     * backwards run. The steady-state time per minibatch is (iteration_s - warmup_s) /
     * backwards. */
    const uint64_t *weight_version_forward;
    const rt_pd_event *events;
    int n_events;
    int inflight_end;
    double warmup_s;
    int backwards;
    /* The transfers from the neighbours this step took messages from (rt_transport_link_take of
     * the stage's transports: zmq and local; none over nccl), one entry per sending copy. */
    rt_link_sample links[RT_LINK_MAX];
    int n_links;
    rt_reduce_sample reduce; /* the copies' all-reduce through host memory this step */
    /* fp16: the loss scale for the next step, whether this step's update was skipped (an
     * overflow on some stage), and the steps skipped since the start; 0, false, 0 otherwise */
    float loss_scale;
    bool skipped;
    uint64_t skipped_steps;
} rt_report;

typedef struct rt_runner rt_runner;

/* Defaults: 1 stage, gpipe, batch 8, 1 micro-batch, synthetic data, adamw lr 3e-4, cpu, zmq on
 * tcp://127.0.0.1:0, 30 s timeout. model_json and the block range must still be set. */
rt_runner_cfg rt_runner_cfg_default(void);

/* Parses the model, builds the stage, schedule, data source and transport, and binds the inbox.
 * Bad configuration (unknown names, blocks outside the model, batch not divisible by m, data
 * that does not fit the model) is SC_ERR_INVALID / SC_ERR_UNSUPPORTED with a message naming the
 * field and what would be valid. */
sc_status rt_runner_new(rt_runner **out, const rt_runner_cfg *cfg, sc_err *err);
void rt_runner_destroy(rt_runner **r);

/* The bound endpoint, port resolved (what the neighbours connect to); "" for a single-stage job
 * (n_stages 1 opens no transport). A wildcard bind reports e.g. "tcp://0.0.0.0:PORT": advertise
 * a reachable host in its place. With transport_next of another kind, both transports'
 * endpoints joined by RT_ENDPOINT_SEP (the previous boundary's first); rt_runner_connect takes
 * from a neighbour's endpoint the part of the kind of that boundary. */
const char *rt_runner_endpoint(const rt_runner *r);

/* Connects to the neighbours' endpoints (NULL/"" for the first stage's prev and the last stage's
 * next). Must be called before rt_runner_step when n_stages > 1. The unreplicated case of
 * rt_runner_connect_group (refused with SC_ERR_INVALID when any replica count is > 1). */
sc_status rt_runner_connect(rt_runner *r, const char *prev_endpoint, const char *next_endpoint,
                            sc_err *err);

/* Connects a possibly replicated stage: prev_eps[k] is the endpoint of replica k of the previous
 * stage (n_prev == prev_replicas; 0 for the first stage), next_eps[k] of replica k of the next
 * stage (n_next == next_replicas; 0 for the last stage), peer_eps[k] of replica k of this stage
 * (n_peers == replicas; this replica's own slot is ignored and may be NULL; n_peers may be 0 when
 * replicas == 1). A count or endpoint that does not fit the configuration is SC_ERR_INVALID. Must
 * be called before rt_runner_step when n_stages > 1 or replicas > 1. */
sc_status rt_runner_connect_group(rt_runner *r, const char *const *prev_eps, int n_prev,
                                  const char *const *next_eps, int n_next,
                                  const char *const *peer_eps, int n_peers, sc_err *err);

/* One training iteration of `step` (the data of the batch depends on it; steps need not be
 * consecutive, except pipedream's between flushes: another step while minibatches are in flight
 * is SC_ERR_INVALID and runs nothing). Fills `report` (may be NULL). A neighbour that disappears
 * makes this return SC_ERR_TIMEOUT / SC_ERR_UNAVAILABLE within the timeout; the runner is then
 * unusable until rt_runner_load() (its gradients and in-flight activations are partial). */
sc_status rt_runner_step(rt_runner *r, uint64_t step, rt_report *report, sc_err *err);

/* pipedream: drains the pipeline, running the backwards (and updates) of the minibatches still in
 * flight; every stage must call it (the drain needs the neighbours' gradients). Afterwards the
 * parameters are those of the whole stream so far, the next rt_runner_step may take any step and
 * starts a new fill, and rt_runner_save is allowed. Fills `report` (may be NULL: events, timing,
 * step = the last step run). Other schedules drain in every step: SC_OK, nothing to do. */
sc_status rt_runner_flush(rt_runner *r, rt_report *report, sc_err *err);

/* Checkpoint of this stage after `step` (replica 0 only; pipedream only when flushed, else
 * SC_ERR_PRECONDITION; other replicas return SC_OK and write
 * nothing): `dir`/stage<S>-step<N>.ckpt with a magic, version,
 * block range, optimizer kind, the parameters, the optimizer state and a checksum; written to a
 * temporary name and renamed, so a crash never leaves a partial file under the final name. */
sc_status rt_runner_save(rt_runner *r, const char *dir, uint64_t step, sc_err *err);
/* Loads the checkpoint of `step`. A missing file is SC_ERR_NOT_FOUND; a corrupt one (bad magic,
 * checksum) SC_ERR_PARSE; one of another block range, size or optimizer SC_ERR_INVALID.
 * pipedream: the pipeline restarts empty (in-flight minibatches are dropped). */
sc_status rt_runner_load(rt_runner *r, const char *dir, uint64_t step, sc_err *err);
/* A stage's state as a checkpoint holds it, in memory: the block range, the parameters in
 * block order, the optimizer state (nstate = k * nparams floats: k arrays in parameter order,
 * AdamW's m then v) with the optimizer's kind and step count. Images travel between workers when
 * blocks change owner (worker/blocks/). */
typedef struct {
    uint64_t step;
    int first_block, last_block;
    int optim_kind;
    uint64_t opt_t;
    size_t nparams, nstate;
    float *params, *state; /* owned */
} rt_stage_image;

void rt_stage_image_clear(rt_stage_image *im);
/* FNV-1a 64 over the parameters then the state: a checkpoint's checksum (and a moved piece's). */
uint64_t rt_checkpoint_checksum(const float *params, size_t np, const float *state, size_t ns);
/* Reads a checkpoint file whole (header, sizes against the file's length, checksum); errors as
 * rt_runner_load's. */
sc_status rt_stage_image_read(const char *path, rt_stage_image *im, sc_err *err);
/* Writes image `im` as stage `stage`'s checkpoint file `path`, as rt_runner_save does (a
 * temporary name renamed, so a crash never leaves a partial file under the final name). */
sc_status rt_stage_image_write(const char *path, int stage, const rt_stage_image *im, sc_err *err);
/* The stage's state after `step` (pipedream: drained first with rt_runner_flush). */
sc_status rt_runner_snapshot(rt_runner *r, uint64_t step, rt_stage_image *im, sc_err *err);
/* Loads an image of this stage's exact block range, sizes and optimizer (SC_ERR_INVALID naming
 * `source` otherwise), as rt_runner_load does a file. */
sc_status rt_runner_load_image(rt_runner *r, const rt_stage_image *im, const char *source,
                               sc_err *err);
/* The model the stage runs (its blocks' parameter counts say how an image is cut by block). */
const struct kn_model *rt_runner_model(const rt_runner *r);
/* The stage's block range. */
int rt_runner_first_block(const rt_runner *r);
int rt_runner_last_block(const rt_runner *r);

/* The checkpoint path of (dir, stage, step) into buf. */
void rt_runner_checkpoint_path(const rt_runner *r, const char *dir, uint64_t step, char *buf,
                               size_t size);

/* The steps of stage `stage`'s checkpoints in `dir` (files named as rt_runner_save names them;
 * temporary and other files are skipped), newest first, into *steps (caller frees; NULL when
 * none). A missing folder is no checkpoint: SC_OK with *n = 0. */
sc_status rt_checkpoint_list(const char *dir, int stage, uint64_t **steps, size_t *n, sc_err *err);

/* Deletes stage `stage`'s checkpoints in `dir` that are older than the `keep` newest of those
 * at or before `complete_step`, the step every stage of the job has saved (the one a restart
 * resumes from): that one is always kept, and so is every newer one (not complete yet).
 * keep = 0 deletes nothing. *deleted (may be NULL) gets the count. A file that cannot be
 * deleted is SC_ERR_IO naming it (the others are still tried). */
sc_status rt_checkpoint_prune(const char *dir, int stage, uint64_t complete_step, uint64_t keep,
                              size_t *deleted, sc_err *err);

/* Parameters of the stage in block order (host copy), for tests and equivalence checks. */
size_t rt_runner_param_count(const rt_runner *r);
sc_status rt_runner_params_to_host(rt_runner *r, float *host, sc_err *err);

/* The measured events of the runner's last iterations (RT_TIMELINE_ITERATIONS steps and their
 * pipedream flushes, 5/4 of that many entries in all): every rt_runner_step and rt_runner_flush that succeeds
 * commits its forwards, backwards, sends, receives, all-reduce and optimizer step there, timed
 * by the clock reads the step's report uses. Owned by the runner and valid as long as it is;
 * read from any thread with rt_timeline_snapshot (timeline.h). Recording changes no result. */
rt_timeline *rt_runner_timeline(rt_runner *r);

/* Makes a blocked or later rt_runner_step return SC_ERR_CANCELLED soon. Thread-safe. */
void rt_runner_abort(rt_runner *r);

#endif /* RT_RUNNER_H */
