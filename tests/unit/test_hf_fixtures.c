/*
 * kernels hf models (GPT-2 and Llama, tied and untied heads) against transformers itself: the
 * checkpoints in tests/data/hf/ were written
 * by transformers' save_pretrained (tests/data/hf/make_fixtures.py) with its logits, losses and
 * the weights after one SGD step on fixed tokens. stagecraft reads each folder and must give
 * the per-position losses and the mean loss within 1e-5, the logits within 1e-4 relative, and
 * after one SGD step every weight within 1e-5, in one stage and as 2- and 4-stage chains (the
 * tied head in another stage than the embedding), which equal the one stage bit for bit.
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
#include <unistd.h>

#include "kernels/hf_model.h"
#include "kernels/model.h"
#include "kernels/safetensors.h"
#include "kernels/stage.h"

static const kn_device CPU = {KN_DEV_CPU, 0};
enum { B = 2, T = 16 };
static const float LR = 0.1f;

typedef struct {
    kn_model *m;
    kn_st *exp;
    int nb, V, C;
    int32_t tok[B * T], tgt[B * T];
} fixture;

static void fixture_open(fixture *f, const char *name)
{
    char dir[512], spec[1024], path[600];
    snprintf(dir, sizeof dir, "%s/hf/%s", SC_TEST_DATA_DIR, name);
    snprintf(spec, sizeof spec,
             "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"hf\", \"path\": "
             "\"%s\", \"seq_len\": %d, \"cpu_kernels\": \"reference\"}",
             dir, T);
    sc_err err;
    sc_err_clear(&err);
    f->m = NULL;
    sc_status rc = kn_model_parse(&f->m, name, spec, strlen(spec), &err);
    if (rc != SC_OK)
        fail_msg("%s", err.msg);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    assert_int_equal(kn_st_open_file(&f->exp, path, &err), SC_OK);
    f->nb = kn_model_block_count(f->m);
    f->V = kn_model_block(f->m, 0)->V;
    f->C = kn_model_block(f->m, 0)->C;
    float buf[B * T];
    const int64_t dims[2] = {B, T};
    assert_int_equal(kn_st_read(f->exp, "tokens", 2, dims, false, buf, &err), SC_OK);
    for (int i = 0; i < B * T; i++)
        f->tok[i] = (int32_t)buf[i];
    assert_int_equal(kn_st_read(f->exp, "targets", 2, dims, false, buf, &err), SC_OK);
    for (int i = 0; i < B * T; i++)
        f->tgt[i] = (int32_t)buf[i];
}

static void fixture_close(fixture *f)
{
    kn_st_close(&f->exp);
    kn_model_destroy(&f->m);
}

static kn_stage *stage(const fixture *f, int first, int last)
{
    kn_stage_cfg cfg = kn_stage_cfg_default(first, last, CPU, B);
    cfg.optim = kn_optim_sgd_default();
    cfg.optim.lr = LR;
    cfg.optim.momentum = 0;
    cfg.optim.weight_decay = 0;
    kn_stage *st = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = kn_stage_new_cfg(&st, f->m, &cfg, &err);
    if (rc != SC_OK)
        fail_msg("%s", err.msg);
    return st;
}

/* Forward, backward and one SGD step through a chain of stages cut at `cuts` (first blocks,
 * ending with nb); the tied gradient exchanged between the stages holding its two copies as
 * the runtime does. Returns every parameter in block order and the per-position losses. */
