// Shared by the CUDA kernel files: element types, dtype dispatch, strided
// geometry, launch sizing and the current stream. Kernels see tensors only
// through the public accessors of ingot/backend.h (core's structs are C11).
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "../core/numeric.h"
#include "cuda_kernels.h"
#include "ingot/backend.h"

// ---- element types: storage structs for the formats CUDA C++ has no
// arithmetic for; every one converts to its compute type (acc_t) and back,
// bit-exactly as the CPU does (fpconv.h). ----
struct f16_t { uint16_t x; };
struct bf16_t { uint16_t x; };
struct f8e4m3_t { uint8_t x; };
struct f8e5m2_t { uint8_t x; };
struct c64_t { float re, im; };
struct c128_t { double re, im; };

template <class T> struct acc_of { using type = T; };
template <> struct acc_of<bool> { using type = bool; };
template <> struct acc_of<f16_t> { using type = float; };
template <> struct acc_of<bf16_t> { using type = float; };
template <> struct acc_of<f8e4m3_t> { using type = float; };
template <> struct acc_of<f8e5m2_t> { using type = float; };
template <class T> using acc_t = typename acc_of<T>::type;

template <class T> __host__ __device__ __forceinline__ acc_t<T> to_acc(T v) { return v; }
template <> __host__ __device__ __forceinline__ float to_acc(f16_t v) { return fp_f16_to_f32(v.x); }
template <> __host__ __device__ __forceinline__ float to_acc(bf16_t v) { return fp_bf16_to_f32(v.x); }
template <> __host__ __device__ __forceinline__ float to_acc(f8e4m3_t v) {
  return fp_f8e4m3fn_to_f32(v.x);
}
template <> __host__ __device__ __forceinline__ float to_acc(f8e5m2_t v) {
  return fp_f8e5m2_to_f32(v.x);
}

template <class T> __host__ __device__ __forceinline__ T from_acc(acc_t<T> v) { return v; }
template <> __host__ __device__ __forceinline__ f16_t from_acc<f16_t>(float v) {
  return f16_t{fp_f32_to_f16(v)};
}
template <> __host__ __device__ __forceinline__ bf16_t from_acc<bf16_t>(float v) {
  return bf16_t{fp_f32_to_bf16(v)};
}
template <> __host__ __device__ __forceinline__ f8e4m3_t from_acc<f8e4m3_t>(float v) {
  return f8e4m3_t{fp_f32_to_f8e4m3fn(v)};
}
template <> __host__ __device__ __forceinline__ f8e5m2_t from_acc<f8e5m2_t>(float v) {
  return f8e5m2_t{fp_f32_to_f8e5m2(v)};
}

// ---- dtype dispatch: runs BODY with `scalar_t` bound to the storage type ----
#define CUDA_CASE(DT, TYPE, ...)                                                               \
  case DT: {                                                                                   \
    using scalar_t = TYPE;                                                                     \
    __VA_ARGS__;                                                                               \
    break;                                                                                     \
  }
#define CUDA_CASES_INT(...)                                                                    \
  CUDA_CASE(INGOT_U8, uint8_t, __VA_ARGS__)                                                    \
  CUDA_CASE(INGOT_I8, int8_t, __VA_ARGS__)                                                     \
  CUDA_CASE(INGOT_I16, int16_t, __VA_ARGS__)                                                   \
  CUDA_CASE(INGOT_I32, int32_t, __VA_ARGS__)                                                   \
  CUDA_CASE(INGOT_I64, int64_t, __VA_ARGS__)
#define CUDA_CASES_FLOAT(...)                                                                  \
  CUDA_CASE(INGOT_F32, float, __VA_ARGS__)                                                     \
  CUDA_CASE(INGOT_F64, double, __VA_ARGS__)                                                    \
  CUDA_CASE(INGOT_F16, f16_t, __VA_ARGS__)                                                     \
  CUDA_CASE(INGOT_BF16, bf16_t, __VA_ARGS__)
#define CUDA_CASES_F8(...)                                                                     \
  CUDA_CASE(INGOT_F8E4M3FN, f8e4m3_t, __VA_ARGS__)                                             \
  CUDA_CASE(INGOT_F8E5M2, f8e5m2_t, __VA_ARGS__)
// Usage: switch (dt) { CUDA_CASES_FLOAT(launch<scalar_t>(...)) default: return err; }

// ---- strided geometry of up to CUDA_MAX_OPS same-shaped operands ----
#define CUDA_MAX_OPS 4
struct Geom {
  int ndim;               // after dropping size-1 dims and merging contiguous ones
  int64_t shape[INGOT_MAX_DIMS];
  int64_t stride[CUDA_MAX_OPS][INGOT_MAX_DIMS];  // elements
};

// Coalesced geometry of nops tensors of one shape (ts[0]'s shape).
static inline Geom make_geom(int nops, ingot_tensor *const *ts) {
  Geom g;
  g.ndim = 0;
  int nd = ingot_ndim(ts[0]);
  const int64_t *sh = ingot_shape(ts[0]);
  for (int d = 0; d < nd; d++) {
    if (sh[d] == 1) continue;
    if (g.ndim > 0) {
      bool merge = true;
      for (int k = 0; k < nops && merge; k++)
        merge = g.stride[k][g.ndim - 1] == ingot_strides(ts[k])[d] * sh[d];
      if (merge) {
        g.shape[g.ndim - 1] *= sh[d];
        for (int k = 0; k < nops; k++) g.stride[k][g.ndim - 1] = ingot_strides(ts[k])[d];
        continue;
      }
    }
    g.shape[g.ndim] = sh[d];
    for (int k = 0; k < nops; k++) g.stride[k][g.ndim] = ingot_strides(ts[k])[d];
    g.ndim++;
  }
  return g;
}

