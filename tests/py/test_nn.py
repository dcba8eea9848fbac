"""Fused transformer ops (include/ingot/nn.h) on the CPU against numpy.

qmatmul / qget_rows: W dequantised by gguf.quants.dequantize (independent of
ingot's decoder). qget_rows is exact (the decoders are bit-exact); qmatmul is
checked against float64 x @ W^T with |err| <= 3e-5 * (|x| @ |W|^T) + 1e-6 (f32
accumulation, both the matvec path M <= 8 and the dequantise + sgemm path).
Padded rows (W [N, S] with S > row bytes, garbage in the padding) give the
same results. qmatmul_fused: x normalised in float32 by numpy (rms_norm_ref),
then float64 products, + res; bound 3e-5 * (|x_n| @ |W|^T + |res|) + 1e-6
(the normalisations differ by their f32 sums: a few ulps of 1/rms).
qmatmul_swiglu: h = silu(gate) * up by numpy in float32 (swiglu_ref), then
as qmatmul_fused without norm; bit-identical to swiglu then qmatmul_fused.
rms_norm / swiglu: numpy in float32, rounded to the input dtype; results
within 1 ulp-ish of it (rtol 1e-5 f32, 1e-2 bf16, 2e-3 f16).
"""
import numpy as np
import pytest

from ingot_ctypes import IngotError, call, strided, tensor, to_numpy
from nn_cases import (FLOATS, QTYPES, check_fused_ref, pad16, pad_rows, qcase_special, qtable,
                      rms_norm_ref, seed, swiglu_ref)

MS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 33]
RTOL = {"float32": 1e-5, "bfloat16": 1e-2, "float16": 2e-3}


def check_qmatmul(y, x, w64):
    xs = x.astype(np.float64)
    ref = xs @ w64.T
    bound = 3e-5 * (np.abs(xs) @ np.abs(w64).T) + 1e-6
    err = np.abs(y.astype(np.float64) - ref)
    assert np.all(err <= bound), f"max err {err.max()} (bound {bound.ravel()[err.argmax()]})"


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("m", MS)
def test_qmatmul(name, m):
    rng = np.random.default_rng(seed(name, m))
    n = 37  # odd N
    tid, cols, wq, w64 = qtable(name, n, 3, rng)
    x = rng.standard_normal((m, cols)).astype(np.float32)
    y = to_numpy(call("ingot_qmatmul", tensor(x), tensor(wq), tid, cols))
    assert y.shape == (m, n) and y.dtype == np.float32
    check_qmatmul(y, x, w64)


@pytest.mark.parametrize("name", ["Q4_1", "Q8_0", "Q6_K"])
def test_qmatmul_strided_x_and_larger(name):
    rng = np.random.default_rng(7)
    tid, cols, wq, w64 = qtable(name, 301, 8, rng)
    for m in (1, 8, 70):
        x = rng.standard_normal((m, cols)).astype(np.float32)
        y = to_numpy(call("ingot_qmatmul", strided(x), tensor(wq), tid, cols))
        check_qmatmul(y, x, w64)


def test_qmatmul_special_values():
    tid, cols, wq, w64, x = qcase_special("Q4_1", 5, 2, 2, {(0, 3): np.nan, (1, 5): np.inf}, 3)
    y = to_numpy(call("ingot_qmatmul", tensor(x), tensor(wq), tid, cols))
    ref = x.astype(np.float64) @ w64.T
    assert np.isnan(y[0]).all()
    np.testing.assert_array_equal(np.isposinf(y[1]), np.isposinf(ref[1]))
    np.testing.assert_array_equal(np.isneginf(y[1]), np.isneginf(ref[1]))


