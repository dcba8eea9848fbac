/* SVD on CUDA through cuSOLVER, by one of three algorithms:
 *   gesvd  - QR iteration on a bidiagonal form (half of it BLAS-2): slow for
 *            large matrices, robust on every input; the fallback.
 *   gesvdp - polar decomposition (QDWH, GEMM-rich) + syevd: much faster for
 *            large matrices, but it perturbs A when a singular value is near
 *            zero (rank-deficient, graded) and reports the perturbation in
 *            h_err_sigma; economy U only.
 *   gesvdj - one-sided Jacobi: accurate (even on graded matrices), fast
 *            for small and medium sizes, one call for a whole batch of
 *            matrices up to 32 x 32 (gesvdjBatched); info reports
 *            non-convergence.
 * INGOT_SVD_ALGO=gesvd|gesvdp|gesvdj|qdwh|auto (read at each call) picks
 * one; qdwh is our QDWH + syevd composed of ops (src/core/linalg_svd_qdwh.c),
 * which falls back to gesvdj when it declines or its checks fail. auto (the
 * default) takes qdwh for real square-ish matrices from 512 up
 * (linalg_svd_qdwh_auto), gesvdj from SVD_FAST_MIN columns up and for
 * batches of matrices up to 32 x 32 (one batched call), gesvd otherwise.
 * Measured on the H200 at 2048^2 f32: gesvdj 214 ms, gesvd 304 ms; gesvdp
 * reported h_err_sigma ~ s_max on random input (so it always fell back) and
 * never returned on a complex64 adversarial case: opt-in, real only.
 * A member the fast algorithm fails on (a refused call, info != 0, a zero matrix, or
 * h_err_sigma above 16 eps max(m, n) sigma_max) is recomputed by gesvd;
 * INGOT_SVD_VERBOSE=1 prints each such fallback to stderr.
 *
 * Layout: cuSOLVER wants rows >= cols. Wide or square A: its row-major
 * memory is column-major A^T (n x m) = U' S V'^H, so A = conj(V') S U'^T and
 * the row-major reads of the VT and U buffers are U and Vh as they stand (no
 * transposing copy). Tall A: a column-major copy, outputs transposed back.
 * gesvdp and gesvdj return V' (not V'^H): one transposing copy (+ conj)
 * makes the VT buffer. Each member is scaled by a power of two first
 * (exact, one kernel for the batch; one amax read, a sync) so that x1e+-30
 * inputs neither overflow nor lose the small singular values. */
#include <cusolverDn.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/linalg_svd_qdwh.h"
#include "cuda_kernels.h"
#include "ingot/ingot.h"
#include "linalg_common.h"
#include "linalg_cuda.h"

/* Smallest min(m, n) that auto sends to gesvdp. */
#define SVD_FAST_MIN 128
/* Largest max(m, n) of cuSOLVER's gesvdjBatched (one call for the batch). */
#define SVD_JACOBI_BATCH_MAX 32

typedef enum { SVD_AUTO, SVD_GESVD, SVD_GESVDP, SVD_GESVDJ, SVD_QDWH } svd_algo;

static ingot_status svd_algo_env(svd_algo *out) {
  const char *s = getenv("INGOT_SVD_ALGO");
  *out = SVD_AUTO;
  if (!s || !*s || !strcmp(s, "auto")) return INGOT_OK;
  if (!strcmp(s, "gesvd"))
    *out = SVD_GESVD;
  else if (!strcmp(s, "gesvdp"))
    *out = SVD_GESVDP;
  else if (!strcmp(s, "gesvdj"))
    *out = SVD_GESVDJ;
  else if (!strcmp(s, "qdwh"))
    *out = SVD_QDWH;
  else
    return ingot_set_error(
        INGOT_ERR_ARG, "svd: INGOT_SVD_ALGO=%s is not one of gesvd, gesvdp, gesvdj, qdwh, auto", s);
  return INGOT_OK;
}

