/* Matvec with int8 activations, as llama.cpp does it: x is rounded per block
 * of 32 to int8 with an f16 scale d (and, for Q4_1, s = d * sum(q)) exactly
 * like ggml's quantize_row_q8_1_ref, then every weight block is an integer dot
 * product scaled once: d_w * d_x * sumi (+ m_w * s_x for Q4_1). Kernels: AVX-512
 * VNNI (dpbusd), AVX2 (maddubs) and portable C, picked at run time. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fpconv.h"
#include "ingot/backend.h"
#include "ingot/quant.h"
#include "../core/workpool.h"
#include "quant_q8.h"

#define QK 32

/* Activations in Q8_1 form: q[j*cols + c], per-block d and s as decoded f16. */
typedef struct q8_job {
  int type;
  const uint8_t *w;
  size_t row_size, ts;
  int64_t rows, cols, nb, nx;
  const int8_t *q;
  const float *d, *s;
  float *y;
  /* AVX-512 only, per x and pair of blocks: the 64 int8 in the lane order of
   * the weights (Q4: lo0 lo1 hi0 hi1 per 16 bytes), d_x and s_x per int32 lane */
  const int8_t *xqp;
  const float *xdl, *xsl;
} q8_job;

static float f16_at(const uint8_t *p) {
  return fp_f16_to_f32((uint16_t)(p[0] | (uint16_t)p[1] << 8));
}

/* ggml's quantize_row_q8_1_ref (Q8_0's d and q are the same numbers). */
static void quantize_q8_1(const float *x, int64_t nb, int8_t *q, float *d, float *s) {
  for (int64_t b = 0; b < nb; b++) {
    const float *xb = x + b * QK;
    float amax = 0;
    for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(xb[i]));
    const float dd = amax / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    int sum = 0;
    for (int i = 0; i < QK; i++) {
      /* roundf (half away from zero) without a libm call; clamping first
       * changes nothing (|x * id| <= 127 up to rounding) and keeps NaN or inf
       * from an undefined conversion */
      const float v = fminf(fmaxf(xb[i] * id, -127.0f), 127.0f);
      int iv = (int)v;
      const float fr = v - (float)iv;
      iv += (fr >= 0.5f) - (fr <= -0.5f);
      q[b * QK + i] = (int8_t)iv;
      sum += iv;
    }
    d[b] = fp_f16_to_f32(fp_f32_to_f16(dd));
    s[b] = fp_f16_to_f32(fp_f32_to_f16((float)sum * dd));
  }
}

/* ---- portable ---- */

/* One block's contribution (the portable path, and the odd last block of the
 * two-block AVX-512 loop). noinline: inlined into the AVX-512 VNNI kernels,
 * gcc 12 at -O3 vectorised Q8_0's signed x signed dot with vpdpbusd (unsigned
 * x signed) and got wrong sums; compiled for the base ISA it is exact. */
__attribute__((noinline)) static float blk_scalar(int type, const uint8_t *blk, const int8_t *x, float xd, float xs) {
  int sumi = 0;
  if (type == INGOT_GGML_Q8_0) {
    for (int i = 0; i < QK; i++) sumi += (int)(int8_t)blk[2 + i] * x[i];
    return (float)sumi * (f16_at(blk) * xd);
  }
  const int q41 = type == INGOT_GGML_Q4_1, off = q41 ? 0 : 8;
  const uint8_t *qs = blk + (q41 ? 4 : 2);
  for (int i = 0; i < QK / 2; i++)
    sumi += ((qs[i] & 0x0F) - off) * x[i] + ((qs[i] >> 4) - off) * x[i + QK / 2];
  const float v = (float)sumi * (f16_at(blk) * xd);
  return q41 ? v + f16_at(blk + 2) * xs : v;
}

static float row_generic(const q8_job *jb, const uint8_t *row, int64_t j) {
  const int8_t *xq = jb->q + j * jb->cols;
  const float *xd = jb->d + j * jb->nb, *xs = jb->s + j * jb->nb;
  float sum = 0;
  for (int64_t b = 0; b < jb->nb; b++)
    sum += blk_scalar(jb->type, row + (size_t)b * jb->ts, xq + b * QK, xd[b], xs[b]);
  return sum;
}

