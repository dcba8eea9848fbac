"""Fused transformer ops (include/ingot/nn.h) on CUDA against the CPU backend.

qmatmul: every ggml type, M = 1..9 and 33 (M <= 8 is the block-reading GEMV,
M > 8 dequantise + cuBLASLt), odd N, decode shapes N=6144 K=2048 (M = 1..8),
SmolLM2's lm head (Q4_1, N=49152, K=576), a long row (Q4_K, K=14336),
unaligned weight rows (byte loads) and x (no float4 loads), and capture in a
CUDA graph. Tolerance: both devices accumulate in f32 in different orders, so
|cuda - cpu| <= 2e-5 * (|x| @ |W|^T) + 1e-6 (the CPU itself is checked against
float64 numpy in test_nn.py).
qget_rows: bit-exact (both decoders reproduce ggml's dequantize_row_*).
rms_norm / swiglu: cuda_diff's tolerances per dtype (f32 1e-5, f16 2e-3,
bf16 1.6e-2 relative: at most an ulp of the output dtype apart).
"""
import ctypes

import ml_dtypes
import numpy as np
import pytest

from cuda_diff import CUDA, diff, needs_cuda
from ingot_ctypes import call, lib, strided, tensor, to_numpy
from nn_cases import FLOATS, QTYPES, qcase_special, qtable, seed
from test_quant import TYPES, random_blocks

pytestmark = needs_cuda


def weights_fast(name, rows, cols, rng):
    """(type id, bytes [rows, row_bytes]) from random bits/values (large shapes:
    no numpy quantiser, no float64 copy)."""
    tid, _, bs, ts, _ = TYPES[name]
    if bs == 1:
        dt = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}[name]
        w = (rng.standard_normal((rows, cols)) * 0.05).astype(dt)
        return tid, w.view(np.uint8).reshape(rows, -1)
    return tid, random_blocks(name, rows * cols // bs, rng).reshape(rows, cols // bs * ts)


def both(wq, tid, cols, x, on_cuda=None):
    """qmatmul on the CPU and on CUDA (on_cuda: how to build the device args)."""
    want = to_numpy(call("ingot_qmatmul", tensor(x), tensor(wq), tid, cols))
    if on_cuda is None:
        xd, wd = call("ingot_to", tensor(x), CUDA), call("ingot_to", tensor(wq), CUDA)
    else:
        xd, wd = on_cuda()
    got = to_numpy(call("ingot_qmatmul", xd, wd, tid, cols))
    return got, want


def check_close(got, want, x, wabs):
    """wabs: |W| as float64 [N, K] or None (then the bound uses max|W| per row)."""
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.array_equal(np.isnan(got), np.isnan(want))
    bound = 2e-5 * (np.abs(x.astype(np.float64)) @ wabs.T) + 1e-6
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    err[np.isnan(err)] = 0
    at = np.unravel_index(err.argmax(), err.shape)
    assert np.all(err <= bound), f"max err {err.max()} at {at} (bound {bound[at]})"


def abs_deq(tid, wq, cols):
    """|W| from the CPU's own decoder (qget_rows of every row)."""
    ids = tensor(np.arange(wq.shape[0], dtype=np.int64))
    return np.abs(to_numpy(call("ingot_qget_rows", tensor(wq), tid, cols, ids))).astype(np.float64)


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6, 7, 8, 9, 33])
def test_qmatmul_small(name, m):
    rng = np.random.default_rng(seed(name, m, 1))
    tid, cols, wq, w64 = qtable(name, 37, 3, rng)
    x = rng.standard_normal((m, cols)).astype(np.float32)
    got, want = both(wq, tid, cols, x)
    check_close(got, want, x, np.abs(w64))


@pytest.mark.parametrize("name", QTYPES)
def test_qmatmul_decode_shape(name):
    """N=6144, K=2048 (a decode GEMV of a 2k-wide model), M = 1..8."""
    rng = np.random.default_rng(seed(name, 2))
    n, k = 6144, 2048
    tid, wq = weights_fast(name, n, k, rng)
    wabs = abs_deq(tid, wq, k)
    wd = call("ingot_to", tensor(wq), CUDA)
    for m in range(1, 9):
        x = rng.standard_normal((m, k)).astype(np.float32)
        got, want = both(wq, tid, k, x, lambda: (call("ingot_to", tensor(x), CUDA), wd))
        check_close(got, want, x, wabs)


@pytest.mark.parametrize("name,n,k,ms", [("Q4_1", 49152, 576, [1, 8, 9, 40]),
                                          ("Q8_0", 1536, 576, [1, 5, 64]),
                                          ("Q4_K", 1024, 14336, [1, 4, 17]),
                                          ("Q6_K", 4099, 768, [3, 8, 12])])