def test_qmatmul_empty():
    tid, cols, wq, _ = qtable("Q8_0", 4, 1, np.random.default_rng(0))
    y = call("ingot_qmatmul", tensor(np.zeros((0, cols), np.float32)), tensor(wq), tid, cols)
    assert y.shape == (0, 4)


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("m", [1, 5, 8, 9, 33])
def test_qmatmul_padded_rows(name, m):
    """Rows padded to 16 bytes and by 7 bytes more: the padding is never read."""
    rng = np.random.default_rng(seed(name, m, "pad"))
    tid, cols, wq, w64 = qtable(name, 23, 3, rng)
    x = rng.standard_normal((m, cols)).astype(np.float32)
    want = to_numpy(call("ingot_qmatmul", tensor(x), tensor(wq), tid, cols))
    for extra in (pad16(wq.shape[1]), pad16(wq.shape[1]) + 7):
        y = to_numpy(call("ingot_qmatmul", tensor(x), tensor(pad_rows(wq, extra, rng)), tid, cols))
        np.testing.assert_array_equal(y, want)
    check_qmatmul(want, x, w64)


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("m", [1, 3, 8, 12])
@pytest.mark.parametrize("use_norm,use_res", [(True, False), (False, True), (True, True)])
def test_qmatmul_fused(name, m, use_norm, use_res):
    rng = np.random.default_rng(seed(name, m, use_norm, use_res))
    tid, cols, wq, w64 = qtable(name, 19, 3, rng)
    wq = pad_rows(wq, pad16(wq.shape[1]), rng)
    x = (rng.standard_normal((m, cols)) * 3).astype(np.float32)
    norm = rng.standard_normal(cols).astype(np.float32) if use_norm else None
    res = rng.standard_normal((m, 19)).astype(np.float32) * 10 if use_res else None
    y = to_numpy(call("ingot_qmatmul_fused", tensor(x), tensor(wq), tid, cols,
                      None if norm is None else tensor(norm), 1e-5,
                      None if res is None else tensor(res)))
    check_fused_ref(y, x, w64, norm, 1e-5, res)


def test_qmatmul_fused_none_is_qmatmul():
    """No norm and no res: bit-identical to ingot_qmatmul (strided x too)."""
    rng = np.random.default_rng(41)
    tid, cols, wq, _ = qtable("Q6_K", 11, 1, rng)
    x = rng.standard_normal((4, cols)).astype(np.float32)
    y = to_numpy(call("ingot_qmatmul_fused", strided(x), tensor(wq), tid, cols, None, 0.0, None))
    np.testing.assert_array_equal(y, to_numpy(call("ingot_qmatmul", tensor(x), tensor(wq), tid,
                                                   cols)))


def test_qmatmul_fused_special_and_strided():
    """A NaN in x (with the norm) poisons its whole output row; an all-zero x
    row gives res exactly; a NaN/inf in res stays where it is; strided inputs."""
    rng = np.random.default_rng(42)
    tid, cols, wq, w64 = qtable("Q4_1", 9, 2, rng)
    x = rng.standard_normal((3, cols)).astype(np.float32)
    x[0, 5] = np.nan
    x[1] = 0
    norm = rng.standard_normal(cols).astype(np.float32)
    res = rng.standard_normal((3, 9)).astype(np.float32)
    res[2, 4], res[2, 6] = np.inf, np.nan
    y = to_numpy(call("ingot_qmatmul_fused", strided(x), tensor(wq), tid, cols, strided(norm),
                      1e-6, strided(res)))
    assert np.isnan(y[0]).all()
    np.testing.assert_array_equal(y[1], res[1])
    assert np.isposinf(y[2, 4]) and np.isnan(y[2, 6])
    keep = np.ones(9, bool)
    keep[[4, 6]] = False
    check_fused_ref(y[2:, keep], x[2:], w64[keep], norm, 1e-6, res[2:, keep])


def test_qmatmul_fused_empty():
    tid, cols, wq, _ = qtable("Q8_0", 4, 1, np.random.default_rng(0))
    y = call("ingot_qmatmul_fused", tensor(np.zeros((0, cols), np.float32)), tensor(wq), tid,
             cols, tensor(np.ones(cols, np.float32)), 1e-5,
             tensor(np.zeros((0, 4), np.float32)))
    assert y.shape == (0, 4)


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("m", [1, 3, 8, 12])
@pytest.mark.parametrize("use_res", [False, True])
def test_qmatmul_swiglu(name, m, use_res):
    rng = np.random.default_rng(seed(name, m, use_res, "glu"))
    tid, cols, wq, w64 = qtable(name, 21, 3, rng)
    wq = pad_rows(wq, pad16(wq.shape[1]), rng)
    gu = (rng.standard_normal((m, 2 * cols)) * 3).astype(np.float32)
    res = (rng.standard_normal((m, 21)) * 10).astype(np.float32) if use_res else None
    y = to_numpy(call("ingot_qmatmul_swiglu", tensor(gu), tensor(wq), tid, cols,
                      None if res is None else tensor(res)))
    check_fused_ref(y, swiglu_ref(gu[:, :cols], gu[:, cols:]), w64, None, 0.0, res)