static void rows_generic(const q8_job *jb, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; r++)
    for (int64_t j = 0; j < jb->nx; j++)
      jb->y[j * jb->rows + r] = row_generic(jb, jb->w + (size_t)r * jb->row_size, j);
}

typedef void (*q8_kernel)(const q8_job *jb, int64_t r0, int64_t r1);

#if defined(__x86_64__) && defined(__GNUC__)
#define INGOT_Q8_X86 1
#include <immintrin.h>

/* The 32 weights of a block as bytes in x order (nibble lo = 0..15, hi =
 * 16..31); Q4_0 and Q8_0 signed, Q4_1 unsigned. */
#define Q8_W256(type, blk)                                                                      \
  ((type) == INGOT_GGML_Q8_0                                                                    \
       ? _mm256_loadu_si256((const __m256i *)(const void *)((blk) + 2))                         \
       : Q8_NIB256(                                                                             \
             _mm_loadu_si128(                                                                   \
                 (const __m128i *)(const void *)((blk) + ((type) == INGOT_GGML_Q4_1 ? 4 : 2))), \
             (type) == INGOT_GGML_Q4_0))
#define Q8_NIB256(q, sub8)                                                                     \
  _mm256_sub_epi8(                                                                             \
      _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16((q), 4), (q)), _mm256_set1_epi8(0x0F)), \
      _mm256_set1_epi8((sub8) ? 8 : 0))

/* AVX2: int32x8 of a block's dot via maddubs (unsigned x signed): signed
 * weights go through |w| and x with w's sign (llama.cpp's trick). */
__attribute__((target("avx2,fma,f16c"))) static float row_avx2(const q8_job *jb, const uint8_t *row,
                                                               int64_t j) {
  const int8_t *xq = jb->q + j * jb->cols;
  const float *xd = jb->d + j * jb->nb, *xs = jb->s + j * jb->nb;
  const int type = jb->type, q41 = type == INGOT_GGML_Q4_1;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float msum = 0;
  for (int64_t b = 0; b < jb->nb; b++) {
    const uint8_t *blk = row + (size_t)b * jb->ts;
    __m256i w = Q8_W256(type, blk);
    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + b * QK));
    if (!q41) {
      x = _mm256_sign_epi8(x, w);
      w = _mm256_sign_epi8(w, w);
    }
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
    const float dw = _cvtsh_ss((unsigned short)(blk[0] | blk[1] << 8));
    const __m256 sc = _mm256_set1_ps(dw * xd[b]);
    if (b & 1)
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc1);
    else
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc0);
    if (q41) msum += _cvtsh_ss((unsigned short)(blk[2] | blk[3] << 8)) * xs[b];
  }
  acc0 = _mm256_add_ps(acc0, acc1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h) + msum;
}

__attribute__((target("avx2,fma,f16c"))) static void rows_avx2(const q8_job *jb, int64_t r0,
                                                               int64_t r1) {
  for (int64_t r = r0; r < r1; r++)
    for (int64_t j = 0; j < jb->nx; j++)
      jb->y[j * jb->rows + r] = row_avx2(jb, jb->w + (size_t)r * jb->row_size, j);
}

/* AVX-512 VNNI: two blocks per zmm, dpbusd (u8 x s8 -> i32, no saturation);
 * signed weights through |w| and x negated where w < 0. One function per type
 * (constant type: no per-block branches). */
#define Q8_T512 "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define VN_INL __attribute__((target(Q8_T512), always_inline)) static inline

/* Block (0 or 1 of a pair) of int32 lane l. */
static int vn_blk(int type, int l) { return type == INGOT_GGML_Q8_0 ? l >> 3 : (l >> 2) & 1; }

VN_INL __m512i vn_w(int type, const uint8_t *b0, const uint8_t *b1) {
  if (type == INGOT_GGML_Q8_0)
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)(b0 + 2))),
        _mm256_loadu_si256((const __m256i *)(const void *)(b1 + 2)), 1);
  const int o = type == INGOT_GGML_Q4_1 ? 4 : 2;
  const __m256i q = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(b0 + o))),
      _mm_loadu_si128((const __m128i *)(const void *)(b1 + o)), 1);
  __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
  v = _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
  if (type == INGOT_GGML_Q4_0) v = _mm512_sub_epi8(v, _mm512_set1_epi8(8));
  return v;
}

