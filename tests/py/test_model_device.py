"""The device decode path of the model runtime: the attention ops (rope,
kv_cache_write, attention_cached: include/ingot/attention.h), the device
sampler ingot_sample_tokens, and (with the model) the tensor forward.

Oracles: numpy for the ops; ingot_sample (src/model/sample.c) for the sampler
op (identical tokens); the CPU backend for every CUDA kernel (cuda_diff).
Tolerances: float32 results within rtol 1e-5 / atol 1e-5 of numpy (float64
reference; attention sums up to a few thousand terms), float16 caches within
the rounding of the cache (the reference reads the same rounded values).
"""
import ctypes

import numpy as np
import pytest

from cuda_diff import CUDA, HAVE_CUDA, needs_cuda, to_device
from ingot_ctypes import IngotError, call, lib, sig, strided, tensor, to_numpy, P, D, B
from model_ctypes import TOKEN_FN, GenOpts, SampleOpts, forward_logits, tokenize
from refs import smollm2_is_real

F = ctypes.c_float


sig("ingot_rope", P, P, P, P, B)
sig("ingot_kv_cache_write", ctypes.c_int, P, P, P, P, P)
sig("ingot_attention_cached", P, P, P, P, P, D)
sig("ingot_sample_tokens", P, P, ctypes.POINTER(SampleOpts), P, P)
sig("ingot_sample_tokens_into", P, P, ctypes.POINTER(SampleOpts), P, P, P, P)

RNG = np.random.default_rng(1234)


# ---- numpy references ----
def rope_ref(x, pos, inv, neox):
    T, H, Dh = x.shape
    half = Dh // 2
    ang = pos.astype(np.float64)[:, None] * inv.astype(np.float64)[None, :]
    c = np.cos(ang).astype(np.float32)[:, None, :]
    s = np.sin(ang).astype(np.float32)[:, None, :]
    a, b = (np.arange(half), np.arange(half) + half) if neox else (2 * np.arange(half),
                                                                   2 * np.arange(half) + 1)
    y = x.copy()
    x0, x1 = x[:, :, a], x[:, :, b]
    y[:, :, a] = x0 * c - x1 * s
    y[:, :, b] = x0 * s + x1 * c
    return y


