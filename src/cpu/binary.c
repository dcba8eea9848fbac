/* CPU binary kernels, where and clamp (contract: src/core/ops_elementwise.c).
 * One loop per (op, dtype) from the expression tables below; integer
 * arithmetic wraps through uint64 (no signed overflow); f16/bf16/f8 run
 * through float32 and round once. */
#include <math.h>
#include <stdatomic.h>

#include "../core/scalar_ops.h"
#include "elementwise_loop.h"

/* Integer division by zero is flagged in ctx (an atomic_int) and yields 0. */
static inline int64_t i_floordiv(int64_t a, int64_t b, void *ctx) {
  bool zero = false;
  int64_t q = so_i_floordiv(a, b, &zero);
  if (zero) atomic_store_explicit((atomic_int *)ctx, 1, memory_order_relaxed);
  return q;
}
static inline int64_t i_remainder(int64_t a, int64_t b, void *ctx) {
  bool zero = false;
  int64_t r = so_i_remainder(a, b, &zero);
  if (zero) atomic_store_explicit((atomic_int *)ctx, 1, memory_order_relaxed);
  return r;
}
#define MF(fn) fn##f
#define MD(fn) fn

/* ---- expression tables: X(OP, expr of a and b) ---- */
#define CMP_OPS(X)                                                                         \
  X(EQ, a == b)                                                                            \
  X(NE, a != b)                                                                            \
  X(LT, a < b)                                                                             \
  X(LE, a <= b)                                                                            \
  X(GT, a > b)                                                                             \
  X(GE, a >= b)

