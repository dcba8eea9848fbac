"""ingot_rope_kv_attention (include/ingot/attention.h): rope_kv_write then
attention_cached in one op (on CUDA, T = 1 and a cache of up to 8192 rows:
one launch, the attention kernel with a rope/cache-write prologue).

Oracles: the two-op sequence ingot_rope_kv_write + ingot_attention_cached
on the same device (CPU: bit-identical, the op runs exactly those kernels;
CUDA: the fused kernel computes the same values in the same order, checked
within rtol 1e-5 / atol 1e-6, and INGOT_ATTN_ROPE=0 bit-identical); numpy
(test_rope_kv's norm/rope reference, then test_model_device's float64
attention: rtol/atol 1e-4); the CPU backend for CUDA (attention output
within rtol 1e-4 / atol 1e-5, sums over up to 2048 rows in another order;
with float16 caches against the CPU's attention over the caches CUDA wrote,
since the new row may round to the neighbouring float16; caches as
test_rope_kv: float32 1e-5, float16 1e-3).
Inputs: q/k/v as column slices of one q|k|v tensor (what the model passes),
step-2 views (copied by the front), Hq/Hkv 1, 4, 8 (Hq 4 to 32: both block
sizes of the CUDA kernel), head_dim 64/128/80 (and
6, 66: the kernel's scalar loads), with and without q/k norm, neox and not,
float32 and float16 caches, positions 0, small, past one block's kTile rows,
ctx - 1 and outside [0, ctx) (CUDA: nothing written, the position clamped),
NaN in k, graph replays at several positions; the options' settled hint
(CUDA reads pos and the old rows before its PDL wait) against the same
calls without it, bit for bit.
"""
import ctypes

import numpy as np
import pytest

from cuda_diff import CUDA, needs_cuda, replay_steps, to_device
from ingot_ctypes import D, IngotError, P, call, lib, sig, strided, tensor, to_numpy
from test_model_device import attention_ref
from test_rope_kv import RopeKvOpts, views
from test_rope_kv import numpy_ref as rope_kv_ref

sig("ingot_rope_kv_attention", P, P, P, P, P, P, ctypes.POINTER(RopeKvOpts), P, P, D)
sig("ingot_rope_kv_write", P, P, P, P, P, P, ctypes.POINTER(RopeKvOpts), P, P)
sig("ingot_attention_cached", P, P, P, P, P, D)

EPS = 1e-6  # q/k norms (test_rope_kv's numpy_ref uses 1e-6)
RNG = np.random.default_rng(2026)


