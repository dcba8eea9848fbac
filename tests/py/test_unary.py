"""Unary elementwise ops against numpy/scipy.

Tolerances (relative, on values rounded to the output dtype): float32 2e-6
(1e-5 for composite activations), float64 1e-12, float16 1e-3, bfloat16 1e-2,
complex64 1e-5, complex128 1e-12. Low-precision inputs are computed in
float32 and rounded once, as PyTorch does, so the reference is computed in
float64 from the exact input values and rounded to the output dtype.

PyTorch semantics where numpy differs: sign(NaN) is 0; integer and bool
inputs of floating ops give float32; floor/ceil/round/trunc of integers are
the identity; round is half to even.
"""
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import ml_dtypes
import numpy as np
import pytest
import scipy.special as sp
from ingot_ctypes import IngotError, call, lib, strided, tensor, to_numpy, transposed
from refs import FLOATS, INTS, NP, RTOL

ATOL = {"float16": 1e-5, "bfloat16": 1e-4, "float32": 1e-7, "float64": 1e-15,
        "complex64": 1e-6, "complex128": 1e-14}

SQ2 = np.sqrt(2.0)
FLOAT_OPS = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log1p": np.log1p,
    "expm1": np.expm1, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "tanh": np.tanh, "sigmoid": sp.expit, "silu": lambda x: x * sp.expit(x),
    "gelu": lambda x: x * 0.5 * (1 + sp.erf(x / SQ2)),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "erf": sp.erf,
}
COMPOSITE = {"sigmoid", "silu", "gelu", "gelu_tanh"}
KEEP_OPS = {
    "neg": np.negative, "abs": np.abs,
    "sign": lambda x: np.where(np.isnan(x), 0, np.sign(x)) if x.dtype.kind == "f" else np.sign(x),
    "relu": lambda x: np.where(x < 0, np.zeros_like(x), x),
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "trunc": np.trunc,
}
SPECIALS = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -1e-40, 0.5, -0.5, 1.5, 2.5, -2.5,
            1.0, -1.0, 100.0, -100.0]


