/* Linear algebra fronts: QR, Householder products, SVD, Hermitian
 * eigen-decomposition, least squares. These kernels fail on non-finite
 * input ("batch member i: the input contains NaN or infinity").
 *
 * QR: in[0] = A [*, m, n]; iarg[0] = mode (ingot_qr_mode); out[0] = Q
 *   ([*, m, k], [*, m, m], or an unused [0] in R-only mode), out[1] = R.
 * HOUSEHOLDER_PRODUCT: in[0] = A [*, m, n], in[1] = tau [*, k], same batch,
 *   k <= n <= m; out[0] = Q [*, m, n].
 * SVD: in[0] = A [*, m, n]; iarg[0] = compute U and Vh, iarg[1] =
 *   full_matrices; out[0] = S [*, k] (real, descending), out[1] = U, out[2]
 *   = Vh (only when iarg[0]).
 * EIGH: in[0] = A [*, n, n]; iarg[0] = read the upper triangle, iarg[1] =
 *   eigenvectors; out[0] = eigenvalues [*, n] (real, ascending), out[1] =
 *   eigenvectors (only when iarg[1]).
 * LSTSQ: in[0] = A [*, m, n], in[1] = B [*, m, r] (batch broadcast); farg[0]
 *   = rcond (> 0); out[0] = X [*, n, r], out[1] = rank int64 [*], out[2] =
 *   singular values [*, min(m, n)] (real), out[3] = squared residual norms
 *   [*, r] (real; rows n..m of the transformed B, meaningful when m > n and
 *   rank = n). */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "linalg_front.h"

#define LA_DIMS(A)        \
  int nb = (A)->ndim - 2; \
  int64_t m = (A)->shape[nb], n = (A)->shape[nb + 1], k = m < n ? m : n

static ingot_tensor *empty_vec(ingot_dtype dt, ingot_device dev) {
  int64_t zero = 0;
  return tensor_new(1, &zero, dt, dev);
}

ingot_tensor *ingot_linalg_qr(const ingot_tensor *A, ingot_qr_mode mode, ingot_tensor **R) {
  if (R) *R = NULL;
  if (!la_check("qr", A, false)) return NULL;
  if (mode != INGOT_QR_REDUCED && mode != INGOT_QR_COMPLETE && mode != INGOT_QR_R)
    return ingot_fail(INGOT_ERR_ARG, "qr: unknown mode %d", (int)mode);
  LA_DIMS(A);
  int64_t qc = mode == INGOT_QR_COMPLETE ? m : k;
  ingot_op_args a = {.op = INGOT_OP_QR, .nin = 1, .nout = 2, .in = {(ingot_tensor *)A}};
  a.iarg[0] = mode;
  a.out[0] = mode == INGOT_QR_R ? empty_vec(A->dtype, A->device)
                                : la_new(nb, A->shape, 2, (int64_t[]){m, qc}, A->dtype, A->device);
  a.out[1] = la_new(nb, A->shape, 2, (int64_t[]){qc, n}, A->dtype, A->device);
  if (!la_run("qr", &a)) return NULL;
  la_give(a.out[1], R);
  return a.out[0];
}

ingot_tensor *ingot_linalg_householder_product(const ingot_tensor *A, const ingot_tensor *tau) {
  const ingot_tensor *ts[2] = {A, tau};
  if (!check_tensors("householder_product", 2, ts) || !la_check("householder_product", A, false) ||
      !la_same_dtype("householder_product", A, tau))
    return NULL;
  LA_DIMS(A);
  (void)k;
  int64_t kt = tau->ndim ? tau->shape[tau->ndim - 1] : -1;
  if (tau->ndim != A->ndim - 1 || memcmp(tau->shape, A->shape, sizeof(int64_t) * (size_t)nb) ||
      m < n || n < kt)
    return ingot_fail(INGOT_ERR_SHAPE,
                      "householder_product: expected A [*, m, n] and tau [*, k] "
                      "with the same batch dims and k <= n <= m");
  ingot_op_args a = {.op = INGOT_OP_HOUSEHOLDER_PRODUCT,
                     .nin = 2,
                     .nout = 1,
                     .in = {(ingot_tensor *)A, (ingot_tensor *)tau}};
  a.out[0] = tensor_new(A->ndim, A->shape, A->dtype, A->device);
  return la_run("householder_product", &a) ? a.out[0] : NULL;
}

static ingot_tensor *svd_run(const char *op, const ingot_tensor *A, bool uv, bool full,
                             ingot_tensor **U, ingot_tensor **Vh) {
  if (!la_check(op, A, false)) return NULL;
  LA_DIMS(A);
  int64_t ucols = full ? m : k, vrows = full ? n : k;
  ingot_op_args a = {.op = INGOT_OP_SVD, .nin = 1, .nout = uv ? 3 : 1, .in = {(ingot_tensor *)A}};
  a.iarg[0] = uv;
  a.iarg[1] = full;
  a.out[0] = la_new(nb, A->shape, 1, &k, la_real_dtype(A->dtype), A->device);
  if (uv) {
    a.out[1] = la_new(nb, A->shape, 2, (int64_t[]){m, ucols}, A->dtype, A->device);
    a.out[2] = la_new(nb, A->shape, 2, (int64_t[]){vrows, n}, A->dtype, A->device);
  }
  if (!la_run(op, &a)) return NULL;
  if (uv) {
    *U = a.out[1];
    *Vh = a.out[2];
  }
  return a.out[0];
}

