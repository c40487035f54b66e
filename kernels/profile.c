/*
 * kn profile: one single-block stage per block, sized for the largest micro-batch, timed with
 * the context's timers (events on a GPU, so the times are device times, not launch times), the
 * blocks of a chain run one after the other as a stage runs them.
 * Sustained (cfg.min_time_s > 0) on a CPU device with one kernel thread, a block's time is its
 * share of the passes' thread CPU time times the passes' wall time: a CPU quota (a container's
 * limit, the lab's cgroups) stalls the thread wherever the quota runs out, so one block's own
 * wall times carry stalls its neighbours' work caused and scatter from pass to pass, while its
 * CPU time is its own work and whole passes take what the quota lets them take together.
 */
#include "kernels/profile.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_clock.h"
#include "common/sc_util.h"
#include "kernels/block.h"
#include "kernels/stage.h"
#include "kernels/threads_cpu.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint32_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

/* The blocks a chain may hold at once: the parameters, gradients and optimizer state of its
 * one-block stages and their activations at the largest size. */
#define CHAIN_BYTES ((size_t)2 << 30)

static size_t block_bytes(const kn_block *b, int cap)
{
    return (size_t)b->params * 4 * sizeof(float) +
           (size_t)cap *
               (b->in_floats + b->stash_floats + 2 * b->out_floats + kn_block_wstash_floats(b)) *
               sizeof(float);
}

/* One chain's buffers: a stage per block, the first block's input, the targets, the gradient
 * into the last block's output, and the timings of one size. */
typedef struct {
    int a, n;                         /* blocks a .. a+n-1 */
    kn_stage **st;                    /* [n] */
    double *fw, *bw, *wg;             /* [n][repeats]: pass k's times in slot k % repeats */
    double *fw_sum, *bw_sum, *wg_sum; /* [n]: every timed pass's times added */
    /* [n] each: the same passes' thread CPU seconds, when `cpu_clock` (below) */
    double *fw_cpu, *bw_cpu, *wg_cpu;
    bool cpu_clock;           /* a one-thread CPU device: a block's work is its thread's CPU time */
    const atomic_int *cancel; /* kn_profile_cfg.cancel */
    double pass_wall_s; /* the timed passes' wall time, first forward to last backward, added */
    void *dev_in, *dev_tgt, *dev_dout;
    kn_ctx *ctx0; /* the first stage's: where the chain's inputs live */
} chain;

/* SC_ERR_CANCELLED once `cancel` (kn_profile_cfg.cancel, may be NULL) is set. */
static sc_status check_cancel(const atomic_int *cancel, sc_err *err)
{
    if (cancel != NULL && atomic_load(cancel) != 0)
        return SC_ERRF(err, SC_ERR_CANCELLED, "profiling was cancelled");
    return SC_OK;
}

static void chain_free(chain *c)
{
    if (c->st != NULL) {
        if (c->ctx0 != NULL) {
            kn_ctx_free(c->ctx0, c->dev_in);
            kn_ctx_free(c->ctx0, c->dev_tgt);
            kn_ctx_free(c->ctx0, c->dev_dout);
        }
        for (int i = 0; i < c->n; i++)
            kn_stage_destroy(&c->st[i]);
    }
    free(c->st);
    free(c->fw);
    free(c->bw);
    free(c->wg);
    free(c->fw_sum);
    free(c->bw_sum);
    free(c->wg_sum);
    free(c->fw_cpu);
    free(c->bw_cpu);
    free(c->wg_cpu);
}

/* Random inputs of the chain's first block, targets, and a random gradient into its last
 * block's output, uploaded to the first stage's device (every stage of a chain is on it). */
