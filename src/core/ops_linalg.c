/* Linear algebra fronts: LU family, triangular solves, inverse, determinants,
 * Cholesky, conj. Kernels receive matrices in the last two dims with any
 * strides (batch dims broadcast where the op says so, stride 0 allowed) and
 * write fresh contiguous outputs. A kernel that finds a singular member
 * fails with "batch member i: ..." (the first such member); the CUDA
 * kernels that must read cuSOLVER's info to say so synchronize the stream.
 *
 * LU_FACTOR: in[0] = A [*, m, n]; iarg[0] = fail on a zero pivot; out[0] =
 *   LU [*, m, n], out[1] = pivots int32 [*, min(m, n)] (1-based).
 * LU_UNPACK: in[0] = LU, in[1] = pivots; out[0] = P [*, m, m], out[1] = L
 *   [*, m, k], out[2] = U [*, k, n]. Pivots outside 1..m fail.
 * LU_SOLVE: in[0] = LU [*, n, n], in[1] = pivots [*, n], in[2] = B ([*, n, r]
 *   when iarg[0] = left, else [*, r, n]), batch dims broadcast; iarg[1] =
 *   adjoint; out[0] = X (B's shape).
 * SOLVE_TRIANGULAR: in[0] = A [*, n, n], in[1] = B (as LU_SOLVE); iarg[0] =
 *   upper, iarg[1] = left, iarg[2] = unit diagonal; out[0] = X.
 * INV: in[0] = A [*, n, n]; out[0] = inverse; fails on a singular member,
 *   unless nout = 2: then out[1] = int32 [*] gets each member's getrf info
 *   (0, or the 1-based index of the zero pivot; that member's out[0] is
 *   unspecified) and nothing fails (no sync on CUDA).
 * DET: in[0] = A [*, n, n]; iarg[0] = 0: out[0] = det [*]; iarg[0] = 1:
 *   out[0] = sign [*] (A's dtype), out[1] = log|det| [*] (real).
 * CHOLESKY: in[0] = A [*, n, n] (lower triangle read); iarg[0] = upper
 *   (write L^H); out[0] = factor; fails on a non-positive-definite member.
 * CHOLESKY_SOLVE: in[0] = B [*, n, r], in[1] = factor [*, n, n], batch
 *   broadcast; iarg[0] = upper; out[0] = X.
 * CONJ: in[0] = t (any dtype, any strides); out[0] = conj(t). */
#include <string.h>

#include "linalg_front.h"

bool la_check(const char *op, const ingot_tensor *A, bool square) {
  if (!check_tensors(op, 1, &A)) return false;
  ingot_dtype dt = A->dtype;
  if (dt != INGOT_F32 && dt != INGOT_F64 && dt != INGOT_C64 && dt != INGOT_C128) {
    ingot_set_error(INGOT_ERR_DTYPE,
                    "%s: expected a float32, float64, complex64 or complex128 "
                    "tensor, got %s",
                    op, ingot_dtype_name(dt));
    return false;
  }
  if (A->ndim < 2) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: the input must have at least 2 dimensions (got %d)", op,
                    A->ndim);
    return false;
  }
  if (square && A->shape[A->ndim - 1] != A->shape[A->ndim - 2]) {
    ingot_set_error(INGOT_ERR_SHAPE,
                    "%s: a batch of square matrices is required, got %lld by "
                    "%lld matrices",
                    op, (long long)A->shape[A->ndim - 2], (long long)A->shape[A->ndim - 1]);
    return false;
  }
  return true;
}

bool la_same_dtype(const char *op, const ingot_tensor *A, const ingot_tensor *B) {
  if (A->dtype == B->dtype) return true;
  ingot_set_error(INGOT_ERR_DTYPE, "%s: expected both inputs to have one dtype, got %s and %s", op,
                  ingot_dtype_name(A->dtype), ingot_dtype_name(B->dtype));
  return false;
}

ingot_dtype la_real_dtype(ingot_dtype dt) {
  return dt == INGOT_C64 ? INGOT_F32 : dt == INGOT_C128 ? INGOT_F64 : dt;
}

/* t's batch dims expanded to batch (t keeps its last m dims). */
static ingot_tensor *expand_batch(const ingot_tensor *t, int m, int nb, const int64_t *batch) {
  int64_t shape[INGOT_MAX_DIMS];
  if (nb) memcpy(shape, batch, sizeof(int64_t) * (size_t)nb);
  memcpy(shape + nb, t->shape + t->ndim - m, sizeof(int64_t) * (size_t)m);
  return ingot_expand(t, nb + m, shape);
}

