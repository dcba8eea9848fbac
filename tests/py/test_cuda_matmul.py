"""MATMUL on CUDA (cuBLASLt, the GEMV kernels for decode shapes, the tiled
integer kernel) against the CPU backend on the same inputs.

Tolerances (CUDA against CPU, elementwise rtol, atol):
  f32 (allow_tf32 off): 1e-4, 1e-4 * sqrt(k)    c64 the same
  f64 / c128: 1e-10, 1e-12 * k
  f16: 2e-3, 1e-3 * sqrt(k); bf16: 1.6e-2, 1e-2 * sqrt(k)  (both sides round
      an f32-accumulated sum: at most a one-ulp flip)
  f32 with allow_tf32 on: 5e-3, 5e-3 * sqrt(k)
  integers: exact (both wrap modulo 2^bits)
"""

import ml_dtypes
import numpy as np
import pytest
from cuda_diff import CUDA, diff, needs_cuda
from ingot_ctypes import (B, CPU, ID, IngotError, call, lib, strided, tensor, to_numpy,
                          transposed)

pytestmark = needs_cuda

lib.ingot_set_allow_tf32.restype = None
lib.ingot_set_allow_tf32.argtypes = [B]
lib.ingot_get_allow_tf32.restype = B
lib.ingot_get_allow_tf32.argtypes = []

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = ["float32", "float64", "float16", "bfloat16", "complex64", "complex128"]
INTS = ["uint8", "int8", "int16", "int32", "int64"]
DT = {n: np.dtype(ml_dtypes.bfloat16) if n == "bfloat16" else np.dtype(n)
      for n in FLOATS + INTS}
RNG = np.random.default_rng(4321)


def rand(shape, name, wide=False):
    dt = DT[name]
    if dt.kind in "iu":
        lo, hi = (0, 256) if dt.kind == "u" else (-128, 128)
        if not wide:
            lo, hi = (0, 20) if dt.kind == "u" else (-20, 20)
        return RNG.integers(lo, hi, size=shape).astype(dt)
    x = RNG.standard_normal(shape)
    if dt.kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dt)


def tol(name, k):
    k = max(k, 1)
    return {"float32": (1e-4, 1e-4 * k ** 0.5), "complex64": (1e-4, 1e-4 * k ** 0.5),
            "float64": (1e-10, 1e-12 * k), "complex128": (1e-10, 1e-12 * k),
            "float16": (2e-3, 1e-3 * k ** 0.5), "bfloat16": (1.6e-2, 1e-2 * k ** 0.5)}.get(name)


SHAPES = [(1, 64, 128), (1, 1000, 257), (2, 33, 17), (4, 256, 512), (8, 96, 40), (9, 64, 64),
          (7, 1, 5), (64, 64, 64), (513, 1000, 257)]


@pytest.mark.parametrize("name", FLOATS + INTS)
def test_matmul_2d(name):
    for n, k, m in SHAPES:
        if DT[name].kind in "iu" and n * k * m > 2e7:
            continue
        diff("ingot_matmul", tensor(rand((n, k), name)), tensor(rand((k, m), name)),
             tol=tol(name, k))


@pytest.mark.parametrize("name", FLOATS + INTS)
def test_layouts(name):
    n, k, m = 37, 70, 45
    a, b = rand((n, k), name), rand((k, m), name)
    t = tol(name, k)
    for ta in (tensor(a), transposed(a), strided(a)):
        for tb in (tensor(b), transposed(b), strided(b)):
            diff("ingot_matmul", ta, tb, tol=t)
    # decode shape against a transposed weight (the GEMV path) and its layouts
    for rows in (1, 2, 3, 8):
        x, w = rand((rows, 256), name), rand((96, 256), name)
        diff("ingot_matmul", tensor(x), transposed(w.T), tol=tol(name, 256))
        diff("ingot_matmul", strided(x), transposed(w.T), tol=tol(name, 256))


@pytest.mark.parametrize("name", FLOATS + INTS)
def test_batched_and_broadcast(name):
    k = 24
    t = tol(name, k)
    a, b = rand((3, 5, k), name), rand((3, k, 7), name)
    diff("ingot_bmm", tensor(a), tensor(b), tol=t)
    diff("ingot_bmm", transposed(a), transposed(b), tol=t)
    diff("ingot_bmm", strided(a), tensor(b), tol=t)
    diff("ingot_matmul", tensor(a), tensor(b), tol=t)
    # batch broadcast: [2,1,n,k] x [3,k,m]; shared right matrix: [4,n,k] x [k,m]
    diff("ingot_matmul", tensor(rand((2, 1, 5, k), name)), tensor(rand((3, k, 6), name)), tol=t)
    diff("ingot_matmul", tensor(rand((4, 5, k), name)), tensor(rand((k, 6), name)), tol=t)
    diff("ingot_matmul", tensor(rand((5, k), name)), tensor(rand((4, k, 6), name)), tol=t)
    # an expanded (stride-0) batch on each side
    e = call("ingot_expand", tensor(rand((1, 5, k), name)), 3, [4, 5, k])
    diff("ingot_bmm", e, tensor(rand((4, k, 6), name)), tol=t)
    e = call("ingot_expand", tensor(rand((1, k, 6), name)), 3, [4, k, 6])
    diff("ingot_bmm", tensor(rand((4, 5, k), name)), e, tol=t)
    # many small batches (more than one grid row of batches)
    diff("ingot_bmm", tensor(rand((70000, 2, 3), name)), tensor(rand((70000, 3, 2), name)),
         tol=tol(name, 3))


