/* CPU QR, Householder products, SVD, Hermitian eigen-decomposition, least
 * squares and conj through LAPACKE (contracts in src/core/ops_linalg_decomp.c).
 * These reject non-finite input (LAPACK's results would be garbage). The SVD
 * scales each member by a power of two so that its largest element lies in
 * [0.5, 1) (exact) and falls back from gesdd to gesvd on non-convergence. */
#include <math.h>
#include <stdlib.h>

#include "../core/linalg_svd_qdwh.h"
#include "lapack.h"
#include "linalg_util.h"

static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

/* info of a member whose input had a NaN or infinity. */
#define LA_NONFINITE (-1000000)

/* The error for the first failing member: non-finite input or a LAPACK
 * routine that did not converge. */
static ingot_status member_error(const la_fail *f, const char *what) {
  if (f->info == LA_NONFINITE)
    return ingot_set_error(INGOT_ERR_NUMERIC,
                           "batch member %lld: the input contains NaN or "
                           "infinity",
                           (long long)f->member);
  return ingot_set_error(INGOT_ERR_NUMERIC, "batch member %lld: %s did not converge (info %lld)",
                         (long long)f->member, what, (long long)f->info);
}

/* QR: iarg[0] = mode (0 reduced, 1 complete, 2 r only); out[0] = Q (unused
 * in mode 2), out[1] = R. */
static ingot_status k_qr(ingot_op_args *a) {
  la_mat A = la_view(a->in[0], 2), R = la_view(a->out[1], 2);
  int mode = (int)a->iarg[0];
  la_mat Q = mode == 2 ? A : la_view(a->out[0], 2);
  int64_t m = A.rows, n = A.cols, k = imin(m, n), nb = la_batch(&A), ld = imax(1, m);
  int64_t qc = mode == 1 ? m : k, rr = R.rows;
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (nb > 1 && LA_SMALL(m, n))
  for (int64_t b = 0; b < nb; b++) {
    void *x = la_buf(m, n, A.es), *tau = la_buf(k, 1, A.es), *q = NULL;
    if (!x || !tau || (mode != 2 && !(q = la_buf(m, qc, A.es)))) {
      f.oom = true;
    } else if (!la_finite(&A, b)) {
      la_fail_note(&f, b, LA_NONFINITE);
    } else {
      la_load(&A, b, x, ld, false, false);
      lapack_int info = k > 0 ? LA_CALL(A.dt, geqrf, m, n, x, ld, tau) : 0;
      if (info) la_fail_note(&f, b, info);
      /* R is the upper triangle of the first rr rows. */
      char *r = la_buf(rr, n, A.es);
      if (!r) {
        f.oom = true;
      } else {
        for (int64_t j = 0; j < n; j++)
          for (int64_t i = 0; i <= j && i < imin(rr, m); i++)
            memcpy(r + (i + j * imax(rr, 1)) * (int64_t)A.es,
                   (char *)x + (i + j * ld) * (int64_t)A.es, A.es);
        la_store(&R, b, r, imax(rr, 1), false, false);
        free(r);
      }
      if (q) {
        memcpy(q, x, (size_t)(ld * imin(qc, n)) * A.es);
        if (qc > 0) la_orgqr(A.dt, m, qc, k, q, ld, tau);
        la_store(&Q, b, q, ld, false, false);
      }
    }
    free(x);
    free(tau);
    free(q);
  }
  return la_batch_end(&f, member_error, "geqrf");
}

