"""Checks of ingot_linalg_* against numpy/scipy, written once for any device:
test_linalg.py runs them on the CPU, test_cuda_linalg.py on cuda:0. Inputs
are made on the host and moved with `mk(x)` (contiguous) or `mk_t(x)` (a
transposed, non-contiguous view); results come back with to_numpy.

Tolerances (relative to the scale of the result, per dtype): float32 and
complex64 results of well-conditioned inputs (condition number < 100) agree
to 2e-4, float64 and complex128 to 1e-10; SVD residuals and orthonormality
are measured as norms relative to ||A|| (f32: 1e-5 * size, f64: 1e-13 *
size)."""
import ctypes

import numpy as np
import scipy.linalg as sla
from ingot_ctypes import CPU, IngotError, T, call, lib, out_ptr, take, tensor, to_numpy

# References computed in complex128 are cast to real dtypes (imaginary part
# 0); the test modules silence numpy's warning about it.
QUIET = "ignore::numpy.exceptions.ComplexWarning"

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
LA_NAMES = {np.float32: "float32", np.float64: "float64", np.complex64: "complex64",
            np.complex128: "complex128"}
P = ctypes.c_void_p
B = ctypes.c_bool
D = ctypes.c_double
I = ctypes.c_int

_SIGS = {
    "ingot_linalg_lu_factor": [P, P],
    "ingot_linalg_lu": [P, P, P],
    "ingot_linalg_lu_solve": [P, P, P, B, B],
    "ingot_linalg_solve": [P, P, B],
    "ingot_linalg_solve_triangular": [P, P, B, B, B],
    "ingot_linalg_inv": [P],
    "ingot_linalg_det": [P],
    "ingot_linalg_slogdet": [P, P],
    "ingot_linalg_cholesky": [P, B],
    "ingot_linalg_cholesky_solve": [P, P, B],
    "ingot_linalg_qr": [P, I, P],
    "ingot_linalg_householder_product": [P, P],
    "ingot_linalg_svd": [P, B, P, P],
    "ingot_linalg_svdvals": [P],
    "ingot_linalg_eigh": [P, B, P],
    "ingot_linalg_eigvalsh": [P, B],
    "ingot_linalg_pinv": [P, D, D, B],
    "ingot_linalg_lstsq": [P, P, D, P, P, P],
    "ingot_linalg_matrix_norm": [P, ctypes.c_char_p, B],
    "ingot_linalg_cond": [P, ctypes.c_char_p],
    "ingot_linalg_matrix_rank": [P, D, D, B],
    "ingot_conj": [P],
}


def la(name, *args, nout=0):
    """Call ingot_linalg_<name>; returns the result and `nout` out-slots as
    numpy arrays (None for an empty slot). Errors raise IngotError."""
    fn = "ingot_" + name if name == "conj" else "ingot_linalg_" + name
    f = getattr(lib, fn)
    f.restype, f.argtypes = P, _SIGS[fn]
    slots = [out_ptr() for _ in range(nout)]
    cargs = []
    for a in args:
        if isinstance(a, T):
            cargs.append(a.ptr)
        elif isinstance(a, str):
            cargs.append(a.encode())
        else:
            cargs.append(a)
    lib.ingot_clear_error()
    r = f(*cargs, *slots)
    if not r:
        raise IngotError(lib.ingot_last_error().decode(), lib.ingot_last_status())
    res = [to_numpy(T(r))] + [None if not s.contents.value else to_numpy(take(s)) for s in slots]
    return res[0] if nout == 0 else tuple(res)


def tol(dt):
    return 2e-4 if np.dtype(dt) in (np.float32, np.complex64) else 1e-10


def eps(dt):
    return np.finfo(np.dtype(dt)).eps


def randm(rng, shape, dt):
    x = rng.standard_normal(shape)
    if np.iscomplexobj(np.empty(0, dt)):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dt)


def well_conditioned(rng, shape, dt):
    """Random square matrices with condition number well below 100."""
    n = shape[-1]
    return (randm(rng, shape, dt) / np.sqrt(n) * 0.3 + 2 * np.eye(n)).astype(dt)


def hpd(rng, shape, dt):
    """Random Hermitian positive-definite matrices."""
    a = randm(rng, shape, dt)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) / shape[-1] + np.eye(shape[-1])).astype(dt)


def close(got, want, dt, scale=None):
    want = np.asarray(want)
    s = scale if scale is not None else max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.size:
        err = float(np.max(np.abs(got.astype(np.complex128) - want.astype(np.complex128))))
        assert err <= tol(dt) * s, f"max error {err} > {tol(dt) * s}"


