/* Shared plumbing of the cuSOLVER/cuBLAS linear-algebra kernels
 * (src/cuda/linalg_cusolver.c, linalg_svd.c): per-device handles locked
 * around each op, row-major <-> column-major copies, workspace, info reads. */
#include <cublas_v2.h>
#include <cusolverDn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_kernels.h"
#include "ingot/ingot.h"
#include "linalg_common.h"
#include "linalg_cuda.h"

#define LA_MAX_DEV 64
/* Largest info read through the pinned buffer (bigger ones use malloc). */
#define LA_PINNED_INFO_MAX ((size_t)1 << 22)

typedef struct la_dev {
  pthread_mutex_t mu;
  cusolverDnHandle_t sol;
  cublasHandle_t blas;
  cusolverDnParams_t params;
  unsigned long long *fail_dev, *fail_host; /* la_fail_word: device word, pinned copy */
  unsigned long long epoch;
  int *info_host; /* pinned, info_cap bytes: la_first_failure's reads */
  size_t info_cap;
} la_dev;
static la_dev g_la[LA_MAX_DEV];
static pthread_once_t g_la_once = PTHREAD_ONCE_INIT;

static void la_init_mutexes(void) {
  for (int i = 0; i < LA_MAX_DEV; i++) pthread_mutex_init(&g_la[i].mu, NULL);
}

ingot_status la_sol_check(cusolverStatus_t st, const char *what) {
  if (st == CUSOLVER_STATUS_SUCCESS) return INGOT_OK;
  return ingot_set_error(st == CUSOLVER_STATUS_ALLOC_FAILED ? INGOT_ERR_OOM : INGOT_ERR_BACKEND,
                         "cuSOLVER %s failed (status %d)", what, (int)st);
}

ingot_status la_blas_check(cublasStatus_t st, const char *what) {
  if (st == CUBLAS_STATUS_SUCCESS) return INGOT_OK;
  return ingot_set_error(INGOT_ERR_BACKEND, "cuBLAS %s failed (status %d)", what, (int)st);
}

/* Lock the device's handles and point them at the current stream. */
ingot_status la_enter(const ingot_tensor *t, la_ctx *c) {
  pthread_once(&g_la_once, la_init_mutexes);
  c->dev = ingot_device_of(t).index;
  if (c->dev < 0 || c->dev >= LA_MAX_DEV)
    return ingot_set_error(INGOT_ERR_DEVICE, "linalg: device index %d out of range", c->dev);
  pthread_mutex_lock(&g_la[c->dev].mu);
  ingot_status st = cuda_use_device(c->dev);
  if (!st && !g_la[c->dev].sol) st = la_sol_check(cusolverDnCreate(&g_la[c->dev].sol), "create");
  if (!st && !g_la[c->dev].params)
    st = la_sol_check(cusolverDnCreateParams(&g_la[c->dev].params), "create params");
  if (!st && !g_la[c->dev].blas) st = la_blas_check(cublasCreate(&g_la[c->dev].blas), "create");
  c->s = cuda_current_stream(c->dev);
  c->sol = g_la[c->dev].sol;
  c->blas = g_la[c->dev].blas;
  c->params = g_la[c->dev].params;
  if (!st) st = la_sol_check(cusolverDnSetStream(c->sol, c->s), "set stream");
  if (!st) st = la_blas_check(cublasSetStream(c->blas, c->s), "set stream");
  if (st) pthread_mutex_unlock(&g_la[c->dev].mu);
  return st;
}

void la_leave(la_ctx *c) { pthread_mutex_unlock(&g_la[c->dev].mu); }

