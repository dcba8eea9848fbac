/* CPU kernels of the decode-time attention ops (fronts and contracts in
 * src/core/ops_attention.c): rope, kv_cache_write, attention_cached,
 * rope_kv_write (qmatmul_rope_kv: src/core/qkv_rope.h). Every position is
 * checked before anything is written. */
#include <math.h>
#include <stdlib.h>

#include "../core/fpconv.h"
#include "../core/qkv_rope.h"
#include "cpu.h"

/* INGOT_OK when every pos[t] lies in [0, ctx), else INGOT_ERR_INDEX naming it. */
static ingot_status check_positions(const char *op, const int32_t *pos, int64_t T, int64_t ctx) {
  for (int64_t t = 0; t < T; t++)
    if (pos[t] < 0 || pos[t] >= ctx)
      return ingot_set_error(INGOT_ERR_INDEX, "%s: position %d of row %lld is outside [0, %lld)",
                             op, pos[t], (long long)t, (long long)ctx);
  return INGOT_OK;
}

/* Rotate the D values of one head in place at position p (pairs by neox). */
static void rope_head(float *y, int32_t p, const double *inv, int64_t D, bool neox) {
  int64_t half = D / 2;
  for (int64_t i = 0; i < half; i++) {
    double ang = (double)p * inv[i];
    float c = (float)cos(ang), s = (float)sin(ang);
    int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    float x0 = y[a], x1 = y[b];
    y[a] = x0 * c - x1 * s;
    y[b] = x0 * s + x1 * c;
  }
}

static ingot_status k_rope(ingot_op_args *a) {
  const float *x = (const float *)ingot_tensor_data(a->in[0]);
  const int32_t *pos = (const int32_t *)ingot_tensor_data(a->in[1]);
  const double *inv = (const double *)ingot_tensor_data(a->in[2]);
  float *y = (float *)ingot_tensor_data(a->out[0]);
  const int64_t *sh = ingot_shape(a->in[0]);
  int64_t T = sh[0], H = sh[1], D = sh[2];
  bool neox = a->iarg[0] != 0;
#pragma omp parallel for schedule(static) if (T * H * D >= 2 * CPU_GRAIN)
  for (int64_t th = 0; th < T * H; th++) {
    for (int64_t i = 0; i < D; i++) y[th * D + i] = x[th * D + i];
    rope_head(y + th * D, pos[th / H], inv, D, neox);
  }
  return INGOT_OK;
}

static ingot_status k_kv_cache_write(ingot_op_args *a) {
  const int64_t *sh = ingot_shape(a->in[0]);
  int64_t T = sh[0], row = sh[1] * sh[2], ctx = ingot_shape(a->out[0])[0];
  const int32_t *pos = (const int32_t *)ingot_tensor_data(a->in[2]);
  ingot_status st = check_positions("kv_cache_write", pos, T, ctx);
  if (st) return st;
  bool half = ingot_dtype_of(a->out[0]) == INGOT_F16;
  for (int c = 0; c < 2; c++) {
    const float *src = (const float *)ingot_tensor_data(a->in[c]);
    char *dst = (char *)ingot_tensor_data(a->out[c]);
    for (int64_t t = 0; t < T; t++) {
      const float *s = src + t * row;
      if (half) {
        uint16_t *d = (uint16_t *)dst + (int64_t)pos[t] * row;
        for (int64_t i = 0; i < row; i++) d[i] = fp_f32_to_f16(s[i]);
      } else {
        float *d = (float *)dst + (int64_t)pos[t] * row;
        for (int64_t i = 0; i < row; i++) d[i] = s[i];
      }
    }
  }
  return INGOT_OK;
}