/* HOUSEHOLDER_PRODUCT: in[0] = A [*, m, n], in[1] = tau [*, k]. */
static ingot_status k_householder(ingot_op_args *a) {
  la_mat A = la_view(a->in[0], 2), T = la_view(a->in[1], 1), Q = la_view(a->out[0], 2);
  int64_t m = A.rows, n = A.cols, k = T.rows, nb = la_batch(&Q), ld = imax(1, m);
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (nb > 1 && LA_SMALL(m, n))
  for (int64_t b = 0; b < nb; b++) {
    void *x = la_buf(m, n, A.es), *tau = la_buf(k, 1, A.es);
    if (!x || !tau) {
      f.oom = true;
    } else if (!la_finite(&A, b) || !la_finite(&T, b)) {
      la_fail_note(&f, b, LA_NONFINITE);
    } else {
      la_load(&A, b, x, ld, false, false);
      la_load(&T, b, tau, imax(k, 1), false, false);
      if (n > 0) la_orgqr(A.dt, m, n, k, x, ld, tau);
      la_store(&Q, b, x, ld, false, false);
    }
    free(x);
    free(tau);
  }
  return la_batch_end(&f, member_error, "orgqr");
}

/* Largest |real or imaginary part| of a column-major buffer of count elements. */
static double max_abs(ingot_dtype dt, const void *x, int64_t count) {
  ingot_dtype rdt = la_real(dt);
  int64_t parts = count * (ingot_dtype_is_complex(dt) ? 2 : 1);
  double mx = 0;
  for (int64_t i = 0; i < parts; i++) {
    double v = fabs(la_getr(rdt, x, i));
    if (v > mx) mx = v;
  }
  return mx;
}

/* Multiply every real component of a buffer by 2^e (exact barring
 * underflow of parts far below the largest, which cannot move the result). */
static void scale_pow2(ingot_dtype dt, void *x, int64_t count, int e) {
  int64_t parts = count * (ingot_dtype_is_complex(dt) ? 2 : 1);
  if (la_real(dt) == INGOT_F64)
    for (int64_t i = 0; i < parts; i++) ((double *)x)[i] = ldexp(((double *)x)[i], e);
  else
    for (int64_t i = 0; i < parts; i++) ((float *)x)[i] = ldexpf(((float *)x)[i], e);
}

/* Identity into a column-major n x n buffer. */
static void set_identity(ingot_dtype dt, void *x, int64_t n) {
  size_t es = ingot_dtype_size(dt);
  memset(x, 0, (size_t)(n * n) * es);
  for (int64_t i = 0; i < n; i++) {
    char *e = (char *)x + (i + i * n) * (int64_t)es;
    if (la_real(dt) == INGOT_F64)
      *(double *)e = 1;
    else
      *(float *)e = 1;
  }
}

/* One member's SVD: a (m x n, ld m) is destroyed; s gets k values. Returns
 * LAPACK's info (> 0: neither gesdd nor gesvd converged). */
static lapack_int svd_member(ingot_dtype dt, int64_t m, int64_t n, void *a, const void *a0, void *s,
                             void *u, void *vt, bool uv, bool full) {
  int64_t k = imin(m, n), ld = imax(1, m), vrows = full ? n : k;
  int64_t ldvt = imax(1, vrows);
  size_t es = ingot_dtype_size(dt);
  char job = !uv ? 'N' : full ? 'A' : 'S';
  lapack_int info = LA_CALL(dt, gesdd, job, m, n, a, ld, s, u, ld, vt, ldvt);
  if (info <= 0) return info;
  /* gesdd's divide and conquer failed: the QR-iteration SVD usually does not. */
  memcpy(a, a0, (size_t)(ld * n) * es);
  void *superb = calloc((size_t)imax(k, 1), sizeof(double));
  if (!superb) return -1;
  info = LA_CALL(dt, gesvd, job, job, m, n, a, ld, s, u, ld, vt, ldvt, superb);
  free(superb);
  return info;
}

/* SVD: iarg[0] = compute U and Vh, iarg[1] = full_matrices; out[0] = S
 * [*, k] (real), out[1] = U, out[2] = Vh. INGOT_SVD_ALGO=qdwh runs QDWH
 * first (src/core/linalg_svd_qdwh.c); gesdd when it declines. */
