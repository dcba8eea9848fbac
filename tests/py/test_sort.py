"""sort / argsort / topk against numpy's stable argsort. Results are exact
(values are copies of the input's elements), compared bit for bit.

PyTorch semantics (numpy differs or has no such op): sorts are stable in
both directions, NaN is the largest value (last ascending, first
descending), -0.0 and 0.0 are equal (keep their order); topk breaks ties
toward the lower index and returns the results ordered; complex is an
error."""
import ml_dtypes
import numpy as np
import pytest
from ingot_ctypes import IngotError, call, out_ptr, strided, take, tensor, to_numpy, transposed

rng = np.random.default_rng(99)

REAL = {"bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16,
        "int32": np.int32, "int64": np.int64, "float16": np.float16,
        "bfloat16": ml_dtypes.bfloat16, "float32": np.float32, "float64": np.float64,
        "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


def is_float(x):
    return x.dtype.kind == "f" or x.dtype in (np.dtype(ml_dtypes.bfloat16),
                                              np.dtype(ml_dtypes.float8_e4m3fn),
                                              np.dtype(ml_dtypes.float8_e5m2))


def ref_argsort(x, axis, desc):
    """Stable argsort with NaN largest, as torch.sort(stable=True)."""
    if x.ndim == 0:
        return np.zeros((), np.int64)
    if is_float(x):
        xf = x.astype(np.float64)
        if not desc:
            return np.argsort(xf, axis=axis, kind="stable")
        nan = np.isnan(xf)
        prim, sec = np.moveaxis(~nan, axis, -1), np.moveaxis(np.where(nan, 0, -xf), axis, -1)
        return np.moveaxis(np.lexsort((sec, prim), axis=-1), -1, axis)
    xi = x.astype(np.int64)
    return np.argsort(~xi if desc else xi, axis=axis, kind="stable")


def rand(shape, dt, special=False):
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
    x = np.round(rng.standard_normal(shape) * 4) / 2  # many ties
    if special:
        sp = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, np.nan, 1e-40])
        m = rng.random(shape) < 0.3
        x = np.where(m, sp[rng.integers(0, len(sp), size=shape)], x)
    return x.astype(REAL[dt])


def bits(a):
    return a.view(np.uint8) if a.dtype.itemsize == 1 else a.view(f"u{a.dtype.itemsize}")


def same(got, want):
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(bits(got), bits(want))


def run_sort(t, dim, desc):
    slot = out_ptr()
    v = call("ingot_sort", t, dim, desc, slot)
    return to_numpy(v), to_numpy(take(slot))


def run_topk(t, k, dim, largest, sorted_=True):
    slot = out_ptr()
    v = call("ingot_topk", t, k, dim, largest, sorted_, slot)
    return to_numpy(v), to_numpy(take(slot))


def check_sort(x, t, dim, desc):
    v, i = run_sort(t, dim, desc)
    want = ref_argsort(x, dim, desc)
    same(i, want.astype(np.int64))
    same(v, np.take_along_axis(x, want, axis=dim) if x.ndim else x)
    a = to_numpy(call("ingot_argsort", t, dim, desc))
    same(a, want.astype(np.int64))


def check_topk(x, t, k, dim, largest):
    v, i = run_topk(t, k, dim, largest)
    want = np.take(ref_argsort(x, dim, largest), np.arange(k), axis=dim)
    same(i, want.astype(np.int64))
    same(v, np.take_along_axis(x, want, axis=dim))


@pytest.mark.parametrize("dt", list(REAL))
@pytest.mark.parametrize("desc", [False, True])
def test_sort_dtypes(dt, desc):
    for special in (False, True):
        x = rand((5, 33, 7), dt, special)
        for dim in (0, 1, 2, -1, -2):
            check_sort(x, tensor(x), dim, desc)


@pytest.mark.parametrize("mk", [strided, transposed])
@pytest.mark.parametrize("dt", ["float32", "bfloat16", "int64", "bool"])
def test_sort_layouts(mk, dt):
    x = rand((40, 50), dt, True)
    for dim in (0, 1):
        for desc in (False, True):
            check_sort(x, mk(x), dim, desc)


def test_sort_special_values():
    x = np.array([3.0, np.nan, -0.0, 0.0, -np.inf, np.inf, np.nan, -0.0, 1.0, 5e-324, -5e-324],
                 np.float64)
    check_sort(x, tensor(x), 0, False)
    check_sort(x, tensor(x), 0, True)
    v, i = run_sort(tensor(x), 0, False)
    assert list(i) == [4, 10, 2, 3, 7, 9, 8, 0, 5, 1, 6]
    v, i = run_sort(tensor(x), 0, True)
    assert list(i) == [1, 6, 5, 0, 8, 9, 2, 3, 7, 10, 4]