/* Cache row element i of a float32 or float16 cache. */
static inline float cache_at(const void *c, bool half, int64_t i) {
  return half ? fp_f16_to_f32(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

/* y = x, or rms_norm(x) * w as ingot_rms_norm computes it (w non-NULL). */
static void norm_head(const float *x, float *y, const float *w, int64_t D, float eps) {
  float inv = 1;
  if (w) {
    float ss = 0;
    for (int64_t i = 0; i < D; i++) ss += x[i] * x[i];
    inv = 1.0f / sqrtf(ss / (float)D + eps);
  }
  for (int64_t i = 0; i < D; i++) y[i] = w ? x[i] * inv * w[i] : x[i];
}

/* Cache row (pos p, head h) of a float32 or float16 cache = y[0..D). */
static void cache_put(void *c, bool half, int64_t at, const float *y, int64_t D) {
  for (int64_t i = 0; i < D; i++)
    if (half)
      ((uint16_t *)c)[at + i] = fp_f32_to_f16(y[i]);
    else
      ((float *)c)[at + i] = y[i];
}

static ingot_status k_rope_kv_write(ingot_op_args *a) {
  const int64_t *qs = ingot_shape(a->in[0]), *cs = ingot_shape(a->out[1]);
  int64_t T = qs[0], hq = qs[1], D = qs[2], ctx = cs[0], hkv = cs[1];
  const int32_t *pos = (const int32_t *)ingot_tensor_data(a->in[3]);
  ingot_status st = check_positions("rope_kv_write", pos, T, ctx);
  if (st) return st;
  const double *inv = (const double *)ingot_tensor_data(a->in[4]);
  const float *w[2] = {NULL, NULL};
  if (a->nin > 5) w[0] = ingot_tensor_data(a->in[5]), w[1] = ingot_tensor_data(a->in[6]);
  bool neox = a->iarg[0] != 0, half = ingot_dtype_of(a->out[1]) == INGOT_F16;
  float eps = (float)a->farg[0];
  float *qo = (float *)ingot_tensor_data(a->out[0]);
  /* Slot j of row t: q heads, then k heads, then v heads. */
  int64_t nslot = hq + 2 * hkv;
#pragma omp parallel for schedule(static) if (T * nslot * D >= 2 * CPU_GRAIN)
  for (int64_t ts = 0; ts < T * nslot; ts++) {
    int64_t t = ts / nslot, j = ts % nslot, which = j < hq ? 0 : j < hq + hkv ? 1 : 2;
    int64_t h = which == 0 ? j : which == 1 ? j - hq : j - hq - hkv;
    const float *x = (const float *)ingot_tensor_data(a->in[which]) + t * a->iarg[1 + 2 * which] +
                     h * a->iarg[2 + 2 * which];
    float buf[256];
    float *y = which == 0 ? qo + (t * hq + h) * D : buf;
    norm_head(x, y, which < 2 ? w[which] : NULL, D, eps);
    if (which < 2) rope_head(y, pos[t], inv, D, neox);
    if (which > 0)
      cache_put(ingot_tensor_data(a->out[which]), half, ((int64_t)pos[t] * hkv + h) * D, y, D);
  }
  return INGOT_OK;
}

static ingot_status k_attention_cached(ingot_op_args *a) {
  const int64_t *qs = ingot_shape(a->in[0]), *cs = ingot_shape(a->in[1]);
  int64_t T = qs[0], hq = qs[1], D = qs[2], ctx = cs[0], hkv = cs[1], grp = hq / hkv;
  const float *q = (const float *)ingot_tensor_data(a->in[0]);
  const void *kc = ingot_tensor_data(a->in[1]), *vc = ingot_tensor_data(a->in[2]);
  const int32_t *pos = (const int32_t *)ingot_tensor_data(a->in[3]);
  float *out = (float *)ingot_tensor_data(a->out[0]);
  bool half = ingot_dtype_of(a->in[1]) == INGOT_F16;
  float scale = (float)a->farg[0];
  ingot_status st = check_positions("attention_cached", pos, T, ctx);
  if (st) return st;
  ingot_status oom = INGOT_OK;
#pragma omp parallel
  {
    float *att = malloc((size_t)ctx * sizeof *att);
    if (!att) {
#pragma omp atomic write
      oom = INGOT_ERR_OOM;
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t th = 0; th < T * hq; th++) {
      if (!att) continue;
      int64_t t = th / hq, h = th % hq, kh = h / grp, npos = (int64_t)pos[t] + 1;
      const float *qi = q + th * D;
      float mx = -INFINITY;
      for (int64_t s = 0; s < npos; s++) {
        int64_t base = (s * hkv + kh) * D;
        float d = 0;
        for (int64_t i = 0; i < D; i++) d += qi[i] * cache_at(kc, half, base + i);
        att[s] = d * scale;
        if (att[s] > mx) mx = att[s];
      }
      float sum = 0;
      for (int64_t s = 0; s < npos; s++) sum += att[s] = expf(att[s] - mx);
      float *o = out + th * D;
      for (int64_t i = 0; i < D; i++) o[i] = 0;
      for (int64_t s = 0; s < npos; s++) {
        float w = att[s] / sum;
        int64_t base = (s * hkv + kh) * D;
        for (int64_t i = 0; i < D; i++) o[i] += w * cache_at(vc, half, base + i);
      }
    }
    free(att);
  }
  if (oom) return ingot_set_error(oom, "attention_cached: out of memory");
  return INGOT_OK;
}

void cpu_register_attention(ingot_backend *be) {
  be->kernels[INGOT_OP_ROPE] = k_rope;
  be->kernels[INGOT_OP_KV_CACHE_WRITE] = k_kv_cache_write;
  be->kernels[INGOT_OP_ATTENTION_CACHED] = k_attention_cached;
  be->kernels[INGOT_OP_ROPE_KV_WRITE] = k_rope_kv_write;
  /* the q|k|v product then rope_kv_write: exactly the two ops' results */
  be->kernels[INGOT_OP_QMATMUL_ROPE_KV] = qmatmul_rope_kv_compose;
  /* rope_kv_write then attention_cached: exactly the two ops' results */
  be->kernels[INGOT_OP_ROPE_KV_ATTENTION] = rope_kv_attention_compose;
  be->kernels[INGOT_OP_QMATMUL_ROPE_KV_ATTENTION] = qmatmul_rope_kv_attention_compose;
}
