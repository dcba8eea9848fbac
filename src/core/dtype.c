/* Dtype table, PyTorch type promotion, and bit-exact conversions of the
 * 16- and 8-bit float formats (the algorithms of c10's Half, BFloat16 and
 * Float8 types, so that results match PyTorch bit for bit). */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "fpconv.h"
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

/* ---- conversions: thin wrappers of fpconv.h ---- */
float ingot_f16_to_f32(uint16_t h) { return fp_f16_to_f32(h); }
uint16_t ingot_f32_to_f16(float f) { return fp_f32_to_f16(f); }
float ingot_bf16_to_f32(uint16_t h) { return fp_bf16_to_f32(h); }
uint16_t ingot_f32_to_bf16(float f) { return fp_f32_to_bf16(f); }
float ingot_f8e4m3fn_to_f32(uint8_t x) { return fp_f8e4m3fn_to_f32(x); }
uint8_t ingot_f32_to_f8e4m3fn(float f) { return fp_f32_to_f8e4m3fn(f); }
float ingot_f8e5m2_to_f32(uint8_t x) { return fp_f8e5m2_to_f32(x); }
uint8_t ingot_f32_to_f8e5m2(float f) { return fp_f32_to_f8e5m2(f); }
