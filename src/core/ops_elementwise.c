/* Elementwise op fronts: unary math, broadcasting binary ops with PyTorch's
 * type promotion, where and clamp.
 *
 * Kernel contract (every backend implements the same):
 *  - Unary (NEG .. BITWISE_NOT): in[0] has out[0]'s shape. For the bool-result
 *    ops ISNAN, ISINF, ISFINITE, LOGICAL_NOT in[0] keeps its own dtype (any)
 *    and out[0] is bool. ABS of complex gives the real dtype of the same
 *    precision. Otherwise in[0] and out[0] share one dtype: float (f16, bf16,
 *    f32, f64; f8 too), complex for the subset listed in unary_complex_ok,
 *    integer or bool for NEG ABS SIGN RELU BITWISE_NOT (neg is never bool).
 *  - Binary (ADD .. RIGHT_SHIFT): in[0], in[1] have out[0]'s shape (stride-0
 *    views where broadcast) and one dtype, the compute dtype. out[0] has that
 *    dtype except for EQ NE LT LE GT GE and LOGICAL_* which give bool (the
 *    logical ops receive bool inputs). DIV and ATAN2 receive floating or
 *    complex inputs only; FLOOR_DIVIDE and REMAINDER report an integer
 *    division by zero as INGOT_ERR_ARG "ZeroDivisionError"; POW on integers
 *    with a negative exponent gives 1 for base 1, ±1 for base -1, else 0
 *    (the front refuses a negative scalar exponent as PyTorch does).
 *    Shifts: shift < 0 or >= bit width gives 0 (left) or 0/-1 (right).
 *  - WHERE: in[0] bool cond, in[1] and in[2] of out[0]'s dtype, all three of
 *    out[0]'s shape.
 *  - CLAMP: in[0] of out[0]'s dtype and shape. Floats: farg[0] = lo,
 *    farg[1] = hi (±inf = no bound), result min(max(x, lo), hi), NaN stays.
 *    Integers: iarg[0] = lo, iarg[1] = hi already inside the dtype's range.
 */
#include <math.h>

#include "internal.h"

/* ---- shared helpers ---- */

static bool is_float(ingot_dtype dt) { return ingot_dtype_is_floating(dt); }
static bool is_cplx(ingot_dtype dt) { return ingot_dtype_is_complex(dt); }
static bool is_int(ingot_dtype dt) { return ingot_dtype_is_integral(dt); }

/* t converted to dt (a new reference when it already is) and expanded to
 * shape: the kernels' same-shape, same-dtype inputs. */
static ingot_tensor *prep_input(const ingot_tensor *t, ingot_dtype dt, int ndim,
                                const int64_t *shape) {
  ingot_tensor *c = t->dtype == dt ? ingot_retain((ingot_tensor *)t) : ingot_cast(t, dt);
  if (!c) return NULL;
  ingot_tensor *e = ingot_expand(c, ndim, shape);
  ingot_release(c);
  return e;
}

/* Allocate out, run op on the prepared inputs, release them. */
static ingot_tensor *run(ingot_op op, int nin, ingot_tensor **in, int ndim, const int64_t *shape,
                         ingot_dtype out_dt, const int64_t *iarg, const double *farg) {
  ingot_op_args a = {.op = op, .nin = nin, .nout = 1};
  for (int i = 0; i < nin; i++) a.in[i] = in[i];
  if (iarg)
    for (int i = 0; i < 2; i++) a.iarg[i] = iarg[i];
  if (farg)
    for (int i = 0; i < 2; i++) a.farg[i] = farg[i];
  ingot_tensor *out = NULL;
  bool ok = true;
  for (int i = 0; i < nin; i++) ok = ok && in[i];
  if (ok) {
    out = tensor_new(ndim, shape, out_dt, in[0]->device);
    if (out) {
      a.out[0] = out;
      out = dispatch_out(&a);
    }
  }
  for (int i = 0; i < nin; i++) ingot_release(in[i]);
  return out;
}

/* ---- unary ---- */

