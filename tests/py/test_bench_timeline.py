"""bench/timeline_entry.py on synthetic timeline records: the share of a
kernel's blocks that entered before the previous kernel's end, their
entries, marks and end, in µs after that end."""
import os
import subprocess
import sys

import numpy as np

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
from timeline import REC  # noqa: E402


def records(rows):
    r = np.zeros(len(rows), dtype=REC)
    for i, (kid, grid, t0, t1, m2) in enumerate(rows):
        r[i]["kid"], r[i]["grid"], r[i]["t0"], r[i]["t1"] = kid, grid, t0, t1
        if m2 is not None:
            r[i]["nmarks"] = 3
            r[i]["mark"][2] = m2
    return r


def run(path, *args):
    return subprocess.run([sys.executable, os.path.join(BENCH, "timeline_entry.py"), path, *args],
                          check=True, capture_output=True, text=True).stdout


def test_entry_against_the_kernel_before(tmp_path):
    # Two layers 50 µs apart: attention (kid 2) ends at 2.1 µs; its o
    # product (kid 1, grid 3) enters at -1.6, -0.6 and +0.9 µs; a q|k|v
    # launch (grid 264) in between is left out by --skip-grid.
    rows = []
    for base in (0, 50000):
        rows += [(2, 2, base, base + 2000, None), (2, 2, base + 100, base + 2100, None),
                 (1, 3, base + 500, base + 4000, base + 2600),
                 (1, 3, base + 1500, base + 4100, base + 2700),
                 (1, 3, base + 3000, base + 5000, base + 4500),
                 (1, 264, base + 30000, base + 31000, base + 30500)]
    path = str(tmp_path / "tl.bin")
    records(rows).tofile(path)
    out = run(path, "--skip-grid", "264")
    assert "2 launches, grids [3]" in out
    assert "before the end: mean 0.67, min 0.67, max 0.67" in out
    assert "entered early: median 0.55, p90 0.60 us (4 blocks)" in out
    assert "entered after: median 2.40, p90 2.40 us (2 blocks)" in out
    assert "end, us after the end: median 2.90" in out
    # Without --skip-grid the q|k|v launch is no attention's dependent
    # (it enters 28 µs after): the same two launches are found.
    assert "2 launches" in run(path)


def test_no_dependent(tmp_path):
    path = str(tmp_path / "tl.bin")
    records([(2, 2, 0, 1000, None), (3, 128, 1500, 9000, None)]).tofile(path)
    assert "no gemvx launch follows a attention launch" in run(path)
