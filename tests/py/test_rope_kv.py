"""ingot_rope_kv_write (include/ingot/attention.h): per-head RMS norm
(optional), rope of q and k, k and v written to the KV caches, in one op.

Oracles: the composition of the existing ops on the same device (rms_norm,
rope, kv_cache_write: bit-identical on the CPU, which shares their code
paths and rounding), numpy (float64 reference of the norm, float32 rope as
test_model_device's rope_ref; rtol/atol 1e-5), and the CPU backend for the
CUDA kernel (rtol/atol 1e-5 for float32; float16 caches within 1e-3, one
rounding of values of magnitude <= ~5).
Inputs: q/k/v as column slices of one fused q|k|v product (row-strided
views: the no-copy path), as step-2 views (copied by the front), T up to 67,
head_dim 6..256, float32 and float16 caches, positions in any order.
"""
import ctypes

import numpy as np
import pytest

from cuda_diff import CUDA, needs_cuda, to_device
from ingot_ctypes import IngotError, P, call, lib, sig, strided, tensor, to_numpy
from test_model_device import rope_ref


class RopeKvOpts(ctypes.Structure):
    _fields_ = [("neox", ctypes.c_bool), ("q_norm", P), ("k_norm", P), ("eps", ctypes.c_double),
                ("settled", ctypes.c_bool)]


sig("ingot_rope_kv_write", P, P, P, P, P, P, ctypes.POINTER(RopeKvOpts), P, P)
sig("ingot_rope", P, P, P, P, ctypes.c_bool)
sig("ingot_kv_cache_write", ctypes.c_int, P, P, P, P, P)

