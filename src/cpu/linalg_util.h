/* Shared by the CPU linear-algebra kernels: walking the batch of matrices of
 * a strided tensor (batch dims may be broadcast, stride 0), moving one matrix
 * between it and a column-major LAPACK buffer, and running a loop over batch
 * members in parallel while remembering the first member that failed. */
#ifndef INGOT_CPU_LINALG_UTIL_H
#define INGOT_CPU_LINALG_UTIL_H

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* Bytes past a LAPACK buffer's last element that stay ours: OpenBLAS's
 * AVX-512 kernels read a few vectors past a matrix's end. zgesdd of a 5 x 4
 * complex matrix (zgemv_n_SKYLAKEX, OpenBLAS 0.3.21) faults when the buffer
 * ends 32 bytes before an unmapped page, not 64 (a guard-page probe); under
 * ASan it crashed ~1 run in 200 of the linalg tests under load. */
#define LA_SLACK 256

/* Zeroed column-major buffer of rows x cols elements of es bytes, LA_SLACK
 * bytes more (never size 0, so NULL always means out of memory). */
static inline void *la_buf(int64_t rows, int64_t cols, size_t es) {
  return calloc((size_t)(rows * cols > 1 ? rows * cols : 1) * es + LA_SLACK, 1);
}

/* The error of a batch loop whose workspace allocation failed. */
static inline ingot_status la_oom(void) {
  return ingot_set_error(INGOT_ERR_OOM, "out of host memory for a linear-algebra workspace");
}

/* memset that accepts the NULL data of an empty tensor. */
static inline void la_zero(void *p, size_t n) {
  if (n) memset(p, 0, n);
}

/* One tensor seen as a batch of [rows, cols] matrices (its last two dims). */
typedef struct la_mat {
  char *base;
  int nb;                                                  /* batch dims */
  int64_t bshape[INGOT_MAX_DIMS], bstride[INGOT_MAX_DIMS]; /* strides in bytes */
  int64_t rows, cols, rs, cs;                              /* strides in bytes */
  ingot_dtype dt;
  size_t es;
} la_mat;

/* t viewed as a batch of matrices over its last mdims (2, or 1 for vectors,
 * which become [n, 1] columns; 0 for scalars per member). */
static inline la_mat la_view(const ingot_tensor *t, int mdims) {
  la_mat m = {.base = tensor_ptr(t), .nb = t->ndim - mdims, .dt = t->dtype};
  m.es = ingot_dtype_size(t->dtype);
  for (int d = 0; d < m.nb; d++) {
    m.bshape[d] = t->shape[d];
    m.bstride[d] = t->strides[d] * (int64_t)m.es;
  }
  m.rows = mdims >= 1 ? t->shape[m.nb] : 1;
  m.cols = mdims == 2 ? t->shape[m.nb + 1] : 1;
  m.rs = mdims >= 1 ? t->strides[m.nb] * (int64_t)m.es : 0;
  m.cs = mdims == 2 ? t->strides[m.nb + 1] * (int64_t)m.es : 0;
  return m;
}

static inline int64_t la_batch(const la_mat *m) {
  int64_t n = 1;
  for (int d = 0; d < m->nb; d++) n *= m->bshape[d];
  return n;
}

/* Address of element [0, 0] of batch member b. */
static inline char *la_at(const la_mat *m, int64_t b) {
  char *p = m->base;
  for (int d = m->nb - 1; d >= 0; d--) {
    p += (b % m->bshape[d]) * m->bstride[d];
    b /= m->bshape[d];
  }
  return p;
}

/* dst[r + c*ld] = src[i*rs + j*cs] over the matrix (r, c = i, j, or j, i
 * when trans), with typed element moves; to_mat reverses the direction. */
#define LA_MOVE(T)                                         \
  for (int64_t j = 0; j < m->cols; j++)                    \
    for (int64_t i = 0; i < m->rows; i++) {                \
      T *b = (T *)buf + (trans ? j + i * ld : i + j * ld); \
      T *e = (T *)(mat + i * m->rs + j * m->cs);           \
      if (to_mat)                                          \
        *e = *b;                                           \
      else                                                 \
        *b = *e;                                           \
    }