static sc_status chain_inputs(const kn_model *m, chain *c, int cap, sc_err *err)
{
    const kn_block *first = kn_model_block(m, c->a), *last = kn_model_block(m, c->a + c->n - 1);
    size_t in_n = first->in_floats * cap, tgt_n = (size_t)kn_model_targets_per_sample(m) * cap;
    size_t out_n = last->out_floats * cap;
    float *host_in = malloc(in_n * 4 + 4), *host_dout = malloc(out_n * 4 + 4);
    int32_t *host_tgt = malloc(tgt_n * 4 + 4);
    sc_status rc = SC_OK;
    if (!host_in || !host_dout || !host_tgt) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory profiling %s", first->name);
        goto out;
    }
    uint64_t seed = 12345 + (uint64_t)c->a;
    for (size_t i = 0; i < in_n; i++) {
        if (first->in_tokens)
            ((int32_t *)host_in)[i] = (int32_t)(lcg(&seed) % (uint32_t)first->V);
        else
            host_in[i] = (float)lcg(&seed) / 4294967296.0f - 0.5f;
    }
    for (size_t i = 0; i < tgt_n; i++)
        host_tgt[i] = (int32_t)(lcg(&seed) % (uint32_t)kn_model_classes(m));
    for (size_t i = 0; i < out_n; i++)
        host_dout[i] = ((float)lcg(&seed) / 4294967296.0f - 0.5f) * 1e-3f;
    kn_ctx *ctx = c->ctx0;
    SC_CHECK_GOTO(kn_ctx_alloc(ctx, in_n * 4, &c->dev_in, err), out);
    SC_CHECK_GOTO(kn_ctx_alloc(ctx, tgt_n * 4, &c->dev_tgt, err), out);
    SC_CHECK_GOTO(kn_ctx_alloc(ctx, out_n * 4, &c->dev_dout, err), out);
    SC_CHECK_GOTO(kn_ctx_upload(ctx, c->dev_in, host_in, in_n * 4, err), out);
    SC_CHECK_GOTO(kn_ctx_upload(ctx, c->dev_tgt, host_tgt, tgt_n * 4, err), out);
    SC_CHECK_GOTO(kn_ctx_upload(ctx, c->dev_dout, host_dout, out_n * 4, err), out);
    SC_CHECK_GOTO(kn_ctx_sync(ctx, err), out);
out:
    free(host_in);
    free(host_dout);
    free(host_tgt);
    return rc;
}

/* One pass of the chain at `n` samples, as a stage runs its blocks: the forwards in order, each
 * on its predecessor's output, then the backwards in reverse, each on its successor's input
 * gradient, each timed on its own (kn_ctx_time_end waits for the work, so the next block reads
 * a complete input); `it` < 0: untimed. A backward runs as its two parts, B then W
 * (kn_stage_backward_input / _weight: the fused backward's kernels, plus the copy of an output
 * gradient some blocks keep for W), timed apart: the backward's time is their sum, W's alone
 * zb1's weight-gradient time. */
static sc_status chain_pass(chain *c, int n, int repeats, int it, sc_err *err)
{
    const void *in = c->dev_in;
    double wall0 = sc_clock_now_s();
    for (int i = 0; i < c->n; i++) {
        kn_ctx *ctx = kn_stage_ctx(c->st[i]);
        double t, cpu0 = c->cpu_clock ? sc_clock_thread_cpu_s() : 0;
        SC_CHECK(check_cancel(c->cancel, err));
        SC_CHECK(kn_ctx_time_begin(ctx, err));
        SC_CHECK(kn_stage_forward(c->st[i], 0, in, c->dev_tgt, n, err));
        SC_CHECK(kn_ctx_time_end(ctx, &t, err));
        if (it >= 0) {
            c->fw[(size_t)i * repeats + it % repeats] = t;
            c->fw_sum[i] += t;
            if (c->cpu_clock)
                c->fw_cpu[i] += sc_clock_thread_cpu_s() - cpu0;
        }
        in = kn_stage_output(c->st[i], 0);
    }
    for (int i = c->n - 1; i >= 0; i--) {
        kn_ctx *ctx = kn_stage_ctx(c->st[i]);
        const float *dout = i == c->n - 1 ? c->dev_dout : kn_stage_grad_input(c->st[i + 1]);
        double t, w, cpu0 = c->cpu_clock ? sc_clock_thread_cpu_s() : 0, cpu1 = 0;
        SC_CHECK(check_cancel(c->cancel, err));
        SC_CHECK(kn_ctx_time_begin(ctx, err));
        SC_CHECK(kn_stage_backward_input(c->st[i], 0, dout, err));
        SC_CHECK(kn_ctx_time_end(ctx, &t, err));
        if (c->cpu_clock)
            cpu1 = sc_clock_thread_cpu_s();
        SC_CHECK(kn_ctx_time_begin(ctx, err));
        SC_CHECK(kn_stage_backward_weight(c->st[i], 0, err));
        SC_CHECK(kn_ctx_time_end(ctx, &w, err));
        if (it >= 0) {
            c->bw[(size_t)i * repeats + it % repeats] = t + w;
            c->bw_sum[i] += t + w;
            c->wg[(size_t)i * repeats + it % repeats] = w;
            c->wg_sum[i] += w;
            if (c->cpu_clock) {
                double cpu2 = sc_clock_thread_cpu_s();
                c->bw_cpu[i] += cpu2 - cpu0;
                c->wg_cpu[i] += cpu2 - cpu1;
            }
        }
    }
    if (it >= 0)
        c->pass_wall_s += sc_clock_now_s() - wall0;
    for (int i = 0; i < c->n; i++)
        SC_CHECK(kn_stage_zero_grads(c->st[i], err));
    return SC_OK;
}