static ingot_status k_svd(ingot_op_args *a) {
  if (linalg_svd_qdwh_forced() && linalg_svd_qdwh(a)) return INGOT_OK;
  la_mat A = la_view(a->in[0], 2), S = la_view(a->out[0], 1);
  bool uv = a->iarg[0], full = a->iarg[1];
  la_mat U = uv ? la_view(a->out[1], 2) : A, V = uv ? la_view(a->out[2], 2) : A;
  int64_t m = A.rows, n = A.cols, k = imin(m, n), nb = la_batch(&A), ld = imax(1, m);
  int64_t ucols = full ? m : k, vrows = full ? n : k;
  ingot_dtype rdt = la_real(A.dt);
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (nb > 1 && LA_SMALL(m, n))
  for (int64_t b = 0; b < nb; b++) {
    void *x = la_buf(m, n, A.es), *x0 = la_buf(m, n, A.es), *u = NULL, *vt = NULL;
    void *s = la_at(&S, b);
    if (!x || !x0 || (uv && (!(u = la_buf(m, ucols, A.es)) || !(vt = la_buf(vrows, n, A.es))))) {
      f.oom = true;
    } else if (!la_finite(&A, b)) {
      la_fail_note(&f, b, LA_NONFINITE);
    } else if (k == 0) { /* empty: full bases are identities */
      if (uv && full) {
        set_identity(A.dt, u, m);
        set_identity(A.dt, vt, n);
      }
    } else {
      la_load(&A, b, x, ld, false, false);
      int e = 0;
      double mx = max_abs(A.dt, x, m * n);
      if (mx > 0) frexp(mx, &e);
      scale_pow2(A.dt, x, m * n, -e);
      memcpy(x0, x, (size_t)(m * n) * A.es);
      lapack_int info = svd_member(A.dt, m, n, x, x0, s, u, vt, uv, full);
      if (info) la_fail_note(&f, b, info);
      scale_pow2(rdt, s, k, e);
    }
    if (u && !f.oom) {
      la_store(&U, b, u, ld, false, false);
      la_store(&V, b, vt, imax(1, vrows), false, false);
    }
    free(x);
    free(x0);
    free(u);
    free(vt);
  }
  return la_batch_end(&f, member_error, "the SVD (gesdd and gesvd)");
}

/* EIGH: iarg[0] = upper, iarg[1] = eigenvectors; out[0] = eigenvalues
 * [*, n] (real), out[1] = eigenvectors. */
static ingot_status k_eigh(ingot_op_args *a) {
  la_mat A = la_view(a->in[0], 2), W = la_view(a->out[0], 1);
  bool vec = a->iarg[1];
  char uplo = a->iarg[0] ? 'U' : 'L';
  la_mat V = vec ? la_view(a->out[1], 2) : A;
  int64_t n = A.rows, nb = la_batch(&A), ld = imax(1, n);
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (nb > 1 && LA_SMALL(n, n))
  for (int64_t b = 0; b < nb; b++) {
    void *x = la_buf(n, n, A.es);
    if (!x) {
      f.oom = true;
      continue;
    }
    if (!la_finite(&A, b)) {
      la_fail_note(&f, b, LA_NONFINITE);
    } else {
      la_load(&A, b, x, ld, false, false);
      lapack_int info = n > 0 ? la_syevd(A.dt, vec ? 'V' : 'N', uplo, n, x, ld, la_at(&W, b)) : 0;
      if (info) la_fail_note(&f, b, info);
      if (vec) la_store(&V, b, x, ld, false, false);
    }
    free(x);
  }
  return la_batch_end(&f, member_error, "syevd/heevd");
}

/* LSTSQ: in[0] = A [*, m, n], in[1] = B [*, m, r] (batch broadcast); farg[0]
 * = rcond; out[0] = X [*, n, r], out[1] = rank int64 [*], out[2] = singular
 * values [*, min(m, n)] (real), out[3] = squared residual norms [*, r] (real;
 * meaningful when m > n and the rank is n). */
