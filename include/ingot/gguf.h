/* GGUF files (llama.cpp's model format, versions 2 and 3): a validating
 * reader over a read-only mapping of the file. ingot_gguf_open checks every
 * count, length, type, offset and size before anything is handed out, so the
 * accessors never read outside the file. Strings returned without a length
 * out-parameter are NUL-terminated copies owned by the handle; strings with a
 * length point into the mapping and are not NUL-terminated. Everything stays
 * valid until ingot_gguf_close. */
#ifndef INGOT_GGUF_H
#define INGOT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "dtype.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ingot_gguf ingot_gguf;

/* GGUF metadata value types. */
enum {
  INGOT_GGUF_U8 = 0,
  INGOT_GGUF_I8 = 1,
  INGOT_GGUF_U16 = 2,
  INGOT_GGUF_I16 = 3,
  INGOT_GGUF_U32 = 4,
  INGOT_GGUF_I32 = 5,
  INGOT_GGUF_F32 = 6,
  INGOT_GGUF_BOOL = 7,
  INGOT_GGUF_STRING = 8,
  INGOT_GGUF_ARRAY = 9,
  INGOT_GGUF_U64 = 10,
  INGOT_GGUF_I64 = 11,
  INGOT_GGUF_F64 = 12
};

/* mmap path and validate it all; NULL and an INGOT_ERR_IO error naming the
 * file and the problem on failure. */
ingot_gguf *ingot_gguf_open(const char *path);
/* Unmap and free (NULL is ignored). */
void ingot_gguf_close(ingot_gguf *g);
uint32_t ingot_gguf_version(const ingot_gguf *g);

/* ---- metadata ---- */
int64_t ingot_gguf_kv_count(const ingot_gguf *g);
/* Key of entry i (NULL if out of range). */
const char *ingot_gguf_kv_key(const ingot_gguf *g, int64_t i);
/* Index of key; -1 if absent. */
int64_t ingot_gguf_find_kv(const ingot_gguf *g, const char *key);
/* Value type of entry i (INGOT_GGUF_*), -1 if out of range. */
int ingot_gguf_kv_type(const ingot_gguf *g, int64_t i);
/* Any integer type or bool (false if absent, another type, or a u64 above
 * INT64_MAX). */
bool ingot_gguf_get_int(const ingot_gguf *g, const char *key, int64_t *out);
/* f32/f64, or an integer converted. */
bool ingot_gguf_get_float(const ingot_gguf *g, const char *key, double *out);
/* Pointer into the file (not NUL-terminated); NULL if absent or not a string. */
const char *ingot_gguf_get_string(const ingot_gguf *g, const char *key, size_t *len);
/* Element count of an array; -1 if absent or not an array. */
int64_t ingot_gguf_array_len(const ingot_gguf *g, const char *key);
/* Element type of an array (INGOT_GGUF_ARRAY for nested arrays); -1 if none. */
int ingot_gguf_array_type(const ingot_gguf *g, const char *key);
/* Element i of a string array (pointer into the file); NULL if not one. */
const char *ingot_gguf_array_string(const ingot_gguf *g, const char *key, int64_t i, size_t *len);
/* Element i of an integer/bool array (or a float array for _float). */
bool ingot_gguf_array_int(const ingot_gguf *g, const char *key, int64_t i, int64_t *out);
bool ingot_gguf_array_float(const ingot_gguf *g, const char *key, int64_t i, double *out);

/* ---- tensors ---- */
int64_t ingot_gguf_tensor_count(const ingot_gguf *g);
/* Index of the tensor called name; -1 if absent. */
int64_t ingot_gguf_find_tensor(const ingot_gguf *g, const char *name);

typedef struct ingot_gguf_tensor_info {
  const char *name; /* NUL-terminated, owned by g */
  int ndim;
  int64_t ne[4];    /* ggml order: ne[0] is the row length (fastest), unused dims 1 */
  int type;         /* ggml type id (0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 6 Q5_0, 7 Q5_1, 8 Q8_0,
                       12 Q4_K, 13 Q5_K, 14 Q6_K, 30 BF16, ...) */
  const void *data; /* into the mapping; aligned to general.alignment (at most a page) */
  size_t nbytes;
} ingot_gguf_tensor_info;

/* Fill *out for tensor i; false (and an INGOT_ERR_INDEX error) if out of range. */
bool ingot_gguf_tensor_info_get(const ingot_gguf *g, int64_t i, ingot_gguf_tensor_info *out);
/* The tensor dequantised to dt (F32, F16 or BF16) with row-major shape
 * [ne[ndim-1], ..., ne[0]] on dev. */
ingot_tensor *ingot_gguf_load_tensor(const ingot_gguf *g, const char *name, ingot_dtype dt,
                                     ingot_device dev);

#ifdef __cplusplus
}
#endif
#endif