RNG = np.random.default_rng(77)
EPS = 1e-6


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def case(T, hq, hkv, dh, ctx, cache_dt, norm):
    qkv = rand(T, (hq + 2 * hkv) * dh) * 2
    pos = RNG.choice(ctx, size=T, replace=False).astype(np.int32)
    inv = (10000.0 ** (-2.0 * np.arange(dh // 2) / dh)).astype(np.float64)
    kc0 = rand(ctx, hkv, dh).astype(cache_dt)
    vc0 = rand(ctx, hkv, dh).astype(cache_dt)
    w = (rand(dh) + 1.5, rand(dh) + 1.5) if norm else None
    return qkv, pos, inv, kc0, vc0, w


def views(qkv_t, T, hq, hkv, dh):
    """q, k, v as [T, H, dh] views of the columns of one qkv tensor."""
    out, at = [], 0
    for h in (hq, hkv, hkv):
        n = call("ingot_narrow", qkv_t, 1, at, h * dh)
        out.append(call("ingot_view", n, 3, [T, h, dh]))
        at += h * dh
    return out


def fused(dev, qkv, T, hq, hkv, dh, pos, inv, kc0, vc0, w, neox, as_strided=False):
    """rope_kv_write on dev; returns (q roped, k cache, v cache) as numpy."""
    mv = (lambda t: to_device(t, dev)) if dev is not None else (lambda t: t)
    if as_strided:
        parts = np.split(qkv, [hq * dh, (hq + hkv) * dh], axis=1)
        q, k, v = [mv(strided(p.reshape(T, -1, dh))) for p in parts]
    else:
        q, k, v = views(mv(tensor(qkv)), T, hq, hkv, dh)
    kc, vc = mv(tensor(kc0)), mv(tensor(vc0))
    wq, wk = (mv(tensor(w[0])), mv(tensor(w[1]))) if w else (None, None)
    o = RopeKvOpts(neox, wq.ptr if wq else None, wk.ptr if wk else None, EPS)
    qo = call("ingot_rope_kv_write", q, k, v, mv(tensor(pos)), mv(tensor(inv)), ctypes.byref(o),
              kc, vc)
    return to_numpy(qo), to_numpy(kc), to_numpy(vc)


def composed(qkv, T, hq, hkv, dh, pos, inv, kc0, vc0, w, neox):
    """The same step from the existing CPU ops."""
    q, k, v = [call("ingot_contiguous", x) for x in views(tensor(qkv), T, hq, hkv, dh)]
    if w:
        q = call("ingot_rms_norm", q, tensor(w[0]), EPS)
        k = call("ingot_rms_norm", k, tensor(w[1]), EPS)
    p, f = tensor(pos), tensor(inv)
    q, k = call("ingot_rope", q, p, f, neox), call("ingot_rope", k, p, f, neox)
    kc, vc = tensor(kc0), tensor(vc0)
    call("ingot_kv_cache_write", kc, vc, k, v, p)
    return to_numpy(q), to_numpy(kc), to_numpy(vc)


def numpy_ref(qkv, T, hq, hkv, dh, pos, inv, kc0, vc0, w, neox):
    q, k, v = [x.reshape(T, -1, dh) for x in np.split(qkv, [hq * dh, (hq + hkv) * dh], axis=1)]
    if w:
        def rms(x, g):
            x64 = x.astype(np.float64)
            return (x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + EPS) * g).astype(np.float32)
        q, k = rms(q, w[0]), rms(k, w[1])
    q, k = rope_ref(q, pos, inv, neox), rope_ref(k, pos, inv, neox)
    kc, vc = kc0.copy(), vc0.copy()
    kc[pos], vc[pos] = k.astype(kc.dtype), v.astype(vc.dtype)
    return q, kc, vc


SHAPES = [(1, 9, 3, 64, 40), (5, 6, 2, 6, 9), (67, 4, 4, 128, 300), (2, 2, 1, 256, 3)]


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("T,hq,hkv,dh,ctx", SHAPES)
def test_rope_kv_write_matches_composition_and_numpy(neox, norm, T, hq, hkv, dh, ctx):
    for cache_dt in (np.float32, np.float16):
        c = case(T, hq, hkv, dh, ctx, cache_dt, norm)
        args = (c[0], T, hq, hkv, dh) + c[1:]
        got = fused(None, *args, neox)
        for g, want in zip(got, composed(*args, neox)):
            np.testing.assert_array_equal(g, want)
        tol = 1e-5 if cache_dt == np.float32 else 1e-3
        for g, want in zip(got, numpy_ref(*args, neox)):
            np.testing.assert_allclose(g.astype(np.float64), want.astype(np.float64), rtol=tol,
                                       atol=tol)
        # step-2 views (the front copies them) give the same bits
        for g, s in zip(got, fused(None, *args, neox, as_strided=True)):
            np.testing.assert_array_equal(g, s)


def test_rope_kv_write_special_values():
    T, hq, hkv, dh, ctx = 3, 2, 1, 8, 5
    qkv, pos, inv, kc0, vc0, _ = case(T, hq, hkv, dh, ctx, np.float32, False)
    qkv[0, 0] = np.nan
    qkv[1, 3] = np.inf
    qkv[2, 2 * dh] = -0.0
    qkv[2, 5] = 1e-40  # subnormal
    args = (qkv, T, hq, hkv, dh, pos, inv, kc0, vc0, None, False)
    for g, want in zip(fused(None, *args), composed(*args)):
        np.testing.assert_array_equal(g, want)


def test_rope_kv_write_errors_write_nothing():
    T, hq, hkv, dh, ctx = 2, 2, 1, 4, 4
    qkv, _, inv, kc0, vc0, w = case(T, hq, hkv, dh, ctx, np.float32, True)
    kc, vc = tensor(kc0), tensor(vc0)
    q, k, v = views(tensor(qkv), T, hq, hkv, dh)
    good = tensor(np.array([0, 1], np.int32))

    def run(q=q, k=k, v=v, pos=good, inv=tensor(inv), opts=RopeKvOpts(False, None, None, EPS),
            kc=kc, vc=vc):
        live = lib.ingot_live_tensors()
        with pytest.raises(IngotError, match="rope_kv_write") as e:
            call("ingot_rope_kv_write", q, k, v, pos, inv,
                 ctypes.byref(opts) if opts is not None else None, kc, vc)
        assert lib.ingot_live_tensors() == live
        return str(e.value)

    assert "outside" in run(pos=tensor(np.array([1, 4], np.int32)))
    assert "NULL" in run(opts=None)
    wq = tensor(w[0])
    assert "both" in run(opts=RopeKvOpts(False, wq.ptr, None, EPS))
    assert "head_dim" in run(opts=RopeKvOpts(False, wq.ptr, tensor(rand(3)).ptr, EPS))
    assert "like the caches" in run(k=q)
    assert "int32" in run(pos=tensor(np.array([0, 1], np.int64)))
    assert "inv_freq" in run(inv=tensor(np.ones(3)))
    assert "float32" in run(v=tensor(rand(T, hkv, dh).astype(np.float64)))
    assert "even" in run(q=tensor(rand(T, hq, 5)), k=tensor(rand(T, hkv, 5)),
                         v=tensor(rand(T, hkv, 5)), kc=tensor(rand(ctx, hkv, 5)),
                         vc=tensor(rand(ctx, hkv, 5)))
    np.testing.assert_array_equal(to_numpy(kc), kc0)
    np.testing.assert_array_equal(to_numpy(vc), vc0)


@needs_cuda
@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("T,hq,hkv,dh,ctx", SHAPES + [(128, 32, 8, 128, 2048), (1, 16, 2, 256, 1)])
def test_cuda_rope_kv_write(neox, norm, T, hq, hkv, dh, ctx):
    for cache_dt in (np.float32, np.float16):
        c = case(T, hq, hkv, dh, ctx, cache_dt, norm)
        args = (c[0], T, hq, hkv, dh) + c[1:]
        tol = 1e-5 if cache_dt == np.float32 else 1e-3
        for strd in (False, True):
            for g, want in zip(fused(CUDA, *args, neox, as_strided=strd), fused(None, *args, neox)):
                np.testing.assert_allclose(g.astype(np.float64), want.astype(np.float64), rtol=tol,
                                           atol=tol)


@needs_cuda
def test_cuda_rope_kv_write_skips_bad_rows():
    """CUDA cannot check positions without a round trip: it skips the cache
    rows of positions outside [0, ctx) and still ropes q."""
    T, hq, hkv, dh, ctx = 2, 2, 1, 8, 4
    qkv, _, inv, kc0, vc0, _ = case(T, hq, hkv, dh, ctx, np.float32, False)
    pos = np.array([3, 4], np.int32)
    q, kc, vc = fused(CUDA, qkv, T, hq, hkv, dh, pos, inv, kc0, vc0, None, False)
    wq, wk, wv = numpy_ref(qkv[:1], 1, hq, hkv, dh, pos[:1], inv, kc0, vc0, None, False)
    np.testing.assert_allclose(kc, wk, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(vc, wv, rtol=1e-5, atol=1e-5)
    qr = numpy_ref(qkv, T, hq, hkv, dh, np.array([3, 4], np.int32), inv,
                   np.zeros((5, hkv, dh), np.float32), np.zeros((5, hkv, dh), np.float32), None,
                   False)[0]
    np.testing.assert_allclose(q, qr, rtol=1e-5, atol=1e-5)
