"""Binary elementwise ops, where and clamp against numpy.

Result dtypes follow PyTorch's promotion (written out below, independently of
the library), not numpy's. Values: the reference is computed in float64 (or
exactly for integers, which wrap modulo 2^n as PyTorch does) and rounded to
the result dtype. Tolerances (relative): float32 2e-6, float64 1e-12,
float16 1e-3, bfloat16 1e-2, complex64 1e-5, complex128 1e-12; integers and
bools exact.

PyTorch semantics where numpy differs: integer floor_divide / remainder by
zero is an error (ZeroDivisionError); int ** negative int scalar is an error,
while a tensor exponent gives PyTorch's powi values (1, ±1 for base -1, else 0);
shifts by < 0 or >= the bit width give 0 (left) or 0 / -1 (right); sub with a
bool operand is an error; maximum/minimum propagate NaN.
"""
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import ml_dtypes
import numpy as np
import pytest
from ingot_ctypes import IngotError, call, lib, strided, tensor, to_numpy, transposed
from refs import FLOATS, INTS, NP, RTOL

REAL = ["bool"] + INTS + FLOATS
ATOL = {"float16": 1e-5, "bfloat16": 1e-4, "float32": 1e-6, "float64": 1e-12,
        "complex64": 1e-5, "complex128": 1e-12}
BITS = {"uint8": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64}


def promote(a, b):
    """torch.promote_types for the dtypes above."""
    if a == b:
        return a
    if a == "bool":
        return b
    if b == "bool":
        return a
    order = ["uint8", "int8", "int16", "int32", "int64"]
    if a in order and b in order:
        if "uint8" in (a, b):
            o = b if a == "uint8" else a
            return "int16" if o == "int8" else o
        return max(a, b, key=order.index)
    if a in order:
        return b
    if b in order:
        return a
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    if a.startswith("complex") or b.startswith("complex"):
        prec = max(a, b, key=lambda d: {"complex128": 8, "float64": 8}.get(d, 4))
        return "complex128" if prec in ("complex128", "float64") else "complex64"
    fl = ["float16", "bfloat16", "float32", "float64"]
    return max(a, b, key=fl.index)


def values(shape, dt, seed=0, nonzero=False, small=False):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dt == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dt in INTS:
        info = np.iinfo(NP[dt])
        lo, hi = (max(info.min, -5), min(info.max, 5)) if small else (
            max(info.min, -1000), min(info.max, 1000))
        v = rng.integers(lo, hi + 1, n).astype(NP[dt])
        if nonzero:
            v[v == 0] = 1
        if n >= 4 and not small:
            v[:2] = [info.min, info.max]
        return v.reshape(shape)
    if dt.startswith("complex"):
        v = rng.uniform(-3, 3, n) + 1j * rng.uniform(-3, 3, n)
        return v.astype(NP[dt]).reshape(shape)
    v = rng.uniform(-4, 4, n)
    if nonzero:
        v[np.abs(v) < 0.1] = 0.5
    return v.astype(NP[dt]).reshape(shape)


def check(got, want, dt):
    assert got.dtype_name == dt, (got.dtype_name, dt)
    g = to_numpy(got)
    assert g.shape == np.shape(want), (g.shape, np.shape(want))
    with np.errstate(all="ignore"):
        w = np.asarray(want).astype(NP[dt])
    if dt == "bool" or dt in INTS:
        np.testing.assert_array_equal(g, w)
        return
    big = np.complex128 if dt.startswith("complex") else np.float64
    np.testing.assert_allclose(g.astype(big), w.astype(big), rtol=RTOL[dt], atol=ATOL[dt],
                               equal_nan=True)


def ref_args(x, y, dt):
    """Inputs converted to the compute dtype, then widened for the reference."""
    with np.errstate(all="ignore"):
        xa, ya = x.astype(NP[dt]), y.astype(NP[dt])
    if dt in FLOATS:
        return xa.astype(np.float64), ya.astype(np.float64)
    return xa, ya


def no_leak(fn):
    gc.collect()
    before = lib.ingot_live_tensors()
    fn()
    gc.collect()
    assert lib.ingot_live_tensors() == before


# ---- arithmetic over every real dtype ----
ARITH = {"add": np.add, "mul": np.multiply, "sub": np.subtract,
         "maximum": np.maximum, "minimum": np.minimum}


