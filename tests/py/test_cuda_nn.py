"""Fused transformer ops (include/ingot/nn.h) on CUDA against the CPU backend.

qmatmul: every ggml type, M = 1..9 and 33 (M <= 8 is the block-reading GEMV,
M > 8 dequantise + cuBLASLt), odd N, decode shapes N=6144 K=2048 (M = 1..8),
SmolLM2's lm head (Q4_1, N=49152, K=576), a long row (Q4_K, K=14336),
unaligned weight rows (byte loads) and x (no float4 loads), and capture in a
CUDA graph. Tolerance: both devices accumulate in f32 in different orders, so
|cuda - cpu| <= 2e-5 * (|x| @ |W|^T) + 1e-6 (the CPU itself is checked against
float64 numpy in test_nn.py).
Padded rows (W [N, S], S a multiple of 16 as the model uploads them: the
shared-memory kernel; S not a multiple of 16: the global-memory kernel),
every type, M = 1..8, N from 1 to 49152 (the LM head: several tasks per warp,
the prefetch pipeline), K odd multiples of the block, garbage in the padding.
qmatmul_fused (rms_norm of x, then the product, + res): against the CPU's
qmatmul_fused with |cuda - cpu| <= 2e-5 * (|x_n| @ |W|^T + |res|) + 1e-6 (the
inverse RMS is summed in another order: a few ulps); one launch for M <= 8
when x fits in shared memory, rms_norm + GEMV (+ residual epilogue) when it
does not or rows are not 16-byte aligned, rms_norm + prefill + add for M > 8.
One row of f16 / bf16 weights with K a multiple of 32 (gemv_tc.cu: tensor
cores, x split into 16-bit parts): the same bound, inf weights, inf / NaN in
x and an inf weight against x = 0 where the CPU has them, x far from 1.
Prefill products (M >= 64: W dequantised to bf16, x rounded to bf16, bf16
tensor cores with f32 accumulation): |cuda - cpu| <= (2^-7 + 2e-5) * (|x| @
|W|^T) + 1e-6 (both operands carry 2^-8 relative rounding), every type,
either side of the threshold, SmolLM2's shapes at 501 and 512 rows.
attention_cached with T > 1 (the tiled prefill kernel, head_dim 64/128, f32
and f16 caches): against the CPU within rtol 1e-4 / atol 1e-5 (2e-4 for a
1200-row cache): causal chunks at odd sizes and offsets, positions in any
order, GQA groups of 1-8, special values, unaligned caches, graph capture.
qmatmul_swiglu (x = silu(gate) * up of gu = gate | up): against the CPU's
qmatmul_swiglu with the bound of qmatmul_fused on h = swiglu(gate, up); one
launch (silu staged with x) for M <= 8 when h fits in shared memory and rows
are 16-byte aligned, the SWIGLU kernel + the product otherwise.
qget_rows: bit-exact (both decoders reproduce ggml's dequantize_row_*).
rms_norm / swiglu: cuda_diff's tolerances per dtype (f32 1e-5, f16 2e-3,
bf16 1.6e-2 relative: at most an ulp of the output dtype apart).
"""

import ml_dtypes
import numpy as np
import pytest

from cuda_diff import CUDA, diff, needs_cuda, offset_view
from ingot_ctypes import D, P, call, lib, sig, strided, tensor, to_numpy
from nn_cases import (FLOATS, QTYPES, check_fused_pair, opt, pad16, pad_rows, qcase_special,
                      qtable, seed)
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


# Products of at least BF16_ROWS rows run on bf16 tensor cores
# (src/cuda/qmatmul_prefill.cu): x and W rounded to bf16 (unit roundoff
# 2^-8 each), so a term is off by at most 2^-7 of |x||w|.
BF16_ROWS = 64


def rel_bound(m):
    return 2e-5 + (2.0 ** -7 if m >= BF16_ROWS else 0.0)


def check_close(got, want, x, wabs):
    """wabs: |W| as float64 [N, K] or None (then the bound uses max|W| per row)."""
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.array_equal(np.isnan(got), np.isnan(want))
    bound = rel_bound(x.shape[0]) * (np.abs(x.astype(np.float64)) @ wabs.T) + 1e-6
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


def dev(a):
    return call("ingot_to", tensor(a), CUDA)


