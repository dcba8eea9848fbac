/* Shared plumbing of the CUDA linear-algebra kernels (src/cuda/linalg_common.c),
 * used by linalg_cusolver.c and linalg_svd.c. Row-major Ingot matrices are
 * column-major transposes for cuSOLVER; members of a batch are contiguous. */
#ifndef INGOT_CUDA_LINALG_COMMON_H
#define INGOT_CUDA_LINALG_COMMON_H

#include <cublas_v2.h>
#include <cusolverDn.h>
#include <stdbool.h>

#include "ingot/ingot.h"

/* One op's hold on a device: handles set to the current stream, locked. */
typedef struct la_ctx {
  int dev;
  cudaStream_t s;
  cusolverDnHandle_t sol;
  cublasHandle_t blas;
  cusolverDnParams_t params;
} la_ctx;

/* Device workspace for cuSOLVER plus host workspace. */
typedef struct la_ws {
  void *dev, *host;
  size_t dev_bytes, host_bytes;
} la_ws;

/* cuSOLVER / cuBLAS status to an Ingot error naming `what`. */
ingot_status la_sol_check(cusolverStatus_t st, const char *what);
ingot_status la_blas_check(cublasStatus_t st, const char *what);
/* Lock the device of t and point its handles at the current stream. */
ingot_status la_enter(const ingot_tensor *t, la_ctx *c);
void la_leave(la_ctx *c);
/* The first failing member of a batch without a per-member status read: a
 * kernel on a member that fails does atomicMax(word, LA_FAIL_KEY(epoch, b,
 * value)), so the word holds the lowest failing member of the newest epoch.
 * la_fail_word gives the device's word and a fresh epoch (no memset but on
 * first use and when the epochs wrap); la_fail_read reads it back (8 bytes
 * to pinned memory, a sync). Calls on one device are serialized by la_enter. */
ingot_status la_fail_word(la_ctx *c, unsigned long long **word, unsigned long long *epoch);
ingot_status la_fail_read(la_ctx *c, unsigned long long epoch, int64_t *member, int *value,
                          bool *failed);

/* cuSOLVER's data type of dt; the real dtype of dt (f32 for c64, ...). */
cudaDataType la_type(ingot_dtype dt);
ingot_dtype la_real(ingot_dtype dt);
/* Matrices in the last two dims: batch count, rows, cols. */
void la_dims(const ingot_tensor *t, int64_t *batch, int64_t *rows, int64_t *cols);
/* A fresh contiguous copy of t (never t's own storage: cuSOLVER writes it). */
ingot_tensor *la_fresh_copy(const ingot_tensor *t);
/* A fresh column-major copy of t's matrices (a row-major [*, cols, rows]). */
ingot_tensor *la_colmajor(const ingot_tensor *t);
/* out [*, m, n] (contiguous) = the matrices held column-major in cm. */
ingot_status la_store_colmajor(ingot_tensor *out, const ingot_tensor *cm);
/* The same, conjugated when conj, the part below the diagonal zeroed when
 * triu (one pass: src/cuda/linalg_transpose.cu). */
ingot_status la_transpose_into(ingot_tensor *out, const ingot_tensor *cm, bool conj, bool triu);
/* Address of member b of contiguous t, members of `elems` elements. */
char *la_member(const ingot_tensor *t, int64_t b, int64_t elems);
/* Allocate / free the workspace sized in w (device from the caching allocator). */
ingot_status la_ws_alloc(la_ctx *c, la_ws *w);
void la_ws_free(la_ctx *c, la_ws *w);
/* Read batch infos to the host (a sync); the first nonzero one's member in
 * *member_out and value in *value; false when all are 0. */
bool la_first_failure(la_ctx *c, const int *info, int64_t batch, int64_t *member_out, int *value,
                      ingot_status *st);
/* Device scratch of n elements of es bytes (zeroed when asked). */
void *la_scratch(la_ctx *c, int64_t n, size_t es, bool zero, ingot_status *st);
/* In-place conjugation of a complex tensor's contiguous storage (no-op if real). */
ingot_status la_conj_tensor(la_ctx *c, ingot_tensor *t);
/* Per member: the binary exponent e with max|a_ij| in [2^(e-1), 2^e) (0 for
 * a zero member) read to the host (a sync); fails on non-finite input. */
int *la_member_exponents(const ingot_tensor *A, int64_t batch, ingot_status *st);

#endif
