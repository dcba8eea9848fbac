/* GGML block formats on the CPU: type table, dequantisation bit-exact with
 * ggml's dequantize_row_* (same products, same order, no FMA contraction),
 * and the quantised matrix-vector product used by decode. The matvec kernels
 * live in quant_kern.h, compiled once portably and, on x86-64 with GCC, once
 * more for AVX2 and AVX-512 (picked at run time), since the library is built
 * without -march. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fpconv.h"
#include "../core/workpool.h"
#include "ingot/backend.h"
#include "ingot/quant.h"

#define QK 32    /* elements per legacy block */
#define QK_K 256 /* elements per K-quant super-block */

typedef struct qtype_info {
  int id;
  const char *name;
  int64_t block;
  size_t size;
} qtype_info;

static const qtype_info QTYPES[] = {
    {INGOT_GGML_F32, "f32", 1, 4},        {INGOT_GGML_F16, "f16", 1, 2},
    {INGOT_GGML_Q4_0, "q4_0", QK, 18},    {INGOT_GGML_Q4_1, "q4_1", QK, 20},
    {INGOT_GGML_Q5_0, "q5_0", QK, 22},    {INGOT_GGML_Q5_1, "q5_1", QK, 24},
    {INGOT_GGML_Q8_0, "q8_0", QK, 34},    {INGOT_GGML_Q4_K, "q4_K", QK_K, 144},
    {INGOT_GGML_Q5_K, "q5_K", QK_K, 176}, {INGOT_GGML_Q6_K, "q6_K", QK_K, 210},
    {INGOT_GGML_BF16, "bf16", 1, 2},
};

static const qtype_info *qtype(int type) {
  for (size_t i = 0; i < sizeof QTYPES / sizeof QTYPES[0]; i++)
    if (QTYPES[i].id == type) return &QTYPES[i];
  return NULL;
}

const char *ingot_ggml_type_name(int type) {
  const qtype_info *t = qtype(type);
  return t ? t->name : NULL;
}

int64_t ingot_ggml_block_size(int type) {
  const qtype_info *t = qtype(type);
  return t ? t->block : 0;
}

size_t ingot_ggml_type_size(int type) {
  const qtype_info *t = qtype(type);
  return t ? t->size : 0;
}

size_t ingot_ggml_row_size(int type, int64_t ncols) {
  const qtype_info *t = qtype(type);
  if (!t || ncols < 0 || ncols % t->block) return 0;
  uint64_t nb = (uint64_t)(ncols / t->block);
  if (nb > SIZE_MAX / t->size) return 0;
  return (size_t)nb * t->size;
}

/* ---- block dequantisers (one block each; src is byte-aligned only) ---- */

#define QINLINE static inline __attribute__((always_inline))

QINLINE float f16_at(const uint8_t *p) {
  return fp_f16_to_f32((uint16_t)(p[0] | (uint16_t)p[1] << 8));
}

QINLINE void deq_q4_0(const uint8_t *b, float *y) {
  const float d = f16_at(b);
  const uint8_t *qs = b + 2;
  for (int j = 0; j < QK / 2; j++) {
    y[j] = (float)((int)(qs[j] & 0x0F) - 8) * d;
    y[j + QK / 2] = (float)((int)(qs[j] >> 4) - 8) * d;
  }
}

QINLINE void deq_q4_1(const uint8_t *b, float *y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  const uint8_t *qs = b + 4;
  for (int j = 0; j < QK / 2; j++) {
    y[j] = (float)(qs[j] & 0x0F) * d + m;
    y[j + QK / 2] = (float)(qs[j] >> 4) * d + m;
  }
}

QINLINE uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

QINLINE void deq_q5_0(const uint8_t *b, float *y) {
  const float d = f16_at(b);
  const uint32_t qh = le32(b + 2);
  const uint8_t *qs = b + 6;
  for (int j = 0; j < QK / 2; j++) {
    const int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
    y[j] = (float)(((qs[j] & 0x0F) | h0) - 16) * d;
    y[j + QK / 2] = (float)(((qs[j] >> 4) | h1) - 16) * d;
  }
}

