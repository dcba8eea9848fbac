"""The linear-algebra workloads of WORKLOADS.md on the CPU, Ingot against
numpy on the same machine (same inputs, interleaved runs, median time).

usage: INGOT_LIB=build/libingot.so python3 bench/bench_linalg_cpu.py [--scale S]
--scale divides the matrix sizes (e.g. 4 for a quick run on a small machine;
the batch of 10000 8x8 inverses is never scaled). numpy/ingot > 1: Ingot is
faster.
"""
import argparse
import os
import sys
import time

import numpy as np
import scipy.linalg as sla

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "py"))
from ingot_ctypes import tensor  # noqa: E402
from linalg_checks import la  # noqa: E402


def median_pair(f_ingot, f_numpy, runs):
    ti, tn = [], []
    f_ingot(), f_numpy()  # warm-up
    for _ in range(runs):
        t0 = time.perf_counter()
        f_ingot()
        t1 = time.perf_counter()
        f_numpy()
        t2 = time.perf_counter()
        ti.append(t1 - t0)
        tn.append(t2 - t1)
    return float(np.median(ti)), float(np.median(tn))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n2, n4 = 2048 // args.scale, 4096 // args.scale
    a2 = rng.standard_normal((n2, n2)).astype(np.float32)
    a4 = rng.standard_normal((n4, n4)).astype(np.float32)
    c2 = (rng.standard_normal((n2, n2)) + 1j * rng.standard_normal((n2, n2))).astype(np.complex64)
    small = (0.1 * rng.standard_normal((10000, 8, 8)) + np.eye(8)).astype(np.float32)
    low = (np.tril(a4) + 64 * np.eye(n4)).astype(np.float32)
    rhs = rng.standard_normal((n4, n4)).astype(np.float32)
    ta2, ta4, tc2, tsm, tlow, trhs = map(tensor, (a2, a4, c2, small, low, rhs))
    rows = [
        ("svd_f32_2048", f"{n2}^2", lambda: la("svd", ta2, False, nout=2),
         lambda: np.linalg.svd(a2, full_matrices=False)),
        ("qr_f32_4096", f"{n4}^2", lambda: la("qr", ta4, 0, nout=1), lambda: np.linalg.qr(a4)),
        ("lu_c64_2048", f"{n2}^2", lambda: la("lu_factor", tc2, nout=1),
         lambda: sla.lu_factor(c2)),
        ("inv_f32_batch10000_8x8", "10000x8x8", lambda: la("inv", tsm),
         lambda: np.linalg.inv(small)),
        ("trsm_f32_4096", f"{n4}^2 x{n4}",
         lambda: la("solve_triangular", tlow, trhs, False, True, False),
         lambda: sla.solve_triangular(low, rhs, lower=True)),
    ]
    print(f"--scale {args.scale}, median of {args.runs} (interleaved runs)")
    print(f"{'workload':26s} {'shape':>14s} {'ingot ms':>10s} {'numpy ms':>10s} "
          f"{'numpy/ingot':>11s}")
    for name, shape, fi, fn in rows:
        ti, tn = median_pair(fi, fn, args.runs)
        print(f"{name:26s} {shape:>14s} {ti * 1e3:10.2f} {tn * 1e3:10.2f} {tn / ti:11.2f}")


if __name__ == "__main__":
    main()