def test_sort_large_rows_and_edges():
    x = rng.standard_normal((2, 70001)).astype(np.float32)
    x[0, ::7] = x[0, 3]  # duplicates
    for desc in (False, True):
        check_sort(x, tensor(x), -1, desc)
    y = rng.integers(-50, 50, size=(300, 400)).astype(np.int32)  # many rows, threaded
    check_sort(y, transposed(y), 0, True)
    check_sort(y, tensor(y), 1, False)
    # radix path (rows >= 128) with full-range keys, both directions
    for dt in ("int64", "int8", "uint8", "float64", "float16", "float8_e5m2", "bool"):
        r = rand((3, 500), dt, True)
        for desc in (False, True):
            check_sort(r, tensor(r), 1, desc)
            check_sort(r, transposed(r), 1, desc)
    # zero-size, size-1 dims, 0-dim
    z = np.zeros((3, 0), np.float32)
    check_sort(z, tensor(z), 1, False)
    check_sort(z, tensor(z), 0, True)
    o = rng.standard_normal((4, 1)).astype(np.float16)
    check_sort(o, tensor(o), 1, True)
    v, i = run_sort(tensor(np.float32(2.5)), 0, False)
    same(v, np.array(2.5, np.float32))
    same(i, np.array(0, np.int64))
    # indices output optional
    v = to_numpy(call("ingot_sort", tensor(x[1]), 0, False, None))
    same(v, np.sort(x[1]))


def test_sort_errors():
    c = tensor(np.zeros(3, np.complex64))
    with pytest.raises(IngotError):
        call("ingot_sort", c, 0, False, None)
    with pytest.raises(IngotError):
        call("ingot_argsort", c, 0, False)
    with pytest.raises(IngotError):
        call("ingot_sort", tensor(np.zeros((2, 3))), 2, False, None)
    with pytest.raises(IngotError):
        call("ingot_argsort", tensor(np.zeros((2, 3))), -3, False)


@pytest.mark.parametrize("dt", list(REAL))
@pytest.mark.parametrize("largest", [True, False])
def test_topk_dtypes(dt, largest):
    x = rand((6, 40, 5), dt, True)
    for dim, k in ((1, 3), (1, 40), (1, 0), (0, 2), (-1, 5), (2, 1), (1, 20)):
        check_topk(x, tensor(x), k, dim, largest)


@pytest.mark.parametrize("mk", [strided, transposed])
def test_topk_layouts(mk):
    x = rand((64, 300), "float32", True)
    for largest in (True, False):
        check_topk(x, mk(x), 7, 1, largest)
        check_topk(x, mk(x), 30, 0, largest)


def test_topk_vocab():
    # decode sampling shape: k=8 over a 151936-long vocabulary row
    x = rng.standard_normal((3, 151936)).astype(ml_dtypes.bfloat16)  # bf16: many ties
    for largest in (True, False):
        check_topk(x, tensor(x), 8, -1, largest)
    x32 = rng.standard_normal((1, 151936)).astype(np.float32)
    x32[0, 1000] = np.nan
    check_topk(x32, tensor(x32), 8, 1, True)
    check_topk(x32, tensor(x32), 50, 1, False)
    # sorted=False still gives the right set (ours is ordered)
    v, i = run_topk(tensor(x32), 8, 1, True, False)
    assert set(i[0]) == set(ref_argsort(x32, 1, True)[0, :8])


def test_topk_edges_and_errors():
    v, i = run_topk(tensor(np.int32(7)), 1, 0, True)
    same(v, np.array(7, np.int32))
    same(i, np.array(0, np.int64))
    z = np.zeros((0, 5), np.float32)
    v, i = run_topk(tensor(z), 2, 1, True)
    assert v.shape == (0, 2) and i.shape == (0, 2)
    x = tensor(np.arange(10, dtype=np.float32))
    for k in (-1, 11):
        with pytest.raises(IngotError):
            call("ingot_topk", x, k, 0, True, True, None)
    with pytest.raises(IngotError):
        call("ingot_topk", tensor(np.zeros(3, np.complex128)), 1, 0, True, True, None)
    with pytest.raises(IngotError):
        call("ingot_topk", x, 1, 1, True, True, None)
    # values-only call
    v = to_numpy(call("ingot_topk", x, 3, 0, True, True, None))
    same(v, np.array([9, 8, 7], np.float32))
