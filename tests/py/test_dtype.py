"""Dtype conversions (bit-exact with PyTorch) and type promotion.

Oracle: numpy / ml_dtypes. Where they differ from PyTorch, PyTorch wins:
- a NaN result is compared by isnan only (payload and sign are free), except
  f32 -> bf16 where PyTorch always writes 0x7FC0;
- f64 (and int, complex) -> f16/bf16/f8 goes through float32 first (PyTorch's
  double rounding), so the expected value is x.astype(f32).astype(fmt);
- f8e4m3fn has no inf: |x| > 464 (rounds past 448) and +-inf give NaN.
All conversions run through ingot_cast (the CPU COPY kernel).
"""
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(__file__))
import ml_dtypes
import numpy as np
import pytest
from ingot_ctypes import DTYPES, ID, NAMES, IngotError, call, lib, strided, tensor, to_numpy

F16, BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
E4, E5 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
LOWP = {"float16": F16, "bfloat16": BF16, "float8_e4m3fn": E4, "float8_e5m2": E5}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def icast(arr, name):
    """ingot_cast of a numpy array to dtype `name`, back as numpy."""
    return to_numpy(call("ingot_cast", tensor(arr), ID[name]))


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(UINT[a.dtype.itemsize])


def assert_same_float(got, want, nan_bits=None):
    """Bit-exact, except NaN outputs which must be NaN (with nan_bits if given)."""
    assert got.dtype == want.dtype
    with np.errstate(all="ignore"):
        gf, wf = got.astype(np.float64), want.astype(np.float64)
    wnan = np.isnan(wf)
    np.testing.assert_array_equal(np.isnan(gf), wnan)
    bad = np.nonzero((bits(got) != bits(want)) & ~wnan)[0]
    assert bad.size == 0, f"{bad.size} mismatches, first at {bad[:5]}: got " \
        f"{bits(got)[bad[:5]]} want {bits(want)[bad[:5]]}"
    if nan_bits is not None and wnan.any():
        assert np.all(bits(got)[wnan] == nan_bits)


# ---- format -> f32: every bit pattern ----
@pytest.mark.parametrize("name", list(LOWP))
def test_every_pattern_to_f32(name):
    dt = LOWP[name]
    n = 1 << (8 * dt.itemsize)
    src = np.arange(n, dtype=UINT[dt.itemsize]).view(dt)
    got = icast(src, "float32")
    want = src.astype(np.float32)
    assert_same_float(got, want)
    # Strided source goes through the same conversion.
    got_s = to_numpy(call("ingot_cast", strided(src[:999]), ID["float32"]))
    assert_same_float(got_s, want[:999])
    # And to f64 (exact through f32).
    with np.errstate(invalid="ignore"):
        want64 = src[::7].astype(np.float64)
    assert_same_float(icast(src[::7], "float64"), want64)


# ---- f32 -> format: representables, midpoints, +-1 ulp, edges, random ----
def f32_probe_values(dt, rng):
    n = 1 << (8 * dt.itemsize)
    vals = np.arange(n, dtype=UINT[dt.itemsize]).view(dt).astype(np.float32)
    fin = np.unique(vals[np.isfinite(vals)])  # sorted, -0 merged with +0
    mids = ((fin[:-1].astype(np.float64) + fin[1:]) / 2).astype(np.float32)  # exact
    assert np.all(mids.astype(np.float64) == (fin[:-1].astype(np.float64) + fin[1:]) / 2)
    up = np.nextafter(mids, np.float32(np.inf))
    dn = np.nextafter(mids, np.float32(-np.inf))
    fmax = float(fin[-1])
    with np.errstate(over="ignore"):
        beyond = np.array([fmax * k for k in (1.0001, 1.03, 1.0625, 1.1, 1.5, 2, 4, 1e3)] +
                          [3.0e38, np.finfo(np.float32).max], np.float32)
        rand_range = (rng.standard_normal(1_000_000) * fmax / 3).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.1754942e-38,
                        1.1754944e-38, 5e-39, 1.0, -1.0], np.float32)
    special = np.concatenate([special, bits_as_f32([0x7FC00000, 0x7F800001, 0xFFC00001,
                                                    0x7FFFFFFF, 0xFF800001])])
    tiny = np.float32(fin[fin > 0].min())  # smallest subnormal of the format
    subn = np.array([tiny * np.float32(k) for k in (0.25, 0.5, 0.50001, 0.75, 1.5, 2.5)],
                    np.float32)
    sub_f32 = rng.integers(1, 1 << 23, 4000, dtype=np.uint32).view(np.float32)  # f32 subnormals
    rand_bits = rng.integers(0, 1 << 32, 1_500_000, dtype=np.uint64).astype(np.uint32)
    rand_bits = rand_bits.view(np.float32)
    allv = np.concatenate([fin, -fin, mids, -mids, up, -up, dn, -dn, beyond, -beyond, special,
                           subn, -subn, sub_f32, -sub_f32, rand_bits, rand_range])
    return allv.astype(np.float32)


