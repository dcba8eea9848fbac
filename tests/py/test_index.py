"""Indexing ops against numpy: index_select (np.take), gather
(np.take_along_axis), scatter / scatter_add (np.put_along_axis / np.add.at),
index_put (advanced-index assignment, np.add.at), masked_fill, masked_select,
nonzero and embedding. Results are exact (pure data movement; accumulation in
the tensor's dtype in index order), so they compare bit for bit except
float adds (f32 1e-6, f16 1e-3 relative).

PyTorch semantics where numpy differs: negative indices are errors for
index_select / gather / scatter / embedding (numpy wraps them); index_put
accepts them (advanced indexing)."""

import ml_dtypes
import numpy as np
import pytest
from ingot_ctypes import NAMES, IngotError, call, strided, tensor, to_numpy, transposed
from refs import NP

rng = np.random.default_rng(1234)
ERR_SHAPE, ERR_DTYPE, ERR_INDEX = 2, 3, 5  # ingot_status values

DT_ALL = NAMES


def rand(shape, dt):
    x = rng.integers(-8, 9, size=shape)
    if dt == "bool":
        return (x > 0)
    if dt == "uint8":
        return (x + 8).astype(np.uint8)
    if dt.startswith("complex"):
        return (x + 1j * rng.integers(-8, 9, size=shape)).astype(NP[dt])
    if dt.startswith("float") or dt == "bfloat16":
        return (x / 4.0).astype(NP[dt])
    return x.astype(NP[dt])


def same(got, want):
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    g = got.view(np.uint8) if got.dtype.itemsize == 1 else got
    w = want.view(np.uint8) if want.dtype.itemsize == 1 else want
    np.testing.assert_array_equal(g, w)


def err(name, *args):
    with pytest.raises(IngotError) as e:
        call(name, *args)
    return e.value


# ---- index_select ----
@pytest.mark.parametrize("dt", DT_ALL)
def test_index_select_dtypes(dt):
    a = rand((5, 7, 3), dt)
    idx = np.array([4, 0, 0, 2, 6], dtype=np.int64)
    for dim in (0, 1, -1, 2):
        i = idx[idx < a.shape[dim]]
        got = to_numpy(call("ingot_index_select", tensor(a), dim, tensor(i)))
        same(got, np.take(a, i, axis=dim))


@pytest.mark.parametrize("idt", [np.int64, np.int32])
@pytest.mark.parametrize("mk", [tensor, strided, transposed])
def test_index_select_layouts(idt, mk):
    a = rng.standard_normal((33, 17)).astype(np.float32)
    idx = rng.integers(0, 17, size=40).astype(idt)
    for dim in (0, 1):
        i = idx % a.shape[dim]
        got = to_numpy(call("ingot_index_select", mk(a), dim, strided(i)))
        same(got, np.take(a, i, axis=dim))


def test_index_select_edge():
    a = rng.standard_normal((4, 5)).astype(np.float64)
    # empty index, 0-dim index, zero-size tensor
    same(to_numpy(call("ingot_index_select", tensor(a), 1, tensor(np.zeros(0, np.int64)))),
         a[:, :0])
    # a 0-dim index keeps the dim, as in PyTorch
    same(to_numpy(call("ingot_index_select", tensor(a), 0, tensor(np.array(3)))), a[3:4])
    z = np.zeros((0, 3), np.float32)
    same(to_numpy(call("ingot_index_select", tensor(z), 1, tensor(np.array([2, 0])))), z[:, [2, 0]])
    s = np.array(2.5, np.float32)
    same(to_numpy(call("ingot_index_select", tensor(s), 0, tensor(np.array([0])))), s)
    # large: > 65536 elements, threaded
    big = rng.standard_normal((300, 500)).astype(np.float32)
    i = rng.integers(0, 300, size=400)
    same(to_numpy(call("ingot_index_select", transposed(big), 0, tensor(i))), big[i])


def test_index_select_errors():
    a = tensor(np.zeros((3, 4), np.float32))
    e = err("ingot_index_select", a, 0, tensor(np.array([0, 3])))
    assert "out of range" in str(e) and e.status == ERR_INDEX
    err("ingot_index_select", a, 0, tensor(np.array([-1])))
    assert err("ingot_index_select", a, 0, tensor(np.array([0.0]))).status == ERR_DTYPE
    err("ingot_index_select", a, 0, tensor(np.zeros((1, 1), np.int64)))  # not a vector
    err("ingot_index_select", a, 2, tensor(np.array([0])))  # bad dim