ingot_status la_fail_word(la_ctx *c, unsigned long long **word, unsigned long long *epoch) {
  la_dev *g = &g_la[c->dev];
  ingot_status st = INGOT_OK;
  if (!g->fail_host) { /* once per device (a failed attempt is retried) */
    if (!g->fail_dev)
      st = cuda_check(cudaMalloc((void **)&g->fail_dev, sizeof *g->fail_dev), "alloc");
    if (!st) st = cuda_check(cudaMallocHost((void **)&g->fail_host, sizeof *g->fail_host), "alloc");
    if (st) return st;
    g->epoch = LA_FAIL_EPOCHS; /* forces the reset below */
  }
  if (!st && ++g->epoch >= LA_FAIL_EPOCHS) { /* first use, or the epochs wrapped */
    st = cuda_check(cudaMemsetAsync(g->fail_dev, 0, sizeof *g->fail_dev, c->s), "memset");
    g->epoch = st ? LA_FAIL_EPOCHS - 1 : 1; /* a failed reset is retried */
  }
  *word = g->fail_dev;
  *epoch = g->epoch;
  return st;
}

ingot_status la_fail_read(la_ctx *c, unsigned long long epoch, int64_t *member, int *value,
                          bool *failed) {
  la_dev *g = &g_la[c->dev];
  *failed = false;
  ingot_status st = cuda_check(cudaMemcpyAsync(g->fail_host, g->fail_dev, sizeof *g->fail_host,
                                               cudaMemcpyDeviceToHost, c->s),
                               "copy status");
  if (!st) st = cuda_check(cudaStreamSynchronize(c->s), "sync");
  unsigned long long key = st ? 0 : *g->fail_host;
  if (!st && key >> LA_FAIL_EPOCH_SHIFT == epoch) {
    *failed = true;
    *member = (int64_t)(0xffffffffull - ((key >> LA_FAIL_VALUE_BITS) & 0xffffffffull));
    *value = (int)(key & ((1u << LA_FAIL_VALUE_BITS) - 1));
  }
  return st;
}

cudaDataType la_type(ingot_dtype dt) {
  switch (dt) {
    case INGOT_F32:
      return CUDA_R_32F;
    case INGOT_F64:
      return CUDA_R_64F;
    case INGOT_C64:
      return CUDA_C_32F;
    default:
      return CUDA_C_64F;
  }
}

ingot_dtype la_real(ingot_dtype dt) {
  return dt == INGOT_C64 ? INGOT_F32 : dt == INGOT_C128 ? INGOT_F64 : dt;
}

/* Matrices in the last two dims: batch count, rows, cols. */
void la_dims(const ingot_tensor *t, int64_t *batch, int64_t *rows, int64_t *cols) {
  int nd = ingot_ndim(t);
  const int64_t *sh = ingot_shape(t);
  *rows = sh[nd - 2];
  *cols = sh[nd - 1];
  *batch = 1;
  for (int d = 0; d < nd - 2; d++) *batch *= sh[d];
}

/* A fresh contiguous copy of t (never t's own storage: cuSOLVER writes it). */
ingot_tensor *la_fresh_copy(const ingot_tensor *t) {
  ingot_tensor *c =
      ingot_empty(ingot_ndim(t), ingot_shape(t), ingot_dtype_of(t), ingot_device_of(t));
  if (c && ingot_copy_(c, t) != INGOT_OK) {
    ingot_release(c);
    return NULL;
  }
  return c;
}

/* Stride between the matrices of t when its batch dims collapse into one
 * (any value for a single matrix), else -1. */
static int64_t batch_stride(const ingot_tensor *t) {
  int nd = ingot_ndim(t);
  const int64_t *sh = ingot_shape(t), *sd = ingot_strides(t);
  if (nd == 2) return 0;
  for (int d = nd - 4; d >= 0; d--)
    if (sd[d] != sd[d + 1] * sh[d + 1]) return -1;
  return sd[nd - 3];
}

/* out (contiguous [*, M, N]) = the M x N matrices held column-major in cm
 * ([*, N, M] with unit last stride, any row stride), by our tiled kernel;
 * false (nothing done) when the layouts do not allow it. */
