"""The decode GEMV path (src/cuda/gemv.cu) against the CPU: matmul of X [n,k]
(n = 1..8) with the transpose view of a row-major weight W [m,k], which the
CUDA MATMUL kernel hands to cuda_gemv_try before cuBLASLt; and scaled_mm with
M <= 8 once that op exists. f32 X of 2-8 rows (and f32 X against bf16/f16
weights, QMATMUL's cuda_gemv_f32x: test_cuda_nn.py) takes gemvx_kernel (X
staged as float): test_linear_rows, test_large (8 rows of k = 4096: 128 KB of
staged X), test_batched_x_shared_weight, test_special_values and
test_f32_rows_strided_x (row-strided X views) cover it.

Tolerances: inputs are small integers where the test wants exact sums
(every order of float accumulation gives the same f32 value, so the rounded
result matches the CPU bit for bit); random normals use rtol of the dtype and
atol scaled by sqrt(k) (bf16/f16: rounding of the output dominates; f32: the
order of a k-long sum).
"""
import ctypes

import ml_dtypes
import numpy as np
import pytest

from cuda_diff import CUDA, diff, needs_cuda
from ingot_ctypes import call, lib, tensor, to_numpy

pytestmark = needs_cuda

BF16 = np.dtype(ml_dtypes.bfloat16)
F8 = np.dtype(ml_dtypes.float8_e4m3fn)
F8E5 = np.dtype(ml_dtypes.float8_e5m2)
DTS = [np.dtype(np.float32), np.dtype(np.float16), BF16]
RNG = np.random.default_rng(7)


def tol(dt, k):
    # Sums of k products of N(0,1) values in another order: the absolute error
    # grows like eps * k for float32 (k = 4096 gave 8e-5 on the H200).
    rtol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[np.dtype(dt).name]
    if np.dtype(dt) == np.float32:
        return (rtol, 1e-6 * max(k, 1))
    return (rtol, rtol * max(k, 1) ** 0.5)


def wt_view(w):
    """The transpose view [k,m] of a row-major weight W [m,k]: strides (1,k)."""
    return call("ingot_transpose", tensor(w), 0, 1)


def ints(shape, dt, lo=-3, hi=4):
    return RNG.integers(lo, hi, size=shape).astype(np.float32).astype(dt)


