"""GGML block formats (include/ingot/quant.h) against gguf.quants (numpy).

Dequantisation must be bit-exact with gguf.quants.dequantize (ggml's
dequantize_row_*). Matvec is checked against the dequantised W @ x in float64
with |err| <= 2e-5 * (|W| @ |x|) + 1e-6 (float32 accumulation), for every
kernel ISA (INGOT_QUANT_ISA=generic / avx2 / best).
"""
import ctypes
import os

import ml_dtypes
import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT
from gguf import quants

from ingot_ctypes import declare, lib

P, I, I64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
declare({
    "ingot_ggml_type_name": (ctypes.c_char_p, [I]),
    "ingot_ggml_block_size": (I64, [I]),
    "ingot_ggml_type_size": (ctypes.c_size_t, [I]),
    "ingot_ggml_row_size": (ctypes.c_size_t, [I, I64]),
    "ingot_ggml_dequantize": (I, [I, P, P, I64]),
    "ingot_ggml_matvec": (I, [I, P, I64, I64, P, I64, P]),
    "ingot_ggml_matvec_q8": (I, [I, P, I64, I64, P, I64, P]),
})

ERR_ARG, ERR_DTYPE = 1, 3

# id, name, block elements, block bytes, offsets of f16 scales in a block
TYPES = {
    "F32": (0, "f32", 1, 4, []),
    "F16": (1, "f16", 1, 2, []),
    "Q4_0": (2, "q4_0", 32, 18, [0]),
    "Q4_1": (3, "q4_1", 32, 20, [0, 2]),
    "Q5_0": (6, "q5_0", 32, 22, [0]),
    "Q5_1": (7, "q5_1", 32, 24, [0, 2]),
    "Q8_0": (8, "q8_0", 32, 34, [0]),
    "Q4_K": (12, "q4_K", 256, 144, [0, 2]),
    "Q5_K": (13, "q5_K", 256, 176, [0, 2]),
    "Q6_K": (14, "q6_K", 256, 210, [208]),
    "BF16": (30, "bf16", 1, 2, []),
}
BLOCK_TYPES = [k for k, v in TYPES.items() if v[2] > 1]
ISAS = ["generic", "avx2", None]


def ptr(a):
    return a.ctypes.data_as(P)


def random_blocks(name, nblocks, rng):
    """Random quant bytes with sane f16 scales (any bit pattern of the quants)."""
    _, _, _, ts, scale_offs = TYPES[name]
    b = rng.integers(0, 256, size=(nblocks, ts), dtype=np.uint8)
    for off in scale_offs:
        s = (rng.uniform(0.001, 0.05, nblocks) * rng.choice([-1, 1], nblocks)).astype(np.float16)
        b[:, off:off + 2] = s.view(np.uint8).reshape(nblocks, 2)
    return b