@pytest.mark.parametrize("dt", REAL)
@pytest.mark.parametrize("op", sorted(ARITH))
def test_arith(op, dt):
    x, y = values((7, 33), dt, 1), values((7, 33), dt, 2)
    if dt in FLOATS:
        x.flat[:4] = [np.nan, np.inf, -0.0, 1.0]
        y.flat[:4] = [1.0, np.nan, 0.0, np.inf]
    if op == "sub" and dt == "bool":
        with pytest.raises(IngotError, match="bool"):
            call("ingot_sub", tensor(x), tensor(y))
        return
    with np.errstate(all="ignore"):
        xa, ya = ref_args(x, y, dt)
        want = ARITH[op](xa, ya)
    check(call("ingot_" + op, tensor(x), tensor(y)), want, dt)


@pytest.mark.parametrize("dt", ["complex64", "complex128"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "eq", "ne"])
def test_complex(op, dt):
    x, y = values((5, 9), dt, 3), values((5, 9), dt, 4)
    y.flat[0] = x.flat[0]
    f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
         "pow": np.power, "eq": np.equal, "ne": np.not_equal}[op]
    want = f(x.astype(np.complex128), y.astype(np.complex128))
    check(call("ingot_" + op, tensor(x), tensor(y)), want, "bool" if op in ("eq", "ne") else dt)


@pytest.mark.parametrize("op", ["maximum", "lt", "floor_divide", "remainder", "atan2"])
def test_complex_unsupported(op):
    x = tensor(np.ones(3, np.complex64))
    with pytest.raises(IngotError):
        call("ingot_" + op, x, x)


# ---- division family ----
@pytest.mark.parametrize("dt", REAL)
def test_div_true(dt):
    x, y = values((6, 17), dt, 5), values((6, 17), dt, 6)
    out = "float32" if dt == "bool" or dt in INTS else dt
    wide = np.float64 if dt in FLOATS else np.float32  # integers divide in float32
    with np.errstate(all="ignore"):
        want = x.astype(wide).astype(np.float64) / y.astype(wide).astype(np.float64)
    check(call("ingot_div", tensor(x), tensor(y)), want, out)


@pytest.mark.parametrize("dt", INTS)
def test_floor_divide_remainder_int(dt):
    x, y = values((5, 31), dt, 7), values((5, 31), dt, 8, nonzero=True)
    y.flat[:3] = [-1, 1, -1] if dt != "uint8" else [255, 1, 3]
    with np.errstate(all="ignore"):
        check(call("ingot_floor_divide", tensor(x), tensor(y)), np.floor_divide(x, y), dt)
        check(call("ingot_remainder", tensor(x), tensor(y)), np.remainder(x, y), dt)
    y.flat[5] = 0
    for op in ["floor_divide", "remainder"]:
        def bad():
            with pytest.raises(IngotError, match="ZeroDivisionError"):
                call("ingot_" + op, tensor(x), tensor(y))
        no_leak(bad)


@pytest.mark.parametrize("dt", FLOATS)
def test_floor_divide_remainder_float(dt):
    x, y = values((5, 31), dt, 9), values((5, 31), dt, 10)
    specials = [(7.0, 0.0), (-7.0, 0.0), (0.0, 0.0), (5.0, np.inf), (-5.0, np.inf),
                (np.inf, 2.0), (np.nan, 1.0), (-7.5, 2.0), (7.5, -2.0), (-0.0, 3.0)]
    for i, (a, b) in enumerate(specials):
        x.flat[i], y.flat[i] = a, b
    xa, ya = ref_args(x, y, dt)
    with np.errstate(all="ignore"):
        check(call("ingot_floor_divide", tensor(x), tensor(y)), np.floor_divide(xa, ya), dt)
        check(call("ingot_remainder", tensor(x), tensor(y)), np.remainder(xa, ya), dt)


