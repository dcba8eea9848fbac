/* CUDA linear algebra through cuSOLVER (64-bit generic API) and cuBLAS, plus
 * our batched small-matrix inverse (src/cuda/linalg.cu); the SVD is in
 * linalg_svd.c, the shared plumbing in linalg_common.c. Contracts in
 * src/core/ops_linalg*.c. Row-major Ingot matrices are column-major
 * transposes: inv and the right-hand side of triangular solves use that
 * directly (inv(A^T) = inv(A)^T), the rest work on transposed copies (one
 * tiled transpose kernel each way, src/cuda/linalg_transpose.cu).
 * Batch members run one cuSOLVER call each, on the current stream, with
 * workspace from the caching allocator.
 *
 * Host syncs (cuSOLVER's info must be read to name a failing member):
 * lu_factor (when checking), inv, cholesky, svd and eigh (which also read
 * each member's largest |a_ij| to scale it and to reject non-finite input),
 * lu_solve (validates the pivots on the host). The small inverse reads one
 * 8-byte failure word (la_fail_word), not every member's status.
 * solve_triangular, cholesky_solve, lu (unchecked lu_factor) and conj never
 * sync. qr, householder_product and det/slogdet never sync (NaN propagates
 * there). lu_unpack syncs (its pivot check); lstsq (src/cuda/linalg_lstsq.c)
 * syncs through its SVD. */
#include <cublas_v2.h>
#include <cusolverDn.h>
#include <stdlib.h>

#include "cuda_kernels.h"
#include "ingot/ingot.h"
#include "linalg_common.h"
#include "linalg_cuda.h"

static ingot_status singular(int64_t b, int v) {
  return ingot_set_error(INGOT_ERR_NUMERIC,
                         "batch member %lld: the diagonal element %d of U is "
                         "zero, the matrix is singular",
                         (long long)b, v);
}

/* getrf of every member of the column-major buf (rows m, cols n), pivots
 * (int64, k per member) into piv64 and infos into info. */
static ingot_status getrf_all(la_ctx *c, ingot_tensor *buf, int64_t batch, int64_t m, int64_t n,
                              int64_t *piv64, int *info) {
  ingot_dtype dt = ingot_dtype_of(buf);
  cudaDataType ty = la_type(dt);
  int64_t k = m < n ? m : n, lda = m > 1 ? m : 1;
  la_ws w = {0};
  ingot_status st =
      la_sol_check(cusolverDnXgetrf_bufferSize(c->sol, c->params, m, n, ty, ingot_tensor_data(buf),
                                               lda, ty, &w.dev_bytes, &w.host_bytes),
                   "getrf buffer size");
  if (!st) st = la_ws_alloc(c, &w);
  for (int64_t b = 0; !st && b < batch; b++)
    st = la_sol_check(
        cusolverDnXgetrf(c->sol, c->params, m, n, ty, la_member(buf, b, m * n), lda, piv64 + b * k,
                         ty, w.dev, w.dev_bytes, w.host, w.host_bytes, info + b),
        "getrf");
  la_ws_free(c, &w);
  return st;
}

/* LU_FACTOR */
static ingot_status k_lu_factor(ingot_op_args *a) {
  la_ctx c;
  ingot_status st = la_enter(a->in[0], &c);
  if (st) return st;
  int64_t batch, m, n;
  la_dims(a->in[0], &batch, &m, &n);
  int64_t k = m < n ? m : n;
  ingot_tensor *buf = la_colmajor(a->in[0]);
  int64_t *piv64 = buf ? la_scratch(&c, batch * k, 8, false, &st) : NULL;
  int *info = piv64 ? la_scratch(&c, batch, sizeof(int), false, &st) : NULL; /* getrf sets */
  if (!buf) st = ingot_last_status();
  if (!st && m * n > 0) st = getrf_all(&c, buf, batch, m, n, piv64, info);
  if (!st)
    st = cuda_check(cuda_pivots_i64_to_i32(ingot_tensor_data(a->out[1]), piv64, batch * k, c.s),
                    "pivots");
  if (!st) st = la_store_colmajor(a->out[0], buf);
  int64_t bad;
  int v;
  if (!st && a->iarg[0] && m * n > 0 && la_first_failure(&c, info, batch, &bad, &v, &st))
    st = singular(bad, v);
  if (piv64) cuda_scratch_free(c.dev, piv64, c.s);
  if (info) cuda_scratch_free(c.dev, info, c.s);
  ingot_release(buf);
  la_leave(&c);
  return st;
}

