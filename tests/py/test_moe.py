"""Mixture-of-experts ops on the CPU (include/ingot/moe.h) against the numpy
references of moe_ref.py (float64), every argument rule, and bad ids.

Tolerances: routing weights rtol 1e-5 (f32 softmax); ids exactly (the
inputs have no near-ties other than the exact ties that are tested on
purpose). gate_up/down: float32 sums of K (or k*I) O(1) products against
float64: rtol 1e-4 and atol 2e-6*sqrt(n) (moe_ref.dot_tol), scaled by the
magnitude of the result's factors.
"""
import numpy as np
import pytest

from ingot_ctypes import IngotError, call, out_ptr, take, tensor, to_numpy, transposed
from moe_ref import (BF16, F8, F16, F32, WDTS, down_ref, dot_tol, gate_up_ref, rand_ids,
                     rand_layer, rand_weights, route_ref)

RNG = np.random.default_rng(5)
NAMES = {BF16: "bf16", F16: "f16", F32: "f32", F8: "f8"}


def route(logits_t, k, renorm):
    ws, ids = out_ptr(), out_ptr()
    call("ingot_moe_route", logits_t, k, renorm, ws, ids)
    return take(ws), take(ids)


@pytest.mark.parametrize("dt", [F32, BF16, F16], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("renorm", [True, False])
@pytest.mark.parametrize("E,k", [(4, 1), (4, 2), (8, 2), (8, 8), (128, 1), (128, 8)])
@pytest.mark.parametrize("T", [1, 3, 40])
def test_route(dt, renorm, E, k, T):
    logits = (RNG.standard_normal((T, E)) * 3).astype(dt)
    w, ids = route(tensor(logits), k, renorm)
    rw, rids = route_ref(logits, k, renorm)
    assert w.dtype_name == "float32" and ids.dtype_name == "int32"
    np.testing.assert_array_equal(to_numpy(ids), rids)
    np.testing.assert_allclose(to_numpy(w), rw, rtol=1e-5, atol=1e-7)
    if renorm:
        np.testing.assert_allclose(to_numpy(w).sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("renorm", [True, False])
def test_route_ties(renorm):
    # Small integers: many equal logits; ties go to the lower id.
    logits = RNG.integers(-2, 3, size=(50, 16)).astype(np.float32)
    logits[0] = 1.0  # a whole row of ties: ids 0..k-1, equal weights
    w, ids = route(tensor(logits), 6, renorm)
    rw, rids = route_ref(logits, 6, renorm)
    np.testing.assert_array_equal(to_numpy(ids), rids)
    np.testing.assert_array_equal(to_numpy(ids)[0], np.arange(6))
    np.testing.assert_allclose(to_numpy(w), rw, rtol=1e-5, atol=1e-7)


def test_route_special_values():
    inf, nan = np.inf, np.nan
    logits = np.array([
        [0.0, -inf, 1.0, -inf, 2.0, -1.0],  # -inf never chosen before finite values
        [-inf, -inf, -inf, -inf, -inf, -inf],  # all -inf: NaN weights (as softmax)
        [0.0, inf, 1.0, 2.0, -1.0, 3.0],  # +inf: NaN weights
        [0.0, 1.0, nan, 2.0, nan, 3.0],  # NaN is the largest: chosen first, row NaN
        [-0.0, 0.0, -0.0, 0.0, 1e-30, -1e-30],  # -0 == 0: ties by id
        [3.4e38, -3.4e38, 3.3e38, 0.0, 1.0, 2.0],  # extremes
    ], dtype=np.float32)
    for renorm in (True, False):
        w, ids = route(tensor(logits), 3, renorm)
        rw, rids = route_ref(logits, 3, renorm)
        np.testing.assert_array_equal(to_numpy(ids), rids)
        np.testing.assert_allclose(to_numpy(w), rw, rtol=1e-5, atol=1e-7, equal_nan=True)
    assert list(to_numpy(ids)[3]) == [2, 4, 5]
    assert np.isnan(to_numpy(w)[3]).all() and np.isnan(to_numpy(w)[1]).all()
    assert list(to_numpy(ids)[4]) == [4, 0, 1]


def test_route_strided_logits_and_empty():
    logits = RNG.standard_normal((7, 12)).astype(np.float32)
    w, ids = route(transposed(logits), 4, True)
    rw, rids = route_ref(logits, 4, True)
    np.testing.assert_array_equal(to_numpy(ids), rids)
    np.testing.assert_allclose(to_numpy(w), rw, rtol=1e-5, atol=1e-7)
    w, ids = route(tensor(np.zeros((0, 8), np.float32)), 2, True)
    assert w.shape == (0, 2) and ids.shape == (0, 2)


def route_linear(x_t, router_t, k, renorm):
    ws, ids = out_ptr(), out_ptr()
    call("ingot_moe_route_linear", x_t, router_t, k, renorm, ws, ids)
    return take(ws), take(ids)


@pytest.mark.parametrize("xdt", [F32, BF16], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("rdt", [F32, BF16, F16], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("E,k,D", [(8, 2, 64), (128, 8, 96), (20, 20, 37)])
@pytest.mark.parametrize("T", [1, 9])
def test_route_linear(xdt, rdt, E, k, D, T):
    # Logits = x . router^T (f32 dots), then the routing of test_route.
    x = RNG.standard_normal((T, D)).astype(xdt)
    router = (RNG.standard_normal((E, D)) * (3 / D ** 0.5)).astype(rdt)
    for renorm in (True, False):
        w, ids = route_linear(tensor(x), tensor(router), k, renorm)
        rw, rids = route_ref(x.astype(np.float64) @ router.astype(np.float64).T, k, renorm)
        np.testing.assert_array_equal(to_numpy(ids), rids)
        np.testing.assert_allclose(to_numpy(w), rw, rtol=2e-5, atol=1e-7)
    # strided operands: a transposed x and a router view
    w2, ids2 = route_linear(transposed(x), transposed(router), k, False)
    np.testing.assert_array_equal(to_numpy(ids2), rids)


def route_linear_norm(x_t, norm_t, eps, router_t, k, renorm):
    xn, ws, ids = out_ptr(), out_ptr(), out_ptr()
    call("ingot_moe_route_linear_norm", x_t, norm_t, eps, router_t, k, renorm, xn, ws, ids)
    return take(xn), take(ws), take(ids)


@pytest.mark.parametrize("rdt", [F32, BF16], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("E,k,D", [(8, 2, 64), (128, 8, 96), (20, 20, 37)])
@pytest.mark.parametrize("T", [1, 9])
def test_route_linear_norm(rdt, E, k, D, T):
    # xn = rms_norm(x) with ingot_rms_norm's bits; the routing of xn . router^T.
    x = (RNG.standard_normal((T, D)) * 3).astype(np.float32)
    norm = RNG.uniform(0.5, 1.5, D).astype(np.float32)
    router = (RNG.standard_normal((E, D)) * (3 / D ** 0.5)).astype(rdt)
    eps = 1e-6
    xn, w, ids = route_linear_norm(tensor(x), tensor(norm), eps, tensor(router), k, True)
    want = to_numpy(call("ingot_rms_norm", tensor(x), tensor(norm), eps))
    np.testing.assert_array_equal(to_numpy(xn), want)
    x64 = x.astype(np.float64)
    rn = x64 / np.sqrt((x64 ** 2).mean(1, keepdims=True) + eps) * norm
    np.testing.assert_allclose(to_numpy(xn), rn, rtol=1e-5, atol=1e-6)
    rw, rids = route_ref(rn @ router.astype(np.float64).T, k, True)
    np.testing.assert_array_equal(to_numpy(ids), rids)
    np.testing.assert_allclose(to_numpy(w), rw, rtol=2e-5, atol=1e-7)
    w2, ids2 = route_linear(tensor(want), tensor(router), k, True)
    np.testing.assert_array_equal(to_numpy(ids2), to_numpy(ids))
    np.testing.assert_array_equal(to_numpy(w2), to_numpy(w))


def test_route_linear_norm_errors():
    x = tensor(np.zeros((2, 16), np.float32))
    n = tensor(np.ones(16, np.float32))
    r = tensor(np.zeros((8, 16), BF16))
    f = "ingot_moe_route_linear_norm"
    o = lambda: (out_ptr(), out_ptr(), out_ptr())
    route_linear_norm(x, n, 1e-6, r, 2, True)  # the valid call the others vary
    raises("moe_route_linear_norm: x must be float32 and norm float32 \\[16\\]", f,
           tensor(np.zeros((2, 16), BF16)), n, 1e-6, r, 2, True, *o())
    raises("moe_route_linear_norm: x must be float32 and norm float32 \\[16\\]", f, x,
           tensor(np.ones(15, np.float32)), 1e-6, r, 2, True, *o())
    raises("moe_route_linear_norm: x must be float32 and norm float32 \\[16\\]", f, x,
           tensor(np.ones(16, BF16)), 1e-6, r, 2, True, *o())
    raises("moe_route_linear_norm: k \\(9\\) must be in \\[1, 8\\]", f, x, n, 1e-6, r, 9,
           True, *o())
    raises("moe_route_linear_norm: x has D = 16 but router rows have 12", f, x, n, 1e-6,
           tensor(np.zeros((8, 12), BF16)), 2, True, *o())
    raises("moe_route_linear_norm: NULL output pointer", f, x, n, 1e-6, r, 2, True, None, None,
           None)
    raises("NULL", f, x, None, 1e-6, r, 2, True, *o())


def test_route_linear_errors():
    x = tensor(np.zeros((2, 16), np.float32))
    r = tensor(np.zeros((8, 16), BF16))
    f = "ingot_moe_route_linear"
    raises("moe_route_linear: k \\(9\\) must be in \\[1, 8\\]", f, x, r, 9, True, out_ptr(),
           out_ptr())
    raises("moe_route_linear: x must be \\[T, D\\] and router \\[E, D\\]", f,
           tensor(np.zeros(16, np.float32)), r, 2, True, out_ptr(), out_ptr())
    raises("moe_route_linear: x and router must be float32, bfloat16 or float16", f, x,
           tensor(np.zeros((8, 16), np.int32)), 2, True, out_ptr(), out_ptr())
    raises("moe_route_linear: x has D = 16 but router rows have 12", f, x,
           tensor(np.zeros((8, 12), BF16)), 2, True, out_ptr(), out_ptr())
    raises("moe_route_linear: NULL output pointer", f, x, r, 2, True, None, None)
    raises("NULL", f, None, r, 2, True, out_ptr(), out_ptr())


def h_tol(x, w, scale, ids, K):
    """atol of h: |u|*dg + |silu(g)|*du with dg, du the f32 dot error bound."""
    href = gate_up_ref(x, w, scale, ids)
    return href, dot_tol(K) * (1 + 2 * np.abs(href).max())


@pytest.mark.parametrize("wdt", WDTS, ids=lambda d: NAMES[d])
@pytest.mark.parametrize("xdt", [F32, BF16], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("E,k", [(4, 1), (8, 2), (128, 8)])
@pytest.mark.parametrize("T", [1, 3, 8, 9, 40])
@pytest.mark.parametrize("K,NI", [(48, 24), (37, 13)])
def test_gate_up(wdt, xdt, E, k, T, K, NI):
    x = RNG.standard_normal((T, K)).astype(xdt)
    w, scale = rand_weights(RNG, E, 2 * NI, K, wdt)
    ids = rand_ids(RNG, T, k, E)
    h = call("ingot_moe_gate_up", tensor(x), tensor(w), None if scale is None else tensor(scale),
             tensor(ids))
    assert h.shape == (T, k, NI) and h.dtype_name == "float32"
    href, atol = h_tol(x, w, scale, ids, K)
    np.testing.assert_allclose(to_numpy(h), href, rtol=1e-4, atol=atol)


def test_gate_up_unscaled_f8_and_scaled_bf16():
    # Scales are optional for f8 and allowed for the other dtypes.
    T, K, NI, E, k = 5, 64, 16, 6, 3
    x = RNG.standard_normal((T, K)).astype(np.float32)
    ids = rand_ids(RNG, T, k, E)
    w8 = (RNG.standard_normal((E, 2 * NI, K)) * 0.2).astype(F8)
    h = call("ingot_moe_gate_up", tensor(x), tensor(w8), None, tensor(ids))
    np.testing.assert_allclose(to_numpy(h), gate_up_ref(x, w8, None, ids), rtol=1e-4,
                               atol=dot_tol(K) * 10)
    wb = (RNG.standard_normal((E, 2 * NI, K)) / 8).astype(BF16)
    sc = RNG.uniform(0.5, 2, (E, 2 * NI)).astype(np.float32)
    h = call("ingot_moe_gate_up", tensor(x), tensor(wb), tensor(sc), tensor(ids))
    np.testing.assert_allclose(to_numpy(h), gate_up_ref(x, wb, sc, ids), rtol=1e-4,
                               atol=dot_tol(K) * 10)


def test_gate_up_repeated_ids_strided_x_int64_ids():
    # The same expert twice in one token, many tokens on one expert, a
    # transposed x and int64 ids all give the formula's result.
    T, K, NI, E, k = 12, 40, 8, 3, 4
    x = RNG.standard_normal((T, K)).astype(np.float32)
    w, _ = rand_weights(RNG, E, 2 * NI, K, BF16)
    ids = rand_ids(RNG, T, k, E, distinct=False)
    ids[0] = [1, 1, 1, 1]
    h = call("ingot_moe_gate_up", transposed(x), tensor(w), None, tensor(ids.astype(np.int64)))
    href, atol = h_tol(x, w, None, ids, K)
    np.testing.assert_allclose(to_numpy(h), href, rtol=1e-4, atol=atol)


@pytest.mark.parametrize("wdt", WDTS, ids=lambda d: NAMES[d])
@pytest.mark.parametrize("E,k", [(4, 1), (8, 2), (128, 8)])
@pytest.mark.parametrize("T", [1, 3, 8, 9, 40])
@pytest.mark.parametrize("K,NI", [(48, 24), (37, 13)])
def test_down(wdt, E, k, T, K, NI):
    h = RNG.standard_normal((T, k, NI)).astype(np.float32)
    w, scale = rand_weights(RNG, E, K, NI, wdt)
    ids = rand_ids(RNG, T, k, E)
    wts = RNG.uniform(0, 1, (T, k)).astype(np.float32)
    y = call("ingot_moe_down", tensor(h), tensor(w), None if scale is None else tensor(scale),
             tensor(ids), tensor(wts))
    assert y.shape == (T, K) and y.dtype_name == "float32"
    np.testing.assert_allclose(to_numpy(y), down_ref(h, w, scale, ids, wts), rtol=1e-4,
                               atol=dot_tol(k * NI) * k)


def test_down_bf16_h_and_weights_repeated_ids():
    T, K, NI, E, k = 6, 24, 40, 2, 3
    h = RNG.standard_normal((T, k, NI)).astype(BF16)
    w, _ = rand_weights(RNG, E, K, NI, F16)
    ids = rand_ids(RNG, T, k, E, distinct=False)
    wts = RNG.uniform(0, 1, (T, k)).astype(BF16)
    y = call("ingot_moe_down", tensor(h), tensor(w), None, tensor(ids), tensor(wts))
    np.testing.assert_allclose(to_numpy(y), down_ref(h, w, None, ids, wts), rtol=1e-4,
                               atol=dot_tol(k * NI) * k)


@pytest.mark.parametrize("wdt", [BF16, F8], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("T", [1, 9])
def test_layer(wdt, T):
    # A whole MoE FFN: router logits -> route -> gate_up -> down, against numpy.
    E, k, K, NI = 16, 4, 64, 32
    x = (RNG.standard_normal((T, K))).astype(BF16)
    wg = (RNG.standard_normal((E, K)) / 8).astype(np.float32)
    logits = x.astype(np.float32) @ wg.T
    wgu, sgu = rand_weights(RNG, E, 2 * NI, K, wdt)
    wd, sd = rand_weights(RNG, E, K, NI, wdt)
    weights, ids = route(tensor(logits), k, True)
    h = call("ingot_moe_gate_up", tensor(x), tensor(wgu), sgu if sgu is None else tensor(sgu), ids)
    y = call("ingot_moe_down", h, tensor(wd), sd if sd is None else tensor(sd), ids, weights)
    rw, rids = route_ref(logits, k, True)
    np.testing.assert_array_equal(to_numpy(ids), rids)
    ry = down_ref(gate_up_ref(x, wgu, sgu, rids), wd, sd, rids, rw)
    np.testing.assert_allclose(to_numpy(y), ry, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("wdt", WDTS, ids=lambda d: NAMES[d])
@pytest.mark.parametrize("T", [1, 5, 9])
def test_experts(wdt, T):
    # ingot_moe_experts = moe_down(moe_gate_up(...)): the same kernels, equal bits.
    E, k, K, NI = 8, 3, 48, 24
    x, wgu, sgu, wd, sd, ids, wts = rand_layer(RNG, T, E, k, K, NI, wdt)
    opt = lambda a: None if a is None else tensor(a)
    y = call("ingot_moe_experts", tensor(x), tensor(wgu), opt(sgu), tensor(wd), opt(sd),
             tensor(ids), tensor(wts))
    h = call("ingot_moe_gate_up", tensor(x), tensor(wgu), opt(sgu), tensor(ids))
    y2 = call("ingot_moe_down", h, tensor(wd), opt(sd), tensor(ids), tensor(wts))
    np.testing.assert_array_equal(to_numpy(y), to_numpy(y2))
    ry = down_ref(gate_up_ref(x, wgu, sgu, ids), wd, sd, ids, wts)
    np.testing.assert_allclose(to_numpy(y), ry, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rdt", [F32, BF16], ids=lambda d: NAMES[d])
@pytest.mark.parametrize("T", [1, 9])
def test_experts_add(rdt, T):
    # res + experts: the residual added by the down pass, the bits of ingot_add(res, y);
    # special values in res pass through the one addition.
    E, k, K, NI = 8, 3, 48, 24
    x, wgu, sgu, wd, sd, ids, wts = rand_layer(RNG, T, E, k, K, NI, BF16)
    res = (RNG.standard_normal((T, K)) * 4).astype(rdt)
    res[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    y = call("ingot_moe_experts_add", tensor(res), tensor(x), tensor(wgu), None, tensor(wd), None,
             tensor(ids), tensor(wts))
    y0 = to_numpy(call("ingot_moe_experts", tensor(x), tensor(wgu), None, tensor(wd), None,
                       tensor(ids), tensor(wts)))
    np.testing.assert_array_equal(to_numpy(y), res.astype(np.float32) + y0)
    ry = res.astype(np.float64) + down_ref(gate_up_ref(x, wgu, None, ids), wd, None, ids, wts)
    np.testing.assert_allclose(to_numpy(y), ry, rtol=1e-4, atol=1e-4)


def experts_operands():
    """The valid operands the experts error tests vary: x [2, 16], gate|up
    [4, 8, 16] and down [4, 16, 4] bf16 weights, ids and routing weights [2, 2]."""
    return (tensor(np.zeros((2, 16), np.float32)), tensor(np.zeros((4, 8, 16), BF16)),
            tensor(np.zeros((4, 16, 4), BF16)), tensor(np.zeros((2, 2), np.int32)),
            tensor(np.ones((2, 2), np.float32)))


def test_experts_add_errors():
    x, wgu, wd, ids, wts = experts_operands()
    e = "ingot_moe_experts_add"
    call(e, tensor(np.zeros((2, 16), np.float32)), x, wgu, None, wd, None, ids, wts)
    raises("moe_experts_add: NULL res", e, None, x, wgu, None, wd, None, ids, wts)
    for bad in (np.zeros((2, 15), np.float32), np.zeros((32,), np.float32),
                np.zeros((2, 16), np.int32)):
        raises("moe_down: res must be float32, bfloat16 or float16 \\[2, 16\\]", e,
               tensor(bad), x, wgu, None, wd, None, ids, wts)


def test_experts_errors():
    x, wgu, wd, ids, wts = experts_operands()
    e = "ingot_moe_experts"
    call(e, x, wgu, None, wd, None, ids, wts)  # the valid call the others vary
    raises("moe_experts: w must be bfloat16", e, x, wgu, None,
           tensor(np.zeros((4, 16, 4), np.int8)), None, ids, wts)
    raises("moe_experts: scale must be \\[4, 16\\]", e, x, wgu, None, wd,
           tensor(np.ones((4, 4), np.float32)), ids, wts)
    raises("moe_down: h has I = 4 but w rows have 5", e, x, wgu, None,
           tensor(np.zeros((4, 16, 5), BF16)), None, ids, wts)
    raises("moe_down: weights must be \\[2, 2\\]", e, x, wgu, None, wd, None, ids,
           tensor(np.ones((2, 3), np.float32)))
    raises("moe_gate_up: x has K = 16 but w rows have 12", e, x,
           tensor(np.zeros((4, 8, 12), BF16)), None, wd, None, ids, wts)
    raises("moe_gate_up: expert id 4 at position 3 is out of range", e, x, wgu, None, wd, None,
           tensor(np.array([[0, 1], [2, 4]], np.int32)), wts)
    raises("NULL", e, x, wgu, None, None, None, ids, wts)
    raises("NULL", e, x, wgu, None, wd, None, ids, None)


def test_empty():
    w, _ = rand_weights(RNG, 4, 8, 16, BF16)
    x = np.zeros((0, 16), np.float32)
    ids = np.zeros((0, 2), np.int32)
    h = call("ingot_moe_gate_up", tensor(x), tensor(w), None, tensor(ids))
    assert h.shape == (0, 2, 4)
    wd, _ = rand_weights(RNG, 4, 16, 4, BF16)
    y = call("ingot_moe_down", h, tensor(wd), None, tensor(ids), tensor(np.zeros((0, 2), np.float32)))
    assert y.shape == (0, 16)


# ---- errors: clear messages, nothing returned ----

def raises(match, name, *args):
    with pytest.raises(IngotError, match=match):
        call(name, *args)


def test_route_errors():
    l = tensor(np.zeros((2, 8), np.float32))
    for k in (0, 9, -1):
        with pytest.raises(IngotError, match=r"moe_route: k \(-?\d+\) must be in \[1, 8\]"):
            route(l, k, True)
    with pytest.raises(IngotError, match="moe_route: logits must be \\[T, E\\]"):
        route(tensor(np.zeros(8, np.float32)), 2, True)
    with pytest.raises(IngotError, match="moe_route: logits must be float32"):
        route(tensor(np.zeros((2, 8), np.int32)), 2, True)
    with pytest.raises(IngotError, match="NULL"):
        route(None, 2, True)
    with pytest.raises(IngotError, match="moe_route: NULL output pointer"):
        call("ingot_moe_route", l, 2, True, None, None)


def test_gate_up_errors():
    x = tensor(np.zeros((2, 16), np.float32))
    w = tensor(np.zeros((4, 8, 16), BF16))
    ids = tensor(np.zeros((2, 2), np.int32))
    g = "ingot_moe_gate_up"
    raises("moe_gate_up: x must be \\[T, K\\]", g, tensor(np.zeros(16, np.float32)), w, None, ids)
    raises("moe_gate_up: x must be float32", g, tensor(np.zeros((2, 16), np.int32)), w, None, ids)
    raises("moe_gate_up: w must be 3-d", g, x, tensor(np.zeros((8, 16), BF16)), None, ids)
    raises("moe_gate_up: w must be bfloat16, float16, float32 or float8_e4m3fn, got float64", g,
           x, tensor(np.zeros((4, 8, 16))), None, ids)
    raises("moe_gate_up: w must be contiguous", g, x, transposed(np.zeros((4, 16, 8), BF16)), None,
           ids)
    raises("moe_gate_up: w must be \\[E, 2I, K\\]", g, x, tensor(np.zeros((4, 7, 16), BF16)), None,
           ids)
    raises("moe_gate_up: x has K = 16 but w rows have 12", g, x,
           tensor(np.zeros((4, 8, 12), BF16)), None, ids)
    raises("moe_gate_up: w has no experts", g, x, tensor(np.zeros((0, 8, 16), BF16)), None, ids)
    raises("moe_gate_up: scale must be float32", g, x, w, tensor(np.ones((4, 8))), ids)
    raises("moe_gate_up: scale must be \\[4, 8\\]", g, x, w, tensor(np.ones((4, 4), np.float32)),
           ids)
    raises("moe_gate_up: ids must be \\[2, k\\]", g, x, w, None, tensor(np.zeros((3, 2), np.int32)))
    raises("moe_gate_up: ids must be an integer tensor", g, x, w, None,
           tensor(np.zeros((2, 2), np.float32)))
    for bad in (4, -1):
        raises(f"moe_gate_up: expert id {bad} at position 3 is out of range \\[0, 4\\)", g, x, w,
               None, tensor(np.array([[0, 1], [2, bad]], np.int32)))
    raises("NULL", g, None, w, None, ids)


def test_down_errors():
    h = tensor(np.zeros((2, 2, 16), np.float32))
    w = tensor(np.zeros((4, 8, 16), BF16))
    ids = tensor(np.zeros((2, 2), np.int32))
    wts = tensor(np.ones((2, 2), np.float32))
    d = "ingot_moe_down"
    raises("moe_down: h must be \\[T, k, I\\]", d, tensor(np.zeros((2, 16), np.float32)), w, None,
           ids, wts)
    raises("moe_down: h and weights must be float32", d, h, w, None, ids,
           tensor(np.ones((2, 2), np.int32)))
    raises("moe_down: h has I = 16 but w rows have 12", d, h, tensor(np.zeros((4, 8, 12), BF16)),
           None, ids, wts)
    raises("moe_down: h has k = 2 but ids has 3", d, h, w, None,
           tensor(np.zeros((2, 3), np.int32)), wts)
    raises("moe_down: weights must be \\[2, 2\\]", d, h, w, None, ids,
           tensor(np.ones((2, 3), np.float32)))
    raises("moe_down: scale must be \\[4, 8\\]", d, h, w, tensor(np.ones((4, 16), np.float32)),
           ids, wts)
    raises("moe_down: expert id 7 at position 1 is out of range \\[0, 4\\)", d, h, w, None,
           tensor(np.array([[0, 7], [1, 2]], np.int32)), wts)
    raises("moe_down: w must be bfloat16", d, h, tensor(np.zeros((4, 8, 16), np.int8)), None, ids,
           wts)