def test_remainder_sign_of_divisor():
    x = np.array([7, -7, 7, -7], np.int32)
    y = np.array([3, 3, -3, -3], np.int32)
    np.testing.assert_array_equal(to_numpy(call("ingot_remainder", tensor(x), tensor(y))),
                                  [1, 2, -2, -1])
    np.testing.assert_array_equal(to_numpy(call("ingot_floor_divide", tensor(x), tensor(y))),
                                  [2, -3, -3, 2])
    # INT_MIN // -1 wraps (no UB)
    m = np.array([np.iinfo(np.int64).min], np.int64)
    r = to_numpy(call("ingot_floor_divide", tensor(m), tensor(np.array([-1], np.int64))))
    assert r[0] == np.iinfo(np.int64).min


def test_intdiv_bool_errors():
    b = tensor(np.array([True, False]))
    for op in ["floor_divide", "remainder", "pow"]:
        with pytest.raises(IngotError):
            call("ingot_" + op, b, b)


# ---- pow, atan2 ----
@pytest.mark.parametrize("dt", INTS)
def test_pow_int(dt):
    x, y = values((4, 19), dt, 11, small=True), np.abs(values((4, 19), dt, 12, small=True))
    with np.errstate(all="ignore"):
        check(call("ingot_pow", tensor(x), tensor(y)), np.power(x, y), dt)
    # large exponents wrap like repeated multiplication
    big = np.array([3, -3 if dt != "uint8" else 253, 2], NP[dt])
    e = np.array([40, 41, 70], NP[dt]) if BITS[dt] > 8 else np.array([40, 41, 70], NP[dt])
    want = [pow(int(a), int(b), 1 << BITS[dt]) for a, b in zip(big, e)]
    got = to_numpy(call("ingot_pow", tensor(big), tensor(e)))
    np.testing.assert_array_equal(got.astype(np.int64) % (1 << BITS[dt]) if BITS[dt] < 64 else
                                  got.view(np.uint64), np.array(want, np.uint64))


def test_pow_negative_int_exponent():
    x = tensor(np.array([1, -1, -1, 2, 0], np.int32))
    e = tensor(np.array([-1, -3, -2, -1, -2], np.int32))
    np.testing.assert_array_equal(to_numpy(call("ingot_pow", x, e)), [1, -1, 1, 0, 0])

    def bad():
        with pytest.raises(IngotError, match="negative integer powers"):
            call("ingot_pow_scalar", x, -2.0)
        with pytest.raises(IngotError, match="negative integer powers"):
            call("ingot_pow", x, tensor(np.array(-1, np.int64)))
    no_leak(bad)
    # a float exponent promotes instead
    r = call("ingot_pow_scalar", x, -0.5)
    assert r.dtype_name == "float32"


@pytest.mark.parametrize("dt", FLOATS)
def test_pow_float(dt):
    x, y = np.abs(values((4, 21), dt, 13)), values((4, 21), dt, 14)
    x.flat[:4] = [0.0, -2.0, np.inf, np.nan]
    y.flat[:4] = [-1.0, 3.0, -1.0, 0.0]
    xa, ya = ref_args(x, y, dt)
    with np.errstate(all="ignore"):
        check(call("ingot_pow", tensor(x), tensor(y)), np.power(xa, ya), dt)
        w = np.power(x.astype(np.float64), 2.0)
    check(call("ingot_pow_scalar", tensor(x), 2.0), w, dt)


@pytest.mark.parametrize("dt", ["int32", "bool", "float16", "float32", "float64"])
def test_atan2(dt):
    x, y = values((5, 8), dt, 15), values((5, 8), dt, 16)
    out = dt if dt in FLOATS else "float32"
    xa = x.astype(np.float64) if dt in FLOATS else x.astype(np.float32).astype(np.float64)
    ya = y.astype(np.float64) if dt in FLOATS else y.astype(np.float32).astype(np.float64)
    check(call("ingot_atan2", tensor(x), tensor(y)), np.arctan2(xa, ya), out)


# ---- comparisons and logical ops ----
CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
       "gt": np.greater, "ge": np.greater_equal}


@pytest.mark.parametrize("dt", REAL)
@pytest.mark.parametrize("op", sorted(CMP))
def test_compare(op, dt):
    x, y = values((6, 13), dt, 17), values((6, 13), dt, 18)
    x.flat[:10] = y.flat[:10]
    if dt in FLOATS:
        x.flat[10:13] = [np.nan, 1.0, np.inf]
        y.flat[10:13] = [np.nan, np.nan, np.inf]
    check(call("ingot_" + op, tensor(x), tensor(y)), CMP[op](*ref_args(x, y, dt)), "bool")


