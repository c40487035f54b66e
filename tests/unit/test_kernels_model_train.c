/*
 * kernels models on the CPU as a whole: every block's parameter gradients against finite
 * differences (GPT split or not, MLP, VGG), and training on a fixed batch lowers the loss
 * (adamw and sgd).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/model.h"
#include "kernels/stage.h"
#include "tests/unit/kernels_harness.h"

/* `min_pass`: fraction of checked entries that must agree. ReLU and max-pool kinks inside the
 * finite-difference stencil (many positions share a conv bias) make a few FD values wrong, so
 * the VGG check accepts a small fraction of misses; smooth models must match everywhere. */
static void gradcheck_model(const char *text, int n, double min_pass)
{
    kn_model *m = model_from(text);
    kn_stage *st = whole(m, n, kn_optim_adamw_default());
    batch b = make_batch(m, n);
    sc_err err;
    sc_err_clear(&err);
    size_t np = kn_stage_param_count(st);
    float *p = malloc(np * 4), *g = malloc(np * 4);
    assert_int_equal(kn_stage_params_to_host(st, p, &err), SC_OK);
    loss_of(st, &b);
    assert_int_equal(kn_stage_backward(st, 0, NULL, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(st, g, &err), SC_OK);
    size_t base = 0;
    int checked = 0, missed = 0;
    for (int bi = 0; bi < kn_model_block_count(m); bi++) {
        const kn_block *blk = kn_model_block(m, bi);
        for (int t = 0; t < blk->ntensors; t++) {
            const kn_tensor *tn = &blk->tensors[t];
            size_t off = base + tn->offset, big = off;
            for (size_t j = 0; j < tn->count; j++)
                if (fabsf(g[off + j]) > fabsf(g[big]))
                    big = off + j;
            size_t picks[2] = {big, off + urand() % tn->count};
            for (int k = 0; k < 2; k++) {
                size_t i = picks[k];
                const float eps = 1e-3f;
                float saved = p[i];
                p[i] = saved + eps;
                assert_int_equal(kn_stage_params_from_host(st, p, &err), SC_OK);
                double lp = loss_of(st, &b);
                p[i] = saved - eps;
                assert_int_equal(kn_stage_params_from_host(st, p, &err), SC_OK);
                double lm = loss_of(st, &b);
                p[i] = saved;
                double fd = (lp - lm) / (2 * eps);
                if (fabs(fd - g[i]) > 1e-3 + 5e-2 * fabs(fd)) {
                    fprintf(stderr, "%s.%s[%zu]: analytic %.6g, finite difference %.6g\n",
                            blk->name, tn->name, i - off, (double)g[i], fd);
                    missed++;
                }
                checked++;
            }
        }
        base += blk->params;
    }
    assert_true(checked > 8);
    assert_true(checked - missed >= min_pass * checked);
    free(p);
    free(g);
    free_batch(&b);
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
}

static void test_gradcheck_gpt(void **state)
{
    (void)state;
    gradcheck_model(GPT_TINY("false"), 2, 1.0);
    gradcheck_model(GPT_TINY("true"), 1, 1.0);
}

static void test_gradcheck_mlp_vgg(void **state)
{
    (void)state;
    gradcheck_model(mlp_tiny, 3, 1.0);
    gradcheck_model(vgg_tiny, 2, 0.9);
}

static void train_lowers_loss(const char *text, int n, kn_optim_cfg opt, int steps, float ratio)
{
    kn_model *m = model_from(text);
    kn_stage *st = whole(m, n, opt);
    batch b = make_batch(m, n);
    sc_err err;
    sc_err_clear(&err);
    float first = 0, last = 0;
    for (int s = 0; s < steps; s++) {
        last = loss_of(st, &b);
        if (s == 0)
            first = last;
        assert_true(isfinite(last));
        assert_int_equal(kn_stage_zero_grads(st, &err), SC_OK);
        assert_int_equal(kn_stage_backward(st, 0, NULL, &err), SC_OK);
        assert_int_equal(kn_stage_step(st, &err), SC_OK);
    }
    last = loss_of(st, &b);
    if (!(last < ratio * first)) {
        fprintf(stderr, "loss %g -> %g after %d steps\n", first, last, steps);
        fail();
    }
    free_batch(&b);
    kn_stage_destroy(&st);
    kn_model_destroy(&m);
}

static void test_gpt_loss_decreases(void **state)
{
    (void)state;
    kn_optim_cfg opt = kn_optim_adamw_default();
    opt.lr = 1e-2f;
    opt.weight_decay = 0.01f;
    /* initial loss ~ ln(11) = 2.4 on a fixed batch the model can memorise */
    train_lowers_loss(GPT_TINY("false"), 4, opt, 40, 0.5f);
}

static void test_mlp_vgg_loss_decreases(void **state)
{
    (void)state;
    kn_optim_cfg sgd = kn_optim_sgd_default();
    sgd.lr = 0.05f;
    train_lowers_loss(mlp_tiny, 8, sgd, 40, 0.5f);
    kn_optim_cfg adam = kn_optim_adamw_default();
    adam.lr = 3e-3f;
    train_lowers_loss(vgg_tiny, 4, adam, 30, 0.5f);
}

int main(void)
{
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_gpt),
        cmocka_unit_test(test_gradcheck_mlp_vgg),
        cmocka_unit_test(test_gpt_loss_decreases),
        cmocka_unit_test(test_mlp_vgg_loss_decreases),
    };
    /* clang-format on */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
