// Pieces of the f16 / bf16 tensor-core dots of the decode kernels (moe_block.cu's
// phase 1b, gemv_tc.cu): an f32 operand as 16-bit hi + lo pairs, scaled by a
// power of 2 into f16's range; e4m3 bytes widened to f16 exactly; one mma
// m16n8k16 (f16 or bf16) with f32 sums.
#pragma once

#include <cuda_fp16.h>
#include <stdint.h>

namespace {

// A pair of floats as a 16-bit pair (rn: lo in the low half) and back (low,
// high: exact), bf16 or f16.
struct Bf16x2 {
  __device__ static uint32_t rn(float lo, float hi) {
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
  }
  __device__ static float low(uint32_t v) { return __uint_as_float(v << 16); }
  __device__ static float high(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
};
struct F16x2 {
  __device__ static uint32_t rn(float lo, float hi) {
    uint32_t d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
  }
  __device__ static float low(uint32_t v) {
    return __half2float(__ushort_as_half((unsigned short)(v & 0xffffu)));
  }
  __device__ static float high(uint32_t v) {
    return __half2float(__ushort_as_half((unsigned short)(v >> 16)));
  }
};

// h's pair (a, b) as 16-bit pairs hi + lo (bf16: 16 significant bits,
// relative error <= 2^-16 an element; f16: 22 bits, see f8_sigma_exp); inf
// and NaN in hi alone.
template <class P>
__device__ __forceinline__ void split_x2(float a, float b, uint32_t &hi, uint32_t &lo) {
  hi = P::rn(a, b);
  const float ha = P::low(hi), hb = P::high(hi);
  lo = P::rn(isfinite(ha) ? a - ha : 0.f, isfinite(hb) ? b - hb : 0.f);
}

// An f32 operand of an f16 mma: times sigma (a power of 2 that brings the
// largest finite |value| of its group into [2^14, 2^15): f16 range) as f16
// hi + lo pairs (22 significant bits, or an error under 2^-38 of the group's
// largest; inf and NaN in hi alone) against e4m3 rows widened to f16 exactly
// (every e4m3 value is an f16); the f32 sums times 1 / sigma. moe_block's f8
// phase 1b scales each 128 elements of h, gemv_tc each warp's k slice of X
// (the whole row where a norm's block sum is needed anyway).
// f8_sigma_exp: log2 sigma from the largest finite |value| as f32 bits (0: 1).
__device__ __forceinline__ int f8_sigma_exp(uint32_t maxbits) {
  const int e = maxbits ? (int)(maxbits >> 23) - 127 : 0;  // max in [2^e, 2^(e+1))
  return 14 - (e < -86 ? -86 : e);                         // sigma = 2^this, at most 2^100
}
__device__ __forceinline__ float fin_abs(float v) { return isfinite(v) ? fabsf(v) : 0.f; }
__device__ __forceinline__ float pow2f(int e) { return __uint_as_float((uint32_t)(e + 127) << 23); }
// Four e4m3 bytes (lowest first) as two f16 pairs, exactly. (weight_chunk.cuh's
// f8x4 converts by the intrinsic, which takes each half by a shift: 16 more
// instructions a group of down_group_tc8; this cvt reads the halves in place.)
__device__ __forceinline__ void e4m3x4_f16(uint32_t r, uint32_t &lo, uint32_t &hi) {
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\n"
      "cvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(r));
}

// d += a b (m16n8k16, f16 in, f32 accumulate).
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += a b (m16n8k16, bf16 in, f32 accumulate).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace
