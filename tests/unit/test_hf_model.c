/*
 * kernels hf models and safetensors: half/bfloat16 conversion; a GPT-2 checkpoint written here
 * (transformers' names and Conv1D layout) is read into stages and its logits and loss equal a
 * plain GPT-2 forward written in this file on the checkpoint's own layout; F16, BF16, sharded and
 * prefix-less checkpoints read the same; the tied embedding/head gets the summed gradient in one
 * stage and across two stages (the exchange the runtime does), bit for bit; export then read
 * gives the same tensors bit for bit; bad checkpoints and configs are refused naming the tensor
 * or key.
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
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/hf_model.h"
#include "kernels/model.h"
#include "kernels/precision.h"
#include "kernels/safetensors.h"
#include "kernels/stage.h"

static const kn_device CPU = {KN_DEV_CPU, 0};

/* the tiny GPT-2 of these tests */
enum { V = 13, P = 8, C = 8, NH = 2, L = 2, T = 6, B = 2 };

static uint64_t rng = 11;

static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)(rng >> 40) / (float)(1 << 24) - 0.5f) * 0.4f;
}

/* --- a checkpoint in transformers' layout ----------------------------------------------------- */

typedef struct {
    char name[64];
    int ndim;
    int64_t dims[2];
    float *data;
} ck_tensor;

typedef struct {
    ck_tensor t[64];
    int n;
} ckpt;

static float *ck_add(ckpt *ck, const char *name, int64_t d0, int64_t d1, float cst)
{
    ck_tensor *t = &ck->t[ck->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = d1 ? 2 : 1;
    t->dims[0] = d0;
    t->dims[1] = d1;
    size_t n = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    t->data = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        t->data[i] = cst != 0 ? cst + frand() * 0.5f : frand();
    return t->data;
}

static const float *ck_get(const ckpt *ck, const char *name)
{
    for (int i = 0; i < ck->n; i++)
        if (strcmp(ck->t[i].name, name) == 0)
            return ck->t[i].data;
    fail_msg("no tensor %s", name);
    return NULL;
}

/* GPT2LMHeadModel's names (with lm_head.weight when untied); weights near 0, gains near 1 */
static void ck_make(ckpt *ck, bool tied)
{
    memset(ck, 0, sizeof *ck);
    char n[64];
    ck_add(ck, "transformer.wte.weight", V, C, 0);
    ck_add(ck, "transformer.wpe.weight", P, C, 0);
    for (int l = 0; l < L; l++) {
#define LAYER(suffix, d0, d1, cst)                                                                 \
    snprintf(n, sizeof n, "transformer.h.%d.%s", l, suffix);                                       \
    ck_add(ck, n, d0, d1, cst)
        LAYER("ln_1.weight", C, 0, 1);
        LAYER("ln_1.bias", C, 0, 0);
        LAYER("attn.c_attn.weight", C, 3 * C, 0);
        LAYER("attn.c_attn.bias", 3 * C, 0, 0);
        LAYER("attn.c_proj.weight", C, C, 0);
        LAYER("attn.c_proj.bias", C, 0, 0);
        LAYER("ln_2.weight", C, 0, 1);
        LAYER("ln_2.bias", C, 0, 0);
        LAYER("mlp.c_fc.weight", C, 4 * C, 0);
        LAYER("mlp.c_fc.bias", 4 * C, 0, 0);
        LAYER("mlp.c_proj.weight", 4 * C, C, 0);
        LAYER("mlp.c_proj.bias", C, 0, 0);
#undef LAYER
    }
    ck_add(ck, "transformer.ln_f.weight", C, 0, 1);
    ck_add(ck, "transformer.ln_f.bias", C, 0, 0);
    if (!tied)
        ck_add(ck, "lm_head.weight", V, C, 0);
}

static void ck_free(ckpt *ck)
{
    for (int i = 0; i < ck->n; i++)
        free(ck->t[i].data);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void write_config(const char *dir, bool tied, const char *extra)
{
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(text, sizeof text,
             "{\"model_type\": \"gpt2\", \"architectures\": [\"GPT2LMHeadModel\"], "
             "\"vocab_size\": %d, \"n_positions\": %d, \"n_embd\": %d, \"n_layer\": %d, "
             "\"n_head\": %d, \"n_inner\": null, \"activation_function\": \"gelu_new\", "
             "\"layer_norm_epsilon\": 1e-05, \"tie_word_embeddings\": %s, "
             "\"torch_dtype\": \"float32\"%s}",
             V, P, C, L, NH, tied ? "true" : "false", extra);
    write_text(path, text);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16); /* truncation: the test compares against the same bits */
}

static uint16_t f32_to_f16(float f)
{
    /* normal values only (the test's weights are well inside the half range) */
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t sign = (b >> 16) & 0x8000, exp = (b >> 23) & 0xff, man = (b >> 13) & 0x3ff;
    if (exp < 127 - 14)
        return (uint16_t)sign; /* flush tiny values to zero */
    return (uint16_t)(sign | ((exp - 127 + 15) << 10) | man);
}

/* Writes tensors [first, last) of ck as one file with `dtype` ("F32", "F16", "BF16"); the
 * stored values are rounded to the dtype in ck itself so the reader's results compare exactly.
 * `skip_prefix` drops "transformer." from the names. */
static void ck_write_file(ckpt *ck, int first, int last, const char *path, const char *dtype,
                          bool skip_prefix)
{
    size_t esz = strcmp(dtype, "F32") == 0 ? 4 : 2;
    char *hdr = malloc(1 << 16);
    size_t h = (size_t)sprintf(hdr, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = first; i < last; i++) {
        ck_tensor *t = &ck->t[i];
        size_t n = (size_t)t->dims[0] * (size_t)(t->ndim == 2 ? t->dims[1] : 1);
        const char *name = t->name;
        if (skip_prefix && strncmp(name, "transformer.", 12) == 0)
            name += 12;
        if (t->ndim == 2)
            h += (size_t)sprintf(hdr + h,
                                 ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld,%lld],"
                                 "\"data_offsets\":[%llu,%llu]}",
                                 name, dtype, (long long)t->dims[0], (long long)t->dims[1],
                                 (unsigned long long)off, (unsigned long long)(off + n * esz));
        else
            h += (size_t)sprintf(hdr + h,
                                 ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld],"
                                 "\"data_offsets\":[%llu,%llu]}",
                                 name, dtype, (long long)t->dims[0], (unsigned long long)off,
                                 (unsigned long long)(off + n * esz));
        off += n * esz;
    }
    h += (size_t)sprintf(hdr + h, "}");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t hl = h;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, h, f);
    for (int i = first; i < last; i++) {
        ck_tensor *t = &ck->t[i];
        size_t n = (size_t)t->dims[0] * (size_t)(t->ndim == 2 ? t->dims[1] : 1);
        for (size_t j = 0; j < n; j++) {
            if (esz == 4) {
                fwrite(&t->data[j], 4, 1, f);
                continue;
            }
            uint16_t v =
                strcmp(dtype, "F16") == 0 ? f32_to_f16(t->data[j]) : f32_to_bf16(t->data[j]);
            t->data[j] = strcmp(dtype, "F16") == 0 ? kn_st_f16_to_f32(v) : kn_st_bf16_to_f32(v);
            fwrite(&v, 2, 1, f);
        }
    }
    fclose(f);
    free(hdr);
}

