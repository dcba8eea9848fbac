"""Reductions, scans and softmax against numpy/scipy.

PyTorch semantics where numpy differs: sum/prod/cumsum/cumprod of bool and
ints give int64; mean/var/std of ints are errors; amax/argmax propagate NaN
(first NaN wins); reducing an empty dim with amax/argmax/max is an error;
any/all give bool for every dtype; logsumexp of ints gives float32.
Tolerances (relative): f64 1e-12, f32 1e-6 (sums 1e-5), f16 1e-3, bf16 1e-2.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
import scipy.special as sp
from ingot_ctypes import (IngotError, call, out_ptr, strided, take, tensor, to_numpy,
                          transposed)
from refs import BF16, FLOATS, NP

F16 = np.dtype(np.float16)
INTS = ["bool", "uint8", "int8", "int16", "int32", "int64"]
COMPLEX = ["complex64", "complex128"]
RTOL = {"float16": 1e-3, "bfloat16": 1e-2, "float32": 1e-5, "float64": 1e-12,
        "complex64": 1e-5, "complex128": 1e-12}
rng = np.random.default_rng(1234)


def rand(shape, dt):
    dt = np.dtype(NP[dt]) if isinstance(dt, str) else np.dtype(dt)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "ui":
        lo, hi = (0, 10) if dt.kind == "u" else (-5, 6)
        return rng.integers(lo, hi, shape).astype(dt)
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    return rng.standard_normal(shape).astype(dt)


def f64(a):
    a = np.asarray(a)
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def close(got, want, dt, rtol=None):
    rtol = RTOL.get(dt, 0) if rtol is None else rtol
    got = np.asarray(got)
    if got.dtype == BF16 or got.dtype == F16:
        got = got.astype(np.float32)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if rtol == 0:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 1e-2 + 1e-300,
                                   equal_nan=True)


def minmax(op, t, dim, keepdim, with_idx=True):
    """ingot_max_dim/min_dim -> (values, indices or None)."""
    slot = out_ptr()
    slot.contents.value = 12345
    try:
        r = call("ingot_" + op, t, dim, keepdim, slot if with_idx else None)
    except IngotError:
        assert not with_idx or slot.contents.value is None  # *indices cleared on failure
        raise
    return r, (take(slot) if with_idx else None)


def red(name, t, dims=None, keepdim=False):
    nd = 0 if dims is None else len(dims)
    return to_numpy(call("ingot_" + name, t, dims, nd, keepdim))


def axis(dims):
    return None if dims is None else tuple(dims)


def make(arr, layout):
    if layout == "contig":
        return tensor(arr)
    if layout == "strided":
        return strided(arr)
    return transposed(arr)


DIMS = [None, [0], [-1], [1], [0, 2], [2, 0], [-3, -1], [0, 1, 2]]


# ---- sum / prod / mean ----
@pytest.mark.parametrize("dt", INTS + FLOATS + COMPLEX)
@pytest.mark.parametrize("dims", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum(dt, dims, keepdim):
    a = rand((3, 5, 7), dt)
    got = red("sum", tensor(a), dims, keepdim)
    if dt in INTS:
        want = a.astype(np.int64).sum(axis=axis(dims), keepdims=keepdim)
        assert got.dtype == np.int64
        close(got, want, dt, 0)
    else:
        want = f64(a).sum(axis=axis(dims), keepdims=keepdim)
        assert got.dtype == np.dtype(NP[dt])
        close(got, want, dt)


@pytest.mark.parametrize("dt", INTS + FLOATS + COMPLEX)
@pytest.mark.parametrize("dims", [None, [1], [0, 2]])
def test_prod(dt, dims):
    a = rand((3, 4, 5), dt)
    if dt in FLOATS + COMPLEX:
        a = (a * 0.5 + 1).astype(a.dtype)
    got = red("prod", tensor(a), dims)
    if dt in INTS:
        close(got, a.astype(np.int64).prod(axis=axis(dims)), dt, 0)
    else:
        close(got, f64(a).prod(axis=axis(dims)), dt, RTOL[dt] * 4)


def test_prod_int_wraps():
    a = np.full(70, 3, np.int64)
    close(red("prod", tensor(a)), a.prod(), "int64", 0)  # wraps modulo 2^64 as torch


@pytest.mark.parametrize("dt", FLOATS + COMPLEX)
@pytest.mark.parametrize("dims", [None, [1], [0, 2], [-1]])
@pytest.mark.parametrize("keepdim", [False, True])
def test_mean(dt, dims, keepdim):
    a = rand((4, 3, 6), dt)
    got = red("mean", tensor(a), dims, keepdim)
    assert got.dtype == np.dtype(NP[dt])
    close(got, f64(a).mean(axis=axis(dims), keepdims=keepdim), dt)


@pytest.mark.parametrize("layout", ["strided", "transposed"])
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "var", "logsumexp"])
@pytest.mark.parametrize("dims", [None, [0], [1], [-1], [0, 2], [1, 2]])
def test_layouts(layout, op, dims):
    a = rand((5, 6, 9), "float64")
    t = make(a, layout)
    ax = axis(dims)
    ref = {"sum": lambda: a.sum(ax), "mean": lambda: a.mean(ax), "amax": lambda: a.max(ax),
           "amin": lambda: a.min(ax), "var": lambda: a.var(ax, ddof=1),
           "logsumexp": lambda: sp.logsumexp(a, ax)}[op]()
    if op == "var":
        got = to_numpy(call("ingot_var", t, dims, 0 if dims is None else len(dims), 1.0,
                            False))
    else:
        got = red(op, t, dims)
    close(got, ref, "float64")


def test_non_adjacent_dims_4d():
    a = rand((3, 4, 5, 6), "float32")
    for dims in ([0, 2], [1, 3], [0, 3], [3, 0, 1]):
        for t in (tensor(a), make(a, "transposed"), make(a, "strided")):
            close(red("sum", t, dims), f64(a).sum(tuple(dims)), "float32")
            close(red("amax", t, dims, True), a.max(tuple(dims), keepdims=True), "float32", 0)


def test_zero_dim_input():
    a = np.array(2.5, np.float32)
    assert tensor(a).shape == ()
    for op in ["sum", "mean", "prod", "amax", "amin", "logsumexp"]:
        for dims in (None, [0], [-1]):
            got = red(op, tensor(a), dims)
            assert got.shape == ()
            close(got, 2.5, "float32")
    close(red("any", tensor(a)), True, "bool", 0)
    close(red("sum", tensor(a), [0], True), np.float32(2.5), "float32", 0)
    vals, idx = minmax("max_dim", tensor(a), 0, False)
    assert to_numpy(vals) == 2.5 and to_numpy(idx) == 0
    assert to_numpy(call("ingot_argmax", tensor(a), -1, False)) == 0
    close(to_numpy(call("ingot_cumsum", tensor(a), 0)), a, "float32", 0)
    close(to_numpy(call("ingot_softmax", tensor(a), 0)), np.float32(1), "float32", 0)
    close(to_numpy(call("ingot_log_softmax", tensor(a), -1)), np.float32(0), "float32", 0)
    close(to_numpy(call("ingot_var", tensor(a), None, 0, 0.0, False)), 0.0, "float32", 0)


def test_zero_size():
    a = np.zeros((0, 4), np.float32)
    close(red("sum", tensor(a), [0]), np.zeros(4), "float32", 0)
    close(red("prod", tensor(a), [0]), np.ones(4), "float32", 0)
    close(red("mean", tensor(a), [0]), np.full(4, np.nan), "float32", 0)
    close(red("sum", tensor(a), [1]), np.zeros(0), "float32", 0)
    close(red("amax", tensor(a), [1]), np.zeros(0), "float32", 0)
    close(red("logsumexp", tensor(a), [0]), np.full(4, -np.inf), "float32", 0)
    close(red("any", tensor(a), [0]), np.zeros(4, bool), "bool", 0)
    close(red("all", tensor(a), [0]), np.ones(4, bool), "bool", 0)
    close(red("sum", tensor(a)), np.float32(0), "float32", 0)
    close(to_numpy(call("ingot_var", tensor(a), [0], 1, 1.0, False)), np.full(4, np.nan),
          "float32", 0)
    close(to_numpy(call("ingot_norm", tensor(a), 2.0, [0], 1, False)), np.zeros(4),
          "float32", 0)
    close(to_numpy(call("ingot_cumsum", tensor(a), 0)), a, "float32", 0)
    close(to_numpy(call("ingot_softmax", tensor(a), 1)), a, "float32", 0)
    e = np.zeros((2, 0, 3), np.int32)
    close(red("sum", tensor(e), [1]), np.zeros((2, 3), np.int64), "int64", 0)


@pytest.mark.parametrize("dt", ["float32", "float64", "int32", "bool"])
def test_large_threaded(dt):
    n = 1 << 18
    a = rand(n, dt)
    got = red("sum", tensor(a))
    if dt in ("int32", "bool"):
        close(got, a.astype(np.int64).sum(), dt, 0)
    else:
        close(got, f64(a).sum(), dt, 1e-6 if dt == "float32" else 1e-12)
    b = a.reshape(512, 512)
    for dims in ([0], [1]):
        if dt in ("int32", "bool"):
            close(red("sum", tensor(b), dims), b.astype(np.int64).sum(tuple(dims)), dt, 0)
        else:
            close(red("sum", tensor(b), dims), f64(b).sum(tuple(dims)), dt, 1e-6)
    if dt in ("float32", "float64"):
        close(red("amax", tensor(a)), a.max(), dt, 0)
        i = int(rng.integers(n))
        a2 = a.copy()
        a2[i] = 100
        a2[i + 1:][:5] = 100  # later ties must lose
        assert to_numpy(call("ingot_argmax", tensor(a2), 0x7fff, False)) == i
        close(to_numpy(call("ingot_var", tensor(a), None, 0, 1.0, False)), f64(a).var(ddof=1),
              dt, 1e-6)
        close(red("logsumexp", tensor(a)), sp.logsumexp(f64(a)), dt, 1e-6)
        close(to_numpy(call("ingot_norm", tensor(a), 2.0, None, 0, False)),
              np.sqrt((f64(a) ** 2).sum()), dt, 1e-6)
        close(to_numpy(call("ingot_cumsum", tensor(a), 0)), np.cumsum(f64(a)).astype(a.dtype),
              dt, 1e-5)
        s = to_numpy(call("ingot_softmax", tensor(b), 1))
        close(s, sp.softmax(f64(b), 1), dt, 1e-5)


def test_float32_sum_accurate():
    a = np.full(1 << 20, 0.1, np.float32)
    got = red("sum", tensor(a))
    assert abs(float(got) - f64(a).sum()) / f64(a).sum() < 1e-7  # naive f32 would drift


# ---- amax / amin / max_dim / argmax ----
@pytest.mark.parametrize("dt", INTS + FLOATS)
@pytest.mark.parametrize("dims", [None, [0], [1, 2], [-1], [2, 0]])
def test_amax_amin(dt, dims):
    a = rand((4, 5, 6), dt)
    for op, f in (("amax", np.max), ("amin", np.min)):
        got = red(op, tensor(a), dims)
        assert got.dtype == a.dtype
        close(got, f(a, axis=axis(dims)), dt, 0)


def test_amax_nan_inf():
    a = np.array([[1, np.nan, 3], [-np.inf, 2, np.inf], [np.inf, -1, np.nan]], np.float32)
    for op, f in (("amax", np.max), ("amin", np.min)):
        close(red(op, tensor(a), [1]), f(a, 1), "float32", 0)
        close(red(op, tensor(a), [0]), f(a, 0), "float32", 0)
        close(red(op, tensor(a)), f(a), "float32", 0)


@pytest.mark.parametrize("dt", ["uint8", "int8", "int32", "int64", "float16", "bfloat16",
                                "float32", "float64", "bool"])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_dim(dt, dim, keepdim):
    a = rand((6, 7, 5), dt)
    for op, vf, af in (("max_dim", np.max, np.argmax), ("min_dim", np.min, np.argmin)):
        vals, idx = minmax(op, tensor(a), dim, keepdim)
        vals, idx = to_numpy(vals), to_numpy(idx)
        wi = af(a, axis=dim)
        if keepdim:
            wi = np.expand_dims(wi, dim)
        close(vals, vf(a, axis=dim, keepdims=keepdim), dt, 0)
        assert idx.dtype == np.int64
        close(idx, wi, "int64", 0)
        # without the indices output
        v2 = to_numpy(minmax(op, tensor(a), dim, keepdim, False)[0])
        close(v2, vals, dt, 0)


def test_arg_ties_and_nan():
    a = np.array([[1, 5, 5, 0, 5], [2, np.nan, 7, np.nan, 7], [3, 3, 3, 3, 3],
                  [-np.inf, -np.inf, 0, -np.inf, 1]], np.float64)
    for op, f in (("argmax", np.argmax), ("argmin", np.argmin)):
        close(to_numpy(call("ingot_" + op, tensor(a), 1, False)), f(a, 1), "int64", 0)
        close(to_numpy(call("ingot_" + op, tensor(a), 0, True)), f(a, 0, keepdims=True),
              "int64", 0)
        assert to_numpy(call("ingot_" + op, tensor(a), 0x7fff, False)) == f(a)
        k = to_numpy(call("ingot_" + op, tensor(a), 0x7fff, True))
        assert k.shape == (1, 1) and k[0, 0] == f(a)
        t = transposed(a)
        close(to_numpy(call("ingot_" + op, t, 1, False)), f(a, 1), "int64", 0)
        assert to_numpy(call("ingot_" + op, t, 0x7fff, False)) == f(a)
    ints = np.array([4, 9, 1, 9, 1], np.int32)
    assert to_numpy(call("ingot_argmax", tensor(ints), 0, False)) == 1
    assert to_numpy(call("ingot_argmin", tensor(ints), 0, False)) == 2
    v, i = minmax("max_dim", tensor(a), 1, False)
    v = to_numpy(v)
    close(to_numpy(i), [1, 1, 0, 4], "int64", 0)
    close(v, [5, np.nan, 3, 1], "float64", 0)


# ---- var / std ----
@pytest.mark.parametrize("dt", FLOATS + COMPLEX)
@pytest.mark.parametrize("dims", [None, [1], [0, 2], [-1]])
@pytest.mark.parametrize("corr", [0.0, 1.0, 2.0])
@pytest.mark.parametrize("keepdim", [False, True])
def test_var_std(dt, dims, corr, keepdim):
    a = rand((4, 5, 6), dt)
    want = f64(a).var(axis=axis(dims), ddof=corr, keepdims=keepdim)
    nd = 0 if dims is None else len(dims)
    v = to_numpy(call("ingot_var", tensor(a), dims, nd, corr, keepdim))
    s = to_numpy(call("ingot_std", tensor(a), dims, nd, corr, keepdim))
    real = {"complex64": np.float32, "complex128": np.float64}.get(dt, NP[dt])
    assert v.dtype == np.dtype(real) and s.dtype == np.dtype(real)
    close(v, want, dt, RTOL[dt] * 2)
    close(s, np.sqrt(want), dt, RTOL[dt] * 2)


def test_var_edge():
    a = np.array([[1.0, 2.0, 4.0], [3.0, 3.0, 3.0]])
    v = to_numpy(call("ingot_var", tensor(a[:, :1]), [1], 1, 1.0, False))
    assert np.isnan(v).all()  # N - correction = 0 and M2 = 0
    v = to_numpy(call("ingot_var", tensor(a[:, :2]), [1], 1, 2.0, False))
    assert v[0] == np.inf and np.isnan(v[1])  # 0.5/0 and 0/0 as torch
    v = to_numpy(call("ingot_var", tensor(a), [1], 1, 5.0, False))
    assert v[0] == np.inf and np.isnan(v[1])
    big = np.array([1e9 + 1, 1e9 + 2, 1e9 + 3], np.float64)  # cancellation-safe
    close(to_numpy(call("ingot_var", tensor(big), None, 0, 1.0, False)), 1.0, "float64")
    n = np.array([1.0, np.nan, 2.0])
    assert np.isnan(to_numpy(call("ingot_std", tensor(n), None, 0, 1.0, False)))


# ---- norm ----
def norm_ref(a, p, dims):
    x = np.abs(f64(a)).astype(np.float64)
    ax = axis(dims)
    if p == np.inf:
        return x.max(ax)
    if p == -np.inf:
        return x.min(ax)
    if p == 0:
        return (x != 0).sum(ax).astype(np.float64)
    return (x ** p).sum(ax) ** (1 / p)


@pytest.mark.parametrize("dt", FLOATS + COMPLEX)
@pytest.mark.parametrize("p", [1.0, 2.0, np.inf, -np.inf, 0.0, 3.0, 0.5])
@pytest.mark.parametrize("dims", [None, [1], [0, 2]])
def test_norm(dt, p, dims):
    a = rand((3, 4, 5), dt)
    a.flat[::7] = 0
    nd = 0 if dims is None else len(dims)
    got = to_numpy(call("ingot_norm", tensor(a), p, dims, nd, False))
    real = {"complex64": np.float32, "complex128": np.float64}.get(dt, NP[dt])
    assert got.dtype == np.dtype(real)
    close(got, norm_ref(a, p, dims), dt, RTOL[dt] * 4)


def test_norm_strided_keepdim_nan():
    a = rand((6, 8), "float32")
    got = to_numpy(call("ingot_norm", transposed(a), 2.0, [0], 1, True))
    close(got, np.sqrt((f64(a) ** 2).sum(0, keepdims=True)), "float32")
    n = np.array([1.0, np.nan, -3.0], np.float32)
    for p in (1.0, 2.0, np.inf, -np.inf):
        assert np.isnan(to_numpy(call("ingot_norm", tensor(n), p, None, 0, False)))


# ---- logsumexp ----
@pytest.mark.parametrize("dt", FLOATS + ["int32", "bool", "int64"])
@pytest.mark.parametrize("dims", [None, [0], [-1], [0, 2]])
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp(dt, dims, keepdim):
    a = rand((3, 4, 5), dt)
    if dt in FLOATS:
        a = (a * 30).astype(a.dtype)  # large values need the max shift
    got = red("logsumexp", tensor(a), dims, keepdim)
    assert got.dtype == (np.dtype(NP[dt]) if dt in FLOATS else np.float32)
    close(got, sp.logsumexp(f64(a), axis=axis(dims), keepdims=keepdim),
          dt if dt in FLOATS else "float32")


def test_logsumexp_inf():
    a = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.inf, np.inf], [-np.inf, 2.0],
                  [np.nan, 1.0], [1000.0, 1000.0]], np.float64)
    got = red("logsumexp", tensor(a), [1])
    close(got, [-np.inf, np.inf, np.inf, 2.0, np.nan, 1000.0 + np.log(2)], "float64")


# ---- any / all ----
@pytest.mark.parametrize("dt", INTS + FLOATS + COMPLEX)
@pytest.mark.parametrize("dims", [None, [1], [0, 2]])
@pytest.mark.parametrize("keepdim", [False, True])
def test_any_all(dt, dims, keepdim):
    a = rand((3, 4, 5), dt)
    if dt != "bool":
        a = (a * (rng.random(a.shape) < 0.7)).astype(a.dtype)
        a[0] = 0
        a[1] = 1
    for op, f in (("any", np.any), ("all", np.all)):
        got = red(op, tensor(a), dims, keepdim)
        assert got.dtype == np.bool_
        close(got, f(a != 0, axis=axis(dims), keepdims=keepdim), "bool", 0)


def test_any_all_nan_complex():
    a = np.array([[0, np.nan], [0, 0], [-0.0, 1]], np.float32)
    close(red("any", tensor(a), [1]), [True, False, True], "bool", 0)
    close(red("all", tensor(a), [0]), [False, False], "bool", 0)
    c = np.array([0j, 1j, 0j], np.complex64)
    close(red("any", tensor(c)), True, "bool", 0)
    close(red("all", tensor(c)), False, "bool", 0)


# ---- cumsum / cumprod ----
@pytest.mark.parametrize("dt", INTS + FLOATS + COMPLEX)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("layout", ["contig", "transposed"])
def test_cumsum_cumprod(dt, dim, layout):
    a = rand((4, 5, 6), dt)
    if dt in FLOATS + COMPLEX:
        a = (a * 0.3 + 1).astype(a.dtype)
    t = make(a, layout)
    for op, f in (("cumsum", np.cumsum), ("cumprod", np.cumprod)):
        got = to_numpy(call("ingot_" + op, t, dim))
        if dt in INTS:
            assert got.dtype == np.int64
            close(got, f(a.astype(np.int64), axis=dim), dt, 0)
        elif dt in ("float16", "bfloat16"):
            # accumulated in float32, each output rounded once
            want = f(a.astype(np.float32), axis=dim).astype(a.dtype)
            assert got.dtype == a.dtype
            close(got, want.astype(np.float32), dt, 0)
        else:
            assert got.dtype == a.dtype
            close(got, f(f64(a), axis=dim), dt, RTOL[dt] * 2)


def test_cumsum_special():
    a = np.array([1.0, np.inf, -np.inf, 2.0], np.float32)
    close(to_numpy(call("ingot_cumsum", tensor(a), 0)), [1, np.inf, np.nan, np.nan],
          "float32", 0)
    b = np.array([3, 0, 2], np.int8)
    close(to_numpy(call("ingot_cumprod", strided(b), 0)), [3, 0, 0], "int64", 0)


# ---- softmax / log_softmax ----
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("layout", ["contig", "strided", "transposed"])
def test_softmax(dt, dim, layout):
    a = (rand((5, 7, 9), dt) * 10).astype(NP[dt])
    t = make(a, layout)
    s = to_numpy(call("ingot_softmax", t, dim))
    ls = to_numpy(call("ingot_log_softmax", t, dim))
    assert s.dtype == a.dtype and ls.dtype == a.dtype
    tol = {"float16": 2e-3, "bfloat16": 1e-2, "float32": 1e-5, "float64": 1e-12}[dt]
    close(s, sp.softmax(f64(a), axis=dim), dt, tol)
    np.testing.assert_allclose(ls.astype(np.float64), sp.log_softmax(f64(a), axis=dim),
                               rtol=tol, atol=tol * 10)


def test_softmax_inf_rows():
    a = np.array([[-np.inf, -np.inf, -np.inf], [-np.inf, 0.0, 1.0], [1e4, 1e4, -1e4]],
                 np.float32)
    s = to_numpy(call("ingot_softmax", tensor(a), 1))
    ls = to_numpy(call("ingot_log_softmax", tensor(a), 1))
    assert np.isnan(s[0]).all() and np.isnan(ls[0]).all()  # as torch
    close(s[1:], sp.softmax(f64(a[1:]), 1), "float32")
    np.testing.assert_allclose(ls[1:], sp.log_softmax(f64(a[1:]), 1), rtol=1e-6)


# ---- errors ----
def err(fn, *args):
    with pytest.raises(IngotError):
        call(fn, *args)


def test_errors():
    a = tensor(rand((3, 4), "float32"))
    i = tensor(rand((3, 4), "int32"))
    c = tensor(rand((3, 4), "complex64"))
    e = tensor(np.zeros((0, 4), np.float32))
    err("ingot_sum", a, [2], 1, False)
    err("ingot_sum", a, [-3], 1, False)
    err("ingot_sum", a, [0, 0], 2, False)
    err("ingot_sum", a, [1, -1], 2, False)
    err("ingot_mean", i, None, 0, False)
    err("ingot_var", i, None, 0, 1.0, False)
    err("ingot_std", tensor(np.ones(3, bool)), None, 0, 1.0, False)
    err("ingot_norm", i, 2.0, None, 0, False)
    err("ingot_amax", e, [0], 1, False)
    err("ingot_amin", e, None, 0, False)
    err("ingot_amax", c, None, 0, False)
    err("ingot_argmax", e, 0x7fff, False)
    err("ingot_argmin", e, 0, False)
    err("ingot_argmax", a, 2, False)
    for op, t, d in (("max_dim", e, 0), ("max_dim", a, 5), ("min_dim", c, 0),
                     ("min_dim", None, 0)):
        with pytest.raises(IngotError):
            minmax(op, t, d, False)
    err("ingot_norm", e, np.inf, [0], 1, False)
    err("ingot_logsumexp", c, None, 0, False)
    err("ingot_cumsum", a, 2)
    err("ingot_softmax", i, 0)
    err("ingot_log_softmax", c, 0)
    err("ingot_softmax", a, -3)
    err("ingot_sum", None, None, 0, False)
    err("ingot_cumprod", None, 0)
    # max over a non-empty dim of an empty tensor is fine (empty result)
    assert red("amax", e, [1]).shape == (0,)


@pytest.mark.parametrize("dt", ["int16", "float32", "float64", "complex64"])
def test_column_reductions(dt):
    # reductions over leading dims (outputs walk their columns together)
    a = rand((37, 45), dt)
    if dt == "float32":
        a[rng.random(a.shape) < 0.05] = np.nan
    t = tensor(a)
    if dt != "complex64":
        for op, f in (("argmax", np.argmax), ("argmin", np.argmin)):
            close(to_numpy(call("ingot_" + op, t, 0, False)), f(a, 0), "int64", 0)
        close(red("amax", t, [0]), a.max(0), dt, 0)
    want = a.astype(np.int64).sum(0) if dt == "int16" else f64(a).sum(0)
    close(red("sum", t, [0]), want, dt if dt != "int16" else "int64")
    b = rand((6, 5, 40), dt)
    want = b.astype(np.int64).sum((0, 1)) if dt == "int16" else f64(b).sum((0, 1))
    close(red("sum", tensor(b), [0, 1], True), want[None, None],
          dt if dt != "int16" else "int64")