def capture_replays(forward, slots, rng, check, replays=2):
    """forward() run once (lazy setup: cuBLASLt's workspace), then captured in a
    graph; `replays` times: each device tensor of slots [(tensor, shape)]
    refilled with f32 standard normals (drawn in slot order), one replay, and
    check(captured outputs, the values). The captured outputs live in the
    graph's private pool: they are dropped before the graph."""
    forward()
    assert lib.ingot_graph_begin(CUDA) == 0, lib.ingot_last_error()
    try:
        out = forward()
    finally:
        g = lib.ingot_graph_end(CUDA)
    assert g, lib.ingot_last_error()
    try:
        for _ in range(replays):
            vals = [rng.standard_normal(shape).astype(np.float32) for _, shape in slots]
            for (t, _), v in zip(slots, vals):
                call("ingot_copy_", t, dev(v))
            assert lib.ingot_graph_replay(g) == 0, lib.ingot_last_error()
            check(out, vals)
    finally:
        out = None
        lib.ingot_graph_destroy(g)


def swiglu_both(wq, wd, tid, cols, gu, res, gud=None):
    """qmatmul_swiglu on the CPU (unpadded W) and on CUDA (wd); h for the bound."""
    want = to_numpy(call("ingot_qmatmul_swiglu", tensor(gu), tensor(wq), tid, cols,
                         opt(res, tensor)))
    got = to_numpy(call("ingot_qmatmul_swiglu", gud if gud is not None else dev(gu), wd, tid, cols,
                        opt(res, dev)))
    g, u = gu[:, :cols].astype(np.float64), gu[:, cols:].astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        h = (g / (1 + np.exp(-g)) * u).astype(np.float32)
    return got, want, h


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("use_res", [False, True])
@pytest.mark.parametrize("padded", [True, False])
def test_qmatmul_swiglu(name, use_res, padded):
    """M = 1..8 (one launch when padded, block weights; the SWIGLU kernel +
    the GEMV otherwise) and M = 12 (SWIGLU + prefill + add)."""
    rng = np.random.default_rng(seed(name, use_res, padded, "glu"))
    n = 67
    tid, cols, wq, w64 = qtable(name, n, 3, rng)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]), rng) if padded else wq)
    for m in (1, 2, 3, 5, 8, 12):
        gu = (rng.standard_normal((m, 2 * cols)) * 3).astype(np.float32)
        res = (rng.standard_normal((m, n)) * 10).astype(np.float32) if use_res else None
        got, want, h = swiglu_both(wq, wd, tid, cols, gu, res)
        check_fused_close(got, want, h, w64, None, 0.0, res)


@pytest.mark.parametrize("n,k,m", [(576, 1536, 1), (576, 1536, 4), (576, 1536, 8), (300, 4096, 1),
                                   (100, 4096, 1)])
def test_qmatmul_swiglu_model_shape(n, k, m):
    """SmolLM2's down projection (Q4_1, N = 576, K = 1536; M = 8: h exceeds
    the shared memory, the composed path), padded rows, res on; K = 4096 at
    M = 1: gate and up staged in several rounds (4-warp and 1-warp blocks)."""
    rng = np.random.default_rng(seed(m, "glu-model") if k == 1536 else seed(n, k, m, "glu-model"))
    tid, wq = weights_fast("Q4_1", n, k, rng)
    w64 = to_numpy(call("ingot_qget_rows", tensor(wq), tid, k,
                        tensor(np.arange(n, dtype=np.int64)))).astype(np.float64)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]), rng))
    gu = (rng.standard_normal((m, 2 * k)) * 2).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32)
    got, want, h = swiglu_both(wq, wd, tid, k, gu, res)
    check_fused_close(got, want, h, w64, None, 0.0, res)


@pytest.mark.parametrize("off", [0, 1, 2])
def test_qmatmul_swiglu_special_and_unaligned(off):
    """gu not 16-byte aligned (scalar staging) or aligned (float4), NaN and
    -inf gates (NaN rows as swiglu), an inf up, a zero row (res exactly)."""
    rng = np.random.default_rng(seed(off, "glu-special"))
    tid, cols, wq, w64 = qtable("Q8_0", 40, 2, rng)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]), rng))
    gu = (rng.standard_normal((5, 2 * cols)) * 3).astype(np.float32)
    gu[0, 9] = np.nan
    gu[1, 3] = -np.inf
    gu[2, cols + 5] = np.inf
    gu[3] = 0
    res = rng.standard_normal((5, 40)).astype(np.float32)
    got, want, h = swiglu_both(wq, wd, tid, cols, gu, res, gud=offset_view(gu, gu.shape, off))
    assert np.isnan(got[:2]).all()
    np.testing.assert_array_equal(got[3], res[3])
    check_fused_close(got[3:], want[3:], h[3:], w64, None, 0.0, res[3:])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("n,kblocks", [(1, 1), (37, 3), (577, 19), (4099, 9)])