static void make_dir(char *dir)
{
    strcpy(dir, "/tmp/kn_hf_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void remove_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static kn_model *hf_model(const char *dir, int seq_len, sc_err *err, sc_status want)
{
    char spec[1024];
    snprintf(spec, sizeof spec,
             "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"hf\", \"path\": "
             "\"%s\", \"seq_len\": %d, \"cpu_kernels\": \"reference\"}",
             dir, seq_len);
    kn_model *m = NULL;
    sc_err_clear(err);
    sc_status rc = kn_model_parse(&m, "model.json", spec, strlen(spec), err);
    if (rc != want)
        fprintf(stderr, "%s\n", err->msg);
    assert_int_equal(rc, want);
    return m;
}

/* --- a plain GPT-2 forward on the checkpoint's layout (the specification) ----------------------
 */

static void ref_ln(float *out, const float *x, const float *w, const float *b, int n)
{
    for (int i = 0; i < n; i++) {
        const float *r = x + (size_t)i * C;
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++)
            mean += r[c];
        mean /= C;
        for (int c = 0; c < C; c++)
            var += (r[c] - mean) * (r[c] - mean);
        var /= C;
        double rs = 1.0 / sqrt(var + 1e-5);
        for (int c = 0; c < C; c++)
            out[(size_t)i * C + c] = (float)((r[c] - mean) * rs * w[c] + b[c]);
    }
}

/* Conv1D: out (n, O) = x (n, I) @ w (I, O) + b */
static void ref_conv1d(float *out, const float *x, const float *w, const float *b, int n, int I,
                       int O)
{
    for (int i = 0; i < n; i++)
        for (int o = 0; o < O; o++) {
            double s = b != NULL ? b[o] : 0;
            for (int k = 0; k < I; k++)
                s += (double)x[(size_t)i * I + k] * w[(size_t)k * O + o];
            out[(size_t)i * O + o] = (float)s;
        }
}

/* logits (B, T, V) and the mean loss over targets */
static double ref_gpt2(const ckpt *ck, bool tied, const int32_t *tok, const int32_t *tgt,
                       float *logits)
{
    static float x[B * T * C], h[B * T * C], qkv[B * T * 3 * C], y[B * T * C], f[B * T * 4 * C],
        o[B * T * C];
    const float *wte = ck_get(ck, "transformer.wte.weight"),
                *wpe = ck_get(ck, "transformer.wpe.weight");
    for (int i = 0; i < B * T; i++)
        for (int c = 0; c < C; c++)
            x[i * C + c] = wte[tok[i] * C + c] + wpe[(i % T) * C + c];
    char n[64];
#define W(suffix) (snprintf(n, sizeof n, "transformer.h.%d.%s", l, suffix), ck_get(ck, n))
    for (int l = 0; l < L; l++) {
        ref_ln(h, x, W("ln_1.weight"), W("ln_1.bias"), B * T);
        ref_conv1d(qkv, h, W("attn.c_attn.weight"), W("attn.c_attn.bias"), B * T, C, 3 * C);
        int hs = C / NH;
        for (int b = 0; b < B; b++)
            for (int hd = 0; hd < NH; hd++)
                for (int t = 0; t < T; t++) {
                    const float *q = qkv + ((size_t)(b * T + t)) * 3 * C + hd * hs;
                    double att[T], mx = -1e30, sum = 0;
                    for (int u = 0; u <= t; u++) {
                        const float *k = qkv + ((size_t)(b * T + u)) * 3 * C + C + hd * hs;
                        double s = 0;
                        for (int e = 0; e < hs; e++)
                            s += (double)q[e] * k[e];
                        att[u] = s / sqrt((double)hs);
                        mx = att[u] > mx ? att[u] : mx;
                    }
                    for (int u = 0; u <= t; u++)
                        sum += att[u] = exp(att[u] - mx);
                    for (int e = 0; e < hs; e++) {
                        double s = 0;
                        for (int u = 0; u <= t; u++)
                            s += att[u] / sum *
                                 qkv[((size_t)(b * T + u)) * 3 * C + 2 * C + hd * hs + e];
                        y[(b * T + t) * C + hd * hs + e] = (float)s;
                    }
                }
        ref_conv1d(o, y, W("attn.c_proj.weight"), W("attn.c_proj.bias"), B * T, C, C);
        for (int i = 0; i < B * T * C; i++)
            x[i] += o[i];
        ref_ln(h, x, W("ln_2.weight"), W("ln_2.bias"), B * T);
        ref_conv1d(f, h, W("mlp.c_fc.weight"), W("mlp.c_fc.bias"), B * T, C, 4 * C);
        for (int i = 0; i < B * T * 4 * C; i++) {
            double v = f[i]; /* gelu_new */
            f[i] = (float)(0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
        }
        ref_conv1d(o, f, W("mlp.c_proj.weight"), W("mlp.c_proj.bias"), B * T, 4 * C, C);
        for (int i = 0; i < B * T * C; i++)
            x[i] += o[i];
    }
#undef W
    ref_ln(h, x, ck_get(ck, "transformer.ln_f.weight"), ck_get(ck, "transformer.ln_f.bias"), B * T);
    const float *head = tied ? wte : ck_get(ck, "lm_head.weight");
    double loss = 0;
    for (int i = 0; i < B * T; i++) {
        double mx = -1e30, sum = 0;
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int c = 0; c < C; c++)
                s += (double)h[i * C + c] * head[v * C + c];
            logits[i * V + v] = (float)s;
            mx = s > mx ? s : mx;
        }
        for (int v = 0; v < V; v++)
            sum += exp(logits[i * V + v] - mx);
        loss += -(logits[i * V + tgt[i]] - mx - log(sum));
    }
    return loss / (B * T);
}

