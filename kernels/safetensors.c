/*
 * kn safetensors: header parsing and validation, memory-mapped reads with dtype conversion, and
 * the F32 writer. The format has no alignment rule for the data; reads copy element by element
 * through memcpy, so any offset is read correctly.
 */
#include "kernels/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sc_util.h"
#include "kernels/precision.h"

/* A header larger than this is refused as corrupt (real ones are a few hundred KiB at most). */
#define ST_HEADER_MAX ((uint64_t)100 << 20)

typedef struct {
    char path[PATH_MAX];
    uint8_t *map;
    size_t size;     /* file bytes */
    size_t data_off; /* 8 + header length */
} st_shard;

typedef struct {
    char *name;
    int shard;
    kn_st_dtype dtype;
    int ndim;
    int64_t dims[KN_ST_DIMS_MAX];
    uint64_t begin, end; /* in the shard's data */
} st_tensor;

struct kn_st {
    st_shard *shards;
    int nshards;
    st_tensor *tensors;
    size_t ntensors, cap;
};

static const char *const dtype_names[] = {"F32", "F16", "BF16"};
static const size_t dtype_bytes[] = {4, 2, 2};

float kn_st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float kn_st_bf16_to_f32(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

void kn_st_close(kn_st **p)
{
    if (p == NULL || *p == NULL)
        return;
    kn_st *st = *p;
    for (int i = 0; i < st->nshards; i++)
        if (st->shards[i].map != NULL)
            munmap(st->shards[i].map, st->shards[i].size);
    for (size_t i = 0; i < st->ntensors; i++)
        free(st->tensors[i].name);
    free(st->shards);
    free(st->tensors);
    free(st);
    *p = NULL;
}

static st_tensor *find(const kn_st *st, const char *name)
{
    for (size_t i = 0; i < st->ntensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0)
            return &st->tensors[i];
    return NULL;
}

/* One header entry: "name": {"dtype": D, "shape": [...], "data_offsets": [b, e]}. */
static sc_status parse_entry(kn_st *st, int shard, const char *name, json_t *v, uint64_t data_len,
                             sc_err *err)
{
    const char *path = st->shards[shard].path;
    if (!json_is_object(v))
        return SC_ERRF(err, SC_ERR_PARSE, "%s: tensor \"%s\": header entry is not an object", path,
                       name);
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
    json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs) ||
        json_array_size(offs) != 2)
        return SC_ERRF(err, SC_ERR_PARSE,
                       "%s: tensor \"%s\": header entry needs \"dtype\" (string), \"shape\" "
                       "(array) and \"data_offsets\" ([begin, end])",
                       path, name);
    int d = -1;
    for (int k = 0; k < 3; k++)
        if (strcmp(json_string_value(dt), dtype_names[k]) == 0)
            d = k;
    if (d < 0)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED,
                       "%s: tensor \"%s\": dtype %s is not read (valid: F32, F16, BF16)", path,
                       name, json_string_value(dt));
    if (json_array_size(shape) > KN_ST_DIMS_MAX)
        return SC_ERRF(err, SC_ERR_UNSUPPORTED, "%s: tensor \"%s\": %zu dimensions (at most %d)",
                       path, name, json_array_size(shape), KN_ST_DIMS_MAX);
    st_tensor t = {0};
    t.shard = shard;
    t.dtype = (kn_st_dtype)d;
    t.ndim = (int)json_array_size(shape);
    uint64_t count = 1;
    for (int k = 0; k < t.ndim; k++) {
        json_t *e = json_array_get(shape, (size_t)k);
        if (!json_is_integer(e) || json_integer_value(e) < 0 ||
            json_integer_value(e) > ((int64_t)1 << 40))
            return SC_ERRF(err, SC_ERR_PARSE, "%s: tensor \"%s\": shape[%d] is not a size", path,
                           name, k);
        t.dims[k] = json_integer_value(e);
        count *= (uint64_t)t.dims[k];
        if (count > ((uint64_t)1 << 40))
            return SC_ERRF(err, SC_ERR_PARSE, "%s: tensor \"%s\": shape too large", path, name);
    }
    json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b))
        return SC_ERRF(err, SC_ERR_PARSE, "%s: tensor \"%s\": data_offsets are not [begin, end]",
                       path, name);
    t.begin = (uint64_t)json_integer_value(b);
    t.end = (uint64_t)json_integer_value(e);
    if (t.end > data_len)
        return SC_ERRF(err, SC_ERR_PARSE,
                       "%s: tensor \"%s\": data_offsets [%llu, %llu] end past the data (%llu "
                       "bytes after the header): truncated or corrupt file",
                       path, name, (unsigned long long)t.begin, (unsigned long long)t.end,
                       (unsigned long long)data_len);
    if (t.end - t.begin != count * dtype_bytes[d])
        return SC_ERRF(err, SC_ERR_PARSE,
                       "%s: tensor \"%s\": data_offsets span %llu bytes but shape and dtype %s "
                       "need %llu",
                       path, name, (unsigned long long)(t.end - t.begin), dtype_names[d],
                       (unsigned long long)(count * dtype_bytes[d]));
    if (find(st, name) != NULL)
        return SC_ERRF(err, SC_ERR_PARSE, "%s: tensor \"%s\" appears twice in the checkpoint", path,
                       name);
    if (st->ntensors == st->cap) {
        size_t cap = st->cap ? 2 * st->cap : 64;
        st_tensor *n = realloc(st->tensors, cap * sizeof *n);
        SC_ALLOC_CHECK(n, err);
        st->tensors = n;
        st->cap = cap;
    }
    t.name = strdup(name);
    SC_ALLOC_CHECK(t.name, err);
    st->tensors[st->ntensors++] = t;
    return SC_OK;
}