def test_compare_in_promoted_dtype():
    a = np.array([1, 2, 3], np.int32)
    b = np.array([1.5, 2.0, 2.5], np.float32)
    np.testing.assert_array_equal(to_numpy(call("ingot_lt", tensor(a), tensor(b))),
                                  [True, False, False])
    np.testing.assert_array_equal(to_numpy(call("ingot_eq", tensor(a), tensor(b))),
                                  [False, True, False])
    # uint8 255 vs int8 -1 compare as int16: not equal
    u, s = np.array([255], np.uint8), np.array([-1], np.int8)
    assert not to_numpy(call("ingot_eq", tensor(u), tensor(s)))[0]
    assert to_numpy(call("ingot_gt", tensor(u), tensor(s)))[0]


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logical(op):
    f = {"logical_and": np.logical_and, "logical_or": np.logical_or,
         "logical_xor": np.logical_xor}[op]
    for da, db in [("bool", "bool"), ("float32", "int32"), ("complex64", "uint8"),
                   ("float16", "bfloat16"), ("int64", "float64"),
                   ("float8_e4m3fn", "float32")]:
        x, y = values((3, 11), da, 19), values((3, 11), db, 20)
        x.flat[:3] = 0
        y.flat[1:4] = 0
        if da.startswith("float"):
            x.flat[5] = np.nan  # NaN is true
        if da.startswith("complex"):
            x.flat[6] = 1j
        check(call("ingot_" + op, tensor(x), tensor(y)), f(x, y), "bool")


# ---- bitwise and shifts ----
@pytest.mark.parametrize("dt", ["bool"] + INTS)
@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor"])
def test_bitwise(op, dt):
    f = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
         "bitwise_xor": np.bitwise_xor}[op]
    x, y = values((4, 15), dt, 21), values((4, 15), dt, 22)
    check(call("ingot_" + op, tensor(x), tensor(y)), f(x, y), dt)


@pytest.mark.parametrize("dt", INTS)
def test_shifts(dt):
    w = BITS[dt]
    x = values((3, 20), dt, 23)
    s = np.random.default_rng(24).integers(0, w, x.shape).astype(NP[dt])
    with np.errstate(all="ignore"):
        check(call("ingot_left_shift", tensor(x), tensor(s)), np.left_shift(x, s), dt)
        check(call("ingot_right_shift", tensor(x), tensor(s)), np.right_shift(x, s), dt)
    # out-of-range shift amounts: left gives 0, right gives 0 or -1
    vals = np.array([5, -5, 1, -1] if dt != "uint8" else [5, 250, 1, 128], NP[dt])
    amt = np.array([w, w + 3 if w + 3 <= np.iinfo(NP[dt]).max else w, w, -1 if dt != "uint8" else w],
                   NP[dt])
    np.testing.assert_array_equal(to_numpy(call("ingot_left_shift", tensor(vals), tensor(amt))),
                                  np.zeros(4, NP[dt]))
    want_r = np.where(vals < 0, -1, 0).astype(NP[dt]) if dt != "uint8" else np.zeros(4, np.uint8)
    np.testing.assert_array_equal(to_numpy(call("ingot_right_shift", tensor(vals), tensor(amt))),
                                  want_r)


def test_bitwise_type_errors():
    def bad():
        f = tensor(np.ones(3, np.float32))
        i = tensor(np.ones(3, np.int32))
        b = tensor(np.ones(3, np.bool_))
        for op in ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]:
            with pytest.raises(IngotError):
                call("ingot_" + op, f, i)
        for op in ["left_shift", "right_shift"]:
            with pytest.raises(IngotError):
                call("ingot_" + op, b, b)
    no_leak(bad)


# ---- promotion ----
def test_promotion_all_pairs_add():
    for da in REAL:
        for db in REAL:
            x, y = values((5,), da, 25), values((5,), db, 26)
            r = call("ingot_add", tensor(x), tensor(y))
            want_dt = promote(da, db)
            assert r.dtype_name == want_dt, (da, db, r.dtype_name)
            with np.errstate(all="ignore"):
                xa, ya = ref_args(x, y, want_dt)
                want = xa | ya if want_dt == "bool" else xa + ya
            check(r, want, want_dt)