static void batch(int32_t *tok, int32_t *tgt)
{
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)((i * 7 + 3) % V);
        tgt[i] = (int32_t)((i * 5 + 1) % V);
    }
}

static kn_stage *stage_over(const kn_model *m, int first, int last)
{
    kn_stage *st = NULL;
    sc_err err;
    sc_err_clear(&err);
    kn_stage_cfg cfg = kn_stage_cfg_default(first, last, CPU, B);
    cfg.optim = kn_optim_sgd_default();
    cfg.optim.lr = 0.1f;
    cfg.optim.momentum = 0;
    cfg.optim.weight_decay = 0;
    sc_status rc = kn_stage_new_cfg(&st, m, &cfg, &err);
    if (rc != SC_OK)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, SC_OK);
    return st;
}

/* logits of the stage's head from its stash: the loss block keeps softmax(logits), so the test
 * compares the loss, and the probabilities against the reference's softmax */
static void check_against_reference(const ckpt *ck, bool tied, const kn_model *m)
{
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt);
    static float logits[B * T * V];
    double want = ref_gpt2(ck, tied, tok, tgt, logits);
    kn_stage *st = stage_over(m, 0, kn_model_block_count(m) - 1);
    sc_err err;
    sc_err_clear(&err);
    assert_int_equal(kn_stage_forward_host(st, 0, tok, tgt, B, &err), SC_OK);
    float loss;
    assert_int_equal(kn_stage_loss(st, 0, &loss, &err), SC_OK);
    assert_true(fabs(loss - want) < 1e-5 * (1 + fabs(want)));
    /* per-position losses are -log softmax(logits)[target]: each within 1e-5 */
    float per[B * T];
    assert_int_equal(kn_stage_output_to_host(st, 0, per, &err), SC_OK);
    for (int i = 0; i < B * T; i++) {
        double mx = -1e30, sum = 0;
        for (int v = 0; v < V; v++)
            mx = logits[i * V + v] > mx ? logits[i * V + v] : mx;
        for (int v = 0; v < V; v++)
            sum += exp(logits[i * V + v] - mx);
        double l = -(logits[i * V + tgt[i]] - mx - log(sum));
        assert_true(fabs(per[i] - l) < 1e-5);
    }
    kn_stage_destroy(&st);
}

