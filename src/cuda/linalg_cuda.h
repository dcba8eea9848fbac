/* CUDA linear algebra: our kernels (src/cuda/linalg.cu) used by the cuSOLVER
 * driver (src/cuda/linalg_cusolver.c). All launch on stream s, never sync. */
#ifndef INGOT_CUDA_LINALG_H
#define INGOT_CUDA_LINALG_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "ingot/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The failure key of la_fail_word (src/cuda/linalg_common.h): epoch, then
 * 2^32 - 1 - member (the lowest member wins atomicMax), then a value < 64. */
#define LA_FAIL_VALUE_BITS 6
#define LA_FAIL_EPOCH_SHIFT 38
#define LA_FAIL_EPOCHS (1ull << 26)
#define LA_FAIL_KEY(epoch, b, v)                          \
  (((unsigned long long)(epoch) << LA_FAIL_EPOCH_SHIFT) | \
   ((0xffffffffull - (unsigned long long)(b)) << LA_FAIL_VALUE_BITS) | (unsigned long long)(v))

/* Largest n of the batched in-register inverse. */
#define CUDA_INV_SMALL_MAX 32

/* Inverse of each of `batch` contiguous row-major n x n matrices (n <=
 * CUDA_INV_SMALL_MAX) of dtype dt (f32/f64/c64/c128) by Gauss-Jordan with
 * partial pivoting. A member's status is 0, or the 1-based step of its first
 * zero pivot (LAPACK's getrf info): into info[b] when info is not NULL, and
 * when nonzero into *fail by atomicMax of LA_FAIL_KEY(epoch, b, status). */
cudaError_t cuda_inv_small(int dt, const void *a, void *out, int64_t batch, int n, int *info,
                           unsigned long long *fail, unsigned long long epoch, cudaStream_t s);
/* dst[i] = (int64) src[i] or back, n elements. */
cudaError_t cuda_pivots_i64_to_i32(int32_t *dst, const int64_t *src, int64_t n, cudaStream_t s);
cudaError_t cuda_pivots_i32_to_i64(int64_t *dst, const int32_t *src, int64_t n, cudaStream_t s);
/* dst [batch, m, n] (contiguous) = the column-major m x n matrices of src
 * (element (i, j) at src[b * sb + j * ld + i]), conjugated when conj
 * (complex dt), zero below the diagonal when triu. Needs m <= 32 * 65535. */
cudaError_t cuda_la_transpose(int dt, void *dst, const void *src, int64_t batch, int64_t m,
                              int64_t n, int64_t ld, int64_t sb, int conj, int triu,
                              cudaStream_t s);
/* In place: each of `batch` contiguous members of `elems` elements of dt
 * times 2^(sign * e[b]) (e on the device; exact, any exponent). */
cudaError_t cuda_scale_members(int dt, void *x, int64_t batch, int64_t elems, const int *e,
                               int sign, cudaStream_t s);
/* In place: negate every imaginary part of n complex elements (dt c64/c128). */
cudaError_t cuda_conj_inplace(int dt, void *x, int64_t n, cudaStream_t s);

/* From batch column-major (or row-major: the diagonal is the same) n x n
 * LU factors and their int64 pivots: det into out0 (dt), or, when slog,
 * sign into out0 and log|det| into out1 (the real dtype). */
cudaError_t cuda_det_from_lu(int dt, const void *lu, const int64_t *piv, int64_t batch, int n,
                             int slog, void *out0, void *out1, cudaStream_t s);

/* Permutation matrices P [batch, m, m] (pre-zeroed, dtype dt) with A = P L U
 * from contiguous int32 pivots [batch, k] (1-based, valid); perm is int64
 * scratch of batch * m. */
cudaError_t cuda_lu_perm(int dt, const int32_t *piv, int64_t batch, int m, int k, int64_t *perm,
                         void *P, cudaStream_t s);

/* SVD through gesvd / gesvdp / gesvdj (src/cuda/linalg_svd.c, INGOT_SVD_ALGO). */
ingot_status cuda_linalg_svd(ingot_op_args *a);

/* LSTSQ composed of device ops (src/cuda/linalg_lstsq.c). */
ingot_status cuda_linalg_lstsq(ingot_op_args *a);

void cuda_register_linalg(ingot_backend *be);

#ifdef __cplusplus
}
#endif
#endif
