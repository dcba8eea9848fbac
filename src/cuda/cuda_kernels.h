/* extern "C" launchers of the CUDA kernels (.cu files in this folder). */
#ifndef INGOT_CUDA_KERNELS_H
#define INGOT_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "ingot/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Map a CUDA error to an ingot status and message (INGOT_OK on success). */
ingot_status cuda_check(cudaError_t err, const char *what);
/* Shape and per-operand strides (elements) of a two-operand op. */
typedef struct cuda_geom2 {
  int ndim;
  int64_t shape[8];
  int64_t stride[2][8]; /* [0] destination, [1] source */
} cuda_geom2;

/* dst[i] = (dst dtype) src[i] over the geometry g (n elements). */
cudaError_t cuda_copy_strided(void *dst, int dst_dt, const void *src, int src_dt,
                              const cuda_geom2 *g, int64_t n);
/* Element-indexed generators (src/core/generate.h) into a contiguous out. */
cudaError_t cuda_generate(void *out, int op, int dt, int64_t n, int64_t cols, const double *farg,
                          const int64_t *iarg);
/* Write n copies of an es-byte pattern (es = 1, 2, 4, 8 or 16) to dst. */
cudaError_t cuda_fill_pattern(void *dst, const void *pattern, int es, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
