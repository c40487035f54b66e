/*
 * rt data: deterministic batches from text, llm.c token shards, CIFAR-10 binary batches or a
 * synthetic generator (see data.h). Sources are read whole into memory at rt_data_new().
 * Not here: streaming of sources larger than memory.
 * Invariant: sample k of step s depends only on (seed, s, k) and the source: positions are drawn
 * with a counter-based hash, never with a stateful generator.
 */
#include "worker/data/data.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/sc_util.h"

#define MAX_FILE_BYTES ((size_t)4 << 30)
#define SHARD_MAGIC 20240520
#define SHARD_HEADER_INTS 256
#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10
#define SYN_MUL 5 /* synthetic token chain: next = (5 * cur + 3) mod vocab */
#define SYN_ADD 3

struct rt_data {
    rt_data_cfg cfg;
    char path[1024];
    uint16_t *tokens; /* text and tokens: the stream; tokens[i] < classes */
    size_t ntokens;
    uint8_t *records; /* cifar10: nrecords * CIFAR_RECORD bytes */
    size_t nrecords;
};

static const char *const kind_names[] = {"text", "tokens", "cifar10", "synthetic"};

const char *rt_data_kind_name(rt_data_kind kind)
{
    return (unsigned)kind < SC_ARRAY_LEN(kind_names) ? kind_names[kind] : "unknown";
}

sc_status rt_data_kind_parse(const char *s, const char *what, rt_data_kind *out, sc_err *err)
{
    for (size_t i = 0; s != NULL && i < SC_ARRAY_LEN(kind_names); i++) {
        if (strcmp(s, kind_names[i]) == 0) {
            *out = (rt_data_kind)i;
            return SC_OK;
        }
    }
    return SC_ERRF(err, SC_ERR_INVALID,
                   "%s: unknown data kind \"%s\"; valid: \"text\", \"tokens\", \"cifar10\", "
                   "\"synthetic\"",
                   what, s != NULL ? s : "(null)");
}

/* splitmix64 finaliser over a combination of the inputs: a counter-based hash. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t sample_hash(uint64_t seed, uint64_t step, uint64_t k, uint64_t salt)
{
    return mix(mix(mix(mix(seed) ^ step) ^ k) ^ salt);
}

/* Reads a whole source file. What is not a regular file is refused before it is opened: the open
 * of a FIFO blocks until a writer comes (and the worker's handler thread with it, for good), and a
 * device such as /dev/zero never ends; a file over the limit is refused before it is read. */
static sc_status read_source(const char *path, char **buf, size_t *len, sc_err *err)
{
    struct stat sb;
    if (stat(path, &sb) == 0) { /* else sc_file_read names the reason */
        if (S_ISDIR(sb.st_mode))
            return SC_ERRF(err, SC_ERR_INVALID, "%s: is a directory; expected a data file", path);
        if (!S_ISREG(sb.st_mode))
            return SC_ERRF(err, SC_ERR_INVALID,
                           "%s: not a regular file (a FIFO, socket or device); expected a data "
                           "file",
                           path);
        if ((uint64_t)sb.st_size > MAX_FILE_BYTES)
            return SC_ERRF(err, SC_ERR_TOO_LARGE,
                           "%s: %lld bytes, over the limit of %zu bytes for one data file", path,
                           (long long)sb.st_size, MAX_FILE_BYTES);
    }
    return sc_file_read(path, MAX_FILE_BYTES, buf, len, err);
}

static sc_status load_text(rt_data *d, sc_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    SC_CHECK(read_source(d->path, &buf, &len, err));
    sc_status rc = SC_OK;
    d->tokens = malloc(len * sizeof *d->tokens + 1);
    if (d->tokens == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading %s", d->path);
    } else {
        for (size_t i = 0; i < len; i++)
            d->tokens[i] = (uint8_t)buf[i];
        d->ntokens = len;
    }
    free(buf);
    return rc;
}