def test_qmatmul_padded_rows(name, n, kblocks):
    """16-byte padded rows (shared-memory kernel) and rows padded by 7 more
    (global kernel), M = 1..8, garbage in the padding."""
    rng = np.random.default_rng(seed(name, n, "pad"))
    if n > 1000:
        cols = kblocks * (256 if TYPES[name][2] == 256 else 32)
        tid, wq = weights_fast(name, n, cols, rng)
        wabs = abs_deq(tid, wq, cols)
    else:
        tid, cols, wq, w64 = qtable(name, n, kblocks, rng)
        wabs = np.abs(w64)
    for extra in (pad16(wq.shape[1]), pad16(wq.shape[1]) + 7):
        wpad = pad_rows(wq, extra, rng)
        wd = dev(wpad)
        for m in range(1, 9):
            x = rng.standard_normal((m, cols)).astype(np.float32)
            got, want = both(wq, tid, cols, x, lambda: (dev(x), wd))
            check_close(got, want, x, wabs)


@pytest.mark.parametrize("name,k", [("Q8_0", 576), ("Q4_1", 576), ("Q4_K", 1024), ("F16", 256)])
def test_qmatmul_padded_lm_head(name, k):
    """N = 49152 (SmolLM2's head): many tasks per warp (grid-stride, prefetch),
    x 16-byte aligned and not (an offset view)."""
    rng = np.random.default_rng(seed(name, "head"))
    n = 49152
    tid, wq = weights_fast(name, n, k, rng)
    wabs = abs_deq(tid, wq, k)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]), rng))
    for m, xoff in ((1, 0), (3, 1), (8, 0)):
        x = rng.standard_normal((m, k)).astype(np.float32)
        got, want = both(wq, tid, k, x, lambda: (offset_view(x, x.shape, xoff), wd))
        check_close(got, want, x, wabs)


def fused_both(wq, wd, tid, cols, x, norm, res, eps=1e-5, xd=None):
    """qmatmul_fused on the CPU (unpadded W) and on CUDA (wd)."""
    want = to_numpy(call("ingot_qmatmul_fused", tensor(x), tensor(wq), tid, cols,
                         opt(norm, tensor), eps, opt(res, tensor)))
    got = to_numpy(call("ingot_qmatmul_fused", xd if xd is not None else dev(x), wd, tid, cols,
                        opt(norm, dev), eps, opt(res, dev)))
    return got, want


def check_fused_close(got, want, x, w64, norm, eps, res):
    check_fused_pair(got, want, x, w64, norm, eps, res, rel_bound(x.shape[0]))


@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("use_norm,use_res", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("padded", [True, False])
def test_qmatmul_fused(name, use_norm, use_res, padded):
    """M = 1..8 (one launch when padded; rms_norm + GEMV otherwise) and M = 12
    (rms_norm + prefill + add)."""
    rng = np.random.default_rng(seed(name, use_norm, use_res, padded))
    n = 67
    tid, cols, wq, w64 = qtable(name, n, 3, rng)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]), rng) if padded else wq)
    for m in (1, 2, 3, 5, 8, 12):
        x = (rng.standard_normal((m, cols)) * 3).astype(np.float32)
        norm = rng.standard_normal(cols).astype(np.float32) if use_norm else None
        res = (rng.standard_normal((m, n)) * 10).astype(np.float32) if use_res else None
        got, want = fused_both(wq, wd, tid, cols, x, norm, res)
        check_fused_close(got, want, x, w64, norm, 1e-5, res)


@pytest.mark.parametrize("name,n,k,ms", [("Q4_1", 1536, 576, [1, 4, 8]),
                                          ("Q4_1", 576, 1536, [1, 4, 8]),
                                          ("Q8_0", 49152, 576, [1, 2]),
                                          ("Q8_0", 2051, 2048, [1, 2, 6]),
                                          ("Q4_K", 512, 14336, [1, 3]),
                                          ("Q4_1", 300, 4096, [1]),
                                          ("Q4_0", 100, 4096, [1])])
def test_qmatmul_fused_model_shapes(name, n, k, ms):
    """SmolLM2's products (M = 8 at K = 1536 and K = 14336 exceed the shared
    memory for x: the composed path), long rows (Q8_0 K = 2048: one row a
    task), norm and res both on, padded rows. K = 4096 at M = 1: x staged in
    2 rounds by 4-warp blocks (300 rows) or 8 by 1-warp blocks (100 rows),
    the norm weights read after the block sum."""
    rng = np.random.default_rng(seed(name, n, k, "fused"))
    tid, wq = weights_fast(name, n, k, rng)
    w64 = to_numpy(call("ingot_qget_rows", tensor(wq), tid, k,
                        tensor(np.arange(n, dtype=np.int64)))).astype(np.float64)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]), rng))
    norm = rng.standard_normal(k).astype(np.float32)
    for m in ms:
        x = rng.standard_normal((m, k)).astype(np.float32)
        res = rng.standard_normal((m, n)).astype(np.float32)
        got, want = fused_both(wq, wd, tid, k, x, norm, res, eps=1e-6)
        check_fused_close(got, want, x, w64, norm, 1e-6, res)