typedef enum {
  U_FLOAT, /* floating result: integers and bool compute in float32 */
  U_KEEP,  /* keeps the dtype; integers compute natively */
  U_ROUND, /* floor/ceil/round/trunc: identity on integers and bool */
  U_PRED,  /* bool result (isnan, isinf, isfinite, logical_not) */
  U_BITS,  /* integers and bool only */
} unary_kind;

/* Complex inputs are computed with C99 <complex.h> for these ops only. */
static bool unary_complex_ok(ingot_op op) {
  switch (op) {
  case INGOT_OP_NEG: case INGOT_OP_ABS: case INGOT_OP_SIGN: case INGOT_OP_EXP:
  case INGOT_OP_LOG: case INGOT_OP_SQRT: case INGOT_OP_RSQRT: case INGOT_OP_RECIPROCAL:
  case INGOT_OP_SIN: case INGOT_OP_COS: case INGOT_OP_TAN: case INGOT_OP_TANH:
  case INGOT_OP_ISNAN: case INGOT_OP_ISINF: case INGOT_OP_ISFINITE: case INGOT_OP_LOGICAL_NOT:
    return true;
  default: return false;
  }
}

static ingot_tensor *unary(ingot_op op, unary_kind kind, const ingot_tensor *t) {
  const char *name = ingot_op_name(op);
  if (!check_tensors(name, 1, &t)) return NULL;
  ingot_dtype dt = t->dtype, cdt = dt, odt = dt;
  if (is_cplx(dt) && !unary_complex_ok(op))
    return ingot_fail(INGOT_ERR_DTYPE, "%s: not supported for complex dtype %s", name,
                      ingot_dtype_name(dt));
  switch (kind) {
  case U_FLOAT:
    if (!is_float(dt) && !is_cplx(dt)) cdt = odt = INGOT_F32;
    break;
  case U_KEEP:
    if (op == INGOT_OP_NEG && dt == INGOT_BOOL)
      return ingot_fail(INGOT_ERR_DTYPE, "neg: negation, the `-` operator, on a bool tensor is "
                                         "not supported. If you are trying to invert a mask, use "
                                         "the `~` or `logical_not()` operator instead.");
    /* abs, sign and relu of bool are the identity */
    if (dt == INGOT_BOOL) return ingot_clone(t);
    if (op == INGOT_OP_ABS && is_cplx(dt)) odt = dt == INGOT_C64 ? INGOT_F32 : INGOT_F64;
    break;
  case U_ROUND:
    if (!is_float(dt)) return ingot_clone(t);
    break;
  case U_PRED: odt = INGOT_BOOL; break;
  case U_BITS:
    if (!is_int(dt) && dt != INGOT_BOOL)
      return ingot_fail(INGOT_ERR_DTYPE, "%s: only integer and bool tensors are supported, got %s",
                        name, ingot_dtype_name(dt));
    break;
  }
  ingot_tensor *in = prep_input(t, cdt, t->ndim, t->shape);
  return run(op, 1, &in, t->ndim, t->shape, odt, NULL, NULL);
}

#define UNARY_FN(fn, OP, KIND)                                                             \
  ingot_tensor *ingot_##fn(const ingot_tensor *t) { return unary(INGOT_OP_##OP, KIND, t); }