VN_INL __m512 vn_dot(int type, __m512i w, __m512i x) {
  if (type != INGOT_GGML_Q4_1) {
    x = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
    w = _mm512_abs_epi8(w);
  }
  return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x));
}

VN_INL uint16_t vn_h(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* 8 halves at byte offset off of blocks b, b+1 of rows w0..w3, as floats
 * [k*4 + i] (block k, row i). */
VN_INL __m512 vn_h8(const uint8_t *const *wr, size_t o0, size_t o1) {
  const __m128i h =
      _mm_setr_epi16((short)vn_h(wr[0] + o0), (short)vn_h(wr[1] + o0), (short)vn_h(wr[2] + o0),
                     (short)vn_h(wr[3] + o0), (short)vn_h(wr[0] + o1), (short)vn_h(wr[1] + o1),
                     (short)vn_h(wr[2] + o1), (short)vn_h(wr[3] + o1));
  return _mm512_castps256_ps512(_mm256_cvtph_ps(h));
}

#define VN_ROW4(i)                                                                              \
  do {                                                                                          \
    const __m512 p_ = vn_dot(T, vn_w(T, wr[i] + o0, wr[i] + o1), x);                            \
    acc##i = _mm512_fmadd_ps(p_, _mm512_mul_ps(_mm512_permutexvar_ps(ixd##i, dm), xd), acc##i); \
    if (T == INGOT_GGML_Q4_1)                                                                   \
      acc##i = _mm512_fmadd_ps(_mm512_permutexvar_ps(ixm##i, dm), xs, acc##i);                  \
  } while (0)

/* Prefill (and leftover rows): R rows at once, each pair of weight blocks
 * expanded once and each x pair loaded once for the R rows. */
VN_INL void vn_many(const int T, const int R, const q8_job *jb, int64_t r0, __mmask16 m1) {
  const size_t ts = jb->ts;
  const int64_t nb = jb->nb, np = nb / 2, nx = jb->nx;
  __m512 acc[64][4];
  float msum[64][4];
  const uint8_t *wr[4];
  for (int i = 0; i < R; i++) wr[i] = jb->w + (size_t)(r0 + i) * jb->row_size;
  for (int64_t j = 0; j < nx; j++)
    for (int i = 0; i < R; i++) acc[j][i] = _mm512_setzero_ps(), msum[j][i] = 0;
  for (int64_t p = 0; p < np; p++) {
    __m512i w[4];
    __mmask64 neg[4];
    __m512 dv[4];
    float mm[4][2];
    for (int i = 0; i < R; i++) {
      const uint8_t *b0 = wr[i] + (size_t)(2 * p) * ts, *b1 = b0 + ts;
      w[i] = vn_w(T, b0, b1);
      neg[i] = 0;
      if (T != INGOT_GGML_Q4_1) {
        neg[i] = _mm512_movepi8_mask(w[i]);
        w[i] = _mm512_abs_epi8(w[i]);
      }
      dv[i] = _mm512_mask_blend_ps(m1, _mm512_set1_ps(_cvtsh_ss(vn_h(b0))),
                                   _mm512_set1_ps(_cvtsh_ss(vn_h(b1))));
      if (T == INGOT_GGML_Q4_1)
        mm[i][0] = _cvtsh_ss(vn_h(b0 + 2)), mm[i][1] = _cvtsh_ss(vn_h(b1 + 2));
    }
    for (int64_t j = 0; j < nx; j++) {
      const __m512i x = _mm512_loadu_si512(jb->xqp + (j * np + p) * 64);
      const float *xd = jb->d + j * nb + 2 * p, *xs = jb->s + j * nb + 2 * p;
      const __m512 xdv = _mm512_mask_blend_ps(m1, _mm512_set1_ps(xd[0]), _mm512_set1_ps(xd[1]));
      for (int i = 0; i < R; i++) {
        __m512i xi = x;
        if (T != INGOT_GGML_Q4_1) xi = _mm512_mask_sub_epi8(x, neg[i], _mm512_setzero_si512(), x);
        const __m512 pr = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w[i], xi));
        acc[j][i] = _mm512_fmadd_ps(pr, _mm512_mul_ps(dv[i], xdv), acc[j][i]);
        if (T == INGOT_GGML_Q4_1) msum[j][i] += mm[i][0] * xs[0] + mm[i][1] * xs[1];
      }
    }
  }
  for (int64_t j = 0; j < nx; j++)
    for (int i = 0; i < R; i++) {
      float v = _mm512_reduce_add_ps(acc[j][i]) + msum[j][i];
      if (nb & 1)
        v += blk_scalar(T, wr[i] + (size_t)(nb - 1) * ts, jb->q + j * jb->cols + (nb - 1) * QK,
                        jb->d[j * nb + nb - 1], jb->s[j * nb + nb - 1]);
      jb->y[j * jb->rows + r0 + i] = v;
    }
}

