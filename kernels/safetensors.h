/*
 * kn safetensors: reading and writing the safetensors checkpoint format (Hugging Face's
 * `model.safetensors`, or shards listed by `model.safetensors.index.json`).
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON mapping each tensor's name
 * to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data that follows the
 * header; "__metadata__" holds strings), then the data. Opening parses the headers only and
 * memory-maps each shard read-only, so a reader touches (pages in) only the tensors it copies:
 * a pipeline stage reads its own blocks and nothing else.
 *
 * Not here: what the tensors mean (kernels/hf_model.c maps them onto blocks).
 * Invariant: every tensor of an open checkpoint was checked at open time to lie inside its
 * file, to hold exactly shape-product * dtype-size bytes, and to have a dtype this module reads
 * (F32, F16, BF16); reads convert to float.
 */
#ifndef KN_SAFETENSORS_H
#define KN_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sc_status.h"

#define KN_ST_DIMS_MAX 8

typedef enum { KN_ST_F32 = 0, KN_ST_F16, KN_ST_BF16 } kn_st_dtype;

typedef struct kn_st kn_st;

/* Opens a checkpoint directory: DIR/model.safetensors.index.json ("weight_map": name -> shard
 * file) when present, else DIR/model.safetensors. Errors name the file and the tensor: a
 * truncated file, a header longer than the file, offsets past the end of the data or not
 * matching the shape and dtype, a dtype other than F32/F16/BF16, a tensor the index lists but
 * its shard lacks. */
sc_status kn_st_open(kn_st **out, const char *dir, sc_err *err);
/* Same for one .safetensors file. */
sc_status kn_st_open_file(kn_st **out, const char *path, sc_err *err);
void kn_st_close(kn_st **st);

bool kn_st_has(const kn_st *st, const char *name);
/* The tensors, in header order over the shards: count and the i-th name (borrowed). */
size_t kn_st_tensor_count(const kn_st *st);
const char *kn_st_tensor_name(const kn_st *st, size_t i);
/* Shape of tensor `name` (SC_ERR_NOT_FOUND naming it when absent); dims may be NULL. */
sc_status kn_st_shape(const kn_st *st, const char *name, int *ndim, int64_t dims[KN_ST_DIMS_MAX],
                      kn_st_dtype *dtype, sc_err *err);

/* Copies tensor `name` converted to float into `out`, checking that its shape is exactly
 * dims[0..ndim) (SC_ERR_INVALID naming the tensor, its shape and the one expected). With
 * `transpose` (2-D tensors only) the stored (d0, d1) matrix is written as (d1, d0). */
sc_status kn_st_read(const kn_st *st, const char *name, int ndim, const int64_t *dims,
                     bool transpose, float *out, sc_err *err);

/* Writer: tensors are added in any order (the data is copied), then written as one file (F32
 * unless kn_st_writer_set_dtype says otherwise) with "__metadata__": {"format": "pt"} (what
 * transformers expects). */
typedef struct kn_st_writer kn_st_writer;
sc_status kn_st_writer_new(kn_st_writer **out, sc_err *err);
/* `data` holds the product of dims floats; with `transpose` (2-D) the (d1, d0) matrix in `data`
 * is stored as the (d0, d1) tensor named. */
sc_status kn_st_writer_add(kn_st_writer *w, const char *name, int ndim, const int64_t *dims,
                           const float *data, bool transpose, sc_err *err);
sc_status kn_st_writer_save(kn_st_writer *w, const char *path, sc_err *err);
/* The dtype the tensors are saved in (default F32): F16 and BF16 round each value to nearest,
 * ties to even (kernels/precision.h), as torch's conversion does. */
void kn_st_writer_set_dtype(kn_st_writer *w, kn_st_dtype dtype);
/* Bytes an element of the dtype takes: 4 for F32, 2 for F16 and BF16. */
size_t kn_st_dtype_bytes(kn_st_dtype dtype);
void kn_st_writer_destroy(kn_st_writer **w);

/* Conversions (exposed for tests): IEEE half and bfloat16 to float, exactly. */
float kn_st_f16_to_f32(uint16_t h);
float kn_st_bf16_to_f32(uint16_t b);

#endif /* KN_SAFETENSORS_H */