UNARY_FN(neg, NEG, U_KEEP)
UNARY_FN(abs, ABS, U_KEEP)
UNARY_FN(sign, SIGN, U_KEEP)
UNARY_FN(relu, RELU, U_KEEP)
UNARY_FN(exp, EXP, U_FLOAT)
UNARY_FN(exp2, EXP2, U_FLOAT)
UNARY_FN(log, LOG, U_FLOAT)
UNARY_FN(log2, LOG2, U_FLOAT)
UNARY_FN(log1p, LOG1P, U_FLOAT)
UNARY_FN(expm1, EXPM1, U_FLOAT)
UNARY_FN(sqrt, SQRT, U_FLOAT)
UNARY_FN(rsqrt, RSQRT, U_FLOAT)
UNARY_FN(reciprocal, RECIPROCAL, U_FLOAT)
UNARY_FN(sin, SIN, U_FLOAT)
UNARY_FN(cos, COS, U_FLOAT)
UNARY_FN(tan, TAN, U_FLOAT)
UNARY_FN(tanh, TANH, U_FLOAT)
UNARY_FN(sigmoid, SIGMOID, U_FLOAT)
UNARY_FN(silu, SILU, U_FLOAT)
UNARY_FN(gelu, GELU, U_FLOAT)
UNARY_FN(gelu_tanh, GELU_TANH, U_FLOAT)
UNARY_FN(erf, ERF, U_FLOAT)
UNARY_FN(floor, FLOOR, U_ROUND)
UNARY_FN(ceil, CEIL, U_ROUND)
UNARY_FN(round, ROUND, U_ROUND)
UNARY_FN(trunc, TRUNC, U_ROUND)
UNARY_FN(isnan, ISNAN, U_PRED)
UNARY_FN(isinf, ISINF, U_PRED)
UNARY_FN(isfinite, ISFINITE, U_PRED)
UNARY_FN(logical_not, LOGICAL_NOT, U_PRED)
UNARY_FN(bitwise_not, BITWISE_NOT, U_BITS)
#undef UNARY_FN

/* ---- binary ---- */

typedef enum {
  B_ARITH,   /* add mul maximum minimum: the promoted dtype */
  B_SUB,     /* as arith, but bool operands are refused */
  B_DIV,     /* true division: integers and bool give float32 */
  B_INTDIV,  /* floor_divide remainder pow: no bool, no complex (pow: complex ok) */
  B_ATAN2,   /* floating only (integers give float32) */
  B_CMP_EQ,  /* eq ne: bool result, complex ok */
  B_CMP_ORD, /* lt le gt ge: bool result, no complex */
  B_LOGICAL, /* bool result from truthiness of any dtypes */
  B_BITS,    /* integers and bool */
  B_SHIFT,   /* integers only */
} binary_kind;

static ingot_tensor *binary(ingot_op op, binary_kind kind, const ingot_tensor *a,
                            const ingot_tensor *b) {
  const char *name = ingot_op_name(op);
  const ingot_tensor *ts[2] = {a, b};
  if (!check_tensors(name, 2, ts)) return NULL;
  int nd;
  int64_t shape[INGOT_MAX_DIMS];
  if (!broadcast_shapes(name, a->ndim, a->shape, b->ndim, b->shape, &nd, shape)) return NULL;
  /* Logical ops read each operand's truthiness: no common dtype needed. */
  ingot_dtype dt = kind == B_LOGICAL ? INGOT_BOOL : result_type(name, 2, ts);
  if (dt == INGOT_DTYPE_INVALID) return NULL;
  ingot_dtype cdt = dt, odt = dt;
  const char *dn = ingot_dtype_name(dt);
  switch (kind) {
  case B_ARITH:
    if (is_cplx(dt) && (op == INGOT_OP_MAXIMUM || op == INGOT_OP_MINIMUM))
      return ingot_fail(INGOT_ERR_DTYPE, "%s: not implemented for complex tensors", name);
    break;
  case B_SUB:
    if (a->dtype == INGOT_BOOL || b->dtype == INGOT_BOOL)
      return ingot_fail(INGOT_ERR_DTYPE,
                        "sub: subtraction, the `-` operator, with a bool tensor is not supported. "
                        "If you are trying to invert a mask, use the `~` or `logical_not()` "
                        "operator instead.");
    break;
  case B_DIV:
    if (!is_float(dt) && !is_cplx(dt)) cdt = odt = INGOT_F32;
    break;
  case B_INTDIV:
    if (dt == INGOT_BOOL || (is_cplx(dt) && op != INGOT_OP_POW))
      return ingot_fail(INGOT_ERR_DTYPE, "%s: not implemented for '%s'", name, dn);
    break;
  case B_ATAN2:
    if (is_cplx(dt)) return ingot_fail(INGOT_ERR_DTYPE, "atan2: not implemented for '%s'", dn);
    if (!is_float(dt)) cdt = odt = INGOT_F32;
    break;
  case B_CMP_EQ: odt = INGOT_BOOL; break;
  case B_CMP_ORD:
    if (is_cplx(dt)) return ingot_fail(INGOT_ERR_DTYPE, "%s: not implemented for '%s'", name, dn);
    odt = INGOT_BOOL;
    break;
  case B_LOGICAL: cdt = odt = INGOT_BOOL; break;
  case B_BITS:
  case B_SHIFT:
    if (!is_int(dt) && !(kind == B_BITS && dt == INGOT_BOOL))
      return ingot_fail(INGOT_ERR_DTYPE, "%s: not implemented for '%s' (integer%s tensors only)",
                        name, dn, kind == B_BITS ? " and bool" : "");
    break;
  }
  /* PyTorch refuses an integer raised to a negative integer scalar. */
  if (op == INGOT_OP_POW && is_int(dt) && b->ndim == 0 && is_int(b->dtype)) {
    if (ingot_item(b) < 0)
      return ingot_fail(INGOT_ERR_ARG, "pow: Integers to negative integer powers are not allowed.");
  }
  ingot_tensor *in[2] = {prep_input(a, cdt, nd, shape), NULL};
  if (in[0]) in[1] = prep_input(b, cdt, nd, shape);
  return run(op, 2, in, nd, shape, odt, NULL, NULL);
}