@pytest.mark.parametrize("name", FLOATS + INTS)
def test_vectors_and_empty(name):
    k = 50
    t = tol(name, k)
    v, w = rand((k,), name), rand((k,), name)
    A, Bm = rand((6, k), name), rand((k, 6), name)
    diff("ingot_matmul", tensor(v), tensor(w), tol=t)
    diff("ingot_matmul", tensor(v), tensor(Bm), tol=t)
    diff("ingot_matmul", tensor(A), tensor(v), tol=t)
    diff("ingot_matmul", tensor(rand((3, 6, k), name)), tensor(v), tol=t)
    # k == 0 writes zeros; zero-size results
    diff("ingot_matmul", tensor(rand((4, 0), name)), tensor(rand((0, 5), name)))
    diff("ingot_matmul", tensor(rand((0, 3), name)), tensor(rand((3, 5), name)))
    diff("ingot_bmm", tensor(rand((0, 2, 3), name)), tensor(rand((0, 3, 4), name)))
    diff("ingot_bmm", tensor(rand((2, 3, 0), name)), tensor(rand((2, 0, 4), name)))
    # shape errors on both devices
    diff("ingot_matmul", tensor(rand((3, 4), name)), tensor(rand((5, 6), name)))
    diff("ingot_bmm", tensor(rand((2, 3, 4), name)), tensor(rand((3, 4, 5), name)))


@pytest.mark.parametrize("name", INTS)
def test_integer_wraparound(name):
    a, b = rand((33, 257), name, wide=True), rand((257, 19), name, wide=True)
    diff("ingot_matmul", tensor(a), tensor(b))
    diff("ingot_matmul", transposed(a), strided(b))


@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16"])
def test_special_values(name):
    a, b = rand((6, 40), name), rand((40, 9), name)
    a[0, 0] = np.nan
    a[1, 1] = np.inf
    a[2, 2] = -np.inf
    b[:, 3] = 0  # inf * 0 = NaN in column 3 of rows 1 and 2
    a[3, :] = -0.0
    diff("ingot_matmul", tensor(a), tensor(b), tol=tol(name, 40))
    if name == "float16":  # overflow of the f32 sum when rounded to f16
        diff("ingot_matmul", tensor(np.full((2, 64), 200.0, np.float16)),
             tensor(np.full((64, 3), 200.0, np.float16)))


def test_large_and_misaligned():
    # > 1M output elements, and views whose data pointers are not 16-byte aligned
    diff("ingot_matmul", tensor(rand((1100, 64), "float32")), tensor(rand((64, 1000), "float32")),
         tol=tol("float32", 64))
    for name in ["float32", "float16", "bfloat16", "float64", "complex64"]:
        base_a, base_b = rand((40, 65), name), rand((65, 33), name)
        res = []
        for dev in (CPU, CUDA):
            va = call("ingot_narrow", call("ingot_to", tensor(base_a), dev), 1, 1, 64)
            vb = call("ingot_narrow", call("ingot_to", tensor(base_b), dev), 0, 1, 64)
            res.append(to_numpy(call("ingot_matmul", va, vb)))
        rtol, atol = tol(name, 64)
        np.testing.assert_allclose(res[1].astype(np.complex128), res[0].astype(np.complex128),
                                   rtol=rtol, atol=atol)


def test_allow_tf32():
    a, b = rand((300, 512), "float32"), rand((512, 200), "float32")
    assert not lib.ingot_get_allow_tf32()
    lib.ingot_set_allow_tf32(True)
    try:
        diff("ingot_matmul", tensor(a), tensor(b), tol=(5e-3, 5e-3 * 512 ** 0.5))
    finally:
        lib.ingot_set_allow_tf32(False)
    diff("ingot_matmul", tensor(a), tensor(b), tol=tol("float32", 512))


def test_mixed_devices_error():
    with pytest.raises(IngotError):
        call("ingot_matmul", call("ingot_to", tensor(rand((3, 4), "float32")), CUDA),
             tensor(rand((4, 5), "float32")))


def test_repeat_uses_cached_algorithm():
    # the same shape twice (second call hits the algorithm cache), then another shape
    a, b = rand((128, 256), "bfloat16"), rand((256, 64), "bfloat16")
    for _ in range(2):
        diff("ingot_matmul", tensor(a), tensor(b), tol=tol("bfloat16", 256))
    diff("ingot_matmul", tensor(b.T.copy()), tensor(a.T.copy()), tol=tol("bfloat16", 128))