def make_weights(name, rows, cols, rng, use_quantize=True):
    """(bytes [rows, row_bytes], float64 dequantised W) for a type."""
    tid, _, bs, ts, _ = TYPES[name]
    if name == "F32":
        w = rng.standard_normal((rows, cols)).astype(np.float32)
        return w.view(np.uint8), w.astype(np.float64)
    if name in ("F16", "BF16"):
        dt = np.float16 if name == "F16" else ml_dtypes.bfloat16
        w = rng.standard_normal((rows, cols)).astype(dt)
        return w.view(np.uint8), w.astype(np.float64)
    if use_quantize and name not in ("Q4_K", "Q5_K", "Q6_K"):
        q = quants.quantize(rng.standard_normal((rows, cols)).astype(np.float32), GT[name])
    else:
        q = random_blocks(name, rows * cols // bs, rng).reshape(rows, cols // bs * ts)
    return q, quants.dequantize(q, GT[name]).astype(np.float64)


def dequant(name, data, n):
    out = np.empty(n, np.float32)
    st = lib.ingot_ggml_dequantize(TYPES[name][0], ptr(data), ptr(out), n)
    assert st == 0, lib.ingot_last_error()
    return out


def run_matvec(fn, name, wq, rows, cols, x, nx, isa):
    """y = x @ W^T through fn (a matvec entry point) under INGOT_QUANT_ISA=isa
    (the environment is restored afterwards)."""
    y = np.full(nx * rows, np.nan, np.float32)
    old = os.environ.pop("INGOT_QUANT_ISA", None)
    if isa:
        os.environ["INGOT_QUANT_ISA"] = isa
    try:
        st = fn(TYPES[name][0], ptr(wq), rows, cols, ptr(x), nx, ptr(y))
    finally:
        os.environ.pop("INGOT_QUANT_ISA", None)
        if old is not None:
            os.environ["INGOT_QUANT_ISA"] = old
    assert st == 0, lib.ingot_last_error()
    return y.reshape(nx, rows)


def matvec(name, wq, rows, cols, x, nx, isa=None):
    return run_matvec(lib.ingot_ggml_matvec, name, wq, rows, cols, x, nx, isa)


def check_matvec(y, w64, x):
    xs = x.astype(np.float64)
    ref = xs @ w64.T
    bound = 2e-5 * (np.abs(xs) @ np.abs(w64).T) + 1e-6
    err = np.abs(y.astype(np.float64) - ref)
    assert np.all(err <= bound), f"max err {err.max()} (bound {bound[err > bound].min()})"


# ---- type table ----

@pytest.mark.parametrize("name", list(TYPES))
def test_type_table(name):
    tid, tname, bs, ts, _ = TYPES[name]
    from gguf.constants import GGML_QUANT_SIZES
    assert (bs, ts) == GGML_QUANT_SIZES[GT[name]]
    assert lib.ingot_ggml_type_name(tid).decode() == tname
    assert lib.ingot_ggml_block_size(tid) == bs
    assert lib.ingot_ggml_type_size(tid) == ts
    assert lib.ingot_ggml_row_size(tid, 0) == 0
    assert lib.ingot_ggml_row_size(tid, 5 * bs) == 5 * ts
    assert lib.ingot_ggml_row_size(tid, 1536) == 1536 // bs * ts
    if bs > 1:
        assert lib.ingot_ggml_row_size(tid, bs + 1) == 0
    assert lib.ingot_ggml_row_size(tid, -bs) == 0


def test_unknown_types():
    for t in (4, 5, 10, 11, 15, 99, -1):
        assert lib.ingot_ggml_type_name(t) is None
        assert lib.ingot_ggml_block_size(t) == 0
        assert lib.ingot_ggml_type_size(t) == 0
        assert lib.ingot_ggml_row_size(t, 256) == 0


# ---- dequantize: bit-exact ----

@pytest.mark.parametrize("name", [n for n in BLOCK_TYPES if n not in ("Q4_K", "Q5_K", "Q6_K")])
@pytest.mark.parametrize("nblocks", [1, 7, 4096])
def test_dequantize_quantized(name, nblocks):
    rng = np.random.default_rng(nblocks)
    bs = TYPES[name][2]
    data = (rng.standard_normal(nblocks * bs) * rng.uniform(0.01, 10)).astype(np.float32)
    data[: bs] = 0  # an all-zero block (d = 0)
    q = quants.quantize(data.reshape(1, -1), GT[name])
    ref = quants.dequantize(q, GT[name]).ravel()
    got = dequant(name, q, nblocks * bs)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("name", BLOCK_TYPES)
@pytest.mark.parametrize("nblocks", [1, 3, 700])
def test_dequantize_random_blocks(name, nblocks):
    rng = np.random.default_rng(100 + nblocks)
    q = random_blocks(name, nblocks, rng)
    n = nblocks * TYPES[name][2]
    ref = quants.dequantize(q.reshape(1, -1), GT[name]).ravel()
    got = dequant(name, q, n)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("name", BLOCK_TYPES)
def test_dequantize_special_scales(name):
    """Subnormal, zero, -0, large and inf f16 scales give ggml's products."""
    rng = np.random.default_rng(7)
    scales = np.array([0x0001, 0x03FF, 0x0000, 0x8000, 0x7BFF, 0x7C00, 0xFC00, 0x3C00],
                      np.uint16)
    q = random_blocks(name, len(scales), rng)
    for off in TYPES[name][4]:
        q[:, off:off + 2] = scales.view(np.uint8).reshape(-1, 2)
    n = len(scales) * TYPES[name][2]
    with np.errstate(invalid="ignore", over="ignore"):
        ref = quants.dequantize(q.reshape(1, -1), GT[name]).ravel()
    got = dequant(name, q, n)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    ok = ~np.isnan(ref)
    np.testing.assert_array_equal(got[ok].view(np.uint32), ref[ok].view(np.uint32))


@pytest.mark.parametrize("name", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("n", [0, 1, 37, 200001])
def test_dequantize_float_types(name, n):
    rng = np.random.default_rng(n)
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    if name == "F32":
        src = rng.standard_normal(n).astype(np.float32)
        ref = src
    elif name == "F16":
        bits[(bits & 0x7C00) == 0x7C00] &= 0xFC00  # no NaN payloads (numpy may quiet them)
        src = bits
        ref = bits.view(np.float16).astype(np.float32)
    else:
        src = bits
        ref = (bits.astype(np.uint32) << 16).view(np.float32)
    out = np.full(max(n, 1), 1.5, np.float32)
    assert lib.ingot_ggml_dequantize(TYPES[name][0], ptr(src), ptr(out), n) == 0
    np.testing.assert_array_equal(out[:n].view(np.uint32), ref.view(np.uint32))


def test_dequantize_f16_specials():
    h = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x3555],
                 np.uint16)
    got = dequant("F16", h, len(h))
    ref = h.view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


