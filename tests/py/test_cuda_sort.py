"""CUDA sort / argsort / topk against the CPU backend on the same inputs.

Sorted values are copies of input elements and the indices are exact, so
results are compared bit for bit (NaN payloads and -0.0 included), not with
a tolerance. Covers every real dtype, dims (non-last, negative), both
directions, stability (many ties), NaN/±inf/-0.0, strided / transposed /
broadcast inputs, zero-size and 0-dim tensors, long rows (the topk decode
shapes) and the k / complex error cases."""
import ml_dtypes
import numpy as np
import pytest

from cuda_diff import CUDA, OUT_SLOT, check_graph_replays, diff, needs_cuda, to_device
from ingot_ctypes import (IngotError, call, out_ptr, strided, take, tensor, to_numpy,
                          transposed)

pytestmark = needs_cuda

REAL = {"bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16,
        "int32": np.int32, "int64": np.int64, "float16": np.float16,
        "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64,
        "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}

rng = np.random.default_rng(2024)


def rand(shape, dt, special=False, spread=4.0):
    if dt == "bool":
        return rng.random(shape) > 0.5
    if dt in ("uint8", "int8", "int16", "int32", "int64"):
        info = np.iinfo(REAL[dt])
        lo, hi = (max(info.min, -1000), min(info.max, 1000)) if not special else (info.min,
                                                                                  info.max)
        x = rng.integers(lo, hi, size=shape, endpoint=True, dtype=np.int64).astype(REAL[dt])
        if special and x.size:
            x.flat[0], x.flat[-1] = info.max, info.min
        return x
    x = np.round(rng.standard_normal(shape) * spread) / 2  # many ties
    if special:
        sp = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan, 1e-40, -np.nan])
        m = rng.random(shape) < 0.3
        x = np.where(m, sp[rng.integers(0, len(sp), size=shape)], x)
    return x.astype(REAL[dt])


def bits(a):
    return a.view(np.uint8) if a.dtype.itemsize == 1 else a.view(f"u{a.dtype.itemsize}")


def same(got, want, what):
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    np.testing.assert_array_equal(bits(got), bits(want), err_msg=what)


def dev(t):
    return to_device(t, CUDA)


def check_sort(t, dim, desc):
    """sort (values and indices) and argsort, CPU vs CUDA, bit for bit."""
    d = dev(t)
    for name, src in (("cpu", t), ("cuda", d)):
        slot = out_ptr()
        v = call("ingot_sort", src, dim, desc, slot)
        res = (to_numpy(v), to_numpy(take(slot)), to_numpy(call("ingot_argsort", src, dim, desc)))
        if name == "cpu":
            want = res
        else:
            got = res
    what = f"sort dim={dim} desc={desc}"
    same(got[0], want[0], what + " values")
    same(got[1], want[1], what + " indices")
    same(got[2], want[2], what + " argsort")
    return want


def check_topk(t, k, dim, largest, sorted_=True):
    d = dev(t)
    outs = []
    for src in (t, d):
        slot = out_ptr()
        v = call("ingot_topk", src, k, dim, largest, sorted_, slot)
        outs.append((to_numpy(v), to_numpy(take(slot))))
    what = f"topk k={k} dim={dim} largest={largest}"
    same(outs[1][0], outs[0][0], what + " values")
    same(outs[1][1], outs[0][1], what + " indices")
    return outs[0]


# ---- sort / argsort ----

@pytest.mark.parametrize("dt", list(REAL))
@pytest.mark.parametrize("desc", [False, True])
def test_sort_dtypes_dims(dt, desc):
    for special in (False, True):
        x = rand((5, 33, 7), dt, special)
        for dim in (0, 1, 2, -1, -2, -3):
            check_sort(tensor(x), dim, desc)


@pytest.mark.parametrize("dt", ["float32", "bfloat16", "float64", "int64", "int8", "bool"])
def test_sort_layouts(dt):
    x = rand((40, 50), dt, True)
    for mk in (strided, transposed):
        for dim in (0, 1, -1):
            for desc in (False, True):
                check_sort(mk(x), dim, desc)
    # broadcast (stride 0): every row equal, all ties along dim 0
    row = tensor(rand((1, 37), dt, True))
    e = call("ingot_expand", row, 2, [6, 37])
    for dim in (0, 1):
        for desc in (False, True):
            check_sort(e, dim, desc)


def test_sort_special_values():
    x = np.array([3.0, np.nan, -0.0, 0.0, -np.inf, np.inf, np.nan, -0.0, 1.0, 5e-324, -5e-324],
                 np.float64)
    for dt in ("float64", "float32", "float16", "bfloat16", "float8_e5m2", "float8_e4m3fn"):
        for desc in (False, True):
            v, i, _ = check_sort(tensor(x.astype(REAL[dt])), 0, desc)
    v, i, _ = check_sort(tensor(x), 0, False)
    assert list(i) == [4, 10, 2, 3, 7, 9, 8, 0, 5, 1, 6]
    v, i, _ = check_sort(tensor(x), 0, True)
    assert list(i) == [1, 6, 5, 0, 8, 9, 2, 3, 7, 10, 4]