def attention_ref(q, kc, vc, pos, scale):
    T, Hq, Dh = q.shape
    grp = Hq // kc.shape[1]
    out = np.zeros(q.shape, dtype=np.float64)
    for t in range(T):
        n = pos[t] + 1
        for h in range(Hq):
            k = kc[:n, h // grp].astype(np.float64)
            v = vc[:n, h // grp].astype(np.float64)
            sc = k @ q[t, h].astype(np.float64) * scale
            p = np.exp(sc - sc.max())
            out[t, h] = p @ v / p.sum()
    return out


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- rope ----
@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("T,H,Dh", [(1, 1, 2), (3, 5, 6), (7, 9, 64), (2, 4, 128)])
def test_rope_matches_numpy(neox, T, H, Dh):
    x = rand(T, H, Dh)
    pos = RNG.choice(5000, size=T, replace=False).astype(np.int32)  # not contiguous
    inv = (10000.0 ** (-2.0 * np.arange(Dh // 2) / Dh)).astype(np.float32)
    got = to_numpy(call("ingot_rope", tensor(x), tensor(pos), tensor(inv), neox))
    np.testing.assert_allclose(got, rope_ref(x, pos, inv, neox), rtol=1e-5, atol=1e-5)
    # float64 frequencies and a strided x give the same values
    got64 = to_numpy(call("ingot_rope", strided(x), tensor(pos), tensor(inv.astype(np.float64)),
                          neox))
    np.testing.assert_array_equal(got64, got)


def test_rope_errors():
    x, pos, inv = rand(2, 3, 4), np.array([0, 1], np.int32), np.ones(2, np.float32)
    for args, what in [((rand(2, 3, 5), pos, np.ones(2, np.float32)), "odd"),
                       ((rand(2, 12), pos, inv), "3-D"),
                       ((x, np.array([0, 1, 2], np.int32), inv), "pos"),
                       ((x, pos.astype(np.int64), inv), "int32"),
                       ((x, pos, np.ones(3, np.float32)), "inv_freq"),
                       ((x.astype(np.float64), pos, inv), "float32")]:
        with pytest.raises(IngotError, match=what):
            call("ingot_rope", *[tensor(a) for a in args], False)


# ---- kv_cache_write ----
@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_kv_cache_write_matches_numpy(dt):
    ctx, hkv, dh, T = 37, 3, 8, 5
    kc0, vc0 = rand(ctx, hkv, dh).astype(dt), rand(ctx, hkv, dh).astype(dt)
    kc, vc = tensor(kc0), tensor(vc0)
    k, v = rand(T, hkv, dh), rand(T, hkv, dh)
    pos = np.array([36, 0, 17, 4, 5], np.int32)
    call("ingot_kv_cache_write", kc, vc, strided(k), tensor(v), tensor(pos))
    wk, wv = kc0.copy(), vc0.copy()
    wk[pos], wv[pos] = k.astype(dt), v.astype(dt)
    np.testing.assert_array_equal(to_numpy(kc), wk)
    np.testing.assert_array_equal(to_numpy(vc), wv)


def test_kv_cache_write_errors_write_nothing():
    kc0 = rand(4, 2, 4)
    kc, vc = tensor(kc0), tensor(kc0)
    k = rand(2, 2, 4)
    with pytest.raises(IngotError, match="outside"):
        call("ingot_kv_cache_write", kc, vc, tensor(k), tensor(k), tensor(np.array([1, 4],
                                                                                    np.int32)))
    np.testing.assert_array_equal(to_numpy(kc), kc0)
    with pytest.raises(IngotError, match="float32 or float16"):
        call("ingot_kv_cache_write", tensor(kc0.astype(np.float64)), tensor(kc0.astype(np.float64)),
             tensor(k), tensor(k), tensor(np.array([0, 1], np.int32)))
    with pytest.raises(IngotError, match="T,"):
        call("ingot_kv_cache_write", kc, vc, tensor(rand(2, 1, 4)), tensor(rand(2, 1, 4)),
             tensor(np.array([0, 1], np.int32)))
    with pytest.raises(IngotError, match="contiguous"):
        nc = call("ingot_transpose", tensor(rand(2, 4, 4)), 0, 1)
        call("ingot_kv_cache_write", nc, nc, tensor(rand(2, 2, 4)), tensor(rand(2, 2, 4)),
             tensor(np.array([0, 1], np.int32)))


# ---- attention_cached ----
@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("T,hq,hkv,dh,ctx", [(1, 1, 1, 1, 1), (3, 6, 2, 16, 50),
                                             (5, 9, 3, 64, 300), (2, 4, 4, 128, 33),
                                             (1, 32, 4, 128, 192), (2, 8, 1, 256, 65)])
def test_attention_cached_matches_numpy(dt, T, hq, hkv, dh, ctx):
    q = rand(T, hq, dh)
    kc, vc = rand(ctx, hkv, dh).astype(dt), rand(ctx, hkv, dh).astype(dt)
    pos = RNG.integers(0, ctx, size=T).astype(np.int32)  # any order, repeats allowed
    pos[0] = ctx - 1
    scale = 1 / np.sqrt(dh)
    got = to_numpy(call("ingot_attention_cached", strided(q), tensor(kc), tensor(vc),
                        tensor(pos), scale))
    np.testing.assert_allclose(got, attention_ref(q, kc, vc, pos, scale), rtol=1e-5, atol=1e-5)


def test_attention_cached_errors():
    q, c, pos = rand(2, 4, 8), rand(10, 2, 8), np.array([0, 9], np.int32)
    cases = [((rand(2, 3, 8), c, c, pos), "multiple"),
             ((rand(2, 4, 6), c, c, pos), "head_dim"),
             ((q, c, c.astype(np.float16), pos), "float32 or float16"),
             ((q, c, rand(10, 2, 4), pos), "shapes differ"),
             ((q, c, c, np.array([0, 10], np.int32)), "outside"),
             ((q, c, c, np.array([0], np.int32)), "pos")]
    for args, what in cases:
        with pytest.raises(IngotError, match=what):
            call("ingot_attention_cached", *[tensor(a) for a in args], 0.5)


# ---- sampler ----
SAMPLE_CASES = [
    dict(temperature=0.0),
    dict(temperature=0.0, repeat_penalty=1.3),
    dict(temperature=0.8, top_k=40, top_p=0.95),
    dict(temperature=1.0, top_k=1),
    dict(temperature=1.5, top_k=1000, top_p=0.5, repeat_penalty=1.1),
    dict(temperature=0.7, top_k=0, top_p=1.0),  # all candidates (small vocab only on cuda)
]


def opts(**kw):
    o = SampleOpts(0.0, 40, 0.95, 1.0, 64, 0)
    for k, v in kw.items():
        setattr(o, k, v)
    return o


def host_sample(o, logits, ring, step):
    lg = np.ascontiguousarray(logits, dtype=np.float32).copy()
    h = np.ascontiguousarray(ring, dtype=np.int32)
    oo = SampleOpts(o.temperature, o.top_k, o.top_p, o.repeat_penalty, len(h), o.seed)
    return lib.ingot_sample(ctypes.byref(oo), lg.ctypes.data, len(lg), h.ctypes.data, len(h),
                            step)


def special_logits(V):
    lg = rand(V) * 3
    lg[RNG.integers(0, V, 8)] = lg.max()  # ties at the top
    lg[RNG.integers(0, V, 4)] = -np.inf
    lg[5] = -0.0
    lg[6] = 0.0
    return lg


def run_sampler(dev, o, logits, ring, step):
    """ingot_sample_tokens on dev; returns (token, ring after, step after)."""
    mv = (lambda a: to_device(tensor(a), dev)) if dev is not None else tensor
    h = mv(np.asarray(ring, np.int32)) if ring is not None else None
    s = mv(np.array([step], np.int64))
    tok = call("ingot_sample_tokens", mv(logits), ctypes.byref(o), h, s)
    return (int(to_numpy(tok)[0]), None if h is None else to_numpy(h), int(to_numpy(s)[0]))


@pytest.mark.parametrize("case", range(len(SAMPLE_CASES)))
@pytest.mark.parametrize("V", [7, 1000, 49152])
def test_sample_tokens_matches_ingot_sample(case, V):
    kw = SAMPLE_CASES[case]
    for seed in range(6):
        o = opts(seed=seed * 7919, **kw)
        lg = special_logits(V)
        ring = RNG.integers(-1, V, 16).astype(np.int32)
        step = seed * 3 + 1
        want = host_sample(o, lg, ring, step)
        tok, h, s = run_sampler(None, o, lg, ring, step)
        assert tok == want, (kw, seed)
        assert s == step + 1
        wr = ring.copy()
        wr[step % len(ring)] = want
        np.testing.assert_array_equal(h, wr)
        # without a ring: no penalty, counter still advances
        tok2, _, s2 = run_sampler(None, o, lg, None, step)
        assert tok2 == host_sample(opts(seed=o.seed, **{k: v for k, v in kw.items()
                                                          if k != "repeat_penalty"}),
                                   lg, np.full(1, -1, np.int32), step)
        assert s2 == step + 1


def test_sample_tokens_errors():
    lg, st = tensor(rand(10)), tensor(np.zeros(1, np.int64))
    o = opts()
    with pytest.raises(IngotError, match="float32"):
        call("ingot_sample_tokens", tensor(rand(10).astype(np.float64)), ctypes.byref(o), None, st)
    with pytest.raises(IngotError, match="int64"):
        call("ingot_sample_tokens", lg, ctypes.byref(o), None, tensor(np.zeros(1, np.int32)))
    with pytest.raises(IngotError, match="int64"):
        call("ingot_sample_tokens", lg, ctypes.byref(o), None, tensor(np.zeros(3, np.int64)))
    with pytest.raises(IngotError, match="hist"):
        call("ingot_sample_tokens", lg, ctypes.byref(o), tensor(np.zeros(3, np.int64)), st)
    with pytest.raises(IngotError, match="V"):
        call("ingot_sample_tokens", tensor(rand(2, 5)), ctypes.byref(o), None, st)
    with pytest.raises(IngotError, match="NULL"):
        call("ingot_sample_tokens", lg, None, None, st)


@pytest.mark.parametrize("dev", [None, pytest.param(CUDA, marks=needs_cuda)],
                         ids=["cpu", "cuda"])
@pytest.mark.parametrize("V", [1000, 49152])
def test_sample_tokens_into(dev, V):
    """The same token as ingot_sample_tokens, also written into tok (int64 or
    int32), pos incremented, ring and step as before; tok and pos optional."""
    mv = (lambda a: to_device(tensor(a), dev)) if dev is not None else tensor
    for i, kw in enumerate((dict(temperature=0.0), dict(temperature=0.8, top_k=40, top_p=0.9,
                                                         repeat_penalty=1.3))):
        o = opts(seed=17 + i, **kw)
        lg = special_logits(V)
        ring = RNG.integers(-1, V, 16).astype(np.int32)
        step = 5 + i
        want, wring, wstep = run_sampler(dev, o, lg, ring, step)
        for tdt, with_pos in ((np.int64, True), (np.int32, True), (np.int64, False),
                              (None, True), (None, False)):
            h, st = mv(ring), mv(np.array([step], np.int64))
            tok = mv(np.array([-7], tdt)) if tdt else None
            pos = mv(np.array([41], np.int32)) if with_pos else None
            out = call("ingot_sample_tokens_into", mv(lg), ctypes.byref(o), h, st, tok, pos)
            assert int(to_numpy(out)[0]) == want, (kw, tdt, with_pos)
            if tok is not None:
                t = to_numpy(tok)
                assert t.dtype == tdt and int(t[0]) == want
            if pos is not None:
                assert int(to_numpy(pos)[0]) == 42
            np.testing.assert_array_equal(to_numpy(h), wring)
            assert int(to_numpy(st)[0]) == wstep


@pytest.mark.parametrize("dev", [None, pytest.param(CUDA, marks=needs_cuda)],
                         ids=["cpu", "cuda"])
@pytest.mark.parametrize("V", [1000, 49152, 151936])
def test_sample_tokens_step_pair(dev, V):
    """step int64 [2] (step[1] = 0: CUDA's arrival counter, no memset):
    consecutive calls on one step tensor give the tokens of step [1] calls
    on the CPU, and step[1] is 0 after each."""
    mv = (lambda a: to_device(tensor(a), dev)) if dev is not None else tensor
    for kw in (dict(temperature=0.0), dict(temperature=0.9, top_k=64, top_p=0.95,
                                           repeat_penalty=1.2)):
        o = opts(seed=99, **kw)
        ring = RNG.integers(-1, V, 32).astype(np.int32)
        h, st = mv(ring), mv(np.array([3, 0], np.int64))
        wring = ring.copy()
        for i in range(4):
            lg = special_logits(V)
            want, wring, wstep = run_sampler(None, o, lg, wring, 3 + i)
            got = call("ingot_sample_tokens", mv(lg), ctypes.byref(o), h, st)
            assert int(to_numpy(got)[0]) == want, (kw, i)
            np.testing.assert_array_equal(to_numpy(st), [wstep, 0])
            np.testing.assert_array_equal(to_numpy(h), wring)


def test_sample_tokens_into_errors():
    lg, st = tensor(rand(10)), tensor(np.zeros(1, np.int64))
    o = opts()
    tok, pos = tensor(np.zeros(1, np.int64)), tensor(np.zeros(1, np.int32))
    with pytest.raises(IngotError, match="'tok'"):
        call("ingot_sample_tokens_into", lg, ctypes.byref(o), None, st,
             tensor(np.zeros(1, np.float32)), pos)
    with pytest.raises(IngotError, match="'tok'"):
        call("ingot_sample_tokens_into", lg, ctypes.byref(o), None, st,
             tensor(np.zeros(2, np.int64)), pos)
    with pytest.raises(IngotError, match="'pos'"):
        call("ingot_sample_tokens_into", lg, ctypes.byref(o), None, st, tok,
             tensor(np.zeros(1, np.int64)))
    # nothing written on an error
    assert int(to_numpy(st)[0]) == 0 and int(to_numpy(tok)[0]) == 0
    assert int(to_numpy(pos)[0]) == 0
    if HAVE_CUDA:
        with pytest.raises(IngotError, match="device"):
            call("ingot_sample_tokens_into", lg, ctypes.byref(o), None, st, tok,
                 to_device(pos, CUDA))


# ---- CUDA vs CPU ----
@needs_cuda
@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("T,H,Dh", [(1, 9, 64), (67, 5, 6), (512, 32, 128)])
def test_cuda_rope(neox, T, H, Dh):
    from cuda_diff import diff
    pos = RNG.integers(0, 100000, T).astype(np.int32)
    inv = (500000.0 ** (-2.0 * np.arange(Dh // 2) / Dh)).astype(np.float64)
    diff("ingot_rope", strided(rand(T, H, Dh)), tensor(pos), tensor(inv), neox)


def _cuda_kv(dt, ctx, hkv, dh, pos):
    kc0, vc0 = rand(ctx, hkv, dh).astype(dt), rand(ctx, hkv, dh).astype(dt)
    k, v = rand(len(pos), hkv, dh), rand(len(pos), hkv, dh)
    out = []
    for dev in (None, CUDA):
        mv = (lambda a: to_device(tensor(a), dev)) if dev else tensor
        kc, vc = mv(kc0), mv(vc0)
        call("ingot_kv_cache_write", kc, vc, mv(k), mv(v), mv(np.asarray(pos, np.int32)))
        out.append((to_numpy(kc), to_numpy(vc)))
    return out


@needs_cuda
@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_cuda_kv_cache_write(dt):
    (ck, cv), (gk, gv) = _cuda_kv(dt, 2049, 3, 64, [2048, 0, 77, 1000, 5])
    np.testing.assert_array_equal(gk, ck)
    np.testing.assert_array_equal(gv, cv)


@needs_cuda
def test_cuda_kv_cache_write_skips_bad_rows():
    # the CPU refuses; CUDA cannot check without a round trip and skips the row
    kc0 = rand(8, 1, 4)
    kc, vc = to_device(tensor(kc0)), to_device(tensor(kc0))
    k = rand(2, 1, 4)
    call("ingot_kv_cache_write", kc, vc, to_device(tensor(k)), to_device(tensor(k)),
         to_device(tensor(np.array([3, 8], np.int32))))
    want = kc0.copy()
    want[3] = k[0]
    np.testing.assert_array_equal(to_numpy(kc), want)


@needs_cuda
@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("T,hq,hkv,dh,ctx", [(1, 9, 3, 64, 2048), (1, 32, 8, 128, 40000),
                                             (64, 9, 3, 64, 2048), (5, 6, 2, 17, 301),
                                             (3, 4, 4, 256, 257), (1, 1, 1, 1, 1),
                                             (1, 9, 3, 64, 512), (2, 16, 2, 128, 513),
                                             # <= 512 rows: the cluster path, g = 8, 1, 4
                                             (1, 32, 4, 128, 192), (1, 8, 8, 64, 9),
                                             (4, 16, 4, 256, 511), (3, 8, 1, 64, 65),
                                             (2, 4, 2, 128, 8), (6, 12, 3, 6, 100),
                                             # T = 1 up to 8192 rows: the cluster path with
                                             # tiles (g = 3, 8, 1); past it: chunks + combine
                                             (1, 9, 3, 64, 8192), (1, 16, 2, 128, 4096),
                                             (1, 4, 4, 256, 3000), (1, 32, 4, 128, 8193)])
def test_cuda_attention_cached(dt, T, hq, hkv, dh, ctx):
    from cuda_diff import diff
    q = rand(T, hq, dh)
    kc, vc = rand(ctx, hkv, dh).astype(dt), rand(ctx, hkv, dh).astype(dt)
    kc[min(7, ctx - 1)] *= 30  # a peaked softmax
    pos = RNG.integers(0, ctx, size=T).astype(np.int32)
    pos[0] = ctx - 1
    if T > 1:
        pos[1] = 0
    # The CPU sums the ctx rows one after another in f32 (rounding error grows
    # with ctx, ~3e-4 relative seen at 40000), CUDA per chunk then combined.
    rtol = max(1e-4, 2e-8 * ctx)
    diff("ingot_attention_cached", strided(q), tensor(kc), tensor(vc), tensor(pos),
         1 / np.sqrt(dh), tol=(rtol, 1e-5))


@needs_cuda
@pytest.mark.parametrize("ctx", [9000, 2048, 1500, 512, 192])  # T = 1: a cluster up to 8192 rows
def test_cuda_attention_cached_positions_on_device(ctx):
    """The same launch at growing positions (what a replayed graph does):
    rewriting pos in place changes the result as the CPU says."""
    dh = 64
    q, kc, vc = rand(1, 9, dh), rand(ctx, 3, dh), rand(ctx, 3, dh)
    pos_d = to_device(tensor(np.zeros(1, np.int32)))
    qd, kd, vd = to_device(tensor(q)), to_device(tensor(kc)), to_device(tensor(vc))
    for p in [x for x in [0, 23, 24, 25, 63, 64, 130, 191, 255, 256, 257, 511, 1023, 1024, 1499,
                          2047, 8999] if x < ctx]:
        call("ingot_copy_", pos_d, to_device(tensor(np.array([p], np.int32))))
        got = to_numpy(call("ingot_attention_cached", qd, kd, vd, pos_d, 0.125))
        want = to_numpy(call("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc),
                             tensor(np.array([p], np.int32)), 0.125))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(p))


def chunk_edges(ctx, parts=8):
    """Positions at the edges of ceil(ctx / 8)-row chunks and of the cache:
    where an off-by-one would show. The cluster splits the live rows p + 1
    over its 8 blocks (ceil((p + 1) / 8) each), so these include live
    lengths at, below and above multiples of 8, and lengths < 8 (blocks
    without rows)."""
    chunk = -(-ctx // parts)
    ps = {0, 1, ctx - 2, ctx - 1}
    for c in range(chunk, ctx, chunk):
        ps |= {c - 1, c, c + 1}
    return np.array(sorted(p for p in ps if 0 <= p < ctx), np.int32)


@needs_cuda
@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("dh", [64, 128, 256, 6, 1])
@pytest.mark.parametrize("ctx", [1, 2, 7, 8, 9, 63, 64, 65, 191, 192, 193, 511, 512])
def test_cuda_attention_cached_chunk_edges(dt, dh, ctx):
    """Every chunk-edge position of a cache of ctx rows, one row each (T > 1)."""
    from cuda_diff import diff
    pos = chunk_edges(ctx)
    q = rand(len(pos), 8, dh)
    kc, vc = rand(ctx, 2, dh).astype(dt), rand(ctx, 2, dh).astype(dt)
    diff("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc), tensor(pos),
         1 / np.sqrt(dh), tol=(1e-4, 1e-5))


@needs_cuda
@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("dh", [128, 6])
@pytest.mark.parametrize("ctx", [192, 512, 1500])
def test_cuda_attention_cached_ignores_rows_past_pos(dt, dh, ctx):
    """Rows past pos[t] are never read: NaN and inf there change nothing."""
    from cuda_diff import diff
    pos = np.array([ctx // 3, 0, ctx // 2 + 1], np.int32)
    q = rand(3, 8, dh)
    kc, vc = rand(ctx, 4, dh).astype(dt), rand(ctx, 4, dh).astype(dt)
    kc[pos.max() + 1:] = np.nan
    vc[pos.max() + 1:] = np.inf
    want = diff("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc), tensor(pos),
                1 / np.sqrt(dh), tol=(1e-4, 1e-5))
    assert np.isfinite(to_numpy(want)).all()


@needs_cuda
@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_cuda_attention_cached_special_values(dt):
    """NaN and inf propagate as on the CPU (cluster path): a NaN query gives
    a NaN head; an inf key element a +inf score (NaN head) or a -inf one
    (weight 0); all scores -inf a NaN head; an inf value an inf output."""
    from cuda_diff import diff
    ctx, dh = 192, 128
    q = rand(2, 8, dh)
    kc, vc = rand(ctx, 2, dh).astype(dt), rand(ctx, 2, dh).astype(dt)
    q[0, 0, 5] = np.nan
    kc[3, 0, 7] = np.inf  # kv head 0 (q heads 0..3), row 3
    q[:, :4, 7] = -1.0  # score -inf: row 3 weighs nothing
    q[1, 1, 7] = 1.0  # score +inf: NaN
    kc[:, 1, 0] = -np.inf
    q[1, 4:, 0] = 1.0  # row 1, heads 4..7: every score -inf
    vc[150, 0, 9] = np.inf  # read by row 0 (pos 191), not row 1 (pos 100)
    pos = np.array([ctx - 1, 100], np.int32)
    out = diff("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc), tensor(pos), 0.125,
               tol=(1e-4, 1e-5))
    assert np.isnan(to_numpy(out)).any() and np.isfinite(to_numpy(out)).any()


@needs_cuda
@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("ctx", [192, 1500])
def test_cuda_attention_cached_unaligned_cache(dt, ctx):
    """Caches whose data start one element past an aligned address (views):
    no vector loads there, the same result."""
    hkv, dh = 2, 128
    q = rand(1, 8, dh)
    kc, vc = rand(ctx, hkv, dh).astype(dt), rand(ctx, hkv, dh).astype(dt)
    pos = np.array([ctx - 1], np.int32)
    want = to_numpy(call("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc),
                         tensor(pos), 0.125))

    def shifted(c):
        flat = call("ingot_to", tensor(np.concatenate([c.ravel()[:1], c.ravel()])), CUDA)
        return call("ingot_as_strided", flat, 3, list(c.shape), [hkv * dh, dh, 1], 1)

    got = to_numpy(call("ingot_attention_cached", to_device(tensor(q)), shifted(kc), shifted(vc),
                        to_device(tensor(pos)), 0.125))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def decode_tile_edges(ctx, parts=8, tile=128):
    """Positions p where the live rows p + 1 split over the cluster's blocks
    (ceil((p + 1) / 8) rows each) meet a tile edge of 128 rows or a block edge."""
    ps = {0, 1, 6, 7, 8, 9, ctx - 1}
    for rows in (tile, 2 * tile, 3 * tile):  # rows a block
        for n in (parts * rows - parts, parts * rows, parts * rows + 1):  # live rows
            ps |= {n - 2, n - 1, n}
    return sorted(p for p in ps if 0 <= p < ctx)


@needs_cuda
@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("hq,hkv,dh", [(9, 3, 64), (16, 2, 128), (8, 8, 6)])
def test_cuda_attention_decode_graph_tile_edges(dt, hq, hkv, dh):
    """The decode launch (T = 1, 2048-row cache) captured once in a graph and
    replayed at positions on the cluster's block and tile edges (the live rows
    are split on the device), against the CPU at each position."""
    ctx = 2048
    q, kc, vc = rand(1, hq, dh), rand(ctx, hkv, dh).astype(dt), rand(ctx, hkv, dh).astype(dt)
    kc[1000] *= 20  # a peaked softmax for the positions past it
    pos_d = to_device(tensor(np.zeros(1, np.int32)))
    qd, kd, vd = to_device(tensor(q)), to_device(tensor(kc)), to_device(tensor(vc))
    call("ingot_attention_cached", qd, kd, vd, pos_d, 1 / np.sqrt(dh))  # warm-up
    assert lib.ingot_graph_begin(CUDA) == 0, lib.ingot_last_error()
    try:
        out = call("ingot_attention_cached", qd, kd, vd, pos_d, 1 / np.sqrt(dh))
    finally:
        g = lib.ingot_graph_end(CUDA)
    assert g, lib.ingot_last_error()
    try:
        for p in decode_tile_edges(ctx):
            call("ingot_copy_", pos_d, to_device(tensor(np.array([p], np.int32))))
            assert lib.ingot_graph_replay(g) == 0, lib.ingot_last_error()
            want = to_numpy(call("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc),
                                 tensor(np.array([p], np.int32)), 1 / np.sqrt(dh)))
            np.testing.assert_allclose(to_numpy(out), want, rtol=1e-4, atol=1e-5, err_msg=str(p))
    finally:
        del out  # lives in the graph's private pool: release before the graph
        lib.ingot_graph_destroy(g)


@needs_cuda
@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_cuda_attention_decode_special_values(dt):
    """T = 1 over several tiles a block (online softmax): -inf scores in whole
    early tiles and finite ones later weigh 0 (no NaN from the rescale), a
    NaN query gives a NaN head, an inf key a NaN head (+inf score), all
    scores -inf a NaN head, an inf value an inf output."""
    from cuda_diff import diff
    ctx, dh = 4096, 64
    q = rand(1, 8, dh)
    kc, vc = rand(ctx, 4, dh).astype(dt), rand(ctx, 4, dh).astype(dt)
    kc[:3000, 0, 0] = -np.inf
    q[0, 0:2, 0] = 1.0  # heads 0, 1: rows < 3000 score -inf, the rest finite
    q[0, 2, 5] = np.nan  # head 2: NaN
    kc[:, 1, 3] = -np.inf
    q[0, 3, 3] = 1.0  # head 3 (kv head 1): every score -inf
    kc[2500, 2, 9] = np.inf
    q[0, 4, 9] = 1.0  # head 4 (kv head 2): one +inf score
    vc[3500, 3, 1] = np.inf  # heads 6, 7: an inf value
    pos = np.array([ctx - 2], np.int32)
    out = to_numpy(diff("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc), tensor(pos),
                        0.125, tol=(1e-4, 1e-5)))
    assert np.isfinite(out[0, :2]).all() and np.isnan(out[0, 2:5]).any()


@needs_cuda
@pytest.mark.parametrize("case", range(len(SAMPLE_CASES)))
@pytest.mark.parametrize("V", [7, 1000, 4096, 4097, 8192, 49152, 100003, 151936])
def test_cuda_sample_tokens_matches_cpu(case, V):
    kw = SAMPLE_CASES[case]
    if kw.get("temperature", 0) > 0 and kw.get("top_k", 40) <= 0 and V > 1024:
        pytest.skip("cuda samples from at most 1024 candidates")
    for seed in range(8):
        o = opts(seed=seed * 104729 + 1, **kw)
        lg = special_logits(V)
        if seed == 7:
            lg[11 % V] = np.nan
        ring = RNG.integers(-1, V, 64).astype(np.int32)
        step = seed * 5
        gt, gh, gs = run_sampler(CUDA, o, lg, ring, step)
        ct, ch, cs = run_sampler(None, o, lg, ring, step)
        assert (gt, gs) == (ct, cs), (kw, seed)
        np.testing.assert_array_equal(gh, ch)


@needs_cuda
@pytest.mark.parametrize("V", [4097, 49152, 151936])
def test_cuda_sample_tokens_ties_across_blocks(V):
    """Vocabularies over one block's slice (4096) are split over blocks whose
    candidates are merged: ties must still go to the lowest ids, as on the CPU
    (flat logits; a tied maximum in the last block and the first)."""
    flat = np.zeros(V, np.float32)
    peaks = flat.copy()
    peaks[[V - 1, 4095, 4096 % V, 3]] = 5.0
    for lg in (flat, peaks):
        for kw in (dict(temperature=0.0), dict(temperature=1.0, top_k=40),
                   dict(temperature=0.9, top_k=1024, top_p=0.9),
                   dict(temperature=1.0, top_k=3, repeat_penalty=2.0)):
            for seed in range(4):
                o = opts(seed=seed, **kw)
                ring = np.array([3, V - 1, -1, 3], np.int32)
                gt = run_sampler(CUDA, o, lg, ring, seed)
                ct = run_sampler(None, o, lg, ring, seed)
                assert gt[0] == ct[0] and gt[2] == ct[2], (kw, seed)
                np.testing.assert_array_equal(gt[1], ct[1])


@needs_cuda
def test_cuda_sample_tokens_too_many_candidates():
    o = opts(temperature=1.0, top_k=0)
    with pytest.raises(IngotError, match="1024"):
        run_sampler(CUDA, o, rand(5000), None, 0)


# ---- the model: the tensor forward (CPU here, CUDA on a GPU) vs the raw path ----
I64 = ctypes.c_int64
VOCAB = 49152
PROMPTS = ["The capital of France is", "def fibonacci(n):\n", "Once upon a time, in a land far"]
SAMPLED = dict(temperature=0.8, top_k=40, top_p=0.9, repeat_penalty=1.1, seed=3)
# Logits of the tensor forward vs the raw float path: the same math in another
# order (float32 sums): observed ~5e-5 on logits of magnitude ~30.
LOGIT_ATOL_CPU = 1e-3
# CUDA kernels sum in other orders again (warp reductions, flash-decoding).
LOGIT_ATOL_CUDA = 1e-2


class EnvSet:
    def __init__(self, **kw):
        self.kw, self.old = kw, {}

    def __enter__(self):
        import os
        for k, v in self.kw.items():
            self.old[k] = os.environ.get(k)
            os.environ[k] = v

    def __exit__(self, *a):
        import os
        for k, v in self.old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def smol():
    from refs import smollm2_path
    return smollm2_path()


def load(path, mode):
    """raw: the CPU's raw path with float activations; tensor: the CPU tensor
    forward; cuda: cuda:0."""
    from ingot_ctypes import Device
    with EnvSet(INGOT_EXACT_MATVEC="1", INGOT_TENSOR_FORWARD="1" if mode == "tensor" else "0"):
        m = lib.ingot_model_load(path.encode(), CUDA if mode == "cuda" else Device(0, 0))
    assert m, lib.ingot_last_error().decode()
    return m


def logits(m, ids):
    return forward_logits(m, ids, VOCAB)


def generate(m, ids, n, **sample):
    lib.ingot_model_reset(m)
    o = GenOpts(n, opts(**sample), False)
    out, nout = np.zeros(n, np.int32), I64()
    st = lib.ingot_generate(m, ids.ctypes.data, len(ids), ctypes.byref(o), TOKEN_FN(lambda *a: 0),
                            None, out.ctypes.data, n, ctypes.byref(nout), None)
    assert st == 0, lib.ingot_last_error().decode()
    return list(out[:nout.value])


def compare_models(path, mode, atol):
    ref, m = load(path, "raw"), load(path, mode)
    try:
        for text in PROMPTS:
            ids = tokenize(ref, text)
            for mm in (ref, m):
                lib.ingot_model_reset(mm)
            want, got = logits(ref, ids), logits(m, ids)
            np.testing.assert_allclose(got, want, atol=atol, rtol=0, err_msg=text)
            # one more token through the cache
            nxt = [int(want.argmax())]
            np.testing.assert_allclose(logits(m, nxt), logits(ref, nxt), atol=atol, rtol=0)
            assert lib.ingot_model_n_past(m) == len(ids) + 1
        # generation (slow on the CPU: one prompt)
        ids = tokenize(ref, PROMPTS[0])
        g = generate(ref, ids, 32)
        assert len(g) == 32
        assert generate(m, ids, 32) == g
        assert generate(m, ids, 16, **SAMPLED) == generate(ref, ids, 16, **SAMPLED)
    finally:
        lib.ingot_model_free(ref)
        lib.ingot_model_free(m)


def test_tensor_forward_matches_raw_path(smol):
    compare_models(smol, "tensor", LOGIT_ATOL_CPU)


def test_tensor_forward_long_prompt(smol):
    """A prompt longer than one prefill pass (512 rows, forward_dev.c), then
    one more token: the same logits as the raw path."""
    ref, m = load(smol, "raw"), load(smol, "tensor")
    try:
        ids = np.concatenate([tokenize(ref, PROMPTS[i % 3] + " ") for i in range(70)])
        assert len(ids) > 512
        np.testing.assert_allclose(logits(m, ids), logits(ref, ids), atol=LOGIT_ATOL_CPU, rtol=0)
        nxt = [7]
        np.testing.assert_allclose(logits(m, nxt), logits(ref, nxt), atol=LOGIT_ATOL_CPU, rtol=0)
    finally:
        lib.ingot_model_free(ref)
        lib.ingot_model_free(m)


def gen_more(m, ids, n, stop_at_eos=False, stop_after=None):
    """ingot_generate continuing the cache (no reset); the callback stops it
    after stop_after streamed tokens. Returns (tokens, n_past after)."""
    seen = []

    def cb(tok, piece, length, user):
        seen.append(tok)
        return int(stop_after is not None and len(seen) >= stop_after)

    o = GenOpts(n, opts(), stop_at_eos)
    out, nout = np.zeros(n, np.int32), I64()
    st = lib.ingot_generate(m, ids.ctypes.data, len(ids), ctypes.byref(o), TOKEN_FN(cb), None,
                            out.ctypes.data, n, ctypes.byref(nout), None)
    assert st == 0, lib.ingot_last_error().decode()
    assert seen == list(out[:nout.value])  # nothing streamed that is not counted
    return list(out[:nout.value]), lib.ingot_model_n_past(m)


# A prompt whose greedy answer ends with a stop token within 24 tokens (the
# chat markers are spelled out: ingot_tokenize without special tokens).
CHAT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2? Answer with one number.<|im_end|>\n"
        "<|im_start|>assistant\n")


def test_tensor_generate_stops_and_continues(smol):
    """The device loop queues step g + 1 before it reads token g: a stop
    token or a callback stop leaves a step that never counts. Tokens, n_past
    and the cache the next call continues from must be the host loop's."""
    ref, m = load(smol, "raw"), load(smol, "tensor")
    try:
        turns = [(tokenize(ref, CHAT), 24, True, None),  # ends at a stop token (15 tokens)
                 (tokenize(ref, " And again"), 12, False, 3),  # the callback stops it
                 (tokenize(ref, " Then"), 5, False, None)]  # max_tokens
        for mm in (ref, m):
            lib.ingot_model_reset(mm)
        for i, (ids, n, eos, after) in enumerate(turns):
            want = gen_more(ref, ids, n, eos, after)
            assert gen_more(m, ids, n, eos, after) == want, i
            if i == 0 and smollm2_is_real(smol):  # the GPU machine's stand-in never stops
                assert len(want[0]) < n  # the stop token ended it
            if i == 1:
                assert len(want[0]) == 3
    finally:
        lib.ingot_model_free(ref)
        lib.ingot_model_free(m)


@needs_cuda
def test_cuda_generate_stops_and_continues(smol):
    """As above on cuda:0 (graph replays, async token copies) against the CPU
    tensor forward."""
    ref, m = load(smol, "tensor"), load(smol, "cuda")
    try:
        turns = [(tokenize(ref, CHAT), 24, True, None), (tokenize(ref, " And again"), 12, False, 3),
                 (tokenize(ref, " Then"), 5, False, None)]
        for mm in (ref, m):
            lib.ingot_model_reset(mm)
        for i, (ids, n, eos, after) in enumerate(turns):
            assert gen_more(m, ids, n, eos, after) == gen_more(ref, ids, n, eos, after), i
    finally:
        lib.ingot_model_free(ref)
        lib.ingot_model_free(m)


def test_tensor_forward_errors_leave_the_cache(smol):
    m = load(smol, "tensor")
    try:
        ids = np.array([1, 2, 3], np.int32)
        logits(m, ids)
        bad = np.array([5, VOCAB], np.int32)
        assert lib.ingot_model_forward(m, bad.ctypes.data, 2, None) != 0
        assert "outside" in lib.ingot_last_error().decode()
        assert lib.ingot_model_n_past(m) == 3
        big = np.zeros(5000, np.int32)
        assert lib.ingot_model_forward(m, big.ctypes.data, len(big), None) != 0
        assert lib.ingot_model_n_past(m) == 3
    finally:
        lib.ingot_model_free(m)


@needs_cuda
def test_cuda_model_matches_cpu(smol):
    compare_models(smol, "cuda", LOGIT_ATOL_CUDA)


# Prompts of >= 64 tokens run their products on bf16 tensor cores (x and W
# rounded to bf16: ~2^-8 relative a product, src/cuda/qmatmul_prefill.cu).
LOGIT_ATOL_CUDA_BF16 = 0.5


@needs_cuda
def test_cuda_long_prompt_matches_cpu(smol):
    """A prompt of two prefill passes (512 + rest rows: bf16 products, the
    tiled prefill attention), then one token through the cache: logits close
    to the CPU's, the same top token; INGOT_PREFILL_F32=1 (f32 products) within
    the f32 tolerance."""
    ref, m = load(smol, "raw"), load(smol, "cuda")
    try:
        ids = np.concatenate([tokenize(ref, PROMPTS[i % 3] + " ") for i in range(70)])
        assert len(ids) > 512
        want = logits(ref, ids)
        got = logits(m, ids)
        np.testing.assert_allclose(got, want, atol=LOGIT_ATOL_CUDA_BF16, rtol=0)
        assert got.argmax() == want.argmax()
        np.testing.assert_allclose(logits(m, [7]), logits(ref, [7]), atol=LOGIT_ATOL_CUDA_BF16,
                                   rtol=0)
        lib.ingot_model_reset(m)
        with EnvSet(INGOT_PREFILL_F32="1"):
            got32 = logits(m, ids)
        np.testing.assert_allclose(got32, want, atol=LOGIT_ATOL_CUDA, rtol=0)
    finally:
        lib.ingot_model_free(ref)
        lib.ingot_model_free(m)


@needs_cuda
def test_cuda_graph_on_and_off_agree(smol):
    m = load(smol, "cuda")
    try:
        ids = tokenize(m, PROMPTS[0])
        with EnvSet(INGOT_NO_GRAPH="1"):
            eager = (generate(m, ids, 48), generate(m, ids, 48, **SAMPLED))
        graph = (generate(m, ids, 48), generate(m, ids, 48, **SAMPLED))
        assert graph == eager
        assert len(graph[0]) == 48
    finally:
        lib.ingot_model_free(m)


def decode_tokens(path):
    """Greedy and sampled tokens on cuda:0, through the graph and eagerly."""
    m = load(path, "cuda")
    try:
        ids = tokenize(m, PROMPTS[0])
        with EnvSet(INGOT_NO_GRAPH="1"):
            eager = [generate(m, ids, 48), generate(m, ids, 48, **SAMPLED)]
        graph = [generate(m, ids, 48), generate(m, ids, 48, **SAMPLED)]
        return [[int(t) for t in r] for r in eager + graph]
    finally:
        lib.ingot_model_free(m)


@needs_cuda
def test_cuda_pdl_on_and_off_agree(smol):
    """The decode kernels launched with PDL (programmatic dependent launch)
    and without (INGOT_NO_PDL=1, read once a process: a child process) give
    the same tokens, eager and replayed from the captured graph."""
    import json
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import json, sys; sys.path.insert(0, %r); import test_model_device as t; "
            "print(json.dumps(t.decode_tokens(%r)))" % (here, str(smol)))
    env = dict(os.environ, INGOT_NO_PDL="1")
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stderr
    off = json.loads(child.stdout.strip().splitlines()[-1])
    on = decode_tokens(smol)
    assert on == off
    assert on[0] == on[2] and len(on[0]) == 48


@needs_cuda
def test_cuda_mixed_devices_fail():
    q, c, pos = rand(1, 2, 8), rand(4, 2, 8), np.array([3], np.int32)
    with pytest.raises(IngotError, match="attention_cached"):
        call("ingot_attention_cached", to_device(tensor(q)), tensor(c), tensor(c), tensor(pos), 1.0)
    with pytest.raises(IngotError, match="rope"):
        call("ingot_rope", to_device(tensor(q)), tensor(pos), tensor(np.ones(4, np.float32)), False)
    with pytest.raises(IngotError, match="sample_tokens"):
        call("ingot_sample_tokens", to_device(tensor(rand(10))), ctypes.byref(opts()), None,
             tensor(np.zeros(1, np.int64)))