static ingot_status k_lstsq(ingot_op_args *a) {
  la_mat A = la_view(a->in[0], 2), Bm = la_view(a->in[1], 2), X = la_view(a->out[0], 2);
  la_mat S = la_view(a->out[2], 1), Res = la_view(a->out[3], 1);
  int64_t *rank = (int64_t *)tensor_ptr(a->out[1]);
  int64_t m = A.rows, n = A.cols, r = Bm.cols, nb = la_batch(&X);
  int64_t lda = imax(1, m), ldb = imax(1, imax(m, n));
  ingot_dtype rdt = la_real(A.dt);
  double rcond = a->farg[0];
  la_fail f = LA_FAIL_NONE;
#pragma omp parallel for schedule(dynamic) if (nb > 1 && LA_SMALL(m, n))
  for (int64_t b = 0; b < nb; b++) {
    void *x = la_buf(m, n, A.es), *y = la_buf(ldb, r, A.es);
    if (!x || !y) {
      f.oom = true;
    } else if (!la_finite(&A, b) || !la_finite(&Bm, b)) {
      la_fail_note(&f, b, LA_NONFINITE);
    } else {
      la_load(&A, b, x, lda, false, false);
      la_load(&Bm, b, y, ldb, false, false);
      lapack_int rk = 0, info = 0;
      void *sv = la_at(&S, b);
      if (m > 0 && n > 0 && r > 0)
        info = LA_CALL(A.dt, gelsd, m, n, r, x, lda, y, ldb, sv, rcond, &rk);
      else if (m > 0 && n > 0) /* no right-hand sides: only the singular values */
        info = LA_CALL(A.dt, gesdd, 'N', m, n, x, lda, sv, NULL, 1, NULL, 1);
      if (info) la_fail_note(&f, b, info);
      if (r == 0 && m > 0 && n > 0) { /* gelsd's rank rule on gesdd's values */
        double s0 = la_getr(rdt, sv, 0);
        for (int64_t i = 0; i < imin(m, n); i++) rk += la_getr(rdt, sv, i) > rcond * s0;
      }
      rank[b] = rk;
      la_store(&X, b, y, ldb, false, false);
      char *res = la_at(&Res, b);
      bool cplx = ingot_dtype_is_complex(A.dt);
      for (int64_t j = 0; j < r; j++) {
        double acc = 0;
        for (int64_t i = n; i < m; i++)
          for (int q = 0; q < (cplx ? 2 : 1); q++) {
            double v = la_getr(rdt, y, ((i + j * ldb) * (cplx ? 2 : 1)) + q);
            acc += v * v;
          }
        if (rdt == INGOT_F64)
          *(double *)(res + j * Res.rs) = acc;
        else
          *(float *)(res + j * Res.rs) = (float)acc;
      }
    }
    free(x);
    free(y);
  }
  return la_batch_end(&f, member_error, "gelsd");
}

/* CONJ: out[0] = conj(in[0]) (contiguous); real dtypes copy. */
static ingot_status k_conj(ingot_op_args *a) {
  ingot_status st = cpu_copy(a->out[0], a->in[0]);
  if (st != INGOT_OK || !ingot_dtype_is_complex(a->out[0]->dtype)) return st;
  int64_t n = ingot_numel(a->out[0]);
  if (a->out[0]->dtype == INGOT_C64) {
    float *p = (float *)tensor_ptr(a->out[0]);
    for (int64_t i = 0; i < n; i++) p[2 * i + 1] = -p[2 * i + 1];
  } else {
    double *p = (double *)tensor_ptr(a->out[0]);
    for (int64_t i = 0; i < n; i++) p[2 * i + 1] = -p[2 * i + 1];
  }
  return INGOT_OK;
}

void cpu_register_linalg_decomp(ingot_backend *be) {
  be->kernels[INGOT_OP_QR] = k_qr;
  be->kernels[INGOT_OP_HOUSEHOLDER_PRODUCT] = k_householder;
  be->kernels[INGOT_OP_SVD] = k_svd;
  be->kernels[INGOT_OP_EIGH] = k_eigh;
  be->kernels[INGOT_OP_LSTSQ] = k_lstsq;
  be->kernels[INGOT_OP_CONJ] = k_conj;
}