def test_qmatmul_fused_special_and_unaligned_x():
    """A NaN in x poisons its row (norm on), an all-zero row gives res
    exactly, inf/NaN in res stay in place; x not 16-byte aligned."""
    rng = np.random.default_rng(51)
    tid, cols, wq, w64 = qtable("Q4_1", 40, 2, rng)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]), rng))
    x = rng.standard_normal((4, cols)).astype(np.float32)
    x[0, 9] = np.nan
    x[1] = 0
    norm = rng.standard_normal(cols).astype(np.float32)
    res = rng.standard_normal((4, 40)).astype(np.float32)
    res[3, 2], res[3, 7] = -np.inf, np.nan
    got, want = fused_both(wq, wd, tid, cols, x, norm, res, eps=1e-6,
                           xd=offset_view(x, x.shape, 1))
    assert np.isnan(got[0]).all() and np.isnan(want[0]).all()
    np.testing.assert_array_equal(got[1], res[1])
    assert np.isneginf(got[3, 2]) and np.isnan(got[3, 7])
    keep = np.ones(40, bool)
    keep[[2, 7]] = False
    check_fused_close(got[2:, keep], want[2:, keep], x[2:], w64[keep], norm, 1e-6, res[2:, keep])


FLOAT_W = ["F32", "F16", "BF16"]


@pytest.mark.parametrize("name", FLOAT_W)
@pytest.mark.parametrize("n,k", [(67, 40), (1, 256), (5120, 2048), (2048, 4096), (150001, 64),
                                 (300, 8192)])
@pytest.mark.parametrize("use_norm", [True, False])
def test_qmatmul_fused_float_weights(name, n, k, use_norm):
    """Float weights (cuda_gemv_f32x, gemvx_kernel: x staged as float, the norm
    fused into the staging), M = 1..8 (res on odd M), rows padded past 16 bytes
    with garbage: the Qwen3-30B-A3B decode shapes (q|k|v 5120 x 2048, o 2048 x
    4096; 8 rows of 2048: 64 KB of staged x), a single column, 150001 columns
    (many tiles a warp), and K = 8192 with few columns (the fast path declines:
    rms_norm + the general GEMV, or the ggml kernels when x does not fit)."""
    rng = np.random.default_rng(seed(name, n, k, use_norm, "floatw"))
    tid, wq = weights_fast(name, n, k, rng)
    w64 = to_numpy(call("ingot_qget_rows", tensor(wq), tid, k,
                        tensor(np.arange(n, dtype=np.int64)))).astype(np.float64)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]) + 16, rng))
    norm = (rng.standard_normal(k) + 1).astype(np.float32) if use_norm else None
    for m in range(1, 9):
        x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
        res = (rng.standard_normal((m, n)) * 10).astype(np.float32) if m % 2 else None
        got, want = fused_both(wq, wd, tid, k, x, norm, res, eps=1e-6)
        check_fused_close(got, want, x, w64, norm, 1e-6, res)


