/* The split backward (kernels/block.h, kn_stage_backward_input / _weight): for every block kind
 * (a one-block stage of each block of a GPT with and without split blocks, an MLP and a VGG) and
 * for whole models, two micro-batches run as F F B B W W give the same input gradients and the
 * same accumulated parameter gradients as F F B B with the fused backward: bit for bit on the
 * reference kernels and on the fast CPU path (the same kernel calls on the same values). Also:
 * the W stash sizes, and the refusals (split parts on a stage without split_backward, W before
 * B, W twice, a gather on a split stage). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the four headers above first */
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/block.h"
#include "kernels/model.h"
#include "kernels/stage.h"

#define HDR "{\"format\": \"stagecraft-model\", \"version\": 1, "
static const char *const specs[] = {
    HDR "\"kind\": \"gpt\", \"vocab\": 11, \"seq_len\": 5, \"layers\": 2, \"width\": 8, "
        "\"heads\": 2, \"split_blocks\": true}",
    HDR "\"kind\": \"gpt\", \"vocab\": 11, \"seq_len\": 5, \"layers\": 2, \"width\": 8, "
        "\"heads\": 2, \"split_blocks\": false}",
    HDR "\"kind\": \"mlp\", \"sizes\": [6, 10, 8, 3]}",
    HDR "\"kind\": \"vgg\", \"config\": \"vgg11\", \"image\": [2, 32, 32], \"classes\": 3, "
        "\"width_divisor\": 32}",
    /* heads * seq_len < width: the attention's output gradient waits for W in the W stash */
    HDR "\"kind\": \"gpt\", \"vocab\": 11, \"seq_len\": 3, \"layers\": 2, \"width\": 8, "
        "\"heads\": 2, \"split_blocks\": true}",
    HDR "\"kind\": \"gpt\", \"vocab\": 11, \"seq_len\": 3, \"layers\": 2, \"width\": 8, "
        "\"heads\": 2, \"split_blocks\": false}",
};

static uint64_t rng = 11;

static uint32_t urand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

static float frand(void)
{
    return (float)(urand() % 2001) / 1000.0f - 1.0f;
}

static kn_model *model_from(const char *text, bool reference)
{
    kn_model *m = NULL;
    sc_err err;
    sc_err_clear(&err);
    sc_status rc = kn_model_parse(&m, "model.json", text, strlen(text), &err);
    if (rc != SC_OK)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, SC_OK);
    kn_model_set_cpu_reference(m, reference);
    return m;
}

static kn_stage *stage_of(const kn_model *m, int a, int b, int mb, bool split)
{
    kn_stage_cfg cfg = kn_stage_cfg_default(a, b, (kn_device){KN_DEV_CPU, 0}, mb);
    cfg.slots = 2;
    cfg.split_backward = split;
    kn_stage *st = NULL;
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_OK);
    return st;
}

/* Inputs, targets and output gradients of two micro-batches of n samples for stage [a, b]. */
typedef struct {
    void *in[2];
    int32_t *tgt[2];
    float *gout[2];
} batches;

static batches make(const kn_model *m, int a, int b, int n)
{
    const kn_block *first = kn_model_block(m, a), *last = kn_model_block(m, b);
    size_t nin = first->in_floats * (size_t)n, ntg = (size_t)kn_model_targets_per_sample(m) * n;
    size_t nout = last->out_floats * (size_t)n;
    batches x;
    for (int k = 0; k < 2; k++) {
        x.in[k] = malloc(nin * 4);
        x.tgt[k] = malloc(ntg * 4);
        x.gout[k] = malloc(nout * 4 + 4);
        assert_true(x.in[k] && x.tgt[k] && x.gout[k]);
        for (size_t i = 0; i < nin; i++) {
            if (first->in_tokens)
                ((int32_t *)x.in[k])[i] = (int32_t)(urand() % (uint32_t)first->V);
            else
                ((float *)x.in[k])[i] = frand();
        }
        for (size_t i = 0; i < ntg; i++)
            x.tgt[k][i] = (int32_t)(urand() % (uint32_t)kn_model_classes(m));
        for (size_t i = 0; i < nout; i++)
            x.gout[k][i] = frand() * 0.1f;
    }
    return x;
}