QINLINE void deq_q5_1(const uint8_t *b, float *y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  const uint32_t qh = le32(b + 4);
  const uint8_t *qs = b + 8;
  for (int j = 0; j < QK / 2; j++) {
    const int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
    y[j] = (float)((qs[j] & 0x0F) | h0) * d + m;
    y[j + QK / 2] = (float)((qs[j] >> 4) | h1) * d + m;
  }
}

QINLINE void deq_q8_0(const uint8_t *b, float *y) {
  const float d = f16_at(b);
  const int8_t *qs = (const int8_t *)(b + 2);
  for (int j = 0; j < QK; j++) y[j] = (float)qs[j] * d;
}

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block. */
QINLINE void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

QINLINE void deq_q4_k(const uint8_t *b, float *y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t *scales = b + 4, *q = b + 16;
  for (int s = 0; s < 8; s++) {
    int sc, m;
    scale_min_k4(s, scales, &sc, &m);
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint8_t *qq = q + (s / 2) * 32;
    const int sh = (s & 1) * 4;
    for (int l = 0; l < 32; l++) y[s * 32 + l] = d1 * (float)((qq[l] >> sh) & 0xF) - m1;
  }
}

QINLINE void deq_q5_k(const uint8_t *b, float *y) {
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const uint8_t *scales = b + 4, *qh = b + 16, *q = b + 48;
  for (int s = 0; s < 8; s++) {
    int sc, m;
    scale_min_k4(s, scales, &sc, &m);
    const float d1 = d * (float)sc, m1 = dmin * (float)m;
    const uint8_t *qq = q + (s / 2) * 32;
    const int sh = (s & 1) * 4;
    for (int l = 0; l < 32; l++) {
      const int v = ((qq[l] >> sh) & 0xF) | (((qh[l] >> s) & 1) << 4);
      y[s * 32 + l] = d1 * (float)v - m1;
    }
  }
}

QINLINE void deq_q6_k(const uint8_t *b, float *y) {
  const uint8_t *ql = b, *qh = b + 128;
  const int8_t *sc = (const int8_t *)(b + 192);
  const float d = f16_at(b + 208);
  for (int s = 0; s < 8; s++) {
    const int h = s / 4, t = s % 4;
    const uint8_t *lo = ql + h * 64 + (t & 1) * 32, *hi = qh + h * 32;
    const int lsh = (t >> 1) * 4, hsh = 2 * t;
    for (int l = 0; l < 32; l++) {
      const int v = (((lo[l] >> lsh) & 0xF) | (((hi[l] >> hsh) & 3) << 4)) - 32;
      const int e = s * 32 + l;
      y[e] = d * (float)sc[e / 16] * (float)v;
    }
  }
}

/* Dequantise nb blocks of a block type (not F32/F16/BF16). */
QINLINE void deq_blocks(int type, const uint8_t *src, float *dst, int64_t nb) {
  switch (type) {
#define DEQ_CASE(T, fn, bs, ts)                                          \
  case T:                                                                \
    for (int64_t i = 0; i < nb; i++) fn(src + i * (ts), dst + i * (bs)); \
    break;
    DEQ_CASE(INGOT_GGML_Q4_0, deq_q4_0, QK, 18)
    DEQ_CASE(INGOT_GGML_Q4_1, deq_q4_1, QK, 20)
    DEQ_CASE(INGOT_GGML_Q5_0, deq_q5_0, QK, 22)
    DEQ_CASE(INGOT_GGML_Q5_1, deq_q5_1, QK, 24)
    DEQ_CASE(INGOT_GGML_Q8_0, deq_q8_0, QK, 34)
    DEQ_CASE(INGOT_GGML_Q4_K, deq_q4_k, QK_K, 144)
    DEQ_CASE(INGOT_GGML_Q5_K, deq_q5_k, QK_K, 176)
    DEQ_CASE(INGOT_GGML_Q6_K, deq_q6_k, QK_K, 210)
#undef DEQ_CASE
    default:
      break;
  }
}

/* n scalar elements of F32/F16/BF16 (byte-aligned src) to float. */
QINLINE void deq_scalar(int type, const uint8_t *src, float *dst, int64_t n) {
  if (type == INGOT_GGML_F32) {
    memcpy(dst, src, (size_t)n * 4);
  } else if (type == INGOT_GGML_F16) {
    for (int64_t i = 0; i < n; i++)
      dst[i] = fp_f16_to_f32((uint16_t)(src[2 * i] | (uint16_t)src[2 * i + 1] << 8));
  } else {
    for (int64_t i = 0; i < n; i++)
      dst[i] = fp_bf16_to_f32((uint16_t)(src[2 * i] | (uint16_t)src[2 * i + 1] << 8));
  }
}

