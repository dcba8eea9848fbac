/* MATMUL on the CPU: [B,n,k]·[B,k,m] -> [B,n,m] (contract in
 * src/core/ops_matmul.c). Floats and complex go to OpenBLAS GEMM, reading
 * strided operands in place when each matrix is row- or column-major
 * (the transposed flags); f16/bf16 run through float32; integers use a plain
 * loop with int64 accumulation that wraps to the dtype. */
#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../core/blas_layout.h"
#include "cpu.h"

/* How BLAS reads one [rows, cols] matrix with element strides (sr, sc). */
typedef struct blas_mat {
  enum CBLAS_TRANSPOSE trans;
  int64_t ld;
} blas_mat;

/* True when (sr, sc) is a layout BLAS can read in place (src/core/blas_layout.h):
 * row-major (NoTrans) or column-major (Trans). */
static bool blas_mat_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, blas_mat *m) {
  bool trans;
  int64_t ld;
  if (!blas_layout(rows, cols, sr, sc, &trans, &ld)) return false;
  *m = (blas_mat){trans ? CblasTrans : CblasNoTrans, ld};
  return true;
}

/* Operands ready for BLAS: in place when possible, else a contiguous copy. */
typedef struct gemm_operand {
  ingot_tensor *t; /* owned reference (the input itself or a copy) */
  blas_mat m;
} gemm_operand;

static ingot_status prepare(ingot_tensor *in, gemm_operand *op) {
  if (blas_mat_layout(in->shape[1], in->shape[2], in->strides[1], in->strides[2], &op->m)) {
    op->t = ingot_retain(in);
    return INGOT_OK;
  }
  op->t = tensor_new(3, in->shape, in->dtype, INGOT_CPU);
  if (!op->t) return ingot_last_status();
  cpu_copy(op->t, in);
  blas_mat_layout(in->shape[1], in->shape[2], op->t->strides[1], op->t->strides[2], &op->m);
  return INGOT_OK;
}

/* Batches of GEMMs this small run one per thread (OpenBLAS would run each
 * on one thread anyway); larger ones let OpenBLAS thread each product. */
#define SMALL_GEMM (64 * 64 * 64)

static ingot_status gemm_blas(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  int64_t B = out->shape[0], n = out->shape[1], m = out->shape[2], k = a->in[0]->shape[2];
  size_t es = ingot_dtype_size(out->dtype);
  if (B * n * m == 0) return INGOT_OK;
  if (k == 0) {
    memset(tensor_ptr(out), 0, (size_t)(B * n * m) * es);
    return INGOT_OK;
  }
  if (n > INT_MAX || m > INT_MAX || k > INT_MAX)
    return ingot_set_error(INGOT_ERR_UNSUPPORTED,
                           "matmul: a dimension exceeds BLAS's 32-bit "
                           "limit (%lld, %lld, %lld)",
                           (long long)n, (long long)k, (long long)m);
  gemm_operand A = {0}, Bm = {0};
  ingot_status st = prepare(a->in[0], &A);
  if (st == INGOT_OK) st = prepare(a->in[1], &Bm);
  if (st == INGOT_OK && (A.m.ld > INT_MAX || Bm.m.ld > INT_MAX))
    st = ingot_set_error(INGOT_ERR_UNSUPPORTED, "matmul: a leading dimension exceeds BLAS's "
                                                "32-bit limit");
  if (st != INGOT_OK) {
    ingot_release(A.t);
    ingot_release(Bm.t);
    return st;
  }
  char *pa = tensor_ptr(A.t), *pb = tensor_ptr(Bm.t), *pc = tensor_ptr(out);
  int64_t sa = A.t->strides[0] * (int64_t)es, sb = Bm.t->strides[0] * (int64_t)es;
  int64_t sc = n * m * (int64_t)es;
  ingot_dtype dt = out->dtype;
  int in = (int)n, im = (int)m, ik = (int)k, lda = (int)A.m.ld, ldb = (int)Bm.m.ld;
  const float c1f[2] = {1, 0}, c0f[2] = {0, 0};
  const double c1d[2] = {1, 0}, c0d[2] = {0, 0};
#pragma omp parallel for schedule(static) if (B > 1 && n * m * k < SMALL_GEMM)
  for (int64_t b = 0; b < B; b++) {
    const void *xa = pa + b * sa, *xb = pb + b * sb;
    void *xc = pc + b * sc;
    switch (dt) {
    case INGOT_F32:
      cblas_sgemm(CblasRowMajor, A.m.trans, Bm.m.trans, in, im, ik, 1.0f, xa, lda, xb, ldb, 0.0f,
                  xc, im);
      break;
    case INGOT_F64:
      cblas_dgemm(CblasRowMajor, A.m.trans, Bm.m.trans, in, im, ik, 1.0, xa, lda, xb, ldb, 0.0, xc,
                  im);
      break;
    case INGOT_C64:
      cblas_cgemm(CblasRowMajor, A.m.trans, Bm.m.trans, in, im, ik, c1f, xa, lda, xb, ldb, c0f, xc,
                  im);
      break;
    default: /* INGOT_C128 */
      cblas_zgemm(CblasRowMajor, A.m.trans, Bm.m.trans, in, im, ik, c1d, xa, lda, xb, ldb, c0d, xc,
                  im);
      break;
    }
  }
  ingot_release(A.t);
  ingot_release(Bm.t);
  return INGOT_OK;
}

