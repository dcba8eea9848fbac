"""f8matmul_fused / f8matmul_swiglu (f8e4m3fn weight rows, per-row f32
scales) on CUDA against the CPU backend (itself checked against numpy in
test_f8matmul.py).

Paths: M <= 8 the dense GEMV (gemv.cu) with f8 weights: gemvx_kernel when K
is a multiple of 16 and rows 16-byte aligned (the norm fused in its staging,
scale and res in its epilogue: one launch; one row with K a multiple of 64
up to 4096: gemv_tc_kernel, the dots on tensor cores with x as f16 hi + lo
times a power of 2: K = 256, 2048, 4096 here, the range and special-value
cases included), gemv_kernel otherwise (odd K,
rows padded by 7 bytes: scalar loads; the norm by rms_norm first); M > 8, or
X too large to stage (M = 8, K = 6144): W times its scales dequantised to f32
scratch, the MATMUL kernel, res added. Qwen3-30B-A3B's attention shapes
(q|k|v N = 5120, K = 2048; o N = 2048, K = 4096) at M = 1..8.
Tolerance: both accumulate in f32 in different orders (and the prefill path
rounds W * scale once more), |cuda - cpu| <= 2e-5 * (|x_n| @ |W|^T + |res|) +
1e-6; NaNs in the same places. Graph capture: replays on new inputs match.
"""
import numpy as np
import pytest

from cuda_diff import CUDA, needs_cuda
from ingot_ctypes import call, lib, tensor, to_numpy
from nn_cases import check_fused_pair, f8table, fused_ref, opt, seed, swiglu_ref

pytestmark = needs_cuda


def dev(a):
    return call("ingot_to", tensor(a), CUDA)


def both(wq, scale, k, x, norm, res, extra, rng, eps=1e-5):
    """f8matmul_fused on the CPU (unpadded W) and on CUDA (rows padded by extra)."""
    want = to_numpy(call("ingot_f8matmul_fused", tensor(x), tensor(wq), tensor(scale), k,
                         opt(norm, tensor), eps, opt(res, tensor)))
    wp = np.concatenate([wq, rng.integers(0, 256, (wq.shape[0], extra), dtype=np.uint8)], axis=1)
    got = to_numpy(call("ingot_f8matmul_fused", dev(x), dev(wp), dev(scale), k, opt(norm, dev),
                        eps, opt(res, dev)))
    return got, want


def check_close(got, want, x, w64, norm, eps, res):
    check_fused_pair(got, want, x, w64, norm, eps, res, 2e-5)


def fused_case(tag, m, n, k, use_norm=True, use_res=True, xscale=1.0):
    """Random x [m, k] (times xscale), norm and residual (when asked) through
    both(), against the CPU within check_close's bound."""
    rng = np.random.default_rng(seed(*tag))
    wq, scale, w64 = f8table(n, k, rng)
    x = (rng.standard_normal((m, k)) * xscale).astype(np.float32)
    norm = rng.standard_normal(k).astype(np.float32) if use_norm else None
    res = rng.standard_normal((m, n)).astype(np.float32) if use_res else None
    got, want = both(wq, scale, k, x, norm, res, 0, rng)
    check_close(got, want, x, w64, norm, 1e-5, res)


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 9, 12, 33, 70])
@pytest.mark.parametrize("k,extra", [(256, 0), (48, 0), (37, 11), (64, 7)])
@pytest.mark.parametrize("use_norm,use_res", [(False, False), (True, True), (True, False),
                                              (False, True)])
def test_f8matmul_fused(m, k, extra, use_norm, use_res):
    rng = np.random.default_rng(seed("cf8", m, k, extra, use_norm, use_res))
    n = 67
    wq, scale, w64 = f8table(n, k, rng)
    x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    norm = rng.standard_normal(k).astype(np.float32) if use_norm else None
    res = (rng.standard_normal((m, n)) * 10).astype(np.float32) if use_res else None
    got, want = both(wq, scale, k, x, norm, res, extra, rng)
    check_close(got, want, x, w64, norm, 1e-5, res)