/* Appends one llm.c shard to the token stream. */
static sc_status load_shard(rt_data *d, const char *path, sc_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    SC_CHECK(read_source(path, &buf, &len, err));
    sc_status rc = SC_OK;
    int32_t hdr[SHARD_HEADER_INTS];
    if (len < sizeof hdr) {
        rc = SC_ERRF(err, SC_ERR_PARSE,
                     "%s: %zu bytes, too short for a token shard (header of 256 int32 = 1024 "
                     "bytes)",
                     path, len);
        goto out;
    }
    memcpy(hdr, buf, sizeof hdr);
    if (hdr[0] != SHARD_MAGIC) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: bad magic %d, a token shard starts with %d", path,
                     hdr[0], SHARD_MAGIC);
        goto out;
    }
    if (hdr[1] != 1) {
        rc = SC_ERRF(err, SC_ERR_VERSION,
                     "%s: token shard version %d; supported: 1 (uint16 tokens)", path, hdr[1]);
        goto out;
    }
    if (hdr[2] < 0 || (size_t)hdr[2] * 2 + sizeof hdr != len) {
        rc = SC_ERRF(err, SC_ERR_PARSE,
                     "%s: header says %d tokens (%zu bytes with the header), the file has %zu "
                     "bytes",
                     path, hdr[2], (size_t)(hdr[2] < 0 ? 0 : hdr[2]) * 2 + sizeof hdr, len);
        goto out;
    }
    size_t n = (size_t)hdr[2];
    uint16_t *grown = realloc(d->tokens, (d->ntokens + n) * sizeof *grown + 1);
    if (grown == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading %s", path);
        goto out;
    }
    d->tokens = grown;
    memcpy(d->tokens + d->ntokens, buf + sizeof hdr, n * sizeof *grown);
    for (size_t i = 0; i < n; i++) {
        if (d->tokens[d->ntokens + i] >= d->cfg.classes) {
            rc = SC_ERRF(err, SC_ERR_INVALID,
                         "%s: token %u at position %zu is outside the model's vocabulary of %d",
                         path, d->tokens[d->ntokens + i], i, d->cfg.classes);
            goto out;
        }
    }
    d->ntokens += n;
out:
    free(buf);
    return rc;
}

