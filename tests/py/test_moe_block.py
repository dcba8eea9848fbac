"""ingot_moe_block (include/ingot/moe.h): a sparse MoE layer as one op.

CPU: against a float64 numpy reference (norm, router, routing, experts,
residual: moe_ref.py) and bit-equal to the calls it stands for
(route_linear_norm then experts_add); every argument rule. CUDA against the
CPU with INGOT_MOE_BLOCK=1 (the one cooperative kernel; bf16 and f8 with
their tensor-core phase 1b where I is a multiple of 64 (bf16) or 128 (f8)
and, INGOT_MOE_TC=0, with f32 FMAs) and =0 (the composed kernels) at T = 1;
the default (the kernel: bit-equal to the forced path); shapes the kernel
leaves to the composition (T > 1, rows that are not whole 16-byte chunks);
the Qwen3-30B-A3B expert shape; tensor-core phase 1b with warp shares
across slots; logits that tie exactly; f8 with h from
subnormal to inf, and with h's 128-element groups at different scales;
every f8 down-weight byte (NaN, +-448, subnormals, +-0) at both halves of
the tensor-core tiles; a captured graph.

Tolerances: ids equal (operands drawn with no top-k logits closer than 16
times the CPU's logit error: moe_ref.router_operands); routing weights
router_rtol; y: f32 sums of D (router), D (gate/up) and k*I (down) products
in other orders (bf16 on tensor cores: h as bf16 hi + lo, 16 significant
bits; f8: each 128 elements of h scaled into f16 hi + lo, 22): rtol 1e-4,
atol moe_ref.dot_tol(n) times the result scale.
"""
import numpy as np
import pytest

from cuda_diff import check_graph_replays, needs_cuda, to_device
from ingot_ctypes import IngotError, call, out_ptr, strided, take, tensor, to_numpy, transposed
from moe_ref import (BF16, F8, F16, F32, down_ref, dot_tol, gate_up_ref, rand_weights,
                     route_ref, router_operands, router_rtol)

RNG = np.random.default_rng(23)
NAMES = {BF16: "bf16", F16: "f16", F32: "f32", F8: "f8"}
EPS = 1e-6


def opt(t):
    return None if t is None else tensor(t)


def layer(E, k, D, I, wdt, rdt=F32, T=1):
    """x [T,D] f32, norm, router, and expert weights (scales for f8)."""
    x, nw, router, _, err = router_operands(RNG, F32, rdt, E, k, D, T, True)
    wgu, sgu = rand_weights(RNG, E, 2 * I, D, wdt)
    wd, sd = rand_weights(RNG, E, D, I, wdt)
    return dict(x=x, nw=nw, router=router, wgu=wgu, sgu=sgu, wd=wd, sd=sd, err=err)


def block_args(L, k, renorm, mail=False):
    """ingot_moe_block's arguments (CPU tensors) before the two out slots;
    mail: a mailbox (int64 [E] zeros), else NULL."""
    E = L["router"].shape[0]
    return (tensor(L["x"]), tensor(L["nw"]), EPS, tensor(L["router"]), k, renorm,
            tensor(L["wgu"]), opt(L["sgu"]), tensor(L["wd"]), opt(L["sd"]),
            tensor(np.zeros(E, np.int64)) if mail else None)


def on_device(args):
    return [to_device(a) if hasattr(a, "ptr") else a for a in args]


def run(args):
    """(y, weights, ids) as numpy arrays."""
    ws, ids = out_ptr(), out_ptr()
    y = call("ingot_moe_block", *args, ws, ids)
    return to_numpy(y), to_numpy(take(ws)), to_numpy(take(ids))


def reference(L, k, renorm):
    x = L["x"].astype(np.float64)
    xn = x / np.sqrt((x * x).mean(1, keepdims=True) + EPS) * L["nw"]
    logits = xn @ L["router"].astype(np.float32).astype(np.float64).T
    w, ids = route_ref(logits.astype(np.float32), k, renorm)
    h = gate_up_ref(xn, L["wgu"], L["sgu"], ids)
    return x + down_ref(h, L["wd"], L["sd"], ids, w), w, ids


def y_tol(k, D, I):
    return dict(rtol=1e-4, atol=dot_tol(max(D, k * I)) * 8)