@pytest.mark.parametrize("n,k", [(5120, 2048), (2048, 4096), (96, 6144)])
@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_f8matmul_model_shapes(n, k, m):
    """Qwen3-30B-A3B's q|k|v and o (norm fused, residual added); K = 6144 at
    M = 8 stages too much X: the dequantise path."""
    fused_case(("cf8shape", n, k, m), m, n, k)


@pytest.mark.parametrize("m", [1, 4, 8, 12])
@pytest.mark.parametrize("k", [768, 40])
@pytest.mark.parametrize("use_res", [False, True])
def test_f8matmul_swiglu(m, k, use_res):
    rng = np.random.default_rng(seed("cf8glu", m, k, use_res))
    n = 53
    wq, scale, w64 = f8table(n, k, rng)
    gu = rng.standard_normal((m, 2 * k)).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32) if use_res else None
    want = to_numpy(call("ingot_f8matmul_swiglu", tensor(gu), tensor(wq), tensor(scale), k,
                         opt(res, tensor)))
    got = to_numpy(call("ingot_f8matmul_swiglu", dev(gu), dev(wq), dev(scale), k, opt(res, dev)))
    check_close(got, want, swiglu_ref(gu[:, :k], gu[:, k:]), w64, None, 0.0, res)


@pytest.mark.parametrize("m", [1, 8, 12])
def test_f8matmul_special_values(m):
    """NaN/inf in x and an f8 NaN byte in W: NaNs where the CPU has them."""
    rng = np.random.default_rng(seed("cf8special", m))
    n, k = 40, 128
    wq, scale, w64 = f8table(n, k, rng)
    wq[3, 9] = 0xFF  # f8e4m3fn -NaN
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[0, 1] = np.nan
    if m > 1:
        x[1, 2] = np.inf
    got, want = both(wq, scale, k, x, None, None, 0, rng)
    assert np.isnan(want[:, 3]).all() and np.isnan(want[0]).all()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.sign(got[np.isinf(want)]), np.sign(want[np.isinf(want)]))
    xf = np.where(np.isfinite(x), x, 0)
    bound = 2e-5 * (np.abs(xf.astype(np.float64)) @ np.nan_to_num(np.abs(w64)).T) + 1e-6
    assert np.all(np.abs(got[fin].astype(np.float64) - want[fin]) <= bound[fin])


def test_f8matmul_graph_capture():
    """The norm-fused one-launch GEMV (M = 1, 8) and the prefill path (M = 12)
    captured in a graph; replays on new inputs match the CPU."""
    rng = np.random.default_rng(seed("cf8graph"))
    n, k = 160, 1024
    wq, scale, w64 = f8table(n, k, rng)
    wd, sd = dev(wq), dev(scale)
    norm = rng.standard_normal(k).astype(np.float32)
    nd = dev(norm)
    xs = {m: dev(np.zeros((m, k), np.float32)) for m in (1, 8, 12)}
    rs = {m: dev(np.zeros((m, n), np.float32)) for m in (1, 8, 12)}

    def forward():
        return {m: call("ingot_f8matmul_fused", xs[m], wd, sd, k, nd, 1e-5, rs[m]) for m in xs}

    forward()
    assert lib.ingot_graph_begin(CUDA) == 0, lib.ingot_last_error()
    try:
        out = forward()
    finally:
        g = lib.ingot_graph_end(CUDA)
    assert g, lib.ingot_last_error()
    try:
        for _ in range(2):
            vals = {m: (rng.standard_normal((m, k)).astype(np.float32),
                        rng.standard_normal((m, n)).astype(np.float32)) for m in xs}
            for m, (x, r) in vals.items():
                call("ingot_copy_", xs[m], dev(x))
                call("ingot_copy_", rs[m], dev(r))
            assert lib.ingot_graph_replay(g) == 0, lib.ingot_last_error()
            for m, (x, r) in vals.items():
                want = to_numpy(call("ingot_f8matmul_fused", tensor(x), tensor(wq), tensor(scale),
                                     k, tensor(norm), 1e-5, tensor(r)))
                check_close(to_numpy(out[m]), want, x, w64, norm, 1e-5, r)
    finally:
        out = None
        lib.ingot_graph_destroy(g)