def values(shape, dt, seed=0):
    """Random values for dt, with special values mixed in for floats."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dt == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dt in INTS:
        info = np.iinfo(NP[dt])
        v = rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, n).astype(NP[dt])
        if n >= 4:
            v[:2] = [info.min, info.max]
        return v.reshape(shape)
    if dt.startswith("complex"):
        v = rng.uniform(-3, 3, n) + 1j * rng.uniform(-3, 3, n)
        return v.astype(NP[dt]).reshape(shape)
    v = rng.uniform(-3, 3, n)
    k = min(len(SPECIALS), n // 2)
    v[:k] = SPECIALS[:k]
    return v.astype(NP[dt]).reshape(shape)


def check(got, want, dt):
    """got: ingot T; want: float64/complex128 reference rounded to dt."""
    g = to_numpy(got)
    assert got.dtype_name == dt, (got.dtype_name, dt)
    assert g.shape == want.shape
    if dt == "bool" or dt in INTS:
        np.testing.assert_array_equal(g, want.astype(NP[dt]))
        return
    with np.errstate(all="ignore"):
        w = want.astype(NP[dt])
    big = np.complex128 if dt.startswith("complex") else np.float64
    np.testing.assert_allclose(g.astype(big), w.astype(big), rtol=RTOL[dt], atol=ATOL[dt],
                               equal_nan=True)


def ref64(x):
    return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("op", sorted(FLOAT_OPS))
def test_float_ops(op, dt):
    x = values((7, 33), dt)
    with np.errstate(all="ignore"):
        want = FLOAT_OPS[op](ref64(x))
    got = call("ingot_" + op, tensor(x))
    if op in COMPOSITE and dt == "float32":
        g = to_numpy(got).astype(np.float64)
        np.testing.assert_allclose(g, want.astype(np.float32), rtol=1e-5, atol=1e-7,
                                   equal_nan=True)
    else:
        check(got, want, dt)


@pytest.mark.parametrize("dt", ["bool", "uint8", "int8", "int32", "int64"])
@pytest.mark.parametrize("op", ["exp", "log", "sqrt", "sin", "sigmoid", "erf", "reciprocal",
                                "gelu", "tanh"])
def test_float_ops_on_integers_give_float32(op, dt):
    x = values((5, 9), dt, seed=1)
    with np.errstate(all="ignore"):
        # PyTorch casts to float32 first (int32 max becomes 2^31)
        want = FLOAT_OPS[op](x.astype(np.float32).astype(np.float64))
    check(call("ingot_" + op, tensor(x)), want, "float32")


@pytest.mark.parametrize("dt", FLOATS + INTS)
@pytest.mark.parametrize("op", sorted(KEEP_OPS))
def test_dtype_keeping_ops(op, dt):
    x = values((6, 11), dt, seed=2)
    if op in ("abs", "neg") and dt in INTS:
        with np.errstate(all="ignore"):
            want = KEEP_OPS[op](x)  # numpy wraps like PyTorch (abs(-128) = -128 for int8)
        np.testing.assert_array_equal(to_numpy(call("ingot_" + op, tensor(x))), want)
        return
    with np.errstate(all="ignore"):
        want = KEEP_OPS[op](ref64(x)) if dt in FLOATS else KEEP_OPS[op](x)
    check(call("ingot_" + op, tensor(x)), np.asarray(want), dt)


def test_round_half_to_even_and_specials():
    x = np.array([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 0.49999997, 2.5000002, np.nan, np.inf,
                  -np.inf, -0.0, 1e30], np.float32)
    np.testing.assert_array_equal(to_numpy(call("ingot_round", tensor(x))), np.round(x))
    np.testing.assert_array_equal(
        to_numpy(call("ingot_round", tensor(x.astype(np.float64)))), np.round(x.astype(np.float64)))
    # -0.0 keeps its sign through floor/ceil/trunc/round
    for op in ["floor", "ceil", "trunc", "round"]:
        r = to_numpy(call("ingot_" + op, tensor(np.array([-0.0, -0.25], np.float32))))
        assert np.signbit(r[0])


def test_bool_inputs_of_keeping_ops():
    x = np.array([True, False, True])
    for op in ["abs", "sign", "relu", "floor", "ceil", "round", "trunc"]:
        r = call("ingot_" + op, tensor(x))
        assert r.dtype_name == "bool"
        np.testing.assert_array_equal(to_numpy(r), x)
    with pytest.raises(IngotError, match="bool"):
        call("ingot_neg", tensor(x))


ALL = ["bool"] + INTS + FLOATS + ["complex64", "complex128"]


@pytest.mark.parametrize("dt", ALL)
def test_predicates(dt):
    x = values((4, 17), dt, seed=3)
    if dt.startswith("complex"):
        x.flat[:6] = [complex(np.nan, 0), complex(0, np.nan), complex(np.inf, 1),
                      complex(1, -np.inf), 0, complex(0, 1)]
    xr = ref64(x) if dt in FLOATS else x
    for op, f in [("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite),
                  ("logical_not", np.logical_not)]:
        r = call("ingot_" + op, tensor(x))
        assert r.dtype_name == "bool"
        np.testing.assert_array_equal(to_numpy(r), f(xr), err_msg=op)


@pytest.mark.parametrize("dt", ["bool"] + INTS)
def test_bitwise_not(dt):
    x = values((3, 13), dt, seed=4)
    r = call("ingot_bitwise_not", tensor(x))
    assert r.dtype_name == dt
    np.testing.assert_array_equal(to_numpy(r), np.invert(x))


CPLX_OPS = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "rsqrt": lambda z: 1 / np.sqrt(z), "reciprocal": lambda z: 1 / z, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "tanh": np.tanh,
    "sign": lambda z: np.where(z == 0, 0, z / np.where(z == 0, 1, np.abs(z))),
}


@pytest.mark.parametrize("dt", ["complex64", "complex128"])
@pytest.mark.parametrize("op", sorted(CPLX_OPS))
def test_complex_ops(op, dt):
    x = values((5, 7), dt, seed=5)
    if op not in ("log", "reciprocal", "rsqrt"):  # 0 there: C99 and numpy differ in the inf/nan
        x.flat[0] = 0
    with np.errstate(all="ignore"):
        want = CPLX_OPS[op](x.astype(np.complex128))
    check(call("ingot_" + op, tensor(x)), want, dt)


@pytest.mark.parametrize("dt,real", [("complex64", "float32"), ("complex128", "float64")])
def test_complex_abs_is_real(dt, real):
    x = values((3, 8), dt, seed=6)
    check(call("ingot_abs", tensor(x)), np.abs(x.astype(np.complex128)), real)


@pytest.mark.parametrize("op", ["relu", "floor", "ceil", "round", "trunc", "erf", "sigmoid",
                                "gelu", "exp2", "log1p", "bitwise_not"])
def test_complex_unsupported_errors(op):
    before = lib.ingot_live_tensors()
    x = tensor(np.array([1 + 1j], np.complex64))
    with pytest.raises(IngotError):
        call("ingot_" + op, x)
    del x
    gc.collect()
    assert lib.ingot_live_tensors() == before


def test_bitwise_not_float_errors_and_no_leak():
    gc.collect()
    before = lib.ingot_live_tensors()
    for dt in FLOATS:
        x = tensor(np.ones(3, NP[dt]))
        with pytest.raises(IngotError, match="integer"):
            call("ingot_bitwise_not", x)
    del x
    gc.collect()
    assert lib.ingot_live_tensors() == before


@pytest.mark.parametrize("op", ["exp", "neg", "sin", "round", "isnan", "sigmoid", "abs"])
def test_layouts(op):
    ref = {**FLOAT_OPS, **KEEP_OPS, "isnan": np.isnan}[op]
    x = values((9, 12), "float32", seed=7)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64)).astype(np.float32)
    odt = "bool" if op == "isnan" else "float32"
    tol = dict(rtol=1e-5, atol=1e-7, equal_nan=True)
    for t in (strided(x), transposed(x)):
        got = call("ingot_" + op, t)
        assert got.shape == x.shape and got.dtype_name == odt
        np.testing.assert_allclose(to_numpy(got).astype(np.float64), want, **tol)
    # 0-dim, zero-size, size 1, odd sizes
    for shape in [(), (0,), (3, 0, 2), (1,), (1000,)]:
        xs = values(shape, "float32", seed=8) if shape != () else np.array(0.7, np.float32)
        got = call("ingot_" + op, tensor(xs))
        assert got.shape == shape
        with np.errstate(all="ignore"):
            np.testing.assert_allclose(to_numpy(got).astype(np.float64),
                                       np.asarray(ref(xs.astype(np.float64))).astype(np.float32),
                                       **tol)


@pytest.mark.parametrize("dt", ["float32", "bfloat16", "int32"])
def test_large_threaded(dt):
    n = 3 * 65536 + 7
    x = values((n,), dt, seed=9)
    got = to_numpy(call("ingot_exp" if dt != "int32" else "ingot_neg", tensor(x)))
    if dt == "int32":
        np.testing.assert_array_equal(got, -x)
    else:
        with np.errstate(all="ignore"):
            want = np.exp(x.astype(np.float64)).astype(NP[dt])
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=RTOL[dt], atol=ATOL[dt], equal_nan=True)
    # a non-contiguous large input (transposed) takes the strided loops in parallel
    m = values((300, 257), "float32", seed=10)
    got = to_numpy(call("ingot_tanh", transposed(m)))
    np.testing.assert_allclose(got, np.tanh(m.astype(np.float64)).astype(np.float32),
                               rtol=2e-6, atol=1e-7, equal_nan=True)


def test_subnormals_and_specials_f32():
    x = np.array([1e-45, -1e-45, 1e-38, np.finfo(np.float32).tiny / 4, np.inf, -np.inf, np.nan,
                  -0.0, 0.0], np.float32)
    with np.errstate(all="ignore"):
        for op in ["exp", "log", "sqrt", "reciprocal", "tanh", "sigmoid", "relu", "expm1",
                   "log1p", "erf"]:
            f = {**FLOAT_OPS, **KEEP_OPS}[op]
            got = to_numpy(call("ingot_" + op, tensor(x)))
            want = f(x.astype(np.float64)).astype(np.float32)
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=0, equal_nan=True, err_msg=op)
    # reciprocal of -0.0 is -inf; sqrt(-0.0) is -0.0
    assert to_numpy(call("ingot_reciprocal", tensor(np.array([-0.0], np.float32))))[0] == -np.inf
    assert np.signbit(to_numpy(call("ingot_sqrt", tensor(np.array([-0.0], np.float32))))[0])


def test_float8_via_float32():
    for dt in [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]:
        x = np.array([0.5, -1.0, 2.0, 0.0], dt)
        got = to_numpy(call("ingot_exp", tensor(x)))
        assert got.dtype == np.dtype(dt)
        want = np.exp(x.astype(np.float64)).astype(np.float32).astype(dt)
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_null_propagates():
    with pytest.raises(IngotError):
        call("ingot_exp", None)


def test_success_paths_release_temporaries():
    gc.collect()
    before = lib.ingot_live_tensors()
    x = tensor(np.arange(6, dtype=np.int16).reshape(2, 3))
    for op in ["exp", "neg", "floor", "isnan", "bitwise_not", "gelu"]:
        r = call("ingot_" + op, x)
        del r
    del x
    gc.collect()
    assert lib.ingot_live_tensors() == before
