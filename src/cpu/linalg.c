/* CPU LU family, triangular solves, inverse, determinants and Cholesky
 * through LAPACKE/CBLAS (contracts in src/core/ops_linalg.c). Each batch
 * member is gathered into a column-major buffer, factored, and scattered
 * back; small members run in parallel, one per thread. */
#include <complex.h>
#include <stdlib.h>

#include "lapack.h"
#include "linalg_util.h"

_Static_assert(sizeof(lapack_int) == 4, "pivots are int32");

static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* Element i of a buffer of dt as a complex double, and back. */
static double complex la_getc(ingot_dtype dt, const void *p, int64_t i) {
  switch (dt) {
    case INGOT_F32:
      return ((const float *)p)[i];
    case INGOT_F64:
      return ((const double *)p)[i];
    case INGOT_C64:
      return ((const c64_t *)p)[i];
    default:
      return ((const c128_t *)p)[i];
  }
}

static void la_putc(ingot_dtype dt, void *p, int64_t i, double complex v) {
  switch (dt) {
    case INGOT_F32:
      ((float *)p)[i] = (float)creal(v);
      break;
    case INGOT_F64:
      ((double *)p)[i] = creal(v);
      break;
    case INGOT_C64:
      ((c64_t *)p)[i] = (c64_t)v;
      break;
    default:
      ((c128_t *)p)[i] = v;
      break;
  }
}

/* A la_report for the LU family (what is unused: the message is fixed). */
static ingot_status singular(const la_fail *f, const char *what) {
  (void)what;
  return ingot_set_error(INGOT_ERR_NUMERIC,
                         "batch member %lld: the diagonal element %lld of U is zero, the matrix "
                         "is singular",
                         (long long)f->member, (long long)f->info);
}

/* LU_FACTOR */
static ingot_status k_lu_factor(ingot_op_args *a) {
  la_mat A = la_view(a->in[0], 2), LU = la_view(a->out[0], 2), P = la_view(a->out[1], 1);
  int64_t B = la_batch(&LU), m = A.rows, n = A.cols, lda = imax(1, m);
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (B > 1 && LA_SMALL(m, n))
  for (int64_t b = 0; b < B; b++) {
    void *buf = la_buf(m, n, A.es);
    if (!buf) {
      f.oom = true;
      continue;
    }
    la_load(&A, b, buf, lda, false, false);
    lapack_int info = LA_CALL(A.dt, getrf_work, m, n, buf, lda, (lapack_int *)la_at(&P, b));
    if (info > 0) la_fail_note(&f, b, info);
    la_store(&LU, b, buf, lda, false, false);
    free(buf);
  }
  return la_batch_end(&f, a->iarg[0] ? singular : NULL, NULL);
}

/* Row order of P^T A from LAPACK pivots: perm[i] is the row of A that
 * lands in row i. */
static void pivots_to_perm(const la_mat *P, int64_t b, int64_t m, int64_t *perm) {
  const char *p = la_at(P, b);
  for (int64_t i = 0; i < m; i++) perm[i] = i;
  for (int64_t i = 0; i < P->rows; i++) {
    int64_t j = *(const int32_t *)(p + i * P->rs) - 1, t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

/* Pivots in 1..n (anything else would index out of the matrix). */
static bool pivots_valid(const la_mat *P, int64_t n) {
  int64_t B = la_batch(P);
  for (int64_t b = 0; b < B; b++) {
    const char *p = la_at(P, b);
    for (int64_t i = 0; i < P->rows; i++) {
      int32_t v = *(const int32_t *)(p + i * P->rs);
      if (v < 1 || v > n) return false;
    }
  }
  return true;
}

static ingot_status bad_pivots(void) {
  return ingot_set_error(INGOT_ERR_ARG, "pivots must lie in 1..n (as lu_factor returns them)");
}

/* LU_UNPACK */
static ingot_status k_lu_unpack(ingot_op_args *a) {
  la_mat LU = la_view(a->in[0], 2), Pv = la_view(a->in[1], 1);
  ingot_tensor *Pm = a->out[0], *L = a->out[1], *U = a->out[2];
  int64_t m = LU.rows, n = LU.cols, k = m < n ? m : n, B = la_batch(&LU);
  size_t es = LU.es;
  if (!pivots_valid(&Pv, m)) return bad_pivots();
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)imax(m, 1));
  if (!perm) return la_oom();
  char *pp = tensor_ptr(Pm), *pl = tensor_ptr(L), *pu = tensor_ptr(U);
  la_zero(pp, (size_t)(B * m * m) * es);
  la_zero(pl, (size_t)(B * m * k) * es);
  la_zero(pu, (size_t)(B * k * n) * es);
  for (int64_t b = 0; b < B; b++) {
    const char *src = la_at(&LU, b);
    char *P = pp + b * m * m * (int64_t)es, *Lb = pl + b * m * k * (int64_t)es,
         *Ub = pu + b * k * n * (int64_t)es;
    pivots_to_perm(&Pv, b, m, perm);
    for (int64_t i = 0; i < m; i++) la_putc(LU.dt, P, perm[i] * m + i, 1);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < k && j <= i; j++) {
        if (j == i)
          la_putc(LU.dt, Lb, i * k + j, 1);
        else
          memcpy(Lb + (i * k + j) * (int64_t)es, src + i * LU.rs + j * LU.cs, es);
      }
    for (int64_t i = 0; i < k; i++)
      for (int64_t j = i; j < n; j++)
        memcpy(Ub + (i * n + j) * (int64_t)es, src + i * LU.rs + j * LU.cs, es);
  }
  free(perm);
  return INGOT_OK;
}