def case(T, hq, hkv, dh, ctx, pos, cache_dt=np.float32, norm=False):
    """q|k|v rows [T, (hq + 2 hkv) dh], positions, frequencies, caches, norms."""
    qkv = RNG.standard_normal((T, (hq + 2 * hkv) * dh)).astype(np.float32)
    inv = 10000.0 ** (-2.0 * np.arange(dh // 2) / dh)
    kc = RNG.standard_normal((ctx, hkv, dh)).astype(cache_dt)
    vc = RNG.standard_normal((ctx, hkv, dh)).astype(cache_dt)
    w = tuple(RNG.standard_normal(dh).astype(np.float32) + 1.5 for _ in range(2)) if norm else None
    return dict(qkv=qkv, pos=np.asarray(pos, np.int32), inv=inv, kc=kc, vc=vc, w=w, hq=hq,
                hkv=hkv, dh=dh, scale=1.0 / np.sqrt(dh))


def run(c, neox, dev=None, fused=True, as_strided=False, roped_q=False, settled=False):
    """The op (fused) or rope_kv_write + attention_cached on dev (None: CPU):
    (attention output, k cache, v cache) as numpy, and with roped_q (two
    ops) the roped q. settled: the options' hint (CUDA's one launch then
    reads pos, the norms, the frequencies and the old cache rows before its
    PDL wait)."""
    mv = (lambda t: to_device(t, dev)) if dev is not None else (lambda t: t)
    T, hq, hkv, dh = c["qkv"].shape[0], c["hq"], c["hkv"], c["dh"]
    if as_strided:
        parts = np.split(c["qkv"], [hq * dh, (hq + hkv) * dh], axis=1)
        q, k, v = [mv(strided(p.reshape(T, -1, dh))) for p in parts]
    else:
        q, k, v = views(mv(tensor(c["qkv"])), T, hq, hkv, dh)
    kc, vc = mv(tensor(c["kc"])), mv(tensor(c["vc"]))
    wq, wk = (mv(tensor(c["w"][0])), mv(tensor(c["w"][1]))) if c["w"] else (None, None)
    o = RopeKvOpts(neox, wq.ptr if wq else None, wk.ptr if wk else None, EPS, settled)
    pos, inv = mv(tensor(c["pos"])), mv(tensor(c["inv"]))
    if fused:
        out = call("ingot_rope_kv_attention", q, k, v, pos, inv, ctypes.byref(o), kc, vc,
                   c["scale"])
    else:
        qr = call("ingot_rope_kv_write", q, k, v, pos, inv, ctypes.byref(o), kc, vc)
        out = call("ingot_attention_cached", qr, kc, vc, pos, c["scale"])
        if roped_q:
            return to_numpy(out), to_numpy(kc), to_numpy(vc), to_numpy(qr)
    return to_numpy(out), to_numpy(kc), to_numpy(vc)


def numpy_ref(c, neox):
    T, hq, hkv, dh = c["qkv"].shape[0], c["hq"], c["hkv"], c["dh"]
    q, kc, vc = rope_kv_ref(c["qkv"], T, hq, hkv, dh, c["pos"], c["inv"], c["kc"], c["vc"],
                            c["w"], neox)
    return attention_ref(q, kc, vc, c["pos"], c["scale"]), kc, vc


def close(got, want, rtol, atol):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=atol)


def equal(got, want):
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# ---- CPU: the two ops exactly, and numpy ----
@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("cache_dt", [np.float32, np.float16])
@pytest.mark.parametrize("T,hq,hkv,dh,ctx", [(1, 8, 2, 64, 40), (1, 4, 4, 80, 300),
                                             (3, 8, 1, 128, 20), (5, 6, 2, 6, 9)])
def test_rope_kv_attention_is_the_two_ops(neox, norm, cache_dt, T, hq, hkv, dh, ctx):
    pos = np.sort(RNG.choice(ctx, size=T, replace=False))
    c = case(T, hq, hkv, dh, ctx, pos, cache_dt, norm)
    got = run(c, neox)
    equal(got, run(c, neox, fused=False))
    equal(got, run(c, neox, settled=True))  # a hint the CPU has no use for
    close(got, numpy_ref(c, neox), 1e-4, 1e-4)
    equal(got, run(c, neox, as_strided=True))  # step-2 views: copied, same bits


def test_rope_kv_attention_special_values():
    c = case(2, 4, 2, 8, 6, [2, 5])
    c["qkv"][0, 4 * 8 + 1] = np.nan  # k of kv head 0, row 0: heads 0, 1 of row 0 NaN
    c["qkv"][1, 3] = np.inf
    c["kc"][1, 1, 2] = np.nan  # an old cache row of kv head 1: heads 2, 3 NaN
    got = run(c, False)
    equal(got, run(c, False, fused=False))
    assert np.isnan(got[0][0, :2]).all() and np.isnan(got[0][:, 2:]).all()


def test_rope_kv_attention_errors_change_nothing():
    """Every rule of the two ops, with their messages naming this op."""
    T, hq, hkv, dh, ctx = 2, 4, 2, 8, 6
    c = case(T, hq, hkv, dh, ctx, [0, 1], norm=True)
    kc, vc = tensor(c["kc"]), tensor(c["vc"])
    q, k, v = views(tensor(c["qkv"]), T, hq, hkv, dh)
    good = dict(q=q, k=k, v=v, pos=tensor(c["pos"]), inv=tensor(c["inv"]),
                opts=RopeKvOpts(True, None, None, EPS), kc=kc, vc=vc, scale=0.3)

    def message(fn, args):
        live = lib.ingot_live_tensors()
        with pytest.raises(IngotError) as e:
            call(fn, *args)
        assert lib.ingot_live_tensors() == live
        return str(e.value)

    def check(which, **bad):
        a = dict(good, **bad)
        o = ctypes.byref(a["opts"]) if a["opts"] is not None else None
        rkv = (a["q"], a["k"], a["v"], a["pos"], a["inv"], o, a["kc"], a["vc"])
        got = message("ingot_rope_kv_attention", rkv + (a["scale"],))
        assert got.startswith("rope_kv_attention: ")
        if which == "rope_kv_write":
            want = message("ingot_rope_kv_write", rkv)
        else:  # the roped q has q's shape: attention_cached's rules on q itself
            want = message("ingot_attention_cached", (a["q"], a["kc"], a["vc"], a["pos"],
                                                      a["scale"]))
        assert got.endswith(want.split(": ", 1)[1])  # a kernel's error: "op: kernel's op: ..."
        np.testing.assert_array_equal(to_numpy(kc), c["kc"])
        np.testing.assert_array_equal(to_numpy(vc), c["vc"])

    f64 = lambda x: tensor(x.astype(np.float64))
    check("rope_kv_write", pos=tensor(np.array([1, 6], np.int32)))  # outside the cache
    check("rope_kv_write", pos=tensor(np.array([0, 1], np.int64)))
    check("rope_kv_write", pos=tensor(np.array([0], np.int32)))
    check("rope_kv_write", opts=None)
    wq, w3 = tensor(c["w"][0]), tensor(np.ones(3, np.float32))  # alive while their .ptr is used
    check("rope_kv_write", opts=RopeKvOpts(False, wq.ptr, None, EPS))
    check("rope_kv_write", opts=RopeKvOpts(False, wq.ptr, w3.ptr, EPS))
    check("rope_kv_write", k=q)
    check("rope_kv_write", inv=tensor(np.ones(3)))
    check("rope_kv_write", v=f64(to_numpy(v)))
    check("rope_kv_write", q=tensor(np.ones((T, hq * dh), np.float32)))
    check("rope_kv_write", kc=tensor(c["kc"].astype(np.float16)))
    check("rope_kv_write", vc=strided(np.ones((ctx, hkv, dh), np.float32)))
    check("rope_kv_write", pos=None)
    odd = lambda *s: tensor(np.ones(s, np.float32))
    check("rope_kv_write", q=odd(T, hq, 5), k=odd(T, hkv, 5), v=odd(T, hkv, 5),
          kc=odd(ctx, hkv, 5), vc=odd(ctx, hkv, 5))
    check("attention_cached", q=odd(T, 3, dh))  # 3 heads on 2 kv heads
    check("attention_cached", scale=float("nan"))


# ---- CUDA ----
def cpu_attention_over(c, neox, kc, vc):
    """The CPU's attention of its own roped q over the caches kc, vc."""
    qr = run(c, neox, fused=False, roped_q=True)[3]
    return to_numpy(call("ingot_attention_cached", tensor(qr), tensor(kc), tensor(vc),
                         tensor(c["pos"]), c["scale"]))


def cuda_checks(c, neox):
    """Fused CUDA against the CPU op and against the CUDA two-kernel path.
    float16 caches: the new row's k may round to the neighbouring float16 on
    one side (its float32 values differ in the last bit), which moves the
    output by ~1e-3 relative; the output is checked against the CPU's
    attention over the caches CUDA wrote (the caches themselves within 1e-3)."""
    got = run(c, neox, CUDA)
    cpu = run(c, neox)
    f32 = c["kc"].dtype == np.float32
    tol = 1e-5 if f32 else 1e-3
    want = cpu[0] if f32 else cpu_attention_over(c, neox, got[1], got[2])
    np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-5)
    close(got[1:], cpu[1:], tol, tol)
    close(got, run(c, neox, CUDA, fused=False), 1e-5, 1e-6)
    return got


