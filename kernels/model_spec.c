/*
 * kn model, the spec: reads a model spec ("stagecraft-model" files and the job's "model" node),
 * its common keys (kind, name, seed, cpu_kernels), and hands the rest to the kind's builder
 * found in the registry below.
 *
 * The top of the model files: it calls the kinds (model_builtin.c, hf_model.c) and the core
 * (model.c); none of them calls it. Invariant: a model returned has its blocks and parameter
 * count set; on error nothing is returned and everything built is freed.
 */
#include "kernels/model.h"

#include <stdint.h>
#include <stdlib.h>

#include "common/sc_json.h"
#include "common/sc_util.h"
#include "kernels/hf_model.h"
#include "kernels/model_internal.h"

/* The registry: each kind's name (the spec's "kind", in kn_model_kind's order) and builder. A
 * new kind adds a line to both and a value to kn_model_kind. */
static const char *const model_kinds[] = {"gpt", "vgg", "mlp", "hf", NULL};
static const kn_model_build_fn model_builders[] = {
    [KN_MODEL_GPT] = kn_model_build_gpt,
    [KN_MODEL_VGG] = kn_model_build_vgg,
    [KN_MODEL_MLP] = kn_model_build_mlp,
    [KN_MODEL_HF] = kn_hf_build,
};
static const char *const cpu_kernel_kinds[] = {"fast", "reference", NULL};

/* The keys of a model spec, per kind (in model_kinds' order): every kind's own, then those of
 * every kind (format and version when the spec is a file of its own). A key not listed is
 * refused: a typo must not pass for an absent optional key. */
#define MODEL_COMMON_KEYS "kind", "name", "seed", "cpu_kernels", "format", "version", NULL
static const char *const gpt_keys[] = {"vocab", "seq_len",      "layers",         "width",
                                       "heads", "split_blocks", MODEL_COMMON_KEYS};
static const char *const vgg_keys[] = {"config", "image", "classes", "width_divisor",
                                       MODEL_COMMON_KEYS};
static const char *const mlp_keys[] = {"sizes", MODEL_COMMON_KEYS};
static const char *const hf_keys[] = {"path", "seq_len", "split_blocks", MODEL_COMMON_KEYS};
static const char *const *const model_keys[] = {gpt_keys, vgg_keys, mlp_keys, hf_keys};

sc_status kn_model_from_node(kn_model **out, const sc_jnode *root, sc_err *err)
{
    *out = NULL;
    SC_CHECK(sc_jnode_expect_object(root, err));
    int kind;
    SC_CHECK(sc_json_get_enum(root, "kind", model_kinds, &kind, err));
    SC_CHECK(sc_jnode_known_keys(root, model_keys[kind], err));
    const char *name;
    int64_t seed;
    SC_CHECK(sc_json_opt_string(root, "name", NULL, &name, err));
    SC_CHECK(sc_json_opt_int(root, "seed", 0, INT64_MAX, 1, &seed, err));
    int cpu_kernels = 0; /* "fast" unless the spec says otherwise */
    sc_jnode ck;
    if (sc_jnode_member(root, "cpu_kernels", &ck, NULL) == SC_OK)
        SC_CHECK(sc_json_get_enum(root, "cpu_kernels", cpu_kernel_kinds, &cpu_kernels, err));
    kn_model *m = calloc(1, sizeof *m);
    SC_ALLOC_CHECK(m, err);
    m->kind = (kn_model_kind)kind;
    m->seed = (uint64_t)seed;
    m->cpu_reference = cpu_kernels == 1;
    sc_status rc = model_builders[kind](m, root, err);
    if (rc != SC_OK) {
        kn_model_destroy(&m);
        return rc;
    }
    if (name != NULL)
        sc_strlcpy(m->name, name, sizeof m->name);
    for (int i = 0; i < m->nblocks; i++)
        m->params += m->blocks[i].params;
    *out = m;
    return SC_OK;
}

sc_status kn_model_parse(kn_model **out, const char *source, const char *text, size_t len,
                         sc_err *err)
{
    sc_jdoc *doc = NULL;
    *out = NULL;
    SC_CHECK(sc_jdoc_parse(&doc, source, text, len, err));
    sc_status rc = sc_jdoc_check_format(doc, "stagecraft-model", 1, NULL, err);
    if (rc == SC_OK) {
        sc_jnode root = sc_jdoc_root(doc);
        rc = kn_model_from_node(out, &root, err);
    }
    sc_jdoc_destroy(&doc);
    return rc;
}

sc_status kn_model_load(kn_model **out, const char *path, sc_err *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    SC_CHECK(sc_file_read(path, 1 << 20, &text, &len, err));
    sc_status rc = kn_model_parse(out, path, text, len, err);
    free(text);
    return rc;
}