VN_INL void vn_rows(const int T, const q8_job *jb, int64_t r0, int64_t r1) {
  const size_t ts = jb->ts;
  const int64_t nb = jb->nb, np = nb / 2, nx = jb->nx;
  int32_t ixs[4][16];
  __mmask16 m1 = 0;
  for (int l = 0; l < 16; l++) {
    for (int i = 0; i < 4; i++) ixs[i][l] = vn_blk(T, l) * 4 + i;
    if (vn_blk(T, l)) m1 |= (__mmask16)(1u << l);
  }
  /* decode: four rows share each load of x and one gather of the 8 scale
   * dwords (d, and m for Q4_1) of their pair of blocks, converted at once:
   * dm lane 2j is d, 2j+1 the next half, of block j / 4 of row j % 4 */
  if (nx == 1 && 3 * jb->row_size + ts <= INT32_MAX) {
    int32_t ixd[4][16], gi[8];
    for (int j = 0; j < 8; j++)
      gi[j] = (int32_t)((size_t)(j % 4) * jb->row_size + (size_t)(j / 4) * ts);
    for (int i = 0; i < 4; i++)
      for (int l = 0; l < 16; l++) ixd[i][l] = 2 * ixs[i][l];
    const __m256i gix = _mm256_loadu_si256((const __m256i *)(const void *)gi);
    const __m512i one = _mm512_set1_epi32(1);
    const __m512i ixd0 = _mm512_loadu_si512(ixd[0]), ixd1 = _mm512_loadu_si512(ixd[1]),
                  ixd2 = _mm512_loadu_si512(ixd[2]), ixd3 = _mm512_loadu_si512(ixd[3]);
    const __m512i ixm0 = _mm512_add_epi32(ixd0, one), ixm1 = _mm512_add_epi32(ixd1, one),
                  ixm2 = _mm512_add_epi32(ixd2, one), ixm3 = _mm512_add_epi32(ixd3, one);
    for (; r0 + 4 <= r1; r0 += 4) {
      const uint8_t *wr[4];
      for (int i = 0; i < 4; i++) wr[i] = jb->w + (size_t)(r0 + i) * jb->row_size;
      __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
      for (int64_t p = 0; p < np; p++) {
        const size_t o0 = (size_t)(2 * p) * ts, o1 = o0 + ts;
        const __m512i x = _mm512_loadu_si512(jb->xqp + p * 64);
        const __m512 xd = _mm512_loadu_ps(jb->xdl + p * 16);
        const __m512 dm = _mm512_cvtph_ps(
            _mm256_i32gather_epi32((const int *)(const void *)(wr[0] + o0), gix, 1));
        const __m512 xs = T == INGOT_GGML_Q4_1 ? _mm512_loadu_ps(jb->xsl + p * 16) : dm;
        VN_ROW4(0);
        VN_ROW4(1);
        VN_ROW4(2);
        VN_ROW4(3);
      }
      float y4[4] = {_mm512_reduce_add_ps(acc0), _mm512_reduce_add_ps(acc1),
                     _mm512_reduce_add_ps(acc2), _mm512_reduce_add_ps(acc3)};
      for (int i = 0; i < 4; i++) {
        if (nb & 1)
          y4[i] += blk_scalar(T, wr[i] + (size_t)(nb - 1) * ts, jb->q + (nb - 1) * QK,
                              jb->d[nb - 1], jb->s[nb - 1]);
        jb->y[r0 + i] = y4[i];
      }
    }
  }
  for (; r0 + 4 <= r1; r0 += 4) vn_many(T, 4, jb, r0, m1);
  for (; r0 < r1; r0++) vn_many(T, 1, jb, r0, m1);
}