def test_sort_stability_many_ties():
    for dt in ("float32", "float64", "int32", "int64", "uint8", "float16", "bool"):
        x = rng.integers(0, 3, size=(64, 3001)).astype(REAL[dt])
        for desc in (False, True):
            check_sort(tensor(x), -1, desc)
            check_sort(tensor(x), 0, desc)
    z = np.zeros((3, 5000), np.float32)
    z[:, ::2] = -0.0
    for desc in (False, True):
        _, i, _ = check_sort(tensor(z), 1, desc)
        assert np.array_equal(i, np.broadcast_to(np.arange(5000), (3, 5000)))


def test_sort_edges():
    for shape, dims in (((3, 0), (0, 1)), ((0, 4), (0, 1)), ((0,), (0,)), ((4, 1), (0, 1)),
                        ((1,), (0,)), ((1, 1, 1), (0, 1, 2))):
        x = rand(shape, "float32", True)
        for dim in dims:
            for desc in (False, True):
                check_sort(tensor(x), dim, desc)
    for dt in ("float32", "int64", "bool", "float16"):
        s = tensor(np.array(rand((), dt, True)))  # 0-dim: one row of one element
        for dim in (0, -1):
            check_sort(s, dim, False)
    # odd sizes
    for n in (2, 3, 31, 33, 127, 129, 255, 257, 1023, 1025, 4097):
        check_sort(tensor(rand((3, n), "float32", True)), 1, n % 2 == 0)


@pytest.mark.parametrize("dt", ["float32", "float64", "bfloat16", "int64", "int16", "uint8"])
def test_sort_large_rows(dt):
    for shape in ((151936,), (1 << 20,), (2, 151936)):
        x = rand(shape, dt, True, spread=1000.0)
        for desc in (False, True):
            check_sort(tensor(x), -1, desc)


def test_sort_many_rows():
    # many short rows: the row goes into the radix key; 64-bit dtypes sort twice
    for dt in ("float64", "int64", "float32", "int8"):
        x = rand((3000, 37), dt, True)
        for desc in (False, True):
            check_sort(tensor(x), 1, desc)
            check_sort(transposed(x), 0, desc)
    x = rand((64, 151936), "float32", True, spread=1000.0)
    check_sort(tensor(x), 1, True)


def test_sort_complex_errors():
    c = tensor(np.array([1 + 2j, 3 - 1j], np.complex64))
    diff("ingot_sort", c, 0, False, OUT_SLOT)
    diff("ingot_argsort", c, 0, True)
    diff("ingot_topk", c, 1, 0, True, True, OUT_SLOT)
    diff("ingot_sort", tensor(np.zeros(3, np.float32)), 1, False, OUT_SLOT)  # bad dim


# ---- topk ----

@pytest.mark.parametrize("dt", list(REAL))
@pytest.mark.parametrize("largest", [True, False])
def test_topk_dtypes_dims(dt, largest):
    for special in (False, True):
        x = rand((5, 33, 7), dt, special)
        for dim in (0, 1, 2, -1, -2):
            n = x.shape[dim]
            for k in sorted({0, 1, min(8, n), n}):
                check_topk(tensor(x), k, dim, largest)


@pytest.mark.parametrize("dt", ["float32", "float64", "bfloat16", "float16", "int64", "int32",
                                "uint8", "int8", "bool", "float8_e4m3fn"])
def test_topk_long_rows(dt):
    # the decode shapes, every k bucket (8/16/32/64) and the sort fallback (k > 64)
    x = rand((151936,), dt, True, spread=1000.0)
    for k in (1, 8, 9, 16, 33, 64, 65, 200):
        for largest in (True, False):
            check_topk(tensor(x), k, 0, largest)
    y = rand((64, 151936), dt, False, spread=1000.0)
    check_topk(tensor(y), 8, -1, True)
    check_topk(tensor(y), 8, -1, False)


def test_topk_decode_float32():
    x = rng.standard_normal((64, 151936)).astype(np.float32)
    for rows in (1, 3, 64):
        for k in (1, 8, 50, 64):
            check_topk(tensor(x[:rows]), k, -1, True)
    big = rng.standard_normal((1 << 20,)).astype(np.float32)
    for k in (8, 64, 1 << 20):
        check_topk(tensor(big), k, 0, True)
        check_topk(tensor(big), k, 0, False)


def test_topk_ties_and_specials():
    # all equal: ties go to the lower position, in order
    z = np.zeros((3, 151936), np.float32)
    z[1, 1::2] = -0.0
    for largest in (True, False):
        v, i = check_topk(tensor(z), 8, 1, largest)
        assert np.array_equal(i, np.broadcast_to(np.arange(8), (3, 8)))
    # NaN is the largest, ±inf next
    x = rng.standard_normal(151936).astype(np.float32)
    x[[5, 70000, 151935]] = np.nan
    x[[6, 100]] = np.inf
    x[[7, 101]] = -np.inf
    v, i = check_topk(tensor(x), 8, 0, True)
    assert list(i[:5]) == [5, 70000, 151935, 6, 100]
    v, i = check_topk(tensor(x), 8, 0, False)
    assert list(i[:2]) == [7, 101]
    # few distinct values over many rows and parts
    y = rng.integers(0, 4, size=(64, 151936)).astype(np.float16)
    for largest in (True, False):
        check_topk(tensor(y), 64, 1, largest)
        check_topk(tensor(y), 8, 0, largest)


