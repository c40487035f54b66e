/*
 * kernels stages on the CPU: stages chained equal the whole model bit for bit (losses, input
 * and parameter gradients, per-block norms), slots in flight and smaller micro-batches, block
 * ranges, save/load and an exact resume, frozen prefixes (set later or from the start, without
 * their memory), and a backward over samples gathered from several slots equals a direct one
 * (every block kind), with the gathers it refuses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/model.h"
#include "kernels/stage.h"
#include "tests/unit/kernels_harness.h"

/* Whole model vs stages cut at `cuts` (first block of each later stage): losses, input
 * gradients passed back, and every parameter gradient must match bit for bit. */
static void chain_equals_whole(const char *text, const int *cuts, int ncuts, int n)
{
    kn_model *m = model_from(text);
    int nb = kn_model_block_count(m);
    sc_err err;
    sc_err_clear(&err);
    batch b = make_batch(m, n);
    kn_stage *w = whole(m, n, kn_optim_adamw_default());
    size_t np = kn_stage_param_count(w);
    assert_int_equal(np, kn_model_param_count(m));
    float *pw = malloc(np * 4), *gw = malloc(np * 4), *ps = malloc(np * 4), *gs = malloc(np * 4);
    assert_int_equal(kn_stage_forward_host(w, 0, b.input, b.targets, n, &err), SC_OK);
    size_t nl = kn_stage_output_per_sample(w) * n;
    float *lw = malloc(nl * 4), *ls = malloc(nl * 4);
    assert_int_equal(kn_stage_output_to_host(w, 0, lw, &err), SC_OK);
    assert_int_equal(kn_stage_backward(w, 0, NULL, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(w, pw, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(w, gw, &err), SC_OK);

    kn_stage *st[8];
    int ns = ncuts + 1;
    for (int s = 0; s < ns; s++) {
        int first = s == 0 ? 0 : cuts[s - 1], last = s == ns - 1 ? nb - 1 : cuts[s] - 1;
        assert_int_equal(kn_stage_new(&st[s], m, first, last, CPU, n, &err), SC_OK);
    }
    /* forward through the chain, host copies between stages as a transport would do */
    const void *in = b.input;
    float *act = NULL;
    for (int s = 0; s < ns; s++) {
        assert_int_equal(kn_stage_forward_host(st[s], 0, in, b.targets, n, &err), SC_OK);
        float *o = malloc(kn_stage_output_per_sample(st[s]) * n * 4);
        assert_int_equal(kn_stage_output_to_host(st[s], 0, o, &err), SC_OK);
        free(act);
        act = o;
        in = act;
    }
    assert_memory_equal(act, lw, nl * 4);
    free(act);
    /* backward through the chain */
    float *grad = NULL;
    for (int s = ns - 1; s >= 0; s--) {
        assert_int_equal(kn_stage_backward_host(st[s], 0, grad, &err), SC_OK);
        free(grad);
        grad = NULL;
        if (s > 0) {
            grad = malloc(kn_stage_input_per_sample(st[s]) * n * 4);
            assert_int_equal(kn_stage_grad_input_to_host(st[s], grad, &err), SC_OK);
        } else {
            assert_null(kn_stage_grad_input(st[s]));
        }
    }
    size_t off = 0;
    for (int s = 0; s < ns; s++) {
        assert_int_equal(kn_stage_params_to_host(st[s], ps + off, &err), SC_OK);
        assert_int_equal(kn_stage_grads_to_host(st[s], gs + off, &err), SC_OK);
        off += kn_stage_param_count(st[s]);
        kn_stage_destroy(&st[s]);
    }
    assert_int_equal(off, np);
    assert_memory_equal(ps, pw, np * 4); /* same initial weights, whatever the split */
    assert_memory_equal(gs, gw, np * 4);
    /* per-block gradient norms: what the whole model reports for each block */
    double *norms = calloc(nb, sizeof *norms);
    assert_int_equal(kn_stage_grad_sq_norms(w, norms, &err), SC_OK);
    size_t o2 = 0;
    for (int i = 0; i < nb; i++) {
        double s = 0;
        for (size_t j = 0; j < kn_model_block(m, i)->params; j++)
            s += (double)gw[o2 + j] * gw[o2 + j];
        o2 += kn_model_block(m, i)->params;
        assert_true(s > 0 || kn_model_block(m, i)->params == 0);
        assert_true(fabs(norms[i] - s) <= 1e-12 * s);
    }
    free(norms);
    free(pw), free(gw), free(ps), free(gs), free(lw), free(ls);
    free_batch(&b);
    kn_stage_destroy(&w);
    kn_model_destroy(&m);
}

static void test_stages_chain_bitwise(void **state)
{
    (void)state;
    int gpt_cuts[] = {2, 3, 5};
    chain_equals_whole(GPT_TINY("true"), gpt_cuts, 3, 3);
    int gpt1[] = {1};
    chain_equals_whole(GPT_TINY("false"), gpt1, 1, 2);
    int vgg_cuts[] = {3, 11, 15};
    chain_equals_whole(vgg_tiny, vgg_cuts, 3, 2);
    int mlp_cuts[] = {1, 2};
    chain_equals_whole(mlp_tiny, mlp_cuts, 2, 5);
}

static void test_slots_and_smaller_batches(void **state)
{
    (void)state;
    kn_model *m = model_from(GPT_TINY("false"));
    int nb = kn_model_block_count(m);
    sc_err err;
    sc_err_clear(&err);
    batch b1 = make_batch(m, 2), b2 = make_batch(m, 1);
    /* reference: one slot, micro-batches one after the other */
    kn_stage *ref = whole(m, 2, kn_optim_adamw_default());
    kn_stage_set_loss_scale(ref, 1.0f / 15);
    assert_int_equal(kn_stage_forward_host(ref, 0, b1.input, b1.targets, 2, &err), SC_OK);
    assert_int_equal(kn_stage_backward(ref, 0, NULL, &err), SC_OK);
    assert_int_equal(kn_stage_forward_host(ref, 0, b2.input, b2.targets, 1, &err), SC_OK);
    assert_int_equal(kn_stage_backward(ref, 0, NULL, &err), SC_OK);
    /* two slots in flight, backward in the other order (as 1F1B interleaves) */
    kn_stage_cfg cfg = kn_stage_cfg_default(0, nb - 1, CPU, 2);
    cfg.slots = 2;
    kn_stage *st = NULL;
    assert_int_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_OK);
    kn_stage_set_loss_scale(st, 1.0f / 15);
    assert_int_equal(kn_stage_forward_host(st, 0, b1.input, b1.targets, 2, &err), SC_OK);
    assert_int_equal(kn_stage_forward_host(st, 1, b2.input, b2.targets, 1, &err), SC_OK);
    assert_int_equal(kn_stage_backward(st, 1, NULL, &err), SC_OK);
    assert_int_equal(kn_stage_backward(st, 0, NULL, &err), SC_OK);
    size_t np = kn_stage_param_count(st);
    float *g1 = malloc(np * 4), *g2 = malloc(np * 4);
    assert_int_equal(kn_stage_grads_to_host(ref, g1, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(st, g2, &err), SC_OK);
    for (size_t i = 0; i < np; i++)
        assert_true(fabsf(g1[i] - g2[i]) <= 1e-6f + 1e-5f * fabsf(g1[i]));
    /* the loss stays readable after the backward; a second backward is refused */
    float l0;
    assert_int_equal(kn_stage_loss(st, 0, &l0, &err), SC_OK);
    assert_true(l0 > 0);
    assert_int_equal(kn_stage_backward(st, 0, NULL, &err), SC_ERR_PRECONDITION);
    sc_err_clear(&err);
    assert_int_equal(kn_stage_forward_host(st, 2, b1.input, b1.targets, 1, &err), SC_ERR_INVALID);
    sc_err_clear(&err);
    assert_int_equal(kn_stage_forward_host(st, 0, b1.input, b1.targets, 3, &err), SC_ERR_INVALID);
    sc_err_clear(&err);
    ((int32_t *)b1.input)[3] = 11; /* vocab is 11 */
    assert_int_equal(kn_stage_forward_host(st, 0, b1.input, b1.targets, 2, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "token[3] = 11"));
    free(g1), free(g2);
    free_batch(&b1), free_batch(&b2);
    kn_stage_destroy(&ref);
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
}

static void test_stage_range_and_save_load(void **state)
{
    (void)state;
    kn_model *m = model_from(mlp_tiny);
    sc_err err;
    sc_err_clear(&err);
    kn_stage *st = NULL;
    assert_int_equal(kn_stage_new(&st, m, 1, 3, CPU, 2, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "0 <= first <= last <= 2"));
    assert_null(st);
    sc_err_clear(&err);
    assert_int_equal(kn_stage_new(&st, m, 1, 2, CPU, 2, &err), SC_OK);
    char path[] = "/tmp/kn_params_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(kn_stage_save(st, path, &err), SC_OK);
    size_t np = kn_stage_param_count(st);
    float *a = malloc(np * 4), *b = malloc(np * 4);
    assert_int_equal(kn_stage_params_to_host(st, a, &err), SC_OK);
    /* another seed gives other weights; loading restores the saved ones */
    kn_model_set_seed(m, 99);
    kn_stage *other = NULL;
    assert_int_equal(kn_stage_new(&other, m, 1, 2, CPU, 2, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(other, b, &err), SC_OK);
    assert_memory_not_equal(a, b, np * 4);
    assert_int_equal(kn_stage_load(other, path, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(other, b, &err), SC_OK);
    assert_memory_equal(a, b, np * 4);
    /* a file of another block range is refused */
    kn_stage *third = NULL;
    assert_int_equal(kn_stage_new(&third, m, 0, 2, CPU, 2, &err), SC_OK);
    assert_int_equal(kn_stage_load(third, path, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "blocks [1, 2]"));
    sc_err_clear(&err);
    FILE *f = fopen(path, "wb");
    fputs("not parameters", f);
    fclose(f);
    assert_int_equal(kn_stage_load(other, path, &err), SC_ERR_PARSE);
    unlink(path);
    free(a), free(b);
    kn_stage_destroy(&st);
    kn_stage_destroy(&other);
    kn_stage_destroy(&third);
    kn_model_destroy(&m);
}

/* A stage made with its first blocks frozen (cfg.frozen_blocks) keeps no gradient or optimizer
 * memory for them and trains exactly as a stage frozen after it was made; its optimizer state
 * reads as zeros there, and its parameter file loads into either kind of stage. */
static void test_frozen_from_start(void **state)
{
    (void)state;
    kn_model *m = model_from(GPT_TINY("true"));
    sc_err err;
    sc_err_clear(&err);
    batch b = make_batch(m, 2);
    kn_stage *ref = whole(m, 2, kn_optim_adamw_default());
    assert_int_equal(kn_stage_set_frozen_blocks(ref, 3, &err), SC_OK);
    kn_stage_cfg cfg = kn_stage_cfg_default(0, kn_model_block_count(m) - 1, CPU, 2);
    cfg.optim = kn_optim_adamw_default();
    cfg.frozen_blocks = 3;
    kn_stage *st = NULL;
    assert_int_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_OK);
    size_t np = kn_stage_param_count(st), nfrozen = 0;
    for (int i = 0; i < 3; i++)
        nfrozen += kn_model_block(m, i)->params;
    /* gradients, m and v of the frozen blocks are not allocated */
    assert_int_equal(kn_stage_memory_bytes(ref) - kn_stage_memory_bytes(st), nfrozen * 4 * 3);
    assert_int_equal(kn_stage_grad_count(st), np - nfrozen);
    assert_int_equal(kn_stage_grad_count(ref), np);
    assert_int_equal(kn_stage_set_frozen_blocks(st, 2, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "made with 3 frozen"));
    for (int step = 0; step < 2; step++) {
        kn_stage *both[2] = {ref, st};
        for (int k = 0; k < 2; k++) {
            assert_int_equal(kn_stage_zero_grads(both[k], &err), SC_OK);
            loss_of(both[k], &b);
            assert_int_equal(kn_stage_backward(both[k], 0, NULL, &err), SC_OK);
            assert_int_equal(kn_stage_step(both[k], &err), SC_OK);
        }
    }
    float *p0 = malloc(np * 4), *p1 = malloc(np * 4);
    assert_int_equal(kn_stage_params_to_host(ref, p0, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(st, p1, &err), SC_OK);
    assert_memory_equal(p0, p1, np * 4);
    double norms[6];
    assert_int_equal(kn_stage_grad_sq_norms(st, norms, &err), SC_OK);
    assert_true(norms[0] == 0 && norms[2] == 0 && norms[3] > 0);
    size_t nopt = kn_stage_opt_state_count(st);
    assert_int_equal(nopt, kn_stage_opt_state_count(ref));
    float *o0 = malloc(nopt * 4), *o1 = malloc(nopt * 4);
    assert_int_equal(kn_stage_opt_state_to_host(ref, o0, &err), SC_OK);
    assert_int_equal(kn_stage_opt_state_to_host(st, o1, &err), SC_OK);
    for (int k = 0; k < 2; k++) { /* m, then v: zeros where frozen, the reference's after */
        for (size_t i = 0; i < nfrozen; i++)
            assert_true(o1[k * np + i] == 0.0f);
        assert_memory_equal(o1 + k * np + nfrozen, o0 + k * np + nfrozen, (np - nfrozen) * 4);
    }
    /* the file of the frozen stage loads into a stage made without frozen blocks */
    char path[] = "/tmp/kn-frozen-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(kn_stage_save(st, path, &err), SC_OK);
    kn_stage *back = whole(m, 2, kn_optim_adamw_default());
    assert_int_equal(kn_stage_load(back, path, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(back, p0, &err), SC_OK);
    assert_memory_equal(p0, p1, np * 4);
    assert_int_equal(kn_stage_step_count(back), 2);
    unlink(path);
    free(p0), free(p1), free(o0), free(o1);
    free_batch(&b);
    kn_stage_destroy(&back);
    kn_stage_destroy(&ref);
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
}

static void test_frozen_prefix(void **state)
{
    (void)state;
    kn_model *m = model_from(GPT_TINY("true")); /* embed, 0.attn, 0.mlp, 1.attn, 1.mlp, head */
    sc_err err;
    sc_err_clear(&err);
    batch b = make_batch(m, 2);
    kn_stage *ref = whole(m, 2, kn_optim_adamw_default());
    kn_stage *st = whole(m, 2, kn_optim_adamw_default());
    assert_int_equal(kn_stage_set_frozen_blocks(st, 7, &err), SC_ERR_INVALID);
    assert_int_equal(kn_stage_set_frozen_blocks(st, 3, &err), SC_OK);
    assert_int_equal(kn_stage_frozen_blocks(st), 3);
    size_t np = kn_stage_param_count(st), nfrozen = 0;
    for (int i = 0; i < 3; i++)
        nfrozen += kn_model_block(m, i)->params;
    float *p0 = malloc(np * 4), *p1 = malloc(np * 4), *g0 = malloc(np * 4), *g1 = malloc(np * 4);
    assert_int_equal(kn_stage_params_to_host(st, p0, &err), SC_OK);
    assert_memory_equal(kn_stage_params_device(st), p0, np * 4); /* CPU: device == host */
    loss_of(ref, &b);
    loss_of(st, &b);
    assert_int_equal(kn_stage_backward(ref, 0, NULL, &err), SC_OK);
    assert_int_equal(kn_stage_backward(st, 0, NULL, &err), SC_OK);
    assert_null(kn_stage_grad_input(st));
    assert_int_equal(kn_stage_grads_to_host(ref, g0, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(st, g1, &err), SC_OK);
    for (size_t i = 0; i < nfrozen; i++)
        assert_true(g1[i] == 0.0f);
    assert_memory_equal(kn_stage_grads_device(st), g1, np * 4);
    /* the blocks after the frozen prefix get exactly the gradients of the unfrozen model */
    assert_memory_equal(g1 + nfrozen, g0 + nfrozen, (np - nfrozen) * 4);
    assert_int_equal(kn_stage_step(st, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(st, p1, &err), SC_OK);
    assert_memory_equal(p1, p0, nfrozen * 4);
    assert_memory_not_equal(p1 + nfrozen, p0 + nfrozen, (np - nfrozen) * 4);
    free(p0), free(p1), free(g0), free(g1);
    free_batch(&b);
    kn_stage_destroy(&ref);
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
}

/* Forwards of samples [0, 2), [2, 5), [5, 6) in slots 0..2 of a stage over blocks [first, last],
 * then backwards over other cuts assembled with kn_stage_gather: samples [1, 5) (the end of one
 * forward and the whole next one) and [3, 4) (inside one forward). Each must give exactly what a
 * second stage's direct forward + backward of those samples gives: output, input gradient and
 * parameter gradients. On the CPU every op computes a sample the same way whatever the batch
 * around it, so the copies are bit-identical to recomputing; the comparison allows 1e-6
 * relative all the same, as the claim is equivalence, not an accident of loop order. */
static void gather_equals_direct(const char *text, int first, int last)
{
    kn_model *m = model_from(text);
    sc_err err;
    sc_err_clear(&err);
    const kn_block *b0 = kn_model_block(m, first);
    batch b = make_batch(m, 6);
    if (first > 0) { /* a stage inside the model takes activations */
        free(b.input);
        b.input = malloc(b0->in_floats * 6 * 4);
        assert_non_null(b.input);
        for (size_t i = 0; i < b0->in_floats * 6; i++)
            ((float *)b.input)[i] = (float)(urand() % 2001) / 1000.0f - 1.0f;
    }
    size_t in_ps = b0->in_floats, out_ps = kn_model_block(m, last)->out_floats;
    int tps = kn_model_targets_per_sample(m);
    bool loss = kn_model_block(m, last)->has_loss;
    float *dout = malloc(out_ps * 6 * 4);
    for (size_t i = 0; i < out_ps * 6; i++)
        dout[i] = (float)(urand() % 2001) / 1000.0f - 1.0f;

    kn_stage_cfg cfg = kn_stage_cfg_default(first, last, CPU, 3);
    cfg.slots = 3;
    cfg.gather_microbatch = 4;
    kn_stage *st = NULL, *ref = NULL;
    assert_int_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_OK);
    cfg = kn_stage_cfg_default(first, last, CPU, 4);
    assert_int_equal(kn_stage_new_cfg(&ref, m, &cfg, &err), SC_OK);
    const int off[] = {0, 2, 5, 6};
    for (int k = 0; k < 3; k++)
        assert_int_equal(kn_stage_forward_host(st, k, (char *)b.input + off[k] * in_ps * 4,
                                               b.targets + off[k] * tps, off[k + 1] - off[k], &err),
                         SC_OK);
    const kn_stage_range span[] = {{0, 1, 1}, {1, 0, 3}}, inside[] = {{1, 1, 1}};
    const struct {
        const kn_stage_range *ranges;
        int n_ranges, a, n;
    } cuts[] = {{span, 2, 1, 4}, {inside, 1, 3, 1}};
    size_t np = kn_stage_param_count(st);
    float *g = malloc(np * 4), *gr = malloc(np * 4);
    float *o = malloc(out_ps * 4 * 4), *orf = malloc(out_ps * 4 * 4);
    float *gi = malloc(in_ps * 4 * 4), *gir = malloc(in_ps * 4 * 4);
    for (int c = 0; c < 2; c++) {
        int a = cuts[c].a, n = cuts[c].n;
        assert_int_equal(kn_stage_zero_grads(st, &err), SC_OK);
        assert_int_equal(kn_stage_zero_grads(ref, &err), SC_OK);
        assert_int_equal(kn_stage_gather(st, 3, cuts[c].ranges, cuts[c].n_ranges, &err), SC_OK);
        assert_int_equal(kn_stage_backward_host(st, 3, loss ? NULL : dout + a * out_ps, &err),
                         SC_OK);
        assert_int_equal(kn_stage_forward_host(ref, 0, (char *)b.input + a * in_ps * 4,
                                               b.targets + a * tps, n, &err),
                         SC_OK);
        assert_int_equal(kn_stage_backward_host(ref, 0, loss ? NULL : dout + a * out_ps, &err),
                         SC_OK);
        assert_int_equal(kn_stage_output_to_host(st, 3, o, &err), SC_OK);
        assert_int_equal(kn_stage_output_to_host(ref, 0, orf, &err), SC_OK);
        for (size_t i = 0; i < out_ps * (size_t)n; i++)
            assert_true(fabsf(o[i] - orf[i]) <= 1e-6f * (1.0f + fabsf(orf[i])));
        assert_int_equal(kn_stage_grads_to_host(st, g, &err), SC_OK);
        assert_int_equal(kn_stage_grads_to_host(ref, gr, &err), SC_OK);
        double diff = 0, norm = 0;
        for (size_t i = 0; i < np; i++) {
            diff += ((double)g[i] - gr[i]) * ((double)g[i] - gr[i]);
            norm += (double)gr[i] * gr[i];
        }
        assert_true(norm > 0.0);
        assert_true(sqrt(diff) <= 1e-6 * sqrt(norm));
        if (first > 0) {
            assert_int_equal(kn_stage_grad_input_to_host(st, gi, &err), SC_OK);
            assert_int_equal(kn_stage_grad_input_to_host(ref, gir, &err), SC_OK);
            for (size_t i = 0; i < in_ps * (size_t)n; i++)
                assert_true(fabsf(gi[i] - gir[i]) <= 1e-6f * (1.0f + fabsf(gir[i])));
        }
    }
    /* the sources are untouched: slot 1's own backward still matches a direct one */
    assert_int_equal(kn_stage_zero_grads(st, &err), SC_OK);
    assert_int_equal(kn_stage_zero_grads(ref, &err), SC_OK);
    assert_int_equal(kn_stage_backward_host(st, 1, loss ? NULL : dout + 2 * out_ps, &err), SC_OK);
    assert_int_equal(kn_stage_forward_host(ref, 0, (char *)b.input + 2 * in_ps * 4,
                                           b.targets + 2 * tps, 3, &err),
                     SC_OK);
    assert_int_equal(kn_stage_backward_host(ref, 0, loss ? NULL : dout + 2 * out_ps, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(st, g, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(ref, gr, &err), SC_OK);
    for (size_t i = 0; i < np; i++)
        assert_true(fabsf(g[i] - gr[i]) <= 1e-6f * (1.0f + fabsf(gr[i])));
    free(g), free(gr), free(o), free(orf), free(gi), free(gir), free(dout);
    free_batch(&b);
    kn_stage_destroy(&st);
    kn_stage_destroy(&ref);
    kn_model_destroy(&m);
}

static void test_gather_equals_direct(void **state)
{
    (void)state;
    /* every block kind: embed, attn, mlp, layer, head; fc, loss; conv, pool */
    gather_equals_direct(GPT_TINY("true"), 0, 5);
    gather_equals_direct(GPT_TINY("true"), 2, 4); /* mlp, attn, mlp: activations in and out */
    gather_equals_direct(GPT_TINY("false"), 0, 3);
    gather_equals_direct(GPT_TINY("false"), 1, 2);
    gather_equals_direct(mlp_tiny, 0, 2);
    gather_equals_direct(mlp_tiny, 1, 2);
    gather_equals_direct(vgg_tiny, 0, 10);
    gather_equals_direct(vgg_tiny, 9, 15);
}

static void test_gather_refusals(void **state)
{
    (void)state;
    kn_model *m = model_from(mlp_tiny);
    sc_err err;
    sc_err_clear(&err);
    batch b = make_batch(m, 3);
    kn_stage_cfg cfg = kn_stage_cfg_default(0, 2, CPU, 2);
    cfg.slots = 2;
    kn_stage *st = NULL;
    assert_int_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_OK);
    size_t plain = kn_stage_memory_bytes(st);
    assert_int_equal(kn_stage_forward_host(st, 0, b.input, b.targets, 2, &err), SC_OK);
    assert_int_equal(kn_stage_forward_host(st, 1, (float *)b.input + 6, b.targets + 2, 1, &err),
                     SC_OK);
    /* no gather slot configured: slot 2 does not exist */
    const kn_stage_range all[] = {{0, 0, 2}, {1, 0, 1}};
    assert_int_equal(kn_stage_gather(st, 2, all, 2, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "slot 2 out of range"));
    kn_stage_destroy(&st);

    cfg.gather_microbatch = 3;
    assert_int_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_OK);
    assert_true(kn_stage_memory_bytes(st) > plain); /* the gather slot is counted */
    assert_int_equal(kn_stage_forward_host(st, 0, b.input, b.targets, 2, &err), SC_OK);
    assert_int_equal(kn_stage_forward_host(st, 1, (float *)b.input + 6, b.targets + 2, 1, &err),
                     SC_OK);
    assert_int_equal(kn_stage_gather(st, 2, all, 2, &err), SC_OK);
    /* the regular slots keep their capacity of 2; the gather slot holds 3 */
    sc_err_clear(&err);
    assert_int_equal(kn_stage_forward_host(st, 0, b.input, b.targets, 3, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "valid: 1..2"));
    const kn_stage_range self[] = {{2, 0, 1}}, past[] = {{1, 0, 2}}, none[] = {{0, 0, 0}};
    const kn_stage_range big[] = {{0, 0, 2}, {1, 0, 1}, {0, 0, 1}};
    sc_err_clear(&err);
    assert_int_equal(kn_stage_gather(st, 2, self, 1, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "reads the slot itself"));
    sc_err_clear(&err);
    assert_int_equal(kn_stage_gather(st, 2, past, 1, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "samples [0, 2) of slot 1, which holds a forward of 1"));
    sc_err_clear(&err);
    assert_int_equal(kn_stage_gather(st, 2, none, 1, &err), SC_ERR_INVALID);
    sc_err_clear(&err);
    assert_int_equal(kn_stage_gather(st, 2, big, 3, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "capacity of 3"));
    sc_err_clear(&err);
    assert_int_equal(kn_stage_gather(st, 2, all, 0, &err), SC_ERR_INVALID);
    kn_stage_destroy(&st);
    cfg.gather_microbatch = -1;
    sc_err_clear(&err);
    assert_int_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "gather_microbatch -1"));
    free_batch(&b);
    kn_model_destroy(&m);
}

static void test_resume_is_exact(void **state)
{
    (void)state;
    kn_model *m = model_from(GPT_TINY("false"));
    sc_err err;
    sc_err_clear(&err);
    batch b = make_batch(m, 2);
    kn_optim_cfg opt = kn_optim_adamw_default();
    opt.lr = 1e-2f;
    kn_stage *a = whole(m, 2, opt), *r = whole(m, 2, opt);
    char path[] = "/tmp/kn_resume_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (int s = 0; s < 5; s++) {
        if (s == 3) { /* checkpoint, then a fresh stage resumes from it */
            assert_int_equal(kn_stage_save(a, path, &err), SC_OK);
            assert_int_equal(kn_stage_load(r, path, &err), SC_OK);
        }
        kn_stage *run[2] = {a, r};
        for (int k = 0; k < (s >= 3 ? 2 : 1); k++) {
            loss_of(run[k], &b);
            assert_int_equal(kn_stage_zero_grads(run[k], &err), SC_OK);
            assert_int_equal(kn_stage_backward(run[k], 0, NULL, &err), SC_OK);
            assert_int_equal(kn_stage_step(run[k], &err), SC_OK);
        }
    }
    size_t np = kn_stage_param_count(a);
    float *pa = malloc(np * 4), *pr = malloc(np * 4);
    assert_int_equal(kn_stage_params_to_host(a, pa, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(r, pr, &err), SC_OK);
    assert_memory_equal(pa, pr, np * 4); /* moments and step count came along */
    unlink(path);
    free(pa), free(pr);
    free_batch(&b);
    kn_stage_destroy(&a);
    kn_stage_destroy(&r);
    kn_model_destroy(&m);
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stages_chain_bitwise),
        cmocka_unit_test(test_slots_and_smaller_batches),
        cmocka_unit_test(test_stage_range_and_save_load),
        cmocka_unit_test(test_frozen_prefix),
        cmocka_unit_test(test_frozen_from_start),
        cmocka_unit_test(test_gather_equals_direct),
        cmocka_unit_test(test_gather_refusals),
        cmocka_unit_test(test_resume_is_exact),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