static bool tiled_transpose(ingot_tensor *out, const ingot_tensor *cm, bool conj, bool triu,
                            ingot_status *st) {
  int nd = ingot_ndim(cm);
  int64_t batch, N, M, sb = batch_stride(cm);
  la_dims(cm, &batch, &N, &M);
  if (!ingot_is_contiguous(out) || ingot_dtype_of(out) != ingot_dtype_of(cm) || sb < 0 ||
      ingot_strides(cm)[nd - 1] != 1 || ingot_numel(out) != batch * M * N ||
      ingot_size(out, -2) != M || (M + 31) / 32 > 65535)
    return false;
  int dev = ingot_device_of(out).index;
  *st = cuda_check(
      cuda_la_transpose(ingot_dtype_of(out), ingot_tensor_data(out), ingot_tensor_data(cm), batch,
                        M, N, ingot_strides(cm)[nd - 2], sb, conj, triu, cuda_current_stream(dev)),
      "transpose");
  return true;
}

ingot_tensor *la_colmajor(const ingot_tensor *t) {
  int nd = ingot_ndim(t);
  int64_t sh[INGOT_MAX_DIMS];
  memcpy(sh, ingot_shape(t), sizeof(int64_t) * (size_t)nd);
  sh[nd - 2] = ingot_shape(t)[nd - 1];
  sh[nd - 1] = ingot_shape(t)[nd - 2];
  /* t row-major [*, r, c] is column-major [*, c, r]: the tiled kernel writes
   * its transpose; other layouts through the generic copy of a view */
  if (ingot_is_contiguous(t)) {
    ingot_tensor *c = ingot_empty(nd, sh, ingot_dtype_of(t), ingot_device_of(t));
    ingot_status st = INGOT_OK;
    if (c && tiled_transpose(c, t, false, false, &st)) {
      if (!st) return c;
      ingot_release(c);
      return NULL;
    }
    ingot_release(c);
  }
  ingot_tensor *v = ingot_transpose(t, -2, -1), *c = v ? la_fresh_copy(v) : NULL;
  ingot_release(v);
  return c;
}

ingot_status la_transpose_into(ingot_tensor *out, const ingot_tensor *cm, bool conj, bool triu) {
  ingot_status st = INGOT_OK;
  if (tiled_transpose(out, cm, conj, triu, &st)) return st;
  ingot_tensor *v = ingot_transpose(cm, -2, -1), *u = v && triu ? ingot_triu(v, 0) : NULL;
  st = !v || (triu && !u) ? ingot_last_status() : ingot_copy_(out, triu ? u : v);
  ingot_release(u);
  ingot_release(v);
  if (!st && conj) {
    ingot_dtype dt = ingot_dtype_of(out);
    int dev = ingot_device_of(out).index;
    if (dt == INGOT_C64 || dt == INGOT_C128)
      st = cuda_check(
          cuda_conj_inplace(dt, ingot_tensor_data(out), ingot_numel(out), cuda_current_stream(dev)),
          "conj");
  }
  return st;
}

ingot_status la_store_colmajor(ingot_tensor *out, const ingot_tensor *cm) {
  return la_transpose_into(out, cm, false, false);
}

char *la_member(const ingot_tensor *t, int64_t b, int64_t elems) {
  return (char *)ingot_tensor_data(t) + b * elems * (int64_t)ingot_dtype_size(ingot_dtype_of(t));
}

ingot_status la_ws_alloc(la_ctx *c, la_ws *w) {
  w->dev = cuda_scratch_alloc(c->dev, w->dev_bytes ? w->dev_bytes : 1, c->s);
  w->host = malloc(w->host_bytes ? w->host_bytes : 1);
  if (!w->dev || !w->host)
    return ingot_set_error(INGOT_ERR_OOM, "linalg: out of memory for the cuSOLVER workspace");
  return INGOT_OK;
}

void la_ws_free(la_ctx *c, la_ws *w) {
  if (w->dev) cuda_scratch_free(c->dev, w->dev, c->s);
  free(w->host);
}

/* Read batch infos to the host (a sync); the first nonzero one's member in
 * *member and value in *value; false when all are 0. */