__attribute__((target(Q8_T512))) static void rows_vnni(const q8_job *jb, int64_t r0, int64_t r1) {
  if (jb->type == INGOT_GGML_Q4_1)
    vn_rows(INGOT_GGML_Q4_1, jb, r0, r1);
  else if (jb->type == INGOT_GGML_Q8_0)
    vn_rows(INGOT_GGML_Q8_0, jb, r0, r1);
  else
    vn_rows(INGOT_GGML_Q4_0, jb, r0, r1);
}

/* The pair layout rows_vnni reads (see q8_job). */
static void vn_prepare(const q8_job *jb, int8_t *xqp, float *xdl, float *xsl) {
  const int64_t np = jb->nb / 2;
  for (int64_t j = 0; j < jb->nx; j++)
    for (int64_t p = 0; p < np; p++) {
      const int8_t *src = jb->q + j * jb->cols + p * 64;
      int8_t *dst = xqp + (j * np + p) * 64;
      if (jb->type == INGOT_GGML_Q8_0) {
        memcpy(dst, src, 64);
      } else { /* x0lo x1lo x0hi x1hi */
        memcpy(dst, src, 16);
        memcpy(dst + 16, src + 32, 16);
        memcpy(dst + 32, src + 16, 16);
        memcpy(dst + 48, src + 48, 16);
      }
      float *dl = xdl + (j * np + p) * 16, *sl = xsl + (j * np + p) * 16;
      for (int l = 0; l < 16; l++) {
        const int k = vn_blk(jb->type, l);
        dl[l] = jb->d[j * jb->nb + 2 * p + k];
        /* s once per block: the lanes are summed */
        const int first = l == (jb->type == INGOT_GGML_Q8_0 ? 8 * k : 4 * k);
        sl[l] = first ? jb->s[j * jb->nb + 2 * p + k] : 0.0f;
      }
    }
}
#endif

