"""Creation: empty/zeros/ones/full/scalar, arange, linspace, eye, host
transfers, item, and the Philox random draws.

PyTorch semantics: arange has ceil((end - start) / step) elements and fails on
a zero step or a step of the wrong sign; linspace's integer results truncate
(torch.linspace(0, 10, 4, dtype=int64) == [0, 3, 6, 10]); full converts the
value as a cast would (through float32 for f16/bf16/f8).
Random numbers follow our documented Philox4x32-10 layout (src/core/philox.h),
checked bit for bit against an independent numpy Philox that passes the
Random123 known-answer vectors.
"""
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import numpy as np
import pytest
from ingot_ctypes import CPU, DTYPES, ID, NAMES, IngotError, call, lib, tensor, to_numpy

LOWP = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


def np_value(v, name):
    """v converted to dtype `name` as PyTorch would (lowp via float32)."""
    dt = DTYPES[ID[name]]
    a = np.array(v, np.float64)
    if name in LOWP:
        a = a.astype(np.float32)
    return a.astype(dt)


# ---- fills ----
@pytest.mark.parametrize("name", NAMES)
def test_zeros_ones_full(name):
    dt = DTYPES[ID[name]]
    for shape in [(2, 3), (7,), (0, 4), (), (70000,)]:
        z = call("ingot_zeros", len(shape), list(shape), ID[name], CPU)
        o = call("ingot_ones", len(shape), list(shape), ID[name], CPU)
        assert z.shape == shape and o.shape == shape and z.dtype == dt
        np.testing.assert_array_equal(to_numpy(z), np.zeros(shape, dt))
        np.testing.assert_array_equal(to_numpy(o), np.ones(shape, dt))
    for v in (3.75, 0.1, 100.0):
        f = call("ingot_full", 2, [3, 5], v, ID[name], CPU)
        want = np.broadcast_to(np_value(v, name), (3, 5))
        np.testing.assert_array_equal(to_numpy(f), want)
    if name not in ("bool", "uint8"):
        f = call("ingot_full", 1, [9], -2.5, ID[name], CPU)
        np.testing.assert_array_equal(to_numpy(f), np.full(9, np_value(-2.5, name)))
    s = call("ingot_scalar", 5.0, ID[name], CPU)
    assert s.shape == () and lib.ingot_numel(s.ptr) == 1
    assert lib.ingot_item(s.ptr) == float(np_value(5.0, name).real)
    like = call("ingot_full_like", s, 1.0) if "ingot_full_like" in dir(lib) else None
    del like


def test_full_special_values():
    for name in ("float32", "float64", "float16", "bfloat16", "float8_e5m2"):
        for v in (np.inf, -np.inf, -0.0):
            got = to_numpy(call("ingot_full", 1, [3], v, ID[name], CPU)).astype(np.float64)
            np.testing.assert_array_equal(got, [v] * 3)
            assert np.signbit(got[0]) == np.signbit(v)
        got = to_numpy(call("ingot_full", 1, [2], np.nan, ID[name], CPU)).astype(np.float64)
        assert np.isnan(got).all()
    # e4m3fn: 448 max, beyond -> NaN; bool: any non-zero is True.
    got = to_numpy(call("ingot_full", 1, [1], 500.0, ID["float8_e4m3fn"], CPU))
    assert np.isnan(got.astype(np.float32)).all()
    assert to_numpy(call("ingot_full", 1, [1], 0.25, ID["bool"], CPU))[0]
    c = to_numpy(call("ingot_full", 1, [2], 1.5, ID["complex64"], CPU))
    np.testing.assert_array_equal(c, [1.5 + 0j] * 2)


def test_empty_and_like():
    e = call("ingot_empty", 3, [2, 0, 5], ID["float32"], CPU)
    assert e.shape == (2, 0, 5) and lib.ingot_numel(e.ptr) == 0
    lib.ingot_empty_like.restype = ctypes.c_void_p
    lib.ingot_empty_like.argtypes = [ctypes.c_void_p]
    base = tensor(np.arange(6, dtype=np.int16).reshape(2, 3))
    from ingot_ctypes import T

    el = T(lib.ingot_empty_like(base.ptr))
    assert el.shape == (2, 3) and el.dtype == np.int16
    lib.ingot_zeros_like.restype = ctypes.c_void_p
    lib.ingot_zeros_like.argtypes = [ctypes.c_void_p]
    np.testing.assert_array_equal(to_numpy(T(lib.ingot_zeros_like(base.ptr))), np.zeros((2, 3)))
    lib.ingot_full_like.restype = ctypes.c_void_p
    lib.ingot_full_like.argtypes = [ctypes.c_void_p, ctypes.c_double]
    np.testing.assert_array_equal(to_numpy(T(lib.ingot_full_like(base.ptr, 7.9))),
                                  np.full((2, 3), 7, np.int16))
    # NULL propagation.
    lib.ingot_clear_error()
    assert not lib.ingot_full_like(None, 1.0)
    assert lib.ingot_last_status() == 1


