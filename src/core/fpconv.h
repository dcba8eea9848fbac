/* Bit-exact conversions of the 16- and 8-bit float formats: c10's algorithms
 * (Half, BFloat16, Float8_e4m3fn, Float8_e5m2), so that results match PyTorch
 * bit for bit. Header-only so the CPU and CUDA backends share one definition. */
#ifndef INGOT_CORE_FPCONV_H
#define INGOT_CORE_FPCONV_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FPCONV_FN static __host__ __device__ __forceinline__
#else
#define FPCONV_FN static inline
#endif

FPCONV_FN uint32_t fp_clz(uint32_t x) {
#ifdef __CUDA_ARCH__
  return (uint32_t)__clz((int)x);
#else
  return (uint32_t)__builtin_clz(x);
#endif
}

FPCONV_FN uint32_t fp_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
FPCONV_FN float fp_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

FPCONV_FN float fp_f16_to_f32(uint16_t h) {
  /* c10::detail::fp16_ieee_to_fp32_value */
  const uint32_t w = (uint32_t)h << 16;
  const uint32_t sign = w & UINT32_C(0x80000000);
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = UINT32_C(0xE0) << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = fp_from_bits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = UINT32_C(126) << 23;
  const float magic_bias = 0.5f;
  const float denormalized = fp_from_bits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? fp_bits(denormalized) : fp_bits(normalized));
  return fp_from_bits(result);
}

FPCONV_FN uint16_t fp_f32_to_f16(float f) {
  /* c10::detail::fp16_ieee_from_fp32_value */
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = ((f < 0 ? -f : f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = fp_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & UINT32_C(0x80000000);
  uint32_t bias = shl1_w & UINT32_C(0xFF000000);
  if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
  base = fp_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
  const uint32_t bits = fp_bits(base);
  const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
  const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : nonsign));
}

FPCONV_FN float fp_bf16_to_f32(uint16_t h) { return fp_from_bits((uint32_t)h << 16); }

FPCONV_FN uint16_t fp_f32_to_bf16(float f) {
  /* c10::detail::round_to_nearest_even */
  if (f != f) return UINT16_C(0x7FC0);
  const uint32_t u = fp_bits(f);
  const uint32_t rounding_bias = ((u >> 16) & 1) + UINT32_C(0x7FFF);
  return (uint16_t)((u + rounding_bias) >> 16);
}

FPCONV_FN float fp_f8e4m3fn_to_f32(uint8_t x) {
  /* c10::detail::fp8e4m3fn_to_fp32_value */
  const uint32_t w = (uint32_t)x << 24;
  const uint32_t sign = w & UINT32_C(0x80000000);
  const uint32_t nonsign = w & UINT32_C(0x7FFFFFFF);
  uint32_t renorm_shift = (uint32_t)fp_clz(nonsign | 1);
  renorm_shift = renorm_shift > 4 ? renorm_shift - 4 : 0;
  const int32_t inf_nan_mask = ((int32_t)(nonsign + 0x01000000) >> 8) & INT32_C(0x7F800000);
  const int32_t zero_mask = (int32_t)(nonsign - 1) >> 31;
  const uint32_t result =
      sign | ((((nonsign << renorm_shift >> 4) + ((0x78 - renorm_shift) << 23)) |
               (uint32_t)inf_nan_mask) &
              ~(uint32_t)zero_mask);
  return fp_from_bits(result);
}

FPCONV_FN uint8_t fp_f32_to_f8e4m3fn(float f) {
  /* c10::detail::fp8e4m3fn_from_fp32_value */
  const uint32_t fp8_max = UINT32_C(1087) << 20;
  const uint32_t denorm_mask = UINT32_C(141) << 23;
  uint32_t f_bits = fp_bits(f);
  uint8_t result = 0u;
  const uint32_t sign = f_bits & UINT32_C(0x80000000);
  f_bits ^= sign;
  if (f_bits >= fp8_max) {
    result = 0x7f;
  } else if (f_bits < (UINT32_C(121) << 23)) {
    f_bits = fp_bits(fp_from_bits(f_bits) + fp_from_bits(denorm_mask));
    result = (uint8_t)(f_bits - denorm_mask);
  } else {
    const uint8_t mant_odd = (f_bits >> 20) & 1;
    f_bits += ((uint32_t)(7 - 127) << 23) + 0x7FFFF;
    f_bits += mant_odd;
    result = (uint8_t)(f_bits >> 20);
  }
  result |= (uint8_t)(sign >> 24);
  return result;
}

FPCONV_FN float fp_f8e5m2_to_f32(uint8_t x) { return fp_f16_to_f32((uint16_t)((uint16_t)x << 8)); }

FPCONV_FN uint8_t fp_f32_to_f8e5m2(float f) {
  /* c10::detail::fp8e5m2_from_fp32_value */
  const uint32_t fp32_inf = UINT32_C(255) << 23;
  const uint32_t fp8_max = UINT32_C(143) << 23;
  const uint32_t denorm_mask = UINT32_C(134) << 23;
  uint32_t f_bits = fp_bits(f);
  uint8_t result = 0u;
  const uint32_t sign = f_bits & UINT32_C(0x80000000);
  f_bits ^= sign;
  if (f_bits >= fp8_max) {
    result = f_bits > fp32_inf ? UINT8_C(0x7F) : UINT8_C(0x7C);
  } else if (f_bits < (UINT32_C(113) << 23)) {
    f_bits = fp_bits(fp_from_bits(f_bits) + fp_from_bits(denorm_mask));
    result = (uint8_t)(f_bits - denorm_mask);
  } else {
    const uint32_t mant_odd = (f_bits >> 21) & 1;
    f_bits += ((uint32_t)(15 - 127) << 23) + 0xFFFFF;
    f_bits += mant_odd;
    result = (uint8_t)(f_bits >> 21);
  }
  result |= (uint8_t)(sign >> 24);
  return result;
}

#endif
