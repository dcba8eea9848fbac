"""The CUDA kernels that exist so far (COPY with casts, FILL, the generators)
against the CPU backend on the same inputs. Skipped without a CUDA device."""
import numpy as np
import pytest

from ingot_ctypes import CPU, DTYPES, ID, NAMES, Device, call, lib, tensor, to_numpy

lib.ingot_device_count.argtypes = [__import__("ctypes").c_int]
HAVE_CUDA = lib.ingot_device_count(1) > 0
if not HAVE_CUDA:
    print("skipped: no CUDA device")
pytestmark = pytest.mark.skipif(not HAVE_CUDA, reason="skipped: no CUDA device")
CUDA = Device(1, 0)


def same(a, b):
    """Bit-equal, except that NaNs only need to be NaN on both sides."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    if a.dtype.kind in "fc" or a.dtype.name.startswith(("float8", "bfloat")):
        af, bf = a.astype(np.complex128), b.astype(np.complex128)
        nan = np.isnan(af) & np.isnan(bf)
        assert np.array_equal(af[~nan], bf[~nan])
    else:
        assert np.array_equal(a, b)


@pytest.mark.parametrize("src", NAMES)
def test_cast_matches_cpu(src):
    rng = np.random.default_rng(ID[src])
    vals = rng.standard_normal((37, 129)) * 300
    vals[0, :8] = [np.nan, np.inf, -np.inf, -0.0, 448, 480, 1e-9, 65504]
    x = vals.astype(np.float64)
    if np.dtype(DTYPES[ID[src]]).kind in "iub":
        x = np.clip(np.nan_to_num(x), -100, 100)
    host = tensor(x.astype(DTYPES[ID[src]]))
    dev = call("ingot_to", host, CUDA)
    for dst in NAMES:
        a = to_numpy(call("ingot_cast", host, ID[dst]))
        # strided source on the device: a transposed view
        b = to_numpy(call("ingot_cast", dev, ID[dst]))
        same(a, b)
        at = to_numpy(call("ingot_cast", call("ingot_transpose", host, 0, 1), ID[dst]))
        bt = to_numpy(call("ingot_cast", call("ingot_transpose", dev, 0, 1), ID[dst]))
        same(at, bt)


@pytest.mark.parametrize("dt", NAMES)
def test_generators_match_cpu(dt):
    for fn, args in [("ingot_rand", None), ("ingot_randn", None), ("ingot_randint", (-5, 1000))]:
        if fn != "ingot_randint" and np.dtype(DTYPES[ID[dt]]).kind in "iub":
            continue
        if fn == "ingot_randint" and (dt == "bool" or dt.startswith("complex")):
            continue
        outs = []
        for dev in (CPU, CUDA):
            call("ingot_manual_seed", 1234)
            if args:
                outs.append(to_numpy(call(fn, args[0], args[1], 2, [33, 1001], ID[dt], dev)))
            else:
                outs.append(to_numpy(call(fn, 2, [33, 1001], ID[dt], dev)))
        if fn == "ingot_randn":  # libm and CUDA's log/cos may differ in the last bit of a double
            np.testing.assert_allclose(outs[0].astype(np.complex128), outs[1].astype(np.complex128),
                                       rtol=1e-2 if dt.startswith(("float8", "bfloat", "float16")) else 1e-6,
                                       atol=1e-2 if dt.startswith(("float8", "bfloat", "float16")) else 1e-6)
        else:
            same(outs[0], outs[1])
    if not dt.startswith(("float8", "bool")):
        same(to_numpy(call("ingot_arange", -3.0, 50.0, 1.0, ID[dt], CPU)),
             to_numpy(call("ingot_arange", -3.0, 50.0, 1.0, ID[dt], CUDA)))
        same(to_numpy(call("ingot_linspace", -3.0, 5.0, 101, ID[dt], CPU)),
             to_numpy(call("ingot_linspace", -3.0, 5.0, 101, ID[dt], CUDA)))
    same(to_numpy(call("ingot_eye", 7, 9, ID[dt], CPU)), to_numpy(call("ingot_eye", 7, 9, ID[dt], CUDA)))
    same(to_numpy(call("ingot_full", 2, [5, 3], 2.5, ID[dt], CPU)),
         to_numpy(call("ingot_full", 2, [5, 3], 2.5, ID[dt], CUDA)))


def test_large_copy_over_2_31_elements():
    # 2^31 + 5 uint8 elements: 64-bit indexing in the COPY kernel (strided path)
    n = (1 << 31) + 5
    x = call("ingot_full", 1, [n], 3.0, ID["uint8"], CUDA)
    y = call("ingot_cast", x, ID["int8"])
    tail = call("ingot_slice", y, 0, n - 4, n, 1)
    assert to_numpy(tail).tolist() == [3, 3, 3, 3]
