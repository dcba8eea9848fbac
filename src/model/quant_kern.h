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
#undef KROW
#undef KF16
#undef KCH
