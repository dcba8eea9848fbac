"""CUDA elementwise kernels (src/cuda/elementwise.cu) against the CPU backend:
every unary op, binary op, where and clamp, for every dtype, over contiguous,
unaligned, strided, transposed, broadcast, scalar, 0-dim, zero-size, odd and
large (> 2^20) inputs with special values; plus exact-value checks of the
semantics that matter (half-to-even round, sign(NaN), NaN-propagating
maximum, integer wrap, shifts, ZeroDivisionError) and one add over more than
2^31 elements. Skipped without a CUDA device."""
import gc

import numpy as np
import pytest

from cuda_diff import CUDA, TOL, _compare, diff, needs_cuda
from ingot_ctypes import (DTYPES, ID, NAMES, IngotError, call, lib, strided, tensor, to_numpy,
                          transposed)

pytestmark = needs_cuda

INTS = ["uint8", "int8", "int16", "int32", "int64"]
FLOATS = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]
CPLX = ["complex64", "complex128"]
BITS = {"uint8": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64}
LARGE = (1 << 20) + 3

UNARY = ["neg", "abs", "sign", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt",
         "reciprocal", "sin", "cos", "tan", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh",
         "relu", "erf", "floor", "ceil", "round", "trunc", "isnan", "isinf", "isfinite",
         "logical_not", "bitwise_not"]
BINARY = ["add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "atan2", "maximum",
          "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
          "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
          "right_shift"]
SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0, 0.5, 1.5, 2.5, -2.5, -0.5, 1.0, -1.0, 3.0]


def npdt(dt):
    return DTYPES[ID[dt]]