/* The problem each member solves: column-major R x C (R >= C) in buf. */
typedef struct svd_job {
  la_ctx *c;
  ingot_dtype dt, rdt;
  int64_t batch, R, C, ucols, ualloc; /* U's columns: wanted, held (batched gesvdj: all R) */
  bool uv, full, tall, batched;       /* tall: buf is a column-major copy of A */
  ingot_tensor *buf, *ub, *vb, *vt;   /* A, U (R x ualloc), V^H (C x C), V (C x C) */
  ingot_tensor *s;                    /* the singular values output [batch, C] */
  int *info;                          /* device, one per member */
  int *e;                             /* device: each member's scaling exponent */
} svd_job;

static char *s_member(const svd_job *j, int64_t b) { return la_member(j->s, b, j->C); }
static void *opt_member(const ingot_tensor *t, int64_t b, int64_t elems) {
  return t ? la_member(t, b, elems) : NULL;
}

/* gesvd of member b of j->buf into ub / vb / s (jobs as the outputs need). */
static ingot_status gesvd_member(svd_job *j, la_ws *w, int64_t b, bool size_only) {
  cudaDataType ty = la_type(j->dt), rty = la_type(j->rdt);
  signed char jobu = !j->uv ? 'N' : j->full ? 'A' : 'S', jobv = !j->uv ? 'N' : 'A';
  void *x = la_member(j->buf, b, j->R * j->C), *u = opt_member(j->ub, b, j->R * j->ualloc),
       *v = opt_member(j->vb, b, j->C * j->C);
  if (size_only)
    return la_sol_check(cusolverDnXgesvd_bufferSize(j->c->sol, j->c->params, jobu, jobv, j->R, j->C,
                                                    ty, x, j->R, rty, s_member(j, b), ty, u, j->R,
                                                    ty, v, j->C, ty, &w->dev_bytes, &w->host_bytes),
                        "gesvd buffer size");
  return la_sol_check(cusolverDnXgesvd(j->c->sol, j->c->params, jobu, jobv, j->R, j->C, ty, x, j->R,
                                       rty, s_member(j, b), ty, u, j->R, ty, v, j->C, ty, w->dev,
                                       w->dev_bytes, w->host, w->host_bytes, j->info + b),
                      "gesvd");
}

/* gesvdp of member b (economy U into ub, V into vt); *err = h_err_sigma. */
static ingot_status gesvdp_member(svd_job *j, la_ws *w, int64_t b, bool size_only, double *err) {
  cudaDataType ty = la_type(j->dt), rty = la_type(j->rdt);
  cusolverEigMode_t jobz = j->uv ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  void *x = la_member(j->buf, b, j->R * j->C), *u = la_member(j->ub, b, j->R * j->ualloc),
       *v = la_member(j->vt, b, j->C * j->C);
  if (size_only)
    return la_sol_check(
        cusolverDnXgesvdp_bufferSize(j->c->sol, j->c->params, jobz, 1, j->R, j->C, ty, x, j->R, rty,
                                     s_member(j, b), ty, u, j->R, ty, v, j->C, ty, &w->dev_bytes,
                                     &w->host_bytes),
        "gesvdp buffer size");
  return la_sol_check(cusolverDnXgesvdp(j->c->sol, j->c->params, jobz, 1, j->R, j->C, ty, x, j->R,
                                        rty, s_member(j, b), ty, u, j->R, ty, v, j->C, ty, w->dev,
                                        w->dev_bytes, w->host, w->host_bytes, j->info + b, err),
                      "gesvdp");
}

/* gesvdj (legacy 32-bit API) of member b: U into ub (economy unless full),
 * V into vt. With work NULL, only *lwork (elements) is set. */
