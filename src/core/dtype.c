/* Dtype table, PyTorch type promotion, and bit-exact conversions of the
 * 16- and 8-bit float formats (the algorithms of c10's Half, BFloat16 and
 * Float8 types, so that results match PyTorch bit for bit). */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "numeric.h"

static const struct {
  const char *name;
  size_t size;
} dtype_info[INGOT_DTYPE_COUNT] = {
    [INGOT_BOOL] = {"bool", 1},           [INGOT_U8] = {"uint8", 1},
    [INGOT_I8] = {"int8", 1},             [INGOT_I16] = {"int16", 2},
    [INGOT_I32] = {"int32", 4},           [INGOT_I64] = {"int64", 8},
    [INGOT_F16] = {"float16", 2},         [INGOT_BF16] = {"bfloat16", 2},
    [INGOT_F32] = {"float32", 4},         [INGOT_F64] = {"float64", 8},
    [INGOT_C64] = {"complex64", 8},       [INGOT_C128] = {"complex128", 16},
    [INGOT_F8E4M3FN] = {"float8_e4m3fn", 1}, [INGOT_F8E5M2] = {"float8_e5m2", 1},
};

static bool valid(ingot_dtype dt) { return dt >= 0 && dt < INGOT_DTYPE_COUNT; }

size_t ingot_dtype_size(ingot_dtype dt) { return valid(dt) ? dtype_info[dt].size : 0; }

const char *ingot_dtype_name(ingot_dtype dt) { return valid(dt) ? dtype_info[dt].name : "invalid"; }

ingot_dtype ingot_dtype_from_name(const char *name) {
  for (int i = 0; name && i < INGOT_DTYPE_COUNT; i++)
    if (!strcmp(name, dtype_info[i].name)) return (ingot_dtype)i;
  return INGOT_DTYPE_INVALID;
}

bool ingot_dtype_is_floating(ingot_dtype dt) {
  return dt == INGOT_F16 || dt == INGOT_BF16 || dt == INGOT_F32 || dt == INGOT_F64 ||
         dt == INGOT_F8E4M3FN || dt == INGOT_F8E5M2;
}

bool ingot_dtype_is_complex(ingot_dtype dt) { return dt == INGOT_C64 || dt == INGOT_C128; }

bool ingot_dtype_is_integral(ingot_dtype dt) { return dt >= INGOT_U8 && dt <= INGOT_I64; }

bool ingot_dtype_is_signed(ingot_dtype dt) {
  return dt != INGOT_BOOL && dt != INGOT_U8 && valid(dt);
}

/* PyTorch's promoteTypes table restricted to our dtypes (no complex32). */
ingot_dtype ingot_promote_types(ingot_dtype a, ingot_dtype b) {
  enum { b1 = INGOT_BOOL, u1 = INGOT_U8, i1 = INGOT_I8, i2 = INGOT_I16, i4 = INGOT_I32,
         i8 = INGOT_I64, f2 = INGOT_F16, bf = INGOT_BF16, f4 = INGOT_F32, f8 = INGOT_F64,
         c4 = INGOT_C64, c8 = INGOT_C128 };
  static const signed char table[12][12] = {
      /*        b1  u1  i1  i2  i4  i8  f2  bf  f4  f8  c4  c8 */
      /* b1 */ {b1, u1, i1, i2, i4, i8, f2, bf, f4, f8, c4, c8},
      /* u1 */ {u1, u1, i2, i2, i4, i8, f2, bf, f4, f8, c4, c8},
      /* i1 */ {i1, i2, i1, i2, i4, i8, f2, bf, f4, f8, c4, c8},
      /* i2 */ {i2, i2, i2, i2, i4, i8, f2, bf, f4, f8, c4, c8},
      /* i4 */ {i4, i4, i4, i4, i4, i8, f2, bf, f4, f8, c4, c8},
      /* i8 */ {i8, i8, i8, i8, i8, i8, f2, bf, f4, f8, c4, c8},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f4, f4, f8, c4, c8},
      /* bf */ {bf, bf, bf, bf, bf, bf, f4, bf, f4, f8, c4, c8},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f8, c4, c8},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, c8, c8},
      /* c4 */ {c4, c4, c4, c4, c4, c4, c4, c4, c4, c8, c4, c8},
      /* c8 */ {c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8},
  };
  if (!valid(a) || !valid(b)) {
    ingot_set_error(INGOT_ERR_DTYPE, "promote_types: invalid dtype");
    return INGOT_DTYPE_INVALID;
  }
  if (a == b) return a;
  if (a >= INGOT_F8E4M3FN || b >= INGOT_F8E4M3FN) {
    ingot_set_error(INGOT_ERR_DTYPE, "promotion of %s with %s is not supported (float8 types "
                    "promote only with themselves)", ingot_dtype_name(a), ingot_dtype_name(b));
    return INGOT_DTYPE_INVALID;
  }
  return (ingot_dtype)table[a][b];
}

