"""ingot_qmatmul_rope_kv_attention (include/ingot/attention.h): the q|k|v
product, rope, the KV-cache write and attention in one op.

Oracles: on the CPU the op is exactly qmatmul_rope_kv then attention_cached
(bit-identical: the same kernels), and through them numpy (the two ops'
own tests). CUDA (one launch per step for T = 1 when 8 x Hq blocks fit on
the SMs and the type has an instantiation; the two ops' kernels otherwise)
against the CPU on the same inputs: caches within rtol 1e-4 / atol 1e-4 x
the largest magnitude (float16 1e-3), as test_qmatmul_rope_kv; the output
against the CPU's attention of the CPU's roped q over the caches CUDA wrote
(a float16 row may round to the neighbouring value on one side), within
1e-3 x the largest magnitude (the products sum in another order and the
scores amplify q's differences), and against CUDA's two ops
(INGOT_ATTN_QKV=0) within the same bound.
Inputs: Q4_0/Q4_1/Q8_0/Q4_K/Q6_K (the one-launch types) and Q5_0 (the two
ops) weights, rows padded to 16 bytes as the model uploads them; heads 9/3
(SmolLM2), 4/4, 16/2 and 32/4 (256 blocks: the two ops); head_dim 64, 80,
128 and 66 (not a multiple of 4: the two ops); q/k norms and the attention
norm on and off; neox and not; float32 and float16 caches; positions 0, 3,
past a block's share of rows, ctx - 1 and outside [0, ctx); rows of up to
576 or 768 columns (a block's rows staged in shared memory), 7168 (read
through L2) and 7200 (past the one-launch limit: the two ops); x not
16-byte aligned (the two ops); graph replays.
"""
import ctypes

import numpy as np
import pytest

from cuda_diff import CUDA, needs_cuda, offset_view, to_device
from ingot_ctypes import D, I, I64, IngotError, P, call, lib, sig, tensor, to_numpy
from nn_cases import pad16, pad_rows, qtable, seed
from test_qmatmul_rope_kv import QkvRopeOpts, close, inv_freq, make, opts, replay_positions

sig("ingot_qmatmul_rope_kv_attention", P, P, P, I, I64, P, P, ctypes.POINTER(QkvRopeOpts), P, P,
    D)
sig("ingot_qmatmul_rope_kv", P, P, P, I, I64, P, P, ctypes.POINTER(QkvRopeOpts), P, P)
sig("ingot_attention_cached", P, P, P, P, P, D)


def run(c, pos, inv, neox, scale, dev=None, fused=True, kc=None, vc=None, x=None):
    """The op (fused) or qmatmul_rope_kv + attention_cached on dev (None:
    CPU): (output, k cache, v cache) as numpy, and the roped q (two ops).
    x: a tensor to use instead of c["x"]."""
    mv = (lambda t: to_device(t, dev)) if dev is not None else (lambda t: t)
    kc = kc if kc is not None else mv(tensor(c["kc"]))
    vc = vc if vc is not None else mv(tensor(c["vc"]))
    hq, hkv = c["hq"], c["hkv"]
    arr = mv(tensor(np.zeros(hq + 2 * hkv, np.int32)))
    o, _keep = opts(c, neox, dev, arr)
    x, w = (x if x is not None else mv(tensor(c["x"]))), mv(tensor(c["wq"]))
    p, f = mv(tensor(np.asarray(pos, np.int32))), mv(tensor(inv))
    q = None
    if fused:
        out = call("ingot_qmatmul_rope_kv_attention", x, w, c["tid"], c["cols"], p, f,
                   ctypes.byref(o), kc, vc, scale)
    else:
        q = call("ingot_qmatmul_rope_kv", x, w, c["tid"], c["cols"], p, f, ctypes.byref(o), kc, vc)
        out = call("ingot_attention_cached", q, kc, vc, p, scale)
    np.testing.assert_array_equal(to_numpy(arr), 0)
    return to_numpy(out), to_numpy(kc), to_numpy(vc), (to_numpy(q) if q is not None else None)


def cpu_attention(q, kc, vc, pos, scale):
    return to_numpy(call("ingot_attention_cached", tensor(q), tensor(kc), tensor(vc),
                         tensor(np.asarray(pos, np.int32)), scale))


