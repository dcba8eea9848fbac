"""matmul / bmm against numpy.

Tolerances (compared with a float64 or complex128 numpy product):
  f32/c64: rtol 1e-4, atol 1e-6 * k      f64/c128: rtol 1e-10, atol 1e-12 * k
  f16/bf16: inputs rounded to the dtype, product in float32 numpy, then
            rtol 1e-2 (bf16 2e-2) with atol scaled by k
  integers: exact (both sides wrap modulo 2^bits)
PyTorch differences we follow on purpose: mixed dtypes promote (result_type)
instead of failing, and integer matmul is allowed as on PyTorch's CPU.
"""

import ml_dtypes
import numpy as np
import pytest
from ingot_ctypes import IngotError, call, strided, tensor, to_numpy, transposed

RNG = np.random.default_rng(1234)
BF16 = np.dtype(ml_dtypes.bfloat16)


def rand(shape, dt):
    dt = np.dtype(dt)
    if dt.kind in "iu":
        lo, hi = (0, 20) if dt.kind == "u" else (-20, 20)
        return RNG.integers(lo, hi, size=shape).astype(dt)
    x = RNG.standard_normal(shape)
    if dt.kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dt)


def reference(a, b):
    """numpy product in a wide type, plus the tolerances for a's dtype."""
    dt = a.dtype
    k = a.shape[-1] if a.ndim else 1
    if dt.kind in "iu":
        return np.matmul(a, b), 0, 0
    if dt in (np.float16, BF16):
        r = np.matmul(a.astype(np.float32), b.astype(np.float32))
        rtol = 2e-2 if dt == BF16 else 1e-2
        return r, rtol, rtol * max(k, 1) ** 0.5
    if dt in (np.float32, np.complex64):
        wide = np.complex128 if dt.kind == "c" else np.float64
        return np.matmul(a.astype(wide), b.astype(wide)), 1e-4, 1e-6 * max(k, 1)
    return np.matmul(a, b), 1e-10, 1e-12 * max(k, 1)


def check(a, b, ta=None, tb=None):
    ta = tensor(a) if ta is None else ta
    tb = tensor(b) if tb is None else tb
    r = call("ingot_matmul", ta, tb)
    want, rtol, atol = reference(a, b)
    got = to_numpy(r)
    assert got.shape == want.shape
    assert got.dtype == a.dtype
    if rtol == 0:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(want.dtype), want, rtol=rtol, atol=atol)


DTYPES = [np.float32, np.float64, np.complex64, np.complex128, np.float16, BF16,
          np.int32, np.int64, np.int8, np.uint8, np.int16]


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n,k,m", [(1, 1, 1), (7, 33, 5), (16, 3, 1), (1, 9, 13)])
def test_dtypes_2d(dt, n, k, m):
    check(rand((n, k), dt), rand((k, m), dt))


SHAPES = [
    ((3,), (3,)),  # dot -> 0-dim
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((5,), (2, 5, 4)),
    ((2, 3, 5), (5,)),
    ((2, 1, 3, 4), (5, 4, 6)),  # batch dims broadcast -> [2,5,3,6]
    ((4, 6), (2, 3, 6, 2)),
    ((2, 3, 4), (4, 5)),  # folded into one GEMM
    ((1, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (1, 4, 5)),
    ((3, 1, 2, 7), (7, 1)),
    ((1, 4), (4, 1)),
    ((6, 2, 3), (6, 3, 2)),
]


@pytest.mark.parametrize("sa,sb", SHAPES, ids=str)
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.complex64, np.int64, np.float16],
                         ids=lambda d: np.dtype(d).name)
def test_broadcast_and_1d(sa, sb, dt):
    a, b = rand(sa, dt), rand(sb, dt)
    check(a, b)


def test_dot_is_0dim():
    a, b = rand((5,), np.float64), rand((5,), np.float64)
    r = call("ingot_matmul", tensor(a), tensor(b))
    assert r.shape == ()
    assert abs(to_numpy(r) - a @ b) < 1e-12


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.complex128, np.int32, BF16],
                         ids=lambda d: np.dtype(d).name)
def test_transposed_and_strided(dt):
    a, b = rand((2, 9, 6), dt), rand((2, 6, 11), dt)
    # transposed operands take BLAS's transposed flags; strided ones are copied
    check(a, b, transposed(a), tensor(b))
    check(a, b, tensor(a), transposed(b))
    check(a, b, transposed(a), transposed(b))
    check(a, b, strided(a), strided(b))
    check(a[0], b[0], transposed(a[0]), strided(b[0]))
    # a row slice (leading dim > columns) is still read in place
    big = rand((9, 10), dt)
    tv = call("ingot_slice", tensor(big), 1, 2, 8, 1)
    check(big[:, 2:8], b[0], tv, tensor(b[0]))