static float *train_chain(const fixture *f, const int *cuts, int n, float *losses)
{
    kn_stage *st[8];
    size_t total = 0;
    for (int s = 0; s < n; s++) {
        st[s] = stage(f, cuts[s], cuts[s + 1] - 1);
        total += kn_stage_param_count(st[s]);
    }
    sc_err err;
    sc_err_clear(&err);
    size_t act_n = (size_t)B * T * f->C;
    float *act = malloc(act_n * sizeof *act);
    for (int s = 0; s < n; s++) {
        const void *in = s == 0 ? (const void *)f->tok : act;
        assert_int_equal(kn_stage_forward_host(st[s], 0, in, f->tgt, B, &err), SC_OK);
        if (s + 1 < n)
            assert_int_equal(kn_stage_output_to_host(st[s], 0, act, &err), SC_OK);
    }
    assert_int_equal(kn_stage_output_to_host(st[n - 1], 0, losses, &err), SC_OK);
    for (int s = n - 1; s >= 0; s--) {
        assert_int_equal(kn_stage_backward_host(st[s], 0, s == n - 1 ? NULL : act, &err), SC_OK);
        if (s > 0)
            assert_int_equal(kn_stage_grad_input_to_host(st[s], act, &err), SC_OK);
    }
    float *all = malloc(total * sizeof *all);
    size_t o[2], cnt[2], base[8], off = 0;
    int holder[2], h = 0;
    for (int s = 0; s < n; s++) {
        base[s] = off;
        off += kn_stage_param_count(st[s]);
        if (h < 2 && kn_stage_tie_part(st[s], &o[h], &cnt[h]))
            holder[h++] = s;
    }
    if (h == 2) { /* the exchange */
        assert_int_equal(cnt[0], cnt[1]);
        float *g[2];
        for (int k = 0; k < 2; k++) {
            g[k] = malloc(kn_stage_param_count(st[holder[k]]) * sizeof(float));
            assert_int_equal(kn_stage_grads_to_host(st[holder[k]], g[k], &err), SC_OK);
        }
        for (size_t j = 0; j < cnt[0]; j++)
            g[0][o[0] + j] = g[1][o[1] + j] = g[0][o[0] + j] + g[1][o[1] + j];
        for (int k = 0; k < 2; k++) {
            assert_int_equal(kn_stage_grads_from_host(st[holder[k]], g[k], &err), SC_OK);
            free(g[k]);
        }
    }
    for (int s = 0; s < n; s++) {
        assert_int_equal(kn_stage_step(st[s], &err), SC_OK);
        assert_int_equal(kn_stage_params_to_host(st[s], all + base[s], &err), SC_OK);
        kn_stage_destroy(&st[s]);
    }
    free(act);
    return all;
}

static void check_losses(const fixture *f, const float *losses)
{
    float want[B * T], wl;
    const int64_t dims[2] = {B, T}, one = 1;
    sc_err err;
    assert_int_equal(kn_st_read(f->exp, "losses", 2, dims, false, want, &err), SC_OK);
    assert_int_equal(kn_st_read(f->exp, "loss", 1, &one, false, &wl, &err), SC_OK);
    double mean = 0, worst = 0;
    for (int i = 0; i < B * T; i++) {
        mean += losses[i];
        worst = fmax(worst, fabs(losses[i] - want[i]));
    }
    mean /= B * T;
    print_message("    per-position loss max |diff| %.3g, mean loss %.7f vs %.7f\n", worst, mean,
                  wl);
    assert_true(worst <= 1e-5);
    assert_true(fabs(mean - wl) <= 1e-5);
}

/* Logits: the body's output from a stage without the head, then the head's arithmetic (final
 * LayerNorm with the checkpoint's gain and bias, projection on the head's weight) here. */
static void check_logits(const fixture *f)
{
    int V = f->V, C = f->C, nb = f->nb;
    kn_stage *body = stage(f, 0, nb - 2);
    sc_err err;
    sc_err_clear(&err);
    float *x = malloc((size_t)B * T * C * sizeof *x);
    assert_int_equal(kn_stage_forward_host(body, 0, f->tok, NULL, B, &err), SC_OK);
    assert_int_equal(kn_stage_output_to_host(body, 0, x, &err), SC_OK);
    const kn_block *hb = kn_model_block(f->m, nb - 1);
    float *hp = malloc(hb->params * sizeof *hp);
    assert_int_equal(kn_model_fill_block(f->m, nb - 1, hp, &err), SC_OK);
    bool rms = hb->kind == KN_BLOCK_LLAMA_HEAD; /* RMSNorm, no bias; else LayerNorm */
    const float *g = hp + hb->tensors[0].offset, *b = rms ? NULL : hp + hb->tensors[1].offset;
    const float *w = hp + hb->tensors[rms ? 1 : 2].offset;
    float *want = malloc((size_t)B * T * V * sizeof *want);
    const int64_t dims[3] = {B, T, V};
    assert_int_equal(kn_st_read(f->exp, "logits", 3, dims, false, want, &err), SC_OK);
    double worst = 0, worst_rel = 0;
    for (int i = 0; i < B * T; i++) {
        const float *r = x + (size_t)i * C;
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++)
            mean += rms ? 0 : r[c];
        mean /= C;
        for (int c = 0; c < C; c++)
            var += (r[c] - mean) * (r[c] - mean);
        double rs = 1.0 / sqrt(var / C + (rms ? hb->eps : 1e-5));
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int c = 0; c < C; c++)
                s += ((r[c] - mean) * rs * g[c] + (rms ? 0 : b[c])) * w[(size_t)v * C + c];
            double d = fabs(s - want[(size_t)i * V + v]);
            worst = fmax(worst, d);
            worst_rel = fmax(worst_rel, d / fmax(1.0, fabs(want[(size_t)i * V + v])));
        }
    }
    print_message("    logits max |diff| %.3g (relative %.3g)\n", worst, worst_rel);
    assert_true(worst_rel <= 1e-4);
    free(x);
    free(hp);
    free(want);
    kn_stage_destroy(&body);
}