@pytest.mark.parametrize("name", FLOAT_W)
@pytest.mark.parametrize("xoff,woff", [(1, 0), (0, 1)])
def test_qmatmul_fused_float_special_unaligned(name, xoff, woff):
    """Float weights with special values: a NaN in x poisons its row (norm on),
    an all-zero x row gives res exactly, inf in W / in res stay where the CPU
    puts them; x not 16-byte aligned (scalar staging) or W rows one element off
    16 bytes (the fast path declines: rms_norm + the general GEMV)."""
    rng = np.random.default_rng(seed(name, xoff, woff, "floatspecial"))
    n, k, m = 48, 64, 5
    tid, wq = weights_fast(name, n, k, rng)
    es = {"F32": 4, "F16": 2, "BF16": 2}[name]
    wv = wq.view({"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}[name])
    wv[3, 5] = np.inf
    wv[4, 0], wv[4, 1] = np.inf, -np.inf  # inf - inf: NaN
    w64 = wv.astype(np.float64)
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[0, 9] = np.nan
    x[1] = 0
    norm = rng.standard_normal(k).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32)
    res[2, 7], res[3, 8] = -np.inf, np.nan
    flat = pad_rows(wq, pad16(wq.shape[1]), rng).ravel()
    wdev = offset_view(flat, (n, flat.size // n), woff * es) if woff else dev(flat.reshape(n, -1))
    got, want = fused_both(wq, wdev, tid, k, x, norm, res, eps=1e-6,
                           xd=offset_view(x, x.shape, xoff))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert np.isnan(got[0]).all()
    fin = np.isfinite(want[1])
    np.testing.assert_array_equal(got[1][fin], res[1][fin])
    keep = np.isfinite(want[2:]).all(axis=0)
    check_fused_close(got[2:, keep], want[2:, keep], x[2:], w64[keep], norm, 1e-6, res[2:, keep])


@pytest.mark.parametrize("name", ["F16", "BF16"])
@pytest.mark.parametrize("case", ["winf", "xinf", "xnan", "inf_times_zero", "norm_inf"])
def test_qmatmul_fused_float_one_row_special(name, case):
    """One row (decode) on the tensor-core GEMV (gemv_tc.cu: K a multiple of
    32, X split into 16-bit parts): inf weights (inf, -inf in one row: NaN),
    inf or NaN in x, an inf weight against x = 0 (NaN), an inf norm weight:
    NaN and inf (with sign) where the CPU has them, the rest within the
    bound."""
    rng = np.random.default_rng(seed(name, case, "floatrow"))
    n, k = 40, 256
    tid, wq = weights_fast(name, n, k, rng)
    wv = wq.view({"F16": np.float16, "BF16": ml_dtypes.bfloat16}[name])
    x = (rng.standard_normal((1, k)) * 3).astype(np.float32)
    norm = rng.standard_normal(k).astype(np.float32) if case == "norm_inf" else None
    if case == "winf":
        wv[3, 5], wv[4, 0], wv[4, 200] = np.inf, np.inf, -np.inf
    elif case == "xinf":
        x[0, 17] = -np.inf
    elif case == "xnan":
        x[0, 100] = np.nan
    elif case == "inf_times_zero":
        wv[6, 9], wv[7, 12] = np.inf, -np.inf
        x[0, 9] = 0
    else:
        norm[33] = np.inf
    got, want = fused_both(wq, dev(wq), tid, k, x, norm, None, eps=1e-6)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    inf = np.isinf(want)
    np.testing.assert_array_equal(np.sign(got[inf]), np.sign(want[inf]))
    assert (~np.isfinite(want)).any()
    fin = np.isfinite(want[0])
    if fin.any() and norm is None:  # x finite here: the bound on the finite outputs
        w64 = np.nan_to_num(wv.astype(np.float64), posinf=0, neginf=0)
        check_fused_close(got[:, fin], want[:, fin], x, w64[fin], None, 1e-6, None)


@pytest.mark.parametrize("name", ["F16", "BF16"])
@pytest.mark.parametrize("mag", [1e30, 3e4, 1e-6, 1e-30])
def test_qmatmul_fused_float_one_row_range(name, mag):
    """One row of x far from 1 with a spread of magnitudes (f16 weights: X
    scaled by a power of 2 into f16's range, then split; bf16: three bf16
    parts): a relative bound only."""
    rng = np.random.default_rng(seed(name, mag, "floatrange"))
    n, k = 67, 512
    tid, wq = weights_fast(name, n, k, rng)
    w64 = wq.view({"F16": np.float16, "BF16": ml_dtypes.bfloat16}[name]).astype(np.float64)
    x = (rng.standard_normal((1, k)) * mag * np.exp(rng.uniform(-6, 0, k))).astype(np.float32)
    got, want = fused_both(wq, dev(wq), tid, k, x, None, None)
    assert np.isfinite(want).all() and np.isfinite(got).all()
    m64 = np.abs(x.astype(np.float64)) @ np.abs(w64).T
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(err <= 2e-5 * m64), f"max rel err {np.max(err / m64)}"


def test_qmatmul_fused_none_matches_qmatmul():
    """No norm, no res: the same kernel as qmatmul, bit-identical."""
    rng = np.random.default_rng(52)
    tid, cols, wq, _ = qtable("Q6_K", 33, 2, rng)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]), rng))
    xd = dev(rng.standard_normal((5, cols)).astype(np.float32))
    a = to_numpy(call("ingot_qmatmul_fused", xd, wd, tid, cols, None, 0.0, None))
    b = to_numpy(call("ingot_qmatmul", xd, wd, tid, cols))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", QTYPES)
def test_qget_rows_padded(name):
    rng = np.random.default_rng(seed(name, "pad", 5))
    tid, cols, wq, _ = qtable(name, 50, 5, rng)
    ids = rng.integers(0, 50, 100).astype(np.int64)
    want = to_numpy(call("ingot_qget_rows", tensor(wq), tid, cols, tensor(ids)))
    for extra in (pad16(wq.shape[1]), 5):
        got = to_numpy(call("ingot_qget_rows", dev(pad_rows(wq, extra, rng)), tid, cols, dev(ids)))
        np.testing.assert_array_equal(got, want)


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