bool la_broadcast(const char *op, const ingot_tensor *A, int am, const ingot_tensor *B, int bm,
                  ingot_tensor **Ae, ingot_tensor **Be, int *nbatch, int64_t *batch) {
  int nb;
  int64_t sh[INGOT_MAX_DIMS];
  *Ae = *Be = NULL;
  if (!broadcast_shapes(op, A->ndim - am, A->shape, B->ndim - bm, B->shape, &nb, sh)) return false;
  if (nb + (am > bm ? am : bm) > INGOT_MAX_DIMS) {
    ingot_set_error(INGOT_ERR_SHAPE, "%s: too many dimensions", op);
    return false;
  }
  *Ae = expand_batch(A, am, nb, sh);
  *Be = *Ae ? expand_batch(B, bm, nb, sh) : NULL;
  if (!*Be) {
    ingot_release(*Ae);
    *Ae = NULL;
    fail_in(op);
    return false;
  }
  if (nbatch) *nbatch = nb;
  if (batch) memcpy(batch, sh, sizeof(int64_t) * (size_t)nb);
  return true;
}

ingot_tensor *la_new(int nb, const int64_t *batch, int nt, const int64_t *tail, ingot_dtype dt,
                     ingot_device dev) {
  int64_t shape[INGOT_MAX_DIMS];
  if (nb) memcpy(shape, batch, sizeof(int64_t) * (size_t)nb); /* batch may be NULL then */
  if (nt) memcpy(shape + nb, tail, sizeof(int64_t) * (size_t)nt);
  return tensor_new(nb + nt, shape, dt, dev);
}

bool la_run(const char *op, ingot_op_args *a) {
  bool ok = true;
  for (int o = 0; o < a->nout; o++) ok = ok && a->out[o];
  if (ok && dispatch(a) == INGOT_OK) return true;
  for (int o = 0; o < a->nout; o++) {
    ingot_release(a->out[o]);
    a->out[o] = NULL;
  }
  fail_in(op);
  return false;
}

void la_give(ingot_tensor *t, ingot_tensor **slot) {
  if (slot)
    *slot = t;
  else
    ingot_release(t);
}

/* Dims of A: batch count nb = ndim - 2, rows m, cols n. */
#define LA_DIMS(A)                                                       \
  int nb = (A)->ndim - 2;                                                \
  int64_t m = (A)->shape[nb], n = (A)->shape[nb + 1], k = m < n ? m : n; \
  (void)k

static ingot_tensor *lu_factor(const char *op, const ingot_tensor *A, bool check,
                               ingot_tensor **pivots) {
  LA_DIMS(A);
  ingot_op_args a = {.op = INGOT_OP_LU_FACTOR, .nin = 1, .nout = 2, .in = {(ingot_tensor *)A}};
  a.iarg[0] = check;
  a.out[0] = la_new(nb, A->shape, 2, (int64_t[]){m, n}, A->dtype, A->device);
  a.out[1] = la_new(nb, A->shape, 1, &k, INGOT_I32, A->device);
  if (!la_run(op, &a)) return NULL;
  *pivots = a.out[1];
  return a.out[0];
}

ingot_tensor *ingot_linalg_lu_factor(const ingot_tensor *A, ingot_tensor **pivots) {
  if (pivots) *pivots = NULL;
  if (!la_check("lu_factor", A, false)) return NULL;
  ingot_tensor *piv, *LU = lu_factor("lu_factor", A, true, &piv);
  if (LU) la_give(piv, pivots);
  return LU;
}

ingot_tensor *ingot_linalg_lu(const ingot_tensor *A, ingot_tensor **L, ingot_tensor **U) {
  if (L) *L = NULL;
  if (U) *U = NULL;
  if (!la_check("lu", A, false)) return NULL;
  LA_DIMS(A);
  ingot_tensor *piv, *LU = lu_factor("lu", A, false, &piv);
  if (!LU) return NULL;
  ingot_op_args a = {.op = INGOT_OP_LU_UNPACK, .nin = 2, .nout = 3, .in = {LU, piv}};
  a.out[0] = la_new(nb, A->shape, 2, (int64_t[]){m, m}, A->dtype, A->device);
  a.out[1] = la_new(nb, A->shape, 2, (int64_t[]){m, k}, A->dtype, A->device);
  a.out[2] = la_new(nb, A->shape, 2, (int64_t[]){k, n}, A->dtype, A->device);
  bool ok = la_run("lu", &a);
  ingot_release(LU);
  ingot_release(piv);
  if (!ok) return NULL;
  la_give(a.out[1], L);
  la_give(a.out[2], U);
  return a.out[0];
}