@needs_cuda
@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2), (16, 2), (32, 4)])
@pytest.mark.parametrize("dh", [64, 128, 80, 66])
def test_cuda_rope_kv_attention_decode(neox, norm, hq, hkv, dh):
    # The first tile's old K/V rows load before the prologue, row pos patched
    # in after it (p = 0, 3: in the first batch). 32 heads: 256 blocks, more
    # than an H200's 132 SMs, so 128-thread blocks; fewer heads: 256 threads.
    ctx = 2048
    for cache_dt in (np.float32, np.float16):
        for p in (0, 3, 1100, ctx - 1):  # 1100: more than kTile rows a cluster block
            cuda_checks(case(1, hq, hkv, dh, ctx, [p], cache_dt, norm), neox)


@needs_cuda
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("hq,hkv,dh", [(32, 4, 128), (8, 2, 64), (4, 4, 80)])
@pytest.mark.parametrize("cache_dt", [np.float32, np.float16])
def test_cuda_rope_kv_attention_settled(norm, hq, hkv, dh, cache_dt):
    """settled (pos and the old rows read before the PDL wait): the same bits
    as without it at every position kind (first batch, past a block's kTile
    rows, the last row, outside [0, ctx): clamped, nothing written), and the
    CPU's values; with step-2 (copied) inputs too."""
    ctx = 2048
    for p in (0, 3, 1100, ctx - 1, -1, 5000):
        c = case(1, hq, hkv, dh, ctx, [p], cache_dt, norm)
        got = run(c, True, CUDA, settled=True)
        equal(got, run(c, True, CUDA))
        if 0 <= p < ctx:
            want = run(c, True)
            if cache_dt == np.float32:
                close(got, want, 1e-4, 1e-5)
            else:
                np.testing.assert_allclose(got[0], cpu_attention_over(c, True, got[1], got[2]),
                                           rtol=1e-4, atol=1e-5)
        else:
            equal(got[1:], (c["kc"], c["vc"]))
    equal(run(c, False, CUDA, as_strided=True, settled=True), run(c, False, CUDA))


