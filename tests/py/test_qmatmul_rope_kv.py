"""ingot_qmatmul_rope_kv (include/ingot/attention.h): the q|k|v product
(rms norm of x fused), per-head q/k norm, rope and the KV-cache write in one
op.

Oracles: on the CPU the op is the composition qmatmul_fused + rope_kv_write
(bit-identical: the same kernels) and, through it, numpy (float64 product of
the dequantised weights, then test_rope_kv's numpy rope/norm reference:
within rtol 1e-4 / atol 1e-4 of the largest value). CUDA (the one-launch
kernel for T = 1 with an arrivals tensor; the composed kernels otherwise)
against the CPU op on the same inputs: q and float32 caches within rtol
1e-4 / atol 1e-4 x the largest magnitude (the products sum in another order
and cancel), float16 caches 1e-3 (one more rounding). The arrivals tensor
must be zero again after every launch.
Inputs: Q8_0/Q4_K/Q6_K/Q4_0 weights (rows padded to 16 bytes as the model
uploads them), GQA 9/3 and 32/4 heads, head_dim 64 and 128, neox and normal
rope, plain and llama3-scaled frequencies, q/k norms on and off, the attention
norm on and off, positions 0 and ctx - 1 (cache edges) and between, float32
and float16 caches, graph replays at several positions, NaN/inf in x.
"""
import ctypes

import numpy as np
import pytest

from cuda_diff import CUDA, needs_cuda, replay_steps, to_device
from ingot_ctypes import I, I64, IngotError, P, call, lib, sig, tensor, to_numpy
from nn_cases import pad16, pad_rows, qtable, seed
from test_rope_kv import RopeKvOpts, numpy_ref


class QkvRopeOpts(ctypes.Structure):
    _fields_ = [("norm", P), ("eps", ctypes.c_double), ("rope", RopeKvOpts), ("arrivals", P)]


sig("ingot_qmatmul_rope_kv", P, P, P, I, I64, P, P, ctypes.POINTER(QkvRopeOpts), P, P)
sig("ingot_rope_kv_write", P, P, P, P, P, P, ctypes.POINTER(RopeKvOpts), P, P)

EPS = 1e-5     # attention norm
QK_EPS = 1e-6  # q/k norms (test_rope_kv's numpy_ref uses 1e-6)