def test_dequantize_unaligned_source():
    rng = np.random.default_rng(3)
    for name in ("F32", "F16", "Q8_0", "Q6_K"):
        wq, w64 = make_weights(name, 1, 512, rng)
        buf = np.zeros(wq.size + 1, np.uint8)
        buf[1:] = wq.ravel()
        got = dequant(name, buf[1:], 512)
        np.testing.assert_array_equal(got, w64.astype(np.float32).ravel())


# ---- matvec ----

@pytest.mark.parametrize("name", list(TYPES))
@pytest.mark.parametrize("isa", ISAS)
def test_matvec_types(name, isa):
    rng = np.random.default_rng(11)
    bs = TYPES[name][2]
    rows = 33
    cols = 512 if bs == 256 else (96 if bs == 32 else 75)
    wq, w64 = make_weights(name, rows, cols, rng)
    for nx in (1, 2, 8):
        x = rng.standard_normal((nx, cols)).astype(np.float32)
        check_matvec(matvec(name, wq, rows, cols, x, nx, isa), w64, x)


@pytest.mark.parametrize("name,rows,cols", [("Q4_1", 1536, 576), ("Q4_1", 576, 1536),
                                            ("Q4_0", 576, 1536), ("Q8_0", 1536, 576),
                                            ("F32", 576, 576), ("F16", 576, 576),
                                            ("Q6_K", 576, 1536), ("Q4_K", 1536, 512)])
@pytest.mark.parametrize("isa", ISAS)
def test_matvec_large(name, rows, cols, isa):
    rng = np.random.default_rng(rows + cols)
    wq, w64 = make_weights(name, rows, cols, rng)
    for nx in (1, 2, 8):
        x = rng.standard_normal((nx, cols)).astype(np.float32)
        check_matvec(matvec(name, wq, rows, cols, x, nx, isa), w64, x)


def test_matvec_lm_head_q8_0():
    """SmolLM2's tied LM head: Q8_0 49152 x 576."""
    rng = np.random.default_rng(5)
    rows, cols = 49152, 576
    wq, w64 = make_weights("Q8_0", rows, cols, rng, use_quantize=False)
    for nx in (1, 2):
        x = rng.standard_normal((nx, cols)).astype(np.float32)
        check_matvec(matvec("Q8_0", wq, rows, cols, x, nx), w64, x)


def test_matvec_nx64_and_edges():
    rng = np.random.default_rng(9)
    wq, w64 = make_weights("Q4_1", 40, 64, rng)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    check_matvec(matvec("Q4_1", wq, 40, 64, x, 64), w64, x)
    # one row, one block
    wq, w64 = make_weights("Q8_0", 1, 32, rng)
    x = rng.standard_normal((1, 32)).astype(np.float32)
    check_matvec(matvec("Q8_0", wq, 1, 32, x, 1), w64, x)
    # zero columns: y = 0; zero rows: nothing written
    y = matvec("Q4_1", np.zeros(1, np.uint8), 3, 0, np.zeros(1, np.float32), 1)
    np.testing.assert_array_equal(y, 0)
    y = np.full(4, 7, np.float32)
    assert lib.ingot_ggml_matvec(3, ptr(wq), 0, 32, ptr(x), 1, ptr(y)) == 0
    np.testing.assert_array_equal(y, 7)