ingot_tensor *ingot_linalg_svd(const ingot_tensor *A, bool full_matrices, ingot_tensor **S,
                               ingot_tensor **Vh) {
  if (S) *S = NULL;
  if (Vh) *Vh = NULL;
  ingot_tensor *U, *V, *s = svd_run("svd", A, true, full_matrices, &U, &V);
  if (!s) return NULL;
  la_give(s, S);
  la_give(V, Vh);
  return U;
}

ingot_tensor *ingot_linalg_svdvals(const ingot_tensor *A) {
  return svd_run("svdvals", A, false, false, NULL, NULL);
}

static ingot_tensor *eigh_run(const char *op, const ingot_tensor *A, bool upper, bool vectors,
                              ingot_tensor **V) {
  if (!la_check(op, A, true)) return NULL;
  LA_DIMS(A);
  (void)m;
  (void)k;
  ingot_op_args a = {
      .op = INGOT_OP_EIGH, .nin = 1, .nout = vectors ? 2 : 1, .in = {(ingot_tensor *)A}};
  a.iarg[0] = upper;
  a.iarg[1] = vectors;
  a.out[0] = la_new(nb, A->shape, 1, &n, la_real_dtype(A->dtype), A->device);
  if (vectors) a.out[1] = tensor_new(A->ndim, A->shape, A->dtype, A->device);
  if (!la_run(op, &a)) return NULL;
  if (vectors) la_give(a.out[1], V);
  return a.out[0];
}

ingot_tensor *ingot_linalg_eigh(const ingot_tensor *A, bool upper, ingot_tensor **eigenvectors) {
  if (eigenvectors) *eigenvectors = NULL;
  return eigh_run("eigh", A, upper, true, eigenvectors);
}

ingot_tensor *ingot_linalg_eigvalsh(const ingot_tensor *A, bool upper) {
  return eigh_run("eigvalsh", A, upper, false, NULL);
}

/* True when every rank equals n (reads the ranks to the host). */
static bool all_full_rank(const ingot_tensor *rank, int64_t n) {
  int64_t cnt = ingot_numel(rank);
  int64_t *h = malloc(sizeof(int64_t) * (size_t)(cnt > 0 ? cnt : 1));
  bool full = h && ingot_to_host(rank, h, sizeof(int64_t) * (size_t)cnt) == INGOT_OK;
  for (int64_t i = 0; full && i < cnt; i++) full = h[i] == n;
  free(h);
  return full;
}

ingot_tensor *ingot_linalg_lstsq(const ingot_tensor *A, const ingot_tensor *B, double rcond,
                                 ingot_tensor **residuals, ingot_tensor **rank,
                                 ingot_tensor **singular_values) {
  if (residuals) *residuals = NULL;
  if (rank) *rank = NULL;
  if (singular_values) *singular_values = NULL;
  const ingot_tensor *ts[2] = {A, B};
  if (!check_tensors("lstsq", 2, ts) || !la_check("lstsq", A, false) ||
      !la_check("lstsq", B, false) || !la_same_dtype("lstsq", A, B))
    return NULL;
  LA_DIMS(A);
  if (B->shape[B->ndim - 2] != m)
    return ingot_fail(INGOT_ERR_SHAPE, "lstsq: A has %lld rows but B has %lld", (long long)m,
                      (long long)B->shape[B->ndim - 2]);
  ingot_tensor *Ae, *Be;
  int64_t batch[INGOT_MAX_DIMS];
  if (!la_broadcast("lstsq", A, 2, B, 2, &Ae, &Be, &nb, batch)) return NULL;
  int64_t r = B->shape[B->ndim - 1];
  ingot_dtype rdt = la_real_dtype(A->dtype);
  double eps = rdt == INGOT_F32 ? FLT_EPSILON : DBL_EPSILON;
  ingot_op_args a = {.op = INGOT_OP_LSTSQ, .nin = 2, .nout = 4, .in = {Ae, Be}};
  a.farg[0] = rcond > 0 ? rcond : eps * (double)(m > n ? m : n);
  a.out[0] = la_new(nb, batch, 2, (int64_t[]){n, r}, A->dtype, A->device);
  a.out[1] = la_new(nb, batch, 0, NULL, INGOT_I64, A->device);
  a.out[2] = la_new(nb, batch, 1, &k, rdt, A->device);
  a.out[3] = la_new(nb, batch, 1, &r, rdt, A->device);
  bool ok = la_run("lstsq", &a);
  ingot_release(Ae);
  ingot_release(Be);
  if (!ok) return NULL;
  /* numpy and torch give residuals only when m > n and every member has full rank. */
  if (!(m > n && all_full_rank(a.out[1], n))) {
    ingot_release(a.out[3]);
    a.out[3] = empty_vec(rdt, A->device);
    if (!a.out[3]) {
      for (int o = 0; o < 3; o++) ingot_release(a.out[o]);
      return fail_in("lstsq");
    }
  }
  la_give(a.out[3], residuals);
  la_give(a.out[1], rank);
  la_give(a.out[2], singular_values);
  return a.out[0];
}
