/* Ingot dtypes: the element types, their sizes, PyTorch's type promotion and
 * bit-exact scalar conversions for the 16- and 8-bit float formats. */
#ifndef INGOT_DTYPE_H
#define INGOT_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ingot_dtype {
  INGOT_BOOL,
  INGOT_U8,
  INGOT_I8,
  INGOT_I16,
  INGOT_I32,
  INGOT_I64,
  INGOT_F16,
  INGOT_BF16,
  INGOT_F32,
  INGOT_F64,
  INGOT_C64,
  INGOT_C128,
  INGOT_F8E4M3FN,
  INGOT_F8E5M2,
  INGOT_DTYPE_COUNT,
  INGOT_DTYPE_INVALID = -1
} ingot_dtype;

/* Size of one element in bytes (0 for an invalid dtype). */
size_t ingot_dtype_size(ingot_dtype dt);
/* PyTorch-style name: "float32", "bfloat16", "float8_e4m3fn", ... */
const char *ingot_dtype_name(ingot_dtype dt);
/* Parse a name as ingot_dtype_name prints it; INGOT_DTYPE_INVALID if unknown. */
ingot_dtype ingot_dtype_from_name(const char *name);
/* Categories: floating excludes complex; integral excludes bool. */
bool ingot_dtype_is_floating(ingot_dtype dt);
bool ingot_dtype_is_complex(ingot_dtype dt);
bool ingot_dtype_is_integral(ingot_dtype dt);
bool ingot_dtype_is_signed(ingot_dtype dt);
/* PyTorch's promote_types; INGOT_DTYPE_INVALID (and an error) for pairs
 * PyTorch refuses (an f8 type with any other type). */
ingot_dtype ingot_promote_types(ingot_dtype a, ingot_dtype b);

/* Scalar conversions, bit-exact with PyTorch (round to nearest even).
 * f8e4m3fn has no infinity: |x| >= 480 (after rounding) and ±inf become NaN. */
float ingot_f16_to_f32(uint16_t h);
uint16_t ingot_f32_to_f16(float f);
float ingot_bf16_to_f32(uint16_t h);
uint16_t ingot_f32_to_bf16(float f);
float ingot_f8e4m3fn_to_f32(uint8_t x);
uint8_t ingot_f32_to_f8e4m3fn(float f);
float ingot_f8e5m2_to_f32(uint8_t x);
uint8_t ingot_f32_to_f8e5m2(float f);

#ifdef __cplusplus
}
#endif
#endif