/* ---- conversions ---- */
static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float ingot_f16_to_f32(uint16_t h) {
  /* c10::detail::fp16_ieee_to_fp32_value */
  const uint32_t w = (uint32_t)h << 16;
  const uint32_t sign = w & UINT32_C(0x80000000);
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = UINT32_C(0xE0) << 23;
  const float exp_scale = 0x1.0p-112f;
  const float normalized = f32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = UINT32_C(126) << 23;
  const float magic_bias = 0.5f;
  const float denormalized = f32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = UINT32_C(1) << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? f32_bits(denormalized) : f32_bits(normalized));
  return f32_from_bits(result);
}

uint16_t ingot_f32_to_f16(float f) {
  /* c10::detail::fp16_ieee_from_fp32_value */
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = f32_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & UINT32_C(0x80000000);
  uint32_t bias = shl1_w & UINT32_C(0xFF000000);
  if (bias < UINT32_C(0x71000000)) bias = UINT32_C(0x71000000);
  base = f32_from_bits((bias >> 1) + UINT32_C(0x07800000)) + base;
  const uint32_t bits = f32_bits(base);
  const uint32_t exp_bits = (bits >> 13) & UINT32_C(0x00007C00);
  const uint32_t mantissa_bits = bits & UINT32_C(0x00000FFF);
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return (uint16_t)((sign >> 16) | (shl1_w > UINT32_C(0xFF000000) ? UINT16_C(0x7E00) : nonsign));
}

float ingot_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t ingot_f32_to_bf16(float f) {
  /* c10::detail::round_to_nearest_even */
  if (isnan(f)) return UINT16_C(0x7FC0);
  const uint32_t u = f32_bits(f);
  const uint32_t rounding_bias = ((u >> 16) & 1) + UINT32_C(0x7FFF);
  return (uint16_t)((u + rounding_bias) >> 16);
}

float ingot_f8e4m3fn_to_f32(uint8_t x) {
  /* c10::detail::fp8e4m3fn_to_fp32_value */
  const uint32_t w = (uint32_t)x << 24;
  const uint32_t sign = w & UINT32_C(0x80000000);
  const uint32_t nonsign = w & UINT32_C(0x7FFFFFFF);
  uint32_t renorm_shift = (uint32_t)__builtin_clz(nonsign | 1);
  renorm_shift = renorm_shift > 4 ? renorm_shift - 4 : 0;
  const int32_t inf_nan_mask = ((int32_t)(nonsign + 0x01000000) >> 8) & INT32_C(0x7F800000);
  const int32_t zero_mask = (int32_t)(nonsign - 1) >> 31;
  const uint32_t result =
      sign | ((((nonsign << renorm_shift >> 4) + ((0x78 - renorm_shift) << 23)) |
               (uint32_t)inf_nan_mask) &
              ~(uint32_t)zero_mask);
  return f32_from_bits(result);
}

uint8_t ingot_f32_to_f8e4m3fn(float f) {
  /* c10::detail::fp8e4m3fn_from_fp32_value */
  const uint32_t fp8_max = UINT32_C(1087) << 20;
  const uint32_t denorm_mask = UINT32_C(141) << 23;
  uint32_t f_bits = f32_bits(f);
  uint8_t result = 0u;
  const uint32_t sign = f_bits & UINT32_C(0x80000000);
  f_bits ^= sign;
  if (f_bits >= fp8_max) {
    result = 0x7f;
  } else if (f_bits < (UINT32_C(121) << 23)) {
    f_bits = f32_bits(f32_from_bits(f_bits) + f32_from_bits(denorm_mask));
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

float ingot_f8e5m2_to_f32(uint8_t x) { return ingot_f16_to_f32((uint16_t)((uint16_t)x << 8)); }

uint8_t ingot_f32_to_f8e5m2(float f) {
  /* c10::detail::fp8e5m2_from_fp32_value */
  const uint32_t fp32_inf = UINT32_C(255) << 23;
  const uint32_t fp8_max = UINT32_C(143) << 23;
  const uint32_t denorm_mask = UINT32_C(134) << 23;
  uint32_t f_bits = f32_bits(f);
  uint8_t result = 0u;
  const uint32_t sign = f_bits & UINT32_C(0x80000000);
  f_bits ^= sign;
  if (f_bits >= fp8_max) {
    result = f_bits > fp32_inf ? UINT8_C(0x7F) : UINT8_C(0x7C);
  } else if (f_bits < (UINT32_C(113) << 23)) {
    f_bits = f32_bits(f32_from_bits(f_bits) + f32_from_bits(denorm_mask));
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