/* Pivots (int32, any strides) as contiguous int64 scratch, checked to lie
 * in 1..n on the host. */
static int64_t *pivots64(la_ctx *c, const ingot_tensor *piv, int64_t n, ingot_status *st) {
  ingot_tensor *p = ingot_contiguous(piv);
  int64_t cnt = ingot_numel(piv);
  int32_t *h = malloc(sizeof(int32_t) * (size_t)(cnt > 0 ? cnt : 1));
  int64_t *d = NULL;
  *st = p && h ? ingot_to_host(p, h, sizeof(int32_t) * (size_t)cnt)
               : ingot_set_error(INGOT_ERR_OOM, "linalg: out of memory");
  for (int64_t i = 0; !*st && i < cnt; i++)
    if (h[i] < 1 || h[i] > n)
      *st = ingot_set_error(INGOT_ERR_ARG, "pivots must lie in 1..n (as lu_factor returns them)");
  if (!*st) d = la_scratch(c, cnt, 8, false, st);
  if (!*st) *st = cuda_check(cuda_pivots_i32_to_i64(d, ingot_tensor_data(p), cnt, c->s), "pivots");
  free(h);
  ingot_release(p);
  return d;
}

/* LU_SOLVE */
static ingot_status k_lu_solve(ingot_op_args *a) {
  la_ctx c;
  ingot_status st = la_enter(a->in[0], &c);
  if (st) return st;
  bool left = a->iarg[0], adjoint = a->iarg[1];
  ingot_tensor *X = a->out[0];
  int64_t batch, n, xr, xc;
  la_dims(a->in[0], &batch, &n, &n);
  la_dims(X, &batch, &xr, &xc);
  ingot_dtype dt = ingot_dtype_of(X);
  bool cplx = dt == INGOT_C64 || dt == INGOT_C128;
  cudaDataType ty = la_type(dt);
  /* left: B column-major; right: B's row-major memory is B^T column-major,
   * X A = B is A^T X^T = B^T and X A^H = B is A X^H = B^H (conjugated). */
  cublasOperation_t op =
      left ? (adjoint ? CUBLAS_OP_C : CUBLAS_OP_N) : (adjoint ? CUBLAS_OP_N : CUBLAS_OP_T);
  int64_t nrhs = left ? xc : xr;
  ingot_tensor *lu = la_colmajor(a->in[0]);
  ingot_tensor *rhs = lu ? (left ? la_colmajor(a->in[2]) : la_fresh_copy(a->in[2])) : NULL;
  if (!rhs) st = ingot_last_status();
  int64_t *piv = st ? NULL : pivots64(&c, a->in[1], n, &st);
  int *info = st ? NULL : la_scratch(&c, batch, sizeof(int), true, &st);
  if (!st && !left && adjoint && cplx)
    st = cuda_check(cuda_conj_inplace(dt, ingot_tensor_data(rhs), ingot_numel(rhs), c.s), "conj");
  for (int64_t b = 0; !st && n > 0 && nrhs > 0 && b < batch; b++)
    st = la_sol_check(cusolverDnXgetrs(c.sol, c.params, op, n, nrhs, ty, la_member(lu, b, n * n), n,
                                       piv + b * n, ty, la_member(rhs, b, n * nrhs), n, info + b),
                      "getrs");
  if (!st && !left && adjoint && cplx)
    st = cuda_check(cuda_conj_inplace(dt, ingot_tensor_data(rhs), ingot_numel(rhs), c.s), "conj");
  if (!st) st = left ? la_store_colmajor(X, rhs) : ingot_copy_(X, rhs);
  if (piv) cuda_scratch_free(c.dev, piv, c.s);
  if (info) cuda_scratch_free(c.dev, info, c.s);
  ingot_release(lu);
  ingot_release(rhs);
  la_leave(&c);
  return st;
}