def values(shape, dt, seed=0, special=True, nonzero=False, scale=3.0):
    """Random values of dtype dt; floats start with the special values."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    if dt == "bool":
        v = rng.integers(0, 2, n).astype(np.bool_)
    elif dt in INTS:
        info = np.iinfo(npdt(dt))
        v = rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, n).astype(npdt(dt))
        if special and n >= 6:
            v[:6] = [info.min, info.max, 0, 1, info.max - 1, 2]
        if nonzero:
            v[v == 0] = 1
    elif dt in CPLX:
        v = (rng.standard_normal(n) * 1.5 + 1j * rng.standard_normal(n) * 1.5).astype(npdt(dt))
        if nonzero:
            v[v == 0] = 1
    else:
        f = rng.standard_normal(n) * scale
        if special and n >= len(SPECIAL):
            f[:len(SPECIAL)] = SPECIAL
        if nonzero:
            f[f == 0] = 1
        with np.errstate(all="ignore"):
            v = f.astype(np.float32).astype(npdt(dt)) if dt.startswith("float8") else \
                f.astype(npdt(dt))
    return v.reshape(shape)


def dev_pair(arr, unaligned=False):
    """(CPU tensor, CUDA tensor) equal to arr. unaligned: both are a view at
    element offset 1 of a longer buffer (the device data pointer is then not
    16-byte aligned: the kernels' scalar contiguous path)."""
    if not unaligned:
        t = tensor(arr)
        return t, call("ingot_to", t, CUDA)
    flat = np.ascontiguousarray(arr).reshape(-1)
    big = np.concatenate([flat[:1], flat])
    tb = tensor(big)
    db = call("ingot_to", tb, CUDA)
    shape = list(arr.shape)
    cpu = call("ingot_reshape", call("ingot_slice", tb, 0, 1, big.size, 1), len(shape), shape)
    dev = call("ingot_reshape", call("ingot_slice", db, 0, 1, big.size, 1), len(shape), shape)
    return cpu, dev


def diff_pairs(name, *pairs):
    """Like diff(), for arguments given as (cpu, cuda) pairs (or plain values)."""
    cargs = [p[0] if isinstance(p, tuple) else p for p in pairs]
    dargs = [p[1] if isinstance(p, tuple) else p for p in pairs]
    try:
        want = call(name, *cargs)
    except IngotError:
        with pytest.raises(IngotError):
            call(name, *dargs)
        return
    got = call(name, *dargs)
    _compare(got, want, name)


def on_cuda(name, *args):
    """Run name on CUDA copies of the CPU tensor arguments; numpy result."""
    dargs = [call("ingot_to", a, CUDA) if hasattr(a, "ptr") else a for a in args]
    return to_numpy(call(name, *dargs))


# ---------------------------------------------------------------- unary ----

@pytest.mark.parametrize("dt", NAMES)
@pytest.mark.parametrize("op", UNARY)
def test_unary(op, dt):
    name = "ingot_" + op
    x = values((7, 33), dt, 1)
    diff(name, tensor(x))                                   # contiguous
    diff(name, strided(x))                                  # step-2 view
    diff(name, transposed(x))                               # transposed view
    diff(name, tensor(values((), dt, 2, special=False)))    # 0-dim
    diff(name, tensor(values((0, 3), dt, 3)))               # zero-size
    diff(name, tensor(values((1,), dt, 4, special=False)))  # one element
    diff(name, tensor(values((5, 1, 3), dt, 5)))            # size-1 dims
    diff_pairs(name, dev_pair(values((3, 37), dt, 6), unaligned=True))
    big = values((LARGE,), dt, 7)
    diff(name, tensor(big))
    diff(name, call("ingot_expand", tensor(values((1, 5), dt, 8)), 2, [9, 5]))  # broadcast


# --------------------------------------------------------------- binary ----

def binary_values(op, dt, shape, seed):
    """(a, b) suited to op: divisors nonzero for integers, shifts in range."""
    a = values(shape, dt, seed)
    if op in ("left_shift", "right_shift") and dt in INTS:
        lo = 0 if dt == "uint8" else -2
        b = np.random.default_rng(seed + 1).integers(lo, BITS[dt] + 3, a.shape).astype(npdt(dt))
    elif op == "pow" and dt in INTS:
        lo = 0 if dt == "uint8" else -3
        b = np.random.default_rng(seed + 1).integers(lo, 12, a.shape).astype(npdt(dt))
    else:
        b = values(shape, dt, seed + 1, nonzero=op in ("floor_divide", "remainder"))
        if dt not in CPLX and a.size >= 4 and b.size >= 4:
            b.flat[:4] = a.flat[:4]  # equal operands for the comparisons
            if op in ("floor_divide", "remainder") and dt in INTS:
                b.flat[:4] = np.where(b.flat[:4] == 0, 1, b.flat[:4])
    return a, b


@pytest.mark.parametrize("dt", NAMES)
@pytest.mark.parametrize("op", BINARY)
def test_binary(op, dt):
    name = "ingot_" + op
    a, b = binary_values(op, dt, (7, 33), 10)
    diff(name, tensor(a), tensor(b))                         # contiguous
    diff(name, strided(a), tensor(b))                        # strided left
    diff(name, tensor(a), strided(b))                        # strided right
    diff(name, transposed(a), transposed(b))                 # transposed both
    diff(name, transposed(a), tensor(b))                     # mixed layouts
    x, y = binary_values(op, dt, (3, 1, 5), 11)[0], binary_values(op, dt, (4, 1), 12)[1]
    diff(name, tensor(x), tensor(y))                         # (3,1,5) with (4,1)
    s = binary_values(op, dt, (), 13)
    diff(name, tensor(a), tensor(s[1]))                      # scalar right (stride 0)
    diff(name, tensor(s[0]), tensor(b))                      # scalar left
    diff(name, tensor(s[0]), tensor(s[1]))                   # 0-dim both
    row = binary_values(op, dt, (33,), 14)[1]
    diff(name, tensor(a), tensor(row))                       # row broadcast
    z = binary_values(op, dt, (0, 3), 15)
    diff(name, tensor(z[0]), tensor(z[1]))                   # zero-size
    o = binary_values(op, dt, (1,), 16)
    diff(name, tensor(o[0]), tensor(o[1]))                   # one element
    u = binary_values(op, dt, (5, 39), 17)
    diff_pairs(name, dev_pair(u[0], unaligned=True), dev_pair(u[1]))
    diff_pairs(name, dev_pair(u[0]), dev_pair(u[1], unaligned=True))
    big = binary_values(op, dt, (LARGE,), 18)
    diff(name, tensor(big[0]), tensor(big[1]))               # large, vector path
    diff(name, tensor(big[0]), tensor(s[1]))                 # large, scalar right
    diff(name, tensor(s[0]), tensor(big[1]))                 # large, scalar left


MIXED = [("int32", "float16"), ("uint8", "int8"), ("bool", "float32"), ("int64", "float64"),
         ("bfloat16", "float16"), ("float32", "complex64"), ("int16", "bool"),
         ("float8_e4m3fn", "float32"), ("uint8", "bool")]


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("pair", MIXED, ids=lambda p: f"{p[0]}-{p[1]}")
def test_binary_mixed_dtypes(op, pair):
    a = binary_values(op, pair[0], (6, 11), 20)[0]
    b = binary_values(op, pair[1], (6, 11), 21)[1]
    diff("ingot_" + op, tensor(a), tensor(b))
    diff("ingot_" + op, tensor(a), tensor(b[0, 0]))


@pytest.mark.parametrize("dt", NAMES)
@pytest.mark.parametrize("fn", ["add_scalar", "sub_scalar", "mul_scalar", "div_scalar",
                                "pow_scalar"])
def test_scalar_fronts(fn, dt):
    a = values((9, 17), dt, 22)
    for v in [2.0, -1.5, 0.0, 3.0, 300.0]:
        if fn == "pow_scalar" and dt in CPLX and v == 300.0:
            continue  # exp(300 log z): libm ulps grow 300-fold, overflow edges differ
        diff("ingot_" + fn, tensor(a), v)
        diff("ingot_" + fn, tensor(values((LARGE,), dt, 23)), v)


def test_binary_exact_semantics():
    f = np.array([np.nan, 1.0, -0.0, 2.0, np.nan], np.float32)
    g = np.array([1.0, np.nan, 0.0, np.inf, np.nan], np.float32)
    mx = on_cuda("ingot_maximum", tensor(f), tensor(g))
    mn = on_cuda("ingot_minimum", tensor(f), tensor(g))
    assert np.isnan(mx[[0, 1, 4]]).all() and np.isnan(mn[[0, 1, 4]]).all()
    assert mx[3] == np.inf and mn[3] == 2.0
    # integer wrap through unsigned arithmetic
    i8 = np.array([127, -128, 100], np.int8)
    np.testing.assert_array_equal(on_cuda("ingot_add", tensor(i8), tensor(np.int8(1))),
                                  np.array([-128, -127, 101], np.int8))
    np.testing.assert_array_equal(on_cuda("ingot_mul", tensor(i8), tensor(i8)),
                                  (i8.astype(np.int64) ** 2).astype(np.int8))
    i64 = np.array([np.iinfo(np.int64).min, 7, -7, 7, -7], np.int64)
    d = np.array([-1, 3, 3, -3, -3], np.int64)
    np.testing.assert_array_equal(on_cuda("ingot_floor_divide", tensor(i64), tensor(d)),
                                  [np.iinfo(np.int64).min, 2, -3, -3, 2])
    np.testing.assert_array_equal(on_cuda("ingot_remainder", tensor(i64), tensor(d)),
                                  [0, 1, 2, -2, -1])
    # shifts: out of range gives 0 (left) or 0 / -1 (right)
    v = np.array([1, -8, 5, -5, 3], np.int32)
    s = np.array([3, 1, 32, 40, -1], np.int32)
    np.testing.assert_array_equal(on_cuda("ingot_left_shift", tensor(v), tensor(s)),
                                  [8, -16, 0, 0, 0])
    np.testing.assert_array_equal(on_cuda("ingot_right_shift", tensor(v), tensor(s)),
                                  [0, -4, 0, -1, 0])
    # integer pow with negative exponents (tensor exponent)
    b = np.array([1, -1, -1, 2, 0, 3], np.int32)
    e = np.array([-3, -3, -2, -1, 5, 4], np.int32)
    np.testing.assert_array_equal(on_cuda("ingot_pow", tensor(b), tensor(e)),
                                  [1, -1, 1, 0, 0, 81])
    # bool arithmetic saturates
    t = np.array([True, True, False, False])
    u = np.array([True, False, True, False])
    np.testing.assert_array_equal(on_cuda("ingot_add", tensor(t), tensor(u)), t | u)
    np.testing.assert_array_equal(on_cuda("ingot_mul", tensor(t), tensor(u)), t & u)


@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize("op", ["floor_divide", "remainder"])
def test_integer_division_by_zero(op, dt):
    a = values((4, 9), dt, 30)
    b = values((4, 9), dt, 31, nonzero=True)
    b[2, 3] = 0
    with pytest.raises(IngotError, match="ZeroDivisionError"):
        call("ingot_" + op, call("ingot_to", tensor(a), CUDA), call("ingot_to", tensor(b), CUDA))
    diff("ingot_" + op, tensor(a), tensor(b))
    diff("ingot_" + op, tensor(a), tensor(np.zeros((), npdt(dt))))  # scalar zero divisor
    # the device keeps working and a clean division still succeeds afterwards
    b[2, 3] = 1
    diff("ingot_" + op, tensor(a), tensor(b))


def test_float_division_by_zero():
    a = np.array([1.0, -1.0, 0.0, np.nan], np.float32)
    z = np.zeros(4, np.float32)
    r = on_cuda("ingot_div", tensor(a), tensor(z))
    assert r[0] == np.inf and r[1] == -np.inf and np.isnan(r[2]) and np.isnan(r[3])
    diff("ingot_floor_divide", tensor(a), tensor(z))
    diff("ingot_remainder", tensor(a), tensor(z))


def test_pow_negative_integer_scalar_refused():
    diff("ingot_pow", tensor(np.arange(5, dtype=np.int32)), tensor(np.int32(-2)))


# ------------------------------------------------------- unary semantics ----

@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32", "float64"])
def test_round_half_even_and_sign_nan(dt):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, np.nan], npdt(dt))
    r = on_cuda("ingot_round", tensor(x)).astype(np.float64)
    np.testing.assert_array_equal(r[:7], [0, 2, 2, -0.0, -2, -2, 4])
    assert np.signbit(r[3]) and np.isnan(r[7])
    s = on_cuda("ingot_sign", tensor(x)).astype(np.float64)
    np.testing.assert_array_equal(s, [1, 1, 1, -1, -1, -1, 1, 0])
    rl = on_cuda("ingot_relu", tensor(x)).astype(np.float64)
    assert np.isnan(rl[7]) and rl[3] == 0


