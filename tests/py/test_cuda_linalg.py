"""ingot_linalg_* on cuda:0 against numpy/scipy with the checks and
tolerances of the CPU tests (linalg_checks.py): every function x dtype,
batches, transposed inputs, singular / non-finite inputs, the adversarial
SVD cases; plus CUDA-only sizes (the batched small-inverse kernel up to
32x32, large factorizations). Skips without a CUDA device."""
import zlib

import numpy as np
import pytest
import scipy.linalg as sla
from cuda_diff import CUDA, needs_cuda, to_device
from ingot_ctypes import IngotError, tensor, transposed
from linalg_checks import (ALL_CHECKS, DTYPES, LA_NAMES, QUIET, adj, adversarial, check_svd, close,
                           check_svd_adversarial, check_svd_nonfinite, la, randm, svd_ok, tol,
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


@pytest.mark.parametrize("dt", DTYPES, ids=[LA_NAMES[d] for d in DTYPES])
def test_cuda_inverse_failure_word(dt):
    """The small inverse names the lowest failing member through the device's
    failure word (no per-member status read): several failing members, a
    failure in the last member, and clean calls after failing ones (a stale
    failure of an earlier call must not be reported)."""
    rng = np.random.default_rng(7)
    a = well_conditioned(rng, (1000, 8, 8), dt)
    want = np.linalg.inv(a)
    for bad in ([999], [5, 700, 3], [0]):
        b = a.copy()
        b[bad] = 0
        with pytest.raises(Exception, match=f"batch member {min(bad)}:"):
            la("inv", mk(b))
        np.testing.assert_allclose(la("inv", mk(a)), want, rtol=0, atol=tol(dt) * 10)
    b = a.copy()
    b[17, :, 3] = 0  # zero column: the first zero pivot is step 4
    with pytest.raises(Exception, match="batch member 17: the diagonal element 4 of U"):
        la("inv", mk(b))


# auto is what every other SVD test runs; gesvdp takes gesvd and qdwh
# gesvdj for complex inputs (the gesvd and gesvdj cases cover them).
SVD_CASES = [(a, d) for a in ("gesvd", "gesvdj") for d in DTYPES] + \
    [(a, d) for a in ("gesvdp", "qdwh") for d in DTYPES if np.dtype(d).kind == "f"]


@pytest.mark.parametrize("algo,dt", SVD_CASES, ids=[f"{a}-{LA_NAMES[d]}" for a, d in SVD_CASES])
def test_cuda_svd_algo(algo, dt, monkeypatch):
    """Each SVD algorithm forced by INGOT_SVD_ALGO on the shapes and the
    adversarial set of the CPU tests (tiny singular values, x1e+-30 scaling,
    rank-deficient, zero, tall/wide, full_matrices): where gesvdp or gesvdj
    cannot be trusted, the member falls back to gesvd; the result must be
    right either way. Plus sizes above the auto threshold (128)."""
    monkeypatch.setenv("INGOT_SVD_ALGO", algo)
    rng = np.random.default_rng(zlib.crc32((algo + LA_NAMES[dt]).encode()))
    check_svd(rng, dt, mk, mk_t)
    check_svd_adversarial(rng, dt, mk, mk_t)
    check_svd_nonfinite(rng, dt, mk, mk_t)
    for shape in [(2, 160, 130), (130, 170), (150, 150)]:
        a = randm(rng, shape, dt)
        for full in (False, True):
            svd_ok(a, dt, full, mk)
        svd_ok(a, dt, False, mk_t)
    # graded and rank-deficient at a size where auto takes gesvdp
    for name, a in adversarial_large(rng, dt, 160):
        try:
            svd_ok(a, dt, False, mk)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def adversarial_large(rng, dt, n):
    real = np.dtype(dt).kind == "f"
    lo = 1e-30 if np.dtype(dt) in (np.float64, np.complex128) else 1e-6
    u, _ = np.linalg.qr(randm(rng, (n, n), np.float64 if real else np.complex128))
    v, _ = np.linalg.qr(randm(rng, (n, n), np.float64 if real else np.complex128))
    graded = (u * np.logspace(0, np.log10(lo), n)) @ adj(v)
    rank3 = randm(rng, (n, 3), dt) @ randm(rng, (3, n), dt)
    return [("graded", graded.astype(dt)), ("rank3", rank3), ("zero", np.zeros((n, n), dt))]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("algo", ["gesvdj"])
def test_cuda_svd_fast_path_kept(algo, dt, monkeypatch, capfd):
    """On a random (well-conditioned enough) matrix the fast algorithm's
    result is kept: INGOT_SVD_VERBOSE prints nothing (no gesvd fallback).
    (gesvdp is not: on the H200 it reports h_err_sigma near s_max on random
    input, so its members fall back; the algo test checks its results.)"""
    monkeypatch.setenv("INGOT_SVD_ALGO", algo)
    monkeypatch.setenv("INGOT_SVD_VERBOSE", "1")
    a = randm(np.random.default_rng(3), (256, 256), dt)
    svd_ok(a, dt, False, mk)
    err = capfd.readouterr().err
    assert "ingot svd:" not in err, err


def test_cuda_svd_algo_unknown(monkeypatch):
    monkeypatch.setenv("INGOT_SVD_ALGO", "qr")
    with pytest.raises(IngotError, match="INGOT_SVD_ALGO=qr"):
        la("svdvals", mk(np.eye(3, dtype=np.float32)))


@pytest.mark.parametrize("dt", DTYPES, ids=[LA_NAMES[d] for d in DTYPES])
@pytest.mark.parametrize("shape", [(2, 3, 70, 45), (45, 100), (33, 33), (129, 64)])
def test_cuda_transposing_copies_cross_tiles(dt, shape):
    """QR (reduced and complete), LU and SVD on sizes that cross the 32 x 32
    tiles of the row-/column-major copies (ragged edges, two batch dims,
    tall and wide), contiguous and transposed inputs, against numpy/scipy."""
    rng = np.random.default_rng(sum(shape))
    a = randm(rng, shape, dt)
    m, n = shape[-2:]
    k = min(m, n)
    cplx = np.iscomplexobj(a)
    for t in (mk(a), mk_t(a)):
        for mode, qc in ((0, k), (1, m)):
            q, r = la("qr", t, mode, nout=1)
            assert q.shape == shape[:-2] + (m, qc) and r.shape == shape[:-2] + (qc, n)
            close(q @ r, a, dt, scale=float(np.abs(a).max()) * k)
            close(adj(q) @ q, np.broadcast_to(np.eye(qc), q.shape[:-2] + (qc, qc)), dt, scale=k)
            np.testing.assert_array_equal(np.tril(r, -1), 0)
        lu, piv = la("lu_factor", t, nout=1)
        for idx in np.ndindex(shape[:-2]):
            rlu, rpiv = sla.lu_factor(a[idx].astype(np.complex128 if cplx else np.float64))
            np.testing.assert_array_equal(piv[idx], rpiv[:k] + 1)
            close(lu[idx], rlu.astype(dt), dt, scale=float(np.abs(rlu).max()) * k)
    for full in (False, True):
        svd_ok(a, dt, full, mk)


@pytest.mark.parametrize("dt", DTYPES, ids=[LA_NAMES[d] for d in DTYPES])
@pytest.mark.parametrize("algo", ["auto", "gesvdj", "gesvdp"])
def test_cuda_svd_batch_of_adversarial_members(algo, dt, monkeypatch):
    """The adversarial matrices of one shape as members of one batch (batched
    Jacobi under auto/gesvdj): each member scaled by its own power of two,
    members the fast algorithm cannot be trusted on recomputed by gesvd, the
    rest kept; with random members in between."""
    monkeypatch.setenv("INGOT_SVD_ALGO", algo)
    rng = np.random.default_rng(zlib.crc32(("batch" + algo + LA_NAMES[dt]).encode()))
    cases = adversarial(rng, dt)
    for shape in [(8, 8), (12, 5), (5, 12)]:
        members = []
        for _, a in cases:
            if a.shape == shape:
                members += [a, randm(rng, shape, dt)]
        batch = np.stack(members)
        for full in (False, True):
            svd_ok(batch, dt, full, mk)
        svd_ok(batch, dt, False, mk_t)