def test_matvec_unaligned_weights():
    rng = np.random.default_rng(4)
    for name, cols in (("F32", 75), ("Q4_1", 64), ("Q8_0", 64), ("F16", 75)):
        wq, w64 = make_weights(name, 9, cols, rng)
        buf = np.zeros(wq.size + 1, np.uint8)
        buf[1:] = wq.ravel()
        x = rng.standard_normal((2, cols)).astype(np.float32)
        for isa in ISAS:
            check_matvec(matvec(name, buf[1:], 9, cols, x, 2, isa), w64, x)


def test_matvec_isas_agree_closely():
    rng = np.random.default_rng(8)
    wq, w64 = make_weights("Q4_1", 256, 576, rng)
    x = rng.standard_normal((1, 576)).astype(np.float32)
    ys = [matvec("Q4_1", wq, 256, 576, x, 1, isa) for isa in ISAS]
    for y in ys[1:]:
        np.testing.assert_allclose(y, ys[0], rtol=1e-5, atol=1e-5)


# ---- errors ----

def err_status():
    return lib.ingot_last_status(), lib.ingot_last_error().decode()


def test_errors():
    a = np.zeros(1024, np.uint8)
    f = np.zeros(1024, np.float32)
    assert lib.ingot_ggml_dequantize(10, ptr(a), ptr(f), 256) == ERR_DTYPE
    st, msg = err_status()
    assert st == ERR_DTYPE and "unknown ggml type 10" in msg
    assert lib.ingot_ggml_dequantize(3, ptr(a), ptr(f), 33) == ERR_ARG
    assert "multiple" in err_status()[1] and "q4_1" in err_status()[1]
    assert lib.ingot_ggml_dequantize(3, ptr(a), ptr(f), -32) == ERR_ARG
    assert lib.ingot_ggml_dequantize(3, None, ptr(f), 32) == ERR_ARG
    assert "NULL" in err_status()[1]
    assert lib.ingot_ggml_dequantize(3, ptr(a), None, 32) == ERR_ARG
    assert lib.ingot_ggml_dequantize(3, None, None, 0) == 0

    mv = lib.ingot_ggml_matvec
    assert mv(99, ptr(a), 2, 32, ptr(f), 1, ptr(f)) == ERR_DTYPE
    assert mv(12, ptr(a), 2, 32, ptr(f), 1, ptr(f)) == ERR_ARG  # 32 cols of Q4_K
    assert "256" in err_status()[1]
    assert mv(3, ptr(a), -1, 32, ptr(f), 1, ptr(f)) == ERR_ARG
    assert mv(3, ptr(a), 2, -32, ptr(f), 1, ptr(f)) == ERR_ARG
    for nx in (0, 65, -1):
        assert mv(3, ptr(a), 2, 32, ptr(f), nx, ptr(f)) == ERR_ARG
        assert "nx" in err_status()[1]
    assert mv(3, None, 2, 32, ptr(f), 1, ptr(f)) == ERR_ARG
    assert mv(3, ptr(a), 2, 32, None, 1, ptr(f)) == ERR_ARG
    assert mv(3, ptr(a), 2, 32, ptr(f), 1, None) == ERR_ARG
    assert "NULL" in err_status()[1]


# ---- matvec with int8 activations (ingot_ggml_matvec_q8) ----
# Oracle: numpy emulation of ggml's quantize_row_q8_1_ref on x (d = max|x|/127,
# q = roundf(x * (1/d)) half away from zero, d and s = d * sum(q) rounded to
# f16), then the exact block sums d_w * d_x * sum(q_w q_x) (+ m_w * s_x) in
# float64; tolerance 1e-5 relative to the sum of |products| (float32
# accumulation in any order).
def quantize_q8_1_ref(x):
    xb = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(xb).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (xb * idv[:, None]).astype(np.float32).astype(np.float64)  # roundf, exact in f64
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int64)
    s = (q.sum(axis=1).astype(np.float32) * d).astype(np.float32)
    return q, d.astype(np.float16).astype(np.float64), s.astype(np.float16).astype(np.float64)