@pytest.mark.parametrize("dt", ["float32", "bfloat16", "float16"])
def test_topk_vocab_rows(dt):
    """Vocabulary-wide rows (16384 to 196608 elements; a row-cluster kernel once served
    them and measured slower than the block-split path, so it went): odd lengths
    (unaligned rows), k 1..9, both directions, the best values in one part of the row or
    spread over it, ties far apart (lower index first), more NaN than k, +-inf, -0.0 / 0.0,
    and rows of a wider tensor (row stride > length)."""
    cap = 163840 if dt == "float32" else 196608
    for V in [16383, 16384, 16385, 100001, 151936, cap, cap + 1]:
        x = rng.standard_normal((5, V)).astype(np.float32)
        x[0, 100:110] = 50.0 + np.arange(10)  # all in slice 0
        x[1, ::V // 9] = 7.0  # ties spread over every slice
        x[1, 5::V // 9] = -7.0
        x[2, rng.integers(0, V, 12)] = np.nan
        x[2, [3, V - 1]] = np.inf
        x[2, [4, V - 2]] = -np.inf
        x[3, :] = 0.0
        x[3, 1::2] = -0.0
        x[4, V - 9:] = [9, 8, 7, 6, 5, -5, -6, -7, -8]  # the best in the last slice
        t = tensor(x.astype(REAL[dt]))
        for k in range(1, 10) if V in (16384, 151936) else (1, 8, 9):
            for largest in (True, False):
                check_topk(t, k, 1, largest)
    w = rng.standard_normal((3, 151936 + 24)).astype(REAL[dt])
    for start in (0, 3, 16):
        v = call("ingot_narrow", tensor(w), 1, start, 151936)
        for largest in (True, False):
            check_topk(v, 8, -1, largest)
    check_topk(tensor(rng.standard_normal(151936).astype(REAL[dt])), 8, 0, True)
    for shape in [(140, 16384), (140, 65536)]:  # many rows: cluster only for long ones
        check_topk(tensor(rng.standard_normal(shape).astype(REAL[dt])), 8, 1, True)


@pytest.mark.parametrize("rows", [1, 64])
def test_topk_vocab_graph(rows):
    """The vocabulary top-8 captured in a graph and replayed on new inputs."""

    def topk(x):
        slot = out_ptr()
        v = call("ingot_topk", x, 8, -1, True, True, slot)
        return v, take(slot)

    check_graph_replays(topk, (rows, 151936), np.float32, rng)


def test_topk_layouts_and_edges():
    x = rand((40, 3000), "float32", True)
    for mk in (strided, transposed):
        for dim, k in ((0, 8), (1, 8), (1, 64), (0, 40), (-1, 100)):
            for largest in (True, False):
                check_topk(mk(x), k, dim, largest)
    e = call("ingot_expand", tensor(rand((1, 3000), "bfloat16", True)), 2, [7, 3000])
    for dim, k in ((0, 7), (1, 8), (1, 3000)):
        check_topk(e, k, dim, True)
    # many short rows: one block a row, no merge kernel
    for dt in ("float32", "float64", "int16"):
        y = rand((5000, 20), dt, True)
        check_topk(tensor(y), 5, 1, True)
        check_topk(tensor(y), 20, 1, False)
    # zero-size and 0-dim
    check_topk(tensor(np.zeros((3, 0), np.float32)), 0, 1, True)
    check_topk(tensor(np.zeros((0, 5), np.float32)), 2, 1, True)
    check_topk(tensor(np.zeros((4, 5), np.float32)), 0, 1, True)
    s = tensor(np.array(np.float32(np.nan)))
    check_topk(s, 1, 0, True)
    # k = 0 of a 0-dim tensor: both devices must agree (the CPU refuses it)
    diff("ingot_topk", s, 0, -1, False, True, OUT_SLOT)


def test_topk_k_errors():
    x = tensor(rng.standard_normal((4, 10)).astype(np.float32))
    diff("ingot_topk", x, -1, 1, True, True, OUT_SLOT)
    diff("ingot_topk", x, 11, 1, True, True, OUT_SLOT)
    diff("ingot_topk", x, 5, 1, True, True, OUT_SLOT)  # k = 5 > size 4 of dim 0 is fine on dim 1
    diff("ingot_topk", x, 5, 0, True, True, OUT_SLOT)
    diff("ingot_topk", x, 1, 2, True, True, OUT_SLOT)
    diff("ingot_topk", tensor(np.array(np.float32(1))), 2, 0, True, True, OUT_SLOT)
    with pytest.raises(IngotError):
        call("ingot_topk", dev(x), 11, 1, True, True, out_ptr())