def adj(x):
    return np.conj(np.swapaxes(x, -1, -2))


def real_of(dt):
    return {np.float32: np.float32, np.float64: np.float64, np.complex64: np.float32,
            np.complex128: np.float64}[dt]


# ---- checks, each given (rng, dt, mk, mk_t) ----

def check_lu_factor(rng, dt, mk, mk_t):
    for shape in [(5, 5), (3, 6, 4), (2, 4, 7), (1, 1)]:
        a = randm(rng, shape, dt)
        for t in (mk(a), mk_t(a)):
            lu, piv = la("lu_factor", t, nout=1)
            assert piv.dtype == np.int32
            for idx in np.ndindex(shape[:-2]):
                rlu, rpiv = sla.lu_factor(a[idx].astype(np.complex128 if np.iscomplexobj(a)
                                                        else np.float64))
                k = min(shape[-2:])
                np.testing.assert_array_equal(piv[idx], rpiv[:k] + 1)
                close(lu[idx], rlu.astype(dt), dt)


def check_lu(rng, dt, mk, mk_t):
    for shape in [(4, 4), (2, 5, 3), (3, 6), (2, 2, 0)]:
        a = randm(rng, shape, dt)
        if shape[-1]:
            a[..., :, 0] = 0  # singular: lu still works
        p, l, u = la("lu", mk(a), nout=2)
        m, n = shape[-2:]
        k = min(m, n)
        assert p.shape == shape[:-2] + (m, m) and l.shape == shape[:-2] + (m, k)
        assert u.shape == shape[:-2] + (k, n)
        close(p @ l @ u, a, dt)
        np.testing.assert_array_equal(np.tril(u, -1), 0)
        np.testing.assert_array_equal(np.triu(l, 1), 0)
        if k:
            np.testing.assert_array_equal(np.diagonal(l, axis1=-2, axis2=-1), 1)
        for idx in np.ndindex(shape[:-2]):
            if a[idx].size:
                rp, rl, ru = sla.lu(a[idx].astype(np.complex128 if np.iscomplexobj(a)
                                                  else np.float64))
                np.testing.assert_array_equal(p[idx].real, rp)


def check_lu_solve(rng, dt, mk, mk_t):
    a = well_conditioned(rng, (3, 5, 5), dt)
    lu, piv = la("lu_factor", mk(a), nout=1)
    for left in (True, False):
        for adjoint in (False, True):
            b = randm(rng, (3, 5, 2) if left else (3, 2, 5), dt)
            x = la("lu_solve", mk(lu), mk(piv), mk_t(b), left, adjoint)
            aa = adj(a) if adjoint else a
            want = np.linalg.solve(aa, b) if left else adj(np.linalg.solve(adj(aa), adj(b)))
            close(x, want.astype(dt), dt)
    # broadcast: one factorization, a batch of right-hand sides
    b = randm(rng, (4, 1, 5, 3), dt)
    x = la("lu_solve", mk(lu[0]), mk(piv[0]), mk(b), True, False)
    close(x, np.linalg.solve(a[0], b).astype(dt), dt)
    bad = piv.copy()
    bad[0, 0] = 9
    try:
        la("lu_solve", mk(lu), mk(bad), mk(randm(rng, (3, 5, 1), dt)), True, False)
        raise AssertionError("bad pivots accepted")
    except IngotError as e:
        assert "pivots" in str(e)


def check_solve(rng, dt, mk, mk_t):
    a = well_conditioned(rng, (2, 3, 6, 6), dt)
    b = randm(rng, (3, 6, 4), dt)
    close(la("solve", mk_t(a), mk(b), True), np.linalg.solve(a, b).astype(dt), dt)
    br = randm(rng, (2, 3, 4, 6), dt)
    close(la("solve", mk(a), mk(br), False), adj(np.linalg.solve(adj(a), adj(br))).astype(dt), dt)
    v = randm(rng, (6,), dt)
    close(la("solve", mk(a[0, 0]), mk(v), True), np.linalg.solve(a[0, 0], v).astype(dt), dt)
    vb = randm(rng, (2, 3, 6), dt)  # A's batch of vectors
    want = np.linalg.solve(a, vb[..., None])[..., 0]
    close(la("solve", mk(a), mk(vb), True), want.astype(dt), dt)
    sing = a.copy()
    sing[1, 2] = 0
    sing[1, 2, 0, 0] = 1
    try:
        la("solve", mk(sing), mk(randm(rng, (2, 3, 6, 1), dt)), True)
        raise AssertionError("singular accepted")
    except IngotError as e:
        assert "solve" in str(e) and "batch member 5" in str(e) and "singular" in str(e), str(e)


