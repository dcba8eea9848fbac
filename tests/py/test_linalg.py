"""ingot_linalg_* on the CPU against numpy/scipy: every function x dtype
(f32, f64, c64, c128), batches, broadcast batch dims, transposed (strided)
inputs, empty matrices, singular and non-finite inputs and the adversarial
SVD cases (linalg_checks.py holds the checks and the tolerances)."""
import zlib

import numpy as np
import pytest
from ingot_ctypes import IngotError, tensor, transposed
from linalg_checks import ALL_CHECKS, DTYPES, LA_NAMES, QUIET, la, randm

pytestmark = pytest.mark.filterwarnings(QUIET)


def mk(x):
    return tensor(x)


def mk_t(x):
    return transposed(x) if np.ndim(x) >= 2 else tensor(x)


@pytest.mark.parametrize("dt", DTYPES, ids=[LA_NAMES[d] for d in DTYPES])
@pytest.mark.parametrize("check", ALL_CHECKS, ids=[c.__name__[6:] for c in ALL_CHECKS])
def test_linalg(check, dt):
    check(np.random.default_rng(zlib.crc32((check.__name__ + LA_NAMES[dt]).encode())), dt, mk, mk_t)


@pytest.mark.parametrize("name,args", [("inv", ()), ("svdvals", ()), ("det", ()),
                                       ("cholesky", (False,)), ("qr", (0,))])
def test_bad_inputs(name, args):
    for x, what in [(np.ones((3, 3), np.int64), "float32, float64"),
                    (np.ones(3, np.float32), "at least 2 dimensions"),
                    (np.ones((2, 3), np.float32), "square")]:
        if what == "square" and name in ("svdvals", "qr"):
            continue
        with pytest.raises(IngotError, match=what):
            la(name, tensor(x), *args, nout=1 if name == "qr" else 0)


def test_shape_mismatch_messages():
    a = tensor(np.eye(3))
    with pytest.raises(IngotError, match="solve: incompatible shapes"):
        la("solve", a, tensor(np.ones((4, 2))), True)
    with pytest.raises(IngotError, match="one dtype"):
        la("solve", a, tensor(np.ones((3, 2), np.float32)), True)
    with pytest.raises(IngotError, match="unknown ord"):
        la("matrix_norm", a, "3", False)


def test_big_batch_of_small_inverses():
    """The batched small-matrix path (one member per thread)."""
    rng = np.random.default_rng(5)
    a = randm(rng, (1000, 8, 8), np.float32) * 0.1 + np.eye(8, dtype=np.float32)
    got = la("inv", tensor(a))
    np.testing.assert_allclose(got, np.linalg.inv(a), rtol=0, atol=1e-4)