@pytest.mark.parametrize("name", ["Q4_1", "BF16"])
def test_graph_capture_fused(name):
    """qmatmul_fused captured in a graph: Q4_1: the one-launch path (M=1, padded
    rows), the composed one (M=8, K=1536: x exceeds shared memory); BF16: the
    dense GEMV with the norm fused (gemvx_kernel, M=1 and M=8); both: the
    prefill one (M=12); replays on new inputs match the CPU."""
    rng = np.random.default_rng(seed(61, name))
    k, n = 1536, 96
    tid, wq = weights_fast(name, n, k, rng)
    w64 = to_numpy(call("ingot_qget_rows", tensor(wq), tid, k,
                        tensor(np.arange(n, dtype=np.int64)))).astype(np.float64)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]), rng))
    norm = rng.standard_normal(k).astype(np.float32)
    nd = dev(norm)
    xs = {m: dev(np.zeros((m, k), np.float32)) for m in (1, 8, 12)}
    rs = {m: dev(np.zeros((m, n), np.float32)) for m in (1, 8, 12)}

    def forward():
        return {m: call("ingot_qmatmul_fused", xs[m], wd, tid, k, nd, 1e-5, rs[m]) for m in xs}

    def check(out, vals):
        for i, m in enumerate(xs):
            x, r = vals[2 * i], vals[2 * i + 1]
            want = to_numpy(call("ingot_qmatmul_fused", tensor(x), tensor(wq), tid, k,
                                 tensor(norm), 1e-5, tensor(r)))
            check_fused_close(to_numpy(out[m]), want, x, w64, norm, 1e-5, r)

    slots = [sl for m in xs for sl in ((xs[m], (m, k)), (rs[m], (m, n)))]
    capture_replays(forward, slots, rng, check)


def test_graph_capture_swiglu():
    """qmatmul_swiglu captured in a graph (SmolLM2's down projection): the
    one-launch path (M = 1), the composed one (M = 8: h exceeds shared
    memory), the prefill one (M = 12); replays on new inputs match the CPU."""
    rng = np.random.default_rng(71)
    k, n = 1536, 96
    tid, wq = weights_fast("Q4_1", n, k, rng)
    w64 = to_numpy(call("ingot_qget_rows", tensor(wq), tid, k,
                        tensor(np.arange(n, dtype=np.int64)))).astype(np.float64)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]), rng))
    gus = {m: dev(np.zeros((m, 2 * k), np.float32)) for m in (1, 8, 12)}
    rs = {m: dev(np.zeros((m, n), np.float32)) for m in (1, 8, 12)}

    def forward():
        return {m: call("ingot_qmatmul_swiglu", gus[m], wd, tid, k, rs[m]) for m in gus}

    def check(out, vals):
        for i, m in enumerate(gus):
            gu, r = vals[2 * i], vals[2 * i + 1]
            want = to_numpy(call("ingot_qmatmul_swiglu", tensor(gu), tensor(wq), tid, k,
                                 tensor(r)))
            h = to_numpy(call("ingot_swiglu", tensor(gu[:, :k].copy()),
                              tensor(gu[:, k:].copy())))
            check_fused_close(to_numpy(out[m]), want, h, w64, None, 0.0, r)

    slots = [sl for m in gus for sl in ((gus[m], (m, 2 * k)), (rs[m], (m, n)))]
    capture_replays(forward, slots, rng, check)


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


# ---- prefill products: M >= BF16_ROWS on bf16 tensor cores ----
@pytest.mark.parametrize("name", QTYPES)
@pytest.mark.parametrize("m", [63, 64, 65, 200])
def test_qmatmul_prefill_bf16(name, m):
    """Every type, odd N, either side of the bf16 threshold (63: f32 path),
    odd K for the float types (rows not 16-byte aligned in bf16: cuBLASLt may
    decline, then the f32 path)."""
    rng = np.random.default_rng(seed(name, m, "prefill"))
    tid, cols, wq, w64 = qtable(name, 37, 3, rng)
    x = rng.standard_normal((m, cols)).astype(np.float32)
    got, want = both(wq, tid, cols, x)
    check_close(got, want, x, np.abs(w64))