/* B's shape against square A [*, n, n] for a left or right solve. */
static bool rhs_fits(const char *op, const ingot_tensor *A, const ingot_tensor *B, bool left) {
  int64_t n = A->shape[A->ndim - 1];
  if (B->ndim >= 2 && B->shape[B->ndim - (left ? 2 : 1)] == n) return true;
  ingot_set_error(INGOT_ERR_SHAPE,
                  "%s: incompatible shapes of A (n = %lld) and B (%s side needs "
                  "B's %s to be n)",
                  op, (long long)n, left ? "left" : "right", left ? "rows" : "columns");
  return false;
}

/* Run a two-input solve kernel (in[0] = A-like with 2 matrix dims, in[1] =
 * B) with batch broadcasting; extra_in (pivots, 1 matrix dim) goes between. */
static ingot_tensor *solve_like(const char *op, ingot_op_args *a, const ingot_tensor *A,
                                const ingot_tensor *piv, const ingot_tensor *B) {
  ingot_tensor *Ae, *Be, *Pe = NULL;
  int nb;
  int64_t batch[INGOT_MAX_DIMS];
  if (!la_broadcast(op, A, 2, B, 2, &Ae, &Be, &nb, batch)) return NULL;
  if (piv) {
    Pe = expand_batch(piv, 1, nb, batch);
    if (!Pe) {
      ingot_release(Ae);
      ingot_release(Be);
      return fail_in(op);
    }
  }
  int i = 0;
  a->in[i++] = Ae;
  if (Pe) a->in[i++] = Pe;
  a->in[i++] = Be;
  a->nin = i;
  a->nout = 1;
  a->out[0] = la_new(nb, batch, 2, Be->shape + nb, B->dtype, B->device);
  bool ok = la_run(op, a);
  ingot_release(Ae);
  ingot_release(Be);
  ingot_release(Pe);
  return ok ? a->out[0] : NULL;
}

ingot_tensor *ingot_linalg_lu_solve(const ingot_tensor *LU, const ingot_tensor *pivots,
                                    const ingot_tensor *B, bool left, bool adjoint) {
  const ingot_tensor *ts[3] = {LU, pivots, B};
  if (!check_tensors("lu_solve", 3, ts) || !la_check("lu_solve", LU, true) ||
      !la_check("lu_solve", B, false) || !la_same_dtype("lu_solve", LU, B) ||
      !rhs_fits("lu_solve", LU, B, left))
    return NULL;
  int64_t n = LU->shape[LU->ndim - 1];
  if (pivots->dtype != INGOT_I32 || pivots->ndim != LU->ndim - 1 ||
      pivots->shape[pivots->ndim - 1] != n)
    return ingot_fail(INGOT_ERR_SHAPE,
                      "lu_solve: pivots must be int32 of shape [*, n] as "
                      "lu_factor returns them");
  ingot_op_args a = {.op = INGOT_OP_LU_SOLVE};
  a.iarg[0] = left;
  a.iarg[1] = adjoint;
  return solve_like("lu_solve", &a, LU, pivots, B);
}

ingot_tensor *ingot_linalg_solve(const ingot_tensor *A, const ingot_tensor *B, bool left) {
  const ingot_tensor *ts[2] = {A, B};
  if (!check_tensors("solve", 2, ts) || !la_check("solve", A, true) ||
      !la_same_dtype("solve", A, B))
    return NULL;
  /* torch.linalg.solve: B is a vector when 1-D or when it is A's batch of vectors. */
  bool vec =
      left && (B->ndim == 1 || (B->ndim == A->ndim - 1 &&
                                !memcmp(B->shape, A->shape, sizeof(int64_t) * (size_t)B->ndim)));
  ingot_tensor *Bm = vec ? ingot_unsqueeze(B, -1) : ingot_retain((ingot_tensor *)B);
  if (!Bm) return fail_in("solve");
  ingot_tensor *X = NULL, *piv = NULL, *LU = NULL;
  if (la_check("solve", Bm, false) && rhs_fits("solve", A, Bm, left) &&
      (LU = lu_factor("solve", A, true, &piv))) {
    ingot_op_args a = {.op = INGOT_OP_LU_SOLVE};
    a.iarg[0] = left;
    X = solve_like("solve", &a, LU, piv, Bm);
  }
  ingot_release(LU);
  ingot_release(piv);
  ingot_release(Bm);
  if (X && vec) {
    ingot_tensor *x = ingot_squeeze(X, -1);
    ingot_release(X);
    X = x;
  }
  return X;
}

