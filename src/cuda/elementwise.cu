// CUDA elementwise kernels: every unary op (NEG .. BITWISE_NOT), every binary
// op (ADD .. RIGHT_SHIFT), WHERE and CLAMP, for the dtypes the CPU supports
// (contract: src/core/ops_elementwise.c; reference: src/cpu/unary.c, binary.c).
//
// Design
//  - One kernel template per (input type, output type, path); the op is a
//    runtime switch inside the per-element function (uniform across the grid,
//    so the branch costs a few instructions and these kernels stay memory
//    bound). No op x dtype instantiation.
//  - Paths: "contig" when every operand is contiguous (after make_geom merges
//    dims): 16-byte vector loads/stores when all data pointers are 16-byte
//    aligned, else a plain indexed loop; the binary contig kernel also serves a
//    broadcast scalar on either side (stride 0 everywhere: loaded once).
//    Everything else goes through the "strided" kernel (make_geom /
//    geom_offsets). Grid-stride loops, 64-bit indices throughout.
//  - f16 / bf16 / f8 compute in float through to_acc/from_acc and round once,
//    as the CPU's cpu_via_f32 does. Complex uses cuda::std::complex (C99
//    Annex G multiply/divide like gcc's __mulsc3/__divsc3).
//  - bool is uint8 0/1: the host remaps bool ADD/MUL/MAXIMUM/MINIMUM/LOGICAL_*
//    to the bitwise ops (identical on 0/1) and bool BITWISE_NOT to LOGICAL_NOT,
//    so the uint8 kernels serve bool.
//  - CLAMP runs as a unary op (bounds in the params).
//  - Integer FLOOR_DIVIDE / REMAINDER: the CPU reports division by zero as
//    ZeroDivisionError. The kernel raises a device flag where a divisor is 0
//    (and writes 0 there, as the CPU); the host then copies that one 4-byte
//    flag back and waits for the stream. This is the only host round trip in
//    this file and happens only for integer floor_divide / remainder. While
//    the stream is being captured into a graph the check is skipped (a
//    synchronous copy is illegal there) and division by zero yields 0.
#include <cuda/std/complex>

#include <limits>
#include <type_traits>

#include "../core/scalar_ops.h"
#include "cuda_common.cuh"

