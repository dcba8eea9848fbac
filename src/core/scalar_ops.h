/* Scalar semantics of the binary ops that the CPU (src/cpu/binary.c) and CUDA
 * (src/cuda/elementwise.cu) kernels share: integer floor division, remainder,
 * power and shifts, and PyTorch's floating floor division / remainder.
 * Header-only (FPCONV_FN: static inline in C, __host__ __device__ under nvcc).
 *
 * Integer division by zero yields 0 and sets *zero = true (left alone
 * otherwise); each backend raises its own flag from that (the CPU an
 * atomic_int, CUDA a device int). */
#ifndef INGOT_CORE_SCALAR_OPS_H
#define INGOT_CORE_SCALAR_OPS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "fpconv.h"

/* Sign test that does not warn on unsigned types. */
FPCONV_FN bool so_is_neg(int64_t v) { return v < 0; }

FPCONV_FN int64_t so_i_floordiv(int64_t a, int64_t b, bool *zero) {
  if (b == 0) {
    *zero = true;
    return 0;
  }
  if (b == -1) return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 wraps */
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) q--;
  return q;
}
FPCONV_FN int64_t so_i_remainder(int64_t a, int64_t b, bool *zero) {
  if (b == 0) {
    *zero = true;
    return 0;
  }
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
/* Repeated squaring modulo 2^64; negative exponents as PyTorch's powi. */
FPCONV_FN int64_t so_i_pow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  while (b) {
    if (b & 1) r *= x;
    x *= x;
    b >>= 1;
  }
  return (int64_t)r;
}

/* Shifts of a W-bit integer type T: a shift by a negative amount or by W or
 * more gives 0 (left) or the sign fill (right), as PyTorch. T is the operand
 * type; the expressions are evaluated in T exactly as the kernels always did. */
#define SO_LEFT_SHIFT(T, W, a, b) (so_is_neg(b) || (b) >= (W) ? (T)0 : (T)((uint64_t)(a) << (b)))
#define SO_RIGHT_SHIFT(T, W, a, b) \
  (so_is_neg(b) || (b) >= (W) ? (T)(so_is_neg(a) ? -1 : 0) : (T)((a) >> (b)))

/* Real MAXIMUM / MINIMUM: a NaN on either side propagates. */
#define SO_NAN_MAX(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b))
#define SO_NAN_MIN(a, b) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b))

/* PyTorch's div_floor_floating and Python-style float remainder:
 * so_f_floordiv_float / _double, so_f_remainder_float / _double. */
#define SO_FLOAT_DIVMOD(T, M)                                                              \
  FPCONV_FN T so_f_floordiv_##T(T a, T b) {                                                \
    if (b == 0) return a / b;                                                              \
    T mod = M(fmod)(a, b);                                                                 \
    T div = (a - mod) / b;                                                                 \
    if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;                                        \
    if (div == 0) return M(copysign)((T)0, a / b);                                         \
    T fl = M(floor)(div);                                                                  \
    if (div - fl > (T)0.5) fl += 1;                                                        \
    return fl;                                                                             \
  }                                                                                        \
  FPCONV_FN T so_f_remainder_##T(T a, T b) {                                               \
    T mod = M(fmod)(a, b);                                                                 \
    if (mod != 0 && (b < 0) != (mod < 0)) mod += b;                                        \
    return mod;                                                                            \
  }
#define SO_MF(fn) fn##f
#define SO_MD(fn) fn
SO_FLOAT_DIVMOD(float, SO_MF)
SO_FLOAT_DIVMOD(double, SO_MD)
#undef SO_FLOAT_DIVMOD
#undef SO_MF
#undef SO_MD

#endif
