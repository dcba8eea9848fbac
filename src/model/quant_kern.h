/* Matvec kernels over GGML blocks, included by quant.c once per target ISA
 * with KFN(name) (a per-ISA name) defined, and KHW_F16 where F16C exists.
 * Written with GCC vector types of 16 lanes (lowered to whatever the target
 * has: 1 zmm, 2 ymm or 4 xmm), so vectorisation does not depend on the
 * optimiser's mood; one horizontal sum per row. */

#define KL 16 /* accumulator lanes */

#ifdef KHW_F16
/* F16C converts exactly (every half is a float); only NaN payloads could
 * differ, and dequantize (the bit-exact path) does not use this. */
QINLINE float KFN(f16)(const uint8_t *p) {
  return _cvtsh_ss((unsigned short)(p[0] | (unsigned short)p[1] << 8));
}
#define KF16(p) KFN(f16)(p)
#else
#define KF16(p) f16_at(p)
#endif

/* acc += a * b per lane, fused where the target has FMA (one rounding: at least
 * as accurate as the separate multiply and add of the portable path). */
QINLINE void KFN(fma)(qv16f *acc, const qv16f *a, const qv16f *b) {
#if defined(KHW_512)
  *acc = (qv16f)_mm512_fmadd_ps((__m512)*a, (__m512)*b, (__m512)*acc);
#elif defined(KHW_F16)
  __m256 a2[2], b2[2], c2[2];
  memcpy(a2, a, sizeof *a);
  memcpy(b2, b, sizeof *b);
  memcpy(c2, acc, sizeof *acc);
  c2[0] = _mm256_fmadd_ps(a2[0], b2[0], c2[0]);
  c2[1] = _mm256_fmadd_ps(a2[1], b2[1], c2[1]);
  memcpy(acc, c2, sizeof *acc);
#else
  *acc += *a * *b;
#endif
}

/* acc[k] += a[i] * b[i] over n floats, lane k = i % 16. */
QINLINE void KFN(dot_acc)(float *restrict acc, const float *restrict a, const float *restrict b,
                          int64_t n) {
  const int64_t n16 = n - n % KL;
  qv16f va = ld16f(acc);
  for (int64_t i = 0; i < n16; i += KL) va += ld16f(a + i) * ld16f(b + i);
  memcpy(acc, &va, sizeof va);
  for (int64_t i = n16; i < n; i++) acc[i - n16] += a[i] * b[i];
}

/* One block's d * sum(q x) as 16 lanes. */
QINLINE qv16f KFN(blk_q4_1)(const uint8_t *blk, const float *xb) {
  const float d = KF16(blk);
  const qv16u8 q = ld16u8(blk + 4);
  const qv16f lo = i2f16(__builtin_convertvector(q & 0x0F, qv16i32));
  const qv16f hi = i2f16(__builtin_convertvector(q >> 4, qv16i32));
  return d * (lo * ld16f(xb) + hi * ld16f(xb + KL));
}

QINLINE qv16f KFN(blk_q4_0)(const uint8_t *blk, const float *xb) {
  const float d = KF16(blk);
  const qv16u8 q = ld16u8(blk + 2);
  const qv16f lo = i2f16(__builtin_convertvector(q & 0x0F, qv16i32) - 8);
  const qv16f hi = i2f16(__builtin_convertvector(q >> 4, qv16i32) - 8);
  return d * (lo * ld16f(xb) + hi * ld16f(xb + KL));
}

QINLINE qv16f KFN(blk_q8_0)(const uint8_t *blk, const float *xb) {
  const float d = KF16(blk);
  /* int8 through a biased uint8: GCC scalarises signed char -> int vectors. */
  const qv16f lo = i2f16(__builtin_convertvector(ld16u8(blk + 2) ^ 0x80, qv16i32) - 128);
  const qv16f hi = i2f16(__builtin_convertvector(ld16u8(blk + 18) ^ 0x80, qv16i32) - 128);
  return d * (lo * ld16f(xb) + hi * ld16f(xb + KL));
}

/* Row . x over nb blocks of ts bytes: two accumulators (even/odd blocks)
 * hide the add latency. */
#define KROW(blkfn, ts)                                    \
  do {                                                     \
    qv16f a0 = {0}, a1 = {0};                              \
    int64_t b = 0;                                         \
    for (; b + 1 < nb; b += 2) {                           \
      a0 += blkfn(row + b * (ts), x + b * QK);             \
      a1 += blkfn(row + (b + 1) * (ts), x + (b + 1) * QK); \
    }                                                      \
    if (b < nb) a0 += blkfn(row + b * (ts), x + b * QK);   \
    a0 += a1;                                              \
    sum = hsum16(&a0);                                     \
  } while (0)

