"""Mixture-of-experts references in numpy (float64) from the formulas of
include/ingot/moe.h, random operands, and the ctypes prototypes of the ops;
shared by test_moe.py (CPU) and test_cuda_moe.py (CUDA against the CPU)."""
import ctypes

import ml_dtypes
import numpy as np

from ingot_ctypes import B, D, I, OUT, P, sig

sig("ingot_moe_route", I, P, ctypes.c_int, B, OUT, OUT)
sig("ingot_moe_gate_up", P, P, P, P, P)
sig("ingot_moe_down", P, P, P, P, P, P)
sig("ingot_moe_route_linear", I, P, P, ctypes.c_int, B, OUT, OUT)
sig("ingot_moe_route_linear_norm", I, P, P, D, P, ctypes.c_int, B, OUT, OUT, OUT)
sig("ingot_moe_experts", P, P, P, P, P, P, P, P)
sig("ingot_moe_experts_add", P, P, P, P, P, P, P, P, P)
sig("ingot_moe_block", P, P, P, D, P, ctypes.c_int, B, P, P, P, P, P, OUT, OUT)

BF16 = np.dtype(ml_dtypes.bfloat16)
F8 = np.dtype(ml_dtypes.float8_e4m3fn)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
WDTS = [BF16, F16, F32, F8]


def route_ref(logits, k, renorm):
    """(weights f64 [T,k], ids [T,k]): softmax of the f32 logits, top-k by
    logit (descending, ties to the lower id, NaN largest), renormalised."""
    x = np.asarray(logits).astype(np.float32).astype(np.float64)
    T, E = x.shape
    ids = np.zeros((T, k), dtype=np.int32)
    w = np.zeros((T, k))
    with np.errstate(invalid="ignore", over="ignore"):
        for t in range(T):
            row = x[t]
            key = np.where(np.isnan(row), np.inf, row)
            nan_first = np.isnan(row)
            # descending by key, NaN before +inf, ties to the lower id
            order = sorted(range(E), key=lambda e: (not nan_first[e], -key[e], e))
            ids[t] = order[:k]
            m = row[ids[t, 0]]
            p = np.exp(row - m)
            p = p / p.sum()
            w[t] = p[ids[t]]
            if renorm:
                w[t] = w[t] / w[t].sum()
    return w, ids


def dequant(w, scale):
    """f64 weights [E, rows, cols] times the per-row scales [E, rows]."""
    wf = np.asarray(w).astype(np.float32).astype(np.float64)
    if scale is not None:
        wf = wf * np.asarray(scale, dtype=np.float64)[:, :, None]
    return wf


def silu(g):
    return g / (1.0 + np.exp(-g))


def gate_up_ref(x, w, scale, ids):
    """h [T,k,I] = silu(x W_e[:I]^T) * (x W_e[I:]^T), e = ids[t,j]."""
    xf = np.asarray(x).astype(np.float32).astype(np.float64)
    wf = dequant(w, scale)
    n_i = wf.shape[1] // 2
    T, k = ids.shape
    h = np.zeros((T, k, n_i))
    for t in range(T):
        for j in range(k):
            gu = wf[ids[t, j]] @ xf[t]
            h[t, j] = silu(gu[:n_i]) * gu[n_i:]
    return h


def down_ref(h, w, scale, ids, weights):
    """y [T,K] = sum_j weights[t,j] * (h[t,j] W_e^T)."""
    hf = np.asarray(h).astype(np.float64)
    wf = dequant(w, scale)
    T, k = ids.shape
    y = np.zeros((T, wf.shape[1]))
    for t in range(T):
        for j in range(k):
            y[t] += float(weights[t, j]) * (wf[ids[t, j]] @ hf[t, j])
    return y


def dot_tol(n):
    """atol of an f32 sum of n products of O(1) terms (any order) against f64."""
    return 2e-6 * max(n, 1) ** 0.5 + 1e-6


def rand_weights(rng, E, rows, cols, dt):
    """Weights of dtype dt whose rows dot unit vectors to O(1), and the f32
    per-row scales f8 needs (None for other dtypes)."""
    if dt == F8:
        w = (rng.standard_normal((E, rows, cols)) * 4).astype(F8)
        scale = (rng.uniform(0.5, 1.5, (E, rows)) / (4 * cols ** 0.5)).astype(np.float32)
        return w, scale
    return (rng.standard_normal((E, rows, cols)) / cols ** 0.5).astype(dt), None


def rand_ids(rng, T, k, E, distinct=True):
    """ids [T,k] int32: k distinct experts per token (as routing makes), or any."""
    if distinct:
        return np.stack([rng.permutation(E)[:k] for _ in range(T)]).astype(np.int32).reshape(T, k)
    return rng.integers(0, E, size=(T, k)).astype(np.int32)


def rand_layer(rng, T, E, k, K, NI, wdt, distinct=True):
    """One expert layer's operands, drawn in this order: x [T,K] bf16, gate|up
    [E,2NI,K] and down [E,K,NI] weights of wdt (with their f8 scales or None),
    ids [T,k] and routing weights [T,k] f32 in [0, 1)."""
    x = rng.standard_normal((T, K)).astype(BF16)
    wgu, sgu = rand_weights(rng, E, 2 * NI, K, wdt)
    wd, sd = rand_weights(rng, E, K, NI, wdt)
    ids = rand_ids(rng, T, k, E, distinct)
    wts = rng.uniform(0, 1, (T, k)).astype(np.float32)
    return x, wgu, sgu, wd, sd, ids, wts


U = 2.0 ** -24  # f32 unit roundoff


def router_operands(rng, xdt, rdt, E, k, D, T, norm):
    """The router tests' operands (x [T,D] xdt, norm weight, router [E,D]
    rdt), their f64 logits and err = u sqrt(D) max|logit|, about
    the largest error of the CPU's logits (serial f32 dots of D terms: the
    error grows as sqrt(D) times the partial sums' size). Drawn again until
    every token's top k+1 logits are more than 16 err apart, so both devices
    choose the same ids (at D 4096 a near-tie within err is a few tokens in a
    thousand)."""
    while True:
        x = (rng.standard_normal((T, D)) * 3).astype(xdt)
        nw = rng.uniform(0.5, 1.5, D).astype(np.float32)
        router = (rng.standard_normal((E, D)) * (3 / D ** 0.5)).astype(rdt)
        xr = x.astype(np.float32).astype(np.float64)
        if norm:
            xr = xr / np.sqrt((xr * xr).mean(1, keepdims=True) + 1e-6) * nw
        logits = xr @ router.astype(np.float64).T
        err = U * D ** 0.5 * np.abs(logits).max()
        top = -np.sort(-logits, axis=1)[:, :min(k + 1, E)]
        if (top[:, :-1] - top[:, 1:] > 16 * err).all():
            return x, nw, router, logits, err


def router_rtol(err):
    """Routing weights' rtol from the router's logits: 8 err, at least 2e-5.
    The CPU's weights are up to 1.03 err off f64 (512 draws of the split
    batches' shapes; at D 4096 ~5x a fixed 2e-5, which also failed at T 40,
    D 2048 with logits up to ~10), the device's tree sums ~20x less: 4 err
    for either side."""
    return max(2e-5, 8 * err)
