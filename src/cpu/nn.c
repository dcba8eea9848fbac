/* CPU kernels of the fused transformer ops: QMATMUL, QGET_ROWS, RMS_NORM,
 * SWIGLU (contracts in src/core/ops_nn.c). The quantised products reuse the
 * GGML block code of src/model/quant.c: its matvec (reads the blocks
 * directly) for decode-size M, and for larger M a dequantised block of W
 * rows at a time multiplied by OpenBLAS. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "../core/fpconv.h"
#include "cpu.h"

/* Largest M that takes the matvec path: beyond it one GEMM per row block
 * of W wins (each dequantised block is reused by all M rows). */
#define QMATVEC_MAX_M 8
/* Floats of dequantised W per GEMM step (4 MiB: stays in L2/L3). */
#define QDEQ_FLOATS (1 << 20)

static inline float ld_f(const void *p, ingot_dtype dt, int64_t i) {
  switch (dt) {
    case INGOT_BF16:
      return fp_bf16_to_f32(((const uint16_t *)p)[i]);
    case INGOT_F16:
      return fp_f16_to_f32(((const uint16_t *)p)[i]);
    default:
      return ((const float *)p)[i];
  }
}

static inline void st_f(void *p, ingot_dtype dt, int64_t i, float v) {
  switch (dt) {
    case INGOT_BF16:
      ((uint16_t *)p)[i] = fp_f32_to_bf16(v);
      break;
    case INGOT_F16:
      ((uint16_t *)p)[i] = fp_f32_to_f16(v);
      break;
    default:
      ((float *)p)[i] = v;
      break;
  }
}

void cpu_rms_row(const void *xr, ingot_dtype dt, const void *wp, ingot_dtype wdt, int64_t n,
                 float eps, void *yr) {
  float ss = 0;
  for (int64_t i = 0; i < n; i++) {
    const float v = ld_f(xr, dt, i);
    ss += v * v;
  }
  const float inv = 1.0f / sqrtf(ss / (float)n + eps);
  for (int64_t i = 0; i < n; i++) st_f(yr, dt, i, ld_f(xr, dt, i) * inv * ld_f(wp, wdt, i));
}

/* K elements of a W row to f32: ggml blocks of type, or (type < 0: the f8
 * form of QMATMUL) f8e4m3fn bytes. */
static ingot_status deq_row(int type, const uint8_t *src, float *dst, int64_t K) {
  if (type >= 0) return ingot_ggml_dequantize(type, src, dst, K);
  for (int64_t k = 0; k < K; k++) dst[k] = fp_f8e4m3fn_to_f32(src[k]);
  return INGOT_OK;
}

/* y = x . W^T for x [M, K], W rows rs bytes apart (type < 0: f8e4m3fn rows,
 * always dequantised then multiplied by OpenBLAS). */
static ingot_status qproduct(int type, const uint8_t *wp, size_t rs, int64_t N, int64_t K,
                             const float *xp, int64_t M, float *yp) {
  if (M <= QMATVEC_MAX_M && type >= 0)
    return ingot_ggml_matvec_strided(type, wp, rs, N, K, xp, M, yp);
  if (M > INT32_MAX || K > INT32_MAX || N > INT32_MAX)
    return ingot_set_error(INGOT_ERR_ARG, "qmatmul: sizes beyond the BLAS int range");
  int64_t rb = QDEQ_FLOATS / K;
  if (rb < 16) rb = 16;
  if (rb > N) rb = N;
  float *buf = malloc((size_t)rb * (size_t)K * sizeof *buf);
  if (!buf) return ingot_set_error(INGOT_ERR_OOM, "qmatmul: out of memory");
  ingot_status st = INGOT_OK;
  for (int64_t r0 = 0; r0 < N && !st; r0 += rb) {
    const int64_t n = N - r0 < rb ? N - r0 : rb;
    for (int64_t r = 0; r < n && !st; r++) /* row by row: rows may be padded */
      st = deq_row(type, wp + (size_t)(r0 + r) * rs, buf + r * K, K);
    if (!st)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)n, (int)K, 1.0f, xp, (int)K,
                  buf, (int)K, 0.0f, yp + r0, (int)N);
  }
  free(buf);
  return st;
}

/* silu(g) * u, the SWIGLU op's value (also what qmatmul_swiglu multiplies). */
static inline float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

