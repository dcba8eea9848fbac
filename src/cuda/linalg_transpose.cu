// The row-major <-> column-major copies around cuSOLVER calls (launcher in
// src/cuda/linalg_cuda.h): a batched transpose through 32 x 32 shared-memory
// tiles, so that both the reads and the writes are coalesced (the generic
// strided copy reads a transposed view one scattered element per thread), with
// the conjugation and the upper-triangle mask that QR's R and the SVD's V^H
// need fused in (no second pass).
#include <stdint.h>

#include "cuda_common.cuh"
#include "linalg_cuda.h"

namespace {

constexpr int TILE = 32, ROWS = 8;

template <class T>
__device__ __forceinline__ T tr_conj(T x) {
  return x;
}
template <>
__device__ __forceinline__ float2 tr_conj(float2 x) {
  return make_float2(x.x, -x.y);
}
template <>
__device__ __forceinline__ double2 tr_conj(double2 x) {
  return make_double2(x.x, -x.y);
}

// dst[b][i][j] = src[b * sb + j * ld + i] for i < m, j < n (one tile per block:
// x tiles along j, y tiles along i, z over the batch).
template <class T>
__global__ void transpose_kernel(T *__restrict__ dst, const T *__restrict__ src, int64_t batch,
                                 int64_t m, int64_t n, int64_t ld, int64_t sb, bool conj,
                                 bool triu) {
  __shared__ T tile[TILE][TILE + 1];
  int64_t i0 = (int64_t)blockIdx.y * TILE, j0 = (int64_t)blockIdx.x * TILE;
  int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const T *s = src + b * sb;
    T *d = dst + b * m * n;
    for (int r = ty; r < TILE; r += ROWS) {  // read along i: contiguous in src
      int64_t i = i0 + tx, j = j0 + r;
      if (i < m && j < n) tile[r][tx] = s[j * ld + i];
    }
    __syncthreads();
    for (int r = ty; r < TILE; r += ROWS) {  // write along j: contiguous in dst
      int64_t i = i0 + r, j = j0 + tx;
      if (i < m && j < n) {
        T v = conj ? tr_conj(tile[tx][r]) : tile[tx][r];
        d[i * n + j] = triu && i > j ? T{} : v;
      }
    }
    __syncthreads();
  }
}

template <class T>
void launch(void *dst, const void *src, int64_t batch, int64_t m, int64_t n, int64_t ld, int64_t sb,
            bool conj, bool triu, cudaStream_t s) {
  dim3 grid((unsigned)((n + TILE - 1) / TILE), (unsigned)((m + TILE - 1) / TILE),
            (unsigned)(batch < 65535 ? batch : 65535));
  transpose_kernel<<<grid, dim3(TILE, ROWS), 0, s>>>((T *)dst, (const T *)src, batch, m, n, ld, sb,
                                                     conj, triu);
}

}  // namespace

extern "C" cudaError_t cuda_la_transpose(int dt, void *dst, const void *src, int64_t batch,
                                         int64_t m, int64_t n, int64_t ld, int64_t sb, int conj,
                                         int triu, cudaStream_t s) {
  if (batch == 0 || m == 0 || n == 0) return cudaSuccess;
  if ((m + TILE - 1) / TILE > 65535) return cudaErrorInvalidValue;  // grid y limit
  switch (dt) {
    case INGOT_F32:
      launch<float>(dst, src, batch, m, n, ld, sb, false, triu, s);
      break;
    case INGOT_F64:
      launch<double>(dst, src, batch, m, n, ld, sb, false, triu, s);
      break;
    case INGOT_C64:
      launch<float2>(dst, src, batch, m, n, ld, sb, conj, triu, s);
      break;
    default:
      launch<double2>(dst, src, batch, m, n, ld, sb, conj, triu, s);
      break;
  }
  return cudaGetLastError();
}
