/* Causal grouped-query attention over the model's float KV cache (the CPU
 * path of llama.c), split by key blocks as flash-decoding does it: a work item
 * (a workpool item) is (token, block of ATT_BLK positions); it reads each K
 * and V row of the block once for all heads and leaves, per head, the block's
 * max score, sum of exponentials and unnormalised output. A merge per token
 * then rescales the blocks by exp(max_b - max). One token's decode thus
 * spreads over all threads even with few KV heads. */
#include <math.h>
#include <string.h>

#include "../core/workpool.h"
#include "model_internal.h"

#define ATT_BLK 32 /* key positions per work item */

/* Scratch floats per work item: the group's scores, then per head its
 * max, sum and unnormalised output. */
static size_t item_floats(const ingot_model_config *c) {
  return (size_t)c->n_heads * (ATT_BLK + 2 + (size_t)c->head_dim);
}

size_t model_attention_scratch(const ingot_model_config *c, int64_t chunk) {
  const size_t nblk = ((size_t)c->ctx + ATT_BLK - 1) / ATT_BLK, per = item_floats(c);
  size_t n;
  if (__builtin_mul_overflow((size_t)chunk, nblk, &n) ||
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

/* y += a * x over n floats. */
static inline __attribute__((always_inline)) void axpy(float *y, float a, const float *x, int n) {
  int i = 0;
  for (; i + VL <= n; i += VL) {
    const v16f r = ld(y + i) + a * ld(x + i);
    memcpy(y + i, &r, sizeof r);
  }
  for (; i < n; i++) y[i] += a * x[i];
}

/* The 16 lane sums of r[0..15] as one vector (lane p = sum of r[p]): a
 * transposing add tree, 15 adds for 16 dot products instead of 15 each. */
static inline __attribute__((always_inline)) v16f hsum16x16(v16f *r) {
  for (int p = 0; p < 8; p++)
    r[p] = __builtin_shufflevector(r[2 * p], r[2 * p + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19,
                                   20, 21, 22, 23) +
           __builtin_shufflevector(r[2 * p], r[2 * p + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26,
                                   27, 28, 29, 30, 31);
  for (int p = 0; p < 4; p++)
    r[p] = __builtin_shufflevector(r[2 * p], r[2 * p + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19,
                                   24, 25, 26, 27) +
           __builtin_shufflevector(r[2 * p], r[2 * p + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22,
                                   23, 28, 29, 30, 31);
  for (int p = 0; p < 2; p++)
    r[p] = __builtin_shufflevector(r[2 * p], r[2 * p + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21,
                                   24, 25, 28, 29) +
           __builtin_shufflevector(r[2 * p], r[2 * p + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22,
                                   23, 26, 27, 30, 31);
  return __builtin_shufflevector(r[0], r[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28,
                                 30) +
         __builtin_shufflevector(r[0], r[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29,
                                 31);
}

/* exp(x) for x <= 0 (scores minus their max), Cephes' expf polynomial
 * (about 1 ulp); x below -87 (and NaN) gives exp(-87), ~1.6e-38: nothing
 * next to the max's 1. */
static inline __attribute__((always_inline)) v16f vexp(v16f x) {
  typedef int32_t v16i __attribute__((vector_size(64)));
  const v16i keep = x > -87.0f; /* all ones where x > -87 (false for NaN) */
  x = (v16f)((keep & (v16i)x) | (~keep & (v16i)((v16f){0} - 87.0f)));
  const v16i n = __builtin_convertvector(x * 1.44269504088896341f - 0.5f, v16i);
  const v16f nf = __builtin_convertvector(n, v16f);
  const v16f r = x - nf * 0.693359375f + nf * 2.12194440e-4f;
  v16f p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3333452e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * (v16f)((n + 127) << 23);
}

/* One item: positions [s0, s1) (s1 - s0 <= ATT_BLK) of every head of one
 * token; q [n_heads * hd]; out holds scores[nh][ATT_BLK], then per head
 * {max, sum, o[hd]} with o unnormalised. */
#if defined(__x86_64__) && defined(__GNUC__) && \
    !defined(__clang__) /* clang: 64-byte vector args in AVX2 code */
ATT_CLONES
#endif
static void att_block(const float *q, const float *kc, const float *vc, int64_t kvd, int hd, int nh,
                      int grp, int64_t s0, int64_t s1, float scale, float *out) {
  float *sc = out, *part = out + (size_t)nh * ATT_BLK;
  const int n = (int)(s1 - s0), hv = hd - hd % VL;
  for (int h = 0; h < nh; h++) {
    const float *qh = q + (size_t)h * hd;
    const size_t ko = (size_t)(h / grp) * hd;
    float *s = sc + (size_t)h * ATT_BLK;
    for (int i0 = 0; i0 < n; i0 += VL) {
      v16f r[VL];
      for (int p = 0; p < VL; p++) {
        r[p] = (v16f){0};
        if (i0 + p >= n) continue;
        const float *k = kc + (size_t)(s0 + i0 + p) * (size_t)kvd + ko;
        for (int c = 0; c < hv; c += VL) r[p] += ld(qh + c) * ld(k + c);
      }
      v16f d = hsum16x16(r);
      float dv[VL];
      memcpy(dv, &d, sizeof dv);
      for (int p = 0; p < VL && i0 + p < n; p++) {
        const float *k = kc + (size_t)(s0 + i0 + p) * (size_t)kvd + ko;
        for (int c = hv; c < hd; c++) dv[p] += qh[c] * k[c];
        s[i0 + p] = dv[p] * scale;
      }
    }
    float *pp = part + (size_t)h * (hd + 2), mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    int i = 0;
    for (; i + VL <= n; i += VL) {
      const v16f e = vexp(ld(s + i) - mx);
      memcpy(s + i, &e, sizeof e);
    }
    for (; i < n; i++) s[i] = expf(s[i] - mx);
    for (i = 0; i < n; i++) sum += s[i];
    pp[0] = mx;
    pp[1] = sum;
    /* o = sum_i p_i v_i, 16 columns at a time in a register */
    const float *v0 = vc + (size_t)s0 * (size_t)kvd + ko;
    for (int c = 0; c < hv; c += VL) {
      v16f acc = {0};
      for (i = 0; i < n; i++) acc += s[i] * ld(v0 + (size_t)i * (size_t)kvd + c);
      memcpy(pp + 2 + c, &acc, sizeof acc);
    }
    for (int c = hv; c < hd; c++) {
      float a = 0;
      for (i = 0; i < n; i++) a += s[i] * v0[(size_t)i * (size_t)kvd + c];
      pp[2 + c] = a;
    }
  }
}

/* One model_attention call as its work items see it. */
typedef struct att_job {
  const ingot_model *m;
  const float *kc, *vc;
  int64_t p0, nblk, kvd;
  int hd, nh, grp;
  size_t per;
  float scale;
} att_job;

/* Item it = t * nblk + b: block b of token t (nothing past its causal end). */
static void att_item(void *arg, int64_t it) {
  const att_job *j = arg;
  const int64_t b = it % j->nblk, t = it / j->nblk, npos = j->p0 + t + 1;
  if (b * ATT_BLK >= npos) return;
  const int64_t s1 = (b + 1) * ATT_BLK < npos ? (b + 1) * ATT_BLK : npos;
  att_block(j->m->q + (size_t)t * (size_t)j->nh * j->hd, j->kc, j->vc, j->kvd, j->hd, j->nh, j->grp,
            b * ATT_BLK, s1, j->scale, j->m->att + (size_t)it * j->per);
}

/* Token t's heads: its blocks rescaled by exp(max_b - max) and summed. */
static void att_merge(void *arg, int64_t t) {
  const att_job *j = arg;
  const int hd = j->hd;
  const int64_t nb = (j->p0 + t + ATT_BLK) / ATT_BLK;
  for (int h = 0; h < j->nh; h++) {
    const float *p0b =
        j->m->att + (size_t)(t * j->nblk) * j->per + (size_t)j->nh * ATT_BLK + (size_t)h * (hd + 2);
    float mx = -INFINITY, sum = 0;
    for (int64_t b = 0; b < nb; b++) mx = fmaxf(mx, p0b[(size_t)b * j->per]);
    float *out = j->m->xb + ((size_t)t * j->nh + (size_t)h) * hd;
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int64_t b = 0; b < nb; b++) {
      const float *p = p0b + (size_t)b * j->per, w = expf(p[0] - mx);
      sum += w * p[1];
      axpy(out, w, p + 2, hd);
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < hd; i++) out[i] *= inv;
  }
}

void model_attention(ingot_model *m, int l, int64_t p0, int64_t T) {
  const ingot_model_config *c = &m->cfg;
  const int hd = c->head_dim;
  const int64_t kvd = (int64_t)c->n_kv_heads * hd;
  att_job j = {.m = m,
               .kc = m->k_cache + (size_t)l * (size_t)c->ctx * (size_t)kvd,
               .vc = m->v_cache + (size_t)l * (size_t)c->ctx * (size_t)kvd,
               .p0 = p0,
               .nblk = (p0 + T + ATT_BLK - 1) / ATT_BLK,
               .kvd = kvd,
               .hd = hd,
               .nh = c->n_heads,
               .grp = c->n_heads / c->n_kv_heads,
               .per = item_floats(c),
               .scale = 1.0f / sqrtf((float)hd)};
  workpool_for(T * j.nblk, att_item, &j);
  workpool_for(T, att_merge, &j);
}