static void free_batches(batches *x)
{
    for (int k = 0; k < 2; k++) {
        free(x->in[k]);
        free(x->tgt[k]);
        free(x->gout[k]);
    }
}

static float *host_grads(kn_stage *st)
{
    size_t n = kn_stage_param_count(st);
    float *g = malloc(n * 4 + 4);
    assert_non_null(g);
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_stage_grads_to_host(st, g, &err), SC_OK);
    return g;
}

/* F0 F1 then the two backwards, fused or as B0 B1 W0 W1: the input gradients of both (when the
 * stage has one) and the gradients after both. */
static float *run(kn_stage *st, const batches *x, int n, bool split, float **gin)
{
    sc_err err;
    sc_err_clear(&err);
    size_t nin = kn_stage_input_per_sample(st) * (size_t)n;
    bool has_gin = kn_stage_first_block(st) > 0;
    assert_int_equal(kn_stage_zero_grads(st, &err), SC_OK);
    for (int k = 0; k < 2; k++)
        assert_int_equal(kn_stage_forward_host(st, k, x->in[k], x->tgt[k], n, &err), SC_OK);
    for (int k = 0; k < 2; k++) {
        sc_status rc = split ? kn_stage_backward_input_host(st, k, x->gout[k], &err)
                             : kn_stage_backward_host(st, k, x->gout[k], &err);
        if (rc != SC_OK)
            fail_msg("backward: %s", err.msg);
        gin[k] = NULL;
        if (has_gin) {
            gin[k] = malloc(nin * 4);
            assert_int_equal(kn_stage_grad_input_to_host(st, gin[k], &err), SC_OK);
        }
    }
    for (int k = 0; split && k < 2; k++)
        if (kn_stage_backward_weight(st, k, &err) != SC_OK)
            fail_msg("weight part: %s", err.msg);
    return host_grads(st);
}

static void check_range(const kn_model *m, int a, int b, int n, const char *what)
{
    batches x = make(m, a, b, n);
    kn_stage *fused = stage_of(m, a, b, n, false), *split = stage_of(m, a, b, n, true);
    float *gin_f[2], *gin_s[2];
    float *gf = run(fused, &x, n, false, gin_f), *gs = run(split, &x, n, true, gin_s);
    size_t np = kn_stage_param_count(fused), nin = kn_stage_input_per_sample(fused) * (size_t)n;
    bool nonzero = false;
    for (size_t i = 0; i < np; i++)
        nonzero |= gf[i] != 0.0f;
    if (np > 0 && !nonzero)
        fail_msg("%s blocks [%d, %d]: no gradient at all", what, a, b);
    if (memcmp(gf, gs, np * 4) != 0)
        fail_msg("%s blocks [%d, %d] (%s): B then W differs from the fused backward", what, a, b,
                 kn_model_block(m, a)->name);
    for (int k = 0; k < 2; k++) {
        if (gin_f[k] != NULL && memcmp(gin_f[k], gin_s[k], nin * 4) != 0)
            fail_msg("%s blocks [%d, %d]: input gradient %d differs", what, a, b, k);
        free(gin_f[k]);
        free(gin_s[k]);
    }
    free(gf);
    free(gs);
    kn_stage_destroy(&fused);
    kn_stage_destroy(&split);
    free_batches(&x);
}

static void each_block(bool reference)
{
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        kn_model *m = model_from(specs[s], reference);
        int nb = kn_model_block_count(m);
        const char *what = reference ? "reference" : "fast";
        for (int i = 0; i < nb; i++)
            check_range(m, i, i, 3, what);
        check_range(m, 0, nb - 1, 2, what);
        if (nb > 2)
            check_range(m, 1, nb - 2, 2, what);
        kn_model_destroy(&m);
    }
}

static void test_split_equals_fused_reference(void **state)
{
    (void)state;
    each_block(true);
}

static void test_split_equals_fused_fast(void **state)
{
    (void)state;
    each_block(false);
}

