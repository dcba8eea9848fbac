/* Linear-algebra functions composed from the decompositions and ordinary
 * ops (so they run wherever those run): pinv, matrix_rank, matrix_norm,
 * cond. Temporaries live in a scope; only the result is kept. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "linalg_front.h"

static const int LAST2[2] = {-2, -1};
static const int LAST1[1] = {-1};

/* The cutoff max(atol, rtol * s_max) [*, 1] from singular values (or
 * |eigenvalues|) s [*, k] >= 0, with torch's defaults for atol, rtol < 0. */
static ingot_tensor *cutoff(const ingot_tensor *s, double atol, double rtol, int64_t m, int64_t n) {
  double eps = la_real_dtype(s->dtype) == INGOT_F32 ? FLT_EPSILON : DBL_EPSILON;
  if (rtol < 0) rtol = atol < 0 ? eps * (double)(m > n ? m : n) : 0;
  if (atol < 0) atol = 0;
  ingot_tensor *smax = ingot_amax(s, LAST1, 1, true);
  return ingot_clamp(ingot_mul_scalar(smax, rtol), atol, INFINITY);
}

/* Singular values (or |eigenvalues| when hermitian) of A; with vectors
 * (hermitian: *L = *R = eigenvectors V, A = V diag(w) V^H; else *L = U, *R =
 * Vh) and the signed values in *w when hermitian. Scope-owned. */
static ingot_tensor *spectrum(const ingot_tensor *A, bool hermitian, ingot_tensor **L,
                              ingot_tensor **R, ingot_tensor **w) {
  if (hermitian) {
    ingot_tensor *V = NULL,
                 *ev = L ? ingot_linalg_eigh(A, false, &V) : ingot_linalg_eigvalsh(A, false);
    if (L) *L = *R = V;
    if (w) *w = ev;
    return ingot_abs(ev);
  }
  if (!L) return ingot_linalg_svdvals(A);
  ingot_tensor *S = NULL;
  *L = ingot_linalg_svd(A, false, &S, R);
  if (w) *w = S;
  return S;
}

/* The conjugate transpose of the last two dims. */
static ingot_tensor *adjoint(const ingot_tensor *t) {
  return ingot_conj(ingot_transpose(t, -2, -1));
}

/* Scope-owned tensor-or-NULL into the enclosing scope. */
static ingot_tensor *finish(const char *op, ingot_tensor *r) {
  if (r) ingot_keep(r);
  ingot_scope_end();
  return r ? r : fail_in(op);
}

ingot_tensor *ingot_linalg_pinv(const ingot_tensor *A, double atol, double rtol, bool hermitian) {
  if (!la_check("pinv", A, hermitian)) return NULL;
  int nb = A->ndim - 2;
  int64_t m = A->shape[nb], n = A->shape[nb + 1];
  if (m == 0 || n == 0) {
    int64_t shape[INGOT_MAX_DIMS];
    memcpy(shape, A->shape, sizeof(int64_t) * (size_t)nb);
    shape[nb] = n;
    shape[nb + 1] = m;
    return ingot_zeros(A->ndim, shape, A->dtype, A->device);
  }
  ingot_scope_begin();
  ingot_tensor *L = NULL, *R = NULL, *w = NULL;
  ingot_tensor *s = spectrum(A, hermitian, &L, &R, &w);
  ingot_tensor *drop = ingot_le(s, cutoff(s, atol, rtol, m, n));
  /* 1/w where kept, 0 where dropped (the inf of 1/0 is overwritten). */
  ingot_tensor *winv = ingot_unsqueeze(ingot_masked_fill(ingot_reciprocal(w), drop, 0), -2);
  ingot_tensor *scaled = ingot_mul(L, winv);
  /* hermitian: V diag(1/w) V^H; else (U diag(1/s) Vh)^H = V diag(1/s) U^H. */
  ingot_tensor *r = hermitian ? ingot_matmul(scaled, adjoint(R)) : adjoint(ingot_matmul(scaled, R));
  return finish("pinv", r);
}