/* Column-major triangular solve with alpha = 1 on the B buffer. */
static ingot_status trsm(la_ctx *c, ingot_dtype dt, cublasSideMode_t side, cublasFillMode_t uplo,
                         cublasDiagType_t diag, int m, int n, const void *A, int lda, void *B,
                         int ldb) {
  static const float one_f = 1, one_c[2] = {1, 0};
  static const double one_d = 1, one_z[2] = {1, 0};
  cublasOperation_t N = CUBLAS_OP_N;
  switch (dt) {
    case INGOT_F32:
      return la_blas_check(cublasStrsm(c->blas, side, uplo, N, diag, m, n, &one_f, A, lda, B, ldb),
                           "strsm");
    case INGOT_F64:
      return la_blas_check(cublasDtrsm(c->blas, side, uplo, N, diag, m, n, &one_d, A, lda, B, ldb),
                           "dtrsm");
    case INGOT_C64:
      return la_blas_check(
          cublasCtrsm(c->blas, side, uplo, N, diag, m, n, (const cuComplex *)one_c, A, lda, B, ldb),
          "ctrsm");
    default:
      return la_blas_check(cublasZtrsm(c->blas, side, uplo, N, diag, m, n,
                                       (const cuDoubleComplex *)one_z, A, lda, B, ldb),
                           "ztrsm");
  }
}

/* SOLVE_TRIANGULAR: row-major A is column-major A^T (the other triangle) and
 * row-major B is column-major B^T, so A X = B runs as X^T A^T = B^T (side
 * right) and X A = B as A^T X^T = B^T (side left), in place on X. */
static ingot_status k_solve_triangular(ingot_op_args *a) {
  la_ctx c;
  ingot_status st = la_enter(a->in[0], &c);
  if (st) return st;
  bool upper = a->iarg[0], left = a->iarg[1], unit = a->iarg[2];
  ingot_tensor *X = a->out[0];
  int64_t batch, n, xr, xc;
  la_dims(a->in[0], &batch, &n, &n);
  la_dims(X, &batch, &xr, &xc);
  ingot_dtype dt = ingot_dtype_of(X);
  ingot_tensor *A = ingot_contiguous(a->in[0]);
  if (!A) st = ingot_last_status();
  if (!st) st = ingot_copy_(X, a->in[1]);
  cublasFillMode_t uplo = upper ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
  cublasDiagType_t diag = unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
  for (int64_t b = 0; !st && xr * xc > 0 && b < batch; b++) {
    /* column-major X^T is xc x xr with leading dim xc */
    st = trsm(&c, dt, left ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT, uplo, diag, (int)xc, (int)xr,
              la_member(A, b, n * n), (int)n, la_member(X, b, xr * xc), (int)xc);
  }
  ingot_release(A);
  la_leave(&c);
  return st;
}

/* INV of small matrices: one kernel. With out[1], the kernel writes each
 * member's info there (no sync); else only a failing member touches the
 * device's failure word, read back in 8 bytes (one sync, no scratch). */
static ingot_status inv_small(la_ctx *c, ingot_op_args *a, int64_t batch, int64_t n) {
  ingot_tensor *X = a->out[0], *A = ingot_contiguous(a->in[0]);
  bool ex = a->nout > 1;
  unsigned long long *fail = NULL, epoch = 0;
  ingot_status st = A ? INGOT_OK : ingot_last_status();
  if (!st && !ex) st = la_fail_word(c, &fail, &epoch);
  if (!st)
    st = cuda_check(
        cuda_inv_small(ingot_dtype_of(X), ingot_tensor_data(A), ingot_tensor_data(X), batch, (int)n,
                       ex ? ingot_tensor_data(a->out[1]) : NULL, fail, epoch, c->s),
        "inv kernel");
  int64_t bad;
  int v;
  bool failed = false;
  if (!st && !ex) st = la_fail_read(c, epoch, &bad, &v, &failed);
  if (!st && failed) st = singular(bad, v);
  ingot_release(A);
  return st;
}

/* INV: small matrices through our kernel, the rest through getrf + getrs on
 * an identity (column-major inv(A^T) is row-major inv(A)). */