CPU_CASES = [("Q8_0", 9, 3, 64, 40, 1), ("Q4_K", 4, 2, 128, 9, 3), ("Q6_K", 6, 2, 64, 70, 5),
             ("Q4_1", 32, 4, 64, 8, 2)]


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("name,hq,hkv,dh,ctx,T", CPU_CASES)
def test_qkv_attention_is_the_composition(neox, qk_norm, name, hq, hkv, dh, ctx, T):
    rng = np.random.default_rng(seed("qkvattn", name, hq, dh, T, neox, qk_norm))
    for cache_dt, attn_norm in ((np.float32, True), (np.float16, False)):
        c = make(name, hq, hkv, dh, ctx, T, rng, cache_dt, qk_norm, attn_norm)
        pos = rng.choice(ctx, size=T, replace=False).astype(np.int32)
        inv, scale = inv_freq(dh, llama3=neox), 1.0 / np.sqrt(dh)
        got = run(c, pos, inv, neox, scale)[:3]
        for g, w in zip(got, run(c, pos, inv, neox, scale, fused=False)[:3]):
            np.testing.assert_array_equal(g, w)


def test_qkv_attention_errors_write_nothing():
    rng = np.random.default_rng(6)
    c = make("Q8_0", 2, 1, 8, 4, 2, rng, qk_norm=True)
    kc, vc = tensor(c["kc"]), tensor(c["vc"])
    x, w, inv = tensor(c["x"]), tensor(c["wq"]), tensor(inv_freq(8, False))

    def fails(o="default", pos=tensor(np.array([0, 1], np.int32)), w=w, scale=0.3, vc=vc):
        oo, _keep = opts(c, False)
        o = oo if isinstance(o, str) else o
        live = lib.ingot_live_tensors()
        with pytest.raises(IngotError) as e:
            call("ingot_qmatmul_rope_kv_attention", x, w, c["tid"], c["cols"], pos, inv,
                 ctypes.byref(o) if o is not None else None, kc, vc, scale)
        assert lib.ingot_live_tensors() == live
        msg = str(e.value)
        assert msg.startswith("qmatmul_rope_kv_attention: "), msg
        return msg

    assert "NULL" in fails(o=None)
    assert "outside" in fails(pos=tensor(np.array([1, 4], np.int32)))
    assert "NaN" in fails(scale=float("nan"))
    assert "rows" in fails(w=tensor(c["wq"][:-3]))
    assert "caches" in fails(vc=tensor(c["vc"].astype(np.float16)))
    # 3 q heads on 2 kv heads: rows (3 + 2 * 2) * 8
    c3 = make("Q8_0", 3, 2, 8, 4, 2, rng)
    kc3, vc3 = tensor(c3["kc"]), tensor(c3["vc"])
    o3, _keep3 = opts(c3, False)
    with pytest.raises(IngotError, match="qmatmul_rope_kv_attention: 3 query heads"):
        call("ingot_qmatmul_rope_kv_attention", tensor(c3["x"]), tensor(c3["wq"]), c3["tid"],
             c3["cols"], tensor(np.array([0, 1], np.int32)), tensor(inv_freq(8, False)),
             ctypes.byref(o3), kc3, vc3, 0.3)
    np.testing.assert_array_equal(to_numpy(kc), c["kc"])
    np.testing.assert_array_equal(to_numpy(vc), c["vc"])
    np.testing.assert_array_equal(to_numpy(kc3), c3["kc"])


# ---- CUDA ----
def cuda_checks(c, p, inv, neox, scale, monkeypatch):
    """One CUDA step against the CPU (see the module's oracles)."""
    tol = 1e-4 if c["kc"].dtype == np.float32 else 1e-3
    got = run(c, [p], inv, neox, scale, CUDA)
    cpu = run(c, [p], inv, neox, scale, fused=False)
    for g, w in zip(got[1:3], cpu[1:3]):
        close(g, w, tol)
    close(got[0], cpu_attention(cpu[3], got[1], got[2], [p], scale), 1e-3)
    monkeypatch.setenv("INGOT_ATTN_QKV", "0")
    two = run(c, [p], inv, neox, scale, CUDA)
    monkeypatch.delenv("INGOT_ATTN_QKV")
    close(got[0], two[0], 1e-3)
    for g, w in zip(got[1:3], two[1:3]):
        close(g, w, tol)


@needs_cuda
@pytest.mark.parametrize("name", ["Q4_1", "Q8_0", "Q4_K", "Q6_K", "Q4_0", "Q5_0"])
@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("hq,hkv,dh,qk_norm", [(9, 3, 64, False), (4, 4, 128, True),
                                               (16, 2, 80, False), (32, 4, 128, True),
                                               (8, 2, 66, False)])
def test_cuda_qkv_attention(name, neox, hq, hkv, dh, qk_norm, monkeypatch):
    rng = np.random.default_rng(seed("cudaqkvattn", name, neox, hq, dh))
    ctx = 2048
    for cache_dt, attn_norm in ((np.float32, True), (np.float16, False)):
        c = make(name, hq, hkv, dh, ctx, 1, rng, cache_dt, qk_norm, attn_norm)
        inv = inv_freq(dh, llama3=cache_dt == np.float16)
        for p in (0, 3, 1100, ctx - 1):  # 1100: past a cluster block's 256 rows
            cuda_checks(c, p, inv, neox, 1.0 / np.sqrt(dh), monkeypatch)


