"""ingot_linalg_* on cuda:0 against numpy/scipy with the checks and
tolerances of the CPU tests (linalg_checks.py): every function x dtype,
batches, transposed inputs, singular / non-finite inputs, the adversarial
SVD cases; plus CUDA-only sizes (the batched small-inverse kernel up to
32x32, large factorizations). Skips without a CUDA device."""
import zlib

import numpy as np
import pytest
from cuda_diff import CUDA, needs_cuda, to_device
from ingot_ctypes import tensor, transposed
from linalg_checks import (ALL_CHECKS, DTYPES, LA_NAMES, QUIET, la, randm, tol,
                           well_conditioned)

pytestmark = [needs_cuda, pytest.mark.filterwarnings(QUIET)]


def mk(x):
    return tensor(x, device=CUDA)


def mk_t(x):
    return to_device(transposed(x)) if np.ndim(x) >= 2 else mk(x)


@pytest.mark.parametrize("dt", DTYPES, ids=[LA_NAMES[d] for d in DTYPES])
@pytest.mark.parametrize("check", ALL_CHECKS, ids=[c.__name__[6:] for c in ALL_CHECKS])
def test_cuda_linalg(check, dt):
    check(np.random.default_rng(zlib.crc32((check.__name__ + LA_NAMES[dt]).encode())), dt, mk, mk_t)


@pytest.mark.parametrize("dt", DTYPES, ids=[LA_NAMES[d] for d in DTYPES])
@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 16, 31, 32, 33])
def test_cuda_small_inverse_batches(dt, n):
    rng = np.random.default_rng(n)
    a = well_conditioned(rng, (513, n, n), dt)
    got = la("inv", mk_t(a))
    np.testing.assert_allclose(got, np.linalg.inv(a), rtol=0, atol=tol(dt) * 10)
    a[300] = 0  # singular member: named in the error
    with pytest.raises(Exception, match="batch member 300"):
        la("inv", mk(a))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_cuda_large(dt):
    rng = np.random.default_rng(1)
    a = well_conditioned(rng, (700, 700), dt)
    np.testing.assert_allclose(la("inv", mk(a)) @ a, np.eye(700), atol=tol(dt) * 50)
    b = randm(rng, (700, 9), dt)
    np.testing.assert_allclose(la("solve", mk(a), mk(b), True), np.linalg.solve(a, b),
                               atol=tol(dt) * 50)
    s = la("svdvals", mk(a))
    np.testing.assert_allclose(s, np.linalg.svd(a.astype(np.float64), compute_uv=False),
                               rtol=0, atol=tol(dt) * 50 * s[0])