def test_integer_unary_wrap():
    x = np.array([-128, 127, 0, -1], np.int8)
    np.testing.assert_array_equal(on_cuda("ingot_neg", tensor(x)), [-128, -127, 0, 1])
    np.testing.assert_array_equal(on_cuda("ingot_abs", tensor(x)), [-128, 127, 0, 1])
    np.testing.assert_array_equal(on_cuda("ingot_bitwise_not", tensor(x)), ~x)
    b = np.array([True, False])
    np.testing.assert_array_equal(on_cuda("ingot_bitwise_not", tensor(b)), [False, True])


# ---------------------------------------------------------- where, clamp ----

@pytest.mark.parametrize("dt", NAMES)
def test_where(dt):
    rng = np.random.default_rng(40)
    c = rng.integers(0, 2, (7, 33)).astype(np.bool_)
    a, b = values((7, 33), dt, 41), values((7, 33), dt, 42)
    diff("ingot_where", tensor(c), tensor(a), tensor(b))
    diff("ingot_where", strided(c), transposed(a), strided(b))
    diff("ingot_where", tensor(c[:, :1]), tensor(a), tensor(b[0]))        # broadcast
    diff("ingot_where", tensor(c), tensor(a[0, 0]), tensor(b))            # 0-dim value
    diff("ingot_where", tensor(np.bool_(True)), tensor(a[0, 0]), tensor(b[0, 1]))
    diff("ingot_where", tensor(c[:0]), tensor(a[:0]), tensor(b[:0]))      # zero-size
    big_c = rng.integers(0, 2, LARGE).astype(np.bool_)
    diff("ingot_where", tensor(big_c), tensor(values((LARGE,), dt, 43)),
         tensor(values((LARGE,), dt, 44)))
    diff("ingot_where", tensor(c), tensor(a), tensor(values((7, 33), "float64", 45)))  # promote


