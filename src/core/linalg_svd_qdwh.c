/* SVD by QDWH: the polar decomposition A = U_p H by the dynamically weighted
 * Halley iteration (Nakatsukasa, Bai, Gygi 2010), QR-based while its weight
 * c is large and Cholesky-based once c <= 100 (Nakatsukasa, Higham 2013),
 * then H = V diag(s) V^T by eigh and U = U_p V. Tall or square R x C
 * members (a wide A runs as A^T = U' S V'^T, so U = V', Vh = U'^T).
 *
 * Each member is scaled by a power of two (exact) so that its largest entry
 * lies in [0.5, 1), then by its Frobenius norm (>= ||A||_2): every singular
 * value starts in [0, 1]. The iteration's lower bound on the smallest one
 * starts at eps, so the weights are one plan for every member and no
 * condition estimate is needed: 2 QR + 2 Cholesky steps in f32, 2 + 3 in
 * f64 (dwh_plan). Singular values below eps ||A||_F are noise at that
 * precision and need not converge; where the smallest s <= C eps s_max, U
 * is made orthonormal by a QR (their columns completed to an orthonormal
 * set; Nakatsukasa and Higham, section 5.5); the same QR, complete,
 * gives the full U of full_matrices.
 *
 * The result is kept when, for every member, ||A - U S V^T||_F <= tol s_max
 * and max |U^T U - I| <= tol (tol = 32 eps max(R, 16)), all finite; else the
 * caller's own algorithm runs. Flops and expected times: docs/perf-notes.md
 * (svd_f32_2048). */
#include "linalg_svd_qdwh.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingot/ingot.h"

/* Above this weight c the Cholesky factor of I + c X^T X loses accuracy
 * (its condition number is ~c): those steps take the QR form. */
#define QDWH_QR_MIN_C 100.0
#define QDWH_MAX_STEPS 12
/* Smallest min(m, n) and largest max(m, n) / min(m, n) (as 5/4) of auto. */
#define QDWH_AUTO_MIN 512

static const int LAST2[2] = {-2, -1}, LAST1[1] = {-1};

typedef struct dwh_step {
  double a, b, c;
} dwh_step;

/* The weights (a, b, c) of each step for a lower bound that starts at eps
 * and is updated as the iteration maps it, until it reaches 1 - 5 eps
 * (NBG 2010, section 3). Returns the number of steps. */
static int dwh_plan(double eps, dwh_step *plan) {
  double l = eps;
  int k = 0;
  while (l + 5 * eps < 1 && k < QDWH_MAX_STEPS) {
    double l2 = l * l, d = cbrt(4 * (1 / l2 - 1) / l2), sd = sqrt(1 + d);
    double a = sd + sqrt(8 - 4 * d + 8 * (2 - l2) / (l2 * sd)) / 2, b = (a - 1) * (a - 1) / 4;
    double c = a + b - 1;
    plan[k++] = (dwh_step){a, b, c};
    l = l * (a + b * l2) / (1 + c * l2);
  }
  return k;
}

typedef struct qdwh {
  int64_t batch, R, C; /* members are R x C, R >= C */
  ingot_dtype dt;
  ingot_device dev;
  bool uv, full, wide;
  double eps, tol;
  double *host; /* 3 doubles per member */
  int qr_steps, chol_steps;
  double res, orth; /* the worst member's checks */
} qdwh;

static ingot_tensor *mT(const ingot_tensor *t) { return ingot_transpose(t, -2, -1); }

/* t's first `count` values as doubles on the host. */
static bool host_doubles(const ingot_tensor *t, double *out, int64_t count) {
  ingot_tensor *d = ingot_cast(t, INGOT_F64); /* a fresh contiguous copy */
  return d && ingot_to_host(d, out, sizeof(double) * (size_t)count) == INGOT_OK;
}

/* [batch, 1, 1] tensor of dt from batch host doubles. */
static ingot_tensor *per_member(const qdwh *q, const double *v) {
  int64_t sh[3] = {q->batch, 1, 1};
  return ingot_cast(ingot_from_host(v, 3, sh, INGOT_F64, q->dev), q->dt);
}

/* One step X (a I + b X^T X)(I + c X^T X)^-1 = (b/c) X + (a - b/c) X (I +
 * c X^T X)^-1 in QR form: [sqrt(c) X; I] = [Q1; Q2] R gives the last factor
 * as Q1 Q2^T / sqrt(c). */