def test_promotion_documented_cases():
    i32 = tensor(np.array([1, 2], np.int32))
    u8 = tensor(np.array([250, 3], np.uint8))
    i8 = tensor(np.array([-1, 2], np.int8))
    f16 = tensor(np.array([1.5, 2.0], np.float16))
    i64 = tensor(np.array([1, 2], np.int64))
    assert call("ingot_add", i32, f16).dtype_name == "float16"
    assert call("ingot_add", u8, i8).dtype_name == "int16"
    np.testing.assert_array_equal(to_numpy(call("ingot_add", u8, i8)), [249, 5])
    # Python-number scalars do not widen within a category
    r = call("ingot_add_scalar", i32, 2.5)
    assert r.dtype_name == "float32"
    np.testing.assert_array_equal(to_numpy(r), [3.5, 4.5])
    r = call("ingot_add_scalar", u8, 300.0)
    assert r.dtype_name == "uint8"
    np.testing.assert_array_equal(to_numpy(r), (np.array([250, 3]) + 300) % 256)
    # 0-dim tensors rank below dimensioned ones within a category
    assert call("ingot_add", f16, tensor(np.array(1.0, np.float32))).dtype_name == "float16"
    assert call("ingot_add", i32, tensor(np.array(7, np.int64))).dtype_name == "int32"
    # ... but a higher category wins
    r = call("ingot_add", i64, tensor(np.array(1.5, np.float64)))
    assert r.dtype_name == "float64"
    np.testing.assert_array_equal(to_numpy(r), [2.5, 3.5])
    # two 0-dim tensors promote normally
    r = call("ingot_mul", tensor(np.array(3, np.int8)), tensor(np.array(2, np.int32)))
    assert r.dtype_name == "int32" and r.shape == () and to_numpy(r) == 6
    # bool tensor + scalar
    r = call("ingot_mul_scalar", tensor(np.array([True, False])), 3.0)
    assert r.dtype_name == "int64"
    np.testing.assert_array_equal(to_numpy(r), [3, 0])
    # float16 stays float16 with a double scalar
    r = call("ingot_mul_scalar", f16, 0.1)
    assert r.dtype_name == "float16"
    np.testing.assert_allclose(to_numpy(r).astype(np.float64), [0.15, 0.2], rtol=1e-3)


@pytest.mark.parametrize("dt", ["int32", "uint8", "float16", "bfloat16", "float32", "float64"])
def test_scalar_ops(dt):
    x = values((3, 7), dt, 27, nonzero=True)
    xf = x.astype(np.float64)
    fl = dt in FLOATS
    cases = [("add_scalar", 2.0, xf + 2.0, dt), ("sub_scalar", 1.5, xf - 1.5,
                                                   dt if fl else "float32"),
             ("mul_scalar", -3.0, xf * -3.0, dt), ("div_scalar", 4.0, xf / 4.0,
                                                   dt if fl else "float32"),
             ("pow_scalar", 2.0, xf ** 2, dt), ("pow_scalar", 0.5, np.sqrt(np.abs(xf)) * 0 +
                                                 np.abs(xf) ** 0.5, dt if fl else "float32")]
    if not fl:  # integer results wrap modulo 2^n (int64 arithmetic, then narrowed)
        xi = x.astype(np.int64)
        cases[0] = ("add_scalar", 2.0, (xi + 2).astype(NP[dt]), dt)
        cases[2] = ("mul_scalar", -3.0, (xi * -3).astype(NP[dt]), dt)
        cases[4] = ("pow_scalar", 2.0, (xi * xi).astype(NP[dt]), dt)
        if dt == "int32":
            cases[1] = ("sub_scalar", 1.5, x.astype(np.float32).astype(np.float64) - 1.5,
                        "float32")
            cases[3] = ("div_scalar", 4.0, x.astype(np.float32).astype(np.float64) / 4,
                        "float32")
    for name, v, want, out in cases:
        src = np.abs(x) if name == "pow_scalar" and v == 0.5 else x
        if name == "pow_scalar" and v == 0.5:
            with np.errstate(all="ignore"):  # abs(int32 min) wraps, giving NaN
                want = src.astype(np.float64 if fl else np.float32).astype(np.float64) ** 0.5
        with np.errstate(all="ignore"):
            check(call("ingot_" + name, tensor(src), v), want, out)