def test_creation_errors():
    for shape in ([-1, 3], [2 ** 62, 2 ** 62], [2 ** 40, 2 ** 40, 2 ** 40]):
        with pytest.raises(IngotError) as e:
            call("ingot_zeros", len(shape), shape, ID["float32"], CPU)
        assert e.value.status == 2  # INGOT_ERR_SHAPE
    with pytest.raises(IngotError) as e:  # 2^61 int64 elements overflow the byte count
        call("ingot_empty", 1, [2 ** 61], ID["int64"], CPU)
    assert e.value.status == 2
    with pytest.raises(IngotError):
        call("ingot_empty", 9, [1] * 9, ID["float32"], CPU)
    with pytest.raises(IngotError):
        call("ingot_empty", -1, [1], ID["float32"], CPU)
    with pytest.raises(IngotError) as e:
        call("ingot_zeros", 1, [3], 42, CPU)
    assert e.value.status == 3
    with pytest.raises(IngotError) as e:  # no such device
        call("ingot_zeros", 1, [3], ID["float32"], type(CPU)(0, 5))
    assert e.value.status == 4
    with pytest.raises(IngotError) as e:
        call("ingot_zeros", 1, [3], ID["float32"], type(CPU)(3, 0))  # ext0: unregistered
    assert e.value.status == 4
    # A tensor of 8 dims is fine.
    t = call("ingot_ones", 8, [1, 2, 1, 2, 1, 2, 1, 2], ID["int8"], CPU)
    assert lib.ingot_numel(t.ptr) == 16


# ---- arange / linspace / eye ----
def test_arange():
    cases = [(0, 10, 3, "int64"), (0, 10, 1, "int32"), (5, -5, -2, "int64"),
             (1, 2.5, 0.5, "float32"),
             (-3, 3, 0.7, "float64"), (10, 0, -1.5, "float32"), (0, 0, 1, "int64"),
             (0, 1000, 1, "int16"), (0, 100001, 1, "float32"), (2, 3, 0.1, "float64"),
             (0, 16, 1, "float16"), (0, 8, 0.5, "bfloat16"), (0, 6, 1, "uint8"),
             (0.5, 5, 1.5, "int64")]
    for start, end, step, name in cases:
        got = to_numpy(call("ingot_arange", float(start), float(end), float(step), ID[name], CPU))
        n = int(np.ceil((end - start) / step))
        assert got.shape == (n,), (start, end, step)
        ref = start + np.arange(n, dtype=np.float64) * step
        if name in ("float32", "float64", "float16", "bfloat16"):
            np.testing.assert_allclose(got.astype(np.float64), ref, rtol=1e-6 if name != "bfloat16"
                                       else 1e-2, atol=1e-12)
        else:
            np.testing.assert_array_equal(got, np.trunc(ref).astype(got.dtype))
    np.testing.assert_array_equal(
        to_numpy(call("ingot_arange", 5.0, -5.0, -2.0, ID["int64"], CPU)), [5, 3, 1, -1, -3])
    np.testing.assert_array_equal(
        to_numpy(call("ingot_arange", 0.5, 5.0, 1.5, ID["int64"], CPU)), [0, 2, 3])
    # Large int64 values stay exact (no trip through double).
    big = float(2 ** 53)
    got = to_numpy(call("ingot_arange", big, big + 6, 2.0, ID["int64"], CPU))
    np.testing.assert_array_equal(got, [2 ** 53, 2 ** 53 + 2, 2 ** 53 + 4])


def test_arange_errors():
    bad = [(0, 10, 0), (0, 10, -1), (10, 0, 1), (0, np.inf, 1), (np.nan, 1, 1), (0, 1e300, 1e-300)]
    for start, end, step in bad:
        with pytest.raises(IngotError) as e:
            call("ingot_arange", float(start), float(end), float(step), ID["float32"], CPU)
        assert e.value.status == 1, (start, end, step)
    with pytest.raises(IngotError, match="nonzero"):
        call("ingot_arange", 0.0, 1.0, 0.0, ID["float32"], CPU)