static ingot_tensor *qr_step(const qdwh *q, ingot_tensor *X, ingot_tensor *I, dwh_step w) {
  double e = w.b / w.c, sc = sqrt(w.c);
  ingot_tensor *parts[2] = {ingot_mul_scalar(X, sc), I};
  ingot_tensor *Q = ingot_linalg_qr(ingot_cat(parts, 2, -2), INGOT_QR_REDUCED, NULL);
  ingot_tensor *Q1 = ingot_narrow(Q, -2, 0, q->R), *Q2 = ingot_narrow(Q, -2, q->R, q->C);
  return ingot_add(ingot_mul_scalar(X, e),
                   ingot_mul_scalar(ingot_matmul(Q1, mT(Q2)), (w.a - e) / sc));
}

/* The same step by Cholesky: I + c X^T X = L L^T and X (L L^T)^-1 by two
 * right-side triangular solves. */
static ingot_tensor *chol_step(ingot_tensor *X, ingot_tensor *I, dwh_step w) {
  double e = w.b / w.c;
  ingot_tensor *Z = ingot_add(ingot_mul_scalar(ingot_matmul(mT(X), X), w.c), I);
  ingot_tensor *L = ingot_linalg_cholesky(Z, false);
  ingot_tensor *W = ingot_linalg_solve_triangular(mT(L), X, true, false, false); /* X L^-T */
  W = ingot_linalg_solve_triangular(L, W, false, false, false);                  /* .. L^-1 */
  return ingot_add(ingot_mul_scalar(X, e), ingot_mul_scalar(W, w.a - e));
}

/* The polar factor of X (every singular value in [0, 1]). */
static ingot_tensor *polar(qdwh *q, ingot_tensor *X) {
  int64_t sh[3] = {q->batch, q->C, q->C};
  ingot_tensor *I = ingot_expand(ingot_eye(q->C, q->C, q->dt, q->dev), 3, sh);
  dwh_step plan[QDWH_MAX_STEPS];
  int steps = dwh_plan(q->eps, plan);
  for (int i = 0; i < steps; i++) {
    bool qr = plan[i].c > QDWH_QR_MIN_C;
    ingot_scope_begin(); /* a step's temporaries go at its end */
    X = ingot_keep(qr ? qr_step(q, X, I, plan[i]) : chol_step(X, I, plan[i]));
    ingot_scope_end();
    q->qr_steps += qr;
    q->chol_steps += !qr;
  }
  /* One Newton-Schulz step, X (3 I - X^T X) / 2, restores orthonormality
   * to working precision (it costs two products). */
  return ingot_sub(ingot_mul_scalar(X, 1.5),
                   ingot_mul_scalar(ingot_matmul(X, ingot_matmul(mT(X), X)), 0.5));
}

/* An orthonormal basis (R x C, or R x R when complete) whose first C
 * columns are U's where U's are orthonormal: Q of U's QR with the signs of
 * R's diagonal (the dot products of Q's and U's columns) moved into Q. */
static ingot_tensor *orthonormal_basis(const qdwh *q, ingot_tensor *U, bool complete) {
  ingot_tensor *Q = ingot_linalg_qr(U, complete ? INGOT_QR_COMPLETE : INGOT_QR_REDUCED, NULL);
  ingot_tensor *d = ingot_sum(ingot_mul(ingot_narrow(Q, -1, 0, q->C), U), (int[]){-2}, 1, false);
  ingot_tensor *pos = ingot_cast(ingot_ge(d, ingot_scalar(0, q->dt, q->dev)), q->dt);
  ingot_tensor *sg = ingot_sub_scalar(ingot_mul_scalar(pos, 2), 1); /* [batch, C] of +-1 */
  if (complete) {
    int64_t sh[2] = {q->batch, q->R - q->C};
    ingot_tensor *parts[2] = {sg, ingot_ones(2, sh, q->dt, q->dev)};
    sg = ingot_cat(parts, 2, -1);
  }
  return ingot_mul(Q, ingot_unsqueeze(sg, -2));
}

/* Residual, orthonormality and s_max of every member against q->tol;
 * NULL when all pass, else why not. */
