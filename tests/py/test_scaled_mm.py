"""ingot_scaled_mm (torch._scaled_mm) on the CPU against numpy, every
argument rule, and CUDA against the CPU (skipped without a CUDA device).

Reference: both float8 operands dequantised exactly with ml_dtypes, the
product in float64, scaled and biased in float64. Tolerance per output
dtype: half an ulp of the output plus the float32 accumulation error bound
(2^-23 * k * sum|a_i b_i| * |scales|). CUDA against CPU: rtol bf16 1.6e-2,
f16 2e-3, f32 1e-3, and atol 1e-3 * sqrt(k) for all (Hopper's FP8 tensor
cores accumulate in fewer than 24 bits between promotions to f32).
"""
import ctypes

import ml_dtypes
import numpy as np
import pytest
from cuda_diff import CUDA, HAVE_CUDA, diff
from ingot_ctypes import CPU, ID, P, IngotError, call, sig, strided, tensor, to_numpy, transposed

sig("ingot_scaled_mm", P, P, P, P, P, P, ctypes.c_int)

E4 = np.dtype(ml_dtypes.float8_e4m3fn)
E5 = np.dtype(ml_dtypes.float8_e5m2)
BF16 = np.dtype(ml_dtypes.bfloat16)
OUTS = {"bfloat16": BF16, "float16": np.dtype(np.float16), "float32": np.dtype(np.float32)}
HALF_ULP = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 2.0 ** -24}
RNG = np.random.default_rng(77)
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="skipped: no CUDA device")


def f8(shape, dt, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dt)


def operands(m, k, n, adt=E4, bdt=E4, rowwise=False, bias_dt=None):
    a = f8((m, k), adt)
    b = f8((k, n), bdt, 0.5)
    if rowwise:
        sa = RNG.uniform(0.25, 2.0, (m, 1)).astype(np.float32)
        sb = RNG.uniform(0.25, 2.0, (1, n)).astype(np.float32)
    else:
        sa = np.array(RNG.uniform(0.25, 2.0), dtype=np.float32)
        sb = np.array(RNG.uniform(0.25, 2.0), dtype=np.float32)
    bias = None if bias_dt is None else RNG.standard_normal(n).astype(bias_dt)
    return a, b, sa, sb, bias


def reference(a, b, sa, sb, bias):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    s = np.asarray(sa, np.float64).reshape(-1, 1) * np.asarray(sb, np.float64).reshape(1, -1)
    r = (a64 @ b64) * s
    mag = (np.abs(a64) @ np.abs(b64)) * s
    if bias is not None:
        r = r + bias.astype(np.float64)
    return r, mag


def run(a, b, sa, sb, bias, out):
    """CPU tensors: a row-major, b column-major (transpose of contiguous [N,K])."""
    return call("ingot_scaled_mm", tensor(a), transposed(b), tensor(sa), tensor(sb),
                None if bias is None else tensor(bias), ID[out])


def check(a, b, sa, sb, bias, out, got):
    want, mag = reference(a, b, sa, sb, bias)
    g = to_numpy(got)
    assert g.dtype == OUTS[out] and g.shape == want.shape
    k = a.shape[1]
    tol = 2 * HALF_ULP[out] * np.abs(want) + 2.0 ** -23 * max(k, 1) * mag + 1e-30
    err = np.abs(g.astype(np.float64) - want)
    assert np.all(err <= tol), f"max excess {np.max(err - tol)}"


