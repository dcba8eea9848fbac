// ARANGE, LINSPACE, EYE and the Philox draws: the element-indexed generators
// of generate.h, one thread an element, so values match the CPU's.
#include "../core/generate.h"
#include "cuda_kernels.h"

__global__ void generate_kernel(gen_params c, char *out, int es) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c.n;
       i += (int64_t)gridDim.x * blockDim.x)
    gen_value(&c, i, out + i * es);
}

extern "C" cudaError_t cuda_generate(void *out, int op, int dt, int64_t n, int64_t cols,
                                     const double *farg, const int64_t *iarg, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  gen_params c;
  gen_params_from_args(&c, op, (ingot_dtype)dt, n, cols, farg, iarg);
  int64_t blocks = (n + 255) / 256;
  if (blocks > 132 * 64) blocks = 132 * 64;
  generate_kernel<<<(unsigned)blocks, 256, 0, s>>>(c, (char *)out, (int)ingot_dtype_size((ingot_dtype)dt));
  return cudaGetLastError();
}