@needs_cuda
@pytest.mark.parametrize("T,ctx", [(1, 9000), (3, 40), (70, 300)])
def test_cuda_rope_kv_attention_composed_paths(T, ctx):
    """Outside the one-launch path (a longer cache, several rows): the two kernels."""
    pos = np.sort(RNG.choice(ctx, size=T, replace=False))
    c = case(T, 8, 2, 128, ctx, pos, norm=True)
    got = cuda_checks(c, True)
    equal(got, run(c, True, CUDA, fused=False))


@needs_cuda
def test_cuda_rope_kv_attention_strided_inputs():
    c = case(1, 8, 2, 64, 300, [200], norm=True)
    equal(run(c, True, CUDA, as_strided=True), run(c, True, CUDA))


@needs_cuda
@pytest.mark.parametrize("cache_dt", [np.float32, np.float16])
def test_cuda_rope_kv_attention_special_values(cache_dt):
    c = case(1, 8, 2, 64, 300, [150], cache_dt, norm=True)
    c["qkv"][0, 8 * 64 + 5] = np.nan  # k of kv head 0: its 4 heads NaN
    c["kc"][20, 1, 3] = np.inf  # an old row of kv head 1
    got = cuda_checks(c, False)
    assert np.isnan(got[0][0, :4]).all()


@needs_cuda
@pytest.mark.parametrize("p", [-1, 300, 5000])
def test_cuda_rope_kv_attention_bad_positions(p):
    """CUDA skips the cache write and clamps the position, as the two kernels."""
    c = case(1, 8, 2, 64, 300, [p], norm=True)
    got = run(c, False, CUDA)
    equal(got, run(c, False, CUDA, fused=False))
    equal(got[1:], (c["kc"], c["vc"]))