@pytest.mark.parametrize("out", list(OUTS))
@pytest.mark.parametrize("rowwise", [False, True])
@pytest.mark.parametrize("types", [(E4, E4), (E4, E5), (E5, E4)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_cpu_matches_numpy(out, rowwise, types, with_bias):
    for m, k, n in [(1, 16, 16), (5, 64, 48), (33, 272, 128), (128, 32, 16)]:
        a, b, sa, sb, bias = operands(m, k, n, *types, rowwise, OUTS[out] if with_bias else None)
        check(a, b, sa, sb, bias, out, run(a, b, sa, sb, bias, out))


def test_cpu_special_values():
    a, b, sa, sb, _ = operands(4, 32, 16)
    a[0, 0] = np.nan
    a[1, 3] = 448.0
    b[:, 2] = 0
    want, _ = reference(a, b, sa, sb, None)
    got = to_numpy(run(a, b, sa, sb, None, "float32")).astype(np.float64)
    assert np.all(np.isnan(got[0]))
    np.testing.assert_allclose(got[1:], want[1:], rtol=1e-6, atol=1e-6)


def test_cpu_overflow_to_inf_in_f16():
    a = np.full((2, 16), 448.0).astype(E4)
    b = np.full((16, 16), 448.0).astype(E4)
    one = np.array(1.0, np.float32)
    got = to_numpy(run(a, b, one, one, None, "float16"))
    assert np.all(np.isinf(got)) and np.all(got > 0)


def test_cpu_leading_dims_and_empty():
    # a with a row stride larger than K, b with a column stride larger than K
    a_big = f8((6, 64), E4)
    b_big = f8((32, 64), E4)  # b^T rows, wider than K
    k = 32
    ta = call("ingot_narrow", tensor(a_big), 1, 0, k)
    tb = call("ingot_transpose", call("ingot_narrow", tensor(b_big), 1, 0, k), 0, 1)
    sa = np.array(0.5, np.float32)
    sb = np.array(2.0, np.float32)
    got = call("ingot_scaled_mm", ta, tb, tensor(sa), tensor(sb), None, ID["float32"])
    check(a_big[:, :k], b_big[:, :k].T, sa, sb, None, "float32", got)
    # K == 0: the result is the bias; M == 0: empty
    bias = RNG.standard_normal(16).astype(BF16)
    got = run(np.zeros((3, 0), E4), np.zeros((0, 16), E4), sa, sb, bias, "bfloat16")
    np.testing.assert_array_equal(to_numpy(got), np.broadcast_to(bias, (3, 16)))
    got = run(np.zeros((0, 16), E4), f8((16, 32), E4), sa, sb, None, "bfloat16")
    assert to_numpy(got).shape == (0, 32)


def expect_error(fragment, a, b, sa, sb, bias=None, out=ID["bfloat16"]):
    with pytest.raises(IngotError) as e:
        call("ingot_scaled_mm", a, b, sa, sb, bias, out)
    assert fragment in str(e.value), str(e.value)


def test_errors():
    one = tensor(np.array(1.0, np.float32))
    a = tensor(f8((32, 64), E4))
    b = transposed(f8((64, 48), E4))
    expect_error("mat1 must be a matrix", tensor(f8((64,), E4)), b, one, one)
    expect_error("mat2 must be a matrix", a, tensor(f8((2, 64, 48), E4)), one, one)
    expect_error("cannot be multiplied (32x64 and 48x48)", a, transposed(f8((48, 48), E4)),
                 one, one)
    expect_error("must be float (fp32)", a, b, tensor(np.array(1.0)), one)
    expect_error("must be float (fp32)", a, b, one, tensor(np.array(1.0, np.float16)))
    expect_error("must be 2-dimensional", a, b, tensor(np.ones(32, np.float32)), one)
    expect_error("Invalid scaling configuration", a, b, tensor(np.ones((32, 1), np.float32)),
                 tensor(np.ones((1, 47), np.float32)))
    expect_error("Invalid scaling configuration", a, b, tensor(np.ones((32, 1), np.float32)),
                 tensor(np.ones((1, 1), np.float32)))
    expect_error("must be contiguous for RowWise", a, b, tensor(np.ones((32, 1), np.float32)),
                 strided(np.ones((1, 48), np.float32)))
    expect_error("Bias must be size 48 but got 47", a, b, one, one,
                 tensor(np.ones(47, BF16)))
    expect_error("divisible by 16 but got mat1 shape: (32x24)", tensor(f8((32, 24), E4)),
                 transposed(f8((24, 48), E4)), one, one)
    expect_error("mat2 shape (64x40) must be divisible by 16", a, transposed(f8((64, 40), E4)),
                 one, one)
    for bad in ["float8_e4m3fn", "int32", "float64"]:
        expect_error("out_dtype must be bfloat16, float16 or float32", a, b, one, one,
                     out=ID[bad])
    expect_error("Expected mat1 to be Float8 matrix got bfloat16", tensor(f8((32, 64), BF16)),
                 b, one, one)
    expect_error("Expected mat2 to be Float8 matrix got float32", a,
                 transposed(f8((64, 48), np.float32)), one, one)
    expect_error("Multiplication of two Float8_e5m2 matrices is not supported",
                 tensor(f8((32, 64), E5)), transposed(f8((64, 48), E5)), one, one)
    expect_error("Bias must be bfloat16 to compute bfloat16 output, but got float16", a, b, one,
                 one, tensor(np.ones(48, np.float16)))
    expect_error("Bias must be float32 to compute float32 output, but got bfloat16", a, b, one,
                 one, tensor(np.ones(48, BF16)), ID["float32"])
    expect_error("Only multiplication of row-major and column-major", transposed(f8((32, 64), E4)),
                 b, one, one)
    expect_error("Only multiplication of row-major and column-major", a,
                 tensor(f8((64, 48), E4)), one, one)
    expect_error("Only multiplication of row-major and column-major", strided(f8((32, 64), E4)),
                 b, one, one)


def test_allow_tf32_flag():
    from ingot_ctypes import B, lib
    lib.ingot_get_allow_tf32.restype = B
    lib.ingot_get_allow_tf32.argtypes = []
    lib.ingot_set_allow_tf32.restype = None
    lib.ingot_set_allow_tf32.argtypes = [B]
    assert lib.ingot_get_allow_tf32() is False
    lib.ingot_set_allow_tf32(True)
    try:
        assert lib.ingot_get_allow_tf32() is True
    finally:
        lib.ingot_set_allow_tf32(False)
    assert lib.ingot_get_allow_tf32() is False


# ---- CUDA against the CPU ----
CUDA_RTOL = {"bfloat16": 1.6e-2, "float16": 2e-3, "float32": 1e-3}


def cuda_tol(out, k):
    return CUDA_RTOL[out], 1e-3 * max(k, 1) ** 0.5


@needs_cuda
@pytest.mark.parametrize("out", list(OUTS))
@pytest.mark.parametrize("rowwise", [False, True])
@pytest.mark.parametrize("types", [(E4, E4), (E4, E5), (E5, E4)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_cuda_matches_cpu(out, rowwise, types, with_bias):
    shapes = [(1, 16, 16), (3, 64, 48), (8, 128, 256), (9, 64, 32), (33, 272, 128),
              (256, 4096, 1024)]
    for m, k, n in shapes:
        a, b, sa, sb, bias = operands(m, k, n, *types, rowwise, OUTS[out] if with_bias else None)
        diff("ingot_scaled_mm", tensor(a), transposed(b), tensor(sa), tensor(sb),
             None if bias is None else tensor(bias), ID[out], tol=cuda_tol(out, k))


@needs_cuda
def test_cuda_leading_dims_k0_and_errors():
    a_big = f8((40, 96), E4)
    b_big = f8((48, 96), E4)
    k = 64
    ta = call("ingot_narrow", tensor(a_big), 1, 0, k)
    tb = call("ingot_transpose", call("ingot_narrow", tensor(b_big), 1, 0, k), 0, 1)
    sa = tensor(np.array(0.5, np.float32))
    sb = tensor(np.array(2.0, np.float32))
    diff("ingot_scaled_mm", ta, tb, sa, sb, None, ID["bfloat16"], tol=cuda_tol("bfloat16", k))
    # odd offsets made on each device (pointers not 256-byte aligned there either)
    a_np, b_np = f8((41, 64), E4), f8((64, 49), E4)
    res = []
    for dev in (None, CUDA):
        ba, bb = tensor(a_np), transposed(b_np)
        if dev is not None:
            ba = call("ingot_to", ba, dev)
            bb = call("ingot_transpose", call("ingot_to", tensor(np.ascontiguousarray(b_np.T)),
                                              dev), 0, 1)
        va = call("ingot_narrow", ba, 0, 1, 40)
        vb = call("ingot_narrow", bb, 1, 1, 48)
        res.append(to_numpy(call("ingot_scaled_mm", va, vb, call("ingot_to", sa, dev or CPU),
                                 call("ingot_to", sb, dev or CPU), None, ID["float32"])))
    rtol, atol = cuda_tol("float32", 64)
    np.testing.assert_allclose(res[1], res[0], rtol=rtol, atol=atol)
    bias = tensor(RNG.standard_normal(16).astype(np.float32))
    diff("ingot_scaled_mm", tensor(np.zeros((3, 0), E4)), transposed(np.zeros((0, 16), E4)), sa,
         sb, bias, ID["float32"])
    diff("ingot_scaled_mm", tensor(np.zeros((0, 16), E4)), transposed(f8((16, 32), E4)), sa, sb,
         None, ID["float16"])
    # f32 output with f32 bias (added outside cuBLASLt's FP8 epilogue)
    a, b, s1, s2, bias = operands(64, 128, 96, rowwise=True, bias_dt=np.float32)
    diff("ingot_scaled_mm", tensor(a), transposed(b), tensor(s1), tensor(s2), tensor(bias),
         ID["float32"], tol=cuda_tol("float32", 128))
    # a rule error is raised on both devices
    diff("ingot_scaled_mm", tensor(f8((32, 64), E5)), transposed(f8((64, 48), E5)), sa, sb, None,
         ID["bfloat16"])
    # scales on another device than the operands
    with pytest.raises(IngotError):
        call("ingot_scaled_mm", call("ingot_to", tensor(f8((16, 32), E4)), CUDA),
             call("ingot_to", transposed(f8((32, 16), E4)), CUDA), sa, sb, None, ID["bfloat16"])
