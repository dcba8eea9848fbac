"""Views: slice, select, narrow, transpose, permute, expand, squeeze,
unsqueeze, reshape/view, flatten, split/chunk, checked against numpy slicing,
and that they share storage (a write through ingot_copy_ into a view shows in
the base). PyTorch semantics: slice clamps like Python slices (step > 0 only);
reshape views when the strides allow, else copies; view fails instead.
"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from ingot_ctypes import CPU, ID, IngotError, P, T, call, lib, tensor, to_numpy, transposed

SHAPE = (4, 5, 6)
A = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)


def check_view(base, v, np_view):
    """v equals np_view(base's values), shares base's storage, and a write
    through v lands in base exactly where numpy's view says."""
    ref = to_numpy(base)
    want = np_view(ref)
    assert want.size == 0 or np.shares_memory(want, ref)
    assert v.shape == want.shape
    np.testing.assert_array_equal(to_numpy(v), want)
    assert lib.ingot_shares_storage(base.ptr, v.ptr)
    fill = (np.arange(want.size).reshape(want.shape) + 1000).astype(want.dtype)
    assert call("ingot_copy_", v, tensor(fill)) == 0
    np_view(ref)[...] = fill
    np.testing.assert_array_equal(to_numpy(base), ref)
    np.testing.assert_array_equal(to_numpy(v), fill)


def slice_cases(n):
    return [(0, n, 1), (1, n, 2), (-3, n, 1), (0, -1, 1), (-100, 100, 3), (2, 1, 1), (n, n, 1),
            (-2, -1, 1), (1, 4, 5), (0, 2 ** 62, 1), (-(2 ** 62), 2, 1),
            (1, n, 2 ** 63 - 1), (-(2 ** 63), 2 ** 63 - 1, 2)]


def test_slice():
    for dim in range(3):
        n = SHAPE[dim]
        for start, end, step in slice_cases(n):
            base = tensor(A)
            v = call("ingot_slice", base, dim, start, end, step)
            idx = [slice(None)] * 3
            idx[dim] = slice(start, end, step)
            check_view(base, v, lambda a, idx=tuple(idx): a[idx])
    # Negative dim; slice of a slice; strides.
    base = tensor(A)
    v = call("ingot_slice", call("ingot_slice", base, -1, 1, 6, 2), 0, 1, 4, 2)
    assert v.strides == (60, 6, 2) and lib.ingot_offset(v.ptr) == 31
    check_view(base, v, lambda a: a[1:4:2, :, 1:6:2])


def test_slice_errors():
    base = tensor(A)
    for dim, step in [(3, 1), (-4, 1), (0, 0), (0, -1)]:
        with pytest.raises(IngotError) as e:
            call("ingot_slice", base, dim, 0, 2, step)
        assert e.value.status in (1, 5)
    with pytest.raises(IngotError, match="dimension out of range"):
        call("ingot_slice", base, 3, 0, 2, 1)


def test_select_narrow():
    for dim in range(-3, 3):
        n = SHAPE[dim]
        for i in (0, n - 1, -1, -n, 2):
            base = tensor(A)
            idx = [slice(None)] * 3
            idx[dim] = i
            check_view(base, call("ingot_select", base, dim, i), lambda a, ix=tuple(idx): a[ix])
        for start, length in [(0, n), (1, 2), (-2, 2), (n, 0), (0, 0)]:
            base = tensor(A)
            idx = [slice(None)] * 3
            s = start % n if start < 0 else start
            idx[dim] = slice(s, s + length)
            check_view(base, call("ingot_narrow", base, dim, start, length),
                       lambda a, ix=tuple(idx): a[ix])
    base = tensor(A)
    for dim, i in [(0, 4), (0, -5), (2, 6), (3, 0), (-4, 0)]:
        with pytest.raises(IngotError) as e:
            call("ingot_select", base, dim, i)
        assert e.value.status == 5
    for dim, start, length in [(0, 3, 2), (0, 0, 5), (0, 5, 0), (0, -5, 1), (0, 1, -1), (3, 0, 1)]:
        with pytest.raises(IngotError) as e:
            call("ingot_narrow", base, dim, start, length)
        assert e.value.status == 5
    # select down to 0-dim, then item.
    s = call("ingot_select", call("ingot_select", call("ingot_select", base, 0, 3), 0, 4), 0, 5)
    assert s.shape == () and lib.ingot_item(s.ptr) == A[3, 4, 5]
    with pytest.raises(IngotError):
        call("ingot_select", s, 0, 0)


def test_transpose_permute():
    for d0, d1 in [(0, 1), (0, 2), (1, 2), (-1, 0), (1, 1)]:
        base = tensor(A)
        v = call("ingot_transpose", base, d0, d1)
        check_view(base, v, lambda a: np.swapaxes(a, d0, d1))
        assert lib.ingot_is_contiguous(v.ptr) == (d0 % 3 == d1 % 3)
    for perm in [(0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0), (-1, 0, 1)]:
        base = tensor(A)
        check_view(base, call("ingot_permute", base, list(perm)), lambda a: np.transpose(a, perm))
    base = tensor(A)
    for perm in [(0, 0, 1), (0, 1, 3), (0, 1, -4), (2, 2, 2)]:
        with pytest.raises(IngotError):
            call("ingot_permute", base, list(perm))
    with pytest.raises(IngotError):
        call("ingot_transpose", base, 0, 3)
    # 0-dim transpose is itself.
    s = call("ingot_select", call("ingot_select", call("ingot_select", base, 0, 0), 0, 0), 0, 0)
    assert call("ingot_transpose", s, 0, 0).shape == ()


def test_expand():
    a = np.arange(3, dtype=np.int32).reshape(3, 1)
    base = tensor(a)
    v = call("ingot_expand", base, 3, [2, 3, 4])
    assert v.strides[0] == 0 and v.strides[2] == 0
    np.testing.assert_array_equal(to_numpy(v), np.broadcast_to(a, (2, 3, 4)))
    assert lib.ingot_shares_storage(base.ptr, v.ptr)
    v = call("ingot_expand", base, 2, [-1, 5])
    np.testing.assert_array_equal(to_numpy(v), np.broadcast_to(a, (3, 5)))
    v = call("ingot_expand", base, 3, [0, 3, 1])
    assert v.shape == (0, 3, 1)
    v = call("ingot_expand", base, 2, [3, 0])
    assert v.shape == (3, 0)
    # A write into the base shows in every broadcast copy.
    call("ingot_copy_", call("ingot_select", base, 0, 1), tensor(np.array([7], np.int32)))
    np.testing.assert_array_equal(to_numpy(call("ingot_expand", base, 2, [3, 2]))[1], [7, 7])
    # Expanding a scalar; transposed input.
    s = call("ingot_select", tensor(np.array([5.0])), 0, 0)
    np.testing.assert_array_equal(to_numpy(call("ingot_expand", s, 2, [2, 2])),
                                  np.full((2, 2), 5.0))
    t = transposed(np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(to_numpy(call("ingot_expand", call("ingot_unsqueeze", t, 0),
                                                3, [2, 3, 2])),
                                  np.broadcast_to(np.arange(6.0).reshape(3, 2), (2, 3, 2)))
    for shape in ([2, 2], [2], [-1, -1, 1], [4, 3, 1, 1, 1, 1, 1, 1, 1], [3, -2]):
        with pytest.raises(IngotError) as e:
            call("ingot_expand", base, len(shape), shape)
        assert e.value.status == 2, shape


def test_squeeze_unsqueeze():
    a = np.arange(6.0).reshape(1, 2, 1, 3)
    base = tensor(a)
    for dim in (0, 2, -2, 1, 3):
        check_view(base, call("ingot_squeeze", base, dim),
                   lambda x: np.squeeze(x, dim) if x.shape[dim] == 1 else x)
    check_view(base, call("ingot_squeeze", base, 0x7FFF), lambda x: x.reshape(2, 3))
    for dim in (0, 1, 4, -1, -5):
        base = tensor(a)
        v = call("ingot_unsqueeze", base, dim)
        check_view(base, v, lambda x: np.expand_dims(x, dim))
    with pytest.raises(IngotError):
        call("ingot_unsqueeze", base, 5)
    with pytest.raises(IngotError):
        call("ingot_squeeze", base, 4)
    # unsqueeze of a non-contiguous view keeps it viewable.
    t = call("ingot_slice", tensor(np.arange(12.0).reshape(3, 4)), 1, 0, 4, 2)
    u = call("ingot_unsqueeze", t, 1)
    np.testing.assert_array_equal(to_numpy(u), np.arange(12.0).reshape(3, 1, 4)[:, :, ::2])
    # ndim limit: 8 dims max.
    t8 = call("ingot_ones", 8, [1] * 8, ID["float32"], CPU)
    with pytest.raises(IngotError) as e:
        call("ingot_unsqueeze", t8, 0)
    assert e.value.status == 2
    with pytest.raises(IngotError):
        call("ingot_reshape", t8, 9, [1] * 9)
    with pytest.raises(IngotError):
        call("ingot_expand", t8, 9, [1] * 9)


def test_reshape_view():
    base = tensor(A)
    for shape in [(120,), (2, 60), (-1, 6), (4, 30), (2, 2, 5, 6), (1, 120, 1), (5, -1, 3)]:
        v = call("ingot_reshape", base, len(shape), list(shape))
        check_view(base, v, lambda a: a.reshape(shape))
        v2 = call("ingot_view", base, len(shape), list(shape))
        assert lib.ingot_shares_storage(base.ptr, v2.ptr)
    # Non-contiguous: transposed can't be flattened as a view -> reshape copies.
    base = tensor(A)
    tr = call("ingot_transpose", base, 0, 2)
    want = np.swapaxes(A, 0, 2).reshape(-1)
    r = call("ingot_reshape", tr, 1, [-1])
    np.testing.assert_array_equal(to_numpy(r), want)
    assert not lib.ingot_shares_storage(base.ptr, r.ptr)
    with pytest.raises(IngotError) as e:
        call("ingot_view", tr, 1, [-1])
    assert e.value.status == 2 and "reshape" in str(e.value)
    # ...but splitting a dim of a transposed tensor is a view.
    r = call("ingot_reshape", tr, 4, [3, 2, 5, 4])
    assert lib.ingot_shares_storage(base.ptr, r.ptr)
    np.testing.assert_array_equal(to_numpy(r), np.swapaxes(A, 0, 2).reshape(3, 2, 5, 4))
    # Sliced rows: merging the sliced dim with a contiguous one is not a view.
    sl = call("ingot_slice", base, 1, 0, 5, 2)  # (4, 3, 6)
    r = call("ingot_reshape", sl, 2, [4, 18])
    assert not lib.ingot_shares_storage(base.ptr, r.ptr)
    np.testing.assert_array_equal(to_numpy(r), A[:, ::2].reshape(4, 18))
    r = call("ingot_view", sl, 3, [4, 3, 6])
    r = call("ingot_view", sl, 4, [2, 2, 3, 6])
    np.testing.assert_array_equal(to_numpy(r), A[:, ::2].reshape(2, 2, 3, 6))
    # Expanded (stride 0) tensors.
    e = call("ingot_expand", tensor(np.arange(3.0)), 2, [4, 3])
    v = call("ingot_view", e, 3, [2, 2, 3])
    assert v.strides == (0, 0, 1)
    np.testing.assert_array_equal(to_numpy(v), np.broadcast_to(np.arange(3.0), (2, 2, 3)))
    # Scalars and empties.
    s = tensor(np.array([4.0]))
    np.testing.assert_array_equal(to_numpy(call("ingot_reshape", s, 0, [])), np.array(4.0))
    z = call("ingot_zeros", 2, [0, 5], ID["float32"], CPU)
    assert call("ingot_reshape", z, 3, [5, 0, 7]).shape == (5, 0, 7)
    assert call("ingot_reshape", z, 2, [-1, 5]).shape == (0, 5)
    # Errors.
    for shape in [(7, -1), (121,), (-1, -1), (2, -2, 30), (0, -1), (2 ** 62, 2 ** 62, 0, 1)]:
        with pytest.raises(IngotError) as e:
            call("ingot_reshape", base, len(shape), list(shape))
        assert e.value.status == 2, shape
    with pytest.raises(IngotError):
        call("ingot_reshape", base, 3, [2 ** 62, 2 ** 62, 4])
    with pytest.raises(IngotError):  # -1 next to a 0 is ambiguous
        call("ingot_reshape", z, 2, [-1, 0])


def test_flatten():
    base = tensor(A)
    for s, e in [(0, -1), (1, 2), (0, 1), (2, 2), (-2, -1)]:
        v = call("ingot_flatten", base, s, e)
        s2, e2 = s % 3, e % 3
        want = A.reshape(SHAPE[:s2] + (-1,) + SHAPE[e2 + 1:])
        np.testing.assert_array_equal(to_numpy(v), want)
        assert lib.ingot_shares_storage(base.ptr, v.ptr)
    tr = call("ingot_transpose", base, 0, 1)
    np.testing.assert_array_equal(to_numpy(call("ingot_flatten", tr, 0, -1)),
                                  np.swapaxes(A, 0, 1).reshape(-1))
    with pytest.raises(IngotError):
        call("ingot_flatten", base, 2, 1)
    with pytest.raises(IngotError):
        call("ingot_flatten", base, 0, 3)
    s = call("ingot_select", tensor(np.array([2.0])), 0, 0)
    assert call("ingot_flatten", s, 0, -1).shape == (1,)


def split_pieces(fn, t, arg, dim, max_out=16):
    arr = (P * max_out)()
    n = call(fn, t, arg, dim, arr, max_out)
    return [T(arr[i]) for i in range(n)]


def test_split_chunk():
    base = tensor(A)
    for size in (1, 2, 3, 4, 5, 6, 100):
        for dim in (0, 1, 2, -1):
            parts = split_pieces("ingot_split", base, size, dim)
            n = A.shape[dim]
            want = np.split(A, range(size, n, size), axis=dim)
            assert len(parts) == len(want)
            for p, w in zip(parts, want):
                np.testing.assert_array_equal(to_numpy(p), w)
                assert lib.ingot_shares_storage(base.ptr, p.ptr)
    # torch.chunk: ceil(n / chunks)-sized pieces, possibly fewer than chunks.
    for chunks, n, sizes in [(3, 6, [2, 2, 2]), (4, 6, [2, 2, 2]), (5, 6, [2, 2, 2]),
                             (6, 6, [1] * 6), (10, 6, [1] * 6), (1, 6, [6]), (4, 5, [2, 2, 1])]:
        t = tensor(np.arange(n * 2.0).reshape(n, 2))
        parts = split_pieces("ingot_chunk", t, chunks, 0)
        assert [p.shape[0] for p in parts] == sizes, (chunks, n)
        np.testing.assert_array_equal(np.concatenate([to_numpy(p) for p in parts]),
                                      np.arange(n * 2.0).reshape(n, 2))
    # Write through a piece.
    base = tensor(A)
    parts = split_pieces("ingot_split", base, 2, 0)
    call("ingot_copy_", parts[1], tensor(np.zeros((1,), np.float32)))
    want = A.copy()
    want[2:4] = 0
    np.testing.assert_array_equal(to_numpy(base), want)
    del parts
    # Empty dim: one empty piece.
    z = call("ingot_zeros", 2, [0, 3], ID["float32"], CPU)
    parts = split_pieces("ingot_split", z, 2, 0)
    assert len(parts) == 1 and parts[0].shape == (0, 3)
    # Errors: bad sizes, too few slots (nothing leaks), bad dims.
    for fn, arg, dim, mo in [("ingot_split", 0, 0, 16), ("ingot_split", -1, 0, 16),
                             ("ingot_split", 1, 0, 3), ("ingot_split", 1, 3, 16),
                             ("ingot_chunk", 0, 0, 16), ("ingot_chunk", 5, 0, 3),
                             ("ingot_chunk", 2, -4, 16)]:
        with pytest.raises(IngotError):
            split_pieces(fn, base, arg, dim, mo)


def test_view_errors_and_null():
    base = tensor(A)
    lib.ingot_clear_error()
    for fn in ("ingot_squeeze", "ingot_unsqueeze"):
        f = getattr(lib, fn)
        f.restype, f.argtypes = P, [P, ctypes.c_int]
        assert not f(None, 0)
    assert lib.ingot_last_status() == 1
    # The first error message is kept through a chain of NULLs.
    with pytest.raises(IngotError, match="select: index 9"):
        lib.ingot_clear_error()
        lib.ingot_select.restype, lib.ingot_select.argtypes = P, [P, ctypes.c_int, ctypes.c_int64]
        lib.ingot_transpose.restype, lib.ingot_transpose.argtypes = P, [P, ctypes.c_int,
                                                                      ctypes.c_int]
        p = lib.ingot_transpose(lib.ingot_select(base.ptr, 0, 9), 0, 1)
        assert not p
        raise IngotError(lib.ingot_last_error().decode(), lib.ingot_last_status())


def test_large_and_overflowing_sizes():
    for shape in ([2 ** 62, 2 ** 62], [2 ** 31, 2 ** 31, 2 ** 31], [-2, 3], [2 ** 63 - 1, 2]):
        with pytest.raises(IngotError) as e:
            call("ingot_empty", len(shape), shape, ID["float32"], CPU)
        assert e.value.status == 2
    # A huge but zero-sized shape is fine (numel 0) and views on it work.
    z = call("ingot_empty", 3, [2 ** 62, 0, 2 ** 62], ID["float32"], CPU)
    assert lib.ingot_numel(z.ptr) == 0
    assert call("ingot_transpose", z, 0, 2).shape == (2 ** 62, 0, 2 ** 62)
    with pytest.raises(IngotError):
        call("ingot_empty", 9, [1] * 9, ID["float32"], CPU)
    z = call("ingot_empty", 3, [2 ** 62, 2 ** 62, 0], ID["int64"], CPU)
    assert lib.ingot_numel(z.ptr) == 0 and z.shape == (2 ** 62, 2 ** 62, 0)
    # Expanding past 64-bit element counts is refused (PyTorch: numel overflow).
    s = tensor(np.ones(1, np.float32))
    with pytest.raises(IngotError) as e:
        call("ingot_expand", s, 2, [2 ** 62, 2 ** 62])
    assert e.value.status == 2
    v = call("ingot_expand", s, 3, [2 ** 62, 2 ** 62, 0])
    assert lib.ingot_numel(v.ptr) == 0
    v = call("ingot_expand", s, 2, [2 ** 31, 2 ** 31])  # 2^62 elements: a valid view
    assert lib.ingot_numel(v.ptr) == 2 ** 62 and v.strides == (0, 0)