CLAMP_BOUNDS = [(-1.0, 1.0), (-np.inf, 0.5), (-2.5, np.inf), (0.0, 0.0), (2.0, -2.0),
                (-300.0, 1e10), (np.nan, 1.0), (-np.inf, np.inf), (3.7, 100.2)]


@pytest.mark.parametrize("dt", NAMES)
def test_clamp(dt):
    a = values((7, 33), dt, 50)
    for lo, hi in CLAMP_BOUNDS:
        diff("ingot_clamp", tensor(a), lo, hi)
        diff("ingot_clamp", transposed(a), lo, hi)
    diff("ingot_clamp", tensor(values((LARGE,), dt, 51)), -1.25, 2.5)
    diff("ingot_clamp", tensor(values((), dt, 52)), -1.0, 1.0)
    diff("ingot_clamp", tensor(values((0, 4), dt, 53)), -1.0, 1.0)
    diff_pairs("ingot_clamp", dev_pair(values((3, 37), dt, 54), unaligned=True), -1.0, 1.0)


# ----------------------------------------------------- > 2^31 elements ----

def test_add_over_2_31_elements():
    # 65537 x 32769 = 2^31 + 98305 uint8 elements (< 9 GB of device memory in all)
    rows, cols = 65537, 32769
    n = rows * cols
    assert n > (1 << 31)
    host = np.tile(np.arange(251, dtype=np.uint8), n // 251 + 1)[:n]  # host[i] = i % 251
    t = tensor(host)
    del host
    a = call("ingot_to", t, CUDA)
    del t
    gc.collect()
    five = call("ingot_full", 1, [n], 5.0, ID["uint8"], CUDA)

    def expect(idx):
        return ((np.asarray(idx, np.int64) % 251 + 5) % 256).astype(np.uint8)

    # contiguous, vectorised path (both operands dense)
    out = call("ingot_add", a, five)
    del five
    for lo in [0, (1 << 31) - 9, n - 17]:
        got = to_numpy(call("ingot_slice", out, 0, lo, lo + 17, 1))
        np.testing.assert_array_equal(got, expect(np.arange(lo, lo + 17)))
    del out
    gc.collect()
    # broadcast scalar path
    out = call("ingot_add", a, call("ingot_full", 0, [], 5.0, ID["uint8"], CUDA))
    got = to_numpy(call("ingot_slice", out, 0, n - 9, n, 1))
    np.testing.assert_array_equal(got, expect(np.arange(n - 9, n)))
    del out
    gc.collect()
    # strided path: a transposed 2-D view, output offsets past 2^31
    m = call("ingot_transpose", call("ingot_reshape", a, 2, [rows, cols]), 0, 1)  # (cols, rows)
    out = call("ingot_add", m, m)
    last = to_numpy(call("ingot_select", out, 0, cols - 1))  # out[cols-1, i] = 2 * a[i*cols+cols-1]
    idx = np.arange(rows, dtype=np.int64) * cols + cols - 1
    np.testing.assert_array_equal(last, ((idx % 251) * 2 % 256).astype(np.uint8))
    del out, m, a
    gc.collect()