/* Maps shard `i` (its path already set) and parses its header. */
static sc_status open_shard(kn_st *st, int i, sc_err *err)
{
    st_shard *sh = &st->shards[i];
    int fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return SC_ERRF(err, errno == ENOENT ? SC_ERR_NOT_FOUND : SC_ERR_IO, "%s: %s", sh->path,
                       strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return SC_ERRF(err, SC_ERR_IO, "%s: %s", sh->path, strerror(errno));
    }
    if (sb.st_size < 8) {
        close(fd);
        return SC_ERRF(err, SC_ERR_PARSE,
                       "%s: %lld bytes, shorter than the 8-byte header length: truncated file",
                       sh->path, (long long)sb.st_size);
    }
    sh->size = (size_t)sb.st_size;
    void *map = mmap(NULL, sh->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return SC_ERRF(err, SC_ERR_IO, "%s: mmap: %s", sh->path, strerror(errno));
    sh->map = map;
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--)
        hlen = (hlen << 8) | sh->map[k];
    if (hlen > ST_HEADER_MAX || hlen > sh->size - 8)
        return SC_ERRF(err, SC_ERR_PARSE,
                       "%s: header length %llu exceeds the file (%zu bytes): truncated or not a "
                       "safetensors file",
                       sh->path, (unsigned long long)hlen, sh->size);
    sh->data_off = 8 + (size_t)hlen;
    json_error_t je;
    json_t *root = json_loadb((const char *)sh->map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL || !json_is_object(root)) {
        json_decref(root);
        return SC_ERRF(err, SC_ERR_PARSE, "%s: header is not a JSON object (%s)", sh->path,
                       root == NULL ? je.text : "another JSON value");
    }
    const char *name;
    json_t *v;
    sc_status rc = SC_OK;
    json_object_foreach(root, name, v)
    {
        if (strcmp(name, "__metadata__") == 0)
            continue;
        rc = parse_entry(st, i, name, v, sh->size - sh->data_off, err);
        if (rc != SC_OK)
            break;
    }
    json_decref(root);
    return rc;
}

static sc_status st_alloc(kn_st **out, int nshards, sc_err *err)
{
    kn_st *st = calloc(1, sizeof *st);
    SC_ALLOC_CHECK(st, err);
    st->shards = calloc((size_t)nshards, sizeof *st->shards);
    if (st->shards == NULL) {
        free(st);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory opening a checkpoint");
    }
    st->nshards = nshards;
    *out = st;
    return SC_OK;
}