static ingot_status k_inv(ingot_op_args *a) {
  la_ctx c;
  ingot_status st = la_enter(a->in[0], &c);
  if (st) return st;
  ingot_tensor *X = a->out[0];
  int64_t batch, n;
  la_dims(a->in[0], &batch, &n, &n);
  if (batch == 0 || n == 0 || n <= CUDA_INV_SMALL_MAX) {
    st = inv_small(&c, a, batch, n);
    la_leave(&c);
    return st;
  }
  ingot_dtype dt = ingot_dtype_of(X);
  cudaDataType ty = la_type(dt);
  int *info = la_scratch(&c, batch, sizeof(int), true, &st);
  ingot_tensor *lu = st ? NULL : la_fresh_copy(a->in[0]);
  int64_t *piv = lu ? la_scratch(&c, batch * n, 8, false, &st) : NULL;
  int *rs_info = NULL;
  if (!st && !lu) st = ingot_last_status();
  if (!st) st = getrf_all(&c, lu, batch, n, n, piv, info);
  ingot_tensor *eye = st ? NULL : ingot_eye(n, n, dt, ingot_device_of(X));
  if (!st) st = eye ? ingot_copy_(X, eye) : ingot_last_status(); /* broadcasts over batch */
  ingot_release(eye);
  /* getrs reports only argument errors: its infos go past getrf's. */
  rs_info = st ? NULL : la_scratch(&c, batch, sizeof(int), false, &st);
  for (int64_t b = 0; !st && b < batch; b++)
    st = la_sol_check(
        cusolverDnXgetrs(c.sol, c.params, CUBLAS_OP_N, n, n, ty, la_member(lu, b, n * n), n,
                         piv + b * n, ty, la_member(X, b, n * n), n, rs_info + b),
        "getrs");
  int64_t bad;
  int v;
  if (!st && a->nout > 1) /* the caller takes the infos: no check, no sync */
    st = cuda_check(cudaMemcpyAsync(ingot_tensor_data(a->out[1]), info, sizeof(int) * (size_t)batch,
                                    cudaMemcpyDeviceToDevice, c.s),
                    "copy info");
  else if (!st && la_first_failure(&c, info, batch, &bad, &v, &st))
    st = singular(bad, v);
  if (info) cuda_scratch_free(c.dev, info, c.s);
  if (piv) cuda_scratch_free(c.dev, piv, c.s);
  if (rs_info) cuda_scratch_free(c.dev, rs_info, c.s);
  ingot_release(lu);
  la_leave(&c);
  return st;
}

/* CHOLESKY: row-major Hermitian A is column-major conj(A) whose upper
 * triangle is A's lower one; potrf(upper) there gives U' with conj(A) =
 * U'^H U', and row-major U' memory is L = U'^T with A = L L^H. */
static ingot_status k_cholesky(ingot_op_args *a) {
  la_ctx c;
  ingot_status st = la_enter(a->in[0], &c);
  if (st) return st;
  ingot_tensor *X = a->out[0];
  int64_t batch, n;
  la_dims(a->in[0], &batch, &n, &n);
  ingot_dtype dt = ingot_dtype_of(X);
  cudaDataType ty = la_type(dt);
  ingot_tensor *buf = la_fresh_copy(a->in[0]), *L = NULL;
  int *info = buf ? la_scratch(&c, batch, sizeof(int), true, &st) : NULL;
  if (!buf) st = ingot_last_status();
  la_ws w = {0};
  if (!st && n > 0)
    st = la_sol_check(
        cusolverDnXpotrf_bufferSize(c.sol, c.params, CUBLAS_FILL_MODE_UPPER, n, ty,
                                    ingot_tensor_data(buf), n, ty, &w.dev_bytes, &w.host_bytes),
        "potrf buffer size");
  if (!st && n > 0) st = la_ws_alloc(&c, &w);
  for (int64_t b = 0; !st && n > 0 && b < batch; b++)
    st = la_sol_check(
        cusolverDnXpotrf(c.sol, c.params, CUBLAS_FILL_MODE_UPPER, n, ty, la_member(buf, b, n * n),
                         n, ty, w.dev, w.dev_bytes, w.host, w.host_bytes, info + b),
        "potrf");
  la_ws_free(&c, &w);
  if (!st && !(L = ingot_tril(buf, 0))) st = ingot_last_status();
  if (!st && !a->iarg[0]) st = ingot_copy_(X, L);
  if (!st && a->iarg[0]) {
    st = la_store_colmajor(X, L); /* L^T, then conjugated: L^H */
    if (!st) st = la_conj_tensor(&c, X);
  }
  int64_t bad;
  int v;
  if (!st && n > 0 && la_first_failure(&c, info, batch, &bad, &v, &st))
    st = ingot_set_error(INGOT_ERR_NUMERIC,
                         "batch member %lld: the factorization could not be completed because "
                         "the input is not positive-definite (the leading minor of order %d is "
                         "not positive-definite)",
                         (long long)bad, v);
  if (info) cuda_scratch_free(c.dev, info, c.s);
  ingot_release(buf);
  ingot_release(L);
  la_leave(&c);
  return st;
}