# ---- broadcasting and layouts ----
def test_broadcast_shapes():
    cases = [((3, 1, 5), (4, 1)), ((4, 1), (3, 1, 5)), ((), (2, 3)), ((2, 3), ()),
             ((1,), (6,)), ((2, 1, 3, 1), (1, 4, 1, 5)), ((0, 3), (1, 3)), ((5, 0), ()),
             ((1, 1), (1, 1))]
    for sa, sb in cases:
        x, y = values(sa, "float32", 28), values(sb, "float32", 29)
        if sa == ():
            x = np.array(1.25, np.float32)
        if sb == ():
            y = np.array(-0.5, np.float32)
        for op, f in [("add", np.add), ("mul", np.multiply), ("gt", np.greater),
                      ("maximum", np.maximum)]:
            r = call("ingot_" + op, tensor(x), tensor(y))
            want = f(x, y)
            assert r.shape == want.shape, (sa, sb, r.shape)
            check(r, want, "bool" if op == "gt" else "float32")


def test_strided_transposed_inputs():
    x = values((9, 14), "float64", 30)
    y = values((9, 14), "float64", 31)
    for tx in (strided(x), transposed(x), tensor(x)):
        for ty in (strided(y), transposed(y)):
            check(call("ingot_sub", tx, ty), x - y, "float64")
            check(call("ingot_atan2", tx, ty), np.arctan2(x, y), "float64")
    xi = values((6, 10), "int16", 32)
    yi = values((6, 10), "int8", 33, nonzero=True)
    check(call("ingot_remainder", transposed(xi), strided(yi)), np.remainder(
        xi.astype(np.int16), yi.astype(np.int16)), "int16")


@pytest.mark.parametrize("op", ["add", "mul", "sub", "div", "eq"])
def test_large_threaded(op):
    n = 3 * 65536 + 11
    x, y = values((n,), "float32", 34), values((n,), "float32", 35)
    f = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "div": np.divide,
         "eq": np.equal}[op]
    check(call("ingot_" + op, tensor(x), tensor(y)), f(x.astype(np.float64), y.astype(np.float64))
          if op != "eq" else f(x, y), "bool" if op == "eq" else "float32")
    # broadcast row + column and a stride-0 scalar
    a, b = values((513, 1), "float32", 36), values((1, 400), "float32", 37)
    check(call("ingot_add", tensor(a), tensor(b)), a.astype(np.float64) + b, "float32")
    check(call("ingot_mul_scalar", tensor(x), 0.25), x.astype(np.float64) * 0.25, "float32")
    xi = values((n,), "int64", 38)
    check(call("ingot_add", tensor(xi), tensor(xi[::-1].copy())), xi + xi[::-1], "int64")


# ---- where, clamp ----
@pytest.mark.parametrize("dt", REAL + ["complex64", "complex128"])
def test_where(dt):
    c = values((4, 1, 7), "bool", 39)
    x, y = values((3, 7), dt, 40), values((1, 7), dt, 41)
    check(call("ingot_where", tensor(c), tensor(x), tensor(y)), np.where(c, x, y), dt)


def test_where_promotes_and_checks():
    c = np.array([True, False, True])
    r = call("ingot_where", tensor(c), tensor(np.array([1, 2, 3], np.int32)),
             tensor(np.array([0.5, 1.5, 2.5], np.float16)))
    assert r.dtype_name == "float16"
    np.testing.assert_array_equal(to_numpy(r).astype(np.float64), [1, 1.5, 3])
    r = call("ingot_where", tensor(np.array(False)), tensor(np.array([1, 2], np.int8)),
             tensor(np.array(9, np.int64)))
    assert r.dtype_name == "int8"
    np.testing.assert_array_equal(to_numpy(r), [9, 9])
    r = call("ingot_where", transposed(np.eye(3, dtype=bool)), strided(np.ones((3, 3))),
             tensor(np.array(0.0)))
    np.testing.assert_array_equal(to_numpy(r), np.eye(3))

    def bad():
        with pytest.raises(IngotError, match="bool"):
            call("ingot_where", tensor(np.array([1, 0], np.uint8)), tensor(np.ones(2)),
                 tensor(np.zeros(2)))
        with pytest.raises(IngotError):
            call("ingot_where", tensor(np.ones(3, bool)), tensor(np.ones(2)), tensor(np.ones(3)))
    no_leak(bad)