@pytest.mark.parametrize("wdt", [BF16, F16, F32, F8], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("E,k,D,I,T", [(8, 2, 64, 32, 1), (16, 4, 96, 40, 3), (12, 12, 36, 20, 1)])
@pytest.mark.parametrize("renorm", [True, False])
def test_cpu_against_numpy(wdt, E, k, D, I, T, renorm):
    L = layer(E, k, D, I, wdt, T=T)
    y, w, ids = run(block_args(L, k, renorm))
    ry, rw, rids = reference(L, k, renorm)
    np.testing.assert_array_equal(ids, rids)
    np.testing.assert_allclose(w, rw, rtol=router_rtol(L["err"]), atol=1e-7)
    np.testing.assert_allclose(y, ry, **y_tol(k, D, I))


def test_cpu_equals_the_calls_it_stands_for():
    # moe_block_compose runs route_linear_norm's and experts_add's kernels: the same bits.
    E, k, D, I = 16, 4, 64, 48
    L = layer(E, k, D, I, BF16, T=2)
    args = block_args(L, k, True)
    y, w, ids = run(args)
    xn, ws, ids2 = out_ptr(), out_ptr(), out_ptr()
    call("ingot_moe_route_linear_norm", args[0], args[1], EPS, args[3], k, True, xn, ws, ids2)
    xn, ws, ids2 = take(xn), take(ws), take(ids2)
    y2 = call("ingot_moe_experts_add", args[0], xn, args[6], args[7], args[8], args[9], ids2, ws)
    np.testing.assert_array_equal(y, to_numpy(y2))
    np.testing.assert_array_equal(w, to_numpy(ws))
    np.testing.assert_array_equal(ids, to_numpy(ids2))


def test_strided_operands_and_optional_outputs():
    E, k, D, I = 8, 2, 32, 16
    L = layer(E, k, D, I, F32)
    args = list(block_args(L, k, True))
    args[3] = transposed(L["router"])  # a strided view of the same values
    y = to_numpy(call("ingot_moe_block", *args, None, None))
    np.testing.assert_allclose(y, reference(L, k, True)[0], **y_tol(k, D, I))


def test_errors_change_nothing():
    E, k, D, I = 8, 2, 32, 16
    L = layer(E, k, D, I, BF16)
    good = list(block_args(L, k, True))
    bad = {
        0: tensor(L["x"].astype(BF16)),  # x must be f32
        1: tensor(np.ones(D + 1, np.float32)),  # norm [D]
        6: tensor(L["wgu"][:, :-2]),  # gate_up rows != 2 I
        8: tensor(L["wd"][:4]),  # down E != router E
        7: tensor(np.ones((E, 3), np.float32)),  # gate_up scale shape
    }
    for i, t in bad.items():
        args = list(good)
        args[i] = t
        ws, ids = out_ptr(), out_ptr()
        with pytest.raises(IngotError):
            call("ingot_moe_block", *args, ws, ids)
        assert not ws.contents.value and not ids.contents.value
    for kk in (0, E + 1):
        args = list(good)
        args[4] = kk
        with pytest.raises(IngotError):
            call("ingot_moe_block", *args, None, None)
    # mailbox: int64 [>= E], contiguous
    for bad_mail in (np.zeros(E, np.int32), np.zeros(E - 1, np.int64), np.zeros((E, 1), np.int64),
                     np.zeros(2 * E, np.int64)[::2]):
        args = list(good)
        args[10] = tensor(bad_mail) if bad_mail.base is None else strided(bad_mail)
        ws, ids = out_ptr(), out_ptr()
        with pytest.raises(IngotError, match="mailbox"):
            call("ingot_moe_block", *args, ws, ids)
        assert not ws.contents.value and not ids.contents.value


def test_cpu_ignores_the_mailbox():
    # The CPU runs the three ops: a mailbox changes nothing and stays zero.
    E, k, D, I = 16, 4, 64, 32
    L = layer(E, k, D, I, BF16)
    args = block_args(L, k, True, mail=True)
    got, want = run(args), run(block_args(L, k, True))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(to_numpy(args[-1]), np.zeros(E, np.int64))
    args = list(args)
    args[-1] = tensor(np.zeros(2 * E, np.int64))  # longer than E: allowed
    for g, w in zip(run(args), want):
        np.testing.assert_array_equal(g, w)


# ---- CUDA ----

# E 2000: the routing warp (past the rank top-k's 1024); D 1024, I 1000: rows of
# 1000 elements; E 60, D 200: uneven row and slice splits; E 300 and 200: the
# ranks one thread a key and two lanes a key (E 128: four); D 5120: norm
# weights past the ones loaded before the PDL wait, 39 output rows a block (3
# groups of phase 1b); I 128 and 256: down rows of whole 128-byte lines in
# every dtype (f8: its tensor-core phase 1b), compact and (D 5120) not; D 2112:
# compact with 16 output rows a block on 132 SMs, x slots past 4 kThreads.
SHAPES = [(8, 2, 64, 32), (16, 4, 256, 96), (128, 8, 512, 64), (60, 6, 200, 40),
          (4, 4, 1024, 1000), (2000, 8, 64, 32), (300, 8, 64, 32), (200, 6, 64, 32),
          (8, 2, 5120, 16), (8, 2, 5120, 64), (128, 8, 512, 128), (16, 4, 256, 256),
          (8, 2, 5120, 128), (8, 2, 2112, 128)]


def device_against_cpu(L, k, renorm):
    """(got, want): the op on the device and on the CPU, their ids equal and
    their routing weights within router_rtol(L["err"])."""
    args = block_args(L, k, renorm)
    want = run(args)
    got = run(on_device(args))
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_allclose(got[1], want[1], rtol=router_rtol(L["err"]), atol=1e-7)
    return got, want


def assert_y_scaled(got, want, k, D, I):
    """y within y_tol, its atol times the largest finite |y| (at least 1)."""
    finite = want[np.isfinite(want)]
    y_scale = max(1.0, np.abs(finite).max()) if finite.size else 1.0
    tol = y_tol(k, D, I)
    np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"] * y_scale)


def cuda_case(E, k, D, I, wdt, rdt, renorm, mode, monkeypatch, T=1):
    # mode "1": the kernel (phase 1b on tensor cores where I is a multiple
    # of 64 for bf16, 128 for f8), "fma": the kernel with f32 FMAs for those
    # too (INGOT_MOE_TC=0), "0": the composed kernels
    monkeypatch.setenv("INGOT_MOE_BLOCK", "0" if mode == "0" else "1")
    monkeypatch.setenv("INGOT_MOE_TC", "0" if mode == "fma" else "1")
    got, want = device_against_cpu(layer(E, k, D, I, wdt, rdt, T), k, renorm)
    np.testing.assert_allclose(got[0], want[0], **y_tol(k, D, I))


@pytest.mark.parametrize("mode", ["1", "fma", "0"])
@pytest.mark.parametrize("wdt", [BF16, F16, F32, F8], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("E,k,D,I", SHAPES)
@needs_cuda
def test_cuda_t1(mode, wdt, E, k, D, I, monkeypatch):
    cuda_case(E, k, D, I, wdt, F32, True, mode, monkeypatch)


@pytest.mark.parametrize("mode", ["1", "0"])
@pytest.mark.parametrize("rdt", [BF16, F16], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("renorm", [True, False])
@needs_cuda
def test_cuda_router_dtypes(mode, rdt, renorm, monkeypatch):
    cuda_case(32, 4, 128, 64, BF16, rdt, renorm, mode, monkeypatch)


@pytest.mark.parametrize("E,k,D,I,T", [(8, 2, 36, 24, 1), (8, 2, 64, 20, 1), (16, 4, 64, 32, 3)])
@needs_cuda
def test_cuda_composed_shapes(E, k, D, I, T, monkeypatch):
    # bf16 rows of 72 or 40 bytes (not whole 16-byte chunks), T > 1: the composition.
    cuda_case(E, k, D, I, BF16, F32, True, "1", monkeypatch, T)


@pytest.mark.parametrize("mode", ["1", "fma"])
@pytest.mark.parametrize("wdt", [BF16, F8], ids=lambda d: NAMES[d])
@needs_cuda
def test_cuda_qwen3_30b_a3b_experts(wdt, mode, monkeypatch):
    # The real expert shape (D 2048, I 768, k 8; 16 experts to keep the CPU side small).
    cuda_case(16, 8, 2048, 768, wdt, BF16, True, mode, monkeypatch)


# The compact kernel's phase 1b on tensor cores where a warp's share of the
# k I / 32 (f8) or k I / 16 (bf16) column tiles does not fit one slot's:
# k 10, I 768 (f8 shares of 16 tiles across slots of 24, the last warp
# idle; bf16 30 across 48); k 9, I 64 / 128 (bf16 shares of 3 tiles across
# slots of 4 or 5 across 8; f8 at I 128 shares of 4 tiles, 7 warps idle;
# f8 at I 64, rows of 64 bytes, the f32 FMAs).
@pytest.mark.parametrize("E,k,D,I", [(32, 10, 512, 768), (16, 9, 256, 64), (16, 9, 256, 128)])
@pytest.mark.parametrize("wdt", [BF16, F8], ids=lambda d: NAMES[d])
@needs_cuda
def test_cuda_tc_warp_shares(wdt, E, k, D, I, monkeypatch):
    cuda_case(E, k, D, I, wdt, F32, True, "1", monkeypatch)


@pytest.mark.parametrize("wdt", [BF16, F8], ids=lambda d: NAMES[d])
@needs_cuda
def test_cuda_default_path(wdt, monkeypatch):
    # Unset: the kernel (bit-equal to the forced path: it is deterministic).
    L = layer(16, 4, 256, 96, wdt)
    args = on_device(block_args(L, 4, True))
    monkeypatch.delenv("INGOT_MOE_BLOCK", raising=False)
    default = run(args)
    monkeypatch.setenv("INGOT_MOE_BLOCK", "1")
    forced = run(args)
    for d, f in zip(default, forced):
        np.testing.assert_array_equal(d, f)


@pytest.mark.parametrize("ladder", [False, True], ids=["groups", "ladder"])
@pytest.mark.parametrize("wdt", [BF16, F8], ids=lambda d: NAMES[d])
@needs_cuda
def test_cuda_tied_logits(wdt, ladder, monkeypatch):
    # Router rows that are one row times powers of 2 (exact in bf16): the
    # logits tie exactly. "groups": ties across the k-th place whatever the
    # logits' sign; "ladder": 8 distinct top logits above 120 tied ones (or,
    # for a negative row, the tie on top). The kernel must route by the
    # CPU's key order (value, then the lower id), which a rank by value
    # alone would not (branch routecompact falls back to it on ties).
    monkeypatch.setenv("INGOT_MOE_BLOCK", "1")
    E, k, D, I = 128, 8, 256, 64
    L = layer(E, k, D, I, wdt, BF16)
    scale = np.ones(E)
    if ladder:
        scale[[3, 17, 18, 50, 66, 99, 100, 127]] = 2.0 ** np.arange(1, 9)
    else:
        scale[[5, 40, 77]] = 4
        scale[[2, 9, 30, 31, 64, 90, 120]] = 2
    L["router"] = (L["router"][:1].astype(np.float64) * scale[:, None]).astype(L["router"].dtype)
    L["err"] *= scale.max()  # the logits grew by at most the largest scale
    got, want = device_against_cpu(L, k, True)
    np.testing.assert_allclose(got[0], want[0], **y_tol(k, D, I))


@pytest.mark.parametrize("f", [1e-20, 1e15, 1e30])
@needs_cuda
def test_cuda_f8_h_range(f, monkeypatch):
    # h far from O(1) in the f8 kernel: gate and up scales times f give h of
    # ~1e-42 (subnormal), ~1e30, and inf (y then inf or NaN where the CPU's
    # is). A form of phase 1b that rescales h (f16 tensor cores) must keep these.
    monkeypatch.setenv("INGOT_MOE_BLOCK", "1")
    E, k, D, I = 16, 4, 256, 128
    L = layer(E, k, D, I, F8)
    L["sgu"] = (L["sgu"].astype(np.float64) * f).astype(np.float32)
    got, want = device_against_cpu(L, k, True)
    if f > 1e20:
        assert not np.isfinite(want[0]).all()
        np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
        np.testing.assert_array_equal(np.isinf(got[0]), np.isinf(want[0]))
    assert_y_scaled(got[0], want[0], k, D, I)


@needs_cuda
def test_cuda_f8_h_groups(monkeypatch):
    # The f8 kernel on tensor cores scales each 128 elements of h (a group)
    # by its own power of 2. Up rows times 4^((group + expert) % 4) put a
    # slot's groups, and a group across slots, at scales 4x apart: a group
    # read with another's scale is off by 4x or more, far past the tolerance.
    monkeypatch.setenv("INGOT_MOE_BLOCK", "1")
    E, k, D, I = 16, 4, 256, 512
    L = layer(E, k, D, I, F8)
    group = np.arange(I) // 128
    factor = 4.0 ** ((group[None, :] + np.arange(E)[:, None]) % 4)
    sgu = L["sgu"].astype(np.float64)
    sgu[:, I:] *= factor
    L["sgu"] = sgu.astype(np.float32)
    got, want = device_against_cpu(L, k, True)
    assert_y_scaled(got[0], want[0], k, D, I)


@needs_cuda
def test_cuda_special_values(monkeypatch):
    # A NaN in x makes every logit NaN: ids 0..k-1 on both, y NaN.
    monkeypatch.setenv("INGOT_MOE_BLOCK", "1")
    E, k, D, I = 16, 4, 64, 32
    L = layer(E, k, D, I, BF16)
    L["x"][0, 5] = np.nan
    args = block_args(L, k, True)
    want = run(args)
    got = run(on_device(args))
    np.testing.assert_array_equal(got[2], want[2])
    assert np.isnan(got[0]).all() and np.isnan(want[0]).all()


@needs_cuda
def test_cuda_f8_weight_bytes(monkeypatch):
    # The f8 tensor-core phase 1b converts its down bytes to f16 (ldmatrix
    # tiles of 32 columns, two mma chains): every finite byte (+-448,
    # subnormals, +-0) at columns of both halves of a tile, and NaN bytes
    # (0x7F, 0xFF) in both halves, whose rows are NaN on both.
    monkeypatch.setenv("INGOT_MOE_BLOCK", "1")
    E, k, D, I = 16, 4, 256, 128
    L = layer(E, k, D, I, F8)
    finite = np.array([b for b in range(256) if b & 0x7F != 0x7F], np.uint8)
    wd = np.stack([np.roll(finite, 37 * n)[:I] for n in range(D)])  # [D, I]
    wd = np.broadcast_to(wd, (E, D, I)).copy()
    nan_at = {3: (20, 0x7F), 5: (2, 0xFF), 7: (17, 0xFF), 9: (8, 0x7F)}
    for n, (c, b) in nan_at.items():
        wd[:, n, c] = b
    L["wd"] = wd.view(F8)
    got, want = device_against_cpu(L, k, True)
    nan_rows = np.isnan(want[0][0])
    assert sorted(np.flatnonzero(nan_rows)) == sorted(nan_at)
    np.testing.assert_array_equal(np.isnan(got[0]), np.isnan(want[0]))
    assert_y_scaled(got[0][:, ~nan_rows], want[0][:, ~nan_rows], k, D, I)


@needs_cuda
def test_cuda_huge_x(monkeypatch):
    # x near the f32 maximum: its squares overflow, 1 / rms is 0, so xn and
    # every logit are 0 (the compact kernel takes the logit as dot / rms:
    # not inf * 0) on both: ids 0..k-1, h 0, y = x. (bf16, I 64: the compact
    # tensor-core kernel.)
    monkeypatch.setenv("INGOT_MOE_BLOCK", "1")
    E, k, D, I = 16, 4, 64, 64
    L = layer(E, k, D, I, BF16)
    L["x"] = (L["x"] / np.abs(L["x"]).max() * 3e38).astype(np.float32)
    got, want = device_against_cpu(L, k, True)
    np.testing.assert_array_equal(want[2], np.arange(k)[None])
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("with_mail", [False, True], ids=["barrier", "mailbox"])
@needs_cuda
def test_cuda_graph_replays(with_mail, monkeypatch):
    # Captured once, replayed on new x: every replay equals an eager call (the
    # kernel's sums are in a fixed order: the same bits), with the mailbox too
    # (it must come back zero from every replay for the next).
    monkeypatch.setenv("INGOT_MOE_BLOCK", "1")
    E, k, D, I = 32, 4, 256, 64
    L = layer(E, k, D, I, BF16)
    dev = [to_device(tensor(L[n])) for n in ("nw", "router", "wgu", "wd")]
    mail = to_device(tensor(np.zeros(E, np.int64))) if with_mail else None

    def fn(x):
        return call("ingot_moe_block", x, dev[0], EPS, dev[1], k, True, dev[2], None, dev[3],
                    None, mail, None, None)

    check_graph_replays(fn, (1, D), np.float32, RNG)
    if mail is not None:
        np.testing.assert_array_equal(to_numpy(mail), np.zeros(E, np.int64))


@pytest.mark.parametrize("wdt", [BF16, F8], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("E,k,D,I", SHAPES)
@needs_cuda
def test_cuda_mailbox(wdt, E, k, D, I, monkeypatch):
    # The logits through the mailbox instead of the grid barrier (the compact
    # kernel; the others ignore it): the same bits as without, call after
    # call, and the mailbox left zero each time.
    monkeypatch.setenv("INGOT_MOE_BLOCK", "1")
    L = layer(E, k, D, I, wdt)
    plain = on_device(block_args(L, k, True))
    mailed = on_device(block_args(L, k, True, mail=True))
    want = run(plain)
    for _ in range(3):
        got = run(mailed)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(to_numpy(mailed[-1]), np.zeros(E, np.int64))


@needs_cuda
def test_cuda_mailbox_errors():
    # On another device than x: rejected, nothing written.
    E, k, D, I = 8, 2, 32, 16
    L = layer(E, k, D, I, BF16)
    args = list(on_device(block_args(L, k, True)))
    args[-1] = tensor(np.zeros(E, np.int64))  # on the CPU
    ws, ids = out_ptr(), out_ptr()
    with pytest.raises(IngotError):
        call("ingot_moe_block", *args, ws, ids)
    assert not ws.contents.value and not ids.contents.value