#define BINARY_FN(fn, OP, KIND)                                                            \
  ingot_tensor *ingot_##fn(const ingot_tensor *a, const ingot_tensor *b) {                 \
    return binary(INGOT_OP_##OP, KIND, a, b);                                              \
  }
BINARY_FN(add, ADD, B_ARITH)
BINARY_FN(sub, SUB, B_SUB)
BINARY_FN(mul, MUL, B_ARITH)
BINARY_FN(div, DIV, B_DIV)
BINARY_FN(floor_divide, FLOOR_DIVIDE, B_INTDIV)
BINARY_FN(remainder, REMAINDER, B_INTDIV)
BINARY_FN(pow, POW, B_INTDIV)
BINARY_FN(atan2, ATAN2, B_ATAN2)
BINARY_FN(maximum, MAXIMUM, B_ARITH)
BINARY_FN(minimum, MINIMUM, B_ARITH)
BINARY_FN(eq, EQ, B_CMP_EQ)
BINARY_FN(ne, NE, B_CMP_EQ)
BINARY_FN(lt, LT, B_CMP_ORD)
BINARY_FN(le, LE, B_CMP_ORD)
BINARY_FN(gt, GT, B_CMP_ORD)
BINARY_FN(ge, GE, B_CMP_ORD)
BINARY_FN(logical_and, LOGICAL_AND, B_LOGICAL)
BINARY_FN(logical_or, LOGICAL_OR, B_LOGICAL)
BINARY_FN(logical_xor, LOGICAL_XOR, B_LOGICAL)
BINARY_FN(bitwise_and, BITWISE_AND, B_BITS)
BINARY_FN(bitwise_or, BITWISE_OR, B_BITS)
BINARY_FN(bitwise_xor, BITWISE_XOR, B_BITS)
BINARY_FN(left_shift, LEFT_SHIFT, B_SHIFT)
BINARY_FN(right_shift, RIGHT_SHIFT, B_SHIFT)
#undef BINARY_FN

/* Scalar right operands: a wrapped number, so a's dtype wins within its
 * category (uint8 + 300 stays uint8; int + 2.5 gives float32). */
static ingot_tensor *binary_scalar(ingot_op op, binary_kind kind, const ingot_tensor *a,
                                   double v) {
  if (!check_tensors(ingot_op_name(op), 1, &a)) return NULL;
  ingot_tensor *s = wrapped_scalar(v, a->device);
  if (!s) return NULL;
  ingot_tensor *r = binary(op, kind, a, s);
  ingot_release(s);
  return r;
}

