/*
 * kn model, the core: the model record, the helpers every kind builds its blocks with,
 * parameter layout, the accessors of model.h and deterministic initialisation. Shapes only; no
 * device memory and no arithmetic on activations here.
 *
 * Does not parse a spec (model_spec.c) and knows no kind: a kind's builder (model_builtin.c,
 * hf_model.c) calls this file, and this file reaches a kind's weights and data only through
 * the record's kn_model_source (model_internal.h).
 */
#include "kernels/model.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_util.h"
#include "kernels/model_internal.h"

/* Each builder reserves its exact block count once its sizes are validated. */
sc_status kn_model_blocks_reserve(kn_model *m, int count, sc_err *err)
{
    m->blocks = calloc((size_t)count, sizeof *m->blocks);
    if (m->blocks == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory building a model of %d blocks", count);
    m->cap = count;
    return SC_OK;
}

kn_block *kn_model_block_add(kn_model *m, kn_block_kind kind, const char *fmt, int a, int b)
{
    assert(m->nblocks < m->cap);
    kn_block *blk = &m->blocks[m->nblocks++];
    memset(blk, 0, sizeof *blk);
    blk->kind = kind;
    snprintf(blk->name, sizeof blk->name, fmt, a, b);
    return blk;
}

void kn_model_tensor_add(kn_block *blk, const char *name, size_t count, bool decay, float std,
                         float cst)
{
    assert(blk->ntensors < KN_BLOCK_TENSORS_MAX);
    kn_tensor *t = &blk->tensors[blk->ntensors++];
    sc_strlcpy(t->name, name, sizeof t->name);
    t->offset = blk->params;
    t->count = count;
    t->decay = decay;
    t->init_std = std;
    t->init_const = cst;
    blk->params += count;
}

void kn_model_destroy(kn_model **model)
{
    if (model == NULL || *model == NULL)
        return;
    if ((*model)->source != NULL && (*model)->source->release != NULL)
        (*model)->source->release((*model)->source_data);
    free((*model)->blocks);
    free(*model);
    *model = NULL;
}

kn_model_kind kn_model_get_kind(const kn_model *m)
{
    return m->kind;
}

const char *kn_model_name(const kn_model *m)
{
    return m->name;
}

int kn_model_block_count(const kn_model *m)
{
    return m->nblocks;
}

const kn_block *kn_model_block(const kn_model *m, int i)
{
    assert(i >= 0 && i < m->nblocks);
    return &m->blocks[i];
}

size_t kn_model_param_count(const kn_model *m)
{
    return m->params;
}

int kn_model_targets_per_sample(const kn_model *m)
{
    return m->targets_per_sample;
}

int kn_model_classes(const kn_model *m)
{
    return m->classes;
}

uint64_t kn_model_seed(const kn_model *m)
{
    return m->seed;
}

bool kn_model_cpu_reference(const kn_model *m)
{
    return m->cpu_reference;
}

void kn_model_set_cpu_reference(kn_model *m, bool reference)
{
    m->cpu_reference = reference;
}

void kn_model_set_seed(kn_model *m, uint64_t seed)
{
    m->seed = seed;
}

/* splitmix64: a tiny, well-mixed generator; its output depends on nothing but the state */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
    return ((splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

void kn_model_init_block(const kn_model *m, int i, float *params)
{
    const kn_block *b = kn_model_block(m, i);
    uint64_t state = m->seed * 0xD1B54A32D192ED03ull + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    for (int t = 0; t < b->ntensors; t++) {
        const kn_tensor *tn = &b->tensors[t];
        float *p = params + tn->offset;
        if (tn->init_std == 0.0f) {
            for (size_t j = 0; j < tn->count; j++)
                p[j] = tn->init_const;
            continue;
        }
        /* Box-Muller in double, both outputs used */
        for (size_t j = 0; j < tn->count; j += 2) {
            double r = sqrt(-2.0 * log(uniform01(&state)));
            double a = 2.0 * M_PI * uniform01(&state);
            p[j] = (float)(tn->init_std * r * cos(a));
            if (j + 1 < tn->count)
                p[j + 1] = (float)(tn->init_std * r * sin(a));
        }
    }
}

sc_status kn_model_fill_block(const kn_model *m, int i, float *params, sc_err *err)
{
    if (m->source != NULL && m->source->read_block != NULL)
        return m->source->read_block(m, i, params, err);
    kn_model_init_block(m, i, params);
    return SC_OK;
}

bool kn_model_get_tie(const kn_model *m, kn_model_tie *tie)
{
    if (m->tied && tie != NULL)
        *tie = m->tie;
    return m->tied;
}

double kn_model_train_flops_per_sample(const kn_model *m)
{
    if (m->kind == KN_MODEL_GPT || m->kind == KN_MODEL_HF)
        return (6.0 * (double)m->params + 6.0 * m->layers * m->C * m->T) * m->T;
    double macs = 0;
    for (int i = 0; i < m->nblocks; i++) {
        const kn_block *b = &m->blocks[i];
        if (b->kind == KN_BLOCK_FC_RELU || b->kind == KN_BLOCK_FC_LOSS)
            macs += (double)b->fin * b->fout;
        else if (b->kind == KN_BLOCK_CONV_RELU)
            macs += (double)b->cout * b->h * b->w * b->cin * b->k * b->k;
    }
    return 6.0 * macs;
}