sc_status kn_st_open_file(kn_st **out, const char *path, sc_err *err)
{
    *out = NULL;
    kn_st *st = NULL;
    SC_CHECK(st_alloc(&st, 1, err));
    sc_strlcpy(st->shards[0].path, path, sizeof st->shards[0].path);
    sc_status rc = open_shard(st, 0, err);
    if (rc != SC_OK) {
        kn_st_close(&st);
        return rc;
    }
    *out = st;
    return SC_OK;
}

/* DIR/model.safetensors.index.json: every shard named in "weight_map" is opened once, and every
 * name it maps must be in that shard. */
static sc_status open_index(kn_st **out, const char *dir, const char *index, sc_err *err)
{
    json_error_t je;
    json_t *root = json_load_file(index, 0, &je);
    if (root == NULL)
        return SC_ERRF(err, SC_ERR_PARSE, "%s:%d: %s", index, je.line, je.text);
    sc_status rc = SC_OK;
    kn_st *st = NULL;
    json_t *map = json_object_get(root, "weight_map");
    const char **files = NULL;
    int nfiles = 0;
    if (!json_is_object(map)) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: no \"weight_map\" object (tensor name -> shard file)",
                     index);
        goto done;
    }
    files = calloc(json_object_size(map) + 1, sizeof *files);
    if (files == NULL) {
        rc = SC_ERRF(err, SC_ERR_NOMEM, "out of memory reading %s", index);
        goto done;
    }
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v)
    {
        if (!json_is_string(v) || strchr(json_string_value(v), '/') != NULL) {
            rc = SC_ERRF(err, SC_ERR_PARSE,
                         "%s: weight_map[\"%s\"] must be a shard file name in the same folder",
                         index, name);
            goto done;
        }
        int k = 0;
        while (k < nfiles && strcmp(files[k], json_string_value(v)) != 0)
            k++;
        if (k == nfiles)
            files[nfiles++] = json_string_value(v);
    }
    if (nfiles == 0) {
        rc = SC_ERRF(err, SC_ERR_PARSE, "%s: weight_map is empty", index);
        goto done;
    }
    SC_CHECK_GOTO(st_alloc(&st, nfiles, err), done);
    for (int k = 0; k < nfiles; k++) {
        snprintf(st->shards[k].path, sizeof st->shards[k].path, "%s/%s", dir, files[k]);
        SC_CHECK_GOTO(open_shard(st, k, err), done);
    }
    json_object_foreach(map, name, v)
    {
        const st_tensor *t = find(st, name);
        if (t == NULL ||
            strcmp(st->shards[t->shard].path + strlen(dir) + 1, json_string_value(v)) != 0) {
            rc = SC_ERRF(err, SC_ERR_NOT_FOUND, "%s: tensor \"%s\" is not in its shard %s", index,
                         name, json_string_value(v));
            goto done;
        }
    }
done:
    free(files);
    json_decref(root);
    if (rc != SC_OK)
        kn_st_close(&st);
    *out = st;
    return rc;
}

sc_status kn_st_open(kn_st **out, const char *dir, sc_err *err)
{
    *out = NULL;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) == 0)
        return open_index(out, dir, path, err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (access(path, F_OK) != 0)
        return SC_ERRF(err, SC_ERR_NOT_FOUND,
                       "%s: neither model.safetensors nor model.safetensors.index.json is there "
                       "(a folder as save_pretrained writes it)",
                       dir);
    return kn_st_open_file(out, path, err);
}

bool kn_st_has(const kn_st *st, const char *name)
{
    return find(st, name) != NULL;
}

size_t kn_st_tensor_count(const kn_st *st)
{
    return st->ntensors;
}

const char *kn_st_tensor_name(const kn_st *st, size_t i)
{
    return i < st->ntensors ? st->tensors[i].name : NULL;
}

