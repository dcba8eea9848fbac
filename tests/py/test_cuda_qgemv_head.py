"""The M = 1 GEMV over a large weight (>= 4 MiB: an LM head) on CUDA against
the CPU backend (qgemv_smem_kernel; a cp.async streaming variant was
measured no faster on the H200 and removed). Odd N (a partial last task, warps
with fewer tasks), x at an unaligned address (no float4 staging), a NaN and
an infinity in x, the norm and the residual fused, the swiglu staging, and
a CUDA graph replayed on new inputs. Tolerances: test_cuda_nn.py's
(|cuda - cpu| <= 2e-5 * (|x| @ |W|^T) + 1e-6; + |res| when fused).
"""
import numpy as np
import pytest

from cuda_diff import CUDA, needs_cuda
from ingot_ctypes import call, lib, tensor, to_numpy
from nn_cases import pad16, pad_rows, seed
from test_cuda_nn import (abs_deq, check_close, check_fused_close, dev, fused_both,
                          offset_view, swiglu_both, weights_fast)

pytestmark = needs_cuda

def padded_weight(name, n, k, rng):
    tid, wq = weights_fast(name, n, k, rng)
    return tid, wq, dev(pad_rows(wq, pad16(wq.shape[1]), rng))


@pytest.mark.parametrize("name,n,k", [("Q8_0", 49152, 576), ("Q4_1", 49152, 576),
                                      ("Q4_K", 12289, 1024), ("Q6_K", 20001, 768),
                                      ("Q8_0", 40961, 608), ("Q8_0", 2051, 2048)])
def test_head_matches_cpu(name, n, k):
    """x aligned and at an offset of one float (no float4 staging); Q8_0 at K =
    2048: one row a task."""
    rng = np.random.default_rng(seed(name, n, k, "head2"))
    tid, wq, wd = padded_weight(name, n, k, rng)
    wabs = abs_deq(tid, wq, k)
    for xoff in (0, 1):
        x = rng.standard_normal((1, k)).astype(np.float32)
        want = to_numpy(call("ingot_qmatmul", tensor(x), tensor(wq), tid, k))
        got = to_numpy(call("ingot_qmatmul", offset_view(x, x.shape, xoff), wd, tid, k))
        check_close(got, want, x, wabs)


def test_head_special_values():
    """A NaN in x poisons every output, an infinity makes them +-inf or NaN as
    on the CPU."""
    rng = np.random.default_rng(seed("head", "special"))
    k, n = 576, 16384
    tid, wq, wd = padded_weight("Q8_0", n, k, rng)
    for j, v in ((5, np.nan), (300, np.inf)):
        x = rng.standard_normal((1, k)).astype(np.float32)
        x[0, j] = v
        want = to_numpy(call("ingot_qmatmul", tensor(x), tensor(wq), tid, k))
        got = to_numpy(call("ingot_qmatmul", dev(x), wd, tid, k))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,n,k", [("Q8_0", 49152, 576), ("Q4_1", 30001, 576)])
def test_head_fused_norm_res(name, n, k):
    """The model's head: rms_norm of x staged per block; a residual too."""
    rng = np.random.default_rng(seed(name, n, k, "head-fused"))
    tid, wq, wd = padded_weight(name, n, k, rng)
    w64 = to_numpy(call("ingot_qget_rows", tensor(wq), tid, k,
                        tensor(np.arange(n, dtype=np.int64)))).astype(np.float64)
    norm = rng.standard_normal(k).astype(np.float32)
    for res in (None, rng.standard_normal((1, n)).astype(np.float32)):
        x = (rng.standard_normal((1, k)) * 3).astype(np.float32)
        got, want = fused_both(wq, wd, tid, k, x, norm, res, eps=1e-6)
        check_fused_close(got, want, x, w64, norm, 1e-6, res)


def test_head_swiglu():
    """x = gate | up: silu(gate) * up staged, over a weight of 5 MB."""
    rng = np.random.default_rng(seed("head", "glu"))
    k, n = 576, 8191
    tid, wq, wd = padded_weight("Q8_0", n, k, rng)
    wabs = abs_deq(tid, wq, k)
    gu = (rng.standard_normal((1, 2 * k)) * 3).astype(np.float32)
    res = rng.standard_normal((1, n)).astype(np.float32)
    got, want, h = swiglu_both(wq, wd, tid, k, gu, res)
    bound = 2e-5 * (np.abs(h.astype(np.float64)) @ wabs.T + np.abs(res)) + 1e-6
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound)


def test_head_graph_replay():
    """Captured once (norm fused), replayed on new inputs."""
    rng = np.random.default_rng(seed("head", "graph"))
    k, n = 576, 49152
    tid, wq, wd = padded_weight("Q8_0", n, k, rng)
    w64 = to_numpy(call("ingot_qget_rows", tensor(wq), tid, k,
                        tensor(np.arange(n, dtype=np.int64)))).astype(np.float64)
    norm = rng.standard_normal(k).astype(np.float32)
    nd, xd = dev(norm), dev(np.zeros((1, k), np.float32))
    call("ingot_qmatmul_fused", xd, wd, tid, k, nd, 1e-5, None)  # warm-up
    assert lib.ingot_graph_begin(CUDA) == 0, lib.ingot_last_error()
    try:
        out = call("ingot_qmatmul_fused", xd, wd, tid, k, nd, 1e-5, None)
    finally:
        g = lib.ingot_graph_end(CUDA)
    assert g, lib.ingot_last_error()
    try:
        for _ in range(2):
            x = rng.standard_normal((1, k)).astype(np.float32)
            call("ingot_copy_", xd, dev(x))
            assert lib.ingot_graph_replay(g) == 0, lib.ingot_last_error()
            want = to_numpy(call("ingot_qmatmul_fused", tensor(x), tensor(wq), tid, k,
                                 tensor(norm), 1e-5, None))
            check_fused_close(to_numpy(out), want, x, w64, norm, 1e-5, None)
    finally:
        del out  # lives in the graph's private pool: release before the graph
        lib.ingot_graph_destroy(g)