static const char *check(qdwh *q, ingot_tensor *Xs, ingot_tensor *U, ingot_tensor *w,
                         ingot_tensor *V) {
  ingot_tensor *Uk = ingot_narrow(U, -1, 0, q->C);
  ingot_tensor *rec = ingot_matmul(ingot_mul(Uk, ingot_unsqueeze(w, -2)), mT(V));
  ingot_tensor *res = ingot_norm(ingot_sub(Xs, rec), 2, LAST2, 2, false);
  int64_t uc = ingot_shape(U)[2];
  ingot_tensor *gram = ingot_sub(ingot_matmul(mT(U), U), ingot_eye(uc, uc, q->dt, q->dev));
  ingot_tensor *orth = ingot_amax(ingot_abs(gram), LAST2, 2, false);
  ingot_tensor *stats[3] = {res, orth, ingot_select(w, -1, 0)};
  if (!host_doubles(ingot_stack(stats, 3, -1), q->host, 3 * q->batch)) return "an op failed";
  const char *why = NULL;
  for (int64_t b = 0; b < q->batch; b++) {
    double r = q->host[3 * b], o = q->host[3 * b + 1], smax = q->host[3 * b + 2];
    if (!isnan(q->res) && !(r <= q->res)) q->res = r; /* the worst; NaN sticks */
    if (!isnan(q->orth) && !(o <= q->orth)) q->orth = o;
    if (!(isfinite(smax) && r <= q->tol * smax && o <= q->tol)) why = "a check failed";
  }
  return why;
}

/* Powers of two s1 * s2 = 2^-e per member (each within the dtype's range;
 * 2^-e alone may not be) and their inverses, e the exponent of the member's
 * largest |entry|; fails on non-finite input. */
static const char *member_scales(qdwh *q, ingot_tensor *X, ingot_tensor **s) {
  ingot_tensor *amax = ingot_amax(ingot_abs(X), LAST2, 2, true);
  if (!host_doubles(amax, q->host, q->batch)) return "an op failed";
  double *p = q->host, *v = malloc(sizeof(double) * 4 * (size_t)q->batch);
  if (!v) return "out of host memory";
  const char *why = NULL;
  for (int64_t b = 0; b < q->batch; b++) {
    int e = 0;
    if (!isfinite(p[b]))
      why = "non-finite input";
    else if (p[b] > 0)
      frexp(p[b], &e);
    int h = e / 2;
    v[b] = ldexp(1, -h);
    v[q->batch + b] = ldexp(1, h - e);
    v[2 * q->batch + b] = ldexp(1, h);
    v[3 * q->batch + b] = ldexp(1, e - h);
  }
  for (int i = 0; i < 4 && !why; i++) s[i] = per_member(q, v + i * q->batch);
  free(v);
  return why;
}

static const char *qdwh_run(qdwh *q, ingot_op_args *a) {
  ingot_tensor *A = a->in[0];
  int64_t sh[3] = {q->batch, q->R, q->C};
  ingot_tensor *X3 = ingot_reshape(q->wide ? mT(A) : A, 3, sh), *s[4] = {NULL};
  if (X3 && ingot_dtype_of(X3) != q->dt) X3 = ingot_cast(X3, q->dt); /* f32 in f64 */
  const char *why = X3 ? member_scales(q, X3, s) : "an op failed";
  if (why) return why;
  ingot_tensor *Xs = ingot_mul(ingot_mul(X3, s[0]), s[1]);
  /* a zero member's norm 0 becomes 0.5 (its X stays 0) */
  ingot_tensor *fro = ingot_clamp(ingot_norm(Xs, 2, LAST2, 2, true), 0.5, INFINITY);
  ingot_tensor *X = polar(q, ingot_div(Xs, fro));
  ingot_tensor *H = ingot_matmul(mT(X), Xs), *V = NULL;
  ingot_tensor *w = ingot_linalg_eigh(ingot_mul_scalar(ingot_add(H, mT(H)), 0.5), false, &V);
  /* descending; eigh's tiny negative values (noise) become 0 */
  w = ingot_clamp(ingot_flip(w, LAST1, 1), 0, INFINITY);
  V = ingot_flip(V, LAST1, 1);
  ingot_tensor *U = ingot_matmul(X, V);
  ingot_tensor *ends[2] = {ingot_narrow(w, -1, 0, 1), ingot_narrow(w, -1, q->C - 1, 1)};
  if (!host_doubles(ingot_cat(ends, 2, -1), q->host, 2 * q->batch)) return "an op failed";
  bool complete = q->uv && q->full && q->R > q->C, fix = complete;
  for (int64_t b = 0; b < q->batch; b++)
    fix |= q->host[2 * b + 1] <= (double)q->C * q->eps * q->host[2 * b];
  if (fix) U = orthonormal_basis(q, U, complete);
  if ((why = check(q, Xs, U, w, V))) return why;
  ingot_tensor *S = ingot_mul(ingot_mul(w, ingot_squeeze(s[2], -1)), ingot_squeeze(s[3], -1));
  int64_t ssh[2] = {q->batch, q->C};
  if (ingot_copy_(ingot_reshape(a->out[0], 2, ssh), S)) return "an op failed";
  if (!q->uv) return NULL;
  /* wide: A^T = U S V^T, so A's U is V and its Vh is U^T */
  ingot_tensor *Uo = q->wide ? V : U, *Vo = mT(q->wide ? U : V);
  int64_t ush[3] = {q->batch, ingot_shape(Uo)[1], ingot_shape(Uo)[2]};
  int64_t vsh[3] = {q->batch, ingot_shape(Vo)[1], ingot_shape(Vo)[2]};
  if (ingot_copy_(ingot_reshape(a->out[1], 3, ush), Uo) ||
      ingot_copy_(ingot_reshape(a->out[2], 3, vsh), Vo))
    return "an op failed";
  return NULL;
}