static ingot_status gesvdj_member(svd_job *j, gesvdjInfo_t p, int64_t b, void *work, int *lwork) {
  cusolverEigMode_t jobz = j->uv ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  int econ = j->ucols == j->C, m = (int)j->R, n = (int)j->C;
  void *x = la_member(j->buf, b, j->R * j->C), *u = la_member(j->ub, b, j->R * j->ualloc),
       *v = la_member(j->vt, b, j->C * j->C), *s = s_member(j, b);
  int *info = j->info + b;
  cusolverDnHandle_t h = j->c->sol;
  cusolverStatus_t r;
  if (!work) switch (j->dt) {
      case INGOT_F32:
        r = cusolverDnSgesvdj_bufferSize(h, jobz, econ, m, n, x, m, s, u, m, v, n, lwork, p);
        break;
      case INGOT_F64:
        r = cusolverDnDgesvdj_bufferSize(h, jobz, econ, m, n, x, m, s, u, m, v, n, lwork, p);
        break;
      case INGOT_C64:
        r = cusolverDnCgesvdj_bufferSize(h, jobz, econ, m, n, x, m, s, u, m, v, n, lwork, p);
        break;
      default:
        r = cusolverDnZgesvdj_bufferSize(h, jobz, econ, m, n, x, m, s, u, m, v, n, lwork, p);
        break;
    }
  else
    switch (j->dt) {
      case INGOT_F32:
        r = cusolverDnSgesvdj(h, jobz, econ, m, n, x, m, s, u, m, v, n, work, *lwork, info, p);
        break;
      case INGOT_F64:
        r = cusolverDnDgesvdj(h, jobz, econ, m, n, x, m, s, u, m, v, n, work, *lwork, info, p);
        break;
      case INGOT_C64:
        r = cusolverDnCgesvdj(h, jobz, econ, m, n, x, m, s, u, m, v, n, work, *lwork, info, p);
        break;
      default:
        r = cusolverDnZgesvdj(h, jobz, econ, m, n, x, m, s, u, m, v, n, work, *lwork, info, p);
        break;
    }
  return la_sol_check(r, work ? "gesvdj" : "gesvdj buffer size");
}

/* gesvdjBatched (R, C <= 32) of all members in one call: U R x R into ub,
 * V into vt. With work NULL, only *lwork (elements) is set. */
static ingot_status gesvdj_batched(svd_job *j, gesvdjInfo_t p, void *work, int *lwork) {
  cusolverEigMode_t jobz = j->uv ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  int m = (int)j->R, n = (int)j->C, nb = (int)j->batch;
  void *x = ingot_tensor_data(j->buf), *u = ingot_tensor_data(j->ub), *v = ingot_tensor_data(j->vt),
       *s = ingot_tensor_data(j->s);
  cusolverDnHandle_t h = j->c->sol;
  cusolverStatus_t r;
  if (!work) switch (j->dt) {
      case INGOT_F32:
        r = cusolverDnSgesvdjBatched_bufferSize(h, jobz, m, n, x, m, s, u, m, v, n, lwork, p, nb);
        break;
      case INGOT_F64:
        r = cusolverDnDgesvdjBatched_bufferSize(h, jobz, m, n, x, m, s, u, m, v, n, lwork, p, nb);
        break;
      case INGOT_C64:
        r = cusolverDnCgesvdjBatched_bufferSize(h, jobz, m, n, x, m, s, u, m, v, n, lwork, p, nb);
        break;
      default:
        r = cusolverDnZgesvdjBatched_bufferSize(h, jobz, m, n, x, m, s, u, m, v, n, lwork, p, nb);
        break;
    }
  else
    switch (j->dt) {
      case INGOT_F32:
        r = cusolverDnSgesvdjBatched(h, jobz, m, n, x, m, s, u, m, v, n, work, *lwork, j->info, p,
                                     nb);
        break;
      case INGOT_F64:
        r = cusolverDnDgesvdjBatched(h, jobz, m, n, x, m, s, u, m, v, n, work, *lwork, j->info, p,
                                     nb);
        break;
      case INGOT_C64:
        r = cusolverDnCgesvdjBatched(h, jobz, m, n, x, m, s, u, m, v, n, work, *lwork, j->info, p,
                                     nb);
        break;
      default:
        r = cusolverDnZgesvdjBatched(h, jobz, m, n, x, m, s, u, m, v, n, work, *lwork, j->info, p,
                                     nb);
        break;
    }
  return la_sol_check(r, work ? "gesvdjBatched" : "gesvdjBatched buffer size");
}

/* The fast algorithm on every member; bad[b] set where its result is not
 * to be trusted: info != 0, a zero (or non-finite) largest singular value,
 * or a gesvdp perturbation above 16 eps max(m, n) sigma_max (the error
 * gesvd itself is allowed). */