def test_qmatmul_swiglu_is_swiglu_then_product():
    """The same bits as swiglu of the two halves then qmatmul_fused (+ res),
    strided inputs; a NaN gate or a -inf one (-inf / inf, as swiglu) poisons
    its row, an inf up another one."""
    rng = np.random.default_rng(43)
    tid, cols, wq, _ = qtable("Q4_1", 17, 2, rng)
    gu = (rng.standard_normal((5, 2 * cols)) * 4).astype(np.float32)
    gu[0, 3] = np.nan
    gu[1, 4], gu[1, cols + 4] = -np.inf, 2.0
    gu[2, cols + 7] = np.inf
    res = rng.standard_normal((5, 17)).astype(np.float32)
    t = tensor(gu)
    h = call("ingot_swiglu", call("ingot_narrow", t, 1, 0, cols),
             call("ingot_narrow", t, 1, cols, cols))
    want = to_numpy(call("ingot_qmatmul_fused", h, tensor(wq), tid, cols, None, 0.0,
                         tensor(res)))
    y = to_numpy(call("ingot_qmatmul_swiglu", strided(gu), tensor(wq), tid, cols, strided(res)))
    np.testing.assert_array_equal(y, want)
    assert np.isnan(y[:2]).all() and np.isfinite(y[3:]).all()


def test_qmatmul_swiglu_errors_and_empty():
    tid, cols, wq, _ = qtable("Q8_0", 4, 1, np.random.default_rng(0))
    for gu, res in ((np.zeros((2, cols), np.float32), None),  # [M, cols], not [M, 2 cols]
                    (np.zeros((2, 2 * cols + 1), np.float32), None),
                    (np.zeros((2, 2 * cols), np.float64), None),
                    (np.zeros((2, 2 * cols), np.float32), np.zeros((2, 5), np.float32))):
        with pytest.raises(IngotError, match="qmatmul_swiglu|qmatmul_fused"):
            call("ingot_qmatmul_swiglu", tensor(gu), tensor(wq), tid, cols,
                 None if res is None else tensor(res))
    y = call("ingot_qmatmul_swiglu", tensor(np.zeros((0, 2 * cols), np.float32)), tensor(wq), tid,
             cols, None)
    assert y.shape == (0, 4)


@pytest.mark.parametrize("name", QTYPES)
def test_qget_rows_padded(name):
    rng = np.random.default_rng(seed(name, "pad"))
    tid, cols, wq, w64 = qtable(name, 13, 3, rng)
    ids = np.array([12, 0, 7, 7, 3], np.int64)
    y = to_numpy(call("ingot_qget_rows", tensor(pad_rows(wq, pad16(wq.shape[1]) + 16, rng)), tid,
                      cols, tensor(ids)))
    np.testing.assert_array_equal(y, w64[ids].astype(np.float32))


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("idt", [np.int32, np.int64])
def test_qget_rows(name, idt):
    rng = np.random.default_rng(seed(name))
    tid, cols, wq, w64 = qtable(name, 29, 3, rng)
    ids = np.array([0, 28, 5, 5, 17, 1, 28], idt)
    y = to_numpy(call("ingot_qget_rows", tensor(wq), tid, cols, tensor(ids)))
    assert y.dtype == np.float32 and y.shape == (len(ids), cols)
    np.testing.assert_array_equal(y, w64[ids].astype(np.float32))


@pytest.mark.parametrize("name", ["Q4_K", "Q8_0", "BF16"])
def test_qget_rows_many(name):
    """Enough rows for the threaded path."""
    rng = np.random.default_rng(17)
    tid, cols, wq, w64 = qtable(name, 64, 4, rng)
    ids = rng.integers(0, 64, 500)
    y = to_numpy(call("ingot_qget_rows", tensor(wq), tid, cols, tensor(ids)))
    np.testing.assert_array_equal(y, w64[ids].astype(np.float32))


