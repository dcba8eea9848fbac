"""CUDA reductions, scans and softmax against the CPU backend (cuda_diff.diff).

Every op x every dtype the CPU takes; dims subsets, keepdim, strided and transposed
inputs, broadcast (expand), 0-dim, zero-size, NaN/inf/-0, long reductions (2^26
elements for sum/amax/argmax) and the decode softmax shapes (1 and 64 rows of 151936).
Tolerances: cuda_diff.TOL per dtype; sums of many values are compared relative to the
sum of |x| (rtol 1e-5 for f32).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import ml_dtypes
import numpy as np
import pytest
from cuda_diff import OUT_SLOT, check_graph_replays, diff, needs_cuda
from ingot_ctypes import call, strided, tensor, to_numpy, transposed

pytestmark = needs_cuda

ALL = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
       "float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"]
REAL = [d for d in ALL if not d.startswith("complex")]
INEXACT = [d for d in ALL if d.startswith(("float", "bfloat", "complex"))]
FLOATS = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]
NP = {"bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16,
      "int32": np.int32, "int64": np.int64, "float16": np.float16,
      "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64,
      "complex64": np.complex64, "complex128": np.complex128,
      "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
rng = np.random.default_rng(4321)

DIMS_OPS = ["sum", "mean", "prod", "amax", "amin", "logsumexp", "any", "all"]


def rand(shape, dt, special=False):
    d = np.dtype(NP[dt])
    if d == np.bool_:
        return rng.random(shape) < 0.5
    if d.kind in "ui":
        lo, hi = (0, 10) if d.kind == "u" else (-5, 6)
        return rng.integers(lo, hi, shape).astype(d)
    if d.kind == "c":
        a = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    else:
        a = rng.standard_normal(shape)
    if dt.startswith("float8"):
        a = np.clip(a, -4, 4)
    if special and a.size >= 8:
        flat = a.reshape(-1)
        flat[rng.integers(0, a.size, 3)] = [np.nan, np.inf, -np.inf][:3]
        flat[rng.integers(0, a.size, 1)] = -0.0
    return a.astype(d)


def layouts(a):
    """The same values as contiguous, strided (step 2 on the last dim) and transposed."""
    out = [tensor(a), strided(a)]
    if a.ndim >= 2:
        out.append(transposed(a))
    return out


def prod_safe(a, dt):
    """Values whose products stay finite and exact enough: near 1 or small ints."""
    d = np.dtype(NP[dt])
    if d.kind in "fc":
        return (1 + 0.05 * a.astype(np.complex128 if d.kind == "c" else np.float64)).astype(d)
    return a


# ---- the dims-list reductions ----
@pytest.mark.parametrize("op", DIMS_OPS)
@pytest.mark.parametrize("dt", ALL)
def test_dims_ops(op, dt):
    a = rand((5, 6, 7), dt)
    if op == "prod":
        a = prod_safe(a, dt)
    for t in layouts(a):
        for dims in [None, [0], [1], [2], [-1], [0, 2], [0, 1], [1, 2], [0, 1, 2]]:
            for keep in (False, True):
                nd = 0 if dims is None else len(dims)
                diff("ingot_" + op, t, dims, nd, keep)


@pytest.mark.parametrize("op", ["amax", "amin", "sum", "logsumexp", "any", "all", "mean"])
@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32", "float64", "complex64"])
def test_special_values(op, dt):
    a = rand((9, 33), dt, special=True)
    for t in layouts(a):
        for dims in [None, [0], [1]]:
            diff("ingot_" + op, t, dims, 0 if dims is None else 1, False)


@pytest.mark.parametrize("dt", INEXACT)
def test_var_std(dt):
    a = rand((6, 5, 40), dt)
    for t in layouts(a):
        for dims in [None, [0], [2], [0, 2], [1, 2]]:
            nd = 0 if dims is None else len(dims)
            for corr in (0.0, 1.0, 2.5, 300.0):
                diff("ingot_var", t, dims, nd, corr, False)
                diff("ingot_std", t, dims, nd, corr, True)


@pytest.mark.parametrize("dt", INEXACT)
def test_norm(dt):
    a = rand((6, 5, 40), dt, special=False)
    for t in layouts(a):
        for p in (0.0, 1.0, 2.0, 3.0, 0.5, float("inf"), float("-inf")):
            for dims in [None, [0], [2], [0, 2]]:
                nd = 0 if dims is None else len(dims)
                diff("ingot_norm", t, p, dims, nd, False)


@pytest.mark.parametrize("op", ["max_dim", "min_dim"])
@pytest.mark.parametrize("dt", REAL)
def test_max_min_dim(op, dt):
    a = rand((6, 7, 9), dt)
    if dt not in ("bool", "uint8"):
        a[0, 0, :3] = a[0, 0, 5]  # ties: the first index wins
    for t in layouts(a):
        for dim in (0, 1, 2, -1):
            for keep in (False, True):
                diff("ingot_" + op, t, dim, keep, OUT_SLOT)
                diff("ingot_" + op, t, dim, keep, None)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dt", REAL)
def test_arg(op, dt):
    a = rand((6, 7, 9), dt, special=dt in FLOATS and not dt.startswith("float8_e4"))
    if dt in ("float32", "float64"):
        a[1, 2, 3] = np.nan  # first NaN wins
        a[1, 2, 6] = np.nan
    for t in layouts(a):
        for dim in (0, 1, 2, 0x7fff):
            for keep in (False, True):
                diff("ingot_" + op, t, dim, keep)


def test_complex_max_family_errors():
    a = tensor(rand((3, 4), "complex64"))
    diff("ingot_amax", a, [0], 1, False)
    diff("ingot_argmax", a, 0, False)
    diff("ingot_max_dim", a, 0, False, OUT_SLOT)


def test_dtype_errors():
    a = tensor(rand((3, 4), "int32"))
    diff("ingot_mean", a, [0], 1, False)
    diff("ingot_var", a, [0], 1, 1.0, False)
    diff("ingot_norm", a, 2.0, [0], 1, False)
    diff("ingot_softmax", a, 0)
    diff("ingot_logsumexp", tensor(rand((3, 4), "complex64")), [0], 1, False)


@pytest.mark.parametrize("dt", ["float32", "int64", "float16", "complex64"])
def test_zero_size_and_scalar(dt):
    z = tensor(rand((0, 5), dt))
    for op in ["sum", "mean", "prod", "any", "all", "logsumexp"]:
        for dims in [None, [0], [1]]:
            diff("ingot_" + op, z, dims, 0 if dims is None else len(dims), False)
    if dt != "complex64":
        diff("ingot_amax", z, [1], 1, False)  # 0 outputs: fine
        diff("ingot_amax", z, [0], 1, False)  # empty reduction: both raise
        diff("ingot_argmax", z, 1, False)
    if dt in ("float32", "float16", "complex64"):
        diff("ingot_var", z, [0], 1, 1.0, False)
        diff("ingot_norm", z, 2.0, [0], 1, False)
    s = tensor(np.asarray(rand((), dt)))
    for op in ["sum", "mean", "prod", "any", "all"]:
        diff("ingot_" + op, s, None, 0, False)
        diff("ingot_" + op, s, None, 0, True)
    diff("ingot_cumsum", s, 0)
    diff("ingot_cumsum", z, 0)
    diff("ingot_cumprod", z, 1)
    if dt != "complex64":
        diff("ingot_argmax", s, 0x7fff, False)
        diff("ingot_max_dim", s, 0, False, OUT_SLOT)


def test_broadcast_input():
    a = tensor(rand((1, 300), "float32"))
    e = call("ingot_expand", a, 2, [500, 300])
    for op in ["sum", "amax", "mean", "logsumexp"]:
        for dims in [[0], [1], None]:
            diff("ingot_" + op, e, dims, 0 if dims is None else 1, False)
    diff("ingot_argmax", e, 0, False)
    diff("ingot_cumsum", e, 0)
    diff("ingot_softmax", e, 0)
    diff("ingot_softmax", e, 1)


def test_int_wrap():
    a = np.full((1000,), 2**62, dtype=np.int64)
    diff("ingot_sum", tensor(a), None, 0, False)
    diff("ingot_prod", tensor(np.full((70,), 3, dtype=np.int64)), None, 0, False)
    diff("ingot_cumsum", tensor(a), 0)
    diff("ingot_cumprod", tensor(np.full((70,), 3, dtype=np.int32)), 0)


def _rel_sum_check(got, want, absx, rtol):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert np.all(np.abs(got - want) <= rtol * absx + 1e-6), (got, want)


def test_large_sum_amax_argmax():
    n = 1 << 26
    a = (rng.standard_normal(n)).astype(np.float32)
    a[n // 3] = 9.0
    a[2 * n // 3] = 9.0  # tie: the first wins
    t = tensor(a)
    d = call("ingot_to", t, __import__("cuda_diff").CUDA)
    got = to_numpy(call("ingot_sum", d, None, 0, False))
    want = to_numpy(call("ingot_sum", t, None, 0, False))
    _rel_sum_check(got, want, float(np.abs(a.astype(np.float64)).sum()), 1e-5)
    diff("ingot_amax", t, None, 0, False)
    diff("ingot_amin", t, None, 0, False)
    diff("ingot_argmax", t, 0x7fff, False)
    diff("ingot_argmin", t, 0, False)
    a2 = a.reshape(1 << 13, 1 << 13)
    t2 = tensor(a2)
    for dims in [[0], [1]]:
        d2 = call("ingot_to", t2, __import__("cuda_diff").CUDA)
        got = to_numpy(call("ingot_sum", d2, dims, 1, False))
        want = to_numpy(call("ingot_sum", t2, dims, 1, False))
        absx = np.abs(a2.astype(np.float64)).sum(axis=dims[0])
        _rel_sum_check(got, want, absx, 1e-5)
        diff("ingot_argmax", t2, dims[0], False)
        diff("ingot_max_dim", t2, dims[0], True, OUT_SLOT)
    # few outputs, long column reductions (split over gridDim.y)
    a3 = rng.standard_normal((1 << 20, 3)).astype(np.float32)
    for op in ["mean", "amax", "logsumexp"]:
        diff("ingot_" + op, tensor(a3), [0], 1, False)
    diff("ingot_var", tensor(a3), [0], 1, 1.0, False)
    diff("ingot_argmin", tensor(a3), 0, False)
    # long reductions of other dtypes
    for dt in ["int32", "float64", "bfloat16", "bool", "complex64"]:
        b = rand((3 << 20,), dt)
        diff("ingot_sum", tensor(b), None, 0, False, tol=(1e-4, 1e-2))
        diff("ingot_any", tensor(b), None, 0, False)
        if dt != "complex64":
            diff("ingot_argmax", tensor(b), 0, False)
    b = rand((1 << 21,), "float64")
    diff("ingot_var", tensor(b), None, 0, 1.0, False, tol=(1e-9, 1e-12))
    diff("ingot_norm", tensor(b), 2.0, None, 0, False, tol=(1e-9, 1e-12))


# ---- scans ----
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dt", ALL)
def test_scans(op, dt):
    for shape in [(7,), (4, 9), (3, 5, 300), (2, 3000)]:
        a = rand(shape, dt)
        if op == "cumprod":
            a = prod_safe(a, dt)
        for t in layouts(a):
            for dim in range(len(shape)):
                diff("ingot_" + op, t, dim, tol=(5e-2, 1e-2) if dt.startswith("float8") else None)


def test_scan_long_line():
    a = rng.standard_normal(1 << 20).astype(np.float32)
    diff("ingot_cumsum", tensor(a), 0, tol=(1e-4, 1e-3))
    a16 = rng.standard_normal((3, 70000)).astype(np.float16)
    diff("ingot_cumsum", tensor(a16), 1, tol=(1e-2, 0.1))
    ai = rng.integers(-100, 100, (5, 100000)).astype(np.int32)
    diff("ingot_cumsum", tensor(ai), 1)
    diff("ingot_cumsum", tensor(ai), 0)


# ---- softmax ----
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dt", FLOATS)
def test_softmax(op, dt):
    for shape in [(7,), (4, 9), (3, 5, 300), (2, 3000), (3, 4097), (6, 20000)]:
        a = rand(shape, dt)
        for t in layouts(a):
            for dim in range(len(shape)):
                diff("ingot_" + op, t, dim)
    diff("ingot_" + op, tensor(np.asarray(rand((), dt))), 0)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_special(op):
    a = (rng.standard_normal((8, 5000)) * 10).astype(np.float32)
    a[0, 7] = np.nan
    a[1, :] = -np.inf
    a[2, 11] = np.inf
    a[3, :100] = -np.inf
    a[4, 3] = -0.0
    a[5, :] = 0.0
    for t in layouts(a):
        diff("ingot_" + op, t, 1)
        diff("ingot_" + op, t, 0)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("rows", [1, 64])
def test_softmax_vocab(op, rows):
    a = (rng.standard_normal((rows, 151936)) * 10).astype(np.float32)
    diff("ingot_" + op, tensor(a), 1)
    diff("ingot_" + op, tensor(a.astype(ml_dtypes.bfloat16)), -1)
    diff("ingot_argmax", tensor(a), 1, False)
    # an odd vocabulary (rows not 16-byte aligned) and an offset view
    b = (rng.standard_normal((rows, 151937)) * 10).astype(np.float32)
    diff("ingot_" + op, tensor(b), 1)
    v = call("ingot_narrow", tensor(b), 1, 1, 151936)
    diff("ingot_" + op, v, 1)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dt", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("rows", [1, 64])
def test_softmax_vocab_special(op, dt, rows):
    """The decode shapes (single-launch sliced path) with NaN, +-inf, all -inf, all equal and
    -inf-prefixed rows and spikes at a slice boundary, at 151936 and an odd 151937 (unaligned
    rows: scalar heads and tails), and a slice of a wider row (offset view, aligned rows)."""
    for V in [151936, 151937]:
        a = (rng.standard_normal((rows, V)) * 10).astype(np.float32)
        a[0, V // 3] = np.nan if rows == 1 else a[0, V // 3]
        if rows > 1:
            a[1, 5] = np.nan
            a[2, :] = -np.inf
            a[3, V - 1] = np.inf
            a[4, : V // 2] = -np.inf
            a[5, :] = 0.0
            a[6, 9495:9497] = 1e30  # around a slice boundary
        diff("ingot_" + op, tensor(a.astype(NP[dt])), 1)
    w = (rng.standard_normal((rows, 151936 + 8)) * 10).astype(NP[dt])
    diff("ingot_" + op, call("ingot_narrow", tensor(w), 1, 8, 151936), 1)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dt", ["float32", "bfloat16", "float16"])
def test_softmax_long_rows(op, dt):
    """Few long rows (the single-launch cooperative path): 3 rows of an odd length, a NaN
    in one row and a -inf prefix in another, plus an offset (misaligned) view."""
    a = (rng.standard_normal((3, 1000003)) * 4).astype(np.float32)
    a[1, 777777] = np.nan
    a[2, :300000] = -np.inf
    diff("ingot_" + op, tensor(a.astype(NP[dt])), 1)
    v = call("ingot_narrow", tensor(a.astype(NP[dt])), 1, 3, 999999)
    diff("ingot_" + op, v, -1)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dt", ["float32", "bfloat16", "float16"])
def test_softmax_cluster_rows(op, dt):
    """The row-cluster path (rows of 16384 up to 163840 f32 / 196608 16-bit elements, 8
    slices a row of a multiple of 16 bytes): its bounds and one past them (other paths), odd
    lengths (unaligned rows: element loads), rows of a wider tensor (row stride > length,
    aligned and unaligned starts), spikes on both sides of a slice boundary, NaN / +inf in
    the last slice, all -inf and all-equal rows."""
    cap = 163840 if dt == "float32" else 196608
    n = 4 if dt == "float32" else 8  # elements per 16 bytes
    for V in [16383, 16384, 16385, 65537, 151936, cap - 1, cap, cap + 1]:
        per_block = -(-V // 8)
        chunk = -(-per_block // n) * n  # the slice length: a multiple of 16 bytes
        a = (rng.standard_normal((6, V)) * 4).astype(np.float32)
        a[0, chunk - 1] = 30.0  # the largest value, last of slice 0
        a[0, chunk] = 29.0  # and the next one, first of slice 1
        a[1, V - 1] = np.nan
        a[2, V - 2] = np.inf
        a[3, :] = -np.inf
        a[4, :] = 1.5
        diff("ingot_" + op, tensor(a.astype(NP[dt])), 1)
    w = (rng.standard_normal((5, 151936 + 24)) * 4).astype(NP[dt])
    for start in (0, 3, 16):
        diff("ingot_" + op, call("ingot_narrow", tensor(w), 1, start, 151936), -1)
    for shape in [(140, 16384), (140, 65536)]:  # many rows: cluster only for long ones
        diff("ingot_" + op, tensor((rng.standard_normal(shape) * 4).astype(NP[dt])), 1)
    one = (rng.standard_normal((1, 100000)) * 4).astype(NP[dt])
    diff("ingot_" + op, tensor(one), 1)
    diff("ingot_" + op, tensor(one[0]), 0)


@pytest.mark.parametrize("rows", [1, 64])
def test_softmax_vocab_graph(rows):
    """The vocabulary softmax captured in a graph and replayed on new inputs."""
    check_graph_replays(lambda x: call("ingot_softmax", x, -1), (rows, 151936), np.float32, rng)


# ----------------------------------------------------- > 2^31 elements ----

def test_reductions_over_2_31_elements():
    """sum/amax/argmax/max_dim over 2^31 + 131079 uint8 elements: 64-bit
    indexing in the reduction kernels (results checked exactly)."""
    import gc

    from cuda_diff import CUDA
    from ingot_ctypes import ID, out_ptr, take
    n = (1 << 31) + 131072 + 7
    ones = call("ingot_full", 1, [n], 1.0, ID["uint8"], CUDA)
    total = call("ingot_sum", ones, None, 0, False)
    assert to_numpy(total).item() == n  # int64 result
    # one 9 just past 2^31: amax finds it, argmax points at it
    hit = (1 << 31) + 3
    call("ingot_copy_", call("ingot_slice", ones, 0, hit, hit + 1, 1),
         call("ingot_full", 0, [], 9.0, ID["uint8"], CUDA))
    assert to_numpy(call("ingot_amax", ones, None, 0, False)).item() == 9
    assert to_numpy(call("ingot_argmax", ones, 0x7fff, False)).item() == hit
    # rows of 2^16 elements, the last ones starting past 2^31
    rows = n // 65536
    v = call("ingot_reshape", call("ingot_slice", ones, 0, 0, rows * 65536, 1), 2, [rows, 65536])
    slot = out_ptr()
    vals = call("ingot_max_dim", v, 1, False, slot)
    idx = to_numpy(take(slot))
    r = hit // 65536
    assert to_numpy(vals)[r] == 9 and idx[r] == hit % 65536
    assert (to_numpy(vals)[:r] == 1).all()
    del ones, total, v, vals
    gc.collect()