@pytest.mark.parametrize("n,k", [(960, 576), (3072, 576), (576, 1536), (576, 576)])
@pytest.mark.parametrize("m", [501, 512])
def test_qmatmul_prefill_model_shapes(n, k, m):
    """SmolLM2-135M's prefill products (Q4_1 q|k|v, gate|up, down, o) on a
    512-token chunk and a 501-token prompt, norm and residual on, padded rows;
    a NaN in x poisons its row only."""
    rng = np.random.default_rng(seed("Q4_1", n, k, m, "prefill"))
    tid, wq = weights_fast("Q4_1", n, k, rng)
    w64 = to_numpy(call("ingot_qget_rows", tensor(wq), tid, k,
                        tensor(np.arange(n, dtype=np.int64)))).astype(np.float64)
    wd = dev(pad_rows(wq, pad16(wq.shape[1]), rng))
    norm = rng.standard_normal(k).astype(np.float32)
    x = rng.standard_normal((m, k)).astype(np.float32)
    x[7, 3] = np.nan
    res = rng.standard_normal((m, n)).astype(np.float32)
    got, want = fused_both(wq, wd, tid, k, x, norm, res, eps=1e-6)
    assert np.isnan(got[7]).all() and np.isnan(want[7]).all()
    keep = np.arange(m) != 7
    check_fused_close(got[keep], want[keep], x[keep], w64, norm, 1e-6, res[keep])


def test_qmatmul_prefill_unaligned_x():
    """x one float past a 16-byte boundary (a view) with 100 rows."""
    rng = np.random.default_rng(77)
    tid, cols, wq, w64 = qtable("Q8_0", 45, 4, rng)
    x = rng.standard_normal((100, cols)).astype(np.float32)
    wd = dev(wq)
    got, want = both(wq, tid, cols, x, lambda: (offset_view(x, x.shape, 1), wd))
    check_close(got, want, x, np.abs(w64))


# ---- attention_cached with many query rows (src/cuda/attention_prefill.cu) ----
sig("ingot_attention_cached", P, P, P, P, P, D)
ATT_TOL = (1e-4, 1e-5)  # f32 sums in another order (tiles of 32 keys, online softmax)


def attn_inputs(rng, T, hq, hkv, dh, ctx, dt):
    q = rng.standard_normal((T, hq, dh)).astype(np.float32)
    kc = rng.standard_normal((ctx, hkv, dh)).astype(dt)
    vc = rng.standard_normal((ctx, hkv, dh)).astype(dt)
    kc[min(5, ctx - 1)] *= 8  # a peaked softmax
    return q, kc, vc


@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("dh", [64, 128])
@pytest.mark.parametrize("T,hq,hkv,p0", [(2, 9, 3, 0), (15, 9, 3, 0), (16, 8, 8, 0),
                                          (17, 4, 1, 0), (33, 16, 2, 31), (100, 9, 3, 5),
                                          (512, 9, 3, 0), (513, 6, 2, 64)])
def test_cuda_attention_prefill_causal(dt, dh, T, hq, hkv, p0):
    """A prompt chunk: rows at positions p0 .. p0 + T - 1 (after p0 cached
    rows), GQA groups of 1 to 8 heads, tiles of 16 rows and 32 keys cut at odd
    places; cache rows past the last position hold NaN and are never read."""
    rng = np.random.default_rng(seed(T, hq, dh, p0, str(dt)))
    ctx = p0 + T + 9
    q, kc, vc = attn_inputs(rng, T, hq, hkv, dh, ctx, dt)
    kc[p0 + T:] = np.nan
    vc[p0 + T:] = np.inf
    pos = (p0 + np.arange(T)).astype(np.int32)
    out = diff("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc), tensor(pos),
               1 / np.sqrt(dh), tol=ATT_TOL)
    assert np.isfinite(to_numpy(out)).all()


@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("dh", [64, 128])
def test_cuda_attention_prefill_any_positions(dt, dh):
    """Positions in any order, repeated, at 0 and at ctx - 1 (a tile's keys
    run to its largest position; each row stops at its own); q strided."""
    rng = np.random.default_rng(seed(dh, str(dt), "anypos"))
    T, ctx = 37, 300
    q, kc, vc = attn_inputs(rng, T, 12, 4, dh, ctx, dt)
    pos = rng.integers(0, ctx, size=T).astype(np.int32)
    pos[:4] = [0, ctx - 1, 31, 32]
    pos[20:23] = 0
    diff("ingot_attention_cached", strided(q), tensor(kc), tensor(vc), tensor(pos),
         1 / np.sqrt(dh), tol=ATT_TOL)


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_cuda_attention_prefill_long(dt):
    """A second 600-row chunk over a 1200-row cache (D 128, 4 heads a group)."""
    rng = np.random.default_rng(seed("long", str(dt)))
    T, p0, ctx = 600, 500, 1200
    q, kc, vc = attn_inputs(rng, T, 8, 2, 128, ctx, dt)
    pos = (p0 + np.arange(T)).astype(np.int32)
    diff("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc), tensor(pos),
         1 / np.sqrt(128), tol=(2e-4, 1e-5))


