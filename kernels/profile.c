/*
 * kn profile: one single-block stage per block, sized for the largest micro-batch, timed with
 * the context's timers (events on a GPU, so the times are device times, not launch times).
 */
#include "kernels/profile.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "kernels/stage.h"

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

static sc_status profile_block(const kn_model *m, int bi, const kn_profile_cfg *cfg, int cap,
                               kn_profile_block *pb, sc_err *err)
{
    const kn_block *b = kn_model_block(m, bi);
    kn_stage_cfg scfg = kn_stage_cfg_default(bi, bi, cfg->device, cap);
    scfg.allow_tf32 = cfg->allow_tf32;
    kn_stage *st = NULL;
    SC_CHECK(kn_stage_new_cfg(&st, m, &scfg, err));
    kn_ctx *ctx = kn_stage_ctx(st);
    sc_status rc = SC_OK;
    size_t in_n = b->in_floats * cap, tgt_n = (size_t)kn_model_targets_per_sample(m) * cap;
    size_t out_n = b->out_floats * cap;
    float *host_in = malloc(in_n * 4 + 4), *host_dout = malloc(out_n * 4 + 4);
    int32_t *host_tgt = malloc(tgt_n * 4 + 4);
    void *dev_in = NULL, *dev_tgt = NULL, *dev_dout = NULL;
    double *fw = calloc(cfg->repeats, sizeof *fw), *bw = calloc(cfg->repeats, sizeof *bw);
    if (!host_in || !host_dout || !host_tgt || !fw || !bw) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory profiling %s", b->name);
        goto out;
    }
    uint64_t seed = 12345 + (uint64_t)bi;
    for (size_t i = 0; i < in_n; i++) {
        if (b->in_tokens)
            ((int32_t *)host_in)[i] = (int32_t)(lcg(&seed) % (uint32_t)b->V);
        else
            host_in[i] = (float)lcg(&seed) / 4294967296.0f - 0.5f;
    }
    for (size_t i = 0; i < tgt_n; i++)
        host_tgt[i] = (int32_t)(lcg(&seed) % (uint32_t)kn_model_classes(m));
    for (size_t i = 0; i < out_n; i++)
        host_dout[i] = ((float)lcg(&seed) / 4294967296.0f - 0.5f) * 1e-3f;
    SC_CHECK_GOTO(kn_ctx_alloc(ctx, in_n * 4, &dev_in, err), out);
    SC_CHECK_GOTO(kn_ctx_alloc(ctx, tgt_n * 4, &dev_tgt, err), out);
    SC_CHECK_GOTO(kn_ctx_alloc(ctx, out_n * 4, &dev_dout, err), out);
    SC_CHECK_GOTO(kn_ctx_upload(ctx, dev_in, host_in, in_n * 4, err), out);
    SC_CHECK_GOTO(kn_ctx_upload(ctx, dev_tgt, host_tgt, tgt_n * 4, err), out);
    SC_CHECK_GOTO(kn_ctx_upload(ctx, dev_dout, host_dout, out_n * 4, err), out);

    sc_strlcpy(pb->name, b->name, sizeof pb->name);
    pb->parameter_bytes = b->params * sizeof(float);
    pb->activation_bytes_per_sample = b->out_floats * sizeof(float);
    pb->stash_bytes_per_sample = (b->in_floats + b->stash_floats) * sizeof(float);
    pb->npoints = cfg->nsizes;
    for (int s = 0; s < cfg->nsizes; s++) {
        int n = cfg->sizes[s];
        for (int it = 0; it < cfg->warmup + cfg->repeats; it++) {
            double tf, tb;
            SC_CHECK_GOTO(kn_ctx_time_begin(ctx, err), out);
            SC_CHECK_GOTO(kn_stage_forward(st, 0, dev_in, dev_tgt, n, err), out);
            SC_CHECK_GOTO(kn_ctx_time_end(ctx, &tf, err), out);
            SC_CHECK_GOTO(kn_ctx_time_begin(ctx, err), out);
            SC_CHECK_GOTO(kn_stage_backward(st, 0, dev_dout, err), out);
            SC_CHECK_GOTO(kn_ctx_time_end(ctx, &tb, err), out);
            SC_CHECK_GOTO(kn_stage_zero_grads(st, err), out);
            if (it >= cfg->warmup) {
                fw[it - cfg->warmup] = tf;
                bw[it - cfg->warmup] = tb;
            }
        }
        pb->points[s].size = n;
        pb->points[s].forward_s = median(fw, cfg->repeats);
        pb->points[s].backward_s = median(bw, cfg->repeats);
    }
    /* The optimizer step of the block's parameters as the stage runtime takes it: the gradient
     * norms, then the update, both on the stage's device (its cost does not depend on the
     * micro-batch size). */
    double norm;
    for (int it = 0; it < cfg->warmup + cfg->repeats && rc == SC_OK; it++) {
        double to;
        rc = kn_ctx_time_begin(ctx, err);
        if (rc == SC_OK)
            rc = kn_stage_grad_sq_norms(st, &norm, err);
        if (rc == SC_OK)
            rc = kn_stage_step(st, err);
        if (rc == SC_OK)
            rc = kn_ctx_time_end(ctx, &to, err);
        if (rc == SC_OK && it >= cfg->warmup)
            fw[it - cfg->warmup] = to;
    }
    if (rc != SC_OK)
        goto out;
    pb->optimizer_s = median(fw, cfg->repeats);
out:
    if (st != NULL) {
        kn_ctx_free(ctx, dev_in);
        kn_ctx_free(ctx, dev_tgt);
        kn_ctx_free(ctx, dev_dout);
    }
    free(host_in);
    free(host_dout);
    free(host_tgt);
    free(fw);
    free(bw);
    kn_stage_destroy(&st);
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
    for (int i = 0; i < kn_model_block_count(m); i++) {
        sc_status rc = profile_block(m, i, cfg, cap, &out[i], err);
        if (rc != SC_OK) {
            sc_err_prefix(err, "profiling block %d (%s)", i, kn_model_block(m, i)->name);
            return rc;
        }
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
        json_object_set_new(
            b, "activation_bytes",
            json_integer((json_int_t)(pb->activation_bytes_per_sample * (size_t)microbatch_size)));
        json_object_set_new(b, "parameter_bytes", json_integer((json_int_t)pb->parameter_bytes));
        json_object_set_new(b, "optimizer_s", json_real(pb->optimizer_s));
        json_object_set_new(
            b, "stash_bytes",
            json_integer((json_int_t)(pb->stash_bytes_per_sample * (size_t)microbatch_size)));
        json_object_set_new(b, "by_microbatch_size", by);
        json_array_append_new(arr, b);
    }
    json_object_set_new(root, "blocks", arr);
    *json_out = root;
    return SC_OK;
}