@pytest.mark.parametrize("m", [1, 2, 3, 8])
@pytest.mark.parametrize("n,k", [(5120, 2048), (67, 256), (1001, 2048), (130, 16), (2048, 4096)])
def test_f8matmul_epilogue(m, n, k):
    """Row scales and residual in the epilogue (one-row products load them
    with the tile's weights; n % tile != 0: the last tile's columns past n
    are neither loaded nor stored): the CPU bound, norm on."""
    fused_case(("cf8epi", m, n, k), m, n, k)


@pytest.mark.parametrize("n,k", [(5120, 2048), (67, 256), (1001, 2048), (130, 16), (2048, 4096),
                                 (40, 48)])
@pytest.mark.parametrize("use_norm,use_res", [(True, True), (False, False), (False, True)])
def test_f8matmul_one_row(n, k, use_norm, use_res):
    """One row (decode: x staged and normed in one pass), rows of 1 to 256
    chunks: the CPU bound."""
    fused_case(("cf8row", n, k, use_norm, use_res), 1, n, k, use_norm, use_res, xscale=3)


@pytest.mark.parametrize("mag", [1e30, 3e4, 1e-6, 1e-30])
@pytest.mark.parametrize("use_norm", [False, True])
def test_f8matmul_one_row_range(mag, use_norm):
    """One row with x (and the norm weights) far from 1 and a spread of
    magnitudes in the row: a relative bound only (no absolute slack at
    1e-30)."""
    rng = np.random.default_rng(seed("cf8range", mag, use_norm))
    n, k = 67, 256
    wq, scale, w64 = f8table(n, k, rng)
    # With the norm, the magnitude goes into its weights (x^2 must not
    # overflow or vanish in the sum of squares).
    xmag = 1.0 if use_norm else mag
    x = (rng.standard_normal((1, k)) * xmag * np.exp(rng.uniform(-6, 0, k))).astype(np.float32)
    norm = (rng.standard_normal(k) * mag).astype(np.float32) if use_norm else None
    got, want = both(wq, scale, k, x, norm, None, 0, rng)
    assert np.isfinite(want).all() and np.isfinite(got).all()
    _, m64 = fused_ref(x, w64, norm, 1e-5, None)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(err <= 2e-5 * m64), f"max rel err {np.max(err / m64)}"


@pytest.mark.parametrize("case", ["inf", "nan", "wnan", "norm_inf"])
def test_f8matmul_one_row_special(case):
    """One row with an inf or NaN in x, a NaN byte in W or an inf norm
    weight: NaN and inf (with sign) where the CPU has them, the rest within
    the bound."""
    rng = np.random.default_rng(seed("cf8rowsp", case))
    n, k = 40, 128
    wq, scale, w64 = f8table(n, k, rng)
    x = rng.standard_normal((1, k)).astype(np.float32)
    norm = None
    if case == "inf":
        x[0, 2] = -np.inf
    elif case == "nan":
        x[0, 5] = np.nan
    elif case == "wnan":
        wq[3, 9] = 0x7F  # f8e4m3fn NaN
    else:
        norm = rng.standard_normal(k).astype(np.float32)
        norm[7] = np.inf
    got, want = both(wq, scale, k, x, norm, None, 0, rng)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isinf(got), np.isinf(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(np.sign(got[inf]), np.sign(want[inf]))
    fin = np.isfinite(want)
    if fin.any():
        xn = x if norm is None else np.where(np.isfinite(norm), x, 0)
        _, m64 = fused_ref(np.where(np.isfinite(xn), xn, 0), np.nan_to_num(w64), None, 1e-5, None)
        err = np.abs(got[fin].astype(np.float64) - want[fin].astype(np.float64))
        assert np.all(err <= 2e-5 * m64[fin] + 1e-6)