ingot_status ingot_ggml_dequantize(int type, const void *src, float *dst, int64_t n) {
  const qtype_info *t = qtype(type);
  if (!t) return ingot_set_error(INGOT_ERR_DTYPE, "ggml_dequantize: unknown ggml type %d", type);
  if (n < 0 || n % t->block)
    return ingot_set_error(INGOT_ERR_ARG,
                           "ggml_dequantize: %lld elements is not a multiple of the %s block "
                           "size %lld",
                           (long long)n, t->name, (long long)t->block);
  if (n == 0) return INGOT_OK;
  if (!src || !dst) return ingot_set_error(INGOT_ERR_ARG, "ggml_dequantize: NULL pointer");
  const uint8_t *s = src;
  if (t->block == 1) {
    /* Large conversions are worth threads; each chunk is independent. */
    const int64_t chunk = 1 << 16, nch = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (nch > 1)
    for (int64_t c = 0; c < nch; c++) {
      const int64_t i0 = c * chunk, m = n - i0 < chunk ? n - i0 : chunk;
      deq_scalar(type, s + (size_t)i0 * t->size, dst + i0, m);
    }
  } else {
    const int64_t nb = n / t->block, per = (1 << 16) / t->block, nch = (nb + per - 1) / per;
#pragma omp parallel for schedule(static) if (nch > 1)
    for (int64_t c = 0; c < nch; c++) {
      const int64_t b0 = c * per, m = nb - b0 < per ? nb - b0 : per;
      deq_blocks(type, s + (size_t)b0 * t->size, dst + b0 * t->block, m);
    }
  }
  return INGOT_OK;
}

/* ---- matvec ---- */

/* One matvec call as the kernels see it. */
typedef struct mv_job {
  int type;
  const uint8_t *w;
  size_t row_size;
  int64_t rows, cols, nx;
  const float *x;
  const float *xsum; /* Q4_1 with nx == 1: sum of x over each block */
  float *y;
} mv_job;

/* 16-lane vectors for the kernels; loads through memcpy (blocks are only
 * byte-aligned). The helpers are always inlined, so the ABI note GCC gives
 * for passing 64-byte vectors does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float qv16f __attribute__((vector_size(64)));
typedef uint8_t qv16u8 __attribute__((vector_size(16)));
typedef int32_t qv16i32 __attribute__((vector_size(64)));

/* Small integers to float through int32 (a signed conversion vectorises;
 * u8 -> float directly becomes scalar code). */
#define i2f16(v) __builtin_convertvector((v), qv16f)

QINLINE qv16f ld16f(const float *p) {
  qv16f v;
  memcpy(&v, p, sizeof v);
  return v;
}