/* Every tensor after the step against transformers' ("sgd." + its name, each parameter listed
 * once): the parameters are exported (names and layout as transformers writes them) and
 * compared name by name. */
static void check_sgd(const fixture *f, const float *params)
{
    const float **bp = calloc((size_t)f->nb, sizeof *bp);
    size_t off = 0;
    for (int i = 0; i < f->nb; i++) {
        bp[i] = params + off;
        off += kn_model_block(f->m, i)->params;
    }
    char dir[] = "/tmp/kn_hf_fix_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_hf_export(f->m, bp, dir, &err), SC_OK);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    kn_st *got = NULL;
    assert_int_equal(kn_st_open_file(&got, path, &err), SC_OK);
    double worst = 0;
    int n = 0;
    for (size_t i = 0; i < kn_st_tensor_count(f->exp); i++) {
        const char *key = kn_st_tensor_name(f->exp, i), *name = key + 4;
        if (strncmp(key, "sgd.", 4) != 0)
            continue;
        n++;
        int nd;
        int64_t d[KN_ST_DIMS_MAX];
        assert_int_equal(kn_st_shape(f->exp, key, &nd, d, NULL, &err), SC_OK);
        size_t cnt = 1;
        for (int k = 0; k < nd; k++)
            cnt *= (size_t)d[k];
        float *a = malloc(cnt * sizeof *a), *b = malloc(cnt * sizeof *b);
        assert_int_equal(kn_st_read(f->exp, key, nd, d, false, a, &err), SC_OK);
        if (kn_st_read(got, name, nd, d, false, b, &err) != SC_OK)
            fail_msg("%s", err.msg);
        for (size_t j = 0; j < cnt; j++)
            worst = fmax(worst, fabs((double)a[j] - b[j]));
        free(a);
        free(b);
    }
    print_message("    after one SGD step: max |diff| %.3g over %d tensors\n", worst, n);
    assert_true(worst <= 1e-5);
    kn_st_close(&got);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(bp);
}

static void run_fixture(const char *name)
{
    fixture f;
    fixture_open(&f, name);
    print_message("  %s\n", name);
    check_logits(&f);
    float losses[B * T];
    const int one[] = {0, f.nb};
    float *p1 = train_chain(&f, one, 1, losses);
    check_losses(&f, losses);
    check_sgd(&f, p1);
    size_t np = kn_model_param_count(f.m);
    const int two[] = {0, 2, f.nb}, four[] = {0, 1, 2, 3, f.nb};
    float *p2 = train_chain(&f, two, 2, losses);
    assert_memory_equal(p2, p1, np * sizeof(float));
    float *p4 = train_chain(&f, four, 4, losses);
    assert_memory_equal(p4, p1, np * sizeof(float));
    free(p1);
    free(p2);
    free(p4);
    fixture_close(&f);
}

static void test_gpt2_tied(void **state)
{
    (void)state;
    run_fixture("gpt2-tied");
}

static void test_gpt2_untied(void **state)
{
    (void)state;
    run_fixture("gpt2-untied");
}

static void test_llama_tied(void **state)
{
    (void)state;
    run_fixture("llama-tied");
}

static void test_llama_untied(void **state)
{
    (void)state;
    run_fixture("llama-untied");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_tied),
        cmocka_unit_test(test_gpt2_untied),
        cmocka_unit_test(test_llama_tied),
        cmocka_unit_test(test_llama_untied),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
