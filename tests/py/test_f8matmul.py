"""f8matmul_fused / f8matmul_swiglu (include/ingot/nn.h: f8e4m3fn weight rows
with a per-row f32 scale) on the CPU against numpy.

Reference: W dequantised by ml_dtypes (f8e4m3fn -> float64, independent of
ingot's decoder) times its row scales, then float64 products: x (normalised
in float32 by rms_norm_ref when a norm is given, or h = swiglu_ref(gate, up))
@ W^T (+ res). Bound 3e-5 * (|x_n| @ |W|^T + |res|) + 1e-6 (f32 accumulation
in OpenBLAS's order, the scale applied to the f32 sum). Odd K and N, M from 1
to 33, rows padded with garbage bytes (never read: the same bits as
unpadded), special values (errors: test_nn_errors.py).
"""
import numpy as np
import pytest

from ingot_ctypes import call, strided, tensor, to_numpy
from nn_cases import check_fused_ref, f8table, opt, seed, swiglu_ref

MS = [1, 2, 5, 8, 9, 33]


@pytest.mark.parametrize("m", MS)
@pytest.mark.parametrize("k", [37, 256])
@pytest.mark.parametrize("use_norm,use_res", [(False, False), (True, False), (False, True),
                                              (True, True)])
def test_f8matmul_fused(m, k, use_norm, use_res):
    rng = np.random.default_rng(seed("f8", m, k, use_norm, use_res))
    n = 41
    wq, scale, w64 = f8table(n, k, rng)
    x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    norm = rng.standard_normal(k).astype(np.float32) if use_norm else None
    res = (rng.standard_normal((m, n)) * 10).astype(np.float32) if use_res else None
    y = to_numpy(call("ingot_f8matmul_fused", tensor(x), tensor(wq), tensor(scale), k,
                      opt(norm, tensor), 1e-5, opt(res, tensor)))
    check_fused_ref(y, x, w64, norm, 1e-5, res)


@pytest.mark.parametrize("m", [1, 8, 33])
def test_f8matmul_padded_rows_and_strided_x(m):
    """Rows of K bytes padded to 16 and by 7 more (garbage, never read): the
    same bits as unpadded; a strided x gives the same bits as contiguous."""
    rng = np.random.default_rng(seed("f8pad", m))
    n, k = 23, 45
    wq, scale, w64 = f8table(n, k, rng)
    x = rng.standard_normal((m, k)).astype(np.float32)
    want = to_numpy(call("ingot_f8matmul_fused", tensor(x), tensor(wq), tensor(scale), k, None,
                         0.0, None))
    check_fused_ref(want, x, w64, None, 0.0, None)
    for extra in (-k % 16, -k % 16 + 7):
        wp = np.concatenate([wq, rng.integers(0, 256, (n, extra), dtype=np.uint8)], axis=1)
        y = to_numpy(call("ingot_f8matmul_fused", strided(x), tensor(wp), tensor(scale), k, None,
                          0.0, None))
        np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("m", [1, 4, 12])
@pytest.mark.parametrize("use_res", [False, True])
def test_f8matmul_swiglu(m, use_res):
    rng = np.random.default_rng(seed("f8glu", m, use_res))
    n, k = 29, 48
    wq, scale, w64 = f8table(n, k, rng)
    gu = rng.standard_normal((m, 2 * k)).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32) if use_res else None
    y = to_numpy(call("ingot_f8matmul_swiglu", tensor(gu), tensor(wq), tensor(scale), k,
                      opt(res, tensor)))
    check_fused_ref(y, swiglu_ref(gu[:, :k], gu[:, k:]), w64, None, 0.0, res)


def test_f8matmul_special_values():
    """NaN in x: its row NaN; an f8 NaN byte (0x7f) in W: its column NaN; inf
    in x: +-inf where the reference has them."""
    rng = np.random.default_rng(5)
    n, k = 6, 32
    wq, scale, w64 = f8table(n, k, rng)
    wq[2, 7] = 0x7F  # f8e4m3fn NaN
    w64[2, 7] = np.nan
    x = rng.standard_normal((3, k)).astype(np.float32)
    x[0, 3] = np.nan
    x[1, 5] = np.inf
    y = to_numpy(call("ingot_f8matmul_fused", tensor(x), tensor(wq), tensor(scale), k, None, 0.0,
                      None))
    with np.errstate(invalid="ignore"):
        ref = x.astype(np.float64) @ w64.T
    assert np.isnan(y[0]).all() and np.isnan(y[:, 2]).all()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(y), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(y), np.isneginf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(y[fin], ref[fin], rtol=1e-4, atol=1e-5)


def test_f8matmul_empty():
    wq, scale, _ = f8table(4, 16, np.random.default_rng(0))
    y = call("ingot_f8matmul_fused", tensor(np.zeros((0, 16), np.float32)), tensor(wq),
             tensor(scale), 16, None, 0.0, None)
    assert y.shape == (0, 4)