/* LU_SOLVE */
static ingot_status k_lu_solve(ingot_op_args *a) {
  la_mat LU = la_view(a->in[0], 2), Pv = la_view(a->in[1], 1), Bm = la_view(a->in[2], 2);
  la_mat X = la_view(a->out[0], 2);
  bool left = a->iarg[0], adjoint = a->iarg[1];
  int64_t n = LU.rows, nb = la_batch(&X), ld = imax(1, n);
  int64_t nrhs = left ? Bm.cols : Bm.rows;
  /* X A = B is A^T X^T = B^T; X A^H = B is A X^H = B^H. */
  bool trans_b = !left, conj_b = !left && adjoint;
  char trans = left ? (adjoint ? 'C' : 'N') : (adjoint ? 'N' : 'T');
  if (!pivots_valid(&Pv, n)) return bad_pivots();
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (nb > 1 && LA_SMALL(n, n))
  for (int64_t b = 0; b < nb; b++) {
    void *lu = la_buf(n, n, LU.es), *x = la_buf(n, nrhs, LU.es);
    lapack_int *piv = malloc(sizeof(lapack_int) * (size_t)imax(n, 1));
    if (lu && x && piv) {
      la_load(&LU, b, lu, ld, false, false);
      la_load(&Bm, b, x, ld, trans_b, conj_b);
      const char *pp = la_at(&Pv, b);
      for (int64_t i = 0; i < n; i++) piv[i] = *(const int32_t *)(pp + i * Pv.rs);
      LA_CALL(LU.dt, getrs_work, trans, n, nrhs, lu, ld, piv, x, ld);
      la_store(&X, b, x, ld, trans_b, conj_b);
    } else {
      f.oom = true;
    }
    free(lu);
    free(x);
    free(piv);
  }
  return la_batch_end(&f, NULL, NULL);
}

/* SOLVE_TRIANGULAR */
static ingot_status k_solve_triangular(ingot_op_args *a) {
  la_mat A = la_view(a->in[0], 2), X = la_view(a->out[0], 2);
  bool upper = a->iarg[0], left = a->iarg[1], unit = a->iarg[2];
  int64_t n = A.rows, nb = la_batch(&X), es = (int64_t)A.es;
  /* X starts as B; CBLAS solves row-major in place, reading a row-major A
   * where it lies and a row-major copy of any other layout. */
  bool in_place = A.cs == es && A.rs % es == 0 && A.rs >= n * es;
  ingot_status st = cpu_copy(a->out[0], a->in[1]);
  if (st != INGOT_OK || X.rows * X.cols == 0) return st;
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (nb > 1 && LA_SMALL(n, n))
  for (int64_t b = 0; b < nb; b++) {
    void *tri = in_place ? NULL : la_buf(n, n, A.es);
    if (!in_place && !tri) {
      f.oom = true;
      continue;
    }
    if (!in_place) la_load(&A, b, tri, imax(1, n), true, false);
    la_trsm(A.dt, left, upper, false, unit, (int)X.rows, (int)X.cols, in_place ? la_at(&A, b) : tri,
            (int)(in_place ? imax(1, A.rs / es) : imax(1, n)), la_at(&X, b), (int)X.cols);
    free(tri);
  }
  return la_batch_end(&f, NULL, NULL);
}

/* INV */
static ingot_status k_inv(ingot_op_args *a) {
  la_mat A = la_view(a->in[0], 2), X = la_view(a->out[0], 2);
  int32_t *infos = a->nout > 1 ? (int32_t *)tensor_ptr(a->out[1]) : NULL;
  int64_t n = A.rows, nb = la_batch(&X), ld = imax(1, n), lwork = imax(1, 64 * n);
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (nb > 1 && LA_SMALL(n, n))
  for (int64_t b = 0; b < nb; b++) {
    void *x = la_buf(n, n, A.es), *work = la_buf(lwork, 1, A.es);
    lapack_int *piv = malloc(sizeof(lapack_int) * (size_t)ld);
    if (x && work && piv) {
      la_load(&A, b, x, ld, false, false);
      lapack_int info = LA_CALL(A.dt, getrf_work, n, n, x, ld, piv);
      if (infos) infos[b] = info;
      if (info > 0)
        la_fail_note(&f, b, info);
      else if (n > 0)
        LA_CALL(A.dt, getri_work, n, x, ld, piv, work, lwork);
      la_store(&X, b, x, ld, false, false);
    } else {
      f.oom = true;
    }
    free(x);
    free(work);
    free(piv);
  }
  return la_batch_end(&f, infos ? NULL : singular, NULL);
}