/* CHOLESKY_SOLVE: the factor's row-major memory is its column-major
 * transpose, a factor of conj(A) in the other triangle; so solve
 * conj(A) conj(X) = conj(B). */
static ingot_status k_cholesky_solve(ingot_op_args *a) {
  la_ctx c;
  ingot_status st = la_enter(a->in[1], &c);
  if (st) return st;
  ingot_tensor *X = a->out[0];
  int64_t batch, n, r;
  la_dims(X, &batch, &n, &r);
  ingot_dtype dt = ingot_dtype_of(X);
  cudaDataType ty = la_type(dt);
  cublasFillMode_t uplo = a->iarg[0] ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
  ingot_tensor *F = ingot_contiguous(a->in[1]), *rhs = F ? la_colmajor(a->in[0]) : NULL;
  if (!rhs) st = ingot_last_status();
  int *info = st ? NULL : la_scratch(&c, batch, sizeof(int), false, &st);
  if (!st) st = la_conj_tensor(&c, rhs);
  for (int64_t b = 0; !st && n > 0 && r > 0 && b < batch; b++)
    st = la_sol_check(cusolverDnXpotrs(c.sol, c.params, uplo, n, r, ty, la_member(F, b, n * n), n,
                                       ty, la_member(rhs, b, n * r), n, info + b),
                      "potrs");
  if (!st) st = la_conj_tensor(&c, rhs);
  if (!st) st = la_store_colmajor(X, rhs);
  if (info) cuda_scratch_free(c.dev, info, c.s);
  ingot_release(F);
  ingot_release(rhs);
  la_leave(&c);
  return st;
}

/* EIGH: row-major Hermitian A is column-major conj(A) with the triangles
 * swapped: syevd there gives A's eigenvalues and conj of its eigenvectors
 * (column-major), transposed back and conjugated. */
static ingot_status k_eigh(ingot_op_args *a) {
  la_ctx c;
  ingot_status st = la_enter(a->in[0], &c);
  if (st) return st;
  bool vec = a->iarg[1];
  int64_t batch, n;
  la_dims(a->in[0], &batch, &n, &n);
  ingot_dtype dt = ingot_dtype_of(a->in[0]), rdt = la_real(dt);
  cudaDataType ty = la_type(dt), rty = la_type(rdt);
  cublasFillMode_t uplo = a->iarg[0] ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
  cusolverEigMode_t job = vec ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  int *e = n > 0 ? la_member_exponents(a->in[0], batch, &st) : NULL; /* rejects non-finite */
  ingot_tensor *buf = !st && n > 0 ? la_fresh_copy(a->in[0]) : NULL;
  if (!st && n > 0 && !buf) st = ingot_last_status();
  int *info = buf ? la_scratch(&c, batch, sizeof(int), true, &st) : NULL;
  la_ws w = {0};
  if (!st && n > 0)
    st = la_sol_check(cusolverDnXsyevd_bufferSize(
                          c.sol, c.params, job, uplo, n, ty, ingot_tensor_data(buf), n, rty,
                          ingot_tensor_data(a->out[0]), ty, &w.dev_bytes, &w.host_bytes),
                      "syevd buffer size");
  if (!st && n > 0) st = la_ws_alloc(&c, &w);
  for (int64_t b = 0; !st && n > 0 && b < batch; b++)
    st = la_sol_check(cusolverDnXsyevd(c.sol, c.params, job, uplo, n, ty, la_member(buf, b, n * n),
                                       n, rty, la_member(a->out[0], b, n), ty, w.dev, w.dev_bytes,
                                       w.host, w.host_bytes, info + b),
                      "syevd");
  la_ws_free(&c, &w);
  if (!st && vec && n > 0) {
    st = la_store_colmajor(a->out[1], buf);
    if (!st) st = la_conj_tensor(&c, a->out[1]);
  }
  int64_t bad;
  int v;
  if (!st && n > 0 && la_first_failure(&c, info, batch, &bad, &v, &st))
    st = ingot_set_error(INGOT_ERR_NUMERIC, "batch member %lld: syevd did not converge (info %d)",
                         (long long)bad, v);
  if (info) cuda_scratch_free(c.dev, info, c.s);
  free(e);
  ingot_release(buf);
  la_leave(&c);
  return st;
}