/* Expands `pattern` (a file, a glob, or for `folder_glob` a folder whose files match it). */
static sc_status expand_paths(const char *pattern, const char *folder_glob, glob_t *g, sc_err *err)
{
    char pat[1100];
    struct stat sb;
    if (folder_glob != NULL && stat(pattern, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(pat, sizeof pat, "%s/%s", pattern, folder_glob);
    else
        sc_strlcpy(pat, pattern, sizeof pat);
    int grc = glob(pat, 0, NULL, g);
    if (grc == GLOB_NOMATCH || (grc == 0 && g->gl_pathc == 0)) {
        globfree(g);
        return SC_ERRF(err, SC_ERR_NOT_FOUND, "%s: no file matches%s", pattern,
                       folder_glob != NULL ? " (a file or a folder of *.bin batches expected)"
                                           : "");
    }
    if (grc != 0) {
        globfree(g);
        return SC_ERRF(err, SC_ERR_IO, "%s: cannot list the files", pattern);
    }
    return SC_OK;
}

static sc_status load_tokens(rt_data *d, sc_err *err)
{
    glob_t g;
    SC_CHECK(expand_paths(d->path, NULL, &g, err));
    sc_status rc = SC_OK;
    for (size_t i = 0; rc == SC_OK && i < g.gl_pathc; i++)
        rc = load_shard(d, g.gl_pathv[i], err);
    globfree(&g);
    return rc;
}

static sc_status load_cifar_file(rt_data *d, const char *path, sc_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    SC_CHECK(read_source(path, &buf, &len, err));
    sc_status rc = SC_OK;
    if (len == 0 || len % CIFAR_RECORD != 0) {
        rc = SC_ERRF(err, SC_ERR_PARSE,
                     "%s: %zu bytes is not a whole number of CIFAR-10 records (1 label byte + "
                     "3072 pixel bytes = 3073 each)",
                     path, len);
        goto out;
    }
    size_t n = len / CIFAR_RECORD;
    for (size_t i = 0; i < n; i++) {
        uint8_t label = (uint8_t)buf[i * CIFAR_RECORD];
        if (label >= CIFAR_CLASSES || label >= d->cfg.classes) {
            rc = SC_ERRF(err, SC_ERR_PARSE, "%s: record %zu has label %u; valid labels are 0..%d",
                         path, i, label,
                         (d->cfg.classes < CIFAR_CLASSES ? d->cfg.classes : CIFAR_CLASSES) - 1);
            goto out;
        }
    }
    uint8_t *grown = realloc(d->records, (d->nrecords + n) * CIFAR_RECORD + 1);
    if (grown == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading %s", path);
        goto out;
    }
    d->records = grown;
    memcpy(d->records + d->nrecords * CIFAR_RECORD, buf, len);
    d->nrecords += n;
out:
    free(buf);
    return rc;
}

static sc_status load_cifar(rt_data *d, sc_err *err)
{
    glob_t g;
    SC_CHECK(expand_paths(d->path, "*.bin", &g, err));
    sc_status rc = SC_OK;
    for (size_t i = 0; rc == SC_OK && i < g.gl_pathc; i++)
        rc = load_cifar_file(d, g.gl_pathv[i], err);
    globfree(&g);
    return rc;
}

/* Checks that the source fits the model before any file is read. */
static sc_status check_fit(const rt_data_cfg *c, sc_err *err)
{
    const char *k = rt_data_kind_name(c->kind);
    if (c->input_elems == 0 || c->targets_per_sample < 1 || c->classes < 1)
        return SC_ERRF(err, SC_ERR_INVALID, "data: the model's sample shape is empty");
    switch (c->kind) {
    case RT_DATA_TEXT:
    case RT_DATA_TOKENS:
        if (!c->inputs_are_tokens || (size_t)c->targets_per_sample != c->input_elems)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "data.kind \"%s\" feeds token models (gpt); this model takes %zu "
                           "floats per sample: use \"cifar10\" or \"synthetic\"",
                           k, c->input_elems);
        if (c->kind == RT_DATA_TEXT && c->classes < 256)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "data.kind \"text\" needs a vocabulary of at least 256 (bytes), the "
                           "model has %d",
                           c->classes);
        break;
    case RT_DATA_CIFAR10:
        if (c->inputs_are_tokens || c->input_elems != CIFAR_PIXELS || c->targets_per_sample != 1)
            return SC_ERRF(err, SC_ERR_INVALID,
                           "data.kind \"cifar10\" needs a classifier over 3x32x32 images (3072 "
                           "inputs), the model takes %zu %s per sample",
                           c->input_elems, c->inputs_are_tokens ? "tokens" : "floats");
        break;
    case RT_DATA_SYNTHETIC:
        break;
    default:
        return SC_ERRF(err, SC_ERR_INVALID, "data: unknown kind %d", (int)c->kind);
    }
    if (c->kind != RT_DATA_SYNTHETIC && (c->path == NULL || c->path[0] == '\0'))
        return SC_ERRF(err, SC_ERR_INVALID, "data.path is required for data.kind \"%s\"", k);
    return SC_OK;
}

sc_status rt_data_new(rt_data **out, const rt_data_cfg *cfg, sc_err *err)
{
    *out = NULL;
    SC_CHECK(check_fit(cfg, err));
    rt_data *d = calloc(1, sizeof *d);
    SC_ALLOC_CHECK(d, err);
    d->cfg = *cfg;
    if (cfg->path != NULL)
        sc_strlcpy(d->path, cfg->path, sizeof d->path);
    d->cfg.path = d->path;
    sc_status rc = SC_OK;
    switch (cfg->kind) {
    case RT_DATA_TEXT:
        rc = load_text(d, err);
        break;
    case RT_DATA_TOKENS:
        rc = load_tokens(d, err);
        break;
    case RT_DATA_CIFAR10:
        rc = load_cifar(d, err);
        break;
    default:
        break;
    }
    if (rc == SC_OK && (cfg->kind == RT_DATA_TEXT || cfg->kind == RT_DATA_TOKENS) &&
        d->ntokens < cfg->input_elems + 1)
        rc = SC_ERRF(err, SC_ERR_INVALID,
                     "%s: %zu tokens, fewer than one sample needs (seq_len %zu + 1)", d->path,
                     d->ntokens, cfg->input_elems);
    if (rc != SC_OK) {
        rt_data_destroy(&d);
        return rc;
    }
    *out = d;
    return SC_OK;
}

void rt_data_destroy(rt_data **dp)
{
    if (dp == NULL || *dp == NULL)
        return;
    free((*dp)->tokens);
    free((*dp)->records);
    free(*dp);
    *dp = NULL;
}