@pytest.mark.parametrize("dh", [64, 128])
def test_cuda_attention_prefill_special_values(dh):
    """As the CPU: a NaN query gives a NaN head; an inf key element a +inf
    score (NaN head) or a -inf one (weight 0); every score -inf a NaN head; an
    inf value an inf output for the rows that see it, finite for the rows
    before it."""
    rng = np.random.default_rng(seed(dh, "special"))
    T, ctx = 40, 40
    q, kc, vc = attn_inputs(rng, T, 8, 2, dh, ctx, np.float32)
    q[3, 0, 5] = np.nan
    kc[10, 0, 7] = np.inf  # kv head 0 (q heads 0..3), row 10
    q[:, :4, 7] = -1.0  # score -inf: row 10 weighs nothing
    q[20, 1, 7] = 1.0  # score +inf: NaN
    kc[:, 1, 0] = -np.inf
    q[30, 4:, 0] = 1.0  # row 30, heads 4..7: every score -inf
    vc[25, 0, 9] = np.inf  # seen by rows 25.. (heads 0..3)
    pos = np.arange(T, dtype=np.int32)
    out = to_numpy(diff("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc),
                        tensor(pos), 0.125, tol=ATT_TOL))
    assert np.isnan(out[3, 0]).all() and np.isnan(out[20, 1]).all()
    assert np.isnan(out[30, 4:]).all() and np.isfinite(out[24, :4]).all()
    assert np.isinf(out[26, 0, 9])


@pytest.mark.parametrize("dh", [64, 128])
def test_cuda_attention_prefill_leading_neg_inf_scores(dh):
    """Keys 0..39 score -inf (more than a tile of 32), later keys finite: the
    rows that see a finite key are finite as on the CPU (the -inf keys weigh
    0), the rows before them NaN (every score -inf)."""
    rng = np.random.default_rng(seed(dh, "neginf"))
    T, ctx = 70, 70
    q, kc, vc = attn_inputs(rng, T, 4, 1, dh, ctx, np.float32)
    kc[:40, 0, 0] = -np.inf
    q[:, :, 0] = 1.0
    pos = np.arange(T, dtype=np.int32)
    out = to_numpy(diff("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc),
                        tensor(pos), 0.125, tol=ATT_TOL))
    assert np.isnan(out[:40]).all() and np.isfinite(out[40:]).all()


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_cuda_attention_prefill_unaligned_cache(dt):
    """Caches starting one element past an aligned address (views)."""
    rng = np.random.default_rng(seed("unaligned", str(dt)))
    T, hkv, dh, ctx = 50, 2, 64, 80
    q, kc, vc = attn_inputs(rng, T, 6, hkv, dh, ctx, dt)
    pos = (10 + np.arange(T)).astype(np.int32)
    want = to_numpy(call("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc),
                         tensor(pos), 0.125))

    def shifted(c):
        flat = call("ingot_to", tensor(np.concatenate([c.ravel()[:1], c.ravel()])), CUDA)
        return call("ingot_as_strided", flat, 3, list(c.shape), [hkv * dh, dh, 1], 1)

    got = to_numpy(call("ingot_attention_cached", dev(q), shifted(kc), shifted(vc), dev(pos),
                        0.125))
    np.testing.assert_allclose(got, want, rtol=ATT_TOL[0], atol=ATT_TOL[1])


def test_graph_capture_prefill():
    """The bf16 prefill product (M = 80) and the prefill attention (T = 20)
    captured once (after a warm-up: cuBLASLt's workspace) and replayed on new
    inputs: the CPU's results within their bounds."""
    rng = np.random.default_rng(seed("graph", "prefill"))
    tid, cols, wq, w64 = qtable("Q4_1", 50, 4, rng)
    wd = dev(wq)
    x_d = dev(np.zeros((80, cols), np.float32))
    T, ctx, dh = 20, 40, 64
    q_d = dev(np.zeros((T, 4, dh), np.float32))
    kc, vc = [rng.standard_normal((ctx, 2, dh)).astype(np.float32) for _ in range(2)]
    kd, vd = dev(kc), dev(vc)
    pos = (5 + np.arange(T)).astype(np.int32)
    pos_d = dev(pos)

    def run():
        return (call("ingot_qmatmul", x_d, wd, tid, cols),
                call("ingot_attention_cached", q_d, kd, vd, pos_d, 0.125))

    def check(out, vals):
        (y_d, o_d), (x, q) = out, vals
        want = to_numpy(call("ingot_qmatmul", tensor(x), tensor(wq), tid, cols))
        check_close(to_numpy(y_d), want, x, np.abs(w64))
        want = to_numpy(call("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc),
                             tensor(pos), 0.125))
        np.testing.assert_allclose(to_numpy(o_d), want, rtol=ATT_TOL[0], atol=ATT_TOL[1])

    capture_replays(run, [(x_d, (80, cols)), (q_d, (T, 4, dh))], rng, check)