def inv_freq(dh, llama3):
    """RoPE frequencies, optionally with llama3's scaling (factor 8, low 1,
    high 4, original context 8192)."""
    inv = 500000.0 ** (-2.0 * np.arange(dh // 2) / dh)
    if not llama3:
        return inv
    factor, low, high, old = 8.0, 1.0, 4.0, 8192.0
    wavelen = 2 * np.pi / inv
    smooth = (old / wavelen - low) / (high - low)
    mid = (1 - smooth) * inv / factor + smooth * inv
    return np.where(wavelen > old / low, inv / factor, np.where(wavelen < old / high, inv, mid))


def make(name, hq, hkv, dh, ctx, T, rng, cache_dt=np.float32, qk_norm=False, attn_norm=True):
    """A random case: x [T, K], padded weight rows [N, S], float64 W, norms, caches."""
    rows = (hq + 2 * hkv) * dh
    tid, cols, wq, w64 = qtable(name, rows, 3 if name.endswith("K") else 18, rng)
    wq = pad_rows(wq, pad16(wq.shape[1]), rng)
    x = rng.standard_normal((T, cols)).astype(np.float32)
    norm = (rng.standard_normal(cols) * 0.2 + 1).astype(np.float32) if attn_norm else None
    qkn = tuple((rng.standard_normal(dh) * 0.2 + 1).astype(np.float32) for _ in range(2))
    kc = rng.standard_normal((ctx, hkv, dh)).astype(cache_dt)
    vc = rng.standard_normal((ctx, hkv, dh)).astype(cache_dt)
    return dict(tid=tid, cols=cols, wq=wq, w64=w64, x=x, norm=norm,
                qkn=qkn if qk_norm else None, kc=kc, vc=vc, hq=hq, hkv=hkv, dh=dh)


def opts(c, neox, dev=None, arrivals=None):
    mv = (lambda t: to_device(t, dev)) if dev is not None else (lambda t: t)
    keep = []  # tensors the struct points at stay alive with it
    norm = mv(tensor(c["norm"])) if c["norm"] is not None else None
    qn, kn = (mv(tensor(c["qkn"][0])), mv(tensor(c["qkn"][1]))) if c["qkn"] else (None, None)
    keep += [norm, qn, kn, arrivals]
    ro = RopeKvOpts(neox, qn.ptr if qn else None, kn.ptr if kn else None, QK_EPS)
    o = QkvRopeOpts(norm.ptr if norm else None, EPS, ro, arrivals.ptr if arrivals else None)
    return o, keep


def run_op(c, pos, inv, neox, dev=None, arrivals=None, kc=None, vc=None):
    """The op on dev (None: CPU); returns (q, k cache, v cache) tensors."""
    mv = (lambda t: to_device(t, dev)) if dev is not None else (lambda t: t)
    kc = kc if kc is not None else mv(tensor(c["kc"]))
    vc = vc if vc is not None else mv(tensor(c["vc"]))
    o, _keep = opts(c, neox, dev, arrivals)
    q = call("ingot_qmatmul_rope_kv", mv(tensor(c["x"])), mv(tensor(c["wq"])), c["tid"], c["cols"],
             mv(tensor(np.asarray(pos, np.int32))), mv(tensor(inv)), ctypes.byref(o), kc, vc)
    return q, kc, vc


def composed(c, pos, inv, neox):
    """qmatmul_fused then rope_kv_write on the CPU (today's two ops)."""
    T, hq, hkv, dh = c["x"].shape[0], c["hq"], c["hkv"], c["dh"]
    norm = tensor(c["norm"]) if c["norm"] is not None else None
    qkv = call("ingot_qmatmul_fused", tensor(c["x"]), tensor(c["wq"]), c["tid"], c["cols"], norm,
               EPS, None)
    views, at = [], 0
    for h in (hq, hkv, hkv):
        views.append(call("ingot_view", call("ingot_narrow", qkv, 1, at, h * dh), 3, [T, h, dh]))
        at += h * dh
    qn, kn = (tensor(c["qkn"][0]), tensor(c["qkn"][1])) if c["qkn"] else (None, None)
    ro = RopeKvOpts(neox, qn.ptr if qn else None, kn.ptr if kn else None, QK_EPS)
    kc, vc = tensor(c["kc"]), tensor(c["vc"])
    q = call("ingot_rope_kv_write", *views, tensor(np.asarray(pos, np.int32)), tensor(inv),
             ctypes.byref(ro), kc, vc)
    return to_numpy(q), to_numpy(kc), to_numpy(vc)


def close(got, want, tol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    fin = np.isfinite(want)
    scale = np.abs(want[fin]).max() if fin.any() else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True)


CPU_CASES = [("Q8_0", 9, 3, 64, 40, 1), ("Q4_K", 4, 2, 128, 9, 3), ("Q6_K", 6, 2, 64, 70, 5),
             ("Q4_0", 32, 4, 64, 8, 2)]


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("name,hq,hkv,dh,ctx,T", CPU_CASES)
def test_qmatmul_rope_kv_is_the_composition(neox, qk_norm, name, hq, hkv, dh, ctx, T):
    rng = np.random.default_rng(seed(name, hq, dh, T, neox, qk_norm))
    for cache_dt, attn_norm in ((np.float32, True), (np.float16, False)):
        c = make(name, hq, hkv, dh, ctx, T, rng, cache_dt, qk_norm, attn_norm)
        pos = rng.choice(ctx, size=T, replace=False).astype(np.int32)
        inv = inv_freq(dh, llama3=neox)
        arr = tensor(np.zeros(hq + 2 * hkv, np.int32))
        got = [to_numpy(t) for t in run_op(c, pos, inv, neox, arrivals=arr)]
        for g, w in zip(got, composed(c, pos, inv, neox)):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(to_numpy(arr), 0)
        # numpy: float64 product of the dequantised rows, then the rope reference
        xs = c["x"].astype(np.float64)
        if c["norm"] is not None:
            xf = c["x"]
            r = np.float32(1) / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + np.float32(EPS))
            xs = ((xf * r) * c["norm"]).astype(np.float64)
        qkv = (xs @ c["w64"].T).astype(np.float32)
        want = numpy_ref(qkv, T, hq, hkv, dh, pos, inv, c["kc"], c["vc"], c["qkn"], neox)
        for g, w in zip(got, want):
            close(g, w, 1e-4 if cache_dt == np.float32 else 2e-3)


def test_qmatmul_rope_kv_errors_write_nothing():
    rng = np.random.default_rng(5)
    c = make("Q8_0", 2, 1, 8, 4, 2, rng, qk_norm=True)
    inv = inv_freq(8, False)
    kc, vc = tensor(c["kc"]), tensor(c["vc"])
    good_pos = tensor(np.array([0, 1], np.int32))

    x0, w0, inv0 = tensor(c["x"]), tensor(c["wq"]), tensor(inv)

    def run(x=x0, w=w0, tid=None, cols=None, pos=good_pos, inv_t=inv0, o="default", kc=kc, vc=vc):
        oo, keep = opts(c, False)
        o = oo if isinstance(o, str) else o
        live = lib.ingot_live_tensors()
        with pytest.raises(IngotError, match="qmatmul_rope_kv") as e:
            call("ingot_qmatmul_rope_kv", x, w, c["tid"] if tid is None else tid,
                 c["cols"] if cols is None else cols, pos, inv_t,
                 ctypes.byref(o) if o is not None else None, kc, vc)
        assert lib.ingot_live_tensors() == live
        return str(e.value)

    qn, small_arr = tensor(c["qkn"][0]), tensor(np.zeros(3, np.int32))
    i64_arr, bad_norm = tensor(np.zeros(4, np.int64)), tensor(np.ones(5, np.float32))
    no_qk = RopeKvOpts(False, None, None, QK_EPS)
    assert "outside" in run(pos=tensor(np.array([1, 4], np.int32)))
    assert "NULL" in run(o=None)
    assert "both" in run(o=QkvRopeOpts(None, EPS, RopeKvOpts(False, qn.ptr, None, QK_EPS), None))
    assert "int32" in run(pos=tensor(np.array([0, 1], np.int64)))
    assert "inv_freq" in run(inv_t=tensor(np.ones(3)))
    assert "x must be" in run(x=tensor(c["x"][:, :32]))
    assert "cols" in run(cols=c["cols"] + 1)
    assert "rows" in run(w=tensor(c["wq"][:-3]))  # not a multiple of head_dim
    assert "rows" in run(w=tensor(c["wq"][:16]))  # Hq = 0
    assert "arrivals" in run(o=QkvRopeOpts(None, EPS, no_qk, small_arr.ptr))
    assert "arrivals" in run(o=QkvRopeOpts(None, EPS, no_qk, i64_arr.ptr))
    assert "norm" in run(o=QkvRopeOpts(bad_norm.ptr, EPS, no_qk, None))
    assert "caches" in run(vc=tensor(c["vc"].astype(np.float16)))
    np.testing.assert_array_equal(to_numpy(kc), c["kc"])
    np.testing.assert_array_equal(to_numpy(vc), c["vc"])


# ---- CUDA against the CPU op ----
CUDA_CASES = [(9, 3, 64), (32, 4, 64), (9, 3, 128), (32, 4, 128)]


@needs_cuda
@pytest.mark.parametrize("name", ["Q8_0", "Q4_K", "Q6_K"])
@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("hq,hkv,dh", CUDA_CASES)
def test_cuda_qmatmul_rope_kv(name, neox, qk_norm, hq, hkv, dh):
    rng = np.random.default_rng(seed("cuda", name, neox, qk_norm, hq, dh))
    ctx = 33
    for cache_dt, attn_norm, llama3 in ((np.float32, True, False), (np.float16, False, True)):
        c = make(name, hq, hkv, dh, ctx, 1, rng, cache_dt, qk_norm, attn_norm)
        inv = inv_freq(dh, llama3)
        for p in (0, ctx - 1, 17):  # the cache's edges and inside
            arr = to_device(tensor(np.zeros(hq + 2 * hkv, np.int32)))
            want = [to_numpy(t) for t in run_op(c, [p], inv, neox)]
            for a in (arr, None):  # one launch, and the composed kernels
                got = [to_numpy(t) for t in run_op(c, [p], inv, neox, CUDA, a)]
                tol = 1e-4 if cache_dt == np.float32 else 1e-3
                for g, w in zip(got, want):
                    close(g, w, tol)
            np.testing.assert_array_equal(to_numpy(arr), 0)


@needs_cuda
@pytest.mark.parametrize("T", [2, 7])
def test_cuda_qmatmul_rope_kv_prefill_rows(T):
    """T > 1 (the composed kernels, arrivals unused) against the CPU."""
    rng = np.random.default_rng(seed("prefill", T))
    c = make("Q8_0", 9, 3, 64, 20, T, rng, qk_norm=True)
    pos = rng.choice(20, size=T, replace=False).astype(np.int32)
    inv = inv_freq(64, False)
    arr = to_device(tensor(np.zeros(15, np.int32)))
    want = [to_numpy(t) for t in run_op(c, pos, inv, True)]
    for g, w in zip([to_numpy(t) for t in run_op(c, pos, inv, True, CUDA, arr)], want):
        close(g, w, 1e-4)
    np.testing.assert_array_equal(to_numpy(arr), 0)


@needs_cuda
def test_cuda_qmatmul_rope_kv_special_values():
    rng = np.random.default_rng(11)
    c = make("Q8_0", 9, 3, 64, 8, 1, rng, attn_norm=False)
    c["x"][0, 3] = np.inf
    c["x"][0, 40] = -0.0
    c["x"][0, 100] = 1e-40  # subnormal
    for x_nan in (False, True):
        if x_nan:
            c["x"][0, 7] = np.nan
        arr = to_device(tensor(np.zeros(15, np.int32)))
        want = [to_numpy(t) for t in run_op(c, [5], inv_freq(64, False), False)]
        got = [to_numpy(t) for t in run_op(c, [5], inv_freq(64, False), False, CUDA, arr)]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            close(g, w, 1e-4)
        np.testing.assert_array_equal(to_numpy(arr), 0)


@needs_cuda
def test_cuda_qmatmul_rope_kv_skips_bad_positions():
    """As rope_kv_write on CUDA: a position outside [0, ctx) writes no cache
    row, q is still roped at it."""
    rng = np.random.default_rng(12)
    c = make("Q8_0", 9, 3, 64, 8, 1, rng)
    inv = inv_freq(64, False)
    arr = to_device(tensor(np.zeros(15, np.int32)))
    for p in (8, -1):
        q, kc, vc = [to_numpy(t) for t in run_op(c, [p], inv, False, CUDA, arr)]
        np.testing.assert_array_equal(kc, c["kc"])
        np.testing.assert_array_equal(vc, c["vc"])
        big = dict(c, kc=np.zeros((9, 3, 64), np.float32), vc=np.zeros((9, 3, 64), np.float32))
        if p >= 0:
            close(q, to_numpy(run_op(big, [p], inv, False)[0]), 1e-4)
        np.testing.assert_array_equal(to_numpy(arr), 0)


def replay_positions(c, inv, rng, name, extra, positions, check):
    """name (ingot_qmatmul_rope_kv, or _attention: its arguments, then extra)
    on CUDA with neox rope, captured once and replayed at each position with a
    fresh c["x"]; after each replay check(p, output, k cache, v cache), all as
    numpy; the arrival counters stay zero."""
    dx, dw = to_device(tensor(c["x"])), to_device(tensor(c["wq"]))
    dpos, dinv = to_device(tensor(np.array([0], np.int32))), to_device(tensor(inv))
    dkc, dvc = to_device(tensor(c["kc"])), to_device(tensor(c["vc"]))
    arr = to_device(tensor(np.zeros(c["hq"] + 2 * c["hkv"], np.int32)))
    o, _keep = opts(c, True, CUDA, arr)

    def refill(p):
        c["x"] = rng.standard_normal(c["x"].shape).astype(np.float32)
        call("ingot_copy_", dx, to_device(tensor(c["x"])))
        call("ingot_copy_", dpos, to_device(tensor(np.array([p], np.int32))))

    def checked(p, got):
        check(p, got, to_numpy(dkc), to_numpy(dvc))
        np.testing.assert_array_equal(to_numpy(arr), 0)

    replay_steps(lambda: call(name, dx, dw, c["tid"], c["cols"], dpos, dinv, ctypes.byref(o), dkc,
                              dvc, *extra), positions, refill, checked)


@needs_cuda
@pytest.mark.parametrize("qk_norm", [False, True])
def test_cuda_qmatmul_rope_kv_graph_replays(qk_norm):
    """One capture, replayed at several positions (pos and x rewritten in
    place between replays): q and both caches follow the CPU op step by step."""
    rng = np.random.default_rng(seed("graph", qk_norm))
    hq, hkv, dh, ctx = 9, 3, 64, 12
    c = make("Q8_0", hq, hkv, dh, ctx, 1, rng, qk_norm=qk_norm)
    inv = inv_freq(dh, True)
    kc, vc = tensor(c["kc"]), tensor(c["vc"])  # the CPU's caches, advanced alongside

    def check(p, dq, dkc, dvc):
        want_q = to_numpy(run_op(c, [p], inv, True, kc=kc, vc=vc)[0])
        close(dq, want_q, 1e-4)
        close(dkc, to_numpy(kc), 1e-4)
        close(dvc, to_numpy(vc), 1e-4)

    replay_positions(c, inv, rng, "ingot_qmatmul_rope_kv", (), (0, 1, 5, ctx - 1, 3), check)
