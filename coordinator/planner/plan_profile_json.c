/*
 * plan_profile_json: plan_profile_parse_json, the reader of our JSON profile
 * ("stagecraft-profile", docs/reference/formats.md).
 *
 * Checks the format and version, every block's fields and ranges, strictly increasing measured
 * sizes, unique block names and that some block takes time; errors name the file, the JSON
 * path and what would be valid. Does not read files (plan_profile_load.c) and does not scale
 * times (plan_profile.c).
 * Invariant: a profile comes back only when every check passed; on error nothing is kept.
 */
#include "coordinator/planner/plan_profile.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/sc_json.h"
#include "common/sc_util.h"
#include "coordinator/planner/plan_profile_internal.h"

static sc_status parse_sizes(const sc_jnode *blk, plan_block *b, sc_err *err)
{
    if (!sc_jnode_has(blk, "by_microbatch_size"))
        return SC_OK;
    sc_jnode arr;
    SC_CHECK(sc_json_get_array(blk, "by_microbatch_size", 1, 4096, &arr, err));
    size_t n = sc_jnode_size(&arr);
    b->sizes = calloc(n, sizeof *b->sizes);
    SC_ALLOC_CHECK(b->sizes, err);
    b->n_sizes = (int)n;
    for (size_t i = 0; i < n; i++) {
        sc_jnode e = sc_jnode_element(&arr, i);
        int64_t size;
        SC_CHECK(sc_jnode_expect_object(&e, err));
        SC_CHECK(sc_json_get_int(&e, "size", 1, 1 << 24, &size, err));
        SC_CHECK(sc_json_get_number(&e, "forward_s", 0, 1e9, &b->sizes[i].forward_s, err));
        SC_CHECK(sc_json_get_number(&e, "backward_s", 0, 1e9, &b->sizes[i].backward_s, err));
        b->sizes[i].size = (int)size;
        if (i > 0 && b->sizes[i].size <= b->sizes[i - 1].size) {
            sc_jnode sn;
            SC_CHECK(sc_jnode_member(&e, "size", &sn, err));
            return sc_jnode_fail(&sn, err, SC_ERR_INVALID,
                                 "sizes must increase strictly (previous entry has %d)",
                                 b->sizes[i - 1].size);
        }
    }
    return SC_OK;
}

typedef struct {
    const char *name;
    int index;
} named_index;

static int cmp_by_name(const void *a, const void *b)
{
    const named_index *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c != 0 ? c : (x->index > y->index) - (x->index < y->index);
}

/* The first block (in file order) whose name an earlier block has, or -1. */
static int duplicate_name(const plan_profile *p)
{
    int n = p->n_blocks, dup = -1;
    named_index *v = malloc((size_t)n * sizeof *v);
    if (v == NULL)
        return -1; /* no check without memory; the profile is still usable */
    for (int i = 0; i < n; i++)
        v[i] = (named_index){p->blocks[i].name, i};
    qsort(v, (size_t)n, sizeof *v, cmp_by_name);
    for (int k = 1; k < n; k++)
        if (strcmp(v[k].name, v[k - 1].name) == 0 && (dup < 0 || v[k].index < dup))
            dup = v[k].index;
    free(v);
    return dup;
}