def check_solve_triangular(rng, dt, mk, mk_t):
    a = well_conditioned(rng, (2, 5, 5), dt)
    for upper in (True, False):
        tri = np.triu(a) if upper else np.tril(a)
        for left in (True, False):
            for unit in (False, True):
                t = tri.copy()
                if unit:
                    idx = np.arange(5)
                    t[..., idx, idx] = 1
                b = randm(rng, (2, 5, 3) if left else (2, 3, 5), dt)
                x = la("solve_triangular", mk(a if not unit else
                                              np.where(np.eye(5, dtype=bool), 7, a).astype(dt)),
                       mk_t(b), upper, left, unit)
                want = np.linalg.solve(t, b) if left else adj(np.linalg.solve(adj(t), adj(b)))
                close(x, want.astype(dt), dt)
    # the transposed system through a transposed view
    up = np.triu(a)
    b = randm(rng, (2, 5, 2), dt)
    x = la("solve_triangular", mk_t(np.swapaxes(up, -1, -2)), mk(b), False, True, False)
    close(x, np.linalg.solve(np.swapaxes(up, -1, -2), b).astype(dt), dt)


def check_inv(rng, dt, mk, mk_t):
    for shape in [(1, 1), (7, 7), (4, 3, 3), (10, 8, 8), (33, 33), (0, 0), (0, 4, 4)]:
        a = well_conditioned(rng, shape, dt)
        close(la("inv", mk_t(a)), np.linalg.inv(a).astype(dt) if a.size else a, dt)
    a = well_conditioned(rng, (4, 3, 3), dt)
    a[2] = [[1, 2, 3], [2, 4, 6], [0, 0, 1]]
    try:
        la("inv", mk(a))
        raise AssertionError("singular accepted")
    except IngotError as e:
        assert "inv" in str(e) and "batch member 2" in str(e) and "singular" in str(e), str(e)


def check_det(rng, dt, mk, mk_t):
    for shape in [(1, 1), (5, 5), (3, 4, 4), (0, 0)]:
        a = well_conditioned(rng, shape, dt)
        d = la("det", mk_t(a))
        close(d, np.asarray(np.linalg.det(a)).astype(dt), dt)
        s, ld = la("slogdet", mk(a), nout=1)
        rs, rld = np.linalg.slogdet(a)
        close(s, np.asarray(rs).astype(dt), dt)
        close(ld, np.asarray(rld).astype(real_of(dt)), dt)
    sing = np.zeros((2, 3, 3), dt)
    sing[1] = np.eye(3)
    s, ld = la("slogdet", mk(sing), nout=1)
    assert s[0] == 0 and ld[0] == -np.inf and s[1] == 1 and ld[1] == 0
    assert la("det", mk(sing))[0] == 0
    # exact for integer-valued matrices
    m = np.array([[2, 1, 0], [1, 3, 1], [0, 1, 4]], dt)
    assert abs(la("det", mk(m)) - 18) <= 18 * 8 * eps(dt)


def check_cholesky(rng, dt, mk, mk_t):
    a = hpd(rng, (3, 6, 6), dt)
    lower = la("cholesky", mk_t(a), False)
    close(lower, np.linalg.cholesky(a).astype(dt), dt)
    close(la("cholesky", mk(a), True), adj(np.linalg.cholesky(a)).astype(dt), dt)
    bad = a.copy()
    bad[1, 2, 2] = -5
    try:
        la("cholesky", mk(bad), False)
        raise AssertionError("non-PD accepted")
    except IngotError as e:
        assert "cholesky" in str(e) and "batch member 1" in str(e) and "order 3" in str(e), str(e)
    b = randm(rng, (2, 1, 6, 2), dt)
    want = np.linalg.solve(a, b)
    close(la("cholesky_solve", mk(b), mk(lower), False), want.astype(dt), dt)
    close(la("cholesky_solve", mk_t(b), mk(adj(lower)), True), want.astype(dt), dt)


