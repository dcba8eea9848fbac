/* Scalar element access for any dtype, with PyTorch's cast semantics:
 * values reach f16/bf16/f8 through float; floats reach integers through a
 * truncating conversion that is defined for every input (out-of-range and NaN
 * give the x86 "integer indefinite" value, as PyTorch and numpy do there). */
#ifndef INGOT_CORE_NUMERIC_H
#define INGOT_CORE_NUMERIC_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fpconv.h"
#include "ingot/dtype.h"

FPCONV_FN int64_t f64_to_i64(double x) {
  if (x >= -9223372036854775808.0 && x < 9223372036854775808.0) return (int64_t)x;
  return INT64_MIN;
}
FPCONV_FN int32_t f64_to_i32(double x) {
  if (x > -2147483649.0 && x < 2147483648.0) return (int32_t)x;
  return INT32_MIN;
}
/* Narrow integers wrap modulo 2^n like a C cast from int32 on gcc. */
FPCONV_FN uint8_t f64_to_u8(double x) { return (uint8_t)(uint32_t)f64_to_i32(x); }
FPCONV_FN int8_t f64_to_i8(double x) { return (int8_t)f64_to_i32(x); }
FPCONV_FN int16_t f64_to_i16(double x) { return (int16_t)f64_to_i32(x); }

/* Real value of element p (the real part of complex). */
FPCONV_FN double load_f64(ingot_dtype dt, const void *p) {
  switch (dt) {
  case INGOT_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
  case INGOT_U8: return *(const uint8_t *)p;
  case INGOT_I8: return *(const int8_t *)p;
  case INGOT_I16: return *(const int16_t *)p;
  case INGOT_I32: return *(const int32_t *)p;
  case INGOT_I64: return (double)*(const int64_t *)p;
  case INGOT_F16: return fp_f16_to_f32(*(const uint16_t *)p);
  case INGOT_BF16: return fp_bf16_to_f32(*(const uint16_t *)p);
  case INGOT_F32: return *(const float *)p;
  case INGOT_F64: return *(const double *)p;
  case INGOT_C64: return *(const float *)p;
  case INGOT_C128: return *(const double *)p;
  case INGOT_F8E4M3FN: return fp_f8e4m3fn_to_f32(*(const uint8_t *)p);
  case INGOT_F8E5M2: return fp_f8e5m2_to_f32(*(const uint8_t *)p);
  default: return 0.0 / 0.0;
  }
}

/* Store v into element p of dtype dt (imaginary part 0 for complex). */
FPCONV_FN void store_f64(ingot_dtype dt, void *p, double v) {
  switch (dt) {
  case INGOT_BOOL: *(uint8_t *)p = v != 0; break;
  case INGOT_U8: *(uint8_t *)p = f64_to_u8(v); break;
  case INGOT_I8: *(int8_t *)p = f64_to_i8(v); break;
  case INGOT_I16: *(int16_t *)p = f64_to_i16(v); break;
  case INGOT_I32: *(int32_t *)p = f64_to_i32(v); break;
  case INGOT_I64: *(int64_t *)p = f64_to_i64(v); break;
  case INGOT_F16: *(uint16_t *)p = fp_f32_to_f16((float)v); break;
  case INGOT_BF16: *(uint16_t *)p = fp_f32_to_bf16((float)v); break;
  case INGOT_F32: *(float *)p = (float)v; break;
  case INGOT_F64: *(double *)p = v; break;
  case INGOT_C64: ((float *)p)[0] = (float)v; ((float *)p)[1] = 0; break;
  case INGOT_C128: ((double *)p)[0] = v; ((double *)p)[1] = 0; break;
  case INGOT_F8E4M3FN: *(uint8_t *)p = fp_f32_to_f8e4m3fn((float)v); break;
  case INGOT_F8E5M2: *(uint8_t *)p = fp_f32_to_f8e5m2((float)v); break;
  default: break;
  }
}

/* One element in transit: integers stay integers so that int64 -> float
 * rounds once, as a C cast (and PyTorch) does. */
typedef struct sval {
  int kind; /* 0 integer, 1 real, 2 complex */
  int64_t i;
  double re, im;
} sval;

FPCONV_FN sval load_sval(ingot_dtype dt, const char *p) {
  sval v = {0, 0, 0, 0};
  switch (dt) {
  case INGOT_BOOL: v.i = *(const uint8_t *)p != 0; break;
  case INGOT_U8: v.i = *(const uint8_t *)p; break;
  case INGOT_I8: v.i = *(const int8_t *)p; break;
  case INGOT_I16: v.i = *(const int16_t *)p; break;
  case INGOT_I32: v.i = *(const int32_t *)p; break;
  case INGOT_I64: v.i = *(const int64_t *)p; break;
  case INGOT_C64:
    v.kind = 2, v.re = ((const float *)p)[0], v.im = ((const float *)p)[1];
    break;
  case INGOT_C128:
    v.kind = 2, v.re = ((const double *)p)[0], v.im = ((const double *)p)[1];
    break;
  default: v.kind = 1, v.re = load_f64(dt, p); break;
  }
  return v;
}

FPCONV_FN float sval_f32(sval v) { return v.kind == 0 ? (float)v.i : (float)v.re; }

FPCONV_FN void store_sval(ingot_dtype dt, char *p, sval v) {
  if (v.kind == 0) {
    switch (dt) {
    case INGOT_BOOL: *(uint8_t *)p = v.i != 0; return;
    case INGOT_U8: *(uint8_t *)p = (uint8_t)v.i; return;
    case INGOT_I8: *(int8_t *)p = (int8_t)v.i; return;
    case INGOT_I16: *(int16_t *)p = (int16_t)v.i; return;
    case INGOT_I32: *(int32_t *)p = (int32_t)v.i; return;
    case INGOT_I64: *(int64_t *)p = v.i; return;
    case INGOT_F64: *(double *)p = (double)v.i; return;
    case INGOT_C128: ((double *)p)[0] = (double)v.i, ((double *)p)[1] = 0; return;
    default: break;
    }
  }
  switch (dt) {
  case INGOT_BOOL: *(uint8_t *)p = v.kind == 0 ? v.i != 0 : (v.re != 0 || v.im != 0); return;
  case INGOT_F32: *(float *)p = sval_f32(v); return;
  case INGOT_F16: *(uint16_t *)p = fp_f32_to_f16(sval_f32(v)); return;
  case INGOT_BF16: *(uint16_t *)p = fp_f32_to_bf16(sval_f32(v)); return;
  case INGOT_F8E4M3FN: *(uint8_t *)p = fp_f32_to_f8e4m3fn(sval_f32(v)); return;
  case INGOT_F8E5M2: *(uint8_t *)p = fp_f32_to_f8e5m2(sval_f32(v)); return;
  case INGOT_C64:
    ((float *)p)[0] = sval_f32(v), ((float *)p)[1] = (float)v.im;
    return;
  case INGOT_C128: ((double *)p)[0] = v.re, ((double *)p)[1] = v.im; return;
  default: store_f64(dt, p, v.re); return; /* reals into integers and f64 */
  }
}

#endif
