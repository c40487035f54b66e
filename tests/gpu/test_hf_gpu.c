/*
 * hf models on a GPU: the GPT-2 and Llama checkpoints of tests/data/hf run on cuda:0 give the
 * CPU reference's per-position losses and, after one SGD step (the tied copies summed on the
 * device), its weights, within 1e-5 + 1e-4 relative (no TF32). Skips without a device.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "kernels/model.h"
#include "kernels/safetensors.h"
#include "kernels/stage.h"

enum { B = 2, T = 16 };

/* losses (B*T) and every parameter after one SGD step, on `dev` */
static float *run(const kn_model *m, kn_device dev, const int32_t *tok, const int32_t *tgt,
                  float *losses)
{
    kn_stage_cfg cfg = kn_stage_cfg_default(0, kn_model_block_count(m) - 1, dev, B);
    cfg.optim = kn_optim_sgd_default();
    cfg.optim.lr = 0.1f;
    cfg.optim.momentum = 0;
    cfg.optim.weight_decay = 0;
    kn_stage *st = NULL;
    sc_err err;
    sc_err_clear(&err);
    if (kn_stage_new_cfg(&st, m, &cfg, &err) != SC_OK)
        fail_msg("%s", err.msg);
    size_t np = kn_stage_param_count(st);
    float *p = malloc(np * sizeof *p);
    if (kn_stage_forward_host(st, 0, tok, tgt, B, &err) != SC_OK ||
        kn_stage_output_to_host(st, 0, losses, &err) != SC_OK ||
        kn_stage_backward_host(st, 0, NULL, &err) != SC_OK || kn_stage_step(st, &err) != SC_OK ||
        kn_stage_params_to_host(st, p, &err) != SC_OK)
        fail_msg("%s", err.msg);
    kn_stage_destroy(&st);
    return p;
}

static void check(const char *name)
{
    if (kn_cuda_device_count() == 0)
        skip();
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"hf\", \"path\": "
             "\"%s/hf/%s\", \"seq_len\": %d, \"cpu_kernels\": \"reference\"}",
             SC_TEST_DATA_DIR, name, T);
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_model_parse(&m, name, spec, strlen(spec), &err), SC_OK);
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)((i * 29 + 5) % kn_model_classes(m));
        tgt[i] = (int32_t)((i * 13 + 2) % kn_model_classes(m));
    }
    float lc[B * T], lg[B * T];
    kn_device cpu = {KN_DEV_CPU, 0}, gpu = {KN_DEV_CUDA, 0};
    float *pc = run(m, cpu, tok, tgt, lc), *pg = run(m, gpu, tok, tgt, lg);
    double worst = 0;
    for (int i = 0; i < B * T; i++)
        worst = fmax(worst, fabs(lc[i] - lg[i]));
    print_message("  %s: losses max |diff| %.3g\n", name, worst);
    assert_true(worst <= 1e-5);
    size_t np = kn_model_param_count(m);
    for (size_t i = 0; i < np; i++)
        if (fabs(pc[i] - pg[i]) > 1e-5 + 1e-4 * fabs(pc[i]))
            fail_msg("%s: parameter %zu: cpu %g, gpu %g", name, i, pc[i], pg[i]);
    free(pc);
    free(pg);
    kn_model_destroy(&m);
}

static void test_gpt2_tied(void **state)
{
    (void)state;
    check("gpt2-tied");
}

static void test_llama_tied(void **state)
{
    (void)state;
    check("llama-tied");
}

static void test_llama_untied(void **state)
{
    (void)state;
    check("llama-untied");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_tied),
        cmocka_unit_test(test_llama_tied),
        cmocka_unit_test(test_llama_untied),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