namespace {

constexpr int kThreads = 256;

using cf = cuda::std::complex<float>;
using cd = cuda::std::complex<double>;

// Per-launch parameters: the op and the op's scalar arguments.
struct EwParams {
  int op;
  double flo, fhi;   // CLAMP bounds for floating dtypes
  int64_t ilo, ihi;  // CLAMP bounds for integer dtypes
  int *zflag;        // integer division by zero seen (nullptr: not checked)
};

// ---- type categories ----
template <class T> struct is_lowp : std::false_type {};
template <> struct is_lowp<f16_t> : std::true_type {};
template <> struct is_lowp<bf16_t> : std::true_type {};
template <> struct is_lowp<f8e4m3_t> : std::true_type {};
template <> struct is_lowp<f8e5m2_t> : std::true_type {};
template <class T>
constexpr bool kReal = std::is_same_v<T, float> || std::is_same_v<T, double> || is_lowp<T>::value;
template <class T> constexpr bool kInt = std::is_integral_v<T>;
template <class T> constexpr bool kCplx = std::is_same_v<T, c64_t> || std::is_same_v<T, c128_t>;

// Compute type of a real storage type (float for the low-precision formats).
template <class T> using real_acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

__device__ __forceinline__ cf cload(c64_t v) { return cf(v.re, v.im); }
__device__ __forceinline__ cd cload(c128_t v) { return cd(v.re, v.im); }
template <class T> __device__ __forceinline__ T cstore(cf v) { return T{v.real(), v.imag()}; }
template <class T> __device__ __forceinline__ T cstore(cd v) { return T{v.real(), v.imag()}; }

// libm by precision (never the fast intrinsics: results must track the CPU).
#define EW_M1(name, ffn, dfn)                                                                  \
  __device__ __forceinline__ float name(float x) { return ffn(x); }                            \
  __device__ __forceinline__ double name(double x) { return dfn(x); }
EW_M1(m_fabs, fabsf, fabs)
EW_M1(m_exp, expf, exp)
EW_M1(m_exp2, exp2f, exp2)
EW_M1(m_log, logf, log)
EW_M1(m_log2, log2f, log2)
EW_M1(m_log1p, log1pf, log1p)
EW_M1(m_expm1, expm1f, expm1)
EW_M1(m_sqrt, sqrtf, sqrt)
EW_M1(m_sin, sinf, sin)
EW_M1(m_cos, cosf, cos)
EW_M1(m_tan, tanf, tan)
EW_M1(m_tanh, tanhf, tanh)
EW_M1(m_sinh, sinhf, sinh)
EW_M1(m_cosh, coshf, cosh)
EW_M1(m_erf, erff, erf)
EW_M1(m_floor, floorf, floor)
EW_M1(m_ceil, ceilf, ceil)
EW_M1(m_rint, rintf, rint)  // half to even
EW_M1(m_trunc, truncf, trunc)
#undef EW_M1
#define EW_M2(name, ffn, dfn)                                                                  \
  __device__ __forceinline__ float name(float a, float b) { return ffn(a, b); }                \
  __device__ __forceinline__ double name(double a, double b) { return dfn(a, b); }
EW_M2(m_pow, powf, pow)
EW_M2(m_atan2, atan2f, atan2)
#undef EW_M2

// ---- unary ----

// Real floating op in the compute type C (float or double), as REAL_OPS.
template <class C> __device__ C real_unary(const EwParams &p, C x) {
  switch (p.op) {
  case INGOT_OP_NEG: return -x;
  case INGOT_OP_ABS: return m_fabs(x);
  case INGOT_OP_SIGN: return (C)((0 < x) - (x < 0));  // NaN gives 0
  case INGOT_OP_EXP: return m_exp(x);
  case INGOT_OP_EXP2: return m_exp2(x);
  case INGOT_OP_LOG: return m_log(x);
  case INGOT_OP_LOG2: return m_log2(x);
  case INGOT_OP_LOG1P: return m_log1p(x);
  case INGOT_OP_EXPM1: return m_expm1(x);
  case INGOT_OP_SQRT: return m_sqrt(x);
  case INGOT_OP_RSQRT: return (C)1 / m_sqrt(x);
  case INGOT_OP_RECIPROCAL: return (C)1 / x;
  case INGOT_OP_SIN: return m_sin(x);
  case INGOT_OP_COS: return m_cos(x);
  case INGOT_OP_TAN: return m_tan(x);
  case INGOT_OP_TANH: return m_tanh(x);
  case INGOT_OP_SIGMOID: return (C)1 / ((C)1 + m_exp(-x));
  case INGOT_OP_SILU: return x / ((C)1 + m_exp(-x));
  case INGOT_OP_GELU: return x * (C)0.5 * ((C)1 + m_erf(x * (C)0.70710678118654752440));
  case INGOT_OP_GELU_TANH:
    return (C)0.5 * x * ((C)1 + m_tanh((C)0.7978845608028654 * (x + (C)0.044715 * x * x * x)));
  case INGOT_OP_RELU: return x < 0 ? (C)0 : x;  // NaN stays NaN
  case INGOT_OP_ERF: return m_erf(x);
  case INGOT_OP_FLOOR: return m_floor(x);
  case INGOT_OP_CEIL: return m_ceil(x);
  case INGOT_OP_ROUND: return m_rint(x);
  case INGOT_OP_TRUNC: return m_trunc(x);
  case INGOT_OP_CLAMP: {  // NaN fails both tests and stays
    const C lo = (C)p.flo, hi = (C)p.fhi;
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
  }
  default: return x;
  }
}

template <class T> __device__ T int_unary(const EwParams &p, T x) {
  switch (p.op) {
  case INGOT_OP_NEG: return (T)(0 - (uint64_t)x);  // wraps, as PyTorch
  case INGOT_OP_ABS: return so_is_neg(x) ? (T)(0 - (uint64_t)x) : x;
  case INGOT_OP_SIGN: return (T)((0 < x) - so_is_neg(x));
  case INGOT_OP_RELU: return so_is_neg(x) ? (T)0 : x;
  case INGOT_OP_BITWISE_NOT: return (T)~x;
  case INGOT_OP_CLAMP: {
    const T lo = (T)p.ilo, hi = (T)p.ihi;
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
  }
  default: return x;
  }
}

// tanh(x + iy) for finite x, y as glibc's ctanh: den = sinh^2 x + cos^2 y has no
// cancellation near the poles (libcu++'s cosh 2x + cos 2y loses every digit there).
template <class Z> __device__ Z c_tanh(Z z) {
  using R = typename Z::value_type;
  const R x = z.real(), y = z.imag();
  if (!isfinite(x) || !isfinite(y)) return cuda::std::tanh(z);  // Annex G special values
  constexpr R t = sizeof(R) == 4 ? (R)7 : (R)18;  // (mantissa bits - 1) * ln 2 / 2
  constexpr R tiny = std::numeric_limits<R>::min(), eps = std::numeric_limits<R>::epsilon();
  R sy = y, cy = 1;
  if (m_fabs(y) > tiny) sy = m_sin(y), cy = m_cos(y);
  if (m_fabs(x) > t) {
    const R e2t = m_exp((R)2 * t), rx = m_fabs(x) - t;
    R im = (R)4 * sy * cy / e2t;
    im = rx > t ? im / e2t : im / m_exp((R)2 * rx);
    return Z(x > 0 ? (R)1 : (R)-1, im);
  }
  R shx = x, chx = 1;
  if (m_fabs(x) > tiny) shx = m_sinh(x), chx = m_cosh(x);
  const R den = m_fabs(shx) > m_fabs(cy) * eps ? shx * shx + cy * cy : cy * cy;
  return Z(shx * chx / den, sy * cy / den);
}
// tan z = -i tanh(i z).
template <class Z> __device__ Z c_tan(Z z) {
  if (!isfinite(z.real()) || !isfinite(z.imag())) return cuda::std::tan(z);
  const Z w = c_tanh(Z(-z.imag(), z.real()));
  return Z(w.imag(), -w.real());
}

template <class Z> __device__ Z cplx_unary(int op, Z x) {
  using R = typename Z::value_type;
  switch (op) {
  case INGOT_OP_NEG: return -x;
  case INGOT_OP_SIGN: return x == Z(0) ? Z(0) : x / cuda::std::abs(x);  // complex / real
  case INGOT_OP_EXP: return cuda::std::exp(x);
  case INGOT_OP_LOG: return cuda::std::log(x);
  case INGOT_OP_SQRT: return cuda::std::sqrt(x);
  case INGOT_OP_RSQRT: return Z((R)1) / cuda::std::sqrt(x);
  case INGOT_OP_RECIPROCAL: return Z((R)1) / x;
  case INGOT_OP_SIN: return cuda::std::sin(x);
  case INGOT_OP_COS: return cuda::std::cos(x);
  case INGOT_OP_TAN: return c_tan(x);
  case INGOT_OP_TANH: return c_tanh(x);
  default: return x;
  }
}

// ISNAN ISINF ISFINITE LOGICAL_NOT of any dtype.
template <class T> __device__ bool unary_pred(int op, T x) {
  if constexpr (kReal<T>) {
    const real_acc<T> v = to_acc(x);
    switch (op) {
    case INGOT_OP_ISNAN: return isnan(v);
    case INGOT_OP_ISINF: return isinf(v);
    case INGOT_OP_ISFINITE: return isfinite(v);
    default: return v == 0;
    }
  } else if constexpr (kCplx<T>) {
    switch (op) {
    case INGOT_OP_ISNAN: return isnan(x.re) || isnan(x.im);
    case INGOT_OP_ISINF: return isinf(x.re) || isinf(x.im);
    case INGOT_OP_ISFINITE: return isfinite(x.re) && isfinite(x.im);
    default: return x.re == 0 && x.im == 0;
    }
  } else {
    switch (op) {
    case INGOT_OP_ISNAN:
    case INGOT_OP_ISINF: return false;
    case INGOT_OP_ISFINITE: return true;
    default: return x == 0;
    }
  }
}

__host__ __device__ constexpr bool is_pred_op(int op) {
  return op >= INGOT_OP_ISNAN && op <= INGOT_OP_LOGICAL_NOT;
}

template <class TI, class TO> __device__ __forceinline__ TO unary_elem(const EwParams &p, TI x) {
  if constexpr (std::is_same_v<TO, uint8_t>) {
    if (is_pred_op(p.op)) return (TO)unary_pred(p.op, x);
  }
  if constexpr (std::is_same_v<TI, TO>) {
    if constexpr (kReal<TI>) return from_acc<TO>(real_unary<real_acc<TI>>(p, to_acc(x)));
    else if constexpr (kCplx<TI>) return cstore<TO>(cplx_unary(p.op, cload(x)));
    else return int_unary<TI>(p, x);
  } else if constexpr (kCplx<TI> && !std::is_same_v<TO, uint8_t>) {
    return (TO)cuda::std::abs(cload(x));  // ABS of complex: the real dtype
  } else {
    return TO();  // unreachable: the host validates (op, dtype)
  }
}

// ---- binary ----

// PyTorch's div_floor_floating and Python-style float remainder (as the CPU).
__device__ __forceinline__ float f_floordiv(float a, float b) { return so_f_floordiv_float(a, b); }
__device__ __forceinline__ double f_floordiv(double a, double b) {
  return so_f_floordiv_double(a, b);
}
__device__ __forceinline__ float f_remainder(float a, float b) {
  return so_f_remainder_float(a, b);
}
__device__ __forceinline__ double f_remainder(double a, double b) {
  return so_f_remainder_double(a, b);
}

template <class C> __device__ C real_binary(int op, C a, C b) {
  switch (op) {
  case INGOT_OP_ADD: return a + b;
  case INGOT_OP_SUB: return a - b;
  case INGOT_OP_MUL: return a * b;
  case INGOT_OP_DIV: return a / b;
  case INGOT_OP_FLOOR_DIVIDE: return f_floordiv(a, b);
  case INGOT_OP_REMAINDER: return f_remainder(a, b);
  case INGOT_OP_POW: return m_pow(a, b);
  case INGOT_OP_ATAN2: return m_atan2(a, b);
  case INGOT_OP_MAXIMUM: return SO_NAN_MAX(a, b);  // NaN propagates
  case INGOT_OP_MINIMUM: return SO_NAN_MIN(a, b);
  default: return a;
  }
}

// Integer division by zero: flag it and give 0, as the CPU.
__device__ __forceinline__ int64_t i_floordiv(int64_t a, int64_t b, int *zflag) {
  bool zero = false;
  const int64_t q = so_i_floordiv(a, b, &zero);
  if (zero && zflag) *zflag = 1;
  return q;
}
__device__ __forceinline__ int64_t i_remainder(int64_t a, int64_t b, int *zflag) {
  bool zero = false;
  const int64_t r = so_i_remainder(a, b, &zero);
  if (zero && zflag) *zflag = 1;
  return r;
}

template <class T> __device__ T int_binary(const EwParams &p, T a, T b) {
  constexpr int W = 8 * (int)sizeof(T);
  switch (p.op) {
  case INGOT_OP_ADD: return (T)((uint64_t)a + (uint64_t)b);
  case INGOT_OP_SUB: return (T)((uint64_t)a - (uint64_t)b);
  case INGOT_OP_MUL: return (T)((uint64_t)a * (uint64_t)b);
  case INGOT_OP_FLOOR_DIVIDE: return (T)i_floordiv(a, b, p.zflag);
  case INGOT_OP_REMAINDER: return (T)i_remainder(a, b, p.zflag);
  case INGOT_OP_POW: return (T)so_i_pow(a, b);
  case INGOT_OP_MAXIMUM: return a > b ? a : b;
  case INGOT_OP_MINIMUM: return a < b ? a : b;
  case INGOT_OP_BITWISE_AND: return (T)(a & b);
  case INGOT_OP_BITWISE_OR: return (T)(a | b);
  case INGOT_OP_BITWISE_XOR: return (T)(a ^ b);
  case INGOT_OP_LEFT_SHIFT: return SO_LEFT_SHIFT(T, W, a, b);
  case INGOT_OP_RIGHT_SHIFT: return SO_RIGHT_SHIFT(T, W, a, b);
  default: return a;
  }
}

template <class Z> __device__ Z cplx_binary(int op, Z a, Z b) {
  switch (op) {
  case INGOT_OP_ADD: return a + b;
  case INGOT_OP_SUB: return a - b;
  case INGOT_OP_MUL: return a * b;
  case INGOT_OP_DIV: return a / b;
  case INGOT_OP_POW: return cuda::std::pow(a, b);
  default: return a;
  }
}

// EQ NE LT LE GT GE of any dtype (complex: EQ NE only).
template <class T> __device__ bool binary_cmp(int op, T a, T b) {
  if constexpr (kCplx<T>) {
    const bool eq = a.re == b.re && a.im == b.im;
    return op == INGOT_OP_EQ ? eq : !eq;
  } else {
    const auto x = to_acc(a), y = to_acc(b);
    switch (op) {
    case INGOT_OP_EQ: return x == y;
    case INGOT_OP_NE: return x != y;
    case INGOT_OP_LT: return x < y;
    case INGOT_OP_LE: return x <= y;
    case INGOT_OP_GT: return x > y;
    default: return x >= y;
    }
  }
}

__host__ __device__ constexpr bool is_cmp_op(int op) {
  return op >= INGOT_OP_EQ && op <= INGOT_OP_GE;
}

template <class TI, class TO>
__device__ __forceinline__ TO binary_elem(const EwParams &p, TI a, TI b) {
  if constexpr (std::is_same_v<TO, uint8_t>) {
    if (is_cmp_op(p.op)) return (TO)binary_cmp(p.op, a, b);
  }
  if constexpr (std::is_same_v<TI, TO>) {
    if constexpr (kReal<TI>) {
      using C = real_acc<TI>;
      return from_acc<TO>(real_binary<C>(p.op, to_acc(a), to_acc(b)));
    } else if constexpr (kCplx<TI>) {
      return cstore<TO>(cplx_binary(p.op, cload(a), cload(b)));
    } else {
      return int_binary<TI>(p, a, b);
    }
  } else {
    return TO();  // unreachable: the host validates (op, dtype)
  }
}

// ---- vector access: N elements as one aligned load/store of N*sizeof(T) bytes ----
template <int B> struct raw_of;
template <> struct raw_of<1> { using type = uint8_t; };
template <> struct raw_of<2> { using type = uint16_t; };
template <> struct raw_of<4> { using type = uint32_t; };
template <> struct raw_of<8> { using type = uint2; };
template <> struct raw_of<16> { using type = uint4; };

// Elements per vector: 16 bytes of the wider of the operand types.
template <class TI, class TO> constexpr int vec_n() {
  constexpr int w = sizeof(TI) > sizeof(TO) ? (int)sizeof(TI) : (int)sizeof(TO);
  return 16 / w;
}

template <int N, class T> __device__ __forceinline__ void vload(const T *p, int64_t v, T *x) {
  using R = typename raw_of<N * sizeof(T)>::type;
  R r = reinterpret_cast<const R *>(p)[v];
  memcpy(x, &r, sizeof r);
}
template <int N, class T> __device__ __forceinline__ void vstore(T *p, int64_t v, const T *x) {
  using R = typename raw_of<N * sizeof(T)>::type;
  R r;
  memcpy(&r, x, sizeof r);
  reinterpret_cast<R *>(p)[v] = r;
}

static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// ---- kernels ----

template <class TI, class TO>
__global__ void __launch_bounds__(kThreads)
    unary_contig(TO *__restrict__ out, const TI *__restrict__ in, int64_t n, EwParams p,
                 bool vec) {
  int64_t done = 0;
  if (vec) {
    constexpr int N = vec_n<TI, TO>();
    const int64_t nv = n / N;
    CUDA_GRID_STRIDE(v, nv) {
      TI x[N];
      TO y[N];
      vload<N>(in, v, x);
#pragma unroll
      for (int k = 0; k < N; k++) y[k] = unary_elem<TI, TO>(p, x[k]);
      vstore<N>(out, v, y);
    }
    done = nv * N;
  }
  CUDA_GRID_STRIDE(i, n - done) out[done + i] = unary_elem<TI, TO>(p, in[done + i]);
}

template <class TI, class TO>
__global__ void __launch_bounds__(kThreads)
    unary_strided(TO *__restrict__ out, const TI *__restrict__ in, Geom g, int64_t n,
                  EwParams p) {
  CUDA_GRID_STRIDE(i, n) {
    int64_t off[2];
    geom_offsets<2>(g, i, off);
    out[off[0]] = unary_elem<TI, TO>(p, in[off[1]]);
  }
}

// mode: 0 a and b contiguous; 1 b is one broadcast element; 2 a is.
template <class TI, class TO>
__global__ void __launch_bounds__(kThreads)
    binary_contig(TO *__restrict__ out, const TI *__restrict__ a, const TI *__restrict__ b,
                  int64_t n, EwParams p, int mode, bool vec) {
  const TI sa = mode == 2 ? a[0] : TI(), sb = mode == 1 ? b[0] : TI();
  int64_t done = 0;
  if (vec) {
    constexpr int N = vec_n<TI, TO>();
    const int64_t nv = n / N;
    CUDA_GRID_STRIDE(v, nv) {
      TI x[N], y[N];
      TO z[N];
      if (mode == 2) {
#pragma unroll
        for (int k = 0; k < N; k++) x[k] = sa;
      } else {
        vload<N>(a, v, x);
      }
      if (mode == 1) {
#pragma unroll
        for (int k = 0; k < N; k++) y[k] = sb;
      } else {
        vload<N>(b, v, y);
      }
#pragma unroll
      for (int k = 0; k < N; k++) z[k] = binary_elem<TI, TO>(p, x[k], y[k]);
      vstore<N>(out, v, z);
    }
    done = nv * N;
  }
  CUDA_GRID_STRIDE(j, n - done) {
    const int64_t i = done + j;
    TI x = sa, y = sb;
    if (mode != 2) x = a[i];
    if (mode != 1) y = b[i];
    out[i] = binary_elem<TI, TO>(p, x, y);
  }
}

template <class TI, class TO>
__global__ void __launch_bounds__(kThreads)
    binary_strided(TO *__restrict__ out, const TI *__restrict__ a, const TI *__restrict__ b,
                   Geom g, int64_t n, EwParams p) {
  CUDA_GRID_STRIDE(i, n) {
    int64_t off[3];
    geom_offsets<3>(g, i, off);
    out[off[0]] = binary_elem<TI, TO>(p, a[off[1]], b[off[2]]);
  }
}

// 8-byte aligned like c128_t, so WHERE needs no more alignment than the data has.
struct u128_t {
  uint64_t lo, hi;
};

// WHERE moves bits: one kernel per element width.
template <class T>
__global__ void __launch_bounds__(kThreads)
    where_contig(T *__restrict__ out, const uint8_t *__restrict__ c, const T *__restrict__ a,
                 const T *__restrict__ b, int64_t n) {
  CUDA_GRID_STRIDE(i, n) out[i] = c[i] ? a[i] : b[i];
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    where_strided(T *__restrict__ out, const uint8_t *__restrict__ c, const T *__restrict__ a,
                  const T *__restrict__ b, Geom g, int64_t n) {
  CUDA_GRID_STRIDE(i, n) {
    int64_t off[4];
    geom_offsets<4>(g, i, off);
    out[off[0]] = c[off[1]] ? a[off[2]] : b[off[3]];
  }
}

// ---- host side ----

struct Launch {
  int device;
  cudaStream_t stream;
};

static ingot_status begin(ingot_op_args *a, Launch *L) {
  L->device = ingot_device_of(a->out[0]).index;
  ingot_status st = cuda_use_device(L->device);
  L->stream = stream_of(a->out[0]);
  return st;
}

static ingot_status no_kernel(ingot_op_args *a, ingot_dtype dt) {
  return ingot_set_error(INGOT_ERR_DTYPE, "%s: no CUDA kernel for dtype %s", ingot_op_name(a->op),
                         ingot_dtype_name(dt));
}

template <class TI, class TO>
static ingot_status launch_unary(ingot_tensor *out, ingot_tensor *in, const EwParams &p,
                                 cudaStream_t s) {
  ingot_tensor *ts[2] = {out, in};
  const Geom g = make_geom(2, ts);
  const int64_t n = ingot_numel(out);
  TO *o = (TO *)ingot_tensor_data(out);
  const TI *x = (const TI *)ingot_tensor_data(in);
  if (geom_contiguous(g, 2)) {
    const bool vec = aligned16(o) && aligned16(x);
    constexpr int N = vec_n<TI, TO>();
    unary_contig<TI, TO><<<grid_for(vec ? (n + N - 1) / N : n, kThreads), kThreads, 0, s>>>(
        o, x, n, p, vec);
  } else {
    unary_strided<TI, TO><<<grid_for(n, kThreads), kThreads, 0, s>>>(o, x, g, n, p);
  }
  return launch_status(ingot_op_name((ingot_op)p.op));
}

// Which unary ops have a kernel for an input dtype (mirrors the CPU tables).
static bool unary_ok(int op, ingot_dtype dt) {
  if (is_pred_op(op)) return true;
  if (ingot_dtype_is_complex(dt)) {
    switch (op) {
    case INGOT_OP_NEG: case INGOT_OP_ABS: case INGOT_OP_SIGN: case INGOT_OP_EXP:
    case INGOT_OP_LOG: case INGOT_OP_SQRT: case INGOT_OP_RSQRT: case INGOT_OP_RECIPROCAL:
    case INGOT_OP_SIN: case INGOT_OP_COS: case INGOT_OP_TAN: case INGOT_OP_TANH: return true;
    default: return false;
    }
  }
  if (ingot_dtype_is_floating(dt)) return op != INGOT_OP_BITWISE_NOT;
  switch (op) {  // integers and bool
  case INGOT_OP_NEG: return dt != INGOT_BOOL;
  case INGOT_OP_CLAMP: return dt != INGOT_BOOL;
  case INGOT_OP_ABS: case INGOT_OP_SIGN: case INGOT_OP_RELU: case INGOT_OP_BITWISE_NOT:
    return true;
  default: return false;
  }
}

// Unary ops and CLAMP.
static ingot_status k_unary(ingot_op_args *a) {
  ingot_tensor *in = a->in[0], *out = a->out[0];
  const ingot_dtype it = ingot_dtype_of(in), ot = ingot_dtype_of(out);
  EwParams p = {(int)a->op, a->farg[0], a->farg[1], a->iarg[0], a->iarg[1], nullptr};
  if (!unary_ok(p.op, it)) return no_kernel(a, it);
  if (ingot_numel(out) == 0) return INGOT_OK;
  Launch L;
  ingot_status st = begin(a, &L);
  if (st) return st;
  // bool: ~x is logical not on 0/1; abs, sign and relu are the identity.
  if (it == INGOT_BOOL && p.op == INGOT_OP_BITWISE_NOT) p.op = INGOT_OP_LOGICAL_NOT;
  if (it == INGOT_BOOL && !is_pred_op(p.op)) p.op = INGOT_OP_RELU;  // identity in the u8 kernel
  if (is_pred_op(p.op)) {
    if (ot != INGOT_BOOL) return no_kernel(a, ot);
    switch (it) {
      CUDA_CASE(INGOT_BOOL, uint8_t, return launch_unary<scalar_t, uint8_t>(out, in, p, L.stream))
      CUDA_CASES_INT(return launch_unary<scalar_t, uint8_t>(out, in, p, L.stream))
      CUDA_CASES_FLOAT(return launch_unary<scalar_t, uint8_t>(out, in, p, L.stream))
      CUDA_CASES_F8(return launch_unary<scalar_t, uint8_t>(out, in, p, L.stream))
      CUDA_CASE(INGOT_C64, c64_t, return launch_unary<scalar_t, uint8_t>(out, in, p, L.stream))
      CUDA_CASE(INGOT_C128, c128_t, return launch_unary<scalar_t, uint8_t>(out, in, p, L.stream))
    default: return no_kernel(a, it);
    }
  }
  if (p.op == INGOT_OP_ABS && it == INGOT_C64 && ot == INGOT_F32)
    return launch_unary<c64_t, float>(out, in, p, L.stream);
  if (p.op == INGOT_OP_ABS && it == INGOT_C128 && ot == INGOT_F64)
    return launch_unary<c128_t, double>(out, in, p, L.stream);
  if (it != ot) return no_kernel(a, ot);
  switch (it) {
    CUDA_CASE(INGOT_BOOL, uint8_t, return launch_unary<scalar_t, scalar_t>(out, in, p, L.stream))
    CUDA_CASES_INT(return launch_unary<scalar_t, scalar_t>(out, in, p, L.stream))
    CUDA_CASES_FLOAT(return launch_unary<scalar_t, scalar_t>(out, in, p, L.stream))
    CUDA_CASES_F8(return launch_unary<scalar_t, scalar_t>(out, in, p, L.stream))
    CUDA_CASE(INGOT_C64, c64_t, return launch_unary<scalar_t, scalar_t>(out, in, p, L.stream))
    CUDA_CASE(INGOT_C128, c128_t, return launch_unary<scalar_t, scalar_t>(out, in, p, L.stream))
  default: return no_kernel(a, it);
  }
}

// True when every dim of t that is not size 1 has stride 0 (one element).
static bool is_broadcast_scalar(const ingot_tensor *t) {
  const int nd = ingot_ndim(t);
  const int64_t *sh = ingot_shape(t), *st = ingot_strides(t);
  for (int d = 0; d < nd; d++)
    if (sh[d] != 1 && st[d] != 0) return false;
  return true;
}

// True when t is laid out row-major over its shape (size-1 dims ignored).
static bool is_dense(const ingot_tensor *t) {
  ingot_tensor *ts[1] = {(ingot_tensor *)t};
  return geom_contiguous(make_geom(1, ts), 1);
}

template <class TI, class TO>
static ingot_status launch_binary(ingot_tensor *out, ingot_tensor *ta, ingot_tensor *tb,
                                  const EwParams &p, cudaStream_t s) {
  const int64_t n = ingot_numel(out);
  TO *o = (TO *)ingot_tensor_data(out);
  const TI *x = (const TI *)ingot_tensor_data(ta), *y = (const TI *)ingot_tensor_data(tb);
  ingot_tensor *ts[3] = {out, ta, tb};
  const Geom g = make_geom(3, ts);
  int mode = -1;
  if (geom_contiguous(g, 3)) {
    mode = 0;
  } else if (is_dense(out) && n > 1) {
    // A broadcast scalar on one side, the other operand dense like out.
    if (is_broadcast_scalar(tb) && is_dense(ta)) mode = 1;
    else if (is_broadcast_scalar(ta) && is_dense(tb)) mode = 2;
  }
  if (mode >= 0) {
    const bool vec = aligned16(o) && (mode == 2 || aligned16(x)) && (mode == 1 || aligned16(y));
    constexpr int N = vec_n<TI, TO>();
    binary_contig<TI, TO><<<grid_for(vec ? (n + N - 1) / N : n, kThreads), kThreads, 0, s>>>(
        o, x, y, n, p, mode, vec);
  } else {
    binary_strided<TI, TO><<<grid_for(n, kThreads), kThreads, 0, s>>>(o, x, y, g, n, p);
  }
  return launch_status(ingot_op_name((ingot_op)p.op));
}

// Which binary ops have a kernel for the compute dtype (mirrors the CPU tables).
static bool binary_ok(int op, ingot_dtype dt) {
  if (is_cmp_op(op))
    return !ingot_dtype_is_complex(dt) || op == INGOT_OP_EQ || op == INGOT_OP_NE;
  if (ingot_dtype_is_complex(dt))
    return op == INGOT_OP_ADD || op == INGOT_OP_SUB || op == INGOT_OP_MUL || op == INGOT_OP_DIV ||
           op == INGOT_OP_POW;
  if (ingot_dtype_is_floating(dt)) return op >= INGOT_OP_ADD && op <= INGOT_OP_MINIMUM;
  if (dt == INGOT_BOOL) {
    switch (op) {
    case INGOT_OP_ADD: case INGOT_OP_MUL: case INGOT_OP_MAXIMUM: case INGOT_OP_MINIMUM:
    case INGOT_OP_LOGICAL_AND: case INGOT_OP_LOGICAL_OR: case INGOT_OP_LOGICAL_XOR:
    case INGOT_OP_BITWISE_AND: case INGOT_OP_BITWISE_OR: case INGOT_OP_BITWISE_XOR: return true;
    default: return false;
    }
  }
  // integers
  switch (op) {
  case INGOT_OP_DIV: case INGOT_OP_ATAN2: case INGOT_OP_LOGICAL_AND: case INGOT_OP_LOGICAL_OR:
  case INGOT_OP_LOGICAL_XOR: return false;
  default: return op >= INGOT_OP_ADD && op <= INGOT_OP_RIGHT_SHIFT;
  }
}

// bool operands (0/1 in uint8): every op the uint8 kernel computes the same way.
static int bool_op(int op) {
  switch (op) {
  case INGOT_OP_ADD: case INGOT_OP_MAXIMUM: case INGOT_OP_LOGICAL_OR: return INGOT_OP_BITWISE_OR;
  case INGOT_OP_MUL: case INGOT_OP_MINIMUM: case INGOT_OP_LOGICAL_AND:
    return INGOT_OP_BITWISE_AND;
  case INGOT_OP_LOGICAL_XOR: return INGOT_OP_BITWISE_XOR;
  default: return op;
  }
}

static ingot_status k_binary(ingot_op_args *a) {
  ingot_tensor *ta = a->in[0], *tb = a->in[1], *out = a->out[0];
  const ingot_dtype dt = ingot_dtype_of(ta), ot = ingot_dtype_of(out);
  EwParams p = {(int)a->op, 0, 0, 0, 0, nullptr};
  if (!binary_ok(p.op, dt) || ingot_dtype_of(tb) != dt) return no_kernel(a, dt);
  const bool to_bool = is_cmp_op(p.op) || (p.op >= INGOT_OP_LOGICAL_AND &&
                                            p.op <= INGOT_OP_LOGICAL_XOR);
  if (to_bool ? ot != INGOT_BOOL : ot != dt) return no_kernel(a, ot);
  if (ingot_numel(out) == 0) return INGOT_OK;
  Launch L;
  ingot_status st = begin(a, &L);
  if (st) return st;
  if (dt == INGOT_BOOL) p.op = bool_op(p.op);

  // Integer floor_divide / remainder: a device flag reports division by zero.
  const bool zcheck = ingot_dtype_is_integral(dt) &&
                      (p.op == INGOT_OP_FLOOR_DIVIDE || p.op == INGOT_OP_REMAINDER);
  if (zcheck) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    st = cuda_check(cudaStreamIsCapturing(L.stream, &cap), "cudaStreamIsCapturing");
    if (st) return st;
    if (cap == cudaStreamCaptureStatusNone) {
      p.zflag = (int *)cuda_scratch_alloc(L.device, sizeof(int), L.stream);
      if (!p.zflag) return ingot_set_error(INGOT_ERR_OOM, "%s: no scratch memory", ingot_op_name(a->op));
      st = cuda_check(cudaMemsetAsync(p.zflag, 0, sizeof(int), L.stream), "cudaMemsetAsync");
      if (st) {
        cuda_scratch_free(L.device, p.zflag, L.stream);
        return st;
      }
    }
  }

  switch (dt) {
    CUDA_CASE(INGOT_BOOL, uint8_t, st = launch_binary<scalar_t, uint8_t>(out, ta, tb, p, L.stream))
    CUDA_CASE(INGOT_U8, uint8_t, st = launch_binary<scalar_t, uint8_t>(out, ta, tb, p, L.stream))
    CUDA_CASE(INGOT_I8, int8_t,
              st = to_bool ? launch_binary<scalar_t, uint8_t>(out, ta, tb, p, L.stream)
                           : launch_binary<scalar_t, scalar_t>(out, ta, tb, p, L.stream))
    CUDA_CASE(INGOT_I16, int16_t,
              st = to_bool ? launch_binary<scalar_t, uint8_t>(out, ta, tb, p, L.stream)
                           : launch_binary<scalar_t, scalar_t>(out, ta, tb, p, L.stream))
    CUDA_CASE(INGOT_I32, int32_t,
              st = to_bool ? launch_binary<scalar_t, uint8_t>(out, ta, tb, p, L.stream)
                           : launch_binary<scalar_t, scalar_t>(out, ta, tb, p, L.stream))
    CUDA_CASE(INGOT_I64, int64_t,
              st = to_bool ? launch_binary<scalar_t, uint8_t>(out, ta, tb, p, L.stream)
                           : launch_binary<scalar_t, scalar_t>(out, ta, tb, p, L.stream))
    CUDA_CASES_FLOAT(st = to_bool ? launch_binary<scalar_t, uint8_t>(out, ta, tb, p, L.stream)
                                  : launch_binary<scalar_t, scalar_t>(out, ta, tb, p, L.stream))
    CUDA_CASES_F8(st = to_bool ? launch_binary<scalar_t, uint8_t>(out, ta, tb, p, L.stream)
                               : launch_binary<scalar_t, scalar_t>(out, ta, tb, p, L.stream))
    CUDA_CASE(INGOT_C64, c64_t,
              st = to_bool ? launch_binary<scalar_t, uint8_t>(out, ta, tb, p, L.stream)
                           : launch_binary<scalar_t, scalar_t>(out, ta, tb, p, L.stream))
    CUDA_CASE(INGOT_C128, c128_t,
              st = to_bool ? launch_binary<scalar_t, uint8_t>(out, ta, tb, p, L.stream)
                           : launch_binary<scalar_t, scalar_t>(out, ta, tb, p, L.stream))
  default: st = no_kernel(a, dt); break;
  }

  if (p.zflag) {
    int hit = 0;
    if (!st) st = cuda_check(cudaMemcpyAsync(&hit, p.zflag, sizeof(int), cudaMemcpyDeviceToHost,
                                             L.stream),
                             "cudaMemcpyAsync");
    if (!st) st = cuda_check(cudaStreamSynchronize(L.stream), "cudaStreamSynchronize");
    cuda_scratch_free(L.device, p.zflag, L.stream);
    if (!st && hit)
      st = ingot_set_error(INGOT_ERR_ARG, "%s: ZeroDivisionError (integer division by zero)",
                           ingot_op_name(a->op));
  }
  return st;
}

template <class T>
static ingot_status launch_where(ingot_op_args *a, cudaStream_t s) {
  ingot_tensor *ts[4] = {a->out[0], a->in[0], a->in[1], a->in[2]};
  const Geom g = make_geom(4, ts);
  const int64_t n = ingot_numel(a->out[0]);
  T *o = (T *)ingot_tensor_data(ts[0]);
  const uint8_t *c = (const uint8_t *)ingot_tensor_data(ts[1]);
  const T *x = (const T *)ingot_tensor_data(ts[2]), *y = (const T *)ingot_tensor_data(ts[3]);
  if (geom_contiguous(g, 4))
    where_contig<T><<<grid_for(n, kThreads), kThreads, 0, s>>>(o, c, x, y, n);
  else
    where_strided<T><<<grid_for(n, kThreads), kThreads, 0, s>>>(o, c, x, y, g, n);
  return launch_status("where");
}

static ingot_status k_where(ingot_op_args *a) {
  const ingot_dtype dt = ingot_dtype_of(a->out[0]);
  if (ingot_dtype_of(a->in[0]) != INGOT_BOOL || ingot_dtype_of(a->in[1]) != dt ||
      ingot_dtype_of(a->in[2]) != dt)
    return no_kernel(a, dt);
  if (ingot_numel(a->out[0]) == 0) return INGOT_OK;
  Launch L;
  ingot_status st = begin(a, &L);
  if (st) return st;
  switch (ingot_dtype_size(dt)) {
  case 1: return launch_where<uint8_t>(a, L.stream);
  case 2: return launch_where<uint16_t>(a, L.stream);
  case 4: return launch_where<uint32_t>(a, L.stream);
  case 8: return launch_where<uint64_t>(a, L.stream);
  case 16: return launch_where<u128_t>(a, L.stream);
  default: return no_kernel(a, dt);
  }
}

}  // namespace

extern "C" void cuda_register_elementwise(ingot_backend *be) {
  for (int op = INGOT_OP_NEG; op <= INGOT_OP_BITWISE_NOT; op++) be->kernels[op] = k_unary;
  for (int op = INGOT_OP_ADD; op <= INGOT_OP_RIGHT_SHIFT; op++) be->kernels[op] = k_binary;
  be->kernels[INGOT_OP_WHERE] = k_where;
  be->kernels[INGOT_OP_CLAMP] = k_unary;
}