/* The widest kernel this CPU runs; INGOT_QUANT_ISA=generic|avx2 caps it. */
static q8_kernel pick_q8(void) {
  q8_kernel k = rows_generic;
#ifdef INGOT_Q8_X86
  const char *env = getenv("INGOT_QUANT_ISA");
  if (env && strcmp(env, "generic") == 0) return k;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    k = rows_avx2;
  if (env && strcmp(env, "avx2") == 0) return k;
  if (k == rows_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni"))
    k = rows_vnni;
#endif
  return k;
}

ingot_status ingot_ggml_matvec_q8(int type, const void *w, int64_t rows, int64_t cols,
                                  const float *x, int64_t nx, float *y) {
  if (type != INGOT_GGML_Q4_0 && type != INGOT_GGML_Q4_1 && type != INGOT_GGML_Q8_0)
    return ingot_ggml_matvec(type, w, rows, cols, x, nx, y);
  if (rows < 0 || cols < 0)
    return ingot_set_error(INGOT_ERR_ARG, "ggml_matvec_q8: negative size %lld x %lld",
                           (long long)rows, (long long)cols);
  if (cols % QK)
    return ingot_set_error(INGOT_ERR_ARG,
                           "ggml_matvec_q8: %lld columns is not a multiple of the %s block size "
                           "32",
                           (long long)cols, ingot_ggml_type_name(type));
  if (nx < 1 || nx > 64)
    return ingot_set_error(INGOT_ERR_ARG, "ggml_matvec_q8: nx must be in 1..64, got %lld",
                           (long long)nx);
  if (!w || !x || !y) return ingot_set_error(INGOT_ERR_ARG, "ggml_matvec_q8: NULL pointer");
  if (rows == 0 || cols == 0) {
    if (cols == 0)
      for (int64_t i = 0; i < rows * nx; i++) y[i] = 0;
    return INGOT_OK;
  }
  return q8_matvec_many(1, type, &w, &rows, cols, x, nx, &y);
}

/* Chunk c of the rows of a q8_matvec_many call (a workpool item). */
typedef struct many_job {
  q8_kernel k;
  const q8_job *jb;
  const int64_t *first;
  int64_t rb; /* rows per chunk, a multiple of 16 */
} many_job;

static void many_chunk(void *arg, int64_t c) {
  const many_job *mj = arg;
  int i = 0;
  while (c >= mj->first[i + 1]) i++;
  const int64_t rb = mj->rb, r0 = (c - mj->first[i]) * rb,
                r1 = r0 + rb < mj->jb[i].rows ? r0 + rb : mj->jb[i].rows;
  mj->k(&mj->jb[i], r0, r1);
}

ingot_status q8_matvec_many(int n, int type, const void *const *w, const int64_t *rows,
                            int64_t cols, const float *x, int64_t nx, float *const *y) {
  const int64_t nb = cols / QK;
  /* floats first: the int8 part's length is only a multiple of 32 */
  float *buf = malloc((size_t)(2 * nx * nb) * sizeof(float) + (size_t)(nx * cols));
  if (!buf) return ingot_set_error(INGOT_ERR_OOM, "ggml_matvec_q8: out of memory");
  float *xd = buf, *xs = buf + nx * nb;
  int8_t *xq = (int8_t *)(void *)(buf + 2 * nx * nb);
  for (int64_t j = 0; j < nx; j++)
    quantize_q8_1(x + j * cols, nb, xq + j * cols, xd + j * nb, xs + j * nb);
  q8_job jb[Q8_MANY_MAX];
  const q8_kernel k = pick_q8();
  float *pbuf = NULL;
  int8_t *xqp = NULL;
  float *xdl = NULL, *xsl = NULL;
#ifdef INGOT_Q8_X86
  if (k == rows_vnni && nb >= 2) {
    const int64_t np = nb / 2;
    pbuf = malloc((size_t)(nx * np) * (2 * 16 * sizeof(float) + 64));
    if (!pbuf) {
      free(buf);
      return ingot_set_error(INGOT_ERR_OOM, "ggml_matvec_q8: out of memory");
    }
    xdl = pbuf, xsl = pbuf + nx * np * 16;
    xqp = (int8_t *)(void *)(pbuf + 2 * nx * np * 16);
    vn_prepare(&(q8_job){.type = type, .cols = cols, .nb = nb, .nx = nx, .q = xq, .d = xd, .s = xs},
               xqp, xdl, xsl);
  }
#endif
  /* One pool job over the chunks of rows of all n matrices: chunk c of the
   * whole list belongs to matrix i with first[i] <= c < first[i+1]. Chunks
   * of 16 rows, grown to keep about 32 of them a job: each is one claim on
   * the pool's shared counter (a cache line the threads pass around). */
  int64_t rb = 0;
  for (int i = 0; i < n; i++) rb += (rows[i] + 15) / 16;
  rb = 16 * (rb / 32 > 1 ? rb / 32 : 1);
  int64_t first[Q8_MANY_MAX + 1] = {0};
  double work = 0;
  for (int i = 0; i < n; i++) {
    jb[i] = (q8_job){type,
                     w[i],
                     ingot_ggml_row_size(type, cols),
                     ingot_ggml_type_size(type),
                     rows[i],
                     cols,
                     nb,
                     nx,
                     xq,
                     xd,
                     xs,
                     y[i],
                     xqp,
                     xdl,
                     xsl};
    first[i + 1] = first[i] + (rows[i] + rb - 1) / rb;
    work += (double)rows[i] * (double)cols * (double)nx;
  }
  const int64_t nch = first[n];
  many_job mj = {k, jb, first, rb};
  if (nch > 1 && work >= 65536.0)
    workpool_for(nch, many_chunk, &mj);
  else
    for (int64_t c = 0; c < nch; c++) many_chunk(&mj, c);
  free(pbuf);
  free(buf);
  return INGOT_OK;
}