static ingot_status fast_all(svd_job *j, svd_algo algo, bool *bad) {
  ingot_status st = INGOT_OK;
  size_t res = ingot_dtype_size(j->rdt);
  double *err = calloc((size_t)j->batch, sizeof(double));
  int *h = malloc(sizeof(int) * (size_t)j->batch);
  char *s0 = malloc(res * (size_t)j->batch);
  if (!err || !h || !s0) st = ingot_set_error(INGOT_ERR_OOM, "svd: out of host memory");
  la_ws w = {0};
  gesvdjInfo_t p = NULL;
  int lwork = 0;
  /* A cuSOLVER refusal (a size it does not take, no workspace) is not an
   * error of the op: those members go to gesvd (err NaN marks them). */
  ingot_status fs = st;
  if (!fs && algo == SVD_GESVDP) {
    fs = gesvdp_member(j, &w, 0, true, NULL);
    if (!fs) fs = la_ws_alloc(j->c, &w);
  } else if (!fs) {
    fs = la_sol_check(cusolverDnCreateGesvdjInfo(&p), "gesvdj info");
    if (!fs) /* descending (the default; gesvdjBatched may be told otherwise) */
      fs = la_sol_check(cusolverDnXgesvdjSetSortEig(p, 1), "gesvdj sort");
    if (!fs)
      fs = j->batched ? gesvdj_batched(j, p, NULL, &lwork) : gesvdj_member(j, p, 0, NULL, &lwork);
    w.dev_bytes = (size_t)lwork * ingot_dtype_size(j->dt);
    if (!fs) fs = la_ws_alloc(j->c, &w);
  }
  if (!st)
    st = cuda_check(cuda_scale_members(j->dt, ingot_tensor_data(j->buf), j->batch, j->R * j->C,
                                       j->e, -1, j->c->s),
                    "scale");
  if (!st && !fs && j->batched) fs = gesvdj_batched(j, p, w.dev, &lwork);
  bool refused = false;
  for (int64_t b = 0; !st && b < j->batch; b++) {
    ingot_status ms = fs;
    if (!fs && !j->batched)
      ms = algo == SVD_GESVDP ? gesvdp_member(j, &w, b, false, &err[b])
                              : gesvdj_member(j, p, b, w.dev, &lwork);
    if (ms) { /* printed as h_err_sigma nan */
      err[b] = NAN;
      refused = true;
    }
  }
  if (!st && refused) ingot_clear_error();
  la_ws_free(j->c, &w);
  if (p) cusolverDnDestroyGesvdjInfo(p);
  if (!st)
    st = cuda_check(cudaMemcpyAsync(h, j->info, sizeof(int) * (size_t)j->batch,
                                    cudaMemcpyDeviceToHost, j->c->s),
                    "copy info");
  if (!st) /* each member's largest singular value (the first) */
    st = cuda_check(cudaMemcpy2DAsync(s0, res, s_member(j, 0), res * (size_t)j->C, res,
                                      (size_t)j->batch, cudaMemcpyDeviceToHost, j->c->s),
                    "copy s");
  if (!st) st = cuda_check(cudaStreamSynchronize(j->c->s), "sync");
  double eps = j->rdt == INGOT_F32 ? FLT_EPSILON : DBL_EPSILON;
  bool verbose = getenv("INGOT_SVD_VERBOSE") && atoi(getenv("INGOT_SVD_VERBOSE"));
  for (int64_t b = 0; !st && b < j->batch; b++) {
    double smax = j->rdt == INGOT_F32 ? ((float *)s0)[b] : ((double *)s0)[b];
    bad[b] =
        h[b] != 0 || !(smax > 0 && smax < INFINITY) || !(err[b] <= 16 * eps * (double)j->R * smax);
    if (bad[b] && verbose)
      fprintf(stderr,
              "ingot svd: member %lld (%lld x %lld): %s info %d, h_err_sigma %g, s_max %g: "
              "gesvd\n",
              (long long)b, (long long)j->R, (long long)j->C,
              algo == SVD_GESVDP ? "gesvdp" : "gesvdj", h[b], err[b], smax);
  }
  free(err);
  free(h);
  free(s0);
  return st;
}