def test_qmatmul_large(name, n, k, ms):
    rng = np.random.default_rng(seed(name, n))
    tid, wq = weights_fast(name, n, k, rng)
    wabs = abs_deq(tid, wq, k)
    wd = call("ingot_to", tensor(wq), CUDA)
    for m in ms:
        x = rng.standard_normal((m, k)).astype(np.float32)
        got, want = both(wq, tid, k, x, lambda: (call("ingot_to", tensor(x), CUDA), wd))
        check_close(got, want, x, wabs)


def offset_view(arr, shape, off):
    """A contiguous CUDA view of arr's values that starts off elements into its
    storage (so its address is not 16-byte (or even 2-byte) aligned)."""
    flat = np.concatenate([np.zeros(off, arr.dtype), arr.ravel()])
    d = call("ingot_to", tensor(flat), CUDA)
    s = call("ingot_slice", d, 0, off, flat.size, 1)
    return call("ingot_view", s, len(shape), list(shape))


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("m", [1, 3, 8, 10])
@pytest.mark.parametrize("woff,xoff", [(1, 0), (2, 1), (0, 3)])
def test_qmatmul_unaligned(name, m, woff, xoff):
    """Weight rows at odd / 2-byte-only addresses (byte loads), x not 16-byte aligned."""
    rng = np.random.default_rng(seed(name, m, woff))
    tid, cols, wq, w64 = qtable(name, 21, 2, rng)
    x = rng.standard_normal((m, cols)).astype(np.float32)
    got, want = both(wq, tid, cols, x, lambda: (offset_view(x, x.shape, xoff),
                                                 offset_view(wq, wq.shape, woff)))
    check_close(got, want, x, np.abs(w64))


def test_qmatmul_strided_x_and_special():
    tid, cols, wq, w64, x = qcase_special("Q4_K", 13, 2, 4, {(1, 7): np.nan, (2, 9): np.inf}, 5)
    want = to_numpy(call("ingot_qmatmul", tensor(x), tensor(wq), tid, cols))
    got = to_numpy(call("ingot_qmatmul", call("ingot_to", strided(x), CUDA),
                        call("ingot_to", tensor(wq), CUDA), tid, cols))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("idt", [np.int32, np.int64])
def test_qget_rows(name, idt):
    rng = np.random.default_rng(seed(name, 3))
    tid, cols, wq, _ = qtable(name, 50, 5, rng)
    ids = tensor(rng.integers(0, 50, 300).astype(idt))
    diff("ingot_qget_rows", tensor(wq), tid, cols, ids, tol=(0, 0))


@pytest.mark.parametrize("name", QTYPES)
def test_qget_rows_unaligned_and_large(name):
    rng = np.random.default_rng(seed(name, 4))
    tid, wq = weights_fast(name, 1000, 4096, rng)
    ids = rng.integers(0, 1000, 77).astype(np.int64)
    want = to_numpy(call("ingot_qget_rows", tensor(wq), tid, 4096, tensor(ids)))
    for off in (0, 1, 2):
        got = to_numpy(call("ingot_qget_rows", offset_view(wq, wq.shape, off), tid, 4096,
                            call("ingot_to", tensor(ids), CUDA)))
        np.testing.assert_array_equal(got, want)


def test_qget_rows_bad_id():
    tid, cols, wq, _ = qtable("Q8_0", 6, 1, np.random.default_rng(0))
    diff("ingot_qget_rows", tensor(wq), tid, cols, tensor(np.array([0, 6], np.int64)))
    diff("ingot_qget_rows", tensor(wq), tid, cols, tensor(np.array([-1], np.int64)))


@pytest.mark.parametrize("dt", list(FLOATS))
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (5, 576), (2, 3, 129), (4, 2048),
                                   (3000, 576), (2, 16387)])
@pytest.mark.parametrize("wf32", [True, False])
def test_rms_norm(dt, shape, wf32):
    rng = np.random.default_rng(21)
    x = (rng.standard_normal(shape) * 3).astype(FLOATS[dt])
    w = rng.standard_normal(shape[-1]).astype(np.float32 if wf32 else FLOATS[dt])
    diff("ingot_rms_norm", tensor(x), tensor(w), 1e-5)


def test_rms_norm_special_and_strided():
    rng = np.random.default_rng(22)
    x = rng.standard_normal((4, 300)).astype(np.float32)
    x[1, 4] = np.nan
    x[2] = 0
    x[3, 0] = np.inf
    diff("ingot_rms_norm", strided(x), tensor(rng.standard_normal(300).astype(np.float32)), 1e-6)