/* One optimizer step of every block of the chain, each timed on its own into the forward
 * slots (which the sizes' passes no longer need); `it` < 0: untimed. */
static sc_status optimizer_pass(chain *c, int repeats, int it, sc_err *err)
{
    double wall0 = sc_clock_now_s();
    for (int i = 0; i < c->n; i++) {
        kn_ctx *ctx = kn_stage_ctx(c->st[i]);
        double norm, t, cpu0 = c->cpu_clock ? sc_clock_thread_cpu_s() : 0;
        SC_CHECK(check_cancel(c->cancel, err));
        SC_CHECK(kn_ctx_time_begin(ctx, err));
        SC_CHECK(kn_stage_grad_sq_norms(c->st[i], &norm, err));
        SC_CHECK(kn_stage_step(c->st[i], err));
        SC_CHECK(kn_ctx_time_end(ctx, &t, err));
        if (it >= 0) {
            c->fw[(size_t)i * repeats + it % repeats] = t;
            c->fw_sum[i] += t;
            if (c->cpu_clock)
                c->fw_cpu[i] += sc_clock_thread_cpu_s() - cpu0;
        }
    }
    if (it >= 0)
        c->pass_wall_s += sc_clock_now_s() - wall0;
    return SC_OK;
}

/* Zeroes the sums of the timed passes before those of another size (or of the optimizer). */
static void clear_sums(chain *c)
{
    size_t bytes = (size_t)c->n * sizeof(double);
    memset(c->fw_sum, 0, bytes);
    memset(c->bw_sum, 0, bytes);
    memset(c->wg_sum, 0, bytes);
    memset(c->fw_cpu, 0, bytes);
    memset(c->bw_cpu, 0, bytes);
    memset(c->wg_cpu, 0, bytes);
    c->pass_wall_s = 0;
}

/* Whether a size needs another timed pass after `k`, the first of which began at `start_s`:
 * `repeats` of them, and when sustained as many more as make min_time_s. */
static bool more_passes(const kn_profile_cfg *cfg, int k, double start_s)
{
    if (k < cfg->repeats)
        return true;
    return cfg->min_time_s > 0 &&
           k < (cfg->max_passes > 0 ? cfg->max_passes : KN_PROFILE_PASSES_MAX) &&
           sc_clock_now_s() - start_s < cfg->min_time_s;
}