/* orgqr / ungqr: the first nq columns of the product of k reflectors held in
 * the column-major m x nq buffer A (in place). */
static ingot_status orgqr(la_ctx *c, ingot_dtype dt, int m, int nq, int k, void *A, const void *tau,
                          int *info) {
  int lwork = 0;
  ingot_status st;
  switch (dt) {
    case INGOT_F32:
      st = la_sol_check(cusolverDnSorgqr_bufferSize(c->sol, m, nq, k, A, m, tau, &lwork),
                        "orgqr size");
      break;
    case INGOT_F64:
      st = la_sol_check(cusolverDnDorgqr_bufferSize(c->sol, m, nq, k, A, m, tau, &lwork),
                        "orgqr size");
      break;
    case INGOT_C64:
      st = la_sol_check(cusolverDnCungqr_bufferSize(c->sol, m, nq, k, A, m, tau, &lwork),
                        "ungqr size");
      break;
    default:
      st = la_sol_check(cusolverDnZungqr_bufferSize(c->sol, m, nq, k, A, m, tau, &lwork),
                        "ungqr size");
      break;
  }
  void *work = st ? NULL : la_scratch(c, lwork, ingot_dtype_size(dt), false, &st);
  if (!st) switch (dt) {
      case INGOT_F32:
        st =
            la_sol_check(cusolverDnSorgqr(c->sol, m, nq, k, A, m, tau, work, lwork, info), "orgqr");
        break;
      case INGOT_F64:
        st =
            la_sol_check(cusolverDnDorgqr(c->sol, m, nq, k, A, m, tau, work, lwork, info), "orgqr");
        break;
      case INGOT_C64:
        st =
            la_sol_check(cusolverDnCungqr(c->sol, m, nq, k, A, m, tau, work, lwork, info), "ungqr");
        break;
      default:
        st =
            la_sol_check(cusolverDnZungqr(c->sol, m, nq, k, A, m, tau, work, lwork, info), "ungqr");
        break;
    }
  if (work) cuda_scratch_free(c->dev, work, c->s);
  return st;
}

/* QR: geqrf on a column-major copy; R is the upper triangle of its first
 * rows; Q from orgqr in place (or in an m x m buffer for complete Q of a
 * tall A), transposed back. NaN propagates (no check, no sync). */
static ingot_status k_qr(ingot_op_args *a) {
  la_ctx c;
  ingot_status st = la_enter(a->in[0], &c);
  if (st) return st;
  int mode = (int)a->iarg[0];
  int64_t batch, m, n;
  la_dims(a->in[0], &batch, &m, &n);
  int64_t k = m < n ? m : n, qc = mode == 1 ? m : k;
  ingot_dtype dt = ingot_dtype_of(a->in[0]);
  size_t es = ingot_dtype_size(dt);
  cudaDataType ty = la_type(dt);
  ingot_tensor *buf = la_colmajor(a->in[0]), *qb = NULL, *rv = NULL;
  char *tau = buf ? la_scratch(&c, batch * k, es, false, &st) : NULL;
  int *info = tau ? la_scratch(&c, batch, sizeof(int), false, &st) : NULL;
  if (!buf) st = ingot_last_status();
  la_ws w = {0};
  if (!st && k > 0)
    st = la_sol_check(cusolverDnXgeqrf_bufferSize(c.sol, c.params, m, n, ty, ingot_tensor_data(buf),
                                                  m, ty, tau, ty, &w.dev_bytes, &w.host_bytes),
                      "geqrf buffer size");
  if (!st && k > 0) st = la_ws_alloc(&c, &w);
  for (int64_t b = 0; !st && k > 0 && b < batch; b++)
    st = la_sol_check(cusolverDnXgeqrf(c.sol, c.params, m, n, ty, la_member(buf, b, m * n), m, ty,
                                       tau + b * k * (int64_t)es, ty, w.dev, w.dev_bytes, w.host,
                                       w.host_bytes, info + b),
                      "geqrf");
  la_ws_free(&c, &w);
  /* R: the upper triangle of rows 0..qc of the factored A (column-major). */
  if (!st) {
    rv = ingot_narrow(buf, -1, 0, mode == 2 ? k : qc);
    st = rv ? la_transpose_into(a->out[1], rv, false, true) : ingot_last_status();
  }
  if (!st && mode != 2 && m > 0 && qc > 0) {
    if (qc <= n) {
      for (int64_t b = 0; !st && b < batch; b++)
        st = orgqr(&c, dt, (int)m, (int)qc, (int)k, la_member(buf, b, m * n),
                   tau + b * k * (int64_t)es, info + b);
      ingot_tensor *qv = st ? NULL : ingot_narrow(buf, -2, 0, qc);
      if (!st) st = qv ? la_store_colmajor(a->out[0], qv) : ingot_last_status();
      ingot_release(qv);
    } else {
      int64_t sh[3] = {batch, m, m};
      qb = ingot_zeros(3, sh, dt, ingot_device_of(buf));
      if (!qb) st = ingot_last_status();
      for (int64_t b = 0; !st && b < batch; b++) {
        st = cuda_check(cudaMemcpyAsync(la_member(qb, b, m * m), la_member(buf, b, m * n),
                                        (size_t)(m * n) * es, cudaMemcpyDeviceToDevice, c.s),
                        "copy");
        if (!st)
          st = orgqr(&c, dt, (int)m, (int)m, (int)k, la_member(qb, b, m * m),
                     tau + b * k * (int64_t)es, info + b);
      }
      ingot_tensor *q3 = st ? NULL : ingot_reshape(a->out[0], 3, sh);
      if (!st) st = q3 ? la_store_colmajor(q3, qb) : ingot_last_status();
      ingot_release(q3);
    }
  }
  if (tau) cuda_scratch_free(c.dev, tau, c.s);
  if (info) cuda_scratch_free(c.dev, info, c.s);
  ingot_release(rv);
  ingot_release(qb);
  ingot_release(buf);
  la_leave(&c);
  return st;
}