@pytest.mark.parametrize("dt", list(FLOATS))
@pytest.mark.parametrize("shape", [(1,), (7, 3), (3, 1537), ((1 << 20) + 3,)])
def test_swiglu(dt, shape):
    rng = np.random.default_rng(23)
    g = (rng.standard_normal(shape) * 4).astype(FLOATS[dt])
    u = rng.standard_normal(shape).astype(FLOATS[dt])
    diff("ingot_swiglu", tensor(g), tensor(u))


@pytest.mark.parametrize("dt", list(FLOATS))
def test_swiglu_unaligned_special(dt):
    g = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 80.0, -100.0, 1e-30, 3.0, -2.5, 0.5] * 9,
                 FLOATS[dt])
    u = np.linspace(-3, 3, g.size).astype(FLOATS[dt])
    want = to_numpy(call("ingot_swiglu", tensor(g), tensor(u)))
    got = to_numpy(call("ingot_swiglu", offset_view(g, g.shape, 1), offset_view(u, u.shape, 3)))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol={"float32": 1e-5}.get(dt, 1.6e-2), atol=1e-30, equal_nan=True)


lib.ingot_graph_begin.argtypes = [type(CUDA)]
lib.ingot_graph_begin.restype = ctypes.c_int
lib.ingot_graph_end.argtypes = [type(CUDA)]
lib.ingot_graph_end.restype = ctypes.c_void_p
lib.ingot_graph_replay.argtypes = [ctypes.c_void_p]
lib.ingot_graph_replay.restype = ctypes.c_int
lib.ingot_graph_destroy.argtypes = [ctypes.c_void_p]
lib.ingot_graph_destroy.restype = None


def test_graph_capture_replay():
    """qget_rows -> rms_norm -> qmatmul (M=1 GEMV and M=12 prefill) -> swiglu,
    captured once and replayed on new inputs: no host sync inside, same
    results as the CPU."""
    rng = np.random.default_rng(31)
    tid, cols, wq, _ = qtable("Q4_1", 64, 6, rng)  # cols = 192
    wqd = call("ingot_to", tensor(wq), CUDA)
    norm_w = rng.standard_normal(cols).astype(np.float32)
    nwd = call("ingot_to", tensor(norm_w), CUDA)
    ids_d = call("ingot_to", tensor(np.zeros(12, np.int64)), CUDA)
    x1_d = call("ingot_to", tensor(np.zeros((1, cols), np.float32)), CUDA)

    def forward(ids, x1, w, nw):
        e = call("ingot_qget_rows", w, tid, cols, ids)  # [12, cols]
        h = call("ingot_rms_norm", e, nw, 1e-5)
        p = call("ingot_qmatmul", h, w, tid, cols)  # [12, 64]: prefill
        d = call("ingot_qmatmul", x1, w, tid, cols)  # [1, 64]: gemv
        return call("ingot_swiglu", p, call("ingot_expand", d, 2, [12, 64]))

    forward(ids_d, x1_d, wqd, nwd)  # warm-up (cuBLASLt handle, algorithm cache) as usual
    assert lib.ingot_graph_begin(CUDA) == 0, lib.ingot_last_error()
    try:
        out = forward(ids_d, x1_d, wqd, nwd)
    finally:
        g = lib.ingot_graph_end(CUDA)
    assert g, lib.ingot_last_error()
    try:
        for _ in range(3):
            ids = rng.integers(0, 64, 12).astype(np.int64)
            x1 = rng.standard_normal((1, cols)).astype(np.float32)
            call("ingot_copy_", ids_d, call("ingot_to", tensor(ids), CUDA))
            call("ingot_copy_", x1_d, call("ingot_to", tensor(x1), CUDA))
            assert lib.ingot_graph_replay(g) == 0, lib.ingot_last_error()
            want = to_numpy(forward(tensor(ids), tensor(x1), tensor(wq), tensor(norm_w)))
            # Outputs reach ~450 while some are ~1e-2: those come out of
            # cancellation, so the absolute tolerance follows the largest value.
            np.testing.assert_allclose(to_numpy(out), want, rtol=1e-4,
                                       atol=1e-5 * np.abs(want).max())
    finally:
        del out  # lives in the graph's private pool: release before the graph
        lib.ingot_graph_destroy(g)


@pytest.mark.parametrize("dt", list(FLOATS))
@pytest.mark.parametrize("T,F", [(1, 1536), (5, 7), (33, 24), (128, 1536), (3, 8193)])
def test_swiglu_halves_of_one_product(dt, T, F):
    """Row-strided gate/up views (halves of a fused gate|up product): the
    vector path when rows stay 16-byte aligned, the scalar one otherwise."""
    rng = np.random.default_rng(24)
    gu = (rng.standard_normal((T, 2 * F)) * 4).astype(FLOATS[dt])
    gu[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    t = tensor(gu)
    g, u = call("ingot_narrow", t, 1, 0, F), call("ingot_narrow", t, 1, F, F)
    diff("ingot_swiglu", g, u)
