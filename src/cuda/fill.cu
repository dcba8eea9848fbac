// Fill: n copies of one element's bytes, any element size.
#include <cstring>

#include "cuda_kernels.h"

template <typename T>
__global__ void fill_kernel(T *dst, T v, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = v;
}

template <typename T>
static cudaError_t launch(void *dst, const void *pattern, int64_t n, cudaStream_t s) {
  T v;
  memcpy(&v, pattern, sizeof v);
  int64_t blocks = (n + 255) / 256;
  if (blocks > 65535 * 8) blocks = 65535 * 8;
  fill_kernel<T><<<(unsigned)blocks, 256, 0, s>>>((T *)dst, v, n);
  return cudaGetLastError();
}

extern "C" cudaError_t cuda_fill_pattern(void *dst, const void *pattern, int es, int64_t n,
                                         cudaStream_t s) {
  switch (es) {
  case 1: return launch<uint8_t>(dst, pattern, n, s);
  case 2: return launch<uint16_t>(dst, pattern, n, s);
  case 4: return launch<uint32_t>(dst, pattern, n, s);
  case 8: return launch<uint64_t>(dst, pattern, n, s);
  case 16: return launch<double2>(dst, pattern, n, s);
  default: return cudaErrorInvalidValue;
  }
}
