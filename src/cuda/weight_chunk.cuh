// 16-byte weight chunks shared by the GEMV (gemv.cu) and expert (moe.cu)
// kernels: how many elements a chunk holds per weight type (VEC), how to
// widen its piece q (4 elements) to float, a streaming 16-byte load and an L2
// prefetch of whole rows.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda_common.cuh"

namespace {

// ---- weight formats: VEC elements per 16-byte chunk; piece q = 4 floats ----
template <class WT>
struct Wfmt;
template <>
struct Wfmt<float> {
  static constexpr int VEC = 4;
  __device__ static void piece(const uint4 &v, int, float *f) {
    f[0] = __uint_as_float(v.x), f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z), f[3] = __uint_as_float(v.w);
  }
};
__device__ __forceinline__ uint32_t word(const uint4 &v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
template <>
struct Wfmt<bf16_t> {
  static constexpr int VEC = 8;
  __device__ static void piece(const uint4 &v, int q, float *f) {
    uint32_t a = word(v, 2 * q), b = word(v, 2 * q + 1);
    // element 2i is the low half of word i (little endian)
    f[0] = __uint_as_float(a << 16), f[1] = __uint_as_float(a & 0xffff0000u);
    f[2] = __uint_as_float(b << 16), f[3] = __uint_as_float(b & 0xffff0000u);
  }
};
template <>
struct Wfmt<f16_t> {
  static constexpr int VEC = 8;
  __device__ static void piece(const uint4 &v, int q, float *f) {
    uint32_t a = word(v, 2 * q), b = word(v, 2 * q + 1);
    float2 fa = __half22float2(*reinterpret_cast<const __half2 *>(&a));
    float2 fb = __half22float2(*reinterpret_cast<const __half2 *>(&b));
    f[0] = fa.x, f[1] = fa.y, f[2] = fb.x, f[3] = fb.y;
  }
};
template <__nv_fp8_interpretation_t I>
__device__ __forceinline__ void f8x4(uint32_t a, float *f) {
  // Every f8 value is exact in f16; cvt.f16x2.e4m3x2/e5m2x2 keeps byte order.
  __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(a & 0xffffu), I);
  __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(a >> 16), I);
  float2 flo = __half22float2(*reinterpret_cast<const __half2 *>(&lo));
  float2 fhi = __half22float2(*reinterpret_cast<const __half2 *>(&hi));
  f[0] = flo.x, f[1] = flo.y, f[2] = fhi.x, f[3] = fhi.y;
}
template <>
struct Wfmt<f8e4m3_t> {
  static constexpr int VEC = 16;
  __device__ static void piece(const uint4 &v, int q, float *f) { f8x4<__NV_E4M3>(word(v, q), f); }
};
template <>
struct Wfmt<f8e5m2_t> {
  static constexpr int VEC = 16;
  __device__ static void piece(const uint4 &v, int q, float *f) { f8x4<__NV_E5M2>(word(v, q), f); }
};

// Streaming 16-byte load: the weights are read once, keep them out of L1.
__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The same load with an L2 eviction policy (see l2_evict_first).
__device__ __forceinline__ uint4 ld_stream(const uint4 *p, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

// An L2 policy for bytes read once: their lines are the first to go, so rows
// prefetched (at normal priority) for a later kernel stay in L2 meanwhile.
// A pure value (not volatile): the compiler may hoist it out of loops.
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Asks L2 to fetch [p, p + bytes) from DRAM (sm_90 bulk prefetch): a hint that
// costs no registers and is never waited for, so a block can have far more
// bytes on their way than its loads could hold. p 16-byte aligned, bytes a
// multiple of 16; issued in pieces of at most 64 KiB.
__device__ __forceinline__ void prefetch_l2(const void *p, int64_t bytes) {
  const char *c = static_cast<const char *>(p);
  for (int64_t o = 0; o < bytes; o += 65536) {
    const uint32_t n = (uint32_t)(bytes - o < 65536 ? bytes - o : 65536);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(c + o), "r"(n) : "memory");
  }
}

// The same prefetch with an L2 eviction policy.
__device__ __forceinline__ void prefetch_l2(const void *p, int64_t bytes, uint64_t policy) {
  const char *c = static_cast<const char *>(p);
  for (int64_t o = 0; o < bytes; o += 65536) {
    const uint32_t n = (uint32_t)(bytes - o < 65536 ? bytes - o : 65536);
    asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(c + o),
                 "r"(n), "l"(policy)
                 : "memory");
  }
}

}  // namespace