/* Integer products: accumulate in uint64 (wrapping, no signed overflow),
 * then truncate to the dtype as a C cast does. row_T computes output row r
 * (batch r / n, row r % n) into s, an m-long scratch row. */
#define INT_ROW(DT, T)                                                                             \
  static void row_##T(const ingot_tensor *A, const ingot_tensor *Bt, ingot_tensor *C, int64_t r,   \
                      uint64_t *s) {                                                               \
    int64_t n = C->shape[1], m = C->shape[2], k = A->shape[2], b = r / n, i = r % n;               \
    const T *pa = (const T *)tensor_ptr(A) + b * A->strides[0] + i * A->strides[1];                \
    const T *pb = (const T *)tensor_ptr(Bt) + b * Bt->strides[0];                                  \
    int64_t a2 = A->strides[2], b1 = Bt->strides[1], b2 = Bt->strides[2];                          \
    memset(s, 0, (size_t)m * sizeof *s);                                                           \
    for (int64_t p = 0; p < k; p++) {                                                              \
      uint64_t x = (uint64_t)(int64_t)pa[p * a2];                                                  \
      const T *row = pb + p * b1;                                                                  \
      for (int64_t j = 0; j < m; j++) s[j] += x * (uint64_t)(int64_t)row[j * b2];                  \
    }                                                                                              \
    T *pc = (T *)tensor_ptr(C) + r * m;                                                            \
    for (int64_t j = 0; j < m; j++) pc[j] = (T)(int64_t)s[j];                                      \
  }
CPU_INT_TYPES(INT_ROW)
#undef INT_ROW

/* acc holds one m-long scratch row per thread. */
static void gemm_int(const ingot_tensor *A, const ingot_tensor *Bt, ingot_tensor *C,
                     uint64_t *acc) {
  int64_t rows = C->shape[0] * C->shape[1], m = C->shape[2], k = A->shape[2];
  ingot_dtype dt = C->dtype;
#pragma omp parallel for schedule(static) if (rows * m * k >= CPU_GRAIN)
  for (int64_t r = 0; r < rows; r++) {
    uint64_t *s = acc + (int64_t)omp_get_thread_num() * m;
    switch (dt) {
#define INT_CASE(DT, T)                                                                            \
  case DT: row_##T(A, Bt, C, r, s); break;
      CPU_INT_TYPES(INT_CASE)
#undef INT_CASE
    default: break;
    }
  }
}

static ingot_status k_matmul_f32(ingot_op_args *a) { return gemm_blas(a); }

static ingot_status k_matmul(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  switch (out->dtype) {
  case INGOT_F32:
  case INGOT_F64:
  case INGOT_C64:
  case INGOT_C128: return gemm_blas(a);
  case INGOT_F16:
  case INGOT_BF16: return cpu_via_f32(a, k_matmul_f32);
  default: break;
  }
  if (!ingot_dtype_is_integral(out->dtype))
    return ingot_set_error(INGOT_ERR_DTYPE, "matmul: not implemented for '%s'",
                           ingot_dtype_name(out->dtype));
  int64_t m = out->shape[2];
  if (ingot_numel(out) == 0) return INGOT_OK;
  uint64_t *acc = malloc((size_t)cpu_threads() * (size_t)m * sizeof *acc);
  if (!acc) return ingot_set_error(INGOT_ERR_OOM, "matmul: out of memory");
  gemm_int(a->in[0], a->in[1], out, acc);
  free(acc);
  return INGOT_OK;
}

void cpu_register_matmul(ingot_backend *be) { be->kernels[INGOT_OP_MATMUL] = k_matmul; }