def check_qr(rng, dt, mk, mk_t):
    for shape in [(6, 4), (4, 6), (5, 5), (2, 7, 3), (0, 3)]:
        a = randm(rng, shape, dt)
        m, n = shape[-2:]
        k = min(m, n)
        for mode, qc in ((0, k), (1, m)):
            q, r = la("qr", mk_t(a), mode, nout=1)
            assert q.shape == shape[:-2] + (m, qc) and r.shape == shape[:-2] + (qc, n)
            close(q @ r, a, dt)
            close(adj(q) @ q, np.broadcast_to(np.eye(qc), q.shape[:-2] + (qc, qc)), dt)
            np.testing.assert_array_equal(np.tril(r, -1), 0)
            if a.size:
                rr = np.linalg.qr(a, mode="r" if a.ndim == 2 else "reduced")
                rr = rr if a.ndim == 2 else rr[1]
                close(np.abs(np.diagonal(r[..., :k, :], axis1=-2, axis2=-1)),
                      np.abs(np.diagonal(rr, axis1=-2, axis2=-1)).astype(real_of(dt)), dt)
        q, r2 = la("qr", mk(a), 2, nout=1)
        assert q.shape == (0,)
        close(r2, la("qr", mk(a), 0, nout=1)[1], dt)


def householder_ref(a, tau):
    m, n = a.shape
    q = np.eye(m, dtype=np.complex128)
    for i in range(len(tau)):
        v = np.zeros(m, np.complex128)
        v[i] = 1
        v[i + 1:] = a[i + 1:, i]
        q = q @ (np.eye(m) - tau[i] * np.outer(v, np.conj(v)))
    return q[:, :n]


def check_householder(rng, dt, mk, mk_t):
    for (m, n, k) in [(6, 4, 3), (5, 5, 5), (4, 2, 0)]:
        a = randm(rng, (2, m, n), dt)
        tau = randm(rng, (2, k), dt) * 0.5
        got = la("householder_product", mk_t(a), mk(tau))
        for b in range(2):
            close(got[b], householder_ref(a[b], tau[b]).astype(dt), dt)
    try:
        la("householder_product", mk(randm(rng, (3, 4), dt)), mk(randm(rng, (2,), dt)))
        raise AssertionError("wide A accepted")
    except IngotError as e:
        assert "householder_product" in str(e)


def svd_ok(a, dt, full, mk, scale_tol=1.0):
    """U S Vh reconstructs A, U and V are orthonormal, S matches numpy's in f64."""
    u, s, vh = la("svd", mk(a), full, nout=2)
    m, n = a.shape[-2:]
    k = min(m, n)
    assert u.shape == a.shape[:-2] + ((m, m) if full else (m, k))
    assert vh.shape == a.shape[:-2] + ((n, n) if full else (k, n))
    assert s.dtype == real_of(dt)
    e = tol(dt) / 20 * max(m, n, 1) * scale_tol
    a64 = a.astype(np.complex128)
    ref = np.linalg.svd(a64, compute_uv=False) if a.size else np.zeros(a.shape[:-2] + (0,))
    norm = np.maximum(np.linalg.norm(a64, axis=(-2, -1)), np.finfo(np.float64).tiny)
    us = u[..., :, :k] * s[..., None, :].astype(u.dtype)
    rec = us @ vh[..., :k, :]
    err = np.linalg.norm((rec - a64).reshape(a.shape[:-2] + (-1,)), axis=-1) / norm
    assert np.all(err <= e), f"||A - U S Vh|| / ||A|| = {err.max()}"
    for q, d in ((u, u.shape[-1]), (adj(vh), vh.shape[-2])):
        eye = np.broadcast_to(np.eye(d), q.shape[:-2] + (d, d))
        oerr = np.max(np.abs(adj(q).astype(np.complex128) @ q - eye)) if q.size else 0
        assert oerr <= e, f"orthonormality error {oerr}"
    smax = np.maximum(ref[..., :1], np.finfo(np.float64).tiny) if k else 1
    serr = np.max(np.abs(s - ref) / smax) if k else 0
    assert serr <= e, f"singular values off by {serr} of s_max"
    assert np.all(np.diff(s, axis=-1) <= 0)
    np.testing.assert_allclose(la("svdvals", mk(a)), s, rtol=0, atol=float(e * np.max(smax)))
    return s


def check_svd(rng, dt, mk, mk_t):
    for shape in [(6, 4), (4, 6), (5, 5), (3, 7, 2), (1, 1), (0, 3), (3, 0), (2, 0, 0)]:
        a = randm(rng, shape, dt)
        for full in (False, True):
            svd_ok(a, dt, full, mk)
            svd_ok(a, dt, full, mk_t)