typedef struct la_c128 {
  double re, im;
} la_c128;

static inline void la_move(const la_mat *m, char *mat, void *buf, int64_t ld, bool trans,
                           bool to_mat) {
  switch (m->es) {
    case 4:
      LA_MOVE(uint32_t) break;
    case 8:
      LA_MOVE(uint64_t) break;
    default:
      LA_MOVE(la_c128) break;
  }
}

/* Negate the imaginary parts of count complex elements of a buffer. */
static inline void la_conj_buf(ingot_dtype dt, void *buf, int64_t count) {
  if (dt == INGOT_C64)
    for (int64_t i = 0; i < count; i++) ((float *)buf)[2 * i + 1] *= -1;
  else if (dt == INGOT_C128)
    for (int64_t i = 0; i < count; i++) ((double *)buf)[2 * i + 1] *= -1;
}

/* Member b into a column-major buffer with leading dim ld: dst[i + j*ld] =
 * A[i, j], or A[j, i] when trans (dst is then cols x rows); conjugated when
 * conj (complex dtypes only). */
static inline void la_load(const la_mat *m, int64_t b, void *dst, int64_t ld, bool trans,
                           bool conj) {
  la_move(m, la_at(m, b), dst, ld, trans, false);
  if (conj) /* the buffer's used part: ld * (columns - 1) + rows elements at most */
    la_conj_buf(m->dt, dst, ld * ((trans ? m->rows : m->cols) - 1) + (trans ? m->cols : m->rows));
}

/* The reverse: A[i, j] = src[i + j*ld] (or src[j + i*ld] when trans),
 * conjugated when conj (the buffer is conjugated in place first). */
static inline void la_store(const la_mat *m, int64_t b, void *src, int64_t ld, bool trans,
                            bool conj) {
  if (conj)
    la_conj_buf(m->dt, src, ld * ((trans ? m->rows : m->cols) - 1) + (trans ? m->cols : m->rows));
  la_move(m, la_at(m, b), src, ld, trans, true);
}

/* Real dtype of dt (f32 for c64, f64 for c128). */
static inline ingot_dtype la_real(ingot_dtype dt) {
  return dt == INGOT_C64 ? INGOT_F32 : dt == INGOT_C128 ? INGOT_F64 : dt;
}

/* True when every element of member b is finite. */
static inline bool la_finite(const la_mat *m, int64_t b) {
  const char *p = la_at(m, b);
  bool f64 = la_real(m->dt) == INGOT_F64;
  int parts = ingot_dtype_is_complex(m->dt) ? 2 : 1;
  for (int64_t i = 0; i < m->rows; i++)
    for (int64_t j = 0; j < m->cols; j++)
      for (int q = 0; q < parts; q++) {
        const char *e = p + i * m->rs + j * m->cs + q * (f64 ? 8 : 4);
        double v = f64 ? *(const double *)e : *(const float *)e;
        if (!isfinite(v)) return false;
      }
  return true;
}

/* Outcome of a parallel batch loop: the first failing member and its
 * LAPACK info, and whether any member ran out of workspace memory. */
typedef struct la_fail {
  int64_t member;
  int64_t info;
  atomic_bool oom;
} la_fail;

/* No member has failed yet. */
#define LA_FAIL_NONE \
  { INT64_MAX, 0, false }

/* The error of a failed member; what names the routine. */
typedef ingot_status (*la_report)(const la_fail *f, const char *what);

/* Status of a finished batch loop: out of memory first, then the first
 * failed member through report (NULL: failed members are no error). */
static inline ingot_status la_batch_end(const la_fail *f, la_report report, const char *what) {
  if (f->oom) return la_oom();
  return report && f->member != INT64_MAX ? report(f, what) : INGOT_OK;
}

static inline void la_fail_note(la_fail *f, int64_t member, int64_t info) {
#pragma omp critical(la_fail)
  if (member < f->member) {
    f->member = member;
    f->info = info;
  }
}

/* Batch members run in parallel when each is small enough for one thread;
 * larger ones leave the threads to OpenBLAS. */
#define LA_SMALL(rows, cols) ((rows) * (cols) <= 128 * 128)

#endif