@needs_cuda
def test_cuda_rope_kv_attention_device_errors():
    """Inputs on two devices: rope_kv_write's message, nothing written."""
    T, hq, hkv, dh, ctx = 1, 4, 2, 8, 6
    c = case(T, hq, hkv, dh, ctx, [3])
    q, k, v = views(to_device(tensor(c["qkv"])), T, hq, hkv, dh)
    pos, inv = to_device(tensor(c["pos"])), to_device(tensor(c["inv"]))
    o = RopeKvOpts(True, None, None, EPS)
    for kc, vc in ((tensor(c["kc"]), tensor(c["vc"])),
                   (to_device(tensor(c["kc"])), tensor(c["vc"]))):
        msgs = []
        for fn, extra in (("ingot_rope_kv_attention", (0.3,)), ("ingot_rope_kv_write", ())):
            with pytest.raises(IngotError) as e:
                call(fn, q, k, v, pos, inv, ctypes.byref(o), kc, vc, *extra)
            msgs.append(str(e.value))
        assert msgs[0] == msgs[1].replace("rope_kv_write", "rope_kv_attention", 1)
        np.testing.assert_array_equal(to_numpy(kc), c["kc"])
        np.testing.assert_array_equal(to_numpy(vc), c["vc"])


@needs_cuda
def test_cuda_rope_kv_attention_env_switch(monkeypatch):
    """INGOT_ATTN_ROPE=0 runs the two kernels: their bits exactly."""
    c = case(1, 16, 2, 128, 1024, [700], np.float16, norm=True)
    monkeypatch.setenv("INGOT_ATTN_ROPE", "0")
    equal(run(c, True, CUDA), run(c, True, CUDA, fused=False))
    monkeypatch.delenv("INGOT_ATTN_ROPE")
    close(run(c, True, CUDA), run(c, True, CUDA, fused=False), 1e-5, 1e-6)


@needs_cuda
@pytest.mark.parametrize("cache_dt", [np.float32, np.float16])
@pytest.mark.parametrize("settled", [False, True])
def test_cuda_rope_kv_attention_graph_replays(cache_dt, settled):
    """One capture replayed at several positions (q|k|v and pos rewritten in
    place, outside the graph): output and caches bit-equal to the op run
    eagerly on twin caches, with the options' settled hint or without."""
    hq, hkv, dh, ctx = 8, 2, 128, 1024
    c = case(1, hq, hkv, dh, ctx, [0], cache_dt, norm=True)
    dqkv, dpos = to_device(tensor(c["qkv"])), to_device(tensor(c["pos"]))
    q, k, v = views(dqkv, 1, hq, hkv, dh)
    dinv = to_device(tensor(c["inv"]))
    wq, wk = to_device(tensor(c["w"][0])), to_device(tensor(c["w"][1]))
    o = RopeKvOpts(True, wq.ptr, wk.ptr, EPS, settled)
    gkc, gvc = to_device(tensor(c["kc"])), to_device(tensor(c["vc"]))
    ekc, evc = to_device(tensor(c["kc"])), to_device(tensor(c["vc"]))
    step = lambda kc, vc: call("ingot_rope_kv_attention", q, k, v, dpos, dinv, ctypes.byref(o),
                               kc, vc, c["scale"])
    step(ekc, evc)  # the eager twin's warm-up (replay_steps warms the captured one)

    def refill(p):
        qkv = RNG.standard_normal(c["qkv"].shape).astype(np.float32)
        call("ingot_copy_", dqkv, to_device(tensor(qkv)))
        call("ingot_copy_", dpos, to_device(tensor(np.array([p], np.int32))))

    def check(_, gout):
        eout = step(ekc, evc)
        equal((gout, to_numpy(gkc), to_numpy(gvc)), (to_numpy(eout), to_numpy(ekc), to_numpy(evc)))

    replay_steps(lambda: step(gkc, gvc), (1, 2, 130, 1000, ctx - 1, 7), refill, check)