/* --- tests -------------------------------------------------------------------------------------
 */

static void test_half_conversions(void **state)
{
    (void)state;
    assert_true(kn_st_f16_to_f32(0x3c00) == 1.0f);
    assert_true(kn_st_f16_to_f32(0xc000) == -2.0f);
    assert_true(kn_st_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(kn_st_f16_to_f32(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    assert_true(kn_st_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
    assert_true(isinf(kn_st_f16_to_f32(0x7c00)));
    assert_true(kn_st_f16_to_f32(0x8000) == 0.0f && signbit(kn_st_f16_to_f32(0x8000)));
    assert_true(kn_st_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(kn_st_bf16_to_f32(0xc040) == -3.0f);
}

static void gpt2_matches(bool tied, const char *dtype, bool skip_prefix, bool sharded)
{
    char dir[64], path[256];
    make_dir(dir);
    ckpt ck;
    ck_make(&ck, tied);
    write_config(dir, tied, "");
    if (sharded) {
        int half = ck.n / 2;
        snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
        ck_write_file(&ck, 0, half, path, dtype, skip_prefix);
        snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
        ck_write_file(&ck, half, ck.n, path, dtype, skip_prefix);
        char idx[8192];
        size_t n = (size_t)sprintf(idx, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
        for (int i = 0; i < ck.n; i++)
            n += (size_t)sprintf(idx + n, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                                 i ? ", " : "", ck.t[i].name, i < half ? 1 : 2);
        sprintf(idx + n, "}}");
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        write_text(path, idx);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        ck_write_file(&ck, 0, ck.n, path, dtype, skip_prefix);
    }
    sc_err err;
    kn_model *m = hf_model(dir, T, &err, SC_OK);
    assert_int_equal(kn_model_block_count(m), L + 2);
    kn_model_tie tie;
    assert_int_equal(kn_model_get_tie(m, &tie), tied);
    check_against_reference(&ck, tied, m);
    kn_model_destroy(&m);
    ck_free(&ck);
    remove_dir(dir);
}

static void test_gpt2_forward_matches_reference(void **state)
{
    (void)state;
    gpt2_matches(true, "F32", false, false);
    gpt2_matches(false, "F32", false, false);
}

static void test_gpt2_dtypes_shards_and_prefixes(void **state)
{
    (void)state;
    gpt2_matches(true, "F16", false, false);
    gpt2_matches(true, "BF16", true, false);
    gpt2_matches(false, "F32", false, true);
}

/* One step of SGD: the two copies of the tied tensor get the same update, w - lr * (g_embed +
 * g_head); two stages exchanging that gradient (kn_stage_tie_part) end bit for bit where one
 * stage ends. */
static void test_tied_gradients_one_and_two_stages(void **state)
{
    (void)state;
    char dir[64], path[256];
    make_dir(dir);
    ckpt ck;
    ck_make(&ck, true);
    write_config(dir, true, "");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_write_file(&ck, 0, ck.n, path, "F32", false);
    sc_err err;
    kn_model *m = hf_model(dir, T, &err, SC_OK);
    int nb = kn_model_block_count(m);
    int32_t tok[B * T], tgt[B * T];
    batch(tok, tgt);

    /* one stage */
    kn_stage *one = stage_over(m, 0, nb - 1);
    size_t np = kn_stage_param_count(one), o, n;
    assert_false(kn_stage_tie_part(one, &o, &n)); /* both copies inside */
    float *g = malloc(np * sizeof *g), *p0 = malloc(np * sizeof *p0), *p1 = malloc(np * sizeof *p1);
    assert_int_equal(kn_stage_params_to_host(one, p0, &err), SC_OK);
    assert_int_equal(kn_stage_forward_host(one, 0, tok, tgt, B, &err), SC_OK);
    assert_int_equal(kn_stage_backward_host(one, 0, NULL, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(one, g, &err), SC_OK);
    assert_int_equal(kn_stage_step(one, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(one, p1, &err), SC_OK);
    const kn_block *eb = kn_model_block(m, 0), *hb = kn_model_block(m, nb - 1);
    size_t head_off = np - hb->params + hb->tensors[2].offset, count = (size_t)V * C;
    double gmax = 0;
    for (size_t j = 0; j < count; j++) {
        float sum = g[j] + g[head_off + j];
        assert_true(p1[j] == p1[head_off + j]);
        assert_true(fabsf(p1[j] - (p0[j] - 0.1f * sum)) < 1e-6f);
        gmax = fmax(gmax, fabs(g[head_off + j]));
    }
    assert_true(gmax > 1e-4); /* the head's gradient really took part */

    /* two stages: [embed, layer0] and [layer1, head] */
    kn_stage *s0 = stage_over(m, 0, 1), *s1 = stage_over(m, 2, nb - 1);
    size_t o0, n0, o1, n1;
    assert_true(kn_stage_tie_part(s0, &o0, &n0));
    assert_true(kn_stage_tie_part(s1, &o1, &n1));
    assert_int_equal(n0, count);
    assert_int_equal(n1, count);
    assert_int_equal(o0, eb->tensors[0].offset);
    size_t np0 = kn_stage_param_count(s0), np1 = kn_stage_param_count(s1);
    assert_int_equal(np0 + np1, np);
    float *h0 = malloc(np0 * sizeof *h0), *h1 = malloc(np1 * sizeof *h1);
    float *act = malloc((size_t)B * T * C * sizeof *act);
    assert_int_equal(kn_stage_forward_host(s0, 0, tok, NULL, B, &err), SC_OK);
    assert_int_equal(kn_stage_output_to_host(s0, 0, act, &err), SC_OK);
    assert_int_equal(kn_stage_forward_host(s1, 0, act, tgt, B, &err), SC_OK);
    assert_int_equal(kn_stage_backward_host(s1, 0, NULL, &err), SC_OK);
    assert_int_equal(kn_stage_grad_input_to_host(s1, act, &err), SC_OK);
    assert_int_equal(kn_stage_backward_host(s0, 0, act, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(s0, h0, &err), SC_OK);
    assert_int_equal(kn_stage_grads_to_host(s1, h1, &err), SC_OK);
    for (size_t j = 0; j < count; j++) { /* the exchange: each adds the other's */
        float a = h0[o0 + j], b = h1[o1 + j];
        h0[o0 + j] = a + b;
        h1[o1 + j] = b + a;
    }
    assert_int_equal(kn_stage_grads_from_host(s0, h0, &err), SC_OK);
    assert_int_equal(kn_stage_grads_from_host(s1, h1, &err), SC_OK);
    assert_int_equal(kn_stage_step(s0, &err), SC_OK);
    assert_int_equal(kn_stage_step(s1, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(s0, h0, &err), SC_OK);
    assert_int_equal(kn_stage_params_to_host(s1, h1, &err), SC_OK);
    assert_memory_equal(h0, p1, np0 * sizeof(float));
    assert_memory_equal(h1, p1 + np0, np1 * sizeof(float));

    free(g);
    free(p0);
    free(p1);
    free(h0);
    free(h1);
    free(act);
    kn_stage_destroy(&one);
    kn_stage_destroy(&s0);
    kn_stage_destroy(&s1);
    kn_model_destroy(&m);
    ck_free(&ck);
    remove_dir(dir);
}

/* Export of the read model, read back: every tensor the same bits; a second export of the
 * re-read model gives the same file. */
static void test_export_roundtrip(void **state)
{
    (void)state;
    for (int tied = 0; tied < 2; tied++) {
        char dir[64], out[128], path[256];
        make_dir(dir);
        ckpt ck;
        ck_make(&ck, tied);
        write_config(dir, tied, "");
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        ck_write_file(&ck, 0, ck.n, path, "F32", tied);
        sc_err err;
        kn_model *m = hf_model(dir, T, &err, SC_OK);
        int nb = kn_model_block_count(m);
        float *bp[L + 2];
        for (int i = 0; i < nb; i++) {
            bp[i] = malloc(kn_model_block(m, i)->params * sizeof(float));
            assert_int_equal(kn_model_fill_block(m, i, bp[i], &err), SC_OK);
        }
        snprintf(out, sizeof out, "%s/export", dir);
        sc_err_clear(&err);
        assert_int_equal(kn_hf_export(m, (const float *const *)bp, out, &err), SC_OK);
        kn_st *st = NULL;
        assert_int_equal(kn_st_open(&st, out, &err), SC_OK);
        for (int i = 0; i < ck.n; i++) {
            int nd;
            int64_t d[KN_ST_DIMS_MAX];
            assert_int_equal(kn_st_shape(st, ck.t[i].name, &nd, d, NULL, &err), SC_OK);
            assert_int_equal(nd, ck.t[i].ndim);
            size_t cnt = (size_t)d[0] * (size_t)(nd == 2 ? d[1] : 1);
            float *buf = malloc(cnt * sizeof *buf);
            assert_int_equal(kn_st_read(st, ck.t[i].name, nd, d, false, buf, &err), SC_OK);
            assert_memory_equal(buf, ck.t[i].data, cnt * sizeof *buf);
            free(buf);
        }
        assert_int_equal(kn_st_has(st, "lm_head.weight"), !tied);
        kn_st_close(&st);
        /* the exported folder is itself a model */
        kn_model *m2 = hf_model(out, T, &err, SC_OK);
        assert_int_equal(kn_model_param_count(m2), kn_model_param_count(m));
        for (int i = 0; i < nb; i++) {
            float *b2 = malloc(kn_model_block(m, i)->params * sizeof(float));
            assert_int_equal(kn_model_fill_block(m2, i, b2, &err), SC_OK);
            assert_memory_equal(b2, bp[i], kn_model_block(m, i)->params * sizeof(float));
            free(b2);
            free(bp[i]);
        }
        kn_model_destroy(&m2);
        kn_model_destroy(&m);
        ck_free(&ck);
        remove_dir(dir);
    }
}

/* A checkpoint whose config names bfloat16 or float16 exports in that dtype: each tensor's
 * values rounded to nearest (ties to even) from the fp32 the job trained, the config's dtype
 * kept, and the exported folder reads back as those rounded values. */
static void test_export_in_checkpoint_dtype(void **state)
{
    (void)state;
    const char *const names[] = {"bfloat16", "float16"};
    const kn_st_dtype want[] = {KN_ST_BF16, KN_ST_F16};
    for (int k = 0; k < 2; k++) {
        char dir[64], out[128], path[256], text[1024];
        make_dir(dir);
        ckpt ck;
        ck_make(&ck, false);
        snprintf(text, sizeof text, "\"torch_dtype\": \"%s\"", names[k]);
        write_config(dir, false, "");
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        char cfg[1024];
        size_t n = fread(cfg, 1, sizeof cfg - 1, f);
        fclose(f);
        cfg[n] = '\0';
        char *at = strstr(cfg, "\"torch_dtype\": \"float32\"");
        assert_non_null(at);
        char patched[1200];
        snprintf(patched, sizeof patched, "%.*s%s%s", (int)(at - cfg), cfg, text,
                 at + strlen("\"torch_dtype\": \"float32\""));
        write_text(path, patched);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        ck_write_file(&ck, 0, ck.n, path, "F32", false);
        sc_err err;
        kn_model *m = hf_model(dir, T, &err, SC_OK);
        int nb = kn_model_block_count(m);
        float *bp[L + 2];
        for (int i = 0; i < nb; i++) {
            bp[i] = malloc(kn_model_block(m, i)->params * sizeof(float));
            assert_int_equal(kn_model_fill_block(m, i, bp[i], &err), SC_OK);
        }
        snprintf(out, sizeof out, "%s/export", dir);
        sc_err_clear(&err);
        assert_int_equal(kn_hf_export(m, (const float *const *)bp, out, &err), SC_OK);
        kn_st *st = NULL;
        assert_int_equal(kn_st_open(&st, out, &err), SC_OK);
        for (int i = 0; i < ck.n; i++) {
            int nd;
            int64_t d[KN_ST_DIMS_MAX];
            kn_st_dtype dt;
            assert_int_equal(kn_st_shape(st, ck.t[i].name, &nd, d, &dt, &err), SC_OK);
            assert_int_equal(dt, want[k]);
            size_t cnt = (size_t)d[0] * (size_t)(nd == 2 ? d[1] : 1);
            float *buf = malloc(cnt * sizeof *buf);
            assert_int_equal(kn_st_read(st, ck.t[i].name, nd, d, false, buf, &err), SC_OK);
            for (size_t j = 0; j < cnt; j++) {
                float r = k == 0 ? kn_round_bf16(ck.t[i].data[j]) : kn_round_fp16(ck.t[i].data[j]);
                if (buf[j] != r)
                    fail_msg("%s[%zu]: exported %g, %s of %g is %g", ck.t[i].name, j, buf[j],
                             names[k], ck.t[i].data[j], r);
            }
            free(buf);
        }
        kn_st_close(&st);
        snprintf(path, sizeof path, "%s/config.json", out);
        f = fopen(path, "r");
        assert_non_null(f);
        n = fread(cfg, 1, sizeof cfg - 1, f);
        fclose(f);
        cfg[n] = '\0';
        assert_non_null(strstr(cfg, names[k]));
        kn_model *m2 = hf_model(out, T, &err, SC_OK);
        assert_int_equal(kn_model_param_count(m2), kn_model_param_count(m));
        kn_model_destroy(&m2);
        for (int i = 0; i < nb; i++)
            free(bp[i]);
        kn_model_destroy(&m);
        ck_free(&ck);
        remove_dir(dir);
    }
}

/* A "gpt" model exports as a GPT-2 with an untied head and reads back the same. */
static void test_export_gpt_kind(void **state)
{
    (void)state;
    static const char spec[] = "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": "
                               "\"gpt\", \"vocab\": 11, \"seq_len\": 5, \"layers\": 2, "
                               "\"width\": 8, \"heads\": 2}";
    sc_err err;
    sc_err_clear(&err);
    kn_model *m = NULL;
    assert_int_equal(kn_model_parse(&m, "gpt.json", spec, strlen(spec), &err), SC_OK);
    int nb = kn_model_block_count(m);
    float *bp[8];
    for (int i = 0; i < nb; i++) {
        bp[i] = malloc(kn_model_block(m, i)->params * sizeof(float));
        kn_model_init_block(m, i, bp[i]);
    }
    char dir[64];
    make_dir(dir);
    sc_status xrc = kn_hf_export(m, (const float *const *)bp, dir, &err);
    if (xrc != SC_OK)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(xrc, SC_OK);
    char hspec[256];
    snprintf(hspec, sizeof hspec,
             "{\"format\": \"stagecraft-model\", \"version\": 1, \"kind\": \"hf\", "
             "\"path\": \"%s\"}",
             dir);
    kn_model *m2 = NULL;
    xrc = kn_model_parse(&m2, "hf.json", hspec, strlen(hspec), &err);
    if (xrc != SC_OK)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(xrc, SC_OK);
    assert_false(kn_model_get_tie(m2, NULL));
    assert_int_equal(kn_model_block_count(m2), nb);
    for (int i = 0; i < nb; i++) {
        float *b2 = malloc(kn_model_block(m, i)->params * sizeof(float));
        assert_int_equal(kn_model_fill_block(m2, i, b2, &err), SC_OK);
        assert_memory_equal(b2, bp[i], kn_model_block(m, i)->params * sizeof(float));
        free(b2);
        free(bp[i]);
    }
    kn_model_destroy(&m2);
    kn_model_destroy(&m);
    remove_dir(dir);
}

static void expect_stage_error(const char *dir, const char *needle)
{
    sc_err err;
    kn_model *m = hf_model(dir, T, &err, SC_OK);
    kn_stage *st = NULL;
    kn_stage_cfg cfg = kn_stage_cfg_default(0, kn_model_block_count(m) - 1, CPU, 1);
    sc_err_clear(&err);
    assert_int_not_equal(kn_stage_new_cfg(&st, m, &cfg, &err), SC_OK);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("error \"%s\" does not name \"%s\"", err.msg, needle);
    assert_null(st);
    kn_model_destroy(&m);
}

static void test_bad_checkpoints_refused(void **state)
{
    (void)state;
    char dir[64], path[256];
    make_dir(dir);
    ckpt ck;
    ck_make(&ck, true);
    write_config(dir, true, "");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);

    /* no weights at all */
    expect_stage_error(dir, "model.safetensors");

    /* truncated: the last tensor's data cut short */
    ck_write_file(&ck, 0, ck.n, path, "F32", false);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 40), 0);
    expect_stage_error(dir, "past the data");

    /* header length past the end */
    FILE *f = fopen(path, "wb");
    uint64_t big = 1 << 20;
    fwrite(&big, 8, 1, f);
    fputs("{}", f);
    fclose(f);
    expect_stage_error(dir, "header length");

    /* a tensor missing (ln_f.bias: the last one written) */
    ck_write_file(&ck, 0, ck.n - 1, path, "F32", false);
    expect_stage_error(dir, "transformer.ln_f.bias");

    /* a wrong shape: wpe with one position fewer */
    ck.t[1].dims[0] = P - 1;
    ck_write_file(&ck, 0, ck.n, path, "F32", false);
    expect_stage_error(dir, "transformer.wpe.weight");
    ck.t[1].dims[0] = P;

    /* a dtype not read */
    f = fopen(path, "wb");
    const char *hdr = "{\"transformer.wte.weight\":{\"dtype\":\"I64\",\"shape\":[1],"
                      "\"data_offsets\":[0,8]}}";
    uint64_t hl = strlen(hdr);
    fwrite(&hl, 8, 1, f);
    fputs(hdr, f);
    fwrite(&hl, 8, 1, f);
    fclose(f);
    expect_stage_error(dir, "transformer.wte.weight");
    expect_stage_error(dir, "I64");

    /* offsets that do not match the shape */
    f = fopen(path, "wb");
    hdr = "{\"transformer.wte.weight\":{\"dtype\":\"F32\",\"shape\":[3],"
          "\"data_offsets\":[0,8]}}";
    hl = strlen(hdr);
    fwrite(&hl, 8, 1, f);
    fputs(hdr, f);
    fwrite(&hl, 8, 1, f);
    fclose(f);
    expect_stage_error(dir, "need 12");

    ck_free(&ck);
    remove_dir(dir);
}

static void expect_config_error(const char *extra, const char *needle)
{
    char dir[64];
    make_dir(dir);
    write_config(dir, true, extra);
    sc_err err;
    kn_model *m = hf_model(dir, T, &err, SC_ERR_UNSUPPORTED);
    assert_null(m);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("error \"%s\" does not name \"%s\"", err.msg, needle);
    remove_dir(dir);
}

static void test_bad_configs_refused(void **state)
{
    (void)state;
    /* each case adds a key write_config does not write (the reader refuses duplicates) */
    expect_config_error(", \"scale_attn_by_inverse_layer_idx\": true",
                        "scale_attn_by_inverse_layer_idx");
    expect_config_error(", \"add_cross_attention\": true", "add_cross_attention");
    expect_config_error(", \"scale_attn_weights\": false", "scale_attn_weights");
    char dir[64], path[256];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "{\"model_type\": \"bert\"}");
    sc_err err;
    kn_model *m = hf_model(dir, T, &err, SC_ERR_INVALID);
    assert_null(m);
    assert_non_null(strstr(err.msg, "model_type"));
    assert_non_null(strstr(err.msg, "gpt2"));
    /* a context longer than the checkpoint's positions */
    write_config(dir, true, "");
    m = hf_model(dir, P + 1, &err, SC_ERR_INVALID);
    assert_null(m);
    assert_non_null(strstr(err.msg, "n_positions"));
    remove_dir(dir);
}

/* Llama configs: what is not implemented is refused naming the key. */
static void expect_llama_error(const char *extra, sc_status want, const char *needle)
{
    char dir[64], path[256], text[1024];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(text, sizeof text,
             "{\"model_type\": \"llama\", \"vocab_size\": 32, \"hidden_size\": 16, "
             "\"intermediate_size\": 24, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
             "\"max_position_embeddings\": 8%s}",
             extra);
    write_text(path, text);
    sc_err err;
    kn_model *m = hf_model(dir, 8, &err, want);
    if (want == SC_OK) {
        assert_non_null(m);
        assert_int_equal(kn_model_block_count(m), 3);
        assert_true(kn_model_block(m, 1)->rope_theta == 500000.0f);
        assert_int_equal(kn_model_block(m, 1)->NKV, 2);
        kn_model_destroy(&m);
    } else if (strstr(err.msg, needle) == NULL) {
        fail_msg("error \"%s\" does not name \"%s\"", err.msg, needle);
    }
    remove_dir(dir);
}

static void test_llama_configs(void **state)
{
    (void)state;
    expect_llama_error(", \"num_key_value_heads\": 2, \"rope_parameters\": {\"rope_theta\": "
                       "500000.0, \"rope_type\": \"default\"}",
                       SC_OK, NULL);
    expect_llama_error(", \"num_key_value_heads\": 2, \"rope_theta\": 500000.0, "
                       "\"rope_scaling\": null",
                       SC_OK, NULL);
    expect_llama_error(", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}",
                       SC_ERR_UNSUPPORTED, "rope_scaling");
    expect_llama_error(", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0}",
                       SC_ERR_INVALID, "rope_type");
    expect_llama_error(", \"attention_bias\": true", SC_ERR_UNSUPPORTED, "attention_bias");
    expect_llama_error(", \"num_key_value_heads\": 3", SC_ERR_UNSUPPORTED, "num_key_value_heads");
    expect_llama_error(", \"hidden_act\": \"gelu\"", SC_ERR_INVALID, "hidden_act");
    expect_llama_error(", \"head_dim\": 8", SC_ERR_UNSUPPORTED, "head_dim");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_conversions),
        cmocka_unit_test(test_gpt2_forward_matches_reference),
        cmocka_unit_test(test_gpt2_dtypes_shards_and_prefixes),
        cmocka_unit_test(test_tied_gradients_one_and_two_stages),
        cmocka_unit_test(test_export_in_checkpoint_dtype),
        cmocka_unit_test(test_export_roundtrip),
        cmocka_unit_test(test_export_gpt_kind),
        cmocka_unit_test(test_bad_checkpoints_refused),
        cmocka_unit_test(test_bad_configs_refused),
        cmocka_unit_test(test_llama_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
