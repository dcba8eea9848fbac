"""The SVD by QDWH polar decomposition + eigh (src/core/linalg_svd_qdwh.c),
forced with INGOT_SVD_ALGO=qdwh, on the CPU and on cuda:0 (one code: it is
composed of ops), against numpy in f64 with the tolerances of
linalg_checks.svd_ok (reconstruction, orthonormality of U and V, singular
values). INGOT_SVD_VERBOSE=1 prints one line per QDWH call; the tests
assert that QDWH's own result was kept (so a fallback cannot pass for it),
except where it must decline (non-finite input) or may fall back (TF32).
Plus, on CUDA, which inputs `auto` sends to QDWH."""
import ctypes
import re

import numpy as np
import pytest
from cuda_diff import CUDA, needs_cuda, to_device
from ingot_ctypes import lib, tensor, transposed
from linalg_checks import QUIET, adversarial, check_svd_nonfinite, la, randm, svd_ok

pytestmark = pytest.mark.filterwarnings(QUIET)

REAL = [np.float32, np.float64]
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


def makers(device):
    if device == "cpu":
        return tensor, lambda x: transposed(x)
    return (lambda x: tensor(x, device=CUDA)), (lambda x: to_device(transposed(x)))


def qdwh_lines(capfd):
    return [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("ingot svd: qdwh")]


def assert_all_kept(capfd, calls):
    lines = qdwh_lines(capfd)
    assert len(lines) == calls, lines
    bad = [ln for ln in lines if not ln.endswith(": kept")]
    assert not bad, bad


@pytest.fixture
def forced(monkeypatch):
    monkeypatch.setenv("INGOT_SVD_ALGO", "qdwh")
    monkeypatch.setenv("INGOT_SVD_VERBOSE", "1")


def ill_conditioned(rng, dt, m, n):
    """Graded spectra down to 1e-6 and 1e-30, rank 3, zero, and the flat
    spectra of an orthonormal matrix and of the identity (one singular
    value repeated): m x n."""
    k = min(m, n)
    u, _ = np.linalg.qr(rng.standard_normal((m, k)))
    v, _ = np.linalg.qr(rng.standard_normal((n, k)))
    cases = [(f"graded{lo:g}", ((u * np.logspace(0, np.log10(lo), k)) @ v.T).astype(dt))
             for lo in (1e-6, 1e-30)]
    cases.append(("rank3", randm(rng, (m, 3), dt) @ randm(rng, (3, n), dt)))
    cases.append(("zero", np.zeros((m, n), dt)))
    cases.append(("orthonormal", (u @ v.T).astype(dt)))
    cases.append(("identity", np.eye(m, n, dtype=dt)))
    return cases


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", REAL, ids=["float32", "float64"])
def test_qdwh_shapes(dt, device, forced, capfd):
    """Square, tall, wide (run as the transpose), batched and strided inputs,
    economy and full U / Vh."""
    mk, mk_t = makers(device)
    rng = np.random.default_rng(11)
    calls = 0
    for shape in [(40, 40), (64, 37), (37, 64), (3, 24, 24), (2, 30, 19), (1, 1), (5, 1)]:
        a = randm(rng, shape, dt)
        for full in (False, True):
            svd_ok(a, dt, full, mk)
            svd_ok(a, dt, full, mk_t)
            calls += 4  # svd and svdvals each
    assert_all_kept(capfd, calls)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", REAL, ids=["float32", "float64"])
def test_qdwh_adversarial(dt, device, forced, capfd):
    """Tiny singular values (graded to 1e-6 / 1e-30), rank-deficient, zero and
    one-entry matrices (U completed to an orthonormal set), inputs scaled by
    1e+-30: QDWH keeps its own result on every one."""
    mk, _ = makers(device)
    rng = np.random.default_rng(12)
    cases = adversarial(rng, dt) + ill_conditioned(rng, dt, 64, 64) + \
        ill_conditioned(rng, dt, 60, 45) + ill_conditioned(rng, dt, 45, 60)
    for name, a in cases:
        for full in (False, True):
            try:
                svd_ok(a, dt, full, mk)
            except AssertionError as e:
                raise AssertionError(f"{name} {a.shape} full={full}: {e}") from None
    assert_all_kept(capfd, 4 * len(cases))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", REAL, ids=["float32", "float64"])
def test_qdwh_batch_of_adversarial_members(dt, device, forced, capfd):
    """Members of one batch at 1e30 and 1e-30 scale, zero, rank-deficient
    and random: each scaled by its own power of two."""
    mk, _ = makers(device)
    rng = np.random.default_rng(13)
    base = randm(rng, (4, 20, 20), dt).astype(np.float64)
    base[0] *= 1e30
    base[1] *= 1e-30
    base[2] = 0
    base[3] = base[3][:, :2] @ base[3][:2, :]
    batch = np.concatenate([base, randm(rng, (2, 20, 20), dt)]).astype(dt)
    for full in (False, True):
        svd_ok(batch, dt, full, mk)
    assert_all_kept(capfd, 4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt,f32,steps", [(np.float32, "0", "2 QR + 4 Cholesky"),
                                          (np.float32, "1", "2 QR + 2 Cholesky"),
                                          (np.float64, "0", "2 QR + 4 Cholesky")],
                         ids=["float32", "float32-in-f32", "float64"])