sc_status kn_st_shape(const kn_st *st, const char *name, int *ndim, int64_t dims[KN_ST_DIMS_MAX],
                      kn_st_dtype *dtype, sc_err *err)
{
    const st_tensor *t = find(st, name);
    if (t == NULL)
        return SC_ERRF(err, SC_ERR_NOT_FOUND, "checkpoint has no tensor \"%s\"", name);
    if (ndim != NULL)
        *ndim = t->ndim;
    if (dims != NULL)
        memcpy(dims, t->dims, sizeof t->dims);
    if (dtype != NULL)
        *dtype = t->dtype;
    return SC_OK;
}

static void shape_str(char *buf, size_t size, int ndim, const int64_t *dims)
{
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int k = 0; k < ndim && n < size; k++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", k ? ", " : "", (long long)dims[k]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

static float element(const uint8_t *p, kn_st_dtype d, uint64_t i)
{
    if (d == KN_ST_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return d == KN_ST_F16 ? kn_st_f16_to_f32(h) : kn_st_bf16_to_f32(h);
}

sc_status kn_st_read(const kn_st *st, const char *name, int ndim, const int64_t *dims,
                     bool transpose, float *out, sc_err *err)
{
    const st_tensor *t = find(st, name);
    if (t == NULL)
        return SC_ERRF(err, SC_ERR_NOT_FOUND, "checkpoint has no tensor \"%s\"", name);
    bool same = t->ndim == ndim;
    for (int k = 0; same && k < ndim; k++)
        same = t->dims[k] == dims[k];
    if (!same) {
        char have[128], want[128];
        shape_str(have, sizeof have, t->ndim, t->dims);
        shape_str(want, sizeof want, ndim, dims);
        return SC_ERRF(err, SC_ERR_INVALID, "%s: tensor \"%s\" has shape %s, the model needs %s",
                       st->shards[t->shard].path, name, have, want);
    }
    const st_shard *sh = &st->shards[t->shard];
    const uint8_t *p = sh->map + sh->data_off + t->begin;
    if (transpose && ndim == 2) {
        int64_t r = dims[0], c = dims[1];
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++)
                out[j * r + i] = element(p, t->dtype, (uint64_t)(i * c + j));
        return SC_OK;
    }
    uint64_t n = (t->end - t->begin) / dtype_bytes[t->dtype];
    if (t->dtype == KN_ST_F32) {
        memcpy(out, p, n * sizeof(float));
        return SC_OK;
    }
    for (uint64_t i = 0; i < n; i++)
        out[i] = element(p, t->dtype, i);
    return SC_OK;
}

/* --- writer --------------------------------------------------------------------------------- */

typedef struct {
    char *name;
    int ndim;
    int64_t dims[KN_ST_DIMS_MAX];
    float *data;
    size_t count;
} wr_tensor;

struct kn_st_writer {
    wr_tensor *t;
    size_t n, cap;
    kn_st_dtype dtype; /* what save writes */
};

void kn_st_writer_set_dtype(kn_st_writer *w, kn_st_dtype dtype)
{
    w->dtype = dtype;
}

size_t kn_st_dtype_bytes(kn_st_dtype dtype)
{
    return dtype_bytes[dtype];
}


sc_status kn_st_writer_new(kn_st_writer **out, sc_err *err)
{
    *out = calloc(1, sizeof **out);
    SC_ALLOC_CHECK(*out, err);
    return SC_OK;
}

void kn_st_writer_destroy(kn_st_writer **p)
{
    if (p == NULL || *p == NULL)
        return;
    for (size_t i = 0; i < (*p)->n; i++) {
        free((*p)->t[i].name);
        free((*p)->t[i].data);
    }
    free((*p)->t);
    free(*p);
    *p = NULL;
}

sc_status kn_st_writer_add(kn_st_writer *w, const char *name, int ndim, const int64_t *dims,
                           const float *data, bool transpose, sc_err *err)
{
    if (ndim < 0 || ndim > KN_ST_DIMS_MAX || (transpose && ndim != 2))
        return SC_ERRF(err, SC_ERR_INVALID, "tensor \"%s\": %d dimensions%s", name, ndim,
                       transpose ? " (a transpose needs 2)" : "");
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        wr_tensor *n = realloc(w->t, cap * sizeof *n);
        SC_ALLOC_CHECK(n, err);
        w->t = n;
        w->cap = cap;
    }
    wr_tensor t = {0};
    t.ndim = ndim;
    t.count = 1;
    for (int k = 0; k < ndim; k++) {
        t.dims[k] = dims[k];
        t.count *= (size_t)dims[k];
    }
    t.name = strdup(name);
    t.data = malloc(t.count * sizeof(float) + 1);
    if (t.name == NULL || t.data == NULL) {
        free(t.name);
        free(t.data);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory adding tensor \"%s\"", name);
    }
    if (transpose) {
        int64_t r = dims[0], c = dims[1]; /* stored (r, c); data holds (c, r) */
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++)
                t.data[i * c + j] = data[j * r + i];
    } else {
        memcpy(t.data, data, t.count * sizeof(float));
    }
    w->t[w->n++] = t;
    return SC_OK;
}

