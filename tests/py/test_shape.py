"""Shape ops (cat, stack, flip, roll, repeat, tril, triu) against numpy
(concatenate, stack, flip, roll, tile, tril, triu). They only move data, so
every comparison is exact, byte for byte. PyTorch semantics followed where
numpy differs: cat skips 1-D empty tensors whatever the other shapes
(legacy behaviour), cat promotes mixed dtypes, repeat needs at least ndim
repeats, roll with repeated dims applies each shift in turn."""
import ml_dtypes
import numpy as np
import pytest
from ingot_ctypes import IngotError, call, strided, tensor, to_numpy, transposed

RNG = np.random.default_rng(7)
BF16 = np.dtype(ml_dtypes.bfloat16)
F8 = np.dtype(ml_dtypes.float8_e4m3fn)
DTYPES = [np.bool_, np.uint8, np.int16, np.int64, np.float16, BF16, np.float32, np.float64,
          np.complex64, np.complex128, F8]
IDS = lambda d: np.dtype(d).name  # noqa: E731


def rand(shape, dt=np.float32):
    dt = np.dtype(dt)
    if dt == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        return RNG.integers(0, 100, size=shape).astype(dt)
    x = RNG.standard_normal(shape) * 4
    if dt.kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dt)


def same(t, want):
    got = to_numpy(t)
    want = np.asarray(want)
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


# ---- cat / stack ----
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_dtypes(dt, dim):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, s in enumerate(shapes):
        s[dim] = i + 1
    xs = [rand(s, dt) for s in shapes]
    ts = [tensor(xs[0]), strided(xs[1]), transposed(xs[2])]
    same(call("ingot_cat", ts, 3, dim), np.concatenate(xs, axis=dim))


def test_cat_many_inputs():
    xs = [rand((3, i % 4, 2), np.float64) for i in range(21)]  # groups of 8, some empty
    same(call("ingot_cat", [tensor(x) for x in xs], len(xs), 1), np.concatenate(xs, 1))


def test_cat_large_threaded():
    xs = [rand((300, 150)), rand((300, 250))]
    same(call("ingot_cat", [transposed(x) for x in xs], 2, 1), np.concatenate(xs, 1))


def test_cat_promotes():
    a, b = rand((2, 2), np.int32), rand((3, 2), np.float32)
    same(call("ingot_cat", [tensor(a), tensor(b)], 2, 0), np.concatenate([a.astype(np.float32), b]))
    c, d = rand((1, 2), np.bool_), rand((1, 2), np.int8)
    same(call("ingot_cat", [tensor(c), tensor(d)], 2, 0), np.concatenate([c.astype(np.int8), d]))


def test_cat_legacy_empty_and_zero_size():
    a = rand((2, 3), np.int64)
    e = np.zeros((0,), np.int64)
    same(call("ingot_cat", [tensor(e), tensor(a), tensor(e)], 3, 1), a)
    same(call("ingot_cat", [tensor(e), tensor(e)], 2, 0), e)
    z = np.zeros((0, 3), np.int64)
    same(call("ingot_cat", [tensor(z), tensor(a), tensor(z)], 3, 0), a)
    same(call("ingot_cat", [tensor(z), tensor(z)], 2, 1), np.zeros((0, 6), np.int64))


def test_cat_errors():
    a, b = tensor(rand((2, 3))), tensor(rand((2, 4)))
    with pytest.raises(IngotError, match="Expected size 3 but got size 4 for tensor number 1"):
        call("ingot_cat", [a, b], 2, 0)
    with pytest.raises(IngotError, match="same number of dimensions"):
        call("ingot_cat", [a, tensor(rand((2, 3, 1)))], 2, 0)
    with pytest.raises(IngotError, match="zero-dimensional"):
        call("ingot_cat", [a, tensor(rand(()))], 2, 0)
    with pytest.raises(IngotError, match="out of range"):
        call("ingot_cat", [a, a], 2, 2)
    with pytest.raises(IngotError, match="non-empty"):
        call("ingot_cat", [a], 0, 0)


@pytest.mark.parametrize("dt", [np.bool_, np.float16, np.complex64, np.int64], ids=IDS)
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_stack(dt, dim):
    xs = [rand((2, 3), dt) for _ in range(4)]
    ts = [tensor(xs[0]), strided(xs[1]), transposed(xs[2]), tensor(xs[3])]
    same(call("ingot_stack", ts, 4, dim), np.stack(xs, axis=dim))


def test_stack_scalars_and_errors():
    xs = [np.array(i, np.float32) for i in range(3)]
    same(call("ingot_stack", [tensor(x) for x in xs], 3, 0), np.stack(xs))
    with pytest.raises(IngotError, match="equal size"):
        call("ingot_stack", [tensor(rand((2, 3))), tensor(rand((3, 2)))], 2, 0)
    with pytest.raises(IngotError, match="out of range"):
        call("ingot_stack", [tensor(rand((2, 3)))], 1, 3)