// True when every operand is contiguous along the single merged dim.
static inline bool geom_contiguous(const Geom &g, int nops) {
  if (g.ndim == 0) return true;
  if (g.ndim != 1) return false;
  for (int k = 0; k < nops; k++)
    if (g.stride[k][0] != 1) return false;
  return true;
}

// Element offsets (in elements) of linear index i for the first NOPS operands.
template <int NOPS>
__device__ __forceinline__ void geom_offsets(const Geom &g, int64_t i, int64_t *off) {
#pragma unroll
  for (int k = 0; k < NOPS; k++) off[k] = 0;
  for (int d = g.ndim - 1; d >= 0; d--) {
    int64_t n = g.shape[d];
    int64_t idx = i % n;
    i /= n;
#pragma unroll
    for (int k = 0; k < NOPS; k++) off[k] += idx * g.stride[k][d];
  }
}

// RMS_NORM's 1 / sqrt(sum(x^2) / n + eps) from the row's sum of squares ss.
__device__ __forceinline__ float inv_rms(float ss, float n, float eps) {
  return 1.0f / sqrtf(ss / n + eps);
}

// inv_rms of a row a block holds, from each
// thread's partial sum of squares ss: warp sums, then the nwarps warps' in
// order (the same bits in every thread). part: nwarps floats of shared
// memory, free again only after the caller's next barrier.
__device__ __forceinline__ float block_inv_rms(float ss, float *part, int nwarps, float n,
                                               float eps) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < nwarps; w++) t += part[w];
  return inv_rms(t, n, eps);
}

// ss plus the squares of v's four values, in order x, y, z, w.
__device__ __forceinline__ float sum_sq4(float4 v, float ss) {
  ss = fmaf(v.x, v.x, ss), ss = fmaf(v.y, v.y, ss);
  return fmaf(v.w, v.w, fmaf(v.z, v.z, ss));
}

// RMS_NORM's rounding of four values: (v * iv) * g, each product rounded
// (no FMA contraction).
__device__ __forceinline__ float4 rms_scale4(float4 v, float iv, float4 g) {
  return make_float4(__fmul_rn(__fmul_rn(v.x, iv), g.x), __fmul_rn(__fmul_rn(v.y, iv), g.y),
                     __fmul_rn(__fmul_rn(v.z, iv), g.z), __fmul_rn(__fmul_rn(v.w, iv), g.w));
}

// The thread's N float4s of v (n4 of them) at threadIdx.x + u * stride,
// zeros past the end or when !on: the RMS-norm weights that a decode kernel
// loads before its PDL wait (weights: immutable), so that its norm costs no
// round trip after the block sum.
template <int N>
__device__ __forceinline__ void norm_weights_first(const float *v, int n4, int stride, bool on,
                                                   float4 (&g)[N]) {
#pragma unroll
  for (int u = 0; u < N; u++) {
    const int i = threadIdx.x + u * stride;
    g[u] = on && i < n4 ? __ldg(reinterpret_cast<const float4 *>(v) + i)
                        : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// The 32-bit shared-space address of a shared-memory pointer (the operand
// of cp.async, ldmatrix, mbarrier and st.async).
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

// 16 bytes from global memory to shared memory without registers (cp.async:
// both 16-byte aligned); complete after cp_async_commit and cp_async_wait_all.
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  const uint32_t s = smem_u32(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
// The same copy with an L2 eviction policy (createpolicy).
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, uint64_t policy) {
  const uint32_t s = smem_u32(smem);
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem),
               "l"(policy)
               : "memory");
}
// 64-bit loads and stores, relaxed at gpu scope: single-copy atomic, so a
// flag and its value in one word arrive together (polled mailboxes).
__device__ __forceinline__ unsigned long long ld_relaxed_u64(const unsigned long long *p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_relaxed_u64(unsigned long long *p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// The thread's committed cp.async copies are complete (visible to the
// block after a barrier).
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// Grid-stride launch sizing: enough blocks to fill the GPU, never more than needed.
static inline unsigned grid_for(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  const int64_t cap = 132 * 32;  // SMs x resident blocks; grid-stride loops cover the rest
  return (unsigned)(blocks < 1 ? 1 : blocks > cap ? cap : blocks);
}

#define CUDA_GRID_STRIDE(i, n)                                                                 \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                    \
       i += (int64_t)gridDim.x * blockDim.x)

// Device dev's SM count (cached; 132, an H100/H200's, if the query fails).
static inline int sm_count(int dev) {
  static int cache[64];
  if (dev < 0 || dev >= 64) return 132;
  if (!cache[dev]) {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
      cudaGetLastError();
      n = 132;
    }
    cache[dev] = n;
  }
  return cache[dev];
}

// Stream for work on t's device (the caller's current stream there).
static inline cudaStream_t stream_of(const ingot_tensor *t) {
  return cuda_current_stream(ingot_device_of(t).index);
}

// Launch-error check after a kernel: INGOT_OK or a backend error naming what.
static inline ingot_status launch_status(const char *what) {
  return cuda_check(cudaGetLastError(), what);
}
