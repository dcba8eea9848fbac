"""Inputs shared by the fused-op tests (test_nn.py on the CPU against numpy,
test_cuda_nn.py on CUDA against the CPU): quantised weight tables of every
ggml type and the numpy references of rms_norm and swiglu."""
import zlib

import ml_dtypes
import numpy as np

from test_quant import TYPES, make_weights

QTYPES = list(TYPES)  # F32 F16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K BF16
FLOATS = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def seed(*parts):
    """A reproducible seed for a test case (str hashes vary between runs)."""
    return zlib.crc32(repr(parts).encode())


def qtable(name, rows, kblocks, rng):
    """(type id, cols, bytes [rows, row_bytes], float64 dequantised [rows, cols]):
    K-quants and F32/F16/BF16 from random bits/values, legacy types from
    gguf.quants.quantize (both decoded with gguf.quants.dequantize)."""
    tid, _, bs, _, _ = TYPES[name]
    cols = kblocks * (32 if bs == 1 else bs)
    if bs == 1 and kblocks % 2:
        cols += 3  # odd K for the scalar types (no block constraint)
    wq, w64 = make_weights(name, rows, cols, rng)
    return tid, cols, np.ascontiguousarray(wq).reshape(rows, -1), w64


def qcase_special(name, rows, kblocks, m, specials, rng_seed):
    """qtable(name, rows, kblocks) and an m x cols float32 x drawn from one
    rng, with x[i, j] = v for each (i, j): v in specials (NaN, infinity)."""
    rng = np.random.default_rng(rng_seed)
    tid, cols, wq, w64 = qtable(name, rows, kblocks, rng)
    x = rng.standard_normal((m, cols)).astype(np.float32)
    for (i, j), v in specials.items():
        x[i, j] = v
    return tid, cols, wq, w64, x


def rms_norm_ref(x, w, eps):
    """float32 numpy rms_norm of x (any float dtype), rounded to x's dtype."""
    xf = x.astype(np.float32)
    r = np.float32(1) / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + np.float32(eps))
    return ((xf * r) * w.astype(np.float32)).astype(x.dtype)


def swiglu_ref(g, u):
    gf, uf = g.astype(np.float32), u.astype(np.float32)
    return (gf / (np.float32(1) + np.exp(-gf)) * uf).astype(g.dtype)


def pad_rows(wq, extra, rng):
    """wq [rows, row_bytes] copied into [rows, row_bytes + extra] whose extra
    bytes are random garbage (padded rows: the kernels must never read them)."""
    rows, rb = wq.shape
    out = rng.integers(0, 256, (rows, rb + extra), dtype=np.uint8)
    out[:, :rb] = wq
    return out


def pad16(rb):
    """Extra bytes that round a row of rb bytes up to a multiple of 16 (as
    the model's device upload pads them)."""
    return -rb % 16


def fused_ref(x, w64, norm, eps, res):
    """float64 reference of qmatmul_fused and |x_n| @ |W|^T (+ |res|) for the
    error bound: x normalised in float32 as rms_norm_ref does."""
    xn = x if norm is None else rms_norm_ref(x, norm, eps)
    xs = xn.astype(np.float64)
    ref = xs @ w64.T
    mag = np.abs(xs) @ np.abs(w64).T
    if res is not None:
        ref = ref + res.astype(np.float64)
        mag = mag + np.abs(res.astype(np.float64))
    return ref, mag


def opt(a, f):
    """f(a), or None for an absent optional operand."""
    return None if a is None else f(a)


def check_fused_ref(y, x, w64, norm, eps, res):
    """A fused product y (CPU) against fused_ref: |y - ref| <= 3e-5 * mag + 1e-6."""
    ref, mag = fused_ref(x, w64, norm, eps, res)
    assert y.shape == ref.shape and y.dtype == np.float32
    err = np.abs(y.astype(np.float64) - ref)
    bound = 3e-5 * mag + 1e-6
    assert np.all(err <= bound), f"max err {err.max()} (bound {bound.ravel()[err.argmax()]})"


def check_fused_pair(got, want, x, w64, norm, eps, res, rel):
    """A device result against the CPU's: NaNs in the same places, |got -
    want| <= rel * mag + 1e-6 (mag from fused_ref)."""
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.array_equal(np.isnan(got), np.isnan(want))
    _, mag = fused_ref(x, w64, norm, eps, res)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    err[np.isnan(err)] = 0
    bound = rel * mag + 1e-6
    at = np.unravel_index(err.argmax(), err.shape)
    assert np.all(err <= bound), f"max err {err.max()} at {at} (bound {bound[at]})"


def f8table(rows, cols, rng, extra=0):
    """(bytes uint8 [rows, cols + extra], scale f32 [rows], float64 W [rows,
    cols] = f8 value * scale): f8e4m3fn rows of random normals (magnitudes up
    to about 8, subnormals and zeros among them) with per-row scales, as the
    f8matmul ops read them; extra bytes of garbage pad each row."""
    f8 = (rng.standard_normal((rows, cols)) * 2).astype(ml_dtypes.float8_e4m3fn)
    scale = rng.uniform(0.005, 0.05, rows).astype(np.float32)
    w64 = f8.astype(np.float64) * scale.astype(np.float64)[:, None]
    return pad_rows(f8.view(np.uint8), extra, rng), scale, w64
