/* Type-generic calls into LAPACKE (column-major) and CBLAS for the four
 * linear-algebra dtypes: LA_CALL(dt, getrf_work, ...) picks the s/d/c/z
 * routine (pointer arguments travel as void *, which every variant accepts).
 * The _work variants skip LAPACKE's NaN scan so that NaN propagates as in
 * PyTorch; the decompositions that reject non-finite input use the plain ones. */
#ifndef INGOT_CPU_LAPACK_H
#define INGOT_CPU_LAPACK_H

#include <cblas.h>
#include <lapacke.h>

#include "cpu.h"

#define LA_CALL(dt, fn, ...)                                          \
  ((dt) == INGOT_F32   ? LAPACKE_s##fn(LAPACK_COL_MAJOR, __VA_ARGS__) \
   : (dt) == INGOT_F64 ? LAPACKE_d##fn(LAPACK_COL_MAJOR, __VA_ARGS__) \
   : (dt) == INGOT_C64 ? LAPACKE_c##fn(LAPACK_COL_MAJOR, __VA_ARGS__) \
                       : LAPACKE_z##fn(LAPACK_COL_MAJOR, __VA_ARGS__))

/* orgqr (real) / ungqr (complex). */
static inline lapack_int la_orgqr(ingot_dtype dt, lapack_int m, lapack_int n, lapack_int k, void *a,
                                  lapack_int lda, const void *tau) {
  switch (dt) {
    case INGOT_F32:
      return LAPACKE_sorgqr(LAPACK_COL_MAJOR, m, n, k, a, lda, tau);
    case INGOT_F64:
      return LAPACKE_dorgqr(LAPACK_COL_MAJOR, m, n, k, a, lda, tau);
    case INGOT_C64:
      return LAPACKE_cungqr(LAPACK_COL_MAJOR, m, n, k, a, lda, tau);
    default:
      return LAPACKE_zungqr(LAPACK_COL_MAJOR, m, n, k, a, lda, tau);
  }
}

/* syevd (real) / heevd (complex); w is real. */
static inline lapack_int la_syevd(ingot_dtype dt, char jobz, char uplo, lapack_int n, void *a,
                                  lapack_int lda, void *w) {
  switch (dt) {
    case INGOT_F32:
      return LAPACKE_ssyevd(LAPACK_COL_MAJOR, jobz, uplo, n, a, lda, w);
    case INGOT_F64:
      return LAPACKE_dsyevd(LAPACK_COL_MAJOR, jobz, uplo, n, a, lda, w);
    case INGOT_C64:
      return LAPACKE_cheevd(LAPACK_COL_MAJOR, jobz, uplo, n, a, lda, w);
    default:
      return LAPACKE_zheevd(LAPACK_COL_MAJOR, jobz, uplo, n, a, lda, w);
  }
}

/* Row-major triangular solve with alpha = 1 (B, m x n, overwritten by X). */
static inline void la_trsm(ingot_dtype dt, bool left, bool upper, bool trans, bool unit, int m,
                           int n, const void *a, int lda, void *b, int ldb) {
  enum CBLAS_SIDE s = left ? CblasLeft : CblasRight;
  enum CBLAS_UPLO u = upper ? CblasUpper : CblasLower;
  enum CBLAS_TRANSPOSE t = trans ? CblasTrans : CblasNoTrans;
  enum CBLAS_DIAG d = unit ? CblasUnit : CblasNonUnit;
  static const float one_c[2] = {1, 0};
  static const double one_z[2] = {1, 0};
  switch (dt) {
    case INGOT_F32:
      cblas_strsm(CblasRowMajor, s, u, t, d, m, n, 1.0f, a, lda, b, ldb);
      break;
    case INGOT_F64:
      cblas_dtrsm(CblasRowMajor, s, u, t, d, m, n, 1.0, a, lda, b, ldb);
      break;
    case INGOT_C64:
      cblas_ctrsm(CblasRowMajor, s, u, t, d, m, n, one_c, a, lda, b, ldb);
      break;
    default:
      cblas_ztrsm(CblasRowMajor, s, u, t, d, m, n, one_z, a, lda, b, ldb);
      break;
  }
}

/* Element i of a real (f32/f64) buffer as double. */
static inline double la_getr(ingot_dtype real_dt, const void *p, int64_t i) {
  return real_dt == INGOT_F64 ? ((const double *)p)[i] : ((const float *)p)[i];
}

#endif
