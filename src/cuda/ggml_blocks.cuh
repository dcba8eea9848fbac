// GGML block formats on the device: decode one 32-element "unit" of a row of
// blocks (a legacy block, one 32-element sub-block of a K-quant super-block,
// or 32 elements of an F32/F16/BF16 row) into floats, bit-exactly as
// src/model/quant.c (ggml's dequantize_row_*): the same products in the same
// order, with _rn intrinsics so that nvcc never fuses them into FMAs.
// Loads: blocks are only 2- or 4-byte aligned (18, 20, 22, 34, 210-byte
// blocks), so a type whose block size is a multiple of 4 reads 32-bit words,
// the others pairs of 16-bit halves; `al` false (a row start not aligned that
// much) reads bytes. SH (the blocks were staged in shared memory, which the
// caller pads by kSharedSlack bytes): aligned 32-bit words joined by funnel
// shifts, whatever the byte alignment (`al` is then ignored).
#pragma once

#include <cuda_fp16.h>
#include <stdint.h>

#include "ingot/quant.h"

namespace ggml {

constexpr int kUnit = 32;  // elements decoded per call
// Bytes an SH decode may read past the end of the staged blocks.
constexpr int kSharedSlack = 16;

template <int TYPE>
struct Traits;
#define GGML_TRAITS(T, BLOCK, BYTES, ALIGN)                           \
  template <>                                                         \
  struct Traits<T> {                                                  \
    static constexpr int block = BLOCK, bytes = BYTES, align = ALIGN; \
  };
GGML_TRAITS(INGOT_GGML_F32, 1, 4, 4)
GGML_TRAITS(INGOT_GGML_F16, 1, 2, 2)
GGML_TRAITS(INGOT_GGML_BF16, 1, 2, 2)
GGML_TRAITS(INGOT_GGML_Q4_0, 32, 18, 2)
GGML_TRAITS(INGOT_GGML_Q4_1, 32, 20, 4)
GGML_TRAITS(INGOT_GGML_Q5_0, 32, 22, 2)
GGML_TRAITS(INGOT_GGML_Q5_1, 32, 24, 4)
GGML_TRAITS(INGOT_GGML_Q8_0, 32, 34, 2)
GGML_TRAITS(INGOT_GGML_Q4_K, 256, 144, 4)
GGML_TRAITS(INGOT_GGML_Q5_K, 256, 176, 4)
GGML_TRAITS(INGOT_GGML_Q6_K, 256, 210, 2)
#undef GGML_TRAITS

// Byte / 16-bit loads: read-only cache from global memory, plain from shared.
template <bool SH, class T>
__device__ __forceinline__ T ld(const T *p) {
  if constexpr (SH)
    return *p;
  else
    return __ldg(p);
}

// Little-endian 32-bit word at p (p is A-aligned when al; any alignment, SH).
template <int A, bool SH = false>
__device__ __forceinline__ uint32_t word(const uint8_t *p, bool al) {
  if constexpr (SH) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint32_t *b = reinterpret_cast<const uint32_t *>(a & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(a & 3u) * 8u;
    return sh ? __funnelshift_r(b[0], b[1], sh) : b[0];
  }
  if (al && A == 4) return __ldg(reinterpret_cast<const uint32_t *>(p));
  if (al) {
    const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
    return (uint32_t)__ldg(h) | (uint32_t)__ldg(h + 1) << 16;
  }
  return (uint32_t)__ldg(p) | (uint32_t)__ldg(p + 1) << 8 | (uint32_t)__ldg(p + 2) << 16 |
         (uint32_t)__ldg(p + 3) << 24;
}

// NW words from p (SH: NW + 1 aligned shared loads, one funnel shift each).
template <int A, int NW, bool SH = false>
__device__ __forceinline__ void words(const uint8_t *p, bool al, uint32_t *w) {
  if constexpr (SH) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint32_t *b = reinterpret_cast<const uint32_t *>(a & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(a & 3u) * 8u;
    uint32_t t[NW + 1];
#pragma unroll
    for (int i = 0; i < NW; i++) t[i] = b[i];
    t[NW] = sh ? b[NW] : 0u;
#pragma unroll
    for (int i = 0; i < NW; i++) w[i] = sh ? __funnelshift_r(t[i], t[i + 1], sh) : t[i];
  } else {
#pragma unroll
    for (int i = 0; i < NW; i++) w[i] = word<A>(p + 4 * i, al);
  }
}

__device__ __forceinline__ uint32_t byte_of(const uint32_t *w, int i) {
  return (w[i >> 2] >> (8 * (i & 3))) & 0xffu;
}
__device__ __forceinline__ float half_lo(uint32_t w) {
  return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
}
__device__ __forceinline__ float half_hi(uint32_t w) {
  return __half2float(__ushort_as_half((unsigned short)(w >> 16)));
}
// f16 at an even byte offset of a 2-aligned block (bytes when !al).
template <bool SH = false>
__device__ __forceinline__ float half_at(const uint8_t *p, bool al) {
  if constexpr (SH) return half_lo(word<2, true>(p, al));
  uint32_t h = al ? (uint32_t)__ldg(reinterpret_cast<const uint16_t *>(p))
                  : (uint32_t)__ldg(p) | (uint32_t)__ldg(p + 1) << 8;
  return half_lo(h);
}

// Legacy 32-element blocks: element j < 16 is the low nibble of qs[j],
// element j + 16 the high nibble (Q8_0: the bytes in order).
template <int TYPE, bool SH = false>
__device__ __forceinline__ void decode_legacy(const uint8_t *b, bool al, float *v) {
  constexpr int A = Traits<TYPE>::align;
  if (TYPE == INGOT_GGML_Q8_0) {
    const float d = half_at<SH>(b, al);
    uint32_t q[8];
    words<A, 8, SH>(b + 2, al, q);
#pragma unroll
    for (int j = 0; j < 32; j++) v[j] = __fmul_rn((float)(int8_t)byte_of(q, j), d);
    return;
  }
  float d, m = 0.f;
  uint32_t qh = 0, q[4];
  if (TYPE == INGOT_GGML_Q4_0) {
    d = half_at<SH>(b, al);
    words<A, 4, SH>(b + 2, al, q);
  } else if (TYPE == INGOT_GGML_Q5_0) {
    d = half_at<SH>(b, al);
    qh = word<A, SH>(b + 2, al);
    words<A, 4, SH>(b + 6, al, q);
  } else {  // Q4_1, Q5_1: d and m in the first word
    const uint32_t dm = word<A, SH>(b, al);
    d = half_lo(dm), m = half_hi(dm);
    if (TYPE == INGOT_GGML_Q5_1) {
      qh = word<A, SH>(b + 4, al);
      words<A, 4, SH>(b + 8, al, q);
    } else {
      words<A, 4, SH>(b + 4, al, q);
    }
  }
#pragma unroll
  for (int j = 0; j < 16; j++) {
    int lo = (int)(byte_of(q, j) & 15u), hi = (int)(byte_of(q, j) >> 4);
    if (TYPE == INGOT_GGML_Q5_0 || TYPE == INGOT_GGML_Q5_1) {
      lo |= (int)((qh >> j) & 1u) << 4;
      hi |= (int)((qh >> (j + 16)) & 1u) << 4;
    }
    if (TYPE == INGOT_GGML_Q4_0) lo -= 8, hi -= 8;
    if (TYPE == INGOT_GGML_Q5_0) lo -= 16, hi -= 16;
    if (TYPE == INGOT_GGML_Q4_1 || TYPE == INGOT_GGML_Q5_1) {
      v[j] = __fadd_rn(__fmul_rn((float)lo, d), m);
      v[j + 16] = __fadd_rn(__fmul_rn((float)hi, d), m);
    } else {
      v[j] = __fmul_rn((float)lo, d);
      v[j + 16] = __fmul_rn((float)hi, d);
    }
  }
}

// Sub-block s (0..7) of a Q4_K / Q5_K super-block: 6-bit scale and min.
__device__ __forceinline__ void scale_min_k4(int j, const uint32_t *sc, int *d, int *m) {
  if (j < 4) {
    *d = (int)(byte_of(sc, j) & 63u);
    *m = (int)(byte_of(sc, j + 4) & 63u);
  } else {
    *d = (int)((byte_of(sc, j + 4) & 0xFu) | ((byte_of(sc, j - 4) >> 6) << 4));
    *m = (int)((byte_of(sc, j + 4) >> 4) | ((byte_of(sc, j) >> 6) << 4));
  }
}

template <int TYPE, bool SH = false>
__device__ __forceinline__ void decode_k(const uint8_t *b, int s, bool al, float *v) {
  constexpr int A = Traits<TYPE>::align;
  if (TYPE == INGOT_GGML_Q6_K) {
    const int h = s / 4, t = s % 4, lsh = (t >> 1) * 4, hsh = 2 * t;
    uint32_t lo[8], hi[8];
    words<A, 8, SH>(b + h * 64 + (t & 1) * 32, al, lo);
    words<A, 8, SH>(b + 128 + h * 32, al, hi);
    const uint32_t scw = word<A, SH>(b + 192 + (s * 32 / 16), al);  // 2 scales (bytes 0, 1)
    const float d = half_at<SH>(b + 208, al);
    const float ds0 = __fmul_rn(d, (float)(int8_t)(scw & 0xffu));
    const float ds1 = __fmul_rn(d, (float)(int8_t)((scw >> 8) & 0xffu));
#pragma unroll
    for (int l = 0; l < 32; l++) {
      const int q =
          (int)(((byte_of(lo, l) >> lsh) & 0xFu) | (((byte_of(hi, l) >> hsh) & 3u) << 4)) - 32;
      v[l] = __fmul_rn(l < 16 ? ds0 : ds1, (float)q);
    }
    return;
  }
  const uint32_t dm = word<A, SH>(b, al);
  uint32_t sc[3], q[8], qh[8];
  words<A, 3, SH>(b + 4, al, sc);
  int isc, im;
  scale_min_k4(s, sc, &isc, &im);
  const float d1 = __fmul_rn(half_lo(dm), (float)isc), m1 = __fmul_rn(half_hi(dm), (float)im);
  const int sh = (s & 1) * 4;
  if (TYPE == INGOT_GGML_Q5_K) {
    words<A, 8, SH>(b + 16, al, qh);
    words<A, 8, SH>(b + 48 + (s / 2) * 32, al, q);
  } else {
    words<A, 8, SH>(b + 16 + (s / 2) * 32, al, q);
  }
#pragma unroll
  for (int l = 0; l < 32; l++) {
    int x = (int)((byte_of(q, l) >> sh) & 0xFu);
    if (TYPE == INGOT_GGML_Q5_K) x |= (int)((byte_of(qh, l) >> s) & 1u) << 4;
    v[l] = __fsub_rn(__fmul_rn(d1, (float)x), m1);
  }
}

// Unit u (elements 32u .. 32u+31, fewer at the end of an F32/F16/BF16 row of
// k elements: the rest are 0) of a row.
template <int TYPE, bool SH = false>
__device__ __forceinline__ void decode_unit(const uint8_t *row, int64_t u, int64_t k, bool al,
                                            float *v) {
  using Tr = Traits<TYPE>;
  if (Tr::block == 32) {
    decode_legacy<TYPE, SH>(row + u * Tr::bytes, al, v);
  } else if (Tr::block == 256) {
    decode_k<TYPE, SH>(row + (u / 8) * Tr::bytes, (int)(u % 8), al, v);
  } else {
    const uint8_t *p = row + u * kUnit * Tr::bytes;
    const int64_t n = k - u * kUnit;
    if (n >= kUnit) {
      uint32_t w[kUnit * Tr::bytes / 4];
      words<Tr::align, kUnit * Tr::bytes / 4, SH>(p, al, w);
#pragma unroll
      for (int i = 0; i < kUnit; i++) {
        if (TYPE == INGOT_GGML_F32)
          v[i] = __uint_as_float(w[i]);
        else if (TYPE == INGOT_GGML_F16)
          v[i] = (i & 1) ? half_hi(w[i / 2]) : half_lo(w[i / 2]);
        else
          v[i] = __uint_as_float((i & 1) ? (w[i / 2] & 0xffff0000u) : (w[i / 2] << 16));
      }
    } else {
#pragma unroll
      for (int i = 0; i < kUnit; i++) {
        v[i] = 0.f;
        if (i < n) {
          const uint8_t *e = p + i * Tr::bytes;
          uint32_t bits = (uint32_t)ld<SH>(e) | (uint32_t)ld<SH>(e + 1) << 8;
          if (TYPE == INGOT_GGML_F32)
            v[i] = __uint_as_float(bits | (uint32_t)ld<SH>(e + 2) << 16 |
                                   (uint32_t)ld<SH>(e + 3) << 24);
          else if (TYPE == INGOT_GGML_F16)
            v[i] = half_lo(bits);
          else
            v[i] = __uint_as_float(bits << 16);
        }
      }
    }
  }
}

// Run BODY with `constexpr int QT` bound to a ggml type id (all 11 types).
#define GGML_TYPE_CASE(T, ...) \
  case T: {                    \
    constexpr int QT = T;      \
    __VA_ARGS__;               \
    break;                     \
  }
#define GGML_TYPE_SWITCH(type, ...)              \
  switch (type) {                                \
    GGML_TYPE_CASE(INGOT_GGML_F32, __VA_ARGS__)  \
    GGML_TYPE_CASE(INGOT_GGML_F16, __VA_ARGS__)  \
    GGML_TYPE_CASE(INGOT_GGML_BF16, __VA_ARGS__) \
    GGML_TYPE_CASE(INGOT_GGML_Q4_0, __VA_ARGS__) \
    GGML_TYPE_CASE(INGOT_GGML_Q4_1, __VA_ARGS__) \
    GGML_TYPE_CASE(INGOT_GGML_Q5_0, __VA_ARGS__) \
    GGML_TYPE_CASE(INGOT_GGML_Q5_1, __VA_ARGS__) \
    GGML_TYPE_CASE(INGOT_GGML_Q8_0, __VA_ARGS__) \
    GGML_TYPE_CASE(INGOT_GGML_Q4_K, __VA_ARGS__) \
    GGML_TYPE_CASE(INGOT_GGML_Q5_K, __VA_ARGS__) \
    GGML_TYPE_CASE(INGOT_GGML_Q6_K, __VA_ARGS__) \
    default:                                     \
      break;                                     \
  }

}  // namespace ggml
