/* Mixture-of-experts kernels on the CPU, the reference for CUDA (contracts
 * in src/core/ops_moe.c). Weight rows are widened to f32 once per (expert,
 * row) use and dotted in f32; ids are validated before anything is written. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "../core/moe_compose.h"
#include "cpu.h"

/* True when a beats b as a routing choice: larger logit, NaN largest, ties
 * to the lower id (ia < ib is the caller's order). */
static inline bool route_better(float a, int64_t ia, float b, int64_t ib) {
  if (isnan(a) || isnan(b)) return isnan(a) && (!isnan(b) || ia < ib);
  return a > b || (a == b && ia < ib);
}

static inline float load_lowp(ingot_dtype dt, const char *p, int64_t i) {
  switch (dt) {
    case INGOT_BF16:
      return fp_bf16_to_f32(((const uint16_t *)p)[i]);
    case INGOT_F16:
      return fp_f16_to_f32(((const uint16_t *)p)[i]);
    case INGOT_F8E4M3FN:
      return fp_f8e4m3fn_to_f32(((const uint8_t *)p)[i]);
    default:
      return ((const float *)p)[i];
  }
}

/* dst[0..n) = f32 of n elements of dtype dt from p. */
static void widen(float *dst, ingot_dtype dt, const char *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = load_lowp(dt, p, i);
}

static inline float dot(const float *a, const float *b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* row[0..E) = the logits of token t: widened from in[0], or (nin 2) the f32
 * dots of x[t] with the router's rows (xr, rr: D-float scratch rows); nin 3:
 * x[t] normalised first (RMS_NORM's row, weight in[2], eps farg[0]) into
 * out[2]'s row t. */
static void logits_row(const ingot_op_args *a, int64_t t, float *row, float *xr, float *rr) {
  const ingot_tensor *L = a->in[0];
  const char *pl = tensor_ptr(L);
  const int64_t es = (int64_t)ingot_dtype_size(L->dtype);
  if (a->nin < 2) {
    widen(row, L->dtype, pl + t * L->shape[1] * es, L->shape[1]);
    return;
  }
  const ingot_tensor *R = a->in[1];
  const int64_t D = L->shape[1], E = R->shape[0], rs = (int64_t)ingot_dtype_size(R->dtype);
  if (a->nin > 2) {
    float *xn = (float *)tensor_ptr(a->out[2]) + t * D;
    cpu_rms_row(pl + t * D * es, INGOT_F32, tensor_ptr(a->in[2]), INGOT_F32, D, (float)a->farg[0],
                xn);
    xr = xn;
  } else {
    widen(xr, L->dtype, pl + t * D * es, D);
  }
  for (int64_t e = 0; e < E; e++) {
    widen(rr, R->dtype, (const char *)tensor_ptr(R) + e * D * rs, D);
    row[e] = dot(xr, rr, D);
  }
}

static ingot_status k_route(ingot_op_args *a) {
  const ingot_tensor *L = a->in[0];
  const int64_t D = a->nin > 1 ? L->shape[1] : 0;
  int64_t T = L->shape[0], E = a->nin > 1 ? a->in[1]->shape[0] : L->shape[1], k = a->iarg[0];
  bool renorm = a->iarg[1] != 0;
  float *pw = (float *)tensor_ptr(a->out[0]);
  int32_t *pi = (int32_t *)tensor_ptr(a->out[1]);
  float *row = malloc((size_t)(E + 2 * D) * sizeof(float) + 1);
  bool *taken = malloc((size_t)E + 1);
  if (!row || !taken) {
    free(row);
    free(taken);
    return ingot_set_error(INGOT_ERR_OOM, "moe_route: out of memory");
  }
  for (int64_t t = 0; t < T; t++) {
    logits_row(a, t, row, row + E, row + E + D);
    float *w = pw + t * k;
    int32_t *id = pi + t * k;
    for (int64_t e = 0; e < E; e++) taken[e] = false;
    for (int64_t j = 0; j < k; j++) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; e++)
        if (!taken[e] && (best < 0 || route_better(row[e], e, row[best], best))) best = e;
      taken[best] = true;
      id[j] = (int32_t)best;
    }
    float m = row[id[0]], s = 0;
    for (int64_t e = 0; e < E; e++) s += expf(row[e] - m);
    float ks = 0;
    for (int64_t j = 0; j < k; j++) ks += (w[j] = expf(row[id[j]] - m) / s);
    if (renorm)
      for (int64_t j = 0; j < k; j++) w[j] /= ks;
  }
  free(row);
  free(taken);
  return INGOT_OK;
}

/* All ids in [0, E), else an error naming op and the first bad one. */
static ingot_status check_ids(const char *op, const ingot_tensor *ids, int64_t E) {
  const int32_t *p = (const int32_t *)tensor_ptr(ids);
  int64_t n = ingot_numel(ids);
  for (int64_t i = 0; i < n; i++)
    if (p[i] < 0 || p[i] >= E)
      return ingot_set_error(INGOT_ERR_INDEX,
                             "%s: expert id %d at position %lld is out of range "
                             "[0, %lld)",
                             op, p[i], (long long)i, (long long)E);
  return INGOT_OK;
}