# ---- gather ----
@pytest.mark.parametrize("dt", DT_ALL)
def test_gather_dtypes(dt):
    a = rand((4, 6, 5), dt)
    for dim in (0, 1, 2, -1):
        shape = [3, 4, 2]
        shape[dim] = 9
        idx = rng.integers(0, a.shape[dim], size=shape)
        sl = tuple(slice(0, s) if d != dim % 3 else slice(None) for d, s in enumerate(shape))
        got = to_numpy(call("ingot_gather", tensor(a), dim, tensor(idx)))
        same(got, np.take_along_axis(a[sl], idx, axis=dim))


@pytest.mark.parametrize("mk", [tensor, strided, transposed])
def test_gather_layouts(mk):
    a = rng.standard_normal((20, 30)).astype(np.float32)
    idx = rng.integers(0, 20, size=(7, 30)).astype(np.int32)
    got = to_numpy(call("ingot_gather", mk(a), 0, transposed(idx)))
    same(got, np.take_along_axis(a, idx.astype(np.int64), axis=0))
    big = rng.standard_normal((70, 2000)).astype(np.float32)
    bidx = rng.integers(0, 2000, size=(70, 1500))
    same(to_numpy(call("ingot_gather", mk(big), 1, tensor(bidx))),
         np.take_along_axis(big, bidx, axis=1))


def test_gather_edge_and_errors():
    a = rng.standard_normal((3, 4)).astype(np.float32)
    same(to_numpy(call("ingot_gather", tensor(a), 1, tensor(np.zeros((3, 0), np.int64)))),
         np.zeros((3, 0), np.float32))
    err("ingot_gather", tensor(a), 1, tensor(np.array([[4]])))
    err("ingot_gather", tensor(a), 1, tensor(np.array([[-1]])))
    err("ingot_gather", tensor(a), 1, tensor(np.array([1])))  # ndim mismatch
    err("ingot_gather", tensor(a), 1, tensor(np.zeros((4, 1), np.int64)))  # too big at dim 0
    err("ingot_gather", tensor(a), 1, tensor(np.zeros((3, 1), np.float32)))


# ---- scatter / scatter_add ----
def np_scatter(t, dim, idx, src, add):
    out = t.copy()
    sl = tuple(slice(0, s) for s in idx.shape)
    srcv = src[sl]
    dim = dim % t.ndim
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[dim] = idx[pos]
        if add:
            out[tuple(tgt)] = out[tuple(tgt)] + srcv[pos]
        else:
            out[tuple(tgt)] = srcv[pos]
    return out