@needs_cuda
@pytest.mark.parametrize("blocks", [224, 225])
def test_cuda_qkv_attention_long_rows(blocks, monkeypatch):
    """Q8_0 rows of 7168 columns: a block's 24 rows (183 KB) do not fit in
    shared memory, so they are read through L2; 7200 columns: the two ops."""
    rng = np.random.default_rng(seed("longrows", blocks))
    hq, hkv, dh, ctx = 9, 3, 64, 300
    tid, cols, wq, w64 = qtable("Q8_0", (hq + 2 * hkv) * dh, blocks, rng)
    c = dict(tid=tid, cols=cols, wq=pad_rows(wq, pad16(wq.shape[1]), rng), w64=w64,
             x=rng.standard_normal((1, cols)).astype(np.float32),
             norm=(rng.standard_normal(cols) * 0.2 + 1).astype(np.float32), qkn=None,
             kc=rng.standard_normal((ctx, hkv, dh)).astype(np.float32),
             vc=rng.standard_normal((ctx, hkv, dh)).astype(np.float32), hq=hq, hkv=hkv, dh=dh)
    for p in (0, 150, ctx - 1):
        cuda_checks(c, p, inv_freq(dh, False), True, 0.125, monkeypatch)


@needs_cuda
def test_cuda_qkv_attention_unaligned_x():
    """x 4 bytes past a 16-byte boundary: the two ops, same results."""
    rng = np.random.default_rng(17)
    c = make("Q4_1", 9, 3, 64, 300, 1, rng)
    inv = inv_freq(64, False)
    for p in (0, 150):
        got = run(c, [p], inv, False, 0.125, CUDA, x=offset_view(c["x"], c["x"].shape, 1))
        cpu = run(c, [p], inv, False, 0.125, fused=False)
        for g, w in zip(got[1:3], cpu[1:3]):
            close(g, w, 1e-4)
        close(got[0], cpu_attention(cpu[3], got[1], got[2], [p], 0.125), 1e-3)


@needs_cuda
def test_cuda_qkv_attention_bad_positions(monkeypatch):
    """Outside [0, ctx): no cache row written, the position clamped, as
    CUDA's two ops (the CPU fails on it)."""
    rng = np.random.default_rng(13)
    c = make("Q4_1", 9, 3, 64, 300, 1, rng)
    inv = inv_freq(64, False)
    for p in (-1, 300, 5000):
        got = run(c, [p], inv, False, 0.125, CUDA)
        np.testing.assert_array_equal(got[1], c["kc"])
        np.testing.assert_array_equal(got[2], c["vc"])
        monkeypatch.setenv("INGOT_ATTN_QKV", "0")
        two = run(c, [p], inv, False, 0.125, CUDA)
        monkeypatch.delenv("INGOT_ATTN_QKV")
        close(got[0], two[0], 1e-3)


@needs_cuda
def test_cuda_qkv_attention_special_values():
    """inf / NaN in x reach the output as on the CPU (NaN where the CPU has NaN)."""
    rng = np.random.default_rng(14)
    c = make("Q8_0", 9, 3, 64, 40, 1, rng, attn_norm=False)
    c["x"][0, 3] = np.nan
    got = run(c, [20], inv_freq(64, False), False, 0.125, CUDA)
    cpu = run(c, [20], inv_freq(64, False), False, 0.125, fused=False)
    for g, w in zip(got[:3], cpu[:3]):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))


@needs_cuda
def test_cuda_qkv_attention_graph_replays():
    """One capture replayed at several positions (x and pos rewritten in
    place): the output and both caches follow the CPU step by step."""
    rng = np.random.default_rng(15)
    hq, hkv, dh, ctx = 9, 3, 64, 600
    c = make("Q4_1", hq, hkv, dh, ctx, 1, rng, qk_norm=True)
    inv, scale = inv_freq(dh, True), 0.125
    kc, vc = tensor(c["kc"]), tensor(c["vc"])  # the CPU's caches, advanced alongside

    def check(p, dout, gkc, gvc):
        cpu = run(c, [p], inv, True, scale, fused=False, kc=kc, vc=vc)
        close(gkc, cpu[1], 1e-4)
        close(gvc, cpu[2], 1e-4)
        close(dout, cpu_attention(cpu[3], gkc, gvc, [p], scale), 1e-3)

    replay_positions(c, inv, rng, "ingot_qmatmul_rope_kv_attention", (scale,),
                     (0, 1, 77, ctx - 1, 300), check)