size_t rt_data_size(const rt_data *d)
{
    switch (d->cfg.kind) {
    case RT_DATA_TEXT:
    case RT_DATA_TOKENS:
        return d->ntokens - d->cfg.input_elems;
    case RT_DATA_CIFAR10:
        return d->nrecords;
    default:
        return 0;
    }
}

/* One sample k of `step`: a window of the token stream. */
static void sample_window(const rt_data *d, uint64_t h, int32_t *in, int32_t *tgt)
{
    size_t T = d->cfg.input_elems;
    size_t start = (size_t)(h % (uint64_t)(d->ntokens - T));
    for (size_t t = 0; t < T; t++) {
        if (in != NULL)
            in[t] = d->tokens[start + t];
        if (tgt != NULL)
            tgt[t] = d->tokens[start + t + 1];
    }
}

static void sample_cifar(const rt_data *d, uint64_t h, float *in, int32_t *tgt)
{
    const uint8_t *rec = d->records + (size_t)(h % d->nrecords) * CIFAR_RECORD;
    if (tgt != NULL)
        tgt[0] = rec[0];
    /* Pixels to [-0.5, 0.5]: centred inputs keep the first ReLUs alive. */
    for (size_t j = 0; in != NULL && j < CIFAR_PIXELS; j++)
        in[j] = (float)rec[1 + j] / 255.0f - 0.5f;
}

static void sample_synthetic(const rt_data *d, uint64_t h, void *in, int32_t *tgt)
{
    const rt_data_cfg *c = &d->cfg;
    if (c->inputs_are_tokens) {
        int32_t *x = in;
        int64_t cur = (int64_t)(h % (uint64_t)c->classes);
        for (size_t t = 0; t < c->input_elems; t++) {
            int64_t nxt = (SYN_MUL * cur + SYN_ADD) % c->classes;
            if (x != NULL)
                x[t] = (int32_t)cur;
            if (tgt != NULL && t < (size_t)c->targets_per_sample)
                tgt[t] = (int32_t)nxt;
            cur = nxt;
        }
        return;
    }
    int label = (int)(h % (uint64_t)c->classes);
    for (int t = 0; tgt != NULL && t < c->targets_per_sample; t++)
        tgt[t] = label;
    float *x = in;
    for (size_t j = 0; x != NULL && j < c->input_elems; j++) {
        /* The label marks every classes-th input; uniform noise in [-0.25, 0.25] around it. */
        uint64_t r = mix(h ^ (j * 0x632be59bd9b4e019ull));
        float noise = (float)((double)(r >> 11) / 9007199254740992.0) * 0.5f - 0.25f;
        x[j] = ((j % (size_t)c->classes) == (size_t)label ? 1.0f : 0.0f) + noise;
    }
}

sc_status rt_data_batch(const rt_data *d, uint64_t step, int first, int n, void *inputs,
                        int32_t *targets, sc_err *err)
{
    const rt_data_cfg *c = &d->cfg;
    if (first < 0 || n < 0)
        return SC_ERRF(err, SC_ERR_INVALID, "data: bad sample range [%d, %d)", first, first + n);
    for (int i = 0; i < n; i++) {
        uint64_t h = sample_hash(c->seed, step, (uint64_t)(first + i), (uint64_t)c->kind);
        int32_t *tgt = targets != NULL ? targets + (size_t)i * (size_t)c->targets_per_sample : NULL;
        void *in = NULL;
        if (inputs != NULL)
            in = c->inputs_are_tokens ? (void *)((int32_t *)inputs + (size_t)i * c->input_elems)
                                      : (void *)((float *)inputs + (size_t)i * c->input_elems);
        switch (c->kind) {
        case RT_DATA_TEXT:
        case RT_DATA_TOKENS:
            sample_window(d, h, in, tgt);
            break;
        case RT_DATA_CIFAR10:
            sample_cifar(d, h, in, tgt);
            break;
        default:
            sample_synthetic(d, h, in, tgt);
            break;
        }
    }
    return SC_OK;
}

void rt_data_stream(const rt_data *d, const uint16_t **tokens, size_t *n)
{
    *tokens = d->tokens;
    *n = d->tokens != NULL ? d->ntokens : 0;
}