/* Measures blocks a .. a+n-1 as one chain into out[a ..]. */
static sc_status profile_chain(const kn_model *m, int a, int n, const kn_profile_cfg *cfg, int cap,
                               kn_profile_block *out, sc_err *err)
{
    int R = cfg->repeats;
    chain c = {.a = a, .n = n, .cancel = cfg->cancel};
    c.st = calloc((size_t)n, sizeof *c.st);
    c.fw = calloc((size_t)n * R, sizeof *c.fw);
    c.bw = calloc((size_t)n * R, sizeof *c.bw);
    c.wg = calloc((size_t)n * R, sizeof *c.wg);
    c.fw_sum = calloc((size_t)n, sizeof *c.fw_sum);
    c.bw_sum = calloc((size_t)n, sizeof *c.bw_sum);
    c.wg_sum = calloc((size_t)n, sizeof *c.wg_sum);
    c.fw_cpu = calloc((size_t)n, sizeof *c.fw_cpu);
    c.bw_cpu = calloc((size_t)n, sizeof *c.bw_cpu);
    c.wg_cpu = calloc((size_t)n, sizeof *c.wg_cpu);
    sc_status rc = SC_OK;
    if (c.st == NULL || c.fw == NULL || c.bw == NULL || c.wg == NULL || c.fw_sum == NULL ||
        c.bw_sum == NULL || c.wg_sum == NULL || c.fw_cpu == NULL || c.bw_cpu == NULL ||
        c.wg_cpu == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory profiling");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        SC_CHECK_GOTO(check_cancel(cfg->cancel, err), out);
        kn_stage_cfg scfg = kn_stage_cfg_default(a + i, a + i, cfg->device, cap);
        scfg.precision = cfg->precision;
        scfg.split_backward = true; /* B and W timed apart */
        rc = kn_stage_new_cfg(&c.st[i], m, &scfg, err);
        if (rc != SC_OK) {
            sc_err_prefix(err, "block %d (%s)", a + i, kn_model_block(m, a + i)->name);
            goto out;
        }
    }
    c.ctx0 = kn_stage_ctx(c.st[0]);
    SC_CHECK_GOTO(chain_inputs(m, &c, cap, err), out);
    for (int i = 0; i < n; i++) {
        const kn_block *b = kn_model_block(m, a + i);
        kn_profile_block *pb = &out[a + i];
        sc_strlcpy(pb->name, b->name, sizeof pb->name);
        pb->parameter_bytes = b->params * sizeof(float);
        /* what crosses a cut: 16-bit floats in a bf16 / fp16 job (the host wire; a GPU-to-GPU
         * nccl boundary still carries fp32) */
        pb->activation_bytes_per_sample =
            b->out_floats * (kn_precision_is_half(cfg->precision) ? 2 : sizeof(float));
        pb->stash_bytes_per_sample = (b->in_floats + b->stash_floats) * sizeof(float);
        pb->wstash_bytes_per_sample = kn_block_wstash_floats(b) * sizeof(float);
        pb->on_gpu = cfg->device.kind == KN_DEV_CUDA;
        pb->precision = cfg->precision;
        pb->npoints = cfg->nsizes;
    }
    bool sustained = cfg->min_time_s > 0;
    c.cpu_clock = sustained && cfg->device.kind == KN_DEV_CPU && kn_cpu_threads() == 1;
    for (int s = 0; s < cfg->nsizes; s++) {
        for (int it = 0; it < cfg->warmup; it++)
            SC_CHECK_GOTO(chain_pass(&c, cfg->sizes[s], R, -1, err), out);
        clear_sums(&c);
        double start = sc_clock_now_s();
        int k = 0;
        while (more_passes(cfg, k, start))
            SC_CHECK_GOTO(chain_pass(&c, cfg->sizes[s], R, k++, err), out);
        double cpu_total = 0;
        for (int i = 0; c.cpu_clock && i < n; i++)
            cpu_total += c.fw_cpu[i] + c.bw_cpu[i];
        for (int i = 0; i < n; i++) {
            kn_profile_point *pt = &out[a + i].points[s];
            pt->size = cfg->sizes[s];
            if (cpu_total > 0) {
                pt->forward_s = c.fw_cpu[i] / cpu_total * c.pass_wall_s / k;
                pt->backward_s = c.bw_cpu[i] / cpu_total * c.pass_wall_s / k;
                pt->wgrad_s = c.wg_cpu[i] / cpu_total * c.pass_wall_s / k;
            } else {
                pt->forward_s = sustained ? c.fw_sum[i] / k : median(c.fw + (size_t)i * R, R);
                pt->backward_s = sustained ? c.bw_sum[i] / k : median(c.bw + (size_t)i * R, R);
                pt->wgrad_s = sustained ? c.wg_sum[i] / k : median(c.wg + (size_t)i * R, R);
            }
            if (pt->wgrad_s > pt->backward_s) /* medians of different passes */
                pt->wgrad_s = pt->backward_s;
        }
    }
    /* The optimizer step of each block's parameters as the stage runtime takes it: the gradient
     * norms, then the update, both on the stage's device, block after block (its cost does not
     * depend on the micro-batch size). */
    for (int it = 0; it < cfg->warmup; it++)
        SC_CHECK_GOTO(optimizer_pass(&c, R, -1, err), out);
    clear_sums(&c);
    double start = sc_clock_now_s();
    int k = 0;
    while (more_passes(cfg, k, start))
        SC_CHECK_GOTO(optimizer_pass(&c, R, k++, err), out);
    double cpu_total = 0;
    for (int i = 0; c.cpu_clock && i < n; i++)
        cpu_total += c.fw_cpu[i];
    for (int i = 0; i < n; i++)
        out[a + i].optimizer_s = cpu_total > 0 ? c.fw_cpu[i] / cpu_total * c.pass_wall_s / k
                                 : sustained   ? c.fw_sum[i] / k
                                               : median(c.fw + (size_t)i * R, R);
out:
    chain_free(&c);
    return rc;
}