static ingot_status k_qmatmul(ingot_op_args *a) {
  const ingot_tensor *x = a->in[0], *w = a->in[1], *norm = a->in[2], *res = a->in[3];
  ingot_tensor *y = a->out[0];
  const int type = (int)a->iarg[0];
  const int64_t K = a->iarg[1], M = x->shape[0], N = w->shape[0];
  const float *xp = (const float *)tensor_ptr(x);
  float *yp = (float *)tensor_ptr(y), *xn = NULL;
  if (norm) { /* x normalised into a scratch copy, exactly as k_rms_norm */
    xn = malloc((size_t)M * (size_t)K * sizeof *xn);
    if (!xn) return ingot_set_error(INGOT_ERR_OOM, "qmatmul: out of memory");
    for (int64_t r = 0; r < M; r++)
      cpu_rms_row(xp + r * K, INGOT_F32, tensor_ptr(norm), INGOT_F32, K, (float)a->farg[0],
                  xn + r * K);
    xp = xn;
  } else if (a->iarg[2]) { /* x = gate | up [M, 2K]: silu(gate) * up into a scratch copy */
    xn = malloc((size_t)M * (size_t)K * sizeof *xn);
    if (!xn) return ingot_set_error(INGOT_ERR_OOM, "qmatmul: out of memory");
    for (int64_t r = 0; r < M; r++)
      for (int64_t j = 0; j < K; j++)
        xn[r * K + j] = silu_mul(xp[r * 2 * K + j], xp[r * 2 * K + K + j]);
    xp = xn;
  }
  ingot_status st =
      qproduct(type, (const uint8_t *)tensor_ptr(w), (size_t)w->shape[1], N, K, xp, M, yp);
  free(xn);
  if (!st && a->nin > 4 && a->in[4]) { /* f8 form: each output column times its row's scale */
    const float *sp = (const float *)tensor_ptr(a->in[4]);
    for (int64_t i = 0; i < M * N; i++) yp[i] *= sp[i % N];
  }
  if (!st && res) {
    const float *rp = (const float *)tensor_ptr(res);
    for (int64_t i = 0; i < M * N; i++) yp[i] += rp[i];
  }
  return st;
}

static ingot_status k_qget_rows(ingot_op_args *a) {
  const ingot_tensor *w = a->in[0], *ids = a->in[1];
  const int type = (int)a->iarg[0];
  const int64_t cols = a->iarg[1], T = ids->shape[0];
  ingot_status st = cpu_check_index("qget_rows", ids, w->shape[0], 0);
  if (st) return st;
  const size_t rs = (size_t)w->shape[1];
  const uint8_t *wp = (const uint8_t *)tensor_ptr(w);
  const int64_t *ip = (const int64_t *)tensor_ptr(ids);
  float *yp = (float *)tensor_ptr(a->out[0]);
  /* Rows in parallel (type and cols were checked by core: no row can fail). */
  int failed = 0;
#pragma omp parallel for schedule(static) reduction(| : failed) if (T * cols >= CPU_GRAIN && T > 1)
  for (int64_t t = 0; t < T; t++)
    failed |= ingot_ggml_dequantize(type, wp + (size_t)ip[t] * rs, yp + t * cols, cols) != 0;
  return failed ? ingot_set_error(INGOT_ERR_ARG, "qget_rows: dequantisation failed") : INGOT_OK;
}

static ingot_status k_rms_norm(ingot_op_args *a) {
  const ingot_tensor *x = a->in[0], *w = a->in[1];
  ingot_tensor *y = a->out[0];
  const ingot_dtype dt = x->dtype;
  const int64_t n = x->shape[x->ndim - 1], rows = ingot_numel(x) / n;
  const char *xp = tensor_ptr(x);
  char *yp = tensor_ptr(y);
  const size_t es = ingot_dtype_size(dt);
#pragma omp parallel for schedule(static) if (rows * n >= CPU_GRAIN && rows > 1)
  for (int64_t r = 0; r < rows; r++)
    cpu_rms_row(xp + (size_t)(r * n) * es, dt, tensor_ptr(w), w->dtype, n, (float)a->farg[0],
                yp + (size_t)(r * n) * es);
  return INGOT_OK;
}

static ingot_status k_swiglu(ingot_op_args *a) {
  const ingot_tensor *g = a->in[0], *u = a->in[1];
  ingot_tensor *y = a->out[0];
  const ingot_dtype dt = g->dtype;
  const int64_t n = ingot_numel(y), cols = a->iarg[2], sg = a->iarg[0], su = a->iarg[1];
  const void *gp = tensor_ptr(g), *up = tensor_ptr(u);
  void *yp = tensor_ptr(y);
#pragma omp parallel for schedule(static) if (n >= CPU_GRAIN)
  for (int64_t i = 0; i < n; i++) {
    const int64_t r = i / cols, c = i % cols;
    st_f(yp, dt, i, silu_mul(ld_f(gp, dt, r * sg + c), ld_f(up, dt, r * su + c)));
  }
  return INGOT_OK;
}

void cpu_register_nn(ingot_backend *be) {
  be->kernels[INGOT_OP_QMATMUL] = k_qmatmul;
  be->kernels[INGOT_OP_QGET_ROWS] = k_qget_rows;
  be->kernels[INGOT_OP_RMS_NORM] = k_rms_norm;
  be->kernels[INGOT_OP_SWIGLU] = k_swiglu;
}
