"""Differential checks of CUDA kernels against the CPU backend (ggml's
test-backend-ops is the model): the same op on the same inputs on both
devices, results compared with a tolerance per dtype.

    from cuda_diff import HAVE_CUDA, CUDA, needs_cuda, diff
    pytestmark = needs_cuda
    diff("ingot_add", tensor(a), tensor(b))               # compares outputs
    diff("ingot_max_dim", tensor(a), 1, False, OUT_SLOT)  # also the out slot

Arguments that are T (CPU tensors) are moved to cuda:0 for the CUDA call;
everything else passes unchanged. The special value OUT_SLOT stands for an
out_ptr() argument; its result is compared too. A strided CPU input (a view)
stays strided on the device: diff() rebuilds the same view there.
"""
import ctypes

import numpy as np
import pytest

from ingot_ctypes import (DTYPES, Device, IngotError, T, call, declare, lib, out_ptr, take,
                          tensor, to_numpy)

lib.ingot_device_count.argtypes = [ctypes.c_int]
lib.ingot_device_count.restype = ctypes.c_int
HAVE_CUDA = lib.ingot_device_count(1) > 0
CUDA = Device(1, 0)
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="skipped: no CUDA device")
OUT_SLOT = object()

# (rtol, atol) per result dtype name; integer and bool results must be equal.
TOL = {
    "float64": (1e-12, 1e-12), "complex128": (1e-12, 1e-12),
    "float32": (1e-5, 1e-6), "complex64": (1e-5, 1e-6),
    "float16": (2e-3, 1e-4), "bfloat16": (1.6e-2, 1e-3),
    "float8_e4m3fn": (1.3e-1, 2e-3), "float8_e5m2": (2.6e-1, 2e-5),
}


def to_device(t, dev=CUDA):
    """The same values and the same view geometry (sizes, strides) on dev:
    the span the view covers is copied and viewed with ingot_as_strided."""
    ndim = lib.ingot_ndim(t.ptr)
    shape = [lib.ingot_shape(t.ptr)[i] for i in range(ndim)]
    strides = [lib.ingot_strides(t.ptr)[i] for i in range(ndim)]
    if lib.ingot_is_contiguous(t.ptr) or 0 in shape:
        return call("ingot_to", t, dev)
    host = to_numpy(t)
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    base = np.zeros(span, dtype=host.dtype)
    idx = np.zeros(shape, dtype=np.int64)
    for d in range(ndim):
        sh = [1] * ndim
        sh[d] = shape[d]
        idx = idx + (np.arange(shape[d]) * strides[d]).reshape(sh)
    base[idx] = host
    return call("ingot_as_strided", call("ingot_to", tensor(base), dev), ndim, shape, strides, 0)


def _dev_args(args):
    out = []
    slots = []
    for a in args:
        if a is OUT_SLOT:
            s = out_ptr()
            slots.append(s)
            out.append(s)
        elif isinstance(a, T):
            out.append(_move(a))
        elif isinstance(a, (list, tuple)) and a and all(isinstance(x, T) for x in a):
            out.append([_move(x) for x in a])
        else:
            out.append(a)
    return out, slots


def _move(t):
    return to_device(t)


def _compare(got, want, what, tol=None):
    g, w = to_numpy(got), to_numpy(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} vs {w.shape}"
    assert g.dtype == w.dtype, f"{what}: dtype {g.dtype} vs {w.dtype}"
    name = np.dtype(g.dtype).name
    if name in TOL or g.dtype.kind in "fc":
        rtol, atol = tol or TOL.get(name, (1e-5, 1e-6))
        gc = g.astype(np.complex128) if g.dtype.kind == "c" else g.astype(np.float64)
        wc = w.astype(np.complex128) if w.dtype.kind == "c" else w.astype(np.float64)
        np.testing.assert_allclose(gc, wc, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(g, w, err_msg=what)


def diff(name, *args, tol=None):
    """Run name on the CPU and on CUDA; assert equal results (or equal
    failures: both raise). Returns the CPU result."""
    cpu_slots = [out_ptr() if a is OUT_SLOT else None for a in args]
    cpu_args = [s if a is OUT_SLOT else a for a, s in zip(args, cpu_slots)]
    try:
        want = call(name, *cpu_args)
    except IngotError:
        with pytest.raises(IngotError):
            dargs, _ = _dev_args(args)
            call(name, *dargs)
        return None
    dargs, slots = _dev_args(args)
    got = call(name, *dargs)
    if isinstance(want, T):
        _compare(got, want, name, tol)
    cpu_outs = [take(s) for s in cpu_slots if s is not None]
    for i, (s, w) in enumerate(zip(slots, cpu_outs)):
        g = take(s)
        if w is not None:
            _compare(g, w, f"{name} out slot {i}", tol)
    return want


# The graph API, once for every test module (ingot_graph_end returns a
# pointer: not ctypes' default int).
declare({
    "ingot_graph_begin": (ctypes.c_int, [Device]),
    "ingot_graph_end": (ctypes.c_void_p, [Device]),
    "ingot_graph_replay": (ctypes.c_int, [ctypes.c_void_p]),
    "ingot_graph_destroy": (None, [ctypes.c_void_p]),
    "ingot_synchronize": (ctypes.c_int, [Device]),
})


def offset_view(arr, shape, off):
    """A contiguous CUDA view of arr's values that starts off elements into its
    storage (so its address is not 16-byte (or even 2-byte) aligned)."""
    flat = np.concatenate([np.zeros(off, arr.dtype), arr.ravel()])
    d = call("ingot_to", tensor(flat), CUDA)
    s = call("ingot_slice", d, 0, off, flat.size, 1)
    return call("ingot_view", s, len(shape), list(shape))


def replay_steps(step, items, refill, check):
    """step() run once (lazy setup is not captured), then captured in a graph on
    CUDA. For each item: refill(item) copies new inputs into the captured
    ones, one replay, then check(item, output), the captured output (a device
    tensor or a tuple of them) as numpy. The captured output lives in the
    graph's private pool, so it is dropped before the graph."""
    step()
    assert lib.ingot_synchronize(CUDA) == 0
    assert lib.ingot_graph_begin(CUDA) == 0
    try:
        out = step()
    finally:
        graph = lib.ingot_graph_end(CUDA)
    assert graph, "graph capture failed"
    try:
        for item in items:
            refill(item)
            assert lib.ingot_graph_replay(graph) == 0
            check(item, tuple(map(to_numpy, out)) if isinstance(out, tuple) else to_numpy(out))
    finally:
        out = None
        lib.ingot_graph_destroy(graph)


def check_graph_replays(fn, shape, dtype, rng, replays=3):
    """fn(x) (a device tensor, or a tuple of them) captured once on a device input x, then
    replayed after copying new values into x: every replay equals fn run eagerly on them."""
    dx = to_device(tensor(rng.standard_normal(shape).astype(dtype)))
    as_tuple = lambda r: r if isinstance(r, tuple) else (r,)

    def check(_, got):
        for g, w in zip(as_tuple(got), as_tuple(fn(dx))):
            np.testing.assert_array_equal(g, to_numpy(w))

    replay_steps(lambda: as_tuple(fn(dx)), range(replays),
                 lambda _: call("ingot_copy_", dx,
                                to_device(tensor(rng.standard_normal(shape).astype(dtype)))),
                 check)