sc_status kn_profile_run(const kn_model *m, const kn_profile_cfg *cfg, kn_profile_block *out,
                         sc_err *err)
{
    if (cfg->nsizes < 1 || cfg->nsizes > KN_PROFILE_SIZES_MAX || cfg->repeats < 1 ||
        cfg->warmup < 0)
        return SC_ERRF(err, SC_ERR_INVALID,
                       "profile needs 1..%d micro-batch sizes, repeats >= 1 and warmup >= 0",
                       KN_PROFILE_SIZES_MAX);
    int cap = 0;
    for (int s = 0; s < cfg->nsizes; s++) {
        if (cfg->sizes[s] < 1)
            return SC_ERRF(err, SC_ERR_INVALID, "micro-batch size %d (valid: >= 1)", cfg->sizes[s]);
        if (cfg->sizes[s] > cap)
            cap = cfg->sizes[s];
    }
    /* consecutive blocks up to CHAIN_BYTES at once (at least one) */
    int nb = kn_model_block_count(m);
    for (int a = 0; a < nb;) {
        size_t bytes = block_bytes(kn_model_block(m, a), cap);
        int n = 1;
        while (a + n < nb && bytes + block_bytes(kn_model_block(m, a + n), cap) <= CHAIN_BYTES)
            bytes += block_bytes(kn_model_block(m, a + n++), cap);
        sc_status rc = check_cancel(cfg->cancel, err);
        if (rc == SC_OK)
            rc = profile_chain(m, a, n, cfg, cap, out, err);
        if (rc == SC_ERR_CANCELLED)
            return rc;
        if (rc != SC_OK) {
            sc_err_prefix(err, "profiling blocks %d..%d", a, a + n - 1);
            return rc;
        }
        a += n;
    }
    return SC_OK;
}

sc_status kn_profile_to_json(const kn_model *m, const char *reference_device, int microbatch_size,
                             const kn_profile_block *blocks, int nblocks, void **json_out,
                             sc_err *err)
{
    *json_out = NULL;
    json_t *root = json_object(), *arr = json_array();
    if (root == NULL || arr == NULL) {
        json_decref(root);
        json_decref(arr);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing a profile");
    }
    json_object_set_new(root, "format", json_string("stagecraft-profile"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "model", json_string(kn_model_name(m)));
    json_object_set_new(root, "reference_device", json_string(reference_device));
    json_object_set_new(root, "microbatch_size", json_integer(microbatch_size));
    for (int i = 0; i < nblocks; i++) {
        const kn_profile_block *pb = &blocks[i];
        const kn_profile_point *main = NULL;
        json_t *b = json_object(), *by = json_array();
        for (int s = 0; s < pb->npoints; s++) {
            const kn_profile_point *p = &pb->points[s];
            if (p->size == microbatch_size)
                main = p;
            json_t *o = json_object();
            json_object_set_new(o, "size", json_integer(p->size));
            json_object_set_new(o, "forward_s", json_real(p->forward_s));
            json_object_set_new(o, "backward_s", json_real(p->backward_s));
            json_object_set_new(o, "wgrad_s", json_real(p->wgrad_s));
            json_array_append_new(by, o);
        }
        if (main == NULL) {
            json_decref(b);
            json_decref(by);
            json_decref(root);
            json_decref(arr);
            return SC_ERRF(err, SC_ERR_INVALID, "micro-batch size %d was not measured",
                           microbatch_size);
        }
        json_object_set_new(b, "name", json_string(pb->name));
        json_object_set_new(b, "forward_s", json_real(main->forward_s));
        json_object_set_new(b, "backward_s", json_real(main->backward_s));
        json_object_set_new(b, "wgrad_s", json_real(main->wgrad_s));
        json_object_set_new(
            b, "activation_bytes",
            json_integer((json_int_t)(pb->activation_bytes_per_sample * (size_t)microbatch_size)));
        json_object_set_new(b, "parameter_bytes", json_integer((json_int_t)pb->parameter_bytes));
        json_object_set_new(b, "optimizer_s", json_real(pb->optimizer_s));
        json_object_set_new(
            b, "stash_bytes",
            json_integer((json_int_t)(pb->stash_bytes_per_sample * (size_t)microbatch_size)));
        json_object_set_new(
            b, "wstash_bytes",
            json_integer((json_int_t)(pb->wstash_bytes_per_sample * (size_t)microbatch_size)));
        json_object_set_new(b, "scratch_bytes",
                            json_integer((json_int_t)kn_block_scratch_bytes(
                                kn_model_block(m, i), microbatch_size, pb->on_gpu, pb->precision)));
        json_object_set_new(b, "by_microbatch_size", by);
        json_array_append_new(arr, b);
    }
    json_object_set_new(root, "blocks", arr);
    *json_out = root;
    return SC_OK;
}
