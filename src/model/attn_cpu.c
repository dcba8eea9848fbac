/* Causal grouped-query attention over the model's float KV cache (the CPU
 * path of llama.c), split by key blocks as flash-decoding does it: a work item
 * is (token, KV head, block of ATT_BLK positions); it reads each K and V row
 * once for the query heads of its group and leaves, per head, its block's
 * max score, sum of exponentials and unnormalised output. A merge per (token,
 * head) then rescales the blocks by exp(max_b - max). One token's decode
 * thus spreads over all threads even with few KV heads, and the K/V bytes
 * (the largest read of a long decode after the weights) are read once. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "model_internal.h"

#define ATT_BLK 64 /* key positions per work item */

/* Scratch floats per work item: the group's scores, then per head its
 * max, sum and unnormalised output. */
static size_t item_floats(const ingot_model_config *c) {
  const size_t grp = (size_t)(c->n_heads / c->n_kv_heads);
  return grp * (ATT_BLK + 2 + (size_t)c->head_dim);
}

size_t model_attention_scratch(const ingot_model_config *c, int64_t chunk) {
  const size_t nblk = ((size_t)c->ctx + ATT_BLK - 1) / ATT_BLK, per = item_floats(c);
  size_t n;
  if (__builtin_mul_overflow((size_t)chunk * (size_t)c->n_kv_heads, nblk, &n) ||
      __builtin_mul_overflow(n, per * sizeof(float), &(size_t){0}))
    return 0;
  return n * per;
}

/* 16-lane float vectors: one zmm with AVX-512, two ymm with AVX2, four xmm
 * otherwise (the clones below); loads through memcpy (no alignment needed). */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float v16f __attribute__((vector_size(64)));
#define VL 16
#define ATT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

static inline __attribute__((always_inline)) v16f ld(const float *p) {
  v16f v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline __attribute__((always_inline)) float hsum(v16f v) {
  float s[VL];
  memcpy(s, &v, sizeof s);
  for (int w = VL / 2; w > 0; w /= 2)
    for (int k = 0; k < w; k++) s[k] += s[k + w];
  return s[0];
}

static inline __attribute__((always_inline)) float dot(const float *a, const float *b, int n) {
  v16f acc = {0};
  int i = 0;
  for (; i + VL <= n; i += VL) acc += ld(a + i) * ld(b + i);
  float s = hsum(acc);
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

/* y += a * x over n floats. */
static inline __attribute__((always_inline)) void axpy(float *y, float a, const float *x, int n) {
  int i = 0;
  for (; i + VL <= n; i += VL) {
    const v16f r = ld(y + i) + a * ld(x + i);
    memcpy(y + i, &r, sizeof r);
  }
  for (; i < n; i++) y[i] += a * x[i];
}

/* One item: positions [s0, s1) of KV head kh for the grp query heads in q
 * (hd apart). out holds scores[grp][ATT_BLK], then per head {max, sum, o[hd]}. */
#if defined(__x86_64__) && defined(__GNUC__)
ATT_CLONES
#endif
static void att_block(const float *q, const float *kc, const float *vc, int64_t kvd, int hd,
                      int grp, int64_t s0, int64_t s1, float scale, float *out) {
  float *sc = out, *part = out + (size_t)grp * ATT_BLK;
  const int n = (int)(s1 - s0);
  for (int i = 0; i < n; i++) {
    const float *k = kc + (size_t)(s0 + i) * (size_t)kvd;
    for (int g = 0; g < grp; g++) sc[g * ATT_BLK + i] = dot(q + (size_t)g * hd, k, hd) * scale;
  }
  for (int g = 0; g < grp; g++) {
    float *s = sc + g * ATT_BLK, *p = part + (size_t)g * (hd + 2), mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    for (int i = 0; i < n; i++) sum += s[i] = expf(s[i] - mx);
    p[0] = mx;
    p[1] = sum;
    memset(p + 2, 0, (size_t)hd * sizeof(float));
  }
  for (int i = 0; i < n; i++) {
    const float *v = vc + (size_t)(s0 + i) * (size_t)kvd;
    for (int g = 0; g < grp; g++) axpy(part + (size_t)g * (hd + 2) + 2, sc[g * ATT_BLK + i], v, hd);
  }
}

void model_attention(ingot_model *m, int l, int64_t p0, int64_t T) {
  const ingot_model_config *c = &m->cfg;
  const int hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads, grp = nh / nkv;
  const int64_t kvd = (int64_t)nkv * hd, nblk = (p0 + T + ATT_BLK - 1) / ATT_BLK;
  const size_t per = item_floats(c);
  const float *kc = m->k_cache + (size_t)l * (size_t)c->ctx * (size_t)kvd;
  const float *vc = m->v_cache + (size_t)l * (size_t)c->ctx * (size_t)kvd;
  const float scale = 1.0f / sqrtf((float)hd);
  const int64_t items = T * nkv * nblk;
#pragma omp parallel if (items > 1)
  {
    /* item = (t * nkv + kh) * nblk + b; blocks past token t's causal end are skipped */
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
      const int64_t b = it % nblk, t = it / nblk / nkv, npos = p0 + t + 1;
      const int kh = (int)(it / nblk % nkv);
      if (b * ATT_BLK >= npos) continue;
      const int64_t s1 = (b + 1) * ATT_BLK < npos ? (b + 1) * ATT_BLK : npos;
      att_block(m->q + (size_t)t * (size_t)nh * hd + (size_t)kh * grp * hd, kc + (size_t)kh * hd,
                vc + (size_t)kh * hd, kvd, hd, grp, b * ATT_BLK, s1, scale,
                m->att + (size_t)it * per);
    }
#pragma omp for schedule(static)
    for (int64_t th = 0; th < T * nh; th++) {
      const int64_t t = th / nh, nb = (p0 + t + ATT_BLK) / ATT_BLK; /* blocks of token t */
      const int h = (int)(th % nh), kh = h / grp, g = h % grp;
      const float *p0b = m->att + (size_t)((t * nkv + kh) * nblk) * per + (size_t)grp * ATT_BLK +
                         (size_t)g * (hd + 2);
      float mx = -INFINITY, sum = 0;
      for (int64_t b = 0; b < nb; b++) mx = fmaxf(mx, p0b[(size_t)b * per]);
      float *out = m->xb + (size_t)th * hd;
      memset(out, 0, (size_t)hd * sizeof(float));
      for (int64_t b = 0; b < nb; b++) {
        const float *p = p0b + (size_t)b * per, w = expf(p[0] - mx);
        sum += w * p[1];
        axpy(out, w, p + 2, hd);
      }
      const float inv = 1.0f / sum;
      for (int i = 0; i < hd; i++) out[i] *= inv;
    }
  }
}