/* HOUSEHOLDER_PRODUCT: orgqr in place on a column-major copy of A. */
static ingot_status k_householder(ingot_op_args *a) {
  la_ctx c;
  ingot_status st = la_enter(a->in[0], &c);
  if (st) return st;
  int64_t batch, m, n;
  la_dims(a->in[0], &batch, &m, &n);
  int nd = ingot_ndim(a->in[1]);
  int64_t k = ingot_shape(a->in[1])[nd - 1];
  ingot_dtype dt = ingot_dtype_of(a->in[0]);
  ingot_tensor *buf = la_colmajor(a->in[0]), *tau = buf ? ingot_contiguous(a->in[1]) : NULL;
  int *info = tau ? la_scratch(&c, batch, sizeof(int), false, &st) : NULL;
  if (!tau) st = ingot_last_status();
  for (int64_t b = 0; !st && m > 0 && n > 0 && b < batch; b++)
    st = orgqr(&c, dt, (int)m, (int)n, (int)k, la_member(buf, b, m * n), la_member(tau, b, k),
               info + b);
  if (!st) st = la_store_colmajor(a->out[0], buf);
  if (info) cuda_scratch_free(c.dev, info, c.s);
  ingot_release(tau);
  ingot_release(buf);
  la_leave(&c);
  return st;
}

/* DET: getrf of the row-major buffer (the LU of A^T: same determinant),
 * then one thread per member multiplies the diagonal. No sync. */
static ingot_status k_det(ingot_op_args *a) {
  la_ctx c;
  ingot_status st = la_enter(a->in[0], &c);
  if (st) return st;
  int64_t batch, n;
  la_dims(a->in[0], &batch, &n, &n);
  ingot_dtype dt = ingot_dtype_of(a->in[0]);
  ingot_tensor *buf = la_fresh_copy(a->in[0]);
  int64_t *piv = buf ? la_scratch(&c, batch * n, 8, false, &st) : NULL;
  int *info = piv ? la_scratch(&c, batch, sizeof(int), false, &st) : NULL;
  if (!buf) st = ingot_last_status();
  if (!st && n > 0) st = getrf_all(&c, buf, batch, n, n, piv, info);
  if (!st)
    st = cuda_check(cuda_det_from_lu(dt, ingot_tensor_data(buf), piv, batch, (int)n,
                                     (int)a->iarg[0], ingot_tensor_data(a->out[0]),
                                     a->iarg[0] ? ingot_tensor_data(a->out[1]) : NULL, c.s),
                    "det kernel");
  if (piv) cuda_scratch_free(c.dev, piv, c.s);
  if (info) cuda_scratch_free(c.dev, info, c.s);
  ingot_release(buf);
  la_leave(&c);
  return st;
}