ingot_tensor *ingot_add_scalar(const ingot_tensor *a, double b) {
  return binary_scalar(INGOT_OP_ADD, B_ARITH, a, b);
}
ingot_tensor *ingot_sub_scalar(const ingot_tensor *a, double b) {
  return binary_scalar(INGOT_OP_SUB, B_SUB, a, b);
}
ingot_tensor *ingot_mul_scalar(const ingot_tensor *a, double b) {
  return binary_scalar(INGOT_OP_MUL, B_ARITH, a, b);
}
ingot_tensor *ingot_div_scalar(const ingot_tensor *a, double b) {
  return binary_scalar(INGOT_OP_DIV, B_DIV, a, b);
}
ingot_tensor *ingot_pow_scalar(const ingot_tensor *a, double b) {
  return binary_scalar(INGOT_OP_POW, B_INTDIV, a, b);
}

/* ---- where, clamp ---- */

ingot_tensor *ingot_where(const ingot_tensor *cond, const ingot_tensor *a, const ingot_tensor *b) {
  const ingot_tensor *ts[3] = {cond, a, b};
  if (!check_tensors("where", 3, ts)) return NULL;
  if (cond->dtype != INGOT_BOOL)
    return ingot_fail(INGOT_ERR_DTYPE, "where: expected condition to be a boolean tensor, but "
                                       "got a tensor with dtype %s",
                      ingot_dtype_name(cond->dtype));
  int nd, nd2;
  int64_t s1[INGOT_MAX_DIMS], shape[INGOT_MAX_DIMS];
  if (!broadcast_shapes("where", a->ndim, a->shape, b->ndim, b->shape, &nd, s1) ||
      !broadcast_shapes("where", cond->ndim, cond->shape, nd, s1, &nd2, shape))
    return NULL;
  ingot_dtype dt = result_type("where", 2, ts + 1);
  if (dt == INGOT_DTYPE_INVALID) return NULL;
  ingot_tensor *in[3] = {prep_input(cond, INGOT_BOOL, nd2, shape), NULL, NULL};
  if (in[0]) in[1] = prep_input(a, dt, nd2, shape);
  if (in[1]) in[2] = prep_input(b, dt, nd2, shape);
  return run(INGOT_OP_WHERE, 3, in, nd2, shape, dt, NULL, NULL);
}

/* Bound v for an integer dtype: truncated toward zero (as a C cast) and
 * held inside the dtype's range so the kernel's result stays representable. */
static int64_t int_bound(double v, ingot_dtype dt) {
  int64_t lo, hi;
  switch (dt) {
  case INGOT_U8: lo = 0, hi = UINT8_MAX; break;
  case INGOT_I8: lo = INT8_MIN, hi = INT8_MAX; break;
  case INGOT_I16: lo = INT16_MIN, hi = INT16_MAX; break;
  case INGOT_I32: lo = INT32_MIN, hi = INT32_MAX; break;
  default: lo = INT64_MIN, hi = INT64_MAX; break;
  }
  if (!(v > (double)lo)) return lo; /* also -inf */
  if (!(v < (double)hi)) return hi;
  int64_t x = (int64_t)v;
  return x < lo ? lo : x > hi ? hi : x;
}

ingot_tensor *ingot_clamp(const ingot_tensor *t, double lo, double hi) {
  if (!check_tensors("clamp", 1, &t)) return NULL;
  ingot_dtype dt = t->dtype;
  if (dt == INGOT_BOOL || is_cplx(dt))
    return ingot_fail(INGOT_ERR_DTYPE, "clamp: not implemented for '%s'", ingot_dtype_name(dt));
  if (isnan(lo) || isnan(hi)) {
    /* PyTorch: a NaN bound makes every float result NaN. */
    if (!is_int(dt)) return ingot_full_like(t, NAN);
    return ingot_fail(INGOT_ERR_ARG, "clamp: NaN bound for integer tensor of %s",
                      ingot_dtype_name(dt));
  }
  int64_t iarg[2] = {0, 0};
  double farg[2] = {lo, hi};
  if (is_int(dt)) {
    iarg[0] = int_bound(lo, dt);
    /* hi truncates too; an upper bound -inf means everything becomes hi. */
    iarg[1] = int_bound(hi, dt);
  }
  ingot_tensor *in = prep_input(t, dt, t->ndim, t->shape);
  return run(INGOT_OP_CLAMP, 1, &in, t->ndim, t->shape, dt, iarg, farg);
}