static sc_status parse_json_doc(plan_profile **out, const sc_jdoc *doc, sc_err *err)
{
    sc_jnode root = sc_jdoc_root(doc), blocks;
    plan_profile *p = NULL;
    const char *s;
    int64_t mb;
    sc_status rc;
    SC_CHECK(sc_jnode_expect_object(&root, err));
    SC_CHECK(sc_jdoc_check_format(doc, "stagecraft-profile", 1, NULL, err));
    SC_CHECK(sc_json_get_int(&root, "microbatch_size", 1, 1 << 24, &mb, err));
    SC_CHECK(sc_json_get_array(&root, "blocks", 1, 1 << 20, &blocks, err));
    size_t n = sc_jnode_size(&blocks);
    SC_CHECK(plan_profile_new(&p, (int)n, err));
    p->kind = PLAN_PROFILE_JSON;
    p->microbatch_size = (int)mb;
    SC_CHECK_GOTO(sc_json_opt_string(&root, "model", "model", &s, err), fail);
    sc_strlcpy(p->model, s, sizeof p->model);
    SC_CHECK_GOTO(sc_json_opt_string(&root, "reference_device", "reference", &s, err), fail);
    sc_strlcpy(p->reference_device, s, sizeof p->reference_device);
    for (size_t i = 0; i < n; i++) {
        sc_jnode e = sc_jnode_element(&blocks, i);
        plan_block *b = &p->blocks[i];
        SC_CHECK_GOTO(sc_jnode_expect_object(&e, err), fail);
        SC_CHECK_GOTO(sc_json_get_string(&e, "name", &s, err), fail);
        sc_strlcpy(b->name, s, sizeof b->name);
        SC_CHECK_GOTO(sc_json_get_number(&e, "forward_s", 0, 1e9, &b->forward_s, err), fail);
        SC_CHECK_GOTO(sc_json_get_number(&e, "backward_s", 0, 1e9, &b->backward_s, err), fail);
        SC_CHECK_GOTO(
            sc_json_get_number(&e, "activation_bytes", 0, 1e18, &b->activation_bytes, err), fail);
        SC_CHECK_GOTO(
            sc_json_opt_number(&e, "parameter_bytes", 0, 1e18, 0, &b->parameter_bytes, err), fail);
        SC_CHECK_GOTO(sc_json_opt_number(&e, "optimizer_s", 0, 1e6, 0, &b->optimizer_s, err), fail);
        /* the weight-gradient part of backward_s (zb1's W), when the profiler measured it */
        double w = -1;
        SC_CHECK_GOTO(sc_json_opt_number(&e, "wgrad_s", 0, 1e9, -1, &w, err), fail);
        if (w > b->backward_s) {
            sc_jnode wn;
            sc_jnode_member(&e, "wgrad_s", &wn, NULL);
            rc = sc_jnode_fail(&wn, err, SC_ERR_INVALID,
                               "wgrad_s %g exceeds the block's backward_s %g; expected the part "
                               "of the backward that is the weight gradient, 0 to backward_s",
                               w, b->backward_s);
            goto fail;
        }
        if (w >= 0)
            b->wgrad_share = b->backward_s > 0 ? w / b->backward_s : 0;
        SC_CHECK_GOTO(sc_json_opt_number(&e, "stash_bytes", 0, 1e18, b->activation_bytes,
                                         &b->stash_bytes, err),
                      fail);
        SC_CHECK_GOTO(sc_json_opt_number(&e, "wstash_bytes", 0, 1e18, 0, &b->wstash_bytes, err),
                      fail);
        SC_CHECK_GOTO(sc_json_opt_number(&e, "scratch_bytes", 0, 1e18, 0, &b->scratch_bytes, err),
                      fail);
        SC_CHECK_GOTO(parse_sizes(&e, b, err), fail);
    }
    int dup = duplicate_name(p);
    if (dup >= 0) {
        sc_jnode e = sc_jnode_element(&blocks, (size_t)dup), name;
        sc_jnode_member(&e, "name", &name, NULL);
        rc = sc_jnode_fail(&name, err, SC_ERR_INVALID,
                           "block name \"%s\" is used by an earlier block; names are unique",
                           p->blocks[dup].name);
        goto fail;
    }
    if (!plan_profile_has_time(p)) {
        rc = sc_jnode_fail(&blocks, err, SC_ERR_INVALID,
                           "every block's forward_s and backward_s are 0; expected measured times");
        goto fail;
    }
    *out = p;
    return SC_OK;
fail:
    plan_profile_destroy(&p);
    return rc;
}

sc_status plan_profile_parse_json(plan_profile **out, const char *source, const char *text,
                                  size_t len, sc_err *err)
{
    sc_jdoc *doc = NULL;
    *out = NULL;
    SC_CHECK(sc_jdoc_parse(&doc, source, text, len, err));
    sc_status rc = parse_json_doc(out, doc, err);
    sc_jdoc_destroy(&doc);
    return rc;
}