def test_expanded_operand():
    a = rand((3, 4), np.float32)
    b = rand((5, 4, 2), np.float32)
    ea = call("ingot_expand", tensor(a), 3, [5, 3, 4])  # batch stride 0
    check(np.broadcast_to(a, (5, 3, 4)), b, ea, tensor(b))
    # an expanded column (row stride 0) cannot be read by BLAS: copied
    col = rand((3, 1), np.float64)
    ec = call("ingot_expand", tensor(col), 2, [3, 4])
    b2 = rand((4, 2), np.float64)
    check(np.broadcast_to(col, (3, 4)).copy(), b2, ec, tensor(b2))


def test_promotion():
    a, b = rand((3, 4), np.int32), rand((4, 2), np.float32)
    r = call("ingot_matmul", tensor(a), tensor(b))
    assert r.dtype == np.float32
    np.testing.assert_allclose(to_numpy(r), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    r = call("ingot_matmul", tensor(b.T.copy()), tensor(a.T.astype(np.float64)))
    assert r.dtype == np.float64


def test_integer_wraps():
    a = np.full((2, 4), 100, np.int8)
    b = np.full((4, 3), 100, np.int8)
    got = to_numpy(call("ingot_matmul", tensor(a), tensor(b)))
    np.testing.assert_array_equal(got, np.full((2, 3), (40000 % 256) - 256 * (40000 % 256 > 127),
                                               np.int8))
    a = np.full((1, 3), 2**40, np.int64)
    b = np.full((3, 1), 2**30, np.int64)
    got = to_numpy(call("ingot_matmul", tensor(a), tensor(b)))
    np.testing.assert_array_equal(got, a @ b)  # numpy wraps as well


@pytest.mark.parametrize("sa,sb", [((0, 4), (4, 5)), ((3, 0), (0, 5)), ((2, 0, 3, 4), (4, 5)),
                                   ((0,), (0,)), ((3, 4), (4, 0)), ((2, 3, 0), (2, 0, 4))],
                         ids=str)
@pytest.mark.parametrize("dt", [np.float32, np.int64, np.float16, np.complex64],
                         ids=lambda d: np.dtype(d).name)
def test_zero_size(sa, sb, dt):
    a, b = rand(sa, dt), rand(sb, dt)
    got = to_numpy(call("ingot_matmul", tensor(a), tensor(b)))
    want = np.matmul(a, b)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, np.zeros(want.shape, dt))  # k == 0 gives zeros


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
def test_large(dt):
    a, b = rand((300, 500), dt), rand((500, 200), dt)
    check(a, b)
    check(a, b, transposed(a), transposed(b))


def test_large_int_threads():
    a, b = rand((120, 90), np.int32), rand((90, 130), np.int32)
    check(a, b)


def test_many_small_batches():
    a, b = rand((64, 5, 7), np.float32), rand((64, 7, 3), np.float32)
    check(a, b)
    check(a, b, transposed(a), tensor(b))


def test_bmm():
    a, b = rand((4, 3, 5), np.float64), rand((4, 5, 2), np.float64)
    r = call("ingot_bmm", tensor(a), transposed(b))
    np.testing.assert_allclose(to_numpy(r), a @ b, rtol=1e-12)
    r = call("ingot_bmm", tensor(a.astype(np.float32)), tensor(b))
    assert r.dtype == np.float64


@pytest.mark.parametrize("sa,sb,msg", [
    ((3, 4), (5, 6), "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)"),
    ((2, 3, 4), (2, 5, 6), "mat1 and mat2 shapes cannot be multiplied (3x4 and 5x6)"),
    ((2, 3, 4), (3, 4, 6), "size of tensor"),
    ((3,), (4,), "inconsistent tensor size"),
    ((3,), (4, 2), "(1x3 and 4x2)"),
    ((), (3,), "at least 1D"),
], ids=str)
def test_errors(sa, sb, msg):
    a, b = tensor(rand(sa, np.float32)), tensor(rand(sb, np.float32))
    with pytest.raises(IngotError) as e:
        call("ingot_matmul", a, b)
    assert msg in str(e.value)


def test_dtype_errors():
    a = tensor(np.ones((2, 2), bool))
    with pytest.raises(IngotError, match="Bool|bool"):
        call("ingot_matmul", a, a)
    f8 = tensor(np.ones((2, 2), np.float32).astype(ml_dtypes.float8_e4m3fn))
    with pytest.raises(IngotError):
        call("ingot_matmul", f8, f8)


def test_bmm_errors():
    a3 = tensor(rand((2, 3, 4), np.float32))
    with pytest.raises(IngotError, match="3D"):
        call("ingot_bmm", tensor(rand((3, 4), np.float32)), a3)
    with pytest.raises(IngotError, match="3D"):
        call("ingot_bmm", a3, tensor(rand((4, 5), np.float32)))
    with pytest.raises(IngotError, match=r"\[2, 4\] but got: \[3, 4\]"):
        call("ingot_bmm", a3, tensor(rand((3, 4, 5), np.float32)))
    with pytest.raises(IngotError, match=r"\[2, 4\] but got: \[2, 5\]"):
        call("ingot_bmm", a3, tensor(rand((2, 5, 5), np.float32)))


def test_null_propagates():
    with pytest.raises(IngotError, match="NULL"):
        call("ingot_matmul", None, tensor(rand((2, 2), np.float32)))