def test_linspace():
    for start, end, steps, name in [(0, 1, 5, "float32"), (-2, 7, 33, "float64"),
                                    (3, -3, 7, "float32"), (0, 1, 100001, "float32"),
                                    (1, 1, 4, "float64"), (0, 1, 2, "float16")]:
        got = to_numpy(call("ingot_linspace", float(start), float(end), steps, ID[name], CPU))
        want = np.linspace(start, end, steps)
        tol = 1e-3 if name == "float16" else 1e-6
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)
        assert got[0] == np.float32(start) and got[-1] == np.float32(end)  # both ends exact
    assert to_numpy(call("ingot_linspace", 0.0, 1.0, 0, ID["float32"], CPU)).shape == (0,)
    np.testing.assert_array_equal(
        to_numpy(call("ingot_linspace", 3.5, 9.0, 1, ID["float32"], CPU)), [3.5])
    np.testing.assert_array_equal(
        to_numpy(call("ingot_linspace", 0.0, 10.0, 4, ID["int64"], CPU)), [0, 3, 6, 10])
    np.testing.assert_array_equal(
        to_numpy(call("ingot_linspace", 10.0, 0.0, 4, ID["int32"], CPU)), [10, 6, 3, 0])
    with pytest.raises(IngotError):
        call("ingot_linspace", 0.0, 1.0, -1, ID["float32"], CPU)


@pytest.mark.parametrize("name", NAMES)
def test_eye(name):
    dt = DTYPES[ID[name]]
    for n, m in [(3, -1), (2, 5), (5, 2), (0, -1), (1, 1), (4, 0), (300, 301)]:
        got = to_numpy(call("ingot_eye", n, m, ID[name], CPU))
        np.testing.assert_array_equal(got, np.eye(n, n if m < 0 else m, dtype=dt))
    with pytest.raises(IngotError):
        call("ingot_eye", -1, 2, ID[name], CPU)


# ---- host transfer ----
@pytest.mark.parametrize("name", NAMES)
def test_host_roundtrip(name):
    dt = DTYPES[ID[name]]
    rng = np.random.default_rng(ID[name])
    for shape in [(3, 4), (), (0,), (2, 1, 3, 1, 2), (1000,)]:
        n = int(np.prod(shape))
        if name == "bool":
            arr = rng.integers(0, 2, n).astype(bool).reshape(shape)
        else:  # random bytes: NaN payloads and all must survive
            arr = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape)
        t = tensor(arr)
        assert t.shape == shape and t.dtype == dt and lib.ingot_is_contiguous(t.ptr)
        back = to_numpy(t)
        assert back.tobytes() == arr.tobytes()


def test_to_host_wrong_size_and_item():
    t = tensor(np.arange(6, dtype=np.float32))
    buf = (ctypes.c_char * 64)()
    for nbytes in (0, 23, 25, 64):
        lib.ingot_clear_error()
        st = lib.ingot_to_host(t.ptr, buf, nbytes)
        assert st == 1 and "24" in lib.ingot_last_error().decode()
    assert lib.ingot_to_host(t.ptr, buf, 24) == 0
    np.testing.assert_array_equal(np.frombuffer(bytes(buf)[:24], np.float32), np.arange(6))
    lib.ingot_clear_error()
    assert lib.ingot_to_host(t.ptr, None, 24) == 1
    lib.ingot_clear_error()
    assert lib.ingot_to_host(None, buf, 24) != 0
    # from_host with NULL data fails cleanly.
    lib.ingot_clear_error()
    assert not lib.ingot_from_host(None, 1, (ctypes.c_int64 * 1)(3), ID["float32"], CPU)
    assert lib.ingot_last_status() == 1
    # item
    for name, v in [("float32", 2.5), ("int64", -7), ("bool", 1), ("uint8", 200),
                    ("float16", 0.333251953125), ("bfloat16", -3.0), ("float64", 1e300),
                    ("float8_e4m3fn", 448.0), ("int32", 2 ** 31 - 1)]:
        assert lib.ingot_item(tensor(np.array(v).astype(DTYPES[ID[name]])).ptr) == v
    assert lib.ingot_item(tensor(np.array([[1.5 - 4j]], np.complex64)).ptr) == 1.5
    assert lib.ingot_item(tensor(np.array(2 ** 62 + 1, np.int64)).ptr) == float(2 ** 62)
    lib.ingot_clear_error()
    assert np.isnan(lib.ingot_item(t.ptr))
    assert lib.ingot_last_status() == 2
    assert np.isnan(lib.ingot_item(tensor(np.zeros(0, np.float32)).ptr))