bool linalg_svd_qdwh(ingot_op_args *a) {
  const ingot_tensor *A = a->in[0];
  ingot_dtype dt = ingot_dtype_of(A);
  int nd = ingot_ndim(A);
  const int64_t *sh = ingot_shape(A);
  int64_t m = sh[nd - 2], n = sh[nd - 1], batch = 1;
  for (int i = 0; i < nd - 2; i++) batch *= sh[i];
  if ((dt != INGOT_F32 && dt != INGOT_F64) || m == 0 || n == 0 || batch == 0) return false;
  /* f32 input iterates in f64 unless INGOT_SVD_QDWH_F32=1: in f32 the
   * residual was ~6e-4 s_max at 2048^2 (gesvdj ~1e-5, small singular values
   * off by percents); in f64 it is ~1e-15 and the result is f32's rounding
   * of it, for 90 instead of 77 ms on the H200 (docs/perf-notes.md). */
  const char *f32 = getenv("INGOT_SVD_QDWH_F32");
  ingot_dtype wdt = dt == INGOT_F32 && !(f32 && atoi(f32)) ? INGOT_F64 : dt;
  qdwh q = {.batch = batch,
            .R = m < n ? n : m,
            .C = m < n ? m : n,
            .dt = wdt,
            .dev = ingot_device_of(A),
            .uv = a->iarg[0],
            .full = a->iarg[1],
            .wide = m < n,
            .eps = wdt == INGOT_F32 ? FLT_EPSILON : DBL_EPSILON};
  q.tol = 32 * q.eps * (double)(q.R > 16 ? q.R : 16);
  q.host = malloc(sizeof(double) * 3 * (size_t)batch);
  ingot_scope_begin();
  const char *why = q.host ? qdwh_run(&q, a) : "out of host memory";
  ingot_scope_end();
  free(q.host);
  const char *v = getenv("INGOT_SVD_VERBOSE");
  if (v && atoi(v))
    fprintf(stderr,
            "ingot svd: qdwh %lld x %lld (batch %lld): %d QR + %d Cholesky steps, residual %.3g, "
            "orthonormality %.3g (tol %.3g of s_max): %s%s\n",
            (long long)m, (long long)n, (long long)batch, q.qr_steps, q.chol_steps, q.res, q.orth,
            q.tol, why ? "fallback: " : "kept", why ? why : "");
  if (why) ingot_clear_error();
  return !why;
}

bool linalg_svd_qdwh_forced(void) {
  const char *s = getenv("INGOT_SVD_ALGO");
  return s && !strcmp(s, "qdwh");
}

bool linalg_svd_qdwh_auto(const ingot_op_args *a) {
  const ingot_tensor *A = a->in[0];
  ingot_dtype dt = ingot_dtype_of(A);
  int nd = ingot_ndim(A);
  int64_t m = ingot_shape(A)[nd - 2], n = ingot_shape(A)[nd - 1];
  int64_t lo = m < n ? m : n, hi = m < n ? n : m;
  return (dt == INGOT_F32 || dt == INGOT_F64) && lo >= QDWH_AUTO_MIN && 4 * hi <= 5 * lo &&
         !ingot_get_allow_tf32();
}
