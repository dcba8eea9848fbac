import numpy as np
from ingot_ctypes import call, tensor, to_numpy, strided, transposed, CPU, ID


def test_roundtrip_and_cast():
    a = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    t = tensor(a)
    np.testing.assert_array_equal(to_numpy(t), a)
    np.testing.assert_array_equal(to_numpy(strided(a)), a)
    np.testing.assert_array_equal(to_numpy(transposed(a)), a)
    c = call("ingot_cast", transposed(a), ID["float64"])
    np.testing.assert_array_equal(to_numpy(c), a.astype(np.float64))


def test_full_arange():
    t = call("ingot_full", 2, [2, 3], 2.5, ID["float32"], CPU)
    np.testing.assert_array_equal(to_numpy(t), np.full((2, 3), 2.5, np.float32))
    r = call("ingot_arange", 0.0, 10.0, 3.0, ID["int64"], CPU)
    np.testing.assert_array_equal(to_numpy(r), np.arange(0, 10, 3))