# ---- random: an independent Philox4x32-10 ----
M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
MASK = np.uint64(0xFFFFFFFF)


def philox(c0, c1, c2, c3, k0, k1):
    """Random123 philox4x32_10 on numpy arrays (uint64 holding 32-bit words)."""
    c = [np.asarray(x, np.uint64) & MASK for x in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for _ in range(10):
        p0 = np.uint64(M0) * c[0]
        p1 = np.uint64(M1) * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & MASK
        hi1, lo1 = p1 >> np.uint64(32), p1 & MASK
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0 = (k0 + np.uint64(W0)) & MASK
        k1 = (k1 + np.uint64(W1)) & MASK
    return np.stack(c, axis=-1).astype(np.uint32)


def blocks(seed, first, count):
    """Words of counter blocks first..first+count-1 (c0,c1 = block, c2=c3=0, key=seed)."""
    b = np.arange(first, first + count, dtype=np.uint64)
    return philox(b & MASK, b >> np.uint64(32), 0, 0, seed & 0xFFFFFFFF, seed >> 32)


def test_philox_reference_kat():
    np.testing.assert_array_equal(philox(0, 0, 0, 0, 0, 0),
                                  [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8])
    f = 0xFFFFFFFF
    np.testing.assert_array_equal(philox(f, f, f, f, f, f),
                                  [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD])


def test_rand_known_answer():
    call("ingot_manual_seed", 0)
    got = to_numpy(call("ingot_rand", 1, [4], ID["float32"], CPU))
    words = np.array([0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8], np.uint32)
    np.testing.assert_array_equal(got, (words >> 8).astype(np.float32) * np.float32(2.0 ** -24))


def uniform_ref(seed, offset, n, bits):
    w = blocks(seed, offset, (n + 3) // 4).reshape(-1)[:n]
    return (w >> np.uint32(32 - bits)).astype(np.float64) * 2.0 ** -bits


def test_rand_stream_bit_exact():
    seed = 0x123456789ABCDEF0
    call("ingot_manual_seed", seed)
    off = 0
    for name, bits, n in [("float32", 24, 10), ("float16", 11, 1001), ("bfloat16", 8, 7),
                          ("float64", 32, 70001), ("float32", 24, 5)]:
        got = to_numpy(call("ingot_rand", 1, [n], ID[name], CPU)).astype(np.float64)
        np.testing.assert_array_equal(got, uniform_ref(seed, off, n, bits), err_msg=name)
        off += (n + 3) // 4  # every draw reserves whole blocks
    # complex: two words per element (re, im).
    got = to_numpy(call("ingot_rand", 1, [3], ID["complex64"], CPU))
    ref = uniform_ref(seed, off, 6, 24)
    np.testing.assert_array_equal(got.real, ref[0::2])
    np.testing.assert_array_equal(got.imag, ref[1::2])


def test_randn_and_randint_stream():
    seed = 77
    call("ingot_manual_seed", seed)
    n = 17 * 241
    got = to_numpy(call("ingot_randn", 2, [17, 241], ID["float32"], CPU)).reshape(-1)
    w = blocks(seed, 0, (n + 3) // 4).astype(np.float64)  # [blocks, 4]
    u1 = (w[:, 0::2] + 1.0) * 2.0 ** -32
    u2 = w[:, 1::2] * 2.0 ** -32
    r, th = np.sqrt(-2 * np.log(u1)), 2 * np.pi * u2
    ref = np.stack([r * np.cos(th), r * np.sin(th)], axis=-1).reshape(-1)[:n]
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    off = (n + 3) // 4
    got = to_numpy(call("ingot_randint", -5, 1000, 1, [9], ID["int64"], CPU))
    w = blocks(seed, off, 5).astype(np.uint64)
    x = (w[:, 0::2] | (w[:, 1::2] << np.uint64(32))).reshape(-1)[:9]
    np.testing.assert_array_equal(got, (x % np.uint64(1005)).astype(np.int64) - 5)


def test_manual_seed_reproducible():
    draws = []
    for _ in range(2):
        call("ingot_manual_seed", 1234)
        a = to_numpy(call("ingot_rand", 1, [100], ID["float32"], CPU))
        b = to_numpy(call("ingot_randn", 1, [100], ID["float64"], CPU))
        c = to_numpy(call("ingot_randint", 0, 10, 1, [100], ID["int32"], CPU))
        draws.append((a, b, c))
    for x, y in zip(*draws):
        np.testing.assert_array_equal(x, y)
    # Consecutive draws differ; another seed differs.
    call("ingot_manual_seed", 1234)
    a1 = to_numpy(call("ingot_rand", 1, [100], ID["float32"], CPU))
    a2 = to_numpy(call("ingot_rand", 1, [100], ID["float32"], CPU))
    call("ingot_manual_seed", 1235)
    a3 = to_numpy(call("ingot_rand", 1, [100], ID["float32"], CPU))
    assert not np.array_equal(a1, a2) and not np.array_equal(a1, a3)


def test_random_statistics():
    call("ingot_manual_seed", 42)
    n = 1_000_000
    u = to_numpy(call("ingot_rand", 1, [n], ID["float32"], CPU)).astype(np.float64)
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 3e-3 and abs(u.var() - 1 / 12) < 2e-3
    hist = np.histogram(u, bins=10, range=(0, 1))[0]
    assert np.all(np.abs(hist - n / 10) < 5 * np.sqrt(n / 10))
    # Low precision: u = k / 2^bits (mantissa bits), so the mean is 1/2 - 2^-(bits+1).
    for name, b in (("bfloat16", 8), ("float16", 11), ("float8_e4m3fn", 4), ("float8_e5m2", 3)):
        v = to_numpy(call("ingot_rand", 1, [20000], ID[name], CPU)).astype(np.float64)
        assert v.min() >= 0 and v.max() < 1, name
        assert abs(v.mean() - (0.5 - 2.0 ** -(b + 1))) < 0.01, name
        assert b > 8 or len(np.unique(v)) == 2 ** b, name
    z = to_numpy(call("ingot_randn", 1, [n], ID["float32"], CPU)).astype(np.float64)
    assert abs(z.mean()) < 5e-3 and abs(z.var() - 1) < 5e-3
    assert abs(np.mean(z ** 3)) < 0.02 and abs(np.mean(z ** 4) - 3) < 0.05
    zc = to_numpy(call("ingot_randn", 1, [200000], ID["complex64"], CPU))
    assert abs(np.mean(np.abs(zc) ** 2) - 1) < 0.02  # unit total variance
    ri = to_numpy(call("ingot_randint", -3, 7, 1, [100000], ID["int16"], CPU))
    assert ri.dtype == np.int16 and ri.min() == -3 and ri.max() == 6
    assert set(np.unique(ri)) == set(range(-3, 7))
    assert np.all(np.abs(np.bincount(ri + 3) - 10000) < 500)
    big = to_numpy(call("ingot_randint", -(2 ** 62), 2 ** 62, 1, [1000], ID["int64"], CPU))
    assert big.min() >= -(2 ** 62) and big.max() < 2 ** 62 and big.std() > 2 ** 60
    rf = to_numpy(call("ingot_randint", 0, 3, 2, [50, 60], ID["float32"], CPU))
    assert set(np.unique(rf)) == {0.0, 1.0, 2.0}


def test_random_errors():
    for fn in ("ingot_rand", "ingot_randn"):
        for name in ("int32", "bool", "uint8", "int64"):
            with pytest.raises(IngotError) as e:
                call(fn, 1, [4], ID[name], CPU)
            assert e.value.status == 3
    with pytest.raises(IngotError) as e:
        call("ingot_randint", 5, 5, 1, [4], ID["int64"], CPU)
    assert e.value.status == 1
    with pytest.raises(IngotError):
        call("ingot_randint", 5, 1, 1, [4], ID["int64"], CPU)
    for name in ("bool", "complex64"):
        with pytest.raises(IngotError):
            call("ingot_randint", 0, 2, 1, [4], ID[name], CPU)
    with pytest.raises(IngotError):
        call("ingot_rand", 1, [-4], ID["float32"], CPU)
    # Empty and 0-dim draws work.
    assert call("ingot_rand", 1, [0], ID["float32"], CPU).shape == (0,)
    assert 0 <= lib.ingot_item(call("ingot_rand", 0, [], ID["float32"], CPU).ptr) < 1