def bits_as_f32(lst):
    return np.array(lst, dtype=np.uint32).view(np.float32)


@pytest.mark.parametrize("name", list(LOWP))
def test_f32_to_format(name):
    dt = LOWP[name]
    x = f32_probe_values(dt, np.random.default_rng(ID[name]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = x.astype(dt)
    got = icast(x, name)
    if name == "float8_e4m3fn":
        # PyTorch: NaN for |x| > 464 and +-inf (448 is the largest finite).
        big = np.abs(x) > 464
        assert np.all(np.isnan(got[big].astype(np.float32)))
        assert np.all(np.isnan(want[big].astype(np.float32)))
    assert_same_float(got, want, nan_bits=0x7FC0 if name == "bfloat16" else None)


def test_format_edges_exact():
    f = lambda v, n: int(bits(icast(np.array([v], np.float32), n))[0])
    # e4m3fn: 448 max; 464 ties to 448 (even); just above 464 -> NaN; 480 -> NaN; inf -> NaN.
    assert f(448, "float8_e4m3fn") == 0x7E
    assert f(464, "float8_e4m3fn") == 0x7E
    assert f(-464, "float8_e4m3fn") == 0xFE
    assert f(np.nextafter(np.float32(464), np.float32(1e9)), "float8_e4m3fn") & 0x7F == 0x7F
    for v in (480, 1e6, np.inf, -np.inf, np.nan):
        assert f(v, "float8_e4m3fn") & 0x7F == 0x7F
    assert f(-0.0, "float8_e4m3fn") == 0x80
    assert f(2.0 ** -9, "float8_e4m3fn") == 0x01  # smallest subnormal
    assert f(2.0 ** -10, "float8_e4m3fn") == 0x00  # tie -> even (0)
    # e5m2: 57344 max, 61440 ties up to inf, inf kept, NaN stays NaN.
    assert f(57344, "float8_e5m2") == 0x7B
    assert f(61440, "float8_e5m2") == 0x7C
    assert f(np.nextafter(np.float32(61440), np.float32(0)), "float8_e5m2") == 0x7B
    assert f(np.inf, "float8_e5m2") == 0x7C and f(-np.inf, "float8_e5m2") == 0xFC
    assert f(np.nan, "float8_e5m2") & 0x7F > 0x7C
    # f16: 65504 max, 65520 ties to inf.
    assert f(65504, "float16") == 0x7BFF and f(65520, "float16") == 0x7C00
    assert f(np.nextafter(np.float32(65520), np.float32(0)), "float16") == 0x7BFF
    # bf16 NaN is always 0x7FC0 in PyTorch, whatever the sign or payload.
    for b in (0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF):
        assert f(bits_as_f32([b])[0], "bfloat16") == 0x7FC0


def test_f64_double_rounding_through_f32():
    # 1 + half-ulp(fmt) + 2^-40: direct rounding goes up; PyTorch rounds to
    # f32 first (the 2^-40 is lost), giving an exact tie that goes to even (1.0).
    for name, half_ulp in (("float16", 2.0 ** -11), ("bfloat16", 2.0 ** -8),
                           ("float8_e4m3fn", 2.0 ** -4), ("float8_e5m2", 2.0 ** -3)):
        x = np.array([1 + half_ulp + 2.0 ** -40, -(1 + half_ulp + 2.0 ** -40)], np.float64)
        if name == "float16":  # numpy rounds f64 -> f16 once (ml_dtypes goes via f32 too)
            assert x.astype(np.float16)[0] == 1 + 2 * half_ulp
        got = icast(x, name).astype(np.float64)
        np.testing.assert_array_equal(got, [1.0, -1.0])
        # The same value as int64 source can't show it; complex128 too goes via f32.
        got_c = icast(x.astype(np.complex128), name).astype(np.float64)
        np.testing.assert_array_equal(got_c, [1.0, -1.0])
    # Random f64 values: expected = via f32.
    rng = np.random.default_rng(5)
    x = rng.standard_normal(200_000) * 100
    for name, dt in LOWP.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = x.astype(np.float32).astype(dt)
        assert_same_float(icast(x, name), want)


# ---- casts among all 14 dtypes ----
INT_RANGE = {"bool": (0, 1), "uint8": (0, 255), "int8": (-128, 127), "int16": (-32768, 32767),
             "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1)}


def random_source(src, dst, rng, n=2000):
    """Random values of dtype src that can be cast to dst without UB."""
    sdt = DTYPES[ID[src]]
    if src == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if src in INT_RANGE:
        lo, hi = INT_RANGE[src]
        v = rng.integers(lo, hi, n, dtype=np.int64, endpoint=True).astype(sdt)
        return v
    # floating / complex sources
    if dst in INT_RANGE and dst != "bool":
        lo, hi = INT_RANGE[dst]
        lo, hi = max(lo, -120), min(hi, 120)  # fits every float format
        re = rng.uniform(lo, hi, n)
        re[:4] = [lo, hi, 0.5, -0.0 if lo < 0 else 0.25]
    else:
        re = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)
        re[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 0.5, -2.5, 1e-30]
        if dst == "bool":
            re[8:40] = 0.0
    if src.startswith("complex"):
        im = rng.standard_normal(n)
        if dst == "bool":
            im[8:24] = 0.0  # re == 0 and im == 0 -> False; re == 0, im != 0 -> True
        v = re + 1j * im
    else:
        v = re
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return v.astype(sdt)


def expected_cast(x, src, dst):
    ddt = DTYPES[ID[dst]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dst == "bool":
            return x != 0
        if src.startswith("complex") and not dst.startswith("complex"):
            x = x.real
        if dst in LOWP and src not in ("float32",) + tuple(LOWP) and src != "bool":
            # PyTorch converts to the narrow float formats through float32.
            x = x.real.astype(np.float32) if np.iscomplexobj(x) else x.astype(np.float32)
        return x.astype(ddt)


@pytest.mark.parametrize("src", NAMES)
def test_cast_matrix(src):
    rng = np.random.default_rng(ID[src])
    for dst in NAMES:
        x = random_source(src, dst, rng)
        want = expected_cast(x, src, dst)
        got = icast(x, dst)
        assert got.dtype == want.dtype, (src, dst)
        if dst.startswith("complex") or dst in ("float32", "float64") or dst in LOWP:
            if np.iscomplexobj(want):
                assert_same_float(got.real.copy(), want.real.copy())
                assert_same_float(got.imag.copy(), want.imag.copy())
            else:
                assert_same_float(got, want)
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {dst}")
        # A strided source gives the same values.
        got_s = to_numpy(call("ingot_cast", strided(x[:333]), ID[dst]))
        np.testing.assert_array_equal(bits(got_s.reshape(-1).view(np.uint8)),
                                      bits(got[:333].reshape(-1).view(np.uint8)))


def test_cast_int64_to_float_rounds_once():
    # 2^53 + 1 is not a double; int64 -> f64 must round once (to even).
    x = np.array([2 ** 53 + 1, 2 ** 62 + 2 ** 39 + 1, -(2 ** 63), 2 ** 63 - 1], np.int64)
    np.testing.assert_array_equal(icast(x, "float64"), x.astype(np.float64))
    np.testing.assert_array_equal(icast(x, "float32"), x.astype(np.float32))


def test_cast_shapes_and_errors():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    t = call("ingot_cast", tensor(x), ID["float64"])
    assert t.shape == (2, 3, 4)
    np.testing.assert_array_equal(to_numpy(t), x.astype(np.float64))
    for empty in (np.zeros((0, 3), np.float32), np.float32(3.5)):
        np.testing.assert_array_equal(icast(np.asarray(empty), "int16"),
                                      np.asarray(empty).astype(np.int16))
    with pytest.raises(IngotError) as e:
        call("ingot_cast", tensor(x), 99)
    assert e.value.status == 3  # INGOT_ERR_DTYPE
    with pytest.raises(IngotError):
        call("ingot_cast", None, ID["float32"])


# ---- promotion ----
def torch_promote(a, b):
    """PyTorch's promote_types on our dtypes (c10/core/ScalarType.cpp table)."""
    if a == b:
        return a
    if "float8" in a or "float8" in b:
        return None
    if a == "bool":
        return b
    if b == "bool":
        return a
    order = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
             "float64", "complex64", "complex128"]
    ints = order[:5]
    if a in ints and b in ints:
        if {a, b} == {"uint8", "int8"}:
            return "int16"
        return max(a, b, key=ints.index)
    if a in ints:
        return b
    if b in ints:
        return a
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    cplx = {"complex64", "complex128"}
    if a in cplx or b in cplx:
        if "complex128" in (a, b) or "float64" in (a, b):
            return "complex128"
        return "complex64"
    return max(a, b, key=order.index)


# Spot values written out from PyTorch's table (torch.promote_types).
TORCH_SPOT = [("float16", "bfloat16", "float32"), ("uint8", "int8", "int16"),
              ("bool", "int32", "int32"), ("int64", "float16", "float16"),
              ("complex64", "float64", "complex128"), ("uint8", "bfloat16", "bfloat16"),
              ("int8", "uint8", "int16"), ("bfloat16", "float32", "float32"),
              ("uint8", "int64", "int64"), ("float16", "complex64", "complex64"),
              ("bool", "bool", "bool"), ("float8_e4m3fn", "float8_e4m3fn", "float8_e4m3fn"),
              ("float8_e5m2", "float8_e5m2", "float8_e5m2"), ("float8_e4m3fn", "float32", None),
              ("float8_e4m3fn", "float8_e5m2", None), ("bool", "float8_e5m2", None)]


def test_promote_all_pairs():
    for a, b, want in TORCH_SPOT:
        assert torch_promote(a, b) == want
    for a in NAMES:
        for b in NAMES:
            want = torch_promote(a, b)
            lib.ingot_clear_error()
            got = lib.ingot_promote_types(ID[a], ID[b])
            if want is None:
                assert got == -1, (a, b)
                assert lib.ingot_last_status() == 3 and "float8" in lib.ingot_last_error().decode()
            else:
                assert got == ID[want], (a, b, NAMES[got] if got >= 0 else got)
    assert lib.ingot_promote_types(-1, 0) == -1
    assert lib.ingot_promote_types(0, 14) == -1


def test_dtype_table():
    lib.ingot_dtype_name.restype = __import__("ctypes").c_char_p
    lib.ingot_dtype_from_name.argtypes = [__import__("ctypes").c_char_p]
    for i, n in enumerate(NAMES):
        assert lib.ingot_dtype_size(i) == DTYPES[i].itemsize
        assert lib.ingot_dtype_name(i).decode() == n
        assert lib.ingot_dtype_from_name(n.encode()) == i
    assert lib.ingot_dtype_from_name(b"float128") == -1
    assert lib.ingot_dtype_size(14) == 0
    cats = {"is_floating": {"float16", "bfloat16", "float32", "float64", "float8_e4m3fn",
                            "float8_e5m2"},
            "is_complex": {"complex64", "complex128"},
            "is_integral": {"uint8", "int8", "int16", "int32", "int64"},
            "is_signed": set(NAMES) - {"bool", "uint8"}}
    for fn, members in cats.items():
        f = getattr(lib, "ingot_dtype_" + fn)
        f.restype = __import__("ctypes").c_bool
        for i, n in enumerate(NAMES):
            assert f(i) == (n in members), (fn, n)


def test_scalar_converters_match_cast():
    # The exported scalar helpers agree with the COPY kernel.
    import ctypes

    rng = np.random.default_rng(9)
    x = rng.standard_normal(2000).astype(np.float32) * 100
    for name, fn, w in (("float16", "ingot_f32_to_f16", ctypes.c_uint16),
                        ("bfloat16", "ingot_f32_to_bf16", ctypes.c_uint16),
                        ("float8_e4m3fn", "ingot_f32_to_f8e4m3fn", ctypes.c_uint8),
                        ("float8_e5m2", "ingot_f32_to_f8e5m2", ctypes.c_uint8)):
        f = getattr(lib, fn)
        f.restype, f.argtypes = w, [ctypes.c_float]
        got = np.array([f(float(v)) for v in x[:500]], dtype=UINT[ctypes.sizeof(w)])
        np.testing.assert_array_equal(got, bits(icast(x[:500], name)))