def test_qget_rows_bad_id():
    tid, cols, wq, _ = qtable("Q4_1", 6, 1, np.random.default_rng(0))
    for bad in ([0, 6], [-1]):
        with pytest.raises(IngotError, match="qget_rows.*out of bounds"):
            call("ingot_qget_rows", tensor(wq), tid, cols, tensor(np.array(bad, np.int64)))


@pytest.mark.parametrize("dt", list(FLOATS))
@pytest.mark.parametrize("shape", [(1, 7), (5, 576), (2, 3, 129), (4, 2048)])
@pytest.mark.parametrize("wf32", [True, False])
def test_rms_norm(dt, shape, wf32):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(shape) * 3).astype(FLOATS[dt])
    w = rng.standard_normal(shape[-1]).astype(np.float32 if wf32 else FLOATS[dt])
    y = to_numpy(call("ingot_rms_norm", tensor(x), tensor(w), 1e-5))
    assert y.dtype == x.dtype and y.shape == x.shape
    ref = rms_norm_ref(x, w, 1e-5)
    np.testing.assert_allclose(y.astype(np.float64), ref.astype(np.float64), rtol=RTOL[dt],
                               atol=RTOL[dt] * 1e-2)


def test_rms_norm_strided_and_special():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    x[1, 4] = np.nan
    x[2] = 0  # all-zero row: eps keeps it finite (zeros)
    w = rng.standard_normal(64).astype(np.float32)
    y = to_numpy(call("ingot_rms_norm", strided(x), tensor(w), 1e-6))
    assert np.isnan(y[1]).all()
    np.testing.assert_array_equal(y[2], np.zeros(64, np.float32))
    np.testing.assert_allclose(y[0], rms_norm_ref(x[:1], w, 1e-6)[0], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dt", list(FLOATS))
@pytest.mark.parametrize("shape", [(1,), (7, 3), (3, 1537), (70000,)])
def test_swiglu(dt, shape):
    rng = np.random.default_rng(13)
    g = (rng.standard_normal(shape) * 4).astype(FLOATS[dt])
    u = rng.standard_normal(shape).astype(FLOATS[dt])
    y = to_numpy(call("ingot_swiglu", tensor(g), tensor(u)))
    assert y.dtype == g.dtype and y.shape == g.shape
    np.testing.assert_allclose(y.astype(np.float64), swiglu_ref(g, u).astype(np.float64),
                               rtol=RTOL[dt], atol=RTOL[dt] * 1e-2)


def test_swiglu_special_and_strided():
    g = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 80.0, -100.0, 1e-40], np.float32)
    u = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], np.float32)
    y = to_numpy(call("ingot_swiglu", strided(g), tensor(u)))
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(y, swiglu_ref(g, u), rtol=1e-6, atol=1e-44, equal_nan=True)


@pytest.mark.parametrize("dt", list(FLOATS))
@pytest.mark.parametrize("T,F", [(1, 1536), (5, 7), (33, 24)])
def test_swiglu_halves_of_one_product(dt, T, F):
    """gate and up as the column halves of one [T, 2F] tensor (row-strided
    views, read in place) and as 3-D views of it."""
    rng = np.random.default_rng(14)
    gu = (rng.standard_normal((T, 2 * F)) * 4).astype(FLOATS[dt])
    t = tensor(gu)
    g, u = call("ingot_narrow", t, 1, 0, F), call("ingot_narrow", t, 1, F, F)
    want = swiglu_ref(gu[:, :F], gu[:, F:]).astype(np.float64)
    y = to_numpy(call("ingot_swiglu", g, u))
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=RTOL[dt], atol=RTOL[dt] * 1e-2)
    if F % 4 == 0:
        g3, u3 = [call("ingot_view", x, 3, [T, 4, F // 4]) for x in (g, u)]
        y3 = to_numpy(call("ingot_swiglu", g3, u3))
        np.testing.assert_array_equal(y3.reshape(T, F), y)