ingot_tensor *ingot_linalg_matrix_rank(const ingot_tensor *A, double atol, double rtol,
                                       bool hermitian) {
  if (!la_check("matrix_rank", A, hermitian)) return NULL;
  int nb = A->ndim - 2;
  int64_t m = A->shape[nb], n = A->shape[nb + 1];
  if (m == 0 || n == 0) return ingot_zeros(nb, A->shape, INGOT_I64, A->device);
  ingot_scope_begin();
  ingot_tensor *s = spectrum(A, hermitian, NULL, NULL, NULL);
  ingot_tensor *kept = ingot_gt(s, cutoff(s, atol, rtol, m, n));
  return finish("matrix_rank", ingot_cast(ingot_sum(kept, LAST1, 1, false), INGOT_I64));
}

/* Which norm an ord string names. */
typedef enum { ORD_FRO, ORD_NUC, ORD_INF, ORD_NINF, ORD_1, ORD_N1, ORD_2, ORD_N2, ORD_BAD } ord_t;

static ord_t parse_ord(const char *ord, ord_t dflt) {
  if (!ord) return dflt;
  static const char *names[] = {"fro", "nuc", "inf", "-inf", "1", "-1", "2", "-2"};
  for (int i = 0; i < ORD_BAD; i++)
    if (!strcmp(ord, names[i])) return (ord_t)i;
  return ORD_BAD;
}

static ingot_tensor *norm_of(const ingot_tensor *A, ord_t o, bool keepdim) {
  ingot_tensor *r;
  switch (o) {
    case ORD_FRO:
      return ingot_norm(A, 2, LAST2, 2, keepdim);
    case ORD_NUC:
      r = ingot_sum(ingot_linalg_svdvals(A), LAST1, 1, false);
      break;
    case ORD_2:
      r = ingot_amax(ingot_linalg_svdvals(A), LAST1, 1, false);
      break;
    case ORD_N2:
      r = ingot_amin(ingot_linalg_svdvals(A), LAST1, 1, false);
      break;
    default: {
      /* 1 / -1: max / min column sum of |a|; inf / -inf: the same over rows. */
      bool cols = o == ORD_1 || o == ORD_N1, mx = o == ORD_1 || o == ORD_INF;
      const int sd[1] = {cols ? -2 : -1};
      ingot_tensor *sums = ingot_sum(ingot_abs(A), sd, 1, true);
      const int d[1] = {cols ? -1 : -2};
      r = mx ? ingot_amax(sums, d, 1, true) : ingot_amin(sums, d, 1, true);
      return keepdim ? r : ingot_squeeze(ingot_squeeze(r, -1), -1);
    }
  }
  return keepdim ? ingot_unsqueeze(ingot_unsqueeze(r, -1), -1) : r;
}

static bool ord_ok(const char *op, const char *ord, ord_t o) {
  if (o != ORD_BAD) return true;
  ingot_set_error(INGOT_ERR_ARG, "%s: unknown ord '%s' (use fro, nuc, inf, -inf, 1, -1, 2, -2)", op,
                  ord);
  return false;
}

ingot_tensor *ingot_linalg_matrix_norm(const ingot_tensor *A, const char *ord, bool keepdim) {
  ord_t o = parse_ord(ord, ORD_FRO);
  if (!la_check("matrix_norm", A, false) || !ord_ok("matrix_norm", ord, o)) return NULL;
  ingot_scope_begin();
  return finish("matrix_norm", norm_of(A, o, keepdim));
}

ingot_tensor *ingot_linalg_cond(const ingot_tensor *A, const char *ord) {
  ord_t o = parse_ord(ord, ORD_2);
  if (!la_check("cond", A, o != ORD_2 && o != ORD_N2) || !ord_ok("cond", ord, o)) return NULL;
  ingot_scope_begin();
  ingot_tensor *r;
  if (o == ORD_2 || o == ORD_N2) {
    ingot_tensor *s = ingot_linalg_svdvals(A);
    ingot_tensor *hi = ingot_amax(s, LAST1, 1, false), *lo = ingot_amin(s, LAST1, 1, false);
    r = o == ORD_2 ? ingot_div(hi, lo) : ingot_div(lo, hi);
  } else { /* torch: inf for a singular member */
    ingot_tensor *info = NULL, *inv = linalg_inv_ex(A, &info);
    ingot_tensor *sing = info ? ingot_ne(info, ingot_zeros_like(info)) : NULL;
    r = ingot_masked_fill(ingot_mul(norm_of(A, o, false), norm_of(inv, o, false)), sing, INFINITY);
  }
  return finish("cond", r);
}