def test_qdwh_plan(dt, f32, steps, device, forced, capfd, monkeypatch):
    """The fixed plan from l0 = eps: QR-based steps while c > 100, then
    Cholesky-based ones (l reaches 1 in 4 steps in f32, 6 in f64). f32
    input iterates in f64 unless INGOT_SVD_QDWH_F32=1."""
    monkeypatch.setenv("INGOT_SVD_QDWH_F32", f32)
    mk, _ = makers(device)
    la("svdvals", mk(randm(np.random.default_rng(14), (30, 30), dt)))
    lines = qdwh_lines(capfd)
    assert len(lines) == 1 and f": {steps} steps," in lines[0], lines


@pytest.mark.parametrize("device", DEVICES)
def test_qdwh_f32_accuracy(device, forced, capfd):
    """f32 input, iterated in f64: every singular value within a few f32
    roundings of numpy's f64 SVD of the same f32 matrix (the small ones
    included: an f32 iteration is ~100x off there), U S V^T as close."""
    mk, _ = makers(device)
    a = randm(np.random.default_rng(15), (300, 300), np.float32)
    u, s, vh = la("svd", mk(a), False, nout=2)
    ref = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    eps = np.finfo(np.float32).eps
    assert np.abs(s.astype(np.float64) - ref).max() <= 8 * eps * ref[0]
    rec = (u.astype(np.float64) * s.astype(np.float64)) @ vh.astype(np.float64)
    assert np.linalg.norm(rec - a) <= 8 * eps * np.sqrt(300) * np.linalg.norm(a)
    assert_all_kept(capfd, 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", REAL, ids=["float32", "float64"])
def test_qdwh_declines_nonfinite(dt, device, forced, capfd):
    """Non-finite input: QDWH declines and the fallback reports the error
    exactly as without it."""
    mk, mk_t = makers(device)
    check_svd_nonfinite(np.random.default_rng(15), dt, mk, mk_t)
    lines = qdwh_lines(capfd)
    assert lines and all(ln.endswith("fallback: non-finite input") for ln in lines), lines


@pytest.mark.parametrize("dt", REAL, ids=["float32", "float64"])
def test_qdwh_complex_not_taken(dt, forced, capfd):
    """Complex input is not QDWH's: the LAPACK path runs (no QDWH line)."""
    cdt = np.complex64 if dt == np.float32 else np.complex128
    svd_ok(randm(np.random.default_rng(16), (12, 9), cdt), cdt, False, tensor)
    assert qdwh_lines(capfd) == []


@needs_cuda
@pytest.mark.parametrize("dt", REAL, ids=["float32", "float64"])
def test_cuda_auto_takes_qdwh(dt, monkeypatch, capfd):
    """auto: QDWH for real matrices from 512 up with max(m, n) <= 1.25
    min(m, n), kept on random and graded input; gesvdj below 512 or for a
    more oblong shape (no QDWH line)."""
    monkeypatch.setenv("INGOT_SVD_ALGO", "auto")
    monkeypatch.setenv("INGOT_SVD_VERBOSE", "1")
    mk = lambda x: tensor(x, device=CUDA)  # noqa: E731
    rng = np.random.default_rng(17)
    svd_ok(randm(rng, (600, 600), dt), dt, False, mk)
    svd_ok(randm(rng, (520, 640), dt), dt, True, mk)
    graded = dict(ill_conditioned(rng, dt, 512, 512))
    svd_ok(graded["graded1e-06"], dt, False, mk)
    svd_ok(graded["rank3"], dt, False, mk)
    assert_all_kept(capfd, 8)
    svd_ok(randm(rng, (500, 500), dt), dt, False, mk)
    svd_ok(randm(rng, (520, 700), dt), dt, False, mk)
    assert qdwh_lines(capfd) == []


@needs_cuda
def test_cuda_qdwh_tf32(monkeypatch, capfd):
    """With TF32 products allowed, auto does not take QDWH; forced, it keeps
    its result only where the checks pass, else gesvdj runs: right either
    way."""
    mk = lambda x: tensor(x, device=CUDA)  # noqa: E731
    a = randm(np.random.default_rng(18), (600, 600), np.float32)
    monkeypatch.setenv("INGOT_SVD_VERBOSE", "1")
    lib.ingot_set_allow_tf32.argtypes = [ctypes.c_bool]
    lib.ingot_set_allow_tf32(True)
    try:
        monkeypatch.setenv("INGOT_SVD_ALGO", "auto")
        svd_ok(a, np.float32, False, mk)
        assert qdwh_lines(capfd) == []
        monkeypatch.setenv("INGOT_SVD_ALGO", "qdwh")
        svd_ok(a, np.float32, False, mk)
        lines = qdwh_lines(capfd)
        assert len(lines) == 2 and all(re.search(r": (kept|fallback: a check failed)$", ln)
                                       for ln in lines), lines
    finally:
        lib.ingot_set_allow_tf32(False)

