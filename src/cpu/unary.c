/* CPU unary kernels (contract: src/core/ops_elementwise.c). One loop per
 * (op, dtype), generated from the expression tables below; f16/bf16/f8 run
 * through float32 and round once. */
#include <math.h>

#include "../core/scalar_ops.h"
#include "elementwise_loop.h"

/* ---- real floating types: M(fn) names the float or double libm function ---- */
#define REAL_OPS(X, M, T)                                                                  \
  X(NEG, -x)                                                                               \
  X(ABS, M(fabs)(x))                                                                       \
  X(SIGN, (T)((0 < x) - (x < 0))) /* NaN gives 0, as PyTorch */                            \
  X(EXP, M(exp)(x))                                                                        \
  X(EXP2, M(exp2)(x))                                                                      \
  X(LOG, M(log)(x))                                                                        \
  X(LOG2, M(log2)(x))                                                                      \
  X(LOG1P, M(log1p)(x))                                                                    \
  X(EXPM1, M(expm1)(x))                                                                    \
  X(SQRT, M(sqrt)(x))                                                                      \
  X(RSQRT, (T)1 / M(sqrt)(x))                                                              \
  X(RECIPROCAL, (T)1 / x)                                                                  \
  X(SIN, M(sin)(x))                                                                        \
  X(COS, M(cos)(x))                                                                        \
  X(TAN, M(tan)(x))                                                                        \
  X(TANH, M(tanh)(x))                                                                      \
  X(SIGMOID, (T)1 / ((T)1 + M(exp)(-x)))                                                   \
  X(SILU, x / ((T)1 + M(exp)(-x)))                                                         \
  X(GELU, x * (T)0.5 * ((T)1 + M(erf)(x * (T)M_SQRT1_2)))                                  \
  X(GELU_TANH,                                                                             \
    (T)0.5 * x *                                                                           \
        ((T)1 + M(tanh)((T)0.7978845608028654 * (x + (T)0.044715 * x * x * x))))           \
  X(RELU, x < 0 ? (T)0 : x) /* NaN stays NaN */                                            \
  X(ERF, M(erf)(x))                                                                        \
  X(FLOOR, M(floor)(x))                                                                    \
  X(CEIL, M(ceil)(x))                                                                      \
  X(ROUND, M(rint)(x)) /* half to even in the default rounding mode */                     \
  X(TRUNC, M(trunc)(x))

#define REAL_PREDS(X)                                                                      \
  X(ISNAN, isnan(x))                                                                       \
  X(ISINF, isinf(x))                                                                       \
  X(ISFINITE, isfinite(x))                                                                 \
  X(LOGICAL_NOT, x == 0)

#define INT_OPS(X, T)                                                                      \
  X(NEG, (T)(0 - (uint64_t)x)) /* wraps, as PyTorch */                                     \
  X(ABS, so_is_neg(x) ? (T)(0 - (uint64_t)x) : x)                                          \
  X(SIGN, (T)((0 < x) - so_is_neg(x)))                                                     \
  X(RELU, so_is_neg(x) ? (T)0 : x)                                                         \
  X(BITWISE_NOT, (T)~x)

#define INT_PREDS(X)                                                                       \
  X(ISNAN, 0)                                                                              \
  X(ISINF, 0)                                                                              \
  X(ISFINITE, 1)                                                                           \
  X(LOGICAL_NOT, x == 0)

/* Complex: M(fn) names the c..f or c.. function; abs has a real output and
 * is generated separately. */
#define CPLX_OPS(X, M, T, R)                                                               \
  X(NEG, -x)                                                                               \
  X(SIGN, x == 0 ? (T)0 : x / M(cabs)(x))                                                  \
  X(EXP, M(cexp)(x))                                                                       \
  X(LOG, M(clog)(x))                                                                       \
  X(SQRT, M(csqrt)(x))                                                                     \
  X(RSQRT, (T)1 / M(csqrt)(x))                                                             \
  X(RECIPROCAL, (T)1 / x)                                                                  \
  X(SIN, M(csin)(x))                                                                       \
  X(COS, M(ccos)(x))                                                                       \
  X(TAN, M(ctan)(x))                                                                       \
  X(TANH, M(ctanh)(x))