static sc_status write_all(FILE *f, const void *p, size_t n, const char *path, sc_err *err)
{
    if (n > 0 && fwrite(p, 1, n, f) != n)
        return SC_ERRF(err, SC_ERR_IO, "%s: write: %s", path, strerror(errno));
    return SC_OK;
}

/* n floats in the dtype's bytes, little-endian (F32 as they are) */
static sc_status write_values(FILE *f, const float *x, size_t n, kn_st_dtype d, const char *path,
                              sc_err *err)
{
    if (d == KN_ST_F32)
        return write_all(f, x, n * sizeof *x, path, err);
    uint8_t buf[4096];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t h = d == KN_ST_BF16 ? kn_bf16_bits(x[i]) : kn_fp16_bits(x[i]);
        buf[k++] = (uint8_t)h;
        buf[k++] = (uint8_t)(h >> 8);
        if (k == sizeof buf || i + 1 == n) {
            SC_CHECK(write_all(f, buf, k, path, err));
            k = 0;
        }
    }
    return SC_OK;
}

sc_status kn_st_writer_save(kn_st_writer *w, const char *path, sc_err *err)
{
    json_t *root = json_object(), *meta = json_object();
    if (root == NULL || meta == NULL) {
        json_decref(root);
        json_decref(meta);
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing %s", path);
    }
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        json_t *e = json_object(), *shape = json_array();
        json_object_set_new(e, "dtype", json_string(dtype_names[w->dtype]));
        for (int k = 0; k < w->t[i].ndim; k++)
            json_array_append_new(shape, json_integer(w->t[i].dims[k]));
        json_object_set_new(e, "shape", shape);
        uint64_t bytes = (uint64_t)w->t[i].count * dtype_bytes[w->dtype];
        json_object_set_new(e, "data_offsets",
                            json_pack("[I, I]", (json_int_t)off, (json_int_t)(off + bytes)));
        json_object_set_new(root, w->t[i].name, e);
        off += bytes;
    }
    char *hdr = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (hdr == NULL)
        return SC_ERRF(err, SC_ERR_NOMEM, "out of memory writing %s", path);
    size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL) {
        free(hdr);
        return SC_ERRF(err, SC_ERR_IO, "%s: %s", tmp, strerror(errno));
    }
    uint8_t len8[8];
    for (int k = 0; k < 8; k++)
        len8[k] = (uint8_t)((uint64_t)padded >> (8 * k));
    sc_status rc = write_all(f, len8, 8, tmp, err);
    if (rc == SC_OK)
        rc = write_all(f, hdr, hlen, tmp, err);
    for (size_t k = hlen; rc == SC_OK && k < padded; k++)
        rc = write_all(f, " ", 1, tmp, err);
    for (size_t i = 0; rc == SC_OK && i < w->n; i++)
        rc = write_values(f, w->t[i].data, w->t[i].count, w->dtype, tmp, err);
    free(hdr);
    if (fclose(f) != 0 && rc == SC_OK)
        rc = SC_ERRF(err, SC_ERR_IO, "%s: close: %s", tmp, strerror(errno));
    if (rc == SC_OK && rename(tmp, path) != 0)
        rc = SC_ERRF(err, SC_ERR_IO, "rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc != SC_OK)
        unlink(tmp);
    return rc;
}