bool la_first_failure(la_ctx *c, const int *info, int64_t batch, int64_t *member_out, int *value,
                      ingot_status *st) {
  *st = INGOT_OK;
  if (batch == 0) return false;
  la_dev *g = &g_la[c->dev];
  size_t bytes = sizeof(int) * (size_t)batch;
  if (g->info_cap < bytes && bytes <= LA_PINNED_INFO_MAX) { /* pinned: a fast small read */
    if (g->info_host) cudaFreeHost(g->info_host);
    g->info_cap = bytes < 4096 ? 4096 : bytes;
    if (cudaMallocHost((void **)&g->info_host, g->info_cap) != cudaSuccess) {
      cudaGetLastError();
      g->info_host = NULL;
      g->info_cap = 0;
    }
  }
  int *h = g->info_cap >= bytes ? g->info_host : malloc(bytes);
  if (!h) {
    *st = ingot_set_error(INGOT_ERR_OOM, "linalg: out of host memory");
    return false;
  }
  *st = cuda_check(cudaMemcpyAsync(h, info, bytes, cudaMemcpyDeviceToHost, c->s), "copy info");
  if (!*st) *st = cuda_check(cudaStreamSynchronize(c->s), "sync");
  bool found = false;
  for (int64_t b = 0; !*st && b < batch && !found; b++)
    if (h[b]) {
      *member_out = b;
      *value = h[b];
      found = true;
    }
  if (h != g->info_host) free(h);
  return found;
}

/* Scratch of n elements of es bytes (zeroed when asked). */
void *la_scratch(la_ctx *c, int64_t n, size_t es, bool zero, ingot_status *st) {
  void *p = cuda_scratch_alloc(c->dev, (size_t)(n > 0 ? n : 1) * es, c->s);
  if (!p)
    *st = ingot_set_error(INGOT_ERR_OOM, "linalg: out of device memory");
  else if (zero)
    *st = cuda_check(cudaMemsetAsync(p, 0, (size_t)(n > 0 ? n : 1) * es, c->s), "memset");
  return p;
}

/* In-place conjugation of a complex tensor's contiguous storage. */
ingot_status la_conj_tensor(la_ctx *c, ingot_tensor *t) {
  ingot_dtype dt = ingot_dtype_of(t);
  if (dt != INGOT_C64 && dt != INGOT_C128) return INGOT_OK;
  return cuda_check(cuda_conj_inplace(dt, ingot_tensor_data(t), ingot_numel(t), c->s), "conj");
}

/* Per member: the binary exponent e with max|a_ij| in [2^(e-1), 2^e) (0 for
 * a zero member) read to the host; fails on non-finite input. */
int *la_member_exponents(const ingot_tensor *A, int64_t batch, ingot_status *st) {
  static const int last2[2] = {-2, -1};
  ingot_tensor *ab = ingot_abs(A); /* |a| for complex: any scale near the largest will do */
  ingot_tensor *mx = ab ? ingot_amax(ab, last2, 2, false) : NULL;
  ingot_release(ab);
  ingot_tensor *m64 = mx ? ingot_cast(mx, INGOT_F64) : NULL;
  double *h = malloc(sizeof(double) * (size_t)(batch > 0 ? batch : 1));
  int *e = malloc(sizeof(int) * (size_t)(batch > 0 ? batch : 1));
  *st = m64 && h && e         ? ingot_to_host(m64, h, sizeof(double) * (size_t)batch)
        : ingot_last_status() ? ingot_last_status()
                              : ingot_set_error(INGOT_ERR_OOM, "out of memory");
  for (int64_t b = 0; !*st && b < batch; b++) {
    if (!isfinite(h[b]))
      *st = ingot_set_error(INGOT_ERR_NUMERIC,
                            "batch member %lld: the input contains NaN or "
                            "infinity",
                            (long long)b);
    e[b] = 0;
    if (h[b] > 0) frexp(h[b], &e[b]);
  }
  ingot_release(mx);
  ingot_release(m64);
  free(h);
  if (*st) {
    free(e);
    e = NULL;
  }
  return e;
}