/* Q4_1: sum_b d_b * sum(q x) + m_b * sum(x over block b). */
QINLINE float KFN(row_q4_1)(const uint8_t *restrict row, int64_t nb, const float *restrict x,
                            const float *restrict xsum) {
  float sum, m0 = 0, m1 = 0;
  KROW(KFN(blk_q4_1), 20);
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    m0 += KF16(row + b * 20 + 2) * xsum[b];
    m1 += KF16(row + (b + 1) * 20 + 2) * xsum[b + 1];
  }
  if (b < nb) m0 += KF16(row + b * 20 + 2) * xsum[b];
  return sum + (m0 + m1);
}

/* Four rows at once (Q4_1, Q8_0): four independent accumulators (named, so
 * they stay in registers) hide the FMA latency and share the loads of x. */
#define KR4_STEP(acc, blk, lo, hi)     \
  do {                                 \
    const qv16f d_ = (qv16f){0} + KF16(blk); \
    qv16f t_ = (lo) * xl;              \
    const qv16f h_ = (hi);             \
    KFN(fma)(&t_, &h_, &xh);           \
    KFN(fma)(&acc, &d_, &t_);          \
  } while (0)

QINLINE void KFN(rows4_q4_1)(const uint8_t *restrict w, size_t rs, int64_t nb,
                             const float *restrict x, const float *restrict xsum, float *y) {
  qv16f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
  float m0 = 0, m1 = 0, m2 = 0, m3 = 0;
  const uint8_t *w0 = w, *w1 = w + rs, *w2 = w + 2 * rs, *w3 = w + 3 * rs;
#define KQ41(acc, m, wr)                                                 \
  do {                                                                   \
    const uint8_t *blk = (wr) + (size_t)b * 20;                          \
    const qv16u8 q = ld16u8(blk + 4);                                    \
    KR4_STEP(acc, blk, i2f16(__builtin_convertvector(q & 0x0F, qv16i32)), \
             i2f16(__builtin_convertvector(q >> 4, qv16i32)));           \
    m += KF16(blk + 2) * xs;                                             \
  } while (0)
#ifdef KHW_F16
  /* The four rows' (d, m) halves of block b converted in one instruction, the
   * d's then broadcast from memory: fewer shuffle-port uops than a
   * convert + broadcast per row (the kernel is bound by those ports). */
  typedef float qv8f_ __attribute__((vector_size(32)));
  qv8f_ macc = {0};
  for (int64_t b = 0; b < nb; b++) {
    const qv16f xl = ld16f(x + b * QK), xh = ld16f(x + b * QK + KL);
    const size_t o = (size_t)b * 20;
    const __m128i h = _mm_set_epi32((int)le32(w3 + o), (int)le32(w2 + o), (int)le32(w1 + o),
                                    (int)le32(w0 + o));
    float dm[8];
    const __m256 dmv = _mm256_cvtph_ps(h);
    memcpy(dm, &dmv, sizeof dm);
    qv8f_ dmq;
    memcpy(&dmq, &dmv, sizeof dmq);
    macc += dmq * xsum[b];
#define KQ41H(acc, i, wr)                                          \
  do {                                                             \
    const qv16u8 q = ld16u8((wr) + o + 4);                         \
    qv16f t_ = i2f16(__builtin_convertvector(q & 0x0F, qv16i32)) * xl; \
    const qv16f h_ = i2f16(__builtin_convertvector(q >> 4, qv16i32)); \
    const qv16f d_ = (qv16f){0} + dm[2 * (i)];                     \
    KFN(fma)(&t_, &h_, &xh);                                       \
    KFN(fma)(&acc, &d_, &t_);                                      \
  } while (0)
    KQ41H(a0, 0, w0);
    KQ41H(a1, 1, w1);
    KQ41H(a2, 2, w2);
    KQ41H(a3, 3, w3);
#undef KQ41H
  }
  m0 = macc[1], m1 = macc[3], m2 = macc[5], m3 = macc[7];
#else
  for (int64_t b = 0; b < nb; b++) {
    const qv16f xl = ld16f(x + b * QK), xh = ld16f(x + b * QK + KL);
    const float xs = xsum[b];
    KQ41(a0, m0, w0);
    KQ41(a1, m1, w1);
    KQ41(a2, m2, w2);
    KQ41(a3, m3, w3);
  }
#endif
#undef KQ41
  y[0] = hsum16(&a0) + m0;
  y[1] = hsum16(&a1) + m1;
  y[2] = hsum16(&a2) + m2;
  y[3] = hsum16(&a3) + m3;
}