#define REAL_OPS(X, M, T)                                                                  \
  X(ADD, a + b)                                                                            \
  X(SUB, a - b)                                                                            \
  X(MUL, a * b)                                                                            \
  X(DIV, a / b)                                                                            \
  X(FLOOR_DIVIDE, so_f_floordiv_##T(a, b))                                                 \
  X(REMAINDER, so_f_remainder_##T(a, b))                                                   \
  X(POW, M(pow)(a, b))                                                                     \
  X(ATAN2, M(atan2)(a, b))                                                                 \
  X(MAXIMUM, SO_NAN_MAX(a, b)) /* NaN propagates */                                        \
  X(MINIMUM, SO_NAN_MIN(a, b))

#define INT_OPS(X, T, W)                                                                   \
  X(ADD, (T)((uint64_t)a + (uint64_t)b))                                                   \
  X(SUB, (T)((uint64_t)a - (uint64_t)b))                                                   \
  X(MUL, (T)((uint64_t)a * (uint64_t)b))                                                   \
  X(FLOOR_DIVIDE, (T)i_floordiv(a, b, ctx))                                                \
  X(REMAINDER, (T)i_remainder(a, b, ctx))                                                  \
  X(POW, (T)so_i_pow(a, b))                                                                \
  X(MAXIMUM, a > b ? a : b)                                                                \
  X(MINIMUM, a < b ? a : b)                                                                \
  X(BITWISE_AND, (T)(a & b))                                                               \
  X(BITWISE_OR, (T)(a | b))                                                                \
  X(BITWISE_XOR, (T)(a ^ b))                                                               \
  X(LEFT_SHIFT, SO_LEFT_SHIFT(T, W, a, b))                                                 \
  X(RIGHT_SHIFT, SO_RIGHT_SHIFT(T, W, a, b))

/* bool is uint8 0/1: arithmetic saturates as PyTorch's bool results do. */
#define BOOL_OPS(X)                                                                        \
  X(ADD, a | b)                                                                            \
  X(MUL, a & b)                                                                            \
  X(MAXIMUM, a | b)                                                                        \
  X(MINIMUM, a & b)                                                                        \
  X(BITWISE_AND, a & b)                                                                    \
  X(BITWISE_OR, a | b)                                                                     \
  X(BITWISE_XOR, a ^ b)                                                                    \
  X(LOGICAL_AND, a & b)                                                                    \
  X(LOGICAL_OR, a | b)                                                                     \
  X(LOGICAL_XOR, a ^ b)

#define CPLX_OPS(X, M)                                                                     \
  X(ADD, a + b)                                                                            \
  X(SUB, a - b)                                                                            \
  X(MUL, a * b)                                                                            \
  X(DIV, a / b)                                                                            \
  X(POW, M(cpow)(a, b))

/* ---- loops ---- */
#define L_F32(OP, E) EW_BINARY_LOOP(b_f32_##OP, float, float, E)
#define C_F32(OP, E) EW_BINARY_LOOP(b_f32_##OP, float, uint8_t, E)
REAL_OPS(L_F32, MF, float)
CMP_OPS(C_F32)
#define L_F64(OP, E) EW_BINARY_LOOP(b_f64_##OP, double, double, E)
#define C_F64(OP, E) EW_BINARY_LOOP(b_f64_##OP, double, uint8_t, E)
REAL_OPS(L_F64, MD, double)
CMP_OPS(C_F64)
#define L_C64(OP, E) EW_BINARY_LOOP(b_c64_##OP, c64_t, c64_t, E)
CPLX_OPS(L_C64, MF)
EW_BINARY_LOOP(b_c64_EQ, c64_t, uint8_t, a == b)
EW_BINARY_LOOP(b_c64_NE, c64_t, uint8_t, a != b)
#define L_C128(OP, E) EW_BINARY_LOOP(b_c128_##OP, c128_t, c128_t, E)
CPLX_OPS(L_C128, MD)
EW_BINARY_LOOP(b_c128_EQ, c128_t, uint8_t, a == b)
EW_BINARY_LOOP(b_c128_NE, c128_t, uint8_t, a != b)
#define L_B(OP, E) EW_BINARY_LOOP(b_b_##OP, uint8_t, uint8_t, E)
BOOL_OPS(L_B)
CMP_OPS(L_B)

#define INT_LOOPS(tag, T, W)                                                               \
  INT_OPS(L_##tag, T, W)                                                                   \
  CMP_OPS(C_##tag)
#define L_u8(OP, E) EW_BINARY_LOOP(b_u8_##OP, uint8_t, uint8_t, E)
#define C_u8(OP, E) EW_BINARY_LOOP(b_u8_##OP, uint8_t, uint8_t, E)
#define L_i8(OP, E) EW_BINARY_LOOP(b_i8_##OP, int8_t, int8_t, E)
#define C_i8(OP, E) EW_BINARY_LOOP(b_i8_##OP, int8_t, uint8_t, E)
#define L_i16(OP, E) EW_BINARY_LOOP(b_i16_##OP, int16_t, int16_t, E)
#define C_i16(OP, E) EW_BINARY_LOOP(b_i16_##OP, int16_t, uint8_t, E)
#define L_i32(OP, E) EW_BINARY_LOOP(b_i32_##OP, int32_t, int32_t, E)
#define C_i32(OP, E) EW_BINARY_LOOP(b_i32_##OP, int32_t, uint8_t, E)
#define L_i64(OP, E) EW_BINARY_LOOP(b_i64_##OP, int64_t, int64_t, E)
#define C_i64(OP, E) EW_BINARY_LOOP(b_i64_##OP, int64_t, uint8_t, E)
INT_LOOPS(u8, uint8_t, 8)
INT_LOOPS(i8, int8_t, 8)
INT_LOOPS(i16, int16_t, 16)
INT_LOOPS(i32, int32_t, 32)
INT_LOOPS(i64, int64_t, 64)

/* ---- tables: op -> loop, per dtype ---- */
#define E_(tag, OP) [INGOT_OP_##OP] = b_##tag##_##OP,
#define E_f32(OP, E) E_(f32, OP)
#define E_f64(OP, E) E_(f64, OP)
#define E_c64(OP, E) E_(c64, OP)
#define E_c128(OP, E) E_(c128, OP)
#define E_b(OP, E) E_(b, OP)
#define E_u8(OP, E) E_(u8, OP)
#define E_i8(OP, E) E_(i8, OP)
#define E_i16(OP, E) E_(i16, OP)
#define E_i32(OP, E) E_(i32, OP)
#define E_i64(OP, E) E_(i64, OP)

static const cpu_loop_fn tab_f32[INGOT_OP_COUNT] = {REAL_OPS(E_f32, MF, float) CMP_OPS(E_f32)};
static const cpu_loop_fn tab_f64[INGOT_OP_COUNT] = {REAL_OPS(E_f64, MD, double) CMP_OPS(E_f64)};
static const cpu_loop_fn tab_c64[INGOT_OP_COUNT] = {
    CPLX_OPS(E_c64, MF)[INGOT_OP_EQ] = b_c64_EQ, [INGOT_OP_NE] = b_c64_NE};
static const cpu_loop_fn tab_c128[INGOT_OP_COUNT] = {
    CPLX_OPS(E_c128, MD)[INGOT_OP_EQ] = b_c128_EQ, [INGOT_OP_NE] = b_c128_NE};
static const cpu_loop_fn tab_b[INGOT_OP_COUNT] = {BOOL_OPS(E_b) CMP_OPS(E_b)};
static const cpu_loop_fn tab_u8[INGOT_OP_COUNT] = {INT_OPS(E_u8, uint8_t, 8) CMP_OPS(E_u8)};
static const cpu_loop_fn tab_i8[INGOT_OP_COUNT] = {INT_OPS(E_i8, int8_t, 8) CMP_OPS(E_i8)};
static const cpu_loop_fn tab_i16[INGOT_OP_COUNT] = {INT_OPS(E_i16, int16_t, 16) CMP_OPS(E_i16)};
static const cpu_loop_fn tab_i32[INGOT_OP_COUNT] = {INT_OPS(E_i32, int32_t, 32) CMP_OPS(E_i32)};
static const cpu_loop_fn tab_i64[INGOT_OP_COUNT] = {INT_OPS(E_i64, int64_t, 64) CMP_OPS(E_i64)};

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

static ingot_status no_kernel(ingot_op_args *a, ingot_dtype dt) {
  return ingot_set_error(INGOT_ERR_DTYPE, "%s: no CPU kernel for dtype %s", ingot_op_name(a->op),
                         ingot_dtype_name(dt));
}

static ingot_status k_binary(ingot_op_args *a) {
  ingot_tensor *out = a->out[0];
  ingot_dtype dt = a->in[0]->dtype;
  if (cpu_is_lowp(dt) || cpu_is_lowp(out->dtype)) return cpu_via_f32(a, k_binary);
  const cpu_loop_fn *tab = table_for(dt);
  cpu_loop_fn fn = tab ? tab[a->op] : NULL;
  if (!fn) return no_kernel(a, dt);
  atomic_int zero_div = 0;
  ingot_tensor *ts[3] = {out, a->in[0], a->in[1]};
  cpu_foreach(3, ts, fn, &zero_div);
  if (atomic_load(&zero_div))
    return ingot_set_error(INGOT_ERR_ARG, "%s: ZeroDivisionError (integer division by zero)",
                           ingot_op_name(a->op));
  return INGOT_OK;
}

/* ---- where: bit copies by element width, so every dtype is native ---- */
#define WHERE_LOOP(name, T)                                                                \
  static void name(char **p, const int64_t *s, int64_t n, void *ctx) {                     \
    (void)ctx;                                                                             \
    for (int64_t i = 0; i < n; i++) {                                                      \
      bool c = *(const uint8_t *)(p[1] + i * s[1]);                                        \
      *(T *)(p[0] + i * s[0]) = *(const T *)(c ? p[2] + i * s[2] : p[3] + i * s[3]);       \
    }                                                                                      \
  }
typedef struct {
  uint64_t lo, hi;
} u128_t;
WHERE_LOOP(where_1, uint8_t)
WHERE_LOOP(where_2, uint16_t)
WHERE_LOOP(where_4, uint32_t)
WHERE_LOOP(where_8, uint64_t)
WHERE_LOOP(where_16, u128_t)

static ingot_status k_where(ingot_op_args *a) {
  cpu_loop_fn fn;
  switch (ingot_dtype_size(a->out[0]->dtype)) {
  case 1: fn = where_1; break;
  case 2: fn = where_2; break;
  case 4: fn = where_4; break;
  case 8: fn = where_8; break;
  case 16: fn = where_16; break;
  default: return no_kernel(a, a->out[0]->dtype);
  }
  ingot_tensor *ts[4] = {a->out[0], a->in[0], a->in[1], a->in[2]};
  cpu_foreach(4, ts, fn, NULL);
  return INGOT_OK;
}

/* ---- clamp: min(max(x, lo), hi); NaN fails both tests and stays ---- */
typedef struct {
  double flo, fhi;
  int64_t ilo, ihi;
} clamp_ctx;

#define CLAMP_LOOP(name, T, LO, HI)                                                        \
  static void name(char **p, const int64_t *s, int64_t n, void *vctx) {                    \
    const clamp_ctx *c = vctx;                                                             \
    const T lo = (T)c->LO, hi = (T)c->HI;                                                  \
    for (int64_t i = 0; i < n; i++) {                                                      \
      T x = *(const T *)(p[1] + i * s[1]);                                                 \
      x = x < lo ? lo : x;                                                                 \
      *(T *)(p[0] + i * s[0]) = x > hi ? hi : x;                                           \
    }                                                                                      \
  }
CLAMP_LOOP(clamp_f32, float, flo, fhi)
CLAMP_LOOP(clamp_f64, double, flo, fhi)
CLAMP_LOOP(clamp_u8, uint8_t, ilo, ihi)
CLAMP_LOOP(clamp_i8, int8_t, ilo, ihi)
CLAMP_LOOP(clamp_i16, int16_t, ilo, ihi)
CLAMP_LOOP(clamp_i32, int32_t, ilo, ihi)
CLAMP_LOOP(clamp_i64, int64_t, ilo, ihi)

static ingot_status k_clamp(ingot_op_args *a) {
  ingot_dtype dt = a->out[0]->dtype;
  if (cpu_is_lowp(dt)) return cpu_via_f32(a, k_clamp);
  cpu_loop_fn fn;
  switch (dt) {
  case INGOT_F32: fn = clamp_f32; break;
  case INGOT_F64: fn = clamp_f64; break;
  case INGOT_U8: fn = clamp_u8; break;
  case INGOT_I8: fn = clamp_i8; break;
  case INGOT_I16: fn = clamp_i16; break;
  case INGOT_I32: fn = clamp_i32; break;
  case INGOT_I64: fn = clamp_i64; break;
  default: return no_kernel(a, dt);
  }
  clamp_ctx c = {a->farg[0], a->farg[1], a->iarg[0], a->iarg[1]};
  ingot_tensor *ts[2] = {a->out[0], a->in[0]};
  cpu_foreach(2, ts, fn, &c);
  return INGOT_OK;
}

void cpu_register_binary(ingot_backend *be) {
  for (int op = INGOT_OP_ADD; op <= INGOT_OP_RIGHT_SHIFT; op++) be->kernels[op] = k_binary;
  be->kernels[INGOT_OP_WHERE] = k_where;
  be->kernels[INGOT_OP_CLAMP] = k_clamp;
}