#define CPLX_PREDS(X, M)                                                                   \
  X(ISNAN, isnan(M(creal)(x)) || isnan(M(cimag)(x)))                                       \
  X(ISINF, isinf(M(creal)(x)) || isinf(M(cimag)(x)))                                       \
  X(ISFINITE, isfinite(M(creal)(x)) && isfinite(M(cimag)(x)))                              \
  X(LOGICAL_NOT, x == 0)

#define MF(fn) fn##f
#define MD(fn) fn

/* float32 */
#define X_F32(OP, E) EW_UNARY_LOOP(u_f32_##OP, float, float, E)
#define P_F32(OP, E) EW_UNARY_LOOP(u_f32_##OP, float, uint8_t, E)
REAL_OPS(X_F32, MF, float)
REAL_PREDS(P_F32)
/* float64 */
#define X_F64(OP, E) EW_UNARY_LOOP(u_f64_##OP, double, double, E)
#define P_F64(OP, E) EW_UNARY_LOOP(u_f64_##OP, double, uint8_t, E)
REAL_OPS(X_F64, MD, double)
REAL_PREDS(P_F64)
/* complex64 / complex128 */
#define X_C64(OP, E) EW_UNARY_LOOP(u_c64_##OP, c64_t, c64_t, E)
#define P_C64(OP, E) EW_UNARY_LOOP(u_c64_##OP, c64_t, uint8_t, E)
CPLX_OPS(X_C64, MF, c64_t, float)
CPLX_PREDS(P_C64, MF)
EW_UNARY_LOOP(u_c64_ABS, c64_t, float, cabsf(x))
#define X_C128(OP, E) EW_UNARY_LOOP(u_c128_##OP, c128_t, c128_t, E)
#define P_C128(OP, E) EW_UNARY_LOOP(u_c128_##OP, c128_t, uint8_t, E)
CPLX_OPS(X_C128, MD, c128_t, double)
CPLX_PREDS(P_C128, MD)
EW_UNARY_LOOP(u_c128_ABS, c128_t, double, cabs(x))
/* integers */
#define INT_DEFS(tag, T)                                                                   \
  INT_OPS(X_INT_##tag, T)                                                                  \
  INT_PREDS(P_INT_##tag)
#define X_INT_u8(OP, E) EW_UNARY_LOOP(u_u8_##OP, uint8_t, uint8_t, E)
#define P_INT_u8(OP, E) EW_UNARY_LOOP(u_u8_##OP, uint8_t, uint8_t, E)
#define X_INT_i8(OP, E) EW_UNARY_LOOP(u_i8_##OP, int8_t, int8_t, E)
#define P_INT_i8(OP, E) EW_UNARY_LOOP(u_i8_##OP, int8_t, uint8_t, E)
#define X_INT_i16(OP, E) EW_UNARY_LOOP(u_i16_##OP, int16_t, int16_t, E)
#define P_INT_i16(OP, E) EW_UNARY_LOOP(u_i16_##OP, int16_t, uint8_t, E)
#define X_INT_i32(OP, E) EW_UNARY_LOOP(u_i32_##OP, int32_t, int32_t, E)
#define P_INT_i32(OP, E) EW_UNARY_LOOP(u_i32_##OP, int32_t, uint8_t, E)
#define X_INT_i64(OP, E) EW_UNARY_LOOP(u_i64_##OP, int64_t, int64_t, E)
#define P_INT_i64(OP, E) EW_UNARY_LOOP(u_i64_##OP, int64_t, uint8_t, E)
INT_DEFS(u8, uint8_t)
INT_DEFS(i8, int8_t)
INT_DEFS(i16, int16_t)
INT_DEFS(i32, int32_t)
INT_DEFS(i64, int64_t)
/* bool (stored as uint8 0/1) */
EW_UNARY_LOOP(u_b_BITWISE_NOT, uint8_t, uint8_t, !x)
EW_UNARY_LOOP(u_b_ID, uint8_t, uint8_t, x)
#define P_B(OP, E) EW_UNARY_LOOP(u_b_##OP, uint8_t, uint8_t, E)
INT_PREDS(P_B)

/* Tables: op -> loop, per dtype. */
#define E_F32(OP, E) [INGOT_OP_##OP] = u_f32_##OP,
#define E_F64(OP, E) [INGOT_OP_##OP] = u_f64_##OP,
#define E_C64(OP, E) [INGOT_OP_##OP] = u_c64_##OP,
#define E_C128(OP, E) [INGOT_OP_##OP] = u_c128_##OP,
#define E_u8(OP, E) [INGOT_OP_##OP] = u_u8_##OP,
#define E_i8(OP, E) [INGOT_OP_##OP] = u_i8_##OP,
#define E_i16(OP, E) [INGOT_OP_##OP] = u_i16_##OP,
#define E_i32(OP, E) [INGOT_OP_##OP] = u_i32_##OP,
#define E_i64(OP, E) [INGOT_OP_##OP] = u_i64_##OP,
#define E_B(OP, E) [INGOT_OP_##OP] = u_b_##OP,

static const cpu_loop_fn tab_f32[INGOT_OP_COUNT] = {REAL_OPS(E_F32, MF, float)
                                                        REAL_PREDS(E_F32)};
static const cpu_loop_fn tab_f64[INGOT_OP_COUNT] = {REAL_OPS(E_F64, MD, double)
                                                        REAL_PREDS(E_F64)};
static const cpu_loop_fn tab_c64[INGOT_OP_COUNT] = {
    CPLX_OPS(E_C64, MF, c64_t, float) CPLX_PREDS(E_C64, MF)[INGOT_OP_ABS] = u_c64_ABS};
static const cpu_loop_fn tab_c128[INGOT_OP_COUNT] = {
    CPLX_OPS(E_C128, MD, c128_t, double) CPLX_PREDS(E_C128, MD)[INGOT_OP_ABS] = u_c128_ABS};
static const cpu_loop_fn tab_u8[INGOT_OP_COUNT] = {INT_OPS(E_u8, uint8_t) INT_PREDS(E_u8)};
static const cpu_loop_fn tab_i8[INGOT_OP_COUNT] = {INT_OPS(E_i8, int8_t) INT_PREDS(E_i8)};
static const cpu_loop_fn tab_i16[INGOT_OP_COUNT] = {INT_OPS(E_i16, int16_t) INT_PREDS(E_i16)};
static const cpu_loop_fn tab_i32[INGOT_OP_COUNT] = {INT_OPS(E_i32, int32_t) INT_PREDS(E_i32)};
static const cpu_loop_fn tab_i64[INGOT_OP_COUNT] = {INT_OPS(E_i64, int64_t) INT_PREDS(E_i64)};
static const cpu_loop_fn tab_b[INGOT_OP_COUNT] = {
    INT_PREDS(E_B)[INGOT_OP_BITWISE_NOT] = u_b_BITWISE_NOT, [INGOT_OP_ABS] = u_b_ID,
    [INGOT_OP_SIGN] = u_b_ID, [INGOT_OP_RELU] = u_b_ID};

static const cpu_loop_fn *table_for(ingot_dtype dt) {
  switch (dt) {
  case INGOT_BOOL: return tab_b;
  case INGOT_U8: return tab_u8;
  case INGOT_I8: return tab_i8;
  case INGOT_I16: return tab_i16;
  case INGOT_I32: return tab_i32;
  case INGOT_I64: return tab_i64;
  case INGOT_F32: return tab_f32;
  case INGOT_F64: return tab_f64;
  case INGOT_C64: return tab_c64;
  case INGOT_C128: return tab_c128;
  default: return NULL;
  }
}

static ingot_status k_unary(ingot_op_args *a) {
  ingot_tensor *in = a->in[0], *out = a->out[0];
  if (cpu_is_lowp(in->dtype) || cpu_is_lowp(out->dtype)) return cpu_via_f32(a, k_unary);
  const cpu_loop_fn *tab = table_for(in->dtype);
  cpu_loop_fn fn = tab ? tab[a->op] : NULL;
  if (!fn)
    return ingot_set_error(INGOT_ERR_DTYPE, "%s: no CPU kernel for dtype %s",
                           ingot_op_name(a->op), ingot_dtype_name(in->dtype));
  ingot_tensor *ts[2] = {out, in};
  cpu_foreach(2, ts, fn, NULL);
  return INGOT_OK;
}

void cpu_register_unary(ingot_backend *be) {
  for (int op = INGOT_OP_NEG; op <= INGOT_OP_BITWISE_NOT; op++) be->kernels[op] = k_unary;
}