def adversarial(rng, dt):
    """The matrices PyTorch's MPS SVD once got wrong."""
    cases = []
    real = np.dtype(dt).kind == "f"
    lo = 1e-30 if np.dtype(dt) in (np.float64, np.complex128) else 1e-6
    for (m, n) in [(8, 8), (12, 5), (5, 12)]:
        k = min(m, n)
        u, _ = np.linalg.qr(randm(rng, (m, m), np.complex128 if not real else np.float64))
        v, _ = np.linalg.qr(randm(rng, (n, n), np.complex128 if not real else np.float64))
        s = np.logspace(0, np.log10(lo), k)
        d = np.zeros((m, n))
        d[:k, :k] = np.diag(s)
        graded = (u @ d @ adj(v))
        cases.append(("graded", graded.astype(dt)))
        rank2 = randm(rng, (m, 2), dt) @ randm(rng, (2, n), dt)
        cases.append(("rank2", rank2))
        cases.append(("zero", np.zeros((m, n), dt)))
        base = randm(rng, (m, n), dt)
        big = 1e30 if np.dtype(dt) in (np.float64, np.complex128) else 1e30
        cases.append(("x1e30", (base.astype(np.complex128) * big).astype(dt)))
        cases.append(("x1e-30", (base.astype(np.complex128) * 1e-30).astype(dt)))
        one = np.zeros((m, n), dt)
        one[m // 2, n // 3] = 3
        cases.append(("one_entry", one))
    return cases


def check_svd_adversarial(rng, dt, mk, mk_t):
    for name, a in adversarial(rng, dt):
        for full in (False, True):
            try:
                svd_ok(a, dt, full, mk)
            except AssertionError as e:
                raise AssertionError(f"{name} {a.shape} full={full}: {e}") from None


def check_svd_nonfinite(rng, dt, mk, mk_t):
    a = randm(rng, (3, 4, 4), dt)
    a[1, 2, 3] = np.nan
    for fn in ("svdvals", "eigvalsh"):
        try:
            la(fn, mk(a), False) if fn == "eigvalsh" else la(fn, mk(a))
            raise AssertionError("NaN accepted")
        except IngotError as e:
            assert fn in str(e) and "batch member 1" in str(e) and "NaN" in str(e), str(e)
    a[1, 2, 3] = np.inf
    try:
        la("svd", mk(a), False, nout=2)
        raise AssertionError("inf accepted")
    except IngotError as e:
        assert "infinity" in str(e)


def check_eigh(rng, dt, mk, mk_t):
    for shape in [(5, 5), (3, 4, 4), (1, 1), (0, 0)]:
        a = randm(rng, shape, dt)
        h = ((a + adj(a)) / 2).astype(dt)
        for upper in (False, True):
            # only one triangle is read: garbage in the other must not matter
            g = np.triu(h) + np.tril(a, -1) if upper else np.tril(h) + np.triu(a, 1)
            w, v = la("eigh", mk_t(g.astype(dt)), upper, nout=1)
            close(w, np.linalg.eigvalsh(h).astype(real_of(dt)) if h.size else w, dt)
            close(h @ v, v * w[..., None, :].astype(dt), dt)
            close(adj(v) @ v, np.broadcast_to(np.eye(shape[-1]), v.shape), dt)
            close(la("eigvalsh", mk(g.astype(dt)), upper), w, dt)


def check_pinv(rng, dt, mk, mk_t):
    for shape in [(6, 4), (4, 6), (2, 5, 5)]:
        a = randm(rng, shape, dt)
        close(la("pinv", mk_t(a), -1.0, -1.0, False), np.linalg.pinv(a).astype(dt), dt)
    r2 = randm(rng, (6, 2), dt) @ randm(rng, (2, 5), dt)  # rank 2
    close(la("pinv", mk(r2), -1.0, 1e-5, False), np.linalg.pinv(r2, rcond=1e-5).astype(dt), dt)
    a = randm(rng, (5, 5), dt)
    h = ((a + adj(a)) / 2).astype(dt)
    close(la("pinv", mk(h), -1.0, -1.0, True), np.linalg.pinv(h, hermitian=True).astype(dt), dt)
    # atol alone: values <= atol dropped
    s = np.linalg.svd(a.astype(np.complex128), compute_uv=False)
    cut = float((s[1] + s[2]) / 2)
    u, sv, vh = np.linalg.svd(a.astype(np.complex128))
    sinv = np.where(sv > cut, 1 / sv, 0)
    want = adj(vh) @ (sinv[:, None] * adj(u))
    close(la("pinv", mk(a), cut, -1.0, False), want.astype(dt), dt)


def check_lstsq(rng, dt, mk, mk_t):
    for (m, n, r) in [(8, 5, 3), (5, 8, 2), (6, 6, 1)]:
        a = randm(rng, (m, n), dt)
        b = randm(rng, (m, r), dt)
        x, res, rank, s = la("lstsq", mk_t(a), mk(b), -1.0, nout=3)
        rx, rres, rrank, rs = np.linalg.lstsq(a, b, rcond=None)
        close(x, rx.astype(dt), dt)
        assert rank == rrank and rank.dtype == np.int64
        close(s, rs.astype(real_of(dt)), dt)
        assert res.shape == rres.shape
        close(res, rres.astype(real_of(dt)), dt)
    # rank-deficient tall: residuals empty, rank 2
    a = randm(rng, (7, 2), dt) @ randm(rng, (2, 4), dt)
    b = randm(rng, (7, 2), dt)
    x, res, rank, s = la("lstsq", mk(a), mk(b), -1.0, nout=3)
    # numpy computes float32 in float64 with float64's eps: give it ours
    rx, rres, rrank, rs = np.linalg.lstsq(a.astype(np.complex128), b, rcond=eps(dt) * 7)
    assert rank == 2 and rrank == 2 and res.shape == (0,)
    close(x, rx.astype(dt), dt)
    # batched, broadcast B
    a = randm(rng, (3, 6, 3), dt)
    b = randm(rng, (6, 2), dt)
    x, res, rank, s = la("lstsq", mk(a), mk(b), -1.0, nout=3)
    for i in range(3):
        rx, rres, _, _ = np.linalg.lstsq(a[i], b, rcond=None)
        close(x[i], rx.astype(dt), dt)
        close(res[i], rres.astype(real_of(dt)), dt)


ORDS = ["fro", "nuc", "inf", "-inf", "1", "-1", "2", "-2"]
NP_ORD = {"fro": "fro", "nuc": "nuc", "inf": np.inf, "-inf": -np.inf, "1": 1, "-1": -1, "2": 2,
          "-2": -2}


def check_norms(rng, dt, mk, mk_t):
    a = randm(rng, (2, 5, 4), dt)
    for o in ORDS:
        got = la("matrix_norm", mk_t(a), o, False)
        want = np.linalg.norm(a.astype(np.complex128), ord=NP_ORD[o], axis=(-2, -1))
        close(got, want.astype(real_of(dt)), dt)
        kd = la("matrix_norm", mk(a), o, True)
        assert kd.shape == (2, 1, 1)
    sq = well_conditioned(rng, (3, 4, 4), dt)
    for o in ORDS:
        got = la("cond", mk(sq), o)
        want = np.linalg.cond(sq.astype(np.complex128), p=NP_ORD[o])
        close(got, want.astype(real_of(dt)), dt, scale=float(np.max(want)))
    sing = sq.copy()
    sing[1] = 0  # singular member: inf for the inverse-based ords (torch)
    for o in ("fro", "1", "inf"):
        got = la("cond", mk(sing), o)
        assert got[1] == np.inf and np.isfinite(got[0]) and np.isfinite(got[2]), (o, got)
    r2 = randm(rng, (2, 6, 2), dt) @ randm(rng, (2, 2, 5), dt)
    rank = la("matrix_rank", mk(r2), -1.0, -1.0, False)
    assert rank.dtype == np.int64 and list(rank) == [2, 2]
    h = r2[0] @ adj(r2[0])
    assert la("matrix_rank", mk(h.astype(dt)), -1.0, -1.0, True) == 2
    full = randm(rng, (5, 5), dt)
    assert la("matrix_rank", mk(full), -1.0, -1.0, False) == np.linalg.matrix_rank(full)
    assert la("matrix_rank", mk(full), 1e30, -1.0, False) == 0


def check_conj(rng, dt, mk, mk_t):
    a = randm(rng, (3, 4), dt)
    np.testing.assert_array_equal(la("conj", mk_t(a)), np.conj(a))


ALL_CHECKS = [check_lu_factor, check_lu, check_lu_solve, check_solve, check_solve_triangular,
              check_inv, check_det, check_cholesky, check_qr, check_householder, check_svd,
              check_svd_adversarial, check_svd_nonfinite, check_eigh, check_pinv, check_lstsq,
              check_norms, check_conj]
