// COPY: strided copy with a cast between any two dtypes, one thread an
// element. Casts use the same header-only code as the CPU (numeric.h), so
// both devices give identical bits.
#include "../core/numeric.h"
#include "cuda_kernels.h"

__global__ void copy_kernel(char *dst, const char *src, int dst_dt, int src_dt, int dst_es,
                            int src_es, cuda_geom2 g, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i, od = 0, os = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
      int64_t idx = r % g.shape[d];
      r /= g.shape[d];
      od += idx * g.stride[0][d];
      os += idx * g.stride[1][d];
    }
    store_sval((ingot_dtype)dst_dt, dst + od * dst_es,
               load_sval((ingot_dtype)src_dt, src + os * src_es));
  }
}

extern "C" cudaError_t cuda_copy_strided(void *dst, int dst_dt, const void *src, int src_dt,
                                         const cuda_geom2 *g, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 132 * 64) blocks = 132 * 64;
  copy_kernel<<<(unsigned)blocks, 256, 0, s>>>((char *)dst, (const char *)src, dst_dt, src_dt,
                                         (int)ingot_dtype_size((ingot_dtype)dst_dt),
                                         (int)ingot_dtype_size((ingot_dtype)src_dt), *g, n);
  return cudaGetLastError();
}
