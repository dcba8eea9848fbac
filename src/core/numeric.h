/* Scalar element access for any dtype, with PyTorch's cast semantics:
 * values reach f16/bf16/f8 through float; floats reach integers through a
 * truncating conversion that is defined for every input (out-of-range and NaN
 * give the x86 "integer indefinite" value, as PyTorch and numpy do there). */
#ifndef INGOT_CORE_NUMERIC_H
#define INGOT_CORE_NUMERIC_H

#include <complex.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ingot/dtype.h"

static inline int64_t f64_to_i64(double x) {
  if (x >= -9223372036854775808.0 && x < 9223372036854775808.0) return (int64_t)x;
  return INT64_MIN;
}
static inline int32_t f64_to_i32(double x) {
  if (x > -2147483649.0 && x < 2147483648.0) return (int32_t)x;
  return INT32_MIN;
}
/* Narrow integers wrap modulo 2^n like a C cast from int32 on gcc. */
static inline uint8_t f64_to_u8(double x) { return (uint8_t)(uint32_t)f64_to_i32(x); }
static inline int8_t f64_to_i8(double x) { return (int8_t)f64_to_i32(x); }
static inline int16_t f64_to_i16(double x) { return (int16_t)f64_to_i32(x); }

/* Real value of element p (the real part of complex). */
static inline double load_f64(ingot_dtype dt, const void *p) {
  switch (dt) {
  case INGOT_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
  case INGOT_U8: return *(const uint8_t *)p;
  case INGOT_I8: return *(const int8_t *)p;
  case INGOT_I16: return *(const int16_t *)p;
  case INGOT_I32: return *(const int32_t *)p;
  case INGOT_I64: return (double)*(const int64_t *)p;
  case INGOT_F16: return ingot_f16_to_f32(*(const uint16_t *)p);
  case INGOT_BF16: return ingot_bf16_to_f32(*(const uint16_t *)p);
  case INGOT_F32: return *(const float *)p;
  case INGOT_F64: return *(const double *)p;
  case INGOT_C64: return *(const float *)p;
  case INGOT_C128: return *(const double *)p;
  case INGOT_F8E4M3FN: return ingot_f8e4m3fn_to_f32(*(const uint8_t *)p);
  case INGOT_F8E5M2: return ingot_f8e5m2_to_f32(*(const uint8_t *)p);
  default: return NAN;
  }
}

/* Store v into element p of dtype dt (imaginary part 0 for complex). */
static inline void store_f64(ingot_dtype dt, void *p, double v) {
  switch (dt) {
  case INGOT_BOOL: *(uint8_t *)p = v != 0; break;
  case INGOT_U8: *(uint8_t *)p = f64_to_u8(v); break;
  case INGOT_I8: *(int8_t *)p = f64_to_i8(v); break;
  case INGOT_I16: *(int16_t *)p = f64_to_i16(v); break;
  case INGOT_I32: *(int32_t *)p = f64_to_i32(v); break;
  case INGOT_I64: *(int64_t *)p = f64_to_i64(v); break;
  case INGOT_F16: *(uint16_t *)p = ingot_f32_to_f16((float)v); break;
  case INGOT_BF16: *(uint16_t *)p = ingot_f32_to_bf16((float)v); break;
  case INGOT_F32: *(float *)p = (float)v; break;
  case INGOT_F64: *(double *)p = v; break;
  case INGOT_C64: ((float *)p)[0] = (float)v; ((float *)p)[1] = 0; break;
  case INGOT_C128: ((double *)p)[0] = v; ((double *)p)[1] = 0; break;
  case INGOT_F8E4M3FN: *(uint8_t *)p = ingot_f32_to_f8e4m3fn((float)v); break;
  case INGOT_F8E5M2: *(uint8_t *)p = ingot_f32_to_f8e5m2((float)v); break;
  default: break;
  }
}

#endif