@pytest.mark.parametrize("dt", DT_ALL)
def test_scatter_dtypes(dt):
    t = rand((5, 4, 3), dt)
    src = rand((6, 5, 4), dt)
    for dim in (0, 1, -1):
        shape = [4, 3, 2]
        n = t.shape[dim]
        # unique indices along dim for scatter (duplicates are unordered)
        idx = np.stack([rng.permutation(n)[:shape[dim % 3]] for _ in range(
            int(np.prod(shape)) // shape[dim % 3])]).reshape(
            [s for d, s in enumerate(shape) if d != dim % 3] + [shape[dim % 3]])
        idx = np.moveaxis(idx, -1, dim % 3)
        got = to_numpy(call("ingot_scatter", tensor(t), dim, tensor(idx), tensor(src)))
        same(got, np_scatter(t, dim, idx, src, False))


@pytest.mark.parametrize("dt", [d for d in DT_ALL if not d.startswith("float8")])
def test_scatter_add_dtypes(dt):
    t = rand((5, 4, 3), dt)
    src = rand((6, 5, 4), dt)
    for dim in (0, 1, -1):
        idx = rng.integers(0, t.shape[dim], size=(4, 3, 2))  # with duplicates
        got = to_numpy(call("ingot_scatter_add", tensor(t), dim, tensor(idx), tensor(src)))
        want = np_scatter(t, dim, idx, src, True)
        if dt in ("float16", "bfloat16", "float32", "float64"):
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=1e-2 if dt == "bfloat16" else 1e-3)
        else:
            same(got, want)


@pytest.mark.parametrize("mk", [tensor, strided, transposed])
def test_scatter_add_large_layouts(mk):
    # np.add.at is the oracle; duplicates accumulate, > 65536 elements
    t = rng.standard_normal((400, 300)).astype(np.float64)
    src = rng.standard_normal((400, 300)).astype(np.float64)
    idx = rng.integers(0, 400, size=(400, 300))
    want = t.copy()
    np.add.at(want, (idx, np.broadcast_to(np.arange(300), idx.shape)), src)
    got = to_numpy(call("ingot_scatter_add", mk(t), 0, tensor(idx), mk(src)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # put_along_axis for unique indices along dim 1
    idx1 = np.argsort(rng.random((400, 300)), axis=1)[:, :200]
    want = t.copy()
    np.put_along_axis(want, idx1, src[:, :200], axis=1)
    got = to_numpy(call("ingot_scatter", mk(t), 1, tensor(idx1.astype(np.int32)), mk(src)))
    same(got, want)


def test_scatter_add_int_deterministic():
    t = np.zeros(5, np.int64)
    idx = np.zeros(100000, np.int64)
    src = np.ones(100000, np.int64)
    got = to_numpy(call("ingot_scatter_add", tensor(t), 0, tensor(idx), tensor(src)))
    same(got, np.array([100000, 0, 0, 0, 0]))


def test_scatter_errors():
    t = tensor(np.zeros((3, 4), np.float32))
    i = tensor(np.zeros((2, 2), np.int64))
    assert err("ingot_scatter", t, 0, i, tensor(np.zeros((2, 2), np.float64))).status == ERR_DTYPE
    e = err("ingot_scatter", t, 0, i, tensor(np.zeros((1, 2), np.float32)))  # src too small
    assert e.status == ERR_SHAPE
    err("ingot_scatter", t, 0, tensor(np.array([[3]])), tensor(np.zeros((2, 2), np.float32)))
    err("ingot_scatter_add", t, 1, tensor(np.array([[-1]])), tensor(np.zeros((2, 2), np.float32)))
    err("ingot_scatter_add", t, 1, tensor(np.zeros((1, 1), np.float32)),
        tensor(np.zeros((2, 2), np.float32)))
    err("ingot_scatter", t, 0, tensor(np.zeros(2, np.int64)), tensor(np.zeros(2, np.float32)))
    # empty index: plain copy
    tt = rng.standard_normal((3, 4)).astype(np.float32)
    same(to_numpy(call("ingot_scatter", tensor(tt), 0, tensor(np.zeros((0, 4), np.int64)),
                       tensor(tt))), tt)


# ---- index_put ----
@pytest.mark.parametrize("dt", DT_ALL)
def test_index_put_dtypes(dt):
    t = rand((6, 5, 4), dt)
    i0 = np.array([0, 5, -1, 2])
    i1 = np.array([[1], [4], [0]])  # broadcast with i0 -> (3, 4)
    vals = rand((4, 4), dt)  # broadcast to (3, 4, 4)
    want = t.copy()
    want[i0, i1] = vals
    got = to_numpy(call("ingot_index_put", tensor(t), [tensor(i0), tensor(i1.astype(np.int32))],
                        2, tensor(vals), False))
    same(got, want)


@pytest.mark.parametrize("dt", ["int32", "int64", "float32", "float64", "bool", "complex64"])
def test_index_put_accumulate(dt):
    t = rand((7, 3), dt)
    idx = rng.integers(-7, 7, size=50)
    vals = rand((50, 3), dt)
    want = t.copy()
    if dt == "bool":
        np.logical_or.at(want, idx, vals)
    else:
        np.add.at(want, idx, vals)
    got = to_numpy(call("ingot_index_put", tensor(t), [tensor(idx)], 1, strided(vals), True))
    if dt.startswith("float"):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    else:
        same(got, want)


def test_index_put_mask_and_large():
    t = rng.standard_normal((300, 400)).astype(np.float32)
    m = rng.random((300, 400)) > 0.5
    want = t.copy()
    want[m] = -7.0
    got = to_numpy(call("ingot_index_put", transposed(t), [tensor(m)], 1,
                        tensor(np.array(-7.0, np.float32)), False))
    same(got, want)
    rows = rng.random(300) > 0.3
    vals = rng.standard_normal(400).astype(np.float32)
    want = t.copy()
    want[rows] = vals
    got = to_numpy(call("ingot_index_put", tensor(t), [tensor(rows)], 1, tensor(vals), False))
    same(got, want)
    # accumulate, many duplicates over long rows (parallel column blocks)
    idx = rng.integers(0, 300, size=200)
    v = rng.standard_normal((200, 400)).astype(np.float64)
    t64 = t.astype(np.float64)
    want = t64.copy()
    np.add.at(want, idx, v)
    got = to_numpy(call("ingot_index_put", tensor(t64), [tensor(idx)], 1, tensor(v), True))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_index_put_errors():
    t = tensor(np.zeros((3, 4), np.float32))
    v = tensor(np.float32(1.0))
    assert err("ingot_index_put", t, [tensor(np.array([3]))], 1, v, False).status == ERR_INDEX
    err("ingot_index_put", t, [tensor(np.array([-4]))], 1, v, False)
    err("ingot_index_put", t, [tensor(np.array([0.0]))], 1, v, False)
    err("ingot_index_put", t, [tensor(np.array([0, 1])), tensor(np.array([0, 1, 2]))], 2, v, False)
    err("ingot_index_put", t, [tensor(np.array([0]))], 1, tensor(np.float64(1.0)), False)
    err("ingot_index_put", t, [tensor(np.array([0]))], 1, tensor(np.zeros(3, np.float32)), False)
    err("ingot_index_put", t, [tensor(np.ones((3, 5), bool))], 1, v, False)
    err("ingot_index_put", t, [tensor(np.array([0]))] * 3, 3, v, False)
    # empty index: unchanged copy
    a = rng.standard_normal((3, 4)).astype(np.float32)
    same(to_numpy(call("ingot_index_put", tensor(a), [tensor(np.zeros(0, np.int64))], 1, v,
                       False)), a)


# ---- masked_fill ----
@pytest.mark.parametrize("dt", DT_ALL)
def test_masked_fill_dtypes(dt):
    t = rand((4, 5), dt)
    m = rng.random((4, 5)) > 0.5
    want = t.copy()
    want[m] = np.array(3.0).astype(NP[dt])
    same(to_numpy(call("ingot_masked_fill", tensor(t), tensor(m), 3.0)), want)


@pytest.mark.parametrize("mk", [tensor, strided, transposed])
def test_masked_fill_broadcast_special(mk):
    t = rng.standard_normal((300, 301)).astype(np.float32)
    m = rng.random(301) > 0.5
    for v in (np.nan, -np.inf, -0.0, 1e-45):
        want = t.copy()
        want[:, m] = np.float32(v)
        same(to_numpy(call("ingot_masked_fill", mk(t), tensor(m), v)), want)
    ti = rng.integers(-5, 5, size=(3, 4)).astype(np.int32)
    want = ti.copy()
    want[1] = 2  # int tensors truncate the value
    same(to_numpy(call("ingot_masked_fill", tensor(ti), tensor(np.array([[0], [1], [0]], bool)),
                       2.7)), want)
    same(to_numpy(call("ingot_masked_fill", tensor(np.zeros((0, 3), np.float32)),
                       tensor(np.ones(3, bool)), 1.0)), np.zeros((0, 3), np.float32))


def test_masked_fill_errors():
    t = tensor(np.zeros((3, 4), np.float32))
    err("ingot_masked_fill", t, tensor(np.ones((3, 4), np.uint8)), 1.0)
    err("ingot_masked_fill", t, tensor(np.ones((2, 4), bool)), 1.0)
    err("ingot_masked_fill", t, tensor(np.ones((2, 3, 4), bool)), 1.0)  # would grow t


# ---- masked_select ----
@pytest.mark.parametrize("dt", DT_ALL)
def test_masked_select_dtypes(dt):
    t = rand((5, 6), dt)
    m = rng.random((5, 6)) > 0.4
    same(to_numpy(call("ingot_masked_select", tensor(t), tensor(m))), t[m])


@pytest.mark.parametrize("mk", [tensor, strided, transposed])
def test_masked_select_broadcast_large(mk):
    t = rng.standard_normal((400, 300)).astype(np.float32)
    m = rng.random((400, 300)) > 0.7
    same(to_numpy(call("ingot_masked_select", mk(t), mk(m))), t[m])
    # t broadcast against a bigger mask, and the reverse
    row = rng.standard_normal(300).astype(np.float64)
    same(to_numpy(call("ingot_masked_select", mk(row[None]), tensor(m))),
         np.broadcast_to(row, m.shape)[m])
    mrow = rng.random(300) > 0.5
    same(to_numpy(call("ingot_masked_select", mk(t), tensor(mrow))),
         t[np.broadcast_to(mrow, t.shape)])
    # none / all / zero-size / 0-dim
    same(to_numpy(call("ingot_masked_select", tensor(t), tensor(np.zeros_like(m)))),
         np.zeros(0, np.float32))
    same(to_numpy(call("ingot_masked_select", tensor(t), tensor(np.ones_like(m)))), t.ravel())
    same(to_numpy(call("ingot_masked_select", tensor(np.zeros((0, 3), np.int8)),
                       tensor(np.ones(3, bool)))), np.zeros(0, np.int8))
    same(to_numpy(call("ingot_masked_select", tensor(np.float32(5)), tensor(np.array(True)))),
         np.array([5], np.float32))


def test_masked_select_errors():
    t = tensor(np.zeros((3, 4), np.float32))
    err("ingot_masked_select", t, tensor(np.ones((3, 4), np.int64)))
    err("ingot_masked_select", t, tensor(np.ones((2, 4), bool)))


# ---- nonzero ----
@pytest.mark.parametrize("dt", DT_ALL)
def test_nonzero_dtypes(dt):
    t = rand((4, 3, 5), dt)
    got = to_numpy(call("ingot_nonzero", tensor(t)))
    want = np.stack(np.nonzero(t.astype(np.complex128) != 0), axis=1).astype(np.int64)
    same(got, want)


def test_nonzero_special_and_layouts():
    x = np.array([0.0, -0.0, np.nan, np.inf, 1e-45, -1e-300, 0.0], np.float64)
    same(to_numpy(call("ingot_nonzero", tensor(x))), np.array([[2], [3], [4], [5]]))
    for dt in (np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2):
        y = np.array([0.0, -0.0, np.nan, 1.0, -0.0], np.float32).astype(dt)
        same(to_numpy(call("ingot_nonzero", tensor(y))), np.array([[2], [3]]))
    big = (rng.random((300, 400)) > 0.8)
    for mk in (tensor, strided, transposed):
        same(to_numpy(call("ingot_nonzero", mk(big))), np.stack(np.nonzero(big), 1))
    same(to_numpy(call("ingot_nonzero", tensor(np.zeros((0, 4), np.float32)))),
         np.zeros((0, 2), np.int64))
    same(to_numpy(call("ingot_nonzero", tensor(np.zeros((3, 4), np.int32)))),
         np.zeros((0, 2), np.int64))
    same(to_numpy(call("ingot_nonzero", tensor(np.float32(2.0)))), np.zeros((1, 0), np.int64))
    same(to_numpy(call("ingot_nonzero", tensor(np.float32(0.0)))), np.zeros((0, 0), np.int64))
    z = np.zeros((2, 3, 1, 2, 1, 2, 1, 3), np.int16)
    z[1, 2, 0, 1, 0, 0, 0, 2] = 4
    same(to_numpy(call("ingot_nonzero", tensor(z))), np.stack(np.nonzero(z), 1))


# ---- embedding ----
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16", "float64", "int64",
                                "complex128", "float8_e4m3fn", "bool"])
def test_embedding_dtypes(dt):
    w = rand((10, 7), dt)
    idx = rng.integers(0, 10, size=(3, 4))
    same(to_numpy(call("ingot_embedding", tensor(w), tensor(idx))), w[idx])
    same(to_numpy(call("ingot_embedding", transposed(w), tensor(idx.astype(np.int32)))), w[idx])


def test_embedding_edge_and_errors():
    w = rng.standard_normal((1000, 128)).astype(np.float32)
    idx = rng.integers(0, 1000, size=(4, 300))
    same(to_numpy(call("ingot_embedding", strided(w), transposed(idx))), w[idx])
    same(to_numpy(call("ingot_embedding", tensor(w), tensor(np.array(5)))), w[5])
    same(to_numpy(call("ingot_embedding", tensor(w), tensor(np.zeros((2, 0), np.int64)))),
         np.zeros((2, 0, 128), np.float32))
    same(to_numpy(call("ingot_embedding", tensor(w[:, :0]), tensor(np.array([1, 2])))),
         np.zeros((2, 0), np.float32))
    e = err("ingot_embedding", tensor(w), tensor(np.array([1, 1000])))
    assert "out of range" in str(e) and e.status == ERR_INDEX
    assert err("ingot_embedding", tensor(w), tensor(np.array([-1]))).status == ERR_INDEX
    err("ingot_embedding", tensor(w), tensor(np.array([1.0])))
    err("ingot_embedding", tensor(w[0]), tensor(np.array([1])))