/* gesvd of the members marked in redo (all when redo is NULL); with
 * `refill`, those members of buf are first copied again from the input
 * (the fast algorithm destroyed them). */
static ingot_status gesvd_all(svd_job *j, const ingot_tensor *A, const bool *redo, bool refill) {
  ingot_status st = INGOT_OK;
  int64_t first = -1;
  for (int64_t b = 0; b < j->batch && first < 0; b++)
    if (!redo || redo[b]) first = b;
  if (first < 0) return INGOT_OK;
  ingot_tensor *src = NULL;
  if (refill) {
    src = j->tall ? la_colmajor(A) : la_fresh_copy(A);
    if (!src) return ingot_last_status();
  }
  size_t mb = (size_t)(j->R * j->C) * ingot_dtype_size(j->dt);
  la_ws w = {0};
  st = gesvd_member(j, &w, first, true);
  if (!st) st = la_ws_alloc(j->c, &w);
  for (int64_t b = first; !st && b < j->batch; b++) {
    if (redo && !redo[b]) continue;
    void *x = la_member(j->buf, b, j->R * j->C);
    if (src)
      st = cuda_check(
          cudaMemcpyAsync(x, la_member(src, b, j->R * j->C), mb, cudaMemcpyDeviceToDevice, j->c->s),
          "copy");
    if (!st)
      st = cuda_check(cuda_scale_members(j->dt, x, 1, j->R * j->C, j->e + b, -1, j->c->s), "scale");
    if (!st) st = gesvd_member(j, &w, b, false);
  }
  la_ws_free(j->c, &w);
  ingot_release(src);
  return st;
}

/* Which algorithm runs this problem (the 32-bit gesvdj API needs int
 * sizes). auto: Jacobi for large matrices and for batches of matrices up
 * to 32 x 32, else gesvd. */
static svd_algo svd_pick(svd_algo want, const svd_job *j) {
  if (want == SVD_AUTO)
    want = j->C >= SVD_FAST_MIN || (j->batch > 1 && j->R <= SVD_JACOBI_BATCH_MAX) ? SVD_GESVDJ
                                                                                  : SVD_GESVD;
  /* gesvdp: no full U of a tall A; complex inputs hung on the H200 (c64,
   * the adversarial set), so they take gesvd. */
  if (want == SVD_GESVDP && (j->ucols != j->C || j->dt == INGOT_C64 || j->dt == INGOT_C128))
    return SVD_GESVD;
  if (want == SVD_GESVDJ && j->R * j->R > INT_MAX) return SVD_GESVD;
  return want;
}