@pytest.mark.parametrize("dt", DTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("k,m", [(1000, 37), (1001, 13), (7, 5), (1, 3), (256, 64), (64, 1)])
def test_linear_rows(dt, n, k, m):
    x = RNG.standard_normal((n, k)).astype(dt)
    w = RNG.standard_normal((m, k)).astype(dt)
    diff("ingot_matmul", tensor(x), wt_view(w), tol=tol(dt, k))


@pytest.mark.parametrize("dt", DTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [1, 3, 8])
def test_exact_small_ints(dt, n):
    # Integer-valued operands: exact f32 sums, so the result must equal the CPU's bits.
    k, m = 1000, 37
    diff("ingot_matmul", tensor(ints((n, k), dt)), wt_view(ints((m, k), dt)), tol=(0, 0))


def test_vector_times_weight():
    # 1-D x: matmul promotes it to [1,k] and drops the dim again.
    k, m = 515, 77
    x = RNG.standard_normal(k).astype(BF16)
    w = RNG.standard_normal((m, k)).astype(BF16)
    diff("ingot_matmul", tensor(x), wt_view(w), tol=tol(BF16, k))


@pytest.mark.parametrize("dt", DTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_large(dt, n):
    k, m = 4096, 14336
    x = RNG.standard_normal((n, k)).astype(dt)
    w = RNG.standard_normal((m, k)).astype(dt)
    diff("ingot_matmul", tensor(x), wt_view(w), tol=tol(dt, k))


@pytest.mark.parametrize("dt", [BF16, np.dtype(np.float32)], ids=lambda d: np.dtype(d).name)
def test_many_columns(dt):
    # The warp-per-tile path (many output columns) with a short k and a k % 8 tail.
    k, m = 67, 100003
    x = RNG.standard_normal((4, k)).astype(dt)
    w = RNG.standard_normal((m, k)).astype(dt)
    diff("ingot_matmul", tensor(x), wt_view(w), tol=tol(dt, k))


@pytest.mark.parametrize("dt", DTS, ids=lambda d: np.dtype(d).name)
def test_batched_x_shared_weight(dt):
    # [2,3,k] · 2-D weight: core folds the batch into 6 rows.
    k, m = 200, 45
    x = RNG.standard_normal((2, 3, k)).astype(dt)
    w = RNG.standard_normal((m, k)).astype(dt)
    diff("ingot_matmul", tensor(x), wt_view(w), tol=tol(dt, k))


@pytest.mark.parametrize("n", [2, 5, 8])
@pytest.mark.parametrize("pad", [4, 3])
def test_f32_rows_strided_x(n, pad):
    # f32 X rows of 2-8 (x staged as float) as a narrow view of a wider matrix:
    # row stride k + 4 (float4 staging) and k + 3 (scalar staging); m = 3001
    # columns of k = 2048 (8 rows: 64 KB of staged X, over the default 48 KB).
    k, m = 2048, 3001
    wide = RNG.standard_normal((n, k + pad)).astype(np.float32)
    w = RNG.standard_normal((m, k)).astype(np.float32)
    want = to_numpy(call("ingot_matmul", tensor(np.ascontiguousarray(wide[:, :k])), wt_view(w)))
    xd = call("ingot_narrow", call("ingot_to", tensor(wide), CUDA), 1, 0, k)
    wd = call("ingot_transpose", call("ingot_to", tensor(w), CUDA), 0, 1)
    got = to_numpy(call("ingot_matmul", xd, wd))
    rtol, atol = tol(np.float32, k)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def test_batched_weight_not_claimed_still_right():
    # A real batch of weights (B=2, n=1): not a GEMV case; cuBLASLt must answer.
    k, m = 64, 33
    x = RNG.standard_normal((2, 1, k)).astype(np.float32)
    w = RNG.standard_normal((2, m, k)).astype(np.float32)
    wt = call("ingot_transpose", tensor(w), 1, 2)
    diff("ingot_matmul", tensor(x), wt, tol=tol(np.float32, k))


@pytest.mark.parametrize("n", [9, 16, 64])
def test_more_rows_not_claimed_still_right(n):
    k, m = 128, 40
    x = RNG.standard_normal((n, k)).astype(BF16)
    w = RNG.standard_normal((m, k)).astype(BF16)
    diff("ingot_matmul", tensor(x), wt_view(w), tol=tol(BF16, k))


def test_row_major_weight_not_claimed_still_right():
    # W' contiguous [k,m] (not the transpose view): declined by the GEMV.
    k, m = 96, 40
    x = RNG.standard_normal((2, k)).astype(BF16)
    b = RNG.standard_normal((k, m)).astype(BF16)
    diff("ingot_matmul", tensor(x), tensor(b), tol=tol(BF16, k))


def test_f64_not_claimed_still_right():
    x = RNG.standard_normal((2, 50))
    w = RNG.standard_normal((9, 50))
    diff("ingot_matmul", tensor(x), wt_view(w), tol=(1e-12, 1e-12))


def test_zero_k_and_zero_m():
    for k, m in [(0, 5), (5, 0)]:
        x = np.ones((3, k), dtype=BF16)
        w = np.ones((m, k), dtype=BF16)
        diff("ingot_matmul", tensor(x), wt_view(w))


def _on_device_sliced(arr, start):
    """arr on the device as a view that starts `start` elements into a larger buffer
    (so its data pointer is not 16-byte aligned)."""
    flat = np.zeros(arr.size + start, dtype=arr.dtype)
    flat[start:] = arr.ravel()
    dev = call("ingot_to", tensor(flat), CUDA)
    sl = call("ingot_slice", dev, 0, start, start + arr.size, 1)
    return call("ingot_reshape", sl, arr.ndim, list(arr.shape))


@pytest.mark.parametrize("dt", DTS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("k", [1000, 1003])
def test_misaligned_pointers(dt, k):
    n, m = 3, 29
    x = ints((n, k), dt)
    w = ints((m, k), dt)
    want = to_numpy(call("ingot_matmul", tensor(x), wt_view(w)))
    xd = _on_device_sliced(x, 1)
    wd = call("ingot_transpose", _on_device_sliced(w, 1), 0, 1)
    got = to_numpy(call("ingot_matmul", xd, wd))
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_special_values():
    k, m = 64, 8
    x = np.ones((2, k), dtype=np.float32)
    w = np.ones((m, k), dtype=np.float32)
    w[0, 3] = np.nan
    w[1, 5] = np.inf
    w[2, 5] = -np.inf
    w[3, :2] = [np.inf, -np.inf]  # inf - inf = nan
    w[4, :] = -0.0
    x[1, 7] = np.nan
    diff("ingot_matmul", tensor(x), wt_view(w))


# ---- scaled_mm (f8 x f8 -> bf16/f16/f32 with f32 scales) ----
HAVE_SCALED_MM = hasattr(lib, "ingot_scaled_mm")
needs_scaled_mm = pytest.mark.skipif(not HAVE_SCALED_MM, reason="ingot_scaled_mm not in the library")

if HAVE_SCALED_MM:
    P = ctypes.c_void_p
    lib.ingot_scaled_mm.restype = P


def scaled_mm_args(mrows, k, n, wdt, sa_rowwise, sb_rowwise, bias_dt):
    a = RNG.standard_normal((mrows, k)).astype(F8)
    b = (RNG.standard_normal((n, k)) * 0.5).astype(wdt)
    sa = (RNG.random((mrows, 1)) + 0.5 if sa_rowwise else np.array([0.75])).astype(np.float32)
    sb = (RNG.random((1, n)) + 0.5 if sb_rowwise else np.array([1.25])).astype(np.float32)
    bias = None if bias_dt is None else RNG.standard_normal(n).astype(bias_dt)
    bt = call("ingot_transpose", tensor(b), 0, 1)  # [k,n] column-major
    return tensor(a), bt, tensor(sa), tensor(sb), None if bias is None else tensor(bias)


@needs_scaled_mm
@pytest.mark.parametrize("out_dt", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("mrows", [1, 3, 8])
@pytest.mark.parametrize("scales", [(False, False), (True, True), (False, True)],
                         ids=["tensorwise", "rowwise", "tensorwise_a_rowwise_b"])
def test_scaled_mm(out_dt, mrows, scales):
    from ingot_ctypes import ID
    k, n = 1040, 300
    a, b, sa, sb, _ = scaled_mm_args(mrows, k, n, F8, scales[0], scales[1], None)
    t = {"bfloat16": 1.6e-2, "float16": 2e-3, "float32": 1e-5}[out_dt]
    try:
        diff("ingot_scaled_mm", a, b, sa, sb, None, ID[out_dt], tol=(t, t * k ** 0.5))
    except TypeError:
        pytest.skip("ingot_scaled_mm signature differs from (a, b, sa, sb, bias, out_dtype)")


@needs_scaled_mm
@pytest.mark.parametrize("wdt", [F8, F8E5], ids=["e4m3", "e5m2"])
def test_scaled_mm_bias_and_weight_types(wdt):
    from ingot_ctypes import ID
    k, n = 4096, 1000
    a, b, sa, sb, bias = scaled_mm_args(4, k, n, wdt, False, True, BF16)
    try:
        diff("ingot_scaled_mm", a, b, sa, sb, bias, ID["bfloat16"], tol=(1.6e-2, 1.6e-2 * 64))
    except TypeError:
        pytest.skip("ingot_scaled_mm signature differs from (a, b, sa, sb, bias, out_dtype)")