/* LU_UNPACK: P by a small kernel from the pivots (checked on the host: a
 * sync), L and U by tril/triu of views of LU. */
static ingot_status k_lu_unpack(ingot_op_args *a) {
  la_ctx c;
  ingot_status st = la_enter(a->in[0], &c);
  if (st) return st;
  int64_t batch, m, n;
  la_dims(a->in[0], &batch, &m, &n);
  int64_t k = m < n ? m : n;
  ingot_dtype dt = ingot_dtype_of(a->in[0]);
  ingot_tensor *P = a->out[0], *L = a->out[1], *U = a->out[2];
  int64_t *piv64 = pivots64(&c, a->in[1], m, &st); /* validates 1..m */
  ingot_tensor *piv = st ? NULL : ingot_contiguous(a->in[1]);
  int64_t *perm = piv ? la_scratch(&c, batch * m, 8, false, &st) : NULL;
  if (!st && !piv) st = ingot_last_status();
  if (!st)
    st = cuda_check(cudaMemsetAsync(ingot_tensor_data(P), 0,
                                    (size_t)(batch * m * m) * ingot_dtype_size(dt), c.s),
                    "memset");
  if (!st)
    st = cuda_check(cuda_lu_perm(dt, ingot_tensor_data(piv), batch, (int)m, (int)k, perm,
                                 ingot_tensor_data(P), c.s),
                    "lu perm");
  ingot_tensor *lv = st ? NULL : ingot_narrow(a->in[0], -1, 0, k);
  ingot_tensor *lt = lv ? ingot_tril(lv, -1) : NULL;
  ingot_tensor *eye = lt ? ingot_eye(m, k, dt, ingot_device_of(P)) : NULL;
  ingot_tensor *ls = eye ? ingot_add(lt, eye) : NULL;
  ingot_tensor *uv = ls ? ingot_narrow(a->in[0], -2, 0, k) : NULL;
  ingot_tensor *ut = uv ? ingot_triu(uv, 0) : NULL;
  if (!st) st = ut ? ingot_copy_(L, ls) : ingot_last_status();
  if (!st) st = ingot_copy_(U, ut);
  ingot_tensor *tmp[] = {lv, lt, eye, ls, uv, ut, piv};
  for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) ingot_release(tmp[i]);
  if (piv64) cuda_scratch_free(c.dev, piv64, c.s);
  if (perm) cuda_scratch_free(c.dev, perm, c.s);
  la_leave(&c);
  return st;
}

/* CONJ */
static ingot_status k_conj(ingot_op_args *a) {
  ingot_status st = ingot_copy_(a->out[0], a->in[0]);
  ingot_dtype dt = ingot_dtype_of(a->out[0]);
  if (st || (dt != INGOT_C64 && dt != INGOT_C128)) return st;
  int dev = ingot_device_of(a->out[0]).index;
  return cuda_check(cuda_conj_inplace(dt, ingot_tensor_data(a->out[0]), ingot_numel(a->out[0]),
                                      cuda_current_stream(dev)),
                    "conj");
}

void cuda_register_linalg(ingot_backend *be) {
  be->kernels[INGOT_OP_LU_FACTOR] = k_lu_factor;
  be->kernels[INGOT_OP_LU_SOLVE] = k_lu_solve;
  be->kernels[INGOT_OP_SOLVE_TRIANGULAR] = k_solve_triangular;
  be->kernels[INGOT_OP_INV] = k_inv;
  be->kernels[INGOT_OP_CHOLESKY] = k_cholesky;
  be->kernels[INGOT_OP_CHOLESKY_SOLVE] = k_cholesky_solve;
  be->kernels[INGOT_OP_SVD] = cuda_linalg_svd;
  be->kernels[INGOT_OP_EIGH] = k_eigh;
  be->kernels[INGOT_OP_CONJ] = k_conj;
  be->kernels[INGOT_OP_QR] = k_qr;
  be->kernels[INGOT_OP_HOUSEHOLDER_PRODUCT] = k_householder;
  be->kernels[INGOT_OP_DET] = k_det;
  be->kernels[INGOT_OP_LU_UNPACK] = k_lu_unpack;
  be->kernels[INGOT_OP_LSTSQ] = cuda_linalg_lstsq;
}