ingot_tensor *ingot_linalg_solve_triangular(const ingot_tensor *A, const ingot_tensor *B,
                                            bool upper, bool left, bool unitriangular) {
  const ingot_tensor *ts[2] = {A, B};
  if (!check_tensors("solve_triangular", 2, ts) || !la_check("solve_triangular", A, true) ||
      !la_check("solve_triangular", B, false) || !la_same_dtype("solve_triangular", A, B) ||
      !rhs_fits("solve_triangular", A, B, left))
    return NULL;
  ingot_op_args a = {.op = INGOT_OP_SOLVE_TRIANGULAR};
  a.iarg[0] = upper;
  a.iarg[1] = left;
  a.iarg[2] = unitriangular;
  return solve_like("solve_triangular", &a, A, NULL, B);
}

ingot_tensor *linalg_inv_ex(const ingot_tensor *A, ingot_tensor **info) {
  if (!la_check("inv", A, true)) return NULL;
  ingot_op_args a = {.op = INGOT_OP_INV, .nin = 1, .nout = 2, .in = {(ingot_tensor *)A}};
  a.out[0] = tensor_new(A->ndim, A->shape, A->dtype, A->device);
  a.out[1] = tensor_new(A->ndim - 2, A->shape, INGOT_I32, A->device);
  if (!la_run("inv", &a)) return NULL;
  *info = a.out[1];
  return a.out[0];
}

ingot_tensor *ingot_linalg_inv(const ingot_tensor *A) {
  if (!la_check("inv", A, true)) return NULL;
  ingot_op_args a = {.op = INGOT_OP_INV, .nin = 1, .nout = 1, .in = {(ingot_tensor *)A}};
  a.out[0] = tensor_new(A->ndim, A->shape, A->dtype, A->device);
  return la_run("inv", &a) ? a.out[0] : NULL;
}

static ingot_tensor *det_run(const char *op, const ingot_tensor *A, bool slog,
                             ingot_tensor **logabsdet) {
  if (!la_check(op, A, true)) return NULL;
  int nb = A->ndim - 2;
  ingot_op_args a = {.op = INGOT_OP_DET, .nin = 1, .nout = slog ? 2 : 1, .in = {(ingot_tensor *)A}};
  a.iarg[0] = slog;
  a.out[0] = tensor_new(nb, A->shape, A->dtype, A->device);
  if (slog) a.out[1] = tensor_new(nb, A->shape, la_real_dtype(A->dtype), A->device);
  if (!la_run(op, &a)) return NULL;
  if (slog) la_give(a.out[1], logabsdet);
  return a.out[0];
}

ingot_tensor *ingot_linalg_det(const ingot_tensor *A) { return det_run("det", A, false, NULL); }

ingot_tensor *ingot_linalg_slogdet(const ingot_tensor *A, ingot_tensor **logabsdet) {
  if (logabsdet) *logabsdet = NULL;
  return det_run("slogdet", A, true, logabsdet);
}

ingot_tensor *ingot_linalg_cholesky(const ingot_tensor *A, bool upper) {
  if (!la_check("cholesky", A, true)) return NULL;
  ingot_op_args a = {.op = INGOT_OP_CHOLESKY, .nin = 1, .nout = 1, .in = {(ingot_tensor *)A}};
  a.iarg[0] = upper;
  a.out[0] = tensor_new(A->ndim, A->shape, A->dtype, A->device);
  return la_run("cholesky", &a) ? a.out[0] : NULL;
}

ingot_tensor *ingot_linalg_cholesky_solve(const ingot_tensor *B, const ingot_tensor *L,
                                          bool upper) {
  const ingot_tensor *ts[2] = {B, L};
  if (!check_tensors("cholesky_solve", 2, ts) || !la_check("cholesky_solve", L, true) ||
      !la_check("cholesky_solve", B, false) || !la_same_dtype("cholesky_solve", L, B) ||
      !rhs_fits("cholesky_solve", L, B, true))
    return NULL;
  ingot_tensor *Be, *Le;
  int nb;
  int64_t batch[INGOT_MAX_DIMS];
  if (!la_broadcast("cholesky_solve", B, 2, L, 2, &Be, &Le, &nb, batch)) return NULL;
  ingot_op_args a = {.op = INGOT_OP_CHOLESKY_SOLVE, .nin = 2, .nout = 1, .in = {Be, Le}};
  a.iarg[0] = upper;
  a.out[0] = la_new(nb, batch, 2, Be->shape + nb, B->dtype, B->device);
  bool ok = la_run("cholesky_solve", &a);
  ingot_release(Be);
  ingot_release(Le);
  return ok ? a.out[0] : NULL;
}

ingot_tensor *ingot_conj(const ingot_tensor *t) {
  if (!check_tensors("conj", 1, &t)) return NULL;
  ingot_op_args a = {.op = INGOT_OP_CONJ, .nin = 1, .nout = 1, .in = {(ingot_tensor *)t}};
  a.out[0] = tensor_new(t->ndim, t->shape, t->dtype, t->device);
  return la_run("conj", &a) ? a.out[0] : NULL;
}