QINLINE qv16u8 ld16u8(const uint8_t *p) {
  qv16u8 v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* Pairwise: a serial chain of 16 dependent adds per row cost more than the
 * row's arithmetic for the short rows of small models. */
typedef float qv8f __attribute__((vector_size(32)));
typedef float qv4f __attribute__((vector_size(16)));
QINLINE float hsum16(const qv16f *v) {
  qv8f a, b;
  memcpy(&a, v, sizeof a);
  memcpy(&b, (const char *)v + sizeof a, sizeof b);
  a += b;
  qv4f c, d;
  memcpy(&c, &a, sizeof c);
  memcpy(&d, (const char *)&a + sizeof c, sizeof d);
  c += d;
  return (c[0] + c[2]) + (c[1] + c[3]);
}

typedef void (*mv_kernel)(const mv_job *jb, int64_t r0, int64_t r1);

/* Portable kernels. */
#define KFN(name) name##_generic
#include "quant_kern.h"
#undef KFN

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define INGOT_QUANT_X86 1
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define KFN(name) name##_avx2
#define KHW_F16 1
#include "quant_kern.h"
#undef KFN
#undef KHW_F16
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,prefer-vector-width=512")
#define KFN(name) name##_avx512
#define KHW_F16 1
#define KHW_512 1
#include "quant_kern.h"
#undef KFN
#undef KHW_F16
#undef KHW_512
#pragma GCC pop_options
#endif

/* The widest kernel this CPU runs; INGOT_QUANT_ISA=generic|avx2 caps it (read
 * on every call, so tests and benchmarks can compare the paths). */
static mv_kernel pick_kernel(void) {
  mv_kernel k = mv_rows_generic;
#ifdef INGOT_QUANT_X86
  const char *env = getenv("INGOT_QUANT_ISA");
  if (env && strcmp(env, "generic") == 0) return k;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    k = mv_rows_avx2;
  if (env && strcmp(env, "avx2") == 0) return k;
  if (k == mv_rows_avx2 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    k = mv_rows_avx512;
#endif
  return k;
}

/* Row chunk c of a matvec (a workpool item). */
typedef struct mv_chunks {
  mv_kernel k;
  const mv_job *jb;
  int64_t rb; /* rows per chunk */
} mv_chunks;

static void mv_chunk(void *arg, int64_t c) {
  const mv_chunks *mc = arg;
  const int64_t r0 = c * mc->rb, r1 = r0 + mc->rb < mc->jb->rows ? r0 + mc->rb : mc->jb->rows;
  mc->k(mc->jb, r0, r1);
}

ingot_status ingot_ggml_matvec(int type, const void *w, int64_t rows, int64_t cols, const float *x,
                               int64_t nx, float *y) {
  return ingot_ggml_matvec_strided(type, w, ingot_ggml_row_size(type, cols), rows, cols, x, nx, y);
}

ingot_status ingot_ggml_matvec_strided(int type, const void *w, size_t row_stride, int64_t rows,
                                       int64_t cols, const float *x, int64_t nx, float *y) {
  const qtype_info *t = qtype(type);
  if (!t) return ingot_set_error(INGOT_ERR_DTYPE, "ggml_matvec: unknown ggml type %d", type);
  if (rows < 0 || cols < 0)
    return ingot_set_error(INGOT_ERR_ARG, "ggml_matvec: negative size %lld x %lld", (long long)rows,
                           (long long)cols);
  if (cols % t->block)
    return ingot_set_error(INGOT_ERR_ARG,
                           "ggml_matvec: %lld columns is not a multiple of the %s block size %lld",
                           (long long)cols, t->name, (long long)t->block);
  if (nx < 1 || nx > 64)
    return ingot_set_error(INGOT_ERR_ARG, "ggml_matvec: nx must be in 1..64, got %lld",
                           (long long)nx);
  if (!w || !x || !y) return ingot_set_error(INGOT_ERR_ARG, "ggml_matvec: NULL pointer");
  if (row_stride < ingot_ggml_row_size(type, cols))
    return ingot_set_error(INGOT_ERR_ARG,
                           "ggml_matvec: row stride %zu is below the %zu bytes of a row",
                           row_stride, ingot_ggml_row_size(type, cols));
  if (rows == 0) return INGOT_OK;
  mv_job jb = {type, w, row_stride, rows, cols, nx, x, NULL, y};
  float *xsum = NULL;
  if (type == INGOT_GGML_Q4_1 && nx == 1 && cols > 0) {
    const int64_t nb = cols / QK;
    xsum = malloc((size_t)nb * sizeof *xsum);
    if (!xsum) return ingot_set_error(INGOT_ERR_OOM, "ggml_matvec: out of memory");
    for (int64_t b = 0; b < nb; b++) {
      float s = 0;
      for (int k = 0; k < QK; k++) s += x[b * QK + k];
      xsum[b] = s;
    }
    jb.xsum = xsum;
  }
  /* Chunks of rows keep each thread on contiguous weights; small products
   * stay on the calling thread. The decode worker pool, not OpenMP: an
   * OpenMP barrier waits for a preempted thread (decode ~10x slower on a busy
   * machine, see workpool.h). */
  mv_chunks mc = {pick_kernel(), &jb, 16};
  const int64_t nch = (rows + mc.rb - 1) / mc.rb;
  if (nch > 1 && (double)rows * (double)cols * (double)nx >= 65536.0)
    workpool_for(nch, mv_chunk, &mc);
  else
    for (int64_t c = 0; c < nch; c++) mv_chunk(&mc, c);
  free(xsum);
  return INGOT_OK;
}