# ---- flip ----
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("dims", [[0], [1], [-1], [0, 2], [2, 1, 0], []], ids=str)
def test_flip(dt, dims):
    x = rand((3, 4, 5), dt)
    want = np.flip(x, axis=tuple(dims)) if dims else x
    same(call("ingot_flip", tensor(x), dims, len(dims)), want)
    same(call("ingot_flip", transposed(x), dims, len(dims)), want)


def test_flip_large_zero_and_errors():
    x = rand((300, 301), np.float32)
    same(call("ingot_flip", strided(x), [0, 1], 2), np.flip(x))
    z = rand((0, 3))
    same(call("ingot_flip", tensor(z), [0], 1), z)
    same(call("ingot_flip", tensor(np.float64(2.5)), [0], 1), np.float64(2.5))
    with pytest.raises(IngotError, match="multiple times"):
        call("ingot_flip", tensor(x), [0, -2], 2)
    with pytest.raises(IngotError, match="out of range"):
        call("ingot_flip", tensor(x), [2], 1)


# ---- roll ----
@pytest.mark.parametrize("dt", [np.bool_, np.int16, np.float16, np.complex128, F8], ids=IDS)
@pytest.mark.parametrize("shifts,dims", [([1], [0]), ([-2], [1]), ([7, -9], [0, 2]),
                                         ([3, 1, 2], [2, 1, 0]), ([0], [1]), ([5], [-1])],
                         ids=str)
def test_roll(dt, shifts, dims):
    x = rand((3, 4, 5), dt)
    want = np.roll(x, shifts, axis=dims)
    same(call("ingot_roll", tensor(x), shifts, dims, len(dims)), want)
    same(call("ingot_roll", transposed(x), shifts, dims, len(dims)), want)


def test_roll_flat_repeated_zero():
    x = rand((3, 4), np.int64)
    for s in [0, 1, 5, -7, 25]:
        same(call("ingot_roll", strided(x), [s], None, 0), np.roll(x, s))
    same(call("ingot_roll", tensor(x), [1, 2], [1, 1], 2), np.roll(x, 3, axis=1))
    same(call("ingot_roll", tensor(np.int64(4)), [3], None, 0), np.int64(4))
    z = rand((0, 4))
    same(call("ingot_roll", tensor(z), [2], [0], 1), z)
    same(call("ingot_roll", tensor(z), [2], [1], 1), z)
    big = rand((400, 300))
    same(call("ingot_roll", tensor(big), [123, -45], [0, 1], 2), np.roll(big, (123, -45), (0, 1)))
    with pytest.raises(IngotError, match="out of range"):
        call("ingot_roll", tensor(x), [1], [2], 1)


# ---- repeat ----
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("reps", [[1, 1], [2, 3], [3, 1, 2], [2, 1, 1, 3], [1, 0]], ids=str)
def test_repeat(dt, reps):
    x = rand((2, 3), dt)
    same(call("ingot_repeat", tensor(x), reps, len(reps)), np.tile(x, reps))
    same(call("ingot_repeat", transposed(x), reps, len(reps)), np.tile(x, reps))


def test_repeat_scalar_large_and_errors():
    same(call("ingot_repeat", tensor(np.float32(1.5)), [], 0), np.float32(1.5))
    same(call("ingot_repeat", tensor(np.int8(3)), [1000, 70], 2), np.full((1000, 70), 3, np.int8))
    x = rand((5, 7), np.complex64)
    same(call("ingot_repeat", strided(x), [33, 1, 17], 3), np.tile(x, (33, 1, 17)))
    same(call("ingot_repeat", tensor(rand((0, 3))), [2, 2], 2), np.zeros((0, 6), np.float32))
    with pytest.raises(IngotError, match="can not be smaller"):
        call("ingot_repeat", tensor(x), [2], 1)
    with pytest.raises(IngotError, match="negative"):
        call("ingot_repeat", tensor(x), [2, -1], 2)


# ---- tril / triu ----
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize("k", [0, 1, -1, 3, -4, 100, -100])
def test_tril_triu(dt, k):
    x = rand((2, 4, 6), dt)  # batch of non-square matrices
    same(call("ingot_tril", tensor(x), k), np.tril(x, k))
    same(call("ingot_triu", tensor(x), k), np.triu(x, k))
    same(call("ingot_tril", transposed(x), k), np.tril(x, k))
    same(call("ingot_triu", strided(x), k), np.triu(x, k))


def test_tril_triu_large_extreme_errors():
    x = rand((3, 300, 200))
    same(call("ingot_tril", transposed(x), -5), np.tril(x, -5))
    same(call("ingot_triu", tensor(x), 7), np.triu(x, 7))
    y = rand((5, 4), np.float64)
    same(call("ingot_tril", tensor(y), 2**62), y)
    same(call("ingot_triu", tensor(y), -2**62), y)
    same(call("ingot_triu", tensor(y), 2**62), np.zeros_like(y))
    same(call("ingot_tril", tensor(rand((0, 3))), 0), np.zeros((0, 3), np.float32))
    for name in ["ingot_tril", "ingot_triu"]:
        with pytest.raises(IngotError, match="at least 2 dimensions"):
            call(name, tensor(rand((4,))), 0)