def q8_reference(name, wq, rows, cols, x):
    """(ref [nx, rows], scale [nx, rows]) per the emulation above."""
    tid, _, bs, ts, _ = TYPES[name]
    nb = cols // 32
    blk = wq.reshape(rows, nb, ts)
    dw = blk[:, :, 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
    if name == "Q8_0":
        qw = blk[:, :, 2:].view(np.int8).astype(np.int64)
    else:
        qs = blk[:, :, 4:] if name == "Q4_1" else blk[:, :, 2:]
        qw = np.concatenate([qs & 0x0F, qs >> 4], axis=2).astype(np.int64)
        if name == "Q4_0":
            qw -= 8
    refs, scales = [], []
    for xj in x:
        q, d, s = quantize_q8_1_ref(xj)
        sumi = np.einsum("rbi,bi->rb", qw, q).astype(np.float64)
        terms = sumi * dw * d[None, :]
        ref = terms.sum(axis=1)
        # any summation order: bound by the sum of |products|, not |block sums|
        scale = (np.einsum("rbi,bi->rb", np.abs(qw), np.abs(q)) * np.abs(dw * d[None, :])).sum(1)
        if name == "Q4_1":
            mt = blk[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64) * s[None, :]
            ref = ref + mt.sum(axis=1)
            scale = scale + np.abs(mt).sum(axis=1)
        refs.append(ref)
        scales.append(scale)
    return np.array(refs), np.array(scales)


def matvec_q8(name, wq, rows, cols, x, nx, isa=None):
    return run_matvec(lib.ingot_ggml_matvec_q8, name, wq, rows, cols, x, nx, isa)


def check_q8(name, wq, rows, cols, x, isa=None):
    y = matvec_q8(name, wq, rows, cols, x, x.shape[0], isa)
    ref, scale = q8_reference(name, wq, rows, cols, x)
    err = np.abs(y.astype(np.float64) - ref)
    bound = 1e-5 * scale + 1e-7
    assert np.all(err <= bound), f"max err {err.max()} rel {(err / scale).max()}"
    return y


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q8_0"])
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("rows,cols", [(33, 96), (67, 64), (1536, 576)])
def test_matvec_q8_types(name, isa, rows, cols):
    rng = np.random.default_rng(rows * 7 + cols)
    wq, w64 = make_weights(name, rows, cols, rng, use_quantize=(name != "Q8_0"))
    if name == "Q8_0":  # any int8 byte pattern, including -128
        wq, w64 = make_weights(name, rows, cols, rng, use_quantize=False)
    for nx in (1, 4):
        x = rng.standard_normal((nx, cols)).astype(np.float32)
        x[0, :32] = 0  # an all-zero block (d = 0)
        y = check_q8(name, wq, rows, cols, x, isa)
        # and it stays close to the exact product (int8 rounding of x only)
        ref = x.astype(np.float64) @ w64.T
        ax = np.abs(x.astype(np.float64))
        bound = ax.max() / 127 * np.abs(w64).sum(axis=1) + 1e-3 * (ax @ np.abs(w64).T)
        assert np.all(np.abs(y - ref) <= bound)


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q8_0"])
def test_matvec_q8_lm_head_shape(name):
    rng = np.random.default_rng(3)
    rows, cols = 49152, 576
    wq, _ = make_weights(name, rows, cols, rng, use_quantize=False)
    for nx in (1, 4):
        x = rng.standard_normal((nx, cols)).astype(np.float32)
        check_q8(name, wq, rows, cols, x)


def test_matvec_q8_fallback_and_errors():
    rng = np.random.default_rng(9)
    wq, w64 = make_weights("Q6_K", 8, 256, rng)
    x = rng.standard_normal((2, 256)).astype(np.float32)
    y = np.empty(16, np.float32)
    assert lib.ingot_ggml_matvec_q8(TYPES["Q6_K"][0], ptr(wq), 8, 256, ptr(x), 2, ptr(y)) == 0
    check_matvec(y.reshape(2, 8), w64, x)
    wq, _ = make_weights("Q4_1", 4, 64, rng)
    x = np.ones(64 * 65, np.float32)
    y = np.empty(4 * 65, np.float32)
    assert lib.ingot_ggml_matvec_q8(3, ptr(wq), 4, 64, ptr(x), 65, ptr(y)) == ERR_ARG
    assert lib.ingot_ggml_matvec_q8(3, ptr(wq), 4, 63, ptr(x), 1, ptr(y)) == ERR_ARG
    assert lib.ingot_ggml_matvec_q8(3, None, 4, 64, ptr(x), 1, ptr(y)) == ERR_ARG
    assert lib.ingot_ggml_matvec_q8(99, ptr(wq), 4, 64, ptr(x), 1, ptr(y)) == ERR_DTYPE
