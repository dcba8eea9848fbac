/* safetensors files and HF checkpoint directories: a validating reader over
 * a read-only mapping. Layout: u64 little-endian header length N, N bytes of
 * JSON {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]},
 * ..., "__metadata__": {"k": "v"}}, then the data section (offsets relative
 * to its start). ingot_safetensors_open checks the header, every dtype,
 * shape and offset (in range, size = numel x dtype size, no overlaps, no
 * duplicate names) so the accessors never read outside the mapping. */
#ifndef INGOT_SAFETENSORS_H
#define INGOT_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "dtype.h"
#include "error.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGOT_SAFETENSORS_MAX_DIMS 8

typedef struct ingot_safetensors ingot_safetensors;

typedef struct ingot_safetensors_info {
  const char *name;       /* NUL-terminated, owned by the file handle */
  ingot_dtype dtype;      /* F32 F16 BF16 F64 F8_E4M3 F8_E5M2 I64 I32 I16 I8 U8 BOOL */
  const char *dtype_name; /* as in the file: "BF16", ... */
  int ndim;
  int64_t shape[INGOT_SAFETENSORS_MAX_DIMS]; /* row-major, outermost first */
  int64_t numel;
  const void *data; /* into the mapping (not necessarily aligned) */
  size_t nbytes;
} ingot_safetensors_info;

/* mmap path and validate it; NULL and an INGOT_ERR_IO error naming the file
 * and the problem on failure. */
ingot_safetensors *ingot_safetensors_open(const char *path);
/* Unmap and free (NULL is ignored). */
void ingot_safetensors_close(ingot_safetensors *st);
int64_t ingot_safetensors_tensor_count(const ingot_safetensors *st);
/* Index of the tensor called name (tensors are sorted by name); -1 if absent. */
int64_t ingot_safetensors_find(const ingot_safetensors *st, const char *name);
/* Fill *out for tensor i; false (and an INGOT_ERR_INDEX error) if out of range. */
bool ingot_safetensors_info_get(const ingot_safetensors *st, int64_t i,
                                ingot_safetensors_info *out);
/* A "__metadata__" value, or NULL. */
const char *ingot_safetensors_metadata(const ingot_safetensors *st, const char *key);
/* The tensor converted to dt (any dtype ingot_cast handles) on dev. */
ingot_tensor *ingot_safetensors_load_tensor(const ingot_safetensors *st, const char *name,
                                            ingot_dtype dt, ingot_device dev);

/* An HF checkpoint directory: model.safetensors, or the shards listed by
 * model.safetensors.index.json ("weight_map": tensor name -> shard file).
 * Every shard is opened and validated and every mapped tensor must be in its
 * shard. Names resolve across shards. */
typedef struct ingot_checkpoint ingot_checkpoint;

ingot_checkpoint *ingot_checkpoint_open_dir(const char *dir);
void ingot_checkpoint_close(ingot_checkpoint *ck);
int64_t ingot_checkpoint_tensor_count(const ingot_checkpoint *ck);
int64_t ingot_checkpoint_shard_count(const ingot_checkpoint *ck);
/* Tensor i in name order; false (INGOT_ERR_INDEX) if out of range. */
bool ingot_checkpoint_info_get(const ingot_checkpoint *ck, int64_t i, ingot_safetensors_info *out);
/* Info of the tensor called name: false if absent (no error is set). */
bool ingot_checkpoint_find(const ingot_checkpoint *ck, const char *name,
                           ingot_safetensors_info *out);
ingot_tensor *ingot_checkpoint_load_tensor(const ingot_checkpoint *ck, const char *name,
                                           ingot_dtype dt, ingot_device dev);

/* ---- writing (src/model/safetensors_write.c) ---- */
typedef struct ingot_safetensors_entry {
  const char *name;
  ingot_dtype dtype; /* one of the dtypes above */
  int ndim;          /* 0..INGOT_SAFETENSORS_MAX_DIMS */
  int64_t shape[INGOT_SAFETENSORS_MAX_DIMS];
} ingot_safetensors_entry;

/* Fill buf with the nbytes (numel x dtype size) of entry i; a non-zero
 * status (with the error set) aborts the write. */
typedef ingot_status (*ingot_safetensors_fill_fn)(int64_t i, void *buf, size_t nbytes, void *user);

/* Write n tensors to path: the header (with "__metadata__" from the n_meta
 * key/value string pairs meta_kv, may be NULL), then each tensor's bytes in
 * entry order, asked from fill one tensor at a time. Goes through
 * "<path>.tmp", renamed at the end: on any error (bad entry, fill failure,
 * disk full) no file is left and the error names the cause. */
ingot_status ingot_safetensors_write(const char *path, const ingot_safetensors_entry *entries,
                                     int64_t n, const char *const *meta_kv, int64_t n_meta,
                                     ingot_safetensors_fill_fn fill, void *user);

#ifdef __cplusplus
}
#endif
#endif
