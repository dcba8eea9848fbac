"""One-row products of ingot in a CUDA graph chain: 48 qmatmul_fused (bf16
weights) or f8matmul_fused (f8e4m3fn + row scales) calls on 48 distinct
weights (nothing served from L2 across calls), captured once and replayed 30
times; prints microseconds a product. Compare with bench/floor/read_floor.cu
(the same chain of pure reads). Qwen3-30B-A3B's shapes: `qkv` = 5120 x 2048
with the RMS norm fused, `o` = 2048 x 4096 with the residual.

Usage (GPU machine, INGOT_LIB set, run from the repository root):
  python3 bench/gemv_chain.py qkv|o [bf16|f8]
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "py"))
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from cuda_diff import CUDA  # noqa: E402
from ingot_ctypes import call, lib, tensor  # noqa: E402
from test_quant import TYPES  # noqa: E402

LAYERS, REPLAYS = 48, 30


def dev(a):
    return call("ingot_to", tensor(a), CUDA)


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else "qkv"
    f8 = len(sys.argv) > 2 and sys.argv[2] == "f8"
    n, k = (5120, 2048) if case == "qkv" else (2048, 4096)
    rng = np.random.default_rng(0)
    if f8:
        ws = [dev(rng.integers(0, 120, (n, k), dtype=np.uint8)) for _ in range(LAYERS)]
        scale = dev(np.full(n, 0.01, np.float32))
    else:
        w = (rng.standard_normal((n, k)) * 0.05).astype(ml_dtypes.bfloat16)
        ws = [dev(w.view(np.uint8).reshape(n, -1)) for _ in range(LAYERS)]
    tid = TYPES["BF16"][0]
    x = dev(rng.standard_normal((1, k)).astype(np.float32))
    norm = dev(np.ones(k, np.float32)) if case == "qkv" else None
    res = dev(rng.standard_normal((1, n)).astype(np.float32)) if case == "o" else None

    def forward():
        if f8:
            return [call("ingot_f8matmul_fused", x, w, scale, k, norm, 1e-6, res) for w in ws]
        return [call("ingot_qmatmul_fused", x, w, tid, k, norm, 1e-6, res) for w in ws]

    forward()
    assert lib.ingot_graph_begin(CUDA) == 0, lib.ingot_last_error()
    outs = forward()
    g = lib.ingot_graph_end(CUDA)
    assert g, lib.ingot_last_error()
    for _ in range(3):
        lib.ingot_graph_replay(g)
    lib.ingot_synchronize(CUDA)
    t0 = time.perf_counter()
    for _ in range(REPLAYS):
        lib.ingot_graph_replay(g)
    lib.ingot_synchronize(CUDA)
    us = (time.perf_counter() - t0) / REPLAYS / LAYERS * 1e6
    print(f"{case} {'f8' if f8 else 'bf16'}: {us:.2f} us a product")
    outs = None  # noqa: F841 (the captured outputs go before the graph)
    lib.ingot_graph_destroy(g)


if __name__ == "__main__":
    main()