ingot_status cuda_linalg_svd(ingot_op_args *a) {
  svd_algo want;
  ingot_status st = svd_algo_env(&want);
  if (st) return st;
  /* QDWH runs ops (each takes the linalg lock): before la_enter */
  if ((want == SVD_QDWH || (want == SVD_AUTO && linalg_svd_qdwh_auto(a))) && linalg_svd_qdwh(a))
    return INGOT_OK;
  if (want == SVD_QDWH) want = SVD_GESVDJ;
  la_ctx c;
  st = la_enter(a->in[0], &c);
  if (st) return st;
  bool uv = a->iarg[0], full = a->iarg[1];
  int64_t batch, m, n;
  la_dims(a->in[0], &batch, &m, &n);
  int64_t k = m < n ? m : n;
  bool tall = m > n;
  svd_job j = {.c = &c,
               .dt = ingot_dtype_of(a->in[0]),
               .batch = batch,
               .R = tall ? m : n,
               .C = tall ? n : m,
               .uv = uv,
               .full = full,
               .tall = tall,
               .s = a->out[0]};
  j.rdt = la_real(j.dt);
  j.ucols = full ? j.R : j.C;
  svd_algo algo = svd_pick(want, &j);
  bool fast = algo != SVD_GESVD, run = k > 0 && batch > 0;
  j.batched = algo == SVD_GESVDJ && batch > 1 && j.R <= SVD_JACOBI_BATCH_MAX;
  j.ualloc = j.batched ? j.R : j.ucols;
  int *e = !st && run ? la_member_exponents(a->in[0], batch, &st) : NULL;
  bool *bad = !st && run && fast ? calloc((size_t)batch, sizeof(bool)) : NULL;
  if (!st && run && fast && !bad) st = ingot_set_error(INGOT_ERR_OOM, "svd: out of host memory");
  if (!st && run) {
    ingot_device dev = ingot_device_of(a->in[0]);
    int64_t ush[3] = {batch, j.ualloc, j.R}, vsh[3] = {batch, j.C, j.C}; /* column-major */
    j.buf = tall ? la_colmajor(a->in[0]) : la_fresh_copy(a->in[0]);
    j.ub = j.buf && (uv || fast) ? ingot_empty(3, ush, j.dt, dev) : NULL;
    j.vb = j.buf && uv ? ingot_empty(3, vsh, j.dt, dev) : NULL;
    j.vt = j.buf && fast ? ingot_empty(3, vsh, j.dt, dev) : NULL;
    if (!j.buf || ((uv || fast) && !j.ub) || (uv && !j.vb) || (fast && !j.vt))
      st = ingot_last_status();
    if (!st) j.info = la_scratch(&c, batch, sizeof(int), true, &st);
    if (!st) j.e = la_scratch(&c, batch, sizeof(int), false, &st);
    if (!st)
      st = cuda_check(
          cudaMemcpyAsync(j.e, e, sizeof(int) * (size_t)batch, cudaMemcpyHostToDevice, c.s),
          "copy exponents");
  }
  if (!st && run && fast) st = fast_all(&j, algo, bad);
  if (!st && run && fast && uv) /* VT = V^H: column-major V^T, conjugated */
    st = la_transpose_into(j.vb, j.vt, true, false);
  if (!st && run) st = gesvd_all(&j, a->in[0], bad, fast);
  if (!st && run)
    st = cuda_check(cuda_scale_members(j.rdt, ingot_tensor_data(j.s), batch, k, j.e, 1, c.s),
                    "scale");
  if (!st && uv && run) {
    /* U (R x ucols of the held ualloc) and V^H (C x C), column-major, into
     * 3-d views of the outputs. */
    ingot_tensor *U3 = ingot_reshape(a->out[1], 3, (int64_t[]){batch, m, full ? m : k});
    ingot_tensor *V3 = ingot_reshape(a->out[2], 3, (int64_t[]){batch, full ? n : k, n});
    ingot_tensor *uw =
        j.ualloc == j.ucols ? ingot_retain(j.ub) : ingot_narrow(j.ub, -2, 0, j.ucols);
    if (!U3 || !V3 || !uw)
      st = ingot_last_status();
    else if (tall) {
      st = la_store_colmajor(U3, uw);
      if (!st) st = la_store_colmajor(V3, j.vb);
    } else {
      st = ingot_copy_(U3, j.vb);
      if (!st) st = ingot_copy_(V3, uw);
    }
    ingot_release(uw);
    ingot_release(U3);
    ingot_release(V3);
  }
  if (!st && uv && k == 0 && full) { /* empty: the full bases are identities */
    ingot_tensor *eu = ingot_eye(m, m, j.dt, ingot_device_of(a->out[1]));
    ingot_tensor *ev = ingot_eye(n, n, j.dt, ingot_device_of(a->out[1]));
    st = eu && ev ? ingot_copy_(a->out[1], eu) : ingot_last_status();
    if (!st) st = ingot_copy_(a->out[2], ev);
    ingot_release(eu);
    ingot_release(ev);
  }
  int64_t badm;
  int v;
  if (!st && run && la_first_failure(&c, j.info, batch, &badm, &v, &st))
    st = ingot_set_error(INGOT_ERR_NUMERIC,
                         "batch member %lld: the SVD (gesvd) did not converge "
                         "(info %d)",
                         (long long)badm, v);
  if (j.info) cuda_scratch_free(c.dev, j.info, c.s);
  if (j.e) cuda_scratch_free(c.dev, j.e, c.s);
  free(e);
  free(bad);
  ingot_release(j.buf);
  ingot_release(j.ub);
  ingot_release(j.vb);
  ingot_release(j.vt);
  la_leave(&c);
  return st;
}
