"""Summarise an in-graph timeline (a -DINGOT_TIMELINE=ON build run with
INGOT_TIMELINE_OUT=FILE; src/cuda/timeline.cuh): per decode step, each
instrumented kernel launch's time (first block's entry to last block's exit)
and the gap before it (from the previous launch's end; negative: the launches
overlap under PDL, a block's entry being before its wait).

FILE holds raw records of 128 bytes (kid, block, grid, nmarks: uint32; t0, t1:
uint64 ns of %globaltimer; mark: 12 x uint64, TL_MARK points), one per block. A launch is a run of one (kid,
grid) in entry order (the decode step never runs one instrumented kernel
twice in a row); a step runs from the embedding row (get_rows) to the
sampler; steps more than 1 ms apart belong to different generations. For
each generation's last `--steps` steps (a captured graph's steady state) it
prints the median step and each kernel's mean time and gap, the layers'
launches folded by kernel and grid.

Usage: python3 bench/timeline.py FILE [--steps 8]
"""
import argparse
import statistics
from collections import defaultdict

import numpy as np

NAMES = {1: "gemvx", 2: "attention", 3: "moe_block", 4: "sample", 5: "qgemv_smem", 6: "get_rows"}
REC = np.dtype([("kid", "<u4"), ("block", "<u4"), ("grid", "<u4"), ("nmarks", "<u4"),
                ("t0", "<u8"), ("t1", "<u8"), ("mark", "<u8", (12,))])


def launches(path):
    r = np.fromfile(path, dtype=REC)
    r = r[np.argsort(r["t0"], kind="stable")]
    key = r["kid"].astype(np.uint64) << np.uint64(32) | r["grid"].astype(np.uint64)
    cut = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    start = np.minimum.reduceat(r["t0"], cut)
    end = np.maximum.reduceat(r["t1"], cut)
    ts = np.unique(np.concatenate([r["t0"], r["t1"]]))
    d = np.diff(ts)
    res = int(d[d > 0].min()) if d.size and (d > 0).any() else 0
    hi = np.append(cut[1:], len(r))
    return [(int(r["kid"][c]), int(r["grid"][c]), int(s), int(e), r[c:h])
            for c, h, s, e in zip(cut, hi, start, end)], res


def steps(ls):
    """Lists of launches from a get_rows to the next sample, grouped by generation."""
    gens, cur, step = [], [], None
    for ln in ls:
        if ln[0] == 6:
            if cur and ln[2] - cur[-1][-1][3] > 1_000_000:
                gens.append(cur)
                cur = []
            step = [ln]
        elif step is not None:
            step.append(ln)
            if ln[0] == 4:
                cur.append(step)
                step = None
    if cur:
        gens.append(cur)
    return gens


def label(ln):
    return f"{NAMES.get(ln[0], ln[0])}[{ln[1]}]"


def report(g, st, nsteps):
    shape = [label(x) for x in st[-1]]
    tail = [s for s in st[-nsteps:] if [label(x) for x in s] == shape]
    if not tail:
        return
    times = [(s[-1][3] - s[0][2]) / 1000 for s in tail]
    print(f"\ngeneration {g}: {len(st)} steps, last {len(tail)}: step "
          f"{statistics.median(times):.1f} us median ({len(shape)} launches)")
    agg, order = defaultdict(lambda: ([], [])), []
    marks = defaultdict(lambda: defaultdict(list))
    for s in tail:
        for i, x in enumerate(s):
            key = shape[i] + (" (head)" if i == len(shape) - 2 else "")
            if key not in agg:
                order.append(key)
            agg[key][0].append((x[3] - x[2]) / 1000)
            agg[key][1].append((x[2] - s[i - 1][3]) / 1000 if i else 0.0)
            if x[4]["nmarks"].max() > 0:  # phases: from the previous launch's end
                base = s[i - 1][3] if i else x[2]
                nm = int(x[4]["nmarks"].max())
                for k in range(nm):
                    v = x[4]["mark"][:, k].astype(np.int64) - base
                    marks[key][k].append((v.mean() / 1000, v.max() / 1000))
                marks[key][nm].append(((x[3] - base) / 1000, (x[3] - base) / 1000))
    print(f"{'kernel[grid]':24s} {'count':>6s} {'mean us':>8s} {'gap before':>11s}")
    n, tot_d, tot_g = len(tail), 0.0, 0.0
    for key in order:
        d, gp = agg[key]
        tot_d += sum(d) / n
        tot_g += sum(gp) / n
        print(f"{key:24s} {len(d) // n:6d} {statistics.mean(d):8.2f} {statistics.mean(gp):11.2f}")
        if key in marks:
            ph = "  ".join(f"m{k} {statistics.mean(a for a, _ in v):.2f}/"
                           f"{statistics.mean(b for _, b in v):.2f}"
                           for k, v in sorted(marks[key].items()))
            print(f"{'':24s} phases after the previous end (mean/last block, us; last = end): {ph}")
    between = [(b[0][2] - a[-1][3]) / 1000 for a, b in zip(tail, tail[1:])]
    print(f"a step: kernels {tot_d:.1f} us + gaps {tot_g:.1f} us; between steps "
          f"{statistics.mean(between) if between else 0:.2f} us")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    ls, res = launches(a.file)
    print(f"{len(ls)} launches; timer resolution {res} ns")
    for g, st in enumerate(steps(ls)):
        report(g, st, a.steps)


if __name__ == "__main__":
    main()
