/* How BLAS (the CPU's cblas, CUDA's cuBLASLt) reads one [rows, cols]
 * row-major-indexed matrix with element strides (sr, sc) in place: row-major
 * (trans false, ld = row stride) or column-major (trans true, ld = col stride).
 * False when neither fits. Strides of size-1 dims do not matter. Host only;
 * shared by src/cpu/matmul.c and src/cuda/matmul.cu. */
#ifndef INGOT_CORE_BLAS_LAYOUT_H
#define INGOT_CORE_BLAS_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

static inline bool blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool *trans,
                               int64_t *ld) {
  int64_t mc = cols > 1 ? cols : 1, mr = rows > 1 ? rows : 1;
  if ((cols <= 1 || sc == 1) && (rows <= 1 || sr >= mc)) {
    *trans = false;
    *ld = rows <= 1 ? mc : sr;
    return true;
  }
  if ((rows <= 1 || sr == 1) && (cols <= 1 || sc >= mr)) {
    *trans = true;
    *ld = cols <= 1 ? mr : sc;
    return true;
  }
  return false;
}

#endif
