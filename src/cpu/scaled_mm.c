/* SCALED_MM on the CPU, the reference (contract in src/core/ops_scaled_mm.c):
 * both float8 operands are widened to float32 (exactly), multiplied by
 * OpenBLAS sgemm (float32 accumulation), then each result is scaled, biased
 * and rounded once to the output dtype. */
#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

static inline float f8_to_f32(ingot_dtype dt, uint8_t x) {
  return dt == INGOT_F8E4M3FN ? fp_f8e4m3fn_to_f32(x) : fp_f8e5m2_to_f32(x);
}

/* dst[r * cols + c] = f32(src[r * sr + c * sc]) for an f8 matrix. */
static void widen(float *dst, const uint8_t *src, ingot_dtype dt, int64_t rows, int64_t cols,
                  int64_t sr, int64_t sc) {
#pragma omp parallel for schedule(static) if (rows * cols >= CPU_GRAIN)
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = f8_to_f32(dt, src[r * sr + c * sc]);
}

static inline float load_vec(ingot_dtype dt, const char *p, int64_t i) {
  switch (dt) {
  case INGOT_BF16: return fp_bf16_to_f32(((const uint16_t *)p)[i]);
  case INGOT_F16: return fp_f16_to_f32(((const uint16_t *)p)[i]);
  default: return ((const float *)p)[i];
  }
}

static ingot_status k_scaled_mm(ingot_op_args *a) {
  const ingot_tensor *A = a->in[0], *Bm = a->in[1];
  ingot_tensor *out = a->out[0];
  int64_t m = A->shape[0], k = A->shape[1], n = Bm->shape[1];
  if (m * n == 0) return INGOT_OK;
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return ingot_set_error(INGOT_ERR_UNSUPPORTED,
                           "scaled_mm: a dimension exceeds BLAS's 32-bit limit (%lld, %lld, %lld)",
                           (long long)m, (long long)k, (long long)n);
  float *fa = malloc((size_t)(m * k + k * n + m * n) * sizeof(float) + 1);
  if (!fa) return ingot_set_error(INGOT_ERR_OOM, "scaled_mm: out of memory");
  float *fb = fa + m * k, *acc = fb + k * n;
  /* a as [m, k] row-major; b stored transposed as [n, k] row-major. */
  widen(fa, (const uint8_t *)tensor_ptr(A), A->dtype, m, k, A->strides[0], A->strides[1]);
  widen(fb, (const uint8_t *)tensor_ptr(Bm), Bm->dtype, n, k, Bm->strides[1], Bm->strides[0]);
  if (k > 0)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, fa,
                (int)k, fb, (int)k, 0.0f, acc, (int)n);
  else
    memset(acc, 0, (size_t)(m * n) * sizeof(float));

  bool rowwise = a->iarg[0] != 0;
  const float *sa = (const float *)tensor_ptr(a->in[2]), *sb = (const float *)tensor_ptr(a->in[3]);
  const char *bias = a->nin > 4 && a->in[4] ? tensor_ptr(a->in[4]) : NULL;
  ingot_dtype odt = out->dtype;
  char *po = tensor_ptr(out);
#pragma omp parallel for schedule(static) if (m * n >= CPU_GRAIN)
  for (int64_t i = 0; i < m; i++) {
    float si = rowwise ? sa[i] : sa[0];
    for (int64_t j = 0; j < n; j++) {
      float v = acc[i * n + j] * si * (rowwise ? sb[j] : sb[0]);
      if (bias) v += load_vec(odt, bias, j);
      int64_t o = i * n + j;
      switch (odt) {
      case INGOT_BF16: ((uint16_t *)po)[o] = fp_f32_to_bf16(v); break;
      case INGOT_F16: ((uint16_t *)po)[o] = fp_f32_to_f16(v); break;
      default: ((float *)po)[o] = v; break;
      }
    }
  }
  free(fa);
  return INGOT_OK;
}

void cpu_register_scaled_mm(ingot_backend *be) { be->kernels[INGOT_OP_SCALED_MM] = k_scaled_mm; }