@pytest.mark.parametrize("dt", INTS + FLOATS)
def test_clamp(dt):
    x = values((5, 13), dt, 42)
    if dt in FLOATS:
        x.flat[:3] = [np.nan, np.inf, -np.inf]
    xf = x.astype(np.float64)
    for lo, hi in [(-2.0, 3.0), (-np.inf, 1.5), (0.0, np.inf), (-np.inf, np.inf), (4.0, 1.0)]:
        if dt in INTS:  # exact integer reference
            want = x.astype(object)
            if np.isfinite(lo):
                want = np.maximum(want, int(lo))
            if np.isfinite(hi):
                want = np.minimum(want, int(hi))
            want = want.astype(NP[dt])
        else:
            want = np.minimum(np.maximum(xf, lo), hi)  # NaN propagates in both
        check(call("ingot_clamp", tensor(x), lo, hi), want, dt)
    want = np.clip(x, -1, 1) if dt in INTS else np.clip(xf, -1, 1)
    check(call("ingot_clamp", transposed(x), -1.0, 1.0), want, dt)


def test_clamp_int_bounds_saturate():
    x = np.array([-128, -5, 0, 100, 127], np.int8)
    np.testing.assert_array_equal(to_numpy(call("ingot_clamp", tensor(x), -1000.0, 1000.0)), x)
    np.testing.assert_array_equal(to_numpy(call("ingot_clamp", tensor(x), 200.0, np.inf)),
                                  np.full(5, 127, np.int8))
    with pytest.raises(IngotError):
        call("ingot_clamp", tensor(np.array([True])), 0.0, 1.0)
    with pytest.raises(IngotError):
        call("ingot_clamp", tensor(x), np.nan, 1.0)
    # a NaN bound gives NaN for floats (PyTorch)
    r = to_numpy(call("ingot_clamp", tensor(np.array([1.0, -2.0], np.float32)), np.nan, 1.0))
    assert np.isnan(r).all()


# ---- errors ----
def test_errors_no_leak():
    def bad():
        a = tensor(np.ones((2, 3), np.float32))
        b = tensor(np.ones((4,), np.float32))
        for op in ["add", "mul", "eq", "where_"]:
            with pytest.raises(IngotError, match="size"):
                if op == "where_":
                    call("ingot_where", tensor(np.ones(3, bool)), a, b)
                else:
                    call("ingot_" + op, a, b)
        bl = tensor(np.array([True, False]))
        with pytest.raises(IngotError, match="bool"):
            call("ingot_sub", bl, tensor(np.array([1, 2], np.int32)))
        with pytest.raises(IngotError, match="bool"):
            call("ingot_sub", tensor(np.array([1.0, 2.0])), bl)
        with pytest.raises(IngotError):
            call("ingot_add", None, a)
        # float8 does not promote with other dtypes
        with pytest.raises(IngotError):
            call("ingot_add", tensor(np.ones(2, ml_dtypes.float8_e4m3fn)), a)
    no_leak(bad)


def test_float8_same_dtype():
    x = np.array([0.5, 1.0, -2.0, 3.0], ml_dtypes.float8_e5m2)
    r = call("ingot_add", tensor(x), tensor(x))
    assert r.dtype == np.dtype(ml_dtypes.float8_e5m2)
    np.testing.assert_array_equal(to_numpy(r).astype(np.float32),
                                  (x.astype(np.float32) * 2).astype(ml_dtypes.float8_e5m2)
                                  .astype(np.float32))


def test_success_paths_release_temporaries():
    # casts, expands and scalar wrappers made by the fronts are all released
    def ok():
        a = tensor(values((3, 1, 5), "int32", 43))
        b = tensor(values((4, 1), "float16", 44))
        for op in ["add", "div", "lt", "logical_xor", "maximum"]:
            r = call("ingot_" + op, a, b)
            assert r.shape == (3, 4, 5)
        r = call("ingot_pow_scalar", a, 3.0)
        r = call("ingot_where", tensor(np.ones((4, 1), bool)), a, b)
        r = call("ingot_clamp", b, -1.0, 1.0)
        del r
    no_leak(ok)