QINLINE void KFN(rows4_q8_0)(const uint8_t *restrict w, size_t rs, int64_t nb,
                             const float *restrict x, float *y) {
  qv16f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
  const uint8_t *w0 = w, *w1 = w + rs, *w2 = w + 2 * rs, *w3 = w + 3 * rs;
#define KQ80(acc, wr)                                                                  \
  do {                                                                                 \
    const uint8_t *blk = (wr) + (size_t)b * 34;                                        \
    KR4_STEP(acc, blk, i2f16(__builtin_convertvector(ld16u8(blk + 2) ^ 0x80, qv16i32) - 128), \
             i2f16(__builtin_convertvector(ld16u8(blk + 18) ^ 0x80, qv16i32) - 128));  \
  } while (0)
  for (int64_t b = 0; b < nb; b++) {
    const qv16f xl = ld16f(x + b * QK), xh = ld16f(x + b * QK + KL);
    KQ80(a0, w0);
    KQ80(a1, w1);
    KQ80(a2, w2);
    KQ80(a3, w3);
  }
#undef KQ80
  y[0] = hsum16(&a0);
  y[1] = hsum16(&a1);
  y[2] = hsum16(&a2);
  y[3] = hsum16(&a3);
}

QINLINE float KFN(row_q4_0)(const uint8_t *restrict row, int64_t nb, const float *restrict x) {
  float sum;
  KROW(KFN(blk_q4_0), 18);
  return sum;
}

QINLINE float KFN(row_q8_0)(const uint8_t *restrict row, int64_t nb, const float *restrict x) {
  float sum;
  KROW(KFN(blk_q8_0), 34);
  return sum;
}

/* Elements of a row dequantised per step of the generic path. */
#define KCH 256

/* Any type, any nx: dequantise KCH elements of the row into a stack buffer,
 * then accumulate them against every x. */
QINLINE void KFN(row_any)(const mv_job *jb, const uint8_t *row, int64_t r) {
  float tmp[KCH];
  float acc[64][KL];
  const int64_t cols = jb->cols, nx = jb->nx;
  const int type = jb->type;
  for (int64_t j = 0; j < nx; j++)
    for (int k = 0; k < KL; k++) acc[j][k] = 0;
  const int64_t bs = ingot_ggml_block_size(type);
  const size_t ts = ingot_ggml_type_size(type);
  for (int64_t c0 = 0; c0 < cols; c0 += KCH) {
    const int64_t n = cols - c0 < KCH ? cols - c0 : KCH;
    const float *a = tmp;
    if (type == INGOT_GGML_F32) {
      if ((uintptr_t)row % sizeof(float) == 0)
        a = (const float *)(const void *)(row + c0 * 4);
      else
        memcpy(tmp, row + c0 * 4, (size_t)n * 4);
    } else if (type == INGOT_GGML_F16) {
      for (int64_t i = 0; i < n; i++) tmp[i] = KF16(row + 2 * (c0 + i));
    } else if (type == INGOT_GGML_BF16) {
      deq_scalar(type, row + 2 * c0, tmp, n);
    } else {
      deq_blocks(type, row + (size_t)(c0 / bs) * ts, tmp, n / bs);
    }
    for (int64_t j = 0; j < nx; j++) KFN(dot_acc)(acc[j], a, jb->x + j * cols + c0, n);
  }
  for (int64_t j = 0; j < nx; j++) {
    const qv16f t = ld16f(acc[j]);
    jb->y[j * jb->rows + r] = hsum16(&t);
  }
}

static void KFN(mv_rows)(const mv_job *jb, int64_t r0, int64_t r1) {
  const int64_t nb = jb->cols / QK;
  if (jb->nx == 1 && (jb->type == INGOT_GGML_Q4_1 || jb->type == INGOT_GGML_Q8_0))
    for (; r0 + 4 <= r1; r0 += 4) {
      const uint8_t *w = jb->w + (size_t)r0 * jb->row_size;
      if (jb->type == INGOT_GGML_Q4_1)
        KFN(rows4_q4_1)(w, jb->row_size, nb, jb->x, jb->xsum, jb->y + r0);
      else
        KFN(rows4_q8_0)(w, jb->row_size, nb, jb->x, jb->y + r0);
    }
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t *row = jb->w + (size_t)r * jb->row_size;
    if (jb->nx == 1 && jb->type == INGOT_GGML_Q4_1)
      jb->y[r] = KFN(row_q4_1)(row, nb, jb->x, jb->xsum);
    else if (jb->nx == 1 && jb->type == INGOT_GGML_Q8_0)
      jb->y[r] = KFN(row_q8_0)(row, nb, jb->x);
    else if (jb->nx == 1 && jb->type == INGOT_GGML_Q4_0)
      jb->y[r] = KFN(row_q4_0)(row, nb, jb->x);
    else
      KFN(row_any)(jb, row, r);
  }
}

#undef KL
#undef KR4_STEP
#undef KROW
#undef KF16
#undef KCH