static void test_wstash_sizes(void **state)
{
    (void)state;
    /* embed, layer0, layer1, head: T 5, C 8, 2 heads. W's inputs all lie over stash parts only
     * B reads; the embedding and LayerNorms finish in B: nothing more than the fused backward */
    kn_model *m = model_from(specs[1], true);
    for (int i = 0; i < 4; i++)
        assert_int_equal(kn_block_wstash_floats(kn_model_block(m, i)), 0);
    kn_model_destroy(&m);
    m = model_from(specs[0], true); /* embed, attn0, mlp0, attn1, mlp1, head */
    assert_int_equal(kn_block_wstash_floats(kn_model_block(m, 1)), 0);
    assert_int_equal(kn_block_wstash_floats(kn_model_block(m, 2)), 5 * 8); /* the MLP's dout */
    kn_model_destroy(&m);
    m = model_from(specs[5], true); /* T 3: 2 heads x 3 positions < 8, dout in the W stash */
    assert_int_equal(kn_block_wstash_floats(kn_model_block(m, 1)), 3 * 8);
    assert_int_equal(kn_block_wstash_floats(kn_model_block(m, 3)), 0);
    kn_model_destroy(&m);
    /* so a GPT stage under zb1 takes the memory of the fused backward's, whatever its blocks:
     * its peak is the slots it holds times the same bytes */
    m = model_from(specs[1], true);
    for (int a = 0; a < 4; a++)
        for (int b = a; b < 4; b++) {
            kn_stage *fused = stage_of(m, a, b, 3, false), *split = stage_of(m, a, b, 3, true);
            assert_int_equal(kn_stage_memory_bytes(split), kn_stage_memory_bytes(fused));
            kn_stage_destroy(&fused);
            kn_stage_destroy(&split);
        }
    kn_model_destroy(&m);
    m = model_from(specs[2], true); /* fc0 (6 -> 10), fc1 (10 -> 8), head (8 -> 3) */
    assert_int_equal(kn_block_wstash_floats(kn_model_block(m, 0)), 10);
    assert_int_equal(kn_block_wstash_floats(kn_model_block(m, 2)), 0);
    kn_model_destroy(&m);
}

static void test_refusals(void **state)
{
    (void)state;
    kn_model *m = model_from(specs[2], true);
    batches x = make(m, 0, 2, 2);
    sc_err err;
    sc_err_clear(&err);
    kn_stage *st = stage_of(m, 0, 2, 2, false);
    assert_int_equal(kn_stage_forward_host(st, 0, x.in[0], x.tgt[0], 2, &err), SC_OK);
    assert_int_equal(kn_stage_backward_input_host(st, 0, NULL, &err), SC_ERR_PRECONDITION);
    assert_non_null(strstr(err.msg, "split_backward"));
    kn_stage_destroy(&st);
    st = stage_of(m, 0, 2, 2, true);
    assert_int_equal(kn_stage_forward_host(st, 0, x.in[0], x.tgt[0], 2, &err), SC_OK);
    sc_err_clear(&err);
    assert_int_equal(kn_stage_backward_weight(st, 0, &err), SC_ERR_PRECONDITION);
    assert_non_null(strstr(err.msg, "weight gradient (W) of slot 0"));
    assert_int_equal(kn_stage_backward_input_host(st, 0, NULL, &err), SC_OK);
    assert_int_equal(kn_stage_backward_input_host(st, 0, NULL, &err), SC_ERR_PRECONDITION);
    assert_int_equal(kn_stage_backward_weight(st, 0, &err), SC_OK);
    assert_int_equal(kn_stage_backward_weight(st, 0, &err), SC_ERR_PRECONDITION);
    /* B reuses stash parts, so a gather (which reads slots whatever ran) is refused */
    const kn_stage_range r = {0, 0, 1};
    sc_err_clear(&err);
    assert_int_equal(kn_stage_gather(st, 1, &r, 1, &err), SC_ERR_INVALID);
    assert_non_null(strstr(err.msg, "split_backward"));
    kn_stage_destroy(&st);
    free_batches(&x);
    kn_model_destroy(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_equals_fused_reference),
        cmocka_unit_test(test_split_equals_fused_fast),
        cmocka_unit_test(test_wstash_sizes),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