/* DET: iarg[0] = 0 writes det into out[0]; 1 writes sign into out[0] and
 * log|det| into out[1]. */
static ingot_status k_det(ingot_op_args *a) {
  la_mat A = la_view(a->in[0], 2);
  bool slog = a->iarg[0];
  int64_t n = A.rows, nb = la_batch(&A), ld = imax(1, n);
  ingot_dtype dt = A.dt, rdt = la_real(dt);
  char *o0 = tensor_ptr(a->out[0]), *o1 = slog ? tensor_ptr(a->out[1]) : NULL;
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (nb > 1 && LA_SMALL(n, n))
  for (int64_t b = 0; b < nb; b++) {
    void *x = la_buf(n, n, A.es);
    lapack_int *piv = malloc(sizeof(lapack_int) * (size_t)ld);
    if (!x || !piv) {
      f.oom = true;
      free(x);
      free(piv);
      continue;
    }
    la_load(&A, b, x, ld, false, false);
    if (n > 0) LA_CALL(dt, getrf_work, n, n, x, ld, piv); /* singular: a zero pivot */
    double complex det = 1, sign = 1;
    double logabs = 0;
    for (int64_t i = 0; i < n; i++) {
      double complex d = la_getc(dt, x, i * ld + i);
      if (piv[i] != i + 1) det = -det, sign = -sign;
      det *= d;
      double ad = cabs(d);
      sign *= ad > 0 ? d / ad : d; /* d / |d|; 0 (or NaN) stays */
      logabs += log(ad);
    }
    if (slog) {
      la_putc(dt, o0, b, sign);
      la_putc(rdt, o1, b, logabs);
    } else {
      la_putc(dt, o0, b, det);
    }
    free(x);
    free(piv);
  }
  return la_batch_end(&f, NULL, NULL);
}

/* A la_report for the Cholesky factorization (what is unused). */
static ingot_status not_positive_definite(const la_fail *f, const char *what) {
  (void)what;
  return ingot_set_error(INGOT_ERR_NUMERIC,
                         "batch member %lld: the factorization could not be completed because "
                         "the input is not positive-definite (the leading minor of order "
                         "%lld is not positive-definite)",
                         (long long)f->member, (long long)f->info);
}

/* CHOLESKY: iarg[0] = upper (return L^H). */
static ingot_status k_cholesky(ingot_op_args *a) {
  la_mat A = la_view(a->in[0], 2), X = la_view(a->out[0], 2);
  bool upper = a->iarg[0];
  int64_t n = A.rows, nb = la_batch(&X), ld = imax(1, n);
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (nb > 1 && LA_SMALL(n, n))
  for (int64_t b = 0; b < nb; b++) {
    void *x = la_buf(n, n, A.es);
    if (!x) {
      f.oom = true;
      continue;
    }
    la_load(&A, b, x, ld, false, false);
    lapack_int info = LA_CALL(A.dt, potrf_work, 'L', n, x, ld);
    if (info > 0) la_fail_note(&f, b, info);
    for (int64_t j = 1; j < n; j++) /* clear the strict upper triangle */
      memset((char *)x + j * ld * (int64_t)A.es, 0, (size_t)j * A.es);
    la_store(&X, b, x, ld, upper, upper);
    free(x);
  }
  return la_batch_end(&f, not_positive_definite, NULL);
}

/* CHOLESKY_SOLVE: in[0] = B, in[1] = factor; iarg[0] = upper. */
static ingot_status k_cholesky_solve(ingot_op_args *a) {
  la_mat Bm = la_view(a->in[0], 2), L = la_view(a->in[1], 2), X = la_view(a->out[0], 2);
  char uplo = a->iarg[0] ? 'U' : 'L';
  int64_t n = L.rows, nb = la_batch(&X), ld = imax(1, n);
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (nb > 1 && LA_SMALL(n, n))
  for (int64_t b = 0; b < nb; b++) {
    void *l = la_buf(n, n, L.es), *x = la_buf(n, Bm.cols, L.es);
    if (l && x) {
      la_load(&L, b, l, ld, false, false);
      la_load(&Bm, b, x, ld, false, false);
      LA_CALL(L.dt, potrs_work, uplo, n, Bm.cols, l, ld, x, ld);
      la_store(&X, b, x, ld, false, false);
    } else {
      f.oom = true;
    }
    free(l);
    free(x);
  }
  return la_batch_end(&f, NULL, NULL);
}

void cpu_register_linalg(ingot_backend *be) {
  be->kernels[INGOT_OP_LU_FACTOR] = k_lu_factor;
  be->kernels[INGOT_OP_LU_UNPACK] = k_lu_unpack;
  be->kernels[INGOT_OP_LU_SOLVE] = k_lu_solve;
  be->kernels[INGOT_OP_SOLVE_TRIANGULAR] = k_solve_triangular;
  be->kernels[INGOT_OP_INV] = k_inv;
  be->kernels[INGOT_OP_DET] = k_det;
  be->kernels[INGOT_OP_CHOLESKY] = k_cholesky;
  be->kernels[INGOT_OP_CHOLESKY_SOLVE] = k_cholesky_solve;
}