static inline float silu(float g) { return g / (1.0f + expf(-g)); }

static ingot_status k_gate_up(ingot_op_args *a) {
  const ingot_tensor *X = a->in[0], *W = a->in[1], *ids = a->in[2], *S = a->in[3];
  int64_t T = X->shape[0], K = X->shape[1], E = W->shape[0], NI = W->shape[1] / 2;
  int64_t k = ids->shape[1];
  ingot_status st = check_ids("moe_gate_up", ids, E);
  if (st) return st;
  if (T * k * NI == 0) return INGOT_OK;
  size_t es = ingot_dtype_size(W->dtype);
  float *xf = malloc((size_t)(T * K) * sizeof(float) + 1);
  float *buf = malloc((size_t)(2 * K * omp_get_max_threads()) * sizeof(float) + 1);
  if (!xf || !buf) {
    free(xf);
    free(buf);
    return ingot_set_error(INGOT_ERR_OOM, "moe_gate_up: out of memory");
  }
  widen(xf, X->dtype, tensor_ptr(X), T * K);
  const int32_t *pid = (const int32_t *)tensor_ptr(ids);
  const char *pw = tensor_ptr(W);
  const float *sc = S ? (const float *)tensor_ptr(S) : NULL;
  float *h = (float *)tensor_ptr(a->out[0]);
  int64_t n = T * k * NI;
#pragma omp parallel for schedule(static) if (n * K >= CPU_GRAIN)
  for (int64_t o = 0; o < n; o++) {
    float *g = buf + 2 * K * omp_get_thread_num(), *u = g + K;
    int64_t s = o / NI, i = o % NI, t = s / k, e = pid[s];
    const char *we = pw + (size_t)(e * 2 * NI * K) * es;
    widen(g, W->dtype, we + (size_t)(i * K) * es, K);
    widen(u, W->dtype, we + (size_t)((NI + i) * K) * es, K);
    float gv = dot(xf + t * K, g, K), uv = dot(xf + t * K, u, K);
    if (sc) gv *= sc[e * 2 * NI + i], uv *= sc[e * 2 * NI + NI + i];
    h[o] = silu(gv) * uv;
  }
  free(xf);
  free(buf);
  return INGOT_OK;
}

static ingot_status k_down(ingot_op_args *a) {
  const ingot_tensor *H = a->in[0], *W = a->in[1], *ids = a->in[2];
  int64_t T = H->shape[0], k = H->shape[1], NI = H->shape[2], E = W->shape[0], K = W->shape[1];
  ingot_status st = check_ids("moe_down", ids, E);
  if (st) return st;
  if (T * K == 0) return INGOT_OK;
  size_t es = ingot_dtype_size(W->dtype);
  float *buf = malloc((size_t)(NI * omp_get_max_threads()) * sizeof(float) + 1);
  if (!buf) return ingot_set_error(INGOT_ERR_OOM, "moe_down: out of memory");
  const float *h = (const float *)tensor_ptr(H), *wt = (const float *)tensor_ptr(a->in[3]);
  const float *sc = a->in[4] ? (const float *)tensor_ptr(a->in[4]) : NULL;
  const int32_t *pid = (const int32_t *)tensor_ptr(ids);
  const char *pw = tensor_ptr(W);
  float *y = (float *)tensor_ptr(a->out[0]);
  const float *res = a->nin > 5 && a->in[5] ? (const float *)tensor_ptr(a->in[5]) : NULL;
#pragma omp parallel for schedule(static) if (T * K * k * NI >= CPU_GRAIN)
  for (int64_t o = 0; o < T * K; o++) {
    float *row = buf + NI * omp_get_thread_num();
    int64_t t = o / K, n = o % K;
    float acc = 0;
    for (int64_t j = 0; j < k; j++) {
      int64_t e = pid[t * k + j];
      widen(row, W->dtype, pw + (size_t)((e * K + n) * NI) * es, NI);
      float d = dot(h + (t * k + j) * NI, row, NI);
      if (sc) d *= sc[e * K + n];
      acc += wt[t * k + j] * d;
    }
    y[o] = res ? res[o] + acc : acc;
  }
  free(buf);
  return INGOT_OK;
}

void cpu_register_moe(ingot_backend *be) {
  be->kernels[INGOT_OP_MOE_ROUTE] = k_route;
  be->kernels[INGOT_OP_MOE_GATE_UP] = k_gate_up;
  be->kernels[INGOT_OP_MOE_DOWN] = k_down;
  be->kernels[INGOT_OP_MOE_BLOCK] = moe_block_compose; /* the three kernels above */
}
